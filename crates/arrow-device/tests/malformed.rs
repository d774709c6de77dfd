//! The malformed-input suite: one defect per test, fed to the importer.
//!
//! Every struct here is written by hand by the test-side producer
//! (`common/producer.rs`), whose roots count how often the root array and the
//! root schema are released. For every defect the suite asserts that
//!
//! * [`DeviceArray::try_new`] (or `try_from_raw`) returns an error, never
//!   panics or crashes, and, where the defect is in the structs, the error is
//!   [`Error::Invalid`] with the path of the faulty node and a keyword of the
//!   defect in its message (the schema defects: the exact message);
//! * the array and the schema handed over were each released exactly once by
//!   the time the call returns.
//!
//! Each test starts from a valid case of `malformed/cases.rs` (every one of
//! which imports at every level, checked below) and breaks one thing. Level
//! tests (`levels.rs`) pin which level first catches a defect. Schema
//! defects that need no array (a cycle through the root, a tree too large)
//! import the schema alone with `import_field`, which must release nothing;
//! odd but legal schemas are in `accepted.rs`.
//!
//! Defects that crash a naive importer (stack overflow on a cycle, wild reads
//! from a negative count) run in a child process (`isolated_test!`), so that
//! a crash fails one test instead of the suite. `MALFORMED_SHOW=1 cargo test
//! --test malformed -- --nocapture` prints every error message, for review.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::process::Command;

use arrow_array::Array;
use arrow_device::{DeviceArray, Error, ValidationLevel};

mod common;

/// A test whose body runs in a child process (this binary, filtered to the
/// test), so that a crash (stack overflow, wild read) fails that test alone
/// instead of aborting the suite.
macro_rules! isolated_test {
    ($(#[$attr:meta])* fn $name:ident() $body:block) => {
        $(#[$attr])*
        #[test]
        fn $name() {
            let module = module_path!().split_once("::").map_or("", |(_, m)| m);
            crate::run_isolated(&format!("{module}::{}", stringify!($name)), || $body);
        }
    };
}

#[path = "malformed/accepted.rs"]
mod accepted;
#[path = "malformed/cases.rs"]
mod cases;
#[path = "malformed/conversions.rs"]
mod conversions;
#[path = "malformed/copies.rs"]
mod copies;
#[path = "malformed/levels.rs"]
mod levels;
#[path = "malformed/raw_pointers.rs"]
mod raw_pointers;
#[path = "malformed/schema.rs"]
mod schema;
#[path = "malformed/schema_shapes.rs"]
mod schema_shapes;
#[path = "malformed/structure.rs"]
mod structure;
#[path = "malformed/values.rs"]
mod values;

use arrow_device::schema::import_field;
use common::producer::{self, Built, BuiltSchema};
use common::Counters;

/// What one import did, with the release counts seen right after it returned.
enum Outcome {
    Imported(DeviceArray),
    Failed(Error),
    Panicked(String),
}

fn import(
    built: Built,
    level: ValidationLevel,
) -> (Outcome, (usize, usize), std::sync::Arc<Counters>) {
    let Built {
        array,
        schema,
        counters,
    } = built;
    let result = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: the test producer's pointers are all valid allocations; only what they describe is malformed.
        unsafe { DeviceArray::try_new(array, schema, level) }
    }));
    let released = releases(&counters);
    let outcome = match result {
        Ok(Ok(imported)) => Outcome::Imported(imported),
        Ok(Err(err)) => Outcome::Failed(err),
        Err(payload) => Outcome::Panicked(panic_message(payload)),
    };
    (outcome, released, counters)
}

/// `(array releases, schema releases)`, to assert both at once.
fn releases(counters: &Counters) -> (usize, usize) {
    (counters.array_releases(), counters.schema_releases())
}

fn panic_message(payload: Box<dyn std::any::Any + Send>) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "non-string panic payload".into())
}

/// Asserts the import fails with `Error::Invalid` whose path contains `path`
/// and whose message contains `keyword` (ASCII case-insensitive), and that
/// both structs were released exactly once when the call returned.
#[track_caller]
fn expect_invalid(built: Built, level: ValidationLevel, path: &str, keyword: &str) -> Error {
    let err = expect_err(built, level);
    show(&err);
    match &err {
        Error::Invalid {
            path: found_path,
            message,
        } => {
            assert!(
                found_path.contains(path) && message.to_lowercase().contains(&keyword.to_lowercase()),
                "expected path containing {path:?} and a message containing {keyword:?}, got: {err}"
            );
        }
        other => panic!(
            "expected Error::Invalid at {path:?} mentioning {keyword:?}, got {other:?} ({other})"
        ),
    }
    err
}

/// Asserts the import fails with `Error::Invalid` reading exactly
/// `expected` (path and message), and that both structs were released
/// exactly once when the call returned.
#[track_caller]
fn expect_message(built: Built, level: ValidationLevel, expected: &str) {
    let err = expect_err(built, level);
    show(&err);
    assert!(
        matches!(err, Error::Invalid { .. }),
        "expected Error::Invalid, got {err:?}"
    );
    assert_eq!(err.to_string(), expected);
}

/// The text of the `Error::Invalid` that importing the schema `built` alone
/// with `import_field` returns, for defects no array is needed to show.
/// `import_field` borrows the struct where it lies (a cycle through the root
/// points to that address): asserts that it released nothing.
#[track_caller]
fn field_error(built: &BuiltSchema) -> String {
    let before = releases(&built.counters);
    let result = catch_unwind(AssertUnwindSafe(|| import_field(&built.schema)));
    assert_eq!(
        releases(&built.counters),
        before,
        "import_field borrows: it must not release"
    );
    match result {
        Ok(Err(err @ Error::Invalid { .. })) => {
            show(&err);
            err.to_string()
        }
        Ok(other) => panic!("expected Error::Invalid, got {other:?}"),
        Err(payload) => panic!(
            "import_field panicked instead of returning an error: {:?}",
            panic_message(payload)
        ),
    }
}

/// Prints `err` when `MALFORMED_SHOW` is set, for review of the messages.
fn show(err: &Error) {
    if std::env::var_os("MALFORMED_SHOW").is_some() {
        eprintln!("SHOW {err}");
    }
}

/// Asserts the import fails (any variant) without panicking, and that both
/// structs were released exactly once when the call returned.
#[track_caller]
fn expect_err(built: Built, level: ValidationLevel) -> Error {
    let (outcome, released, counters) = import(built, level);
    match outcome {
        Outcome::Failed(err) => {
            assert_eq!(
                released,
                (1, 1),
                "(array, schema) releases when try_new returned {err}"
            );
            err
        }
        Outcome::Panicked(message) => {
            panic!("try_new panicked instead of returning an error: {message:?}; (array, schema) releases: {released:?}")
        }
        Outcome::Imported(imported) => {
            let description = format!("{imported:?}");
            drop(imported);
            panic!(
                "try_new accepted the defect at level {level:?}: {description}; (array, schema) releases after \
                 dropping it: {:?}",
                releases(&counters)
            )
        }
    }
}

/// Asserts the import succeeds; returns the imported array. The schema was
/// released by then, the array is released when the handle drops (checked).
#[track_caller]
fn expect_ok(built: Built, level: ValidationLevel) -> ImportedCase {
    let (outcome, released, counters) = import(built, level);
    match outcome {
        Outcome::Imported(array) => {
            assert_eq!(
                released,
                (0, 1),
                "(array, schema) releases while the import is alive"
            );
            ImportedCase {
                array: Some(array),
                counters,
            }
        }
        Outcome::Failed(err) => panic!("try_new rejected a case valid at level {level:?}: {err}"),
        Outcome::Panicked(message) => {
            panic!("try_new panicked on a case valid at level {level:?}: {message:?}")
        }
    }
}

/// An imported array whose drop checks it released the array exactly once.
struct ImportedCase {
    array: Option<DeviceArray>,
    counters: std::sync::Arc<Counters>,
}

impl std::ops::Deref for ImportedCase {
    type Target = DeviceArray;
    fn deref(&self) -> &DeviceArray {
        self.array.as_ref().expect("present until drop")
    }
}

impl Drop for ImportedCase {
    fn drop(&mut self) {
        drop(self.array.take());
        if !std::thread::panicking() {
            assert_eq!(
                releases(&self.counters),
                (1, 1),
                "(array, schema) releases after the import dropped"
            );
        }
    }
}

const NONE: ValidationLevel = ValidationLevel::None;
const MINIMAL: ValidationLevel = ValidationLevel::Minimal;
const DEFAULT: ValidationLevel = ValidationLevel::Default;
const FULL: ValidationLevel = ValidationLevel::Full;
const LEVELS: [ValidationLevel; 4] = [NONE, MINIMAL, DEFAULT, FULL];

#[test]
fn valid_cases_import_at_every_level_and_pass_arrow_full_validation() {
    for (name, case) in cases::all() {
        for level in LEVELS {
            let imported = expect_ok(case.build(), level);
            assert_eq!(
                imported.len() as i64,
                case.array.length,
                "{name} at {level:?}"
            );
            let host = imported
                .to_host()
                .unwrap_or_else(|e| panic!("{name} at {level:?}: to_host: {e}"));
            host.to_data()
                .validate_full()
                .unwrap_or_else(|e| panic!("{name} at {level:?}: arrow-rs says {e}"));
            assert_eq!(host.len(), imported.len(), "{name}");
        }
    }
}

/// Imports `case` at Full and hands its host copy to `check`; the host
/// array is dropped before the import, so the release check holds.
fn with_host(case: producer::Case, check: impl FnOnce(&dyn Array)) {
    let imported = expect_ok(case.build(), FULL);
    let host = imported.to_host().expect("to_host");
    check(host.as_ref());
}

#[test]
fn valid_cases_have_the_values_the_producer_wrote() {
    use arrow_array::cast::AsArray;
    use arrow_array::types::Int32Type;

    with_host(cases::int32(), |a| {
        assert_eq!(
            a.as_primitive::<Int32Type>().iter().collect::<Vec<_>>(),
            [Some(1), None, Some(3)]
        );
    });
    with_host(cases::utf8_view(), |a| {
        let long = std::str::from_utf8(cases::LONG).unwrap();
        assert_eq!(
            a.as_string_view().iter().collect::<Vec<_>>(),
            [Some("hi"), Some(""), Some(long)]
        );
    });
    with_host(cases::dense_union(), |a| {
        let dense = a.as_union();
        assert_eq!((dense.type_id(1), dense.value_offset(2)), (1, 1));
    });
    with_host(cases::map(), |a| {
        assert_eq!(a.as_map().value_offsets(), [0, 1, 1, 2])
    });
    with_host(cases::run_end_encoded(), |a| {
        let ree = a.as_run::<Int32Type>();
        assert_eq!(ree.run_ends().values(), &[2, 5]);
    });
}

const ISOLATED: &str = "ARROW_DEVICE_MALFORMED_ISOLATED";

/// Runs `body` here when this process is the child, else runs `test_name`
/// alone in a child process and asserts it passed.
fn run_isolated(test_name: &str, body: impl FnOnce()) {
    if std::env::var_os(ISOLATED).is_some() {
        body();
        return;
    }
    let exe = std::env::current_exe().expect("the test binary's path");
    let output = Command::new(exe)
        .args([test_name, "--exact", "--nocapture", "--test-threads", "1"])
        .env(ISOLATED, "1")
        .output()
        .expect("the test binary runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let crash = if stderr.contains("overflowed its stack") {
        " (STACK OVERFLOW)"
    } else if output.status.code().is_none() {
        " (KILLED BY A SIGNAL)"
    } else {
        ""
    };
    assert!(
        output.status.success() && stdout.contains("1 passed"),
        "{test_name} in a child process: {}{crash}\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
        output.status,
    );
}

//! End-to-end tests of `arrow-device check --lib PATH --symbol NAME
//! [--stream]`: the C producers of `tests/c/` (one correct array producer,
//! one correct stream producer, one producer per rule that breaks exactly
//! that rule), compiled once per test binary into a shared library with
//! `$CC` (default `cc`), checked through the built binary.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use common::{arrow_device, dataset_batches, stderr, stdout, write_ipc_file};

/// The producers' shared library, compiled on first use.
fn producers() -> &'static str {
    static LIBRARY: OnceLock<PathBuf> = OnceLock::new();
    LIBRARY
        .get_or_init(compile_producers)
        .to_str()
        .expect("target paths are UTF-8 here")
}

fn compile_producers() -> PathBuf {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("check-producers");
    std::fs::create_dir_all(&dir).unwrap();
    let library = dir.join("libcheck_producers.so");
    // Built under a name of this process, then renamed into place: another
    // test run may have the previous library loaded.
    let partial = dir.join(format!("libcheck_producers.{}.so", std::process::id()));
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_string());
    let mut words = cc.split_whitespace();
    let program = words.next().expect("CC names a compiler");
    let output = Command::new(program)
        .args(words)
        .args([
            "-std=c99", "-Wall", "-Wextra", "-g", "-shared", "-fPIC", "-I",
        ])
        .arg(crate_dir.join("../arrow-device/include"))
        .args(["tree.c", "arrays.c", "streams.c"].map(|f| crate_dir.join("tests/c").join(f)))
        .arg("-o")
        .arg(&partial)
        .output()
        .unwrap_or_else(|e| panic!("cannot run the C compiler {cc:?} (set CC): {e}"));
    assert!(
        output.status.success(),
        "compiling tests/c with {cc:?} failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    std::fs::rename(&partial, &library).unwrap();
    library
}

/// `arrow-device check` on `symbol` of the producers.
fn check(symbol: &str, stream: bool) -> Output {
    let mut args = vec!["check", "--lib", producers(), "--symbol", symbol];
    if stream {
        args.push("--stream");
    }
    arrow_device(&args)
}

/// The `(check id, outcome)` rows of a report's table.
fn rows(report: &str) -> Vec<(String, String)> {
    report
        .lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            let id = words.next()?;
            let outcome = words.next()?;
            (id.starts_with("device_array.") || id.starts_with("device_stream."))
                .then(|| (id.to_string(), outcome.to_string()))
        })
        .collect()
}

/// Asserts the exit code, that each `(id, outcome)` of `expected` is a
/// row with that outcome, and that every other row passed or does not
/// apply: the producer broke exactly these rules. Returns the report.
fn assert_outcomes(output: &Output, code: i32, expected: &[(&str, &str)]) -> String {
    let out = stdout(output);
    let shown = format!("{out}\nstderr:\n{}", stderr(output));
    assert_eq!(output.status.code(), Some(code), "{shown}");
    let rows = rows(&out);
    assert!(!rows.is_empty(), "{shown}");
    for (id, outcome) in expected {
        assert!(
            rows.iter().any(|(i, o)| i == id && o == outcome),
            "expected {id} {outcome}\n{shown}"
        );
    }
    for (id, outcome) in &rows {
        if !expected.iter().any(|(i, _)| i == id) {
            assert!(
                outcome == "passed" || outcome == "n/a",
                "{id} is {outcome}, expected passed or n/a\n{shown}"
            );
        }
    }
    out
}

/// The row of check `id` in `report`.
fn row<'a>(report: &'a str, id: &str) -> &'a str {
    report
        .lines()
        .find(|line| line.split_whitespace().next() == Some(id))
        .unwrap_or_else(|| panic!("no row {id}\n{report}"))
}

const ARRAY_IDS: [&str; 8] = [
    "device_array.schema_release_once",
    "device_array.device",
    "device_array.sync_event",
    "device_array.reserved",
    "device_array.valid_full",
    "device_array.alignment",
    "device_array.release_once",
    "device_array.child_move",
];

#[test]
fn a_correct_array_producer_passes_every_check() {
    let output = check("correct_array", false);
    let out = assert_outcomes(&output, 0, &[]);
    let ids: Vec<String> = rows(&out).into_iter().map(|(id, _)| id).collect();
    assert_eq!(ids, ARRAY_IDS, "{out}");
    assert!(
        out.starts_with(&format!(
            "conformance of correct_array in {}\n",
            producers()
        )),
        "{out}"
    );
    assert!(
        out.ends_with("PASSED: 8 passed, 0 failed, 0 advisory, 0 not applicable\n"),
        "{out}"
    );
}

#[test]
fn a_correct_stream_producer_passes_every_check() {
    let output = check("correct_stream", true);
    let out = assert_outcomes(&output, 0, &[("device_stream.last_error", "n/a")]);
    assert_eq!(rows(&out).len(), 12, "{out}");
    assert!(
        row(&out, "device_stream.valid_full").contains("3 of 3 batches"),
        "{out}"
    );
    assert!(
        out.ends_with("PASSED: 11 passed, 0 failed, 0 advisory, 1 not applicable\n"),
        "{out}"
    );
}

#[test]
fn nonzero_reserved_bytes_fail_device_array_reserved() {
    let out = assert_outcomes(
        &check("array_reserved_nonzero", false),
        1,
        &[("device_array.reserved", "failed")],
    );
    assert!(
        row(&out, "device_array.reserved").contains("[0, 7, 0]"),
        "{out}"
    );
}

#[test]
fn a_cpu_array_with_device_id_0_fails_device_array_device() {
    let out = assert_outcomes(
        &check("array_cpu_device_id_0", false),
        1,
        &[("device_array.device", "failed")],
    );
    assert!(
        row(&out, "device_array.device").contains("device_id 0"),
        "{out}"
    );
}

#[test]
fn an_unknown_device_type_fails_device_array_device() {
    let out = assert_outcomes(
        &check("array_unknown_device_type", false),
        1,
        &[("device_array.device", "failed")],
    );
    assert!(row(&out, "device_array.device").contains("999"), "{out}");
}

#[test]
fn a_sync_event_on_the_cpu_fails_device_array_sync_event() {
    let out = assert_outcomes(
        &check("array_cpu_sync_event", false),
        1,
        &[("device_array.sync_event", "failed")],
    );
    assert!(
        row(&out, "device_array.sync_event").contains("on the CPU"),
        "{out}"
    );
}

#[test]
fn decreasing_utf8_offsets_fail_device_array_valid_full() {
    let out = assert_outcomes(
        &check("array_decreasing_offsets", false),
        1,
        &[("device_array.valid_full", "failed")],
    );
    assert!(
        row(&out, "device_array.valid_full").contains("field \"b\""),
        "{out}"
    );
}

#[test]
fn a_release_that_leaves_the_dictionary_fails_device_array_release_once() {
    let out = assert_outcomes(
        &check("array_dictionary_not_released", false),
        1,
        &[("device_array.release_once", "failed")],
    );
    assert!(
        row(&out, "device_array.release_once").contains("array.dictionary released 0 times"),
        "{out}"
    );
}

#[test]
fn a_schema_release_that_keeps_its_children_fails_schema_release_once() {
    let out = assert_outcomes(
        &check("array_schema_children_not_released", false),
        1,
        &[("device_array.schema_release_once", "failed")],
    );
    assert!(
        row(&out, "device_array.schema_release_once")
            .contains("schema.children[1] released 0 times"),
        "{out}"
    );
}

#[test]
fn a_parent_release_that_overwrites_a_moved_child_fails_device_array_child_move() {
    let out = assert_outcomes(
        &check("array_parent_overwrites_children", false),
        1,
        &[("device_array.child_move", "failed")],
    );
    assert!(
        row(&out, "device_array.child_move").contains("changed values"),
        "{out}"
    );
}

#[test]
fn a_misaligned_int32_buffer_is_advisory_and_the_report_passes() {
    let out = assert_outcomes(
        &check("array_misaligned_int32", false),
        0,
        &[("device_array.alignment", "advisory")],
    );
    assert!(
        row(&out, "device_array.alignment").contains("array.children[0].buffers[1] (values)"),
        "{out}"
    );
    assert!(
        out.contains("PASSED: 7 passed, 0 failed, 1 advisory"),
        "{out}"
    );
}

#[test]
fn a_producer_returning_non_zero_fails_device_array_export() {
    let out = assert_outcomes(
        &check("array_failing_export", false),
        1,
        &[("device_array.export", "failed")],
    );
    assert!(
        row(&out, "device_array.export").ends_with("array_failing_export returned 22"),
        "{out}"
    );
    assert_eq!(rows(&out).len(), 1, "{out}");
}

#[test]
fn a_schema_that_changes_between_calls_fails_device_stream_get_schema_stable() {
    let out = assert_outcomes(
        &check("stream_unstable_schema", true),
        1,
        &[("device_stream.get_schema_stable", "failed")],
    );
    assert!(
        row(&out, "device_stream.get_schema_stable").contains("name: \"c\""),
        "{out}"
    );
}

#[test]
fn batches_after_the_end_fail_device_stream_end_repeats() {
    let out = assert_outcomes(
        &check("stream_restarts_after_end", true),
        1,
        &[("device_stream.end_repeats", "failed")],
    );
    assert!(
        row(&out, "device_stream.end_repeats").contains("call 1 after the end gave a batch"),
        "{out}"
    );
}

#[test]
fn a_batch_on_another_device_type_fails_device_stream_device() {
    let out = assert_outcomes(
        &check("stream_batches_on_another_device", true),
        1,
        &[("device_stream.device", "failed")],
    );
    assert!(
        row(&out, "device_stream.device")
            .contains("batch 0: an array on CPU from a stream of device_type EXT_DEV"),
        "{out}"
    );
}

#[test]
fn a_last_error_that_is_not_utf8_fails_device_stream_last_error() {
    // The failing get_next that makes get_last_error callable is itself
    // reported, under valid_full; the end is then never reached.
    let out = assert_outcomes(
        &check("stream_last_error_not_utf8", true),
        1,
        &[
            ("device_stream.last_error", "failed"),
            ("device_stream.valid_full", "failed"),
            ("device_stream.end_repeats", "n/a"),
        ],
    );
    assert!(
        row(&out, "device_stream.last_error").contains("not UTF-8"),
        "{out}"
    );
    assert!(
        row(&out, "device_stream.valid_full").contains("batch 1: get_next returned 5"),
        "{out}"
    );
}

#[test]
fn a_stream_release_that_does_not_mark_it_fails_device_stream_stream_release() {
    let out = assert_outcomes(
        &check("stream_release_not_marked", true),
        1,
        &[("device_stream.stream_release", "failed")],
    );
    assert!(
        row(&out, "device_stream.stream_release").contains("did not set release to NULL"),
        "{out}"
    );
}

#[test]
fn a_null_get_last_error_fails_device_stream_callbacks() {
    let out = assert_outcomes(
        &check("stream_without_get_last_error", true),
        1,
        &[("device_stream.callbacks", "failed")],
    );
    assert!(
        row(&out, "device_stream.callbacks").contains("get_last_error NULL on a live stream"),
        "{out}"
    );
}

#[test]
fn a_missing_library_is_a_usage_error_naming_it_and_the_loaders_reason() {
    let missing = Path::new(env!("CARGO_TARGET_TMPDIR")).join("no-such-producer.so");
    let missing = missing.to_str().unwrap();
    let output = arrow_device(&["check", "--lib", missing, "--symbol", "correct_array"]);
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    let err = stderr(&output);
    assert_eq!(err.lines().count(), 1, "{err}");
    let prefix = format!("arrow-device check: error: cannot load the library {missing}: ");
    let reason = err.trim_end().strip_prefix(&prefix);
    assert!(reason.is_some_and(|r| !r.is_empty()), "{err}");
    assert!(stdout(&output).is_empty());
}

#[test]
fn a_missing_symbol_is_a_usage_error_naming_it_and_the_loaders_reason() {
    let output = check("no_such_producer", false);
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    let err = stderr(&output);
    assert_eq!(err.lines().count(), 1, "{err}");
    let prefix = format!(
        "arrow-device check: error: cannot find the symbol no_such_producer in {}: ",
        producers()
    );
    let reason = err.trim_end().strip_prefix(&prefix);
    assert!(reason.is_some_and(|r| !r.is_empty()), "{err}");
}

#[test]
fn check_without_a_symbol_is_a_usage_error() {
    let output = arrow_device(&["check", "--lib", producers()]);
    assert_eq!(output.status.code(), Some(2));
    let err = stderr(&output);
    assert!(err.contains("--symbol <NAME>"), "{err}");
    assert!(err.contains("arrow-device check"), "{err}");
}

#[test]
fn help_says_how_to_read_a_data_file_named_check() {
    let out = stdout(&arrow_device(&["--help"]));
    assert!(out.contains("arrow-device check --lib"), "{out}");
    assert!(out.contains("./check"), "{out}");
    let out = stdout(&arrow_device(&["check", "--help"]));
    assert!(out.contains("--lib <PATH>"), "{out}");
    assert!(out.contains("--stream"), "{out}");
}

#[test]
fn a_data_file_named_check_is_read_as_dot_slash_check() {
    let dir =
        Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("check-file-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    write_ipc_file(&dir.join("check"), &dataset_batches(100, 100));
    let output = Command::new(env!("CARGO_BIN_EXE_arrow-device"))
        .args(["./check", "--device", "cpu", "--no-progress"])
        .current_dir(&dir)
        .output()
        .unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    let out = stdout(&output);
    assert!(output.status.success(), "{out}\n{}", stderr(&output));
    assert!(out.ends_with("\nverified: equal\n"), "{out}");
}

//! A conformance checker for producers of the C (Device) Data Interface.
//!
//! Every library that produces `ArrowDeviceArray`s, `ArrowArray`s or their
//! streams tests itself against itself; this module is a strict consumer
//! that checks each rule it can observe and reports what it saw. The
//! Python package (`arrow_device.conformance`) and the command line
//! (`arrow-device check`) are built on it, and add the rules of the
//! PyCapsule protocol, DLPack and the CUDA Array Interface.
//!
//! A producer is a closure that exports a fresh struct tree each time it is
//! called (some rules need two: moving a child out destroys the tree's
//! first use). The checker takes ownership of what it is given, as any
//! consumer does, and releases it exactly once.
//!
//! How release is observed: before the checker uses a tree, it swaps every
//! non-released node's `release` for a callback of its own that counts the
//! call, puts the producer's callback back, calls it, and notes whether it
//! marked the struct released. The producer's code never sees the swap:
//! its callbacks are called on its own structs, at their own addresses.
//!
//! ```
//! use arrow_array::Int32Array;
//! use arrow_device::conformance::{check_device_array, Scope};
//! use arrow_device::export_array;
//!
//! let values = Int32Array::from(vec![1, 2, 3]);
//! let checks = check_device_array(Scope::DeviceArray, None, &mut || {
//!     export_array(&values).map_err(|e| e.to_string())
//! });
//! let report = arrow_device::conformance::Report::new("export_array", checks);
//! assert!(report.passed(), "{report}");
//! ```

mod array;
mod follow;
mod stream;
mod values;
mod watch;

use std::fmt;

pub use array::{check_array, check_device_array, check_schema, ArrayExport, DeviceArrayExport};
pub use follow::follow;
pub use stream::{check_device_stream, check_stream, MAX_BATCHES};
pub use values::compare_values;
pub use watch::{lost_calls, watch, Watch};

/// What a check found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The rule holds for what was observed.
    Passed,
    /// The rule is broken; the message says how.
    Failed,
    /// The rule does not apply to this producer (no such method, a CPU
    /// array for a device rule, ...), or could not be observed.
    NotApplicable,
}

impl Outcome {
    /// `passed`, `failed`, `not_applicable`.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Passed => "passed",
            Outcome::Failed => "failed",
            Outcome::NotApplicable => "not_applicable",
        }
    }
}

/// The part of the protocol a check belongs to: the prefix of its id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// `ArrowSchema` (`__arrow_c_schema__`).
    Schema,
    /// `ArrowArray` with its schema (`__arrow_c_array__`).
    Array,
    /// `ArrowDeviceArray` with its schema (`__arrow_c_device_array__`).
    DeviceArray,
    /// `ArrowArrayStream` (`__arrow_c_stream__`).
    Stream,
    /// `ArrowDeviceArrayStream` (`__arrow_c_device_stream__`).
    DeviceStream,
    /// DLPack (`__dlpack__`, `__dlpack_device__`).
    Dlpack,
    /// The CUDA Array Interface (`__cuda_array_interface__`).
    Cai,
    /// A consumer given this crate's producers (`check_consumer`).
    Consumer,
}

impl Scope {
    /// The id prefix: `schema`, `array`, `device_array`, `stream`,
    /// `device_stream`, `dlpack`, `cai`.
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Schema => "schema",
            Scope::Array => "array",
            Scope::DeviceArray => "device_array",
            Scope::Stream => "stream",
            Scope::DeviceStream => "device_stream",
            Scope::Dlpack => "dlpack",
            Scope::Cai => "cai",
            Scope::Consumer => "consumer",
        }
    }

    /// Whether the structs carry a device (`ArrowDeviceArray`s).
    pub fn is_device(self) -> bool {
        matches!(self, Scope::DeviceArray | Scope::DeviceStream)
    }

    const ALL: [Scope; 8] = [
        Scope::Schema,
        Scope::Array,
        Scope::DeviceArray,
        Scope::Stream,
        Scope::DeviceStream,
        Scope::Dlpack,
        Scope::Cai,
        Scope::Consumer,
    ];
}

/// One rule of the catalogue: `scope.name` is a check's stable id.
#[derive(Debug, Clone, Copy)]
pub struct Rule {
    /// The rule's name within its scopes (`release_once`, ...).
    pub name: &'static str,
    /// The scopes the rule is checked in.
    pub scopes: &'static [Scope],
    /// Where the spec states it.
    pub section: &'static str,
    /// What a conforming producer does.
    pub summary: &'static str,
    /// An advisory rule: its failure is reported but does not fail the
    /// report (a habit of most producers that the spec does not require).
    pub advisory: bool,
}

use Scope::{
    Array as A, Cai as CAI, Consumer as CO, DeviceArray as DA, DeviceStream as DS, Dlpack as DL,
    Schema as SC, Stream as ST,
};

const ARRAYS: &[Scope] = &[A, DA, ST, DS];
const DEVICE: &[Scope] = &[DA, DS];
const STREAMS: &[Scope] = &[ST, DS];
const CAPSULES: &[Scope] = &[SC, A, DA, ST, DS, DL];
const ARROW_METHODS: &[Scope] = &[SC, A, DA, ST, DS];

/// Every rule the checkers know, in report order.
pub const RULES: &[Rule] = &[
    Rule { name: "export", scopes: ARROW_METHODS, section: "PyCapsule Interface § Export Protocol",
        summary: "the export succeeds and returns the structs (capsules) the protocol names", advisory: false },
    Rule { name: "capsule_names", scopes: CAPSULES, section: "PyCapsule Interface § PyCapsule Standard",
        summary: "capsules are named arrow_schema, arrow_array, arrow_device_array, arrow_array_stream, arrow_device_array_stream, dltensor[_versioned]", advisory: false },
    Rule { name: "capsule_destructor", scopes: CAPSULES, section: "PyCapsule Interface § Lifetime Semantics",
        summary: "a capsule that is never consumed releases its struct, once, when it is destroyed", advisory: false },
    Rule { name: "requested_schema_none", scopes: &[A, DA, ST, DS], section: "PyCapsule Interface § Schema Requests",
        summary: "requested_schema=None is accepted and means the producer's own schema", advisory: false },
    Rule { name: "kwargs_none", scopes: DEVICE, section: "PyCapsule Interface § Device Support",
        summary: "an extra keyword argument whose value is None is accepted", advisory: false },
    Rule { name: "unknown_kwarg", scopes: DEVICE, section: "PyCapsule Interface § Device Support",
        summary: "an unknown keyword argument with a non-None value raises NotImplementedError", advisory: false },
    Rule { name: "schema_agrees", scopes: &[A, DA, ST, DS], section: "PyCapsule Interface § ArrowSchema Export",
        summary: "__arrow_c_schema__ describes the same type as the data's own schema", advisory: false },
    Rule { name: "callbacks", scopes: STREAMS, section: "C Stream Interface § Structure definition",
        summary: "get_schema, get_next, get_last_error and release are non-NULL on a live stream", advisory: false },
    Rule { name: "schema_release_once", scopes: &[SC, A, DA, ST, DS], section: "C Data Interface § Release callback semantics -- for consumers",
        summary: "one call of the schema's release releases the whole schema tree, each node exactly once, and marks it released", advisory: false },
    Rule { name: "valid_schema", scopes: &[SC], section: "C Data Interface § Data type description -- format strings",
        summary: "the schema parses: format strings, flags, names and metadata as the spec describes", advisory: false },
    Rule { name: "device", scopes: DEVICE, section: "C Device Data Interface § The ArrowDeviceArray structure",
        summary: "device_type is an ArrowDeviceType and device_id agrees with it (-1 on the CPU); a device stream's arrays are on the stream's device type", advisory: false },
    Rule { name: "sync_event", scopes: DEVICE, section: "C Device Data Interface § Synchronization event types",
        summary: "sync_event is NULL on the CPU; on a device NULL (the data is ready) or an event of the device that can be waited on", advisory: false },
    Rule { name: "reserved", scopes: DEVICE, section: "C Device Data Interface § The ArrowDeviceArray structure",
        summary: "the reserved bytes are zero", advisory: false },
    Rule { name: "valid_full", scopes: ARRAYS, section: "Columnar Format (validated at the full level)",
        summary: "the data validates against its schema at the full level (structure, offsets, UTF-8, dictionary keys, ...)", advisory: false },
    Rule { name: "alignment", scopes: ARRAYS, section: "Columnar Format § Buffer Alignment and Padding",
        summary: "buffers are aligned to their values' width, as arrow-rs expects for zero-copy use (advisory: a consumer may copy)", advisory: true },
    Rule { name: "release_once", scopes: ARRAYS, section: "C Data Interface § Release callback semantics -- for consumers",
        summary: "one call of the root's release releases the whole tree, each child and dictionary exactly once, and marks every struct released", advisory: false },
    Rule { name: "child_move", scopes: &[A, DA], section: "C Data Interface § Moving child arrays",
        summary: "a child moved out of the tree keeps its data after the parent is released, and its own release releases it", advisory: false },
    Rule { name: "get_schema_stable", scopes: STREAMS, section: "C Stream Interface § Semantics",
        summary: "get_schema gives the same schema on every call", advisory: false },
    Rule { name: "end_repeats", scopes: STREAMS, section: "C Stream Interface § Semantics",
        summary: "get_next after the end keeps returning 0 and a released array", advisory: false },
    Rule { name: "last_error", scopes: STREAMS, section: "C Stream Interface § Error handling",
        summary: "after a failed call, get_last_error returns NULL or a NUL-terminated UTF-8 message (it may only be called then)", advisory: false },
    Rule { name: "stream_release", scopes: STREAMS, section: "C Stream Interface § Result lifetimes",
        summary: "one call of release releases the stream and marks it released (NULL release), so nothing on it is callable after", advisory: false },
    Rule { name: "device_matches", scopes: &[DL], section: "DLPack § __dlpack_device__",
        summary: "__dlpack_device__ returns the device of the tensor __dlpack__ exports", advisory: false },
    Rule { name: "max_version", scopes: &[DL], section: "DLPack § max_version",
        summary: "max_version=(1, x) gives a versioned tensor (dltensor_versioned) of a version the consumer allows; no max_version gives a legacy dltensor", advisory: false },
    Rule { name: "consumed", scopes: &[DL], section: "DLPack § capsule renaming",
        summary: "a capsule renamed used_dltensor[_versioned] by its consumer does not call the deleter on destruction; the consumer's one deleter call frees the tensor", advisory: false },
    Rule { name: "stream", scopes: &[DL, CAI], section: "DLPack § stream / CUDA Array Interface § stream",
        summary: "the stream rules: DLPack accepts stream=None (and -1 on a device); CAI's stream is absent, None or a non-zero integer", advisory: false },
    Rule { name: "version", scopes: &[CAI], section: "CUDA Array Interface v3 § version",
        summary: "version is 3 (2 and 1 are older, still readable)", advisory: false },
    Rule { name: "layout", scopes: &[CAI], section: "CUDA Array Interface v3 § shape, typestr, strides",
        summary: "shape, typestr and strides describe a non-overlapping array; data is (pointer, read_only)", advisory: false },
    Rule { name: "mask", scopes: &[CAI], section: "CUDA Array Interface v3 § mask",
        summary: "mask is absent or None, or an object with the CUDA Array Interface of the array's shape and a boolean or integer typestr", advisory: false },
    Rule { name: "accepts", scopes: &[CO], section: "PyCapsule Interface § Export Protocol",
        summary: "the consumer takes the producer's data, or refuses it with an exception (a device it cannot use); it consumes at least the CPU forms", advisory: false },
    Rule { name: "host_read", scopes: &[CO], section: "C Device Data Interface § The ArrowDeviceArray structure",
        summary: "the consumer never dereferences device memory on the host (the emulated device's strict mode crashes a process that does)", advisory: false },
    Rule { name: "values", scopes: &[CO], section: "C Device Data Interface § Synchronization",
        summary: "the consumer read the producer's final values: it waited on the sync_event before reading (a delayed device holds poison until then)", advisory: false },
    Rule { name: "release", scopes: &[CO], section: "C Data Interface § Release callback semantics -- for consumers",
        summary: "everything the consumer took (arrays, schemas, streams, their batches) is released exactly once, by the time its result is dropped", advisory: false },
];

/// The rule named `name` (the part of an id after the scope).
pub fn rule(name: &str) -> Option<&'static Rule> {
    RULES.iter().find(|rule| rule.name == name)
}

/// Every check id the catalogue defines (`scope.rule`), in report order.
pub fn check_ids() -> Vec<String> {
    let mut ids = Vec::new();
    for scope in Scope::ALL {
        for rule in RULES.iter().filter(|rule| rule.scopes.contains(&scope)) {
            ids.push(format!("{}.{}", scope.as_str(), rule.name));
        }
    }
    ids
}

/// One check's result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    /// `scope.rule`, stable across versions (e.g. `device_array.release_once`).
    pub id: String,
    /// What was found.
    pub outcome: Outcome,
    /// What was seen, and what the spec asks where it differs.
    pub message: String,
    /// Where the spec states the rule.
    pub section: &'static str,
    /// Whether a failure is advisory (does not fail a report).
    pub advisory: bool,
}

impl Check {
    /// A check of rule `name` in `scope`.
    ///
    /// # Panics
    /// When the rule is not in [`RULES`] (a bug of the checker, caught by its
    /// tests).
    pub fn new(scope: Scope, name: &str, outcome: Outcome, message: impl Into<String>) -> Check {
        let rule = rule(name).unwrap_or_else(|| panic!("no conformance rule named {name}"));
        debug_assert!(
            rule.scopes.contains(&scope),
            "{name} is not a rule of {scope:?}"
        );
        Check {
            id: format!("{}.{}", scope.as_str(), name),
            outcome,
            message: message.into(),
            section: rule.section,
            advisory: rule.advisory,
        }
    }

    /// Whether this check fails its report (failed, not advisory).
    pub fn is_failure(&self) -> bool {
        self.outcome == Outcome::Failed && !self.advisory
    }
}

/// The checks run on one producer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    /// What was checked (an expression, a library and symbol, ...).
    pub subject: String,
    /// Every check, in the order they ran.
    pub checks: Vec<Check>,
}

impl Report {
    /// A report on `subject`.
    pub fn new(subject: impl Into<String>, checks: Vec<Check>) -> Report {
        Report {
            subject: subject.into(),
            checks,
        }
    }

    /// No check failed (advisory failures aside).
    pub fn passed(&self) -> bool {
        !self.checks.iter().any(Check::is_failure)
    }

    /// The checks that fail the report.
    pub fn failures(&self) -> Vec<&Check> {
        self.checks.iter().filter(|c| c.is_failure()).collect()
    }
}

impl fmt::Display for Report {
    /// A table: id, outcome, message; then a one-line verdict.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let rows: Vec<[&str; 3]> = self
            .checks
            .iter()
            .map(|c| [c.id.as_str(), outcome_label(c), c.message.as_str()])
            .collect();
        f.write_str(&render_table(&self.subject, &rows))
    }
}

/// `passed`, `failed`, `advisory` (a failed advisory check), `n/a`.
fn outcome_label(check: &Check) -> &'static str {
    match check.outcome {
        Outcome::Failed if check.advisory => "advisory",
        Outcome::NotApplicable => "n/a",
        outcome => outcome.as_str(),
    }
}

/// The report table of `subject` with rows `[id, outcome, message]` (the
/// outcome as `passed`, `failed`, `advisory` or `n/a`): the one renderer
/// of the library, the command line and the Python package.
pub fn render_table(subject: &str, rows: &[[&str; 3]]) -> String {
    let id_width = rows.iter().map(|r| r[0].len()).max().unwrap_or(0).max(5);
    let mut out = format!("conformance of {subject}\n");
    out.push_str(&format!(
        "{:id_width$}  {:8}  message\n",
        "check", "outcome"
    ));
    for [id, outcome, message] in rows {
        let mut lines = message.lines();
        out.push_str(&format!(
            "{id:id_width$}  {outcome:8}  {}\n",
            lines.next().unwrap_or("")
        ));
        for line in lines {
            out.push_str(&format!("{:id_width$}  {:8}  {line}\n", "", ""));
        }
    }
    let failed = rows.iter().filter(|r| r[1] == "failed").count();
    let count = |label: &str| rows.iter().filter(|r| r[1] == label).count();
    out.push_str(&format!(
        "{}: {} passed, {failed} failed, {} advisory, {} not applicable\n",
        if failed == 0 { "PASSED" } else { "FAILED" },
        count("passed"),
        count("advisory"),
        count("n/a"),
    ));
    out
}

#[cfg(test)]
mod tests;

//! The fuzz harnesses of arrow-device: one module per target, each with
//! `run(data)`, which decodes a case from the input, feeds it to the entry
//! point under test and panics when an oracle fails (a struct released
//! twice or never, a value changed by a round trip, an accepted array that
//! arrow-rs rejects), and `seeds()`, the named inputs the campaign starts
//! from.
//!
//! The same `run` serves libFuzzer (`fuzz_targets/*.rs`, nightly, through
//! `cargo fuzz`; see `scripts/fuzz.sh`) and the corpus replay of the test
//! suite (`tests/replay.rs`, stable Rust): a crash found by the fuzzer and
//! added to `corpus/` is a regression test from then on.

pub mod gen;
pub mod input;
pub mod memory;
pub mod metadata;
pub mod seeds;
mod stream_cases;
pub mod tree;

pub mod array_import;
pub mod async_stream;
pub mod cai;
pub mod dlpack;
pub mod roundtrip;
pub mod schema;
pub mod share_handle;
pub mod sync_stream;

// The one hand-written producer of (malformed) C trees of the test suites,
// and its release counters: the fuzzers build their trees with it too.
#[allow(dead_code)]
#[path = "../../crates/arrow-device/tests/common/producer.rs"]
pub mod producer;
#[allow(dead_code)]
#[path = "../../crates/arrow-device/tests/common/release.rs"]
pub mod release;
// The malformed suite's valid cases (one per layout family), which the
// array-import seeds break one way each, as the suite does.
#[allow(dead_code)]
#[path = "../../crates/arrow-device/tests/malformed/cases.rs"]
pub mod malformed_cases;
/// The path the included test files name the producer by.
mod common {
    pub use crate::producer;
}

/// Whether `ARROW_DEVICE_FUZZ_DEBUG` is set: the harnesses then print the
/// case they decoded, to read a crashing input.
pub fn debug() -> bool {
    static DEBUG: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *DEBUG.get_or_init(|| std::env::var_os("ARROW_DEVICE_FUZZ_DEBUG").is_some())
}

/// A fuzz target: its name (that of its `fuzz_targets/` binary and its
/// `corpus/` directory), its harness and its seeds.
pub struct Target {
    pub name: &'static str,
    pub run: fn(&[u8]),
    pub seeds: fn() -> Vec<(String, Vec<u8>)>,
}

/// Every target, in the order the scripts run them.
pub const TARGETS: &[Target] = &[
    Target {
        name: "array_import",
        run: array_import::run,
        seeds: array_import::seeds,
    },
    Target {
        name: "schema",
        run: schema::run,
        seeds: schema::seeds,
    },
    Target {
        name: "sync_stream",
        run: sync_stream::run,
        seeds: sync_stream::seeds,
    },
    Target {
        name: "async_stream",
        run: async_stream::run,
        seeds: async_stream::seeds,
    },
    Target {
        name: "dlpack",
        run: dlpack::run,
        seeds: dlpack::seeds,
    },
    Target {
        name: "cai",
        run: cai::run,
        seeds: cai::seeds,
    },
    Target {
        name: "roundtrip",
        run: roundtrip::run,
        seeds: roundtrip::seeds,
    },
    Target {
        name: "share_handle",
        run: share_handle::run,
        seeds: share_handle::seeds,
    },
];

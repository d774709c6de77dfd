//! Shared fixtures for the integration tests: one non-trivial array of every
//! type arrow-rs supports ([`all_types`]), a record batch with metadata and an
//! extension type ([`batch_with_metadata`]), release counters ([`Counters`],
//! and [`counting`] for structs of another producer) that prove each root
//! struct is released exactly once, a hand-written producer of malformed
//! trees ([`producer`]) whose roots count their releases, the emulated
//! device in strict, delayed mode ([`emulated`]), device arrays made from
//! arrow-rs data ([`device_array`], [`counted_device_array`]) and assertions
//! that name the failing case or the error expected
//! ([`assert_mentions`], [`expect_producer_error`], [`assert_producer_error`],
//! [`assert_consumer_error`]).
//!
//! Each test binary compiles this module on its own and uses part of it.
#![allow(dead_code, unused_imports)]

pub mod async_harness;
mod counting_device;
#[cfg(feature = "cuda")]
pub mod gpu;
pub mod producer;
mod release;
mod types;

use std::ffi::c_int;
use std::fmt::Display;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::time::Duration;

use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_device::device::emulated::{EmulatedConfig, EmulatedDevice};
use arrow_device::device::DeviceRef;
use arrow_device::{
    export_array, export_record_batch, export_record_batch_to, DeviceArray, Error, ValidationLevel,
};

pub use counting_device::CountingWaits;
pub use release::{counting, Counters};
pub use types::{all_types, batch_with_metadata, EXTENSION_NAME};

/// Asserts that `found` has the type and (logical) values of `expected`,
/// naming the case on failure. `found` is validated first: data read from a
/// device before its event completed is garbage that arrow-rs must not
/// format or compare unchecked.
pub fn assert_same(case: &str, expected: &dyn Array, found: &dyn Array) {
    assert_eq!(
        found.data_type(),
        expected.data_type(),
        "{case}: data type changed"
    );
    assert_eq!(found.len(), expected.len(), "{case}: length changed");
    if let Err(e) = found.to_data().validate_full() {
        panic!("{case}: the round trip produced invalid data: {e}");
    }
    assert_eq!(
        found.null_count(),
        expected.null_count(),
        "{case}: null count changed"
    );
    assert!(
        found.to_data() == expected.to_data(),
        "{case}: values changed\nexpected: {expected:?}\n   found: {found:?}"
    );
}

/// The process-wide emulated device `id`, strict (device memory is
/// `PROT_NONE` on the host) and delayed (a copy's destination holds poison
/// until the copy has run), so that values read back equal prove the code
/// waited on every `sync_event`. Idempotent: every test calls it first.
pub fn emulated(id: i64) -> DeviceRef {
    let config = EmulatedConfig {
        strict: true,
        delay: Duration::from_millis(2),
    };
    EmulatedDevice::set_global_config(config);
    assert_eq!(
        EmulatedDevice::global_config(),
        config,
        "the emulated devices run strict and delayed"
    );
    EmulatedDevice::global(id).expect("emulated device ids 0 and up exist")
}

/// Asserts that the root array and schema counted by `counters` were each
/// released exactly once.
pub fn assert_released_once(case: &str, counters: &Counters) {
    assert_eq!(
        counters.array_releases(),
        1,
        "{case}: the array struct must be released exactly once"
    );
    assert_eq!(
        counters.schema_releases(),
        1,
        "{case}: the schema struct must be released exactly once"
    );
}

/// Exports `batch` (onto `device`, or zero-copy on the CPU), imports it
/// (Full validation on the CPU, Default on a device) and checks that the
/// batch, schema metadata included, comes back equal and that both structs
/// are released exactly once.
pub fn assert_batch_round_trips(what: &str, batch: &RecordBatch, device: Option<&DeviceRef>) {
    let (c_array, c_schema) = match device {
        None => export_record_batch(batch),
        Some(device) => export_record_batch_to(batch, device),
    }
    .unwrap_or_else(|e| panic!("{what}: export: {e}"));
    let level = if device.is_some() {
        ValidationLevel::Default
    } else {
        ValidationLevel::Full
    };
    let (c_array, c_schema, counters) = counting(c_array, c_schema);
    // SAFETY: the structs come from this crate's exporter (or a test producer), which follow the interface.
    let imported = unsafe { DeviceArray::try_new(c_array, c_schema, level) }
        .unwrap_or_else(|e| panic!("{what}: import: {e}"));
    let back = imported
        .to_record_batch()
        .unwrap_or_else(|e| panic!("{what}: to_record_batch: {e}"));
    assert_eq!(
        back.schema(),
        batch.schema(),
        "{what}: schema (with metadata) changed"
    );
    for (i, (found, expected)) in back.columns().iter().zip(batch.columns()).enumerate() {
        let column = format!("{what} column {i} {:?}", batch.schema().field(i).name());
        assert_same(&column, expected.as_ref(), found.as_ref());
    }
    assert_eq!(&back, batch, "{what}: batch changed");
    drop((imported, back));
    assert_released_once(what, &counters);
}

/// Builds `case` with every buffer in memory of `device` (not host
/// accessible: the emulated device, CUDA device memory), each in an
/// allocation of its own of `size(bytes)` bytes holding as much of the
/// buffer as fits: `bytes.len()` for a truthful producer, less for one whose
/// nodes claim more than their buffers hold. The structs report `device`.
pub fn build_on_device(
    case: &producer::Case,
    device: &DeviceRef,
    size: &dyn Fn(&[u8]) -> usize,
) -> producer::Built {
    let stream = device.create_stream().unwrap();
    let mut built = case.build_with(&mut |bytes: &[u8]| {
        let buffer = device.allocate(size(bytes)).unwrap();
        let len = bytes.len().min(buffer.len());
        // SAFETY: `bytes` is the case's, which outlives the synchronize
        // below; the destination is a fresh allocation of at least `len`.
        unsafe { device.copy_from_host(bytes.as_ptr(), buffer.as_ptr(), len, &stream) }.unwrap();
        producer::Placed {
            ptr: buffer.as_ptr().cast_const().cast(),
            keep: Box::new(buffer),
        }
    });
    device.synchronize_stream(&stream).unwrap();
    built.array.device_type = device.device_type();
    built.array.device_id = device.device_id();
    built
}

/// `array` exported by this crate on the CPU and imported back with `level`.
pub fn device_array(array: &dyn Array, level: ValidationLevel) -> DeviceArray {
    let (c_array, c_schema) = export_array(array).unwrap();
    // SAFETY: the structs come from this crate's exporter.
    unsafe { DeviceArray::try_new(c_array, c_schema, level) }.unwrap()
}

/// `batch` exported by this crate on the CPU and imported back with `level`,
/// with its root structs' releases counted.
pub fn counted_device_array(
    batch: &RecordBatch,
    level: ValidationLevel,
) -> (DeviceArray, Arc<Counters>) {
    let (c_array, c_schema) = export_record_batch(batch).unwrap();
    let (c_array, c_schema, counters) = counting(c_array, c_schema);
    // SAFETY: this crate's exporter's structs behind the counting wrapper.
    let imported = unsafe { DeviceArray::try_new(c_array, c_schema, level) }.unwrap();
    (imported, counters)
}

/// Asserts that `err`'s message contains `needle`, showing the message
/// otherwise.
pub fn assert_mentions(err: &dyn Display, needle: &str) {
    let message = err.to_string();
    assert!(message.contains(needle), "{message}");
}

/// The message of `err`; panics unless `err` is the peer producer's error
/// (`Error::Producer`) with errno `code`.
pub fn expect_producer_error(err: &Error, code: c_int) -> &str {
    let Error::Producer {
        code: found,
        message,
    } = err
    else {
        panic!("expected a producer error, found {err:?}");
    };
    assert_eq!(*found, code, "the producer's errno in {err}");
    message
}

/// Asserts that `err` is the peer producer's error with errno `code` and a
/// message containing `needle`.
pub fn assert_producer_error(err: &Error, code: c_int, needle: &str) {
    assert_mentions(&expect_producer_error(err, code), needle);
}

/// Asserts that `err` is the peer consumer's refusal (`Error::Consumer`) with
/// errno `code` and a message containing `needle`.
pub fn assert_consumer_error(err: &Error, code: c_int, needle: &str) {
    let Error::Consumer {
        code: found,
        message,
    } = err
    else {
        panic!("expected a consumer error, found {err:?}");
    };
    assert_eq!(*found, code, "the consumer's errno in {err}");
    assert_mentions(message, needle);
}

/// Runs `check` on every case of [`all_types`], catching panics, and fails
/// once with the names of all failing cases (their messages are printed as
/// they happen).
pub fn for_each_case(what: &str, mut check: impl FnMut(&str, &ArrayRef)) {
    let cases = all_types();
    assert!(
        cases.len() >= 70,
        "the fixture lost cases: {} left",
        cases.len()
    );
    let mut failed = Vec::new();
    for (name, array) in &cases {
        if catch_unwind(AssertUnwindSafe(|| check(name, array))).is_err() {
            failed.push(name.clone());
        }
    }
    assert!(
        failed.is_empty(),
        "{what}: {} of {} cases failed: {failed:?}",
        failed.len(),
        cases.len()
    );
}

/// This test binary run again as the test named `role` alone, with `var`
/// set to `value` (the test does nothing without it): how the share tests
/// start the processes they share with.
pub fn role(role: &str, var: &str, value: &str) -> std::process::Command {
    let mut command = std::process::Command::new(std::env::current_exe().unwrap());
    command
        .args(["--exact", role, "--nocapture", "--test-threads=1"])
        .env(var, value)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    command
}

/// Waits for `child`, which must succeed and print `says`; `what` names it
/// in the failure, with its output.
pub fn assert_succeeded(child: std::process::Child, what: &str, says: &str) {
    let output = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success() && stdout.contains(says),
        "{what} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// `bytes` as lowercase hexadecimal: a share handle in an environment
/// variable or a line of output.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// `text` read as hexadecimal bytes.
pub fn unhex(text: &str) -> Vec<u8> {
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap())
        .collect()
}

/// The handle a child printed (`HANDLE <hex>`), read off its stdout.
pub fn printed_handle(child: &mut std::process::Child) -> Vec<u8> {
    use std::io::{BufRead, BufReader};

    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let text = lines
        .find_map(|line| Some(line.unwrap().split_once("HANDLE ")?.1.to_string()))
        .expect("the child prints its handle");
    unhex(&text)
}

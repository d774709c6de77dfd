//! This crate's own exports pass every rule; the catalogue is consistent.

use std::sync::Arc;

use arrow_array::types::Int32Type;
use arrow_array::{
    ArrayRef, DictionaryArray, Int32Array, Int64Array, RecordBatch, RecordBatchIterator,
    StringArray,
};

use super::*;
use arrow_schema::ArrowError;

use crate::abi::{ArrowDeviceArray, ArrowDeviceArrayStream, DeviceType};
use crate::device::DeviceRef;
use crate::stream::{export_reader, export_reader_to};
use crate::{export_array, export_array_to, export_record_batch, export_record_batch_to};

fn batch() -> RecordBatch {
    let keys = Int32Array::from(vec![Some(0), None, Some(1)]);
    let dict =
        DictionaryArray::<Int32Type>::try_new(keys, Arc::new(StringArray::from(vec!["x", "y"])))
            .unwrap();
    RecordBatch::try_from_iter([
        ("id", Arc::new(Int64Array::from(vec![1, 2, 3])) as ArrayRef),
        (
            "name",
            Arc::new(StringArray::from(vec![Some("a"), None, Some("ccc")])) as ArrayRef,
        ),
        ("tag", Arc::new(dict) as ArrayRef),
    ])
    .unwrap()
}

/// The process-wide emulated device 0, as an importer looks it up (strict;
/// delayed when the suite runs with `ARROW_DEVICE_EMULATED=delay_ms=...`).
fn strict_delayed() -> DeviceRef {
    crate::device::lookup(DeviceType::EXT_DEV, 0).expect("the emulated device")
}

fn assert_all_pass(what: &str, checks: Vec<Check>, expect: &[&str]) {
    let report = Report::new(what, checks);
    assert!(report.passed(), "{report}");
    for id in expect {
        let check = report
            .checks
            .iter()
            .find(|c| c.id == *id)
            .unwrap_or_else(|| panic!("{what}: no {id}\n{report}"));
        assert_eq!(check.outcome, Outcome::Passed, "{what}: {id}\n{report}");
    }
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

const STREAM_IDS: [&str; 8] = [
    "device_stream.callbacks",
    "device_stream.schema_release_once",
    "device_stream.get_schema_stable",
    "device_stream.device",
    "device_stream.valid_full",
    "device_stream.release_once",
    "device_stream.end_repeats",
    "device_stream.stream_release",
];

fn reader(
    b: &RecordBatch,
) -> RecordBatchIterator<std::vec::IntoIter<Result<RecordBatch, ArrowError>>> {
    RecordBatchIterator::new(
        vec![Ok(b.clone()), Ok(b.slice(1, 2))].into_iter(),
        b.schema(),
    )
}

#[test]
fn our_arrays_pass_on_the_cpu() {
    let b = batch();
    assert_all_pass(
        "cpu",
        check_device_array(Scope::DeviceArray, None, &mut || {
            export_record_batch(&b).map_err(|e| e.to_string())
        }),
        &ARRAY_IDS,
    );
    let ints = Int32Array::from(vec![1, 2]);
    let report = Report::new(
        "int32",
        check_device_array(Scope::DeviceArray, None, &mut || {
            export_array(&ints).map_err(|e| e.to_string())
        }),
    );
    assert!(report.passed(), "{report}");
    let child_move = report
        .checks
        .iter()
        .find(|c| c.id == "device_array.child_move")
        .unwrap();
    assert_eq!(child_move.outcome, Outcome::NotApplicable);
}

#[test]
fn our_arrays_pass_on_the_emulated_device() {
    let b = batch();
    let device = strict_delayed();
    assert_all_pass(
        "emulated",
        check_device_array(Scope::DeviceArray, None, &mut || {
            export_record_batch_to(&b, &device).map_err(|e| e.to_string())
        }),
        &ARRAY_IDS,
    );
    let ints = Int32Array::from(vec![1, 2]);
    let report = Report::new(
        "int32",
        check_device_array(Scope::DeviceArray, None, &mut || {
            export_array_to(&ints, &device).map_err(|e| e.to_string())
        }),
    );
    assert!(report.passed(), "{report}");
}

#[test]
fn our_streams_pass_on_the_cpu() {
    let b = batch();
    let checks = check_device_stream(&mut || export_reader(reader(&b)).map_err(|e| e.to_string()));
    // No call failed, so get_last_error was not read (it may not be).
    let last_error = checks
        .iter()
        .find(|c| c.id == "device_stream.last_error")
        .unwrap();
    assert_eq!(last_error.outcome, Outcome::NotApplicable);
    assert_all_pass("cpu stream", checks, &STREAM_IDS);
}

#[test]
fn our_streams_pass_on_the_emulated_device() {
    let b = batch();
    let device = strict_delayed();
    assert_all_pass(
        "emulated stream",
        check_device_stream(&mut || {
            export_reader_to(reader(&b), &device).map_err(|e| e.to_string())
        }),
        &STREAM_IDS,
    );
}

#[test]
fn a_followed_export_is_counted_wherever_the_consumer_moves_it() {
    let b = batch();
    let (array, schema) = export_record_batch(&b).unwrap();
    let mut array = Box::new(array);
    // SAFETY: a live export of this crate, followed where it is.
    let watch = unsafe { follow("arrow_device_array", (&raw mut *array).cast()) }.unwrap();
    assert_eq!(watch.calls().len(), 5, "{:?}", watch.calls()); // root, 3 columns, a dictionary
                                                               // The consumer moves the root, then one child out of it.
                                                               // SAFETY: spec moves (bitwise copy, source marked released).
    let mut moved = unsafe { ArrowDeviceArray::from_raw(&mut *array) };
    let child = unsafe {
        let root = crate::abi::raw::array_mut(&mut moved.array);
        let slot = *root.children.add(1);
        let child = std::ptr::read(slot);
        (*slot).release = None;
        child
    };
    assert!(watch.untouched());
    drop(moved);
    let after_parent = watch.problems().unwrap();
    assert!(
        after_parent.contains("array.children[1] released 0 times"),
        "{after_parent}"
    );
    let mut child = child;
    // SAFETY: the moved child's own callback, once.
    unsafe { (child.release.unwrap())(&mut child) };
    assert_eq!(watch.problems(), None, "{:?}", watch.calls());
    drop(schema);
    assert_eq!(lost_calls(), 0);
}

#[test]
fn a_followed_stream_counts_what_it_hands_out() {
    let b = batch();
    let mut stream = Box::new(export_reader(reader(&b)).unwrap());
    // SAFETY: a live export of this crate.
    let watch = unsafe { follow("arrow_device_array_stream", (&raw mut *stream).cast()) }.unwrap();
    // SAFETY: moved out of the box, as a consumer takes a capsule's stream.
    let moved = unsafe { ArrowDeviceArrayStream::from_raw(&mut *stream) };
    let reader =
        unsafe { crate::stream::DeviceStreamReader::try_new(moved, crate::ValidationLevel::Full) }
            .unwrap();
    let batches = reader.map(|batch| batch.unwrap().len()).collect::<Vec<_>>();
    assert_eq!(batches, [3, 2]);
    // The stream, the schema get_schema gave and each batch (5 nodes each:
    // the root, three columns, a dictionary).
    assert_eq!(watch.calls().len(), 1 + 5 + 2 * 5, "{:?}", watch.calls());
    assert_eq!(watch.problems(), None, "{:?}", watch.calls());
}

#[test]
fn every_rule_has_a_scope_and_ids_are_unique() {
    let ids = check_ids();
    let mut sorted = ids.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted.len(), ids.len());
    assert!(RULES
        .iter()
        .all(|r| !r.scopes.is_empty() && !r.section.is_empty()));
    assert!(ids.contains(&"device_array.release_once".to_string()));
}

#[test]
fn the_table_names_every_check_and_the_verdict() {
    let report = Report::new(
        "x",
        vec![
            Check::new(
                Scope::Array,
                "release_once",
                Outcome::Failed,
                "array released 2 times (expected 1)",
            ),
            Check::new(Scope::Array, "alignment", Outcome::Failed, "misaligned"),
            Check::new(
                Scope::Array,
                "child_move",
                Outcome::NotApplicable,
                "no children",
            ),
        ],
    );
    assert!(!report.passed());
    assert_eq!(report.failures().len(), 1);
    let text = report.to_string();
    assert!(
        text.contains("array.release_once  failed    array released 2 times"),
        "{text}"
    );
    assert!(text.contains("advisory"), "{text}");
    assert!(
        text.ends_with("FAILED: 0 passed, 1 failed, 1 advisory, 1 not applicable\n"),
        "{text}"
    );
}

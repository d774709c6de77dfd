//! A C producer written like the spec's examples hands CPU device arrays to
//! `DeviceArray::try_from_raw`: the values arrive intact, and each release
//! callback (base array, base schema, every child) runs exactly once, also
//! when the import rejects a malformed array.

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::Int32Type;
use arrow_array::{Array, ArrayRef, Int32Array, StringArray, StructArray};
use arrow_device::abi::{raw, ArrowDeviceArray, DeviceType, FFI_ArrowSchema};
use arrow_device::{DeviceArray, Error, ValidationLevel};
use arrow_schema::{DataType, Field};
use c_interop_tests::{
    consume_in_c, interop_int32_values_pointer, interop_produce_int32,
    interop_produce_int32_wrong_n_buffers, interop_produce_struct,
    interop_produce_struct_missing_child, interop_produce_utf8,
    interop_produce_utf8_decreasing_offsets, next_slot, produce, releases, Producer, Releases,
};

const ALL_LEVELS: [ValidationLevel; 4] = [
    ValidationLevel::None,
    ValidationLevel::Minimal,
    ValidationLevel::Default,
    ValidationLevel::Full,
];

fn expected_int32() -> Int32Array {
    Int32Array::from(vec![
        Some(1),
        None,
        Some(3),
        None,
        Some(5),
        Some(6),
        Some(7),
    ])
}

fn expected_utf8() -> StringArray {
    StringArray::from(vec![
        Some("hello"),
        Some(""),
        None,
        Some("arrow"),
        Some("device"),
    ])
}

fn expected_struct() -> StructArray {
    StructArray::from(vec![
        (
            Arc::new(Field::new("ints", DataType::Int32, true)),
            Arc::new(expected_int32().slice(0, 5)) as ArrayRef,
        ),
        (
            Arc::new(Field::new("strs", DataType::Utf8, true)),
            Arc::new(expected_utf8()) as ArrayRef,
        ),
    ])
}

/// Nothing released yet, nothing freed yet.
fn unreleased(slot: i32) -> bool {
    let r = releases(slot);
    r.array == 0
        && r.schema == 0
        && r.child_arrays == 0
        && r.child_schemas == 0
        && r.live_allocations > 0
}

fn released_once(children: i64) -> Releases {
    Releases {
        array: 1,
        schema: 1,
        child_arrays: children,
        child_schemas: children,
        live_allocations: 0,
    }
}

/// Imports through raw pointers, checking that both sources were moved out.
fn import(
    array: &mut ArrowDeviceArray,
    schema: &mut FFI_ArrowSchema,
    level: ValidationLevel,
) -> arrow_device::Result<DeviceArray> {
    // SAFETY: both structs were filled by a C producer and are valid for
    // reads and writes; after the call they are released (moved out).
    let result = unsafe { DeviceArray::try_from_raw(array, schema, level) };
    assert!(
        array.is_released(),
        "try_from_raw must mark the source ArrowDeviceArray released"
    );
    assert!(
        raw::schema(schema).release.is_none(),
        "try_from_raw must mark the source ArrowSchema released"
    );
    result
}

fn import_from_c(
    producer: Producer,
    level: ValidationLevel,
) -> (i32, arrow_device::Result<DeviceArray>) {
    let (slot, mut array, mut schema) = produce(producer);
    assert!(unreleased(slot));
    assert_eq!(array.device_type, DeviceType::CPU);
    (slot, import(&mut array, &mut schema, level))
}

#[test]
fn c_int32_with_nulls_imports_under_full_validation_and_is_released_exactly_once() {
    let slot = next_slot();
    let mut array = ArrowDeviceArray::empty();
    let mut schema = FFI_ArrowSchema::empty();
    // SAFETY: valid, writable, released structs for the producer to fill.
    assert_eq!(
        unsafe { interop_produce_int32(slot, 0, &mut array, &mut schema) },
        0
    );

    let imported =
        import(&mut array, &mut schema, ValidationLevel::Full).expect("valid int32 array");
    assert_eq!(imported.len(), 7);
    assert_eq!(imported.device_type(), DeviceType::CPU);
    assert_eq!(imported.device_id(), -1);
    assert!(imported.sync_event().is_null());
    assert_eq!(imported.data_type(), &DataType::Int32);
    assert_eq!(imported.null_count(), Some(2));

    let host = imported.to_host().expect("CPU data is host-accessible");
    assert_eq!(host.as_primitive::<Int32Type>(), &expected_int32());
    assert_eq!(releases(slot).array, 0, "released while still in use");

    drop(host);
    drop(imported);
    assert_eq!(releases(slot), released_once(0));
}

#[test]
fn c_int32_with_a_nonzero_offset_imports_as_the_sliced_values() {
    for offset in [1_i64, 2, 6, 7] {
        let slot = next_slot();
        let mut array = ArrowDeviceArray::empty();
        let mut schema = FFI_ArrowSchema::empty();
        // SAFETY: valid, writable, released structs for the producer to fill.
        assert_eq!(
            unsafe { interop_produce_int32(slot, offset, &mut array, &mut schema) },
            0
        );
        assert_eq!(array.array.offset(), offset as usize);

        let imported =
            import(&mut array, &mut schema, ValidationLevel::Full).expect("valid sliced int32");
        let len = 7 - offset as usize;
        assert_eq!(imported.len(), len, "offset {offset}");
        let host = imported.to_host().expect("host data");
        let expected = expected_int32().slice(offset as usize, len);
        assert_eq!(
            host.as_primitive::<Int32Type>(),
            &expected,
            "offset {offset}"
        );
        assert_eq!(host.null_count(), expected.null_count(), "offset {offset}");

        drop((host, imported));
        assert_eq!(releases(slot), released_once(0), "offset {offset}");
    }
}

#[test]
fn c_utf8_array_imports_with_its_strings_and_nulls() {
    let (slot, imported) = import_from_c(interop_produce_utf8, ValidationLevel::Full);
    let imported = imported.expect("valid utf8 array");
    assert_eq!(imported.len(), 5);
    assert_eq!(imported.device_type(), DeviceType::CPU);
    assert_eq!(imported.data_type(), &DataType::Utf8);

    let host = imported.to_host().expect("host data");
    assert_eq!(host.as_string::<i32>(), &expected_utf8());

    drop((host, imported));
    assert_eq!(releases(slot), released_once(0));
}

#[test]
fn c_struct_array_imports_with_both_children_and_each_child_is_released_once() {
    let (slot, imported) = import_from_c(interop_produce_struct, ValidationLevel::Full);
    let imported = imported.expect("valid struct array");
    assert_eq!(imported.len(), 5);
    assert_eq!(imported.device_type(), DeviceType::CPU);
    assert_eq!(imported.device_id(), -1);
    assert_eq!(imported.data_type(), expected_struct().data_type());

    let children = imported.children();
    assert_eq!(children.len(), 2);
    assert_eq!(children[0].field().name(), "ints");
    assert_eq!(children[0].null_count(), Some(2));
    // The producer reported -1 ("unknown") for the strings child.
    assert_eq!(children[1].null_count(), None);

    let host = imported.to_host().expect("host data");
    assert_eq!(host.as_struct(), &expected_struct());
    let batch = imported
        .to_record_batch()
        .expect("a struct without top-level nulls");
    assert_eq!(batch.num_rows(), 5);
    assert_eq!(batch.schema().field(1).name(), "strs");
    assert_eq!(batch.column(1).as_string::<i32>(), &expected_utf8());

    drop((host, batch, children, imported));
    assert_eq!(releases(slot), released_once(2));
}

#[test]
fn host_arrays_from_a_c_import_keep_the_c_buffers_alive_until_they_are_dropped() {
    let slot = next_slot();
    let mut array = ArrowDeviceArray::empty();
    let mut schema = FFI_ArrowSchema::empty();
    // SAFETY: valid, writable, released structs for the producer to fill.
    assert_eq!(
        unsafe { interop_produce_int32(slot, 0, &mut array, &mut schema) },
        0
    );
    // SAFETY: `array` was just produced and is not released.
    let c_values = unsafe { interop_int32_values_pointer(&array) };
    assert!(!c_values.is_null());

    let imported = import(&mut array, &mut schema, ValidationLevel::Default).expect("valid int32");
    let host = imported.to_host().expect("host data");
    drop(imported);

    let values = host.as_primitive::<Int32Type>();
    if values.values().as_ptr().cast() == c_values {
        // Zero-copy: the producer's memory must still be live.
        assert_eq!(
            releases(slot).array,
            0,
            "C buffers released while an arrow-rs array points into them"
        );
    }
    assert_eq!(values, &expected_int32());

    drop(host);
    assert_eq!(releases(slot), released_once(0));
}

#[test]
fn c_int32_with_the_wrong_n_buffers_is_rejected_at_every_level_and_released_once() {
    for level in ALL_LEVELS {
        let (slot, result) = import_from_c(interop_produce_int32_wrong_n_buffers, level);
        let err = result.expect_err("n_buffers 1 for int32 must be rejected");
        assert!(matches!(err, Error::Invalid { .. }), "{level:?}: {err}");
        assert_eq!(err.errno(), libc::EINVAL);
        drop(err);
        assert_eq!(releases(slot), released_once(0), "{level:?}");
    }
}

#[test]
fn c_struct_with_fewer_array_children_than_schema_children_is_rejected_and_released_once() {
    for level in ALL_LEVELS {
        let (slot, result) = import_from_c(interop_produce_struct_missing_child, level);
        let err = result.expect_err("array n_children 1 vs schema n_children 2 must be rejected");
        assert!(matches!(err, Error::Invalid { .. }), "{level:?}: {err}");
        drop(err);
        // One child array (the one that exists), two child schemas.
        let expected = Releases {
            child_arrays: 1,
            ..released_once(2)
        };
        assert_eq!(releases(slot), expected, "{level:?}");
    }
}

#[test]
fn c_utf8_with_decreasing_offsets_is_rejected_by_full_validation_and_released_once() {
    let (slot, result) = import_from_c(
        interop_produce_utf8_decreasing_offsets,
        ValidationLevel::Full,
    );
    let err = result.expect_err("offsets 5 -> 3 at slot 3 must be rejected");
    assert_eq!(err.errno(), libc::EINVAL, "{err}");
    drop(err);
    assert_eq!(releases(slot), released_once(0));
}

#[test]
fn a_child_of_a_c_struct_keeps_the_c_array_alive_after_the_parent_is_dropped() {
    let (slot, imported) = import_from_c(interop_produce_struct, ValidationLevel::Full);
    let imported = imported.expect("valid struct array");
    let strs = imported.children().remove(1);
    drop(imported);
    assert_eq!(
        releases(slot).array,
        0,
        "released while a child is still in use"
    );

    let host = strs.to_host().expect("host data");
    assert_eq!(host.as_string::<i32>(), &expected_utf8());
    drop((host, strs));
    assert_eq!(releases(slot), released_once(2));
}

#[test]
fn a_c_array_re_exported_by_rust_is_read_by_c_and_released_once_after_both_are_done() {
    let (slot, imported) = import_from_c(interop_produce_struct, ValidationLevel::Full);
    let imported = imported.expect("valid struct array");
    let (mut array, mut schema) = imported.export().expect("re-export");
    assert_eq!(array.device_type, DeviceType::CPU);
    assert_eq!(array.device_id, -1);

    let report = consume_in_c(&mut array, &mut schema);
    assert_eq!(
        report.status, 0,
        "consumer.c failed at line {}",
        report.status
    );
    assert_eq!(report.child_names(), "ints,strs");
    assert_eq!(report.ints(), "1|null|3|null|5");
    assert_eq!(report.strs(), "hello||null|arrow|device");
    assert_eq!(
        (report.array_release_nulled, report.schema_release_nulled),
        (1, 1)
    );
    // The re-export was released by C; the import still holds the original.
    assert_eq!(releases(slot).array, 0);

    drop(imported);
    assert_eq!(releases(slot), released_once(2));
}

//! `DeviceArray::try_from_raw`: NULL pointers, defects behind valid pointers
//! (the sources must be left released, their contents released once), and
//! the device fields of `ArrowDeviceArray`.

use std::ptr::null_mut;

use arrow_device::{DeviceArray, Error};

use super::cases;
use super::{expect_err, releases, DEFAULT, FULL};
use crate::common::producer::*;

#[track_caller]
fn assert_invalid_root(err: &Error, keyword: &str) {
    match err {
        Error::Invalid { path, message } => {
            assert_eq!(path, "array", "{err}");
            assert!(message.contains(keyword), "expected {keyword:?} in {err}");
        }
        other => panic!("expected Error::Invalid, got {other:?}"),
    }
}

#[test]
fn a_null_device_array_pointer_is_rejected_and_the_schema_released() {
    let Built {
        array,
        mut schema,
        counters,
    } = cases::int32().build();
    // SAFETY: the schema pointer is valid; the array pointer is NULL.
    let result = unsafe { DeviceArray::try_from_raw(null_mut(), &mut schema, FULL) };
    assert_invalid_root(&result.expect_err("NULL array pointer"), "NULL");
    assert_eq!(
        releases(&counters),
        (0, 1),
        "the schema was moved out and released"
    );
    assert!(
        schema.release().is_none(),
        "the source schema is left released"
    );
    drop(array);
    assert_eq!(releases(&counters), (1, 1));
}

#[test]
fn a_null_schema_pointer_is_rejected_and_the_array_released() {
    let Built {
        mut array,
        schema,
        counters,
    } = cases::utf8().build();
    // SAFETY: the array pointer is valid; the schema pointer is NULL.
    let result = unsafe { DeviceArray::try_from_raw(&mut array, null_mut(), FULL) };
    assert_invalid_root(&result.expect_err("NULL schema pointer"), "NULL");
    assert_eq!(
        releases(&counters),
        (1, 0),
        "the array was moved out and released"
    );
    assert!(array.is_released(), "the source array is left released");
    drop(schema);
    assert_eq!(releases(&counters), (1, 1));
}

#[test]
fn two_null_pointers_are_rejected() {
    // SAFETY: NULL pointers are what is being tested.
    let result = unsafe { DeviceArray::try_from_raw(null_mut(), null_mut(), FULL) };
    assert_invalid_root(&result.expect_err("NULL pointers"), "NULL");
}

#[test]
fn a_defect_behind_valid_pointers_releases_the_moved_structs_once() {
    let mut case = cases::struct_ab();
    case.array.children[0].length = -1;
    let Built {
        mut array,
        mut schema,
        counters,
    } = case.build();
    // SAFETY: both pointers are valid, initialized structs.
    let result = unsafe { DeviceArray::try_from_raw(&mut array, &mut schema, FULL) };
    let err = result.expect_err("negative child length");
    assert!(
        matches!(&err, Error::Invalid { path, .. } if path == "field \"a\""),
        "{err}"
    );
    assert_eq!(releases(&counters), (1, 1));
    assert!(
        array.is_released() && schema.release().is_none(),
        "sources are left released"
    );
    // Dropping the released sources must not release anything again.
    drop((array, schema));
    assert_eq!(releases(&counters), (1, 1));
}

#[test]
fn a_released_struct_behind_a_valid_pointer_is_rejected() {
    let mut case = cases::int32();
    case.schema.released = true;
    let Built {
        mut array,
        mut schema,
        counters,
    } = case.build();
    // SAFETY: both pointers are valid, initialized structs (one released).
    let result = unsafe { DeviceArray::try_from_raw(&mut array, &mut schema, FULL) };
    assert_invalid_root(&result.expect_err("released schema"), "released");
    assert_eq!(releases(&counters), (1, 1));
}

#[test]
fn valid_structs_behind_valid_pointers_are_moved_out() {
    let Built {
        mut array,
        mut schema,
        counters,
    } = cases::map().build();
    // SAFETY: both pointers are valid, initialized structs.
    let imported =
        unsafe { DeviceArray::try_from_raw(&mut array, &mut schema, FULL) }.expect("valid map");
    assert!(array.is_released() && schema.release().is_none());
    assert_eq!(releases(&counters), (0, 1));
    drop(imported);
    assert_eq!(releases(&counters), (1, 1));
}

/// A CPU array carrying a sync_event: the CPU has no event type (spec:
/// "Synchronization event types": N/A, so `sync_event` should always be
/// NULL), and the library refuses to wait on one; it must say so at import,
/// whatever the data type, rather than on first access.
fn with_cpu_sync_event(case: &Case) -> Built {
    let mut built = case.build();
    // Never dereferenced: the CPU device rejects any non-NULL event.
    built.array.sync_event = std::ptr::NonNull::<u64>::dangling().as_ptr().cast();
    built
}

#[test]
fn a_cpu_array_with_a_sync_event_is_rejected_for_a_string_array() {
    let err = expect_err(with_cpu_sync_event(&cases::utf8()), DEFAULT);
    assert!(err.to_string().contains("sync_event"), "{err}");
}

#[test]
fn a_cpu_array_with_a_sync_event_is_rejected_for_a_primitive_array() {
    let err = expect_err(with_cpu_sync_event(&cases::int32()), DEFAULT);
    assert!(err.to_string().contains("sync_event"), "{err}");
}

#[test]
fn a_structural_defect_is_caught_on_an_opaque_device() {
    // An unknown device type imports opaquely (nothing can be read), so the
    // structural checks alone decide; they must still run.
    let mut case = cases::int32();
    case.array.length = -3;
    let mut built = case.build();
    built.array.device_type = arrow_device::DeviceType::from(17);
    built.array.device_id = 0;
    super::expect_invalid(built, FULL, "array", "length is -3");
}

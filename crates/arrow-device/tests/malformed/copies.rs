//! Copies between devices keep the values of every slice: a string or
//! binary array over more than 1 MiB of data is narrowed to the bytes its
//! slots reference before a copy to the host, from the array's own first
//! offset, whatever the offsets before its slice hold (the spec does not
//! constrain them).

use std::sync::Arc;

use arrow_array::{Array, ArrayRef, BinaryArray, LargeStringArray, StringArray};
use arrow_device::{export_array_to, DeviceArray, ValidationLevel};

use super::{expect_ok, FULL, NONE};
use crate::common::producer::*;
use crate::common::{assert_same, emulated};

/// Above the size from which a copy to the host narrows a string data
/// buffer to the bytes its slots reference (1 MiB in `array::copy`).
const LARGE: usize = (1 << 20) + 4099;

fn import(
    what: &str,
    built: (
        arrow_device::ArrowDeviceArray,
        arrow_device::abi::FFI_ArrowSchema,
    ),
) -> DeviceArray {
    // SAFETY: the structs come from this crate's exporter.
    unsafe { DeviceArray::try_new(built.0, built.1, ValidationLevel::Default) }
        .unwrap_or_else(|e| panic!("{what}: import failed: {e}"))
}

/// `utf8` (or `large_utf8` when `large`) of 3 slots at `offset` over
/// `LARGE` bytes, whose offsets before the slice are all `garbage`.
fn large_slice_with_garbage_before(large: bool, offset: usize, garbage: i64) -> Case {
    let own = [0i64, 3, 1000, LARGE as i64];
    let offsets: Vec<i64> = std::iter::repeat_n(garbage, offset).chain(own).collect();
    let data: Vec<u8> = (0..LARGE).map(|i| b'a' + (i % 26) as u8).collect();
    let (offsets, format) = if large {
        (i64s(&offsets), "U")
    } else {
        let narrow: Vec<i32> = offsets.iter().map(|&o| o as i32).collect();
        (i32s(&narrow), "u")
    };
    let mut array = ArrayNode::new(3, 0, vec![None, offsets, Some(data)]);
    array.offset = offset as i64;
    Case::new(array, SchemaNode::new(format, "s"))
}

#[test]
fn a_large_string_slice_copies_to_a_device_and_back_whatever_its_offsets_before_the_slice() {
    let device = emulated(0);
    for large in [false, true] {
        for offset in 0..=17 {
            for garbage in [1000i64, 0, -5, LARGE as i64 * 2] {
                let case = format!("large {large} offset {offset} garbage {garbage}");
                let on_cpu = expect_ok(
                    large_slice_with_garbage_before(large, offset, garbage).build(),
                    FULL,
                );
                let expected = on_cpu.to_host().unwrap();
                let on_device = on_cpu
                    .to_device(&device)
                    .unwrap_or_else(|e| panic!("{case}: to_device: {e}"));
                let back = on_device
                    .to_host()
                    .unwrap_or_else(|e| panic!("{case}: to_host: {e}"));
                assert_same(&case, expected.as_ref(), back.as_ref());
                // The copy is valid from slot 0 of its own buffers, so any
                // consumer reads it as it is.
                back.to_data()
                    .validate_full()
                    .unwrap_or_else(|e| panic!("{case}: the copy is invalid: {e}"));
                drop((expected, on_device, back));
            }
        }
    }
}

#[test]
fn a_large_string_slice_of_a_device_array_copies_back_equal_at_every_offset() {
    let device = emulated(0);
    let values: Vec<String> = (0..4000).map(|i| "x".repeat(i % 700)).collect();
    let strings = StringArray::from(values);
    assert!(
        strings.value_data().len() > 1 << 20,
        "large enough to narrow"
    );
    let (c_array, c_schema) = export_array_to(&strings, &device).unwrap();
    let on_device = import("strings", (c_array, c_schema));
    for offset in [0usize, 1, 3, 7, 8, 9, 1001, 3999] {
        let len = 4000 - offset;
        let slice = on_device.slice(offset, len).unwrap();
        let back = slice.to_host().unwrap();
        assert_same(
            &format!("slice({offset}, {len})"),
            &strings.slice(offset, len),
            back.as_ref(),
        );
        // Offsets of the copy start at 0 and are valid throughout.
        let copy = back.as_any().downcast_ref::<StringArray>().unwrap();
        assert_eq!(copy.value_offsets()[0], 0, "slice({offset}, {len})");
    }
    let large = LargeStringArray::from((0..4000).map(|i| "y".repeat(i % 700)).collect::<Vec<_>>());
    let binary = BinaryArray::from_iter_values((0..4000).map(|i| vec![7u8; i % 700]));
    for (name, array) in [
        ("large_utf8", Arc::new(large) as ArrayRef),
        ("binary", Arc::new(binary) as ArrayRef),
    ] {
        let (c_array, c_schema) = export_array_to(array.as_ref(), &device).unwrap();
        let on_device = import(name, (c_array, c_schema));
        for offset in [1usize, 5, 13] {
            let len = 4000 - offset - 1;
            let back = on_device.slice(offset, len).unwrap().to_host().unwrap();
            assert_same(
                &format!("{name} slice({offset}, {len})"),
                array.slice(offset, len).as_ref(),
                back.as_ref(),
            );
        }
    }
}

/// A struct whose child is shorter than the struct's `offset + length`
/// (accepted at level none, which does not compare lengths): the copy to a
/// device trims the child to the struct's window, which starts past the
/// child's end. Found by the `array_import` fuzz target: the trimmed child
/// had a bit offset its empty bitmap could not hold, and building arrow-rs
/// data from it panicked inside arrow-rs. Now every way to the host is a
/// clean structure error.
#[test]
fn a_struct_child_shorter_than_the_struct_window_copies_without_a_panic() {
    let device = emulated(0);
    let mut child = ArrayNode::new(
        7,
        2,
        vec![
            bitmap(&[true, false, true, true, false, true, true]),
            i32s(&[1, 2, 3, 4, 5, 6, 7]),
        ],
    );
    child.offset = 1;
    let mut parent = ArrayNode::new(7, 0, vec![None]).with_children(vec![child]);
    parent.offset = 9;
    let case = Case::new(
        parent,
        SchemaNode::new("+s", "s").with_children(vec![SchemaNode::new("i", "a")]),
    );
    let on_cpu = expect_ok(case.build(), NONE);
    let err = on_cpu
        .to_host()
        .expect_err("the child does not cover the struct");
    assert!(err.to_string().contains("child"), "{err}");
    match on_cpu.to_device(&device) {
        Err(e) => assert!(e.to_string().contains("child"), "{e}"),
        Ok(on_device) => {
            let err = on_device.to_host().expect_err("the copy keeps the defect");
            assert!(err.to_string().contains("child"), "{err}");
        }
    }
}

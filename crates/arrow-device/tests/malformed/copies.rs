//! Copies between devices keep the values of every slice: a string or
//! binary array over more than 1 MiB of data is narrowed to the bytes its
//! slots reference before a copy to the host, from the array's own first
//! offset, whatever the offsets before its slice hold (the spec does not
//! constrain them).

use std::sync::Arc;

use arrow_array::{
    Array, ArrayRef, BinaryArray, Int32Array, LargeStringArray, StringArray, StructArray,
    Time32SecondArray,
};
use arrow_device::device;
use arrow_device::{export_array_to, DeviceArray, Error, ValidationLevel};
use arrow_schema::{DataType, Field};

use super::{expect_ok, DEFAULT, FULL, NONE};
use crate::common::producer::*;
use crate::common::{assert_same, build_on_device, emulated};

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

// ------------------------------------------------ claims past an allocation

fn exact(bytes: &[u8]) -> usize {
    bytes.len()
}

/// `Error::Invalid` at `path` whose message names the buffer, the bytes
/// claimed and what the device said.
#[track_caller]
fn assert_claim_refused(
    what: &str,
    result: arrow_device::Result<impl std::fmt::Debug>,
    path: &str,
    claim: &str,
    answer: &str,
) {
    let (found, message) = match &result {
        Err(
            err @ Error::Invalid {
                path: found,
                message,
            },
        ) => {
            super::show(err);
            (found, message)
        }
        other => panic!("{what}: expected Error::Invalid at {path:?}, got {other:?}"),
    };
    assert_eq!(found, path, "{what}: {message}");
    assert!(
        message.starts_with(claim),
        "{what}: expected {claim:?}, got: {message}"
    );
    let device_says = "which are not all memory of the device: \
                       device EXT_DEV (id 0): check_device_range: device pointer 0x";
    assert!(message.contains(device_says), "{what}: {message}");
    assert!(
        message.contains(answer),
        "{what}: expected {answer:?}, got: {message}"
    );
}

/// The `array_import` fuzz target's timeout: a time32 node claiming 2^31
/// values (8 GiB) over a 4-byte device allocation. The copy sized its host
/// destination by the claim and faulted in all 8 GiB (33 s) before the
/// first device copy found the source outside its allocation. Now every
/// copy asks the device first and fails before it allocates anything, with
/// the buffer's path, the claim and the device's answer.
#[test]
fn a_device_buffer_claiming_more_than_its_allocation_fails_every_copy_before_allocating() {
    let device = emulated(0);
    let other = emulated(1);
    let case = Case::new(
        ArrayNode::new(1 << 31, 0, vec![None, i32s(&[7])]),
        SchemaNode::new("tts", "t"),
    );
    let on_device = expect_ok(build_on_device(&case, &device, &exact), DEFAULT);
    let claim = "the values buffer claims 8589934592 bytes at 0x";
    let answer =
        "(length 8589934592) runs 8589934588 bytes past the end of its allocation (4 bytes at 0x";
    assert_claim_refused("to_host", on_device.to_host(), "buffer 1", claim, answer);
    assert_claim_refused(
        "to_device(cpu)",
        on_device.to_device(&device::cpu()),
        "buffer 1",
        claim,
        answer,
    );
    assert_claim_refused(
        "to_device(EXT_DEV 1)",
        on_device.to_device(&other),
        "buffer 1",
        claim,
        answer,
    );
    // A slice the buffer does hold copies, from the same array.
    let head = on_device.slice(0, 1).unwrap().to_host().unwrap();
    assert_same(
        "slice(0, 1)",
        &Time32SecondArray::from(vec![7]),
        head.as_ref(),
    );
}

/// A struct of two slots: int32 field "a" (values 2 and 3, at offset 2 of
/// five) and utf8 field "b" ("abc", "defghij").
fn struct_case() -> Case {
    let mut ints = ArrayNode::new(2, 0, vec![None, i32s(&[0, 1, 2, 3, 4])]);
    ints.offset = 2;
    let strings = ArrayNode::new(2, 0, vec![None, i32s(&[0, 3, 10]), bytes(b"abcdefghij")]);
    Case::new(
        ArrayNode::new(2, 0, vec![None]).with_children(vec![ints, strings]),
        SchemaNode::new("+s", "s")
            .with_children(vec![SchemaNode::new("i", "a"), SchemaNode::new("u", "b")]),
    )
}

/// Nested nodes: the path names the node, and each kind of claim is
/// checked: string data as its last offset sizes it, fixed-width values as
/// the node's offset and length do, in an empty allocation (which is no
/// allocation at all).
#[test]
fn a_short_buffer_anywhere_in_a_tree_is_named_by_its_path() {
    let device = emulated(0);
    let case = struct_case();
    // The string data allocation holds 3 of the 10 bytes its offsets claim.
    let data_short = |bytes: &[u8]| {
        if bytes == b"abcdefghij" {
            3
        } else {
            bytes.len()
        }
    };
    let on_device = expect_ok(build_on_device(&case, &device, &data_short), DEFAULT);
    assert_claim_refused(
        "string data",
        on_device.to_host(),
        "field \"b\" > buffer 2",
        "the data buffer claims 10 bytes at 0x",
        "(length 10) runs 7 bytes past the end of its allocation (3 bytes at 0x",
    );
    // The int values in an empty allocation: the copy reads slots 0 to 3
    // (the trimmed node keeps the offset's byte of the bitmap), 16 bytes.
    let ints_empty = |bytes: &[u8]| if bytes.len() == 20 { 0 } else { bytes.len() };
    let on_device = expect_ok(build_on_device(&case, &device, &ints_empty), DEFAULT);
    assert_claim_refused(
        "empty allocation",
        on_device.to_device(&emulated(1)),
        "field \"a\" > buffer 1",
        "the values buffer claims 16 bytes at 0x40 ",
        "device pointer 0x40 (length 16) is not inside a live allocation of emulated device 0",
    );
}

/// The same tree, truthful: every copy still goes through, equal.
#[test]
fn device_buffers_inside_their_allocations_copy_as_before() {
    let device = emulated(0);
    let a = Int32Array::from(vec![2, 3]);
    let b = StringArray::from(vec!["abc", "defghij"]);
    let expected = StructArray::from(vec![
        (
            Arc::new(Field::new("a", DataType::Int32, true)),
            Arc::new(a) as ArrayRef,
        ),
        (
            Arc::new(Field::new("b", DataType::Utf8, true)),
            Arc::new(b) as ArrayRef,
        ),
    ]);
    let on_device = expect_ok(build_on_device(&struct_case(), &device, &exact), DEFAULT);
    assert_same("to_host", &expected, on_device.to_host().unwrap().as_ref());
    let on_cpu = on_device.to_device(&device::cpu()).unwrap();
    assert_same(
        "to_device(cpu)",
        &expected,
        on_cpu.to_host().unwrap().as_ref(),
    );
    let moved = on_device.to_device(&emulated(1)).unwrap();
    assert_eq!(moved.device_id(), 1);
    assert_same(
        "to_device(EXT_DEV 1)",
        &expected,
        moved.to_host().unwrap().as_ref(),
    );
}

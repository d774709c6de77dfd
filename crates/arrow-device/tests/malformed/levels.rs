//! Which validation level first rejects a defect, as `ValidationLevel`
//! documents: `None` checks only what keeps the walk memory-safe, `Minimal`
//! adds metadata checks, `Default` O(1) reads of data, `Full` every value.
//! Whatever a level accepts, the structs are still released exactly once.

use super::cases;
use super::{expect_err, expect_ok, LEVELS};
use crate::common::producer::*;

/// Imports `case` at each level and asserts it is accepted at exactly the
/// levels below `first_rejecting` (all of them when `None`).
#[track_caller]
fn assert_first_rejected_at(case: &Case, first_rejecting: Option<arrow_device::ValidationLevel>) {
    for level in LEVELS {
        if first_rejecting.is_some_and(|first| level >= first) {
            expect_err(case.build(), level);
        } else {
            drop(expect_ok(case.build(), level));
        }
    }
}

#[test]
fn invalid_utf8_is_accepted_below_full() {
    let mut case = cases::utf8();
    case.array.buffers[2] = bytes(b"a\xffcd");
    assert_first_rejected_at(&case, Some(super::FULL));
}

#[test]
fn offsets_decreasing_in_the_middle_are_accepted_below_full() {
    let mut case = cases::utf8();
    case.array.buffers[1] = i32s(&[0, 3, 1, 4]);
    assert_first_rejected_at(&case, Some(super::FULL));
}

#[test]
fn a_wrong_null_count_is_trusted_below_full() {
    let mut case = cases::int32();
    // The bitmap has one null; 0 would be legal (the bitmap is then ignored).
    case.array.null_count = 2;
    assert_first_rejected_at(&case, Some(super::FULL));
}

#[test]
fn dictionary_keys_are_only_bounds_checked_at_full() {
    let mut case = cases::dictionary();
    case.array.buffers[1] = i8s(&[0, 5, 0]);
    assert_first_rejected_at(&case, Some(super::FULL));
}

#[test]
fn union_type_ids_are_only_checked_at_full() {
    let mut case = cases::sparse_union();
    case.array.buffers[0] = i8s(&[0, 5, 0]);
    assert_first_rejected_at(&case, Some(super::FULL));
}

#[test]
fn a_list_child_shorter_than_the_last_offset_is_caught_from_default() {
    let mut case = cases::list();
    case.array.children[0] = cases::int32_node(&[1, 2]);
    assert_first_rejected_at(&case, Some(super::DEFAULT));
}

#[test]
fn a_short_last_run_end_is_caught_from_default() {
    let mut case = cases::run_end_encoded();
    case.array.children[0] = cases::int32_node(&[2, 4]);
    assert_first_rejected_at(&case, Some(super::DEFAULT));
}

#[test]
fn a_null_validity_buffer_with_nulls_is_caught_from_minimal() {
    let mut case = cases::int32();
    case.array.buffers[0] = None;
    assert_first_rejected_at(&case, Some(super::MINIMAL));
}

#[test]
fn a_short_struct_child_is_caught_from_minimal() {
    let mut case = cases::struct_ab();
    case.array.children[1] = cases::utf8_node(&["a", ""]);
    assert_first_rejected_at(&case, Some(super::MINIMAL));
}

#[test]
fn memory_safety_defects_are_rejected_even_at_none() {
    let mut negative_length = cases::int32();
    negative_length.array.length = -1;
    let mut wrong_buffer_count = cases::utf8();
    wrong_buffer_count.array.buffers.pop();
    let mut missing_child = cases::struct_ab();
    missing_child.array.children.pop();
    let mut missing_dictionary = cases::dictionary();
    missing_dictionary.array.dictionary = None;
    for case in [
        negative_length,
        wrong_buffer_count,
        missing_child,
        missing_dictionary,
        cases::nested_lists(70),
    ] {
        assert_first_rejected_at(&case, Some(super::NONE));
    }
}

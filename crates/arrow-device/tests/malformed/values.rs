//! Defects in the data itself: offsets, run ends, view sizes and indices,
//! dictionary keys, union type ids, UTF-8, null counts. The O(1) ones (first
//! and last offset, last run end, variadic sizes) are caught from `Default`
//! on; the rest need every value and are caught at `Full` (see `levels.rs`).

use super::cases;
use super::{expect_invalid, DEFAULT, FULL, MINIMAL};
use crate::common::producer::*;

// ------------------------------------------------------------ offsets

#[test]
fn offsets_whose_first_exceeds_the_last_are_rejected() {
    let mut case = cases::utf8();
    case.array.buffers[1] = i32s(&[3, 3, 3, 1]);
    expect_invalid(case.build(), DEFAULT, "buffer 1", "decrease");
}

#[test]
fn a_negative_first_offset_is_rejected() {
    let mut case = cases::utf8();
    case.array.buffers[1] = i32s(&[-1, 1, 1, 4]);
    expect_invalid(case.build(), DEFAULT, "buffer 1", "negative");
}

#[test]
fn offsets_that_decrease_in_the_middle_are_rejected_at_full() {
    let mut case = cases::utf8();
    case.array.buffers[1] = i32s(&[0, 3, 1, 4]);
    expect_invalid(case.build(), FULL, "array", "offset");
}

#[test]
fn list_offsets_whose_first_exceeds_the_last_are_rejected() {
    let mut case = cases::list();
    case.array.buffers[1] = i32s(&[3, 2, 2, 1]);
    expect_invalid(case.build(), DEFAULT, "buffer 1", "decrease");
}

#[test]
fn invalid_utf8_is_rejected_at_full() {
    let mut case = cases::utf8();
    case.array.buffers[2] = bytes(b"a\xffcd");
    expect_invalid(case.build(), FULL, "array", "utf");
}

// ------------------------------------------------------------ unions

#[test]
fn an_undeclared_union_type_id_is_rejected_at_full() {
    let mut case = cases::sparse_union();
    case.array.buffers[0] = i8s(&[0, 5, 0]);
    expect_invalid(case.build(), FULL, "array", "type id");
}

#[test]
fn a_negative_union_type_id_is_rejected_at_full() {
    let mut case = cases::dense_union();
    case.array.buffers[0] = i8s(&[0, -1, 0]);
    expect_invalid(case.build(), FULL, "array", "type id");
}

#[test]
fn a_dense_union_offset_past_its_child_is_rejected_at_full() {
    let mut case = cases::dense_union();
    case.array.buffers[1] = i32s(&[0, 5, 1]);
    expect_invalid(case.build(), FULL, "array", "offset");
}

// ------------------------------------------------------------ run-end encoding

#[test]
fn run_ends_that_do_not_increase_are_rejected_at_full() {
    let mut case = cases::run_end_encoded();
    case.array.children = vec![
        cases::int32_node(&[3, 2, 5]),
        cases::int32_node(&[10, 20, 30]),
    ];
    expect_invalid(case.build(), FULL, "array", "increasing");
}

#[test]
fn run_ends_and_values_of_different_lengths_are_rejected() {
    let mut case = cases::run_end_encoded();
    case.array.children[1] = cases::int32_node(&[10, 20, 30]);
    expect_invalid(case.build(), MINIMAL, "array", "run_ends");
}

#[test]
fn run_ends_with_nulls_are_rejected() {
    let mut case = cases::run_end_encoded();
    case.array.children[0] = ArrayNode::new(2, 1, vec![bitmap(&[true, false]), i32s(&[2, 5])]);
    expect_invalid(case.build(), MINIMAL, "child 0", "null");
}

#[test]
fn a_last_run_end_below_the_length_is_rejected() {
    let mut case = cases::run_end_encoded();
    case.array.children[0] = cases::int32_node(&[2, 4]);
    expect_invalid(case.build(), DEFAULT, "child 0", "last run end is 4");
}

// ------------------------------------------------------------ views

fn views_with_long_view(buffer_index: i32, offset: i32) -> Case {
    let mut case = cases::utf8_view();
    let views = [
        view(b"hi", 0, 0),
        view(b"", 0, 0),
        view(cases::LONG, buffer_index, offset),
    ]
    .concat();
    case.array.buffers[1] = Some(views);
    case
}

#[test]
fn a_long_view_into_a_missing_variadic_buffer_is_rejected_at_full() {
    let case = views_with_long_view(1, 0);
    expect_invalid(case.build(), FULL, "array", "buffer index");
}

#[test]
fn a_long_view_past_the_end_of_its_buffer_is_rejected_at_full() {
    let case = views_with_long_view(0, 5);
    expect_invalid(case.build(), FULL, "array", "buffer slice");
}

#[test]
fn a_negative_variadic_buffer_size_is_rejected() {
    let mut case = cases::utf8_view();
    case.array.buffers[3] = i64s(&[-1]);
    expect_invalid(
        case.build(),
        DEFAULT,
        "buffer 2",
        "variadic buffer size is -1",
    );
}

#[test]
fn a_null_variadic_sizes_buffer_is_rejected() {
    let mut case = cases::utf8_view();
    case.array.buffers[3] = None;
    expect_invalid(
        case.build(),
        DEFAULT,
        "buffer 3",
        "variadic sizes buffer is NULL",
    );
}

#[test]
fn a_view_array_without_a_variadic_sizes_buffer_is_rejected() {
    // Only validity and views: the spec requires the sizes buffer, always.
    let mut case = cases::utf8_view();
    case.array.buffers.truncate(2);
    expect_invalid(case.build(), FULL, "array", "n_buffers is 2");
}

// ------------------------------------------------------------ dictionaries and nulls

#[test]
fn a_dictionary_key_out_of_range_is_rejected_at_full() {
    let mut case = cases::dictionary();
    case.array.buffers[1] = i8s(&[0, 5, 0]);
    expect_invalid(case.build(), FULL, "array", "out of bounds");
}

#[test]
fn a_null_count_that_disagrees_with_the_bitmap_is_rejected_at_full() {
    let mut case = cases::int32();
    case.array.null_count = 2;
    expect_invalid(case.build(), FULL, "array", "null_count");
}

#[test]
fn an_inline_view_with_non_zero_padding_is_rejected_at_full() {
    let mut case = cases::utf8_view();
    let mut hi = view(b"hi", 0, 0);
    hi[10] = b'!';
    case.array.buffers[1] = Some([hi, view(b"", 0, 0), view(cases::LONG, 0, 0)].concat());
    expect_invalid(case.build(), FULL, "array", "padding");
}

#[test]
fn a_long_view_whose_prefix_differs_from_its_data_is_rejected_at_full() {
    let mut case = cases::utf8_view();
    let mut long = view(cases::LONG, 0, 0);
    long[4..8].copy_from_slice(b"THIS");
    case.array.buffers[1] = Some([view(b"hi", 0, 0), view(b"", 0, 0), long].concat());
    expect_invalid(case.build(), FULL, "array", "prefix");
}

// ------------------------------------------------------------ nullability

#[test]
fn a_null_map_key_is_rejected_at_full() {
    let mut case = cases::map();
    let keys = &mut case.array.children[0].children[0];
    keys.null_count = 1;
    keys.buffers[0] = bitmap(&[true, false]);
    expect_invalid(case.build(), FULL, "child 0", "non-nullable");
}

#[test]
fn nulls_in_a_non_nullable_struct_field_are_rejected_at_full_naming_the_field() {
    let mut case = cases::struct_ab();
    case.schema.children[0] = SchemaNode::new("i", "a").non_nullable();
    case.array.children[0] =
        ArrayNode::new(3, 1, vec![bitmap(&[true, false, true]), i32s(&[1, 0, 3])]);
    expect_invalid(case.build(), FULL, "field \"a\"", "non-nullable");
}

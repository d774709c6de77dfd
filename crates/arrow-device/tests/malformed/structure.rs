//! Defects in the `ArrowArray` structs themselves: counts, lengths, offsets,
//! NULL pointers, children, dictionaries, released structs, depth and cycles.
//! None of these needs a data buffer to be read, so each is caught at
//! `Minimal` (most of them at every level; see `levels.rs`).

use arrow_device::schema::MAX_NESTING_DEPTH;
use arrow_schema::DataType;

use super::cases;
use super::{expect_invalid, releases, DEFAULT, FULL, MINIMAL};
use crate::common::producer::*;

// ------------------------------------------------------------ buffers

#[test]
fn too_many_buffers_are_rejected() {
    let mut case = cases::int32();
    case.array.buffers.push(i32s(&[0, 0, 0]));
    expect_invalid(case.build(), FULL, "array", "n_buffers is 3");
}

#[test]
fn too_few_buffers_are_rejected() {
    let mut case = cases::int32();
    case.array.buffers.pop();
    expect_invalid(case.build(), FULL, "array", "n_buffers is 1");
}

#[test]
fn a_null_buffers_array_with_buffers_is_rejected() {
    let mut built = cases::int32().build();
    // SAFETY: the builder keeps release and private_data; the defect is the test.
    unsafe { root_array(&mut built.array) }.buffers = std::ptr::null_mut();
    expect_invalid(built, FULL, "array", "buffers is NULL");
}

#[test]
fn a_null_values_buffer_is_rejected() {
    let mut case = cases::int32();
    case.array.buffers[1] = None;
    expect_invalid(case.build(), FULL, "buffer 1", "NULL");
}

#[test]
fn null_offsets_with_a_non_zero_length_are_rejected() {
    let mut case = cases::utf8();
    case.array.buffers[1] = None;
    expect_invalid(case.build(), FULL, "buffer 1", "offsets buffer is NULL");
}

#[test]
fn a_null_data_buffer_with_a_positive_last_offset_is_rejected() {
    let mut case = cases::utf8();
    case.array.buffers[2] = None;
    expect_invalid(case.build(), FULL, "buffer 2", "data buffer is NULL");
}

#[test]
fn a_null_validity_buffer_with_nulls_is_rejected() {
    let mut case = cases::int32();
    case.array.buffers[0] = None;
    expect_invalid(case.build(), FULL, "buffer 0", "validity");
}

#[test]
fn a_null_dense_union_offsets_buffer_is_rejected() {
    let mut case = cases::dense_union();
    case.array.buffers[1] = None;
    expect_invalid(case.build(), FULL, "buffer 1", "NULL");
}

#[test]
fn a_sparse_union_with_a_validity_buffer_is_rejected() {
    // Pre-1.0 unions had a validity bitmap; the C interface has none.
    let mut case = cases::sparse_union();
    case.array.buffers.insert(0, None);
    expect_invalid(case.build(), FULL, "array", "n_buffers is 2");
}

#[test]
fn a_run_end_encoded_array_with_buffers_is_rejected() {
    let mut case = cases::run_end_encoded();
    case.array.buffers.push(None);
    expect_invalid(case.build(), FULL, "array", "n_buffers is 1");
}

// ------------------------------------------------------------ lengths and counts

#[test]
fn a_negative_length_is_rejected() {
    let mut case = cases::int32();
    case.array.length = -1;
    expect_invalid(case.build(), FULL, "array", "length is -1");
}

#[test]
fn a_negative_offset_is_rejected() {
    let mut case = cases::int32();
    case.array.offset = -1;
    expect_invalid(case.build(), FULL, "array", "offset is -1");
}

#[test]
fn an_offset_whose_buffer_size_overflows_is_rejected() {
    let mut case = cases::int32();
    // offset + length fits int64; the values buffer's size in bytes does not.
    case.array.offset = i64::MAX / 2;
    expect_invalid(case.build(), FULL, "buffer 1", "overflow");
}

#[test]
fn an_offset_plus_length_past_int64_is_rejected_at_every_level() {
    // A struct without children has no buffer whose size would overflow
    // first: only the sum itself can be checked.
    let empty_struct = || {
        Case::new(
            ArrayNode::new(3, 0, vec![None]),
            SchemaNode::new("+s", "empty"),
        )
    };
    for (offset, length) in [(i64::MAX, 3), (i64::MAX - 2, 3), (3, i64::MAX)] {
        let mut case = empty_struct();
        (case.array.offset, case.array.length) = (offset, length);
        for level in super::LEVELS {
            let err = expect_invalid(case.build(), level, "array", "overflows int64");
            assert!(err.to_string().contains(&offset.to_string()), "{err}");
        }
    }
    let mut fits = empty_struct();
    (fits.array.offset, fits.array.length) = (i64::MAX - 3, 3);
    assert_eq!(super::expect_ok(fits.build(), FULL).len(), 3);
}

#[test]
fn a_null_count_below_minus_one_is_rejected() {
    let mut case = cases::int32();
    case.array.null_count = -2;
    expect_invalid(case.build(), FULL, "array", "null_count is -2");
}

#[test]
fn a_null_count_above_the_length_is_rejected() {
    let mut case = cases::int32();
    case.array.null_count = 4;
    expect_invalid(case.build(), FULL, "array", "null_count 4");
}

#[test]
fn a_negative_child_length_is_rejected_with_the_child_path() {
    let mut case = cases::struct_ab();
    case.array.children[1].length = -5;
    expect_invalid(case.build(), FULL, "field \"b\"", "length is -5");
}

// ------------------------------------------------------------ children

#[test]
fn a_child_count_that_differs_from_the_schema_is_rejected() {
    let mut case = cases::struct_ab();
    case.array.children.pop();
    expect_invalid(case.build(), FULL, "array", "n_children is 1");
}

#[test]
fn a_negative_child_count_is_rejected() {
    let mut built = cases::struct_ab().build();
    // SAFETY: the builder keeps release and private_data; the defect is the test.
    unsafe { root_array(&mut built.array) }.n_children = -1;
    expect_invalid(built, FULL, "array", "n_children is -1");
}

#[test]
fn a_null_children_array_is_rejected() {
    let mut built = cases::struct_ab().build();
    // SAFETY: the builder keeps release and private_data; the defect is the test.
    unsafe { root_array(&mut built.array) }.children = std::ptr::null_mut();
    expect_invalid(built, FULL, "array", "children is NULL");
}

#[test]
fn a_null_child_pointer_is_rejected_with_the_field_path() {
    let mut built = cases::struct_ab().build();
    // SAFETY: the builder keeps release and private_data; the defect is the test.
    set_child_array_ptr(
        unsafe { root_array(&mut built.array) },
        1,
        std::ptr::null_mut(),
    );
    expect_invalid(built, FULL, "field \"b\"", "NULL");
}

#[test]
fn a_released_child_is_rejected_with_the_field_path() {
    let mut built = cases::struct_ab().build();
    // SAFETY: the builder keeps release and private_data; the defect is the test.
    child_array(unsafe { root_array(&mut built.array) }, 1).release = None;
    expect_invalid(built, FULL, "field \"b\"", "released");
}

#[test]
fn a_struct_child_shorter_than_the_struct_is_rejected_with_the_field_path() {
    let mut case = cases::struct_ab();
    case.array.children[1] = cases::utf8_node(&["a", ""]);
    expect_invalid(case.build(), MINIMAL, "field \"b\"", "length 2");
}

#[test]
fn a_fixed_size_list_child_shorter_than_length_times_size_is_rejected() {
    let mut case = cases::fixed_size_list();
    case.array.children[0] = cases::int32_node(&[1, 2, 3, 4, 5]);
    expect_invalid(case.build(), MINIMAL, "child 0", "length 5");
}

#[test]
fn a_sparse_union_child_shorter_than_the_union_is_rejected() {
    let mut case = cases::sparse_union();
    case.array.children[1] = cases::utf8_node(&["a", "b"]);
    expect_invalid(case.build(), MINIMAL, "child 1", "length 2");
}

#[test]
fn a_list_child_shorter_than_the_last_offset_is_rejected() {
    let mut case = cases::list();
    case.array.children[0] = cases::int32_node(&[1, 2]);
    expect_invalid(case.build(), DEFAULT, "child 0", "last offset");
}

// ------------------------------------------------------------ dictionaries

#[test]
fn a_missing_dictionary_is_rejected() {
    let mut case = cases::dictionary();
    case.array.dictionary = None;
    expect_invalid(case.build(), FULL, "array", "dictionary is NULL");
}

#[test]
fn a_dictionary_the_schema_does_not_have_is_rejected() {
    let mut case = cases::int32();
    case.array.dictionary = Some(Box::new(cases::utf8_node(&["x"])));
    expect_invalid(case.build(), FULL, "array", "dictionary is set");
}

#[test]
fn a_defect_inside_the_dictionary_is_named_by_the_dictionary_path() {
    let mut case = cases::dictionary();
    case.array.dictionary.as_mut().unwrap().buffers[2] = None;
    expect_invalid(
        case.build(),
        FULL,
        "dictionary > buffer 2",
        "data buffer is NULL",
    );
}

// ------------------------------------------------------------ released structs

#[test]
fn a_released_array_struct_is_rejected_and_not_released_again() {
    let mut case = cases::int32();
    // The struct handed in is a released one (release NULL), as the
    // producer's release callback leaves it.
    case.array.released = true;
    let built = case.build();
    assert_eq!(releases(&built.counters), (1, 0));
    // The importer must not call the (NULL) release again; the counts stay
    // at one release each once it has released the schema.
    expect_invalid(built, FULL, "array", "released");
}

#[test]
fn a_released_schema_struct_is_rejected_and_not_released_again() {
    let mut case = cases::int32();
    case.schema.released = true;
    let built = case.build();
    assert_eq!(releases(&built.counters), (0, 1));
    expect_invalid(built, FULL, "array", "released");
}

// ------------------------------------------------------------ depth and cycles

#[test]
fn nesting_at_the_64_level_limit_is_accepted() {
    // 64 list levels around the int32 leaf: the leaf is at depth 64.
    let imported = super::expect_ok(cases::nested_lists(MAX_NESTING_DEPTH).build(), FULL);
    assert_eq!(imported.len(), 1);
    let mut data_type = imported.data_type().clone();
    let mut depth = 0;
    while let DataType::List(item) = data_type {
        data_type = item.data_type().clone();
        depth += 1;
    }
    assert_eq!((depth, data_type), (MAX_NESTING_DEPTH, DataType::Int32));
}

#[test]
fn nesting_deeper_than_64_levels_is_rejected() {
    // The schema walk stops at the first node past the limit, whose path
    // has a link per level.
    let err = expect_invalid(
        cases::nested_lists(MAX_NESTING_DEPTH + 1).build(),
        FULL,
        "child 0",
        "deeper than 64",
    );
    let message = err.to_string();
    assert!(
        message.ends_with(": nesting is deeper than 64 levels"),
        "{message}"
    );
    assert_eq!(
        message.matches(" > ").count(),
        MAX_NESTING_DEPTH,
        "{message}"
    );
}

#[test]
fn an_array_child_that_points_to_its_parent_is_an_error_not_a_stack_overflow() {
    // list<list<list<int32>>>: the middle list's child pointer is the middle
    // list itself. The walk follows the (finite) type, so it must stop at the
    // first node whose shape does not match its type.
    let mut built = cases::nested_lists(3).build();
    // SAFETY: the builder keeps release and private_data; the defect is the test.
    let middle: *mut _ = child_array(unsafe { root_array(&mut built.array) }, 0);
    // SAFETY: `middle` points to a child struct owned by the built root.
    set_child_array_ptr(unsafe { &mut *middle }, 0, middle);
    expect_invalid(built, FULL, "child 0", "n_children is 1");
}

#[test]
fn a_dictionary_that_points_to_its_own_node_is_an_error() {
    // struct<a: dictionary<int8, utf8>> whose `a` is its own dictionary.
    let mut a = cases::dictionary().schema;
    a.name = Some(b"a".to_vec());
    let case = Case::new(
        ArrayNode::new(3, 0, vec![None]).with_children(vec![cases::dictionary().array]),
        SchemaNode::new("+s", "st").with_children(vec![a]),
    );
    let mut built = case.build();
    // SAFETY: the builder keeps release and private_data; the defect is the test.
    let a: *mut _ = child_array(unsafe { root_array(&mut built.array) }, 0);
    // SAFETY: `a` points to a child struct owned by the built root; its
    // dictionary struct stays owned (and freed) by the root.
    unsafe { (*a).dictionary = a };
    expect_invalid(built, FULL, "field \"a\" > dictionary", "n_buffers");
}

#[test]
fn a_null_boolean_values_buffer_is_rejected() {
    let case = Case::new(
        ArrayNode::new(3, 0, vec![None, None]),
        SchemaNode::new("b", "flag"),
    );
    expect_invalid(case.build(), FULL, "buffer 1", "NULL");
}

//! Defects in the `ArrowSchema` tree: format strings, NULL and released
//! members, child counts, map and run-end-encoded shapes, cycles.
//!
//! Most defects sit on field `b` of `struct<a: int32, b: utf8>`, so that the
//! error must name `field "b"`. A cycle makes a naive recursive importer
//! overflow its stack, and a negative count makes it read wild pointers,
//! which kill the whole process; those tests are `isolated_test!`s.

use super::cases;
use super::{expect_invalid, DEFAULT, FULL};
use crate::common::producer::*;

/// `struct<a: int32, b: utf8>` with field `b`'s format replaced.
fn field_b_with_format(format: Option<&[u8]>) -> Case {
    let mut case = cases::struct_ab();
    case.schema.children[1].format = format.map(<[u8]>::to_vec);
    case
}

// ------------------------------------------------------------ format strings

#[test]
fn an_unknown_format_is_rejected_with_the_field_path() {
    expect_invalid(
        field_b_with_format(Some(b"Q")).build(),
        FULL,
        "field \"b\"",
        "\"Q\"",
    );
}

#[test]
fn a_truncated_fixed_size_list_format_is_rejected() {
    expect_invalid(
        field_b_with_format(Some(b"+w:")).build(),
        FULL,
        "field \"b\"",
        "\"+w:\"",
    );
}

#[test]
fn a_fixed_size_binary_format_without_a_width_is_rejected() {
    expect_invalid(
        field_b_with_format(Some(b"w:")).build(),
        FULL,
        "field \"b\"",
        "\"w:\"",
    );
}

#[test]
fn a_decimal_format_without_a_scale_is_rejected() {
    expect_invalid(
        field_b_with_format(Some(b"d:10")).build(),
        FULL,
        "field \"b\"",
        "d:10",
    );
}

#[test]
fn a_timestamp_format_without_its_colon_is_rejected() {
    expect_invalid(
        field_b_with_format(Some(b"tsu")).build(),
        FULL,
        "field \"b\"",
        "\"tsu\"",
    );
}

#[test]
fn a_format_that_is_not_utf8_is_rejected() {
    expect_invalid(
        field_b_with_format(Some(b"\xff")).build(),
        FULL,
        "field \"b\"",
        "utf-8",
    );
}

#[test]
fn a_null_format_is_rejected_with_the_field_path() {
    expect_invalid(
        field_b_with_format(None).build(),
        FULL,
        "field \"b\"",
        "format is NULL",
    );
}

#[test]
fn a_name_that_is_not_utf8_is_rejected() {
    let mut built = cases::struct_ab().build();
    // Written into the built struct: the producer's names are Rust strings.
    // SAFETY: the builder keeps release and private_data; the defect is the test.
    let b = child_schema(unsafe { root_schema(&mut built.schema) }, 1);
    b.name = c"b\xff".as_ptr();
    expect_invalid(built, FULL, "field 1", "utf-8");
}

#[test]
fn a_union_format_with_fewer_type_ids_than_children_is_rejected() {
    let mut case = cases::dense_union();
    case.schema.format = Some(b"+ud:0".to_vec());
    expect_invalid(case.build(), FULL, "array", "union");
}

#[test]
fn a_union_format_with_a_repeated_type_id_is_rejected() {
    let mut case = cases::sparse_union();
    case.schema.format = Some(b"+us:1,1".to_vec());
    expect_invalid(case.build(), FULL, "array", "more than once");
}

// ------------------------------------------------------------ members and children

#[test]
fn a_released_schema_child_is_rejected_with_the_field_path() {
    let mut built = cases::struct_ab().build();
    // SAFETY: the builder keeps release and private_data; the defect is the test.
    child_schema(unsafe { root_schema(&mut built.schema) }, 1).release = None;
    // A released struct's name may not be read, so the path gives the index.
    expect_invalid(built, FULL, "field 1", "released");
}

#[test]
fn a_null_schema_child_pointer_is_rejected() {
    let mut built = cases::struct_ab().build();
    // SAFETY: the builder keeps release and private_data; the defect is the test.
    set_child_schema_ptr(
        unsafe { root_schema(&mut built.schema) },
        1,
        std::ptr::null_mut(),
    );
    expect_invalid(built, FULL, "array", "NULL");
}

#[test]
fn a_null_schema_children_array_is_rejected() {
    let mut built = cases::struct_ab().build();
    // SAFETY: the builder keeps release and private_data; the defect is the test.
    unsafe { root_schema(&mut built.schema) }.children = std::ptr::null_mut();
    expect_invalid(built, FULL, "array", "children is NULL");
}

isolated_test! {
    // A negative count read as a huge unsigned one walks off the children
    // array: isolated, as that crashes.
    fn a_negative_schema_child_count_is_rejected() {
        let mut built = cases::struct_ab().build();
        // SAFETY: the builder keeps release and private_data; the defect is the test.
        unsafe { root_schema(&mut built.schema) }.n_children = -1;
        expect_invalid(built, FULL, "array", "n_children is -1");
    }
}

#[test]
fn a_list_schema_without_its_child_is_rejected() {
    let mut case = cases::list();
    case.schema.children.clear();
    expect_invalid(case.build(), FULL, "array", "n_children is 0");
}

#[test]
fn a_dictionary_on_a_non_integer_index_is_rejected() {
    let mut case = cases::struct_ab();
    case.schema.children[1].dictionary = Some(Box::new(SchemaNode::new("u", "")));
    expect_invalid(case.build(), FULL, "field \"b\"", "dictionary");
}

#[test]
fn a_map_whose_entries_are_not_a_struct_of_two_is_rejected() {
    let mut case = cases::map();
    case.schema.children[0].children.pop();
    case.array.children[0].children.pop();
    expect_invalid(case.build(), DEFAULT, "child 0", "entries");
}

#[test]
fn a_map_whose_entries_are_not_a_struct_is_rejected() {
    let mut case = cases::map();
    case.schema.children[0] = SchemaNode::new("i", "entries").non_nullable();
    case.array.children[0] = cases::int32_node(&[1, 2]);
    expect_invalid(case.build(), DEFAULT, "child 0", "struct");
}

#[test]
fn nullable_run_ends_are_rejected() {
    let mut case = cases::run_end_encoded();
    case.schema.children[0].flags = NULLABLE;
    expect_invalid(case.build(), DEFAULT, "child 0", "nullable");
}

// ------------------------------------------------------------ cycles

isolated_test! {
    fn a_schema_child_that_points_to_its_parent_is_an_error_not_a_stack_overflow() {
        // list<list<int32>> whose inner list's child is the inner list.
        let mut built = cases::nested_lists(2).build();
        // SAFETY: the builder keeps release and private_data; the defect is the test.
        let inner: *mut _ = child_schema(unsafe { root_schema(&mut built.schema) }, 0);
        // SAFETY: `inner` points to a child struct owned by the built root.
        set_child_schema_ptr(unsafe { &mut *inner }, 0, inner);
        expect_invalid(built, FULL, "child 0", "cycle");
    }
}

isolated_test! {
    fn a_schema_that_is_its_own_dictionary_is_an_error_not_a_stack_overflow() {
        // dictionary<int8, ...> whose dictionary is an int32 index (a legal
        // dictionary-encoded dictionary) with itself as its dictionary.
        let mut case = cases::dictionary();
        case.schema.dictionary = Some(Box::new(SchemaNode::new("i", "")));
        let mut built = case.build();
        // SAFETY: the builder keeps release and private_data; the defect is the test.
        let root = unsafe { root_schema(&mut built.schema) };
        let dictionary = root.dictionary;
        // SAFETY: the dictionary struct is owned by the built root.
        unsafe { (*dictionary).dictionary = dictionary };
        expect_invalid(built, FULL, "dictionary", "cycle");
    }
}

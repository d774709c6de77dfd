//! Defects in the shape of a schema tree: the children maps, run-end encoded
//! arrays and dictionaries must have, cycles, and trees larger than the
//! importer walks. Each is asserted by its exact message.
//!
//! A cycle makes a naive recursive importer overflow its stack, which kills
//! the whole process; those tests are `isolated_test!`s. A cycle through the
//! root can only be imported from the schema alone (`import_field`, which
//! borrows it): `try_new` moves the root, so a pointer back to it would
//! dangle.

use arrow_device::abi::raw;
use arrow_device::schema::MAX_SCHEMA_NODES;

use super::cases;
use super::{expect_message, field_error, DEFAULT, FULL};
use crate::common::producer::*;

// ------------------------------------------------------------ maps

#[test]
fn malformed_map_schemas_are_rejected() {
    let mut entries_not_a_struct = cases::map();
    entries_not_a_struct.schema.children[0] = SchemaNode::new("i", "entries").non_nullable();
    entries_not_a_struct.array.children[0] = cases::int32_node(&[1, 2]);
    expect_message(
        entries_not_a_struct.build(),
        DEFAULT,
        r#"child 0 "entries": map entries have type Int32, expected a struct of (key, value)"#,
    );

    let mut entries_of_one = cases::map();
    entries_of_one.schema.children[0].children.pop();
    entries_of_one.array.children[0].children.pop();
    expect_message(
        entries_of_one.build(),
        DEFAULT,
        r#"child 0 "entries": map entries have 1 fields, expected 2 (key, value)"#,
    );

    let mut nullable_entries = cases::map();
    nullable_entries.schema.children[0].flags = NULLABLE;
    expect_message(
        nullable_entries.build(),
        DEFAULT,
        r#"child 0 "entries": map entries are nullable, expected non-nullable"#,
    );

    let mut nullable_keys = cases::map();
    nullable_keys.schema.children[0].children[0].flags = NULLABLE;
    expect_message(
        nullable_keys.build(),
        DEFAULT,
        r#"child 0 "entries" > field "key": map key is nullable, expected non-nullable"#,
    );
}

// ------------------------------------------------------------ run-end encoding

#[test]
fn malformed_run_end_encoded_schemas_are_rejected() {
    for (format, found) in [("g", "Float64"), ("C", "UInt8")] {
        let mut case = cases::run_end_encoded();
        case.schema.children[0].format = Some(format.as_bytes().to_vec());
        expect_message(
            case.build(),
            DEFAULT,
            &format!(
                r#"child 0 "run_ends": run_ends have type {found}, expected Int16, Int32 or Int64"#
            ),
        );
    }

    let mut nullable_run_ends = cases::run_end_encoded();
    nullable_run_ends.schema.children[0].flags = NULLABLE;
    expect_message(
        nullable_run_ends.build(),
        DEFAULT,
        r#"child 0 "run_ends": run_ends are nullable, expected non-nullable"#,
    );
}

// ------------------------------------------------------------ dictionaries

#[test]
fn a_dictionary_needs_an_integer_index() {
    const INTEGERS: &str = r#"a dictionary index must be a signed or unsigned integer ("c", "C", "s", "S", "i", "I", "l" or "L")"#;
    let mut utf8_index = cases::struct_ab();
    utf8_index.schema.children[1].dictionary = Some(Box::new(SchemaNode::new("u", "")));
    expect_message(
        utf8_index.build(),
        FULL,
        &format!(r#"field "b": format "u" (Utf8) has a dictionary, but {INTEGERS}"#),
    );

    let mut list_index = cases::list();
    list_index.schema.dictionary = Some(Box::new(SchemaNode::new("i", "")));
    expect_message(
        list_index.build(),
        FULL,
        &format!("array: a list has a dictionary, but {INTEGERS}"),
    );
}

// ------------------------------------------------------------ cycles

const CYCLE: &str =
    "the struct is its own ancestor: the children or dictionary pointers form a cycle";

isolated_test! {
    fn a_schema_child_that_points_to_an_ancestor_is_an_error_not_a_stack_overflow() {
        // list<list<int32>> whose inner list's child is the inner list.
        let mut built = cases::nested_lists(2).build();
        // SAFETY: the builder keeps release and private_data; the defect is the test.
        let inner: *mut _ = child_schema(unsafe { root_schema(&mut built.schema) }, 0);
        // SAFETY: `inner` points to a child struct owned by the built root.
        set_child_schema_ptr(unsafe { &mut *inner }, 0, inner);
        expect_message(built, FULL, &format!(r#"child 0 "item" > child 0 "item": {CYCLE}"#));

        // A struct that is its own child.
        let mut built = SchemaNode::new("+s", "loop")
            .with_children(vec![SchemaNode::new("i", "")])
            .build();
        // SAFETY: as above; the pointer is the root's own address, which the
        // borrowing import_field keeps.
        let root: *mut _ = unsafe { root_schema(&mut built.schema) };
        // SAFETY: `root` is the live root of `built`.
        set_child_schema_ptr(unsafe { &mut *root }, 0, root);
        assert_eq!(field_error(&built), format!(r#"field "loop": {CYCLE}"#));

        // A grandchild pointing at the root, through a list.
        let mut built = SchemaNode::new("+l", "top")
            .with_children(vec![SchemaNode::new("+l", "item")
                .with_children(vec![SchemaNode::new("i", "")])])
            .build();
        // SAFETY: as above.
        let root: *mut _ = unsafe { root_schema(&mut built.schema) };
        // SAFETY: `root` is the live root of `built`, its child one it owns.
        set_child_schema_ptr(child_schema(unsafe { &mut *root }, 0), 0, root);
        assert_eq!(
            field_error(&built),
            format!(r#"child 0 "item" > child 0 "top": {CYCLE}"#)
        );
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
        expect_message(built, FULL, &format!("dictionary > dictionary: {CYCLE}"));

        // The root is its own dictionary.
        let mut built = SchemaNode::new("i", "")
            .with_dictionary(SchemaNode::new("u", ""))
            .build();
        // SAFETY: as above; import_field borrows the root in place.
        let root: *mut raw::ArrowSchema = unsafe { root_schema(&mut built.schema) };
        // SAFETY: `root` is the live root of `built`. The write goes through
        // the pointer it stores: one through a reference taken before would
        // invalidate that pointer (Miri's Stacked Borrows).
        unsafe { (*root).dictionary = root };
        assert_eq!(field_error(&built), format!("dictionary: {CYCLE}"));
    }
}

// ------------------------------------------------------------ size

#[test]
fn a_dag_that_unfolds_into_too_many_nodes_is_rejected() {
    // Each level's two fields share one struct: 2^40 paths from 41 structs.
    let mut node = SchemaNode::new("i", "x");
    for _ in 0..40 {
        node = SchemaNode::new("+s", "x").with_children(vec![node, SchemaNode::new("n", "")]);
    }
    let mut built = node.build();
    // SAFETY: the builder keeps release and private_data; sharing is the test.
    let mut level: &mut raw::ArrowSchema = unsafe { root_schema(&mut built.schema) };
    while level.n_children == 2 {
        let first: *mut raw::ArrowSchema = child_schema(level, 0);
        set_child_schema_ptr(level, 1, first);
        // SAFETY: `first` is a child struct owned by the built root.
        level = unsafe { &mut *first };
    }
    let message = field_error(&built);
    assert!(
        message.ends_with(&format!(
            ": the tree has more than {MAX_SCHEMA_NODES} nodes (children shared many times?)"
        )),
        "{message}"
    );
}

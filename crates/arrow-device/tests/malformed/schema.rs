//! Defects in the `ArrowSchema` tree: bad strings, released structs, NULL
//! pointers, child counts and metadata, each asserted by its exact message
//! (path and defect). The format parser's own messages, one per way a format
//! string can be wrong, are the schema module's unit tests
//! (`src/schema/tests/format.rs`); here a bad format is only shown to name
//! its node. Type shapes (maps, run-end encoding, dictionaries), cycles and
//! size limits are in `schema_shapes.rs`.
//!
//! Most defects sit on field `b` of `struct<a: int32, b: utf8>` and go
//! through `DeviceArray::try_new`, which must release both structs once.
//! Defects that need no array are imported from the schema alone with
//! `import_field`, which borrows it. A negative or hostile count makes a
//! naive importer read wild pointers, which kills the whole process; those
//! tests are `isolated_test!`s.

use arrow_device::schema::import_schema;

use super::cases;
use super::{expect_message, field_error, releases, DEFAULT, FULL};
use crate::common::producer::*;

/// `struct<a: int32, b: utf8>` with field `b`'s format replaced.
fn field_b_with_format(format: Option<&[u8]>) -> Case {
    let mut case = cases::struct_ab();
    case.schema.children[1].format = format.map(<[u8]>::to_vec);
    case
}

/// A struct root holding the one field `column`.
fn column(column: SchemaNode) -> SchemaNode {
    SchemaNode::new("+s", "").with_children(vec![column])
}

// ------------------------------------------------------------ strings

#[test]
fn a_bad_format_string_is_rejected_naming_its_node() {
    expect_message(
        field_b_with_format(Some(b"Q")).build(),
        FULL,
        r#"field "b": format "Q" is not a format string of the C Data Interface"#,
    );

    let root = SchemaNode::new("", "");
    assert_eq!(
        field_error(&root.build()),
        r#"array: format is empty, expected a format string such as "i" or "+s""#
    );

    let fixed = SchemaNode::new("+w:", "item").with_children(vec![SchemaNode::new("i", "x")]);
    let outer = SchemaNode::new("+l", "outer").with_children(vec![fixed]);
    assert_eq!(
        field_error(&column(outer).build()),
        r#"field "outer" > child 0 "item": format "+w:" is truncated: expected a list size after "+w:""#
    );

    let index = SchemaNode::new("c", "item").with_dictionary(SchemaNode::new("d:0,2", ""));
    let list = SchemaNode::new("+l", "a").with_children(vec![index]);
    assert_eq!(
        field_error(&column(list).build()),
        r#"field "a" > child 0 "item" > dictionary: format "d:0,2" has decimal precision 0, expected 1 to 38 for a 128-bit decimal"#
    );

    let union = SchemaNode::new("+ud:0,1", "u")
        .with_children(vec![SchemaNode::new("i", "x"), SchemaNode::new("q", "y")]);
    assert_eq!(
        field_error(&column(union).build()),
        r#"field "u" > child 1 "y": format "q" is not a format string of the C Data Interface"#
    );
}

#[test]
fn a_format_that_is_not_utf8_is_rejected() {
    expect_message(
        field_b_with_format(Some(b"\xff")).build(),
        FULL,
        r#"field "b": format is not valid UTF-8: invalid byte 0xff at offset 0"#,
    );
}

#[test]
fn a_null_format_is_rejected_with_the_field_path() {
    expect_message(
        field_b_with_format(None).build(),
        FULL,
        r#"field "b": format is NULL, expected a format string"#,
    );
}

#[test]
fn a_name_that_is_not_utf8_is_rejected() {
    let mut case = cases::struct_ab();
    case.schema.children[1].name = Some(b"b\xff".to_vec());
    // A name that cannot be read cannot name the path: it has the index.
    expect_message(
        case.build(),
        FULL,
        "field 1: name is not valid UTF-8: invalid byte 0xff at offset 1",
    );
}

// ------------------------------------------------------------ released structs

#[test]
fn released_schema_structs_are_rejected_at_their_path() {
    let mut case = cases::struct_ab();
    case.schema.children[1].released = true;
    // A released struct's name may not be read, so the path gives the index.
    expect_message(
        case.build(),
        FULL,
        "field 1: struct was released (release is NULL), expected a live struct",
    );

    // The root, through both schema importers (`try_new` has its own check;
    // see structure.rs).
    let released = "array: struct was released (release is NULL), expected a live struct";
    assert_eq!(
        field_error(&SchemaNode::new("+s", "").released().build()),
        released
    );
    let root = SchemaNode::new("+s", "").released().build();
    assert_eq!(
        import_schema(&root.schema).unwrap_err().to_string(),
        released
    );
    assert_eq!(releases(&root.counters), (0, 1));

    let index = SchemaNode::new("i", "d").with_dictionary(SchemaNode::new("u", "").released());
    assert_eq!(
        field_error(&column(index).build()),
        r#"field "d" > dictionary: struct was released (release is NULL), expected a live struct"#
    );

    // Nested: the dictionary's values are themselves dictionary-encoded.
    let inner = SchemaNode::new("s", "").with_dictionary(SchemaNode::new("z", "").released());
    let index = SchemaNode::new("i", "d").with_dictionary(inner);
    assert_eq!(
        field_error(&column(index).build()),
        r#"field "d" > dictionary > dictionary: struct was released (release is NULL), expected a live struct"#
    );
}

// ------------------------------------------------------------ children

#[test]
fn a_null_schema_child_pointer_is_rejected() {
    let mut built = cases::struct_ab().build();
    // SAFETY: the builder keeps release and private_data; the defect is the test.
    set_child_schema_ptr(
        unsafe { root_schema(&mut built.schema) },
        1,
        std::ptr::null_mut(),
    );
    expect_message(
        built,
        FULL,
        "array: children[1] is NULL, expected a pointer to an ArrowSchema",
    );
}

#[test]
fn a_null_schema_children_array_is_rejected() {
    let mut built = cases::struct_ab().build();
    // SAFETY: the builder keeps release and private_data; the defect is the test.
    unsafe { root_schema(&mut built.schema) }.children = std::ptr::null_mut();
    expect_message(
        built,
        FULL,
        "array: children is NULL, expected 2 child pointers (n_children is 2)",
    );
}

isolated_test! {
    // A negative count read as a huge unsigned one walks off the children
    // array: isolated, as that crashes.
    fn a_negative_schema_child_count_is_rejected() {
        let mut built = cases::struct_ab().build();
        // SAFETY: the builder keeps release and private_data; the defect is the test.
        unsafe { root_schema(&mut built.schema) }.n_children = -1;
        expect_message(built, FULL, "array: n_children is -1, expected >= 0");
    }
}

isolated_test! {
    // Refused before any child pointer is read: isolated, as reading them
    // would walk off the children array.
    fn a_hostile_schema_child_count_is_refused_before_any_child_is_read() {
        let mut built = cases::struct_ab().build();
        // SAFETY: the builder keeps release and private_data; the defect is the test.
        unsafe { root_schema(&mut built.schema) }.n_children = i64::MAX;
        expect_message(
            built,
            FULL,
            "array: n_children is 9223372036854775807, more than the 1048576 nodes a tree may have",
        );
    }
}

#[test]
fn a_child_count_the_format_does_not_allow_is_rejected() {
    let mut list_without_child = cases::list();
    list_without_child.schema.children.clear();
    let mut list_of_two = cases::list();
    list_of_two.schema.children.push(SchemaNode::new("i", "b"));
    let mut fixed_size_list_without_child = cases::fixed_size_list();
    fixed_size_list_without_child.schema.children.clear();
    let mut int_with_child = cases::int32();
    int_with_child
        .schema
        .children
        .push(SchemaNode::new("i", "c"));
    let mut map_without_entries = cases::map();
    map_without_entries.schema.children.clear();
    let mut run_ends_alone = cases::run_end_encoded();
    run_ends_alone.schema.children.pop();
    let mut dense_union = cases::dense_union();
    dense_union.schema.format = Some(b"+ud:0".to_vec());
    let mut sparse_union = cases::sparse_union();
    sparse_union.schema.children.push(SchemaNode::new("i", "c"));
    for (case, expected) in [
        (list_without_child, "n_children is 0, expected 1 for a list"),
        (list_of_two, "n_children is 2, expected 1 for a list"),
        (
            fixed_size_list_without_child,
            "n_children is 0, expected 1 for a fixed-size list",
        ),
        (
            int_with_child,
            r#"n_children is 1, expected 0 for format "i" (Int32)"#,
        ),
        (map_without_entries, "n_children is 0, expected 1 for a map"),
        (
            run_ends_alone,
            "n_children is 1, expected 2 for a run-end encoded array",
        ),
        (
            dense_union,
            "n_children is 2, expected 1 for a dense union with 1 type ids",
        ),
        (
            sparse_union,
            "n_children is 3, expected 2 for a sparse union with 2 type ids",
        ),
    ] {
        expect_message(case.build(), FULL, &format!("array: {expected}"));
    }
}

// ------------------------------------------------------------ metadata

#[test]
fn malformed_metadata_is_rejected() {
    let cases: [(Vec<u8>, &str); 3] = [
        (
            (-1i32).to_ne_bytes().to_vec(),
            "metadata has -1 key/value pairs, expected a count >= 0",
        ),
        (
            [1i32.to_ne_bytes(), (-4i32).to_ne_bytes()].concat(),
            "metadata key 0 has length -4, expected >= 0",
        ),
        (
            [
                &1i32.to_ne_bytes()[..],
                &1i32.to_ne_bytes(),
                b"k",
                &2i32.to_ne_bytes(),
                b"\xc3\x28",
            ]
            .concat(),
            r#"metadata value 0 (key "k") is not valid UTF-8: invalid byte 0xc3 at offset 0"#,
        ),
    ];
    for (blob, defect) in cases {
        let mut case = cases::struct_ab();
        case.schema.children[0].metadata = Some(blob);
        expect_message(case.build(), DEFAULT, &format!(r#"field "a": {defect}"#));
    }
}

#[test]
fn import_schema_needs_a_struct_root() {
    let root = SchemaNode::new("i", "").build();
    assert_eq!(
        import_schema(&root.schema).unwrap_err().to_string(),
        r#"array: format "i" is Int32, expected a struct ("+s") for a record batch schema"#
    );
    assert_eq!(releases(&root.counters), (0, 0), "import_schema borrows");

    // Below a struct root, the field walk's errors come back as they are.
    let root = column(SchemaNode::new("+w:", "x")).build();
    assert_eq!(
        import_schema(&root.schema).unwrap_err().to_string(),
        r#"field "x": format "+w:" is truncated: expected a list size after "+w:""#
    );
    assert_eq!(releases(&root.counters), (0, 0), "import_schema borrows");
}

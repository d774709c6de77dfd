//! Well-formed trees written by hand, as a C producer writes them.

use super::*;

#[test]
fn import_borrows_and_never_releases() {
    let mut tree = Tree::new();
    let key = tree.leaf("u", "k");
    let value = tree.leaf("l", "v");
    let entries = tree.node("+s", "entries", &[key, value]);
    let map = tree.node("+m", "m", &[entries]);
    let index = tree.leaf("i", "d");
    let values = tree.leaf("u", "");
    let root = tree.node("+s", "", &[map, index]);
    tree.edit(index, |n| n.dictionary = values);
    for node in [key, entries] {
        tree.edit(node, |n| n.flags = 0);
    }
    for _ in 0..3 {
        tree.import(root).unwrap();
        import_schema(tree.as_ffi(root)).unwrap();
    }
    assert_eq!(tree.releases(), 0);
    // The owner releases the base struct, once; the callback works.
    tree.edit(root, |n| {
        let release = n.release.unwrap();
        // SAFETY: `n` is a live node of the tree and its callback is ours.
        unsafe { release(n) };
    });
    assert_eq!(tree.releases(), 1);
}

#[test]
fn a_c_producers_map_with_its_own_names_and_flags_imports() {
    let mut tree = Tree::new();
    let key = tree.leaf("u", "k");
    let value = tree.leaf("tDn", "v");
    let entries = tree.node("+s", "pairs", &[key, value]);
    let map = tree.node("+m", "m", &[entries]);
    tree.edit(key, |n| n.flags = 0);
    tree.edit(entries, |n| n.flags = 0);
    // Unknown flag bits are ignored; the spec reserves them.
    tree.edit(map, |n| {
        n.flags = NULLABLE | Flags::MAP_KEYS_SORTED.bits() | 0x100
    });
    let field = tree.import(map).unwrap();
    let expected = DataType::Map(
        Arc::new(Field::new(
            "pairs",
            DataType::Struct(Fields::from(vec![
                Field::new("k", DataType::Utf8, false),
                Field::new("v", DataType::Duration(TimeUnit::Nanosecond), true),
            ])),
            false,
        )),
        true,
    );
    assert_eq!(field, Field::new("m", expected, true));
}

#[test]
fn metadata_names_and_flags_are_read_from_the_struct() {
    let mut tree = Tree::new();
    let a = tree.leaf("w:16", "a");
    let metadata = tree.metadata(encode_metadata(&[("ARROW:extension:name", "arrow.uuid")]));
    tree.edit(a, |n| {
        n.metadata = metadata;
        n.flags = 0;
    });
    let unnamed = tree.leaf("g", "");
    tree.edit(unnamed, |n| n.name = null());
    let root = tree.node("+s", "", &[a, unnamed]);
    let schema_metadata = tree.metadata(encode_metadata(&[("origin", "c")]));
    tree.edit(root, |n| n.metadata = schema_metadata);
    let schema = import_schema(tree.as_ffi(root)).unwrap();
    assert_eq!(
        schema.metadata(),
        &HashMap::from([("origin".to_string(), "c".to_string())])
    );
    assert_eq!(schema.field(0).extension_type_name(), Some("arrow.uuid"));
    assert!(!schema.field(0).is_nullable());
    assert_eq!(schema.field(1), &Field::new("", DataType::Float64, true));
}

#[test]
fn children_shared_without_a_cycle_are_accepted() {
    let mut tree = Tree::new();
    let shared = tree.leaf("i", "x");
    let root = tree.node("+s", "", &[shared, shared]);
    let field = tree.import(root).unwrap();
    let expected = Fields::from(vec![
        Field::new("x", DataType::Int32, true),
        Field::new("x", DataType::Int32, true),
    ]);
    assert_eq!(field.data_type(), &DataType::Struct(expected));
}

#[test]
fn import_schema_needs_a_struct() {
    let mut tree = Tree::new();
    let root = tree.leaf("i", "");
    let err = import_schema(tree.as_ffi(root)).unwrap_err().to_string();
    assert_eq!(
        err,
        r#"array: format "i" is Int32, expected a struct ("+s") for a record batch schema"#
    );

    let mut tree = Tree::new();
    let root = tree.leaf("i", "");
    tree.edit(root, |n| n.release = None);
    let err = import_schema(tree.as_ffi(root)).unwrap_err().to_string();
    assert_eq!(
        err,
        "array: struct was released (release is NULL), expected a live struct"
    );

    let mut tree = Tree::new();
    let x = tree.leaf("+w:", "x");
    let root = column(&mut tree, x);
    let err = import_schema(tree.as_ffi(root)).unwrap_err().to_string();
    assert_eq!(
        err,
        r#"field "x": format "+w:" is truncated: expected a list size after "+w:""#
    );
    assert_eq!(tree.releases(), 0);
}

//! Malformed roots of a record batch schema, written by hand.

use super::*;

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

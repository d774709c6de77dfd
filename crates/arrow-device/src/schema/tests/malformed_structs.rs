//! Defects in the struct members: released structs, NULL or non-UTF-8
//! strings, child counts and pointers, metadata, cycles, depth and size.

use super::*;

#[test]
fn released_structs_are_rejected_at_their_path() {
    let mut tree = Tree::new();
    let root = tree.leaf("i", "");
    tree.edit(root, |n| n.release = None);
    assert_eq!(
        tree.error(root),
        "array: struct was released (release is NULL), expected a live struct"
    );

    let mut tree = Tree::new();
    let a = tree.leaf("i", "a");
    let b = tree.leaf("u", "b");
    tree.edit(b, |n| n.release = None);
    let root = tree.node("+s", "", &[a, b]);
    // A released struct's name cannot be read, so the path has the index.
    assert_eq!(
        tree.error(root),
        "field 1: struct was released (release is NULL), expected a live struct"
    );

    let mut tree = Tree::new();
    let index = tree.leaf("i", "d");
    let values = tree.leaf("u", "");
    tree.edit(values, |n| n.release = None);
    tree.edit(index, |n| n.dictionary = values);
    let root = column(&mut tree, index);
    assert_eq!(
        tree.error(root),
        r#"field "d" > dictionary: struct was released (release is NULL), expected a live struct"#
    );
}

#[test]
fn null_and_non_utf8_strings_are_rejected() {
    let mut tree = Tree::new();
    let x = tree.leaf("i", "x");
    tree.edit(x, |n| n.format = null());
    let root = column(&mut tree, x);
    assert_eq!(
        tree.error(root),
        r#"field "x": format is NULL, expected a format string"#
    );

    let mut tree = Tree::new();
    let root = tree.leaf("i", "");
    let bad = tree.string(b"\xffi");
    tree.edit(root, |n| n.format = bad);
    assert_eq!(
        tree.error(root),
        "array: format is not valid UTF-8: invalid byte 0xff at offset 0"
    );

    let mut tree = Tree::new();
    let x = tree.leaf("i", "");
    let bad = tree.string(b"a\xff");
    tree.edit(x, |n| n.name = bad);
    let root = column(&mut tree, x);
    assert_eq!(
        tree.error(root),
        "field 0: name is not valid UTF-8: invalid byte 0xff at offset 1"
    );

    let mut tree = Tree::new();
    let root = tree.leaf("", "");
    assert_eq!(
        tree.error(root),
        r#"array: format is empty, expected a format string such as "i" or "+s""#
    );
}

#[test]
fn bad_child_counts_and_pointers_are_rejected() {
    let mut tree = Tree::new();
    let root = tree.node("+s", "", &[]);
    tree.edit(root, |n| n.n_children = -1);
    assert_eq!(tree.error(root), "array: n_children is -1, expected >= 0");

    let mut tree = Tree::new();
    let root = tree.node("+s", "", &[]);
    tree.edit(root, |n| n.n_children = 2);
    assert_eq!(
        tree.error(root),
        "array: children is NULL, expected 2 child pointers (n_children is 2)"
    );

    let mut tree = Tree::new();
    let item = tree.leaf("i", "item");
    let list = tree.node("+l", "l", &[item]);
    // SAFETY: the list has one child slot, owned by the tree.
    tree.edit(list, |n| unsafe { *n.children = null_mut() });
    let root = column(&mut tree, list);
    assert_eq!(
        tree.error(root),
        r#"field "l": children[0] is NULL, expected a pointer to an ArrowSchema"#
    );

    let mut tree = Tree::new();
    let a = tree.leaf("i", "a");
    let b = tree.leaf("i", "b");
    let list = tree.node("+l", "l", &[a, b]);
    let root = column(&mut tree, list);
    assert_eq!(
        tree.error(root),
        r#"field "l": n_children is 2, expected 1 for a list"#
    );

    let mut tree = Tree::new();
    let list = tree.node("+w:4", "fixed", &[]);
    let root = column(&mut tree, list);
    assert_eq!(
        tree.error(root),
        r#"field "fixed": n_children is 0, expected 1 for a fixed-size list"#
    );

    let mut tree = Tree::new();
    let child = tree.leaf("i", "c");
    let root = tree.node("i", "", &[child]);
    assert_eq!(
        tree.error(root),
        r#"array: n_children is 1, expected 0 for format "i" (Int32)"#
    );

    // A hostile count is refused before any child pointer is read.
    let mut tree = Tree::new();
    let child = tree.leaf("i", "c");
    let root = tree.node("+s", "", &[child]);
    tree.edit(root, |n| n.n_children = i64::MAX);
    assert_eq!(
        tree.error(root),
        "array: n_children is 9223372036854775807, more than the 1048576 nodes a tree may have"
    );
}

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
    for (bytes, defect) in cases {
        let mut tree = Tree::new();
        let a = tree.leaf("i", "a");
        let metadata = tree.metadata(bytes);
        tree.edit(a, |n| n.metadata = metadata);
        let root = column(&mut tree, a);
        assert_eq!(tree.error(root), format!(r#"field "a": {defect}"#));
    }
}

#[test]
fn cycles_are_rejected() {
    let mut tree = Tree::new();
    let root = tree.node("+s", "loop", &[]);
    let array = Box::into_raw(vec![root].into_boxed_slice());
    tree.arrays.push(array);
    tree.edit(root, |n| {
        n.n_children = 1;
        n.children = array.cast::<Node>();
    });
    assert_eq!(
        tree.error(root),
        r#"field "loop": the struct is its own ancestor: the children or dictionary pointers form a cycle"#
    );

    let mut tree = Tree::new();
    let root = tree.leaf("i", "");
    tree.edit(root, |n| n.dictionary = root);
    assert_eq!(
        tree.error(root),
        "dictionary: the struct is its own ancestor: the children or dictionary pointers form a cycle"
    );

    // A grandchild pointing at the root, through a list.
    let mut tree = Tree::new();
    let item = tree.node("+l", "item", &[]);
    let root = tree.node("+l", "top", &[item]);
    let array = Box::into_raw(vec![root].into_boxed_slice());
    tree.arrays.push(array);
    tree.edit(item, |n| {
        n.n_children = 1;
        n.children = array.cast::<Node>();
    });
    assert_eq!(
        tree.error(root),
        r#"child 0 "item" > child 0 "top": the struct is its own ancestor: the children or dictionary pointers form a cycle"#
    );
}

/// A chain of `depth` lists around an int32 leaf.
fn nested_lists(tree: &mut Tree, depth: usize) -> Node {
    let mut node = tree.leaf("i", "item");
    for _ in 0..depth {
        node = tree.node("+l", "item", &[node]);
    }
    node
}

#[test]
fn nesting_deeper_than_the_limit_is_rejected() {
    let mut tree = Tree::new();
    let root = nested_lists(&mut tree, MAX_NESTING_DEPTH);
    let mut data_type = tree.import(root).unwrap().data_type().clone();
    let mut depth = 0;
    while let DataType::List(item) = data_type {
        data_type = item.data_type().clone();
        depth += 1;
    }
    assert_eq!(depth, MAX_NESTING_DEPTH);

    let mut tree = Tree::new();
    let root = nested_lists(&mut tree, MAX_NESTING_DEPTH + 1);
    let message = tree.error(root);
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
fn a_dag_that_unfolds_into_too_many_nodes_is_rejected() {
    // Each level's two fields share one struct: 2^40 paths from 41 structs.
    let mut tree = Tree::new();
    let mut node = tree.leaf("i", "x");
    for _ in 0..40 {
        node = tree.node("+s", "x", &[node, node]);
    }
    let result = import_field_with_node_limit(tree.as_ffi(node), 1000);
    assert_eq!(tree.releases(), 0);
    let message = result.unwrap_err().to_string();
    assert!(
        message.ends_with(": the tree has more than 1000 nodes (children shared many times?)"),
        "{message}"
    );
}

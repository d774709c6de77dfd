//! Defects in the types: format strings anywhere in the tree, and the child
//! shapes of maps, unions, run-end encoded arrays and dictionaries.

use super::*;

#[test]
fn bad_format_strings_deep_in_the_tree_name_their_node() {
    let mut tree = Tree::new();
    let inner_item = tree.leaf("i", "x");
    let fixed = tree.node("+w:", "item", &[inner_item]);
    let outer = tree.node("+l", "outer", &[fixed]);
    let root = column(&mut tree, outer);
    assert_eq!(
        tree.error(root),
        r#"field "outer" > child 0 "item": format "+w:" is truncated: expected a list size after "+w:""#
    );

    let mut tree = Tree::new();
    let t = tree.leaf("tsu", "t");
    let root = column(&mut tree, t);
    assert_eq!(
        tree.error(root),
        r#"field "t": format "tsu" is truncated: expected ":" and a time zone (possibly empty) after "tsu""#
    );

    let mut tree = Tree::new();
    let w = tree.leaf("w:-1", "w");
    let root = column(&mut tree, w);
    assert_eq!(
        tree.error(root),
        r#"field "w": format "w:-1" has a negative byte width -1, expected >= 0"#
    );

    let mut tree = Tree::new();
    let t = tree.leaf("tdDx", "date");
    let root = column(&mut tree, t);
    assert_eq!(
        tree.error(root),
        r#"field "date": format "tdDx" has trailing characters "x" after "tdD""#
    );

    let mut tree = Tree::new();
    let index = tree.leaf("c", "item");
    let values = tree.leaf("d:0,2", "");
    tree.edit(index, |n| n.dictionary = values);
    let list = tree.node("+l", "a", &[index]);
    let root = column(&mut tree, list);
    assert_eq!(
        tree.error(root),
        r#"field "a" > child 0 "item" > dictionary: format "d:0,2" has decimal precision 0, expected 1 to 38 for a 128-bit decimal"#
    );

    let mut tree = Tree::new();
    let x = tree.leaf("i", "x");
    let y = tree.leaf("q", "y");
    let union = tree.node("+ud:0,1", "u", &[x, y]);
    let root = column(&mut tree, union);
    assert_eq!(
        tree.error(root),
        r#"field "u" > child 1 "y": format "q" is not a format string of the C Data Interface"#
    );
}

#[test]
fn malformed_maps_are_rejected() {
    // (entries format, entries children, entries flags, key flags) -> message
    fn map_error(
        entries_format: &str,
        n_fields: usize,
        entries_flags: i64,
        key_flags: i64,
    ) -> String {
        let mut tree = Tree::new();
        let fields: Vec<Node> = (0..n_fields)
            .map(|i| tree.leaf("u", ["key", "value", "extra"][i]))
            .collect();
        if let Some(&key) = fields.first() {
            tree.edit(key, |n| n.flags = key_flags);
        }
        let entries = tree.node(entries_format, "entries", &fields);
        tree.edit(entries, |n| n.flags = entries_flags);
        let map = tree.node("+m", "m", &[entries]);
        let root = column(&mut tree, map);
        tree.error(root)
    }
    assert_eq!(
        map_error("i", 0, 0, 0),
        r#"field "m" > child 0 "entries": map entries have type Int32, expected a struct of (key, value)"#
    );
    assert_eq!(
        map_error("+s", 3, 0, 0),
        r#"field "m" > child 0 "entries": map entries have 3 fields, expected 2 (key, value)"#
    );
    assert_eq!(
        map_error("+s", 2, NULLABLE, 0),
        r#"field "m" > child 0 "entries": map entries are nullable, expected non-nullable"#
    );
    assert_eq!(
        map_error("+s", 2, 0, NULLABLE),
        r#"field "m" > child 0 "entries" > field "key": map key is nullable, expected non-nullable"#
    );

    let mut tree = Tree::new();
    let map = tree.node("+m", "m", &[]);
    let root = column(&mut tree, map);
    assert_eq!(
        tree.error(root),
        r#"field "m": n_children is 0, expected 1 for a map"#
    );
}

#[test]
fn malformed_unions_are_rejected() {
    let mut tree = Tree::new();
    let children: Vec<Node> = (0..3).map(|i| tree.leaf("i", ["a", "b", "c"][i])).collect();
    let union = tree.node("+us:4,5", "u", &children);
    let root = column(&mut tree, union);
    assert_eq!(
        tree.error(root),
        r#"field "u": n_children is 3, expected 2 for a sparse union with 2 type ids"#
    );

    let mut tree = Tree::new();
    let children: Vec<Node> = (0..2).map(|i| tree.leaf("i", ["a", "b"][i])).collect();
    let union = tree.node("+ud:1,1", "u", &children);
    let root = column(&mut tree, union);
    assert_eq!(
        tree.error(root),
        r#"field "u": format "+ud:1,1" has type id 1 more than once"#
    );

    let mut tree = Tree::new();
    let child = tree.leaf("i", "a");
    let union = tree.node("+us:200", "u", &[child]);
    let root = column(&mut tree, union);
    assert_eq!(
        tree.error(root),
        r#"field "u": format "+us:200" has type id 200, expected 0 to 127"#
    );
}

#[test]
fn malformed_run_end_encoded_arrays_are_rejected() {
    fn ree_error(run_ends_format: &str, run_ends_flags: i64) -> String {
        let mut tree = Tree::new();
        let run_ends = tree.leaf(run_ends_format, "run_ends");
        tree.edit(run_ends, |n| n.flags = run_ends_flags);
        let values = tree.leaf("u", "values");
        let ree = tree.node("+r", "r", &[run_ends, values]);
        let root = column(&mut tree, ree);
        tree.error(root)
    }
    assert_eq!(
        ree_error("g", 0),
        r#"field "r" > child 0 "run_ends": run_ends have type Float64, expected Int16, Int32 or Int64"#
    );
    assert_eq!(
        ree_error("C", 0),
        r#"field "r" > child 0 "run_ends": run_ends have type UInt8, expected Int16, Int32 or Int64"#
    );
    assert_eq!(
        ree_error("i", NULLABLE),
        r#"field "r" > child 0 "run_ends": run_ends are nullable, expected non-nullable"#
    );

    let mut tree = Tree::new();
    let run_ends = tree.leaf("i", "run_ends");
    let ree = tree.node("+r", "r", &[run_ends]);
    let root = column(&mut tree, ree);
    assert_eq!(
        tree.error(root),
        r#"field "r": n_children is 1, expected 2 for a run-end encoded array"#
    );
}

#[test]
fn dictionaries_need_an_integer_index() {
    let mut tree = Tree::new();
    let index = tree.leaf("u", "d");
    let values = tree.leaf("i", "");
    tree.edit(index, |n| n.dictionary = values);
    let root = column(&mut tree, index);
    assert_eq!(
        tree.error(root),
        r#"field "d": format "u" (Utf8) has a dictionary, but a dictionary index must be a signed or unsigned integer ("c", "C", "s", "S", "i", "I", "l" or "L")"#
    );

    let mut tree = Tree::new();
    let item = tree.leaf("i", "item");
    let index = tree.node("+l", "d", &[item]);
    let values = tree.leaf("i", "");
    tree.edit(index, |n| n.dictionary = values);
    let root = column(&mut tree, index);
    assert_eq!(
        tree.error(root),
        r#"field "d": a list has a dictionary, but a dictionary index must be a signed or unsigned integer ("c", "C", "s", "S", "i", "I", "l" or "L")"#
    );

    // Nested: the dictionary's values are themselves dictionary-encoded.
    let mut tree = Tree::new();
    let index = tree.leaf("i", "d");
    let inner_index = tree.leaf("s", "");
    let inner_values = tree.leaf("z", "");
    tree.edit(inner_values, |n| n.release = None);
    tree.edit(inner_index, |n| n.dictionary = inner_values);
    tree.edit(index, |n| n.dictionary = inner_index);
    let root = column(&mut tree, index);
    assert_eq!(
        tree.error(root),
        r#"field "d" > dictionary > dictionary: struct was released (release is NULL), expected a live struct"#
    );
}

//! Release semantics of exported trees (spec: "Release callback semantics --
//! for producers", "Moving child arrays"), observed through the block's
//! reference count: every live node holds one reference, so the count says
//! exactly which nodes a release reached. Run under valgrind to see that
//! the block is freed with its last node and never touched afterwards.

use super::*;
use crate::schema::writer::live_nodes;

fn tree_field() -> Field {
    let item = |data_type| Arc::new(Field::new("item", data_type, true));
    let dictionary = DataType::Dictionary(Box::new(DataType::Int16), Box::new(DataType::Utf8));
    Field::new(
        "root",
        DataType::Struct(Fields::from(vec![
            // child 0: a leaf
            Field::new("leaf", DataType::Int32, false),
            // child 1: list > struct > (dictionary, list > int)
            Field::new(
                "nested",
                DataType::List(item(DataType::Struct(Fields::from(vec![
                    Field::new("d", dictionary.clone(), true),
                    Field::new("l", DataType::LargeList(item(DataType::Int8)), true),
                ])))),
                true,
            ),
            // child 2: a dictionary of lists
            Field::new(
                "dict",
                DataType::Dictionary(
                    Box::new(DataType::UInt8),
                    Box::new(DataType::List(item(DataType::Utf8))),
                ),
                true,
            ),
        ])),
        true,
    )
}

/// Every node below `node`, children before dictionaries.
fn descendants(node: &raw::ArrowSchema, out: &mut Vec<Node>) {
    for index in 0..node.n_children as usize {
        // SAFETY: a live exported node holds n_children valid pointers.
        let child = unsafe { *node.children.add(index) };
        out.push(child);
        // SAFETY: the child is alive while its parent is.
        descendants(unsafe { &*child }, out);
    }
    if !node.dictionary.is_null() {
        out.push(node.dictionary);
        // SAFETY: as above.
        descendants(unsafe { &*node.dictionary }, out);
    }
}

fn count(node: &raw::ArrowSchema) -> usize {
    let mut all = Vec::new();
    descendants(node, &mut all);
    all.len() + 1
}

/// Moves `node` out (a bitwise copy; the original is marked released).
fn move_out(node: Node) -> FFI_ArrowSchema {
    // SAFETY: `node` is a live node of an exported tree.
    unsafe { FFI_ArrowSchema::from_raw(node.cast()) }
}

fn child_of(node: &raw::ArrowSchema, index: usize) -> Node {
    assert!((index as i64) < node.n_children);
    // SAFETY: in bounds of a live node's children.
    unsafe { *node.children.add(index) }
}

#[test]
fn every_node_holds_one_reference_and_the_root_releases_them_all() {
    let field = tree_field();
    let mut root = export_field(&field).unwrap();
    let nodes = count(raw::schema(&root));
    // root, leaf, nested (list, struct, d, its dictionary, l, l's item), dict
    // (the node, its dictionary list, that list's item).
    assert_eq!(nodes, 1 + 1 + 6 + 3);
    assert_eq!(live_nodes(raw::schema(&root)), nodes);

    // Keep the block alive through the leaf so the other slots can be
    // inspected after the root's release.
    let leaf = move_out(child_of(raw::schema(&root), 0));
    assert_eq!(
        live_nodes(raw::schema(&leaf)),
        nodes,
        "a move is not a release"
    );
    let mut others = Vec::new();
    descendants(raw::schema(&root), &mut others);
    // SAFETY: every node of the tree is alive until the root is released.
    others.retain(|node| unsafe { (**node).release.is_some() });
    assert_eq!(others.len(), nodes - 2);

    let release = raw::schema(&root).release.unwrap();
    // SAFETY: the root is live and ours to release.
    unsafe { release(raw::schema_mut(&mut root)) };
    let released = raw::schema(&root);
    assert!(released.release.is_none());
    assert!(released.private_data.is_null());
    for node in &others {
        // SAFETY: the slots live in the block, which the leaf still holds.
        let node = unsafe { &**node };
        assert!(node.release.is_none(), "{node:?}");
        assert!(node.private_data.is_null());
    }
    assert_eq!(live_nodes(raw::schema(&leaf)), 1);
    // The leaf is still what it was.
    assert_eq!(import_field(&leaf).unwrap(), field_child(&field, 0));
}

fn field_child(field: &Field, index: usize) -> Field {
    let DataType::Struct(fields) = field.data_type() else {
        unreachable!()
    };
    fields[index].as_ref().clone()
}

#[test]
fn a_moved_child_keeps_its_subtree_and_releases_it_alone() {
    let field = tree_field();
    let root = export_field(&field).unwrap();
    let nested = move_out(child_of(raw::schema(&root), 1));
    let subtree = count(raw::schema(&nested));
    assert_eq!(subtree, 6);
    drop(root);
    assert_eq!(live_nodes(raw::schema(&nested)), subtree);
    assert_eq!(import_field(&nested).unwrap(), field_child(&field, 1));
    assert_eq!(Field::try_from(&nested).unwrap(), field_child(&field, 1));
}

#[test]
fn a_grandchild_and_a_dictionary_moved_out_outlive_the_root() {
    let field = tree_field();
    let root = export_field(&field).unwrap();
    let nested = raw::schema(&root);
    // root > nested > item (struct) > d (dictionary of utf8)
    // SAFETY: child 1 of the live root is alive.
    let item = child_of(unsafe { &*child_of(nested, 1) }, 0);
    let grandchild = move_out(item);
    let d = child_of(raw::schema(&grandchild), 0);
    // SAFETY: `d` is a live dictionary-encoded node of the moved grandchild.
    let dictionary = move_out(unsafe { (*d).dictionary });
    // A dictionary-encoded node under root > dict, moved out too.
    // SAFETY: child 2 of the live root is alive and dictionary-encoded.
    let dict_values = move_out(unsafe { (*child_of(nested, 2)).dictionary });
    drop(root);

    // The grandchild's struct, d and l with its item; the moved dictionary;
    // the moved list of dictionary values and its item.
    assert_eq!(live_nodes(raw::schema(&grandchild)), 4 + 1 + 2);
    assert_eq!(dictionary.format(), "u");
    assert_eq!(dictionary.name(), None);
    assert_eq!(
        import_field(&dictionary).unwrap().data_type(),
        &DataType::Utf8
    );
    assert_eq!(dict_values.format(), "+l");
    assert_eq!(dict_values.child(0).format(), "u");
    // The grandchild's dictionary slot was moved from: still released.
    // SAFETY: `d` is in the block, which the moved structs hold.
    assert!(unsafe { (*(*d).dictionary).release.is_none() });
    drop(grandchild);
    assert_eq!(live_nodes(raw::schema(&dictionary)), 1 + 2);
    drop(dict_values);
    assert_eq!(live_nodes(raw::schema(&dictionary)), 1);
}

#[test]
fn the_release_callback_ignores_null_and_released_structs() {
    let mut root = export_field(&tree_field()).unwrap();
    let release = raw::schema(&root).release.unwrap();
    // SAFETY: the callback accepts NULL (it does nothing).
    unsafe { release(null_mut()) };
    let mut leaf = move_out(child_of(raw::schema(&root), 0));
    let nodes = live_nodes(raw::schema(&leaf));
    // SAFETY: the root is live; then released, and a second call is a no-op.
    unsafe {
        release(raw::schema_mut(&mut root));
        release(raw::schema_mut(&mut root));
    }
    assert!(nodes > 1);
    assert_eq!(live_nodes(raw::schema(&leaf)), 1);
    // SAFETY: as above, for the moved leaf.
    unsafe {
        release(raw::schema_mut(&mut leaf));
        release(raw::schema_mut(&mut leaf));
    }
    assert!(leaf.release().is_none());
}

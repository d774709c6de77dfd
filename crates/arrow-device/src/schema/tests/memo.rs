//! The schema memo (`schema::memo`): a tree that reads like one imported
//! before gives that field again, and a tree that differs in any one thing
//! the import reads gives its own field, or its own error.

use super::*;

fn metadata(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Fields that differ from the first in exactly one thing the import reads.
fn neighbours() -> Vec<Field> {
    let base = || {
        Field::new(
            "batch",
            DataType::Struct(Fields::from(vec![
                Field::new("a", DataType::Int64, true),
                Field::new("b", DataType::Utf8, false),
            ])),
            true,
        )
        .with_metadata(metadata(&[("k", "v1")]))
    };
    let with_children = |children: Vec<Field>| {
        Field::new("batch", DataType::Struct(Fields::from(children)), true)
            .with_metadata(metadata(&[("k", "v1")]))
    };
    let a = Field::new("a", DataType::Int64, true);
    let b = Field::new("b", DataType::Utf8, false);
    vec![
        base(),
        // The root's name, flags and metadata.
        base().with_name("batcH"),
        base().with_nullable(false),
        base().with_metadata(metadata(&[("k", "v2")])),
        base().with_metadata(metadata(&[("j", "v1")])),
        base().with_metadata(metadata(&[("k", "v1"), ("l", "")])),
        base().with_metadata(HashMap::new()),
        // A child's format, name, flags; the children's count and order.
        with_children(vec![Field::new("a", DataType::Int32, true), b.clone()]),
        with_children(vec![Field::new("A", DataType::Int64, true), b.clone()]),
        with_children(vec![a.clone(), b.clone().with_nullable(true)]),
        with_children(vec![a.clone()]),
        with_children(vec![b.clone(), a.clone()]),
        with_children(vec![
            a.clone(),
            b.clone(),
            Field::new("c", DataType::Null, true),
        ]),
        // A dictionary where there was none, and its ordering flag.
        with_children(vec![
            a.clone(),
            Field::new_dictionary("b", DataType::Int8, DataType::Utf8, false),
        ]),
        with_children(vec![
            a,
            Field::new_dictionary("b", DataType::Int8, DataType::Utf8, false)
                .with_dict_is_ordered(true),
        ]),
    ]
}

#[test]
fn each_neighbour_imports_to_itself_whatever_was_imported_before() {
    let fields = neighbours();
    // Twice round: the second time every tree is one this thread has seen
    // (the memo keeps eight, so some are recalled, some imported again).
    for _ in 0..2 {
        for field in &fields {
            let exported = export_field(field).unwrap();
            assert_eq!(&import_field(&exported).unwrap(), field);
            // Straight after its own import: recalled.
            assert_eq!(&import_field(&exported).unwrap(), field);
        }
    }
}

#[test]
fn a_tree_like_a_remembered_one_but_with_a_released_child_is_an_error() {
    let field = neighbours().remove(0);
    let remembered = export_field(&field).unwrap();
    assert_eq!(import_field(&remembered).unwrap(), field);
    let mut tree = export_field(&field).unwrap();
    let root = raw::schema(&tree);
    // SAFETY: child 1 of a live exported root.
    let child = unsafe { *root.children.add(1) };
    // Move the child out: the slot in the tree is left released.
    // SAFETY: a live node of an exported tree.
    let moved = unsafe { FFI_ArrowSchema::from_raw(child.cast()) };
    let err = import_field(&tree).unwrap_err().to_string();
    assert!(err.contains("released"), "{err}");
    drop(moved);
    // The root still releases what it holds.
    let release = raw::schema(&tree).release.unwrap();
    // SAFETY: the root is live and ours.
    unsafe { release(raw::schema_mut(&mut tree)) };
}

#[test]
fn a_name_that_is_a_prefix_of_the_remembered_one_is_not_it() {
    let long = Field::new("column", DataType::Int64, true);
    let short = Field::new("col", DataType::Int64, true);
    assert_eq!(import_field(&export_field(&long).unwrap()).unwrap(), long);
    assert_eq!(import_field(&export_field(&short).unwrap()).unwrap(), short);
    assert_eq!(import_field(&export_field(&long).unwrap()).unwrap(), long);
}

#[test]
fn record_batch_schemas_are_recalled_with_their_metadata() {
    let schema = Schema::new(vec![
        Field::new("x", DataType::Float64, false),
        Field::new("y", DataType::LargeUtf8, true),
    ])
    .with_metadata(metadata(&[("origin", "test")]));
    for _ in 0..3 {
        assert_eq!(
            import_schema(&export_schema(&schema).unwrap()).unwrap(),
            schema
        );
    }
}

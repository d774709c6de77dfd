//! Odd but legal schemas, as a C producer may write them: the importer must
//! accept them, borrow them and never release them. Each is imported alone
//! with `import_field` / `import_schema`, which borrow the struct: its owner
//! releases it, once.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_device::schema::{import_field, import_schema};
use arrow_schema::ffi::Flags;
use arrow_schema::{DataType, Field, Fields, Schema, TimeUnit};

use super::releases;
use crate::common::producer::*;

#[test]
fn import_borrows_and_never_releases() {
    let map = SchemaNode::new("+m", "m").with_children(vec![SchemaNode::new("+s", "entries")
        .non_nullable()
        .with_children(vec![
            SchemaNode::new("u", "k").non_nullable(),
            SchemaNode::new("l", "v"),
        ])]);
    let index = SchemaNode::new("i", "d").with_dictionary(SchemaNode::new("u", ""));
    let built = SchemaNode::new("+s", "")
        .with_children(vec![map, index])
        .build();
    let expected = Schema::new(vec![
        Field::new_map(
            "m",
            "entries",
            Field::new("k", DataType::Utf8, false),
            Field::new("v", DataType::Int64, true),
            false,
            true,
        ),
        Field::new_dictionary("d", DataType::Int32, DataType::Utf8, true),
    ]);
    for _ in 0..3 {
        assert_eq!(
            import_field(&built.schema).unwrap().data_type(),
            &DataType::Struct(expected.fields().clone())
        );
        assert_eq!(import_schema(&built.schema).unwrap(), expected);
    }
    assert_eq!(releases(&built.counters), (0, 0));
    // The owner releases the base struct, once; the callback works.
    let BuiltSchema { schema, counters } = built;
    drop(schema);
    assert_eq!(releases(&counters), (0, 1));
}

#[test]
fn a_c_producers_map_with_its_own_names_and_flags_imports() {
    let entries = SchemaNode::new("+s", "pairs")
        .non_nullable()
        .with_children(vec![
            SchemaNode::new("u", "k").non_nullable(),
            SchemaNode::new("tDn", "v"),
        ]);
    // Unknown flag bits are ignored; the spec reserves them.
    let map = SchemaNode::new("+m", "m")
        .with_flags(NULLABLE | Flags::MAP_KEYS_SORTED.bits() | 0x100)
        .with_children(vec![entries]);
    let built = map.build();
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
    assert_eq!(
        import_field(&built.schema).unwrap(),
        Field::new("m", expected, true)
    );
    assert_eq!(releases(&built.counters), (0, 0));
}

#[test]
fn metadata_names_and_flags_are_read_from_the_struct() {
    let a = SchemaNode::new("w:16", "a")
        .non_nullable()
        .with_metadata(metadata_blob(&[("ARROW:extension:name", "arrow.uuid")]));
    let mut unnamed = SchemaNode::new("g", "");
    unnamed.name = None;
    let built = SchemaNode::new("+s", "")
        .with_metadata(metadata_blob(&[("origin", "c")]))
        .with_children(vec![a, unnamed])
        .build();
    let schema = import_schema(&built.schema).unwrap();
    assert_eq!(
        schema.metadata(),
        &HashMap::from([("origin".to_string(), "c".to_string())])
    );
    assert_eq!(schema.field(0).extension_type_name(), Some("arrow.uuid"));
    assert!(!schema.field(0).is_nullable());
    assert_eq!(schema.field(1), &Field::new("", DataType::Float64, true));
    assert_eq!(releases(&built.counters), (0, 0));
}

#[test]
fn children_shared_without_a_cycle_are_accepted() {
    let mut built = SchemaNode::new("+s", "")
        .with_children(vec![SchemaNode::new("i", "x"), SchemaNode::new("n", "")])
        .build();
    // SAFETY: the builder keeps release and private_data; sharing is the test.
    let root = unsafe { root_schema(&mut built.schema) };
    let shared: *mut _ = child_schema(root, 0);
    set_child_schema_ptr(root, 1, shared);
    let field = import_field(&built.schema).unwrap();
    let expected = Fields::from(vec![
        Field::new("x", DataType::Int32, true),
        Field::new("x", DataType::Int32, true),
    ]);
    assert_eq!(field.data_type(), &DataType::Struct(expected));
    assert_eq!(releases(&built.counters), (0, 0));
}

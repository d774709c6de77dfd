//! The crate's own `ArrowSchema` writer against two independent references:
//! for every type of `common::all_types`, the schema of
//! `common::batch_with_metadata` and a set of awkward fields (nested and
//! ordered dictionaries, unions, sorted maps, extension metadata, empty and
//! non-ASCII names), each export
//!
//! 1. imports back with this crate's `import_field` / `import_schema` to the
//!    same field or schema,
//! 2. imports with arrow-rs' `Field::try_from(&FFI_ArrowSchema)` (an
//!    independent reader) to the same field or schema, and
//! 3. is, node for node, the tree arrow-rs' `FFI_ArrowSchema::try_from`
//!    writes: the same format strings, names (NULL where arrow-rs writes
//!    NULL), flags, metadata bytes, child counts and dictionaries.
//!
//! The same holds for the schemas that `export_array`,
//! `export_record_batch` and `DeviceArray::export` hand out. Moving children
//! out of an exported tree is tested here through the public API only.

mod common;

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::{Array, RecordBatch};
use arrow_device::abi::{raw, FFI_ArrowSchema};
use arrow_device::schema::{
    decode_metadata, export_field, export_schema, import_field, import_schema,
};
use arrow_device::{export_array, export_record_batch, DeviceArray, ValidationLevel};
use arrow_schema::ffi::Flags;
use arrow_schema::{
    DataType, Field, Fields, IntervalUnit, Schema, TimeUnit, UnionFields, UnionMode,
};

use common::{all_types, batch_with_metadata, EXTENSION_NAME};

/// The metadata bytes of `node` (NULL: `None`), their length read from the
/// encoding itself.
fn metadata_bytes(node: &FFI_ArrowSchema) -> Option<&[u8]> {
    let pointer = raw::schema(node).metadata;
    if pointer.is_null() {
        return None;
    }
    // SAFETY: a live exported node's metadata is a complete encoding.
    let decoded = unsafe { decode_metadata(pointer) }.expect("valid metadata");
    let length = 4 + decoded
        .iter()
        .map(|(k, v)| 8 + k.len() + v.len())
        .sum::<usize>();
    // SAFETY: the encoding of `decoded` spans exactly `length` bytes.
    Some(unsafe { std::slice::from_raw_parts(pointer.cast::<u8>(), length) })
}

/// Asserts that two trees are the same node for node; `root_flags` replaces
/// the expected root flags when given.
fn assert_same_tree(
    ours: &FFI_ArrowSchema,
    theirs: &FFI_ArrowSchema,
    root_flags: Option<i64>,
    path: &str,
) {
    assert!(ours.release().is_some(), "{path}: ours is released");
    assert_eq!(ours.format(), theirs.format(), "{path}: format");
    assert_eq!(ours.name(), theirs.name(), "{path}: name");
    let their_flags = root_flags.unwrap_or(raw::schema(theirs).flags);
    assert_eq!(raw::schema(ours).flags, their_flags, "{path}: flags");
    assert_eq!(
        metadata_bytes(ours),
        metadata_bytes(theirs),
        "{path}: metadata"
    );
    assert_eq!(
        raw::schema(ours).n_children,
        raw::schema(theirs).n_children,
        "{path}: n_children"
    );
    for (index, (a, b)) in ours.children().zip(theirs.children()).enumerate() {
        assert_same_tree(a, b, None, &format!("{path} > child {index}"));
    }
    match (ours.dictionary(), theirs.dictionary()) {
        (Some(a), Some(b)) => assert_same_tree(a, b, None, &format!("{path} > dictionary")),
        (None, None) => {}
        (a, b) => panic!(
            "{path}: dictionary present: ours {}, arrow-rs {}",
            a.is_some(),
            b.is_some()
        ),
    }
}

/// Exports `field` and checks it against both importers and arrow-rs' tree.
fn check_field(field: &Field) {
    let what = format!("{field:?}");
    let ours = export_field(field).unwrap_or_else(|e| panic!("{what}: {e}"));
    assert_eq!(import_field(&ours).unwrap(), *field, "ours → import_field");
    let by_arrow_rs = Field::try_from(&ours).unwrap_or_else(|e| panic!("{what}: {e}"));
    assert_eq!(by_arrow_rs, *field, "ours → arrow-rs import");
    let theirs = FFI_ArrowSchema::try_from(field).unwrap();
    assert_same_tree(&ours, &theirs, None, field.name());
}

fn check_schema(schema: &Schema) {
    let ours = export_schema(schema).unwrap();
    assert_eq!(import_schema(&ours).unwrap(), *schema);
    assert_eq!(Schema::try_from(&ours).unwrap(), *schema);
    let theirs = FFI_ArrowSchema::try_from(schema).unwrap();
    assert_same_tree(&ours, &theirs, None, "schema");
}

fn item(data_type: DataType, nullable: bool) -> Arc<Field> {
    Arc::new(Field::new("item", data_type, nullable))
}

fn dictionary(index: DataType, values: DataType) -> DataType {
    DataType::Dictionary(Box::new(index), Box::new(values))
}

fn map_type(key: DataType, value: DataType, keys_sorted: bool) -> DataType {
    let entries = Fields::from(vec![
        Field::new("key", key, false),
        Field::new("value", value, true),
    ]);
    DataType::Map(
        Arc::new(Field::new("entries", DataType::Struct(entries), false)),
        keys_sorted,
    )
}

fn extension(name: &str) -> HashMap<String, String> {
    HashMap::from([
        (EXTENSION_NAME.to_string(), name.to_string()),
        (
            "ARROW:extension:metadata".to_string(),
            "{\"ü\": 1}".to_string(),
        ),
    ])
}

/// Fields that stress the corners of the writer.
fn awkward_fields() -> Vec<Field> {
    let ordered =
        |name: &str, data_type| Field::new(name, data_type, true).with_dict_is_ordered(true);
    let sorted_map = map_type(
        DataType::Utf8,
        map_type(DataType::Int32, DataType::Float64, true),
        true,
    );
    let union_fields = UnionFields::try_new(
        vec![3, 0, 127],
        vec![
            Field::new("i", DataType::Int32, true),
            ordered("d", dictionary(DataType::Int8, DataType::Utf8)),
            Field::new("m", sorted_map.clone(), false),
        ],
    )
    .unwrap();
    let uuid = Field::new("uuid", DataType::FixedSizeBinary(16), false)
        .with_metadata(extension("arrow.uuid"));
    vec![
        // Nested dictionaries, ordered ones at several depths.
        ordered(
            "nested",
            dictionary(
                DataType::UInt64,
                dictionary(
                    DataType::Int16,
                    dictionary(DataType::UInt8, DataType::Utf8View),
                ),
            ),
        ),
        Field::new(
            "ordered inside",
            DataType::Struct(Fields::from(vec![
                ordered("o", dictionary(DataType::UInt32, DataType::LargeBinary)),
                Field::new(
                    "l",
                    DataType::LargeList(Arc::new(ordered(
                        "item",
                        dictionary(DataType::Int64, DataType::Decimal256(40, -5)),
                    ))),
                    false,
                ),
            ])),
            true,
        ),
        // A dictionary of sorted maps: the dictionary node carries the flag.
        Field::new(
            "dict of maps",
            dictionary(DataType::Int32, sorted_map.clone()),
            true,
        ),
        Field::new("sorted map", sorted_map, false),
        Field::new(
            "dense",
            DataType::Union(union_fields.clone(), UnionMode::Dense),
            true,
        ),
        Field::new(
            "sparse",
            DataType::Union(union_fields, UnionMode::Sparse),
            false,
        ),
        // Extension metadata at the root and deep inside.
        uuid.clone(),
        Field::new(
            "uuids",
            DataType::FixedSizeList(Arc::new(uuid.clone()), 4),
            true,
        )
        .with_metadata(extension("my.list")),
        Field::new(
            "ree",
            DataType::RunEndEncoded(
                Arc::new(Field::new("run_ends", DataType::Int16, false)),
                Arc::new(uuid.with_name("values")),
            ),
            true,
        ),
        // Empty and non-ASCII names, metadata with empty keys and values.
        Field::new("", DataType::Int8, true),
        Field::new(
            "größe 列 🦀",
            DataType::Struct(Fields::from(vec![
                Field::new("", DataType::Float16, true),
                Field::new("ñ", DataType::Interval(IntervalUnit::MonthDayNano), false),
            ])),
            true,
        )
        .with_metadata(HashMap::from([
            (String::new(), String::new()),
            ("clé".to_string(), "välue".to_string()),
        ])),
        Field::new(
            "times",
            DataType::Struct(Fields::from(
                [
                    TimeUnit::Second,
                    TimeUnit::Millisecond,
                    TimeUnit::Microsecond,
                    TimeUnit::Nanosecond,
                ]
                .into_iter()
                .enumerate()
                .map(|(i, unit)| {
                    let tz = ["", "UTC", "Europe/Paris", "+05:30"][i];
                    let tz = (i > 0).then(|| tz.into());
                    Field::new(format!("t{i}"), DataType::Timestamp(unit, tz), true)
                })
                .collect::<Vec<_>>(),
            )),
            true,
        ),
        Field::new(
            "decimals",
            DataType::Struct(Fields::from(vec![
                Field::new("d32", DataType::Decimal32(9, 9), true),
                Field::new("d64", DataType::Decimal64(1, -3), true),
                Field::new("d128", DataType::Decimal128(38, 0), true),
                Field::new("d256", DataType::Decimal256(76, 76), true),
            ])),
            true,
        ),
        Field::new(
            "views",
            DataType::ListView(Arc::new(Field::new(
                "item",
                DataType::LargeListView(item(DataType::FixedSizeBinary(0), true)),
                true,
            ))),
            true,
        ),
        Field::new("empty struct", DataType::Struct(Fields::empty()), false),
    ]
}

#[test]
fn every_type_matches_arrow_rs_and_round_trips_through_both_importers() {
    let cases = all_types();
    assert!(cases.len() > 40, "all_types shrank to {}", cases.len());
    for (name, array) in &cases {
        for nullable in [true, false] {
            check_field(&Field::new(name, array.data_type().clone(), nullable));
        }
    }
}

#[test]
fn awkward_fields_match_arrow_rs_and_round_trip_through_both_importers() {
    for field in awkward_fields() {
        check_field(&field);
    }
}

#[test]
fn an_empty_union_matches_arrow_rs_which_cannot_read_it_back() {
    for mode in [UnionMode::Sparse, UnionMode::Dense] {
        let field = Field::new("u", DataType::Union(UnionFields::empty(), mode), true);
        let ours = export_field(&field).unwrap();
        assert_eq!(import_field(&ours).unwrap(), field);
        let theirs = FFI_ArrowSchema::try_from(&field).unwrap();
        assert_same_tree(&ours, &theirs, None, "u");
        // arrow-rs writes "+us:" / "+ud:" (no type ids, as the spec allows)
        // but its reader requires at least one id.
        let err = Field::try_from(&ours).unwrap_err().to_string();
        assert!(
            err.contains("The Union type requires an integer type id"),
            "{err}"
        );
    }
}

#[test]
fn schemas_match_arrow_rs_and_round_trip_through_both_importers() {
    check_schema(batch_with_metadata().schema_ref());
    check_schema(
        &Schema::new(awkward_fields())
            .with_metadata(HashMap::from([("pandas".to_string(), "{}".to_string())])),
    );
    check_schema(&Schema::empty());
}

#[test]
fn export_array_writes_a_nameless_nullable_root() {
    for (name, array) in all_types() {
        let (_c_array, ours) = export_array(array.as_ref()).unwrap();
        let theirs = FFI_ArrowSchema::try_from(array.data_type()).unwrap();
        assert_eq!(ours.name(), None, "{name}");
        // arrow-rs writes the type's own flags (sorted map keys); the root
        // is nullable on top of them.
        let flags = raw::schema(&theirs).flags | Flags::NULLABLE.bits();
        assert_same_tree(&ours, &theirs, Some(flags), &name);
        assert_eq!(
            import_field(&ours).unwrap(),
            Field::new("", array.data_type().clone(), true)
        );
    }
}

#[test]
fn record_batch_and_device_array_exports_match_arrow_rs() {
    let batch = batch_with_metadata();
    let (c_array, ours) = export_record_batch(&batch).unwrap();
    let theirs = FFI_ArrowSchema::try_from(batch.schema_ref().as_ref()).unwrap();
    assert_same_tree(&ours, &theirs, None, "batch");

    // SAFETY: both structs come from this crate's exporter.
    let imported = unsafe { DeviceArray::try_new(c_array, ours, ValidationLevel::Full) }.unwrap();
    let (_c_array, again) = imported.export().unwrap();
    let theirs = FFI_ArrowSchema::try_from(imported.field()).unwrap();
    assert_same_tree(&again, &theirs, None, "device array");
    let back = RecordBatch::from(arrow_array::StructArray::from(
        imported.to_host().unwrap().to_data(),
    ));
    assert_eq!(back.num_columns(), batch.num_columns());
}

/// Moves child `index` out of `parent` (spec: "Moving child arrays": a
/// bitwise copy, then the original is marked released).
fn move_child(parent: &mut FFI_ArrowSchema, index: usize) -> FFI_ArrowSchema {
    let node = raw::schema(parent);
    assert!((index as i64) < node.n_children);
    // SAFETY: `children` holds `n_children` valid pointers of a live tree;
    // `from_raw` leaves a released struct behind.
    unsafe { FFI_ArrowSchema::from_raw((*node.children.add(index)).cast()) }
}

#[test]
fn moved_children_outlive_the_released_root() {
    let field = awkward_fields()
        .into_iter()
        .find(|f| f.name() == "ordered inside")
        .unwrap();
    let DataType::Struct(fields) = field.data_type() else {
        unreachable!()
    };
    let mut root = export_field(&field).unwrap();
    let mut second = move_child(&mut root, 1);
    assert!(
        root.child(1).release().is_none(),
        "moved-from slot is released"
    );
    // A grandchild moved out of the moved child, and a dictionary moved out
    // of the first child, before anything is released.
    let grandchild = move_child(&mut second, 0);
    let dictionary = {
        let first = raw::schema(&root);
        // SAFETY: child 0 is a live dictionary node; `from_raw` moves its
        // dictionary out and leaves a released struct behind.
        unsafe {
            let child = &mut **first.children;
            FFI_ArrowSchema::from_raw(child.dictionary.cast())
        }
    };
    drop(root);

    // Everything moved out is still complete and readable.
    let DataType::LargeList(item) = fields[1].data_type() else {
        unreachable!()
    };
    assert_eq!(import_field(&grandchild).unwrap(), **item);
    assert_eq!(Field::try_from(&grandchild).unwrap(), **item);
    assert_eq!(grandchild.dictionary().unwrap().format(), "d:40,-5,256");
    assert_eq!(
        import_field(&dictionary).unwrap().data_type(),
        &DataType::LargeBinary
    );
    // The moved child's slot for its grandchild is released; its own
    // struct is intact otherwise.
    assert_eq!(second.format(), "+L");
    assert!(second.child(0).release().is_none());
    drop(second);
    assert_eq!(import_field(&grandchild).unwrap(), **item);
    drop(dictionary);
    drop(grandchild);
}

#[test]
fn an_exported_tree_may_be_released_on_another_thread() {
    let schema = Schema::new(awkward_fields());
    let mut exported = export_schema(&schema).unwrap();
    let column = move_child(&mut exported, 3);
    let handle = std::thread::spawn(move || {
        drop(exported);
        import_field(&column).unwrap()
    });
    assert_eq!(handle.join().unwrap(), schema.field(3).clone());
}

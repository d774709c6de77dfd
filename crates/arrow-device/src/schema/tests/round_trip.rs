//! Every type through export_field / export_schema and back.

use super::*;

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

fn dictionary(index: DataType, values: DataType) -> DataType {
    DataType::Dictionary(Box::new(index), Box::new(values))
}

fn every_type() -> Vec<DataType> {
    use IntervalUnit::*;
    use TimeUnit::*;
    let item = |data_type, nullable| Arc::new(Field::new("item", data_type, nullable));
    let mut types = vec![
        DataType::Null,
        DataType::Boolean,
        DataType::Int8,
        DataType::Int16,
        DataType::Int32,
        DataType::Int64,
        DataType::UInt8,
        DataType::UInt16,
        DataType::UInt32,
        DataType::UInt64,
        DataType::Float16,
        DataType::Float32,
        DataType::Float64,
        DataType::Binary,
        DataType::LargeBinary,
        DataType::BinaryView,
        DataType::Utf8,
        DataType::LargeUtf8,
        DataType::Utf8View,
        DataType::FixedSizeBinary(16),
        DataType::FixedSizeBinary(0),
        DataType::Decimal32(9, 2),
        DataType::Decimal64(18, -3),
        DataType::Decimal128(38, 10),
        DataType::Decimal128(1, 0),
        DataType::Decimal256(76, 20),
        DataType::Date32,
        DataType::Date64,
        DataType::Time32(Second),
        DataType::Time32(Millisecond),
        DataType::Time64(Microsecond),
        DataType::Time64(Nanosecond),
        DataType::Duration(Second),
        DataType::Duration(Millisecond),
        DataType::Duration(Microsecond),
        DataType::Duration(Nanosecond),
        DataType::Interval(YearMonth),
        DataType::Interval(DayTime),
        DataType::Interval(MonthDayNano),
        DataType::List(item(DataType::Int32, true)),
        DataType::LargeList(item(DataType::Utf8, false)),
        DataType::ListView(item(DataType::Float64, true)),
        DataType::LargeListView(item(DataType::BinaryView, false)),
        DataType::FixedSizeList(item(DataType::Int16, true), 3),
        DataType::Struct(Fields::empty()),
        DataType::Struct(Fields::from(vec![
            Field::new("a", DataType::Int32, false),
            Field::new("b", DataType::List(item(DataType::Utf8View, true)), true),
        ])),
        map_type(DataType::Utf8, DataType::Int64, false),
        map_type(
            DataType::Int32,
            map_type(DataType::Utf8, DataType::Float32, false),
            true,
        ),
        DataType::Union(
            UnionFields::try_new(
                vec![0, 5, 127],
                vec![
                    Field::new("i", DataType::Int32, true),
                    Field::new("s", DataType::Utf8, true),
                    Field::new("l", DataType::List(item(DataType::Int8, true)), false),
                ],
            )
            .unwrap(),
            UnionMode::Dense,
        ),
        DataType::Union(
            UnionFields::try_new(
                vec![4, 5],
                vec![
                    Field::new("ints", DataType::Int32, true),
                    Field::new("floats", DataType::Float32, true),
                ],
            )
            .unwrap(),
            UnionMode::Sparse,
        ),
        DataType::Union(UnionFields::empty(), UnionMode::Dense),
        dictionary(DataType::Int32, DataType::List(item(DataType::Int32, true))),
        // Nested dictionaries: a dictionary's values are a dictionary, and
        // dictionaries inside a list and a map.
        dictionary(
            DataType::Int8,
            dictionary(DataType::UInt32, DataType::LargeUtf8),
        ),
        DataType::List(item(dictionary(DataType::UInt8, DataType::Utf8), true)),
        map_type(
            dictionary(DataType::Int16, DataType::Utf8),
            dictionary(DataType::UInt64, DataType::Binary),
            false,
        ),
    ];
    for unit in [Second, Millisecond, Microsecond, Nanosecond] {
        types.push(DataType::Timestamp(unit, None));
        types.push(DataType::Timestamp(unit, Some("UTC".into())));
        types.push(DataType::Timestamp(unit, Some("America/New_York".into())));
        types.push(DataType::Timestamp(unit, Some("+05:30".into())));
    }
    for run_ends in [DataType::Int16, DataType::Int32, DataType::Int64] {
        types.push(DataType::RunEndEncoded(
            Arc::new(Field::new("run_ends", run_ends, false)),
            Arc::new(Field::new("values", DataType::Utf8, true)),
        ));
    }
    for index in [
        DataType::Int8,
        DataType::Int16,
        DataType::Int32,
        DataType::Int64,
        DataType::UInt8,
        DataType::UInt16,
        DataType::UInt32,
        DataType::UInt64,
    ] {
        types.push(dictionary(index, DataType::Utf8));
    }
    types
}

#[test]
fn every_type_round_trips_through_export_and_import() {
    for data_type in every_type() {
        for nullable in [true, false] {
            let field = Field::new("column", data_type.clone(), nullable);
            let exported = export_field(&field).unwrap_or_else(|e| panic!("{data_type}: {e}"));
            let imported = import_field(&exported).unwrap_or_else(|e| panic!("{data_type}: {e}"));
            assert_eq!(imported, field, "{data_type}");
            // Import borrowed the struct: it is still ours to release.
            assert!(exported.release().is_some());
        }
    }
}

#[test]
fn types_are_written_with_the_spec_format_strings() {
    let cases = [
        (DataType::Decimal32(9, 2), "d:9,2,32"),
        (DataType::Decimal64(18, -3), "d:18,-3,64"),
        (DataType::Decimal128(38, 10), "d:38,10"),
        (DataType::Decimal256(76, 20), "d:76,20,256"),
        (
            DataType::ListView(Arc::new(Field::new("item", DataType::Int32, true))),
            "+vl",
        ),
        (
            DataType::LargeListView(Arc::new(Field::new("item", DataType::Int32, true))),
            "+vL",
        ),
        (
            DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
            "tsu:UTC",
        ),
        (DataType::Timestamp(TimeUnit::Second, None), "tss:"),
        (DataType::Float16, "e"),
        (DataType::Utf8View, "vu"),
        (DataType::BinaryView, "vz"),
        (DataType::Interval(IntervalUnit::MonthDayNano), "tin"),
        (dictionary(DataType::UInt16, DataType::Utf8), "S"),
    ];
    for (data_type, format) in cases {
        let exported = export_field(&Field::new("x", data_type.clone(), true)).unwrap();
        assert_eq!(exported.format(), format, "{data_type}");
    }
    let union = every_type()
        .into_iter()
        .find(|t| matches!(t, DataType::Union(_, UnionMode::Dense)))
        .unwrap();
    assert_eq!(
        export_field(&Field::new("u", union, true))
            .unwrap()
            .format(),
        "+ud:0,5,127"
    );
    let ree = DataType::RunEndEncoded(
        Arc::new(Field::new("run_ends", DataType::Int32, false)),
        Arc::new(Field::new("values", DataType::Float32, true)),
    );
    assert_eq!(
        export_field(&Field::new("r", ree, true)).unwrap().format(),
        "+r"
    );
}

#[test]
fn flags_round_trip_dictionary_ordering_and_sorted_map_keys() {
    let ordered = Field::new("d", dictionary(DataType::UInt32, DataType::Utf8), true)
        .with_dict_is_ordered(true);
    let exported = export_field(&ordered).unwrap();
    assert!(exported.dictionary_ordered());
    let imported = import_field(&exported).unwrap();
    assert_eq!(imported.dict_is_ordered(), Some(true));
    assert_eq!(imported, ordered);

    let sorted = Field::new("m", map_type(DataType::Utf8, DataType::Int32, true), false);
    let exported = export_field(&sorted).unwrap();
    assert!(exported.map_keys_sorted());
    assert!(!exported.nullable());
    let imported = import_field(&exported).unwrap();
    assert!(matches!(imported.data_type(), DataType::Map(_, true)));
    assert_eq!(imported, sorted);
}

#[test]
fn extension_metadata_travels_with_the_field() {
    let metadata = HashMap::from([
        ("ARROW:extension:name".to_string(), "arrow.uuid".to_string()),
        ("ARROW:extension:metadata".to_string(), String::new()),
        ("owner".to_string(), "ünïcode".to_string()),
    ]);
    let field =
        Field::new("id", DataType::FixedSizeBinary(16), false).with_metadata(metadata.clone());
    let imported = import_field(&export_field(&field).unwrap()).unwrap();
    assert_eq!(imported.metadata(), &metadata);
    assert_eq!(imported.extension_type_name(), Some("arrow.uuid"));
    assert_eq!(imported, field);

    // Also inside a nested type.
    let list = Field::new("ids", DataType::List(Arc::new(field)), true);
    assert_eq!(import_field(&export_field(&list).unwrap()).unwrap(), list);
}

#[test]
fn schemas_round_trip_with_their_metadata() {
    let schema = Schema::new(
        every_type()
            .into_iter()
            .enumerate()
            .map(|(i, data_type)| Field::new(format!("c{i}"), data_type, i % 2 == 0))
            .collect::<Vec<_>>(),
    )
    .with_metadata(HashMap::from([("pandas".to_string(), "{}".to_string())]));
    let exported = export_schema(&schema).unwrap();
    assert_eq!(exported.format(), "+s");
    assert_eq!(import_schema(&exported).unwrap(), schema);

    let empty = Schema::empty();
    assert_eq!(
        import_schema(&export_schema(&empty).unwrap()).unwrap(),
        empty
    );
}

#[test]
fn an_empty_time_zone_imports_as_none() {
    // The C format has no way to tell "no time zone" from an empty one
    // (spec note (1)): both are written "tsu:".
    let field = Field::new(
        "t",
        DataType::Timestamp(TimeUnit::Microsecond, Some("".into())),
        true,
    );
    let exported = export_field(&field).unwrap();
    assert_eq!(exported.format(), "tsu:");
    assert_eq!(
        import_field(&exported).unwrap().data_type(),
        &DataType::Timestamp(TimeUnit::Microsecond, None)
    );
}

#[test]
fn types_without_a_valid_c_form_are_refused_on_export() {
    let refused = |data_type: DataType| {
        let err = export_field(&Field::new("x", data_type, true))
            .map(|_| ())
            .unwrap_err();
        assert!(matches!(err, Error::NotSupported(_)), "{err:?}");
        assert_eq!(err.errno(), libc::ENOSYS);
        err.to_string()
    };
    assert_eq!(
        refused(dictionary(DataType::Utf8, DataType::Int32)),
        "not supported: array: Dictionary(Utf8, Int32) cannot be exported to the C Data Interface: \
         dictionary index type Utf8 is not an integer, expected a signed or unsigned integer (Int8 \
         to UInt64)"
    );
    assert_eq!(
        refused(DataType::FixedSizeBinary(-1)),
        "not supported: array: FixedSizeBinary(-1) cannot be exported to the C Data Interface: \
         negative byte width -1, expected >= 0"
    );
    let item = Arc::new(Field::new("item", DataType::Int8, true));
    assert!(refused(DataType::FixedSizeList(item, -2))
        .ends_with("negative list size -2, expected >= 0"));
    assert!(refused(DataType::Decimal128(0, 0))
        .ends_with("decimal precision 0, expected 1 to 38 for a 128-bit decimal"));
    assert!(refused(DataType::Decimal32(10, 0))
        .ends_with("decimal precision 10, expected 1 to 9 for a 32-bit decimal"));
    assert!(refused(DataType::Decimal64(19, 0)).ends_with("expected 1 to 18 for a 64-bit decimal"));
    assert!(
        refused(DataType::Decimal256(77, 0)).ends_with("expected 1 to 76 for a 256-bit decimal")
    );
    assert!(refused(DataType::Time32(TimeUnit::Microsecond))
        .ends_with("a 32-bit time is in seconds or milliseconds, found unit Microsecond"));
    assert!(refused(DataType::Time64(TimeUnit::Second))
        .ends_with("a 64-bit time is in microseconds or nanoseconds, found unit Second"));
    assert!(
        refused(DataType::Timestamp(TimeUnit::Second, Some("a\0b".into())))
            .ends_with(r#"time zone "a\0b" contains a NUL byte, which a C string cannot hold"#)
    );
    let nullable_key = DataType::Map(
        Arc::new(Field::new(
            "entries",
            DataType::Struct(Fields::from(vec![
                Field::new("key", DataType::Utf8, true),
                Field::new("value", DataType::Utf8, true),
            ])),
            false,
        )),
        false,
    );
    let err = refused(nullable_key);
    assert!(err.starts_with("not supported: array: Map("), "{err}");
    assert!(
        err.ends_with("map key is nullable, expected non-nullable"),
        "{err}"
    );
    let nullable_entries = DataType::Map(
        Arc::new(Field::new(
            "entries",
            DataType::Struct(Fields::from(vec![
                Field::new("key", DataType::Utf8, false),
                Field::new("value", DataType::Utf8, true),
            ])),
            true,
        )),
        false,
    );
    assert!(refused(nullable_entries).ends_with("map entries are nullable, expected non-nullable"));
    let one_field = DataType::Map(
        Arc::new(Field::new(
            "entries",
            DataType::Struct(Fields::from(vec![Field::new("key", DataType::Utf8, false)])),
            false,
        )),
        false,
    );
    assert!(refused(one_field).ends_with("map entries have 1 fields, expected 2 (key, value)"));
    let float_run_ends = DataType::RunEndEncoded(
        Arc::new(Field::new("run_ends", DataType::Float32, false)),
        Arc::new(Field::new("values", DataType::Utf8, true)),
    );
    assert!(refused(float_run_ends)
        .ends_with("run_ends have type Float32, expected Int16, Int32 or Int64"));
    let nullable_run_ends = DataType::RunEndEncoded(
        Arc::new(Field::new("run_ends", DataType::Int32, true)),
        Arc::new(Field::new("values", DataType::Utf8, true)),
    );
    assert!(refused(nullable_run_ends).ends_with("run_ends are nullable, expected non-nullable"));

    // A NUL inside a name cannot be a C string.
    let err = export_field(&Field::new("a\0b", DataType::Int32, true))
        .map(|_| ())
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        r#"not supported: array: name "a\0b" contains a NUL byte, which the C Data Interface's NUL-terminated names cannot hold"#
    );

    // A node deep inside the tree is refused at its path; the dictionary's
    // values are a node of their own.
    let nested = DataType::Struct(Fields::from(vec![Field::new(
        "tags",
        DataType::List(Arc::new(Field::new(
            "item",
            dictionary(DataType::Int8, DataType::Time32(TimeUnit::Nanosecond)),
            true,
        ))),
        true,
    )]));
    let err = refused(nested);
    assert!(
        err.starts_with(
            r#"not supported: field "tags" > child 0 "item" > dictionary: Time32(ns) cannot be exported"#
        ),
        "{err}"
    );

    // A column that cannot travel makes the whole schema fail, at its path.
    let schema = Schema::new(vec![
        Field::new("ok", DataType::Int8, true),
        Field::new("bad", DataType::FixedSizeBinary(-4), true),
    ]);
    let err = export_schema(&schema).map(|_| ()).unwrap_err().to_string();
    assert_eq!(
        err,
        "not supported: field \"bad\": FixedSizeBinary(-4) cannot be exported to the C Data \
         Interface: negative byte width -4, expected >= 0"
    );
}

#[test]
fn write_format_is_arrow_rs_format_and_parses_back_to_the_type() {
    for data_type in every_type() {
        let written = write_format(&data_type).unwrap_or_else(|e| panic!("{e}"));
        let by_arrow_rs = FFI_ArrowSchema::try_from(&data_type).unwrap();
        assert_eq!(written, by_arrow_rs.format(), "{data_type}");
        let parsed = parse_format(&written).unwrap();
        match (&data_type, parsed) {
            (DataType::Dictionary(index, _), parsed) => {
                assert_eq!(parsed, ParsedFormat::Leaf(index.as_ref().clone()))
            }
            (_, ParsedFormat::Leaf(leaf)) => assert_eq!(leaf, data_type),
            (_, parsed) => {
                // Nested: the parsed kind expects the type's child count.
                let children = match &data_type {
                    DataType::Struct(fields) => fields.len(),
                    DataType::Union(fields, _) => fields.len(),
                    DataType::RunEndEncoded(..) => 2,
                    _ => 1,
                };
                assert_eq!(
                    parsed.expected_children().unwrap_or(children),
                    children,
                    "{data_type}"
                );
                assert_eq!(
                    parsed.describe(),
                    describe_nested(&data_type),
                    "{data_type}"
                );
            }
        }
    }
    assert_eq!(
        write_format(&DataType::FixedSizeBinary(-3))
            .unwrap_err()
            .to_string(),
        "not supported: FixedSizeBinary(-3) has no C format string: negative byte width -3, expected >= 0"
    );
}

fn describe_nested(data_type: &DataType) -> String {
    match data_type {
        DataType::List(_) => "a list".into(),
        DataType::LargeList(_) => "a large list".into(),
        DataType::ListView(_) => "a list view".into(),
        DataType::LargeListView(_) => "a large list view".into(),
        DataType::FixedSizeList(..) => "a fixed-size list".into(),
        DataType::Struct(_) => "a struct".into(),
        DataType::Map(..) => "a map".into(),
        DataType::RunEndEncoded(..) => "a run-end encoded array".into(),
        DataType::Union(fields, UnionMode::Dense) => {
            format!("a dense union with {} type ids", fields.len())
        }
        DataType::Union(fields, UnionMode::Sparse) => {
            format!("a sparse union with {} type ids", fields.len())
        }
        other => panic!("{other} is not nested"),
    }
}

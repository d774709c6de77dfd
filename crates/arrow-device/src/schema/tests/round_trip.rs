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
        export_field(&Field::new("x", data_type, true))
            .map(|_| ())
            .unwrap_err()
            .to_string()
    };
    assert_eq!(
        refused(dictionary(DataType::Utf8, DataType::Int32)),
        "array: format \"u\" (Utf8) has a dictionary, but a dictionary index must be a signed or unsigned \
         integer (\"c\", \"C\", \"s\", \"S\", \"i\", \"I\", \"l\" or \"L\") (this type cannot be exported to \
         the C Data Interface)"
    );
    assert_eq!(
        refused(DataType::FixedSizeBinary(-1)),
        "array: format \"w:-1\" has a negative byte width -1, expected >= 0 (this type cannot be exported \
         to the C Data Interface)"
    );
    assert!(refused(DataType::Decimal128(0, 0)).contains("decimal precision 0, expected 1 to 38"));
    assert!(refused(DataType::Decimal32(10, 0)).contains("decimal precision 10, expected 1 to 9"));
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
    assert_eq!(
        refused(nullable_key),
        "child 0 \"entries\" > field \"key\": map key is nullable, expected non-nullable (this type cannot \
         be exported to the C Data Interface)"
    );
    let float_run_ends = DataType::RunEndEncoded(
        Arc::new(Field::new("run_ends", DataType::Float32, false)),
        Arc::new(Field::new("values", DataType::Utf8, true)),
    );
    assert!(refused(float_run_ends).starts_with("child 0 \"run_ends\": run_ends have type Float32"));
    // A NUL inside a name is arrow-rs' error.
    let err = export_field(&Field::new("a\0b", DataType::Int32, true))
        .map(|_| ())
        .unwrap_err();
    assert!(matches!(err, Error::Arrow(_)), "{err}");
    // A column that cannot travel makes the whole schema fail, at its path.
    let schema = Schema::new(vec![
        Field::new("ok", DataType::Int8, true),
        Field::new("bad", DataType::FixedSizeBinary(-4), true),
    ]);
    let err = export_schema(&schema).map(|_| ()).unwrap_err().to_string();
    assert!(
        err.starts_with("field \"bad\": format \"w:-4\" has a negative byte width"),
        "{err}"
    );
}

//! What an accepted tree and a parsed format string must do, checked
//! apart from the importer: types write format strings that parse back to
//! them, fields re-export and import back equal.

use arrow_device::schema::{export_field, import_field, parse_format, write_format, ParsedFormat};
use arrow_schema::{DataType, Field, FieldRef, Fields, UnionFields};

use crate::tree;

/// An accepted field: its types write and re-parse, it re-exports and
/// imports back equal.
pub(super) fn check_accepted(field: &Field) {
    check_type(field.data_type());
    let exported = export_field(field)
        .unwrap_or_else(|e| panic!("the accepted field {field:?} does not re-export: {e}"));
    let back = import_field(&exported)
        .unwrap_or_else(|e| panic!("the re-export of {field:?} does not import: {e}"));
    assert_eq!(&back, field, "export then import changed the field");
    assert_eq!(
        dictionary_ordering(&back),
        dictionary_ordering(field),
        "export then import changed a dictionary's ordering"
    );
}

/// `write_format` of every type in the tree parses back to what the type
/// says about its top level.
fn check_type(data_type: &DataType) {
    let written = write_format(data_type)
        .unwrap_or_else(|e| panic!("an imported {data_type} has no format string: {e}"));
    let parsed = parse_format(&written)
        .unwrap_or_else(|e| panic!("{written:?}, written for {data_type}, does not parse: {e}"));
    assert_eq!(parsed, top_level(data_type), "{written:?} of {data_type}");
    if let DataType::Dictionary(_, values) = data_type {
        check_type(values);
    }
    for child in child_fields(data_type) {
        check_type(child.data_type());
    }
}

/// What a format string says about `data_type`'s top level.
fn top_level(data_type: &DataType) -> ParsedFormat {
    match data_type {
        DataType::Dictionary(index, _) => top_level(index),
        DataType::List(_) => ParsedFormat::List,
        DataType::LargeList(_) => ParsedFormat::LargeList,
        DataType::ListView(_) => ParsedFormat::ListView,
        DataType::LargeListView(_) => ParsedFormat::LargeListView,
        DataType::FixedSizeList(_, size) => ParsedFormat::FixedSizeList(*size),
        DataType::Struct(_) => ParsedFormat::Struct,
        DataType::Map(_, _) => ParsedFormat::Map,
        DataType::Union(fields, mode) => ParsedFormat::Union {
            mode: *mode,
            type_ids: fields.iter().map(|(id, _)| id).collect(),
        },
        DataType::RunEndEncoded(_, _) => ParsedFormat::RunEndEncoded,
        other => ParsedFormat::Leaf(other.clone()),
    }
}

/// The child fields of `data_type` (through a dictionary's value type).
fn child_fields(data_type: &DataType) -> Vec<&FieldRef> {
    match data_type {
        DataType::Dictionary(_, values) => child_fields(values),
        other => tree::child_fields(other),
    }
}

/// `dict_is_ordered` of every field of the tree, which `Field`'s equality
/// leaves out.
fn dictionary_ordering(field: &Field) -> Vec<Option<bool>> {
    let mut out = vec![field.dict_is_ordered()];
    for child in child_fields(field.data_type()) {
        out.extend(dictionary_ordering(child));
    }
    out
}

/// A format string that parses re-writes to one that parses the same.
pub(super) fn check_format_string(format: &str) {
    let Ok(parsed) = parse_format(format) else {
        return;
    };
    let data_type = of_format(&parsed);
    let written = write_format(&data_type).unwrap_or_else(|e| {
        panic!("{format:?} parses to {parsed:?} but {data_type} has no format: {e}")
    });
    let reparsed = parse_format(&written).unwrap_or_else(|e| {
        panic!("{format:?} re-writes to {written:?}, which does not parse: {e}")
    });
    assert_eq!(reparsed, parsed, "{format:?} re-writes to {written:?}");
}

/// A type whose top level is `parsed`, with placeholder children.
fn of_format(parsed: &ParsedFormat) -> DataType {
    let item = || FieldRef::new(Field::new("item", DataType::Int32, true));
    match parsed {
        ParsedFormat::Leaf(data_type) => data_type.clone(),
        ParsedFormat::List => DataType::List(item()),
        ParsedFormat::LargeList => DataType::LargeList(item()),
        ParsedFormat::ListView => DataType::ListView(item()),
        ParsedFormat::LargeListView => DataType::LargeListView(item()),
        ParsedFormat::FixedSizeList(size) => DataType::FixedSizeList(item(), *size),
        ParsedFormat::Struct => DataType::Struct(Fields::empty()),
        ParsedFormat::Map => {
            let entries = Fields::from(vec![
                Field::new("key", DataType::Utf8, false),
                Field::new("value", DataType::Int32, true),
            ]);
            DataType::Map(
                FieldRef::new(Field::new("entries", DataType::Struct(entries), false)),
                false,
            )
        }
        ParsedFormat::Union { mode, type_ids } => {
            let fields = type_ids
                .iter()
                .map(|id| Field::new(format!("f{id}"), DataType::Null, true));
            let fields = UnionFields::try_new(type_ids.iter().copied(), fields)
                .unwrap_or_else(|e| panic!("parsed type ids {type_ids:?} are not a union's: {e}"));
            DataType::Union(fields, *mode)
        }
        ParsedFormat::RunEndEncoded => DataType::RunEndEncoded(
            FieldRef::new(Field::new("run_ends", DataType::Int32, false)),
            item(),
        ),
    }
}

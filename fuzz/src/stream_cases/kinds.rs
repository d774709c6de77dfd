//! The stream kinds with fixed schemas, their schemas (as arrow-rs fields
//! and as the test producer's [`SchemaNode`]) and their data, derived from
//! a seed so that the input only carries the seed.

use std::sync::Arc;

use arrow_array::types::{Int32Type, Int8Type};
use arrow_array::{
    ArrayRef, BooleanArray, DictionaryArray, Float64Array, Int32Array, Int64Array,
    LargeBinaryArray, ListArray, StringArray, StringViewArray, StructArray,
};
use arrow_schema::{DataType, Field, Fields};

use crate::producer::{SchemaNode, NULLABLE};

/// Stream kinds with fixed schemas: 0 to 3 are record batches of 1 to 4
/// columns, 4 plain int32 arrays. No two kinds have the same number of
/// top-level children and buffers, so an array of one kind in a stream of
/// another is refused from its structs alone, before any data is read.
pub(crate) const KINDS: u8 = 5;

/// The columns of record-batch kinds 0 to 3.
fn columns(kind: u8) -> Vec<Field> {
    match kind {
        0 => vec![Field::new("v", DataType::Int64, false)],
        1 => vec![
            Field::new("id", DataType::Int64, false),
            Field::new("name", DataType::Utf8, true),
        ],
        2 => vec![
            Field::new("flag", DataType::Boolean, true),
            Field::new("x", DataType::Float64, true),
            Field::new(
                "tags",
                DataType::List(Arc::new(Field::new_list_field(DataType::Int32, true))),
                true,
            ),
        ],
        _ => vec![
            Field::new(
                "k",
                DataType::Dictionary(Box::new(DataType::Int8), Box::new(DataType::Utf8)),
                true,
            ),
            Field::new("b", DataType::LargeBinary, true),
            Field::new("s", DataType::Utf8View, true),
            Field::new(
                "n",
                DataType::Struct(Fields::from(vec![Field::new("a", DataType::Int32, true)])),
                true,
            ),
        ],
    }
}

/// The field of every array of a stream of `kind`; `renamed` changes only
/// names, which arrays do not carry.
pub(crate) fn stream_field(kind: u8, renamed: bool) -> Field {
    let kind = kind % KINDS;
    if kind == 4 {
        return Field::new(if renamed { "w" } else { "v" }, DataType::Int32, true);
    }
    let columns: Vec<Field> = columns(kind)
        .into_iter()
        .enumerate()
        .map(|(i, f)| {
            if renamed {
                f.with_name(format!("renamed_{i}"))
            } else {
                f
            }
        })
        .collect();
    Field::new(
        if renamed { "renamed" } else { "" },
        DataType::Struct(columns.into()),
        false,
    )
}

/// A tiny deterministic generator for the values of a batch.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn chance(&mut self, one_in: u64) -> bool {
        self.next() % one_in == 0
    }
}

/// `rows` rows of `kind`'s data, derived from `seed`.
pub(crate) fn fixed_data(kind: u8, rows: u8, seed: u32) -> ArrayRef {
    let kind = kind % KINDS;
    let rows = rows as usize % 5;
    let mut r = Rng(u64::from(seed) ^ 0x9E37_79B9_7F4A_7C15);
    let words = ["", "a", "bc", "a string longer than twelve bytes", "ü"];
    let columns: Vec<ArrayRef> = match kind {
        0 => vec![Arc::new(Int64Array::from_iter_values(
            (0..rows).map(|_| r.next() as i64),
        ))],
        1 => {
            let ids = Int64Array::from_iter_values((0..rows).map(|_| (r.next() % 1000) as i64));
            let names: StringArray = (0..rows)
                .map(|_| (!r.chance(3)).then(|| format!("row {}", r.next() % 100)))
                .collect();
            vec![Arc::new(ids), Arc::new(names)]
        }
        2 => {
            let flags: BooleanArray = (0..rows)
                .map(|_| (!r.chance(4)).then(|| r.chance(2)))
                .collect();
            // Small exact values: NaN would not equal itself.
            let xs: Float64Array = (0..rows)
                .map(|_| (!r.chance(4)).then(|| (r.next() % 64) as f64 / 4.0))
                .collect();
            let tags = ListArray::from_iter_primitive::<Int32Type, _, _>((0..rows).map(|_| {
                (!r.chance(4)).then(|| {
                    (0..r.next() % 3)
                        .map(|_| (!r.chance(5)).then(|| (r.next() % 100) as i32))
                        .collect::<Vec<_>>()
                })
            }));
            vec![Arc::new(flags), Arc::new(xs), Arc::new(tags)]
        }
        3 => {
            let keys: DictionaryArray<Int8Type> = (0..rows)
                .map(|_| (!r.chance(4)).then(|| words[(r.next() % 3) as usize]))
                .collect();
            let blobs: LargeBinaryArray = (0..rows)
                .map(|_| (!r.chance(4)).then(|| vec![r.next() as u8; (r.next() % 4) as usize]))
                .collect::<Vec<_>>()
                .into_iter()
                .collect();
            let views: StringViewArray = (0..rows)
                .map(|_| (!r.chance(4)).then(|| words[(r.next() % 5) as usize]))
                .collect();
            let a: Int32Array = (0..rows)
                .map(|_| (!r.chance(3)).then(|| r.next() as i32))
                .collect();
            let nested = StructArray::new(
                Fields::from(vec![Field::new("a", DataType::Int32, true)]),
                vec![Arc::new(a) as ArrayRef],
                None,
            );
            vec![
                Arc::new(keys),
                Arc::new(blobs),
                Arc::new(views),
                Arc::new(nested),
            ]
        }
        _ => {
            return Arc::new(
                (0..rows)
                    .map(|_| (!r.chance(3)).then(|| r.next() as i32))
                    .collect::<Int32Array>(),
            )
        }
    };
    let DataType::Struct(fields) = stream_field(kind, false).data_type().clone() else {
        unreachable!("kinds 0 to 3 are structs")
    };
    Arc::new(StructArray::new(fields, columns, None))
}

/// The builder's description of `field`'s schema (the fixed kinds' types).
fn node_of(field: &Field) -> SchemaNode {
    let (format, children, dictionary) = match field.data_type() {
        DataType::Int64 => ("l", vec![], None),
        DataType::Int32 => ("i", vec![], None),
        DataType::Int8 => ("c", vec![], None),
        DataType::Utf8 => ("u", vec![], None),
        DataType::Boolean => ("b", vec![], None),
        DataType::Float64 => ("g", vec![], None),
        DataType::LargeBinary => ("Z", vec![], None),
        DataType::Utf8View => ("vu", vec![], None),
        DataType::List(child) => ("+l", vec![node_of(child)], None),
        DataType::Struct(fields) => ("+s", fields.iter().map(|f| node_of(f)).collect(), None),
        DataType::Dictionary(key, value) => {
            let key = node_of(&Field::new("", key.as_ref().clone(), true));
            let value = node_of(&Field::new("", value.as_ref().clone(), true));
            let format = String::from_utf8(key.format.clone().expect("a key format"))
                .expect("an ASCII format");
            return SchemaNode::new(&format, field.name())
                .with_flags(if field.is_nullable() { NULLABLE } else { 0 })
                .with_dictionary(value);
        }
        other => unreachable!("no fixed kind has {other}"),
    };
    let node = SchemaNode::new(format, field.name())
        .with_flags(if field.is_nullable() { NULLABLE } else { 0 })
        .with_children(children);
    match dictionary {
        Some(dictionary) => node.with_dictionary(dictionary),
        None => node,
    }
}

/// The schema of a fixed kind, as the builder describes it.
pub(crate) fn fixed_node(kind: u8, renamed: bool) -> SchemaNode {
    node_of(&stream_field(kind, renamed))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fixed_kinds_build_and_export() {
        for kind in 0..KINDS {
            let data = fixed_data(kind, 4, 7);
            assert_eq!(data.data_type(), stream_field(kind, false).data_type());
            let schema = fixed_node(kind, false).build().schema;
            let field = arrow_device::schema::import_field(&schema).unwrap();
            assert_eq!(&field, &stream_field(kind, false), "kind {kind}");
        }
    }
}

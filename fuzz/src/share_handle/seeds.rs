//! The named inputs of the `share_handle` target: handles of valid arrays,
//! each packed into one allocation as a share packs its memory file.

use std::sync::Arc;

use arrow_array::types::Int32Type;
use arrow_array::{
    Array, ArrayRef, DictionaryArray, Int32Array, Int64Array, ListArray, StringArray,
    StringViewArray, StructArray, UnionArray,
};
use arrow_buffer::{NullBuffer, OffsetBuffer, ScalarBuffer};
use arrow_device::DeviceArray;
use arrow_schema::{DataType, Field, Fields, UnionFields};

use super::memory::encode;

/// Hand-written arrays of the layouts a handle must carry (nulls, offsets
/// and data, nesting, a dictionary, views with variadic buffers, unions),
/// and all of them as one struct.
fn arrays() -> Vec<(&'static str, ArrayRef)> {
    let ints: ArrayRef = Arc::new(Int64Array::from(vec![Some(1), None, Some(3), Some(-4)]));
    let strings: ArrayRef = Arc::new(StringArray::from(vec![
        Some("a"),
        None,
        Some(""),
        Some("dd"),
    ]));
    let long = "a string longer than twelve bytes";
    let views: ArrayRef = Arc::new(StringViewArray::from(vec![
        Some(long),
        None,
        Some("short"),
        Some(long),
    ]));
    let entries = StructArray::new(
        Fields::from(vec![
            Field::new("x", DataType::Int32, true),
            Field::new("y", DataType::Utf8, false),
        ]),
        vec![
            Arc::new(Int32Array::from(vec![Some(1), None, Some(3)])),
            Arc::new(StringArray::from(vec!["p", "qq", ""])),
        ],
        Some(NullBuffer::from(vec![true, true, false])),
    );
    let list_of_struct: ArrayRef = Arc::new(ListArray::new(
        Arc::new(Field::new("item", entries.data_type().clone(), true)),
        OffsetBuffer::new(ScalarBuffer::from(vec![0, 2, 2, 3, 3])),
        Arc::new(entries),
        Some(NullBuffer::from(vec![true, false, true, true])),
    ));
    let dictionary: ArrayRef = Arc::new(
        DictionaryArray::<Int32Type>::try_new(
            Int32Array::from(vec![Some(1), None, Some(0), Some(1)]),
            Arc::new(StringArray::from(vec!["x", "yy"])),
        )
        .expect("keys inside the values"),
    );
    let union_fields = UnionFields::try_new(
        [2, 5],
        [
            Field::new("i", DataType::Int32, true),
            Field::new("s", DataType::Utf8, true),
        ],
    )
    .expect("distinct type ids");
    let dense: ArrayRef = Arc::new(
        UnionArray::try_new(
            union_fields.clone(),
            ScalarBuffer::from(vec![2, 5, 2, 5]),
            Some(ScalarBuffer::from(vec![0, 0, 1, 1])),
            vec![
                Arc::new(Int32Array::from(vec![Some(7), None])),
                Arc::new(StringArray::from(vec![Some("u"), Some("vv")])),
            ],
        )
        .expect("a valid dense union"),
    );
    let sparse: ArrayRef = Arc::new(
        UnionArray::try_new(
            union_fields,
            ScalarBuffer::from(vec![5, 2, 2, 5]),
            None,
            vec![
                Arc::new(Int32Array::from(vec![None, Some(8), Some(9), None])),
                Arc::new(StringArray::from(vec![Some("w"), None, None, Some("")])),
            ],
        )
        .expect("a valid sparse union"),
    );
    let mut out = vec![
        ("ints-with-nulls", ints),
        ("strings", strings),
        ("string-view", views),
        ("list-of-struct", list_of_struct),
        ("dictionary", dictionary),
        ("dense-union", dense),
        ("sparse-union", sparse),
    ];
    let batch: ArrayRef = Arc::new(StructArray::from(
        out.iter()
            .map(|(name, array)| {
                (
                    Arc::new(Field::new(*name, array.data_type().clone(), true)),
                    array.clone(),
                )
            })
            .collect::<Vec<_>>(),
    ));
    out.push(("batch", batch));
    out
}

/// Each hand-written array whole and sliced from row 1, and every golden
/// column (cut to 6 rows), as handles.
pub fn seeds() -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    for (name, array) in arrays() {
        for (suffix, array) in [("", array.clone()), ("-sliced", array.slice(1, 2))] {
            let data = encode(&DeviceArray::from_array(array.as_ref()))
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            out.push((format!("{name}{suffix}"), data));
        }
    }
    for (name, array) in crate::seeds::golden_arrays(6) {
        let data = encode(&DeviceArray::from_array(array.as_ref()))
            .unwrap_or_else(|e| panic!("golden {name}: {e}"));
        out.push((format!("golden-{name}"), data));
    }
    out
}

#[cfg(test)]
mod tests {
    use arrow_device::ValidationLevel;

    use super::*;
    use crate::array_import::assert_same;

    #[test]
    fn every_seed_opens_at_full_to_the_array_it_was_written_from() {
        let mut expected: Vec<(String, ArrayRef)> = Vec::new();
        for (name, array) in arrays() {
            expected.push((name.to_string(), array.clone()));
            expected.push((format!("{name}-sliced"), array.slice(1, 2)));
        }
        for (name, array) in crate::seeds::golden_arrays(6) {
            expected.push((format!("golden-{name}"), array));
        }
        let seeds = seeds();
        assert_eq!(seeds.len(), expected.len());
        for ((name, data), (expected_name, array)) in seeds.iter().zip(&expected) {
            assert_eq!(name, expected_name);
            let opened = super::super::open(data, ValidationLevel::Full)
                .unwrap_or_else(|| panic!("{name}: the allocations do not decode"));
            let opened = opened
                .result
                .unwrap_or_else(|e| panic!("{name}: refused: {e}"));
            let host = opened.to_host().expect("opened at full converts");
            assert_same(array, &host, name);
        }
    }
}

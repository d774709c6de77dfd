//! Inputs and settings shared by the benchmarks.
#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use arrow_array::types::Int32Type;
use arrow_array::{
    Array, ArrayRef, DictionaryArray, Float64Array, Int64Array, ListArray, RecordBatch, StringArray,
};
use arrow_buffer::OffsetBuffer;
use arrow_schema::{DataType, Field, Schema};
use criterion::{BenchmarkGroup, Criterion};

/// Every 7th slot null, so the validity bitmap is exported and imported.
pub fn int64s(len: usize) -> Int64Array {
    (0..len as i64).map(|i| (i % 7 != 0).then_some(i)).collect()
}

pub fn float64s(len: usize) -> Float64Array {
    (0..len)
        .map(|i| (i % 11 != 0).then_some(i as f64 * 0.5))
        .collect()
}

/// Short strings ("v0" .. "v99999"), every 13th slot null.
pub fn strings(len: usize) -> StringArray {
    (0..len)
        .map(|i| (i % 13 != 0).then(|| format!("v{i}")))
        .collect()
}

/// `columns` columns cycling through int64, float64 and utf8.
pub fn mixed_batch(columns: usize, rows: usize) -> RecordBatch {
    let (fields, arrays): (Vec<Field>, Vec<ArrayRef>) = (0..columns)
        .map(|i| -> (Field, ArrayRef) {
            let name = format!("c{i}");
            match i % 3 {
                0 => (
                    Field::new(name, DataType::Int64, true),
                    Arc::new(int64s(rows)),
                ),
                1 => (
                    Field::new(name, DataType::Float64, true),
                    Arc::new(float64s(rows)),
                ),
                _ => (
                    Field::new(name, DataType::Utf8, true),
                    Arc::new(strings(rows)),
                ),
            }
        })
        .unzip();
    RecordBatch::try_new(Arc::new(Schema::new(fields)), arrays).expect("columns match the schema")
}

/// `depth` levels of lists around int64s, one value per list: a tree of
/// `depth + 1` nodes, each of `len` slots.
pub fn nested_lists(depth: usize, len: usize) -> ArrayRef {
    let mut array: ArrayRef = Arc::new(int64s(len));
    for _ in 0..depth {
        let field = Arc::new(Field::new_list_field(array.data_type().clone(), true));
        let offsets = OffsetBuffer::from_lengths(std::iter::repeat_n(1, len));
        array = Arc::new(ListArray::new(field, offsets, array, None));
    }
    array
}

/// `columns` dictionary-encoded string columns (int32 keys, 16 distinct
/// values, every 9th slot null).
pub fn dictionary_batch(columns: usize, rows: usize) -> RecordBatch {
    let (fields, arrays): (Vec<Field>, Vec<ArrayRef>) = (0..columns)
        .map(|i| -> (Field, ArrayRef) {
            let names: Vec<String> = (0..16).map(|v| format!("d{v}")).collect();
            let array: DictionaryArray<Int32Type> = (0..rows)
                .map(|r| (r % 9 != 0).then(|| names[r % 16].as_str()))
                .collect();
            (
                Field::new(format!("c{i}"), array.data_type().clone(), true),
                Arc::new(array),
            )
        })
        .unzip();
    RecordBatch::try_new(Arc::new(Schema::new(fields)), arrays).expect("columns match the schema")
}

/// One group per input, with settings that keep a full run within minutes
/// on a 2-core machine.
pub fn configure<'a>(
    c: &'a mut Criterion,
    name: &str,
) -> BenchmarkGroup<'a, criterion::measurement::WallTime> {
    let mut group = c.benchmark_group(name);
    group
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .sample_size(30);
    group
}

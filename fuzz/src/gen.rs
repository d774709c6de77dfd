//! Valid arrow-rs arrays of every type the C Data Interface has, built from
//! a fuzz input: the round-trip target's arrays, and the well-formed trees
//! the array-import target starts from before it breaks them.
//!
//! Layout: a length (one byte, reduced to at most [`MAX_LEN`]), a type tag
//! (one byte, reduced modulo the number of types), the type's parameters,
//! its values: one byte per validity flag, value bytes as the type needs
//! them, children built the same way (nesting at most [`MAX_DEPTH`] deep),
//! then a slice: offset and length bytes, reduced into the array.

use std::sync::Arc;

use arrow_array::types::*;
use arrow_array::*;
use arrow_buffer::{i256, IntervalDayTime, IntervalMonthDayNano, OffsetBuffer, ScalarBuffer};
use arrow_schema::{DataType, Field, Fields, TimeUnit, UnionFields};

use crate::input::Input;

pub const MAX_LEN: usize = 24;
pub const MAX_DEPTH: usize = 3;

/// The number of type tags; tags from `FIRST_NESTED` on are nested types
/// (a dictionary's values too: nesting is bounded through them as well).
pub const TYPES: u8 = 48;
const FIRST_NESTED: u8 = 36;

/// A valid array built from `input`, sliced.
pub fn array(input: &mut Input, depth: usize) -> ArrayRef {
    let len = input.below(MAX_LEN + 1);
    let array = sized(input, depth, len);
    let offset = input.below(array.len() + 1);
    let length = input.below(array.len() - offset + 1);
    array.slice(offset, length)
}

/// A valid array of exactly `len` slots.
fn sized(input: &mut Input, depth: usize, len: usize) -> ArrayRef {
    let mut tag = input.u8() % TYPES;
    if depth >= MAX_DEPTH && tag >= FIRST_NESTED {
        tag %= FIRST_NESTED;
    }
    macro_rules! prim {
        ($t:ty) => {{
            let values: Vec<Option<<$t as ArrowPrimitiveType>::Native>> = (0..len)
                .map(|_| {
                    let valid = input.u8() % 4 != 0;
                    let mut bytes = [0u8; 32];
                    let width = std::mem::size_of::<<$t as ArrowPrimitiveType>::Native>();
                    for b in bytes.iter_mut().take(width) {
                        *b = input.u8();
                    }
                    // SAFETY: every native type here is plain old data of
                    // `width` <= 32 bytes, any bit pattern valid.
                    let value = unsafe {
                        std::ptr::read_unaligned(
                            bytes.as_ptr().cast::<<$t as ArrowPrimitiveType>::Native>(),
                        )
                    };
                    valid.then_some(value)
                })
                .collect();
            Arc::new(PrimitiveArray::<$t>::from(values)) as ArrayRef
        }};
    }
    let valid = |input: &mut Input| input.u8() % 4 != 0;
    let bytes = |input: &mut Input| -> Vec<u8> {
        let n = if input.bool() {
            input.below(30)
        } else {
            input.below(6)
        };
        (0..n).map(|_| input.u8()).collect()
    };
    let text = |input: &mut Input| String::from_utf8_lossy(&bytes(input)).into_owned();
    match tag {
        0 => Arc::new(NullArray::new(len)),
        1 => Arc::new(BooleanArray::from(
            (0..len)
                .map(|_| valid(input).then(|| input.bool()))
                .collect::<Vec<_>>(),
        )),
        2 => prim!(Int8Type),
        3 => prim!(UInt8Type),
        4 => prim!(Int16Type),
        5 => prim!(UInt16Type),
        6 => prim!(Int32Type),
        7 => prim!(UInt32Type),
        8 => prim!(Int64Type),
        9 => prim!(UInt64Type),
        10 => prim!(Float16Type),
        11 => prim!(Float32Type),
        12 => prim!(Float64Type),
        13 => prim!(Date32Type),
        14 => prim!(Date64Type),
        15 => prim!(Time32SecondType),
        16 => prim!(Time32MillisecondType),
        17 => prim!(Time64MicrosecondType),
        18 => prim!(Time64NanosecondType),
        19 => {
            let unit = [
                TimeUnit::Second,
                TimeUnit::Millisecond,
                TimeUnit::Microsecond,
                TimeUnit::Nanosecond,
            ][input.below(4)];
            let values = prim!(Int64Type);
            let tz = match input.below(3) {
                0 => None,
                1 => Some("UTC"),
                _ => Some("+05:30"),
            };
            let data_type = DataType::Timestamp(unit, tz.map(Arc::from));
            arrow_array::make_array(
                values
                    .to_data()
                    .into_builder()
                    .data_type(data_type)
                    .build()
                    .unwrap(),
            )
        }
        20 => prim!(DurationSecondType),
        21 => prim!(DurationNanosecondType),
        22 => prim!(IntervalYearMonthType),
        23 => Arc::new(IntervalDayTimeArray::from(
            (0..len)
                .map(|_| valid(input).then(|| IntervalDayTime::new(input.i32(), input.i32())))
                .collect::<Vec<_>>(),
        )),
        24 => Arc::new(IntervalMonthDayNanoArray::from(
            (0..len)
                .map(|_| {
                    valid(input)
                        .then(|| IntervalMonthDayNano::new(input.i32(), input.i32(), input.i64()))
                })
                .collect::<Vec<_>>(),
        )),
        25 => Arc::new(
            Decimal32Array::from(
                (0..len)
                    .map(|_| valid(input).then(|| input.i32() % 1_000_000))
                    .collect::<Vec<_>>(),
            )
            .with_precision_and_scale(9, 2)
            .unwrap(),
        ),
        26 => Arc::new(
            Decimal64Array::from(
                (0..len)
                    .map(|_| valid(input).then(|| input.i64() % 1_000_000_000))
                    .collect::<Vec<_>>(),
            )
            .with_precision_and_scale(18, 3)
            .unwrap(),
        ),
        27 => Arc::new(
            Decimal128Array::from(
                (0..len)
                    .map(|_| valid(input).then(|| input.i64() as i128))
                    .collect::<Vec<_>>(),
            )
            .with_precision_and_scale(38, 5)
            .unwrap(),
        ),
        28 => Arc::new(
            Decimal256Array::from(
                (0..len)
                    .map(|_| valid(input).then(|| i256::from_i128(input.i64() as i128)))
                    .collect::<Vec<_>>(),
            )
            .with_precision_and_scale(76, 0)
            .unwrap(),
        ),
        29 => Arc::new(StringArray::from(
            (0..len)
                .map(|_| valid(input).then(|| text(input)))
                .collect::<Vec<_>>(),
        )),
        30 => Arc::new(LargeStringArray::from(
            (0..len)
                .map(|_| valid(input).then(|| text(input)))
                .collect::<Vec<_>>(),
        )),
        31 => Arc::new(StringViewArray::from(
            (0..len)
                .map(|_| valid(input).then(|| text(input)))
                .collect::<Vec<_>>(),
        )),
        32 => {
            let values: Vec<Option<Vec<u8>>> = (0..len)
                .map(|_| valid(input).then(|| bytes(input)))
                .collect();
            Arc::new(BinaryArray::from_iter(values))
        }
        33 => {
            let values: Vec<Option<Vec<u8>>> = (0..len)
                .map(|_| valid(input).then(|| bytes(input)))
                .collect();
            Arc::new(LargeBinaryArray::from_iter(values))
        }
        34 => {
            let values: Vec<Option<Vec<u8>>> = (0..len)
                .map(|_| valid(input).then(|| bytes(input)))
                .collect();
            Arc::new(BinaryViewArray::from_iter(values))
        }
        35 => {
            let width = 1 + input.below(8);
            let values: Vec<Option<Vec<u8>>> = (0..len)
                .map(|_| valid(input).then(|| (0..width).map(|_| input.u8()).collect()))
                .collect();
            Arc::new(
                FixedSizeBinaryArray::try_from_sparse_iter_with_size(
                    values.into_iter(),
                    width as i32,
                )
                .unwrap(),
            )
        }
        36 => {
            // Dictionary-encoded: keys into a small dictionary of any type.
            let size = 1 + input.below(4);
            let dictionary = sized(input, depth + 1, size);
            let keys: Vec<Option<i32>> = (0..len)
                .map(|_| valid(input).then(|| input.below(dictionary.len()) as i32))
                .collect();
            Arc::new(DictionaryArray::new(Int32Array::from(keys), dictionary))
        }
        37 | 38 => {
            let (offsets, child) = partition(input, depth, len);
            let field = Arc::new(Field::new("item", child.data_type().clone(), true));
            let nulls = nulls(input, len);
            if tag == 37 {
                Arc::new(ListArray::new(
                    field,
                    OffsetBuffer::new(offsets.into()),
                    child,
                    nulls,
                ))
            } else {
                let offsets: Vec<i64> = offsets.iter().map(|&o| o as i64).collect();
                Arc::new(LargeListArray::new(
                    field,
                    OffsetBuffer::new(offsets.into()),
                    child,
                    nulls,
                ))
            }
        }
        39 | 40 => {
            // List views: slots anywhere in the child, overlapping allowed.
            let size = input.below(MAX_LEN + 1);
            let child = sized(input, depth + 1, size);
            let mut offsets = Vec::with_capacity(len);
            let mut sizes = Vec::with_capacity(len);
            for _ in 0..len {
                let offset = input.below(child.len() + 1);
                offsets.push(offset as i32);
                sizes.push(input.below(child.len() - offset + 1) as i32);
            }
            let field = Arc::new(Field::new("item", child.data_type().clone(), true));
            let nulls = nulls(input, len);
            if tag == 39 {
                Arc::new(ListViewArray::new(
                    field,
                    offsets.into(),
                    sizes.into(),
                    child,
                    nulls,
                ))
            } else {
                let o: Vec<i64> = offsets.iter().map(|&v| v as i64).collect();
                let s: Vec<i64> = sizes.iter().map(|&v| v as i64).collect();
                Arc::new(LargeListViewArray::new(
                    field,
                    o.into(),
                    s.into(),
                    child,
                    nulls,
                ))
            }
        }
        41 => {
            // Size 0 would lose the length (arrow-rs derives it from the
            // child); the malformed suites cover zero-size lists.
            let size = 1 + input.below(3);
            let child = sized(input, depth + 1, len * size);
            let field = Arc::new(Field::new("item", child.data_type().clone(), true));
            Arc::new(FixedSizeListArray::new(
                field,
                size as i32,
                child,
                nulls(input, len),
            ))
        }
        42 => {
            let n = input.below(4);
            let columns: Vec<ArrayRef> = (0..n).map(|_| sized(input, depth + 1, len)).collect();
            let fields: Fields = columns
                .iter()
                .enumerate()
                .map(|(i, c)| Field::new(format!("f{i}"), c.data_type().clone(), true))
                .collect();
            if n == 0 {
                Arc::new(StructArray::new_empty_fields(len, nulls(input, len)))
            } else {
                Arc::new(StructArray::new(fields, columns, nulls(input, len)))
            }
        }
        43 => {
            // Keys: non-null strings; values: any type.
            let (offsets, _) = partition_lengths(input, len);
            let entries = *offsets.last().unwrap() as usize;
            let keys: ArrayRef = Arc::new(StringArray::from(
                (0..entries).map(|i| format!("k{i}")).collect::<Vec<_>>(),
            ));
            let values = sized(input, depth + 1, entries);
            let entries_fields = Fields::from(vec![
                Field::new("key", DataType::Utf8, false),
                Field::new("value", values.data_type().clone(), true),
            ]);
            let entries = StructArray::new(entries_fields.clone(), vec![keys, values], None);
            let field = Arc::new(Field::new(
                "entries",
                DataType::Struct(entries_fields),
                false,
            ));
            Arc::new(MapArray::new(
                field,
                OffsetBuffer::new(offsets.into()),
                entries,
                nulls(input, len),
                false,
            ))
        }
        44 | 45 => {
            // Unions of 1 to 3 children, type ids not contiguous.
            let n = 1 + input.below(3);
            let ids: Vec<i8> = (0..n as i8).map(|i| i * 3 + 1).collect();
            let type_ids: Vec<i8> = (0..len).map(|_| ids[input.below(n)]).collect();
            let dense = tag == 45;
            let mut children = Vec::with_capacity(n);
            let mut offsets = vec![0i32; len];
            for id in &ids {
                let count = type_ids.iter().filter(|t| *t == id).count();
                let child_len = if dense { count + input.below(2) } else { len };
                children.push(sized(input, depth + 1, child_len));
                if dense {
                    let mut next = 0;
                    for (slot, t) in type_ids.iter().enumerate() {
                        if t == id {
                            offsets[slot] = next;
                            next += 1;
                        }
                    }
                }
            }
            let fields = UnionFields::try_new(
                ids.clone(),
                children
                    .iter()
                    .enumerate()
                    .map(|(i, c)| Field::new(format!("u{i}"), c.data_type().clone(), true)),
            )
            .unwrap();
            let offsets = dense.then(|| ScalarBuffer::from(offsets));
            Arc::new(UnionArray::try_new(fields, type_ids.into(), offsets, children).unwrap())
        }
        46 | 47 => {
            // Run-end encoded with int16 or int32 run ends.
            let runs = if len == 0 {
                0
            } else {
                1 + input.below(len.min(6))
            };
            let mut ends: Vec<i32> = (1..runs)
                .map(|_| 1 + input.below(len.max(1)) as i32)
                .collect();
            ends.push(len as i32);
            ends.sort_unstable();
            ends.dedup();
            let ends: Vec<i32> = ends.into_iter().filter(|&e| e > 0).collect();
            let values = sized(input, depth + 1, ends.len());
            if tag == 46 {
                let ends: Vec<i16> = ends.iter().map(|&e| e as i16).collect();
                Arc::new(RunArray::<Int16Type>::try_new(&Int16Array::from(ends), &values).unwrap())
            } else {
                Arc::new(RunArray::<Int32Type>::try_new(&Int32Array::from(ends), &values).unwrap())
            }
        }
        _ => unreachable!("tags are reduced modulo TYPES"),
    }
}

/// A validity buffer of `len` slots, or none.
fn nulls(input: &mut Input, len: usize) -> Option<arrow_buffer::NullBuffer> {
    if input.bool() {
        Some((0..len).map(|_| input.u8() % 4 != 0).collect())
    } else {
        None
    }
}

/// Offsets of `len` lists over a child of the total length, and that child.
fn partition(input: &mut Input, depth: usize, len: usize) -> (Vec<i32>, ArrayRef) {
    let (offsets, total) = partition_lengths(input, len);
    (offsets, sized(input, depth + 1, total))
}

fn partition_lengths(input: &mut Input, len: usize) -> (Vec<i32>, usize) {
    let mut offsets = vec![0i32];
    for _ in 0..len {
        let next = offsets.last().unwrap() + input.below(4) as i32;
        offsets.push(next);
    }
    let total = *offsets.last().unwrap() as usize;
    (offsets, total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_tag_builds_a_valid_array_from_any_bytes() {
        for tag in 0..TYPES {
            for fill in [0u8, 1, 7, 0xFF, 0x80] {
                let mut data = vec![9, tag];
                data.extend(std::iter::repeat_n(fill, 600));
                let array = array(&mut Input::new(&data), 0);
                array
                    .to_data()
                    .validate_full()
                    .unwrap_or_else(|e| panic!("tag {tag}: {e}"));
            }
        }
    }
}

#[cfg(test)]
mod length_tests {
    use super::*;

    #[test]
    fn sized_arrays_have_the_length_asked_for() {
        for tag in 0..TYPES {
            for len in [0usize, 1, 5, 17] {
                for fill in [0u8, 1, 7, 0xFF, 0x80, 0x33] {
                    let mut data = vec![tag];
                    data.extend((0..800u32).map(|i| fill.wrapping_add((i * 13) as u8)));
                    let array = sized(&mut Input::new(&data), 0, len);
                    assert_eq!(
                        array.len(),
                        len,
                        "tag {tag} fill {fill} type {}",
                        array.data_type()
                    );
                }
            }
        }
    }
}

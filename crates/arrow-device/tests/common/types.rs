//! One non-trivial array of every type arrow-rs supports.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::builder::{
    BinaryViewBuilder, FixedSizeListBuilder, Int32Builder, LargeListViewBuilder, ListViewBuilder,
    MapBuilder, StringBuilder, StringViewBuilder,
};
use arrow_array::types::{Int16Type, Int32Type, Int64Type, Int8Type, UInt32Type};
use arrow_array::*;
use arrow_buffer::{i256, IntervalDayTime as DayTime, IntervalMonthDayNano as MonthDayNano};
use arrow_buffer::{NullBuffer, OffsetBuffer, ScalarBuffer};
use arrow_schema::{DataType, Field, Fields, Schema, UnionFields, UnionMode};
use half::f16;

/// The metadata key that marks an extension type (Arrow columnar format,
/// "Extension Types").
pub const EXTENSION_NAME: &str = "ARROW:extension:name";

type Case = (&'static str, ArrayRef);

fn case(name: &'static str, array: impl Array + 'static) -> Case {
    (name, Arc::new(array))
}

/// One array of every type arrow-rs supports, named for failure messages.
///
/// Every array has at least 7 slots (except the zero-length cases, whose
/// names start with `empty`) and nulls wherever the type has a validity
/// bitmap, so that slices at offsets 1 and 3 cut through bitmaps at
/// non-byte boundaries and still hold nulls.
pub fn all_types() -> Vec<(String, ArrayRef)> {
    [
        primitives(),
        decimals(),
        temporals(),
        binaries(),
        lists(),
        structs_and_maps(),
        unions(),
        dictionaries(),
        run_end_encoded(),
        empties(),
    ]
    .into_iter()
    .flatten()
    .map(|(name, array)| (name.to_string(), array))
    .collect()
}

/// Eight values with nulls at slots 1, 4 and 6.
fn opt<T: Copy>(values: [T; 8]) -> Vec<Option<T>> {
    let null = |i| matches!(i, 1 | 4 | 6);
    values
        .iter()
        .enumerate()
        .map(|(i, v)| (!null(i)).then_some(*v))
        .collect()
}

/// The extremes of an integer type around small values, with nulls.
macro_rules! extremes {
    ($t:ty) => {
        opt([<$t>::MIN, 1, 2, 3, 4, 5, 6, <$t>::MAX])
    };
}

fn primitives() -> Vec<Case> {
    let bools = [1, 0, 2, 1, 1, 0, 2, 1, 1, 0, 2].map(|b| (b < 2).then_some(b == 1));
    let halves = [-1.5, 0.0, 2.25, 3.0, 65504.0, -0.0, 6.5, 7.125].map(f16::from_f32);
    vec![
        case("null", NullArray::new(9)),
        case("boolean", BooleanArray::from(bools.to_vec())),
        case("int8", Int8Array::from(extremes!(i8))),
        case("int16", Int16Array::from(extremes!(i16))),
        case("int32", Int32Array::from(extremes!(i32))),
        case("int64", Int64Array::from(extremes!(i64))),
        case("uint8", UInt8Array::from(extremes!(u8))),
        case("uint16", UInt16Array::from(extremes!(u16))),
        case("uint32", UInt32Array::from(extremes!(u32))),
        case("uint64", UInt64Array::from(extremes!(u64))),
        case("float16", Float16Array::from(opt(halves))),
        case(
            "float32",
            Float32Array::from(opt([f32::MIN, 0.5, -0.0, 3.0, 4.0, 5.0, 6.0, f32::MAX])),
        ),
        case(
            "float64",
            Float64Array::from(opt([f64::MIN, 0.5, -0.0, 3.0, 4.0, 5.0, 6.0, f64::MAX])),
        ),
    ]
}

fn decimals() -> Vec<Case> {
    let big = i256::from_i128(i128::MAX) * i256::from_i128(1_000);
    let wide = opt([
        -big,
        i256::ONE,
        i256::MINUS_ONE,
        3.into(),
        4.into(),
        5.into(),
        314.into(),
        big,
    ]);
    let e37 = 10i128.pow(37);
    vec![
        case(
            "decimal32",
            Decimal32Array::from(opt([-999_999_999, 1, 2, 3, 4, 5, 6, 999_999_999]))
                .with_precision_and_scale(9, 2)
                .unwrap(),
        ),
        case(
            "decimal64",
            Decimal64Array::from(opt([-99_999_999_999, 1, 2, 3, 4, 5, 6, 12_345]))
                .with_precision_and_scale(18, 3)
                .unwrap(),
        ),
        case(
            "decimal128",
            Decimal128Array::from(opt([-e37, 1, 2, 3, 4, 5, 6, e37]))
                .with_precision_and_scale(38, 10)
                .unwrap(),
        ),
        case(
            "decimal256",
            Decimal256Array::from(wide)
                .with_precision_and_scale(76, 5)
                .unwrap(),
        ),
    ]
}

fn temporals() -> Vec<Case> {
    let secs = opt([-86_400i64, 0, 1, 1_700_000_000, 4, 5, 6, 253_402_300_799]);
    let nanos = opt([-1i64, 0, 1, 1_700_000_000_000_000, 4, 5, 6, i64::MAX]);
    let day_time = [
        (-1, -500),
        (0, 0),
        (1, 1),
        (30, 86_399_999),
        (4, 4),
        (5, 5),
        (6, 6),
        (1, -1),
    ]
    .map(|(d, ms)| DayTime::new(d, ms));
    let month_day_nano = [
        (-1, -2, -3),
        (0, 0, 0),
        (1, 1, 1),
        (12, 31, 86_400_000_000_000),
    ]
    .into_iter()
    .chain([
        (4, 4, 4),
        (5, 5, 5),
        (6, 6, 6),
        (i32::MAX, i32::MIN, i64::MAX),
    ])
    .map(|(m, d, ns)| MonthDayNano::new(m, d, ns));
    let month_day_nano: [MonthDayNano; 8] = month_day_nano.collect::<Vec<_>>().try_into().unwrap();
    vec![
        case(
            "date32",
            Date32Array::from(opt([-719_162, 0, 1, 19_000, 4, 5, 6, 2_932_896])),
        ),
        case(
            "date64",
            Date64Array::from(secs.iter().map(|s| s.map(|s| s * 1000)).collect::<Vec<_>>()),
        ),
        case(
            "time32_s",
            Time32SecondArray::from(opt([0, 1, 2, 3_600, 4, 5, 6, 86_399])),
        ),
        case(
            "time32_ms",
            Time32MillisecondArray::from(opt([0, 1, 2, 3, 4, 5, 6, 86_399_999])),
        ),
        case(
            "time64_us",
            Time64MicrosecondArray::from(opt([0, 1, 2, 3, 4, 5, 6, 86_399_999_999])),
        ),
        case(
            "time64_ns",
            Time64NanosecondArray::from(opt([0, 1, 2, 3, 4, 5, 6, 86_399_999_999_999])),
        ),
        case("timestamp_s", TimestampSecondArray::from(secs.clone())),
        case(
            "timestamp_ms",
            TimestampMillisecondArray::from(secs.clone()),
        ),
        case(
            "timestamp_us",
            TimestampMicrosecondArray::from(nanos.clone()),
        ),
        case(
            "timestamp_ns",
            TimestampNanosecondArray::from(nanos.clone()),
        ),
        case(
            "timestamp_s_utc",
            TimestampSecondArray::from(secs.clone()).with_timezone("UTC"),
        ),
        case(
            "timestamp_ms_offset",
            TimestampMillisecondArray::from(secs.clone()).with_timezone("+05:30"),
        ),
        case(
            "timestamp_us_zone",
            TimestampMicrosecondArray::from(nanos.clone()).with_timezone("Europe/Paris"),
        ),
        case(
            "timestamp_ns_zone",
            TimestampNanosecondArray::from(nanos.clone()).with_timezone("Asia/Tokyo"),
        ),
        case("duration_s", DurationSecondArray::from(secs.clone())),
        case("duration_ms", DurationMillisecondArray::from(secs)),
        case("duration_us", DurationMicrosecondArray::from(nanos.clone())),
        case("duration_ns", DurationNanosecondArray::from(nanos)),
        case(
            "interval_year_month",
            IntervalYearMonthArray::from(opt([-13, 0, 1, 12, 4, 5, 6, 1_200])),
        ),
        case(
            "interval_day_time",
            IntervalDayTimeArray::from(opt(day_time)),
        ),
        case(
            "interval_month_day_nano",
            IntervalMonthDayNanoArray::from(opt(month_day_nano)),
        ),
    ]
}

/// Strings, some longer than the 12 bytes a view holds inline, so that view
/// arrays need variadic data buffers.
const WORDS: [Option<&str>; 10] = [
    Some("short"),
    None,
    Some(""),
    Some("a string longer than twelve bytes"),
    None,
    Some("twelve bytes"),
    Some("thirteen byte"),
    Some("ünïcödé ßtrïng spanning more than one view"),
    None,
    Some("tail of the array, also longer than 12"),
];

fn binaries() -> Vec<Case> {
    let bytes: Vec<Option<&[u8]>> = WORDS.iter().map(|w| w.map(str::as_bytes)).collect();
    // Small fixed blocks put the long strings into separate variadic buffers.
    let mut several = StringViewBuilder::new().with_fixed_block_size(64);
    several.extend(WORDS);
    let several = several.finish();
    assert!(
        several.data_buffers().len() >= 2,
        "utf8_view fixture: want >= 2 variadic buffers"
    );
    let mut one = BinaryViewBuilder::new();
    one.extend(bytes.iter().copied());
    let one = one.finish();
    assert_eq!(
        one.data_buffers().len(),
        1,
        "binary_view fixture: want 1 variadic buffer"
    );
    let inline = StringViewArray::from(vec![
        Some("a"),
        None,
        Some("bc"),
        Some(""),
        None,
        Some("xyz"),
        Some("z"),
    ]);
    let fixed = opt([
        [0u8, 1, 2],
        [3, 4, 5],
        [255, 254, 253],
        [9; 3],
        [0; 3],
        [1; 3],
        [2; 3],
        [7, 8, 9],
    ]);
    let fixed = FixedSizeBinaryArray::try_from_sparse_iter_with_size(fixed.into_iter(), 3).unwrap();
    vec![
        case("binary", BinaryArray::from(bytes.clone())),
        case("large_binary", LargeBinaryArray::from(bytes)),
        case("utf8", StringArray::from(WORDS.to_vec())),
        case("large_utf8", LargeStringArray::from(WORDS.to_vec())),
        case("binary_view", one),
        case("utf8_view_several_variadic_buffers", several),
        case("utf8_view_inline_only", inline),
        case("fixed_size_binary", fixed),
    ]
}

/// The lengths of ten lists laid out back to back; `None` is a null list.
const LIST_LENGTHS: [Option<usize>; 10] = [
    Some(2),
    None,
    Some(0),
    Some(3),
    Some(1),
    None,
    Some(4),
    Some(0),
    Some(2),
    Some(3),
];

fn item() -> Arc<Field> {
    Arc::new(Field::new("item", DataType::Int32, true))
}

fn lists() -> Vec<Case> {
    let values = || {
        Arc::new(Int32Array::from_iter(
            (0..15).map(|i| (i % 4 != 3).then_some(i * 10)),
        ))
    };
    let nulls = || {
        Some(NullBuffer::from_iter(
            LIST_LENGTHS.iter().map(Option::is_some),
        ))
    };
    let lengths = LIST_LENGTHS.map(|l| l.unwrap_or(0));
    let list = ListArray::new(
        item(),
        OffsetBuffer::from_lengths(lengths),
        values(),
        nulls(),
    );
    let large_list = LargeListArray::new(
        item(),
        OffsetBuffer::from_lengths(lengths),
        values(),
        nulls(),
    );

    let mut fixed = FixedSizeListBuilder::new(Int32Builder::new(), 3);
    for i in 0..8 {
        for j in 0..3 {
            fixed
                .values()
                .append_option(((i + j) % 5 != 0).then_some(i * 3 + j));
        }
        fixed.append(i % 3 != 1);
    }

    let mut list_view = ListViewBuilder::new(Int32Builder::new());
    let mut large_list_view = LargeListViewBuilder::new(Int32Builder::new());
    for (i, length) in LIST_LENGTHS.iter().enumerate() {
        let i = i as i32;
        match length {
            Some(length) => {
                for v in 0..*length as i32 {
                    list_view
                        .values()
                        .append_option((v != 1).then_some(i * 10 + v));
                    large_list_view.values().append_value(v - i);
                }
                list_view.append(true);
                large_list_view.append(true);
            }
            None => {
                list_view.append_null();
                large_list_view.append_null();
            }
        }
    }
    let list_view = list_view.finish();
    // The same windows in reverse order over the same values: offsets that
    // are not sorted, which only list views allow.
    let (field, offsets, sizes, values, nulls) = list_view.clone().into_parts();
    let reversed_offsets: ScalarBuffer<i32> = offsets.iter().rev().copied().collect();
    let reversed_sizes: ScalarBuffer<i32> = sizes.iter().rev().copied().collect();
    let reversed_nulls = nulls.map(|n| NullBuffer::from_iter(n.iter().rev()));
    let unsorted = ListViewArray::new(
        field,
        reversed_offsets,
        reversed_sizes,
        values,
        reversed_nulls,
    );
    vec![
        case("list", list),
        case("large_list", large_list),
        case("fixed_size_list", fixed.finish()),
        case("list_view", list_view),
        case("list_view_unsorted_offsets", unsorted),
        case("large_list_view", large_list_view.finish()),
    ]
}

fn structs_and_maps() -> Vec<Case> {
    let fields = Fields::from(vec![
        Field::new("id", DataType::Int32, true),
        Field::new("name", DataType::Utf8, true),
        Field::new("flag", DataType::Boolean, false),
    ]);
    let columns: Vec<ArrayRef> = vec![
        Arc::new(Int32Array::from(opt([1, 2, 3, 4, 5, 6, 7, 8]))),
        Arc::new(StringArray::from(WORDS[..8].to_vec())),
        Arc::new(BooleanArray::from(vec![
            true, false, true, true, false, false, true, false,
        ])),
    ];
    // Slots 2 and 7 are null structs; 1, 4 and 6 valid structs with null members.
    let nulls = NullBuffer::from(vec![true, true, false, true, true, true, true, false]);
    let structs = StructArray::new(fields, columns, Some(nulls));

    let mut map = MapBuilder::new(None, StringBuilder::new(), Int32Builder::new());
    for i in 0..9 {
        for j in 0..(i % 3) {
            map.keys().append_value(format!("key{i}_{j}"));
            map.values().append_option((j != 1).then_some(i * 100 + j));
        }
        map.append(i % 4 != 2).unwrap();
    }
    vec![case("struct", structs), case("map", map.finish())]
}

fn unions() -> Vec<Case> {
    // Type ids 5 and 9: neither contiguous nor the child indices.
    let int = Field::new("int", DataType::Int32, true);
    let text = Field::new("text", DataType::Utf8, true);
    let fields = UnionFields::try_new([5, 9], [int, text]).unwrap();
    let type_ids = ScalarBuffer::from(vec![5, 9, 9, 5, 5, 9, 5, 9, 5]);
    let sparse_ints = Int32Array::from(vec![
        Some(0),
        Some(1),
        None,
        Some(3),
        None,
        Some(5),
        Some(6),
        Some(7),
        Some(8),
    ]);
    let sparse_texts = StringArray::from(vec![
        Some("zero"),
        Some("one"),
        None,
        Some("three"),
        Some("four"),
        Some("a long fifth value"),
        None,
        Some("seven"),
        Some("eight"),
    ]);
    let children: Vec<ArrayRef> = vec![Arc::new(sparse_ints), Arc::new(sparse_texts)];
    let sparse = UnionArray::try_new(fields.clone(), type_ids.clone(), None, children).unwrap();
    // Dense: each child is addressed through offsets; the last child entries
    // are not referenced by any slot.
    let offsets = ScalarBuffer::from(vec![0, 0, 1, 1, 2, 2, 3, 3, 4]);
    let dense_ints = Int32Array::from(vec![Some(10), None, Some(30), Some(40), Some(50), Some(60)]);
    let dense_texts = StringArray::from(vec![
        Some("x"),
        None,
        Some("a value past twelve bytes"),
        Some("w"),
        Some("unused"),
    ]);
    let children: Vec<ArrayRef> = vec![Arc::new(dense_ints), Arc::new(dense_texts)];
    let dense = UnionArray::try_new(fields, type_ids, Some(offsets), children).unwrap();
    vec![case("sparse_union", sparse), case("dense_union", dense)]
}

/// Int8 keys, -1 meaning a null key.
fn keys(keys: &[i8]) -> Int8Array {
    keys.iter().map(|&k| (k >= 0).then_some(k)).collect()
}

fn dictionaries() -> Vec<Case> {
    let colours: ArrayRef = Arc::new(StringArray::from(vec![
        Some("red"),
        Some("green"),
        None,
        Some("a longer blue"),
    ]));
    let int8 =
        DictionaryArray::<Int8Type>::try_new(keys(&[0, 1, -1, 3, 0, 2, -1, 1, 3]), colours.clone());
    let numbers = Arc::new(Int64Array::from(vec![-5, 500, 5_000_000, i64::MIN]));
    let uint32 = DictionaryArray::<UInt32Type>::try_new(
        UInt32Array::from(opt([3, 2, 1, 0, 0, 1, 2, 3])),
        numbers,
    );

    let nested =
        DictionaryArray::<Int8Type>::try_new(keys(&[3, 0, -1, 1, 1, 2, 0, -1, 3, 2, 0]), colours)
            .unwrap();
    let item = Arc::new(Field::new("item", nested.data_type().clone(), true));
    let offsets = OffsetBuffer::from_lengths([2, 0, 3, 1, 0, 2, 2, 1]);
    let nulls = NullBuffer::from(vec![true, false, true, true, true, false, true, true]);
    let list_of_dictionary = ListArray::new(item, offsets, Arc::new(nested), Some(nulls));
    vec![
        case("dictionary_int8_utf8", int8.unwrap()),
        case("dictionary_uint32_int64", uint32.unwrap()),
        case("list_of_dictionary", list_of_dictionary),
    ]
}

fn run_end_encoded() -> Vec<Case> {
    let strings = StringArray::from(vec![
        Some("aa"),
        None,
        Some("a run value longer than 12"),
        Some("d"),
        None,
    ]);
    let int16 = RunArray::<Int16Type>::try_new(&Int16Array::from(vec![2, 3, 6, 7, 10]), &strings);
    let longs = Int64Array::from(vec![Some(7), None, Some(-7), Some(70)]);
    let int32 = RunArray::<Int32Type>::try_new(&Int32Array::from(vec![1, 4, 5, 9]), &longs);
    let bools = BooleanArray::from(vec![Some(true), None, Some(false)]);
    let int64 = RunArray::<Int64Type>::try_new(&Int64Array::from(vec![3, 4, 8]), &bools);
    vec![
        case("run_end_int16_utf8", int16.unwrap()),
        case("run_end_int32_int64", int32.unwrap()),
        case("run_end_int64_boolean", int64.unwrap()),
    ]
}

fn empties() -> Vec<Case> {
    let union_fields = [
        Field::new("a", DataType::Int32, true),
        Field::new("b", DataType::Utf8, true),
    ];
    let union = DataType::Union(
        UnionFields::try_new([5, 9], union_fields).unwrap(),
        UnionMode::Dense,
    );
    let run_ends = Arc::new(Field::new("run_ends", DataType::Int32, false));
    let run_values = Arc::new(Field::new("values", DataType::Utf8, true));
    let types = [
        ("empty_int32", DataType::Int32),
        ("empty_boolean", DataType::Boolean),
        ("empty_utf8", DataType::Utf8),
        ("empty_large_binary", DataType::LargeBinary),
        ("empty_utf8_view", DataType::Utf8View),
        ("empty_list", DataType::List(item())),
        ("empty_list_view", DataType::ListView(item())),
        ("empty_fixed_size_list", DataType::FixedSizeList(item(), 2)),
        (
            "empty_struct",
            DataType::Struct(Fields::from(vec![Field::new("a", DataType::Utf8, true)])),
        ),
        ("empty_dense_union", union),
        (
            "empty_dictionary",
            DataType::Dictionary(Box::new(DataType::Int16), Box::new(DataType::Utf8)),
        ),
        (
            "empty_run_end_encoded",
            DataType::RunEndEncoded(run_ends, run_values),
        ),
    ];
    types
        .into_iter()
        .map(|(name, data_type)| (name, new_empty_array(&data_type)))
        .collect()
}

/// A record batch whose schema and fields carry metadata: an extension type
/// (a UUID as fixed-size binary, marked through field metadata), a struct
/// column with null slots and a dictionary column.
pub fn batch_with_metadata() -> RecordBatch {
    let extension_metadata = HashMap::from([
        (EXTENSION_NAME.to_string(), "arrow.uuid".to_string()),
        ("ARROW:extension:metadata".to_string(), String::new()),
    ]);
    let uuid =
        Field::new("uuid", DataType::FixedSizeBinary(16), true).with_metadata(extension_metadata);
    let uuids = (0u8..8).map(|i| (i != 3).then_some([i; 16]));
    let uuids = FixedSizeBinaryArray::try_from_sparse_iter_with_size(uuids, 16).unwrap();
    let cases = all_types();
    let pick = |name: &str| {
        cases
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, a)| a.slice(0, 8))
            .unwrap()
    };
    let (structs, dictionary) = (pick("struct"), pick("dictionary_int8_utf8"));
    let comment = HashMap::from([("comment".to_string(), "a struct column".to_string())]);
    let fields = vec![
        uuid,
        Field::new("struct", structs.data_type().clone(), true).with_metadata(comment),
        Field::new("dictionary", dictionary.data_type().clone(), true),
        Field::new("int64", DataType::Int64, true),
    ];
    let schema = Schema::new(fields).with_metadata(HashMap::from([
        ("origin".to_string(), "arrow-device tests".to_string()),
        ("empty value".to_string(), String::new()),
    ]));
    let columns = vec![Arc::new(uuids), structs, dictionary, pick("int64")];
    RecordBatch::try_new(Arc::new(schema), columns).unwrap()
}

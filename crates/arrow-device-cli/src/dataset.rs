//! The embedded dataset: deterministic, seeded rows of mixed types, generated
//! in chunks, so the command has something realistic to move without any
//! download.
//!
//! Every row is drawn from its own random generator seeded by `(seed, row)`,
//! so a row's values do not depend on how the rows are chunked. The dictionary
//! column shares one dictionary (one `ArrayRef`) across all batches, as a
//! categorical column does, so the batches can also be written to an IPC file
//! (which allows no dictionary replacement).
//!
//! ```
//! use arrow_device_cli::dataset::Dataset;
//!
//! let dataset = Dataset::new(1_000, 42).with_chunk_rows(400);
//! let batches: Vec<_> = dataset.batches().collect::<Result<_, _>>().unwrap();
//! assert_eq!(batches.iter().map(|b| b.num_rows()).collect::<Vec<_>>(), [400, 400, 200]);
//! assert_eq!(batches[0].schema(), Dataset::schema());
//! ```

use std::fmt::Write;
use std::sync::{Arc, OnceLock};

use arrow_array::builder::{
    BooleanBuilder, Float32Builder, Float64Builder, Int32Builder, Int64Builder, ListBuilder,
    StringBuilder, StringViewBuilder, TimestampMicrosecondBuilder,
};
use arrow_array::types::Int32Type;
use arrow_array::{ArrayRef, DictionaryArray, RecordBatch, StringArray, StructArray};
use arrow_buffer::NullBuffer;
use arrow_schema::{ArrowError, DataType, Field, Fields, Schema, SchemaRef, TimeUnit};

/// Rows of the embedded dataset when `--rows` is not given.
pub const DEFAULT_ROWS: u64 = 1_000_000;
/// Seed of the embedded dataset when `--seed` is not given.
pub const DEFAULT_SEED: u64 = 42;
/// Rows per generated record batch.
pub const DEFAULT_CHUNK_ROWS: usize = 64 * 1024;

/// The timezone of the `ts` column.
pub const TIMEZONE: &str = "Europe/Amsterdam";

/// 2024-01-01T00:00:00Z in microseconds since the epoch.
const TS_BASE_MICROS: i64 = 1_704_067_200_000_000;

const WORDS: [&str; 16] = [
    "arrow",
    "device",
    "buffer",
    "stream",
    "schema",
    "offset",
    "bitmap",
    "dictionary",
    "kernel",
    "event",
    "column",
    "record",
    "batch",
    "host",
    "memory",
    "view",
];

const CATEGORIES: [&str; 8] = [
    "alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel",
];

/// A deterministic generator of record batches with the [`Dataset::schema`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dataset {
    rows: u64,
    seed: u64,
    chunk_rows: usize,
}

impl Dataset {
    /// `rows` rows drawn from `seed`, in chunks of [`DEFAULT_CHUNK_ROWS`].
    pub fn new(rows: u64, seed: u64) -> Self {
        Self {
            rows,
            seed,
            chunk_rows: DEFAULT_CHUNK_ROWS,
        }
    }

    /// The same rows in chunks of `chunk_rows` (at least 1).
    pub fn with_chunk_rows(self, chunk_rows: usize) -> Self {
        Self {
            chunk_rows: chunk_rows.max(1),
            ..self
        }
    }

    /// Total rows.
    pub fn rows(&self) -> u64 {
        self.rows
    }

    /// The seed.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// Rows per batch (the last may be shorter).
    pub fn chunk_rows(&self) -> usize {
        self.chunk_rows
    }

    /// The schema of every batch: one column per kind of layout the C Data
    /// Interface distinguishes (fixed width, bitmap, offsets, list, struct,
    /// dictionary, views).
    pub fn schema() -> SchemaRef {
        static SCHEMA: OnceLock<SchemaRef> = OnceLock::new();
        SCHEMA
            .get_or_init(|| {
                Arc::new(Schema::new(vec![
                    Field::new("id", DataType::Int64, false),
                    Field::new("value", DataType::Float64, true),
                    Field::new("name", DataType::Utf8, true),
                    Field::new_list("tags", Field::new_list_field(DataType::Int32, true), true),
                    Field::new_dictionary("category", DataType::Int32, DataType::Utf8, true),
                    Field::new(
                        "ts",
                        DataType::Timestamp(TimeUnit::Microsecond, Some(TIMEZONE.into())),
                        false,
                    ),
                    Field::new("flag", DataType::Boolean, true),
                    Field::new_struct("point", point_fields(), true),
                    Field::new("note", DataType::Utf8View, true),
                ]))
            })
            .clone()
    }

    /// The batches, in order.
    pub fn batches(self) -> impl Iterator<Item = Result<RecordBatch, ArrowError>> {
        let chunk = self.chunk_rows as u64;
        (0..self.rows.div_ceil(chunk)).map(move |i| {
            let start = i * chunk;
            // The cast is lossless: the length is at most `chunk_rows`, a usize.
            let len = (self.rows - start).min(chunk) as usize;
            self.generate(start, len)
        })
    }

    /// Rows `start..start + len` as one batch.
    pub fn generate(&self, start: u64, len: usize) -> Result<RecordBatch, ArrowError> {
        let mut id = Int64Builder::with_capacity(len);
        let mut value = Float64Builder::with_capacity(len);
        let mut name = StringBuilder::with_capacity(len, len * 12);
        let mut tags = ListBuilder::with_capacity(Int32Builder::with_capacity(len * 2), len);
        let mut category = Int32Builder::with_capacity(len);
        let mut ts = TimestampMicrosecondBuilder::with_capacity(len).with_timezone(TIMEZONE);
        let mut flag = BooleanBuilder::with_capacity(len);
        let mut x = Float32Builder::with_capacity(len);
        let mut y = Float32Builder::with_capacity(len);
        let mut point_valid = Vec::with_capacity(len);
        let mut note = StringViewBuilder::with_capacity(len);
        // Formatted strings go through one buffer (writing to a String cannot fail).
        let mut scratch = String::with_capacity(64);

        for row in start..start + len as u64 {
            // One generator per row: values do not depend on the chunking.
            let mut rng = SplitMix64::new(self.seed ^ row.wrapping_mul(0x9E37_79B9_7F4A_7C15));
            id.append_value(row as i64);

            if rng.chance(10) {
                value.append_null();
            } else {
                value.append_value(rng.unit() * 1_000.0 - 500.0);
            }

            if rng.chance(20) {
                name.append_null();
            } else {
                scratch.clear();
                let _ = write!(scratch, "{}-{}", rng.pick(&WORDS), rng.below(100_000));
                name.append_value(&scratch);
            }

            if rng.chance(25) {
                tags.append_null();
            } else {
                for _ in 0..rng.below(6) {
                    if rng.chance(50) {
                        tags.values().append_null();
                    } else {
                        tags.values().append_value(rng.below(2_000) as i32 - 1_000);
                    }
                }
                tags.append(true);
            }

            if rng.chance(30) {
                category.append_null();
            } else {
                category.append_value(rng.below(CATEGORIES.len() as u64) as i32);
            }

            ts.append_value(TS_BASE_MICROS + row as i64 * 1_000_000 + rng.below(1_000_000) as i64);

            if rng.chance(15) {
                flag.append_null();
            } else {
                flag.append_value(rng.next() & 1 == 1);
            }

            // Children of a null struct slot still hold values, as a producer
            // is free to leave there.
            point_valid.push(!rng.chance(33));
            x.append_value(rng.unit() as f32 * 360.0 - 180.0);
            y.append_value(rng.unit() as f32 * 180.0 - 90.0);

            // Views: strings of up to 12 bytes are inlined, longer ones live
            // in the variadic data buffers; draw both.
            match rng.below(10) {
                0 => note.append_null(),
                1..=4 => note.append_value(rng.pick(&WORDS)),
                _ => {
                    scratch.clear();
                    let _ = write!(
                        scratch,
                        "{} {} {} #{}",
                        rng.pick(&WORDS),
                        rng.pick(&WORDS),
                        rng.pick(&WORDS),
                        rng.below(1_000_000)
                    );
                    note.append_value(&scratch);
                }
            }
        }

        let point = StructArray::try_new(
            point_fields(),
            vec![Arc::new(x.finish()) as ArrayRef, Arc::new(y.finish())],
            Some(NullBuffer::from(point_valid)),
        )?;
        let category = DictionaryArray::<Int32Type>::try_new(category.finish(), categories())?;
        let columns: Vec<ArrayRef> = vec![
            Arc::new(id.finish()),
            Arc::new(value.finish()),
            Arc::new(name.finish()),
            Arc::new(tags.finish()),
            Arc::new(category),
            Arc::new(ts.finish()),
            Arc::new(flag.finish()),
            Arc::new(point),
            Arc::new(note.finish()),
        ];
        RecordBatch::try_new(Self::schema(), columns)
    }
}

/// The dictionary of the `category` column: one array shared by every batch.
fn categories() -> ArrayRef {
    static CATEGORY_VALUES: OnceLock<ArrayRef> = OnceLock::new();
    CATEGORY_VALUES
        .get_or_init(|| Arc::new(StringArray::from(CATEGORIES.to_vec())))
        .clone()
}

fn point_fields() -> Fields {
    Fields::from(vec![
        Field::new("x", DataType::Float32, false),
        Field::new("y", DataType::Float32, false),
    ])
}

/// SplitMix64 (Steele, Lea, Flood 2014): tiny, fast, good enough for test
/// data, and identical on every platform.
#[derive(Debug, Clone)]
struct SplitMix64(u64);

impl SplitMix64 {
    fn new(seed: u64) -> Self {
        Self(seed)
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (n > 0; the modulo bias is irrelevant here).
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// True with probability `percent`/100.
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    /// Uniform in `[0, 1)`, from the top 53 bits.
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }

    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len() as u64) as usize]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::cast::AsArray;
    use arrow_array::types::{Float64Type, Int64Type, TimestampMicrosecondType};
    use arrow_array::Array;

    #[test]
    fn schema_has_the_promised_types() {
        let schema = Dataset::schema();
        let types: Vec<_> = schema
            .fields()
            .iter()
            .map(|f| f.data_type().clone())
            .collect();
        assert_eq!(types[0], DataType::Int64);
        assert_eq!(types[1], DataType::Float64);
        assert_eq!(types[2], DataType::Utf8);
        assert!(matches!(&types[3], DataType::List(item) if item.data_type() == &DataType::Int32));
        assert_eq!(
            types[4],
            DataType::Dictionary(Box::new(DataType::Int32), Box::new(DataType::Utf8))
        );
        assert_eq!(
            types[5],
            DataType::Timestamp(TimeUnit::Microsecond, Some(TIMEZONE.into()))
        );
        assert_eq!(types[6], DataType::Boolean);
        assert!(matches!(&types[7], DataType::Struct(fields) if fields.len() == 2));
        assert_eq!(types[8], DataType::Utf8View);
        assert_eq!(schema.fields().len(), 9);
    }

    #[test]
    fn batches_cover_exactly_the_requested_rows() {
        let dataset = Dataset::new(10_001, 7).with_chunk_rows(1_000);
        let batches: Vec<_> = dataset.batches().collect::<Result<_, _>>().unwrap();
        assert_eq!(batches.len(), 11);
        assert_eq!(batches.iter().map(|b| b.num_rows()).sum::<usize>(), 10_001);
        assert_eq!(batches[10].num_rows(), 1);
        let last_id = batches[10].column(0).as_primitive::<Int64Type>().value(0);
        assert_eq!(last_id, 10_000);
        assert_eq!(Dataset::new(0, 7).batches().count(), 0);
    }

    #[test]
    fn the_same_seed_gives_the_same_batches() {
        let a: Vec<_> = Dataset::new(3_000, 99)
            .with_chunk_rows(1_024)
            .batches()
            .collect::<Result<_, _>>()
            .unwrap();
        let b: Vec<_> = Dataset::new(3_000, 99)
            .with_chunk_rows(1_024)
            .batches()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(a, b);
        let c = Dataset::new(3_000, 100)
            .with_chunk_rows(1_024)
            .generate(0, 1_024)
            .unwrap();
        assert_ne!(a[0], c);
    }

    #[test]
    fn rows_do_not_depend_on_the_chunking() {
        let whole = Dataset::new(200, 5).generate(0, 200).unwrap();
        let second_half = Dataset::new(200, 5).generate(100, 100).unwrap();
        for (i, field) in Dataset::schema().fields().iter().enumerate() {
            let expected = whole.column(i).slice(100, 100);
            assert_eq!(
                expected.to_data(),
                second_half.column(i).to_data(),
                "column {}",
                field.name()
            );
        }
    }

    #[test]
    fn batches_share_one_dictionary() {
        let batches: Vec<_> = Dataset::new(300, 2)
            .with_chunk_rows(100)
            .batches()
            .collect::<Result<_, _>>()
            .unwrap();
        let dict = |b: &RecordBatch| b.column(4).as_dictionary::<Int32Type>().values().clone();
        assert!(Arc::ptr_eq(&dict(&batches[0]), &dict(&batches[2])));
        assert_eq!(dict(&batches[0]).len(), CATEGORIES.len());
    }

    #[test]
    fn nullable_columns_have_nulls_and_views_have_both_layouts() {
        let batch = Dataset::new(5_000, 1).generate(0, 5_000).unwrap();
        for (i, field) in Dataset::schema().fields().iter().enumerate() {
            let nulls = batch.column(i).null_count();
            if field.is_nullable() {
                assert!(nulls > 0, "column {} has no nulls", field.name());
            } else {
                assert_eq!(nulls, 0, "column {}", field.name());
            }
        }
        let values = batch.column(1).as_primitive::<Float64Type>();
        assert!(values
            .iter()
            .flatten()
            .all(|v| (-500.0..500.0).contains(&v)));
        let ts = batch.column(5).as_primitive::<TimestampMicrosecondType>();
        assert!(ts.values().windows(2).all(|w| w[0] < w[1]));
        let notes = batch.column(8).as_string_view();
        assert!(notes.iter().flatten().any(|s| s.len() <= 12));
        assert!(notes.iter().flatten().any(|s| s.len() > 12));
        assert!(!notes.data_buffers().is_empty());
    }
}

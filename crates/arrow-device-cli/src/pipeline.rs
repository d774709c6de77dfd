//! The round trip of one record batch, stage by stage, with timings:
//!
//! 1. export onto the device (`export_record_batch_to`),
//! 2. hand the structs to C and take them back ([`crate::handoff`]),
//! 3. import (`DeviceArray::try_new`),
//! 4. copy to the host (`to_record_batch`),
//! 5. compare with the input.

use std::time::{Duration, Instant};

use arrow_array::{Array, RecordBatch};
use arrow_data::ArrayData;
use arrow_device::device::DeviceRef;
use arrow_device::{DeviceArray, ValidationLevel};
use arrow_schema::Schema;

use crate::error::{CliError, Result};
use crate::handoff::{self, HandoffCounts};

/// Time spent in each stage, summed over the batches.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct StageTimes {
    /// Reading or generating the input batches.
    pub input: Duration,
    /// `export_record_batch_to`: building the structs and copying the buffers
    /// onto the device.
    pub export: Duration,
    /// The C walk and move (with `--stream`: the C relay's moving of the
    /// stream and its checks of each batch).
    pub handoff: Duration,
    /// `DeviceArray::try_new`: validation and import.
    pub import: Duration,
    /// `to_record_batch`: copying back to arrow-rs arrays on the host.
    pub to_host: Duration,
    /// Comparing the result with the input.
    pub verify: Duration,
}

impl StageTimes {
    /// The stages as `(name, time)` rows, in pipeline order.
    pub fn rows(&self) -> [(&'static str, Duration); 6] {
        self.rows_named("C hand-off")
    }

    /// [`StageTimes::rows`] with the C stage called `handoff` (`C relay` for
    /// a stream).
    pub fn rows_named(&self, handoff: &'static str) -> [(&'static str, Duration); 6] {
        [
            ("read input", self.input),
            ("export", self.export),
            (handoff, self.handoff),
            ("import", self.import),
            ("to_host", self.to_host),
            ("verify", self.verify),
        ]
    }

    /// The sum of all stages.
    pub fn total(&self) -> Duration {
        self.rows().iter().map(|(_, t)| *t).sum()
    }
}

/// What a run moved and how long it took.
#[derive(Debug, Default, Clone)]
pub struct Totals {
    /// Record batches round-tripped.
    pub batches: usize,
    /// Rows round-tripped.
    pub rows: u64,
    /// Bytes of the input batches' buffers (validity, offsets, values,
    /// children and dictionaries; a buffer shared by two nodes counts twice).
    pub bytes: u64,
    /// What the C walk counted, summed over the batches.
    pub counts: HandoffCounts,
    /// Time per stage.
    pub times: StageTimes,
}

impl Totals {
    /// Counts `batch` as round-tripped: one batch more, its rows and its
    /// bytes.
    pub fn add_batch(&mut self, batch: &RecordBatch) {
        self.batches += 1;
        self.rows += batch.num_rows() as u64;
        self.bytes += batch_bytes(batch);
    }
}

/// Round-trips batches onto one device.
#[derive(Debug, Clone)]
pub struct Pipeline {
    device: DeviceRef,
    level: ValidationLevel,
}

impl Pipeline {
    /// A pipeline exporting onto `device` and importing with `level`.
    pub fn new(device: DeviceRef, level: ValidationLevel) -> Self {
        Self { device, level }
    }

    /// Round-trips `batch` (the `index`-th), adding its timings to `totals`;
    /// fails on the first stage that fails or when the batch comes back
    /// different.
    pub fn round_trip(&self, index: usize, batch: &RecordBatch, totals: &mut Totals) -> Result<()> {
        let t = Instant::now();
        let (array, schema) = arrow_device::export_record_batch_to(batch, &self.device)
            .map_err(|e| CliError::stage("export", index, e))?;
        totals.times.export += t.elapsed();

        let t = Instant::now();
        let (array, schema, counts) = handoff::pass_through(array, schema)
            .map_err(|e| CliError::stage("C hand-off", index, e))?;
        totals.times.handoff += t.elapsed();

        let t = Instant::now();
        // SAFETY: the C hand-off moved this crate's own export; every pointer in it is ours and valid.
        let imported = unsafe { DeviceArray::try_new(array, schema, self.level) }
            .map_err(|e| CliError::stage("import", index, e))?;
        totals.times.import += t.elapsed();

        let result = copy_to_host(index, imported, totals)?;
        verify(index, batch, &result, totals)?;
        totals.add_batch(batch);
        totals.counts.accumulate(&counts);
        Ok(())
    }
}

/// Copies `imported` (the `index`-th batch) to the host, adding the time to
/// the `to_host` stage; `imported` is released after the clock stops.
pub fn copy_to_host(
    index: usize,
    imported: DeviceArray,
    totals: &mut Totals,
) -> Result<RecordBatch> {
    let t = Instant::now();
    let result = imported
        .to_record_batch()
        .map_err(|e| CliError::stage("to_host", index, e))?;
    totals.times.to_host += t.elapsed();
    Ok(result)
}

/// Compares `found` with `expected` (the `index`-th batch), adding the time
/// to the `verify` stage; fails with the first difference when they differ.
pub fn verify(
    index: usize,
    expected: &RecordBatch,
    found: &RecordBatch,
    totals: &mut Totals,
) -> Result<()> {
    let t = Instant::now();
    let equal = found == expected;
    totals.times.verify += t.elapsed();
    if equal {
        Ok(())
    } else {
        Err(CliError::Mismatch {
            batch: index,
            detail: describe_difference(expected, found),
        })
    }
}

/// Bytes in the buffers of `batch`'s columns ([`buffer_bytes`] summed).
pub fn batch_bytes(batch: &RecordBatch) -> u64 {
    batch
        .columns()
        .iter()
        .map(|c| buffer_bytes(&c.to_data()))
        .sum()
}

/// Bytes in the buffers of `data` and of its children (dictionary values
/// included: arrow-rs keeps them as the only child).
pub fn buffer_bytes(data: &ArrayData) -> u64 {
    let own: usize = data.buffers().iter().map(|b| b.len()).sum();
    let nulls = data.nulls().map_or(0, |n| n.buffer().len());
    (own + nulls) as u64 + data.child_data().iter().map(buffer_bytes).sum::<u64>()
}

/// The first difference between `expected` and `found`, for the error
/// message: schema first, then the first differing column and row.
pub fn describe_difference(expected: &RecordBatch, found: &RecordBatch) -> String {
    if expected.num_rows() != found.num_rows() {
        return format!(
            "expected {} rows, found {}",
            expected.num_rows(),
            found.num_rows()
        );
    }
    let (es, fs) = (expected.schema(), found.schema());
    if let Some(difference) = describe_schema_difference(&es, &fs) {
        return difference;
    }
    for (i, field) in es.fields().iter().enumerate() {
        let (e, f) = (expected.column(i), found.column(i));
        if e.to_data() == f.to_data() {
            continue;
        }
        let row = (0..e.len()).find(|&r| e.slice(r, 1).to_data() != f.slice(r, 1).to_data());
        return match row {
            Some(r) => format!(
                "column {:?} row {r}: expected {}, found {}",
                field.name(),
                short(&format!("{:?}", e.slice(r, 1))),
                short(&format!("{:?}", f.slice(r, 1)))
            ),
            None => format!(
                "column {:?}: values are equal row by row but the arrays differ \
                 (expected {:?}, found {:?})",
                field.name(),
                short(&format!("{:?}", e.to_data())),
                short(&format!("{:?}", f.to_data()))
            ),
        };
    }
    "the batches differ, but no column or field does (RecordBatch equality)".to_string()
}

/// The first difference between two schemas: the number of columns, the
/// first differing field, or the metadata; `None` when they are equal.
pub fn describe_schema_difference(expected: &Schema, found: &Schema) -> Option<String> {
    if expected.fields().len() != found.fields().len() {
        return Some(format!(
            "expected {} columns, found {}",
            expected.fields().len(),
            found.fields().len()
        ));
    }
    for (e, f) in expected.fields().iter().zip(found.fields().iter()) {
        if e != f {
            return Some(format!(
                "column {:?}: expected field {e:?}, found {f:?}",
                e.name()
            ));
        }
    }
    if expected.metadata() != found.metadata() {
        return Some(format!(
            "schema metadata: expected {:?}, found {:?}",
            expected.metadata(),
            found.metadata()
        ));
    }
    None
}

fn short(s: &str) -> String {
    const MAX: usize = 300;
    let flat: String = s.split_whitespace().collect::<Vec<_>>().join(" ");
    match flat.char_indices().nth(MAX) {
        Some((cut, _)) => format!("{}...", &flat[..cut]),
        None => flat,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    use arrow_array::{Int32Array, StringArray};
    use arrow_schema::{DataType, Field, Schema};

    fn batch(ints: Vec<Option<i32>>, strs: Vec<Option<&str>>) -> RecordBatch {
        let schema = Schema::new(vec![
            Field::new("i", DataType::Int32, true),
            Field::new("s", DataType::Utf8, true),
        ]);
        RecordBatch::try_new(
            Arc::new(schema),
            vec![
                Arc::new(Int32Array::from(ints)),
                Arc::new(StringArray::from(strs)),
            ],
        )
        .unwrap()
    }

    #[test]
    fn difference_names_column_and_row() {
        let a = batch(
            vec![Some(1), Some(2), None],
            vec![Some("a"), Some("b"), Some("c")],
        );
        let b = batch(
            vec![Some(1), Some(2), None],
            vec![Some("a"), Some("x"), Some("c")],
        );
        let detail = describe_difference(&a, &b);
        assert!(
            detail.starts_with("column \"s\" row 1: expected"),
            "{detail}"
        );
        assert!(
            detail.contains("\"b\"") && detail.contains("\"x\""),
            "{detail}"
        );
    }

    #[test]
    fn difference_reports_row_counts_first() {
        let a = batch(vec![Some(1)], vec![None]);
        let b = batch(vec![], vec![]);
        assert_eq!(describe_difference(&a, &b), "expected 1 rows, found 0");
    }

    #[test]
    fn buffer_bytes_counts_validity_offsets_and_values() {
        let data = StringArray::from(vec![Some("ab"), None, Some("cde")]).to_data();
        // Validity bitmap (64-byte padded by arrow-rs), 4 offsets, 5 bytes.
        let bitmap = data.nulls().unwrap().buffer().len() as u64;
        assert_eq!(buffer_bytes(&data), bitmap + 16 + 5);
    }
}

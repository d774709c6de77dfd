//! `--stream`: the whole input goes through one `ArrowDeviceArrayStream`,
//! batch by batch, instead of one `ArrowDeviceArray` per batch.
//!
//! 1. The input's batches become an arrow-rs `RecordBatchReader`
//!    ([`SourceReader`]) exported as a device stream: `export_reader` on the
//!    CPU, `export_reader_to` onto another device (each batch is read and
//!    copied onto the device when `get_next` pulls it).
//! 2. The stream is moved into the C relay and imported back
//!    ([`RelayedStream`]): each `get_next` from Rust goes through C code to
//!    the Rust producer and back.
//! 3. Each imported batch is copied to the host (`to_record_batch`) and
//!    compared with the batch the producer read.
//!
//! Memory stays bounded: the input is read lazily, and for verification the
//! source keeps each batch it hands to the exporter only until that batch
//! comes back (one at a time, since the consumer pulls one at a time), so
//! the input is read once and never held whole. On the CPU the kept batch
//! shares its buffers with the export; on a device it is the host original
//! of the device copy in flight.
//!
//! The stages are timed apart although one `next()` on the imported stream
//! runs three of them: the C relay measures the time inside the producer's
//! `get_next` (reading the input + export) and in its own checks on the
//! caller's clock, and the source measures its reads; import is what is left.
//! Per-stage timings are made of `DeviceStreamReader`'s items rather than
//! `into_host_reader`'s, which would fold import and `to_host` into one call.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use arrow_array::{RecordBatch, RecordBatchReader};
use arrow_device::abi::DeviceType;
use arrow_device::device::DeviceRef;
use arrow_device::stream::{export_reader, export_reader_to};
use arrow_device::{Error as DeviceError, ValidationLevel};
use arrow_schema::{ArrowError, SchemaRef};

use crate::error::{CliError, Result};
use crate::input::{Batches, Input};
use crate::pipeline::{copy_to_host, verify, Totals};
use crate::progress::Progress;
use crate::relay::{RelayError, RelayedStream};

/// What a streamed run adds to the [`Totals`].
#[derive(Debug, Default, Clone, PartialEq)]
pub struct StreamSummary {
    /// The `--batch-rows` the input was chunked to.
    pub batch_rows: usize,
    /// From exporting the stream to verifying its last batch.
    pub wall: Duration,
    /// Median time of one batch, from asking for it to having verified it.
    pub median_batch: Duration,
    /// The slowest batch.
    pub max_batch: Duration,
}

/// What the source shares with the verifying side.
#[derive(Default)]
struct Shared {
    /// Batches handed to the exporter and not yet verified.
    in_flight: VecDeque<RecordBatch>,
    /// Time spent reading the input.
    read: Duration,
    /// The input's own error, kept whole (with its path and exit code): the
    /// stream carries only its text.
    error: Option<CliError>,
}

/// The input as an arrow-rs reader for the exporter, keeping each batch it
/// hands out for the verifying side.
pub struct SourceReader {
    batches: Batches,
    schema: SchemaRef,
    shared: Arc<Mutex<Shared>>,
}

fn lock(shared: &Mutex<Shared>) -> MutexGuard<'_, Shared> {
    // A panic while the lock was held cannot leave `Shared` half-updated in a
    // way that matters here (plain pushes and additions): keep going.
    shared.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Iterator for SourceReader {
    type Item = std::result::Result<RecordBatch, ArrowError>;

    fn next(&mut self) -> Option<Self::Item> {
        let t = Instant::now();
        let item = self.batches.next();
        let mut shared = lock(&self.shared);
        shared.read += t.elapsed();
        match item? {
            Ok(batch) => {
                shared.in_flight.push_back(batch.clone());
                Some(Ok(batch))
            }
            Err(err) => {
                let message = err.to_string();
                shared.error = Some(err);
                Some(Err(ArrowError::ExternalError(message.into())))
            }
        }
    }
}

impl RecordBatchReader for SourceReader {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }
}

/// Streams `input` onto `device` and back, verifying every batch; `progress`
/// advances per batch. Adds to `totals` as [`crate::pipeline::Pipeline`]
/// does for one batch at a time.
pub fn run(
    input: Input,
    device: DeviceRef,
    level: ValidationLevel,
    batch_rows: usize,
    progress: &Progress,
    totals: &mut Totals,
) -> Result<StreamSummary> {
    let shared = Arc::new(Mutex::new(Shared::default()));
    let source = SourceReader {
        batches: input.batches,
        schema: input.schema,
        shared: shared.clone(),
    };
    let start = Instant::now();

    let t = Instant::now();
    let stream = if device.device_type() == DeviceType::CPU {
        export_reader(source)
    } else {
        export_reader_to(source, &device)
    }
    .map_err(|e| CliError::Stream {
        stage: "export",
        message: e.to_string(),
    })?;
    totals.times.export += t.elapsed();

    let t = Instant::now();
    let mut relayed = RelayedStream::new(stream, level).map_err(|e| match e {
        RelayError::Relay(message) => CliError::Stream {
            stage: "C relay",
            message,
        },
        RelayError::Import(message) => CliError::Stream {
            stage: "import",
            message,
        },
    })?;
    // Moving the stream and reading its schema through C.
    totals.times.handoff += t.elapsed();

    let mut latencies = Vec::new();
    let mut index = 0;
    loop {
        let batch_start = Instant::now();
        let before = relayed.stats();
        let read_before = lock(&shared).read;
        let next = relayed.next();
        let pulled = batch_start.elapsed();
        let after = relayed.stats();
        let read = lock(&shared).read.saturating_sub(read_before);
        let upstream = nanos(after.upstream_ns - before.upstream_ns);
        let check = nanos(after.check_ns - before.check_ns);
        totals.times.input += read;
        totals.times.export += upstream.saturating_sub(read);
        totals.times.handoff += check;
        totals.times.import += pulled.saturating_sub(upstream + check);

        let array = match next {
            None => break,
            Some(Ok(array)) => array,
            Some(Err(err)) => return Err(stream_error(err, index, &shared)),
        };

        let result = copy_to_host(index, array, totals)?;
        let Some(expected) = lock(&shared).in_flight.pop_front() else {
            return Err(CliError::Mismatch {
                batch: index,
                detail: "the stream returned a batch the input never produced".into(),
            });
        };
        verify(index, &expected, &result, totals)?;
        totals.add_batch(&expected);
        progress.advance(expected.num_rows() as u64);
        latencies.push(batch_start.elapsed());
        index += 1;
    }

    let mut shared = lock(&shared);
    if let Some(err) = shared.error.take() {
        return Err(err);
    }
    if !shared.in_flight.is_empty() {
        return Err(CliError::Mismatch {
            batch: index,
            detail: format!(
                "the stream ended after {index} batches, but the input produced {} more",
                shared.in_flight.len()
            ),
        });
    }
    totals.counts.accumulate(&relayed.stats().counts);

    latencies.sort();
    Ok(StreamSummary {
        batch_rows,
        wall: start.elapsed(),
        median_batch: latencies
            .get(latencies.len() / 2)
            .copied()
            .unwrap_or_default(),
        max_batch: latencies.last().copied().unwrap_or_default(),
    })
}

/// A failed `next()` on the imported stream: the input's own error when the
/// producer failed reading it, otherwise the stage that failed.
fn stream_error(err: DeviceError, index: usize, shared: &Mutex<Shared>) -> CliError {
    if let Some(input_error) = lock(shared).error.take() {
        return input_error;
    }
    let stage = match err {
        // Export (or the C relay's checks) failed inside get_next.
        DeviceError::Producer { .. } => "get_next",
        _ => "import",
    };
    CliError::stage(stage, index, err)
}

fn nanos(ns: i64) -> Duration {
    Duration::from_nanos(u64::try_from(ns).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_device::device::{self, emulated::EmulatedDevice};

    use crate::input;

    fn streamed(device: DeviceRef, rows: u64, batch_rows: usize) -> (Totals, StreamSummary) {
        let input = input::open(None, Some(rows), 5, batch_rows).unwrap();
        let mut totals = Totals::default();
        let progress = Progress::new(None, false);
        let summary = run(
            input,
            device,
            ValidationLevel::Full,
            batch_rows,
            &progress,
            &mut totals,
        )
        .unwrap();
        (totals, summary)
    }

    #[test]
    fn every_batch_of_the_dataset_streams_through_c_on_the_cpu() {
        let (totals, summary) = streamed(device::cpu(), 2_500, 1_000);
        assert_eq!((totals.batches, totals.rows), (3, 2_500));
        assert!(totals.bytes > 0);
        // Nine columns and their children, three times.
        assert_eq!(totals.counts.nodes % 3, 0);
        assert!(totals.counts.nodes >= 3 * 10, "{:?}", totals.counts);
        assert!(totals.counts.host_checked > 0);
        assert_eq!(summary.batch_rows, 1_000);
        assert!(summary.max_batch >= summary.median_batch);
        assert!(summary.wall >= summary.max_batch);
    }

    #[test]
    fn every_batch_streams_through_c_on_the_emulated_device() {
        let device: DeviceRef = EmulatedDevice::global(0).unwrap();
        let (totals, _) = streamed(device, 1_001, 250);
        assert_eq!((totals.batches, totals.rows), (5, 1_001));
        assert_eq!(totals.counts.host_checked, 0, "device memory is never read");
    }

    #[test]
    fn an_input_error_ends_the_stream_with_the_input_error() {
        let good = input::open(None, Some(10), 1, 4).unwrap();
        let batches: Batches = Box::new(good.batches.take(1).chain(std::iter::once(Err(
            CliError::input("x.arrow", "decoding: bad"),
        ))));
        let input = Input { batches, ..good };
        let mut totals = Totals::default();
        let err = run(
            input,
            device::cpu(),
            ValidationLevel::Default,
            4,
            &Progress::new(None, false),
            &mut totals,
        )
        .unwrap_err();
        assert_eq!(err.to_string(), "x.arrow: decoding: bad");
        assert_eq!(err.exit_code(), 1);
        assert_eq!(totals.batches, 1);
    }
}

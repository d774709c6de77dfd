//! The stream hand-off to C (`--stream`): the exported
//! `ArrowDeviceArrayStream` goes to `ad_cli_stream_relay` (`c/relay.c`),
//! which moves it into a stream of its own that relays the producer's
//! batches, checking each one as a C consumer would; the relayed stream is
//! imported back with [`DeviceStreamReader`].
//!
//! After the move only C code holds the producer's stream, so every batch
//! that comes back has gone through a `get_next` written in C: the Rust
//! producer and the Rust consumer never see each other.
//!
//! ```
//! use std::sync::Arc;
//! use arrow_array::{ArrayRef, Int32Array, RecordBatch, RecordBatchIterator};
//! use arrow_device::stream::export_reader;
//! use arrow_device::ValidationLevel;
//! use arrow_device_cli::relay::RelayedStream;
//!
//! let batch = RecordBatch::try_from_iter([(
//!     "x",
//!     Arc::new(Int32Array::from(vec![1, 2, 3])) as ArrayRef,
//! )])?;
//! let reader = RecordBatchIterator::new([Ok(batch.clone()), Ok(batch.clone())], batch.schema());
//! let mut relayed = RelayedStream::new(export_reader(reader)?, ValidationLevel::Default)?;
//! let first = relayed.next().unwrap()?.to_record_batch()?;
//! assert_eq!(first, batch);
//! assert_eq!(relayed.stats().batches, 1);
//! assert!(relayed.next().unwrap().is_ok());
//! assert!(relayed.next().is_none());
//! assert_eq!((relayed.stats().batches, relayed.stats().rows), (2, 6));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::cell::UnsafeCell;
use std::ffi::{c_char, c_int, CStr};
use std::sync::OnceLock;
use std::time::Instant;

use arrow_device::abi::ArrowDeviceArrayStream;
use arrow_device::stream::DeviceStreamReader;
use arrow_device::{DeviceArray, DeviceType, ValidationLevel};
use arrow_schema::SchemaRef;

use crate::handoff::HandoffCounts;

/// What the C relay saw. Mirrors `struct ad_cli_relay_stats` in
/// `c/relay.c` field for field.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct RelayStats {
    /// Arrays passed on (the end of the stream not counted).
    pub batches: i64,
    /// Their lengths, summed.
    pub rows: i64,
    /// Nanoseconds inside the producer's `get_next` (reading the input and
    /// exporting onto the device).
    pub upstream_ns: i64,
    /// Nanoseconds in the relay's own checks.
    pub check_ns: i64,
    /// What the checks counted, summed over the arrays.
    pub counts: HandoffCounts,
}

extern "C" {
    fn ad_cli_stream_relay(
        stream_in: *mut ArrowDeviceArrayStream,
        stream_out: *mut ArrowDeviceArrayStream,
        now_ns: extern "C" fn() -> i64,
        stats: *mut RelayStats,
        err: *mut c_char,
        err_len: usize,
    ) -> c_int;
}

/// The clock the C relay reads: nanoseconds since the first call, on the
/// same monotonic clock as the [`Instant`]s that time the other stages.
extern "C" fn now_ns() -> i64 {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    let nanos = EPOCH.get_or_init(Instant::now).elapsed().as_nanos();
    // Saturates after 292 years of uptime.
    i64::try_from(nanos).unwrap_or(i64::MAX)
}

/// Why a stream could not be relayed and imported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RelayError {
    /// The C relay refused the stream (nothing moved; it was released here).
    Relay(String),
    /// The relayed stream could not be imported.
    Import(String),
}

impl std::fmt::Display for RelayError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RelayError::Relay(message) => f.write_str(message),
            RelayError::Import(message) => write!(f, "importing the relayed stream: {message}"),
        }
    }
}

impl std::error::Error for RelayError {}

/// A device stream moved into the C relay and imported back: an iterator of
/// the batches, on the device, that came through C.
pub struct RelayedStream {
    // Declared before `stats` so it is dropped first: the relay it owns
    // writes to `stats` on every get_next, so `stats` must outlive it. The
    // reader is never handed out, so nothing can move it past `stats`.
    reader: DeviceStreamReader,
    stats: Box<UnsafeCell<RelayStats>>,
}

impl RelayedStream {
    /// Moves `stream` into the C relay and imports the relayed stream at
    /// `level`. On an error the stream is released.
    pub fn new(stream: ArrowDeviceArrayStream, level: ValidationLevel) -> Result<Self, RelayError> {
        let mut stream = stream;
        let mut relayed = ArrowDeviceArrayStream::empty();
        let stats = Box::new(UnsafeCell::new(RelayStats::default()));
        let mut err = [0 as c_char; 1024];
        // SAFETY: `stream` and `relayed` are live, initialized locals; `stats`
        // is a heap cell that outlives the relay (see the field order of
        // `RelayedStream`; on the error paths below the relay is dropped
        // before `stats`); `err` is writable for its length. The C function
        // moves `stream` only when it returns 0 and never unwinds.
        let rc = unsafe {
            ad_cli_stream_relay(
                &mut stream,
                &mut relayed,
                now_ns,
                stats.get(),
                err.as_mut_ptr(),
                err.len(),
            )
        };
        if rc != 0 {
            // SAFETY: the C code zeroed `err` first and NUL-terminates what it
            // writes (vsnprintf), so it is a C string within the array.
            let message = unsafe { CStr::from_ptr(err.as_ptr()) }.to_string_lossy();
            return Err(RelayError::Relay(format!(
                "C relay refused the stream (errno {rc}): {message}"
            )));
        }
        if !stream.is_released() {
            // The relay owns the producer's callbacks now; releasing the
            // source as well would release the producer twice.
            std::mem::forget(stream);
            return Err(RelayError::Relay(
                "C relay returned 0 but did not mark the moved-from stream released".into(),
            ));
        }
        // SAFETY: `relayed` is the C relay's stream, which follows the spec
        // and passes on the arrays of this crate's own exporter.
        let reader = unsafe { DeviceStreamReader::try_new(relayed, level) }
            .map_err(|e| RelayError::Import(e.to_string()))?;
        Ok(RelayedStream { reader, stats })
    }

    /// What the relay has seen so far.
    pub fn stats(&self) -> RelayStats {
        // SAFETY: the C relay writes the cell only inside its get_next, which
        // runs on this thread within `next(&mut self)`; here `&self` rules
        // that out, so the read cannot race a write.
        unsafe { *self.stats.get() }
    }

    /// The stream's schema (its arrays are record batches).
    pub fn schema(&self) -> Option<SchemaRef> {
        self.reader.schema()
    }

    /// The device type every batch is on.
    pub fn device_type(&self) -> DeviceType {
        self.reader.device_type()
    }
}

impl Iterator for RelayedStream {
    type Item = arrow_device::Result<DeviceArray>;

    fn next(&mut self) -> Option<Self::Item> {
        self.reader.next()
    }
}

impl std::fmt::Debug for RelayedStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RelayedStream")
            .field("reader", &self.reader)
            .field("stats", &self.stats())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    use arrow_array::{
        ArrayRef, Int32Array, RecordBatch, RecordBatchIterator, RecordBatchReader, StringArray,
    };
    use arrow_device::device::{emulated::EmulatedDevice, DeviceRef};
    use arrow_device::stream::{export_reader, export_reader_to};
    use arrow_schema::ArrowError;

    fn batch(n: i32) -> RecordBatch {
        RecordBatch::try_from_iter([
            (
                "i",
                Arc::new(Int32Array::from_iter(
                    (0..n).map(|v| (v % 3 != 0).then_some(v)),
                )) as ArrayRef,
            ),
            (
                "s",
                Arc::new(StringArray::from_iter_values(
                    (0..n).map(|v| format!("s{v}")),
                )) as ArrayRef,
            ),
        ])
        .unwrap()
    }

    /// A reader of `batches`, declaring the first one's schema.
    fn reader_of(batches: Vec<RecordBatch>) -> impl RecordBatchReader + Send + 'static {
        let schema = batches[0].schema();
        RecordBatchIterator::new(batches.into_iter().map(Ok), schema)
    }

    /// Every batch the relay passes on, copied to the host.
    fn relay_all(relayed: &mut RelayedStream) -> Vec<RecordBatch> {
        relayed
            .map(|a| a.unwrap().to_record_batch().unwrap())
            .collect()
    }

    #[test]
    fn the_relay_moves_the_stream_and_passes_every_batch_on() {
        let batches = [batch(5), batch(7), batch(1)];
        let mut relayed = RelayedStream::new(
            export_reader(reader_of(batches.to_vec())).unwrap(),
            ValidationLevel::Full,
        )
        .unwrap();
        assert_eq!(relayed.device_type(), DeviceType::CPU);
        assert_eq!(relayed.schema().unwrap(), batches[0].schema());
        assert_eq!(relay_all(&mut relayed), batches);
        let stats = relayed.stats();
        assert_eq!((stats.batches, stats.rows), (3, 13));
        // Per batch: the root struct, int32 and utf8 nodes; the utf8 offsets
        // are read on the host.
        assert_eq!(stats.counts.nodes, 9);
        assert_eq!(stats.counts.buffers, 18);
        assert_eq!(stats.counts.host_checked, 3);
        assert_eq!(stats.counts.max_depth, 2);
        assert!(stats.upstream_ns > 0, "{stats:?}");
    }

    #[test]
    fn device_batches_are_relayed_without_reading_their_buffers() {
        let device: DeviceRef = EmulatedDevice::global(0).unwrap();
        let batches = [batch(4), batch(9)];
        let stream = export_reader_to(reader_of(batches.to_vec()), &device).unwrap();
        let mut relayed = RelayedStream::new(stream, ValidationLevel::Default).unwrap();
        assert_eq!(relayed.device_type(), DeviceType::EXT_DEV);
        assert_eq!(relay_all(&mut relayed), batches);
        let stats = relayed.stats();
        assert_eq!((stats.batches, stats.rows), (2, 13));
        assert_eq!(stats.counts.host_checked, 0, "device memory is never read");
    }

    #[test]
    fn a_producer_error_comes_through_the_relay_with_its_message() {
        let schema = batch(1).schema();
        let items = vec![
            Ok(batch(2)),
            Err(ArrowError::ComputeError("disk on fire".into())),
        ];
        let reader = RecordBatchIterator::new(items, schema);
        let mut relayed =
            RelayedStream::new(export_reader(reader).unwrap(), ValidationLevel::Default).unwrap();
        assert!(relayed.next().unwrap().is_ok());
        let err = relayed.next().unwrap().unwrap_err().to_string();
        assert!(
            err.contains("C relay: upstream get_next failed") && err.contains("disk on fire"),
            "{err}"
        );
        assert!(relayed.next().is_none());
        assert_eq!(relayed.stats().batches, 1);
    }

    #[test]
    fn a_released_stream_is_refused_and_nothing_moves() {
        let err = RelayedStream::new(ArrowDeviceArrayStream::empty(), ValidationLevel::Default)
            .unwrap_err();
        assert_eq!(
            err,
            RelayError::Relay(
                "C relay refused the stream (errno 22): stream: the stream is released \
                 (release is NULL)"
                    .into()
            )
        );
    }
}

//! Declarations of the sync device stream code in `c/stream.c` (see
//! `c/stream.h`): a C consumer of an `ArrowDeviceArrayStream`
//! ([`consume_stream_in_c`]) and a C producer of one ([`c_stream`]), with
//! the `#[repr(C)]` twins of their structs.

use std::cell::UnsafeCell;
use std::ffi::{c_char, c_int};

use arrow_device::abi::ArrowDeviceArrayStream;
use arrow_device::DeviceType;

use crate::{RawStructExpect, StructExpect};

/// Per-batch details kept by the C consumer (`INTEROP_STREAM_BATCHES`).
pub const INTEROP_STREAM_BATCHES: usize = 16;
/// Size of [`StreamReport`]'s message (`INTEROP_STREAM_TEXT`).
pub const INTEROP_STREAM_TEXT: usize = 512;

/// `struct interop_stream_expect`: what the C consumer checks get_schema
/// against, and which batch it keeps past the stream's release.
#[repr(C)]
#[derive(Debug)]
pub struct StreamExpect {
    schema: RawStructExpect,
    keep_batch: i64,
}

/// `struct interop_stream_report`: what the C consumer saw.
#[repr(C)]
#[derive(Clone)]
pub struct StreamReport {
    /// 0, or the line of `stream.c` whose check failed.
    pub status: i32,
    /// 0, or the non-zero code `get_schema` / `get_next` returned.
    pub code: i32,
    /// The stream's `device_type` as read by C.
    pub stream_device_type: i32,
    /// 1 when the schema's release callback set `release` to NULL.
    pub schema_release_nulled: i32,
    /// Batches received (the end and errors excluded).
    pub batches: i64,
    /// Sum of the batches' lengths.
    pub total_rows: i64,
    /// CPU streams: sum of the non-null values of child 0.
    pub sum: i64,
    /// Batches whose `device_type` differed from the stream's.
    pub device_type_mismatches: i64,
    /// Batches with a non-NULL `sync_event`.
    pub sync_events: i64,
    /// Batches whose release callback set `release` to NULL.
    pub batches_release_nulled: i64,
    /// Per batch (the first [`INTEROP_STREAM_BATCHES`]): `length`.
    pub lengths: [i64; INTEROP_STREAM_BATCHES],
    /// Per batch: `n_children`.
    pub n_children: [i64; INTEROP_STREAM_BATCHES],
    /// Per batch: `device_id`.
    pub device_ids: [i64; INTEROP_STREAM_BATCHES],
    /// 1 when the kept batch was held past the stream's release.
    pub kept_after_stream_release: i32,
    /// 1 when the kept batch's release (on the moved copy) set `release` to
    /// NULL.
    pub kept_release_nulled: i32,
    /// CPU streams: the kept batch's sum of child 0, read after the stream
    /// was released.
    pub kept_sum: i64,
    /// 1 when the stream's release callback set `release` to NULL.
    pub stream_release_nulled: i32,
    message: [c_char; INTEROP_STREAM_TEXT],
}

impl StreamReport {
    /// `get_last_error`'s message after a failed call ("" for none).
    pub fn message(&self) -> String {
        crate::text(&self.message)
    }

    /// The first `n` (at most [`INTEROP_STREAM_BATCHES`]) batches' lengths.
    pub fn lengths(&self) -> &[i64] {
        &self.lengths[..self.kept_batches()]
    }

    /// The first batches' `n_children`.
    pub fn n_children(&self) -> &[i64] {
        &self.n_children[..self.kept_batches()]
    }

    /// The first batches' `device_id`s.
    pub fn device_ids(&self) -> &[i64] {
        &self.device_ids[..self.kept_batches()]
    }

    fn kept_batches(&self) -> usize {
        usize::try_from(self.batches)
            .unwrap_or(0)
            .min(INTEROP_STREAM_BATCHES)
    }
}

impl std::fmt::Debug for StreamReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamReport")
            .field("status", &self.status)
            .field("code", &self.code)
            .field("message", &self.message())
            .field("stream_device_type", &self.stream_device_type)
            .field("batches", &self.batches)
            .field("total_rows", &self.total_rows)
            .field("sum", &self.sum)
            .field("lengths", &self.lengths())
            .field("device_ids", &self.device_ids())
            .finish_non_exhaustive()
    }
}

/// `struct interop_stream_counters`: what the C producer's callbacks did.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StreamCounters {
    /// Release calls on `get_next`'s root arrays.
    pub array_releases: i64,
    /// Release calls on their children.
    pub child_array_releases: i64,
    /// Release calls on `get_schema`'s root schemas.
    pub schema_releases: i64,
    /// Release calls on their children.
    pub child_schema_releases: i64,
    /// Release calls on the stream.
    pub stream_releases: i64,
    /// `get_next` calls.
    pub get_next_calls: i64,
    /// Batches handed out (not counting the end of the stream).
    pub batches_produced: i64,
    /// Allocations not yet freed.
    pub live_allocations: i64,
}

/// `struct interop_stream_config`: how the C producer behaves.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct StreamConfig {
    /// Batches before the end of the stream.
    pub n_batches: i64,
    /// Rows of every batch; batch `i` row `r` holds `a = i * rows + r`,
    /// `b = "x{a}"`.
    pub rows_per_batch: i64,
    /// `get_next` for this batch fails with `EIO`; -1: never.
    pub fail_at: i64,
    /// This batch has only child `a`, unlike `get_schema`; -1: never.
    pub one_child_at: i64,
    /// The stream's declared `device_type` (the arrays are CPU arrays).
    pub device_type: DeviceType,
}

impl StreamConfig {
    /// `n_batches` well-formed CPU batches of `rows_per_batch` rows.
    pub fn cpu(n_batches: i64, rows_per_batch: i64) -> Self {
        StreamConfig {
            n_batches,
            rows_per_batch,
            fail_at: -1,
            one_child_at: -1,
            device_type: DeviceType::CPU,
        }
    }
}

extern "C" {
    pub fn interop_consume_stream(
        stream: *mut ArrowDeviceArrayStream,
        expect: *const StreamExpect,
        report: *mut StreamReport,
    );
    pub fn interop_stream_report_size() -> usize;
    pub fn interop_make_stream(
        config: *const StreamConfig,
        counters: *mut StreamCounters,
        out: *mut ArrowDeviceArrayStream,
    ) -> c_int;
    pub fn interop_stream_counters_size() -> usize;
}

/// Hands `stream` to `interop_consume_stream`, which expects a `"+s"` with
/// `children` as `(format, name)`, keeps batch `keep_batch` past the
/// stream's release, and releases everything.
pub fn consume_stream_in_c(
    stream: &mut ArrowDeviceArrayStream,
    children: &[(&str, &str)],
    keep_batch: Option<usize>,
) -> StreamReport {
    // SAFETY: a plain query of a size.
    let c_size = unsafe { interop_stream_report_size() };
    assert_eq!(
        c_size,
        std::mem::size_of::<StreamReport>(),
        "StreamReport mirrors C"
    );
    let schema = StructExpect::new(children);
    let expect = StreamExpect {
        schema: schema.raw(),
        keep_batch: keep_batch.map_or(-1, |i| i as i64),
    };
    let mut report = std::mem::MaybeUninit::<StreamReport>::uninit();
    // SAFETY: `stream` is a valid stream (a released one is detected by the
    // consumer); `expect` points into `schema`, which outlives the call; `report` is writable and fully initialized by the consumer
    // (it starts with a memset).
    unsafe {
        interop_consume_stream(stream, &expect, report.as_mut_ptr());
        report.assume_init()
    }
}

/// The counters of one C producer stream. They are leaked on purpose: the
/// arrays the stream hands out write to them when released, which may be
/// after anything in the test that could own them is gone.
#[derive(Clone, Copy)]
pub struct ProducerCounters(&'static UnsafeCell<StreamCounters>);

impl ProducerCounters {
    /// The counters now.
    pub fn get(&self) -> StreamCounters {
        // SAFETY: the C callbacks write the counters only while they run,
        // on the thread that owns the stream and its arrays (this test's);
        // none is running during this read.
        unsafe { *self.0.get() }
    }
}

impl std::fmt::Debug for ProducerCounters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.get().fmt(f)
    }
}

/// A new C producer stream (`interop_make_stream`) and its counters.
pub fn c_stream(config: StreamConfig) -> (ArrowDeviceArrayStream, ProducerCounters) {
    // SAFETY: a plain query of a size.
    let c_size = unsafe { interop_stream_counters_size() };
    assert_eq!(
        c_size,
        std::mem::size_of::<StreamCounters>(),
        "StreamCounters mirrors C"
    );
    let counters: &'static UnsafeCell<StreamCounters> =
        Box::leak(Box::new(UnsafeCell::new(StreamCounters::default())));
    // Released arrays write to the counters whenever the last holder lets
    // go, possibly after the test's handle is gone: they live as long as the
    // process, and stay reachable from here (not a leak to memcheck).
    static KEPT: std::sync::Mutex<Vec<usize>> = std::sync::Mutex::new(Vec::new());
    KEPT.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .push(counters as *const _ as usize);
    let mut stream = ArrowDeviceArrayStream::empty();
    // SAFETY: `config` is read during the call only; `counters` lives
    // forever; `stream` is a writable released struct the producer fills.
    let code = unsafe { interop_make_stream(&config, counters.get(), &mut stream) };
    assert_eq!(code, 0, "interop_make_stream failed");
    (stream, ProducerCounters(counters))
}

//! Declarations of the async device stream code in `c/async_stream.c` (see
//! `c/async_stream.h`), with the `#[repr(C)]` twins of its structs:
//!
//! - [`CAsyncConsumer`]: a C `ArrowAsyncDeviceStreamHandler` to hand to
//!   `AsyncDeviceStreamProducer::run`; its [`AsyncConsumerReport`] tells
//!   what arrived and which protocol rules were broken;
//! - [`CAsyncProducer`]: a C producer on its own pthread feeding the handler
//!   of `AsyncDeviceStream::new`; its [`AsyncProducerCounters`] tell what the
//!   Rust consumer asked for and cleaned up.
//!
//! The C code is POSIX only, hence `#[cfg(unix)]` on this module.

use std::ffi::{c_char, c_int, CString};
use std::ptr::NonNull;

use arrow_device::abi::ArrowAsyncDeviceStreamHandler;
use arrow_device::stream::AsyncStreamHandler;
use arrow_device::DeviceType;

use crate::{RawStructExpect, StructExpect};

/// Per-array details kept by the C consumer (`INTEROP_ASYNC_BATCHES`).
pub const INTEROP_ASYNC_BATCHES: usize = 16;
/// Size of the report's text fields (`INTEROP_ASYNC_TEXT`).
pub const INTEROP_ASYNC_TEXT: usize = 512;
/// How long the blocking helpers wait before they call it a hang.
const HANG_MS: i64 = 10_000;

/// Opaque `struct interop_async_consumer`.
#[repr(C)]
pub struct RawConsumer {
    _private: [u8; 0],
}

/// Opaque `struct interop_async_producer`.
#[repr(C)]
pub struct RawProducer {
    _private: [u8; 0],
}

/// `struct interop_async_consumer_config`.
#[repr(C)]
#[derive(Debug)]
struct RawConsumerConfig {
    schema: RawStructExpect,
    initial_request: i64,
    extract_later: i32,
    cancel_after: i64,
    stall_after: i64,
    metadata_key: *const c_char,
}

/// `struct interop_async_consumer_report`: what the C consumer saw.
#[repr(C)]
#[derive(Clone)]
pub struct AsyncConsumerReport {
    /// 0, or the line of `async_stream.c` whose check failed first.
    pub status: i32,
    /// `ArrowAsyncProducer.device_type` as read in `on_schema`.
    pub producer_device_type: i32,
    /// `on_schema` calls.
    pub on_schema_calls: i32,
    /// `on_error` calls.
    pub on_error_calls: i32,
    /// `release` calls.
    pub release_calls: i32,
    /// `on_next_task(NULL)` calls.
    pub end_markers: i32,
    /// Callbacks entered while another one was running.
    pub violations: i32,
    /// Callbacks entered after `release`.
    pub calls_after_release: i32,
    /// Callbacks (other than `release`) entered with `handler->producer`
    /// NULL.
    pub producer_missing: i32,
    /// `on_error`'s code.
    pub error_code: i32,
    /// 1 when the schema's release set `release` to NULL.
    pub schema_release_nulled: i32,
    /// `cancel` calls made (2 per cancel: the second checks idempotence).
    pub cancel_calls: i32,
    /// Pairs in `additional_metadata`; -1 when it was NULL.
    pub metadata_pairs: i32,
    /// 1 when the configured metadata key was found.
    pub metadata_key_found: i32,
    /// `on_next_task` calls with a task.
    pub tasks: i64,
    /// The sum of the `n > 0` requested before cancel.
    pub credit_granted: i64,
    /// `request` calls made.
    pub request_calls: i64,
    /// Tasks that arrived with no credit left.
    pub credit_exceeded: i64,
    /// Tasks that arrived after `cancel`.
    pub tasks_after_cancel: i64,
    /// `extract_data` calls that returned 0.
    pub extracted: i64,
    /// `extract_data` calls that returned non-zero.
    pub extract_failures: i64,
    /// Stored tasks extracted after the handler's release.
    pub extracted_after_release: i64,
    /// Arrays read.
    pub batches: i64,
    /// Their rows.
    pub total_rows: i64,
    /// CPU streams: the sum of child 0's non-null values.
    pub sum: i64,
    /// Arrays whose `device_type` differed from the producer's.
    pub device_type_mismatches: i64,
    /// Arrays with a non-NULL `sync_event`.
    pub sync_events: i64,
    /// Arrays whose release callback set `release` to NULL.
    pub arrays_release_nulled: i64,
    device_ids: [i64; INTEROP_ASYNC_BATCHES],
    metadata_value: [c_char; INTEROP_ASYNC_TEXT],
    error_message: [c_char; INTEROP_ASYNC_TEXT],
}

impl AsyncConsumerReport {
    /// The value of the configured `additional_metadata` key ("" if absent).
    pub fn metadata_value(&self) -> String {
        crate::text(&self.metadata_value)
    }

    /// `on_error`'s message ("" for none).
    pub fn error_message(&self) -> String {
        crate::text(&self.error_message)
    }

    /// The `device_id` of the first (at most [`INTEROP_ASYNC_BATCHES`])
    /// arrays read.
    pub fn device_ids(&self) -> &[i64] {
        let n = usize::try_from(self.batches)
            .unwrap_or(0)
            .min(INTEROP_ASYNC_BATCHES);
        &self.device_ids[..n]
    }
}

impl std::fmt::Debug for AsyncConsumerReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AsyncConsumerReport")
            .field("status", &self.status)
            .field("violations", &self.violations)
            .field("calls_after_release", &self.calls_after_release)
            .field("producer_missing", &self.producer_missing)
            .field("on_schema_calls", &self.on_schema_calls)
            .field("tasks", &self.tasks)
            .field("end_markers", &self.end_markers)
            .field("on_error_calls", &self.on_error_calls)
            .field("error_code", &self.error_code)
            .field("error_message", &self.error_message())
            .field("release_calls", &self.release_calls)
            .field("credit_granted", &self.credit_granted)
            .field("credit_exceeded", &self.credit_exceeded)
            .field("extracted", &self.extracted)
            .field("batches", &self.batches)
            .field("sum", &self.sum)
            .finish_non_exhaustive()
    }
}

/// How a [`CAsyncConsumer`] behaves.
#[derive(Debug, Clone)]
pub struct ConsumerOptions {
    /// The schema's children as `(format, name)`; `on_schema` refuses any
    /// other with `EINVAL`.
    pub children: Vec<(String, String)>,
    /// The `n` requested from inside `on_schema` (passed on even if `<= 0`).
    pub initial_request: i64,
    /// Store the tasks and extract them in [`CAsyncConsumer::extract_stored`]
    /// instead of inside `on_next_task`.
    pub extract_later: bool,
    /// Cancel after this many tasks (0: from inside `on_schema`).
    pub cancel_after: Option<i64>,
    /// Stop requesting (without cancelling) after this many tasks.
    pub stall_after: Option<i64>,
    /// The `additional_metadata` key whose value the report keeps.
    pub metadata_key: Option<String>,
}

impl ConsumerOptions {
    /// Expects `children`, requests `initial_request` and then one per task,
    /// extracting each in `on_next_task`.
    pub fn new(children: &[(&str, &str)], initial_request: i64) -> Self {
        ConsumerOptions {
            children: children
                .iter()
                .map(|(f, n)| (f.to_string(), n.to_string()))
                .collect(),
            initial_request,
            extract_later: false,
            cancel_after: None,
            stall_after: None,
            metadata_key: Some("rows".into()),
        }
    }
}

/// `struct interop_async_producer_config`: how a [`CAsyncProducer`] behaves.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct AsyncProducerConfig {
    /// Batches before the end of the stream.
    pub n_batches: i64,
    /// Rows of every batch; batch `i` row `r` holds `a = i * rows + r`,
    /// `b = "x{a}"`.
    pub rows_per_batch: i64,
    /// `on_error(EIO, "c async producer failed at batch {fail_at}")`
    /// instead of this batch; -1: never.
    pub fail_at: i64,
    /// `ArrowAsyncProducer.device_type` (the arrays are CPU arrays).
    pub device_type: DeviceType,
    /// 1: batches only go out as [`CAsyncProducer::allow`] lets them.
    pub gated: i32,
    /// 1: after cancel, send while credit remains; 0: release at once.
    pub drain_after_cancel: i32,
}

impl AsyncProducerConfig {
    /// `n_batches` CPU batches of `rows_per_batch` rows, ungated.
    pub fn cpu(n_batches: i64, rows_per_batch: i64) -> Self {
        AsyncProducerConfig {
            n_batches,
            rows_per_batch,
            fail_at: -1,
            device_type: DeviceType::CPU,
            gated: 0,
            drain_after_cancel: 0,
        }
    }
}

/// `struct interop_async_producer_counters`: what the C producer did and
/// what was done to the structs it handed out.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AsyncProducerCounters {
    /// `request` calls.
    pub request_calls: i64,
    /// The sum of the valid `n`.
    pub credit_total: i64,
    /// The `n` of the first valid request.
    pub first_request: i64,
    /// Requests with `n <= 0`.
    pub invalid_requests: i64,
    /// Requests after `cancel`.
    pub requests_after_cancel: i64,
    /// `cancel` calls.
    pub cancel_calls: i64,
    /// `on_next_task` calls with a task.
    pub tasks_sent: i64,
    /// Those made after `cancel`.
    pub tasks_after_cancel: i64,
    /// `on_next_task(NULL)` calls.
    pub end_markers: i64,
    /// `on_error` calls.
    pub on_error_calls: i64,
    /// `extract_data` calls.
    pub extract_calls: i64,
    /// Those with a NULL `out`.
    pub extract_null: i64,
    /// Those with a non-NULL `out`.
    pub extract_moved: i64,
    /// Calls on a task extracted before.
    pub extract_repeated: i64,
    /// Release calls on root arrays.
    pub array_releases: i64,
    /// Release calls on their children.
    pub child_array_releases: i64,
    /// Release calls on the root schema.
    pub schema_releases: i64,
    /// The most tasks sent but not yet credited back.
    pub max_in_flight: i64,
    /// Array and schema allocations not yet freed.
    pub live_allocations: i64,
    /// What `on_schema` returned.
    pub on_schema_code: i32,
    /// The first non-zero `on_next_task` result.
    pub on_next_task_code: i32,
    /// `handler->release` calls made.
    pub handler_releases: i32,
    /// 1 once the thread freed its `ArrowAsyncProducer` and ended.
    pub finished: i32,
}

extern "C" {
    fn interop_async_consumer_new(config: *const RawConsumerConfig) -> *mut RawConsumer;
    fn interop_async_consumer_handler(
        consumer: *mut RawConsumer,
    ) -> *mut ArrowAsyncDeviceStreamHandler;
    fn interop_async_consumer_extract_stored(consumer: *mut RawConsumer) -> i64;
    fn interop_async_consumer_wait_tasks(
        consumer: *mut RawConsumer,
        n: i64,
        timeout_ms: i64,
    ) -> c_int;
    fn interop_async_consumer_report(consumer: *mut RawConsumer, out: *mut AsyncConsumerReport);
    fn interop_async_consumer_free(consumer: *mut RawConsumer) -> c_int;
    fn interop_async_consumer_report_size() -> usize;

    fn interop_async_producer_start(
        config: *const AsyncProducerConfig,
        handler: *mut ArrowAsyncDeviceStreamHandler,
    ) -> *mut RawProducer;
    fn interop_async_producer_allow(producer: *mut RawProducer, n: i64);
    fn interop_async_producer_wait_sent(
        producer: *mut RawProducer,
        n: i64,
        timeout_ms: i64,
    ) -> c_int;
    fn interop_async_producer_join(producer: *mut RawProducer, timeout_ms: i64) -> c_int;
    fn interop_async_producer_counters(producer: *mut RawProducer, out: *mut AsyncProducerCounters);
    fn interop_async_producer_free(producer: *mut RawProducer) -> c_int;
    fn interop_async_producer_counters_size() -> usize;
}

/// The C consumer of `c/async_stream.c` and the strings its configuration
/// points to.
pub struct CAsyncConsumer {
    raw: NonNull<RawConsumer>,
    _schema: StructExpect,
    _metadata_key: Option<CString>,
}

// SAFETY: the C consumer guards its state with a mutex; the configuration's
// strings are only read.
unsafe impl Send for CAsyncConsumer {}
// SAFETY: as above.
unsafe impl Sync for CAsyncConsumer {}

impl CAsyncConsumer {
    /// A new C consumer.
    pub fn new(options: &ConsumerOptions) -> Self {
        // SAFETY: a plain query of a size.
        let c_size = unsafe { interop_async_consumer_report_size() };
        assert_eq!(
            c_size,
            std::mem::size_of::<AsyncConsumerReport>(),
            "AsyncConsumerReport mirrors C"
        );
        let schema = StructExpect::new(&options.children);
        let key = options
            .metadata_key
            .as_deref()
            .map(|k| CString::new(k).expect("no NUL in test names"));
        let config = RawConsumerConfig {
            schema: schema.raw(),
            initial_request: options.initial_request,
            extract_later: i32::from(options.extract_later),
            cancel_after: options.cancel_after.unwrap_or(-1),
            stall_after: options.stall_after.unwrap_or(-1),
            metadata_key: key.as_ref().map_or(std::ptr::null(), |k| k.as_ptr()),
        };
        // SAFETY: `config` is copied; the strings and pointer arrays it
        // points to are kept in the returned value (their heap buffers do not
        // move), which outlives the C consumer.
        let raw = unsafe { interop_async_consumer_new(&config) };
        CAsyncConsumer {
            raw: NonNull::new(raw).expect("interop_async_consumer_new: out of memory"),
            _schema: schema,
            _metadata_key: key,
        }
    }

    /// The handler to hand to a producer; valid while `self` lives.
    pub fn handler(&self) -> *mut ArrowAsyncDeviceStreamHandler {
        // SAFETY: a live consumer.
        unsafe { interop_async_consumer_handler(self.raw.as_ptr()) }
    }

    /// Extracts, reads and releases the stored tasks; returns how many.
    pub fn extract_stored(&self) -> i64 {
        // SAFETY: a live consumer; the tasks are copies of a producer's
        // whose contents stay valid until extracted (spec).
        unsafe { interop_async_consumer_extract_stored(self.raw.as_ptr()) }
    }

    /// Blocks until `on_next_task` returned for `n` tasks; panics if that
    /// does not happen.
    pub fn wait_tasks(&self, n: i64) {
        // SAFETY: a live consumer.
        let rc = unsafe { interop_async_consumer_wait_tasks(self.raw.as_ptr(), n, HANG_MS) };
        assert_eq!(rc, 0, "{n} tasks did not arrive");
    }

    /// What the consumer saw; consistent once the producer released the
    /// handler (the callbacks write it without a lock).
    pub fn report(&self) -> AsyncConsumerReport {
        let mut report = std::mem::MaybeUninit::<AsyncConsumerReport>::uninit();
        // SAFETY: a live consumer; the C function copies a whole report.
        unsafe {
            interop_async_consumer_report(self.raw.as_ptr(), report.as_mut_ptr());
            report.assume_init()
        }
    }
}

impl Drop for CAsyncConsumer {
    fn drop(&mut self) {
        // SAFETY: a live consumer, freed once. EBUSY (the handler is still
        // with a producer, e.g. after a failed assertion) leaves it leaked
        // rather than freed under the producer's feet.
        let _ = unsafe { interop_async_consumer_free(self.raw.as_ptr()) };
    }
}

/// A C producer thread of `c/async_stream.c`.
pub struct CAsyncProducer {
    raw: NonNull<RawProducer>,
}

// SAFETY: every entry point of the C producer locks its mutex.
unsafe impl Send for CAsyncProducer {}
// SAFETY: as above.
unsafe impl Sync for CAsyncProducer {}

impl CAsyncProducer {
    /// Starts the C producer's thread on `handler`.
    pub fn start(config: AsyncProducerConfig, handler: AsyncStreamHandler) -> Self {
        // SAFETY: a plain query of a size.
        let c_size = unsafe { interop_async_producer_counters_size() };
        assert_eq!(
            c_size,
            std::mem::size_of::<AsyncProducerCounters>(),
            "AsyncProducerCounters mirrors C"
        );
        // SAFETY: `config` is copied; the handler comes from
        // `AsyncDeviceStream::new` and is valid until the producer releases it,
        // which the C producer does exactly once, last.
        let raw = unsafe { interop_async_producer_start(&config, handler.into_raw()) };
        CAsyncProducer {
            raw: NonNull::new(raw).expect("interop_async_producer_start failed"),
        }
    }

    /// Lets `n` more batches through a gated producer.
    pub fn allow(&self, n: i64) {
        // SAFETY: a live producer.
        unsafe { interop_async_producer_allow(self.raw.as_ptr(), n) }
    }

    /// Blocks until `n` tasks were delivered (their `on_next_task` returned);
    /// panics if that does not happen.
    pub fn wait_delivered(&self, n: i64) {
        // SAFETY: a live producer.
        let rc = unsafe { interop_async_producer_wait_sent(self.raw.as_ptr(), n, HANG_MS) };
        assert_eq!(rc, 0, "{n} tasks were not delivered: {:?}", self.counters());
    }

    /// Blocks until the producer's thread ended; panics if it hangs.
    pub fn join(&self) {
        // SAFETY: a live producer.
        let rc = unsafe { interop_async_producer_join(self.raw.as_ptr(), HANG_MS) };
        assert_eq!(rc, 0, "the C producer hangs: {:?}", self.counters());
    }

    /// The counters now.
    pub fn counters(&self) -> AsyncProducerCounters {
        let mut counters = AsyncProducerCounters::default();
        // SAFETY: a live producer; the C function copies the whole struct.
        unsafe { interop_async_producer_counters(self.raw.as_ptr(), &mut counters) };
        counters
    }
}

impl Drop for CAsyncProducer {
    fn drop(&mut self) {
        // SAFETY: a live producer, freed once. Freeing refuses (EBUSY) while
        // the thread runs or arrays it handed out live; it is then leaked,
        // as they still point to it (only after a failed assertion).
        unsafe {
            if interop_async_producer_join(self.raw.as_ptr(), 1000) == 0 {
                let _ = interop_async_producer_free(self.raw.as_ptr());
            }
        }
    }
}

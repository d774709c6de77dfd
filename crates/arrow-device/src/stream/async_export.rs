//! Async export: a Rust stream of batches pushed into a consumer's
//! `ArrowAsyncDeviceStreamHandler` (spec: "Async Device Stream Interface").
//!
//! [`AsyncDeviceStreamProducer`] wraps a [`Stream`] of record batches (zero
//! copy on the CPU, or copied onto a device) or of [`DeviceArray`]s, and
//! [`AsyncDeviceStreamProducer::run`] returns an [`AsyncProducerDriver`]: a
//! runtime-agnostic future that the caller spawns on any executor and that
//! drives the whole protocol:
//!
//! 1. it allocates the `ArrowAsyncProducer` (with `device_type`, `request`,
//!    `cancel` and `additional_metadata`), writes `handler->producer`, then
//!    calls `on_schema`;
//! 2. while the consumer's credit (the sum of its `request(n)` calls minus the
//!    tasks sent) is positive, it pulls one batch from the source and passes
//!    it to `on_next_task` as an `ArrowAsyncTask` whose `extract_data` moves
//!    the array out (or releases it, for a NULL `out`). The source is polled
//!    only while there is credit: the producer never runs ahead of the
//!    consumer, not even by one prefetched batch;
//! 3. it ends with `on_next_task(handler, NULL, NULL)` (end of stream) or
//!    `on_error` (a source error, or a `request(n)` with `n <= 0`), then calls
//!    `release` and frees the producer struct (spec: the producer "must clean
//!    it up *after* calling the release callback").
//!
//! `request` and `cancel` only update atomics and wake the driver: they never
//! call a handler callback themselves, so the consumer may call them from any
//! thread and from inside `on_schema` / `on_next_task`; all handler callbacks
//! are made by the driver, one at a time. After `cancel` the driver calls
//! `release` without `on_error` and later `request` calls do nothing.
//!
//! A non-zero return from `on_schema` or `on_next_task` ends the stream with
//! `release` alone (spec: "Error Handling"); the driver then resolves to an
//! [`Error::Consumer`] naming the callback and the consumer's code.
//!
//! Ownership of tasks: each task owns its array until `extract_data` is
//! called on it (once; a second call returns `EINVAL`). A consumer that never
//! calls `extract_data` leaks that array, as the spec puts the call on the
//! consumer. Tasks stay valid after the handler is released. A task the
//! consumer refuses (`on_next_task` returns non-zero) was not taken: the
//! driver releases it, and the consumer must not extract it.
//!
//! ```
//! use std::sync::Arc;
//! use arrow_array::{ArrayRef, Int32Array, RecordBatch};
//! use arrow_device::stream::{export_async_record_batches, AsyncDeviceStream};
//! use arrow_device::ValidationLevel;
//! use futures_util::StreamExt;
//!
//! # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let batch = RecordBatch::try_from_iter([("x", Arc::new(Int32Array::from(vec![1, 2, 3])) as ArrayRef)])?;
//! let source = futures_util::stream::iter(vec![Ok(batch.clone()), Ok(batch.clone())]);
//! let producer = export_async_record_batches(batch.schema(), source)?;
//!
//! // The consumer side: a handler for the producer, and a `Stream` of arrays.
//! let (mut stream, handler) = AsyncDeviceStream::new(4, ValidationLevel::Default);
//! // SAFETY: the handler comes from `AsyncDeviceStream::new`, a valid handler.
//! let driver = tokio::spawn(unsafe { producer.run(handler.into_raw()) });
//!
//! let mut rows = 0;
//! while let Some(array) = stream.next().await {
//!     let back = array?.to_record_batch()?;
//!     assert_eq!(back, batch);
//!     rows += back.num_rows();
//! }
//! assert_eq!(rows, 6);
//! driver.await??; // Ok: the stream ended normally.
//! # Ok(())
//! # }
//! ```
//!
//! [`Stream`]: futures_core::Stream

use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_void};
use std::fmt;
use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};

use arrow_array::RecordBatch;
use arrow_schema::{ArrowError, Field, SchemaRef};
use futures_core::Stream;
use futures_util::task::AtomicWaker;
use futures_util::StreamExt;

use crate::abi::{
    ArrowAsyncDeviceStreamHandler, ArrowAsyncProducer, ArrowAsyncTask, ArrowDeviceArray,
    DeviceType, FFI_ArrowSchema,
};
use crate::array::DeviceArray;
use crate::device::DeviceRef;
use crate::error::{Error, Result};
use crate::stream::export::error_cstring;
use crate::stream::{export_stream_array, export_stream_batch};

/// How many batches the driver sends in one `poll` before it yields to the
/// executor, so that an always-ready source with ample credit cannot starve
/// the other tasks of its thread.
const BATCHES_PER_POLL: usize = 32;

type Source = Pin<Box<dyn Stream<Item = Result<ArrowDeviceArray>> + Send>>;

/// A stream of batches ready to be pushed into a consumer's
/// `ArrowAsyncDeviceStreamHandler` (spec: "Async Device Stream Interface").
///
/// Build it from record batches or [`DeviceArray`]s, then hand it to the
/// consumer's handler with [`run`](Self::run) and spawn the returned
/// [`AsyncProducerDriver`] on any executor. The driver writes
/// `handler->producer`, calls `on_schema`, then sends one task per batch
/// through `on_next_task` while the consumer's credit (its `request(n)`
/// calls minus the tasks sent) is positive, pulling from the source only
/// then, and ends with the end marker or `on_error`, then `release`.
/// `request` and `cancel` only update atomics and wake the driver, so the
/// consumer may call them from any thread and from inside its callbacks.
///
/// Each task owns its array until the consumer calls `extract_data` on it
/// (once; a second call returns `EINVAL`); tasks stay valid after the
/// handler's release. A consumer that never extracts a task leaks its array,
/// as the spec puts that call on the consumer.
pub struct AsyncDeviceStreamProducer {
    schema: FFI_ArrowSchema,
    device_type: DeviceType,
    additional_metadata: Option<Vec<u8>>,
    source: Source,
}

impl fmt::Debug for AsyncDeviceStreamProducer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AsyncDeviceStreamProducer")
            .field("format", &self.schema.format())
            .field("device_type", &self.device_type)
            .finish_non_exhaustive()
    }
}

/// Exports a stream of record batches zero-copy on the CPU, to be pushed
/// into a consumer's handler ([`AsyncDeviceStreamProducer::run`]). Each batch
/// travels as a struct array; the schema (with its metadata) is sent once,
/// in `on_schema`.
///
/// A batch whose fields differ from `schema`'s, or an `Err` from `batches`,
/// ends the stream with `on_error`.
pub fn export_async_record_batches(
    schema: SchemaRef,
    batches: impl Stream<Item = std::result::Result<RecordBatch, ArrowError>> + Send + 'static,
) -> Result<AsyncDeviceStreamProducer> {
    export_async_batches(schema, batches, None)
}

/// As [`export_async_record_batches`], each batch copied onto `device`
/// (with a `sync_event` the consumer waits on); the stream's `device_type`
/// is the device's.
pub fn export_async_record_batches_to(
    schema: SchemaRef,
    batches: impl Stream<Item = std::result::Result<RecordBatch, ArrowError>> + Send + 'static,
    device: &DeviceRef,
) -> Result<AsyncDeviceStreamProducer> {
    export_async_batches(schema, batches, Some(device.clone()))
}

fn export_async_batches(
    schema: SchemaRef,
    batches: impl Stream<Item = std::result::Result<RecordBatch, ArrowError>> + Send + 'static,
    device: Option<DeviceRef>,
) -> Result<AsyncDeviceStreamProducer> {
    let c_schema = crate::schema::export_schema(&schema)?;
    let device_type = device.as_ref().map_or(DeviceType::CPU, |d| d.device_type());
    let mut index = 0usize;
    let source = batches.map(move |batch| {
        let this = index;
        index += 1;
        export_stream_batch(this, &batch?, &schema, device.as_ref())
    });
    Ok(AsyncDeviceStreamProducer {
        schema: c_schema,
        device_type,
        additional_metadata: None,
        source: Box::pin(source),
    })
}

/// Exports a stream of device arrays of type `field` (a record-batch stream
/// is a struct field), all on devices of `device_type`, each zero-copy with
/// [`DeviceArray::export`].
///
/// An array on another device type or of another data type ends the stream
/// with `on_error(EINVAL)` and a message naming the batch index, the
/// expected and the found value.
pub fn export_async_device_arrays(
    field: Field,
    device_type: DeviceType,
    arrays: impl Stream<Item = Result<DeviceArray>> + Send + 'static,
) -> Result<AsyncDeviceStreamProducer> {
    let schema = crate::schema::export_field(&field)?;
    let mut index = 0usize;
    let source = arrays.map(move |array| {
        let this = index;
        index += 1;
        export_stream_array(this, &array?, field.data_type(), device_type)
    });
    Ok(AsyncDeviceStreamProducer {
        schema,
        device_type,
        additional_metadata: None,
        source: Box::pin(source),
    })
}

impl AsyncDeviceStreamProducer {
    /// Sets `ArrowAsyncProducer.additional_metadata` (encoded like
    /// `ArrowSchema.metadata`), for example the number of rows when known.
    pub fn with_additional_metadata(mut self, metadata: HashMap<String, String>) -> Result<Self> {
        let encoded =
            crate::schema::encode_metadata(&metadata).map_err(|message| Error::Invalid {
                path: "additional_metadata".into(),
                message,
            })?;
        self.additional_metadata = Some(encoded);
        Ok(self)
    }

    /// The device type of the stream (`ArrowAsyncProducer.device_type`).
    pub fn device_type(&self) -> DeviceType {
        self.device_type
    }

    /// Hands the stream to the consumer's `handler` and returns the future
    /// that drives the protocol; spawn it on any executor. Nothing is called
    /// on `handler` until the future is first polled.
    ///
    /// The future resolves after `release` was called on the handler: `Ok`
    /// at the end of the stream or after the consumer's `cancel`, `Err` with
    /// the reason after `on_error` or when the consumer returned non-zero from
    /// `on_schema` / `on_next_task` ([`Error::Consumer`] with its code). A
    /// NULL `handler`, or one whose mandatory callbacks are NULL, resolves to
    /// an error (its `release`, when present, is still called).
    ///
    /// Dropping the future before it resolved ends the stream: `on_error`
    /// with `ECANCELED` (unless the consumer had cancelled), then `release`.
    ///
    /// # Safety
    /// `handler` is NULL or points to an `ArrowAsyncDeviceStreamHandler`
    /// that follows the spec and stays valid until its `release` is called;
    /// its callbacks may be called from any thread. The duty to call
    /// `release` passes to the returned future.
    pub unsafe fn run(self, handler: *mut ArrowAsyncDeviceStreamHandler) -> AsyncProducerDriver {
        let shared = Arc::new(Shared::default());
        let producer = Box::into_raw(Box::new(ArrowAsyncProducer {
            device_type: self.device_type,
            request: Some(producer_request),
            cancel: Some(producer_cancel),
            additional_metadata: self
                .additional_metadata
                .as_ref()
                .map_or(std::ptr::null(), |m| m.as_ptr().cast::<c_char>()),
            private_data: Arc::as_ptr(&shared).cast_mut().cast::<c_void>(),
        }));
        // Spec, "ArrowAsyncProducer Lifetime": populated before any call
        // other than release, including an on_error sent by a driver that is
        // dropped before its first poll.
        // SAFETY: `handler` is NULL or valid (contract of `run`).
        if let Some(h) = unsafe { handler.as_mut() } {
            h.producer = producer;
        }
        AsyncProducerDriver {
            handler,
            callbacks: None,
            producer,
            shared,
            schema: Some(self.schema),
            _additional_metadata: self.additional_metadata,
            source: Some(self.source),
            sent: 0,
            done: false,
        }
    }
}

/// What `request` and `cancel` share with the driver: atomics only, so that
/// the consumer may call them from any thread, also from inside a handler
/// callback, without ever blocking or re-entering the handler.
#[derive(Default)]
struct Shared {
    /// The sum of all valid `request(n)`, saturating at `u64::MAX`.
    requested: AtomicU64,
    cancelled: AtomicBool,
    /// The first `n <= 0` passed to `request`.
    invalid_request: OnceLock<i64>,
    /// The driver's waker, registered before it reads the atomics.
    waker: AtomicWaker,
}

impl Shared {
    fn request(&self, n: i64) {
        if self.cancelled.load(Ordering::Acquire) {
            return; // spec: after cancel, request is a NOP.
        }
        match u64::try_from(n) {
            Ok(n) if n > 0 => {
                // fetch_update's closure always returns Some: cannot fail.
                let _ = self
                    .requested
                    .fetch_update(Ordering::AcqRel, Ordering::Acquire, |r| {
                        Some(r.saturating_add(n))
                    });
            }
            _ => {
                let _ = self.invalid_request.set(n);
            }
        }
        self.waker.wake();
    }

    fn cancel(&self) {
        if !self.cancelled.swap(true, Ordering::AcqRel) {
            self.waker.wake();
        }
    }
}

/// The `ArrowAsyncProducer` is only valid until the handler's release, and
/// `private_data` points to the driver's `Shared`, which outlives it.
///
/// # Safety
/// `this` is NULL or a producer made by [`AsyncDeviceStreamProducer::run`]
/// that was not freed yet.
unsafe fn shared_of<'a>(this: *mut ArrowAsyncProducer) -> Option<&'a Shared> {
    if this.is_null() {
        return None;
    }
    // SAFETY: a live producer of ours (caller), whose private_data is
    // `Arc::as_ptr` of the driver's `Shared`, kept alive by the driver until
    // after the producer is freed.
    unsafe { (*this).private_data.cast::<Shared>().as_ref() }
}

unsafe extern "C" fn producer_request(this: *mut ArrowAsyncProducer, n: i64) {
    let _ = catch_unwind(|| {
        // SAFETY: the consumer calls this on our producer before release.
        if let Some(shared) = unsafe { shared_of(this) } {
            shared.request(n);
        }
    });
}

unsafe extern "C" fn producer_cancel(this: *mut ArrowAsyncProducer) {
    let _ = catch_unwind(|| {
        // SAFETY: as in `producer_request`.
        if let Some(shared) = unsafe { shared_of(this) } {
            shared.cancel();
        }
    });
}

/// `ArrowAsyncTask.extract_data`: the task's `private_data` is a
/// `Box<ArrowDeviceArray>`, taken (and the pointer cleared) on the first call.
unsafe extern "C" fn task_extract_data(
    task: *mut ArrowAsyncTask,
    out: *mut ArrowDeviceArray,
) -> c_int {
    catch_unwind(|| {
        if task.is_null() {
            return libc::EINVAL;
        }
        // SAFETY: a non-NULL task is a task of ours or a bitwise copy of one
        // (spec: "it must copy or move its contents").
        let private_data =
            unsafe { std::mem::replace(&mut (*task).private_data, std::ptr::null_mut()) };
        if private_data.is_null() {
            return libc::EINVAL; // extracted before: "only valid ... exactly once".
        }
        // SAFETY: made by `Box::into_raw` in `send_batch`, taken once (the
        // pointer was cleared above).
        let array = unsafe { Box::from_raw(private_data.cast::<ArrowDeviceArray>()) };
        if out.is_null() {
            drop(array); // the consumer does not want the data: release it.
        } else {
            // SAFETY: `out` is the consumer's struct to overwrite (spec:
            // ownership "is given to the pointer passed in").
            unsafe { out.write(*array) };
        }
        0
    })
    .unwrap_or(libc::EIO)
}

/// The handler's mandatory callbacks used after `on_schema`, checked once.
#[derive(Clone, Copy)]
struct Callbacks {
    on_next_task: unsafe extern "C" fn(
        *mut ArrowAsyncDeviceStreamHandler,
        *mut ArrowAsyncTask,
        *const c_char,
    ) -> c_int,
    on_error: unsafe extern "C" fn(
        *mut ArrowAsyncDeviceStreamHandler,
        c_int,
        *const c_char,
        *const c_char,
    ),
    release: unsafe extern "C" fn(*mut ArrowAsyncDeviceStreamHandler),
}

/// The future returned by [`AsyncDeviceStreamProducer::run`]; see there.
#[must_use = "the stream only flows while the driver is polled"]
pub struct AsyncProducerDriver {
    /// NULL once released (or when the caller passed NULL).
    handler: *mut ArrowAsyncDeviceStreamHandler,
    /// Set once the handler was checked and `on_schema` called.
    callbacks: Option<Callbacks>,
    /// From `Box::into_raw`; freed right after the handler's release.
    producer: *mut ArrowAsyncProducer,
    shared: Arc<Shared>,
    /// Until `on_schema`.
    schema: Option<FFI_ArrowSchema>,
    /// Pointed to by `producer.additional_metadata`. A Vec, not a boxed
    /// slice: the pointer is taken before the bytes move here, and moving a
    /// Box invalidates pointers into it (a read through one is UB under
    /// Stacked Borrows, which Miri reports); moving a Vec does not.
    _additional_metadata: Option<Vec<u8>>,
    source: Option<Source>,
    /// Tasks sent to `on_next_task`.
    sent: u64,
    done: bool,
}

// SAFETY: the raw pointers are owned (producer) or handed to us with the
// duty to release (handler); the spec lets handler callbacks be called from
// any thread as long as they are serialized, which `&mut self` ensures.
unsafe impl Send for AsyncProducerDriver {}

impl fmt::Debug for AsyncProducerDriver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AsyncProducerDriver")
            .field("handler", &self.handler)
            .field("sent", &self.sent)
            .field("done", &self.done)
            .finish_non_exhaustive()
    }
}

impl Future for AsyncProducerDriver {
    type Output = Result<()>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<()>> {
        let this = self.get_mut();
        if this.done {
            return Poll::Ready(Err(Error::NotSupported(
                "the async producer driver was polled after it completed".into(),
            )));
        }
        let result = match this.callbacks {
            None => this.start(),
            Some(_) => Ok(()),
        }
        .and_then(|()| this.pump(cx));
        match result {
            Ok(Poll::Pending) => Poll::Pending,
            Ok(Poll::Ready(())) => {
                this.done = true;
                Poll::Ready(Ok(()))
            }
            Err(e) => {
                this.done = true;
                Poll::Ready(Err(e))
            }
        }
    }
}

impl AsyncProducerDriver {
    /// Checks the handler, writes `handler->producer`, calls `on_schema`.
    fn start(&mut self) -> Result<()> {
        let handler = self.handler;
        if handler.is_null() {
            self.free_producer();
            return Err(Error::Invalid {
                path: "ArrowAsyncDeviceStreamHandler".into(),
                message: "handler pointer is NULL".into(),
            });
        }
        // SAFETY: non-NULL and valid until release (contract of `run`).
        let h = unsafe { &mut *handler };
        let (Some(on_schema), Some(on_next_task), Some(on_error), Some(release)) =
            (h.on_schema, h.on_next_task, h.on_error, h.release)
        else {
            let missing: Vec<&str> = [
                ("on_schema", h.on_schema.is_none()),
                ("on_next_task", h.on_next_task.is_none()),
                ("on_error", h.on_error.is_none()),
                ("release", h.release.is_none()),
            ]
            .into_iter()
            .filter_map(|(name, missing)| missing.then_some(name))
            .collect();
            self.release_handler(None);
            return Err(Error::Invalid {
                path: "ArrowAsyncDeviceStreamHandler".into(),
                message: format!("mandatory callbacks are NULL: {}", missing.join(", ")),
            });
        };
        self.callbacks = Some(Callbacks {
            on_next_task,
            on_error,
            release,
        });
        // Spec: "This object MUST be populated by the producer before calling
        // the on_schema callback."
        h.producer = self.producer;
        let mut schema = self.schema.take().unwrap_or_else(FFI_ArrowSchema::empty);
        // SAFETY: a valid handler and a valid schema struct the consumer may
        // move out (spec: "Result lifetimes").
        let code = unsafe { on_schema(handler, &mut schema) };
        // If the consumer did not move it out, we still own it: release it.
        drop(schema);
        if code != 0 {
            self.release_handler(None);
            return Err(refused("on_schema", code));
        }
        Ok(())
    }

    /// Sends batches while there is credit.
    fn pump(&mut self, cx: &mut Context<'_>) -> Result<Poll<()>> {
        for _ in 0..BATCHES_PER_POLL {
            // Register before reading the atomics: a request or cancel that
            // comes after the reads below then wakes this task.
            self.shared.waker.register(cx.waker());
            if self.shared.cancelled.load(Ordering::Acquire) {
                self.release_handler(None);
                return Ok(Poll::Ready(()));
            }
            if let Some(&n) = self.shared.invalid_request.get() {
                // Spec: "Producers should error (e.g. call on_error) if
                // receiving such a value for n."
                let error = Error::Invalid {
                    path: "ArrowAsyncProducer.request".into(),
                    message: format!("called with n = {n}, expected n > 0"),
                };
                self.release_handler(Some(&error));
                return Err(error);
            }
            if self.shared.requested.load(Ordering::Acquire) <= self.sent {
                return Ok(Poll::Pending); // no credit: do not even poll the source.
            }
            let Some(source) = self.source.as_mut() else {
                return Ok(Poll::Ready(()));
            };
            let polled = catch_unwind(AssertUnwindSafe(|| source.as_mut().poll_next(cx)))
                .unwrap_or_else(|payload| Poll::Ready(Some(Err(Error::from_panic(payload)))));
            match polled {
                // The source's waker and the credit waker are the same task.
                Poll::Pending => return Ok(Poll::Pending),
                Poll::Ready(None) => return self.send_end(),
                Poll::Ready(Some(Err(error))) => {
                    self.release_handler(Some(&error));
                    return Err(error);
                }
                Poll::Ready(Some(Ok(array))) => {
                    if self.shared.cancelled.load(Ordering::Acquire) {
                        drop(array);
                        self.release_handler(None);
                        return Ok(Poll::Ready(()));
                    }
                    self.send_batch(array)?;
                }
            }
        }
        cx.waker().wake_by_ref();
        Ok(Poll::Pending)
    }

    fn send_batch(&mut self, array: ArrowDeviceArray) -> Result<()> {
        let Some(callbacks) = self.callbacks else {
            return Err(Error::NotSupported("batch sent before on_schema".into()));
        };
        let index = self.sent;
        self.sent += 1;
        let mut task = ArrowAsyncTask {
            extract_data: Some(task_extract_data),
            private_data: Box::into_raw(Box::new(array)).cast::<c_void>(),
        };
        // SAFETY: a valid handler; the task lives for the call, and its
        // contents (a boxed array) stay valid wherever the consumer copies
        // them. A task the consumer accepted but never extracts is its leak:
        // after a call we cannot tell a copied task from an ignored one.
        let code = unsafe { (callbacks.on_next_task)(self.handler, &mut task, std::ptr::null()) };
        if code != 0 {
            // A refusal means the consumer did not take the task: it is
            // released here (unless the consumer extracted it during the
            // call, which cleared it). A consumer must not extract a task it
            // refused.
            // SAFETY: our own task, extracted at most once (the call clears
            // private_data); NULL `out` releases the array.
            unsafe { task_extract_data(&mut task, std::ptr::null_mut()) };
            self.release_handler(None);
            return Err(refused(&format!("on_next_task (batch {index})"), code));
        }
        Ok(())
    }

    fn send_end(&mut self) -> Result<Poll<()>> {
        let Some(callbacks) = self.callbacks else {
            return Ok(Poll::Ready(()));
        };
        // SAFETY: a valid handler; NULL marks the end of the stream.
        let code = unsafe {
            (callbacks.on_next_task)(self.handler, std::ptr::null_mut(), std::ptr::null())
        };
        self.release_handler(None);
        if code != 0 {
            return Err(refused("on_next_task (end of stream)", code));
        }
        Ok(Poll::Ready(()))
    }

    /// Calls `on_error` (when `error` is given), then `release`, then frees
    /// the producer; at most once.
    fn release_handler(&mut self, error: Option<&Error>) {
        self.source = None;
        let handler = std::mem::replace(&mut self.handler, std::ptr::null_mut());
        if !handler.is_null() {
            // SAFETY: a valid handler until released, which happens below.
            let (on_error, release) = match self.callbacks {
                Some(c) => (Some(c.on_error), Some(c.release)),
                None => unsafe { ((*handler).on_error, (*handler).release) },
            };
            if let (Some(error), Some(on_error)) = (error, on_error) {
                // The code travels as its own argument.
                let message = error_cstring(error);
                // SAFETY: a valid handler; the message lives for the call.
                unsafe { on_error(handler, error.errno(), message.as_ptr(), std::ptr::null()) };
            }
            if let Some(release) = release {
                // SAFETY: the last call on the handler.
                unsafe { release(handler) };
            }
        }
        self.free_producer();
    }

    fn free_producer(&mut self) {
        let producer = std::mem::replace(&mut self.producer, std::ptr::null_mut());
        if !producer.is_null() {
            // SAFETY: from `Box::into_raw` in `run`, freed once (the pointer
            // is cleared above), after the handler's release.
            drop(unsafe { Box::from_raw(producer) });
        }
    }
}

impl Drop for AsyncProducerDriver {
    fn drop(&mut self) {
        if self.handler.is_null() {
            self.free_producer();
            return;
        }
        // The executor dropped us mid-stream. The consumer did not cancel, so
        // say why the stream stops rather than end it as if it had.
        if self.shared.cancelled.load(Ordering::Acquire) {
            self.release_handler(None);
        } else {
            let error = Error::Producer {
                code: libc::ECANCELED,
                message: "the producer's driver was dropped before the end of the stream".into(),
            };
            self.release_handler(Some(&error));
        }
    }
}

/// The consumer returned `code` from `callback`.
fn refused(callback: &str, code: c_int) -> Error {
    Error::Consumer {
        code,
        message: format!("the consumer's {callback} returned {code}: stream ended"),
    }
}

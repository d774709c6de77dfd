//! Async import: an `ArrowAsyncDeviceStreamHandler` for a foreign producer,
//! whose batches come out as a [`Stream`] of [`DeviceArray`]s (spec: "Async
//! Device Stream Interface").
//!
//! [`AsyncDeviceStream::new`] returns the two halves: an [`AsyncStreamHandler`]
//! to hand to the producer ([`AsyncStreamHandler::into_raw`]) and an
//! [`AsyncDeviceStream`] to poll on any executor.
//!
//! * `on_schema` imports the schema (moving the struct out and releasing
//!   it), reads `handler->producer` (its `device_type` and decoded
//!   `additional_metadata`) and grants `request(queue_size)` credit.
//! * `on_next_task` copies the task into a queue (the task pointer is only
//!   valid during the call) and wakes the stream; a NULL task is the end.
//! * Polling the stream pops the oldest task and calls `extract_data` on the
//!   consumer's thread (the point of tasks, spec: "The ArrowAsyncTask
//!   structure"), imports the array against the stream's schema and only then
//!   returns one unit of credit with `request(1)`. So queued tasks plus
//!   outstanding credit never exceed `queue_size`: a slow consumer holds the
//!   producer back.
//! * `on_error` is yielded after the tasks queued before it, as
//!   [`Error::Producer`]; the stream then ends. A `release` without an end
//!   marker or an error is reported as an error too, and so is a call we
//!   refused (a task beyond the credit, a second schema, an end marker
//!   before the schema), even when the end marker follows: a stream that
//!   lost a batch never ends as if it were complete.
//! * Dropping the stream early calls `cancel` once and `extract_data(task,
//!   NULL)` for every task queued or still arriving, so the producer can
//!   clean up (each task is extracted exactly once).
//!
//! ```
//! use std::sync::Arc;
//! use arrow_array::{ArrayRef, RecordBatch, StringArray};
//! use arrow_device::stream::{export_async_record_batches, AsyncDeviceStream};
//! use arrow_device::{DeviceArray, DeviceType, ValidationLevel};
//! use arrow_schema::DataType;
//! use futures_util::StreamExt;
//!
//! # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let batch = RecordBatch::try_from_iter([("s", Arc::new(StringArray::from(vec!["a", "b"])) as ArrayRef)])?;
//! let schema = batch.schema();
//! let source = futures_util::stream::iter((0..3).map(move |_| Ok(batch.clone())));
//! let producer = export_async_record_batches(schema.clone(), source)?
//!     .with_additional_metadata([("rows".to_string(), "6".to_string())].into())?;
//!
//! // At most 2 batches are queued or requested at any time.
//! let (mut stream, handler) = AsyncDeviceStream::new(2, ValidationLevel::Default);
//! // SAFETY: the handler comes from `AsyncDeviceStream::new`, a valid handler.
//! tokio::spawn(unsafe { producer.run(handler.into_raw()) });
//!
//! let field = stream.wait_schema().await?;
//! assert_eq!(field.data_type(), &DataType::Struct(schema.fields().clone()));
//! assert_eq!(stream.device_type(), Some(DeviceType::CPU));
//! assert_eq!(stream.additional_metadata().unwrap()["rows"], "6");
//! let arrays: Vec<DeviceArray> = stream.map(|a| a.unwrap()).collect().await;
//! assert_eq!(arrays.len(), 3);
//! assert_eq!(arrays[2].to_record_batch()?.column(0).len(), 2);
//! # Ok(())
//! # }
//! ```
//!
//! [`Stream`]: futures_core::Stream

use std::cell::UnsafeCell;
use std::collections::{HashMap, VecDeque};
use std::ffi::{c_char, c_int, CStr};
use std::fmt;
use std::future::Future;
use std::panic::catch_unwind;
use std::pin::Pin;
use std::ptr::NonNull;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};
use std::thread::{self, ThreadId};

use arrow_schema::FieldRef;
use futures_core::{FusedStream, Stream};
use futures_util::task::AtomicWaker;

use crate::abi::{
    ArrowAsyncDeviceStreamHandler, ArrowAsyncProducer, ArrowAsyncTask, ArrowDeviceArray,
    DeviceType, FFI_ArrowSchema,
};
use crate::array::DeviceArray;
use crate::error::{Error, Result};
use crate::stream::{stream_error, wrong_device_type};
use crate::validate::ValidationLevel;

impl AsyncDeviceStream {
    /// Creates the stream a foreign producer's batches come out of, and
    /// the handler to give that producer.
    ///
    /// `queue_size` is the credit granted in `on_schema`: at most that many
    /// tasks are queued or requested at any time (0 is treated as 1). Each
    /// array is validated at `level` when it is polled.
    pub fn new(
        queue_size: usize,
        level: ValidationLevel,
    ) -> (AsyncDeviceStream, AsyncStreamHandler) {
        let inner = Arc::new(Inner {
            handler: UnsafeCell::new(ArrowAsyncDeviceStreamHandler {
                on_schema: Some(handler_on_schema),
                on_next_task: Some(handler_on_next_task),
                on_error: Some(handler_on_error),
                release: Some(handler_release),
                producer: std::ptr::null_mut(),
                private_data: std::ptr::null_mut(),
            }),
            queue_size: queue_size.max(1),
            level,
            state: Mutex::new(State::default()),
            link: ProducerLink::default(),
            waker: AtomicWaker::new(),
        });
        let handler = inner.handler.get();
        // The C struct holds one reference, given back by its release callback.
        let reference = Arc::into_raw(inner.clone());
        // SAFETY: nobody else has the struct yet.
        unsafe { (*handler).private_data = reference.cast_mut().cast() };
        (
            AsyncDeviceStream {
                inner,
                done: false,
                received: 0,
            },
            AsyncStreamHandler {
                // SAFETY: `UnsafeCell::get` of a live allocation is never NULL.
                handler: unsafe { NonNull::new_unchecked(handler) },
            },
        )
    }
}

/// The `ArrowAsyncDeviceStreamHandler` half of [`AsyncDeviceStream::new`], to be
/// handed to a producer with [`AsyncStreamHandler::into_raw`].
///
/// Dropped without being handed over, it releases the handler and the stream
/// ends with an error saying so.
pub struct AsyncStreamHandler {
    handler: NonNull<ArrowAsyncDeviceStreamHandler>,
}

// SAFETY: the struct is only reachable through this handle until handed
// over, and its callbacks are thread-safe.
unsafe impl Send for AsyncStreamHandler {}

impl fmt::Debug for AsyncStreamHandler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("AsyncStreamHandler")
            .field(&self.handler)
            .finish()
    }
}

impl AsyncStreamHandler {
    /// Hands the handler over: the producer now owns the duty to call its
    /// `release` (exactly once, last). The struct stays valid until then,
    /// even if the [`AsyncDeviceStream`] is dropped first.
    pub fn into_raw(self) -> *mut ArrowAsyncDeviceStreamHandler {
        let handler = self.handler.as_ptr();
        std::mem::forget(self);
        handler
    }
}

impl Drop for AsyncStreamHandler {
    fn drop(&mut self) {
        let handler = self.handler.as_ptr();
        // SAFETY: not handed over, so ours alone and not released.
        if let Some(inner) = unsafe { inner_of(handler) } {
            inner.fail(Error::NotSupported(
                "the AsyncStreamHandler was dropped without being handed to a producer".into(),
            ));
        }
        // SAFETY: our own release callback on our own struct, called once.
        unsafe { handler_release(handler) };
    }
}

/// The stream half of [`AsyncDeviceStream::new`]: the producer's batches as
/// [`DeviceArray`]s, in order.
///
/// Each task is extracted on the thread that polls (the point of tasks in
/// the spec) and imported against the schema from `on_schema`; only then is
/// its unit of credit given back with `request(1)`, so at most `queue_size`
/// batches are queued or requested at any time. Dropping the stream before
/// the end calls the producer's `cancel` once and `extract_data(task, NULL)`
/// for every task queued or still arriving.
///
/// The stream waits for the schema on its first poll; [`wait_schema`]
/// waits for it explicitly, after which [`field`], [`device_type`] and
/// [`additional_metadata`] are known. It ends with `None` after the
/// producer's end marker, or after yielding one error (the producer's
/// `on_error`, an array that fails import, a release before the end, a
/// schema or task the handler refused, even before an end marker); then
/// it returns `None` forever.
///
/// [`wait_schema`]: AsyncDeviceStream::wait_schema
/// [`field`]: AsyncDeviceStream::field
/// [`device_type`]: AsyncDeviceStream::device_type
/// [`additional_metadata`]: AsyncDeviceStream::additional_metadata
pub struct AsyncDeviceStream {
    inner: Arc<Inner>,
    done: bool,
    /// Tasks popped so far, for messages.
    received: u64,
}

impl fmt::Debug for AsyncDeviceStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AsyncDeviceStream")
            .field("field", &self.field())
            .field("device_type", &self.device_type())
            .field("received", &self.received)
            .field("done", &self.done)
            .finish()
    }
}

impl AsyncDeviceStream {
    /// The stream's field (a struct field for record batches), once
    /// `on_schema` arrived.
    pub fn field(&self) -> Option<FieldRef> {
        self.inner.lock().schema.as_ref().map(|s| s.field.clone())
    }

    /// The producer's `device_type`, once `on_schema` arrived.
    pub fn device_type(&self) -> Option<DeviceType> {
        self.inner.lock().schema.as_ref().map(|s| s.device_type)
    }

    /// The producer's `additional_metadata`, decoded (empty when NULL), once
    /// `on_schema` arrived.
    pub fn additional_metadata(&self) -> Option<HashMap<String, String>> {
        self.inner
            .lock()
            .schema
            .as_ref()
            .map(|s| s.additional_metadata.clone())
    }

    /// The metadata the producer passed to `on_error`, decoded, if it
    /// reported an error (empty when it passed NULL or undecodable bytes).
    pub fn error_metadata(&self) -> Option<HashMap<String, String>> {
        self.inner.lock().error_metadata.clone()
    }

    /// Waits for `on_schema` and returns the stream's field. If the schema
    /// never comes (an error, a release), returns the error the stream would
    /// have yielded, and the stream ends.
    pub fn wait_schema(&mut self) -> impl Future<Output = Result<FieldRef>> + '_ {
        std::future::poll_fn(move |cx| {
            if self.done {
                return Poll::Ready(Err(Error::NotSupported(
                    "the stream ended before the schema arrived".into(),
                )));
            }
            self.inner.waker.register(cx.waker());
            let mut state = self.inner.lock();
            if let Some(schema) = &state.schema {
                return Poll::Ready(Ok(schema.field.clone()));
            }
            match state.terminal_error() {
                Some(error) => {
                    drop(state);
                    self.finish();
                    Poll::Ready(Err(error))
                }
                None => Poll::Pending,
            }
        })
    }

    /// Ends the stream from the consumer's side: the producer is cancelled.
    fn finish(&mut self) {
        self.done = true;
        self.inner.link.cancel();
    }

    /// Extracts and imports one task (on the consumer's thread), then gives
    /// back its unit of credit unless the producer is done sending.
    fn receive(
        &mut self,
        mut task: QueuedTask,
        schema: &SchemaInfo,
        give_credit: bool,
    ) -> Result<DeviceArray> {
        let index = self.received;
        self.received += 1;
        let mut out = ArrowDeviceArray::empty();
        let Some(extract_data) = task.0.extract_data else {
            return Err(stream_error(format!(
                "batch {index}: the task's extract_data is NULL"
            )));
        };
        // SAFETY: a copy of the producer's task, extracted exactly once
        // (popped from the queue); `out` is ours to fill.
        let code = unsafe { extract_data(&mut task.0, &mut out) };
        if code != 0 {
            return Err(Error::Producer {
                code,
                message: format!("extract_data failed for batch {index} with code {code}"),
            });
        }
        if out.device_type != schema.device_type {
            return Err(wrong_device_type(
                index,
                out.device_type,
                schema.device_type,
            ));
        }
        // SAFETY: the producer's array, under the spec's contract, of the
        // type `on_schema` announced.
        let array = unsafe {
            DeviceArray::try_new_with_field(out, schema.field.as_ref().clone(), self.inner.level)
        }?;
        // The credit comes back once the array left the queue; never while
        // holding the state lock, as a (non-conforming) producer may call
        // on_next_task from inside request.
        if give_credit {
            self.inner.link.request(1);
        }
        Ok(array)
    }
}

impl Stream for AsyncDeviceStream {
    type Item = Result<DeviceArray>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        if this.done {
            return Poll::Ready(None);
        }
        // Register before looking at the state: a callback that changes it
        // afterwards wakes this task.
        this.inner.waker.register(cx.waker());
        let mut state = this.inner.lock();
        let Some(schema) = state.schema.clone() else {
            return match state.terminal_error() {
                Some(error) => {
                    drop(state);
                    this.finish();
                    Poll::Ready(Some(Err(error)))
                }
                None => Poll::Pending,
            };
        };
        if let Some(task) = state.queue.pop_front() {
            let give_credit = !state.ended && state.error.is_none() && !state.released;
            drop(state);
            let result = this.receive(task, &schema, give_credit);
            if result.is_err() {
                this.finish();
            }
            return Poll::Ready(Some(result));
        }
        // The error first: one recorded after the end marker (a task
        // refused for arriving late or beyond the credit) still means the
        // stream is incomplete, so it must not end as if it were complete.
        match state.terminal_error() {
            Some(error) => {
                drop(state);
                this.finish();
                Poll::Ready(Some(Err(error)))
            }
            None if state.ended => {
                drop(state);
                this.done = true;
                Poll::Ready(None)
            }
            None => Poll::Pending,
        }
    }
}

impl FusedStream for AsyncDeviceStream {
    fn is_terminated(&self) -> bool {
        self.done
    }
}

impl Drop for AsyncDeviceStream {
    fn drop(&mut self) {
        let queued = {
            let mut state = self.inner.lock();
            state.consumer_dropped = true;
            std::mem::take(&mut state.queue)
        };
        // From here on, on_next_task extracts arriving tasks itself.
        if !self.done {
            self.inner.link.cancel();
        }
        for mut task in queued {
            if let Some(extract_data) = task.0.extract_data {
                // SAFETY: a copied task not extracted yet; NULL asks the
                // producer to clean up (spec: "it must still call
                // extract_data").
                unsafe { extract_data(&mut task.0, std::ptr::null_mut()) };
            }
        }
    }
}

/// What both halves and the C struct share.
struct Inner {
    /// The C struct; its address is stable for the life of the `Arc`.
    handler: UnsafeCell<ArrowAsyncDeviceStreamHandler>,
    queue_size: usize,
    level: ValidationLevel,
    state: Mutex<State>,
    link: ProducerLink,
    /// The consumer's waker.
    waker: AtomicWaker,
}

// SAFETY: the C struct is written by the producer only through its pointer
// (serialized callbacks), and read by us only inside those callbacks; the
// rest is behind locks and atomics.
unsafe impl Send for Inner {}
// SAFETY: as above.
unsafe impl Sync for Inner {}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, State> {
        // The state is consistent between statements (no panics while it is
        // mid-update), so a poisoned lock is still good.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records the first error and wakes the consumer.
    fn fail(&self, error: Error) {
        let mut state = self.lock();
        state.error.get_or_insert(error);
        drop(state);
        self.waker.wake();
    }
}

#[derive(Default)]
struct State {
    schema: Option<Arc<SchemaInfo>>,
    queue: VecDeque<QueuedTask>,
    /// The end marker arrived.
    ended: bool,
    /// The first error: the producer's on_error, or a protocol violation.
    error: Option<Error>,
    error_metadata: Option<HashMap<String, String>>,
    released: bool,
    consumer_dropped: bool,
    /// Tasks received, for messages.
    tasks_received: u64,
}

impl State {
    /// The error to end the stream with once the queue is drained, if any.
    fn terminal_error(&mut self) -> Option<Error> {
        if let Some(error) = self.error.take() {
            return Some(error);
        }
        if self.released && !self.ended {
            self.ended = true;
            return Some(Error::NotSupported(
                "the producer released the handler before the end of the stream".into(),
            ));
        }
        None
    }
}

struct SchemaInfo {
    field: FieldRef,
    device_type: DeviceType,
    additional_metadata: HashMap<String, String>,
}

/// A bitwise copy of a producer's task (spec: the consumer "must copy or
/// move its contents to a new ArrowAsyncTask object").
struct QueuedTask(ArrowAsyncTask);

// SAFETY: the spec lets the consumer call extract_data from any thread
// ("better consumer-focused thread control").
unsafe impl Send for QueuedTask {}

/// Calls from the consumer into the producer (`request`, `cancel`), kept from
/// racing with the producer's `release`, after which the producer may free
/// itself: `release` waits for a call in flight on another thread, and
/// later calls find no producer. A `release` made on the calling thread from
/// inside `request`/`cancel` does not wait (it would wait for itself).
#[derive(Default)]
struct ProducerLink {
    slot: Mutex<Slot>,
    idle: Condvar,
}

struct Slot {
    /// NULL before on_schema and after release.
    producer: *mut ArrowAsyncProducer,
    /// The thread inside a producer call, if any.
    caller: Option<ThreadId>,
    cancelled: bool,
}

impl Default for Slot {
    fn default() -> Self {
        Slot {
            producer: std::ptr::null_mut(),
            caller: None,
            cancelled: false,
        }
    }
}

// SAFETY: the producer pointer is only dereferenced under the protocol of
// `ProducerLink::call` (the producer is valid until release, from any thread).
unsafe impl Send for Slot {}

impl ProducerLink {
    fn lock(&self) -> MutexGuard<'_, Slot> {
        self.slot.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn set(&self, producer: *mut ArrowAsyncProducer) {
        self.lock().producer = producer;
    }

    fn request(&self, n: i64) {
        self.call(false, |p| {
            // SAFETY: a live producer (see `call`); request is mandatory and
            // was checked non-NULL in on_schema.
            if let Some(request) = unsafe { (*p).request } {
                // SAFETY: as above.
                unsafe { request(p, n) };
            }
        });
    }

    fn cancel(&self) {
        self.call(true, |p| {
            // SAFETY: as in `request`.
            if let Some(cancel) = unsafe { (*p).cancel } {
                // SAFETY: as above.
                unsafe { cancel(p) };
            }
        });
    }

    /// Runs `f` on the producer unless it was released or cancelled (then
    /// `request` is a NOP and `cancel` was done), while `release` waits.
    fn call(&self, cancel: bool, f: impl FnOnce(*mut ArrowAsyncProducer)) {
        let me = thread::current().id();
        let mut slot = self.lock();
        let nested = slot.caller == Some(me);
        while slot.caller.is_some() && !nested {
            slot = self.idle.wait(slot).unwrap_or_else(PoisonError::into_inner);
        }
        if slot.producer.is_null() || slot.cancelled {
            return;
        }
        slot.cancelled |= cancel;
        let producer = slot.producer;
        slot.caller = Some(me);
        drop(slot);
        f(producer);
        if !nested {
            self.lock().caller = None;
            self.idle.notify_all();
        }
    }

    /// The producer is releasing the handler: forget it once no call is in
    /// flight on another thread.
    fn clear(&self) {
        let me = thread::current().id();
        let mut slot = self.lock();
        while slot.caller.is_some_and(|caller| caller != me) {
            slot = self.idle.wait(slot).unwrap_or_else(PoisonError::into_inner);
        }
        slot.producer = std::ptr::null_mut();
    }
}

/// A strong reference to the `Inner` of a handler passed to a callback, held
/// for the call: a producer that releases the handler from inside our own
/// `request` (nested in this callback) must not free what we still use.
///
/// # Safety
/// `handler` is NULL or one of our handlers, not yet released.
unsafe fn inner_of(handler: *mut ArrowAsyncDeviceStreamHandler) -> Option<Arc<Inner>> {
    if handler.is_null() {
        return None;
    }
    // SAFETY: our handler (caller).
    let reference = unsafe { (*handler).private_data }
        .cast::<Inner>()
        .cast_const();
    if reference.is_null() {
        return None;
    }
    // SAFETY: private_data is the C struct's `Arc<Inner>` reference, alive
    // until release (caller); we add one of our own.
    unsafe {
        Arc::increment_strong_count(reference);
        Some(Arc::from_raw(reference))
    }
}

unsafe extern "C" fn handler_on_schema(
    handler: *mut ArrowAsyncDeviceStreamHandler,
    schema: *mut FFI_ArrowSchema,
) -> c_int {
    catch_unwind(|| {
        // SAFETY: the producer calls us on our live handler.
        let Some(inner) = (unsafe { inner_of(handler) }) else {
            return libc::EINVAL;
        };
        // SAFETY: as above; the producer populated `producer` before the call
        // (spec), and no one writes the struct during a callback.
        let producer = unsafe { (*handler).producer };
        // SAFETY: a non-NULL schema is the producer's to move out; dropping
        // the moved struct releases it (spec: "Result lifetimes").
        let schema = (!schema.is_null()).then(|| unsafe { FFI_ArrowSchema::from_raw(schema) });
        // SAFETY: a non-NULL producer is valid until release.
        match unsafe { on_schema(&inner, schema, producer) } {
            Ok(()) => 0,
            Err(error) => {
                let code = error.errno();
                inner.fail(error);
                code
            }
        }
    })
    .unwrap_or(libc::EIO)
}

/// # Safety
/// `producer` is NULL or a live producer.
unsafe fn on_schema(
    inner: &Inner,
    schema: Option<FFI_ArrowSchema>,
    producer: *mut ArrowAsyncProducer,
) -> Result<()> {
    let invalid = |message: &str| Error::Invalid {
        path: "on_schema".into(),
        message: message.into(),
    };
    let schema = schema.ok_or_else(|| invalid("the schema pointer is NULL"))?;
    if producer.is_null() {
        return Err(invalid(
            "handler->producer is NULL (spec: it MUST be populated before on_schema)",
        ));
    }
    // SAFETY: live producer (caller).
    let p = unsafe { &*producer };
    if p.request.is_none() || p.cancel.is_none() {
        return Err(invalid("the producer's request or cancel callback is NULL"));
    }
    let field = Arc::new(crate::schema::import_field(&schema)?);
    drop(schema);
    // SAFETY: NULL or metadata valid for the producer's lifetime (spec).
    let additional_metadata = unsafe { crate::schema::decode_metadata(p.additional_metadata) }
        .map_err(|message| Error::Invalid {
            path: "ArrowAsyncProducer.additional_metadata".into(),
            message,
        })?;
    {
        let mut state = inner.lock();
        if state.schema.is_some() {
            return Err(invalid("on_schema called a second time"));
        }
        if state.consumer_dropped {
            // Nobody wants the stream: refusing makes the producer release.
            return Err(Error::Producer {
                code: libc::ECANCELED,
                message: "the stream was dropped before the schema arrived".into(),
            });
        }
        state.schema = Some(Arc::new(SchemaInfo {
            field,
            device_type: p.device_type,
            additional_metadata,
        }));
        // Under the state lock, so that a stream dropped from now on finds
        // the producer to cancel (lock order: state, then link).
        inner.link.set(producer);
    }
    inner.waker.wake();
    // Spec: request "MUST be valid to call synchronously from within
    // on_schema"; this is the initial credit.
    inner
        .link
        .request(i64::try_from(inner.queue_size).unwrap_or(i64::MAX));
    Ok(())
}

unsafe extern "C" fn handler_on_next_task(
    handler: *mut ArrowAsyncDeviceStreamHandler,
    task: *mut ArrowAsyncTask,
    _metadata: *const c_char,
) -> c_int {
    catch_unwind(|| {
        // SAFETY: the producer calls us on our live handler.
        let Some(inner) = (unsafe { inner_of(handler) }) else {
            return libc::EINVAL;
        };
        let mut state = inner.lock();
        if task.is_null() {
            state.ended = true;
            // An end before the schema leaves the stream nothing to wait
            // for: without an error it would stay pending forever.
            let early = state.schema.is_none() && !state.consumer_dropped;
            if early {
                state.error.get_or_insert(Error::Invalid {
                    path: "on_next_task".into(),
                    message: "the end marker arrived before on_schema".into(),
                });
            }
            drop(state);
            inner.waker.wake();
            return if early { libc::EINVAL } else { 0 };
        }
        // SAFETY: the task is valid for this call; we copy its contents.
        let mut copy = QueuedTask(unsafe {
            ArrowAsyncTask {
                extract_data: (*task).extract_data,
                private_data: (*task).private_data,
            }
        });
        let index = state.tasks_received;
        state.tasks_received += 1;
        let refusal = if state.consumer_dropped {
            None // accepted, and cleaned up below.
        } else if state.schema.is_none() || state.ended {
            Some(format!(
                "task {index} arrived {}",
                if state.ended {
                    "after the end marker"
                } else {
                    "before on_schema"
                }
            ))
        } else if state.queue.len() >= inner.queue_size {
            Some(format!(
                "task {index} exceeds the credit granted (queue_size {})",
                inner.queue_size
            ))
        } else {
            state.queue.push_back(copy);
            drop(state);
            inner.waker.wake();
            return 0;
        };
        let dropped = state.consumer_dropped;
        drop(state);
        if let Some(extract_data) = copy.0.extract_data {
            // SAFETY: the task is valid during this call and not extracted
            // yet; NULL lets the producer clean up.
            unsafe { extract_data(&mut copy.0, std::ptr::null_mut()) };
        }
        if dropped {
            return 0;
        }
        let message = refusal.unwrap_or_default();
        inner.fail(Error::Invalid {
            path: "on_next_task".into(),
            message,
        });
        libc::EINVAL
    })
    .unwrap_or(libc::EIO)
}

unsafe extern "C" fn handler_on_error(
    handler: *mut ArrowAsyncDeviceStreamHandler,
    code: c_int,
    message: *const c_char,
    metadata: *const c_char,
) {
    let _ = catch_unwind(|| {
        // SAFETY: the producer calls us on our live handler.
        let Some(inner) = (unsafe { inner_of(handler) }) else {
            return;
        };
        let message = if message.is_null() {
            String::new()
        } else {
            // SAFETY: a NUL-terminated string valid during this call (spec).
            unsafe { CStr::from_ptr(message) }
                .to_string_lossy()
                .into_owned()
        };
        // SAFETY: NULL or metadata in the spec's encoding, valid during the call.
        let metadata = unsafe { crate::schema::decode_metadata(metadata) }.unwrap_or_default();
        let mut state = inner.lock();
        state.error_metadata = Some(metadata);
        drop(state);
        inner.fail(Error::Producer { code, message });
    });
}

unsafe extern "C" fn handler_release(handler: *mut ArrowAsyncDeviceStreamHandler) {
    let _ = catch_unwind(|| {
        if handler.is_null() {
            return;
        }
        // SAFETY: our live handler, released once (release is cleared below).
        let reference = unsafe { (*handler).private_data }
            .cast::<Inner>()
            .cast_const();
        // SAFETY: as above.
        if reference.is_null() || unsafe { (*handler).release.is_none() } {
            return;
        }
        // SAFETY: the C struct's reference, taken back once.
        let inner = unsafe { Arc::from_raw(reference) };
        // The producer may free itself once we return: forget it first.
        inner.link.clear();
        inner.lock().released = true;
        inner.waker.wake();
        // SAFETY: still alive (`inner` holds it); mark released, C style,
        // before our reference, and maybe the struct, goes.
        unsafe {
            (*handler).release = None;
            (*handler).private_data = std::ptr::null_mut();
        }
        drop(inner);
    });
}

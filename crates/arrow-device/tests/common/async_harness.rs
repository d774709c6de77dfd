//! Hand-written peers for the async device stream tests, written as a C
//! peer would write them (raw `extern "C"` callbacks over the ABI structs):
//!
//! * [`TestConsumer`]: an `ArrowAsyncDeviceStreamHandler` that records every
//!   callback, checks that callbacks never nest or exceed the credit it
//!   granted, and lets the test call `request` / `cancel`;
//! * [`ManualProducer`]: an `ArrowAsyncProducer` the test drives call by
//!   call, counting `request`, `cancel` and every `extract_data`.

use std::collections::VecDeque;
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arrow_array::RecordBatch;
use arrow_device::abi::{
    ArrowAsyncDeviceStreamHandler, ArrowAsyncProducer, ArrowAsyncTask, ArrowDeviceArray,
    DeviceType, FFI_ArrowSchema,
};
use arrow_device::export_record_batch;
use arrow_device::schema::{decode_metadata, encode_metadata, export_schema};

/// One callback the consumer received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// `on_schema` with the schema's format string.
    Schema(String),
    /// `on_next_task` with a task (its index).
    Task(usize),
    /// `on_next_task` with NULL.
    End,
    /// `on_error(code, message)`.
    Error(i32, String),
    /// `release`.
    Release,
}

/// How a [`TestConsumer`] behaves.
#[derive(Debug, Clone, Default)]
pub struct ConsumerConfig {
    /// `request(n)` from inside `on_schema`.
    pub initial_request: Option<i64>,
    /// `request(n)` from inside each `on_next_task` (none when 0).
    pub request_per_task: i64,
    /// What `on_schema` returns.
    pub on_schema_code: i32,
    /// The task index at which `on_next_task` returns `EPERM`.
    pub refuse_task: Option<usize>,
    /// Keep the tasks (copied) instead of extracting them in the callback.
    pub keep_tasks: bool,
    /// `cancel()` from inside `on_next_task` once this many tasks arrived.
    pub cancel_after: Option<usize>,
}

/// What a [`TestConsumer`] saw.
pub struct Recorder {
    config: ConsumerConfig,
    events: Mutex<Vec<Event>>,
    /// NULL before `on_schema` and after `release`; locked around calls into
    /// the producer so that they never race with its release.
    producer: Mutex<*mut ArrowAsyncProducer>,
    device_type: Mutex<Option<DeviceType>>,
    additional_metadata: Mutex<Option<std::collections::HashMap<String, String>>>,
    granted: AtomicI64,
    tasks: AtomicUsize,
    in_callback: AtomicBool,
    violations: Mutex<Vec<String>>,
    /// Arrays extracted in `on_next_task`.
    pub arrays: Mutex<Vec<ArrowDeviceArray>>,
    /// Tasks kept (with `keep_tasks`).
    pub kept_tasks: Mutex<Vec<ArrowAsyncTask>>,
    releases: AtomicUsize,
    notify: tokio::sync::Notify,
}

// SAFETY: the raw pointers are only used under the locks above.
unsafe impl Send for Recorder {}
// SAFETY: as above.
unsafe impl Sync for Recorder {}

impl Recorder {
    /// The callbacks so far.
    pub fn events(&self) -> Vec<Event> {
        self.events.lock().unwrap().clone()
    }

    /// Tasks received.
    pub fn tasks(&self) -> usize {
        self.tasks.load(Ordering::SeqCst)
    }

    /// Calls of `release`.
    pub fn releases(&self) -> usize {
        self.releases.load(Ordering::SeqCst)
    }

    /// Protocol violations seen (nesting, tasks beyond the credit, calls
    /// after release).
    pub fn violations(&self) -> Vec<String> {
        self.violations.lock().unwrap().clone()
    }

    /// The producer's device type and decoded additional metadata, read in
    /// `on_schema`.
    pub fn producer_info(
        &self,
    ) -> (
        Option<DeviceType>,
        Option<std::collections::HashMap<String, String>>,
    ) {
        (
            *self.device_type.lock().unwrap(),
            self.additional_metadata.lock().unwrap().clone(),
        )
    }

    /// `producer->request(n)` unless released; counted as credit when n > 0.
    pub fn request(&self, n: i64) {
        let producer = self.producer.lock().unwrap();
        if producer.is_null() {
            return;
        }
        if n > 0 {
            let _ = self
                .granted
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |g| {
                    Some(g.saturating_add(n))
                });
        }
        // SAFETY: non-NULL means not released yet, and the lock keeps the
        // release callback (after which the producer frees itself) waiting.
        unsafe { ((**producer).request.unwrap())(*producer, n) };
    }

    /// `producer->cancel()` unless released.
    pub fn cancel(&self) {
        let producer = self.producer.lock().unwrap();
        if !producer.is_null() {
            // SAFETY: as in `request`.
            unsafe { ((**producer).cancel.unwrap())(*producer) };
        }
    }

    fn push(&self, event: Event) {
        self.events.lock().unwrap().push(event);
        self.notify.notify_waiters();
    }

    fn violation(&self, what: String) {
        self.violations.lock().unwrap().push(what);
    }

    fn enter(&self, callback: &str) {
        if self.in_callback.swap(true, Ordering::SeqCst) {
            self.violation(format!("{callback} called while another callback ran"));
        }
        if self.releases() > 0 {
            self.violation(format!("{callback} called after release"));
        }
    }

    fn leave(&self) {
        self.in_callback.store(false, Ordering::SeqCst);
    }

    /// Waits (5 s at most, then panics) until `done` holds for the events.
    pub async fn wait_until(&self, what: &str, done: impl Fn(&[Event]) -> bool) {
        let wait = async {
            loop {
                let notified = self.notify.notified();
                if done(&self.events.lock().unwrap()) {
                    return;
                }
                notified.await;
            }
        };
        if tokio::time::timeout(Duration::from_secs(5), wait)
            .await
            .is_err()
        {
            panic!("timed out waiting for {what}; events: {:?}", self.events());
        }
    }
}

/// A consumer-side handler written against the raw ABI.
pub struct TestConsumer {
    handler: *mut ArrowAsyncDeviceStreamHandler,
    /// What it saw.
    pub recorder: Arc<Recorder>,
}

// SAFETY: the handler is only touched by the producer (serialized) and freed
// by `Drop` after release.
unsafe impl Send for TestConsumer {}

impl TestConsumer {
    /// A consumer behaving as `config` says.
    pub fn new(config: ConsumerConfig) -> Self {
        let recorder = Arc::new(Recorder {
            config,
            events: Mutex::default(),
            producer: Mutex::new(std::ptr::null_mut()),
            device_type: Mutex::default(),
            additional_metadata: Mutex::default(),
            granted: AtomicI64::new(0),
            tasks: AtomicUsize::new(0),
            in_callback: AtomicBool::new(false),
            violations: Mutex::default(),
            arrays: Mutex::default(),
            kept_tasks: Mutex::default(),
            releases: AtomicUsize::new(0),
            notify: tokio::sync::Notify::new(),
        });
        let handler = Box::into_raw(Box::new(ArrowAsyncDeviceStreamHandler {
            on_schema: Some(consumer_on_schema),
            on_next_task: Some(consumer_on_next_task),
            on_error: Some(consumer_on_error),
            release: Some(consumer_release),
            producer: std::ptr::null_mut(),
            private_data: Arc::as_ptr(&recorder).cast_mut().cast(),
        }));
        TestConsumer { handler, recorder }
    }

    /// The handler to give to a producer.
    pub fn handler(&self) -> *mut ArrowAsyncDeviceStreamHandler {
        self.handler
    }
}

impl Drop for TestConsumer {
    fn drop(&mut self) {
        // A handler the producer did not release may still be in use: leak
        // it rather than free it under the producer.
        if self.recorder.releases() == 1 {
            // SAFETY: from Box::into_raw, released, freed once.
            drop(unsafe { Box::from_raw(self.handler) });
        }
    }
}

/// # Safety
/// `handler` is a live `TestConsumer` handler.
unsafe fn recorder<'a>(handler: *mut ArrowAsyncDeviceStreamHandler) -> &'a Recorder {
    // SAFETY: private_data is the TestConsumer's Arc<Recorder>, alive while
    // the TestConsumer is.
    unsafe { &*(*handler).private_data.cast::<Recorder>() }
}

unsafe extern "C" fn consumer_on_schema(
    handler: *mut ArrowAsyncDeviceStreamHandler,
    schema: *mut FFI_ArrowSchema,
) -> c_int {
    // SAFETY: called by the producer on our handler.
    let rec = unsafe { recorder(handler) };
    rec.enter("on_schema");
    // SAFETY: the producer's schema, moved out (released when dropped).
    let schema = unsafe { FFI_ArrowSchema::from_raw(schema) };
    // SAFETY: the producer must populate it before on_schema.
    let producer = unsafe { (*handler).producer };
    if producer.is_null() {
        rec.violation("handler->producer is NULL in on_schema".into());
    } else {
        // SAFETY: a live producer.
        let p = unsafe { &*producer };
        *rec.device_type.lock().unwrap() = Some(p.device_type);
        // SAFETY: NULL or valid metadata for the producer's life.
        *rec.additional_metadata.lock().unwrap() =
            Some(unsafe { decode_metadata(p.additional_metadata) }.unwrap());
        *rec.producer.lock().unwrap() = producer;
    }
    rec.push(Event::Schema(schema.format().to_string()));
    drop(schema);
    let code = rec.config.on_schema_code;
    if let (0, Some(n)) = (code, rec.config.initial_request) {
        rec.request(n);
    }
    rec.leave();
    code
}

unsafe extern "C" fn consumer_on_next_task(
    handler: *mut ArrowAsyncDeviceStreamHandler,
    task: *mut ArrowAsyncTask,
    _metadata: *const c_char,
) -> c_int {
    // SAFETY: called by the producer on our handler.
    let rec = unsafe { recorder(handler) };
    rec.enter("on_next_task");
    if task.is_null() {
        rec.push(Event::End);
        rec.leave();
        return 0;
    }
    let index = rec.tasks.fetch_add(1, Ordering::SeqCst);
    let granted = rec.granted.load(Ordering::SeqCst);
    if index as i64 >= granted {
        rec.violation(format!("task {index} sent with only {granted} granted"));
    }
    if rec.config.refuse_task == Some(index) {
        rec.push(Event::Task(index));
        rec.leave();
        return libc::EPERM;
    }
    if rec.config.keep_tasks {
        // SAFETY: valid for this call; copied, as the spec allows.
        let copy = unsafe {
            ArrowAsyncTask {
                extract_data: (*task).extract_data,
                private_data: (*task).private_data,
            }
        };
        rec.kept_tasks.lock().unwrap().push(copy);
    } else {
        let mut out = ArrowDeviceArray::empty();
        // SAFETY: valid for this call, extracted once.
        let code = unsafe { ((*task).extract_data.unwrap())(task, &mut out) };
        assert_eq!(code, 0, "extract_data of task {index}");
        rec.arrays.lock().unwrap().push(out);
    }
    rec.push(Event::Task(index));
    if rec.config.request_per_task != 0 {
        rec.request(rec.config.request_per_task);
    }
    if rec.config.cancel_after == Some(index + 1) {
        rec.cancel();
    }
    rec.leave();
    0
}

unsafe extern "C" fn consumer_on_error(
    handler: *mut ArrowAsyncDeviceStreamHandler,
    code: c_int,
    message: *const c_char,
    _metadata: *const c_char,
) {
    // SAFETY: called by the producer on our handler.
    let rec = unsafe { recorder(handler) };
    rec.enter("on_error");
    // SAFETY: NUL-terminated, valid for the call.
    let message = unsafe { CStr::from_ptr(message) }
        .to_string_lossy()
        .into_owned();
    rec.push(Event::Error(code, message));
    rec.leave();
}

unsafe extern "C" fn consumer_release(handler: *mut ArrowAsyncDeviceStreamHandler) {
    // SAFETY: called by the producer on our handler.
    let rec = unsafe { recorder(handler) };
    rec.enter("release");
    *rec.producer.lock().unwrap() = std::ptr::null_mut();
    rec.releases.fetch_add(1, Ordering::SeqCst);
    rec.push(Event::Release);
    rec.leave();
}

/// What a [`ManualProducer`] was asked and did.
#[derive(Default)]
pub struct ProducerLog {
    /// Sum of all `request(n)`.
    pub requested: AtomicI64,
    /// Every `n` passed to `request`, in order.
    pub requests: Mutex<Vec<i64>>,
    /// Calls of `cancel`.
    pub cancels: AtomicUsize,
    /// Tasks passed to `on_next_task`.
    pub tasks_sent: AtomicUsize,
    /// Calls of `extract_data` (with or without an `out`).
    pub extract_calls: AtomicUsize,
    /// Calls of `extract_data` with `out` NULL.
    pub extract_null: AtomicUsize,
    /// With `eager`: batches sent from inside `request`, then end + release.
    eager: Mutex<Option<Eager>>,
}

struct Eager {
    handler: *mut ArrowAsyncDeviceStreamHandler,
    batches: VecDeque<RecordBatch>,
}

// SAFETY: the handler pointer is only used from inside `request`.
unsafe impl Send for Eager {}

/// A producer the test drives call by call, against the raw ABI.
pub struct ManualProducer {
    handler: *mut ArrowAsyncDeviceStreamHandler,
    producer: *mut ArrowAsyncProducer,
    /// What it was asked and did.
    pub log: Arc<ProducerLog>,
    _metadata: Option<Vec<u8>>,
    released: bool,
}

impl ManualProducer {
    /// A producer for `handler` on `device_type`, with optional
    /// `additional_metadata`.
    pub fn new(
        handler: *mut ArrowAsyncDeviceStreamHandler,
        device_type: DeviceType,
        additional_metadata: Option<&[(&str, &str)]>,
    ) -> Self {
        let log = Arc::new(ProducerLog::default());
        let metadata = additional_metadata.map(|pairs| {
            let map = pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            encode_metadata(&map).unwrap()
        });
        let producer = Box::into_raw(Box::new(ArrowAsyncProducer {
            device_type,
            request: Some(manual_request),
            cancel: Some(manual_cancel),
            additional_metadata: metadata
                .as_ref()
                .map_or(std::ptr::null(), |m| m.as_ptr().cast()),
            private_data: Arc::as_ptr(&log).cast_mut().cast(),
        }));
        ManualProducer {
            handler,
            producer,
            log,
            _metadata: metadata,
            released: false,
        }
    }

    /// Makes `request` send `batches` synchronously (violating the spec's
    /// "MUST NOT synchronously call on_next_task"), then the end marker and
    /// `release`, all from inside `request`.
    pub fn make_eager(&self, batches: Vec<RecordBatch>) {
        *self.log.eager.lock().unwrap() = Some(Eager {
            handler: self.handler,
            batches: batches.into(),
        });
    }

    /// Writes `handler->producer` (unless `populate` is false) and calls
    /// `on_schema` with `schema`; returns its code.
    pub fn send_schema(&self, schema: &arrow_schema::Schema, populate: bool) -> i32 {
        let mut c_schema = export_schema(schema).unwrap();
        // SAFETY: a live handler; the producer is set before on_schema.
        unsafe {
            if populate {
                (*self.handler).producer = self.producer;
            }
            ((*self.handler).on_schema.unwrap())(self.handler, &mut c_schema)
        }
    }

    /// Sends `batch` (exported on the CPU, but announced as `device_type`)
    /// as a task; returns `on_next_task`'s code.
    pub fn send_batch(&self, batch: &RecordBatch, device_type: DeviceType) -> i32 {
        let (mut array, _) = export_record_batch(batch).unwrap();
        array.device_type = device_type;
        self.send_array(array)
    }

    /// Sends `array` as a task; returns `on_next_task`'s code.
    pub fn send_array(&self, array: ArrowDeviceArray) -> i32 {
        // SAFETY: a live handler.
        unsafe { send_task(self.handler, &self.log, array) }
    }

    /// Sends the end marker; returns `on_next_task`'s code.
    pub fn send_end(&self) -> i32 {
        // SAFETY: a live handler; NULL is the end marker.
        unsafe {
            ((*self.handler).on_next_task.unwrap())(
                self.handler,
                std::ptr::null_mut(),
                std::ptr::null(),
            )
        }
    }

    /// Calls `on_error(code, message, metadata)`.
    pub fn send_error(&self, code: i32, message: &str, metadata: &[(&str, &str)]) {
        let message = CString::new(message).unwrap();
        let metadata = encode_metadata(
            &metadata
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        )
        .unwrap();
        // SAFETY: a live handler; both strings live for the call.
        unsafe {
            ((*self.handler).on_error.unwrap())(
                self.handler,
                code,
                message.as_ptr(),
                metadata.as_ptr().cast(),
            )
        };
    }

    /// Calls `release` (once).
    pub fn release(&mut self) {
        assert!(!self.released, "released twice");
        self.released = true;
        // SAFETY: a live handler, released once; nothing is called after.
        unsafe { ((*self.handler).release.unwrap())(self.handler) };
    }
}

impl Drop for ManualProducer {
    fn drop(&mut self) {
        // Freed after the handler's release (spec: "ArrowAsyncProducer
        // Lifetime"), which the tests do before dropping the producer.
        // SAFETY: from Box::into_raw, freed once.
        drop(unsafe { Box::from_raw(self.producer) });
    }
}

struct TaskData {
    array: ArrowDeviceArray,
    log: Arc<ProducerLog>,
}

/// # Safety
/// `handler` is live.
unsafe fn send_task(
    handler: *mut ArrowAsyncDeviceStreamHandler,
    log: &Arc<ProducerLog>,
    array: ArrowDeviceArray,
) -> i32 {
    log.tasks_sent.fetch_add(1, Ordering::SeqCst);
    let mut task = ArrowAsyncTask {
        extract_data: Some(manual_extract_data),
        private_data: Box::into_raw(Box::new(TaskData {
            array,
            log: log.clone(),
        }))
        .cast::<c_void>(),
    };
    // SAFETY: live handler (caller); the task lives for the call.
    unsafe { ((*handler).on_next_task.unwrap())(handler, &mut task, std::ptr::null()) }
}

unsafe extern "C" fn manual_extract_data(
    task: *mut ArrowAsyncTask,
    out: *mut ArrowDeviceArray,
) -> c_int {
    // SAFETY: a copy of one of our tasks.
    let data = unsafe { std::mem::replace(&mut (*task).private_data, std::ptr::null_mut()) };
    assert!(!data.is_null(), "extract_data called twice on one task");
    // SAFETY: from Box::into_raw in `send_task`, taken once.
    let data = unsafe { Box::from_raw(data.cast::<TaskData>()) };
    data.log.extract_calls.fetch_add(1, Ordering::SeqCst);
    if out.is_null() {
        data.log.extract_null.fetch_add(1, Ordering::SeqCst);
    } else {
        // SAFETY: the consumer's struct to fill.
        unsafe { out.write(data.array) };
    }
    0
}

/// # Safety
/// `producer` is a live `ManualProducer`'s.
unsafe fn log_of(producer: *mut ArrowAsyncProducer) -> Arc<ProducerLog> {
    // SAFETY: private_data is `Arc::as_ptr` of the log, which the
    // ManualProducer keeps alive; we take a reference of our own.
    unsafe {
        let log = (*producer).private_data.cast::<ProducerLog>().cast_const();
        Arc::increment_strong_count(log);
        Arc::from_raw(log)
    }
}

unsafe extern "C" fn manual_request(producer: *mut ArrowAsyncProducer, n: i64) {
    // SAFETY: the consumer calls us on our live producer.
    let log = unsafe { log_of(producer) };
    log.requested.fetch_add(n, Ordering::SeqCst);
    log.requests.lock().unwrap().push(n);
    let eager = log.eager.lock().unwrap().take();
    if let Some(mut eager) = eager {
        for _ in 0..n {
            match eager.batches.pop_front() {
                Some(batch) => {
                    let (array, _) = export_record_batch(&batch).unwrap();
                    // SAFETY: the handler is live until the release below.
                    unsafe { send_task(eager.handler, &log, array) };
                }
                None => break,
            }
        }
        if eager.batches.is_empty() {
            // SAFETY: live handler; end marker, then the last call.
            unsafe {
                let on_next_task = (*eager.handler).on_next_task.unwrap();
                on_next_task(eager.handler, std::ptr::null_mut(), std::ptr::null());
                ((*eager.handler).release.unwrap())(eager.handler);
            }
        } else {
            *log.eager.lock().unwrap() = Some(eager);
        }
    }
}

unsafe extern "C" fn manual_cancel(producer: *mut ArrowAsyncProducer) {
    // SAFETY: the consumer calls us on our live producer.
    let log = unsafe { log_of(producer) };
    log.cancels.fetch_add(1, Ordering::SeqCst);
}

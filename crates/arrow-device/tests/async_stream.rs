//! The async device stream interface, both directions: our producer into our
//! consumer (CPU and the emulated device), our producer into a raw C-style
//! consumer that checks the protocol, and a raw C-style producer into our
//! consumer.

mod common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use arrow_array::{ArrayRef, Int32Array, Int64Array, RecordBatch, StringArray};
use arrow_device::abi::{ArrowAsyncDeviceStreamHandler, ArrowDeviceArray, DeviceType};
use arrow_device::stream::{
    export_async_device_arrays, export_async_record_batches, export_async_record_batches_to,
    AsyncDeviceStream, AsyncDeviceStreamProducer, AsyncProducerDriver,
};
use arrow_device::{export_record_batch, DeviceArray, Error, ValidationLevel};
use arrow_schema::{ArrowError, DataType, Field, Schema, SchemaRef};
use futures_core::Stream;
use futures_util::stream::{self, StreamExt};

use common::async_harness::{ConsumerConfig, Event, ManualProducer, TestConsumer};
use common::{
    assert_consumer_error, assert_mentions, assert_producer_error, counted_device_array, counting,
    device_array, emulated, expect_producer_error, Counters,
};

const LEVEL: ValidationLevel = ValidationLevel::Full;

fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("name", DataType::Utf8, true),
    ]))
}

/// Batch `i`: three rows with values derived from `i`.
fn batch(i: usize) -> RecordBatch {
    let i = i as i64;
    RecordBatch::try_new(
        schema(),
        vec![
            Arc::new(Int64Array::from(vec![i * 10, i * 10 + 1, i * 10 + 2])) as ArrayRef,
            Arc::new(StringArray::from(vec![
                Some(format!("row {i}")),
                None,
                Some("x".repeat(i as usize % 7)),
            ])),
        ],
    )
    .unwrap()
}

/// Batches 0 to `n - 1`.
fn batches(n: usize) -> Vec<RecordBatch> {
    (0..n).map(batch).collect()
}

/// A source of `n` batches that counts how many were pulled from it.
fn counted_source(
    n: usize,
) -> (
    impl Stream<Item = Result<RecordBatch, ArrowError>> + Send + 'static,
    Arc<AtomicUsize>,
) {
    let pulls = Arc::new(AtomicUsize::new(0));
    let counter = pulls.clone();
    let source = stream::iter(0..n).map(move |i| {
        counter.fetch_add(1, Ordering::SeqCst);
        Ok(batch(i))
    });
    (source, pulls)
}

/// A producer of `source`'s record batches of [`schema`] on the CPU.
fn producer_from(
    source: impl Stream<Item = Result<RecordBatch, ArrowError>> + Send + 'static,
) -> AsyncDeviceStreamProducer {
    export_async_record_batches(schema(), source).unwrap()
}

fn producer_of(n: usize) -> AsyncDeviceStreamProducer {
    producer_from(counted_source(n).0)
}

/// A producer of `n` CPU device arrays (batches 0 to `n - 1`) whose root
/// structs count their releases.
fn counted_producer(n: usize) -> (AsyncDeviceStreamProducer, Vec<Arc<Counters>>) {
    let (arrays, counters): (Vec<_>, Vec<_>) = (0..n).map(counted_array).unzip();
    let producer = export_async_device_arrays(
        struct_field(),
        DeviceType::CPU,
        stream::iter(arrays.into_iter().map(Ok)),
    )
    .unwrap();
    (producer, counters)
}

/// Runs `producer` into a fresh consumer stream on the runtime.
fn connect(
    producer: AsyncDeviceStreamProducer,
    queue_size: usize,
) -> (
    tokio::task::JoinHandle<arrow_device::Result<()>>,
    AsyncDeviceStream,
) {
    let (stream, handler) = AsyncDeviceStream::new(queue_size, LEVEL);
    // SAFETY: the handler comes from `AsyncDeviceStream::new`.
    let driver = tokio::spawn(unsafe { producer.run(handler.into_raw()) });
    (driver, stream)
}

async fn within<T>(what: &str, future: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(10), future)
        .await
        .unwrap_or_else(|_| panic!("{what} did not finish"))
}

/// What the spawned driver of [`connect`] resolved to.
async fn driver_result(
    driver: tokio::task::JoinHandle<arrow_device::Result<()>>,
) -> arrow_device::Result<()> {
    within("driver", driver).await.unwrap()
}

/// Runs `producer` into `consumer`'s handler to the end.
async fn run_into(
    producer: AsyncDeviceStreamProducer,
    consumer: &TestConsumer,
) -> arrow_device::Result<()> {
    // SAFETY: a live handler, kept alive by `consumer` until after release.
    within("driver", unsafe { producer.run(consumer.handler()) }).await
}

async fn collect_batches(stream: &mut AsyncDeviceStream) -> Vec<RecordBatch> {
    let mut batches = Vec::new();
    while let Some(array) = within("stream", stream.next()).await {
        batches.push(array.unwrap().to_record_batch().unwrap());
    }
    batches
}

/// The stream's next item, which must be an error.
async fn next_error(stream: &mut AsyncDeviceStream) -> Error {
    within("error", stream.next()).await.unwrap().unwrap_err()
}

/// A DeviceArray of batch `i` whose root struct's releases are counted.
fn counted_array(i: usize) -> (DeviceArray, Arc<Counters>) {
    counted_device_array(&batch(i), LEVEL)
}

/// Asserts that `array`, extracted from our producer's task `i`, holds
/// batch `i`.
fn assert_extracted_batch(array: ArrowDeviceArray, i: usize) {
    let (_, c_schema) = export_record_batch(&batch(i)).unwrap();
    // SAFETY: extracted from our producer's task, of batch(i)'s schema.
    let imported = unsafe { DeviceArray::try_new(array, c_schema, LEVEL) }.unwrap();
    assert_eq!(imported.to_record_batch().unwrap(), batch(i));
}

/// A [`ManualProducer`] of `device_type` into a fresh consumer stream of
/// `queue_size`, with [`schema`] sent and accepted.
fn manual_producer(
    queue_size: usize,
    device_type: DeviceType,
) -> (ManualProducer, AsyncDeviceStream) {
    let (stream, handler) = AsyncDeviceStream::new(queue_size, LEVEL);
    let producer = ManualProducer::new(handler.into_raw(), device_type, None);
    assert_eq!(producer.send_schema(&schema(), true), 0);
    (producer, stream)
}

fn struct_field() -> Field {
    Field::new("", DataType::Struct(schema().fields().clone()), false)
}

// ---------------------------------------------------------------------------
// Our producer into our consumer.
// ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn empty_stream_delivers_the_schema_then_ends() {
    let (driver, mut stream) = connect(producer_of(0), 2);
    let field = within("schema", stream.wait_schema()).await.unwrap();
    assert_eq!(
        field.data_type(),
        &DataType::Struct(schema().fields().clone())
    );
    assert_eq!(stream.device_type(), Some(DeviceType::CPU));
    assert_eq!(stream.additional_metadata(), Some(HashMap::new()));
    assert!(within("end", stream.next()).await.is_none());
    assert!(stream.next().await.is_none(), "the stream stays ended");
    driver_result(driver).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_cpu_batches_round_trip_in_order() {
    let (driver, mut stream) = connect(producer_of(50), 3);
    assert_eq!(collect_batches(&mut stream).await, batches(50));
    driver_result(driver).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn batches_copied_to_the_emulated_device_round_trip() {
    let device = emulated(0);
    let producer = export_async_record_batches_to(schema(), counted_source(6).0, &device).unwrap();
    assert_eq!(producer.device_type(), DeviceType::EXT_DEV);
    let (driver, mut stream) = connect(producer, 2);
    let mut received = Vec::new();
    while let Some(array) = within("stream", stream.next()).await {
        let array = array.unwrap();
        assert_eq!(array.device_type(), DeviceType::EXT_DEV);
        assert_eq!(array.device_id(), device.device_id());
        received.push(array.to_record_batch().unwrap());
    }
    assert_eq!(stream.device_type(), Some(DeviceType::EXT_DEV));
    assert_eq!(received, batches(6));
    driver_result(driver).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn additional_metadata_round_trips() {
    let metadata: HashMap<String, String> = [
        ("rows".to_string(), "12".to_string()),
        ("source".to_string(), "unit test ü".to_string()),
    ]
    .into();
    let producer = producer_of(4)
        .with_additional_metadata(metadata.clone())
        .unwrap();
    let (driver, mut stream) = connect(producer, 2);
    within("schema", stream.wait_schema()).await.unwrap();
    assert_eq!(stream.additional_metadata(), Some(metadata));
    assert_eq!(collect_batches(&mut stream).await.len(), 4);
    driver_result(driver).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn device_arrays_are_sent_zero_copy_and_released_once() {
    let (producer, counters) = counted_producer(5);
    let (driver, mut stream) = connect(producer, 2);
    let received = collect_batches(&mut stream).await;
    assert_eq!(received, batches(5));
    driver_result(driver).await.unwrap();
    // The batches share the exported memory (zero-copy all the way).
    assert_eq!(counters[0].array_releases(), 0);
    drop((stream, received));
    for (i, c) in counters.iter().enumerate() {
        assert_eq!(c.array_releases(), 1, "array {i} released once");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn device_array_of_another_type_or_device_is_an_einval_naming_the_batch() {
    let (good, _) = counted_array(0);
    let wrong_type = device_array(&Int32Array::from(vec![1, 2]), LEVEL);
    let producer = export_async_device_arrays(
        struct_field(),
        DeviceType::CPU,
        stream::iter([Ok(good), Ok(wrong_type)]),
    )
    .unwrap();
    let (driver, mut stream) = connect(producer, 4);
    assert!(within("first", stream.next()).await.unwrap().is_ok());
    assert_producer_error(
        &next_error(&mut stream).await,
        libc::EINVAL,
        "batch 1 has data type Int32, expected the stream's Struct(",
    );
    assert!(stream.next().await.is_none());
    let driver_err = driver_result(driver).await.unwrap_err();
    assert_mentions(&driver_err, "batch 1");

    // The same with the device type: a CPU array in an EXT_DEV stream.
    let (good, _) = counted_array(0);
    let producer = export_async_device_arrays(
        struct_field(),
        DeviceType::EXT_DEV,
        stream::iter([Ok(good)]),
    )
    .unwrap();
    let (driver, mut stream) = connect(producer, 4);
    let err = next_error(&mut stream).await;
    assert_mentions(
        &err,
        "batch 0 is on device type CPU, expected the stream's EXT_DEV",
    );
    driver_result(driver).await.unwrap_err();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn source_error_after_three_batches_reaches_the_consumer_with_its_text() {
    let source = stream::iter((0..5).map(|i| {
        if i == 3 {
            Err(ArrowError::ComputeError("disk on fire".into()))
        } else {
            Ok(batch(i))
        }
    }));
    let (driver, mut stream) = connect(producer_from(source), 8);
    let mut received = Vec::new();
    let err = loop {
        match within("stream", stream.next()).await {
            Some(Ok(array)) => received.push(array.to_record_batch().unwrap()),
            Some(Err(e)) => break e,
            None => panic!("the stream ended without the error"),
        }
    };
    assert_eq!(received, batches(3));
    assert_producer_error(&err, libc::EINVAL, "disk on fire");
    assert!(stream.next().await.is_none(), "fused after the error");
    let driver_err = driver_result(driver).await.unwrap_err();
    assert_mentions(&driver_err, "disk on fire");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn import_back_pressure_keeps_pulls_within_consumed_plus_queue_size() {
    let (source, pulls) = counted_source(20);
    let (driver, mut stream) = connect(producer_from(source), 2);
    let mut consumed = 0;
    let mut max_ahead = 0;
    while let Some(array) = within("stream", stream.next()).await {
        array.unwrap();
        consumed += 1;
        // A slow consumer: the producer has time to run ahead if it could.
        tokio::time::sleep(Duration::from_millis(2)).await;
        let pulled = pulls.load(Ordering::SeqCst);
        assert!(
            pulled <= consumed + 2,
            "{pulled} pulled with {consumed} consumed"
        );
        max_ahead = max_ahead.max(pulled - consumed);
    }
    assert_eq!(consumed, 20);
    assert_eq!(max_ahead, 2, "the producer used the credit it had");
    driver_result(driver).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn dropping_the_stream_mid_way_cancels_the_producer_and_frees_every_array() {
    let (producer, counters) = counted_producer(10);
    let (driver, mut stream) = connect(producer, 3);
    let first = within("first", stream.next()).await.unwrap().unwrap();
    // Let the producer fill the queue, then walk away.
    tokio::time::sleep(Duration::from_millis(20)).await;
    drop(stream);
    // Cancelled, not failed: the driver resolves Ok.
    driver_result(driver).await.unwrap();
    assert_eq!(counters[0].array_releases(), 0, "still held by `first`");
    drop(first);
    for (i, c) in counters.iter().enumerate() {
        assert_eq!(c.array_releases(), 1, "array {i} released exactly once");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn dropping_the_driver_ends_the_stream_with_ecanceled_and_releases_once() {
    // Never polled: the handler is still released, once.
    let (mut stream, handler) = AsyncDeviceStream::new(2, LEVEL);
    // SAFETY: the handler comes from `AsyncDeviceStream::new`.
    drop(unsafe { producer_of(3).run(handler.into_raw()) });
    expect_producer_error(&next_error(&mut stream).await, libc::ECANCELED);
    assert!(stream.next().await.is_none());

    // Mid-stream: the consumer holds back credit, the task is aborted.
    let consumer = TestConsumer::new(ConsumerConfig {
        initial_request: Some(1),
        ..Default::default()
    });
    // SAFETY: a live handler, kept alive until after release.
    let driver = tokio::spawn(unsafe { producer_of(3).run(consumer.handler()) });
    consumer
        .recorder
        .wait_until("one task", |e| e.contains(&Event::Task(0)))
        .await;
    driver.abort();
    assert!(driver.await.unwrap_err().is_cancelled());
    let events = consumer.recorder.events();
    assert!(
        matches!(&events[..], [Event::Schema(_), Event::Task(0), Event::Error(code, _), Event::Release] if *code == libc::ECANCELED),
        "{events:?}"
    );
    assert_eq!(consumer.recorder.violations(), Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn unhanded_handler_ends_the_stream_with_an_error() {
    let (mut stream, handler) = AsyncDeviceStream::new(2, LEVEL);
    drop(handler);
    let err = next_error(&mut stream).await;
    assert_mentions(&err, "dropped without being handed");
    assert!(stream.next().await.is_none());
}

// ---------------------------------------------------------------------------
// Our producer into a raw consumer that checks the protocol.
// ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn producer_never_sends_or_pulls_beyond_the_granted_credit() {
    let (source, pulls) = counted_source(10);
    let producer = producer_from(source);
    let consumer = TestConsumer::new(ConsumerConfig::default());
    let rec = consumer.recorder.clone();
    // SAFETY: a live handler, kept alive until after release.
    let driver = tokio::spawn(unsafe { producer.run(consumer.handler()) });
    rec.wait_until("schema", |e| e.len() == 1).await;
    // No credit yet: nothing is pulled or sent.
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!((pulls.load(Ordering::SeqCst), rec.tasks()), (0, 0));

    rec.request(3);
    rec.wait_until("3 tasks", |e| e.contains(&Event::Task(2)))
        .await;
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!((pulls.load(Ordering::SeqCst), rec.tasks()), (3, 3));

    rec.request(2);
    rec.wait_until("5 tasks", |e| e.contains(&Event::Task(4)))
        .await;
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!((pulls.load(Ordering::SeqCst), rec.tasks()), (5, 5));

    // Huge credit saturates instead of overflowing.
    rec.request(i64::MAX);
    rec.request(i64::MAX);
    rec.wait_until("release", |e| e.contains(&Event::Release))
        .await;
    driver_result(driver).await.unwrap();
    let events = rec.events();
    assert_eq!(events.len(), 1 + 10 + 2, "{events:?}");
    assert_eq!(events[11..], [Event::End, Event::Release]);
    assert_eq!(rec.violations(), Vec::<String>::new());
    let arrays = std::mem::take(&mut *rec.arrays.lock().unwrap());
    assert_eq!(arrays.len(), 10);
    for (i, array) in arrays.into_iter().enumerate() {
        assert_extracted_batch(array, i);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn request_from_inside_callbacks_never_reenters_the_handler() {
    let consumer = TestConsumer::new(ConsumerConfig {
        initial_request: Some(1),
        request_per_task: 1,
        ..Default::default()
    });
    let rec = consumer.recorder.clone();
    run_into(producer_of(8), &consumer).await.unwrap();
    assert_eq!(rec.tasks(), 8);
    assert_eq!(rec.releases(), 1);
    assert_eq!(rec.violations(), Vec::<String>::new());
    assert_eq!(rec.producer_info().0, Some(DeviceType::CPU));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn request_of_zero_or_less_is_reported_with_einval_then_released() {
    for n in [0, -1, i64::MIN] {
        let consumer = TestConsumer::new(ConsumerConfig {
            initial_request: Some(n),
            ..Default::default()
        });
        let rec = consumer.recorder.clone();
        let err = run_into(producer_of(3), &consumer).await.unwrap_err();
        assert_eq!(err.errno(), libc::EINVAL);
        let events = rec.events();
        let expected = format!("called with n = {n}, expected n > 0");
        assert!(
            matches!(&events[..], [Event::Schema(_), Event::Error(code, message), Event::Release]
                if *code == libc::EINVAL && message.contains(&expected)),
            "n = {n}: {events:?}"
        );
        assert_eq!(rec.violations(), Vec::<String>::new());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cancel_releases_without_on_error_and_later_calls_are_nops() {
    let endless = stream::iter(0..).map(|i| Ok(batch(i)));
    let producer = producer_from(endless);
    let consumer = TestConsumer::new(ConsumerConfig {
        initial_request: Some(2),
        ..Default::default()
    });
    let rec = consumer.recorder.clone();
    // SAFETY: a live handler, kept alive until after release.
    let driver = tokio::spawn(unsafe { producer.run(consumer.handler()) });
    rec.wait_until("2 tasks", |e| e.contains(&Event::Task(1)))
        .await;
    // Cancel twice, from two other threads at once, then request more.
    let cancellers: Vec<_> = (0..2)
        .map(|_| {
            let rec = rec.clone();
            std::thread::spawn(move || {
                rec.cancel();
                rec.cancel();
                rec.request(5);
            })
        })
        .collect();
    for c in cancellers {
        c.join().unwrap();
    }
    driver_result(driver).await.unwrap();
    let events = rec.events();
    assert_eq!(
        events,
        [
            Event::Schema("+s".into()),
            Event::Task(0),
            Event::Task(1),
            Event::Release
        ]
    );
    assert_eq!(rec.violations(), Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cancel_from_inside_on_next_task_stops_the_stream() {
    let consumer = TestConsumer::new(ConsumerConfig {
        initial_request: Some(100),
        cancel_after: Some(3),
        ..Default::default()
    });
    let rec = consumer.recorder.clone();
    run_into(producer_of(50), &consumer).await.unwrap();
    assert_eq!(rec.tasks(), 3);
    assert_eq!(rec.events().last(), Some(&Event::Release));
    assert!(!rec.events().iter().any(|e| matches!(e, Event::Error(..))));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn consumer_refusing_the_schema_or_a_task_gets_release_only() {
    let consumer = TestConsumer::new(ConsumerConfig {
        on_schema_code: libc::EPERM,
        ..Default::default()
    });
    let rec = consumer.recorder.clone();
    let err = run_into(producer_of(3), &consumer).await.unwrap_err();
    assert_consumer_error(&err, libc::EPERM, "on_schema");
    assert_eq!(rec.events(), [Event::Schema("+s".into()), Event::Release]);

    let consumer = TestConsumer::new(ConsumerConfig {
        initial_request: Some(10),
        refuse_task: Some(1),
        ..Default::default()
    });
    let rec = consumer.recorder.clone();
    let (producer, counters) = counted_producer(5);
    let err = run_into(producer, &consumer).await.unwrap_err();
    assert_consumer_error(&err, libc::EPERM, "on_next_task (batch 1)");
    assert_eq!(
        rec.events(),
        [
            Event::Schema("+s".into()),
            Event::Task(0),
            Event::Task(1),
            Event::Release
        ]
    );
    assert_eq!(counters[1].array_releases(), 1, "the refused task's array");
    // The accepted one is the consumer's; the ones never sent went with the
    // source.
    drop((rec, consumer));
    for (i, c) in counters.iter().enumerate() {
        assert_eq!(c.array_releases(), 1, "array {i} released once");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn null_handler_or_missing_callbacks_are_errors_without_ub() {
    // SAFETY: NULL is allowed.
    let err = within("driver", unsafe {
        producer_of(1).run(std::ptr::null_mut())
    })
    .await
    .unwrap_err();
    assert_mentions(&err, "NULL");

    let consumer = TestConsumer::new(ConsumerConfig::default());
    // SAFETY: our consumer's live handler.
    unsafe { (*consumer.handler()).on_error = None };
    let err = run_into(producer_of(1), &consumer).await.unwrap_err();
    assert_mentions(&err, "on_error");
    assert_eq!(consumer.recorder.events(), [Event::Release]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn extract_data_moves_once_and_refuses_null_or_repeated_calls() {
    let consumer = TestConsumer::new(ConsumerConfig {
        initial_request: Some(10),
        keep_tasks: true,
        ..Default::default()
    });
    let rec = consumer.recorder.clone();
    run_into(producer_of(3), &consumer).await.unwrap();
    let mut tasks = std::mem::take(&mut *rec.kept_tasks.lock().unwrap());
    assert_eq!(tasks.len(), 3);
    let extract = tasks[0].extract_data.unwrap();
    // SAFETY: NULL tasks are refused.
    assert_eq!(
        unsafe { extract(std::ptr::null_mut(), std::ptr::null_mut()) },
        libc::EINVAL
    );
    // Tasks outlive the handler's release.
    let mut out = ArrowDeviceArray::empty();
    // SAFETY: a task copied in on_next_task, not extracted yet.
    assert_eq!(unsafe { extract(&mut tasks[0], &mut out) }, 0);
    assert!(!out.is_released());
    let mut again = ArrowDeviceArray::empty();
    // SAFETY: the same task again: refused without touching `again`.
    assert_eq!(unsafe { extract(&mut tasks[0], &mut again) }, libc::EINVAL);
    assert!(again.is_released());
    // The consumer does not want the others: NULL releases them.
    for task in &mut tasks[1..] {
        // SAFETY: copied tasks, not extracted yet.
        assert_eq!(unsafe { extract(task, std::ptr::null_mut()) }, 0);
    }
    assert_extracted_batch(out, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn source_panic_becomes_on_error_eio() {
    let source = stream::iter(0..3).map(|i| {
        assert!(i < 1, "source exploded at {i}");
        Ok(batch(i))
    });
    let (driver, mut stream) = connect(producer_from(source), 4);
    assert!(within("first", stream.next()).await.unwrap().is_ok());
    assert_producer_error(
        &next_error(&mut stream).await,
        libc::EIO,
        "source exploded at 1",
    );
    driver_result(driver).await.unwrap_err();
}

// ---------------------------------------------------------------------------
// A raw producer into our consumer.
// ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn consumer_grants_queue_size_then_one_credit_per_consumed_batch() {
    let (mut stream, handler) = AsyncDeviceStream::new(3, LEVEL);
    let mut producer =
        ManualProducer::new(handler.into_raw(), DeviceType::CPU, Some(&[("total", "2")]));
    assert_eq!(producer.send_schema(&schema(), true), 0);
    assert_eq!(*producer.log.requests.lock().unwrap(), [3]);
    assert_eq!(stream.additional_metadata().unwrap()["total"], "2");
    assert_eq!(producer.send_batch(&batch(0), DeviceType::CPU), 0);
    assert_eq!(producer.send_batch(&batch(1), DeviceType::CPU), 0);
    // Credit comes back only as the consumer drains the queue.
    assert_eq!(*producer.log.requests.lock().unwrap(), [3]);
    let first = stream.next().await.unwrap().unwrap();
    assert_eq!(first.to_record_batch().unwrap(), batch(0));
    assert_eq!(*producer.log.requests.lock().unwrap(), [3, 1]);
    assert_eq!(producer.send_end(), 0);
    producer.release();
    let second = stream.next().await.unwrap().unwrap();
    assert_eq!(second.to_record_batch().unwrap(), batch(1));
    assert!(stream.next().await.is_none());
    assert_eq!(producer.log.cancels.load(Ordering::SeqCst), 0);
    drop(stream);
    assert_eq!(producer.log.extract_calls.load(Ordering::SeqCst), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn dropping_the_stream_cancels_once_and_extracts_every_task_exactly_once() {
    let (mut producer, mut stream) = manual_producer(4, DeviceType::CPU);
    let mut counters = Vec::new();
    for i in 0..3 {
        let (array, c_schema) = export_record_batch(&batch(i)).unwrap();
        let (array, _c_schema, c) = counting(array, c_schema);
        counters.push(c);
        assert_eq!(producer.send_array(array), 0);
    }
    let first = stream.next().await.unwrap().unwrap();
    drop(stream);
    let log = producer.log.clone();
    assert_eq!(log.cancels.load(Ordering::SeqCst), 1);
    assert_eq!(log.extract_calls.load(Ordering::SeqCst), 3);
    assert_eq!(log.extract_null.load(Ordering::SeqCst), 2);
    // A task already under way after the cancel is extracted on arrival.
    assert_eq!(producer.send_batch(&batch(3), DeviceType::CPU), 0);
    assert_eq!(log.extract_calls.load(Ordering::SeqCst), 4);
    producer.release();
    assert_eq!(log.cancels.load(Ordering::SeqCst), 1, "cancel is sent once");
    assert_eq!(
        log.tasks_sent.load(Ordering::SeqCst),
        log.extract_calls.load(Ordering::SeqCst)
    );
    assert_eq!(
        counters
            .iter()
            .map(|c| c.array_releases())
            .collect::<Vec<_>>(),
        [0, 1, 1]
    );
    drop(first);
    assert_eq!(counters[0].array_releases(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn producer_error_is_yielded_after_the_queued_batches_with_its_metadata() {
    let (mut producer, mut stream) = manual_producer(4, DeviceType::CPU);
    assert_eq!(producer.send_batch(&batch(0), DeviceType::CPU), 0);
    assert_eq!(producer.send_batch(&batch(1), DeviceType::CPU), 0);
    producer.send_error(libc::EIO, "network down", &[("retry", "yes")]);
    producer.release();
    for i in 0..2 {
        let array = stream.next().await.unwrap().unwrap();
        assert_eq!(array.to_record_batch().unwrap(), batch(i));
    }
    let err = next_error(&mut stream).await;
    assert_eq!(expect_producer_error(&err, libc::EIO), "network down");
    assert_eq!(stream.error_metadata().unwrap()["retry"], "yes");
    assert!(stream.next().await.is_none());
    assert!(stream.next().await.is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn release_before_the_end_marker_is_an_error() {
    let (mut producer, mut stream) = manual_producer(2, DeviceType::CPU);
    assert_eq!(producer.send_batch(&batch(0), DeviceType::CPU), 0);
    producer.release();
    assert!(stream.next().await.unwrap().is_ok());
    let err = next_error(&mut stream).await;
    assert_mentions(&err, "released the handler before the end of the stream");
    assert!(stream.next().await.is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn protocol_violations_are_refused_and_reported() {
    // No producer in handler->producer.
    let (mut stream, handler) = AsyncDeviceStream::new(2, LEVEL);
    let mut producer = ManualProducer::new(handler.into_raw(), DeviceType::CPU, None);
    assert_eq!(producer.send_schema(&schema(), false), libc::EINVAL);
    producer.release();
    let err = stream.wait_schema().await.unwrap_err();
    assert_mentions(&err, "handler->producer is NULL");
    assert!(stream.next().await.is_none());

    // A task beyond the credit granted.
    let (mut producer, mut stream) = manual_producer(1, DeviceType::CPU);
    assert_eq!(producer.send_batch(&batch(0), DeviceType::CPU), 0);
    assert_eq!(
        producer.send_batch(&batch(1), DeviceType::CPU),
        libc::EINVAL
    );
    producer.release();
    assert_eq!(producer.log.extract_null.load(Ordering::SeqCst), 1);
    assert!(stream.next().await.unwrap().is_ok());
    let err = next_error(&mut stream).await;
    assert_mentions(&err, "task 1 exceeds the credit granted (queue_size 1)");

    // An array on another device type than the producer's.
    let (mut producer, mut stream) = manual_producer(2, DeviceType::CUDA);
    assert_eq!(producer.send_batch(&batch(0), DeviceType::CPU), 0);
    let err = next_error(&mut stream).await;
    assert_mentions(
        &err,
        "batch 0 is on device type CPU, expected the stream's CUDA",
    );
    // The stream's own error cancels the producer.
    assert_eq!(producer.log.cancels.load(Ordering::SeqCst), 1);
    producer.release();
    assert!(stream.next().await.is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_refused_task_is_reported_even_when_the_end_marker_follows() {
    // Found by the async_stream fuzz target: the stream used to end with
    // `None` after its end marker, the refused batch lost without an error.
    let (mut producer, mut stream) = manual_producer(1, DeviceType::CPU);
    assert_eq!(producer.send_batch(&batch(0), DeviceType::CPU), 0);
    assert_eq!(
        producer.send_batch(&batch(1), DeviceType::CPU),
        libc::EINVAL
    );
    assert_eq!(producer.send_end(), 0);
    producer.release();
    let first = within("first", stream.next()).await.unwrap().unwrap();
    assert_eq!(first.to_record_batch().unwrap(), batch(0));
    let err = next_error(&mut stream).await;
    assert_mentions(&err, "task 1 exceeds the credit granted (queue_size 1)");
    assert!(stream.next().await.is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_end_marker_before_the_schema_ends_the_stream_with_an_error() {
    // Found by the async_stream fuzz target: the stream used to stay
    // pending forever, even after the producer released the handler.
    let (mut stream, handler) = AsyncDeviceStream::new(2, LEVEL);
    let mut producer = ManualProducer::new(handler.into_raw(), DeviceType::CPU, None);
    assert_eq!(producer.send_end(), libc::EINVAL);
    producer.release();
    let err = next_error(&mut stream).await;
    assert_mentions(&err, "the end marker arrived before on_schema");
    assert!(stream.next().await.is_none());

    // The same seen through wait_schema, before the release.
    let (mut stream, handler) = AsyncDeviceStream::new(2, LEVEL);
    let mut producer = ManualProducer::new(handler.into_raw(), DeviceType::CPU, None);
    assert_eq!(producer.send_end(), libc::EINVAL);
    let err = within("wait_schema", stream.wait_schema())
        .await
        .unwrap_err();
    assert_mentions(&err, "the end marker arrived before on_schema");
    producer.release();
    assert!(stream.next().await.is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn producer_calling_back_from_inside_request_does_not_deadlock() {
    let (mut stream, handler) = AsyncDeviceStream::new(2, LEVEL);
    let producer = ManualProducer::new(handler.into_raw(), DeviceType::CPU, None);
    producer.make_eager(batches(5));
    // on_schema's request(2) sends two tasks synchronously; each request(1)
    // from poll_next sends one more, and the last one ends and releases.
    assert_eq!(producer.send_schema(&schema(), true), 0);
    assert_eq!(collect_batches(&mut stream).await, batches(5));
    drop(stream);
    let log = &producer.log;
    assert_eq!(log.extract_calls.load(Ordering::SeqCst), 5);
    assert_eq!(log.cancels.load(Ordering::SeqCst), 0);
}

// ---------------------------------------------------------------------------
// Stress: producer and consumer on different threads, ending in every way.
// ---------------------------------------------------------------------------

static HANDLER_RELEASES: AtomicUsize = AtomicUsize::new(0);
static OUR_RELEASE: OnceLock<unsafe extern "C" fn(*mut ArrowAsyncDeviceStreamHandler)> =
    OnceLock::new();

unsafe extern "C" fn counted_handler_release(handler: *mut ArrowAsyncDeviceStreamHandler) {
    HANDLER_RELEASES.fetch_add(1, Ordering::SeqCst);
    // SAFETY: forwards to the handler's own release, which this replaced.
    unsafe { (OUR_RELEASE.get().unwrap())(handler) };
}

fn counted_handler(queue_size: usize) -> (*mut ArrowAsyncDeviceStreamHandler, AsyncDeviceStream) {
    let (stream, handler) = AsyncDeviceStream::new(queue_size, LEVEL);
    let raw = handler.into_raw();
    // SAFETY: a live handler nobody else has yet.
    unsafe {
        OUR_RELEASE.get_or_init(|| (*raw).release.unwrap());
        (*raw).release = Some(counted_handler_release);
    }
    (raw, stream)
}

struct SendPtr(*mut ArrowAsyncDeviceStreamHandler);
// SAFETY: handed to the spawned driver, which owns it from then on.
unsafe impl Send for SendPtr {}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn stress_every_run_terminates_and_releases_everything_once() {
    const RUNS: usize = 1000;
    const BATCHES: usize = 5;
    let mut all_counters = Vec::with_capacity(RUNS * BATCHES);
    for run in 0..RUNS {
        let (arrays, counters): (Vec<_>, Vec<_>) = (0..BATCHES).map(counted_array).unzip();
        all_counters.extend(counters);
        let fail_at = (run % 4 == 3).then_some(run % BATCHES);
        let source = stream::iter(arrays.into_iter().enumerate().map(move |(i, a)| {
            if Some(i) == fail_at {
                Err(Error::NotSupported(format!("run {run} fails at {i}")))
            } else {
                Ok(a)
            }
        }));
        let producer = export_async_device_arrays(struct_field(), DeviceType::CPU, source).unwrap();
        let (handler, mut stream) = counted_handler(1 + run % 3);
        let handler = SendPtr(handler);
        let driver: tokio::task::JoinHandle<arrow_device::Result<()>> = tokio::spawn(async move {
            let handler = handler;
            // SAFETY: a live handler from `AsyncDeviceStream::new`.
            let driver: AsyncProducerDriver = unsafe { producer.run(handler.0) };
            driver.await
        });
        let stop_after = run % (BATCHES + 2);
        let consumer = async {
            let mut received = 0;
            while let Some(item) = stream.next().await {
                match item {
                    Ok(array) => {
                        assert_eq!(array.len(), 3);
                        received += 1;
                    }
                    Err(_) => break,
                }
                if run % 4 == 1 && received == stop_after {
                    break; // drop the stream mid-way
                }
                if run % 4 == 2 && received == stop_after {
                    driver.abort(); // drop the producer mid-way
                }
            }
            drop(stream);
        };
        tokio::time::timeout(Duration::from_secs(5), consumer)
            .await
            .unwrap_or_else(|_| panic!("run {run}: the consumer hung"));
        let outcome = tokio::time::timeout(Duration::from_secs(5), driver)
            .await
            .unwrap_or_else(|_| panic!("run {run}: the driver hung"));
        if let Ok(result) = outcome {
            if run % 4 == 0 {
                result.unwrap_or_else(|e| panic!("run {run}: {e}"));
            }
        }
    }
    assert_eq!(HANDLER_RELEASES.load(Ordering::SeqCst), RUNS);
    let released: Vec<_> = all_counters.iter().map(|c| c.array_releases()).collect();
    assert!(
        released.iter().all(|&n| n == 1),
        "arrays not released exactly once: {:?}",
        released
            .iter()
            .enumerate()
            .filter(|(_, &n)| n != 1)
            .take(10)
            .collect::<Vec<_>>()
    );
}

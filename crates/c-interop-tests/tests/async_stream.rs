//! The async device stream (spec: "Async Device Stream Interface") across
//! the C boundary, both ways, on a multi-threaded tokio runtime:
//!
//! - `AsyncDeviceStreamProducer` drives the C handler of
//!   `c/async_stream.c`, which requests credit from inside its callbacks,
//!   extracts tasks there or after the stream ended, sums CPU data by hand,
//!   reads only the metadata of device data, cancels, and records every
//!   callback that overlapped another, came after release or exceeded the
//!   credit it granted;
//! - the C producer thread of `c/async_stream.c` feeds `AsyncDeviceStream::new`:
//!   values arrive intact, its error surfaces after the batches before it,
//!   the Rust consumer holds it to `queue_size` tasks ahead, and dropping the
//!   stream cancels it with every task extracted and every array released
//!   exactly once.
//!
//! Timeouts only detect hangs; nothing asserts on timing.
#![cfg(unix)]

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use arrow_array::RecordBatch;
use arrow_device::stream::{
    export_async_record_batches, export_async_record_batches_to, AsyncDeviceStream,
    AsyncDeviceStreamProducer,
};
use arrow_device::{DeviceArray, DeviceType, Error, ValidationLevel};
use arrow_schema::{ArrowError, DataType};
use c_interop_tests::async_stream::{
    AsyncConsumerReport, AsyncProducerConfig, AsyncProducerCounters, CAsyncConsumer,
    CAsyncProducer, ConsumerOptions,
};
use futures_util::stream::{self, StreamExt};

mod common;

use common::{
    a_b_schema, a_values, emulated, expected_c_batch, v_s_batch, v_s_schema, v_sum, CPU, EXT_DEV,
    V_S,
};

async fn within<T>(what: &str, future: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(10), future)
        .await
        .unwrap_or_else(|_| panic!("{what} hangs"))
}

// ---- Rust produces, C consumes ---------------------------------------------

/// A source of `batches` that counts how many were pulled, and yields to
/// the executor before each one, so that the driver hops between threads.
fn counted_source(
    batches: Vec<Result<RecordBatch, ArrowError>>,
) -> (
    impl futures_util::Stream<Item = Result<RecordBatch, ArrowError>> + Send + 'static,
    Arc<AtomicUsize>,
) {
    let pulls = Arc::new(AtomicUsize::new(0));
    let counter = pulls.clone();
    let source = stream::iter(batches).then(move |batch| {
        counter.fetch_add(1, Ordering::SeqCst);
        async move {
            tokio::task::yield_now().await;
            batch
        }
    });
    (source, pulls)
}

fn rows_metadata(rows: usize) -> HashMap<String, String> {
    [
        ("rows".to_string(), rows.to_string()),
        ("origin".to_string(), "c-interop-tests".to_string()),
    ]
    .into()
}

/// A CPU producer of `batches` with `rows` in its additional_metadata.
fn cpu_producer(
    batches: Vec<Result<RecordBatch, ArrowError>>,
) -> (AsyncDeviceStreamProducer, Arc<AtomicUsize>) {
    let (source, pulls) = counted_source(batches);
    let producer = export_async_record_batches(v_s_schema(), source)
        .expect("the schema exports")
        .with_additional_metadata(rows_metadata(123))
        .expect("the metadata encodes");
    (producer, pulls)
}

/// Runs `producer` into a new C consumer until the driver resolves.
async fn run_into_c(
    producer: AsyncDeviceStreamProducer,
    options: &ConsumerOptions,
) -> (arrow_device::Result<()>, CAsyncConsumer) {
    let consumer = CAsyncConsumer::new(options);
    // SAFETY: the C handler follows the spec, its callbacks are thread-safe,
    // and it stays valid until `consumer` drops, after the driver resolved
    // (and so released it).
    let driver = tokio::spawn(unsafe { producer.run(consumer.handler()) });
    let result = within("the driver", driver)
        .await
        .expect("the driver does not panic");
    (result, consumer)
}

/// What every C read must show: no failed check, one schema moved out and
/// released, callbacks serialized, never beyond the credit, release once
/// and last, every extracted array released through its callback.
fn assert_clean(report: &AsyncConsumerReport) {
    assert_eq!(
        report.status, 0,
        "async_stream.c failed the check at line {}: {report:?}",
        report.status
    );
    assert_protocol_kept(report);
    assert_eq!(report.on_schema_calls, 1, "{report:?}");
    assert_eq!(report.schema_release_nulled, 1, "{report:?}");
    assert_eq!(report.extract_failures, 0, "{report:?}");
    assert_eq!(report.arrays_release_nulled, report.extracted, "{report:?}");
    assert_eq!(report.device_type_mismatches, 0, "{report:?}");
}

/// The producer's side of the protocol, whatever the consumer did.
fn assert_protocol_kept(report: &AsyncConsumerReport) {
    assert_eq!(report.violations, 0, "overlapping callbacks: {report:?}");
    assert_eq!(report.calls_after_release, 0, "{report:?}");
    assert_eq!(report.release_calls, 1, "release exactly once: {report:?}");
    assert_eq!(report.credit_exceeded, 0, "tasks beyond credit: {report:?}");
    assert_eq!(report.producer_missing, 0, "{report:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn c_consumer_requesting_one_at_a_time_sums_every_cpu_batch_and_reads_the_rows_metadata() {
    let mut batches: Vec<RecordBatch> = (0..6).map(v_s_batch).collect();
    // A sliced batch: its columns arrive with a non-zero offset.
    batches[4] = batches[4].slice(1, 3);
    let (producer, pulls) = cpu_producer(batches.iter().cloned().map(Ok).collect());
    let options = ConsumerOptions::new(&V_S, 1);

    let (result, consumer) = run_into_c(producer, &options).await;

    result.expect("the stream ends normally");
    let report = consumer.report();
    assert_clean(&report);
    assert_eq!(report.producer_device_type, CPU);
    assert_eq!((report.metadata_pairs, report.metadata_key_found), (2, 1));
    assert_eq!(report.metadata_value(), "123");
    assert_eq!((report.tasks, report.batches, report.extracted), (6, 6, 6));
    assert_eq!(report.total_rows, 23);
    assert_eq!(report.sum, v_sum(&batches));
    assert_eq!(report.end_markers, 1);
    assert_eq!(report.on_error_calls, 0);
    assert_eq!(report.sync_events, 0);
    assert_eq!(report.device_ids(), [-1; 6]);
    assert_eq!(
        (report.request_calls, report.credit_granted),
        (7, 7),
        "request(1) in on_schema, then request(1) inside each on_next_task"
    );
    assert_eq!(pulls.load(Ordering::SeqCst), 6);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn c_consumer_extracts_stored_tasks_after_the_handler_was_released() {
    let batches: Vec<RecordBatch> = (0..5).map(v_s_batch).collect();
    let (producer, _) = cpu_producer(batches.iter().cloned().map(Ok).collect());
    let options = ConsumerOptions {
        extract_later: true,
        ..ConsumerOptions::new(&V_S, 3)
    };

    let (result, consumer) = run_into_c(producer, &options).await;
    result.expect("the stream ends normally");
    let before = consumer.report();
    assert_eq!((before.tasks, before.extracted), (5, 0), "{before:?}");
    assert_eq!((before.end_markers, before.release_calls), (1, 1));

    // Spec: the task's contents are the consumer's to extract on its own
    // thread, whenever it likes.
    assert_eq!(consumer.extract_stored(), 5);

    let report = consumer.report();
    assert_clean(&report);
    assert_eq!(report.extracted, 5);
    assert_eq!(report.extracted_after_release, 5);
    assert_eq!(report.batches, 5);
    assert_eq!(report.sum, v_sum(&batches));
    assert_eq!(report.total_rows, 20);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn c_consumer_reads_only_the_metadata_of_batches_on_the_emulated_device() {
    let device = emulated(3);
    let batches: Vec<_> = (0..4).map(|i| Ok(v_s_batch(i))).collect();
    let (source, _) = counted_source(batches);
    let producer = export_async_record_batches_to(v_s_schema(), source, &device)
        .expect("the schema exports")
        .with_additional_metadata(rows_metadata(16))
        .expect("the metadata encodes");
    let options = ConsumerOptions::new(&V_S, 2);

    let (result, consumer) = run_into_c(producer, &options).await;

    result.expect("the stream ends normally");
    let report = consumer.report();
    assert_clean(&report);
    assert_eq!(report.producer_device_type, EXT_DEV);
    assert_eq!(report.metadata_value(), "16");
    assert_eq!((report.tasks, report.batches), (4, 4));
    assert_eq!(report.total_rows, 16);
    assert_eq!(report.device_ids(), [device.device_id(); 4]);
    assert_eq!(report.sync_events, 4, "device copies carry a sync_event");
    assert_eq!(report.sum, 0, "device buffers are not host memory");
    assert_eq!(report.end_markers, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn c_consumer_cancelling_after_two_tasks_gets_release_without_on_error() {
    let (producer, pulls) = cpu_producer((0..10).map(|i| Ok(v_s_batch(i))).collect());
    let options = ConsumerOptions {
        cancel_after: Some(2),
        ..ConsumerOptions::new(&V_S, 4)
    };

    let (result, consumer) = run_into_c(producer, &options).await;

    result.expect("spec: a cancelled stream ends without an error");
    let report = consumer.report();
    assert_clean(&report);
    assert_eq!(
        report.on_error_calls, 0,
        "spec: cancel MUST NOT bring on_error"
    );
    assert_eq!(report.end_markers, 0);
    assert_eq!(report.cancel_calls, 2, "cancel, then a repeated cancel");
    // The driver checks for cancel before it pulls again: nothing follows
    // the task whose callback cancelled.
    assert_eq!((report.tasks, report.tasks_after_cancel), (2, 0));
    assert_eq!(pulls.load(Ordering::SeqCst), 2, "the source stops too");
    assert_eq!(report.sum, v_sum(&[v_s_batch(0), v_s_batch(1)]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn c_consumer_cancelling_inside_on_schema_gets_release_only() {
    let (producer, pulls) = cpu_producer((0..3).map(|i| Ok(v_s_batch(i))).collect());
    let options = ConsumerOptions {
        cancel_after: Some(0),
        ..ConsumerOptions::new(&V_S, 4)
    };

    let (result, consumer) = run_into_c(producer, &options).await;

    result.expect("a cancelled stream ends without an error");
    let report = consumer.report();
    assert_clean(&report);
    assert_eq!(
        (report.tasks, report.end_markers, report.on_error_calls),
        (0, 0, 0)
    );
    assert_eq!(pulls.load(Ordering::SeqCst), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn c_consumer_gets_the_code_and_message_of_a_source_error_mid_stream() {
    let disk_on_fire = || ArrowError::IoError("disk on fire".into(), std::io::Error::other("fire"));
    let batches = vec![
        Ok(v_s_batch(0)),
        Ok(v_s_batch(1)),
        Ok(v_s_batch(2)),
        Err(disk_on_fire()),
        Ok(v_s_batch(4)),
    ];
    let (producer, pulls) = cpu_producer(batches);
    let options = ConsumerOptions::new(&V_S, 2);

    let (result, consumer) = run_into_c(producer, &options).await;

    let err = result.expect_err("the driver reports the source's error");
    assert!(err.to_string().contains("disk on fire"), "{err}");
    let report = consumer.report();
    assert_clean(&report);
    assert_eq!(report.tasks, 3, "the batches before the error arrive");
    assert_eq!(
        report.sum,
        v_sum(&[v_s_batch(0), v_s_batch(1), v_s_batch(2)])
    );
    assert_eq!(report.on_error_calls, 1);
    assert_eq!(report.error_code, Error::Arrow(disk_on_fire()).errno());
    assert_eq!(report.error_code, libc::EIO);
    assert!(
        report.error_message().contains("disk on fire"),
        "{:?}",
        report.error_message()
    );
    assert_eq!(report.end_markers, 0, "an error ends the stream instead");
    assert_eq!(pulls.load(Ordering::SeqCst), 4, "nothing pulled after it");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn c_consumer_requesting_zero_gets_einval_through_on_error_then_release() {
    let (producer, _) = cpu_producer((0..3).map(|i| Ok(v_s_batch(i))).collect());
    let options = ConsumerOptions::new(&V_S, 0);

    let (result, consumer) = run_into_c(producer, &options).await;

    let err = result.expect_err("request(0) is an error");
    assert_eq!(err.errno(), libc::EINVAL, "{err}");
    let report = consumer.report();
    assert_clean(&report);
    assert_eq!((report.tasks, report.end_markers), (0, 0));
    assert_eq!(report.on_error_calls, 1);
    assert_eq!(report.error_code, libc::EINVAL);
    assert!(
        report.error_message().contains("n = 0"),
        "the message names the bad n: {:?}",
        report.error_message()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn c_consumer_refusing_the_schema_gets_release_only() {
    let (producer, pulls) = cpu_producer((0..3).map(|i| Ok(v_s_batch(i))).collect());
    let options = ConsumerOptions::new(&[("l", "v"), ("u", "not_s")], 2);

    let (result, consumer) = run_into_c(producer, &options).await;

    match result {
        Err(Error::Consumer { code, message }) => {
            assert_eq!(code, libc::EINVAL);
            assert!(message.contains("on_schema"), "{message}");
        }
        other => panic!("expected Error::Consumer, got {other:?}"),
    }
    let report = consumer.report();
    assert_ne!(report.status, 0, "the child name differs: {report:?}");
    assert_protocol_kept(&report);
    assert_eq!(report.schema_release_nulled, 1, "moved out and released");
    assert_eq!(
        (report.tasks, report.end_markers, report.on_error_calls),
        (0, 0, 0),
        "spec: after a non-zero on_schema only release follows"
    );
    assert_eq!(pulls.load(Ordering::SeqCst), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_streams_in_parallel_keep_every_c_handler_serialized_and_within_credit() {
    let runs: Vec<_> = (0..12)
        .map(|i| {
            let batches: Vec<RecordBatch> = (0..(5 + i)).map(v_s_batch).collect();
            let (producer, _) = cpu_producer(batches.iter().cloned().map(Ok).collect());
            let options = ConsumerOptions {
                extract_later: i % 3 == 0,
                ..ConsumerOptions::new(&V_S, 1 + i % 4)
            };
            tokio::spawn(async move {
                let (result, consumer) = run_into_c(producer, &options).await;
                result.expect("the stream ends normally");
                consumer.extract_stored();
                (consumer.report(), v_sum(&batches), batches.len() as i64)
            })
        })
        .collect();
    for run in runs {
        let (report, sum, n) = within("a run", run).await.expect("no panic");
        assert_clean(&report);
        assert_eq!((report.tasks, report.batches, report.sum), (n, n, sum));
        assert_eq!(report.end_markers, 1);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn aborting_a_driver_waiting_for_credit_gives_ecanceled_then_release() {
    let (producer, _) = cpu_producer((0..10).map(|i| Ok(v_s_batch(i))).collect());
    let consumer = CAsyncConsumer::new(&ConsumerOptions {
        stall_after: Some(3),
        ..ConsumerOptions::new(&V_S, 1)
    });
    // SAFETY: the C handler stays valid until `consumer` drops, after the
    // aborted driver was dropped (and so released it).
    let driver = tokio::spawn(unsafe { producer.run(consumer.handler()) });
    consumer.wait_tasks(3);
    driver.abort();
    assert!(within("the abort", driver)
        .await
        .unwrap_err()
        .is_cancelled());

    let report = consumer.report();
    assert_clean(&report);
    assert_eq!(report.tasks, 3, "no credit, no task");
    assert_eq!((report.end_markers, report.on_error_calls), (0, 1));
    assert_eq!(report.error_code, libc::ECANCELED);
    assert_eq!(
        report.sum,
        v_sum(&[v_s_batch(0), v_s_batch(1), v_s_batch(2)])
    );
}

/// Spec ("ArrowAsyncProducer Lifetime"): the producer member "MUST be
/// populated before calling any methods other than release": a driver
/// dropped before its first poll still sets it before on_error(ECANCELED).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn dropping_an_unpolled_driver_populates_the_producer_before_on_error() {
    let (producer, _) = cpu_producer(vec![Ok(v_s_batch(0))]);
    let consumer = CAsyncConsumer::new(&ConsumerOptions::new(&V_S, 1));
    // SAFETY: the C handler stays valid until `consumer` drops, after the
    // driver's drop released it.
    drop(unsafe { producer.run(consumer.handler()) });
    let report = consumer.report();
    assert_eq!((report.on_error_calls, report.release_calls), (1, 1));
    assert_eq!(report.error_code, libc::ECANCELED);
    assert_eq!(report.producer_missing, 0, "{report:?}");
}

// ---- C produces, Rust consumes ---------------------------------------------

/// Starts a C producer into a new Rust stream of `queue_size`.
fn from_c(config: AsyncProducerConfig, queue_size: usize) -> (CAsyncProducer, AsyncDeviceStream) {
    let (stream, handler) = AsyncDeviceStream::new(queue_size, ValidationLevel::Full);
    (CAsyncProducer::start(config, handler), stream)
}

async fn next_array(stream: &mut AsyncDeviceStream, index: i64) -> DeviceArray {
    within("the next batch", stream.next())
        .await
        .unwrap_or_else(|| panic!("batch {index} missing"))
        .unwrap_or_else(|e| panic!("batch {index}: {e}"))
}

/// What every run must show once the C thread ended and the Rust side
/// dropped every array: each task extracted exactly once, each array and
/// the schema released once, the handler released once, nothing leaked.
fn assert_all_cleaned_up(c: &AsyncProducerCounters) {
    assert_eq!(c.finished, 1, "{c:?}");
    assert_eq!(c.handler_releases, 1, "{c:?}");
    assert_eq!(c.extract_calls, c.tasks_sent, "{c:?}");
    assert_eq!(c.extract_null + c.extract_moved, c.tasks_sent, "{c:?}");
    assert_eq!(c.extract_repeated, 0, "{c:?}");
    assert_eq!(c.array_releases, c.tasks_sent, "{c:?}");
    assert_eq!(c.child_array_releases, 2 * c.tasks_sent, "{c:?}");
    assert_eq!(c.schema_releases, 1, "{c:?}");
    assert_eq!(c.live_allocations, 0, "{c:?}");
    assert_eq!(c.invalid_requests, 0, "{c:?}");
    assert_eq!((c.on_schema_code, c.on_next_task_code), (0, 0), "{c:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c_producer_batches_arrive_in_order_with_their_values_and_rows_metadata() {
    let (producer, mut stream) = from_c(AsyncProducerConfig::cpu(5, 3), 3);

    let field = within("the schema", stream.wait_schema())
        .await
        .expect("the C schema imports");
    assert_eq!(
        field.data_type(),
        &DataType::Struct(a_b_schema().fields().clone())
    );
    assert_eq!(stream.device_type(), Some(DeviceType::CPU));
    let metadata = stream.additional_metadata().expect("after on_schema");
    assert_eq!(metadata, [("rows".to_string(), "15".to_string())].into());

    let mut arrays = Vec::new();
    for index in 0..5 {
        let array = next_array(&mut stream, index).await;
        assert_eq!(
            (array.device_type(), array.device_id()),
            (DeviceType::CPU, -1)
        );
        arrays.push(array);
    }
    assert!(within("the end", stream.next()).await.is_none());
    assert!(stream.next().await.is_none(), "the stream stays ended");
    producer.join();

    let batches: Vec<RecordBatch> = arrays
        .iter()
        .map(|a| a.to_record_batch().expect("host data"))
        .collect();
    let expected: Vec<RecordBatch> = (0..5).map(|i| expected_c_batch(i, 3)).collect();
    assert_eq!(batches, expected);
    assert_eq!(a_values(&batches), (0..15).collect::<Vec<i32>>());
    assert_eq!(
        producer.counters().array_releases,
        0,
        "the arrays outlive the stream and the producer's thread"
    );
    drop((batches, arrays));

    let c = producer.counters();
    assert_all_cleaned_up(&c);
    assert_eq!((c.tasks_sent, c.end_markers, c.on_error_calls), (5, 1, 0));
    assert_eq!((c.extract_moved, c.extract_null), (5, 0));
    assert_eq!(c.first_request, 3, "queue_size is the first credit");
    assert_eq!(c.cancel_calls, 0);
    assert!(c.max_in_flight <= 3, "{c:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rust_consumer_keeps_the_c_producer_within_queue_size_of_what_it_consumed() {
    let (producer, mut stream) = from_c(AsyncProducerConfig::cpu(12, 2), 2);
    // Before anything is consumed the producer uses all of its credit,
    // then waits.
    producer.wait_delivered(2);

    let mut consumed = 0;
    while let Some(array) = within("the next batch", stream.next()).await {
        let batch = array.expect("imports").to_record_batch().expect("host");
        assert_eq!(batch, expected_c_batch(consumed, 2));
        consumed += 1;
        // A slow consumer: the producer has time to run ahead if it could.
        tokio::time::sleep(Duration::from_millis(1)).await;
        let sent = producer.counters().tasks_sent;
        assert!(sent <= consumed + 2, "{sent} sent, {consumed} consumed");
    }
    assert_eq!(consumed, 12);
    producer.join();

    let c = producer.counters();
    assert_all_cleaned_up(&c);
    assert_eq!((c.tasks_sent, c.end_markers), (12, 1));
    assert_eq!(c.first_request, 2);
    assert_eq!(
        c.max_in_flight, 2,
        "never more than queue_size tasks ahead of the credit given back"
    );
    assert!(
        c.request_calls <= 1 + 12,
        "one request(1) per consumed batch at most: {c:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c_producer_failure_arrives_after_the_batches_before_it_as_a_producer_error() {
    let (producer, mut stream) = from_c(
        AsyncProducerConfig {
            fail_at: 2,
            ..AsyncProducerConfig::cpu(5, 2)
        },
        4,
    );
    let first = next_array(&mut stream, 0).await;
    let second = next_array(&mut stream, 1).await;
    match within("the error", stream.next()).await {
        Some(Err(Error::Producer { code, message })) => {
            assert_eq!(code, libc::EIO);
            assert_eq!(message, "c async producer failed at batch 2");
        }
        other => panic!("expected the producer's EIO, got {other:?}"),
    }
    assert!(stream.next().await.is_none(), "nothing after an error");
    assert_eq!(stream.error_metadata(), Some(HashMap::new()));
    producer.join();

    assert_eq!(
        first.to_record_batch().expect("host"),
        expected_c_batch(0, 2)
    );
    assert_eq!(
        second.to_record_batch().expect("host"),
        expected_c_batch(1, 2)
    );
    drop((first, second, stream));
    let c = producer.counters();
    assert_all_cleaned_up(&c);
    assert_eq!((c.tasks_sent, c.on_error_calls, c.end_markers), (2, 1, 0));
}

/// Consumes one batch of a gated C producer with `queue_size` 4 and two
/// batches let through, drops the stream, then lets everything through.
async fn drop_after_one_batch(drain_after_cancel: bool) -> AsyncProducerCounters {
    let (producer, mut stream) = from_c(
        AsyncProducerConfig {
            gated: 1,
            drain_after_cancel: i32::from(drain_after_cancel),
            ..AsyncProducerConfig::cpu(10, 2)
        },
        4,
    );
    producer.allow(2);
    let first = next_array(&mut stream, 0).await;
    producer.wait_delivered(2);
    assert_eq!(producer.counters().cancel_calls, 0);

    drop(stream);
    // Spec: the consumer calls cancel; ours does it before drop returns.
    assert_eq!(producer.counters().cancel_calls, 1);
    producer.allow(100);
    producer.join();

    assert_eq!(
        first.to_record_batch().expect("host"),
        expected_c_batch(0, 2)
    );
    let c = producer.counters();
    assert_eq!(
        c.array_releases,
        c.tasks_sent - 1,
        "all but `first` released"
    );
    drop(first);
    producer.counters()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_stream_cancels_the_c_producer_and_extracts_every_task_once() {
    let c = drop_after_one_batch(false).await;
    assert_all_cleaned_up(&c);
    assert_eq!(c.tasks_sent, 2);
    assert_eq!(
        (c.extract_moved, c.extract_null),
        (1, 1),
        "the queued task is extracted with NULL"
    );
    assert_eq!((c.on_error_calls, c.end_markers), (0, 0));
    assert_eq!(c.requests_after_cancel, 0, "no request after cancel");
    assert_eq!(c.credit_total, 5, "4, then 1 for the consumed batch");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_arriving_after_the_stream_was_dropped_are_extracted_with_null() {
    let c = drop_after_one_batch(true).await;
    assert_all_cleaned_up(&c);
    // 5 credits, 2 sent before the drop: 3 more after cancel (spec: "finish
    // out any remaining tasks").
    assert_eq!((c.tasks_sent, c.tasks_after_cancel), (5, 3));
    assert_eq!((c.extract_moved, c.extract_null), (1, 4));
    assert_eq!((c.on_error_calls, c.end_markers), (0, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c_producer_declaring_ext_dev_but_sending_cpu_arrays_is_refused_naming_both() {
    let (producer, mut stream) = from_c(
        AsyncProducerConfig {
            device_type: DeviceType::EXT_DEV,
            gated: 1,
            ..AsyncProducerConfig::cpu(3, 2)
        },
        2,
    );
    producer.allow(1);
    within("the schema", stream.wait_schema())
        .await
        .expect("the schema imports");
    assert_eq!(stream.device_type(), Some(DeviceType::EXT_DEV));
    let err = within("the error", stream.next())
        .await
        .expect("an error for batch 0")
        .expect_err("device type mismatch");
    let message = err.to_string();
    assert!(
        message.contains("batch 0") && message.contains("CPU") && message.contains("EXT_DEV"),
        "the error names the batch and both device types: {message}"
    );
    assert!(stream.next().await.is_none());
    // The refusal cancelled the producer.
    assert_eq!(producer.counters().cancel_calls, 1);
    drop(stream);
    producer.join();

    let c = producer.counters();
    assert_all_cleaned_up(&c);
    assert_eq!((c.tasks_sent, c.extract_moved), (1, 1));
    assert_eq!((c.on_error_calls, c.end_markers), (0, 0));
}

//! Per-batch cost of streams on the CPU: this crate's sync device stream
//! against arrow-rs' C stream (`FFI_ArrowArrayStream`), and this crate's
//! async device stream, in one run so the ratios are fair.
//!
//! Each group is one input (a stream of `BATCHES` identical batches); its
//! functions run the whole pipeline, producer and consumer, and report time
//! per batch (criterion's throughput is one element per batch):
//! * `arrow-rs`: `FFI_ArrowArrayStream::new(reader)` →
//!   `RecordBatchStreamReader::try_new` → every batch;
//! * `arrow-device`: `stream::export_reader(reader)` →
//!   `DeviceStreamReader::try_new(.., Default)` → `into_record_batch_reader`
//!   → every batch;
//! * `arrow-device-async`: `export_async_record_batches`
//!   driven into this crate's own handler (`AsyncDeviceStream::new`, queue of
//!   8) on a single-threaded executor → every batch as a record batch.
//!
//! Run `cargo bench -p arrow-device --bench stream`, then
//! `python3 scripts/bench-table.py` for the Markdown table of medians.

use std::hint::black_box;

use arrow_array::ffi_stream::{FFI_ArrowArrayStream, RecordBatchStreamReader};
use arrow_array::{RecordBatch, RecordBatchIterator, RecordBatchReader};
use arrow_device::stream::{
    export_async_record_batches, export_reader, AsyncDeviceStream, DeviceStreamReader,
};
use arrow_device::ValidationLevel;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use futures_util::StreamExt;

mod common;
use common::{configure, mixed_batch};

const BATCHES: usize = 64;

fn reader(batch: &RecordBatch) -> impl RecordBatchReader + Send + 'static {
    let batches: Vec<_> = (0..BATCHES).map(|_| Ok(batch.clone())).collect();
    RecordBatchIterator::new(batches, batch.schema())
}

/// Rows seen, so that no batch can be skipped unread.
fn drain(batches: impl Iterator<Item = RecordBatch>) -> usize {
    batches.map(|batch| black_box(batch).num_rows()).sum()
}

fn arrow_rs(batch: &RecordBatch) -> usize {
    let stream = FFI_ArrowArrayStream::new(Box::new(reader(batch)));
    let batches = RecordBatchStreamReader::try_new(stream).expect("valid stream");
    drain(batches.map(|b| b.expect("valid batch")))
}

fn arrow_device_sync(batch: &RecordBatch) -> usize {
    let stream = export_reader(reader(batch)).expect("exportable schema");
    // SAFETY: the stream comes from this crate's exporter.
    let imported = unsafe { DeviceStreamReader::try_new(stream, ValidationLevel::Default) }
        .expect("valid stream");
    let batches = imported.into_record_batch_reader().expect("CPU stream");
    drain(batches.map(|b| b.expect("valid batch")))
}

/// The async path on one thread: producer driver and consumer polled
/// together, so the figure is the protocol's cost, not thread hand-offs.
fn arrow_device_async(runtime: &tokio::runtime::Runtime, batch: &RecordBatch) -> usize {
    let batches: Vec<_> = (0..BATCHES).map(|_| Ok(batch.clone())).collect();
    let producer = export_async_record_batches(batch.schema(), futures_util::stream::iter(batches))
        .expect("exportable schema");
    let (stream, handler) = AsyncDeviceStream::new(8, ValidationLevel::Default);
    // SAFETY: the handler comes from AsyncDeviceStream::new.
    let driver = unsafe { producer.run(handler.into_raw()) };
    let consume = stream
        .map(|array| {
            array
                .and_then(|a| a.to_record_batch())
                .expect("valid batch")
        })
        .fold(0, |rows, batch| async move {
            rows + black_box(batch).num_rows()
        });
    let (driven, rows) = runtime.block_on(futures_util::future::join(driver, consume));
    driven.expect("the stream ends normally");
    rows
}

fn bench_stream(c: &mut Criterion, name: &str, batch: &RecordBatch) {
    let rows = batch.num_rows() * BATCHES;
    // Every path must read back every row before its speed means anything.
    assert_eq!(arrow_rs(batch), rows);
    assert_eq!(arrow_device_sync(batch), rows);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a runtime");
    assert_eq!(arrow_device_async(&runtime, batch), rows);

    let mut group = configure(c, name);
    group.throughput(Throughput::Elements(BATCHES as u64));
    group.bench_function("arrow-rs", |b| b.iter(|| arrow_rs(black_box(batch))));
    group.bench_function("arrow-device", |b| {
        b.iter(|| arrow_device_sync(black_box(batch)))
    });
    group.bench_function("arrow-device-async", |b| {
        b.iter(|| arrow_device_async(&runtime, black_box(batch)))
    });
    group.finish();
}

fn streams(c: &mut Criterion) {
    bench_stream(c, "stream_3x1k", &mixed_batch(3, 1024));
    bench_stream(c, "stream_100x1k", &mixed_batch(100, 1024));
    bench_stream(c, "stream_3x64k", &mixed_batch(3, 65_536));
}

criterion_group!(benches, streams);
criterion_main!(benches);

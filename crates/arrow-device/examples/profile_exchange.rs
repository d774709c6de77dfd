//! One exchange repeated N times, for instruction counts under callgrind
//! (`scripts/profile.sh`), which repeat exactly where wall-clock medians
//! move by ±5% on a shared machine.
//!
//! `profile_exchange CASE SIDE N`:
//! * CASE: `int64` (1,024 values, every 7th null), `utf8` (1,024 strings),
//!   `batch3`, `batch100` (3 or 100 columns of int64, float64 and utf8);
//! * SIDE: `ours` (export + import at `default` + `to_host`), `ours-export`,
//!   `ours-import` (import at `default` + `to_host` of structs made beforehand),
//!   `arrow-rs` (`to_ffi` + `from_ffi` + `make_array`), `arrow-rs-export`,
//!   `arrow-rs-import`; for the batch cases also `sync-stream`
//!   (`export_reader` → `DeviceStreamReader` → record batches),
//!   `arrow-rs-stream` (`FFI_ArrowArrayStream` → `RecordBatchStreamReader`)
//!   and `async-stream` (this crate's async producer and consumer on one
//!   thread), where N is the number of batches in one stream.
//!
//! Only `measured` is counted (setup such as the structs an import side
//! consumes is made outside it), and the difference between N = 1,001 and
//! N = 1 over 1,000 is the cost of one exchange without first-call costs;
//! `scripts/profile.sh` does that subtraction.
use std::hint::black_box;
use std::sync::Arc;

use arrow_array::ffi::{from_ffi, to_ffi};
use std::ptr::NonNull;

use arrow_array::ffi_stream::{FFI_ArrowArrayStream, RecordBatchStreamReader};
use arrow_array::{
    make_array, Array, ArrayRef, Float64Array, Int64Array, RecordBatch, StringArray, StructArray,
};
use arrow_array::{RecordBatchIterator, RecordBatchReader};
use arrow_buffer::alloc::Allocation;
use arrow_buffer::{Buffer, MutableBuffer};
use arrow_data::ArrayData;
use arrow_device::stream::{
    export_async_record_batches, export_reader, AsyncDeviceStream, DeviceStreamReader,
};
use arrow_device::{export_array, DeviceArray, ValidationLevel};
use arrow_schema::{ArrowError, DataType, Field, Schema};
use futures_util::StreamExt;

fn int64s(len: usize) -> ArrayRef {
    Arc::new(
        (0..len as i64)
            .map(|i| (i % 7 != 0).then_some(i))
            .collect::<Int64Array>(),
    )
}

fn strings(len: usize) -> ArrayRef {
    Arc::new(
        (0..len)
            .map(|i| (i % 13 != 0).then(|| format!("v{i}")))
            .collect::<StringArray>(),
    )
}

fn batch(columns: usize, rows: usize) -> ArrayRef {
    let (fields, arrays): (Vec<Field>, Vec<ArrayRef>) = (0..columns)
        .map(|i| -> (Field, ArrayRef) {
            let name = format!("c{i}");
            match i % 3 {
                0 => (Field::new(name, DataType::Int64, true), int64s(rows)),
                1 => (
                    Field::new(name, DataType::Float64, true),
                    Arc::new(
                        (0..rows)
                            .map(|i| (i % 11 != 0).then_some(i as f64))
                            .collect::<Float64Array>(),
                    ),
                ),
                _ => (Field::new(name, DataType::Utf8, true), strings(rows)),
            }
        })
        .unzip();
    let batch = RecordBatch::try_new(Arc::new(Schema::new(fields)), arrays).expect("columns match");
    Arc::new(StructArray::from(batch))
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let [_, case, side, n] = &args[..] else {
        eprintln!("usage: profile_exchange int64|utf8|batch100 ours|ours-export|ours-import|arrow-rs|arrow-rs-export|arrow-rs-import N");
        std::process::exit(2);
    };
    let n: usize = n.parse().expect("N is a count");
    let array = match case.as_str() {
        "int64" => int64s(1024),
        "utf8" => strings(1024),
        "batch3" => batch(3, 1024),
        "batch100" => batch(100, 1024),
        other => panic!("unknown case {other}"),
    };
    let array = array.as_ref();
    match side.as_str() {
        "ours" => measured(n, || {
            let (c_array, c_schema) = export_array(black_box(array)).expect("exportable");
            // SAFETY: the structs come from this crate's exporter.
            let imported =
                unsafe { DeviceArray::try_new(c_array, c_schema, ValidationLevel::Default) }
                    .expect("valid");
            black_box(imported.to_host().expect("CPU memory"));
        }),
        "ours-export" => measured(n, || {
            black_box(export_array(black_box(array)).expect("exportable"));
        }),
        "ours-import" => {
            let mut exports: Vec<_> = (0..n)
                .map(|_| export_array(array).expect("exportable"))
                .collect();
            measured(n, || {
                let (c_array, c_schema) = exports.pop().expect("one per round");
                // SAFETY: the structs come from this crate's exporter.
                let imported =
                    unsafe { DeviceArray::try_new(c_array, c_schema, ValidationLevel::Default) }
                        .expect("valid");
                black_box(imported.to_host().expect("CPU memory"));
            });
        }
        "arrow-rs" => measured(n, || {
            let (c_array, c_schema) = to_ffi(&black_box(array).to_data()).expect("exportable");
            // SAFETY: arrow-rs' own exporter made the structs.
            let data = unsafe { from_ffi(c_array, &c_schema) }.expect("valid");
            black_box(make_array(data));
        }),
        "arrow-rs-export" => measured(n, || {
            black_box(to_ffi(&black_box(array).to_data()).expect("exportable"));
        }),
        "arrow-rs-import" => {
            let mut exports: Vec<_> = (0..n)
                .map(|_| to_ffi(&array.to_data()).expect("exportable"))
                .collect();
            measured(n, || {
                let (c_array, c_schema) = exports.pop().expect("one per round");
                // SAFETY: arrow-rs' own exporter made the structs.
                let data = unsafe { from_ffi(c_array, &c_schema) }.expect("valid");
                black_box(make_array(data));
            });
        }
        "sync-stream" => {
            let mut batches = Some(batches(array, n));
            measured(1, || {
                let batches = batches.take().expect("one stream");
                let stream = export_reader(batches).expect("exportable schema");
                // SAFETY: the stream comes from this crate's exporter.
                let reader =
                    unsafe { DeviceStreamReader::try_new(stream, ValidationLevel::Default) }
                        .expect("valid stream");
                for batch in reader.into_record_batch_reader().expect("CPU stream") {
                    black_box(batch.expect("valid batch"));
                }
            });
        }
        "arrow-rs-stream" => {
            let mut batches = Some(batches(array, n));
            measured(1, || {
                let batches = batches.take().expect("one stream");
                let stream = FFI_ArrowArrayStream::new(Box::new(batches));
                for batch in RecordBatchStreamReader::try_new(stream).expect("valid stream") {
                    black_box(batch.expect("valid batch"));
                }
            });
        }
        "async-stream" => {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .build()
                .expect("a runtime");
            let mut batches = Some(batches(array, n));
            measured(1, || {
                let batches = batches.take().expect("one stream");
                let producer = export_async_record_batches(
                    batches.schema(),
                    futures_util::stream::iter(batches),
                )
                .expect("exportable schema");
                let (stream, handler) = AsyncDeviceStream::new(8, ValidationLevel::Default);
                // SAFETY: the handler comes from AsyncDeviceStream::new.
                let driver = unsafe { producer.run(handler.into_raw()) };
                let consume = stream.for_each(|array| {
                    black_box(
                        array
                            .and_then(|a| a.to_record_batch())
                            .expect("valid batch"),
                    );
                    std::future::ready(())
                });
                let (driven, ()) = runtime.block_on(futures_util::future::join(driver, consume));
                driven.expect("the stream ends normally");
            });
        }
        "floor" => measured(n, || {
            black_box(floor(black_box(array)));
        }),
        other => panic!("unknown side {other}"),
    }
}

/// `n` copies of the batch case `array`, as a reader.
fn batches(
    array: &dyn Array,
    n: usize,
) -> RecordBatchIterator<std::vec::IntoIter<Result<RecordBatch, ArrowError>>> {
    let batch = RecordBatch::from(
        array
            .as_any()
            .downcast_ref::<StructArray>()
            .expect("a batch case")
            .clone(),
    );
    let schema = batch.schema();
    RecordBatchIterator::new(
        (0..n)
            .map(|_| Ok(batch.clone()))
            .collect::<Vec<_>>()
            .into_iter(),
        schema,
    )
}

/// What any zero-copy exchange that hands back arrow-rs arrays pays
/// whatever its C structs cost: `to_data`, one owner for the exported data,
/// every buffer wrapped over it (`Buffer::from_custom_allocation`), the
/// `ArrayData` tree rebuilt unchecked, `make_array`, and dropping it all.
fn floor(array: &dyn Array) -> ArrayRef {
    fn rebuild(data: &ArrayData, owner: &Arc<dyn Allocation>) -> ArrayData {
        let wrap = |buffer: &Buffer| match NonNull::new(buffer.as_ptr().cast_mut()) {
            // SAFETY: the pointer and length come from a live buffer that
            // `owner` (which holds the exported data) keeps alive.
            Some(ptr) if !buffer.is_empty() => unsafe {
                Buffer::from_custom_allocation(ptr, buffer.len(), owner.clone())
            },
            _ => Buffer::from(MutableBuffer::new(0)),
        };
        let nulls = data.nulls().map(|n| wrap(n.buffer()));
        let buffers = data.buffers().iter().map(wrap).collect();
        let children = data
            .child_data()
            .iter()
            .map(|c| rebuild(c, owner))
            .collect();
        // SAFETY: the same values as `data`, which arrow-rs validated.
        unsafe {
            ArrayData::new_unchecked(
                data.data_type().clone(),
                data.len(),
                data.nulls().map(|n| n.null_count()),
                nulls,
                data.offset(),
                buffers,
                children,
            )
        }
    }
    let exported = Arc::new(array.to_data());
    let owner: Arc<dyn Allocation> = exported.clone();
    make_array(rebuild(&exported, &owner))
}

/// The part callgrind counts (`--toggle-collect=*measured*`): setup such as
/// the exports an import side consumes stays outside.
#[inline(never)]
fn measured(n: usize, mut round: impl FnMut()) {
    for _ in 0..n {
        round();
    }
}

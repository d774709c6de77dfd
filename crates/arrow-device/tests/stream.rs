//! Sync device streams: round trips on the CPU and the emulated device
//! (strict, delayed), the stream's edge cases (no batch, empty batches, early
//! close, an error in the middle, device type and schema mismatches, calls
//! on a released stream), release counts, and the bridges to arrow-rs' C
//! stream.

mod common;

use std::ffi::{c_int, CStr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use arrow_array::ffi_stream::{FFI_ArrowArrayStream, RecordBatchStreamReader};
use arrow_array::{
    ArrayRef, Int32Array, Int64Array, RecordBatch, RecordBatchIterator, RecordBatchReader,
    StringArray,
};
use arrow_device::abi::{raw, ArrowDeviceArray, ArrowDeviceArrayStream, FFI_ArrowSchema};
use arrow_device::device::DeviceRef;
use arrow_device::stream::{
    export_device_arrays, export_reader, export_reader_to, DeviceStreamReader,
};
use arrow_device::{DeviceArray, DeviceType, Error, ValidationLevel};
use arrow_schema::{ArrowError, DataType, Field, Schema, SchemaRef};
use common::{
    all_types, assert_mentions, assert_producer_error, batch_with_metadata, counted_device_array,
    device_array, emulated, Counters,
};

fn ints_and_strings(start: i64, len: usize) -> RecordBatch {
    let ids: Int64Array = (start..start + len as i64).collect();
    let names: StringArray = (0..len)
        .map(|i| (i % 3 != 0).then(|| format!("row {}", start + i as i64)))
        .collect();
    let schema = Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("name", DataType::Utf8, true),
    ]);
    RecordBatch::try_new(Arc::new(schema), vec![Arc::new(ids), Arc::new(names)]).unwrap()
}

fn batches(count: usize, rows: usize) -> Vec<RecordBatch> {
    (0..count)
        .map(|i| ints_and_strings((i * rows) as i64, rows))
        .collect()
}

fn reader_of(batches: Vec<RecordBatch>, schema: SchemaRef) -> impl RecordBatchReader + Send {
    RecordBatchIterator::new(batches.into_iter().map(Ok), schema)
}

/// A reader of `input`, declaring the first batch's schema.
fn input_reader(input: &[RecordBatch]) -> impl RecordBatchReader + Send {
    reader_of(input.to_vec(), input[0].schema())
}

/// `reader` exported as a stream: zero-copy on the CPU when `device` is
/// `None`, else copied onto `device` batch by batch.
fn export_on(
    reader: impl RecordBatchReader + Send + 'static,
    device: Option<&DeviceRef>,
) -> ArrowDeviceArrayStream {
    match device {
        None => export_reader(reader),
        Some(device) => export_reader_to(reader, device),
    }
    .unwrap()
}

/// `input` exported as a stream, as [`export_on`] does.
fn export_batches(input: &[RecordBatch], device: Option<&DeviceRef>) -> ArrowDeviceArrayStream {
    export_on(input_reader(input), device)
}

/// The struct field of a stream of `schema`'s record batches.
fn struct_field(schema: &Schema) -> Field {
    Field::new("", DataType::Struct(schema.fields().clone()), false)
}

fn import(stream: ArrowDeviceArrayStream) -> DeviceStreamReader {
    // SAFETY: streams in these tests come from this crate's exporters.
    unsafe { DeviceStreamReader::try_new(stream, ValidationLevel::Full) }.unwrap()
}

/// Every batch of a CPU stream, read through arrow-rs' `RecordBatchReader`.
fn read_record_batches(reader: DeviceStreamReader) -> Vec<RecordBatch> {
    reader
        .into_record_batch_reader()
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

fn read_all(stream: ArrowDeviceArrayStream) -> Vec<RecordBatch> {
    import(stream)
        .into_host_reader()
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

/// The message `get_last_error` gives for the stream's last failed call.
///
/// # Safety
/// `stream` is a live stream of this crate's exporter whose last call failed.
unsafe fn last_error(stream: &mut ArrowDeviceArrayStream) -> String {
    let get_last_error = raw::device_stream(stream).get_last_error.unwrap();
    // SAFETY: per the contract, the callback is the exporter's own and it
    // returns a NUL-terminated message valid until the next call.
    unsafe { CStr::from_ptr(get_last_error(stream)) }
        .to_str()
        .unwrap()
        .to_owned()
}

/// Counts calls of a stream's release callback, forwarding every callback
/// to the producer's.
struct StreamCount {
    /// The producer's struct as it was before wrapping (never dropped: the
    /// outer struct's release releases it).
    inner: std::mem::ManuallyDrop<ArrowDeviceArrayStream>,
    count: Arc<AtomicUsize>,
}

fn count_stream_releases(stream: &mut ArrowDeviceArrayStream) -> Arc<AtomicUsize> {
    let count = Arc::new(AtomicUsize::new(0));
    let device_type = stream.device_type();
    // A move (spec: "Moving a stream"): `stream` is left released.
    let inner = std::mem::replace(stream, ArrowDeviceArrayStream::empty());
    let wrapped = StreamCount {
        inner: std::mem::ManuallyDrop::new(inner),
        count: count.clone(),
    };
    // SAFETY: callbacks that forward to the producer's stream, kept in
    // `private_data`, which `release_counted_stream` frees.
    let outer = unsafe { raw::device_stream_mut(stream) };
    outer.device_type = device_type;
    outer.private_data = Box::into_raw(Box::new(wrapped)).cast();
    outer.release = Some(release_counted_stream);
    outer.get_schema = Some(forward_get_schema);
    outer.get_next = Some(forward_get_next);
    outer.get_last_error = Some(forward_get_last_error);
    count
}

/// Runs `call` on the producer's own stream.
///
/// # Safety
/// `stream` was wrapped by `count_stream_releases` and is not released.
unsafe fn as_inner<T>(
    stream: *mut ArrowDeviceArrayStream,
    call: impl FnOnce(&mut ArrowDeviceArrayStream) -> T,
) -> T {
    // SAFETY: per the contract, private_data is our StreamCount.
    let wrapped = unsafe {
        &mut *raw::device_stream(&*stream)
            .private_data
            .cast::<StreamCount>()
    };
    call(&mut wrapped.inner)
}

unsafe extern "C" fn forward_get_schema(
    stream: *mut ArrowDeviceArrayStream,
    out: *mut FFI_ArrowSchema,
) -> c_int {
    // SAFETY: forwarded to the producer's callback on its own private data.
    unsafe {
        as_inner(stream, |s| {
            (raw::device_stream(s).get_schema.unwrap())(s, out)
        })
    }
}

unsafe extern "C" fn forward_get_next(
    stream: *mut ArrowDeviceArrayStream,
    out: *mut ArrowDeviceArray,
) -> c_int {
    // SAFETY: as above.
    unsafe {
        as_inner(stream, |s| {
            (raw::device_stream(s).get_next.unwrap())(s, out)
        })
    }
}

unsafe extern "C" fn forward_get_last_error(
    stream: *mut ArrowDeviceArrayStream,
) -> *const std::ffi::c_char {
    // SAFETY: as above.
    unsafe {
        as_inner(stream, |s| {
            (raw::device_stream(s).get_last_error.unwrap())(s)
        })
    }
}

unsafe extern "C" fn release_counted_stream(stream: *mut ArrowDeviceArrayStream) {
    // SAFETY: the consumer passes the wrapped stream.
    // Writing NULL `release` and `private_data` leaves a released struct.
    let outer = unsafe { raw::device_stream_mut(&mut *stream) };
    // SAFETY: boxed by count_stream_releases, taken back once (the outer
    // struct is marked released below).
    let mut wrapped = unsafe { Box::from_raw(outer.private_data.cast::<StreamCount>()) };
    outer.release = None;
    outer.private_data = std::ptr::null_mut();
    // SAFETY: taken out of the ManuallyDrop once; dropping it releases the
    // producer's stream.
    let inner = unsafe { std::mem::ManuallyDrop::take(&mut wrapped.inner) };
    drop(inner);
    wrapped.count.fetch_add(1, Ordering::SeqCst);
}

#[test]
fn many_batches_round_trip_on_the_cpu() {
    let input = batches(50, 100);
    let stream = export_batches(&input, None);
    assert_eq!(stream.device_type(), DeviceType::CPU);
    let reader = import(stream);
    assert_eq!(reader.schema(), Some(input[0].schema()));
    assert_eq!(read_record_batches(reader), input);
}

#[test]
fn every_type_and_the_schema_metadata_round_trip_on_the_cpu_and_the_emulated_device() {
    for (name, array) in all_types() {
        let schema = Arc::new(Schema::new(vec![Field::new(
            &name,
            array.data_type().clone(),
            true,
        )]));
        let batch = RecordBatch::try_new(schema.clone(), vec![array]).unwrap();
        let head = batch.num_rows().min(1);
        let input = vec![
            batch.slice(0, head),
            batch.slice(head, batch.num_rows() - head),
            batch_slices_end(&batch),
        ];
        for device in [None, Some(emulated(3))] {
            let stream = export_on(reader_of(input.clone(), schema.clone()), device.as_ref());
            let output = read_all(stream);
            assert_eq!(output.len(), input.len(), "{name} on {device:?}");
            for (found, expected) in output.iter().zip(&input) {
                common::assert_same(&name, expected.column(0), found.column(0));
            }
        }
    }

    let with_metadata = batch_with_metadata();
    let stream = export_batches(std::slice::from_ref(&with_metadata), Some(&emulated(3)));
    let reader = import(stream);
    assert_eq!(reader.schema(), Some(with_metadata.schema()));
    let output = reader.into_host_reader().unwrap().next().unwrap().unwrap();
    assert_eq!(output, with_metadata);
}

fn batch_slices_end(batch: &RecordBatch) -> RecordBatch {
    batch.slice(batch.num_rows(), 0)
}

#[test]
fn device_batches_arrive_on_the_device_with_their_own_event() {
    let device = emulated(4);
    let input = batches(5, 1000);
    let stream = export_batches(&input, Some(&device));
    assert_eq!(stream.device_type(), DeviceType::EXT_DEV);
    let mut reader = import(stream);
    assert!(matches!(
        reader.into_record_batch_reader(),
        Err(Error::NotSupported(message)) if message.contains("into_host_reader")
    ));
    reader = import(export_batches(&input, Some(&device)));
    let mut events = Vec::new();
    let mut alive = Vec::new();
    for (expected, array) in input.iter().zip(&mut reader) {
        let array = array.unwrap();
        assert_eq!(
            (array.device_type(), array.device_id()),
            (DeviceType::EXT_DEV, 4)
        );
        assert!(!array.sync_event().is_null(), "each copy has an event");
        events.push(array.sync_event());
        assert_eq!(&array.to_record_batch().unwrap(), expected);
        alive.push(array); // so that no event's address is reused
    }
    assert!(reader.next().is_none());
    events.sort();
    events.dedup();
    assert_eq!(events.len(), input.len(), "one event per batch");
}

#[test]
fn a_stream_without_batches_has_a_schema_and_ends_at_once() {
    let schema = Arc::new(Schema::new(vec![Field::new("x", DataType::Utf8, true)]));
    for device in [None, Some(emulated(5))] {
        let stream = export_on(reader_of(vec![], schema.clone()), device.as_ref());
        let mut imported = import(stream);
        assert_eq!(imported.schema(), Some(schema.clone()));
        assert!(imported.next().is_none());
        assert!(imported.next().is_none(), "the end is sticky");
    }
}

#[test]
fn zero_row_batches_and_a_zero_column_schema_stream_through() {
    let empty_rows = ints_and_strings(0, 0);
    let input = vec![empty_rows.clone(), ints_and_strings(0, 3), empty_rows];
    for device in [None, Some(emulated(5))] {
        assert_eq!(read_all(export_batches(&input, device.as_ref())), input);
    }

    let no_columns = Arc::new(Schema::empty());
    let batch = RecordBatch::try_new_with_options(
        no_columns.clone(),
        vec![],
        &arrow_array::RecordBatchOptions::new().with_row_count(Some(7)),
    )
    .unwrap();
    let stream = export_on(reader_of(vec![batch.clone()], no_columns), None);
    assert_eq!(read_all(stream), [batch]);
}

/// A source that counts the batches pulled from it and whether it was
/// dropped.
struct Counted<I> {
    inner: I,
    pulled: Arc<AtomicUsize>,
    dropped: Arc<AtomicUsize>,
}

impl<I: Iterator> Iterator for Counted<I> {
    type Item = I::Item;
    fn next(&mut self) -> Option<I::Item> {
        self.pulled.fetch_add(1, Ordering::SeqCst);
        self.inner.next()
    }
}

impl<I> Drop for Counted<I> {
    fn drop(&mut self) {
        self.dropped.fetch_add(1, Ordering::SeqCst);
    }
}

/// Device arrays whose root structs count their releases.
fn counted_device_arrays(input: &[RecordBatch]) -> (Vec<DeviceArray>, Vec<Arc<Counters>>) {
    input
        .iter()
        .map(|batch| counted_device_array(batch, ValidationLevel::Default))
        .unzip()
}

#[test]
fn closing_early_releases_the_stream_the_source_and_every_batch_once() {
    let input = batches(10, 10);
    let (arrays, counters) = counted_device_arrays(&input);
    let field = struct_field(&input[0].schema());
    let pulled = Arc::new(AtomicUsize::new(0));
    let dropped = Arc::new(AtomicUsize::new(0));
    let source = Counted {
        inner: arrays.into_iter().map(Ok),
        pulled: pulled.clone(),
        dropped: dropped.clone(),
    };
    let mut stream = export_device_arrays(field, DeviceType::CPU, source).unwrap();
    let releases = count_stream_releases(&mut stream);
    let mut reader = import(stream);
    let first_two: Vec<_> = reader.by_ref().take(2).map(|a| a.unwrap()).collect();
    assert_eq!(pulled.load(Ordering::SeqCst), 2, "no read-ahead");
    drop(reader);
    assert_eq!(releases.load(Ordering::SeqCst), 1);
    assert_eq!(
        dropped.load(Ordering::SeqCst),
        1,
        "release drops the source"
    );
    // The two batches read stay valid after the stream is gone.
    for (array, expected) in first_two.iter().zip(&input) {
        assert_eq!(&array.to_record_batch().unwrap(), expected);
    }
    drop(first_two);
    for (i, c) in counters.iter().enumerate() {
        assert_eq!(c.array_releases(), 1, "batch {i}");
        assert_eq!(c.schema_releases(), 1, "batch {i}");
    }
}

#[test]
fn reading_to_the_end_releases_the_stream_at_the_end_exactly_once() {
    let input = batches(3, 4);
    let mut stream = export_batches(&input, None);
    let releases = count_stream_releases(&mut stream);
    let mut reader = import(stream);
    assert_eq!(reader.by_ref().count(), 3);
    assert_eq!(releases.load(Ordering::SeqCst), 1, "released at the end");
    assert!(reader.next().is_none());
    drop(reader);
    assert_eq!(releases.load(Ordering::SeqCst), 1, "not again on drop");
}

fn failing_reader(good: usize, message: &str) -> impl RecordBatchReader + Send {
    let input = batches(good, 5);
    let schema = input[0].schema();
    let message = message.to_string();
    let items = input
        .into_iter()
        .map(Ok)
        .chain(std::iter::once(Err(ArrowError::IoError(
            message,
            std::io::Error::other("disk"),
        ))))
        .chain(batches(2, 5).into_iter().map(Ok));
    RecordBatchIterator::new(items, schema)
}

#[test]
fn an_error_in_the_middle_reaches_the_consumer_with_its_message_and_ends_the_stream() {
    for device in [None, Some(emulated(6))] {
        let mut stream = export_on(
            failing_reader(3, "disk on fire at byte 4096"),
            device.as_ref(),
        );
        let releases = count_stream_releases(&mut stream);
        let mut imported = import(stream);
        for _ in 0..3 {
            imported.next().unwrap().unwrap();
        }
        let err = imported.next().unwrap().unwrap_err();
        // An I/O error keeps its errno.
        assert_producer_error(&err, libc::EIO, "disk on fire at byte 4096");
        assert!(
            err.to_string().starts_with("producer error 5 (EIO): "),
            "{err}"
        );
        assert_eq!(
            releases.load(Ordering::SeqCst),
            1,
            "released after the error"
        );
        assert!(imported.next().is_none(), "the reader stays ended");
    }
}

#[test]
fn the_c_callbacks_report_errors_through_get_last_error_until_the_next_call() {
    let mut stream = export_on(failing_reader(1, "boom"), None);
    let get_next = raw::device_stream(&stream).get_next.unwrap();
    let get_last_error = raw::device_stream(&stream).get_last_error.unwrap();
    let mut out = ArrowDeviceArray::empty();
    // SAFETY: our exporter's callbacks on its own stream.
    unsafe {
        assert_eq!(get_next(&mut stream, &mut out), 0);
        assert!(!out.is_released());
        assert!(
            get_last_error(&mut stream).is_null(),
            "no error after a success"
        );
        drop(std::mem::replace(&mut out, ArrowDeviceArray::empty()));

        assert_eq!(get_next(&mut stream, &mut out), libc::EIO);
        assert!(out.is_released(), "nothing written on error");
        let message = last_error(&mut stream);
        assert!(message.contains("boom"), "{message}");

        // A consumer that calls again gets the failure again, not data.
        assert_eq!(get_next(&mut stream, &mut out), libc::EIO);
        let message = last_error(&mut stream);
        assert!(message.contains("failed earlier"), "{message}");

        assert_eq!(get_next(&mut stream, std::ptr::null_mut()), libc::EINVAL);
        assert_eq!(last_error(&mut stream), "stream: get_next's out is NULL");
    }
}

#[test]
fn a_released_stream_refuses_every_call() {
    let input = batches(1, 1);
    let mut stream = export_batches(&input, None);
    let (get_schema, get_next, get_last_error, release) = (
        raw::device_stream(&stream).get_schema.unwrap(),
        raw::device_stream(&stream).get_next.unwrap(),
        raw::device_stream(&stream).get_last_error.unwrap(),
        raw::device_stream(&stream).release.unwrap(),
    );
    // SAFETY: our callbacks, on a struct that stays allocated; the spec
    // forbids these calls, and they must not touch freed memory.
    unsafe {
        release(&mut stream);
        assert!(stream.is_released());
        assert!(raw::device_stream(&stream).private_data.is_null());
        let mut schema = FFI_ArrowSchema::empty();
        assert_eq!(get_schema(&mut stream, &mut schema), libc::EINVAL);
        let mut out = ArrowDeviceArray::empty();
        assert_eq!(get_next(&mut stream, &mut out), libc::EINVAL);
        assert!(get_last_error(&mut stream).is_null());
        release(&mut stream); // a second release is a no-op
        release(std::ptr::null_mut());
    }
    // SAFETY: as above; a released stream is refused by the importer.
    let err = unsafe { DeviceStreamReader::try_new(stream, ValidationLevel::Default) }.unwrap_err();
    assert_mentions(&err, "released");
}

#[test]
fn get_schema_can_be_called_many_times_and_each_schema_is_the_consumers() {
    let input = batches(1, 1);
    let mut stream = export_batches(&input, None);
    let get_schema = raw::device_stream(&stream).get_schema.unwrap();
    for _ in 0..3 {
        let mut schema = FFI_ArrowSchema::empty();
        // SAFETY: our exporter's callback on its own stream.
        assert_eq!(unsafe { get_schema(&mut stream, &mut schema) }, 0);
        let imported = arrow_device::schema::import_schema(&schema).unwrap();
        assert_eq!(&imported, input[0].schema().as_ref());
    }
}

#[test]
fn a_batch_on_another_device_type_than_the_stream_is_rejected_on_both_sides() {
    // Producer side: an iterator of CPU arrays declared as an EXT_DEV stream.
    let input = batches(2, 3);
    let (arrays, counters) = counted_device_arrays(&input);
    let field = struct_field(&input[0].schema());
    let stream =
        export_device_arrays(field, DeviceType::EXT_DEV, arrays.into_iter().map(Ok)).unwrap();
    let mut reader = import(stream);
    let err = reader.next().unwrap().unwrap_err();
    assert_mentions(
        &err,
        "batch 0 is on device type CPU, expected the stream's EXT_DEV",
    );
    assert!(reader.next().is_none());
    drop(reader);
    assert!(counters.iter().all(|c| c.array_releases() == 1));

    // Consumer side: a producer that says EXT_DEV and sends CPU arrays.
    let mut stream = export_batches(&input, None);
    // SAFETY: only the device type changes; the callbacks stay the exporter's.
    unsafe { raw::device_stream_mut(&mut stream) }.device_type = DeviceType::EXT_DEV;
    let mut reader = import(stream);
    let err = reader.next().unwrap().unwrap_err();
    assert_eq!(
        err.to_string(),
        "stream: batch 0 is on device type CPU, expected the stream's EXT_DEV"
    );
    assert!(reader.next().is_none());
}

#[test]
fn a_batch_of_another_type_than_the_schema_is_rejected_before_it_leaves() {
    // Device arrays of int32 in a stream declared as int64.
    let ints = Int32Array::from(vec![1, 2, 3]);
    let stream = export_device_arrays(
        Field::new("", DataType::Int64, true),
        DeviceType::CPU,
        std::iter::once(Ok(device_array(&ints, ValidationLevel::Default))),
    )
    .unwrap();
    let mut reader = import(stream);
    assert_eq!(reader.field().data_type(), &DataType::Int64);
    let err = reader.next().unwrap().unwrap_err();
    assert_mentions(
        &err,
        "batch 0 has data type Int32, expected the stream's Int64",
    );

    // A record batch reader whose batches do not match its schema.
    let declared = ints_and_strings(0, 1).schema();
    let other = RecordBatch::try_from_iter([("x", Arc::new(ints) as ArrayRef)]).unwrap();
    let items = vec![Ok(ints_and_strings(0, 2)), Ok(other)];
    let stream = export_on(RecordBatchIterator::new(items, declared), None);
    let mut reader = import(stream);
    reader.next().unwrap().unwrap();
    let err = reader.next().unwrap().unwrap_err();
    assert_mentions(&err, "batch 1 has data type");
}

/// Wraps a stream so that batch `corrupt` comes out with a length its
/// buffers cannot back.
unsafe extern "C" fn corrupting_get_next(
    stream: *mut ArrowDeviceArrayStream,
    out: *mut ArrowDeviceArray,
) -> c_int {
    // SAFETY: as in forward_get_next.
    let code = unsafe { forward_get_next(stream, out) };
    // SAFETY: `out` was just filled by our exporter.
    let out = unsafe { &mut *out };
    if code == 0 && !out.is_released() {
        let length = &mut raw::array_mut(&mut out.array).length;
        if *length == 2 {
            *length = 1_000_000;
        }
    }
    code
}

#[test]
fn a_malformed_batch_is_rejected_naming_the_batch_and_the_defect() {
    let input = vec![ints_and_strings(0, 1), ints_and_strings(1, 2)];
    let mut stream = export_batches(&input, None);
    let releases = count_stream_releases(&mut stream);
    // SAFETY: `corrupting_get_next` forwards to the wrapped producer.
    unsafe { raw::device_stream_mut(&mut stream) }.get_next = Some(corrupting_get_next);
    let mut reader = import(stream);
    assert_eq!(reader.next().unwrap().unwrap().len(), 1);
    let err = reader.next().unwrap().unwrap_err();
    let text = err.to_string();
    assert!(text.starts_with("batch 1: "), "{text}");
    assert!(text.contains("1000000"), "{text}");
    assert_eq!(releases.load(Ordering::SeqCst), 1);
    assert!(reader.next().is_none());
}

#[test]
fn a_stream_of_plain_arrays_is_not_a_record_batch_reader() {
    let ints = Int64Array::from(vec![1, 2]);
    let stream = export_device_arrays(
        Field::new("v", DataType::Int64, true),
        DeviceType::CPU,
        std::iter::once(Ok(device_array(&ints, ValidationLevel::Default))),
    )
    .unwrap();
    let reader = import(stream);
    assert_eq!(reader.schema(), None);
    let err = reader.into_record_batch_reader().unwrap_err();
    assert_mentions(&err, "struct arrays, found Int64");

    let stream = export_device_arrays(
        Field::new("v", DataType::Int64, true),
        DeviceType::CPU,
        std::iter::empty(),
    )
    .unwrap();
    assert_eq!(import(stream).field().name(), "v");
}

#[test]
fn c_streams_bridge_to_device_streams_and_back() {
    let input = batches(4, 25);
    let c_stream = FFI_ArrowArrayStream::new(Box::new(input_reader(&input)));
    let device_stream = ArrowDeviceArrayStream::try_from(c_stream).unwrap();
    assert_eq!(device_stream.device_type(), DeviceType::CPU);
    assert_eq!(read_all(device_stream), input);

    let device_stream = export_batches(&input, None);
    let c_stream = FFI_ArrowArrayStream::try_from(device_stream).unwrap();
    let output: Vec<_> = RecordBatchStreamReader::try_new(c_stream)
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(output, input);
}

#[test]
fn bridges_carry_errors_with_code_and_message_both_ways() {
    // arrow-rs' C stream -> ours: arrow-rs reports EIO for IoError.
    let c_stream = FFI_ArrowArrayStream::new(Box::new(failing_reader(2, "upstream broke")));
    let mut reader = import(ArrowDeviceArrayStream::try_from(c_stream).unwrap());
    reader.next().unwrap().unwrap();
    reader.next().unwrap().unwrap();
    let err = reader.next().unwrap().unwrap_err();
    assert_producer_error(&err, libc::EIO, "upstream broke");

    // Ours -> arrow-rs' C stream reader.
    let c_stream =
        FFI_ArrowArrayStream::try_from(export_on(failing_reader(1, "ours broke"), None)).unwrap();
    let mut reader = RecordBatchStreamReader::try_new(c_stream).unwrap();
    reader.next().unwrap().unwrap();
    let err = reader.next().unwrap().unwrap_err();
    assert_mentions(&err, "ours broke");
}

#[test]
fn only_cpu_device_streams_become_c_streams() {
    let input = batches(1, 2);
    let device = emulated(7);
    let stream = export_batches(&input, Some(&device));
    let err = FFI_ArrowArrayStream::try_from(stream).unwrap_err();
    assert_mentions(&err, "EXT_DEV");

    // A CPU stream that sends a device batch anyway fails that get_next.
    let mut stream = export_batches(&input, Some(&device));
    // SAFETY: only the device type changes; the callbacks stay the exporter's.
    unsafe { raw::device_stream_mut(&mut stream) }.device_type = DeviceType::CPU;
    let mut reader =
        RecordBatchStreamReader::try_new(FFI_ArrowArrayStream::try_from(stream).unwrap()).unwrap();
    let err = reader.next().unwrap().unwrap_err();
    assert_mentions(&err, "carries CPU arrays");

    let released = ArrowDeviceArrayStream::empty();
    assert!(FFI_ArrowArrayStream::try_from(released).is_err());
    assert!(ArrowDeviceArrayStream::try_from(FFI_ArrowArrayStream::empty()).is_err());
}

#[test]
fn a_stream_moved_by_the_consumer_keeps_working() {
    let input = batches(3, 2);
    let mut original = export_batches(&input, None);
    // SAFETY: `original` is a live stream; the move leaves it released.
    let reader =
        unsafe { DeviceStreamReader::try_from_raw(&mut original, ValidationLevel::Full) }.unwrap();
    assert!(original.is_released());
    assert_eq!(read_record_batches(reader), input);
    // SAFETY: NULL is refused.
    assert!(unsafe {
        DeviceStreamReader::try_from_raw(std::ptr::null_mut(), ValidationLevel::Full)
    }
    .is_err());
}

#[test]
fn types_without_a_c_form_are_refused_when_the_stream_is_made() {
    let field = struct_field(&Schema::new(vec![Field::new("x", DataType::Int8, true)]));
    assert!(export_device_arrays(field, DeviceType::CPU, std::iter::empty()).is_ok());
    let schema = Arc::new(Schema::new(vec![Field::new(
        "bad",
        DataType::Dictionary(Box::new(DataType::Utf8), Box::new(DataType::Utf8)),
        true,
    )]));
    let err = export_reader(reader_of(vec![], schema)).expect_err("refused");
    assert_mentions(&err, "Utf8");
}

/// A producer's `get_schema` that returns 0 without writing a schema.
unsafe extern "C" fn schemaless_get_schema(
    _stream: *mut ArrowDeviceArrayStream,
    _out: *mut FFI_ArrowSchema,
) -> c_int {
    0
}

unsafe extern "C" fn schemaless_c_get_schema(
    _stream: *mut raw::ArrowArrayStream,
    _out: *mut FFI_ArrowSchema,
) -> c_int {
    0
}

/// A producer whose `get_schema` succeeds without writing a schema: the
/// device-to-C bridge refuses to hand the released schema on as a success
/// (arrow-rs' reader asserted on it, a panic where an error belongs), and
/// the wrapped stream is still released once; our own reader refuses it as
/// invalid data. Found by the sync_stream fuzz target.
#[test]
fn a_bridged_get_schema_that_writes_no_schema_is_an_error_not_a_released_schema() {
    let input = batches(1, 2);
    let mut stream = export_batches(&input, None);
    let releases = count_stream_releases(&mut stream);
    // SAFETY: the replacement callback touches nothing.
    unsafe { raw::device_stream_mut(&mut stream) }.get_schema = Some(schemaless_get_schema);
    let c_stream = FFI_ArrowArrayStream::try_from(stream).unwrap();
    let err = RecordBatchStreamReader::try_new(c_stream).unwrap_err();
    assert_mentions(&err, "get_schema returned 0 but left the schema released");
    assert_eq!(releases.load(Ordering::SeqCst), 1);

    // The other way, the bridge hands the answer on as it comes, and our
    // reader refuses the released schema as invalid data.
    let mut c_stream = FFI_ArrowArrayStream::new(Box::new(input_reader(&input)));
    // SAFETY: the replacement callback touches nothing; the reader's own
    // release still frees it.
    unsafe { raw::stream_mut(&mut c_stream) }.get_schema = Some(schemaless_c_get_schema);
    let bridged = ArrowDeviceArrayStream::try_from(c_stream).unwrap();
    // SAFETY: the bridge's stream, live, from a conforming C stream but for
    // the schema it leaves released.
    match unsafe { DeviceStreamReader::try_new(bridged, ValidationLevel::Default) } {
        Err(err @ Error::Invalid { .. }) => assert_mentions(&err, "released"),
        Err(other) => panic!("expected Error::Invalid, got {other:?}"),
        Ok(_) => panic!("a released schema was accepted"),
    }
}

//! The sync device stream (spec: "Device Stream Interface") across the C
//! boundary, both ways:
//!
//! - streams exported by `export_reader`, `export_reader_to` and
//!   `export_device_arrays` are read by the C consumer of `c/stream.c`, which
//!   sums CPU data by hand, reads only the metadata of device data, gets the
//!   Rust error's code and message mid-stream, and finds the stream and every
//!   batch released by their callbacks;
//! - the hand-written C producer of `c/stream.c` is read by
//!   `DeviceStreamReader` (and through `into_record_batch_reader` and
//!   `FFI_ArrowArrayStream::try_from`): values arrive intact, its errors and its
//!   spec violations surface as errors naming what broke, and each of its
//!   arrays, schemas and the stream is released exactly once.

use arrow_array::ffi_stream::RecordBatchStreamReader;
use arrow_array::{RecordBatch, RecordBatchIterator};
use arrow_device::abi::{raw, ArrowDeviceArrayStream, FFI_ArrowArrayStream};
use arrow_device::device::DeviceRef;
use arrow_device::stream::{
    export_device_arrays, export_reader, export_reader_to, DeviceStreamReader,
};
use arrow_device::{export_record_batch_to, DeviceArray, DeviceType, Error, ValidationLevel};
use arrow_schema::{ArrowError, DataType, Field};
use c_interop_tests::stream::{
    c_stream, consume_stream_in_c, ProducerCounters, StreamConfig, StreamCounters, StreamReport,
};

mod common;

use common::{
    a_b_schema, a_values, emulated, expected_c_batch, v_s_batch, v_s_schema, v_sum, CPU, EXT_DEV,
    V_S,
};

// ---- Rust produces, C consumes ---------------------------------------------

fn reader_of(
    batches: Vec<Result<RecordBatch, ArrowError>>,
) -> RecordBatchIterator<std::vec::IntoIter<Result<RecordBatch, ArrowError>>> {
    RecordBatchIterator::new(batches.into_iter(), v_s_schema())
}

/// What every C read of a Rust stream must show: no failed check, the
/// schema, every batch and the stream released through callbacks that
/// marked them released, and the Rust struct left released with all its
/// callbacks NULL.
fn assert_clean_read(report: &StreamReport, stream: &ArrowDeviceArrayStream) {
    assert_eq!(
        report.status, 0,
        "stream.c failed the check at line {}: {report:?}",
        report.status
    );
    assert_eq!(report.schema_release_nulled, 1, "{report:?}");
    assert_eq!(
        report.batches_release_nulled, report.batches,
        "every batch's release must set release to NULL: {report:?}"
    );
    assert_eq!(report.stream_release_nulled, 1, "{report:?}");
    assert_eq!(report.device_type_mismatches, 0, "{report:?}");
    assert_released_with_null_callbacks(stream);
}

fn assert_released_with_null_callbacks(stream: &ArrowDeviceArrayStream) {
    assert!(stream.is_released());
    let stream = raw::device_stream(stream);
    assert!(stream.get_schema.is_none(), "get_schema after release");
    assert!(stream.get_next.is_none(), "get_next after release");
    assert!(
        stream.get_last_error.is_none(),
        "get_last_error after release"
    );
    assert!(stream.private_data.is_null(), "private_data after release");
}

#[test]
fn c_consumer_sums_every_batch_of_a_cpu_stream_and_reads_a_kept_batch_after_release() {
    let mut batches: Vec<RecordBatch> = (0..5).map(v_s_batch).collect();
    // A sliced batch: its columns arrive with a non-zero offset.
    batches[3] = batches[3].slice(1, 3);
    let expected_sum = v_sum(&batches);
    let mut stream =
        export_reader(reader_of(batches.iter().cloned().map(Ok).collect())).expect("export_reader");

    let report = consume_stream_in_c(&mut stream, &V_S, Some(2));

    assert_clean_read(&report, &stream);
    assert_eq!(report.stream_device_type, CPU);
    assert_eq!(report.code, 0, "{report:?}");
    assert_eq!(report.batches, 5);
    assert_eq!(report.lengths(), [4, 4, 4, 3, 4]);
    assert_eq!(report.total_rows, 19);
    assert_eq!(report.n_children(), [2; 5]);
    assert_eq!(report.device_ids(), [-1; 5]);
    assert_eq!(report.sync_events, 0, "CPU batches carry no sync_event");
    assert_eq!(report.sum, expected_sum);
    // Per batch: 0+2+3, 100+102+103, 200+202+203, (sliced: null)+302+303,
    // 400+402+403; the -999 under each null never counts.
    assert_eq!(expected_sum, 5 + 305 + 605 + 605 + 1205);
    assert_eq!(report.kept_after_stream_release, 1);
    assert_eq!(
        report.kept_sum,
        200 + 202 + 203,
        "batch 2, moved out and read after the stream's release, keeps its values"
    );
    assert_eq!(report.kept_release_nulled, 1);
}

#[test]
fn c_consumer_sees_the_end_of_an_empty_stream_after_its_schema() {
    let mut stream = export_reader(reader_of(vec![])).expect("export_reader");
    let report = consume_stream_in_c(&mut stream, &V_S, None);
    assert_clean_read(&report, &stream);
    assert_eq!((report.batches, report.total_rows, report.code), (0, 0, 0));
}

#[test]
fn c_consumer_reads_only_metadata_of_an_emulated_device_stream() {
    let device = emulated(5);
    let batches: Vec<RecordBatch> = (0..3).map(v_s_batch).collect();
    let mut stream = export_reader_to(reader_of(batches.into_iter().map(Ok).collect()), &device)
        .expect("export_reader_to");
    assert_eq!(stream.device_type(), DeviceType::EXT_DEV);

    // Strict mode: had the C consumer read a buffer, the process would have
    // crashed with SIGSEGV.
    let report = consume_stream_in_c(&mut stream, &V_S, Some(1));

    assert_clean_read(&report, &stream);
    assert_eq!(report.stream_device_type, EXT_DEV);
    assert_eq!(report.batches, 3);
    assert_eq!(report.lengths(), [4, 4, 4]);
    assert_eq!(report.device_ids(), [5, 5, 5]);
    assert_eq!(
        report.sync_events, 3,
        "each batch copied onto the device carries its copy's event"
    );
    assert_eq!(report.sum, 0, "device buffers are not read");
    assert_eq!(report.kept_after_stream_release, 1);
    assert_eq!(report.kept_release_nulled, 1);
}

#[test]
fn c_consumer_reads_a_device_stream_whose_batches_sit_on_different_device_ids() {
    let (five, six) = (emulated(5), emulated(6));
    let on = |i: i64, device: &DeviceRef| {
        let (array, schema) = export_record_batch_to(&v_s_batch(i), device).expect("copy");
        // SAFETY: the structs come from this crate's exporter.
        unsafe { DeviceArray::try_new(array, schema, ValidationLevel::Default) }
    };
    let arrays = vec![on(0, &five), on(1, &six), on(2, &five)];
    let field = Field::new("", DataType::Struct(v_s_schema().fields().clone()), false);
    let mut stream = export_device_arrays(field, DeviceType::EXT_DEV, arrays.into_iter())
        .expect("export_device_arrays");

    let report = consume_stream_in_c(&mut stream, &V_S, None);

    assert_clean_read(&report, &stream);
    assert_eq!(report.stream_device_type, EXT_DEV);
    assert_eq!(
        report.device_ids(),
        [5, 6, 5],
        "spec: one device type per stream, device ids may differ"
    );
    assert_eq!(report.sync_events, 3);
}

#[test]
fn c_consumer_gets_the_code_and_message_of_a_rust_reader_error_mid_stream() {
    let disk_on_fire = || ArrowError::IoError("disk on fire".into(), std::io::Error::other("fire"));
    let batches = vec![
        Ok(v_s_batch(0)),
        Ok(v_s_batch(1)),
        Err(disk_on_fire()),
        Ok(v_s_batch(3)),
    ];
    let mut stream = export_reader(reader_of(batches)).expect("export_reader");

    let report = consume_stream_in_c(&mut stream, &V_S, None);

    assert_clean_read(&report, &stream);
    assert_eq!(report.batches, 2, "the two batches before the error arrive");
    assert_eq!(report.sum, v_sum(&[v_s_batch(0), v_s_batch(1)]));
    assert_eq!(
        report.code,
        Error::Arrow(disk_on_fire()).errno(),
        "get_next returns the error's errno"
    );
    assert_ne!(report.code, 0);
    assert!(
        report.message().contains("disk on fire"),
        "get_last_error must carry the reader's message: {:?}",
        report.message()
    );
}

#[test]
fn c_consumer_rejects_a_schema_it_does_not_expect_and_still_releases_the_stream() {
    let mut stream = export_reader(reader_of(vec![Ok(v_s_batch(0))])).expect("export_reader");
    let report = consume_stream_in_c(&mut stream, &[("l", "v"), ("u", "not_s")], None);
    assert_ne!(report.status, 0, "the child name differs: {report:?}");
    assert_eq!(report.batches, 0, "no batch is pulled after a bad schema");
    assert_eq!(report.schema_release_nulled, 1);
    assert_eq!(report.stream_release_nulled, 1);
    assert_released_with_null_callbacks(&stream);
}

#[test]
fn callbacks_of_a_stream_released_by_c_return_einval_and_no_error_message() {
    let mut stream = export_reader(reader_of(vec![Ok(v_s_batch(0))])).expect("export_reader");
    let (get_schema, get_next, get_last_error) = (
        raw::device_stream(&stream).get_schema.expect("live stream"),
        raw::device_stream(&stream).get_next.expect("live stream"),
        raw::device_stream(&stream)
            .get_last_error
            .expect("live stream"),
    );

    let report = consume_stream_in_c(&mut stream, &V_S, None);
    assert_clean_read(&report, &stream);

    // A consumer holding on to the old function pointers (the spec forbids
    // calling them, ours refuse safely).
    let mut schema = arrow_device::abi::FFI_ArrowSchema::empty();
    let mut array = arrow_device::ArrowDeviceArray::empty();
    // SAFETY: our own callbacks, which check for a released stream before
    // touching private data; `schema` and `array` are writable.
    let (schema_code, next_code, message) = unsafe {
        (
            get_schema(&mut stream, &mut schema),
            get_next(&mut stream, &mut array),
            get_last_error(&mut stream),
        )
    };
    assert_eq!(schema_code, libc::EINVAL);
    assert_eq!(next_code, libc::EINVAL);
    assert!(message.is_null());
    assert!(array.is_released(), "nothing was written to out");
}

// ---- C produces, Rust consumes ---------------------------------------------

/// `n` batches of `rows` each, all released once, nothing leaked.
fn all_released(n: i64, get_next_calls: i64) -> StreamCounters {
    StreamCounters {
        array_releases: n,
        child_array_releases: 2 * n,
        schema_releases: 1,
        child_schema_releases: 2,
        stream_releases: 1,
        get_next_calls,
        batches_produced: n,
        live_allocations: 0,
    }
}

fn read_c_stream(config: StreamConfig) -> (DeviceStreamReader, ProducerCounters) {
    let (stream, counters) = c_stream(config);
    // SAFETY: the C producer follows the spec (its arrays are CPU arrays of
    // get_schema's type, except where a test configures otherwise, which
    // validation catches).
    let reader = unsafe { DeviceStreamReader::try_new(stream, ValidationLevel::Full) }
        .expect("the C stream's schema imports");
    (reader, counters)
}

#[test]
fn c_stream_batches_import_with_their_values_and_each_struct_is_released_once() {
    let (mut reader, counters) = read_c_stream(StreamConfig::cpu(4, 3));
    assert_eq!(reader.device_type(), DeviceType::CPU);
    assert_eq!(reader.schema(), Some(a_b_schema()));
    assert_eq!(counters.get().schema_releases, 1, "get_schema's copy only");

    let mut arrays = Vec::new();
    for index in 0..4 {
        let array = reader
            .next()
            .unwrap_or_else(|| panic!("batch {index} missing"))
            .unwrap_or_else(|e| panic!("batch {index}: {e}"));
        assert_eq!(
            (array.device_type(), array.device_id()),
            (DeviceType::CPU, -1)
        );
        assert!(array.sync_event().is_null());
        arrays.push(array);
    }
    assert!(reader.next().is_none(), "the end of the stream");
    assert!(reader.next().is_none(), "and nothing after it");
    let c = counters.get();
    assert_eq!(
        (c.stream_releases, c.array_releases),
        (1, 0),
        "the stream goes at its end, the batches it handed out live on"
    );

    for (index, array) in arrays.iter().enumerate() {
        let batch = array.to_record_batch().expect("host data");
        assert_eq!(batch, expected_c_batch(index as i64, 3), "batch {index}");
    }
    drop((arrays, reader));
    assert_eq!(counters.get(), all_released(4, 5));
}

#[test]
fn c_stream_reads_through_into_record_batch_reader_as_the_expected_batches() {
    let (reader, counters) = read_c_stream(StreamConfig::cpu(3, 5));
    let batches = reader
        .into_record_batch_reader()
        .expect("a CPU stream of structs")
        .collect::<Result<Vec<_>, _>>()
        .expect("every batch imports");
    let expected: Vec<RecordBatch> = (0..3).map(|i| expected_c_batch(i, 5)).collect();
    assert_eq!(batches, expected);
    assert_eq!(a_values(&batches), (0..15).collect::<Vec<i32>>());
    drop(batches);
    assert_eq!(counters.get(), all_released(3, 4));
}

#[test]
fn c_stream_failure_surfaces_as_a_producer_error_with_eio_and_its_message() {
    let (mut reader, counters) = read_c_stream(StreamConfig {
        fail_at: 2,
        ..StreamConfig::cpu(5, 2)
    });
    let first = reader.next().expect("batch 0").expect("batch 0 imports");
    let second = reader.next().expect("batch 1").expect("batch 1 imports");
    match reader.next() {
        Some(Err(Error::Producer { code, message })) => {
            assert_eq!(code, libc::EIO);
            assert_eq!(message, "c producer failed at batch 2");
        }
        other => panic!("expected the producer's EIO, got {other:?}"),
    }
    assert!(reader.next().is_none(), "nothing after an error");
    assert!(reader.next().is_none());
    let c = counters.get();
    assert_eq!(
        c.get_next_calls, 3,
        "spec: only release may follow an error"
    );
    assert_eq!(c.stream_releases, 1, "released as soon as it failed");

    assert_eq!(
        first.to_record_batch().expect("host data"),
        expected_c_batch(0, 2)
    );
    assert_eq!(
        second.to_record_batch().expect("host data"),
        expected_c_batch(1, 2)
    );
    drop((first, second, reader));
    assert_eq!(counters.get(), all_released(2, 3));
}

#[test]
fn c_stream_failure_reaches_a_record_batch_reader_as_an_arrow_error_with_the_message() {
    let (reader, counters) = read_c_stream(StreamConfig {
        fail_at: 1,
        ..StreamConfig::cpu(3, 2)
    });
    let mut batches = reader.into_record_batch_reader().expect("CPU stream");
    assert_eq!(
        batches.next().expect("batch 0").expect("imports"),
        expected_c_batch(0, 2)
    );
    let err = batches.next().expect("the error").expect_err("EIO");
    assert!(
        err.to_string().contains("c producer failed at batch 1"),
        "{err}"
    );
    assert!(batches.next().is_none());
    drop(batches);
    assert_eq!(counters.get(), all_released(1, 2));
}

#[test]
fn dropping_the_reader_after_one_batch_releases_the_c_stream_and_every_array_once() {
    let (mut reader, counters) = read_c_stream(StreamConfig::cpu(5, 4));
    let first = reader.next().expect("batch 0").expect("imports");
    assert_eq!(counters.get().stream_releases, 0);
    drop(reader);
    let c = counters.get();
    assert_eq!((c.stream_releases, c.array_releases), (1, 0));
    assert_eq!(
        first
            .to_record_batch()
            .expect("the batch outlives the stream"),
        expected_c_batch(0, 4)
    );
    drop(first);
    assert_eq!(counters.get(), all_released(1, 1));

    // The same through the record batch reader.
    let (reader, counters) = read_c_stream(StreamConfig::cpu(5, 4));
    let mut batches = reader.into_record_batch_reader().expect("CPU stream");
    let first = batches.next().expect("batch 0").expect("imports");
    drop(batches);
    assert_eq!(first, expected_c_batch(0, 4));
    drop(first);
    assert_eq!(counters.get(), all_released(1, 1));
}

#[test]
fn c_stream_declaring_ext_dev_but_sending_cpu_arrays_is_rejected_naming_both_types() {
    let (mut reader, counters) = read_c_stream(StreamConfig {
        device_type: DeviceType::EXT_DEV,
        ..StreamConfig::cpu(3, 2)
    });
    assert_eq!(reader.device_type(), DeviceType::EXT_DEV);
    let err = reader
        .next()
        .expect("an error for batch 0")
        .expect_err("device type mismatch");
    let message = err.to_string();
    assert!(
        message.contains("batch 0") && message.contains("CPU") && message.contains("EXT_DEV"),
        "the error names the batch and both device types: {message}"
    );
    assert!(matches!(err, Error::Invalid { .. }), "{err:?}");
    assert!(reader.next().is_none());
    drop(reader);
    assert_eq!(
        counters.get(),
        all_released(1, 1),
        "the rejected batch and the stream are released once"
    );
}

#[test]
fn c_stream_batch_with_fewer_children_than_its_schema_is_rejected_naming_the_batch() {
    let (mut reader, counters) = read_c_stream(StreamConfig {
        one_child_at: 1,
        ..StreamConfig::cpu(3, 2)
    });
    let first = reader
        .next()
        .expect("batch 0")
        .expect("batch 0 is well formed");
    let err = reader
        .next()
        .expect("an error for batch 1")
        .expect_err("batch 1 has one child, the schema two");
    let message = err.to_string();
    assert!(message.contains("batch 1"), "{message}");
    assert!(
        message.contains("n_children is 1, expected 2"),
        "the error gives the found and the expected number of children: {message}"
    );
    assert!(reader.next().is_none());
    drop((first, reader));
    let c = counters.get();
    assert_eq!(c.array_releases, 2, "both batches released once");
    assert_eq!(c.child_array_releases, 3, "2 children + 1 child");
    assert_eq!((c.stream_releases, c.live_allocations), (1, 0));
}

#[test]
fn from_raw_moves_the_c_stream_out_leaving_a_released_struct() {
    let (mut stream, counters) = c_stream(StreamConfig::cpu(2, 1));
    // SAFETY: a valid, initialized stream from the C producer.
    let reader = unsafe { DeviceStreamReader::try_from_raw(&mut stream, ValidationLevel::Full) }
        .expect("imports");
    assert!(stream.is_released(), "the source is marked released");
    let batches = reader
        .into_record_batch_reader()
        .expect("CPU")
        .collect::<Result<Vec<_>, _>>()
        .expect("batches");
    assert_eq!(batches, [expected_c_batch(0, 1), expected_c_batch(1, 1)]);
    drop((batches, stream));
    assert_eq!(counters.get(), all_released(2, 3));
}

#[test]
fn ffi_stream_from_device_lets_arrow_rs_read_the_c_stream() {
    let (stream, counters) = c_stream(StreamConfig::cpu(3, 4));
    let ffi = FFI_ArrowArrayStream::try_from(stream).expect("a CPU device stream");
    let reader = RecordBatchStreamReader::try_new(ffi).expect("arrow-rs reads the schema");
    let batches = reader
        .collect::<Result<Vec<_>, _>>()
        .expect("arrow-rs imports every batch");
    let expected: Vec<RecordBatch> = (0..3).map(|i| expected_c_batch(i, 4)).collect();
    assert_eq!(batches, expected);
    drop(batches);
    assert_eq!(counters.get(), all_released(3, 4));
}

#[test]
fn ffi_stream_from_device_passes_the_c_producers_error_message_to_arrow_rs() {
    let (stream, counters) = c_stream(StreamConfig {
        fail_at: 1,
        ..StreamConfig::cpu(3, 4)
    });
    let ffi = FFI_ArrowArrayStream::try_from(stream).expect("a CPU device stream");
    let mut reader = RecordBatchStreamReader::try_new(ffi).expect("schema");
    assert_eq!(
        reader.next().expect("batch 0").expect("imports"),
        expected_c_batch(0, 4)
    );
    let err = reader.next().expect("the error").expect_err("EIO");
    assert!(
        err.to_string().contains("c producer failed at batch 1"),
        "{err}"
    );
    drop(reader);
    let c = counters.get();
    assert_eq!(
        (c.stream_releases, c.array_releases, c.live_allocations),
        (1, 1, 0)
    );
}

#[test]
fn ffi_stream_from_device_refuses_a_stream_declared_on_ext_dev() {
    let (stream, counters) = c_stream(StreamConfig {
        device_type: DeviceType::EXT_DEV,
        ..StreamConfig::cpu(1, 1)
    });
    let err = FFI_ArrowArrayStream::try_from(stream).expect_err("not CPU");
    assert!(err.to_string().contains("EXT_DEV"), "{err}");
    assert_eq!(
        counters.get().stream_releases,
        1,
        "the refused stream is released"
    );
}

// ---- C -> Rust -> C ----------------------------------------------------------

#[test]
fn c_stream_reexported_by_rust_is_read_back_by_the_c_consumer() {
    let (reader, counters) = read_c_stream(StreamConfig::cpu(4, 5));
    let host = reader.into_record_batch_reader().expect("CPU stream");
    let mut stream = export_reader(host).expect("export_reader");

    let report = consume_stream_in_c(&mut stream, &[("i", "a"), ("u", "b")], Some(0));

    assert_clean_read(&report, &stream);
    assert_eq!(report.batches, 4);
    assert_eq!(report.total_rows, 20);
    assert_eq!(report.sum, (0..20).sum::<i64>());
    assert_eq!(report.kept_sum, (0..5).sum::<i64>());
    assert_eq!(counters.get(), all_released(4, 5));
}

//! Streams of device arrays: the spec's `ArrowDeviceArrayStream` (pull, one
//! batch per `get_next`) and its async device stream interface (push, with
//! credit-based back-pressure), both directions, plus bridges to arrow-rs'
//! C stream (`FFI_ArrowArrayStream`) for CPU data.
//!
//! (Spec: CDeviceDataInterface.rst, "Device Stream Interface" and "Async
//! Device Stream Interface".)

mod async_export;
mod async_import;
mod bridge;
mod export;
mod import;

pub use async_export::{
    export_async_device_arrays, export_async_record_batches, export_async_record_batches_to,
    AsyncDeviceStreamProducer, AsyncProducerDriver,
};
pub use async_import::{AsyncDeviceStream, AsyncStreamHandler};
pub use export::{export_device_arrays, export_reader, export_reader_to, record_batch_field};
pub use import::{DeviceStreamReader, HostBatchReader};

/// A defect of a stream rather than of one array's tree: the path is the
/// stream itself (`stream: batch 3 is on device type CPU, ...`).
pub(crate) fn stream_error(message: impl Into<String>) -> crate::Error {
    crate::Error::Invalid {
        path: "stream".into(),
        message: message.into(),
    }
}

/// The one message for a batch on another device type than its stream's
/// (spec: every array of a stream is on the stream's device type). Batches
/// are numbered from 0, in Rust and Python messages alike.
pub(crate) fn wrong_device_type(
    index: impl std::fmt::Display,
    found: crate::DeviceType,
    expected: crate::DeviceType,
) -> crate::Error {
    stream_error(format!(
        "batch {index} is on device type {found}, expected the stream's {expected}"
    ))
}

/// The checks every consumer of a foreign stream makes first: not released,
/// and the three mandatory callbacks present (`live` and `present` are read
/// off either stream struct).
pub(crate) fn check_stream_callbacks(live: bool, present: [bool; 3]) -> crate::Result<()> {
    if !live {
        return Err(stream_error("the stream was released (release is NULL)"));
    }
    if present.contains(&false) {
        return Err(stream_error(
            "the stream's get_schema, get_next and get_last_error must all be non-NULL",
        ));
    }
    Ok(())
}

/// Exports batch `index` of a record-batch stream whose schema is `schema`:
/// zero-copy on the CPU (`device` `None`) or copied onto `device`. A batch
/// of other columns would be misread by the consumer, so it never leaves.
pub(crate) fn export_stream_batch(
    index: usize,
    batch: &arrow_array::RecordBatch,
    schema: &arrow_schema::SchemaRef,
    device: Option<&crate::device::DeviceRef>,
) -> crate::Result<crate::ArrowDeviceArray> {
    use arrow_schema::DataType;
    if batch.schema_ref().fields() != schema.fields() {
        return Err(stream_error(format!(
            "batch {index} has data type {}, expected the stream's {}",
            DataType::Struct(batch.schema_ref().fields().clone()),
            DataType::Struct(schema.fields().clone())
        )));
    }
    match device {
        None => Ok(crate::array::export::export_batch_array(batch)),
        Some(device) => crate::array::export::export_batch_array_to(batch, device),
    }
}

/// The arrays of a stream of `data_type` arrays on devices of
/// `device_type`, each checked as it is read (spec: every batch of a stream
/// has the stream's schema and device type): an array that differs is an
/// error naming its batch number (from 0), what was found and what the
/// stream has. For streams assembled from [`DeviceArray`](crate::DeviceArray)s
/// by hand; the exporters make the same check.
///
/// ```
/// use arrow_array::{Int32Array, Int64Array};
/// use arrow_device::stream::check_arrays;
/// use arrow_device::{DeviceArray, DeviceType};
/// use arrow_schema::DataType;
///
/// let arrays = [
///     DeviceArray::from_array(&Int32Array::from(vec![1])),
///     DeviceArray::from_array(&Int64Array::from(vec![2])),
/// ];
/// let mut checked = check_arrays(DataType::Int32, DeviceType::CPU, arrays.into_iter().map(Ok));
/// assert!(checked.next().unwrap().is_ok());
/// let err = checked.next().unwrap().unwrap_err();
/// assert_eq!(err.to_string(), "stream: batch 1 has data type Int64, expected the stream's Int32");
/// ```
pub fn check_arrays(
    data_type: arrow_schema::DataType,
    device_type: crate::DeviceType,
    arrays: impl Iterator<Item = crate::Result<crate::DeviceArray>> + Send + 'static,
) -> impl Iterator<Item = crate::Result<crate::DeviceArray>> + Send + 'static {
    arrays.enumerate().map(move |(index, array)| {
        let array = array?;
        check_stream_array(index, &array, &data_type, device_type)?;
        Ok(array)
    })
}

/// Checks that array `index` of a stream of `data_type` arrays on devices of
/// `device_type` is one (spec: every batch of a stream has the stream's
/// schema and device type).
pub(crate) fn check_stream_array(
    index: usize,
    array: &crate::DeviceArray,
    data_type: &arrow_schema::DataType,
    device_type: crate::DeviceType,
) -> crate::Result<()> {
    if array.device_type() != device_type {
        return Err(wrong_device_type(index, array.device_type(), device_type));
    }
    if array.data_type() != data_type {
        return Err(stream_error(format!(
            "batch {index} has data type {}, expected the stream's {data_type}",
            array.data_type()
        )));
    }
    Ok(())
}

/// Exports (zero-copy) array `index` of a stream, refusing one of another
/// type or device type ([`check_stream_array`]).
pub(crate) fn export_stream_array(
    index: usize,
    array: &crate::DeviceArray,
    data_type: &arrow_schema::DataType,
    device_type: crate::DeviceType,
) -> crate::Result<crate::ArrowDeviceArray> {
    check_stream_array(index, array, data_type, device_type)?;
    Ok(array.export()?.0)
}

//! Export: arrow-rs data (or an imported array) → `ArrowDeviceArray` + `ArrowSchema`.
//!
//! On the CPU the export is zero-copy: the C struct's buffers point into the
//! arrow-rs buffers, which the struct keeps alive until it is released. Onto
//! another device, the buffers are copied into one device allocation, a
//! `sync_event` is recorded after the copies, and the release callback waits
//! for that event before freeing the memory and the event.
//!
//! ```
//! use std::sync::Arc;
//! use arrow_array::{Array, Int32Array};
//! use arrow_device::{export_array, DeviceArray, DeviceType, ValidationLevel};
//!
//! let array = Int32Array::from(vec![Some(1), None, Some(3)]);
//! let (c_array, c_schema) = export_array(&array).unwrap();
//! assert_eq!(c_array.device_type, DeviceType::CPU);
//! assert_eq!(c_array.device_id, -1);
//! assert!(c_array.sync_event.is_null());
//!
//! // SAFETY: the structs come from this crate's exporter (or a test producer), which follow the interface.
//! let imported = unsafe { DeviceArray::try_new(c_array, c_schema, ValidationLevel::Full) }.unwrap();
//! let back = imported.to_host().unwrap();
//! assert_eq!(back.as_ref(), &array as &dyn Array);
//! ```

use std::ffi::c_void;
use std::sync::Arc;

use arrow_array::{Array, RecordBatch, StructArray};
use arrow_data::ArrayData;
use arrow_schema::DataType;

use crate::abi::{raw, ArrowDeviceArray, DeviceType, FFI_ArrowSchema};
use crate::array::copy;
use crate::array::export_block::export_tree;
use crate::array::node::Node;
use crate::array::owner::Owner;
use crate::device::{self, DeviceRef};
use crate::error::Result;
use crate::schema;

/// Exports `array` zero-copy on the CPU (`device_id` -1, NULL `sync_event`).
pub fn export_array(array: &dyn Array) -> Result<(ArrowDeviceArray, FFI_ArrowSchema)> {
    let schema = nullable_schema(array.data_type())?;
    Ok((export_cpu(array.to_data()), schema))
}

/// Exports `array` onto `device`, copying its buffers there (zero-copy when
/// `device` is the CPU).
pub fn export_array_to(
    array: &dyn Array,
    device: &DeviceRef,
) -> Result<(ArrowDeviceArray, FFI_ArrowSchema)> {
    let schema = nullable_schema(array.data_type())?;
    Ok((export_data_to(array.to_data(), device)?, schema))
}

/// Exports `batch` as a struct array zero-copy on the CPU; the schema's
/// metadata travels as the struct's metadata.
pub fn export_record_batch(batch: &RecordBatch) -> Result<(ArrowDeviceArray, FFI_ArrowSchema)> {
    let schema = schema::export_schema(batch.schema_ref())?;
    Ok((export_batch_array(batch), schema))
}

/// The array half of [`export_record_batch`], for streams, whose schema
/// travels once through `get_schema`.
pub(crate) fn export_batch_array(batch: &RecordBatch) -> ArrowDeviceArray {
    export_cpu(StructArray::from(batch.clone()).into_data())
}

/// The array half of [`export_record_batch_to`].
pub(crate) fn export_batch_array_to(
    batch: &RecordBatch,
    device: &DeviceRef,
) -> Result<ArrowDeviceArray> {
    export_data_to(StructArray::from(batch.clone()).into_data(), device)
}

/// Exports `batch` as a struct array onto `device`.
pub fn export_record_batch_to(
    batch: &RecordBatch,
    device: &DeviceRef,
) -> Result<(ArrowDeviceArray, FFI_ArrowSchema)> {
    let schema = schema::export_schema(batch.schema_ref())?;
    Ok((export_batch_array_to(batch, device)?, schema))
}

/// The schema of an exported array: its type, nullable, without a name
/// (`name` is optional, spec: "ArrowSchema.name"). Going through a `Field`
/// would cost a name string, a metadata pass and a `Field` per export.
fn nullable_schema(data_type: &DataType) -> Result<FFI_ArrowSchema> {
    schema::export_data_type(data_type, true)
}

fn export_data_to(data: ArrayData, device: &DeviceRef) -> Result<ArrowDeviceArray> {
    if device::same_device(device.as_ref(), device::cpu().as_ref()) {
        return Ok(export_cpu(data));
    }
    let mut extra = Vec::new();
    let node = Node::from_array_data(&data, &mut extra);
    let sources: Owner = Arc::new((data, extra));
    let copied = copy::host_to_device(&node, sources, device)?;
    let device = copied.device.as_ref();
    Ok(export_node(
        &copied.node,
        copied.owner,
        (device.device_type(), device.device_id()),
        Some(device),
        copied.sync_event,
    ))
}

fn export_cpu(data: ArrayData) -> ArrowDeviceArray {
    // No `Node` tree is built: on the CPU the C structs are written straight
    // from the arrow-rs data, which the export's block owns.
    let mut out = ArrowDeviceArray::empty();
    // SAFETY: a struct of our own whose `release` frees its block.
    *unsafe { raw::array_mut(&mut out.array) } = export_tree(data, |data| data, None);
    out
}

/// Writes the C struct for `node` on device `(device_type, device_id)`,
/// whose memory `owner` keeps alive; `device` is its implementation, `None`
/// for an opaque one (then a view's variadic sizes go on the heap).
pub(crate) fn export_node(
    node: &Node,
    owner: Owner,
    (device_type, device_id): (DeviceType, i64),
    device: Option<&dyn device::Device>,
    sync_event: *mut c_void,
) -> ArrowDeviceArray {
    let mut out = ArrowDeviceArray::empty();
    // SAFETY: a struct of our own whose `release` frees its block.
    *unsafe { raw::array_mut(&mut out.array) } = export_tree(owner, |_| node, device);
    out.device_type = device_type;
    out.device_id = device_id;
    out.sync_event = sync_event;
    out
}

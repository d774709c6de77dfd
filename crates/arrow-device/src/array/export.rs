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

use arrow_array::cast::AsArray;
use arrow_array::{downcast_primitive, Array, NullArray, RecordBatch, StructArray};
use arrow_data::ArrayData;
use arrow_schema::DataType;

use crate::abi::{raw, ArrowDeviceArray, DeviceType, FFI_ArrowSchema};
use crate::array::copy;
use crate::array::export_block::{export_tree, exports_directly};
use crate::array::node::Node;
use crate::array::owner::Owner;
use crate::device::{self, DeviceRef};
use crate::error::Result;
use crate::schema;

/// Exports `array` zero-copy on the CPU (`device_id` -1, NULL `sync_event`).
pub fn export_array(array: &dyn Array) -> Result<(ArrowDeviceArray, FFI_ArrowSchema)> {
    let schema = nullable_schema(array.data_type())?;
    Ok((export_array_cpu(array), schema))
}

/// The array half of [`export_array`]: the common types straight from
/// their typed parts, the block owning a clone of the array (no allocation
/// for it); others through `to_data`.
fn export_array_cpu(array: &dyn Array) -> ArrowDeviceArray {
    if !exports_directly(array) {
        return export_cpu(array.to_data());
    }
    fn owned<A: Array + Clone + 'static>(array: &A) -> raw::ArrowArray {
        export_tree(array.clone(), |array| array as &dyn Array, None)
    }
    macro_rules! primitive {
        ($t:ty) => {
            owned(array.as_primitive::<$t>())
        };
    }
    let root = match array.data_type() {
        DataType::Null => owned(
            array
                .as_any()
                .downcast_ref::<NullArray>()
                .expect("a null array"),
        ),
        DataType::Boolean => owned(array.as_boolean()),
        DataType::Utf8 => owned(array.as_string::<i32>()),
        DataType::LargeUtf8 => owned(array.as_string::<i64>()),
        DataType::Binary => owned(array.as_binary::<i32>()),
        DataType::LargeBinary => owned(array.as_binary::<i64>()),
        DataType::Struct(_) => owned(array.as_struct()),
        DataType::List(_) => owned(array.as_list::<i32>()),
        DataType::LargeList(_) => owned(array.as_list::<i64>()),
        data_type => downcast_primitive! {
            data_type => (primitive),
            // Dictionaries: an owning handle costs one allocation.
            _ => {
                let owner = array.slice(0, array.len());
                export_tree(owner, |owner| owner.as_ref(), None)
            }
        },
    };
    wrap_cpu(root)
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
    let root = StructArray::from(batch.clone());
    if !exports_directly(&root) {
        return export_cpu(root.into_data());
    }
    wrap_cpu(export_tree(root, |root| root as &dyn Array, None))
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
    wrap_cpu(export_tree(data, |data| data, None))
}

/// A root struct of the CPU as a device array (`device_id` -1, no event).
fn wrap_cpu(root: raw::ArrowArray) -> ArrowDeviceArray {
    let mut out = ArrowDeviceArray::empty();
    // SAFETY: a struct of our own whose `release` frees its block.
    *unsafe { raw::array_mut(&mut out.array) } = root;
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

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
//! let imported = DeviceArray::try_new(c_array, c_schema, ValidationLevel::Full).unwrap();
//! let back = imported.to_host().unwrap();
//! assert_eq!(back.as_ref(), &array as &dyn Array);
//! ```

use std::any::Any;
use std::ffi::c_void;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use arrow_array::{Array, RecordBatch, StructArray};
use arrow_buffer::Buffer;
use arrow_data::ArrayData;
use arrow_schema::Field;

use crate::abi::{raw, ArrowDeviceArray, FFI_ArrowSchema};
use crate::array::copy;
use crate::array::layout;
use crate::array::node::Node;
use crate::device::{self, DeviceRef};
use crate::error::Result;

/// What keeps an exported tree's memory valid; every node's private data
/// holds a reference, so children moved out by a consumer stay valid after
/// the parent is released (spec: "Moving child arrays").
pub(crate) type KeepAlive = Arc<dyn Any + Send + Sync>;

/// Exports `array` zero-copy on the CPU (`device_id` -1, NULL `sync_event`).
pub fn export_array(array: &dyn Array) -> Result<(ArrowDeviceArray, FFI_ArrowSchema)> {
    let schema = FFI_ArrowSchema::try_from(Field::new("", array.data_type().clone(), true))?;
    Ok((export_cpu(array.to_data()), schema))
}

/// Exports `array` onto `device`, copying its buffers there (zero-copy when
/// `device` is the CPU).
pub fn export_array_to(
    array: &dyn Array,
    device: &DeviceRef,
) -> Result<(ArrowDeviceArray, FFI_ArrowSchema)> {
    let schema = FFI_ArrowSchema::try_from(Field::new("", array.data_type().clone(), true))?;
    Ok((export_data_to(array.to_data(), device)?, schema))
}

/// Exports `batch` as a struct array zero-copy on the CPU; the schema's
/// metadata travels as the struct's metadata.
pub fn export_record_batch(batch: &RecordBatch) -> Result<(ArrowDeviceArray, FFI_ArrowSchema)> {
    let schema = FFI_ArrowSchema::try_from(batch.schema_ref().as_ref())?;
    Ok((
        export_cpu(StructArray::from(batch.clone()).into_data()),
        schema,
    ))
}

/// Exports `batch` as a struct array onto `device`.
pub fn export_record_batch_to(
    batch: &RecordBatch,
    device: &DeviceRef,
) -> Result<(ArrowDeviceArray, FFI_ArrowSchema)> {
    let schema = FFI_ArrowSchema::try_from(batch.schema_ref().as_ref())?;
    Ok((
        export_data_to(StructArray::from(batch.clone()).into_data(), device)?,
        schema,
    ))
}

fn export_data_to(data: ArrayData, device: &DeviceRef) -> Result<ArrowDeviceArray> {
    if device::same_device(device.as_ref(), device::cpu().as_ref()) {
        return Ok(export_cpu(data));
    }
    let mut extra = Vec::new();
    let node = Node::from_array_data(&data, &mut extra);
    let sources: KeepAlive = Arc::new((data, extra));
    let copied = copy::host_to_device(&node, sources, device)?;
    Ok(export_node(
        &copied.node,
        copied.keep_alive,
        copied.device.as_ref(),
        copied.sync_event,
    ))
}

fn export_cpu(data: ArrayData) -> ArrowDeviceArray {
    let mut extra: Vec<Buffer> = Vec::new();
    let node = Node::from_array_data(&data, &mut extra);
    let keep: KeepAlive = Arc::new((data, extra));
    export_node(&node, keep, device::cpu().as_ref(), std::ptr::null_mut())
}

/// Writes the C struct for `node` on `device`, whose memory `keep` keeps alive.
pub(crate) fn export_node(
    node: &Node,
    keep: KeepAlive,
    device: &dyn device::Device,
    sync_event: *mut c_void,
) -> ArrowDeviceArray {
    let mut out = ArrowDeviceArray::empty();
    *raw::array_mut(&mut out.array) = export_struct(node, &keep);
    out.device_type = device.device_type();
    out.device_id = device.device_id();
    out.sync_event = sync_event;
    out
}

/// Everything one exported struct owns.
struct PrivateData {
    buffers: Box<[*const c_void]>,
    children: Box<[*mut raw::ArrowArray]>,
    dictionary: *mut raw::ArrowArray,
    // The variadic-sizes buffer of view types lives in host memory (see the
    // crate documentation, "Variadic buffer sizes").
    _variadic_sizes: Box<[i64]>,
    _keep: KeepAlive,
}

fn export_struct(node: &Node, keep: &KeepAlive) -> raw::ArrowArray {
    let mut buffers: Vec<*const c_void> = node
        .buffers
        .iter()
        .map(|b| b.ptr.cast::<c_void>())
        .collect();
    let variadic_sizes: Box<[i64]> = if layout::is_view(&node.data_type) {
        node.buffers[2..].iter().map(|b| b.len as i64).collect()
    } else {
        Box::new([])
    };
    if layout::is_view(&node.data_type) {
        buffers.push(variadic_sizes.as_ptr().cast());
    }
    let children: Box<[*mut raw::ArrowArray]> = node
        .children
        .iter()
        .map(|c| Box::into_raw(Box::new(export_struct(c, keep))))
        .collect();
    let dictionary = match &node.dictionary {
        Some(d) => Box::into_raw(Box::new(export_struct(d, keep))),
        None => std::ptr::null_mut(),
    };
    let mut private = Box::new(PrivateData {
        buffers: buffers.into_boxed_slice(),
        children,
        dictionary,
        _variadic_sizes: variadic_sizes,
        _keep: keep.clone(),
    });
    let null_count = match node.null_count {
        Some(n) => n as i64,
        None => -1,
    };
    raw::ArrowArray {
        length: node.len as i64,
        null_count,
        offset: node.offset as i64,
        n_buffers: private.buffers.len() as i64,
        n_children: private.children.len() as i64,
        buffers: private.buffers.as_mut_ptr(),
        children: private.children.as_mut_ptr(),
        dictionary,
        release: Some(release_struct),
        private_data: Box::into_raw(private).cast(),
    }
}

/// The release callback of every struct this crate exports (spec: "Release
/// callback semantics for producers"): releases the children and dictionary
/// that were not moved out, frees the private data, marks the struct released.
unsafe extern "C" fn release_struct(array: *mut raw::ArrowArray) {
    // A panic must not unwind into C; there is nothing to report it to, so it
    // is swallowed after the struct is marked released.
    let _ = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: the consumer passes the struct we exported (or a moved copy).
        let Some(array) = (unsafe { array.as_mut() }) else {
            return;
        };
        if array.release.is_none() || array.private_data.is_null() {
            return;
        }
        // SAFETY: private_data was produced by Box::into_raw in export_struct
        // and is taken back exactly once (release is cleared below).
        let private = unsafe { Box::from_raw(array.private_data.cast::<PrivateData>()) };
        for &child in private
            .children
            .iter()
            .chain(std::iter::once(&private.dictionary))
        {
            if child.is_null() {
                continue;
            }
            // SAFETY: children were allocated by Box::into_raw above; a child
            // the consumer moved out has release NULL and is only freed here.
            unsafe {
                if let Some(release) = (*child).release {
                    release(child);
                }
                drop(Box::from_raw(child));
            }
        }
        drop(private);
        array.release = None;
        array.private_data = std::ptr::null_mut();
    }));
}

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
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use arrow_array::{Array, RecordBatch, StructArray};
use arrow_buffer::Buffer;
use arrow_data::ArrayData;
use arrow_schema::DataType;

use crate::abi::{raw, ArrowDeviceArray, DeviceType, FFI_ArrowSchema};
use crate::array::copy;
use crate::array::layout;
use crate::array::node::{self, Node};
use crate::array::owner::Owner;
use crate::device::{self, DeviceBuffer, DeviceRef};
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
    // from the arrow-rs data, which `owner` holds.
    let owned = Arc::new(data);
    let owner: Owner = owned.clone();
    let mut out = ArrowDeviceArray::empty();
    // SAFETY: a struct of our own whose `release` frees its private data.
    *unsafe { raw::array_mut(&mut out.array) } = export_data_struct(&owned, &owner);
    out
}

/// [`export_struct`] for arrow-rs data on the CPU.
fn export_data_struct(data: &ArrayData, owner: &Owner) -> raw::ArrowArray {
    let data_type = data.data_type();
    let has_validity = layout::has_validity(data_type);
    let capacity =
        usize::from(has_validity) + data.buffers().len() + usize::from(layout::is_view(data_type));
    let mut buffers = Vec::with_capacity(capacity);
    // A bitmap that starts at another bit than the data (rare) is copied, and
    // the struct owns the copy.
    let mut realigned = Vec::new();
    if has_validity {
        buffers.push(node::validity_of(data, &mut realigned).ptr.cast());
    }
    buffers.extend(data.buffers().iter().map(|b| b.as_ptr().cast::<c_void>()));
    let variadic_sizes = layout::is_view(data_type)
        .then(|| VariadicSizes::Heap(data.buffers()[1..].iter().map(|b| b.len() as i64).collect()));
    let (children, dictionary) = match data_type {
        DataType::Dictionary(_, _) => (
            Box::default(),
            data.child_data().first().map_or(std::ptr::null_mut(), |d| {
                Box::into_raw(Box::new(export_data_struct(d, owner)))
            }),
        ),
        _ => (
            data.child_data()
                .iter()
                .map(|c| Box::into_raw(Box::new(export_data_struct(c, owner))))
                .collect(),
            std::ptr::null_mut(),
        ),
    };
    let null_count = node::exported_null_count(data);
    finish_struct(
        Parts {
            len: data.len(),
            offset: data.offset(),
            null_count: null_count as i64,
            buffers,
            variadic_sizes,
            children,
            dictionary,
            realigned: realigned.pop(),
        },
        owner,
    )
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
    // SAFETY: a struct of our own whose `release` frees its private data.
    *unsafe { raw::array_mut(&mut out.array) } = export_struct(node, &owner, device);
    out.device_type = device_type;
    out.device_id = device_id;
    out.sync_event = sync_event;
    out
}

/// Everything one exported struct owns.
struct PrivateData {
    // A Vec, not a boxed slice: boxing would shrink (reallocate) it.
    buffers: Vec<*const c_void>,
    children: Box<[*mut raw::ArrowArray]>,
    dictionary: *mut raw::ArrowArray,
    // The variadic-sizes buffer of view types lives in host memory (see the
    // crate documentation, "Variadic buffer sizes").
    _variadic_sizes: VariadicSizes,
    /// A validity bitmap copied to start at the array's offset, if any.
    _realigned: Option<Buffer>,
    _owner: Owner,
}

/// Where a view array's variadic-sizes buffer lives: host memory that the
/// device can read too where it offers some (CUDA: pinned memory), the heap
/// otherwise.
enum VariadicSizes {
    // A Vec, not a boxed slice: the pointer in the C struct's buffers is
    // taken before the sizes move into the private data, and moving a Box
    // invalidates pointers into it (a read through one is UB under Stacked
    // Borrows, which Miri reports); moving a Vec does not.
    Heap(Vec<i64>),
    HostVisible(DeviceBuffer),
}

impl VariadicSizes {
    fn new(sizes: Vec<i64>, device: Option<&dyn device::Device>) -> VariadicSizes {
        let bytes = std::mem::size_of_val::<[i64]>(&sizes);
        match device.and_then(|d| d.allocate_host_accessible(bytes)) {
            Some(buffer)
                if buffer.len() >= bytes
                    && !buffer.as_ptr().is_null()
                    && buffer.as_ptr() as usize % std::mem::align_of::<i64>() == 0 =>
            {
                // SAFETY: host-writable memory (the `Device` contract) of at
                // least `bytes` bytes, aligned for i64 (both checked), not
                // yet shared.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        sizes.as_ptr(),
                        buffer.as_ptr().cast::<i64>(),
                        sizes.len(),
                    )
                };
                VariadicSizes::HostVisible(buffer)
            }
            _ => VariadicSizes::Heap(sizes),
        }
    }

    fn as_ptr(&self) -> *const c_void {
        match self {
            VariadicSizes::Heap(sizes) => sizes.as_ptr().cast(),
            VariadicSizes::HostVisible(buffer) => buffer.as_ptr().cast_const().cast(),
        }
    }
}

fn export_struct(
    node: &Node,
    owner: &Owner,
    device: Option<&dyn device::Device>,
) -> raw::ArrowArray {
    let buffers = node
        .buffers
        .iter()
        .map(|b| b.ptr.cast::<c_void>())
        .collect();
    let variadic_sizes = layout::is_view(&node.data_type).then(|| {
        let sizes = node.buffers[2..].iter().map(|b| b.len as i64).collect();
        VariadicSizes::new(sizes, device)
    });
    let children = node
        .children
        .iter()
        .map(|c| Box::into_raw(Box::new(export_struct(c, owner, device))))
        .collect();
    let dictionary = match &node.dictionary {
        Some(d) => Box::into_raw(Box::new(export_struct(d, owner, device))),
        None => std::ptr::null_mut(),
    };
    let null_count = match node.null_count {
        Some(n) => n as i64,
        None => -1,
    };
    finish_struct(
        Parts {
            len: node.len,
            offset: node.offset,
            null_count,
            buffers,
            variadic_sizes,
            children,
            dictionary,
            // Node buffers already start at the node's offset.
            realigned: None,
        },
        owner,
    )
}

/// One struct's members before they are written (children already exported).
struct Parts {
    len: usize,
    offset: usize,
    null_count: i64,
    /// C order, without the variadic-sizes buffer of view types.
    buffers: Vec<*const c_void>,
    /// `Some` for view types, whose variadic-sizes buffer goes last.
    variadic_sizes: Option<VariadicSizes>,
    children: Box<[*mut raw::ArrowArray]>,
    dictionary: *mut raw::ArrowArray,
    /// See [`PrivateData`].
    realigned: Option<Buffer>,
}

fn finish_struct(parts: Parts, owner: &Owner) -> raw::ArrowArray {
    let mut buffers = parts.buffers;
    let variadic_sizes = match parts.variadic_sizes {
        Some(sizes) => {
            buffers.push(sizes.as_ptr());
            sizes
        }
        None => VariadicSizes::Heap(Vec::new()),
    };
    let mut private = Box::new(PrivateData {
        buffers,
        children: parts.children,
        dictionary: parts.dictionary,
        _variadic_sizes: variadic_sizes,
        _realigned: parts.realigned,
        _owner: owner.clone(),
    });
    raw::ArrowArray {
        length: parts.len as i64,
        null_count: parts.null_count,
        offset: parts.offset as i64,
        n_buffers: private.buffers.len() as i64,
        n_children: private.children.len() as i64,
        buffers: private.buffers.as_mut_ptr(),
        children: private.children.as_mut_ptr(),
        dictionary: parts.dictionary,
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

//! Import: an owned DLPack tensor → a [`DeviceArray`], zero-copy.
//!
//! The importer takes the tensor over at once: its deleter runs exactly once,
//! when the last handle, slice or arrow-rs buffer over the memory is dropped,
//! or before an error is returned.

use std::ptr::NonNull;
use std::sync::Arc;

use arrow_array::{Array, BooleanArray};
use arrow_buffer::BooleanBuffer;
use arrow_schema::{DataType, Field};

use super::abi::*;
use super::dtype::{arrow_data_type, Imported};
use crate::abi::DeviceType;
use crate::array::node::{Node, RawBuf};
use crate::array::owner::Owner;
use crate::array::DeviceArray;
use crate::device;
use crate::error::{Error, Path, Result};

/// Imports a [`DLManagedTensorVersioned`], taking ownership: its deleter is
/// called exactly once, when the returned array and everything sharing its
/// memory is dropped, or before an error is returned.
///
/// A major version other than 1 is refused after reading only `version` and
/// `deleter`, as dlpack.h requires; minor versions and the flags are
/// accepted (Arrow never writes, so `READ_ONLY` changes nothing). The
/// tensor checks are those of [`import_dlpack`].
///
/// # Safety
/// `ptr` must be NULL (an error) or point to a live tensor that follows
/// dlpack.h, which the caller owns (a consumer that took it from a
/// `"dltensor_versioned"` capsule, say) and passes on: the caller must not use
/// it or call its deleter afterwards. Its data must be ready for reads by the
/// time this call returns (DLPack's `stream` handshake, done by the caller).
pub unsafe fn import_dlpack_versioned(ptr: *mut DLManagedTensorVersioned) -> Result<DeviceArray> {
    let Some(ptr) = NonNull::new(ptr) else {
        return Err(null_pointer("DLManagedTensorVersioned"));
    };
    // SAFETY: live, per the contract; `deleter` sits at the same offset in
    // every major version (dlpack.h: "DLPackVersion"), so reading it and
    // `version` is allowed before the version check.
    let (version, deleter) = unsafe { (ptr.as_ref().version, ptr.as_ref().deleter) };
    let owner = TensorOwner::Versioned(ptr, deleter);
    if version.major != DLPACK_MAJOR_VERSION {
        return Err(Error::NotSupported(format!(
            "DLPack tensor version {}.{} is not supported: this consumer reads major version \
             {DLPACK_MAJOR_VERSION} (the tensor was handed back to its deleter unread)",
            version.major, version.minor
        )));
    }
    // SAFETY: live and of a major version whose layout we know.
    let tensor = unsafe { ptr.as_ref().dl_tensor };
    // SAFETY: the tensor's pointers are valid per the contract and kept
    // alive by `owner`.
    unsafe { import_tensor(&tensor, owner) }
}

/// Imports a legacy [`DLManagedTensor`], taking ownership: its deleter is
/// called exactly once, when the returned array and everything sharing its
/// memory is dropped, or before an error is returned.
///
/// The tensor must be one-dimensional (a 0-d tensor is read as one value),
/// of one lane of `int8`..`int64`, `uint8`..`uint64` or `float16/32/64`, and
/// contiguous (strides NULL or `[1]`, any stride when it holds at most one
/// value); `byte_offset` is added to `data` (values that would end past the
/// end of the address space are refused). Those types are zero-copy, on any
/// device; an 8-bit `bool` tensor on the CPU is copied into a bit-packed Arrow
/// `Boolean` array (and released at once). Data need not be aligned: arrow-rs
/// conversions copy misaligned buffers.
///
/// The array's device is the tensor's device type with its id (CPU: -1, as
/// in Arrow), implemented by [`device::lookup`]; a device type without an
/// implementation gives an array whose metadata can be read but whose data
/// cannot be copied. The array has no validity buffer and no nulls.
///
/// # Safety
/// `ptr` must be NULL (an error) or point to a live tensor that follows
/// dlpack.h, which the caller owns (taken from a `"dltensor"` capsule, say)
/// and passes on: the caller must not use it or call its deleter afterwards.
/// `data` must be valid for `shape[0]` elements from `byte_offset` on its
/// device, and ready for reads by the time this call returns.
pub unsafe fn import_dlpack(ptr: *mut DLManagedTensor) -> Result<DeviceArray> {
    let Some(ptr) = NonNull::new(ptr) else {
        return Err(null_pointer("DLManagedTensor"));
    };
    // SAFETY: live, per the contract.
    let (tensor, deleter) = unsafe { (ptr.as_ref().dl_tensor, ptr.as_ref().deleter) };
    let owner = TensorOwner::Legacy(ptr, deleter);
    // SAFETY: the tensor's pointers are valid per the contract and kept
    // alive by `owner`.
    unsafe { import_tensor(&tensor, owner) }
}

fn null_pointer(what: &str) -> Error {
    Error::invalid(&Path::root(), format!("NULL {what} pointer"))
}

/// Holds an imported tensor and calls its deleter on drop, exactly once.
enum TensorOwner {
    Legacy(
        NonNull<DLManagedTensor>,
        Option<unsafe extern "C" fn(*mut DLManagedTensor)>,
    ),
    Versioned(
        NonNull<DLManagedTensorVersioned>,
        Option<unsafe extern "C" fn(*mut DLManagedTensorVersioned)>,
    ),
}

// SAFETY: the owner only calls the deleter, which DLPack requires to be
// callable from any thread (Python specification: "sharing beyond Python
// boundaries", the GIL is the deleter's business).
unsafe impl Send for TensorOwner {}
// SAFETY: nothing is reachable through `&TensorOwner`.
unsafe impl Sync for TensorOwner {}

impl Drop for TensorOwner {
    fn drop(&mut self) {
        match *self {
            // SAFETY: the producer's deleter on its own tensor, once: the
            // owner is the only holder and drops once.
            TensorOwner::Legacy(ptr, Some(deleter)) => unsafe { deleter(ptr.as_ptr()) },
            // SAFETY: as above.
            TensorOwner::Versioned(ptr, Some(deleter)) => unsafe { deleter(ptr.as_ptr()) },
            // A NULL deleter: the producer has nothing to free.
            TensorOwner::Legacy(_, None) | TensorOwner::Versioned(_, None) => {}
        }
    }
}

/// Checks `tensor` and builds the array; `owner` is dropped (calling the
/// deleter) on error, or when a bool tensor has been copied.
///
/// # Safety
/// As for [`import_dlpack`]; `owner` keeps the tensor's pointers valid.
unsafe fn import_tensor(tensor: &DLTensor, owner: TensorOwner) -> Result<DeviceArray> {
    let imported = arrow_data_type(tensor.dtype)?;
    // SAFETY: shape and strides are valid for `ndim` values, per the contract.
    let len = unsafe { length(tensor) }?;
    let width = usize::from(tensor.dtype.bits / 8);
    let bytes = len.checked_mul(width).ok_or_else(|| {
        Error::invalid(
            &Path::root(),
            format!("DLPack tensor of {len} values of {width} bytes overflows usize"),
        )
    })?;
    if tensor.data.is_null() && len > 0 {
        return Err(Error::invalid(
            &Path::root(),
            format!(
                "DLPack tensor data is NULL but it has {len} values (NULL is only valid for an \
                 empty tensor)"
            ),
        ));
    }
    let byte_offset = usize::try_from(tensor.byte_offset).map_err(|_| {
        Error::invalid(
            &Path::root(),
            format!(
                "DLPack byte_offset {} does not fit usize",
                tensor.byte_offset
            ),
        )
    })?;
    // No allocation ends past the address space: a tensor that says so
    // cannot hold its values, and an array over it would wrap.
    let end = (tensor.data as usize)
        .checked_add(byte_offset)
        .and_then(|first| first.checked_add(bytes));
    if len > 0 && end.is_none() {
        return Err(Error::invalid(
            &Path::root(),
            format!(
                "DLPack tensor data {:p} + byte_offset {byte_offset} + {len} values of {width} \
                 bytes runs past the end of the address space",
                tensor.data
            ),
        ));
    }
    let device_type = tensor.device.device_type;
    // Arrow's CPU arrays use device id -1; DLPack's use 0.
    let device_id = if device_type == DeviceType::CPU {
        -1
    } else {
        i64::from(tensor.device.device_id)
    };
    let values = if len == 0 {
        RawBuf::NULL
    } else {
        RawBuf {
            // Device pointers are never dereferenced here: `wrapping_add`.
            ptr: tensor
                .data
                .cast::<u8>()
                .cast_const()
                .wrapping_add(byte_offset),
            len: bytes,
        }
    };
    let data_type = match imported {
        Imported::Same(data_type) => data_type,
        Imported::Bool => {
            if device_type != DeviceType::CPU {
                // Reading on the host right away could race the consumer
                // stream the producer ordered its work on.
                return Err(Error::NotSupported(format!(
                    "a DLPack bool tensor on {device_type} would need a conversion to Arrow's \
                     bit-packed boolean, which is done on the CPU only; copy it to the CPU first"
                )));
            }
            // SAFETY: CPU memory valid for `len` bytes (checked non-NULL when
            // `len` > 0), kept alive by `owner` until this returns.
            return Ok(unsafe { bool_array(values) });
        }
    };
    let node = Node::primitive(data_type.clone(), len, values);
    let owner: Owner = Arc::new(owner);
    Ok(DeviceArray::from_node(
        node,
        Field::new("", data_type, false),
        device_type,
        device_id,
        device::lookup(device_type, device_id),
        owner,
    ))
}

/// The number of values of a one-dimensional (or 0-d) contiguous tensor.
///
/// # Safety
/// `shape` and `strides` (when non-NULL) must be valid for `ndim` values.
unsafe fn length(tensor: &DLTensor) -> Result<usize> {
    match tensor.ndim {
        // A 0-d tensor holds one value (the product of no extents); shape
        // and strides may be NULL.
        0 => return Ok(1),
        1 => {}
        ndim => {
            return Err(Error::NotSupported(format!(
                "DLPack tensor has {ndim} dimensions; an Arrow array is one-dimensional \
                 (expected ndim 1, or 0 for a single value): flatten it first"
            )))
        }
    }
    if tensor.shape.is_null() {
        return Err(Error::invalid(
            &Path::root(),
            "DLPack tensor shape is NULL with ndim 1",
        ));
    }
    // SAFETY: non-NULL and valid for ndim (1) values, per the contract.
    let extent = unsafe { *tensor.shape };
    let len = usize::try_from(extent).map_err(|_| {
        Error::invalid(
            &Path::root(),
            format!("DLPack tensor shape[0] is {extent}, expected >= 0"),
        )
    })?;
    if !tensor.strides.is_null() {
        // SAFETY: as for shape.
        let stride = unsafe { *tensor.strides };
        // A stride is meaningless for at most one value (NumPy and PyTorch
        // write arbitrary strides for such dimensions).
        if stride != 1 && len > 1 {
            return Err(Error::NotSupported(format!(
                "DLPack tensor is not contiguous: stride {stride} (in elements), expected 1; \
                 make a contiguous copy first"
            )));
        }
    }
    Ok(len)
}

/// Bit-packs `len` one-byte booleans (any non-zero byte is true) into an
/// Arrow `Boolean` array on the CPU.
///
/// # Safety
/// `values` must be readable host memory for its `len` bytes (or NULL and
/// empty).
unsafe fn bool_array(values: RawBuf) -> DeviceArray {
    let bytes: &[u8] = if values.ptr.is_null() {
        &[]
    } else {
        // SAFETY: per the contract; bytes have no alignment requirement.
        unsafe { std::slice::from_raw_parts(values.ptr, values.len) }
    };
    let array = BooleanArray::new(
        BooleanBuffer::from_iter(bytes.iter().map(|b| *b != 0)),
        None,
    );
    let data = array.into_data();
    let mut extra = Vec::new();
    let node = Node::from_array_data(&data, &mut extra);
    let owner: Owner = Arc::new((data, extra));
    DeviceArray::from_node(
        node,
        Field::new("", DataType::Boolean, false),
        DeviceType::CPU,
        -1,
        Some(device::cpu()),
        owner,
    )
}

//! The producer side of the C exchange table: the static table of
//! `arrow_device.DeviceArray`, published on the type as
//! `__dlpack_c_exchange_api__` (and the draft name), and its functions,
//! each a thin shim over the library's DLPack export and import (see the
//! module above for the rules).

use std::ffi::{c_int, c_void, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr::{self, NonNull};

use arrow_buffer::MutableBuffer;
use arrow_device::device::{cuda, StreamSync};
use arrow_device::dlpack::{self, DLDevice, DLManagedTensorVersioned, DLPackVersion, DLTensor};
use arrow_device::{DeviceArray, DeviceType};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyCapsule;

use super::{DLPackExchangeAPI, DLPackExchangeAPIHeader, SetError, CAPSULE_NAME, VERSION};
use crate::array::DeviceArrayObject;
use crate::capsule::type_name;
use crate::errors::{guard, to_py};

/// The table of `arrow_device.DeviceArray`, for the life of the process.
struct Table(DLPackExchangeAPI);

// SAFETY: immutable after initialization; `prev_api` is NULL.
unsafe impl Sync for Table {}

static TABLE: Table = Table(DLPackExchangeAPI {
    header: DLPackExchangeAPIHeader {
        version: VERSION,
        prev_api: ptr::null_mut(),
    },
    managed_tensor_allocator: Some(managed_tensor_allocator),
    managed_tensor_from_py_object_no_sync: Some(managed_tensor_from_py_object_no_sync),
    managed_tensor_to_py_object_no_sync: Some(managed_tensor_to_py_object_no_sync),
    // A borrowed view needs shape and strides that outlive the call without
    // an allocation, and `DeviceArray` has no room to keep them: NULL, which
    // dlpack.h allows.
    dltensor_from_py_object_no_sync: None,
    current_work_stream: Some(current_work_stream),
});

/// The capsule that `DeviceArray.__dlpack_c_exchange_api__` (and the draft
/// name) holds: one object, made once, over the static table.
pub fn api_capsule(py: Python<'_>) -> PyResult<Bound<'_, PyCapsule>> {
    static CAPSULE: PyOnceLock<Py<PyCapsule>> = PyOnceLock::new();
    CAPSULE
        .get_or_try_init(py, || {
            let table = NonNull::from(&TABLE.0).cast::<c_void>();
            // SAFETY: a static table, never written, valid for the process;
            // no destructor is needed.
            unsafe { PyCapsule::new_with_pointer(py, table, CAPSULE_NAME) }.map(Bound::unbind)
        })
        .map(|capsule| capsule.bind(py).clone())
}

/// Runs a table function: 0 on success; -1 with the error set as the
/// Python exception otherwise, a panic included (never unwinding into C).
fn entry(f: impl FnOnce(Python<'_>) -> PyResult<()>) -> c_int {
    let run = catch_unwind(AssertUnwindSafe(|| {
        // Attached already (dlpack.h); attaching is then a no-op, and a
        // caller that broke the rule still gets a working call.
        Python::attach(|py| match guard(|| f(py)) {
            Ok(()) => 0,
            Err(err) => {
                err.restore(py);
                -1
            }
        })
    }));
    run.unwrap_or(-1)
}

/// The stream that our work on `array` is ordered on: the interface stream
/// of its CUDA device (CUDA and managed memory), `None` elsewhere.
fn work_stream_of(array: &DeviceArray) -> PyResult<StreamSync> {
    if !matches!(
        array.device_type(),
        DeviceType::CUDA | DeviceType::CUDA_MANAGED
    ) {
        return Ok(StreamSync::None);
    }
    match array
        .device()
        .and_then(|d| cuda::CudaDevice::of(d.as_ref()))
    {
        Some(cuda) => Ok(StreamSync::Handle(cuda.interface_stream().map_err(to_py)?)),
        None => Ok(StreamSync::None),
    }
}

/// `managed_tensor_from_py_object_no_sync`: a `DeviceArray` → an owned
/// versioned tensor (the `__dlpack__` export). Before it is handed out,
/// the stream `current_work_stream` reports for the array's device waits
/// on the array's `sync_event` (CUDA; the host waits elsewhere), so work
/// queued there reads the data after its producing copy.
unsafe extern "C" fn managed_tensor_from_py_object_no_sync(
    py_object: *mut c_void,
    out: *mut *mut DLManagedTensorVersioned,
) -> c_int {
    entry(|py| {
        let out = NonNull::new(out).ok_or_else(|| {
            PyValueError::new_err("managed_tensor_from_py_object_no_sync: out is NULL")
        })?;
        // SAFETY: `out` points to writable storage for one pointer.
        unsafe { out.as_ptr().write(ptr::null_mut()) };
        // SAFETY: the caller's object, alive for the call (dlpack.h); NULL
        // is an error.
        let obj = unsafe { Bound::from_borrowed_ptr_or_err(py, py_object.cast()) }?;
        let array = obj.cast::<DeviceArrayObject>().map_err(|_| {
            PyTypeError::new_err(format!(
                "arrow_device.DeviceArray's DLPack exchange table takes a DeviceArray, got {}",
                type_name(&obj)
            ))
        })?;
        let array = &array.get().inner;
        let tensor = crate::dlpack::export_versioned(py, array, work_stream_of(array)?)?;
        // SAFETY: as above.
        unsafe { out.as_ptr().write(tensor) };
        Ok(())
    })
}

/// `managed_tensor_to_py_object_no_sync`: takes the tensor over (its
/// deleter runs once, with the new array or on error) and returns a new
/// `DeviceArray`. A CUDA tensor's data is taken to be ready on our current
/// work stream, where the caller queued its work: the array is ordered
/// after that stream by an event, without waiting.
unsafe extern "C" fn managed_tensor_to_py_object_no_sync(
    tensor: *mut DLManagedTensorVersioned,
    out_py_object: *mut *mut c_void,
) -> c_int {
    entry(|py| {
        // SAFETY: the caller hands the tensor over (dlpack.h: stolen); the
        // import calls its deleter exactly once, also on error.
        let array = unsafe { dlpack::import_dlpack_versioned(tensor) }.map_err(to_py)?;
        let out = NonNull::new(out_py_object).ok_or_else(|| {
            PyValueError::new_err("managed_tensor_to_py_object_no_sync: out_py_object is NULL")
        })?;
        let array = match work_stream_of(&array)? {
            StreamSync::None => array,
            // SAFETY: the interface stream of the array's GPU, alive for
            // the process.
            stream => unsafe { crate::dlpack::ordered_after(&array, stream) }?,
        };
        let object = Bound::new(py, DeviceArrayObject::new(array))?;
        // SAFETY: writable storage for one pointer; the new reference goes
        // to the caller.
        unsafe { out.as_ptr().write(object.into_ptr().cast()) };
        Ok(())
    })
}

/// `current_work_stream`: the interface stream of our CUDA device (CUDA or
/// managed memory) `device_id`, which our exports are ordered on; NULL for
/// every other device type (the CPU, pinned memory and the emulated device
/// need no stream).
unsafe extern "C" fn current_work_stream(
    device_type: DeviceType,
    device_id: i32,
    out_current_stream: *mut *mut c_void,
) -> c_int {
    entry(|_| {
        let out = NonNull::new(out_current_stream).ok_or_else(|| {
            PyValueError::new_err("current_work_stream: out_current_stream is NULL")
        })?;
        let stream = match device_type {
            DeviceType::CUDA | DeviceType::CUDA_MANAGED => {
                let device = cuda::device(device_type, i64::from(device_id)).map_err(to_py)?;
                let cuda = cuda::CudaDevice::require(device.as_ref()).map_err(to_py)?;
                cuda.interface_stream().map_err(to_py)? as usize as *mut c_void
            }
            _ => ptr::null_mut(),
        };
        // SAFETY: writable storage for one pointer.
        unsafe { out.as_ptr().write(stream) };
        Ok(())
    })
}

/// `managed_tensor_allocator`: a new zeroed, writable tensor on the CPU of
/// the prototype's dtype and shape (compact row-major strides, data
/// aligned to 64 bytes as Arrow buffers are), which the caller owns. Other
/// devices are refused. Touches no Python object: failures go through
/// `SetError` (kind `"ValueError"` for a malformed prototype, `"TypeError"`
/// for a device this table cannot allocate on).
unsafe extern "C" fn managed_tensor_allocator(
    prototype: *mut DLTensor,
    out: *mut *mut DLManagedTensorVersioned,
    error_ctx: *mut c_void,
    set_error: Option<SetError>,
) -> c_int {
    let result = catch_unwind(AssertUnwindSafe(|| {
        let out = NonNull::new(out).ok_or(("ValueError", "out is NULL".to_string()))?;
        // SAFETY: NULL, or the caller's prototype, valid for the call.
        let prototype =
            unsafe { prototype.as_ref() }.ok_or(("ValueError", "prototype is NULL".to_string()))?;
        // SAFETY: the prototype's shape holds `ndim` extents (dlpack.h).
        let tensor = unsafe { allocate(prototype) }?;
        // SAFETY: writable storage for one pointer.
        unsafe { out.as_ptr().write(tensor) };
        Ok(())
    }));
    let (kind, message) = match result {
        Ok(Ok(())) => return 0,
        Ok(Err(failure)) => failure,
        Err(_) => (
            "RuntimeError",
            "managed_tensor_allocator panicked".to_string(),
        ),
    };
    if let Some(set_error) = set_error {
        let kind = CString::new(kind).unwrap_or_default();
        let message = CString::new(format!(
            "arrow_device.DeviceArray's managed_tensor_allocator: {message}"
        ))
        .unwrap_or_default();
        // SAFETY: the caller's callback with its context and two C strings
        // that live through the call.
        let _ = catch_unwind(|| unsafe { set_error(error_ctx, kind.as_ptr(), message.as_ptr()) });
    }
    -1
}

/// One allocation: the managed struct first (its address is the tensor's),
/// then what it points to.
#[repr(C)]
struct Allocated {
    managed: DLManagedTensorVersioned,
    shape: Box<[i64]>,
    strides: Box<[i64]>,
    _data: MutableBuffer,
}

type Failure = (&'static str, String);

/// # Safety
/// `prototype.shape` points to `ndim` extents when `ndim > 0`.
unsafe fn allocate(prototype: &DLTensor) -> Result<*mut DLManagedTensorVersioned, Failure> {
    let device = prototype.device;
    if device.device_type != DeviceType::CPU {
        return Err((
            "TypeError",
            format!(
                "allocates on the CPU only (device type {}), not on device type {} id {}",
                DeviceType::CPU.0,
                device.device_type.0,
                device.device_id
            ),
        ));
    }
    let ndim = usize::try_from(prototype.ndim).map_err(|_| {
        (
            "ValueError",
            format!("ndim must not be negative, got {}", prototype.ndim),
        )
    })?;
    if ndim > 0 && prototype.shape.is_null() {
        return Err(("ValueError", format!("shape is NULL for ndim {ndim}")));
    }
    let dtype = prototype.dtype;
    if dtype.bits == 0 || dtype.lanes == 0 {
        return Err((
            "ValueError",
            format!("dtype has {} bits and {} lanes", dtype.bits, dtype.lanes),
        ));
    }
    let shape: Box<[i64]> = if ndim == 0 {
        Box::new([])
    } else {
        // SAFETY: per the contract.
        unsafe { std::slice::from_raw_parts(prototype.shape, ndim) }.into()
    };
    if let Some(extent) = shape.iter().find(|&&e| e < 0) {
        return Err((
            "ValueError",
            format!("shape has a negative extent {extent}"),
        ));
    }
    let overflow = || {
        (
            "ValueError",
            format!(
                "a tensor of shape {shape:?} and {} bits x {} lanes overflows",
                dtype.bits, dtype.lanes
            ),
        )
    };
    // Compact row-major strides, in elements.
    let mut strides = vec![0i64; ndim].into_boxed_slice();
    let mut count: i64 = 1;
    for (stride, &extent) in strides.iter_mut().zip(shape.iter()).rev() {
        *stride = count;
        count = count.checked_mul(extent).ok_or_else(overflow)?;
    }
    let bits = (u64::from(dtype.bits) * u64::from(dtype.lanes)).div_ceil(8);
    let bytes = u64::try_from(count)
        .ok()
        .and_then(|c| c.checked_mul(bits))
        .and_then(|b| usize::try_from(b).ok())
        .filter(|&b| b <= isize::MAX as usize)
        .ok_or_else(overflow)?;
    let data = MutableBuffer::from_len_zeroed(bytes);
    let tensor = DLTensor {
        // dlpack.h: the data pointer of an empty tensor is NULL.
        data: if bytes == 0 {
            ptr::null_mut()
        } else {
            data.as_ptr().cast_mut().cast()
        },
        device: DLDevice {
            device_type: DeviceType::CPU,
            device_id: 0,
        },
        ndim: prototype.ndim,
        dtype,
        shape: ptr::null_mut(),
        strides: ptr::null_mut(),
        byte_offset: 0,
    };
    let allocated = Box::into_raw(Box::new(Allocated {
        managed: DLManagedTensorVersioned {
            version: DLPackVersion::CURRENT,
            manager_ctx: ptr::null_mut(),
            deleter: Some(delete_allocated),
            // Writable: the caller allocates to write its results.
            flags: 0,
            dl_tensor: tensor,
        },
        shape,
        strides,
        _data: data,
    }));
    // SAFETY: a fresh allocation that never moves until the deleter frees
    // it; the boxed slices' heap memory is stable too.
    unsafe {
        let allocated = &mut *allocated;
        if ndim > 0 {
            allocated.managed.dl_tensor.shape = allocated.shape.as_mut_ptr();
            allocated.managed.dl_tensor.strides = allocated.strides.as_mut_ptr();
        }
        allocated.managed.manager_ctx = (allocated as *mut Allocated).cast();
    }
    // `managed` is the first field of a `#[repr(C)]` struct.
    Ok(allocated.cast())
}

/// The deleter of allocated tensors: frees the allocation, once.
unsafe extern "C" fn delete_allocated(managed: *mut DLManagedTensorVersioned) {
    if managed.is_null() {
        return;
    }
    let _ = catch_unwind(|| {
        // SAFETY: a tensor of `allocate` (the only one to set this
        // deleter), freed once by its owner.
        drop(unsafe { Box::from_raw(managed.cast::<Allocated>()) });
    });
}

//! DLPack (Python array API standard, spec: dlpack-python-spec.rst) over the
//! library's `arrow_device::dlpack`: capsules named `dltensor` (legacy) or
//! `dltensor_versioned`, renamed `used_...` by the consumer that takes the
//! tensor over. The tensor struct is not stored inside the capsule, because
//! consumers keep its pointer after the capsule is gone: the capsule holds
//! the pointer, and its destructor calls the tensor's deleter only while the
//! capsule still has its unconsumed name.

use std::ffi::{c_void, CStr};

use arrow_device::device::{cuda, StreamSync};
use arrow_device::dlpack::{
    self, DLManagedTensor, DLManagedTensorVersioned, CAPSULE_NAME, USED_CAPSULE_NAME,
    USED_VERSIONED_CAPSULE_NAME, VERSIONED_CAPSULE_NAME,
};
use arrow_device::{DeviceArray, DeviceType};
use pyo3::exceptions::{PyBufferError, PyTypeError, PyValueError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyCapsule};

use crate::capsule::type_name;
use crate::errors::{guard, to_py};

/// `__dlpack_device__()`: `(device type, device id)` as dlpack.h numbers
/// them (the library's `dlpack_device`: id 0 for host memory).
pub fn device(array: &DeviceArray) -> PyResult<(i32, i64)> {
    let device = dlpack::dlpack_device(array).map_err(dlpack_error)?;
    Ok((device.device_type.0, i64::from(device.device_id)))
}

/// `__dlpack__(*, stream, max_version, dl_device, copy)`.
///
/// * `max_version` `(1, x)` or later gets a versioned capsule; `None` or an
///   older one the legacy capsule (spec: "if max_version is None ... the
///   producer should use the legacy").
/// * `stream`: checked by the library's rules (`dlpack_stream`: `None` or
///   -1 for the CPU and the emulated device; CUDA's values for CUDA
///   memory). For a CUDA array the consumer's stream waits on the array's
///   event on the device (`export_dlpack_for_stream`; -1: no
///   synchronization); elsewhere the host waits before the capsule is
///   returned.
/// * `dl_device` other than the array's, and `copy=True`, are refused with
///   `BufferError`: this library copies between devices only when asked
///   through `DeviceArray.to`.
pub fn export<'py>(
    py: Python<'py>,
    array: &DeviceArray,
    stream: Option<&Bound<'py, PyAny>>,
    max_version: Option<(u32, u32)>,
    dl_device: Option<(i32, i32)>,
    copy: Option<bool>,
) -> PyResult<Bound<'py, PyAny>> {
    guard(|| {
        // The library's rules for the consumer's stream; a CUDA array's
        // event is then waited on by that stream, on the device.
        let sync = dlpack::dlpack_stream(array.device_type(), stream_argument(array, stream)?)
            .map_err(to_py)?;
        let (device_type, device_id) = device(array)?;
        if let Some((want_type, want_id)) = dl_device {
            if (want_type, i64::from(want_id)) != (device_type, device_id) {
                return Err(PyBufferError::new_err(format!(
                    "the array is on DLPack device ({device_type}, {device_id}), not ({want_type}, {want_id}): copy it with DeviceArray.to first"
                )));
            }
        }
        if copy == Some(true) {
            return Err(PyBufferError::new_err(
                "copy=True is not supported: DLPack export is zero-copy; copy with DeviceArray.to",
            ));
        }
        let abi = dlpack::DlpackAbi::for_max_version(max_version);
        if abi == dlpack::DlpackAbi::Versioned {
            let raw = export_versioned(py, array, sync)?;
            // SAFETY: a tensor handed over by the library, owned by the
            // capsule until a consumer renames it.
            unsafe { new_capsule(py, raw.cast(), VERSIONED_CAPSULE_NAME, drop_versioned) }
        } else {
            let tensor = py
                .detach(|| dlpack::export_dlpack_for_stream(array, abi, sync))
                .map_err(dlpack_error)?;
            let raw = tensor.into_raw_legacy().map_err(dlpack_error)?;
            // SAFETY: as above.
            unsafe { new_capsule(py, raw.cast(), CAPSULE_NAME, drop_legacy) }
        }
    })
}

/// `array` as an owned versioned tensor whose data is ready for work that
/// the consumer queues on `stream` (the library's
/// `export_dlpack_for_stream`: a CUDA array's event is waited on by that
/// stream on the device; elsewhere the host waits, with the GIL released,
/// since the emulated device's worker may need it to finish). The caller
/// owns the tensor: it must call its deleter once. Shared by `__dlpack__`
/// and the C exchange table (`exchange/export.rs`).
pub(crate) fn export_versioned(
    py: Python<'_>,
    array: &DeviceArray,
    stream: StreamSync,
) -> PyResult<*mut DLManagedTensorVersioned> {
    let tensor = py
        .detach(|| dlpack::export_dlpack_for_stream(array, dlpack::DlpackAbi::Versioned, stream))
        .map_err(dlpack_error)?;
    tensor.into_raw_versioned().map_err(dlpack_error)
}

/// `stream` as an integer, or `None`; anything else (a bool, a float, an
/// int beyond 64 bits) is a `ValueError` listing the allowed values.
fn stream_argument(
    array: &DeviceArray,
    stream: Option<&Bound<'_, PyAny>>,
) -> PyResult<Option<i64>> {
    let Some(stream) = stream.filter(|s| !s.is_none()) else {
        return Ok(None);
    };
    match stream.extract::<i64>() {
        Ok(value) if !stream.is_instance_of::<PyBool>() => Ok(Some(value)),
        _ => Err(PyValueError::new_err(format!(
            "stream must be {} for device type {}, got {}",
            dlpack::dlpack_stream_values(array.device_type()),
            array.device_type(),
            stream
                .repr()
                .map(|r| r.to_string())
                .unwrap_or_else(|_| type_name(stream))
        ))),
    }
}

/// What DLPack cannot carry is a `BufferError` (the array API's error for
/// "cannot export"), with the library's message; other failures keep their
/// usual mapping.
fn dlpack_error(err: arrow_device::Error) -> PyErr {
    match err {
        arrow_device::Error::NotSupported(message) => PyBufferError::new_err(message),
        other => to_py(other),
    }
}

/// # Safety
/// `pointer` is a tensor the new capsule owns; `destructor` matches its kind.
unsafe fn new_capsule<'py>(
    py: Python<'py>,
    pointer: *mut c_void,
    name: &'static CStr,
    destructor: unsafe extern "C" fn(*mut ffi::PyObject),
) -> PyResult<Bound<'py, PyAny>> {
    // SAFETY: a non-NULL pointer, a static name, and a destructor for it.
    let capsule = unsafe { ffi::PyCapsule_New(pointer, name.as_ptr(), Some(destructor)) };
    if capsule.is_null() {
        // The capsule was not made: the tensor is still ours to free.
        // SAFETY: per the contract, `destructor` frees this kind of tensor;
        // the deleter runs through a fake capsule-free path below.
        unsafe { delete_tensor(pointer, name) };
        return Err(PyErr::fetch(py));
    }
    // SAFETY: a new reference just returned by PyCapsule_New.
    Ok(unsafe { Bound::from_owned_ptr(py, capsule) })
}

/// Calls the deleter of the tensor at `pointer`, of the kind `name` says.
///
/// # Safety
/// `pointer` is an unconsumed tensor of that kind.
unsafe fn delete_tensor(pointer: *mut c_void, name: &CStr) {
    if name == VERSIONED_CAPSULE_NAME {
        let tensor = pointer.cast::<DLManagedTensorVersioned>();
        // SAFETY: per the contract.
        if let Some(deleter) = unsafe { (*tensor).deleter } {
            // SAFETY: the producer's deleter on its own tensor, once.
            unsafe { deleter(tensor) };
        }
    } else {
        let tensor = pointer.cast::<DLManagedTensor>();
        // SAFETY: per the contract.
        if let Some(deleter) = unsafe { (*tensor).deleter } {
            // SAFETY: the producer's deleter on its own tensor, once.
            unsafe { deleter(tensor) };
        }
    }
}

/// The capsule destructor: frees the tensor only if no consumer took it
/// (spec: a consumer renames the capsule to `used_dltensor[_versioned]`).
///
/// # Safety
/// `capsule` is a capsule made by `new_capsule` with `name`.
unsafe fn drop_unconsumed(capsule: *mut ffi::PyObject, name: &CStr) {
    // SAFETY: called by Python on the capsule being destroyed.
    if unsafe { ffi::PyCapsule_IsValid(capsule, name.as_ptr()) } != 1 {
        return; // renamed: the consumer owns the tensor
    }
    // SAFETY: valid with this name, so the pointer is our tensor.
    let pointer = unsafe { ffi::PyCapsule_GetPointer(capsule, name.as_ptr()) };
    if !pointer.is_null() {
        // SAFETY: unconsumed, ours to free.
        unsafe { delete_tensor(pointer, name) };
    }
}

unsafe extern "C" fn drop_legacy(capsule: *mut ffi::PyObject) {
    // SAFETY: Python calls this on a capsule we made with this name.
    let _ = std::panic::catch_unwind(|| unsafe { drop_unconsumed(capsule, CAPSULE_NAME) });
}

unsafe extern "C" fn drop_versioned(capsule: *mut ffi::PyObject) {
    // SAFETY: as above.
    let _ =
        std::panic::catch_unwind(|| unsafe { drop_unconsumed(capsule, VERSIONED_CAPSULE_NAME) });
}

/// `arrow_device.array(obj)` for an object with `__dlpack__`: asks for a
/// versioned capsule (`max_version=(1, 1)`), retrying with no arguments for
/// producers that predate it, and takes the tensor over (renaming the
/// capsule, spec: "Consumer ... must rename the capsule").
///
/// For a producer on CUDA memory (`__dlpack_device__` says CUDA or
/// CUDA_MANAGED), the consumer's stream passed in is the CUDA device's
/// interface stream; the array is then ordered after it by an event (its
/// `sync_event`), so the host never waits.
pub fn import(obj: &Bound<'_, PyAny>) -> PyResult<DeviceArray> {
    let py = obj.py();
    let consumer = consumer_stream(obj)?;
    let kwargs = pyo3::types::PyDict::new(py);
    kwargs.set_item("max_version", (1, 1))?;
    if let Some(handle) = consumer {
        kwargs.set_item("stream", handle)?;
    }
    let capsule = match obj.call_method("__dlpack__", (), Some(&kwargs)) {
        Ok(capsule) => capsule,
        // Only a producer that predates max_version is asked again; a
        // TypeError about the data (pyarrow raises one for nulls) stands.
        Err(err) if err.is_instance_of::<PyTypeError>(py) && is_about_keywords(py, &err) => {
            obj.call_method0("__dlpack__")?
        }
        Err(err) => return Err(err),
    };
    let array = take_tensor(&capsule)?;
    match consumer {
        None => Ok(array),
        // SAFETY: the interface stream lives for the process.
        Some(handle) => unsafe { ordered_after(&array, StreamSync::Handle(handle)) },
    }
}

/// Whether an import from a producer on `device_type` is ordered after a
/// producer's stream: CUDA device and managed memory, when CUDA works here
/// (the arrays of other device types need no stream, or have no device of
/// this library to record an event on).
pub(crate) fn orders_by_stream(device_type: DeviceType) -> bool {
    matches!(device_type, DeviceType::CUDA | DeviceType::CUDA_MANAGED) && cuda::is_available()
}

/// `array`, an import whose data the producer made ready on `stream`,
/// ordered after the work queued there so far: an event recorded there
/// becomes its `sync_event` (the library's `ordered_after_stream`); the host
/// does not wait.
///
/// # Safety
/// `stream` names a live stream of the primary context of the array's GPU
/// (or 1, 2: the default streams).
pub(crate) unsafe fn ordered_after(
    array: &DeviceArray,
    stream: StreamSync,
) -> PyResult<DeviceArray> {
    // SAFETY: per this function's contract.
    unsafe { array.ordered_after_stream(stream) }.map_err(to_py)
}

/// The stream to hand a producer whose `__dlpack_device__()` is CUDA or
/// CUDA_MANAGED memory (the interface stream of that CUDA device), when
/// CUDA works here; `None` for other producers.
fn consumer_stream(obj: &Bound<'_, PyAny>) -> PyResult<Option<u64>> {
    let py = obj.py();
    let Some(method) = obj.getattr_opt(pyo3::intern!(py, "__dlpack_device__"))? else {
        return Ok(None);
    };
    let (device_type, device_id): (i32, i64) = method.call0()?.extract().map_err(|_| {
        PyTypeError::new_err("__dlpack_device__() must return (device_type: int, device_id: int)")
    })?;
    let device_type = DeviceType(device_type);
    if !orders_by_stream(device_type) {
        return Ok(None);
    }
    let device = cuda::device(device_type, device_id).map_err(to_py)?;
    cuda::CudaDevice::of(device.as_ref())
        .map(|cuda| cuda.interface_stream())
        .transpose()
        .map_err(to_py)
}

/// Takes over the tensor of a `__dlpack__()` result (renaming its capsule).
fn take_tensor(capsule: &Bound<'_, PyAny>) -> PyResult<DeviceArray> {
    let capsule = capsule.cast::<PyCapsule>().map_err(|_| {
        PyTypeError::new_err(format!(
            "__dlpack__() must return a PyCapsule, got {}",
            type_name(capsule)
        ))
    })?;
    if capsule.is_valid_checked(Some(VERSIONED_CAPSULE_NAME)) {
        let pointer = capsule.pointer_checked(Some(VERSIONED_CAPSULE_NAME))?;
        rename(capsule, USED_VERSIONED_CAPSULE_NAME)?;
        // SAFETY: an unconsumed versioned tensor, now ours (renamed).
        return unsafe { dlpack::import_dlpack_versioned(pointer.as_ptr().cast()) }.map_err(to_py);
    }
    if capsule.is_valid_checked(Some(CAPSULE_NAME)) {
        let pointer = capsule.pointer_checked(Some(CAPSULE_NAME))?;
        rename(capsule, USED_CAPSULE_NAME)?;
        // SAFETY: an unconsumed legacy tensor, now ours (renamed).
        return unsafe { dlpack::import_dlpack(pointer.as_ptr().cast()) }.map_err(to_py);
    }
    Err(PyValueError::new_err(
        "__dlpack__() returned a capsule that is neither 'dltensor' nor 'dltensor_versioned' (already consumed?)",
    ))
}

/// Whether a `TypeError` says the call's keyword arguments were not
/// accepted ("unexpected keyword argument 'max_version'").
fn is_about_keywords(py: Python<'_>, err: &PyErr) -> bool {
    let text = err.value(py).to_string();
    text.contains("keyword") || text.contains("max_version") || text.contains("argument")
}

fn rename(capsule: &Bound<'_, PyCapsule>, name: &'static CStr) -> PyResult<()> {
    // SAFETY: a live capsule; the new name is static, as Python requires.
    if unsafe { ffi::PyCapsule_SetName(capsule.as_ptr(), name.as_ptr()) } != 0 {
        return Err(PyErr::fetch(capsule.py()));
    }
    Ok(())
}

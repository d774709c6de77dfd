//! The consumer side of the C exchange table: `arrow_device.array(obj)`
//! takes a tensor over through the table of `type(obj)` (see the module
//! above for the rules), and builds the array with the library's DLPack
//! import, the one the `__dlpack__` capsule path uses.

use std::collections::BTreeMap;
use std::ffi::{c_int, c_void};
use std::ptr::{self, NonNull};
use std::sync::Mutex;

use arrow_device::device::StreamSync;
use arrow_device::dlpack::{self, DLDevice, DLManagedTensorVersioned};
use arrow_device::DeviceArray;
use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyCapsule, PyType};

use super::{
    CurrentWorkStream, DLPackExchangeAPI, DLPackExchangeAPIHeader, ATTRIBUTE, CAPSULE_NAME,
    DRAFT_ATTRIBUTE, VERSION,
};
use crate::capsule::{qualified_name, type_name};
use crate::errors::to_py;

/// How many tables of a `prev_api` chain a consumer reads before giving up
/// (a chain that loops back on itself must not hang the import).
const MAX_CHAIN: usize = 8;

/// `obj` taken over through the C exchange table of its type, or `None`
/// when the type has none, or none of a version this module reads (then
/// `__dlpack__` remains: the table is an addition to it, dlpack.h).
///
/// The tensor comes from `managed_tensor_from_py_object_no_sync`; a tensor
/// on CUDA memory is then ordered after the producer's
/// `current_work_stream` for its device, as the `__dlpack__` import orders
/// it after the stream it passed. The array is built by the library's
/// DLPack import, the one the capsule path uses.
///
/// Errors: a table that breaks dlpack.h (an attribute that is neither a
/// capsule named `"dlpack_exchange_api"` nor an address, a NULL required
/// function) is a `TypeError` or `ValueError` naming the type; a producer
/// function that fails raises its exception, or a `RuntimeError` naming the
/// function when it failed without setting one.
pub fn import(obj: &Bound<'_, PyAny>) -> PyResult<Option<DeviceArray>> {
    let py = obj.py();
    let ty = obj.get_type();
    let Some(table) = table_of(&ty)? else {
        return Ok(None);
    };
    let from_py_object = required(
        table.managed_tensor_from_py_object_no_sync,
        &ty,
        "managed_tensor_from_py_object_no_sync",
    )?;
    let current_work_stream = required(table.current_work_stream, &ty, "current_work_stream")?;
    required(
        table.managed_tensor_allocator,
        &ty,
        "managed_tensor_allocator",
    )?;
    required(
        table.managed_tensor_to_py_object_no_sync,
        &ty,
        "managed_tensor_to_py_object_no_sync",
    )?;

    let mut out: *mut DLManagedTensorVersioned = ptr::null_mut();
    // SAFETY: the producer's function on an object of the type the table
    // was read from, with the GIL held, as dlpack.h asks.
    let status = unsafe { from_py_object(obj.as_ptr().cast(), &mut out) };
    if let Err(err) = outcome(py, status, &ty, "managed_tensor_from_py_object_no_sync") {
        if status == 0 && !out.is_null() {
            // A success that left an exception set: the tensor is ours to
            // hand back.
            // SAFETY: an owned tensor, unused.
            drop(unsafe { dlpack::import_dlpack_versioned(out) });
        }
        return Err(err);
    }
    let Some(tensor) = NonNull::new(out) else {
        return Err(PyValueError::new_err(format!(
            "{}'s DLPack exchange table: managed_tensor_from_py_object_no_sync returned 0 but no tensor",
            qualified_name(&ty)
        )));
    };
    // Only a major version this crate reads may be read past `deleter`;
    // the import below refuses the others (and calls the deleter).
    // SAFETY: a live tensor (the producer's answer); `version` is readable
    // in every major version (dlpack.h, "DLPackVersion").
    let device = unsafe {
        let tensor = tensor.as_ref();
        (tensor.version.major == dlpack::abi::DLPACK_MAJOR_VERSION)
            .then_some(tensor.dl_tensor.device)
    };
    // SAFETY: an owned tensor, handed over once: the import calls its
    // deleter exactly once, when the array goes or on error.
    let array = unsafe { dlpack::import_dlpack_versioned(tensor.as_ptr()) }.map_err(to_py)?;
    match device {
        Some(device) if crate::dlpack::orders_by_stream(device.device_type) => {
            let stream = producer_stream(py, current_work_stream, device, &ty)?;
            // SAFETY: the producer's current stream on the tensor's GPU,
            // which dlpack.h makes it answer for (a stream of the GPU's
            // primary context, the one the CUDA runtime uses).
            unsafe { crate::dlpack::ordered_after(&array, stream) }.map(Some)
        }
        _ => Ok(Some(array)),
    }
}

/// The table of `ty` of a major version this module reads, walking
/// `prev_api`; `None` when the type publishes none (or sets it to `None`,
/// as a subclass that opts out would).
fn table_of(ty: &Bound<'_, PyType>) -> PyResult<Option<&'static DLPackExchangeAPI>> {
    let py = ty.py();
    if WithoutTable::contains(ty) {
        return Ok(None);
    }
    for name in [
        pyo3::intern!(py, ATTRIBUTE),
        pyo3::intern!(py, DRAFT_ATTRIBUTE),
    ] {
        let Some(value) = ty.getattr_opt(name)? else {
            continue;
        };
        if value.is_none() {
            return Ok(None);
        }
        let header = table_pointer(&value, ty, name.to_str()?)?;
        return Ok(supported(header));
    }
    WithoutTable::remember(ty);
    Ok(None)
}

/// Immutable types (`numpy.ndarray`, extension types) found without a
/// table. Python code cannot give them one later, so each is looked up
/// once: a lookup that misses raises and clears an `AttributeError` per
/// name under the limited API, about 0.3 µs each, on every `__dlpack__`
/// import otherwise. Mutable types (Python classes, which a library may
/// patch, as tvm-ffi patches `torch.Tensor`) are looked up every time.
struct WithoutTable;

/// By address, holding the type so that the address is never reused.
static WITHOUT_TABLE: Mutex<BTreeMap<usize, Py<PyType>>> = Mutex::new(BTreeMap::new());

impl WithoutTable {
    fn contains(ty: &Bound<'_, PyType>) -> bool {
        let known = WITHOUT_TABLE
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        known.contains_key(&(ty.as_ptr() as usize))
    }

    fn remember(ty: &Bound<'_, PyType>) {
        // SAFETY: a live type object.
        let flags = unsafe { pyo3::ffi::PyType_GetFlags(ty.as_type_ptr()) };
        if flags & pyo3::ffi::Py_TPFLAGS_IMMUTABLETYPE == 0 {
            return;
        }
        let mut known = WITHOUT_TABLE
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        known.insert(ty.as_ptr() as usize, ty.clone().unbind());
    }
}

/// The table's address in the attribute `name` of `ty`: a capsule named
/// `"dlpack_exchange_api"`, or (draft) an int.
fn table_pointer(
    value: &Bound<'_, PyAny>,
    ty: &Bound<'_, PyType>,
    name: &str,
) -> PyResult<NonNull<DLPackExchangeAPIHeader>> {
    let address = if let Ok(capsule) = value.cast::<PyCapsule>() {
        if !capsule.is_valid_checked(Some(CAPSULE_NAME)) {
            let found = capsule
                .name()
                .ok()
                .flatten()
                // SAFETY: a capsule's name is a C string that lives as long
                // as the capsule, which is held here.
                .map(|n| format!("{:?}", unsafe { n.as_cstr() }))
                .unwrap_or_else(|| "no name".to_string());
            return Err(PyValueError::new_err(format!(
                "{}.{name} must be a PyCapsule named \"dlpack_exchange_api\" (dlpack.h), got one with {found}",
                qualified_name(ty)
            )));
        }
        capsule.pointer_checked(Some(CAPSULE_NAME))?.as_ptr() as usize
    } else if let Ok(address) = value.extract::<usize>() {
        address
    } else {
        return Err(PyTypeError::new_err(format!(
            "{}.{name} must be a PyCapsule named \"dlpack_exchange_api\" (or the table's address as an int), got {}",
            qualified_name(ty),
            type_name(value)
        )));
    };
    NonNull::new(address as *mut DLPackExchangeAPIHeader).ok_or_else(|| {
        PyValueError::new_err(format!(
            "{}.{name} holds a NULL DLPackExchangeAPI pointer",
            qualified_name(ty)
        ))
    })
}

/// The first table of major version 1 in the chain that starts at
/// `header`; `None` when there is none within [`MAX_CHAIN`] links.
fn supported(header: NonNull<DLPackExchangeAPIHeader>) -> Option<&'static DLPackExchangeAPI> {
    let mut next = header.as_ptr();
    for _ in 0..MAX_CHAIN {
        // SAFETY: a table stays valid for the life of the process, and the
        // header is laid out alike in every version (dlpack.h).
        let header = unsafe { next.as_ref() }?;
        if header.version.major == VERSION.major {
            // SAFETY: a major version 1 header opens a whole 1.x table.
            return Some(unsafe { &*(header as *const DLPackExchangeAPIHeader).cast() });
        }
        next = header.prev_api;
    }
    None
}

/// `function`, which dlpack.h says must not be NULL.
fn required<F>(function: Option<F>, ty: &Bound<'_, PyType>, name: &str) -> PyResult<F> {
    function.ok_or_else(|| {
        PyValueError::new_err(format!(
            "{}'s DLPack exchange table has a NULL {name}, which dlpack.h requires",
            qualified_name(ty)
        ))
    })
}

/// A producer function's status as a result: 0 with no exception set, else
/// the exception it set (or a `RuntimeError` naming it when it set none).
fn outcome(py: Python<'_>, status: c_int, ty: &Bound<'_, PyType>, function: &str) -> PyResult<()> {
    match (status, PyErr::take(py)) {
        (0, None) => Ok(()),
        (_, Some(err)) => Err(err),
        (status, None) => Err(PyRuntimeError::new_err(format!(
            "{}'s DLPack exchange table: {function} returned {status} without setting a Python exception",
            qualified_name(ty)
        ))),
    }
}

/// The stream the producer's work on `device` is queued on, as the
/// protocols number streams: NULL is the CUDA default stream, which the
/// runtime API takes for the legacy one (PyTorch passes 1 for it on
/// `__dlpack__`); 1 and 2 are the legacy and per-thread default streams.
fn producer_stream(
    py: Python<'_>,
    current_work_stream: CurrentWorkStream,
    device: DLDevice,
    ty: &Bound<'_, PyType>,
) -> PyResult<StreamSync> {
    let mut stream: *mut c_void = ptr::null_mut();
    // SAFETY: the producer's function, with the GIL held.
    let status = unsafe { current_work_stream(device.device_type, device.device_id, &mut stream) };
    outcome(py, status, ty, "current_work_stream")?;
    Ok(match stream as usize {
        0 | 1 => StreamSync::Legacy,
        2 => StreamSync::PerThread,
        handle => StreamSync::Handle(handle as u64),
    })
}

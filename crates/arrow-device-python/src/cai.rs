//! The CUDA Array Interface (`__cuda_array_interface__`, versions 2 and 3)
//! over the library's `arrow_device::cai`: this file only converts the
//! dict's Python values to the library's `Value`s and back; every rule
//! (missing keys, types, stream 0, strides, ...) is the library's.
//!
//! Importing device memory needs the CUDA device, which this build does not
//! have: `import_on_cuda` is the one place that changes when it does.

use arrow_device::cai::{self, CudaArrayInterface, ImportPlan, Value};
use arrow_device::{DeviceArray, Error};
use pyo3::exceptions::{PyAttributeError, PyTypeError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyList, PyString, PyTuple};

use crate::capsule::type_name;
use crate::device::cuda_unavailable;
use crate::errors::{to_py, IntoPy};

/// The dict's keys (spec v3); others are not read.
const KEYS: [&str; 8] = [
    "shape", "typestr", "data", "version", "strides", "descr", "mask", "stream",
];

/// How deep masks are converted: the array's, and the mask's own (which the
/// library refuses without reading further); this bounds a producer whose
/// mask is itself.
const MAX_DEPTH: usize = 2;

/// The Python objects an imported array keeps alive: the producer and its
/// mask's producer (the interface has no owner slot; spec v3, "Lifetime
/// management": the consumer must keep the producer alive).
struct PyOwners {
    _objects: Vec<Py<PyAny>>,
}

/// `arrow_device.array(obj)` for an object whose `__cuda_array_interface__`
/// is `interface`: checked by the library's rules (a `ValueError` or
/// `TypeError` naming the entry), then imported on its CUDA device.
pub fn import(obj: &Bound<'_, PyAny>, interface: &Bound<'_, PyAny>) -> PyResult<DeviceArray> {
    let mut owners = vec![obj.clone().unbind()];
    let entries = entries(interface, &mut owners, 0)?;
    let plan = CudaArrayInterface::from_entries(entries)
        .and_then(|cai| cai.validate())
        .py()?;
    import_on_cuda(&plan, PyOwners { _objects: owners })
}

/// The single call site that needs the CUDA device and a stream wait on a
/// raw `CUstream` (not in the library yet). It is to become:
///
/// ```text
/// let (device_type, ordinal) = cuda::pointer_memory_type(plan.data_ptr)?; // CUDA or CUDA_MANAGED
/// let device = crate::device::cuda_device(device_type, ordinal)?;
/// // wait on plan.stream (and plan.mask's stream) on `device`, then:
/// // SAFETY: validated plan of a live producer kept by the owner; stream waited on.
/// unsafe { cai::import(&plan, device, Arc::new(owner)) }.py()
/// ```
///
/// A zero-size array has no pointer to ask: use device 0's context.
fn import_on_cuda(plan: &ImportPlan, owner: PyOwners) -> PyResult<DeviceArray> {
    let _ = (plan, owner);
    let why = if arrow_device::device::cuda::is_available() {
        "importing CUDA memory from __cuda_array_interface__ (honouring its stream) is not implemented yet"
    } else {
        "no CUDA driver or GPU"
    };
    Err(cuda_unavailable(&format!(
        "cannot import an object with __cuda_array_interface__ (its dict is valid): {why}"
    )))
}

/// `DeviceArray.__cuda_array_interface__`: the version 3 dict of an array on
/// CUDA or CUDA_MANAGED memory. Anything the interface cannot describe
/// (another device, nulls, a type without a typestr) raises
/// `AttributeError`, so that `hasattr(x, "__cuda_array_interface__")`, how
/// consumers probe for it, is False.
///
/// `stream` is `None`: the array's `sync_event` is waited on first, on the
/// host, so no work is pending (spec: "If there is no work enqueued on the
/// data, then the stream entry may be either None, or not provided").
/// With the CUDA device, a stream made to wait on the event (and kept alive
/// as long as the array) would avoid blocking the host.
pub fn export<'py>(py: Python<'py>, array: &DeviceArray) -> PyResult<Bound<'py, PyDict>> {
    let cai = cai::describe(array).map_err(|err| match err {
        Error::NotSupported(message) => {
            PyAttributeError::new_err(format!("__cuda_array_interface__: {message}"))
        }
        other => to_py(other),
    })?;
    if !array.sync_event().is_null() {
        if array.device().is_none() {
            return Err(cuda_unavailable(&format!(
                "cannot wait on the sync_event of an array on {} device {}",
                array.device_type(),
                array.device_id()
            )));
        }
        py.detach(|| array.synchronize()).py()?;
    }
    let dict = PyDict::new(py);
    for (key, value) in cai.to_entries() {
        dict.set_item(key, to_py_value(py, &value)?)?;
    }
    Ok(dict)
}

/// The entries of a `__cuda_array_interface__` dict, as library values.
fn entries(
    interface: &Bound<'_, PyAny>,
    owners: &mut Vec<Py<PyAny>>,
    depth: usize,
) -> PyResult<Vec<(String, Value)>> {
    let dict = interface.cast::<PyDict>().map_err(|_| {
        PyTypeError::new_err(format!(
            "__cuda_array_interface__ must be a dict, got {}",
            type_name(interface)
        ))
    })?;
    let mut entries = Vec::new();
    for key in KEYS {
        if let Some(value) = dict.get_item(key)? {
            entries.push((key.to_string(), value_of(&value, owners, depth)?));
        }
    }
    Ok(entries)
}

/// A Python value as the library's `Value`; an object exposing
/// `__cuda_array_interface__` (a mask) becomes its dict, and is kept alive.
fn value_of(obj: &Bound<'_, PyAny>, owners: &mut Vec<Py<PyAny>>, depth: usize) -> PyResult<Value> {
    if obj.is_none() {
        return Ok(Value::None);
    }
    // Before ints: Python's bools are ints.
    if let Ok(flag) = obj.cast::<PyBool>() {
        return Ok(Value::Bool(flag.is_true()));
    }
    if let Ok(text) = obj.cast::<PyString>() {
        return Ok(Value::Str(text.to_cow()?.into_owned()));
    }
    if obj.is_instance_of::<PyTuple>() || obj.is_instance_of::<PyList>() {
        let items = obj
            .try_iter()?
            .map(|item| value_of(&item?, owners, depth))
            .collect::<PyResult<_>>()?;
        return Ok(Value::Tuple(items));
    }
    if depth < MAX_DEPTH {
        if obj.is_instance_of::<PyDict>() {
            return Ok(Value::Dict(entries(obj, owners, depth + 1)?));
        }
        let py = obj.py();
        if let Some(nested) = obj.getattr_opt(pyo3::intern!(py, "__cuda_array_interface__"))? {
            owners.push(obj.clone().unbind());
            return Ok(Value::Dict(entries(&nested, owners, depth + 1)?));
        }
    }
    // Python ints and anything with __index__ (NumPy integers).
    if let Ok(int) = obj.extract::<i128>() {
        return Ok(Value::Int(int));
    }
    // NumPy's bool_.
    if let Ok(flag) = obj.extract::<bool>() {
        return Ok(Value::Bool(flag));
    }
    Ok(Value::Other(type_name(obj)))
}

/// A library value as a Python object (for the exported dict).
fn to_py_value<'py>(py: Python<'py>, value: &Value) -> PyResult<Bound<'py, PyAny>> {
    Ok(match value {
        Value::None => py.None().into_bound(py),
        Value::Bool(flag) => PyBool::new(py, *flag).to_owned().into_any(),
        Value::Int(int) => int.into_pyobject(py)?.into_any(),
        Value::Str(text) => PyString::new(py, text).into_any(),
        Value::Tuple(items) => {
            let items = items
                .iter()
                .map(|item| to_py_value(py, item))
                .collect::<PyResult<Vec<_>>>()?;
            PyTuple::new(py, items)?.into_any()
        }
        Value::Dict(entries) => {
            let dict = PyDict::new(py);
            for (key, value) in entries {
                dict.set_item(key, to_py_value(py, value)?)?;
            }
            dict.into_any()
        }
        Value::Other(name) => PyString::new(py, name).into_any(),
    })
}

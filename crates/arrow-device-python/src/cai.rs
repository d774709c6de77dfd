//! The CUDA Array Interface (`__cuda_array_interface__`, versions 2 and 3)
//! over the library: `arrow_device::cai` has every rule of the dict
//! (missing keys, types, stream 0, strides, ...) and
//! `arrow_device::device::cuda` imports and exports the memory (streams,
//! masks, `|b1` packing). This file only converts the dict's Python values
//! to the library's `Value`s and back, and makes the mask object.

use std::sync::Arc;

use arrow_device::cai::{CudaArrayInterface, Value};
use arrow_device::device::cuda;
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
/// `TypeError` naming the entry), then imported on the CUDA device its
/// pointer belongs to, ordered after its `stream` without blocking.
pub fn import(obj: &Bound<'_, PyAny>, interface: &Bound<'_, PyAny>) -> PyResult<DeviceArray> {
    let py = obj.py();
    let mut owners = vec![obj.clone().unbind()];
    let entries = entries(interface, &mut owners, 0)?;
    let plan = CudaArrayInterface::from_entries(entries)
        .and_then(|cai| cai.validate())
        .py()?;
    if !cuda::is_available() {
        return Err(cuda_unavailable(
            "cannot import an object with __cuda_array_interface__ (its dict is valid): no \
             CUDA driver or GPU",
        ));
    }
    let owner = Arc::new(PyOwners { _objects: owners });
    // SAFETY: a validated plan of the interface of `obj`, which `owner`
    // keeps alive; the spec makes the producer answer for its pointers and
    // its stream.
    py.detach(|| unsafe { cuda::import_cai(&plan, owner) }).py()
}

/// The mask object of an exported interface: exposes the mask's own
/// `__cuda_array_interface__` (`|b1`, one byte per value, 1 for valid) and
/// keeps the bytes alive.
#[pyclass(name = "CudaArrayMask", module = "arrow_device", frozen)]
pub struct PyCudaArrayMask {
    interface: CudaArrayInterface,
    _bytes: DeviceArray,
}

#[pymethods]
impl PyCudaArrayMask {
    #[getter(__cuda_array_interface__)]
    fn cuda_array_interface<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        to_dict(py, &self.interface)
    }

    fn __len__(&self) -> usize {
        self._bytes.len()
    }
}

/// `DeviceArray.__cuda_array_interface__`: the version 3 dict of an array on
/// CUDA or CUDA_MANAGED memory, from the library's `export_cai`: `stream`
/// is `None` when no work is pending, otherwise a stream of the device that
/// orders after the array's `sync_event`; an array with nulls has a `mask`
/// object. Anything the interface cannot describe (another device, a type
/// without a typestr, nulls without a CUDA device) raises `AttributeError`,
/// so that `hasattr(x, "__cuda_array_interface__")`, how consumers probe
/// for it, is False.
pub fn export<'py>(py: Python<'py>, array: &DeviceArray) -> PyResult<Bound<'py, PyDict>> {
    let exported = py
        .detach(|| cuda::export_cai(array))
        .map_err(|err| match err {
            Error::NotSupported(message) => {
                PyAttributeError::new_err(format!("__cuda_array_interface__: {message}"))
            }
            other => to_py(other),
        })?;
    let dict = to_dict(py, &exported.interface)?;
    if let Some(mask) = exported.mask {
        let mask = PyCudaArrayMask {
            interface: mask.interface,
            _bytes: mask.bytes,
        };
        dict.set_item("mask", Bound::new(py, mask)?)?;
    }
    Ok(dict)
}

fn to_dict<'py>(py: Python<'py>, interface: &CudaArrayInterface) -> PyResult<Bound<'py, PyDict>> {
    let dict = PyDict::new(py);
    for (key, value) in interface.to_entries() {
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

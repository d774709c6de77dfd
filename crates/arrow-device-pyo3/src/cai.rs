//! The CUDA Array Interface (`__cuda_array_interface__`, versions 2 and 3)
//! over the library: `arrow_device::cai` has every rule of the dict
//! (missing keys, types, stream 0, strides, ...) and
//! `arrow_device::cai::cuda` imports and exports the memory (streams,
//! masks, `|b1` packing). This file only converts the dict's Python values
//! to the library's `Value`s and back, and makes the mask object.

use std::sync::Arc;

use arrow_device::cai::cuda::{export_cai, import_cai};
use arrow_device::cai::{CudaArrayInterface, Value};
use arrow_device::device::cuda;
use arrow_device::{DeviceArray, Error};
use pyo3::exceptions::{PyAttributeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyInt, PyList, PyString, PyTuple};

use crate::capsule::type_name;
use crate::device::cuda_unavailable;
use crate::errors::{to_py, PyResultExt};
use crate::interpreter::PyOwned;

/// The dict's keys (spec v3); others are not read.
const KEYS: [&str; 8] = [
    "shape", "typestr", "data", "version", "strides", "descr", "mask", "stream",
];

/// The dict's name in messages, as the library names it.
const ROOT: &str = "__cuda_array_interface__";

// How much of a Python object is read, per entry of the dict. The values
// come from any producer and are read before the library checks them, so
// the reader itself must not follow a self-referential list or a tuple
// nested 100,000 deep down the stack, nor copy a list of 10^8 items. A valid
// interface (spec v3) is small and shallow: `shape`, `strides` and `data`
// are flat tuples of ints (NumPy allows at most 64 dimensions, NPY_MAXDIMS),
// `descr` is a list of `(name, typestr)` tuples, `mask` is one nested
// interface whose own `mask` is refused unread. The limits leave a wide
// margin over that, so that a structured `descr` (records inside records,
// sub-array shapes), which the library refuses with its own message, is
// still read far enough to be named as one.

/// Tuples and lists inside each other in one entry: a valid one nests 2
/// (`descr`), a structured `descr` a few more.
const MAX_NESTING: usize = 8;

/// Values (each scalar, tuple or list counts one) in one entry: a valid one
/// has at most 65 (a shape or strides of 64 dimensions, and its tuple).
const MAX_VALUES: usize = 256;

/// Characters of one `str`: type strings are a few (`<M8[ns]`), and field
/// names of a plain `descr` are empty.
const MAX_STR_CHARS: usize = 256;

/// The Python objects an imported array keeps alive: the producer and its
/// mask's producer (the interface has no owner slot; spec v3, "Lifetime
/// management": the consumer must keep the producer alive). Released with
/// the array, wherever that is (a C consumer's thread, interpreter exit):
/// hence `PyOwned`.
struct PyOwners {
    _objects: PyOwned<Vec<Py<PyAny>>>,
}

/// `arrow_device.array(obj)` for an object whose `__cuda_array_interface__`
/// is `interface`: checked by the library's rules (a `ValueError` or
/// `TypeError` naming the entry), then imported on the CUDA device its
/// pointer belongs to, ordered after its `stream` without blocking.
pub fn import(obj: &Bound<'_, PyAny>, interface: &Bound<'_, PyAny>) -> PyResult<DeviceArray> {
    let py = obj.py();
    let mut owners = vec![obj.clone().unbind()];
    let entries = entries(interface, ROOT, &mut owners)?;
    let plan = CudaArrayInterface::from_entries(entries)
        .and_then(|cai| cai.validate())
        .py()?;
    if !cuda::is_available() {
        return Err(cuda_unavailable(
            "cannot import an object with __cuda_array_interface__ (its dict is valid): no \
             CUDA driver or GPU",
        ));
    }
    let owner = Arc::new(PyOwners {
        _objects: PyOwned::new(owners),
    });
    // SAFETY: a validated plan of the interface of `obj`, which `owner`
    // keeps alive; the spec makes the producer answer for its pointers and
    // its stream.
    py.detach(|| unsafe { import_cai(&plan, owner) }).py()
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
    let exported = py.detach(|| export_cai(array)).map_err(|err| match err {
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

/// The entries of the interface dict named `prefix` (the array's, or its
/// mask's), as library values.
fn entries(
    interface: &Bound<'_, PyAny>,
    prefix: &str,
    owners: &mut Vec<Py<PyAny>>,
) -> PyResult<Vec<(String, Value)>> {
    let dict = interface.cast::<PyDict>().map_err(|_| {
        PyTypeError::new_err(format!(
            "{prefix} must be a dict, got {}",
            type_name(interface)
        ))
    })?;
    let mut entries = Vec::new();
    for name in KEYS {
        let Some(value) = dict.get_item(name)? else {
            continue;
        };
        let key = format!("{prefix}['{name}']");
        let value = match name {
            "mask" if prefix == ROOT => mask_of(&value, &key, owners)?,
            // A mask's own mask: the library refuses any but None without
            // reading it, so it is not read (one whose mask is itself ends
            // here).
            "mask" if value.is_none() => Value::None,
            "mask" => Value::Other(type_name(&value)),
            _ => EntryReader::new(&key).read(&value)?,
        };
        entries.push((name.to_string(), value));
    }
    Ok(entries)
}

/// The array's `mask` entry: `None`, a nested interface (an object
/// exposing `__cuda_array_interface__`, kept alive with the array, or a
/// dict), or another value for the library to refuse.
fn mask_of(mask: &Bound<'_, PyAny>, key: &str, owners: &mut Vec<Py<PyAny>>) -> PyResult<Value> {
    if mask.is_instance_of::<PyDict>() {
        return Ok(Value::Dict(entries(mask, key, owners)?));
    }
    let py = mask.py();
    if let Some(nested) = mask.getattr_opt(pyo3::intern!(py, "__cuda_array_interface__"))? {
        if !nested.is_instance_of::<PyDict>() {
            return Err(PyTypeError::new_err(format!(
                "{key}.__cuda_array_interface__ must be a dict, got {}",
                type_name(&nested)
            )));
        }
        owners.push(mask.clone().unbind());
        // Its entries are named as the library names them,
        // `__cuda_array_interface__['mask']['shape']`.
        return Ok(Value::Dict(entries(&nested, key, owners)?));
    }
    EntryReader::new(key).read(mask)
}

/// Reads one entry's value within the limits above; a `ValueError` naming
/// the entry when it is too deep, too large, or contains itself.
struct EntryReader<'a, 'py> {
    /// `__cuda_array_interface__['shape']`.
    key: &'a str,
    /// Values read so far.
    values: usize,
    /// The tuples and lists being read, outermost first: a cycle is a
    /// container met again among its own ancestors.
    ancestors: Vec<Bound<'py, PyAny>>,
}

impl<'a, 'py> EntryReader<'a, 'py> {
    fn new(key: &'a str) -> Self {
        EntryReader {
            key,
            values: 0,
            ancestors: Vec::new(),
        }
    }

    fn refuse(&self, defect: String) -> PyErr {
        PyValueError::new_err(format!("{}: {defect}", self.key))
    }

    /// A Python value as the library's `Value`.
    fn read(&mut self, obj: &Bound<'py, PyAny>) -> PyResult<Value> {
        self.values += 1;
        if self.values > MAX_VALUES {
            return Err(self.refuse(format!(
                "more than {MAX_VALUES} values (a valid entry has at most 65: a shape or strides \
                 of 64 dimensions)"
            )));
        }
        if obj.is_none() {
            return Ok(Value::None);
        }
        // Before ints: Python's bools are ints.
        if let Ok(flag) = obj.cast::<PyBool>() {
            return Ok(Value::Bool(flag.is_true()));
        }
        if let Ok(text) = obj.cast::<PyString>() {
            // Measured before it is copied, by the string itself: a
            // subclass's `__len__` could say anything.
            // SAFETY: `text` is a live str (checked by the cast above), and
            // the thread is attached (`'py`).
            let chars = unsafe { pyo3::ffi::PyUnicode_GetLength(text.as_ptr()) };
            // -1 (an error set) for a str that is not ready: never here.
            let chars = usize::try_from(chars).map_err(|_| PyErr::fetch(obj.py()))?;
            if chars > MAX_STR_CHARS {
                return Err(self.refuse(format!(
                    "a str of {chars} characters, longer than {MAX_STR_CHARS} (type strings \
                     and field names are short)"
                )));
            }
            return Ok(Value::Str(text.to_cow()?.into_owned()));
        }
        if obj.is_instance_of::<PyTuple>() || obj.is_instance_of::<PyList>() {
            return self.read_items(obj);
        }
        // Python ints and anything with __index__ (NumPy integers).
        if let Ok(int) = obj.extract::<i128>() {
            return Ok(Value::Int(int));
        }
        if obj.is_instance_of::<PyInt>() {
            return Ok(Value::Other("int beyond 128 bits".to_string()));
        }
        // NumPy's bool_.
        if let Ok(flag) = obj.extract::<bool>() {
            return Ok(Value::Bool(flag));
        }
        Ok(Value::Other(type_name(obj)))
    }

    /// A tuple or list (or a subclass, whose `__iter__` may never end: the
    /// value count stops it) as a `Value::Tuple`.
    fn read_items(&mut self, sequence: &Bound<'py, PyAny>) -> PyResult<Value> {
        if self.ancestors.iter().any(|ancestor| ancestor.is(sequence)) {
            return Err(self.refuse(format!(
                "a {} that contains itself (a reference cycle; a valid interface holds flat \
                 tuples of ints and strs)",
                type_name(sequence)
            )));
        }
        if self.ancestors.len() == MAX_NESTING {
            return Err(self.refuse(format!(
                "nested deeper than {MAX_NESTING} levels of tuples and lists (a valid \
                 interface nests at most 2: descr, a list of (name, typestr) tuples)"
            )));
        }
        self.ancestors.push(sequence.clone());
        let items = sequence
            .try_iter()
            .and_then(|items| items.map(|item| self.read(&item?)).collect());
        self.ancestors.pop();
        Ok(Value::Tuple(items?))
    }
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

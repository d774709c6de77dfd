//! The native half of `arrow_device.conformance`: the library's struct
//! checks run on what a Python producer's protocol methods return, and the
//! capsule-level observations (destructors, release counts, DLPack
//! renaming) that Python cannot make itself. The rules, their order and the
//! report live in the library (`arrow_device::conformance`) and in the
//! Python module.

use std::ffi::{c_void, CStr, CString};
use std::sync::Arc;

use arrow_array::{Array, ArrayRef, Int32Array, Int64Array, ListArray, StringArray, StructArray};
use arrow_buffer::OffsetBuffer;
use arrow_device::abi::{
    ArrowDeviceArray, ArrowDeviceArrayStream, DeviceType, FFI_ArrowArray, FFI_ArrowArrayStream,
    FFI_ArrowSchema,
};
use arrow_device::conformance::{self as rules, Check, Watch};
use arrow_device::device::emulated::{EmulatedConfig, EmulatedDevice};
use arrow_device::dlpack::abi::{DLManagedTensor, DLManagedTensorVersioned, DLTensor};
use arrow_device::DeviceArray;
use arrow_schema::{DataType, Field};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyCapsule, PyDict};

use arrow_device_pyo3::array::DeviceArrayObject;
use arrow_device_pyo3::capsule::{
    self, ARROW_ARRAY, ARROW_ARRAY_STREAM, ARROW_DEVICE_ARRAY, ARROW_DEVICE_ARRAY_STREAM,
};
use arrow_device_pyo3::device::DeviceObject;
use arrow_device_pyo3::errors::{guard, PyResultExt};

/// A check as Python sees it: `(id, outcome, message, section, advisory)`.
type Row = (String, &'static str, String, &'static str, bool);

fn rows(checks: Vec<Check>) -> Vec<Row> {
    checks
        .into_iter()
        .map(|c| (c.id, c.outcome.as_str(), c.message, c.section, c.advisory))
        .collect()
}

/// `Type: message` of a Python exception, for a check's message.
fn describe(py: Python<'_>, err: &PyErr) -> String {
    let name = err
        .get_type(py)
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "Exception".to_string());
    format!("{name}: {}", err.value(py))
}

/// The name and pointer of a capsule (any name).
fn capsule_parts(obj: &Bound<'_, PyAny>) -> PyResult<(String, *mut c_void)> {
    let capsule = obj.cast::<PyCapsule>().map_err(|_| {
        PyTypeError::new_err(format!(
            "expected a PyCapsule, got {}",
            capsule::type_name(obj)
        ))
    })?;
    let name = name_of(capsule).ok_or_else(|| PyValueError::new_err("the capsule has no name"))?;
    // SAFETY: a live capsule, the GIL held; the name compares by value.
    let pointer = unsafe { ffi::PyCapsule_GetPointer(capsule.as_ptr(), name.as_ptr()) };
    if pointer.is_null() {
        return Err(PyErr::fetch(obj.py()));
    }
    Ok((name.to_string_lossy().into_owned(), pointer))
}

/// A capsule's name, copied; None when it has none.
fn name_of(capsule: &Bound<'_, PyCapsule>) -> Option<CString> {
    // SAFETY: a live capsule, the GIL held; the name is copied at once.
    unsafe {
        let name = ffi::PyCapsule_GetName(capsule.as_ptr());
        if name.is_null() {
            ffi::PyErr_Clear();
            return None;
        }
        Some(CStr::from_ptr(name).to_owned())
    }
}

/// Runs `checks` with the GIL released, each call of `produce` taking it
/// back: a check waits on devices (events, a freed copy's queued work),
/// and the work waited for may need the GIL (a NumPy source released on
/// the emulated device's worker). Every release callback therefore runs
/// without the GIL, as a consumer on another thread would call it.
fn detached<T: Send>(
    py: Python<'_>,
    produce: &Bound<'_, PyAny>,
    checks: impl FnOnce(&mut dyn FnMut() -> Result<T, String>) -> Vec<Check> + Send,
    take: impl Fn(&Bound<'_, PyAny>) -> PyResult<T> + Send + Sync,
) -> PyResult<Vec<Row>> {
    let produce = produce.clone().unbind();
    let found = py.detach(move || {
        checks(&mut || {
            Python::attach(|py| {
                let result = produce.bind(py).call0().map_err(|e| describe(py, &e))?;
                take(&result).map_err(|e| describe(py, &e))
            })
        })
    });
    Ok(rows(found))
}

/// The rules of `__arrow_c_device_array__` (`device`) or `__arrow_c_array__`
/// on what `produce()` returns, each call a fresh `(schema, array)` pair.
#[pyfunction]
#[pyo3(signature = (produce, device, expect_device_type = None))]
pub fn _conformance_check_array(
    py: Python<'_>,
    produce: &Bound<'_, PyAny>,
    device: bool,
    expect_device_type: Option<i32>,
) -> PyResult<Vec<Row>> {
    guard(|| {
        if device {
            detached(
                py,
                produce,
                move |produce| {
                    rules::check_device_array(
                        rules::Scope::DeviceArray,
                        expect_device_type.map(DeviceType),
                        produce,
                    )
                },
                |result| {
                    capsule::take_pair::<ArrowDeviceArray>(
                        result,
                        "__arrow_c_device_array__",
                        ARROW_DEVICE_ARRAY,
                    )
                },
            )
        } else {
            detached(
                py,
                produce,
                |produce| rules::check_array(produce),
                |result| {
                    capsule::take_pair::<FFI_ArrowArray>(result, "__arrow_c_array__", ARROW_ARRAY)
                },
            )
        }
    })
}

/// The rules of `__arrow_c_device_stream__` (`device`) or
/// `__arrow_c_stream__` on the stream `produce()` returns.
#[pyfunction]
pub fn _conformance_check_stream(
    py: Python<'_>,
    produce: &Bound<'_, PyAny>,
    device: bool,
) -> PyResult<Vec<Row>> {
    guard(|| {
        if device {
            detached(
                py,
                produce,
                |produce| rules::check_device_stream(produce),
                |result| {
                    let ptr = capsule::pointer::<ArrowDeviceArrayStream>(
                        result,
                        ARROW_DEVICE_ARRAY_STREAM,
                    )?;
                    // SAFETY: a live capsule of that name holds a device stream.
                    Ok(unsafe { ArrowDeviceArrayStream::from_raw(ptr) })
                },
            )
        } else {
            detached(
                py,
                produce,
                |produce| rules::check_stream(produce),
                |result| {
                    let ptr = capsule::pointer::<FFI_ArrowArrayStream>(result, ARROW_ARRAY_STREAM)?;
                    // SAFETY: as above, for a C stream.
                    Ok(unsafe { FFI_ArrowArrayStream::from_raw(ptr) })
                },
            )
        }
    })
}

/// The rules of `__arrow_c_schema__` on the capsule `produce()` returns.
#[pyfunction]
pub fn _conformance_check_schema(py: Python<'_>, produce: &Bound<'_, PyAny>) -> PyResult<Vec<Row>> {
    guard(|| {
        detached(
            py,
            produce,
            |produce| rules::check_schema(produce),
            |result| {
                let ptr = capsule::pointer::<FFI_ArrowSchema>(result, capsule::ARROW_SCHEMA)?;
                // SAFETY: a live capsule of that name holds a schema.
                Ok(unsafe { FFI_ArrowSchema::from_raw(ptr) })
            },
        )
    })
}

/// The releases of one struct (tree) someone else releases.
#[pyclass(name = "_Watch", module = "arrow_device", frozen)]
pub struct PyWatch {
    watch: Watch,
}

#[pymethods]
impl PyWatch {
    /// What is wrong so far, expecting every node released exactly once;
    /// None when nothing is.
    fn problems(&self) -> Option<String> {
        self.watch.problems()
    }

    /// Whether nothing has been released yet.
    fn untouched(&self) -> bool {
        self.watch.untouched()
    }

    /// `(path, calls, marked)` per node.
    fn calls(&self) -> Vec<(String, u32, bool)> {
        self.watch.calls()
    }
}

/// Watches the struct inside `capsule` (by the capsule's name) where it is:
/// for a capsule nobody consumes, whose destructor must release it.
#[pyfunction]
pub fn _conformance_watch(capsule: &Bound<'_, PyAny>) -> PyResult<PyWatch> {
    let (name, pointer) = capsule_parts(capsule)?;
    // SAFETY: a live capsule of that name holds that struct, and keeps it in
    // place until its destructor runs.
    let watch = unsafe { rules::watch(&name, pointer) }.map_err(PyValueError::new_err)?;
    Ok(PyWatch { watch })
}

/// Follows the struct inside `capsule`, which this package exported,
/// wherever a consumer moves it.
#[pyfunction]
pub fn _conformance_follow(capsule: &Bound<'_, PyAny>) -> PyResult<PyWatch> {
    let (name, pointer) = capsule_parts(capsule)?;
    // SAFETY: a live capsule this package made holds a struct of this
    // crate's exporters (the caller's promise: private).
    let watch = unsafe { rules::follow(&name, pointer) }.map_err(PyValueError::new_err)?;
    Ok(PyWatch { watch })
}

/// The name of `obj` if it is a capsule (an empty string for a capsule
/// without one), None otherwise.
#[pyfunction]
pub fn _conformance_capsule_name(obj: &Bound<'_, PyAny>) -> Option<String> {
    let capsule = obj.cast::<PyCapsule>().ok()?;
    Some(name_of(capsule).map_or_else(String::new, |name| name.to_string_lossy().into_owned()))
}

/// The `device_type` of the struct in an `arrow_device_array` or
/// `arrow_device_array_stream` capsule (which stays there).
#[pyfunction]
pub fn _conformance_device_type(capsule: &Bound<'_, PyAny>) -> PyResult<i32> {
    let (name, pointer) = capsule_parts(capsule)?;
    // SAFETY: a live capsule of that name holds that struct.
    unsafe {
        match name.as_str() {
            "arrow_device_array" => Ok((*pointer.cast::<ArrowDeviceArray>()).device_type.0),
            "arrow_device_array_stream" => {
                Ok((*pointer.cast::<ArrowDeviceArrayStream>()).device_type().0)
            }
            other => Err(PyValueError::new_err(format!(
                "not a device capsule: {other}"
            ))),
        }
    }
}

/// Whether `capsule` has a destructor.
#[pyfunction]
pub fn _conformance_has_destructor(capsule: &Bound<'_, PyAny>) -> PyResult<bool> {
    let capsule = capsule.cast::<PyCapsule>()?;
    // SAFETY: a live capsule, the GIL held.
    let destructor = unsafe { ffi::PyCapsule_GetDestructor(capsule.as_ptr()) };
    if destructor.is_none() && unsafe { !ffi::PyErr_Occurred().is_null() } {
        return Err(PyErr::fetch(capsule.py()));
    }
    Ok(destructor.is_some())
}

/// The data type a schema capsule, or a stream capsule's `get_schema`,
/// describes, as text (the stream stays in its capsule).
#[pyfunction]
pub fn _conformance_schema_type(capsule: &Bound<'_, PyAny>) -> PyResult<String> {
    let (name, pointer) = capsule_parts(capsule)?;
    let field = match name.as_str() {
        "arrow_schema" => {
            // SAFETY: a live capsule of that name holds a schema.
            arrow_device::schema::import_field(unsafe { &*pointer.cast::<FFI_ArrowSchema>() })
                .py()?
        }
        "arrow_array_stream" | "arrow_device_array_stream" => {
            let mut schema = FFI_ArrowSchema::empty();
            // SAFETY: a live stream of the capsule's name; the schema it
            // writes is owned (and released) here.
            let rc = unsafe {
                if name == "arrow_array_stream" {
                    let stream = &mut *pointer.cast::<arrow_device::abi::raw::ArrowArrayStream>();
                    stream.get_schema.map_or(-1, |f| f(stream, &mut schema))
                } else {
                    let stream =
                        &mut *pointer.cast::<arrow_device::abi::raw::ArrowDeviceArrayStream>();
                    stream
                        .get_schema
                        .map_or(-1, |f| f(pointer.cast(), &mut schema))
                }
            };
            if rc != 0 {
                return Err(PyValueError::new_err(format!("get_schema returned {rc}")));
            }
            arrow_device::schema::import_field(&schema).py()?
        }
        other => {
            return Err(PyValueError::new_err(format!(
                "not a schema or stream capsule: {other}"
            )))
        }
    };
    Ok(format!("{}", field.data_type()))
}

/// What a DLPack capsule holds: `name`, `version` (None for a legacy
/// tensor), `device` (type, id), `ndim`, `shape`, `strides` (None when
/// compact), `dtype` (code, bits, lanes), `byte_offset`, `has_deleter`.
#[pyfunction]
pub fn _conformance_dlpack_info<'py>(
    py: Python<'py>,
    capsule: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyDict>> {
    let (name, pointer) = capsule_parts(capsule)?;
    let info = PyDict::new(py);
    // SAFETY: a live capsule of that name holds that tensor struct.
    let (tensor, version, has_deleter): (&DLTensor, Option<(u32, u32)>, bool) = unsafe {
        match name.as_str() {
            "dltensor" => {
                let managed = &*pointer.cast::<DLManagedTensor>();
                (&managed.dl_tensor, None, managed.deleter.is_some())
            }
            "dltensor_versioned" => {
                let managed = &*pointer.cast::<DLManagedTensorVersioned>();
                (
                    &managed.dl_tensor,
                    Some((managed.version.major, managed.version.minor)),
                    managed.deleter.is_some(),
                )
            }
            other => {
                return Err(PyValueError::new_err(format!(
                    "not a DLPack capsule: {other}"
                )))
            }
        }
    };
    let ndim = usize::try_from(tensor.ndim).unwrap_or(0);
    // SAFETY: the producer's promise: `ndim` entries (strides may be NULL).
    let (shape, strides) = unsafe {
        let shape: Vec<i64> = if tensor.shape.is_null() {
            vec![]
        } else {
            std::slice::from_raw_parts(tensor.shape, ndim).to_vec()
        };
        let strides: Option<Vec<i64>> = (!tensor.strides.is_null())
            .then(|| std::slice::from_raw_parts(tensor.strides, ndim).to_vec());
        (shape, strides)
    };
    info.set_item("name", name)?;
    info.set_item("version", version)?;
    info.set_item(
        "device",
        (tensor.device.device_type.0, tensor.device.device_id),
    )?;
    info.set_item("ndim", tensor.ndim)?;
    info.set_item("shape", shape)?;
    info.set_item("strides", strides)?;
    info.set_item(
        "dtype",
        (tensor.dtype.code, tensor.dtype.bits, tensor.dtype.lanes),
    )?;
    info.set_item("byte_offset", tensor.byte_offset)?;
    info.set_item("has_deleter", has_deleter)?;
    Ok(info)
}

/// A DLPack tensor taken from its capsule as a consumer takes it (the
/// capsule renamed `used_dltensor[_versioned]`), its deleter watched.
#[pyclass(name = "_TakenTensor", module = "arrow_device")]
pub struct PyTakenTensor {
    pointer: usize,
    versioned: bool,
    watch: Option<Watch>,
}

// Capsule names must outlive the capsule (statically allocated).
static USED_DLTENSOR: &CStr = c"used_dltensor";
static USED_DLTENSOR_VERSIONED: &CStr = c"used_dltensor_versioned";

#[pymethods]
impl PyTakenTensor {
    /// Whether the deleter has not run yet (None: the tensor has none).
    fn untouched(&self) -> Option<bool> {
        self.watch.as_ref().map(Watch::untouched)
    }

    /// Calls the deleter once, as the consumer's owner does; the deleter's
    /// problems, or None.
    fn delete(&mut self) -> Option<String> {
        let pointer = std::mem::replace(&mut self.pointer, 0);
        if pointer == 0 {
            return Some("the tensor was already deleted".to_string());
        }
        // SAFETY: the tensor taken from the capsule, deleted once (the
        // pointer is cleared above); its deleter slot is the watched one.
        unsafe {
            if self.versioned {
                let managed = pointer as *mut DLManagedTensorVersioned;
                if let Some(deleter) = (*managed).deleter {
                    deleter(managed);
                }
            } else {
                let managed = pointer as *mut DLManagedTensor;
                if let Some(deleter) = (*managed).deleter {
                    deleter(managed);
                }
            }
        }
        self.watch.as_ref().and_then(Watch::problems)
    }
}

/// Takes the tensor out of a DLPack capsule as a consumer does.
#[pyfunction]
pub fn _conformance_dlpack_take(capsule: &Bound<'_, PyAny>) -> PyResult<PyTakenTensor> {
    let (name, pointer) = capsule_parts(capsule)?;
    let (versioned, used) = match name.as_str() {
        "dltensor" => (false, USED_DLTENSOR),
        "dltensor_versioned" => (true, USED_DLTENSOR_VERSIONED),
        other => {
            return Err(PyValueError::new_err(format!(
                "not an unconsumed DLPack capsule: {other}"
            )))
        }
    };
    // SAFETY: a live tensor struct of that name; it stays where it is (the
    // producer's allocation) until its deleter runs.
    let has_deleter = unsafe {
        if versioned {
            (*pointer.cast::<DLManagedTensorVersioned>())
                .deleter
                .is_some()
        } else {
            (*pointer.cast::<DLManagedTensor>()).deleter.is_some()
        }
    };
    let watch = if has_deleter {
        // SAFETY: as above.
        Some(unsafe { rules::watch(&name, pointer) }.map_err(PyValueError::new_err)?)
    } else {
        None
    };
    // SAFETY: a live capsule; the name is static.
    if unsafe { ffi::PyCapsule_SetName(capsule.as_ptr(), used.as_ptr()) } != 0 {
        return Err(PyErr::fetch(capsule.py()));
    }
    Ok(PyTakenTensor {
        pointer: pointer as usize,
        versioned,
        watch,
    })
}

/// Rows `start..start + rows` of the record batch `check_consumer` hands
/// out (as a struct array, offset 0), on `device` (the CPU by default):
/// int64 with nulls, utf8 with nulls, and list<int32>; each value a
/// function of its row, so that a read of a wrong buffer shows.
#[pyfunction]
#[pyo3(signature = (device = None, start = 0, rows = 1000))]
pub fn _conformance_sample(
    device: Option<&DeviceObject>,
    start: i64,
    rows: i64,
) -> PyResult<DeviceArrayObject> {
    guard(|| {
        let range = start..start + rows.max(0);
        let ids =
            Int64Array::from_iter(range.clone().map(|i| (i % 7 != 3).then_some(i * 1_000_003)));
        let names = StringArray::from_iter(
            range
                .clone()
                .map(|i| (i % 5 != 1).then(|| format!("row {i}"))),
        );
        let lengths: Vec<usize> = range.clone().map(|i| (i % 3) as usize).collect();
        let values = Int32Array::from_iter_values(
            range
                .clone()
                .flat_map(|i| (0..(i % 3) as i32).map(move |k| i as i32 * 3 + k)),
        );
        let item = Arc::new(Field::new("item", DataType::Int32, false));
        let lists = ListArray::new(
            item,
            OffsetBuffer::<i32>::from_lengths(lengths),
            Arc::new(values),
            None,
        );
        let batch = StructArray::from(vec![
            (
                Arc::new(Field::new("id", DataType::Int64, true)),
                Arc::new(ids) as ArrayRef,
            ),
            (
                Arc::new(Field::new("name", DataType::Utf8, true)),
                Arc::new(names) as ArrayRef,
            ),
            (
                Arc::new(Field::new("values", lists.data_type().clone(), true)),
                Arc::new(lists) as ArrayRef,
            ),
        ]);
        let array = DeviceArray::from_array(&batch);
        let array = match device {
            Some(device) => array.to_device(device.require()?).py()?,
            None => array,
        };
        Ok(DeviceArrayObject::new(array))
    })
}

/// Compares what a consumer gave back (`found`, its arrays in order) with
/// what it was given: None when equal, or where they differ.
#[pyfunction]
pub fn _conformance_compare(
    expected: &DeviceArrayObject,
    found: Vec<PyRef<'_, DeviceArrayObject>>,
) -> PyResult<Option<String>> {
    guard(|| {
        let expected = expected.inner.to_host().py()?;
        let mut parts = Vec::with_capacity(found.len());
        for part in &found {
            parts.push(part.inner.to_host().py()?);
        }
        Ok(rules::compare_values(expected.as_ref(), &parts).err())
    })
}

/// Configures the process-wide emulated devices (a `check_consumer` worker
/// runs them strict and delayed); returns the configuration it replaced,
/// `(strict, delay_us)`, so that a test can put it back.
#[pyfunction]
#[pyo3(signature = (strict, delay_ms, *, delay_us = 0))]
pub fn _conformance_emulate(strict: bool, delay_ms: u64, delay_us: u64) -> (bool, u64) {
    let previous = EmulatedDevice::global_config();
    EmulatedDevice::set_global_config(EmulatedConfig {
        strict,
        delay: std::time::Duration::from_millis(delay_ms)
            + std::time::Duration::from_micros(delay_us),
    });
    let previous_us = u64::try_from(previous.delay.as_micros()).unwrap_or(u64::MAX);
    (previous.strict, previous_us)
}

/// The rule catalogue: `(id, section, summary, advisory)` per check id.
#[pyfunction]
pub fn _conformance_rules() -> Vec<(String, &'static str, &'static str, bool)> {
    rules::check_ids()
        .into_iter()
        .map(|id| {
            let name = id.rsplit('.').next().unwrap_or_default().to_string();
            let rule = rules::rule(&name).expect("check_ids come from RULES");
            (id, rule.section, rule.summary, rule.advisory)
        })
        .collect()
}

/// The report table: `rows` of `(id, outcome label, message)`.
#[pyfunction]
pub fn _conformance_table(subject: &str, rows: Vec<(String, String, String)>) -> String {
    let rows: Vec<[&str; 3]> = rows
        .iter()
        .map(|(a, b, c)| [a.as_str(), b.as_str(), c.as_str()])
        .collect();
    rules::render_table(subject, &rows)
}

/// Registers the functions and classes above.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyWatch>()?;
    m.add_class::<PyTakenTensor>()?;
    m.add_function(wrap_pyfunction!(_conformance_check_array, m)?)?;
    m.add_function(wrap_pyfunction!(_conformance_check_stream, m)?)?;
    m.add_function(wrap_pyfunction!(_conformance_check_schema, m)?)?;
    m.add_function(wrap_pyfunction!(_conformance_watch, m)?)?;
    m.add_function(wrap_pyfunction!(_conformance_follow, m)?)?;
    m.add_function(wrap_pyfunction!(_conformance_has_destructor, m)?)?;
    m.add_function(wrap_pyfunction!(_conformance_capsule_name, m)?)?;
    m.add_function(wrap_pyfunction!(_conformance_device_type, m)?)?;
    m.add_function(wrap_pyfunction!(_conformance_schema_type, m)?)?;
    m.add_function(wrap_pyfunction!(_conformance_dlpack_info, m)?)?;
    m.add_function(wrap_pyfunction!(_conformance_dlpack_take, m)?)?;
    m.add_function(wrap_pyfunction!(_conformance_sample, m)?)?;
    m.add_function(wrap_pyfunction!(_conformance_compare, m)?)?;
    m.add_function(wrap_pyfunction!(_conformance_emulate, m)?)?;
    m.add_function(wrap_pyfunction!(_conformance_rules, m)?)?;
    m.add_function(wrap_pyfunction!(_conformance_table, m)?)?;
    Ok(())
}

//! The types an extension author writes in a `#[pyfunction]`'s signature:
//! [`PyDeviceArray`], [`PyDeviceStream`] and [`PyDevice`], each taken from
//! any Python object the protocols describe and returned as one that
//! implements them.

use std::ops::Deref;

use arrow_device::device::DeviceRef;
use arrow_device::stream::{export_device_arrays, DeviceStreamReader};
use arrow_device::{DeviceArray, DeviceType, ValidationLevel};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{IntoPyDict, PyType};

use crate::array::{import_any, DeviceArrayObject};
use crate::capsule::type_name;
use crate::device::{self, type_and_id, DeviceObject};
use crate::errors::{guard, PyResultExt};
use crate::stream::{own_reader, reader_of, DeviceStreamObject};

/// How an array or stream is taken from Python: the validation level of
/// the import (the package's `validate=`) and a device to copy it to.
///
/// ```ignore
/// let options = ExtractOptions::default()
///     .validate(ValidationLevel::Full)
///     .device(arrow_device::device::cpu());
/// let array = PyDeviceArray::extract_with(&obj, &options)?;
/// ```
#[derive(Clone, Debug, Default)]
pub struct ExtractOptions {
    validate: ValidationLevel,
    device: Option<DeviceRef>,
}

impl ExtractOptions {
    /// How much of a foreign struct is checked before it is used
    /// (default: [`ValidationLevel::Default`]).
    pub fn validate(mut self, level: ValidationLevel) -> Self {
        self.validate = level;
        self
    }

    /// Copy the array (or each batch of the stream) to `device` unless it
    /// is there already; the copy's completion travels as its `sync_event`.
    pub fn device(mut self, device: DeviceRef) -> Self {
        self.device = Some(device);
        self
    }
}

/// An Arrow array on any device, taken from whatever `arrow_device.array()`
/// accepts: an `arrow_device.DeviceArray`, an object with
/// `__arrow_c_device_array__` or `__arrow_c_array__` (pyarrow, nanoarrow,
/// polars, cuDF), `__cuda_array_interface__` (CuPy, Numba, PyTorch) or
/// `__dlpack__` (NumPy, PyTorch, JAX; through the producer's DLPack C
/// exchange table when its type has one). Zero-copy unless options ask for
/// a device.
///
/// Returned to Python, it is an `arrow_device.DeviceArray`: of the installed
/// `arrow_device` package when there is one (so that arrays from every
/// extension are one type), else of this crate's own copy of the class. Both
/// implement the protocols above.
pub struct PyDeviceArray(DeviceArray);

impl PyDeviceArray {
    /// Wraps a library array, to return it to Python.
    pub fn new(array: DeviceArray) -> Self {
        PyDeviceArray(array)
    }

    /// Takes `obj` as [`FromPyObject`] does, with `options`.
    pub fn extract_with(obj: &Bound<'_, PyAny>, options: &ExtractOptions) -> PyResult<Self> {
        guard(|| {
            let imported = import_any(obj, options.validate)?;
            let placed = match &options.device {
                None => imported,
                Some(device) => obj.py().detach(|| imported.to_device(device)).py()?,
            };
            Ok(PyDeviceArray(placed))
        })
    }

    /// The library array.
    pub fn into_inner(self) -> DeviceArray {
        self.0
    }
}

impl From<DeviceArray> for PyDeviceArray {
    fn from(array: DeviceArray) -> Self {
        PyDeviceArray(array)
    }
}

impl Deref for PyDeviceArray {
    type Target = DeviceArray;

    fn deref(&self) -> &DeviceArray {
        &self.0
    }
}

impl AsRef<DeviceArray> for PyDeviceArray {
    fn as_ref(&self) -> &DeviceArray {
        &self.0
    }
}

impl<'a, 'py> FromPyObject<'a, 'py> for PyDeviceArray {
    type Error = PyErr;

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        Self::extract_with(&obj.to_owned(), &ExtractOptions::default())
    }
}

impl<'py> IntoPyObject<'py> for PyDeviceArray {
    type Target = PyAny;
    type Output = Bound<'py, PyAny>;
    type Error = PyErr;

    fn into_pyobject(self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let device_type = self.0.device_type();
        let object = Bound::new(py, DeviceArrayObject::new(self.0))?.into_any();
        returned(object, device_type, |c| &c.array)
    }
}

/// A stream of Arrow arrays on one device type, read once, taken from
/// whatever `arrow_device.stream()` accepts: an `arrow_device.DeviceStream`,
/// an object with `__arrow_c_device_stream__` or `__arrow_c_stream__`
/// (pyarrow's `RecordBatchReader`, a table, a polars frame, a DuckDB
/// result), or an iterable of array-likes (each as [`PyDeviceArray`] takes
/// it).
///
/// Returned to Python, it is an `arrow_device.DeviceStream` (of the
/// installed package when there is one), which any consumer of the stream
/// protocols reads.
pub struct PyDeviceStream(DeviceStreamReader);

impl PyDeviceStream {
    /// Wraps a library stream, to return it to Python.
    pub fn new(reader: DeviceStreamReader) -> Self {
        PyDeviceStream(reader)
    }

    /// Takes `obj` as [`FromPyObject`] does, with `options`: with a device,
    /// each batch is copied there as it is read.
    pub fn extract_with(obj: &Bound<'_, PyAny>, options: &ExtractOptions) -> PyResult<Self> {
        guard(|| {
            let reader = reader_of(obj, options.validate)?;
            let Some(device) = options.device.clone() else {
                return Ok(PyDeviceStream(reader));
            };
            let field = reader.field().clone();
            let target_type = device.device_type();
            let moved = reader.map(move |batch| batch?.to_device(&device));
            let exported = export_device_arrays(field, target_type, moved).py()?;
            Ok(PyDeviceStream(own_reader(exported)?))
        })
    }

    /// The library stream.
    pub fn into_inner(self) -> DeviceStreamReader {
        self.0
    }
}

impl From<DeviceStreamReader> for PyDeviceStream {
    fn from(reader: DeviceStreamReader) -> Self {
        PyDeviceStream(reader)
    }
}

impl Deref for PyDeviceStream {
    type Target = DeviceStreamReader;

    fn deref(&self) -> &DeviceStreamReader {
        &self.0
    }
}

impl std::ops::DerefMut for PyDeviceStream {
    fn deref_mut(&mut self) -> &mut DeviceStreamReader {
        &mut self.0
    }
}

impl<'a, 'py> FromPyObject<'a, 'py> for PyDeviceStream {
    type Error = PyErr;

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        Self::extract_with(&obj.to_owned(), &ExtractOptions::default())
    }
}

impl<'py> IntoPyObject<'py> for PyDeviceStream {
    type Target = PyAny;
    type Output = Bound<'py, PyAny>;
    type Error = PyErr;

    fn into_pyobject(self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let device_type = self.0.device_type();
        let object = Bound::new(py, DeviceStreamObject::from_reader(self.0))?.into_any();
        returned(object, device_type, |c| &c.stream)
    }
}

/// A device this library implements, taken from an `arrow_device.Device`
/// (of any extension: read through its `type` and `id`) or from text:
/// `"cpu"`, `"cuda"`, `"cuda:N"`, `"cuda_host[:N]"`, `"cuda_managed[:N]"`,
/// `"emulated[:N]"` (N defaults to 0).
#[derive(Clone, Debug)]
pub struct PyDevice(DeviceRef);

impl PyDevice {
    /// Wraps a library device, to return it to Python.
    pub fn new(device: DeviceRef) -> Self {
        PyDevice(device)
    }

    /// The library device.
    pub fn into_inner(self) -> DeviceRef {
        self.0
    }

    /// The device `(device_type, id)`, as `arrow_device` resolves it: the
    /// CPU, an emulated device, or a CUDA device (whose driver is loaded
    /// now, with a clear error without one).
    pub fn resolve(device_type: DeviceType, id: i64) -> PyResult<Self> {
        device::resolve(device_type, id).map(PyDevice)
    }

    fn parse(text: &str) -> PyResult<Self> {
        let (name, id) = match text.split_once(':') {
            Some((name, id)) => {
                let id = id.parse::<i64>().map_err(|_| {
                    PyValueError::new_err(format!(
                        "a device is 'NAME' or 'NAME:ID' with an integer ID, got {text:?}"
                    ))
                })?;
                (name, id)
            }
            None => (text, 0),
        };
        let device_type = match name {
            "cpu" if id == 0 || text == "cpu:-1" => return Ok(PyDevice(arrow_device::device::cpu())),
            "cpu" => {
                return Err(PyValueError::new_err(format!(
                    "the CPU has no device id, got {text:?}"
                )))
            }
            "cuda" => DeviceType::CUDA,
            "cuda_host" => DeviceType::CUDA_HOST,
            "cuda_managed" => DeviceType::CUDA_MANAGED,
            "emulated" => DeviceType::EXT_DEV,
            _ => {
                return Err(PyValueError::new_err(format!(
                    "unknown device {text:?}: expected cpu, cuda[:N], cuda_host[:N], cuda_managed[:N] or emulated[:N]"
                )))
            }
        };
        Self::resolve(device_type, id)
    }
}

impl Deref for PyDevice {
    type Target = DeviceRef;

    fn deref(&self) -> &DeviceRef {
        &self.0
    }
}

impl<'a, 'py> FromPyObject<'a, 'py> for PyDevice {
    type Error = PyErr;

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        if let Ok(device) = obj.cast::<DeviceObject>() {
            return device.get().require().cloned().map(PyDevice);
        }
        if let Ok(text) = obj.extract::<&str>() {
            return Self::parse(text);
        }
        match type_and_id(&obj)? {
            Some((device_type, id)) => {
                let (Ok(device_type), Ok(id)) = (device_type.extract::<i32>(), id.extract::<i64>())
                else {
                    return Err(PyTypeError::new_err(format!(
                        "a device's type and id are integers, got {} with type {} and id {}",
                        type_name(&obj),
                        type_name(&device_type),
                        type_name(&id)
                    )));
                };
                Self::resolve(DeviceType(device_type), id)
            }
            None => Err(PyTypeError::new_err(format!(
                "expected an arrow_device.Device or a device name such as 'cuda:0', got {}",
                type_name(&obj)
            ))),
        }
    }
}

impl<'py> IntoPyObject<'py> for PyDevice {
    type Target = PyAny;
    type Output = Bound<'py, PyAny>;
    type Error = PyErr;

    fn into_pyobject(self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let (device_type, id) = (self.0.device_type(), self.0.device_id());
        match Package::adopting(py, device_type) {
            Some(package) => package.device.bind(py).call1((device_type.0, id)),
            None => Ok(Bound::new(py, DeviceObject::new(self.0))?.into_any()),
        }
    }
}

/// `object`, new and of this binary's class, as the installed
/// package's own through its `constructor` (`array` or `stream`), when
/// [`Package::adopting`] says so: our own export read back by the package,
/// so the structure is checked (minimal) and the values, checked when first
/// taken, are not read again.
fn returned<'py>(
    object: Bound<'py, PyAny>,
    device_type: DeviceType,
    constructor: fn(&Constructors) -> &Py<PyAny>,
) -> PyResult<Bound<'py, PyAny>> {
    let py = object.py();
    match Package::adopting(py, device_type) {
        None => Ok(object),
        Some(package) => {
            let kwargs = [("validate", "minimal")].into_py_dict(py)?;
            constructor(package).bind(py).call((object,), Some(&kwargs))
        }
    }
}

/// The installed package's `array`, `stream` and device constructor
/// (`_device(type, id)`), in another binary.
struct Constructors {
    array: Py<PyAny>,
    stream: Py<PyAny>,
    device: Py<PyAny>,
}

/// The installed `arrow_device` package, as seen from this binary.
enum Package {
    /// Not installed (or not importable): objects stay this crate's own.
    Absent,
    /// This binary is the package: its classes are ours.
    Ours,
    /// Another binary: its constructors turn our objects into its own
    /// through the protocols.
    Other(Constructors),
}

impl Package {
    /// Looked up once per process (per binary linking this crate).
    fn get(py: Python<'_>) -> &Package {
        static PACKAGE: PyOnceLock<Package> = PyOnceLock::new();
        PACKAGE.get_or_init(py, || Package::find(py).unwrap_or(Package::Absent))
    }

    fn find(py: Python<'_>) -> PyResult<Package> {
        let Ok(module) = py.import("arrow_device._arrow_device") else {
            return Ok(Package::Absent);
        };
        let theirs = module.getattr("DeviceArray")?.cast_into::<PyType>()?;
        if theirs.is(py.get_type::<DeviceArrayObject>()) {
            return Ok(Package::Ours);
        }
        Ok(Package::Other(Constructors {
            array: module.getattr("array")?.unbind(),
            stream: module.getattr("stream")?.unbind(),
            device: module.getattr("_device")?.unbind(),
        }))
    }

    /// The constructors that make an object on `device_type` the package's
    /// own: those of another binary's package, and never for the emulated
    /// device. Each binary has its own emulated devices (statics of its
    /// copy of arrow-device), so the package could not use such an
    /// object's events or memory, while this binary can when the object
    /// comes back. CPU and CUDA memory and events are the process's.
    fn adopting(py: Python<'_>, device_type: DeviceType) -> Option<&Constructors> {
        match Package::get(py) {
            Package::Other(constructors) if device_type != DeviceType::EXT_DEV => {
                Some(constructors)
            }
            _ => None,
        }
    }
}

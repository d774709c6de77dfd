//! `arrow_device.Device`: a device type and id, with the library's
//! implementation for it when there is one.

use arrow_device::device::{self, emulated::EmulatedDevice, DeviceRef};
use arrow_device::DeviceType;

use crate::errors::PyResultExt;
use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;

/// A device: `.type` (a `DeviceType`, or the plain integer for a type
/// outside the spec's list) and `.id` (-1 for the CPU). Made by `cpu()`,
/// `emulated()`, `cuda()`, `cuda_host()`, `cuda_managed()` or `devices()`;
/// given to `DeviceArray.to` and `array(obj, device=...)`, which copy onto
/// it. Devices are equal, and hash alike, when their type and id are.
///
/// ```python
/// >>> import arrow_device
/// >>> arrow_device.cpu()
/// Device(CPU, -1)
/// >>> arrow_device.emulated(3) == arrow_device.emulated(3)
/// True
/// >>> len({arrow_device.cpu(), arrow_device.cpu(), arrow_device.emulated()})
/// 2
///
/// ```
#[pyclass(name = "Device", module = "arrow_device", frozen)]
#[derive(Clone)]
pub struct DeviceObject {
    device_type: DeviceType,
    id: i64,
    /// `None` for a device this library has no implementation of (an opaque
    /// array's): its data can be described but not copied.
    pub inner: Option<DeviceRef>,
}

impl PartialEq for DeviceObject {
    fn eq(&self, other: &Self) -> bool {
        (self.device_type, self.id) == (other.device_type, other.id)
    }
}

impl std::hash::Hash for DeviceObject {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        (self.device_type.0, self.id).hash(state);
    }
}

impl DeviceObject {
    pub fn new(device: DeviceRef) -> Self {
        DeviceObject {
            device_type: device.device_type(),
            id: device.device_id(),
            inner: Some(device),
        }
    }

    /// The device an array reports, implemented here or not.
    pub fn of(device_type: DeviceType, id: i64, inner: Option<&DeviceRef>) -> Self {
        DeviceObject {
            device_type,
            id,
            inner: inner.cloned(),
        }
    }

    /// The implementation, or a `TypeError` naming the device.
    pub fn require(&self) -> PyResult<&DeviceRef> {
        self.inner
            .as_ref()
            .ok_or_else(|| {
                arrow_device::Error::NotSupported(format!(
                    "no implementation for device type {} id {}",
                    self.device_type, self.id
                ))
            })
            .map_err(crate::errors::to_py)
    }
}

/// `DeviceType(value)` from `arrow_device`, or the plain integer when the
/// value is outside the enum.
pub fn device_type_object(py: Python<'_>, device_type: DeviceType) -> PyResult<Py<PyAny>> {
    // An extension's own copy of the classes (no `arrow_device` package
    // installed) has no enum to show: the integer serves.
    let Ok(enum_class) = py
        .import("arrow_device._types")
        .and_then(|module| module.getattr("DeviceType"))
    else {
        return Ok(device_type.0.into_pyobject(py)?.into_any().unbind());
    };
    match enum_class.call1((device_type.0,)) {
        Ok(member) => Ok(member.unbind()),
        Err(_) => Ok(device_type.0.into_pyobject(py)?.into_any().unbind()),
    }
}

#[pymethods]
impl DeviceObject {
    /// The device type, as `arrow_device.DeviceType` (an `IntEnum`) or, for
    /// a type outside the spec's list, as its integer.
    ///
    /// ```python
    /// >>> import arrow_device
    /// >>> arrow_device.cpu().type
    /// <DeviceType.CPU: 1>
    /// >>> int(arrow_device.emulated().type)
    /// 12
    ///
    /// ```
    #[getter(r#type)]
    fn device_type(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        device_type_object(py, self.device_type)
    }

    /// The device id: -1 for the CPU, the ordinal for a GPU (and the number
    /// of an emulated device).
    ///
    /// ```python
    /// >>> import arrow_device
    /// >>> arrow_device.cpu().id, arrow_device.emulated(7).id
    /// (-1, 7)
    ///
    /// ```
    #[getter]
    fn id(&self) -> i64 {
        self.id
    }

    fn __repr__(&self) -> String {
        self.repr_text()
    }

    /// Equal to a `Device` of the same type and id, also one of another
    /// extension module's copy of this class (read through `type` and
    /// `id`): devices are the process's, whichever binary names them.
    fn __eq__(&self, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        let py = other.py();
        let same = match other.cast::<DeviceObject>() {
            Ok(other) => Some(self == other.get()),
            Err(_) => foreign_key(other)?.map(|key| key == (self.device_type.0, self.id)),
        };
        Ok(match same {
            Some(same) => pyo3::types::PyBool::new(py, same)
                .to_owned()
                .into_any()
                .unbind(),
            None => py.NotImplemented(),
        })
    }

    /// The hash of `(type, id)` as Python computes it, so that every
    /// binary's copy of the class hashes a device alike.
    fn __hash__(&self, py: Python<'_>) -> PyResult<isize> {
        (self.device_type.0, self.id).into_pyobject(py)?.hash()
    }
}

/// `(type, id)` of another binary's `arrow_device.Device`; `None` for any
/// other object.
fn foreign_key(other: &Bound<'_, PyAny>) -> PyResult<Option<(i32, i64)>> {
    let class = other.get_type();
    if class.name()?.to_cow()? != "Device" || class.module()?.to_cow()? != "arrow_device" {
        return Ok(None);
    }
    let Some((device_type, id)) = type_and_id(other)? else {
        return Ok(None);
    };
    match (device_type.extract::<i32>(), id.extract::<i64>()) {
        (Ok(device_type), Ok(id)) => Ok(Some((device_type, id))),
        _ => Ok(None),
    }
}

/// The `type` and `id` attributes of `obj`, as another binary's `Device`
/// has them; `None` unless it has both.
pub(crate) fn type_and_id<'py>(
    obj: &Bound<'py, PyAny>,
) -> PyResult<Option<(Bound<'py, PyAny>, Bound<'py, PyAny>)>> {
    let py = obj.py();
    let device_type = obj.getattr_opt(pyo3::intern!(py, "type"))?;
    let id = obj.getattr_opt(pyo3::intern!(py, "id"))?;
    Ok(device_type.zip(id))
}

impl DeviceObject {
    /// `Device(EXT_DEV, 0)`; an unnamed type shows its number.
    pub fn repr_text(&self) -> String {
        match self.device_type.name() {
            Some(name) => format!("Device({name}, {})", self.id),
            None => format!("Device({}, {})", self.device_type.0, self.id),
        }
    }
}

/// The CPU: host memory that every library reads.
///
/// ```python
/// >>> import arrow_device, pyarrow as pa
/// >>> cpu = arrow_device.cpu()
/// >>> cpu
/// Device(CPU, -1)
/// >>> on_device = arrow_device.array(pa.array([1, 2]), device=arrow_device.emulated())
/// >>> pa.array(on_device.to(cpu)).to_pylist()
/// [1, 2]
///
/// ```
#[pyfunction]
pub fn cpu() -> DeviceObject {
    DeviceObject::new(device::cpu())
}

/// The emulated asynchronous device `EXT_DEV` number `id` (0 to 1023): memory
/// the host must not touch, copies on worker threads, real events. For
/// testing device paths without a GPU. `ValueError` for another id.
///
/// ```python
/// >>> import arrow_device, pyarrow as pa
/// >>> device = arrow_device.emulated()
/// >>> device
/// Device(EXT_DEV, 0)
/// >>> a = arrow_device.array(pa.array([1, 2, 3]), device=device)
/// >>> a.device == device
/// True
/// >>> pa.array(a.to(arrow_device.cpu())).to_pylist()
/// [1, 2, 3]
///
/// ```
#[pyfunction]
#[pyo3(signature = (id = 0))]
pub fn emulated(id: i64) -> PyResult<DeviceObject> {
    resolve(DeviceType::EXT_DEV, id).map(DeviceObject::new)
}

/// The devices available in this process: the CPU, the emulated device 0
/// (any emulated id from 0 to 1023 can be had with `emulated(id)`), and,
/// when a CUDA driver and GPUs are present, each GPU's device, pinned and
/// managed memory.
///
/// ```python
/// >>> import arrow_device
/// >>> arrow_device.devices()[:2]
/// [Device(CPU, -1), Device(EXT_DEV, 0)]
/// >>> [d for d in arrow_device.devices() if d.type == arrow_device.DeviceType.CUDA]  # doctest: +SKIP
/// [Device(CUDA, 0)]
///
/// ```
#[pyfunction]
pub fn devices() -> PyResult<Vec<DeviceObject>> {
    let mut found = vec![cpu(), emulated(0)?];
    if arrow_device::device::cuda::is_available() {
        let gpus = arrow_device::device::cuda::device_count().py()?;
        for id in 0..gpus as i64 {
            for device_type in [
                DeviceType::CUDA,
                DeviceType::CUDA_HOST,
                DeviceType::CUDA_MANAGED,
            ] {
                found.push(DeviceObject::new(cuda_device(device_type, id)?));
            }
        }
    }
    Ok(found)
}

/// CUDA device memory of GPU `id`. `RuntimeError` saying why when CUDA is
/// not available (no driver, no such GPU).
///
/// ```python
/// >>> import arrow_device, pyarrow as pa
/// >>> gpu = arrow_device.cuda(0)  # doctest: +SKIP
/// >>> a = arrow_device.array(pa.array([1, 2, 3]), device=gpu)  # doctest: +SKIP
/// >>> a.device  # doctest: +SKIP
/// Device(CUDA, 0)
///
/// ```
#[pyfunction]
#[pyo3(signature = (id = 0))]
pub fn cuda(id: i64) -> PyResult<DeviceObject> {
    cuda_device(DeviceType::CUDA, id).map(DeviceObject::new)
}

/// Pinned host memory (`cudaMallocHost`) of GPU `id`'s context: the host
/// reads it (`__arrow_c_array__` works once its event completed) and copies
/// to and from the GPU run at full speed. `RuntimeError` when CUDA is not
/// available.
///
/// ```python
/// >>> import arrow_device, pyarrow as pa
/// >>> pinned = arrow_device.array(pa.array([1, 2]), device=arrow_device.cuda_host(0))  # doctest: +SKIP
/// >>> pa.array(pinned).to_pylist()  # doctest: +SKIP
/// [1, 2]
///
/// ```
#[pyfunction]
#[pyo3(signature = (id = 0))]
pub fn cuda_host(id: i64) -> PyResult<DeviceObject> {
    cuda_device(DeviceType::CUDA_HOST, id).map(DeviceObject::new)
}

/// Managed (unified) memory of GPU `id`, which the driver migrates between
/// host and GPU. `RuntimeError` when CUDA is not available.
///
/// ```python
/// >>> import arrow_device, pyarrow as pa
/// >>> managed = arrow_device.array(pa.array([1, 2]), device=arrow_device.cuda_managed(0))  # doctest: +SKIP
/// >>> managed.device  # doctest: +SKIP
/// Device(CUDA_MANAGED, 0)
///
/// ```
#[pyfunction]
#[pyo3(signature = (id = 0))]
pub fn cuda_managed(id: i64) -> PyResult<DeviceObject> {
    cuda_device(DeviceType::CUDA_MANAGED, id).map(DeviceObject::new)
}

/// The device `(device_type, id)` as a `Device`: how an object of another
/// extension's `Device` class becomes this package's (see
/// `PyDevice`'s `IntoPyObject`).
#[pyfunction]
#[pyo3(name = "_device")]
pub fn device_of(device_type: i32, id: i64) -> PyResult<DeviceObject> {
    resolve(DeviceType(device_type), id).map(DeviceObject::new)
}

/// The device `(device_type, id)` as this library implements it: the CPU,
/// an emulated device (ids 0 to 1023), or a CUDA device (whose driver is
/// loaded now, with a clear error without one); `TypeError` for any other
/// device type.
pub fn resolve(device_type: DeviceType, id: i64) -> PyResult<DeviceRef> {
    match device_type {
        DeviceType::CPU => Ok(device::cpu()),
        DeviceType::EXT_DEV => match EmulatedDevice::global(id) {
            Some(emulated) => Ok(emulated),
            None => Err(PyValueError::new_err(format!(
                "emulated device ids are 0 to 1023, got {id}"
            ))),
        },
        DeviceType::CUDA | DeviceType::CUDA_HOST | DeviceType::CUDA_MANAGED => {
            cuda_device(device_type, id)
        }
        other => Err(PyTypeError::new_err(format!(
            "no implementation for device type {other} (id {id}) in this library"
        ))),
    }
}

/// The CUDA device `(device_type, id)` (CUDA, CUDA_HOST or CUDA_MANAGED),
/// through the library's CUDA support (the driver loaded at run time).
/// Without a driver or GPU it raises `RuntimeError` saying why, never a
/// panic.
pub fn cuda_device(device_type: DeviceType, id: i64) -> PyResult<DeviceRef> {
    if id < 0 {
        return Err(PyValueError::new_err(format!(
            "CUDA device ids are 0 or more, got {id}"
        )));
    }
    crate::errors::guard(|| {
        arrow_device::device::cuda::device(device_type, id).map_err(|err| {
            cuda_unavailable(&format!("cannot open {device_type} device {id}: {err}"))
        })
    })
}

/// The error for anything that needs CUDA in a process without it.
pub fn cuda_unavailable(what: &str) -> PyErr {
    PyRuntimeError::new_err(format!("CUDA is not available in this process: {what}"))
}

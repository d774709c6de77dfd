//! `arrow_device.DeviceArray` and `arrow_device.array()`: the PyCapsule
//! protocol for arrays, both ways, over the library's `DeviceArray`.

use std::mem::ManuallyDrop;

use arrow_device::abi::{ArrowDeviceArray, DeviceType, FFI_ArrowArray, FFI_ArrowSchema};
use arrow_device::schema::{export_field, import_field};
use arrow_device::{export_array, DeviceArray, ValidationLevel};
use arrow_schema::Field;
use pyo3::exceptions::{PyNotImplementedError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};

use crate::capsule::{self, ARROW_ARRAY, ARROW_DEVICE_ARRAY, ARROW_SCHEMA};
use crate::device::DeviceObject;
use crate::errors::{guard, PyResultExt};

/// An Arrow array on a device (a record batch is a struct array that keeps
/// the schema's metadata). Immutable; copies happen only when asked for
/// (`to`), never behind the caller's back.
///
/// Made by `arrow_device.array()` from anything that exports an array (the
/// Arrow PyCapsule protocol, the CUDA Array Interface, DLPack), and read by
/// anything that imports one: `pyarrow.array`, `pyarrow.record_batch`,
/// `polars.Series`, `numpy.from_dlpack`, `nanoarrow.device.c_device_array`.
///
/// ```python
/// >>> import arrow_device, pyarrow as pa
/// >>> a = arrow_device.array(pa.array([1, None, 3]))
/// >>> a
/// DeviceArray(type=Int64, len=3, device=Device(CPU, -1))
/// >>> len(a), a.null_count
/// (3, 1)
/// >>> pa.array(a).to_pylist()
/// [1, None, 3]
///
/// ```
#[pyclass(name = "DeviceArray", module = "arrow_device", frozen)]
pub struct DeviceArrayObject {
    /// Dropped by `Drop` below (hence `ManuallyDrop`), never elsewhere.
    pub inner: ManuallyDrop<DeviceArray>,
}

impl DeviceArrayObject {
    pub fn new(inner: DeviceArray) -> Self {
        DeviceArrayObject {
            inner: ManuallyDrop::new(inner),
        }
    }
}

impl Drop for DeviceArrayObject {
    /// Off the CPU, the last reference to an array may wait for its device
    /// (its memory is freed after the work queued on it), and that work may
    /// release a source that needs the GIL (a NumPy array the copy was made
    /// from, released on the emulated device's worker): so the wait runs
    /// with the GIL released, as every other wait of this module does.
    fn drop(&mut self) {
        // SAFETY: taken once, here; `inner` is never used after.
        let inner = unsafe { ManuallyDrop::take(&mut self.inner) };
        if inner.device_type() == DeviceType::CPU {
            drop(inner);
        } else {
            crate::errors::without_gil(move || drop(inner));
        }
    }
}

/// `validate=` values, named as the library's levels.
pub fn parse_level(validate: &str) -> PyResult<ValidationLevel> {
    match validate {
        "none" => Ok(ValidationLevel::None),
        "minimal" => Ok(ValidationLevel::Minimal),
        "default" => Ok(ValidationLevel::Default),
        "full" => Ok(ValidationLevel::Full),
        other => Err(PyValueError::new_err(format!(
            "validate must be one of 'none', 'minimal', 'default', 'full', got {other:?}"
        ))),
    }
}

/// Spec ("Device Support"): keyword arguments a producer does not know must
/// be `None`, else `NotImplementedError`.
pub fn check_kwargs(kwargs: Option<&Bound<'_, PyDict>>) -> PyResult<()> {
    let Some(kwargs) = kwargs else {
        return Ok(());
    };
    let unknown: Vec<String> = kwargs
        .iter()
        .filter(|(_, value)| !value.is_none())
        .map(|(name, _)| name.to_string())
        .collect();
    if unknown.is_empty() {
        Ok(())
    } else {
        Err(PyNotImplementedError::new_err(format!(
            "received unsupported keyword argument(s): {unknown:?}"
        )))
    }
}

/// The field of a `requested_schema` capsule (borrowed: the caller keeps
/// ownership of its struct).
pub fn requested_field(requested_schema: Option<&Bound<'_, PyAny>>) -> PyResult<Option<Field>> {
    let Some(capsule) = requested_schema.filter(|c| !c.is_none()) else {
        return Ok(None);
    };
    let schema = capsule::pointer::<FFI_ArrowSchema>(capsule, ARROW_SCHEMA)?;
    // SAFETY: a live capsule named arrow_schema holds an ArrowSchema, which
    // is only read here, with the GIL held so the capsule cannot go away.
    let field = import_field(unsafe { &*schema }).py()?;
    Ok(Some(field))
}

/// Anything array-like as a library `DeviceArray`: a `DeviceArray`, or an
/// object with `__arrow_c_device_array__` or `__arrow_c_array__` (called
/// with no arguments: nanoarrow's takes no `**kwargs`), then
/// `__cuda_array_interface__`, then `__dlpack__`.
pub fn import_any(obj: &Bound<'_, PyAny>, level: ValidationLevel) -> PyResult<DeviceArray> {
    if let Ok(array) = obj.cast::<DeviceArrayObject>() {
        return Ok(DeviceArray::clone(&array.get().inner));
    }
    // One interned lookup per protocol method: `hasattr` then
    // `call_method0` would build and look up the name twice (measured: a
    // quarter of a small array's import).
    let py = obj.py();
    if let Some(method) = obj.getattr_opt(pyo3::intern!(py, "__arrow_c_device_array__"))? {
        let result = method.call0()?;
        let (array, schema) = capsule::take_pair::<ArrowDeviceArray>(
            &result,
            "__arrow_c_device_array__",
            ARROW_DEVICE_ARRAY,
        )?;
        // SAFETY: the producer promises valid structs (spec: PyCapsule
        // interface); everything they say about themselves is validated.
        return unsafe { DeviceArray::try_new(array, schema, level) }.py();
    }
    if let Some(method) = obj.getattr_opt(pyo3::intern!(py, "__arrow_c_array__"))? {
        let result = method.call0()?;
        let (array, schema) =
            capsule::take_pair::<FFI_ArrowArray>(&result, "__arrow_c_array__", ARROW_ARRAY)?;
        // SAFETY: as above.
        return unsafe { DeviceArray::try_from_ffi(array, schema, level) }.py();
    }
    // Before DLPack: PyTorch and CuPy expose both for CUDA data, and the
    // interface carries the producer's stream, which DLPack leaves to the
    // consumer to pass in. CPU tensors raise AttributeError (absent).
    if let Some(interface) = obj.getattr_opt(pyo3::intern!(py, "__cuda_array_interface__"))? {
        return crate::cai::import(obj, &interface);
    }
    if obj.hasattr(pyo3::intern!(py, "__dlpack__"))? {
        // DLPack 1.3: the C exchange table of the producer's type first.
        if let Some(array) = crate::exchange::import(obj)? {
            return Ok(array);
        }
        return crate::dlpack::import(obj);
    }
    Err(PyTypeError::new_err(format!(
        "expected a DeviceArray or an object with __arrow_c_device_array__, __arrow_c_array__, __cuda_array_interface__ or __dlpack__, got {}",
        capsule::type_name(obj)
    )))
}

/// Imports `obj` as a `DeviceArray`, zero-copy: a `DeviceArray` itself, or
/// an object with `__arrow_c_device_array__` or `__arrow_c_array__` (a
/// record batch becomes a struct array), then `__cuda_array_interface__`,
/// then `__dlpack__`, in that order. `device` copies the array onto that
/// device (as `to` does).
///
/// `validate` is how much of what the producer hands over is checked, each
/// level adding to the one before: `"none"` (the structs and the buffer
/// sizes, what keeps this package memory-safe), `"minimal"` (validity
/// buffers, child lengths), `"default"` (the first and last list offsets
/// and run ends) or `"full"` (every value on host-accessible memory:
/// offsets, UTF-8, dictionary keys). `TypeError` for an object with none of
/// the protocols, `ValueError` naming what is wrong in an invalid one.
///
/// ```python
/// >>> import arrow_device, pyarrow as pa, numpy as np
/// >>> arrow_device.array(pa.array(["a", None]))
/// DeviceArray(type=Utf8, len=2, device=Device(CPU, -1))
/// >>> arrow_device.array(np.arange(3)).type  # through DLPack
/// 'Int64'
/// >>> batch = pa.record_batch({"x": [1, 2]})
/// >>> arrow_device.array(batch, device=arrow_device.emulated(), validate="full")
/// DeviceArray(type=Struct("x": Int64), len=2, device=Device(EXT_DEV, 0))
///
/// ```
#[pyfunction]
#[pyo3(signature = (obj, *, device = None, validate = "default"))]
pub fn array(
    py: Python<'_>,
    obj: &Bound<'_, PyAny>,
    device: Option<PyRef<'_, DeviceObject>>,
    validate: &str,
) -> PyResult<DeviceArrayObject> {
    let level = parse_level(validate)?;
    guard(|| {
        let imported = import_any(obj, level)?;
        let placed = match device {
            None => imported,
            Some(device) => {
                let target = device.require()?.clone();
                py.detach(|| imported.to_device(&target)).py()?
            }
        };
        Ok(DeviceArrayObject::new(placed))
    })
}

#[pymethods]
impl DeviceArrayObject {
    /// The device the array's buffers live on.
    ///
    /// ```python
    /// >>> import arrow_device, pyarrow as pa
    /// >>> a = arrow_device.array(pa.array([1, 2]))
    /// >>> a.device
    /// Device(CPU, -1)
    /// >>> a.to(arrow_device.emulated(1)).device
    /// Device(EXT_DEV, 1)
    ///
    /// ```
    #[getter]
    fn device(&self) -> DeviceObject {
        DeviceObject::of(
            self.inner.device_type(),
            self.inner.device_id(),
            self.inner.device(),
        )
    }

    /// The Arrow data type, as text (arrow-rs's names; `pyarrow.field(array)`
    /// gives it as a pyarrow type).
    ///
    /// ```python
    /// >>> import arrow_device, pyarrow as pa
    /// >>> arrow_device.array(pa.array([1.5])).type
    /// 'Float64'
    /// >>> arrow_device.array(pa.record_batch({"a": ["x"]})).type
    /// 'Struct("a": Utf8)'
    ///
    /// ```
    #[getter(r#type)]
    fn data_type(&self) -> String {
        self.inner.data_type().to_string()
    }

    /// Number of nulls, or `None` when the producer did not count them (-1
    /// in the C struct).
    ///
    /// ```python
    /// >>> import arrow_device, pyarrow as pa
    /// >>> arrow_device.array(pa.array([1, None, None])).null_count
    /// 2
    ///
    /// ```
    #[getter]
    fn null_count(&self) -> Option<usize> {
        self.inner.null_count()
    }

    /// The array's offset into its buffers, in values (a slice's start).
    ///
    /// ```python
    /// >>> import arrow_device, pyarrow as pa
    /// >>> a = arrow_device.array(pa.array([1, 2, 3]))
    /// >>> a.offset, a.slice(1, 2).offset
    /// (0, 1)
    ///
    /// ```
    #[getter]
    fn offset(&self) -> usize {
        self.inner.offset()
    }

    fn __len__(&self) -> usize {
        self.inner.len()
    }

    /// A zero-copy slice of `length` values from `offset` (as pyarrow's
    /// `Array.slice`, but both are required); `IndexError` past the end.
    ///
    /// ```python
    /// >>> import arrow_device, pyarrow as pa
    /// >>> a = arrow_device.array(pa.array([1, 2, 3, 4]))
    /// >>> pa.array(a.slice(1, 2)).to_pylist()
    /// [2, 3]
    ///
    /// ```
    fn slice(&self, offset: usize, length: usize) -> PyResult<DeviceArrayObject> {
        guard(|| {
            Ok(DeviceArrayObject::new(
                self.inner.slice(offset, length).py()?,
            ))
        })
    }

    /// The array on `device`, copied there if it is not already (the copy's
    /// completion travels as the new array's `sync_event`, so this returns
    /// before the copy is done). `TypeError` for a device this package has no
    /// implementation of.
    ///
    /// ```python
    /// >>> import arrow_device, pyarrow as pa
    /// >>> a = arrow_device.array(pa.array([1, 2, 3]))
    /// >>> on_device = a.to(arrow_device.emulated())
    /// >>> on_device
    /// DeviceArray(type=Int64, len=3, device=Device(EXT_DEV, 0))
    /// >>> pa.array(on_device.to(arrow_device.cpu())).to_pylist()
    /// [1, 2, 3]
    ///
    /// ```
    fn to(&self, py: Python<'_>, device: PyRef<'_, DeviceObject>) -> PyResult<DeviceArrayObject> {
        let target = device.require()?.clone();
        guard(|| {
            py.detach(|| self.inner.to_device(&target))
                .py()
                .map(DeviceArrayObject::new)
        })
    }

    /// `(schema, device array)` capsules (spec: `__arrow_c_device_array__`),
    /// zero-copy, with the producer's `sync_event`: how a consumer takes the
    /// array, on whatever device it is. `requested_schema` (a schema capsule)
    /// asks for another representation of the same type (`large_utf8` for
    /// `utf8`); other keyword arguments must be `None`, else
    /// `NotImplementedError` (spec).
    ///
    /// ```python
    /// >>> import arrow_device, pyarrow as pa
    /// >>> from nanoarrow.device import c_device_array
    /// >>> a = arrow_device.array(pa.array([1, 2])).to(arrow_device.emulated())
    /// >>> a.__arrow_c_device_array__()  # doctest: +ELLIPSIS
    /// (<capsule object "arrow_schema" at 0x...>, <capsule object "arrow_device_array" at 0x...>)
    /// >>> c = c_device_array(a)  # nanoarrow calls it
    /// >>> c.device_type, c.device_id, c.array.length
    /// (<DeviceType.EXT_DEV: 12>, 0, 2)
    ///
    /// ```
    #[pyo3(signature = (requested_schema = None, **kwargs))]
    fn __arrow_c_device_array__<'py>(
        &self,
        py: Python<'py>,
        requested_schema: Option<&Bound<'py, PyAny>>,
        kwargs: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyTuple>> {
        check_kwargs(kwargs)?;
        guard(|| {
            let array = self.requested(requested_schema)?;
            let (device_array, schema) = array.export().py()?;
            capsule::tuple_of(
                py,
                capsule::wrap(py, schema, ARROW_SCHEMA)?,
                capsule::wrap_device(py, device_array, ARROW_DEVICE_ARRAY)?,
            )
        })
    }

    /// `(schema, array)` capsules (spec: `__arrow_c_array__`), for data the
    /// host can read (after waiting on its event); zero-copy. Device data is
    /// refused (`ValueError`): copy it first with `.to(arrow_device.cpu())`.
    /// `requested_schema` asks for another representation of the same type.
    ///
    /// ```python
    /// >>> import arrow_device, pyarrow as pa, nanoarrow as na
    /// >>> a = arrow_device.array(pa.array(["a", "b"]))
    /// >>> pa.array(a).to_pylist()  # pyarrow takes it through the protocol
    /// ['a', 'b']
    /// >>> na.c_array(a, na.large_string()).schema.format  # requested_schema
    /// 'U'
    ///
    /// ```
    #[pyo3(signature = (requested_schema = None))]
    fn __arrow_c_array__<'py>(
        &self,
        py: Python<'py>,
        requested_schema: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyTuple>> {
        guard(|| {
            let array = self.requested(requested_schema)?;
            if !array.device_type().is_host_accessible() {
                return Err(PyValueError::new_err(format!(
                    "__arrow_c_array__ hands out CPU pointers, and this array is on device type {} (id {}): use __arrow_c_device_array__, or copy it with .to(arrow_device.cpu())",
                    array.device_type(),
                    array.device_id()
                )));
            }
            let host = py.detach(|| array.to_host()).py()?;
            let (mut device_array, _) = export_array(host.as_ref()).py()?;
            let c_array = std::mem::replace(&mut device_array.array, FFI_ArrowArray::empty());
            let schema = export_field(array.field()).py()?;
            capsule::tuple_of(
                py,
                capsule::wrap(py, schema, ARROW_SCHEMA)?,
                capsule::wrap(py, c_array, ARROW_ARRAY)?,
            )
        })
    }

    /// The array's schema as a capsule (spec: `__arrow_c_schema__`): a record
    /// batch's fields and metadata, or the array's type.
    ///
    /// ```python
    /// >>> import arrow_device, pyarrow as pa
    /// >>> pa.schema(arrow_device.array(pa.record_batch({"a": [1]})))
    /// a: int64
    ///
    /// ```
    fn __arrow_c_schema__<'py>(
        &self,
        py: Python<'py>,
    ) -> PyResult<Bound<'py, pyo3::types::PyCapsule>> {
        guard(|| capsule::wrap(py, export_field(self.inner.field()).py()?, ARROW_SCHEMA))
    }

    /// Shares the array with the processes of this machine: a
    /// `SharedArray`, whose handle (picklable) `arrow_device.open_shared`
    /// opens, zero-copy, while it is open. Linux only (elsewhere
    /// `NotImplementedError`).
    ///
    /// ```python
    /// >>> import arrow_device, pyarrow as pa, pickle
    /// >>> a = arrow_device.array(pa.array([1, 2, 3]))
    /// >>> with a.share() as shared:
    /// ...     handle = pickle.dumps(shared)  # bytes for another process
    /// ...     opened = arrow_device.open_shared(pickle.loads(handle))
    /// >>> pa.array(opened).to_pylist()
    /// [1, 2, 3]
    ///
    /// ```
    fn share(&self, py: Python<'_>) -> PyResult<crate::share::PySharedArray> {
        crate::share::share_array(py, &self.inner)
    }

    /// DLPack (array API standard): a capsule over the array's values, for
    /// one-dimensional fixed-width numbers without nulls (`BufferError`
    /// otherwise). `stream`, `max_version`, `dl_device` and `copy` are the
    /// standard's keywords.
    ///
    /// ```python
    /// >>> import arrow_device, pyarrow as pa, numpy as np
    /// >>> a = arrow_device.array(pa.array([1.5, 2.5]))
    /// >>> np.from_dlpack(a)  # numpy calls it
    /// array([1.5, 2.5])
    ///
    /// ```
    #[pyo3(signature = (*, stream = None, max_version = None, dl_device = None, copy = None))]
    fn __dlpack__<'py>(
        &self,
        py: Python<'py>,
        stream: Option<&Bound<'py, PyAny>>,
        max_version: Option<(u32, u32)>,
        dl_device: Option<(i32, i32)>,
        copy: Option<bool>,
    ) -> PyResult<Bound<'py, PyAny>> {
        crate::dlpack::export(py, &self.inner, stream, max_version, dl_device, copy)
    }

    /// The CUDA Array Interface (version 3) of an array on CUDA or
    /// CUDA_MANAGED memory; `AttributeError` (so `hasattr` is False) for
    /// anything it cannot describe. `stream` is `None` or a stream ordered
    /// after the array's `sync_event` (never 0); an array with nulls has a
    /// `mask` (a `CudaArrayMask`).
    ///
    /// ```python
    /// >>> import arrow_device, pyarrow as pa
    /// >>> a = arrow_device.array(pa.array([1, 2]))
    /// >>> hasattr(a, "__cuda_array_interface__")  # on the CPU
    /// False
    /// >>> on_gpu = a.to(arrow_device.cuda(0))  # doctest: +SKIP
    /// >>> cai = on_gpu.__cuda_array_interface__  # doctest: +SKIP
    /// >>> cai["shape"], cai["typestr"], cai["version"]  # doctest: +SKIP
    /// ((2,), '<i8', 3)
    ///
    /// ```
    #[getter(__cuda_array_interface__)]
    fn cuda_array_interface<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        guard(|| crate::cai::export(py, &self.inner))
    }

    /// `(device type, device id)` as DLPack numbers them (the spec's device
    /// types are DLPack's).
    ///
    /// ```python
    /// >>> import arrow_device, pyarrow as pa
    /// >>> arrow_device.array(pa.array([1, 2])).__dlpack_device__()
    /// (1, 0)
    ///
    /// ```
    fn __dlpack_device__(&self) -> PyResult<(i32, i64)> {
        crate::dlpack::device(&self.inner)
    }

    /// DLPack 1.3's C exchange table (a PyCapsule named
    /// `"dlpack_exchange_api"`), on the type.
    #[classattr]
    fn __dlpack_c_exchange_api__(py: Python<'_>) -> PyResult<Py<pyo3::types::PyCapsule>> {
        crate::exchange::api_capsule(py).map(Bound::unbind)
    }

    /// The same capsule under the name of an older draft of dlpack.h.
    #[classattr]
    fn __c_dlpack_exchange_api__(py: Python<'_>) -> PyResult<Py<pyo3::types::PyCapsule>> {
        crate::exchange::api_capsule(py).map(Bound::unbind)
    }

    fn __repr__(&self) -> String {
        let device = self.device().repr_text();
        format!(
            "DeviceArray(type={}, len={}, device={device})",
            self.inner.data_type(),
            self.inner.len()
        )
    }
}

impl DeviceArrayObject {
    fn requested(&self, requested_schema: Option<&Bound<'_, PyAny>>) -> PyResult<DeviceArray> {
        match requested_field(requested_schema)? {
            None => Ok(DeviceArray::clone(&self.inner)),
            Some(field) => self.inner.to_representation(&field).py(),
        }
    }
}

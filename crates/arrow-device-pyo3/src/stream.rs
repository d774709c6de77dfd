//! `arrow_device.DeviceStream` and `arrow_device.stream()`: the PyCapsule
//! protocol for streams and device streams, both ways, over the library's
//! sync device stream.

use std::sync::{Arc, Mutex};

use arrow_array::ffi_stream::FFI_ArrowArrayStream;
use arrow_device::abi::ArrowDeviceArrayStream;
use arrow_device::schema::export_field;
use arrow_device::stream::{check_arrays, export_device_arrays, DeviceStreamReader};
use arrow_device::{check_representation, DeviceArray, DeviceType, Error, ValidationLevel};
use arrow_schema::Field;
use pyo3::exceptions::{
    PyMemoryError, PyNotImplementedError, PyRuntimeError, PyStopIteration, PyTypeError,
    PyValueError,
};
use pyo3::prelude::*;
use pyo3::types::{PyCapsule, PyDict};

use crate::array::{check_kwargs, import_any, parse_level, requested_field, DeviceArrayObject};
use crate::capsule::{self, ARROW_ARRAY_STREAM, ARROW_DEVICE_ARRAY_STREAM, ARROW_SCHEMA};
use crate::device::device_type_object;
use crate::errors::{guard, to_py, PyResultExt};
use crate::interpreter::{attached, PyOwned};

type Batches = Box<dyn Iterator<Item = arrow_device::Result<DeviceArray>> + Send>;

/// Where a Python-iterable source leaves the exception behind an error.
/// Shared by the stream object and its batch source, either of which may be
/// the last owner, released at interpreter exit: hence `PyOwned`.
type Raised = Arc<PyOwned<Mutex<Option<PyErr>>>>;

/// A stream of `DeviceArray`s, read once: iterate it, or hand it on whole
/// with `__arrow_c_device_stream__` / `__arrow_c_stream__` (pyarrow's
/// `RecordBatchReader.from_stream`, `polars.DataFrame`, `duckdb.from_arrow`).
/// Made by `arrow_device.stream()`, `open_shared_stream()` and
/// `arrow_device.flight.fetch()`.
///
/// ```python
/// >>> import arrow_device, pyarrow as pa
/// >>> table = pa.table({"x": [1, 2, 3]})
/// >>> s = arrow_device.stream(table)
/// >>> s
/// DeviceStream(type=Struct("x": Int64), device_type=CPU)
/// >>> [len(batch) for batch in s]
/// [3]
/// >>> pa.table(arrow_device.stream(table)).num_rows  # handed on whole
/// 3
///
/// ```
#[pyclass(name = "DeviceStream", module = "arrow_device", frozen)]
pub struct DeviceStreamObject {
    field: Field,
    device_type: DeviceType,
    /// `None` once handed on. Never waited for: a second reader (another
    /// thread, or a producer calling back into its own stream) is refused
    /// rather than blocked while holding the GIL.
    batches: Mutex<Option<Batches>>,
    /// Where a Python-iterable source leaves the exception behind an error.
    raised: Raised,
    /// Whether reading a batch may wait for another process (a shared
    /// stream's exporter): such reads run detached from the GIL.
    reads_wait: bool,
    /// Why the batches are gone once they are: handed on (the default), or
    /// closed by [`DeviceStreamObject::close`] with its own reason.
    closed: std::sync::OnceLock<&'static str>,
}

impl Drop for DeviceStreamObject {
    /// As `DeviceArray`'s drop: batches off the CPU may wait for their
    /// device, whose queued work may need the GIL, so they go without it.
    fn drop(&mut self) {
        let batches = self
            .batches
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(batches) = batches {
            if self.device_type == DeviceType::CPU {
                drop(batches);
            } else {
                crate::errors::without_gil(move || drop(batches));
            }
        }
    }
}

/// Locks a mutex whose holder only moves a value in or out.
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A Python iterator of array-likes, each converted with `array()` and
/// checked to have the stream's type and device type. A Python exception
/// ends the stream as a producer error carrying its text, which a C
/// consumer reads from `get_last_error`.
///
/// A C consumer may hold the stream anywhere: it is released, and read,
/// through [`PyOwned`] and [`attached`], which do no Python work once the
/// interpreter is finalizing (an unconsumed capsule alive at exit).
struct PyBatches {
    iterator: PyOwned<Py<PyAny>>,
    /// The Python exception behind the last error, for a Python caller
    /// iterating the stream (a C consumer gets its text).
    raised: Raised,
    level: ValidationLevel,
    /// Batches read so far, the first included (for messages).
    index: usize,
}

impl PyBatches {
    /// The next array-like as a `DeviceArray`; `Ok(None)` at the end.
    fn next_item(&mut self, py: Python<'_>) -> PyResult<Option<DeviceArray>> {
        match self
            .iterator
            .bind(py)
            .call_method0(pyo3::intern!(py, "__next__"))
        {
            Ok(item) => import_any(&item, self.level).map(Some),
            Err(err) if err.is_instance_of::<PyStopIteration>(py) => Ok(None),
            Err(err) => Err(err),
        }
    }
}

impl Iterator for PyBatches {
    type Item = arrow_device::Result<DeviceArray>;

    fn next(&mut self) -> Option<Self::Item> {
        let read = attached(|py| {
            let batch = match self.next_item(py) {
                Ok(batch) => batch?,
                Err(err) => {
                    let error = python_error(py, err.clone_ref(py));
                    *lock(&self.raised) = Some(err);
                    return Some(Err(error));
                }
            };
            self.index += 1;
            Some(Ok(batch))
        });
        // A consumer reading at interpreter exit (a thread of its own, a
        // finalizer) gets an error, not a panic.
        read.unwrap_or_else(|| {
            Some(Err(Error::Producer {
                code: libc::EIO,
                message: format!(
                    "batch {}: the Python interpreter is shutting down, and the stream's Python \
                     iterable can no longer be read",
                    self.index + 1
                ),
            }))
        })
    }
}

/// A Python exception as the producer error a stream consumer sees: its
/// type and text, and an errno by kind (what a bad value or type raises is
/// `EINVAL`, so that pyarrow reports `ArrowInvalid`).
pub fn python_error(py: Python<'_>, err: PyErr) -> Error {
    let type_name = err
        .get_type(py)
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "Exception".to_string());
    let code = if err.is_instance_of::<PyValueError>(py) || err.is_instance_of::<PyTypeError>(py) {
        libc::EINVAL
    } else if err.is_instance_of::<PyMemoryError>(py) {
        libc::ENOMEM
    } else if err.is_instance_of::<PyNotImplementedError>(py) {
        libc::ENOSYS
    } else {
        libc::EIO
    };
    Error::Producer {
        code,
        message: format!("{type_name}: {}", err.value(py)),
    }
}

/// Imports a stream, zero-copy: `obj` has `__arrow_c_device_stream__` or
/// `__arrow_c_stream__` (called with no arguments), or is an iterable of
/// array-likes (each converted with `array()`; the first one gives the
/// stream its type and device type, and every later one must match them).
/// `validate` checks each batch as `array()` does. `TypeError` for
/// anything else, `ValueError` for an empty iterable.
///
/// ```python
/// >>> import arrow_device, pyarrow as pa
/// >>> reader = pa.RecordBatchReader.from_batches(
/// ...     pa.schema({"x": pa.int64()}), [pa.record_batch({"x": [1, 2]})] * 2)
/// >>> [len(batch) for batch in arrow_device.stream(reader)]
/// [2, 2]
/// >>> s = arrow_device.stream([pa.array([1, 2]), pa.array([3])])
/// >>> [pa.array(batch).to_pylist() for batch in s]
/// [[1, 2], [3]]
///
/// ```
#[pyfunction]
#[pyo3(signature = (obj, *, validate = "default"))]
pub fn stream(obj: &Bound<'_, PyAny>, validate: &str) -> PyResult<DeviceStreamObject> {
    let level = parse_level(validate)?;
    guard(|| {
        if let Some(reader) = import_protocol(obj, level)? {
            return Ok(DeviceStreamObject::from_reader(reader));
        }
        from_iterable(obj, level)
    })
}

/// The reader of anything `stream()` takes, for a Rust consumer that reads
/// it off the Python thread (a Flight server's source, an upload).
pub fn reader_of(obj: &Bound<'_, PyAny>, level: ValidationLevel) -> PyResult<DeviceStreamReader> {
    if let Some(reader) = import_protocol(obj, level)? {
        return Ok(reader);
    }
    from_iterable(obj, level)?.take_reader(None)
}

/// A reader of a stream this crate exported (of batches it read and
/// checked already): nothing is validated again.
pub(crate) fn own_reader(exported: ArrowDeviceArrayStream) -> PyResult<DeviceStreamReader> {
    // SAFETY: our own export.
    unsafe { DeviceStreamReader::try_new(exported, ValidationLevel::None) }.py()
}

/// Whether `obj` exports a stream through the PyCapsule protocol.
pub fn has_stream_protocol(obj: &Bound<'_, PyAny>) -> PyResult<bool> {
    let py = obj.py();
    Ok(obj.hasattr(pyo3::intern!(py, "__arrow_c_device_stream__"))?
        || obj.hasattr(pyo3::intern!(py, "__arrow_c_stream__"))?)
}

/// The stream of an object with `__arrow_c_device_stream__` or
/// `__arrow_c_stream__`; `None` for an object with neither.
fn import_protocol(
    obj: &Bound<'_, PyAny>,
    level: ValidationLevel,
) -> PyResult<Option<DeviceStreamReader>> {
    let py = obj.py();
    if let Some(method) = obj.getattr_opt(pyo3::intern!(py, "__arrow_c_device_stream__"))? {
        let capsule = method.call0()?;
        let ptr = capsule::pointer::<ArrowDeviceArrayStream>(&capsule, ARROW_DEVICE_ARRAY_STREAM)?;
        // SAFETY: a live capsule of that name holds a device stream;
        // moving it out leaves it released for the capsule's destructor.
        let reader = unsafe { DeviceStreamReader::try_from_raw(ptr, level) }.py()?;
        return Ok(Some(reader));
    }
    if let Some(method) = obj.getattr_opt(pyo3::intern!(py, "__arrow_c_stream__"))? {
        let capsule = method.call0()?;
        let ptr = capsule::pointer::<FFI_ArrowArrayStream>(&capsule, ARROW_ARRAY_STREAM)?;
        // SAFETY: as above, for a C stream.
        let c_stream = unsafe { FFI_ArrowArrayStream::from_raw(ptr) };
        let device_stream = ArrowDeviceArrayStream::try_from(c_stream).py()?;
        // SAFETY: the bridge passes the producer's stream through.
        let reader = unsafe { DeviceStreamReader::try_new(device_stream, level) }.py()?;
        return Ok(Some(reader));
    }
    Ok(None)
}

/// A stream of an iterable of array-likes.
fn from_iterable(obj: &Bound<'_, PyAny>, level: ValidationLevel) -> PyResult<DeviceStreamObject> {
    let Ok(iterator) = obj.try_iter() else {
        return Err(PyTypeError::new_err(format!(
            "expected an object with __arrow_c_device_stream__ or __arrow_c_stream__, or an iterable of arrays, got {}",
            capsule::type_name(obj)
        )));
    };
    // The first array-like gives the stream its type; its errors are
    // raised as they are.
    let first = match iterator.call_method0("__next__") {
        Ok(item) => import_any(&item, level)?,
        Err(err) if err.is_instance_of::<PyStopIteration>(obj.py()) => {
            return Err(PyValueError::new_err(
                "an empty iterable gives a stream no type: pass at least one array",
            ))
        }
        Err(err) => return Err(err),
    };
    let raised = Arc::new(PyOwned::new(Mutex::new(None)));
    let rest = PyBatches {
        iterator: PyOwned::new(iterator.into_any().unbind()),
        raised: raised.clone(),
        level,
        index: 0,
    };
    let (field, device_type) = (first.field().clone(), first.device_type());
    let batches = check_arrays(
        field.data_type().clone(),
        device_type,
        std::iter::once(Ok(first)).chain(rest),
    );
    Ok(DeviceStreamObject {
        field,
        device_type,
        batches: Mutex::new(Some(Box::new(batches))),
        raised,
        reads_wait: false,
        closed: std::sync::OnceLock::new(),
    })
}

impl DeviceStreamObject {
    /// A stream object reading `reader`.
    pub fn from_reader(reader: DeviceStreamReader) -> Self {
        Self::reading(reader, false)
    }

    /// A stream opened from another process's share, whose batches are
    /// read detached from the GIL (each waits for the exporter).
    pub fn from_shared_reader(reader: DeviceStreamReader) -> Self {
        Self::reading(reader, true)
    }

    /// A stream of `batches` (arrays of `field`'s type on devices of
    /// `device_type`, checked as they are read) that may wait for a remote
    /// peer: read detached from the GIL, like a shared stream.
    pub fn from_remote(
        field: Field,
        device_type: DeviceType,
        batches: impl Iterator<Item = arrow_device::Result<DeviceArray>> + Send + 'static,
    ) -> Self {
        let batches = check_arrays(field.data_type().clone(), device_type, batches);
        DeviceStreamObject {
            field,
            device_type,
            batches: Mutex::new(Some(Box::new(batches))),
            raised: Arc::new(PyOwned::new(Mutex::new(None))),
            reads_wait: true,
            closed: std::sync::OnceLock::new(),
        }
    }

    /// Ends the stream for every later reader: what is left is dropped and
    /// a read raises `ValueError` with `reason`. For a stream that is only
    /// valid during a call (a Flight sink's). Waits, without the GIL, for a
    /// read in progress on another thread (which may need the GIL to end).
    pub fn close(&self, reason: &'static str) {
        let _ = self.closed.set(reason);
        crate::errors::without_gil(|| drop(lock(&self.batches).take()));
    }

    /// The error for a read after the batches went.
    fn gone(&self) -> PyErr {
        PyValueError::new_err(
            *self
                .closed
                .get()
                .unwrap_or(&"the stream was already handed on to a consumer"),
        )
    }

    fn reading(reader: DeviceStreamReader, reads_wait: bool) -> Self {
        DeviceStreamObject {
            field: reader.field().clone(),
            device_type: reader.device_type(),
            batches: Mutex::new(Some(Box::new(reader))),
            raised: Arc::new(PyOwned::new(Mutex::new(None))),
            reads_wait,
            closed: std::sync::OnceLock::new(),
        }
    }

    /// The batches' lock, or an error if another call holds it.
    fn try_batches(&self) -> PyResult<std::sync::MutexGuard<'_, Option<Batches>>> {
        match self.batches.try_lock() {
            Ok(guard) => Ok(guard),
            Err(std::sync::TryLockError::Poisoned(poisoned)) => Ok(poisoned.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) => Err(PyRuntimeError::new_err(
                "the stream is being read by another call (another thread, or its own producer): a stream is read by one reader at a time",
            )),
        }
    }

    /// The batches, taken for a consumer: a stream is read once.
    fn take(&self) -> PyResult<Batches> {
        self.try_batches()?.take().ok_or_else(|| self.gone())
    }

    /// This stream, taken, as a reader of `requested_schema`'s type.
    fn take_reader(
        &self,
        requested_schema: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<DeviceStreamReader> {
        own_reader(self.export(requested_schema)?)
    }

    /// This stream as a device stream of `requested_schema`'s type (another
    /// representation of the same data, converted batch by batch).
    fn export(
        &self,
        requested_schema: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<ArrowDeviceArrayStream> {
        let requested = requested_field(requested_schema)?;
        if let Some(field) = &requested {
            check_representation(self.field.data_type(), field.data_type()).py()?;
        }
        let batches = self.take()?;
        match requested {
            None => export_device_arrays(self.field.clone(), self.device_type, batches).py(),
            Some(field) => {
                let target = field.clone();
                let converted = batches.map(move |batch| batch?.to_representation(&target));
                export_device_arrays(field, self.device_type, converted).py()
            }
        }
    }
}

#[pymethods]
impl DeviceStreamObject {
    /// The device type of every batch (`DeviceType`, or its integer).
    ///
    /// ```python
    /// >>> import arrow_device, pyarrow as pa
    /// >>> arrow_device.stream(pa.table({"x": [1]})).device_type
    /// <DeviceType.CPU: 1>
    /// >>> on_device = arrow_device.array(pa.array([1]), device=arrow_device.emulated())
    /// >>> arrow_device.stream([on_device]).device_type
    /// <DeviceType.EXT_DEV: 12>
    ///
    /// ```
    #[getter]
    fn device_type(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        device_type_object(py, self.device_type)
    }

    /// The Arrow type of every batch, as text (a record batch's is a struct).
    ///
    /// ```python
    /// >>> import arrow_device, pyarrow as pa
    /// >>> arrow_device.stream(pa.table({"a": ["x"]})).type
    /// 'Struct("a": Utf8)'
    ///
    /// ```
    #[getter(r#type)]
    fn data_type(&self) -> String {
        self.field.data_type().to_string()
    }

    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<Option<DeviceArrayObject>> {
        guard(|| {
            let mut batches = self.try_batches()?;
            let Some(iterator) = batches.as_mut() else {
                return Err(self.gone());
            };
            let next = if self.reads_wait {
                py.detach(|| iterator.next())
            } else {
                iterator.next()
            };
            match next {
                None => Ok(None),
                Some(Ok(batch)) => Ok(Some(DeviceArrayObject::new(batch))),
                // A Python source's own exception, as it was raised.
                Some(Err(err)) => Err(lock(&self.raised).take().unwrap_or_else(|| to_py(err))),
            }
        })
    }

    /// A device stream capsule (spec: `__arrow_c_device_stream__`); the
    /// stream is handed on, zero-copy, and a second call raises `ValueError`.
    /// `requested_schema` asks for another representation of the same type;
    /// other keyword arguments must be `None`, else `NotImplementedError`.
    ///
    /// ```python
    /// >>> import arrow_device, pyarrow as pa
    /// >>> s = arrow_device.stream(pa.table({"x": [1, 2]}))
    /// >>> s.__arrow_c_device_stream__()  # doctest: +ELLIPSIS
    /// <capsule object "arrow_device_array_stream" at 0x...>
    /// >>> s.__arrow_c_device_stream__()
    /// Traceback (most recent call last):
    ///     ...
    /// ValueError: the stream was already handed on to a consumer
    ///
    /// ```
    #[pyo3(signature = (requested_schema = None, **kwargs))]
    fn __arrow_c_device_stream__<'py>(
        &self,
        py: Python<'py>,
        requested_schema: Option<&Bound<'py, PyAny>>,
        kwargs: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyCapsule>> {
        check_kwargs(kwargs)?;
        guard(|| {
            let stream = self.export(requested_schema)?;
            capsule::wrap_device(py, stream, ARROW_DEVICE_ARRAY_STREAM)
        })
    }

    /// A C stream capsule (spec: `__arrow_c_stream__`) for host-accessible
    /// data, so that pyarrow, polars and duckdb can read it; device data is
    /// refused (`ValueError`: never handed out as CPU pointers). The stream
    /// is handed on.
    ///
    /// ```python
    /// >>> import arrow_device, pyarrow as pa
    /// >>> s = arrow_device.stream(pa.table({"x": [1, 2]}))
    /// >>> pa.RecordBatchReader.from_stream(s).read_all().to_pydict()
    /// {'x': [1, 2]}
    ///
    /// ```
    #[pyo3(signature = (requested_schema = None))]
    fn __arrow_c_stream__<'py>(
        &self,
        py: Python<'py>,
        requested_schema: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyCapsule>> {
        guard(|| {
            if !self.device_type.is_host_accessible() {
                return Err(PyValueError::new_err(format!(
                    "__arrow_c_stream__ hands out CPU pointers, and this stream is on device type {}: use __arrow_c_device_stream__",
                    self.device_type
                )));
            }
            let c_stream = if self.device_type == DeviceType::CPU {
                FFI_ArrowArrayStream::try_from(self.export(requested_schema)?).py()?
            } else {
                // Pinned or managed memory: each batch is read after its
                // event, zero-copy.
                let reader = self.take_reader(requested_schema)?;
                FFI_ArrowArrayStream::new(Box::new(reader.into_record_batch_reader().py()?))
            };
            capsule::wrap(py, c_stream, ARROW_ARRAY_STREAM)
        })
    }

    /// Shares the rest of the stream with one process of this machine: a
    /// `SharedStream`, whose handle (picklable) `open_shared_stream` opens;
    /// at most `depth` batches are read ahead of that opener. The stream is
    /// handed on. Linux only (elsewhere `NotImplementedError`).
    ///
    /// ```python
    /// >>> import arrow_device, pyarrow as pa, pickle
    /// >>> s = arrow_device.stream([pa.array([1, 2]), pa.array([3])])
    /// >>> with s.share(depth=1) as shared:
    /// ...     handle = pickle.dumps(shared)  # bytes for another process
    /// ...     opened = arrow_device.open_shared_stream(pickle.loads(handle))
    /// ...     [pa.array(batch).to_pylist() for batch in opened]
    /// [[1, 2], [3]]
    ///
    /// ```
    #[pyo3(signature = (depth = 2))]
    fn share(&self, py: Python<'_>, depth: i64) -> PyResult<crate::share::stream::PySharedStream> {
        crate::share::stream::share_stream(py, depth, || self.take_reader(None))
    }

    /// The stream's schema as a capsule (spec: `__arrow_c_schema__`); the
    /// stream is not consumed.
    ///
    /// ```python
    /// >>> import arrow_device, pyarrow as pa
    /// >>> pa.schema(arrow_device.stream(pa.table({"x": [1]})))
    /// x: int64
    ///
    /// ```
    fn __arrow_c_schema__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyCapsule>> {
        guard(|| capsule::wrap(py, export_field(&self.field).py()?, ARROW_SCHEMA))
    }

    fn __repr__(&self) -> String {
        format!(
            "DeviceStream(type={}, device_type={})",
            self.field.data_type(),
            self.device_type
        )
    }
}

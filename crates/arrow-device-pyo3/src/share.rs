//! Sharing arrays and streams with other processes of this machine, over
//! the library's `arrow_device::share` (Linux; elsewhere every entry point
//! raises `NotImplementedError`).
//!
//! ```python
//! shared = arrow_device.array(data).share()      # exporter: open while alive
//! handle = pickle.dumps(shared)                  # a ShareHandle: bytes only
//! # ... in another process ...
//! opened = arrow_device.open_shared(pickle.loads(handle))  # zero-copy
//! ```
//!
//! The exporter's side (`SharedArray`, `SharedStream`) holds the library's
//! object: while it is open, its handle opens. `close()` (or its last
//! reference going) withdraws it; what was already opened keeps its memory,
//! each opened array holding a lease on it. Pickling one gives a
//! `ShareHandle`, the handle's bytes and nothing else: it keeps nothing
//! alive, so the exporter must keep its `SharedArray` open until the
//! openers have opened.
//!
//! Opening connects to the exporting process and may wait for it (up to
//! 10 s), and sharing copies or waits on a device: both run detached from
//! the GIL, so that an exporter in this very process can answer.

use std::sync::{Mutex, MutexGuard, PoisonError};

use arrow_device::DeviceArray;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyType};

use crate::array::{parse_level, DeviceArrayObject};
use crate::capsule::type_name;
use crate::device::DeviceObject;
use crate::errors::{guard, without_gil};

/// The library's sharing on Linux.
#[cfg(target_os = "linux")]
mod backend {
    pub use arrow_device::share::SharedArray;
    pub use arrow_device::share::SharedStream;
    use arrow_device::{DeviceArray, ValidationLevel};
    use pyo3::PyResult;

    use crate::errors::PyResultExt;

    pub fn share(array: &DeviceArray) -> PyResult<SharedArray> {
        arrow_device::share::share(array).py()
    }

    pub fn open_shared(handle: &[u8], level: ValidationLevel) -> PyResult<DeviceArray> {
        arrow_device::share::open_shared(handle, level).py()
    }

    pub fn share_stream(
        reader: arrow_device::stream::DeviceStreamReader,
        depth: usize,
    ) -> PyResult<SharedStream> {
        arrow_device::share::share_stream(reader, depth).py()
    }

    pub fn open_shared_stream(
        handle: &[u8],
        level: ValidationLevel,
    ) -> PyResult<arrow_device::stream::DeviceStreamReader> {
        arrow_device::share::open_shared_stream(handle, level).py()
    }

    /// Sharing is available: nothing to refuse before a stream is taken.
    pub fn check() -> PyResult<()> {
        Ok(())
    }
}

/// Elsewhere: the library shares through memory files and abstract Unix
/// sockets, which are Linux's, so every entry point says so.
#[cfg(not(target_os = "linux"))]
mod backend {
    use arrow_device::{DeviceArray, ValidationLevel};
    use pyo3::exceptions::PyNotImplementedError;
    use pyo3::{PyErr, PyResult};

    /// Never made: `share` refuses first.
    pub enum SharedArray {}

    impl SharedArray {
        pub fn handle(&self) -> &[u8] {
            match *self {}
        }
    }

    /// Never made: `share_stream` refuses first.
    pub enum SharedStream {}

    impl SharedStream {
        pub fn handle(&self) -> &[u8] {
            match *self {}
        }
    }

    fn unsupported() -> PyErr {
        PyNotImplementedError::new_err(format!(
            "sharing arrays and streams between processes needs Linux (memory files passed \
             over abstract Unix sockets); this build is for {}",
            std::env::consts::OS
        ))
    }

    pub fn share(_: &DeviceArray) -> PyResult<SharedArray> {
        Err(unsupported())
    }

    pub fn open_shared(_: &[u8], _: ValidationLevel) -> PyResult<DeviceArray> {
        Err(unsupported())
    }

    pub fn share_stream(
        _: arrow_device::stream::DeviceStreamReader,
        _: usize,
    ) -> PyResult<SharedStream> {
        Err(unsupported())
    }

    pub fn open_shared_stream(
        _: &[u8],
        _: ValidationLevel,
    ) -> PyResult<arrow_device::stream::DeviceStreamReader> {
        Err(unsupported())
    }

    /// Refuses before a stream is taken from its owner.
    pub fn check() -> PyResult<()> {
        Err(unsupported())
    }
}

/// The library's shared object of a `SharedArray` or `SharedStream`, until
/// closed. Dropped without the GIL: withdrawing a stream may wait for the
/// thread that reads it, which may need the GIL for a Python source.
struct Share<T: Send> {
    /// `SharedArray` or `SharedStream`, for messages.
    class: &'static str,
    open: Mutex<Option<T>>,
}

impl<T: Send> Share<T> {
    fn new(class: &'static str, shared: T) -> Self {
        Share {
            class,
            open: Mutex::new(Some(shared)),
        }
    }

    /// The lock's holder only moves the value out or reads its handle.
    fn lock(&self) -> MutexGuard<'_, Option<T>> {
        self.open.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The handle's bytes; `ValueError` once closed, when they would open
    /// nothing.
    fn handle(&self, handle: impl FnOnce(&T) -> &[u8]) -> PyResult<Vec<u8>> {
        match self.lock().as_ref() {
            Some(shared) => Ok(handle(shared).to_vec()),
            None => Err(PyValueError::new_err(format!(
                "the {} was closed: its handle opens nothing any more",
                self.class
            ))),
        }
    }

    fn is_closed(&self) -> bool {
        self.lock().is_none()
    }

    /// Withdraws the share (no new opens); a second close does nothing.
    fn close(&self) {
        let shared = self.lock().take();
        if let Some(shared) = shared {
            without_gil(move || drop(shared));
        }
    }
}

impl<T: Send> Drop for Share<T> {
    fn drop(&mut self) {
        self.close();
    }
}

/// `(ShareHandle, (handle,))`: what pickling a share gives.
fn reduce_to_handle<'py>(
    py: Python<'py>,
    handle: &[u8],
) -> (Bound<'py, PyType>, (Bound<'py, PyBytes>,)) {
    (py.get_type::<PyShareHandle>(), (PyBytes::new(py, handle),))
}

/// A share's handle and nothing else, as unpickling a `SharedArray` or
/// `SharedStream` gives it in another process: it opens what it names while
/// the exporter keeps that open, and keeps nothing alive itself.
/// `ShareHandle(handle)` wraps a handle's bytes received some other way.
///
/// ```python
/// >>> import arrow_device, pyarrow as pa, pickle
/// >>> shared = arrow_device.array(pa.array([1, 2])).share()
/// >>> handle = pickle.loads(pickle.dumps(shared))
/// >>> handle == arrow_device.ShareHandle(shared.handle)
/// True
/// >>> pa.array(arrow_device.open_shared(handle)).to_pylist()
/// [1, 2]
/// >>> shared.close()
///
/// ```
#[pyclass(name = "ShareHandle", module = "arrow_device", frozen, eq, hash)]
#[derive(PartialEq, Eq, Hash)]
pub struct PyShareHandle {
    handle: Vec<u8>,
}

#[pymethods]
impl PyShareHandle {
    /// A handle received as bytes (from `SharedArray.handle`).
    #[new]
    fn new(handle: &Bound<'_, PyAny>) -> PyResult<Self> {
        let bytes = handle.cast::<PyBytes>().map_err(|_| {
            PyTypeError::new_err(format!(
                "ShareHandle(handle) takes the handle's bytes, got {}",
                type_name(handle)
            ))
        })?;
        Ok(PyShareHandle {
            handle: bytes.as_bytes().to_vec(),
        })
    }

    /// The handle's bytes.
    ///
    /// ```python
    /// >>> import arrow_device
    /// >>> arrow_device.ShareHandle(b"handle bytes").handle
    /// b'handle bytes'
    ///
    /// ```
    #[getter]
    fn handle<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.handle)
    }

    fn __reduce__<'py>(&self, py: Python<'py>) -> (Bound<'py, PyType>, (Bound<'py, PyBytes>,)) {
        reduce_to_handle(py, &self.handle)
    }

    fn __repr__(&self) -> String {
        format!("ShareHandle({} bytes)", self.handle.len())
    }
}

/// A `DeviceArray` this process shares (`DeviceArray.share()`): while it is
/// open, its handle opens the array in any process of this machine
/// (`open_shared`), zero-copy. Pickles to a `ShareHandle`. A context
/// manager that closes it on exit; so does its last reference going.
///
/// ```python
/// >>> import arrow_device, pyarrow as pa, pickle
/// >>> shared = arrow_device.array(pa.array([1, 2, 3])).share()
/// >>> shared
/// SharedArray(type=Int64, len=3, device=Device(CPU, -1), open)
/// >>> message = pickle.dumps(shared)  # send it to another process, which does:
/// >>> pa.array(arrow_device.open_shared(pickle.loads(message))).to_pylist()
/// [1, 2, 3]
/// >>> shared.close()
///
/// ```
#[pyclass(name = "SharedArray", module = "arrow_device", frozen)]
pub struct PySharedArray {
    share: Share<backend::SharedArray>,
    /// The array's type, length and device, for `repr`.
    description: String,
}

/// `DeviceArray.share()`: a CPU array is copied once into a sealed memory
/// file that every opener maps; device arrays as the library supports them.
pub fn share_array(py: Python<'_>, array: &DeviceArray) -> PyResult<PySharedArray> {
    guard(|| {
        let shared = py.detach(|| backend::share(array))?;
        let device = DeviceObject::of(array.device_type(), array.device_id(), array.device());
        Ok(PySharedArray {
            share: Share::new("SharedArray", shared),
            description: format!(
                "type={}, len={}, device={}",
                array.data_type(),
                array.len(),
                device.repr_text()
            ),
        })
    })
}

/// The Python methods of a share class (`SharedArray`, `SharedStream`):
/// its handle, `closed`, `close()`, a context manager, pickling to a
/// `ShareHandle`, and its repr. Both hold `share` and `description`.
macro_rules! share_methods {
    // `$make`: a Python expression that makes one, for the examples.
    ($class:ty, $name:literal, $make:literal) => {
        #[pymethods]
        impl $class {
            /// The bytes its opener (`open_shared`, `open_shared_stream`)
            /// opens; `ValueError` once closed.
            ///
            /// ```python
            /// >>> import arrow_device, pyarrow as pa
            #[doc = concat!(">>> shared = ", $make)]
            /// >>> isinstance(shared.handle, bytes)
            /// True
            /// >>> shared.close()
            /// >>> shared.handle
            /// Traceback (most recent call last):
            ///     ...
            #[doc = concat!("ValueError: the ", $name, " was closed: its handle opens nothing any more")]
            ///
            /// ```
            #[getter]
            fn handle<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
                Ok(PyBytes::new(py, &self.share.handle(|s| s.handle())?))
            }

            /// Whether `close()` withdrew the share.
            ///
            /// ```python
            /// >>> import arrow_device, pyarrow as pa
            #[doc = concat!(">>> shared = ", $make)]
            /// >>> shared.closed
            /// False
            /// >>> shared.close()
            /// >>> shared.closed
            /// True
            ///
            /// ```
            #[getter]
            fn closed(&self) -> bool {
                self.share.is_closed()
            }

            /// Withdraws the share: its handle opens nothing any more, while
            /// what was already opened keeps its memory until it goes. A second
            /// call does nothing; leaving a `with` block calls it.
            ///
            /// ```python
            /// >>> import arrow_device, pyarrow as pa
            #[doc = concat!(">>> with ", $make, " as shared:")]
            /// ...     pass
            /// >>> shared.closed
            /// True
            ///
            /// ```
            fn close(&self) {
                self.share.close();
            }

            fn __enter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
                slf
            }

            /// Closes the share; exceptions go on.
            fn __exit__(
                &self,
                _exc_type: Option<&Bound<'_, PyAny>>,
                _exc_value: Option<&Bound<'_, PyAny>>,
                _traceback: Option<&Bound<'_, PyAny>>,
            ) -> bool {
                self.share.close();
                false
            }

            /// Pickles to a `ShareHandle` (the handle's bytes, keeping
            /// nothing alive); `ValueError` once closed.
            fn __reduce__<'py>(
                &self,
                py: Python<'py>,
            ) -> PyResult<(Bound<'py, PyType>, (Bound<'py, PyBytes>,))> {
                Ok(reduce_to_handle(py, &self.share.handle(|s| s.handle())?))
            }

            fn __repr__(&self) -> String {
                let state = if self.share.is_closed() {
                    "closed"
                } else {
                    "open"
                };
                format!(concat!($name, "({}, {})"), self.description, state)
            }
        }
    };
}

share_methods!(
    PySharedArray,
    "SharedArray",
    "arrow_device.array(pa.array([1, 2])).share()"
);

/// The bytes of a handle given as `bytes`, a `ShareHandle` or the share
/// itself (`opens` is the class of share that `function` opens).
fn handle_bytes(obj: &Bound<'_, PyAny>, function: &str, opens: &str) -> PyResult<Vec<u8>> {
    if let Ok(bytes) = obj.cast::<PyBytes>() {
        return Ok(bytes.as_bytes().to_vec());
    }
    if let Ok(handle) = obj.cast::<PyShareHandle>() {
        return Ok(handle.get().handle.clone());
    }
    if let Ok(shared) = obj.cast::<PySharedArray>() {
        if opens == "SharedArray" {
            return shared.get().share.handle(|s| s.handle());
        }
        return Err(PyTypeError::new_err(format!(
            "{function} opens a {opens}'s handle, got a SharedArray: open it with open_shared"
        )));
    }
    if let Ok(shared) = obj.cast::<stream::PySharedStream>() {
        if opens == "SharedStream" {
            return shared.get().share.handle(|s| s.handle());
        }
        return Err(PyTypeError::new_err(format!(
            "{function} opens a {opens}'s handle, got a SharedStream: open it with \
             open_shared_stream"
        )));
    }
    Err(PyTypeError::new_err(format!(
        "{function} expects a handle: bytes, a ShareHandle or a {opens}, got {}",
        type_name(obj)
    )))
}

/// The array a handle names (`bytes`, a `ShareHandle`, or the `SharedArray`
/// itself), over the exporter's memory (zero-copy), validated at `validate`
/// like any import (see `array()`); full by default, since the handle and
/// the memory come from another process. The array holds a lease on the
/// exporter's memory while it lives, also after the exporter closed the
/// share. Waits for the exporter (up to 10 s) without holding the GIL.
/// `RuntimeError` when the exporter no longer shares it, `ValueError` for
/// bytes that are no handle.
///
/// ```python
/// >>> import arrow_device, pyarrow as pa
/// >>> with arrow_device.array(pa.array(["a", "b"])).share() as shared:
/// ...     opened = arrow_device.open_shared(shared.handle)
/// >>> opened
/// DeviceArray(type=Utf8, len=2, device=Device(CPU, -1))
/// >>> pa.array(opened).to_pylist()
/// ['a', 'b']
///
/// ```
#[pyfunction]
#[pyo3(signature = (handle, *, validate = "full"))]
pub fn open_shared(
    py: Python<'_>,
    handle: &Bound<'_, PyAny>,
    validate: &str,
) -> PyResult<DeviceArrayObject> {
    let level = parse_level(validate)?;
    let handle = handle_bytes(handle, "open_shared", "SharedArray")?;
    guard(|| {
        py.detach(|| backend::open_shared(&handle, level))
            .map(DeviceArrayObject::new)
    })
}

/// Streams: `DeviceStream.share(depth)`, `SharedStream` and
/// `open_shared_stream`.
pub mod stream {
    use arrow_device::stream::DeviceStreamReader;
    use pyo3::exceptions::PyValueError;
    use pyo3::prelude::*;
    use pyo3::types::{PyBytes, PyType};

    use super::{backend, handle_bytes, reduce_to_handle, Share};
    use crate::array::parse_level;
    use crate::errors::guard;
    use crate::stream::DeviceStreamObject;

    /// A `DeviceStream` this process shares (`DeviceStream.share()`) with
    /// one opener: while it is open, its handle opens the stream in any
    /// process of this machine (`open_shared_stream`), each batch shared as
    /// an array is. Pickles to a `ShareHandle`. A context manager that
    /// closes it on exit.
    ///
    /// ```python
    /// >>> import arrow_device, pyarrow as pa, pickle
    /// >>> shared = arrow_device.stream([pa.array([1, 2]), pa.array([3])]).share()
    /// >>> message = pickle.dumps(shared)  # send it to another process, which does:
    /// >>> opened = arrow_device.open_shared_stream(pickle.loads(message))
    /// >>> [len(batch) for batch in opened]
    /// [2, 1]
    /// >>> shared.close()
    ///
    /// ```
    #[pyclass(name = "SharedStream", module = "arrow_device", frozen)]
    pub struct PySharedStream {
        pub(super) share: Share<backend::SharedStream>,
        /// The stream's type, device type and depth, for `repr`.
        description: String,
    }

    /// `DeviceStream.share(depth)`: takes the stream (`take`, called only
    /// once sharing is known to be available) and shares it, reading at
    /// most `depth` batches ahead of the opener.
    pub fn share_stream(
        py: Python<'_>,
        depth: i64,
        take: impl FnOnce() -> PyResult<DeviceStreamReader>,
    ) -> PyResult<PySharedStream> {
        let depth = usize::try_from(depth)
            .ok()
            .filter(|&depth| depth >= 1)
            .ok_or_else(|| {
                PyValueError::new_err(format!(
                    "depth is the number of batches read ahead of the opener, at least 1, got {depth}"
                ))
            })?;
        backend::check()?;
        guard(|| {
            let reader = take()?;
            let description = format!(
                "type={}, device_type={}, depth={depth}",
                reader.field().data_type(),
                reader.device_type()
            );
            let shared = py.detach(|| backend::share_stream(reader, depth))?;
            Ok(PySharedStream {
                share: Share::new("SharedStream", shared),
                description,
            })
        })
    }

    share_methods!(
        PySharedStream,
        "SharedStream",
        "arrow_device.stream([pa.array([1, 2])]).share()"
    );

    /// The stream a handle names (`bytes`, a `ShareHandle`, or the
    /// `SharedStream` itself); one opener only. Each batch is read from the
    /// exporter when asked for, detached from the GIL (it may wait for the
    /// exporter), and validated at `validate` as `array()` does.
    ///
    /// ```python
    /// >>> import arrow_device, pyarrow as pa
    /// >>> with arrow_device.stream(pa.table({"x": [1, 2]})).share() as shared:
    /// ...     opened = arrow_device.open_shared_stream(shared.handle)
    /// ...     pa.table(opened).to_pydict()
    /// {'x': [1, 2]}
    ///
    /// ```
    #[pyfunction]
    #[pyo3(signature = (handle, *, validate = "full"))]
    pub fn open_shared_stream(
        py: Python<'_>,
        handle: &Bound<'_, PyAny>,
        validate: &str,
    ) -> PyResult<DeviceStreamObject> {
        let level = parse_level(validate)?;
        let handle = handle_bytes(handle, "open_shared_stream", "SharedStream")?;
        guard(|| {
            py.detach(|| backend::open_shared_stream(&handle, level))
                .map(DeviceStreamObject::from_shared_reader)
        })
    }
}

/// Adds the classes and functions to the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyShareHandle>()?;
    m.add_class::<PySharedArray>()?;
    m.add_function(pyo3::wrap_pyfunction!(open_shared, m)?)?;
    {
        m.add_class::<stream::PySharedStream>()?;
        m.add_function(pyo3::wrap_pyfunction!(stream::open_shared_stream, m)?)?;
    }
    Ok(())
}

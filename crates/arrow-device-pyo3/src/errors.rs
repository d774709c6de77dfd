//! How the library's errors reach Python, and the guard that keeps a panic
//! from ever reaching it as `PanicException` (a `BaseException` that
//! `except Exception` does not catch).

use std::panic::{catch_unwind, AssertUnwindSafe};

use arrow_device::Error as LibraryError;

use pyo3::exceptions::{PyIndexError, PyRuntimeError, PyTypeError, PyValueError};
use pyo3::PyErr;

/// The Python exception for a library error:
/// * `ValueError`: a malformed struct or bad data (the message names the
///   defect and where in the array tree it is);
/// * `TypeError`: a valid request that this kind of data or device cannot
///   serve (for example a device copy of an opaque device's array);
/// * `IndexError`: an index or range out of range (a slice past the end);
/// * `arrow_device.flight.FlightError` (a `RuntimeError`): a remote peer or
///   the network failed (the message names the peer, the call and the
///   gRPC status);
/// * `RuntimeError`: a device call, or a foreign producer or consumer, failed.
pub fn to_py(err: LibraryError) -> PyErr {
    match err {
        LibraryError::Invalid { .. } | LibraryError::Arrow(_) => {
            PyValueError::new_err(err.to_string())
        }
        LibraryError::NotSupported(message) => PyTypeError::new_err(message),
        LibraryError::OutOfRange(message) => PyIndexError::new_err(message),
        LibraryError::Remote(message) => FlightError::new_err(message),
        other => PyRuntimeError::new_err(other.to_string()),
    }
}

pyo3::create_exception!(
    arrow_device.flight,
    FlightError,
    PyRuntimeError,
    "A Flight call failed at the peer or on the way (a `RuntimeError`): the \
     message names the location, the call and the gRPC status code.\n\
     \n\
     ```python\n\
     >>> import pyarrow as pa\n\
     >>> from arrow_device import flight\n\
     >>> with flight.serve({\"numbers\": lambda: pa.table({\"x\": [1]})}) as server:\n\
     ...     flight.fetch(server.location, \"nope\")  # doctest: +ELLIPSIS\n\
     Traceback (most recent call last):\n\
     ...\n\
     arrow_device.flight.FlightError: do_get at grpc://127.0.0.1:...: NOT_FOUND (5): \
     no source named \"nope\"; this server has [\"numbers\"]\n\
     \n\
     ```"
);

/// Runs `f`, turning a panic into a `RuntimeError` instead of PyO3's
/// `PanicException`.
pub fn guard<T>(f: impl FnOnce() -> pyo3::PyResult<T>) -> pyo3::PyResult<T> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(result) => result,
        Err(payload) => Err(to_py(LibraryError::from_panic(payload))),
    }
}

/// `result.py()?` on a library result inside a `#[pyfunction]`: the error
/// becomes the Python exception `arrow_device` raises for it ([`to_py`]).
pub trait PyResultExt<T> {
    /// The result with a library error turned into its Python exception.
    fn py(self) -> pyo3::PyResult<T>;
}

impl<T> PyResultExt<T> for arrow_device::Result<T> {
    fn py(self) -> pyo3::PyResult<T> {
        self.map_err(to_py)
    }
}

/// Runs `f` with the GIL released: for a destructor whose drop may wait on
/// a device (see `array::DeviceArrayObject`'s). While the interpreter shuts
/// down (a capsule freed at exit), `f` runs as it is, since no thread can
/// take the GIL then anyway.
pub fn without_gil<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    let mut f = Some(f);
    let ran = pyo3::Python::try_attach(|py| {
        let f = f.take().expect("taken once");
        py.detach(f)
    });
    match ran {
        Some(result) => result,
        None => (f.take().expect("not taken: try_attach did not run"))(),
    }
}

/// The error of a `#[pyfunction]` that mixes library calls and Python
/// calls: `?` takes both an [`arrow_device::Error`] and a [`PyErr`], and
/// PyO3 raises it as the exception [`to_py`] names (a Python error as it
/// is).
///
/// ```ignore
/// #[pyfunction]
/// fn to_cpu(array: PyDeviceArray) -> Result<PyDeviceArray, arrow_device_pyo3::Error> {
///     Ok(array.to_device(&arrow_device::device::cpu())?.into())
/// }
/// ```
#[derive(Debug)]
pub enum Error {
    /// A library error.
    Library(LibraryError),
    /// A Python exception.
    Python(PyErr),
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Library(err) => err.fmt(f),
            Error::Python(err) => err.fmt(f),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Library(err) => Some(err),
            Error::Python(err) => Some(err),
        }
    }
}

impl From<LibraryError> for Error {
    fn from(err: LibraryError) -> Self {
        Error::Library(err)
    }
}

impl From<PyErr> for Error {
    fn from(err: PyErr) -> Self {
        Error::Python(err)
    }
}

impl From<Error> for PyErr {
    fn from(err: Error) -> PyErr {
        match err {
            Error::Library(err) => to_py(err),
            Error::Python(err) => err,
        }
    }
}

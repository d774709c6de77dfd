//! `arrow_device.flight`: Arrow Flight over the `arrow-device-flight`
//! crate. A remote dataset arrives as a `DeviceStream` on the device you
//! choose; any Python stream is served to any Flight client (pyarrow's,
//! Arrow C++'s, Java's).
//!
//! ```python
//! import arrow_device as ad, pyarrow as pa
//! from arrow_device import flight
//!
//! table = pa.table({"x": [1, 2, 3]})
//! with flight.serve({"numbers": lambda: table}) as server:
//!     stream = flight.fetch(server.location, "numbers", ad.emulated())
//!     batches = [b.to(ad.cpu()) for b in stream]
//! ```
//!
//! Every call that connects, waits for the network or copies runs detached
//! from the GIL: a server in this very process may need the GIL to read a
//! Python source or run the sink, on the crate's runtime threads, which take
//! it only around the Python calls.

use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use arrow_device::device::{self, DeviceRef};
use arrow_device::schema::export_field;
use arrow_device::stream::record_batch_field;
use arrow_device::ValidationLevel;
use arrow_device_flight::arrow_flight::flight_descriptor::DescriptorType;
use arrow_device_flight::arrow_flight::{FlightDescriptor, FlightInfo};
use arrow_device_flight::{
    Batches, ClientOptions, DeviceBatches, Error, FlightServer, Location, ServerTls, Source,
};
use arrow_schema::Field;
use pyo3::exceptions::{PyOSError, PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyCapsule, PyDict, PyList, PyString};

use arrow_device_pyo3::capsule::{self, type_name, ARROW_SCHEMA};
use arrow_device_pyo3::device::DeviceObject;
use arrow_device_pyo3::errors::{guard, FlightError, PyResultExt};
use arrow_device_pyo3::interpreter::{attached, PyOwned};
use arrow_device_pyo3::stream::{has_stream_protocol, python_error, reader_of, DeviceStreamObject};

/// A Flight error as its Python exception: a location or an option that
/// cannot be used is a bad argument (`ValueError`), a local system call
/// `OSError`, a device step the core's exception, an embedder's error
/// `RuntimeError`; what the peer or the network did is `FlightError`, whose
/// message names the location, the call and the gRPC status code.
fn to_py(error: Error) -> PyErr {
    match error {
        Error::Location { .. } | Error::Config { .. } => PyValueError::new_err(error.to_string()),
        Error::Io { .. } => PyOSError::new_err(error.to_string()),
        Error::Device(e) => arrow_device_pyo3::errors::to_py(e),
        Error::External(e) => PyRuntimeError::new_err(e.to_string()),
        other => FlightError::new_err(other.to_string()),
    }
}

/// `device=None` is the CPU.
fn device_of(device: Option<PyRef<'_, DeviceObject>>) -> PyResult<DeviceRef> {
    match device {
        None => Ok(device::cpu()),
        Some(device) => device.require().cloned(),
    }
}

/// A count that must be at least 1 (`prefetch`, `depth`).
fn at_least_one(value: i64, what: &str) -> PyResult<usize> {
    usize::try_from(value)
        .ok()
        .filter(|&value| value >= 1)
        .ok_or_else(|| PyValueError::new_err(format!("{what} must be at least 1, got {value}")))
}

/// A path given as `str` or `os.PathLike`; `None` for anything else.
fn path_of(obj: &Bound<'_, PyAny>) -> PyResult<Option<PathBuf>> {
    if obj.is_instance_of::<PyString>() || obj.hasattr(pyo3::intern!(obj.py(), "__fspath__"))? {
        return obj.extract::<PathBuf>().map(Some);
    }
    Ok(None)
}

/// PEM bytes, given as `bytes` or as the path of a PEM file (`what` names
/// the argument in messages).
fn pem_of(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<Vec<u8>> {
    if let Ok(bytes) = obj.cast::<PyBytes>() {
        return Ok(bytes.as_bytes().to_vec());
    }
    if let Some(path) = path_of(obj)? {
        return std::fs::read(&path).map_err(|e| {
            // `From<io::Error>` keeps the kind (FileNotFoundError, ...).
            std::io::Error::new(e.kind(), format!("{what}: reading {}: {e}", path.display())).into()
        });
    }
    Err(PyTypeError::new_err(format!(
        "{what} is PEM: bytes, or the path of a PEM file (str or os.PathLike), got {}",
        type_name(obj)
    )))
}

/// A ticket given as `str` (sent as its UTF-8) or `bytes`.
fn ticket_of(obj: &Bound<'_, PyAny>) -> PyResult<Vec<u8>> {
    if let Ok(bytes) = obj.cast::<PyBytes>() {
        return Ok(bytes.as_bytes().to_vec());
    }
    if let Ok(text) = obj.cast::<PyString>() {
        return Ok(text.to_str()?.as_bytes().to_vec());
    }
    Err(PyTypeError::new_err(format!(
        "the ticket is str or bytes, got {}",
        type_name(obj)
    )))
}

fn client_options(
    token: Option<String>,
    tls_root: Option<&Bound<'_, PyAny>>,
    prefetch: i64,
) -> PyResult<ClientOptions> {
    Ok(ClientOptions {
        token,
        tls_root: tls_root.map(|pem| pem_of(pem, "tls_root")).transpose()?,
        prefetch: at_least_one(prefetch, "prefetch")?,
        ..ClientOptions::default()
    })
}

/// `do_get` of `ticket` (`str`, sent as UTF-8, or `bytes`) at `location`
/// (`grpc://`, `grpc+tcp://` or `grpc+tls://HOST:PORT`): a `DeviceStream`
/// whose batches are copied onto `device` (the CPU when None) as they
/// arrive, each copy's event its batch's `sync_event`, at most `prefetch`
/// batches ahead of the reader. `token` is sent as `authorization: Bearer
/// <token>`; `tls_root` is the PEM (bytes, or a file's path) of the
/// authority that signed the server's certificate (None: the system's
/// roots). Connecting and every read run without the GIL. `FlightError`
/// for the peer's or the network's errors, `ValueError` or `TypeError` for
/// bad arguments.
///
/// ```python
/// >>> import arrow_device, pyarrow as pa
/// >>> from arrow_device import flight
/// >>> with flight.serve({"numbers": lambda: pa.table({"x": [1, 2, 3]})}) as server:
/// ...     stream = flight.fetch(server.location, "numbers", arrow_device.emulated())
/// ...     [(len(batch), batch.device) for batch in stream]
/// [(3, Device(EXT_DEV, 0))]
///
/// ```
#[pyfunction]
#[pyo3(
    name = "flight_fetch",
    signature = (location, ticket, device = None, *, token = None, tls_root = None, prefetch = 2)
)]
pub fn fetch(
    py: Python<'_>,
    location: &str,
    ticket: &Bound<'_, PyAny>,
    device: Option<PyRef<'_, DeviceObject>>,
    token: Option<String>,
    tls_root: Option<&Bound<'_, PyAny>>,
    prefetch: i64,
) -> PyResult<DeviceStreamObject> {
    let ticket = ticket_of(ticket)?;
    let device = device_of(device)?;
    let options = client_options(token, tls_root, prefetch)?;
    guard(|| {
        let batches = py
            .detach(|| arrow_device_flight::fetch_batches(location, ticket, &device, &options))
            .map_err(to_py)?;
        let field = record_batch_field(&batches.schema());
        Ok(DeviceStreamObject::from_remote(
            field,
            device.device_type(),
            batches,
        ))
    })
}

/// The batches to upload of anything `put` takes: a path of an IPC file,
/// or anything `arrow_device.stream()` takes.
fn upload_of(source: &Bound<'_, PyAny>) -> PyResult<Batches> {
    if let Some(path) = path_of(source)? {
        return Batches::ipc_file(path).map_err(to_py);
    }
    Batches::device(reader_of(source, ValidationLevel::Default)?).map_err(to_py)
}

/// `do_put` of `source` (anything `arrow_device.stream()` takes, or the
/// path of an Arrow IPC file) under the path descriptor `[name]`; returns
/// `{"batches": n, "rows": n, "complete": bool}` sent (`complete` is False
/// when the server answered before the whole source was sent: its sink
/// stopped reading early). Device batches are copied to the host as they
/// are sent. A source's error cancels the upload, so that the server never
/// takes it for a whole one, and is raised here. `token` and `tls_root` as
/// for `fetch`.
///
/// ```python
/// >>> import pyarrow as pa
/// >>> from arrow_device import flight
/// >>> uploads = {}
/// >>> def sink(descriptor, stream):
/// ...     uploads["/".join(descriptor)] = pa.table(stream)
/// >>> with flight.serve({}, sink=sink) as server:
/// ...     flight.put(server.location, "numbers", pa.table({"x": [1, 2, 3]}))
/// {'batches': 1, 'rows': 3, 'complete': True}
/// >>> uploads["numbers"].to_pydict()
/// {'x': [1, 2, 3]}
///
/// ```
#[pyfunction]
#[pyo3(name = "flight_put", signature = (location, name, source, *, token = None, tls_root = None))]
pub fn put<'py>(
    py: Python<'py>,
    location: &str,
    name: &str,
    source: &Bound<'py, PyAny>,
    token: Option<String>,
    tls_root: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyDict>> {
    let options = client_options(token, tls_root, 2)?;
    guard(|| {
        let batches = upload_of(source)?;
        // Detached: a Python source is read on the runtime's threads,
        // which take the GIL for each batch.
        let summary = py
            .detach(|| arrow_device_flight::put(location, name, batches, &options))
            .map_err(to_py)?;
        let result = PyDict::new(py);
        result.set_item("batches", summary.batches)?;
        result.set_item("rows", summary.rows)?;
        result.set_item("complete", summary.complete)?;
        Ok(result)
    })
}

/// Every flight the server at `location` lists (`list_flights`), as
/// `FlightInfo`s. `token` and `tls_root` as for `fetch`.
///
/// ```python
/// >>> import pyarrow as pa
/// >>> from arrow_device import flight
/// >>> with flight.serve({"a": lambda: pa.table({"x": [1]}), "b": lambda: pa.table({"y": [2.0]})}) as server:
/// ...     sorted(info.name for info in flight.list_flights(server.location))
/// ['a', 'b']
///
/// ```
#[pyfunction]
#[pyo3(name = "flight_list_flights", signature = (location, *, token = None, tls_root = None))]
pub fn list_flights(
    py: Python<'_>,
    location: &str,
    token: Option<String>,
    tls_root: Option<&Bound<'_, PyAny>>,
) -> PyResult<Vec<PyFlightInfo>> {
    let options = client_options(token, tls_root, 1)?;
    guard(|| {
        let infos = py
            .detach(|| arrow_device_flight::list_flights(location, &options))
            .map_err(to_py)?;
        infos
            .into_iter()
            .map(|info| PyFlightInfo::new(location, info))
            .collect()
    })
}

/// A descriptor as a sink and a listing give it to Python: a path as
/// `list[str]`, a command as `bytes`.
fn descriptor_object<'py>(
    py: Python<'py>,
    descriptor: &FlightDescriptor,
) -> PyResult<Bound<'py, PyAny>> {
    if descriptor.r#type == DescriptorType::Cmd as i32 {
        Ok(PyBytes::new(py, &descriptor.cmd).into_any())
    } else {
        Ok(PyList::new(py, &descriptor.path)?.into_any())
    }
}

/// One flight of a listing: its name, its descriptor, the tickets that
/// `fetch` takes, and its schema (`__arrow_c_schema__`, so that
/// `pyarrow.schema(info)` reads it).
///
/// ```python
/// >>> import pyarrow as pa
/// >>> from arrow_device import flight
/// >>> with flight.serve({"numbers": lambda: pa.table({"x": [1, 2, 3]})}) as server:
/// ...     [info] = flight.list_flights(server.location)
/// >>> info
/// FlightInfo(name="numbers", schema=Struct("x": Int64))
/// >>> pa.schema(info)
/// x: int64
///
/// ```
#[pyclass(name = "FlightInfo", module = "arrow_device.flight", frozen)]
pub struct PyFlightInfo {
    descriptor: Option<FlightDescriptor>,
    tickets: Vec<Vec<u8>>,
    /// The schema as a record-batch field; `None` when the server sent none.
    field: Option<Field>,
    total_records: i64,
    total_bytes: i64,
}

impl PyFlightInfo {
    fn new(location: &str, info: FlightInfo) -> PyResult<PyFlightInfo> {
        let field = if info.schema.is_empty() {
            None
        } else {
            let name = info.flight_descriptor.as_ref().map(|d| d.to_string());
            let schema = info.clone().try_decode_schema().map_err(|e| {
                FlightError::new_err(format!(
                    "list_flights at {location}: the schema of {} does not decode: {e}",
                    name.as_deref().unwrap_or("a flight without a descriptor")
                ))
            })?;
            Some(record_batch_field(&std::sync::Arc::new(schema)))
        };
        Ok(PyFlightInfo {
            tickets: info
                .endpoint
                .iter()
                .filter_map(|endpoint| endpoint.ticket.as_ref())
                .map(|ticket| ticket.ticket.to_vec())
                .collect(),
            descriptor: info.flight_descriptor,
            field,
            total_records: info.total_records,
            total_bytes: info.total_bytes,
        })
    }
}

#[pymethods]
impl PyFlightInfo {
    /// The descriptor's path elements joined with `/`; `None` for a
    /// command descriptor or none.
    ///
    /// ```python
    /// >>> import pyarrow as pa
    /// >>> from arrow_device import flight
    /// >>> with flight.serve({"numbers": lambda: pa.table({"x": [1, 2, 3]})}) as server:
    /// ...     [info] = flight.list_flights(server.location)
    /// >>> info.name
    /// 'numbers'
    ///
    /// ```
    #[getter]
    fn name(&self) -> Option<String> {
        let descriptor = self.descriptor.as_ref()?;
        (descriptor.r#type != DescriptorType::Cmd as i32).then(|| descriptor.path.join("/"))
    }

    /// The descriptor: a path as `list[str]`, a command as `bytes`; `None`
    /// when the server sent none.
    ///
    /// ```python
    /// >>> import pyarrow as pa
    /// >>> from arrow_device import flight
    /// >>> with flight.serve({"numbers": lambda: pa.table({"x": [1, 2, 3]})}) as server:
    /// ...     [info] = flight.list_flights(server.location)
    /// >>> info.descriptor
    /// ['numbers']
    ///
    /// ```
    #[getter]
    fn descriptor<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        self.descriptor
            .as_ref()
            .map(|d| descriptor_object(py, d))
            .transpose()
    }

    /// The ticket of each endpoint, for `fetch`.
    ///
    /// ```python
    /// >>> import pyarrow as pa
    /// >>> from arrow_device import flight
    /// >>> with flight.serve({"numbers": lambda: pa.table({"x": [1, 2, 3]})}) as server:
    /// ...     [info] = flight.list_flights(server.location)
    /// >>> info.tickets
    /// [b'numbers']
    ///
    /// ```
    #[getter]
    fn tickets<'py>(&self, py: Python<'py>) -> Vec<Bound<'py, PyBytes>> {
        self.tickets.iter().map(|t| PyBytes::new(py, t)).collect()
    }

    /// Rows in the flight, -1 when the server does not say (as `serve` does
    /// not: its sources are read when fetched).
    ///
    /// ```python
    /// >>> import pyarrow as pa
    /// >>> from arrow_device import flight
    /// >>> with flight.serve({"numbers": lambda: pa.table({"x": [1, 2, 3]})}) as server:
    /// ...     [info] = flight.list_flights(server.location)
    /// >>> info.total_records
    /// -1
    ///
    /// ```
    #[getter]
    fn total_records(&self) -> i64 {
        self.total_records
    }

    /// Bytes in the flight, -1 when the server does not say (as `serve` does
    /// not).
    ///
    /// ```python
    /// >>> import pyarrow as pa
    /// >>> from arrow_device import flight
    /// >>> with flight.serve({"numbers": lambda: pa.table({"x": [1, 2, 3]})}) as server:
    /// ...     [info] = flight.list_flights(server.location)
    /// >>> info.total_bytes
    /// -1
    ///
    /// ```
    #[getter]
    fn total_bytes(&self) -> i64 {
        self.total_bytes
    }

    /// The schema (spec: `__arrow_c_schema__`); `ValueError` when the
    /// server listed the flight without one.
    ///
    /// ```python
    /// >>> import pyarrow as pa
    /// >>> from arrow_device import flight
    /// >>> with flight.serve({"numbers": lambda: pa.table({"x": [1, 2, 3]})}) as server:
    /// ...     [info] = flight.list_flights(server.location)
    /// >>> pa.schema(info)
    /// x: int64
    ///
    /// ```
    fn __arrow_c_schema__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyCapsule>> {
        let field = self.field.as_ref().ok_or_else(|| {
            PyValueError::new_err(format!(
                "the server listed {} without a schema",
                self.name().unwrap_or_else(|| "this flight".into())
            ))
        })?;
        guard(|| capsule::wrap(py, export_field(field).py()?, ARROW_SCHEMA))
    }

    fn __repr__(&self) -> String {
        let schema = self
            .field
            .as_ref()
            .map_or_else(|| "none".to_string(), |f| f.data_type().to_string());
        match self.name() {
            Some(name) => format!("FlightInfo(name={name:?}, schema={schema})"),
            None => format!(
                "FlightInfo(descriptor={:?}, schema={schema})",
                self.descriptor
            ),
        }
    }
}

// ---------------------------------------------------------------------------
// The server

/// The error of a Python callback that cannot run because the interpreter
/// is exiting.
fn interpreter_gone(what: &str) -> arrow_device::Error {
    arrow_device::Error::Producer {
        code: libc::EIO,
        message: format!("the Python interpreter is shutting down, and {what} can no longer run"),
    }
}

/// The `Source` of one entry of `serve`'s `sources`.
fn source_of(name: &str, obj: &Bound<'_, PyAny>) -> PyResult<Source> {
    let at = |e: PyErr| -> PyErr {
        let py = obj.py();
        let message = format!("source {name:?}: {}", e.value(py));
        let typed = e.get_type(py);
        // The same exception type, its message naming the source, the
        // original as its cause.
        match typed.call1((message,)) {
            Ok(error) => {
                let error = PyErr::from_value(error);
                error.set_cause(py, Some(e));
                error
            }
            Err(_) => e,
        }
    };
    if has_stream_protocol(obj)? {
        let reader = reader_of(obj, ValidationLevel::Default).map_err(at)?;
        return Ok(Source::once(
            Batches::device(reader).map_err(to_py).map_err(at)?,
        ));
    }
    if let Some(path) = path_of(obj)? {
        // Refused now rather than at every do_get.
        std::fs::metadata(&path).map_err(|e| -> PyErr {
            std::io::Error::new(
                e.kind(),
                format!("source {name:?}: the IPC file {}: {e}", path.display()),
            )
            .into()
        })?;
        return Ok(Source::ipc_file(path));
    }
    if obj.is_callable() {
        let open = PyOwned::new(obj.clone().unbind());
        return Ok(Source::new(move || {
            attached(|py| {
                let opened = open
                    .bind(py)
                    .call0()
                    .and_then(|stream| reader_of(&stream, ValidationLevel::Default))
                    .map_err(|err| python_error(py, err))?;
                Batches::device(opened)
            })
            .unwrap_or_else(|| Err(interpreter_gone("the source's callable").into()))
        }));
    }
    if obj.try_iter().is_ok() {
        // An iterable of arrays, as `arrow_device.stream()` takes.
        let reader = reader_of(obj, ValidationLevel::Default).map_err(at)?;
        return Ok(Source::once(
            Batches::device(reader).map_err(to_py).map_err(at)?,
        ));
    }
    Err(PyTypeError::new_err(format!(
        "source {name:?}: expected an object with __arrow_c_device_stream__ or \
         __arrow_c_stream__ (served once), a zero-argument callable returning one (called \
         for each do_get), or the path of an Arrow IPC file, got {}",
        type_name(obj)
    )))
}

/// The address to bind of a `serve` location: `grpc://HOST:PORT`,
/// `grpc+tcp://` or `grpc+tls://` (which needs `tls`).
fn bind_address(location: &str, tls: bool) -> PyResult<String> {
    let parsed = Location::parse(location).map_err(|e| PyValueError::new_err(e.to_string()))?;
    let bad = |message: &str| PyValueError::new_err(format!("location {location:?}: {message}"));
    match (parsed.is_tls(), tls) {
        (false, true) => Err(bad(
            "tls=(certificate, key) was given: use grpc+tls://HOST:PORT",
        )),
        (true, false) => Err(bad("grpc+tls:// needs tls=(certificate, key), PEM")),
        _ => Ok(parsed.authority().to_string()),
    }
}

/// The sink behind `serve(sink=...)`: the Python callable, called with the
/// descriptor and the upload as a `DeviceStream` that is valid during the
/// call only.
fn python_sink(
    sink: PyOwned<Py<PyAny>>,
) -> impl Fn(&FlightDescriptor, DeviceBatches) -> arrow_device::Result<()> + Send + Sync + 'static {
    move |descriptor, batches| {
        let field = record_batch_field(&batches.schema());
        let device_type = batches.device().device_type();
        attached(|py| {
            let stream = Bound::new(
                py,
                DeviceStreamObject::from_remote(field, device_type, batches),
            )
            .map_err(|err| python_error(py, err))?;
            let result = descriptor_object(py, descriptor)
                .and_then(|descriptor| sink.bind(py).call1((descriptor, stream.clone())));
            // The upload ends when the sink returns: a stream kept past it
            // would read a cut-off upload as a whole one.
            stream.get().close(
                "the sink's stream is read during the sink's call only; the upload ended when \
                 the sink returned",
            );
            result.map(drop).map_err(|err| python_error(py, err))
        })
        .unwrap_or_else(|| Err(interpreter_gone("the sink")))
    }
}

/// A running `FlightServer` serving each source under its name (the ticket,
/// and the one-element path descriptor) at `location` (default
/// `grpc://127.0.0.1:0`, or `grpc+tls://127.0.0.1:0` with `tls`; port 0
/// picks a free port), through `list_flights`, `get_flight_info`,
/// `get_schema` and `do_get`.
///
/// A source is an object with `__arrow_c_device_stream__` or
/// `__arrow_c_stream__` (or an iterable of arrays), read once: a second
/// `do_get` gets FAILED_PRECONDITION; a zero-argument callable returning
/// one, called for each `do_get` (wrap a table in a lambda to serve it
/// again and again); or the path of an Arrow IPC file (file or streaming
/// format), opened for each `do_get`. Device batches are copied to the host
/// as they are sent, at most `depth` ahead of each `do_get`'s send.
///
/// `sink(descriptor, stream)` takes each upload (`do_put`): the
/// descriptor's path as `list[str]` or its command as `bytes`, and the
/// batches landed on `sink_device` (the CPU when None) as a `DeviceStream`
/// that is valid during the call only. Its exception is sent to the client.
/// Without a sink, uploads are refused (UNIMPLEMENTED).
///
/// `token` requires `authorization: Bearer <token>` on every call; `tls` is
/// `(certificate chain, private key)`, PEM bytes or paths.
///
/// ```python
/// >>> import pyarrow as pa, pyarrow.flight
/// >>> from arrow_device import flight
/// >>> table = pa.table({"x": [1, 2, 3]})
/// >>> server = flight.serve({"numbers": lambda: table})
/// >>> server.location  # doctest: +ELLIPSIS
/// 'grpc://127.0.0.1:...'
/// >>> pa.table(flight.fetch(server.location, "numbers")).num_rows
/// 3
/// >>> client = pyarrow.flight.connect(server.location)  # any Flight client
/// >>> client.do_get(pyarrow.flight.Ticket(b"numbers")).read_all().equals(table)
/// True
/// >>> server.shutdown()
///
/// ```
#[pyfunction]
#[pyo3(
    name = "flight_serve",
    signature = (sources, location = None, *, token = None, tls = None, sink = None, sink_device = None, depth = 2)
)]
pub fn serve(
    sources: &Bound<'_, PyAny>,
    location: Option<&str>,
    token: Option<String>,
    tls: Option<&Bound<'_, PyAny>>,
    sink: Option<&Bound<'_, PyAny>>,
    sink_device: Option<PyRef<'_, DeviceObject>>,
    depth: i64,
) -> PyResult<PyFlightServer> {
    let sources = sources.cast::<PyDict>().map_err(|_| {
        PyTypeError::new_err(format!(
            "sources is a dict of names (str) to sources, got {}",
            type_name(sources)
        ))
    })?;
    let tls = tls
        .map(|tls| {
            let (certificate, key) = tls
                .extract::<(Bound<'_, PyAny>, Bound<'_, PyAny>)>()
                .map_err(|_| {
                    PyTypeError::new_err(format!(
                        "tls is a (certificate, key) tuple of PEM bytes or paths, got {}",
                        type_name(tls)
                    ))
                })?;
            Ok::<_, PyErr>(ServerTls {
                certificate: pem_of(&certificate, "the TLS certificate")?,
                key: pem_of(&key, "the TLS key")?,
            })
        })
        .transpose()?;
    let default = if tls.is_some() {
        "grpc+tls://127.0.0.1:0"
    } else {
        "grpc://127.0.0.1:0"
    };
    let address = bind_address(location.unwrap_or(default), tls.is_some())?;
    let depth = at_least_one(depth, "depth")?;
    let sink_device = device_of(sink_device)?;
    guard(|| {
        let mut builder = FlightServer::builder().depth(depth);
        for (name, obj) in sources.iter() {
            let name: String = name.extract().map_err(|_| {
                PyTypeError::new_err(format!(
                    "the names of sources are str, got {}",
                    type_name(&name)
                ))
            })?;
            let source = source_of(&name, &obj)?;
            builder = builder.source(name, source);
        }
        if let Some(sink) = sink {
            if !sink.is_callable() {
                return Err(PyTypeError::new_err(format!(
                    "sink is a callable (descriptor, stream) -> None, got {}",
                    type_name(sink)
                )));
            }
            builder = builder.sink(
                sink_device,
                python_sink(PyOwned::new(sink.clone().unbind())),
            );
        }
        if let Some(token) = token {
            builder = builder.bearer_token(token);
        }
        if let Some(tls) = tls {
            builder = builder.tls(tls);
        }
        let server = builder.spawn(&address).map_err(to_py)?;
        Ok(PyFlightServer {
            location: server.location(),
            port: server.local_addr().port(),
            server: Mutex::new(Some(server)),
        })
    })
}

/// A running Flight server (`serve`). A context manager: leaving it shuts
/// the server down; so does its last reference going, without waiting.
///
/// ```python
/// >>> import pyarrow as pa
/// >>> from arrow_device import flight
/// >>> with flight.serve({"numbers": lambda: pa.table({"x": [1]})}) as server:
/// ...     server  # doctest: +ELLIPSIS
/// FlightServer(grpc://127.0.0.1:..., serving)
/// >>> server  # doctest: +ELLIPSIS
/// FlightServer(grpc://127.0.0.1:..., shut down)
///
/// ```
#[pyclass(name = "FlightServer", module = "arrow_device.flight", frozen)]
pub struct PyFlightServer {
    location: String,
    port: u16,
    /// `None` once shut down.
    server: Mutex<Option<FlightServer>>,
}

impl PyFlightServer {
    /// The holder only moves the server out or reads its gauges.
    fn lock(&self) -> MutexGuard<'_, Option<FlightServer>> {
        self.server.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn stop(&self, py: Python<'_>, grace: Duration) -> PyResult<()> {
        let server = self.lock().take();
        match server {
            // Detached: requests in flight may need the GIL to finish (a
            // Python source, the sink).
            Some(server) => py.detach(|| server.shutdown(grace)).map_err(to_py),
            None => Ok(()),
        }
    }
}

#[pymethods]
impl PyFlightServer {
    /// Where clients connect: `grpc://HOST:PORT` (`grpc+tls://localhost:PORT`
    /// for a TLS server on loopback).
    ///
    /// ```python
    /// >>> from arrow_device import flight
    /// >>> with flight.serve({}, "grpc://127.0.0.1:0") as server:
    /// ...     server.location  # doctest: +ELLIPSIS
    /// 'grpc://127.0.0.1:...'
    ///
    /// ```
    #[getter]
    fn location(&self) -> &str {
        &self.location
    }

    /// The port it listens on (the one picked, for port 0).
    ///
    /// ```python
    /// >>> from arrow_device import flight
    /// >>> with flight.serve({}) as server:
    /// ...     server.port > 0 and server.location.endswith(f":{server.port}")
    /// True
    ///
    /// ```
    #[getter]
    fn port(&self) -> u16 {
        self.port
    }

    /// Requests being served now (0 once shut down).
    ///
    /// ```python
    /// >>> from arrow_device import flight
    /// >>> with flight.serve({}) as server:
    /// ...     server.active_requests
    /// 0
    ///
    /// ```
    #[getter]
    fn active_requests(&self) -> usize {
        self.lock()
            .as_ref()
            .map_or(0, FlightServer::active_requests)
    }

    /// Batches copied to the host for `do_get`s and not yet sent: what slow
    /// clients cost the server now (at most `depth` per `do_get`).
    ///
    /// ```python
    /// >>> from arrow_device import flight
    /// >>> with flight.serve({}) as server:
    /// ...     server.held_batches
    /// 0
    ///
    /// ```
    #[getter]
    fn held_batches(&self) -> usize {
        self.lock().as_ref().map_or(0, FlightServer::held_batches)
    }

    /// Whether `shutdown()` ran (also by leaving a `with` block).
    ///
    /// ```python
    /// >>> from arrow_device import flight
    /// >>> with flight.serve({}) as server:
    /// ...     server.closed
    /// False
    /// >>> server.closed
    /// True
    ///
    /// ```
    #[getter]
    fn closed(&self) -> bool {
        self.lock().is_none()
    }

    /// Stops accepting, lets the requests in flight finish for up to
    /// `grace` seconds, then ends them. A second call does nothing.
    ///
    /// ```python
    /// >>> from arrow_device import flight
    /// >>> server = flight.serve({})
    /// >>> server.shutdown(grace=1.0)
    /// >>> server.shutdown()
    /// >>> server.closed
    /// True
    ///
    /// ```
    #[pyo3(signature = (grace = 5.0))]
    fn shutdown(&self, py: Python<'_>, grace: f64) -> PyResult<()> {
        let grace = Duration::try_from_secs_f64(grace).map_err(|_| {
            PyValueError::new_err(format!("grace is seconds, 0 or more, got {grace}"))
        })?;
        guard(|| self.stop(py, grace))
    }

    fn __enter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    /// Shuts down (5 seconds' grace); exceptions go on.
    fn __exit__(
        &self,
        py: Python<'_>,
        _exc_type: Option<&Bound<'_, PyAny>>,
        _exc_value: Option<&Bound<'_, PyAny>>,
        _traceback: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        guard(|| self.stop(py, Duration::from_secs(5)))?;
        Ok(false)
    }

    fn __repr__(&self) -> String {
        let state = if self.lock().is_some() {
            "serving"
        } else {
            "shut down"
        };
        format!("FlightServer({}, {state})", self.location)
    }
}

/// Adds the classes, the exception and the functions to the module
/// (`arrow_device.flight` re-exports them under their short names).
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyFlightServer>()?;
    m.add_class::<PyFlightInfo>()?;
    m.add("FlightError", m.py().get_type::<FlightError>())?;
    m.add_function(wrap_pyfunction!(fetch, m)?)?;
    m.add_function(wrap_pyfunction!(put, m)?)?;
    m.add_function(wrap_pyfunction!(serve, m)?)?;
    m.add_function(wrap_pyfunction!(list_flights, m)?)?;
    Ok(())
}

"""Type stubs of the native module (re-exported by ``arrow_device``)."""

import os
from types import TracebackType
from typing import (
    Any,
    Callable,
    ClassVar,
    Dict,
    Iterable,
    Iterator,
    List,
    Literal,
    Optional,
    Protocol,
    Tuple,
    Type,
    Union,
    final,
)

from ._types import DeviceType

# The native module's names, public and private (PyO3 lists each class and
# function it adds).
__all__ = [
    "Device",
    "DeviceArray",
    "DeviceStream",
    "CudaArrayMask",
    "array",
    "stream",
    "cpu",
    "emulated",
    "devices",
    "cuda",
    "cuda_host",
    "cuda_managed",
    "_device",
    "ShareHandle",
    "SharedArray",
    "open_shared",
    "SharedStream",
    "open_shared_stream",
    "FlightServer",
    "FlightInfo",
    "FlightError",
    "flight_fetch",
    "flight_put",
    "flight_serve",
    "flight_list_flights",
    "_Watch",
    "_TakenTensor",
    "_conformance_check_array",
    "_conformance_check_stream",
    "_conformance_check_schema",
    "_conformance_watch",
    "_conformance_follow",
    "_conformance_has_destructor",
    "_conformance_capsule_name",
    "_conformance_device_type",
    "_conformance_schema_type",
    "_conformance_dlpack_info",
    "_conformance_dlpack_take",
    "_conformance_sample",
    "_conformance_compare",
    "_conformance_emulate",
    "_conformance_rules",
    "_conformance_table",
]

_Validate = Literal["none", "minimal", "default", "full"]

class _ArrowDeviceArrayExportable(Protocol):
    def __arrow_c_device_array__(
        self, requested_schema: Optional[object] = None, **kwargs: Any
    ) -> Tuple[object, object]: ...

class _ArrowArrayExportable(Protocol):
    def __arrow_c_array__(
        self, requested_schema: Optional[object] = None
    ) -> Tuple[object, object]: ...

class _CudaArrayInterfaceExportable(Protocol):
    @property
    def __cuda_array_interface__(self) -> Dict[str, Any]: ...

class _DLPackExportable(Protocol):
    def __dlpack__(self, **kwargs: Any) -> object: ...

class _ArrowStreamExportable(Protocol):
    def __arrow_c_stream__(self, requested_schema: Optional[object] = None) -> object: ...

class _ArrowDeviceStreamExportable(Protocol):
    def __arrow_c_device_stream__(
        self, requested_schema: Optional[object] = None, **kwargs: Any
    ) -> object: ...

_ArrayLike = Union[
    "DeviceArray",
    _ArrowDeviceArrayExportable,
    _ArrowArrayExportable,
    _CudaArrayInterfaceExportable,
    _DLPackExportable,
]

@final
class Device:
    """A device: its type and id (-1 for the CPU)."""

    @property
    def type(self) -> Union[DeviceType, int]:
        """The device type; a plain ``int`` for a type outside ``DeviceType``."""
    @property
    def id(self) -> int: ...
    def __eq__(self, other: object, /) -> bool: ...
    def __hash__(self) -> int: ...

@final
class DeviceArray:
    """An Arrow array on a device; record batches are struct arrays."""

    @property
    def device(self) -> Device: ...
    @property
    def type(self) -> str:
        """The Arrow data type, as text."""
    @property
    def null_count(self) -> Optional[int]: ...
    @property
    def offset(self) -> int: ...
    def __len__(self) -> int: ...
    def slice(self, offset: int, length: int) -> "DeviceArray":
        """A zero-copy slice of ``length`` values from ``offset``;
        IndexError past the end."""
    def to(self, device: Device) -> "DeviceArray":
        """The array on ``device``, copied if it is elsewhere."""
    def __arrow_c_device_array__(
        self, requested_schema: Optional[object] = None, **kwargs: Any
    ) -> Tuple[object, object]: ...
    def __arrow_c_array__(
        self, requested_schema: Optional[object] = None
    ) -> Tuple[object, object]: ...
    def __arrow_c_schema__(self) -> object: ...
    def __dlpack__(
        self,
        *,
        stream: Optional[int] = None,
        max_version: Optional[Tuple[int, int]] = None,
        dl_device: Optional[Tuple[int, int]] = None,
        copy: Optional[bool] = None,
    ) -> object: ...
    def __dlpack_device__(self) -> Tuple[int, int]: ...
    # DLPack 1.3's C exchange table, a PyCapsule named "dlpack_exchange_api",
    # under the name of dlpack.h and that of an older draft.
    __dlpack_c_exchange_api__: ClassVar[object]
    __c_dlpack_exchange_api__: ClassVar[object]
    def share(self) -> "SharedArray":
        """Shares the array with the processes of this machine (Linux; else
        NotImplementedError): open, the SharedArray's handle opens it there
        with ``open_shared``, zero-copy."""
    @property
    def __cuda_array_interface__(self) -> Dict[str, Any]:
        """Version 3 dict for CUDA / CUDA_MANAGED arrays: `stream` None or a
        stream ordered after the array's event (never 0), `mask` a
        CudaArrayMask when there are nulls; AttributeError otherwise."""

@final
class CudaArrayMask:
    """The `mask` of an exported `__cuda_array_interface__`: one byte per
    value on the GPU (1 valid, 0 null), made from the validity bitmap."""

    @property
    def __cuda_array_interface__(self) -> Dict[str, Any]:
        """Version 3 dict, typestr `|b1`."""
    def __len__(self) -> int: ...

@final
class DeviceStream:
    """A stream of DeviceArrays, read once."""

    @property
    def device_type(self) -> Union[DeviceType, int]: ...
    @property
    def type(self) -> str: ...
    def __iter__(self) -> Iterator[DeviceArray]: ...
    def __next__(self) -> DeviceArray: ...
    def __arrow_c_device_stream__(
        self, requested_schema: Optional[object] = None, **kwargs: Any
    ) -> object: ...
    def __arrow_c_stream__(self, requested_schema: Optional[object] = None) -> object: ...
    def __arrow_c_schema__(self) -> object: ...
    def share(self, depth: int = 2) -> "SharedStream":
        """Shares the rest of the stream (handed on) with one process of this
        machine, reading at most ``depth`` batches ahead of it (Linux; else
        NotImplementedError)."""

@final
class ShareHandle:
    """A share's handle and nothing else (unpickling a SharedArray or
    SharedStream gives one): it opens while the exporter keeps the share
    open, and keeps nothing alive itself."""

    def __new__(cls, handle: bytes) -> "ShareHandle": ...
    @property
    def handle(self) -> bytes: ...
    def __eq__(self, other: object, /) -> bool: ...
    def __hash__(self) -> int: ...
    def __reduce__(self) -> Tuple[Type["ShareHandle"], Tuple[bytes]]: ...

@final
class SharedArray:
    """An array this process shares: while open, its handle opens the array
    in any process of this machine. Pickles to a ShareHandle."""

    @property
    def handle(self) -> bytes:
        """ValueError once closed."""
    @property
    def closed(self) -> bool: ...
    def close(self) -> None:
        """No new opens; arrays already opened keep their memory."""
    def __enter__(self) -> "SharedArray": ...
    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc_value: Optional[BaseException],
        traceback: Optional[TracebackType],
    ) -> bool: ...
    def __reduce__(self) -> Tuple[Type[ShareHandle], Tuple[bytes]]: ...

@final
class SharedStream:
    """A stream this process shares with one opener. Pickles to a
    ShareHandle."""

    @property
    def handle(self) -> bytes:
        """ValueError once closed."""
    @property
    def closed(self) -> bool: ...
    def close(self) -> None: ...
    def __enter__(self) -> "SharedStream": ...
    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc_value: Optional[BaseException],
        traceback: Optional[TracebackType],
    ) -> bool: ...
    def __reduce__(self) -> Tuple[Type[ShareHandle], Tuple[bytes]]: ...

def open_shared(
    handle: Union[bytes, ShareHandle, SharedArray], *, validate: _Validate = "full"
) -> DeviceArray:
    """Opens a shared array over the exporter's memory (zero-copy), holding a
    lease on it while the array lives. Waits for the exporter (up to 10 s)
    without holding the GIL."""

def open_shared_stream(
    handle: Union[bytes, ShareHandle, SharedStream], *, validate: _Validate = "full"
) -> DeviceStream:
    """Opens a shared stream; each batch is read from the exporter without
    holding the GIL."""

def array(
    obj: _ArrayLike, *, device: Optional[Device] = None, validate: _Validate = "default"
) -> DeviceArray:
    """Imports ``obj`` (zero-copy), optionally placing it on ``device``."""

def stream(
    obj: Union[_ArrowDeviceStreamExportable, _ArrowStreamExportable, Any],
    *,
    validate: _Validate = "default",
) -> DeviceStream:
    """Imports a stream, or makes one of an iterable of array-likes."""

def cpu() -> Device: ...
def emulated(id: int = 0) -> Device: ...
def cuda(id: int = 0) -> Device:
    """CUDA device memory; RuntimeError when CUDA is not available."""
def cuda_host(id: int = 0) -> Device:
    """CUDA pinned host memory; RuntimeError when CUDA is not available."""
def cuda_managed(id: int = 0) -> Device:
    """CUDA managed memory; RuntimeError when CUDA is not available."""
def devices() -> list[Device]: ...

# --- Arrow Flight (re-exported by ``arrow_device.flight`` without the
# ``flight_`` prefix) ------------------------------------------------------

_Pem = Union[bytes, str, "os.PathLike[str]"]
_Source = Union[
    _ArrowDeviceStreamExportable,
    _ArrowStreamExportable,
    Callable[[], Union[_ArrowDeviceStreamExportable, _ArrowStreamExportable]],
    str,
    "os.PathLike[str]",
]

class FlightError(RuntimeError):
    """A Flight call failed at the peer or on the way: the message names the
    location, the call and the gRPC status code, e.g. ``do_get at
    grpc://127.0.0.1:8815: NOT_FOUND (5): no source named "x"; this server
    has ["a"]``."""

@final
class FlightInfo:
    """One flight of ``list_flights``: ``pyarrow.schema(info)`` reads its
    schema (``__arrow_c_schema__``)."""

    @property
    def name(self) -> Optional[str]:
        """The descriptor's path elements joined with ``/``; None for a
        command descriptor or none."""
    @property
    def descriptor(self) -> Union[List[str], bytes, None]:
        """A path as ``list[str]``, a command as ``bytes``."""
    @property
    def tickets(self) -> List[bytes]:
        """The ticket of each endpoint, for ``fetch``."""
    @property
    def total_records(self) -> int:
        """-1 when the server does not say."""
    @property
    def total_bytes(self) -> int:
        """-1 when the server does not say."""
    def __arrow_c_schema__(self) -> object:
        """ValueError when the server listed the flight without a schema."""

@final
class FlightServer:
    """A running Flight server (``serve``); a context manager that shuts it
    down on exit. Its last reference going stops it without waiting."""

    @property
    def location(self) -> str:
        """``grpc://HOST:PORT`` (``grpc+tls://localhost:PORT`` for TLS on
        loopback)."""
    @property
    def port(self) -> int:
        """The port it listens on (the one picked, for port 0)."""
    @property
    def active_requests(self) -> int:
        """Requests being served now (0 once shut down)."""
    @property
    def held_batches(self) -> int:
        """Batches copied to the host for ``do_get`` and not yet sent."""
    @property
    def closed(self) -> bool: ...
    def shutdown(self, grace: float = 5.0) -> None:
        """Stops accepting, lets requests in flight finish for up to
        ``grace`` seconds, then ends them; a second call does nothing."""
    def __enter__(self) -> "FlightServer": ...
    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc_value: Optional[BaseException],
        traceback: Optional[TracebackType],
    ) -> bool: ...

def flight_fetch(
    location: str,
    ticket: Union[str, bytes],
    device: Optional[Device] = None,
    *,
    token: Optional[str] = None,
    tls_root: Optional[_Pem] = None,
    prefetch: int = 2,
) -> DeviceStream:
    """``do_get`` of ``ticket`` at ``location`` (``grpc://``, ``grpc+tcp://``
    or ``grpc+tls://HOST:PORT``), each batch copied onto ``device`` (the CPU
    when None) as it arrives, its copy's event as its ``sync_event``, at most
    ``prefetch`` batches ahead of the reader. ``token`` is sent as
    ``authorization: Bearer <token>``; ``tls_root`` is the PEM (bytes, or a
    file's path) of the authority that signed the server's certificate
    (None: the system's roots). Connecting and reading run without the GIL.
    FlightError for the peer's or the network's errors, ValueError or
    TypeError for bad arguments."""

def flight_put(
    location: str,
    name: str,
    source: Union[_ArrowDeviceStreamExportable, _ArrowStreamExportable, Iterable[_ArrayLike], str, "os.PathLike[str]"],
    *,
    token: Optional[str] = None,
    tls_root: Optional[_Pem] = None,
) -> Dict[str, Union[int, bool]]:
    """``do_put`` of ``source`` (anything ``stream()`` takes, or the path of
    an Arrow IPC file) under the path descriptor ``[name]``; returns
    ``{"batches": n, "rows": n, "complete": bool}`` sent (``complete`` is
    False when the server answered before the whole source was sent: its sink
    stopped reading early). Device batches are copied to the host
    as they are sent. A source's error cancels the upload, so that the server
    never takes it for a whole one, and is raised here."""

def flight_list_flights(
    location: str, *, token: Optional[str] = None, tls_root: Optional[_Pem] = None
) -> List[FlightInfo]:
    """Every flight the server at ``location`` lists."""

def flight_serve(
    sources: Dict[str, _Source],
    location: Optional[str] = None,
    *,
    token: Optional[str] = None,
    tls: Optional[Tuple[_Pem, _Pem]] = None,
    sink: Optional[Callable[[Union[List[str], bytes], DeviceStream], None]] = None,
    sink_device: Optional[Device] = None,
    depth: int = 2,
) -> FlightServer:
    """Serves each source under its name (the ticket, and the one-element
    path descriptor) at ``location`` (default ``grpc://127.0.0.1:0``, or
    ``grpc+tls://127.0.0.1:0`` with ``tls``; port 0 picks a free port).

    A source is an object with ``__arrow_c_device_stream__`` or
    ``__arrow_c_stream__`` (or an iterable of arrays), read once: a second
    ``do_get`` gets FAILED_PRECONDITION; a zero-argument callable returning
    one, called for each ``do_get`` (wrap a table in a lambda to serve it
    again and again); or the path of an Arrow IPC file (file or streaming
    format), opened for each ``do_get``.

    ``sink(descriptor, stream)`` takes each upload (``do_put``): the
    descriptor's path as ``list[str]`` or its command as ``bytes``, and the
    batches landed on ``sink_device`` (the CPU when None) as a DeviceStream
    that is valid during the call only. Its exception is sent to the client.
    Without a sink, uploads are refused (UNIMPLEMENTED).

    ``token`` requires ``authorization: Bearer <token>`` on every call;
    ``tls`` is ``(certificate chain, private key)``, PEM bytes or paths.
    ``depth`` bounds the batches copied to the host ahead of each ``do_get``'s
    send (and landed ahead of the sink)."""

def _device(device_type: int, id: int) -> Device:
    """The device ``(device_type, id)``: how another extension module's
    ``Device`` becomes this package's."""

# --- the native half of ``arrow_device.conformance`` (private) -------------

# A check: (id, outcome, message, spec section, advisory).
_Row = Tuple[str, str, str, str, bool]

def _conformance_check_array(
    produce: Callable[[], object], device: bool, expect_device_type: Optional[int] = None
) -> List[_Row]: ...
def _conformance_check_stream(produce: Callable[[], object], device: bool) -> List[_Row]: ...
def _conformance_check_schema(produce: Callable[[], object]) -> List[_Row]: ...

@final
class _Watch:
    def problems(self) -> Optional[str]: ...
    def untouched(self) -> bool: ...
    def calls(self) -> List[Tuple[str, int, bool]]: ...

def _conformance_watch(capsule: object) -> _Watch: ...
def _conformance_follow(capsule: object) -> _Watch: ...
def _conformance_capsule_name(obj: object) -> Optional[str]: ...
def _conformance_device_type(capsule: object) -> int: ...
def _conformance_has_destructor(capsule: object) -> bool: ...
def _conformance_schema_type(capsule: object) -> str: ...
def _conformance_dlpack_info(capsule: object) -> Dict[str, Any]: ...

@final
class _TakenTensor:
    def untouched(self) -> Optional[bool]: ...
    def delete(self) -> Optional[str]: ...

def _conformance_dlpack_take(capsule: object) -> _TakenTensor: ...
def _conformance_sample(
    device: Optional[Device] = None, start: int = 0, rows: int = 1000
) -> DeviceArray: ...
def _conformance_compare(expected: DeviceArray, found: List[DeviceArray]) -> Optional[str]: ...
def _conformance_emulate(strict: bool, delay_ms: int, *, delay_us: int = 0) -> Tuple[bool, int]: ...
def _conformance_rules() -> List[Tuple[str, str, str, bool]]: ...
def _conformance_table(subject: str, rows: List[Tuple[str, str, str]]) -> str: ...

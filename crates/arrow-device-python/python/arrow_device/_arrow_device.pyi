"""Type stubs of the native module (re-exported by ``arrow_device``)."""

from types import TracebackType
from typing import Any, Dict, Iterator, Literal, Optional, Protocol, Tuple, Type, Union

from ._types import DeviceType

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

ArrayLike = Union[
    "DeviceArray",
    _ArrowDeviceArrayExportable,
    _ArrowArrayExportable,
    _CudaArrayInterfaceExportable,
    _DLPackExportable,
]

class Device:
    """A device: its type and id (-1 for the CPU)."""

    @property
    def type(self) -> Union[DeviceType, int]:
        """The device type; a plain ``int`` for a type outside ``DeviceType``."""
    @property
    def id(self) -> int: ...
    def __eq__(self, other: object) -> bool: ...
    def __hash__(self) -> int: ...

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
    def share(self) -> "SharedArray":
        """Shares the array with the processes of this machine (Linux; else
        NotImplementedError): open, the SharedArray's handle opens it there
        with ``open_shared``, zero-copy."""
    @property
    def __cuda_array_interface__(self) -> Dict[str, Any]:
        """Version 3 dict for CUDA / CUDA_MANAGED arrays: `stream` None or a
        stream ordered after the array's event (never 0), `mask` a
        CudaArrayMask when there are nulls; AttributeError otherwise."""

class CudaArrayMask:
    """The `mask` of an exported `__cuda_array_interface__`: one byte per
    value on the GPU (1 valid, 0 null), made from the validity bitmap."""

    @property
    def __cuda_array_interface__(self) -> Dict[str, Any]:
        """Version 3 dict, typestr `|b1`."""
    def __len__(self) -> int: ...

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

class ShareHandle:
    """A share's handle and nothing else (unpickling a SharedArray or
    SharedStream gives one): it opens while the exporter keeps the share
    open, and keeps nothing alive itself."""

    def __init__(self, handle: bytes) -> None: ...
    @property
    def handle(self) -> bytes: ...
    def __eq__(self, other: object) -> bool: ...
    def __hash__(self) -> int: ...
    def __reduce__(self) -> Tuple[Type["ShareHandle"], Tuple[bytes]]: ...

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
    obj: ArrayLike, *, device: Optional[Device] = None, validate: _Validate = "default"
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

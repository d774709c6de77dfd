"""`arrow_device`'s CUDA paths that need no CuPy or PyTorch, run against the
CUDA driver stand-in (crates/cuda-standin: `libcuda.so` built by
`scripts/cuda-standin.sh`, two GPUs by default, device memory the host
cannot read, delayed streams that leave poison bytes in pending
destinations, and accounting of every live object).

    LD_LIBRARY_PATH=$(bash scripts/cuda-standin.sh) \\
        ARROW_DEVICE_REQUIRE_STANDIN=1 python -m pytest -q tests/test_cuda_standin.py

The module is skipped when `libcuda.so` cannot be loaded or is not the
stand-in (a real driver, or none), unless ARROW_DEVICE_REQUIRE_STANDIN=1,
which CI sets: then it fails, so that a skip cannot hide the suite.

The other side of every exchange (a CUDA Array Interface or DLPack producer,
a consumer reading through a stream) is played by `Producer`: ctypes calls
into the same `libcuda.so`, each CUresult checked. Work that must still be
pending when the package looks at it sits behind a *gate*: a host function
(`cuLaunchHostFunc`) that sleeps GATE_SECONDS on the producer's stream, so
that everything queued after it is pending, deterministically, and the
destinations of queued copies and memsets still hold the stand-in's poison
bytes (0xDB). A missing wait then reads poison instead of the values.

After every test (the autouse `no_leaks` fixture), once queued work has
drained, the stand-in must report no new violation and as many live
allocations, streams, events, modules and retained contexts as before the
test. What the package keeps for the process (each GPU's retained primary
context, one interface stream per CUDA and CUDA_MANAGED device, the kernel
module of each GPU) is created by a warm-up first, so it is in the baseline.

Failures the package must survive are injected with `cuStandinInjectFault`;
those whose error path might free memory under queued work (the stand-in
then aborts the process) run in a subprocess.
"""

import contextlib
import ctypes
import os
import re
import subprocess
import sys
import textwrap
import time
import weakref
from types import SimpleNamespace

import numpy as np
import pyarrow as pa
import pytest

import arrow_device as ad
from arrow_device import DeviceType

import hostile_structs as h
from checks import assert_batch_equal, host_values, raises_cleanly, read_golden, settle

REQUIRE_STANDIN = os.environ.get("ARROW_DEVICE_REQUIRE_STANDIN") == "1"


def _load_standin():
    """The stand-in's library handle, or `(None, why not)`."""
    try:
        lib = ctypes.CDLL("libcuda.so")
    except OSError as error:
        return None, f"ctypes.CDLL('libcuda.so') failed ({error}): the CUDA driver stand-in is not on LD_LIBRARY_PATH"
    if not hasattr(lib, "cuStandinCounts"):
        return None, "libcuda.so has no cuStandinCounts: it is a real CUDA driver, not the stand-in"
    return lib, None


_LIB, _WHY_NOT = _load_standin()
if _LIB is None:
    if REQUIRE_STANDIN:
        pytest.fail(
            f"ARROW_DEVICE_REQUIRE_STANDIN=1, but {_WHY_NOT}; put the directory printed by "
            "`bash scripts/cuda-standin.sh` on LD_LIBRARY_PATH",
            pytrace=False,
        )
    pytest.skip(_WHY_NOT, allow_module_level=True)


# --- constants ----------------------------------------------------------------------

GPUS = (0, 1)  # the stand-in's default CUDA_STANDIN_DEVICES=2
# How long a gate holds a producer stream: everything queued after it is
# pending at least this long.
GATE_SECONDS = 0.4
# The stand-in's poison byte in the destination of a pending copy or memset.
POISON = 0xDB
# The bounded wait for queued work to drain (and for releases handed to the
# package's reaper thread to happen).
DRAIN_SECONDS = 15.0

CUDA_SUCCESS = 0
CUDA_ERROR_INVALID_VALUE = 1
CUDA_ERROR_OUT_OF_MEMORY = 2
CUDA_ERROR_INVALID_CONTEXT = 201
CUDA_ERROR_INVALID_HANDLE = 400
CUDA_ERROR_LAUNCH_FAILED = 719
CUDA_ERROR_UNKNOWN = 999
CODE_NAMES = {
    CUDA_ERROR_INVALID_VALUE: "CUDA_ERROR_INVALID_VALUE",
    CUDA_ERROR_OUT_OF_MEMORY: "CUDA_ERROR_OUT_OF_MEMORY",
    CUDA_ERROR_INVALID_HANDLE: "CUDA_ERROR_INVALID_HANDLE",
    CUDA_ERROR_LAUNCH_FAILED: "CUDA_ERROR_LAUNCH_FAILED",
    CUDA_ERROR_UNKNOWN: "CUDA_ERROR_UNKNOWN",
}

CU_STREAM_DEFAULT = 0
CU_STREAM_NON_BLOCKING = 1
CU_STREAM_LEGACY = 1
CU_STREAM_PER_THREAD = 2
CU_EVENT_DISABLE_TIMING = 2
CU_MEMHOSTALLOC_PORTABLE = 1
CU_MEM_ATTACH_GLOBAL = 1
CU_MEMORYTYPE_HOST = 1
CU_MEMORYTYPE_DEVICE = 2
CU_POINTER_ATTRIBUTE_MEMORY_TYPE = 2
CU_POINTER_ATTRIBUTE_IS_MANAGED = 8
CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9
CU_POINTER_ATTRIBUTE_RANGE_START_ADDR = 11
CU_POINTER_ATTRIBUTE_RANGE_SIZE = 12

# DLPack (dlpack.h): device types are Arrow's; dtype codes.
KDL_CUDA = 2
KDL_CUDA_HOST = 3
KDL_CUDA_MANAGED = 13
KDL_INT, KDL_UINT, KDL_FLOAT = 0, 1, 2
DLPACK_FLAG_BITMASK_READ_ONLY = 1

KINDS = {
    "cuda": (ad.cuda, DeviceType.CUDA),
    "cuda_host": (ad.cuda_host, DeviceType.CUDA_HOST),
    "cuda_managed": (ad.cuda_managed, DeviceType.CUDA_MANAGED),
}
# Memory the CUDA Array Interface describes.
CAI_KINDS = ["cuda", "cuda_managed"]

# (pyarrow type, numpy dtype, CAI typestr, DLPack (code, bits)).
NUMERIC = [
    (pa.int8(), np.int8, "|i1", (KDL_INT, 8)),
    (pa.int16(), np.int16, "<i2", (KDL_INT, 16)),
    (pa.int32(), np.int32, "<i4", (KDL_INT, 32)),
    (pa.int64(), np.int64, "<i8", (KDL_INT, 64)),
    (pa.uint8(), np.uint8, "|u1", (KDL_UINT, 8)),
    (pa.uint16(), np.uint16, "<u2", (KDL_UINT, 16)),
    (pa.uint32(), np.uint32, "<u4", (KDL_UINT, 32)),
    (pa.uint64(), np.uint64, "<u8", (KDL_UINT, 64)),
    (pa.float16(), np.float16, "<f2", (KDL_FLOAT, 16)),
    (pa.float32(), np.float32, "<f4", (KDL_FLOAT, 32)),
    (pa.float64(), np.float64, "<f8", (KDL_FLOAT, 64)),
]
NUMERIC_IDS = [np.dtype(dtype).name for _, dtype, _, _ in NUMERIC]


# --- the stand-in through ctypes --------------------------------------------------------


class CuStandinCounts(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_ulonglong)
        for name in (
            "allocations",
            "allocated_bytes",
            "streams",
            "events",
            "modules",
            "retained_contexts",
            "pending_operations",
            "violations",
        )
    ]

    def as_dict(self):
        return {name: getattr(self, name) for name, _ in self._fields_}


_P = ctypes.c_void_p
_U64 = ctypes.c_uint64
_INT = ctypes.c_int
_UINT = ctypes.c_uint
_SIZE = ctypes.c_size_t

# Entry point: (argument types), all returning CUresult. Private prototypes
# (CFUNCTYPE: the GIL is released during the call), so nothing shared with
# other users of ctypes changes.
_SIGNATURES = {
    "cuInit": [_UINT],
    "cuGetErrorName": [_INT, ctypes.POINTER(ctypes.c_char_p)],
    "cuDeviceGetCount": [ctypes.POINTER(_INT)],
    "cuDeviceGet": [ctypes.POINTER(_INT), _INT],
    "cuDevicePrimaryCtxRetain": [ctypes.POINTER(_P), _INT],
    "cuDevicePrimaryCtxRelease_v2": [_INT],
    "cuCtxPushCurrent_v2": [_P],
    "cuCtxPopCurrent_v2": [ctypes.POINTER(_P)],
    "cuCtxGetCurrent": [ctypes.POINTER(_P)],
    "cuMemAlloc_v2": [ctypes.POINTER(_U64), _SIZE],
    "cuMemAllocManaged": [ctypes.POINTER(_U64), _SIZE, _UINT],
    "cuMemHostAlloc": [ctypes.POINTER(_P), _SIZE, _UINT],
    "cuMemFree_v2": [_U64],
    "cuMemFreeHost": [_P],
    "cuMemcpyHtoD_v2": [_U64, _P, _SIZE],
    "cuMemcpyDtoH_v2": [_P, _U64, _SIZE],
    "cuMemcpyHtoDAsync_v2": [_U64, _P, _SIZE, _P],
    "cuMemcpyDtoHAsync_v2": [_P, _U64, _SIZE, _P],
    "cuMemsetD8Async": [_U64, ctypes.c_ubyte, _SIZE, _P],
    "cuStreamCreate": [ctypes.POINTER(_P), _UINT],
    "cuStreamDestroy_v2": [_P],
    "cuStreamSynchronize": [_P],
    "cuStreamWaitEvent": [_P, _P, _UINT],
    "cuEventCreate": [ctypes.POINTER(_P), _UINT],
    "cuEventRecord": [_P, _P],
    "cuEventDestroy_v2": [_P],
    "cuLaunchHostFunc": [_P, _P, _P],
    "cuPointerGetAttributes": [_UINT, ctypes.POINTER(_INT), ctypes.POINTER(_P), _U64],
    "cuStandinCounts": [ctypes.POINTER(CuStandinCounts)],
    "cuStandinInjectFault": [ctypes.c_char_p, _UINT, _INT],
    "cuStandinClearFaults": [],
    "cuStandinLastViolation": [ctypes.c_char_p, _SIZE],
}


class _Driver:
    """The entry points above as attributes (`drv.cuInit(0)`)."""

    def __init__(self, lib):
        for name, argtypes in _SIGNATURES.items():
            setattr(self, name, ctypes.CFUNCTYPE(_INT, *argtypes)((name, lib)))
        self.cuStandinCalls = ctypes.CFUNCTYPE(ctypes.c_ulonglong, ctypes.c_char_p)(("cuStandinCalls", lib))


DRV = _Driver(_LIB)


def error_name(code):
    name = ctypes.c_char_p()
    if DRV.cuGetErrorName(code, ctypes.byref(name)) == CUDA_SUCCESS and name.value:
        return name.value.decode()
    return f"CUresult {code}"


def check(code, what):
    """Every CUresult of the producer side is checked: a failure fails the
    test, naming the call (these are test bugs or stand-in bugs, never the
    package's)."""
    if code != CUDA_SUCCESS:
        raise AssertionError(f"test producer: {what} returned {error_name(code)} ({code})")


class Standin:
    """The stand-in's control and accounting functions."""

    def counts(self):
        out = CuStandinCounts()
        check(DRV.cuStandinCounts(ctypes.byref(out)), "cuStandinCounts")
        return out.as_dict()

    def inject(self, entry, nth, code):
        check(DRV.cuStandinInjectFault(entry.encode(), nth, code), f"cuStandinInjectFault({entry}, {nth}, {code})")

    def clear_faults(self):
        check(DRV.cuStandinClearFaults(), "cuStandinClearFaults")

    def calls(self, entry):
        return DRV.cuStandinCalls(entry.encode())

    def last_violation(self):
        buffer = ctypes.create_string_buffer(4096)
        if DRV.cuStandinLastViolation(buffer, len(buffer)) != CUDA_SUCCESS:
            return None
        return buffer.value.decode(errors="replace")


STANDIN = Standin()

# libc's usleep as a CUDA host function: `void fn(void *userData)` receives
# userData in the first integer argument register (x86-64 and AArch64 alike)
# and usleep(useconds_t) reads its low 32 bits, so userData = microseconds.
# It calls no CUDA (the stand-in would count that as a violation) and needs
# no GIL, so a gate can never deadlock with a thread that blocks on the
# stream while holding the GIL.
_LIBC = ctypes.CDLL(None)
_USLEEP = ctypes.cast(_LIBC.usleep, ctypes.c_void_p).value


class Producer:
    """The other side of the protocols, on GPU `ordinal`: retains the GPU's
    primary context (the one the package uses) and pushes it around each
    call. Tracks what it allocates and creates, and frees it all in
    `close`, after its streams have drained."""

    def __init__(self, ordinal=0):
        self.ordinal = ordinal
        check(DRV.cuInit(0), "cuInit")
        device = _INT()
        check(DRV.cuDeviceGet(ctypes.byref(device), ordinal), f"cuDeviceGet({ordinal})")
        self.device = device.value
        context = _P()
        check(DRV.cuDevicePrimaryCtxRetain(ctypes.byref(context), self.device), "cuDevicePrimaryCtxRetain")
        self.context = context.value
        self.memory = {}  # pointer -> "device" | "managed" | "host"
        self.streams = []
        self.host_sources = []  # pageable sources of queued copies
        self.closed = False

    @contextlib.contextmanager
    def current(self):
        check(DRV.cuCtxPushCurrent_v2(self.context), "cuCtxPushCurrent_v2")
        try:
            yield
        finally:
            popped = _P()
            check(DRV.cuCtxPopCurrent_v2(ctypes.byref(popped)), "cuCtxPopCurrent_v2")
            assert popped.value == self.context, "the context stack was changed under the producer"

    def call(self, name, *args):
        with self.current():
            check(getattr(DRV, name)(*args), name)

    # memory

    def alloc(self, size):
        pointer = _U64()
        self.call("cuMemAlloc_v2", ctypes.byref(pointer), size)
        self.memory[pointer.value] = "device"
        return pointer.value

    def alloc_managed(self, size):
        pointer = _U64()
        self.call("cuMemAllocManaged", ctypes.byref(pointer), size, CU_MEM_ATTACH_GLOBAL)
        self.memory[pointer.value] = "managed"
        return pointer.value

    def alloc_host(self, size):
        pointer = _P()
        self.call("cuMemHostAlloc", ctypes.byref(pointer), size, CU_MEMHOSTALLOC_PORTABLE)
        self.memory[pointer.value] = "host"
        return pointer.value

    def upload(self, data, kind="device"):
        """New memory of `kind` holding `data` (bytes or a numpy array)."""
        data = bytes(data) if not isinstance(data, np.ndarray) else data.tobytes()
        pointer = {"device": self.alloc, "managed": self.alloc_managed, "host": self.alloc_host}[kind](max(len(data), 1))
        self.write(pointer, data)
        return pointer

    def write(self, pointer, data):
        source = ctypes.create_string_buffer(bytes(data), len(data))
        self.call("cuMemcpyHtoD_v2", pointer, source, len(data))

    def read(self, pointer, size):
        """`size` bytes at `pointer`, copied synchronously on the legacy
        default stream (which does not wait for non-blocking streams)."""
        if size == 0:
            return b""
        out = ctypes.create_string_buffer(size)
        self.call("cuMemcpyDtoH_v2", out, pointer, size)
        return out.raw

    def write_async(self, pointer, data, stream):
        source = ctypes.create_string_buffer(bytes(data), len(data))
        self.host_sources.append(source)  # read when the copy runs
        self.call("cuMemcpyHtoDAsync_v2", pointer, source, len(data), stream)

    def memset_async(self, pointer, value, size, stream):
        self.call("cuMemsetD8Async", pointer, value, size, stream)

    def read_async(self, pointer, size, stream):
        """Queues a copy of `size` bytes to the host on `stream`; the buffer
        is valid once the stream is synchronized."""
        out = ctypes.create_string_buffer(size)
        self.host_sources.append(out)
        self.call("cuMemcpyDtoHAsync_v2", out, pointer, size, stream)
        return out

    def free(self, pointer):
        kind = self.memory.pop(pointer)
        if kind == "host":
            self.call("cuMemFreeHost", pointer)
        else:
            self.call("cuMemFree_v2", pointer)

    # streams and events

    def stream(self, non_blocking=True):
        stream = _P()
        self.call("cuStreamCreate", ctypes.byref(stream), CU_STREAM_NON_BLOCKING if non_blocking else CU_STREAM_DEFAULT)
        self.streams.append(stream.value)
        return stream.value

    def gate(self, stream, seconds=GATE_SECONDS):
        """Holds `stream` for `seconds`: a host function sleeping on it."""
        self.call("cuLaunchHostFunc", stream, _USLEEP, int(seconds * 1_000_000))

    def gated_stream(self, non_blocking=True):
        stream = self.stream(non_blocking)
        self.gate(stream)
        return stream

    def synchronize(self, stream):
        self.call("cuStreamSynchronize", stream)

    def destroy_stream(self, stream):
        self.synchronize(stream)
        self.streams.remove(stream)
        self.call("cuStreamDestroy_v2", stream)

    def make_wait(self, waiter, on):
        """`waiter` waits for the work queued on `on` so far (an event
        recorded on `on`, destroyed at once: the wait keeps what it needs)."""
        event = _P()
        self.call("cuEventCreate", ctypes.byref(event), CU_EVENT_DISABLE_TIMING)
        self.call("cuEventRecord", event, on)
        self.call("cuStreamWaitEvent", waiter, event, 0)
        self.call("cuEventDestroy_v2", event)

    def pointer_attributes(self, pointer):
        """(memory type, is managed, device ordinal, range start, range size)
        of `pointer`, as the driver reports them (zeros for memory it does
        not know)."""
        memory_type = ctypes.c_uint(0)
        is_managed = ctypes.c_uint64(0)
        ordinal = ctypes.c_int(-7)
        start = ctypes.c_uint64(0)
        size = ctypes.c_size_t(0)
        attributes = (_INT * 5)(
            CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
            CU_POINTER_ATTRIBUTE_IS_MANAGED,
            CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
            CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
            CU_POINTER_ATTRIBUTE_RANGE_SIZE,
        )
        slots = (_P * 5)(*[ctypes.cast(ctypes.byref(v), _P) for v in (memory_type, is_managed, ordinal, start, size)])
        self.call("cuPointerGetAttributes", 5, attributes, slots, pointer)
        return memory_type.value, bool(is_managed.value), ordinal.value, start.value, size.value

    def close(self):
        if self.closed:
            return
        self.closed = True
        for stream in list(self.streams):
            self.destroy_stream(stream)
        self.host_sources.clear()
        settle()
        wait_for_drain()
        for pointer in list(self.memory):
            self.free(pointer)
        check(DRV.cuDevicePrimaryCtxRelease_v2(self.device), "cuDevicePrimaryCtxRelease_v2")


# --- helpers ------------------------------------------------------------------------------


def wait_for_drain(until=None, seconds=DRAIN_SECONDS):
    """Polls the stand-in until no operation is pending (and `until(counts)`
    holds), settling Python between polls; returns the last counts."""
    deadline = time.monotonic() + seconds
    while True:
        settle()
        counts = STANDIN.counts()
        if counts["pending_operations"] == 0 and (until is None or until(counts)):
            return counts
        if time.monotonic() > deadline:
            return counts
        time.sleep(0.01)


class Cai:
    """Exposes a `__cuda_array_interface__` dict (a fresh copy per read) and
    keeps `keep` alive."""

    def __init__(self, interface, *keep):
        self.interface = dict(interface)
        self.keep = keep

    @property
    def __cuda_array_interface__(self):
        return dict(self.interface)


def cai(pointer, length, typestr, stream=None, mask=None, version=3, **extra):
    interface = {
        "shape": (length,),
        "typestr": typestr,
        "data": (pointer, False),
        "version": version,
        "strides": None,
        "stream": stream,
    }
    if mask is not None:
        interface["mask"] = mask
    interface.update(extra)
    return interface


def odd_windows(num_rows):
    """(offset, length) windows starting mid-byte of validity bitmaps, and
    the empty tail."""
    windows = []
    if num_rows >= 3:
        windows.append((1, num_rows - 2))
    if num_rows > 3:
        windows.append((3, num_rows - 3))
    windows.append((num_rows, 0))
    return windows


def mapping_permissions(address):
    """The permissions (`r-xp`, `---s`, ...) of the mapping of this process
    that holds `address`, from /proc/self/maps; None when unmapped. Reads
    the kernel's table, never the address."""
    with open("/proc/self/maps") as maps:
        for line in maps:
            span, permissions = line.split()[:2]
            low, high = (int(x, 16) for x in span.split("-"))
            if low <= address < high:
                return permissions
    return None


def interface_bytes(producers, interface):
    """The bytes an exported interface describes, read as a CAI consumer
    does: synchronize on its `stream` (if any), then copy."""
    pointer = interface["data"][0]
    size = interface["shape"][0] * np.dtype(interface["typestr"]).itemsize
    if size == 0:
        return b""
    producer = producers(producers(0).pointer_attributes(pointer)[2])
    stream = interface.get("stream")
    if stream is not None:
        producer.synchronize(stream)
    return producer.read(pointer, size)


def assert_stream_entry(interface):
    assert "stream" in interface, interface
    stream = interface["stream"]
    assert stream is None or (type(stream) is int and stream > 2), interface


def pending_import(producer, values, typestr, kind="device"):
    """`values` (numpy) imported through the CUDA Array Interface from
    memory of `kind` whose contents are still being written on a gated
    producer stream named in `stream`: returns (array, stream, pointer)."""
    pointer = {"device": producer.alloc, "managed": producer.alloc_managed}[kind](values.nbytes)
    stream = producer.gated_stream()
    producer.write_async(pointer, values.tobytes(), stream)
    array = ad.array(Cai(cai(pointer, len(values), typestr, stream=stream), producer))
    return array, stream, pointer


# --- DLPack through ctypes ---------------------------------------------------------------


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]


class DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [
        ("version", DLPackVersion),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", ctypes.c_void_p),
        ("flags", ctypes.c_uint64),
        ("dl_tensor", DLTensor),
    ]


_PyCapsule_New = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p)(
    ("PyCapsule_New", ctypes.pythonapi)
)
_PyCapsule_GetPointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi)
)
_PyCapsule_GetName = ctypes.PYFUNCTYPE(ctypes.c_char_p, ctypes.py_object)(("PyCapsule_GetName", ctypes.pythonapi))
# Capsule names must outlive their capsules: module constants.
_DLTENSOR = b"dltensor"
_DLTENSOR_VERSIONED = b"dltensor_versioned"

# Tensors handed out and not yet deleted, by address; the addresses of
# deleted tensors (since a tensor was last handed out at that address).
_LIVE_TENSORS = {}
_DELETED_TENSORS = []


def _delete_tensor(address):
    _LIVE_TENSORS.pop(address, None)
    _DELETED_TENSORS.append(address)


_DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(_delete_tensor)


class DLPackProducer:
    """A DLPack producer over `length` values at `pointer` (memory of
    `producer`'s GPU): `__dlpack__` makes the consumer's stream wait for the
    work queued on `stream` (its own), as the standard asks, and hands out
    a ctypes-made tensor (versioned when asked and `versioned`) whose
    deleter records the call."""

    def __init__(self, producer, pointer, length, dtype, stream=None, versioned=True, device=None):
        self.producer = producer
        self.pointer = pointer
        self.length = length
        self.dtype = dtype  # (code, bits)
        self.stream = stream
        self.versioned = versioned
        self.device = device or (KDL_CUDA, producer.ordinal)
        self.calls = []
        self.handed_out = []

    def __dlpack_device__(self):
        return self.device

    def __dlpack__(self, stream=None, max_version=None, dl_device=None, copy=None):
        self.calls.append({"stream": stream, "max_version": max_version, "dl_device": dl_device, "copy": copy})
        if stream is not None and stream != -1 and self.stream is not None:
            self.producer.make_wait(stream, self.stream)
        shape = (ctypes.c_int64 * 1)(self.length)
        tensor = DLTensor(
            data=self.pointer,
            device=DLDevice(*self.device),
            ndim=1,
            dtype=DLDataType(self.dtype[0], self.dtype[1], 1),
            shape=ctypes.cast(shape, ctypes.POINTER(ctypes.c_int64)),
            strides=None,
            byte_offset=0,
        )
        deleter = ctypes.cast(_DELETER, ctypes.c_void_p).value
        if self.versioned and max_version is not None and max_version[0] >= 1:
            managed = DLManagedTensorVersioned(DLPackVersion(1, 1), None, deleter, DLPACK_FLAG_BITMASK_READ_ONLY, tensor)
            name = _DLTENSOR_VERSIONED
        else:
            managed = DLManagedTensor(tensor, None, deleter)
            name = _DLTENSOR
        address = ctypes.addressof(managed)
        # A deleted tensor's memory is reused for later ones: deletions
        # recorded at this address were of an earlier tensor.
        _DELETED_TENSORS[:] = [a for a in _DELETED_TENSORS if a != address]
        _LIVE_TENSORS[address] = (managed, shape, self)
        self.handed_out.append(address)
        return _PyCapsule_New(address, name, None)


def dlpack_struct(capsule):
    """The tensor inside one of our exported capsules, read in place (the
    capsule keeps owning it) and copied out: (name, tensor fields, version
    or None, flags or None)."""
    name = _PyCapsule_GetName(capsule).decode()
    address = _PyCapsule_GetPointer(capsule, name.encode())
    if name == "dltensor_versioned":
        managed = DLManagedTensorVersioned.from_address(address)
        version, flags = (managed.version.major, managed.version.minor), managed.flags
    else:
        managed = DLManagedTensor.from_address(address)
        version, flags = None, None
    t = managed.dl_tensor
    tensor = SimpleNamespace(
        data=t.data or 0,
        device=(t.device.device_type, t.device.device_id),
        ndim=t.ndim,
        dtype=(t.dtype.code, t.dtype.bits, t.dtype.lanes),
        shape=[t.shape[i] for i in range(t.ndim)],
        strides=None if not t.strides else [t.strides[i] for i in range(t.ndim)],
        byte_offset=t.byte_offset,
    )
    return name, tensor, version, flags


# --- fixtures --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def standin():
    return STANDIN


@pytest.fixture
def producers():
    """`producers(ordinal)`: the test's Producer on that GPU (one each),
    closed after the test."""
    made = {}

    def get(ordinal=0):
        if ordinal not in made:
            made[ordinal] = Producer(ordinal)
        return made[ordinal]

    yield get
    for producer in made.values():
        producer.close()


@pytest.fixture
def producer(producers):
    return producers(0)


def _warm_up():
    """Creates, once, what the package keeps for the process: every CUDA
    device (each GPU's primary context, retained once), the interface
    stream of each CUDA and CUDA_MANAGED device (made when an export must
    name a stream for pending work), and each GPU's kernel module (the
    mask of an array with nulls)."""
    ad.devices()
    for ordinal in GPUS:
        producer = Producer(ordinal)
        try:
            for kind in ("device", "managed"):
                array, stream, _ = pending_import(producer, np.arange(4, dtype=np.int32), "<i4", kind)
                interface = array.__cuda_array_interface__
                assert isinstance(interface["stream"], int) and interface["stream"] > 2, interface
                producer.synchronize(stream)
                del array
            masked = ad.array(pa.array([1, None, 3], pa.int32()), device=ad.cuda(ordinal))
            mask = masked.__cuda_array_interface__["mask"]
            del mask, masked
        finally:
            producer.close()
    return wait_for_drain()


@pytest.fixture(scope="module")
def warm():
    return _warm_up()


@pytest.fixture(autouse=True)
def no_leaks(warm):
    """After the test, once queued work has drained: no new violation, and
    no more live allocations, streams, events, modules and retained
    contexts than before it; faults not triggered are cleared."""
    before = wait_for_drain()
    assert before["pending_operations"] == 0, f"work still pending before the test: {before}"
    yield
    STANDIN.clear_faults()
    fields = ("allocations", "allocated_bytes", "streams", "events", "modules", "retained_contexts")
    after = wait_for_drain(until=lambda c: all(c[f] <= before[f] for f in fields))
    assert after["violations"] == before["violations"], (
        f"the stand-in counted {after['violations'] - before['violations']} violation(s); "
        f"the last: {STANDIN.last_violation()}"
    )
    assert after["pending_operations"] == 0, f"work still pending {DRAIN_SECONDS} s after the test: {after}"
    # Only growth is this test's: fewer objects than before means that
    # something an earlier (failed) test kept has been released.
    grown = {f: (before[f], after[f]) for f in fields if after[f] > before[f]}
    assert not grown, f"live objects (before, after) differ after the test: {grown}"


# --- the stand-in is what the package drives ----------------------------------------------


def test_the_package_drives_the_standin_and_the_warm_up_cached_what_it_keeps(warm):
    assert STANDIN.calls("cuInit") >= 1
    assert STANDIN.calls("cuDevicePrimaryCtxRetain") >= len(GPUS)
    count = _INT()
    check(DRV.cuDeviceGetCount(ctypes.byref(count)), "cuDeviceGetCount")
    assert count.value == len(GPUS), "the suite expects the stand-in's default of 2 GPUs"
    # One retained primary context per GPU (the package retains each once,
    # for the process), one module of kernels per GPU, and nothing else live
    # but streams (the interface streams).
    assert warm["retained_contexts"] == len(GPUS), warm
    assert warm["modules"] == len(GPUS), warm
    assert warm["streams"] >= 2 * len(GPUS), warm
    assert (warm["allocations"], warm["events"], warm["pending_operations"]) == (0, 0, 0), warm
    assert warm["violations"] == 0, STANDIN.last_violation()


# --- devices ---------------------------------------------------------------------------


def test_devices_list_the_cpu_the_emulated_device_and_three_kinds_of_each_gpu():
    devices = ad.devices()
    assert devices[:2] == [ad.cpu(), ad.emulated(0)]
    listed = [(d.type, d.id) for d in devices[2:]]
    expected = [(t, gpu) for gpu in GPUS for t in (DeviceType.CUDA, DeviceType.CUDA_HOST, DeviceType.CUDA_MANAGED)]
    assert listed == expected


@pytest.mark.parametrize("gpu", GPUS)
@pytest.mark.parametrize("kind", list(KINDS))
def test_cuda_devices_have_their_type_id_and_repr(kind, gpu):
    make, device_type = KINDS[kind]
    device = make(gpu)
    assert device.type is device_type
    assert device.id == gpu
    assert repr(device) == f"Device({device_type.name}, {gpu})"
    assert device == make(gpu)
    assert hash(device) == hash(make(gpu))
    assert device in ad.devices()
    if gpu == 0:
        assert make() == device
    assert device != make(1 - gpu)
    others = [m(gpu) for name, (m, _) in KINDS.items() if name != kind]
    assert all(device != other for other in others)


@pytest.mark.parametrize("kind", list(KINDS))
def test_a_gpu_that_does_not_exist_raises_naming_it_and_the_count(kind):
    make = KINDS[kind][0]
    raises_cleanly(lambda: make(2), RuntimeError, "CUDA is not available", r"device 2\b", r"2 device\(s\), ordinals 0 to 1")
    raises_cleanly(lambda: make(999), RuntimeError, "999")
    raises_cleanly(lambda: make(-1), ValueError, "CUDA device ids are 0 or more, got -1")


# --- golden streams through every kind of CUDA memory, both GPUs --------------------------


def test_golden_batches_round_trip_through_every_cuda_kind_on_both_gpus(golden_path):
    _, batches = read_golden(golden_path)
    for batch in batches:
        for gpu in GPUS:
            for kind, (make, device_type) in KINDS.items():
                device = make(gpu)
                on_device = ad.array(batch).to(device)
                assert on_device.device == device, (kind, gpu)
                assert (on_device.device.type, on_device.device.id) == (device_type, gpu)
                assert len(on_device) == batch.num_rows
                back = on_device.to(ad.cpu())
                assert back.device == ad.cpu()
                assert_batch_equal(pa.record_batch(back), batch)


def test_golden_sliced_batches_round_trip_through_gpu_1(golden_path):
    _, batches = read_golden(golden_path)
    for batch in batches:
        for offset, length in odd_windows(batch.num_rows):
            sliced = batch.slice(offset, length)
            for make, _ in KINDS.values():
                on_device = ad.array(sliced, device=make(1))
                assert on_device.device == make(1)
                assert len(on_device) == length
                assert_batch_equal(pa.record_batch(on_device.to(ad.cpu())), sliced)


# Every kind to every other kind, across the GPUs: peer copies (CUDA to
# CUDA), staged copies (CUDA to managed) and host-side sources.
HOPS = [
    (ad.cuda, 0),
    (ad.cuda, 1),  # peer copy
    (ad.cuda_managed, 1),  # device -> managed: staged through the host
    (ad.cuda_host, 0),  # managed (host-accessible) -> pinned
    (ad.cuda, 0),
    (ad.cuda_managed, 0),
    (ad.cuda_host, 1),
    (ad.cuda, 1),
    (ad.cuda_host, 1),  # device -> pinned
    (ad.cuda_managed, 0),  # pinned -> managed of the other GPU
    (ad.cuda, 1),
    (ad.cuda, 0),  # peer copy back
]


def test_golden_batches_keep_their_values_across_kinds_and_gpus(golden_path):
    _, batches = read_golden(golden_path)
    for batch in batches:
        current = ad.array(batch)
        for hop, (make, gpu) in enumerate(HOPS):
            device = make(gpu)
            previous = current.device
            current = current.to(device)
            assert current.device == device, (hop, device)
            assert len(current) == batch.num_rows
            got = pa.record_batch(current.to(ad.cpu()))
            assert got.equals(batch, check_metadata=True), f"hop {hop}: {previous!r} -> {device!r}"
        assert_batch_equal(pa.record_batch(current.to(ad.cpu())), batch)


@pytest.mark.parametrize("kind", list(KINDS))
def test_to_the_device_it_is_on_is_the_same_array_and_array_with_device_copies(kind):
    make = KINDS[kind][0]
    values = pa.array([1, None, 3, 4], pa.int64())
    on_device = ad.array(values, device=make(1))
    assert on_device.device == make(1)
    assert host_values(on_device).equals(values)
    again = ad.array(on_device, device=ad.cpu())
    assert again.device == ad.cpu()
    assert pa.array(again).equals(values)


# --- CUDA Array Interface: export --------------------------------------------------------


@pytest.mark.parametrize("gpu", GPUS)
@pytest.mark.parametrize("kind", CAI_KINDS)
@pytest.mark.parametrize("pa_type, dtype, typestr, _dl", NUMERIC, ids=NUMERIC_IDS)
def test_cai_export_describes_the_values_where_they_are(producers, kind, gpu, pa_type, dtype, typestr, _dl):
    expected = (np.arange(-5, 45) % 100).astype(dtype)
    a = ad.array(pa.array(expected, pa_type)).to(KINDS[kind][0](gpu))
    interface = a.__cuda_array_interface__
    assert set(interface) == {"shape", "typestr", "data", "version", "strides", "stream"}, interface
    assert interface["version"] == 3
    assert interface["shape"] == (50,)
    assert interface["typestr"] == typestr
    assert interface["strides"] is None
    pointer, read_only = interface["data"]
    assert type(pointer) is int and pointer != 0
    assert read_only is True
    assert_stream_entry(interface)
    memory_type, managed, ordinal, start, size = producers(gpu).pointer_attributes(pointer)
    assert ordinal == gpu
    assert start <= pointer and pointer + expected.nbytes <= start + size
    if kind == "cuda":
        assert (memory_type, managed) == (CU_MEMORYTYPE_DEVICE, False)
    else:
        assert managed is True
    assert interface_bytes(producers, interface) == expected.tobytes()
    # The DLPack view of the same array points at the same values.
    assert a.__dlpack_device__() == ((KDL_CUDA, gpu) if kind == "cuda" else (KDL_CUDA_MANAGED, 0))


@pytest.mark.parametrize("gpu", GPUS)
def test_the_cai_pointer_of_device_memory_is_not_host_readable(producers, gpu):
    """Checked through the driver and the kernel's table of mappings: the
    pointer is never dereferenced (it would fault)."""
    a = ad.array(pa.array(np.arange(1000, dtype=np.int64))).to(ad.cuda(gpu))
    pointer = a.__cuda_array_interface__["data"][0]
    memory_type, managed, ordinal, _, _ = producers(gpu).pointer_attributes(pointer)
    assert (memory_type, managed, ordinal) == (CU_MEMORYTYPE_DEVICE, False, gpu)
    permissions = mapping_permissions(pointer)
    assert permissions is not None, "the device pointer is not mapped at all"
    assert permissions[:3] == "---", f"device memory mapped {permissions}: the host could read it"
    # Managed memory, by contrast, is host-accessible.
    managed_array = ad.array(pa.array(np.arange(10, dtype=np.int64))).to(ad.cuda_managed(gpu))
    managed_pointer = managed_array.__cuda_array_interface__["data"][0]
    assert mapping_permissions(managed_pointer)[:2] == "rw"


def test_cai_export_names_a_stream_while_work_is_pending_and_none_after(producers):
    producer = producers(0)
    values = np.arange(1000, dtype=np.int32)
    a, stream, pointer = pending_import(producer, values, "<i4")
    interface = a.__cuda_array_interface__
    named = interface["stream"]
    assert type(named) is int and named > 2, interface
    assert interface["data"][0] == pointer
    # A copy queued after the pending import (to GPU 1: `.to` the device an
    # array is on returns it as it is) is pending too.
    assert a.to(ad.cuda(0)) is not None and a.to(ad.cuda(0)).__cuda_array_interface__["data"][0] == pointer
    copy = a.to(ad.cuda(1))
    copy_interface = copy.__cuda_array_interface__
    assert type(copy_interface["stream"]) is int and copy_interface["stream"] > 2, copy_interface
    assert copy_interface["stream"] != named  # GPU 1's interface stream
    assert producer.pointer_attributes(copy_interface["data"][0])[2] == 1
    # As a CAI consumer does: synchronize on the named stream, then read.
    assert interface_bytes(producers, copy_interface) == values.tobytes()
    assert interface_bytes(producers, interface) == values.tobytes()
    producer.synchronize(stream)
    wait_for_drain()
    assert a.__cuda_array_interface__["stream"] is None
    assert copy.__cuda_array_interface__["stream"] is None


def test_a_consumer_that_ignores_the_stream_entry_reads_poison(producers):
    """The stand-in makes the stream entry matter: the destination of the
    pending copy holds poison until it runs (what the tests above would
    read if the package named no stream)."""
    values = np.arange(256, dtype=np.int32)
    a, stream, _ = pending_import(producers(0), values, "<i4")
    copy = a.to(ad.cuda(1))
    interface = copy.__cuda_array_interface__
    assert interface["stream"] is not None
    reader = producers(1)
    raw = reader.read(interface["data"][0], values.nbytes)
    assert raw == bytes([POISON]) * values.nbytes
    reader.synchronize(interface["stream"])
    assert reader.read(interface["data"][0], values.nbytes) == values.tobytes()


MASK_CASES = [
    ([1, None, 3], 0, 3),
    ([None, 1, None, 4, 5, None, 7, 8, 9, None], 3, 7),
    ([None if i % 3 == 0 or i % 7 == 0 else i for i in range(40)], 13, 22),
    ([None if i % 5 == 1 else i for i in range(64)], 9, 55),
    ([None if i % 4 == 0 else i for i in range(3000)], 5, 2990),
]


@pytest.mark.parametrize("gpu", GPUS)
@pytest.mark.parametrize("kind", CAI_KINDS)
@pytest.mark.parametrize("values, offset, length", MASK_CASES, ids=["3", "offset-3", "offset-13", "offset-9", "3000"])
def test_cai_export_of_nulls_has_a_mask_object_with_the_right_bytes(producers, kind, gpu, values, offset, length):
    source = pa.array(values, pa.int64()).slice(offset, length)
    expected = source.to_pylist()
    a = ad.array(source).to(KINDS[kind][0](gpu))
    assert a.null_count == source.null_count
    interface = a.__cuda_array_interface__
    assert interface["shape"] == (length,)
    assert interface["typestr"] == "<i8"
    assert_stream_entry(interface)
    mask = interface["mask"]
    assert type(mask).__name__ == "CudaArrayMask"
    assert len(mask) == length
    mask_interface = mask.__cuda_array_interface__
    assert mask_interface["typestr"] == "|b1"
    assert mask_interface["shape"] == (length,)
    assert mask_interface["version"] == 3
    assert mask_interface["strides"] is None
    assert_stream_entry(mask_interface)
    assert producers(gpu).pointer_attributes(mask_interface["data"][0])[2] == gpu
    assert list(interface_bytes(producers, mask_interface)) == [0 if v is None else 1 for v in expected]
    data = np.frombuffer(interface_bytes(producers, interface), dtype=np.int64)
    assert [int(d) for d, e in zip(data, expected) if e is not None] == [e for e in expected if e is not None]


@pytest.mark.parametrize(
    "values",
    [
        pa.array([True, False, True]),
        pa.array(["a", "b"]),
        pa.array([1, 2], pa.timestamp("us", tz="UTC")),
        pa.array([1, 2], pa.int32()).dictionary_encode(),
        pa.array([[1], [2, 3]]),
    ],
    ids=["bool", "string", "timestamp-tz", "dictionary", "list"],
)
def test_arrays_the_interface_cannot_describe_have_no_cuda_array_interface(values):
    a = ad.array(values).to(ad.cuda(1))
    assert not hasattr(a, "__cuda_array_interface__")
    raises_cleanly(lambda: a.__cuda_array_interface__, AttributeError, "__cuda_array_interface__")


def test_pinned_host_arrays_have_no_cuda_array_interface():
    a = ad.array(pa.array([1, 2, 3], pa.int32())).to(ad.cuda_host(1))
    assert not hasattr(a, "__cuda_array_interface__")
    raises_cleanly(lambda: a.__cuda_array_interface__, AttributeError, "CUDA_HOST")


def test_an_empty_cuda_array_describes_pointer_0():
    a = ad.array(pa.array([], pa.int32())).to(ad.cuda())
    interface = a.__cuda_array_interface__
    assert interface["shape"] == (0,)
    assert interface["data"] == (0, True)
    assert interface["stream"] is None or interface["stream"] > 2


@pytest.mark.parametrize(
    "pa_type, typestr",
    [
        (pa.timestamp("s"), "<M8[s]"),
        (pa.timestamp("ns"), "<M8[ns]"),
        (pa.duration("ms"), "<m8[ms]"),
        (pa.duration("us"), "<m8[us]"),
    ],
    ids=lambda v: str(v),
)
def test_temporal_types_export_their_typestr_and_come_back(producer, pa_type, typestr):
    values = pa.array([0, 1_000, -86_400], pa.int64()).cast(pa_type)
    a = ad.array(values).to(ad.cuda())
    interface = a.__cuda_array_interface__
    assert interface["typestr"] == typestr
    assert interface_bytes(lambda ordinal=0: producer, interface) == np.array([0, 1_000, -86_400], np.int64).tobytes()
    again = ad.array(Cai(interface, a))
    assert again.__cuda_array_interface__["data"][0] == interface["data"][0]
    assert host_values(again).equals(values)


def test_our_cai_dict_imported_again_is_zero_copy_on_the_same_gpu():
    values = pa.array(np.arange(100, dtype=np.float32))
    a = ad.array(values).to(ad.cuda(1))
    interface = a.__cuda_array_interface__
    again = ad.array(Cai(interface, a))
    assert again.device == ad.cuda(1)
    assert again.__cuda_array_interface__["data"][0] == interface["data"][0]
    assert host_values(again).equals(values)


# --- CUDA Array Interface: import from the ctypes producer ------------------------------


@pytest.mark.parametrize("gpu", GPUS)
@pytest.mark.parametrize("pa_type, dtype, typestr, _dl", NUMERIC, ids=NUMERIC_IDS)
def test_cai_import_of_producer_memory_is_zero_copy_with_its_values(producers, gpu, pa_type, dtype, typestr, _dl):
    producer = producers(gpu)
    expected = (np.arange(77) * 3 % 120).astype(dtype)
    pointer = producer.upload(expected)
    a = ad.array(Cai(cai(pointer, 77, typestr), producer))
    assert a.device == ad.cuda(gpu)
    assert (len(a), a.offset, a.null_count) == (77, 0, 0)
    assert a.__cuda_array_interface__["data"][0] == pointer
    assert a.__cuda_array_interface__["typestr"] == typestr
    got = host_values(a)
    assert got.type == pa_type
    np.testing.assert_array_equal(got.to_numpy(), expected)
    # The producer's memory was read, not changed.
    assert producer.read(pointer, expected.nbytes) == expected.tobytes()


def test_cai_import_at_an_interior_pointer_starts_at_that_value(producer):
    values = np.arange(20, dtype=np.int32)
    pointer = producer.upload(values)
    a = ad.array(Cai(cai(pointer + 5 * 4, 15, "<i4"), producer))
    assert a.__cuda_array_interface__["data"][0] == pointer + 20
    assert host_values(a).to_pylist() == list(range(5, 20))


@pytest.mark.parametrize("gpu", GPUS)
def test_cai_import_of_managed_and_pinned_memory_lands_on_those_devices(producers, gpu):
    producer = producers(gpu)
    values = np.arange(12, dtype=np.float64)
    managed = ad.array(Cai(cai(producer.upload(values, "managed"), 12, "<f8"), producer))
    assert managed.device == ad.cuda_managed(gpu)
    assert host_values(managed).to_pylist() == values.tolist()
    pinned_pointer = producer.upload(values, "host")
    assert producer.pointer_attributes(pinned_pointer)[:2] == (CU_MEMORYTYPE_HOST, False)
    pinned = ad.array(Cai(cai(pinned_pointer, 12, "<f8"), producer))
    assert pinned.device.type is DeviceType.CUDA_HOST
    assert host_values(pinned).to_pylist() == values.tolist()


def test_cai_import_with_a_mask_makes_arrow_nulls(producers):
    for gpu in GPUS:
        producer = producers(gpu)
        length = 37
        valid = [(i * 7) % 5 != 0 for i in range(length)]
        data = producer.upload(np.arange(length, dtype=np.float32))
        # Any non-zero byte is valid.
        mask_pointer = producer.upload(np.array([3 if v else 0 for v in valid], dtype=np.uint8))
        mask = Cai(cai(mask_pointer, length, "|b1"))
        a = ad.array(Cai(cai(data, length, "<f4", mask=mask), producer))
        assert a.device == ad.cuda(gpu)
        expected = pa.array([float(i) if v else None for i, v in enumerate(valid)], pa.float32())
        got = host_values(a)
        assert got.equals(expected)
        assert got.null_count == valid.count(False)
        # Exported again, the mask is one byte per value, 1 or 0. (The mask
        # object owns its bytes: a consumer keeps it while reading them.)
        mask_object = a.__cuda_array_interface__["mask"]
        assert list(interface_bytes(producers, mask_object.__cuda_array_interface__)) == [int(v) for v in valid]
        del mask_object


@pytest.mark.parametrize("length", [9, 1001])
def test_cai_b1_data_comes_in_as_arrow_boolean(producer, length):
    rng = np.random.default_rng(length)
    bools = rng.random(length) < 0.5
    pointer = producer.upload(np.where(bools, 5, 0).astype(np.uint8))  # non-zero is True
    a = ad.array(Cai(cai(pointer, length, "|b1"), producer))
    assert a.type == "Boolean"
    assert len(a) == length
    assert host_values(a).equals(pa.array(bools, pa.bool_()))


def test_cai_b1_data_with_a_mask_is_a_nullable_boolean(producer):
    data = producer.upload(np.array([1, 0, 1, 1, 0], np.uint8))
    mask = producer.upload(np.array([1, 1, 0, 1, 0], np.uint8))
    a = ad.array(Cai(cai(data, 5, "|b1", mask=Cai(cai(mask, 5, "|b1"))), producer))
    assert host_values(a).equals(pa.array([True, False, None, True, None], pa.bool_()))


@pytest.mark.parametrize("how", ["memcpy-async", "memset-async"])
def test_cai_import_waits_for_the_producer_stream(producer, standin, how):
    length = 4096
    pointer = producer.alloc(length)
    stream = producer.gated_stream()
    if how == "memcpy-async":
        expected = bytes(i % 251 for i in range(length))
        producer.write_async(pointer, expected, stream)
    else:
        expected = bytes([7]) * length
        producer.memset_async(pointer, 7, length, stream)
    assert standin.counts()["pending_operations"] >= 2
    # Not written yet: a reader that does not wait sees poison.
    assert producer.read(pointer, length) == bytes([POISON]) * length
    a = ad.array(Cai(cai(pointer, length, "|u1", stream=stream), producer))
    assert a.__cuda_array_interface__["data"][0] == pointer
    got = host_values(a).to_numpy().tobytes()
    assert got == expected, f"{sum(1 for x in got if x == POISON)} bytes read before the producer wrote them"


def test_cai_import_of_a_mask_waits_for_the_masks_own_stream(producer):
    length = 100
    data = producer.upload(np.arange(length, dtype=np.int16))
    mask = producer.alloc(length)
    mask_stream = producer.gated_stream()
    producer.memset_async(mask, 1, length, mask_stream)
    producer.memset_async(mask, 0, 10, mask_stream)  # the first 10 are null
    a = ad.array(Cai(cai(data, length, "<i2", mask=Cai(cai(mask, length, "|b1", stream=mask_stream))), producer))
    expected = pa.array([None] * 10 + list(range(10, length)), pa.int16())
    assert host_values(a).equals(expected)


def test_cai_import_of_b1_data_waits_for_the_producer_stream(producer):
    length = 77
    pointer = producer.alloc(length)
    stream = producer.gated_stream()
    producer.memset_async(pointer, 1, length, stream)
    a = ad.array(Cai(cai(pointer, length, "|b1", stream=stream), producer))
    assert host_values(a).equals(pa.array([True] * length))


def test_cai_import_on_the_legacy_stream_waits_for_blocking_streams(producer):
    """`stream` 1 (legacy default stream) orders after the context's
    blocking streams: work on one of them is waited for."""
    length = 512
    pointer = producer.alloc(length)
    blocking = producer.gated_stream(non_blocking=False)
    producer.memset_async(pointer, 9, length, blocking)
    a = ad.array(Cai(cai(pointer, length, "|u1", stream=CU_STREAM_LEGACY), producer))
    assert host_values(a).to_pylist() == [9] * length


def test_cai_import_on_the_per_thread_stream_waits_for_its_work(producer):
    length = 512
    pointer = producer.alloc(length)
    producer.gate(CU_STREAM_PER_THREAD)
    producer.memset_async(pointer, 5, length, CU_STREAM_PER_THREAD)
    a = ad.array(Cai(cai(pointer, length, "|u1", stream=CU_STREAM_PER_THREAD), producer))
    assert host_values(a).to_pylist() == [5] * length
    producer.synchronize(CU_STREAM_PER_THREAD)


@pytest.mark.parametrize("stream", [None, 1, 2], ids=["none", "legacy", "per-thread"])
def test_cai_stream_none_legacy_and_per_thread_are_accepted_without_pending_work(producer, stream):
    values = np.arange(64, dtype=np.uint32)
    pointer = producer.upload(values)
    a = ad.array(Cai(cai(pointer, 64, "<u4", stream=stream), producer))
    assert host_values(a).to_pylist() == values.tolist()
    if stream is None:
        assert a.__cuda_array_interface__["stream"] is None


def test_cai_import_then_copy_to_the_other_gpu_keeps_the_values(producer):
    values = np.arange(300, dtype=np.int64)
    a, stream, _ = pending_import(producer, values, "<i8")
    b = ad.array(a, device=ad.cuda(1))
    assert b.device == ad.cuda(1)
    assert host_values(b).to_pylist() == values.tolist()


def test_cai_import_keeps_the_producer_alive_and_releases_it_with_the_array(producer):
    pointer = producer.upload(np.arange(1000, dtype=np.int64))
    obj = Cai(cai(pointer, 1000, "<i8"), producer)
    ref = weakref.ref(obj)
    a = ad.array(obj)
    del obj
    settle()
    assert ref() is not None, "the imported array must keep its producer alive"
    assert host_values(a).to_pylist() == list(range(1000))
    del a
    deadline = time.monotonic() + 5
    while ref() is not None and time.monotonic() < deadline:
        settle()
        time.sleep(0.01)
    assert ref() is None, "the producer must be released with the array"


def test_a_pageable_pointer_in_a_cai_dict_is_refused_naming_the_entry():
    host = np.arange(4, dtype=np.int64)
    error = raises_cleanly(
        lambda: ad.array(Cai(cai(host.ctypes.data, 4, "<i8"), host)),
        ValueError,
        re.escape("__cuda_array_interface__['data']"),
        "not CUDA memory",
        "pageable",
        hex(host.ctypes.data),
    )
    assert "CUDA is not available" not in str(error)


def test_a_pageable_mask_pointer_is_refused_naming_the_mask_entry(producer):
    data = producer.upload(np.arange(4, dtype=np.int32))
    mask = np.ones(4, dtype=np.uint8)
    raises_cleanly(
        lambda: ad.array(Cai(cai(data, 4, "<i4", mask=Cai(cai(mask.ctypes.data, 4, "|b1"), mask)), producer)),
        ValueError,
        re.escape("__cuda_array_interface__['mask']['data']"),
        "not CUDA memory",
    )


def test_a_mask_on_another_gpu_is_refused_naming_both(producers):
    data = producers(0).upload(np.arange(4, dtype=np.int32))
    mask = producers(1).upload(np.ones(4, dtype=np.uint8))
    raises_cleanly(
        lambda: ad.array(Cai(cai(data, 4, "<i4", mask=Cai(cai(mask, 4, "|b1"))))),
        ValueError,
        re.escape("['mask']['data']"),
        "the mask is on GPU 1, the data on GPU 0",
    )


def test_a_producer_stream_of_another_gpu_is_a_clean_error(producers):
    """The driver refuses a stream of another context (INVALID_HANDLE):
    the package reports it as an exception naming the call."""
    data = producers(1).upload(np.arange(4, dtype=np.int32))
    foreign = producers(0).stream()
    raises_cleanly(
        lambda: ad.array(Cai(cai(data, 4, "<i4", stream=foreign))),
        RuntimeError,
        "CUDA_ERROR_INVALID_HANDLE",
        "producer's stream",
    )


def test_a_destroyed_producer_stream_is_a_clean_error(producer):
    data = producer.upload(np.arange(4, dtype=np.int32))
    stream = producer.stream()
    producer.destroy_stream(stream)
    raises_cleanly(
        lambda: ad.array(Cai(cai(data, 4, "<i4", stream=stream), producer)),
        RuntimeError,
        "CUDA_ERROR_INVALID_HANDLE",
    )


# --- DLPack: export --------------------------------------------------------------------


@pytest.mark.parametrize("gpu", GPUS)
@pytest.mark.parametrize("kind", list(KINDS))
def test_dlpack_device_is_the_kind_with_the_gpu_or_0_for_host_memory(kind, gpu):
    make, _ = KINDS[kind]
    a = ad.array(pa.array([1, 2, 3], pa.int32())).to(make(gpu))
    expected = {"cuda": (KDL_CUDA, gpu), "cuda_host": (KDL_CUDA_HOST, 0), "cuda_managed": (KDL_CUDA_MANAGED, 0)}[kind]
    assert a.__dlpack_device__() == expected
    capsule = a.__dlpack__(max_version=(1, 0), dl_device=expected)
    name, tensor, version, flags = dlpack_struct(capsule)
    assert name == "dltensor_versioned"
    assert version[0] == 1
    assert flags & DLPACK_FLAG_BITMASK_READ_ONLY
    assert tensor.device == expected
    assert (tensor.ndim, tensor.shape, tensor.byte_offset) == (1, [3], 0)
    assert tensor.dtype == (KDL_INT, 32, 1)
    if kind != "cuda_host":
        assert tensor.data == a.__cuda_array_interface__["data"][0]


@pytest.mark.parametrize("pa_type, dtype, typestr, dl", NUMERIC, ids=NUMERIC_IDS)
def test_dlpack_export_describes_the_cai_pointer_and_type(producer, pa_type, dtype, typestr, dl):
    values = (np.arange(40) % 100).astype(dtype)
    a = ad.array(pa.array(values, pa_type)).to(ad.cuda())
    pointer = a.__cuda_array_interface__["data"][0]
    name, tensor, version, _ = dlpack_struct(a.__dlpack__())
    assert (name, version) == ("dltensor", None)
    assert tensor.data == pointer
    assert tensor.device == (KDL_CUDA, 0)
    assert tensor.dtype == (dl[0], dl[1], 1)
    assert (tensor.ndim, tensor.shape, tensor.byte_offset) == (1, [40], 0)
    assert tensor.strides in (None, [1])
    assert producer.read(tensor.data, values.nbytes) == values.tobytes()


def test_dlpack_export_of_a_slice_points_at_its_first_value():
    a = ad.array(pa.array(np.arange(20, dtype=np.int32)).slice(5, 10)).to(ad.cuda())
    _, tensor, _, _ = dlpack_struct(a.__dlpack__())
    assert tensor.data == a.__cuda_array_interface__["data"][0]
    assert tensor.shape == [10]


@pytest.mark.parametrize("stream", ["none", "legacy", "per-thread", "handle", "no-sync"])
def test_dlpack_export_orders_the_consumer_stream_after_pending_work(producers, stream):
    """A peer copy to GPU 1 of an import still pending behind a gate on
    GPU 0, exported with each kind of consumer stream (of GPU 1's context)
    and read on that stream."""
    values = np.arange(2048, dtype=np.int32)
    a, gate, _ = pending_import(producers(0), values, "<i4")
    copy = a.to(ad.cuda(1))  # pending behind the gate too
    producer = producers(1)
    consumer = producer.stream() if stream == "handle" else None
    argument = {"none": None, "legacy": 1, "per-thread": 2, "handle": consumer, "no-sync": -1}[stream]
    capsule = copy.__dlpack__(stream=argument)
    _, tensor, _, _ = dlpack_struct(capsule)
    pointer = tensor.data
    assert pointer == copy.__cuda_array_interface__["data"][0]
    if stream in ("none", "legacy"):
        got = producer.read(pointer, values.nbytes)  # on the legacy stream
    elif stream == "per-thread":
        out = producer.read_async(pointer, values.nbytes, CU_STREAM_PER_THREAD)
        producer.synchronize(CU_STREAM_PER_THREAD)
        got = out.raw
    elif stream == "handle":
        out = producer.read_async(pointer, values.nbytes, consumer)
        producer.synchronize(consumer)
        got = out.raw
    else:
        # -1: "the producer must not perform any synchronization": the
        # consumer's reads are not ordered, and see the pending copy's poison.
        got = producer.read(pointer, values.nbytes)
        assert got == bytes([POISON]) * values.nbytes
        producers(0).synchronize(gate)
        wait_for_drain()
        got = producer.read(pointer, values.nbytes)
    assert got == values.tobytes(), f"{sum(1 for x in got if x == POISON)} poison bytes"
    del capsule


def test_dlpack_export_refuses_what_it_cannot_carry():
    a = ad.array(pa.array(np.arange(100, dtype=np.int32))).to(ad.cuda())
    raises_cleanly(lambda: a.__dlpack__(stream=0), ValueError, "stream", "0 is disallowed for CUDA")
    raises_cleanly(lambda: a.__dlpack__(stream=-2), ValueError, "stream must be", "-2")
    raises_cleanly(lambda: a.__dlpack__(stream=2**70), ValueError, "stream must be")
    raises_cleanly(lambda: a.__dlpack__(stream=True), ValueError, "stream must be")
    raises_cleanly(lambda: a.__dlpack__(dl_device=(KDL_CUDA, 1)), BufferError, r"\(2, 0\), not \(2, 1\)")
    raises_cleanly(lambda: a.__dlpack__(copy=True), BufferError, "copy=True")
    nulls = ad.array(pa.array([1, None, 3], pa.int32())).to(ad.cuda())
    raises_cleanly(nulls.__dlpack__, BufferError, "null")
    strings = ad.array(pa.array(["a"])).to(ad.cuda())
    raises_cleanly(strings.__dlpack__, BufferError)


# --- DLPack: import -------------------------------------------------------------------


@pytest.mark.parametrize("gpu", GPUS)
def test_dlpack_import_of_an_arrow_device_cuda_array_is_zero_copy(gpu, dlpack_only):
    values = pa.array(np.arange(16, dtype=np.int64))
    a = ad.array(values).to(ad.cuda(gpu))
    wrapped = dlpack_only(a)
    b = ad.array(wrapped)
    assert wrapped.calls, "__dlpack__ was not called"
    stream = wrapped.calls[-1].get("stream")
    assert type(stream) is int and stream > 2, wrapped.calls
    assert wrapped.calls[-1].get("max_version") == (1, 1)
    assert b.device == ad.cuda(gpu)
    assert b.__cuda_array_interface__["data"][0] == a.__cuda_array_interface__["data"][0]
    assert host_values(b).equals(values)


def test_dlpack_import_of_a_pending_arrow_device_array_waits_for_it(producer, dlpack_only):
    values = np.arange(1024, dtype=np.int32)
    a, _, _ = pending_import(producer, values, "<i4")
    copy = a.to(ad.cuda(1))
    b = ad.array(dlpack_only(copy))
    assert b.device == ad.cuda(1)
    assert b.__cuda_array_interface__["stream"] is not None  # still pending
    assert host_values(b).to_numpy().tobytes() == values.tobytes()


@pytest.mark.parametrize("versioned", [True, False], ids=["versioned", "legacy"])
@pytest.mark.parametrize("gpu", GPUS)
def test_dlpack_import_from_a_ctypes_producer_waits_for_its_stream(producers, gpu, versioned):
    producer = producers(gpu)
    length = 3000
    values = np.arange(length, dtype=np.float32)
    pointer = producer.alloc(values.nbytes)
    stream = producer.gated_stream()
    producer.write_async(pointer, values.tobytes(), stream)
    source = DLPackProducer(producer, pointer, length, (KDL_FLOAT, 32), stream=stream, versioned=versioned)
    a = ad.array(source)
    assert len(source.calls) == 1, source.calls
    call = source.calls[0]
    assert call["max_version"] == (1, 1)
    assert type(call["stream"]) is int and call["stream"] > 2, call
    assert a.device == ad.cuda(gpu)
    assert a.type == "Float32"
    assert a.__cuda_array_interface__["data"][0] == pointer
    got = host_values(a).to_numpy()
    assert got.tobytes() == values.tobytes(), f"{int((got != values).sum())} values read before the producer wrote them"
    (address,) = source.handed_out
    assert address not in _DELETED_TENSORS, "the tensor was deleted while the array uses it"
    del a, got
    settle()
    deadline = time.monotonic() + 5
    while address not in _DELETED_TENSORS and time.monotonic() < deadline:
        settle()
        time.sleep(0.01)
    assert _DELETED_TENSORS.count(address) == 1, "the deleter must run exactly once, with the array"


def test_dlpack_import_of_managed_memory_from_a_ctypes_producer(producers):
    producer = producers(1)
    values = np.arange(10, dtype=np.int16)
    pointer = producer.upload(values, "managed")
    source = DLPackProducer(producer, pointer, 10, (KDL_INT, 16), device=(KDL_CUDA_MANAGED, 0))
    a = ad.array(source)
    assert a.device.type is DeviceType.CUDA_MANAGED
    assert host_values(a).to_pylist() == values.tolist()


def test_dlpack_import_from_a_ctypes_producer_without_a_stream_on_gpu_1(producers):
    producer = producers(1)
    values = np.arange(8, dtype=np.uint64)
    pointer = producer.upload(values)
    source = DLPackProducer(producer, pointer, 8, (KDL_UINT, 64))
    a = ad.array(source)
    assert a.device == ad.cuda(1)
    assert host_values(a).to_pylist() == values.tolist()


# --- DLPack 1.3: the C exchange table -------------------------------------------------


_OUR_TABLE = h.exchange_table(ad.DeviceArray)


def test_exchange_table_export_makes_our_current_work_stream_wait_for_pending_work(producers):
    """A peer copy to GPU 1 of an import still pending behind a gate on GPU
    0, taken through DeviceArray's table: work queued on the stream its
    `current_work_stream` names for GPU 1 reads the values; a read that
    ignores that stream reads the pending copy's poison."""
    values = np.arange(2048, dtype=np.int32)
    a, _, _ = pending_import(producers(0), values, "<i4")
    copy = a.to(ad.cuda(1))  # pending behind the gate too
    out = ctypes.c_void_p()
    assert h.EXCHANGE_FROM_PY_OBJECT(_OUR_TABLE.managed_tensor_from_py_object_no_sync)(copy, ctypes.byref(out)) == 0
    managed = DLManagedTensorVersioned.from_address(out.value)
    tensor = managed.dl_tensor
    assert (tensor.device.device_type, tensor.device.device_id) == (KDL_CUDA, 1)
    assert managed.flags & DLPACK_FLAG_BITMASK_READ_ONLY
    stream = ctypes.c_void_p()
    assert h.EXCHANGE_CURRENT_WORK_STREAM(_OUR_TABLE.current_work_stream)(KDL_CUDA, 1, ctypes.byref(stream)) == 0
    assert stream.value and stream.value > 2, stream.value
    consumer = producers(1)
    # The legacy stream does not wait for our non-blocking stream: poison.
    assert consumer.read(tensor.data, values.nbytes) == bytes([POISON]) * values.nbytes
    got = consumer.read_async(tensor.data, values.nbytes, stream.value)
    consumer.synchronize(stream.value)
    assert got.raw == values.tobytes(), f"{sum(1 for x in got.raw if x == POISON)} poison bytes"
    # Read after the check: the CUDA Array Interface export orders the
    # same stream by itself.
    assert tensor.data == copy.__cuda_array_interface__["data"][0]
    ctypes.CFUNCTYPE(None, ctypes.c_void_p)(managed.deleter)(out.value)


# The CUDA streams the ctypes table below calls current, by DLPack device;
# and the (device type, id) of each current_work_stream call.
_TABLE_STREAMS = {}
_TABLE_STREAM_CALLS = []


def _table_current_work_stream(device_type, device_id, out):
    _TABLE_STREAM_CALLS.append((device_type, device_id))
    out[0] = _TABLE_STREAMS.get((device_type, device_id))
    return 0


def _table_from_py_object(address, out):
    source = ctypes.cast(ctypes.c_void_p(address), ctypes.py_object).value
    out[0] = source.tensor()
    return 0


_TABLE_CALLBACKS = (
    ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p))(_table_from_py_object),
    ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int32, ctypes.c_int32, ctypes.POINTER(ctypes.c_void_p))(
        _table_current_work_stream
    ),
)
_TABLE = h.DLPackExchangeAPI(
    h.DLPackExchangeAPIHeader(h.DLPackVersion(1, 3), None),
    _OUR_TABLE.managed_tensor_allocator,  # required, never called here
    ctypes.cast(_TABLE_CALLBACKS[0], ctypes.c_void_p).value,
    _OUR_TABLE.managed_tensor_to_py_object_no_sync,  # required, never called here
    None,
    ctypes.cast(_TABLE_CALLBACKS[1], ctypes.c_void_p).value,
)


class TableProducer:
    """A producer of `length` values at `pointer` (memory of `producer`'s
    GPU) through a C exchange table only: `__dlpack__` must not be called.
    The table's `current_work_stream` answers `_TABLE_STREAMS`."""

    __dlpack_c_exchange_api__ = _PyCapsule_New(ctypes.addressof(_TABLE), h.EXCHANGE_API_CAPSULE, None)

    def __init__(self, producer, pointer, length, dtype):
        self.producer = producer
        self.pointer = pointer
        self.length = length
        self.dtype = dtype  # (code, bits)
        self.handed_out = []

    def __dlpack__(self, **kwargs):
        pytest.fail(f"__dlpack__({kwargs}) was called: the exchange table was not used")

    def __dlpack_device__(self):
        return (KDL_CUDA, self.producer.ordinal)

    def tensor(self):
        shape = (ctypes.c_int64 * 1)(self.length)
        strides = (ctypes.c_int64 * 1)(1)
        managed = DLManagedTensorVersioned(
            DLPackVersion(1, 3), None, ctypes.cast(_DELETER, ctypes.c_void_p).value, 0,
            DLTensor(
                data=self.pointer,
                device=DLDevice(KDL_CUDA, self.producer.ordinal),
                ndim=1,
                dtype=DLDataType(self.dtype[0], self.dtype[1], 1),
                shape=ctypes.cast(shape, ctypes.POINTER(ctypes.c_int64)),
                strides=ctypes.cast(strides, ctypes.POINTER(ctypes.c_int64)),
                byte_offset=0,
            ),
        )
        address = ctypes.addressof(managed)
        _DELETED_TENSORS[:] = [a for a in _DELETED_TENSORS if a != address]
        _LIVE_TENSORS[address] = (managed, shape, strides, self)
        self.handed_out.append(address)
        return address


@pytest.mark.parametrize("current", ["handle", "null"])
@pytest.mark.parametrize("gpu", GPUS)
def test_exchange_table_import_is_ordered_after_the_producers_current_work_stream(producers, gpu, current):
    """The producer's values are still being written behind a gate on its
    current work stream: a stream handle, or NULL (the default stream,
    taken for the legacy one) with the work on a blocking stream, which the
    legacy stream waits for. The import orders the array after it without
    waiting, and reads the values."""
    producer = producers(gpu)
    values = np.arange(3000, dtype=np.float32)
    pointer = producer.alloc(values.nbytes)
    stream = producer.gated_stream(non_blocking=current == "handle")
    producer.write_async(pointer, values.tobytes(), stream)
    _TABLE_STREAMS.clear()
    _TABLE_STREAM_CALLS.clear()
    if current == "handle":
        _TABLE_STREAMS[(KDL_CUDA, gpu)] = stream
    source = TableProducer(producer, pointer, len(values), (KDL_FLOAT, 32))
    a = ad.array(source)
    assert len(source.handed_out) == 1
    assert _TABLE_STREAM_CALLS == [(KDL_CUDA, gpu)]
    assert a.device == ad.cuda(gpu)
    assert a.__cuda_array_interface__["stream"] is not None  # still pending: the host did not wait
    got = host_values(a).to_numpy()
    assert got.tobytes() == values.tobytes(), f"{int((got != values).sum())} values read before the producer wrote them"
    (address,) = source.handed_out
    assert address not in _DELETED_TENSORS
    del a, got
    deadline = time.monotonic() + 5
    while address not in _DELETED_TENSORS and time.monotonic() < deadline:
        settle()
        time.sleep(0.01)
    assert _DELETED_TENSORS.count(address) == 1, "the deleter must run exactly once, with the array"


# --- errors are exceptions, never panics ---------------------------------------------


def _bad_calls():
    def device_int32(p, n=4):
        return p.upload(np.arange(n, dtype=np.int32))

    return {
        "cuda(2)": lambda p: ad.cuda(2),
        "cuda_host(2)": lambda p: ad.cuda_host(2),
        "cuda_managed(2**40)": lambda p: ad.cuda_managed(2**40),
        "cai stream 0": lambda p: ad.array(Cai(cai(device_int32(p), 4, "<i4", stream=0), p)),
        "cai stream -1": lambda p: ad.array(Cai(cai(device_int32(p), 4, "<i4", stream=-1), p)),
        "cai strided": lambda p: ad.array(Cai(cai(device_int32(p), 2, "<i4", strides=(8,)), p)),
        "cai 2-d": lambda p: ad.array(Cai(dict(cai(device_int32(p), 4, "<i4"), shape=(2, 2)), p)),
        "cai complex": lambda p: ad.array(Cai(cai(device_int32(p), 2, "<c8"), p)),
        "cai mask of int32": lambda p: ad.array(Cai(cai(device_int32(p), 4, "<i4", mask=Cai(cai(device_int32(p), 4, "<i4"))), p)),
        "cai mask stream 0": lambda p: ad.array(
            Cai(cai(device_int32(p), 4, "<i4", mask=Cai(cai(device_int32(p), 4, "|b1", stream=0))), p)
        ),
        "cai mask of 3 values": lambda p: ad.array(Cai(cai(device_int32(p), 4, "<i4", mask=Cai(cai(device_int32(p), 3, "|b1"))), p)),
        "cai pointer 0": lambda p: ad.array(Cai(cai(0, 4, "<i4"), p)),
        "cai unknown pointer": lambda p: ad.array(Cai(cai(0x10, 4, "<i4"), p)),
        "dlpack nulls": lambda p: ad.array(pa.array([1, None]), device=ad.cuda()).__dlpack__(),
        "dlpack string": lambda p: ad.array(pa.array(["a"]), device=ad.cuda()).__dlpack__(),
        "dlpack stream 0": lambda p: ad.array(pa.array([1]), device=ad.cuda()).__dlpack__(stream=0),
        "dlpack stream 2**70": lambda p: ad.array(pa.array([1]), device=ad.cuda()).__dlpack__(stream=2**70),
        "cai of bool": lambda p: ad.array(pa.array([True]), device=ad.cuda()).__cuda_array_interface__,
        "arrow_c_array of cuda": lambda p: ad.array(pa.array([1]), device=ad.cuda()).__arrow_c_array__(),
    }


BAD_CALLS = _bad_calls()


@pytest.mark.parametrize("call", BAD_CALLS.values(), ids=BAD_CALLS.keys())
def test_bad_calls_raise_exceptions_never_panics(producer, call):
    raises_cleanly(lambda: call(producer), Exception)


def test_arrow_c_array_of_a_cuda_array_is_refused_naming_the_device():
    a = ad.array(pa.array([1, 2, 3], pa.int64())).to(ad.cuda(1))
    raises_cleanly(a.__arrow_c_array__, ValueError, "CUDA", r"id 1", "CPU pointers")


# --- fault injection ---------------------------------------------------------------------


TO_FAULTS = [
    # (target, entry, nth, code, patterns the message must match)
    ("cuda", "cuMemAlloc_v2", 1, CUDA_ERROR_OUT_OF_MEMORY, [r"device CUDA \(id 0\)", "cuMemAlloc failed", "CUDA_ERROR_OUT_OF_MEMORY", "of Device memory"]),
    ("cuda_host", "cuMemHostAlloc", 1, CUDA_ERROR_OUT_OF_MEMORY, [r"device CUDA_HOST \(id 0\)", "cuMemHostAlloc failed", "CUDA_ERROR_OUT_OF_MEMORY", "of Pinned memory"]),
    ("cuda_managed", "cuMemAllocManaged", 1, CUDA_ERROR_OUT_OF_MEMORY, [r"device CUDA_MANAGED \(id 0\)", "cuMemAllocManaged failed", "CUDA_ERROR_OUT_OF_MEMORY", "of Managed memory"]),
    ("cuda", "cuCtxPushCurrent_v2", 1, CUDA_ERROR_INVALID_CONTEXT, [r"device CUDA \(id 0\)", "cuCtxPushCurrent", "CUDA_ERROR_INVALID_CONTEXT"]),
    ("cuda", "cuStreamCreate", 1, CUDA_ERROR_OUT_OF_MEMORY, ["cuStreamCreate", "CUDA_ERROR_OUT_OF_MEMORY"]),
    ("cuda", "cuMemcpyAsync", 1, CUDA_ERROR_INVALID_VALUE, ["cuMemcpyAsync", "CUDA_ERROR_INVALID_VALUE"]),
    ("cuda", "cuMemcpyAsync", 2, CUDA_ERROR_UNKNOWN, ["cuMemcpyAsync", "CUDA_ERROR_UNKNOWN"]),
]


@pytest.mark.parametrize(
    "target, entry, nth, code, patterns", TO_FAULTS, ids=[f"{t}-{e}-{n}" for t, e, n, _, _ in TO_FAULTS]
)
def test_a_failing_call_during_to_raises_naming_it_and_the_next_attempt_succeeds(
    standin, target, entry, nth, code, patterns
):
    # Two buffers (validity and values) so that a second copy can fail.
    values = pa.array([None if i % 7 == 0 else i for i in range(20_000)], pa.int64())
    source = ad.array(values)
    device = KINDS[target][0](0)
    calls = standin.calls(entry)
    standin.inject(entry, nth, code)
    raises_cleanly(lambda: source.to(device), RuntimeError, *patterns)
    assert standin.calls(entry) >= calls + nth, f"{entry} was not called {nth} time(s)"
    again = source.to(device)
    assert again.device == device
    assert host_values(again).equals(values)


def test_out_of_memory_during_to_cuda_names_the_failure_and_leaks_nothing(standin):
    """The brief's example: the next cuMemAlloc_v2 fails with
    CUDA_ERROR_OUT_OF_MEMORY; the no_leaks fixture checks that nothing is
    left behind; the next attempt succeeds."""
    values = pa.array(np.arange(100_000, dtype=np.int64))
    source = ad.array(values)
    before = standin.counts()
    standin.inject("cuMemAlloc_v2", 1, CUDA_ERROR_OUT_OF_MEMORY)
    error = raises_cleanly(lambda: source.to(ad.cuda()), RuntimeError, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory")
    message = str(error)
    assert message.startswith("device CUDA (id 0): cuMemAlloc failed: CUDA_ERROR_OUT_OF_MEMORY"), message
    assert "800000 bytes" in message, message
    after = standin.counts()
    assert (after["allocations"], after["streams"], after["events"]) == (
        before["allocations"],
        before["streams"],
        before["events"],
    )
    assert host_values(source.to(ad.cuda())).equals(values)


@pytest.mark.parametrize(
    "entry, code, patterns",
    [
        ("cuMemcpyAsync", CUDA_ERROR_INVALID_VALUE, ["copy_to_host", "cuMemcpyAsync", "CUDA_ERROR_INVALID_VALUE"]),
        ("cuStreamCreate", CUDA_ERROR_OUT_OF_MEMORY, ["cuStreamCreate", "CUDA_ERROR_OUT_OF_MEMORY"]),
        ("cuStreamWaitEvent", CUDA_ERROR_INVALID_HANDLE, ["cuStreamWaitEvent", "CUDA_ERROR_INVALID_HANDLE"]),
    ],
)
def test_a_failing_call_during_to_cpu_raises_naming_it_and_the_next_attempt_succeeds(standin, entry, code, patterns):
    values = pa.array(np.arange(5000, dtype=np.float64))
    on_gpu = ad.array(values).to(ad.cuda(1))  # its event is set: to(cpu) waits on it
    standin.inject(entry, 1, code)
    raises_cleanly(lambda: on_gpu.to(ad.cpu()), RuntimeError, r"device CUDA \(id 1\)", *patterns)
    assert host_values(on_gpu).equals(values)


def test_a_failing_cu_launch_host_func_keeps_the_sources_with_the_copy(standin):
    """`release_after` falls back to keeping the copy's sources: the copy
    succeeds."""
    values = pa.array(np.arange(1000, dtype=np.int32))
    calls = standin.calls("cuLaunchHostFunc")
    standin.inject("cuLaunchHostFunc", 1, CUDA_ERROR_UNKNOWN)
    on_gpu = ad.array(values).to(ad.cuda())
    assert standin.calls("cuLaunchHostFunc") == calls + 1
    assert host_values(on_gpu).equals(values)


@pytest.mark.parametrize(
    "entry, code, patterns",
    [
        ("cuPointerGetAttributes", CUDA_ERROR_INVALID_VALUE, ["cuPointerGetAttributes", "CUDA_ERROR_INVALID_VALUE"]),
        ("cuEventCreate", CUDA_ERROR_OUT_OF_MEMORY, ["cuEventCreate", "CUDA_ERROR_OUT_OF_MEMORY"]),
        ("cuEventRecord", CUDA_ERROR_INVALID_HANDLE, ["cuEventRecord", "producer's stream", "CUDA_ERROR_INVALID_HANDLE"]),
    ],
)
def test_a_failing_call_during_cai_import_raises_naming_it(producer, standin, entry, code, patterns):
    values = np.arange(100, dtype=np.int32)
    pointer = producer.alloc(values.nbytes)
    stream = producer.gated_stream()
    producer.write_async(pointer, values.tobytes(), stream)
    obj = Cai(cai(pointer, 100, "<i4", stream=stream), producer)
    standin.inject(entry, 1, code)
    raises_cleanly(lambda: ad.array(obj), RuntimeError, *patterns)
    assert host_values(ad.array(obj)).to_pylist() == values.tolist()


@pytest.mark.parametrize(
    "entry, code, patterns",
    [
        ("cuEventQuery", CUDA_ERROR_UNKNOWN, ["cuEventQuery", "CUDA_ERROR_UNKNOWN"]),
        ("cuStreamWaitEvent", CUDA_ERROR_INVALID_HANDLE, ["cuStreamWaitEvent", "interface stream", "CUDA_ERROR_INVALID_HANDLE"]),
    ],
)
def test_a_failing_call_during_cai_export_raises_naming_it(producer, standin, entry, code, patterns):
    values = np.arange(100, dtype=np.int32)
    a, _, _ = pending_import(producer, values, "<i4")
    standin.inject(entry, 1, code)
    error = raises_cleanly(lambda: a.__cuda_array_interface__, RuntimeError, *patterns)
    assert not isinstance(error, AttributeError)
    interface = a.__cuda_array_interface__
    assert interface_bytes(lambda ordinal=0: producer, interface) == values.tobytes()


@pytest.mark.parametrize(
    "entry, code, patterns",
    [
        ("cuLaunchKernel", CUDA_ERROR_LAUNCH_FAILED, ["cuLaunchKernel", "unpack_bits", "CUDA_ERROR_LAUNCH_FAILED"]),
        ("cuMemAlloc_v2", CUDA_ERROR_OUT_OF_MEMORY, ["cuMemAlloc failed", "CUDA_ERROR_OUT_OF_MEMORY"]),
        ("cuEventRecord", CUDA_ERROR_UNKNOWN, ["cuEventRecord", "CUDA_ERROR_UNKNOWN"]),
    ],
)
def test_a_failing_call_while_making_a_mask_raises_naming_it(producers, standin, entry, code, patterns):
    source = pa.array([None if i % 3 == 0 else i for i in range(1000)], pa.int32())
    a = ad.array(source).to(ad.cuda())
    standin.inject(entry, 1, code)
    raises_cleanly(lambda: a.__cuda_array_interface__, RuntimeError, *patterns)
    mask_object = a.__cuda_array_interface__["mask"]  # owns the bytes
    mask = mask_object.__cuda_array_interface__
    assert list(interface_bytes(producers, mask)) == [0 if v is None else 1 for v in source.to_pylist()]


def test_a_failing_stream_wait_during_dlpack_export_raises_naming_it(producer, standin):
    values = np.arange(100, dtype=np.int32)
    a, _, _ = pending_import(producer, values, "<i4")
    standin.inject("cuStreamWaitEvent", 1, CUDA_ERROR_INVALID_HANDLE)
    raises_cleanly(lambda: a.__dlpack__(stream=1), RuntimeError, "cuStreamWaitEvent", "consumer's stream", "CUDA_ERROR_INVALID_HANDLE")
    capsule = a.__dlpack__(stream=1)
    _, tensor, _, _ = dlpack_struct(capsule)
    assert producer.read(tensor.data, values.nbytes) == values.tobytes()
    del capsule


# --- in a fresh process: settings, and error paths that may abort ----------------------

_PRELUDE = """
import ctypes, sys
import numpy as np, pyarrow as pa
import arrow_device as ad
lib = ctypes.CDLL("libcuda.so")
lib.cuStandinInjectFault.argtypes = [ctypes.c_char_p, ctypes.c_uint, ctypes.c_int]

def inject(entry, nth, code):
    assert lib.cuStandinInjectFault(entry, nth, code) == 0, ("cuStandinInjectFault", entry, code)

class Counts(ctypes.Structure):
    _fields_ = [(n, ctypes.c_ulonglong) for n in ("allocations", "allocated_bytes", "streams", "events",
                "modules", "retained_contexts", "pending_operations", "violations")]

def counts():
    out = Counts()
    assert lib.cuStandinCounts(ctypes.byref(out)) == 0
    return {n: getattr(out, n) for n, _ in Counts._fields_}
"""


def run_fresh(code, **env):
    """Runs `code` after _PRELUDE in a new interpreter (its own stand-in)
    with `env` added; returns the CompletedProcess."""
    environment = dict(os.environ)
    environment.update(env)
    return subprocess.run(
        [sys.executable, "-c", _PRELUDE + textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=environment,
        timeout=300,
        check=False,
    )


def assert_clean_run(done):
    output = f"exit status {done.returncode}\n--- stdout\n{done.stdout}\n--- stderr\n{done.stderr}"
    assert done.returncode == 0, output
    assert "VIOLATION" not in done.stderr, output
    assert "PanicException" not in done.stdout + done.stderr, output
    return done.stdout


@pytest.mark.parametrize(
    "entry, code",
    [("cuEventCreate", CUDA_ERROR_OUT_OF_MEMORY), ("cuEventRecord", CUDA_ERROR_UNKNOWN)],
)
def test_a_failing_event_after_the_copies_were_queued_frees_nothing_under_them(entry, code):
    """`.to(cuda())` queues the copies, then creates and records the event:
    when that fails, the new memory must not be freed before the queued
    copies into it have run (the stand-in aborts the process on such a
    free). Run in a fresh process for that reason."""
    out = assert_clean_run(
        run_fresh(
            f"""
            values = pa.array(np.arange(1_000_000, dtype=np.int64))
            source = ad.array(values)
            ad.cuda()
            base = counts()
            inject(b"{entry}", 1, {code})
            try:
                source.to(ad.cuda())
            except RuntimeError as error:
                print("ERROR:", error)
            else:
                print("NO ERROR")
            again = source.to(ad.cuda()).to(ad.cpu())
            assert pa.array(again).equals(values)
            del again
            import gc, time
            for _ in range(500):
                gc.collect(); ad.cpu()
                now = counts()
                if now["pending_operations"] == 0 and now["allocations"] <= base["allocations"]:
                    break
                time.sleep(0.01)
            print("COUNTS", base["allocations"], now["allocations"], now["violations"])
            """
        )
    )
    (error_line,) = [line for line in out.splitlines() if line.startswith(("ERROR:", "NO ERROR"))]
    assert error_line.startswith("ERROR:"), out
    assert entry in error_line and CODE_NAMES[code] in error_line, error_line
    (count_line,) = [line for line in out.splitlines() if line.startswith("COUNTS")]
    _, base, now, violations = count_line.split()
    assert (now, violations) == (base, "0"), out


def test_a_failing_stream_synchronize_during_to_cpu_does_not_free_the_destination_under_the_copy():
    """A copy to the host whose synchronization fails: the host memory the
    queued copies write must outlive them. Fresh process (a write into
    freed memory may crash it)."""
    out = assert_clean_run(
        run_fresh(
            f"""
            import time
            values = pa.array(np.arange(1_000_000, dtype=np.int64))
            on_gpu = ad.array(values).to(ad.cuda())
            on_gpu.to(ad.cpu())  # its event is done: nothing else to wait for
            inject(b"cuStreamSynchronize", 1, {CUDA_ERROR_UNKNOWN})
            try:
                on_gpu.to(ad.cpu())
            except RuntimeError as error:
                print("ERROR:", error)
            time.sleep(0.5)  # let the queued copies run
            assert pa.array(on_gpu.to(ad.cpu())).equals(values)
            print("DONE")
            """
        )
    )
    assert "ERROR:" in out and "cuStreamSynchronize" in out and "CUDA_ERROR_UNKNOWN" in out, out
    assert "DONE" in out, out


def test_a_failed_conversion_whose_drain_also_fails_frees_nothing_under_its_kernels():
    """A `|b1` import with a mask queues two packing kernels; when the
    second launch fails and the stream cannot even be drained, the bitmap
    the first kernel writes must not be freed under it (leaked instead, as
    `drain_then_free` does for copies). Fresh process: the stand-in aborts
    on such a free."""
    out = assert_clean_run(
        run_fresh(
            f"""
            import time

            class Cai:
                def __init__(self, interface, *keep):
                    self.interface, self.keep = interface, keep

                @property
                def __cuda_array_interface__(self):
                    return dict(self.interface)

            n = 100_000
            data = ad.array(pa.array(np.ones(n, np.uint8))).to(ad.cuda())
            mask = ad.array(pa.array(np.ones(n, np.uint8))).to(ad.cuda())
            def interface(array, **extra):
                pointer = array.__cuda_array_interface__["data"][0]
                return dict(shape=(n,), typestr="|b1", data=(pointer, False), version=3,
                            strides=None, stream=None, **extra)
            def masked():
                return Cai(interface(data, mask=Cai(interface(mask), mask)), data)
            assert len(ad.array(masked())) == n  # loads the kernels
            inject(b"cuLaunchKernel", 2, {CUDA_ERROR_LAUNCH_FAILED})  # the mask's packing
            inject(b"cuStreamSynchronize", 1, {CUDA_ERROR_UNKNOWN})  # the drain
            try:
                ad.array(masked())
            except RuntimeError as error:
                print("ERROR:", error)
            time.sleep(0.2)  # the first kernel runs
            got = pa.array(ad.array(masked()).to(ad.cpu()))
            assert got.null_count == 0 and got.to_numpy(zero_copy_only=False).all()
            print("DONE")
            """
        )
    )
    assert "ERROR:" in out and "cuLaunchKernel" in out and "CUDA_ERROR_LAUNCH_FAILED" in out, out
    assert "DONE" in out, out


@pytest.mark.parametrize(
    "setting, code",
    [
        ({"CUDA_STANDIN_FAULTS": "cuInit:1:CUDA_ERROR_NO_DEVICE"}, "CUDA_ERROR_NO_DEVICE"),
        ({"CUDA_STANDIN_DEVICES": "two"}, "CUDA_ERROR_INVALID_VALUE"),  # malformed: cuInit fails
    ],
    ids=["injected", "malformed-setting"],
)
def test_a_failing_cu_init_leaves_cuda_unavailable_with_a_message_naming_it(setting, code):
    out = assert_clean_run(
        run_fresh(
            """
            types = {d.type for d in ad.devices()}
            print("TYPES", sorted(int(t) for t in types))
            for make in (ad.cuda, ad.cuda_host, ad.cuda_managed):
                try:
                    make()
                except RuntimeError as error:
                    print("ERROR:", error)
            """,
            **setting,
        )
    )
    assert "TYPES [1, 12]" in out, out
    errors = [line for line in out.splitlines() if line.startswith("ERROR:")]
    assert len(errors) == 3, out
    for line in errors:
        assert "CUDA is not available" in line and "cuInit failed" in line and code in line, line


@pytest.mark.parametrize("devices", [0, 1])
def test_with_fewer_gpus_the_missing_ones_are_refused_naming_the_count(devices):
    out = assert_clean_run(
        run_fresh(
            f"""
            print("GPUS", sorted({{d.id for d in ad.devices() if int(d.type) == 2}}))
            try:
                ad.cuda({devices})
            except RuntimeError as error:
                print("ERROR:", error)
            """,
            CUDA_STANDIN_DEVICES=str(devices),
        )
    )
    assert f"GPUS {list(range(devices))}" in out, out
    count = "no GPU" if devices == 0 else f"{devices} device(s)"
    assert "ERROR:" in out and "CUDA is not available" in out and f"the driver reports {count}" in out, out


def test_a_real_out_of_memory_is_an_error_and_a_smaller_copy_still_fits():
    out = assert_clean_run(
        run_fresh(
            """
            big = ad.array(pa.array(np.arange(300_000, dtype=np.int64)))  # 2.4 MB
            small = pa.array(np.arange(1000, dtype=np.int64))
            try:
                big.to(ad.cuda())
            except RuntimeError as error:
                print("ERROR:", error)
            assert pa.array(ad.array(small).to(ad.cuda()).to(ad.cpu())).equals(small)
            print("DONE")
            """,
            CUDA_STANDIN_MEMORY_MIB="1",
        )
    )
    assert "ERROR:" in out and "CUDA_ERROR_OUT_OF_MEMORY" in out and "DONE" in out, out


def test_a_failing_kernel_module_load_is_reported_and_retried():
    out = assert_clean_run(
        run_fresh(
            """
            a = ad.array(pa.array([1, None, 3], pa.int32())).to(ad.cuda())
            inject(b"cuModuleLoadData", 1, 218)  # CUDA_ERROR_INVALID_PTX
            try:
                a.__cuda_array_interface__
            except RuntimeError as error:
                print("ERROR:", error)
            mask = a.__cuda_array_interface__["mask"]
            print("MASK", len(mask))
            """
        )
    )
    assert "ERROR:" in out and "bitmap kernels" in out and "CUDA_ERROR_INVALID_PTX" in out, out
    assert "MASK 3" in out, out

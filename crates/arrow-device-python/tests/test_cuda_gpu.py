"""`arrow_device` on a real CUDA GPU, with the real peers: CuPy, PyTorch and
Numba through the CUDA Array Interface (CAI) and DLPack, pyarrow through the
Arrow capsules.

The whole module is skipped unless `arrow_device.devices()` lists a CUDA
device; CuPy, PyTorch and Numba are imported inside the tests (through
fixtures that skip when they are missing), so collection needs none of them.

What is proved, in order: every golden Arrow type round-trips through device,
pinned and managed memory; CAI and DLPack exchanges are zero-copy both ways;
the producer's pending work is waited for on import (CAI `stream`) and
consumers are ordered after ours on export (CAI `stream`, DLPack `stream`);
CAI masks and `|b1` data become Arrow validity and booleans and back; bad
input raises a Python exception naming the problem, never a panic.

Peers' own rules the tests rely on (checked against their sources):

* CuPy's CAI carries `stream` = its *current* stream (version 3), so a CuPy
  array is imported inside `with stream:` to name that stream; CuPy reads a
  CAI by synchronizing on its `stream`, ignores the read-only flag and
  refuses a `mask` (so a masked array's values are read without the mask).
* PyTorch's CAI is version 2: it names no stream. Tests that need PyTorch's
  pending work waited for wrap its dict with `version=3, stream=...`; tests
  that only check zero-copy synchronize first. PyTorch refuses a read-only
  CAI (`torch.as_tensor`: "the read only flag is not supported"), and ours is
  read-only by contract, so PyTorch reads our arrays through DLPack.
"""

import ctypes
import functools
import re
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


def _cuda_listed():
    return any(device.type == DeviceType.CUDA for device in ad.devices())


if not _cuda_listed():
    pytest.skip(
        "arrow_device.devices() lists no CUDA device (no CUDA driver or GPU here)",
        allow_module_level=True,
    )


# DLPack's device types (dlpack.h): the same numbers as ArrowDeviceType.
KDL_CUDA = 2
KDL_CUDA_HOST = 3
KDL_CUDA_MANAGED = 13

KINDS = {
    "cuda": (ad.cuda, DeviceType.CUDA, KDL_CUDA),
    "cuda_host": (ad.cuda_host, DeviceType.CUDA_HOST, KDL_CUDA_HOST),
    "cuda_managed": (ad.cuda_managed, DeviceType.CUDA_MANAGED, KDL_CUDA_MANAGED),
}
KIND_NAMES = list(KINDS)
# Memory the CUDA Array Interface describes (device-accessible by address).
CAI_KINDS = ["cuda", "cuda_managed"]

# (pyarrow type, numpy dtype, CAI typestr) of every fixed-width number.
NUMERIC = [
    (pa.int8(), np.int8, "|i1"),
    (pa.int16(), np.int16, "<i2"),
    (pa.int32(), np.int32, "<i4"),
    (pa.int64(), np.int64, "<i8"),
    (pa.uint8(), np.uint8, "|u1"),
    (pa.uint16(), np.uint16, "<u2"),
    (pa.uint32(), np.uint32, "<u4"),
    (pa.uint64(), np.uint64, "<u8"),
    (pa.float16(), np.float16, "<f2"),
    (pa.float32(), np.float32, "<f4"),
    (pa.float64(), np.float64, "<f8"),
]
NUMERIC_IDS = [np.dtype(dtype).name for _, dtype, _ in NUMERIC]

# About 100 ms of `torch.cuda._sleep` on an H100 (cycles at ~2 GHz).
TORCH_SLEEP_CYCLES = 200_000_000
# The CuPy spin kernel's duration.
SPIN_MS = 150


# --- peers, imported lazily --------------------------------------------------------


@pytest.fixture(scope="module")
def cupy():
    cupy = pytest.importorskip("cupy")
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as error:  # CuPy without a usable CUDA runtime
        pytest.skip(f"cupy cannot use CUDA: {error}")
    if count < 1:
        pytest.skip("cupy sees no GPU")
    return cupy


@pytest.fixture(scope="module")
def torch():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA")
    return torch


@pytest.fixture(scope="module")
def numba_cuda():
    pytest.importorskip("numba")
    cuda = pytest.importorskip("numba.cuda")
    if not cuda.is_available():
        pytest.skip("numba.cuda is not available")
    return cuda


# --- helpers ---------------------------------------------------------------------------


class CaiObject:
    """Exposes a given `__cuda_array_interface__` dict (a fresh copy per
    read) and keeps `keep` (the producers of its memory) alive."""

    def __init__(self, interface, *keep):
        self.interface = dict(interface)
        self.keep = keep

    @property
    def __cuda_array_interface__(self):
        return dict(self.interface)


def cai_of(data, mask=None, **changes):
    """A `CaiObject` over `data`'s own interface (read now: CuPy's names its
    current stream), with `mask` (an object exposing its own interface) as
    the mask and `changes` applied (a value of `...` removes the key). A new
    `typestr` drops the producer's `descr` (CuPy's `[('', typestr)]`, which
    must match the typestr)."""
    interface = dict(data.__cuda_array_interface__)
    if "typestr" in changes and "descr" not in changes:
        interface.pop("descr", None)
    if mask is not None:
        interface["mask"] = mask
    for key, value in changes.items():
        if value is ...:
            interface.pop(key, None)
        else:
            interface[key] = value
    return CaiObject(interface, data, mask)


class DeviceCapsulesOnly:
    """Exposes only `__arrow_c_device_array__` of a DeviceArray (so that
    `arrow_device.array` imports it through the C Device Data Interface,
    validating it, instead of taking the DeviceArray as it is)."""

    def __init__(self, target):
        self.target = target

    def __arrow_c_device_array__(self, requested_schema=None, **kwargs):
        return self.target.__arrow_c_device_array__(requested_schema, **kwargs)


def cai_pointer(array):
    return array.__cuda_array_interface__["data"][0]


def assert_stream_entry(interface):
    """An exported `stream` is None (no pending work) or a stream handle to
    order after, never 0 (the spec disallows it) and never a bool."""
    assert "stream" in interface, interface
    stream = interface["stream"]
    assert stream is None or (type(stream) is int and stream != 0), interface


def assert_exported_interface(interface, length, typestr, pointer=None, masked=False):
    """A version 3 dict of `length` values of `typestr`, read-only,
    C-contiguous, with a `mask` only when the array has nulls (`masked`)."""
    if masked:
        assert hasattr(interface.get("mask"), "__cuda_array_interface__"), interface
    else:
        assert interface.get("mask") is None, interface
    assert interface["version"] == 3
    assert interface["shape"] == (length,)
    assert interface["typestr"] == typestr
    assert interface["strides"] is None
    data_pointer, read_only = interface["data"]
    assert read_only is True
    assert type(data_pointer) is int
    if length == 0:
        assert data_pointer == 0
    else:
        assert data_pointer != 0
    if pointer is not None:
        assert data_pointer == pointer
    assert_stream_entry(interface)


def odd_windows(num_rows):
    """(offset, length) windows whose offsets are not multiples of 8 (validity
    bitmaps start mid-byte), and the empty tail."""
    windows = []
    if num_rows >= 3:
        windows.append((1, num_rows - 2))
    if num_rows > 3:
        windows.append((3, num_rows - 3))
    windows.append((num_rows, 0))
    return windows


SPIN_SOURCE = r"""
extern "C" __global__ void arrow_device_test_spin(unsigned long long nanoseconds) {
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    } while (now - start < nanoseconds);
}
"""


@functools.lru_cache(maxsize=None)
def _spin_kernel(cupy):
    kernel = cupy.RawKernel(SPIN_SOURCE, "arrow_device_test_spin")
    kernel.compile()
    return kernel


def cupy_spin(cupy, milliseconds):
    """Queues a one-thread kernel spinning for `milliseconds` on CuPy's
    current stream (the GPU's global timer, so the time does not depend on
    the clock rate)."""
    _spin_kernel(cupy)((1,), (1,), (np.uint64(milliseconds * 1_000_000),))


def warm_cupy(cupy):
    """Compiles and loads, before the timed part of a sync test, what it
    launches (the spin kernel, CuPy's fill) and what it imports through, so
    that no host-side first-use delay outlasts the producer's work."""
    _spin_kernel(cupy)
    tiny = cupy.zeros(4, dtype=cupy.int32)
    tiny.fill(7)
    int(tiny.sum())
    host_values(ad.array(tiny))
    cupy.cuda.Device().synchronize()


def warm_torch(torch):
    """As `warm_cupy`, for PyTorch's sleep and fill kernels."""
    tiny = torch.zeros(4, dtype=torch.int32, device="cuda")
    torch.cuda._sleep(1)
    tiny.fill_(7)
    int(tiny.sum().item())
    torch.cuda.synchronize()
    host_values(ad.array(CaiObject(dict(tiny.__cuda_array_interface__, version=3, stream=1), tiny)))


def cupy_busy_array(cupy, length, value):
    """An int32 array of zeros on a new non-blocking stream `s`, followed on
    `s` by ~SPIN_MS of spinning and then a fill with `value`: returns
    `(s, x)` while that work is still pending. Import `x` inside
    `with s:`, so that CuPy's interface names `s`."""
    warm_cupy(cupy)
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        array = cupy.zeros(length, dtype=cupy.int32)
        cupy_spin(cupy, SPIN_MS)
        array.fill(value)
    return stream, array


def torch_busy_tensor(torch, length, value, dtype=None):
    """A tensor of zeros on a new non-default stream `s`, followed on `s` by
    ~100 ms of spinning and then a fill with `value`: returns `(s, t)`
    while that work is still pending."""
    dtype = dtype or torch.int32
    warm_torch(torch)
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        tensor = torch.zeros(length, dtype=dtype, device="cuda")
        torch.cuda._sleep(TORCH_SLEEP_CYCLES)
        tensor.fill_(value)
    return stream, tensor


# --- devices -------------------------------------------------------------------------


def test_devices_list_device_pinned_and_managed_memory_of_gpu_0():
    devices = ad.devices()
    for name, (make, device_type, _) in KINDS.items():
        device = make(0)
        assert device in devices, name
        assert device.type is device_type
        assert device.id == 0
        assert device == make()  # id 0 is the default
        assert repr(device) == f"Device({device_type.name}, 0)"
    assert len({ad.cuda(0), ad.cuda_host(0), ad.cuda_managed(0), ad.cuda(0)}) == 3


def test_devices_list_each_gpu_three_times(cupy):
    count = cupy.cuda.runtime.getDeviceCount()
    listed = [d for d in ad.devices() if d.type in (DeviceType.CUDA, DeviceType.CUDA_HOST, DeviceType.CUDA_MANAGED)]
    assert len(listed) == 3 * count
    assert {d.id for d in listed} == set(range(count))


@pytest.mark.parametrize("kind", KIND_NAMES)
def test_a_gpu_ordinal_that_does_not_exist_raises_naming_it(kind):
    make = KINDS[kind][0]
    raises_cleanly(lambda: make(999), (RuntimeError, ValueError), "999")


# --- golden round trips through CUDA, CUDA_HOST, CUDA_MANAGED -------------------------


@pytest.mark.parametrize("kind", KIND_NAMES)
def test_golden_batches_round_trip_through_cuda_memory(golden_path, kind):
    make, device_type, _ = KINDS[kind]
    device = make(0)
    _, batches = read_golden(golden_path)
    for batch in batches:
        on_device = ad.array(batch).to(device)
        assert on_device.device == device
        assert on_device.device.type is device_type
        assert on_device.device.id == 0
        assert len(on_device) == batch.num_rows
        back = on_device.to(ad.cpu())
        assert back.device == ad.cpu()
        assert_batch_equal(pa.record_batch(back), batch)


@pytest.mark.parametrize("kind", KIND_NAMES)
def test_golden_sliced_batches_round_trip_through_cuda_memory(golden_path, kind):
    """`array(..., device=)` of slices starting mid-byte of their bitmaps."""
    device = KINDS[kind][0](0)
    _, batches = read_golden(golden_path)
    for batch in batches:
        for offset, length in odd_windows(batch.num_rows):
            sliced = batch.slice(offset, length)
            on_device = ad.array(sliced, device=device)
            assert on_device.device == device
            assert len(on_device) == length
            assert_batch_equal(pa.record_batch(on_device.to(ad.cpu())), sliced)


@pytest.mark.parametrize("kind", KIND_NAMES)
def test_golden_device_batches_import_again_through_the_c_device_interface_validated_in_full(golden_path, kind, ffi):
    """Our export from CUDA memory, imported again through `__arrow_c_device_array__`
    (device type and id in the struct) and validated at `full` (sizes read
    through the device), keeps its device and values."""
    make, device_type, _ = KINDS[kind]
    device = make(0)
    _, batches = read_golden(golden_path)
    for batch in batches:
        on_device = ad.array(batch, device=device)
        _, capsule = on_device.__arrow_c_device_array__()
        fields = ffi.device_array_fields(capsule)
        assert (fields.device_type, fields.device_id) == (int(device_type), 0)
        assert fields.length == batch.num_rows
        del capsule
        again = ad.array(DeviceCapsulesOnly(on_device), validate="full")
        assert again.device == device
        assert_batch_equal(pa.record_batch(again.to(ad.cpu())), batch)


def test_golden_batches_keep_their_values_across_cuda_memory_kinds(golden_path):
    """Device → managed → pinned → device → CPU: copies between the CUDA
    memory kinds, not only to and from the host."""
    _, batches = read_golden(golden_path)
    for batch in batches:
        current = ad.array(batch, device=ad.cuda())
        for make in (ad.cuda_managed, ad.cuda_host, ad.cuda):
            current = current.to(make())
            assert current.device == make()
        assert_batch_equal(pa.record_batch(current.to(ad.cpu())), batch)


# --- CUDA Array Interface: CuPy ----------------------------------------------------------


def test_cupy_array_comes_in_zero_copy_through_its_cuda_array_interface(cupy):
    x = cupy.arange(1000, dtype=cupy.int32)
    a = ad.array(x)
    assert a.device == ad.cuda(x.device.id)
    assert a.device.type is DeviceType.CUDA
    assert (len(a), a.offset, a.null_count, a.type) == (1000, 0, 0, "Int32")
    assert_exported_interface(a.__cuda_array_interface__, 1000, "<i4", pointer=x.data.ptr)
    assert host_values(a).equals(pa.array(np.arange(1000, dtype=np.int32)))


def test_cupy_reads_our_cuda_array_interface_zero_copy(cupy):
    x = cupy.arange(1000, dtype=cupy.int32)
    a = ad.array(x)
    y = cupy.asarray(a)
    assert y.data.ptr == x.data.ptr
    assert (y.dtype, y.shape) == (cupy.dtype("int32"), (1000,))
    assert bool(cupy.array_equal(y, x))


@pytest.mark.parametrize("pa_type, dtype, typestr", NUMERIC, ids=NUMERIC_IDS)
def test_cupy_arrays_of_every_number_type_come_in_zero_copy_with_their_arrow_type(cupy, pa_type, dtype, typestr):
    expected = (np.arange(50) % 100).astype(dtype)
    x = cupy.asarray(expected)
    a = ad.array(x)
    assert cai_pointer(a) == x.data.ptr
    assert a.__cuda_array_interface__["typestr"] == typestr
    got = host_values(a)
    assert got.type == pa_type
    np.testing.assert_array_equal(got.to_numpy(), expected)


@pytest.mark.parametrize("kind", CAI_KINDS)
@pytest.mark.parametrize("pa_type, dtype, typestr", NUMERIC, ids=NUMERIC_IDS)
def test_our_cuda_arrays_of_every_number_type_are_read_by_cupy(cupy, kind, pa_type, dtype, typestr):
    values = pa.array((np.arange(-5, 45) % 100).astype(dtype), pa_type)
    a = ad.array(values).to(KINDS[kind][0]())
    interface = a.__cuda_array_interface__
    assert_exported_interface(interface, 50, typestr)
    y = cupy.asarray(a)
    assert y.data.ptr == interface["data"][0]
    assert y.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(cupy.asnumpy(y), values.to_numpy())


def test_our_int64_array_copied_to_cuda_is_read_by_cupy_as_1_2_3(cupy):
    a = ad.array(pa.array([1, 2, 3], pa.int64())).to(ad.cuda())
    assert cupy.asarray(a).tolist() == [1, 2, 3]


@pytest.mark.parametrize(
    "pa_type, typestr",
    [
        (pa.timestamp("s"), "<M8[s]"),
        (pa.timestamp("ms"), "<M8[ms]"),
        (pa.timestamp("us"), "<M8[us]"),
        (pa.timestamp("ns"), "<M8[ns]"),
        (pa.duration("s"), "<m8[s]"),
        (pa.duration("ns"), "<m8[ns]"),
    ],
    ids=lambda v: str(v),
)
def test_temporal_typestrs_come_in_as_timestamp_and_duration_and_go_out_again(cupy, pa_type, typestr):
    raw = cupy.asarray(np.array([0, 1_000, -86_400], dtype=np.int64))
    a = ad.array(cai_of(raw, typestr=typestr))
    assert cai_pointer(a) == raw.data.ptr
    assert a.__cuda_array_interface__["typestr"] == typestr
    expected = pa.array([0, 1_000, -86_400], pa.int64()).cast(pa_type)
    assert host_values(a).equals(expected)
    # And our own temporal CUDA arrays describe themselves the same way.
    ours = ad.array(expected).to(ad.cuda())
    assert ours.__cuda_array_interface__["typestr"] == typestr


def test_a_contiguous_cupy_slice_comes_in_at_its_first_value(cupy):
    x = cupy.arange(20, dtype=cupy.int32)
    tail = x[5:]
    a = ad.array(tail)
    assert cai_pointer(a) == x.data.ptr + 5 * 4 == tail.data.ptr
    assert host_values(a).to_pylist() == list(range(5, 20))


def test_our_sliced_cuda_array_points_at_its_first_value(cupy):
    a = ad.array(pa.array(np.arange(20, dtype=np.int32)).slice(5, 10)).to(ad.cuda())
    interface = a.__cuda_array_interface__
    assert_exported_interface(interface, 10, "<i4")
    assert cupy.asarray(a).tolist() == list(range(5, 15))


def test_empty_and_zero_dimensional_cupy_arrays_come_in(cupy):
    empty = ad.array(cupy.zeros(0, dtype=cupy.float64))
    assert len(empty) == 0
    assert host_values(empty).equals(pa.array([], pa.float64()))
    scalar = ad.array(cupy.array(5, dtype=cupy.int64))
    assert len(scalar) == 1
    assert host_values(scalar).to_pylist() == [5]


def test_our_empty_cuda_array_describes_pointer_0_and_cupy_reads_it(cupy):
    a = ad.array(pa.array([], pa.int32())).to(ad.cuda())
    interface = a.__cuda_array_interface__
    assert_exported_interface(interface, 0, "<i4")
    assert interface["data"] == (0, True)
    assert cupy.asarray(a).shape == (0,)


def test_our_cai_dict_imported_again_is_zero_copy(cupy):
    """Our export read back through the interface (not the Arrow capsules)."""
    a = ad.array(pa.array(np.arange(100, dtype=np.float32))).to(ad.cuda())
    again = ad.array(CaiObject(a.__cuda_array_interface__, a))
    assert again.device == ad.cuda()
    assert cai_pointer(again) == cai_pointer(a)
    assert host_values(again).equals(pa.array(np.arange(100, dtype=np.float32)))


def test_array_with_device_cpu_copies_a_cupy_array_to_the_host(cupy):
    x = cupy.arange(10, dtype=cupy.int16)
    a = ad.array(x, device=ad.cpu())
    assert a.device == ad.cpu()
    assert pa.array(a).to_pylist() == list(range(10))


def test_cai_import_keeps_the_producer_alive_and_releases_it_with_the_array(cupy):
    x = cupy.arange(1000, dtype=cupy.int64)
    producer = cai_of(x)
    ref = weakref.ref(producer)
    a = ad.array(producer)
    del producer, x
    settle()
    assert ref() is not None, "the imported array must keep its producer alive"
    assert host_values(a).to_pylist() == list(range(1000))
    del a
    cupy.cuda.Device().synchronize()
    deadline = time.monotonic() + 2.0
    while ref() is not None and time.monotonic() < deadline:
        settle()
        time.sleep(0.01)
    assert ref() is None, "the producer must be released with the array"


@pytest.mark.parametrize("stream", [None, 1, 2], ids=["none", "legacy", "per-thread"])
def test_cai_stream_none_legacy_and_per_thread_are_accepted(cupy, stream):
    x = cupy.arange(64, dtype=cupy.uint32)
    cupy.cuda.Device().synchronize()
    a = ad.array(cai_of(x, stream=stream))
    assert cai_pointer(a) == x.data.ptr
    assert host_values(a).to_pylist() == list(range(64))


def test_an_import_without_pending_work_exports_stream_none(cupy):
    x = cupy.arange(64, dtype=cupy.int32)
    cupy.cuda.Device().synchronize()
    a = ad.array(cai_of(x, stream=None))
    assert a.__cuda_array_interface__["stream"] is None


# --- CUDA Array Interface: PyTorch and Numba ----------------------------------------------


def test_torch_cuda_tensor_comes_in_zero_copy_through_its_cuda_array_interface(torch):
    t = torch.arange(10, device="cuda", dtype=torch.float64)
    # PyTorch's interface is version 2 (no stream): its work must be done first.
    torch.cuda.synchronize()
    a = ad.array(t)
    assert a.device == ad.cuda(t.device.index)
    assert a.type == "Float64"
    assert_exported_interface(a.__cuda_array_interface__, 10, "<f8", pointer=t.data_ptr())
    assert host_values(a).to_pylist() == [float(i) for i in range(10)]


def test_torch_shares_our_cuda_memory_through_dlpack_and_at_most_refuses_our_read_only_cai(torch):
    a = ad.array(pa.array(np.arange(10, dtype=np.float64))).to(ad.cuda())
    pointer = cai_pointer(a)
    # torch.as_tensor reads __cuda_array_interface__ first; PyTorch 2.x
    # refuses read-only data there ("the read only flag is not supported"),
    # and ours is read-only. Whichever it does, it never copies.
    try:
        shared = torch.as_tensor(a, device="cuda")
    except TypeError as error:
        assert "read only" in str(error), error
    else:
        torch.cuda.synchronize()
        assert shared.data_ptr() == pointer
        assert shared.tolist() == [float(i) for i in range(10)]
    # DLPack is how PyTorch shares our arrays.
    u = torch.from_dlpack(a)
    assert u.device.type == "cuda"
    assert u.data_ptr() == pointer
    assert u.dtype == torch.float64
    assert u.tolist() == [float(i) for i in range(10)]


def test_numba_device_arrays_come_in_and_go_out_zero_copy(numba_cuda):
    expected = np.arange(100, dtype=np.float32)
    d = numba_cuda.to_device(expected)
    pointer = d.__cuda_array_interface__["data"][0]
    a = ad.array(d)
    assert a.device.type is DeviceType.CUDA
    assert cai_pointer(a) == pointer
    np.testing.assert_array_equal(host_values(a).to_numpy(), expected)
    back = numba_cuda.as_cuda_array(a)
    assert back.__cuda_array_interface__["data"][0] == pointer
    np.testing.assert_array_equal(back.copy_to_host(), expected)


# --- DLPack both ways ---------------------------------------------------------------------


@pytest.mark.parametrize("kind", KIND_NAMES)
def test_dlpack_device_is_cuda_cuda_host_or_cuda_managed_with_gpu_0(kind):
    make, _, dl_type = KINDS[kind]
    a = ad.array(pa.array([1, 2, 3], pa.int32())).to(make())
    assert a.__dlpack_device__() == (dl_type, 0)
    capsule = a.__dlpack__(max_version=(1, 0), dl_device=(dl_type, 0))
    assert type(capsule).__name__ == "PyCapsule"


def test_torch_from_dlpack_shares_our_cuda_memory(torch):
    a = ad.array(pa.array(np.arange(1000, dtype=np.int64))).to(ad.cuda())
    t = torch.from_dlpack(a)
    assert t.data_ptr() == cai_pointer(a)
    assert t.dtype == torch.int64 and tuple(t.shape) == (1000,)
    assert int(t.sum().item()) == 499_500


def test_cupy_from_dlpack_shares_our_cuda_memory(cupy):
    a = ad.array(pa.array(np.arange(1000, dtype=np.float32))).to(ad.cuda())
    y = cupy.from_dlpack(a)
    assert y.data.ptr == cai_pointer(a)
    np.testing.assert_array_equal(cupy.asnumpy(y), np.arange(1000, dtype=np.float32))


def test_torch_tensor_comes_in_zero_copy_through_dlpack_alone(torch, dlpack_only):
    t = torch.arange(16, dtype=torch.int64, device="cuda")
    torch.cuda.synchronize()
    producer = dlpack_only(t)
    assert not hasattr(producer, "__cuda_array_interface__")
    a = ad.array(producer)
    assert producer.calls, "__dlpack__ was not called"
    # The consumer's stream handed to the producer: the device's interface
    # stream, a real handle (not None, 0, 1 or 2).
    stream = producer.calls[-1].get("stream")
    assert isinstance(stream, int) and stream > 2, producer.calls
    assert a.device == ad.cuda(t.device.index)
    assert cai_pointer(a) == t.data_ptr()
    assert host_values(a).to_pylist() == list(range(16))


def test_dlpack_import_is_ordered_after_the_torch_producer_stream(torch, dlpack_only):
    """PyTorch makes the stream we pass wait on its current stream; the
    imported array's event follows that wait."""
    length = 1 << 20
    stream, t = torch_busy_tensor(torch, length, 7)
    try:
        with torch.cuda.stream(stream):
            assert not stream.query(), "the producer finished before the import: nothing is proved"
            a = ad.array(dlpack_only(t))
        values = host_values(a).to_numpy()
        assert (values == 7).all(), f"{int((values != 7).sum())} values read before the producer wrote them"
        assert cai_pointer(a) == t.data_ptr()
    finally:
        stream.synchronize()


def test_cupy_array_comes_in_zero_copy_through_dlpack_alone(cupy, dlpack_only):
    x = cupy.arange(16, dtype=cupy.float64)
    cupy.cuda.Device().synchronize()
    producer = dlpack_only(x)
    a = ad.array(producer)
    assert producer.calls, "__dlpack__ was not called"
    assert a.device == ad.cuda(x.device.id)
    assert cai_pointer(a) == x.data.ptr
    assert host_values(a).to_pylist() == [float(i) for i in range(16)]


def test_a_torch_slice_comes_in_through_dlpack_at_its_first_value(torch, dlpack_only):
    t = torch.arange(16, dtype=torch.int32, device="cuda")[3:]
    torch.cuda.synchronize()
    a = ad.array(dlpack_only(t))
    assert cai_pointer(a) == t.data_ptr()
    assert host_values(a).to_pylist() == list(range(3, 16))


def test_dlpack_stream_0_is_refused_and_minus_1_legacy_per_thread_and_handles_are_accepted(torch):
    a = ad.array(pa.array(np.arange(100, dtype=np.int32))).to(ad.cuda())
    raises_cleanly(lambda: a.__dlpack__(stream=0), ValueError, "stream")
    raises_cleanly(lambda: a.__dlpack__(stream=-2), ValueError, "stream")
    for stream in (-1, None, 1, 2, torch.cuda.current_stream().cuda_stream or 1):
        capsule = a.__dlpack__(stream=stream)
        assert type(capsule).__name__ == "PyCapsule"
    side = torch.cuda.Stream()
    capsule = a.__dlpack__(stream=side.cuda_stream)
    # PyTorch takes a legacy capsule directly; reading on `side` is ordered.
    with torch.cuda.stream(side):
        t = torch.from_dlpack(capsule)
        total = int(t.sum().item())
    assert total == sum(range(100))
    assert t.data_ptr() == cai_pointer(a)


def test_dlpack_of_a_cuda_array_with_nulls_raises_buffer_error(torch):
    a = ad.array(pa.array([1, None, 3], pa.int32())).to(ad.cuda())
    raises_cleanly(a.__dlpack__, BufferError, "null")
    raises_cleanly(lambda: torch.from_dlpack(a), BufferError)


def test_dlpack_to_another_device_or_with_copy_true_raises_buffer_error():
    a = ad.array(pa.array([1, 2, 3], pa.int32())).to(ad.cuda())
    raises_cleanly(lambda: a.__dlpack__(dl_device=(1, 0)), BufferError)
    raises_cleanly(lambda: a.__dlpack__(copy=True), BufferError)


# --- DLPack 1.3: the C exchange table -------------------------------------------------------


_Py_DecRef = ctypes.PYFUNCTYPE(None, ctypes.py_object)(("Py_DecRef", ctypes.pythonapi))


@pytest.fixture(scope="module")
def torch_table(torch):
    """torch.Tensor's exchange table, and `TableOnly`: a torch.Tensor
    subclass that hides the CUDA Array Interface (which
    `arrow_device.array` reads before DLPack) and counts `__dlpack__`
    calls, so that a CUDA tensor can only come in through the table."""
    if not hasattr(torch.Tensor, "__dlpack_c_exchange_api__"):
        pytest.skip(f"torch {torch.__version__} publishes no DLPack exchange table")
    calls = []

    class TableOnly(torch.Tensor):
        @property
        def __cuda_array_interface__(self):
            raise AttributeError("hidden: the DLPack exchange table is under test")

        def __dlpack__(self, *args, **kwargs):
            calls.append(kwargs)
            return super().__dlpack__(*args, **kwargs)

    table = h.exchange_table(torch.Tensor)
    version = table.header.version
    assert version.major == 1, (version.major, version.minor)
    return SimpleNamespace(table=table, TableOnly=TableOnly, dlpack_calls=calls)


@pytest.mark.parametrize("name", ["int8", "int16", "int32", "int64", "uint8", "float16", "float32", "float64"])
def test_a_torch_cuda_tensor_comes_in_zero_copy_through_torchs_exchange_table(torch, torch_table, name):
    t = (torch.arange(40, device="cuda") % 100).to(getattr(torch, name))
    torch.cuda.synchronize()
    torch_table.dlpack_calls.clear()
    a = ad.array(t.as_subclass(torch_table.TableOnly))
    assert torch_table.dlpack_calls == [], "__dlpack__ was called: the exchange table was not used"
    assert a.device == ad.cuda(t.device.index)
    assert cai_pointer(a) == t.data_ptr()
    np.testing.assert_array_equal(host_values(a).to_numpy(zero_copy_only=False), t.cpu().numpy())


def test_a_torch_cpu_tensor_comes_in_through_torchs_exchange_table(torch, torch_table):
    t = torch.arange(12, dtype=torch.float32)
    torch_table.dlpack_calls.clear()
    a = ad.array(t.as_subclass(torch_table.TableOnly))
    assert torch_table.dlpack_calls == []
    assert a.device == ad.cpu()
    back = pa.array(a)
    assert back.to_pylist() == [float(i) for i in range(12)]
    assert back.buffers()[1].address == t.data_ptr()


def test_the_torch_exchange_table_import_is_ordered_after_torchs_current_stream(torch, torch_table):
    """Torch's `current_work_stream` names its current stream (the busy
    one, inside `with torch.cuda.stream`): the import records an event
    there, so the values read are those written after the spin."""
    length = 1 << 20
    stream, t = torch_busy_tensor(torch, length, 7)
    try:
        with torch.cuda.stream(stream):
            assert not stream.query(), "the producer finished before the import: nothing is proved"
            torch_table.dlpack_calls.clear()
            a = ad.array(t.as_subclass(torch_table.TableOnly))
        assert torch_table.dlpack_calls == []
        values = host_values(a).to_numpy()
        assert (values == 7).all(), f"{int((values != 7).sum())} values read before the producer wrote them"
        assert cai_pointer(a) == t.data_ptr()
    finally:
        stream.synchronize()


def test_torchs_exchange_table_takes_our_tables_tensor_ordered_on_our_current_work_stream(torch, torch_table):
    """Our table's tensor of an array still pending on a busy torch stream,
    handed to torch's `managed_tensor_to_py_object_no_sync`; torch's work
    queued on the stream our `current_work_stream` names sees the values."""
    length = 1 << 20
    stream, t = torch_busy_tensor(torch, length, 3)
    try:
        a = ad.array(cai_of(t, version=3, stream=stream.cuda_stream))
        assert not stream.query(), "the producer finished before the export: nothing is proved"
        ours = h.exchange_table(ad.DeviceArray)
        tensor = ctypes.c_void_p()
        assert h.EXCHANGE_FROM_PY_OBJECT(ours.managed_tensor_from_py_object_no_sync)(a, ctypes.byref(tensor)) == 0
        current = ctypes.c_void_p()
        assert h.EXCHANGE_CURRENT_WORK_STREAM(ours.current_work_stream)(KDL_CUDA, t.device.index, ctypes.byref(current)) == 0
        assert current.value and current.value > 2
        out = ctypes.c_void_p()
        assert h.EXCHANGE_TO_PY_OBJECT(torch_table.table.managed_tensor_to_py_object_no_sync)(tensor.value, ctypes.byref(out)) == 0
        u = ctypes.cast(out, ctypes.py_object).value
        _Py_DecRef(u)  # the reference torch handed over
        assert isinstance(u, torch.Tensor) and u.data_ptr() == t.data_ptr()
        with torch.cuda.stream(torch.cuda.ExternalStream(current.value)):
            total = int(u.sum().item())
        assert total == 3 * length
    finally:
        stream.synchronize()


def test_torch_from_dlpack_reads_our_pending_array_whichever_path_it_takes(torch):
    """torch.from_dlpack reads our table when it knows one, `__dlpack__`
    otherwise: either way the values are those written after the spin."""
    length = 1 << 20
    stream, t = torch_busy_tensor(torch, length, 5)
    try:
        a = ad.array(cai_of(t, version=3, stream=stream.cuda_stream))
        assert not stream.query(), "the producer finished before the export: nothing is proved"
        u = torch.from_dlpack(a)
        assert u.data_ptr() == t.data_ptr()
        assert int(u.sum().item()) == 5 * length
    finally:
        stream.synchronize()


# --- synchronization: the producer's work is still running -------------------------------


def test_cai_import_waits_for_the_torch_producer_stream(torch):
    """PyTorch's own dict names no stream (version 2), so it is given the
    one its work is on, as a version 3 producer would."""
    length = 1 << 20
    stream, t = torch_busy_tensor(torch, length, 7)
    try:
        producer = cai_of(t, version=3, stream=stream.cuda_stream)
        assert not stream.query(), "the producer finished before the import: nothing is proved"
        a = ad.array(producer)
        values = host_values(a).to_numpy()
        assert values.shape == (length,)
        assert (values == 7).all(), f"{int((values != 7).sum())} values read before the producer wrote them"
        assert cai_pointer(a) == t.data_ptr()
    finally:
        stream.synchronize()


def test_cai_import_waits_for_the_cupy_producer_stream(cupy):
    length = 1 << 20
    stream, x = cupy_busy_array(cupy, length, 7)
    try:
        with stream:
            assert x.__cuda_array_interface__["stream"] == stream.ptr
            assert not stream.done, "the producer finished before the import: nothing is proved"
            a = ad.array(x)
        values = host_values(a).to_numpy()
        assert (values == 7).all(), f"{int((values != 7).sum())} values read before the producer wrote them"
        assert cai_pointer(a) == x.data.ptr
    finally:
        stream.synchronize()


def test_our_cai_export_orders_cupy_after_the_pending_producer(cupy):
    """An array imported while its producer is still writing, exported
    again: CuPy, which synchronizes on the exported `stream`, sees the
    final values."""
    length = 1 << 20
    stream, x = cupy_busy_array(cupy, length, 7)
    try:
        with stream:
            a = ad.array(x)
        assert not stream.done, "the producer finished before the export: nothing is proved"
        interface = a.__cuda_array_interface__
        assert_stream_entry(interface)
        y = cupy.asarray(a)  # on CuPy's default stream, after its sync
        assert y.data.ptr == x.data.ptr
        assert int(y.sum()) == 7 * length
    finally:
        stream.synchronize()


def test_our_dlpack_export_orders_torch_after_the_pending_producer(torch):
    length = 1 << 20
    stream, t = torch_busy_tensor(torch, length, 3)
    try:
        a = ad.array(cai_of(t, version=3, stream=stream.cuda_stream))
        assert not stream.query(), "the producer finished before the export: nothing is proved"
        # On PyTorch's default stream, which from_dlpack names to __dlpack__.
        u = torch.from_dlpack(a)
        assert u.data_ptr() == t.data_ptr()
        assert int(u.sum().item()) == 3 * length
    finally:
        stream.synchronize()


def test_our_copy_to_cuda_exports_a_valid_stream_and_cupy_sums_it(cupy):
    n = 1_000_000
    a = ad.array(pa.array(range(n), pa.int64())).to(ad.cuda())
    interface = a.__cuda_array_interface__
    assert_exported_interface(interface, n, "<i8")
    assert int(cupy.asarray(a).sum()) == n * (n - 1) // 2


def test_torch_from_dlpack_of_our_fresh_copy_sums_it(torch):
    n = 1_000_000
    a = ad.array(pa.array(range(n), pa.int64())).to(ad.cuda())
    assert int(torch.from_dlpack(a).sum().item()) == n * (n - 1) // 2


# --- masks and booleans -----------------------------------------------------------------


def mask_values(cupy, interface_owner):
    """The mask of an exported interface, read by CuPy through the mask
    object's own interface, as a list of 0/1."""
    mask = interface_owner.__cuda_array_interface__["mask"]
    assert hasattr(mask, "__cuda_array_interface__")
    return cupy.asnumpy(cupy.asarray(mask)).astype(np.uint8).tolist()


def valid_values(cupy, array):
    """The values of an exported interface read by CuPy without its mask
    (CuPy refuses masked interfaces)."""
    interface = array.__cuda_array_interface__
    interface.pop("mask")
    return cupy.asnumpy(cupy.asarray(CaiObject(interface, array))).tolist()


@pytest.mark.parametrize("kind", CAI_KINDS)
def test_our_nulls_export_as_a_byte_mask_cupy_reads(cupy, kind):
    a = ad.array(pa.array([1, None, 3], pa.int32())).to(KINDS[kind][0]())
    assert a.null_count == 1
    interface = a.__cuda_array_interface__
    assert_exported_interface(interface, 3, "<i4", masked=True)
    mask = interface["mask"]
    mask_interface = mask.__cuda_array_interface__
    assert mask_interface["typestr"] == "|b1"
    assert mask_interface["shape"] == (3,)
    assert mask_interface["version"] == 3
    assert_stream_entry(mask_interface)
    assert mask_values(cupy, a) == [1, 0, 1]
    values = valid_values(cupy, a)
    assert (values[0], values[2]) == (1, 3)


@pytest.mark.parametrize(
    "values, offset, length",
    [
        ([None, 1, None, 4, 5, None, 7, 8, 9, None], 3, 7),
        ([None if i % 3 == 0 or i % 7 == 0 else i for i in range(40)], 13, 22),
        ([None if i % 5 == 1 else i for i in range(64)], 9, 55),
    ],
    ids=["offset-3", "offset-13", "offset-9"],
)
def test_sliced_nulls_export_the_mask_of_the_slice(cupy, values, offset, length):
    source = pa.array(values, pa.int64()).slice(offset, length)
    expected = source.to_pylist()
    a = ad.array(source).to(ad.cuda())
    assert a.__cuda_array_interface__["shape"] == (length,)
    assert mask_values(cupy, a) == [0 if v is None else 1 for v in expected]
    got = valid_values(cupy, a)
    assert [g for g, e in zip(got, expected) if e is not None] == [e for e in expected if e is not None]


def test_a_cai_mask_becomes_arrow_nulls(cupy):
    data = cupy.array([1, 2, 3], dtype=cupy.int32)
    mask = cupy.array([True, False, True])
    a = ad.array(cai_of(data, mask=mask))
    assert a.device.type is DeviceType.CUDA
    assert a.null_count in (None, 1)
    assert host_values(a).equals(pa.array([1, None, 3], pa.int32()))


@pytest.mark.parametrize("mask_dtype", ["bool", "uint8", "int8"])
def test_a_cai_mask_of_any_byte_type_marks_zero_bytes_null_across_bytes(cupy, mask_dtype):
    length = 37
    valid = [(i * 7) % 5 != 0 for i in range(length)]
    mask_bytes = np.array([(3 if v else 0) if mask_dtype != "bool" else v for v in valid]).astype(mask_dtype)
    data = cupy.arange(length, dtype=cupy.float32)
    a = ad.array(cai_of(data, mask=cupy.asarray(mask_bytes)))
    expected = pa.array([float(i) if v else None for i, v in enumerate(valid)], pa.float32())
    got = host_values(a)
    assert got.equals(expected)
    assert got.null_count == valid.count(False)


def test_cupy_bool_data_comes_in_as_arrow_boolean_across_a_byte(cupy):
    bools = [True, False, True, True, False, False, False, False, True]
    a = ad.array(cupy.array(bools))
    assert a.type == "Boolean"
    assert len(a) == 9
    assert host_values(a).equals(pa.array(bools, pa.bool_()))


def test_long_cupy_bool_data_comes_in_as_arrow_boolean(cupy):
    rng = np.random.default_rng(7)
    bools = rng.random(1001) < 0.5
    assert host_values(ad.array(cupy.asarray(bools))).equals(pa.array(bools, pa.bool_()))


def test_cupy_bool_data_with_a_mask_comes_in_as_nullable_boolean(cupy):
    data = cupy.array([True, False, True, True, False])
    mask = cupy.array([True, True, False, True, False])
    got = host_values(ad.array(cai_of(data, mask=mask)))
    assert got.equals(pa.array([True, False, None, True, None], pa.bool_()))


def test_a_masked_import_round_trips_to_a_cuda_copy_and_back(cupy):
    data = cupy.arange(20, dtype=cupy.int64)
    mask = cupy.asarray(np.arange(20) % 4 != 2)
    a = ad.array(cai_of(data, mask=mask))
    expected = pa.array([None if i % 4 == 2 else i for i in range(20)], pa.int64())
    assert host_values(a.to(ad.cuda_managed()).to(ad.cuda())).equals(expected)


@pytest.mark.parametrize(
    "values",
    [
        pa.array([True, False, True]),
        pa.array(["a", "b"]),
        pa.array([1, 2], pa.timestamp("us", tz="UTC")),
        pa.array([1, 2], pa.int32()).dictionary_encode(),
    ],
    ids=["bool", "string", "timestamp-tz", "dictionary"],
)
def test_arrays_the_interface_cannot_describe_have_no_cuda_array_interface(values):
    a = ad.array(values).to(ad.cuda())
    assert not hasattr(a, "__cuda_array_interface__")
    raises_cleanly(lambda: a.__cuda_array_interface__, AttributeError, "__cuda_array_interface__")


def test_pinned_host_arrays_have_no_cuda_array_interface():
    a = ad.array(pa.array([1, 2, 3], pa.int32())).to(ad.cuda_host())
    assert not hasattr(a, "__cuda_array_interface__")
    raises_cleanly(lambda: a.__cuda_array_interface__, AttributeError, "CUDA_HOST")


# --- errors, cleanly --------------------------------------------------------------------


def test_cai_stream_0_raises_value_error_naming_the_stream(cupy):
    x = cupy.arange(4, dtype=cupy.int32)
    raises_cleanly(lambda: ad.array(cai_of(x, stream=0)), ValueError, "stream", "0 is disallowed")


def test_a_strided_cupy_array_is_refused_as_not_contiguous(cupy):
    x = cupy.arange(10, dtype=cupy.int32)[::2]
    raises_cleanly(lambda: ad.array(x), TypeError, "contiguous")


def test_a_2d_cupy_array_is_refused_naming_its_dimensions(cupy):
    x = cupy.zeros((2, 3), dtype=cupy.float32)
    raises_cleanly(lambda: ad.array(x), TypeError, "2 dimensions")


def test_a_pageable_host_pointer_in_a_cai_dict_is_refused_naming_the_memory():
    host = np.arange(4, dtype=np.int64)
    interface = {
        "shape": (4,),
        "typestr": "<i8",
        "data": (host.ctypes.data, False),
        "version": 3,
        "strides": None,
        "stream": None,
    }
    raises_cleanly(
        lambda: ad.array(CaiObject(interface, host)),
        (TypeError, ValueError, RuntimeError),
        r"pageable|unregistered|host|memory type",
    )


def test_a_cai_mask_of_the_wrong_length_is_refused(cupy):
    data = cupy.arange(4, dtype=cupy.int32)
    mask = cupy.array([True, False, True])
    raises_cleanly(lambda: ad.array(cai_of(data, mask=mask)), ValueError, "mask has 3 values")


def test_pyarrow_refuses_our_cuda_arrays_with_an_exception_naming_the_device():
    values = pa.array([1, 2, 3], pa.int64())
    a = ad.array(values).to(ad.cuda())
    # Our CPU-only capsule method refuses device data ...
    raises_cleanly(a.__arrow_c_array__, ValueError, "CUDA", "CPU pointers")
    # ... and pyarrow (which prefers __arrow_c_device_array__) refuses a
    # device it was not built for, or, built with CUDA, keeps it on the GPU.
    refused_or_kept_on_the_gpu(lambda: pa.array(a))
    # Copied to the CPU, pyarrow takes it, equal to the original.
    assert pa.array(a.to(ad.cpu())).equals(values)

    batch = pa.record_batch({"a": values, "s": pa.array(["x", None, "z"])})
    on_gpu = ad.array(batch, device=ad.cuda())
    refused_or_kept_on_the_gpu(lambda: pa.record_batch(on_gpu))
    assert_batch_equal(pa.record_batch(on_gpu.to(ad.cpu())), batch)


def refused_or_kept_on_the_gpu(call):
    """pyarrow importing our CUDA data: an exception naming the device (a
    pyarrow without CUDA support), never a panic; or, for a pyarrow built
    with CUDA, data that stays on the GPU."""
    try:
        out = call()
    except BaseException as error:  # noqa: B036 - PanicException is a BaseException
        assert type(error).__name__ != "PanicException", f"a panic reached Python: {error}"
        assert isinstance(error, Exception), error
        assert re.search("device|cuda", str(error), re.IGNORECASE), str(error)
    else:
        assert out.device_type == pa.DeviceAllocationType.CUDA


BAD_CALLS = {
    "cuda(999)": lambda cp: ad.cuda(999),
    "cuda_host(999)": lambda cp: ad.cuda_host(999),
    "cuda_managed(999)": lambda cp: ad.cuda_managed(999),
    "cai stream 0": lambda cp: ad.array(cai_of(cp.arange(4), stream=0)),
    "cai strided": lambda cp: ad.array(cp.arange(10)[::3]),
    "cai 2-d": lambda cp: ad.array(cp.zeros((3, 3))),
    "cai complex": lambda cp: ad.array(cp.zeros(3, dtype=cp.complex64)),
    "cai mask of int32": lambda cp: ad.array(cai_of(cp.arange(3), mask=cp.arange(3, dtype=cp.int32))),
    "cai mask stream 0": lambda cp: ad.array(cai_of(cp.arange(3), mask=cai_of(cp.ones(3, dtype=cp.bool_), stream=0))),
    "dlpack nulls": lambda cp: ad.array(pa.array([1, None]), device=ad.cuda()).__dlpack__(),
    "dlpack string": lambda cp: ad.array(pa.array(["a"]), device=ad.cuda()).__dlpack__(),
    "dlpack stream 0": lambda cp: ad.array(pa.array([1]), device=ad.cuda()).__dlpack__(stream=0),
    "dlpack stream 2**70": lambda cp: ad.array(pa.array([1]), device=ad.cuda()).__dlpack__(stream=2**70),
    "cai of bool": lambda cp: ad.array(pa.array([True]), device=ad.cuda()).__cuda_array_interface__,
    "arrow_c_array of cuda": lambda cp: ad.array(pa.array([1]), device=ad.cuda()).__arrow_c_array__(),
}


@pytest.mark.parametrize("call", BAD_CALLS.values(), ids=BAD_CALLS.keys())
def test_bad_gpu_calls_raise_exceptions_never_panics(cupy, call):
    raises_cleanly(lambda: call(cupy), Exception)

"""DLPack 1.3's C exchange API (dlpack.h, `DLPackExchangeAPI`), both sides:
`arrow_device.array(obj)` reading the table that `type(obj)` publishes as
`__dlpack_c_exchange_api__` (a PyCapsule named "dlpack_exchange_api"; the
draft name `__c_dlpack_exchange_api__`, a capsule or an address, second),
and the table of `arrow_device.DeviceArray` itself, called through ctypes.

`arrow_device.array()` takes a `DeviceArray` as it is, so our consumer meets
our table through `ViaTable`: a type whose table forwards
`managed_tensor_from_py_object_no_sync` to DeviceArray's own function (a
ctypes callback that unwraps the array) and hands out DeviceArray's other
functions unchanged. Every tensor our table hands out has its deleter
wrapped (`watch`), so the tests see each one deleted exactly once.

Hostile tables are ctypes structs behind capsules on made-up types: NULL
functions, other major versions with and without a `prev_api` chain, a
producer that fails without setting an exception or answers no tensor.
Their tensors are `hostile_structs.Tensor`s, which count their deleter
calls.

Our table's functions are called with PYFUNCTYPE prototypes: the GIL stays
held, as dlpack.h requires, and an exception they set is raised.
"""

import ctypes
from ctypes import (
    CFUNCTYPE,
    POINTER,
    PYFUNCTYPE,
    Structure,
    byref,
    c_char_p,
    c_int,
    c_int32,
    c_int64,
    c_void_p,
    py_object,
)

import numpy as np
import pyarrow as pa
import pytest

import arrow_device as ad
import hostile_structs as h
from checks import NUMERIC, NUMERIC_IDS, host_values, raises_cleanly, settle

CPU, CUDA, EXT_DEV = 1, 2, 12
DLPACK_FLAG_BITMASK_READ_ONLY = 1
NAME = h.EXCHANGE_API_CAPSULE



# --- the table, in ctypes ------------------------------------------------------------


ExchangeHeader = h.DLPackExchangeAPIHeader
ExchangeAPI = h.DLPackExchangeAPI


REQUIRED = (
    "managed_tensor_allocator",
    "managed_tensor_from_py_object_no_sync",
    "managed_tensor_to_py_object_no_sync",
    "current_work_stream",
)

# Calling our functions: the GIL stays held and a set exception is raised.
FROM_PY_OBJECT = h.EXCHANGE_FROM_PY_OBJECT
TO_PY_OBJECT = h.EXCHANGE_TO_PY_OBJECT
CURRENT_WORK_STREAM = h.EXCHANGE_CURRENT_WORK_STREAM
# The allocator needs no GIL: called with it released (CFUNCTYPE).
SET_ERROR = CFUNCTYPE(None, c_void_p, c_char_p, c_char_p)
ALLOCATOR = CFUNCTYPE(c_int, c_void_p, POINTER(c_void_p), c_void_p, c_void_p)
# What a ctypes-made table holds.
FROM_PY_OBJECT_CALLBACK = CFUNCTYPE(c_int, c_void_p, POINTER(c_void_p))

_PyCapsule_GetPointer = PYFUNCTYPE(c_void_p, py_object, c_char_p)(("PyCapsule_GetPointer", ctypes.pythonapi))
_Py_DecRef = PYFUNCTYPE(None, py_object)(("Py_DecRef", ctypes.pythonapi))


table_of = h.exchange_table


OURS = table_of(ad.DeviceArray.__dlpack_c_exchange_api__)


def take_object(address):
    """The new reference a `to_py_object` wrote at `address`, as ours."""
    obj = ctypes.cast(c_void_p(address), py_object).value  # one more reference
    _Py_DecRef(obj)
    return obj


def our_from_py_object(obj):
    out = c_void_p()
    assert FROM_PY_OBJECT(OURS.managed_tensor_from_py_object_no_sync)(obj, byref(out)) == 0
    assert out.value
    return out.value


def our_to_py_object(tensor):
    out = c_void_p()
    assert TO_PY_OBJECT(OURS.managed_tensor_to_py_object_no_sync)(tensor, byref(out)) == 0
    return take_object(out.value)


def values_address(pa_array):
    return pa_array.buffers()[1].address + pa_array.offset * pa_array.type.bit_width // 8


# --- deleters, counted ------------------------------------------------------------------


class Watch:
    """One tensor's deleter calls."""

    def __init__(self, address):
        self.address = address
        self.calls = 0


# Watched tensors not yet deleted, by address.
_WATCHED = {}
# (watch, original deleter) by address; a deleter call for an address that
# is not watched (a second call) lands in _STRAY.
_STRAY = []


def _counting_deleter(address):
    entry = _WATCHED.pop(address, None)
    if entry is None:
        _STRAY.append(address)
        return
    watch, original = entry
    watch.calls += 1
    h.RELEASE_FN(original)(address)


COUNTING_DELETER = h.RELEASE_FN(_counting_deleter)


def watch(tensor):
    """Wraps the deleter of a versioned tensor at `tensor` (an address) to
    count its calls; returns the `Watch`."""
    managed = h.DLManagedTensorVersioned.from_address(tensor)
    w = Watch(tensor)
    _WATCHED[tensor] = (w, managed.deleter)
    managed.deleter = h.fn_address(COUNTING_DELETER)
    return w


@pytest.fixture(autouse=True)
def no_stray_deletions():
    _STRAY.clear()
    yield
    assert not _STRAY, f"deleters called twice, or for tensors never handed out: {_STRAY}"


# --- producer types with a table ------------------------------------------------------------


# Tables and callbacks that C may still point to: kept for the process, as
# dlpack.h's "valid for the life of the process" asks.
_KEEP = []


def exchange_api(version=(1, 3), prev_api=None, **functions):
    """A table with DeviceArray's functions, `functions` replacing some
    (`None` for NULL, a ctypes callback, or an address)."""
    table = ExchangeAPI()
    table.header.version = h.DLPackVersion(*version)
    table.header.prev_api = prev_api
    for name, _ in ExchangeAPI._fields_[1:]:
        value = functions.get(name, getattr(OURS, name))
        if value is not None and not isinstance(value, int):
            _KEEP.append(value)
            value = h.fn_address(value)
        setattr(table, name, value)
    _KEEP.append(table)
    return table


def capsule_of(table, name=NAME):
    return h.capsule(ctypes.addressof(table), name)


class Producer:
    """A DLPack producer over an `arrow_device` array: `__dlpack__` and
    `__dlpack_device__` forward to it, counting the `__dlpack__` calls; the
    table (set on a subclass) is what these tests vary."""

    def __init__(self, array):
        self.array = array
        self.dlpack_calls = 0
        self.table_calls = 0
        self.watches = []

    def __dlpack__(self, **kwargs):
        self.dlpack_calls += 1
        return self.array.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.array.__dlpack_device__()


def _forward_from_py_object(address, out):
    """`managed_tensor_from_py_object_no_sync` of ViaTable-like types:
    DeviceArray's own, on the wrapped array, with the tensor watched."""
    producer = ctypes.cast(c_void_p(address), py_object).value
    producer.table_calls += 1
    status = FROM_PY_OBJECT(OURS.managed_tensor_from_py_object_no_sync)(producer.array, out)
    if status == 0:
        producer.watches.append(watch(out[0]))
    return status


FORWARD = FROM_PY_OBJECT_CALLBACK(_forward_from_py_object)


def producer_type(name, attributes):
    return type(name, (Producer,), attributes)


VIA_TABLE = exchange_api(managed_tensor_from_py_object_no_sync=FORWARD)
ViaTable = producer_type("ViaTable", {"__dlpack_c_exchange_api__": capsule_of(VIA_TABLE)})


def hostile_type(name, attribute="__dlpack_c_exchange_api__", **table):
    return producer_type(name, {attribute: capsule_of(exchange_api(**table))})


def answering(result):
    """A `managed_tensor_from_py_object_no_sync` that answers `result`
    (status, tensor address or None) and counts its calls on the producer."""

    def from_py_object(address, out):
        ctypes.cast(c_void_p(address), py_object).value.table_calls += 1
        status, tensor = result
        out[0] = tensor
        return status

    return FROM_PY_OBJECT_CALLBACK(from_py_object)


def int64_source():
    return pa.array([3, 1, 4, 1, 5], pa.int64())


# --- our table ------------------------------------------------------------------------------


def test_our_type_publishes_one_capsule_under_both_names():
    capsule = ad.DeviceArray.__dlpack_c_exchange_api__
    assert type(capsule).__name__ == "PyCapsule"
    assert 'capsule object "dlpack_exchange_api"' in repr(capsule)
    assert ad.DeviceArray.__c_dlpack_exchange_api__ is capsule
    array = ad.array(int64_source())
    assert type(array).__dlpack_c_exchange_api__ is capsule
    assert array.__dlpack_c_exchange_api__ is capsule


def test_our_table_is_version_1_3_with_every_required_function():
    assert (OURS.header.version.major, OURS.header.version.minor) == (1, 3)
    assert OURS.header.prev_api is None
    for name in REQUIRED:
        assert getattr(OURS, name), f"{name} is NULL"
    # No borrowed view: DeviceArray has no room for its shape and strides.
    assert OURS.dltensor_from_py_object_no_sync is None


def test_our_from_py_object_describes_the_values_in_place_read_only():
    source = pa.array(np.arange(10, dtype=np.int32)).slice(2, 6)
    array = ad.array(source)
    tensor = our_from_py_object(array)
    w = watch(tensor)
    managed = h.DLManagedTensorVersioned.from_address(tensor)
    t = managed.dl_tensor
    assert managed.version.major == 1
    assert managed.flags & DLPACK_FLAG_BITMASK_READ_ONLY
    assert (t.device.device_type, t.device.device_id) == (CPU, 0)
    assert (t.ndim, t.byte_offset) == (1, 0)
    assert (t.dtype.code, t.dtype.bits, t.dtype.lanes) == (h.DL_INT, 32, 1)
    assert c_int64.from_address(t.shape).value == 6
    assert c_int64.from_address(t.strides).value == 1
    assert t.data == values_address(source)
    h.RELEASE_FN(managed.deleter)(tensor)
    assert w.calls == 1


def test_our_from_py_object_of_an_emulated_array_names_its_device():
    array = ad.array(pa.array([1.5, 2.5], pa.float64()), device=ad.emulated(5))
    tensor = our_from_py_object(array)
    w = watch(tensor)
    t = h.DLManagedTensorVersioned.from_address(tensor).dl_tensor
    assert (t.device.device_type, t.device.device_id) == (EXT_DEV, 5)
    back = our_to_py_object(tensor)
    assert back.device == ad.emulated(5)
    assert host_values(back).to_pylist() == [1.5, 2.5]
    del back
    settle()
    assert w.calls == 1


@pytest.mark.parametrize("source, pattern", [
    (pa.array(["a", "b"]), "fixed-width numbers"),
    (pa.array([1, None, 3]), "nulls"),
], ids=["string", "nulls"])
def test_our_from_py_object_refuses_what_dlpack_cannot_carry_with_buffer_error(source, pattern):
    out = c_void_p(1234)
    function = FROM_PY_OBJECT(OURS.managed_tensor_from_py_object_no_sync)
    raises_cleanly(lambda: function(ad.array(source), byref(out)), BufferError, pattern)
    assert out.value is None


def test_our_from_py_object_of_another_type_is_a_type_error():
    function = FROM_PY_OBJECT(OURS.managed_tensor_from_py_object_no_sync)
    out = c_void_p()
    raises_cleanly(lambda: function(int64_source(), byref(out)), TypeError, "takes a DeviceArray", "pyarrow")
    raises_cleanly(lambda: function(ad.array(int64_source()), None), ValueError, "out is NULL")


def test_our_to_py_object_takes_the_tensor_over_and_deletes_it_once():
    source = int64_source()
    tensor = our_from_py_object(ad.array(source))
    w = watch(tensor)
    back = our_to_py_object(tensor)
    assert isinstance(back, ad.DeviceArray)
    assert pa.array(back).equals(source)
    assert values_address(pa.array(back)) == values_address(source)
    assert w.calls == 0
    del back
    settle()
    assert w.calls == 1


@pytest.mark.parametrize("tensor, error, pattern", [
    (lambda: h.Tensor(h.i64s([1, 2, 3]), versioned=True, version=(2, 0)), TypeError, "version 2.0"),
    (lambda: h.Tensor(h.i64s([1, 2, 3, 4]), shape=(2, 2), versioned=True), Exception, "dimension"),
    (lambda: h.Tensor(h.i64s([1]), shape=(1,), code=5, bits=64, versioned=True), Exception, "complex|type"),
], ids=["version-2", "2-d", "complex"])
def test_our_to_py_object_of_a_tensor_it_cannot_take_deletes_it_and_raises(tensor, error, pattern):
    t = tensor()
    out = c_void_p()
    function = TO_PY_OBJECT(OURS.managed_tensor_to_py_object_no_sync)
    raises_cleanly(lambda: function(ctypes.addressof(t.managed), byref(out)), error, pattern)
    assert t.deleter_calls == 1
    assert out.value is None


def test_our_to_py_object_of_null_is_a_value_error():
    function = TO_PY_OBJECT(OURS.managed_tensor_to_py_object_no_sync)
    raises_cleanly(lambda: function(None, byref(c_void_p())), ValueError, "NULL")


def allocate(device_type, shape, code, bits, set_error=None):
    """Our allocator on a prototype; returns (status, tensor address)."""
    extents = (c_int64 * max(1, len(shape)))(*shape)
    prototype = h.DLTensor()
    prototype.device = h.DLDevice(device_type, 0)
    prototype.ndim = len(shape)
    prototype.dtype = h.DLDataType(code, bits, 1)
    prototype.shape = ctypes.addressof(extents)
    out = c_void_p()
    callback = None if set_error is None else h.fn_address(set_error)
    status = ALLOCATOR(OURS.managed_tensor_allocator)(ctypes.addressof(prototype), byref(out), None, callback)
    return status, out.value


def test_our_allocator_makes_a_zeroed_writable_cpu_tensor_that_comes_back_as_an_array():
    status, tensor = allocate(CPU, (5,), h.DL_INT, 32)
    assert status == 0 and tensor
    w = watch(tensor)
    managed = h.DLManagedTensorVersioned.from_address(tensor)
    t = managed.dl_tensor
    assert managed.flags == 0  # writable: the caller allocates to write
    assert (t.device.device_type, t.device.device_id, t.ndim) == (CPU, 0, 1)
    assert c_int64.from_address(t.shape).value == 5 and c_int64.from_address(t.strides).value == 1
    assert t.data % 64 == 0
    assert ctypes.string_at(t.data, 20) == bytes(20)
    ctypes.memmove(t.data, np.array([7, 8, 9, 10, 11], np.int32).tobytes(), 20)
    back = our_to_py_object(tensor)
    assert pa.array(back).to_pylist() == [7, 8, 9, 10, 11]
    del back
    settle()
    assert w.calls == 1


def test_our_allocator_writes_row_major_strides_and_null_data_when_empty():
    status, tensor = allocate(CPU, (3, 4, 2), h.DL_FLOAT, 64)
    assert status == 0
    w = watch(tensor)
    t = h.DLManagedTensorVersioned.from_address(tensor).dl_tensor
    assert [c_int64.from_address(t.shape + 8 * i).value for i in range(3)] == [3, 4, 2]
    assert [c_int64.from_address(t.strides + 8 * i).value for i in range(3)] == [8, 2, 1]
    h.RELEASE_FN(h.DLManagedTensorVersioned.from_address(tensor).deleter)(tensor)
    assert w.calls == 1

    status, empty = allocate(CPU, (0,), h.DL_UINT, 16)
    assert status == 0
    w = watch(empty)
    assert h.DLManagedTensorVersioned.from_address(empty).dl_tensor.data is None
    back = our_to_py_object(empty)
    assert (len(back), back.type) == (0, "UInt16")
    del back
    settle()
    assert w.calls == 1


@pytest.mark.parametrize("device_type, shape, kind, pattern", [
    (CUDA, (4,), b"TypeError", "CPU only"),
    (EXT_DEV, (4,), b"TypeError", "CPU only"),
    (CPU, (2, -1), b"ValueError", "negative extent"),
    (CPU, (2**62, 16), b"ValueError", "overflows"),
], ids=["cuda", "emulated", "negative", "overflow"])
def test_our_allocator_reports_what_it_refuses_through_set_error(device_type, shape, kind, pattern):
    errors = []
    set_error = SET_ERROR(lambda ctx, kind, message: errors.append((ctx, kind, message.decode())))
    status, tensor = allocate(device_type, shape, h.DL_INT, 64, set_error)
    assert (status, tensor) == (-1, None)
    assert len(errors) == 1, errors
    ctx, got_kind, message = errors[0]
    assert ctx is None and got_kind == kind
    assert "managed_tensor_allocator" in message and pattern in message, message
    # Without a SetError it fails the same way, silently.
    assert allocate(device_type, shape, h.DL_INT, 64) == (-1, None)


def test_our_current_work_stream_is_null_off_cuda():
    function = CURRENT_WORK_STREAM(OURS.current_work_stream)
    for device_type, device_id in [(CPU, 0), (EXT_DEV, 3), (3, 0)]:  # 3: CUDA_HOST
        out = c_void_p(1234)
        assert function(device_type, device_id, byref(out)) == 0
        assert out.value is None
    raises_cleanly(lambda: function(CPU, 0, None), ValueError, "out_current_stream is NULL")


def test_our_current_work_stream_on_cuda_is_the_interface_stream_or_a_clean_error():
    function = CURRENT_WORK_STREAM(OURS.current_work_stream)
    out = c_void_p()
    if ad.DeviceType.CUDA in {d.type for d in ad.devices()}:
        assert function(CUDA, 0, byref(out)) == 0
        assert out.value and out.value > 2  # a stream of ours, not a default one
        again = c_void_p()
        function(CUDA, 0, byref(again))
        assert again.value == out.value  # one stream for the process
    else:
        raises_cleanly(lambda: function(CUDA, 0, byref(out)), (TypeError, RuntimeError), "cuda")


# --- our consumer reading our table -----------------------------------------------------


@pytest.mark.parametrize("dtype", NUMERIC, ids=NUMERIC_IDS)
def test_our_consumer_reads_our_table_for_every_dtype_zero_copy(dtype):
    source = pa.array((np.arange(12) % 100).astype(dtype)).slice(2, 7)
    producer = ViaTable(ad.array(source))
    got = ad.array(producer, validate="full")
    assert (producer.table_calls, producer.dlpack_calls) == (1, 0)
    assert got.device == ad.cpu()
    back = pa.array(got)
    assert back.equals(source)
    assert values_address(back) == values_address(source)
    (w,) = producer.watches
    assert w.calls == 0
    del got, back
    settle()
    assert w.calls == 1


@pytest.mark.parametrize("device_id", [0, 3])
def test_our_consumer_reads_our_table_for_emulated_arrays_on_their_device(device_id):
    values = pa.array(np.arange(50, dtype=np.float32))
    producer = ViaTable(ad.array(values, device=ad.emulated(device_id)))
    got = ad.array(producer)
    assert (producer.table_calls, producer.dlpack_calls) == (1, 0)
    assert got.device == ad.emulated(device_id)
    assert host_values(got).equals(values)
    del got
    settle()
    assert [w.calls for w in producer.watches] == [1]


def test_every_tensor_of_our_table_is_deleted_once_when_its_arrays_go(pool, big_batch):
    column = big_batch()["x"]
    producer = ViaTable(ad.array(column))
    held = []
    for i in range(10):
        got = ad.array(producer)
        held.append(got.slice(i, 100) if i % 2 else got)
    assert producer.table_calls == 10 and producer.dlpack_calls == 0
    assert [w.calls for w in producer.watches] == [0] * 10
    assert pa.array(held[1]).to_pylist() == column.slice(1, 100).to_pylist()
    del held, got, column
    settle()
    assert [w.calls for w in producer.watches] == [1] * 10
    del producer
    assert pool.held() == 0


def test_a_type_without_a_table_goes_through_dlpack():
    producer = Producer(ad.array(int64_source()))
    assert pa.array(ad.array(producer)).equals(int64_source())
    assert (producer.table_calls, producer.dlpack_calls) == (0, 1)


def test_a_subclass_that_sets_the_table_to_none_goes_through_dlpack():
    OptedOut = type("OptedOut", (ViaTable,), {"__dlpack_c_exchange_api__": None})
    producer = OptedOut(ad.array(int64_source()))
    assert pa.array(ad.array(producer)).equals(int64_source())
    assert (producer.table_calls, producer.dlpack_calls) == (0, 1)


def test_a_table_set_to_none_opts_out_of_an_inherited_draft_table_too():
    Draft = producer_type("Draft", {"__c_dlpack_exchange_api__": capsule_of(VIA_TABLE)})
    OptedOut = type("OptedOut", (Draft,), {"__dlpack_c_exchange_api__": None})
    producer = OptedOut(ad.array(int64_source()))
    assert pa.array(ad.array(producer)).equals(int64_source())
    assert (producer.table_calls, producer.dlpack_calls) == (0, 1)


def test_numpy_arrays_without_a_table_still_come_in_through_dlpack_every_time():
    # numpy.ndarray is immutable: looked up once, then known to have none.
    for _ in range(3):
        values = np.arange(5, dtype=np.int16)
        assert pa.array(ad.array(values)).to_pylist() == [0, 1, 2, 3, 4]


def test_the_table_is_read_from_the_type_not_the_instance():
    producer = Producer(ad.array(int64_source()))
    producer.__dlpack_c_exchange_api__ = capsule_of(VIA_TABLE)
    assert pa.array(ad.array(producer)).equals(int64_source())
    assert (producer.table_calls, producer.dlpack_calls) == (0, 1)


@pytest.mark.parametrize("form", ["capsule", "address"])
def test_the_draft_attribute_is_read_as_a_capsule_or_an_address(form):
    value = capsule_of(VIA_TABLE) if form == "capsule" else ctypes.addressof(VIA_TABLE)
    Draft = producer_type("Draft", {"__c_dlpack_exchange_api__": value})
    producer = Draft(ad.array(int64_source()))
    assert pa.array(ad.array(producer)).equals(int64_source())
    assert (producer.table_calls, producer.dlpack_calls) == (1, 0)


def test_the_1_3_attribute_wins_over_the_draft_one():
    Both = producer_type("Both", {
        "__dlpack_c_exchange_api__": capsule_of(VIA_TABLE),
        "__c_dlpack_exchange_api__": "not read",
    })
    producer = Both(ad.array(int64_source()))
    assert pa.array(ad.array(producer)).equals(int64_source())
    assert (producer.table_calls, producer.dlpack_calls) == (1, 0)


# --- hostile tables --------------------------------------------------------------------------


@pytest.mark.parametrize("function", REQUIRED)
def test_a_table_with_a_null_required_function_is_a_value_error_naming_it(function):
    Hostile = hostile_type("NullFunction", **{"managed_tensor_from_py_object_no_sync": FORWARD, function: None})
    producer = Hostile(ad.array(int64_source()))
    raises_cleanly(lambda: ad.array(producer), ValueError, f"NULL {function}", "NullFunction", "dlpack.h requires")
    assert (producer.table_calls, producer.dlpack_calls) == (0, 0)


@pytest.mark.parametrize("value, error, pattern", [
    ("a string", TypeError, "must be a PyCapsule named \"dlpack_exchange_api\".*got str"),
    (0, ValueError, "NULL DLPackExchangeAPI pointer"),
    (-5, TypeError, "got int"),
    (None, None, None),  # opts out: __dlpack__
], ids=["str", "address-0", "negative", "none"])
def test_an_attribute_that_is_no_table_is_refused_by_type(value, error, pattern):
    Hostile = producer_type("NoTable", {"__dlpack_c_exchange_api__": value})
    producer = Hostile(ad.array(int64_source()))
    if error is None:
        assert pa.array(ad.array(producer)).equals(int64_source())
        assert producer.dlpack_calls == 1
    else:
        raises_cleanly(lambda: ad.array(producer), error, pattern, "NoTable")
        assert producer.dlpack_calls == 0


def test_a_capsule_with_another_name_is_a_value_error_naming_both():
    Hostile = producer_type("WrongName", {"__dlpack_c_exchange_api__": capsule_of(VIA_TABLE, b"dltensor")})
    producer = Hostile(ad.array(int64_source()))
    raises_cleanly(lambda: ad.array(producer), ValueError, "dlpack_exchange_api", "dltensor", "WrongName")
    assert (producer.table_calls, producer.dlpack_calls) == (0, 0)


@pytest.mark.parametrize("version", [(2, 0), (0, 9)], ids=["2.0", "0.9"])
def test_a_table_of_another_major_version_without_a_chain_falls_back_to_dlpack(version):
    # Its functions are never called: NULL, so a call would crash.
    Future = producer_type("Future", {"__dlpack_c_exchange_api__": capsule_of(exchange_api(
        version=version, **{name: None for name, _ in ExchangeAPI._fields_[1:]}
    ))})
    producer = Future(ad.array(int64_source()))
    assert pa.array(ad.array(producer)).equals(int64_source())
    assert (producer.table_calls, producer.dlpack_calls) == (0, 1)


def test_a_table_of_major_version_2_is_read_through_its_prev_api_chain():
    version_1 = exchange_api(version=(1, 3), managed_tensor_from_py_object_no_sync=FORWARD)
    version_2 = exchange_api(
        version=(2, 0), prev_api=ctypes.addressof(version_1),
        **{name: None for name, _ in ExchangeAPI._fields_[1:]},
    )
    Future = producer_type("Future", {"__dlpack_c_exchange_api__": capsule_of(version_2)})
    producer = Future(ad.array(int64_source()))
    assert pa.array(ad.array(producer)).equals(int64_source())
    assert (producer.table_calls, producer.dlpack_calls) == (1, 0)


def test_a_prev_api_chain_that_loops_falls_back_to_dlpack_without_hanging():
    looping = exchange_api(version=(2, 0), **{name: None for name, _ in ExchangeAPI._fields_[1:]})
    looping.header.prev_api = ctypes.addressof(looping)
    Looping = producer_type("Looping", {"__dlpack_c_exchange_api__": capsule_of(looping)})
    producer = Looping(ad.array(int64_source()))
    assert pa.array(ad.array(producer)).equals(int64_source())
    assert producer.dlpack_calls == 1


def test_a_producer_that_fails_without_an_exception_is_a_runtime_error_naming_it():
    Hostile = hostile_type("Silent", managed_tensor_from_py_object_no_sync=answering((-1, None)))
    producer = Hostile(ad.array(int64_source()))
    raises_cleanly(
        lambda: ad.array(producer), RuntimeError,
        "Silent", "managed_tensor_from_py_object_no_sync returned -1 without setting a Python exception",
    )
    assert (producer.table_calls, producer.dlpack_calls) == (1, 0)


def test_a_producer_that_answers_no_tensor_is_a_value_error():
    Hostile = hostile_type("Empty", managed_tensor_from_py_object_no_sync=answering((0, None)))
    producer = Hostile(ad.array(int64_source()))
    raises_cleanly(lambda: ad.array(producer), ValueError, "returned 0 but no tensor", "Empty")
    assert producer.table_calls == 1


def test_a_producer_with_our_table_and_another_type_gets_our_type_error():
    Impostor = producer_type("Impostor", {"__dlpack_c_exchange_api__": ad.DeviceArray.__dlpack_c_exchange_api__})
    producer = Impostor(ad.array(int64_source()))
    raises_cleanly(lambda: ad.array(producer), TypeError, "takes a DeviceArray", "Impostor")
    assert producer.dlpack_calls == 0


@pytest.mark.parametrize("tensor, error, pattern", [
    (lambda: h.Tensor(h.i64s([1, 2, 3]), versioned=True, version=(2, 0)), TypeError, "version 2.0"),
    (lambda: h.Tensor(h.i64s([1, 2, 3, 4]), shape=(2, 2), versioned=True), Exception, "dimension"),
    (lambda: h.Tensor(None, shape=(3,), versioned=True), ValueError, "NULL"),
], ids=["version-2", "2-d", "null-data"])
def test_a_tensor_the_consumer_refuses_is_deleted_once(tensor, error, pattern):
    t = tensor()
    Hostile = hostile_type("Refused", managed_tensor_from_py_object_no_sync=answering((0, ctypes.addressof(t.managed))))
    raises_cleanly(lambda: ad.array(Hostile(ad.array(int64_source()))), error, pattern)
    assert t.deleter_calls == 1


def test_a_foreign_tensor_lives_as_long_as_the_array_then_is_deleted_once():
    t = h.Tensor(h.i64s([10, 20, 30]), versioned=True)
    Foreign = hostile_type("Foreign", managed_tensor_from_py_object_no_sync=answering((0, ctypes.addressof(t.managed))))
    producer = Foreign(ad.array(int64_source()))
    got = ad.array(producer)
    assert pa.array(got).to_pylist() == [10, 20, 30]
    assert (producer.table_calls, producer.dlpack_calls, t.deleter_calls) == (1, 0, 0)
    del got
    settle()
    assert t.deleter_calls == 1

"""CUDA Array Interface and CUDA entry points in a process without CUDA.

Every `__cuda_array_interface__` dict is checked by the library's rules
(`arrow_device::cai`) first: a bad dict raises `ValueError` (malformed) or
`TypeError` (valid, but no Arrow array here holds it) naming the entry; only
a valid one reaches the CUDA device, which is absent here, so it raises
`RuntimeError("CUDA is not available ...")`. CUDA arrays are CPU exports
relabelled as CUDA: their memory is only described, never read.
"""

import ctypes
import gc
import weakref

import numpy as np
import pyarrow as pa
import pytest

import arrow_device as ad
from arrow_device import DeviceType

PTR = 0x7F00_0000_1000
CUDA_ABSENT = "CUDA is not available in this process"

_capsule_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi)
)


class FakeCAI:
    """An object exposing a given `__cuda_array_interface__`."""

    def __init__(self, interface):
        self.__cuda_array_interface__ = interface


def valid(**changes):
    """A valid version 3 dict of 4 float32 values, with `changes` (a value of
    `...` removes the key)."""
    interface = {
        "shape": (4,),
        "typestr": "<f4",
        "data": (PTR, False),
        "version": 3,
        "strides": None,
        "stream": None,
    }
    for key, value in changes.items():
        if value is ...:
            interface.pop(key, None)
        else:
            interface[key] = value
    return interface


def import_error(interface):
    with pytest.raises(Exception) as info:
        ad.array(FakeCAI(interface))
    return info


class Relabelled:
    """`__arrow_c_device_array__` of `values` (CPU memory) with another
    device type written into the struct."""

    def __init__(self, values, device_type, device_id=0):
        self.values = ad.array(values)
        self.device_type = int(device_type)
        self.device_id = device_id

    def __arrow_c_device_array__(self, requested_schema=None, **kwargs):
        schema, array = self.values.__arrow_c_device_array__()
        address = _capsule_pointer(array, b"arrow_device_array")
        # ArrowDeviceArray: device_id int64 @80, device_type int32 @88.
        ctypes.c_int64.from_address(address + 80).value = self.device_id
        ctypes.c_int32.from_address(address + 88).value = self.device_type
        return schema, array


def on(values, device_type):
    return ad.array(Relabelled(values, device_type))


# --- import: valid dicts reach the missing CUDA device -------------------------


@pytest.mark.parametrize(
    "interface",
    [
        valid(),
        valid(version=2, stream=...),
        valid(strides=(4,)),
        valid(strides=...),
        valid(stream=1),
        valid(stream=2),
        valid(stream=0x5555_0000_1234),
        valid(shape=(0,), data=(0, False)),
        valid(shape=(0,), data=(PTR, True)),  # zero-size: the pointer is ignored
        valid(shape=()),
        valid(shape=(1,), strides=(12345,)),  # any stride for one value
        valid(typestr="|b1"),
        valid(typestr="<M8[ns]"),
        valid(typestr="<m8[us]"),
        valid(typestr="=i8"),
        valid(descr=[("", "<f4")]),
        valid(mask=FakeCAI(valid(typestr="|b1", data=(PTR + 64, False)))),
        valid(shape=(np.int64(4),), data=(np.uint64(PTR), np.bool_(False))),
        valid(shape=[4], data=[PTR, False]),  # lists read as tuples
        dict(valid(), unknown_key=object()),
    ],
    ids=[
        "v3", "v2", "item-size-stride", "no-strides-key", "legacy-stream",
        "per-thread-stream", "stream-handle", "zero-size", "zero-size-pointer",
        "0-d", "one-value-any-stride", "bool", "datetime64", "timedelta64",
        "native-order", "plain-descr", "mask", "numpy-scalars", "lists",
        "unknown-key",
    ],
)
def test_valid_interfaces_reach_the_absent_cuda_device(interface):
    info = import_error(interface)
    assert info.type is RuntimeError
    assert CUDA_ABSENT in str(info.value)
    assert "__cuda_array_interface__" in str(info.value)


@pytest.mark.parametrize(
    "interface, error, needle",
    [
        (valid(stream=0), ValueError, "['stream']: 0 is disallowed"),
        (valid(stream=-1), ValueError, "['stream']: -1 is not a stream"),
        (valid(stream=True), ValueError, "['stream']: expected None or an int, found bool True"),
        (valid(stream="1"), ValueError, "['stream']: expected None or an int"),
        (valid(typestr="<c8"), TypeError, "typestr \"<c8\" has no Arrow type"),
        (valid(typestr="|O"), ValueError, "\"|O\" is not a type string"),
        (valid(typestr=">f4"), TypeError, "big-endian"),
        (valid(typestr="<M8[D]"), TypeError, "unit [D]"),
        (valid(typestr=4), ValueError, "['typestr']: expected a str, found int 4"),
        (valid(shape=(2, 2)), TypeError, "has 2 dimensions"),
        (valid(shape=(4, 1)), TypeError, "flatten"),
        (valid(shape=(-1,)), ValueError, "['shape']: size -1 is negative"),
        (valid(shape="4"), ValueError, "['shape']: expected a tuple of ints"),
        (valid(strides=(8,)), TypeError, "not contiguous: stride 8 bytes, expected 4"),
        (valid(strides=(-4,)), TypeError, "not contiguous"),
        (valid(strides=(4, 4)), ValueError, "2 strides for 1 dimensions"),
        (valid(data=(0, False)), ValueError, "['data']: pointer is 0 but the array has 4 values"),
        (valid(data=(-8, False)), ValueError, "['data']: pointer -8 is not a valid address"),
        (valid(data=(PTR,)), ValueError, "['data']: expected (pointer: int, read_only: bool)"),
        (valid(data=PTR), ValueError, "['data']: expected a tuple"),
        (valid(version=1), TypeError, "version 1 is not supported"),
        (valid(version=4), TypeError, "version 4 is not supported"),
        (valid(version="3"), ValueError, "['version']: expected an int"),
        (valid(descr=[("a", "<f4"), ("b", "<i4")]), TypeError, "structured"),
        (valid(mask=FakeCAI(valid(typestr="<i4"))), TypeError, "['mask']['typestr']"),
        (valid(mask=FakeCAI(valid(shape=(3,), typestr="|b1"))), ValueError, "the mask has 3 values, the array 4"),
        (valid(mask=FakeCAI(valid(typestr="|b1", stream=0))), ValueError, "['mask']['stream']: 0 is disallowed"),
        (valid(mask=FakeCAI(valid(typestr=...))), ValueError, "['mask']['typestr']: missing"),
        (valid(mask=7), ValueError, "['mask']: expected None or an object exposing __cuda_array_interface__"),
    ],
)
def test_invalid_interfaces_raise_before_cuda_is_needed(interface, error, needle):
    info = import_error(interface)
    assert info.type is error, info.value
    assert needle in str(info.value)
    assert CUDA_ABSENT not in str(info.value)


@pytest.mark.parametrize("key", ["shape", "typestr", "data", "version"])
def test_missing_required_keys_are_named(key):
    info = import_error(valid(**{key: ...}))
    assert info.type is ValueError
    assert str(info.value) == (
        f"__cuda_array_interface__['{key}']: missing (a required entry of the CUDA Array Interface)"
    )


def test_an_interface_that_is_not_a_dict_is_a_type_error():
    with pytest.raises(TypeError, match="__cuda_array_interface__ must be a dict, got list"):
        ad.array(FakeCAI([("shape", (4,))]))


def test_a_mask_that_is_its_own_mask_does_not_recurse_forever():
    mask = FakeCAI(None)
    mask.__cuda_array_interface__ = valid(typestr="|b1", mask=mask)
    with pytest.raises(TypeError, match="a mask cannot have a mask"):
        ad.array(FakeCAI(valid(mask=mask)))


def test_a_failed_import_keeps_no_reference_to_the_producer():
    producer = FakeCAI(valid())
    ref = weakref.ref(producer)
    with pytest.raises(RuntimeError):
        ad.array(producer)
    del producer
    gc.collect()
    assert ref() is None


def test_the_interface_is_read_after_the_arrow_protocols():
    class Both(FakeCAI):
        def __arrow_c_array__(self, requested_schema=None):
            return pa.array([1, 2, 3]).__arrow_c_array__()

    assert len(ad.array(Both(valid(stream=0)))) == 3


def test_the_interface_is_read_before_dlpack():
    class Both(FakeCAI):
        def __dlpack__(self, **kwargs):
            raise AssertionError("DLPack must not be asked")

    with pytest.raises(ValueError, match="0 is disallowed"):
        ad.array(Both(valid(stream=0)))


def test_an_attribute_error_from_the_property_means_absent():
    class CpuTensor:
        """Like a PyTorch CPU tensor: the property raises AttributeError."""

        @property
        def __cuda_array_interface__(self):
            raise AttributeError("Can't get __cuda_array_interface__ on non-CUDA tensor")

        def __dlpack__(self, **kwargs):
            return np.arange(3, dtype=np.int32).__dlpack__(**kwargs)

        def __dlpack_device__(self):
            return (1, 0)

    assert ad.array(CpuTensor()).type == "Int32"


# --- CUDA devices ---------------------------------------------------------------


@pytest.mark.parametrize("make", [ad.cuda, ad.cuda_host, ad.cuda_managed])
def test_cuda_devices_raise_runtime_error(make):
    for args in [(), (0,), (3,)]:
        with pytest.raises(RuntimeError, match=CUDA_ABSENT):
            make(*args)
    with pytest.raises(ValueError, match="CUDA device ids are 0 or more, got -1"):
        make(-1)


def test_devices_does_not_list_cuda():
    types = {device.type for device in ad.devices()}
    assert types == {DeviceType.CPU, DeviceType.EXT_DEV}


# --- DeviceArray.__cuda_array_interface__ ----------------------------------------


@pytest.mark.parametrize(
    "array",
    [
        lambda: ad.array(pa.array([1, 2, 3], pa.int32())),
        lambda: ad.array(pa.array([1, 2, 3], pa.int32()), device=ad.emulated(0)),
        lambda: on(pa.array([1, 2, 3], pa.int32()), DeviceType.CUDA_HOST),
        lambda: on(pa.array([1, None, 3], pa.int32()), DeviceType.CUDA),
        lambda: on(pa.array(["a", "b"]), DeviceType.CUDA),
        lambda: on(pa.array([True, False]), DeviceType.CUDA),
    ],
    ids=["cpu", "emulated", "cuda-host", "cuda-nulls", "cuda-string", "cuda-bool"],
)
def test_interface_is_absent_where_it_cannot_describe_the_array(array):
    array = array()
    assert not hasattr(array, "__cuda_array_interface__")
    with pytest.raises(AttributeError, match="__cuda_array_interface__: "):
        array.__cuda_array_interface__


def test_cpu_arrays_say_why_they_have_no_interface():
    with pytest.raises(AttributeError, match="this array is on CPU"):
        ad.array(pa.array([1.0])).__cuda_array_interface__


@pytest.mark.parametrize("device_type", [DeviceType.CUDA, DeviceType.CUDA_MANAGED])
@pytest.mark.parametrize(
    "values, typestr",
    [
        (pa.array([1, 2, 3], pa.int8()), "|i1"),
        (pa.array([1, 2, 3], pa.uint16()), "<u2"),
        (pa.array([1, 2, 3], pa.int64()), "<i8"),
        (pa.array([1.0, 2.0, 3.0], pa.float32()), "<f4"),
        (pa.array([1, 2, 3], pa.timestamp("us")), "<M8[us]"),
        (pa.array([1, 2, 3], pa.duration("ns")), "<m8[ns]"),
    ],
)
def test_cuda_arrays_describe_themselves_in_version_3(device_type, values, typestr):
    array = on(values, device_type)
    interface = array.__cuda_array_interface__
    assert interface == {
        "shape": (3,),
        "typestr": typestr,
        "data": (values.buffers()[1].address, True),
        "version": 3,
        "strides": None,
        "stream": None,
    }
    # NumPy reads the same type from the typestr.
    assert np.dtype(interface["typestr"]).itemsize == values.type.bit_width // 8
    # And the dict is one this library accepts, up to the missing device.
    with pytest.raises(RuntimeError, match=CUDA_ABSENT):
        ad.array(FakeCAI(interface))


def test_a_slice_points_at_its_first_value_and_an_empty_one_at_zero():
    values = pa.array(np.arange(10, dtype=np.int32))
    array = on(values, DeviceType.CUDA)
    assert ad.array(array).__cuda_array_interface__["data"][0] == values.buffers()[1].address
    sliced = on(values.slice(4, 3), DeviceType.CUDA).__cuda_array_interface__
    assert sliced["shape"] == (3,)
    assert sliced["data"] == (values.buffers()[1].address + 16, True)
    empty = on(values.slice(10, 0), DeviceType.CUDA).__cuda_array_interface__
    assert (empty["shape"], empty["data"]) == ((0,), (0, True))


def test_a_cuda_array_is_imported_through_its_arrow_protocol_not_its_interface():
    # DeviceArray has both; the Arrow protocol comes first, so no CUDA needed.
    array = on(pa.array([1, 2, 3], pa.int32()), DeviceType.CUDA)
    again = ad.array(array)
    assert again.device.type == DeviceType.CUDA


# --- DLPack's stream argument on the CPU ------------------------------------------


def test_dlpack_stream_on_the_cpu_is_none_or_minus_one():
    values = ad.array(pa.array([1, 2], pa.int32()))
    assert np.from_dlpack(values).tolist() == [1, 2]
    values.__dlpack__(stream=None)
    values.__dlpack__(stream=-1)
    for bad in (0, 1, 2, 3, -2, 2**40):
        with pytest.raises(ValueError, match=r"stream must be None or -1 for device type CPU \(a device without streams\), got"):
            values.__dlpack__(stream=bad)
    for bad in ("x", 1.5, True, 2**70):
        with pytest.raises(ValueError, match=r"stream must be None or -1 for device type CPU, got"):
            values.__dlpack__(stream=bad)


def test_dlpack_stream_on_the_emulated_device_is_none_or_minus_one():
    values = ad.array(pa.array([1, 2], pa.int32()), device=ad.emulated(0))
    with pytest.raises(ValueError, match="stream must be None or -1 for device type EXT_DEV"):
        values.__dlpack__(stream=1)


def test_dlpack_stream_on_cuda_follows_cudas_rules():
    values = on(pa.array([1, 2], pa.int32()), DeviceType.CUDA)
    with pytest.raises(ValueError, match="0 is disallowed for CUDA"):
        values.__dlpack__(stream=0)
    with pytest.raises(ValueError, match="1 \\(legacy default stream\\)"):
        values.__dlpack__(stream=-2)
    # Valid streams pass the rules (no sync_event: nothing to wait for).
    for stream in (None, -1, 1, 2, 12345):
        capsule = values.__dlpack__(stream=stream)
        assert type(capsule).__name__ == "PyCapsule"

"""The Arrow PyCapsule protocol (spec: PyCapsuleInterface.rst) and DLPack
(spec: dlpack-python-spec.rst) as `arrow_device` implements them: capsule
names and destructors, keyword arguments, requested schemas, device fields,
the Python API's errors, and DLPack's rules.
"""

import gc

import nanoarrow.device
import numpy as np
import pyarrow as pa
import pytest

import arrow_device as ad
from arrow_device import DeviceType

EXT_DEV = 12


@pytest.fixture
def ints():
    return pa.array([1, 2, None, 4], pa.int64())


@pytest.fixture
def strings():
    return pa.array(["a", "bb", None, "dddd"], pa.string())


@pytest.fixture
def batch():
    return pa.record_batch(
        {"a": pa.array([1, 2, 3], pa.int64()), "b": pa.array(["x", None, "z"])},
        metadata={"origin": "test", "n": "3"},
    )


def emulated_array(values, device_id=2):
    return ad.array(values, device=ad.emulated(device_id))


# --- capsule names ----------------------------------------------------------


def test_device_array_capsules_are_named_arrow_schema_and_arrow_device_array(ints, ffi):
    schema, array = ad.array(ints).__arrow_c_device_array__()
    assert ffi.capsule_name(schema) == "arrow_schema"
    assert ffi.capsule_name(array) == "arrow_device_array"
    assert type(array).__name__ == "PyCapsule"
    assert '"arrow_device_array"' in repr(array)


def test_array_capsules_are_named_arrow_schema_and_arrow_array(ints, ffi):
    schema, array = ad.array(ints).__arrow_c_array__()
    assert ffi.capsule_name(schema) == "arrow_schema"
    assert ffi.capsule_name(array) == "arrow_array"


def test_schema_capsules_are_named_arrow_schema(ints, batch, ffi):
    assert ffi.capsule_name(ad.array(ints).__arrow_c_schema__()) == "arrow_schema"
    assert ffi.capsule_name(ad.stream([batch]).__arrow_c_schema__()) == "arrow_schema"


def test_stream_capsule_is_named_arrow_array_stream(batch, ffi):
    assert ffi.capsule_name(ad.stream([batch]).__arrow_c_stream__()) == "arrow_array_stream"


def test_device_stream_capsule_is_named_arrow_device_array_stream(batch, ffi):
    capsule = ad.stream([batch]).__arrow_c_device_stream__()
    assert ffi.capsule_name(capsule) == "arrow_device_array_stream"


def test_dlpack_capsule_names_follow_max_version(ffi):
    values = ad.array(pa.array([1, 2, 3], pa.int32()))
    assert ffi.capsule_name(values.__dlpack__()) == "dltensor"
    assert ffi.capsule_name(values.__dlpack__(max_version=None)) == "dltensor"
    assert ffi.capsule_name(values.__dlpack__(max_version=(0, 8))) == "dltensor"
    assert ffi.capsule_name(values.__dlpack__(max_version=(1, 0))) == "dltensor_versioned"
    assert ffi.capsule_name(values.__dlpack__(max_version=(1, 3))) == "dltensor_versioned"
    assert ffi.capsule_name(values.__dlpack__(max_version=(2, 0))) == "dltensor_versioned"


# --- capsule destructors ----------------------------------------------------


def test_unconsumed_array_capsules_release_their_structs(pool, big_batch):
    data = big_batch()
    assert pool.held() >= 8_000_000
    device_array = ad.array(data)
    del data
    capsules = [device_array.__arrow_c_device_array__() for _ in range(3)]
    capsules.append(device_array.__arrow_c_array__())
    capsules.append(device_array.__arrow_c_schema__())
    del device_array
    # The capsules keep the data alive...
    assert pool.held() >= 8_000_000
    del capsules
    # ... and their destructors release it.
    assert pool.held() < 1_000_000


def test_one_of_two_capsule_pairs_imported_the_other_dropped(pool, big_batch):
    data = big_batch()
    expected = data.column(0).slice(0, 10).to_pylist()
    device_array = ad.array(data)
    del data
    first = device_array.__arrow_c_device_array__()
    second = device_array.__arrow_c_device_array__()
    del device_array
    imported = pa.RecordBatch._import_from_c_device_capsule(*first)
    del first, second
    # The dropped pair released its reference; the import keeps the data.
    assert pool.held() >= 8_000_000
    assert imported.column(0).slice(0, 10).to_pylist() == expected
    del imported
    assert pool.held() < 1_000_000


def test_imported_capsules_are_consumed_once(ints):
    schema, array = ad.array(ints).__arrow_c_device_array__()
    pa.Array._import_from_c_device_capsule(schema, array)
    # pyarrow moved the struct out; importing the emptied capsule again is
    # an error, not a double free.
    with pytest.raises(Exception):
        pa.Array._import_from_c_device_capsule(schema, array)


def test_unconsumed_stream_capsules_release_their_batches(pool, big_batch):
    data = big_batch()
    stream = ad.stream([data, data])
    del data
    capsule = stream.__arrow_c_stream__()
    del stream
    assert pool.held() >= 8_000_000
    del capsule
    assert pool.held() < 1_000_000

    data = big_batch()
    stream = ad.stream([data])
    del data
    capsule = stream.__arrow_c_device_stream__()
    del stream, capsule
    assert pool.held() < 1_000_000


def test_unconsumed_stream_capsule_drops_its_python_iterator_at_once(pool, big_batch):
    """Dropping an unconsumed stream capsule frees the Python objects it
    holds right away, not at the next unrelated call into arrow_device
    (PyO3 defers a `Py<...>` decref made outside `Python::attach` to its
    reference pool, drained only when the module is next entered)."""
    data = big_batch()
    stream = ad.stream([data, data])
    del data
    capsule = stream.__arrow_c_stream__()
    del stream, capsule
    gc.collect()
    assert pool.held(settle=False) < 1_000_000


def test_unconsumed_dlpack_capsules_call_the_deleter(pool, big_batch):
    data = big_batch()
    device_array = ad.array(data.column(0))
    del data
    legacy = device_array.__dlpack__()
    versioned = device_array.__dlpack__(max_version=(1, 0))
    del device_array
    assert pool.held() >= 8_000_000
    del legacy, versioned
    assert pool.held() < 1_000_000


def test_pyarrow_stream_reader_is_released_with_its_stream(pool, big_batch):
    data = big_batch()
    reader = pa.RecordBatchReader.from_batches(data.schema, [data])
    del data
    stream = ad.stream(reader)
    del reader
    assert pool.held() >= 8_000_000
    del stream
    assert pool.held() < 1_000_000


# --- keyword arguments ------------------------------------------------------


def test_unknown_keyword_with_a_value_raises_not_implemented(ints, batch):
    with pytest.raises(NotImplementedError, match="unsupported keyword"):
        ad.array(ints).__arrow_c_device_array__(stream=1)
    with pytest.raises(NotImplementedError, match="future_option"):
        ad.array(ints).__arrow_c_device_array__(None, future_option=True)
    with pytest.raises(NotImplementedError, match="unsupported keyword"):
        ad.stream([batch]).__arrow_c_device_stream__(future_option=0)


def test_unknown_keyword_with_none_is_accepted(ints, batch, ffi):
    schema, array = ad.array(ints).__arrow_c_device_array__(None, future_option=None)
    assert ffi.capsule_name(array) == "arrow_device_array"
    assert pa.Array._import_from_c_device_capsule(schema, array).equals(ints)
    capsule = ad.stream([batch]).__arrow_c_device_stream__(future_option=None)
    assert ffi.capsule_name(capsule) == "arrow_device_array_stream"


# --- requested_schema -------------------------------------------------------


def test_requested_large_string_is_honoured(strings):
    device_array = ad.array(strings)
    got = pa.array(device_array, type=pa.large_string())
    assert got.type == pa.large_string()
    assert got.to_pylist() == strings.to_pylist()

    capsules = device_array.__arrow_c_array__(pa.large_string().__arrow_c_schema__())
    got = pa.Array._import_from_c_capsule(*capsules)
    assert got.type == pa.large_string()
    assert got.to_pylist() == strings.to_pylist()

    capsules = device_array.__arrow_c_device_array__(pa.large_string().__arrow_c_schema__())
    got = pa.Array._import_from_c_device_capsule(*capsules)
    assert got.equals(strings.cast(pa.large_string()))


def test_requested_string_view_is_honoured(strings):
    capsules = ad.array(strings).__arrow_c_array__(pa.string_view().__arrow_c_schema__())
    got = pa.Array._import_from_c_capsule(*capsules)
    assert got.type == pa.string_view()
    assert got.to_pylist() == strings.to_pylist()


def test_requested_schema_on_a_stream_is_honoured(batch):
    wanted = pa.schema([("a", pa.int64()), ("b", pa.large_string())])
    table = pa.RecordBatchReader.from_stream(ad.stream([batch, batch]), schema=wanted).read_all()
    assert table.schema.field("b").type == pa.large_string()
    assert table.column("b").to_pylist() == batch.column("b").to_pylist() * 2


def test_requested_schema_of_another_type_raises(ints, strings):
    with pytest.raises(ValueError, match="not another representation"):
        ad.array(ints).__arrow_c_array__(pa.string().__arrow_c_schema__())
    with pytest.raises(ValueError, match="not another representation"):
        ad.array(ints).__arrow_c_device_array__(pa.int32().__arrow_c_schema__())
    with pytest.raises(ValueError, match="not another representation"):
        ad.array(strings).__arrow_c_array__(pa.int64().__arrow_c_schema__())


def test_requested_schema_with_other_fields_raises(batch):
    fewer = pa.schema([("a", pa.int64())])
    with pytest.raises(ValueError, match="not another representation"):
        ad.array(batch).__arrow_c_array__(fewer.__arrow_c_schema__())
    with pytest.raises(ValueError, match="not another representation"):
        ad.stream([batch]).__arrow_c_stream__(fewer.__arrow_c_schema__())


def test_requested_schema_must_be_an_arrow_schema_capsule(ints):
    device_array = ad.array(ints)
    with pytest.raises(TypeError, match="arrow_schema"):
        device_array.__arrow_c_array__(5)
    _, wrong = device_array.__arrow_c_device_array__()
    with pytest.raises(ValueError, match="'arrow_device_array'"):
        device_array.__arrow_c_array__(wrong)


def test_requested_host_conversion_of_emulated_array_raises(strings):
    with pytest.raises(TypeError, match="copy it to the CPU first"):
        emulated_array(strings).__arrow_c_device_array__(pa.large_string().__arrow_c_schema__())


# --- device arrays on the emulated device -------------------------------------


def test_emulated_array_refuses_arrow_c_array(ints):
    with pytest.raises(ValueError, match="CPU pointers"):
        emulated_array(ints).__arrow_c_array__()
    # pyarrow 26 prefers __arrow_c_device_array__ and, CPU-only, refuses
    # device type 12 itself: either way no device pointer is read as host.
    with pytest.raises(pa.ArrowKeyError, match="12"):
        pa.array(emulated_array(ints))


def test_emulated_stream_refuses_arrow_c_stream(batch):
    stream = ad.stream([emulated_array(batch), emulated_array(batch)])
    with pytest.raises(ValueError, match="__arrow_c_device_stream__"):
        stream.__arrow_c_stream__()
    with pytest.raises(ValueError, match="CPU pointers"):
        pa.RecordBatchReader.from_stream(ad.stream([emulated_array(batch)]))


def test_emulated_array_exports_ext_dev_its_id_and_a_sync_event(ints, ffi):
    device_array = emulated_array(ints, device_id=7)
    fields = nanoarrow.device.c_device_array(device_array)
    assert fields.device_type_id == EXT_DEV
    assert fields.device_id == 7
    assert fields.array.length == 4
    assert fields.array.null_count == 1

    _, array = device_array.__arrow_c_device_array__()
    raw = ffi.device_array_fields(array)
    assert raw.device_type == EXT_DEV
    assert raw.device_id == 7
    assert raw.length == 4
    assert raw.sync_event is not None and raw.sync_event != 0
    assert raw.reserved == [0, 0, 0]


def test_cpu_array_exports_device_id_minus_one_and_no_sync_event(ints, ffi):
    device_array = ad.array(ints)
    fields = nanoarrow.device.c_device_array(device_array)
    assert fields.device_type_id == 1
    assert fields.device_id == -1

    _, array = device_array.__arrow_c_device_array__()
    raw = ffi.device_array_fields(array)
    assert raw.device_type == 1
    assert raw.device_id == -1
    assert raw.sync_event is None
    assert raw.reserved == [0, 0, 0]


def test_emulated_device_stream_batches_carry_sync_events(batch, ffi):
    stream = ad.stream([emulated_array(batch, 3), emulated_array(batch, 4)])
    device_type, schema_status, batches = ffi.read_device_stream(
        stream.__arrow_c_device_stream__()
    )
    assert device_type == EXT_DEV
    assert schema_status == 0
    assert [(b.device_type, b.device_id, b.length) for b in batches] == [
        (EXT_DEV, 3, 3),
        (EXT_DEV, 4, 3),
    ]
    assert all(b.sync_event for b in batches)
    assert all(b.reserved == [0, 0, 0] for b in batches)


def test_cpu_device_stream_batches_have_no_sync_event(batch, ffi):
    device_type, _, batches = ffi.read_device_stream(
        ad.stream([batch, batch]).__arrow_c_device_stream__()
    )
    assert device_type == 1
    assert [(b.device_type, b.device_id, b.sync_event) for b in batches] == [(1, -1, None)] * 2


def test_copies_between_emulated_devices_keep_values(strings):
    moved = emulated_array(strings, 1).to(ad.emulated(2))
    assert moved.device == ad.emulated(2)
    assert pa.array(moved.to(ad.cpu())).equals(strings)


# --- DeviceArray --------------------------------------------------------------


def test_record_batches_keep_schema_metadata(batch):
    device_array = ad.array(batch)
    got = pa.record_batch(device_array)
    assert got.schema.metadata == {b"origin": b"test", b"n": b"3"}
    assert pa.record_batch(device_array.to(ad.cpu())).schema.metadata == got.schema.metadata
    back = emulated_array(batch).to(ad.cpu())
    assert pa.record_batch(back).schema.metadata == got.schema.metadata
    stream_schema = pa.RecordBatchReader.from_stream(ad.stream([batch])).schema
    assert stream_schema.metadata == got.schema.metadata


def test_repr_shows_type_length_and_device(ints, batch):
    assert repr(ad.array(ints)) == "DeviceArray(type=Int64, len=4, device=Device(CPU, -1))"
    assert repr(emulated_array(ints, 5)) == "DeviceArray(type=Int64, len=4, device=Device(EXT_DEV, 5))"
    assert repr(ad.cpu()) == "Device(CPU, -1)"
    assert repr(ad.stream([batch])).startswith("DeviceStream(type=Struct(")
    assert "device_type=CPU" in repr(ad.stream([batch]))


def test_len_null_count_offset_and_type(ints, strings):
    device_array = ad.array(ints)
    assert len(device_array) == 4
    assert device_array.null_count == 1
    assert device_array.offset == 0
    assert device_array.type == "Int64"
    assert ad.array(strings).type == "Utf8"
    sliced = ad.array(ints.slice(1, 2))
    assert (len(sliced), sliced.offset, sliced.null_count) == (2, 1, 1)
    assert pa.array(sliced).to_pylist() == [2, None]


def test_cpu_device_type_and_id(ints):
    device = ad.array(ints).device
    assert device.type is DeviceType.CPU
    assert device.id == -1
    assert device == ad.cpu()
    assert hash(device) == hash(ad.cpu())


def test_emulated_device_type_and_id(ints):
    device = emulated_array(ints, 9).device
    assert device.type is DeviceType.EXT_DEV
    assert device.id == 9
    assert device == ad.emulated(9)
    assert device != ad.emulated(8)
    assert len({ad.cpu(), ad.cpu(), ad.emulated(1), ad.emulated(1), ad.emulated(2)}) == 3


def test_device_type_names_and_spec_values():
    assert {m.name: m.value for m in DeviceType} == {
        "CPU": 1,
        "CUDA": 2,
        "CUDA_HOST": 3,
        "OPENCL": 4,
        "VULKAN": 7,
        "METAL": 8,
        "VPI": 9,
        "ROCM": 10,
        "ROCM_HOST": 11,
        "EXT_DEV": 12,
        "CUDA_MANAGED": 13,
        "ONEAPI": 14,
        "WEBGPU": 15,
        "HEXAGON": 16,
    }
    assert DeviceType.EXT_DEV == 12  # an IntEnum: compares with the C value


def test_devices_lists_cpu_and_emulated():
    devices = ad.devices()
    assert ad.cpu() in devices
    assert ad.emulated(0) in devices
    assert all(isinstance(d, ad.Device) for d in devices)


@pytest.mark.parametrize("bad_id", [5000, 1024, -1])
def test_emulated_id_out_of_range_raises_value_error(bad_id):
    with pytest.raises(ValueError, match="0 to 1023"):
        ad.emulated(bad_id)


def test_emulated_ids_at_the_bounds_exist():
    assert ad.emulated(0).id == 0
    assert ad.emulated(1023).id == 1023


def test_to_the_same_device_keeps_values(ints):
    assert pa.array(ad.array(ints).to(ad.cpu())).equals(ints)


def test_pyarrow_array_round_trips_zero_copy(ints):
    got = pa.array(ad.array(ints))
    assert got.buffers()[1].address == ints.buffers()[1].address
    assert got.buffers()[0].address == ints.buffers()[0].address


# --- wrong arguments ----------------------------------------------------------


@pytest.mark.parametrize("obj", [5, "text", None, object(), [1, 2, 3]])
def test_array_of_a_wrong_type_raises_type_error_naming_the_protocols(obj):
    with pytest.raises(TypeError, match="__arrow_c_device_array__, __arrow_c_array__, __cuda_array_interface__ or __dlpack__"):
        ad.array(obj)


@pytest.mark.parametrize("obj", [5, None, object()])
def test_stream_of_a_wrong_type_raises_type_error_naming_the_protocols(obj):
    with pytest.raises(TypeError, match="__arrow_c_device_stream__ or __arrow_c_stream__"):
        ad.stream(obj)


def test_stream_of_non_arrays_raises_type_error_naming_the_protocols():
    """The first item is converted by stream() itself: its TypeError is the
    caller's error, not a stream producer's RuntimeError."""
    with pytest.raises(TypeError, match="__arrow_c_device_array__"):
        ad.stream([1, 2])


def test_stream_of_a_generator_failing_at_once_raises_its_own_error():
    """stream() reads the first item itself: the generator's exception
    reaches the caller as it is (not as a stream producer's RuntimeError)."""

    def failing():
        raise KeyError("no first batch")
        yield  # pragma: no cover

    with pytest.raises(KeyError, match="no first batch"):
        ad.stream(failing())


def test_wrong_device_argument_raises_type_error(ints):
    with pytest.raises(TypeError, match="Device"):
        ad.array(ints, device="cpu")
    with pytest.raises(TypeError, match="Device"):
        ad.array(ints).to(1)


def test_bad_validate_raises_value_error(ints):
    with pytest.raises(ValueError, match="validate must be one of"):
        ad.array(ints, validate="everything")
    with pytest.raises(ValueError, match="validate must be one of"):
        ad.stream([ints], validate="")


@pytest.mark.parametrize("level", ["none", "minimal", "default", "full"])
def test_every_validate_level_is_accepted(ints, level):
    assert pa.array(ad.array(ints, validate=level)).equals(ints)
    assert len(list(ad.stream([ints], validate=level))) == 1


def test_stream_of_an_empty_list_raises_value_error():
    with pytest.raises(ValueError, match="at least one array"):
        ad.stream([])
    with pytest.raises(ValueError, match="at least one array"):
        ad.stream(iter(()))


# --- DeviceStream -------------------------------------------------------------


def test_stream_is_handed_on_only_once(batch):
    stream = ad.stream([batch])
    stream.__arrow_c_stream__()
    with pytest.raises(ValueError, match="already handed on"):
        stream.__arrow_c_stream__()
    with pytest.raises(ValueError, match="already handed on"):
        stream.__arrow_c_device_stream__()
    with pytest.raises(ValueError, match="already handed on"):
        next(stream)
    # The schema stays readable.
    assert pa.schema(stream).names == ["a", "b"]


def test_iterating_a_stream_yields_device_arrays(batch):
    stream = ad.stream([batch, batch.slice(1), emulated_array(batch).to(ad.cpu())])
    assert iter(stream) is stream
    got = list(stream)
    assert all(isinstance(a, ad.DeviceArray) for a in got)
    assert [len(a) for a in got] == [3, 2, 3]
    assert pa.record_batch(got[1]).equals(batch.slice(1))
    with pytest.raises(StopIteration):
        next(stream)


def test_stream_device_type_and_type(batch):
    stream = ad.stream([batch])
    assert stream.device_type is DeviceType.CPU
    assert stream.type == 'Struct("a": Int64, "b": Utf8)'
    assert ad.stream([emulated_array(batch)]).device_type is DeviceType.EXT_DEV
    assert ad.stream(pa.table(batch)).device_type is DeviceType.CPU


def test_stream_of_mixed_device_types_is_refused_by_consumers(batch):
    with pytest.raises(pa.ArrowInvalid, match="device type EXT_DEV"):
        pa.RecordBatchReader.from_stream(ad.stream([batch, emulated_array(batch)])).read_all()
    with pytest.raises(RuntimeError, match="device type CPU, expected the stream's EXT_DEV"):
        list(ad.stream(ad.stream([emulated_array(batch), batch])))


def test_iterating_a_stream_of_mixed_device_types_raises(batch):
    """DeviceStream.device_type is 'the device type of every batch': the
    iterator must not yield a batch on another device type (the C export
    of the same stream refuses it)."""
    stream = ad.stream([emulated_array(batch), batch])
    first = next(stream)
    assert first.device.type is DeviceType.EXT_DEV
    with pytest.raises((ValueError, RuntimeError), match="device type"):
        next(stream)


def test_stream_of_mixed_types_is_refused(batch):
    other = pa.record_batch({"z": [1]})
    with pytest.raises(pa.ArrowInvalid, match="batch 1 has data type"):
        pa.RecordBatchReader.from_stream(ad.stream([batch, other])).read_all()


def test_iterating_a_stream_of_mixed_types_raises(batch):
    """DeviceStream.type is 'the Arrow type of every batch'."""
    stream = ad.stream([batch, pa.record_batch({"z": [1]})])
    next(stream)
    with pytest.raises((ValueError, RuntimeError), match="data type"):
        next(stream)


# --- DLPack -------------------------------------------------------------------


def test_dlpack_device_is_cpu_0_for_cpu_arrays(ints):
    assert ad.array(ints).__dlpack_device__() == (1, 0)


def test_dlpack_device_is_ext_dev_and_id_for_emulated_arrays(ints):
    assert emulated_array(ints, 6).__dlpack_device__() == (EXT_DEV, 6)


def test_dlpack_refuses_nulls_with_buffer_error(ints):
    with pytest.raises(BufferError, match="nulls"):
        ad.array(ints).__dlpack__()


@pytest.mark.parametrize(
    "values",
    [pa.array(["a", "b"]), pa.array([True, False]), pa.array([[1], [2]]), pa.array([1, 2], pa.date32())],
    ids=["string", "bool", "list", "date32"],
)
def test_dlpack_refuses_non_numeric_types_with_buffer_error(values):
    with pytest.raises(BufferError, match="DLPack carries one-dimensional arrays of fixed-width numbers"):
        ad.array(values).__dlpack__(max_version=(1, 0))


def test_dlpack_stream_must_be_none_or_minus_one_on_cpu():
    values = ad.array(pa.array([1, 2], pa.int32()))
    values.__dlpack__(stream=None)
    values.__dlpack__(stream=-1)
    for bad in (0, 1, 2, "x"):
        with pytest.raises(ValueError, match="stream must be None or -1"):
            values.__dlpack__(stream=bad)


def test_dlpack_copy_true_raises_buffer_error():
    values = ad.array(pa.array([1, 2], pa.int32()))
    with pytest.raises(BufferError, match="copy=True"):
        values.__dlpack__(copy=True)
    assert np.from_dlpack(values, copy=False).tolist() == [1, 2]


def test_dlpack_device_mismatch_raises_buffer_error():
    values = ad.array(pa.array([1, 2], pa.int32()))
    with pytest.raises(BufferError, match=r"\(1, 0\), not \(2, 0\)"):
        values.__dlpack__(dl_device=(2, 0))
    assert values.__dlpack__(dl_device=(1, 0)) is not None
    with pytest.raises(BufferError):
        emulated_array(pa.array([1, 2], pa.int32()), 3).__dlpack__(dl_device=(1, 0))


def test_dlpack_of_emulated_array_is_refused_by_numpy():
    on_device = emulated_array(pa.array([1, 2, 3], pa.int32()), 2)
    with pytest.raises(Exception, match="[Dd]evice"):
        np.from_dlpack(on_device)


def test_dlpack_versioned_tensor_is_read_only():
    values = ad.array(pa.array([1, 2, 3], pa.int64()))
    view = np.from_dlpack(values)
    assert view.tolist() == [1, 2, 3]
    assert not view.flags.writeable


# --- no panics ----------------------------------------------------------------

BAD_CALLS = {
    "array(int)": lambda: ad.array(1),
    "array(list)": lambda: ad.array([1]),
    "stream(int)": lambda: ad.stream(1),
    "stream([])": lambda: ad.stream([]),
    "stream([None])": lambda: ad.stream([None]),
    "emulated(-5)": lambda: ad.emulated(-5),
    "emulated(2**40)": lambda: ad.emulated(2**40),
    "emulated(2**70)": lambda: ad.emulated(2**70),
    "validate": lambda: ad.array(pa.array([1]), validate="x"),
    "dlpack nulls": lambda: ad.array(pa.array([1, None])).__dlpack__(),
    "dlpack string": lambda: ad.array(pa.array(["a"])).__dlpack__(),
    "dlpack stream": lambda: ad.array(pa.array([1])).__dlpack__(stream=2**70),
    "dlpack max_version": lambda: ad.array(pa.array([1])).__dlpack__(max_version=(-1, 0)),
    "dlpack dl_device": lambda: ad.array(pa.array([1])).__dlpack__(dl_device=(2**40, 0)),
    "requested schema": lambda: ad.array(pa.array([1])).__arrow_c_array__(object()),
    "requested struct": lambda: ad.array(pa.array([1])).__arrow_c_array__(pa.schema([]).__arrow_c_schema__()),
    "emulated c array": lambda: pa.array(ad.array(pa.array([1]), device=ad.emulated(0))),
    "numpy 2d": lambda: ad.array(np.zeros((2, 2))),
    "numpy strided": lambda: ad.array(np.arange(10)[::2]),
    "numpy complex": lambda: ad.array(np.zeros(2, dtype=np.complex64)),
    "consumed stream": lambda: [s := ad.stream([pa.array([1])]), s.__arrow_c_stream__(), s.__arrow_c_stream__()],
}


@pytest.mark.parametrize("call", BAD_CALLS.values(), ids=BAD_CALLS.keys())
def test_bad_calls_raise_exceptions_never_panics(call):
    try:
        call()
    except BaseException as error:  # noqa: B036 - PanicException is a BaseException
        assert isinstance(error, Exception), f"{type(error).__module__}.{type(error).__name__}: {error}"
        assert type(error).__name__ != "PanicException"
        assert str(error), "the message must say what is wrong"
    else:
        pytest.fail("expected an error")


def test_a_slice_is_zero_copy_and_one_past_the_end_is_an_index_error():
    a = ad.array(pa.array([1, 2, None, 4], pa.int64()))
    s = a.slice(1, 2)
    assert (len(s), s.offset, s.null_count) == (2, 1, None)
    assert pa.array(s).to_pylist() == [2, None]
    on_device = emulated_array(pa.record_batch({"v": pa.array([1, 2, 3], pa.int32())}))
    assert pa.array(on_device.slice(1, 2).to(ad.cpu())).to_pylist() == [{"v": 2}, {"v": 3}]
    with pytest.raises(IndexError, match=r"^slice 3\.\.5 of an array of length 4$"):
        a.slice(3, 2)
    with pytest.raises(IndexError):
        a.slice(5, 0)
    with pytest.raises(OverflowError):
        a.slice(-1, 1)


def test_dropping_device_data_whose_source_needs_the_gil_does_not_hang():
    """A copy onto the emulated device releases its source (a NumPy array,
    whose DLPack deleter takes the GIL) on the device's worker, and freeing
    the copy waits for that work: every drop of device data from Python
    (an array, a stream, an unconsumed capsule, the conformance checker's
    imports) waits without the GIL. Run in a child with a timeout, so that a
    deadlock fails this test instead of hanging the suite."""
    import os
    import subprocess
    import sys

    script = """
import numpy as np, pyarrow as pa, arrow_device as ad
from arrow_device.conformance import check_producer
emulated = ad.emulated()
a = ad.array(np.arange(4), device=emulated); del a
s = ad.stream([ad.array(np.arange(4), device=emulated) for _ in range(3)]); next(iter(s)); del s
a = ad.array(np.arange(4), device=emulated); c = a.__arrow_c_device_array__(); del a, c
s = ad.stream([ad.array(np.arange(4), device=emulated)]); c = s.__arrow_c_device_stream__(); del s, c
a = ad.array(pa.array(np.arange(4)), device=emulated); c = a.__arrow_c_device_array__(); del a, c
fresh = lambda: ad.stream([ad.array(np.arange(4), device=emulated), ad.array(np.arange(5), device=emulated)])
assert check_producer(fresh(), fresh=fresh).passed
assert check_producer(ad.array(np.arange(4), device=emulated)).passed
print("done")
"""
    env = dict(os.environ, ARROW_DEVICE_EMULATED="strict=1,delay_ms=20")
    result = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and result.stdout.strip() == "done", result.stderr

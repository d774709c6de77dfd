"""The example extension (examples/pyo3-extension), built on arrow-device-pyo3,
called with the inputs its users have: pyarrow, nanoarrow, NumPy and polars
objects, and `arrow_device` arrays on the emulated device. Every function is
a few lines of Rust over `PyDeviceArray` / `PyDeviceStream` / `PyDevice`;
these tests check that what those types accept and return behaves like the
`arrow_device` package itself.
"""

import gc
import subprocess
import sys
import textwrap

import arrow_device
import arrow_device_example as ex
import nanoarrow as na
import numpy as np
import polars as pl
import pyarrow as pa
import pytest

CPU = (1, -1)
EXT_DEV = 12


# --- arrays in ------------------------------------------------------------------


@pytest.mark.parametrize(
    "make, expected",
    [
        (lambda: pa.array([1, None, 3], pa.int64()), ("Int64", 3, 1, CPU)),
        (lambda: na.c_array([1, 2, 3, 4], na.int64()), ("Int64", 4, 0, CPU)),
        (lambda: np.arange(5, dtype=np.int64), ("Int64", 5, 0, CPU)),
        (lambda: pa.array(["a", None], pa.large_utf8()), ("LargeUtf8", 2, 1, CPU)),
        (
            lambda: arrow_device.array(pa.array([1.5, 2.5]), device=arrow_device.emulated(0)),
            ("Float64", 2, 0, (EXT_DEV, 0)),
        ),
    ],
    ids=["pyarrow", "nanoarrow", "numpy", "pyarrow-large-utf8", "emulated"],
)
def test_describe_takes_every_producer(make, expected):
    assert ex.describe(make()) == expected


def test_describe_of_a_polars_series_through_its_arrow_export():
    series = pl.Series("x", [4, 5, 6], dtype=pl.Int64)
    assert ex.describe(series.to_arrow()) == ("Int64", 3, 0, CPU)


def test_add_one_on_the_cpu_keeps_nulls():
    result = ex.add_one(pa.array([1, None, 41], pa.int64()))
    assert pa.array(result).to_pylist() == [2, None, 42]


def test_add_one_of_numpy_through_dlpack():
    result = ex.add_one(np.array([10, 20, 30], dtype=np.int64))
    assert pa.array(result).to_pylist() == [11, 21, 31]


def test_add_one_returns_on_the_device_the_array_came_from():
    on_device = ex.to_device(pa.array([1, 2, 3], pa.int64()), "emulated:5")
    result = ex.add_one(on_device)
    assert result.device == arrow_device.emulated(5)
    assert pa.array(ex.to_device(result, "cpu")).to_pylist() == [2, 3, 4]


def test_emulated_arrays_of_another_binary_are_described_not_copied():
    # The emulated device lives in each binary's copy of arrow-device: the
    # package's emulated arrays reach the extension intact (type, length,
    # device), but its copy of the device does not know their events or
    # memory, and says so rather than touching them. CUDA arrays have no
    # such limit: the driver is one per process. For the same reason the
    # extension's emulated arrays stay its own class instead of becoming
    # the package's.
    ours = ex.arange(2, "emulated:0")
    assert type(ours) is not arrow_device.DeviceArray
    assert type(ours).__name__ == "DeviceArray"
    assert type(ex.arange(2)) is arrow_device.DeviceArray
    theirs = arrow_device.array(pa.array([1, 2, 3], pa.int64()), device=arrow_device.emulated(0))
    assert ex.describe(theirs) == ("Int64", 3, 0, (EXT_DEV, 0))
    with pytest.raises(RuntimeError, match="emulated devices are per binary"):
        ex.add_one(theirs)


def test_returned_arrays_are_the_packages_own_class():
    # Two binaries link arrow-device-pyo3 (the package and the example): the
    # example's arrays are adopted by the installed package, so they are one
    # type, and every consumer reads them.
    result = ex.arange(4)
    assert type(result) is arrow_device.DeviceArray
    assert pa.array(result).to_pylist() == [0, 1, 2, 3]
    assert list(na.Array(result).iter_py()) == [0, 1, 2, 3]
    assert np.from_dlpack(result).tolist() == [0, 1, 2, 3]
    assert pl.Series(pa.array(result)).to_list() == [0, 1, 2, 3]


def test_arange_on_a_device_named_by_text_and_by_object():
    by_text = ex.arange(3, "emulated:2")
    by_object = ex.arange(3, arrow_device.emulated(2))
    assert by_text.device == by_object.device == arrow_device.emulated(2)
    # The extension's Device and the package's are equal both ways and hash alike.
    assert arrow_device.emulated(2) == by_text.device
    assert len({by_text.device, arrow_device.emulated(2)}) == 1
    assert by_text.device != arrow_device.emulated(3)
    assert pa.array(ex.to_device(by_text, "cpu")).to_pylist() == [0, 1, 2]


def test_to_device_and_back():
    moved = ex.to_device(pa.array([7, 8], pa.int64()), "emulated")
    assert moved.device == arrow_device.emulated(0)
    back = ex.to_device(moved, arrow_device.cpu())
    assert back.device == arrow_device.cpu()
    assert pa.array(back).to_pylist() == [7, 8]


def test_host_is_the_packages_cpu_device():
    device = ex.host()
    assert type(device) is arrow_device.Device
    assert device == arrow_device.cpu()


def test_validated_refuses_what_full_validation_finds():
    # Offsets that go backwards: pyarrow builds it unchecked; the default
    # import checks the last offset only, the full one every offset.
    offsets = pa.py_buffer(np.array([0, 3, 1, 4], dtype=np.int32).tobytes())
    data = pa.py_buffer(b"abcd")
    bad = pa.Array.from_buffers(pa.utf8(), 3, [None, offsets, data])
    assert ex.describe(bad) == ("Utf8", 3, 0, CPU)
    with pytest.raises(ValueError, match="offset"):
        ex.validated(bad)
    good = ex.validated(pa.array(["ab", "c"]))
    assert pa.array(good).to_pylist() == ["ab", "c"]


# --- streams in and out ---------------------------------------------------------


def table():
    return pa.table({"k": pa.array([1, 2, 3, 4, 5], pa.int64()), "s": list("abcde")})


def test_sum_stream_of_a_pyarrow_reader():
    reader = pa.RecordBatchReader.from_batches(table().schema, table().to_batches(max_chunksize=2))
    assert ex.sum_stream(reader) == (5, 15)


def test_sum_stream_of_a_polars_frame():
    frame = pl.DataFrame({"k": [10, 20, 30]}, schema={"k": pl.Int64})
    assert ex.sum_stream(frame) == (3, 60)


def test_sum_stream_of_an_iterable_of_emulated_arrays():
    chunks = [ex.to_device(pa.array(c, pa.int64()), "emulated:1") for c in ([1, 2], [3], [4, 5, 6])]
    assert ex.sum_stream(chunks) == (6, 21)


def test_stream_to_a_device_then_read_back_by_the_extension():
    reader = pa.RecordBatchReader.from_batches(table().schema, table().to_batches(max_chunksize=2))
    moved = ex.stream_to(reader, "emulated:4")
    # On the extension's own emulated device: its own class (see below).
    assert type(moved).__name__ == "DeviceStream"
    assert moved.device_type == arrow_device.DeviceType.EXT_DEV
    # Read back by the binary whose emulated device holds the batches.
    assert ex.sum_stream(moved) == (5, 15)


def test_stream_to_the_cpu_then_read_by_pyarrow():
    batches = [ex.to_device(b, "emulated:3") for b in table().to_batches(max_chunksize=2)]
    on_cpu = ex.stream_to(batches, "cpu")
    assert pa.RecordBatchReader.from_stream(on_cpu).read_all().equals(table())


def test_passthrough_keeps_the_stream_whole():
    reader = pa.RecordBatchReader.from_batches(table().schema, table().to_batches(max_chunksize=3))
    out = ex.passthrough(reader)
    assert pa.RecordBatchReader.from_stream(out).read_all().equals(table())


# --- errors ---------------------------------------------------------------------


def test_errors_name_the_input():
    with pytest.raises(TypeError, match="got int"):
        ex.describe(42)
    with pytest.raises(TypeError, match="add_one takes an int64 array, got Float64"):
        ex.add_one(pa.array([1.0]))
    with pytest.raises(ValueError, match='unknown device "tpu"'):
        ex.to_device(pa.array([1]), "tpu")
    with pytest.raises(ValueError, match="emulated device ids are 0 to 1023, got 5000"):
        ex.arange(2, "emulated:5000")
    with pytest.raises(TypeError, match="expected an arrow_device.Device or a device name"):
        ex.arange(2, 3.5)
    with pytest.raises(ValueError, match="empty iterable"):
        ex.sum_stream([])


def test_inputs_are_released():
    gc.collect()
    before = pa.total_allocated_bytes()
    big = pa.array(list(range(100_000)), pa.int64())  # in pyarrow's pool
    assert pa.total_allocated_bytes() > before
    result = ex.add_one(big)  # read zero-copy, released when the call ends
    del big
    gc.collect()
    assert pa.total_allocated_bytes() == before
    assert pa.array(result)[99_999].as_py() == 100_000


def test_without_the_package_the_crate_classes_serve():
    # An extension whose users never installed arrow_device: its objects are
    # the crate's own copy of the classes, and consumers read them the same.
    code = textwrap.dedent(
        """
        import sys
        sys.modules["arrow_device"] = None  # the package cannot be imported
        import arrow_device_example as ex
        import pyarrow as pa
        a = ex.arange(3)
        assert type(a).__name__ == "DeviceArray", type(a)
        assert pa.array(a).to_pylist() == [0, 1, 2]
        s = ex.passthrough(pa.RecordBatchReader.from_batches(
            pa.schema([("x", pa.int64())]), [pa.record_batch([pa.array([5, 6])], names=["x"])]))
        assert pa.RecordBatchReader.from_stream(s).read_all().column(0).to_pylist() == [5, 6]
        assert ex.describe(ex.add_one(pa.array([1], pa.int64()))) == ("Int64", 1, 0, (1, -1))
        print("ok")
        """
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "ok"

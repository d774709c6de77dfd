"""`arrow_device` with the real peers: nanoarrow (device arrays both ways),
numpy and pyarrow (DLPack both ways, zero-copy), polars and duckdb (C
streams), and errors of a Python producer reaching each consumer.
"""

import gc
import weakref

import duckdb
import nanoarrow as na
import nanoarrow.device
import numpy as np
import polars as pl
import pyarrow as pa
import pytest

import arrow_device as ad

from checks import NUMERIC, NUMERIC_IDS

EXT_DEV = 12



@pytest.fixture
def batch():
    return pa.record_batch(
        {
            "id": pa.array([1, 2, 3, 4], pa.int64()),
            "name": pa.array(["a", None, "ccc", "dd"]),
            "score": pa.array([0.5, 1.5, None, 3.5]),
        }
    )


def data_address(array):
    """Address of the first element of a numpy array."""
    return array.__array_interface__["data"][0]


def values_address(pa_array):
    """Address of the first element of a primitive pyarrow array."""
    return pa_array.buffers()[1].address + pa_array.offset * pa_array.type.bit_width // 8


# --- nanoarrow ----------------------------------------------------------------


def test_nanoarrow_reads_device_fields_of_our_cpu_arrays(batch):
    device_array = nanoarrow.device.c_device_array(ad.array(batch))
    assert device_array.device_type_id == 1
    assert device_array.device_id == -1
    assert device_array.array.length == 4
    assert device_array.array.n_children == 3
    assert device_array.array.child(1).null_count == 1
    assert device_array.schema.format == "+s"
    assert [device_array.schema.child(i).name for i in range(3)] == ["id", "name", "score"]


def test_nanoarrow_reads_device_fields_of_our_emulated_arrays(batch):
    device_array = nanoarrow.device.c_device_array(ad.array(batch, device=ad.emulated(4)))
    assert device_array.device_type_id == EXT_DEV
    assert device_array.device_id == 4
    assert device_array.array.length == 4
    assert device_array.array.n_children == 3
    assert device_array.array.child(0).length == 4


def test_nanoarrow_reads_values_of_our_cpu_arrays(batch):
    assert na.Array(ad.array(batch.column("name"))).to_pylist() == ["a", None, "ccc", "dd"]
    assert na.Array(ad.array(batch.column("id").slice(1))).to_pylist() == [2, 3, 4]
    stream = na.ArrayStream(ad.stream([batch, batch]))
    assert len(stream.read_all()) == 8


def test_nanoarrow_arrays_come_into_ours():
    from_array = ad.array(na.Array([1, 2, 3], na.int32()), validate="full")
    assert from_array.type == "Int32"
    assert pa.array(from_array).to_pylist() == [1, 2, 3]
    from_c_array = ad.array(na.c_array(["x", None, "z"], na.string()), validate="full")
    assert pa.array(from_c_array).to_pylist() == ["x", None, "z"]


def test_nanoarrow_device_arrays_come_into_ours(batch):
    nano = nanoarrow.device.c_device_array(batch)
    device_array = ad.array(nano, validate="full")
    assert device_array.device == ad.cpu()
    assert pa.record_batch(device_array).equals(batch)


def test_nanoarrow_streams_come_into_ours(batch):
    stream = ad.stream(na.ArrayStream(batch), validate="full")
    got = [pa.record_batch(a) for a in stream]
    assert len(got) == 1 and got[0].equals(batch)


def test_nanoarrow_refuses_host_access_to_our_emulated_arrays(batch):
    with pytest.raises(Exception, match="CPU pointers"):
        na.Array(ad.array(batch.column("id"), device=ad.emulated(1)))


# --- numpy through DLPack ---------------------------------------------------


@pytest.mark.parametrize("dtype", NUMERIC, ids=NUMERIC_IDS)
def test_numpy_reads_our_arrays_zero_copy(dtype):
    source = pa.array(np.arange(10).astype(dtype))
    device_array = ad.array(source)
    view = np.from_dlpack(device_array)
    assert view.dtype == np.dtype(dtype)
    assert view.tolist() == source.to_pylist()
    assert data_address(view) == values_address(source)


@pytest.mark.parametrize("dtype", NUMERIC, ids=NUMERIC_IDS)
def test_numpy_reads_our_sliced_arrays_at_their_offset(dtype):
    source = pa.array(np.arange(10).astype(dtype))
    sliced = ad.array(source.slice(3, 5))
    view = np.from_dlpack(sliced)
    assert view.tolist() == source.slice(3, 5).to_pylist()
    assert data_address(view) == source.buffers()[1].address + 3 * np.dtype(dtype).itemsize


@pytest.mark.parametrize("dtype", NUMERIC, ids=NUMERIC_IDS)
def test_numpy_arrays_come_into_ours_zero_copy(dtype):
    source = np.arange(10).astype(dtype)
    device_array = ad.array(source, validate="full")
    assert len(device_array) == 10
    assert device_array.null_count == 0
    back = pa.array(device_array)
    assert back.type == pa.from_numpy_dtype(np.dtype(dtype))
    assert back.to_pylist() == source.tolist()
    assert values_address(back) == data_address(source)


@pytest.mark.parametrize("dtype", NUMERIC, ids=NUMERIC_IDS)
def test_numpy_slices_come_into_ours_zero_copy(dtype):
    base = np.arange(20).astype(dtype)
    window = base[5:12]
    back = pa.array(ad.array(window))
    assert back.to_pylist() == window.tolist()
    assert values_address(back) == data_address(window)


def test_numpy_array_stays_alive_while_ours_uses_it():
    source = np.arange(100, dtype=np.int32)
    alive = weakref.ref(source)
    device_array = ad.array(source)
    del source
    gc.collect()
    assert alive() is not None
    assert pa.array(device_array).to_pylist() == list(range(100))
    del device_array
    gc.collect()
    assert alive() is None


def test_numpy_round_trip_through_ours_and_the_emulated_device():
    source = np.linspace(0, 1, 33, dtype=np.float32)
    back = ad.array(source, device=ad.emulated(2)).to(ad.cpu())
    assert np.array_equal(np.from_dlpack(back), source)


def test_numpy_bool_arrays_come_in_as_boolean():
    device_array = ad.array(np.array([True, False, True]))
    assert device_array.type == "Boolean"
    assert pa.array(device_array).to_pylist() == [True, False, True]


def test_numpy_zero_dimensional_arrays_come_in_as_one_value():
    assert pa.array(ad.array(np.array(7, dtype=np.int16))).to_pylist() == [7]


def test_numpy_empty_arrays_round_trip():
    device_array = ad.array(np.array([], dtype=np.float64))
    assert len(device_array) == 0
    assert np.from_dlpack(device_array).shape == (0,)


@pytest.mark.parametrize(
    "source, message",
    [
        (np.zeros((2, 3)), "2 dimensions"),
        (np.arange(10)[::2], "not contiguous"),
        (np.zeros(3, dtype=np.complex128), "complex128"),
    ],
    ids=["2d", "strided", "complex"],
)
def test_numpy_arrays_arrow_cannot_hold_raise_type_error(source, message):
    with pytest.raises(TypeError, match=message):
        ad.array(source)


# --- pyarrow through DLPack -------------------------------------------------


def test_pyarrow_exports_dlpack_for_cpu_primitive_arrays():
    source = pa.array([1, 2, 3], pa.int64())
    assert source.__dlpack_device__() == (1, 0)
    view = np.from_dlpack(source)
    assert view.tolist() == [1, 2, 3]
    assert data_address(view) == values_address(source)


@pytest.mark.parametrize("dtype", NUMERIC, ids=NUMERIC_IDS)
def test_pyarrow_dlpack_comes_into_ours_zero_copy(dtype, dlpack_only):
    source = pa.array(np.arange(12).astype(dtype)).slice(2, 7)
    producer = dlpack_only(source)
    device_array = ad.array(producer, validate="full")
    # A versioned capsule was asked for (pyarrow would warn on the legacy one).
    assert producer.calls[0].get("max_version", (0, 0)) >= (1, 0)
    back = pa.array(device_array)
    assert back.equals(source)
    assert values_address(back) == values_address(source)


def test_our_dlpack_goes_into_ours(dlpack_only):
    source = pa.array([5, 6, 7], pa.uint16())
    device_array = ad.array(dlpack_only(ad.array(source)))
    assert pa.array(device_array).equals(source)
    assert values_address(pa.array(device_array)) == values_address(source)


def test_our_legacy_dlpack_capsule_goes_into_ours():
    class LegacyOnly:
        def __init__(self, target):
            self.target = target

        def __dlpack__(self):  # predates max_version: called again without it
            return self.target.__dlpack__()

        def __dlpack_device__(self):
            return self.target.__dlpack_device__()

    source = pa.array([1.5, 2.5], pa.float64())
    assert pa.array(ad.array(LegacyOnly(ad.array(source)))).equals(source)


# pyarrow refuses nulls with ArrowTypeError, a TypeError: arrow_device (like
# numpy) then retries __dlpack__() without max_version, which pyarrow warns of.
@pytest.mark.filterwarnings("ignore:Exporting an unversioned DLPack capsule:DeprecationWarning")
def test_pyarrow_dlpack_with_nulls_is_refused_by_pyarrow(dlpack_only):
    with pytest.raises(Exception, match="nulls"):
        ad.array(dlpack_only(pa.array([1, None, 3])))


# --- polars -------------------------------------------------------------------


def test_polars_dataframe_reads_our_stream(batch):
    frame = pl.DataFrame(ad.stream([batch, batch.slice(1, 2)]))
    assert frame.columns == ["id", "name", "score"]
    assert frame.to_dict(as_series=False) == {
        "id": [1, 2, 3, 4, 2, 3],
        "name": ["a", None, "ccc", "dd", None, "ccc"],
        "score": [0.5, 1.5, None, 3.5, 1.5, None],
    }


def test_polars_dataframe_reads_our_emulated_batches_copied_back(batch):
    on_device = [ad.array(batch, device=ad.emulated(1)) for _ in range(2)]
    frame = pl.DataFrame(ad.stream([a.to(ad.cpu()) for a in on_device]))
    assert frame.height == 8
    assert frame["name"].to_list() == ["a", None, "ccc", "dd"] * 2


def test_polars_from_arrow_reads_our_stream(batch):
    got = pl.from_arrow(ad.stream([batch, batch]))
    # polars 2 reads a bare __arrow_c_stream__ object as a Series of the
    # stream's struct type; unnest it into the frame.
    if isinstance(got, pl.Series):
        assert got.dtype == pl.Struct
        got = got.struct.unnest()
    assert got.to_dict(as_series=False) == pl.DataFrame(pa.Table.from_batches([batch, batch])).to_dict(
        as_series=False
    )


def test_polars_series_reads_our_array():
    series = pl.Series(ad.array(pa.array([1, None, 3], pa.int32())))
    assert series.dtype == pl.Int32
    assert series.to_list() == [1, None, 3]


def test_polars_streams_come_into_ours(batch):
    frame = pl.DataFrame(batch)
    stream = ad.stream(frame, validate="full")
    table = pa.Table.from_batches([pa.record_batch(a) for a in stream])
    assert table.column("id").to_pylist() == [1, 2, 3, 4]
    assert table.column("name").to_pylist() == ["a", None, "ccc", "dd"]


def test_polars_cannot_read_our_emulated_stream(batch):
    stream = ad.stream([ad.array(batch, device=ad.emulated(1))])
    with pytest.raises(Exception, match="CPU pointers"):
        pl.DataFrame(stream)


# --- duckdb -------------------------------------------------------------------


def test_duckdb_reads_our_stream(batch):
    relation = duckdb.from_arrow(ad.stream([batch, batch]))
    rows = relation.fetchall()
    assert rows == [(1, "a", 0.5), (2, None, 1.5), (3, "ccc", None), (4, "dd", 3.5)] * 2


def test_duckdb_queries_our_stream(batch):
    relation = duckdb.from_arrow(ad.stream([batch, batch]))
    assert relation.aggregate("sum(id), count(name)").fetchall() == [(20, 6)]


def test_duckdb_cannot_read_our_emulated_stream(batch):
    stream = ad.stream([ad.array(batch, device=ad.emulated(1))])
    with pytest.raises(Exception, match="CPU pointers"):
        duckdb.from_arrow(stream).fetchall()


def test_duckdb_results_come_into_ours():
    reader = duckdb.sql("select range::bigint as n from range(5)").to_arrow_reader()
    got = [pa.record_batch(a) for a in ad.stream(reader, validate="full")]
    assert sum((b.column("n").to_pylist() for b in got), []) == [0, 1, 2, 3, 4]


# --- producer errors reach consumers --------------------------------------------


def failing_batches(batch, fail_at=2):
    for index in range(10):
        if index == fail_at:
            raise RuntimeError(f"boom at batch {fail_at}")
        yield batch


def test_generator_error_reaches_pyarrow(batch):
    reader = pa.RecordBatchReader.from_stream(ad.stream(failing_batches(batch)))
    assert reader.read_next_batch().equals(batch)
    assert reader.read_next_batch().equals(batch)
    with pytest.raises(Exception, match="RuntimeError: boom at batch 2"):
        reader.read_next_batch()


def test_generator_error_reaches_pyarrow_read_all(batch):
    with pytest.raises(Exception, match="boom at batch 2"):
        pa.RecordBatchReader.from_stream(ad.stream(failing_batches(batch))).read_all()


def test_generator_error_reaches_our_iterator(batch):
    stream = ad.stream(failing_batches(batch))
    next(stream)
    next(stream)
    with pytest.raises(Exception, match="boom at batch 2"):
        next(stream)


def test_generator_error_reaches_our_device_stream_import(batch):
    imported = ad.stream(ad.stream(failing_batches(batch)))
    got = []
    with pytest.raises(Exception, match="boom at batch 2"):
        for device_array in imported:
            got.append(device_array)
    assert len(got) == 2


def test_generator_error_reaches_polars(batch):
    with pytest.raises(Exception, match="boom at batch 2"):
        pl.DataFrame(ad.stream(failing_batches(batch)))


def test_generator_error_reaches_duckdb(batch):
    with pytest.raises(Exception, match="boom at batch 2"):
        duckdb.from_arrow(ad.stream(failing_batches(batch))).fetchall()


def test_generator_error_reaches_nanoarrow(batch):
    with pytest.raises(Exception, match="boom at batch 2"):
        na.ArrayStream(ad.stream(failing_batches(batch))).read_all()


def test_bad_item_in_generator_reaches_pyarrow_as_type_error_text(batch):
    with pytest.raises(Exception, match="TypeError: expected a DeviceArray"):
        pa.RecordBatchReader.from_stream(ad.stream(iter([batch, 42]))).read_all()

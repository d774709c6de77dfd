"""The objects and consumer functions of ``scripts/conformance-table.py``:
what `arrow_device.conformance` checks in each library that speaks the
Arrow PyCapsule protocol or DLPack, and in ours.

Every producer is a module-level factory: `check_producer` calls it afresh
for each export (a stream reader is single-use). Every consumer is a
module-level function: `check_consumer` runs it in spawned worker
processes, which import this module by name (multiprocessing hands them
this process's ``sys.path``). So this module imports nothing at import
time but the standard library; each function imports its library.

All producers hold the same four rows where the library allows:

    a int64          1, null, 3, 4
    b utf8           "x", null, "zz", ""
    c list<int32>    [1, 2], null, [], [3]

Array objects hold them as one struct array (nanoarrow and pyarrow make a
record batch's array a struct); numpy and the DLPack rows of ours hold
int64 values 0..3 without nulls (DLPack has no nulls).
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from typing import Any, Callable, List

#: The library whose rows must pass: a failure there fails the run.
OURS = "arrow_device"
#: The libraries whose versions the table reports, in this order.
LIBRARIES = ("pyarrow", "nanoarrow", "polars", "duckdb", "numpy", OURS)

#: The data column's words, explained under the producers' matrix.
ROWS = "rows"
STRUCT_ROWS = "struct"
INT64 = "int64"
DATA_LEGEND = (
    "`rows`: 4 rows of int64, utf8 and list<int32>, each column with a null (and an empty string and list); "
    "`struct`: the same rows as one struct array; `int64`: int64 0..3 without nulls (DLPack has no nulls)"
)

#: DuckDB's query of the four rows (BIGINT, VARCHAR, INTEGER[]).
DUCKDB_ROWS = (
    "SELECT * FROM (VALUES (1::BIGINT, 'x', [1, 2]::INTEGER[]), (NULL, NULL, NULL),"
    " (3, 'zz', []), (4, '', [3])) t(a, b, c)"
)


@dataclass(frozen=True)
class Producer:
    """One object to check: `make()` returns a new one each call."""

    library: str
    #: What the object is, as the table names it (``pyarrow.RecordBatch``).
    name: str
    #: What it holds.
    data: str
    make: Callable[[], Any]
    #: Where its device exports must be: ``cpu`` or ``emulated``.
    device: str = "cpu"

    @property
    def ours(self) -> bool:
        return self.library == OURS


@dataclass(frozen=True)
class Consumer:
    """One consumer function: `fn(producer)` returns what it made of it."""

    library: str
    #: The call, as the table names it (``pyarrow.array(p)``).
    name: str
    fn: Callable[[Any], Any]

    @property
    def ours(self) -> bool:
        return self.library == OURS


def installed(library: str) -> bool:
    return importlib.util.find_spec(library) is not None


# ----------------------------------------------------------------- samples


def sample_batch():
    """The four rows as a pyarrow RecordBatch."""
    import pyarrow as pa

    return pa.record_batch(
        {
            "a": pa.array([1, None, 3, 4], pa.int64()),
            "b": pa.array(["x", None, "zz", ""], pa.utf8()),
            "c": pa.array([[1, 2], None, [], [3]], pa.list_(pa.int32())),
        }
    )


def _int64_values():
    import pyarrow as pa

    return pa.array([0, 1, 2, 3], pa.int64())


# ----------------------------------------------------------------- pyarrow


def make_pyarrow_array():
    return sample_batch().to_struct_array()


def make_pyarrow_chunked_array():
    import pyarrow as pa

    rows = sample_batch().to_struct_array()
    return pa.chunked_array([rows, rows])


def make_pyarrow_record_batch():
    return sample_batch()


def make_pyarrow_table():
    import pyarrow as pa

    return pa.Table.from_batches([sample_batch(), sample_batch()])


def make_pyarrow_record_batch_reader():
    import pyarrow as pa

    batch = sample_batch()
    return pa.RecordBatchReader.from_batches(batch.schema, [batch, batch])


class DeviceArrayOnly:
    """Exposes only `__arrow_c_device_array__` of the object it wraps, so
    that a check sees that method alone."""

    def __init__(self, target: Any):
        self._target = target

    def __arrow_c_device_array__(self, requested_schema=None, **kwargs):
        return self._target.__arrow_c_device_array__(requested_schema, **kwargs)


def make_pyarrow_device_array_only():
    return DeviceArrayOnly(sample_batch())


# ----------------------------------------------------------------- nanoarrow


def make_nanoarrow_c_array():
    import nanoarrow as na

    return na.c_array(sample_batch())


def make_nanoarrow_array():
    import nanoarrow as na

    return na.Array(sample_batch())


def make_nanoarrow_c_array_stream():
    import nanoarrow as na

    return na.c_array_stream(sample_batch())


def make_nanoarrow_array_stream():
    import nanoarrow as na

    return na.ArrayStream(sample_batch())


def make_nanoarrow_c_device_array():
    from nanoarrow.device import c_device_array

    return c_device_array(sample_batch())


def _nanoarrow_has_device() -> bool:
    if not installed("nanoarrow"):
        return False
    try:
        from nanoarrow.device import c_device_array  # noqa: F401
    except ImportError:
        return False
    return True


# ----------------------------------------------------------------- polars


def make_polars_series():
    import polars as pl

    return pl.Series("rows", sample_batch().to_struct_array())


def make_polars_data_frame():
    import polars as pl

    return pl.from_arrow(sample_batch())


# ----------------------------------------------------------------- duckdb


def make_duckdb_relation():
    import duckdb

    # A connection of its own: the default one refuses a new query while
    # another object (a reader of a previous call) holds an open result.
    return duckdb.connect().sql(DUCKDB_ROWS)


def make_duckdb_arrow_reader():
    import duckdb

    return duckdb.connect().sql(DUCKDB_ROWS).arrow()


# ----------------------------------------------------------------- numpy


def make_numpy_ndarray():
    import numpy as np

    return np.arange(4, dtype=np.int64)


# ----------------------------------------------------------------- ours


def make_arrow_device_array_cpu():
    import arrow_device as ad

    return ad.array(sample_batch())


def make_arrow_device_array_emulated():
    import arrow_device as ad

    return ad.array(sample_batch(), device=ad.emulated())


def make_arrow_device_int64_cpu():
    import arrow_device as ad

    return ad.array(_int64_values())


def make_arrow_device_int64_emulated():
    import arrow_device as ad

    return ad.array(_int64_values(), device=ad.emulated())


def make_arrow_device_stream_cpu():
    import arrow_device as ad

    return ad.stream([sample_batch(), sample_batch()])


def make_arrow_device_stream_emulated():
    import arrow_device as ad

    device = ad.emulated()
    return ad.stream([ad.array(sample_batch(), device=device) for _ in range(2)])


# ----------------------------------------------------------------- the lists


def producers(include_peers: bool = True) -> List[Producer]:
    """Every producer whose library is installed; ours only when
    `include_peers` is false."""
    ours = [
        Producer(OURS, "arrow_device.DeviceArray (CPU)", STRUCT_ROWS, make_arrow_device_array_cpu),
        Producer(OURS, "arrow_device.DeviceArray (emulated device)", STRUCT_ROWS, make_arrow_device_array_emulated, "emulated"),
        Producer(OURS, "arrow_device.DeviceArray int64 (CPU)", INT64, make_arrow_device_int64_cpu),
        Producer(OURS, "arrow_device.DeviceArray int64 (emulated device)", INT64, make_arrow_device_int64_emulated, "emulated"),
        Producer(OURS, "arrow_device.DeviceStream (CPU)", f"{ROWS}, 2 batches", make_arrow_device_stream_cpu),
        Producer(OURS, "arrow_device.DeviceStream (emulated device)", f"{ROWS}, 2 batches", make_arrow_device_stream_emulated, "emulated"),
    ]
    if not include_peers:
        return ours
    peers = [
        Producer("pyarrow", "pyarrow.Array", STRUCT_ROWS, make_pyarrow_array),
        Producer("pyarrow", "pyarrow.ChunkedArray", f"{STRUCT_ROWS}, 2 chunks", make_pyarrow_chunked_array),
        Producer("pyarrow", "pyarrow.RecordBatch", ROWS, make_pyarrow_record_batch),
        Producer("pyarrow", "pyarrow.Table", f"{ROWS}, 2 batches", make_pyarrow_table),
        Producer("pyarrow", "pyarrow.RecordBatchReader", f"{ROWS}, 2 batches", make_pyarrow_record_batch_reader),
        Producer("pyarrow", "pyarrow.RecordBatch through `__arrow_c_device_array__` alone", ROWS, make_pyarrow_device_array_only),
        Producer("nanoarrow", "nanoarrow.c_array", STRUCT_ROWS, make_nanoarrow_c_array),
        Producer("nanoarrow", "nanoarrow.Array", STRUCT_ROWS, make_nanoarrow_array),
        Producer("nanoarrow", "nanoarrow.c_array_stream", ROWS, make_nanoarrow_c_array_stream),
        Producer("nanoarrow", "nanoarrow.ArrayStream", ROWS, make_nanoarrow_array_stream),
    ]
    if _nanoarrow_has_device():
        peers.append(Producer("nanoarrow", "nanoarrow.device.c_device_array", STRUCT_ROWS, make_nanoarrow_c_device_array))
    peers += [
        Producer("polars", "polars.Series", f"{STRUCT_ROWS}, as polars holds it (string_view, large_list)", make_polars_series),
        Producer("polars", "polars.DataFrame", f"{ROWS}, as polars holds them (string_view, large_list)", make_polars_data_frame),
        Producer("duckdb", "duckdb relation (`duckdb.sql`)", f"{ROWS}, from SQL VALUES", make_duckdb_relation),
        Producer("duckdb", "duckdb relation `.arrow()` (a pyarrow.RecordBatchReader)", f"{ROWS}, from SQL VALUES", make_duckdb_arrow_reader),
        Producer("numpy", "numpy.ndarray", INT64, make_numpy_ndarray),
    ]
    # pyarrow makes the samples of every row but numpy's.
    usable = [p for p in peers if installed(p.library) and (p.library == "numpy" or installed("pyarrow"))]
    return usable + ours


# ----------------------------------------------------------------- consumers


def consume_pyarrow_array(p):
    import pyarrow as pa

    return pa.array(p)


def consume_pyarrow_table(p):
    import pyarrow as pa

    return pa.table(p)


def consume_pyarrow_reader(p):
    import pyarrow as pa

    return pa.RecordBatchReader.from_stream(p).read_all()


def consume_nanoarrow_array(p):
    import nanoarrow as na

    return na.Array(p)


def consume_nanoarrow_c_array_stream(p):
    import nanoarrow as na
    from nanoarrow.c_array_stream import CArrayStream

    stream = na.c_array_stream(p)
    schema = stream.get_schema()
    batches = list(stream)
    return CArrayStream.from_c_arrays(batches, schema)


def consume_nanoarrow_c_device_array(p):
    from nanoarrow.device import c_device_array

    return c_device_array(p)


def consume_polars_from_arrow(p):
    import polars as pl

    return pl.from_arrow(p)


def consume_polars_data_frame(p):
    import polars as pl

    return pl.DataFrame(p)


def consume_duckdb_from_arrow(p):
    import duckdb

    return duckdb.connect().from_arrow(p).to_arrow_table()


def consume_arrow_device_array(p):
    import arrow_device as ad

    return ad.array(p)


def consume_arrow_device_stream(p):
    import arrow_device as ad

    # Read every batch, then hand them back as a stream of our own.
    return ad.stream(list(ad.stream(p)))


def consumers(include_peers: bool = True) -> List[Consumer]:
    """Every consumer whose library is installed; ours only when
    `include_peers` is false."""
    ours = [
        Consumer(OURS, "arrow_device.array(p)", consume_arrow_device_array),
        Consumer(OURS, "arrow_device.stream(p) read fully", consume_arrow_device_stream),
    ]
    if not include_peers:
        return ours
    peers = [
        Consumer("pyarrow", "pyarrow.array(p)", consume_pyarrow_array),
        Consumer("pyarrow", "pyarrow.table(p)", consume_pyarrow_table),
        Consumer("pyarrow", "pyarrow.RecordBatchReader.from_stream(p).read_all()", consume_pyarrow_reader),
        Consumer("nanoarrow", "nanoarrow.Array(p)", consume_nanoarrow_array),
        Consumer("nanoarrow", "nanoarrow.c_array_stream(p) read fully", consume_nanoarrow_c_array_stream),
    ]
    if _nanoarrow_has_device():
        peers.append(Consumer("nanoarrow", "nanoarrow.device.c_device_array(p)", consume_nanoarrow_c_device_array))
    peers += [
        Consumer("polars", "polars.from_arrow(p)", consume_polars_from_arrow),
        Consumer("polars", "polars.DataFrame(p)", consume_polars_data_frame),
        Consumer("duckdb", "duckdb.connect().from_arrow(p).to_arrow_table()", consume_duckdb_from_arrow),
    ]
    return [c for c in peers if installed(c.library)] + ours


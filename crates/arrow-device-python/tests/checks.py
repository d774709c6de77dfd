"""Checks shared by the Python test files: errors raised cleanly (never a
`PanicException`), values read back on the host, releases settled, and the
golden streams read and compared."""

import gc
import re

import arrow_device as ad
import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
import pytest

# The NumPy dtypes DLPack carries both ways (one-dimensional numbers).
NUMERIC = [
    np.int8,
    np.int16,
    np.int32,
    np.int64,
    np.uint8,
    np.uint16,
    np.uint32,
    np.uint64,
    np.float16,
    np.float32,
    np.float64,
]
NUMERIC_IDS = [np.dtype(t).name for t in NUMERIC]


def raises_cleanly(call, expected, *patterns):
    """Runs `call`, which must raise `expected` (a type or tuple) whose
    message matches every regex in `patterns` (case-insensitive); a
    `PanicException` (a BaseException) fails the test whatever `expected`
    says. Returns the exception."""
    try:
        call()
    except BaseException as error:  # noqa: B036 - PanicException is a BaseException
        name = f"{type(error).__module__}.{type(error).__name__}"
        assert type(error).__name__ != "PanicException", f"a panic reached Python: {error}"
        assert isinstance(error, Exception), f"{name} is not an Exception: {error}"
        assert isinstance(error, expected), f"expected {expected}, got {name}: {error}"
        message = str(error)
        assert message, f"{name} has no message"
        for pattern in patterns:
            assert re.search(pattern, message, re.IGNORECASE), (pattern, message)
        return error
    pytest.fail(f"expected {expected}, nothing was raised")


def host_values(device_array):
    """The array's values as a pyarrow array, copied to the CPU."""
    back = device_array.to(ad.cpu())
    assert back.device == ad.cpu()
    return pa.array(back)


def settle():
    """Collects garbage and enters the native module once, so that Python
    references it dropped without the GIL are released (see conftest)."""
    gc.collect()
    ad.cpu()
    gc.collect()


def read_golden(path):
    with ipc.open_stream(path) as reader:
        return reader.schema, list(reader)


def assert_batch_equal(got, expected):
    assert isinstance(got, pa.RecordBatch)
    assert got.schema.equals(expected.schema, check_metadata=True), (got.schema, expected.schema)
    assert got.num_rows == expected.num_rows
    assert got.equals(expected, check_metadata=True)

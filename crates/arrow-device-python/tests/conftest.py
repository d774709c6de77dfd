"""Shared fixtures of the `arrow_device` Python tests.

* ``golden_path``: any test that takes it runs once per golden Arrow IPC
  stream of ``<repo>/../shared/golden`` (written by Arrow C++ 21, see its
  README).
* ``ffi``: reads the C structs inside the protocol's capsules (capsule names,
  the ``ArrowDeviceArray`` device fields, an ``ArrowDeviceArrayStream``'s
  batches) through ctypes, without consuming them.
* ``pool``: counts pyarrow's allocations, to see that releases happen.

Helpers live here as fixtures, not as importable functions, so that every
test file (test_hostile.py included) can use them without importing
``conftest``.
"""

import ctypes
import gc
import os
from pathlib import Path
from types import SimpleNamespace

import pytest

REPO_ROOT = Path(__file__).resolve().parents[3]
# ARROW_DEVICE_GOLDEN_DIR overrides the place (the GPU suite carries a copy
# to machines where the checkout travels without its neighbours).
GOLDEN_DIR = Path(
    os.environ.get("ARROW_DEVICE_GOLDEN_DIR") or REPO_ROOT / ".." / "shared" / "golden"
).resolve()
GOLDEN_FILES = sorted(GOLDEN_DIR.glob("*.stream"))


def pytest_generate_tests(metafunc):
    if "golden_path" in metafunc.fixturenames:
        metafunc.parametrize(
            "golden_path", GOLDEN_FILES, ids=[p.stem.removeprefix("generated_") for p in GOLDEN_FILES]
        )


@pytest.fixture(scope="session")
def golden_files():
    """Every golden stream's path (32 files)."""
    return list(GOLDEN_FILES)


# --- C structs through ctypes ------------------------------------------------

# struct ArrowArray: 80 bytes; release at offset 64.
ARROW_ARRAY_SIZE = 80
ARROW_ARRAY_RELEASE = 64
# struct ArrowSchema: 72 bytes; release at offset 56.
ARROW_SCHEMA_SIZE = 72
ARROW_SCHEMA_RELEASE = 56
# struct ArrowDeviceArray: ArrowArray, int64 device_id @80, int32 device_type
# @88, void* sync_event @96, int64 reserved[3] @104; 128 bytes.
DEVICE_ARRAY_SIZE = 128

_RELEASE = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_GET_SCHEMA = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)
_GET_NEXT = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)
_GET_LAST_ERROR = ctypes.CFUNCTYPE(ctypes.c_char_p, ctypes.c_void_p)

# Private prototypes of the C API: setting restype/argtypes on the shared
# `ctypes.pythonapi.PyCapsule_*` objects would change them for every other
# test module too (test_hostile.py declares its own).
_PyCapsule_GetName = ctypes.PYFUNCTYPE(ctypes.c_char_p, ctypes.py_object)(
    ("PyCapsule_GetName", ctypes.pythonapi)
)
_PyCapsule_GetPointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi)
)


def capsule_name(capsule):
    """The capsule's name as ``str`` (``None`` for an unnamed one)."""
    name = _PyCapsule_GetName(capsule)
    return None if name is None else name.decode()


def capsule_pointer(capsule, name):
    """The struct pointer inside a capsule named ``name``."""
    return _PyCapsule_GetPointer(capsule, name.encode())


def _pointer_at(address):
    return ctypes.c_void_p.from_address(address).value


def _release(address, release_offset, functype=_RELEASE):
    release = _pointer_at(address + release_offset)
    if release:
        functype(release)(address)


def device_array_fields_at(address):
    """The fields of the ``ArrowDeviceArray`` at ``address``."""
    return SimpleNamespace(
        length=ctypes.c_int64.from_address(address).value,
        released=_pointer_at(address + ARROW_ARRAY_RELEASE) is None,
        device_id=ctypes.c_int64.from_address(address + 80).value,
        device_type=ctypes.c_int32.from_address(address + 88).value,
        sync_event=_pointer_at(address + 96),
        reserved=[ctypes.c_int64.from_address(address + 104 + 8 * i).value for i in range(3)],
    )


def device_array_fields(capsule):
    """The fields of the ``ArrowDeviceArray`` in an ``arrow_device_array``
    capsule, read in place (the capsule still owns it)."""
    return device_array_fields_at(capsule_pointer(capsule, "arrow_device_array"))


def read_device_stream(capsule):
    """Drains the ``ArrowDeviceArrayStream`` of an
    ``arrow_device_array_stream`` capsule through its C callbacks: returns
    ``(stream device_type, get_schema status, [batch fields...])``; each
    batch is released after reading its fields. The stream itself is left
    to the capsule's destructor."""
    stream = capsule_pointer(capsule, "arrow_device_array_stream")
    device_type = ctypes.c_int32.from_address(stream).value
    get_schema = _GET_SCHEMA(_pointer_at(stream + 8))
    get_next = _GET_NEXT(_pointer_at(stream + 16))
    get_last_error = _GET_LAST_ERROR(_pointer_at(stream + 24))

    schema = ctypes.create_string_buffer(ARROW_SCHEMA_SIZE)
    schema_status = get_schema(stream, ctypes.addressof(schema))
    if schema_status == 0:
        _release(ctypes.addressof(schema), ARROW_SCHEMA_RELEASE)

    batches = []
    while True:
        out = ctypes.create_string_buffer(DEVICE_ARRAY_SIZE)
        status = get_next(stream, ctypes.addressof(out))
        if status != 0:
            raise OSError(status, (get_last_error(stream) or b"").decode())
        fields = device_array_fields_at(ctypes.addressof(out))
        if fields.released:  # end of stream
            break
        batches.append(fields)
        _release(ctypes.addressof(out), ARROW_ARRAY_RELEASE)
    return device_type, schema_status, batches


@pytest.fixture(scope="session")
def ffi():
    """ctypes readers of the capsules' C structs (see the module docs)."""
    return SimpleNamespace(
        capsule_name=capsule_name,
        capsule_pointer=capsule_pointer,
        device_array_fields=device_array_fields,
        read_device_stream=read_device_stream,
    )


# --- allocation counting ------------------------------------------------------


class _Pool:
    """pyarrow's allocated bytes since the fixture started."""

    def __init__(self):
        import pyarrow as pa

        self._pa = pa
        self.settle()
        self.base = pa.total_allocated_bytes()

    def settle(self):
        """Collects garbage, and makes one call into the native module so
        that references PyO3 deferred while the GIL was not known held are
        dropped."""
        import arrow_device

        gc.collect()
        arrow_device.cpu()
        gc.collect()

    def held(self, settle=True):
        if settle:
            self.settle()
        return self._pa.total_allocated_bytes() - self.base


@pytest.fixture
def pool():
    return _Pool()


@pytest.fixture
def big_batch():
    """A factory of record batches whose 8 MB column pyarrow allocated (so
    that the pool counts it; `pa.array(numpy)` would borrow numpy's)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    def make(rows=1_000_000):
        column = pc.multiply(pa.array(np.arange(rows, dtype=np.int64)), 2)
        return pa.record_batch([column], names=["x"])

    return make


class _DLPackOnly:
    """Exposes only an object's DLPack methods, so that `arrow_device.array`
    takes the DLPack path rather than the Arrow capsules or the CUDA Array
    Interface; records the keyword arguments of each `__dlpack__` call."""

    def __init__(self, target):
        self.target = target
        self.calls = []

    def __dlpack__(self, **kwargs):
        self.calls.append(kwargs)
        return self.target.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.target.__dlpack_device__()


@pytest.fixture(scope="session")
def dlpack_only():
    """The class that wraps an object to expose only its DLPack methods."""
    return _DLPackOnly

"""A hand-written, deliberately hostile producer of Arrow C (Device) Data
Interface structs and DLPack tensors, in ctypes, for test_hostile.py.

Mirrors the core library's malformed-input producer
(crates/arrow-device/tests/malformed/producer.rs): trees are described
declaratively (`ArrayNode`, `SchemaNode`), built into C structs whose memory
Python keeps alive, and every release callback counts its calls, per struct:
the root's count (`Built.array_releases`, `Built.schema_releases`) and each
child's (`Built.child_release_counts()`), so a test can assert that what it
handed over was released exactly once, and never twice. Streams
(`StreamState`) and DLPack tensors (`Tensor`) count their release / deleter
calls the same way.

Memory is never freed while the test process runs (everything stays in
`_REGISTRY`): a consumer that reads a struct after releasing it reads stale
but mapped memory instead of crashing the whole test run.
"""

from __future__ import annotations

import ctypes
import itertools
import struct as _struct
from ctypes import (
    CFUNCTYPE,
    Structure,
    c_char_p,
    c_int,
    c_int32,
    c_int64,
    c_uint8,
    c_uint16,
    c_uint32,
    c_uint64,
    c_void_p,
    py_object,
)
from dataclasses import dataclass, field
from typing import Callable, List, Optional

EIO = 5
EINVAL = 22

NULLABLE = 2

# Device types (spec values, equal to DLPack's).
CPU = 1
CUDA = 2
EXT_DEV = 12

# ---------------------------------------------------------------- C structs


class ArrowSchema(Structure):
    _fields_ = [
        ("format", c_void_p),
        ("name", c_void_p),
        ("metadata", c_void_p),
        ("flags", c_int64),
        ("n_children", c_int64),
        ("children", c_void_p),
        ("dictionary", c_void_p),
        ("release", c_void_p),
        ("private_data", c_void_p),
    ]


class ArrowArray(Structure):
    _fields_ = [
        ("length", c_int64),
        ("null_count", c_int64),
        ("offset", c_int64),
        ("n_buffers", c_int64),
        ("n_children", c_int64),
        ("buffers", c_void_p),
        ("children", c_void_p),
        ("dictionary", c_void_p),
        ("release", c_void_p),
        ("private_data", c_void_p),
    ]


class ArrowDeviceArray(Structure):
    _fields_ = [
        ("array", ArrowArray),
        ("device_id", c_int64),
        ("device_type", c_int32),
        ("sync_event", c_void_p),
        ("reserved", c_int64 * 3),
    ]


class ArrowArrayStream(Structure):
    _fields_ = [
        ("get_schema", c_void_p),
        ("get_next", c_void_p),
        ("get_last_error", c_void_p),
        ("release", c_void_p),
        ("private_data", c_void_p),
    ]


class ArrowDeviceArrayStream(Structure):
    _fields_ = [
        ("device_type", c_int32),
        ("get_schema", c_void_p),
        ("get_next", c_void_p),
        ("get_last_error", c_void_p),
        ("release", c_void_p),
        ("private_data", c_void_p),
    ]


class DLDevice(Structure):
    _fields_ = [("device_type", c_int32), ("device_id", c_int32)]


class DLDataType(Structure):
    _fields_ = [("code", c_uint8), ("bits", c_uint8), ("lanes", c_uint16)]


class DLTensor(Structure):
    _fields_ = [
        ("data", c_void_p),
        ("device", DLDevice),
        ("ndim", c_int32),
        ("dtype", DLDataType),
        ("shape", c_void_p),
        ("strides", c_void_p),
        ("byte_offset", c_uint64),
    ]


class DLManagedTensor(Structure):
    _fields_ = [
        ("dl_tensor", DLTensor),
        ("manager_ctx", c_void_p),
        ("deleter", c_void_p),
    ]


class DLPackVersion(Structure):
    _fields_ = [("major", c_uint32), ("minor", c_uint32)]


class DLManagedTensorVersioned(Structure):
    _fields_ = [
        ("version", DLPackVersion),
        ("manager_ctx", c_void_p),
        ("deleter", c_void_p),
        ("flags", c_uint64),
        ("dl_tensor", DLTensor),
    ]


# The ABI's sizes on 64-bit targets (dlpack/abi.rs, abi.rs).
assert ctypes.sizeof(ArrowSchema) == 72
assert ctypes.sizeof(ArrowArray) == 80
assert ctypes.sizeof(ArrowDeviceArray) == 128
assert ArrowDeviceArray.device_type.offset == 88
assert ArrowDeviceArray.sync_event.offset == 96
assert ctypes.sizeof(ArrowArrayStream) == 40
assert ctypes.sizeof(ArrowDeviceArrayStream) == 48
assert ctypes.sizeof(DLTensor) == 48
assert ctypes.sizeof(DLManagedTensor) == 64
assert ctypes.sizeof(DLManagedTensorVersioned) == 80
assert DLManagedTensorVersioned.dl_tensor.offset == 32

# ------------------------------------------- DLPack 1.3's C exchange table


class DLPackExchangeAPIHeader(Structure):
    _fields_ = [("version", DLPackVersion), ("prev_api", c_void_p)]


class DLPackExchangeAPI(Structure):
    _fields_ = [
        ("header", DLPackExchangeAPIHeader),
        ("managed_tensor_allocator", c_void_p),
        ("managed_tensor_from_py_object_no_sync", c_void_p),
        ("managed_tensor_to_py_object_no_sync", c_void_p),
        ("dltensor_from_py_object_no_sync", c_void_p),
        ("current_work_stream", c_void_p),
    ]


# dlpack.h 1.3 on 64-bit targets (exchange/mod.rs asserts the same).
assert ctypes.sizeof(DLPackExchangeAPIHeader) == 16
assert ctypes.sizeof(DLPackExchangeAPI) == 56
assert DLPackExchangeAPI.current_work_stream.offset == 48

EXCHANGE_API_CAPSULE = b"dlpack_exchange_api"
# Calling a table's functions: the GIL stays held (dlpack.h), and a Python
# exception they set is raised.
EXCHANGE_FROM_PY_OBJECT = ctypes.PYFUNCTYPE(c_int, py_object, ctypes.POINTER(c_void_p))
EXCHANGE_TO_PY_OBJECT = ctypes.PYFUNCTYPE(c_int, c_void_p, ctypes.POINTER(c_void_p))
EXCHANGE_CURRENT_WORK_STREAM = ctypes.PYFUNCTYPE(c_int, c_int32, c_int32, ctypes.POINTER(c_void_p))
_CapsuleGetPointer = ctypes.PYFUNCTYPE(c_void_p, py_object, c_char_p)(("PyCapsule_GetPointer", ctypes.pythonapi))


def exchange_table(owner) -> DLPackExchangeAPI:
    """The table of `owner` (a type with `__dlpack_c_exchange_api__`, or the
    capsule itself), read in place."""
    capsule = getattr(owner, "__dlpack_c_exchange_api__", owner)
    return DLPackExchangeAPI.from_address(_CapsuleGetPointer(capsule, EXCHANGE_API_CAPSULE))


# ---------------------------------------------------------------- callbacks

RELEASE_FN = CFUNCTYPE(None, c_void_p)
GET_SCHEMA_FN = CFUNCTYPE(c_int, c_void_p, c_void_p)
GET_NEXT_FN = CFUNCTYPE(c_int, c_void_p, c_void_p)
GET_LAST_ERROR_FN = CFUNCTYPE(c_void_p, c_void_p)
CAPSULE_DESTRUCTOR = CFUNCTYPE(None, c_void_p)

# Everything C may still point to: struct memory, buffers, callbacks.
_REGISTRY: dict = {}
_KEEP: list = []
_ids = itertools.count(1)


def _register(obj) -> int:
    key = next(_ids)
    _REGISTRY[key] = obj
    return key


def fn_address(fn) -> int:
    return ctypes.cast(fn, c_void_p).value


def release_at(address: int, offset_of_release: int) -> None:
    """Calls the release callback of the struct at `address` if it is live
    (its `release` member is at `offset_of_release`), as a capsule
    destructor does."""
    release = c_void_p.from_address(address + offset_of_release).value
    if release:
        RELEASE_FN(release)(address)


# ---------------------------------------------------------------- buffers


def i8s(values):
    return bytes(_struct.pack(f"<{len(values)}b", *values))


def i32s(values):
    return bytes(_struct.pack(f"<{len(values)}i", *values))


def i64s(values):
    return bytes(_struct.pack(f"<{len(values)}q", *values))


def bitmap(valid):
    bits = bytearray(max(1, (len(valid) + 7) // 8))
    for i, v in enumerate(valid):
        if v:
            bits[i // 8] |= 1 << (i % 8)
    return bytes(bits)


def view(data: bytes, buffer_index: int = 0, offset: int = 0) -> bytes:
    """A 16-byte string view."""
    if len(data) <= 12:
        return _struct.pack("<i", len(data)) + data + bytes(12 - len(data))
    return _struct.pack("<i4sii", len(data), data[:4], buffer_index, offset)


def encode_metadata(pairs) -> bytes:
    """The C interface's metadata encoding: int32 count, then int32 length
    and bytes for each key and value (native endianness: little here)."""
    out = _struct.pack("<i", len(pairs))
    for key, value in pairs:
        out += _struct.pack("<i", len(key)) + key
        out += _struct.pack("<i", len(value)) + value
    return out


def _words(data: bytes):
    """8-byte-aligned memory holding `data` (at least one word)."""
    n = max(1, (len(data) + 7) // 8)
    buf = (c_uint64 * n)()
    ctypes.memmove(buf, data, len(data))
    return buf


# ---------------------------------------------------------------- trees


class _Node:
    """Builders shared by array and schema nodes."""

    def with_children(self, *children):
        self.children = list(children)
        return self

    def with_dictionary(self, dictionary):
        self.dictionary = dictionary
        return self


@dataclass
class ArrayNode(_Node):
    length: int
    null_count: int
    buffers: List[Optional[bytes]]
    children: List["ArrayNode"] = field(default_factory=list)
    dictionary: Optional["ArrayNode"] = None
    offset: int = 0


@dataclass
class SchemaNode(_Node):
    format: Optional[bytes]
    name: Optional[bytes] = b""
    flags: int = NULLABLE
    children: List["SchemaNode"] = field(default_factory=list)
    dictionary: Optional["SchemaNode"] = None
    metadata: Optional[bytes] = None

    def non_nullable(self):
        self.flags &= ~NULLABLE
        return self


def schema(format, name=b"", **kw) -> SchemaNode:
    if isinstance(format, str):
        format = format.encode()
    if isinstance(name, str):
        name = name.encode()
    return SchemaNode(format, name, **kw)


class _Tree:
    """The memory of one built tree, and its release counts."""

    def __init__(self):
        self.memory = []  # everything the structs point to
        self.nodes = []  # child and dictionary structs, in build order
        self.root_releases = 0
        self.child_releases = {}  # child id -> count
        self.key = _register(self)


def _root_release(struct_type):
    @RELEASE_FN
    def release(address):
        s = struct_type.from_address(address)
        tree = _REGISTRY.get(s.private_data or 0)
        if tree is None:
            return
        # Spec: the root's release releases the children still unreleased.
        for child in tree.nodes:
            if child.release:
                RELEASE_FN(child.release)(ctypes.addressof(child))
        tree.root_releases += 1
        # private_data stays: a second call on this struct is counted too.
        s.release = None

    return release


def _child_release(struct_type):
    @RELEASE_FN
    def release(address):
        s = struct_type.from_address(address)
        key = s.private_data or 0
        child_counts = _CHILD_COUNTS.setdefault(key, [0])
        child_counts[0] += 1
        s.release = None

    return release


# Child release counts, by the child's private_data id.
_CHILD_COUNTS: dict = {}

RELEASE_SCHEMA = _root_release(ArrowSchema)
RELEASE_ARRAY = _root_release(ArrowArray)
RELEASE_SCHEMA_CHILD = _child_release(ArrowSchema)
RELEASE_ARRAY_CHILD = _child_release(ArrowArray)


def _keep(tree, memory) -> int:
    """The address of `memory`, which `tree` keeps alive."""
    tree.memory.append(memory)
    return ctypes.addressof(memory)


def _cstring(tree, data: Optional[bytes]) -> Optional[int]:
    """NUL-terminated `data` (None: NULL)."""
    return None if data is None else _keep(tree, ctypes.create_string_buffer(data))


def _buffer(tree, data: Optional[bytes]) -> Optional[int]:
    """8-byte-aligned `data` (None: NULL)."""
    return None if data is None else _keep(tree, _words(data))


def _pointers(tree, addresses) -> int:
    """A C array of `addresses` (None: NULL)."""
    return _keep(tree, (c_void_p * len(addresses))(*addresses))


def _owned(struct, release, tree) -> int:
    """Makes `struct` a child or dictionary of `tree`, released by `release`
    and counted by its own id; returns its address."""
    struct.release = fn_address(release)
    struct.private_data = next(_ids)
    _CHILD_COUNTS[struct.private_data] = [0]
    tree.nodes.append(struct)
    return ctypes.addressof(struct)


def _owned_schema(node: SchemaNode, tree: _Tree) -> int:
    return _owned(_schema_struct(node, tree), RELEASE_SCHEMA_CHILD, tree)


def _owned_array(node: ArrayNode, tree: _Tree) -> int:
    return _owned(_array_struct(node, tree), RELEASE_ARRAY_CHILD, tree)


def _schema_struct(node: SchemaNode, tree: _Tree) -> ArrowSchema:
    s = ArrowSchema()
    s.format = _cstring(tree, node.format)
    s.name = _cstring(tree, node.name)
    s.metadata = _buffer(tree, node.metadata)
    s.flags = node.flags
    s.n_children = len(node.children)
    if node.children:
        s.children = _pointers(tree, [_owned_schema(child, tree) for child in node.children])
    if node.dictionary is not None:
        s.dictionary = _owned_schema(node.dictionary, tree)
    return s


def _array_struct(node: ArrayNode, tree: _Tree) -> ArrowArray:
    a = ArrowArray()
    a.length = node.length
    a.null_count = node.null_count
    a.offset = node.offset
    a.n_buffers = len(node.buffers)
    a.n_children = len(node.children)
    if node.buffers:
        a.buffers = _pointers(tree, [_buffer(tree, data) for data in node.buffers])
    if node.children:
        a.children = _pointers(tree, [_owned_array(child, tree) for child in node.children])
    if node.dictionary is not None:
        a.dictionary = _owned_array(node.dictionary, tree)
    return a


def child_ptr(parent, index: int) -> int:
    """The address held in child slot `index` of a built struct."""
    return c_void_p.from_address(parent.children + 8 * index).value


def set_child_ptr(parent, index: int, address: Optional[int]) -> None:
    c_void_p.from_address(parent.children + 8 * index).value = address


def child_of(parent, index: int, struct_type):
    return struct_type.from_address(child_ptr(parent, index))


def buffer_ptr(array, index: int) -> int:
    return c_void_p.from_address(array.buffers + 8 * index).value


def set_buffer_ptr(array, index: int, address: Optional[int]) -> None:
    c_void_p.from_address(array.buffers + 8 * index).value = address


@dataclass
class Case:
    array: ArrayNode
    schema: SchemaNode

    def build(self, **device) -> "Built":
        return Built(self, **device)


class Built:
    """The C structs of a case: `device_array` (an `ArrowDeviceArray` whose
    `.array` is the `ArrowArray`) and `schema`, with their release counts."""

    def __init__(self, case: Case, device_type=CPU, device_id=-1, sync_event=None):
        self.schema_tree = _Tree()
        self.array_tree = _Tree()
        self.schema = _schema_struct(case.schema, self.schema_tree)
        self.schema.release = fn_address(RELEASE_SCHEMA)
        self.schema.private_data = self.schema_tree.key
        self.device_array = ArrowDeviceArray()
        self.device_array.array = _array_struct(case.array, self.array_tree)
        self.device_array.array.release = fn_address(RELEASE_ARRAY)
        self.device_array.array.private_data = self.array_tree.key
        self.device_array.device_type = device_type
        self.device_array.device_id = device_id
        self.device_array.sync_event = sync_event
        _REGISTRY[next(_ids)] = self  # the structs outlive the test

    @property
    def array(self) -> ArrowArray:
        return self.device_array.array

    @property
    def array_releases(self) -> int:
        return self.array_tree.root_releases

    @property
    def schema_releases(self) -> int:
        return self.schema_tree.root_releases

    def releases(self):
        """`(array releases, schema releases)`."""
        return (self.array_releases, self.schema_releases)

    def child_release_counts(self):
        """Release counts of every child and dictionary struct, in build
        order (arrays first, then schemas); each must be at most 1."""
        nodes = self.array_tree.nodes + self.schema_tree.nodes
        return [_CHILD_COUNTS.get(n.private_data or 0, [0])[0] for n in nodes]

    def release_unconsumed(self):
        """Releases (as a capsule destructor would) what nobody took."""
        if self.schema.release:
            RELEASE_FN(self.schema.release)(ctypes.addressof(self.schema))
        if self.array.release:
            RELEASE_FN(self.array.release)(ctypes.addressof(self.array))


# ---------------------------------------------------------------- capsules

_PyCapsule_New = ctypes.pythonapi.PyCapsule_New
_PyCapsule_New.restype = py_object
_PyCapsule_New.argtypes = [c_void_p, c_char_p, c_void_p]

_PyCapsule_GetName = ctypes.pythonapi.PyCapsule_GetName
_PyCapsule_GetName.restype = c_void_p
_PyCapsule_GetName.argtypes = [py_object]

_PyCapsule_IsValid = ctypes.pythonapi.PyCapsule_IsValid
_PyCapsule_IsValid.restype = c_int
_PyCapsule_IsValid.argtypes = [c_void_p, c_char_p]


def capsule(address: int, name: Optional[bytes], destructor: Optional[Callable[[int], None]] = None):
    """A PyCapsule named `name` (None: a capsule without a name) holding
    `address`; `destructor(capsule_address)` runs when it is freed. The name
    and the destructor's C callback are kept alive forever."""
    name_buf = None
    if name is not None:
        name_buf = ctypes.create_string_buffer(name)
        _KEEP.append(name_buf)
    c_destructor = None
    if destructor is not None:
        # The capsule arrives as a plain address: converting a dying object
        # to py_object would resurrect it.
        c_destructor = CAPSULE_DESTRUCTOR(destructor)
        _KEEP.append(c_destructor)
    return _PyCapsule_New(
        address,
        ctypes.cast(name_buf, c_char_p) if name_buf is not None else None,
        fn_address(c_destructor) if c_destructor is not None else None,
    )


def capsule_name(cap) -> Optional[bytes]:
    address = _PyCapsule_GetName(cap)
    return None if not address else ctypes.string_at(address)


def releasing_capsule(struct, name, release_offset):
    """A capsule over `struct` whose destructor releases it if still live
    (the PyCapsule interface's rule for unconsumed capsules), and counts
    how often it ran."""
    address = ctypes.addressof(struct)

    def destructor(_capsule):
        release_at(address, release_offset)

    return capsule(address, name, destructor)


def schema_capsule(built_or_schema, name=b"arrow_schema"):
    s = built_or_schema.schema if isinstance(built_or_schema, Built) else built_or_schema
    return releasing_capsule(s, name, ArrowSchema.release.offset)


def array_capsule(built, name=b"arrow_array"):
    return releasing_capsule(built.array, name, ArrowArray.release.offset)


def device_array_capsule(built, name=b"arrow_device_array"):
    # The embedded array's release is the device array's.
    return releasing_capsule(built.device_array, name, ArrowArray.release.offset)


# ---------------------------------------------------------------- producers


class _Answering:
    """What a producer's protocol method returns: `result` when set, else
    what `_make()` makes, on every call (`same`: made once, then `cached`)."""

    def __init__(self, result, same):
        self.result = result
        self.same = same
        self.cached = None

    def _answer(self):
        if self.result is not None:
            return self.result
        if self.same:
            if self.cached is None:
                self.cached = self._make()
            return self.cached
        return self._make()


class _Producer(_Answering):
    def __init__(self, built=None, result=None, schema_name=b"arrow_schema",
                 array_name=None, same_capsules=False):
        super().__init__(result, same_capsules)
        self.built = built
        self.schema_name = schema_name
        self.array_name = array_name
        self.calls = 0

    def _call(self):
        self.calls += 1
        return self._answer()


class ArrayProducer(_Producer):
    """`__arrow_c_array__` over a built case: fresh capsules on every call
    (the same ones when `same_capsules`), or whatever `result` is."""

    def _make(self):
        return (schema_capsule(self.built, self.schema_name),
                array_capsule(self.built, self.array_name or b"arrow_array"))

    def __arrow_c_array__(self, requested_schema=None):
        return self._call()


class DeviceArrayProducer(_Producer):
    """`__arrow_c_device_array__` over a built case (and no
    `__arrow_c_array__`)."""

    def _make(self):
        return (schema_capsule(self.built, self.schema_name),
                device_array_capsule(self.built, self.array_name or b"arrow_device_array"))

    def __arrow_c_device_array__(self, requested_schema=None, **kwargs):
        return self._call()


# ---------------------------------------------------------------- streams


class StreamState:
    """A hand-written stream: `get_schema` moves a built schema out (or
    fails), `get_next` moves the next batch out (or fails at `fail_at`),
    then signals the end. Counts every callback and the releases."""

    def __init__(self, schema_case: Optional[Case], batches, *, device=False,
                 device_type=CPU, schema_error=None, fail_at=None,
                 next_error=b"producer failed mid-stream", last_error_null=False,
                 schema_left_released=False, on_next=None, on_schema=None):
        self.schema_case = schema_case
        self.batches = list(batches)  # Built objects
        self.device = device
        self.device_type = device_type
        self.schema_error = schema_error
        self.fail_at = fail_at
        self.next_error = next_error
        self.last_error_null = last_error_null
        # get_schema returns 0 without filling the schema in.
        self.schema_left_released = schema_left_released
        # Called at the start of every get_next (a slow or re-entrant
        # producer).
        self.on_next = on_next
        # Called with each schema's `Built` before get_schema moves it out
        # (a schema that differs per call, or releases badly).
        self.on_schema = on_schema
        self.index = 0
        self.releases = 0
        self.get_schema_calls = 0
        self.get_next_calls = 0
        self.calls_after_release = 0
        self.error_buf = ctypes.create_string_buffer(b"")
        self.schema_built = None
        self.key = _register(self)
        struct_type = ArrowDeviceArrayStream if device else ArrowArrayStream
        self.struct = struct_type()
        if device:
            self.struct.device_type = device_type
        self.struct.get_schema = fn_address(STREAM_GET_SCHEMA)
        self.struct.get_next = fn_address(DEVICE_STREAM_GET_NEXT if device else STREAM_GET_NEXT)
        self.struct.get_last_error = fn_address(STREAM_GET_LAST_ERROR)
        self.struct.release = fn_address(DEVICE_STREAM_RELEASE if device else STREAM_RELEASE)
        self.struct.private_data = self.key

    def fail(self, message: bytes) -> int:
        self.error_buf = ctypes.create_string_buffer(message)
        _KEEP.append(self.error_buf)
        return EIO

    def capsule(self, name=None):
        if name is None:
            name = b"arrow_device_array_stream" if self.device else b"arrow_array_stream"
        struct_type = type(self.struct)
        return releasing_capsule(self.struct, name, struct_type.release.offset)


def _get_schema(stream_address, out):
    state = _called(stream_address, "get_schema_calls")
    if state is None:
        return EINVAL
    if state.schema_error is not None:
        return state.fail(state.schema_error)
    if state.schema_left_released:
        ctypes.memset(out, 0, ctypes.sizeof(ArrowSchema))
        return 0
    built = Built(state.schema_case)
    if state.on_schema is not None:
        state.on_schema(built)
    state.schema_built = built
    ctypes.memmove(out, ctypes.addressof(built.schema), ctypes.sizeof(ArrowSchema))
    built.schema.release = None  # moved out
    return 0


def _state_any(stream_address) -> Optional[StreamState]:
    # ArrowArrayStream.private_data is at 32, ArrowDeviceArrayStream's at 40.
    for struct_type in (ArrowArrayStream, ArrowDeviceArrayStream):
        key = c_void_p.from_address(stream_address + struct_type.private_data.offset).value
        state = _REGISTRY.get(key or 0)
        if isinstance(state, StreamState) and state.device == (struct_type is ArrowDeviceArrayStream):
            return state
    return None


def _called(stream_address, calls: str) -> Optional[StreamState]:
    """The state of the stream a callback was called on, with the call
    counted in its `calls` counter (and in `calls_after_release` once
    released); None for a stream that is not ours."""
    state = _state_any(stream_address)
    if state is not None:
        setattr(state, calls, getattr(state, calls) + 1)
        if state.releases:
            state.calls_after_release += 1
    return state


def _get_next(stream_address, out, device):
    state = _called(stream_address, "get_next_calls")
    if state is None:
        return EINVAL
    if state.on_next is not None:
        state.on_next()
    if state.fail_at is not None and state.index == state.fail_at:
        return state.fail(state.next_error)
    size = ctypes.sizeof(ArrowDeviceArray if device else ArrowArray)
    if state.index >= len(state.batches):
        ctypes.memset(out, 0, size)  # the end: a released struct
        return 0
    built = state.batches[state.index]
    state.index += 1
    source = built.device_array if device else built.array
    ctypes.memmove(out, ctypes.addressof(source), size)
    built.array.release = None  # moved out: the consumer owns the copy
    return 0


def _get_last_error(stream_address):
    state = _state_any(stream_address)
    if state is None or state.last_error_null:
        return None
    return ctypes.addressof(state.error_buf)


def _stream_release(struct_type):
    @RELEASE_FN
    def release(address):
        s = struct_type.from_address(address)
        state = _REGISTRY.get(s.private_data or 0)
        if isinstance(state, StreamState):
            state.releases += 1
        s.get_schema = None
        s.get_next = None
        s.get_last_error = None
        s.release = None  # private_data stays: a second call is counted

    return release


STREAM_GET_SCHEMA = GET_SCHEMA_FN(lambda stream, out: _get_schema(stream, out))
STREAM_GET_NEXT = GET_NEXT_FN(lambda stream, out: _get_next(stream, out, False))
DEVICE_STREAM_GET_NEXT = GET_NEXT_FN(lambda stream, out: _get_next(stream, out, True))
STREAM_GET_LAST_ERROR = GET_LAST_ERROR_FN(_get_last_error)
STREAM_RELEASE = _stream_release(ArrowArrayStream)
DEVICE_STREAM_RELEASE = _stream_release(ArrowDeviceArrayStream)


class StreamProducer:
    """`__arrow_c_stream__` returning `result` or the state's capsule."""

    def __init__(self, state: Optional[StreamState] = None, result=None, name=None):
        self.state = state
        self.result = result
        self.name = name

    def __arrow_c_stream__(self, requested_schema=None):
        if self.result is not None:
            return self.result
        return self.state.capsule(self.name)


class DeviceStreamProducer(StreamProducer):
    def __arrow_c_device_stream__(self, requested_schema=None, **kwargs):
        return self.__arrow_c_stream__(requested_schema)


# ---------------------------------------------------------------- DLPack

DL_INT, DL_UINT, DL_FLOAT, DL_BFLOAT, DL_BOOL = 0, 1, 2, 4, 6


class Tensor:
    """A DLPack tensor over `data` (bytes, or None for a NULL pointer),
    legacy or versioned, whose deleter counts its calls."""

    def __init__(self, data: Optional[bytes], shape=(3,), strides=None, *,
                 code=DL_INT, bits=64, lanes=1, ndim=None, versioned=False,
                 version=(1, 1), device_type=CPU, device_id=0, byte_offset=0):
        self.key = _register(self)
        self.deleter_calls = 0
        self.versioned = versioned
        self.memory = []
        if data is not None:
            buf = _words(data)
            self.memory.append(buf)
            data_ptr = ctypes.addressof(buf)
        else:
            data_ptr = None
        shape_arr = (c_int64 * max(1, len(shape)))(*shape)
        self.memory.append(shape_arr)
        strides_ptr = None
        if strides is not None:
            strides_arr = (c_int64 * max(1, len(strides)))(*strides)
            self.memory.append(strides_arr)
            strides_ptr = ctypes.addressof(strides_arr)
        t = DLTensor()
        t.data = data_ptr
        t.device = DLDevice(device_type, device_id)
        t.ndim = len(shape) if ndim is None else ndim
        t.dtype = DLDataType(code, bits, lanes)
        t.shape = ctypes.addressof(shape_arr) if shape else None
        t.strides = strides_ptr
        t.byte_offset = byte_offset
        if versioned:
            self.managed = DLManagedTensorVersioned()
            self.managed.version = DLPackVersion(*version)
            self.managed.flags = 0
        else:
            self.managed = DLManagedTensor()
        self.managed.dl_tensor = t
        self.managed.manager_ctx = self.key
        self.managed.deleter = fn_address(DLPACK_DELETER)
        self.name = b"dltensor_versioned" if versioned else b"dltensor"
        self.capsule_destructor_runs = 0

    def capsule(self):
        address = ctypes.addressof(self.managed)
        name = self.name

        def destructor(capsule_address):
            # Spec: free the tensor only if no consumer renamed the capsule.
            self.capsule_destructor_runs += 1
            if _PyCapsule_IsValid(capsule_address, name) == 1:
                deleter = self.managed.deleter
                if deleter:
                    RELEASE_FN(deleter)(address)

        return capsule(address, name, destructor)


def _dlpack_deleter(address):
    # manager_ctx is at 48 in the legacy struct and at 8 in the versioned
    # one: find the tensor whose struct lives at `address`.
    for offset in (DLManagedTensor.manager_ctx.offset, DLManagedTensorVersioned.manager_ctx.offset):
        key = c_void_p.from_address(address + offset).value
        tensor = _REGISTRY.get(key or 0)
        if isinstance(tensor, Tensor) and ctypes.addressof(tensor.managed) == address:
            tensor.deleter_calls += 1
            return


DLPACK_DELETER = RELEASE_FN(_dlpack_deleter)


class DLPackProducer(_Answering):
    """`__dlpack__` returning `result`, or the capsule of `tensor` (the same
    one on every call unless `same_capsule` is False)."""

    def __init__(self, tensor: Optional[Tensor] = None, result=None, same_capsule=True):
        super().__init__(result, same_capsule)
        self.tensor = tensor
        self.calls = []

    def _make(self):
        return self.tensor.capsule()

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        self.calls.append(max_version)
        return self._answer()

    def __dlpack_device__(self):
        return (CPU, 0)


class LegacyDLPackProducer(DLPackProducer):
    """A pre-1.0 producer: `__dlpack__` takes no `max_version`."""

    def __dlpack__(self, stream=None):
        self.calls.append("legacy")
        return self._answer()

"""Hostile producers and consumers for test_conformance.py.

`PRODUCERS` maps every rule of ``arrow_device.conformance.RULES`` that a
producer can break to a factory of an object that breaks it: Python classes
whose protocol methods return capsules over C structs written by hand with
ctypes (hostile_structs.py). Every export builds fresh structs, so an
object can be exported as often as the checker likes (streams included),
and each object has one defect. Where that one defect necessarily breaks a
second rule, `COUPLED` names the rule and says why.

The consumers at the end are module-level functions, so that
``check_consumer`` can start its workers with spawn (a fresh interpreter
imports this module).

``bad_reserved()`` is the command line tests' hostile producer:
``python -m arrow_device.conformance "conformance_hostile:bad_reserved()"``.
"""

from __future__ import annotations

import ctypes
import resource
from typing import Callable, Dict, Tuple

import arrow_device
import hostile_structs as h
from hostile_structs import (
    CPU,
    RELEASE_FN,
    ArrayNode,
    ArrowArray,
    ArrowDeviceArray,
    ArrowSchema,
    Built,
    Case,
    StreamState,
    Tensor,
    bitmap,
    i32s,
    i64s,
    schema,
)

# ---------------------------------------------------------------- the data


def int32_child() -> Tuple[ArrayNode, h.SchemaNode]:
    return ArrayNode(3, 1, [bitmap([True, False, True]), i32s([1, 0, 3])]), schema("i", "x")


def invalid_utf8_child() -> Tuple[ArrayNode, h.SchemaNode]:
    """A utf8 column whose second value is the byte 0xFF (valid structure,
    invalid values: only a full validation sees it)."""
    return ArrayNode(3, 0, [None, i32s([0, 1, 2, 3]), b"a\xffc"]), schema("u", "x")


def struct_case(child=int32_child) -> Case:
    """``struct<x>`` of 3 rows: one child, so that the moved-child rule
    applies and a root release that forgets its children shows."""
    array, field = child()
    return Case(ArrayNode(3, 0, [None]).with_children(array), schema("+s").with_children(field))


def invalid_case() -> Case:
    return struct_case(invalid_utf8_child)


def int64_case() -> Case:
    """What a disagreeing ``__arrow_c_schema__`` describes."""
    return Case(ArrayNode(3, 0, [None, i64s([1, 2, 3])]), schema("l", "x"))


# ---------------------------------------------------------------- defects


def _shallow_release(struct_type):
    """A root release that marks its struct released and forgets the
    children (spec: the root's release releases the whole tree)."""

    @RELEASE_FN
    def release(address):
        struct_type.from_address(address).release = None

    return release


SHALLOW_SCHEMA_RELEASE = _shallow_release(ArrowSchema)
SHALLOW_ARRAY_RELEASE = _shallow_release(ArrowArray)


@RELEASE_FN
def UNMARKED_RELEASE(address):
    """A release that frees nothing (Python owns the memory) and leaves
    ``release`` set (spec: it must mark the struct released)."""


def shallow_array_release(built: Built) -> None:
    built.array.release = h.fn_address(SHALLOW_ARRAY_RELEASE)


def shallow_schema_release(built: Built) -> None:
    built.schema.release = h.fn_address(SHALLOW_SCHEMA_RELEASE)


def scribbling_release(built: Built) -> None:
    """The root's release overwrites every child's values (buffers after
    the validity bitmap) before it releases the tree, moved children
    included: a child moved out loses its values (the memory stays
    allocated: hostile_structs keeps it)."""
    tree = built.array_tree
    sizes = {ctypes.addressof(m): ctypes.sizeof(m) for m in tree.memory}
    targets = [(p, sizes[p]) for node in tree.nodes for i in range(1, node.n_buffers)
               if (p := h.buffer_ptr(node, i)) in sizes]

    @RELEASE_FN
    def release(address):
        for pointer, size in targets:
            ctypes.memset(pointer, 0x5A, size)
        h.RELEASE_ARRAY(address)

    tree.memory.append(release)  # the callback lives as long as the tree
    built.array.release = h.fn_address(release)


def misaligned_values(built: Built) -> None:
    """Child 0's int32 values moved to an odd address."""
    child = h.child_of(built.array, 0, ArrowArray)
    memory = (ctypes.c_uint8 * 24)()
    ctypes.memmove(ctypes.addressof(memory) + 1, h.buffer_ptr(child, 1), 12)
    built.array_tree.memory.append(memory)
    h.set_buffer_ptr(child, 1, ctypes.addressof(memory) + 1)


def cpu_device_id_0(built: Built) -> None:
    built.device_array.device_id = 0  # spec: -1 on the CPU


def cpu_sync_event(built: Built) -> None:
    event = ctypes.c_uint64(0)
    built.array_tree.memory.append(event)
    built.device_array.sync_event = ctypes.addressof(event)  # spec: NULL on the CPU


def reserved_bytes(built: Built) -> None:
    built.device_array.reserved[1] = 7  # spec: zeroed


# ---------------------------------------------------------------- producers


def _arrow_capsule(struct, name: bytes, release_offset: int, destructor: str):
    """A capsule over `struct`: `release` (its destructor releases a struct
    nobody consumed, as the spec asks), `none` (no destructor), `skip` (a
    destructor that releases nothing)."""
    if destructor == "release":
        return h.releasing_capsule(struct, name, release_offset)
    return h.capsule(ctypes.addressof(struct), name, None if destructor == "none" else (lambda _capsule: None))



def _kwargs_of_spec(kwargs) -> None:
    """PyCapsule interface, Device Support: extra keywords set to None are
    ignored, any other raises NotImplementedError."""
    unknown = sorted(k for k, v in kwargs.items() if v is not None)
    if unknown:
        raise NotImplementedError(f"unsupported keyword argument(s) {unknown}")


def _kwargs_refusing_none(kwargs) -> None:
    if kwargs:
        raise NotImplementedError(f"unsupported keyword argument(s) {sorted(kwargs)}")


def _kwargs_ignored(kwargs) -> None:
    pass


def _kwargs_type_error(kwargs) -> None:
    unknown = sorted(k for k, v in kwargs.items() if v is not None)
    if unknown:
        raise TypeError(f"unexpected keyword argument(s) {unknown}")


class Schemas:
    """Only ``__arrow_c_schema__``: a fresh schema of `case()` per call."""

    def __init__(self, case=struct_case, *, tweak=None, name=b"arrow_schema", destructor="release", fail=False):
        self.case, self.tweak, self.name, self.destructor, self.fail = case, tweak, name, destructor, fail

    def __arrow_c_schema__(self):
        if self.fail:
            raise RuntimeError("this producer cannot export its schema")
        built = Built(self.case())
        if self.tweak is not None:
            self.tweak(built)
        return _arrow_capsule(built.schema, self.name, ArrowSchema.release.offset, self.destructor)


class _Arrays:
    """``__arrow_c_schema__`` (of `schema_case`, by default the data's own
    type) and one array method over fresh structs of `case()` per call.

    `tweak(built)` alters the structs before they are handed out; `names`
    are the two capsules' names; `destructor` their destructors' kind
    (see `_arrow_capsule`);
    `kwargs_rule` how the device method treats extra keywords; `fail` makes
    the array method raise."""

    ARRAY_NAME = b""

    def __init__(self, case=struct_case, *, tweak=None, schema_case=None, names=None, destructor="release",
                 kwargs_rule=_kwargs_of_spec, fail=False):
        self.case, self.tweak, self.destructor = case, tweak, destructor
        self.schema_case = schema_case or case
        self.names = names or (b"arrow_schema", self.ARRAY_NAME)
        self.kwargs_rule, self.fail = kwargs_rule, fail

    def __arrow_c_schema__(self):
        return h.schema_capsule(Built(self.schema_case()))

    def _export(self):
        if self.fail:
            raise RuntimeError("this producer cannot export its array")
        built = Built(self.case())
        if self.tweak is not None:
            self.tweak(built)
        schema_name, array_name = self.names
        # An ArrowDeviceArray starts with its ArrowArray: one release offset.
        return (_arrow_capsule(built.schema, schema_name, ArrowSchema.release.offset, self.destructor),
                _arrow_capsule(built.device_array, array_name, ArrowArray.release.offset, self.destructor))


class Arrays(_Arrays):
    ARRAY_NAME = b"arrow_array"

    def __arrow_c_array__(self, requested_schema=None):
        return self._export()


class DeviceArrays(_Arrays):
    ARRAY_NAME = b"arrow_device_array"

    def __arrow_c_device_array__(self, requested_schema=None, **kwargs):
        self.kwargs_rule(kwargs)
        return self._export()


class ArraysWithoutRequestedSchema(Arrays):
    def __arrow_c_array__(self):  # spec: requested_schema=None must be accepted
        return self._export()


class DeviceArraysWithoutRequestedSchema(DeviceArrays):
    # No **kwargs either: a method with **kwargs takes requested_schema=None
    # as an extra keyword set to None, which conforms.
    def __arrow_c_device_array__(self):
        return self._export()


class _Streams:
    """``__arrow_c_schema__`` and one stream method: a fresh
    `hostile_structs.StreamState` of two batches of `case()` per call.

    `tweak_batch(built)` alters each batch; `tweak_stream(state)` the
    stream (callbacks, hooks); `state_options` go to StreamState; the other
    knobs are those of `_Arrays`."""

    DEVICE = False

    def __init__(self, case=struct_case, *, tweak_batch=None, tweak_stream=None, schema_case=None, name=None,
                 destructor="release", kwargs_rule=_kwargs_of_spec, fail=False, **state_options):
        self.case, self.tweak_batch, self.tweak_stream = case, tweak_batch, tweak_stream
        self.schema_case = schema_case or case
        self.name, self.destructor, self.kwargs_rule, self.fail = name, destructor, kwargs_rule, fail
        self.state_options = state_options

    def __arrow_c_schema__(self):
        return h.schema_capsule(Built(self.schema_case()))

    def _export(self):
        if self.fail:
            raise RuntimeError("this producer cannot export its stream")
        batches = [Built(self.case()) for _ in range(2)]
        for built in batches:
            if self.tweak_batch is not None:
                self.tweak_batch(built)
        state = StreamState(self.case(), batches, device=self.DEVICE, **self.state_options)
        if self.tweak_stream is not None:
            self.tweak_stream(state)
        name = self.name or (b"arrow_device_array_stream" if self.DEVICE else b"arrow_array_stream")
        return _arrow_capsule(state.struct, name, type(state.struct).release.offset, self.destructor)


class Streams(_Streams):
    def __arrow_c_stream__(self, requested_schema=None):
        return self._export()


class DeviceStreams(_Streams):
    DEVICE = True

    def __arrow_c_device_stream__(self, requested_schema=None, **kwargs):
        self.kwargs_rule(kwargs)
        return self._export()


class StreamsWithoutRequestedSchema(Streams):
    def __arrow_c_stream__(self):
        return self._export()


class DeviceStreamsWithoutRequestedSchema(DeviceStreams):
    def __arrow_c_device_stream__(self):  # no **kwargs: see DeviceArraysWithoutRequestedSchema
        return self._export()


def null_get_last_error(state: StreamState) -> None:
    state.struct.get_last_error = None  # spec: all four callbacks on a live stream


def unmarked_stream_release(state: StreamState) -> None:
    state.struct.release = h.fn_address(UNMARKED_RELEASE)


def batch_after_end(state: StreamState) -> None:
    """Once the end has been signalled, every get_next hands out another
    batch (spec: it keeps signalling the end)."""
    ended = []

    def on_next():
        if state.index >= len(state.batches):
            if ended:
                state.batches.append(Built(struct_case()))
            ended.append(True)

    state.on_next = on_next


def renamed_per_call(state: StreamState) -> None:
    """get_schema names its field after the call: the same type (so that
    ``__arrow_c_schema__`` agrees), a different field every call."""

    def on_schema(built):
        name = ctypes.create_string_buffer(f"call {state.get_schema_calls}".encode())
        built.schema_tree.memory.append(name)
        built.schema.name = ctypes.addressof(name)

    state.on_schema = on_schema


def shallow_schemas(state: StreamState) -> None:
    state.on_schema = shallow_schema_release


# DLPack ------------------------------------------------------------------


def _tensor_capsule(tensor: Tensor, destructor: str):
    """A capsule over `tensor`: `spec` (the deleter unless renamed), `none`
    (no destructor), `skip` (a destructor that never calls the deleter),
    `always` (calls the deleter even once a consumer renamed it)."""
    address = ctypes.addressof(tensor.managed)
    if destructor == "spec":
        return tensor.capsule()
    if destructor == "none":
        return h.capsule(address, tensor.name)

    def always(_capsule):
        RELEASE_FN(tensor.managed.deleter)(address)

    return h.capsule(address, tensor.name, always if destructor == "always" else (lambda _capsule: None))


class Tensors:
    """``__dlpack__`` and ``__dlpack_device__`` over a fresh int64 tensor of
    3 values per call: legacy without max_version, versioned with it
    (`versioned` forces one), on `tensor_device`; ``__dlpack_device__``
    says `device`."""

    def __init__(self, *, device=(CPU, 0), tensor_device=(CPU, 0), name=None, destructor="spec", versioned=None):
        self.device, self.tensor_device, self.name = device, tensor_device, name
        self.destructor, self.versioned = destructor, versioned

    def _export(self, max_version):
        versioned = max_version is not None if self.versioned is None else self.versioned
        tensor = Tensor(i64s([1, 2, 3]), versioned=versioned, device_type=self.tensor_device[0],
                        device_id=self.tensor_device[1])
        if self.name is not None:
            tensor.name = self.name
        return _tensor_capsule(tensor, self.destructor)

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        return self._export(max_version)

    def __dlpack_device__(self):
        return self.device


class TensorsWithoutMaxVersion(Tensors):
    def __dlpack__(self, stream=None):  # a pre-2023 signature: no max_version
        return self._export(None)


class TensorsRefusingStream(Tensors):
    def __dlpack__(self, **kwargs):
        if "stream" in kwargs:
            raise TypeError("stream is not supported")  # spec: stream=None is always accepted
        return self._export(kwargs.get("max_version"))


# CUDA Array Interface --------------------------------------------------------


class CudaArray:
    """``__cuda_array_interface__``: version 3, 3 int64 values, C-contiguous,
    no stream, no mask, with `changes` applied. The data pointer is never
    read (the checker reads only the dict)."""

    def __init__(self, **changes):
        self.memory = (ctypes.c_int64 * 12)()
        self.iface = {"version": 3, "shape": (3,), "typestr": "<i8",
                      "data": (ctypes.addressof(self.memory), False), "strides": None, "stream": None}
        self.iface.update(changes)

    @property
    def __cuda_array_interface__(self):
        return self.iface


# ---------------------------------------------------------------- the table

Factory = Callable[[], object]


def _per_scope(scope: str) -> Dict[str, Factory]:
    """The defects every Arrow method scope shares, for `scope`."""
    device = scope.startswith("device")
    stream = scope.endswith("stream")
    if stream:
        plain = DeviceStreams if device else Streams
        bare = DeviceStreamsWithoutRequestedSchema if device else StreamsWithoutRequestedSchema
        wrong_name = b"arrow_array_stream" if device else b"arrow_device_array_stream"
        table = {
            "capsule_names": lambda: plain(name=wrong_name),
            "valid_full": lambda: plain(invalid_case),
            "alignment": lambda: plain(tweak_batch=misaligned_values),
            "release_once": lambda: plain(tweak_batch=shallow_array_release),
            "schema_release_once": lambda: plain(tweak_stream=shallow_schemas),
            "callbacks": lambda: plain(tweak_stream=null_get_last_error),
            "get_schema_stable": lambda: plain(tweak_stream=renamed_per_call),
            "end_repeats": lambda: plain(tweak_stream=batch_after_end),
            "last_error": lambda: plain(fail_at=0, next_error=b"\xff\xfe is not UTF-8"),
            "stream_release": lambda: plain(tweak_stream=unmarked_stream_release),
        }
        tweak = "tweak_batch"
    else:
        plain = DeviceArrays if device else Arrays
        bare = DeviceArraysWithoutRequestedSchema if device else ArraysWithoutRequestedSchema
        wrong_name = b"arrow_array" if device else b"arrow_device_array"
        table = {
            "capsule_names": lambda: plain(names=(b"arrow_schema", wrong_name)),
            "valid_full": lambda: plain(invalid_case),
            "alignment": lambda: plain(tweak=misaligned_values),
            "release_once": lambda: plain(tweak=shallow_array_release),
            "schema_release_once": lambda: plain(tweak=shallow_schema_release),
            "child_move": lambda: plain(tweak=scribbling_release),
        }
        tweak = "tweak"
    table.update({
        "export": lambda: plain(fail=True),
        "requested_schema_none": lambda: bare(),
        "capsule_destructor": lambda: plain(destructor="none"),
        "schema_agrees": lambda: plain(schema_case=int64_case),
    })
    if device:
        table.update({
            "device": lambda: plain(**{tweak: cpu_device_id_0}),
            "sync_event": lambda: plain(**{tweak: cpu_sync_event}),
            "reserved": lambda: plain(**{tweak: reserved_bytes}),
            "kwargs_none": lambda: plain(kwargs_rule=_kwargs_refusing_none),
            "unknown_kwarg": lambda: plain(kwargs_rule=_kwargs_ignored),
        })
    return {f"{scope}.{rule}": factory for rule, factory in table.items()}


#: Check id -> a factory of a producer that breaks that rule.
PRODUCERS: Dict[str, Factory] = {
    "schema.export": lambda: Schemas(fail=True),
    "schema.capsule_names": lambda: Schemas(name=b"arrow_schema_v2"),
    "schema.capsule_destructor": lambda: Schemas(destructor="none"),
    "schema.schema_release_once": lambda: Schemas(tweak=shallow_schema_release),
    "schema.valid_schema": lambda: Schemas(lambda: Case(ArrayNode(0, 0, []), schema("Q!", "x"))),
    **_per_scope("array"),
    **_per_scope("device_array"),
    **_per_scope("stream"),
    **_per_scope("device_stream"),
    "dlpack.capsule_names": lambda: Tensors(name=b"dltensor_v2"),
    "dlpack.capsule_destructor": lambda: Tensors(destructor="skip"),
    "dlpack.device_matches": lambda: Tensors(tensor_device=(CPU, 1)),
    "dlpack.max_version": lambda: TensorsWithoutMaxVersion(),
    "dlpack.consumed": lambda: Tensors(destructor="always"),
    "dlpack.stream": lambda: TensorsRefusingStream(),
    "cai.version": lambda: CudaArray(version=4),
    "cai.stream": lambda: CudaArray(stream=0),
    "cai.layout": lambda: CudaArray(shape=(3, 4), strides=(8, 8)),
    "cai.mask": lambda: CudaArray(mask=CudaArray(shape=(2,), typestr="|b1")),
}

#: Other forms of a defect of `PRODUCERS`: (check id, what, factory).
VARIANTS = [
    ("schema.capsule_destructor", "a destructor that releases nothing", lambda: Schemas(destructor="skip")),
    ("array.capsule_destructor", "a destructor that releases nothing", lambda: Arrays(destructor="skip")),
    ("stream.capsule_destructor", "a destructor that releases nothing", lambda: Streams(destructor="skip")),
    ("device_array.unknown_kwarg", "raises TypeError", lambda: DeviceArrays(kwargs_rule=_kwargs_type_error)),
    ("device_stream.unknown_kwarg", "raises TypeError", lambda: DeviceStreams(kwargs_rule=_kwargs_type_error)),
    ("dlpack.max_version", "versioned without max_version", lambda: Tensors(versioned=True)),
    ("dlpack.capsule_destructor", "no destructor", lambda: Tensors(destructor="none")),
]


def _coupled() -> Dict[str, Tuple[set, str]]:
    same_release = ("the capsule's destructor calls the same release callback, so the unconsumed capsule shows "
                    "the defect too")
    first_call = ("the checker's first call passes requested_schema=None: a method that raises on every call "
                  "refuses requested_schema=None too")
    coupled = {"schema.schema_release_once": ({"schema.capsule_destructor"}, same_release)}
    for scope in ("array", "device_array", "stream", "device_stream"):
        coupled[f"{scope}.export"] = ({f"{scope}.requested_schema_none"}, first_call)
        if scope.startswith("device"):
            coupled[f"{scope}.requested_schema_none"] = (
                {f"{scope}.kwargs_none", f"{scope}.unknown_kwarg"},
                "a device method without requested_schema takes no keywords at all, so the extra keyword "
                "(None or not) raises TypeError too",
            )
        if scope.endswith("stream"):
            # A stream's capsule holds the stream only: its batches and
            # schemas are released by whoever took them.
            coupled[f"{scope}.stream_release"] = ({f"{scope}.capsule_destructor"}, same_release)
            coupled[f"{scope}.last_error"] = (
                {f"{scope}.valid_full"},
                "get_last_error may only be called after a failed call, and the checker reports a failed get_next "
                "under valid_full")
        else:
            coupled[f"{scope}.release_once"] = ({f"{scope}.capsule_destructor"}, same_release)
            coupled[f"{scope}.schema_release_once"] = ({f"{scope}.capsule_destructor"}, same_release)
    return coupled


#: Check id -> (the other ids its producer necessarily fails too, why).
COUPLED: Dict[str, Tuple[set, str]] = _coupled()

#: Check ids no producer can break from Python, with the reason.
UNBREAKABLE: Dict[str, str] = {}


def bad_reserved():
    """A CPU device array with non-zero reserved bytes (for the CLI tests)."""
    return PRODUCERS["device_array.reserved"]()


# ---------------------------------------------------------------- consumers

_PyCapsule_GetPointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi))

#: Structs the hostile consumers moved out of capsules (never freed).
_MOVED = []


def ours(producer):
    """A consumer built on arrow_device: streams as streams, the rest as arrays."""
    if hasattr(producer, "__arrow_c_stream__") or hasattr(producer, "__arrow_c_device_stream__"):
        return arrow_device.stream(producer)
    return arrow_device.array(producer)


class _Exported:
    """A device array's two capsules, as a producer to import them."""

    def __init__(self, schema_capsule, array_capsule):
        self.capsules = (schema_capsule, array_capsule)

    def __arrow_c_device_array__(self, requested_schema=None, **kwargs):
        capsules, self.capsules = self.capsules, None
        return capsules


def _move_out(capsule, name: bytes, struct_type):
    """Moves the struct out of `capsule` as a consumer does (a bitwise copy,
    the original marked released); the copy is kept here."""
    address = _PyCapsule_GetPointer(capsule, name)
    moved = struct_type.from_buffer_copy(ctypes.string_at(address, ctypes.sizeof(struct_type)))
    ArrowArray.from_address(address).release = None
    _MOVED.append(moved)
    return moved


def leaks_arrays(producer):
    """Takes the ArrowArray of ``__arrow_c_array__`` and never releases it;
    consumes every other form correctly."""
    if not hasattr(producer, "__arrow_c_array__"):
        return ours(producer)
    _schema, array = producer.__arrow_c_array__()
    _move_out(array, b"arrow_array", ArrowArray)
    return None


def reads_device_memory(producer):
    """Reads a device array's values on the host (a CPU array's are fine)."""
    if not hasattr(producer, "__arrow_c_device_array__"):
        return ours(producer)
    schema_capsule, array_capsule = producer.__arrow_c_device_array__()
    struct = ArrowDeviceArray.from_address(_PyCapsule_GetPointer(array_capsule, b"arrow_device_array"))
    if struct.device_type != CPU:
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # the crash below is the point: no core file
        column = h.child_of(struct.array, 0, ArrowArray)
        ctypes.string_at(h.buffer_ptr(column, 1), 8)
    return arrow_device.array(_Exported(schema_capsule, array_capsule))


def skips_sync_event(producer):
    """Takes a device array, drops its sync_event and imports it: reads
    before the producer's copies have run."""
    if not hasattr(producer, "__arrow_c_device_array__"):
        return ours(producer)
    schema_capsule, array_capsule = producer.__arrow_c_device_array__()
    moved = _move_out(array_capsule, b"arrow_device_array", ArrowDeviceArray)
    moved.sync_event = None
    capsule = h.releasing_capsule(moved, b"arrow_device_array", ArrowArray.release.offset)
    # The import reads the last offset of the utf8 column before anything
    # waited for it: poison, which it reports.
    return arrow_device.array(_Exported(schema_capsule, capsule))


def refuses_everything(producer):
    raise TypeError(f"this consumer takes nothing ({type(producer).__name__})")

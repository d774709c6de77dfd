"""Hostile producers against the Python bindings.

Every struct here is written by hand with ctypes (hostile_structs.py), wrapped
in PyCapsules and handed to `arrow_device.array` / `arrow_device.stream`
through small producer classes. The defects are those of the core library's
malformed-input suite (crates/arrow-device/tests/malformed*), plus the
capsule-level ones only Python can produce (wrong names, non-capsules, reused
capsules, DLPack capsule renaming).

For every case the tests assert that

* the call fails with the documented exception type (`ValueError` for a
  malformed struct, naming the defect and its path; `TypeError` for a wrong
  return type or a request that cannot be served; `RuntimeError` for a
  producer's own failure), never with PyO3's `PanicException` (a
  `BaseException`) and never by crashing the interpreter;
* what was handed over is released exactly once: immediately after the
  exception on error paths, and once the resulting array (and anything
  sharing its memory) is dropped and garbage-collected on success; no child
  struct is ever released twice.

Cases that would crash a naive importer (cycles, negative counts walking off
a children array) run in a child interpreter, so that a crash fails one test
instead of killing the run.
"""

from __future__ import annotations

import ctypes
import gc
import os
import subprocess
import sys
import textwrap
import threading

import pytest

import arrow_device as ad
import hostile_structs as h
from hostile_structs import (
    ArrayNode,
    ArrowArray,
    ArrowSchema,
    Case,
    bitmap,
    i8s,
    i32s,
    i64s,
    schema,
    view,
)

LEVELS = ["none", "minimal", "default", "full"]
HERE = os.path.dirname(os.path.abspath(__file__))

# ---------------------------------------------------------------- cases
# One valid case per layout family (malformed/cases.rs); each test breaks one
# thing in a fresh copy.


def int32_node(values):
    return ArrayNode(len(values), 0, [None, i32s(values)])


def utf8_node(strings):
    offsets, data = [0], b""
    for s in strings:
        data += s
        offsets.append(len(data))
    return ArrayNode(len(strings), 0, [None, i32s(offsets), data])


def int32():
    return Case(ArrayNode(3, 1, [bitmap([True, False, True]), i32s([1, 0, 3])]), schema("i", "x"))


def utf8():
    return Case(utf8_node([b"a", b"", b"bcd"]), schema("u", "s"))


def list_case():
    return Case(
        ArrayNode(3, 0, [None, i32s([0, 2, 2, 3])]).with_children(int32_node([1, 2, 3])),
        schema("+l", "l").with_children(schema("i", "item")),
    )


def struct_ab():
    return Case(
        ArrayNode(3, 0, [None]).with_children(int32_node([1, 2, 3]), utf8_node([b"a", b"", b"bcd"])),
        schema("+s", "st").with_children(schema("i", "a"), schema("u", "b")),
    )


def dictionary():
    return Case(
        ArrayNode(3, 0, [None, i8s([0, 1, 0])]).with_dictionary(utf8_node([b"x", b"yz"])),
        schema("c", "d").with_dictionary(schema("u", "")),
    )


def union_fields():
    return [schema("i", "int"), schema("u", "str")]


def dense_union():
    return Case(
        ArrayNode(3, 0, [i8s([0, 1, 0]), i32s([0, 0, 1])]).with_children(
            int32_node([1, 2]), utf8_node([b"a"])
        ),
        schema("+ud:0,1", "du").with_children(*union_fields()),
    )


def sparse_union():
    return Case(
        ArrayNode(3, 0, [i8s([0, 1, 0])]).with_children(
            int32_node([1, 2, 3]), utf8_node([b"a", b"b", b"c"])
        ),
        schema("+us:0,1", "su").with_children(*union_fields()),
    )


def run_end_encoded():
    return Case(
        ArrayNode(5, 0, []).with_children(int32_node([2, 5]), int32_node([10, 20])),
        schema("+r", "ree").with_children(
            schema("i", "run_ends").non_nullable(), schema("i", "values")
        ),
    )


LONG = b"this string is longer"


def utf8_view():
    views = view(b"hi") + view(b"") + view(LONG, 0, 0)
    return Case(ArrayNode(3, 0, [None, views, LONG, i64s([len(LONG)])]), schema("vu", "v"))


def fixed_size_list():
    return Case(
        ArrayNode(3, 0, [None]).with_children(int32_node([1, 2, 3, 4, 5, 6])),
        schema("+w:2", "fl").with_children(schema("i", "item")),
    )


def map_case():
    entries = ArrayNode(2, 0, [None]).with_children(utf8_node([b"a", b"b"]), int32_node([1, 2]))
    return Case(
        ArrayNode(3, 0, [None, i32s([0, 1, 1, 2])]).with_children(entries),
        schema("+m", "m").with_children(
            schema("+s", "entries").non_nullable().with_children(
                schema("u", "key").non_nullable(), schema("i", "value")
            )
        ),
    )


def nested_lists(depth):
    array, sch = int32_node([7]), schema("i", "item")
    for _ in range(depth):
        array = ArrayNode(1, 0, [None, i32s([0, 1])]).with_children(array)
        sch = schema("+l", "item").with_children(sch)
    return Case(array, sch)


VALID_CASES = {
    "int32": (int32, "Int32", [1, None, 3]),
    "utf8": (utf8, "Utf8", ["a", "", "bcd"]),
    "list<int32>": (list_case, None, [[1, 2], [], [3]]),
    "struct<a, b>": (struct_ab, None, [{"a": 1, "b": "a"}, {"a": 2, "b": ""}, {"a": 3, "b": "bcd"}]),
    "dictionary<int8, utf8>": (dictionary, None, ["x", "yz", "x"]),
    "dense union": (dense_union, None, [1, "a", 2]),
    "sparse union": (sparse_union, None, [1, "b", 3]),
    "run-end encoded": (run_end_encoded, None, [10, 10, 20, 20, 20]),
    "utf8_view": (utf8_view, None, ["hi", "", LONG.decode()]),
    "fixed_size_list": (fixed_size_list, None, [[1, 2], [3, 4], [5, 6]]),
    "map": (map_case, None, [[("a", 1)], [], [("b", 2)]]),
}

# ---------------------------------------------------------------- helpers


def catch(fn, *args, **kwargs) -> BaseException:
    """The exception `fn` raises: any `BaseException`, so that a
    `PanicException` is reported as what it is instead of escaping."""
    try:
        result = fn(*args, **kwargs)
    except BaseException as e:  # noqa: B036 - PanicException is a BaseException
        # Without its traceback, the exception keeps no frame (and so no
        # argument, such as a capsule) alive.
        return e.with_traceback(None)
    pytest.fail(f"expected an exception, got {result!r}")


def expect_exc(exc_type, fn, *args, **kwargs) -> BaseException:
    err = catch(fn, *args, **kwargs)
    assert type(err).__name__ != "PanicException", f"PanicException: {err}"
    assert isinstance(err, Exception), f"{type(err).__name__} is not an Exception: {err}"
    assert isinstance(err, exc_type), f"expected {exc_type.__name__}, got {type(err).__name__}: {err}"
    return err


def assert_children_sane(built):
    counts = built.child_release_counts()
    assert all(c <= 1 for c in counts), f"a child struct released twice: {counts}"


def assert_released_once(built, what="after the error"):
    assert built.releases() == (1, 1), f"(array, schema) releases {what}: {built.releases()}"
    assert_children_sane(built)
    # Every child the producer handed over live is released with its root.
    assert all(c == 1 for c in built.child_release_counts()), built.child_release_counts()


def producer(built, via):
    return h.ArrayProducer(built) if via == "cpu" else h.DeviceArrayProducer(built)


def expect_invalid(built, level, path, keyword, via="device", exc=ValueError):
    """The import fails with `exc` (ValueError: a malformed struct) whose
    message contains `path` and `keyword` (case-insensitive), and both
    structs were released exactly once when the call returned."""
    err = expect_exc(exc, ad.array, producer(built, via), validate=level)
    message = str(err)
    assert path in message and keyword.lower() in message.lower(), (
        f"expected path {path!r} and keyword {keyword!r} in: {message}"
    )
    assert built.releases() == (1, 1), f"(array, schema) releases right after {message!r}: {built.releases()}"
    assert_children_sane(built)
    return err


def expect_ok(built, level="full", via="device"):
    array = ad.array(producer(built, via), validate=level)
    assert built.releases() == (0, 1), f"(array, schema) releases while the import lives: {built.releases()}"
    return array


def check_released_after_drop(built):
    """Call after `del` of the last reference to the import."""
    gc.collect()
    assert_released_once(built, "after the import was dropped")


def run_isolated(body: str, watchdog_s=None, module="test_hostile", quiet=False):
    """Runs `body` (with the names of `module`, a test module beside this
    one, imported) in a child interpreter: a crash there fails this test
    instead of the run. With `watchdog_s`, a child still running after that
    long prints every thread's stack and exits (a deadlock). With `quiet`,
    the child must also print nothing on stderr (no backtrace, no warning)."""
    code = f"from {module} import *\n"
    if watchdog_s is not None:
        code += f"import faulthandler; faulthandler.dump_traceback_later({watchdog_s}, exit=True)\n"
    code += textwrap.dedent(body) + "\nprint('ISOLATED OK')\n"
    env = dict(os.environ)
    env["PYTHONPATH"] = HERE + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=HERE, env=env, capture_output=True, text=True, timeout=60
    )
    crash = " (KILLED BY SIGNAL %d)" % -proc.returncode if proc.returncode < 0 else ""
    assert proc.returncode == 0 and "ISOLATED OK" in proc.stdout, (
        f"child exited with {proc.returncode}{crash}\n--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}"
    )
    assert not quiet or proc.stderr == "", f"the child wrote to stderr:\n{proc.stderr}"


def read_in_two_threads(stream):
    """Iterates `stream` from two threads at once: the lengths of the arrays
    read and the exceptions raised, by both."""
    out, errors = [], []

    def read():
        try:
            for a in stream:
                out.append(len(a))
        except Exception as e:
            errors.append(e)

    threads = [threading.Thread(target=read) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out, errors


# ---------------------------------------------------------------- valid cases


@pytest.mark.parametrize("via", ["cpu", "device"])
@pytest.mark.parametrize("name", list(VALID_CASES))
def test_valid_cases_import_at_every_level_and_are_released_once(name, via):
    make, type_text, values = VALID_CASES[name]
    pa = pytest.importorskip("pyarrow")
    for level in LEVELS:
        built = make().build()
        array = expect_ok(built, level, via)
        assert len(array) == len(values)
        if type_text is not None:
            assert array.type == type_text
        if level == "full":
            # The values the producer wrote, read back through pyarrow (which
            # imports our re-export: our structs stay alive under it).
            exported = pa.array(array)
            del array
            gc.collect()
            assert built.releases() == (0, 1), "released while pyarrow still reads it"
            assert exported.to_pylist() == values
            del exported
            gc.collect()
            assert_released_once(built, "after pyarrow's import was dropped")
        else:
            del array
            check_released_after_drop(built)


def test_nesting_at_the_64_level_limit_is_accepted():
    built = nested_lists(64).build()
    array = expect_ok(built)
    assert len(array) == 1
    del array
    check_released_after_drop(built)


def test_an_opaque_device_array_imports_and_is_released_once():
    # Device type 17 (no implementation here): described, never read.
    built = utf8().build(device_type=17, device_id=3)
    array = expect_ok(built, "full")
    assert (array.device.type, array.device.id) == (17, 3)
    assert len(array) == 3
    # It cannot be copied: TypeError (a request the device cannot serve).
    expect_exc(TypeError, array.to, ad.cpu())
    del array
    check_released_after_drop(built)


def test_a_device_copy_releases_the_source_once():
    pa = pytest.importorskip("pyarrow")
    built = utf8().build()
    on_device = ad.array(h.ArrayProducer(built), device=ad.emulated(0))
    assert on_device.device.type == ad.DeviceType.EXT_DEV
    back = on_device.to(ad.cpu())
    assert pa.array(back).to_pylist() == ["a", "", "bcd"]
    del back
    # The copy keeps the host source alive as long as it lives (a copy's
    # sources are held by the copy, not only until its event completes).
    del on_device
    gc.collect()
    assert_released_once(built, "after the device copy was dropped")


def test_an_unknown_validate_level_touches_nothing():
    built = int32().build()
    p = h.ArrayProducer(built)
    err = expect_exc(ValueError, ad.array, p, validate="paranoid")
    assert "paranoid" in str(err)
    assert p.calls == 0 and built.releases() == (0, 0)
    built.release_unconsumed()


# ---------------------------------------------------------------- capsule protocol


@pytest.mark.parametrize(
    "producer_kind, schema_name, array_name, expected, found",
    [
        ("device", b"arrow_schema", b"arrow_array", "arrow_device_array", "'arrow_array'"),
        ("device", b"arrow_schema", b"foo", "arrow_device_array", "'foo'"),
        ("device", b"arrow_schema", None, "arrow_device_array", "no name"),
        ("device", b"foo", b"arrow_device_array", "arrow_schema", "'foo'"),
        ("cpu", b"arrow_schema", b"arrow_device_array", "arrow_array", "'arrow_device_array'"),
        ("cpu", None, b"arrow_array", "arrow_schema", "no name"),
        ("cpu", b"arrow_array", b"arrow_schema", "arrow_schema", "'arrow_array'"),
    ],
)
def test_a_wrongly_named_capsule_is_a_value_error_and_stays_with_its_capsule(
    producer_kind, schema_name, array_name, expected, found
):
    built = int32().build()
    cls = h.ArrayProducer if producer_kind == "cpu" else h.DeviceArrayProducer
    # NULL name: an explicit `None` must reach PyCapsule_New, not the default.
    p = cls(built, schema_name=schema_name, array_name=array_name)
    if array_name is None:
        p._make = lambda: (
            h.schema_capsule(built, schema_name),
            h.releasing_capsule(built.device_array, None, ArrowArray.release.offset),
        )
    err = expect_exc(ValueError, ad.array, p)
    assert expected in str(err) and found in str(err), str(err)
    # Nothing was moved out: each capsule's own destructor released its
    # struct, once, when the returned tuple was freed.
    assert_released_once(built, "after the capsules were freed")


@pytest.mark.parametrize(
    "result_factory, method",
    [
        (lambda b: 42, "__arrow_c_array__"),
        (lambda b: (h.schema_capsule(b),), "__arrow_c_array__"),
        (lambda b: (h.schema_capsule(b), h.array_capsule(b), None), "__arrow_c_array__"),
        (lambda b: [h.schema_capsule(b), h.array_capsule(b)], "__arrow_c_array__"),
    ],
    ids=["int", "tuple of one", "tuple of three", "list"],
)
def test_a_non_pair_result_is_a_type_error(result_factory, method):
    built = int32().build()
    p = h.ArrayProducer(built)
    p.result = result_factory(built)
    err = expect_exc(TypeError, ad.array, p)
    assert method in str(err), str(err)
    p.result = None
    gc.collect()
    built.release_unconsumed()  # what no capsule held
    assert_released_once(built)


def test_a_non_capsule_inside_the_pair_is_a_type_error_and_the_other_capsule_keeps_its_struct():
    built = int32().build()
    p = h.DeviceArrayProducer(built)
    p.result = ("not a capsule", h.device_array_capsule(built))
    err = expect_exc(TypeError, ad.array, p)
    assert "arrow_schema" in str(err) and "str" in str(err), str(err)
    p.result = None
    gc.collect()
    assert built.releases() == (1, 0), "the array capsule's destructor releases it once"
    built.release_unconsumed()
    assert_released_once(built)


def test_a_producer_exception_propagates_unchanged():
    class Failing:
        def __arrow_c_device_array__(self, requested_schema=None, **kwargs):
            raise KeyError("producer says no")

    err = expect_exc(KeyError, ad.array, Failing())
    assert "producer says no" in str(err)


def test_an_object_without_a_protocol_is_a_type_error():
    err = expect_exc(TypeError, ad.array, object())
    assert "object" in str(err)


@pytest.mark.parametrize("via", ["cpu", "device"])
def test_capsules_consumed_twice_are_released_and_rejected_the_second_time(via):
    built = utf8().build()
    p = (h.ArrayProducer if via == "cpu" else h.DeviceArrayProducer)(built, same_capsules=True)
    first = ad.array(p)
    assert built.releases() == (0, 1)
    # The capsules now hold released structs (moved out): a second import
    # must refuse them without calling their (NULL) release.
    err = expect_exc(ValueError, ad.array, p)
    assert "released" in str(err), str(err)
    assert built.releases() == (0, 1)
    del first
    gc.collect()
    assert built.releases() == (1, 1)
    p.cached = None  # free the capsules: their destructors find them released
    gc.collect()
    assert_released_once(built, "after the capsules were freed")


@pytest.mark.parametrize("via", ["cpu", "device"])
@pytest.mark.parametrize(
    "which, struct_type, releases",
    [("array", ArrowArray, (1, 0)), ("schema", ArrowSchema, (0, 1))],
)
def test_a_released_struct_is_rejected_and_not_released_again(which, struct_type, releases, via):
    built = int32().build()
    h.release_at(ctypes.addressof(getattr(built, which)), struct_type.release.offset)
    assert built.releases() == releases
    expect_invalid(built, "full", "array", "released", via=via)


# ---------------------------------------------------------------- defects
# (name, case factory, mutation of the built structs or None, level, path,
# keyword): the core suite's tests, one line each.


def mutate_case(make, edit):
    def build():
        case = make()
        edit(case)
        return case.build()

    return build


def mutate_built(make, edit):
    def build():
        built = make().build()
        edit(built)
        return built

    return build


def _set(obj, **values):
    for k, v in values.items():
        setattr(obj, k, v)


def _push(lst, item):
    lst.append(item)


def _field_b_format(fmt):
    def edit(case):
        case.schema.children[1].format = fmt

    return mutate_case(struct_ab, edit)


def _set_child_release_null(built, index=1, which="array"):
    parent = built.array if which == "array" else built.schema
    struct_type = ArrowArray if which == "array" else ArrowSchema
    h.child_of(parent, index, struct_type).release = None


def _array_self_cycle(built):
    middle = h.child_ptr(built.array, 0)
    h.set_child_ptr(ArrowArray.from_address(middle), 0, middle)


def _dictionary_is_own_node():
    a = dictionary().schema
    a.name = b"a"
    case = Case(
        ArrayNode(3, 0, [None]).with_children(dictionary().array),
        schema("+s", "st").with_children(a),
    )
    built = case.build()
    node = h.child_ptr(built.array, 0)
    ArrowArray.from_address(node).dictionary = node
    return built


def _views_with_long_view(buffer_index, offset):
    def edit(case):
        case.array.buffers[1] = view(b"hi") + view(b"") + view(LONG, buffer_index, offset)

    return mutate_case(utf8_view, edit)


def _inline_view_padding(case):
    hi = bytearray(view(b"hi"))
    hi[10] = ord("!")
    case.array.buffers[1] = bytes(hi) + view(b"") + view(LONG)


def _long_view_prefix(case):
    long = bytearray(view(LONG))
    long[4:8] = b"THIS"
    case.array.buffers[1] = view(b"hi") + view(b"") + bytes(long)


def _null_map_key(case):
    keys = case.array.children[0].children[0]
    keys.null_count = 1
    keys.buffers[0] = bitmap([True, False])


def _non_nullable_field_with_nulls(case):
    case.schema.children[0] = schema("i", "a").non_nullable()
    case.array.children[0] = ArrayNode(3, 1, [bitmap([True, False, True]), i32s([1, 0, 3])])


def _map_entries_not_two(case):
    case.schema.children[0].children.pop()
    case.array.children[0].children.pop()


def _map_entries_not_struct(case):
    case.schema.children[0] = schema("i", "entries").non_nullable()
    case.array.children[0] = int32_node([1, 2])


def _field_b_metadata(metadata):
    def edit(case):
        case.schema.children[1].metadata = metadata

    return mutate_case(struct_ab, edit)


DEFECTS = [
    # ---- buffers (structure.rs)
    ("too many buffers", mutate_case(int32, lambda c: _push(c.array.buffers, i32s([0, 0, 0]))),
     "full", "array", "n_buffers is 3"),
    ("too few buffers", mutate_case(int32, lambda c: c.array.buffers.pop()), "full", "array", "n_buffers is 1"),
    ("NULL buffers array", mutate_built(int32, lambda b: _set(b.array, buffers=None)),
     "full", "array", "buffers is NULL"),
    ("NULL values buffer", mutate_built(int32, lambda b: h.set_buffer_ptr(b.array, 1, None)),
     "full", "buffer 1", "NULL"),
    ("NULL utf8 offsets", mutate_built(utf8, lambda b: h.set_buffer_ptr(b.array, 1, None)),
     "full", "buffer 1", "offsets buffer is NULL"),
    ("NULL utf8 data with length", mutate_built(utf8, lambda b: h.set_buffer_ptr(b.array, 2, None)),
     "full", "buffer 2", "data buffer is NULL"),
    ("NULL validity with nulls", mutate_built(int32, lambda b: h.set_buffer_ptr(b.array, 0, None)),
     "full", "buffer 0", "validity"),
    ("NULL dense union offsets", mutate_built(dense_union, lambda b: h.set_buffer_ptr(b.array, 1, None)),
     "full", "buffer 1", "NULL"),
    ("sparse union with validity", mutate_case(sparse_union, lambda c: c.array.buffers.insert(0, None)),
     "full", "array", "n_buffers is 2"),
    ("run-end encoded with a buffer", mutate_case(run_end_encoded, lambda c: _push(c.array.buffers, None)),
     "full", "array", "n_buffers is 1"),
    ("NULL boolean values", lambda: Case(ArrayNode(3, 0, [None, None]), schema("b", "flag")).build(),
     "full", "buffer 1", "NULL"),
    # ---- lengths and counts
    ("negative length", mutate_case(int32, lambda c: _set(c.array, length=-1)), "full", "array", "length is -1"),
    ("negative offset", mutate_case(int32, lambda c: _set(c.array, offset=-1)), "full", "array", "offset is -1"),
    ("offset overflowing the buffer size", mutate_case(int32, lambda c: _set(c.array, offset=2**62)),
     "full", "buffer 1", "overflow"),
    ("offset + length past int64", mutate_case(int32, lambda c: _set(c.array, offset=2**63 - 1)),
     "full", "array", "overflows int64"),
    ("null_count -2", mutate_case(int32, lambda c: _set(c.array, null_count=-2)), "full", "array", "null_count is -2"),
    ("null_count above length", mutate_case(int32, lambda c: _set(c.array, null_count=4)),
     "full", "array", "null_count 4"),
    ("negative child length", mutate_case(struct_ab, lambda c: _set(c.array.children[1], length=-5)),
     "full", 'field "b"', "length is -5"),
    # ---- children
    ("n_children mismatch", mutate_case(struct_ab, lambda c: c.array.children.pop()),
     "full", "array", "n_children is 1"),
    ("negative n_children", mutate_built(struct_ab, lambda b: _set(b.array, n_children=-1)),
     "full", "array", "n_children is -1"),
    ("NULL children array", mutate_built(struct_ab, lambda b: _set(b.array, children=None)),
     "full", "array", "children is NULL"),
    ("NULL child pointer", mutate_built(struct_ab, lambda b: h.set_child_ptr(b.array, 1, None)),
     "full", 'field "b"', "NULL"),
    ("released child", mutate_built(struct_ab, _set_child_release_null), "full", 'field "b"', "released"),
    ("short struct child", mutate_case(struct_ab, lambda c: c.array.children.__setitem__(1, utf8_node([b"a", b""]))),
     "minimal", 'field "b"', "length 2"),
    ("short fixed_size_list child",
     mutate_case(fixed_size_list, lambda c: c.array.children.__setitem__(0, int32_node([1, 2, 3, 4, 5]))),
     "minimal", "child 0", "length 5"),
    ("short sparse union child",
     mutate_case(sparse_union, lambda c: c.array.children.__setitem__(1, utf8_node([b"a", b"b"]))),
     "minimal", "child 1", "length 2"),
    ("list child shorter than the last offset",
     mutate_case(list_case, lambda c: c.array.children.__setitem__(0, int32_node([1, 2]))),
     "default", "child 0", "last offset"),
    # ---- dictionaries
    ("missing dictionary", mutate_case(dictionary, lambda c: _set(c.array, dictionary=None)),
     "full", "array", "dictionary is NULL"),
    ("dictionary the schema lacks", mutate_case(int32, lambda c: _set(c.array, dictionary=utf8_node([b"x"]))),
     "full", "array", "dictionary is set"),
    ("defect inside the dictionary", mutate_case(dictionary, lambda c: c.array.dictionary.buffers.__setitem__(2, None)),
     "full", "dictionary > buffer 2", "data buffer is NULL"),
    # ---- depth and (array) cycles
    ("nesting deeper than 64", lambda: nested_lists(70).build(), "full", "child 0", "deeper than 64"),
    ("array child pointing to its parent", mutate_built(lambda: nested_lists(3), _array_self_cycle),
     "full", "child 0", "n_children is 1"),
    ("dictionary that is its own node", _dictionary_is_own_node, "full", 'field "a" > dictionary', "n_buffers"),
    # ---- format strings (schema.rs)
    ("unknown format", _field_b_format(b"Q"), "full", 'field "b"', '"Q"'),
    ("truncated fixed_size_list format", _field_b_format(b"+w:"), "full", 'field "b"', '"+w:"'),
    ("fixed_size_binary without width", _field_b_format(b"w:"), "full", 'field "b"', '"w:"'),
    ("decimal without scale", _field_b_format(b"d:10"), "full", 'field "b"', "d:10"),
    ("timestamp without colon", _field_b_format(b"tsu"), "full", 'field "b"', '"tsu"'),
    ("format not UTF-8", _field_b_format(b"\xff"), "full", 'field "b"', "utf-8"),
    ("NULL format", _field_b_format(None), "full", 'field "b"', "format is NULL"),
    ("name not UTF-8", mutate_case(struct_ab, lambda c: _set(c.schema.children[1], name=b"b\xff")),
     "full", "field 1", "utf-8"),
    ("union with fewer type ids than children", mutate_case(dense_union, lambda c: _set(c.schema, format=b"+ud:0")),
     "full", "array", "union"),
    ("union with a repeated type id", mutate_case(sparse_union, lambda c: _set(c.schema, format=b"+us:1,1")),
     "full", "array", "more than once"),
    # ---- schema members and children
    ("released schema child", mutate_built(struct_ab, lambda b: _set_child_release_null(b, 1, "schema")),
     "full", "field 1", "released"),
    ("NULL schema child pointer", mutate_built(struct_ab, lambda b: h.set_child_ptr(b.schema, 1, None)),
     "full", "array", "NULL"),
    ("NULL schema children array", mutate_built(struct_ab, lambda b: _set(b.schema, children=None)),
     "full", "array", "children is NULL"),
    ("list schema without its child", mutate_case(list_case, lambda c: c.schema.children.clear()),
     "full", "array", "n_children is 0"),
    ("dictionary on a non-integer index",
     mutate_case(struct_ab, lambda c: _set(c.schema.children[1], dictionary=schema("u", ""))),
     "full", 'field "b"', "dictionary"),
    ("map entries not a struct of two", mutate_case(map_case, _map_entries_not_two), "default", "child 0", "entries"),
    ("map entries not a struct", mutate_case(map_case, _map_entries_not_struct), "default", "child 0", "struct"),
    ("nullable run ends", mutate_case(run_end_encoded, lambda c: _set(c.schema.children[0], flags=h.NULLABLE)),
     "default", "child 0", "nullable"),
    # ---- metadata encoding (schema/metadata.rs)
    ("metadata with a negative count", _field_b_metadata(h.i32s([-1])), "full", 'field "b"', "metadata"),
    ("metadata key with a negative length", _field_b_metadata(h.i32s([1, -4])), "full", 'field "b"', "metadata key 0"),
    ("metadata key not UTF-8", _field_b_metadata(h.encode_metadata([(b"k\xff", b"v")])),
     "full", 'field "b"', "utf-8"),
    ("metadata value not UTF-8", _field_b_metadata(h.encode_metadata([(b"k", b"\xfe")])),
     "full", 'field "b"', "metadata value 0"),
    # ---- values (values.rs)
    ("offsets whose first exceeds the last", mutate_case(utf8, lambda c: c.array.buffers.__setitem__(1, i32s([3, 3, 3, 1]))),
     "default", "buffer 1", "decrease"),
    ("negative first offset", mutate_case(utf8, lambda c: c.array.buffers.__setitem__(1, i32s([-1, 1, 1, 4]))),
     "default", "buffer 1", "negative"),
    ("offsets decreasing in the middle", mutate_case(utf8, lambda c: c.array.buffers.__setitem__(1, i32s([0, 3, 1, 4]))),
     "full", "array", "offset"),
    ("list offsets whose first exceeds the last",
     mutate_case(list_case, lambda c: c.array.buffers.__setitem__(1, i32s([3, 2, 2, 1]))),
     "default", "buffer 1", "decrease"),
    ("invalid UTF-8", mutate_case(utf8, lambda c: c.array.buffers.__setitem__(2, b"a\xffcd")), "full", "array", "utf"),
    ("undeclared union type id", mutate_case(sparse_union, lambda c: c.array.buffers.__setitem__(0, i8s([0, 5, 0]))),
     "full", "array", "type id"),
    ("negative union type id", mutate_case(dense_union, lambda c: c.array.buffers.__setitem__(0, i8s([0, -1, 0]))),
     "full", "array", "type id"),
    ("dense union offset past its child",
     mutate_case(dense_union, lambda c: c.array.buffers.__setitem__(1, i32s([0, 5, 1]))), "full", "array", "offset"),
    ("run ends not increasing",
     mutate_case(run_end_encoded, lambda c: _set(c.array, children=[int32_node([3, 2, 5]), int32_node([10, 20, 30])])),
     "full", "array", "increasing"),
    ("run ends and values of different lengths",
     mutate_case(run_end_encoded, lambda c: c.array.children.__setitem__(1, int32_node([10, 20, 30]))),
     "minimal", "array", "run_ends"),
    ("run ends with nulls",
     mutate_case(run_end_encoded, lambda c: c.array.children.__setitem__(
         0, ArrayNode(2, 1, [bitmap([True, False]), i32s([2, 5])]))),
     "minimal", "child 0", "null"),
    ("last run end below the length",
     mutate_case(run_end_encoded, lambda c: c.array.children.__setitem__(0, int32_node([2, 4]))),
     "default", "child 0", "last run end is 4"),
    ("long view into a missing variadic buffer", _views_with_long_view(1, 0), "full", "array", "buffer index"),
    ("long view past its buffer", _views_with_long_view(0, 5), "full", "array", "buffer slice"),
    ("negative variadic buffer size", mutate_case(utf8_view, lambda c: c.array.buffers.__setitem__(3, i64s([-1]))),
     "default", "buffer 2", "variadic buffer size is -1"),
    ("NULL variadic sizes buffer", mutate_built(utf8_view, lambda b: h.set_buffer_ptr(b.array, 3, None)),
     "default", "buffer 3", "variadic sizes buffer is NULL"),
    ("view array without variadic sizes", mutate_case(utf8_view, lambda c: c.array.buffers.__delitem__(slice(2, None))),
     "full", "array", "n_buffers is 2"),
    # The data buffer read as the sizes buffer: no variadic buffer is left
    # for the long view.
    ("view array whose sizes buffer is missing", mutate_case(utf8_view, lambda c: c.array.buffers.pop()),
     "full", "array", "buffer index"),
    ("dictionary key out of range", mutate_case(dictionary, lambda c: c.array.buffers.__setitem__(1, i8s([0, 5, 0]))),
     "full", "array", "out of bounds"),
    ("null_count disagreeing with the bitmap", mutate_case(int32, lambda c: _set(c.array, null_count=2)),
     "full", "array", "null_count"),
    ("inline view with padding", mutate_case(utf8_view, _inline_view_padding), "full", "array", "padding"),
    ("long view prefix differs", mutate_case(utf8_view, _long_view_prefix), "full", "array", "prefix"),
    ("null map key", mutate_case(map_case, _null_map_key), "full", "child 0", "non-nullable"),
    ("nulls in a non-nullable field", mutate_case(struct_ab, _non_nullable_field_with_nulls),
     "full", 'field "a"', "non-nullable"),
]


@pytest.mark.parametrize("via", ["cpu", "device"])
@pytest.mark.parametrize(
    "name, build, level, path, keyword", DEFECTS, ids=[d[0] for d in DEFECTS]
)
def test_defect_is_a_value_error_naming_it_and_both_structs_are_released_once(
    name, build, level, path, keyword, via
):
    expect_invalid(build(), level, path, keyword, via=via)


@pytest.mark.parametrize("level", ["none", "minimal", "default"])
@pytest.mark.parametrize(
    "name, build, first, path, keyword", DEFECTS, ids=[d[0] for d in DEFECTS]
)
def test_every_defect_at_a_lower_level_is_refused_or_accepted_but_never_leaks(
    name, build, first, path, keyword, level
):
    # Below `full` a level may trust what it does not check; whatever it
    # decides, the structs are released exactly once, and a refusal is a
    # ValueError. A defect is never accepted at its own level or above.
    built = build()
    try:
        array = ad.array(h.DeviceArrayProducer(built), validate=level)
    except BaseException as e:  # noqa: B036
        assert isinstance(e, ValueError), f"{type(e).__name__}: {e}"
        assert built.releases() == (1, 1), built.releases()
        assert_children_sane(built)
        return
    assert LEVELS.index(level) < LEVELS.index(first), f"accepted at {level}, rejected from {first}"
    assert built.releases() == (0, 1)
    del array
    gc.collect()
    assert built.releases() == (1, 1)
    assert_children_sane(built)


# ---------------------------------------------------------------- levels
# (levels.rs) Which level first rejects a defect; whatever a level accepts is
# still released exactly once.

LEVEL_DEFECTS = [
    ("invalid UTF-8", mutate_case(utf8, lambda c: c.array.buffers.__setitem__(2, b"a\xffcd")), "full"),
    ("offsets decreasing in the middle",
     mutate_case(utf8, lambda c: c.array.buffers.__setitem__(1, i32s([0, 3, 1, 4]))), "full"),
    ("wrong null_count", mutate_case(int32, lambda c: _set(c.array, null_count=2)), "full"),
    ("dictionary key out of range",
     mutate_case(dictionary, lambda c: c.array.buffers.__setitem__(1, i8s([0, 5, 0]))), "full"),
    ("union type id out of range",
     mutate_case(sparse_union, lambda c: c.array.buffers.__setitem__(0, i8s([0, 5, 0]))), "full"),
    ("list child shorter than the last offset",
     mutate_case(list_case, lambda c: c.array.children.__setitem__(0, int32_node([1, 2]))), "default"),
    ("short last run end",
     mutate_case(run_end_encoded, lambda c: c.array.children.__setitem__(0, int32_node([2, 4]))), "default"),
    ("NULL validity with nulls", mutate_case(int32, lambda c: c.array.buffers.__setitem__(0, None)), "minimal"),
    ("short struct child",
     mutate_case(struct_ab, lambda c: c.array.children.__setitem__(1, utf8_node([b"a", b""]))), "minimal"),
    ("negative length", mutate_case(int32, lambda c: _set(c.array, length=-1)), "none"),
    ("wrong buffer count", mutate_case(utf8, lambda c: c.array.buffers.pop()), "none"),
    ("missing child", mutate_case(struct_ab, lambda c: c.array.children.pop()), "none"),
    ("missing dictionary", mutate_case(dictionary, lambda c: _set(c.array, dictionary=None)), "none"),
    ("nesting deeper than 64", lambda: nested_lists(70).build(), "none"),
]


@pytest.mark.parametrize("name, build, first", LEVEL_DEFECTS, ids=[d[0] for d in LEVEL_DEFECTS])
def test_a_defect_is_first_rejected_at_its_level(name, build, first):
    for level in LEVELS:
        built = build()
        if LEVELS.index(level) >= LEVELS.index(first):
            err = expect_exc(ValueError, ad.array, h.DeviceArrayProducer(built), validate=level)
            assert built.releases() == (1, 1), f"{level}: {built.releases()} after {err}"
            assert_children_sane(built)
        else:
            array = ad.array(h.DeviceArrayProducer(built), validate=level)
            assert built.releases() == (0, 1), level
            del array
            check_released_after_drop(built)


# ---------------------------------------------------------------- device fields


@pytest.mark.parametrize("make", [int32, utf8], ids=["int32", "utf8"])
def test_a_cpu_array_with_a_sync_event_is_rejected(make):
    event = ctypes.c_uint64(0)
    built = make().build(sync_event=ctypes.addressof(event))
    err = expect_exc(Exception, ad.array, h.DeviceArrayProducer(built))
    assert "sync_event" in str(err), str(err)
    assert_released_once(built)


def test_a_structural_defect_is_caught_on_an_opaque_device():
    case = int32()
    case.array.length = -3
    expect_invalid(case.build(device_type=17, device_id=0), "full", "array", "length is -3")


@pytest.mark.parametrize("level", LEVELS)
def test_host_pointers_claimed_as_emulated_device_memory_are_an_error_not_a_crash(level):
    # EXT_DEV 0 is the emulated device, whose pointers are checked against
    # its registry of allocations: foreign ones must be refused, not read.
    built = utf8().build(device_type=h.EXT_DEV, device_id=0)
    try:
        array = ad.array(h.DeviceArrayProducer(built), validate=level)
    except BaseException as e:  # noqa: B036
        assert isinstance(e, Exception), repr(e)
        assert built.releases() == (1, 1), built.releases()
        return
    # Accepted without reading data: copying it must fail cleanly.
    assert array.device.type == ad.DeviceType.EXT_DEV
    expect_exc(Exception, array.to, ad.cpu())
    del array
    check_released_after_drop(built)


def test_a_foreign_sync_event_on_the_emulated_device_is_an_error_not_a_crash():
    event = ctypes.c_uint64(0)
    built = int32().build(device_type=h.EXT_DEV, device_id=0, sync_event=ctypes.addressof(event))
    try:
        array = ad.array(h.DeviceArrayProducer(built))
    except BaseException as e:  # noqa: B036
        assert isinstance(e, Exception), repr(e)
        assert "sync_event" in str(e), str(e)
        assert built.releases() == (1, 1), built.releases()
        return
    expect_exc(Exception, array.to, ad.cpu())
    del array
    check_released_after_drop(built)


def test_a_defective_array_asked_onto_a_device_is_released_once():
    case = utf8()
    case.array.buffers[1] = i32s([3, 3, 3, 1])
    built = case.build()
    err = expect_exc(ValueError, ad.array, h.ArrayProducer(built), device=ad.emulated(0))
    assert "decrease" in str(err), str(err)
    assert_released_once(built)


# ---------------------------------------------------------------- crash-prone (isolated)


def test_a_negative_schema_child_count_is_rejected():
    run_isolated(
        """
        built = struct_ab().build()
        built.schema.n_children = -1
        expect_invalid(built, "full", "array", "n_children is -1")
        """
    )


def test_a_schema_child_that_points_to_its_parent_is_an_error_not_a_stack_overflow():
    run_isolated(
        """
        built = nested_lists(2).build()
        inner = h.child_ptr(built.schema, 0)
        h.set_child_ptr(ArrowSchema.from_address(inner), 0, inner)
        expect_invalid(built, "full", "child 0", "cycle")
        """
    )


def test_a_schema_that_is_its_own_dictionary_is_an_error_not_a_stack_overflow():
    run_isolated(
        """
        case = dictionary()
        case.schema.dictionary = schema("i", "")
        built = case.build()
        d = built.schema.dictionary
        ArrowSchema.from_address(d).dictionary = d
        expect_invalid(built, "full", "dictionary", "cycle")
        """
    )


def test_a_root_schema_that_is_its_own_child_is_an_error_not_a_stack_overflow():
    run_isolated(
        """
        built = list_case().build()
        h.set_child_ptr(built.schema, 0, ctypes.addressof(built.schema))
        err = expect_exc(ValueError, ad.array, h.DeviceArrayProducer(built))
        assert built.releases() == (1, 1), built.releases()
        """
    )


# ---------------------------------------------------------------- streams


def batches(*cases):
    return [c.build() for c in cases]


def producer_for(state):
    return h.DeviceStreamProducer(state) if state.device else h.StreamProducer(state)


@pytest.mark.parametrize("device", [False, True], ids=["c_stream", "device_stream"])
def test_a_valid_stream_reads_and_releases_everything_once(device):
    built = batches(utf8(), utf8())
    state = h.StreamState(utf8(), built, device=device)
    s = ad.stream(producer_for(state))
    assert s.type == "Utf8"
    arrays = list(s)
    assert [len(a) for a in arrays] == [3, 3]
    # The end was reached: the stream is released at once, its schema too.
    assert state.releases == 1
    assert state.schema_built.releases() == (0, 1)
    assert [b.array_releases for b in built] == [0, 0]
    del arrays
    gc.collect()
    assert [b.array_releases for b in built] == [1, 1]
    del s
    gc.collect()
    assert state.releases == 1 and state.calls_after_release == 0


@pytest.mark.parametrize("device", [False, True], ids=["c_stream", "device_stream"])
def test_a_stream_dropped_unread_is_released_once(device):
    built = batches(utf8())
    state = h.StreamState(utf8(), built, device=device)
    s = ad.stream(producer_for(state))
    assert state.releases == 0
    del s
    gc.collect()
    assert state.releases == 1 and state.calls_after_release == 0
    built[0].release_unconsumed()


@pytest.mark.parametrize("last_error_null", [False, True], ids=["message", "no message"])
@pytest.mark.parametrize("device", [False, True], ids=["c_stream", "device_stream"])
def test_get_schema_failing_raises_with_the_message_and_releases_once(device, last_error_null):
    state = h.StreamState(
        utf8(), [], device=device, schema_error=b"cannot open the file", last_error_null=last_error_null
    )
    err = expect_exc(RuntimeError, ad.stream, producer_for(state))
    if last_error_null:
        assert "get_schema returned 5" in str(err), str(err)
    else:
        assert "cannot open the file" in str(err), str(err)
    assert state.releases == 1, "released exactly once, right after the error"
    assert state.calls_after_release == 0


@pytest.mark.parametrize("device", [False, True], ids=["c_stream", "device_stream"])
def test_get_next_failing_mid_stream_raises_with_the_message_and_releases_once(device):
    built = batches(utf8(), utf8())
    state = h.StreamState(utf8(), built, device=device, fail_at=1, next_error=b"disk on fire")
    s = ad.stream(producer_for(state))
    first = next(s)
    assert len(first) == 3
    err = expect_exc(RuntimeError, next, s)
    assert "disk on fire" in str(err), str(err)
    assert state.releases == 1
    # After an error the stream is over; nothing is called on it again.
    assert list(s) == []
    assert state.calls_after_release == 0
    del first, s
    gc.collect()
    assert built[0].releases() == (1, 0)  # the batch; its schema is the stream's
    assert state.schema_built.releases() == (0, 1)
    assert state.releases == 1
    built[1].release_unconsumed()


@pytest.mark.parametrize("device", [False, True], ids=["c_stream", "device_stream"])
def test_a_malformed_batch_is_a_value_error_naming_the_batch(device):
    bad = utf8()
    bad.array.length = -1
    built = batches(utf8(), bad)
    state = h.StreamState(utf8(), built, device=device)
    s = ad.stream(producer_for(state))
    first = next(s)
    err = expect_exc(ValueError, next, s)
    assert "batch 1" in str(err) and "length is -1" in str(err), str(err)
    assert built[1].array_releases == 1, "the malformed batch is released once, at once"
    assert state.releases == 1
    assert list(s) == []
    del first, s
    gc.collect()
    assert built[0].array_releases == 1
    assert state.calls_after_release == 0


@pytest.mark.parametrize("device", [False, True], ids=["c_stream", "device_stream"])
def test_a_batch_of_another_layout_than_the_schema_is_a_value_error(device):
    # The schema says utf8; the batch is laid out as int32 (2 buffers).
    built = batches(int32())
    state = h.StreamState(utf8(), built, device=device)
    s = ad.stream(producer_for(state))
    err = expect_exc(ValueError, next, s)
    assert "batch 0" in str(err) and "n_buffers is 2" in str(err), str(err)
    assert built[0].array_releases == 1 and state.releases == 1


def test_a_batch_on_another_device_type_than_the_stream_is_a_value_error():
    built = [utf8().build(device_type=17, device_id=0)]
    state = h.StreamState(utf8(), built, device=True)
    s = ad.stream(h.DeviceStreamProducer(state))
    err = expect_exc(ValueError, next, s)
    assert "batch 0" in str(err) and "device type" in str(err), str(err)
    assert built[0].array_releases == 1 and state.releases == 1


@pytest.mark.parametrize("device", [False, True], ids=["c_stream", "device_stream"])
def test_a_malformed_stream_schema_is_a_value_error_and_releases_once(device):
    bad_schema = utf8()
    bad_schema.schema.format = b"Q"
    state = h.StreamState(bad_schema, [], device=device)
    err = expect_exc(ValueError, ad.stream, producer_for(state))
    assert '"Q"' in str(err), str(err)
    assert state.releases == 1
    gc.collect()
    assert state.schema_built.releases() == (0, 1)


@pytest.mark.parametrize("missing", ["get_schema", "get_next", "get_last_error"])
@pytest.mark.parametrize("device", [False, True], ids=["c_stream", "device_stream"])
def test_a_stream_with_a_null_callback_is_a_value_error_and_released_once(device, missing):
    state = h.StreamState(utf8(), [], device=device)
    setattr(state.struct, missing, None)
    err = expect_exc(ValueError, ad.stream, producer_for(state))
    assert "non-NULL" in str(err), str(err)
    assert state.releases == 1 and state.get_schema_calls == 0


@pytest.mark.parametrize("device", [False, True], ids=["c_stream", "device_stream"])
def test_a_released_stream_is_a_value_error_and_not_released_again(device):
    state = h.StreamState(utf8(), [], device=device)
    h.release_at(ctypes.addressof(state.struct), type(state.struct).release.offset)
    assert state.releases == 1
    err = expect_exc(ValueError, ad.stream, producer_for(state))
    assert "released" in str(err), str(err)
    assert state.releases == 1 and state.get_schema_calls == 0


@pytest.mark.parametrize(
    "device, name, expected",
    [
        (False, b"arrow_device_array_stream", "arrow_array_stream"),
        (True, b"arrow_array_stream", "arrow_device_array_stream"),
        (False, None, "arrow_array_stream"),
    ],
)
def test_a_wrongly_named_stream_capsule_is_a_value_error_and_stays_with_its_capsule(device, name, expected):
    state = h.StreamState(utf8(), [], device=device)
    p = producer_for(state)
    if name is None:
        p.result = h.releasing_capsule(state.struct, None, type(state.struct).release.offset)
    else:
        p.name = name
    err = expect_exc(ValueError, ad.stream, p)
    assert expected in str(err), str(err)
    p.result = None
    gc.collect()
    assert state.releases == 1 and state.get_schema_calls == 0


@pytest.mark.parametrize("result", [7, ("a", "b")], ids=["int", "tuple"])
def test_a_non_capsule_stream_is_a_type_error(result):
    err = expect_exc(TypeError, ad.stream, h.StreamProducer(result=result))
    assert "PyCapsule" in str(err)


def test_a_stream_capsule_consumed_twice_is_rejected_the_second_time():
    state = h.StreamState(utf8(), batches(utf8()), device=True)
    cap = state.capsule()
    p = h.DeviceStreamProducer(result=cap)
    s = ad.stream(p)
    err = expect_exc(ValueError, ad.stream, p)
    assert "released" in str(err), str(err)
    assert state.get_schema_calls == 1
    assert len(list(s)) == 1
    del s, p, cap
    gc.collect()
    assert state.releases == 1


def test_an_iterable_whose_first_array_is_malformed_raises_naming_the_defect():
    bad = utf8()
    bad.array.length = -1
    built = bad.build()
    err = expect_exc(Exception, ad.stream, [h.ArrayProducer(built)])
    assert "length is -1" in str(err), str(err)
    assert_released_once(built)


def test_an_iterable_whose_first_array_is_malformed_raises_a_value_error():
    # `stream(iterable)` converts each element with `array()`, which raises
    # ValueError for a malformed struct: the same defect should not become a
    # RuntimeError ("producer error 5 (EIO)") just because it came through
    # an iterable read from Python.
    bad = utf8()
    bad.array.length = -1
    built = bad.build()
    expect_exc(ValueError, ad.stream, [h.ArrayProducer(built)])
    assert_released_once(built)


def test_an_iterable_with_a_malformed_later_array_raises_and_releases_it_once():
    good, bad = utf8().build(), utf8()
    bad.array.buffers[1] = i32s([3, 3, 3, 1])
    bad = bad.build()
    s = ad.stream([h.ArrayProducer(good), h.ArrayProducer(bad)])
    first = next(s)
    err = expect_exc(Exception, next, s)
    assert "decrease" in str(err), str(err)
    assert_released_once(bad)
    del first, s
    gc.collect()
    assert_released_once(good, "after the stream was dropped")


# ---------------------------------------------------------------- DLPack


@pytest.mark.parametrize("versioned", [False, True], ids=["legacy", "versioned"])
def test_a_valid_tensor_is_taken_over_and_deleted_once_after_the_drop(versioned):
    pa = pytest.importorskip("pyarrow")
    tensor = h.Tensor(i64s([1, 2, 3]), versioned=versioned)
    p = h.DLPackProducer(tensor)
    array = ad.array(p)
    assert (len(array), array.type) == (3, "Int64")
    assert p.calls == [(1, 1)]
    name = b"used_dltensor_versioned" if versioned else b"used_dltensor"
    assert h.capsule_name(p.cached) == name, "the consumer renames the capsule it took"
    assert tensor.deleter_calls == 0
    assert pa.array(array).to_pylist() == [1, 2, 3]
    gc.collect()
    assert tensor.deleter_calls == 0
    p.cached = None  # the renamed capsule's destructor must not delete it
    gc.collect()
    assert tensor.deleter_calls == 0 and tensor.capsule_destructor_runs == 1
    del array
    gc.collect()
    assert tensor.deleter_calls == 1


def test_a_pre_1_0_producer_is_asked_again_without_max_version():
    tensor = h.Tensor(i32s([4, 5, 6]), bits=32)
    p = h.LegacyDLPackProducer(tensor)
    array = ad.array(p)
    assert p.calls == ["legacy"] and len(array) == 3
    del array
    gc.collect()
    assert tensor.deleter_calls == 1


def test_a_bool_tensor_is_copied_and_deleted_at_once():
    tensor = h.Tensor(bytes([1, 0, 7]), code=h.DL_BOOL, bits=8)
    p = h.DLPackProducer(tensor)
    array = ad.array(p)
    assert array.type == "Boolean" and len(array) == 3
    assert tensor.deleter_calls == 1
    del array
    gc.collect()
    assert tensor.deleter_calls == 1


def test_a_zero_d_tensor_is_one_value_and_a_null_deleter_is_fine():
    tensor = h.Tensor(i64s([9]), shape=(), versioned=True)
    tensor.managed.deleter = None
    array = ad.array(h.DLPackProducer(tensor))
    assert len(array) == 1
    del array
    gc.collect()
    assert tensor.deleter_calls == 0


def test_an_empty_tensor_with_null_data_imports():
    tensor = h.Tensor(None, shape=(0,))
    array = ad.array(h.DLPackProducer(tensor))
    assert len(array) == 0
    del array
    gc.collect()
    assert tensor.deleter_calls == 1


DLPACK_DEFECTS = [
    ("ndim 2", dict(data=i64s([1, 2, 3, 4]), shape=(2, 2)), TypeError, "2 dimensions"),
    ("strides [2]", dict(data=i64s([1, 2, 3, 4, 5, 6]), strides=(2,)), TypeError, "not contiguous"),
    ("bfloat16", dict(data=bytes(6), code=h.DL_BFLOAT, bits=16), TypeError, "bfloat16"),
    ("two lanes", dict(data=bytes(24), code=h.DL_FLOAT, bits=32, lanes=2), TypeError, "lanes"),
    ("int7", dict(data=bytes(3), bits=7), TypeError, "no Arrow type"),
    ("NULL data with length 3", dict(data=None), ValueError, "data is NULL"),
    ("NULL shape with ndim 1", dict(data=i64s([1]), shape=(), ndim=1), ValueError, "shape is NULL"),
    ("negative extent", dict(data=i64s([1]), shape=(-1,)), ValueError, "shape[0] is -1"),
    ("huge extent", dict(data=i64s([1]), shape=(2**62,)), ValueError, "overflows"),
    ("major version 2", dict(data=i64s([1, 2, 3]), versioned=True, version=(2, 0)), TypeError, "version 2.0"),
]


@pytest.mark.parametrize("versioned", [False, True], ids=["legacy", "versioned"])
@pytest.mark.parametrize(
    "name, kwargs, exc, keyword", DLPACK_DEFECTS, ids=[d[0] for d in DLPACK_DEFECTS]
)
def test_a_malformed_tensor_is_an_error_and_deleted_exactly_once(name, kwargs, exc, keyword, versioned):
    kwargs = dict(kwargs)
    data = kwargs.pop("data")
    kwargs.setdefault("versioned", versioned)
    tensor = h.Tensor(data, **kwargs)
    p = h.DLPackProducer(tensor)
    err = expect_exc(exc, ad.array, p)
    assert keyword in str(err), str(err)
    assert tensor.deleter_calls == 1, "deleted exactly once, right after the error"
    assert h.capsule_name(p.cached).startswith(b"used_"), "the tensor was taken over"
    p.cached = None
    gc.collect()
    assert tensor.deleter_calls == 1 and tensor.capsule_destructor_runs == 1


@pytest.mark.parametrize("name", [b"foo", b"used_dltensor", None], ids=["foo", "used_dltensor", "NULL name"])
def test_a_dlpack_capsule_with_another_name_is_a_value_error_and_left_to_its_destructor(name):
    tensor = h.Tensor(i64s([1, 2, 3]))
    tensor.name = b"dltensor"  # what the destructor checks
    cap = h.capsule(ctypes.addressof(tensor.managed), name, None)
    err = expect_exc(ValueError, ad.array, h.DLPackProducer(result=cap))
    assert "dltensor" in str(err), str(err)
    assert tensor.deleter_calls == 0, "not ours: the library must not delete it"


def test_a_dlpack_capsule_consumed_twice_is_rejected_the_second_time():
    tensor = h.Tensor(i64s([1, 2, 3]))
    p = h.DLPackProducer(tensor)
    first = ad.array(p)
    err = expect_exc(ValueError, ad.array, p)
    assert "already consumed" in str(err), str(err)
    assert tensor.deleter_calls == 0
    del first
    gc.collect()
    assert tensor.deleter_calls == 1
    p.cached = None
    gc.collect()
    assert tensor.deleter_calls == 1


def test_a_non_capsule_from_dlpack_is_a_type_error_naming_what_was_returned():
    err = expect_exc(TypeError, ad.array, h.DLPackProducer(result=12345))
    assert "PyCapsule" in str(err)
    # The message should name the type of what __dlpack__ returned (int),
    # not the producer's.
    assert "int" in str(err) and "DLPackProducer" not in str(err), str(err)


def test_a_bool_tensor_on_a_device_is_refused_and_deleted_once():
    tensor = h.Tensor(bytes([1, 0, 1]), code=h.DL_BOOL, bits=8, device_type=h.CUDA, device_id=0)
    err = expect_exc(TypeError, ad.array, h.DLPackProducer(tensor))
    assert "bool" in str(err), str(err)
    assert tensor.deleter_calls == 1


def test_host_memory_claimed_as_an_emulated_device_tensor_is_never_read():
    tensor = h.Tensor(i64s([1, 2, 3]), device_type=h.EXT_DEV, device_id=0)
    array = ad.array(h.DLPackProducer(tensor))
    assert array.device.type == ad.DeviceType.EXT_DEV and len(array) == 3
    err = expect_exc(Exception, array.to, ad.cpu())
    assert "not inside a live allocation" in str(err), str(err)
    assert tensor.deleter_calls == 0
    del array, err
    gc.collect()
    assert tensor.deleter_calls == 1


# ---------------------------------------------------------------- requested_schema


def _imported_int32():
    built = int32().build()
    return built, ad.array(h.DeviceArrayProducer(built))


@pytest.mark.parametrize("method", ["__arrow_c_device_array__", "__arrow_c_array__"])
def test_a_malformed_requested_schema_is_borrowed_and_refused(method):
    src, array = _imported_int32()
    bad = Case(int32().array, schema("Q", "x")).build()
    cap = h.schema_capsule(bad)
    err = expect_exc(ValueError, getattr(array, method), cap)
    assert '"Q"' in str(err), str(err)
    assert bad.schema_releases == 0, "a requested schema is borrowed, never released by the callee"
    del cap
    gc.collect()
    assert bad.schema_releases == 1
    bad.release_unconsumed()
    del array
    gc.collect()
    assert_released_once(src)


@pytest.mark.parametrize("method", ["__arrow_c_device_array__", "__arrow_c_array__"])
def test_a_released_or_misnamed_requested_schema_is_refused(method):
    src, array = _imported_int32()
    released = int32().build()
    h.release_at(ctypes.addressof(released.schema), ArrowSchema.release.offset)
    err = expect_exc(ValueError, getattr(array, method), h.schema_capsule(released))
    assert "released" in str(err), str(err)
    assert released.schema_releases == 1
    other = int32().build()
    err = expect_exc(ValueError, getattr(array, method), h.schema_capsule(other, b"arrow_array"))
    assert "arrow_schema" in str(err), str(err)
    gc.collect()
    assert other.schema_releases == 1
    expect_exc(TypeError, getattr(array, method), 17)
    released.release_unconsumed()
    other.release_unconsumed()


def test_a_requested_schema_of_another_type_is_refused_and_borrowed():
    src, array = _imported_int32()
    other = utf8().build()
    cap = h.schema_capsule(other)
    err = expect_exc(Exception, array.__arrow_c_device_array__, cap)
    assert "Utf8" in str(err) or "Int32" in str(err), str(err)
    assert other.schema_releases == 0
    del cap
    gc.collect()
    assert other.schema_releases == 1
    other.release_unconsumed()


def test_a_malformed_requested_schema_leaves_a_stream_readable():
    built = batches(utf8())
    state = h.StreamState(utf8(), built, device=True)
    s = ad.stream(h.DeviceStreamProducer(state))
    bad = Case(utf8().array, schema("Q", "x")).build()
    err = expect_exc(ValueError, s.__arrow_c_device_stream__, h.schema_capsule(bad))
    assert '"Q"' in str(err), str(err)
    gc.collect()
    assert bad.schema_releases == 1
    bad.release_unconsumed()
    assert [len(a) for a in s] == [3]
    assert state.releases == 1


# ---------------------------------------------------------------- streams, more


def test_get_next_failing_without_a_message_says_so():
    state = h.StreamState(utf8(), batches(utf8()), device=True, fail_at=0, last_error_null=True)
    s = ad.stream(h.DeviceStreamProducer(state))
    err = expect_exc(RuntimeError, next, s)
    assert "get_next returned 5" in str(err), str(err)
    assert state.releases == 1
    state.batches[0].release_unconsumed()


@pytest.mark.parametrize("device", [False, True], ids=["c_stream", "device_stream"])
def test_get_schema_leaving_the_schema_released_is_a_value_error(device):
    state = h.StreamState(utf8(), [], device=device, schema_left_released=True)
    err = expect_exc(ValueError, ad.stream, producer_for(state))
    assert "left the schema released" in str(err), str(err)
    assert state.releases == 1


@pytest.mark.parametrize("device", [False, True], ids=["c_stream", "device_stream"])
def test_pyarrow_reading_a_hostile_stream_through_us_sees_the_batch_error(device):
    pa = pytest.importorskip("pyarrow")
    bad = struct_ab()
    bad.array.children[1].length = -5
    built = batches(struct_ab(), bad)
    state = h.StreamState(struct_ab(), built, device=device)
    s = ad.stream(producer_for(state))
    reader = pa.RecordBatchReader.from_stream(s)
    assert reader.schema.names == ["a", "b"]
    first = reader.read_next_batch()
    assert first.column(1).to_pylist() == ["a", "", "bcd"]
    with pytest.raises(Exception) as info:
        reader.read_next_batch()
    assert "batch 1" in str(info.value) and "length is -5" in str(info.value), str(info.value)
    assert built[1].releases() == (1, 0) and state.releases == 1
    del first, reader, s, info
    gc.collect()
    assert built[0].releases() == (1, 0)
    assert state.schema_built.releases() == (0, 1)
    assert state.calls_after_release == 0


# ---------------------------------------------------------------- concurrency (isolated)
# The stream's batches sit behind a mutex; a thread that blocks on it while
# holding the GIL, or a producer that re-enters the stream, must not hang
# the interpreter. Each runs in a child with a watchdog.


def test_two_threads_reading_one_hostile_stream_do_not_deadlock():
    run_isolated(
        watchdog_s=3, body="""
        import time
        state = h.StreamState(utf8(), batches(*[utf8() for _ in range(20)]), device=True,
                              on_next=lambda: time.sleep(0.005))
        s = ad.stream(h.DeviceStreamProducer(state))
        out, errors = read_in_two_threads(s)
        assert len(out) + len(errors) >= 20 or errors, (out, errors)
        assert state.releases == 1
        """
    )


def test_two_threads_reading_one_python_iterable_stream_do_not_deadlock():
    run_isolated(
        watchdog_s=3, body="""
        import time
        def slow():
            for _ in range(20):
                time.sleep(0.005)
                yield h.ArrayProducer(utf8().build())
        read_in_two_threads(ad.stream(slow()))
        """
    )


def test_a_producer_re_entering_the_stream_from_get_next_does_not_deadlock():
    run_isolated(
        watchdog_s=3, body="""
        holder, seen = [], []
        def reenter():
            if len(holder) == 1 and not seen:
                seen.append(1)
                try:
                    next(holder[0])
                except BaseException as e:
                    seen.append(e)
        state = h.StreamState(utf8(), batches(utf8(), utf8()), device=True, on_next=reenter)
        s = ad.stream(h.DeviceStreamProducer(state))
        holder.append(s)
        try:
            list(s)
        except Exception:
            pass
        assert len(seen) == 2 and isinstance(seen[1], Exception), seen
        """
    )

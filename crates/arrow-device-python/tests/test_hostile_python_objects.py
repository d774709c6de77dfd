"""Hostile Python objects, and Python objects alive at interpreter exit.

Part one: every place where the module walks a structure a caller or a
producer hands it (the `__cuda_array_interface__` dict, DLPack's keyword
arguments and a producer's `__dlpack_device__()`, `requested_schema`, the
iterable given to `stream()`), fed values that recurse, cycle, never end or
are huge. The CUDA Array Interface reader bounds each entry (nesting 8,
256 values, strs of 256 characters) and refuses cycles, with a `ValueError`
naming the entry; the other places are bounded by their types (a 2-tuple,
an int, a capsule) or read lazily.

Part two: objects owning Python references (streams over Python iterables,
their capsules, arrays imported from Python producers, DLPack capsules) left
alive when the interpreter shuts down, in module globals and in reference
cycles that only the garbage collection at shutdown reaches. Their release
then runs after `Py_IsInitialized()` has turned 0, and must do no Python
work: the child must exit with status 0 and print nothing on stderr (no
panic message, no backtrace, no "Exception ignored").

Every input that crashed, or could exhaust memory, runs in a child
interpreter, so that a crash fails one test instead of the run.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pyarrow as pa
import pytest

import arrow_device as ad

# ----------------------------------------------------------------- helpers

# Defined in every child: a fake CUDA Array Interface producer and a valid
# dict (no GPU is needed: the dict is read and checked before CUDA is).
CHILD_PRELUDE = """
import gc, itertools, sys
import arrow_device as ad
import pyarrow as pa

PTR = 0x7F00_0000_1000

class FakeCAI:
    def __init__(self, interface):
        self.__cuda_array_interface__ = interface

def valid(**changes):
    interface = {"shape": (4,), "typestr": "<f4", "data": (PTR, False), "version": 3}
    interface.update(changes)
    return interface

def outcome(call):
    try:
        call()
    except Exception as e:
        print(f"{type(e).__name__}: {e}")
    else:
        print("no error")
"""


def run_child(body: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """Runs `body` after `CHILD_PRELUDE` in a child interpreter."""
    code = CHILD_PRELUDE + textwrap.dedent(body)
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout
    )


def describe(proc: subprocess.CompletedProcess) -> str:
    signal = f" (killed by signal {-proc.returncode})" if proc.returncode < 0 else ""
    return (
        f"child exited with {proc.returncode}{signal}\n"
        f"--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}"
    )


# Python structures that a reader must not follow without bound: `cycle`, a
# list that contains itself, and `deep`, 100,000 one-item lists inside each
# other (one line, to be put into a child's code).
HOSTILE = (
    "cycle = []; cycle.append(cycle); "
    "deep = __import__('functools').reduce(lambda d, _: [d], range(100_000), [])"
)


def child_outcomes(body: str) -> list[str]:
    """The lines `body` printed (with `outcome(...)`), after checking that
    the child exited cleanly with nothing on stderr."""
    proc = run_child(body)
    assert proc.returncode == 0 and proc.stderr == "", describe(proc)
    return proc.stdout.splitlines()


def import_error(interface) -> Exception:
    class FakeCAI:
        def __init__(self, interface):
            self.__cuda_array_interface__ = interface

    with pytest.raises(Exception) as info:
        ad.array(FakeCAI(interface))
    return info.value


def valid(**changes):
    interface = {"shape": (4,), "typestr": "<f4", "data": (0x7F00_0000_1000, False), "version": 3}
    interface.update(changes)
    return interface


def nested(levels: int, leaf=4):
    """`leaf` inside `levels` one-item tuples: nested(2) == ((4,),)."""
    value = leaf
    for _ in range(levels):
        value = (value,)
    return value


# ------------------------------------- the CUDA Array Interface dict reader


@pytest.mark.parametrize("key", ["shape", "strides", "descr", "data"])
def test_a_list_that_contains_itself_is_a_value_error_naming_the_entry(key):
    [line] = child_outcomes(
        f"""
        cycle = []
        cycle.append(cycle)
        outcome(lambda: ad.array(FakeCAI(valid({key}=cycle))))
        """
    )
    assert line == (
        f"ValueError: __cuda_array_interface__['{key}']: a list that contains itself "
        "(a reference cycle; a valid interface holds flat tuples of ints and strs)"
    )


def test_a_cycle_through_a_tuple_is_found_where_it_closes():
    [line] = child_outcomes(
        """
        outer = []
        outer.append(("", outer))
        outcome(lambda: ad.array(FakeCAI(valid(descr=outer))))
        """
    )
    assert line.startswith("ValueError: __cuda_array_interface__['descr']: a list that contains itself")


def test_a_cycle_in_the_masks_dict_names_the_masks_entry():
    [line] = child_outcomes(
        """
        cycle = [4]
        cycle.append(cycle)
        mask = valid(typestr="|b1", shape=cycle)
        outcome(lambda: ad.array(FakeCAI(valid(mask=FakeCAI(mask)))))
        """
    )
    assert line.startswith("ValueError: __cuda_array_interface__['mask']['shape']: a list that contains itself")


def test_a_shape_nested_100000_deep_is_a_value_error():
    [line] = child_outcomes(
        """
        shape = (4,)
        for _ in range(100_000):
            shape = (shape,)
        outcome(lambda: ad.array(FakeCAI(valid(shape=shape))))
        """
    )
    assert line == (
        "ValueError: __cuda_array_interface__['shape']: nested deeper than 8 levels of tuples "
        "and lists (a valid interface nests at most 2: descr, a list of (name, typestr) tuples)"
    )


def test_nesting_is_read_up_to_8_levels_and_refused_at_9():
    # 8 levels reach the library's own check of the shape's items.
    at_limit = import_error(valid(shape=nested(8)))
    assert isinstance(at_limit, ValueError)
    assert str(at_limit) == "__cuda_array_interface__['shape']: expected a tuple of ints, found tuple of 1"
    beyond = import_error(valid(shape=nested(9)))
    assert isinstance(beyond, ValueError)
    assert str(beyond).startswith("__cuda_array_interface__['shape']: nested deeper than 8 levels")


def test_a_structured_descr_is_still_read_far_enough_to_be_named_structured():
    # A record inside a record, with a sub-array shape: 4 levels.
    error = import_error(valid(descr=[("outer", [("inner", "<f4", (2,))])]))
    assert isinstance(error, TypeError)
    assert "['descr']: describes a structured (record) type" in str(error)


def test_an_object_met_twice_without_a_cycle_is_not_a_cycle():
    field = ("", "<f4")
    error = import_error(valid(descr=[field, field]))
    # Two fields: structured, refused by the library, not mistaken for a cycle.
    assert isinstance(error, TypeError)
    assert "describes a structured (record) type" in str(error)


def test_a_shape_of_255_dimensions_reaches_the_library_and_256_are_refused_unread():
    # 255 ints and their tuple are 256 values: read, and refused as a shape.
    at_limit = import_error(valid(shape=(1,) * 255))
    assert isinstance(at_limit, TypeError)
    assert "has 255 dimensions; an Arrow array is one-dimensional" in str(at_limit)
    beyond = import_error(valid(shape=(1,) * 256))
    assert isinstance(beyond, ValueError)
    assert str(beyond) == (
        "__cuda_array_interface__['shape']: more than 256 values (a valid entry has at most 65: "
        "a shape or strides of 64 dimensions)"
    )


def test_a_huge_list_and_an_endless_iterator_are_refused_after_256_values():
    lines = child_outcomes(
        """
        class Endless(tuple):
            def __iter__(self):
                return itertools.count()

        outcome(lambda: ad.array(FakeCAI(valid(strides=list(range(10**7))))))
        outcome(lambda: ad.array(FakeCAI(valid(shape=Endless()))))
        """
    )
    assert lines == [
        "ValueError: __cuda_array_interface__['strides']: more than 256 values (a valid entry has "
        "at most 65: a shape or strides of 64 dimensions)",
        "ValueError: __cuda_array_interface__['shape']: more than 256 values (a valid entry has "
        "at most 65: a shape or strides of 64 dimensions)",
    ]


def test_a_long_str_is_refused_before_it_is_copied():
    at_limit = import_error(valid(typestr="<" + "f" * 255))
    assert isinstance(at_limit, ValueError)
    assert "['typestr']" in str(at_limit) and "longer than" not in str(at_limit)
    beyond = import_error(valid(typestr="<" + "f" * 10**6))
    assert isinstance(beyond, ValueError)
    assert str(beyond) == (
        "__cuda_array_interface__['typestr']: a str of 1000001 characters, longer than 256 "
        "(type strings and field names are short)"
    )


def test_an_int_beyond_128_bits_is_named_as_such():
    error = import_error(valid(data=(2**200, False)))
    assert isinstance(error, ValueError)
    assert str(error) == "__cuda_array_interface__['data']: expected (pointer: int, read_only: bool)"
    error = import_error(valid(version=2**200))
    assert str(error) == "__cuda_array_interface__['version']: expected an int, found int beyond 128 bits"


def test_a_mask_whose_interface_is_not_a_dict_is_a_type_error_naming_it():
    class Mask:
        __cuda_array_interface__ = [("shape", (4,))]

    error = import_error(valid(mask=Mask()))
    assert isinstance(error, TypeError)
    assert str(error) == "__cuda_array_interface__['mask'].__cuda_array_interface__ must be a dict, got list"


def test_a_mask_dict_that_is_its_own_mask_is_refused_unread():
    mask = valid(typestr="|b1")
    mask["mask"] = mask
    error = import_error(valid(mask=mask))
    assert isinstance(error, TypeError)
    assert str(error) == "__cuda_array_interface__['mask']['mask']: a mask cannot have a mask of its own"


def test_an_iterator_that_raises_inside_an_entry_raises_its_own_error():
    class Failing(tuple):
        def __iter__(self):
            raise KeyError("no items")

    error = import_error(valid(shape=Failing()))
    assert isinstance(error, KeyError)
    assert error.args == ("no items",)


# ------------------------------------------------ DLPack: already bounded


DLPACK_ARGUMENTS = {
    "max_version-cycle": ("max_version=cycle", "TypeError"),
    "max_version-deep": ("max_version=deep", "TypeError"),
    "max_version-huge-int": ("max_version=(1, 10**100)", "OverflowError"),
    "dl_device-cycle": ("dl_device=cycle", "TypeError"),
    "dl_device-deep": ("dl_device=deep", "TypeError"),
    "copy-cycle": ("copy=cycle", "TypeError"),
    "stream-cycle": ("stream=cycle", "ValueError"),
    "stream-deep": ("stream=deep", "ValueError"),
    "stream-huge-int": ("stream=10**100", "ValueError"),
}


@pytest.mark.parametrize(
    "argument, error", DLPACK_ARGUMENTS.values(), ids=DLPACK_ARGUMENTS.keys()
)
def test_dlpack_keyword_arguments_that_recurse_are_refused_by_type(argument, error):
    """`max_version` and `dl_device` are read as 2-tuples of ints, `copy` as
    a bool and `stream` as an int: no walk, so nothing recurses (the
    message may show the argument's repr, which Python itself bounds)."""
    [line] = child_outcomes(
        f"""
        {HOSTILE}
        array = ad.array(pa.array([1, 2, 3]))
        outcome(lambda: array.__dlpack__({argument}))
        """
    )
    assert line.startswith(f"{error}: "), line
    if error == "ValueError":
        assert "stream must be None or -1 for device type CPU" in line


@pytest.mark.parametrize(
    "answer", ["cycle", "deep", "itertools.count()", "(1, 10**100)", "(1, 2, 3)"]
)
def test_a_dlpack_device_answer_that_is_not_a_pair_of_ints_is_a_type_error(answer):
    [line] = child_outcomes(
        f"""
        {HOSTILE}

        class Producer:
            def __dlpack__(self, **kwargs):
                raise AssertionError("never called")

            def __dlpack_device__(self):
                return {answer}

        outcome(lambda: ad.array(Producer()))
        """
    )
    assert line == (
        "TypeError: __dlpack_device__() must return (device_type: int, device_id: int)"
    )


# -------------------------------------- requested_schema: a capsule or None


@pytest.mark.parametrize("requested", ["cycle", "deep"])
def test_a_requested_schema_that_is_not_a_capsule_is_a_type_error(requested):
    """Only a PyCapsule named arrow_schema is read (its C struct's depth
    and cycles are bounded by the library's schema import)."""
    lines = child_outcomes(
        f"""
        {HOSTILE}
        array = ad.array(pa.array([1, 2, 3]))
        outcome(lambda: array.__arrow_c_array__({requested}))
        outcome(lambda: array.__arrow_c_device_array__({requested}))
        outcome(lambda: ad.stream([array]).__arrow_c_stream__({requested}))
        """
    )
    assert lines == ["TypeError: expected a PyCapsule named 'arrow_schema', got list"] * 3


# --------------------------------------------- stream(): read lazily


def endless_batches(pulled):
    """An endless generator of one-row record batches, counting its pulls."""
    import itertools

    for i in itertools.count():
        pulled.append(i)
        yield pa.record_batch([pa.array([i])], names=["x"])


def test_stream_of_an_endless_generator_reads_only_what_a_consumer_pulls():
    pulled = []
    stream = ad.stream(endless_batches(pulled))
    assert pulled == [0]  # the first batch gives the stream its type
    reader = pa.RecordBatchReader.from_stream(stream)
    assert pulled == [0]
    values = [reader.read_next_batch().column(0)[0].as_py() for _ in range(3)]
    assert values == [0, 1, 2]
    assert pulled == [0, 1, 2]


def test_an_endless_stream_is_handed_on_without_reading_ahead():
    pulled = []
    capsule = ad.stream(endless_batches(pulled)).__arrow_c_device_stream__()
    assert pulled == [0]
    del capsule


def test_a_source_failing_after_its_first_batch_raises_its_own_error():
    def failing():
        yield pa.record_batch([pa.array([1])], names=["x"])
        raise KeyError("no second batch")

    stream = ad.stream(failing())
    assert len(next(stream)) == 1
    with pytest.raises(KeyError, match="no second batch"):
        next(stream)

    reader = pa.RecordBatchReader.from_stream(ad.stream(failing()))
    reader.read_next_batch()
    with pytest.raises(OSError, match="KeyError: 'no second batch'"):
        reader.read_next_batch()


# ----------------------------------------- Python-owning objects at exit

# Each builds objects that own Python references (directly, or through a C
# struct a consumer holds) and returns them.
AT_EXIT = {
    "device-stream-capsule": "ad.stream([pa.array([1, 2, 3])]).__arrow_c_device_stream__()",
    "stream-capsule": "ad.stream([pa.array([1, 2, 3])]).__arrow_c_stream__()",
    "stream-capsule-of-a-requested-type": (
        "ad.stream([pa.array(['a'])]).__arrow_c_stream__(pa.large_string().__arrow_c_schema__())"
    ),
    "device-stream-capsule-on-the-emulated-device": (
        "ad.stream([ad.array(pa.array([1, 2])).to(ad.emulated(0))]).__arrow_c_device_stream__()"
    ),
    "stream-capsule-of-a-generator": "ad.stream(batches()).__arrow_c_stream__()",
    "stream-object-unread": "ad.stream([pa.array([1, 2, 3])])",
    "stream-object-partly-read": "read_one(ad.stream(batches()))",
    "stream-read-by-pyarrow": "read_one(pa.RecordBatchReader.from_stream(ad.stream(batches())))",
    "stream-whose-source-raised": "failed_reader()",
    "stream-of-a-stream": "ad.stream(ad.stream(batches())).__arrow_c_device_stream__()",
    "stream-of-a-pyarrow-reader": (
        "ad.stream(pa.RecordBatchReader.from_batches(pa.schema([('x', pa.int64())]), batches()))"
    ),
    "stream-capsule-of-numpy-backed-arrays": (
        "ad.stream([pa.array(__import__('numpy').arange(3))]).__arrow_c_stream__()"
    ),
    "stream-held-by-duckdb": (
        "__import__('duckdb').from_arrow(ad.stream([pa.record_batch([pa.array([1])], names=['x'])]))"
    ),
    "array-from-pyarrow": "ad.array(pa.array([1, 2, 3]))",
    "array-from-numpy-backed-pyarrow": "ad.array(pa.array(__import__('numpy').arange(3)))",
    "array-from-nanoarrow": "ad.array(__import__('nanoarrow').c_array([1, 2, 3], __import__('nanoarrow').int64()))",
    "array-from-numpy-by-dlpack": "ad.array(__import__('numpy').arange(3))",
    "array-on-the-emulated-device": "ad.array(pa.array([1, 2, 3])).to(ad.emulated(0))",
    "array-capsules": "ad.array(pa.array([1, 2, 3])).__arrow_c_array__()",
    "device-array-capsules": "ad.array(pa.array([1, 2, 3])).to(ad.emulated(0)).__arrow_c_device_array__()",
    "dlpack-capsule": "ad.array(pa.array([1, 2, 3])).__dlpack__()",
    "dlpack-versioned-capsule": "ad.array(pa.array([1, 2, 3])).__dlpack__(max_version=(1, 0))",
    "dlpack-capsule-of-a-numpy-import": "ad.array(__import__('numpy').arange(3)).__dlpack__()",
}

AT_EXIT_HELPERS = """
def batches():
    for i in itertools.count():
        yield pa.record_batch([pa.array([i])], names=["x"])

def read_one(reader):
    next(reader) if isinstance(reader, ad.DeviceStream) else reader.read_next_batch()
    return reader

def failed_reader():
    def failing():
        yield pa.record_batch([pa.array([1])], names=["x"])
        raise KeyError("no second batch")
    reader = pa.RecordBatchReader.from_stream(ad.stream(failing()))
    reader.read_next_batch()
    try:
        reader.read_next_batch()
    except OSError:
        pass
    return reader
"""

# Where the objects are when the interpreter exits.
PLACES = {
    # Cleared with the module's globals during finalization.
    "global": "kept = {make}",
    # A cycle reachable from a global: left to the collections at shutdown.
    "global-cycle": "kept = [{make}]\nkept.append(kept)",
    # An unreachable cycle with the collector off: only the last collection,
    # after finalization has begun, frees it.
    "unreachable-cycle": "gc.disable()\ncycle = [{make}]\ncycle.append(cycle)\ndel cycle",
}


@pytest.mark.parametrize("place", PLACES.keys())
@pytest.mark.parametrize("make", AT_EXIT.values(), ids=AT_EXIT.keys())
def test_objects_alive_at_exit_are_released_without_a_panic(make, place):
    proc = run_child(AT_EXIT_HELPERS + PLACES[place].format(make=make) + "\nprint('done')\n")
    assert proc.returncode == 0, describe(proc)
    assert proc.stderr == "", describe(proc)
    assert proc.stdout == "done\n", describe(proc)


def test_a_stream_read_during_shutdown_fails_with_an_error_not_a_panic():
    """A consumer that reads after finalization has begun (here a finalizer
    run by the last garbage collection) gets a stream error: the Python
    iterable is not touched then."""
    proc = run_child(
        AT_EXIT_HELPERS
        + """
class ReadsAtExit:
    def __del__(self):
        try:
            self.reader.read_next_batch()
        except Exception as e:
            print(f"{type(e).__name__}: {e}")

gc.disable()
holder = ReadsAtExit()
holder.reader = pa.RecordBatchReader.from_stream(ad.stream(batches()))
holder.reader.read_next_batch()
holder.cycle = holder
del holder
"""
    )
    assert proc.returncode == 0 and proc.stderr == "", describe(proc)
    assert proc.stdout.splitlines() == [
        # Batches are numbered from 0, as in the library's stream errors.
        "OSError: batch 1: the Python interpreter is shutting down, "
        "and the stream's Python iterable can no longer be read"
    ], describe(proc)


def test_a_stream_released_normally_still_drops_its_iterator_at_once():
    """The exit rule changes nothing while the interpreter runs: an
    unconsumed capsule's Python iterable goes when the capsule goes."""
    import weakref

    class Source:
        def __init__(self):
            self.items = iter([pa.array([1]), pa.array([2])])

        def __iter__(self):
            return self

        def __next__(self):
            return next(self.items)

    source = Source()
    alive = weakref.ref(source)
    capsule = ad.stream(source).__arrow_c_stream__()
    del source
    assert alive() is not None
    del capsule
    assert alive() is None

#!/usr/bin/env python3
"""Cost of one Arrow PyCapsule exchange: `arrow_device` against pyarrow and nanoarrow.

One run measures four cases (an int64 array, a string array with nulls, a
100-column record batch, a one-column record batch) and prints a Markdown
table of median microseconds per call, with the ratios ours / pyarrow and
ours / nanoarrow (below 1: ours is faster).

(a) import, consumer side. Each consumer takes the capsules of pyarrow's
    `__arrow_c_device_array__()`:

      ours       arrow_device.array(src)            (validate="default")
      pyarrow    imp(*src.__arrow_c_device_array__())
      nanoarrow  nanoarrow.device.c_device_array(src)

    `imp` is pyarrow's `pa.Array._import_from_c_device_capsule`
    (`pa.RecordBatch._...` for batches): the same protocol method and the
    same capsules for all three, no Python wrapper on top. nanoarrow's
    import checks the structs and keeps them as they are (its Python
    objects parse the schema lazily), so it does less than the other two.
    For reference, ours is also measured at validate="minimal" and "none".

(b) export, producer side, read by pyarrow: pyarrow importing ours
    (`imp(*ours.__arrow_c_device_array__())`) against pyarrow importing its
    own (the statement of (a)'s pyarrow side) and pyarrow importing
    nanoarrow's (`imp(*na.__arrow_c_device_array__())`), where `ours` is
    `arrow_device.array(src)` and `na` is `c_device_array(src)`, made once.

(c) export, read by nanoarrow: `c_device_array(ours)` against nanoarrow
    reading pyarrow's (the statement of (a)'s nanoarrow side).

Every call's result is dropped inside the timed loop, so releasing the
imported structs (the producer's release callbacks) is measured too, on all
sides. Before timing, each path's result is checked to equal the source.

Measurement: `timeit.Timer` over the statement itself (no lambda), inner
loops sized so one repeat takes at least --min-time seconds, a warm-up repeat,
then --repeats repeats per side, the sides of a case interleaved round-robin
(rotating the order) so that drift on a noisy machine hits all of them alike.
`timeit` switches the garbage collector off while timing, for every side. The
table shows medians only (per call, over the repeats) and their ratios.

Targets (issue 14): (a) ours/pyarrow <= 0.5, (b) ours/pyarrow <= 0.8.

(d) DLPack import, the C exchange table (DLPack 1.3,
    `type(x).__dlpack_c_exchange_api__`) against `__dlpack__`, for the same
    producer in the same run: `arrow_device.array(x)` of 1000 int64 values
    on the CPU, each path forced by a wrapper type around one
    `arrow_device.DeviceArray` (`array()` takes a DeviceArray as it is):

      table      `ViaTable(ours)`: its type's table is DeviceArray's own,
                 except `managed_tensor_from_py_object_no_sync`, a ctypes
                 callback that unwraps the array and calls DeviceArray's
                 (one Python-level hop a native producer does not have)
      __dlpack__ `ViaDlpack(ours)`: no table; `__dlpack__` and
                 `__dlpack_device__` are the DeviceArray's bound methods
                 (no Python frame)

    The ctypes hop is also timed alone, as a reference (`hop`: the
    callback called through ctypes, the producer's function answering an
    error at once). Where PyTorch is importable, a torch CPU tensor is
    measured too: its table is native (`array(t)`) against its
    `__dlpack__` (`array(ViaDlpack(t))`).

Usage: scripts/bench-python.py [--quick] [--json PATH] [--repeats N] [--min-time S]
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import importlib.metadata
import json
import platform
import statistics
import sys
import timeit
from dataclasses import dataclass, field
from typing import Any

import nanoarrow.device as nad
import pyarrow as pa

import arrow_device

# --------------------------------------------------------------------------
# Cases


def int64_array(n: int = 1000) -> pa.Array:
    return pa.array([None if i % 17 == 0 else i * 7 for i in range(n)], type=pa.int64())


def string_array(n: int = 1000) -> pa.Array:
    return pa.array([None if i % 10 == 0 else f"s{i % 97}-{i}" for i in range(n)], type=pa.utf8())


def record_batch(columns: int = 100, rows: int = 1000) -> pa.RecordBatch:
    arrays = {}
    for c in range(columns):
        kind = c % 3
        if kind == 0:
            arrays[f"i{c}"] = pa.array(
                [None if (r + c) % 13 == 0 else r * c for r in range(rows)], type=pa.int64()
            )
        elif kind == 1:
            arrays[f"f{c}"] = pa.array(
                [None if (r + c) % 11 == 0 else r / (c + 1) for r in range(rows)], type=pa.float64()
            )
        else:
            arrays[f"s{c}"] = pa.array(
                [None if (r + c) % 7 == 0 else f"v{r % 50}" for r in range(rows)], type=pa.utf8()
            )
    return pa.record_batch(arrays)


@dataclass
class Case:
    name: str
    src: Any
    importer: Any  # pyarrow's _import_from_c_device_capsule for the kind
    is_batch: bool


def cases() -> list[Case]:
    return [
        Case("int64, 1000 values", int64_array(), pa.Array._import_from_c_device_capsule, False),
        Case("utf8, 1000 short strings", string_array(), pa.Array._import_from_c_device_capsule, False),
        Case(
            "record batch, 100 columns × 1000 rows",
            record_batch(),
            pa.RecordBatch._import_from_c_device_capsule,
            True,
        ),
        Case(
            "record batch, 1 column × 1000 rows",
            record_batch(columns=1),
            pa.RecordBatch._import_from_c_device_capsule,
            True,
        ),
    ]


# --------------------------------------------------------------------------
# Sides

# (key, label, statement). pyarrow's own exchange is the baseline of (a) and
# (b); nanoarrow reading pyarrow's is the nanoarrow side of (a) and the
# baseline of (c).
PYARROW = "pyarrow"
NANOARROW = "nanoarrow"
IMPORT = "import"
IMPORT_MINIMAL = "import-minimal"
IMPORT_NONE = "import-none"
EXPORT = "export"
PYARROW_READS_NANOARROW = "pyarrow-reads-nanoarrow"
NANOARROW_READS_OURS = "nanoarrow-reads-ours"

SIDES = [
    (IMPORT, "arrow_device.array(src)", "array(src)"),
    (IMPORT_MINIMAL, "arrow_device.array(src, validate='minimal')", "array(src, validate='minimal')"),
    (IMPORT_NONE, "arrow_device.array(src, validate='none')", "array(src, validate='none')"),
    (EXPORT, "imp(*ours.__arrow_c_device_array__())", "imp(*ours.__arrow_c_device_array__())"),
    (PYARROW, "imp(*src.__arrow_c_device_array__())", "imp(*src.__arrow_c_device_array__())"),
    (NANOARROW, "c_device_array(src)", "c_device_array(src)"),
    (PYARROW_READS_NANOARROW, "imp(*na.__arrow_c_device_array__())", "imp(*na.__arrow_c_device_array__())"),
    (NANOARROW_READS_OURS, "c_device_array(ours)", "c_device_array(ours)"),
]


def to_pyarrow(case: Case, obj: Any) -> Any:
    """`obj` (anything with `__arrow_c_device_array__`) as pyarrow data."""
    return case.importer(*obj.__arrow_c_device_array__())


def check_equal(case: Case) -> None:
    """Every timed path gives the source's data back, before anything is timed."""
    src = case.src
    assert to_pyarrow(case, src).equals(src), f"{case.name}: pyarrow's own round trip differs"
    for level in ("default", "minimal", "none"):
        ours = arrow_device.array(src, validate=level)
        assert len(ours) == len(src), f"{case.name}: length differs at validate={level!r}"
        # Back through the generic entry points too, not only the one timed.
        back = pa.record_batch(ours) if case.is_batch else pa.array(ours)
        assert back.equals(src), f"{case.name}: arrow_device.array(src, validate={level!r}) differs"
        assert to_pyarrow(case, ours).equals(src), f"{case.name}: pyarrow importing ours differs"
    if case.is_batch:
        assert to_pyarrow(case, arrow_device.array(src)).schema.equals(src.schema, check_metadata=True)
    # nanoarrow, both ways.
    assert to_pyarrow(case, nad.c_device_array(src)).equals(src), f"{case.name}: nanoarrow reading pyarrow's differs"
    ours_in_nanoarrow = nad.c_device_array(arrow_device.array(src))
    assert to_pyarrow(case, ours_in_nanoarrow).equals(src), f"{case.name}: nanoarrow reading ours differs"


@dataclass
class Side:
    key: str
    label: str
    timer: timeit.Timer
    number: int = 0
    per_call: list[float] = field(default_factory=list)

    @property
    def median(self) -> float:
        return statistics.median(self.per_call)


def calibrate(timer: timeit.Timer, min_time: float) -> int:
    """Loops per repeat so that one repeat takes at least `min_time`
    (timeit's autorange with another target)."""
    number = 1
    while True:
        if timer.timeit(number) >= min_time:
            return number
        number *= 2 if number < 8 else 4


def measure_case(case: Case, repeats: int, min_time: float) -> dict[str, Side]:
    namespace = {
        "array": arrow_device.array,
        "imp": case.importer,
        "c_device_array": nad.c_device_array,
        "src": case.src,
        "ours": arrow_device.array(case.src),
        "na": nad.c_device_array(case.src),
    }
    return measure(SIDES, namespace, repeats, min_time)


def measure(statements: list[tuple[str, str, str]], namespace: dict[str, Any], repeats: int, min_time: float) -> dict[str, Side]:
    """Each (key, label, statement) timed over `namespace`: calibrated,
    warmed up, then `repeats` round-robin repeats."""
    sides = [Side(key, label, timeit.Timer(stmt, globals=namespace)) for key, label, stmt in statements]
    gc.collect()
    for side in sides:
        side.number = calibrate(side.timer, min_time)
        side.timer.timeit(side.number)  # warm-up
    for r in range(repeats):
        # Round-robin, rotating which side goes first.
        shift = r % len(sides)
        for side in sides[shift:] + sides[:shift]:
            side.per_call.append(side.timer.timeit(side.number) / side.number)
    return {side.key: side for side in sides}


# --------------------------------------------------------------------------
# (d) DLPack: the C exchange table against __dlpack__


class ExchangeAPI(ctypes.Structure):
    """dlpack.h 1.3's `DLPackExchangeAPI`, its header flattened."""

    _fields_ = [
        ("major", ctypes.c_uint32),
        ("minor", ctypes.c_uint32),
        ("prev_api", ctypes.c_void_p),
        ("managed_tensor_allocator", ctypes.c_void_p),
        ("managed_tensor_from_py_object_no_sync", ctypes.c_void_p),
        ("managed_tensor_to_py_object_no_sync", ctypes.c_void_p),
        ("dltensor_from_py_object_no_sync", ctypes.c_void_p),
        ("current_work_stream", ctypes.c_void_p),
    ]


EXCHANGE_API = b"dlpack_exchange_api"
_GET_POINTER = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi)
)
_NEW_CAPSULE = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p)(
    ("PyCapsule_New", ctypes.pythonapi)
)
OURS = ExchangeAPI.from_address(_GET_POINTER(arrow_device.DeviceArray.__dlpack_c_exchange_api__, EXCHANGE_API))
# Called with the GIL held, as dlpack.h says.
_FROM_PY_OBJECT = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.POINTER(ctypes.c_void_p))
_OUR_FROM_PY_OBJECT = _FROM_PY_OBJECT(OURS.managed_tensor_from_py_object_no_sync)
_FORWARD_TYPE = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p))


def _forward(address: int, out: Any) -> int:
    via = ctypes.cast(ctypes.c_void_p(address), ctypes.py_object).value
    via.table_calls += 1
    try:
        return _OUR_FROM_PY_OBJECT(via.array, out)
    except Exception:  # raised from the exception ours set: report it as failed
        return -1


_FORWARD = _FORWARD_TYPE(_forward)
_OUR_CURRENT_WORK_STREAM = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_int32, ctypes.c_int32, ctypes.POINTER(ctypes.c_void_p))(
    OURS.current_work_stream
)


def _hop(address: int, out: Any) -> int:
    """`_forward`'s shape with a native call that does nothing (our
    `current_work_stream` of the CPU): the cost of the hop itself."""
    via = ctypes.cast(ctypes.c_void_p(address), ctypes.py_object).value
    via.table_calls += 1
    return _OUR_CURRENT_WORK_STREAM(1, 0, out)


_HOP = _FORWARD_TYPE(_hop)
_SHIM = ExchangeAPI(
    1, 3, None,
    OURS.managed_tensor_allocator,
    ctypes.cast(_FORWARD, ctypes.c_void_p).value,
    OURS.managed_tensor_to_py_object_no_sync,
    None,
    OURS.current_work_stream,
)


class ViaTable:
    """An `arrow_device` array whose type's exchange table forwards to
    DeviceArray's (the ctypes hop above); `__dlpack__` counts its calls."""

    __dlpack_c_exchange_api__ = _NEW_CAPSULE(ctypes.addressof(_SHIM), EXCHANGE_API, None)

    def __init__(self, array: Any):
        self.array = array
        self.table_calls = 0
        self.dlpack_calls = 0

    def __dlpack__(self, **kwargs: Any) -> Any:
        self.dlpack_calls += 1
        return self.array.__dlpack__(**kwargs)

    def __dlpack_device__(self) -> Any:
        return self.array.__dlpack_device__()


class ViaDlpack:
    """A producer's DLPack methods without its type's table: the bound
    methods themselves, so no Python frame is added."""

    def __init__(self, producer: Any):
        self.__dlpack__ = producer.__dlpack__
        self.__dlpack_device__ = producer.__dlpack_device__


class CountingDlpack(ViaDlpack):
    def __init__(self, producer: Any):
        super().__init__(producer)
        self.calls = 0
        inner = self.__dlpack__

        def counted(**kwargs: Any) -> Any:
            self.calls += 1
            return inner(**kwargs)

        self.__dlpack__ = counted


TABLE = "table"
DLPACK = "dlpack"
HOP = "hop"
DLPACK_SIDES = [
    (TABLE, "arrow_device.array(via_table)", "array(via_table)"),
    (DLPACK, "arrow_device.array(via_dlpack)", "array(via_dlpack)"),
    (HOP, "hop(via_table_address, slot) (the ctypes hop alone)", "hop(via_table_address, slot)"),
]


@dataclass
class DlpackCase:
    name: str
    sides: dict[str, Side]


def dlpack_source() -> pa.Array:
    return pa.array(range(1000), type=pa.int64())


def check_dlpack_paths(source: pa.Array) -> None:
    """Each wrapper takes the path it is named after, with the source's values."""
    ours = arrow_device.array(source)
    via_table = ViaTable(ours)
    got = pa.array(arrow_device.array(via_table))
    assert got.equals(source), "the table path differs from the source"
    assert (via_table.table_calls, via_table.dlpack_calls) == (1, 0), "the table was not used"
    assert got.buffers()[1].address == source.buffers()[1].address, "the table path copied"
    counting = CountingDlpack(ours)
    assert pa.array(arrow_device.array(counting)).equals(source), "the __dlpack__ path differs"
    assert counting.calls == 1, "__dlpack__ was not used"
    slot = ctypes.c_void_p(1)
    assert _HOP(id(via_table), ctypes.byref(slot)) == 0 and slot.value is None


def measure_dlpack(repeats: int, min_time: float) -> list[DlpackCase]:
    source = dlpack_source()
    check_dlpack_paths(source)
    ours = arrow_device.array(source)
    via_table = ViaTable(ours)
    namespace = {
        "array": arrow_device.array,
        "via_table": via_table,
        "via_dlpack": ViaDlpack(ours),
        "hop": _HOP,
        "via_table_address": id(via_table),
        "slot": ctypes.byref(ctypes.c_void_p()),
    }
    cases = [DlpackCase("arrow_device DeviceArray, int64 × 1000 (CPU)", measure(DLPACK_SIDES, namespace, repeats, min_time))]
    torch_case = measure_torch(source, repeats, min_time)
    if torch_case is not None:
        cases.append(torch_case)
    return cases


def measure_torch(source: pa.Array, repeats: int, min_time: float) -> DlpackCase | None:
    """A torch CPU tensor: its native table against its `__dlpack__`;
    `None` when torch is not importable or publishes no table."""
    try:
        import torch
    except ImportError:
        return None
    if not hasattr(torch.Tensor, "__dlpack_c_exchange_api__"):
        return None
    tensor = torch.arange(1000, dtype=torch.int64)

    class Counting(torch.Tensor):
        calls = 0

        def __dlpack__(self, *args: Any, **kwargs: Any) -> Any:
            Counting.calls += 1
            return super().__dlpack__(*args, **kwargs)

    assert pa.array(arrow_device.array(tensor.as_subclass(Counting))).equals(source)
    assert Counting.calls == 0, "torch's table was not used"
    counting = CountingDlpack(tensor)
    assert pa.array(arrow_device.array(counting)).equals(source) and counting.calls == 1
    namespace = {"array": arrow_device.array, "via_table": tensor, "via_dlpack": ViaDlpack(tensor)}
    statements = [
        (TABLE, "arrow_device.array(t)", "array(via_table)"),
        (DLPACK, "arrow_device.array(ViaDlpack(t))", "array(via_dlpack)"),
    ]
    return DlpackCase(f"torch {torch.__version__} Tensor, int64 × 1000 (CPU)", measure(statements, namespace, repeats, min_time))


def dlpack_table(cases: list[DlpackCase]) -> list[str]:
    lines = [
        "| producer | table (µs) | `__dlpack__` (µs) | table/`__dlpack__` | ctypes hop (µs, ref.) |",
        "|---|---:|---:|---:|---:|",
    ]
    for case in cases:
        table, dlpack = case.sides[TABLE].median, case.sides[DLPACK].median
        hop = us(case.sides[HOP].median) if HOP in case.sides else "–"
        lines.append(f"| {case.name} | {us(table)} | {us(dlpack)} | {table / dlpack:.2f}× | {hop} |")
    return lines


# --------------------------------------------------------------------------
# Report


def us(seconds: float) -> str:
    value = seconds * 1e6
    return f"{value:.3g}" if value < 100 else f"{value:.0f}"


# (label, ours, pyarrow side, nanoarrow side, target on ours/pyarrow or None)
ROWS = [
    ("(a) import", IMPORT, PYARROW, NANOARROW, 0.5),
    ("(a) import, ours at `validate=\"minimal\"` (ref.)", IMPORT_MINIMAL, PYARROW, NANOARROW, None),
    ("(a) import, ours at `validate=\"none\"` (ref.)", IMPORT_NONE, PYARROW, NANOARROW, None),
    ("(b) export, read by pyarrow", EXPORT, PYARROW, PYARROW_READS_NANOARROW, 0.8),
    ("(c) export, read by nanoarrow", NANOARROW_READS_OURS, NANOARROW, None, None),
]


def table(results: list[tuple[Case, dict[str, Side]]]) -> tuple[list[str], bool]:
    lines = [
        "| case | comparison | ours (µs) | pyarrow (µs) | ours/pyarrow | nanoarrow (µs) | ours/nanoarrow |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    targets_met = True
    for case, sides in results:
        for label, key, pyarrow_key, nanoarrow_key, target in ROWS:
            ours = sides[key].median
            pyarrow = sides[pyarrow_key].median
            ratio = ours / pyarrow
            missed = target is not None and ratio > target
            targets_met &= not missed
            mark = " ⚠" if missed else ""
            if nanoarrow_key is None:
                na_cells = "– | –"
            else:
                nanoarrow = sides[nanoarrow_key].median
                na_cells = f"{us(nanoarrow)} | {ours / nanoarrow:.2f}×"
            lines.append(
                f"| {case.name} | {label} | {us(ours)} | {us(pyarrow)} | {ratio:.2f}×{mark} | {na_cells} |"
            )
    return lines, targets_met


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a fast smoke run (3 repeats, short loops); numbers are not meaningful")
    parser.add_argument("--json", metavar="PATH", help="also write the raw numbers to PATH as JSON")
    parser.add_argument("--repeats", type=int, default=None, help="repeats per side (default 21; 3 with --quick)")
    parser.add_argument("--min-time", type=float, default=None, help="seconds per repeat (default 0.1; 0.002 with --quick)")
    args = parser.parse_args(argv)
    repeats = args.repeats or (3 if args.quick else 21)
    min_time = args.min_time or (0.002 if args.quick else 0.1)

    selected = cases()
    for case in selected:
        check_equal(case)
    results = [(case, measure_case(case, repeats, min_time)) for case in selected]
    dlpack_cases = measure_dlpack(repeats, min_time)

    try:
        version = importlib.metadata.version("arrow_device")
    except importlib.metadata.PackageNotFoundError:
        version = getattr(arrow_device, "__version__", None)
    print("# Arrow PyCapsule exchange: arrow_device vs pyarrow and nanoarrow")
    print()
    print(f"- Python {platform.python_version()} ({platform.python_implementation()}), "
          f"pyarrow {pa.__version__}, nanoarrow {importlib.metadata.version('nanoarrow')}, arrow_device{' ' + version if version else ''} "
          f"({arrow_device._arrow_device.__file__.rsplit('/', 1)[-1]}), {platform.machine()} {platform.system()}")
    print(f"- median per call over {repeats} repeats of ≥{min_time:g} s each (sides interleaved; "
          f"gc off while timing, as `timeit` does, on both sides){'; --quick: smoke run, not a measurement' if args.quick else ''}")
    print("- (a) import: ours `arrow_device.array(src)`, pyarrow "
          "`_import_from_c_device_capsule(*src.__arrow_c_device_array__())` "
          "(`pa.Array`, `pa.RecordBatch` for batches), nanoarrow `nanoarrow.device.c_device_array(src)`: "
          "all consume pyarrow's device capsules")
    print("- (b) export read by pyarrow: `_import_from_c_device_capsule(*x.__arrow_c_device_array__())` "
          "for x = ours, pyarrow's own (the (a) statement), nanoarrow's")
    print("- (c) export read by nanoarrow: `c_device_array(ours)` vs `c_device_array(src)` (pyarrow's)")
    print("- cases: int64 (1000 values, 6% nulls); utf8 (1000 short strings, 10% nulls); "
          "record batches of 100 and of 1 columns (cycling int64/float64/utf8, 1000 rows, with nulls)")
    print("- the `validate=` reference rows pass a keyword argument, which by itself adds a fixed "
          "cost per call (keyword parsing of the abi3 extension): compare them with each other "
          "to see what validation costs, not with the (a) row")
    print("- targets (issue 14): (a) ours/pyarrow ≤ 0.50×, (b) ours/pyarrow ≤ 0.80×; ⚠ marks a row above its target")
    print()
    lines, target_met = table(results)
    print("\n".join(lines))
    print()
    print(f"targets ((a) ≤ 0.50×, (b) ≤ 0.80× ours/pyarrow): {'met' if target_met else 'NOT met (⚠ rows)'}")
    print()
    print("## (d) DLPack import: the C exchange table vs `__dlpack__`")
    print()
    print("- `arrow_device.array(x)`, median per call, both paths in the same run, sides interleaved as above")
    print("- DeviceArray: table = `ViaTable(ours)`, whose table forwards to DeviceArray's through one ctypes "
          "callback (the last column times that hop alone, called through ctypes from Python: about what a native producer's table saves); "
          "`__dlpack__` = `ViaDlpack(ours)`, DeviceArray's bound `__dlpack__`/`__dlpack_device__`")
    print("- torch (when importable): table = `array(t)` (torch's native table), `__dlpack__` = `array(ViaDlpack(t))`")
    print()
    print("\n".join(dlpack_table(dlpack_cases)))

    if args.json:
        raw = {
            "python": platform.python_version(),
            "implementation": platform.python_implementation(),
            "pyarrow": pa.__version__,
            "arrow_device": version,
            "machine": platform.machine(),
            "quick": args.quick,
            "repeats": repeats,
            "min_time_s": min_time,
            "target_met": target_met,
            "cases": [
                {
                    "case": case.name,
                    "sides": {
                        key: {
                            "statement": side.label,
                            "loops_per_repeat": side.number,
                            "per_call_s": side.per_call,
                            "median_s": side.median,
                        }
                        for key, side in sides.items()
                    },
                    "ratios": {
                        key: sides[key].median / sides[pyarrow_key].median
                        for _, key, pyarrow_key, _, _ in ROWS
                    },
                }
                for case, sides in results
            ],
            "dlpack_exchange": [
                {
                    "producer": case.name,
                    "sides": {
                        key: {
                            "statement": side.label,
                            "loops_per_repeat": side.number,
                            "per_call_s": side.per_call,
                            "median_s": side.median,
                        }
                        for key, side in case.sides.items()
                    },
                    "table_over_dlpack": case.sides[TABLE].median / case.sides[DLPACK].median,
                }
                for case in dlpack_cases
            ],
        }
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump(raw, out, indent=2)
            out.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

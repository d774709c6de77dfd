#!/usr/bin/env python3
"""Cost of one Arrow PyCapsule exchange: `arrow_device` against pyarrow itself.

One run measures three cases (an int64 array, a string array with nulls, a
100-column record batch) in two directions, and prints a Markdown table of
median microseconds per call and the ratio ours / pyarrow (below 1: ours is
faster; the target is at most 1.0 everywhere).

(a) import, consumer side. Both sides call the producer's (pyarrow's)
    `__arrow_c_device_array__()` and import the two capsules it returns:

      ours     arrow_device.array(src)
               (calls src.__arrow_c_device_array__() itself; validate="default")
      pyarrow  pa.Array._import_from_c_device_capsule(*src.__arrow_c_device_array__())
               (pa.RecordBatch._import_from_c_device_capsule for the batch)

    Same protocol method, same capsules, no Python wrapper on either side:
    pyarrow's `pa.array(obj)` would add its own type dispatch on top, and
    `__arrow_c_array__` is a different (non-device) method. For reference,
    ours is also measured at validate="minimal" and "none".

(b) export, producer side: pyarrow imports ours vs pyarrow imports its own.

      ours     imp(*ours.__arrow_c_device_array__())
      pyarrow  imp(*src.__arrow_c_device_array__())

    where `imp` is the `_import_from_c_device_capsule` above and `ours` is
    `arrow_device.array(src)`, made once. The pyarrow side is the statement
    of (a)'s pyarrow side, so it is measured once per case and used in both.

Every call's result is dropped inside the timed loop, so releasing the
imported structs (the producer's release callbacks) is measured too, on both
sides. Before timing, each path's result is checked to equal the source.

Measurement: `timeit.Timer` over the statement itself (no lambda), inner
loops sized so one repeat takes at least --min-time seconds, a warm-up repeat,
then --repeats repeats per side, the sides of a case interleaved round-robin
(rotating the order) so that drift on a noisy machine hits all of them alike.
`timeit` switches the garbage collector off while timing, for every side. The
table shows medians only (per call, over the repeats) and their ratio.

Usage: scripts/bench-python.py [--quick] [--json PATH] [--repeats N] [--min-time S]
"""

from __future__ import annotations

import argparse
import gc
import importlib.metadata
import json
import platform
import statistics
import sys
import timeit
from dataclasses import dataclass, field
from typing import Any

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
    ]


# --------------------------------------------------------------------------
# Sides

# (key, label, statement). The pyarrow baseline is shared by (a) and (b).
PYARROW = "pyarrow"
IMPORT = "import"
IMPORT_MINIMAL = "import-minimal"
IMPORT_NONE = "import-none"
EXPORT = "export"

SIDES = [
    (IMPORT, "arrow_device.array(src)", "array(src)"),
    (IMPORT_MINIMAL, "arrow_device.array(src, validate='minimal')", "array(src, validate='minimal')"),
    (IMPORT_NONE, "arrow_device.array(src, validate='none')", "array(src, validate='none')"),
    (EXPORT, "imp(*ours.__arrow_c_device_array__())", "imp(*ours.__arrow_c_device_array__())"),
    (PYARROW, "imp(*src.__arrow_c_device_array__())", "imp(*src.__arrow_c_device_array__())"),
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
        "src": case.src,
        "ours": arrow_device.array(case.src),
    }
    sides = [Side(key, label, timeit.Timer(stmt, globals=namespace)) for key, label, stmt in SIDES]
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
# Report


def us(seconds: float) -> str:
    value = seconds * 1e6
    return f"{value:.3g}" if value < 100 else f"{value:.0f}"


ROWS = [
    ("(a) import", IMPORT, True),
    ("(a) import, ours at `validate=\"minimal\"` (ref.)", IMPORT_MINIMAL, False),
    ("(a) import, ours at `validate=\"none\"` (ref.)", IMPORT_NONE, False),
    ("(b) export", EXPORT, True),
]


def table(results: list[tuple[Case, dict[str, Side]]]) -> tuple[list[str], bool]:
    lines = [
        "| case | comparison | ours (µs) | pyarrow (µs) | ours/pyarrow |",
        "|---|---|---:|---:|---:|",
    ]
    target_met = True
    for case, sides in results:
        baseline = sides[PYARROW].median
        for label, key, counts in ROWS:
            ours = sides[key].median
            ratio = ours / baseline
            if counts and ratio > 1.0:
                target_met = False
            mark = " ⚠" if counts and ratio > 1.0 else ""
            lines.append(f"| {case.name} | {label} | {us(ours)} | {us(baseline)} | {ratio:.2f}×{mark} |")
    return lines, target_met


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

    try:
        version = importlib.metadata.version("arrow_device")
    except importlib.metadata.PackageNotFoundError:
        version = getattr(arrow_device, "__version__", None)
    print("# Arrow PyCapsule exchange: arrow_device vs pyarrow")
    print()
    print(f"- Python {platform.python_version()} ({platform.python_implementation()}), "
          f"pyarrow {pa.__version__}, arrow_device{' ' + version if version else ''} "
          f"({arrow_device._arrow_device.__file__.rsplit('/', 1)[-1]}), {platform.machine()} {platform.system()}")
    print(f"- median per call over {repeats} repeats of ≥{min_time:g} s each (sides interleaved; "
          f"gc off while timing, as `timeit` does, on both sides){'; --quick: smoke run, not a measurement' if args.quick else ''}")
    print("- (a) import: ours `arrow_device.array(src)` vs pyarrow "
          "`_import_from_c_device_capsule(*src.__arrow_c_device_array__())` "
          "(`pa.Array`, `pa.RecordBatch` for the batch): both consume pyarrow's device capsules")
    print("- (b) export: pyarrow importing ours, `_import_from_c_device_capsule(*ours.__arrow_c_device_array__())`, "
          "vs pyarrow importing its own (same statement as (a)'s pyarrow side)")
    print("- cases: int64 (1000 values, 6% nulls); utf8 (1000 short strings, 10% nulls); "
          "record batch (100 columns cycling int64/float64/utf8, 1000 rows, with nulls)")
    print("- the `validate=` reference rows pass a keyword argument, which by itself adds a fixed "
          "cost per call (keyword parsing of the abi3 extension): compare them with each other "
          "to see what validation costs, not with the (a) row")
    print("- ratio ours/pyarrow: below 1.00× ours is faster; target ≤ 1.00× on every (a)/(b) row "
          "(the `validate` rows are for reference)")
    print()
    lines, target_met = table(results)
    print("\n".join(lines))
    print()
    print(f"target (ours/pyarrow ≤ 1.00× on every (a) and (b) row): {'met' if target_met else 'NOT met (⚠ rows)'}")

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
                    "ratios": {key: sides[key].median / sides[PYARROW].median for _, key, _ in ROWS},
                }
                for case, sides in results
            ],
        }
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump(raw, out, indent=2)
            out.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

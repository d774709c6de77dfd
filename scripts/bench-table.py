#!/usr/bin/env python3
"""Markdown table of the FFI round-trip benchmarks: arrow-device against arrow-rs.

Reads criterion's `<criterion dir>/<group>/<function>/new/estimates.json`
(median point estimates) as written by

    cargo bench -p arrow-device --bench ffi --bench stream

and prints one row per group (benchmark case) that has an `arrow-rs` and an
`arrow-device` function, in three tables: round trips (with the export and
import halves alone where measured), streams (per batch), and scaling (the
`scale_*` groups, whose throughput is the tree's node count: per tree and
per node). The ratio is arrow-device / arrow-rs: below 1 means
arrow-device is faster. The lower validation levels (`arrow-device-minimal`,
`arrow-device-none`) and the async stream (`arrow-device-async`), where
measured, get a ratio column each. Groups measured with a throughput of N
elements (the stream benchmarks: N batches per iteration) are shown per
element, i.e. per batch.

Usage: scripts/bench-table.py [CRITERION_DIR]   (default: target/criterion
under the repository root, or $CARGO_TARGET_DIR/criterion when that is set)
"""

import json
import os
import sys
from pathlib import Path

BASELINE = "arrow-rs"
OURS = "arrow-device"
REFERENCE = [
    ("at `minimal`", "arrow-device-minimal"),
    ("at `none`", "arrow-device-none"),
    ("async", "arrow-device-async"),
]


def default_dir() -> Path:
    target = os.environ.get("CARGO_TARGET_DIR")
    if target:
        return Path(target) / "criterion"
    return Path(__file__).resolve().parent.parent / "target" / "criterion"


def load(criterion_dir: Path) -> dict:
    """{group: {function: (median ns, mtime)}} from every benchmark.json."""
    results: dict = {}
    for meta_path in criterion_dir.glob("*/*/new/benchmark.json"):
        meta = json.loads(meta_path.read_text())
        estimates = json.loads((meta_path.parent / "estimates.json").read_text())
        median = estimates["median"]["point_estimate"]
        # Groups with a throughput of N elements (the stream benchmarks: N
        # batches per iteration) are shown per element.
        elements = (meta.get("throughput") or {}).get("Elements")
        if elements:
            median /= elements
        group = results.setdefault(meta["group_id"], {})
        group[meta["function_id"]] = (median, meta_path.stat().st_mtime)
    return results


def fmt_time(ns: float) -> str:
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("µs", 1e3)):
        if ns >= scale:
            return f"{ns / scale:.3g} {unit}" if ns / scale < 100 else f"{ns / scale:.0f} {unit}"
    return f"{ns:.3g} ns" if ns < 100 else f"{ns:.0f} ns"


def ratio(functions: dict, ours: str, base: str) -> str:
    if ours in functions and base in functions:
        return f"{functions[ours][0] / functions[base][0]:.2f}×"
    return "–"


def round_trip_table(results: dict, cases: list) -> None:
    extra = [(label, fn) for label, fn in REFERENCE if any(fn in results[g] for g in cases)]
    halves = any(f"{OURS}-export" in results[g] for g in cases)
    header = ["case", f"{BASELINE} median", f"{OURS} median", "ratio (ours/arrow-rs)"]
    header += [f"ratio {label}" for label, _ in extra]
    if halves:
        header += ["export alone", "import alone"]
    print("| " + " | ".join(header) + " |")
    print("|" + "|".join(["---"] + ["---:"] * (len(header) - 1)) + "|")
    for case in cases:
        functions = results[case]
        base = functions[BASELINE][0]
        ours = functions[OURS][0]
        row = [case, fmt_time(base), fmt_time(ours), f"{ours / base:.2f}×"]
        for _, fn in extra:
            row.append(f"{functions[fn][0] / base:.2f}×" if fn in functions else "–")
        if halves:
            for half in ("export", "import"):
                row.append(ratio(functions, f"{OURS}-{half}", f"{BASELINE}-{half}"))
        print("| " + " | ".join(row) + " |")


def scaling_table(results: dict, cases: list, nodes: dict) -> None:
    print("| case | nodes | arrow-rs median | arrow-device median | ratio | "
          "arrow-rs per node | arrow-device per node |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for case in cases:
        functions = results[case]
        base, ours = functions[BASELINE][0], functions[OURS][0]
        n = nodes[case]
        print(f"| {case.removeprefix('scale_')} | {n} | {fmt_time(base * n)} | {fmt_time(ours * n)} | "
              f"{ours / base:.2f}× | {fmt_time(base)} | {fmt_time(ours)} |")


def main() -> int:
    criterion_dir = Path(sys.argv[1]) if len(sys.argv) > 1 else default_dir()
    if not criterion_dir.is_dir():
        print(f"no criterion results in {criterion_dir}: run `cargo bench -p arrow-device --bench ffi` first",
              file=sys.stderr)
        return 1
    results = load(criterion_dir)
    cases = [g for g, f in results.items() if BASELINE in f and OURS in f]
    if not cases:
        print(f"no group in {criterion_dir} has both `{BASELINE}` and `{OURS}`", file=sys.stderr)
        return 1
    # Run order (the order the bench files list the cases in).
    cases.sort(key=lambda g: results[g][BASELINE][1])
    nodes = {}
    for meta_path in criterion_dir.glob("scale_*/*/new/benchmark.json"):
        meta = json.loads(meta_path.read_text())
        nodes[meta["group_id"]] = (meta.get("throughput") or {}).get("Elements", 1)
    scaling = [g for g in cases if g.startswith("scale_")]
    streams = [g for g in cases if g.startswith("stream_")]
    trips = [g for g in cases if g not in scaling and g not in streams]
    for title, group in (("Round trips", trips), ("Streams (per batch)", streams)):
        if group:
            print(f"\n{title}:\n")
            round_trip_table(results, group)
    if scaling:
        print("\nScaling (round trips at `default`; medians per tree and per node):\n")
        scaling_table(results, scaling, nodes)
    return 0


if __name__ == "__main__":
    sys.exit(main())

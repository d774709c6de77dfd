#!/usr/bin/env python3
"""Markdown table of the FFI round-trip benchmarks: arrow-device against arrow-rs.

Reads criterion's `<criterion dir>/<group>/<function>/new/estimates.json`
(median point estimates) as written by

    cargo bench -p arrow-device --bench ffi --bench stream

and prints one row per group (benchmark case) that has an `arrow-rs` and an
`arrow-device` function. The ratio is arrow-device / arrow-rs: below 1 means
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
    # Run order (the order the bench file lists the cases in).
    cases.sort(key=lambda g: results[g][BASELINE][1])
    extra = [(label, fn) for label, fn in REFERENCE if any(fn in results[g] for g in cases)]

    header = ["case", f"{BASELINE} median", f"{OURS} median", "ratio (ours/arrow-rs)"]
    header += [f"ratio {label}" for label, _ in extra]
    print("| " + " | ".join(header) + " |")
    print("|" + "|".join(["---"] + ["---:"] * (len(header) - 1)) + "|")
    for case in cases:
        functions = results[case]
        base = functions[BASELINE][0]
        ours = functions[OURS][0]
        row = [case, fmt_time(base), fmt_time(ours), f"{ours / base:.2f}×"]
        for _, fn in extra:
            row.append(f"{functions[fn][0] / base:.2f}×" if fn in functions else "–")
        print("| " + " | ".join(row) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

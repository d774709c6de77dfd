"""Smoke test of scripts/flight-bench.py: a `--quick` run (8 MiB) in a
subprocess prints its two Markdown tables, a row per client and per
prefetch depth, with a positive number in every measured cell. The numbers
of a quick run mean nothing and are not checked."""

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[3] / "scripts" / "flight-bench.py"


def cells(row):
    return [cell.strip() for cell in row.strip().strip("|").split("|")]


def test_quick_run_prints_the_throughput_and_memory_tables():
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr

    rows = [line for line in proc.stdout.splitlines() if line.startswith("|")]
    throughput, memory = rows[:5], rows[5:]
    assert throughput[0] == "| client | median (ms) | MiB/s | first batch (ms) |"
    assert throughput[1] == "|---|---:|---:|---:|"
    assert [cells(row)[0] for row in throughput[2:]] == [
        "arrow_device.flight.fetch, cpu",
        "arrow_device.flight.fetch, emulated",
        "pyarrow.flight read_all, cpu",
    ]
    for row in throughput[2:]:
        assert len(cells(row)) == 4, row
        assert all(float(cell) > 0 for cell in cells(row)[1:]), row

    assert memory[0] == "| client | prefetch | RSS before (MiB) | peak RSS (MiB) | peak − before (MiB) |"
    assert memory[1] == "|---|---:|---:|---:|---:|"
    assert [cells(row)[:2] for row in memory[2:]] == [
        ["arrow_device.flight.fetch, emulated", "1"],
        ["arrow_device.flight.fetch, emulated", "2"],
        ["arrow_device.flight.fetch, emulated", "4"],
        ["arrow_device.flight.fetch, emulated", "8"],
        ["pyarrow.flight read_all, cpu", "—"],
    ]
    for row in memory[2:]:
        before, peak, grown = (float(cell) for cell in cells(row)[2:])
        assert 0 < before <= peak, row
        assert abs(peak - before - grown) <= 0.15, row  # each cell rounded to 0.1

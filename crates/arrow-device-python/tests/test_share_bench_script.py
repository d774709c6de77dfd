"""Smoke test of scripts/share-bench.py: a `--quick` run in a subprocess
prints the Markdown table with a row per case (int64 and uint8, 1 and 4
MiB, on the CPU and the emulated device) and a number in every cell. The
numbers of a quick run mean nothing and are not checked."""

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[3] / "scripts" / "share-bench.py"


def test_quick_run_prints_a_table_of_every_case():
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr

    table = [line for line in proc.stdout.splitlines() if line.startswith("|")]
    assert table[0] == (
        "| case | share (ms) | open (ms) | share + open (ms) | pickle (ms) | IPC stream (ms) "
        "| share + open / pickle | open / pickle | share + open / IPC |"
    )
    assert table[1].startswith("|---")
    cpu_rows = [row for row in table[2:] if row.split("|")[1].strip().endswith(", cpu")]
    assert [row.split("|")[1].strip() for row in cpu_rows] == [
        "int64, 1 MiB, cpu",
        "uint8, 1 MiB, cpu",
        "int64, 4 MiB, cpu",
        "uint8, 4 MiB, cpu",
    ]
    for row in table[2:]:
        cells = [cell.strip() for cell in row.strip("|").split("|")]
        assert len(cells) == 9, row
        assert all(float(cell.rstrip("×")) > 0 for cell in cells[1:]), row
    emulated_rows = [row.split("|")[1].strip() for row in table[2:] if ", emulated" in row]
    assert emulated_rows == [
        "int64, 1 MiB, emulated",
        "uint8, 1 MiB, emulated",
        "int64, 4 MiB, emulated",
        "uint8, 4 MiB, emulated",
    ]

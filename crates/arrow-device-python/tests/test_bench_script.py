"""Smoke test of scripts/bench-python.py: a `--quick` run in a subprocess
prints the Markdown table with every case, every comparison and both peers
(pyarrow, nanoarrow), then the DLPack table (the C exchange table against
`__dlpack__`, section (d)), and writes its JSON. The numbers of a quick run
mean nothing and are not checked."""

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[3] / "scripts" / "bench-python.py"
CASES = ("int64", "utf8", "record batch")


def number(cell):
    return float(cell.split("×")[0])


def test_quick_run_prints_a_table_of_every_case_and_peer(tmp_path):
    raw = tmp_path / "bench.json"
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--json", str(raw)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr

    assert "pyarrow" in proc.stdout and "nanoarrow" in proc.stdout and "Python" in proc.stdout
    table = [line for line in proc.stdout.splitlines() if line.startswith("|")]
    assert table[0] == (
        "| case | comparison | ours (µs) | pyarrow (µs) | ours/pyarrow | nanoarrow (µs) | ours/nanoarrow |"
    )
    assert table[1].startswith("|---")
    for case in CASES:
        rows = [row for row in table[2:] if row.startswith(f"| {case}")]
        for comparison in ("(a) import", "(b) export, read by pyarrow", "(c) export, read by nanoarrow"):
            assert any(comparison in row for row in rows), f"no {comparison} row for {case}"
        for row in rows:
            cells = [cell.strip() for cell in row.strip("|").split("|")]
            assert len(cells) == 7, row
            number(cells[2]), number(cells[3]), number(cells[4].rstrip(" ⚠"))
            if "(c)" not in cells[1]:
                number(cells[5]), number(cells[6])
    assert len([row for row in table[2:] if row.startswith("| record batch, 1 column")]) == 5

    header = "| producer | table (µs) | `__dlpack__` (µs) | table/`__dlpack__` | ctypes hop (µs, ref.) |"
    assert header in table
    dlpack_rows = table[table.index(header) + 2:]
    ours = [row for row in dlpack_rows if row.startswith("| arrow_device DeviceArray")]
    assert len(ours) == 1, dlpack_rows
    cells = [cell.strip() for cell in ours[0].strip("|").split("|")]
    assert len(cells) == 5, ours[0]
    number(cells[1]), number(cells[2]), number(cells[3]), number(cells[4])

    data = json.loads(raw.read_text(encoding="utf-8"))
    assert data["quick"] is True
    assert [c["case"].split(",")[0] for c in data["cases"]] == ["int64", "utf8", "record batch", "record batch"]
    for case in data["cases"]:
        assert {"import", "export", "pyarrow", "nanoarrow", "nanoarrow-reads-ours"} <= set(case["sides"])
        assert all(t > 0 for side in case["sides"].values() for t in side["per_call_s"])
    producers = data["dlpack_exchange"]
    assert producers[0]["producer"].startswith("arrow_device DeviceArray")
    for producer in producers:
        assert {"table", "dlpack"} <= set(producer["sides"])
        assert all(t > 0 for side in producer["sides"].values() for t in side["per_call_s"])
        assert producer["table_over_dlpack"] > 0

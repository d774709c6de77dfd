"""Smoke test of scripts/bench-python.py: a `--quick` run in a subprocess
prints the Markdown table with every case and both comparisons, and writes
its JSON. The numbers of a quick run mean nothing and are not checked."""

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[3] / "scripts" / "bench-python.py"
CASES = ("int64", "utf8", "record batch")


def test_quick_run_prints_a_table_of_the_three_cases(tmp_path):
    raw = tmp_path / "bench.json"
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--json", str(raw)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr

    assert "pyarrow" in proc.stdout and "Python" in proc.stdout
    table = [line for line in proc.stdout.splitlines() if line.startswith("|")]
    assert table[0] == "| case | comparison | ours (µs) | pyarrow (µs) | ours/pyarrow |"
    assert table[1].startswith("|---")
    for case in CASES:
        rows = [row for row in table[2:] if row.startswith(f"| {case}")]
        assert any("(a) import" in row for row in rows), f"no import row for {case}"
        assert any("(b) export" in row for row in rows), f"no export row for {case}"
        for row in rows:
            cells = [cell.strip() for cell in row.strip("|").split("|")]
            assert len(cells) == 5, row
            float(cells[2]), float(cells[3])
            assert cells[4].split("×")[0].replace(".", "", 1).isdigit(), row

    data = json.loads(raw.read_text(encoding="utf-8"))
    assert data["quick"] is True
    assert [c["case"].split(",")[0] for c in data["cases"]] == ["int64", "utf8", "record batch"]
    for case in data["cases"]:
        assert {"import", "export", "pyarrow"} <= set(case["sides"])
        assert all(t > 0 for side in case["sides"].values() for t in side["per_call_s"])

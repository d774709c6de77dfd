"""scripts/conformance-table.py: our own objects and consumer functions pass
every conformance check (what its ``--check`` mode asserts in CI), the
document it writes has its sections, the versions line and our rows
passing, and only a failure of ours fails the run.

The script is loaded from its file; it puts scripts/ on ``sys.path`` to
import ``conformance_peers``, whose consumer functions the checker's
spawned workers import by name."""

import importlib.util
import re
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[3] / "scripts" / "conformance-table.py"

OUR_PRODUCERS = {
    "arrow_device.DeviceArray (CPU)",
    "arrow_device.DeviceArray (emulated device)",
    "arrow_device.DeviceArray int64 (CPU)",
    "arrow_device.DeviceArray int64 (emulated device)",
    "arrow_device.DeviceStream (CPU)",
    "arrow_device.DeviceStream (emulated device)",
}
OUR_CONSUMERS = {"arrow_device.array(p)", "arrow_device.stream(p) read fully"}
SECTIONS = ["## Producers", "## Consumers", "### Refusals", "## Findings", "## Rule catalogue"]


@pytest.fixture(scope="module")
def table():
    spec = importlib.util.spec_from_file_location("conformance_table", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    # Registered first, as importlib's recipe does: its dataclasses look
    # their module up while the file runs.
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _failures(rows):
    return {row.entry.name: row.error or str(row.report) for row in rows if not row.passed}


def test_our_objects_and_consumer_functions_pass_every_check(table):
    results = table.check_own()

    assert {row.entry.name for row in results.producers} == OUR_PRODUCERS
    assert {row.entry.name for row in results.consumers} == OUR_CONSUMERS
    assert _failures(results.rows()) == {}
    assert results.own_failures() == []
    for row in results.rows():
        assert any(c.outcome == "passed" for c in row.report.checks), row.entry.name
    # Each consumer of ours read back what it took, on the emulated device too.
    array = next(r for r in results.consumers if r.entry.name == "arrow_device.array(p)").report
    stream = next(r for r in results.consumers if r.entry.name == "arrow_device.stream(p) read fully").report
    for case in ("cpu_array", "cpu_device_array", "emulated_device_array"):
        assert array.outcome(f"consumer.{case}.values") == "passed"
    for case in ("cpu_stream", "cpu_device_stream", "emulated_device_stream"):
        assert stream.outcome(f"consumer.{case}.values") == "passed"
    assert array.outcome("consumer.emulated_device_array.host_read") == "passed"


def _matrix_rows(text, heading):
    section = text.split(heading, 1)[1].split("\n## ", 1)[0]
    return [line for line in section.splitlines() if line.startswith("| **")]


def test_the_document_has_every_section_the_versions_and_our_rows_passing(table, tmp_path):
    from arrow_device.conformance import RULES

    results = table.run()
    out = tmp_path / "conformance.md"
    table.write(results, out)
    text = out.read_text(encoding="utf-8")

    positions = [text.index(section) for section in SECTIONS]
    assert positions == sorted(positions)
    assert "CPU only; no GPU was available for this run" in text or "present (" in text
    assert table.COMMAND in text
    versions = re.search(r"^- Versions: (.*)$", text, re.MULTILINE)
    assert versions is not None
    named = dict(item.rsplit(" ", 1) for item in versions.group(1).split(", "))
    assert list(named) == ["Python", "pyarrow", "nanoarrow", "polars", "duckdb", "numpy", "arrow_device"]
    assert all(re.fullmatch(r"\d+\.\d+.*", v) for v in named.values()), named

    producers = _matrix_rows(text, "## Producers")
    consumers = _matrix_rows(text, "## Consumers")
    assert {row.split(" | ")[0].strip("| *") for row in producers} == OUR_PRODUCERS
    assert {row.split(" | ")[0].strip("| *") for row in consumers} == OUR_CONSUMERS
    for row in producers + consumers:
        cells = [cell.strip() for cell in row.strip("|").split(" | ")]
        assert cells[-2] == "pass" and cells[-1] == "—", row
        assert not any(cell.startswith("✗") for cell in cells), row
    # Peers have rows too, and the catalogue lists every rule.
    assert "| pyarrow.RecordBatch |" in text and "| polars.DataFrame(p) |" in text
    for rule in RULES:
        assert f"| `{rule}` |" in text
    assert results.own_failures() == []


class _NoKeywords:
    """A device-array producer without ``**kwargs``: fails
    ``device_array.kwargs_none`` and ``device_array.unknown_kwarg``."""

    def __arrow_c_device_array__(self, requested_schema=None):
        import pyarrow as pa

        return pa.record_batch({"a": [1, 2]}).__arrow_c_device_array__(requested_schema)


@pytest.mark.parametrize("library, status", [("arrow_device", 1), ("somebody_else", 0)])
def test_only_a_failure_of_ours_fails_the_run(table, monkeypatch, tmp_path, library, status):
    producer = table.peers.Producer(library, "no keywords", "rows", _NoKeywords)
    monkeypatch.setattr(table.peers, "producers", lambda include_peers=True: [producer])
    monkeypatch.setattr(table.peers, "consumers", lambda include_peers=True: [])
    # main() sets a default; keep it from outliving this test.
    monkeypatch.setenv("ARROW_DEVICE_EMULATED", "strict=1")

    assert table.main(["--out", str(tmp_path / "conformance.md")]) == status
    assert table.main(["--check"]) == status
    text = (tmp_path / "conformance.md").read_text(encoding="utf-8")
    assert "`device_array.kwargs_none`, `device_array.unknown_kwarg`" in text

#!/usr/bin/env python3
"""docs/conformance.md: `arrow_device.conformance` run on every peer library
and on our own objects.

Producers (``check_producer``): pyarrow, nanoarrow, polars, DuckDB and numpy
objects, and arrow_device's DeviceArray and DeviceStream on the CPU and on
the emulated device, each exercised through every protocol method it has.
Consumers (``check_consumer``): each library's import functions given
arrow_device's producers, in worker processes. The objects and functions
are those of ``scripts/conformance_peers.py``.

The document has a matrix of producers and one of consumers, the failed and
advisory checks of each row with their messages, the findings those show,
and the rule catalogue.

Usage:
    scripts/conformance-table.py [--out PATH] [--json PATH]
    scripts/conformance-table.py --check

``--check`` runs our own objects and consumer functions only and writes
nothing (for CI). The exit status is 1 when one of ours fails a check, and
0 otherwise: a peer's failure is a finding, not an error.

The emulated device runs in strict mode with a delay (ARROW_DEVICE_EMULATED,
set to ``strict=1,delay_ms=5`` unless already set), so that a host read of
device memory crashes and a copy is still pending when a reader that does
not wait would read it.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import json
import os
import platform
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Union

SCRIPTS = Path(__file__).resolve().parent
REPO = SCRIPTS.parent
# The consumer functions live in an importable module so that the checker's
# spawned workers import them (multiprocessing gives them this sys.path).
if str(SCRIPTS) not in sys.path:
    sys.path.insert(0, str(SCRIPTS))

import arrow_device as ad  # noqa: E402
import conformance_peers as peers  # noqa: E402
from arrow_device.conformance import RULES, Report, check_consumer, check_producer  # noqa: E402

EMULATED = "strict=1,delay_ms=5"
COMMAND = "target/venv/bin/python scripts/conformance-table.py"
DEFAULT_OUT = REPO / "docs" / "conformance.md"
#: Seconds a consumer case may take before it counts as a hang.
CONSUMER_TIMEOUT = 60.0

#: The producer matrix's columns: check scope -> heading.
SCOPES = {
    "schema": "schema",
    "array": "array",
    "device_array": "device array",
    "stream": "stream",
    "device_stream": "device stream",
    "dlpack": "DLPack",
    "cai": "CAI",
}
#: The consumer matrix's columns: case -> heading.
CASES = {
    "cpu_array": "CPU array",
    "cpu_device_array": "CPU device array",
    "cpu_stream": "CPU stream",
    "cpu_device_stream": "CPU device stream",
    "emulated_device_array": "emulated device array",
    "emulated_device_stream": "emulated device stream",
}


@dataclass
class Row:
    """One producer or consumer as checked: its report, or the error that
    kept the checker from making one."""

    entry: Union[peers.Producer, peers.Consumer]
    report: Optional[Report]
    error: Optional[str]
    seconds: float

    @property
    def passed(self) -> bool:
        return self.error is None and self.report.passed

    def checks(self):
        return [] if self.report is None else self.report.checks

    def failed(self):
        """Failed checks, advisory ones included."""
        return [c for c in self.checks() if c.outcome == "failed"]


@dataclass
class Results:
    producers: List[Row]
    consumers: List[Row]
    producer_seconds: float
    consumer_seconds: float

    def rows(self) -> List[Row]:
        return self.producers + self.consumers

    def own_failures(self) -> List[Row]:
        """Our rows that failed (a failed check, or a checker error)."""
        return [row for row in self.rows() if row.entry.ours and not row.passed]


# ----------------------------------------------------------------- checking


def _device(name: str) -> ad.Device:
    return ad.emulated() if name == "emulated" else ad.cpu()


def check_producers(include_peers: bool = True) -> List[Row]:
    rows = []
    for producer in peers.producers(include_peers):
        start = time.perf_counter()
        try:
            report = check_producer(producer.make(), device=_device(producer.device),
                                    fresh=producer.make, subject=producer.name)
            error = None
        except Exception as exc:
            report, error = None, f"{type(exc).__name__}: {exc}"
        rows.append(Row(producer, report, error, time.perf_counter() - start))
    return rows


def check_consumers(include_peers: bool = True, timeout: float = CONSUMER_TIMEOUT) -> List[Row]:
    rows = []
    for consumer in peers.consumers(include_peers):
        start = time.perf_counter()
        try:
            report = check_consumer(consumer.fn, timeout=timeout, subject=consumer.name)
            error = None
        except Exception as exc:
            report, error = None, f"{type(exc).__name__}: {exc}"
        rows.append(Row(consumer, report, error, time.perf_counter() - start))
    return rows


def run(include_peers: bool = True) -> Results:
    """Checks every producer and consumer (ours only without peers)."""
    start = time.perf_counter()
    producers = check_producers(include_peers)
    middle = time.perf_counter()
    consumers = check_consumers(include_peers)
    return Results(producers, consumers, middle - start, time.perf_counter() - middle)


def check_own() -> Results:
    """Our objects and consumer functions only: what CI runs."""
    return run(include_peers=False)


# ----------------------------------------------------------------- the header


def versions() -> Dict[str, str]:
    found = {"Python": platform.python_version()}
    for library in peers.LIBRARIES:
        distribution = "arrow-device" if library == peers.OURS else library
        try:
            found[library] = importlib.metadata.version(distribution)
        except importlib.metadata.PackageNotFoundError:
            found[library] = "not installed"
    return found


def versions_line(found: Dict[str, str]) -> str:
    return "Versions: " + ", ".join(f"{name} {version}" for name, version in found.items())


def machine_note() -> str:
    gpus = [d for d in ad.devices() if d.type not in (ad.DeviceType.CPU, ad.DeviceType.EXT_DEV)]
    where = f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPUs"
    if not gpus:
        return f"CPU only; no GPU was available for this run ({where})"
    listed = ", ".join(f"{getattr(d.type, 'name', d.type)} {d.id}" for d in gpus)
    return f"run with {listed} present ({where}); the rows cover the CPU and the emulated device only"


# ----------------------------------------------------------------- rendering


def _cell(text: str) -> str:
    """`text` made safe for one Markdown table cell."""
    return " ".join(str(text).split()).replace("|", "\\|")


def _short(text: str, limit: int = 160) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> List[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return lines


def _scope_cell(checks) -> str:
    """A producer's cell for one scope: ``✓ 9``, ``✗ 2 of 11``, ``—``."""
    ran = [c for c in checks if c.outcome != "not_applicable"]
    if not ran:
        absent = any(c.message.startswith("no __") for c in checks)
        return "—" if absent or not checks else "n/a"
    failed = [c for c in ran if c.failed]
    advisory = [c for c in ran if c.outcome == "failed" and c.advisory]
    if failed:
        return f"✗ {len(failed)} of {len(ran)}"
    if advisory:
        return f"✓ {len(ran) - len(advisory)}, ⚠ {len(advisory)}"
    return f"✓ {len(ran)}"


def _counts(row: Row) -> str:
    checks = row.checks()
    passed = sum(c.outcome == "passed" for c in checks)
    failed = sum(c.failed for c in checks)
    advisory = sum(c.outcome == "failed" and c.advisory for c in checks)
    na = sum(c.outcome == "not_applicable" for c in checks)
    return f"{passed} / {failed} / {advisory} / {na}"


def _result(row: Row) -> str:
    if row.error is not None:
        return "**error**"
    if not row.report.passed:
        return "**FAIL**"
    advisories = len(row.report.advisories)
    return f"pass, {advisories} advisory" if advisories else "pass"


def _failed_ids(row: Row) -> str:
    if row.error is not None:
        return f"checker error: {_short(row.error, 100)}"
    ids = [f"`{c.id}`" + (" (advisory)" if c.advisory else "") for c in row.failed()]
    return ", ".join(ids) or "—"


def _name(row: Row) -> str:
    entry = row.entry
    return f"**{entry.name}**" if entry.ours else entry.name


def _producer_matrix(rows: List[Row]) -> List[str]:
    header = ["object", "data"] + list(SCOPES.values()) + ["passed / failed / advisory / n/a", "result", "failed checks"]
    body = []
    for row in rows:
        scopes = [_scope_cell([c for c in row.checks() if c.id.split(".")[0] == scope]) for scope in SCOPES]
        if row.error is not None:
            scopes = ["?"] * len(SCOPES)
        body.append([_name(row), row.entry.data] + scopes + [_counts(row), _result(row), _failed_ids(row)])
    return _table(header, body)


def _case_cell(checks) -> str:
    """A consumer's cell for one case: ``✓ read``, ``refused``, ``✗ release``."""
    if not checks:
        return "?"
    failed = [c.id.rpartition(".")[2] for c in checks if c.failed]
    if failed:
        return "✗ " + ", ".join(failed)
    accepted = any(c.id.endswith(".accepts") and c.outcome == "passed" for c in checks)
    if not accepted:
        return "refused"
    values = next((c for c in checks if c.id.endswith(".values")), None)
    return "✓ read" if values is not None and values.outcome == "passed" else "✓ taken"


def _case_checks(row: Row, case: str):
    return [c for c in row.checks() if c.id.startswith(f"consumer.{case}.")]


def _consumer_matrix(rows: List[Row]) -> List[str]:
    header = ["consumer"] + list(CASES.values()) + ["result", "failed checks"]
    body = []
    for row in rows:
        cases = ["?"] * len(CASES) if row.error is not None else [_case_cell(_case_checks(row, case)) for case in CASES]
        body.append([_name(row)] + cases + [_result(row), _failed_ids(row)])
    return _table(header, body)


def _details(rows: List[Row]) -> List[str]:
    """A section per row with failed or advisory checks (or an error)."""
    lines = []
    clean = []
    for row in rows:
        if row.error is None and not row.failed():
            clean.append(row.entry.name)
            continue
        lines += ["", f"#### {row.entry.name}", ""]
        if row.error is not None:
            lines.append(f"The checker could not run: `{_cell(row.error)}`.")
            continue
        lines += _table(["check", "outcome", "spec", "message"],
                        [[f"`{c.id}`", c.label(), c.section, c.message] for c in row.failed()])
    if clean:
        which = "the other rows" if lines else "every row"
        lines += ["", f"Every check of {which} passed or did not apply: " + "; ".join(clean) + "."]
    return lines


def _refusals(rows: List[Row]) -> List[str]:
    """Why each consumer refused the cases it refused (one line per reason)."""
    body = []
    for row in rows:
        reasons: Dict[str, List[str]] = {}
        for check in row.checks():
            if check.id.endswith(".accepts") and check.outcome == "not_applicable" and check.id != "consumer.accepts":
                case = check.id.split(".")[1]
                reason = check.message.removeprefix("refused: ")
                reasons.setdefault(_short(reason), []).append(CASES.get(case, case))
        for reason, cases in reasons.items():
            body.append([row.entry.name, ", ".join(cases), reason])
    return _table(["consumer", "cases refused", "what it raised"], body) if body else ["No consumer refused a case."]


def _findings(results: Results) -> List[str]:
    """Deviations the reports show, peers first, then what the consumers took."""
    lines = []
    for row in results.rows():
        if row.error is not None:
            lines.append(f"- **{row.entry.name}**: the checker could not run (`{_cell(row.error)}`).")
            continue
        failed = row.failed()
        if not failed:
            continue
        kind = "fails" if not row.report.passed else "fails advisory checks"
        lines.append(f"- **{row.entry.name}** {kind}:")
        for check in failed:
            tag = " (advisory)" if check.advisory else ""
            lines.append(f"  - `{check.id}`{tag} ({check.section}): {_short(check.message, 300)}")
    if not lines:
        lines.append("- No object or consumer failed a check.")
    else:
        clean = [row.entry.name for row in results.rows() if row.error is None and not row.failed()]
        lines.append(f"- Every other object and consumer ({len(clean)} of {len(results.rows())}) passed every check that applied.")
    took = {case: [row.entry.name for row in results.consumers if not row.entry.ours
                   and any(c.id == f"consumer.{case}.accepts" and c.outcome == "passed" for c in row.checks())]
            for case in CASES}
    device_cases = [case for case in CASES if case != "cpu_array" and case != "cpu_stream"]
    summary = "; ".join(f"{CASES[case]}: {', '.join(took[case]) or 'none'}" for case in device_cases)
    lines.append(f"- The device forms, and the peer consumers that took them (the others refused them, as they may): {summary}.")
    return lines


def _catalogue() -> List[str]:
    return _table(["id", "spec", "advisory", "what a conforming side does"],
                  [[f"`{rid}`", section, "yes" if advisory else "", summary]
                   for rid, (section, summary, advisory) in RULES.items()])


def _emulated_setting() -> str:
    setting = os.environ.get("ARROW_DEVICE_EMULATED")
    return f"`ARROW_DEVICE_EMULATED={setting}`" if setting else "the default configuration (strict, no delay)"


def render(results: Results, *, date: str, machine: str, found_versions: Dict[str, str]) -> str:
    lines = [
        "# Conformance of Arrow PyCapsule producers and consumers",
        "",
        "Generated by `scripts/conformance-table.py` with `arrow_device.conformance`; do not edit by hand.",
        "",
        "Each **producer** below is exercised through every protocol method it has "
        "(`__arrow_c_schema__`, `__arrow_c_array__`, `__arrow_c_device_array__`, `__arrow_c_stream__`, "
        "`__arrow_c_device_stream__`, `__dlpack__`, `__cuda_array_interface__`) as a strict consumer would: "
        "capsule names and destructors, `requested_schema=None`, the device methods' keyword arguments, "
        "schema agreement, release callbacks (once, the whole tree, moved children), the device fields, "
        "validation at the full level, the stream semantics, and the DLPack and CUDA Array Interface rules. "
        "Each **consumer** function is handed arrow_device's producers (a 1,000-row record batch behind exactly one "
        "protocol method, on the CPU and on the emulated device in strict, delayed mode), each in a worker process, "
        "and must release everything it took exactly once, never read device memory on the host, and read the final "
        "values. Every check has a stable id; the [rule catalogue](#rule-catalogue) lists them with their spec sections.",
        "",
        "To re-run (the first line builds the module and its peers into `target/venv`):",
        "",
        "```sh",
        "bash scripts/python-env.sh",
        COMMAND,
        "```",
        "",
        f"- Date: {date}",
        f"- Machine: {machine}",
        f"- Emulated device: {_emulated_setting()} for the producers; the consumers' workers run it strict and delayed",
        f"- {versions_line(found_versions)}",
        f"- Time: producers {results.producer_seconds:.1f} s, consumers {results.consumer_seconds:.1f} s",
        "",
        "Our own rows are in bold; `--check` runs only them and fails when one fails (CI).",
        "",
        "## Producers",
        "",
        "A cell counts the checks of one protocol: `✓ n` all n passed, `✗ f of n` f of the n that ran failed, "
        "`⚠` advisory failures (reported, not failing), `—` the object has no such method, `n/a` it has one but "
        "no check applied (DLPack refuses data with nulls). Data: " + peers.DATA_LEGEND + ".",
        "",
    ]
    lines += _producer_matrix(results.producers)
    lines += ["", "### Failed and advisory checks of producers"]
    lines += _details(results.producers)
    lines += [
        "",
        "## Consumers",
        "",
        "`✓ read` the consumer took the case and returned the producer's values, `✓ taken` it took it and returned "
        "nothing comparable, `refused` it raised (allowed: a consumer need not take every form), `✗ rule` a check "
        "failed. A refusal still counts what the consumer took before raising.",
        "",
    ]
    lines += _consumer_matrix(results.consumers)
    lines += ["", "### Failed checks of consumers"]
    lines += _details(results.consumers)
    lines += ["", "### Refusals", ""]
    lines += _refusals(results.consumers)
    lines += ["", "## Findings", ""]
    lines += _findings(results)
    lines += ["", "## Rule catalogue", ""]
    lines += _catalogue()
    return "\n".join(lines) + "\n"


def write(results: Results, path: Path) -> None:
    today = datetime.datetime.now(datetime.timezone.utc).date().isoformat()
    text = render(results, date=today, machine=machine_note(), found_versions=versions())
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def to_json(results: Results) -> dict:
    def row(r: Row) -> dict:
        data = {"library": r.entry.library, "name": r.entry.name, "seconds": r.seconds, "error": r.error}
        if r.report is not None:
            data["report"] = r.report.to_dict()
        return data

    return {"producers": [row(r) for r in results.producers], "consumers": [row(r) for r in results.consumers]}


# ----------------------------------------------------------------- main


def _print_failures(rows: List[Row]) -> None:
    for row in rows:
        if row.error is not None:
            print(f"{row.entry.name}: the checker could not run: {row.error}", file=sys.stderr)
        else:
            print(row.report, file=sys.stderr)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="check our own objects only; write nothing")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"the document (default {DEFAULT_OUT.relative_to(REPO)})")
    parser.add_argument("--json", type=Path, help="also write every report as JSON")
    args = parser.parse_args(argv)
    # Read by the emulated device on its first use, which comes below.
    os.environ.setdefault("ARROW_DEVICE_EMULATED", EMULATED)

    results = check_own() if args.check else run()
    if args.json:
        args.json.write_text(json.dumps(to_json(results), indent=2), encoding="utf-8")
    if not args.check:
        write(results, args.out)
        print(f"wrote {args.out}")
    for row in results.rows():
        status = "error" if row.error else ("pass" if row.report.passed else "FAIL")
        print(f"{status:5} {row.seconds:6.2f} s  {row.entry.name}")
    print(f"producers {results.producer_seconds:.1f} s, consumers {results.consumer_seconds:.1f} s")
    failures = results.own_failures()
    if failures:
        print(f"{len(failures)} of our own rows failed:", file=sys.stderr)
        _print_failures(failures)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""The README's fuzzing table from the logs of `scripts/fuzz.sh campaign`.

Reads DIR/TARGET.log (libFuzzer's output with -print_final_stats=1, then the
script's `seconds: N` line) for every log in DIR and prints one Markdown row
per target: executions, executions per second, coverage (libFuzzer's `cov`,
covered edges, and `ft`, features), the corpus it ended with, wall time,
and what it found.
"""
import pathlib
import re
import sys


def row(log: pathlib.Path) -> str:
    text = log.read_text(errors="replace")
    stats = dict(re.findall(r"^stat::(\w+):\s*(\d+)", text, re.M))
    # The last status line: "#N  DONE/pulse  cov: C ft: F corp: K/SIZE ..."
    status = re.findall(r"^#(\d+)\s+\w+\s+cov: (\d+) ft: (\d+) corp: (\d+)/(\S+)", text, re.M)
    runs, cov, ft, corp, size = status[-1] if status else ("0", "?", "?", "?", "?")
    runs = int(stats.get("number_of_executed_units", runs))
    seconds = int((re.findall(r"^seconds: (\d+)", text, re.M) or ["0"])[-1])
    rate = stats.get("average_exec_per_sec", str(runs // seconds if seconds else 0))
    crashes = len(re.findall(r"^==\d+== ?ERROR|^SUMMARY: ", text, re.M))
    found = "none" if crashes == 0 else "see fuzz/artifacts"
    return (
        f"| `{log.stem}` | {runs:,} | {int(rate):,} | {cov} | {ft} | "
        f"{corp} ({size}) | {seconds // 60} min {seconds % 60} s | {found} |"
    )


def main() -> None:
    directory = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "target/fuzz-campaign")
    logs = sorted(directory.glob("*.log"))
    if not logs:
        sys.exit(f"no campaign logs in {directory}")
    print("| target | executions | exec/s | edges (`cov`) | features (`ft`) | corpus | time | crashes |")
    print("|---|---:|---:|---:|---:|---|---|---|")
    for log in logs:
        print(row(log))


if __name__ == "__main__":
    main()

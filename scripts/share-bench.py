#!/usr/bin/env python3
"""Cost of handing an array to another process: `arrow_device` sharing against pickling.

For each case (an int64 and a uint8 array of 1 MiB and of 1 GiB, on the CPU,
and on the emulated device EXT_DEV) one child
process (spawn) receives the array again and again, over a
`multiprocessing` pipe, in four ways:

  share + open   the parent's `shared = array.share()`, the handle through
                 the pipe, the child's `arrow_device.open_shared(handle)`,
                 its answer back; then the parent closes the share.
  open           the child's `open_shared` alone (timed in the child).
  pickle         `pickle.dumps(pa_array)` in the parent, the bytes through
                 the pipe, `pickle.loads` in the child, its answer back.
  IPC stream     the array as a one-batch `pyarrow.ipc` stream into bytes,
                 through the pipe, `ipc.open_stream(...).read_all()` in the
                 child, its answer back.

On EXT_DEV, pickle and IPC send the same values from the host (the copy off
the device that they would need first is not counted).

The share copies the array once, in the exporter (on the CPU into a sealed
memory file); it is also shown alone ("share"). An opened array is not
read: its pages are the exporter's, mapped, and come in on first use, while
pickle and IPC have copied every byte by the time the child answers. The
child checks the length each time, and once per case that the last value
arrived. Both sides free what they sent and received after the answer,
outside every timing.

Measurement: per case, a warm-up round, then --repeats rounds, the sides of a
round in rotating order; the table shows medians (milliseconds) and the
ratios of sharing to each baseline (below 1: sharing is faster).

Usage: scripts/share-bench.py [--quick] [--repeats N]
"""

from __future__ import annotations

import argparse
import multiprocessing
import pickle
import platform
import statistics
import sys
import time
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc

import arrow_device as ad

MIB = 1 << 20
GIB = 1 << 30

SHARE_OPEN = "share + open"
OPEN = "open"
SHARE = "share"
PICKLE = "pickle"
IPC = "IPC stream"

# --------------------------------------------------------------------------
# The child


def child(conn) -> None:
    """Answers each request `(kind, payload)` with `(seconds, length, last
    value or None)`: `seconds` is the open alone for a share. Then frees
    what it received and says "idle", so that freeing is no side's time."""
    while True:
        kind, check = conn.recv()
        if kind == "stop":
            return
        payload = conn.recv_bytes()
        start = time.perf_counter()
        if kind == "open":
            received = ad.open_shared(payload)
        elif kind == "pickle":
            received = pickle.loads(payload)
        else:
            received = ipc.open_stream(payload).read_all().column(0)
        seconds = time.perf_counter() - start
        last = None
        if check:
            host = pa.array(received.to(ad.cpu())) if kind == "open" else received
            last = host[len(host) - 1].as_py()
        conn.send((seconds, len(received), last))
        del received, payload
        conn.send("idle")


# --------------------------------------------------------------------------
# Cases


@dataclass
class Case:
    dtype: str
    size: int
    device: str
    #: Per side, the seconds of each round.
    seconds: dict[str, list[float]] = field(default_factory=dict)

    @property
    def name(self) -> str:
        size = f"{self.size // GIB} GiB" if self.size >= GIB else f"{self.size // MIB} MiB"
        return f"{self.dtype}, {size}, {self.device}"


def make_data(dtype: str, size: int) -> pa.Array:
    values = np.arange(size // np.dtype(dtype).itemsize, dtype=np.int64)
    return pa.array(values.astype(dtype, copy=False))


class Child:
    def __init__(self) -> None:
        ctx = multiprocessing.get_context("spawn")
        self.conn, theirs = ctx.Pipe()
        self.process = ctx.Process(target=child, args=(theirs,), daemon=True)
        self.process.start()
        theirs.close()

    def ask(self, kind: str, payload: bytes, check: bool) -> tuple[float, int, object]:
        self.conn.send((kind, check))
        self.conn.send_bytes(payload)
        return self.conn.recv()

    def wait_idle(self) -> None:
        assert self.conn.recv() == "idle"

    def stop(self) -> None:
        self.conn.send(("stop", False))
        self.process.join(30)


def ipc_bytes(data: pa.Array) -> pa.Buffer:
    sink = pa.BufferOutputStream()
    batch = pa.record_batch([data], names=["values"])
    with ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return sink.getvalue()


def round_of(
    data: pa.Array, on_device: ad.DeviceArray, worker: Child, order: int, check: bool
) -> dict[str, float]:
    """One round of every side, in an order rotated by `order`."""
    expected = (len(data), data[len(data) - 1].as_py() if check else None)
    timings: dict[str, float] = {}

    def by_share() -> None:
        start = time.perf_counter()
        shared = on_device.share()
        shared_at = time.perf_counter()
        open_seconds, length, last = worker.ask("open", shared.handle, check)
        timings[SHARE_OPEN] = time.perf_counter() - start
        timings[SHARE] = shared_at - start
        timings[OPEN] = open_seconds
        worker.wait_idle()
        shared.close()
        assert (length, last) == expected, ((length, last), expected)

    def by_pickle() -> None:
        start = time.perf_counter()
        payload = pickle.dumps(data, protocol=5)
        _, length, last = worker.ask("pickle", payload, check)
        timings[PICKLE] = time.perf_counter() - start
        del payload
        worker.wait_idle()
        assert (length, last) == expected, ((length, last), expected)

    def by_ipc() -> None:
        start = time.perf_counter()
        payload = ipc_bytes(data)
        _, length, last = worker.ask("ipc", payload, check)
        timings[IPC] = time.perf_counter() - start
        del payload
        worker.wait_idle()
        assert (length, last) == expected, ((length, last), expected)

    sides = [by_share, by_pickle, by_ipc]
    for side in sides[order % 3 :] + sides[: order % 3]:
        side()
    return timings


def measure(case: Case, data: pa.Array, on_device: ad.DeviceArray, worker: Child, repeats: int) -> None:
    round_of(data, on_device, worker, 0, check=True)  # warm-up, and the values' check
    for r in range(repeats):
        for side, seconds in round_of(data, on_device, worker, r, check=False).items():
            case.seconds.setdefault(side, []).append(seconds)


# --------------------------------------------------------------------------
# Report


def median_ms(case: Case, side: str) -> float:
    return statistics.median(case.seconds[side]) * 1e3


def table(cases: list[Case]) -> str:
    lines = [
        "| case | share (ms) | open (ms) | share + open (ms) | pickle (ms) | IPC stream (ms) "
        "| share + open / pickle | open / pickle | share + open / IPC |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for case in cases:
        m = {side: median_ms(case, side) for side in (SHARE, OPEN, SHARE_OPEN, PICKLE, IPC)}
        lines.append(
            f"| {case.name} | {m[SHARE]:.3f} | {m[OPEN]:.3f} | {m[SHARE_OPEN]:.3f} "
            f"| {m[PICKLE]:.3f} | {m[IPC]:.3f} | {m[SHARE_OPEN] / m[PICKLE]:.3g}× "
            f"| {m[OPEN] / m[PICKLE]:.3g}× | {m[SHARE_OPEN] / m[IPC]:.3g}× |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--quick", action="store_true", help="a smoke run: 1 and 4 MiB, 3 repeats; numbers are not meaningful"
    )
    parser.add_argument("--repeats", type=int, default=None, help="rounds per case (default 7; 3 with --quick)")
    args = parser.parse_args(argv)
    repeats = args.repeats or (3 if args.quick else 7)
    sizes = [MIB, 4 * MIB] if args.quick else [MIB, GIB]

    devices = ["cpu", "emulated"]

    print(f"# Sharing an array with another process against pickling it ({'quick' if args.quick else 'full'} run)")
    print()
    print(
        f"Python {platform.python_version()}, pyarrow {pa.__version__}, {platform.machine()}, "
        f"{multiprocessing.cpu_count()} CPUs; medians of {repeats} rounds, one spawned child."
    )
    print()

    worker = Child()
    cases = []
    try:
        for size in sizes:
            for dtype in ("int64", "uint8"):
                data = make_data(dtype, size)
                for device in devices:
                    on_device = ad.array(data) if device == "cpu" else ad.array(data, device=ad.emulated(0))
                    case = Case(dtype, size, device)
                    measure(case, data, on_device, worker, repeats)
                    cases.append(case)
                    print(f"measured {case.name}", file=sys.stderr, flush=True)
                    del on_device
                del data
    finally:
        worker.stop()
    print(table(cases))
    return 0


if __name__ == "__main__":
    sys.exit(main())

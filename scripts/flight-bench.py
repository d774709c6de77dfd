#!/usr/bin/env python3
"""Fetching a dataset over Arrow Flight on loopback: `arrow_device.flight.fetch` against pyarrow's client.

One server process (spawn) runs our server (`arrow_device.flight.serve`)
with one in-memory table: an int64 and a string column (24-byte values), in
batches of about 1 MiB, --size-mib in all. The table is one batch repeated,
so the server's memory stays small while every batch is encoded, sent,
received and decoded on its own. The clients, in this process, read it
whole, one after another:

  fetch, cpu        `arrow_device.flight.fetch(location, "data")`: each
                    batch decoded into host memory and handed on (the CPU
                    is its landing device); each is dropped once counted.
  fetch, emulated   the same onto the emulated device (strict, no delay):
                    each batch's copy queued as it arrives; dropping a batch
                    waits for its copy, so the time includes every copy.
  pyarrow read_all  `pyarrow.flight.connect(location).do_get(ticket).read_all()`.

Per client: the median of --repeats reads after a warm-up (milliseconds,
and MiB/s of the table's size), and the median time to the first batch: for
fetch, from the call to the first batch's copy done (the batch dropped,
which waits for its event); for pyarrow, from `do_get` to its first
`read_chunk()`. That read is then dropped, which cancels the call.

Memory: a fresh child process (spawn) per case fetches the whole table onto
the emulated device with prefetch 1, 2, 4 and 8, dropping each batch once
counted, and reports its resident set before the fetch and its peak at the
end (Linux's VmRSS and VmHWM: `ru_maxrss` survives fork and exec, so a
spawned child would report its parent's peak); pyarrow's `read_all` is the
reference, which holds the whole table. The peak includes the imports'. The
emulated device's memory is host memory, so it counts.

Usage: scripts/flight-bench.py [--quick] [--size-mib N] [--repeats N]
"""

from __future__ import annotations

import argparse
import multiprocessing
import platform
import resource
import statistics
import sys
import time
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.flight as pf

import arrow_device as ad
from arrow_device import flight

MIB = 1 << 20

#: Bytes per string value; with the int64 and the offset, 36 bytes a row.
STRING_WIDTH = 24

PREFETCH_DEPTHS = (1, 2, 4, 8)

FETCH_CPU = "arrow_device.flight.fetch, cpu"
FETCH_EMULATED = "arrow_device.flight.fetch, emulated"
PYARROW = "pyarrow.flight read_all, cpu"

# --------------------------------------------------------------------------
# The data and the server


def make_table(size: int, batch_size: int) -> pa.Table:
    """About `size` bytes of int64 + string rows in batches of about
    `batch_size` bytes: one batch, repeated."""
    rows = max(1, batch_size // (8 + 4 + STRING_WIDTH))
    numbers = pa.array(np.arange(rows, dtype=np.int64))
    offsets = pa.py_buffer(np.arange(0, (rows + 1) * STRING_WIDTH, STRING_WIDTH, dtype=np.int32).tobytes())
    chars = pa.py_buffer((b"arrow-device-over-flight" * rows)[: rows * STRING_WIDTH])
    strings = pa.StringArray.from_buffers(rows, offsets, chars)
    batch = pa.record_batch([numbers, strings], names=["id", "label"])
    count = max(1, round(size / batch.nbytes))
    return pa.Table.from_batches([batch] * count)


def serve(conn, size: int, batch_size: int) -> None:
    """The server process: serves the table as "data" until told to stop."""
    table = make_table(size, batch_size)
    with flight.serve({"data": lambda: table}) as server:
        conn.send((server.location, table.nbytes, table.num_rows, len(table.to_batches())))
        conn.recv()


# --------------------------------------------------------------------------
# The clients


def read_ours(location: str, device: ad.Device, prefetch: int = 2) -> int:
    rows = 0
    for batch in flight.fetch(location, "data", device, prefetch=prefetch):
        rows += len(batch)
        del batch  # waits for the batch's copy (off the CPU)
    return rows


def read_pyarrow(location: str) -> int:
    return pf.connect(location).do_get(pf.Ticket(b"data")).read_all().num_rows


def first_ours(location: str, device: ad.Device) -> float:
    start = time.perf_counter()
    stream = flight.fetch(location, "data", device)
    first = next(iter(stream))
    del first
    seconds = time.perf_counter() - start
    del stream
    return seconds


def first_pyarrow(location: str) -> float:
    start = time.perf_counter()
    reader = pf.connect(location).do_get(pf.Ticket(b"data"))
    reader.read_chunk()
    seconds = time.perf_counter() - start
    del reader
    return seconds


@dataclass
class Client:
    name: str
    read: object
    first: object
    seconds: list[float] = field(default_factory=list)
    first_seconds: list[float] = field(default_factory=list)


def measure(clients: list[Client], rows: int, repeats: int) -> None:
    for client in clients:
        assert client.read() == rows, client.name  # warm-up, and the check
    for r in range(repeats):
        # A rotating order, so that no client always runs after the same one.
        for client in clients[r % len(clients) :] + clients[: r % len(clients)]:
            start = time.perf_counter()
            got = client.read()
            client.seconds.append(time.perf_counter() - start)
            assert got == rows, (client.name, got, rows)
            client.first_seconds.append(client.first())


# --------------------------------------------------------------------------
# Memory, in children


def status_kib(key: str) -> int | None:
    """A `kB` line of /proc/self/status (Linux), in bytes; None elsewhere."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def peak_rss(conn, location: str, prefetch: int) -> None:
    """A child: `(rows, rss before, rss peak)` in bytes; prefetch 0 is
    pyarrow's read_all. "Before" is the resident set once everything is
    imported (VmRSS); the peak is this process image's (VmHWM), not
    `ru_maxrss`, which Linux carries across fork and exec, so that a spawned
    child would report the parent's peak."""
    before = status_kib("VmRSS") or resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    if prefetch:
        rows = read_ours(location, ad.emulated(0), prefetch)
    else:
        rows = read_pyarrow(location)
    peak = status_kib("VmHWM") or resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    conn.send((rows, before, peak))


def memory_of(location: str, prefetch: int, rows: int) -> tuple[int, int]:
    ctx = multiprocessing.get_context("spawn")
    ours, theirs = ctx.Pipe()
    child = ctx.Process(target=peak_rss, args=(theirs, location, prefetch))
    child.start()
    got, before, peak = ours.recv()
    child.join(60)
    assert got == rows, (prefetch, got, rows)
    return before, peak


# --------------------------------------------------------------------------
# Report


def throughput_table(clients: list[Client], size: int) -> str:
    lines = [
        "| client | median (ms) | MiB/s | first batch (ms) |",
        "|---|---:|---:|---:|",
    ]
    for client in clients:
        median = statistics.median(client.seconds)
        first = statistics.median(client.first_seconds)
        lines.append(f"| {client.name} | {median * 1e3:.1f} | {size / MIB / median:.0f} | {first * 1e3:.2f} |")
    return "\n".join(lines)


def memory_table(rows: list[tuple[str, str, int, int]]) -> str:
    lines = [
        "| client | prefetch | RSS before (MiB) | peak RSS (MiB) | peak − before (MiB) |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, prefetch, before, peak in rows:
        lines.append(
            f"| {name} | {prefetch} | {before / MIB:.1f} | {peak / MIB:.1f} | {(peak - before) / MIB:.1f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run: 8 MiB in 256 KiB batches, 3 repeats")
    parser.add_argument("--size-mib", type=int, default=None, help="the table's size (default 256; 8 with --quick)")
    parser.add_argument("--repeats", type=int, default=None, help="reads per client (default 7; 3 with --quick)")
    args = parser.parse_args(argv)
    size = (args.size_mib or (8 if args.quick else 256)) * MIB
    batch_size = MIB // 4 if args.quick else MIB
    repeats = args.repeats or (3 if args.quick else 7)

    ctx = multiprocessing.get_context("spawn")
    conn, theirs = ctx.Pipe()
    server = ctx.Process(target=serve, args=(theirs, size, batch_size), daemon=True)
    server.start()
    location, nbytes, rows, batches = conn.recv()
    try:
        clients = [
            Client(FETCH_CPU, lambda: read_ours(location, ad.cpu()), lambda: first_ours(location, ad.cpu())),
            Client(
                FETCH_EMULATED,
                lambda: read_ours(location, ad.emulated(0)),
                lambda: first_ours(location, ad.emulated(0)),
            ),
            Client(PYARROW, lambda: read_pyarrow(location), lambda: first_pyarrow(location)),
        ]
        measure(clients, rows, repeats)
        print(f"measured throughput ({repeats} reads each)", file=sys.stderr, flush=True)
        memory = []
        for prefetch in PREFETCH_DEPTHS:
            memory.append((FETCH_EMULATED, str(prefetch), *memory_of(location, prefetch, rows)))
        memory.append((PYARROW, "—", *memory_of(location, 0, rows)))
        print("measured memory", file=sys.stderr, flush=True)
    finally:
        conn.send("stop")
        server.join(30)

    print(f"# Arrow Flight on loopback: arrow_device.flight against pyarrow.flight ({'quick' if args.quick else 'full'} run)")
    print()
    print(
        f"Python {platform.python_version()}, pyarrow {pa.__version__}, {platform.machine()}, "
        f"{multiprocessing.cpu_count()} CPUs; a table of {nbytes / MIB:.0f} MiB ({rows} rows of int64 + "
        f"{STRING_WIDTH}-byte strings, {batches} batches of {nbytes / batches / MIB:.2f} MiB) from our server "
        f"in another process; medians of {repeats} reads."
    )
    print()
    print(throughput_table(clients, nbytes))
    print()
    print(memory_table(memory))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""`check_consumer`: a consumer function given this package's producers,
each case in a worker process, on the CPU and on the emulated device in
strict, delayed mode.

What is observed:

* **release**: every struct the consumer took (arrays, schemas, streams and
  each batch a stream handed out) is counted as it is released, wherever
  the consumer moved it; by the time the consumer's result is dropped, each
  must have been released exactly once.
* **host_read**: device pointers of the emulated device are ``PROT_NONE``
  in strict mode, so a consumer that dereferences device memory on the host
  crashes its worker with SIGSEGV, which the parent process sees.
* **values**: each copy onto the emulated device runs late (delayed mode)
  and its destination holds poison until then, so a consumer that skips the
  ``sync_event`` reads poison; the consumer's result is compared with what
  it was given.

The worker is started with ``multiprocessing``'s spawn method when `fn` can
be imported by a fresh interpreter (``pyarrow.array``, a function of an
importable module without side effects at import), and forked otherwise (a
lambda, a closure, a function of the script being run; fork is Linux's and
macOS's, and a forked worker inherits this process's thread pools: a
library that started threads before may hang in it, which the case's
timeout reports).
"""

from __future__ import annotations

import gc
import multiprocessing
import pickle
import re
import signal
from dataclasses import dataclass
from typing import Any, Callable, List, Optional, Tuple

from ._report import FAILED, NOT_APPLICABLE, PASSED, Check, Report

#: The emulated device's delay in the workers: long enough that a copy is
#: still pending when a consumer that does not wait reads.
DELAY_MS = 20

#: The emulated device's poison (0xDB bytes) as an error message prints it:
#: int32, uint32, int64, uint64, hex. A consumer that skips the sync_event
#: often fails on it rather than returning it (an import reads the last
#: offset of a utf8 column, and finds it negative).
_POISON = re.compile(r"-606348325\b|\b3688618971\b|-2604246222170760229\b|\b15842497851539191387\b|0xdbdbdbdb", re.I)


def _poison_in(exc: BaseException) -> Optional[str]:
    """The values rule's failure message when `exc` names poison."""
    if not _POISON.search(str(exc)):
        return None
    return (f"{_describe(exc)}: the emulated device's poison bytes (0xDB), read before the sync_event "
            "completed")


@dataclass(frozen=True)
class Case:
    """One producer handed to the consumer."""

    #: ``cpu_array``, ``emulated_device_stream``, ...
    name: str
    #: ``array``, ``device_array``, ``stream`` or ``device_stream``: the one
    #: protocol method (besides ``__arrow_c_schema__``) the producer has.
    protocol: str
    #: ``None`` for the CPU, else ``(device type, id)`` of the device.
    device: Optional[Tuple[int, int]]


def cases(device=None) -> List[Case]:
    """The cases `check_consumer` runs: the four protocols on the CPU, and
    the two device protocols on `device` (default: emulated device 0)."""
    if device is None:
        label, where = "emulated", (12, 0)
    else:
        label, where = _device_label(device), (int(device.type), device.id)
    return [Case(f"cpu_{p}", p, None) for p in ("array", "device_array", "stream", "device_stream")] + [
        Case(f"{label}_{p}", p, where) for p in ("device_array", "device_stream")
    ]


def _device_label(device) -> str:
    name = getattr(device.type, "name", str(int(device.type)))
    return str(name).lower()


# ------------------------------------------------------------- the producers


class _Followed:
    """A producer of one protocol over one sample; every capsule it hands
    out is followed (its releases counted wherever it is moved)."""

    def __init__(self, make: Callable[[], Any], protocol: str, schema_of: Any):
        self._make = make
        self._schema_of = schema_of
        self.watches: List[Tuple[str, Any]] = []
        self.protocol = protocol

    def _follow(self, what: str, result: Any) -> Any:
        from .. import _arrow_device as native

        parts = result if isinstance(result, tuple) else (result,)
        for part in parts:
            self.watches.append((what, native._conformance_follow(part)))
        return result

    def __arrow_c_schema__(self):
        return self._follow("__arrow_c_schema__", self._schema_of.__arrow_c_schema__())


class _ArrayProducer(_Followed):
    def __arrow_c_array__(self, requested_schema=None):
        return self._follow("__arrow_c_array__", self._make().__arrow_c_array__(requested_schema))


class _DeviceArrayProducer(_Followed):
    def __arrow_c_device_array__(self, requested_schema=None, **kwargs):
        return self._follow("__arrow_c_device_array__", self._make().__arrow_c_device_array__(requested_schema, **kwargs))


class _StreamProducer(_Followed):
    def __arrow_c_stream__(self, requested_schema=None):
        return self._follow("__arrow_c_stream__", self._make().__arrow_c_stream__(requested_schema))


class _DeviceStreamProducer(_Followed):
    def __arrow_c_device_stream__(self, requested_schema=None, **kwargs):
        return self._follow("__arrow_c_device_stream__", self._make().__arrow_c_device_stream__(requested_schema, **kwargs))


_PRODUCERS = {
    "array": _ArrayProducer,
    "device_array": _DeviceArrayProducer,
    "stream": _StreamProducer,
    "device_stream": _DeviceStreamProducer,
}


def _producer(case: Case):
    import arrow_device
    from .. import _arrow_device as native

    device = None
    if case.device is not None:
        device = next(d for d in arrow_device.devices() if (int(d.type), d.id) == case.device) if case.device[0] != 12 else arrow_device.emulated(case.device[1])
    sample = native._conformance_sample(device)
    if case.protocol.endswith("stream"):
        # Two batches of their own (offset 0: some consumers import a
        # stream's struct arrays only as record batches, which take none).
        halves = [native._conformance_sample(device, 0, 500), native._conformance_sample(device, 500, 500)]

        def make():
            return arrow_device.stream(halves)
    else:

        def make():
            return sample

    return sample, _PRODUCERS[case.protocol](make, case.protocol, sample)


# ------------------------------------------------------------- one case


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def _read(result: Any):
    """The consumer's result as DeviceArrays, or a reason it is not Arrow data."""
    import arrow_device

    if isinstance(result, arrow_device.DeviceArray):
        return [result]
    if hasattr(result, "__arrow_c_device_stream__") or hasattr(result, "__arrow_c_stream__"):
        return list(arrow_device.stream(result))
    if any(hasattr(result, m) for m in ("__arrow_c_device_array__", "__arrow_c_array__", "__dlpack__")):
        return [arrow_device.array(result)]
    raise TypeError(f"the consumer returned a {type(result).__name__}, which has no Arrow protocol to read it back")


def run_case(fn: Callable[[Any], Any], case: Case) -> List[Tuple[str, str, str]]:
    """Runs `case` in this process: ``(id, outcome, message)`` rows."""
    from .. import _arrow_device as native

    prefix = f"consumer.{case.name}"
    rows = []
    sample, producer = _producer(case)
    try:
        result = fn(producer)
    except Exception as exc:
        poisoned = _poison_in(exc) if case.device is not None else None
        if poisoned:
            # Not a refusal: the consumer took the data and read it too early.
            rows.append((f"{prefix}.accepts", PASSED, f"consumed through {case.protocol}, then raised"))
            rows.append((f"{prefix}.values", FAILED, f"the consumer raised {poisoned}"))
        else:
            rows.append((f"{prefix}.accepts", NOT_APPLICABLE, f"refused: {_describe(exc)}"))
            rows.append((f"{prefix}.values", NOT_APPLICABLE, "nothing was read"))
        result = None
        accepted = False
        took = bool(poisoned)
    else:
        rows.append((f"{prefix}.accepts", PASSED, f"consumed through {case.protocol}"))
        accepted = took = True
    if accepted:
        if result is None:
            rows.append((f"{prefix}.values", NOT_APPLICABLE, "the consumer returned None: nothing to compare"))
        else:
            try:
                found = _read(result)
                difference = native._conformance_compare(sample, found)
            except Exception as exc:
                poisoned = _poison_in(exc) if case.device is not None else None
                rows.append((f"{prefix}.values", FAILED, f"reading the consumer's result back raised {poisoned}") if poisoned
                            else (f"{prefix}.values", NOT_APPLICABLE, f"the result could not be read back: {_describe(exc)}"))
            else:
                rows.append((f"{prefix}.values", FAILED if difference else PASSED,
                             difference or f"the consumer read the producer's {len(sample)} rows"))
            found = None
    result = None
    watches = producer.watches
    producer = None
    gc.collect()
    problems = []
    for what, watch in watches:
        found_problems = watch.problems()
        if found_problems:
            problems.append(f"{what}: {found_problems}")
    if problems:
        rows.append((f"{prefix}.release", FAILED, "; ".join(problems) + " (after the consumer's result was dropped)"))
    elif watches:
        rows.append((f"{prefix}.release", PASSED, f"{len(watches)} exported struct tree(s) released exactly once"))
    else:
        rows.append((f"{prefix}.release", NOT_APPLICABLE, "the consumer took nothing"))
    if case.device is not None:
        rows.append((f"{prefix}.host_read", PASSED if took else NOT_APPLICABLE,
                     "no host read of device memory (the process survived strict mode)" if took else "nothing was read"))
    return rows


# ------------------------------------------------------------- the workers


def _worker(fn, case_list, conn, delay_ms) -> None:
    from .. import _arrow_device as native

    native._conformance_emulate(True, delay_ms)
    for case in case_list:
        conn.send(("start", case.name))
        try:
            rows = run_case(fn, case)
        except BaseException as exc:  # a bug of the checker itself: report it
            rows = [(f"consumer.{case.name}.accepts", FAILED, f"the checker failed: {_describe(exc)}")]
        conn.send(("done", case.name, rows))
    conn.close()


def _death(exitcode: Optional[int]) -> str:
    if exitcode is not None and exitcode < 0:
        try:
            return f"killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"killed by signal {-exitcode}"
    return f"exited with status {exitcode}"


def _context(fn, start_method: Optional[str]) -> Tuple[Any, str]:
    """Spawn for a function a fresh interpreter can import (no state of this
    process leaks into the worker: thread pools, devices in use); fork for
    one it cannot (a lambda, a closure, a function of ``__main__``, which
    spawn would re-run)."""
    if start_method is None:
        start_method = "spawn"
        if getattr(fn, "__module__", None) == "__main__":
            start_method = "fork"
        else:
            try:
                pickle.dumps(fn)
            except Exception:
                start_method = "fork"
    return multiprocessing.get_context(start_method), start_method


def check_consumer(fn: Callable[[Any], Any], *, device=None, timeout: float = 120.0,
                   start_method: Optional[str] = None, subject: Optional[str] = None) -> Report:
    """Calls ``fn(producer)`` with this package's producers and checks that
    the consumer released everything it took exactly once, never read device
    memory on the host, and read the final values (it waited on the
    ``sync_event``).

    The producers are a 1,000-row record batch (int64 and utf8 with nulls,
    list<int32>) behind exactly one protocol method each (plus
    ``__arrow_c_schema__``): ``__arrow_c_array__``,
    ``__arrow_c_device_array__``, ``__arrow_c_stream__`` and
    ``__arrow_c_device_stream__`` on the CPU, and the device methods on
    `device` (default: the emulated device in strict, delayed mode). `fn`
    returns what it made of the data (anything with an Arrow protocol), or
    None; raising an exception refuses a case (a device it cannot use),
    unless the exception names the emulated device's poison (the consumer
    read before the ``sync_event`` completed: ``values`` fails).

    Each case runs in a worker process (a crash is a finding, not the end
    of the check); `timeout` bounds each case in seconds; `start_method`
    (``spawn``, ``fork``, ``forkserver``) overrides how workers start.

    >>> import pyarrow as pa
    >>> from arrow_device.conformance import check_consumer
    >>> report = check_consumer(pa.array)
    >>> report.outcome("consumer.cpu_array.release")
    'passed'
    """
    ctx, method = _context(fn, start_method)
    pending = cases(device)
    checks: List[Check] = []
    while pending:
        parent, child = ctx.Pipe(duplex=False)
        process = ctx.Process(target=_worker, args=(fn, pending, child, DELAY_MS), daemon=True)
        process.start()
        child.close()
        running: Optional[str] = None
        done = set()
        while True:
            if not parent.poll(timeout):
                process.kill()
                process.join()
                if running is not None:
                    checks.append(Check.of(f"consumer.{running}.accepts", FAILED, f"no answer within {timeout:g} s (a hang or deadlock in the consumer)"))
                    done.add(running)
                break
            try:
                message = parent.recv()
            except EOFError:
                process.join()
                if running is not None:
                    case = next(c for c in pending if c.name == running)
                    rule = "host_read" if case.device is not None else "release"
                    what = ("the consumer dereferenced device memory on the host (device pointers are PROT_NONE in strict mode)"
                            if case.device is not None else "a double release or a use after release?")
                    checks.append(Check.of(f"consumer.{running}.{rule}", FAILED,
                                           f"the worker process was {_death(process.exitcode)} while consuming: {what}"))
                    done.add(running)
                break
            if message[0] == "start":
                running = message[1]
            else:
                _, name, rows = message
                checks.extend(Check.of(*row) for row in rows)
                done.add(name)
                running = None
        parent.close()
        pending = [c for c in pending if c.name not in done]
    cpu_accepted = [c for c in checks if c.id.startswith("consumer.cpu_") and c.id.endswith(".accepts") and c.outcome == PASSED]
    checks.insert(0, Check.of("consumer.accepts", PASSED if cpu_accepted else FAILED,
                              f"took {len(cpu_accepted)} of the 4 CPU forms (workers: {method})" if cpu_accepted
                              else "took none of the CPU forms (array, device array, stream, device stream)"))
    return Report(subject or str(getattr(fn, "__qualname__", repr(fn))), checks)

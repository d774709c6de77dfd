"""What the child processes of test_share.py run: importable functions (a
"spawn" child imports them by name) and the scripts of the subprocesses that
the kill tests start and kill."""

import os

import pyarrow as pa

import arrow_device as ad


def values_of(device_array):
    """`(device type, Arrow type, values)` of a DeviceArray, read on the
    host (a record batch reads as its struct array)."""
    host = pa.array(device_array.to(ad.cpu()))
    return int(device_array.device.type), str(host.type), host.to_pylist()


def open_values(handle):
    """Opens a shared array (from its handle, a ShareHandle once unpickled)
    and returns `(pid, device type, Arrow type, values)`."""
    opened = ad.open_shared(handle)
    return (os.getpid(), *values_of(opened))


def open_values_into(queue, handle):
    """`open_values`, its result (or its error's text) put on `queue`."""
    try:
        queue.put(open_values(handle))
    except Exception as error:  # the parent reports it
        queue.put(f"{type(error).__name__}: {error}")


def share_into(queue, done):
    """Shares an array of its own, puts the handle on `queue`, and keeps it
    shared until `done` is set."""
    try:
        with ad.array(pa.array([7, 8, 9], pa.int64())).share() as shared:
            queue.put(shared.handle)
            done.wait(30)
    except Exception as error:  # the parent reports it
        queue.put(f"{type(error).__name__}: {error}")


def open_stream_values(handle):
    """Opens a shared stream and returns `(pid, [values of each batch])`."""
    opened = ad.open_shared_stream(handle)
    return os.getpid(), [values_of(batch)[2] for batch in opened]


# Scripts of the subprocesses the kill tests start (`python -c SCRIPT ARG`).

#: Opens the handle (hex in argv[1]), says HOLDING and its length, then
#: waits to be killed.
HOLDER = """
import sys, time
import arrow_device as ad
opened = ad.open_shared(bytes.fromhex(sys.argv[1]))
print("HOLDING", len(opened), flush=True)
time.sleep(120)
"""

#: Shares `exporter_array()` on the device named in argv[1] ("cpu" or
#: "emulated"), prints HANDLE and the handle's hex, then waits to be killed.
EXPORTER = """
import sys, time
import arrow_device as ad
from share_children import exporter_array
device = ad.cpu() if sys.argv[1] == "cpu" else ad.emulated(0)
shared = ad.array(exporter_array(), device=device).share()
print("HANDLE", shared.handle.hex(), flush=True)
time.sleep(120)
"""


#: Shares a stream of 1 000 one-row batches ([i] for batch i) with depth 1,
#: prints HANDLE and the handle's hex, then waits to be killed.
STREAM_EXPORTER = """
import sys, time
import pyarrow as pa
import arrow_device as ad
batches = (pa.array([i], pa.int64()) for i in range(1000))
shared = ad.stream(batches).share(depth=1)
print("HANDLE", shared.handle.hex(), flush=True)
time.sleep(120)
"""


def exporter_array():
    """What EXPORTER shares: 100 000 int64 with nulls and strings, as a
    record batch."""
    n = 100_000
    return pa.record_batch(
        {
            "i": pa.array([None if i % 7 == 0 else i for i in range(n)], pa.int64()),
            "s": pa.array([f"row {i}" for i in range(n)], pa.string()),
        }
    )

"""Arrow data on any device, exchanged zero-copy through the Arrow PyCapsule
protocol (arrays, device arrays, streams, device streams) and DLPack.

>>> import arrow_device, pyarrow as pa
>>> a = arrow_device.array(pa.array([1, 2, 3]))
>>> a.device.type
<DeviceType.CPU: 1>
>>> pa.array(a).to_pylist()
[1, 2, 3]

Sharing with other processes of this machine (Linux), zero-copy:

>>> import pickle
>>> shared = a.share()                 # open while this object lives
>>> handle = pickle.dumps(shared)      # a ShareHandle: the bytes only
>>> pa.array(arrow_device.open_shared(pickle.loads(handle))).to_pylist()
[1, 2, 3]
>>> shared.close()

Arrow Flight (``arrow_device.flight``): fetch a remote dataset onto any
device, serve any stream to any Flight client.
"""

from ._arrow_device import (
    Device,
    DeviceArray,
    DeviceStream,
    SharedArray,
    SharedStream,
    ShareHandle,
    array,
    cpu,
    cuda,
    cuda_host,
    cuda_managed,
    devices,
    emulated,
    open_shared,
    open_shared_stream,
    stream,
)
from ._types import DeviceType
from . import flight

__all__ = [
    "Device",
    "DeviceArray",
    "DeviceStream",
    "DeviceType",
    "SharedArray",
    "SharedStream",
    "ShareHandle",
    "array",
    "cpu",
    "cuda",
    "cuda_host",
    "cuda_managed",
    "devices",
    "emulated",
    "flight",
    "open_shared",
    "open_shared_stream",
    "stream",
]

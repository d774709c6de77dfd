"""Arrow data on any device, exchanged zero-copy through the Arrow PyCapsule
protocol (arrays, device arrays, streams, device streams) and DLPack.

>>> import arrow_device, pyarrow as pa
>>> a = arrow_device.array(pa.array([1, 2, 3]))
>>> a.device.type
<DeviceType.CPU: 1>
>>> pa.array(a).to_pylist()
[1, 2, 3]
"""

from ._arrow_device import (
    Device,
    DeviceArray,
    DeviceStream,
    array,
    cpu,
    cuda,
    cuda_host,
    cuda_managed,
    devices,
    emulated,
    stream,
)
from ._types import DeviceType

__all__ = [
    "Device",
    "DeviceArray",
    "DeviceStream",
    "DeviceType",
    "array",
    "cpu",
    "cuda",
    "cuda_host",
    "cuda_managed",
    "devices",
    "emulated",
    "stream",
]

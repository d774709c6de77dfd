"""The spec's device types, as an IntEnum whose values are the C ABI's."""

from enum import IntEnum


class DeviceType(IntEnum):
    """``ArrowDeviceType`` (the values are DLPack's ``DLDeviceType``): what
    ``Device.type`` and ``DeviceStream.device_type`` give. A type outside
    this list is given as its plain integer.

    >>> import arrow_device
    >>> arrow_device.emulated().type
    <DeviceType.EXT_DEV: 12>
    >>> arrow_device.DeviceType.CUDA == 2
    True
    """

    CPU = 1
    CUDA = 2
    CUDA_HOST = 3
    OPENCL = 4
    VULKAN = 7
    METAL = 8
    VPI = 9
    ROCM = 10
    ROCM_HOST = 11
    EXT_DEV = 12
    CUDA_MANAGED = 13
    ONEAPI = 14
    WEBGPU = 15
    HEXAGON = 16

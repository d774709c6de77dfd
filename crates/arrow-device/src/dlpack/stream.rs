//! The `stream` argument of `__dlpack__` (Python array API standard): the
//! consumer's stream, which the producer must order its pending work
//! before; [`dlpack_stream`] has the rules.
//!
//! ```
//! use arrow_device::abi::DeviceType;
//! use arrow_device::device::StreamSync;
//! use arrow_device::dlpack::dlpack_stream;
//!
//! assert_eq!(dlpack_stream(DeviceType::CUDA, None).unwrap(), StreamSync::Legacy);
//! assert_eq!(dlpack_stream(DeviceType::CUDA, Some(-1)).unwrap(), StreamSync::None);
//! assert!(dlpack_stream(DeviceType::CUDA, Some(0)).is_err());
//! assert_eq!(dlpack_stream(DeviceType::CPU, None).unwrap(), StreamSync::None);
//! assert!(dlpack_stream(DeviceType::CPU, Some(1)).is_err());
//! ```

use crate::abi::DeviceType;
use crate::device::StreamSync;
use crate::error::{Error, Result};

/// Which streams family `device_type` follows.
enum Family {
    Cuda,
    Rocm,
    Streamless,
}

fn family(device_type: DeviceType) -> Family {
    match device_type {
        DeviceType::CUDA | DeviceType::CUDA_HOST | DeviceType::CUDA_MANAGED => Family::Cuda,
        DeviceType::ROCM | DeviceType::ROCM_HOST => Family::Rocm,
        _ => Family::Streamless,
    }
}

/// The values `stream` may take for `device_type`, for messages (a
/// binding's message for a `stream` that is not an integer, say).
pub fn dlpack_stream_values(device_type: DeviceType) -> &'static str {
    match family(device_type) {
        Family::Cuda => {
            "None (legacy default stream), -1 (no synchronization), 1 (legacy default stream), \
             2 (per-thread default stream) or a cudaStream_t above 2"
        }
        Family::Rocm => {
            "None or 0 (default stream), -1 (no synchronization) or a hipStream_t above 2"
        }
        Family::Streamless => "None or -1",
    }
}

/// The stream a `__dlpack__(stream=...)` call names for an array on
/// `device_type`; a value the rules refuse is [`Error::Invalid`] (Python
/// `ValueError`) saying which values are allowed. The values depend on the
/// device type:
///
/// | device                        | `None`  | `-1`    | `0`     | `1`    | `2`        | `> 2`  |
/// |-------------------------------|---------|---------|---------|--------|------------|--------|
/// | CUDA, CUDA_HOST, CUDA_MANAGED | legacy  | no sync | error   | legacy | per-thread | handle |
/// | ROCM, ROCM_HOST               | default | no sync | default | error  | error      | handle |
/// | any other (CPU, EXT_DEV, ...) | no sync | no sync | error   | error  | error      | error  |
///
/// The standard: "`None`: producer must assume the legacy default stream"
/// (CUDA); "0 is disallowed due to its ambiguity" (CUDA); "`-1` ... signal
/// producer must not perform any synchronization"; "On CPU and other device
/// types without streams, only `None` is accepted". `-1` is accepted there
/// too: it asks for no synchronization, which such devices never need.
/// CUDA's pinned and managed memory take CUDA's rules: the work a producer
/// may have pending on them is on CUDA streams. ROCm's "default" is
/// [`StreamSync::Legacy`] (HIP's null stream).
pub fn dlpack_stream(device_type: DeviceType, stream: Option<i64>) -> Result<StreamSync> {
    let sync = match (family(device_type), stream) {
        (_, Some(-1)) => Some(StreamSync::None),
        (Family::Streamless, None) => Some(StreamSync::None),
        (Family::Cuda, None | Some(1)) => Some(StreamSync::Legacy),
        (Family::Cuda, Some(2)) => Some(StreamSync::PerThread),
        (Family::Rocm, None | Some(0)) => Some(StreamSync::Legacy),
        (Family::Cuda | Family::Rocm, Some(handle)) if handle > 2 => {
            // A positive i64 always fits u64.
            Some(StreamSync::Handle(handle as u64))
        }
        _ => None,
    };
    sync.ok_or_else(|| {
        let value = stream.map_or("None".to_string(), |s| s.to_string());
        let why = match (family(device_type), stream) {
            (Family::Cuda, Some(0)) => " (0 is disallowed for CUDA: it could mean None, 1 or 2)",
            (Family::Streamless, _) => " (a device without streams)",
            _ => "",
        };
        Error::Invalid {
            path: "__dlpack__(stream=...)".to_string(),
            message: format!(
                "stream must be {} for device type {device_type}{why}, got {value}",
                dlpack_stream_values(device_type)
            ),
        }
    })
}

//! Streams of device arrays: the spec's `ArrowDeviceArrayStream` (pull, one
//! batch per `get_next`) and its async device stream interface (push, with
//! credit-based back-pressure), both directions, plus bridges to arrow-rs'
//! C stream (`FFI_ArrowArrayStream`) for CPU data.
//!
//! (Spec: CDeviceDataInterface.rst, "Device Stream Interface" and "Async
//! Device Stream Interface".)

mod async_export;
mod async_import;
mod bridge;
mod export;
mod import;

pub use async_export::*;
pub use async_import::*;
pub use bridge::*;
pub use export::*;
pub use import::*;

/// A defect of a stream rather than of one array's tree: the path is the
/// stream itself (`stream: batch 3 is on device type CPU, ...`).
pub(crate) fn stream_error(message: impl Into<String>) -> crate::Error {
    crate::Error::Invalid {
        path: "stream".into(),
        message: message.into(),
    }
}

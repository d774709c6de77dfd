//! [`StreamSync`]: a stream as the Python protocols number it (the CUDA
//! Array Interface's `stream` entry, DLPack's `stream` argument). The
//! protocols read the numbers (`cai`, `dlpack::dlpack_stream`); a device
//! orders work against the stream they name (with the `cuda` feature,
//! `cuda::CudaDevice`), so the type lives here, below both.
//!
//! ```
//! use arrow_device::device::StreamSync;
//!
//! // The same type under the CUDA Array Interface's module.
//! assert_eq!(StreamSync::Legacy, arrow_device::cai::StreamSync::Legacy);
//! assert_ne!(StreamSync::Handle(1), StreamSync::Legacy);
//! ```

/// A CUDA stream as the Python protocols number them (CAI v3 `stream`,
/// DLPack's `stream` argument): which stream must be waited on, or none.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StreamSync {
    /// No synchronization: CAI `None`/absent, DLPack `-1` or a device
    /// without streams.
    None,
    /// The legacy default stream (CAI and DLPack `1`; DLPack `None` on
    /// CUDA; ROCm's default stream, DLPack `0` or `None` there).
    Legacy,
    /// The per-thread default stream (`2`).
    PerThread,
    /// A stream handle (`cudaStream_t` / `hipStream_t`) as an integer.
    Handle(u64),
}

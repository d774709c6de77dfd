//! The [CUDA Array Interface] (CAI, versions 2 and 3) as plain Rust data:
//! the `__cuda_array_interface__` dict, the rules for reading one into an
//! Arrow array, and the dict that describes an Arrow array on a CUDA device.
//! No Python here: a binding converts the dict's values ([`Value`]). The
//! memory is imported and exported on the CUDA devices by `cuda` (feature
//! `cuda`: `cai::cuda::import_cai` and `cai::cuda::export_cai`, which make
//! the masks and `|b1` bitmaps with the device's kernels); the rest of this
//! module needs no CUDA.
//!
//! * [`CudaArrayInterface`]: the dict's entries, typed;
//!   [`CudaArrayInterface::from_entries`] reads them from generic values
//!   (missing keys and wrong value types are reported naming the key) and
//!   [`CudaArrayInterface::to_entries`] writes them back.
//! * [`CudaArrayInterface::validate`]: every import rule, giving an
//!   [`ImportPlan`] (Arrow type, length, pointer, mask, stream to wait on);
//!   [`import`] builds the [`DeviceArray`](crate::DeviceArray) a plan
//!   describes once the caller has a device and has waited on the stream.
//! * [`describe`]: a one-dimensional fixed-width array on `CUDA` or
//!   `CUDA_MANAGED` memory → its (version 3) interface.
//! * [`typestr()`]: Arrow type → NumPy type string.
//!
//! ```
//! use arrow_schema::DataType;
//! use arrow_device::cai::{CudaArrayInterface, StreamSync, Value};
//!
//! // What CuPy's `cupy.arange(4, dtype="float32").__cuda_array_interface__` holds.
//! let dict = vec![
//!     ("shape".to_string(), Value::Tuple(vec![Value::Int(4)])),
//!     ("typestr".to_string(), Value::Str("<f4".into())),
//!     ("data".to_string(), Value::Tuple(vec![Value::Int(0x7f00_0000_0000), Value::Bool(false)])),
//!     ("version".to_string(), Value::Int(3)),
//!     ("strides".to_string(), Value::None),
//!     ("stream".to_string(), Value::Int(1)),
//! ];
//! let cai = CudaArrayInterface::from_entries(dict).unwrap();
//! let plan = cai.validate().unwrap();
//! assert_eq!((plan.data_type, plan.len, plan.itemsize), (DataType::Float32, 4, 4));
//! assert_eq!(plan.stream, StreamSync::Legacy);
//!
//! // Stream 0 is disallowed by the spec ("ambiguous").
//! let mut bad = cai.clone();
//! bad.stream = Some(0);
//! assert!(bad.validate().unwrap_err().to_string().contains("0 is disallowed"));
//! ```
//!
//! ## Decisions where the spec leaves room
//!
//! * **Dimensions.** One dimension; a 0-d array (`shape ()`) is one value,
//!   as for DLPack; two or more are refused ("flatten it first").
//! * **Strides.** `None` (C-contiguous) or the item size are zero-copy; any
//!   stride is accepted for at most one value. Every other stride is
//!   refused as non-contiguous rather than copied: a copy of device memory
//!   behind the caller's back is what this crate never does.
//! * **Zero-size arrays.** The spec asks producers for data pointer 0; a
//!   non-zero pointer is accepted too (nothing is read) and the plan's
//!   pointer is 0. Pointer 0 with values is an error.
//! * **Versions.** 2 and 3 are read. Versions 0 and 1 left the meaning of
//!   strides `None` and of zero-size arrays open; a later version may add
//!   entries this consumer would not honour: both are refused. A version 2
//!   dict has no synchronization ([`StreamSync::None`]); a `stream` entry in
//!   one is still honoured (waiting is never wrong).
//! * **Types.** See [`typestr()`]; `|b1` (a byte per value) is bit-packed
//!   into an Arrow `Boolean` ([`ImportPlan::bool_needs_packing`]).
//!   `descr` must be absent, `None` or the plain `[('', typestr)]`:
//!   structured types are refused.
//! * **Mask.** Element-wise (spec: "true or not true"), one byte per value
//!   (`|b1`, `|u1`, `|i1`), of the array's shape; it becomes the Arrow
//!   validity bitmap by a conversion ([`MaskPlan`]). A mask's own mask is
//!   refused.
//! * **`data`'s read-only flag** is read and ignored: Arrow never writes.
//! * **Lifetime.** The interface has no owner slot (spec, "Lifetime
//!   management"): [`import`] takes the producer object as the owner.
//!
//! [CUDA Array Interface]: https://numba.readthedocs.io/en/stable/cuda/cuda_array_interface.html
#[cfg(feature = "cuda")]
pub mod cuda;
mod entries;
mod export;
mod plan;
mod typestr;

pub use entries::Value;
pub use export::describe;
#[cfg(feature = "cuda")]
pub(crate) use export::{describe_values, refuse_nulls};
pub use plan::{import, ImportPlan, MaskPlan};
#[cfg(feature = "cuda")]
pub(crate) use plan::{import_with_bitmaps, Bitmaps};
pub use typestr::typestr;
// The stream a plan names is the devices' type (DLPack names streams too).
pub use crate::device::StreamSync;

use crate::error::Error;

/// The entries of a `__cuda_array_interface__` dict (spec v3, "Python
/// Interface Specification"), typed. Integers that Python may send out of
/// range are kept wide enough for [`CudaArrayInterface::validate`] to say
/// what is wrong with them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CudaArrayInterface {
    /// `shape`: the size of each dimension.
    pub shape: Vec<i64>,
    /// `typestr`: the NumPy type string (`<f4`, `|b1`, `<M8[ns]`).
    pub typestr: String,
    /// `data`: the device pointer (0 for a zero-size array) and the
    /// read-only flag.
    pub data: (usize, bool),
    /// `version`: 2 or 3 are read.
    pub version: u32,
    /// `strides`: bytes to the next element of each dimension; `None` for
    /// C-contiguous.
    pub strides: Option<Vec<i64>>,
    /// `descr`: the NumPy field list, `(name, typestr)` per field; `None`
    /// when absent.
    pub descr: Option<Vec<(String, String)>>,
    /// `mask`: the interface of an element-wise mask (`None`: every value
    /// is valid).
    pub mask: Option<Box<CudaArrayInterface>>,
    /// `stream` (version 3): `None` for no synchronization, 1 the legacy
    /// default stream, 2 the per-thread default stream, anything else a
    /// `cudaStream_t`; 0 is disallowed.
    pub stream: Option<u64>,
}

/// The dict this module reads, for messages.
const ROOT: &str = "__cuda_array_interface__";

/// `__cuda_array_interface__['key']` (or a mask's entry).
fn key(prefix: &str, name: &str) -> String {
    format!("{prefix}['{name}']")
}

/// A malformed dict entry: `ValueError` in Python.
fn invalid(key: &str, message: impl Into<String>) -> Error {
    Error::Invalid {
        path: key.to_string(),
        message: message.into(),
    }
}

//! [DLPack]: the tensor interchange of NumPy, PyTorch, CuPy, JAX and the
//! Python array API, both ways, zero-copy.
//!
//! * [`abi`]: the `#[repr(C)]` structs of `dlpack.h` 1.1
//!   ([`DLManagedTensorVersioned`], the legacy
//!   [`DLManagedTensor`], ...) and the capsule names, also re-exported here.
//! * [`export_dlpack`]: a [`DeviceArray`] → an owned [`DlpackTensor`], whose
//!   pointer `into_raw_*` hands to a consumer (a PyCapsule, say).
//! * [`import_dlpack_versioned`] / [`import_dlpack`]: an owned tensor → a
//!   [`DeviceArray`] on the tensor's device.
//!
//! ```
//! use arrow_array::{Array, Float32Array};
//! use arrow_device::dlpack::{export_dlpack, import_dlpack_versioned, DlpackAbi};
//! use arrow_device::{DeviceArray, DeviceType};
//!
//! let values = Float32Array::from(vec![0.5, 1.5, 2.5, 3.5]);
//! let array = DeviceArray::from_array(&values);
//!
//! // Producer: a read-only DLPack 1.1 tensor over the same memory.
//! let tensor = export_dlpack(&array.slice(1, 3).unwrap(), DlpackAbi::Versioned).unwrap();
//! assert_eq!(tensor.shape(), [3]);
//! assert_eq!((tensor.dl_tensor().device.device_type, tensor.dl_tensor().device.device_id), (DeviceType::CPU, 0));
//! let raw = tensor.into_raw_versioned().unwrap();
//!
//! // Consumer: takes the tensor over; its deleter runs when `back` is dropped.
//! // SAFETY: `raw` is a live tensor from this crate, handed over once.
//! let back = unsafe { import_dlpack_versioned(raw) }.unwrap();
//! assert_eq!(back.device_type(), DeviceType::CPU);
//! assert_eq!(back.to_host().unwrap().as_ref(), &values.slice(1, 3) as &dyn Array);
//! ```
//!
//! ## What crosses, and decisions where DLPack and Arrow differ
//!
//! * **Types.** One-dimensional arrays of `int8`..`int64`,
//!   `uint8`..`uint64` and `float16/32/64`, both ways, zero-copy. Arrays with
//!   nulls are refused (DLPack has no validity mask); a validity buffer without
//!   nulls is fine. Boolean arrays are refused on export (bit-packed in Arrow,
//!   a byte per value in DLPack); 8-bit `bool` tensors on the CPU are *copied*
//!   into Arrow booleans on import. Temporal types are refused on export:
//!   DLPack has no unit or time zone, so a timestamp would arrive as a bare
//!   integer; cast first when that is what is wanted. This matches pyarrow.
//! * **Data pointer.** Export points `data` at the first element (the array's
//!   offset applied) with `byte_offset` 0, as NumPy, PyTorch and CuPy produce
//!   and as every consumer reads; dlpack.h's 256-byte alignment of `data` is
//!   not something consumers may rely on (its own note). An empty tensor has
//!   NULL data. Import adds `byte_offset` to `data` and accepts any
//!   alignment: conversions to arrow-rs copy misaligned buffers.
//! * **Strides.** Export always writes `strides = [1]`: NULL meant "compact"
//!   before DLPack 1.2, which forbids NULL for `ndim != 0`. Import accepts
//!   NULL or `[1]` (any stride for at most one value) and refuses the rest
//!   as non-contiguous rather than copying. A 0-d tensor imports as one
//!   value; two or more dimensions are refused.
//! * **Version and flags.** Versioned tensors are written as 1.1 with
//!   `DLPACK_FLAG_BITMASK_READ_ONLY`: Arrow data is immutable and may be
//!   shared by other holders, so no consumer may write through it (the legacy
//!   struct cannot say so). Import refuses any major version but 1 after
//!   reading only `version` and `deleter`, as dlpack.h requires.
//! * **Devices.** Arrow's device type values are DLPack's. Export writes
//!   `device_id` 0 for CPU, pinned and managed memory (dlpack.h) and the
//!   array's id otherwise; import maps the CPU's 0 to Arrow's -1.
//! * **Ownership.** The exported tensor's context holds a clone of the
//!   [`DeviceArray`], so the memory lives until the consumer calls the deleter
//!   (once, from any thread). An imported tensor's deleter runs exactly once:
//!   when the last handle sharing its memory is dropped, or before an import
//!   error is returned.
//!
//! ## Synchronization
//!
//! DLPack has no event: a producer must have made its data ready for the
//! consumer's `stream` before `__dlpack__` returns. [`export_dlpack`] honours
//! the array's `sync_event` by waiting on the host
//! ([`DeviceArray::synchronize`]), correct for every consumer stream;
//! [`export_dlpack_for_stream`] makes the consumer's CUDA stream wait on
//! the event instead, without blocking the host (feature `cuda`);
//! [`export_dlpack_unsynchronized`] leaves the ordering to the caller.
//! On import the tensor is taken to be ready on the stream the caller
//! passed to the producer; a CUDA caller then orders the array after that
//! stream (`DeviceArray::ordered_after_stream`, feature `cuda`).
//!
//! [DLPack]: https://dmlc.github.io/dlpack/latest/
pub mod abi;
mod dtype;
mod export;
mod import;
mod stream;

pub use abi::{
    DLDataType, DLDevice, DLManagedTensor, DLManagedTensorVersioned, DLPackVersion, DLTensor,
    CAPSULE_NAME, DLPACK_FLAG_BITMASK_IS_COPIED, DLPACK_FLAG_BITMASK_READ_ONLY, USED_CAPSULE_NAME,
    USED_VERSIONED_CAPSULE_NAME, VERSIONED_CAPSULE_NAME,
};
pub use dtype::dlpack_data_type;
pub use export::{
    dlpack_device, export_dlpack, export_dlpack_for_stream, export_dlpack_unsynchronized,
    DlpackAbi, DlpackTensor,
};
pub use import::{import_dlpack, import_dlpack_versioned};
pub use stream::{dlpack_stream, dlpack_stream_values};

#[cfg(doc)]
use crate::array::DeviceArray;

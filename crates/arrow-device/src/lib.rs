//! # arrow-device
//!
//! The [Apache Arrow C Device Data Interface] for Rust: zero-copy export and
//! import of arrow-rs data on any device, with the spec's device, ownership
//! and synchronization rules.
//!
//! * [`abi`]: the `#[repr(C)]` structs (`ArrowDeviceArray`,
//!   `ArrowDeviceArrayStream`, the async structs) and [`DeviceType`].
//! * [`export_array`] / [`export_record_batch`] (zero-copy on the CPU) and
//!   [`export_array_to`] / [`export_record_batch_to`] (copied onto a device,
//!   with a real `sync_event`).
//! * [`DeviceArray::from_array`] / [`DeviceArray::from_record_batch`]: the
//!   safe way in for arrow-rs data this process holds (no C structs).
//! * [`DeviceArray`]: an imported array tree that owns the foreign structs,
//!   releases them exactly once, knows its device and every buffer's size,
//!   and copies to the host ([`DeviceArray::to_host`]) or another device
//!   ([`DeviceArray::to_device`]) without ever dereferencing device memory on
//!   the host.
//! * [`HostStaging`]: host memory (pinned where the device offers it) that
//!   copies of a stream's batches to the host reuse
//!   ([`DeviceArray::to_record_batch_staged`]).
//! * [`ValidationLevel`]: none / minimal / default / full, as in nanoarrow.
//! * [`device`]: the [`device::Device`] trait, the CPU, and an emulated
//!   asynchronous device (`EXT_DEV`) for testing device paths without a GPU.
//!
//! CPU data is arrow-rs data: there is no second CPU array type.
//!
//! ```
//! use std::sync::Arc;
//! use arrow_array::{ArrayRef, Int64Array, RecordBatch, StringArray};
//! use arrow_device::{export_record_batch, DeviceArray, DeviceType, ValidationLevel};
//!
//! let batch = RecordBatch::try_from_iter([
//!     ("id", Arc::new(Int64Array::from(vec![1, 2, 3])) as ArrayRef),
//!     ("name", Arc::new(StringArray::from(vec![Some("a"), None, Some("c")])) as ArrayRef),
//! ])
//! .unwrap();
//!
//! // Producer side: two C structs, ready to hand to any consumer.
//! let (array, schema) = export_record_batch(&batch).unwrap();
//! assert_eq!(array.device_type, DeviceType::CPU);
//!
//! // Consumer side: validate, then use as arrow-rs data without a copy.
//! // SAFETY: the structs come from this crate's exporter, a conforming producer.
//! let imported = unsafe { DeviceArray::try_new(array, schema, ValidationLevel::Default) }.unwrap();
//! assert_eq!(imported.len(), 3);
//! assert_eq!(imported.to_record_batch().unwrap(), batch);
//! ```
//!
//! ## Decisions where the spec is silent or slips
//!
//! * **Variadic buffer sizes of view arrays.** Where the sizes buffer of a
//!   `string_view`/`binary_view` array lives is unspecified; Arrow C++ puts it
//!   in host memory even for device arrays. This crate always *exports* it in
//!   host memory that the array's device can read too where the device
//!   offers some ([`device::Device::allocate_host_accessible`]): pinned memory
//!   for the CUDA devices, readable by the consumer's host code (as Arrow C++
//!   reads it) and by kernels; ordinary heap memory for the CPU, the
//!   emulated device, or when pinning fails. On *import* it asks the device
//!   whether the pointer is host-accessible
//!   ([`device::Device::is_host_accessible_at`]): host memory is read directly,
//!   device memory through the device's copy API in the same batched read as
//!   the offsets.
//! * **Misaligned buffers** from a foreign producer are copied to aligned
//!   memory when converted to arrow-rs data (never undefined behaviour).
//! * **`reserved`** is written as zero and ignored on import, so that a future
//!   use of those bytes does not break this consumer.
//! * **A non-NULL `sync_event` on a CPU array** (whose event type is "N/A") is
//!   rejected at import: it cannot be honoured.
//!
//! ## Names
//!
//! * **Export** (arrow-rs data or ours → C structs a consumer takes over):
//!   free functions named `export_*` ([`export_array`],
//!   [`stream::export_reader`], [`stream::export_async_record_batches`]),
//!   or [`DeviceArray::export`] for an array already imported. A `_to`
//!   suffix copies onto the device passed as `&DeviceRef`.
//! * **Import** (C structs → ours): constructors. `unsafe fn try_new` takes
//!   the structs by value, `try_from_raw` moves them out of pointers,
//!   [`DeviceArray::try_from_ffi`] takes a plain C Data Interface array;
//!   [`stream::DeviceStreamReader`] and [`stream::AsyncDeviceStream::new`]
//!   follow the same words. The C-stream bridges are `TryFrom` impls.
//!   The CUDA Array Interface and DLPack adapters keep their own
//!   `import_*` / `export_*` functions in [`cai`] and [`dlpack`].
//!
//! Words, one per idea:
//!
//! | word | means |
//! |---|---|
//! | **release** | calling a C struct's `release` callback, exactly once per struct; a *moved* struct is marked released instead (spec: "Moving an array") |
//! | **owner** | a value whose life is the memory's: the imported structs, an arrow-rs `ArrayData`, our device allocation ([`DeviceArray`] holds one; exported structs hold one per node) |
//! | **sync event** | the producer's `sync_event`; **wait** on it either on the host or by making a work stream wait |
//! | **host-accessible** | memory the host may read directly once its events have completed (CPU, `CUDA_HOST`, `CUDA_MANAGED`, `ROCM_HOST`: [`DeviceType::is_host_accessible`]) |
//! | **array stream** | a sequence of arrays: the spec's device stream ([`ArrowDeviceArrayStream`]) and its async form, module [`stream`] |
//! | **work stream** | a device's queue of copies and kernels ([`device::Stream`], a `CUstream`); the `stream` that DLPack and the CUDA Array Interface pass is the handle of one |
//! | **device read** | reading a data-dependent size (an offset, a variadic size, a run end) out of an array's memory, through the device's copy API |
//! | **level** | how much an import checks ([`ValidationLevel`], with the table of checks) |
//!
//! ## Where each rule lives
//!
//! | rule | the one place |
//! |---|---|
//! | release of what we imported | the [`DeviceArray`]'s storage holds the [`ArrowDeviceArray`] (and any moved-out structs) until its last handle, slice, child or arrow-rs buffer goes; [`ArrowDeviceArrayStream`]'s `Drop` for streams; every error path of an import drops the struct it moved in |
//! | release of what we exported | one release callback per struct kind, in `array/export.rs` (arrays), `schema/writer` (schemas), `stream/export.rs` (array streams), `stream/async_export.rs` (async tasks), `dlpack/export.rs` (DLPack deleters) |
//! | waiting on a sync event | `device::SyncEvent` (`device/sync_event.rs`): the only code that blocks the host on an event or makes a work stream wait, and that remembers a host wait for every later reader; reached through [`DeviceArray::synchronize`], [`DeviceArray::to_host`], [`DeviceArray::to_device`], the import and the DLPack and CUDA Array Interface exports |
//! | device reads of sizes | one batched reader, `array/device_reads.rs`: the import's sizes and the string narrowing of [`DeviceArray::to_host`] |
//! | memory that queued work writes | `array/owner.rs`: dropped only after the work, leaked if even the wait fails |
//! | which checks a level makes | [`ValidationLevel`] |
//! | handing an opaque array on | [`DeviceArray::export`] and DLPack, one rule (`DeviceArray::check_hand_on`) |
//!
//! [Apache Arrow C Device Data Interface]: https://arrow.apache.org/docs/format/CDeviceDataInterface.html
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

pub mod abi;
pub mod array;
pub mod cai;
pub mod conformance;
pub mod device;
pub mod dlpack;
pub mod error;
pub mod schema;
pub mod share;
pub mod stream;
pub mod validate;

pub use abi::{ArrowDeviceArray, ArrowDeviceArrayStream, DeviceType};
pub use array::{
    check_representation, export_array, export_array_to, export_record_batch,
    export_record_batch_to, same_data, BufferInfo, DeviceArray, HostStaging,
};
pub use error::{Error, Result};
pub use validate::ValidationLevel;

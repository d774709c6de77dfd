//! DLPack 1.3's C exchange API (dlpack.h, "`__dlpack_c_exchange_api__` fast
//! exchange protocol"), both ways: a table of C functions that a tensor
//! type publishes on the type, so that a consumer takes a tensor over with
//! one C call instead of `__dlpack__()`, a capsule and its renaming.
//!
//! * The table: [`DLPackExchangeAPI`], in a PyCapsule named
//!   `"dlpack_exchange_api"` ([`CAPSULE_NAME`]) set on the type as
//!   `__dlpack_c_exchange_api__`; an older draft of dlpack.h named the
//!   attribute `__c_dlpack_exchange_api__` (a capsule, or the address as an
//!   int). It is valid for the life of the process.
//! * Consumer (`import.rs`, [`import`]): `arrow_device.array(obj)` reads
//!   the table of `type(obj)` before falling back to `obj.__dlpack__()`.
//! * Producer (`export.rs`, [`api_capsule`]): `arrow_device.DeviceArray`
//!   publishes its own table under both names.
//!
//! The functions named `_no_sync` order nothing: the consumer asks the
//! producer's `current_work_stream` for the stream the data is ready on and
//! queues its work there. The rules are those of `__dlpack__(stream=...)`
//! (`dlpack.rs`), with the roles turned around: on import a CUDA array is
//! ordered after the producer's current stream (an event recorded there is
//! its `sync_event`); on export our current stream is the CUDA device's
//! interface stream, made to wait on the array's `sync_event` before the
//! tensor is handed out.
//!
//! Every function of the table is called with the GIL held (dlpack.h: they
//! create and read Python objects), returns 0, or -1 with a Python exception
//! set, and never unwinds into its C caller. The allocator is the exception:
//! it touches no Python object and reports through its `SetError` callback.
//!
//! ```python
//! import ctypes, arrow_device as ad
//!
//! capsule = ad.DeviceArray.__dlpack_c_exchange_api__
//! get = ctypes.pythonapi.PyCapsule_GetPointer
//! get.restype, get.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
//! major, minor = (ctypes.c_uint32 * 2).from_address(get(capsule, b"dlpack_exchange_api"))
//! assert (major, minor) == (1, 3)
//! ```

use std::ffi::{c_char, c_int, c_void, CStr};
use std::mem::{offset_of, size_of};

use arrow_device::dlpack::{DLManagedTensorVersioned, DLPackVersion, DLTensor};
use arrow_device::DeviceType;

mod export;
mod import;

pub use export::api_capsule;
pub use import::import;

/// The name of the table's PyCapsule (dlpack.h, `DLPackExchangeAPI`).
pub const CAPSULE_NAME: &CStr = c"dlpack_exchange_api";
/// The type attribute that holds the table (dlpack.h 1.3).
pub const ATTRIBUTE: &str = "__dlpack_c_exchange_api__";
/// The attribute's name in an older draft of dlpack.h, still set by
/// cuda-core next to [`ATTRIBUTE`]; read second.
pub const DRAFT_ATTRIBUTE: &str = "__c_dlpack_exchange_api__";

/// The table version this module reads and writes: the layout of dlpack.h
/// 1.3. A table of another major version is read only through its
/// `prev_api` chain.
pub const VERSION: DLPackVersion = DLPackVersion { major: 1, minor: 3 };

/// `DLPackExchangeAPIHeader`: the part of the table that stays the same
/// across versions.
#[repr(C)]
#[derive(Debug)]
pub struct DLPackExchangeAPIHeader {
    /// The table's version; a consumer checks `major` before reading on.
    pub version: DLPackVersion,
    /// An older table of the same producer, or NULL: a consumer that does
    /// not know `version.major` may walk this chain to one it knows.
    pub prev_api: *mut DLPackExchangeAPIHeader,
}

/// `SetError(error_ctx, kind, message)`: how the allocator reports failure.
pub type SetError = unsafe extern "C" fn(*mut c_void, *const c_char, *const c_char);
/// `DLPackManagedTensorAllocator`.
pub type ManagedTensorAllocator = unsafe extern "C" fn(
    *mut DLTensor,
    *mut *mut DLManagedTensorVersioned,
    *mut c_void,
    Option<SetError>,
) -> c_int;
/// `DLPackManagedTensorFromPyObjectNoSync`.
pub type ManagedTensorFromPyObject =
    unsafe extern "C" fn(*mut c_void, *mut *mut DLManagedTensorVersioned) -> c_int;
/// `DLPackManagedTensorToPyObjectNoSync` (steals the tensor).
pub type ManagedTensorToPyObject =
    unsafe extern "C" fn(*mut DLManagedTensorVersioned, *mut *mut c_void) -> c_int;
/// `DLPackDLTensorFromPyObjectNoSync`.
pub type DLTensorFromPyObject = unsafe extern "C" fn(*mut c_void, *mut DLTensor) -> c_int;
/// `DLPackCurrentWorkStream`.
pub type CurrentWorkStream = unsafe extern "C" fn(DeviceType, i32, *mut *mut c_void) -> c_int;

/// `DLPackExchangeAPI`: the header and five functions; all but
/// `dltensor_from_py_object_no_sync` must be non-NULL (dlpack.h).
#[repr(C)]
#[derive(Debug)]
pub struct DLPackExchangeAPI {
    /// Version and chain.
    pub header: DLPackExchangeAPIHeader,
    /// Allocates a tensor like a prototype (dtype, ndim, shape, device).
    pub managed_tensor_allocator: Option<ManagedTensorAllocator>,
    /// A Python object of the type → an owned tensor.
    pub managed_tensor_from_py_object_no_sync: Option<ManagedTensorFromPyObject>,
    /// An owned tensor (stolen) → a new Python object of the type.
    pub managed_tensor_to_py_object_no_sync: Option<ManagedTensorToPyObject>,
    /// A Python object → a borrowed view, valid until control returns.
    pub dltensor_from_py_object_no_sync: Option<DLTensorFromPyObject>,
    /// The producer's current stream on a device (NULL for the CPU).
    pub current_work_stream: Option<CurrentWorkStream>,
}

// Layouts of dlpack.h 1.3 on 64-bit targets.
#[cfg(target_pointer_width = "64")]
const _: () = {
    assert!(size_of::<DLPackExchangeAPIHeader>() == 16);
    assert!(offset_of!(DLPackExchangeAPIHeader, prev_api) == 8);
    assert!(size_of::<DLPackExchangeAPI>() == 56);
    assert!(offset_of!(DLPackExchangeAPI, managed_tensor_allocator) == 16);
    assert!(offset_of!(DLPackExchangeAPI, managed_tensor_from_py_object_no_sync) == 24);
    assert!(offset_of!(DLPackExchangeAPI, managed_tensor_to_py_object_no_sync) == 32);
    assert!(offset_of!(DLPackExchangeAPI, dltensor_from_py_object_no_sync) == 40);
    assert!(offset_of!(DLPackExchangeAPI, current_work_stream) == 48);
};

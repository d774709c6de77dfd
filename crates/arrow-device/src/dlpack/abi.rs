//! The DLPack ABI (`dlpack.h`, v1.1) as `#[repr(C)]` Rust types.
//!
//! These are plain-old-data mirrors with public fields, as C producers and
//! consumers see them; ownership is handled one level up, by
//! [`DlpackTensor`](super::DlpackTensor) on export and by the import
//! functions, which take the deleter over. Layouts are checked at compile time
//! (64-bit targets).
//!
//! Device types are this crate's [`DeviceType`]: Arrow's device type values
//! were chosen equal to DLPack's `DLDeviceType` (`kDLCPU` = 1, `kDLCUDA` = 2,
//! ..., `kDLExtDev` = 12, ...), and `DeviceType` is a transparent `i32`, so the
//! field has exactly the C enum's layout and carries any value a producer sends
//! (DLPack's `kDLMAIA` = 17 and `kDLTrn` = 18 included).
//!
//! ```
//! use arrow_device::dlpack::abi::{type_code, DLDataType, DLTensor, DLManagedTensorVersioned};
//!
//! assert_eq!(DLDataType::new(type_code::FLOAT, 32), DLDataType { code: 2, bits: 32, lanes: 1 });
//! assert_eq!(std::mem::size_of::<DLTensor>(), 48);
//! assert_eq!(std::mem::size_of::<DLManagedTensorVersioned>(), 80);
//! ```

use std::ffi::{c_void, CStr};
use std::mem::{offset_of, size_of};

use crate::abi::DeviceType;

/// `DLPACK_MAJOR_VERSION`: the ABI major version this crate writes and reads.
/// A versioned tensor of another major version must not be read beyond its
/// `version` and `deleter` (dlpack.h, "DLPackVersion").
pub const DLPACK_MAJOR_VERSION: u32 = 1;

/// `DLPACK_MINOR_VERSION`: 1, the release whose header these structs and
/// type codes follow (1.1 added the float8/6/4 codes, which are recognised and
/// refused by name). Minor versions only add enumeration values, so a 1.0
/// consumer reads our 1.1 tensors unchanged.
pub const DLPACK_MINOR_VERSION: u32 = 1;

/// `DLPACK_FLAG_BITMASK_READ_ONLY`: the consumer must not write to the data.
pub const DLPACK_FLAG_BITMASK_READ_ONLY: u64 = 1 << 0;

/// `DLPACK_FLAG_BITMASK_IS_COPIED`: the producer made a copy that the consumer
/// owns alone.
pub const DLPACK_FLAG_BITMASK_IS_COPIED: u64 = 1 << 1;

/// `DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED`: a sub-byte type (fp4, fp6) is
/// padded to one byte per value rather than packed.
pub const DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED: u64 = 1 << 2;

/// PyCapsule name of an unconsumed legacy [`DLManagedTensor`] (Python
/// specification: "dltensor"); statically allocated, as the spec requires.
pub const CAPSULE_NAME: &CStr = c"dltensor";
/// PyCapsule name after a consumer took a legacy tensor over.
pub const USED_CAPSULE_NAME: &CStr = c"used_dltensor";
/// PyCapsule name of an unconsumed [`DLManagedTensorVersioned`].
pub const VERSIONED_CAPSULE_NAME: &CStr = c"dltensor_versioned";
/// PyCapsule name after a consumer took a versioned tensor over.
pub const USED_VERSIONED_CAPSULE_NAME: &CStr = c"used_dltensor_versioned";

/// `DLDataTypeCode`: the values of [`DLDataType::code`], under the header's
/// names without the `kDL` prefix (`kDLFloat` is [`type_code::FLOAT`]).
pub mod type_code {
    /// `kDLInt`: signed integer.
    #[doc(alias = "kDLInt")]
    pub const INT: u8 = 0;
    /// `kDLUInt`: unsigned integer.
    #[doc(alias = "kDLUInt")]
    pub const UINT: u8 = 1;
    /// `kDLFloat`: IEEE floating point.
    #[doc(alias = "kDLFloat")]
    pub const FLOAT: u8 = 2;
    /// `kDLOpaqueHandle`: opaque handle, reserved for testing.
    #[doc(alias = "kDLOpaqueHandle")]
    pub const OPAQUE_HANDLE: u8 = 3;
    /// `kDLBfloat`: bfloat16.
    #[doc(alias = "kDLBfloat")]
    pub const BFLOAT: u8 = 4;
    /// `kDLComplex`: complex number (a compact pair of floats).
    #[doc(alias = "kDLComplex")]
    pub const COMPLEX: u8 = 5;
    /// `kDLBool`: boolean, one byte per value by convention.
    #[doc(alias = "kDLBool")]
    pub const BOOL: u8 = 6;
    /// `kDLFloat8_e3m4` (DLPack 1.1), the first of the 8-, 6- and 4-bit float
    /// codes, which run up to [`FLOAT4_E2M1FN`].
    #[doc(alias = "kDLFloat8_e3m4")]
    pub const FLOAT8_E3M4: u8 = 7;
    /// `kDLFloat4_e2m1fn` (DLPack 1.1), the last code of dlpack.h 1.1.
    #[doc(alias = "kDLFloat4_e2m1fn")]
    pub const FLOAT4_E2M1FN: u8 = 17;
}

/// `DLPackVersion`: the ABI version of a [`DLManagedTensorVersioned`].
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DLPackVersion {
    /// Changes when the layout of `DLManagedTensorVersioned` changes.
    pub major: u32,
    /// Changes when enumeration values are added.
    pub minor: u32,
}

impl DLPackVersion {
    /// The version this crate writes: 1.1.
    pub const CURRENT: DLPackVersion = DLPackVersion {
        major: DLPACK_MAJOR_VERSION,
        minor: DLPACK_MINOR_VERSION,
    };
}

/// `DLDevice`: where a tensor's data lives.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DLDevice {
    /// `DLDeviceType`, with the same values as Arrow's device types.
    pub device_type: DeviceType,
    /// The device ordinal; 0 for CPU, pinned and managed memory (dlpack.h).
    pub device_id: i32,
}

/// `DLDataType`: the element type, as a type code, a bit width and a number of
/// vector lanes.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DLDataType {
    /// One of the [`type_code`]s.
    pub code: u8,
    /// Bits per lane: 8, 16, 32, 64, ...
    pub bits: u8,
    /// Vector lanes; 1 for scalars.
    pub lanes: u16,
}

impl DLDataType {
    /// A scalar type (one lane).
    pub const fn new(code: u8, bits: u8) -> Self {
        Self {
            code,
            bits,
            lanes: 1,
        }
    }
}

/// `DLTensor`: a strided n-dimensional view of memory; owns nothing.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct DLTensor {
    /// The data (a device pointer for non-CPU devices); NULL for an empty
    /// tensor.
    pub data: *mut c_void,
    /// Where `data` lives.
    pub device: DLDevice,
    /// The number of dimensions.
    pub ndim: i32,
    /// The element type.
    pub dtype: DLDataType,
    /// `ndim` extents.
    pub shape: *mut i64,
    /// `ndim` strides in elements (not bytes). NULL meant "compact row-major"
    /// before DLPack 1.2; producers should always set it.
    pub strides: *mut i64,
    /// Bytes from `data` to the first element.
    pub byte_offset: u64,
}

/// `DLManagedTensor`: the legacy (unversioned) owned tensor, deprecated since
/// DLPack 1.0 but still what consumers asking for `max_version` below 1.0
/// take.
#[repr(C)]
#[derive(Debug)]
pub struct DLManagedTensor {
    /// The tensor.
    pub dl_tensor: DLTensor,
    /// The producer's context (may be NULL).
    pub manager_ctx: *mut c_void,
    /// Frees `manager_ctx` and the struct itself; called once by the
    /// consumer. May be NULL when the producer has nothing to free.
    pub deleter: Option<unsafe extern "C" fn(*mut DLManagedTensor)>,
}

/// `DLManagedTensorVersioned`: the owned tensor of DLPack 1.x.
#[repr(C)]
#[derive(Debug)]
pub struct DLManagedTensorVersioned {
    /// The ABI version; a consumer must check `major` before reading any
    /// field but `deleter`.
    pub version: DLPackVersion,
    /// The producer's context (may be NULL).
    pub manager_ctx: *mut c_void,
    /// Frees `manager_ctx` and the struct itself; called once by the
    /// consumer. May be NULL.
    pub deleter: Option<unsafe extern "C" fn(*mut DLManagedTensorVersioned)>,
    /// `DLPACK_FLAG_BITMASK_*` bits.
    pub flags: u64,
    /// The tensor.
    pub dl_tensor: DLTensor,
}

// Layouts of dlpack.h v1.1 on 64-bit targets.
#[cfg(target_pointer_width = "64")]
const _: () = {
    assert!(size_of::<DLPackVersion>() == 8);
    assert!(size_of::<DLDevice>() == 8);
    assert!(offset_of!(DLDevice, device_id) == 4);
    assert!(size_of::<DLDataType>() == 4);
    assert!(offset_of!(DLDataType, bits) == 1);
    assert!(offset_of!(DLDataType, lanes) == 2);
    assert!(size_of::<DLTensor>() == 48);
    assert!(offset_of!(DLTensor, device) == 8);
    assert!(offset_of!(DLTensor, ndim) == 16);
    assert!(offset_of!(DLTensor, dtype) == 20);
    assert!(offset_of!(DLTensor, shape) == 24);
    assert!(offset_of!(DLTensor, strides) == 32);
    assert!(offset_of!(DLTensor, byte_offset) == 40);
    assert!(size_of::<DLManagedTensor>() == 64);
    assert!(offset_of!(DLManagedTensor, manager_ctx) == 48);
    assert!(offset_of!(DLManagedTensor, deleter) == 56);
    assert!(size_of::<DLManagedTensorVersioned>() == 80);
    assert!(offset_of!(DLManagedTensorVersioned, manager_ctx) == 8);
    assert!(offset_of!(DLManagedTensorVersioned, deleter) == 16);
    assert!(offset_of!(DLManagedTensorVersioned, flags) == 24);
    assert!(offset_of!(DLManagedTensorVersioned, dl_tensor) == 32);
};

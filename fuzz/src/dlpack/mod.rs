//! Target `dlpack`: DLPack tensors through [`import_dlpack_versioned`] and
//! [`import_dlpack`], built as a producer would: a managed struct whose
//! deleter frees the data, shape and strides.
//!
//! This file holds the harness ([`run`]) and its oracles; `decode.rs` the
//! byte layout below, `build.rs` the tensor as a producer builds it,
//! `model.rs` what the import must accept, `seeds.rs` the named inputs.
//!
//! ## Byte layout
//!
//! Integers are little-endian; `bytes` is a u16 length and that many bytes.
//!
//! ```text
//! case        := header:u8 [version] device ndim dtype dims byte_offset data
//!                values
//!   header bit 0     a DLManagedTensorVersioned (else the legacy
//!                    DLManagedTensor)
//!          bit 1     the deleter is NULL
//!          bits 2-4  7: the pointer handed over is NULL (nothing follows)
//!          bit 5     strides is NULL
//!          bit 6     shape is NULL
//! version     := major:u32 minor:u32 flags:u64       (versioned only)
//! device      := device_type:i32 device_id:i32
//! ndim        := i32
//! dtype       := code:u8 bits:u8 lanes:u16
//! dims        := per dimension (none when ndim < 0 or ndim > 64):
//!                shape:i64, then stride:i64 unless strides is NULL
//! byte_offset := u64
//! data        := mode:u8 % 3: 0 real memory, 1 NULL, 2 an opaque
//!                address: u64
//! values      := bytes: the contents of real memory, repeated to fill it
//! ```
//!
//! ## Memory that is real by the spec
//!
//! A consumer cannot check that `data` holds what `shape`, `strides`,
//! `dtype` and `byte_offset` say, so a tensor whose memory is shorter than
//! its claims is the producer's bug, never built here. The harness computes
//! the bytes a conforming reader may touch (from `data + byte_offset`, the
//! lowest and highest element over every dimension, with the strides, or
//! the compact row-major ones when NULL; elements of `ceil(bits * lanes /
//! 8)` bytes; nothing when a dimension is 0) and:
//!
//! * backs them with real, initialised memory when they fit 64 KiB (the
//!   region may start before `data`, for negative strides);
//! * otherwise, or for an opaque address, moves a tensor on a device whose
//!   memory the host may read (CPU, CUDA_HOST, ROCM_HOST, EXT_DEV,
//!   CUDA_MANAGED) to VULKAN, which nothing in this crate implements, so
//!   the pointer is carried and never dereferenced;
//! * keeps the lies a consumer can see before reading: NULL `data` with
//!   values (dlpack.h allows NULL for empty tensors only), NULL `shape`,
//!   negative extents, and `ndim` out of `0..=64`, for which `shape` and
//!   `strides` are NULL (an `ndim` of millions cannot be backed; NULL makes
//!   any read a fault rather than a silent overrun). The library rejects
//!   those before any read; if it did not, the oracles below would fault.
//!
//! ## Oracles
//!
//! * Nothing panics; a NULL pointer is an error.
//! * The deleter runs exactly once: before an error is returned, at once
//!   for a `bool` tensor (copied), and otherwise only when the array and
//!   everything sharing its memory is dropped. The deleter frees the data,
//!   shape and strides and poisons the tensor, so a later read is a
//!   use-after-free (ASan) or a wrong value.
//! * What dlpack.h and the import's contract refuse is refused: a major
//!   version but 1, `ndim` not 0 or 1, a dtype without an Arrow type, NULL
//!   shape with `ndim` 1, a negative extent, a non-unit stride over more
//!   than one value, more bytes than a `usize` counts or than fit before
//!   the end of the address space, NULL data with values, a `bool` tensor
//!   off the CPU.
//! * An accepted tensor has the expected length, type, device and no
//!   nulls, its values buffer points at `data + byte_offset`, and its
//!   values on host-readable memory equal the bytes written there.
//! * It re-exports ([`export_dlpack`]) as a 1-d tensor of the same dtype
//!   over the same memory, which imports back to the same values.

use arrow_array::ArrayRef;
use arrow_device::abi::DeviceType;
use arrow_device::dlpack::{
    export_dlpack, import_dlpack, import_dlpack_versioned, DLDataType, DLManagedTensor,
    DLManagedTensorVersioned, DLPackVersion, DlpackAbi, DLPACK_FLAG_BITMASK_READ_ONLY,
};
use arrow_device::DeviceArray;
use arrow_schema::DataType;

use crate::memory;

mod build;
mod decode;
mod model;
mod seeds;

use build::{build, Built, Managed};
pub use decode::{decode, encode, DataSpec, TensorSpec};
use model::expected;
pub use seeds::seeds;

pub fn run(data: &[u8]) {
    let Some(spec) = decode(data) else {
        // SAFETY: NULL is an error, for both structs.
        assert!(unsafe { import_dlpack_versioned(std::ptr::null_mut()) }.is_err());
        // SAFETY: as above.
        assert!(unsafe { import_dlpack(std::ptr::null_mut()) }.is_err());
        return;
    };
    match spec.versioned {
        Some(_) => run_as::<DLManagedTensorVersioned>(&spec),
        None => run_as::<DLManagedTensor>(&spec),
    }
}

/// Builds `spec` as the managed struct `M`, imports it and checks the
/// outcome.
fn run_as<M: Managed>(spec: &TensorSpec) {
    let built = build::<M>(spec, !spec.null_deleter);
    // SAFETY: built just now, handed over once.
    let result = unsafe { built.import() };
    check(spec, &built, result, M::ABI);
    built.free();
}

fn check<M: Managed>(
    spec: &TensorSpec,
    built: &Built<M>,
    result: arrow_device::Result<DeviceArray>,
    abi: DlpackAbi,
) {
    let once = usize::from(!spec.null_deleter);
    let expected = expected(spec, built.data, built.device);
    let array = match (result, expected) {
        (Err(_), _) => {
            assert_eq!(built.deletes(), once, "a refused tensor is deleted once");
            return;
        }
        (Ok(array), Err(why)) => panic!("a tensor with {why} was imported as {array:?}"),
        (Ok(array), Ok((len, data_type))) => {
            assert_eq!(array.len(), len);
            assert_eq!(array.data_type(), &data_type);
            assert_eq!(array.null_count(), Some(0));
            array
        }
    };
    let data_type = array.data_type().clone();
    if data_type == DataType::Boolean {
        assert_eq!(
            built.deletes(),
            once,
            "a bool tensor is copied, then deleted"
        );
        assert_eq!(array.device_type(), DeviceType::CPU);
    } else {
        assert_eq!(built.deletes(), 0, "deleted while imported");
        let device_id = match built.device.device_type {
            DeviceType::CPU => -1,
            _ => i64::from(built.device.device_id),
        };
        assert_eq!(
            (array.device_type(), array.device_id()),
            (built.device.device_type, device_id)
        );
        if !array.is_empty() {
            let first = built
                .data
                .cast::<u8>()
                .wrapping_add(spec.byte_offset as usize);
            assert_eq!(array.buffers()[1].ptr, first.cast_const());
        }
    }
    let readable = built
        .readable
        .as_ref()
        // Real memory on a device that the host reads: the CPU, pinned or
        // managed memory (not EXT_DEV, whose reads go through the emulated
        // device, nor devices nothing implements).
        .filter(|_| built.device.device_type.is_host_accessible());
    let values =
        readable.map(|bytes| memory::expected_values(&data_type, array.len(), bytes, "tensor"));
    if let Some(values) = &values {
        let host = array
            .to_host()
            .unwrap_or_else(|e| panic!("an imported host tensor does not read: {e}"));
        assert_eq!(&host, values, "the values are not the bytes written");
    }
    if data_type != DataType::Boolean {
        reexport(&array, spec.dtype, abi, values.as_ref());
    }
    drop(array);
    assert_eq!(built.deletes(), once, "deleted once the array is dropped");
}

/// The array re-exports over the same memory and imports back the same.
fn reexport(array: &DeviceArray, dtype: DLDataType, abi: DlpackAbi, values: Option<&ArrayRef>) {
    let named = array.device_type().name().is_some();
    let tensor = match export_dlpack(array, abi) {
        Ok(tensor) => tensor,
        Err(e) if named => panic!(
            "an imported {} array does not re-export: {e}",
            array.data_type()
        ),
        Err(_) => return,
    };
    let t = *tensor.dl_tensor();
    assert_eq!(tensor.shape(), [array.len() as i64]);
    assert_eq!(t.dtype, dtype);
    assert_eq!(t.byte_offset, 0);
    let first = array.buffers()[1].ptr;
    let data = if array.is_empty() {
        std::ptr::null()
    } else {
        first
    };
    assert_eq!(t.data.cast_const().cast(), data);
    assert_eq!(t.device.device_type, array.device_type());
    if abi == DlpackAbi::Versioned {
        assert_eq!(tensor.version(), Some(DLPackVersion::CURRENT));
        assert_ne!(tensor.flags() & DLPACK_FLAG_BITMASK_READ_ONLY, 0);
    }
    let back = match abi {
        DlpackAbi::Versioned => {
            let raw = tensor.into_raw_versioned().expect("a versioned tensor");
            // SAFETY: a tensor of this crate, handed over once.
            unsafe { import_dlpack_versioned(raw) }
        }
        DlpackAbi::Legacy => {
            let raw = tensor.into_raw_legacy().expect("a legacy tensor");
            // SAFETY: as above.
            unsafe { import_dlpack(raw) }
        }
    };
    let back = back.unwrap_or_else(|e| panic!("a re-exported tensor does not import: {e}"));
    assert_eq!(back.len(), array.len());
    assert_eq!(back.data_type(), array.data_type());
    if !array.is_empty() {
        assert_eq!(back.buffers()[1].ptr, first);
    }
    if let Some(values) = values {
        assert_eq!(&back.to_host().expect("host memory reads"), values);
    }
}

//! Export: a [`DeviceArray`] on CUDA memory → its CUDA Array Interface.

use super::typestr::typestr;
use super::CudaArrayInterface;
use crate::abi::DeviceType;
use crate::array::DeviceArray;
use crate::error::{Error, Result};

/// The version 3 interface of `array`, zero-copy: `shape (len,)`, the
/// `typestr` of its type ([`typestr()`](super::typestr())), `data` pointing at
/// the first value (the offset applied; 0 when empty) flagged read-only
/// (Arrow data is immutable and may be shared), `strides` `None`.
///
/// `stream` is left `None` for the caller to set: a binding knows whether
/// work on the array is pending, and must then name a stream that orders
/// after it (its own, made to wait on the array's `sync_event`), never 0.
///
/// Only one-dimensional fixed-width arrays on `CUDA` or `CUDA_MANAGED`
/// memory are described (the spec's data "must be device-accessible");
/// everything else is [`Error::NotSupported`] with the reason. Arrays with
/// nulls are refused too: the interface's mask is element-wise (a byte per
/// value) while Arrow's is a bitmap, and that conversion needs a device
/// kernel, which `cai::cuda::export_cai` runs (feature `cuda`); a
/// validity buffer is fine when no value is null.
pub fn describe(array: &DeviceArray) -> Result<CudaArrayInterface> {
    let interface = describe_values(array)?;
    refuse_nulls(array)?;
    Ok(interface)
}

/// The null check of [`describe`]: an array that has (or may have) nulls
/// cannot be described without a device that makes the mask.
pub(crate) fn refuse_nulls(array: &DeviceArray) -> Result<()> {
    match array.null_count() {
        Some(0) => Ok(()),
        Some(nulls) => Err(Error::NotSupported(format!(
            "cannot describe an array with {nulls} nulls without a device: the CUDA Array \
             Interface's mask is element-wise (a byte per value) while Arrow's validity is a \
             bitmap; the CUDA devices make the mask (cai::cuda::export_cai)"
        ))),
        None => Err(Error::NotSupported(
            "cannot describe an array whose null count is unknown without a device: the \
             CUDA Array Interface has no bitmap validity (cai::cuda::export_cai makes \
             the mask)"
                .to_string(),
        )),
    }
}

/// [`describe`] without the null check: the values only, for a caller that
/// adds the mask itself.
pub(crate) fn describe_values(array: &DeviceArray) -> Result<CudaArrayInterface> {
    let device_type = array.device_type();
    if !matches!(device_type, DeviceType::CUDA | DeviceType::CUDA_MANAGED) {
        return Err(Error::NotSupported(format!(
            "the CUDA Array Interface describes CUDA device memory (CUDA or CUDA_MANAGED), \
             and this array is on {device_type} (id {})",
            array.device_id()
        )));
    }
    let typestr = typestr(array.data_type())?;
    let len = array.len();
    let itemsize = array
        .data_type()
        .primitive_width()
        .ok_or_else(|| Error::NotSupported(format!("{} has no fixed width", array.data_type())))?;
    let values = array
        .buffers()
        .get(1)
        .map_or(0, |buffer| buffer.ptr as usize);
    // The first value, not the buffer start; empty arrays use 0 (spec: "For
    // zero-size arrays, use 0 here"). Addresses only: nothing is read.
    let ptr = if len == 0 || values == 0 {
        0
    } else {
        values.wrapping_add(array.offset() * itemsize)
    };
    let shape = i64::try_from(len)
        .map_err(|_| Error::NotSupported(format!("length {len} does not fit an int64 shape")))?;
    Ok(CudaArrayInterface {
        shape: vec![shape],
        typestr,
        data: (ptr, true),
        version: 3,
        strides: None,
        descr: None,
        mask: None,
        stream: None,
    })
}

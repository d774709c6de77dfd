//! What the import must do with a tensor as built, written from dlpack.h
//! and the import's contract, apart from the library.

use std::ffi::c_void;

use arrow_device::abi::DeviceType;
use arrow_device::dlpack::abi::type_code;
use arrow_device::dlpack::{DLDataType, DLDevice};
use arrow_schema::DataType;

use super::decode::TensorSpec;

/// The Arrow type of a dtype the import takes; `Boolean` for 8-bit bool.
fn arrow_type(dtype: DLDataType) -> Option<DataType> {
    if dtype.lanes != 1 {
        return None;
    }
    Some(match (dtype.code, dtype.bits) {
        (type_code::INT, 8) => DataType::Int8,
        (type_code::INT, 16) => DataType::Int16,
        (type_code::INT, 32) => DataType::Int32,
        (type_code::INT, 64) => DataType::Int64,
        (type_code::UINT, 8) => DataType::UInt8,
        (type_code::UINT, 16) => DataType::UInt16,
        (type_code::UINT, 32) => DataType::UInt32,
        (type_code::UINT, 64) => DataType::UInt64,
        (type_code::FLOAT, 16) => DataType::Float16,
        (type_code::FLOAT, 32) => DataType::Float32,
        (type_code::FLOAT, 64) => DataType::Float64,
        (type_code::BOOL, 8) => DataType::Boolean,
        _ => return None,
    })
}

/// Why the import must refuse the tensor as built, if it must; else its
/// length and type.
pub(super) fn expected(
    spec: &TensorSpec,
    data: *mut c_void,
    device: DLDevice,
) -> Result<(usize, DataType), String> {
    if let Some((version, _)) = spec.versioned {
        if version.major != 1 {
            return Err(format!("major version {}", version.major));
        }
    }
    let data_type = arrow_type(spec.dtype).ok_or_else(|| format!("dtype {:?}", spec.dtype))?;
    let len = match spec.ndim {
        0 => 1,
        1 if spec.shape_null => return Err("NULL shape".into()),
        1 => usize::try_from(spec.shape[0]).map_err(|_| format!("shape {:?}", spec.shape))?,
        ndim => return Err(format!("ndim {ndim}")),
    };
    if spec.ndim == 1 && !spec.strides_null && spec.strides[0] != 1 && len > 1 {
        return Err(format!("stride {} over {len} values", spec.strides[0]));
    }
    let width = usize::from(spec.dtype.bits / 8);
    if len.checked_mul(width).is_none() {
        return Err(format!("{len} values of {width} bytes"));
    }
    let end = (data as usize)
        .checked_add(spec.byte_offset as usize)
        .and_then(|first| first.checked_add(len * width));
    if len > 0 && end.is_none() {
        return Err("values past the end of the address space".into());
    }
    if data.is_null() && len > 0 {
        return Err(format!("NULL data with {len} values"));
    }
    if data_type == DataType::Boolean && device.device_type != DeviceType::CPU {
        return Err(format!("a bool tensor on {}", device.device_type));
    }
    Ok((len, data_type))
}

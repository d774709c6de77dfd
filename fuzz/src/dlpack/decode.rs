//! The byte layout of a `dlpack` case (see the module documentation of
//! [`crate::dlpack`]): [`decode`] reads it, [`encode`] writes it for seeds.

use arrow_device::abi::DeviceType;
use arrow_device::dlpack::{DLDataType, DLDevice, DLPackVersion};

use crate::input::{Encoder, Input};

/// The most dimensions given real `shape` and `strides` arrays.
pub(super) const MAX_NDIM: i32 = 64;

/// How `data` is given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DataSpec {
    Real,
    Null,
    Opaque(u64),
}

/// A decoded case.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorSpec {
    /// `Some((version, flags))`: a versioned struct.
    pub versioned: Option<(DLPackVersion, u64)>,
    pub null_deleter: bool,
    pub shape_null: bool,
    pub strides_null: bool,
    pub device: DLDevice,
    pub ndim: i32,
    pub dtype: DLDataType,
    /// `ndim` values when `0 <= ndim <= 64`, else empty.
    pub shape: Vec<i64>,
    /// As `shape`, unless `strides_null`.
    pub strides: Vec<i64>,
    pub byte_offset: u64,
    pub data: DataSpec,
    pub values: Vec<u8>,
}

/// Decodes a case; `None`: the NULL pointer case.
pub fn decode(data: &[u8]) -> Option<TensorSpec> {
    let mut input = Input::new(data);
    let header = input.u8();
    if (header >> 2) & 7 == 7 {
        return None;
    }
    let versioned = (header & 1 != 0).then(|| {
        let version = DLPackVersion {
            major: input.u32(),
            minor: input.u32(),
        };
        (version, input.u64())
    });
    let device = DLDevice {
        device_type: DeviceType(input.i32()),
        device_id: input.i32(),
    };
    let ndim = input.i32();
    let dtype = DLDataType {
        code: input.u8(),
        bits: input.u8(),
        lanes: input.u16(),
    };
    let strides_null = header & 0x20 != 0;
    let (mut shape, mut strides) = (Vec::new(), Vec::new());
    if (0..=MAX_NDIM).contains(&ndim) {
        for _ in 0..ndim {
            shape.push(input.i64());
            if !strides_null {
                strides.push(input.i64());
            }
        }
    }
    let byte_offset = input.u64();
    let data = match input.u8() % 3 {
        0 => DataSpec::Real,
        1 => DataSpec::Null,
        _ => DataSpec::Opaque(input.u64()),
    };
    let values = input.bytes().to_vec();
    Some(TensorSpec {
        versioned,
        null_deleter: header & 2 != 0,
        shape_null: header & 0x40 != 0,
        strides_null,
        device,
        ndim,
        dtype,
        shape,
        strides,
        byte_offset,
        data,
        values,
    })
}

/// The input that decodes to `spec`.
pub fn encode(spec: &TensorSpec) -> Vec<u8> {
    let mut e = Encoder::new();
    let mut header = 0u8;
    if spec.versioned.is_some() {
        header |= 1;
    }
    if spec.null_deleter {
        header |= 2;
    }
    if spec.strides_null {
        header |= 0x20;
    }
    if spec.shape_null {
        header |= 0x40;
    }
    e.u8(header);
    if let Some((version, flags)) = spec.versioned {
        e.u32(version.major).u32(version.minor).u64(flags);
    }
    e.i32(spec.device.device_type.0)
        .i32(spec.device.device_id)
        .i32(spec.ndim)
        .u8(spec.dtype.code)
        .u8(spec.dtype.bits)
        .u16(spec.dtype.lanes);
    for (i, extent) in spec.shape.iter().enumerate() {
        e.i64(*extent);
        if !spec.strides_null {
            e.i64(spec.strides[i]);
        }
    }
    e.u64(spec.byte_offset);
    match spec.data {
        DataSpec::Real => e.u8(0),
        DataSpec::Null => e.u8(1),
        DataSpec::Opaque(address) => e.u8(2).u64(address),
    };
    e.bytes(&spec.values);
    e.finish()
}

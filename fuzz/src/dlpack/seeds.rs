//! The named inputs of the `dlpack` target.

use arrow_device::abi::DeviceType;
use arrow_device::dlpack::abi::type_code;
use arrow_device::dlpack::{DLDataType, DLDevice, DLPackVersion, DLPACK_FLAG_BITMASK_READ_ONLY};

use super::build::compact_strides;
use super::decode::{encode, DataSpec, TensorSpec};
use crate::input::Encoder;

const CPU: DLDevice = DLDevice {
    device_type: DeviceType::CPU,
    device_id: 0,
};

/// A compact CPU tensor of `shape` float32 values 0.5, 1.5, ... (at most
/// 64 distinct ones, repeated to fill the memory).
pub(super) fn float32(shape: &[i64], versioned: bool) -> TensorSpec {
    let count = shape
        .iter()
        .fold(1i64, |n, s| n.saturating_mul(*s))
        .clamp(0, 64);
    let values = (0..count)
        .flat_map(|i| (i as f32 + 0.5).to_ne_bytes())
        .collect();
    TensorSpec {
        versioned: versioned.then_some((DLPackVersion::CURRENT, DLPACK_FLAG_BITMASK_READ_ONLY)),
        null_deleter: false,
        shape_null: false,
        strides_null: false,
        device: CPU,
        ndim: shape.len() as i32,
        dtype: DLDataType::new(type_code::FLOAT, 32),
        shape: shape.to_vec(),
        strides: compact_strides(shape).expect("small shapes"),
        byte_offset: 0,
        data: DataSpec::Real,
        values,
    }
}

/// Named inputs: typical float32 tensors (1-d, 2-d, 0-d; versioned and
/// legacy), every dtype the import takes, and the edges of the contract.
pub fn seeds() -> Vec<(String, Vec<u8>)> {
    let mut out: Vec<(String, TensorSpec)> = Vec::new();
    for (abi, versioned) in [("versioned", true), ("legacy", false)] {
        out.push((format!("{abi}-cpu-f32-1d"), float32(&[6], versioned)));
        out.push((format!("{abi}-cpu-f32-2d"), float32(&[2, 3], versioned)));
        out.push((format!("{abi}-cpu-f32-0d"), float32(&[], versioned)));
        out.push((
            format!("{abi}-cpu-f32-strides-null"),
            TensorSpec {
                strides_null: true,
                strides: Vec::new(),
                ..float32(&[4], versioned)
            },
        ));
    }
    for (code, bits, name) in [
        (type_code::INT, 8, "i8"),
        (type_code::INT, 16, "i16"),
        (type_code::INT, 32, "i32"),
        (type_code::INT, 64, "i64"),
        (type_code::UINT, 8, "u8"),
        (type_code::UINT, 16, "u16"),
        (type_code::UINT, 32, "u32"),
        (type_code::UINT, 64, "u64"),
        (type_code::FLOAT, 16, "f16"),
        (type_code::FLOAT, 64, "f64"),
        (type_code::BOOL, 8, "bool"),
        (type_code::BFLOAT, 16, "bf16"),
        (type_code::COMPLEX, 64, "c64"),
    ] {
        let count = 5;
        out.push((
            format!("versioned-cpu-{name}"),
            TensorSpec {
                dtype: DLDataType::new(code, bits),
                values: (0..count * usize::from(bits) / 8)
                    .map(|i| (i * 37 + 1) as u8)
                    .collect(),
                ..float32(&[count as i64], true)
            },
        ));
    }
    out.push((
        "versioned-cpu-misaligned-byte-offset".into(),
        TensorSpec {
            byte_offset: 3,
            ..float32(&[4], true)
        },
    ));
    out.push((
        "versioned-cpu-negative-stride".into(),
        TensorSpec {
            strides: vec![-1],
            ..float32(&[4], true)
        },
    ));
    out.push((
        "versioned-cpu-one-value-any-stride".into(),
        TensorSpec {
            strides: vec![-7],
            ..float32(&[1], true)
        },
    ));
    out.push((
        "versioned-cpu-empty-null-data".into(),
        TensorSpec {
            data: DataSpec::Null,
            ..float32(&[0], true)
        },
    ));
    out.push((
        "versioned-cpu-null-data-with-values".into(),
        TensorSpec {
            data: DataSpec::Null,
            ..float32(&[3], true)
        },
    ));
    out.push((
        "versioned-major-2".into(),
        TensorSpec {
            versioned: Some((DLPackVersion { major: 2, minor: 0 }, 0)),
            ..float32(&[3], true)
        },
    ));
    out.push((
        "versioned-null-deleter".into(),
        TensorSpec {
            null_deleter: true,
            ..float32(&[3], true)
        },
    ));
    out.push((
        "versioned-cuda-opaque".into(),
        TensorSpec {
            device: DLDevice {
                device_type: DeviceType::CUDA,
                device_id: 1,
            },
            data: DataSpec::Opaque(0x7f00_dead_0000),
            ..float32(&[1 << 40], true)
        },
    ));
    // A library finding: values past the end of the address space were
    // imported (the array's buffer wrapped around).
    out.push((
        "versioned-cuda-values-past-the-address-space".into(),
        TensorSpec {
            device: DLDevice {
                device_type: DeviceType::CUDA,
                device_id: 0,
            },
            data: DataSpec::Opaque(u64::MAX - 8),
            ..float32(&[4], true)
        },
    ));
    out.push((
        "versioned-cuda-host-backed".into(),
        TensorSpec {
            device: DLDevice {
                device_type: DeviceType::CUDA_HOST,
                device_id: 0,
            },
            ..float32(&[5], true)
        },
    ));
    out.push((
        "legacy-cpu-shape-overflows".into(),
        TensorSpec {
            dtype: DLDataType::new(type_code::INT, 64),
            ..float32(&[i64::MAX], false)
        },
    ));
    out.push((
        "legacy-cpu-ndim-huge".into(),
        TensorSpec {
            ndim: i32::MAX,
            shape: Vec::new(),
            strides: Vec::new(),
            ..float32(&[], false)
        },
    ));
    out.push((
        "legacy-cpu-shape-null".into(),
        TensorSpec {
            shape_null: true,
            ..float32(&[3], false)
        },
    ));
    let mut seeds: Vec<(String, Vec<u8>)> = out
        .into_iter()
        .map(|(name, spec)| (name, encode(&spec)))
        .collect();
    let mut null = Encoder::new();
    seeds.push(("null-pointer".into(), null.u8(0x1c).finish()));
    seeds
}

#[cfg(test)]
mod tests {
    use arrow_device::dlpack::{DLManagedTensor, DLManagedTensorVersioned};

    use super::*;
    use crate::dlpack::build::{build, Managed};
    use crate::dlpack::decode::decode;
    use crate::dlpack::model::expected;

    #[test]
    fn seeds_decode_to_the_tensors_they_were_encoded_from() {
        let spec = TensorSpec {
            byte_offset: 8,
            data: DataSpec::Opaque(0x1000),
            ..float32(&[2, 3], true)
        };
        assert_eq!(decode(&encode(&spec)), Some(spec));
        let legacy = TensorSpec {
            strides_null: true,
            strides: Vec::new(),
            ..float32(&[4], false)
        };
        assert_eq!(decode(&encode(&legacy)), Some(legacy));
    }

    /// Imports `spec` as `run` does (with a deleter); whether it was
    /// accepted, and whether the model says it must be refused.
    fn outcome(spec: &TensorSpec) -> (bool, bool) {
        match spec.versioned {
            Some(_) => outcome_as::<DLManagedTensorVersioned>(spec),
            None => outcome_as::<DLManagedTensor>(spec),
        }
    }

    fn outcome_as<M: Managed>(spec: &TensorSpec) -> (bool, bool) {
        let built = build::<M>(spec, true);
        let must = expected(spec, built.data, built.device);
        // SAFETY: as in `run`.
        let result = unsafe { built.import() };
        let outcome = (result.is_ok(), must.is_err());
        drop(result);
        built.free();
        outcome
    }

    #[test]
    fn the_seeds_are_refused_exactly_where_the_model_says() {
        for (name, data) in seeds() {
            let Some(spec) = decode(&data) else { continue };
            let (accepted, must_refuse) = outcome(&spec);
            assert_eq!(accepted, !must_refuse, "{name}");
            if name.ends_with("-f32-1d") || name.ends_with("-f32-0d") {
                assert!(accepted, "{name}");
            }
        }
    }
}

//! Element types: which Arrow types a DLPack tensor can carry, and back.
//!
//! DLPack describes dense tensors of fixed-width numbers; Arrow arrays of
//! those types have the same bytes in their values buffer. Every other Arrow
//! type is refused with the reason, so that a binding can turn it into a
//! `TypeError`/`BufferError` that tells the user what to do.

use arrow_schema::DataType;

use super::abi::type_code::*;
use super::abi::DLDataType;
use crate::error::{Error, Result};

/// The DLPack element type of an Arrow type that a DLPack tensor can carry
/// without conversion: `Int8`..`Int64`, `UInt8`..`UInt64`,
/// `Float16`/`Float32`/`Float64`.
///
/// Refused, with a message that names the type and why:
/// * temporal types (dates, times, timestamps, durations, intervals): DLPack
///   has no unit or time zone, so their integers would lose their meaning;
///   cast to the integer type first if the integers are what you want;
/// * boolean: bit-packed in Arrow, one byte per value in DLPack;
/// * decimals, strings, binary, nested, dictionary and the rest: not one
///   fixed-width number per slot.
///
/// ```
/// use arrow_schema::DataType;
/// use arrow_device::dlpack::{dlpack_data_type, abi::{type_code, DLDataType}};
///
/// assert_eq!(dlpack_data_type(&DataType::UInt16).unwrap(), DLDataType::new(type_code::UINT, 16));
/// assert!(dlpack_data_type(&DataType::Boolean).is_err());
/// ```
pub fn dlpack_data_type(data_type: &DataType) -> Result<DLDataType> {
    let (code, bits) = match data_type {
        DataType::Int8 => (INT, 8),
        DataType::Int16 => (INT, 16),
        DataType::Int32 => (INT, 32),
        DataType::Int64 => (INT, 64),
        DataType::UInt8 => (UINT, 8),
        DataType::UInt16 => (UINT, 16),
        DataType::UInt32 => (UINT, 32),
        DataType::UInt64 => (UINT, 64),
        DataType::Float16 => (FLOAT, 16),
        DataType::Float32 => (FLOAT, 32),
        DataType::Float64 => (FLOAT, 64),
        other => return Err(Error::NotSupported(refusal(other))),
    };
    Ok(DLDataType::new(code, bits))
}

/// Why `data_type` cannot be exported, for [`dlpack_data_type`].
fn refusal(data_type: &DataType) -> String {
    const CARRIES: &str = "DLPack carries one-dimensional arrays of fixed-width numbers \
                           (int8..int64, uint8..uint64, float16/32/64)";
    let why = match data_type {
        DataType::Boolean => "boolean is bit-packed in Arrow (one bit per value) while DLPack \
                              bool is one byte per value; cast to uint8 or int8 first"
            .to_string(),
        DataType::Date32
        | DataType::Date64
        | DataType::Time32(_)
        | DataType::Time64(_)
        | DataType::Timestamp(_, _)
        | DataType::Duration(_)
        | DataType::Interval(_) => format!(
            "DLPack has no temporal types, so {data_type} would arrive as bare integers without \
             its unit or time zone; cast to the integer type first if that is what you want"
        ),
        DataType::Decimal32(_, _)
        | DataType::Decimal64(_, _)
        | DataType::Decimal128(_, _)
        | DataType::Decimal256(_, _) => format!(
            "DLPack has no decimal type ({data_type} needs its precision and scale); \
             cast to float64 first"
        ),
        DataType::Dictionary(_, _) => {
            format!("{data_type} is dictionary-encoded; decode it (cast to the value type) first")
        }
        DataType::Null => "a null array has no values buffer".to_string(),
        _ => format!("{data_type} is not one fixed-width number per value"),
    };
    format!("cannot export {data_type} through DLPack: {CARRIES}; {why}")
}

/// What an imported tensor's element type becomes in Arrow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Imported {
    /// The same bytes, zero-copy.
    Same(DataType),
    /// `BOOL` (8 bits): bit-packed into an Arrow `Boolean` by a copy.
    Bool,
}

/// The Arrow type of a DLPack element type, or the reason there is none.
pub(crate) fn arrow_data_type(dtype: DLDataType) -> Result<Imported> {
    if dtype.lanes != 1 {
        return Err(Error::NotSupported(format!(
            "DLPack dtype {} has {} lanes (a vector type); Arrow has no vector types \
             (expected lanes 1)",
            describe(dtype),
            dtype.lanes
        )));
    }
    let data_type = match (dtype.code, dtype.bits) {
        (INT, 8) => DataType::Int8,
        (INT, 16) => DataType::Int16,
        (INT, 32) => DataType::Int32,
        (INT, 64) => DataType::Int64,
        (UINT, 8) => DataType::UInt8,
        (UINT, 16) => DataType::UInt16,
        (UINT, 32) => DataType::UInt32,
        (UINT, 64) => DataType::UInt64,
        (FLOAT, 16) => DataType::Float16,
        (FLOAT, 32) => DataType::Float32,
        (FLOAT, 64) => DataType::Float64,
        (BOOL, 8) => return Ok(Imported::Bool),
        _ => {
            let hint = match dtype.code {
                BFLOAT => "; cast to float32 first",
                COMPLEX => "; take the real and imaginary parts apart first",
                OPAQUE_HANDLE => "; opaque handles have no agreed meaning",
                FLOAT8_E3M4..=FLOAT4_E2M1FN => "; cast to float16 or float32 first",
                _ => "",
            };
            return Err(Error::NotSupported(format!(
                "DLPack dtype {} has no Arrow type: Arrow arrays hold int8..int64, \
                 uint8..uint64, float16/32/64 or (copied) 8-bit bool{hint}",
                describe(dtype)
            )));
        }
    };
    Ok(Imported::Same(data_type))
}

/// `dtype` as users name it (`bfloat16`, `int32`, `code 42 (8 bits)`).
fn describe(dtype: DLDataType) -> String {
    let name = match dtype.code {
        INT => "int",
        UINT => "uint",
        FLOAT => "float",
        BFLOAT => "bfloat",
        COMPLEX => "complex",
        BOOL => "bool",
        OPAQUE_HANDLE => return format!("opaque handle ({} bits)", dtype.bits),
        7 => "float8_e3m4",
        8 => "float8_e4m3",
        9 => "float8_e4m3b11fnuz",
        10 => "float8_e4m3fn",
        11 => "float8_e4m3fnuz",
        12 => "float8_e5m2",
        13 => "float8_e5m2fnuz",
        14 => "float8_e8m0fnu",
        15 => "float6_e2m3fn",
        16 => "float6_e3m2fn",
        17 => "float4_e2m1fn",
        code => return format!("with unknown type code {code} ({} bits)", dtype.bits),
    };
    if (FLOAT8_E3M4..=FLOAT4_E2M1FN).contains(&dtype.code) {
        name.to_string()
    } else {
        format!("{name}{}", dtype.bits)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_exportable_type_maps_back_to_itself() {
        for data_type in [
            DataType::Int8,
            DataType::Int16,
            DataType::Int32,
            DataType::Int64,
            DataType::UInt8,
            DataType::UInt16,
            DataType::UInt32,
            DataType::UInt64,
            DataType::Float16,
            DataType::Float32,
            DataType::Float64,
        ] {
            let dtype = dlpack_data_type(&data_type).unwrap();
            assert_eq!(dtype.lanes, 1);
            assert_eq!(
                usize::from(dtype.bits) / 8,
                data_type.primitive_width().unwrap()
            );
            assert_eq!(
                arrow_data_type(dtype).unwrap(),
                Imported::Same(data_type.clone())
            );
        }
    }

    #[test]
    fn refused_element_types_are_named() {
        let cases = [
            (DLDataType::new(BFLOAT, 16), "bfloat16 has no Arrow type"),
            (DLDataType::new(COMPLEX, 64), "complex64"),
            (DLDataType::new(10, 8), "float8_e4m3fn"),
            (DLDataType::new(FLOAT, 8), "float8 has no Arrow type"),
            (DLDataType::new(BOOL, 1), "bool1"),
            (DLDataType::new(99, 8), "unknown type code 99"),
            (
                DLDataType {
                    code: FLOAT,
                    bits: 32,
                    lanes: 4,
                },
                "float32 has 4 lanes",
            ),
        ];
        for (dtype, needle) in cases {
            let message = arrow_data_type(dtype).unwrap_err().to_string();
            assert!(message.contains(needle), "{message}");
        }
        assert_eq!(
            arrow_data_type(DLDataType::new(BOOL, 8)).unwrap(),
            Imported::Bool
        );
    }
}

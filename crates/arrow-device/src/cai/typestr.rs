//! `typestr`: the NumPy array-interface type string (`<f4`, `|b1`,
//! `<M8[ns]`) ↔ Arrow data types, both ways.
//!
//! A type string is a byte-order character (`<` little, `>` big, `=`
//! native, `|` not applicable), a kind character and the item size in
//! bytes; datetime64 (`M`) and timedelta64 (`m`) add a unit in brackets.
//! NumPy treats `|` on a multi-byte type as native and byte order as
//! meaningless for one-byte types (it normalises `>i1` to `|i1`); so does
//! this module.

use arrow_schema::{DataType, TimeUnit};

use crate::error::{Error, Result};

/// What an element type becomes in Arrow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Element {
    /// The Arrow type of the imported array.
    pub data_type: DataType,
    /// Bytes per value in the producer's memory.
    pub itemsize: usize,
    /// `|b1`: one byte per value, which Arrow's `Boolean` bit-packs.
    pub bool_needs_packing: bool,
}

/// The byte-order character this host's multi-byte types are written with.
const NATIVE: char = if cfg!(target_endian = "big") {
    '>'
} else {
    '<'
};

/// The Arrow type of `typestr`, or why there is none (the message names the
/// type string). `key` names the dict entry for messages.
pub(crate) fn parse(typestr: &str, key: &str) -> Result<Element> {
    let malformed = || {
        super::invalid(
            key,
            format!(
                "{typestr:?} is not a type string (expected a byte order '<', '>', '=' or '|', \
                 a kind and an item size, like '<f4' or '|b1')"
            ),
        )
    };
    let mut chars = typestr.chars();
    let (Some(order), Some(kind)) = (chars.next(), chars.next()) else {
        return Err(malformed());
    };
    if !matches!(order, '<' | '>' | '=' | '|') {
        return Err(malformed());
    }
    let rest = chars.as_str();
    let (size, unit) = match rest.find('[') {
        Some(open) if rest.ends_with(']') => (&rest[..open], Some(&rest[open + 1..rest.len() - 1])),
        Some(_) => return Err(malformed()),
        None => (rest, None),
    };
    if size.is_empty() || !size.bytes().all(|b| b.is_ascii_digit()) {
        return Err(malformed());
    }
    let itemsize: usize = size.parse().map_err(|_| malformed())?;
    if unit.is_some() && !matches!(kind, 'M' | 'm') {
        return Err(malformed());
    }
    let unsupported = |why: &str| {
        Error::NotSupported(format!(
            "{key}: typestr {typestr:?} has no Arrow type: {why}"
        ))
    };
    // Byte order: the host's own, or meaningless for one byte.
    let foreign = match order {
        '<' | '>' => order != NATIVE,
        _ => false,
    };
    if foreign && itemsize > 1 {
        return Err(unsupported(&format!(
            "its byte order is {}, this host's is {}; byte-swap it first",
            endian_name(order),
            endian_name(NATIVE)
        )));
    }
    let data_type = match (kind, itemsize) {
        ('b', 1) => {
            return Ok(Element {
                data_type: DataType::Boolean,
                itemsize: 1,
                bool_needs_packing: true,
            })
        }
        ('i', 1) => DataType::Int8,
        ('i', 2) => DataType::Int16,
        ('i', 4) => DataType::Int32,
        ('i', 8) => DataType::Int64,
        ('u', 1) => DataType::UInt8,
        ('u', 2) => DataType::UInt16,
        ('u', 4) => DataType::UInt32,
        ('u', 8) => DataType::UInt64,
        ('f', 2) => DataType::Float16,
        ('f', 4) => DataType::Float32,
        ('f', 8) => DataType::Float64,
        ('M', 8) => DataType::Timestamp(time_unit(typestr, key, unit)?, None),
        ('m', 8) => DataType::Duration(time_unit(typestr, key, unit)?),
        ('c', _) => {
            return Err(unsupported(
                "Arrow has no complex type; take the real and imaginary parts apart first",
            ))
        }
        ('f', _) => return Err(unsupported("Arrow floats are 2, 4 or 8 bytes")),
        ('i' | 'u' | 'b' | 'M' | 'm', _) => {
            return Err(unsupported(&format!(
                "no Arrow type has {itemsize}-byte values of this kind"
            )))
        }
        _ => {
            return Err(unsupported(
                "Arrow arrays from the CUDA Array Interface hold bool (|b1), int8..int64 \
                 (<i1..<i8), uint8..uint64 (<u1..<u8), float16/32/64 (<f2, <f4, <f8), \
                 datetime64 (<M8[s|ms|us|ns]) or timedelta64 (<m8[s|ms|us|ns])",
            ))
        }
    };
    Ok(Element {
        data_type,
        itemsize,
        bool_needs_packing: false,
    })
}

fn endian_name(order: char) -> &'static str {
    if order == '>' {
        "big-endian"
    } else {
        "little-endian"
    }
}

/// The Arrow unit of a datetime64/timedelta64 unit; generic (no unit) and
/// units Arrow lacks (`D`, `h`, `ps`, multiples like `10ms`) are refused.
fn time_unit(typestr: &str, key: &str, unit: Option<&str>) -> Result<TimeUnit> {
    match unit {
        Some("s") => Ok(TimeUnit::Second),
        Some("ms") => Ok(TimeUnit::Millisecond),
        Some("us") => Ok(TimeUnit::Microsecond),
        Some("ns") => Ok(TimeUnit::Nanosecond),
        Some(other) => Err(Error::NotSupported(format!(
            "{key}: typestr {typestr:?} has no Arrow type: unit [{other}] is not one of \
             Arrow's s, ms, us, ns; cast it first"
        ))),
        None => Err(Error::NotSupported(format!(
            "{key}: typestr {typestr:?} has no Arrow type: a datetime64/timedelta64 without a \
             unit has no Arrow equivalent"
        ))),
    }
}

/// The type string of an Arrow type that a CUDA Array Interface can carry
/// without conversion: `|i1`, `<i2`..`<i8`, `|u1`, `<u2`..`<u8`, `<f2`,
/// `<f4`, `<f8`, `<M8[unit]` (`Timestamp` without a time zone) and
/// `<m8[unit]` (`Duration`); `<` is `>` on a big-endian host.
///
/// Refused, with the reason: `Boolean` (bit-packed in Arrow, a byte per
/// value in NumPy), time-zone-aware timestamps (datetime64 has no zone),
/// and every type that is not one fixed-width number per value.
///
/// ```
/// use arrow_schema::{DataType, TimeUnit};
/// use arrow_device::cai::typestr;
///
/// assert_eq!(typestr(&DataType::Float32).unwrap(), "<f4");
/// assert_eq!(typestr(&DataType::UInt8).unwrap(), "|u1");
/// assert_eq!(typestr(&DataType::Timestamp(TimeUnit::Nanosecond, None)).unwrap(), "<M8[ns]");
/// assert!(typestr(&DataType::Boolean).is_err());
/// ```
pub fn typestr(data_type: &DataType) -> Result<String> {
    let (kind, size) = match data_type {
        DataType::Int8 => ('i', 1),
        DataType::Int16 => ('i', 2),
        DataType::Int32 => ('i', 4),
        DataType::Int64 => ('i', 8),
        DataType::UInt8 => ('u', 1),
        DataType::UInt16 => ('u', 2),
        DataType::UInt32 => ('u', 4),
        DataType::UInt64 => ('u', 8),
        DataType::Float16 => ('f', 2),
        DataType::Float32 => ('f', 4),
        DataType::Float64 => ('f', 8),
        DataType::Timestamp(unit, None) => return Ok(format!("{NATIVE}M8[{}]", unit_name(*unit))),
        DataType::Duration(unit) => return Ok(format!("{NATIVE}m8[{}]", unit_name(*unit))),
        other => return Err(Error::NotSupported(refusal(other))),
    };
    let order = if size == 1 { '|' } else { NATIVE };
    Ok(format!("{order}{kind}{size}"))
}

fn unit_name(unit: TimeUnit) -> &'static str {
    match unit {
        TimeUnit::Second => "s",
        TimeUnit::Millisecond => "ms",
        TimeUnit::Microsecond => "us",
        TimeUnit::Nanosecond => "ns",
    }
}

/// Why `data_type` has no type string, for [`typestr`].
fn refusal(data_type: &DataType) -> String {
    let why = match data_type {
        DataType::Boolean => {
            "boolean is bit-packed in Arrow (one bit per value) while the \
                              CUDA Array Interface's |b1 is one byte per value; cast to uint8 first"
                .to_string()
        }
        DataType::Timestamp(_, Some(zone)) => format!(
            "datetime64 has no time zone (this one is {zone:?}); cast to a timestamp without \
             a time zone (the same UTC values) first"
        ),
        DataType::Dictionary(_, _) => "it is dictionary-encoded; decode it first".to_string(),
        _ => "the CUDA Array Interface describes one fixed-width number per value \
              (int8..int64, uint8..uint64, float16/32/64, timestamp, duration)"
            .to_string(),
    };
    format!("cannot describe {data_type} with a CUDA Array Interface typestr: {why}")
}

//! Format strings from types: the inverse of [`parse_format`](super::parse_format).
//!
//! [`write_format`] gives the format string of a [`DataType`]'s top level, as
//! arrow-rs writes it (decimal128 as `d:P,S` without a bit width, a timestamp
//! without a time zone as `tsU:`), or says why the type has none. The exporter
//! uses the [`Format`] value underneath, which writes the parameterized
//! formats straight into its shared string buffer and points at a static
//! string for the others.

use std::borrow::Cow;
use std::ffi::CStr;
use std::fmt;

use arrow_schema::{DataType, IntervalUnit, TimeUnit, UnionFields, UnionMode};

/// Writes the format string of `data_type` (spec: "Data type description --
/// format strings"). A dictionary's format is its index type's; the children
/// of nested types are separate structs and not part of the string.
///
/// The error is [`Error::NotSupported`](crate::Error::NotSupported),
/// naming the type and why it has no C form, e.g. `FixedSizeBinary(-1) has
/// no C format string: negative byte width -1, expected >= 0`.
///
/// ```
/// use arrow_device::schema::{parse_format, write_format, ParsedFormat};
/// use arrow_schema::{DataType, TimeUnit};
///
/// let timestamp = DataType::Timestamp(TimeUnit::Nanosecond, Some("UTC".into()));
/// assert_eq!(write_format(&timestamp).unwrap(), "tsn:UTC");
/// assert_eq!(parse_format("tsn:UTC")?, ParsedFormat::Leaf(timestamp));
/// assert_eq!(write_format(&DataType::Decimal128(38, 10)).unwrap(), "d:38,10");
/// assert_eq!(write_format(&DataType::Decimal32(9, 2)).unwrap(), "d:9,2,32");
/// assert_eq!(
///     write_format(&DataType::Time32(TimeUnit::Nanosecond)).unwrap_err().to_string(),
///     "not supported: Time32(ns) has no C format string: a 32-bit time is in seconds \
///      or milliseconds, found unit Nanosecond"
/// );
/// # Ok::<(), arrow_device::Error>(())
/// ```
pub fn write_format(data_type: &DataType) -> crate::Result<Cow<'static, str>> {
    match Format::of(data_type) {
        Ok(Format::Fixed(format)) => Ok(Cow::Borrowed(
            // Every fixed format below is an ASCII literal.
            format.to_str().unwrap_or_default(),
        )),
        Ok(format) => Ok(Cow::Owned(format.to_string())),
        Err(reason) => Err(crate::Error::NotSupported(format!(
            "{data_type} has no C format string: {reason}"
        ))),
    }
}

/// The format string of one node, before it is written anywhere.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Format<'a> {
    /// A format without parameters: a static, NUL-terminated string that an
    /// exported struct can point at.
    Fixed(&'static CStr),
    /// `w:N`.
    FixedSizeBinary(i32),
    /// `+w:N`.
    FixedSizeList(i32),
    /// `d:P,S` for 128 bits, `d:P,S,BITS` otherwise.
    Decimal {
        /// Decimal digits, checked against the bit width.
        precision: u8,
        /// Digits after the point; may be negative.
        scale: i8,
        /// 32, 64, 128 or 256.
        bits: u16,
    },
    /// `tsU:TZ`; the colon stays when the time zone is empty (spec note 1).
    Timestamp {
        /// `"tss"`, `"tsm"`, `"tsu"` or `"tsn"`.
        prefix: &'static str,
        /// Without NUL bytes.
        time_zone: &'a str,
    },
    /// `+ud:I,J,...` / `+us:I,J,...`, ids in child order.
    Union {
        /// Dense or sparse.
        mode: UnionMode,
        /// Type ids in 0..=127, distinct.
        fields: &'a UnionFields,
    },
}

impl<'a> Format<'a> {
    /// The format of `data_type`'s top level, or why it has none (the end of
    /// a sentence that names the type).
    pub(crate) fn of(data_type: &'a DataType) -> Result<Format<'a>, String> {
        use DataType::*;
        let fixed = |format: &'static CStr| Ok(Format::Fixed(format));
        match data_type {
            Null => fixed(c"n"),
            Boolean => fixed(c"b"),
            Int8 => fixed(c"c"),
            UInt8 => fixed(c"C"),
            Int16 => fixed(c"s"),
            UInt16 => fixed(c"S"),
            Int32 => fixed(c"i"),
            UInt32 => fixed(c"I"),
            Int64 => fixed(c"l"),
            UInt64 => fixed(c"L"),
            Float16 => fixed(c"e"),
            Float32 => fixed(c"f"),
            Float64 => fixed(c"g"),
            Binary => fixed(c"z"),
            LargeBinary => fixed(c"Z"),
            BinaryView => fixed(c"vz"),
            Utf8 => fixed(c"u"),
            LargeUtf8 => fixed(c"U"),
            Utf8View => fixed(c"vu"),
            Date32 => fixed(c"tdD"),
            Date64 => fixed(c"tdm"),
            Time32(TimeUnit::Second) => fixed(c"tts"),
            Time32(TimeUnit::Millisecond) => fixed(c"ttm"),
            Time64(TimeUnit::Microsecond) => fixed(c"ttu"),
            Time64(TimeUnit::Nanosecond) => fixed(c"ttn"),
            Time32(unit) => Err(format!(
                "a 32-bit time is in seconds or milliseconds, found unit {unit:?}"
            )),
            Time64(unit) => Err(format!(
                "a 64-bit time is in microseconds or nanoseconds, found unit {unit:?}"
            )),
            Duration(TimeUnit::Second) => fixed(c"tDs"),
            Duration(TimeUnit::Millisecond) => fixed(c"tDm"),
            Duration(TimeUnit::Microsecond) => fixed(c"tDu"),
            Duration(TimeUnit::Nanosecond) => fixed(c"tDn"),
            Interval(IntervalUnit::YearMonth) => fixed(c"tiM"),
            Interval(IntervalUnit::DayTime) => fixed(c"tiD"),
            Interval(IntervalUnit::MonthDayNano) => fixed(c"tin"),
            List(_) => fixed(c"+l"),
            LargeList(_) => fixed(c"+L"),
            ListView(_) => fixed(c"+vl"),
            LargeListView(_) => fixed(c"+vL"),
            Struct(_) => fixed(c"+s"),
            Map(_, _) => fixed(c"+m"),
            RunEndEncoded(_, _) => fixed(c"+r"),
            FixedSizeBinary(width) if *width < 0 => {
                Err(format!("negative byte width {width}, expected >= 0"))
            }
            FixedSizeBinary(width) => Ok(Format::FixedSizeBinary(*width)),
            FixedSizeList(_, size) if *size < 0 => {
                Err(format!("negative list size {size}, expected >= 0"))
            }
            FixedSizeList(_, size) => Ok(Format::FixedSizeList(*size)),
            Decimal32(precision, scale) => decimal(*precision, *scale, 32),
            Decimal64(precision, scale) => decimal(*precision, *scale, 64),
            Decimal128(precision, scale) => decimal(*precision, *scale, 128),
            Decimal256(precision, scale) => decimal(*precision, *scale, 256),
            Timestamp(unit, time_zone) => {
                let prefix = match unit {
                    TimeUnit::Second => "tss",
                    TimeUnit::Millisecond => "tsm",
                    TimeUnit::Microsecond => "tsu",
                    TimeUnit::Nanosecond => "tsn",
                };
                let time_zone = time_zone.as_deref().unwrap_or("");
                if time_zone.contains('\0') {
                    return Err(format!(
                        "time zone {time_zone:?} contains a NUL byte, which a C string cannot hold"
                    ));
                }
                Ok(Format::Timestamp { prefix, time_zone })
            }
            // Spec: "Dictionary-encoded arrays": the format is the index type's.
            Dictionary(index, _) if index.is_dictionary_key_type() => Format::of(index),
            Dictionary(index, _) => Err(format!(
                "dictionary index type {index} is not an integer, expected a signed or unsigned \
                 integer (Int8 to UInt64)"
            )),
            Union(fields, mode) => {
                // UnionFields promises distinct ids in 0..=127; the parser
                // rejects anything else, so check rather than trust.
                let mut seen = [false; 128];
                for (type_id, _) in fields.iter() {
                    let slot = usize::try_from(type_id).ok().and_then(|i| seen.get_mut(i));
                    match slot {
                        Some(seen @ false) => *seen = true,
                        Some(true) => return Err(format!("type id {type_id} appears twice")),
                        None => return Err(format!("type id {type_id}, expected 0 to 127")),
                    }
                }
                Ok(Format::Union {
                    mode: *mode,
                    fields,
                })
            }
        }
    }

    /// The length of the string, without a NUL terminator.
    pub(crate) fn len(&self) -> usize {
        match self {
            Format::Fixed(format) => format.to_bytes().len(),
            other => {
                let mut counter = Counter(0);
                // Counter's write_str never fails.
                let _ = fmt::Write::write_fmt(&mut counter, format_args!("{other}"));
                counter.0
            }
        }
    }
}

fn decimal(precision: u8, scale: i8, bits: u16) -> Result<Format<'static>, String> {
    let max = match bits {
        32 => arrow_schema::DECIMAL32_MAX_PRECISION,
        64 => arrow_schema::DECIMAL64_MAX_PRECISION,
        128 => arrow_schema::DECIMAL128_MAX_PRECISION,
        _ => arrow_schema::DECIMAL256_MAX_PRECISION,
    };
    if !(1..=max).contains(&precision) {
        return Err(format!(
            "decimal precision {precision}, expected 1 to {max} for a {bits}-bit decimal"
        ));
    }
    Ok(Format::Decimal {
        precision,
        scale,
        bits,
    })
}

impl fmt::Display for Format<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Format::Fixed(format) => f.write_str(format.to_str().map_err(|_| fmt::Error)?),
            Format::FixedSizeBinary(width) => write!(f, "w:{width}"),
            Format::FixedSizeList(size) => write!(f, "+w:{size}"),
            // arrow-rs and Arrow C++ write 128-bit decimals without the width.
            Format::Decimal {
                precision,
                scale,
                bits: 128,
            } => write!(f, "d:{precision},{scale}"),
            Format::Decimal {
                precision,
                scale,
                bits,
            } => write!(f, "d:{precision},{scale},{bits}"),
            Format::Timestamp { prefix, time_zone } => write!(f, "{prefix}:{time_zone}"),
            Format::Union { mode, fields } => {
                f.write_str(match mode {
                    UnionMode::Dense => "+ud:",
                    UnionMode::Sparse => "+us:",
                })?;
                for (index, (type_id, _)) in fields.iter().enumerate() {
                    if index > 0 {
                        f.write_str(",")?;
                    }
                    write!(f, "{type_id}")?;
                }
                Ok(())
            }
        }
    }
}

/// Counts the bytes written to it.
struct Counter(usize);

impl fmt::Write for Counter {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        self.0 += s.len();
        Ok(())
    }
}

//! Format strings to types.
//!
//! [`parse_format`] reads one format string, which describes only the
//! top-level type of a node; the children of nested types are separate
//! structs, read by the importer. Every rejection says what was found and what
//! was expected.

use std::sync::Arc;

use arrow_schema::{DataType, IntervalUnit, TimeUnit, UnionMode};

use crate::error::{Error, Path};

/// What one format string says about a node, before its children are read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParsedFormat {
    /// A type the format string describes completely: it has no children.
    /// Primitives, binary and string types (and their views), fixed-size
    /// binary, decimals and the temporal types.
    Leaf(DataType),
    /// `+l`: one child.
    List,
    /// `+L`: one child.
    LargeList,
    /// `+vl`: one child.
    ListView,
    /// `+vL`: one child.
    LargeListView,
    /// `+w:N`: one child, `N` items per list.
    FixedSizeList(i32),
    /// `+s`: any number of children.
    Struct,
    /// `+m`: one child, the `entries` struct of `(key, value)`.
    Map,
    /// `+ud:I,J,...` / `+us:I,J,...`: one child per type id.
    Union {
        /// Dense (`+ud`) or sparse (`+us`).
        mode: UnionMode,
        /// The type ids in child order; each in `0..=127` and distinct.
        type_ids: Vec<i8>,
    },
    /// `+r`: two children, `run_ends` and `values`.
    RunEndEncoded,
}

impl ParsedFormat {
    /// The number of children the format requires, or `None` for a struct,
    /// which may have any number.
    pub fn expected_children(&self) -> Option<usize> {
        match self {
            ParsedFormat::Leaf(_) => Some(0),
            ParsedFormat::List
            | ParsedFormat::LargeList
            | ParsedFormat::ListView
            | ParsedFormat::LargeListView
            | ParsedFormat::FixedSizeList(_)
            | ParsedFormat::Map => Some(1),
            ParsedFormat::Struct => None,
            ParsedFormat::Union { type_ids, .. } => Some(type_ids.len()),
            ParsedFormat::RunEndEncoded => Some(2),
        }
    }

    /// The type in words, for error messages ("a list", "Int32").
    pub fn describe(&self) -> String {
        match self {
            ParsedFormat::Leaf(data_type) => data_type.to_string(),
            ParsedFormat::List => "a list".into(),
            ParsedFormat::LargeList => "a large list".into(),
            ParsedFormat::ListView => "a list view".into(),
            ParsedFormat::LargeListView => "a large list view".into(),
            ParsedFormat::FixedSizeList(_) => "a fixed-size list".into(),
            ParsedFormat::Struct => "a struct".into(),
            ParsedFormat::Map => "a map".into(),
            ParsedFormat::Union { mode, type_ids } => {
                let mode = match mode {
                    UnionMode::Dense => "dense",
                    UnionMode::Sparse => "sparse",
                };
                format!("a {mode} union with {} type ids", type_ids.len())
            }
            ParsedFormat::RunEndEncoded => "a run-end encoded array".into(),
        }
    }
}

/// Parses a format string of the C Data Interface.
///
/// The error is [`Error::Invalid`] whose message names the format, the
/// defect and what was expected, e.g. `format "+w:" is truncated: expected
/// a list size after "+w:"` (the importer reports the same message at the
/// node's path). Nothing here panics, whatever the input.
///
/// ```
/// use arrow_device::schema::{parse_format, ParsedFormat};
/// use arrow_schema::{DataType, TimeUnit};
///
/// assert_eq!(parse_format("d:9,2,32")?, ParsedFormat::Leaf(DataType::Decimal32(9, 2)));
/// assert_eq!(
///     parse_format("tsu:UTC")?,
///     ParsedFormat::Leaf(DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())))
/// );
/// assert_eq!(parse_format("+w:3")?, ParsedFormat::FixedSizeList(3));
/// assert_eq!(
///     parse_format("d:0,2").unwrap_err().to_string(),
///     r#"array: format "d:0,2" has decimal precision 0, expected 1 to 38 for a 128-bit decimal"#
/// );
/// # Ok::<(), arrow_device::Error>(())
/// ```
pub fn parse_format(format: &str) -> crate::Result<ParsedFormat> {
    parse(format).map_err(|message| Error::invalid(&Path::root(), message))
}

/// [`parse_format`] with the bare message, for the importer to place at a
/// node's path.
pub(crate) fn parse(format: &str) -> Result<ParsedFormat, String> {
    use ParsedFormat::Leaf;
    let parsed = match format {
        "n" => Leaf(DataType::Null),
        "b" => Leaf(DataType::Boolean),
        "c" => Leaf(DataType::Int8),
        "C" => Leaf(DataType::UInt8),
        "s" => Leaf(DataType::Int16),
        "S" => Leaf(DataType::UInt16),
        "i" => Leaf(DataType::Int32),
        "I" => Leaf(DataType::UInt32),
        "l" => Leaf(DataType::Int64),
        "L" => Leaf(DataType::UInt64),
        "e" => Leaf(DataType::Float16),
        "f" => Leaf(DataType::Float32),
        "g" => Leaf(DataType::Float64),
        "z" => Leaf(DataType::Binary),
        "Z" => Leaf(DataType::LargeBinary),
        "vz" => Leaf(DataType::BinaryView),
        "u" => Leaf(DataType::Utf8),
        "U" => Leaf(DataType::LargeUtf8),
        "vu" => Leaf(DataType::Utf8View),
        "tdD" => Leaf(DataType::Date32),
        "tdm" => Leaf(DataType::Date64),
        "tts" => Leaf(DataType::Time32(TimeUnit::Second)),
        "ttm" => Leaf(DataType::Time32(TimeUnit::Millisecond)),
        "ttu" => Leaf(DataType::Time64(TimeUnit::Microsecond)),
        "ttn" => Leaf(DataType::Time64(TimeUnit::Nanosecond)),
        "tDs" => Leaf(DataType::Duration(TimeUnit::Second)),
        "tDm" => Leaf(DataType::Duration(TimeUnit::Millisecond)),
        "tDu" => Leaf(DataType::Duration(TimeUnit::Microsecond)),
        "tDn" => Leaf(DataType::Duration(TimeUnit::Nanosecond)),
        "tiM" => Leaf(DataType::Interval(IntervalUnit::YearMonth)),
        "tiD" => Leaf(DataType::Interval(IntervalUnit::DayTime)),
        "tin" => Leaf(DataType::Interval(IntervalUnit::MonthDayNano)),
        "+l" => ParsedFormat::List,
        "+L" => ParsedFormat::LargeList,
        "+vl" => ParsedFormat::ListView,
        "+vL" => ParsedFormat::LargeListView,
        "+s" => ParsedFormat::Struct,
        "+m" => ParsedFormat::Map,
        "+r" => ParsedFormat::RunEndEncoded,
        _ => return parse_parameterized(format),
    };
    Ok(parsed)
}

/// The formats that are complete without parameters, longest first among
/// those sharing a prefix, to name trailing characters.
const FIXED_FORMATS: &[&str] = &[
    "n", "b", "c", "C", "s", "S", "i", "I", "l", "L", "e", "f", "g", "z", "Z", "vz", "u", "U",
    "vu", "tdD", "tdm", "tts", "ttm", "ttu", "ttn", "tDs", "tDm", "tDu", "tDn", "tiM", "tiD",
    "tin", "+l", "+L", "+vl", "+vL", "+s", "+m", "+r",
];

/// Formats that are valid beginnings of a longer format, with what must
/// follow them.
const PREFIXES: &[(&str, &str)] = &[
    ("w", r#"":" and a byte width"#),
    ("d", r#"":" and a precision"#),
    ("v", r#""z" or "u""#),
    ("t", "a temporal type letter (d, t, s, D or i)"),
    ("td", r#"a date unit ("D" or "m")"#),
    ("tt", r#"a time unit ("s", "m", "u" or "n")"#),
    (
        "ts",
        r#"a time unit ("s", "m", "u" or "n") and ":" with a time zone"#,
    ),
    ("tD", r#"a duration unit ("s", "m", "u" or "n")"#),
    ("ti", r#"an interval unit ("M", "D" or "n")"#),
    ("+", "a nested type letter (l, L, v, w, s, m, u or r)"),
    ("+v", r#""l" or "L""#),
    ("+w", r#"":" and a list size"#),
    ("+u", r#""d:" or "s:" and type ids"#),
    ("+ud", r#"":" and type ids"#),
    ("+us", r#"":" and type ids"#),
];

fn parse_parameterized(format: &str) -> Result<ParsedFormat, String> {
    let f = quote(format);
    if let Some(size) = format.strip_prefix("w:") {
        let width = size_param(format, "w:", size, "byte width")?;
        return Ok(ParsedFormat::Leaf(DataType::FixedSizeBinary(width)));
    }
    if let Some(size) = format.strip_prefix("+w:") {
        return Ok(ParsedFormat::FixedSizeList(size_param(
            format,
            "+w:",
            size,
            "list size",
        )?));
    }
    if let Some(params) = format.strip_prefix("d:") {
        return parse_decimal(format, params).map(ParsedFormat::Leaf);
    }
    if let Some(rest) = format.strip_prefix("ts") {
        if !rest.is_empty() {
            return parse_timestamp(format, rest).map(ParsedFormat::Leaf);
        }
    }
    for (prefix, mode) in [("+ud:", UnionMode::Dense), ("+us:", UnionMode::Sparse)] {
        if let Some(ids) = format.strip_prefix(prefix) {
            let type_ids = parse_type_ids(format, ids)?;
            return Ok(ParsedFormat::Union { mode, type_ids });
        }
    }
    if format.is_empty() {
        return Err("format is empty, expected a format string such as \"i\" or \"+s\"".into());
    }
    if let Some((prefix, expected)) = PREFIXES.iter().find(|(p, _)| *p == format) {
        return Err(format!(
            "format {f} is truncated: expected {expected} after {}",
            quote(prefix)
        ));
    }
    let complete = FIXED_FORMATS
        .iter()
        .filter(|fixed| format.starts_with(**fixed))
        .max_by_key(|fixed| fixed.len());
    if let Some(fixed) = complete {
        let trailing = &format[fixed.len()..];
        return Err(format!(
            "format {f} has trailing characters {} after {}",
            quote(trailing),
            quote(fixed)
        ));
    }
    Err(format!(
        "format {f} is not a format string of the C Data Interface"
    ))
}

/// `w:N` and `+w:N`: a size in `0..=i32::MAX`.
fn size_param(format: &str, prefix: &str, text: &str, what: &str) -> Result<i32, String> {
    let f = quote(format);
    if text.is_empty() {
        return Err(format!(
            "format {f} is truncated: expected a {what} after {}",
            quote(prefix)
        ));
    }
    match integer(text) {
        None => Err(format!(
            "format {f} has a {what} {} that is not a number",
            quote(text)
        )),
        Some(Integer::Value(v)) if v < 0 => Err(format!(
            "format {f} has a negative {what} {v}, expected >= 0"
        )),
        Some(Integer::Value(v)) => i32::try_from(v).map_err(|_| too_large(&f, what, text)),
        Some(Integer::Overflow) => Err(too_large(&f, what, text)),
    }
}

fn too_large(f: &str, what: &str, text: &str) -> String {
    format!(
        "format {f} has a {what} {text} that is too large, expected at most {}",
        i32::MAX
    )
}

/// `d:P,S` or `d:P,S,BITS`.
fn parse_decimal(format: &str, params: &str) -> Result<DataType, String> {
    let f = quote(format);
    let mut parts = params.splitn(4, ',');
    // `splitn` always yields a first item, possibly empty.
    let precision = parts.next().unwrap_or_default();
    if params.is_empty() {
        return Err(format!(
            r#"format {f} is truncated: expected a precision after "d:""#
        ));
    }
    let Some(scale) = parts.next() else {
        return Err(format!(
            r#"format {f} is truncated: expected ",scale" after the precision"#
        ));
    };
    let bits = parts.next();
    if scale.is_empty() && bits.is_none() {
        return Err(format!(
            "format {f} is truncated: expected a scale after the precision"
        ));
    }
    if let Some(rest) = parts.next() {
        return Err(format!(
            "format {f} has trailing characters {} after the bit width",
            quote(&format!(",{rest}"))
        ));
    }
    let bits = match bits {
        None => 128,
        Some("") => {
            return Err(format!(
                r#"format {f} is truncated: expected a bit width after the scale"#
            ))
        }
        Some("32") => 32,
        Some("64") => 64,
        Some("128") => 128,
        Some("256") => 256,
        Some(other) => {
            return Err(format!(
                "format {f} has decimal bit width {}, expected 32, 64, 128 or 256",
                quote(other)
            ))
        }
    };
    let max_precision = match bits {
        32 => arrow_schema::DECIMAL32_MAX_PRECISION,
        64 => arrow_schema::DECIMAL64_MAX_PRECISION,
        128 => arrow_schema::DECIMAL128_MAX_PRECISION,
        _ => arrow_schema::DECIMAL256_MAX_PRECISION,
    };
    let precision = match integer(precision) {
        None => {
            return Err(format!(
                "format {f} has a decimal precision {} that is not a number",
                quote(precision)
            ))
        }
        Some(Integer::Value(v)) if (1..=i64::from(max_precision)).contains(&v) => v as u8,
        Some(_) => {
            return Err(format!(
                "format {f} has decimal precision {precision}, expected 1 to {max_precision} for \
                 a {bits}-bit decimal"
            ))
        }
    };
    // The scale may be negative; arrow-rs stores it as an i8. A scale above
    // the precision is accepted, as Arrow C++ does.
    let scale = match integer(scale) {
        None => {
            return Err(format!(
                "format {f} has a decimal scale {} that is not a number",
                quote(scale)
            ))
        }
        Some(Integer::Value(v)) => i8::try_from(v).ok(),
        Some(Integer::Overflow) => None,
    }
    .ok_or_else(|| format!("format {f} has decimal scale {scale}, expected -128 to 127"))?;
    Ok(match bits {
        32 => DataType::Decimal32(precision, scale),
        64 => DataType::Decimal64(precision, scale),
        128 => DataType::Decimal128(precision, scale),
        _ => DataType::Decimal256(precision, scale),
    })
}

/// `tsU:TZ`, given what follows `ts` (not empty).
fn parse_timestamp(format: &str, rest: &str) -> Result<DataType, String> {
    let f = quote(format);
    let mut chars = rest.chars();
    let unit = match chars.next() {
        Some('s') => TimeUnit::Second,
        Some('m') => TimeUnit::Millisecond,
        Some('u') => TimeUnit::Microsecond,
        Some('n') => TimeUnit::Nanosecond,
        other => {
            return Err(format!(
                r#"format {f} has timestamp unit {}, expected "s", "m", "u" or "n""#,
                quote(&other.map(String::from).unwrap_or_default())
            ))
        }
    };
    let after_unit = chars.as_str();
    let head = &format[..format.len() - after_unit.len()];
    // Spec note (1): the colon is present even when the time zone is empty.
    match after_unit.strip_prefix(':') {
        Some("") => Ok(DataType::Timestamp(unit, None)),
        Some(tz) => Ok(DataType::Timestamp(unit, Some(Arc::from(tz)))),
        None if after_unit.is_empty() => Err(format!(
            r#"format {f} is truncated: expected ":" and a time zone (possibly empty) after {}"#,
            quote(head)
        )),
        None => Err(format!(
            r#"format {f} has {} after {}, expected ":" and a time zone (possibly empty)"#,
            quote(after_unit),
            quote(head)
        )),
    }
}

/// The comma-separated type ids of `+ud:` / `+us:`; empty means no ids.
fn parse_type_ids(format: &str, ids: &str) -> Result<Vec<i8>, String> {
    let f = quote(format);
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let mut seen = [false; 128];
    let mut type_ids = Vec::new();
    for (position, text) in ids.split(',').enumerate() {
        if text.is_empty() {
            return Err(format!(
                "format {f} has an empty type id at position {position}"
            ));
        }
        let id = match integer(text) {
            None => {
                return Err(format!(
                    "format {f} has a type id {} that is not a number",
                    quote(text)
                ))
            }
            Some(Integer::Value(v)) => i8::try_from(v).ok().filter(|v| *v >= 0),
            Some(Integer::Overflow) => None,
        }
        .ok_or_else(|| format!("format {f} has type id {text}, expected 0 to 127"))?;
        // The id is in 0..=127, so it indexes `seen`.
        let slot = &mut seen[id as usize];
        if *slot {
            return Err(format!("format {f} has type id {id} more than once"));
        }
        *slot = true;
        type_ids.push(id);
    }
    Ok(type_ids)
}

enum Integer {
    Value(i64),
    Overflow,
}

/// A decimal integer as the spec writes them: an optional `-` and ASCII
/// digits, nothing else (no `+`, no spaces). `None` when `text` is not one.
fn integer(text: &str) -> Option<Integer> {
    let digits = text.strip_prefix('-').unwrap_or(text);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(
        text.parse()
            .map(Integer::Value)
            .unwrap_or(Integer::Overflow),
    )
}

/// `text` in quotes with control characters escaped, shortened when a
/// producer sends something long.
pub(crate) fn quote(text: &str) -> String {
    const MAX_CHARS: usize = 64;
    if text.chars().count() <= MAX_CHARS {
        format!("{text:?}")
    } else {
        let head: String = text.chars().take(MAX_CHARS).collect();
        format!("{head:?}...")
    }
}

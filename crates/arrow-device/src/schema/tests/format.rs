//! Every format string of the spec, and malformed ones.

use arrow_schema::UnionMode::{Dense, Sparse};
use arrow_schema::{DataType, IntervalUnit, TimeUnit};

use crate::schema::format::parse;
use crate::schema::ParsedFormat;

fn leaf(format: &str) -> DataType {
    match parse(format) {
        Ok(ParsedFormat::Leaf(data_type)) => data_type,
        other => panic!("{format}: {other:?}"),
    }
}

#[test]
fn every_primitive_format_parses_to_its_type() {
    let cases = [
        ("n", DataType::Null),
        ("b", DataType::Boolean),
        ("c", DataType::Int8),
        ("C", DataType::UInt8),
        ("s", DataType::Int16),
        ("S", DataType::UInt16),
        ("i", DataType::Int32),
        ("I", DataType::UInt32),
        ("l", DataType::Int64),
        ("L", DataType::UInt64),
        ("e", DataType::Float16),
        ("f", DataType::Float32),
        ("g", DataType::Float64),
        ("z", DataType::Binary),
        ("Z", DataType::LargeBinary),
        ("vz", DataType::BinaryView),
        ("u", DataType::Utf8),
        ("U", DataType::LargeUtf8),
        ("vu", DataType::Utf8View),
        ("w:42", DataType::FixedSizeBinary(42)),
        ("w:0", DataType::FixedSizeBinary(0)),
    ];
    for (format, expected) in cases {
        assert_eq!(leaf(format), expected, "{format}");
    }
}

#[test]
fn decimal_formats_pick_the_type_from_the_bit_width() {
    assert_eq!(leaf("d:19,10"), DataType::Decimal128(19, 10));
    assert_eq!(leaf("d:9,2,32"), DataType::Decimal32(9, 2));
    assert_eq!(leaf("d:18,-3,64"), DataType::Decimal64(18, -3));
    assert_eq!(leaf("d:38,0,128"), DataType::Decimal128(38, 0));
    assert_eq!(leaf("d:76,76,256"), DataType::Decimal256(76, 76));
    assert_eq!(leaf("d:1,-128"), DataType::Decimal128(1, -128));
}

#[test]
fn temporal_formats_parse_to_their_units() {
    use IntervalUnit::*;
    use TimeUnit::*;
    let cases = [
        ("tdD", DataType::Date32),
        ("tdm", DataType::Date64),
        ("tts", DataType::Time32(Second)),
        ("ttm", DataType::Time32(Millisecond)),
        ("ttu", DataType::Time64(Microsecond)),
        ("ttn", DataType::Time64(Nanosecond)),
        ("tss:", DataType::Timestamp(Second, None)),
        ("tsm:", DataType::Timestamp(Millisecond, None)),
        ("tsu:", DataType::Timestamp(Microsecond, None)),
        ("tsn:", DataType::Timestamp(Nanosecond, None)),
        ("tss:UTC", DataType::Timestamp(Second, Some("UTC".into()))),
        (
            "tsm:+01:00",
            DataType::Timestamp(Millisecond, Some("+01:00".into())),
        ),
        (
            "tsu:Europe/Paris",
            DataType::Timestamp(Microsecond, Some("Europe/Paris".into())),
        ),
        (
            "tsn:America/New_York",
            DataType::Timestamp(Nanosecond, Some("America/New_York".into())),
        ),
        ("tDs", DataType::Duration(Second)),
        ("tDm", DataType::Duration(Millisecond)),
        ("tDu", DataType::Duration(Microsecond)),
        ("tDn", DataType::Duration(Nanosecond)),
        ("tiM", DataType::Interval(YearMonth)),
        ("tiD", DataType::Interval(DayTime)),
        ("tin", DataType::Interval(MonthDayNano)),
    ];
    for (format, expected) in cases {
        assert_eq!(leaf(format), expected, "{format}");
    }
}

#[test]
fn nested_formats_parse_with_their_child_counts() {
    let cases = [
        ("+l", ParsedFormat::List, Some(1)),
        ("+L", ParsedFormat::LargeList, Some(1)),
        ("+vl", ParsedFormat::ListView, Some(1)),
        ("+vL", ParsedFormat::LargeListView, Some(1)),
        ("+w:123", ParsedFormat::FixedSizeList(123), Some(1)),
        ("+s", ParsedFormat::Struct, None),
        ("+m", ParsedFormat::Map, Some(1)),
        ("+r", ParsedFormat::RunEndEncoded, Some(2)),
        (
            "+ud:0,5,127",
            ParsedFormat::Union {
                mode: Dense,
                type_ids: vec![0, 5, 127],
            },
            Some(3),
        ),
        (
            "+us:4,5",
            ParsedFormat::Union {
                mode: Sparse,
                type_ids: vec![4, 5],
            },
            Some(2),
        ),
        (
            "+us:",
            ParsedFormat::Union {
                mode: Sparse,
                type_ids: vec![],
            },
            Some(0),
        ),
        ("i", ParsedFormat::Leaf(DataType::Int32), Some(0)),
    ];
    for (format, expected, children) in cases {
        let parsed = parse(format).unwrap();
        assert_eq!(parsed, expected, "{format}");
        assert_eq!(parsed.expected_children(), children, "{format}");
    }
}

#[test]
fn malformed_formats_name_the_defect() {
    let cases = [
        (
            "",
            "format is empty, expected a format string such as \"i\" or \"+s\"",
        ),
        (
            "+w:",
            r#"format "+w:" is truncated: expected a list size after "+w:""#,
        ),
        (
            "+w",
            r#"format "+w" is truncated: expected ":" and a list size after "+w""#,
        ),
        (
            "w:",
            r#"format "w:" is truncated: expected a byte width after "w:""#,
        ),
        (
            "w:abc",
            r#"format "w:abc" has a byte width "abc" that is not a number"#,
        ),
        (
            "w:+4",
            r#"format "w:+4" has a byte width "+4" that is not a number"#,
        ),
        (
            "w: 4",
            r#"format "w: 4" has a byte width " 4" that is not a number"#,
        ),
        (
            "w:-1",
            r#"format "w:-1" has a negative byte width -1, expected >= 0"#,
        ),
        (
            "+w:-2",
            r#"format "+w:-2" has a negative list size -2, expected >= 0"#,
        ),
        (
            "+w:2147483648",
            r#"format "+w:2147483648" has a list size 2147483648 that is too large, expected at most 2147483647"#,
        ),
        (
            "w:99999999999999999999999",
            r#"format "w:99999999999999999999999" has a byte width 99999999999999999999999 that is too large, expected at most 2147483647"#,
        ),
        (
            "d",
            r#"format "d" is truncated: expected ":" and a precision after "d""#,
        ),
        (
            "d:",
            r#"format "d:" is truncated: expected a precision after "d:""#,
        ),
        (
            "d:10",
            r#"format "d:10" is truncated: expected ",scale" after the precision"#,
        ),
        (
            "d:10,",
            r#"format "d:10," is truncated: expected a scale after the precision"#,
        ),
        (
            "d:,2",
            r#"format "d:,2" has a decimal precision "" that is not a number"#,
        ),
        (
            "d:10,2,",
            r#"format "d:10,2," is truncated: expected a bit width after the scale"#,
        ),
        (
            "d:0,0",
            r#"format "d:0,0" has decimal precision 0, expected 1 to 38 for a 128-bit decimal"#,
        ),
        (
            "d:10,2,32",
            r#"format "d:10,2,32" has decimal precision 10, expected 1 to 9 for a 32-bit decimal"#,
        ),
        (
            "d:19,2,64",
            r#"format "d:19,2,64" has decimal precision 19, expected 1 to 18 for a 64-bit decimal"#,
        ),
        (
            "d:39,2",
            r#"format "d:39,2" has decimal precision 39, expected 1 to 38 for a 128-bit decimal"#,
        ),
        (
            "d:77,2,256",
            r#"format "d:77,2,256" has decimal precision 77, expected 1 to 76 for a 256-bit decimal"#,
        ),
        (
            "d:-5,2",
            r#"format "d:-5,2" has decimal precision -5, expected 1 to 38 for a 128-bit decimal"#,
        ),
        (
            "d:x,2",
            r#"format "d:x,2" has a decimal precision "x" that is not a number"#,
        ),
        (
            "d:10,y",
            r#"format "d:10,y" has a decimal scale "y" that is not a number"#,
        ),
        (
            "d:10,200",
            r#"format "d:10,200" has decimal scale 200, expected -128 to 127"#,
        ),
        (
            "d:10,2,16",
            r#"format "d:10,2,16" has decimal bit width "16", expected 32, 64, 128 or 256"#,
        ),
        (
            "d:10,2,128,7",
            r#"format "d:10,2,128,7" has trailing characters ",7" after the bit width"#,
        ),
        (
            "t",
            r#"format "t" is truncated: expected a temporal type letter (d, t, s, D or i) after "t""#,
        ),
        (
            "ts",
            r#"format "ts" is truncated: expected a time unit ("s", "m", "u" or "n") and ":" with a time zone after "ts""#,
        ),
        (
            "tsu",
            r#"format "tsu" is truncated: expected ":" and a time zone (possibly empty) after "tsu""#,
        ),
        (
            "tsuUTC",
            r#"format "tsuUTC" has "UTC" after "tsu", expected ":" and a time zone (possibly empty)"#,
        ),
        (
            "tsx:",
            r#"format "tsx:" has timestamp unit "x", expected "s", "m", "u" or "n""#,
        ),
        (
            "tdDx",
            r#"format "tdDx" has trailing characters "x" after "tdD""#,
        ),
        ("ix", r#"format "ix" has trailing characters "x" after "i""#),
        (
            "+lq",
            r#"format "+lq" has trailing characters "q" after "+l""#,
        ),
        (
            "+vLL",
            r#"format "+vLL" has trailing characters "L" after "+vL""#,
        ),
        (
            "tdx",
            r#"format "tdx" is not a format string of the C Data Interface"#,
        ),
        (
            "q",
            r#"format "q" is not a format string of the C Data Interface"#,
        ),
        (
            "+x",
            r#"format "+x" is not a format string of the C Data Interface"#,
        ),
        (
            "+ud",
            r#"format "+ud" is truncated: expected ":" and type ids after "+ud""#,
        ),
        (
            "+u",
            r#"format "+u" is truncated: expected "d:" or "s:" and type ids after "+u""#,
        ),
        (
            "+ud:1,,2",
            r#"format "+ud:1,,2" has an empty type id at position 1"#,
        ),
        (
            "+us:1,2,",
            r#"format "+us:1,2," has an empty type id at position 2"#,
        ),
        (
            "+us:128",
            r#"format "+us:128" has type id 128, expected 0 to 127"#,
        ),
        (
            "+us:-1",
            r#"format "+us:-1" has type id -1, expected 0 to 127"#,
        ),
        (
            "+ud:a",
            r#"format "+ud:a" has a type id "a" that is not a number"#,
        ),
        (
            "+ud:3,4,3",
            r#"format "+ud:3,4,3" has type id 3 more than once"#,
        ),
        (
            "i\n",
            r#"format "i\n" has trailing characters "\n" after "i""#,
        ),
    ];
    for (format, expected) in cases {
        assert_eq!(parse(format).unwrap_err(), expected, "{format:?}");
    }
}

#[test]
fn long_formats_are_shortened_in_messages() {
    let format = format!("q{}", "x".repeat(1000));
    let message = parse(&format).unwrap_err();
    assert!(message.len() < 150, "{message}");
    assert!(message.starts_with(r#"format "qxxx"#), "{message}");
    assert!(message.contains(r#""..."#), "{message}");
}

#[test]
fn no_short_string_makes_the_parser_panic() {
    // Every string of up to three characters over the alphabet the
    // formats use, and then some: each parses or is rejected, no panic,
    // and whatever parses has the arity its format promises.
    let alphabet: Vec<char> = "nbcCsSiIlLefgzZuUvwd:,0123456789-+tDmMrnxé\0"
        .chars()
        .collect();
    let mut accepted = 0;
    let mut strings = vec![String::new()];
    for _ in 0..3 {
        let mut longer = Vec::new();
        for s in &strings {
            for c in &alphabet {
                longer.push(format!("{s}{c}"));
            }
        }
        for s in &longer {
            match parse(s) {
                Ok(_) => accepted += 1,
                Err(message) => assert!(message.starts_with("format "), "{s:?}: {message}"),
            }
        }
        strings = longer;
    }
    // Sanity: the walk did reach valid formats of each length.
    assert!(accepted > 40, "{accepted}");
}

//! The named inputs of the `schema` target.

use arrow_device::schema::parse_format;

use super::decode::{
    encode_format, encode_tree, DecimalWidth, Defect, FlagsSpec, FormatSpec, MetadataSpec,
    Mutation, NodeSpec, FIXED_FORMATS,
};
use crate::input::Encoder;

fn fixed(format: &str) -> FormatSpec {
    let index = FIXED_FORMATS
        .iter()
        .position(|f| *f == format)
        .unwrap_or_else(|| panic!("{format:?} is not a fixed format"));
    FormatSpec::Fixed(index as u8)
}

pub(super) fn node(format: FormatSpec, name: &str) -> NodeSpec {
    NodeSpec {
        format,
        name: Some(name.as_bytes().to_vec()),
        metadata: None,
        flags: FlagsSpec::Nullable,
        released: false,
        children: Vec::new(),
        dictionary: None,
    }
}

pub(super) fn leaf(format: &str, name: &str) -> NodeSpec {
    node(fixed(format), name)
}

impl NodeSpec {
    pub(super) fn with(mut self, children: Vec<NodeSpec>) -> Self {
        self.children = children;
        self
    }

    pub(super) fn non_nullable(mut self) -> Self {
        self.flags = FlagsSpec::None;
        self
    }

    pub(super) fn dictionary(mut self, values: NodeSpec) -> Self {
        self.dictionary = Some(Box::new(values));
        self
    }

    pub(super) fn metadata(mut self, pairs: &[(&str, &str)]) -> Self {
        self.metadata = Some(MetadataSpec {
            count_lie: 0,
            pairs: pairs
                .iter()
                .map(|(k, v)| (0, k.as_bytes().to_vec(), 0, v.as_bytes().to_vec()))
                .collect(),
        });
        self
    }
}

/// A well-formed node of `format` with the children the spec asks for.
pub(super) fn typical(format: &str) -> NodeSpec {
    let n = leaf(format, "x");
    match format {
        "+l" | "+L" | "+vl" | "+vL" => n.with(vec![leaf("i", "item")]),
        "+s" => n.with(vec![leaf("i", "ints"), leaf("f", "floats")]),
        "+m" => n.with(vec![leaf("+s", "entries")
            .non_nullable()
            .with(vec![leaf("u", "key").non_nullable(), leaf("g", "value")])]),
        "+r" => n.with(vec![
            leaf("i", "run_ends").non_nullable(),
            leaf("f", "values"),
        ]),
        _ => n,
    }
}

/// `fixed-` and the type in words (`fixed-time32-s`, `fixed-a-large-list`):
/// file names that differ in more than case.
fn fixed_seed_name(format: &str) -> String {
    let words = match parse_format(format) {
        Ok(parsed) => parsed.describe(),
        Err(e) => panic!("the spec's format {format:?} does not parse: {e}"),
    };
    let mut name = String::from("fixed");
    for word in words
        .replace('µ', "u")
        .to_ascii_lowercase()
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|w| !w.is_empty())
    {
        name.push('-');
        name.push_str(word);
    }
    name
}

const NO_DEFECT: Defect = Defect { op: 0, arg: 0 };

/// Named inputs: every format of the spec in a well-formed tree, nested
/// and dictionary-encoded trees, metadata, the nesting limit, defects, and
/// lone format strings.
pub fn seeds() -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let mut tree = |name: String, root: NodeSpec, defect: Defect| {
        out.push((name, encode_tree(&root, defect)));
    };
    for format in FIXED_FORMATS {
        tree(fixed_seed_name(format), typical(format), NO_DEFECT);
    }
    tree(
        "fixed-size-binary-42".into(),
        node(FormatSpec::FixedSizeBinary(42), "x"),
        NO_DEFECT,
    );
    tree(
        "fixed-size-list-3".into(),
        node(FormatSpec::FixedSizeList(3), "x").with(vec![leaf("g", "item")]),
        NO_DEFECT,
    );
    for (precision, scale, width) in [
        (19, 10, DecimalWidth::Absent),
        (9, 2, DecimalWidth::Bits(32)),
        (18, -3, DecimalWidth::Bits(64)),
        (38, 38, DecimalWidth::Bits(128)),
        (76, 5, DecimalWidth::Bits(256)),
    ] {
        let format = FormatSpec::Decimal {
            precision,
            scale,
            width,
        };
        let bits = match width {
            DecimalWidth::Bits(bits) => bits.to_string(),
            _ => "default".to_string(),
        };
        tree(
            format!("decimal-{bits}-precision-{precision}-scale-{scale}"),
            node(format, "x"),
            NO_DEFECT,
        );
    }
    for (unit, time_zone) in [(0, ""), (1, "UTC"), (2, "America/New_York"), (3, "+05:30")] {
        tree(
            format!("timestamp-{}", b"smun"[usize::from(unit)] as char),
            node(
                FormatSpec::Timestamp {
                    unit,
                    time_zone: time_zone.as_bytes().to_vec(),
                },
                "x",
            ),
            NO_DEFECT,
        );
    }
    tree(
        "union-sparse-4-5".into(),
        node(
            FormatSpec::Union {
                dense: false,
                type_ids: vec![4, 5],
            },
            "x",
        )
        .with(vec![leaf("i", "ints"), leaf("f", "floats")]),
        NO_DEFECT,
    );
    tree(
        "union-dense-0-1-127".into(),
        node(
            FormatSpec::Union {
                dense: true,
                type_ids: vec![0, 1, 127],
            },
            "x",
        )
        .with(vec![leaf("u", "a"), leaf("n", "b"), typical("+l")]),
        NO_DEFECT,
    );
    for index in ["c", "C", "s", "S", "i", "I", "l", "L"] {
        tree(
            fixed_seed_name(index).replace("fixed-", "dictionary-"),
            leaf(index, "x").dictionary(leaf("u", "")),
            NO_DEFECT,
        );
    }
    tree(
        "dictionary-ordered-of-decimals".into(),
        NodeSpec {
            flags: FlagsSpec::Bits(3),
            ..leaf("s", "x").dictionary(node(
                FormatSpec::Decimal {
                    precision: 12,
                    scale: 5,
                    width: DecimalWidth::Absent,
                },
                "",
            ))
        },
        NO_DEFECT,
    );
    tree(
        "map-keys-sorted".into(),
        NodeSpec {
            flags: FlagsSpec::Bits(6),
            ..typical("+m")
        },
        NO_DEFECT,
    );
    tree(
        "nested-struct-of-everything".into(),
        leaf("+s", "")
            .with(vec![
                typical("+m"),
                leaf("+L", "lists").with(vec![typical("+s")]),
                typical("+r"),
                leaf("i", "dict").dictionary(typical("+l")),
                node(FormatSpec::FixedSizeList(2), "pairs").with(vec![typical("+vL")]),
            ])
            .metadata(&[("schema", "level")]),
        NO_DEFECT,
    );
    tree(
        "extension-metadata".into(),
        node(FormatSpec::FixedSizeBinary(16), "id").metadata(&[
            ("ARROW:extension:name", "arrow.uuid"),
            ("ARROW:extension:metadata", ""),
        ]),
        NO_DEFECT,
    );
    tree(
        "metadata-lengths-lie".into(),
        NodeSpec {
            metadata: Some(MetadataSpec {
                count_lie: 3,
                pairs: vec![(0, b"k".to_vec(), 100, b"v".to_vec())],
            }),
            ..leaf("i", "x")
        },
        NO_DEFECT,
    );
    tree(
        "metadata-negative-count".into(),
        NodeSpec {
            metadata: Some(MetadataSpec {
                count_lie: -1,
                pairs: Vec::new(),
            }),
            ..leaf("i", "x")
        },
        NO_DEFECT,
    );
    // 1 + 63 lists put the leaf at depth 64, the deepest accepted; one
    // more level is refused.
    for (levels, name) in [(63, "at"), (64, "past")] {
        tree(
            format!("nesting-{name}-the-limit"),
            node(FormatSpec::Chain(levels), "deep").with(vec![leaf("i", "item")]),
            NO_DEFECT,
        );
    }
    tree(
        "released-child".into(),
        typical("+s").with(vec![
            leaf("i", "a"),
            NodeSpec {
                released: true,
                ..leaf("u", "b")
            },
        ]),
        NO_DEFECT,
    );
    tree(
        "name-not-utf8".into(),
        NodeSpec {
            name: Some(b"\xff\xfe".to_vec()),
            ..leaf("i", "x")
        },
        NO_DEFECT,
    );
    tree(
        "name-null-format-raw".into(),
        NodeSpec {
            name: None,
            ..node(FormatSpec::Raw(b"+w:".to_vec()), "")
        },
        NO_DEFECT,
    );
    for (op, what) in [
        (2, "dictionary-cycle"),
        (3, "children-null"),
        (4, "child-null"),
        (5, "child-cycle"),
        (6, "child-shared"),
        (7, "n-children-negative"),
    ] {
        let arg = if op == 7 { 0xff } else { 1 };
        tree(format!("defect-{what}"), typical("+s"), Defect { op, arg });
    }

    let mut format = |name: &str, format: FormatSpec| {
        let mut e = Encoder::new();
        e.u8(3);
        encode_format(&mut e, &format);
        out.push((format!("format-{name}"), e.finish()));
    };
    format(
        "decimal-width-other",
        FormatSpec::Decimal {
            precision: 5,
            scale: 1,
            width: DecimalWidth::Other(16),
        },
    );
    format(
        "union-repeated-id",
        FormatSpec::Union {
            dense: true,
            type_ids: vec![3, 3],
        },
    );
    format(
        "timestamp-bad-unit",
        FormatSpec::Timestamp {
            unit: 4,
            time_zone: b"UTC".to_vec(),
        },
    );
    format(
        "fixed-size-list-too-large",
        FormatSpec::FixedSizeList(1 << 40),
    );
    format(
        "mutated-trailing",
        FormatSpec::Mutated(
            Box::new(fixed("tDs")),
            Mutation {
                op: 0,
                position: 3,
                byte: b'x',
            },
        ),
    );
    format("raw-empty", FormatSpec::Raw(Vec::new()));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seed_names_are_distinct_ignoring_case() {
        let mut names: Vec<String> = seeds().into_iter().map(|(n, _)| n.to_lowercase()).collect();
        let count = names.len();
        names.sort();
        let mut unique = names.clone();
        unique.dedup();
        assert_eq!(unique.len(), count, "{names:?}");
    }
}

//! The byte layout of a `schema` case (see the module documentation of
//! [`crate::schema`]): what a case is made of, [`decode_tree`] and
//! `read_format` that read it, and [`encode_tree`] / `encode_format` that
//! write it for seeds.

use arrow_device::schema::MAX_NESTING_DEPTH;

use crate::input::{Encoder, Input};

/// Every format string of the spec that takes no parameters
/// (CDataInterface.rst, "Data type description -- format strings").
pub const FIXED_FORMATS: [&str; 39] = [
    "n", "b", "c", "C", "s", "S", "i", "I", "l", "L", "e", "f", "g", "z", "Z", "vz", "u", "U",
    "vu", "tdD", "tdm", "tts", "ttm", "ttu", "ttn", "tDs", "tDm", "tDu", "tDn", "tiM", "tiD",
    "tin", "+l", "+L", "+vl", "+vL", "+s", "+m", "+r",
];

const FORMAT_CHOICES: u8 = 48;
/// Generation depth bound: past the importer's limit, so that it is hit.
const MAX_TREE_DEPTH: usize = MAX_NESTING_DEPTH + 8;
const MAX_NODES: usize = 512;
const MAX_CHAIN: u8 = 80;
// ------------------------------------------------------------------ cases

/// A format string, before it is written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FormatSpec {
    /// `FIXED_FORMATS[index]`.
    Fixed(u8),
    FixedSizeBinary(i64),
    FixedSizeList(i64),
    Decimal {
        precision: i16,
        scale: i16,
        width: DecimalWidth,
    },
    /// `unit`: 0..=3 are s, m, u, n; 4 an invalid unit.
    Timestamp {
        unit: u8,
        time_zone: Vec<u8>,
    },
    Union {
        dense: bool,
        type_ids: Vec<u8>,
    },
    Raw(Vec<u8>),
    Mutated(Box<FormatSpec>, Mutation),
    Null,
    /// `+l` around `levels` more `+l`, around the node's one child.
    Chain(u8),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecimalWidth {
    Absent,
    Bits(u16),
    Other(u8),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mutation {
    /// 0 insert, 1 delete, 2 replace, 3 truncate.
    pub op: u8,
    pub position: u8,
    pub byte: u8,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlagsSpec {
    Nullable,
    None,
    Raw(i64),
    Bits(u8),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetadataSpec {
    pub count_lie: i32,
    /// `(key_lie, key, value_lie, value)`.
    pub pairs: Vec<(i32, Vec<u8>, i32, Vec<u8>)>,
}

/// One node of a tree, as decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeSpec {
    pub format: FormatSpec,
    pub name: Option<Vec<u8>>,
    pub metadata: Option<MetadataSpec>,
    pub flags: FlagsSpec,
    pub released: bool,
    pub children: Vec<NodeSpec>,
    pub dictionary: Option<Box<NodeSpec>>,
}

/// A defect written into the built root.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Defect {
    pub op: u8,
    pub arg: u8,
}

// ------------------------------------------------------------------ decoding

struct Decoder<'i, 'a> {
    input: &'i mut Input<'a>,
    nodes: usize,
}

impl Decoder<'_, '_> {
    fn node(&mut self, depth: usize) -> NodeSpec {
        self.nodes += 1;
        let control = self.input.u8();
        let format = read_format(self.input, 0);
        let name = (control & 0x10 == 0).then(|| self.input.bytes().to_vec());
        let metadata = (control & 0x20 != 0).then(|| read_metadata(self.input));
        let flags = match control >> 6 {
            0 => FlagsSpec::Nullable,
            1 => FlagsSpec::None,
            2 => FlagsSpec::Raw(self.input.i64()),
            _ => FlagsSpec::Bits(self.input.u8()),
        };
        let grows = depth < MAX_TREE_DEPTH && self.nodes < MAX_NODES;
        let mut children = Vec::new();
        if let FormatSpec::Chain(levels) = format {
            if grows {
                self.nodes += usize::from(levels);
                children.push(self.node(depth + usize::from(levels) + 1));
            }
        } else {
            let needed = needed_children(&format);
            let mut count = || usize::from(self.input.u8() % 8);
            let n = match (control & 3, needed) {
                (1, _) => count(),
                (0, Some(n)) => n,
                (2, Some(n)) => n + 1,
                (_, Some(n)) => n.saturating_sub(1),
                (0, None) => count(),
                (2, None) => count() + 1,
                (_, None) => count().saturating_sub(1),
            };
            if grows {
                for _ in 0..n {
                    children.push(self.node(depth + 1));
                }
            }
        }
        let dictionary = (control & 4 != 0 && grows).then(|| Box::new(self.node(depth + 1)));
        NodeSpec {
            format,
            name,
            metadata,
            flags,
            released: control & 8 != 0,
            children,
            dictionary,
        }
    }
}

/// The children a format says its node has; `None` where it cannot say.
fn needed_children(format: &FormatSpec) -> Option<usize> {
    match format {
        FormatSpec::Fixed(index) => match FIXED_FORMATS[usize::from(*index)] {
            "+s" => None,
            "+r" => Some(2),
            f if f.starts_with('+') => Some(1),
            _ => Some(0),
        },
        FormatSpec::FixedSizeBinary(_)
        | FormatSpec::Decimal { .. }
        | FormatSpec::Timestamp { .. } => Some(0),
        FormatSpec::FixedSizeList(_) | FormatSpec::Chain(_) => Some(1),
        FormatSpec::Union { type_ids, .. } => Some(type_ids.len()),
        FormatSpec::Raw(_) | FormatSpec::Mutated(..) | FormatSpec::Null => None,
    }
}

pub(super) fn read_format(input: &mut Input<'_>, nesting: usize) -> FormatSpec {
    let sel = input.u8() % FORMAT_CHOICES;
    match sel {
        0..=38 => FormatSpec::Fixed(sel),
        39 => FormatSpec::FixedSizeBinary(input.i64()),
        40 => FormatSpec::FixedSizeList(input.i64()),
        41 => {
            let precision = input.u16() as i16;
            let scale = input.u16() as i16;
            let width = match input.u8() % 6 {
                0 => DecimalWidth::Absent,
                1 => DecimalWidth::Bits(32),
                2 => DecimalWidth::Bits(64),
                3 => DecimalWidth::Bits(128),
                4 => DecimalWidth::Bits(256),
                _ => DecimalWidth::Other(input.u8()),
            };
            FormatSpec::Decimal {
                precision,
                scale,
                width,
            }
        }
        42 => FormatSpec::Timestamp {
            unit: input.u8() % 5,
            time_zone: input.bytes().to_vec(),
        },
        43 => {
            let dense = input.bool();
            let n = input.u8() % 9;
            FormatSpec::Union {
                dense,
                type_ids: (0..n).map(|_| input.u8()).collect(),
            }
        }
        44 => FormatSpec::Raw(input.bytes().to_vec()),
        // Mutations of mutations are cut short at three levels.
        45 if nesting < 3 => {
            let inner = read_format(input, nesting + 1);
            let mutation = Mutation {
                op: input.u8() % 4,
                position: input.u8(),
                byte: input.u8(),
            };
            FormatSpec::Mutated(Box::new(inner), mutation)
        }
        45 | 46 => FormatSpec::Null,
        _ => FormatSpec::Chain(input.u8() % MAX_CHAIN),
    }
}

fn read_metadata(input: &mut Input<'_>) -> MetadataSpec {
    let count_lie = input.i32();
    let n = input.u8() % 8;
    let pairs = (0..n)
        .map(|_| {
            let key_lie = input.i32();
            let key = input.bytes().to_vec();
            let value_lie = input.i32();
            let value = input.bytes().to_vec();
            (key_lie, key, value_lie, value)
        })
        .collect();
    MetadataSpec { count_lie, pairs }
}

/// Decodes a tree case (after the mode byte).
pub fn decode_tree(input: &mut Input<'_>) -> (NodeSpec, Defect) {
    let root = Decoder { input, nodes: 0 }.node(0);
    let defect = Defect {
        op: input.u8(),
        arg: input.u8(),
    };
    (root, defect)
}

// ------------------------------------------------------------------ encoding

pub(super) fn encode_format(e: &mut Encoder, format: &FormatSpec) {
    match format {
        FormatSpec::Fixed(index) => {
            e.u8(*index);
        }
        FormatSpec::FixedSizeBinary(n) => {
            e.u8(39).i64(*n);
        }
        FormatSpec::FixedSizeList(n) => {
            e.u8(40).i64(*n);
        }
        FormatSpec::Decimal {
            precision,
            scale,
            width,
        } => {
            e.u8(41).u16(*precision as u16).u16(*scale as u16);
            match width {
                DecimalWidth::Absent => e.u8(0),
                DecimalWidth::Bits(32) => e.u8(1),
                DecimalWidth::Bits(64) => e.u8(2),
                DecimalWidth::Bits(128) => e.u8(3),
                DecimalWidth::Bits(256) => e.u8(4),
                DecimalWidth::Bits(other) => panic!("no selector for decimal width {other}"),
                DecimalWidth::Other(bits) => e.u8(5).u8(*bits),
            };
        }
        FormatSpec::Timestamp { unit, time_zone } => {
            e.u8(42).u8(*unit).bytes(time_zone);
        }
        FormatSpec::Union { dense, type_ids } => {
            e.u8(43).bool(*dense).u8(type_ids.len() as u8);
            for id in type_ids {
                e.u8(*id);
            }
        }
        FormatSpec::Raw(bytes) => {
            e.u8(44).bytes(bytes);
        }
        FormatSpec::Mutated(inner, m) => {
            e.u8(45);
            encode_format(e, inner);
            e.u8(m.op).u8(m.position).u8(m.byte);
        }
        FormatSpec::Null => {
            e.u8(46);
        }
        FormatSpec::Chain(levels) => {
            e.u8(47).u8(*levels);
        }
    }
}

fn encode_node(e: &mut Encoder, node: &NodeSpec) {
    let chain = matches!(node.format, FormatSpec::Chain(_));
    // Children: an explicit count (mode 1), except for chains.
    let mut control = 1u8;
    if node.dictionary.is_some() {
        control |= 4;
    }
    if node.released {
        control |= 8;
    }
    if node.name.is_none() {
        control |= 0x10;
    }
    if node.metadata.is_some() {
        control |= 0x20;
    }
    control |= match node.flags {
        FlagsSpec::Nullable => 0,
        FlagsSpec::None => 1,
        FlagsSpec::Raw(_) => 2,
        FlagsSpec::Bits(_) => 3,
    } << 6;
    e.u8(control);
    encode_format(e, &node.format);
    if let Some(name) = &node.name {
        e.bytes(name);
    }
    if let Some(metadata) = &node.metadata {
        e.i32(metadata.count_lie).u8(metadata.pairs.len() as u8);
        for (key_lie, key, value_lie, value) in &metadata.pairs {
            e.i32(*key_lie).bytes(key).i32(*value_lie).bytes(value);
        }
    }
    match node.flags {
        FlagsSpec::Raw(v) => {
            e.i64(v);
        }
        FlagsSpec::Bits(b) => {
            e.u8(b);
        }
        _ => {}
    }
    if chain {
        assert_eq!(node.children.len(), 1, "a chain has one inner node");
    } else {
        assert!(node.children.len() < 8, "at most 7 children");
        e.u8(node.children.len() as u8);
    }
    for child in &node.children {
        encode_node(e, child);
    }
    if let Some(dictionary) = &node.dictionary {
        encode_node(e, dictionary);
    }
}

/// The input of a tree case.
pub fn encode_tree(root: &NodeSpec, defect: Defect) -> Vec<u8> {
    let mut e = Encoder::new();
    e.u8(0);
    encode_node(&mut e, root);
    e.u8(defect.op).u8(defect.arg);
    e.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::seeds::{leaf, typical};

    #[test]
    fn seeds_decode_to_the_trees_they_were_encoded_from() {
        let root = typical("+m").dictionary(leaf("i", "d"));
        let defect = Defect { op: 5, arg: 9 };
        let data = encode_tree(&root, defect);
        let mut input = Input::new(&data[1..]);
        assert_eq!(decode_tree(&mut input), (root, defect));
        assert!(input.is_empty());
    }
}

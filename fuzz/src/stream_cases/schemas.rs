//! The schema a stream producer hands over: a fixed kind's, or one the
//! input describes node by node ([`NodeDesc`]), valid or not.
//!
//! ```text
//! SchemaPick := tag:u8 (% 4, other bits the target's own)
//!            0 fixed: kind:u8 (% 5) renamed:u8 (bit 0)
//!            1 built: Node
//!            2 the stream kind's schema, released
//!            3 no schema: the target's own fields (sync: Failure)
//! Node     := format:u8 [bytes when 0xFF] name:u8 [bytes when % 4 == 2]
//!             flags:u8 Meta shape:u8 Node{children} [Node when dictionary]
//!            format: 0xFE NULL, 0xFF raw bytes, else FORMATS[% len];
//!            name % 4: "", NULL, bytes, "x"; shape: bits 0-1 children
//!            (depth < 3), bit 2 dictionary (depth < 3), bit 3 released
//!            (not the root)
//! ```

use super::kinds::{fixed_node, KINDS};
use super::MetaDesc;
use crate::input::{Encoder, Input};
use crate::producer::{SchemaNode, NULLABLE};

/// Formats an input-built schema picks from: valid, unknown and malformed.
const FORMATS: [&str; 34] = [
    "n",
    "b",
    "c",
    "C",
    "s",
    "S",
    "i",
    "I",
    "l",
    "L",
    "e",
    "f",
    "g",
    "z",
    "Z",
    "u",
    "U",
    "vz",
    "vu",
    "w:4",
    "w:-1",
    "d:10,2",
    "d:40,2,256",
    "tsu:UTC",
    "tdD",
    "+l",
    "+L",
    "+w:2",
    "+s",
    "+m",
    "+ud:0,1",
    "+us:5",
    "+r",
    "+",
];

/// A schema tree as the input describes it (what the builder's
/// [`SchemaNode`] gets, in a form that encodes back to the same bytes).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct NodeDesc {
    /// 0xFE NULL, 0xFF `raw_format`, else an index into [`FORMATS`].
    pub format: u8,
    pub raw_format: Vec<u8>,
    /// % 4: "", NULL, `raw_name`, "x".
    pub name: u8,
    pub raw_name: Vec<u8>,
    pub flags: u8,
    pub meta: MetaDesc,
    pub children: Vec<NodeDesc>,
    pub dictionary: Option<Box<NodeDesc>>,
    pub released: bool,
}

impl NodeDesc {
    /// A leaf of format index `format`.
    pub(crate) fn leaf(format: u8) -> NodeDesc {
        NodeDesc {
            format,
            raw_format: Vec::new(),
            name: 3,
            raw_name: Vec::new(),
            flags: NULLABLE as u8,
            meta: MetaDesc::default(),
            children: Vec::new(),
            dictionary: None,
            released: false,
        }
    }

    pub(crate) fn decode(input: &mut Input, depth: usize) -> NodeDesc {
        let format = input.u8();
        let raw_format = if format == 0xFF {
            input.bytes().to_vec()
        } else {
            Vec::new()
        };
        let name = input.u8();
        let raw_name = if name % 4 == 2 {
            input.bytes().to_vec()
        } else {
            Vec::new()
        };
        let flags = input.u8();
        let meta = MetaDesc::decode(input);
        let shape = input.u8();
        let nested = depth < 3;
        let n_children = if nested { shape & 3 } else { 0 };
        let children = (0..n_children)
            .map(|_| NodeDesc::decode(input, depth + 1))
            .collect();
        let dictionary =
            (nested && shape & 4 != 0).then(|| Box::new(NodeDesc::decode(input, depth + 1)));
        NodeDesc {
            format,
            raw_format,
            name,
            raw_name,
            flags,
            meta,
            children,
            dictionary,
            released: depth > 0 && shape & 8 != 0,
        }
    }

    pub(crate) fn encode(&self, e: &mut Encoder) {
        e.u8(self.format);
        if self.format == 0xFF {
            e.bytes(&self.raw_format);
        }
        e.u8(self.name);
        if self.name % 4 == 2 {
            e.bytes(&self.raw_name);
        }
        e.u8(self.flags);
        self.meta.encode(e);
        let shape = self.children.len() as u8
            | if self.dictionary.is_some() { 4 } else { 0 }
            | if self.released { 8 } else { 0 };
        e.u8(shape);
        for child in &self.children {
            child.encode(e);
        }
        if let Some(dictionary) = &self.dictionary {
            dictionary.encode(e);
        }
    }

    pub(crate) fn to_node(&self) -> SchemaNode {
        let strip =
            |bytes: &[u8]| -> Vec<u8> { bytes.iter().copied().filter(|b| *b != 0).collect() };
        let format = match self.format {
            0xFE => None,
            0xFF => Some(strip(&self.raw_format)),
            i => Some(FORMATS[i as usize % FORMATS.len()].as_bytes().to_vec()),
        };
        let name = match self.name % 4 {
            0 => Some(Vec::new()),
            1 => None,
            2 => Some(strip(&self.raw_name)),
            _ => Some(b"x".to_vec()),
        };
        SchemaNode {
            format,
            name,
            metadata: self.meta.blob(),
            flags: i64::from(self.flags),
            children: self.children.iter().map(NodeDesc::to_node).collect(),
            dictionary: self.dictionary.as_ref().map(|d| Box::new(d.to_node())),
            released: self.released,
        }
    }
}

/// The schema a producer hands over (`get_schema`'s answer, `on_schema`'s
/// argument), as the input picks it. Tags 0 to 2 mean the same in both
/// stream targets; tag 3 is no schema, which each target gives in its own
/// way (`T`: `get_schema` fails, `on_schema` gets a NULL pointer).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum SchemaPick<T> {
    /// A fixed kind's schema ([`fixed_node`]).
    Fixed {
        kind: u8,
        renamed: bool,
    },
    Built(NodeDesc),
    /// The stream kind's schema, handed over released.
    Released,
    NoSchema(T),
}

impl<T> SchemaPick<T> {
    /// Reads the fields after `tag` (whose bits above 1 are the caller's);
    /// `no_schema` reads those of tag 3.
    pub(crate) fn decode(
        tag: u8,
        input: &mut Input,
        no_schema: impl FnOnce(&mut Input) -> T,
    ) -> SchemaPick<T> {
        match tag % 4 {
            0 => SchemaPick::Fixed {
                kind: input.u8() % KINDS,
                renamed: input.bool(),
            },
            1 => SchemaPick::Built(NodeDesc::decode(input, 0)),
            2 => SchemaPick::Released,
            _ => SchemaPick::NoSchema(no_schema(input)),
        }
    }

    /// Writes the tag, with the caller's `high_bits`, and the fields after
    /// it; `no_schema` writes those of tag 3.
    pub(crate) fn encode(
        &self,
        e: &mut Encoder,
        high_bits: u8,
        no_schema: impl FnOnce(&mut Encoder, &T),
    ) {
        match self {
            SchemaPick::Fixed { kind, renamed } => {
                e.u8(high_bits).u8(*kind).bool(*renamed);
            }
            SchemaPick::Built(node) => node.encode(e.u8(1 | high_bits)),
            SchemaPick::Released => {
                e.u8(2 | high_bits);
            }
            SchemaPick::NoSchema(t) => no_schema(e.u8(3 | high_bits), t),
        }
    }

    /// The schema handed over in a stream of `kind`, or for no schema the
    /// target's own fields.
    pub(crate) fn schema(&self, kind: u8) -> Result<SchemaNode, &T> {
        match self {
            SchemaPick::Fixed { kind, renamed } => Ok(fixed_node(*kind, *renamed)),
            SchemaPick::Built(node) => Ok(node.to_node()),
            SchemaPick::Released => Ok(fixed_node(kind, false).released()),
            SchemaPick::NoSchema(t) => Err(t),
        }
    }

    pub(crate) fn is_built(&self) -> bool {
        matches!(self, SchemaPick::Built(_))
    }
}

/// The kind of a stream's data and the schema its inert arrays follow:
/// those of the `first` schema handed over; kind 1 when that is not a
/// fixed kind's.
pub(crate) fn kind_and_shape<T>(first: Option<&SchemaPick<T>>) -> (u8, SchemaNode) {
    match first {
        Some(SchemaPick::Fixed { kind, renamed }) => (*kind, fixed_node(*kind, *renamed)),
        Some(SchemaPick::Built(node)) => (1, node.to_node()),
        _ => (1, fixed_node(1, false)),
    }
}

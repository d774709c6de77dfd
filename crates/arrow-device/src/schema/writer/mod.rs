//! This crate's `ArrowSchema` writer: a whole tree in a handful of heap
//! allocations, however wide it is.
//!
//! arrow-rs' `FFI_ArrowSchema::try_from` allocates a format string, a name, a
//! private-data box, a children array and a box per child for every node;
//! for a 100-column batch that is most of the cost of an export. Here one
//! walk over the type sizes the tree and checks that every node has a C form
//! (see [`Plan`]), then one shared block (`block::Storage`) is allocated with
//! room for
//!
//! * every struct below the root (each parent's children side by side),
//! * every parent's array of child pointers, and
//! * every name, parameterized format string and metadata blob;
//!
//! and a second walk fills it. Formats without parameters point at static
//! strings; a lone node with such a format and neither name nor metadata
//! (the schema of an exported primitive or string array) needs no block at
//! all. Each node's `private_data` is one counted reference to the
//! block, so a child that a consumer moves out (spec: "Moving child arrays")
//! keeps the block, and its own descendants, valid after the root is
//! released; the block is freed with its last node. Every node has the same
//! release callback: release the children and the dictionary that are still
//! in place, mark the node released, give up its reference.
//!
//! ```
//! use arrow_device::schema::{export_field, import_field};
//! use arrow_schema::{DataType, Field, Fields};
//!
//! let point = DataType::Struct(Fields::from(vec![
//!     Field::new("x", DataType::Float64, false),
//!     Field::new("y", DataType::Float64, false),
//! ]));
//! let field = Field::new("points", DataType::new_list(point, true), true);
//! let c_schema = export_field(&field)?;
//! assert_eq!(c_schema.format(), "+l");
//! assert_eq!(c_schema.child(0).child(1).name(), Some("y"));
//! assert_eq!(import_field(&c_schema)?, field);
//! # Ok::<(), arrow_device::Error>(())
//! ```

mod block;

use arrow_schema::ffi::Flags;
use arrow_schema::{DataType, Field, Fields, Metadata, UnionFields};

use super::format::Format;
use super::metadata;
use crate::abi::FFI_ArrowSchema;
use crate::error::{Error, Path, Result};

#[cfg(test)]
pub(super) use block::live_nodes;

/// What one node says, before it is written.
#[derive(Clone, Copy)]
pub(crate) struct Node<'a> {
    /// `None` writes a NULL name (spec: "ArrowSchema.name" is optional).
    pub name: Option<&'a str>,
    pub data_type: &'a DataType,
    /// `ArrowSchema.flags`.
    pub flags: i64,
    /// `None` or empty writes NULL metadata.
    pub metadata: Option<&'a Metadata>,
}

impl<'a> Node<'a> {
    /// A field: its name, type, flags (nullable, dictionary ordering, sorted
    /// map keys) and metadata, as arrow-rs' `TryFrom<&Field>` writes them.
    pub(crate) fn field(field: &'a Field) -> Self {
        let mut flags = type_flags(field.data_type());
        if field.is_nullable() {
            flags |= Flags::NULLABLE.bits();
        }
        if field.dict_is_ordered() == Some(true) {
            flags |= Flags::DICTIONARY_ORDERED.bits();
        }
        Node {
            name: Some(field.name()),
            data_type: field.data_type(),
            flags,
            metadata: Some(field.metadata()),
        }
    }

    /// A bare type without a name or metadata; `nullable` sets the flag.
    pub(crate) fn data_type(data_type: &'a DataType, nullable: bool) -> Self {
        let mut flags = type_flags(data_type);
        if nullable {
            flags |= Flags::NULLABLE.bits();
        }
        Node {
            name: None,
            data_type,
            flags,
            metadata: None,
        }
    }
}

/// The flags a type implies on its own node.
fn type_flags(data_type: &DataType) -> i64 {
    match data_type {
        DataType::Map(_, true) => Flags::MAP_KEYS_SORTED.bits(),
        _ => 0,
    }
}

/// Writes the tree `root` describes as an owned `ArrowSchema`, or refuses
/// with [`Error::NotSupported`] naming the first node (path and type) that
/// has no valid C form.
pub(crate) fn write(root: Node<'_>) -> Result<FFI_ArrowSchema> {
    if let Some(schema) = block::fixed(root) {
        return Ok(schema);
    }
    let mut plan = Plan::default();
    plan.node(root, &Path::root())?;
    block::build(root, &plan)
}

/// The sizes of a tree, counted while checking that it can be exported.
#[derive(Default)]
struct Plan {
    /// Structs below the root (children and dictionaries).
    nodes: usize,
    /// Child pointers, over all parents.
    pointers: usize,
    /// String bytes: names and formats with their NULs, metadata.
    bytes: usize,
}

impl Plan {
    fn node(&mut self, node: Node<'_>, path: &Path<'_>) -> Result<()> {
        let format = Format::of(node.data_type).map_err(|reason| refuse(path, node, reason))?;
        if !matches!(format, Format::Fixed(_)) {
            self.bytes += format.len() + 1;
        }
        if let Some(name) = node.name {
            if name.contains('\0') {
                return Err(Error::NotSupported(format!(
                    "{path}: name {name:?} contains a NUL byte, which the C Data Interface's \
                     NUL-terminated names cannot hold"
                )));
            }
            self.bytes += name.len() + 1;
        }
        if let Some(metadata) = node.metadata.filter(|m| !m.is_empty()) {
            self.bytes += metadata::encoded_len(metadata)
                .map_err(|message| Error::NotSupported(format!("{path}: {message}")))?;
        }
        check_children(node, path)?;
        let children = Children::of(node.data_type);
        self.nodes += children.len();
        self.pointers += children.len();
        children.try_for_each(|index, child| {
            self.node(Node::field(child), &children.path(path, index, child))
        })?;
        if let DataType::Dictionary(_, values) = node.data_type {
            self.nodes += 1;
            self.node(Node::data_type(values, false), &path.dictionary())?;
        }
        Ok(())
    }
}

fn refuse(path: &Path<'_>, node: Node<'_>, reason: String) -> Error {
    Error::NotSupported(format!(
        "{path}: {} cannot be exported to the C Data Interface: {reason}",
        node.data_type
    ))
}

/// What the columnar format requires of the children that the format
/// string cannot say: a map's entries (Schema.fbs: "Neither the "entries"
/// field nor the "key" field may be nullable") and run ends (Columnar
/// format, "Run-End Encoded Layout"). Conforming importers, this crate's
/// included, reject a tree without them.
fn check_children(node: Node<'_>, path: &Path<'_>) -> Result<()> {
    let reason = match node.data_type {
        DataType::Map(entries, _) => match entries.data_type() {
            DataType::Struct(fields) if fields.len() != 2 => format!(
                "map entries have {} fields, expected 2 (key, value)",
                fields.len()
            ),
            DataType::Struct(_) if entries.is_nullable() => {
                "map entries are nullable, expected non-nullable".to_string()
            }
            DataType::Struct(fields) if fields[0].is_nullable() => {
                "map key is nullable, expected non-nullable".to_string()
            }
            DataType::Struct(_) => return Ok(()),
            other => format!("map entries have type {other}, expected a struct of (key, value)"),
        },
        DataType::RunEndEncoded(run_ends, _) => {
            if !run_ends.data_type().is_run_ends_type() {
                format!(
                    "run_ends have type {}, expected Int16, Int32 or Int64",
                    run_ends.data_type()
                )
            } else if run_ends.is_nullable() {
                "run_ends are nullable, expected non-nullable".to_string()
            } else {
                return Ok(());
            }
        }
        _ => return Ok(()),
    };
    Err(refuse(path, node, reason))
}

/// The children of a node, in `ArrowSchema.children` order.
#[derive(Clone, Copy)]
enum Children<'a> {
    Leaf,
    One(&'a Field),
    Two(&'a Field, &'a Field),
    Struct(&'a Fields),
    Union(&'a UnionFields),
}

impl<'a> Children<'a> {
    fn of(data_type: &'a DataType) -> Self {
        use DataType::*;
        match data_type {
            List(item)
            | LargeList(item)
            | ListView(item)
            | LargeListView(item)
            | FixedSizeList(item, _)
            | Map(item, _) => Children::One(item),
            RunEndEncoded(run_ends, values) => Children::Two(run_ends, values),
            Struct(fields) => Children::Struct(fields),
            Union(fields, _) => Children::Union(fields),
            _ => Children::Leaf,
        }
    }

    fn len(self) -> usize {
        match self {
            Children::Leaf => 0,
            Children::One(_) => 1,
            Children::Two(..) => 2,
            Children::Struct(fields) => fields.len(),
            Children::Union(fields) => fields.len(),
        }
    }

    fn try_for_each(self, mut f: impl FnMut(usize, &'a Field) -> Result<()>) -> Result<()> {
        match self {
            Children::Leaf => Ok(()),
            Children::One(item) => f(0, item),
            Children::Two(first, second) => f(0, first).and_then(|()| f(1, second)),
            Children::Struct(fields) => fields.iter().enumerate().try_for_each(|(i, c)| f(i, c)),
            Children::Union(fields) => fields
                .iter()
                .enumerate()
                .try_for_each(|(i, (_, c))| f(i, c)),
        }
    }

    /// The path of child `index`, as the importer names it.
    fn path<'p>(self, parent: &'p Path<'p>, index: usize, child: &'p Field) -> Path<'p> {
        match self {
            Children::Struct(_) => parent.field(index, Some(child.name())),
            _ => parent.child(index, Some(child.name())),
        }
    }
}

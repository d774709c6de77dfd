//! Import of a foreign `ArrowSchema` tree into an arrow-rs [`Field`] or
//! [`Schema`].
//!
//! The importer borrows: it never calls a release callback and never takes
//! ownership of a child (spec: "Release callback semantics -- for consumers").
//! It walks the tree through the public-field mirror [`raw::ArrowSchema`], so
//! no `FFI_ArrowSchema` (whose `Drop` would release) is ever materialized for
//! a child. Everything a producer can get wrong in the struct fields is
//! checked before it is followed, and reported with the node's path.

use std::collections::HashMap;
use std::ffi::CStr;
use std::sync::Arc;

use arrow_schema::ffi::Flags;
use arrow_schema::{DataType, Field, Fields, Schema, UnionFields};

use super::format::{parse, quote, ParsedFormat};
use super::memo;
use super::{metadata, utf8_defect};
use crate::abi::{raw, FFI_ArrowSchema};
use crate::error::{Error, Path, Result};

/// The deepest nesting the importer follows, counted in child and dictionary
/// links from the root (Arrow C++'s IPC reader uses the same bound). Deeper
/// trees are rejected rather than risk the stack on a hostile or cyclic one.
pub const MAX_NESTING_DEPTH: usize = 64;

/// The most nodes (structs) one tree may have. Children may legally share a
/// struct, so a small hostile DAG can describe an exponentially large tree;
/// this bounds the work.
pub const MAX_SCHEMA_NODES: usize = 1 << 20;

/// Imports the field a (foreign) `ArrowSchema` describes: its name, type,
/// nullability, dictionary ordering and metadata (extension types travel as
/// `ARROW:extension:name` / `ARROW:extension:metadata` and are kept).
///
/// The struct is borrowed: ownership, and the duty to release it, stay with
/// the caller.
///
/// Errors name the node (`field "a" > child 0 "item" > dictionary`) and the
/// defect. A few defects cannot be detected and are the producer's to avoid:
/// dangling pointers, strings without a NUL, metadata lengths that overrun
/// their buffer. As with arrow-rs' `Field::try_from(&FFI_ArrowSchema)`, the
/// pointers of a live (non-released) struct are trusted to be what the spec
/// says they are; foreign pointers only enter an `FFI_ArrowSchema` through
/// `unsafe` code (`FFI_ArrowSchema::from_raw`, a C producer).
pub fn import_field(schema: &FFI_ArrowSchema) -> Result<Field> {
    import_root(raw::schema(schema))
}

/// The field of the tree at `root`: recalled when the tree reads as one this
/// thread imported recently (`memo`), imported (and remembered) otherwise.
fn import_root(root: &raw::ArrowSchema) -> Result<Field> {
    // SAFETY: the pointers of a live `FFI_ArrowSchema` are trusted as for
    // the import (see `import_field`).
    if let Some(field) = unsafe { memo::recall(root) } {
        // Every test, fuzz replay included, checks the recollection against
        // a full import.
        #[cfg(debug_assertions)]
        assert_eq!(
            Walk::new(MAX_SCHEMA_NODES)
                .node(root, At::Root)
                .as_ref()
                .ok(),
            Some(&field),
            "schema memo: a recalled field differs from the import"
        );
        return Ok(field);
    }
    let field = Walk::new(MAX_SCHEMA_NODES).node(root, At::Root)?;
    // SAFETY: the tree `field` was just imported from, unchanged.
    unsafe { memo::record(root, &field) };
    Ok(field)
}

/// Imports the schema of a record batch: a struct (`+s`) whose children are
/// the columns and whose metadata is the schema's metadata. The root's name
/// and flags are ignored.
pub fn import_schema(schema: &FFI_ArrowSchema) -> Result<Schema> {
    let root = Path::root();
    let node = raw::schema(schema);
    // Refuse a non-struct before walking whatever it holds.
    let format = node_format(node, &root)?;
    let parsed = parse(format).map_err(|message| Error::invalid(&root, message))?;
    if parsed != ParsedFormat::Struct {
        return Err(Error::invalid(
            &root,
            format!(
                "format {} is {}, expected a struct (\"+s\") for a record batch schema",
                quote(format),
                parsed.describe()
            ),
        ));
    }
    let field = import_root(node)?;
    match field.data_type() {
        DataType::Struct(fields) => {
            Ok(Schema::new(fields.clone()).with_metadata(field.metadata().clone()))
        }
        // The root was checked to be a struct without a dictionary above; a
        // dictionary-encoded struct is rejected by the walk.
        other => Err(Error::invalid(
            &root,
            format!("imported {other}, expected a struct"),
        )),
    }
}

/// The state of one walk over a tree.
struct Walk {
    /// The nodes from the root to the current one's parent, to find cycles.
    /// Only nodes with children or a dictionary are pushed (a leaf is no
    /// one's ancestor), so importing a flat type allocates nothing here.
    ancestors: Vec<*const raw::ArrowSchema>,
    /// Nodes visited so far.
    nodes: usize,
    /// The most nodes this walk visits.
    max_nodes: usize,
}

impl Walk {
    fn new(max_nodes: usize) -> Self {
        Walk {
            ancestors: Vec::new(),
            nodes: 0,
            max_nodes,
        }
    }

    /// Imports the node at `path`: its own members, then its children and
    /// dictionary, each with `self.ancestors` holding the path to it.
    fn node(&mut self, node: &raw::ArrowSchema, at: At<'_>) -> Result<Field> {
        // The name is decoded once, for the node's path and the field. A
        // released struct's name may be freed already: it is not read (and
        // `Members::read` reports the release).
        let name = match node.release {
            Some(_) => node_name(node),
            None => Ok(None),
        };
        let path = &at.path(name.as_ref().ok().copied().flatten());
        let this: *const raw::ArrowSchema = node;
        if self.ancestors.contains(&this) {
            return Err(Error::invalid(
                path,
                "the struct is its own ancestor: the children or dictionary pointers form a cycle",
            ));
        }
        if self.ancestors.len() > MAX_NESTING_DEPTH {
            return Err(Error::invalid(
                path,
                format!("nesting is deeper than {MAX_NESTING_DEPTH} levels"),
            ));
        }
        self.nodes += 1;
        if self.nodes > self.max_nodes {
            return Err(Error::invalid(
                path,
                format!(
                    "the tree has more than {} nodes (children shared many times?)",
                    self.max_nodes
                ),
            ));
        }
        let members = Members::read(node, name, path, self.max_nodes)?;

        let is_parent = members.n_children > 0 || !node.dictionary.is_null();
        if is_parent {
            self.ancestors.push(this);
        }
        let data_type = self
            .data_type(node, members.parsed, members.n_children, path)
            .and_then(|data_type| self.dictionary(node, data_type, path));
        if is_parent {
            self.ancestors.pop();
        }

        let flags = node.flags;
        let field = Field::new(
            members.name,
            data_type?,
            flags & Flags::NULLABLE.bits() != 0,
        )
        .with_dict_is_ordered(flags & Flags::DICTIONARY_ORDERED.bits() != 0);
        // `with_metadata` converts even an empty map (most fields have none).
        if members.metadata.is_empty() {
            return Ok(field);
        }
        Ok(field.with_metadata(members.metadata))
    }

    /// `index` wrapped in a dictionary type when `node` has a dictionary (the
    /// index type was checked by [`Members::read`]), else `index` itself.
    fn dictionary(
        &mut self,
        node: &raw::ArrowSchema,
        index: DataType,
        path: &Path<'_>,
    ) -> Result<DataType> {
        if node.dictionary.is_null() {
            return Ok(index);
        }
        // SAFETY: a non-NULL `dictionary` points to a valid ArrowSchema owned
        // by this one (spec: "ArrowSchema.dictionary").
        let dictionary = unsafe { &*node.dictionary };
        let values = self.node(dictionary, At::Dictionary(path))?;
        Ok(DataType::Dictionary(
            Box::new(index),
            Box::new(values.data_type().clone()),
        ))
    }

    /// The type of `node` given its parsed format, importing its children.
    fn data_type(
        &mut self,
        node: &raw::ArrowSchema,
        parsed: ParsedFormat,
        n_children: usize,
        path: &Path<'_>,
    ) -> Result<DataType> {
        let children = (0..n_children).map(|index| child(node, index, path));
        let data_type = match parsed {
            ParsedFormat::Leaf(data_type) => data_type,
            ParsedFormat::List => DataType::List(self.only_child(node, path)?),
            ParsedFormat::LargeList => DataType::LargeList(self.only_child(node, path)?),
            ParsedFormat::ListView => DataType::ListView(self.only_child(node, path)?),
            ParsedFormat::LargeListView => DataType::LargeListView(self.only_child(node, path)?),
            ParsedFormat::FixedSizeList(size) => {
                DataType::FixedSizeList(self.only_child(node, path)?, size)
            }
            ParsedFormat::Struct => {
                let mut fields = Vec::with_capacity(n_children.min(1024));
                for (index, child) in children.enumerate() {
                    let child = child?;
                    fields.push(self.node(child, At::Field(path, index))?);
                }
                DataType::Struct(Fields::from(fields))
            }
            ParsedFormat::Map => {
                let entries = self.only_child(node, path)?;
                let keys_sorted = node.flags & Flags::MAP_KEYS_SORTED.bits() != 0;
                check_map_entries(&entries, &path.child(0, Some(entries.name())))?;
                DataType::Map(entries, keys_sorted)
            }
            ParsedFormat::Union { mode, type_ids } => {
                let mut fields = Vec::with_capacity(n_children.min(128));
                for (index, child) in children.enumerate() {
                    let child = child?;
                    fields.push(self.node(child, At::Child(path, index))?);
                }
                // The parser already checked the ids and the child count.
                let fields = UnionFields::try_new(type_ids, fields)
                    .map_err(|e| Error::invalid(path, e.to_string()))?;
                DataType::Union(fields, mode)
            }
            ParsedFormat::RunEndEncoded => {
                let mut fields = Vec::with_capacity(2);
                for (index, child) in children.enumerate() {
                    let child = child?;
                    fields.push(Arc::new(self.node(child, At::Child(path, index))?));
                }
                let [run_ends, values] = <[Arc<Field>; 2]>::try_from(fields).map_err(|f| {
                    Error::invalid(path, format!("n_children is {}, expected 2", f.len()))
                })?;
                check_run_ends(&run_ends, &path.child(0, Some(run_ends.name())))?;
                DataType::RunEndEncoded(run_ends, values)
            }
        };
        Ok(data_type)
    }

    /// Child 0 of a list-like node, whose child count was checked to be 1.
    fn only_child(&mut self, node: &raw::ArrowSchema, path: &Path<'_>) -> Result<Arc<Field>> {
        let child = child(node, 0, path)?;
        Ok(Arc::new(self.node(child, At::Child(path, 0))?))
    }
}

/// A node's own members, checked, before its children are followed.
struct Members<'n> {
    name: &'n str,
    n_children: usize,
    parsed: ParsedFormat,
    metadata: HashMap<String, String>,
}

impl<'n> Members<'n> {
    fn read(
        node: &'n raw::ArrowSchema,
        name: std::result::Result<Option<&'n str>, String>,
        path: &Path<'_>,
        max_nodes: usize,
    ) -> Result<Self> {
        let format = node_format(node, path)?;
        let name = name
            .map_err(|defect| Error::invalid(path, format!("name is not valid UTF-8: {defect}")))?
            .unwrap_or("");
        let n_children = usize::try_from(node.n_children).map_err(|_| {
            Error::invalid(
                path,
                format!("n_children is {}, expected >= 0", node.n_children),
            )
        })?;
        if n_children > 0 && node.children.is_null() {
            return Err(Error::invalid(
                path,
                format!("children is NULL, expected {n_children} child pointers (n_children is {n_children})"),
            ));
        }
        if n_children > max_nodes {
            return Err(Error::invalid(
                path,
                format!(
                    "n_children is {n_children}, more than the {max_nodes} nodes a tree may have"
                ),
            ));
        }
        let parsed = parse(format).map_err(|message| Error::invalid(path, message))?;
        // SAFETY: the spec makes `metadata` NULL or a buffer in its encoding,
        // owned by the producer for as long as the struct is not released.
        let metadata = unsafe { metadata::decode(node.metadata) }
            .map_err(|message| Error::invalid(path, message))?;
        let what = || match &parsed {
            ParsedFormat::Leaf(_) => format!("format {} ({})", quote(format), parsed.describe()),
            _ => parsed.describe(),
        };
        if let Some(expected) = parsed.expected_children() {
            if n_children != expected {
                return Err(Error::invalid(
                    path,
                    format!(
                        "n_children is {n_children}, expected {expected} for {}",
                        what()
                    ),
                ));
            }
        }
        // Spec: "Dictionary-encoded arrays": the format is the index type.
        let is_index = matches!(&parsed, ParsedFormat::Leaf(t) if t.is_dictionary_key_type());
        if !node.dictionary.is_null() && !is_index {
            return Err(Error::invalid(
                path,
                format!(
                    "{} has a dictionary, but a dictionary index must be a signed or unsigned \
                     integer (\"c\", \"C\", \"s\", \"S\", \"i\", \"I\", \"l\" or \"L\")",
                    what()
                ),
            ));
        }
        Ok(Members {
            name,
            n_children,
            parsed,
            metadata,
        })
    }
}

/// Reads child pointer `index` of `node`, which has more than `index` children
/// and a non-NULL `children` array.
fn child<'n>(
    node: &'n raw::ArrowSchema,
    index: usize,
    path: &Path<'_>,
) -> Result<&'n raw::ArrowSchema> {
    // SAFETY: `children` is non-NULL and holds `n_children` > index pointers
    // (spec: "ArrowSchema.children"); both were checked by the caller.
    let pointer = unsafe { *node.children.add(index) };
    if pointer.is_null() {
        return Err(Error::invalid(
            path,
            format!("children[{index}] is NULL, expected a pointer to an ArrowSchema"),
        ));
    }
    // SAFETY: a non-NULL child pointer points to a valid ArrowSchema that lives
    // as long as its parent (spec: the producer releases the children).
    Ok(unsafe { &*pointer })
}

/// The node's format, after checking that the struct may be read at all.
fn node_format<'n>(node: &'n raw::ArrowSchema, path: &Path<'_>) -> Result<&'n str> {
    // Spec: "Released structure": a NULL release means the rest is garbage.
    if node.release.is_none() {
        return Err(Error::invalid(
            path,
            "struct was released (release is NULL), expected a live struct",
        ));
    }
    if node.format.is_null() {
        return Err(Error::invalid(
            path,
            "format is NULL, expected a format string",
        ));
    }
    // SAFETY: a non-NULL format is a NUL-terminated string owned by the struct.
    let bytes = unsafe { CStr::from_ptr(node.format) }.to_bytes();
    std::str::from_utf8(bytes).map_err(|err| {
        Error::invalid(
            path,
            format!("format is not valid UTF-8: {}", utf8_defect(bytes, &err)),
        )
    })
}

/// The node's name (`None` when NULL), or the UTF-8 defect.
fn node_name(node: &raw::ArrowSchema) -> std::result::Result<Option<&str>, String> {
    if node.name.is_null() {
        return Ok(None);
    }
    // SAFETY: a non-NULL name is a NUL-terminated string owned by the struct.
    let bytes = unsafe { CStr::from_ptr(node.name) }.to_bytes();
    std::str::from_utf8(bytes)
        .map(Some)
        .map_err(|err| utf8_defect(bytes, &err))
}

/// Where a node sits in the tree, before its name is known.
#[derive(Clone, Copy)]
enum At<'p> {
    Root,
    Field(&'p Path<'p>, usize),
    Child(&'p Path<'p>, usize),
    Dictionary(&'p Path<'p>),
}

impl<'p> At<'p> {
    fn path(self, name: Option<&'p str>) -> Path<'p> {
        match self {
            At::Root => Path::root(),
            At::Field(parent, index) => parent.field(index, name),
            At::Child(parent, index) => parent.child(index, name),
            At::Dictionary(parent) => parent.dictionary(),
        }
    }
}

/// Spec (Columnar format, Map): one child, a non-nullable struct of two
/// fields whose first, the key, is non-nullable (Schema.fbs: "Neither the
/// "entries" field nor the "key" field may be nullable"). arrow-rs enforces
/// the same when it builds a `MapArray`, so catching it here names the node.
fn check_map_entries(entries: &Field, path: &Path<'_>) -> Result<()> {
    let DataType::Struct(fields) = entries.data_type() else {
        return Err(Error::invalid(
            path,
            format!(
                "map entries have type {}, expected a struct of (key, value)",
                entries.data_type()
            ),
        ));
    };
    if fields.len() != 2 {
        return Err(Error::invalid(
            path,
            format!(
                "map entries have {} fields, expected 2 (key, value)",
                fields.len()
            ),
        ));
    }
    if entries.is_nullable() {
        return Err(Error::invalid(
            path,
            "map entries are nullable, expected non-nullable",
        ));
    }
    let key = &fields[0];
    if key.is_nullable() {
        return Err(Error::invalid(
            &path.field(0, Some(key.name())),
            "map key is nullable, expected non-nullable",
        ));
    }
    Ok(())
}

/// Spec (Columnar format, Run-End Encoded): run ends are int16, int32 or
/// int64 and cannot be null.
fn check_run_ends(run_ends: &Field, path: &Path<'_>) -> Result<()> {
    if !run_ends.data_type().is_run_ends_type() {
        return Err(Error::invalid(
            path,
            format!(
                "run_ends have type {}, expected Int16, Int32 or Int64",
                run_ends.data_type()
            ),
        ));
    }
    if run_ends.is_nullable() {
        return Err(Error::invalid(
            path,
            "run_ends are nullable, expected non-nullable",
        ));
    }
    Ok(())
}

//! Target `schema`: foreign `ArrowSchema` trees through
//! [`import_field`] / [`import_schema`], and format strings through
//! [`parse_format`] / [`write_format`].
//!
//! A case is either a whole tree, built as a C producer would with the
//! suites' producer (`crate::producer`), or a lone format string.
//!
//! This file holds the harness ([`run`]) and the oracles of the import;
//! `decode.rs` the byte layout below, `build.rs` the tree it describes,
//! `oracles.rs` what an accepted tree and a format string must do,
//! `seeds.rs` the named inputs.
//!
//! ## Byte layout
//!
//! Integers are little-endian; `bytes` is a u16 length and that many bytes
//! ([`Input::bytes`]); strings handed to C (formats, names, time zones) are
//! cut at their first NUL. Reads past the end of the input are zeros, which
//! decode to the smallest well-formed choice (a `n` leaf, truthful lengths).
//!
//! ```text
//! case      := mode:u8 (mode % 4 == 3: format, else: tree)
//! tree      := node defect
//! node      := control:u8 format [name:bytes] [metadata] [flags] [count:u8]
//!              node* [node]
//!   control bits 0-1  how many children follow: 0 as the format says,
//!                     1 `count % 8`, 2 one more than the format says,
//!                     3 one fewer; `count` is read where the format
//!                     cannot say (struct, raw, mutated, NULL) and for 1
//!           bit 2     a dictionary node follows the children
//!           bit 3     the node is handed over released
//!           bit 4     the name is NULL (else `name` follows)
//!           bit 5     metadata follows
//!           bits 6-7  flags: 0 nullable, 1 none, 2 an i64 follows,
//!                     3 a u8 follows (its low 3 bits: the spec's three flags)
//!   A chain format has no count: its single child is the chain's inner node.
//!   Past depth 72 or 512 nodes, nodes get no children nor dictionary.
//! format    := sel:u8, by sel % 48:
//!   0..=38   the spec's formats without parameters (`FIXED_FORMATS`)
//!   39       `w:N`      N: i64
//!   40       `+w:N`     N: i64
//!   41       `d:P,S[,W]` P: i16, S: i16, W: u8 % 6 = none, 32, 64, 128,
//!            256, or 5: a u8 follows, written as the width
//!   42       `tsU:TZ`   U: u8 % 5 = s, m, u, n, or the invalid `x`; TZ: bytes
//!   43       `+ud:`/`+us:` dense: u8 (low bit), n: u8 % 9, then n ids: u8
//!   44       raw: bytes
//!   45       a mutated format: format, op: u8 % 4 (insert, delete,
//!            replace, truncate), position: u8, byte: u8
//!   46       NULL
//!   47       chain: levels: u8 % 80; `+l` nested levels + 1 times around
//!            the node that follows
//! metadata  := count_lie:i32 pairs:u8 (% 8) pair*
//! pair      := key_lie:i32 key:bytes value_lie:i32 value:bytes
//!   Each int32 written is the true count or length plus its lie
//!   (wrapping), so zeros are truthful. The blob is then made memory-safe
//!   by the spec: the bytes a conforming reader reads by following the
//!   stated lengths are allocated (zero-filled), up to 16 KiB, and lengths
//!   or counts that claim more than that are lowered to fit. The spec's
//!   metadata has no total length: a blob shorter than its own claims is a
//!   producer's bug that no consumer can detect, so it is never built.
//! defect    := op:u8 arg:u8, applied to the built root (unless released),
//!   op % 8: 0, 1 none; 2 `dictionary` = the root itself; 3 `children`
//!   NULL; 4 `children[arg % n]` NULL; 5 `children[arg % n]` = the root;
//!   6 `children[arg % n]` = `children[0]` (shared); 7 `n_children` =
//!   min(arg as i8, n)
//! format case := format (decoded lossily as UTF-8)
//! ```
//!
//! ## Oracles
//!
//! * Nothing panics, and [`import_field`] / [`import_schema`] borrow: the
//!   root is not released by them, and exactly once when dropped.
//! * Trees with a released node, a NULL or non-UTF-8 format, a non-UTF-8
//!   name, a node deeper than [`MAX_NESTING_DEPTH`], a cycle, a NULL child
//!   or a negative child count are rejected.
//! * An accepted field re-exports ([`export_field`]) and imports back equal,
//!   dictionary ordering included; `import_schema` accepts exactly the
//!   accepted structs, and its schema re-exports and imports back equal.
//! * Every type of an accepted tree writes a format string that parses to
//!   what the type says ([`write_format`] then [`parse_format`]).
//! * Every format string that parses re-writes (for a type of that format)
//!   to a string that parses to the same thing.
//!
//! [`parse_format`]: arrow_device::schema::parse_format
//! [`write_format`]: arrow_device::schema::write_format
//! [`export_field`]: arrow_device::schema::export_field

use arrow_device::abi::raw;
use arrow_device::schema::{export_schema, import_field, import_schema, MAX_NESTING_DEPTH};
use arrow_schema::DataType;

use crate::input::Input;
use crate::producer::{root_schema, set_child_schema_ptr, SchemaNode};

mod build;
mod decode;
mod oracles;
mod seeds;

pub use build::{format_bytes, metadata_blob, schema_node};
pub use decode::{
    decode_tree, encode_tree, DecimalWidth, Defect, FlagsSpec, FormatSpec, MetadataSpec, Mutation,
    NodeSpec, FIXED_FORMATS,
};
use oracles::{check_accepted, check_format_string};
pub use seeds::seeds;

pub fn run(data: &[u8]) {
    let mut input = Input::new(data);
    if input.u8() % 4 == 3 {
        let format = format_bytes(&decode::read_format(&mut input, 0)).unwrap_or_default();
        check_format_string(&String::from_utf8_lossy(&format));
    } else {
        let (root, defect) = decode_tree(&mut input);
        check_tree(&schema_node(&root), defect);
    }
}

/// What must make the importer reject a tree, found without it.
#[derive(Default)]
struct Facts {
    max_depth: usize,
    defect: Option<&'static str>,
    formats: Vec<String>,
}

impl Facts {
    fn of(node: &SchemaNode) -> Facts {
        let mut facts = Facts::default();
        facts.visit(node, 0);
        facts
    }

    fn visit(&mut self, node: &SchemaNode, depth: usize) {
        self.max_depth = self.max_depth.max(depth);
        if node.released {
            self.note("a released node");
        }
        match &node.format {
            None => self.note("a NULL format"),
            Some(format) => match std::str::from_utf8(format) {
                Ok(format) => self.formats.push(format.to_string()),
                Err(_) => self.note("a non-UTF-8 format"),
            },
        }
        if let Some(name) = &node.name {
            if std::str::from_utf8(name).is_err() {
                self.note("a non-UTF-8 name");
            }
        }
        for child in &node.children {
            self.visit(child, depth + 1);
        }
        if let Some(dictionary) = &node.dictionary {
            self.visit(dictionary, depth + 1);
        }
    }

    fn note(&mut self, defect: &'static str) {
        self.defect.get_or_insert(defect);
    }
}

fn check_tree(root: &SchemaNode, defect: Defect) {
    let facts = Facts::of(root);
    for format in &facts.formats {
        check_format_string(format);
    }
    let mut built = root.build();
    let counters = built.counters.clone();
    let released_at_build = usize::from(root.released);
    assert_eq!(counters.schema_releases(), released_at_build);

    // A released root's members may point to freed memory: leave it alone.
    let written = if root.released {
        Written::Nothing
    } else {
        apply_defect(&mut built.schema, root.children.len(), defect)
    };

    let result = import_field(&built.schema);
    assert_eq!(
        counters.schema_releases(),
        released_at_build,
        "import_field borrows: it must not release the tree"
    );
    let schema = import_schema(&built.schema);
    assert_eq!(
        counters.schema_releases(),
        released_at_build,
        "import_schema borrows: it must not release the tree"
    );

    match written {
        Written::Invalid(defect) => assert!(result.is_err(), "a tree with {defect} was accepted"),
        Written::Changed => {}
        Written::Nothing => {
            if let Some(defect) = facts.defect {
                assert!(result.is_err(), "a tree with {defect} was accepted");
            }
            if facts.max_depth > MAX_NESTING_DEPTH {
                assert!(
                    result.is_err(),
                    "a tree {} levels deep was accepted (limit {MAX_NESTING_DEPTH})",
                    facts.max_depth
                );
            }
        }
    }

    match (&result, &schema) {
        (Ok(field), Ok(schema)) => {
            let DataType::Struct(fields) = field.data_type() else {
                panic!("import_schema accepted a {} root", field.data_type());
            };
            assert_eq!(schema.fields(), fields);
            assert_eq!(schema.metadata(), field.metadata());
            let exported = export_schema(schema)
                .unwrap_or_else(|e| panic!("an imported schema does not re-export: {e}"));
            let back = import_schema(&exported)
                .unwrap_or_else(|e| panic!("a re-exported schema does not import: {e}"));
            assert_eq!(&back, schema);
        }
        (Ok(field), Err(e)) => assert!(
            !matches!(field.data_type(), DataType::Struct(_)),
            "import_field accepts the struct {field:?}, import_schema refuses it: {e}"
        ),
        (Err(e), Ok(schema)) => {
            panic!("import_schema accepts {schema:?}, import_field refuses it: {e}")
        }
        (Err(_), Err(_)) => {}
    }
    if let Ok(field) = &result {
        check_accepted(field);
    }

    drop(built);
    assert_eq!(
        counters.schema_releases(),
        1,
        "the root is released exactly once"
    );
}

/// What [`apply_defect`] wrote.
enum Written {
    Nothing,
    /// A valid change (fewer children, a shared child): the tree is no
    /// longer the one described.
    Changed,
    /// A defect that the importer must reject.
    Invalid(&'static str),
}

/// Writes `defect` into the built root, which has `n` children.
fn apply_defect(
    schema: &mut arrow_device::abi::FFI_ArrowSchema,
    n: usize,
    defect: Defect,
) -> Written {
    // SAFETY: only pointers and counts are rewritten; the producer frees
    // what it allocated whatever they say, and every pointer written is
    // NULL, the root or one of its children, all alive until `schema` is
    // dropped. A smaller child count leaves the array in bounds.
    let root = unsafe { root_schema(schema) };
    let this: *mut raw::ArrowSchema = root;
    let index = usize::from(defect.arg) % n.max(1);
    match defect.op % 8 {
        2 => {
            root.dictionary = this;
            Written::Invalid("its root as its own dictionary")
        }
        3 if n > 0 => {
            root.children = std::ptr::null_mut();
            Written::Invalid("NULL children")
        }
        4 if n > 0 => {
            set_child_schema_ptr(root, index, std::ptr::null_mut());
            Written::Invalid("a NULL child")
        }
        5 if n > 0 => {
            set_child_schema_ptr(root, index, this);
            Written::Invalid("its root as its own child")
        }
        6 if n > 1 => {
            // SAFETY: children holds n > 1 live pointers.
            let first = unsafe { *root.children };
            set_child_schema_ptr(root, index, first);
            Written::Changed
        }
        7 => {
            let count = i64::from(defect.arg as i8);
            if count < 0 {
                root.n_children = count;
                Written::Invalid("a negative n_children")
            } else if count < n as i64 {
                root.n_children = count;
                Written::Changed
            } else {
                Written::Nothing
            }
        }
        _ => Written::Nothing,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::seeds::{leaf, node};

    #[test]
    fn the_well_formed_seeds_are_accepted_and_the_broken_ones_refused() {
        let refused = [
            "metadata-negative-count",
            "nesting-past-the-limit",
            "released-child",
            "name-not-utf8",
            "name-null-format-raw",
            "defect-dictionary-cycle",
            "defect-children-null",
            "defect-child-null",
            "defect-child-cycle",
            "defect-n-children-negative",
        ];
        for (name, data) in seeds() {
            if name.starts_with("format-") {
                continue;
            }
            let mut input = Input::new(&data[1..]);
            let (root, defect) = decode_tree(&mut input);
            let mut built = schema_node(&root).build();
            let _ = apply_defect(&mut built.schema, root.children.len(), defect);
            let result = import_field(&built.schema);
            assert_eq!(
                result.is_err(),
                refused.contains(&name.as_str()),
                "{name}: {result:?}"
            );
        }
    }

    #[test]
    fn the_nesting_seeds_straddle_the_limit() {
        let depth = |levels| {
            let spec = node(FormatSpec::Chain(levels), "deep").with(vec![leaf("i", "item")]);
            Facts::of(&schema_node(&spec)).max_depth
        };
        assert_eq!(depth(63), MAX_NESTING_DEPTH);
        assert_eq!(depth(64), MAX_NESTING_DEPTH + 1);
    }
}

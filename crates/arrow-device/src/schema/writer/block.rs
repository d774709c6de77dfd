//! The block an exported tree lives in, the walk that fills it, and the
//! release callback of every node (spec: "Release callback semantics -- for
//! producers").

use std::ffi::{c_char, c_void};
use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr::{null, null_mut};
use std::sync::Arc;

use arrow_schema::{DataType, Metadata};

use super::{Children, Node, Plan};
use crate::abi::{raw, FFI_ArrowSchema};
use crate::error::{Error, Result};
use crate::schema::format::Format;
use crate::schema::metadata;

/// Allocates the block `plan` sized and writes the tree of `root` into it.
pub(super) fn build(root: Node<'_>, plan: &Plan) -> Result<FFI_ArrowSchema> {
    let storage = Storage::allocate(plan);
    // One reference for now; every written node is counted once the tree is
    // complete, so an error below frees the block with this reference.
    let shared = Arc::into_raw(storage);
    // SAFETY: `shared` is alive until the `from_raw` below.
    let storage = unsafe { &*shared };
    let mut writer = Writer {
        storage,
        shared,
        next_node: 0,
        next_pointer: 0,
        next_byte: 0,
    };
    let mut out = FFI_ArrowSchema::empty();
    // SAFETY: the writer fills the struct with nodes of the block, whose
    // `release` it sets last, once everything it refers to is written.
    let written = writer.node(root, unsafe { raw::schema_mut(&mut out) });
    if written.is_ok() {
        // The root and every node below it.
        for _ in 0..plan.nodes + 1 {
            // SAFETY: `shared` came from `Arc::into_raw` and its reference is
            // still held; each increment is the reference of one node.
            unsafe { Arc::increment_strong_count(shared) };
        }
    }
    // SAFETY: the reference taken by `into_raw` above, given up once.
    drop(unsafe { Arc::from_raw(shared) });
    written?;
    Ok(out)
}

/// The schema of a lone node (no children, no dictionary) with a format
/// without parameters, no name (or an empty one) and no metadata, written
/// without a block: the format is static, `private_data` NULL, and the release
/// callback only marks the struct released. `None` for any other node.
pub(super) fn fixed(root: Node<'_>) -> Option<FFI_ArrowSchema> {
    // An empty name (the field of an exported array) is a static string.
    let name = match root.name {
        None => null(),
        Some("") => c"".as_ptr(),
        Some(_) => return None,
    };
    if root.metadata.is_some_and(|m| !m.is_empty())
        || Children::of(root.data_type).len() > 0
        || matches!(root.data_type, DataType::Dictionary(_, _))
    {
        return None;
    }
    let Ok(Format::Fixed(format)) = Format::of(root.data_type) else {
        return None;
    };
    let mut out = FFI_ArrowSchema::empty();
    // SAFETY: a struct of our own, complete before its `release` is set.
    *unsafe { raw::schema_mut(&mut out) } = raw::ArrowSchema {
        format: format.as_ptr(),
        name,
        metadata: null(),
        flags: root.flags,
        n_children: 0,
        children: null_mut(),
        dictionary: null_mut(),
        release: Some(release_fixed),
        private_data: null_mut(),
    };
    Some(out)
}

/// The release callback of [`fixed`] schemas: nothing to free.
unsafe extern "C" fn release_fixed(schema: *mut raw::ArrowSchema) {
    // SAFETY: the consumer passes a struct written by `fixed` (or a moved
    // copy), or NULL.
    if let Some(schema) = unsafe { schema.as_mut() } {
        schema.release = None;
    }
}

/// The block every node of one exported tree points into.
struct Storage {
    /// The structs below the root, from `Box::<[_]>::into_raw`.
    nodes: *mut [raw::ArrowSchema],
    /// The parents' child pointer arrays, from `Box::<[_]>::into_raw`.
    pointers: *mut [*mut raw::ArrowSchema],
    /// Names, formats and metadata, from `Box::<[_]>::into_raw`.
    bytes: *mut [u8],
}

// SAFETY: the block is plain memory. After the tree is written, each struct
// in it is touched only by whoever owns that struct (its parent's release
// callback, or the consumer who moved it out); the strings and pointer
// arrays are only read. Any thread may drop the last reference.
unsafe impl Send for Storage {}
// SAFETY: as above.
unsafe impl Sync for Storage {}

impl Storage {
    fn allocate(plan: &Plan) -> Arc<Storage> {
        let released = raw::ArrowSchema {
            format: null(),
            name: null(),
            metadata: null(),
            flags: 0,
            n_children: 0,
            children: null_mut(),
            dictionary: null_mut(),
            release: None,
            private_data: null_mut(),
        };
        let nodes = vec![released; plan.nodes].into_boxed_slice();
        let pointers = vec![null_mut(); plan.pointers].into_boxed_slice();
        let bytes = vec![0u8; plan.bytes].into_boxed_slice();
        Arc::new(Storage {
            nodes: Box::into_raw(nodes),
            pointers: Box::into_raw(pointers),
            bytes: Box::into_raw(bytes),
        })
    }
}

impl Drop for Storage {
    fn drop(&mut self) {
        // SAFETY: each pointer came from `Box::into_raw` in `allocate` and is
        // freed once, here, when the last node gave up its reference: no
        // struct, pointer or string in the block is reachable any more.
        unsafe {
            drop(Box::from_raw(self.nodes));
            drop(Box::from_raw(self.pointers));
            drop(Box::from_raw(self.bytes));
        }
    }
}

/// The second walk: fills the block in the order the plan counted.
struct Writer<'s> {
    storage: &'s Storage,
    /// The block's reference-counted pointer, each node's `private_data`.
    shared: *const Storage,
    next_node: usize,
    next_pointer: usize,
    next_byte: usize,
}

impl Writer<'_> {
    /// Writes `node` and its descendants, `node` itself into `out`.
    fn node(&mut self, node: Node<'_>, out: &mut raw::ArrowSchema) -> Result<()> {
        let children = Children::of(node.data_type);
        let n_children = children.len();
        let (structs, pointers) = self.reserve(n_children, n_children);
        children.try_for_each(|index, child| {
            // SAFETY: `index` < n_children, the length of both reserved
            // ranges, which lie in the block and belong to this node alone.
            let (slot, pointer) = unsafe { (structs.add(index), pointers.add(index)) };
            // SAFETY: as above; the slot is not referenced elsewhere while
            // it is written.
            unsafe {
                *pointer = slot;
                self.node(Node::field(child), &mut *slot)
            }
        })?;
        let dictionary = match node.data_type {
            DataType::Dictionary(_, values) => {
                let (slot, _) = self.reserve(1, 0);
                // SAFETY: the slot was just reserved for this dictionary.
                self.node(Node::data_type(values, false), unsafe { &mut *slot })?;
                slot
            }
            _ => null_mut(),
        };
        let format = match Format::of(node.data_type).map_err(Error::NotSupported)? {
            Format::Fixed(format) => format.as_ptr(),
            other => self.format(other),
        };
        let name = match node.name {
            Some(name) => self.string(name),
            None => null(),
        };
        let metadata = match node.metadata.filter(|m| !m.is_empty()) {
            Some(metadata) => self.metadata(metadata)?,
            None => null(),
        };
        *out = raw::ArrowSchema {
            format,
            name,
            metadata,
            flags: node.flags,
            // A usize that counts allocated structs fits an i64.
            n_children: n_children as i64,
            children: if n_children == 0 {
                null_mut()
            } else {
                pointers
            },
            dictionary,
            release: Some(release),
            private_data: self.shared.cast_mut().cast::<c_void>(),
        };
        Ok(())
    }

    /// The next `structs` struct slots and `pointers` child pointers of the
    /// block, for this caller alone.
    fn reserve(
        &mut self,
        structs: usize,
        pointers: usize,
    ) -> (*mut raw::ArrowSchema, *mut *mut raw::ArrowSchema) {
        let (nodes, children) = (self.storage.nodes, self.storage.pointers);
        // The plan counted exactly what this walk takes; running past the
        // block would write out of bounds, so stop instead.
        assert!(
            self.next_node + structs <= nodes.len()
                && self.next_pointer + pointers <= children.len(),
            "schema export: the tree changed between the plan and the write"
        );
        // SAFETY: both offsets are at most the slices' lengths (checked).
        let reserved = unsafe {
            (
                nodes.cast::<raw::ArrowSchema>().add(self.next_node),
                children
                    .cast::<*mut raw::ArrowSchema>()
                    .add(self.next_pointer),
            )
        };
        self.next_node += structs;
        self.next_pointer += pointers;
        reserved
    }

    /// Copies `text` and a NUL into the block.
    fn string(&mut self, text: &str) -> *const c_char {
        let start = self.next_byte;
        self.bytes(text.as_bytes());
        self.bytes(&[0]);
        self.at(start)
    }

    /// Writes a parameterized format and a NUL into the block.
    fn format(&mut self, format: Format<'_>) -> *const c_char {
        let start = self.next_byte;
        // `bytes` cannot fail; it panics before running out of the block.
        let _ = fmt::Write::write_fmt(self, format_args!("{format}\0"));
        self.at(start)
    }

    fn metadata(&mut self, metadata: &Metadata) -> Result<*const c_char> {
        let start = self.next_byte;
        metadata::write_encoded(metadata, |bytes| self.bytes(bytes))
            .map_err(Error::NotSupported)?;
        Ok(self.at(start))
    }

    fn bytes(&mut self, bytes: &[u8]) {
        let block = self.storage.bytes;
        assert!(
            self.next_byte + bytes.len() <= block.len(),
            "schema export: the tree changed between the plan and the write"
        );
        // SAFETY: the destination range lies inside the block (checked) and
        // has not been handed out yet; the source is a distinct Rust slice.
        unsafe {
            let dst = block.cast::<u8>().add(self.next_byte);
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), dst, bytes.len());
        }
        self.next_byte += bytes.len();
    }

    /// The address of byte `offset` of the block.
    fn at(&self, offset: usize) -> *const c_char {
        // SAFETY: `offset` is at most the block's length: it was the cursor
        // before bytes that fitted were written.
        unsafe { self.storage.bytes.cast::<u8>().add(offset) }.cast::<c_char>()
    }
}

impl fmt::Write for Writer<'_> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        self.bytes(s.as_bytes());
        Ok(())
    }
}

/// The release callback of every node this module writes (spec: "Release
/// callback semantics -- for producers").
unsafe extern "C" fn release(schema: *mut raw::ArrowSchema) {
    // A panic must not unwind into C and there is no one to report it to.
    let _ = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: the consumer passes a struct written here (or a moved
        // copy of one), or NULL.
        let Some(schema) = (unsafe { schema.as_mut() }) else {
            return;
        };
        if schema.release.is_none() {
            return;
        }
        // SAFETY: a node written here, not yet released: its children and
        // dictionary are structs of the block, which its reference keeps
        // alive.
        unsafe { raw::release_children_in_place(&*schema) };
        let shared = schema.private_data.cast::<Storage>().cast_const();
        schema.release = None;
        schema.private_data = null_mut();
        // SAFETY: `private_data` is this node's counted reference to the
        // block (see `write`), given up once: `release` is now NULL. The node
        // itself may live in the block, so nothing touches it after this.
        drop(unsafe { Arc::from_raw(shared) });
    }));
}

/// The number of nodes still holding the block that `node` (a live node
/// written here) points into: one per node not yet released.
#[cfg(test)]
pub(in crate::schema) fn live_nodes(node: &raw::ArrowSchema) -> usize {
    assert!(node.release.is_some(), "a released node holds nothing");
    // SAFETY: a live node's private_data is a counted reference to the
    // block; it is borrowed here, not given up.
    let shared = std::mem::ManuallyDrop::new(unsafe {
        Arc::from_raw(node.private_data.cast::<Storage>().cast_const())
    });
    Arc::strong_count(&shared)
}

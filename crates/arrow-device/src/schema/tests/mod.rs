//! Tests of the schema module: format strings, round trips of every type, and
//! hand-built trees (as a careless or hostile C producer would write them),
//! each malformed one rejected with the right path and defect, without a panic
//! and without a release call.

mod format;
mod hand_built;
mod malformed_structs;
mod malformed_types;
mod release;
mod round_trip;

use std::collections::HashMap;
use std::ffi::{c_char, c_void, CString};
use std::ptr::{null, null_mut};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use arrow_schema::ffi::Flags;
use arrow_schema::{
    DataType, Field, Fields, IntervalUnit, Schema, TimeUnit, UnionFields, UnionMode,
};

use super::import::import_field_with_node_limit;
use super::*;
use crate::abi::{raw, FFI_ArrowSchema};
use crate::error::Error;

type Node = *mut raw::ArrowSchema;

const NULLABLE: i64 = Flags::NULLABLE.bits();

/// A tree of hand-written structs whose release callback counts its calls.
/// Everything is allocated through raw pointers so that the pointers handed
/// to the importer stay valid while the tree owns them.
struct Tree {
    releases: Arc<AtomicUsize>,
    nodes: Vec<Node>,
    arrays: Vec<*mut [Node]>,
    strings: Vec<*mut c_char>,
    blobs: Vec<Vec<u8>>,
}

unsafe extern "C" fn count_release(schema: *mut raw::ArrowSchema) {
    // SAFETY: only installed by `Tree::node`, whose `private_data` points to
    // the tree's counter, alive as long as the tree.
    unsafe {
        let counter = &*(*schema).private_data.cast::<AtomicUsize>();
        counter.fetch_add(1, Ordering::SeqCst);
        (*schema).release = None;
    }
}

impl Tree {
    fn new() -> Self {
        Tree {
            releases: Arc::new(AtomicUsize::new(0)),
            nodes: Vec::new(),
            arrays: Vec::new(),
            strings: Vec::new(),
            blobs: Vec::new(),
        }
    }

    /// A nullable node with `children` (which the tree already owns).
    fn node(&mut self, format: &str, name: &str, children: &[Node]) -> Node {
        let format = self.string(format.as_bytes());
        let name = self.string(name.as_bytes());
        let children_ptr = if children.is_empty() {
            null_mut()
        } else {
            let array = Box::into_raw(children.to_vec().into_boxed_slice());
            self.arrays.push(array);
            array.cast::<Node>()
        };
        let node = Box::into_raw(Box::new(raw::ArrowSchema {
            format,
            name,
            metadata: null(),
            flags: NULLABLE,
            n_children: children.len() as i64,
            children: children_ptr,
            dictionary: null_mut(),
            release: Some(count_release),
            private_data: Arc::as_ptr(&self.releases).cast_mut().cast::<c_void>(),
        }));
        self.nodes.push(node);
        node
    }

    fn leaf(&mut self, format: &str, name: &str) -> Node {
        self.node(format, name, &[])
    }

    /// A NUL-terminated copy of `bytes`, owned by the tree.
    fn string(&mut self, bytes: &[u8]) -> *mut c_char {
        let string = CString::new(bytes).unwrap().into_raw();
        self.strings.push(string);
        string
    }

    /// Metadata bytes, owned by the tree.
    fn metadata(&mut self, bytes: Vec<u8>) -> *const c_char {
        let pointer = bytes.as_ptr().cast::<c_char>();
        self.blobs.push(bytes);
        pointer
    }

    fn edit(&mut self, node: Node, edit: impl FnOnce(&mut raw::ArrowSchema)) {
        assert!(self.nodes.contains(&node));
        // SAFETY: the node is a live allocation of this tree and no other
        // reference to it exists while `edit` runs.
        edit(unsafe { &mut *node });
    }

    fn as_ffi(&self, node: Node) -> &FFI_ArrowSchema {
        assert!(self.nodes.contains(&node));
        // SAFETY: FFI_ArrowSchema and raw::ArrowSchema have the same layout
        // (asserted in abi.rs), and a shared reference never runs Drop, so the
        // importer only borrows the struct.
        unsafe { &*node.cast::<FFI_ArrowSchema>() }
    }

    fn import(&self, root: Node) -> crate::Result<Field> {
        import_field(self.as_ffi(root))
    }

    /// The error message of importing `root`, after checking that the
    /// importer called no release callback.
    fn error(&self, root: Node) -> String {
        let result = self.import(root);
        assert_eq!(self.releases(), 0, "import must not release");
        match result {
            Err(err @ Error::Invalid { .. }) => err.to_string(),
            other => panic!("expected an Invalid error, got {other:?}"),
        }
    }

    fn releases(&self) -> usize {
        self.releases.load(Ordering::SeqCst)
    }
}

impl Drop for Tree {
    fn drop(&mut self) {
        // SAFETY: each pointer came from `into_raw` of its type in this tree
        // and is freed once, here.
        unsafe {
            for node in self.nodes.drain(..) {
                drop(Box::from_raw(node));
            }
            for array in self.arrays.drain(..) {
                drop(Box::from_raw(array));
            }
            for string in self.strings.drain(..) {
                drop(CString::from_raw(string));
            }
        }
    }
}

/// A struct root holding one column `child`.
fn column(tree: &mut Tree, child: Node) -> Node {
    tree.node("+s", "", &[child])
}

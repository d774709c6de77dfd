//! A hand-written producer of `ArrowArray` / `ArrowSchema` trees, as a C
//! library would write them, so that any member can hold any value: the one
//! builder of malformed (and oddly well-formed) trees for the test suites.
//!
//! A tree is described declaratively ([`ArrayNode`], [`SchemaNode`]):
//! lengths, offsets and null counts; buffer bytes or NULL buffers; formats,
//! names and metadata as raw bytes (any bytes, or NULL); flags; children and
//! dictionaries; nodes handed over already released. [`Case::build`] writes
//! both trees as the C structs, [`SchemaNode::build`] a schema alone.
//!
//! Everything a tree points to (buffer bytes, buffer-pointer arrays,
//! child-pointer arrays, child structs, strings, metadata) is owned by one
//! boxed `private_data` of the root. Each buffer is an allocation of
//! exactly its bytes (aligned to 64), so that AddressSanitizer reports a read
//! one byte past a buffer; [`Case::build_with`] places them elsewhere (on a
//! device) instead. The root's release callback releases
//! the children still live (spec: "Release callback semantics -- for
//! producers"), frees exactly what was allocated and counts the call in a
//! shared [`Counters`], so a test can assert that each root was released
//! exactly once, and valgrind / ASan see no leak.
//!
//! Defects that lie about what was allocated (counts that disagree with the
//! pointer arrays, NULL pointer arrays, NULL or shared child pointers,
//! cycles) are written into the built structs through [`root_array`],
//! [`root_schema`], [`child_array`], [`child_schema`],
//! [`set_child_array_ptr`] and [`set_child_schema_ptr`]. The root frees what
//! it allocated whatever the pointers say by then: it keeps its own list.
//!
//! For example, `struct<a: int32, b: utf8>` whose field `b` a consumer moved
//! out: `case.schema.children[1].released = true`, then `case.build()`; hand
//! `array` and `schema` to the importer and assert on `counters`.
//!
//! Besides the integration tests (as `common::producer`), arrow-device-cli's
//! unit tests compile this file and `release.rs` through `#[path]`, so both
//! depend on nothing but `arrow_device`, std and each other.

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::any::Any;
use std::ffi::{c_char, c_void, CString};
use std::ptr::{null, null_mut};
use std::sync::Arc;

use arrow_device::abi::{raw, ArrowDeviceArray, DeviceType, FFI_ArrowArray, FFI_ArrowSchema};

use super::release::Counters;

/// One node of an array tree.
#[derive(Debug, Clone)]
pub struct ArrayNode {
    pub length: i64,
    pub null_count: i64,
    pub offset: i64,
    /// In C order; `None` is a NULL buffer pointer. `n_buffers` is the length.
    pub buffers: Vec<Option<Vec<u8>>>,
    pub children: Vec<ArrayNode>,
    pub dictionary: Option<Box<ArrayNode>>,
    /// Handed over released (`release` NULL), as a consumer leaves a child
    /// it moved out. A released root is built, then released by its own
    /// callback, which counts that release.
    pub released: bool,
}

impl ArrayNode {
    pub fn new(length: i64, null_count: i64, buffers: Vec<Option<Vec<u8>>>) -> Self {
        ArrayNode {
            length,
            null_count,
            offset: 0,
            buffers,
            children: Vec::new(),
            dictionary: None,
            released: false,
        }
    }

    pub fn with_children(mut self, children: Vec<ArrayNode>) -> Self {
        self.children = children;
        self
    }

    pub fn with_dictionary(mut self, dictionary: ArrayNode) -> Self {
        self.dictionary = Some(Box::new(dictionary));
        self
    }
}

/// One node of a schema tree.
#[derive(Debug, Clone)]
pub struct SchemaNode {
    /// Without the NUL; `None` is a NULL format pointer.
    pub format: Option<Vec<u8>>,
    /// Without the NUL; `None` is a NULL name pointer.
    pub name: Option<Vec<u8>>,
    /// The encoded key/value pairs (see [`metadata_blob`]), any bytes;
    /// `None` is NULL.
    pub metadata: Option<Vec<u8>>,
    pub flags: i64,
    pub children: Vec<SchemaNode>,
    pub dictionary: Option<Box<SchemaNode>>,
    /// As for [`ArrayNode::released`].
    pub released: bool,
}

/// `ARROW_FLAG_NULLABLE`.
pub const NULLABLE: i64 = 2;

impl SchemaNode {
    /// A nullable field.
    pub fn new(format: &str, name: &str) -> Self {
        SchemaNode {
            format: Some(format.as_bytes().to_vec()),
            name: Some(name.as_bytes().to_vec()),
            metadata: None,
            flags: NULLABLE,
            children: Vec::new(),
            dictionary: None,
            released: false,
        }
    }

    pub fn non_nullable(self) -> Self {
        self.with_flags(0)
    }

    pub fn with_flags(mut self, flags: i64) -> Self {
        self.flags = flags;
        self
    }

    pub fn with_metadata(mut self, metadata: Vec<u8>) -> Self {
        self.metadata = Some(metadata);
        self
    }

    pub fn with_children(mut self, children: Vec<SchemaNode>) -> Self {
        self.children = children;
        self
    }

    pub fn with_dictionary(mut self, dictionary: SchemaNode) -> Self {
        self.dictionary = Some(Box::new(dictionary));
        self
    }

    /// Handed over released (see [`ArrayNode::released`]).
    pub fn released(mut self) -> Self {
        self.released = true;
        self
    }

    /// Builds the C structs of this schema alone.
    pub fn build(&self) -> BuiltSchema {
        let counters = Arc::new(Counters::default());
        BuiltSchema {
            schema: build_schema(self, counters.clone()),
            counters,
        }
    }
}

/// A valid (or deliberately broken) pair of trees.
#[derive(Debug, Clone)]
pub struct Case {
    pub array: ArrayNode,
    pub schema: SchemaNode,
}

/// The built structs, ready to be handed to the importer, and their counters.
pub struct Built {
    pub array: ArrowDeviceArray,
    pub schema: FFI_ArrowSchema,
    pub counters: Arc<Counters>,
}

/// A built schema alone, and its counters (whose array count stays 0).
pub struct BuiltSchema {
    pub schema: FFI_ArrowSchema,
    pub counters: Arc<Counters>,
}

impl Case {
    pub fn new(array: ArrayNode, schema: SchemaNode) -> Self {
        Case { array, schema }
    }

    /// Builds the C structs of a CPU array.
    pub fn build(&self) -> Built {
        self.build_with(&mut place_on_host)
    }

    /// Builds the C structs with every non-NULL buffer placed by `place`
    /// (device memory, say), which returns the pointer to hand out and what
    /// keeps the memory alive until the root is released. The result says
    /// CPU: the caller sets `device_type`, `device_id` and `sync_event`.
    pub fn build_with(&self, place: &mut dyn FnMut(&[u8]) -> Placed) -> Built {
        let counters = Arc::new(Counters::default());
        Built {
            array: build_array(&self.array, counters.clone(), place),
            schema: build_schema(&self.schema, counters.clone()),
            counters,
        }
    }
}

/// A buffer placed by [`Case::build_with`]'s `place`.
pub struct Placed {
    pub ptr: *const c_void,
    /// Dropped when the root array is released.
    pub keep: Box<dyn Any>,
}

/// Host memory of exactly a buffer's bytes, aligned to 64.
struct HostBytes {
    ptr: *mut u8,
    layout: Layout,
}

impl Drop for HostBytes {
    fn drop(&mut self) {
        // SAFETY: allocated in place_on_host with this layout, freed once.
        unsafe { dealloc(self.ptr, self.layout) };
    }
}

/// The default placement: a host allocation of exactly `bytes.len()` bytes
/// (one byte for an empty buffer, so that it is a real allocation).
pub fn place_on_host(bytes: &[u8]) -> Placed {
    let layout = Layout::from_size_align(bytes.len().max(1), 64).expect("a test-sized buffer");
    // SAFETY: the layout's size is non-zero.
    let ptr = unsafe { alloc_zeroed(layout) };
    assert!(!ptr.is_null(), "out of memory for a test buffer");
    // SAFETY: `ptr` has at least `bytes.len()` bytes.
    unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), ptr, bytes.len()) };
    Placed {
        ptr: ptr.cast_const().cast(),
        keep: Box::new(HostBytes { ptr, layout }),
    }
}

// ---------------------------------------------------------------- bytes

/// Little-endian bytes of fixed-width values.
pub fn i8s(values: &[i8]) -> Option<Vec<u8>> {
    Some(values.iter().map(|v| *v as u8).collect())
}

pub fn i32s(values: &[i32]) -> Option<Vec<u8>> {
    Some(values.iter().flat_map(|v| v.to_le_bytes()).collect())
}

pub fn i64s(values: &[i64]) -> Option<Vec<u8>> {
    Some(values.iter().flat_map(|v| v.to_le_bytes()).collect())
}

pub fn bytes(values: &[u8]) -> Option<Vec<u8>> {
    Some(values.to_vec())
}

/// A validity bitmap, bit `i` set when `valid[i]`.
pub fn bitmap(valid: &[bool]) -> Option<Vec<u8>> {
    let mut bits = vec![0u8; valid.len().div_ceil(8).max(1)];
    for (i, v) in valid.iter().enumerate() {
        if *v {
            bits[i / 8] |= 1 << (i % 8);
        }
    }
    Some(bits)
}

/// A 16-byte string view: inline when at most 12 bytes, else a reference
/// to `buffer_index` at `offset`.
pub fn view(data: &[u8], buffer_index: i32, offset: i32) -> [u8; 16] {
    let mut v = [0u8; 16];
    v[..4].copy_from_slice(&(data.len() as i32).to_le_bytes());
    if data.len() <= 12 {
        v[4..4 + data.len()].copy_from_slice(data);
    } else {
        v[4..8].copy_from_slice(&data[..4]);
        v[8..12].copy_from_slice(&buffer_index.to_le_bytes());
        v[12..16].copy_from_slice(&offset.to_le_bytes());
    }
    v
}

/// `ArrowSchema.metadata` for `pairs`, encoded as the spec says: an int32
/// count, then each key and value as an int32 length and its bytes, all in
/// native byte order.
pub fn metadata_blob(pairs: &[(&str, &str)]) -> Vec<u8> {
    let mut out = (pairs.len() as i32).to_ne_bytes().to_vec();
    for (key, value) in pairs {
        out.extend((key.len() as i32).to_ne_bytes());
        out.extend_from_slice(key.as_bytes());
        out.extend((value.len() as i32).to_ne_bytes());
        out.extend_from_slice(value.as_bytes());
    }
    out
}

// ---------------------------------------------------------------- arrays

/// Everything an array tree points to, owned by the root.
struct ArrayPrivate {
    counters: Arc<Counters>,
    /// What keeps each buffer's memory alive (see [`Placed`]).
    data: Vec<Box<dyn Any>>,
    buffer_ptrs: Vec<Vec<*const c_void>>,
    child_ptrs: Vec<Vec<*mut raw::ArrowArray>>,
    /// Every non-root struct (children and dictionaries), from Box::into_raw.
    nodes: Vec<*mut raw::ArrowArray>,
}

impl Drop for ArrayPrivate {
    fn drop(&mut self) {
        for node in self.nodes.drain(..) {
            // SAFETY: each pointer came from Box::into_raw and is freed once.
            drop(unsafe { Box::from_raw(node) });
        }
    }
}

fn build_array(
    node: &ArrayNode,
    counters: Arc<Counters>,
    place: &mut dyn FnMut(&[u8]) -> Placed,
) -> ArrowDeviceArray {
    let mut private = Box::new(ArrayPrivate {
        counters,
        data: Vec::new(),
        buffer_ptrs: Vec::new(),
        child_ptrs: Vec::new(),
        nodes: Vec::new(),
    });
    let mut root = array_struct(node, &mut private, place);
    root.release = Some(release_array);
    root.private_data = Box::into_raw(private).cast();
    if node.released {
        // SAFETY: the root just built, released once by its own callback.
        unsafe { release_array(&mut root) };
    }
    let mut array = FFI_ArrowArray::empty();
    // SAFETY: `release_array` frees exactly the private data written here
    // (or the struct is released already).
    *unsafe { raw::array_mut(&mut array) } = root;
    ArrowDeviceArray {
        array,
        device_id: -1,
        device_type: DeviceType::CPU,
        sync_event: null_mut(),
        reserved: [0; 3],
    }
}

/// The struct of `node`; children and dictionary are allocated into `owner`.
fn array_struct(
    node: &ArrayNode,
    owner: &mut ArrayPrivate,
    place: &mut dyn FnMut(&[u8]) -> Placed,
) -> raw::ArrowArray {
    let mut buffer_ptrs: Vec<*const c_void> = Vec::with_capacity(node.buffers.len());
    for buffer in &node.buffers {
        buffer_ptrs.push(match buffer {
            None => null(),
            Some(bytes) => {
                let placed = place(bytes);
                owner.data.push(placed.keep);
                placed.ptr
            }
        });
    }
    let mut child_ptrs: Vec<*mut raw::ArrowArray> = Vec::with_capacity(node.children.len());
    for child in &node.children {
        child_ptrs.push(owned_array_node(child, owner, place));
    }
    let dictionary = match &node.dictionary {
        Some(dictionary) => owned_array_node(dictionary, owner, place),
        None => null_mut(),
    };
    let buffers = if buffer_ptrs.is_empty() {
        null_mut()
    } else {
        buffer_ptrs.as_mut_ptr()
    };
    let children = if child_ptrs.is_empty() {
        null_mut()
    } else {
        child_ptrs.as_mut_ptr()
    };
    owner.buffer_ptrs.push(buffer_ptrs);
    owner.child_ptrs.push(child_ptrs);
    raw::ArrowArray {
        length: node.length,
        null_count: node.null_count,
        offset: node.offset,
        n_buffers: node.buffers.len() as i64,
        n_children: node.children.len() as i64,
        buffers,
        children,
        dictionary,
        release: None,
        private_data: null_mut(),
    }
}

fn owned_array_node(
    node: &ArrayNode,
    owner: &mut ArrayPrivate,
    place: &mut dyn FnMut(&[u8]) -> Placed,
) -> *mut raw::ArrowArray {
    let mut child = array_struct(node, owner, place);
    if !node.released {
        child.release = Some(release_array_child);
    }
    let ptr = Box::into_raw(Box::new(child));
    owner.nodes.push(ptr);
    ptr
}

/// A child's memory belongs to the root: releasing it only marks it released.
unsafe extern "C" fn release_array_child(array: *mut raw::ArrowArray) {
    // SAFETY: called by the root's release (or a consumer) on a live child.
    unsafe { (*array).release = None };
}

unsafe extern "C" fn release_array(array: *mut raw::ArrowArray) {
    // SAFETY: the importer calls release on the root it was handed, whose
    // private_data is the ArrayPrivate set by build_array.
    let array = unsafe { &mut *array };
    // SAFETY: private_data came from Box::into_raw in build_array; release
    // runs once, so it is reclaimed once.
    let private = unsafe { Box::from_raw(array.private_data.cast::<ArrayPrivate>()) };
    for &child in &private.nodes {
        // SAFETY: every owned node is still allocated (freed when `private`
        // drops below); the spec has the parent release unreleased children.
        unsafe {
            if let Some(release) = (*child).release {
                release(child);
            }
        }
    }
    private.counters.count_array_release();
    array.release = None;
    array.private_data = null_mut();
    drop(private);
}

// ---------------------------------------------------------------- schemas

struct SchemaPrivate {
    counters: Arc<Counters>,
    strings: Vec<CString>,
    metadata: Vec<Vec<u8>>,
    child_ptrs: Vec<Vec<*mut raw::ArrowSchema>>,
    nodes: Vec<*mut raw::ArrowSchema>,
}

impl Drop for SchemaPrivate {
    fn drop(&mut self) {
        for node in self.nodes.drain(..) {
            // SAFETY: each pointer came from Box::into_raw and is freed once.
            drop(unsafe { Box::from_raw(node) });
        }
    }
}

fn build_schema(node: &SchemaNode, counters: Arc<Counters>) -> FFI_ArrowSchema {
    let mut private = Box::new(SchemaPrivate {
        counters,
        strings: Vec::new(),
        metadata: Vec::new(),
        child_ptrs: Vec::new(),
        nodes: Vec::new(),
    });
    let mut root = schema_struct(node, &mut private);
    root.release = Some(release_schema);
    root.private_data = Box::into_raw(private).cast();
    if node.released {
        // SAFETY: as in build_array.
        unsafe { release_schema(&mut root) };
    }
    let mut schema = FFI_ArrowSchema::empty();
    // SAFETY: `release_schema` frees exactly the private data written here
    // (or the struct is released already).
    *unsafe { raw::schema_mut(&mut schema) } = root;
    schema
}

/// A NUL-terminated copy of `bytes` (NULL for `None`), owned by `owner`.
fn c_string(bytes: Option<&[u8]>, owner: &mut SchemaPrivate) -> *const c_char {
    let Some(bytes) = bytes else {
        return null();
    };
    let s = CString::new(bytes).expect("test strings have no interior NUL");
    owner.strings.push(s);
    // The pointer is taken once the string is in place: a CString is a Box,
    // and moving a Box invalidates pointers taken before the move (Miri's
    // Stacked Borrows reports the read through one).
    owner.strings.last().expect("pushed above").as_ptr()
}

fn schema_struct(node: &SchemaNode, owner: &mut SchemaPrivate) -> raw::ArrowSchema {
    let format = c_string(node.format.as_deref(), owner);
    let name = c_string(node.name.as_deref(), owner);
    let metadata = match &node.metadata {
        Some(blob) => {
            let blob = blob.clone();
            let ptr = blob.as_ptr().cast::<c_char>();
            owner.metadata.push(blob);
            ptr
        }
        None => null(),
    };
    let mut child_ptrs: Vec<*mut raw::ArrowSchema> = Vec::with_capacity(node.children.len());
    for child in &node.children {
        child_ptrs.push(owned_schema_node(child, owner));
    }
    let dictionary = match &node.dictionary {
        Some(dictionary) => owned_schema_node(dictionary, owner),
        None => null_mut(),
    };
    let children = if child_ptrs.is_empty() {
        null_mut()
    } else {
        child_ptrs.as_mut_ptr()
    };
    owner.child_ptrs.push(child_ptrs);
    raw::ArrowSchema {
        format,
        name,
        metadata,
        flags: node.flags,
        n_children: node.children.len() as i64,
        children,
        dictionary,
        release: None,
        private_data: null_mut(),
    }
}

fn owned_schema_node(node: &SchemaNode, owner: &mut SchemaPrivate) -> *mut raw::ArrowSchema {
    let mut child = schema_struct(node, owner);
    if !node.released {
        child.release = Some(release_schema_child);
    }
    let ptr = Box::into_raw(Box::new(child));
    owner.nodes.push(ptr);
    ptr
}

unsafe extern "C" fn release_schema_child(schema: *mut raw::ArrowSchema) {
    // SAFETY: called by the root's release (or a consumer) on a live child.
    unsafe { (*schema).release = None };
}

unsafe extern "C" fn release_schema(schema: *mut raw::ArrowSchema) {
    // SAFETY: as for release_array.
    let schema = unsafe { &mut *schema };
    // SAFETY: private_data came from Box::into_raw in build_schema.
    let private = unsafe { Box::from_raw(schema.private_data.cast::<SchemaPrivate>()) };
    for &child in &private.nodes {
        // SAFETY: as in release_array.
        unsafe {
            if let Some(release) = (*child).release {
                release(child);
            }
        }
    }
    private.counters.count_schema_release();
    schema.release = None;
    schema.private_data = null_mut();
    drop(private);
}

// ---------------------------------------------------------------- editing built structs

/// The root array struct, field by field.
///
/// # Safety
/// As for [`raw::array_mut`]: the struct must stay releasable. The defects
/// the suites write (lengths, counts, pointers) are for the importer to
/// reject; `release` and `private_data` stay the builder's.
pub unsafe fn root_array(array: &mut ArrowDeviceArray) -> &mut raw::ArrowArray {
    // SAFETY: forwarded to the caller.
    unsafe { raw::array_mut(&mut array.array) }
}

/// The root schema struct, field by field.
///
/// # Safety
/// As for [`root_array`].
pub unsafe fn root_schema(schema: &mut FFI_ArrowSchema) -> &mut raw::ArrowSchema {
    // SAFETY: forwarded to the caller.
    unsafe { raw::schema_mut(schema) }
}

/// Child `index` of a built array node (owned by the root's private data).
pub fn child_array(parent: &mut raw::ArrowArray, index: usize) -> &mut raw::ArrowArray {
    assert!((index as i64) < parent.n_children && !parent.children.is_null());
    // SAFETY: a built node's children array has n_children live pointers to
    // structs owned by the root, which outlives this borrow in the tests.
    unsafe { &mut **parent.children.add(index) }
}

/// Child `index` of a built schema node.
pub fn child_schema(parent: &mut raw::ArrowSchema, index: usize) -> &mut raw::ArrowSchema {
    assert!((index as i64) < parent.n_children && !parent.children.is_null());
    // SAFETY: as for child_array.
    unsafe { &mut **parent.children.add(index) }
}

/// Sets child pointer `index` of a built array node.
pub fn set_child_array_ptr(
    parent: &mut raw::ArrowArray,
    index: usize,
    child: *mut raw::ArrowArray,
) {
    assert!((index as i64) < parent.n_children && !parent.children.is_null());
    // SAFETY: in bounds of the children array, which the root owns.
    unsafe { *parent.children.add(index) = child };
}

/// Sets child pointer `index` of a built schema node.
pub fn set_child_schema_ptr(
    parent: &mut raw::ArrowSchema,
    index: usize,
    child: *mut raw::ArrowSchema,
) {
    assert!((index as i64) < parent.n_children && !parent.children.is_null());
    // SAFETY: as for set_child_array_ptr.
    unsafe { *parent.children.add(index) = child };
}

//! The block an exported array tree lives in: one allocation per tree (none
//! beyond the block itself for a tree of up to [`INLINE_WORDS`] words), the
//! walk that fills it, and the release callback of every struct (spec:
//! "Release callback semantics -- for producers").
//!
//! The block holds what keeps the data alive (the owner), every struct below
//! the root, the buffer and child pointer arrays, and the variadic sizes of
//! view arrays. Every struct of the tree, the root included, counts one
//! reference to it, given up by that struct's own release, so a child the
//! consumer moved out (spec: "Moving child arrays") keeps the block, and the
//! data, alive after its parent is released; the last release frees both.

use std::ffi::c_void;
use std::mem::MaybeUninit;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr::null_mut;
use std::sync::atomic::{AtomicUsize, Ordering};

use arrow_array::cast::AsArray;
use arrow_array::types::ByteArrayType;
use arrow_array::{
    downcast_primitive, Array, BinaryArray, BooleanArray, GenericByteArray, LargeBinaryArray,
    LargeStringArray, NullArray, StringArray,
};
use arrow_buffer::Buffer;
use arrow_data::ArrayData;
use arrow_schema::DataType;

use crate::abi::raw;
use crate::array::layout;
use crate::array::node::{self, Node};
use crate::device::{self, DeviceBuffer};

/// Words stored in the block itself: a leaf's buffer pointers, or a
/// dictionary array's two structs, need no second allocation.
const INLINE_WORDS: usize = 24;

/// The words one `ArrowArray` takes in the block.
const STRUCT_WORDS: usize = std::mem::size_of::<raw::ArrowArray>() / WORD;
const WORD: usize = std::mem::size_of::<usize>();
const _: () = assert!(
    std::mem::size_of::<raw::ArrowArray>() % WORD == 0
        && std::mem::align_of::<raw::ArrowArray>() <= std::mem::align_of::<usize>()
);

/// One level of a tree to export, read the same way from arrow-rs data and
/// from a [`Node`].
pub(crate) trait Source {
    fn len(&self) -> usize;
    fn offset(&self) -> usize;
    /// -1 when unknown.
    fn null_count(&self) -> i64;
    fn data_type(&self) -> &DataType;
    /// The buffers in C order, without the variadic-sizes buffer of view
    /// types.
    fn n_buffers(&self) -> usize;
    /// Buffer `i` of [`Source::n_buffers`]; a bitmap that must be copied
    /// to start at the array's offset is pushed to `extra`, which the block
    /// keeps.
    fn buffer(&self, i: usize, extra: &mut Vec<Buffer>) -> *const c_void;
    /// Size in bytes of buffer `i`, for the variadic sizes of view types
    /// (only asked of their data buffers).
    fn buffer_len(&self, i: usize) -> usize;
    fn n_children(&self) -> usize;
    fn child(&self, i: usize) -> &Self;
    fn dictionary(&self) -> Option<&Self>;
}

impl Source for ArrayData {
    fn len(&self) -> usize {
        ArrayData::len(self)
    }
    fn offset(&self) -> usize {
        ArrayData::offset(self)
    }
    fn null_count(&self) -> i64 {
        node::exported_null_count(self) as i64
    }
    fn data_type(&self) -> &DataType {
        ArrayData::data_type(self)
    }
    fn n_buffers(&self) -> usize {
        usize::from(layout::has_validity(self.data_type())) + self.buffers().len()
    }
    fn buffer(&self, i: usize, extra: &mut Vec<Buffer>) -> *const c_void {
        if layout::has_validity(self.data_type()) {
            if i == 0 {
                return node::validity_of(self, extra).ptr.cast();
            }
            self.buffers()[i - 1].as_ptr().cast()
        } else {
            self.buffers()[i].as_ptr().cast()
        }
    }
    fn buffer_len(&self, i: usize) -> usize {
        // Only view types ask, and they have a validity bitmap.
        self.buffers()[i - 1].len()
    }
    fn n_children(&self) -> usize {
        match self.data_type() {
            DataType::Dictionary(_, _) => 0,
            _ => self.child_data().len(),
        }
    }
    fn child(&self, i: usize) -> &Self {
        &self.child_data()[i]
    }
    fn dictionary(&self) -> Option<&Self> {
        match self.data_type() {
            DataType::Dictionary(_, _) => self.child_data().first(),
            _ => None,
        }
    }
}

impl Source for Node {
    fn len(&self) -> usize {
        self.len
    }
    fn offset(&self) -> usize {
        self.offset
    }
    fn null_count(&self) -> i64 {
        self.null_count.map_or(-1, |n| n as i64)
    }
    fn data_type(&self) -> &DataType {
        &self.data_type
    }
    fn n_buffers(&self) -> usize {
        self.buffers.len()
    }
    fn buffer(&self, i: usize, _: &mut Vec<Buffer>) -> *const c_void {
        // Node buffers already start at the node's offset.
        self.buffers[i].ptr.cast()
    }
    fn buffer_len(&self, i: usize) -> usize {
        self.buffers[i].len
    }
    fn n_children(&self) -> usize {
        self.children.len()
    }
    fn child(&self, i: usize) -> &Self {
        &self.children[i]
    }
    fn dictionary(&self) -> Option<&Self> {
        self.dictionary.as_deref()
    }
}

/// arrow-rs arrays read through their typed parts, without the `ArrayData`
/// (and its buffer list) `to_data` would build per node: for the trees
/// [`exports_directly`] accepts.
impl Source for dyn Array {
    fn len(&self) -> usize {
        Array::len(self)
    }
    fn offset(&self) -> usize {
        // Typed arrays slice their buffers, except the bits of booleans.
        match Array::data_type(self) {
            DataType::Boolean => self.as_boolean().values().offset(),
            _ => 0,
        }
    }
    fn null_count(&self) -> i64 {
        match Array::data_type(self) {
            DataType::Null => Array::len(self) as i64,
            data_type if layout::has_validity(data_type) => Array::null_count(self) as i64,
            _ => 0,
        }
    }
    fn data_type(&self) -> &DataType {
        Array::data_type(self)
    }
    fn n_buffers(&self) -> usize {
        layout::buffer_kinds(Array::data_type(self)).len()
    }
    fn buffer(&self, i: usize, extra: &mut Vec<Buffer>) -> *const c_void {
        if i == 0 {
            let offset = Source::offset(self);
            return node::validity_at(self.nulls(), offset, Array::len(self), extra)
                .ptr
                .cast();
        }
        let ptr = match Array::data_type(self) {
            DataType::Boolean => self.as_boolean().values().inner().as_ptr(),
            DataType::Utf8 => byte_buffer(self.as_string::<i32>(), i),
            DataType::LargeUtf8 => byte_buffer(self.as_string::<i64>(), i),
            DataType::Binary => byte_buffer(self.as_binary::<i32>(), i),
            DataType::LargeBinary => byte_buffer(self.as_binary::<i64>(), i),
            DataType::List(_) => self.as_list::<i32>().offsets().inner().inner().as_ptr(),
            DataType::LargeList(_) => self.as_list::<i64>().offsets().inner().inner().as_ptr(),
            // The keys' values (their bitmap is the array's, above).
            DataType::Dictionary(_, _) => primitive_values(self.as_any_dictionary().keys()),
            _ => primitive_values(self),
        };
        ptr.cast()
    }
    fn buffer_len(&self, _: usize) -> usize {
        unreachable!("view arrays are exported through ArrayData")
    }
    fn n_children(&self) -> usize {
        match Array::data_type(self) {
            DataType::Struct(fields) => fields.len(),
            DataType::List(_) | DataType::LargeList(_) => 1,
            _ => 0,
        }
    }
    fn child(&self, i: usize) -> &Self {
        match Array::data_type(self) {
            DataType::Struct(_) => self.as_struct().column(i).as_ref(),
            DataType::List(_) => self.as_list::<i32>().values().as_ref(),
            _ => self.as_list::<i64>().values().as_ref(),
        }
    }
    fn dictionary(&self) -> Option<&Self> {
        match Array::data_type(self) {
            DataType::Dictionary(_, _) => Some(self.as_any_dictionary().values().as_ref()),
            _ => None,
        }
    }
}

/// Offsets (C buffer 1) or data (2) of a string or binary array.
fn byte_buffer<T: ByteArrayType>(array: &GenericByteArray<T>, i: usize) -> *const u8 {
    match i {
        1 => array.offsets().inner().inner().as_ptr(),
        _ => array.values().as_ptr(),
    }
}

/// The values of a primitive array (of any primitive type).
fn primitive_values(array: &dyn Array) -> *const u8 {
    macro_rules! values {
        ($t:ty) => {
            array.as_primitive::<$t>().values().inner().as_ptr()
        };
    }
    downcast_primitive! {
        array.data_type() => (values),
        _ => unreachable!("exports_directly admits primitives only"),
    }
}

/// Whether [`Source`] for `dyn Array` covers every node of `array`: the
/// common types, each the arrow-rs array its data type names (a foreign
/// `Array` implementation is not); anything else is exported through
/// `to_data`.
pub(crate) fn exports_directly(array: &dyn Array) -> bool {
    let any = array.as_any();
    match array.data_type() {
        DataType::Null => any.is::<NullArray>(),
        DataType::Boolean => any.is::<BooleanArray>(),
        DataType::Utf8 => any.is::<StringArray>(),
        DataType::LargeUtf8 => any.is::<LargeStringArray>(),
        DataType::Binary => any.is::<BinaryArray>(),
        DataType::LargeBinary => any.is::<LargeBinaryArray>(),
        DataType::Struct(_) => array
            .as_struct_opt()
            .is_some_and(|s| s.columns().iter().all(|c| exports_directly(c.as_ref()))),
        DataType::List(_) => array
            .as_list_opt::<i32>()
            .is_some_and(|l| exports_directly(l.values().as_ref())),
        DataType::LargeList(_) => array
            .as_list_opt::<i64>()
            .is_some_and(|l| exports_directly(l.values().as_ref())),
        DataType::Dictionary(_, _) => array
            .as_any_dictionary_opt()
            .is_some_and(|d| exports_directly(d.keys()) && exports_directly(d.values().as_ref())),
        data_type => {
            macro_rules! is_primitive {
                ($t:ty) => {
                    array.as_primitive_opt::<$t>().is_some()
                };
            }
            downcast_primitive! {
                data_type => (is_primitive),
                _ => false,
            }
        }
    }
}

/// The variadic sizes of a view node: `(first data buffer, count)`.
fn variadic<S: Source + ?Sized>(source: &S) -> Option<(usize, usize)> {
    // Validity and views come first.
    layout::is_view(source.data_type()).then(|| (2, source.n_buffers().saturating_sub(2)))
}

/// What the tree below `source` takes in the block: `(words, structs)`,
/// `source`'s own struct excluded from both.
fn count_below<S: Source + ?Sized>(source: &S) -> (usize, usize) {
    let n_children = source.n_children();
    let mut words =
        source.n_buffers() + variadic(source).map_or(0, |(_, count)| 1 + count) + n_children;
    let mut structs = 0;
    for child in (0..n_children)
        .map(|i| source.child(i))
        .chain(source.dictionary())
    {
        let (child_words, child_structs) = count_below(child);
        words += STRUCT_WORDS + child_words;
        structs += 1 + child_structs;
    }
    (words, structs)
}

/// The shared part of every block, first in it: what each struct's
/// `private_data` points to.
#[repr(C)]
struct Header {
    /// Structs of the tree not yet released.
    structs: AtomicUsize,
    /// Frees the whole block, whose owner type only this knows.
    free: unsafe fn(*mut Header),
}

#[repr(C)]
struct Block<O> {
    header: Header,
    inline: [MaybeUninit<usize>; INLINE_WORDS],
    /// The words when the tree needs more than [`INLINE_WORDS`].
    heap: Vec<MaybeUninit<usize>>,
    /// Validity bitmaps copied to start at their array's offset.
    realigned: Vec<Buffer>,
    /// Variadic sizes written to host memory the device offers.
    host_visible: Vec<DeviceBuffer>,
    _owner: O,
}

/// # Safety
/// `header` is the header of a `Block<O>` from `Box::into_raw`, no longer
/// referenced by any struct.
unsafe fn free_block<O>(header: *mut Header) {
    // SAFETY: forwarded from the caller; the header is the first field of a
    // `#[repr(C)]` block.
    drop(unsafe { Box::from_raw(header.cast::<Block<O>>()) });
}

/// Writes the tree that `source` finds (in `owner`, or beside it), whose
/// memory `owner` keeps alive, into one block, and returns the root struct.
/// `device` is the implementation of the device the buffers live on
/// (`None` for the CPU or an opaque device):
/// where it offers host-accessible memory, the variadic sizes of view
/// arrays go there (see the crate documentation).
pub(crate) fn export_tree<'s, S, O>(
    owner: O,
    source: impl FnOnce(&'s O) -> &'s S,
    device: Option<&dyn device::Device>,
) -> raw::ArrowArray
where
    S: Source + ?Sized + 's,
    O: Send + Sync + 'static,
{
    // Written in place: the inline words stay uninitialized rather than be
    // copied from the stack.
    let mut uninit = Box::<Block<O>>::new_uninit();
    let fields = uninit.as_mut_ptr();
    // SAFETY: every field but `inline` (whose type is uninitialized words)
    // is written before `assume_init`.
    let block = unsafe {
        std::ptr::addr_of_mut!((*fields).header).write(Header {
            // Set below, once the tree is known.
            structs: AtomicUsize::new(0),
            free: free_block::<O>,
        });
        std::ptr::addr_of_mut!((*fields).heap).write(Vec::new());
        std::ptr::addr_of_mut!((*fields).realigned).write(Vec::new());
        std::ptr::addr_of_mut!((*fields).host_visible).write(Vec::new());
        std::ptr::addr_of_mut!((*fields)._owner).write(owner);
        Box::into_raw(uninit.assume_init())
    };
    // SAFETY: `block` is live and not shared yet; the owner is only read
    // from here on, and lives (in place) as long as the block, which no
    // struct can free before this function returns them.
    let owner: &'s O = unsafe { &(*block)._owner };
    let source = source(owner);
    let (words, structs) = count_below(source);
    // SAFETY: as above; no struct refers to the block yet.
    unsafe { (*block).header.structs = AtomicUsize::new(1 + structs) };
    // SAFETY: as above; the word area is taken once, here, and only written
    // through `next` afterwards.
    let area = unsafe {
        if words <= INLINE_WORDS {
            (*block).inline.as_mut_ptr()
        } else {
            (*block).heap = Vec::with_capacity(words);
            (*block).heap.as_mut_ptr()
        }
    };
    let mut writer = Writer {
        block: block.cast::<Header>(),
        next: area.cast::<usize>(),
        // SAFETY: `area` has at least `words` words.
        end: unsafe { area.cast::<usize>().add(words) },
        // SAFETY: the vectors are only touched by this walk until it ends.
        realigned: unsafe { &mut (*block).realigned },
        host_visible: unsafe { &mut (*block).host_visible },
        device,
    };
    writer.write(source)
}

/// The walk that fills a block in the order [`count_below`] counted.
struct Writer<'b> {
    block: *mut Header,
    next: *mut usize,
    end: *mut usize,
    realigned: &'b mut Vec<Buffer>,
    host_visible: &'b mut Vec<DeviceBuffer>,
    device: Option<&'b dyn device::Device>,
}

impl Writer<'_> {
    /// The next `words` words of the block, for this caller alone.
    fn reserve(&mut self, words: usize) -> *mut usize {
        // The count above walked the same tree; running past the block
        // would write out of bounds, so stop instead.
        assert!(
            (self.end as usize - self.next as usize) / WORD >= words,
            "array export: the tree changed between the count and the write"
        );
        let start = self.next;
        // SAFETY: within the block (checked).
        self.next = unsafe { self.next.add(words) };
        start
    }

    /// Writes `source`'s subtree and returns its struct.
    fn write<S: Source + ?Sized>(&mut self, source: &S) -> raw::ArrowArray {
        let n_buffers = source.n_buffers();
        let variadic = variadic(source);
        let n_c_buffers = n_buffers + usize::from(variadic.is_some());
        let buffers = self.reserve(n_c_buffers).cast::<*const c_void>();
        for i in 0..n_buffers {
            // SAFETY: `i` < n_c_buffers, reserved above for this node.
            unsafe { *buffers.add(i) = source.buffer(i, self.realigned) };
        }
        if let Some((first, count)) = variadic {
            let sizes = self.variadic_sizes(source, first, count);
            // SAFETY: the last reserved slot.
            unsafe { *buffers.add(n_buffers) = sizes };
        }
        let n_children = source.n_children();
        let pointers = self.reserve(n_children).cast::<*mut raw::ArrowArray>();
        for i in 0..n_children {
            let child = self.write_child(source.child(i));
            // SAFETY: pointer `i` was reserved for this node.
            unsafe { *pointers.add(i) = child };
        }
        let dictionary = match source.dictionary() {
            Some(dictionary) => self.write_child(dictionary),
            None => null_mut(),
        };
        raw::ArrowArray {
            length: source.len() as i64,
            null_count: source.null_count(),
            offset: source.offset() as i64,
            n_buffers: n_c_buffers as i64,
            n_children: n_children as i64,
            buffers: if n_c_buffers == 0 {
                null_mut()
            } else {
                buffers
            },
            children: if n_children == 0 {
                null_mut()
            } else {
                pointers
            },
            dictionary,
            release: Some(release),
            private_data: self.block.cast(),
        }
    }

    /// Writes a child's (or dictionary's) subtree, its struct into a slot of
    /// the block, and returns the slot.
    fn write_child<S: Source + ?Sized>(&mut self, child: &S) -> *mut raw::ArrowArray {
        let slot = self.reserve(STRUCT_WORDS).cast::<raw::ArrowArray>();
        let written = self.write(child);
        // SAFETY: the slot was reserved for this child alone.
        unsafe { slot.write(written) };
        slot
    }

    /// The variadic-sizes buffer of a view node: host memory the device can
    /// read too where it offers some, the block otherwise.
    fn variadic_sizes<S: Source + ?Sized>(
        &mut self,
        source: &S,
        first: usize,
        count: usize,
    ) -> *const c_void {
        let sizes = self.reserve(count).cast::<i64>();
        for j in 0..count {
            // SAFETY: `count` words reserved above.
            unsafe { *sizes.add(j) = source.buffer_len(first + j) as i64 };
        }
        let bytes = count * std::mem::size_of::<i64>();
        match self.device.and_then(|d| d.allocate_host_accessible(bytes)) {
            Some(buffer)
                if buffer.len() >= bytes
                    && !buffer.as_ptr().is_null()
                    && buffer.as_ptr() as usize % std::mem::align_of::<i64>() == 0 =>
            {
                // SAFETY: host-writable memory (the `Device` contract) of at
                // least `bytes` bytes, aligned for i64 (both checked), not
                // yet shared; the source is the `count` sizes written above.
                unsafe {
                    std::ptr::copy_nonoverlapping(sizes, buffer.as_ptr().cast::<i64>(), count)
                };
                let ptr = buffer.as_ptr().cast_const().cast();
                self.host_visible.push(buffer);
                ptr
            }
            // No sizes still get a (non-NULL) pointer: some consumers read
            // the buffer without checking the count first.
            _ => sizes.cast_const().cast(),
        }
    }
}

/// The release callback of every struct this crate exports: releases the
/// children and dictionary that were not moved out, marks the struct
/// released, and gives up its reference to the block.
unsafe extern "C" fn release(array: *mut raw::ArrowArray) {
    // A panic must not unwind into C; there is nothing to report it to, so it
    // is swallowed after the struct is marked released.
    let _ = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: the consumer passes the struct we exported (or a moved copy).
        let Some(array) = (unsafe { array.as_mut() }) else {
            return;
        };
        if array.release.is_none() || array.private_data.is_null() {
            return;
        }
        // SAFETY: a struct of ours, not yet released: its children and
        // dictionary lie in the block, alive while it holds its reference.
        unsafe { raw::release_children_in_place(&*array) };
        let header = array.private_data.cast::<Header>();
        array.release = None;
        array.private_data = null_mut();
        // SAFETY: the block is alive while this struct's reference is held;
        // the last reference frees it (the standard `Arc` protocol: release
        // on the decrement, acquire before the free).
        unsafe {
            if (*header).structs.fetch_sub(1, Ordering::Release) == 1 {
                std::sync::atomic::fence(Ordering::Acquire);
                ((*header).free)(header);
            }
        }
    }));
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::types::Int8Type;
    use arrow_array::{Array, DictionaryArray, Int32Array, StringArray, StructArray};
    use arrow_schema::{DataType, Field};

    use super::*;

    /// A struct of (ints, dictionary of strings): four structs, one block.
    fn tree() -> ArrayData {
        let dictionary: DictionaryArray<Int8Type> = vec!["a", "b", "a", "c"].into_iter().collect();
        StructArray::from(vec![
            (
                Arc::new(Field::new("i", DataType::Int32, true)),
                Arc::new(Int32Array::from(vec![Some(1), None, Some(3), Some(4)])) as _,
            ),
            (
                Arc::new(Field::new("d", dictionary.data_type().clone(), true)),
                Arc::new(dictionary) as _,
            ),
        ])
        .into_data()
    }

    /// Exports `tree()` with a sentinel owner, so the test sees when the
    /// block is freed.
    fn export(sentinel: &Arc<()>) -> raw::ArrowArray {
        export_tree((tree(), sentinel.clone()), |(data, _)| data, None)
    }

    fn release_struct(array: &mut raw::ArrowArray) {
        let release = array.release.expect("not released yet");
        // SAFETY: a struct of this module's export, released once.
        unsafe { release(array) };
        assert!(array.release.is_none() && array.private_data.is_null());
    }

    #[test]
    fn the_root_releases_the_whole_tree_and_the_owner_once() {
        let sentinel = Arc::new(());
        let mut root = export(&sentinel);
        assert_eq!(Arc::strong_count(&sentinel), 2);
        assert_eq!((root.n_children, root.n_buffers), (2, 1));
        release_struct(&mut root);
        assert_eq!(Arc::strong_count(&sentinel), 1);
    }

    #[test]
    fn moved_children_and_dictionaries_outlive_the_root_and_release_alone() {
        let sentinel = Arc::new(());
        let mut root = export(&sentinel);
        // Spec, "Moving child arrays": the consumer copies the struct out and
        // marks the original released.
        // SAFETY: the root's children pointer array holds two valid structs.
        let (mut ints, mut dictionary) = unsafe {
            let ints_slot = *root.children;
            let dict_parent = *root.children.add(1);
            let dictionary_slot = (*dict_parent).dictionary;
            let moved = (ints_slot.read(), dictionary_slot.read());
            (*ints_slot).release = None;
            (*dictionary_slot).release = None;
            moved
        };
        release_struct(&mut root);
        // The moved structs hold the block: the data is still there.
        assert_eq!(Arc::strong_count(&sentinel), 2);
        // SAFETY: the int child's values buffer, four i32, still alive.
        let values = unsafe { std::slice::from_raw_parts((*ints.buffers.add(1)).cast::<i32>(), 4) };
        assert_eq!(values, [1, 0, 3, 4]);
        assert_eq!(dictionary.length, 3);
        release_struct(&mut ints);
        assert_eq!(Arc::strong_count(&sentinel), 2);
        release_struct(&mut dictionary);
        assert_eq!(Arc::strong_count(&sentinel), 1);
    }

    #[test]
    fn a_view_array_gets_its_variadic_sizes_in_the_block() {
        let strings = StringArray::from(vec!["short", "a string longer than twelve bytes"]);
        let views = arrow_array::StringViewArray::from_iter(strings.iter());
        let data = views.into_data();
        let sizes: Vec<i64> = data.buffers()[1..].iter().map(|b| b.len() as i64).collect();
        let mut root = export_tree(data, |data| data, None);
        assert_eq!(root.n_buffers as usize, 2 + sizes.len() + 1);
        // SAFETY: the last buffer holds one i64 per variadic buffer.
        let exported = unsafe {
            std::slice::from_raw_parts(
                (*root.buffers.add(root.n_buffers as usize - 1)).cast::<i64>(),
                sizes.len(),
            )
        };
        assert_eq!(exported, sizes);
        release_struct(&mut root);
    }

    /// Sliced arrays at offsets that are not multiples of 8, with nulls:
    /// the direct export gives back what `to_data`'s does.
    #[test]
    fn direct_exports_of_sliced_arrays_come_back_equal() {
        use arrow_array::builder::{ListBuilder, StringDictionaryBuilder};
        use arrow_array::{ArrayRef, BooleanArray, Float64Array, NullArray};

        use crate::{export_array, DeviceArray, ValidationLevel};

        let bools: BooleanArray = (0..40)
            .map(|i| (i % 3 != 0).then_some(i % 2 == 0))
            .collect();
        let floats: Float64Array = (0..40).map(|i| (i % 5 != 0).then_some(i as f64)).collect();
        let strings: StringArray = (0..40)
            .map(|i| (i % 4 != 0).then(|| format!("s{i}")))
            .collect();
        let mut lists = ListBuilder::new(arrow_array::builder::Int32Builder::new());
        for i in 0..40 {
            lists.append_option((i % 6 != 0).then(|| (0..i % 4).map(Some).collect::<Vec<_>>()));
        }
        let lists = lists.finish();
        let mut dictionary = StringDictionaryBuilder::<Int8Type>::new();
        for i in 0..40 {
            dictionary.append_option((i % 7 != 0).then(|| ["x", "y", "z"][i % 3]));
        }
        let dictionary = dictionary.finish();
        let structs = StructArray::try_new(
            vec![
                Arc::new(Field::new("b", DataType::Boolean, true)),
                Arc::new(Field::new("s", DataType::Utf8, true)),
            ]
            .into(),
            vec![
                Arc::new(bools.clone()) as ArrayRef,
                Arc::new(strings.clone()),
            ],
            Some((0..40).map(|i| i % 9 != 0).collect::<Vec<_>>().into()),
        )
        .unwrap();
        let arrays: Vec<ArrayRef> = vec![
            Arc::new(bools),
            Arc::new(floats),
            Arc::new(strings),
            Arc::new(lists),
            Arc::new(dictionary),
            Arc::new(structs),
            Arc::new(NullArray::new(40)),
        ];
        for array in arrays {
            for (offset, len) in [(0, 40), (3, 30), (11, 5), (40, 0)] {
                let sliced = array.slice(offset, len);
                assert!(exports_directly(sliced.as_ref()), "{}", sliced.data_type());
                let (c_array, c_schema) = export_array(sliced.as_ref()).unwrap();
                // SAFETY: the structs come from this crate's exporter.
                let imported =
                    unsafe { DeviceArray::try_new(c_array, c_schema, ValidationLevel::Full) }
                        .unwrap();
                assert_eq!(
                    imported.to_host().unwrap().as_ref(),
                    sliced.as_ref(),
                    "{} sliced {offset}..+{len}",
                    sliced.data_type()
                );
            }
        }
    }
}

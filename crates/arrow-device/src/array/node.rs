//! The one in-memory picture of an array tree that every path goes through.
//!
//! A [`Node`] records, for one level of an array tree, its data type, length,
//! offset, null count and the pointer and byte size of each buffer, in C Data
//! Interface order. Nodes never own memory: whoever builds a tree keeps the
//! memory alive next to it (an imported struct, an arrow-rs `ArrayData`, a
//! device allocation).
//!
//! Export turns arrow-rs data into nodes ([`Node::from_array_data`]) and nodes
//! into C structs; import turns C structs into nodes; copies map nodes from one
//! device's memory to another's; [`Node::to_array_data`] turns host-accessible
//! nodes back into arrow-rs data.

use std::ptr::NonNull;
use std::sync::Arc;

use arrow_array::types::{BinaryType, ByteArrayType, LargeBinaryType, LargeUtf8Type, Utf8Type};
use arrow_array::{
    downcast_primitive, make_array, Array, ArrayRef, ArrowPrimitiveType, BooleanArray,
    GenericByteArray, GenericListArray, NullArray, OffsetSizeTrait, PrimitiveArray, StructArray,
};
use arrow_buffer::{
    BooleanBuffer, BooleanBufferBuilder, Buffer, MutableBuffer, NullBuffer, OffsetBuffer,
    ScalarBuffer,
};
use arrow_data::{ArrayData, ArrayDataBuilder};
use arrow_schema::{DataType, FieldRef};

use crate::array::layout::{self, BufferKind};
use crate::error::Result;

/// A node's buffers, inline up to three (every type but views).
pub(crate) type Buffers = smallvec::SmallVec<[RawBuf; 3]>;

/// One buffer: where it starts and how many bytes of it the node uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RawBuf {
    pub ptr: *const u8,
    pub len: usize,
}

impl RawBuf {
    pub(crate) const NULL: RawBuf = RawBuf {
        ptr: std::ptr::null(),
        len: 0,
    };

    fn of(buffer: &Buffer) -> RawBuf {
        RawBuf {
            ptr: buffer.as_ptr(),
            len: buffer.len(),
        }
    }
}

/// Reads of data that sizes depend on, resolved after one batched read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum Pending {
    #[default]
    None,
    /// First and last offsets: indices into the batch of reads.
    Offsets { first: usize, last: usize },
    /// `count` variadic buffer sizes starting at read `start`.
    Variadic { start: usize, count: usize },
    /// The last run end of a run-end-encoded node's `run_ends` child.
    LastRunEnd { read: usize },
}

/// A node's children, shared: cloning a node (a slice, a child handle, a
/// trimmed copy) copies one level, never the subtree below it. A leaf holds
/// no allocation; a parent one small one beside its children's `Vec`
/// (an `Arc<[Node]>` would copy the nodes out of the `Vec` the import
/// builds).
#[derive(Debug, Clone, Default)]
pub(crate) struct Children(Option<Arc<Vec<Node>>>);

impl Children {
    /// The children to change, copied first if another tree shares them.
    pub(crate) fn make_mut(&mut self) -> &mut [Node] {
        match &mut self.0 {
            None => &mut [],
            Some(shared) => Arc::make_mut(shared).as_mut_slice(),
        }
    }
}

impl std::ops::Deref for Children {
    type Target = [Node];

    fn deref(&self) -> &[Node] {
        self.0.as_deref().map_or(&[], Vec::as_slice)
    }
}

impl From<Vec<Node>> for Children {
    fn from(nodes: Vec<Node>) -> Self {
        Children((!nodes.is_empty()).then(|| Arc::new(nodes)))
    }
}

impl<'a> IntoIterator for &'a Children {
    type Item = &'a Node;
    type IntoIter = std::slice::Iter<'a, Node>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

impl FromIterator<Node> for Children {
    fn from_iter<I: IntoIterator<Item = Node>>(nodes: I) -> Self {
        Children::from(nodes.into_iter().collect::<Vec<_>>())
    }
}

/// One level of an array tree (see the module documentation).
#[derive(Debug, Clone)]
pub(crate) struct Node {
    pub data_type: DataType,
    pub len: usize,
    pub offset: usize,
    /// `None` when the producer reported -1 (unknown).
    pub null_count: Option<usize>,
    /// C order, without the variadic-sizes buffer of view types (derived from
    /// the variadic buffers' sizes when exporting).
    pub buffers: Buffers,
    pub children: Children,
    pub dictionary: Option<Arc<Node>>,
    /// Set only inside a copy to the host: this string/binary node's data
    /// was narrowed to start at this offset, so the copied offsets must be
    /// shifted down by it (see `copy::device_to_host`).
    pub data_shift: Option<i64>,
    pub(crate) pending: Pending,
}

// SAFETY: a Node is plain metadata; the memory its pointers refer to is kept
// alive and synchronized by the owner stored beside it.
unsafe impl Send for Node {}
// SAFETY: as above; nothing dereferences the pointers through `&Node`.
unsafe impl Sync for Node {}

impl Node {
    /// A fixed-width array of `len` values in `values`, with no validity
    /// buffer and no nulls: what DLPack and the CUDA Array Interface hand in.
    pub(crate) fn primitive(data_type: DataType, len: usize, values: RawBuf) -> Node {
        Node {
            data_type,
            len,
            offset: 0,
            null_count: Some(0),
            buffers: Buffers::from_iter([RawBuf::NULL, values]),
            children: Children::default(),
            dictionary: None,
            data_shift: None,
            pending: Pending::None,
        }
    }

    /// The slots the buffers must cover: `offset + len`.
    pub(crate) fn slots(&self) -> usize {
        self.offset + self.len
    }

    /// Visits every buffer of the tree in a fixed order (pre-order: the
    /// node's buffers, then children, then the dictionary).
    pub(crate) fn for_each_buffer(&self, f: &mut impl FnMut(RawBuf)) {
        self.buffers.iter().for_each(|b| f(*b));
        for child in &self.children {
            child.for_each_buffer(f);
        }
        if let Some(dictionary) = &self.dictionary {
            dictionary.for_each_buffer(f);
        }
    }

    /// A copy of the tree with every buffer replaced by `f(buffer)`, visited in
    /// the order of [`Node::for_each_buffer`].
    pub(crate) fn map_buffers(&self, f: &mut impl FnMut(RawBuf) -> RawBuf) -> Node {
        Node {
            data_type: self.data_type.clone(),
            len: self.len,
            offset: self.offset,
            null_count: self.null_count,
            buffers: self.buffers.iter().map(|b| f(*b)).collect(),
            children: self.children.iter().map(|c| c.map_buffers(f)).collect(),
            dictionary: self.dictionary.as_ref().map(|d| Arc::new(d.map_buffers(f))),
            data_shift: self.data_shift,
            pending: Pending::None,
        }
    }

    /// The same tree with every per-slot buffer narrowed to the slots the
    /// node references, so that copies move only those bytes.
    ///
    /// The new offset is `offset % 8`, keeping validity bitmaps byte-aligned.
    /// Buffers addressed by values (string data, list children, view data,
    /// dictionaries, run-end-encoded children) are kept whole: narrowing them
    /// would need the data. Struct, sparse-union and fixed-size-list children
    /// are indexed by the parent's slots and are narrowed with it.
    pub(crate) fn trimmed(&self) -> Node {
        if matches!(
            self.data_type,
            DataType::Null | DataType::RunEndEncoded(_, _)
        ) {
            return self.clone();
        }
        let new_offset = self.offset % 8;
        let start = self.offset - new_offset;
        let slots = new_offset + self.len;
        let kinds = layout::buffer_kinds(&self.data_type);
        let buffers = self
            .buffers
            .iter()
            .enumerate()
            .map(|(i, b)| match kinds.get(i) {
                _ if b.ptr.is_null() => *b,
                Some(kind @ (BufferKind::Validity | BufferKind::Bits)) => {
                    narrow(*b, start / 8, &self.data_type, *kind, slots)
                }
                Some(kind @ (BufferKind::Fixed(_) | BufferKind::TypeIds)) => {
                    let width = layout::buffer_size(&self.data_type, *kind, 1).unwrap_or(0);
                    narrow(*b, start * width, &self.data_type, *kind, slots)
                }
                Some(kind @ BufferKind::Offsets(width)) => {
                    narrow(*b, start * width, &self.data_type, *kind, slots)
                }
                // Data and variadic buffers are addressed by values.
                _ => *b,
            })
            .collect();
        let children = match &self.data_type {
            DataType::Struct(_) | DataType::Union(_, arrow_schema::UnionMode::Sparse) => self
                .children
                .iter()
                .map(|c| c.window(start, slots))
                .collect(),
            DataType::FixedSizeList(_, size) => {
                let size = usize::try_from(*size).unwrap_or(0);
                self.children
                    .iter()
                    .map(|c| c.window(start * size, slots * size))
                    .collect()
            }
            _ => self.children.clone(),
        };
        Node {
            data_type: self.data_type.clone(),
            len: self.len,
            offset: new_offset,
            null_count: self.null_count,
            buffers,
            children,
            dictionary: self.dictionary.clone(),
            data_shift: None,
            pending: Pending::None,
        }
    }

    /// This node restricted to `len` slots from `skip`, then trimmed.
    ///
    /// A child shorter than its parent's window (a structural defect that
    /// imports below level minimal accept) keeps a window inside its own
    /// slots, empty at its end: its buffers are sized for those slots
    /// only, and the structure check that turns the tree into arrow-rs data
    /// then reports the short child.
    fn window(&self, skip: usize, len: usize) -> Node {
        let skip = skip.min(self.len);
        let mut node = self.clone();
        node.offset += skip;
        node.len = len.min(self.len.saturating_sub(skip));
        if node.len != self.len {
            // The count of the window is unknown without reading the bitmap.
            node.null_count = if self.null_count == Some(0) {
                Some(0)
            } else {
                None
            };
        }
        node.trimmed()
    }

    /// Describes arrow-rs data without copying it. Validity bitmaps whose bit
    /// offset differs from the array's are realigned into `extra`, which the
    /// caller keeps alive with `data`.
    pub(crate) fn from_array_data(data: &ArrayData, extra: &mut Vec<Buffer>) -> Node {
        let data_type = data.data_type();
        let mut buffers = Buffers::with_capacity(data.buffers().len() + 1);
        if layout::has_validity(data_type) {
            buffers.push(validity_of(data, extra));
        }
        buffers.extend(data.buffers().iter().map(RawBuf::of));
        let (children, dictionary) = match data_type {
            DataType::Dictionary(_, _) => (
                Children::default(),
                data.child_data()
                    .first()
                    .map(|d| Arc::new(Node::from_array_data(d, extra))),
            ),
            _ => (
                data.child_data()
                    .iter()
                    .map(|c| Node::from_array_data(c, extra))
                    .collect(),
                None,
            ),
        };
        let null_count = exported_null_count(data);
        Node {
            data_type: data_type.clone(),
            len: data.len(),
            offset: data.offset(),
            null_count: Some(null_count),
            buffers,
            children,
            dictionary,
            data_shift: None,
            pending: Pending::None,
        }
    }

    /// Builds arrow-rs data over host-accessible buffers; `wrap` turns each
    /// non-empty buffer into an arrow-rs `Buffer` (zero-copy over an owner, or
    /// a slice of a host copy). Misaligned buffers are copied by arrow-rs'
    /// `align_buffers`, so a foreign producer's alignment never causes UB.
    ///
    /// # Safety
    /// Every buffer must be host-accessible for its `len` bytes for as long as
    /// the buffers `wrap` returns live, and the tree must have passed import
    /// validation (arrow-rs skips its own).
    pub(crate) unsafe fn to_array_data(
        &self,
        wrap: &mut impl FnMut(RawBuf) -> Buffer,
    ) -> Result<ArrayData> {
        let has_validity = layout::has_validity(&self.data_type);
        let nulls = if has_validity { self.nulls(wrap) } else { None };
        // The buffers after the bitmap.
        let mut data_buffers: Vec<Buffer> = self
            .buffers
            .get(usize::from(has_validity)..)
            .unwrap_or_default()
            .iter()
            .map(|b| wrap_or_empty(*b, wrap))
            .collect();
        if let Some(width) = self.missing_offsets() {
            // A zero-slot array may come without an offsets buffer; arrow-rs
            // wants one (zero) offset.
            data_buffers[0] = Buffer::from(MutableBuffer::from_len_zeroed(width));
        }
        // Exact capacity: a leaf allocates nothing here.
        let n_child_data = self.children.len() + usize::from(self.dictionary.is_some());
        let mut child_data = Vec::with_capacity(n_child_data);
        for child in &self.children {
            // SAFETY: the caller's guarantee extends to the whole tree.
            child_data.push(unsafe { child.to_array_data(wrap) }?);
        }
        if let Some(dictionary) = &self.dictionary {
            // SAFETY: as above.
            child_data.push(unsafe { dictionary.to_array_data(wrap) }?);
        }
        let builder = ArrayDataBuilder::new(self.data_type.clone())
            .len(self.len)
            .offset(self.offset)
            .nulls(nulls)
            .buffers(data_buffers)
            .child_data(child_data)
            // Misaligned buffers (a foreign producer's) are copied.
            .align_buffers(!self.buffers_aligned());
        // SAFETY: import validation checked the structure at the level the
        // caller asked for (see the function's contract), and the children
        // were built (and aligned) above; `nulls` trusts the producer's
        // count as the C Data Interface says (see `Node::nulls`).
        Ok(unsafe { builder.skip_validation(true) }.build()?)
    }

    /// The width of the offsets when this node's offsets buffer is NULL
    /// (allowed for zero slots), `None` otherwise.
    fn missing_offsets(&self) -> Option<usize> {
        match layout::buffer_kinds(&self.data_type).get(1) {
            Some(BufferKind::Offsets(width))
                if self.buffers.get(1).is_some_and(|b| b.ptr.is_null()) =>
            {
                Some(*width)
            }
            _ => None,
        }
    }
}

impl Node {
    /// The arrow-rs array over host-accessible buffers, built straight from
    /// its parts for the common types (primitives, booleans, strings and
    /// binaries, structs, lists, nulls) and through [`Node::to_array_data`]
    /// and `make_array` otherwise. The same arrays either way; the direct
    /// path skips an `ArrayData` per node, and its buffer list.
    ///
    /// # Safety
    /// As for [`Node::to_array_data`]; the tree's structure must also have
    /// been checked (`validate::structure`, or an import at a level that
    /// covers it): the parts are assembled without arrow-rs' checks.
    pub(crate) unsafe fn to_array(
        &self,
        wrap: &mut impl FnMut(RawBuf) -> Buffer,
    ) -> Result<ArrayRef> {
        if !self.buffers_aligned() || self.missing_offsets().is_some() {
            // SAFETY: forwarded from the caller.
            return Ok(make_array(unsafe { self.to_array_data(wrap) }?));
        }
        let (len, offset) = (self.len, self.offset);
        let array: ArrayRef = match &self.data_type {
            DataType::Null => Arc::new(NullArray::new(len)),
            DataType::Boolean => {
                let nulls = self.nulls(wrap);
                let values = BooleanBuffer::new(wrap_or_empty(self.buffers[1], wrap), offset, len);
                // SAFETY: the bitmap covers the slots (import validation).
                Arc::new(unsafe { BooleanArray::new_unchecked(values, nulls) })
            }
            DataType::Utf8 => self.bytes::<Utf8Type>(wrap),
            DataType::LargeUtf8 => self.bytes::<LargeUtf8Type>(wrap),
            DataType::Binary => self.bytes::<BinaryType>(wrap),
            DataType::LargeBinary => self.bytes::<LargeBinaryType>(wrap),
            DataType::List(field) => self.list::<i32>(field, wrap)?,
            DataType::LargeList(field) => self.list::<i64>(field, wrap)?,
            DataType::Struct(fields) => {
                // SAFETY: forwarded from the caller.
                let (columns, nulls) = unsafe { self.struct_columns(wrap) }?;
                // SAFETY: every column has `len` slots, of its field's type
                // (see `struct_columns`).
                Arc::new(unsafe {
                    StructArray::new_unchecked_with_length(fields.clone(), columns, nulls, len)
                })
            }
            data_type if data_type.is_primitive() => {
                macro_rules! primitive {
                    ($t:ty) => {
                        self.primitive_array::<$t>(wrap)
                    };
                }
                downcast_primitive! {
                    data_type => (primitive),
                    // SAFETY: forwarded from the caller.
                    _ => make_array(unsafe { self.to_array_data(wrap) }?),
                }
            }
            // SAFETY: forwarded from the caller.
            _ => make_array(unsafe { self.to_array_data(wrap) }?),
        };
        Ok(array)
    }

    /// The columns of a struct node (each child's window of `len` slots
    /// from the node's offset, as arrow-rs' `StructArray` takes it) and its
    /// nulls.
    ///
    /// # Safety
    /// As for [`Node::to_array`].
    pub(crate) unsafe fn struct_columns(
        &self,
        wrap: &mut impl FnMut(RawBuf) -> Buffer,
    ) -> Result<(Vec<ArrayRef>, Option<NullBuffer>)> {
        let (len, offset) = (self.len, self.offset);
        let nulls = self.nulls(wrap);
        let mut columns = Vec::with_capacity(self.children.len());
        for child in &self.children {
            // SAFETY: the caller's guarantee extends to the tree.
            let column = unsafe { child.to_array(wrap) }?;
            // Children are laid out by the producer (a checked structure:
            // at least `offset + len` slots long).
            columns.push(if offset != 0 || column.len() != len {
                column.slice(offset, len)
            } else {
                column
            });
        }
        Ok((columns, nulls))
    }

    /// The validity bitmap (buffer 0, of a type that has one) as arrow-rs
    /// nulls: `None` without a bitmap or without nulls. The producer's
    /// count is trusted below `Full`, as the C Data Interface says; at
    /// `Full` it was checked against the bitmap.
    fn nulls(&self, wrap: &mut impl FnMut(RawBuf) -> Buffer) -> Option<NullBuffer> {
        let validity = *self.buffers.first()?;
        if validity.ptr.is_null() || self.null_count == Some(0) {
            return None;
        }
        let bits = BooleanBuffer::new(wrap(validity), self.offset, self.len);
        let nulls = match self.null_count {
            // SAFETY: the count is trusted (see above).
            Some(count) => unsafe { NullBuffer::new_unchecked(bits, count) },
            None => NullBuffer::new(bits),
        };
        (nulls.null_count() > 0).then_some(nulls)
    }

    fn primitive_array<T: ArrowPrimitiveType>(
        &self,
        wrap: &mut impl FnMut(RawBuf) -> Buffer,
    ) -> ArrayRef {
        let nulls = self.nulls(wrap);
        let values = ScalarBuffer::new(wrap_or_empty(self.buffers[1], wrap), self.offset, self.len);
        // SAFETY: `nulls` (when present) has the array's length.
        let array = unsafe { PrimitiveArray::<T>::new_unchecked(values, nulls) };
        if self.data_type == T::DATA_TYPE {
            Arc::new(array)
        } else {
            // A time zone, a decimal's precision and scale.
            Arc::new(array.with_data_type(self.data_type.clone()))
        }
    }

    fn bytes<T: ByteArrayType>(&self, wrap: &mut impl FnMut(RawBuf) -> Buffer) -> ArrayRef {
        let nulls = self.nulls(wrap);
        let offsets = ScalarBuffer::new(
            wrap_or_empty(self.buffers[1], wrap),
            self.offset,
            self.len + 1,
        );
        let values = wrap_or_empty(self.buffers[2], wrap);
        // SAFETY: the offsets of a checked structure; their values are
        // trusted as in `to_array_data` (checked only at `Full`).
        Arc::new(unsafe {
            GenericByteArray::<T>::new_unchecked(
                OffsetBuffer::new_unchecked(offsets),
                values,
                nulls,
            )
        })
    }

    fn list<O: OffsetSizeTrait>(
        &self,
        field: &FieldRef,
        wrap: &mut impl FnMut(RawBuf) -> Buffer,
    ) -> Result<ArrayRef> {
        let nulls = self.nulls(wrap);
        let offsets = ScalarBuffer::<O>::new(
            wrap_or_empty(self.buffers[1], wrap),
            self.offset,
            self.len + 1,
        );
        let Some(child) = self.children.first() else {
            // SAFETY: the caller's guarantee; no child is a structure
            // defect that arrow-rs reports.
            return Ok(make_array(unsafe { self.to_array_data(wrap) }?));
        };
        // SAFETY: the caller's guarantee extends to the tree.
        let values = unsafe { child.to_array(wrap) }?;
        // SAFETY: a checked structure: the last offset is within the child,
        // of the field's type.
        Ok(Arc::new(unsafe {
            GenericListArray::<O>::new_unchecked(
                field.clone(),
                OffsetBuffer::new_unchecked(offsets),
                values,
                nulls,
            )
        }))
    }

    /// Whether every buffer of this node (not its children) is aligned for
    /// the widest value arrow-rs reads from it: at least as strict as the
    /// alignments arrow-rs' `align_buffers` checks.
    fn buffers_aligned(&self) -> bool {
        self.buffers.iter().enumerate().all(|(i, buffer)| {
            let align = layout::buffer_alignment(&self.data_type, i);
            buffer.ptr.is_null() || buffer.len == 0 || (buffer.ptr as usize) % align == 0
        })
    }
}

fn wrap_or_empty(buffer: RawBuf, wrap: &mut impl FnMut(RawBuf) -> Buffer) -> Buffer {
    if buffer.ptr.is_null() || buffer.len == 0 {
        Buffer::from(MutableBuffer::new(0))
    } else {
        wrap(buffer)
    }
}

/// Wraps host memory kept alive by `owner` as an arrow-rs buffer.
///
/// # Safety
/// `buffer` must be host-accessible for `len` bytes while `owner` lives.
pub(crate) unsafe fn wrap_owned(
    buffer: RawBuf,
    owner: &Arc<dyn arrow_buffer::alloc::Allocation>,
) -> Buffer {
    match NonNull::new(buffer.ptr.cast_mut()) {
        // SAFETY: guaranteed by the caller.
        Some(ptr) if buffer.len > 0 => unsafe {
            Buffer::from_custom_allocation(ptr, buffer.len, owner.clone())
        },
        _ => Buffer::from(MutableBuffer::new(0)),
    }
}

/// The validity bitmap of `data`, as a pointer whose bit `data.offset() + i`
/// is slot `i`; NULL when there are no nulls. A bitmap that starts at another
/// bit is copied into `extra`, which the caller keeps alive.
pub(crate) fn validity_of(data: &ArrayData, extra: &mut Vec<Buffer>) -> RawBuf {
    validity_at(data.nulls(), data.offset(), data.len(), extra)
}

/// `nulls` of an array of `len` slots as a bitmap whose bit `offset + i` is
/// slot `i` (the C Data Interface's layout for an array at `offset`): in
/// place where the bits line up, else copied into `extra`, which the caller
/// keeps alive; NULL without nulls.
pub(crate) fn validity_at(
    nulls: Option<&NullBuffer>,
    offset: usize,
    len: usize,
    extra: &mut Vec<Buffer>,
) -> RawBuf {
    let Some(nulls) = nulls.filter(|n| n.null_count() > 0) else {
        return RawBuf::NULL;
    };
    let bit_offset = nulls.offset();
    if bit_offset >= offset && (bit_offset - offset) % 8 == 0 {
        let skip = (bit_offset - offset) / 8;
        return RawBuf {
            // SAFETY: `skip` bytes lie inside the bitmap, which covers
            // `bit_offset`.
            ptr: unsafe { nulls.buffer().as_ptr().add(skip) },
            // The bytes of the bitmap from there on.
            len: nulls.buffer().len() - skip,
        };
    }
    // The bitmap starts at a different bit than the data: copy it so that
    // bit `offset` is slot 0, as the C interface requires.
    let mut builder = BooleanBufferBuilder::new(offset + len);
    builder.append_n(offset, true);
    builder.append_buffer(nulls.inner());
    let realigned = builder.finish().into_inner();
    let raw = RawBuf::of(&realigned);
    extra.push(realigned);
    raw
}

/// The null count a C struct for `data` reports: as the IPC format does, a
/// null array reports every slot null; types without a validity bitmap 0.
pub(crate) fn exported_null_count(data: &ArrayData) -> usize {
    match data.data_type() {
        DataType::Null => data.len(),
        data_type if layout::has_validity(data_type) => data.null_count(),
        _ => 0,
    }
}

/// `buffer` starting `skip` bytes in, sized for `slots` slots of `kind`.
fn narrow(
    buffer: RawBuf,
    skip: usize,
    data_type: &DataType,
    kind: BufferKind,
    slots: usize,
) -> RawBuf {
    let len = layout::buffer_size(data_type, kind, slots).unwrap_or(buffer.len);
    // Never claim more than the producer's buffer holds past `skip`.
    let len = len.min(buffer.len.saturating_sub(skip));
    RawBuf {
        ptr: buffer.ptr.wrapping_add(skip),
        len,
    }
}

#[cfg(test)]
mod tests {
    use arrow_array::{Array, ListArray};

    use super::*;

    fn nested_lists() -> ArrayData {
        let inner = ListArray::from_iter_primitive::<arrow_array::types::Int32Type, _, _>([
            Some(vec![Some(1), Some(2)]),
            None,
            Some(vec![Some(3)]),
        ]);
        let offsets = arrow_buffer::OffsetBuffer::from_lengths([2, 1]);
        let field = Arc::new(arrow_schema::Field::new_list_field(
            inner.data_type().clone(),
            true,
        ));
        ListArray::new(field, offsets, Arc::new(inner), None).into_data()
    }

    #[test]
    fn a_cloned_node_shares_its_subtree_until_one_side_changes_it() {
        let data = nested_lists();
        let mut realigned = Vec::new();
        let node = Node::from_array_data(&data, &mut realigned);
        let mut copy = node.clone();
        assert!(std::ptr::eq(copy.children.as_ptr(), node.children.as_ptr()));
        assert!(std::ptr::eq(
            copy.children[0].children.as_ptr(),
            node.children[0].children.as_ptr()
        ));
        copy.children.make_mut()[0].len = 99;
        assert_eq!((node.children[0].len, copy.children[0].len), (3, 99));
        assert!(!std::ptr::eq(
            copy.children.as_ptr(),
            node.children.as_ptr()
        ));
        // A leaf holds no allocation for its (absent) children.
        assert!(node.children[0].children[0].children.is_empty());
    }
}

//! An array tree's layout in a handle: per node its length, null count,
//! offset and buffers, each buffer placed in one of the shared allocations
//! (`allocation`, byte offset, byte length). The opener rebuilds the C
//! struct tree over its own mappings of those allocations and imports it
//! like any producer's, with the same validation.

use std::any::Any;
use std::ffi::c_void;

use arrow_schema::{DataType, Field};

use super::codec::{Reader, Writer, MAX_NODES};
use crate::abi::{raw, ArrowDeviceArray, DeviceType, FFI_ArrowArray};
use crate::array::layout as buffers;
use crate::schema::MAX_NESTING_DEPTH;
use crate::{DeviceArray, ValidationLevel};

/// Where an opened empty buffer points: aligned for every type, never read.
const EMPTY: usize = 64;

/// Where a buffer lies among the shared allocations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Place {
    /// The index of the allocation.
    pub allocation: u32,
    /// The byte offset of the buffer in it.
    pub offset: u64,
}

/// Writes `array`'s layout; `place` says where each buffer (pointer, byte
/// length) lies in the allocations being shared.
pub fn write(
    writer: &mut Writer,
    array: &DeviceArray,
    place: &mut dyn FnMut(*const u8, usize) -> Result<Place, String>,
) -> Result<(), String> {
    let mut count = 0;
    write_node(writer, array, place, &mut count)
}

fn write_node(
    writer: &mut Writer,
    array: &DeviceArray,
    place: &mut dyn FnMut(*const u8, usize) -> Result<Place, String>,
    count: &mut usize,
) -> Result<(), String> {
    *count += 1;
    if *count > MAX_NODES {
        return Err(format!("the array has more than {MAX_NODES} nodes"));
    }
    writer.u64(array.len() as u64);
    writer.i64(array.null_count().map_or(-1, |n| n as i64));
    writer.u64(array.offset() as u64);
    let infos = array.buffers();
    writer.u32(infos.len() as u32);
    for (i, info) in infos.iter().enumerate() {
        let len = info.len.ok_or_else(|| {
            format!(
                "buffer {i} ({}) has a size that depends on data this process could not read",
                buffers::buffer_name(array.data_type(), i)
            )
        })?;
        if info.ptr.is_null() {
            writer.u8(0);
            continue;
        }
        if len == 0 {
            // Nothing to place: the opener points it at no allocation.
            writer.u8(2);
            continue;
        }
        let at = place(info.ptr, len)?;
        writer.u8(1);
        writer.u32(at.allocation);
        writer.u64(at.offset);
        writer.u64(len as u64);
    }
    let children = array.children();
    writer.u32(children.len() as u32);
    let dictionary = array.dictionary();
    writer.u8(u8::from(dictionary.is_some()));
    for child in &children {
        write_node(writer, child, place, count)?;
    }
    if let Some(dictionary) = dictionary {
        write_node(writer, &dictionary, place, count)?;
    }
    Ok(())
}

/// One node of a rebuilt tree, with what its struct points to.
struct Node {
    array: raw::ArrowArray,
    buffers: Vec<*const c_void>,
    children: Vec<usize>,
    child_pointers: Vec<*mut raw::ArrowArray>,
    dictionary: Option<usize>,
    /// A view's variadic sizes (the lengths of its data buffers), in memory
    /// of the tree's own: the last buffer of a view node.
    sizes: Option<Vec<i64>>,
    /// A string or binary node's data buffer length in the handle, which its
    /// last offset must not pass (checked once the import has read it).
    data_len: Option<usize>,
}

/// A rebuilt tree: its nodes and what keeps the memory they point to alive.
struct Tree {
    /// Never moved after the pointers into it were taken (the vector's
    /// heap buffer stays where it is when the vector moves).
    _nodes: Vec<Node>,
    _owner: Box<dyn Any + Send + Sync>,
}

unsafe extern "C" fn release_root(array: *mut raw::ArrowArray) {
    // SAFETY: the root's private_data is the tree `open` leaked; the
    // children are released with it (they own nothing of their own).
    unsafe {
        let tree = Box::from_raw((*array).private_data.cast::<Tree>());
        (*array).release = None;
        drop(tree);
    }
}

unsafe extern "C" fn release_child(array: *mut raw::ArrowArray) {
    // SAFETY: a child of a rebuilt tree: the root owns its memory.
    unsafe { (*array).release = None };
}

/// Reads a layout written by [`write()`] for `field`'s type, over
/// `allocations` (the opener's base pointer and length of each), and
/// imports it at `level` as an array of `device_type` / `device_id`.
/// `owner` keeps the allocations alive (a mapping, a lease) and is
/// dropped when the array's last reference goes.
///
/// # Safety
/// Each allocation is valid for its length, for `device_type`, while
/// `owner` lives, and was written completely (the opener is ordered after
/// the exporter's work).
pub unsafe fn open(
    reader: &mut Reader<'_>,
    field: Field,
    allocations: &[(*const u8, usize)],
    owner: Box<dyn Any + Send + Sync>,
    device_type: DeviceType,
    device_id: i64,
    level: ValidationLevel,
) -> Result<DeviceArray, String> {
    // SAFETY: forwarded; no event.
    unsafe {
        open_with_event(
            reader,
            field,
            allocations,
            owner,
            (device_type, device_id, std::ptr::null_mut()),
            level,
        )
    }
}

/// [`open()`], with the array's `sync_event` (NULL or an event of the
/// device that `owner` keeps valid) beside its device type and id.
///
/// # Safety
/// As for [`open()`]; the event, when not NULL, is one the device's
/// implementation can wait on.
pub unsafe fn open_with_event(
    reader: &mut Reader<'_>,
    field: Field,
    allocations: &[(*const u8, usize)],
    owner: Box<dyn Any + Send + Sync>,
    (device_type, device_id, sync_event): (DeviceType, i64, *mut c_void),
    level: ValidationLevel,
) -> Result<DeviceArray, String> {
    let mut nodes = Vec::new();
    read_node(reader, field.data_type(), allocations, &mut nodes, 0)?;
    let data_lens: Vec<Option<usize>> = nodes.iter().map(|node| node.data_len).collect();
    // Point every node at its buffers, children and dictionary, through one
    // base pointer of the node vector (whose heap buffer stays put from here
    // on, also when the vector moves into the tree).
    let base = nodes.as_mut_ptr();
    for index in 0..nodes.len() {
        // SAFETY: every index lies inside the vector; no reference to an
        // element is made while these pointers live.
        unsafe {
            let node = base.add(index);
            let pointers: Vec<*mut raw::ArrowArray> = (*node)
                .children
                .iter()
                .map(|&c| &raw mut (*base.add(c)).array)
                .collect();
            (*node).child_pointers = pointers;
            (*node).array.children = (*node).child_pointers.as_mut_ptr();
            (*node).array.dictionary = (*node)
                .dictionary
                .map_or(std::ptr::null_mut(), |d| &raw mut (*base.add(d)).array);
            if let Some(sizes) = &(*node).sizes {
                let sizes = sizes.as_ptr().cast::<c_void>();
                (*node).buffers.push(sizes);
            }
            (*node).array.n_buffers = (*node).buffers.len() as i64;
            (*node).array.buffers = (*node).buffers.as_mut_ptr();
        }
    }
    // SAFETY: the tree has a root (index 0).
    let root = unsafe { (*base).array };
    let tree = Box::new(Tree {
        _nodes: nodes,
        _owner: owner,
    });
    let mut root = root;
    root.release = Some(release_root);
    root.private_data = Box::into_raw(tree).cast();
    let array = ArrowDeviceArray {
        // SAFETY: identical layouts; the release above frees the tree once.
        array: unsafe { std::mem::transmute::<raw::ArrowArray, FFI_ArrowArray>(root) },
        device_id,
        device_type,
        sync_event,
        reserved: [0; 3],
    };
    // The import reads no data below `Full` but the offsets that size the
    // data buffers (inside their own buffers, checked by `read_node`);
    // those sizes are checked against the handle before `Full` reads data.
    // SAFETY: the caller's guarantee for the memory; the structs are ours;
    // every buffer holds what its node claims (`check_sizes`, and
    // `check_data_sizes` before any data is read).
    let array = unsafe {
        DeviceArray::try_new_with_field(array, field, level.min(ValidationLevel::Default))
    }
    .map_err(|e| e.to_string())?;
    if data_lens.iter().any(Option::is_some) {
        check_data_sizes(&array, &data_lens, &mut 0)?;
    }
    if level == ValidationLevel::Full {
        array.validate_full().map_err(|e| e.to_string())?;
    }
    Ok(array)
}

/// The buffers of a node whose sizes follow from its offset and length
/// (all but string and binary data) hold at least that many bytes: the C
/// Data Interface carries no sizes, so the import reads as far as the node
/// claims; a handle does carry them, and a claim past one is refused.
/// Negative, overflowing or miscounted claims are the import's to refuse
/// (before it reads).
fn check_sizes(
    data_type: &DataType,
    (index, length, offset): (usize, i64, i64),
    node_buffers: &[*const c_void],
    lengths: &[i64],
) -> Result<(), String> {
    let Some(slots) = length
        .checked_add(offset)
        .and_then(|s| usize::try_from(s).ok())
    else {
        return Ok(());
    };
    for (i, kind) in buffers::buffer_kinds(data_type).iter().enumerate() {
        let (Some(ptr), Some(&len)) = (node_buffers.get(i), lengths.get(i)) else {
            break;
        };
        let Some(needed) = buffers::buffer_size(data_type, *kind, slots) else {
            continue;
        };
        // `len` is a buffer's length inside an allocation: >= 0, a usize.
        if !ptr.is_null() && needed > len as usize {
            return Err(format!(
                "node {index} ({data_type}): buffer {i} ({}) holds {len} bytes, expected {needed} for offset {offset} + length {length}",
                buffers::buffer_name(data_type, i)
            ));
        }
    }
    Ok(())
}

/// Each string or binary data buffer holds what the last offset says,
/// which the import read: the nodes of `array` in the handle's order
/// (pre-order, children before the dictionary), from `*index` on.
fn check_data_sizes(
    array: &DeviceArray,
    data_lens: &[Option<usize>],
    index: &mut usize,
) -> Result<(), String> {
    let node = *index;
    *index += 1;
    if let Some(len) = data_lens.get(node).copied().flatten() {
        // `None` on a device whose memory cannot be read: nothing was read.
        if let Some(needed) = array.buffers().get(2).and_then(|b| b.len) {
            if needed > len {
                return Err(format!(
                    "node {node} ({}): buffer 2 (data) holds {len} bytes, the last offset is {needed}",
                    array.data_type()
                ));
            }
        }
    }
    for child in array.children() {
        check_data_sizes(&child, data_lens, index)?;
    }
    if let Some(dictionary) = array.dictionary() {
        check_data_sizes(&dictionary, data_lens, index)?;
    }
    Ok(())
}

fn read_node(
    reader: &mut Reader<'_>,
    data_type: &DataType,
    allocations: &[(*const u8, usize)],
    nodes: &mut Vec<Node>,
    depth: usize,
) -> Result<usize, String> {
    // The import refuses deeper trees (as it does schemas); reading them
    // first would only recurse as deep as the handle says.
    if nodes.len() >= MAX_NODES || depth > MAX_NESTING_DEPTH {
        return Err(format!(
            "the handle's array has more than {MAX_NODES} nodes or is nested deeper than {MAX_NESTING_DEPTH} levels"
        ));
    }
    let as_i64 = |value: u64, what: &str| {
        i64::try_from(value).map_err(|_| format!("{what} {value} is out of range"))
    };
    let length = as_i64(reader.u64("a node length")?, "a node length")?;
    let null_count = reader.i64("a null count")?;
    let offset = as_i64(reader.u64("a node offset")?, "a node offset")?;
    let n_buffers = reader.u32("a buffer count")? as usize;
    if n_buffers > 1 << 16 {
        return Err(format!("a node has {n_buffers} buffers (at most 65,536)"));
    }
    let mut node_buffers = Vec::with_capacity(n_buffers + 1);
    let mut lengths = Vec::with_capacity(n_buffers);
    for i in 0..n_buffers {
        match reader.u8("a buffer flag")? {
            0 => {
                node_buffers.push(std::ptr::null());
                lengths.push(0);
            }
            1 => {
                let allocation = reader.u32("a buffer's allocation")? as usize;
                let at = reader.u64("a buffer's offset")?;
                let len = reader.u64("a buffer's length")?;
                let &(base, size) = allocations.get(allocation).ok_or_else(|| {
                    format!(
                        "buffer {i} lies in allocation {allocation}, of {} shared",
                        allocations.len()
                    )
                })?;
                if at.checked_add(len).is_none_or(|end| end > size as u64) {
                    return Err(format!(
                        "buffer {i} ({len} bytes at {at}) ends past allocation {allocation} ({size} bytes)"
                    ));
                }
                // In bounds (checked above), so the offset fits a usize.
                node_buffers.push(base.wrapping_add(at as usize).cast::<c_void>());
                lengths.push(len as i64);
            }
            2 => {
                // An empty buffer: aligned, non-NULL, never dereferenced.
                node_buffers.push(EMPTY as *const c_void);
                lengths.push(0);
            }
            other => return Err(format!("buffer {i}'s flag is {other} (expected 0, 1 or 2)")),
        }
    }
    // A view's variadic sizes are not in the layout: they are its data
    // buffers' lengths (buffers 2 and on).
    let sizes = buffers::is_view(data_type).then(|| lengths.get(2..).unwrap_or_default().to_vec());
    check_sizes(
        data_type,
        (nodes.len(), length, offset),
        &node_buffers,
        &lengths,
    )?;
    let data_len = buffers::has_data_buffer(data_type)
        .then(|| lengths.get(2).map(|&len| len as usize))
        .flatten();
    let n_children = reader.u32("a child count")? as usize;
    let has_dictionary = match reader.u8("a dictionary flag")? {
        0 => false,
        1 => true,
        other => return Err(format!("a dictionary flag is {other} (expected 0 or 1)")),
    };
    let index = nodes.len();
    nodes.push(Node {
        array: raw::ArrowArray {
            length,
            null_count,
            offset,
            n_buffers: 0,
            n_children: n_children as i64,
            buffers: std::ptr::null_mut(),
            children: std::ptr::null_mut(),
            dictionary: std::ptr::null_mut(),
            release: Some(release_child),
            private_data: std::ptr::null_mut(),
        },
        buffers: node_buffers,
        children: Vec::new(),
        child_pointers: Vec::new(),
        dictionary: None,
        sizes,
        data_len,
    });
    let child_types: Vec<DataType> = buffers::child_fields(data_type)
        .into_iter()
        .map(|f| f.data_type().clone())
        .collect();
    let mut children = Vec::with_capacity(n_children.min(64));
    for i in 0..n_children {
        // A count that disagrees with the type is the import's to report;
        // extra children are read as the last type (or null) meanwhile.
        let child_type = child_types.get(i).cloned().unwrap_or(DataType::Null);
        children.push(read_node(
            reader,
            &child_type,
            allocations,
            nodes,
            depth + 1,
        )?);
    }
    let dictionary = if has_dictionary {
        let value_type = match data_type {
            DataType::Dictionary(_, value) => (**value).clone(),
            _ => DataType::Null,
        };
        Some(read_node(
            reader,
            &value_type,
            allocations,
            nodes,
            depth + 1,
        )?)
    } else {
        None
    };
    nodes[index].children = children;
    nodes[index].dictionary = dictionary;
    Ok(index)
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::sync::Arc;

    use arrow_array::types::Int32Type;
    use arrow_array::{
        ArrayRef, DictionaryArray, Int32Array, Int64Array, ListArray, RecordBatch, StringArray,
        StringViewArray,
    };

    use super::*;

    /// Every buffer of `array` copied into one allocation (64-byte aligned,
    /// as a share lays them out), and the layout's bytes.
    fn copy_out(array: &DeviceArray) -> (Vec<u8>, Vec<u8>) {
        let mut memory = Vec::new();
        let mut placed: HashMap<(usize, usize), u64> = HashMap::new();
        let mut writer = Writer::default();
        write(&mut writer, array, &mut |ptr, len| {
            let key = (ptr as usize, len);
            let offset = *placed.entry(key).or_insert_with(|| {
                let at = memory.len().next_multiple_of(64);
                memory.resize(at, 0);
                // SAFETY: a CPU buffer of `len` bytes of the array.
                memory.extend_from_slice(unsafe { std::slice::from_raw_parts(ptr, len) });
                at as u64
            });
            Ok(Place {
                allocation: 0,
                offset,
            })
        })
        .unwrap();
        (memory, writer.into_bytes())
    }

    fn batch() -> RecordBatch {
        let keys = Int32Array::from(vec![Some(1), None, Some(0), Some(1)]);
        let dict = DictionaryArray::<Int32Type>::try_new(
            keys,
            Arc::new(StringArray::from(vec!["x", "yy"])),
        )
        .unwrap();
        let long = "a string longer than twelve bytes";
        RecordBatch::try_from_iter([
            (
                "i",
                Arc::new(Int64Array::from(vec![Some(1), None, Some(3), Some(4)])) as ArrayRef,
            ),
            (
                "s",
                Arc::new(StringArray::from(vec![
                    Some("a"),
                    None,
                    Some(""),
                    Some("dd"),
                ])) as ArrayRef,
            ),
            (
                "v",
                Arc::new(StringViewArray::from(vec![
                    Some(long),
                    None,
                    Some("short"),
                    Some(long),
                ])) as ArrayRef,
            ),
            (
                "l",
                Arc::new(ListArray::from_iter_primitive::<Int32Type, _, _>(vec![
                    Some(vec![Some(1), None]),
                    None,
                    Some(vec![]),
                    Some(vec![Some(4)]),
                ])) as ArrayRef,
            ),
            ("d", Arc::new(dict) as ArrayRef),
        ])
        .unwrap()
    }

    #[test]
    fn a_tree_rebuilt_over_its_copied_buffers_is_equal_sliced_or_not() {
        let batch = batch();
        for (offset, len) in [(0, 4), (1, 3), (2, 0)] {
            let array = DeviceArray::from_record_batch(&batch.slice(offset, len));
            let (memory, layout) = copy_out(&array);
            let allocations = [(memory.as_ptr(), memory.len())];
            let mut reader = Reader::new(&layout);
            // SAFETY: `memory` holds every buffer and lives in the owner.
            let opened = unsafe {
                open(
                    &mut reader,
                    array.field().clone(),
                    &allocations,
                    Box::new(memory),
                    DeviceType::CPU,
                    -1,
                    ValidationLevel::Full,
                )
            }
            .unwrap();
            assert!(reader.finished());
            assert_eq!(opened.to_record_batch().unwrap(), batch.slice(offset, len));
        }
    }

    #[test]
    fn a_buffer_outside_its_allocation_or_a_missing_allocation_is_refused() {
        let array = DeviceArray::from_array(&Int64Array::from(vec![1, 2, 3]));
        let (memory, layout) = copy_out(&array);
        let short = [(memory.as_ptr(), memory.len() - 1)];
        // SAFETY: the checks refuse before any pointer is used.
        let err = unsafe {
            open(
                &mut Reader::new(&layout),
                array.field().clone(),
                &short,
                Box::new(()),
                DeviceType::CPU,
                -1,
                ValidationLevel::Full,
            )
        }
        .unwrap_err();
        assert!(err.contains("ends past allocation 0"), "{err}");
        let err = unsafe {
            open(
                &mut Reader::new(&layout),
                array.field().clone(),
                &[],
                Box::new(()),
                DeviceType::CPU,
                -1,
                ValidationLevel::Full,
            )
        }
        .unwrap_err();
        assert!(err.contains("lies in allocation 0, of 0 shared"), "{err}");
        for end in 0..layout.len() {
            let err = unsafe {
                open(
                    &mut Reader::new(&layout[..end]),
                    array.field().clone(),
                    &[(memory.as_ptr(), memory.len())],
                    Box::new(()),
                    DeviceType::CPU,
                    -1,
                    ValidationLevel::Full,
                )
            }
            .unwrap_err();
            assert!(err.contains("the handle ends"), "{end}: {err}");
        }
    }

    /// Where a hand-written layout puts a buffer.
    enum Buf {
        Null,
        Empty,
        /// Offset and length in allocation 0.
        At(u64, u64),
    }

    /// Writes one node of a hand-written (lying) layout: `length` slots,
    /// offset 0, null count 0, its buffers, its child count and whether a
    /// dictionary follows.
    fn node(writer: &mut Writer, length: u64, buffers: &[Buf], n_children: u32, dictionary: bool) {
        writer.u64(length);
        writer.i64(0);
        writer.u64(0);
        writer.u32(buffers.len() as u32);
        for buffer in buffers {
            match *buffer {
                Buf::Null => writer.u8(0),
                Buf::Empty => writer.u8(2),
                Buf::At(at, len) => {
                    writer.u8(1);
                    writer.u32(0);
                    writer.u64(at);
                    writer.u64(len);
                }
            }
        }
        writer.u32(n_children);
        writer.u8(u8::from(dictionary));
    }

    /// Opens `layout` for `data_type` over one allocation holding `memory`.
    fn open_over(
        data_type: DataType,
        memory: &[u8],
        layout: Writer,
        level: ValidationLevel,
    ) -> Result<DeviceArray, String> {
        let memory = memory.to_vec();
        let allocations = [(memory.as_ptr(), memory.len())];
        let layout = layout.into_bytes();
        // SAFETY: the owner keeps `memory`, which holds every buffer the
        // layout names (lying about what the nodes claim is the point).
        unsafe {
            open(
                &mut Reader::new(&layout),
                Field::new("f", data_type, true),
                &allocations,
                Box::new(memory),
                DeviceType::CPU,
                -1,
                level,
            )
        }
    }

    const LEVELS: [ValidationLevel; 4] = [
        ValidationLevel::None,
        ValidationLevel::Minimal,
        ValidationLevel::Default,
        ValidationLevel::Full,
    ];

    #[test]
    fn a_node_claiming_more_than_its_buffer_holds_is_refused_before_any_read() {
        let memory: Vec<u8> = [1i64, 2, 3].iter().flat_map(|v| v.to_le_bytes()).collect();
        let ints = |length: u64, buffers: &[Buf]| {
            let mut writer = Writer::default();
            node(&mut writer, length, buffers, 0, false);
            writer
        };
        for level in LEVELS {
            let opened = open_over(
                DataType::Int64,
                &memory,
                ints(3, &[Buf::Null, Buf::At(0, 24)]),
                level,
            )
            .unwrap();
            assert_eq!(
                opened.to_host().unwrap().as_ref(),
                &Int64Array::from(vec![1, 2, 3]) as &dyn arrow_array::Array
            );
            for (length, buffers, expected) in [
                (
                    4,
                    [Buf::Null, Buf::At(0, 24)],
                    "node 0 (Int64): buffer 1 (values) holds 24 bytes, expected 32 for offset 0 + length 4",
                ),
                (
                    1 << 40,
                    [Buf::Null, Buf::At(0, 24)],
                    "buffer 1 (values) holds 24 bytes, expected 8796093022208",
                ),
                (
                    3,
                    [Buf::At(0, 0), Buf::At(0, 24)],
                    "buffer 0 (validity) holds 0 bytes, expected 1",
                ),
                (
                    1,
                    [Buf::Null, Buf::Empty],
                    "buffer 1 (values) holds 0 bytes, expected 8",
                ),
            ] {
                let err = open_over(DataType::Int64, &memory, ints(length, &buffers), level)
                    .unwrap_err();
                assert!(err.contains(expected), "{level:?}: {err}");
            }
        }
    }

    #[test]
    fn an_array_nested_past_the_import_limit_is_refused_without_reading_it_all() {
        // `levels` nested structs of no slots, the last a null leaf.
        let nested = |levels: usize| {
            let mut data_type = DataType::Null;
            let mut layout = Writer::default();
            for level in 0..levels {
                if level + 1 < levels {
                    data_type = DataType::Struct(vec![Field::new("s", data_type, true)].into());
                    node(&mut layout, 0, &[Buf::Null], 1, false);
                } else {
                    node(&mut layout, 0, &[], 0, false);
                }
            }
            (data_type, layout)
        };
        // As deep as the import takes (the root and 64 levels below it).
        let (data_type, layout) = nested(MAX_NESTING_DEPTH + 1);
        open_over(data_type, &[], layout, ValidationLevel::Full).unwrap();
        let (data_type, layout) = nested(MAX_NESTING_DEPTH + 2);
        let err = open_over(data_type, &[], layout, ValidationLevel::Full).unwrap_err();
        assert!(err.contains("nested deeper than 64 levels"), "{err}");
        // 100,000 levels would overflow a test thread's stack if read
        // before being refused. Past the type's children nodes are read as
        // null, so the type need not be as deep.
        let mut deep = Writer::default();
        for _ in 0..100_000 {
            node(&mut deep, 0, &[Buf::Null], 1, false);
        }
        let err = open_over(DataType::Null, &[], deep, ValidationLevel::Full).unwrap_err();
        assert!(err.contains("nested deeper than 64 levels"), "{err}");
    }

    #[test]
    fn a_last_offset_past_the_data_buffer_is_refused_at_every_level() {
        // Offsets [0, 1, 3] at 0, data "abb" at 16.
        let mut memory: Vec<u8> = [0i32, 1, 3].iter().flat_map(|v| v.to_le_bytes()).collect();
        memory.resize(16, 0);
        memory.extend_from_slice(b"abb");
        let strings = |writer: &mut Writer, data_len: u64| {
            node(
                writer,
                2,
                &[Buf::Null, Buf::At(0, 12), Buf::At(16, data_len)],
                0,
                false,
            )
        };
        // Under a struct, and as a dictionary's values (keys [1, 0] at 24):
        // the check follows the handle's order of nodes.
        memory.resize(24, 0);
        memory.extend([1i32, 0].iter().flat_map(|v| v.to_le_bytes()));
        let struct_type = DataType::Struct(vec![Field::new("s", DataType::Utf8, true)].into());
        let dictionary_type =
            DataType::Dictionary(Box::new(DataType::Int32), Box::new(DataType::Utf8));
        let layouts = |data_len: u64| {
            let mut flat = Writer::default();
            strings(&mut flat, data_len);
            let mut nested = Writer::default();
            node(&mut nested, 2, &[Buf::Null], 1, false);
            strings(&mut nested, data_len);
            let mut dictionary = Writer::default();
            node(&mut dictionary, 2, &[Buf::Null, Buf::At(24, 8)], 0, true);
            strings(&mut dictionary, data_len);
            [
                (DataType::Utf8, flat, 0),
                (struct_type.clone(), nested, 1),
                (dictionary_type.clone(), dictionary, 1),
            ]
        };
        for level in LEVELS {
            for (data_type, layout, _) in layouts(3) {
                let opened = open_over(data_type.clone(), &memory, layout, level)
                    .unwrap_or_else(|e| panic!("{data_type} at {level:?}: {e}"));
                assert_eq!(opened.len(), 2);
            }
            for (data_type, layout, index) in layouts(2) {
                let err = open_over(data_type.clone(), &memory, layout, level).unwrap_err();
                let expected = format!(
                    "node {index} (Utf8): buffer 2 (data) holds 2 bytes, the last offset is 3"
                );
                assert!(err.contains(&expected), "{data_type} at {level:?}: {err}");
            }
            let mut short_offsets = Writer::default();
            node(
                &mut short_offsets,
                2,
                &[Buf::Null, Buf::At(0, 8), Buf::At(16, 3)],
                0,
                false,
            );
            let err = open_over(DataType::Utf8, &memory, short_offsets, level).unwrap_err();
            assert!(
                err.contains("buffer 1 (offsets) holds 8 bytes, expected 12"),
                "{level:?}: {err}"
            );
        }
    }
}

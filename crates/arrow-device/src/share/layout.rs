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
use crate::{DeviceArray, ValidationLevel};

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
    let mut nodes = Vec::new();
    read_node(reader, field.data_type(), allocations, &mut nodes, 0)?;
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
        sync_event: std::ptr::null_mut(),
        reserved: [0; 3],
    };
    // SAFETY: the caller's guarantee for the memory; the structs are ours.
    unsafe { DeviceArray::try_new_with_field(array, field, level) }.map_err(|e| e.to_string())
}

fn read_node(
    reader: &mut Reader<'_>,
    data_type: &DataType,
    allocations: &[(*const u8, usize)],
    nodes: &mut Vec<Node>,
    depth: usize,
) -> Result<usize, String> {
    if nodes.len() >= MAX_NODES || depth > 1024 {
        return Err(format!(
            "the handle's array has more than {MAX_NODES} nodes or 1,024 levels"
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
            other => return Err(format!("buffer {i}'s flag is {other} (expected 0 or 1)")),
        }
    }
    // A view's variadic sizes are not in the layout: they are its data
    // buffers' lengths (buffers 2 and on).
    let sizes = buffers::is_view(data_type).then(|| lengths.get(2..).unwrap_or_default().to_vec());
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
}

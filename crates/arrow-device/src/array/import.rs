//! Import: a foreign `ArrowArray` tree + its data type → a validated [`Node`] tree.
//!
//! The walk checks every struct before following anything it points to
//! (spec: "Mandatory" members and their ranges), then reads, in one batch, the
//! few data values that buffer sizes depend on: the first and last offset of
//! variable-size and list buffers, the variadic buffer sizes of view arrays and
//! the last run end of run-end-encoded arrays. On a device the batch is copied
//! to the host after the stream has waited on the producer's `sync_event`,
//! with a single synchronization for the whole tree.

use std::ffi::c_void;
use std::sync::Arc;

use arrow_schema::{DataType, UnionMode};
use smallvec::SmallVec;

use crate::abi::raw;
use crate::array::device_reads::{read_values, After, DeviceRead};
use crate::array::layout::{self, BufferKind};
use crate::array::node::{Children, Node, Pending, RawBuf};
use crate::device::{DeviceRef, SyncEvent};
use crate::error::{Error, Path, Result};
use crate::validate::ValidationLevel;

/// Deeper trees are rejected: they would only come from a hostile or cyclic
/// struct, and the walk is recursive.
pub(crate) const MAX_DEPTH: usize = 64;

pub(crate) struct Importer<'d> {
    level: ValidationLevel,
    /// `None` for device types without an implementation (opaque import).
    device: Option<&'d DeviceRef>,
    /// Inline for small trees: no allocation for one string column.
    reads: SmallVec<[DeviceRead; 4]>,
}

impl<'d> Importer<'d> {
    pub(crate) fn new(level: ValidationLevel, device: Option<&'d DeviceRef>) -> Self {
        Self {
            level,
            device,
            reads: SmallVec::new(),
        }
    }

    /// Walks and validates the tree, then resolves data-dependent sizes.
    /// Returns the tree and whether every buffer size is known (false only
    /// for opaque devices, where nothing can be read).
    ///
    /// # Safety
    /// `array` must be a valid, non-released struct whose pointers may be
    /// followed as the C Data Interface describes (buffers are not
    /// dereferenced on the host unless the device is host-accessible).
    pub(crate) unsafe fn import(
        mut self,
        array: &raw::ArrowArray,
        data_type: &DataType,
        sync_event: &SyncEvent,
    ) -> Result<(Node, bool)> {
        let root = Path::root();
        // SAFETY: forwarded from the caller.
        let mut node = unsafe { self.walk(array, data_type, &root, 0) }?;
        let values = match self.device {
            Some(device) => self.read_all(device, sync_event)?,
            None => {
                return Ok((node, self.reads.is_empty()));
            }
        };
        resolve(&mut node, &values, self.level, &root)?;
        Ok((node, true))
    }

    /// # Safety
    /// As for [`Importer::import`].
    unsafe fn walk(
        &mut self,
        array: &raw::ArrowArray,
        data_type: &DataType,
        path: &Path<'_>,
        depth: usize,
    ) -> Result<Node> {
        if depth > MAX_DEPTH {
            return Err(Error::invalid(
                path,
                format!("array nesting deeper than {MAX_DEPTH} levels"),
            ));
        }
        if array.release.is_none() {
            return Err(Error::invalid(
                path,
                "struct was released (release is NULL)",
            ));
        }
        let len = non_negative(array.length, "length", path)?;
        let offset = non_negative(array.offset, "offset", path)?;
        // Both fit in i64; their sum must too: the C structs, arrow-rs and
        // every consumer compute `offset + length` as int64.
        let slots = len
            .checked_add(offset)
            .filter(|&slots| i64::try_from(slots).is_ok())
            .ok_or_else(|| {
                Error::invalid(
                    path,
                    format!("offset {offset} + length {len} overflows int64"),
                )
            })?;
        let null_count = match array.null_count {
            -1 => None,
            n if n < -1 => {
                return Err(Error::invalid(
                    path,
                    format!("null_count is {n}, expected -1 (unknown) or >= 0"),
                ));
            }
            n => {
                let n = n as usize;
                if n > len {
                    return Err(Error::invalid(
                        path,
                        format!("null_count {n} exceeds length {len}"),
                    ));
                }
                Some(n)
            }
        };

        let kinds = layout::buffer_kinds(data_type);
        let is_view = layout::is_view(data_type);
        let n_buffers = array.n_buffers;
        let expected_buffers = kinds.len() as i64;
        let buffer_count_ok = if is_view {
            n_buffers > expected_buffers
        } else {
            n_buffers == expected_buffers
        };
        if !buffer_count_ok {
            let expected = if is_view {
                format!(
                    "at least {} (validity, views, variadic sizes)",
                    expected_buffers + 1
                )
            } else {
                expected_buffers.to_string()
            };
            return Err(Error::invalid(
                path,
                format!("n_buffers is {n_buffers}, expected {expected} for {data_type}"),
            ));
        }
        if n_buffers > 0 && array.buffers.is_null() {
            return Err(Error::invalid(
                path,
                format!("buffers is NULL but n_buffers is {n_buffers}"),
            ));
        }
        let raw_buffers: &[*const c_void] = if n_buffers > 0 {
            // SAFETY: non-NULL and the producer promises n_buffers entries.
            unsafe { std::slice::from_raw_parts(array.buffers, n_buffers as usize) }
        } else {
            &[]
        };

        let expected_children = layout::n_children(data_type).unwrap_or(0);
        if array.n_children != expected_children as i64 {
            return Err(Error::invalid(
                path,
                format!(
                    "n_children is {}, expected {expected_children} for {data_type}",
                    array.n_children
                ),
            ));
        }
        if expected_children > 0 && array.children.is_null() {
            return Err(Error::invalid(
                path,
                format!("children is NULL but n_children is {expected_children}"),
            ));
        }
        let is_dictionary = matches!(data_type, DataType::Dictionary(_, _));
        if is_dictionary && array.dictionary.is_null() {
            return Err(Error::invalid(
                path,
                "dictionary is NULL but the schema is dictionary-encoded",
            ));
        }
        if !is_dictionary && !array.dictionary.is_null() {
            return Err(Error::invalid(
                path,
                format!(
                    "dictionary is set but the schema says {data_type}, not dictionary-encoded"
                ),
            ));
        }

        let mut node = Node {
            data_type: data_type.clone(),
            len,
            offset,
            null_count,
            buffers: crate::array::node::Buffers::with_capacity(raw_buffers.len()),
            children: Children::default(),
            dictionary: None,
            data_shift: None,
            pending: Pending::None,
        };
        let checks = self.level >= ValidationLevel::Minimal;
        for (i, kind) in kinds.iter().enumerate() {
            let ptr = raw_buffers[i].cast::<u8>();
            let buffer_path = path.buffer(i);
            let size = match kind {
                BufferKind::Data => 0, // resolved from the last offset
                _ => layout::buffer_size(data_type, *kind, slots).ok_or_else(|| {
                    Error::invalid(
                        &buffer_path,
                        format!(
                            "size for {slots} slots (offset {offset} + length {len}) overflows"
                        ),
                    )
                })?,
            };
            match kind {
                BufferKind::Validity => {
                    if ptr.is_null() && null_count.is_some_and(|n| n > 0) && checks {
                        return Err(Error::invalid(
                            &buffer_path,
                            format!(
                                "validity buffer is NULL but null_count is {}",
                                null_count.unwrap_or(0)
                            ),
                        ));
                    }
                }
                BufferKind::Offsets(w) => {
                    if ptr.is_null() {
                        if slots > 0 {
                            return Err(Error::invalid(
                                &buffer_path,
                                format!("offsets buffer is NULL, expected {size} bytes"),
                            ));
                        }
                    } else if layout::has_data_buffer(data_type)
                        || self.level >= ValidationLevel::Default
                    {
                        let first = self.reads.len();
                        // SAFETY: pointer arithmetic only; the read happens
                        // through the device (or after the event on the host).
                        self.reads.push(DeviceRead {
                            ptr: ptr.wrapping_add(offset * w),
                            width: *w,
                            host: false,
                        });
                        self.reads.push(DeviceRead {
                            ptr: ptr.wrapping_add(slots * w),
                            width: *w,
                            host: false,
                        });
                        node.pending = Pending::Offsets {
                            first,
                            last: first + 1,
                        };
                    }
                }
                BufferKind::Data => {}
                _ => {
                    if ptr.is_null() && size > 0 {
                        return Err(Error::invalid(
                            &buffer_path,
                            format!(
                                "{} buffer is NULL, expected {size} bytes",
                                layout::buffer_name(data_type, i)
                            ),
                        ));
                    }
                }
            }
            node.buffers.push(RawBuf {
                ptr,
                len: if ptr.is_null() { 0 } else { size },
            });
        }
        if is_view {
            let n_variadic = raw_buffers.len() - kinds.len() - 1;
            let sizes_ptr = raw_buffers[raw_buffers.len() - 1].cast::<u8>();
            if n_variadic > 0 && sizes_ptr.is_null() {
                return Err(Error::invalid(
                    &path.buffer(raw_buffers.len() - 1),
                    format!("variadic sizes buffer is NULL, expected {n_variadic} sizes"),
                ));
            }
            let host = self
                .device
                .is_some_and(|d| d.is_host_accessible_at(sizes_ptr, n_variadic * 8));
            let start = self.reads.len();
            for j in 0..n_variadic {
                node.buffers.push(RawBuf {
                    ptr: raw_buffers[kinds.len() + j].cast(),
                    len: 0,
                });
                self.reads.push(DeviceRead {
                    ptr: sizes_ptr.wrapping_add(j * 8),
                    width: 8,
                    host,
                });
            }
            if n_variadic > 0 {
                node.pending = Pending::Variadic {
                    start,
                    count: n_variadic,
                };
            }
        }

        // Children (a leaf has none to allocate).
        if expected_children > 0 {
            let mut children = Vec::with_capacity(expected_children);
            for i in 0..expected_children {
                let Some(child_field) = layout::child_field(data_type, i) else {
                    break; // `expected_children` counts exactly these fields
                };
                // SAFETY: children is non-NULL with n_children entries (checked).
                let child_ptr = unsafe { *array.children.add(i) };
                let child_path = child_path(path, data_type, i);
                // SAFETY: a non-NULL child pointer of a valid struct.
                let Some(child) = (unsafe { child_ptr.as_ref() }) else {
                    return Err(Error::invalid(&child_path, "child pointer is NULL"));
                };
                // SAFETY: forwarded from the caller.
                let child_node =
                    unsafe { self.walk(child, child_field.data_type(), &child_path, depth + 1) }?;
                children.push(child_node);
            }
            node.children = Children::from(children);
        }
        if let DataType::Dictionary(_, value_type) = data_type {
            let dict_path = path.dictionary();
            // SAFETY: non-NULL (checked above) and part of a valid struct.
            let dictionary = unsafe { &*array.dictionary };
            // SAFETY: forwarded from the caller.
            let dict = unsafe { self.walk(dictionary, value_type, &dict_path, depth + 1) }?;
            node.dictionary = Some(Arc::new(dict));
        }
        if checks && expected_children > 0 {
            check_children(&mut node, path)?;
        }
        if self.level >= ValidationLevel::Default {
            if let DataType::RunEndEncoded(_, _) = data_type {
                let run_ends = &node.children[0];
                if run_ends.len > 0 {
                    let w = match run_ends.data_type {
                        DataType::Int16 => 2,
                        DataType::Int32 => 4,
                        _ => 8,
                    };
                    let last = run_ends.buffers[1]
                        .ptr
                        .wrapping_add((run_ends.slots() - 1) * w);
                    let read = self.reads.len();
                    self.reads.push(DeviceRead {
                        ptr: last,
                        width: w,
                        host: false,
                    });
                    node.pending = Pending::LastRunEnd { read };
                }
            }
        }
        Ok(node)
    }

    /// Reads every pending value, in one batch after the producer's event.
    fn read_all(&self, device: &DeviceRef, sync_event: &SyncEvent) -> Result<SmallVec<[i64; 4]>> {
        // SAFETY: every read lies inside a buffer the structural checks
        // sized, in host memory where `host` is set.
        unsafe { read_values(device, After::SyncEvent(sync_event), &self.reads) }
    }
}

fn non_negative(value: i64, what: &str, path: &Path<'_>) -> Result<usize> {
    usize::try_from(value)
        .map_err(|_| Error::invalid(path, format!("{what} is {value}, expected >= 0")))
}

/// The path of child `index` of a node of `data_type`: `field "name"` under
/// a struct, `child i "name"` under other nested types.
pub(crate) fn child_path<'a>(
    path: &'a Path<'a>,
    data_type: &'a DataType,
    index: usize,
) -> Path<'a> {
    let name = layout::child_field(data_type, index).map(|f| f.name().as_str());
    if matches!(data_type, DataType::Struct(_)) {
        path.field(index, name)
    } else {
        path.child(index, name)
    }
}

/// Child lengths that follow from the parent's metadata alone.
fn check_children(node: &mut Node, path: &Path<'_>) -> Result<()> {
    let slots = node.slots();
    let need = |child: &Node, i: usize, needed: usize, why: &str| -> Result<()> {
        if child.len < needed {
            let p = child_path(path, &node.data_type, i);
            return Err(Error::invalid(
                &p,
                format!(
                    "child has length {}, expected at least {needed} ({why})",
                    child.len
                ),
            ));
        }
        Ok(())
    };
    match &node.data_type {
        DataType::Struct(_) => {
            for (i, c) in node.children.iter().enumerate() {
                need(c, i, slots, "the struct's offset + length")?;
            }
        }
        DataType::Union(_, UnionMode::Sparse) => {
            for (i, c) in node.children.iter().enumerate() {
                need(c, i, slots, "the sparse union's offset + length")?;
            }
        }
        DataType::FixedSizeList(_, size) => {
            let needed = slots.saturating_mul(usize::try_from(*size).unwrap_or(0));
            need(
                &node.children[0],
                0,
                needed,
                "offset + length times the list size",
            )?;
        }
        DataType::RunEndEncoded(_, _) => {
            let (run_ends, values) = (&node.children[0], &node.children[1]);
            if run_ends.len != values.len {
                return Err(Error::invalid(
                    path,
                    format!(
                        "run_ends has length {} but values has length {}, expected equal",
                        run_ends.len, values.len
                    ),
                ));
            }
            if run_ends.null_count.is_some_and(|n| n > 0) {
                let p = child_path(path, &node.data_type, 0);
                return Err(Error::invalid(&p, "run ends must not contain nulls"));
            }
            if slots > 0 && run_ends.len == 0 {
                return Err(Error::invalid(
                    path,
                    format!("run_ends is empty but the array covers {slots} slots"),
                ));
            }
        }
        _ => {}
    }
    Ok(())
}

/// Applies the batched reads: buffer sizes, then the checks they enable.
fn resolve(node: &mut Node, values: &[i64], level: ValidationLevel, path: &Path<'_>) -> Result<()> {
    match std::mem::take(&mut node.pending) {
        Pending::None => {}
        Pending::Offsets { first, last } => {
            let (first, last) = (values[first], values[last]);
            let offsets_path = path.buffer(1);
            if first < 0 || last < 0 {
                return Err(Error::invalid(
                    &offsets_path,
                    format!("offsets are negative (first {first}, last {last})"),
                ));
            }
            // Checked at every level: arrow-rs slices data by these offsets
            // without checks, so accepting them would not be memory-safe.
            if last < first {
                return Err(Error::invalid(
                    &offsets_path,
                    format!("offsets decrease: first offset {first} > last offset {last}"),
                ));
            }
            let last = last as usize;
            if layout::has_data_buffer(&node.data_type) {
                let data = &mut node.buffers[2];
                if data.ptr.is_null() && last > 0 {
                    return Err(Error::invalid(
                        &path.buffer(2),
                        format!("data buffer is NULL, expected {last} bytes"),
                    ));
                }
                data.len = if data.ptr.is_null() { 0 } else { last };
            } else {
                let child = &node.children[0];
                if child.len < last && level >= ValidationLevel::Default {
                    return Err(Error::invalid(
                        &child_path(path, &node.data_type, 0),
                        format!(
                            "child has length {}, expected at least {last} (the last offset)",
                            child.len
                        ),
                    ));
                }
            }
        }
        Pending::Variadic { start, count } => {
            for j in 0..count {
                let size = values[start + j];
                let buffer_path = path.buffer(2 + j);
                let Ok(size) = usize::try_from(size) else {
                    return Err(Error::invalid(
                        &buffer_path,
                        format!("variadic buffer size is {size}, expected >= 0"),
                    ));
                };
                let buffer = &mut node.buffers[2 + j];
                if buffer.ptr.is_null() && size > 0 {
                    return Err(Error::invalid(
                        &buffer_path,
                        format!("variadic data buffer is NULL, expected {size} bytes"),
                    ));
                }
                buffer.len = if buffer.ptr.is_null() { 0 } else { size };
            }
        }
        Pending::LastRunEnd { read } => {
            let last = values[read];
            if last < node.slots() as i64 {
                return Err(Error::invalid(
                    &child_path(path, &node.data_type, 0),
                    format!(
                        "last run end is {last}, expected at least {} (offset + length)",
                        node.slots()
                    ),
                ));
            }
        }
    }
    if node.children.is_empty() && node.dictionary.is_none() {
        return Ok(());
    }
    let Node {
        data_type,
        children,
        dictionary,
        ..
    } = node;
    for (i, child) in children.make_mut().iter_mut().enumerate() {
        resolve(child, values, level, &child_path(path, data_type, i))?;
    }
    if let Some(dictionary) = dictionary {
        resolve(Arc::make_mut(dictionary), values, level, &path.dictionary())?;
    }
    Ok(())
}

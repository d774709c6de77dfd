//! Copies of whole array trees between the host and devices.
//!
//! Every copy of a tree first narrows it to the referenced slots
//! ([`Node::trimmed`]), then makes one allocation on the destination (each buffer
//! at a 64-byte aligned offset), queues one copy per buffer on one stream and
//! synchronizes once: with the host for copies to the host, through a recorded
//! event for copies to a device (the event becomes the new array's
//! `sync_event`).
//!
//! The destination is sized by what the producer claims (each buffer's size
//! follows from the node's type, offset and length, or from its offsets),
//! which the import cannot check against device memory it must not read.
//! So before a copy from a device sets anything aside, [`plan`] asks the
//! source device whether each buffer lies inside its memory
//! ([`Device::check_device_range`]): a node claiming 8 GiB over a 1-byte
//! allocation fails then, naming the buffer, instead of after 8 GiB of host
//! memory has been allocated and faulted in.

use std::ffi::c_void;
use std::sync::Arc;

use arrow_buffer::Buffer;
use arrow_schema::DataType;
use smallvec::smallvec;

use crate::array::device_reads::{read_values, After, DeviceRead};
use crate::array::import::child_path;
use crate::array::layout::{self, BufferKind};
use crate::array::node::{Node, RawBuf};
use crate::array::owner::{Owner, PendingMemory};
use crate::array::staging::{HostStaging, HostTarget};
use crate::device::{drain_then_free, Device, DeviceBuffer, DeviceRef, Stream, SyncEvent};
use crate::error::{Error, Path, Result};

/// Alignment of every buffer inside a tree's allocation.
const ALIGN: usize = 64;

/// A tree copied onto a device, with what keeps it valid.
pub(crate) struct Copied {
    pub node: Node,
    pub owner: Owner,
    pub device: DeviceRef,
    /// The event recorded after the copies (NULL for devices without events).
    pub sync_event: *mut c_void,
}

/// Lays out the buffers of `node` in one allocation: returns each buffer's
/// offset (in visiting order) and the total size. For a copy from device
/// memory, `src` is that device, and every buffer's range is checked
/// against it first ([`check_claims`]); `None` for host memory, which the
/// copies read on the producer's promise.
fn plan(node: &Node, src: Option<&dyn Device>) -> Result<(Vec<usize>, usize)> {
    if let Some(src) = src {
        check_claims(node, src, &Path::root())?;
    }
    let mut offsets = Vec::new();
    let mut total = 0usize;
    let mut overflow = false;
    node.for_each_buffer(&mut |b| {
        offsets.push(total);
        if !b.ptr.is_null() {
            total = match total
                .checked_add(b.len)
                .and_then(|t| t.checked_next_multiple_of(ALIGN))
            {
                Some(t) => t,
                None => {
                    overflow = true;
                    total
                }
            };
        }
    });
    if overflow {
        return Err(Error::NotSupported(
            "array tree too large to copy: size overflows usize".into(),
        ));
    }
    Ok((offsets, total))
}

/// Checks that every non-empty buffer of `node` (at `path`) lies inside
/// memory of `src`, as far as the device can tell: the error names the
/// buffer, the bytes claimed and the device's answer.
fn check_claims(node: &Node, src: &dyn Device, path: &Path<'_>) -> Result<()> {
    for (i, buffer) in node.buffers.iter().enumerate() {
        if buffer.ptr.is_null() || buffer.len == 0 {
            continue;
        }
        if let Err(answer) = src.check_device_range(buffer.ptr, buffer.len) {
            let sized_by = match layout::buffer_kinds(&node.data_type).get(i) {
                Some(BufferKind::Data) => "its offsets",
                None => "the variadic buffer sizes",
                Some(_) => "the node's type, offset and length",
            };
            return Err(Error::invalid(
                &path.buffer(i),
                format!(
                    "the {} buffer claims {} bytes at {:p} (as {sized_by} size it), which are \
                     not all memory of the device: {answer}",
                    layout::buffer_name(&node.data_type, i),
                    buffer.len,
                    buffer.ptr
                ),
            ));
        }
    }
    for (i, child) in node.children.iter().enumerate() {
        check_claims(child, src, &child_path(path, &node.data_type, i))?;
    }
    match &node.dictionary {
        Some(dictionary) => check_claims(dictionary, src, &path.dictionary()),
        None => Ok(()),
    }
}

/// Rebuilds `node` with buffer `i` at `base + offsets[i]`; NULL stays NULL.
fn relocate(node: &Node, offsets: &[usize], base: *const u8) -> Node {
    let mut i = 0;
    node.map_buffers(&mut |b| {
        let offset = offsets[i];
        i += 1;
        if b.ptr.is_null() {
            RawBuf::NULL
        } else {
            // `wrapping_add` so that no provenance claims are made about
            // device pointers, which are never dereferenced here.
            RawBuf {
                ptr: base.wrapping_add(offset),
                len: b.len,
            }
        }
    })
}

/// Calls `copy(from, to)` for each non-empty buffer of `node` and its
/// relocated twin in `copied`, stopping at the first error.
fn for_each_pair(
    node: &Node,
    copied: &Node,
    mut copy: impl FnMut(RawBuf, RawBuf) -> Result<()>,
) -> Result<()> {
    let mut targets = Vec::new();
    copied.for_each_buffer(&mut |b| targets.push(b));
    let mut targets = targets.into_iter();
    let mut result = Ok(());
    node.for_each_buffer(&mut |from| {
        let to = targets.next().unwrap_or(RawBuf::NULL);
        if result.is_ok() && !from.ptr.is_null() && from.len > 0 {
            result = copy(from, to);
        }
    });
    result
}

/// Copies a tree of host-accessible buffers onto `device`. `sources` keeps the
/// host buffers alive until the copies have completed.
pub(crate) fn host_to_device(node: &Node, sources: Owner, device: &DeviceRef) -> Result<Copied> {
    let node = &node.trimmed();
    let (offsets, total) = plan(node, None)?;
    let memory = device.allocate(total)?;
    let stream = device.create_stream()?;
    let copied = relocate(node, &offsets, memory.as_ptr());
    let result = for_each_pair(node, &copied, |src, to| {
        // SAFETY: `src` is host-accessible for `len` bytes and kept alive by
        // `sources` until the event below completes; `to` lies inside
        // `memory`, sized by `plan`.
        unsafe { device.copy_from_host(src.ptr, to.ptr.cast_mut(), src.len, &stream) }
    });
    finish_device_copy(copied, result, device, stream, memory, Some(sources))
}

/// Copies a tree on `src` (whose producer event is `sync_event`) onto `dst`.
/// Devices of one type copy directly; others stage through the host.
pub(crate) fn device_to_device(
    node: &Node,
    src: &DeviceRef,
    sync_event: &SyncEvent,
    src_owner: Owner,
    dst: &DeviceRef,
) -> Result<Copied> {
    if src.is_host_accessible() {
        sync_event.wait_host(src.as_ref())?;
        return host_to_device(node, src_owner, dst);
    }
    if src.device_type() == dst.device_type() {
        let node = &node.trimmed();
        let (offsets, total) = plan(node, Some(src.as_ref()))?;
        let memory = dst.allocate(total)?;
        let stream = dst.create_stream()?;
        // Same device type, so the event type matches.
        sync_event.order_stream(dst.as_ref(), &stream)?;
        let copied = relocate(node, &offsets, memory.as_ptr());
        let result = for_each_pair(node, &copied, |from, to| {
            // SAFETY: `from` is valid on `src` (kept by `src_owner`), `to`
            // lies inside `memory`.
            unsafe {
                dst.copy_device_to_device(
                    src.as_ref(),
                    from.ptr,
                    to.ptr.cast_mut(),
                    from.len,
                    &stream,
                )
            }
        });
        match result {
            Err(Error::NotSupported(_)) => {}
            other => {
                return finish_device_copy(copied, other, dst, stream, memory, Some(src_owner))
            }
        }
    }
    // Stage through the host: one host copy, then one upload.
    let (host_node, host_memory) = device_to_host(node, src, sync_event, None)?;
    let owner: Owner = Arc::new(host_memory);
    host_to_device(&host_node, owner, dst)
}

fn finish_device_copy(
    node: Node,
    queued: Result<()>,
    device: &DeviceRef,
    stream: Stream,
    memory: DeviceBuffer,
    sources: Option<Owner>,
) -> Result<Copied> {
    if let Err(e) = queued {
        return Err(drain_then_free(device, &stream, memory, e));
    }
    // The sources go as soon as the copies have run, where the device can
    // say when (queued before the event, so that the event's completion
    // implies it); otherwise they stay with the copy.
    let sources = match sources {
        Some(sources) => device.release_after(&stream, Box::new(sources))?,
        None => None,
    };
    let recorded = device
        .create_event()
        .and_then(|event| device.record_event(&event, &stream).map(|()| event));
    let event = match recorded {
        Ok(event) => event,
        Err(e) => return Err(drain_then_free(device, &stream, memory, e)),
    };
    let sync_event = event.sync_event();
    let owner: Owner = Arc::new(PendingMemory::new(
        device.clone(),
        event,
        stream,
        smallvec![memory],
        sources,
    ));
    Ok(Copied {
        node,
        owner,
        device: device.clone(),
        sync_event,
    })
}

/// Copies a tree on `src` to one host allocation, after waiting on the
/// producer's `sync_event`; returns the relocated tree and the host memory.
/// The allocation is lent by `staging` where there is one (reused memory:
/// every byte of the returned tree's buffers is written here, see
/// `array::staging`), fresh otherwise.
pub(crate) fn device_to_host(
    node: &Node,
    src: &DeviceRef,
    sync_event: &SyncEvent,
    staging: Option<&HostStaging>,
) -> Result<(Node, Buffer)> {
    let mut node = node.trimmed();
    let stream = src.create_stream()?;
    sync_event.order_stream(src.as_ref(), &stream)?;
    narrow_string_data(&mut node, src, &stream)?;
    let node = &node;
    let (offsets, total) = plan(node, Some(src.as_ref()))?;
    // Fresh memory is faulted in beforehand (and in parallel) when large: a
    // copy into fresh pageable memory takes its page faults serially,
    // inside the driver. Lent memory was touched by an earlier copy.
    let mut host = HostTarget::acquire(total, src.as_ref(), staging)?;
    let base = host.as_mut_ptr();
    let mut copied = relocate(node, &offsets, base);
    let result = for_each_pair(node, &copied, |from, to| {
        // SAFETY: `from` is valid device memory of `src`; `to` lies inside
        // `host`, which outlives the synchronization below.
        unsafe { src.copy_to_host(from.ptr, to.ptr.cast_mut(), from.len, &stream) }
    });
    if let Err(e) = src.synchronize_stream(&stream) {
        // The copies' end is unknown: leak the destination, never free it
        // (or lend it again) under them.
        host.leak();
        return Err(e);
    }
    result?;
    // SAFETY: the copies have completed; `copied` describes `host`, which
    // nothing else references yet.
    unsafe { rebase_narrowed_offsets(&mut copied) };
    Ok((copied, host.into_buffer()))
}

/// String and binary data buffers above this size are narrowed to the bytes
/// a slice references before a copy to the host: worth one more batched
/// read of offsets (one synchronization for the whole tree).
const NARROW_DATA_ABOVE: usize = 1 << 20;

fn is_narrowable(node: &Node) -> bool {
    layout::has_data_buffer(&node.data_type)
        && node.data_shift.is_none()
        && !node.buffers[1].ptr.is_null()
        && !node.buffers[2].ptr.is_null()
        && node.buffers[2].len > NARROW_DATA_ABOVE
}

fn offset_width(data_type: &DataType) -> usize {
    match layout::buffer_kinds(data_type).get(1) {
        Some(BufferKind::Offsets(width)) => *width,
        _ => 4,
    }
}

/// Visits every node of the tree in pre-order.
fn for_each_node_mut(node: &mut Node, f: &mut impl FnMut(&mut Node)) {
    f(node);
    for child in node.children.make_mut() {
        for_each_node_mut(child, f);
    }
    if let Some(dictionary) = &mut node.dictionary {
        for_each_node_mut(Arc::make_mut(dictionary), f);
    }
}

/// Narrows large string/binary data buffers of a trimmed tree to
/// `[offsets[offset], offsets[offset + len])`, the bytes the array's own
/// slots reference, reading those two offsets of each node in one batch on
/// `stream`; marks each narrowed node with `data_shift` so that
/// [`rebase_narrowed_offsets`] shifts its offsets.
///
/// The trimmed tree keeps up to seven slots before the array's offset (a
/// trimmed node starts at a byte of its bitmap); the spec does not constrain
/// their offsets, so they are neither read here nor trusted later: the
/// import validated exactly the two offsets read here (`array::import`).
fn narrow_string_data(node: &mut Node, src: &DeviceRef, stream: &Stream) -> Result<()> {
    let mut reads: Vec<DeviceRead> = Vec::new();
    for_each_node_mut(node, &mut |n| {
        if is_narrowable(n) {
            let width = offset_width(&n.data_type);
            let offsets = n.buffers[1].ptr;
            for slot in [n.offset, n.slots()] {
                reads.push(DeviceRead {
                    ptr: offsets.wrapping_add(slot * width),
                    width,
                    host: false,
                });
            }
        }
    });
    if reads.is_empty() {
        return Ok(());
    }
    // SAFETY: each read lies inside an offsets buffer of `src` that the
    // import sized for `slots + 1` offsets; `stream` waits on the
    // producer's event.
    let values = unsafe { read_values(src, After::Stream(stream), &reads) }?;
    let mut next = 0;
    let mut invalid = None;
    for_each_node_mut(node, &mut |n| {
        if !is_narrowable(n) {
            return;
        }
        let (first, last) = (values[next], values[next + 1]);
        next += 2;
        let data = &mut n.buffers[2];
        match (usize::try_from(first), usize::try_from(last)) {
            (Ok(f), Ok(l)) if f <= l && l <= data.len => {
                data.ptr = data.ptr.wrapping_add(f);
                data.len = l - f;
                n.data_shift = Some(first);
            }
            _ => {
                invalid.get_or_insert((n.data_type.clone(), first, last, data.len));
            }
        }
    });
    // The import checked these two offsets; a producer that changed them
    // since (the memory is theirs) gets an error, not a wrong copy.
    match invalid {
        Some((data_type, first, last, len)) => Err(Error::invalid(
            &Path::root(),
            format!(
                "a {data_type} node's offsets now run from {first} to {last}, expected 0 <= first <= last <= {len} (its data buffer's size, as imported)"
            ),
        )),
        None => Ok(()),
    }
}

/// Rewrites the offsets of the nodes [`narrow_string_data`] narrowed so
/// they address the narrowed data: the array's own offsets less its first
/// offset, and 0 for the slots before the array's offset, which the trimmed
/// copy carries but nothing constrains (they could point anywhere, or be
/// negative; after this the copied offsets buffer is valid from slot 0).
///
/// # Safety
/// `node` must describe host memory that is writable and not yet shared.
unsafe fn rebase_narrowed_offsets(node: &mut Node) {
    /// # Safety
    /// `offsets` holds `count` writable values of `T`.
    unsafe fn rebase<T: Copy + std::ops::Sub<Output = T> + Default>(
        offsets: *mut T,
        before: usize,
        count: usize,
        first: T,
    ) {
        for i in 0..count {
            // SAFETY: `i < count`, per the contract; unaligned accesses
            // make no alignment claim.
            unsafe {
                let p = offsets.add(i);
                let value = if i < before {
                    T::default()
                } else {
                    p.read_unaligned() - first
                };
                p.write_unaligned(value);
            }
        }
    }
    let mut visit = |n: &mut Node| {
        let Some(first) = n.data_shift else { return };
        let (before, count) = (n.offset, n.slots() + 1);
        let ptr = n.buffers[1].ptr.cast_mut();
        // SAFETY: the offsets buffer holds `slots + 1` offsets of its width
        // in writable host memory (this function's contract). `first` fits
        // the width: it was read as one of these offsets.
        unsafe {
            if offset_width(&n.data_type) == 8 {
                rebase(ptr.cast::<i64>(), before, count, first);
            } else {
                rebase(ptr.cast::<i32>(), before, count, first as i32);
            }
        }
    };
    for_each_node_mut(node, &mut visit);
}

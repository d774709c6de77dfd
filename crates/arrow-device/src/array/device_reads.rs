//! Reads of data-dependent sizes (offsets, run ends, variadic sizes) out of
//! an array's memory, batched: the one place that reads integers a device
//! holds. The import reads buffer sizes through it, and the copy to the
//! host reads the two offsets that bound each large string buffer.
//!
//! Device memory is read with one copy per value into 8-byte host slots,
//! all queued on one stream ordered after the producer, then one host
//! synchronization for the whole batch. The slots are never freed while a
//! copy may still write them: a failure drains the stream first, and when
//! even the wait fails they are leaked.

use smallvec::SmallVec;

use crate::device::{drain_then_free, DeviceRef, Stream, SyncEvent};
use crate::error::Result;

/// One signed, native-endian value of `width` bytes (2, 4 or 8) to read.
#[derive(Debug, Clone, Copy)]
pub(crate) struct DeviceRead {
    pub(crate) ptr: *const u8,
    pub(crate) width: usize,
    /// Host memory although the array lives on a device (the variadic
    /// sizes buffer as Arrow C++ exports it): read directly.
    pub(crate) host: bool,
}

/// What the reads must come after.
#[derive(Clone, Copy)]
pub(crate) enum After<'s> {
    /// The producer's `sync_event` for the device: waited on the host for
    /// host-accessible memory, by a stream of ours otherwise.
    SyncEvent(&'s SyncEvent),
    /// A stream of the device already ordered after the producer.
    Stream(&'s Stream),
}

/// Reads every value of `reads`, in order.
///
/// # Safety
/// Each read's `ptr` must be valid for `width` bytes: host-accessible where
/// `host` is set or the device is host-accessible, device memory of
/// `device` otherwise.
pub(crate) unsafe fn read_values(
    device: &DeviceRef,
    after: After<'_>,
    reads: &[DeviceRead],
) -> Result<SmallVec<[i64; 4]>> {
    if reads.is_empty() {
        return Ok(SmallVec::new());
    }
    let mut values: SmallVec<[i64; 4]> = smallvec::smallvec![0i64; reads.len()];
    let host_accessible = device.is_host_accessible();
    if let (true, After::SyncEvent(sync_event)) = (host_accessible, after) {
        sync_event.wait_host(device.as_ref())?;
    }
    let on_device = |read: &DeviceRead| !(host_accessible || read.host);
    for (value, read) in values.iter_mut().zip(reads) {
        if !on_device(read) {
            // SAFETY: host-accessible for `width` bytes, per the contract;
            // `read_value` reads unaligned.
            *value = unsafe { read_value(read.ptr, read.width) };
        }
    }
    if !reads.iter().any(on_device) {
        return Ok(values);
    }
    let own_stream;
    let stream = match after {
        After::Stream(stream) => stream,
        After::SyncEvent(sync_event) => {
            own_stream = device.create_stream()?;
            sync_event.order_stream(device.as_ref(), &own_stream)?;
            &own_stream
        }
    };
    let mut slots = vec![0u8; reads.len() * 8];
    for (i, read) in reads.iter().enumerate().filter(|(_, r)| on_device(r)) {
        // SAFETY: `read.ptr` is device memory valid for `width <= 8` bytes
        // (the contract); slot `i` has 8 bytes and is not freed before the
        // copy has run (below).
        let queued = unsafe {
            device.copy_to_host(read.ptr, slots[i * 8..].as_mut_ptr(), read.width, stream)
        };
        if let Err(e) = queued {
            return Err(drain_then_free(device, stream, slots, e));
        }
    }
    if let Err(e) = device.synchronize_stream(stream) {
        // The copies' end is unknown: leak the slots, never free them
        // under the copies.
        std::mem::forget(slots);
        return Err(e);
    }
    for (i, read) in reads.iter().enumerate().filter(|(_, r)| on_device(r)) {
        // SAFETY: slot `i` holds 8 initialized bytes, written by the
        // completed copy.
        values[i] = unsafe { read_value(slots[i * 8..].as_ptr(), read.width) };
    }
    Ok(values)
}

/// Reads a signed native-endian integer of `width` bytes.
///
/// # Safety
/// `ptr` must be host-accessible for `width` bytes (no alignment needed).
unsafe fn read_value(ptr: *const u8, width: usize) -> i64 {
    // SAFETY: guaranteed by the caller; read_unaligned has no alignment needs.
    unsafe {
        match width {
            2 => std::ptr::read_unaligned(ptr.cast::<i16>()) as i64,
            4 => std::ptr::read_unaligned(ptr.cast::<i32>()) as i64,
            _ => std::ptr::read_unaligned(ptr.cast::<i64>()),
        }
    }
}

//! [`SyncEvent`]: the one owner of an array's `sync_event`, and the only
//! code that waits on one.
//!
//! Spec, "Synchronization event types": a consumer must wait on the
//! producer's event before it accesses the buffers, either by blocking the
//! host or by making its own stream wait. Which of the two, and whether a
//! wait already happened, is decided here for every path of the crate:
//! import (the batched read of sizes), `to_host`, copies between devices,
//! the CUDA Array Interface and DLPack exports, and the memory that queued
//! work writes ([`crate::array`]'s pending memory). Once the host has
//! waited, the event is complete for everyone: later host waits and stream
//! waits are skipped.
//!
//! The pointer is never dereferenced here; it is handed to the device that
//! the caller names, whose event type it must be (the constructor's
//! contract).

use std::ffi::c_void;
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::device::{Device, Stream};
use crate::error::Result;

/// A producer's `sync_event` (or NULL), and whether the host has waited on
/// it.
pub(crate) struct SyncEvent {
    ptr: *mut c_void,
    /// Set once the host has waited; set from the start for NULL.
    waited: AtomicBool,
}

// SAFETY: the pointer is only handed to the device API, which the spec lets
// any thread call; the flag is atomic.
unsafe impl Send for SyncEvent {}
// SAFETY: as above.
unsafe impl Sync for SyncEvent {}

impl SyncEvent {
    /// No event: nothing to wait for.
    pub(crate) const fn none() -> Self {
        SyncEvent {
            ptr: std::ptr::null_mut(),
            waited: AtomicBool::new(true),
        }
    }

    /// Owns the wait on `ptr`.
    ///
    /// # Safety
    /// `ptr` is NULL or points to an event of the device type that every
    /// method is later given a device of, valid while this value lives
    /// (kept so by whoever owns the event: the producer's struct, or ours).
    pub(crate) unsafe fn new(ptr: *mut c_void) -> Self {
        SyncEvent {
            ptr,
            waited: AtomicBool::new(ptr.is_null()),
        }
    }

    /// The pointer, to pass on as an exported array's `sync_event`.
    pub(crate) fn as_ptr(&self) -> *mut c_void {
        self.ptr
    }

    /// Whether there is an event at all.
    pub(crate) fn is_some(&self) -> bool {
        !self.ptr.is_null()
    }

    /// Whether work may still be pending on the data: there is an event and
    /// the host has not waited on it.
    pub(crate) fn is_pending(&self) -> bool {
        !self.waited.load(Ordering::Acquire)
    }

    /// Blocks the host until the event has completed, once: a later call,
    /// or one on an event without a pointer, returns at once.
    pub(crate) fn wait_host(&self, device: &dyn Device) -> Result<()> {
        if self.is_pending() {
            // SAFETY: an event of `device`'s type, valid while `self` lives
            // (the constructor's contract).
            unsafe { device.synchronize_sync_event(self.ptr) }?;
            self.waited.store(true, Ordering::Release);
        }
        Ok(())
    }

    /// Makes `stream` (of `device`) wait for the event before the work
    /// queued on it next; nothing once the host has waited.
    pub(crate) fn order_stream(&self, device: &dyn Device, stream: &Stream) -> Result<()> {
        if self.is_pending() {
            // SAFETY: as for `wait_host`.
            unsafe { device.stream_wait_sync_event(stream, self.ptr) }?;
        }
        Ok(())
    }

    /// Hands a still-pending event to `wait`, which makes a stream this
    /// crate does not own (a consumer's, named by a Python protocol) wait
    /// on it; `None` without calling it when nothing is pending.
    #[cfg(feature = "cuda")]
    pub(crate) fn order_foreign<R>(
        &self,
        wait: impl FnOnce(*mut c_void) -> Result<R>,
    ) -> Result<Option<R>> {
        if self.is_pending() {
            wait(self.ptr).map(Some)
        } else {
            Ok(None)
        }
    }
}

impl fmt::Debug for SyncEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SyncEvent")
            .field("ptr", &self.ptr)
            .field("pending", &self.is_pending())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::emulated::EmulatedDevice;

    #[test]
    fn the_host_waits_on_an_event_once_and_streams_skip_it_afterwards() {
        let device = EmulatedDevice::new(0, Default::default());
        let event = device.create_event().unwrap();
        let stream = device.create_stream().unwrap();
        device.record_event(&event, &stream).unwrap();
        // SAFETY: the device's own event, alive for the test.
        let sync = unsafe { SyncEvent::new(event.sync_event()) };
        assert!(sync.is_some() && sync.is_pending());
        sync.order_stream(device.as_ref(), &stream).unwrap();
        assert!(sync.is_pending(), "a stream wait leaves the host's to do");
        sync.wait_host(device.as_ref()).unwrap();
        assert!(!sync.is_pending());
        // The event is destroyed: a second wait would be refused by the
        // emulated device (it looks event pointers up in its registry, so a
        // stale one is an error, never a dereference), so it must not reach
        // it.
        drop(event);
        sync.wait_host(device.as_ref()).unwrap();
        sync.order_stream(device.as_ref(), &stream).unwrap();
    }

    #[test]
    fn no_event_is_never_pending() {
        let sync = SyncEvent::none();
        assert!(!sync.is_some() && !sync.is_pending());
        // SAFETY: NULL.
        let null = unsafe { SyncEvent::new(std::ptr::null_mut()) };
        assert!(!null.is_pending());
        null.wait_host(crate::device::cpu().as_ref()).unwrap();
    }
}

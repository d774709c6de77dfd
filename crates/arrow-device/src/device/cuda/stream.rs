//! CUDA streams and events, the handles inside [`Stream`] and [`Event`].
//!
//! An event's `sync_event` is, as the spec requires for the CUDA device
//! types ("Synchronization event types": `cudaEvent_t*`), a *pointer to* the
//! `CUevent` (the driver's and the runtime's event types are one handle). The
//! pointer lives in a heap slot the event owns, so it stays valid for as long
//! as the exported array that carries it.
//!
//! [`Stream`]: crate::device::Stream
//! [`Event`]: crate::device::Event

use std::ffi::c_void;
use std::ptr::NonNull;
use std::sync::Arc;

use cudarc::driver::result::{self as cu, stream::StreamKind};
use cudarc::driver::sys;

use super::driver::{Context, Failure};

/// A non-blocking `CUstream` of one context, destroyed on drop (the driver
/// releases it once the work queued on it has completed).
#[derive(Debug)]
pub(super) struct CudaStream {
    context: Arc<Context>,
    stream: sys::CUstream,
}

// SAFETY: a CUstream is a driver handle, usable from any thread with its
// context current (which `Context::run` ensures); this type only passes it
// to the driver.
unsafe impl Send for CudaStream {}
// SAFETY: as above; the driver serialises work submitted to one stream.
unsafe impl Sync for CudaStream {}

impl CudaStream {
    /// Creates a stream that does not synchronize with the legacy default
    /// stream: this crate's copies only order against what they wait on.
    pub(super) fn new(context: Arc<Context>) -> Result<Self, Failure> {
        let stream = context.run("cuStreamCreate", || {
            cu::stream::create(StreamKind::NonBlocking)
        })?;
        Ok(CudaStream { context, stream })
    }

    pub(super) fn context(&self) -> &Arc<Context> {
        &self.context
    }

    pub(super) fn raw(&self) -> sys::CUstream {
        self.stream
    }
}

impl Drop for CudaStream {
    fn drop(&mut self) {
        let stream = self.stream;
        // SAFETY: created in `new`, destroyed once. A failure cannot be
        // reported from a destructor.
        let _ = self
            .context
            .run("cuStreamDestroy", || unsafe { cu::stream::destroy(stream) });
    }
}

/// A `CUevent` (timing disabled: it only orders work) in a heap slot whose
/// address is the exported `sync_event`; destroyed on drop.
#[derive(Debug)]
pub(super) struct CudaEvent {
    context: Arc<Context>,
    /// From `Box::into_raw`, freed in `drop`.
    slot: NonNull<sys::CUevent>,
}

// SAFETY: the slot is written once in `new` and only read afterwards; the
// CUevent is a driver handle usable from any thread.
unsafe impl Send for CudaEvent {}
// SAFETY: as above.
unsafe impl Sync for CudaEvent {}

impl CudaEvent {
    pub(super) fn new(context: Arc<Context>) -> Result<Self, Failure> {
        let event = context.run("cuEventCreate", || {
            cu::event::create(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING)
        })?;
        let slot = NonNull::from(Box::leak(Box::new(event)));
        Ok(CudaEvent { context, slot })
    }

    pub(super) fn context(&self) -> &Arc<Context> {
        &self.context
    }

    /// The `CUevent` itself.
    pub(super) fn raw(&self) -> sys::CUevent {
        // SAFETY: the slot is a live, initialised box owned by `self`.
        unsafe { *self.slot.as_ptr() }
    }

    /// The pointer to export as `ArrowDeviceArray.sync_event` (`CUevent*`).
    pub(super) fn sync_event(&self) -> *mut c_void {
        self.slot.as_ptr().cast()
    }
}

impl Drop for CudaEvent {
    fn drop(&mut self) {
        let event = self.raw();
        // SAFETY: created in `new`, destroyed once; the driver releases an
        // event still pending once it completes. A failure cannot be
        // reported from a destructor.
        let _ = self
            .context
            .run("cuEventDestroy", || unsafe { cu::event::destroy(event) });
        // SAFETY: the slot came from `Box::leak` in `new` and is freed once,
        // here; the exported pointer is documented to die with the event.
        drop(unsafe { Box::from_raw(self.slot.as_ptr()) });
    }
}

/// Reads the `CUevent` a consumer-supplied `sync_event` points to.
///
/// # Safety
/// `sync_event` must be non-NULL and point to a `CUevent` (`cudaEvent_t`).
pub(super) unsafe fn event_at(sync_event: *mut c_void) -> sys::CUevent {
    // SAFETY: per this function's contract.
    unsafe { sync_event.cast::<sys::CUevent>().read() }
}

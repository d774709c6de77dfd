//! CUDA streams and events, the handles inside [`Stream`] and [`Event`],
//! and the handles this crate does not own: a producer's event
//! ([`RawEvent`], read from a `sync_event`) and a stream named by a Python
//! protocol ([`ProtocolStream`]). Every driver call on a stream or an event
//! is a method here, run with its context current ([`Context::run`]) and
//! failing with a message that names the call.
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

use super::driver::{self, Context, Failure};
use crate::device::StreamSync;

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

    /// The handle as the Python protocols write it (an integer, never 0,
    /// 1 or 2: those are not real streams).
    pub(super) fn protocol_handle(&self) -> u64 {
        self.stream as usize as u64
    }

    /// Queues a `cuMemcpyAsync` of `len` bytes, any direction (unified
    /// addressing infers it from the pointers); `what` names the call in
    /// errors.
    ///
    /// # Safety
    /// `src` is valid for `len` bytes of reads and `dst` for `len` bytes of
    /// writes, both until the copy has completed.
    pub(super) unsafe fn copy_async(
        &self,
        what: &str,
        src: *const u8,
        dst: *mut u8,
        len: usize,
    ) -> Result<(), Failure> {
        let stream = self.stream;
        self.context.run(what, || {
            // SAFETY: per this function's contract, on a live stream of
            // this context.
            unsafe {
                sys::cuMemcpyAsync(
                    driver::address(dst.cast()),
                    driver::address(src.cast()),
                    len,
                    stream,
                )
            }
            .result()
        })
    }

    /// Queues a `cuMemcpyPeerAsync` of `len` bytes from `src` in
    /// `src_context`'s device memory to `dst` in this stream's context's.
    ///
    /// # Safety
    /// As for [`CudaStream::copy_async`].
    pub(super) unsafe fn copy_peer_async(
        &self,
        what: &str,
        src_context: &Context,
        src: *const u8,
        dst: *mut u8,
        len: usize,
    ) -> Result<(), Failure> {
        let (stream, dst_ctx, src_ctx) = (self.stream, self.context.raw(), src_context.raw());
        self.context.run(what, || {
            // SAFETY: both ends valid per the caller; both contexts are
            // retained primary contexts; the stream is live.
            unsafe {
                sys::cuMemcpyPeerAsync(
                    driver::address(dst.cast()),
                    dst_ctx,
                    driver::address(src.cast()),
                    src_ctx,
                    len,
                    stream,
                )
            }
            .result()
        })
    }

    /// Makes the work queued on this stream from now on wait for `event`
    /// (`cuStreamWaitEvent`); the host does not wait.
    ///
    /// # Safety
    /// `event` is live until this call returns (it may belong to any
    /// context).
    pub(super) unsafe fn wait_event(&self, what: &str, event: RawEvent) -> Result<(), Failure> {
        // SAFETY: a live stream of this context; the event per the caller.
        unsafe { stream_wait_event(&self.context, what, self.stream, event) }
    }

    /// Blocks the host until the work queued on this stream has completed
    /// (`cuStreamSynchronize`).
    pub(super) fn synchronize(&self) -> Result<(), Failure> {
        let stream = self.stream;
        // SAFETY: a live stream of this context.
        self.context.run("cuStreamSynchronize", || unsafe {
            cu::stream::synchronize(stream)
        })
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

    /// The `CUevent` itself, live while `self` is.
    pub(super) fn raw(&self) -> RawEvent {
        // SAFETY: the slot is a live, initialised box owned by `self`.
        RawEvent(unsafe { *self.slot.as_ptr() })
    }

    /// Records this event on `stream` (`cuEventRecord`): it completes once
    /// the work queued there so far has.
    pub(super) fn record(&self, what: &str, stream: &CudaStream) -> Result<(), Failure> {
        let (event, stream) = (self.raw().0, stream.raw());
        // SAFETY: a live event and a live stream, both owned by their
        // handles; another context's stream is refused by the driver.
        self.context
            .run(what, || unsafe { cu::event::record(event, stream) })
    }

    /// Records this event on a stream a Python protocol named, which this
    /// crate does not own.
    ///
    /// # Safety
    /// `stream` is live (see [`ProtocolStream`]).
    pub(super) unsafe fn record_on(
        &self,
        what: &str,
        stream: ProtocolStream,
    ) -> Result<(), Failure> {
        let event = self.raw().0;
        self.context.run(what, || {
            // SAFETY: a live event of this context; the stream per the
            // caller.
            unsafe { sys::cuEventRecord(event, stream.0) }.result()
        })
    }

    /// The pointer to export as `ArrowDeviceArray.sync_event` (`CUevent*`).
    pub(super) fn sync_event(&self) -> *mut c_void {
        self.slot.as_ptr().cast()
    }
}

impl Drop for CudaEvent {
    fn drop(&mut self) {
        let event = self.raw().0;
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

/// A `CUevent` that something else owns (a producer's, read from its
/// `sync_event`, or one of ours borrowed through [`CudaEvent::raw`]): only
/// valid while its owner keeps it, which each unsafe method's caller
/// promises.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct RawEvent(sys::CUevent);

impl RawEvent {
    /// Reads the `CUevent` a `sync_event` points to (the spec's event type
    /// for the CUDA devices, `cudaEvent_t*`).
    ///
    /// # Safety
    /// `sync_event` must be non-NULL and point to a `CUevent`.
    pub(super) unsafe fn at(sync_event: *mut c_void) -> Self {
        // SAFETY: per this function's contract.
        RawEvent(unsafe { sync_event.cast::<sys::CUevent>().read() })
    }

    /// Blocks the host until the event has completed
    /// (`cuEventSynchronize`), with `context` current.
    ///
    /// # Safety
    /// The event is live until this call returns.
    pub(super) unsafe fn synchronize(self, context: &Context, what: &str) -> Result<(), Failure> {
        // SAFETY: a live event, per the caller.
        context.run(what, || unsafe { cu::event::synchronize(self.0) })
    }

    /// Whether the event has completed (`cuEventQuery`), without waiting,
    /// with `context` current.
    ///
    /// # Safety
    /// The event is live until this call returns.
    pub(super) unsafe fn query(self, context: &Context, what: &str) -> Result<bool, Failure> {
        context.run(what, || {
            // SAFETY: a live event, per the caller.
            match unsafe { sys::cuEventQuery(self.0) } {
                sys::CUresult::CUDA_SUCCESS => Ok(true),
                sys::CUresult::CUDA_ERROR_NOT_READY => Ok(false),
                other => other.result().map(|()| false),
            }
        })
    }
}

/// `CU_STREAM_LEGACY` and `CU_STREAM_PER_THREAD` (cuda.h defines them as
/// these pointer values).
const CU_STREAM_LEGACY: usize = 0x1;
const CU_STREAM_PER_THREAD: usize = 0x2;

/// A `CUstream` that a Python protocol named ([`StreamSync`]): a
/// producer's or a consumer's, which this crate does not own. 1 and 2 are
/// `CU_STREAM_LEGACY` and `CU_STREAM_PER_THREAD`, which the driver resolves
/// against the current context; other numbers are handles, which must be
/// live streams of that context (the driver refuses another context's).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct ProtocolStream(sys::CUstream);

impl ProtocolStream {
    /// The stream `stream` names; `None` for no synchronization.
    pub(super) fn named(stream: StreamSync) -> Option<Self> {
        let handle = match stream {
            StreamSync::None => return None,
            StreamSync::Legacy => CU_STREAM_LEGACY,
            StreamSync::PerThread => CU_STREAM_PER_THREAD,
            // A handle is an address; the protocols pass it as an integer.
            StreamSync::Handle(handle) => handle as usize,
        };
        Some(ProtocolStream(handle as sys::CUstream))
    }

    /// Makes the work queued on this stream from now on wait for `event`
    /// (`cuStreamWaitEvent`), with `context` current; the host does not
    /// wait.
    ///
    /// # Safety
    /// The stream is live (a stream of `context`, or 1 or 2), and so is
    /// `event` until this call returns.
    pub(super) unsafe fn wait_event(
        self,
        context: &Context,
        what: &str,
        event: RawEvent,
    ) -> Result<(), Failure> {
        // SAFETY: per the caller.
        unsafe { stream_wait_event(context, what, self.0, event) }
    }
}

/// `cuStreamWaitEvent(stream, event)` with `context` current: the one call
/// behind both kinds of stream's `wait_event`.
///
/// # Safety
/// `stream` is live (a stream of `context`, or 1 or 2) and so is `event`
/// until this call returns.
unsafe fn stream_wait_event(
    context: &Context,
    what: &str,
    stream: sys::CUstream,
    event: RawEvent,
) -> Result<(), Failure> {
    context.run(what, || {
        // SAFETY: per this function's contract.
        unsafe { sys::cuStreamWaitEvent(stream, event.0, 0) }.result()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn protocol_stream_numbers_map_to_the_driver_handles() {
        let raw = |stream| ProtocolStream::named(stream).map(|s| s.0);
        assert_eq!(raw(StreamSync::None), None);
        assert_eq!(raw(StreamSync::Legacy), Some(0x1 as sys::CUstream));
        assert_eq!(raw(StreamSync::PerThread), Some(0x2 as sys::CUstream));
        assert_eq!(
            raw(StreamSync::Handle(0x7f00_dead_b000)),
            Some(0x7f00_dead_b000_usize as sys::CUstream)
        );
    }
}

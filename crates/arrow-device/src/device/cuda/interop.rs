//! Streams named by the Python protocols: the integers that the CUDA Array
//! Interface's `stream` entry and DLPack's `stream` argument carry
//! ([`StreamSync`]), and how a [`CudaDevice`] orders work against them.
//!
//! * Import (a foreign producer's memory): an event is recorded on the
//!   producer's stream and becomes the imported array's `sync_event`
//!   ([`CudaDevice::order_after_stream`]), so the host never blocks at
//!   import and every later use waits exactly for the producer's work.
//! * DLPack export (`__dlpack__(stream=s)`): the consumer's stream `s` is
//!   made to wait on the array's `sync_event` ([`CudaDevice::make_stream_wait`]).
//! * CUDA Array Interface export: the dict must name a stream the consumer
//!   can wait on. It is this device's interface stream (created once, alive
//!   for the process, so the handle never dangles), made to wait on the
//!   array's event; `None` when the event has already completed
//!   ([`CudaDevice::stream_after`]).
//! * DLPack import: the stream handed to a producer's `__dlpack__` is the
//!   interface stream too ([`CudaDevice::interface_stream`]).
//!
//! Stream numbers 1 and 2 are `CU_STREAM_LEGACY` and `CU_STREAM_PER_THREAD`,
//! which the driver resolves against the current context: this device's
//! primary context, the one the CUDA runtime (PyTorch, CuPy, Numba) uses.
//! Other numbers are `CUstream` handles, which must belong to that context
//! as well (the driver refuses a stream of another context).

use std::ffi::c_void;
use std::sync::Arc;

use cudarc::driver::sys;

use super::stream::{event_at, CudaEvent, CudaStream};
use super::CudaDevice;
use crate::array::DeviceArray;
use crate::device::StreamSync;
use crate::error::Result;

/// `CU_STREAM_LEGACY` and `CU_STREAM_PER_THREAD` (cuda.h defines them as
/// these pointer values).
const CU_STREAM_LEGACY: usize = 0x1;
const CU_STREAM_PER_THREAD: usize = 0x2;

/// The `CUstream` a protocol's stream names; `None` for no synchronization.
pub(super) fn raw_stream(stream: StreamSync) -> Option<sys::CUstream> {
    let handle = match stream {
        StreamSync::None => return None,
        StreamSync::Legacy => CU_STREAM_LEGACY,
        StreamSync::PerThread => CU_STREAM_PER_THREAD,
        // A handle is an address; the protocols pass it as an integer.
        StreamSync::Handle(handle) => handle as usize,
    };
    Some(handle as sys::CUstream)
}

impl CudaDevice {
    /// Records a new event on `stream` (a raw `CUstream` of this device's
    /// context): it completes once the work queued there so far has.
    ///
    /// # Safety
    /// `stream` is a live stream of this context, or a special handle.
    pub(super) unsafe fn record_on(&self, stream: sys::CUstream, what: &str) -> Result<CudaEvent> {
        let event = CudaEvent::new(Arc::clone(&self.context)).map_err(|e| self.error(e))?;
        let raw = event.raw();
        self.run(what, || {
            // SAFETY: a live event of this context; the stream per the
            // caller.
            unsafe { sys::cuEventRecord(raw, stream) }.result()
        })?;
        Ok(event)
    }

    /// Makes `stream` wait for `event`.
    ///
    /// # Safety
    /// `stream` as for [`CudaDevice::record_on`]; `event` a live event.
    pub(super) unsafe fn wait_on(
        &self,
        stream: sys::CUstream,
        event: sys::CUevent,
        what: &str,
    ) -> Result<()> {
        self.run(what, || {
            // SAFETY: per the caller.
            unsafe { sys::cuStreamWaitEvent(stream, event, 0) }.result()
        })
    }

    /// `array` (this device's memory, handed over by a foreign producer
    /// with `stream`: a CUDA Array Interface `stream` entry, or the stream
    /// given to a DLPack producer) ordered after the work queued on
    /// `stream` so far: an event recorded there becomes the result's
    /// `sync_event`, owned by the result. [`StreamSync::None`] returns the
    /// array as it is. The host does not wait.
    ///
    /// # Safety
    /// `stream` names a live stream of this device's context (1 and 2 name
    /// the default streams and are always valid).
    pub unsafe fn order_after_stream(
        &self,
        array: &DeviceArray,
        stream: StreamSync,
    ) -> Result<DeviceArray> {
        let Some(raw) = raw_stream(stream) else {
            return Ok(array.clone());
        };
        // SAFETY: per this function's contract.
        let event = unsafe { self.record_on(raw, "cuEventRecord on the producer's stream") }?;
        let sync_event = event.sync_event();
        // SAFETY: a CUevent* of this device type, kept valid by `event`,
        // which the result keeps.
        unsafe { array.ordered_after(sync_event, Arc::new(event)) }
    }

    /// Makes a consumer's `stream` (DLPack's `__dlpack__(stream=...)`) wait
    /// for a producer's `sync_event` before the work it queues next; the
    /// host does not wait. NULL or [`StreamSync::None`] does nothing.
    ///
    /// # Safety
    /// `stream` as for [`CudaDevice::order_after_stream`]; `sync_event`
    /// NULL or a live `CUevent*`.
    pub unsafe fn make_stream_wait(
        &self,
        stream: StreamSync,
        sync_event: *mut c_void,
    ) -> Result<()> {
        let Some(raw) = raw_stream(stream) else {
            return Ok(());
        };
        if sync_event.is_null() {
            return Ok(());
        }
        // SAFETY: per this function's contract.
        unsafe {
            self.wait_on(
                raw,
                event_at(sync_event),
                "cuStreamWaitEvent on the consumer's stream",
            )
        }
    }

    /// This device's interface stream: a non-blocking stream created on
    /// first use and alive for the rest of the process, which this crate
    /// names to the other side of a Python protocol (a CUDA Array
    /// Interface `stream` entry, DLPack's `stream` argument). Its handle as
    /// the protocols write it.
    pub fn interface_stream(&self) -> Result<u64> {
        let stream = match self.interface.get() {
            Some(stream) => stream,
            None => {
                let created =
                    CudaStream::new(Arc::clone(&self.context)).map_err(|e| self.error(e))?;
                // Another thread may have won the race: its stream is kept
                // and ours is destroyed.
                self.interface.get_or_init(|| created)
            }
        };
        Ok(stream.raw() as usize as u64)
    }

    /// For a CUDA Array Interface export: `None` when `sync_event` (an
    /// array's) is NULL or has completed, so no work is pending (spec v3:
    /// "If there is no work enqueued on the data, then the stream entry may
    /// be either None, or not provided"); otherwise the
    /// [interface stream](CudaDevice::interface_stream), made to wait on the
    /// event, for the consumer to synchronize on. Never 0.
    ///
    /// # Safety
    /// `sync_event` is NULL or a live `CUevent*`.
    pub unsafe fn stream_after(&self, sync_event: *mut c_void) -> Result<Option<u64>> {
        if sync_event.is_null() {
            return Ok(None);
        }
        // SAFETY: per this function's contract.
        let event = unsafe { event_at(sync_event) };
        let done = self.run("cuEventQuery", || {
            // SAFETY: a live event.
            match unsafe { sys::cuEventQuery(event) } {
                sys::CUresult::CUDA_SUCCESS => Ok(true),
                sys::CUresult::CUDA_ERROR_NOT_READY => Ok(false),
                other => other.result().map(|()| false),
            }
        })?;
        if done {
            return Ok(None);
        }
        let handle = self.interface_stream()?;
        let raw = raw_stream(StreamSync::Handle(handle)).unwrap_or(std::ptr::null_mut());
        // SAFETY: the interface stream lives for the process; the event is
        // live per the caller.
        unsafe { self.wait_on(raw, event, "cuStreamWaitEvent on the interface stream") }?;
        Ok(Some(handle))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn protocol_stream_numbers_map_to_the_driver_handles() {
        assert_eq!(raw_stream(StreamSync::None), None);
        assert_eq!(raw_stream(StreamSync::Legacy), Some(0x1 as sys::CUstream));
        assert_eq!(
            raw_stream(StreamSync::PerThread),
            Some(0x2 as sys::CUstream)
        );
        assert_eq!(
            raw_stream(StreamSync::Handle(0x7f00_dead_b000)),
            Some(0x7f00_dead_b000_usize as sys::CUstream)
        );
    }
}

//! The narrow interface of a [`CudaDevice`] that the Python protocol
//! adapters use (the CUDA Array Interface's `arrow_device::cai::cuda`, and
//! DLPack): ordering work against the streams the protocols name
//! ([`StreamSync`]) and the bitmap conversions the CUDA Array Interface
//! needs. Every method is one rule, over the driver calls of `stream.rs`
//! and `kernels.rs`; none takes or returns an array.
//!
//! * Import (a foreign producer's memory): an event is recorded on the
//!   producer's stream ([`CudaDevice::record_on_protocol_stream`]) and
//!   becomes the imported array's `sync_event`, so the host never blocks at
//!   import and every later use waits exactly for the producer's work. A
//!   conversion queued on a stream of ours waits the same way
//!   ([`CudaDevice::stream_wait_protocol_stream`]).
//! * DLPack export (`__dlpack__(stream=s)`): the consumer's stream `s` is
//!   made to wait on the array's `sync_event` ([`CudaDevice::make_stream_wait`]).
//! * CUDA Array Interface export: the dict must name a stream the consumer
//!   can wait on. It is this device's interface stream (created once, alive
//!   for the process, so the handle never dangles), made to wait on the
//!   array's event; `None` when the event has already completed
//!   ([`CudaDevice::stream_after`]).
//! * DLPack import: the stream handed to a producer's `__dlpack__` is the
//!   interface stream too ([`CudaDevice::interface_stream`]).
//! * Masks and `|b1` values: [`CudaDevice::pack_bits`] and
//!   [`CudaDevice::unpack_bits`] queue the kernels on a stream of ours.
//!
//! Stream numbers 1 and 2 are `CU_STREAM_LEGACY` and `CU_STREAM_PER_THREAD`,
//! which the driver resolves against the current context: this device's
//! primary context, the one the CUDA runtime (PyTorch, CuPy, Numba) uses.
//! Other numbers are `CUstream` handles, which must belong to that context
//! as well (the driver refuses a stream of another context).

use std::ffi::c_void;
use std::sync::Arc;

use super::kernels;
use super::stream::{CudaEvent, CudaStream, ProtocolStream, RawEvent};
use super::CudaDevice;
use crate::device::{Event, Stream, StreamSync};
use crate::error::Result;

impl CudaDevice {
    /// Records a new event on `stream` (`cuEventRecord`), a stream a
    /// foreign producer named: a CUDA Array Interface `stream` entry, or
    /// the stream given to a DLPack producer. The event completes once the
    /// work queued there so far has; its [`Event::sync_event`] is a
    /// `CUevent*` of this device's type. The caller owns the event (and
    /// keeps it alive for as long as anyone may wait on the pointer: make
    /// it the owner of the array it orders). `None` for
    /// [`StreamSync::None`]: nothing to wait for. The host does not wait.
    ///
    /// # Safety
    /// `stream` names a live stream of this device's context (1 and 2 name
    /// the default streams and are always valid).
    pub unsafe fn record_on_protocol_stream(&self, stream: StreamSync) -> Result<Option<Event>> {
        let Some(producer) = ProtocolStream::named(stream) else {
            return Ok(None);
        };
        // SAFETY: per this function's contract.
        let event = unsafe { self.record_on(producer, "cuEventRecord on the producer's stream") }?;
        let sync_event = event.sync_event();
        // SAFETY: a `CUevent*` into the boxed event, which the handle keeps.
        Ok(Some(unsafe { Event::new(Box::new(event), sync_event) }))
    }

    /// Makes `stream` (one of this device's, from
    /// [`create_stream`](crate::device::Device::create_stream)) wait for the
    /// work queued so far on `producer`, a stream a foreign producer named,
    /// before the work queued on `stream` next: an event is recorded on
    /// `producer` (`cuEventRecord`) and waited on (`cuStreamWaitEvent`). The
    /// event is the driver's to keep until it completes; the host does not
    /// wait. [`StreamSync::None`] does nothing.
    ///
    /// # Safety
    /// `producer` as for [`CudaDevice::record_on_protocol_stream`].
    pub unsafe fn stream_wait_protocol_stream(
        &self,
        stream: &Stream,
        producer: StreamSync,
    ) -> Result<()> {
        let ours = self.stream(stream, "stream_wait_protocol_stream")?;
        let Some(producer) = ProtocolStream::named(producer) else {
            return Ok(());
        };
        // SAFETY: per this function's contract.
        let event = unsafe { self.record_on(producer, "cuEventRecord on the producer's stream") }?;
        // SAFETY: `event` lives until this function returns; the wait takes
        // the event's state at the call, so destroying it then is allowed.
        unsafe { ours.wait_event("cuStreamWaitEvent", event.raw()) }.map_err(|e| self.error(e))
    }

    /// Makes a consumer's `stream` (DLPack's `__dlpack__(stream=...)`) wait
    /// for a producer's `sync_event` before the work it queues next; the
    /// host does not wait. NULL or [`StreamSync::None`] does nothing.
    ///
    /// # Safety
    /// `stream` as for [`CudaDevice::record_on_protocol_stream`];
    /// `sync_event` NULL or a live `CUevent*`.
    pub unsafe fn make_stream_wait(
        &self,
        stream: StreamSync,
        sync_event: *mut c_void,
    ) -> Result<()> {
        let Some(consumer) = ProtocolStream::named(stream) else {
            return Ok(());
        };
        if sync_event.is_null() {
            return Ok(());
        }
        // SAFETY: per this function's contract.
        unsafe {
            let event = RawEvent::at(sync_event);
            consumer.wait_event(
                &self.context,
                "cuStreamWaitEvent on the consumer's stream",
                event,
            )
        }
        .map_err(|e| self.error(e))
    }

    /// This device's interface stream: a non-blocking stream created on
    /// first use and alive for the rest of the process, which this crate
    /// names to the other side of a Python protocol (a CUDA Array
    /// Interface `stream` entry, DLPack's `stream` argument). Its handle as
    /// the protocols write it.
    pub fn interface_stream(&self) -> Result<u64> {
        self.interface().map(CudaStream::protocol_handle)
    }

    /// The interface stream itself.
    fn interface(&self) -> Result<&CudaStream> {
        if let Some(stream) = self.interface.get() {
            return Ok(stream);
        }
        let created = CudaStream::new(Arc::clone(&self.context)).map_err(|e| self.error(e))?;
        // Another thread may have won the race: its stream is kept and ours
        // is destroyed.
        Ok(self.interface.get_or_init(|| created))
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
        let event = unsafe { RawEvent::at(sync_event) };
        // SAFETY: a live event, per the caller.
        let done =
            unsafe { event.query(&self.context, "cuEventQuery") }.map_err(|e| self.error(e))?;
        if done {
            return Ok(None);
        }
        let interface = self.interface()?;
        // SAFETY: a live event, per the caller.
        unsafe { interface.wait_event("cuStreamWaitEvent on the interface stream", event) }
            .map_err(|e| self.error(e))?;
        Ok(Some(interface.protocol_handle()))
    }

    /// Queues the packing of `len` bytes at `src` (one per value, non-zero
    /// = set: a CUDA Array Interface `|b1` array or mask) into an Arrow
    /// bitmap at `dst` (`(len + 7) / 8` bytes, LSB first, the bits past
    /// `len` zero) on `stream`, a stream of this device. `len == 0` queues
    /// nothing. The caller owns both buffers and orders every use of `dst`
    /// after the kernel (an event recorded on `stream`).
    ///
    /// Errors: the kernels failed to load on this GPU (a driver older than
    /// CUDA 11.0), or the launch failed.
    ///
    /// # Safety
    /// `src` (`len` bytes) and `dst` (`(len + 7) / 8` bytes) are memory this
    /// GPU reads and writes at that address (device or managed memory, or
    /// pinned host memory), do not overlap, and stay valid, `dst` otherwise
    /// unused, until the work queued on `stream` has run.
    pub unsafe fn pack_bits(
        &self,
        src: *const u8,
        len: usize,
        dst: *mut u8,
        stream: &Stream,
    ) -> Result<()> {
        let stream = self.stream(stream, "pack_bits")?;
        // SAFETY: per this function's contract.
        unsafe { kernels::pack_bits(src, len, dst, stream) }.map_err(|e| self.error(e))
    }

    /// Queues the unpacking of `len` bits of the Arrow bitmap at `bitmap`,
    /// from bit `bit_offset` (an array's `offset`), into one byte per value
    /// (1 where the bit is set, 0 where not: a CUDA Array Interface mask)
    /// at `dst`, on `stream`, a stream of this device. `len == 0` queues
    /// nothing. Ownership and errors as for [`CudaDevice::pack_bits`].
    ///
    /// # Safety
    /// `bitmap` (`(bit_offset + len + 7) / 8` bytes) and `dst` (`len`
    /// bytes) are memory this GPU reads and writes at that address, do not
    /// overlap, and stay valid, `dst` otherwise unused, until the work
    /// queued on `stream` has run.
    pub unsafe fn unpack_bits(
        &self,
        bitmap: *const u8,
        bit_offset: usize,
        len: usize,
        dst: *mut u8,
        stream: &Stream,
    ) -> Result<()> {
        let stream = self.stream(stream, "unpack_bits")?;
        // SAFETY: per this function's contract.
        unsafe { kernels::unpack_bits(bitmap, bit_offset, len, dst, stream) }
            .map_err(|e| self.error(e))
    }

    /// A new event of this device, recorded on `stream`.
    ///
    /// # Safety
    /// `stream` is live (a stream of this context, or 1 or 2).
    unsafe fn record_on(&self, stream: ProtocolStream, what: &str) -> Result<CudaEvent> {
        let event = CudaEvent::new(Arc::clone(&self.context)).map_err(|e| self.error(e))?;
        // SAFETY: per this function's contract.
        unsafe { event.record_on(what, stream) }.map_err(|e| self.error(e))?;
        Ok(event)
    }
}

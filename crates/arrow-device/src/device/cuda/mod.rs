//! The CUDA devices (feature `cuda`): `CUDA` (device memory), `CUDA_HOST`
//! (pinned host memory) and `CUDA_MANAGED` (managed memory), through the CUDA
//! driver API, which cudarc loads at run time.
//!
//! A build with this feature runs on machines without a GPU: [`is_available`]
//! is then false and [`device`] returns an error naming `libcuda`; imports of
//! `CUDA_HOST` and `CUDA_MANAGED` arrays still read them zero-copy through
//! [`HostAccessibleDevice`](crate::device::host::HostAccessibleDevice).
//!
//! Device ids are GPU ordinals. Each GPU's primary context is retained once
//! and made current around every driver call, on whatever thread makes it,
//! so callers need no CUDA setup of their own. [`device`] registers what it
//! returns with [`crate::device::register`], and [`crate::device::lookup`]
//! calls it for CUDA device types, so importing a CUDA array finds it.
//!
//! Events follow the spec's "Synchronization event types": an exported
//! array's `sync_event` is a `CUevent*` (`cudaEvent_t*`), and a consumer's
//! `sync_event` is read the same way. Copies are queued with `cuMemcpyAsync`
//! (unified addressing infers the direction) on a non-blocking stream of
//! ours. A copy from pageable host memory returns once the driver has staged
//! the source, and the host sources are released as soon as the copy has run
//! (`cuLaunchHostFunc`, see `release.rs`); a copy to pageable host memory
//! returns once it has completed. The driver stages pageable memory itself;
//! staging through pinned buffers of our own is not done (see the README's
//! GPU section: `scripts/gpu-check.sh` measures both against raw
//! `cuMemcpy`).
//!
//! Tested without a GPU: CI runs this module's unit tests, the GPU suites
//! (`tests/cuda_gpu.rs`, `tests/cuda_interop_gpu.rs`), fault injection
//! (`tests/cuda_faults.rs`), the CLI and the Python package against
//! `crates/cuda-standin`, a strict stand-in for `libcuda.so` that cudarc
//! loads through `LD_LIBRARY_PATH` (device memory the host cannot touch,
//! delayed streams, contexts, events, host functions and the kernels run on
//! the host). Speed and the GPU itself are checked on hardware by
//! `scripts/gpu-check.sh`.
//!
//! Layers, as in cudarc (`sys` → `result` → safe types): every driver call
//! is a small function of the bottom files (`driver.rs`: loading `libcuda`,
//! contexts, the unwind guard; `stream.rs`: streams and events, ours and
//! the protocols'; `memory.rs`; `kernels.rs`; `release.rs`), run with its
//! context current and failing with a message that names the call. This
//! file (the [`Device`] implementation) and `interop.rs` only combine them
//! and name the device in errors; none of them knows the crate's arrays.
//!
//! The Python protocols: the CUDA Array Interface adapter
//! (`arrow_device::cai::cuda`: its `stream`, masks and `|b1` values
//! converted by kernels on the GPU) and DLPack use the narrow interface of
//! [`CudaDevice`] in `interop.rs`: ordering against the streams the
//! protocols name ([`CudaDevice::record_on_protocol_stream`],
//! [`CudaDevice::stream_wait_protocol_stream`],
//! [`CudaDevice::make_stream_wait`], [`CudaDevice::stream_after`],
//! [`CudaDevice::interface_stream`]) and the bitmap kernels
//! ([`CudaDevice::pack_bits`], [`CudaDevice::unpack_bits`]).
//!
//! ```
//! use arrow_array::{Array, Int32Array};
//! use arrow_device::device::cuda;
//! use arrow_device::{export_array_to, DeviceArray, DeviceType, ValidationLevel};
//!
//! let gpu = match cuda::device(DeviceType::CUDA, 0) {
//!     Ok(gpu) => gpu,
//!     Err(e) => {
//!         // No driver, or no GPU: the message says which.
//!         println!("skipping: {e}");
//!         return;
//!     }
//! };
//! let ints = Int32Array::from(vec![1, 2, 3]);
//! let (array, schema) = export_array_to(&ints, &gpu).unwrap();
//! assert_eq!(array.device_type, DeviceType::CUDA);
//! assert!(!array.sync_event.is_null()); // a CUevent* recorded after the copies
//! // SAFETY: the structs come from this crate's exporter.
//! let imported = unsafe { DeviceArray::try_new(array, schema, ValidationLevel::Default) }.unwrap();
//! assert_eq!(imported.to_host().unwrap().as_ref(), &ints as &dyn Array);
//! ```

mod driver;
mod interop;
pub(crate) mod ipc;
mod kernels;
mod memory;
mod release;
mod stream;

use std::any::Any;
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use self::driver::Context;
use self::memory::Allocation;
pub use self::memory::{MemoryKind, PointerMemoryType};
use self::stream::{CudaEvent, CudaStream, RawEvent};
use crate::abi::DeviceType;
use crate::device::cpu::ALIGNMENT;
use crate::device::{self as devices, Device, DeviceBuffer, DeviceRef, Event, Stream};
use crate::error::{Error, Result};

/// Whether `libcuda` can be loaded, `cuInit` succeeds and there is at least
/// one GPU. Never panics.
pub fn is_available() -> bool {
    matches!(driver::driver(), Ok(count) if count > 0)
}

/// Whether the CUDA driver library (`libcuda`) can be loaded at all,
/// whether or not a GPU is present.
pub fn is_driver_present() -> bool {
    driver::library_present()
}

/// The number of GPUs the driver reports (after `CUDA_VISIBLE_DEVICES`).
pub fn device_count() -> Result<usize> {
    driver::driver()
        .map(|count| usize::try_from(count).unwrap_or(0))
        .map_err(|e| Error::NotSupported(e.to_string()))
}

/// The devices made so far, by memory kind and GPU ordinal.
type Devices = HashMap<(MemoryKind, i32), Arc<CudaDevice>>;

/// The device for `device_type` (`CUDA`, `CUDA_HOST` or `CUDA_MANAGED`) on
/// GPU `ordinal`: created (and registered with [`crate::device::register`])
/// on first use, the same handle afterwards.
///
/// Errors: [`Error::NotSupported`] for another device type or when the
/// driver library is missing (the message names `libcuda`);
/// [`Error::Device`] when `cuInit` fails or there is no GPU `ordinal`.
pub fn device(device_type: DeviceType, ordinal: i64) -> Result<DeviceRef> {
    let kind = MemoryKind::from_device_type(device_type).ok_or_else(|| {
        Error::NotSupported(format!(
            "device type {device_type} is not a CUDA memory type \
             (expected CUDA, CUDA_HOST or CUDA_MANAGED)"
        ))
    })?;
    let count = match driver::driver() {
        Ok(count) => count,
        Err(e) if !driver::library_present() => return Err(Error::NotSupported(e.to_string())),
        Err(e) => return Err(Error::device(device_type, ordinal, e)),
    };
    let index = i32::try_from(ordinal)
        .ok()
        .filter(|o| (0..count).contains(o))
        .ok_or_else(|| {
            Error::device(
                device_type,
                ordinal,
                if count == 0 {
                    "no such GPU: the driver reports no GPU".to_string()
                } else {
                    format!(
                        "no such GPU: the driver reports {count} device(s), ordinals 0 to {}",
                        count - 1
                    )
                },
            )
        })?;
    static DEVICES: OnceLock<Mutex<Devices>> = OnceLock::new();
    // Inserts are single statements: a poisoned lock still holds a valid map.
    let mut devices = DEVICES
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    if let Some(device) = devices.get(&(kind, index)) {
        return Ok(Arc::clone(device) as DeviceRef);
    }
    let context = driver::context(index).map_err(|e| Error::device(device_type, ordinal, e))?;
    let device = Arc::new(CudaDevice {
        kind,
        context,
        host_synchronizations: AtomicU64::new(0),
        interface: OnceLock::new(),
    });
    devices.insert((kind, index), Arc::clone(&device));
    devices::register(Arc::clone(&device) as DeviceRef);
    Ok(device as DeviceRef)
}

/// For [`crate::device::lookup`]: the CUDA device for the pair, if the
/// driver works and the id is a GPU; `None` otherwise (the caller falls back
/// to host access where the memory type allows it).
pub(crate) fn lookup(device_type: DeviceType, device_id: i64) -> Option<DeviceRef> {
    if MemoryKind::from_device_type(device_type).is_none() || !is_available() {
        return None;
    }
    device(device_type, device_id).ok()
}

/// Classifies `ptr` with `cuPointerGetAttributes`: device, pinned host or
/// managed memory and the GPU it belongs to, or memory CUDA does not know
/// (ordinary host memory). For importers of foreign pointers (CUDA Array
/// Interface, DLPack) that must pick a device type.
pub fn pointer_memory_type(ptr: *const c_void) -> Result<PointerMemoryType> {
    let count = driver::driver().map_err(|e| Error::NotSupported(e.to_string()))?;
    if count == 0 {
        return Err(Error::NotSupported(
            "cannot classify a pointer: the CUDA driver reports no GPU".into(),
        ));
    }
    // Any context serves: unified addressing spans all of them.
    let context = driver::context(0).map_err(|e| Error::device(DeviceType::CUDA, 0, e))?;
    memory::classify(&context, ptr).map_err(|e| Error::device(DeviceType::CUDA, 0, e))
}

/// One kind of CUDA memory on one GPU: the [`Device`] implementation
/// returned by [`device`].
pub struct CudaDevice {
    kind: MemoryKind,
    context: Arc<Context>,
    host_synchronizations: AtomicU64,
    /// Created on first use by [`CudaDevice::interface_stream`].
    interface: OnceLock<CudaStream>,
}

impl std::fmt::Debug for CudaDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaDevice")
            .field("device_type", &self.kind.device_type())
            .field("ordinal", &self.context.ordinal())
            .finish()
    }
}

impl CudaDevice {
    /// The CUDA device behind a [`Device`] handle (a [`DeviceRef`] from
    /// [`device`] or [`crate::device::lookup`]), or `None` for any other
    /// implementation.
    pub fn of(device: &dyn Device) -> Option<&CudaDevice> {
        device.as_any().downcast_ref::<CudaDevice>()
    }

    /// As [`CudaDevice::of`], for callers that need one:
    /// [`Error::NotSupported`] naming the device otherwise.
    pub fn require(device: &dyn Device) -> Result<&CudaDevice> {
        CudaDevice::of(device).ok_or_else(|| {
            Error::NotSupported(format!(
                "device type {} id {} is not a CUDA device of this crate",
                device.device_type(),
                device.device_id()
            ))
        })
    }

    /// The kind of memory this device allocates.
    pub fn memory_kind(&self) -> MemoryKind {
        self.kind
    }

    /// How often this device has blocked the host so far
    /// (`synchronize_stream`, and `synchronize_sync_event` with an event):
    /// a diagnostic for tests and profiling.
    pub fn host_synchronizations(&self) -> u64 {
        self.host_synchronizations.load(Ordering::Relaxed)
    }

    fn error(&self, message: impl Into<String>) -> Error {
        Error::device(self.kind.device_type(), self.device_id(), message.into())
    }

    fn stream<'s>(&self, stream: &'s Stream, call: &str) -> Result<&'s CudaStream> {
        let found = stream.handle::<CudaStream>().ok_or_else(|| {
            self.error(format!(
                "{call}: the stream was not created by a CUDA device"
            ))
        })?;
        self.same_gpu(found.context(), call, "stream")?;
        Ok(found)
    }

    fn same_gpu(&self, context: &Context, call: &str, what: &str) -> Result<()> {
        if context.ordinal() == self.context.ordinal() {
            Ok(())
        } else {
            Err(self.error(format!(
                "{call}: the {what} belongs to GPU {}, expected GPU {}",
                context.ordinal(),
                self.context.ordinal()
            )))
        }
    }

    /// Queues a `cuMemcpyAsync` of `len` bytes (any direction).
    ///
    /// # Safety
    /// Both ends valid for `len` bytes until the copy has completed.
    unsafe fn copy(
        &self,
        what: &str,
        src: *const u8,
        dst: *mut u8,
        len: usize,
        stream: &Stream,
    ) -> Result<()> {
        if len == 0 {
            return Ok(());
        }
        ipc::check_exporter_alive(src, len)
            .and_then(|()| ipc::check_exporter_alive(dst, len))
            .map_err(|e| self.error(format!("{what}: {e}")))?;
        let stream = self.stream(stream, what)?;
        // SAFETY: per this function's contract.
        unsafe { stream.copy_async(what, src, dst, len) }.map_err(|e| self.error(e))
    }
}

// SAFETY: every method is the CUDA driver call of the same meaning on this
// device's retained primary context (allocations checked for alignment,
// `CUevent*` as the event type, `cuLaunchHostFunc` for `release_after`),
// and driver failures are returned as errors.
unsafe impl Device for CudaDevice {
    fn device_type(&self) -> DeviceType {
        self.kind.device_type()
    }

    fn device_id(&self) -> i64 {
        self.context.ordinal().into()
    }

    fn is_host_accessible(&self) -> bool {
        self.kind.is_host_accessible()
    }

    /// Pinned and managed memory are host-accessible. For device memory the
    /// driver classifies the pointer: the variadic-sizes buffer of a view
    /// array exported by Arrow C++ or this crate is ordinary host memory.
    fn is_host_accessible_at(&self, ptr: *const u8, len: usize) -> bool {
        if len == 0 || self.kind.is_host_accessible() {
            return true;
        }
        memory::classify(&self.context, ptr.cast()).is_ok_and(|t| t.is_host_accessible())
    }

    /// `cuMemGetAddressRange`: the range must lie in the allocation that
    /// holds `ptr`, or run on through allocations contiguous with it (memory
    /// mapped with `cuMemMap` is described one mapping at a time). A pointer
    /// the driver cannot describe, and any failure to ask, is "cannot tell":
    /// `Ok`. Copies only ask this of `CUDA` (device) memory: pinned and
    /// managed arrays are read by the host directly.
    fn check_device_range(&self, ptr: *const u8, len: usize) -> Result<()> {
        if len == 0 {
            return Ok(());
        }
        memory::check_range(ptr as usize, len, |addr| {
            memory::address_range(&self.context, addr)
        })
        .map_err(|e| self.error(format!("check_device_range: device pointer {e}")))
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    /// CUDA allocations are aligned to at least 256 bytes (checked); a
    /// zero-length request allocates one byte, so the pointer is real.
    fn allocate(&self, len: usize) -> Result<DeviceBuffer> {
        let allocation = Allocation::new(Arc::clone(&self.context), self.kind, len.max(1))
            .map_err(|e| self.error(e))?;
        let ptr = allocation.ptr();
        if ptr as usize % ALIGNMENT != 0 {
            return Err(self.error(format!(
                "the driver returned {ptr:p}, not aligned to {ALIGNMENT} bytes"
            )));
        }
        // SAFETY: `allocation` owns at least `len` bytes at `ptr` and frees
        // them on drop.
        Ok(unsafe { DeviceBuffer::new(ptr, len, Box::new(allocation)) })
    }

    /// Pinned host memory (`cuMemHostAlloc`, portable): the variadic-sizes
    /// buffer of an exported view array is readable by the consumer's host
    /// code (as Arrow C++ expects) and by kernels on any GPU.
    fn allocate_host_accessible(&self, len: usize) -> Option<DeviceBuffer> {
        let allocation =
            Allocation::new(Arc::clone(&self.context), MemoryKind::Pinned, len.max(1)).ok()?;
        let ptr = allocation.ptr();
        // SAFETY: `allocation` owns at least `len` bytes of pinned host
        // memory at `ptr` and frees them on drop.
        Some(unsafe { DeviceBuffer::new(ptr, len, Box::new(allocation)) })
    }

    fn create_stream(&self) -> Result<Stream> {
        let stream = CudaStream::new(Arc::clone(&self.context)).map_err(|e| self.error(e))?;
        Ok(Stream::new(Box::new(stream)))
    }

    fn create_event(&self) -> Result<Event> {
        let event = CudaEvent::new(Arc::clone(&self.context)).map_err(|e| self.error(e))?;
        let sync_event = event.sync_event();
        // SAFETY: a `CUevent*` into the boxed event, which the handle keeps.
        Ok(unsafe { Event::new(Box::new(event), sync_event) })
    }

    fn record_event(&self, event: &Event, stream: &Stream) -> Result<()> {
        let stream = self.stream(stream, "record_event")?;
        let event = event.handle::<CudaEvent>().ok_or_else(|| {
            self.error("record_event: the event was not created by a CUDA device")
        })?;
        self.same_gpu(event.context(), "record_event", "event")?;
        event
            .record("cuEventRecord", stream)
            .map_err(|e| self.error(e))
    }

    /// Drops `owner` once the work queued on `stream` has run
    /// (`cuLaunchHostFunc`, through a reaper thread: the driver's thread
    /// must not call CUDA, and a release may).
    fn release_after(
        &self,
        stream: &Stream,
        owner: Box<dyn Any + Send + Sync>,
    ) -> Result<Option<Box<dyn Any + Send + Sync>>> {
        Ok(self.stream(stream, "release_after")?.release_after(owner))
    }

    fn synchronize_stream(&self, stream: &Stream) -> Result<()> {
        let stream = self.stream(stream, "synchronize_stream")?;
        self.host_synchronizations.fetch_add(1, Ordering::Relaxed);
        stream.synchronize().map_err(|e| self.error(e))
    }

    unsafe fn stream_wait_sync_event(
        &self,
        stream: &Stream,
        sync_event: *mut c_void,
    ) -> Result<()> {
        let stream = self.stream(stream, "stream_wait_sync_event")?;
        if sync_event.is_null() {
            return Ok(());
        }
        // SAFETY: the caller passes a pointer to a live CUevent
        // (cudaEvent_t*), of any context.
        unsafe {
            let event = RawEvent::at(sync_event);
            stream.wait_event("cuStreamWaitEvent on the sync_event", event)
        }
        .map_err(|e| self.error(e))
    }

    unsafe fn synchronize_sync_event(&self, sync_event: *mut c_void) -> Result<()> {
        if sync_event.is_null() {
            return Ok(());
        }
        self.host_synchronizations.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller passes a pointer to a live CUevent
        // (cudaEvent_t*).
        unsafe {
            let event = RawEvent::at(sync_event);
            event.synchronize(&self.context, "cuEventSynchronize on the sync_event")
        }
        .map_err(|e| self.error(e))
    }

    unsafe fn copy_from_host(
        &self,
        src: *const u8,
        dst: *mut u8,
        len: usize,
        stream: &Stream,
    ) -> Result<()> {
        // SAFETY: forwarded contract.
        unsafe { self.copy("copy_from_host (cuMemcpyAsync)", src, dst, len, stream) }
    }

    unsafe fn copy_to_host(
        &self,
        src: *const u8,
        dst: *mut u8,
        len: usize,
        stream: &Stream,
    ) -> Result<()> {
        // SAFETY: forwarded contract.
        unsafe { self.copy("copy_to_host (cuMemcpyAsync)", src, dst, len, stream) }
    }

    /// Any CUDA memory to any CUDA memory: `cuMemcpyPeerAsync` between the
    /// device memory of two GPUs, `cuMemcpyAsync` otherwise.
    unsafe fn copy_device_to_device(
        &self,
        src_device: &dyn Device,
        src: *const u8,
        dst: *mut u8,
        len: usize,
        stream: &Stream,
    ) -> Result<()> {
        let Some(source) = src_device.as_any().downcast_ref::<CudaDevice>() else {
            return Err(Error::NotSupported(format!(
                "{} device {} cannot read {} (id {}) memory directly; stage the copy through the host",
                self.device_type(),
                self.device_id(),
                src_device.device_type(),
                src_device.device_id()
            )));
        };
        let peer = source.context.ordinal() != self.context.ordinal()
            && source.kind == MemoryKind::Device
            && self.kind == MemoryKind::Device;
        if !peer {
            // SAFETY: forwarded contract.
            return unsafe {
                self.copy(
                    "copy_device_to_device (cuMemcpyAsync)",
                    src,
                    dst,
                    len,
                    stream,
                )
            };
        }
        if len == 0 {
            return Ok(());
        }
        ipc::check_exporter_alive(src, len)
            .and_then(|()| ipc::check_exporter_alive(dst, len))
            .map_err(|e| self.error(format!("copy_device_to_device: {e}")))?;
        let stream = self.stream(stream, "copy_device_to_device")?;
        // SAFETY: both ends valid per the caller.
        unsafe {
            stream.copy_peer_async(
                "copy_device_to_device (cuMemcpyPeerAsync)",
                &source.context,
                src,
                dst,
                len,
            )
        }
        .map_err(|e| self.error(e))
    }
}

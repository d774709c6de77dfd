//! Devices: where an array's buffers live and how bytes move between them.
//!
//! The [`Device`] trait is the one table of operations the interface needs,
//! in the spirit of nanoarrow's `ArrowDevice`: identity (type and id),
//! allocation, a check that a producer's buffer lies in device memory
//! (where the device can tell), copies (host→device, device→host,
//! device→device) queued on a [`Stream`], and events ([`Event`]) that order
//! work across streams and are exported as an array's `sync_event`.
//! Ownership after each call is stated on the method.
//!
//! Implementations here: [`cpu::CpuDevice`] and the emulated asynchronous
//! device [`emulated::EmulatedDevice`] (reported as `EXT_DEV`), which is how
//! the device paths are tested without a GPU; with the `cuda` feature, the
//! CUDA, CUDA_HOST and CUDA_MANAGED devices (module `cuda`, the driver API
//! loaded at run time). Other GPU back-ends (ROCm, Metal) implement the same
//! trait.
//!
//! [`lookup`] finds the implementation for a `(device_type, device_id)` pair
//! read from an `ArrowDeviceArray`; [`register`] adds one.
//!
//! ```
//! use arrow_device::abi::DeviceType;
//! use arrow_device::device::{self, Device};
//!
//! let cpu = device::cpu();
//! assert_eq!(cpu.device_type(), DeviceType::CPU);
//! assert_eq!(cpu.device_id(), -1);
//!
//! // Copy bytes in and out through the device API.
//! let buf = cpu.allocate(4).unwrap();
//! let stream = cpu.create_stream().unwrap();
//! let mut back = [0u8; 4];
//! // SAFETY: the pointers are valid for 4 bytes until the stream is synchronized.
//! unsafe {
//!     cpu.copy_from_host([1u8, 2, 3, 4].as_ptr(), buf.as_ptr(), 4, &stream).unwrap();
//!     cpu.copy_to_host(buf.as_ptr(), back.as_mut_ptr(), 4, &stream).unwrap();
//! }
//! cpu.synchronize_stream(&stream).unwrap();
//! assert_eq!(back, [1, 2, 3, 4]);
//! ```

pub mod cpu;
#[cfg(feature = "cuda")]
pub mod cuda;
pub mod emulated;
pub mod host;
mod protocol_stream;
mod sync_event;

pub use protocol_stream::StreamSync;
pub(crate) use sync_event::SyncEvent;

use std::any::Any;
use std::collections::HashMap;
use std::ffi::c_void;
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock, RwLock};

use crate::abi::DeviceType;
use crate::error::{Error, Result};

/// A shared handle to a device implementation.
pub type DeviceRef = Arc<dyn Device>;

/// The operations the Arrow C Device Data Interface needs from a device.
///
/// Pointers passed to the `unsafe` methods are device pointers of *this*
/// device unless the parameter says host. Copies are queued on `stream` and may
/// complete after the call returns: the caller keeps both sides alive and
/// unmodified until the stream has been synchronized, or until an event
/// recorded after the copy has completed.
///
/// # Safety
///
/// The trait is `unsafe` to implement because this crate writes into,
/// reads from and frees memory on the strength of what its methods return.
/// An implementation promises, for the lifetime of the device:
///
/// * **Identity.** [`device_type`](Device::device_type) and
///   [`device_id`](Device::device_id) never change, and the device type's
///   event type is what [`Event`]s carry and what the `*_sync_event`
///   methods accept.
/// * **Host access.** [`is_host_accessible`](Device::is_host_accessible)
///   is `true` only if the host may read (and, for memory this device
///   allocated, write) its memory directly once its events have completed;
///   [`is_host_accessible_at`](Device::is_host_accessible_at) is `true` only if the
///   `len` bytes at `ptr` are host-accessible.
/// * **Memory.** A [`DeviceBuffer`] from [`allocate`](Device::allocate)
///   is valid for `len` bytes of device memory, aligned to 64 bytes, until
///   it is dropped (a zero-length one has a non-null, aligned pointer); one
///   from [`allocate_host_accessible`](Device::allocate_host_accessible) is valid
///   for `len` bytes of host reads and writes (the crate checks the length
///   and alignment too, and falls back to the heap).
/// * **Range checks.** [`check_device_range`](Device::check_device_range)
///   returns `Err` only for a range that is not all inside memory of this
///   device; never for one a conforming producer could hand over, since
///   that would refuse valid data. `Ok` is always a correct answer: it is
///   the default, for devices that cannot tell. The crate's memory safety
///   rests on the copies, not on this answer: it only lets a copy fail
///   before it sets memory aside.
/// * **Ordering.** Copies do what they say once the stream is synchronized
///   or an event recorded after them has completed;
///   [`synchronize_stream`](Device::synchronize_stream) and
///   [`synchronize_sync_event`](Device::synchronize_sync_event) return `Ok`
///   only after that work has completed;
///   [`stream_wait_sync_event`](Device::stream_wait_sync_event) orders all
///   later work on the stream after the event;
///   [`release_after`](Device::release_after) drops what it took only after
///   the work queued before the call has run.
/// * **Errors** are reported as `Err`, never by panicking or aborting.
///
/// ```compile_fail,E0200
/// use arrow_device::device::Device;
/// #[derive(Debug)]
/// struct Liar;
/// // A device that could lie about its memory must be an `unsafe impl`.
/// impl Device for Liar { /* ... */ }
/// ```
pub unsafe trait Device: Send + Sync + fmt::Debug + 'static {
    /// The device's type as reported in `ArrowDeviceArray.device_type`.
    fn device_type(&self) -> DeviceType;

    /// The device's id as reported in `ArrowDeviceArray.device_id` (-1 for
    /// the CPU).
    fn device_id(&self) -> i64;

    /// Whether the host may read this device's memory directly once its
    /// events have completed (CPU, pinned and managed memory).
    fn is_host_accessible(&self) -> bool {
        self.device_type().is_host_accessible()
    }

    /// Whether `len` bytes at `ptr`, a pointer found in an array of this
    /// device, can be read by the host directly. Used for the variadic-sizes
    /// buffer of view arrays, which Arrow C++ exports in host memory even for
    /// device arrays (see the crate documentation). Implementations that can
    /// classify pointers (CUDA: `cuPointerGetAttribute`) should override it.
    fn is_host_accessible_at(&self, ptr: *const u8, len: usize) -> bool {
        let _ = (ptr, len);
        self.is_host_accessible()
    }

    /// Checks that the `len` bytes at `ptr`, a buffer found in an array of
    /// this device, lie inside memory the device knows (its allocations, as
    /// far as it tracks them). `Err` says what the device found instead: no
    /// allocation at `ptr`, or one that ends before `ptr + len`, by how
    /// much. `Ok` when the range is inside, and whenever the device cannot
    /// tell (the default; see the trait's contract).
    ///
    /// A copy of an array tree sizes its destination by what the producer
    /// claims (offset, length and type), and calls this for every buffer
    /// first: a claim that overruns its allocation (8 GiB claimed over a
    /// 1-byte buffer) then fails in microseconds, instead of after the copy
    /// has allocated, and faulted in, the whole claimed size on the host.
    /// A zero `len` is always `Ok`.
    fn check_device_range(&self, ptr: *const u8, len: usize) -> Result<()> {
        let _ = (ptr, len);
        Ok(())
    }

    /// Host memory that this device can read too, for the small host-side
    /// buffers an export adds (the variadic-sizes buffer of view arrays,
    /// which Arrow C++ reads on the host): `None`, the default, means
    /// ordinary heap memory. The CUDA devices return pinned memory, which
    /// their kernels can read as well. Failure is `None` too: the heap is
    /// always a correct fallback for host readers.
    fn allocate_host_accessible(&self, len: usize) -> Option<DeviceBuffer> {
        let _ = len;
        None
    }

    /// This device as `Any`, so an implementation can recognise its peers in
    /// [`Device::copy_device_to_device`].
    fn as_any(&self) -> &dyn Any;

    /// Allocates `len` bytes of device memory aligned to at least 64 bytes.
    /// The memory is freed when the returned [`DeviceBuffer`] is dropped.
    /// A zero-length allocation returns a non-null, aligned pointer.
    fn allocate(&self, len: usize) -> Result<DeviceBuffer>;

    /// Creates a stream (queue) on which copies and events are ordered.
    fn create_stream(&self) -> Result<Stream>;

    /// Creates an event. Its [`Event::sync_event`] pointer is what an exported
    /// array carries in `sync_event` (e.g. a `CUevent*` for CUDA); the event
    /// is destroyed when dropped.
    fn create_event(&self) -> Result<Event>;

    /// Records `event` on `stream`: it completes once all work queued on the
    /// stream before it has completed.
    fn record_event(&self, event: &Event, stream: &Stream) -> Result<()>;

    /// Blocks the host until all work queued on `stream` has completed.
    fn synchronize_stream(&self, stream: &Stream) -> Result<()>;

    /// Hands over what the work queued on `stream` so far needs (the host
    /// sources of asynchronous copies), to be dropped once that work has run
    /// (`cuLaunchHostFunc` for CUDA). Returns it back when the device cannot
    /// tell: the caller then keeps it as long as the copy's memory, which is
    /// safe but holds the sources longer.
    fn release_after(
        &self,
        stream: &Stream,
        owner: Box<dyn Any + Send + Sync>,
    ) -> Result<Option<Box<dyn Any + Send + Sync>>> {
        let _ = stream;
        Ok(Some(owner))
    }

    /// Makes `stream` wait for a producer's `sync_event` before running the
    /// work queued after this call (`cudaStreamWaitEvent` for CUDA).
    ///
    /// # Safety
    /// `sync_event` must be NULL (no wait) or point to this device type's
    /// event type, valid until this call returns.
    unsafe fn stream_wait_sync_event(&self, stream: &Stream, sync_event: *mut c_void)
        -> Result<()>;

    /// Blocks the host until a producer's `sync_event` has completed
    /// (`cudaEventSynchronize` for CUDA).
    ///
    /// # Safety
    /// As for [`Device::stream_wait_sync_event`].
    unsafe fn synchronize_sync_event(&self, sync_event: *mut c_void) -> Result<()>;

    /// Queues a copy of `len` bytes from host memory `src` to device memory `dst`.
    ///
    /// # Safety
    /// `src` must be valid for `len` bytes of reads and `dst` a device pointer
    /// of this device valid for `len` bytes of writes, both until the copy has
    /// completed (see the trait's documentation).
    unsafe fn copy_from_host(
        &self,
        src: *const u8,
        dst: *mut u8,
        len: usize,
        stream: &Stream,
    ) -> Result<()>;

    /// Queues a copy of `len` bytes from device memory `src` to host memory `dst`.
    ///
    /// # Safety
    /// `src` must be a device pointer of this device valid for `len` bytes of
    /// reads and `dst` host memory valid for `len` bytes of writes, both until
    /// the copy has completed.
    unsafe fn copy_to_host(
        &self,
        src: *const u8,
        dst: *mut u8,
        len: usize,
        stream: &Stream,
    ) -> Result<()>;

    /// Queues a copy of `len` bytes from `src`, memory of `src_device` (this
    /// device or a peer of the same type), to `dst` on this device.
    /// Implementations return [`Error::NotSupported`] for a source they cannot
    /// reach; callers then stage the bytes through the host.
    ///
    /// # Safety
    /// `src` valid for `len` bytes of reads on `src_device`, `dst` valid for
    /// `len` bytes of writes on this device, until the copy has completed.
    unsafe fn copy_device_to_device(
        &self,
        src_device: &dyn Device,
        src: *const u8,
        dst: *mut u8,
        len: usize,
        stream: &Stream,
    ) -> Result<()>;
}

/// Device memory owned by the caller: freed on drop.
pub struct DeviceBuffer {
    ptr: *mut u8,
    len: usize,
    // Frees the memory when dropped; the implementation's own RAII type.
    _owner: Box<dyn Any + Send + Sync>,
}

// SAFETY: the pointer is device memory owned by `_owner`, which is Send + Sync;
// nothing in this type dereferences it.
unsafe impl Send for DeviceBuffer {}
// SAFETY: as above.
unsafe impl Sync for DeviceBuffer {}

impl DeviceBuffer {
    /// Wraps memory at `ptr` that `owner` frees when dropped (for device
    /// implementations).
    ///
    /// # Safety
    /// `ptr` must be valid for `len` bytes of the device's memory until
    /// `owner` is dropped, and `owner` must be what frees it: the crate
    /// writes into and reads from a `DeviceBuffer` on that promise.
    pub unsafe fn new(ptr: *mut u8, len: usize, owner: Box<dyn Any + Send + Sync>) -> Self {
        Self {
            ptr,
            len,
            _owner: owner,
        }
    }

    /// The device pointer.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr
    }

    /// The size in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the buffer has zero bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl fmt::Debug for DeviceBuffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeviceBuffer")
            .field("ptr", &self.ptr)
            .field("len", &self.len)
            .finish()
    }
}

/// A device stream (queue): an implementation's handle, destroyed on drop.
pub struct Stream {
    handle: Box<dyn Any + Send + Sync>,
}

impl Stream {
    /// Wraps an implementation's stream handle.
    pub fn new(handle: Box<dyn Any + Send + Sync>) -> Self {
        Self { handle }
    }

    /// The implementation's handle, if it is a `T`.
    pub fn handle<T: Any>(&self) -> Option<&T> {
        self.handle.downcast_ref()
    }
}

impl fmt::Debug for Stream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Stream")
    }
}

/// A device event: an implementation's handle, destroyed on drop, plus the
/// pointer exported as `ArrowDeviceArray.sync_event` (NULL for devices
/// without events, such as the CPU).
pub struct Event {
    handle: Box<dyn Any + Send + Sync>,
    sync_event: *mut c_void,
}

// SAFETY: `sync_event` points into `handle` (or is NULL) and is only handed
// to consumers; the handle itself is Send + Sync.
unsafe impl Send for Event {}
// SAFETY: as above.
unsafe impl Sync for Event {}

impl Event {
    /// Wraps an implementation's event handle.
    ///
    /// # Safety
    /// `sync_event` must be NULL or point to the device type's event type
    /// (a `CUevent*` for CUDA), valid for as long as `handle` lives (point
    /// into a boxed handle): it is exported as an array's `sync_event` and
    /// waited on.
    pub unsafe fn new(handle: Box<dyn Any + Send + Sync>, sync_event: *mut c_void) -> Self {
        Self { handle, sync_event }
    }

    /// The pointer to export as `sync_event`.
    pub fn sync_event(&self) -> *mut c_void {
        self.sync_event
    }

    /// The implementation's handle, if it is a `T`.
    pub fn handle<T: Any>(&self) -> Option<&T> {
        self.handle.downcast_ref()
    }
}

impl fmt::Debug for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Event")
            .field("sync_event", &self.sync_event)
            .finish()
    }
}

/// Whether anything was ever registered: lets [`lookup`] skip the lock on
/// the import hot path when nothing was.
static ANY_REGISTERED: AtomicBool = AtomicBool::new(false);

fn registry() -> &'static RwLock<HashMap<(DeviceType, i64), DeviceRef>> {
    static REGISTRY: OnceLock<RwLock<HashMap<(DeviceType, i64), DeviceRef>>> = OnceLock::new();
    REGISTRY.get_or_init(Default::default)
}

/// The CPU device.
pub fn cpu() -> DeviceRef {
    static CPU: OnceLock<DeviceRef> = OnceLock::new();
    CPU.get_or_init(|| Arc::new(cpu::CpuDevice)).clone()
}

/// Registers `device` so that arrays reporting its type and id are imported
/// through it; replaces an earlier registration of the same pair.
pub fn register(device: DeviceRef) {
    let key = (device.device_type(), device.device_id());
    // A poisoned lock only means another thread panicked while inserting;
    // the map itself is still consistent.
    let mut map = registry().write().unwrap_or_else(|e| e.into_inner());
    map.insert(key, device);
    ANY_REGISTERED.store(true, Ordering::Release);
}

/// Finds the implementation for a `(device_type, device_id)` pair: a
/// registered one first, then the built-in CPU device (any id), the
/// emulated devices (`EXT_DEV`, ids 0 and up), with the `cuda` feature the
/// CUDA devices when the driver and the GPU are there, and read-only access
/// to host-accessible memory types whose runtime is not loaded
/// ([`host::HostAccessibleDevice`]).
pub fn lookup(device_type: DeviceType, device_id: i64) -> Option<DeviceRef> {
    if ANY_REGISTERED.load(Ordering::Acquire) {
        let map = registry().read().unwrap_or_else(|e| e.into_inner());
        if let Some(device) = map.get(&(device_type, device_id)) {
            return Some(device.clone());
        }
    }
    match device_type {
        DeviceType::CPU => Some(cpu()),
        DeviceType::EXT_DEV if device_id >= 0 => {
            emulated::EmulatedDevice::global(device_id).map(|d| d as DeviceRef)
        }
        #[cfg(feature = "cuda")]
        DeviceType::CUDA | DeviceType::CUDA_HOST | DeviceType::CUDA_MANAGED
            if cuda::is_available() =>
        {
            cuda::lookup(device_type, device_id).or_else(|| {
                host::HostAccessibleDevice::new(device_type, device_id)
                    .map(|d| Arc::new(d) as DeviceRef)
            })
        }
        _ => host::HostAccessibleDevice::new(device_type, device_id)
            .map(|d| Arc::new(d) as DeviceRef),
    }
}

/// Like [`lookup`], but an error naming the pair when nothing implements it.
pub fn require(device_type: DeviceType, device_id: i64) -> Result<DeviceRef> {
    lookup(device_type, device_id).ok_or_else(|| {
        Error::NotSupported(format!(
            "no device implementation for device type {device_type} id {device_id}: \
             the array can be inspected but not copied"
        ))
    })
}

/// Whether two handles denote the same device (type and id).
pub fn same_device(a: &dyn Device, b: &dyn Device) -> bool {
    a.device_type() == b.device_type() && a.device_id() == b.device_id()
}

/// `error`, once `owned` (memory that work queued on `stream` may still
/// read or write) is safe to free: after the stream has drained. When even
/// that wait fails, nobody can say when the work ends, so `owned` is leaked
/// rather than freed under it. The one rule for error paths that leave work
/// queued: copies, batched reads and the CUDA conversions.
pub(crate) fn drain_then_free<T>(
    device: &DeviceRef,
    stream: &Stream,
    owned: T,
    error: Error,
) -> Error {
    if device.synchronize_stream(stream).is_err() {
        std::mem::forget(owned);
    }
    error
}

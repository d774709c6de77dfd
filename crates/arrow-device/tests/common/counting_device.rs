//! [`CountingWaits`]: a device that counts every wait on a `sync_event`,
//! forwarding everything to the device it wraps.

use std::ffi::c_void;
use std::sync::atomic::{AtomicUsize, Ordering};

use arrow_device::device::{Device, DeviceBuffer, DeviceRef, Event, Stream};
use arrow_device::{DeviceType, Result};

/// Counts the host's waits and the streams' waits on non-NULL events.
#[derive(Debug)]
pub struct CountingWaits {
    inner: DeviceRef,
    /// Report the memory as host-accessible (as pinned or managed memory
    /// is) although the wrapped device is not: the import then reads sizes
    /// and `to_host` wraps the data on the host, after a host wait. Only
    /// for a wrapped device whose memory the host can in fact read (the
    /// emulated device in its non-strict mode).
    host_accessible: bool,
    pub host_waits: AtomicUsize,
    pub stream_waits: AtomicUsize,
}

impl CountingWaits {
    /// Wraps `inner`, as it is.
    pub fn new(inner: DeviceRef) -> Self {
        CountingWaits {
            inner,
            host_accessible: false,
            host_waits: AtomicUsize::new(0),
            stream_waits: AtomicUsize::new(0),
        }
    }

    /// Wraps `inner`, an emulated device in non-strict mode (whose memory
    /// the host can read), as a host-accessible device.
    pub fn host_accessible(inner: DeviceRef) -> Self {
        CountingWaits {
            host_accessible: true,
            ..CountingWaits::new(inner)
        }
    }

    /// (host waits, stream waits) so far.
    pub fn waits(&self) -> (usize, usize) {
        (
            self.host_waits.load(Ordering::SeqCst),
            self.stream_waits.load(Ordering::SeqCst),
        )
    }
}

/// Writes `Device` methods that hand every argument to `self.inner`
/// unchanged; the `unsafe` ones pass their caller's contract on as it is.
macro_rules! forward_to_inner {
    ($(fn $name:ident(&self $(, $arg:ident: $ty:ty)* $(,)?) -> $ret:ty;)*) => {$(
        fn $name(&self $(, $arg: $ty)*) -> $ret {
            self.inner.$name($($arg),*)
        }
    )*};
    ($(unsafe fn $name:ident(&self $(, $arg:ident: $ty:ty)* $(,)?) -> $ret:ty;)*) => {$(
        unsafe fn $name(&self $(, $arg: $ty)*) -> $ret {
            // SAFETY: `self.inner` is given what our caller vouched for.
            unsafe { self.inner.$name($($arg),*) }
        }
    )*};
}

// SAFETY: every promise is the wrapped device's; counting changes nothing.
// `host_accessible` is set only over memory the host can read (its
// constructor's contract).
unsafe impl Device for CountingWaits {
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    fn is_host_accessible(&self) -> bool {
        self.host_accessible || self.inner.is_host_accessible()
    }

    unsafe fn synchronize_sync_event(&self, sync_event: *mut c_void) -> Result<()> {
        if !sync_event.is_null() {
            self.host_waits.fetch_add(1, Ordering::SeqCst);
        }
        // SAFETY: forwarded contract.
        unsafe { self.inner.synchronize_sync_event(sync_event) }
    }

    unsafe fn stream_wait_sync_event(
        &self,
        stream: &Stream,
        sync_event: *mut c_void,
    ) -> Result<()> {
        if !sync_event.is_null() {
            self.stream_waits.fetch_add(1, Ordering::SeqCst);
        }
        // SAFETY: forwarded contract.
        unsafe { self.inner.stream_wait_sync_event(stream, sync_event) }
    }

    forward_to_inner! {
        fn device_type(&self) -> DeviceType;
        fn device_id(&self) -> i64;
        fn check_device_range(&self, ptr: *const u8, len: usize) -> Result<()>;
        fn allocate(&self, len: usize) -> Result<DeviceBuffer>;
        fn create_stream(&self) -> Result<Stream>;
        fn create_event(&self) -> Result<Event>;
        fn record_event(&self, event: &Event, stream: &Stream) -> Result<()>;
        fn synchronize_stream(&self, stream: &Stream) -> Result<()>;
    }

    forward_to_inner! {
        unsafe fn copy_from_host(&self, src: *const u8, dst: *mut u8, len: usize, stream: &Stream)
            -> Result<()>;
        unsafe fn copy_to_host(&self, src: *const u8, dst: *mut u8, len: usize, stream: &Stream)
            -> Result<()>;
        unsafe fn copy_device_to_device(
            &self, src_device: &dyn Device,
            src: *const u8, dst: *mut u8, len: usize, stream: &Stream,
        ) -> Result<()>;
    }
}

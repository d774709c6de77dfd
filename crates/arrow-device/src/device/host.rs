//! Host-accessible memory of a device whose runtime is not loaded.
//!
//! CUDA_HOST, CUDA_MANAGED and ROCM_HOST memory is readable by the CPU. Even
//! without the CUDA or ROCm runtime, an array in such memory whose
//! `sync_event` is NULL can be imported zero-copy; a non-NULL event cannot be
//! waited on without the runtime, so it is reported as an error instead of
//! being ignored.
//!
//! ```
//! use arrow_device::abi::DeviceType;
//! use arrow_device::device::{self, Device};
//!
//! let pinned = device::lookup(DeviceType::CUDA_HOST, 0).unwrap();
//! assert!(pinned.is_host_accessible());
//! assert!(pinned.allocate(64).is_err()); // allocating needs the runtime
//! ```

use std::any::Any;
use std::ffi::c_void;

use crate::abi::DeviceType;
use crate::device::cpu::{copy_bytes, copy_host_accessible};
use crate::device::{Device, DeviceBuffer, Event, Stream};
use crate::error::{Error, Result};

/// Reads host-accessible memory of `device_type`; cannot allocate or wait on
/// events (both need the device's runtime).
#[derive(Debug, Clone, Copy)]
pub struct HostAccessibleDevice {
    device_type: DeviceType,
    device_id: i64,
}

impl HostAccessibleDevice {
    /// A handle for host-accessible memory of `device_type` (`None` for types
    /// whose memory the host cannot read).
    pub fn new(device_type: DeviceType, device_id: i64) -> Option<Self> {
        (device_type.is_host_accessible() && device_type != DeviceType::CPU).then_some(Self {
            device_type,
            device_id,
        })
    }

    fn no_runtime(&self, what: &str) -> Error {
        Error::device(
            self.device_type,
            self.device_id,
            format!(
                "{what} needs the {} runtime, which is not loaded in this build",
                self.device_type
            ),
        )
    }

    fn check_event(&self, sync_event: *mut c_void) -> Result<()> {
        if sync_event.is_null() {
            Ok(())
        } else {
            Err(self.no_runtime("waiting on the array's sync_event"))
        }
    }
}

// SAFETY: it allocates nothing and queues no work (see the methods); reads
// are host reads of memory the type's runtime made host-accessible.
unsafe impl Device for HostAccessibleDevice {
    fn device_type(&self) -> DeviceType {
        self.device_type
    }

    fn device_id(&self) -> i64 {
        self.device_id
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    fn allocate(&self, _len: usize) -> Result<DeviceBuffer> {
        Err(self.no_runtime("allocating memory"))
    }

    fn create_stream(&self) -> Result<Stream> {
        Ok(Stream::new(Box::new(())))
    }

    fn create_event(&self) -> Result<Event> {
        Err(self.no_runtime("creating an event"))
    }

    fn record_event(&self, _event: &Event, _stream: &Stream) -> Result<()> {
        Err(self.no_runtime("recording an event"))
    }

    fn synchronize_stream(&self, _stream: &Stream) -> Result<()> {
        Ok(())
    }

    unsafe fn stream_wait_sync_event(
        &self,
        _stream: &Stream,
        sync_event: *mut c_void,
    ) -> Result<()> {
        self.check_event(sync_event)
    }

    unsafe fn synchronize_sync_event(&self, sync_event: *mut c_void) -> Result<()> {
        self.check_event(sync_event)
    }

    unsafe fn copy_from_host(
        &self,
        src: *const u8,
        dst: *mut u8,
        len: usize,
        _stream: &Stream,
    ) -> Result<()> {
        // SAFETY: the memory is host-accessible; validity per the caller.
        unsafe { copy_bytes(src, dst, len) };
        Ok(())
    }

    unsafe fn copy_to_host(
        &self,
        src: *const u8,
        dst: *mut u8,
        len: usize,
        _stream: &Stream,
    ) -> Result<()> {
        // SAFETY: as above.
        unsafe { copy_bytes(src, dst, len) };
        Ok(())
    }

    unsafe fn copy_device_to_device(
        &self,
        src_device: &dyn Device,
        src: *const u8,
        dst: *mut u8,
        len: usize,
        _stream: &Stream,
    ) -> Result<()> {
        // SAFETY: forwarded from the caller.
        unsafe { copy_host_accessible(src_device, src, dst, len) }
    }
}

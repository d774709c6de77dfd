//! The CPU device: host memory, synchronous copies, no events.
//!
//! ```
//! use arrow_device::device::{cpu::CpuDevice, Device};
//!
//! let buf = CpuDevice.allocate(100).unwrap();
//! assert_eq!(buf.as_ptr() as usize % 64, 0);
//! assert!(CpuDevice.create_event().unwrap().sync_event().is_null());
//! ```

use std::alloc::Layout;
use std::any::Any;
use std::ffi::c_void;

use crate::abi::DeviceType;
use crate::device::{Device, DeviceBuffer, Event, Stream};
use crate::error::{Error, Result};

/// Alignment of every allocation, as the Arrow format recommends.
pub const ALIGNMENT: usize = 64;

/// Host memory. Copies complete before the call returns; the spec's event
/// type for the CPU is "N/A", so events export a NULL `sync_event`.
#[derive(Debug, Clone, Copy, Default)]
pub struct CpuDevice;

struct HostAllocation {
    ptr: *mut u8,
    layout: Layout,
}

// SAFETY: the allocation is plain host memory owned by this value.
unsafe impl Send for HostAllocation {}
// SAFETY: as above; the value itself exposes nothing.
unsafe impl Sync for HostAllocation {}

impl Drop for HostAllocation {
    fn drop(&mut self) {
        if self.layout.size() > 0 {
            // SAFETY: allocated in `CpuDevice::allocate` with this layout.
            unsafe { std::alloc::dealloc(self.ptr, self.layout) }
        }
    }
}

// SAFETY: host memory from the global allocator, 64-byte aligned and freed
// by its `HostAllocation`; copies are `memcpy`s that complete before they
// return, so every ordering promise holds trivially; no events.
unsafe impl Device for CpuDevice {
    fn device_type(&self) -> DeviceType {
        DeviceType::CPU
    }

    fn device_id(&self) -> i64 {
        -1
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    fn allocate(&self, len: usize) -> Result<DeviceBuffer> {
        let layout = Layout::from_size_align(len, ALIGNMENT).map_err(|e| {
            Error::device(
                DeviceType::CPU,
                -1,
                format!("cannot allocate {len} bytes: {e}"),
            )
        })?;
        let ptr = if len == 0 {
            // A dangling but aligned, non-null pointer, never dereferenced.
            ALIGNMENT as *mut u8
        } else {
            // SAFETY: the layout has a non-zero size.
            let ptr = unsafe { std::alloc::alloc(layout) };
            if ptr.is_null() {
                return Err(Error::device(
                    DeviceType::CPU,
                    -1,
                    format!("out of memory allocating {len} bytes"),
                ));
            }
            ptr
        };
        // SAFETY: `ptr` is `len` bytes from the global allocator (or a
        // dangling aligned pointer for zero bytes), freed by the owner.
        Ok(unsafe { DeviceBuffer::new(ptr, len, Box::new(HostAllocation { ptr, layout })) })
    }

    fn create_stream(&self) -> Result<Stream> {
        Ok(Stream::new(Box::new(())))
    }

    fn create_event(&self) -> Result<Event> {
        // SAFETY: the CPU has no event type: a NULL `sync_event`.
        Ok(unsafe { Event::new(Box::new(()), std::ptr::null_mut()) })
    }

    fn record_event(&self, _event: &Event, _stream: &Stream) -> Result<()> {
        Ok(())
    }

    fn synchronize_stream(&self, _stream: &Stream) -> Result<()> {
        Ok(())
    }

    unsafe fn stream_wait_sync_event(
        &self,
        _stream: &Stream,
        sync_event: *mut c_void,
    ) -> Result<()> {
        check_no_event(sync_event)
    }

    unsafe fn synchronize_sync_event(&self, sync_event: *mut c_void) -> Result<()> {
        check_no_event(sync_event)
    }

    unsafe fn copy_from_host(
        &self,
        src: *const u8,
        dst: *mut u8,
        len: usize,
        _stream: &Stream,
    ) -> Result<()> {
        // SAFETY: the caller guarantees both ranges are valid host memory.
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

/// The CPU has no event type: a non-NULL `sync_event` on a CPU array is a
/// producer error we cannot honour, so it is reported rather than ignored.
fn check_no_event(sync_event: *mut c_void) -> Result<()> {
    if sync_event.is_null() {
        Ok(())
    } else {
        Err(Error::NotSupported(
            "a CPU array carries a non-NULL sync_event, but the CPU has no event type".into(),
        ))
    }
}

/// Device-to-device copy between host-accessible memories (the CPU's, and
/// pinned or managed memory): a `memcpy` once the source is known readable.
///
/// # Safety
/// As for [`Device::copy_device_to_device`], with `dst` host-writable.
pub(crate) unsafe fn copy_host_accessible(
    src_device: &dyn Device,
    src: *const u8,
    dst: *mut u8,
    len: usize,
) -> Result<()> {
    if !src_device.is_host_accessible() {
        return Err(Error::NotSupported(format!(
            "the host cannot read {} memory directly",
            src_device.device_type()
        )));
    }
    // SAFETY: the source is host-accessible (checked above) and the caller
    // guarantees both ranges are valid.
    unsafe { copy_bytes(src, dst, len) };
    Ok(())
}

/// `memcpy` that accepts dangling pointers when `len` is zero.
///
/// # Safety
/// For `len > 0`, `src` valid for reads and `dst` for writes of `len` bytes,
/// not overlapping.
pub(crate) unsafe fn copy_bytes(src: *const u8, dst: *mut u8, len: usize) {
    if len > 0 {
        // SAFETY: guaranteed by the caller.
        unsafe { std::ptr::copy_nonoverlapping(src, dst, len) }
    }
}

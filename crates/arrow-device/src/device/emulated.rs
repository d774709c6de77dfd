//! Placeholder: being written (emulated EXT_DEV device).
use std::sync::Arc;

/// The emulated asynchronous device.
#[derive(Debug)]
pub struct EmulatedDevice;

impl EmulatedDevice {
    /// The process-wide emulated device with this id.
    pub fn global(_id: i64) -> Option<Arc<EmulatedDevice>> {
        None
    }
}
impl crate::device::Device for EmulatedDevice {
    fn device_type(&self) -> crate::abi::DeviceType { crate::abi::DeviceType::EXT_DEV }
    fn device_id(&self) -> i64 { 0 }
    fn as_any(&self) -> &dyn std::any::Any { self }
    fn allocate(&self, _len: usize) -> crate::Result<crate::device::DeviceBuffer> { todo!() }
    fn create_stream(&self) -> crate::Result<crate::device::Stream> { todo!() }
    fn create_event(&self) -> crate::Result<crate::device::Event> { todo!() }
    fn record_event(&self, _: &crate::device::Event, _: &crate::device::Stream) -> crate::Result<()> { todo!() }
    fn synchronize_stream(&self, _: &crate::device::Stream) -> crate::Result<()> { todo!() }
    unsafe fn stream_wait_sync_event(&self, _: &crate::device::Stream, _: *mut std::ffi::c_void) -> crate::Result<()> { todo!() }
    unsafe fn synchronize_sync_event(&self, _: *mut std::ffi::c_void) -> crate::Result<()> { todo!() }
    unsafe fn copy_from_host(&self, _: *const u8, _: *mut u8, _: usize, _: &crate::device::Stream) -> crate::Result<()> { todo!() }
    unsafe fn copy_to_host(&self, _: *const u8, _: *mut u8, _: usize, _: &crate::device::Stream) -> crate::Result<()> { todo!() }
    unsafe fn copy_device_to_device(&self, _: &dyn crate::device::Device, _: *const u8, _: *mut u8, _: usize, _: &crate::device::Stream) -> crate::Result<()> { todo!() }
}

// The crate writes into what `allocate` and `allocate_host_accessible` return
// and trusts every wait: a `Device` is an `unsafe impl`, and so are the
// handles it hands out.
use std::any::Any;

use arrow_device::device::{Device, DeviceBuffer, Event, Stream};
use arrow_device::{DeviceType, Result};

#[derive(Debug)]
struct Liar;

impl Device for Liar {
    fn device_type(&self) -> DeviceType {
        DeviceType::EXT_DEV
    }
    fn device_id(&self) -> i64 {
        0
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn allocate(&self, len: usize) -> Result<DeviceBuffer> {
        // A buffer that claims `len` bytes at address 8.
        Ok(DeviceBuffer::new(8 as *mut u8, len, Box::new(())))
    }
    fn create_stream(&self) -> Result<Stream> {
        Ok(Stream::new(Box::new(())))
    }
    fn create_event(&self) -> Result<Event> {
        // An event whose `sync_event` points nowhere.
        Ok(Event::new(Box::new(()), 8 as *mut _))
    }
    fn record_event(&self, _: &Event, _: &Stream) -> Result<()> {
        Ok(())
    }
    fn synchronize_stream(&self, _: &Stream) -> Result<()> {
        Ok(())
    }
    unsafe fn stream_wait_sync_event(&self, _: &Stream, _: *mut std::ffi::c_void) -> Result<()> {
        Ok(())
    }
    unsafe fn synchronize_sync_event(&self, _: *mut std::ffi::c_void) -> Result<()> {
        Ok(())
    }
    unsafe fn copy_from_host(&self, _: *const u8, _: *mut u8, _: usize, _: &Stream) -> Result<()> {
        Ok(())
    }
    unsafe fn copy_to_host(&self, _: *const u8, _: *mut u8, _: usize, _: &Stream) -> Result<()> {
        Ok(())
    }
    unsafe fn copy_device_to_device(
        &self,
        _: &dyn Device,
        _: *const u8,
        _: *mut u8,
        _: usize,
        _: &Stream,
    ) -> Result<()> {
        Ok(())
    }
}

fn main() {}

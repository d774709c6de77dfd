//! Initialisation, errors, devices and contexts.

use std::ffi::{c_char, c_int, c_uint};

use super::out;
use crate::driver::{self, Context};
use crate::result::*;

/// What `cuDriverGetVersion` reports: CUDA 12.4.
const DRIVER_VERSION: c_int = 12040;

fn primary(context: usize) -> Result<std::sync::Arc<Context>> {
    if context == 0 {
        return Err(CUDA_ERROR_INVALID_CONTEXT);
    }
    driver::context(context)
}

/// `CUuuid`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Uuid {
    pub bytes: [u8; 16],
}

/// The UUID of device `ordinal`.
pub fn uuid_of(ordinal: c_int) -> Uuid {
    let mut bytes = *b"standin-gpu-\0\0\0\0";
    bytes[12..].copy_from_slice(&ordinal.to_be_bytes());
    Uuid { bytes }
}

/// # Safety
/// `uuid` is NULL or valid for a write.
unsafe fn device_uuid(uuid: *mut Uuid, device: c_int) -> Result<()> {
    driver::device(device)?;
    // SAFETY: per this function's contract.
    unsafe { out(uuid, uuid_of(device)) }
}

entry_points! {
    fn cuInit(flags: c_uint) {
        if flags != 0 {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        driver::init()
    }

    fn cuDriverGetVersion(version: *mut c_int) {
        // SAFETY: the caller's out parameter.
        unsafe { out(version, DRIVER_VERSION) }
    }

    fn cuGetErrorName(error: CUresult, name: *mut *const c_char) {
        let found = describe(error).map(|(n, _)| n.as_ptr().cast::<c_char>());
        // SAFETY: the caller's out parameter; the names are 'static and
        // NUL-terminated.
        unsafe { out(name, found.unwrap_or(std::ptr::null())) }?;
        found.map(|_| ()).ok_or(CUDA_ERROR_INVALID_VALUE)
    }

    fn cuGetErrorString(error: CUresult, text: *mut *const c_char) {
        let found = describe(error).map(|(_, t)| t.as_ptr().cast::<c_char>());
        // SAFETY: as for cuGetErrorName.
        unsafe { out(text, found.unwrap_or(std::ptr::null())) }?;
        found.map(|_| ()).ok_or(CUDA_ERROR_INVALID_VALUE)
    }

    fn cuDeviceGetCount(count: *mut c_int) {
        let devices = driver::driver()?.settings.devices;
        // SAFETY: the caller's out parameter.
        unsafe { out(count, devices) }
    }

    fn cuDeviceGet(device: *mut c_int, ordinal: c_int) {
        driver::device(ordinal)?;
        // SAFETY: the caller's out parameter.
        unsafe { out(device, ordinal) }
    }

    fn cuDeviceGetName(name: *mut c_char, len: c_int, device: c_int) {
        driver::device(device)?;
        let text = format!("arrow-device CUDA stand-in {device}");
        let len = usize::try_from(len).map_err(|_| CUDA_ERROR_INVALID_VALUE)?;
        if name.is_null() || len == 0 {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let n = text.len().min(len - 1);
        // SAFETY: the caller's buffer of `len` bytes; `n + 1 <= len`.
        unsafe {
            std::ptr::copy_nonoverlapping(text.as_ptr().cast::<c_char>(), name, n);
            name.add(n).write(0);
        }
        Ok(())
    }

    /// A UUID of the stand-in's own (`standin-gpu-` and the ordinal), so
    /// that processes agree on which device is which.
    fn cuDeviceGetUuid(uuid: *mut Uuid, device: c_int) {
        // SAFETY: the caller's out parameter.
        unsafe { device_uuid(uuid, device) }
    }

    fn cuDeviceGetUuid_v2(uuid: *mut Uuid, device: c_int) {
        // SAFETY: the caller's out parameter.
        unsafe { device_uuid(uuid, device) }
    }

    fn cuDeviceTotalMem_v2(bytes: *mut usize, device: c_int) {
        driver::device(device)?;
        let total = driver::driver()?.settings.memory_per_device;
        // SAFETY: the caller's out parameter.
        unsafe { out(bytes, usize::try_from(total).unwrap_or(usize::MAX)) }
    }

    fn cuDevicePrimaryCtxRetain(context: *mut usize, device: c_int) {
        let found = driver::device(device)?;
        if context.is_null() {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        found.retain();
        // SAFETY: checked non-NULL; the caller's out parameter.
        unsafe { out(context, found.handle) }
    }

    fn cuDevicePrimaryCtxRelease_v2(device: c_int) {
        driver::device(device)?.release()
    }

    fn cuCtxGetCurrent(context: *mut usize) {
        // SAFETY: the caller's out parameter.
        unsafe { out(context, driver::current_handle()) }
    }

    fn cuCtxSetCurrent(context: usize) {
        let found = if context == 0 { None } else { Some(primary(context)?) };
        driver::set_current(found);
        Ok(())
    }

    fn cuCtxPushCurrent_v2(context: usize) {
        driver::push(primary(context)?);
        Ok(())
    }

    fn cuCtxPopCurrent_v2(context: *mut usize) {
        let popped = driver::pop().ok_or(CUDA_ERROR_INVALID_CONTEXT)?;
        if !context.is_null() {
            // SAFETY: the caller's out parameter (optional).
            unsafe { context.write(popped.handle) };
        }
        Ok(())
    }

    fn cuCtxGetDevice(device: *mut c_int) {
        let context = driver::current()?;
        // SAFETY: the caller's out parameter.
        unsafe { out(device, context.ordinal) }
    }

    fn cuCtxSynchronize() {
        let context = driver::current()?;
        let mut streams = context.blocking_streams();
        streams.extend(
            driver::handles()
                .streams
                .values()
                .filter(|s| s.context == context.handle)
                .cloned(),
        );
        streams.push(std::sync::Arc::clone(&context.legacy));
        for stream in streams {
            stream.wait_for(stream.tail());
        }
        Ok(())
    }
}

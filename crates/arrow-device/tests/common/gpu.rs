//! Helpers of the GPU test binaries (feature `cuda`): the lock that runs
//! them one at a time on GPU 0, skipping with a note where no GPU is
//! usable, the devices, and import of this crate's own structs.

use std::sync::{Mutex, MutexGuard};

use arrow_device::abi::{DeviceType, FFI_ArrowSchema};
use arrow_device::device::cuda::{self, CudaDevice};
use arrow_device::device::DeviceRef;
use arrow_device::{ArrowDeviceArray, DeviceArray, ValidationLevel};

/// The three CUDA memory kinds.
pub const KINDS: [DeviceType; 3] = [
    DeviceType::CUDA,
    DeviceType::CUDA_HOST,
    DeviceType::CUDA_MANAGED,
];

/// The GPU lock, or `None` (after printing why) when no GPU is usable. The
/// tests of one binary share GPU 0 and its devices' synchronization
/// counters, so they run one at a time.
pub fn gpu(test: &str) -> Option<MutexGuard<'static, ()>> {
    static LOCK: Mutex<()> = Mutex::new(());
    if !cuda::is_available() {
        let why = match cuda::device(DeviceType::CUDA, 0) {
            Err(e) => e.to_string(),
            Ok(_) => "unknown".to_string(),
        };
        println!("{test}: skipped, no CUDA GPU: {why}");
        return None;
    }
    Some(LOCK.lock().unwrap_or_else(|e| e.into_inner()))
}

/// GPU 0's device of `device_type`.
pub fn cuda_device(device_type: DeviceType) -> DeviceRef {
    cuda::device(device_type, 0).unwrap_or_else(|e| panic!("{device_type} 0: {e}"))
}

/// The CUDA device behind a handle from [`cuda_device`].
pub fn counter(device: &DeviceRef) -> &CudaDevice {
    CudaDevice::of(device.as_ref()).expect("cuda::device returns a CudaDevice")
}

/// Imports structs from this crate's exporter, naming the case on failure.
pub fn import(case: &str, array: ArrowDeviceArray, schema: FFI_ArrowSchema) -> DeviceArray {
    // SAFETY: the structs come from this crate's exporter.
    unsafe { DeviceArray::try_new(array, schema, ValidationLevel::Default) }
        .unwrap_or_else(|e| panic!("{case}: import: {e}"))
}

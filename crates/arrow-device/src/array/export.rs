//! Export skeleton.
use arrow_array::{Array, RecordBatch};
use crate::abi::{ArrowDeviceArray, FFI_ArrowSchema};
use crate::device::DeviceRef;
use crate::error::Result;

/// Exports `array` zero-copy on the CPU.
pub fn export_array(array: &dyn Array) -> Result<(ArrowDeviceArray, FFI_ArrowSchema)> { let _ = array; todo!() }
/// Exports `array` onto `device`, copying its buffers there.
pub fn export_array_to(array: &dyn Array, device: &DeviceRef) -> Result<(ArrowDeviceArray, FFI_ArrowSchema)> { let _ = (array, device); todo!() }
/// Exports `batch` as a struct array, zero-copy on the CPU.
pub fn export_record_batch(batch: &RecordBatch) -> Result<(ArrowDeviceArray, FFI_ArrowSchema)> { let _ = batch; todo!() }
/// Exports `batch` as a struct array onto `device`.
pub fn export_record_batch_to(batch: &RecordBatch, device: &DeviceRef) -> Result<(ArrowDeviceArray, FFI_ArrowSchema)> { let _ = (batch, device); todo!() }

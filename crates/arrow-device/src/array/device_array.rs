//! DeviceArray skeleton.
use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::{DataType, Field};
use crate::abi::{ArrowDeviceArray, DeviceType, FFI_ArrowArray, FFI_ArrowSchema};
use crate::device::DeviceRef;
use crate::error::Result;
use crate::validate::ValidationLevel;

/// An imported array.
#[derive(Debug, Clone)]
pub struct DeviceArray {}

/// One buffer of a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BufferInfo {
    /// Device pointer.
    pub ptr: *const u8,
    /// Size in bytes.
    pub len: usize,
}

#[allow(missing_docs, unused_variables)]
impl DeviceArray {
    pub fn try_new(array: ArrowDeviceArray, schema: FFI_ArrowSchema, level: ValidationLevel) -> Result<Self> { todo!() }
    pub unsafe fn try_from_raw(array: *mut ArrowDeviceArray, schema: *mut FFI_ArrowSchema, level: ValidationLevel) -> Result<Self> { todo!() }
    pub fn try_from_cpu(array: FFI_ArrowArray, schema: FFI_ArrowSchema, level: ValidationLevel) -> Result<Self> { todo!() }
    pub fn device_type(&self) -> DeviceType { todo!() }
    pub fn device_id(&self) -> i64 { todo!() }
    pub fn device(&self) -> Option<&DeviceRef> { todo!() }
    pub fn field(&self) -> &Field { todo!() }
    pub fn data_type(&self) -> &DataType { todo!() }
    pub fn len(&self) -> usize { todo!() }
    pub fn is_empty(&self) -> bool { todo!() }
    pub fn offset(&self) -> usize { todo!() }
    pub fn null_count(&self) -> Option<usize> { todo!() }
    pub fn buffers(&self) -> Vec<BufferInfo> { todo!() }
    pub fn children(&self) -> Vec<DeviceArray> { todo!() }
    pub fn dictionary(&self) -> Option<DeviceArray> { todo!() }
    pub fn slice(&self, offset: usize, len: usize) -> DeviceArray { todo!() }
    pub fn to_host(&self) -> Result<ArrayRef> { todo!() }
    pub fn to_record_batch(&self) -> Result<RecordBatch> { todo!() }
    pub fn to_device(&self, device: &DeviceRef) -> Result<DeviceArray> { todo!() }
    pub fn export(&self) -> Result<(ArrowDeviceArray, FFI_ArrowSchema)> { todo!() }
}

//! Arrays on devices: export of arrow-rs data, import of foreign structs.
mod device_array;
mod export;

pub use device_array::{BufferInfo, DeviceArray};
pub use export::{export_array, export_array_to, export_record_batch, export_record_batch_to};

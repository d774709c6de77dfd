//! Arrays on devices: export of arrow-rs data, import of foreign structs,
//! copies between devices.
//!
//! * [`export`](export_array): arrow-rs → C structs (zero-copy on the CPU).
//! * [`DeviceArray`]: C structs → an owned, validated, device-aware handle.
//! * `layout`: the buffer rules of every type, shared by both directions.
mod copy;
mod device_array;
mod export;
mod import;
pub(crate) mod layout;
pub(crate) mod node;

pub use device_array::{BufferInfo, DeviceArray};
pub use export::{export_array, export_array_to, export_record_batch, export_record_batch_to};

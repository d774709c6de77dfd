//! Arrays on devices: export of arrow-rs data, import of foreign structs,
//! copies between devices.
//!
//! * [`export`](export_array): arrow-rs → C structs (zero-copy on the CPU).
//! * [`DeviceArray`]: C structs → an owned, validated, device-aware handle.
//! * `layout`: the buffer rules of every type, shared by both directions.
//! * [`HostStaging`]: host memory that copies to the host reuse, batch
//!   after batch.
//!
//! ```
//! use arrow_array::{Array, ListArray, types::Int32Type};
//! use arrow_device::{export_array, DeviceArray, ValidationLevel};
//!
//! let lists = ListArray::from_iter_primitive::<Int32Type, _, _>([
//!     Some(vec![Some(1), Some(2)]),
//!     None,
//!     Some(vec![Some(3)]),
//! ]);
//! let (array, schema) = export_array(&lists).unwrap();
//! // SAFETY: the structs come from this crate's exporter (or a test producer), which follow the interface.
//! let imported = unsafe { DeviceArray::try_new(array, schema, ValidationLevel::Full) }.unwrap();
//! // The child is the producer's layout: three values, no parent offset applied.
//! assert_eq!(imported.children()[0].len(), 3);
//! assert_eq!(imported.to_host().unwrap().as_ref(), &lists as &dyn Array);
//! ```
pub(crate) mod copy;
mod device_array;
mod device_reads;
pub(crate) mod export;
mod export_block;
mod host_memory;
mod import;
pub(crate) mod layout;
pub(crate) mod node;
pub(crate) mod owner;
mod represent;
mod staging;

pub(crate) use device_array::HandOn;
pub use device_array::{BufferInfo, DeviceArray};
pub use export::{export_array, export_array_to, export_record_batch, export_record_batch_to};
pub use represent::{check_representation, same_data};
pub use staging::HostStaging;

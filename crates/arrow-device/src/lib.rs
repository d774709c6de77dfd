//! # arrow-device
//!
//! The Apache Arrow C Device Data Interface for Rust.
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

pub mod abi;
pub mod device;
pub mod error;

pub use abi::{ArrowDeviceArray, ArrowDeviceArrayStream, DeviceType};
pub use error::{Error, Result};
pub mod array;
pub mod validate;

pub use array::{export_array, export_array_to, export_record_batch, export_record_batch_to, DeviceArray};
pub use validate::ValidationLevel;

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

//! The `arrow_device` Python module: the Arrow PyCapsule protocol for
//! arrays, device arrays, streams and device streams, DLPack, sharing
//! arrays and streams between processes, and Arrow Flight, as a thin layer
//! over the `arrow-device` and `arrow-device-flight` libraries. Every
//! conversion, check and copy is the libraries'; this crate only moves
//! structs in and out of capsules and turns errors into Python exceptions.
#![deny(unsafe_op_in_unsafe_fn)]

mod conformance;
mod flight;

use pyo3::prelude::*;

/// The native half of `arrow_device` (the package re-exports it).
#[pymodule]
fn _arrow_device(m: &Bound<'_, PyModule>) -> PyResult<()> {
    arrow_device_pyo3::register(m)?;
    flight::register(m)?;
    conformance::register(m)?;
    Ok(())
}

//! The `arrow_device` Python module: the Arrow PyCapsule protocol for
//! arrays, device arrays, streams and device streams, DLPack, sharing
//! arrays and streams between processes, and Arrow Flight, as a thin layer
//! over the `arrow-device` and `arrow-device-flight` libraries. Every
//! conversion, check and copy is the libraries'; this crate only moves
//! structs in and out of capsules and turns errors into Python exceptions.
#![deny(unsafe_op_in_unsafe_fn)]

mod array;
mod cai;
mod capsule;
mod conformance;
mod device;
mod dlpack;
mod errors;
mod flight;
mod interpreter;
mod share;
mod stream;

use pyo3::prelude::*;

/// The native half of `arrow_device` (the package re-exports it).
#[pymodule]
fn _arrow_device(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<device::PyDevice>()?;
    m.add_class::<array::PyDeviceArray>()?;
    m.add_class::<stream::PyDeviceStream>()?;
    m.add_class::<cai::PyCudaArrayMask>()?;
    m.add_function(wrap_pyfunction!(array::array, m)?)?;
    m.add_function(wrap_pyfunction!(stream::stream, m)?)?;
    m.add_function(wrap_pyfunction!(device::cpu, m)?)?;
    m.add_function(wrap_pyfunction!(device::emulated, m)?)?;
    m.add_function(wrap_pyfunction!(device::devices, m)?)?;
    m.add_function(wrap_pyfunction!(device::cuda, m)?)?;
    m.add_function(wrap_pyfunction!(device::cuda_host, m)?)?;
    m.add_function(wrap_pyfunction!(device::cuda_managed, m)?)?;
    share::register(m)?;
    flight::register(m)?;
    conformance::register(m)?;
    Ok(())
}

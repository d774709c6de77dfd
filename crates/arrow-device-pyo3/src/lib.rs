//! Device arrays and device streams for PyO3 extensions.
//!
//! A function of a Rust extension module takes any array-like Python object
//! as a [`PyDeviceArray`] and any stream-like one as a [`PyDeviceStream`]:
//! whatever `arrow_device.array()` and `arrow_device.stream()` accept, in the
//! same order of preference (the Arrow PyCapsule protocols, device ones
//! first, then the CUDA Array Interface, then DLPack through a producer's C
//! exchange table or `__dlpack__`; iterables of arrays for streams). It
//! returns them the same way, as objects that implement the protocols:
//!
//! ```ignore
//! use arrow_device_pyo3::{Error, PyDevice, PyDeviceArray};
//! use pyo3::prelude::*;
//!
//! /// The array on `device` ("cpu", "cuda:0", an `arrow_device.Device`).
//! #[pyfunction]
//! fn to_device(array: PyDeviceArray, device: PyDevice) -> Result<PyDeviceArray, Error> {
//!     Ok(array.to_device(&device)?.into())
//! }
//! ```
//!
//! [`Error`] takes a library error or a `PyErr` through `?` and converts
//! to the Python exception the `arrow_device` package raises for it
//! ([`errors::to_py`]); in a function returning `PyResult`,
//! [`PyResultExt::py`] does the same. Options (the validation level, a
//! device to copy to) go through [`PyDeviceArray::extract_with`] and
//! [`ExtractOptions`].
//!
//! The `arrow_device` Python package is this crate's module plus Arrow
//! Flight and the conformance checker: [`register`] adds the classes and
//! functions this crate defines to a module.
//!
//! Objects from two extension modules that each link this crate meet only
//! through the protocols (PyCapsules): each module has its own copy of the
//! classes, and a returned array becomes an `arrow_device.DeviceArray` of the
//! installed package when there is one (see [`PyDeviceArray`]'s
//! `IntoPyObject`). CPU and CUDA data cross freely; the emulated device
//! (`EXT_DEV`) is per binary, since each binary has its own copy of
//! arrow-device's statics: an emulated array of another binary can be
//! described here but not copied (the error says so).
#![deny(unsafe_op_in_unsafe_fn)]

pub mod array;
mod cai;
pub mod capsule;
pub mod device;
mod dlpack;
pub mod errors;
mod exchange;
mod extract;
pub mod interpreter;
pub mod share;
pub mod stream;

pub use errors::{Error, PyResultExt};
pub use extract::{ExtractOptions, PyDevice, PyDeviceArray, PyDeviceStream};

use pyo3::prelude::*;

/// Adds the classes `DeviceArray`, `DeviceStream`, `Device`,
/// `CudaArrayMask` and the sharing classes, and the functions `array`,
/// `stream`, `cpu`, `emulated`, `devices`, `cuda`, `cuda_host`,
/// `cuda_managed`, `open_shared` and `open_shared_stream`, to `m`: the
/// `arrow_device` package's native module is built this way.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<device::DeviceObject>()?;
    m.add_class::<array::DeviceArrayObject>()?;
    m.add_class::<stream::DeviceStreamObject>()?;
    m.add_class::<cai::PyCudaArrayMask>()?;
    m.add_function(wrap_pyfunction!(array::array, m)?)?;
    m.add_function(wrap_pyfunction!(stream::stream, m)?)?;
    m.add_function(wrap_pyfunction!(device::cpu, m)?)?;
    m.add_function(wrap_pyfunction!(device::emulated, m)?)?;
    m.add_function(wrap_pyfunction!(device::devices, m)?)?;
    m.add_function(wrap_pyfunction!(device::cuda, m)?)?;
    m.add_function(wrap_pyfunction!(device::cuda_host, m)?)?;
    m.add_function(wrap_pyfunction!(device::cuda_managed, m)?)?;
    m.add_function(wrap_pyfunction!(device::device_of, m)?)?;
    share::register(m)?;
    Ok(())
}

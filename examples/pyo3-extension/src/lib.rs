//! An example extension module built on `arrow-device-pyo3`: every function
//! takes device arrays or streams from any producer (pyarrow, nanoarrow,
//! NumPy, polars, CuPy, PyTorch, `arrow_device`) and returns objects that
//! any consumer reads. Built with maturin and tested from Python
//! (`tests/test_example.py`); the repository's README walks through it.

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::{Array, Int64Array};
use arrow_device::device::cpu;
use arrow_device::{DeviceArray, Error as LibraryError, ValidationLevel};
use arrow_device_pyo3::{Error, ExtractOptions, PyDevice, PyDeviceArray, PyDeviceStream};
use arrow_schema::DataType;
use pyo3::prelude::*;

/// The array's type, length, null count and `(device type, device id)`.
#[pyfunction]
fn describe(array: PyDeviceArray) -> (String, usize, Option<usize>, (i32, i64)) {
    (
        array.data_type().to_string(),
        array.len(),
        array.null_count(),
        (array.device_type().0, array.device_id()),
    )
}

/// The array on `device` (a `Device` or a name such as "cuda:0"), copied
/// there unless it is there already.
#[pyfunction]
fn to_device(array: PyDeviceArray, device: PyDevice) -> Result<PyDeviceArray, Error> {
    Ok(array.to_device(&device)?.into())
}

/// `array + 1` for an int64 array on any device this library can copy
/// from: computed on the host, returned on the array's own device.
#[pyfunction]
fn add_one(py: Python<'_>, array: PyDeviceArray) -> Result<PyDeviceArray, Error> {
    if array.data_type() != &DataType::Int64 {
        return Err(LibraryError::NotSupported(format!(
            "add_one takes an int64 array, got {}",
            array.data_type()
        ))
        .into());
    }
    // Device copies wait for the device: not while holding the GIL.
    let result = py.detach(|| -> arrow_device::Result<DeviceArray> {
        let host = array.to_host()?;
        let values: &Int64Array = host.as_primitive::<Int64Type>();
        let plus_one: Int64Array = values.iter().map(|v| v.map(|v| v + 1)).collect();
        let on_host = DeviceArray::from_array(&plus_one);
        match array.device() {
            Some(device) if array.device_type() != on_host.device_type() => {
                on_host.to_device(device)
            }
            _ => Ok(on_host),
        }
    })?;
    Ok(result.into())
}

/// The int64 values 0..n, on the CPU or on `device`.
#[pyfunction]
#[pyo3(signature = (n, device = None))]
fn arange(n: i64, device: Option<PyDevice>) -> Result<PyDeviceArray, Error> {
    let values = Int64Array::from_iter_values(0..n.max(0));
    let array = DeviceArray::from_array(&values);
    Ok(match device {
        None => array.into(),
        Some(device) => array.to_device(&device)?.into(),
    })
}

/// The array after a full validation (every offset and value checked),
/// whatever it came from: `ValueError` naming the defect otherwise.
#[pyfunction]
fn validated(obj: &Bound<'_, PyAny>) -> PyResult<PyDeviceArray> {
    PyDeviceArray::extract_with(
        obj,
        &ExtractOptions::default().validate(ValidationLevel::Full),
    )
}

/// Rows and the sum of the first int64 column (or of the int64 batches)
/// of a stream, read batch by batch on the CPU.
#[pyfunction]
fn sum_stream(py: Python<'_>, stream: PyDeviceStream) -> Result<(usize, i64), Error> {
    let mut reader = stream.into_inner();
    let total = py.detach(move || -> arrow_device::Result<(usize, i64)> {
        let (mut rows, mut sum) = (0usize, 0i64);
        for batch in &mut reader {
            let host = batch?.to_host()?;
            rows += host.len();
            sum += int64_sum(host.as_ref())?;
        }
        Ok((rows, sum))
    })?;
    Ok(total)
}

fn int64_sum(array: &dyn Array) -> arrow_device::Result<i64> {
    let column: &dyn Array = match array.data_type() {
        DataType::Int64 => array,
        DataType::Struct(_) => array
            .as_struct()
            .columns()
            .iter()
            .find(|c| c.data_type() == &DataType::Int64)
            .map(Arc::as_ref)
            .ok_or_else(|| LibraryError::NotSupported("no int64 column in the batch".into()))?,
        other => {
            return Err(LibraryError::NotSupported(format!(
                "sum_stream sums int64 arrays or an int64 column, got {other}"
            )))
        }
    };
    Ok(column.as_primitive::<Int64Type>().iter().flatten().sum())
}

/// The stream with every batch copied to `device`, read lazily by whoever
/// consumes the result.
#[pyfunction]
fn stream_to(obj: &Bound<'_, PyAny>, device: PyDevice) -> PyResult<PyDeviceStream> {
    PyDeviceStream::extract_with(obj, &ExtractOptions::default().device(device.into_inner()))
}

/// The stream as it came: a pass-through, for checking that streams
/// survive the trip through an extension.
#[pyfunction]
fn passthrough(stream: PyDeviceStream) -> PyDeviceStream {
    stream
}

/// The CPU, as a `Device`.
#[pyfunction]
fn host() -> PyDevice {
    PyDevice::new(cpu())
}

/// Example functions over device arrays and streams.
#[pymodule]
fn arrow_device_example(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(describe, m)?)?;
    m.add_function(wrap_pyfunction!(to_device, m)?)?;
    m.add_function(wrap_pyfunction!(add_one, m)?)?;
    m.add_function(wrap_pyfunction!(arange, m)?)?;
    m.add_function(wrap_pyfunction!(validated, m)?)?;
    m.add_function(wrap_pyfunction!(sum_stream, m)?)?;
    m.add_function(wrap_pyfunction!(stream_to, m)?)?;
    m.add_function(wrap_pyfunction!(passthrough, m)?)?;
    m.add_function(wrap_pyfunction!(host, m)?)?;
    Ok(())
}

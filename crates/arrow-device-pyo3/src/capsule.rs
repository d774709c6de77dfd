//! PyCapsules of the Arrow PyCapsule interface (spec: PyCapsuleInterface.rst).
//!
//! Exported structs live inside the capsule; a consumer *moves* them out
//! (bitwise copy, source marked released), and the capsule's destructor
//! releases whatever is still there: an unconsumed capsule frees its struct.
//! Imported structs are moved out of the producer's capsule the same way, so
//! that its destructor finds them released.

use std::ffi::CStr;
use std::mem::ManuallyDrop;

use arrow_device::abi::{
    ArrowDeviceArray, ArrowDeviceArrayStream, FFI_ArrowArray, FFI_ArrowSchema,
};

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyCapsule, PyTuple, PyType};

/// Capsule names (spec: "PyCapsule Standard").
pub const ARROW_SCHEMA: &CStr = c"arrow_schema";
pub const ARROW_ARRAY: &CStr = c"arrow_array";
pub const ARROW_ARRAY_STREAM: &CStr = c"arrow_array_stream";
pub const ARROW_DEVICE_ARRAY: &CStr = c"arrow_device_array";
pub const ARROW_DEVICE_ARRAY_STREAM: &CStr = c"arrow_device_array_stream";

/// A capsule named `name` holding `value`, which it releases (by dropping
/// it) unless a consumer moved it out.
pub fn wrap<'py, T: Send + 'static>(
    py: Python<'py>,
    value: T,
    name: &'static CStr,
) -> PyResult<Bound<'py, PyCapsule>> {
    PyCapsule::new_with_value(py, value, name)
}

/// A struct whose release may wait on a device: a device array, a device
/// stream.
pub trait DeviceStruct: Send + 'static {
    /// Whether the struct was released (or moved out by a consumer).
    fn is_released(&self) -> bool;
}

impl DeviceStruct for ArrowDeviceArray {
    fn is_released(&self) -> bool {
        ArrowDeviceArray::is_released(self)
    }
}

impl DeviceStruct for ArrowDeviceArrayStream {
    fn is_released(&self) -> bool {
        ArrowDeviceArrayStream::is_released(self)
    }
}

/// A capsule's value whose destructor releases it with the GIL released:
/// releasing a device array waits for the work queued on its memory, and
/// that work may need the GIL (the emulated device's worker releasing a
/// NumPy source of the copy). The same pointer as `T` (transparent), so a
/// consumer finds the struct itself in the capsule.
#[repr(transparent)]
pub struct ReleasedDetached<T: DeviceStruct>(ManuallyDrop<T>);

/// The capsule's value, sent to the thread-free section that drops it.
struct InPlace<T>(*mut ManuallyDrop<T>);

// SAFETY: the pointer is only dereferenced by the one closure it is moved
// into, while the capsule's destructor (which owns the value) waits for it.
unsafe impl<T: Send> Send for InPlace<T> {}

impl<T: DeviceStruct> Drop for ReleasedDetached<T> {
    fn drop(&mut self) {
        if self.0.is_released() {
            // Moved out by a consumer (the common case): nothing to wait for.
            // SAFETY: dropped once, here.
            unsafe { ManuallyDrop::drop(&mut self.0) };
            return;
        }
        // Released where it is, not moved first: the struct's address is
        // what its release callback is given (and what a checker watching
        // the capsule's struct follows).
        let value = InPlace(&raw mut self.0);
        crate::errors::without_gil(move || {
            let value = value;
            // SAFETY: the capsule's value, alive until this destructor
            // returns, dropped once, here.
            unsafe { ManuallyDrop::drop(&mut *value.0) }
        });
    }
}

/// [`wrap`] for a device struct: an unconsumed capsule releases it without
/// holding the GIL ([`ReleasedDetached`]).
pub fn wrap_device<'py, T: DeviceStruct>(
    py: Python<'py>,
    value: T,
    name: &'static CStr,
) -> PyResult<Bound<'py, PyCapsule>> {
    PyCapsule::new_with_value(py, ReleasedDetached(ManuallyDrop::new(value)), name)
}

/// The struct pointer inside `obj`, which must be a capsule named `name`.
/// Says what was found otherwise: another type, another name.
pub fn pointer<T>(obj: &Bound<'_, PyAny>, name: &CStr) -> PyResult<*mut T> {
    // The name's text is built only for a message.
    let expected = || name.to_string_lossy();
    let capsule = obj.cast::<PyCapsule>().map_err(|_| {
        PyTypeError::new_err(format!(
            "expected a PyCapsule named '{}', got {}",
            expected(),
            type_name(obj)
        ))
    })?;
    // One check (name and pointer) on the common path; the message, which
    // reads the capsule's own name, only on the rare one.
    match capsule.pointer_checked(Some(name)) {
        Ok(pointer) => Ok(pointer.as_ptr().cast()),
        Err(_) => {
            let found = match capsule.name() {
                // SAFETY: the name is read and copied at once, with the GIL held.
                Ok(Some(found)) => format!("'{}'", unsafe { found.as_cstr() }.to_string_lossy()),
                _ => "no name".to_string(),
            };
            Err(PyValueError::new_err(format!(
                "expected a PyCapsule named '{}', got one with {found}",
                expected()
            )))
        }
    }
}

/// The two capsules a `__arrow_c_array__` / `__arrow_c_device_array__` call
/// returns: `(schema, array)`, checked to be capsules with those names
/// before either struct is moved out.
pub fn pair<S, A>(
    result: &Bound<'_, PyAny>,
    method: &str,
    array_name: &CStr,
) -> PyResult<(*mut S, *mut A)> {
    let tuple = result
        .cast::<PyTuple>()
        .ok()
        .filter(|t| t.len() == 2)
        .ok_or_else(|| {
            PyTypeError::new_err(format!(
                "{method}() must return a tuple of two PyCapsules (schema, array), got {}",
                type_name(result)
            ))
        })?;
    let schema = pointer::<S>(&tuple.get_item(0)?, ARROW_SCHEMA)?;
    let array = pointer::<A>(&tuple.get_item(1)?, array_name)?;
    Ok((schema, array))
}

/// A struct a consumer moves out of its capsule (spec: "Moving an array").
pub trait Movable: Sized {
    /// # Safety
    /// `src` points to a live struct of this type, left released.
    unsafe fn move_from(src: *mut Self) -> Self;
}

impl Movable for ArrowDeviceArray {
    unsafe fn move_from(src: *mut Self) -> Self {
        // SAFETY: forwarded.
        unsafe { ArrowDeviceArray::from_raw(src) }
    }
}

impl Movable for FFI_ArrowArray {
    unsafe fn move_from(src: *mut Self) -> Self {
        // SAFETY: forwarded.
        unsafe { FFI_ArrowArray::from_raw(src) }
    }
}

/// The structs of the `(schema, array)` capsules a protocol method
/// returned, moved out (the capsules' destructors then find them
/// released): checked by [`pair`] first.
pub fn take_pair<A: Movable>(
    result: &Bound<'_, PyAny>,
    method: &str,
    array_name: &CStr,
) -> PyResult<(A, FFI_ArrowSchema)> {
    let (schema, array) = pair::<FFI_ArrowSchema, A>(result, method, array_name)?;
    // SAFETY: live capsules with the protocol's names hold these structs.
    Ok(unsafe { (A::move_from(array), FFI_ArrowSchema::from_raw(schema)) })
}

/// `(schema, array)` as the tuple the protocol methods return.
pub fn tuple_of<'py>(
    py: Python<'py>,
    schema: Bound<'py, PyCapsule>,
    array: Bound<'py, PyCapsule>,
) -> PyResult<Bound<'py, PyTuple>> {
    PyTuple::new(py, [schema, array])
}

/// `int`, `pyarrow.lib.Array`: for messages.
pub fn type_name(obj: &Bound<'_, PyAny>) -> String {
    qualified_name(&obj.get_type())
}

/// A type's fully qualified name (`pyarrow.lib.Array`): for messages.
pub fn qualified_name(ty: &Bound<'_, PyType>) -> String {
    ty.fully_qualified_name()
        .map(|name| name.to_string())
        .unwrap_or_else(|_| "an object of unknown type".to_string())
}

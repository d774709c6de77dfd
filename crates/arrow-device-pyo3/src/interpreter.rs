//! Python work from code that may run while the interpreter shuts down.
//!
//! Structs this module hands to C consumers (streams, arrays, DLPack
//! tensors) may own Python objects: a stream's Python iterable, the
//! producer behind a CUDA Array Interface import, a stored exception. Their
//! release runs wherever the last owner lets go: a capsule destructor during
//! `Py_FinalizeEx` (module teardown, the final garbage collection), a C
//! consumer's thread, a device worker. CPython sets `Py_IsInitialized()` to
//! 0 when finalization starts (before the modules are torn down and before
//! daemon threads are stopped), and from then on attaching a thread to the
//! interpreter panics in PyO3 ("The Python interpreter is not initialized")
//! or, for another thread, may exit that thread from under Rust frames.
//!
//! So the rule, in one place: Python work in a release path goes through
//! [`attached`], and values that own Python references are wrapped in
//! [`PyOwned`], which drops them attached while the interpreter runs and
//! leaks them on purpose once it is finalizing (the process is exiting; the
//! operating system takes the memory back). Nothing here panics.

use std::mem::ManuallyDrop;
use std::ops::Deref;

use pyo3::prelude::*;

/// Whether Python objects may be touched now: `false` during and after
/// `Py_FinalizeEx`, and before the interpreter exists.
fn is_running() -> bool {
    // SAFETY: Py_IsInitialized reads one flag of the runtime and may be
    // called at any time, with or without an attached thread, also before
    // initialization and after finalization (Python C API, "Initialization,
    // Finalization, and Threads").
    unsafe { pyo3::ffi::Py_IsInitialized() != 0 }
}

/// Runs `f` attached to the interpreter; `None`, without running it, when
/// the interpreter is finalizing (or finalized) or this thread may not
/// attach now (during a garbage collector traversal).
///
/// A thread that is not Python's may still race with the start of
/// finalization between the check and the attach; CPython gives no way to
/// close that window from the stable ABI (`Py_IsFinalizing` is 3.13 and not
/// in the limited API), and PyO3's own `try_attach` has the same one.
pub fn attached<R>(f: impl FnOnce(Python<'_>) -> R) -> Option<R> {
    if !is_running() {
        return None;
    }
    Python::try_attach(f)
}

/// Drops `value`, which owns Python references, attached to the
/// interpreter (so that it, and what it keeps alive, goes at once, also
/// from a thread without the GIL); once the interpreter is finalizing,
/// leaks it instead: decrementing a reference may run Python code (a
/// generator's `finally`, a `__del__`) in a half torn-down interpreter.
pub fn drop_attached<T>(value: T) {
    let mut slot = Some(value);
    if attached(|_| drop(slot.take())).is_none() {
        // Deliberate leak: see above.
        std::mem::forget(slot);
    }
}

/// A value owning Python references (a `Py<...>`, a `PyErr`, a collection
/// of them) that may be dropped anywhere and at any time, interpreter exit
/// included: its drop goes through [`drop_attached`]. Reads through
/// `Deref`.
pub struct PyOwned<T>(ManuallyDrop<T>);

impl<T> PyOwned<T> {
    pub fn new(value: T) -> Self {
        PyOwned(ManuallyDrop::new(value))
    }
}

impl<T> Deref for PyOwned<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.0
    }
}

impl<T> Drop for PyOwned<T> {
    fn drop(&mut self) {
        // SAFETY: `drop` runs once, and nothing reads `self.0` after it.
        let value = unsafe { ManuallyDrop::take(&mut self.0) };
        drop_attached(value);
    }
}

//! The exported entry points. Each is a thin `extern "C"` shim (made by
//! [`entry_points!`]) over a Rust body returning [`Result`], run by
//! [`guard`], which applies the rules every call shares: no CUDA call from a
//! host function, injected faults, `cuInit` first, and no panic across the
//! C boundary.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use crate::control;
use crate::driver::{self, Context};
use crate::result::*;
use crate::stream::{Stream, IN_HOST_FUNCTION};

/// Defines `extern "C"` entry points whose bodies return `Result<()>`, and
/// `ENTRIES`, their names (for fault injection).
macro_rules! entry_points {
    ($( $(#[$doc:meta])* fn $name:ident($($arg:ident: $ty:ty),* $(,)?) $body:block )*) => {
        $(
            $(#[$doc])*
            #[no_mangle]
            pub unsafe extern "C" fn $name($($arg: $ty),*) -> crate::result::CUresult {
                crate::api::guard(stringify!($name), || $body)
            }
        )*
        /// The entry points this module exports.
        pub const ENTRIES: &[&str] = &[$(stringify!($name)),*];
    };
}

mod control_api;
mod device;
mod ipc;
mod memory;
mod module;
mod stream;

/// Whether the stand-in exports driver entry point `name`.
pub fn is_entry_point(name: &str) -> bool {
    [
        device::ENTRIES,
        ipc::ENTRIES,
        memory::ENTRIES,
        stream::ENTRIES,
        module::ENTRIES,
    ]
    .iter()
    .any(|entries| entries.contains(&name))
}

/// The calls allowed before `cuInit`.
const BEFORE_INIT: &[&str] = &[
    "cuInit",
    "cuDriverGetVersion",
    "cuGetErrorName",
    "cuGetErrorString",
];

/// Runs the body of entry point `name`.
pub fn guard(name: &'static str, body: impl FnOnce() -> Result<()>) -> CUresult {
    if IN_HOST_FUNCTION.with(|flag| flag.get()) {
        control::violation(
            format!(
                "{name} called from inside a host function (cuLaunchHostFunc: \"The host \
                 function must not make any CUDA API calls\")"
            ),
            false,
        );
        return CUDA_ERROR_NOT_PERMITTED;
    }
    if let Some(code) = control::count_call(name) {
        return code;
    }
    if !BEFORE_INIT.contains(&name) && driver::driver().is_err() {
        return CUDA_ERROR_NOT_INITIALIZED;
    }
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => CUDA_SUCCESS,
        Ok(Err(code)) => code,
        Err(_) => {
            eprintln!("cuda-standin: {name}: a bug in the stand-in (panic); CUDA_ERROR_UNKNOWN");
            CUDA_ERROR_UNKNOWN
        }
    }
}

/// Writes an out parameter; NULL is `CUDA_ERROR_INVALID_VALUE`.
///
/// # Safety
/// `out` is NULL or valid for a write of `T`.
pub unsafe fn out<T>(out: *mut T, value: T) -> Result<()> {
    if out.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    // SAFETY: non-NULL, valid per the caller.
    unsafe { out.write(value) };
    Ok(())
}

/// The stream `handle` names for work queued in `context`: 0 and 1 are its
/// legacy default stream, 2 the calling thread's per-thread stream; a
/// created stream must belong to `context` (`CUDA_ERROR_INVALID_HANDLE`).
pub fn stream_in(handle: usize, context: &Arc<Context>) -> Result<Arc<Stream>> {
    match handle {
        0 | 1 => Ok(Arc::clone(&context.legacy)),
        2 => Ok(context.per_thread()),
        _ => {
            let stream = driver::handles()
                .streams
                .get(&handle)
                .cloned()
                .ok_or(CUDA_ERROR_INVALID_HANDLE)?;
            if stream.context != context.handle {
                eprintln!(
                    "cuda-standin: stream {handle:#x} belongs to the context of device {}, not \
                     to the current one (device {})",
                    stream.ordinal, context.ordinal
                );
                return Err(CUDA_ERROR_INVALID_HANDLE);
            }
            Ok(stream)
        }
    }
}

/// The stream `handle` names, for calls that need no current context when
/// the handle is a created stream (synchronize, query).
pub fn stream_any(handle: usize) -> Result<Arc<Stream>> {
    match handle {
        0..=2 => stream_in(handle, &driver::current()?),
        _ => driver::handles()
            .streams
            .get(&handle)
            .cloned()
            .ok_or(CUDA_ERROR_INVALID_HANDLE),
    }
}

#[cfg(test)]
mod ipc_tests;
#[cfg(test)]
mod tests;

//! The bottom layer of the CUDA device: loading `libcuda` at run time,
//! `cuInit`, the primary context of each GPU, and turning driver failures
//! (and panics of the bindings) into messages.
//!
//! Every call into cudarc goes through [`call`] (or [`Context::run`], which
//! adds the context): cudarc panics when `libcuda` or one of its symbols is
//! missing, and a panic must never reach a C or Python caller of this crate,
//! so each call is made inside `catch_unwind`. The library's presence is
//! checked with `is_culib_present` before the first call, so the common case
//! (no driver installed) is an ordinary error, not a caught panic.

use std::collections::HashMap;
use std::ffi::c_void;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex, OnceLock};

use cudarc::driver::result::{self as cu, DriverError};
use cudarc::driver::sys;

/// What failed, for the caller to wrap in an [`Error`](crate::Error) that
/// names the device.
pub(super) type Failure = String;

/// The message when `libcuda` cannot be loaded.
pub(super) const NO_LIBRARY: &str = "CUDA driver library (libcuda.so) not found: dlopen of \
     libcuda.so, libcuda.so.1 and the versioned names cudarc tries failed; install the NVIDIA \
     driver or add its directory to LD_LIBRARY_PATH";

/// Runs `f`, describing a driver error and catching a panic of the bindings.
pub(super) fn call<T>(
    what: &str,
    f: impl FnOnce() -> Result<T, DriverError>,
) -> Result<T, Failure> {
    // Describing the error calls the driver too (cuGetErrorName), so it
    // happens inside the unwind guard.
    let guarded = catch_unwind(AssertUnwindSafe(|| {
        f().map_err(|e| format!("{what} failed: {}", describe(e)))
    }));
    guarded.unwrap_or_else(|payload| {
        let message = payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown panic payload".to_string());
        Err(format!("{what}: the CUDA bindings panicked: {message}"))
    })
}

/// `CUDA_ERROR_NAME (description)`.
fn describe(err: DriverError) -> String {
    let name = err
        .error_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|_| format!("CUresult {}", err.0 as i32));
    match err.error_string() {
        Ok(text) => format!("{name} ({})", text.to_string_lossy()),
        Err(_) => name,
    }
}

/// Whether `libcuda` can be loaded (without initialising it).
pub(super) fn library_present() -> bool {
    static PRESENT: OnceLock<bool> = OnceLock::new();
    *PRESENT.get_or_init(|| {
        // SAFETY: only dlopens (and closes again) the candidate names; running
        // libcuda's initialisers is what any use of CUDA does.
        catch_unwind(|| unsafe { sys::is_culib_present() }).unwrap_or(false)
    })
}

/// The number of GPUs, once `libcuda` is loaded and `cuInit` succeeded; the
/// reason otherwise. Computed once per process (`cuInit` reads
/// `CUDA_VISIBLE_DEVICES` once, too).
pub(super) fn driver() -> Result<i32, &'static str> {
    static DRIVER: OnceLock<Result<i32, Failure>> = OnceLock::new();
    DRIVER
        .get_or_init(|| {
            if !library_present() {
                return Err(NO_LIBRARY.to_string());
            }
            call("cuInit", cu::init)?;
            call("cuDeviceGetCount", cu::device::get_count)
        })
        .as_ref()
        .map(|count| *count)
        .map_err(|e| e.as_str())
}

/// The primary context of one GPU, retained for the life of the process:
/// memory and events handed to consumers may outlive every handle of ours,
/// and releasing the primary context would free them under the consumer.
#[derive(Debug)]
pub(super) struct Context {
    ordinal: i32,
    ctx: sys::CUcontext,
}

// SAFETY: a CUcontext is a driver handle, usable from any thread (the driver
// API is thread-safe); this type only passes it to the driver.
unsafe impl Send for Context {}
// SAFETY: as above.
unsafe impl Sync for Context {}

/// The primary context of GPU `ordinal` (which the caller checked against
/// the device count), retained on first use.
pub(super) fn context(ordinal: i32) -> Result<Arc<Context>, Failure> {
    static CONTEXTS: OnceLock<Mutex<HashMap<i32, Arc<Context>>>> = OnceLock::new();
    // Inserts are single statements: a poisoned lock still holds a valid map.
    let mut contexts = CONTEXTS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    if let Some(context) = contexts.get(&ordinal) {
        return Ok(Arc::clone(context));
    }
    let device = call("cuDeviceGet", || cu::device::get(ordinal))?;
    let ctx = call("cuDevicePrimaryCtxRetain", || {
        // SAFETY: `device` was just returned by cuDeviceGet.
        unsafe { cu::primary_ctx::retain(device) }
    })?;
    let context = Arc::new(Context { ordinal, ctx });
    contexts.insert(ordinal, Arc::clone(&context));
    Ok(context)
}

/// Pops the context pushed by [`Context::run`], also when unwinding.
struct Pushed;

impl Drop for Pushed {
    fn drop(&mut self) {
        let mut popped: sys::CUcontext = std::ptr::null_mut();
        // SAFETY: pops what `Context::run` pushed on this thread. A failure
        // would mean the stack was changed under us; nothing to do about it.
        let _ = catch_unwind(AssertUnwindSafe(|| unsafe {
            sys::cuCtxPopCurrent_v2(&mut popped)
        }));
    }
}

impl Context {
    /// The GPU ordinal.
    pub(super) fn ordinal(&self) -> i32 {
        self.ordinal
    }

    /// The raw context (for `cuMemcpyPeerAsync`).
    pub(super) fn raw(&self) -> sys::CUcontext {
        self.ctx
    }

    /// Runs `f` with this context current on the calling thread: pushed
    /// (and popped after) unless it is current already, so that a caller's
    /// own current context is left as it was.
    pub(super) fn run<T>(
        &self,
        what: &str,
        f: impl FnOnce() -> Result<T, DriverError>,
    ) -> Result<T, Failure> {
        // The context calls fail under their own names, prefixed with the
        // call they were for (formatted only on failure: this is every
        // driver call's path).
        let for_call = |e: Failure| format!("{what}: {e}");
        let current = call("cuCtxGetCurrent", cu::ctx::get_current).map_err(for_call)?;
        if current == Some(self.ctx) {
            return call(what, f);
        }
        call("cuCtxPushCurrent", || {
            // SAFETY: `self.ctx` is a primary context retained for the life
            // of the process.
            unsafe { sys::cuCtxPushCurrent_v2(self.ctx) }.result()
        })
        .map_err(for_call)?;
        let _pop = Pushed;
        call(what, f)
    }
}

/// A pointer as the driver's `CUdeviceptr` (unified addressing: host and
/// device pointers share one 64-bit space).
pub(super) fn address(ptr: *const c_void) -> sys::CUdeviceptr {
    ptr as usize as sys::CUdeviceptr
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_in_the_bindings_becomes_an_error_naming_the_call() {
        let failure =
            call::<()>("cuMemAlloc", || panic!("Missing symbol cuMemAlloc_v2")).unwrap_err();
        assert_eq!(
            failure,
            "cuMemAlloc: the CUDA bindings panicked: Missing symbol cuMemAlloc_v2"
        );
    }

    #[test]
    fn a_successful_call_returns_its_value() {
        assert_eq!(call("nothing", || Ok(7)), Ok(7));
    }
}

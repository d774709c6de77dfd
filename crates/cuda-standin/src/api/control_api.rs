//! The stand-in's own exports: accounting and fault injection for tests.
//! They are not driver calls: no `cuInit` needed, never faulted.

use std::ffi::{c_char, c_uint, CStr};

use crate::control::{self, CuStandinCounts, CuStandinIpcCounts};
use crate::result::*;

/// Fills `*counts` with the live objects.
///
/// # Safety
/// `counts` is NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn cuStandinCounts(counts: *mut CuStandinCounts) -> CUresult {
    // SAFETY: per this function's contract.
    match unsafe { super::out(counts, control::snapshot()) } {
        Ok(()) => CUDA_SUCCESS,
        Err(code) => code,
    }
}

/// Fills `*counts` with the interprocess objects open in this process.
///
/// # Safety
/// `counts` is NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn cuStandinIpcCounts(counts: *mut CuStandinIpcCounts) -> CUresult {
    // SAFETY: per this function's contract.
    match unsafe { super::out(counts, control::snapshot_ipc()) } {
        Ok(()) => CUDA_SUCCESS,
        Err(code) => code,
    }
}

/// Makes the `nth` call (1: the next) of `entry` fail with `code`, once.
///
/// # Safety
/// `entry` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn cuStandinInjectFault(
    entry: *const c_char,
    nth: c_uint,
    code: CUresult,
) -> CUresult {
    if entry.is_null() || nth == 0 || !is_known(code) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    // SAFETY: per this function's contract.
    let Ok(name) = unsafe { CStr::from_ptr(entry) }.to_str() else {
        return CUDA_ERROR_INVALID_VALUE;
    };
    if !super::is_entry_point(name) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    control::inject(name, nth, code);
    CUDA_SUCCESS
}

/// Forgets the faults not yet triggered.
#[no_mangle]
pub extern "C" fn cuStandinClearFaults() -> CUresult {
    control::clear_faults();
    CUDA_SUCCESS
}

/// How often `entry` has been called.
///
/// # Safety
/// `entry` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn cuStandinCalls(entry: *const c_char) -> u64 {
    if entry.is_null() {
        return 0;
    }
    // SAFETY: per this function's contract.
    unsafe { CStr::from_ptr(entry) }
        .to_str()
        .map_or(0, control::calls_of)
}

/// The last violation's message, NUL-terminated and truncated to `len`.
///
/// # Safety
/// `buf` is valid for `len` bytes of writes.
#[no_mangle]
pub unsafe extern "C" fn cuStandinLastViolation(buf: *mut c_char, len: usize) -> CUresult {
    let Some(message) = control::last_violation_message() else {
        return CUDA_ERROR_NOT_FOUND;
    };
    if buf.is_null() || len == 0 {
        return CUDA_ERROR_INVALID_VALUE;
    }
    let n = message.len().min(len - 1);
    // SAFETY: per this function's contract; `n + 1 <= len`.
    unsafe {
        std::ptr::copy_nonoverlapping(message.as_ptr().cast::<c_char>(), buf, n);
        buf.add(n).write(0);
    }
    CUDA_SUCCESS
}

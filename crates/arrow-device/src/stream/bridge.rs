//! Bridges between arrow-rs' C stream ([`FFI_ArrowArrayStream`], the C
//! stream interface) and the device stream, for CPU data, both ways.
//!
//! Both bridges are zero-copy and do not import anything: they wrap the
//! foreign stream's callbacks, so each array passes through untouched and
//! the final consumer validates it as it would have validated the original.
//!
//! * [`device_stream_from_ffi`]: a C stream becomes a CPU device stream (each
//!   `ArrowArray` arrives as an `ArrowDeviceArray` with `device_id` -1 and no
//!   `sync_event`).
//! * [`ffi_stream_from_device`]: a CPU device stream becomes a C stream, for
//!   consumers that only know the C stream interface (arrow-rs'
//!   `ArrowArrayStreamReader`, pyarrow, polars, duckdb). A batch that is not
//!   CPU data fails its `get_next` with `EINVAL`: a C stream consumer cannot
//!   honour a `sync_event` or read device memory. Streams on other devices
//!   are converted with [`DeviceStreamReader::into_host_reader`]
//!   (super::DeviceStreamReader::into_host_reader) and arrow-rs'
//!   `FFI_ArrowArrayStream::new`, which copies each batch to the host.
//!
//! ```
//! use std::sync::Arc;
//! use arrow_array::ffi_stream::{ArrowArrayStreamReader, FFI_ArrowArrayStream};
//! use arrow_array::{ArrayRef, Int64Array, RecordBatch, RecordBatchIterator};
//! use arrow_device::stream::{device_stream_from_ffi, ffi_stream_from_device};
//!
//! let batch = RecordBatch::try_from_iter([("v", Arc::new(Int64Array::from(vec![7, 8])) as ArrayRef)])?;
//! let reader = RecordBatchIterator::new([Ok(batch.clone())], batch.schema());
//! let c_stream = FFI_ArrowArrayStream::new(Box::new(reader));
//!
//! // C stream -> device stream -> C stream, read back by arrow-rs.
//! let device_stream = device_stream_from_ffi(c_stream)?;
//! let back = ffi_stream_from_device(device_stream)?;
//! let batches = ArrowArrayStreamReader::try_new(back)?.collect::<Result<Vec<_>, _>>()?;
//! assert_eq!(batches, [batch]);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::ffi::{c_char, c_int, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr;

use crate::abi::{
    raw, ArrowDeviceArray, ArrowDeviceArrayStream, DeviceType, FFI_ArrowArray,
    FFI_ArrowArrayStream, FFI_ArrowSchema,
};
use crate::error::{Error, Result};
use crate::stream::export::message_cstring;
use crate::stream::stream_error;

/// Wraps a C stream as a CPU device stream, zero-copy. Fails when the C
/// stream is released or lacks a callback.
pub fn device_stream_from_ffi(stream: FFI_ArrowArrayStream) -> Result<ArrowDeviceArrayStream> {
    let mut private = Box::new(Bridge {
        inner: stream,
        last_error: None,
    });
    let inner = raw::stream_mut(&mut private.inner);
    check_callbacks(
        inner.release.is_some(),
        [
            inner.get_schema.is_some(),
            inner.get_next.is_some(),
            inner.get_last_error.is_some(),
        ],
    )?;
    Ok(ArrowDeviceArrayStream {
        device_type: DeviceType::CPU,
        get_schema: Some(from_ffi::get_schema),
        get_next: Some(from_ffi::get_next),
        get_last_error: Some(from_ffi::get_last_error),
        release: Some(from_ffi::release),
        private_data: Box::into_raw(private).cast(),
    })
}

/// Wraps a CPU device stream as a C stream, zero-copy. Fails when the device
/// stream is not on the CPU, is released, or lacks a callback.
pub fn ffi_stream_from_device(stream: ArrowDeviceArrayStream) -> Result<FFI_ArrowArrayStream> {
    check_callbacks(
        !stream.is_released(),
        [
            stream.get_schema.is_some(),
            stream.get_next.is_some(),
            stream.get_last_error.is_some(),
        ],
    )?;
    if stream.device_type != DeviceType::CPU {
        return Err(Error::NotSupported(format!(
            "a C stream carries CPU data only, the device stream is on {}: read it with DeviceStreamReader::into_host_reader",
            stream.device_type
        )));
    }
    let private = Box::new(Bridge {
        inner: stream,
        last_error: None,
    });
    let mut out = FFI_ArrowArrayStream::empty();
    let fields = raw::stream_mut(&mut out);
    fields.get_schema = Some(to_ffi::get_schema);
    fields.get_next = Some(to_ffi::get_next);
    fields.get_last_error = Some(to_ffi::get_last_error);
    fields.release = Some(to_ffi::release);
    fields.private_data = Box::into_raw(private).cast();
    Ok(out)
}

fn check_callbacks(live: bool, present: [bool; 3]) -> Result<()> {
    if !live {
        return Err(stream_error("the stream was released (release is NULL)"));
    }
    if present.contains(&false) {
        return Err(stream_error(
            "the stream's get_schema, get_next and get_last_error must all be non-NULL",
        ));
    }
    Ok(())
}

/// The private data of both bridges: the wrapped stream (released when the
/// bridge is) and the bridge's own last error, set when a check of the
/// bridge failed rather than a call of the wrapped stream.
struct Bridge<S> {
    inner: S,
    last_error: Option<CString>,
}

/// Runs `call` on the bridge behind `private_data`: NULL or released is
/// `EINVAL`; a panic becomes `EIO` with a message.
///
/// # Safety
/// `private_data` is NULL or the `Bridge<S>` this module leaked for the
/// stream, alive until its release.
unsafe fn with_bridge<S>(
    released: bool,
    private_data: *mut std::ffi::c_void,
    call: impl FnOnce(&mut Bridge<S>) -> c_int,
) -> c_int {
    if released || private_data.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: per the contract; the consumer calls one callback at a time.
    let bridge = unsafe { &mut *private_data.cast::<Bridge<S>>() };
    bridge.last_error = None;
    match catch_unwind(AssertUnwindSafe(|| call(bridge))) {
        Ok(code) => code,
        Err(payload) => {
            let err = Error::from_panic(payload);
            bridge.last_error = Some(message_cstring(&err.to_string()));
            err.errno()
        }
    }
}

impl<S> Bridge<S> {
    fn fail(&mut self, err: Error) -> c_int {
        self.last_error = Some(message_cstring(&err.to_string()));
        err.errno()
    }

    /// The bridge's own error if the last call set one, else the wrapped
    /// stream's.
    fn last_error(&mut self, inner: impl FnOnce(&mut S) -> *const c_char) -> *const c_char {
        match &self.last_error {
            Some(message) => message.as_ptr(),
            None => inner(&mut self.inner),
        }
    }
}

/// Releases a bridge: marks the outer struct released first, then drops the
/// private data (which releases the wrapped stream).
///
/// # Safety
/// As for [`with_bridge`].
unsafe fn release_bridge<S>(private_data: *mut std::ffi::c_void) {
    if private_data.is_null() {
        return;
    }
    // SAFETY: the Box leaked when the bridge was made, taken back once: the
    // caller has already cleared `release` and `private_data`.
    let _ = catch_unwind(AssertUnwindSafe(|| {
        drop(unsafe { Box::from_raw(private_data.cast::<Bridge<S>>()) })
    }));
}

/// C stream -> device stream callbacks.
mod from_ffi {
    use super::*;

    type B = Bridge<FFI_ArrowArrayStream>;

    /// # Safety
    /// `stream` is NULL or a stream made by `device_stream_from_ffi`.
    unsafe fn with(
        stream: *mut ArrowDeviceArrayStream,
        call: impl FnOnce(&mut B) -> c_int,
    ) -> c_int {
        // SAFETY: per the contract.
        match unsafe { stream.as_ref() } {
            // SAFETY: our private data while the stream is live.
            Some(s) => unsafe { with_bridge(s.release.is_none(), s.private_data, call) },
            None => libc::EINVAL,
        }
    }

    pub(super) unsafe extern "C" fn get_schema(
        stream: *mut ArrowDeviceArrayStream,
        out: *mut FFI_ArrowSchema,
    ) -> c_int {
        // SAFETY: the consumer passes our stream.
        unsafe {
            with(stream, |bridge| {
                let inner = raw::stream_mut(&mut bridge.inner);
                match inner.get_schema {
                    // SAFETY: the wrapped producer's callback on its stream;
                    // `out` is the consumer's, passed through.
                    Some(get_schema) => get_schema(inner, out),
                    None => bridge.fail(stream_error("the wrapped stream was released")),
                }
            })
        }
    }

    pub(super) unsafe extern "C" fn get_next(
        stream: *mut ArrowDeviceArrayStream,
        out: *mut ArrowDeviceArray,
    ) -> c_int {
        // SAFETY: the consumer passes our stream.
        unsafe {
            with(stream, |bridge| {
                if out.is_null() {
                    return bridge.fail(stream_error("get_next's out is NULL"));
                }
                let inner = raw::stream_mut(&mut bridge.inner);
                let Some(get_next) = inner.get_next else {
                    return bridge.fail(stream_error("the wrapped stream was released"));
                };
                let mut array = FFI_ArrowArray::empty();
                // SAFETY: the wrapped producer's callback on its stream.
                let code = get_next(inner, &mut array);
                if code == 0 {
                    // A released `array` (the end) stays released: the
                    // device struct's release is the embedded one.
                    // SAFETY: `out` is non-NULL and the consumer's to fill.
                    ptr::write(
                        out,
                        ArrowDeviceArray {
                            array,
                            ..ArrowDeviceArray::empty()
                        },
                    );
                }
                code
            })
        }
    }

    pub(super) unsafe extern "C" fn get_last_error(
        stream: *mut ArrowDeviceArrayStream,
    ) -> *const c_char {
        let read = || {
            // SAFETY: the consumer passes our stream.
            let s = unsafe { stream.as_ref() }?;
            if s.release.is_none() || s.private_data.is_null() {
                return None;
            }
            // SAFETY: our private data while the stream is live.
            let bridge = unsafe { &mut *s.private_data.cast::<B>() };
            Some(bridge.last_error(|inner| {
                let inner = raw::stream_mut(inner);
                match inner.get_last_error {
                    // SAFETY: the wrapped producer's callback on its stream.
                    Some(get_last_error) => unsafe { get_last_error(inner) },
                    None => ptr::null(),
                }
            }))
        };
        catch_unwind(read).ok().flatten().unwrap_or(ptr::null())
    }

    pub(super) unsafe extern "C" fn release(stream: *mut ArrowDeviceArrayStream) {
        // SAFETY: the consumer passes our stream.
        let Some(s) = (unsafe { stream.as_mut() }) else {
            return;
        };
        if s.release.is_none() {
            return;
        }
        // Field by field: assigning a whole struct would drop (and so
        // release) the old value.
        let private_data = std::mem::replace(&mut s.private_data, ptr::null_mut());
        s.get_schema = None;
        s.get_next = None;
        s.get_last_error = None;
        s.release = None;
        // SAFETY: our private data, taken once (the struct is now released).
        unsafe { release_bridge::<FFI_ArrowArrayStream>(private_data) };
    }
}

/// Device stream -> C stream callbacks.
mod to_ffi {
    use super::*;

    type B = Bridge<ArrowDeviceArrayStream>;

    /// # Safety
    /// `stream` is NULL or a stream made by `ffi_stream_from_device`.
    unsafe fn with(
        stream: *mut raw::ArrowArrayStream,
        call: impl FnOnce(&mut B) -> c_int,
    ) -> c_int {
        // SAFETY: per the contract.
        match unsafe { stream.as_ref() } {
            // SAFETY: our private data while the stream is live.
            Some(s) => unsafe { with_bridge(s.release.is_none(), s.private_data, call) },
            None => libc::EINVAL,
        }
    }

    pub(super) unsafe extern "C" fn get_schema(
        stream: *mut raw::ArrowArrayStream,
        out: *mut FFI_ArrowSchema,
    ) -> c_int {
        // SAFETY: the consumer passes our stream.
        unsafe {
            with(stream, |bridge| match bridge.inner.get_schema {
                // SAFETY: the wrapped producer's callback on its stream.
                Some(get_schema) => get_schema(&mut bridge.inner, out),
                None => bridge.fail(stream_error("the wrapped stream was released")),
            })
        }
    }

    pub(super) unsafe extern "C" fn get_next(
        stream: *mut raw::ArrowArrayStream,
        out: *mut FFI_ArrowArray,
    ) -> c_int {
        // SAFETY: the consumer passes our stream.
        unsafe {
            with(stream, |bridge| {
                if out.is_null() {
                    return bridge.fail(stream_error("get_next's out is NULL"));
                }
                let Some(get_next) = bridge.inner.get_next else {
                    return bridge.fail(stream_error("the wrapped stream was released"));
                };
                let mut array = ArrowDeviceArray::empty();
                // SAFETY: the wrapped producer's callback on its stream.
                let code = get_next(&mut bridge.inner, &mut array);
                if code != 0 {
                    return code;
                }
                if !array.is_released()
                    && (array.device_type != DeviceType::CPU || !array.sync_event.is_null())
                {
                    // `array` is released when it drops here.
                    return bridge.fail(stream_error(format!(
                            "a C stream carries CPU arrays without a sync_event, the device stream sent one on {} with sync_event {:?}",
                            array.device_type, array.sync_event
                        ),
                    ));
                }
                // Moving the embedded array out leaves a released device
                // struct behind, whose drop does nothing.
                // SAFETY: `out` is non-NULL and the consumer's to fill.
                ptr::write(
                    out,
                    std::mem::replace(&mut array.array, FFI_ArrowArray::empty()),
                );
                0
            })
        }
    }

    pub(super) unsafe extern "C" fn get_last_error(
        stream: *mut raw::ArrowArrayStream,
    ) -> *const c_char {
        let read = || {
            // SAFETY: the consumer passes our stream.
            let s = unsafe { stream.as_ref() }?;
            if s.release.is_none() || s.private_data.is_null() {
                return None;
            }
            // SAFETY: our private data while the stream is live.
            let bridge = unsafe { &mut *s.private_data.cast::<B>() };
            Some(bridge.last_error(|inner| match inner.get_last_error {
                // SAFETY: the wrapped producer's callback on its stream.
                Some(get_last_error) => unsafe { get_last_error(inner) },
                None => ptr::null(),
            }))
        };
        catch_unwind(read).ok().flatten().unwrap_or(ptr::null())
    }

    pub(super) unsafe extern "C" fn release(stream: *mut raw::ArrowArrayStream) {
        // SAFETY: the consumer passes our stream.
        let Some(s) = (unsafe { stream.as_mut() }) else {
            return;
        };
        if s.release.is_none() {
            return;
        }
        let private_data = std::mem::replace(&mut s.private_data, ptr::null_mut());
        s.get_schema = None;
        s.get_next = None;
        s.get_last_error = None;
        s.release = None;
        // SAFETY: our private data, taken once (the struct is now released).
        unsafe { release_bridge::<ArrowDeviceArrayStream>(private_data) };
    }
}

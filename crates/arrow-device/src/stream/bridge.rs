//! Bridges between arrow-rs' C stream ([`FFI_ArrowArrayStream`], the C
//! stream interface) and the device stream, for CPU data, both ways.
//!
//! Both bridges are zero-copy and do not import anything: they wrap the
//! foreign stream's callbacks, so each array passes through untouched and
//! the final consumer validates it as it would have validated the original.
//!
//! * `ArrowDeviceArrayStream::try_from(FFI_ArrowArrayStream)`: a C stream
//!   becomes a CPU device stream (each
//!   `ArrowArray` arrives as an `ArrowDeviceArray` with `device_id` -1 and no
//!   `sync_event`).
//! * `FFI_ArrowArrayStream::try_from(ArrowDeviceArrayStream)`: a CPU device
//!   stream becomes a C stream, for
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
//! use arrow_device::ArrowDeviceArrayStream;
//!
//! let batch = RecordBatch::try_from_iter([("v", Arc::new(Int64Array::from(vec![7, 8])) as ArrayRef)])?;
//! let reader = RecordBatchIterator::new([Ok(batch.clone())], batch.schema());
//! let c_stream = FFI_ArrowArrayStream::new(Box::new(reader));
//!
//! // C stream -> device stream -> C stream, read back by arrow-rs.
//! let device_stream = ArrowDeviceArrayStream::try_from(c_stream)?;
//! let back = FFI_ArrowArrayStream::try_from(device_stream)?;
//! let batches = ArrowArrayStreamReader::try_new(back)?.collect::<Result<Vec<_>, _>>()?;
//! assert_eq!(batches, [batch]);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::ffi::{c_char, c_int, c_void, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr;

use crate::abi::{
    raw, ArrowDeviceArray, ArrowDeviceArrayStream, DeviceType, FFI_ArrowArray,
    FFI_ArrowArrayStream, FFI_ArrowSchema,
};
use crate::error::{Error, Result};
use crate::stream::export::error_cstring;
use crate::stream::{check_stream_callbacks, stream_error};

/// Wraps a C stream as a CPU device stream, zero-copy. Fails when the C
/// stream is released or lacks a callback (the stream is then released).
impl TryFrom<FFI_ArrowArrayStream> for ArrowDeviceArrayStream {
    type Error = Error;

    fn try_from(stream: FFI_ArrowArrayStream) -> Result<ArrowDeviceArrayStream> {
        device_stream_from_ffi(stream)
    }
}

/// Wraps a CPU device stream as a C stream, zero-copy. Fails when the device
/// stream is not on the CPU, is released, or lacks a callback (the stream is
/// then released).
impl TryFrom<ArrowDeviceArrayStream> for FFI_ArrowArrayStream {
    type Error = Error;

    fn try_from(stream: ArrowDeviceArrayStream) -> Result<FFI_ArrowArrayStream> {
        ffi_stream_from_device(stream)
    }
}

fn device_stream_from_ffi(stream: FFI_ArrowArrayStream) -> Result<ArrowDeviceArrayStream> {
    let private = Box::new(Bridge {
        inner: stream,
        last_error: None,
    });
    let inner = raw::stream(&private.inner);
    check_stream_callbacks(
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
        get_last_error: Some(get_last_error::<ArrowDeviceArrayStream, FFI_ArrowArrayStream>),
        release: Some(release::<ArrowDeviceArrayStream, FFI_ArrowArrayStream>),
        private_data: Box::into_raw(private).cast(),
    })
}

fn ffi_stream_from_device(stream: ArrowDeviceArrayStream) -> Result<FFI_ArrowArrayStream> {
    check_stream_callbacks(
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
    // SAFETY: our own callbacks, and `private_data` the box they release.
    let fields = unsafe { raw::stream_mut(&mut out) };
    fields.get_schema = Some(to_ffi::get_schema);
    fields.get_next = Some(to_ffi::get_next);
    fields.get_last_error = Some(get_last_error::<raw::ArrowArrayStream, ArrowDeviceArrayStream>);
    fields.release = Some(release::<raw::ArrowArrayStream, ArrowDeviceArrayStream>);
    fields.private_data = Box::into_raw(private).cast();
    Ok(out)
}

/// The private data of both bridges: the wrapped stream (released when the
/// bridge is) and the bridge's own last error, set when a check of the
/// bridge failed rather than a call of the wrapped stream.
struct Bridge<S> {
    inner: S,
    last_error: Option<CString>,
}

impl<S> Bridge<S> {
    fn fail(&mut self, err: Error) -> c_int {
        self.last_error = Some(error_cstring(&err));
        err.errno()
    }

    /// Calls the wrapped producer's `get_schema` into `out` and hands on its
    /// answer, unless it returned 0 without writing a schema: for the
    /// device-to-C bridge, whose consumers take a successful call's schema
    /// as live (arrow-rs' reader asserts on it), so a released one is
    /// refused here, with a message.
    ///
    /// The callback's stream is `view(&mut self.inner)`, taken here: a
    /// pointer into the bridge that the caller took before this call's
    /// `&mut self` would be invalid during it (Stacked Borrows; Miri
    /// reports the wrapped producer's read through it).
    ///
    /// # Safety
    /// `get_schema` is the wrapped producer's callback on the stream `view`
    /// returns; `out` is the consumer's.
    unsafe fn get_schema<W>(
        &mut self,
        get_schema: unsafe extern "C" fn(*mut W, *mut FFI_ArrowSchema) -> c_int,
        view: impl FnOnce(&mut S) -> &mut W,
        out: *mut FFI_ArrowSchema,
    ) -> c_int {
        if out.is_null() {
            return self.fail(stream_error("get_schema's out is NULL"));
        }
        let inner: *mut W = view(&mut self.inner);
        // SAFETY: per the contract.
        let code = unsafe { get_schema(inner, out) };
        // SAFETY: `out` is non-NULL and, after the call, a schema struct.
        if code == 0 && raw::schema(unsafe { &*out }).release.is_none() {
            return self.fail(stream_error(
                "the wrapped stream's get_schema returned 0 but left the schema released",
            ));
        }
        code
    }
}

/// What the callbacks both bridges share need of a stream struct: the C
/// stream's and the device stream's have the same members, of other types.
trait StreamStruct {
    fn live_private_data(&self) -> Option<*mut c_void>;
    /// Clears the callbacks and `private_data` (returned), field by field:
    /// assigning a whole struct would drop, and so release, the old value.
    fn mark_released(&mut self) -> *mut c_void;
    /// # Safety
    /// The struct is a live stream.
    unsafe fn last_error(&mut self) -> *const c_char;
}

macro_rules! stream_struct {
    ($t:ty) => {
        impl StreamStruct for $t {
            fn live_private_data(&self) -> Option<*mut c_void> {
                (self.release.is_some() && !self.private_data.is_null())
                    .then_some(self.private_data)
            }

            fn mark_released(&mut self) -> *mut c_void {
                self.get_schema = None;
                self.get_next = None;
                self.get_last_error = None;
                self.release = None;
                std::mem::replace(&mut self.private_data, ptr::null_mut())
            }

            unsafe fn last_error(&mut self) -> *const c_char {
                match self.get_last_error {
                    // SAFETY: the stream's own callback, on it while live.
                    Some(get_last_error) => unsafe { get_last_error(self) },
                    None => ptr::null(),
                }
            }
        }
    };
}

stream_struct!(ArrowDeviceArrayStream);
stream_struct!(raw::ArrowArrayStream);

/// arrow-rs keeps the fields private: through the public-field mirror.
impl StreamStruct for FFI_ArrowArrayStream {
    fn live_private_data(&self) -> Option<*mut c_void> {
        raw::stream(self).live_private_data()
    }

    fn mark_released(&mut self) -> *mut c_void {
        // SAFETY: a NULL `release` (what marking writes) is a valid,
        // released struct.
        unsafe { raw::stream_mut(self) }.mark_released()
    }

    unsafe fn last_error(&mut self) -> *const c_char {
        // SAFETY: forwarded from the caller.
        unsafe { raw::stream_mut(self).last_error() }
    }
}

/// Runs `call` on the bridge behind `stream`: NULL or released is `EINVAL`;
/// a panic becomes `EIO` with a message.
///
/// # Safety
/// `stream` is NULL or a stream made by this module with a `Bridge<I>`.
unsafe fn with_bridge<O: StreamStruct, I>(
    stream: *mut O,
    call: impl FnOnce(&mut Bridge<I>) -> c_int,
) -> c_int {
    // SAFETY: per the contract.
    let Some(private_data) = (unsafe { stream.as_ref() }).and_then(O::live_private_data) else {
        return libc::EINVAL;
    };
    // SAFETY: our private data while the stream is live; the consumer calls
    // one callback at a time.
    let bridge = unsafe { &mut *private_data.cast::<Bridge<I>>() };
    bridge.last_error = None;
    match catch_unwind(AssertUnwindSafe(|| call(bridge))) {
        Ok(code) => code,
        Err(payload) => bridge.fail(Error::from_panic(payload)),
    }
}

/// `get_last_error` of both bridges: the bridge's own error if the last call
/// set one, else the wrapped stream's.
///
/// # Safety
/// As for [`with_bridge`].
unsafe extern "C" fn get_last_error<O: StreamStruct, I: StreamStruct>(
    stream: *mut O,
) -> *const c_char {
    let read = || {
        // SAFETY: the consumer passes our stream.
        let private_data = unsafe { stream.as_ref() }?.live_private_data()?;
        // SAFETY: our private data while the stream is live.
        let bridge = unsafe { &mut *private_data.cast::<Bridge<I>>() };
        Some(match &bridge.last_error {
            Some(message) => message.as_ptr(),
            // SAFETY: the wrapped stream is live until the bridge's release.
            None => unsafe { bridge.inner.last_error() },
        })
    };
    catch_unwind(AssertUnwindSafe(read))
        .ok()
        .flatten()
        .unwrap_or(ptr::null())
}

/// `release` of both bridges: marks the outer struct released first, then
/// drops the private data (which releases the wrapped stream).
///
/// # Safety
/// As for [`with_bridge`].
unsafe extern "C" fn release<O: StreamStruct, I>(stream: *mut O) {
    // SAFETY: the consumer passes our stream.
    let Some(s) = (unsafe { stream.as_mut() }) else {
        return;
    };
    if s.live_private_data().is_none() {
        return;
    }
    let private_data = s.mark_released();
    // SAFETY: the Box leaked when the bridge was made, taken back once (the
    // struct is now released). A panic in the wrapped stream's release has
    // nowhere to go and is swallowed rather than unwound into C.
    let _ = catch_unwind(AssertUnwindSafe(|| {
        drop(unsafe { Box::from_raw(private_data.cast::<Bridge<I>>()) })
    }));
}

/// C stream -> device stream callbacks.
mod from_ffi {
    use super::*;

    type B = Bridge<FFI_ArrowArrayStream>;

    pub(super) unsafe extern "C" fn get_schema(
        stream: *mut ArrowDeviceArrayStream,
        out: *mut FFI_ArrowSchema,
    ) -> c_int {
        // SAFETY: the consumer passes our stream.
        unsafe {
            with_bridge(stream, |bridge: &mut B| {
                // Passed through as it comes: the device stream's consumer
                // checks the schema it gets (ours refuses a released one
                // with the invalid-data error its callers expect).
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
            with_bridge(stream, |bridge: &mut B| {
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
}

/// Device stream -> C stream callbacks.
mod to_ffi {
    use super::*;

    type B = Bridge<ArrowDeviceArrayStream>;

    pub(super) unsafe extern "C" fn get_schema(
        stream: *mut raw::ArrowArrayStream,
        out: *mut FFI_ArrowSchema,
    ) -> c_int {
        // SAFETY: the consumer passes our stream.
        unsafe {
            with_bridge(stream, |bridge: &mut B| match bridge.inner.get_schema {
                // SAFETY: the wrapped producer's callback on its stream.
                Some(get_schema) => bridge.get_schema(get_schema, |s| s, out),
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
            with_bridge(stream, |bridge: &mut B| {
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
                    )));
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
}

//! Exporting a Rust source of batches as an `ArrowDeviceArrayStream`.
//!
//! * [`export_reader`]: any arrow-rs [`RecordBatchReader`], zero-copy on the
//!   CPU (`device_type` CPU).
//! * [`export_reader_to`]: the same, each batch copied onto a device as it is
//!   pulled (`device_type` the device's, each array with its own
//!   `sync_event`).
//! * [`export_device_arrays`]: an iterator of [`DeviceArray`]s, exported
//!   zero-copy on whatever device they live on.
//!
//! The callbacks follow the spec ("The ArrowDeviceArrayStream structure"):
//! `get_schema` and `get_next` return 0 or an errno-compatible code; the end
//! of the stream is a released array; `get_last_error` returns the failed
//! call's message (the Rust error's text), valid until the next call; a call
//! on a released stream returns `EINVAL` and never touches freed memory.
//! Every batch is checked against the stream before it leaves: a batch on
//! another device type, or of another type than `get_schema`'s, fails that
//! `get_next` with `EINVAL` instead of reaching the consumer. After a failed
//! `get_next` the stream keeps failing with the same code.
//!
//! ```
//! use std::sync::Arc;
//! use arrow_array::{ArrayRef, Int32Array, RecordBatch, RecordBatchIterator};
//! use arrow_device::stream::{export_reader, DeviceStreamReader};
//! use arrow_device::{DeviceType, ValidationLevel};
//!
//! let batch = RecordBatch::try_from_iter([(
//!     "x",
//!     Arc::new(Int32Array::from(vec![1, 2, 3])) as ArrayRef,
//! )])?;
//! let reader = RecordBatchIterator::new([Ok(batch.clone()), Ok(batch.clone())], batch.schema());
//! let stream = export_reader(reader)?;
//! assert_eq!(stream.device_type(), DeviceType::CPU);
//!
//! // SAFETY: the stream comes from this crate's exporter.
//! let imported = unsafe { DeviceStreamReader::try_new(stream, ValidationLevel::Default) }?;
//! let batches = imported.into_record_batch_reader()?.collect::<Result<Vec<_>, _>>()?;
//! assert_eq!(batches, [batch.clone(), batch]);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::ffi::{c_char, c_int, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr;

use arrow_array::RecordBatchReader;
use arrow_schema::{DataType, Field, SchemaRef};

use crate::abi::{ArrowDeviceArray, ArrowDeviceArrayStream, DeviceType, FFI_ArrowSchema};
use crate::array::DeviceArray;
use crate::device::DeviceRef;
use crate::error::{Error, Result};
use crate::schema::export_field;
use crate::stream::{export_stream_array, export_stream_batch, stream_error, wrong_device_type};

/// Exports an arrow-rs reader as a CPU device stream; each batch is exported
/// zero-copy when `get_next` asks for it.
pub fn export_reader(
    reader: impl RecordBatchReader + Send + 'static,
) -> Result<ArrowDeviceArrayStream> {
    let schema = reader.schema();
    let field = record_batch_field(&schema);
    let source = ReaderSource {
        reader,
        schema,
        device: None,
    };
    export_source(field, DeviceType::CPU, source)
}

/// Exports an arrow-rs reader as a device stream on `device`: each batch is
/// copied onto the device when `get_next` asks for it, and arrives with the
/// event that marks the copy's completion.
pub fn export_reader_to(
    reader: impl RecordBatchReader + Send + 'static,
    device: &DeviceRef,
) -> Result<ArrowDeviceArrayStream> {
    let device = device.clone();
    let schema = reader.schema();
    let device_type = device.device_type();
    let field = record_batch_field(&schema);
    let source = ReaderSource {
        reader,
        schema,
        device: Some(device),
    };
    export_source(field, device_type, source)
}

/// Exports device arrays (zero-copy) as a stream of `field`'s type on
/// devices of `device_type`.
///
/// An array of another device type or data type than the stream's fails its
/// `get_next` with `EINVAL`; an `Err` from the iterator fails it with the
/// error's code and message.
pub fn export_device_arrays(
    field: Field,
    device_type: DeviceType,
    arrays: impl Iterator<Item = Result<DeviceArray>> + Send + 'static,
) -> Result<ArrowDeviceArrayStream> {
    let source = DeviceArraySource {
        arrays,
        data_type: field.data_type().clone(),
        device_type,
    };
    export_source(field, device_type, source)
}

/// The struct field a stream of record batches of `schema` has as its type
/// (the schema's metadata kept as the field's): what [`export_reader`]
/// exports and what [`export_device_arrays`] takes for such a stream.
pub fn record_batch_field(schema: &SchemaRef) -> Field {
    Field::new("", DataType::Struct(schema.fields().clone()), false)
        .with_metadata(schema.metadata().clone())
}

/// A producer of exported batches. `None` is the end of the stream.
trait Source: Send {
    fn next(&mut self, index: usize) -> Option<Result<ArrowDeviceArray>>;
}

struct ReaderSource<R> {
    reader: R,
    schema: SchemaRef,
    /// `None`: zero-copy on the CPU.
    device: Option<DeviceRef>,
}

impl<R: RecordBatchReader + Send> Source for ReaderSource<R> {
    fn next(&mut self, index: usize) -> Option<Result<ArrowDeviceArray>> {
        Some(match self.reader.next()? {
            Ok(batch) => export_stream_batch(index, &batch, &self.schema, self.device.as_ref()),
            Err(err) => Err(err.into()),
        })
    }
}

struct DeviceArraySource<I> {
    arrays: I,
    data_type: DataType,
    device_type: DeviceType,
}

impl<I: Iterator<Item = Result<DeviceArray>> + Send> Source for DeviceArraySource<I> {
    fn next(&mut self, index: usize) -> Option<Result<ArrowDeviceArray>> {
        let array = self.arrays.next()?;
        Some(array.and_then(|array| {
            export_stream_array(index, &array, &self.data_type, self.device_type)
        }))
    }
}

/// What a stream this crate exported keeps behind `private_data`.
struct Private {
    field: Field,
    device_type: DeviceType,
    source: Box<dyn Source>,
    /// Batches handed out so far (for messages).
    index: usize,
    state: State,
    /// The message `get_last_error` returns, set by the last failed call.
    last_error: Option<CString>,
}

enum State {
    Open,
    Ended,
    /// A `get_next` failed with this code; later calls fail the same way.
    Failed(c_int),
}

fn export_source(
    field: Field,
    device_type: DeviceType,
    source: impl Source + 'static,
) -> Result<ArrowDeviceArrayStream> {
    // Fail here, not in the consumer's first get_schema, when the type has
    // no C form.
    drop(export_field(&field)?);
    let private = Box::new(Private {
        field,
        device_type,
        source: Box::new(source),
        index: 0,
        state: State::Open,
        last_error: None,
    });
    Ok(ArrowDeviceArrayStream {
        device_type,
        get_schema: Some(get_schema),
        get_next: Some(get_next),
        get_last_error: Some(get_last_error),
        release: Some(release),
        private_data: Box::into_raw(private).cast(),
    })
}

impl Private {
    fn get_next(&mut self) -> Result<ArrowDeviceArray> {
        match self.state {
            State::Ended => return Ok(ArrowDeviceArray::empty()),
            State::Failed(code) => {
                return Err(Error::Producer {
                    code,
                    message: "the stream failed earlier; only release may follow".into(),
                })
            }
            State::Open => {}
        }
        let Some(next) = self.source.next(self.index) else {
            self.state = State::Ended;
            return Ok(ArrowDeviceArray::empty());
        };
        let array = next?;
        if array.device_type != self.device_type {
            return Err(wrong_device_type(
                self.index,
                array.device_type,
                self.device_type,
            ));
        }
        self.index += 1;
        Ok(array)
    }
}

/// Runs `call` on the stream's private data: a NULL or released stream is
/// `EINVAL`; an error or panic is recorded for `get_last_error` and returned
/// as its errno (spec: "get_schema / get_next ... return 0 on success, a
/// non-zero error code otherwise").
///
/// # Safety
/// `stream` is NULL or points to a stream this module exported (or one the
/// consumer moved it to).
unsafe fn with_private(
    stream: *mut ArrowDeviceArrayStream,
    call: impl FnOnce(&mut Private) -> Result<()>,
) -> c_int {
    // SAFETY: per the contract; NULL and released streams are refused.
    let Some(stream) = (unsafe { stream.as_mut() }) else {
        return libc::EINVAL;
    };
    if stream.release.is_none() || stream.private_data.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: private_data is the Box this module leaked in export_source,
    // alive until release; the consumer calls one callback at a time.
    let private = unsafe { &mut *stream.private_data.cast::<Private>() };
    private.last_error = None;
    let result = match catch_unwind(AssertUnwindSafe(|| call(private))) {
        Ok(result) => result,
        Err(payload) => Err(Error::from_panic(payload)),
    };
    match result {
        Ok(()) => 0,
        Err(err) => {
            let code = err.errno();
            private.last_error = Some(error_cstring(&err));
            code
        }
    }
}

/// The C string a C callback reports `err` with (`get_last_error`,
/// `on_error`): a producer error's own text (its code travels apart, and a
/// relayed message is not wrapped twice), else the error's display; a NUL
/// byte, which would cut it short, shows as `\0`.
pub(crate) fn error_cstring(err: &Error) -> CString {
    let text = match err {
        Error::Producer { message, .. } => message.clone(),
        other => other.to_string(),
    };
    CString::new(text.replace('\0', "\\0")).unwrap_or_default()
}

unsafe extern "C" fn get_schema(
    stream: *mut ArrowDeviceArrayStream,
    out: *mut FFI_ArrowSchema,
) -> c_int {
    // SAFETY: the consumer passes the stream we exported.
    unsafe {
        with_private(stream, |private| {
            if out.is_null() {
                return Err(stream_error("get_schema's out is NULL"));
            }
            let schema = export_field(&private.field)?;
            // SAFETY: `out` is non-NULL and, per the spec, points to a
            // struct the consumer lets us overwrite without releasing it.
            ptr::write(out, schema);
            Ok(())
        })
    }
}

unsafe extern "C" fn get_next(
    stream: *mut ArrowDeviceArrayStream,
    out: *mut ArrowDeviceArray,
) -> c_int {
    // SAFETY: the consumer passes the stream we exported.
    unsafe {
        with_private(stream, |private| {
            if out.is_null() {
                return Err(stream_error("get_next's out is NULL"));
            }
            match private.get_next() {
                Ok(array) => {
                    // SAFETY: as in get_schema.
                    ptr::write(out, array);
                    Ok(())
                }
                Err(err) => {
                    private.state = State::Failed(err.errno());
                    Err(err)
                }
            }
        })
    }
}

unsafe extern "C" fn get_last_error(stream: *mut ArrowDeviceArrayStream) -> *const c_char {
    let read = || {
        // SAFETY: the consumer passes the stream we exported; NULL and
        // released streams have no error to report.
        let stream = unsafe { stream.as_ref() }?;
        if stream.release.is_none() || stream.private_data.is_null() {
            return None;
        }
        // SAFETY: as in with_private.
        let private = unsafe { &*stream.private_data.cast::<Private>() };
        private.last_error.as_ref().map(|message| message.as_ptr())
    };
    catch_unwind(read).ok().flatten().unwrap_or(ptr::null())
}

unsafe extern "C" fn release(stream: *mut ArrowDeviceArrayStream) {
    let release = || {
        // SAFETY: the consumer passes the stream we exported.
        let Some(stream) = (unsafe { stream.as_mut() }) else {
            return;
        };
        if stream.release.is_none() || stream.private_data.is_null() {
            return;
        }
        let private = stream.private_data.cast::<Private>();
        // Marked released first, so that even a panicking destructor below
        // cannot lead to a second release.
        stream.private_data = ptr::null_mut();
        stream.get_schema = None;
        stream.get_next = None;
        stream.get_last_error = None;
        stream.release = None;
        // SAFETY: the Box leaked in export_source, taken back exactly once.
        drop(unsafe { Box::from_raw(private) });
    };
    // A panic in a source's destructor has nowhere to go: swallowed rather
    // than unwound into C.
    let _ = catch_unwind(AssertUnwindSafe(release));
}

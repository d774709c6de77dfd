//! Importing an `ArrowDeviceArrayStream` from any producer as a Rust
//! iterator of [`DeviceArray`]s ([`DeviceStreamReader`]), and as an arrow-rs
//! [`RecordBatchReader`] ([`DeviceStreamReader::into_record_batch_reader`]).
//!
//! The reader owns the stream and releases it exactly once: as soon as the
//! stream ends or fails (so the producer's resources go early), or when the
//! reader is dropped. Each batch is imported against `get_schema`'s type,
//! validated at the reader's level, and checked to be on the stream's
//! `device_type`; a batch that is not fails with an error naming the batch.
//! After an error or the end the reader yields `None` forever.
//!
//! ```
//! use std::sync::Arc;
//! use arrow_array::{ArrayRef, RecordBatch, RecordBatchIterator, StringArray};
//! use arrow_device::device::{emulated::EmulatedDevice, DeviceRef};
//! use arrow_device::stream::{export_reader_to, DeviceStreamReader};
//! use arrow_device::{DeviceType, ValidationLevel};
//!
//! let batch = RecordBatch::try_from_iter([(
//!     "s",
//!     Arc::new(StringArray::from(vec!["a", "bc"])) as ArrayRef,
//! )])?;
//! let device: DeviceRef = EmulatedDevice::global(7).ok_or("no emulated device 7")?;
//! let reader = RecordBatchIterator::new([Ok(batch.clone())], batch.schema());
//! let stream = export_reader_to(reader, &device)?;
//!
//! // SAFETY: the stream comes from this crate's exporter.
//! let mut imported = unsafe { DeviceStreamReader::try_new(stream, ValidationLevel::Default) }?;
//! assert_eq!(imported.device_type(), DeviceType::EXT_DEV);
//! let on_device = imported.next().unwrap()?;
//! assert_eq!((on_device.device_id(), on_device.len()), (7, 2));
//! assert_eq!(on_device.to_record_batch()?, batch); // copied to the host
//! assert!(imported.next().is_none());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::ffi::{c_int, CStr};
use std::sync::Arc;

use arrow_array::{RecordBatch, RecordBatchReader};
use arrow_schema::{ArrowError, DataType, Field, Schema, SchemaRef};

use crate::abi::{ArrowDeviceArray, ArrowDeviceArrayStream, DeviceType, FFI_ArrowSchema};
use crate::array::DeviceArray;
use crate::error::{Error, Result};
use crate::schema::import_field;
use crate::stream::{check_stream_callbacks, stream_error, wrong_device_type};
use crate::validate::ValidationLevel;

/// A device stream from any producer, read batch by batch.
pub struct DeviceStreamReader {
    /// Released (and so empty) once the stream ended or failed.
    stream: ArrowDeviceArrayStream,
    field: Field,
    /// `Some` for a stream of struct arrays (record batches).
    schema: Option<SchemaRef>,
    device_type: DeviceType,
    level: ValidationLevel,
    /// Batches read so far (for messages).
    index: usize,
}

impl DeviceStreamReader {
    /// Takes ownership of `stream` (released exactly once, also on error),
    /// and reads its schema.
    ///
    /// # Safety
    /// `stream` must follow the spec: callbacks valid for the struct, and the
    /// arrays it produces as [`DeviceArray::try_new`] requires.
    pub unsafe fn try_new(stream: ArrowDeviceArrayStream, level: ValidationLevel) -> Result<Self> {
        let mut reader = DeviceStreamReader {
            device_type: stream.device_type,
            stream,
            field: Field::new("", DataType::Null, true),
            schema: None,
            level,
            index: 0,
        };
        let stream = &mut reader.stream;
        check_stream_callbacks(
            !stream.is_released(),
            [
                stream.get_schema.is_some(),
                stream.get_next.is_some(),
                stream.get_last_error.is_some(),
            ],
        )?;
        let Some(get_schema) = stream.get_schema else {
            unreachable!("checked non-NULL just above")
        };
        let mut schema = FFI_ArrowSchema::empty();
        // SAFETY: the producer's callback on its own stream, with a released
        // struct to fill in (spec: "get_schema").
        let code = unsafe { get_schema(stream, &mut schema) };
        if code != 0 {
            // SAFETY: as above.
            return Err(unsafe { reader.producer_error(code, "get_schema") });
        }
        if schema.release().is_none() {
            return Err(stream_error(
                "get_schema returned 0 but left the schema released",
            ));
        }
        reader.field = import_field(&schema)?;
        if let DataType::Struct(fields) = reader.field.data_type() {
            reader.schema = Some(Arc::new(Schema::new_with_metadata(
                fields.clone(),
                reader.field.metadata().clone(),
            )));
        }
        Ok(reader)
    }

    /// Moves the stream out of `stream` (leaving it released) and imports it.
    ///
    /// # Safety
    /// `stream` is valid for reads and writes and points to an initialized
    /// stream that follows the spec.
    pub unsafe fn try_from_raw(
        stream: *mut ArrowDeviceArrayStream,
        level: ValidationLevel,
    ) -> Result<Self> {
        if stream.is_null() {
            return Err(stream_error("NULL ArrowDeviceArrayStream pointer"));
        }
        // SAFETY: valid per the contract.
        unsafe { Self::try_new(ArrowDeviceArrayStream::from_raw(stream), level) }
    }

    /// The type of every array of the stream (a struct for record batches).
    pub fn field(&self) -> &Field {
        &self.field
    }

    /// The stream's schema when its arrays are structs (record batches).
    pub fn schema(&self) -> Option<SchemaRef> {
        self.schema.clone()
    }

    /// The device type every batch is on.
    pub fn device_type(&self) -> DeviceType {
        self.device_type
    }

    /// Turns the reader into an arrow-rs [`RecordBatchReader`]: zero-copy,
    /// after each batch's `sync_event`, on host-accessible devices. Fails for
    /// other devices (see [`DeviceStreamReader::into_host_reader`]) and for
    /// streams of non-struct arrays.
    pub fn into_record_batch_reader(self) -> Result<HostBatchReader> {
        if !self.device_type.is_host_accessible() {
            return Err(Error::NotSupported(format!(
                "the stream is on device type {}, which the host cannot read: use into_host_reader to copy each batch",
                self.device_type
            )));
        }
        self.into_host_reader()
    }

    /// Turns the reader into an arrow-rs [`RecordBatchReader`] that copies
    /// each batch to the host (zero-copy where the host can read it).
    pub fn into_host_reader(self) -> Result<HostBatchReader> {
        let Some(schema) = self.schema.clone() else {
            return Err(Error::NotSupported(format!(
                "a record batch reader needs a stream of struct arrays, found {}",
                self.field.data_type()
            )));
        };
        Ok(HostBatchReader {
            reader: self,
            schema,
        })
    }

    fn next_array(&mut self) -> Result<Option<DeviceArray>> {
        let Some(get_next) = self.stream.get_next else {
            return Ok(None); // ended, failed, or released
        };
        let mut out = ArrowDeviceArray::empty();
        // SAFETY: the producer's callback on its own live stream, with a
        // released struct to fill in (spec: "get_next").
        let code = unsafe { get_next(&mut self.stream, &mut out) };
        if code != 0 {
            // SAFETY: as above.
            return Err(unsafe { self.producer_error(code, "get_next") });
        }
        if out.is_released() {
            self.finish();
            return Ok(None);
        }
        let index = self.index;
        self.index += 1;
        if out.device_type != self.device_type {
            return Err(wrong_device_type(index, out.device_type, self.device_type));
        }
        // SAFETY: the producer's array, of get_schema's type per the spec;
        // validation checks what it can.
        let array = unsafe { DeviceArray::try_new_with_field(out, self.field.clone(), self.level) }
            .map_err(|err| in_batch(err, index))?;
        Ok(Some(array))
    }

    /// The producer's error for a failed `call`, with `get_last_error`'s
    /// message copied before the stream is released.
    ///
    /// # Safety
    /// The stream is live (not released).
    unsafe fn producer_error(&mut self, code: c_int, call: &str) -> Error {
        let message = self
            .stream
            .get_last_error
            // SAFETY: the producer's callback on its live stream; its result
            // is NULL or a C string valid until the next call, copied here.
            .map(|get_last_error| unsafe { get_last_error(&mut self.stream) })
            .filter(|message| !message.is_null())
            // SAFETY: as above.
            .map(|message| {
                unsafe { CStr::from_ptr(message) }
                    .to_string_lossy()
                    .into_owned()
            })
            .unwrap_or_else(|| format!("{call} returned {code} without a message"));
        self.finish();
        Error::Producer { code, message }
    }

    /// Releases the stream now (spec: nothing but release may follow an
    /// error; after the end nothing is left to read).
    fn finish(&mut self) {
        drop(std::mem::replace(
            &mut self.stream,
            ArrowDeviceArrayStream::empty(),
        ));
    }
}

/// Says which batch an import error is about.
fn in_batch(err: Error, index: usize) -> Error {
    match err {
        Error::Invalid { path, message } => Error::Invalid {
            path: format!("batch {index}: {path}"),
            message,
        },
        other => other,
    }
}

impl Iterator for DeviceStreamReader {
    type Item = Result<DeviceArray>;

    fn next(&mut self) -> Option<Self::Item> {
        match self.next_array() {
            Ok(array) => array.map(Ok),
            Err(err) => {
                self.finish();
                Some(Err(err))
            }
        }
    }
}

impl std::fmt::Debug for DeviceStreamReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceStreamReader")
            .field("field", &self.field)
            .field("device_type", &self.device_type)
            .field("batches_read", &self.index)
            .field("released", &self.stream.is_released())
            .finish()
    }
}

/// A [`DeviceStreamReader`] of record batches as an arrow-rs
/// [`RecordBatchReader`].
#[derive(Debug)]
pub struct HostBatchReader {
    reader: DeviceStreamReader,
    schema: SchemaRef,
}

impl HostBatchReader {
    /// The device stream underneath.
    pub fn device_stream(&self) -> &DeviceStreamReader {
        &self.reader
    }
}

impl Iterator for HostBatchReader {
    type Item = Result<RecordBatch, ArrowError>;

    fn next(&mut self) -> Option<Self::Item> {
        let result = match self.reader.next()? {
            Ok(array) => array.to_record_batch_with_schema(self.schema.clone()),
            Err(err) => Err(err),
        };
        if result.is_err() {
            self.reader.finish();
        }
        Some(result.map_err(ArrowError::from))
    }
}

impl RecordBatchReader for HostBatchReader {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }
}

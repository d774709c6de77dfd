//! What a server serves and a client uploads: [`Batches`] (one stream of
//! record batches, on the host or any device) and [`Source`] (a named
//! factory of them, opened once per `do_get`).

use std::fs::File;
use std::io::{BufReader, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use arrow_array::RecordBatchReader;
use arrow_device::stream::{AsyncDeviceStream, DeviceStreamReader};
use arrow_device::DeviceArray;
use arrow_ipc::reader::{FileReader, StreamReader};
use arrow_schema::{DataType, Schema, SchemaRef};
use futures_core::stream::BoxStream;
use futures_util::StreamExt;

use crate::error::{Error, Result};

/// One stream of record batches to send: host batches (an arrow-rs
/// reader), or arrays of struct type on any device (a device stream, sync
/// or async). Device batches are copied to the host as they are sent.
pub struct Batches {
    pub(crate) schema: SchemaRef,
    pub(crate) producer: Producer,
}

pub(crate) enum Producer {
    Host(Box<dyn RecordBatchReader + Send>),
    Device(Box<dyn Iterator<Item = arrow_device::Result<DeviceArray>> + Send>),
    Async(BoxStream<'static, arrow_device::Result<DeviceArray>>),
}

impl std::fmt::Debug for Batches {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match self.producer {
            Producer::Host(_) => "host",
            Producer::Device(_) => "device",
            Producer::Async(_) => "async device",
        };
        f.debug_struct("Batches")
            .field("schema", &self.schema)
            .field("producer", &kind)
            .finish()
    }
}

impl Batches {
    /// Host batches from any arrow-rs reader.
    pub fn host(reader: impl RecordBatchReader + Send + 'static) -> Batches {
        Batches {
            schema: reader.schema(),
            producer: Producer::Host(Box::new(reader)),
        }
    }

    /// The batches of a device stream (any producer, any device). The
    /// stream must be one of struct arrays (record batches); an array on
    /// another device than the stream's is an error when it is read, as
    /// the reader checks.
    pub fn device(reader: DeviceStreamReader) -> Result<Batches> {
        let Some(schema) = reader.schema() else {
            return Err(not_record_batches(reader.field().data_type()));
        };
        Ok(Batches {
            schema,
            producer: Producer::Device(Box::new(reader)),
        })
    }

    /// Device arrays of struct type from any iterator, with their schema:
    /// what this crate's own [`crate::DeviceBatches`] are, or arrays an
    /// embedder holds.
    pub fn arrays(
        schema: SchemaRef,
        arrays: impl Iterator<Item = arrow_device::Result<DeviceArray>> + Send + 'static,
    ) -> Batches {
        Batches {
            schema,
            producer: Producer::Device(Box::new(arrays)),
        }
    }

    /// Device arrays of struct type from any async stream (an imported
    /// `ArrowAsyncDeviceStreamHandler` producer, this crate's
    /// [`crate::DeviceBatchStream`], ...), with their schema.
    pub fn stream(
        schema: SchemaRef,
        stream: impl futures_core::Stream<Item = arrow_device::Result<DeviceArray>> + Send + 'static,
    ) -> Batches {
        Batches {
            schema,
            producer: Producer::Async(stream.boxed()),
        }
    }

    /// The batches of an async device stream imported through the C
    /// interface, once its schema has arrived.
    pub async fn async_device(mut stream: AsyncDeviceStream) -> Result<Batches> {
        let field = stream.wait_schema().await?;
        let DataType::Struct(fields) = field.data_type() else {
            return Err(not_record_batches(field.data_type()));
        };
        let schema = Arc::new(Schema::new_with_metadata(
            fields.clone(),
            field.metadata().clone(),
        ));
        Ok(Batches::stream(schema, stream))
    }

    /// The batches of an Arrow IPC file, in either the file format
    /// (`ARROW1` magic) or the streaming format (`.arrows`, what
    /// `pyarrow.ipc.new_stream` writes), told apart by the magic.
    pub fn ipc_file(path: impl AsRef<Path>) -> Result<Batches> {
        let path = path.as_ref();
        let io = |context: String| move |source| Error::Io { context, source };
        let mut file = File::open(path).map_err(io(format!("opening {}", path.display())))?;
        let mut magic = [0u8; 6];
        let is_file_format = match file.read_exact(&mut magic) {
            Ok(()) => &magic == b"ARROW1",
            Err(_) => false,
        };
        file.seek(SeekFrom::Start(0))
            .map_err(io(format!("reading {}", path.display())))?;
        let ipc = |e: arrow_schema::ArrowError| {
            Error::Device(arrow_device::Error::Invalid {
                path: path.display().to_string(),
                message: format!("not an Arrow IPC file or stream: {e}"),
            })
        };
        if is_file_format {
            let reader = FileReader::try_new(BufReader::new(file), None).map_err(ipc)?;
            Ok(Batches::host(reader))
        } else {
            let reader = StreamReader::try_new(BufReader::new(file), None).map_err(ipc)?;
            Ok(Batches::host(reader))
        }
    }

    /// The stream's schema.
    pub fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }
}

fn not_record_batches(data_type: &DataType) -> Error {
    Error::Device(arrow_device::Error::NotSupported(format!(
        "a stream of {data_type} arrays is not a stream of record batches; \
         Flight sends struct arrays (record batches) only"
    )))
}

type Factory = dyn Fn() -> Result<Batches> + Send + Sync;

/// A named dataset a server serves: a factory called once per `do_get`
/// (each client gets its own stream), or a stream that can be served once.
#[derive(Clone)]
pub struct Source {
    inner: Arc<SourceInner>,
}

enum SourceInner {
    Factory {
        open: Box<Factory>,
        /// The schema, learnt on the first open (listings ask for it).
        schema: Mutex<Option<SchemaRef>>,
    },
    Once {
        schema: SchemaRef,
        batches: Mutex<Option<Batches>>,
    },
}

impl std::fmt::Debug for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match &*self.inner {
            SourceInner::Factory { .. } => "factory",
            SourceInner::Once { .. } => "once",
        };
        f.debug_struct("Source").field("kind", &kind).finish()
    }
}

impl Source {
    /// A source that calls `open` for every `do_get` (and once for a
    /// listing's schema, released at once).
    pub fn new(open: impl Fn() -> Result<Batches> + Send + Sync + 'static) -> Source {
        Source {
            inner: Arc::new(SourceInner::Factory {
                open: Box::new(open),
                schema: Mutex::new(None),
            }),
        }
    }

    /// Gives the schema up front, so that listings (`list_flights`,
    /// `get_flight_info`, `get_schema`) do not open the source to learn it.
    /// A stream opened later with another schema is served with its own.
    pub fn with_schema(self, schema: SchemaRef) -> Source {
        if let SourceInner::Factory { schema: known, .. } = &*self.inner {
            *known.lock().unwrap_or_else(|p| p.into_inner()) = Some(schema);
        }
        self
    }

    /// A stream that is served to the first `do_get` only; later ones are
    /// refused with `FAILED_PRECONDITION`. Listings still show its schema.
    pub fn once(batches: Batches) -> Source {
        Source {
            inner: Arc::new(SourceInner::Once {
                schema: batches.schema.clone(),
                batches: Mutex::new(Some(batches)),
            }),
        }
    }

    /// An Arrow IPC file (file or streaming format), opened anew for every
    /// `do_get`.
    pub fn ipc_file(path: impl Into<PathBuf>) -> Source {
        let path = path.into();
        Source::new(move || Batches::ipc_file(&path))
    }

    /// Opens a stream of the source (blocking: the factory may read files
    /// or call into Python).
    pub(crate) fn open(&self, name: &str) -> std::result::Result<Batches, tonic::Status> {
        match &*self.inner {
            SourceInner::Factory { open, schema } => {
                let batches = open().map_err(|e| {
                    tonic::Status::internal(format!("source {name:?} failed to open: {e}"))
                })?;
                *schema.lock().unwrap_or_else(|p| p.into_inner()) = Some(batches.schema.clone());
                Ok(batches)
            }
            SourceInner::Once { batches, .. } => batches
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .take()
                .ok_or_else(|| {
                    tonic::Status::failed_precondition(format!(
                        "source {name:?} is a stream that can be read once, and was already served"
                    ))
                }),
        }
    }

    /// The schema, without keeping a stream open.
    pub(crate) fn schema(&self, name: &str) -> std::result::Result<SchemaRef, tonic::Status> {
        match &*self.inner {
            SourceInner::Factory { schema, .. } => {
                if let Some(schema) = schema.lock().unwrap_or_else(|p| p.into_inner()).clone() {
                    return Ok(schema);
                }
                // Opened and dropped at once: the stream is released.
                Ok(self.open(name)?.schema)
            }
            SourceInner::Once { schema, .. } => Ok(schema.clone()),
        }
    }
}

//! The client: [`fetch`] a remote dataset as a device stream on the device
//! you choose, [`put`] any stream to a server, list what a server has.

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use arrow_device::device::DeviceRef;
use arrow_device::stream::{export_device_arrays, record_batch_field, DeviceStreamReader};
use arrow_device::{ArrowDeviceArrayStream, DeviceArray, HostStaging, ValidationLevel};
use arrow_flight::decode::FlightDataDecoder;
use arrow_flight::error::FlightError;
use arrow_flight::flight_service_client::FlightServiceClient;
use arrow_flight::{Criteria, FlightData, FlightDescriptor, FlightInfo, PutResult, Ticket};
use arrow_schema::{Schema, SchemaRef};
use bytes::Bytes;
use futures_util::StreamExt;
use prost::Message;
use tokio::sync::mpsc;
use tonic::codec::{Codec, EncodeBuf};
use tonic::codegen::http::uri::PathAndQuery;
use tonic::metadata::MetadataValue;
use tonic::transport::Channel;
use tonic_prost::ProstCodec;

use crate::error::{chain, Error, Result};
use crate::location::Location;
use crate::pipeline::{self, Counts, Decoded, Landed};
use crate::runtime;
use crate::source::Batches;

/// How a client connects and reads.
#[derive(Clone, Debug)]
pub struct ClientOptions {
    /// Sent as `authorization: Bearer <token>` on every call.
    pub token: Option<String>,
    /// The certificate authority (PEM) that signed the server's
    /// certificate, for `grpc+tls://` locations; `None`: the system's roots.
    pub tls_root: Option<Vec<u8>>,
    /// How many batches may be decoded or on their way to the device ahead
    /// of the consumer (at least 1). Memory stays bounded by this whatever
    /// the dataset's size: a consumer that stops reading stops the flow.
    pub prefetch: usize,
    /// How much the blocking API's exported stream checks each batch
    /// ([`fetch`]'s `DeviceStreamReader`).
    pub level: ValidationLevel,
    /// How long a connection may take.
    pub connect_timeout: Duration,
}

impl ClientOptions {
    /// The default [`ClientOptions::prefetch`].
    pub const DEFAULT_PREFETCH: usize = 2;
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            token: None,
            tls_root: None,
            prefetch: ClientOptions::DEFAULT_PREFETCH,
            level: ValidationLevel::Default,
            connect_timeout: Duration::from_secs(10),
        }
    }
}

/// A connection to one Flight server.
#[derive(Clone, Debug)]
pub struct Client {
    location: Location,
    channel: Channel,
    inner: FlightServiceClient<Channel>,
    options: ClientOptions,
}

impl Client {
    /// Connects to `location` (`grpc://HOST:PORT`, `grpc+tcp://` or
    /// `grpc+tls://`).
    pub async fn connect(location: &str, options: &ClientOptions) -> Result<Client> {
        let location = Location::parse(location)?;
        let endpoint = location.endpoint(options.tls_root.as_deref(), options.connect_timeout)?;
        let channel = endpoint.connect().await.map_err(|e| Error::Connect {
            location: location.text.clone(),
            message: chain(&e),
        })?;
        let inner = FlightServiceClient::new(channel.clone())
            .max_decoding_message_size(usize::MAX)
            .max_encoding_message_size(usize::MAX);
        Ok(Client {
            location,
            channel,
            inner,
            options: options.clone(),
        })
    }

    /// The location this client is connected to, as given.
    pub fn location(&self) -> &str {
        &self.location.text
    }

    fn request<T>(&self, message: T) -> Result<tonic::Request<T>> {
        let mut request = tonic::Request::new(message);
        if let Some(token) = &self.options.token {
            let value: MetadataValue<_> =
                format!("Bearer {token}")
                    .parse()
                    .map_err(|_| Error::Config {
                        what: "bearer token",
                        message: "it has characters an HTTP header cannot carry (control \
                                  characters or non-ASCII)"
                            .into(),
                    })?;
            request.metadata_mut().insert("authorization", value);
        }
        Ok(request)
    }

    fn status(&self, call: &'static str) -> impl Fn(tonic::Status) -> Error + '_ {
        move |status| Error::status(&self.location.text, call, &status)
    }

    /// Every flight the server lists.
    pub async fn list_flights(&mut self) -> Result<Vec<FlightInfo>> {
        let request = self.request(Criteria::default())?;
        let mut stream = self
            .inner
            .clone()
            .list_flights(request)
            .await
            .map_err(self.status("list_flights"))?
            .into_inner();
        let mut infos = Vec::new();
        while let Some(info) = stream.next().await {
            infos.push(info.map_err(self.status("list_flights"))?);
        }
        Ok(infos)
    }

    /// The flight named by a path descriptor of one element.
    pub async fn get_flight_info(&mut self, name: &str) -> Result<FlightInfo> {
        let request = self.request(FlightDescriptor::new_path(vec![name.to_string()]))?;
        Ok(self
            .inner
            .clone()
            .get_flight_info(request)
            .await
            .map_err(self.status("get_flight_info"))?
            .into_inner())
    }

    /// The schema of the flight named by a path descriptor of one element.
    pub async fn get_schema(&mut self, name: &str) -> Result<SchemaRef> {
        let request = self.request(FlightDescriptor::new_path(vec![name.to_string()]))?;
        let result = self
            .inner
            .clone()
            .get_schema(request)
            .await
            .map_err(self.status("get_schema"))?
            .into_inner();
        let schema = Schema::try_from(&result).map_err(|e| {
            Error::protocol(
                &self.location.text,
                "get_schema",
                format!("the schema does not decode: {e}"),
            )
        })?;
        Ok(Arc::new(schema))
    }

    /// `do_get` of `ticket`, landed on `device` as it arrives.
    pub async fn fetch(
        &mut self,
        ticket: impl Into<Bytes>,
        device: &DeviceRef,
    ) -> Result<DeviceBatchStream> {
        let (tx, rx) = mpsc::unbounded_channel();
        let fetched = self
            .start_fetch(ticket.into(), device, move |landed| tx.send(landed).is_ok())
            .await?;
        Ok(DeviceBatchStream { rx, fetched })
    }

    /// The blocking form of [`Client::fetch`]'s stream, started from
    /// inside the runtime.
    async fn fetch_batches(&mut self, ticket: Bytes, device: &DeviceRef) -> Result<DeviceBatches> {
        let (tx, rx) = std::sync::mpsc::channel();
        let fetched = self
            .start_fetch(ticket, device, move |landed| tx.send(landed).is_ok())
            .await?;
        Ok(DeviceBatches {
            rx,
            fetched,
            level: self.options.level,
        })
    }

    async fn start_fetch(
        &mut self,
        ticket: Bytes,
        device: &DeviceRef,
        deliver: impl FnMut(Landed) -> bool + Send + 'static,
    ) -> Result<Fetched> {
        let started = Instant::now();
        let request = self.request(Ticket { ticket })?;
        let response = self
            .inner
            .clone()
            .do_get(request)
            .await
            .map_err(self.status("do_get"))?
            .into_inner();
        let counts = Arc::new(Counts::default());
        let counted = {
            let counts = counts.clone();
            response.map(move |data| {
                let data = data.map_err(|status| FlightError::Tonic(Box::new(status)))?;
                counts.wire_bytes.fetch_add(
                    data.data_header.len() + data.data_body.len(),
                    Ordering::Relaxed,
                );
                Ok(data)
            })
        };
        let decoded = Decoded::read_schema(
            FlightDataDecoder::new(counted),
            &self.location.text,
            "do_get",
        )
        .await?;
        let schema = decoded.schema.clone();
        let task = tokio::spawn(pipeline::land(
            decoded,
            device.clone(),
            self.options.prefetch,
            counts.clone(),
            started,
            deliver,
        ));
        Ok(Fetched {
            peer: self.location.text.clone(),
            finished: false,
            schema,
            device: device.clone(),
            task: task.abort_handle(),
            counts,
            started,
        })
    }

    /// Uploads `batches` with `do_put` under a path descriptor of one
    /// element, `name`; returns what the server reported. Device batches
    /// are copied to the host through reusable staging, the next batch's
    /// copy overlapping the current one's send.
    ///
    /// A local error (the source's) cancels the call: the server sees a
    /// broken upload, never a shorter one that looks complete.
    pub async fn put(&mut self, name: &str, batches: Batches) -> Result<PutSummary> {
        let staging = Arc::new(HostStaging::new(self.options.prefetch + 2));
        let held = Arc::new(AtomicUsize::new(0));
        let descriptor = FlightDescriptor::new_path(vec![name.to_string()]);
        let (first, staged) = pipeline::stage(
            batches,
            self.options.prefetch,
            staging,
            held,
            Some(descriptor),
        );
        let local_error: Arc<Mutex<Option<arrow_device::Error>>> = Arc::default();
        let sent = Arc::new(SentCounts::default());
        // Set once the source is exhausted (its channel ended); a server
        // that answers before then stopped reading early.
        let exhausted = Arc::new(AtomicBool::new(false));
        let body = {
            let sent = sent.clone();
            let local_error = local_error.clone();
            let exhausted = exhausted.clone();
            let at_end = futures_util::stream::poll_fn(move |_| {
                exhausted.store(true, Ordering::Release);
                Poll::Ready(None)
            });
            pipeline::receiver_stream(staged)
                .chain(at_end)
                .map(move |staged| match staged {
                    Ok(encoded) => {
                        sent.batches.fetch_add(1, Ordering::Relaxed);
                        sent.rows.fetch_add(encoded.rows, Ordering::Relaxed);
                        Ok(encoded)
                    }
                    Err(e) => {
                        let message = e.to_string();
                        *local_error.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
                        Err(message)
                    }
                })
        };
        let uploads = futures_util::stream::once(std::future::ready(Upload::Data(first))).chain(
            body.flat_map(|item| {
                let uploads: Vec<Upload> = match item {
                    Ok(encoded) => encoded.messages.into_iter().map(Upload::Data).collect(),
                    Err(message) => vec![Upload::Abort(message)],
                };
                futures_util::stream::iter(uploads)
            }),
        );
        let request = self.request(uploads)?;
        let location = self.location.text.clone();
        let mut grpc = tonic::client::Grpc::new(self.channel.clone())
            .max_decoding_message_size(usize::MAX)
            .max_encoding_message_size(usize::MAX);
        let call = async {
            grpc.ready().await.map_err(|e| {
                let e: tonic::codegen::StdError = e.into();
                Error::Connect {
                    location: location.clone(),
                    message: chain(&*e),
                }
            })?;
            let path = PathAndQuery::from_static("/arrow.flight.protocol.FlightService/DoPut");
            let mut results = grpc
                .streaming(request, path, UploadCodec)
                .await
                .map_err(|s| Error::status(&location, "do_put", &s))?
                .into_inner();
            let mut app_metadata = Vec::new();
            while let Some(result) = results.next().await {
                let result = result.map_err(|s| Error::status(&location, "do_put", &s))?;
                app_metadata.push(result.app_metadata);
            }
            Ok::<_, Error>(app_metadata)
        };
        let outcome = call.await;
        // The source's own error says more than the aborted call's status.
        if let Some(e) = local_error.lock().unwrap_or_else(|p| p.into_inner()).take() {
            return Err(Error::Device(e));
        }
        let app_metadata = outcome?;
        Ok(PutSummary {
            batches: sent.batches.load(Ordering::Relaxed),
            rows: sent.rows.load(Ordering::Relaxed),
            complete: exhausted.load(Ordering::Acquire),
            app_metadata,
        })
    }
}

/// A message of an upload: data, or the order to abort it.
///
/// A local error must end the upload as a *broken* HTTP/2 stream (a
/// reset), never as a clean end: a server cannot tell a clean end from
/// the end of the data, and would keep a truncated upload as a whole one.
/// arrow-flight's `FlightClient::do_put` ends the request cleanly on an
/// input error, so `do_put` goes through tonic with this codec instead,
/// whose encoder fails on [`Upload::Abort`]: tonic then fails the request
/// body, and hyper resets the stream.
enum Upload {
    Data(FlightData),
    Abort(String),
}

struct UploadCodec;

impl Codec for UploadCodec {
    type Encode = Upload;
    type Decode = PutResult;
    type Encoder = UploadEncoder;
    type Decoder = <ProstCodec<FlightData, PutResult> as Codec>::Decoder;

    fn encoder(&mut self) -> UploadEncoder {
        UploadEncoder
    }

    fn decoder(&mut self) -> Self::Decoder {
        ProstCodec::<FlightData, PutResult>::default().decoder()
    }
}

struct UploadEncoder;

impl tonic::codec::Encoder for UploadEncoder {
    type Item = Upload;
    type Error = tonic::Status;

    fn encode(
        &mut self,
        item: Upload,
        dst: &mut EncodeBuf<'_>,
    ) -> std::result::Result<(), tonic::Status> {
        match item {
            Upload::Data(data) => data.encode(dst).map_err(|e| {
                tonic::Status::internal(format!("encoding a FlightData message: {e}"))
            }),
            Upload::Abort(message) => Err(tonic::Status::aborted(message)),
        }
    }
}

/// What a [`Client::put`] sent and the server answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PutSummary {
    /// Batches sent.
    pub batches: usize,
    /// Rows sent.
    pub rows: usize,
    /// Whether the whole source was sent. `false` when the server answered
    /// (successfully) before the end: its sink stopped reading early, and
    /// `batches` and `rows` count what was sent by then.
    pub complete: bool,
    /// The `app_metadata` of each `PutResult` the server sent.
    pub app_metadata: Vec<Bytes>,
}

#[derive(Debug, Default)]
struct SentCounts {
    batches: AtomicUsize,
    rows: AtomicUsize,
}

/// The state of one fetch, shared by its sync and async forms.
#[derive(Debug)]
struct Fetched {
    /// Who sends the data (for messages).
    peer: String,
    /// The end, or the failure to reach it, was returned.
    finished: bool,
    schema: SchemaRef,
    device: DeviceRef,
    task: tokio::task::AbortHandle,
    counts: Arc<Counts>,
    started: Instant,
}

impl Drop for Fetched {
    /// A consumer that goes away ends the call (the server sees the client
    /// cancel) and frees what was prefetched.
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Fetched {
    fn stats(&self) -> FetchStats {
        let first = self.counts.first_batch_ns.load(Ordering::Relaxed);
        FetchStats {
            batches: self.counts.batches.load(Ordering::Relaxed),
            rows: self.counts.rows.load(Ordering::Relaxed),
            wire_bytes: self.counts.wire_bytes.load(Ordering::Relaxed),
            first_batch_landed: (first != 0).then(|| Duration::from_nanos(first)),
            elapsed: self.started.elapsed(),
        }
    }
}

/// What a fetch has done so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FetchStats {
    /// Batches landed on the device.
    pub batches: usize,
    /// Rows landed on the device.
    pub rows: usize,
    /// Bytes received (IPC headers and bodies).
    pub wire_bytes: usize,
    /// From the `do_get` call (made once connected) to the first batch's
    /// copy being queued on the device (the copy completes when the batch's
    /// `sync_event` does).
    pub first_batch_landed: Option<Duration>,
    /// Since the `do_get` call.
    pub elapsed: Duration,
}

/// The accessors both forms of a fetch share.
macro_rules! fetched_accessors {
    () => {
        /// The dataset's schema.
        pub fn schema(&self) -> SchemaRef {
            self.fetched.schema.clone()
        }

        /// The device the batches land on.
        pub fn device(&self) -> &DeviceRef {
            &self.fetched.device
        }

        /// What the fetch has done so far.
        pub fn stats(&self) -> FetchStats {
            self.fetched.stats()
        }
    };
}

/// A remote dataset arriving on a device, as an async stream of struct
/// arrays (record batches), each with its own `sync_event`.
///
/// Dropping it cancels the call.
#[derive(Debug)]
pub struct DeviceBatchStream {
    rx: mpsc::UnboundedReceiver<Landed>,
    fetched: Fetched,
}

impl DeviceBatchStream {
    fetched_accessors!();
}

impl futures_core::Stream for DeviceBatchStream {
    type Item = arrow_device::Result<DeviceArray>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        let received = std::task::ready!(this.rx.poll_recv(cx));
        Poll::Ready(pipeline::receive(
            received,
            &mut this.fetched.finished,
            &this.fetched.peer,
        ))
    }
}

/// A remote dataset arriving on a device, read with blocking calls: an
/// iterator of struct arrays, each with its own `sync_event`.
///
/// Dropping it cancels the call.
#[derive(Debug)]
pub struct DeviceBatches {
    rx: std::sync::mpsc::Receiver<Landed>,
    fetched: Fetched,
    level: ValidationLevel,
}

impl DeviceBatches {
    /// The batches a server's `do_put` lands, for its sink.
    pub(crate) fn landing(
        peer: String,
        schema: SchemaRef,
        rx: std::sync::mpsc::Receiver<Landed>,
        task: tokio::task::AbortHandle,
        counts: Arc<Counts>,
        device: DeviceRef,
    ) -> DeviceBatches {
        DeviceBatches {
            rx,
            fetched: Fetched {
                peer,
                finished: false,
                schema,
                device,
                task,
                counts,
                started: Instant::now(),
            },
            level: ValidationLevel::Default,
        }
    }

    fetched_accessors!();

    /// The batches as a C device stream (`ArrowDeviceArrayStream`) of the
    /// device's type: a C or Python consumer reads the remote dataset as a
    /// local stream.
    pub fn into_stream(self) -> Result<ArrowDeviceArrayStream> {
        let field = record_batch_field(&self.fetched.schema);
        let device_type = self.fetched.device.device_type();
        Ok(export_device_arrays(field, device_type, self)?)
    }

    /// The batches as a [`DeviceStreamReader`] over
    /// [`DeviceBatches::into_stream`], checked at the options' level.
    pub fn into_reader(self) -> Result<DeviceStreamReader> {
        let level = self.level;
        let stream = self.into_stream()?;
        // SAFETY: the stream comes from the core's exporter, which follows
        // the spec.
        Ok(unsafe { DeviceStreamReader::try_new(stream, level) }?)
    }
}

impl Iterator for DeviceBatches {
    type Item = arrow_device::Result<DeviceArray>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.fetched.finished {
            return None;
        }
        let received = self.rx.recv().ok();
        pipeline::receive(received, &mut self.fetched.finished, &self.fetched.peer)
    }
}

/// Fetches `ticket` from `location`, landing each batch on `device` as it
/// arrives: an async stream.
pub async fn fetch_async(
    location: &str,
    ticket: impl Into<Bytes>,
    device: &DeviceRef,
    options: &ClientOptions,
) -> Result<DeviceBatchStream> {
    Client::connect(location, options)
        .await?
        .fetch(ticket, device)
        .await
}

/// Fetches `ticket` from `location` with blocking calls: the batches as an
/// iterator with [`FetchStats`]. Callable from any thread, inside an async
/// runtime or not (the crate runs the call on a runtime of its own).
pub fn fetch_batches(
    location: &str,
    ticket: impl Into<Bytes>,
    device: &DeviceRef,
    options: &ClientOptions,
) -> Result<DeviceBatches> {
    let location = location.to_string();
    let ticket = ticket.into();
    let device = device.clone();
    let options = options.clone();
    runtime::block_on(async move {
        Client::connect(&location, &options)
            .await?
            .fetch_batches(ticket, &device)
            .await
    })?
}

/// Fetches `ticket` from `location` as a [`DeviceStreamReader`] on
/// `device`: the same reader a local device stream gives, exportable as an
/// `ArrowDeviceArrayStream`.
pub fn fetch(
    location: &str,
    ticket: impl Into<Bytes>,
    device: &DeviceRef,
    options: &ClientOptions,
) -> Result<DeviceStreamReader> {
    fetch_batches(location, ticket, device, options)?.into_reader()
}

/// Uploads `batches` to `location` under `name` (`do_put`), with blocking
/// calls.
pub fn put(
    location: &str,
    name: &str,
    batches: Batches,
    options: &ClientOptions,
) -> Result<PutSummary> {
    let location = location.to_string();
    let name = name.to_string();
    let options = options.clone();
    runtime::block_on(async move {
        Client::connect(&location, &options)
            .await?
            .put(&name, batches)
            .await
    })?
}

/// Lists the flights of the server at `location`, with blocking calls.
pub fn list_flights(location: &str, options: &ClientOptions) -> Result<Vec<FlightInfo>> {
    let location = location.to_string();
    let options = options.clone();
    runtime::block_on(async move {
        Client::connect(&location, &options)
            .await?
            .list_flights()
            .await
    })?
}

//! The server: named [`Source`]s served through `list_flights`,
//! `get_flight_info`, `get_schema` and `do_get`; uploads through `do_put`
//! landed on a device and handed to the embedder's sink.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow_device::device::DeviceRef;
use arrow_device::HostStaging;
use arrow_flight::decode::FlightDataDecoder;
use arrow_flight::error::FlightError;
use arrow_flight::flight_service_server::{FlightService, FlightServiceServer};
use arrow_flight::{
    Action, ActionType, Criteria, Empty, FlightData, FlightDescriptor, FlightEndpoint, FlightInfo,
    HandshakeRequest, HandshakeResponse, PollInfo, PutResult, SchemaAsIpc, SchemaResult, Ticket,
};
use arrow_ipc::writer::IpcWriteOptions;
use arrow_schema::SchemaRef;
use futures_core::stream::BoxStream;
use futures_util::{FutureExt, StreamExt};
use tonic::transport::{Identity, ServerTlsConfig};
use tonic::{Request, Response, Status, Streaming};

use crate::client::DeviceBatches;
use crate::error::{chain, Error, Result};
use crate::pipeline::{self, Counted, Counts, Decoded};
use crate::runtime;
use crate::source::Source;

/// What the embedder's sink is called with for each upload: the
/// descriptor the client sent, and the batches landed on the sink's device
/// (an error in them, the client's or the wire's, arrives as an error from
/// the iterator, never as a shorter stream). Runs on a blocking thread; its
/// error is sent to the client.
pub type Sink = dyn Fn(&FlightDescriptor, DeviceBatches) -> arrow_device::Result<()> + Send + Sync;

/// A certificate chain and its private key, both PEM, for a TLS server.
#[derive(Clone)]
pub struct ServerTls {
    /// The certificate chain (PEM).
    pub certificate: Vec<u8>,
    /// The private key (PEM).
    pub key: Vec<u8>,
}

impl std::fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerTls").finish_non_exhaustive()
    }
}

/// Builds a [`FlightServer`].
pub struct FlightServerBuilder {
    sources: BTreeMap<String, Source>,
    sink: Option<(DeviceRef, Arc<Sink>)>,
    token: Option<String>,
    tls: Option<ServerTls>,
    depth: usize,
}

impl Default for FlightServerBuilder {
    fn default() -> Self {
        FlightServerBuilder {
            sources: BTreeMap::new(),
            sink: None,
            token: None,
            tls: None,
            depth: FlightServerBuilder::DEFAULT_DEPTH,
        }
    }
}

impl FlightServerBuilder {
    /// The default [`FlightServerBuilder::depth`].
    pub const DEFAULT_DEPTH: usize = 2;

    /// Serves `source` under `name` (the ticket and the descriptor path).
    /// A second source of the same name replaces the first.
    pub fn source(mut self, name: impl Into<String>, source: Source) -> Self {
        self.sources.insert(name.into(), source);
        self
    }

    /// Accepts uploads (`do_put`): each batch is copied onto `device` and
    /// the stream is handed to `sink`. Without a sink, `do_put` is
    /// `UNIMPLEMENTED`.
    pub fn sink(
        mut self,
        device: DeviceRef,
        sink: impl Fn(&FlightDescriptor, DeviceBatches) -> arrow_device::Result<()>
            + Send
            + Sync
            + 'static,
    ) -> Self {
        self.sink = Some((device, Arc::new(sink)));
        self
    }

    /// Requires `authorization: Bearer <token>` on every call.
    pub fn bearer_token(mut self, token: impl Into<String>) -> Self {
        self.token = Some(token.into());
        self
    }

    /// Serves over TLS with this identity.
    pub fn tls(mut self, tls: ServerTls) -> Self {
        self.tls = Some(tls);
        self
    }

    /// How many batches a `do_get` copies to the host ahead of the send
    /// (and a `do_put` lands ahead of the sink): at least 1, default 2.
    /// What a client that stops reading costs the server is bounded by it.
    pub fn depth(mut self, depth: usize) -> Self {
        self.depth = depth.max(1);
        self
    }

    fn into_inner(self) -> Arc<Inner> {
        Arc::new(Inner {
            staging: Arc::new(HostStaging::new(self.depth + 2)),
            sources: self.sources,
            sink: self.sink,
            token: self.token,
            depth: self.depth,
            gauges: Arc::new(Gauges::default()),
        })
    }

    /// The service, for an embedder that runs its own tonic server (add it
    /// to a `tonic::transport::Server` router). TLS is then the router's.
    pub fn into_service(self) -> FlightServiceServer<DeviceFlightService> {
        service(DeviceFlightService {
            inner: self.into_inner(),
        })
    }

    /// Binds `addr` (`HOST:PORT`; port 0 picks a free port) and serves on
    /// the crate's runtime until the returned server is shut down or
    /// dropped. Callable from any thread.
    pub fn spawn(self, addr: &str) -> Result<FlightServer> {
        // The identity is checked before the port is bound.
        let mut builder = tonic::transport::Server::builder().tcp_nodelay(true);
        if let Some(tls) = &self.tls {
            let config =
                ServerTlsConfig::new().identity(Identity::from_pem(&tls.certificate, &tls.key));
            builder = builder.tls_config(config).map_err(|e| Error::Config {
                what: "TLS identity",
                message: chain(&e),
            })?;
        }
        let binding = |source| Error::Io {
            context: format!("binding {addr}"),
            source,
        };
        let listener = std::net::TcpListener::bind(addr).map_err(binding)?;
        let local_addr = listener.local_addr().map_err(binding)?;
        listener.set_nonblocking(true).map_err(binding)?;
        let tls = self.tls.is_some();
        let inner = self.into_inner();
        let gauges = inner.gauges.clone();
        let runtime = runtime::runtime()?;
        let stop = Arc::new(tokio::sync::Notify::new());
        let stopped = stop.clone();
        let task = {
            let _entered = runtime.enter();
            let listener = tokio::net::TcpListener::from_std(listener).map_err(binding)?;
            let incoming =
                tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true));
            let service = service(DeviceFlightService { inner });
            runtime.spawn(async move {
                builder
                    .initial_stream_window_size(Some(4 << 20))
                    .initial_connection_window_size(Some(8 << 20))
                    .add_service(service)
                    .serve_with_incoming_shutdown(incoming, async move {
                        stopped.notified().await;
                    })
                    .await
                    .map_err(|e| chain(&e))
            })
        };
        Ok(FlightServer {
            local_addr,
            tls,
            stop,
            task: Some(task),
            gauges,
        })
    }
}

fn service(service: DeviceFlightService) -> FlightServiceServer<DeviceFlightService> {
    FlightServiceServer::new(service)
        .max_decoding_message_size(usize::MAX)
        .max_encoding_message_size(usize::MAX)
}

/// A running server. Dropping it stops it (as [`FlightServer::shutdown`]
/// does, without waiting).
#[derive(Debug)]
pub struct FlightServer {
    local_addr: SocketAddr,
    tls: bool,
    stop: Arc<tokio::sync::Notify>,
    task: Option<tokio::task::JoinHandle<std::result::Result<(), String>>>,
    gauges: Arc<Gauges>,
}

/// Stops a [`FlightServer`]; see [`FlightServer::stopper`].
#[derive(Debug, Clone)]
pub struct Stopper(Arc<tokio::sync::Notify>);

impl Stopper {
    /// Stops accepting; the server's [`FlightServer::wait`] returns once the
    /// requests in flight have finished.
    pub fn stop(&self) {
        // A stored permit: the serve loop sees it even if it is not
        // waiting yet.
        self.0.notify_one();
    }
}

impl FlightServer {
    /// A builder with no sources.
    pub fn builder() -> FlightServerBuilder {
        FlightServerBuilder::default()
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The location clients connect to: `grpc://` or `grpc+tls://` with the
    /// address (`localhost` for a TLS server on loopback, the name test
    /// certificates carry).
    ///
    /// A server listening on every interface (`0.0.0.0`, `[::]`) is named
    /// by its loopback address, which a client on this machine can reach.
    pub fn location(&self) -> String {
        let ip = self.local_addr.ip();
        let port = self.local_addr.port();
        if self.tls {
            let host = if ip.is_loopback() || ip.is_unspecified() {
                "localhost".to_string()
            } else {
                SocketAddr::new(ip, 0)
                    .to_string()
                    .trim_end_matches(":0")
                    .to_string()
            };
            return format!("grpc+tls://{host}:{port}");
        }
        let ip = match ip {
            std::net::IpAddr::V4(v4) if v4.is_unspecified() => std::net::Ipv4Addr::LOCALHOST.into(),
            std::net::IpAddr::V6(v6) if v6.is_unspecified() => std::net::Ipv6Addr::LOCALHOST.into(),
            other => other,
        };
        format!("grpc://{}", SocketAddr::new(ip, port))
    }

    /// Requests being served now.
    pub fn active_requests(&self) -> usize {
        self.gauges.requests.load(Ordering::Acquire)
    }

    /// Batches copied to the host for `do_get`s and not yet encoded, over
    /// every request: what clients that read slowly cost the server now.
    pub fn held_batches(&self) -> usize {
        self.gauges.held.load(Ordering::Acquire)
    }

    /// A handle that stops the server from anywhere (another thread, a
    /// signal handler's thread), for a caller blocked in
    /// [`FlightServer::wait`].
    pub fn stopper(&self) -> Stopper {
        Stopper(self.stop.clone())
    }

    /// Blocks until the server stops (through a [`Stopper`]) or its serve
    /// loop fails; returns that failure. Requests in flight when it is
    /// stopped finish first.
    pub fn wait(mut self) -> Result<()> {
        let Some(task) = self.task.take() else {
            return Ok(());
        };
        let outcome = runtime::block_on(task)?;
        finish(self.local_addr, outcome)
    }

    /// Stops accepting, lets the requests in flight finish for up to
    /// `grace`, then ends them.
    pub fn shutdown(mut self, grace: Duration) -> Result<()> {
        self.stop_now(grace)
    }

    fn stop_now(&mut self, grace: Duration) -> Result<()> {
        self.stop.notify_one();
        let Some(task) = self.task.take() else {
            return Ok(());
        };
        match runtime::block_on(end_within(task, grace))? {
            None => Ok(()),
            Some(outcome) => finish(self.local_addr, outcome),
        }
    }
}

type Served = std::result::Result<std::result::Result<(), String>, tokio::task::JoinError>;

/// Waits up to `grace` for the serve task (stopped already) to end, then
/// aborts it; its outcome if it ended in time.
async fn end_within(
    task: tokio::task::JoinHandle<std::result::Result<(), String>>,
    grace: Duration,
) -> Option<Served> {
    let abort = task.abort_handle();
    match tokio::time::timeout(grace, task).await {
        Ok(outcome) => Some(outcome),
        Err(_elapsed) => {
            abort.abort();
            None
        }
    }
}

/// The serve task's outcome as the API's.
fn finish(local_addr: SocketAddr, outcome: Served) -> Result<()> {
    match outcome {
        Ok(Ok(())) => Ok(()),
        Ok(Err(message)) => Err(Error::Io {
            context: format!("serving on {local_addr}"),
            source: std::io::Error::other(message),
        }),
        Err(join) => Err(Error::Device(pipeline::join_error(join))),
    }
}

impl Drop for FlightServer {
    fn drop(&mut self) {
        self.stop.notify_one();
        // The serve task ends once its connections close; a client that
        // keeps one open cannot keep it alive past a few seconds.
        if let Some(task) = self.task.take() {
            if let Ok(runtime) = runtime::runtime() {
                runtime.spawn(end_within(task, Duration::from_secs(5)));
            }
        }
    }
}

#[derive(Debug, Default)]
struct Gauges {
    requests: Arc<AtomicUsize>,
    held: Arc<AtomicUsize>,
}

struct Inner {
    sources: BTreeMap<String, Source>,
    sink: Option<(DeviceRef, Arc<Sink>)>,
    token: Option<String>,
    depth: usize,
    staging: Arc<HostStaging>,
    gauges: Arc<Gauges>,
}

impl Inner {
    /// Checks the bearer token, in constant time over the token's length.
    fn authorize<T>(&self, request: &Request<T>) -> std::result::Result<(), Status> {
        let Some(token) = &self.token else {
            return Ok(());
        };
        let Some(header) = request.metadata().get("authorization") else {
            return Err(Status::unauthenticated(
                "this server requires a bearer token (authorization: Bearer <token>), and none was sent",
            ));
        };
        let presented = header.as_bytes();
        let expected = format!("Bearer {token}");
        if !constant_time_eq(presented, expected.as_bytes()) {
            return Err(Status::unauthenticated("the bearer token is wrong"));
        }
        Ok(())
    }

    fn source(&self, name: &str) -> std::result::Result<Source, Status> {
        self.sources.get(name).cloned().ok_or_else(|| {
            let known: Vec<&str> = self.sources.keys().map(String::as_str).collect();
            Status::not_found(format!(
                "no source named {name:?}; this server has {known:?}"
            ))
        })
    }

    async fn schema(&self, name: &str) -> std::result::Result<SchemaRef, Status> {
        let source = self.source(name)?;
        let name = name.to_string();
        blocking(move || source.schema(&name)).await
    }

    fn flight_info(
        &self,
        name: &str,
        schema: &SchemaRef,
    ) -> std::result::Result<FlightInfo, Status> {
        let endpoint = FlightEndpoint::new().with_ticket(Ticket::new(name.to_string()));
        FlightInfo::new()
            .try_with_schema(schema)
            .map_err(|e| {
                Status::internal(format!("source {name:?}: its schema does not encode: {e}"))
            })
            .map(|info| {
                info.with_descriptor(FlightDescriptor::new_path(vec![name.to_string()]))
                    .with_endpoint(endpoint)
                    .with_total_records(-1)
                    .with_total_bytes(-1)
            })
    }
}

/// Compares without an early exit, so the time taken does not tell how
/// much of a guessed token was right.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    let mut difference = a.len() ^ b.len();
    for (i, byte) in b.iter().enumerate() {
        difference |= usize::from(a.get(i).copied().unwrap_or(0) ^ byte);
    }
    difference == 0
}

/// Runs blocking work (a source's factory, a file's open) off the async
/// workers; a panic in it is an `INTERNAL` status.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> std::result::Result<T, Status> + Send + 'static,
) -> std::result::Result<T, Status> {
    match tokio::task::spawn_blocking(move || catch_unwind(AssertUnwindSafe(work))).await {
        Ok(Ok(result)) => result,
        Ok(Err(payload)) => Err(Status::internal(
            arrow_device::Error::from_panic(payload).to_string(),
        )),
        Err(join) => Err(Status::internal(pipeline::join_error(join).to_string())),
    }
}

/// The name a ticket or a descriptor names: UTF-8, one path element.
fn ticket_name(ticket: &[u8]) -> std::result::Result<String, Status> {
    String::from_utf8(ticket.to_vec()).map_err(|_| {
        Status::invalid_argument("the ticket is not UTF-8; tickets here are source names")
    })
}

fn descriptor_name(descriptor: &FlightDescriptor) -> std::result::Result<String, Status> {
    match descriptor.path.as_slice() {
        [name] => Ok(name.clone()),
        _ => Err(Status::invalid_argument(format!(
            "expected a path descriptor of one element (a source name), got {descriptor}"
        ))),
    }
}

/// The Flight service behind [`FlightServer`]; see
/// [`FlightServerBuilder::into_service`].
pub struct DeviceFlightService {
    inner: Arc<Inner>,
}

type Stream<T> = Pin<Box<dyn futures_core::Stream<Item = std::result::Result<T, Status>> + Send>>;

/// Every request's future runs inside this: a panic becomes `INTERNAL` for
/// that request only.
async fn guarded<T>(
    future: impl std::future::Future<Output = std::result::Result<T, Status>>,
) -> std::result::Result<T, Status> {
    match AssertUnwindSafe(future).catch_unwind().await {
        Ok(result) => result,
        Err(payload) => Err(Status::internal(
            arrow_device::Error::from_panic(payload).to_string(),
        )),
    }
}

#[tonic::async_trait]
impl FlightService for DeviceFlightService {
    type HandshakeStream = Stream<HandshakeResponse>;
    type ListFlightsStream = Stream<FlightInfo>;
    type DoGetStream = Stream<FlightData>;
    type DoPutStream = Stream<PutResult>;
    type DoExchangeStream = Stream<FlightData>;
    type DoActionStream = Stream<arrow_flight::Result>;
    type ListActionsStream = Stream<ActionType>;

    async fn handshake(
        &self,
        _request: Request<Streaming<HandshakeRequest>>,
    ) -> std::result::Result<Response<Self::HandshakeStream>, Status> {
        Err(Status::unimplemented(
            "no handshake: send the bearer token in the authorization header of each call",
        ))
    }

    async fn list_flights(
        &self,
        request: Request<Criteria>,
    ) -> std::result::Result<Response<Self::ListFlightsStream>, Status> {
        guarded(async {
            self.inner.authorize(&request)?;
            // A source whose schema cannot be learnt (its factory fails)
            // is left out of the listing rather than failing it: the
            // others are still there, and a `do_get` or `get_flight_info`
            // of that one reports its error.
            let mut infos = Vec::new();
            for name in self.inner.sources.keys() {
                let Ok(schema) = self.inner.schema(name).await else {
                    continue;
                };
                infos.push(Ok(self.inner.flight_info(name, &schema)?));
            }
            Ok(Response::new(futures_util::stream::iter(infos).boxed()))
        })
        .await
    }

    async fn get_flight_info(
        &self,
        request: Request<FlightDescriptor>,
    ) -> std::result::Result<Response<FlightInfo>, Status> {
        guarded(async {
            self.inner.authorize(&request)?;
            let name = descriptor_name(request.get_ref())?;
            let schema = self.inner.schema(&name).await?;
            Ok(Response::new(self.inner.flight_info(&name, &schema)?))
        })
        .await
    }

    async fn poll_flight_info(
        &self,
        _request: Request<FlightDescriptor>,
    ) -> std::result::Result<Response<PollInfo>, Status> {
        Err(Status::unimplemented(
            "poll_flight_info: every flight here is ready; use get_flight_info",
        ))
    }

    async fn get_schema(
        &self,
        request: Request<FlightDescriptor>,
    ) -> std::result::Result<Response<SchemaResult>, Status> {
        guarded(async {
            self.inner.authorize(&request)?;
            let name = descriptor_name(request.get_ref())?;
            let schema = self.inner.schema(&name).await?;
            let options = IpcWriteOptions::default();
            let result = SchemaAsIpc::new(&schema, &options)
                .try_into()
                .map_err(|e| {
                    Status::internal(format!("source {name:?}: its schema does not encode: {e}"))
                })?;
            Ok(Response::new(result))
        })
        .await
    }

    async fn do_get(
        &self,
        request: Request<Ticket>,
    ) -> std::result::Result<Response<Self::DoGetStream>, Status> {
        guarded(async {
            self.inner.authorize(&request)?;
            let name = ticket_name(&request.get_ref().ticket)?;
            let source = self.inner.source(&name)?;
            let active = Counted::new(&self.inner.gauges.requests);
            let batches = {
                let name = name.clone();
                blocking(move || source.open(&name)).await?
            };
            let (first, staged) = pipeline::stage(
                batches,
                self.inner.depth,
                self.inner.staging.clone(),
                self.inner.gauges.held.clone(),
                None,
            );
            let body = pipeline::messages(pipeline::receiver_stream(staged)).map(move |item| {
                // The request stays counted as active until its stream is
                // dropped (ended, failed or cancelled).
                let _ = &active;
                item.map_err(|e| Status::internal(format!("source {name:?}: {e}")))
            });
            let encoded = futures_util::stream::once(std::future::ready(Ok(first))).chain(body);
            Ok(Response::new(encoded.boxed()))
        })
        .await
    }

    async fn do_put(
        &self,
        request: Request<Streaming<FlightData>>,
    ) -> std::result::Result<Response<Self::DoPutStream>, Status> {
        guarded(async {
            self.inner.authorize(&request)?;
            let Some((device, sink)) = self.inner.sink.clone() else {
                return Err(Status::unimplemented(
                    "this server accepts no uploads (it was started without a sink)",
                ));
            };
            let _active = Counted::new(&self.inner.gauges.requests);
            let peer = request
                .remote_addr()
                .map_or_else(|| "the client".to_string(), |a| a.to_string());
            let mut input = request.into_inner();
            let first = input.message().await?.ok_or_else(|| {
                Status::invalid_argument("do_put: the upload is empty (no message)")
            })?;
            let descriptor = first.flight_descriptor.clone().ok_or_else(|| {
                Status::invalid_argument("do_put: the first message carries no flight descriptor")
            })?;
            let flight = futures_util::stream::once(std::future::ready(Ok(first)))
                .chain(input.map(|m| m.map_err(|s| FlightError::Tonic(Box::new(s)))));
            let peer = format!("the client at {peer}");
            let decoded = Decoded::read_schema(FlightDataDecoder::new(flight), &peer, "do_put")
                .await
                .map_err(|e| Status::invalid_argument(e.to_string()))?;
            let schema = decoded.schema.clone();
            let (tx, rx) = std::sync::mpsc::channel();
            let counts = Arc::new(Counts::default());
            let landing = tokio::spawn(pipeline::land(
                decoded,
                device.clone(),
                self.inner.depth,
                counts.clone(),
                Instant::now(),
                move |landed| tx.send(landed).is_ok(),
            ));
            let batches = DeviceBatches::landing(
                peer,
                schema,
                rx,
                landing.abort_handle(),
                counts.clone(),
                device,
            );
            let sunk = {
                let descriptor = descriptor.clone();
                blocking(move || {
                    sink(&descriptor, batches)
                        .map_err(|e| Status::internal(format!("the sink refused the upload: {e}")))
                })
                .await
            };
            // A sink that returns before the end stops the landing.
            landing.abort();
            let input_error = landing.await.ok().flatten();
            match (sunk, input_error) {
                (_, Some(message)) => Err(Status::invalid_argument(message)),
                (Err(status), None) => Err(status),
                (Ok(()), None) => {
                    let summary = format!(
                        "{{\"batches\": {}, \"rows\": {}}}",
                        counts.batches.load(Ordering::Relaxed),
                        counts.rows.load(Ordering::Relaxed)
                    );
                    let result = PutResult {
                        app_metadata: summary.into(),
                    };
                    let stream: BoxStream<'static, _> =
                        futures_util::stream::once(std::future::ready(Ok(result))).boxed();
                    Ok(Response::new(stream))
                }
            }
        })
        .await
    }

    async fn do_exchange(
        &self,
        _request: Request<Streaming<FlightData>>,
    ) -> std::result::Result<Response<Self::DoExchangeStream>, Status> {
        Err(Status::unimplemented("do_exchange is not served here"))
    }

    async fn do_action(
        &self,
        _request: Request<Action>,
    ) -> std::result::Result<Response<Self::DoActionStream>, Status> {
        Err(Status::unimplemented("this server has no actions"))
    }

    async fn list_actions(
        &self,
        request: Request<Empty>,
    ) -> std::result::Result<Response<Self::ListActionsStream>, Status> {
        self.inner.authorize(&request)?;
        Ok(Response::new(futures_util::stream::empty().boxed()))
    }
}

#[cfg(test)]
mod tests {
    use super::constant_time_eq;

    #[test]
    fn token_comparison() {
        assert!(constant_time_eq(b"Bearer a", b"Bearer a"));
        assert!(!constant_time_eq(b"Bearer a", b"Bearer b"));
        assert!(!constant_time_eq(b"Bearer", b"Bearer a"));
        assert!(!constant_time_eq(b"Bearer aa", b"Bearer a"));
        assert!(!constant_time_eq(b"", b"x"));
    }
}

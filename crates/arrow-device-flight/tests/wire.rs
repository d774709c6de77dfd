//! What the client does with a peer that breaks the protocol, served by a
//! hand-written Flight server that sends exactly the messages a test
//! chooses; and with a server process that dies mid-stream.

mod common;

use std::io::{BufRead, BufReader};
use std::pin::Pin;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use arrow_array::{ArrayRef, Int32Array, Int64Array, RecordBatch};
use arrow_device::device::cpu;
use arrow_device_flight::arrow_flight::flight_service_server::{
    FlightService, FlightServiceServer,
};
use arrow_device_flight::arrow_flight::{
    Action, ActionType, Criteria, Empty, FlightData, FlightDescriptor, FlightInfo,
    HandshakeRequest, HandshakeResponse, PollInfo, PutResult, SchemaAsIpc, SchemaResult, Ticket,
};
use arrow_device_flight::tonic::{self, Request, Response, Status, Streaming};
use arrow_device_flight::{fetch, Batches, ClientOptions, FlightServer, Source};
use arrow_ipc::writer::{DictionaryTracker, IpcDataGenerator, IpcWriteContext, IpcWriteOptions};
use arrow_schema::Schema;

fn ints(values: Vec<i64>) -> RecordBatch {
    RecordBatch::try_from_iter([("v", Arc::new(Int64Array::from(values)) as ArrayRef)]).unwrap()
}

fn schema_message(schema: &Schema) -> FlightData {
    SchemaAsIpc::new(schema, &IpcWriteOptions::default()).into()
}

fn batch_message(batch: &RecordBatch) -> FlightData {
    let (dictionaries, data) = IpcDataGenerator::default()
        .encode(
            batch,
            &mut DictionaryTracker::new(false),
            &IpcWriteOptions::default(),
            &mut IpcWriteContext::default(),
        )
        .unwrap();
    assert!(dictionaries.is_empty());
    data.into()
}

/// Serves the same messages to every `do_get`.
struct Scripted(Vec<FlightData>);

type Stream<T> = Pin<Box<dyn futures_core::Stream<Item = Result<T, Status>> + Send>>;

#[tonic::async_trait]
impl FlightService for Scripted {
    type HandshakeStream = Stream<HandshakeResponse>;
    type ListFlightsStream = Stream<FlightInfo>;
    type DoGetStream = Stream<FlightData>;
    type DoPutStream = Stream<PutResult>;
    type DoExchangeStream = Stream<FlightData>;
    type DoActionStream = Stream<arrow_device_flight::arrow_flight::Result>;
    type ListActionsStream = Stream<ActionType>;

    async fn handshake(
        &self,
        _: Request<Streaming<HandshakeRequest>>,
    ) -> Result<Response<Self::HandshakeStream>, Status> {
        Err(Status::unimplemented("test"))
    }
    async fn list_flights(
        &self,
        _: Request<Criteria>,
    ) -> Result<Response<Self::ListFlightsStream>, Status> {
        Err(Status::unimplemented("test"))
    }
    async fn get_flight_info(
        &self,
        _: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        Err(Status::unimplemented("test"))
    }
    async fn poll_flight_info(
        &self,
        _: Request<FlightDescriptor>,
    ) -> Result<Response<PollInfo>, Status> {
        Err(Status::unimplemented("test"))
    }
    async fn get_schema(
        &self,
        _: Request<FlightDescriptor>,
    ) -> Result<Response<SchemaResult>, Status> {
        Err(Status::unimplemented("test"))
    }
    async fn do_get(&self, _: Request<Ticket>) -> Result<Response<Self::DoGetStream>, Status> {
        let messages: Vec<Result<FlightData, Status>> = self.0.iter().cloned().map(Ok).collect();
        Ok(Response::new(Box::pin(futures_util::stream::iter(
            messages,
        ))))
    }
    async fn do_put(
        &self,
        _: Request<Streaming<FlightData>>,
    ) -> Result<Response<Self::DoPutStream>, Status> {
        Err(Status::unimplemented("test"))
    }
    async fn do_exchange(
        &self,
        _: Request<Streaming<FlightData>>,
    ) -> Result<Response<Self::DoExchangeStream>, Status> {
        Err(Status::unimplemented("test"))
    }
    async fn do_action(
        &self,
        _: Request<Action>,
    ) -> Result<Response<Self::DoActionStream>, Status> {
        Err(Status::unimplemented("test"))
    }
    async fn list_actions(
        &self,
        _: Request<Empty>,
    ) -> Result<Response<Self::ListActionsStream>, Status> {
        Err(Status::unimplemented("test"))
    }
}

/// Runs a scripted server on its own runtime thread; returns its location.
fn scripted(messages: Vec<FlightData>) -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let location = format!("grpc://{}", listener.local_addr().unwrap());
    listener.set_nonblocking(true).unwrap();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            tonic::transport::Server::builder()
                .add_service(FlightServiceServer::new(Scripted(messages)))
                .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener))
                .await
                .unwrap();
        });
    });
    location
}

/// Every batch the client yields, then the error it ended on (`None`: a
/// clean end).
fn read(location: &str) -> (Vec<RecordBatch>, Option<String>) {
    let reader = match fetch(location, "x", &cpu(), &ClientOptions::default()) {
        Ok(reader) => reader,
        Err(e) => return (Vec::new(), Some(e.to_string())),
    };
    let mut batches = Vec::new();
    for array in reader {
        match array.and_then(|a| a.to_record_batch()) {
            Ok(batch) => batches.push(batch),
            Err(e) => return (batches, Some(e.to_string())),
        }
    }
    (batches, None)
}

#[test]
fn a_truncated_body_is_an_error_after_the_good_batches() {
    let first = ints(vec![1, 2, 3]);
    let second = ints((0..1000).collect());
    let mut truncated = batch_message(&second);
    truncated.data_body = truncated.data_body.slice(..truncated.data_body.len() / 2);
    let location = scripted(vec![
        schema_message(&first.schema()),
        batch_message(&first),
        truncated,
    ]);
    let (batches, error) = read(&location);
    assert_eq!(batches, vec![first]);
    let error = error.expect("a truncated message must not end the stream cleanly");
    assert!(
        error.contains(&format!("do_get at {location}: batch 1:")),
        "{error}"
    );
    assert!(error.contains("does not decode"), "{error}");
}

#[test]
fn a_corrupted_header_is_an_error() {
    let first = ints(vec![1, 2, 3]);
    let mut corrupted = batch_message(&first);
    let mut header = corrupted.data_header.to_vec();
    for byte in header.iter_mut().skip(8) {
        *byte ^= 0x5a;
    }
    corrupted.data_header = header.into();
    let location = scripted(vec![schema_message(&first.schema()), corrupted]);
    let (batches, error) = read(&location);
    assert!(batches.is_empty());
    let error = error.unwrap();
    assert!(error.contains("do_get at"), "{error}");
}

#[test]
fn a_stream_without_a_schema_is_an_error() {
    let first = ints(vec![1]);
    let (_, error) = read(&scripted(vec![batch_message(&first)]));
    assert!(error
        .unwrap()
        .contains("Received RecordBatch prior to Schema"));
    let (_, error) = read(&scripted(vec![]));
    assert!(error
        .unwrap()
        .contains("the stream ended before its schema message"));
}

#[test]
fn a_schema_that_changes_mid_stream_is_an_error() {
    let first = ints(vec![1, 2]);
    let other =
        RecordBatch::try_from_iter([("w", Arc::new(Int32Array::from(vec![7])) as ArrayRef)])
            .unwrap();
    let location = scripted(vec![
        schema_message(&first.schema()),
        batch_message(&first),
        schema_message(&other.schema()),
        batch_message(&other),
    ]);
    let (batches, error) = read(&location);
    assert_eq!(batches, vec![first]);
    let error = error.unwrap();
    assert!(
        error.contains("the schema changed mid-stream, after 1 batches"),
        "{error}"
    );
    assert!(
        error.contains("Field { \"w\": Int32 }") || error.contains("\"w\""),
        "{error}"
    );
}

const ROLE: &str = "ARROW_DEVICE_FLIGHT_TEST_ROLE";

/// The server process of `a_server_that_dies_mid_stream_is_an_error`:
/// serves an endless source and prints its location. Does nothing unless
/// that test started it.
#[test]
fn child_role_endless_server() {
    if std::env::var(ROLE).as_deref() != Ok("endless") {
        return;
    }
    let server = FlightServer::builder()
        .source(
            "endless",
            Source::new(|| {
                let batches = (0..).map(|i| Ok(ints(vec![i; 1024])));
                Ok(Batches::host(arrow_array::RecordBatchIterator::new(
                    batches,
                    ints(vec![]).schema(),
                )))
            }),
        )
        .spawn("127.0.0.1:0")
        .unwrap();
    println!("LOCATION {}", server.location());
    std::thread::sleep(Duration::from_secs(60));
}

#[test]
fn a_server_that_dies_mid_stream_is_an_error_not_the_end() {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "child_role_endless_server",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(ROLE, "endless")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let location = loop {
        let line = lines
            .next()
            .expect("the server printed no location")
            .unwrap();
        // libtest prints the test's name on the same line.
        if let Some((_, location)) = line.split_once("LOCATION ") {
            break location.trim().to_string();
        }
    };
    let mut reader = fetch(&location, "endless", &cpu(), &ClientOptions::default()).unwrap();
    for i in 0..5 {
        let batch = reader.next().unwrap().unwrap().to_record_batch().unwrap();
        assert_eq!(batch, ints(vec![i; 1024]));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    // What was already received may still arrive; then an error, never
    // the end of the stream.
    let ended = reader
        .find_map(|item| item.err())
        .expect("the stream ended cleanly");
    let message = ended.to_string();
    assert!(
        message.contains(&format!("do_get at {location}")),
        "{message}"
    );
    assert!(
        message.contains("UNKNOWN")
            || message.contains("UNAVAILABLE")
            || message.contains("INTERNAL")
            || message.contains("CANCELLED"),
        "{message}"
    );
}

//! The async forms: `fetch_async` (a `futures::Stream` of device batches),
//! a source that is an async device stream, and `Client` on the caller's
//! own runtime.

mod common;

use std::time::Duration;

use arrow_array::RecordBatch;
use arrow_device::DeviceType;
use arrow_device_flight::{fetch_async, Batches, Client, ClientOptions, FlightServer, Source};
use futures_util::StreamExt;

use common::{emulated, golden_streams};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fetch_async_from_an_async_source_onto_the_emulated_device() {
    let golden = golden_streams();
    let g = golden
        .iter()
        .find(|g| g.name == "generated_nested")
        .unwrap();
    let device = emulated(Duration::from_millis(2));
    let (schema, batches, source_device) = (g.schema.clone(), g.batches.clone(), device.clone());
    let server = FlightServer::builder()
        .source(
            "async",
            Source::new(move || {
                // An async stream of device arrays, each copied onto the
                // emulated device when polled.
                let device = source_device.clone();
                let arrays = futures_util::stream::iter(batches.clone()).then(move |batch| {
                    let device = device.clone();
                    async move {
                        arrow_device::DeviceArray::from_record_batch(&batch).to_device(&device)
                    }
                });
                Ok(Batches::stream(schema.clone(), arrays))
            }),
        )
        .spawn("127.0.0.1:0")
        .unwrap();

    let mut stream = fetch_async(
        &server.location(),
        "async",
        &device,
        &ClientOptions::default(),
    )
    .await
    .unwrap();
    assert_eq!(stream.schema(), g.schema);
    assert_eq!(stream.device().device_type(), DeviceType::EXT_DEV);
    let mut got: Vec<RecordBatch> = Vec::new();
    while let Some(array) = stream.next().await {
        let array = array.unwrap();
        assert_eq!(array.device_type(), DeviceType::EXT_DEV);
        assert!(!array.sync_event().is_null(), "the copy's event");
        got.push(array.to_record_batch().unwrap());
    }
    assert_eq!(got, g.batches);
    assert_eq!(stream.stats().batches, g.batches.len());
    // After the end, only the end.
    assert!(stream.next().await.is_none());
}

#[tokio::test(flavor = "current_thread")]
async fn a_client_on_the_callers_runtime_lists_and_reads_schemas() {
    let golden = golden_streams();
    let mut builder = FlightServer::builder();
    for g in golden.iter().take(3) {
        builder = builder.source(g.name.clone(), Source::ipc_file(&g.path));
    }
    let server = builder.spawn("127.0.0.1:0").unwrap();
    let mut client = Client::connect(&server.location(), &ClientOptions::default())
        .await
        .unwrap();
    assert_eq!(client.location(), server.location());
    let flights = client.list_flights().await.unwrap();
    assert_eq!(flights.len(), 3);
    for g in golden.iter().take(3) {
        assert_eq!(client.get_schema(&g.name).await.unwrap(), g.schema);
        let info = client.get_flight_info(&g.name).await.unwrap();
        assert_eq!(
            info.endpoint[0].ticket.as_ref().unwrap().ticket,
            g.name.as_bytes()
        );
        assert_eq!(info.total_records, -1);
    }
    let e = client.get_schema("missing").await.unwrap_err();
    assert_eq!(e.code(), Some(arrow_device_flight::tonic::Code::NotFound));
    // A stream dropped before its end cancels the call; the server sees
    // the request end.
    let first = &golden[0];
    let stream = client
        .fetch(first.name.clone(), &arrow_device::device::cpu())
        .await
        .unwrap();
    drop(stream);
    assert!(common::eventually(|| server.active_requests() == 0));
}

#[test]
fn a_panic_in_an_async_source_is_an_error_not_the_end() {
    let golden = golden_streams();
    let g = golden
        .iter()
        .find(|g| g.name == "generated_primitive")
        .unwrap();
    let (schema, batch) = (g.schema.clone(), g.batches[0].clone());
    let server = FlightServer::builder()
        .source(
            "panics",
            Source::new(move || {
                let batch = batch.clone();
                let arrays = futures_util::stream::iter(0..3).map(move |i| {
                    if i == 1 {
                        panic!("the async source broke at {i}");
                    }
                    Ok(arrow_device::DeviceArray::from_record_batch(&batch))
                });
                Ok(Batches::stream(schema.clone(), arrays))
            }),
        )
        .spawn("127.0.0.1:0")
        .unwrap();
    let device = arrow_device::device::cpu();
    let mut reader = arrow_device_flight::fetch(
        &server.location(),
        "panics",
        &device,
        &ClientOptions::default(),
    )
    .unwrap();
    assert_eq!(
        reader.next().unwrap().unwrap().to_record_batch().unwrap(),
        g.batches[0]
    );
    let e = reader
        .next()
        .expect("a panicking source must not end the stream cleanly")
        .unwrap_err()
        .to_string();
    assert!(e.contains("source \"panics\""), "{e}");
    assert!(e.contains("the async source broke at 1"), "{e}");
}

//! Every golden stream through our server and our client: served from the
//! IPC file and from a device stream on the emulated device (strict, its
//! copies late), fetched onto the CPU and onto the emulated device (strict,
//! late), and uploaded with `put` to a sink on the emulated device; equal
//! to the golden batches at the end.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use arrow_array::RecordBatch;
use arrow_device::device::{cpu, DeviceRef};
use arrow_device_flight::{
    fetch, fetch_batches, put, Batches, ClientOptions, FlightServer, Source,
};

use common::{device_stream, emulated, golden_streams, Golden};

fn host_batches(
    arrays: impl Iterator<Item = arrow_device::Result<arrow_device::DeviceArray>>,
    device: &DeviceRef,
    name: &str,
) -> Vec<RecordBatch> {
    arrays
        .map(|array| {
            let array = array.unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(array.device_type(), device.device_type(), "{name}");
            array
                .to_record_batch()
                .unwrap_or_else(|e| panic!("{name}: {e}"))
        })
        .collect()
}

fn assert_same(name: &str, golden: &Golden, got: &[RecordBatch]) {
    assert_eq!(got.len(), golden.batches.len(), "{name}: batch count");
    for (i, (got, expected)) in got.iter().zip(&golden.batches).enumerate() {
        assert_eq!(
            got.schema_ref(),
            expected.schema_ref(),
            "{name}: batch {i} schema"
        );
        assert_eq!(got, expected, "{name}: batch {i}");
    }
}

fn server(golden: &[Golden], served_from: &DeviceRef) -> FlightServer {
    let mut builder = FlightServer::builder();
    for g in golden {
        builder = builder.source(g.name.clone(), Source::ipc_file(&g.path));
        let (schema, batches, device) = (g.schema.clone(), g.batches.clone(), served_from.clone());
        builder = builder.source(
            format!("{}@device", g.name),
            Source::new(move || {
                Batches::device(device_stream(schema.clone(), batches.clone(), &device))
            }),
        );
    }
    builder.spawn("127.0.0.1:0").unwrap()
}

#[test]
fn every_golden_stream_through_our_server_and_client() {
    let golden = golden_streams();
    let late = emulated(Duration::from_millis(2));
    let server = server(&golden, &late);
    let location = server.location();
    let options = ClientOptions::default();
    for device in [cpu(), late.clone()] {
        for g in &golden {
            for ticket in [g.name.clone(), format!("{}@device", g.name)] {
                let what = format!("{ticket} onto {:?}", device.device_type());
                let reader = fetch(&location, ticket.clone(), &device, &options)
                    .unwrap_or_else(|e| panic!("{what}: {e}"));
                assert_eq!(reader.schema().as_ref(), Some(&g.schema), "{what}");
                let got = host_batches(reader, &device, &what);
                assert_same(&what, g, &got);
            }
        }
    }
    assert!(common::eventually(|| server.active_requests() == 0));
    assert_eq!(server.held_batches(), 0);
}

#[test]
fn every_golden_stream_uploaded_to_a_sink_on_the_emulated_device() {
    let golden = golden_streams();
    let late = emulated(Duration::from_millis(2));
    // Each upload's descriptor path and batches, as the sink received them.
    type Uploads = Arc<Mutex<Vec<(Vec<String>, Vec<RecordBatch>)>>>;
    let received: Uploads = Default::default();
    let sink_device = late.clone();
    let server = {
        let received = received.clone();
        FlightServer::builder()
            .sink(late.clone(), move |descriptor, batches| {
                let path = descriptor.path.clone();
                assert_eq!(batches.device().device_type(), sink_device.device_type());
                let mut got = Vec::new();
                for array in batches {
                    let array = array?;
                    assert_eq!(array.device_type(), sink_device.device_type());
                    got.push(array.to_record_batch()?);
                }
                received.lock().unwrap().push((path, got));
                Ok(())
            })
            .spawn("127.0.0.1:0")
            .unwrap()
    };
    let options = ClientOptions::default();
    for g in &golden {
        // From the host and from a device stream on the emulated device.
        let sources = [
            Batches::ipc_file(&g.path).unwrap(),
            Batches::device(device_stream(g.schema.clone(), g.batches.clone(), &late)).unwrap(),
        ];
        for batches in sources {
            let summary = put(&server.location(), &g.name, batches, &options)
                .unwrap_or_else(|e| panic!("{}: {e}", g.name));
            assert_eq!(summary.batches, g.batches.len(), "{}", g.name);
            assert!(summary.complete, "{}", g.name);
            let rows: usize = g.batches.iter().map(RecordBatch::num_rows).sum();
            assert_eq!(summary.rows, rows, "{}", g.name);
            assert_eq!(
                summary.app_metadata,
                vec![bytes::Bytes::from(format!(
                    "{{\"batches\": {}, \"rows\": {rows}}}",
                    g.batches.len()
                ))],
                "{}",
                g.name
            );
            let (path, got) = received.lock().unwrap().pop().unwrap();
            assert_eq!(path, vec![g.name.clone()]);
            assert_same(&g.name, g, &got);
        }
    }
}

#[test]
fn stats_count_what_landed() {
    let golden = golden_streams();
    let g = golden
        .iter()
        .find(|g| g.name == "generated_primitive")
        .unwrap();
    let server = FlightServer::builder()
        .source("p", Source::ipc_file(&g.path))
        .spawn("127.0.0.1:0")
        .unwrap();
    let device = emulated(Duration::ZERO);
    let mut batches =
        fetch_batches(&server.location(), "p", &device, &ClientOptions::default()).unwrap();
    let got = host_batches(&mut batches, &device, "p");
    assert_same("p", g, &got);
    let stats = batches.stats();
    assert_eq!(stats.batches, g.batches.len());
    assert_eq!(
        stats.rows,
        g.batches.iter().map(RecordBatch::num_rows).sum::<usize>()
    );
    assert!(stats.wire_bytes > 0);
    assert!(stats.first_batch_landed.is_some_and(|t| t <= stats.elapsed));
}

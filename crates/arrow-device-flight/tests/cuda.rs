//! Flight on the CUDA devices: every golden stream served from a device
//! stream on the GPU (copied to the host through pinned staging) and
//! fetched onto the GPU, and uploaded to a sink on the GPU. Runs against a
//! real GPU or the CUDA driver stand-in (`scripts/test.sh`); skipped
//! without a driver unless `ARROW_DEVICE_REQUIRE_GPU` is set.
#![cfg(feature = "cuda")]

mod common;

use std::sync::{Arc, Mutex};

use arrow_array::RecordBatch;
use arrow_device::device::cuda;
use arrow_device::device::DeviceRef;
use arrow_device::DeviceType;
use arrow_device_flight::{fetch, put, Batches, ClientOptions, FlightServer, Source};

use common::{device_stream, golden_streams};

fn gpu(test: &str) -> Option<DeviceRef> {
    match cuda::device(DeviceType::CUDA, 0) {
        Ok(device) if cuda::is_available() => Some(device),
        other => {
            let why = other
                .err()
                .map_or("no device".to_string(), |e| e.to_string());
            assert!(
                std::env::var_os("ARROW_DEVICE_REQUIRE_GPU").is_none(),
                "{test}: no CUDA GPU ({why}), and ARROW_DEVICE_REQUIRE_GPU is set"
            );
            println!("{test}: skipped, no CUDA GPU: {why}");
            None
        }
    }
}

#[test]
fn golden_streams_from_the_gpu_to_the_gpu() {
    let Some(device) = gpu("golden_streams_from_the_gpu_to_the_gpu") else {
        return;
    };
    let golden = golden_streams();
    let mut builder = FlightServer::builder();
    for g in &golden {
        let (schema, batches, device) = (g.schema.clone(), g.batches.clone(), device.clone());
        builder = builder.source(
            g.name.clone(),
            Source::new(move || {
                Batches::device(device_stream(schema.clone(), batches.clone(), &device))
            }),
        );
    }
    let server = builder.spawn("127.0.0.1:0").unwrap();
    for g in &golden {
        let reader = fetch(
            &server.location(),
            g.name.clone(),
            &device,
            &ClientOptions::default(),
        )
        .unwrap_or_else(|e| panic!("{}: {e}", g.name));
        let got: Vec<RecordBatch> = reader
            .map(|a| {
                let a = a.unwrap_or_else(|e| panic!("{}: {e}", g.name));
                assert_eq!(a.device_type(), DeviceType::CUDA, "{}", g.name);
                assert!(!a.sync_event().is_null(), "{}: the copy's event", g.name);
                a.to_record_batch().unwrap()
            })
            .collect();
        assert_eq!(got, g.batches, "{}", g.name);
    }
}

#[test]
fn uploads_land_on_the_gpu() {
    let Some(device) = gpu("uploads_land_on_the_gpu") else {
        return;
    };
    let received: Arc<Mutex<Vec<RecordBatch>>> = Arc::default();
    let server = {
        let received = received.clone();
        FlightServer::builder()
            .sink(device.clone(), move |_, batches| {
                for array in batches {
                    let array = array?;
                    assert_eq!(array.device_type(), DeviceType::CUDA);
                    received.lock().unwrap().push(array.to_record_batch()?);
                }
                Ok(())
            })
            .spawn("127.0.0.1:0")
            .unwrap()
    };
    for g in golden_streams() {
        let batches =
            Batches::device(device_stream(g.schema.clone(), g.batches.clone(), &device)).unwrap();
        put(
            &server.location(),
            &g.name,
            batches,
            &ClientOptions::default(),
        )
        .unwrap_or_else(|e| panic!("{}: {e}", g.name));
        let got: Vec<RecordBatch> = std::mem::take(&mut *received.lock().unwrap());
        assert_eq!(got, g.batches, "{}", g.name);
    }
}

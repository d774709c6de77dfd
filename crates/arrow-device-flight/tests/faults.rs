//! Faults, each a clear error on the side that sees it, with nothing leaked
//! and the server still serving other clients afterwards: tokens, TLS,
//! unknown names, malformed and truncated IPC, schema changes, a batch on
//! the wrong device, panics, a server that dies mid-stream, a client that
//! disconnects or stops reading, and failed uploads.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arrow_array::{ArrayRef, Int32Array, Int64Array, RecordBatch, StringArray};
use arrow_device::device::{cpu, DeviceRef};
use arrow_device::stream::{export_device_arrays, DeviceStreamReader};
use arrow_device::{DeviceArray, DeviceType, ValidationLevel};
use arrow_device_flight::tonic::Code;
use arrow_device_flight::{
    fetch, fetch_batches, list_flights, put, Batches, ClientOptions, Error, FlightServer,
    ServerTls, Source,
};
use arrow_schema::{DataType, Field, Schema, SchemaRef};

use common::{emulated, eventually, host_reader};

fn batch(first: i64, rows: usize) -> RecordBatch {
    let ids: Vec<i64> = (first..first + rows as i64).collect();
    let names: Vec<String> = ids.iter().map(|i| format!("row {i}")).collect();
    RecordBatch::try_from_iter([
        ("id", Arc::new(Int64Array::from(ids)) as ArrayRef),
        ("name", Arc::new(StringArray::from(names)) as ArrayRef),
    ])
    .unwrap()
}

fn schema() -> SchemaRef {
    batch(0, 1).schema()
}

/// `count` batches of `rows` rows, made on demand; `made` counts them and
/// `dropped` counts the readers released.
struct Counted {
    next: usize,
    count: usize,
    rows: usize,
    made: Arc<AtomicUsize>,
    dropped: Arc<AtomicUsize>,
}

impl Iterator for Counted {
    type Item = Result<RecordBatch, arrow_schema::ArrowError>;
    fn next(&mut self) -> Option<Self::Item> {
        if self.next == self.count {
            return None;
        }
        self.made.fetch_add(1, Ordering::SeqCst);
        self.next += 1;
        Some(Ok(batch((self.next * self.rows) as i64, self.rows)))
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.dropped.fetch_add(1, Ordering::SeqCst);
    }
}

#[derive(Default, Clone)]
struct Counters {
    made: Arc<AtomicUsize>,
    dropped: Arc<AtomicUsize>,
    opened: Arc<AtomicUsize>,
}

fn counted_source(count: usize, rows: usize, counters: &Counters) -> Source {
    let counters = counters.clone();
    Source::new(move || {
        counters.opened.fetch_add(1, Ordering::SeqCst);
        let reader = Counted {
            next: 0,
            count,
            rows,
            made: counters.made.clone(),
            dropped: counters.dropped.clone(),
        };
        Ok(Batches::host(arrow_array::RecordBatchIterator::new(
            reader,
            schema(),
        )))
    })
}

fn small_source() -> Source {
    Source::new(|| {
        Ok(Batches::host(host_reader(
            schema(),
            vec![batch(0, 3), batch(3, 2)],
        )))
    })
}

fn fetch_all(
    location: &str,
    ticket: &str,
    options: &ClientOptions,
) -> Result<Vec<RecordBatch>, String> {
    let reader = fetch(location, ticket.to_string(), &cpu(), options).map_err(|e| e.to_string())?;
    reader
        .map(|a| {
            a.and_then(|a| a.to_record_batch())
                .map_err(|e| e.to_string())
        })
        .collect()
}

fn code_of(e: &Error) -> Option<Code> {
    e.code()
}

#[test]
fn a_missing_or_wrong_token_is_unauthenticated_and_the_server_keeps_serving() {
    let server = FlightServer::builder()
        .source("s", small_source())
        .bearer_token("sesame")
        .spawn("127.0.0.1:0")
        .unwrap();
    let location = server.location();
    let none = fetch(&location, "s", &cpu(), &ClientOptions::default()).unwrap_err();
    assert_eq!(code_of(&none), Some(Code::Unauthenticated), "{none}");
    assert!(
        none.to_string().contains("requires a bearer token"),
        "{none}"
    );
    assert!(
        none.to_string().contains(&format!("do_get at {location}")),
        "{none}"
    );
    let wrong = ClientOptions {
        token: Some("open".into()),
        ..Default::default()
    };
    let e = fetch(&location, "s", &cpu(), &wrong).unwrap_err();
    assert_eq!(code_of(&e), Some(Code::Unauthenticated));
    assert!(e.to_string().contains("the bearer token is wrong"), "{e}");
    let e = list_flights(&location, &wrong).unwrap_err();
    assert_eq!(code_of(&e), Some(Code::Unauthenticated));
    let right = ClientOptions {
        token: Some("sesame".into()),
        ..Default::default()
    };
    let got = fetch_all(&location, "s", &right).unwrap();
    assert_eq!(got, vec![batch(0, 3), batch(3, 2)]);
    let flights = list_flights(&location, &right).unwrap();
    assert_eq!(flights.len(), 1);
    assert_eq!(flights[0].endpoint[0].ticket.as_ref().unwrap().ticket, "s");
}

#[test]
fn an_unknown_name_is_not_found_naming_what_exists() {
    let server = FlightServer::builder()
        .source("a", small_source())
        .source("b", small_source())
        .spawn("127.0.0.1:0")
        .unwrap();
    let e = fetch(&server.location(), "c", &cpu(), &ClientOptions::default()).unwrap_err();
    assert_eq!(code_of(&e), Some(Code::NotFound));
    assert!(
        e.to_string()
            .contains("no source named \"c\"; this server has [\"a\", \"b\"]"),
        "{e}"
    );
}

#[test]
fn a_refused_connection_names_the_location() {
    // A port that was free a moment ago: nothing listens there.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let location = format!("grpc://127.0.0.1:{port}");
    let e = fetch(&location, "x", &cpu(), &ClientOptions::default()).unwrap_err();
    assert!(matches!(e, Error::Connect { .. }), "{e:?}");
    assert!(
        e.to_string()
            .starts_with(&format!("cannot connect to {location}")),
        "{e}"
    );
}

#[test]
fn a_source_served_once_refuses_a_second_reader() {
    let server = FlightServer::builder()
        .source(
            "once",
            Source::once(Batches::host(host_reader(schema(), vec![batch(0, 2)]))),
        )
        .spawn("127.0.0.1:0")
        .unwrap();
    assert_eq!(
        fetch_all(&server.location(), "once", &ClientOptions::default()).unwrap(),
        vec![batch(0, 2)]
    );
    let e = fetch(
        &server.location(),
        "once",
        &cpu(),
        &ClientOptions::default(),
    )
    .unwrap_err();
    assert_eq!(code_of(&e), Some(Code::FailedPrecondition));
    assert!(
        e.to_string()
            .contains("can be read once, and was already served"),
        "{e}"
    );
    // Its schema is still listed.
    let flights = list_flights(&server.location(), &ClientOptions::default()).unwrap();
    assert_eq!(Schema::try_from(flights[0].clone()).unwrap(), *schema());
}

struct Pki {
    ca: Vec<u8>,
    server: ServerTls,
}

fn make_pki() -> Pki {
    use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().unwrap()).unwrap();
    let key = KeyPair::generate().unwrap();
    let cert = CertificateParams::new(vec!["localhost".to_string()])
        .unwrap()
        .signed_by(&key, &ca)
        .unwrap();
    Pki {
        ca: ca.pem().into_bytes(),
        server: ServerTls {
            certificate: cert.pem().into_bytes(),
            key: key.serialize_pem().into_bytes(),
        },
    }
}

#[test]
fn tls_with_a_certificate_made_at_test_time() {
    let pki = make_pki();
    let server = FlightServer::builder()
        .source("s", small_source())
        .tls(pki.server.clone())
        .spawn("127.0.0.1:0")
        .unwrap();
    let location = server.location();
    assert!(location.starts_with("grpc+tls://localhost:"), "{location}");
    let trusted = ClientOptions {
        tls_root: Some(pki.ca.clone()),
        ..Default::default()
    };
    assert_eq!(
        fetch_all(&location, "s", &trusted).unwrap(),
        vec![batch(0, 3), batch(3, 2)]
    );

    // A client that trusts another authority refuses the server.
    let other = ClientOptions {
        tls_root: Some(make_pki().ca),
        ..Default::default()
    };
    let e = fetch(&location, "s", &cpu(), &other).unwrap_err();
    assert!(
        matches!(e, Error::Connect { .. } | Error::Status { .. }),
        "{e:?}"
    );
    assert!(e.to_string().to_lowercase().contains("certificate"), "{e}");

    // A client without TLS gets an error, not data.
    let plain = location.replace("grpc+tls://", "grpc://");
    assert!(fetch(&plain, "s", &cpu(), &ClientOptions::default()).is_err());

    // And the server still serves.
    assert_eq!(fetch_all(&location, "s", &trusted).unwrap().len(), 2);
}

#[test]
fn a_source_whose_schema_changes_mid_stream_fails_the_stream() {
    let other =
        RecordBatch::try_from_iter([("x", Arc::new(Int32Array::from(vec![1])) as ArrayRef)])
            .unwrap();
    let server = FlightServer::builder()
        .source(
            "changing",
            Source::new(move || {
                let batches = vec![Ok(batch(0, 2)), Ok(other.clone())];
                Ok(Batches::host(arrow_array::RecordBatchIterator::new(
                    batches,
                    schema(),
                )))
            }),
        )
        .spawn("127.0.0.1:0")
        .unwrap();
    let mut reader = fetch(
        &server.location(),
        "changing",
        &cpu(),
        &ClientOptions::default(),
    )
    .unwrap();
    assert_eq!(
        reader.next().unwrap().unwrap().to_record_batch().unwrap(),
        batch(0, 2)
    );
    let e = reader.next().unwrap().unwrap_err().to_string();
    assert!(e.contains("INTERNAL"), "{e}");
    assert!(e.contains("source \"changing\""), "{e}");
    assert!(
        e.contains("batch 1 > batch: the schema changed mid-stream"),
        "{e}"
    );
    assert!(reader.next().is_none());
}

#[test]
fn a_batch_on_the_wrong_device_in_a_served_device_stream_is_an_error() {
    let late = emulated(Duration::ZERO);
    let server = FlightServer::builder()
        .source(
            "mixed",
            Source::new(move || {
                let on_cpu = DeviceArray::from_record_batch(&batch(0, 2));
                let on_device = on_cpu.to_device(&late)?;
                let field = Field::new("", DataType::Struct(schema().fields().clone()), false);
                // Declared a CPU stream, the second array is on the
                // emulated device.
                let stream = export_device_arrays(
                    field,
                    DeviceType::CPU,
                    vec![Ok(on_cpu), Ok(on_device)].into_iter(),
                )?;
                // SAFETY: the core's own exporter.
                let reader = unsafe { DeviceStreamReader::try_new(stream, ValidationLevel::Full) }?;
                Batches::device(reader)
            }),
        )
        .spawn("127.0.0.1:0")
        .unwrap();
    let mut reader = fetch(
        &server.location(),
        "mixed",
        &cpu(),
        &ClientOptions::default(),
    )
    .unwrap();
    assert_eq!(
        reader.next().unwrap().unwrap().to_record_batch().unwrap(),
        batch(0, 2)
    );
    let e = reader.next().unwrap().unwrap_err().to_string();
    assert!(e.contains("source \"mixed\""), "{e}");
    assert!(e.contains("EXT_DEV") || e.contains("device"), "{e}");
    // The server serves the next request alike.
    let again = fetch_all(&server.location(), "mixed", &ClientOptions::default()).unwrap_err();
    assert!(again.contains("source \"mixed\""), "{again}");
}

#[test]
fn panics_in_a_source_are_internal_errors_of_that_request_only() {
    let server = FlightServer::builder()
        .source("opens", Source::new(|| panic!("the factory broke")))
        .source(
            "reads",
            Source::new(|| {
                let batches = (0..3).map(|i| {
                    if i == 1 {
                        panic!("the reader broke at {i}");
                    }
                    Ok(batch(0, 1))
                });
                Ok(Batches::host(arrow_array::RecordBatchIterator::new(
                    batches,
                    schema(),
                )))
            }),
        )
        .source("fine", small_source())
        .spawn("127.0.0.1:0")
        .unwrap();
    let location = server.location();
    let e = fetch(&location, "opens", &cpu(), &ClientOptions::default()).unwrap_err();
    assert_eq!(code_of(&e), Some(Code::Internal));
    assert!(e.to_string().contains("the factory broke"), "{e}");
    let e = fetch_all(&location, "reads", &ClientOptions::default()).unwrap_err();
    assert!(e.contains("the reader broke at 1"), "{e}");
    assert_eq!(
        fetch_all(&location, "fine", &ClientOptions::default())
            .unwrap()
            .len(),
        2
    );
    assert!(eventually(|| server.active_requests() == 0));
}

#[test]
fn a_client_that_disconnects_releases_the_source_and_the_server_keeps_serving() {
    let counters = Counters::default();
    let server = FlightServer::builder()
        .source("long", counted_source(10_000, 1024, &counters))
        .spawn("127.0.0.1:0")
        .unwrap();
    let mut reader = fetch(
        &server.location(),
        "long",
        &cpu(),
        &ClientOptions::default(),
    )
    .unwrap();
    for _ in 0..3 {
        reader.next().unwrap().unwrap();
    }
    drop(reader);
    assert!(
        eventually(|| counters.dropped.load(Ordering::SeqCst) == 1),
        "the source was not released after the client went away"
    );
    assert!(counters.made.load(Ordering::SeqCst) < 10_000);
    assert!(eventually(|| server.active_requests() == 0));
    assert!(
        eventually(|| server.held_batches() == 0),
        "{}",
        server.held_batches()
    );
    // Another client reads the whole of it.
    let counters2 = Counters::default();
    drop(counters2);
    let all = fetch(
        &server.location(),
        "long",
        &cpu(),
        &ClientOptions::default(),
    )
    .unwrap()
    .count();
    assert_eq!(all, 10_000);
    assert!(eventually(|| counters.dropped.load(Ordering::SeqCst) == 2));
}

#[test]
fn a_client_that_stops_reading_costs_the_server_a_bounded_number_of_batches() {
    let counters = Counters::default();
    // 64 KiB-ish batches: many times the flow-control windows in total.
    let server = FlightServer::builder()
        .source("long", counted_source(100_000, 4096, &counters))
        .depth(2)
        .spawn("127.0.0.1:0")
        .unwrap();
    let options = ClientOptions {
        prefetch: 2,
        ..Default::default()
    };
    let mut batches = fetch_batches(&server.location(), "long", &cpu(), &options).unwrap();
    batches.next().unwrap().unwrap();
    // The client holds `prefetch` landed batches and the transport's
    // windows fill; then the server's producer stops.
    assert!(eventually(
        || batches.stats().batches == 1 + options.prefetch
    ));
    std::thread::sleep(Duration::from_millis(500));
    let made = counters.made.load(Ordering::SeqCst);
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        counters.made.load(Ordering::SeqCst),
        made,
        "the server kept producing"
    );
    // Windows of 4 + 8 MiB over ~70 KiB batches, plus depth + 1 staged.
    assert!(made < 400, "made {made}");
    // `depth` queued plus the one being copied.
    assert!(server.held_batches() <= 3, "{}", server.held_batches());
    assert_eq!(
        batches.stats().batches,
        1 + options.prefetch,
        "the client kept landing"
    );
    // Reading again resumes the flow.
    for _ in 0..10 {
        batches.next().unwrap().unwrap();
    }
    drop(batches);
    assert!(eventually(|| counters.dropped.load(Ordering::SeqCst) == 1));
}

#[test]
fn uploads_no_sink_a_failing_sink_and_a_failing_source() {
    let received: Arc<Mutex<Vec<String>>> = Default::default();
    let rows_seen = Arc::new(AtomicUsize::new(0));
    let no_sink = FlightServer::builder().spawn("127.0.0.1:0").unwrap();
    let e = put(
        &no_sink.location(),
        "x",
        Batches::host(host_reader(schema(), vec![batch(0, 1)])),
        &ClientOptions::default(),
    )
    .unwrap_err();
    assert_eq!(code_of(&e), Some(Code::Unimplemented));
    assert!(e.to_string().contains("accepts no uploads"), "{e}");

    let server = {
        let received = received.clone();
        let rows_seen = rows_seen.clone();
        FlightServer::builder()
            .sink(cpu(), move |descriptor, batches| {
                let name = descriptor.path.join("/");
                if name == "refused" {
                    return Err(arrow_device::Error::NotSupported("no room for it".into()));
                }
                let mut rows = 0;
                for array in batches {
                    match array {
                        Ok(array) => {
                            rows += array.len();
                            rows_seen.fetch_add(array.len(), Ordering::SeqCst);
                        }
                        Err(e) => {
                            received
                                .lock()
                                .unwrap()
                                .push(format!("{name}: error after {rows} rows: {e}"));
                            return Err(e);
                        }
                    }
                }
                received
                    .lock()
                    .unwrap()
                    .push(format!("{name}: {rows} rows"));
                Ok(())
            })
            .spawn("127.0.0.1:0")
            .unwrap()
    };
    let location = server.location();
    let e = put(
        &location,
        "refused",
        Batches::host(host_reader(schema(), vec![batch(0, 1)])),
        &ClientOptions::default(),
    )
    .unwrap_err();
    assert_eq!(code_of(&e), Some(Code::Internal));
    assert!(
        e.to_string()
            .contains("the sink refused the upload: not supported: no room for it"),
        "{e}"
    );

    // A source that fails after two batches, once the sink has them: the
    // put fails with the source's error, and the sink sees an error, never
    // a shorter stream that looks whole.
    let seen = rows_seen.clone();
    let failing = (0..5).map(move |i| {
        if i == 2 {
            assert!(eventually(|| seen.load(Ordering::SeqCst) == 20));
            Err(arrow_schema::ArrowError::ComputeError(
                "the disk went away".into(),
            ))
        } else {
            Ok(batch(i * 10, 10))
        }
    });
    let e = put(
        &location,
        "broken",
        Batches::host(arrow_array::RecordBatchIterator::new(failing, schema())),
        &ClientOptions::default(),
    )
    .unwrap_err();
    assert!(e.to_string().contains("batch 2"), "{e}");
    assert!(e.to_string().contains("the disk went away"), "{e}");
    assert!(eventually(|| received
        .lock()
        .unwrap()
        .iter()
        .any(|r| r.starts_with("broken"))));
    let log = received.lock().unwrap().clone();
    let broken = log.iter().find(|r| r.starts_with("broken")).unwrap();
    assert!(broken.contains("error after"), "{broken}");

    let summary = put(
        &location,
        "whole",
        Batches::host(host_reader(schema(), vec![batch(0, 4)])),
        &ClientOptions::default(),
    )
    .unwrap();
    assert_eq!(
        (summary.batches, summary.rows, summary.complete),
        (1, 4, true)
    );
    assert!(received
        .lock()
        .unwrap()
        .contains(&"whole: 4 rows".to_string()));
    assert!(eventually(|| server.active_requests() == 0));
}

#[test]
fn the_client_lands_at_most_prefetch_batches_ahead() {
    let counters = Counters::default();
    let server = FlightServer::builder()
        .source("long", counted_source(1000, 16, &counters))
        .spawn("127.0.0.1:0")
        .unwrap();
    for prefetch in [1, 3] {
        let options = ClientOptions {
            prefetch,
            ..Default::default()
        };
        let device: DeviceRef = emulated(Duration::ZERO);
        let mut batches = fetch_batches(&server.location(), "long", &device, &options).unwrap();
        assert!(eventually(|| batches.stats().batches == prefetch));
        std::thread::sleep(Duration::from_millis(200));
        assert_eq!(batches.stats().batches, prefetch);
        batches.next().unwrap().unwrap();
        assert!(eventually(|| batches.stats().batches == prefetch + 1));
        std::thread::sleep(Duration::from_millis(100));
        assert_eq!(batches.stats().batches, prefetch + 1);
    }
}

#[test]
fn a_stopper_ends_wait_and_a_bad_identity_is_refused_before_binding() {
    let server = FlightServer::builder()
        .source("s", small_source())
        .spawn("127.0.0.1:0")
        .unwrap();
    let location = server.location();
    let stopper = server.stopper();
    let waiter = std::thread::spawn(move || server.wait());
    assert_eq!(
        fetch_all(&location, "s", &ClientOptions::default())
            .unwrap()
            .len(),
        2
    );
    stopper.stop();
    waiter.join().unwrap().unwrap();
    assert!(fetch(&location, "s", &cpu(), &ClientOptions::default()).is_err());

    let bad = ServerTls {
        certificate: b"not a certificate".to_vec(),
        key: b"not a key".to_vec(),
    };
    let e = FlightServer::builder()
        .tls(bad)
        .spawn("127.0.0.1:0")
        .unwrap_err();
    assert!(
        matches!(
            e,
            Error::Config {
                what: "TLS identity",
                ..
            }
        ),
        "{e:?}"
    );
}

#[test]
fn a_server_on_every_interface_is_named_by_loopback() {
    let server = FlightServer::builder()
        .source("s", small_source())
        .spawn("0.0.0.0:0")
        .unwrap();
    let location = server.location();
    assert!(location.starts_with("grpc://127.0.0.1:"), "{location}");
    assert_eq!(
        fetch_all(&location, "s", &ClientOptions::default())
            .unwrap()
            .len(),
        2
    );
}

/// Device arrays made on demand; its drop is the exported stream's
/// release (the core's exporter drops the iterator in `release`).
struct DeviceArrays {
    inner: Counted,
    device: DeviceRef,
}

impl Iterator for DeviceArrays {
    type Item = arrow_device::Result<DeviceArray>;
    fn next(&mut self) -> Option<Self::Item> {
        let batch = self.inner.next()?.unwrap();
        Some(DeviceArray::from_record_batch(&batch).to_device(&self.device))
    }
}

#[test]
fn every_served_device_stream_is_released_exactly_once() {
    let counters = Counters::default();
    let device = emulated(Duration::from_millis(1));
    let source = {
        let counters = counters.clone();
        Source::new(move || {
            counters.opened.fetch_add(1, Ordering::SeqCst);
            let arrays = DeviceArrays {
                inner: Counted {
                    next: 0,
                    count: 50,
                    rows: 64,
                    made: counters.made.clone(),
                    dropped: counters.dropped.clone(),
                },
                device: device.clone(),
            };
            let field = Field::new("", DataType::Struct(schema().fields().clone()), false);
            let stream = export_device_arrays(field, DeviceType::EXT_DEV, arrays)?;
            // SAFETY: the core's own exporter.
            let reader = unsafe { DeviceStreamReader::try_new(stream, ValidationLevel::Full) }?;
            Batches::device(reader)
        })
    };
    let server = FlightServer::builder()
        .source("d", source)
        .spawn("127.0.0.1:0")
        .unwrap();
    let location = server.location();
    // Listing opens the source once for its schema, and releases it.
    list_flights(&location, &ClientOptions::default()).unwrap();
    assert!(eventually(|| counters.dropped.load(Ordering::SeqCst) == 1));
    // Read whole, twice.
    for _ in 0..2 {
        assert_eq!(
            fetch_all(&location, "d", &ClientOptions::default())
                .unwrap()
                .len(),
            50
        );
    }
    // Read in part, then the client goes away.
    let mut reader = fetch(&location, "d", &cpu(), &ClientOptions::default()).unwrap();
    reader.next().unwrap().unwrap();
    drop(reader);
    assert!(eventually(|| counters.dropped.load(Ordering::SeqCst) == 4));
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(counters.opened.load(Ordering::SeqCst), 4);
    assert_eq!(
        counters.dropped.load(Ordering::SeqCst),
        4,
        "released exactly once each"
    );
    assert!(eventually(
        || server.active_requests() == 0 && server.held_batches() == 0
    ));
}

#[test]
fn a_listing_leaves_out_a_source_that_fails_to_open_and_with_schema_spares_the_factory() {
    let opened = Arc::new(AtomicUsize::new(0));
    let counted = {
        let opened = opened.clone();
        Source::new(move || {
            opened.fetch_add(1, Ordering::SeqCst);
            Ok(Batches::host(host_reader(schema(), vec![batch(0, 1)])))
        })
        .with_schema(schema())
    };
    let server = FlightServer::builder()
        .source(
            "broken",
            Source::new(|| Err(Error::External("no such table".into()))),
        )
        .source("known", counted)
        .spawn("127.0.0.1:0")
        .unwrap();
    let flights = list_flights(&server.location(), &ClientOptions::default()).unwrap();
    let names: Vec<_> = flights
        .iter()
        .map(|f| f.flight_descriptor.as_ref().unwrap().path.clone())
        .collect();
    assert_eq!(names, vec![vec!["known".to_string()]]);
    assert_eq!(
        opened.load(Ordering::SeqCst),
        0,
        "the listing opened the source"
    );
    let e = fetch(
        &server.location(),
        "broken",
        &cpu(),
        &ClientOptions::default(),
    )
    .unwrap_err();
    assert!(
        e.to_string()
            .contains("source \"broken\" failed to open: no such table"),
        "{e}"
    );
    assert_eq!(
        fetch_all(&server.location(), "known", &ClientOptions::default())
            .unwrap()
            .len(),
        1
    );
    assert_eq!(opened.load(Ordering::SeqCst), 1);
}

#[test]
fn a_source_error_keeps_its_kind_with_the_batch_index() {
    let server = FlightServer::builder()
        .source(
            "flaky",
            Source::new(|| {
                let batches = (0..3).map(|i| {
                    if i == 2 {
                        Err(arrow_schema::ArrowError::IoError(
                            "the disk went away".into(),
                            std::io::Error::other("EIO"),
                        ))
                    } else {
                        Ok(batch(0, 1))
                    }
                });
                Ok(Batches::host(arrow_array::RecordBatchIterator::new(
                    batches,
                    schema(),
                )))
            }),
        )
        // A sink that reads the whole upload, so that the server waits for
        // the local source's failure instead of answering first.
        .sink(cpu(), |_, batches| {
            for array in batches {
                array?;
            }
            Ok(())
        })
        .spawn("127.0.0.1:0")
        .unwrap();
    let e = fetch_all(&server.location(), "flaky", &ClientOptions::default()).unwrap_err();
    assert!(
        e.contains("source \"flaky\": Io error: batch 2: the disk went away"),
        "{e}"
    );
    // A local source's error on upload is the source's own, kind and all.
    let failing = (0..2).map(|i| {
        if i == 1 {
            Err(arrow_schema::ArrowError::MemoryError("out of room".into()))
        } else {
            Ok(batch(0, 1))
        }
    });
    let e = put(
        &server.location(),
        "x",
        Batches::host(arrow_array::RecordBatchIterator::new(failing, schema())),
        &ClientOptions::default(),
    )
    .unwrap_err();
    match e {
        Error::Device(arrow_device::Error::Arrow(arrow_schema::ArrowError::MemoryError(m))) => {
            assert_eq!(m, "batch 1: out of room")
        }
        other => panic!("{other:?}"),
    }
}

//! # arrow-device-flight
//!
//! Device data over [Arrow Flight]: a remote dataset arrives as a local
//! device stream on the device you choose, and any device stream is served
//! to any Flight client. The Flight implementation is arrow-rs'
//! (`arrow-flight`, on tonic); nothing here is a wire format of its own, so
//! pyarrow's, Arrow C++'s and Java's Flight clients and servers are peers.
//!
//! * **Client**: [`fetch`] (a [`DeviceStreamReader`], exportable as an
//!   `ArrowDeviceArrayStream`), [`fetch_batches`] (the same with
//!   [`FetchStats`]) and [`fetch_async`] (a `futures::Stream`). Each batch
//!   is decoded into host memory and its copy onto the device is queued as
//!   it arrives; the batch carries the copy's event as its `sync_event`. At
//!   most [`ClientOptions::prefetch`] batches are decoded or in flight
//!   ahead of the consumer, so memory is bounded whatever the dataset's
//!   size. [`put`] uploads any stream.
//! * **Server**: [`FlightServer::builder`] with named [`Source`]s (a device
//!   stream, an arrow-rs reader, an async device stream, an IPC file),
//!   served through `list_flights`, `get_flight_info`, `get_schema` and
//!   `do_get`, and a sink for `do_put` whose batches land on a device.
//!   Device batches are copied to the host through reusable staging
//!   ([`arrow_device::HostStaging`]: pinned memory where the device has
//!   it), the copy of the next batch overlapping the send of the current.
//! * **Security**: bearer tokens ([`FlightServerBuilder::bearer_token`],
//!   [`ClientOptions::token`]) and TLS (`grpc+tls://`,
//!   [`FlightServerBuilder::tls`], [`ClientOptions::tls_root`]).
//!
//! The core crate stays free of async runtimes: this crate brings tokio,
//! and runs its blocking API on a runtime of its own, started on first use.
//!
//! ```
//! use std::sync::Arc;
//! use arrow_array::{ArrayRef, Int64Array, RecordBatch, RecordBatchIterator};
//! use arrow_device::device::emulated::{EmulatedConfig, EmulatedDevice};
//! use arrow_device::device::DeviceRef;
//! use arrow_device_flight::{fetch, Batches, ClientOptions, FlightServer, Source};
//!
//! let batch = RecordBatch::try_from_iter([(
//!     "x",
//!     Arc::new(Int64Array::from(vec![1, 2, 3])) as ArrayRef,
//! )])
//! .unwrap();
//! let served = batch.clone();
//! let server = FlightServer::builder()
//!     .source(
//!         "numbers",
//!         Source::new(move || {
//!             let batches = vec![Ok(served.clone())];
//!             Ok(Batches::host(RecordBatchIterator::new(batches, served.schema())))
//!         }),
//!     )
//!     .spawn("127.0.0.1:0")
//!     .unwrap();
//!
//! // The remote dataset, landed on an (emulated) device.
//! let device: DeviceRef = EmulatedDevice::new(0, EmulatedConfig::default());
//! let reader = fetch(&server.location(), "numbers", &device, &ClientOptions::default()).unwrap();
//! let arrays: Vec<_> = reader.collect::<Result<_, _>>().unwrap();
//! assert_eq!(arrays[0].device_type(), arrow_device::DeviceType::EXT_DEV);
//! assert_eq!(arrays[0].to_record_batch().unwrap(), batch);
//! ```
//!
//! [Arrow Flight]: https://arrow.apache.org/docs/format/Flight.html
//! [`DeviceStreamReader`]: arrow_device::stream::DeviceStreamReader
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

mod client;
mod error;
mod location;
mod pipeline;
mod runtime;
mod server;
mod source;

pub use client::{
    fetch, fetch_async, fetch_batches, list_flights, put, Client, ClientOptions, DeviceBatchStream,
    DeviceBatches, FetchStats, PutSummary,
};
pub use error::{code_name, Error, Result};
pub use location::Location;
pub use server::{
    DeviceFlightService, FlightServer, FlightServerBuilder, ServerTls, Sink, Stopper,
};
pub use source::{Batches, Source};

/// The arrow-flight and tonic versions this crate speaks, re-exported so
/// that an embedder names the same types ([`arrow_flight::FlightDescriptor`]
/// in a sink, [`tonic::Code`] in an error).
pub use arrow_flight;
pub use tonic;

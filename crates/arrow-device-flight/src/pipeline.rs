//! The two halves every Flight call here is made of, shared by the client
//! and the server:
//!
//! * [`stage`]: a stream of batches on any device → host record batches,
//!   copied through reusable [`HostStaging`] on a producer thread, at most
//!   `depth` ahead of the encoder that sends them (so the copy of batch
//!   *n + 1* overlaps the encoding and sending of batch *n*, and memory is
//!   bounded whatever the stream's length). Used by `do_get` (server) and
//!   `put` (client).
//! * [`Decoded`] + [`land`]: received Flight data → decoded host batches →
//!   copies onto the consumer's device, each with its own `sync_event`, at
//!   most `prefetch` batches ahead of the consumer. Used by `fetch`
//!   (client) and `do_put` (server).

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::Poll;

use arrow_array::{RecordBatch, RecordBatchOptions};
use arrow_device::device::DeviceRef;
use arrow_device::{DeviceArray, DeviceType, HostStaging};
use arrow_flight::decode::{DecodedPayload, FlightDataDecoder};
use arrow_flight::error::FlightError;
use arrow_flight::{FlightData, FlightDescriptor};
use arrow_ipc::writer::{DictionaryTracker, IpcDataGenerator, IpcWriteContext, IpcWriteOptions};
use arrow_schema::{Schema, SchemaRef};
use futures_util::{FutureExt, StreamExt};
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};

use crate::error::{Error, Result};
use crate::source::{Batches, Producer};

/// One batch, copied to the host and encoded: its dictionary messages and
/// its record batch message, with its row count. The error is the
/// source's (or the encoder's), with the batch index in its message.
pub(crate) type Staged = arrow_device::Result<Encoded>;

/// The Flight messages of one batch.
#[derive(Debug)]
pub(crate) struct Encoded {
    pub messages: Vec<FlightData>,
    pub rows: usize,
}

/// The IPC encoding of a stream, kept whole: every batch is one message
/// (zero-row batches included), and dictionaries are sent when they first
/// appear or change, as the IPC stream format has it.
///
/// arrow-flight's `FlightDataEncoder` is not used because it drops
/// zero-row batches and splits large ones, so a consumer would not see the
/// producer's batches.
struct Encoder {
    generator: IpcDataGenerator,
    tracker: DictionaryTracker,
    context: IpcWriteContext,
    options: IpcWriteOptions,
}

impl Encoder {
    /// The encoder of a stream of `schema`, and the schema message that
    /// opens the stream (carrying `descriptor`, as the first message of a
    /// `do_put` must). The schema is encoded with the tracker that later
    /// names each batch's dictionaries, so their ids agree.
    fn new(schema: &Schema, descriptor: Option<FlightDescriptor>) -> (Encoder, FlightData) {
        let mut encoder = Encoder {
            generator: IpcDataGenerator::default(),
            // Replacing a dictionary is allowed: the new one is sent.
            tracker: DictionaryTracker::new(false),
            context: IpcWriteContext::default(),
            options: IpcWriteOptions::default(),
        };
        let encoded = encoder.generator.schema_to_bytes_with_dictionary_tracker(
            schema,
            &mut encoder.tracker,
            &encoder.options,
        );
        let mut first = FlightData::from(encoded);
        first.flight_descriptor = descriptor;
        (encoder, first)
    }

    fn encode(&mut self, batch: &RecordBatch) -> arrow_device::Result<Encoded> {
        let (dictionaries, batch_data) =
            self.generator
                .encode(batch, &mut self.tracker, &self.options, &mut self.context)?;
        let mut messages: Vec<FlightData> =
            dictionaries.into_iter().map(FlightData::from).collect();
        messages.push(batch_data.into());
        Ok(Encoded {
            messages,
            rows: batch.num_rows(),
        })
    }
}

/// A batch counted in a `held` gauge until it is dropped (taken by the
/// sender, or thrown away with the channel when the reader goes away).
pub(crate) struct Held<T> {
    item: T,
    _counted: Counted,
}

impl<T> Held<T> {
    fn new(item: T, gauge: &Arc<AtomicUsize>) -> Held<T> {
        Held {
            item,
            _counted: Counted::new(gauge),
        }
    }
}

/// One count in a gauge for as long as it lives (a batch held, a request
/// being served).
pub(crate) struct Counted(Arc<AtomicUsize>);

impl Counted {
    pub fn new(gauge: &Arc<AtomicUsize>) -> Counted {
        gauge.fetch_add(1, Ordering::AcqRel);
        Counted(gauge.clone())
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Starts copying `batches` to the host and encoding them, `depth` batches
/// ahead of the reader of the returned channel. Must be called inside a
/// tokio runtime. `held` counts the batches encoded but not yet taken by
/// the reader (the server's measure of what a slow client costs it).
/// Returns the stream's first message (its schema, with `descriptor`).
pub(crate) fn stage(
    batches: Batches,
    depth: usize,
    staging: Arc<HostStaging>,
    held: Arc<AtomicUsize>,
    descriptor: Option<FlightDescriptor>,
) -> (FlightData, mpsc::Receiver<Sent>) {
    let (tx, rx) = mpsc::channel(depth.max(1));
    let schema = batches.schema.clone();
    let (encoder, first) = Encoder::new(&schema, descriptor);
    let to_host = {
        let encoder = std::sync::Mutex::new(encoder);
        move |index: usize, item: Option<arrow_device::Result<Item>>| -> Option<Staged> {
            let batch = match item? {
                Ok(Item::Host(batch)) => conform(&schema, batch),
                Ok(Item::Device(array)) => array
                    .to_record_batch_staged(&staging)
                    .and_then(|batch| conform(&schema, batch)),
                Err(e) => Err(e),
            };
            // The staged batch is dropped once encoded (the encoding copies
            // it), which hands its staging back for the next batch.
            let encoded = batch.and_then(|batch| {
                encoder
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .encode(&batch)
            });
            Some(encoded.map_err(|e| at_batch(index, e)))
        }
    };
    match batches.producer {
        Producer::Host(reader) => {
            let mut reader = reader;
            run_blocking(tx, held, move |index| {
                let item = reader
                    .next()
                    .map(|r| r.map(Item::Host).map_err(arrow_device::Error::from));
                to_host(index, item)
            });
        }
        Producer::Device(arrays) => {
            let mut arrays = arrays;
            run_blocking(tx, held, move |index| {
                let item = arrays.next().map(|r| r.map(Item::Device));
                to_host(index, item)
            });
        }
        Producer::Async(stream) => {
            let to_host = Arc::new(to_host);
            tokio::spawn(async move {
                let mut stream = stream;
                for index in 0.. {
                    // A panic in the source is an error of this batch, as
                    // in `run_blocking`.
                    let item = match AssertUnwindSafe(stream.next()).catch_unwind().await {
                        Ok(item) => item.map(|r| r.map(Item::Device)),
                        Err(payload) => Some(Err(arrow_device::Error::from_panic(payload))),
                    };
                    let to_host = to_host.clone();
                    // The copy waits on the device: off the async workers.
                    let staged = tokio::task::spawn_blocking(move || (*to_host)(index, item))
                        .await
                        .unwrap_or_else(|e| Some(Err(join_error(e))));
                    let Some(staged) = staged else {
                        let _ = tx.send(None).await;
                        break;
                    };
                    let failed = staged.is_err();
                    if tx.send(Some(Held::new(staged, &held))).await.is_err() {
                        break;
                    }
                    if failed {
                        break;
                    }
                }
            });
        }
    }
    (first, rx)
}

/// What the producer of [`stage`] sends: a batch, or (`None`) the end of
/// the source. The end is explicit for the reason [`Landed`]'s is: a
/// producer that stops without it (a panic outside the source, a cancelled
/// runtime) must be an error, never a stream that looks whole.
pub(crate) type Sent = Option<Held<Staged>>;

/// The staged batches as a stream; each leaves its gauge as it is taken.
/// It ends after the producer's end or its first error; a channel that
/// closes before either is an error.
pub(crate) fn receiver_stream(
    mut rx: mpsc::Receiver<Sent>,
) -> impl futures_core::Stream<Item = Staged> + Send + 'static {
    let mut finished = false;
    futures_util::stream::poll_fn(move |cx| {
        if finished {
            return Poll::Ready(None);
        }
        let staged = match std::task::ready!(rx.poll_recv(cx)) {
            Some(Some(Held { item, _counted })) => item,
            Some(None) => {
                finished = true;
                return Poll::Ready(None);
            }
            None => Err(arrow_device::Error::Remote(
                "the source's producer stopped before its end: its task failed or was \
                 cancelled"
                    .into(),
            )),
        };
        finished = staged.is_err();
        Poll::Ready(Some(staged))
    })
}

/// The Flight messages of the staged batches, in order; an error ends
/// the stream.
pub(crate) fn messages(
    staged: impl futures_core::Stream<Item = Staged> + Send + 'static,
) -> impl futures_core::Stream<Item = arrow_device::Result<FlightData>> + Send + 'static {
    staged.flat_map(|item| {
        let messages: Vec<arrow_device::Result<FlightData>> = match item {
            Ok(encoded) => encoded.messages.into_iter().map(Ok).collect(),
            Err(e) => vec![Err(e)],
        };
        futures_util::stream::iter(messages)
    })
}

/// What a source yields before it is copied to the host.
enum Item {
    Host(RecordBatch),
    Device(DeviceArray),
}

/// Runs `next(index)` on a blocking thread until it returns `None`, an
/// error, or the reader goes away; a panic in the source becomes an error
/// on the stream.
fn run_blocking(
    tx: mpsc::Sender<Sent>,
    held: Arc<AtomicUsize>,
    mut next: impl FnMut(usize) -> Option<Staged> + Send + 'static,
) {
    tokio::task::spawn_blocking(move || {
        for index in 0.. {
            let staged = match catch_unwind(AssertUnwindSafe(|| next(index))) {
                Ok(Some(staged)) => staged,
                Ok(None) => {
                    let _ = tx.blocking_send(None);
                    break;
                }
                Err(payload) => Err(at_batch(index, arrow_device::Error::from_panic(payload))),
            };
            let failed = staged.is_err();
            if tx.blocking_send(Some(Held::new(staged, &held))).is_err() {
                // The reader went away (a client disconnected): stop
                // reading the source, which is released as `next` drops.
                break;
            }
            if failed {
                break;
            }
        }
    });
}

/// The batch under the stream's schema (its metadata included), or an
/// error naming both schemas when the columns do not match: a source
/// whose schema changes mid-stream.
fn conform(schema: &SchemaRef, batch: RecordBatch) -> arrow_device::Result<RecordBatch> {
    if batch.schema_ref() == schema {
        return Ok(batch);
    }
    let same_columns = batch.schema_ref().fields().len() == schema.fields().len()
        && batch
            .schema_ref()
            .fields()
            .iter()
            .zip(schema.fields())
            .all(|(a, b)| a.data_type() == b.data_type());
    if !same_columns {
        return Err(arrow_device::Error::Invalid {
            path: "batch".into(),
            message: format!(
                "the schema changed mid-stream: the stream's is {}, this batch's is {}",
                schema,
                batch.schema_ref()
            ),
        });
    }
    let options = RecordBatchOptions::new().with_row_count(Some(batch.num_rows()));
    Ok(RecordBatch::try_new_with_options(
        schema.clone(),
        batch.columns().to_vec(),
        &options,
    )?)
}

/// `error` with the batch index added to its message; its kind (and so
/// its errno and Python exception) is kept.
fn at_batch(index: usize, error: arrow_device::Error) -> arrow_device::Error {
    use arrow_device::Error as E;
    let at = |message: String| format!("batch {index}: {message}");
    match error {
        E::Invalid { path, message } => E::Invalid {
            path: format!("batch {index} > {path}"),
            message,
        },
        E::NotSupported(m) => E::NotSupported(at(m)),
        E::OutOfRange(m) => E::OutOfRange(at(m)),
        E::Device {
            device_type,
            device_id,
            message,
        } => E::Device {
            device_type,
            device_id,
            message: at(message),
        },
        E::Producer { code, message } => E::Producer {
            code,
            message: at(message),
        },
        E::Consumer { code, message } => E::Consumer {
            code,
            message: at(message),
        },
        E::Share(m) => E::Share(at(m)),
        E::Remote(m) => E::Remote(at(m)),
        E::Panic(m) => E::Panic(at(m)),
        // arrow-rs' own errors are invalid input here (EINVAL and
        // ValueError alike), except the three kinds with errnos of their
        // own, kept.
        E::Arrow(arrow_schema::ArrowError::IoError(m, source)) => {
            E::Arrow(arrow_schema::ArrowError::IoError(at(m), source))
        }
        E::Arrow(arrow_schema::ArrowError::MemoryError(m)) => {
            E::Arrow(arrow_schema::ArrowError::MemoryError(at(m)))
        }
        E::Arrow(arrow_schema::ArrowError::NotYetImplemented(m)) => {
            E::Arrow(arrow_schema::ArrowError::NotYetImplemented(at(m)))
        }
        E::Arrow(other) => E::Invalid {
            path: format!("batch {index}"),
            message: other.to_string(),
        },
        other => E::Remote(at(other.to_string())),
    }
}

pub(crate) fn join_error(e: tokio::task::JoinError) -> arrow_device::Error {
    if e.is_panic() {
        arrow_device::Error::from_panic(e.into_panic())
    } else {
        arrow_device::Error::Remote("the task was cancelled".into())
    }
}

/// The decoder's next message, with a panic inside the decoder turned
/// into an error: arrow-ipc 60 panics on some malformed input (a record
/// batch whose body is shorter than its buffers claim slices past the end
/// of it), and a panic would end the landing task, not the stream.
async fn next_guarded(
    decoder: &mut FlightDataDecoder,
) -> Option<std::result::Result<arrow_flight::decode::DecodedFlightData, FlightError>> {
    match AssertUnwindSafe(decoder.next()).catch_unwind().await {
        Ok(next) => next,
        Err(payload) => Some(Err(FlightError::DecodeError(format!(
            "the Arrow IPC message does not decode (the decoder panicked: {})",
            arrow_device::Error::from_panic(payload)
        )))),
    }
}

/// A decoded Flight stream whose schema has arrived.
pub(crate) struct Decoded {
    decoder: FlightDataDecoder,
    pub schema: SchemaRef,
    location: String,
    call: &'static str,
    index: usize,
}

impl Decoded {
    /// Reads messages until the schema; an error or the end of the stream
    /// before it is an error.
    pub async fn read_schema(
        mut decoder: FlightDataDecoder,
        location: &str,
        call: &'static str,
    ) -> Result<Decoded> {
        loop {
            match next_guarded(&mut decoder).await {
                None => {
                    return Err(Error::protocol(
                        location,
                        call,
                        "the stream ended before its schema message".into(),
                    ))
                }
                Some(Err(e)) => return Err(Error::flight(location, call, e)),
                Some(Ok(data)) => match data.payload {
                    DecodedPayload::Schema(schema) => {
                        return Ok(Decoded {
                            decoder,
                            schema,
                            location: location.to_string(),
                            call,
                            index: 0,
                        })
                    }
                    DecodedPayload::None => continue,
                    DecodedPayload::RecordBatch(_) => {
                        return Err(Error::protocol(
                            location,
                            call,
                            "a record batch arrived before the schema".into(),
                        ))
                    }
                },
            }
        }
    }

    /// The next batch; `None` at the end of the stream (the peer's OK
    /// status); an error names the batch.
    pub async fn next(&mut self) -> Option<Result<RecordBatch>> {
        loop {
            let data = match next_guarded(&mut self.decoder).await? {
                Ok(data) => data,
                Err(e) => {
                    let e = Error::flight(&self.location, self.call, e);
                    return Some(Err(self.at_batch(e)));
                }
            };
            match data.payload {
                DecodedPayload::RecordBatch(batch) => {
                    self.index += 1;
                    return Some(Ok(batch));
                }
                DecodedPayload::Schema(schema) if schema != self.schema => {
                    let message = format!(
                        "the schema changed mid-stream, after {} batches: it was {}, it is now {}",
                        self.index, self.schema, schema
                    );
                    return Some(Err(Error::protocol(&self.location, self.call, message)));
                }
                DecodedPayload::Schema(_) | DecodedPayload::None => continue,
            }
        }
    }

    fn at_batch(&self, e: Error) -> Error {
        match e {
            Error::Protocol {
                location,
                call,
                message,
            } => Error::Protocol {
                location,
                call,
                message: format!("batch {}: {message}", self.index),
            },
            other => other,
        }
    }
}

/// A landed batch on its way to the consumer, with the permit that counts
/// it against the prefetch bound (returned when the consumer takes it); or
/// the end of the stream (`result: None`).
///
/// The end is explicit so that a consumer tells the end of the data from
/// a landing task that stopped without finishing (a panic, a cancelled
/// runtime): the channel closing without the end is an error, never a
/// shorter stream.
pub(crate) struct Landed {
    result: Option<arrow_device::Result<DeviceArray>>,
    _permit: Option<OwnedSemaphorePermit>,
}

impl Landed {
    fn end() -> Landed {
        Landed {
            result: None,
            _permit: None,
        }
    }
}

/// The consumer's side of a landing: what `next` returns for `received`
/// (`None`: the channel closed). After the end, or after the channel closed
/// without it (reported once, as an error naming `peer`), only `None`.
pub(crate) fn receive(
    received: Option<Landed>,
    finished: &mut bool,
    peer: &str,
) -> Option<arrow_device::Result<DeviceArray>> {
    if *finished {
        return None;
    }
    match received {
        Some(Landed {
            result: Some(result),
            ..
        }) => Some(result),
        Some(Landed { result: None, .. }) => {
            *finished = true;
            None
        }
        None => {
            *finished = true;
            Some(Err(arrow_device::Error::Remote(format!(
                "the stream from {peer} stopped before its end: the task landing it \
                 failed or was cancelled"
            ))))
        }
    }
}

/// Counts of what a landing pipeline did, for reports.
#[derive(Debug, Default)]
pub(crate) struct Counts {
    pub batches: AtomicUsize,
    pub rows: AtomicUsize,
    /// Bytes received (IPC headers and bodies); counted by the fetch's
    /// receiving end, 0 for a server's `do_put`.
    pub wire_bytes: AtomicUsize,
    /// The first batch's landing, in nanoseconds since the call started
    /// (0: not yet).
    pub first_batch_ns: std::sync::atomic::AtomicU64,
}

/// Copies each decoded batch onto `device` (queued: the batch carries the
/// copy's event as its `sync_event`) and hands it to `deliver`, at most
/// `prefetch` batches ahead of the consumer. Stops at the end, at the first
/// error (delivered), or when `deliver` says the consumer is gone.
/// Returns the input's error, if the stream ended on one.
pub(crate) async fn land(
    mut decoded: Decoded,
    device: DeviceRef,
    prefetch: usize,
    counts: Arc<Counts>,
    started: std::time::Instant,
    mut deliver: impl FnMut(Landed) -> bool,
) -> Option<String> {
    let permits = Arc::new(Semaphore::new(prefetch.max(1)));
    loop {
        let Ok(permit) = permits.clone().acquire_owned().await else {
            return None;
        };
        let batch = match decoded.next().await {
            None => {
                deliver(Landed::end());
                return None;
            }
            Some(Ok(batch)) => batch,
            Some(Err(e)) => {
                let message = e.to_string();
                deliver(Landed {
                    result: Some(Err(e.into())),
                    _permit: None,
                });
                deliver(Landed::end());
                return Some(message);
            }
        };
        let rows = batch.num_rows();
        let result = if device.device_type() == DeviceType::CPU {
            Ok(DeviceArray::from_record_batch(&batch))
        } else {
            let device = device.clone();
            // The copy is queued, but allocating and queueing can block
            // (a driver staging a pageable copy): off the async workers.
            tokio::task::spawn_blocking(move || {
                DeviceArray::from_record_batch(&batch).to_device(&device)
            })
            .await
            .unwrap_or_else(|e| Err(join_error(e)))
        };
        let failed = result.is_err();
        if !failed {
            counts.batches.fetch_add(1, Ordering::Relaxed);
            counts.rows.fetch_add(rows, Ordering::Relaxed);
            let ns = started.elapsed().as_nanos().max(1) as u64;
            let _ =
                counts
                    .first_batch_ns
                    .compare_exchange(0, ns, Ordering::Relaxed, Ordering::Relaxed);
        }
        if !deliver(Landed {
            result: Some(result),
            _permit: Some(permit),
        }) {
            return None;
        }
        if failed {
            deliver(Landed::end());
            return None;
        }
    }
}

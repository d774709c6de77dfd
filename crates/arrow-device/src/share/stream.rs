//! Sharing a device stream with one other process: its batches cross one
//! by one as the opener asks for them, each shared like an array (a lease
//! of its own, so a batch may outlive the stream), with the exporter at
//! most `depth` batches ahead of the opener.
//!
//! Over the stream's connection the opener sends one byte per `get_next`;
//! the exporter answers with a frame: a tag (a batch's handle, the end, or
//! the producer's error message), a length and the bytes. The exporter's
//! death is the connection's end before the end frame: an error, never
//! the end of the stream.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::sync::mpsc::{sync_channel, Receiver};

use super::codec::Reader;
use super::handle::{invalid, read_header, share, write_header, Kind, Offer, SharedArray};
use super::lease::{borrow, Lender};
use crate::abi::DeviceType;
use crate::error::{Error, Result};
use crate::stream::{export_device_arrays, stream_error, DeviceStreamReader};
use crate::ValidationLevel;

/// What the opener asks for.
const NEXT: u8 = b'n';
/// Frame tags.
const BATCH: u8 = 0;
const END: u8 = 1;
const FAILED: u8 = 2;
/// The longest frame an opener accepts (a batch's handle or a message).
const MAX_FRAME: u64 = 1 << 30;

/// A stream this process shares with one other process. Dropped before it
/// is opened, the stream is released and the handle refused; once opened,
/// the stream is the opener's to read to its end.
#[derive(Debug)]
pub struct SharedStream {
    offer: Offer,
}

impl SharedStream {
    /// The bytes the other process passes to [`open_shared_stream`].
    pub fn handle(&self) -> &[u8] {
        &self.offer.handle
    }
}

/// What the producer's side hands the connection: a batch, shared, or the
/// producer's error; the channel's end is the stream's.
type Produced = std::result::Result<SharedArray, String>;

/// Shares `reader` with one other process, which reads it with
/// [`open_shared_stream`]. At most `depth` (at least 1) batches are read
/// and shared ahead of what the opener asked for, so the memory held stays
/// bounded whatever the stream's length.
pub fn share_stream(reader: DeviceStreamReader, depth: usize) -> Result<SharedStream> {
    if depth == 0 {
        return Err(Error::NotSupported(
            "a shared stream's depth is at least 1 (batches read ahead of the opener)".into(),
        ));
    }
    let device_type = match reader.device_type() {
        // Pinned batches arrive as CPU arrays (share copies them out).
        DeviceType::CUDA_HOST => DeviceType::CPU,
        other => other,
    };
    let field = reader.field().clone();
    let lender = Lender::get().map_err(Error::Share)?;
    let ticket = lender
        .lend_once(Box::new(move |connection| serve(connection, reader, depth)))
        .map_err(Error::Share)?;
    // The offer withdraws the ticket on every path from here on.
    let mut offer = Offer {
        handle: Vec::new(),
        id: ticket.id,
    };
    let mut handle = write_header(Kind::Stream, &ticket);
    handle.u32(device_type.0 as u32);
    handle.field(&field).map_err(invalid)?;
    offer.handle = handle.into_bytes();
    Ok(SharedStream { offer })
}

/// Serves the opener's connection until the stream ends or the opener
/// goes: a producer thread reads and shares batches into a channel of
/// `depth - 1` places (plus the one it holds, `depth` ahead).
fn serve(mut connection: UnixStream, reader: DeviceStreamReader, depth: usize) {
    let (batches, produced) = sync_channel::<Produced>(depth - 1);
    let producer = std::thread::Builder::new()
        .name("arrow-device-stream-producer".into())
        .spawn(move || {
            for item in reader {
                let shared = item
                    .and_then(|array| share(&array))
                    .map_err(|e| e.to_string());
                let failed = shared.is_err();
                // The opener has gone: stop reading (the reader is released).
                if batches.send(shared).is_err() || failed {
                    return;
                }
            }
        });
    if producer.is_err() {
        let _ = write_frame(
            &mut connection,
            FAILED,
            b"could not start the stream's producer",
        );
        return;
    }
    answer(&mut connection, &produced);
}

/// Answers each request of the opener with the next frame; returns when
/// the opener goes or the stream has ended.
fn answer(connection: &mut UnixStream, produced: &Receiver<Produced>) {
    // The batch last sent, kept until the opener asks again: by then it
    // holds a lease of its own.
    let mut last: Option<SharedArray> = None;
    let mut request = [0u8; 1];
    loop {
        if connection.read_exact(&mut request).is_err() || request[0] != NEXT {
            return;
        }
        drop(last.take());
        let written = match produced.recv() {
            Ok(Ok(shared)) => {
                let written = write_frame(connection, BATCH, shared.handle());
                last = Some(shared);
                written
            }
            Ok(Err(message)) => write_frame(connection, FAILED, message.as_bytes()),
            Err(_) => write_frame(connection, END, &[]),
        };
        if written.is_err() {
            return;
        }
    }
}

fn write_frame(connection: &mut UnixStream, tag: u8, bytes: &[u8]) -> std::io::Result<()> {
    let mut frame = Vec::with_capacity(9 + bytes.len());
    frame.push(tag);
    frame.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
    frame.extend_from_slice(bytes);
    connection.write_all(&frame)
}

/// Opens a stream another process shared, as a reader whose batches cross
/// as they are read, each validated at `level`. Only one process may open
/// a shared stream.
pub fn open_shared_stream(handle: &[u8], level: ValidationLevel) -> Result<DeviceStreamReader> {
    let mut reader = Reader::new(handle);
    let ticket = read_header(&mut reader, Kind::Stream)?;
    let device_type = DeviceType(reader.u32("the device type").map_err(invalid)? as i32);
    let field = reader.field().map_err(invalid)?;
    if !reader.finished() {
        return Err(invalid("the handle has bytes after its schema".to_string()));
    }
    let (lease, _) = borrow(&ticket).map_err(Error::Share)?;
    let batches = Batches {
        connection: lease,
        level,
        index: 0,
        done: false,
    };
    let stream = export_device_arrays(field, device_type, batches)?;
    // SAFETY: this crate's own export of arrays it validated.
    unsafe { DeviceStreamReader::try_new(stream, ValidationLevel::None) }
}

/// The opener's side: each `next` asks the exporter for one batch.
struct Batches {
    connection: super::lease::Lease,
    level: ValidationLevel,
    /// Batches received (for messages).
    index: usize,
    done: bool,
}

impl Batches {
    fn receive(&mut self) -> Result<Option<crate::DeviceArray>> {
        let gone = |e: std::io::Error| {
            stream_error(format!(
                "the exporting process ended (or closed the stream) before its end, \
                 at batch {}: {e}",
                self.index
            ))
        };
        let mut socket = self.connection.socket();
        socket.write_all(&[NEXT]).map_err(gone)?;
        let mut head = [0u8; 9];
        socket.read_exact(&mut head).map_err(gone)?;
        let len = u64::from_le_bytes(head[1..].try_into().expect("8 bytes"));
        if len > MAX_FRAME {
            return Err(stream_error(format!(
                "the exporter sent a frame of {len} bytes (at most {MAX_FRAME})"
            )));
        }
        let mut bytes = vec![0u8; len as usize];
        socket.read_exact(&mut bytes).map_err(gone)?;
        match head[0] {
            BATCH => {
                let array = super::open_shared(&bytes, self.level)
                    .map_err(|e| stream_error(format!("batch {}: {e}", self.index)))?;
                self.index += 1;
                Ok(Some(array))
            }
            END => Ok(None),
            FAILED => Err(stream_error(format!(
                "the exporting process's stream failed at batch {}: {}",
                self.index,
                String::from_utf8_lossy(&bytes)
            ))),
            other => Err(stream_error(format!(
                "the exporter sent a frame of kind {other} (expected 0, 1 or 2)"
            ))),
        }
    }
}

impl Iterator for Batches {
    type Item = Result<crate::DeviceArray>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let received = self.receive().transpose();
        // After the end or an error, no more requests.
        if !matches!(received, Some(Ok(_))) {
            self.done = true;
        }
        received
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use arrow_array::{ArrayRef, Int32Array, RecordBatch};
    use arrow_schema::{DataType, Field};

    use super::*;
    use crate::DeviceArray;

    fn batch(i: i32) -> RecordBatch {
        RecordBatch::try_from_iter([(
            "x",
            Arc::new(Int32Array::from(vec![Some(i), None, Some(i * 10)])) as ArrayRef,
        )])
        .unwrap()
    }

    fn field() -> Field {
        Field::new(
            "",
            DataType::Struct(batch(0).schema().fields().clone()),
            false,
        )
    }

    /// Counts what the source produced, and notices its release.
    #[derive(Default)]
    struct Source {
        produced: AtomicUsize,
        released: AtomicBool,
    }

    struct Produce {
        source: Arc<Source>,
        count: i32,
        fail_at: Option<i32>,
        device: Option<crate::device::DeviceRef>,
    }

    impl Iterator for Produce {
        type Item = Result<DeviceArray>;
        fn next(&mut self) -> Option<Self::Item> {
            let i = self.source.produced.load(Ordering::SeqCst) as i32;
            if i == self.count {
                return None;
            }
            self.source.produced.fetch_add(1, Ordering::SeqCst);
            if self.fail_at == Some(i) {
                return Some(Err(Error::NotSupported(format!("no batch {i} today"))));
            }
            let array = DeviceArray::from_record_batch(&batch(i));
            Some(match &self.device {
                None => Ok(array),
                Some(device) => array.to_device(device),
            })
        }
    }

    impl Drop for Produce {
        fn drop(&mut self) {
            self.source.released.store(true, Ordering::SeqCst);
        }
    }

    fn reader(produce: Produce) -> DeviceStreamReader {
        let device_type = produce
            .device
            .as_ref()
            .map_or(DeviceType::CPU, |d| d.device_type());
        let stream = export_device_arrays(field(), device_type, produce).unwrap();
        // SAFETY: this crate's own export.
        unsafe { DeviceStreamReader::try_new(stream, ValidationLevel::Full) }.unwrap()
    }

    fn counted(count: i32) -> (Arc<Source>, Produce) {
        let source = Arc::new(Source::default());
        let produce = Produce {
            source: source.clone(),
            count,
            fail_at: None,
            device: None,
        };
        (source, produce)
    }

    fn wait_for(what: &str, done: impl Fn() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !done() {
            assert!(Instant::now() < deadline, "{what}");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    #[test]
    fn a_stream_crosses_batch_by_batch_at_most_depth_ahead_and_one_opener_only() {
        let (source, produce) = counted(6);
        let shared = share_stream(reader(produce), 2).unwrap();
        let mut opened = open_shared_stream(shared.handle(), ValidationLevel::Full).unwrap();
        assert_eq!(opened.field().data_type(), field().data_type());
        let err = open_shared_stream(shared.handle(), ValidationLevel::Full)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(&format!("process {} opened it already", std::process::id())),
            "{err}"
        );
        // Nothing read: the exporter reads `depth` batches ahead, and no
        // more however long it is left alone.
        let produced = || source.produced.load(Ordering::SeqCst);
        wait_for("two batches read ahead", || produced() == 2);
        std::thread::sleep(Duration::from_millis(100));
        assert_eq!(produced(), 2);
        let first = opened.next().unwrap().unwrap();
        assert_eq!(first.to_record_batch().unwrap(), batch(0));
        wait_for("one more batch read ahead", || produced() == 3);
        std::thread::sleep(Duration::from_millis(100));
        assert_eq!(produced(), 3);
        let rest: Vec<RecordBatch> = opened
            .by_ref()
            .map(|array| array.unwrap().to_record_batch().unwrap())
            .collect();
        assert_eq!(rest, (1..6).map(batch).collect::<Vec<_>>());
        assert!(opened.next().is_none(), "the end repeats");
        wait_for("the source is released at the end", || {
            source.released.load(Ordering::SeqCst)
        });
        // A batch outlives its stream.
        drop(opened);
        assert_eq!(first.to_record_batch().unwrap(), batch(0));
    }

    #[test]
    fn the_producers_error_reaches_the_opener_as_an_error() {
        let (source, mut produce) = counted(5);
        produce.fail_at = Some(2);
        let shared = share_stream(reader(produce), 1).unwrap();
        let opened = open_shared_stream(shared.handle(), ValidationLevel::Full).unwrap();
        let results: Vec<_> = opened.collect();
        assert_eq!(results.len(), 3, "two batches, then the error");
        assert!(results[0].is_ok() && results[1].is_ok());
        let err = results[2].as_ref().unwrap_err().to_string();
        assert!(
            err.contains("failed at batch 2") && err.contains("no batch 2 today"),
            "{err}"
        );
        wait_for("the source is released after its error", || {
            source.released.load(Ordering::SeqCst)
        });
    }

    #[test]
    fn a_stream_dropped_unopened_or_left_by_its_opener_is_released() {
        let (source, produce) = counted(100);
        let shared = share_stream(reader(produce), 1).unwrap();
        let handle = shared.handle().to_vec();
        drop(shared);
        assert!(source.released.load(Ordering::SeqCst));
        let err = open_shared_stream(&handle, ValidationLevel::Full)
            .unwrap_err()
            .to_string();
        assert!(err.contains("refused the handle"), "{err}");

        let (source, produce) = counted(100);
        let shared = share_stream(reader(produce), 3).unwrap();
        let mut opened = open_shared_stream(shared.handle(), ValidationLevel::Full).unwrap();
        opened.next().unwrap().unwrap();
        drop(opened);
        wait_for("the source is released once its opener left", || {
            source.released.load(Ordering::SeqCst)
        });
        assert!(source.produced.load(Ordering::SeqCst) <= 1 + 3 + 1);
    }

    #[test]
    fn an_emulated_stream_arrives_with_the_producers_final_values() {
        let device = crate::device::emulated::EmulatedDevice::new(
            45,
            crate::device::emulated::EmulatedConfig {
                strict: true,
                delay: Duration::from_millis(20),
            },
        );
        let (_, mut produce) = counted(3);
        produce.device = Some(device);
        let shared = share_stream(reader(produce), 2).unwrap();
        let opened = open_shared_stream(shared.handle(), ValidationLevel::Full).unwrap();
        assert_eq!(opened.device_type(), DeviceType::EXT_DEV);
        let batches: Vec<RecordBatch> = opened
            .map(|array| array.unwrap().to_record_batch().unwrap())
            .collect();
        assert_eq!(batches, (0..3).map(batch).collect::<Vec<_>>());
    }

    #[test]
    fn wrong_handles_and_depths_are_clear_errors() {
        let (_, produce) = counted(1);
        let err = share_stream(reader(produce), 0).unwrap_err().to_string();
        assert!(err.contains("depth is at least 1"), "{err}");
        let (_, produce) = counted(1);
        let shared = share_stream(reader(produce), 1).unwrap();
        let err = super::super::open_shared(shared.handle(), ValidationLevel::Full)
            .unwrap_err()
            .to_string();
        assert!(err.contains("shares a stream, expected an array"), "{err}");
        let array = super::super::share(&DeviceArray::from_record_batch(&batch(1))).unwrap();
        let err = open_shared_stream(array.handle(), ValidationLevel::Full)
            .unwrap_err()
            .to_string();
        assert!(err.contains("shares an array, expected a stream"), "{err}");
    }

    const ROLE_VAR: &str = "ARROW_DEVICE_TEST_SHARE_STREAM";

    /// The exporter's side (does nothing unless run as one): shares a long
    /// stream, prints its handle, and serves it until killed.
    #[test]
    fn exporter_serves_until_killed() {
        if std::env::var(ROLE_VAR).is_err() {
            return;
        }
        let (_, produce) = counted(1_000_000);
        let shared = share_stream(reader(produce), 2).unwrap();
        println!("HANDLE {}", super::super::lease::hex(shared.handle()));
        std::thread::sleep(Duration::from_secs(60));
    }

    #[test]
    fn another_process_serves_it_and_its_death_is_an_error_not_the_end() {
        let mut exporter = crate::share::tests::role(
            "share::stream::tests::exporter_serves_until_killed",
            ROLE_VAR,
            "1",
        )
        .spawn()
        .unwrap();
        let handle = crate::share::tests::printed_handle(&mut exporter);
        let mut opened = open_shared_stream(&handle, ValidationLevel::Full).unwrap();
        let read: Vec<DeviceArray> = opened.by_ref().take(3).map(Result::unwrap).collect();
        exporter.kill().unwrap();
        exporter.wait().unwrap();
        let err = opened
            .find_map(Result::err)
            .expect("an error before any end")
            .to_string();
        assert!(
            err.contains("ended (or closed the stream) before its end"),
            "{err}"
        );
        assert!(opened.next().is_none());
        // The batches read stay valid: their memory files are mapped here.
        for (i, array) in read.iter().enumerate() {
            assert_eq!(array.to_record_batch().unwrap(), batch(i as i32));
        }
    }
}

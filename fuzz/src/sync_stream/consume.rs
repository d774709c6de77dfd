//! The consumers of the `sync_stream` target: our [`DeviceStreamReader`]
//! (as device arrays, or through its host readers) and arrow-rs' reader of
//! a C stream, each read as the case says and checked item by item against
//! what the producer just sent.

use arrow_array::ffi_stream::RecordBatchStreamReader;
use arrow_array::{RecordBatch, StructArray};
use arrow_device::abi::{ArrowDeviceArrayStream, FFI_ArrowArrayStream};
use arrow_device::stream::DeviceStreamReader;
use arrow_device::DeviceArray;

use super::producer::Shared;
use crate::stream_cases::{level_of, Expected};

/// At most this many items are read from any reader (the script has at
/// most 16 answers before the end).
const MAX_ITEMS: usize = 40;

/// What the consumers yielded, kept until the stream is gone.
#[derive(Default)]
pub(super) struct Yielded {
    pub arrays: Vec<(DeviceArray, Expected)>,
}

/// The array handed over by the producer's last `get_next`, which the
/// consumer just yielded.
fn just_sent(shared: &Shared, what: &str) -> Expected {
    shared
        .borrow_mut()
        .sent
        .take()
        .unwrap_or_else(|| panic!("{what} yielded an array the producer never sent"))
}

/// Panics if the array the producer just sent was a valid batch of the
/// stream's own schema: `what` refused it with `err`.
fn refused(shared: &Shared, err: impl std::fmt::Display, what: &str) {
    assert!(
        !shared.borrow().sent_valid,
        "{what} refused a valid batch of the stream's own schema: {err}"
    );
}

fn check_batch(shared: &Shared, batch: RecordBatch, what: &str) {
    just_sent(shared, what).check(&StructArray::from(batch), what);
}

/// Reads a [`DeviceStreamReader`] as the case says.
pub(super) fn consume_reader(
    shared: &Shared,
    mut reader: DeviceStreamReader,
    yielded: &mut Yielded,
) {
    let (mode, take, device_type) = {
        let p = shared.borrow();
        (
            p.case.consume & 3,
            p.case.take as usize,
            reader.device_type(),
        )
    };
    let limit = if take == 0 { MAX_ITEMS } else { take };
    if mode % 3 != 0 {
        let host = if mode % 3 == 1 {
            reader.into_host_reader()
        } else {
            reader.into_record_batch_reader()
        };
        let Ok(mut host) = host else { return };
        let what = "HostBatchReader";
        return read_items(
            shared,
            &mut host,
            limit,
            what,
            "an item after the end",
            |batch| check_batch(shared, batch, what),
        );
    }
    let what = "DeviceStreamReader";
    let after_end = "an item after the end or an error";
    read_items(shared, &mut reader, limit, what, after_end, |array| {
        let expected = just_sent(shared, what);
        assert_eq!(
            array.device_type(),
            device_type,
            "DeviceStreamReader yielded an array on another device type than the stream's"
        );
        match array.to_host() {
            Ok(host) => expected.check(host.as_ref(), what),
            Err(err) => refused(shared, err, "DeviceArray::to_host"),
        }
        yielded.arrays.push((array, expected));
    });
}

/// Reads at most `limit` items of `reader` (named `what`), each checked by
/// `item`. An error must not refuse a valid batch; after it, or after the
/// end, the reader yields nothing more (`after_end` says what came).
fn read_items<T, E: std::fmt::Display>(
    shared: &Shared,
    reader: &mut dyn Iterator<Item = Result<T, E>>,
    limit: usize,
    what: &str,
    after_end: &str,
    mut item: impl FnMut(T),
) {
    for _ in 0..limit {
        match reader.next() {
            Some(Ok(value)) => item(value),
            Some(Err(err)) => {
                refused(shared, err, what);
                assert!(reader.next().is_none(), "{what}: an item after an error");
                return;
            }
            None => {
                assert!(reader.next().is_none(), "{what}: {after_end}");
                return;
            }
        }
    }
}

/// Reads arrow-rs' reader of a C stream.
pub(super) fn consume_arrow_rs(shared: &Shared, stream: FFI_ArrowArrayStream) {
    let (take, extra) = {
        let p = shared.borrow();
        (p.case.take as usize, (p.case.consume >> 2) & 3)
    };
    let limit = if take == 0 { MAX_ITEMS } else { take };
    let Ok(mut reader) = RecordBatchStreamReader::try_new(stream) else {
        return;
    };
    for _ in 0..limit {
        match reader.next() {
            Some(Ok(batch)) => check_batch(shared, batch, "ArrowArrayStreamReader"),
            Some(Err(err)) => return refused(shared, err, "ArrowArrayStreamReader"),
            None => {
                // More get_next after the end: whatever the producer
                // answers must still be read right.
                for _ in 0..extra {
                    match reader.next() {
                        Some(Ok(batch)) => check_batch(shared, batch, "ArrowArrayStreamReader"),
                        Some(Err(err)) => return refused(shared, err, "ArrowArrayStreamReader"),
                        None => {}
                    }
                }
                return;
            }
        }
    }
}

pub(super) fn read_device_stream(
    shared: &Shared,
    stream: ArrowDeviceArrayStream,
    yielded: &mut Yielded,
) {
    let level = level_of(shared.borrow().case.level);
    // SAFETY: our producer follows the spec as far as memory goes (every
    // array is valid for what it claims, see `normalize`).
    if let Ok(reader) = unsafe { DeviceStreamReader::try_new(stream, level) } {
        consume_reader(shared, reader, yielded);
    }
}

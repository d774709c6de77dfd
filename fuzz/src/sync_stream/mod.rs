//! Target 3: sync device streams. A producer of `ArrowDeviceArrayStream`
//! (or of a plain C `ArrowArrayStream`) whose every answer comes from the
//! input, consumed by [`DeviceStreamReader`] and through the C-stream
//! bridges (`TryFrom` between `ArrowDeviceArrayStream` and arrow-rs'
//! `FFI_ArrowArrayStream`, the latter read by arrow-rs'
//! `ArrowArrayStreamReader`).
//!
//! This file holds the harness ([`run`]); `case.rs` the decoded case,
//! `producer.rs` the scripted producer behind the streams' callbacks,
//! `consume.rs` the consumers, `seeds.rs` the named inputs. What both stream
//! targets hand over is in `crate::stream_cases`.
//!
//! # Oracles
//!
//! * No panic escapes the consumer.
//! * The stream is released exactly once (never when handed over released),
//!   and no callback is called on a released stream; after a failed call
//!   only `get_last_error` and `release` follow, and `get_last_error` is
//!   only called right after a failed call (spec: "get_last_error").
//! * Every schema and array the producer built (counted with
//!   [`crate::release::Counters`]) is released exactly once by the end.
//! * Every batch a reader yields is the one the producer sent: same
//!   values (compared with the arrow-rs data it was exported from), on the
//!   stream's device type; a valid batch of the stream's own schema on the
//!   CPU is accepted and readable (no false rejection); after the end or
//!   an error our reader yields `None` forever; arrays it yielded stay
//!   readable after the stream is gone.
//!
//! # Byte layout
//!
//! Read front to back with [`crate::input::Input`] (bytes past the end read
//! as zeros); `SyncCase::encode` (`case.rs`) writes the same layout.
//!
//! ```text
//! case     := path:u8 flags:u8 device:Device level:u8 consume:u8 take:u8
//!             n_schemas:u8 SchemaAnswer{n_schemas % 4}
//!             n_nexts:u8 NextAnswer{n_nexts % 17}
//! path     : % 6 -- 0 DeviceStreamReader::try_new, 1 try_from_raw,
//!            2 device stream -> C stream -> arrow-rs reader,
//!            3 C stream -> device stream -> reader,
//!            4 C stream -> device -> C -> arrow-rs reader,
//!            5 device stream -> C -> device -> reader
//! flags    : bit 0 handed over released, bits 1/2/3 get_schema /
//!            get_next / get_last_error NULL
//! level    : % 4 -- None, Minimal, Default, Full
//! consume  : bits 0-1 % 3 (0 device arrays, 1 into_host_reader,
//!            2 into_record_batch_reader), bits 2-3 extra next() calls
//!            after the end (arrow-rs readers)
//! take     : stop after this many items (0: read to the end)
//! SchemaAnswer := SchemaPick, whose tag 3 (no schema) is a failure:
//!            Failure
//! NextAnswer := tag:u8 (% 5)
//!            0 data: kind_delta:u8 (% 5, 0 = the stream's kind) rows:u8
//!              (% 5) seed:u32 Label
//!            1 inert (length 0, zeroed buffers): perturb:u8 Label
//!            2 end (a released array)
//!            3 end, as a released tree with garbage device fields
//!            4 failure: Failure
//! ```
//!
//! `Device`, `SchemaPick` (and its `Node`), `Label` and `Failure` are
//! encoded as `crate::stream_cases` says, the same in `async_stream`.
//!
//! The decoded case is then made memory-safe for the consumer (see
//! `SyncCase::normalize`): arrow-rs' readers trust every array, so the
//! arrow-rs paths only see arrays of the stream's schema, and a stream
//! with an input-built schema only carries length-0 arrays. Any crash is
//! then the consumer's fault.

use std::cell::RefCell;

use arrow_device::abi::{ArrowDeviceArrayStream, DeviceType, FFI_ArrowArrayStream};
use arrow_device::stream::DeviceStreamReader;

use crate::stream_cases::{check_after_release, level_of, Ledger};

mod case;
mod consume;
mod producer;
mod seeds;

use case::{Path, SchemaAnswer, SyncCase};
use consume::{consume_arrow_rs, consume_reader, read_device_stream, Yielded};
use producer::{c_stream, device_stream, Producer, Shared};
pub use seeds::seeds;

/// Decodes `data` into a hostile stream and reads it; panics when an oracle
/// fails.
pub fn run(data: &[u8]) {
    let mut case = SyncCase::decode(data);
    case.normalize();
    let path = case.path();
    let (kind, shape) = case.kind_and_shape();
    let device_type = if path.c_producer() {
        DeviceType::CPU
    } else {
        case.device.device_type()
    };
    let handed_released = case.flags & 1 != 0;
    let fixed_schema = matches!(
        case.schemas.first(),
        None | Some(SchemaAnswer::Fixed { .. })
    );
    let shared: Shared = RefCell::new(Producer {
        case,
        kind,
        shape,
        device_type,
        schema_calls: 0,
        next_calls: 0,
        message: None,
        last_failed: false,
        failed: false,
        releases: 0,
        violations: Vec::new(),
        ledger: Ledger::default(),
        sent: None,
        sent_valid: false,
        fixed_schema,
        c_producer: path.c_producer(),
    });
    let mut yielded = Yielded::default();
    let level = level_of(shared.borrow().case.level);
    match path {
        Path::TryNew => read_device_stream(&shared, device_stream(&shared), &mut yielded),
        Path::TryFromRaw => {
            let mut stream = device_stream(&shared);
            // SAFETY: a live (or released) stream of ours, moved out.
            let reader = unsafe { DeviceStreamReader::try_from_raw(&mut stream, level) };
            assert!(
                stream.is_released(),
                "try_from_raw left the stream behind unreleased"
            );
            if let Ok(reader) = reader {
                consume_reader(&shared, reader, &mut yielded);
            }
        }
        Path::ToArrowRs => {
            if let Ok(c) = FFI_ArrowArrayStream::try_from(device_stream(&shared)) {
                consume_arrow_rs(&shared, c);
            }
        }
        Path::FromC => {
            if let Ok(stream) = ArrowDeviceArrayStream::try_from(c_stream(&shared)) {
                read_device_stream(&shared, stream, &mut yielded);
            }
        }
        Path::CRoundTrip => {
            if let Ok(stream) = ArrowDeviceArrayStream::try_from(c_stream(&shared)) {
                if let Ok(c) = FFI_ArrowArrayStream::try_from(stream) {
                    consume_arrow_rs(&shared, c);
                }
            }
        }
        Path::DeviceRoundTrip => {
            if let Ok(c) = FFI_ArrowArrayStream::try_from(device_stream(&shared)) {
                if let Ok(stream) = ArrowDeviceArrayStream::try_from(c) {
                    read_device_stream(&shared, stream, &mut yielded);
                }
            }
        }
    }
    // The consumers are gone: the stream must be released by now, and what
    // they yielded must still read the same.
    check_after_release(
        &yielded.arrays,
        "an array read after its stream was released",
    );
    drop(yielded);
    let p = shared.into_inner();
    let expected_releases = usize::from(!handed_released);
    assert_eq!(
        p.releases, expected_releases,
        "the stream was released {} times, expected {expected_releases}",
        p.releases
    );
    assert!(
        p.violations.is_empty(),
        "the consumer broke the stream protocol: {}",
        p.violations.join("; ")
    );
    p.ledger.check();
}

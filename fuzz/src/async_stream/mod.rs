//! Target 4: async device streams. A producer written against the raw ABI
//! calls the handler of our consumer ([`AsyncDeviceStream::new`]) in an
//! order, and with values, taken from the input, while the consumer's
//! `futures::Stream` is polled by hand (a counting waker, no runtime: every
//! exec is single-threaded and bounded).
//!
//! This file holds the harness ([`run`]); `case.rs` the decoded case,
//! `producer.rs` the scripted producer (the handler calls it makes, the
//! callbacks it answers), `consumer.rs` our stream polled by hand,
//! `seeds.rs` the named inputs. What both stream targets hand over is in
//! `crate::stream_cases`.
//!
//! # Oracles
//!
//! * No panic escapes, no hang: every loop is bounded, and once the
//!   producer released the handler the stream is `Ready` at every poll and
//!   ends (`None`) within a bounded number of polls.
//! * No lost wake-up: a poll that returned `Pending` is followed by a
//!   `Ready` only if the waker was woken in between (a real executor would
//!   never poll again otherwise).
//! * The stream yields arrays in the order their tasks were accepted, each
//!   equal to what the producer sent and on the producer's device type;
//!   after `None` or an error it yields `None` forever. Once the consumer
//!   refused a schema or a task (a non-zero return), the stream does not
//!   end cleanly: it yields an error first.
//! * The consumer keeps the protocol: `request(n)` with `n > 0`, neither
//!   `request` nor `cancel` before `on_schema` or after the handler's
//!   release, `cancel` at most once, no more credit than `queue_size` plus
//!   one per array received, and every task with an `extract_data`
//!   extracted exactly once by the end.
//! * Every schema and array the producer built is released exactly once
//!   (counted with [`crate::release::Counters`]); the handler is released
//!   exactly once (by the producer, as the spec says; the harness never
//!   calls it again, and ASan / LeakSanitizer see its memory freed once).
//!
//! # Byte layout
//!
//! Read with [`crate::input::Input`] (zeros past the end);
//! `AsyncCase::encode` (`case.rs`) writes the same layout. Devices, arrays
//! (`data`, `inert`), labels, failures, metadata (`Meta`) and schema picks
//! (`SchemaPick`, `Node`) are encoded as `crate::stream_cases` says, the
//! same in `sync_stream`.
//!
//! ```text
//! case    := queue_size:u8 (% 5) level:u8 (% 4) Device flags:u8 meta:Meta
//!            on_request:u8 (% 6) on_cancel:u8 (% 4)
//!            n_actions:u8 Action{n_actions % 33}
//! flags   : bit 0 request NULL, bit 1 cancel NULL, bit 2 the handler is
//!           never handed over (dropped instead)
//! meta    : the producer's additional_metadata: NULL, one pair, count -1,
//!           count 0
//! on_request: what the producer does inside `request`: nothing, send a
//!           task, send the end, on_error, release, task + end + release
//! on_cancel : what it does inside `cancel`: nothing, on_error, release,
//!           send the end
//! Action  := tag:u8 (% 9)
//!   0 on_schema: SchemaPick, whose tag 3 (no schema) is a NULL pointer;
//!     bit 2 of its tag: handler->producer left unset
//!   1 task of data: flavor:u8 kind_delta:u8 rows:u8 seed:u32 Label
//!   2 task of an inert array: flavor:u8 perturb:u8 Label
//!     flavor: bits 0-1 % 3 (extract_data normal, NULL, failing), bit 2
//!     non-NULL metadata
//!   3 the end marker (on_next_task with NULL)
//!   4 on_error: Failure meta:u8 (% 3: NULL, one pair, count -1)
//!   5 poll the stream count:u8 (% 4 + 1) times
//!   6 poll wait_schema once
//!   7 drop the stream
//!   8 release the handler
//! ```
//!
//! After the actions the producer releases the handler if it has not, and
//! the stream is drained. As in the sync target, a case with an input-built
//! schema sends only length-0 arrays, so that every array is memory-safe
//! under whichever schema the consumer accepted.

use std::cell::RefCell;
use std::ptr;
use std::task::Poll;

use arrow_device::abi::ArrowAsyncProducer;
use arrow_device::stream::AsyncDeviceStream;

use crate::stream_cases::{check_after_release, level_of, Ledger};

mod case;
mod consumer;
mod producer;
mod seeds;

use case::{Action, AsyncCase, EXTRACT_NULL};
use consumer::Consumer;
use producer::{blob_ptr, cancel, request, send, AsyncProducer, Shared};
pub use seeds::seeds;

/// Decodes `data` into a scripted producer and runs it against our
/// consumer; panics when an oracle fails.
pub fn run(data: &[u8]) {
    let case = AsyncCase::decode(data);
    let (kind, shape) = case.kind_and_shape();
    let device_type = case.device.device_type();
    let additional_metadata = case.meta.blob();
    let (stream, handler) =
        AsyncDeviceStream::new(usize::from(case.queue_size), level_of(case.level));
    let handed_over = case.flags & 4 == 0;
    let handler = if handed_over {
        handler.into_raw()
    } else {
        drop(handler);
        ptr::null_mut()
    };
    let shared: Shared = RefCell::new(AsyncProducer {
        kind,
        shape,
        device_type,
        any_built: case.any_built_schema(),
        on_request: case.on_request,
        on_cancel: case.on_cancel,
        handler,
        producer: ptr::null_mut(),
        handler_released: !handed_over,
        producer_populated: false,
        schemas_sent: 0,
        refused: false,
        depth: 0,
        requested: 0,
        cancels: 0,
        extracted_into: 0,
        tasks: Vec::new(),
        task_refs: Vec::new(),
        extracted: None,
        eager_seed: 0,
        ledger: Ledger::default(),
        violations: Vec::new(),
    });
    // The producer struct: valid until after the handler's release (spec:
    // "ArrowAsyncProducer Lifetime"), so until the end of the run.
    let mut producer = Box::new(ArrowAsyncProducer {
        device_type,
        request: (case.flags & 1 == 0).then_some(request as _),
        cancel: (case.flags & 2 == 0).then_some(cancel as _),
        additional_metadata: blob_ptr(&additional_metadata),
        private_data: ptr::from_ref(&shared).cast_mut().cast(),
    });
    shared.borrow_mut().producer = ptr::from_mut(producer.as_mut());
    let mut consumer = Consumer::new(stream, device_type);

    for action in &case.actions {
        match action {
            Action::Schema {
                pick,
                unset_producer,
            } => send::schema(&shared, pick, *unset_producer),
            Action::Task { array, flavor } => send::task(&shared, array, *flavor),
            Action::End => send::end(&shared),
            Action::Error { failure, meta } => send::error(&shared, failure, *meta),
            Action::Poll(count) => {
                for _ in 0..=count % 4 {
                    consumer.poll(&shared);
                }
            }
            Action::PollSchema => consumer.poll_schema(),
            Action::DropStream => drop(consumer.stream.take()),
            Action::Release => send::release(&shared),
        }
    }
    // The producer is done: it releases the handler, and the stream must
    // then come to its end without waiting for anything.
    send::release(&shared);
    let bound = shared.borrow().tasks.len() + 3;
    for _ in 0..bound {
        match consumer.poll(&shared) {
            None => break,
            Some(Poll::Pending) => {
                panic!("the stream returned Pending after the producer released the handler")
            }
            Some(Poll::Ready(())) if consumer.ended => break,
            Some(Poll::Ready(())) => {}
        }
    }
    assert!(
        consumer.stream.is_none() || consumer.ended,
        "the stream did not end within {bound} polls of the producer's release"
    );
    drop(consumer.stream.take());
    // Arrays yielded stay readable after the stream and handler are gone.
    check_after_release(&consumer.yielded, "an array read after the stream ended");
    drop(consumer);

    let mut p = shared.into_inner();
    let queue_size = i64::from(case.queue_size.max(1));
    let earned = queue_size + p.extracted_into as i64;
    if p.requested > earned {
        p.violations.push(format!(
            "the consumer requested {} arrays, more than queue_size {queue_size} plus {} received",
            p.requested, p.extracted_into
        ));
    }
    for (index, slot) in p.tasks.iter().enumerate() {
        let extractable = slot.flavor & 3 != EXTRACT_NULL;
        if extractable && slot.extract_calls != 1 {
            p.violations.push(format!(
                "task {index} was extracted {} times, expected once",
                slot.extract_calls
            ));
        }
    }
    assert!(
        p.violations.is_empty(),
        "the consumer broke the async protocol: {}",
        p.violations.join("; ")
    );
    // The arrays of tasks nobody could extract are the producer's to free.
    for slot in &mut p.tasks {
        drop(slot.array.take());
    }
    drop(producer);
    p.ledger.check();
}

//! Emulated streams: one worker thread per stream runs queued operations
//! (copies, event records, event waits) in FIFO order, the way a GPU stream
//! does.
//!
//! In delayed-completion mode a copy sleeps before it runs, and its
//! destination is filled with [`POISON`] when the copy is queued, so a
//! consumer that reads without waiting on the stream or an event sees poison
//! instead of racing to the right answer. Poisoning at enqueue must not break
//! correctly ordered programs, though: a destination that a queued,
//! not-yet-run copy still has to *read* (a write-after-read that the stream
//! order or an event makes legal) is left alone. Every queued copy therefore
//! registers its source range until it has run.

use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::thread::JoinHandle;
use std::time::Duration;

use super::event::EventState;
use super::memory::{self, DeviceRange, Memory, POISON};
use crate::abi::DeviceType;
use crate::error::{Error, Result};

/// One side of a copy.
#[derive(Debug, Clone, Copy)]
pub(super) enum Endpoint {
    /// Host memory the caller keeps valid until the copy has run.
    Host(usize),
    /// Emulated device memory, validated when the copy was queued.
    Device(DeviceRange),
}

impl Endpoint {
    fn address(&self) -> usize {
        match self {
            Endpoint::Host(address) => *address,
            Endpoint::Device(range) => range.address(),
        }
    }

    /// Where the bytes start, in a space that never confuses two
    /// allocations: a device range is named by its allocation's unique id
    /// and offset, so a stale queued read of a freed allocation cannot match
    /// a new allocation that the system placed at the same address.
    fn region(&self) -> (Option<u64>, usize) {
        match self {
            Endpoint::Host(address) => (None, *address),
            Endpoint::Device(range) => (Some(range.allocation_id()), range.offset()),
        }
    }

    /// Where the bytes are for this process, or `None` if the allocation has
    /// been freed since the copy was queued.
    fn resolve(&self, memory: &Memory, len: usize) -> Option<*mut u8> {
        match self {
            Endpoint::Host(address) => Some(*address as *mut u8),
            Endpoint::Device(range) => memory.alias(*range, len),
        }
    }
}

/// Source ranges of queued copies that have not run yet, by ticket.
/// Source regions (see [`Endpoint::region`]) and lengths by ticket.
type PendingReads = BTreeMap<u64, ((Option<u64>, usize), usize)>;

fn pending_reads() -> MutexGuard<'static, PendingReads> {
    static PENDING: OnceLock<Mutex<PendingReads>> = OnceLock::new();
    PENDING
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner())
}

/// A registered pending read, removed when the copy holding it is dropped
/// (after it ran, or unrun if the queue went away).
struct ReadTicket(u64);

impl Drop for ReadTicket {
    fn drop(&mut self) {
        pending_reads().remove(&self.0);
    }
}

struct CopyOp {
    src: Endpoint,
    dst: Endpoint,
    len: usize,
    delay: Duration,
    _ticket: ReadTicket,
}

impl CopyOp {
    fn run(&self) -> std::result::Result<(), String> {
        if !self.delay.is_zero() {
            std::thread::sleep(self.delay);
        }
        // Held during the copy so that neither allocation can be unmapped
        // under it.
        let memory = memory::lock();
        let freed = |end: &Endpoint, side: &str| {
            format!(
                "queued copy of {} bytes: the {side} allocation at {:#x} was freed before the copy ran",
                self.len,
                end.address()
            )
        };
        let src = self
            .src
            .resolve(&memory, self.len)
            .ok_or_else(|| freed(&self.src, "source"))?;
        let dst = self
            .dst
            .resolve(&memory, self.len)
            .ok_or_else(|| freed(&self.dst, "destination"))?;
        // SAFETY: device ends are live aliases of at least `len` bytes (checked
        // just now, under the lock that keeps them mapped); host ends are valid
        // for `len` bytes until the copy has run, as the caller of
        // `copy_from_host`/`copy_to_host` promised. `ptr::copy` tolerates an
        // overlap within one allocation.
        unsafe { std::ptr::copy(src, dst, self.len) };
        Ok(())
    }
}

enum Op {
    Copy(CopyOp),
    Record {
        event: Arc<EventState>,
        generation: u64,
    },
    Wait {
        event: Arc<EventState>,
        generation: u64,
    },
    Fence(mpsc::SyncSender<()>),
    /// Dropped when reached: what the work queued before it needed.
    Release(Box<dyn std::any::Any + Send>),
}

/// The handle inside a [`Stream`](crate::device::Stream). Dropping it drains
/// the queue and joins the worker.
#[derive(Debug)]
pub(super) struct EmulatedStream {
    device_id: i64,
    sender: Option<Sender<Op>>,
    worker: Option<JoinHandle<()>>,
    /// Failures of queued operations, reported at the next synchronize.
    errors: Arc<Mutex<Vec<String>>>,
}

impl EmulatedStream {
    pub(super) fn new(device_id: i64) -> Result<Self> {
        let (sender, receiver) = mpsc::channel();
        let errors = Arc::new(Mutex::new(Vec::new()));
        let worker_errors = Arc::clone(&errors);
        // The name (at most 15 bytes survive) shows in /proc/self/task/*/comm.
        let worker = std::thread::Builder::new()
            .name(format!("arrow-emu-{device_id}"))
            .spawn(move || run_worker(receiver, worker_errors))
            .map_err(|e| {
                error(
                    device_id,
                    format!("cannot start a stream worker thread: {e}"),
                )
            })?;
        Ok(EmulatedStream {
            device_id,
            sender: Some(sender),
            worker: Some(worker),
            errors,
        })
    }

    fn submit(&self, op: Op) -> Result<()> {
        let sent = self.sender.as_ref().map(|sender| sender.send(op).is_ok());
        if sent == Some(true) {
            Ok(())
        } else {
            Err(error(
                self.device_id,
                "the stream's worker thread has stopped".to_string(),
            ))
        }
    }

    /// Queues a copy of `len > 0` bytes whose ends the caller validated under
    /// `memory`; with a `delay`, poisons the destination now (see the module
    /// documentation for when it does not).
    ///
    /// # Safety
    /// Host ends must be valid for `len` bytes (reads for `src`, writes for
    /// `dst`) until the copy has run.
    pub(super) unsafe fn enqueue_copy(
        &self,
        memory: &Memory,
        src: Endpoint,
        dst: Endpoint,
        len: usize,
        delay: Duration,
    ) -> Result<()> {
        static NEXT_TICKET: AtomicU64 = AtomicU64::new(0);
        let ticket = NEXT_TICKET.fetch_add(1, Ordering::Relaxed);
        let (dst_space, dst_start) = dst.region();
        let dst_still_read = {
            let mut pending = pending_reads();
            pending.insert(ticket, (src.region(), len));
            pending.values().any(|&((space, start), n)| {
                space == dst_space && start < dst_start + len && dst_start < start + n
            })
        };
        let ticket = ReadTicket(ticket);
        if !delay.is_zero() && !dst_still_read {
            if let Some(dst) = dst.resolve(memory, len) {
                // SAFETY: a device destination resolves to a live alias of `len`
                // bytes (validated under `memory`, which is still held); a host
                // destination is writable for `len` bytes by this function's
                // contract.
                unsafe { std::ptr::write_bytes(dst, POISON, len) };
            }
        }
        self.submit(Op::Copy(CopyOp {
            src,
            dst,
            len,
            delay,
            _ticket: ticket,
        }))
    }

    /// Queues the completion of record `generation` of `event`.
    pub(super) fn enqueue_record(&self, event: Arc<EventState>, generation: u64) -> Result<()> {
        self.submit(Op::Record {
            event: Arc::clone(&event),
            generation,
        })
        .inspect_err(|_| {
            // Nobody will reach the record: complete it rather than leave
            // waiters hanging.
            event.complete(generation)
        })
    }

    /// Drops `keep` once the work queued so far has run.
    pub(super) fn enqueue_release(&self, keep: Box<dyn std::any::Any + Send>) -> Result<()> {
        self.submit(Op::Release(keep))
    }

    /// Makes the work queued after this call wait for record `generation`.
    pub(super) fn enqueue_wait(&self, event: Arc<EventState>, generation: u64) -> Result<()> {
        self.submit(Op::Wait { event, generation })
    }

    /// Blocks until everything queued so far has run; reports the failures of
    /// queued operations since the last synchronize.
    pub(super) fn synchronize(&self) -> Result<()> {
        let (done, finished) = mpsc::sync_channel(1);
        self.submit(Op::Fence(done))?;
        finished.recv().map_err(|_| {
            error(
                self.device_id,
                "the stream's worker thread stopped before the queue drained".into(),
            )
        })?;
        let errors = std::mem::take(&mut *self.errors.lock().unwrap_or_else(|e| e.into_inner()));
        if errors.is_empty() {
            Ok(())
        } else {
            Err(error(
                self.device_id,
                format!(
                    "{} queued operation(s) failed: {}",
                    errors.len(),
                    errors.join("; ")
                ),
            ))
        }
    }
}

impl Drop for EmulatedStream {
    fn drop(&mut self) {
        // Closing the channel lets the worker finish what is queued and exit.
        drop(self.sender.take());
        if let Some(worker) = self.worker.take() {
            // The worker catches panics per operation, so join cannot fail in
            // practice; a destructor has nobody to report to anyway.
            let _ = worker.join();
        }
    }
}

fn error(device_id: i64, message: String) -> Error {
    Error::device(DeviceType::EXT_DEV, device_id, message)
}

fn run_worker(receiver: Receiver<Op>, errors: Arc<Mutex<Vec<String>>>) {
    let fail = |message: String| {
        errors
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(message)
    };
    while let Ok(op) = receiver.recv() {
        // A panic must not kill the worker: a dead worker leaves event
        // waiters hanging forever.
        let outcome = catch_unwind(AssertUnwindSafe(|| match op {
            Op::Copy(copy) => copy.run(),
            Op::Record { event, generation } => {
                event.complete(generation);
                Ok(())
            }
            Op::Wait { event, generation } => {
                event.wait(generation);
                Ok(())
            }
            Op::Fence(done) => {
                // The synchronizing thread may have given up; nothing to do then.
                let _ = done.send(());
                Ok(())
            }
            Op::Release(keep) => {
                drop(keep);
                Ok(())
            }
        }));
        match outcome {
            Ok(Ok(())) => {}
            Ok(Err(message)) => fail(message),
            Err(payload) => fail(match Error::from_panic(payload) {
                Error::Panic(message) => format!("a queued operation panicked: {message}"),
                other => other.to_string(),
            }),
        }
    }
}

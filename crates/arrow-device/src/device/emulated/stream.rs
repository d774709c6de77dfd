//! Emulated streams: each stream is a FIFO queue of operations (copies,
//! event records, event waits, releases, fences) that the device's worker
//! pool ([`super::pool`]) runs in order, one after another, the way a GPU
//! runs a stream. Different streams run concurrently on different workers;
//! a stream holds no thread of its own.
//!
//! A stream is scheduled on the pool while it has work, and one worker at a
//! time owns it: the worker runs its operations from the front until the
//! queue is empty or the front operation cannot run yet. A wait on an event
//! that has not completed parks the stream (the event wakes it when it
//! completes), and a delayed copy that is not yet due parks it on the pool's
//! timers; in both cases the worker moves on to other streams instead of
//! sleeping, so waits across streams cannot deadlock the pool, whatever the
//! order in which the streams reached it.
//!
//! In delayed-completion mode a copy waits its delay once it reaches the
//! front of its stream, and its destination is filled with [`POISON`] when
//! the copy is queued, so a consumer that reads without waiting on the
//! stream or an event sees poison instead of racing to the right answer. Poisoning at enqueue must not break
//! correctly ordered programs, though: a destination that a queued,
//! not-yet-run copy still has to *read* (a write-after-read that the stream
//! order or an event makes legal) is left alone. Every queued copy therefore
//! registers its source range until it has run.

use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use super::event::EventState;
use super::memory::{self, DeviceRange, Memory, POISON};
use super::pool::{self, Job, Pool, Turn, Workers};
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
    /// When the copy may run: set when it reaches the front of its stream.
    due: Option<Instant>,
    _ticket: ReadTicket,
}

impl CopyOp {
    /// When the copy may run, if that is still to come. The delay starts
    /// when the copy reaches the front of its stream, so the copies of one
    /// stream take their delays one after another, as before there was a
    /// pool.
    fn not_yet_due(&mut self) -> Option<Instant> {
        if self.delay.is_zero() {
            return None;
        }
        let delay = self.delay;
        let due = *self.due.get_or_insert_with(|| Instant::now() + delay);
        (Instant::now() < due).then_some(due)
    }

    fn run(&self) -> std::result::Result<(), String> {
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

/// Operations a worker runs in one turn of a stream before it lets other
/// streams have theirs.
const OPS_PER_TURN: usize = 64;

/// A stream's queue and whether it is in the pool's hands.
#[derive(Default)]
struct Queue {
    ops: VecDeque<Op>,
    /// Queued on the pool, run by a worker, or parked (on an event or a
    /// timer): whoever holds it will get to new operations. When false, the
    /// next submit schedules the stream.
    scheduled: bool,
}

/// What the pool runs for a stream: its queue and the failures of its
/// operations.
struct StreamState {
    device_id: i64,
    workers: Workers,
    queue: Mutex<Queue>,
    /// Failures of queued operations, reported at the next synchronize.
    errors: Mutex<Vec<String>>,
}

impl StreamState {
    fn queue(&self) -> MutexGuard<'_, Queue> {
        // Updates of the queue are single pushes, pops and flag stores: a
        // panic elsewhere cannot leave it inconsistent.
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn fail(&self, message: String) {
        self.errors
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(message)
    }

    /// Runs one operation that never waits, recording its failure or panic.
    fn execute(&self, op: Op) {
        // A panic must not take the worker down, nor lose the stream: the
        // operations behind it, and whoever waits for them, go on.
        let outcome = catch_unwind(AssertUnwindSafe(|| match op {
            Op::Copy(copy) => copy.run(),
            Op::Record { event, generation } => {
                event.complete(generation);
                Ok(())
            }
            // Waits are handled by `run`, which parks the stream.
            Op::Wait { .. } => Ok(()),
            Op::Fence(done) => {
                // The synchronizing thread may have given up; nothing to do then.
                let _ = done.send(());
                Ok(())
            }
            Op::Release(owner) => {
                drop(owner);
                Ok(())
            }
        }));
        match outcome {
            Ok(Ok(())) => {}
            Ok(Err(message)) => self.fail(message),
            Err(payload) => self.fail(match Error::from_panic(payload) {
                Error::Panic(message) => format!("a queued operation panicked: {message}"),
                other => other.to_string(),
            }),
        }
    }
}

impl Job for StreamState {
    fn run(self: Arc<Self>) -> Turn {
        for _ in 0..OPS_PER_TURN {
            let op = {
                let mut queue = self.queue();
                match queue.ops.front_mut() {
                    None => {
                        queue.scheduled = false;
                        return Turn::Done;
                    }
                    Some(Op::Copy(copy)) => {
                        if let Some(due) = copy.not_yet_due() {
                            return Turn::Until(due);
                        }
                    }
                    Some(_) => {}
                }
                queue.ops.pop_front()
            };
            match op {
                Some(Op::Wait { event, generation }) => {
                    let stream = Arc::clone(&self);
                    let wake = Box::new(move || stream.workers.clone().wake(stream));
                    if event.when_complete(generation, wake) {
                        // The event wakes the stream; until then no worker
                        // holds it.
                        return Turn::Parked;
                    }
                }
                Some(op) => self.execute(op),
                None => {}
            }
        }
        Turn::Again
    }
}

/// The handle inside a [`Stream`](crate::device::Stream). Dropping it waits
/// until the queued work has run.
pub(super) struct EmulatedStream {
    state: Arc<StreamState>,
    /// Keeps the device's pool open while the stream lives.
    _pool: Arc<Pool>,
}

impl fmt::Debug for EmulatedStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EmulatedStream")
            .field("device_id", &self.state.device_id)
            .field("queued", &self.state.queue().ops.len())
            .finish()
    }
}

impl EmulatedStream {
    /// A stream run by the workers of `pool`, the pool of device `device_id`.
    pub(super) fn new(device_id: i64, pool: &Arc<Pool>) -> Self {
        EmulatedStream {
            state: Arc::new(StreamState {
                device_id,
                workers: pool.workers().clone(),
                queue: Mutex::new(Queue::default()),
                errors: Mutex::new(Vec::new()),
            }),
            _pool: Arc::clone(pool),
        }
    }

    /// Appends `op` to the queue, scheduling the stream if nobody holds it.
    fn submit(&self, op: Op) -> Result<()> {
        let refused = {
            let mut queue = self.state.queue();
            queue.ops.push_back(op);
            if queue.scheduled {
                return Ok(());
            }
            // Under the queue lock, so that a worker that takes the stream
            // finds it marked and the op in place.
            let job: Arc<dyn Job> = Arc::clone(&self.state) as Arc<dyn Job>;
            match self.state.workers.schedule(job) {
                Ok(()) => {
                    queue.scheduled = true;
                    return Ok(());
                }
                Err(e) => (queue.ops.pop_back(), e),
            }
        };
        // Nothing will run the op: it goes now (outside the lock, since a
        // release may drop anything), and the caller learns why.
        let (op, error) = refused;
        drop(op);
        Err(error)
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
            due: None,
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

    /// Drops `owner` once the work queued so far has run.
    pub(super) fn enqueue_release(&self, owner: Box<dyn std::any::Any + Send>) -> Result<()> {
        self.submit(Op::Release(owner))
    }

    /// Makes the work queued after this call wait for record `generation`.
    pub(super) fn enqueue_wait(&self, event: Arc<EventState>, generation: u64) -> Result<()> {
        self.submit(Op::Wait { event, generation })
    }

    /// Blocks until everything queued so far has run; reports the failures of
    /// queued operations since the last synchronize.
    pub(super) fn synchronize(&self) -> Result<()> {
        self.drain()?;
        let errors =
            std::mem::take(&mut *self.state.errors.lock().unwrap_or_else(|e| e.into_inner()));
        if errors.is_empty() {
            Ok(())
        } else {
            Err(error(
                self.state.device_id,
                format!(
                    "{} queued operation(s) failed: {}",
                    errors.len(),
                    errors.join("; ")
                ),
            ))
        }
    }

    /// Blocks until everything queued so far has run.
    fn drain(&self) -> Result<()> {
        let (done, finished) = mpsc::sync_channel(1);
        self.submit(Op::Fence(done))?;
        // On a worker (a release dropping a stream), the pool may start a
        // stand-in meanwhile: see `pool::blocking`.
        pool::blocking(|| finished.recv()).map_err(|_| {
            error(
                self.state.device_id,
                "the stream stopped before its queue drained (a queued operation \
                 panicked outside its guard)"
                    .into(),
            )
        })
    }
}

impl Drop for EmulatedStream {
    fn drop(&mut self) {
        // The host memory of queued copies is only promised until they have
        // run, so the stream's work must be done before its owner moves on.
        // A failure cannot be reported from a destructor.
        let _ = self.drain();
    }
}

fn error(device_id: i64, message: String) -> Error {
    Error::device(DeviceType::EXT_DEV, device_id, message)
}

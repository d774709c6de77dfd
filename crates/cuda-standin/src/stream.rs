//! Streams and events: each stream is a queue run in order by its own
//! worker thread, each operation no sooner than the configured delay after
//! it was queued, and only once what it waits for has happened (an event's
//! record, or the work of another stream that the legacy default stream's
//! rules put before it).
//!
//! Work nobody waits on is lazy: it runs only `lazy` (default 20 ms) after
//! being queued, while work the host waits for (a stream or event
//! synchronization, a synchronous copy) is *forced* and runs after the short
//! delay, forcing in turn what it was ordered after (the streams and event
//! records it depends on). So a stream that reads another stream's results
//! without waiting on its event reads them before that stream has written
//! them (poison), deterministically, instead of by the luck of timing.
//!
//! Completion is published on one process-wide condition variable
//! ([`wait_until`]): waits on several streams and events need no lock order.

use std::collections::VecDeque;
use std::ffi::c_void;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::control;
use crate::driver::{lock, Context};
use crate::ipc::{self, event_slot, SharedPage};
use crate::memory::Allocation;
use crate::module::run_kernel;

/// What a stream is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamKind {
    /// `cuStreamCreate`; `blocking` unless `CU_STREAM_NON_BLOCKING`.
    Created { blocking: bool },
    /// The legacy default stream of a context (handles 0 and 1).
    Legacy,
    /// A thread's per-thread default stream (handle 2): blocking.
    PerThread,
}

/// A host function (`CUhostFn`).
pub type HostFn = unsafe extern "C" fn(*mut c_void);

/// What an operation does when it runs. Addresses are the stand-in's host
/// addresses (aliases for device memory), resolved when it was queued.
pub enum Work {
    /// Orders only (a synchronization marker, a wait on an event).
    Nothing,
    Copy {
        dst: usize,
        src: usize,
        len: usize,
    },
    /// `count` elements of `width` bytes (1 or 4) set to `value`.
    Fill {
        dst: usize,
        value: u32,
        width: usize,
        count: usize,
    },
    Record(Arc<Event>, u64),
    HostFunc(HostFn, usize),
    Kernel {
        entry: std::ffi::CString,
        grid: [u32; 3],
        block: [u32; 3],
        params: Vec<u64>,
    },
}

/// What must have happened before an operation runs.
pub enum After {
    /// The stream's operations up to this ticket.
    Stream(Arc<Stream>, u64),
    /// The event's records up to this generation.
    Event(Arc<Event>, u64),
}

impl After {
    /// Makes what this waits for run without the lazy delay.
    fn force(&self) {
        match self {
            After::Stream(stream, ticket) => stream.force(*ticket),
            After::Event(event, generation) => event.force(*generation),
        }
    }

    fn done(&self) -> bool {
        match self {
            After::Stream(stream, ticket) => lock(&stream.queue).completed >= *ticket,
            After::Event(event, generation) => event.completed() >= *generation,
        }
    }
}

/// A queued operation.
struct Op {
    ticket: u64,
    queued_at: Instant,
    after: Vec<After>,
    work: Work,
    /// Allocations it reads or writes: their `pending` counts it.
    uses: Vec<Arc<Allocation>>,
    /// Device-address ranges it touches, for the poison rule.
    ranges: Vec<(usize, usize)>,
}

#[derive(Default)]
struct Queue {
    enqueued: u64,
    completed: u64,
    /// Operations up to this ticket run without the lazy delay.
    forced: u64,
    ops: VecDeque<Op>,
    worker: bool,
}

/// A stream.
pub struct Stream {
    pub handle: usize,
    /// Its context's handle and device.
    pub context: usize,
    pub ordinal: i32,
    pub kind: StreamKind,
    queue: Mutex<Queue>,
    wake: Condvar,
}

/// The ranges of operations queued on every stream and not yet run.
fn pending_ranges() -> &'static Mutex<Vec<(usize, usize)>> {
    static RANGES: OnceLock<Mutex<Vec<(usize, usize)>>> = OnceLock::new();
    RANGES.get_or_init(Default::default)
}

fn overlaps(a: (usize, usize), b: (usize, usize)) -> bool {
    a.0 < b.0 + b.1 && b.0 < a.0 + a.1
}

/// What a queued copy or memset's destination holds until it runs.
pub const POISON: u8 = 0xDB;

/// One process-wide "something completed" signal.
fn progress() -> &'static (Mutex<()>, Condvar) {
    static PROGRESS: OnceLock<(Mutex<()>, Condvar)> = OnceLock::new();
    PROGRESS.get_or_init(Default::default)
}

fn notify_progress() {
    let (mutex, condvar) = progress();
    let _guard = lock(mutex);
    condvar.notify_all();
}

/// Blocks until `done()` holds (checked under the progress lock, so no
/// completion is missed).
pub fn wait_until(done: impl Fn() -> bool) {
    let (mutex, condvar) = progress();
    let mut guard = lock(mutex);
    while !done() {
        guard = condvar
            .wait_timeout(guard, Duration::from_millis(50))
            .unwrap_or_else(|e| e.into_inner())
            .0;
    }
}

impl Stream {
    pub fn new(context: usize, ordinal: i32, kind: StreamKind) -> Arc<Stream> {
        Arc::new(Stream {
            handle: crate::driver::new_handle(),
            context,
            ordinal,
            kind,
            queue: Mutex::new(Queue::default()),
            wake: Condvar::new(),
        })
    }

    fn is_blocking(&self) -> bool {
        matches!(
            self.kind,
            StreamKind::Created { blocking: true } | StreamKind::PerThread
        )
    }

    /// The ticket of the last operation queued so far.
    pub fn tail(&self) -> u64 {
        lock(&self.queue).enqueued
    }

    /// Whether everything queued so far has run (`cuStreamQuery`).
    pub fn is_idle(&self) -> bool {
        let queue = lock(&self.queue);
        queue.completed >= queue.enqueued
    }

    /// Queues `work` after `after` and after what the default-stream rules
    /// put before it; returns its ticket. `poison` is a destination (device
    /// address, host address, length) to fill with [`POISON`] now unless
    /// queued work still touches it.
    pub fn enqueue(
        self: &Arc<Self>,
        context: &Context,
        work: Work,
        mut after: Vec<After>,
        uses: Vec<Arc<Allocation>>,
        ranges: Vec<(usize, usize)>,
        poison: Option<(usize, usize, usize)>,
    ) -> u64 {
        // The legacy stream waits for every blocking stream of its context,
        // and every blocking stream waits for the legacy stream (the
        // driver's "Stream synchronization behavior").
        if self.kind == StreamKind::Legacy {
            for stream in context.blocking_streams() {
                after.push(After::Stream(Arc::clone(&stream), stream.tail()));
            }
        } else if self.is_blocking() {
            let legacy = &context.legacy;
            after.push(After::Stream(Arc::clone(legacy), legacy.tail()));
        }
        {
            let mut pending = lock(pending_ranges());
            if let Some((device, host, len)) = poison {
                if len > 0 && !pending.iter().any(|r| overlaps(*r, (device, len))) {
                    // SAFETY: `host` is the stand-in's address of `len`
                    // destination bytes, checked when the work was resolved;
                    // no queued operation touches them.
                    unsafe { std::ptr::write_bytes(host as *mut u8, POISON, len) };
                }
            }
            pending.extend(ranges.iter().copied());
        }
        for allocation in &uses {
            allocation.pending.fetch_add(1, Ordering::SeqCst);
        }
        control::counters()
            .pending_operations
            .fetch_add(1, Ordering::SeqCst);
        let mut queue = lock(&self.queue);
        queue.enqueued += 1;
        let ticket = queue.enqueued;
        queue.ops.push_back(Op {
            ticket,
            queued_at: Instant::now(),
            after,
            work,
            uses,
            ranges,
        });
        if !queue.worker {
            queue.worker = true;
            let stream = Arc::clone(self);
            let spawned = std::thread::Builder::new()
                .name(format!("cuda-standin stream {:#x}", self.handle))
                .spawn(move || stream.work());
            if spawned.is_err() {
                eprintln!("cuda-standin: cannot start a stream worker thread");
                std::process::abort();
            }
        }
        self.wake.notify_all();
        ticket
    }

    /// Makes the operations up to `ticket` run without the lazy delay.
    pub fn force(&self, ticket: u64) {
        let mut queue = lock(&self.queue);
        if ticket > queue.forced {
            queue.forced = ticket;
            self.wake.notify_all();
        }
    }

    /// Blocks until the operation with `ticket` has run (forcing it).
    pub fn wait_for(&self, ticket: u64) {
        self.force(ticket);
        wait_until(|| lock(&self.queue).completed >= ticket);
    }

    /// Waits until `op` may run: the short delay after it was queued once
    /// it is forced, the lazy one otherwise.
    fn wait_turn(&self, op: &Op) {
        let (delay, lazy) = crate::driver::driver()
            .map(|d| (d.settings.delay, d.settings.lazy))
            .unwrap_or_default();
        let mut queue = lock(&self.queue);
        loop {
            let wait = if queue.forced >= op.ticket {
                delay
            } else {
                lazy.max(delay)
            };
            let now = Instant::now();
            let due = op.queued_at + wait;
            if due <= now {
                return;
            }
            queue = self
                .wake
                .wait_timeout(queue, due - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// The worker: runs the queue in order; ends once it has been idle for
    /// a while (the next `enqueue` starts another).
    fn work(self: Arc<Self>) {
        loop {
            let op = {
                let mut queue = lock(&self.queue);
                if queue.ops.is_empty() {
                    queue = self
                        .wake
                        .wait_timeout(queue, Duration::from_millis(100))
                        .unwrap_or_else(|e| e.into_inner())
                        .0;
                }
                match queue.ops.pop_front() {
                    Some(op) => op,
                    None => {
                        queue.worker = false;
                        return;
                    }
                }
            };
            self.wait_turn(&op);
            op.after.iter().for_each(After::force);
            wait_until(|| op.after.iter().all(After::done));
            run(&op.work);
            {
                let mut pending = lock(pending_ranges());
                for range in &op.ranges {
                    if let Some(at) = pending.iter().position(|r| r == range) {
                        pending.swap_remove(at);
                    }
                }
            }
            for allocation in &op.uses {
                allocation.pending.fetch_sub(1, Ordering::SeqCst);
            }
            control::counters()
                .pending_operations
                .fetch_sub(1, Ordering::SeqCst);
            lock(&self.queue).completed = op.ticket;
            notify_progress();
        }
    }
}

thread_local! {
    /// Set while a host function runs on this thread: every entry point then
    /// refuses with `CUDA_ERROR_NOT_PERMITTED`.
    pub static IN_HOST_FUNCTION: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

fn run(work: &Work) {
    match work {
        Work::Nothing => {}
        Work::Copy { dst, src, len } => {
            // SAFETY: both ends were resolved to host addresses of at least
            // `len` bytes when queued (aliases kept mapped: freeing them
            // while queued is a fatal violation), or are pageable memory the
            // caller promised valid until the copy has run.
            unsafe { std::ptr::copy(*src as *const u8, *dst as *mut u8, *len) }
        }
        Work::Fill {
            dst,
            value,
            width,
            count,
        } => {
            // SAFETY (both arms): `count * width` bytes at `dst`, resolved
            // when queued as for copies, and aligned to `width` (checked).
            match width {
                1 => unsafe { std::ptr::write_bytes(*dst as *mut u8, *value as u8, *count) },
                _ => {
                    unsafe { std::slice::from_raw_parts_mut(*dst as *mut u32, *count) }.fill(*value)
                }
            }
        }
        Work::Record(event, generation) => event.complete(*generation),
        Work::HostFunc(function, data) => {
            IN_HOST_FUNCTION.with(|flag| flag.set(true));
            // SAFETY: the caller's host function with its own user data, run
            // once, in stream order, as cuLaunchHostFunc promises.
            let outcome = catch_unwind(AssertUnwindSafe(|| unsafe {
                function(*data as *mut c_void)
            }));
            IN_HOST_FUNCTION.with(|flag| flag.set(false));
            if outcome.is_err() {
                eprintln!("cuda-standin: a host function panicked");
            }
        }
        Work::Kernel {
            entry,
            grid,
            block,
            params,
        } => run_kernel(entry, *grid, *block, params),
    }
}

/// An event: how many times it was recorded, and how many of those records
/// have been reached by their streams. An interprocess event keeps both
/// numbers in a page shared with the processes that open it.
pub struct Event {
    pub handle: usize,
    pub context: usize,
    state: Mutex<(u64, u64)>,
    /// The stream and ticket of the latest record, to force it.
    recorded_on: Mutex<Option<(Arc<Stream>, u64)>>,
    /// `CU_EVENT_INTERPROCESS` (made here or opened from another
    /// process): the state, in slots [`ipc::event_slot`].
    shared: Option<SharedPage>,
    /// Set for an event opened with `cuIpcOpenEventHandle`.
    pub imported: bool,
}

impl Event {
    pub fn new(context: usize) -> Arc<Event> {
        Event::with(context, None, false)
    }

    /// A `CU_EVENT_INTERPROCESS` event of this process.
    pub fn interprocess(context: usize) -> crate::result::Result<Arc<Event>> {
        let page = SharedPage::create("cuda-standin interprocess event")?;
        Ok(Event::with(context, Some(page), false))
    }

    /// Another process's interprocess event, opened in `context`.
    pub fn opened(context: usize, page: SharedPage) -> Arc<Event> {
        Event::with(context, Some(page), true)
    }

    fn with(context: usize, shared: Option<SharedPage>, imported: bool) -> Arc<Event> {
        Arc::new(Event {
            handle: crate::driver::new_handle(),
            context,
            state: Mutex::new((0, 0)),
            recorded_on: Mutex::new(None),
            shared,
            imported,
        })
    }

    /// The shared state of an interprocess event.
    pub fn shared(&self) -> Option<&SharedPage> {
        self.shared.as_ref()
    }

    /// A new record: its generation, to queue as `Work::Record`.
    pub fn next_record(&self) -> u64 {
        match &self.shared {
            Some(page) => {
                page.slot(event_slot::RECORDER)
                    .store(u64::from(ipc::this_process()), Ordering::SeqCst);
                page.slot(event_slot::RECORDED)
                    .fetch_add(1, Ordering::SeqCst)
                    + 1
            }
            None => {
                let mut state = lock(&self.state);
                state.0 += 1;
                state.0
            }
        }
    }

    /// The latest record's generation (0: never recorded).
    pub fn recorded(&self) -> u64 {
        match &self.shared {
            Some(page) => page.slot(event_slot::RECORDED).load(Ordering::SeqCst),
            None => lock(&self.state).0,
        }
    }

    /// Notes where the record of the latest generation was queued.
    pub fn recorded_at(&self, stream: &Arc<Stream>, ticket: u64) {
        *lock(&self.recorded_on) = Some((Arc::clone(stream), ticket));
    }

    /// Makes the latest record (which completes `generation` and any
    /// before it) run without the lazy delay. A record queued in another
    /// process runs when that process's stream reaches it.
    pub fn force(&self, _generation: u64) {
        let recorded = lock(&self.recorded_on).clone();
        if let Some((stream, ticket)) = recorded {
            stream.force(ticket);
        }
    }

    /// The latest completed generation. A record queued by a process that
    /// has ended never runs: its event counts as complete (a wait on it
    /// must not hang).
    pub fn completed(&self) -> u64 {
        let Some(page) = &self.shared else {
            return lock(&self.state).1;
        };
        let completed = page.slot(event_slot::COMPLETED).load(Ordering::SeqCst);
        let recorded = page.slot(event_slot::RECORDED).load(Ordering::SeqCst);
        let recorder = page.slot(event_slot::RECORDER).load(Ordering::SeqCst) as u32;
        if completed < recorded && recorder != ipc::this_process() && !ipc::alive(recorder) {
            return recorded;
        }
        completed
    }

    fn complete(&self, generation: u64) {
        match &self.shared {
            Some(page) => {
                page.slot(event_slot::COMPLETED)
                    .fetch_max(generation, Ordering::SeqCst);
            }
            None => {
                let mut state = lock(&self.state);
                state.1 = state.1.max(generation);
            }
        }
    }

    /// Marks an exported interprocess event destroyed, for its openers.
    pub fn mark_destroyed(&self) {
        if let Some(page) = &self.shared {
            page.slot(event_slot::DESTROYED).store(1, Ordering::SeqCst);
        }
    }

    /// Whether this is an opened event whose exporter destroyed it.
    pub fn exporter_destroyed(&self) -> bool {
        self.imported
            && self
                .shared
                .as_ref()
                .is_some_and(|page| page.slot(event_slot::DESTROYED).load(Ordering::SeqCst) != 0)
    }
}

//! The worker threads of one emulated device: a small pool that runs the
//! queued work of all the device's streams, as a GPU's engines serve all of
//! its streams. A stream is not a thread.
//!
//! The pool runs *jobs* (a stream with queued work is one). A worker takes a
//! ready job and runs it until the job says what became of it ([`Turn`]):
//! out of work, to be resumed later for fairness, due again at some instant
//! (a delayed copy: see the `stream` module), or parked until something else
//! wakes it (a wait on an event not yet completed). No worker ever sleeps or
//! waits inside a job for device work, so a stream that waits on an event
//! recorded on a stream queued behind it cannot starve the pool: the waiting
//! stream is parked, and the worker moves on to the recording stream.
//!
//! Host-side waits are the one exception: a job's release may drop something
//! that synchronizes (an array's owner waits on its event when dropped, a
//! stream drains when dropped). Such waits go through [`blocking`], which lets
//! the pool start a stand-in worker while this one is blocked, so the work
//! that the wait depends on still runs. The pool therefore runs at most
//! [`MAX_STREAM_WORKERS`] workers, plus one per worker blocked in such a wait
//! (none in the usual case); workers beyond the bound exit once they are
//! free, and idle workers exit after [`IDLE_EXIT`].
//!
//! [`MAX_STREAM_WORKERS`]: super::MAX_STREAM_WORKERS

use std::cell::RefCell;
use std::cmp::Ordering;
use std::collections::{BinaryHeap, VecDeque};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::MAX_STREAM_WORKERS;
use crate::abi::DeviceType;
use crate::error::{Error, Result};

/// How long a worker with nothing to do stays before it exits, so that a
/// device used once does not keep threads for the rest of the process.
const IDLE_EXIT: Duration = Duration::from_millis(500);

/// What became of a job after a turn on a worker.
pub(super) enum Turn {
    /// Out of work; it schedules itself again when work arrives.
    Done,
    /// More work, left for later so that other jobs get a turn.
    Again,
    /// Its next operation may not run before this instant.
    Until(Instant),
    /// Waiting for something that will [`Workers::wake`] it.
    Parked,
}

/// Work the pool runs: a stream with queued operations.
pub(super) trait Job: Send + Sync + 'static {
    /// Runs some of the job's work on the calling worker. Must not block on
    /// other jobs' work (park instead), and must not panic.
    fn run(self: Arc<Self>) -> Turn;
}

/// A job due at an instant, ordered so that the earliest comes first out of
/// a max-heap.
struct Timer {
    due: Instant,
    /// Ties broken by arrival, so equal instants keep their order.
    seq: u64,
    job: Arc<dyn Job>,
}

impl PartialEq for Timer {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Timer {}

impl PartialOrd for Timer {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Timer {
    fn cmp(&self, other: &Self) -> Ordering {
        (other.due, other.seq).cmp(&(self.due, self.seq))
    }
}

#[derive(Default)]
struct State {
    ready: VecDeque<Arc<dyn Job>>,
    timers: BinaryHeap<Timer>,
    next_seq: u64,
    /// Live worker threads.
    workers: usize,
    /// Workers waiting for work on the condition variable.
    idle: usize,
    /// Idle workers signalled and not yet awake.
    notified: usize,
    /// Workers blocked in a host wait (see [`blocking`]).
    blocked: usize,
    /// No device or stream holds the pool any more: idle workers exit at
    /// once instead of after [`IDLE_EXIT`].
    closed: bool,
    /// The process whose threads the counts above count: a child forked
    /// from it inherits the counts but none of the threads.
    pid: u32,
}

impl State {
    /// In a child forked from the process that started the workers: none of
    /// them is here, so none is counted (the queued work stays, for the
    /// workers this process starts).
    fn forget_workers_after_fork(&mut self) {
        let pid = std::process::id();
        if self.pid != pid {
            self.pid = pid;
            self.workers = 0;
            self.idle = 0;
            self.notified = 0;
            self.blocked = 0;
        }
    }

    /// Workers that can take a job now or soon: those not blocked.
    fn running(&self) -> usize {
        self.workers - self.blocked
    }
}

struct Shared {
    device_id: i64,
    state: Mutex<State>,
    work: Condvar,
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        // Every update of the state is a few statements that cannot panic
        // (pushes and counters), so a poisoned lock still holds a consistent
        // state.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A handle on a device's workers: what streams submit themselves to.
#[derive(Clone)]
pub(super) struct Workers(Arc<Shared>);

/// The owner of a device's pool, held by the device and its streams: when
/// the last one goes, idle workers exit at once.
pub(super) struct Pool {
    workers: Workers,
}

impl Pool {
    pub(super) fn new(device_id: i64) -> Pool {
        Pool {
            workers: Workers(Arc::new(Shared {
                device_id,
                state: Mutex::new(State {
                    pid: std::process::id(),
                    ..State::default()
                }),
                work: Condvar::new(),
            })),
        }
    }

    pub(super) fn workers(&self) -> &Workers {
        &self.workers
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.workers.0.state().closed = true;
        self.workers.0.work.notify_all();
    }
}

impl Workers {
    /// Queues `job` to run. Fails, leaving nothing queued, only when the pool
    /// has no worker and cannot start one.
    pub(super) fn schedule(&self, job: Arc<dyn Job>) -> Result<()> {
        let mut state = self.0.state();
        state.ready.push_back(job);
        match self.provide_worker(&mut state) {
            Err(e) if state.workers == 0 => {
                state.ready.pop_back();
                Err(e)
            }
            // Another worker will get to it.
            _ => Ok(()),
        }
    }

    /// Queues a parked `job` again. When no worker can be started at all,
    /// the job waits in the ready queue for the next worker this pool
    /// starts: a waker has nobody to report an error to.
    pub(super) fn wake(&self, job: Arc<dyn Job>) {
        let mut state = self.0.state();
        state.ready.push_back(job);
        let _ = self.provide_worker(&mut state);
    }

    /// Makes sure a worker will look at the ready queue: signals an idle
    /// one, or starts one while fewer than the bound are running.
    fn provide_worker(&self, state: &mut State) -> Result<()> {
        state.forget_workers_after_fork();
        if state.idle > state.notified {
            state.notified += 1;
            self.0.work.notify_one();
            return Ok(());
        }
        if state.running() >= MAX_STREAM_WORKERS {
            return Ok(());
        }
        let shared = Arc::clone(&self.0);
        // The name (at most 15 bytes survive) shows in /proc/self/task/*/comm,
        // which is how the tests count a device's workers.
        std::thread::Builder::new()
            .name(format!("arrow-emu-{}", self.0.device_id))
            .spawn(move || work(shared))
            .map_err(|e| {
                Error::device(
                    DeviceType::EXT_DEV,
                    self.0.device_id,
                    format!("cannot start a stream worker thread: {e}"),
                )
            })?;
        // Counted here, under the lock, so that two schedules cannot both see
        // room for one more.
        state.workers += 1;
        Ok(())
    }
}

thread_local! {
    /// The pool the current thread works for, if it is a worker.
    static CURRENT: RefCell<Option<Arc<Shared>>> = const { RefCell::new(None) };
}

/// Runs `wait`, a host-side wait that may depend on work of the pools, such
/// as a stream synchronize or an event synchronize. On a pool worker (a
/// release that drops an array's owner), the worker counts as blocked for
/// the duration, so its pool may start a stand-in: the work the wait depends
/// on could otherwise be queued behind every blocked worker.
pub(super) fn blocking<R>(wait: impl FnOnce() -> R) -> R {
    let Some(shared) = CURRENT.with(|current| current.borrow().clone()) else {
        return wait();
    };
    {
        let mut state = shared.state();
        state.blocked += 1;
        if !state.ready.is_empty() || !state.timers.is_empty() {
            // A failure leaves the work to the workers that are not blocked,
            // or to the next one started.
            let _ = Workers(Arc::clone(&shared)).provide_worker(&mut state);
        }
    }
    let result = wait();
    shared.state().blocked -= 1;
    result
}

/// A worker's life: takes ready jobs (and jobs whose time has come) until
/// it has been idle for [`IDLE_EXIT`], the pool is closed and idle, or the
/// pool runs more workers than the bound (after a blocked worker resumed).
fn work(shared: Arc<Shared>) {
    CURRENT.with(|current| *current.borrow_mut() = Some(Arc::clone(&shared)));
    let mut state = shared.state();
    loop {
        let now = Instant::now();
        while state.timers.peek().is_some_and(|t| t.due <= now) {
            if let Some(timer) = state.timers.pop() {
                state.ready.push_back(timer.job);
            }
        }
        if state.running() > MAX_STREAM_WORKERS {
            break;
        }
        if let Some(job) = state.ready.pop_front() {
            drop(state);
            // `Job::run` catches the panics of the operations it runs; this
            // is the last line of defence, keeping the worker (and the count
            // of workers) alive. A job that panicked here is dropped: its
            // stream stops, and whoever waits on it hangs, which is what a
            // dead stream did before there was a pool.
            let turn = catch_unwind(AssertUnwindSafe(|| Arc::clone(&job).run()));
            state = shared.state();
            match turn {
                Ok(Turn::Again) => state.ready.push_back(job),
                Ok(Turn::Until(due)) => {
                    let seq = state.next_seq;
                    state.next_seq += 1;
                    state.timers.push(Timer { due, seq, job });
                }
                Ok(Turn::Done) | Ok(Turn::Parked) | Err(_) => {}
            }
            continue;
        }
        let timeout = match state.timers.peek() {
            Some(timer) => timer.due.saturating_duration_since(now),
            None if state.closed => break,
            None => IDLE_EXIT,
        };
        state.idle += 1;
        let (woken, waited) = shared
            .work
            .wait_timeout(state, timeout)
            .unwrap_or_else(|e| e.into_inner());
        state = woken;
        state.idle -= 1;
        state.notified = state.notified.saturating_sub(1);
        if waited.timed_out() && state.ready.is_empty() && state.timers.is_empty() {
            break;
        }
    }
    state.workers -= 1;
    drop(state);
    CURRENT.with(|current| current.borrow_mut().take());
}

/// Live workers of the pool behind `workers`, for tests.
#[cfg(test)]
pub(super) fn live_workers(workers: &Workers) -> usize {
    workers.0.state().workers
}

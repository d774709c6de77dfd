//! Emulated events: what an exported array's `sync_event` points to.
//!
//! The `sync_event` pointer is the address of a heap object of ours, the
//! event's shared state. A consumer hands that pointer back
//! (`stream_wait_sync_event`, `synchronize_sync_event`); it is looked up in a
//! registry of live events and never dereferenced, so a foreign or stale
//! pointer is an error, not undefined behaviour.
//!
//! Semantics follow CUDA's: an event never recorded is complete; recording it
//! on a stream makes it pending until the stream reaches the record; a wait
//! (on the host or on a stream) waits for the *latest* record made before the
//! wait was issued, not for later ones. The host blocks on a condition
//! variable; a stream does not block a worker: it leaves a waker with the
//! event and is parked until the record completes.

use std::collections::{BTreeSet, HashMap};
use std::ffi::c_void;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};

/// The shared state of one event: which of its records have not completed.
#[derive(Debug, Default)]
pub(super) struct EventState {
    status: Mutex<Status>,
    completed: Condvar,
}

#[derive(Debug, Default)]
struct Status {
    /// Records made so far; record `n` is generation `n`, 0 means none.
    recorded: u64,
    /// Generations recorded but not yet reached by their stream.
    pending: BTreeSet<u64>,
    /// Parked streams, each waiting for one generation.
    wakers: Wakers,
}

/// What resumes a parked stream once the record it waits for completes.
pub(super) type Waker = Box<dyn FnOnce() + Send>;

#[derive(Default)]
struct Wakers(Vec<(u64, Waker)>);

impl std::fmt::Debug for Wakers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} parked stream(s)", self.0.len())
    }
}

impl EventState {
    fn status(&self) -> MutexGuard<'_, Status> {
        // The status is updated in single statements, so a panic elsewhere
        // cannot leave it inconsistent: a poisoned lock is still usable.
        self.status.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Starts a new record; returns its generation, pending until [`complete`].
    ///
    /// [`complete`]: EventState::complete
    pub(super) fn record(&self) -> u64 {
        let mut status = self.status();
        status.recorded += 1;
        let generation = status.recorded;
        status.pending.insert(generation);
        generation
    }

    /// The generation a wait issued now must wait for (0: none, complete).
    pub(super) fn latest(&self) -> u64 {
        self.status().recorded
    }

    /// Marks record `generation` complete and wakes its waiters: host
    /// threads and parked streams.
    pub(super) fn complete(&self, generation: u64) {
        let woken: Vec<Waker> = {
            let mut status = self.status();
            status.pending.remove(&generation);
            let (done, waiting): (Vec<_>, Vec<_>) = std::mem::take(&mut status.wakers.0)
                .into_iter()
                .partition(|(waited, _)| !status.pending.contains(waited));
            status.wakers.0 = waiting;
            done.into_iter().map(|(_, wake)| wake).collect()
        };
        self.completed.notify_all();
        // Outside the lock: waking a stream takes its pool's lock.
        for wake in woken {
            wake();
        }
    }

    /// Leaves `wake` to be called once record `generation` has completed;
    /// returns false, dropping `wake`, if it has completed already.
    pub(super) fn when_complete(&self, generation: u64, wake: Waker) -> bool {
        let mut status = self.status();
        if !status.pending.contains(&generation) {
            return false;
        }
        status.wakers.0.push((generation, wake));
        true
    }

    /// Blocks until record `generation` has completed.
    pub(super) fn wait(&self, generation: u64) {
        let mut status = self.status();
        while status.pending.contains(&generation) {
            status = self
                .completed
                .wait(status)
                .unwrap_or_else(|e| e.into_inner());
        }
    }
}

/// Live events by `sync_event` address.
fn registry() -> MutexGuard<'static, HashMap<usize, Arc<EventState>>> {
    static REGISTRY: OnceLock<Mutex<HashMap<usize, Arc<EventState>>>> = OnceLock::new();
    REGISTRY
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner())
}

/// The handle inside an [`Event`](crate::device::Event); unregisters on drop.
///
/// The `sync_event` is the address of the shared [`EventState`]. Streams hold
/// their own `Arc` of it, so dropping the event while a queued record or wait
/// still refers to it is safe.
#[derive(Debug)]
pub(super) struct EmulatedEvent {
    state: Arc<EventState>,
}

impl EmulatedEvent {
    pub(super) fn new() -> Self {
        let event = EmulatedEvent {
            state: Arc::default(),
        };
        registry().insert(event.sync_event() as usize, Arc::clone(&event.state));
        event
    }

    /// The pointer exported as `ArrowDeviceArray.sync_event`.
    pub(super) fn sync_event(&self) -> *mut c_void {
        Arc::as_ptr(&self.state) as *mut c_void
    }

    pub(super) fn state(&self) -> &Arc<EventState> {
        &self.state
    }
}

impl Drop for EmulatedEvent {
    fn drop(&mut self) {
        registry().remove(&(self.sync_event() as usize));
    }
}

/// The event behind a `sync_event` pointer, if it is a live emulated event.
pub(super) fn lookup(sync_event: *mut c_void) -> Option<Arc<EventState>> {
    registry().get(&(sync_event as usize)).cloned()
}

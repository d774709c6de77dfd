//! The driver's state: settings and devices (fixed at `cuInit`), primary
//! contexts with their retain counts, each thread's stack of current
//! contexts, and the handle tables.
//!
//! Handles are addresses that point nowhere, taken from one counter and never
//! reused, so a destroyed handle, or a handle of the wrong kind, is found
//! missing from its table (`CUDA_ERROR_INVALID_HANDLE`) instead of naming a
//! newer object.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::thread::ThreadId;

use crate::control::{self, Settings};
use crate::module::{Function, Module};
use crate::result::*;
use crate::stream::{Event, Stream, StreamKind};

/// The settings and devices, set by the first successful `cuInit`.
pub struct Driver {
    pub settings: Settings,
    pub contexts: Vec<Arc<Context>>,
}

static DRIVER: OnceLock<Driver> = OnceLock::new();

/// `cuInit`: reads the settings once; a bad setting fails every `cuInit`.
pub fn init() -> Result<()> {
    if DRIVER.get().is_some() {
        return Ok(());
    }
    let settings = Settings::parse(|name| std::env::var(name).ok()).map_err(|e| {
        eprintln!("cuda-standin: cuInit: {e}");
        CUDA_ERROR_INVALID_VALUE
    })?;
    let contexts = (0..settings.devices).map(Context::primary).collect();
    // A concurrent cuInit may have won: its state stays, ours is dropped.
    let _ = DRIVER.set(Driver { settings, contexts });
    Ok(())
}

pub fn driver() -> Result<&'static Driver> {
    DRIVER.get().ok_or(CUDA_ERROR_NOT_INITIALIZED)
}

/// The context of device `ordinal` (a `CUdevice` is its ordinal).
pub fn device(ordinal: i32) -> Result<&'static Arc<Context>> {
    usize::try_from(ordinal)
        .ok()
        .and_then(|i| driver().ok()?.contexts.get(i))
        .ok_or(CUDA_ERROR_INVALID_DEVICE)
}

/// A new handle value: never 0, 1 or 2 (the special streams), never reused.
pub fn new_handle() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0x5EED_0000);
    NEXT.fetch_add(0x10, Ordering::Relaxed)
}

/// A device's primary context.
pub struct Context {
    pub handle: usize,
    pub ordinal: i32,
    /// `cuDevicePrimaryCtxRetain` minus `Release`; active while above 0.
    retains: Mutex<u64>,
    /// Device and managed memory allocated on this device, for
    /// `CUDA_ERROR_OUT_OF_MEMORY`.
    pub used_memory: AtomicU64,
    /// The legacy default stream (handles 0 and 1).
    pub legacy: Arc<Stream>,
    streams: Mutex<ContextStreams>,
}

#[derive(Default)]
struct ContextStreams {
    /// Blocking streams (created without `CU_STREAM_NON_BLOCKING`, and the
    /// per-thread ones): the legacy stream waits for each of them.
    blocking: Vec<std::sync::Weak<Stream>>,
    per_thread: HashMap<ThreadId, Arc<Stream>>,
}

impl Context {
    fn primary(ordinal: i32) -> Arc<Context> {
        let handle = new_handle();
        Arc::new(Context {
            handle,
            ordinal,
            retains: Mutex::new(0),
            used_memory: AtomicU64::new(0),
            legacy: Stream::new(handle, ordinal, StreamKind::Legacy),
            streams: Mutex::new(ContextStreams::default()),
        })
    }

    pub fn is_active(&self) -> bool {
        *lock(&self.retains) > 0
    }

    pub fn retain(&self) {
        *lock(&self.retains) += 1;
        control::counters()
            .retained_contexts
            .fetch_add(1, Ordering::SeqCst);
    }

    /// `cuDevicePrimaryCtxRelease`: `CUDA_ERROR_INVALID_CONTEXT` when not
    /// retained.
    pub fn release(&self) -> Result<()> {
        let mut retains = lock(&self.retains);
        if *retains == 0 {
            return Err(CUDA_ERROR_INVALID_CONTEXT);
        }
        *retains -= 1;
        control::counters()
            .retained_contexts
            .fetch_sub(1, Ordering::SeqCst);
        Ok(())
    }

    /// Registers a blocking stream, for the legacy stream's waits.
    pub fn add_blocking(&self, stream: &Arc<Stream>) {
        let mut streams = lock(&self.streams);
        streams.blocking.retain(|s| s.strong_count() > 0);
        streams.blocking.push(Arc::downgrade(stream));
    }

    /// The blocking streams alive now.
    pub fn blocking_streams(&self) -> Vec<Arc<Stream>> {
        let streams = lock(&self.streams);
        let mut found: Vec<Arc<Stream>> = streams
            .blocking
            .iter()
            .filter_map(|s| s.upgrade())
            .collect();
        found.extend(streams.per_thread.values().cloned());
        found
    }

    /// The calling thread's per-thread default stream (handle 2).
    pub fn per_thread(&self) -> Arc<Stream> {
        let mut streams = lock(&self.streams);
        let id = std::thread::current().id();
        streams
            .per_thread
            .entry(id)
            .or_insert_with(|| Stream::new(self.handle, self.ordinal, StreamKind::PerThread))
            .clone()
    }
}

pub fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Critical sections leave their data consistent; a stand-in bug that
    // panics in one must not wedge every later call.
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

thread_local! {
    /// This thread's context stack; the top is current.
    static CURRENT: RefCell<Vec<Arc<Context>>> = const { RefCell::new(Vec::new()) };
}

/// The current context, which must be active: `CUDA_ERROR_INVALID_CONTEXT`
/// otherwise (the calls that queue work or allocate need one).
pub fn current() -> Result<Arc<Context>> {
    let top = CURRENT.with(|stack| stack.borrow().last().cloned());
    match top {
        Some(context) if context.is_active() => Ok(context),
        _ => Err(CUDA_ERROR_INVALID_CONTEXT),
    }
}

/// The current context's handle, or 0 (`cuCtxGetCurrent`).
pub fn current_handle() -> usize {
    CURRENT.with(|stack| stack.borrow().last().map_or(0, |c| c.handle))
}

/// The active context with this handle.
pub fn context(handle: usize) -> Result<Arc<Context>> {
    driver()?
        .contexts
        .iter()
        .find(|c| c.handle == handle)
        .filter(|c| c.is_active())
        .cloned()
        .ok_or(CUDA_ERROR_INVALID_CONTEXT)
}

pub fn push(context: Arc<Context>) {
    CURRENT.with(|stack| stack.borrow_mut().push(context));
}

pub fn pop() -> Option<Arc<Context>> {
    CURRENT.with(|stack| stack.borrow_mut().pop())
}

/// `cuCtxSetCurrent`: replaces the top (NULL pops it).
pub fn set_current(context: Option<Arc<Context>>) {
    CURRENT.with(|stack| {
        let mut stack = stack.borrow_mut();
        stack.pop();
        if let Some(context) = context {
            stack.push(context);
        }
    });
}

/// The objects behind handles.
#[derive(Default)]
pub struct Handles {
    pub streams: HashMap<usize, Arc<Stream>>,
    pub events: HashMap<usize, Arc<Event>>,
    pub modules: HashMap<usize, Arc<Module>>,
    pub functions: HashMap<usize, Arc<Function>>,
}

pub fn handles() -> MutexGuard<'static, Handles> {
    static HANDLES: OnceLock<Mutex<Handles>> = OnceLock::new();
    lock(HANDLES.get_or_init(Default::default))
}

//! The emulated asynchronous device (`EXT_DEV`): how the device paths of this
//! crate are tested on machines without a GPU.
//!
//! It is built to catch the two mistakes a consumer of the C Device Data
//! Interface can make, rather than to be fast:
//!
//! - **Touching device memory from the host.** In strict mode (the default)
//!   a device pointer is a `PROT_NONE` mapping: dereferencing it on the host
//!   crashes with SIGSEGV, as it would for GPU memory. Only the device's own
//!   copy routines reach the bytes, through a read-write alias of the same
//!   pages (one memfd mapped twice). Every device
//!   pointer handed to a copy is checked against the registry of live
//!   allocations; a foreign or out-of-range pointer is an error, not a crash.
//! - **Reading before the producer's work is done.** Copies run later, in
//!   order per stream. With a `delay`, each copy waits that long before
//!   running, and its destination holds poison bytes (`0xDB`) from the
//!   moment it is queued until it has run, so a consumer that skips the
//!   stream or `sync_event` wait reads poison, deterministically. Events are
//!   real: a recorded event completes when its stream reaches it.
//!
//! Streams are queues, not threads, as on a GPU: each device runs the work
//! of all its streams on a pool of at most [`MAX_STREAM_WORKERS`] worker
//! threads, so an array that keeps its copy's stream alive costs no thread,
//! and a process may hold any number of them. A worker runs one stream's
//! operations in order; a stream whose next operation must wait (for an
//! event, or for a delayed copy's time) is parked rather than holding a
//! worker, so waits between streams cannot deadlock the pool (see the
//! `stream` and `pool` modules).
//!
//! If a code path passes on this device in strict, delayed mode, it honours
//! the spec's memory and synchronization rules (DESIGN.md, "Testing without a
//! GPU"). Configure the process-wide instances returned by
//! [`EmulatedDevice::global`] (which [`crate::device::lookup`] uses for
//! `EXT_DEV` arrays) with the environment variable `ARROW_DEVICE_EMULATED`,
//! e.g. `strict=1,delay_ms=5` (delays of at most
//! [`EmulatedConfig::MAX_DELAY`], 10 seconds; see [`EmulatedConfig::parse`]),
//! or with [`EmulatedDevice::set_global_config`].
//!
//! ```
//! use std::time::Duration;
//! use arrow_device::abi::DeviceType;
//! use arrow_device::device::emulated::{EmulatedConfig, EmulatedDevice};
//! use arrow_device::device::Device;
//!
//! let config = EmulatedConfig { strict: true, delay: Duration::from_millis(50) };
//! let device = EmulatedDevice::new(0, config);
//! assert_eq!(device.device_type(), DeviceType::EXT_DEV);
//!
//! let buf = device.allocate(4).unwrap();
//! let stream = device.create_stream().unwrap();
//! let mut back = [0u8; 4];
//! // SAFETY: the host buffers are valid for 4 bytes and outlive the
//! // synchronize below.
//! unsafe {
//!     device.copy_from_host([1u8, 2, 3, 4].as_ptr(), buf.as_ptr(), 4, &stream).unwrap();
//!     device.copy_to_host(buf.as_ptr(), back.as_mut_ptr(), 4, &stream).unwrap();
//! }
//! // The copy out has been queued but not run: `back` holds poison until the
//! // stream is synchronized (or an event recorded after the copy completes).
//! assert_eq!(back, [0xDB; 4]);
//! device.synchronize_stream(&stream).unwrap();
//! assert_eq!(back, [1, 2, 3, 4]);
//! ```

mod event;
mod memory;
mod pool;
mod stream;
#[cfg(all(test, target_os = "linux"))]
mod tests;

use std::any::Any;
use std::collections::BTreeMap;
use std::ffi::c_void;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use self::event::EmulatedEvent;
use self::pool::Pool;
use self::stream::{EmulatedStream, Endpoint};
use crate::abi::DeviceType;
use crate::device::{Device, DeviceBuffer, Event, Stream};
use crate::error::{Error, Result};

/// How an emulated device behaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EmulatedConfig {
    /// Device pointers are `PROT_NONE` (a host dereference crashes). Applies
    /// to allocations made while it is set.
    pub strict: bool,
    /// Each queued copy waits this long before running, and its destination
    /// holds poison (`0xDB`) until then. Zero: copies run as soon as their
    /// stream reaches them, without poison. Applies to copies queued while it
    /// is set.
    pub delay: Duration,
}

impl Default for EmulatedConfig {
    /// Strict, no delay.
    fn default() -> Self {
        EmulatedConfig {
            strict: true,
            delay: Duration::ZERO,
        }
    }
}

impl EmulatedConfig {
    /// The environment variable [`EmulatedConfig::from_env`] reads.
    pub const ENV_VAR: &'static str = "ARROW_DEVICE_EMULATED";

    /// The longest `delay_ms` / `delay_us` that [`EmulatedConfig::parse`]
    /// accepts: 10 seconds.
    ///
    /// Every queued copy waits the delay, one after another on its stream,
    /// and dropping an array (or its stream) waits for its copies, so a
    /// process cannot exit while an array is alive for as long as its copies
    /// take. A delay only has to widen a race window: the suites use at most
    /// 1 second, and 10 seconds is generous for any test while still letting
    /// a process that sets it by mistake finish.
    pub const MAX_DELAY: Duration = Duration::from_secs(10);

    /// The configuration in `ARROW_DEVICE_EMULATED` (see
    /// [`EmulatedConfig::parse`]); the default when it is unset or not
    /// Unicode.
    pub fn from_env() -> Result<Self> {
        match std::env::var(Self::ENV_VAR) {
            Ok(spec) => Self::parse(&spec),
            Err(_) => Ok(Self::default()),
        }
    }

    /// Parses the syntax of `ARROW_DEVICE_EMULATED`: comma-separated
    /// `key=value` pairs, `strict=0|1` (also `true/false`, `yes/no`,
    /// `on/off`), `delay_ms=N`, `delay_us=N`. Unknown keys and unparsable
    /// values are ignored, leaving the default in place: a typo in a CI
    /// variable must not abort the test run. A delay above
    /// [`EmulatedConfig::MAX_DELAY`] is an error that names the variable, the
    /// key, the value and the bound: silently shortening it would change
    /// what the tests check, and keeping it could owner the process from
    /// exiting.
    ///
    /// ```
    /// use std::time::Duration;
    /// use arrow_device::device::emulated::EmulatedConfig;
    ///
    /// let config = EmulatedConfig::parse("strict=0, delay_ms=5, colour=blue").unwrap();
    /// assert_eq!(config, EmulatedConfig { strict: false, delay: Duration::from_millis(5) });
    /// assert_eq!(EmulatedConfig::parse("strict=maybe").unwrap(), EmulatedConfig::default());
    /// let err = EmulatedConfig::parse("delay_ms=60000").unwrap_err();
    /// assert_eq!(
    ///     err.to_string(),
    ///     "ARROW_DEVICE_EMULATED: delay_ms=60000 is above the bound of 10000 ms (10 seconds)"
    /// );
    /// ```
    pub fn parse(spec: &str) -> Result<Self> {
        let mut config = Self::default();
        for pair in spec.split(',') {
            let Some((key, value)) = pair.split_once('=') else {
                continue;
            };
            let value = value.trim();
            let key = key.trim().to_ascii_lowercase();
            match key.as_str() {
                "strict" => match value.to_ascii_lowercase().as_str() {
                    "1" | "true" | "yes" | "on" => config.strict = true,
                    "0" | "false" | "no" | "off" => config.strict = false,
                    _ => {}
                },
                "delay_ms" | "delay_us" => {
                    let Ok(n) = value.parse::<u64>() else {
                        continue;
                    };
                    let (delay, bound, unit) = if key == "delay_ms" {
                        (Duration::from_millis(n), Self::MAX_DELAY.as_millis(), "ms")
                    } else {
                        (Duration::from_micros(n), Self::MAX_DELAY.as_micros(), "us")
                    };
                    if delay > Self::MAX_DELAY {
                        return Err(Error::Invalid {
                            path: Self::ENV_VAR.to_string(),
                            message: format!(
                                "{key}={n} is above the bound of {bound} {unit} ({} seconds)",
                                Self::MAX_DELAY.as_secs()
                            ),
                        });
                    }
                    config.delay = delay;
                }
                _ => {}
            }
        }
        Ok(config)
    }
}

/// An emulated asynchronous device, reported as `EXT_DEV` with its id.
///
/// Two instances with the same id are the same device to the copy API: each
/// accepts the other's pointers, as [`crate::device::same_device`] suggests.
pub struct EmulatedDevice {
    id: i64,
    strict: AtomicBool,
    /// The delay in nanoseconds (saturated at `u64::MAX`).
    delay_ns: AtomicU64,
    /// The workers that run the queued work of this instance's streams.
    pool: Arc<Pool>,
}

/// The highest id [`EmulatedDevice::global`] serves.
pub const MAX_GLOBAL_ID: i64 = 1023;

/// The most worker threads an [`EmulatedDevice`] instance runs its streams'
/// work on, however many streams are alive (plus, for as long as it lasts,
/// one per worker blocked in a host wait that a queued release made: a
/// release that drops a stream or an array's owner).
///
/// A GPU has a few copy engines (2 to 7 on NVIDIA parts) serving all its
/// streams; 4 workers let copies of different streams overlap in the same
/// way. Workers start on demand and exit after half a second idle.
pub const MAX_STREAM_WORKERS: usize = 4;

/// The process-wide instances and the configuration new ones start with.
struct Globals {
    config: EmulatedConfig,
    devices: BTreeMap<i64, Arc<EmulatedDevice>>,
}

impl Globals {
    fn get(&mut self, id: i64) -> Option<Arc<EmulatedDevice>> {
        if !(0..=MAX_GLOBAL_ID).contains(&id) {
            return None;
        }
        let config = self.config;
        Some(Arc::clone(
            self.devices
                .entry(id)
                .or_insert_with(|| EmulatedDevice::new(id, config)),
        ))
    }

    fn set_config(&mut self, config: EmulatedConfig) {
        self.config = config;
        for device in self.devices.values() {
            device.set_config(config);
        }
    }
}

/// The strict allocation of emulated device `device_id` that holds device
/// pointer `ptr`, for sharing with another process: its base pointer,
/// length, and a duplicate of its memory file.
#[cfg(target_os = "linux")]
pub(crate) fn export_file(
    device_id: i64,
    ptr: usize,
) -> std::result::Result<(usize, usize, std::os::fd::OwnedFd), String> {
    memory::export_file(device_id, ptr)
}

/// Whether the allocation of emulated device `device_id` that holds
/// device pointer `ptr` keeps a memory file, so that it can be shared as it
/// is.
#[cfg(target_os = "linux")]
pub(crate) fn keeps_file(device_id: i64, ptr: usize) -> bool {
    memory::keeps_file(device_id, ptr)
}

/// Another process's allocation (`len` bytes of memory file `fd`) as a
/// strict allocation of emulated device `device_id` in this one.
#[cfg(target_os = "linux")]
pub(crate) fn import_file(
    device_id: i64,
    fd: std::os::fd::OwnedFd,
    len: usize,
) -> std::result::Result<DeviceBuffer, String> {
    memory::import_file(device_id, fd, len)
}

fn globals() -> std::sync::MutexGuard<'static, Globals> {
    static GLOBALS: OnceLock<Mutex<Globals>> = OnceLock::new();
    GLOBALS
        .get_or_init(|| {
            Mutex::new(Globals {
                config: config_from_env(),
                devices: BTreeMap::new(),
            })
        })
        .lock()
        // Every update is a single insert or a loop of atomic stores; a panic
        // cannot leave the map half-updated.
        .unwrap_or_else(|e| e.into_inner())
}

/// The configuration the process-wide instances start with: that of
/// `ARROW_DEVICE_EMULATED`, or the default when the variable is rejected.
///
/// The variable is read on first use of an emulated device, often deep in
/// an import where no caller can be handed an error, so a rejection is
/// printed to stderr, once: silence would hide the mistake. Tools that want
/// to fail instead check [`EmulatedConfig::from_env`] first.
fn config_from_env() -> EmulatedConfig {
    EmulatedConfig::from_env().unwrap_or_else(|e| {
        eprintln!("arrow-device: {e}; the emulated devices use the default configuration");
        EmulatedConfig::default()
    })
}

impl EmulatedDevice {
    /// A private instance with this id and configuration.
    pub fn new(id: i64, config: EmulatedConfig) -> Arc<EmulatedDevice> {
        let device = EmulatedDevice {
            id,
            strict: AtomicBool::new(true),
            delay_ns: AtomicU64::new(0),
            pool: Arc::new(Pool::new(id)),
        };
        device.set_config(config);
        Arc::new(device)
    }

    /// The process-wide instance with this id (0 to [`MAX_GLOBAL_ID`]),
    /// created on first use with the global configuration; `None` for other
    /// ids.
    pub fn global(id: i64) -> Option<Arc<EmulatedDevice>> {
        globals().get(id)
    }

    /// Sets the configuration of the process-wide instances: those created
    /// later and those that exist already. It starts as
    /// [`EmulatedConfig::from_env`] (the default if that is an error, which
    /// is then printed to stderr).
    pub fn set_global_config(config: EmulatedConfig) {
        globals().set_config(config);
    }

    /// The configuration of the process-wide instances.
    pub fn global_config() -> EmulatedConfig {
        globals().config
    }

    /// This instance's configuration.
    pub fn config(&self) -> EmulatedConfig {
        EmulatedConfig {
            strict: self.strict.load(Ordering::Relaxed),
            delay: Duration::from_nanos(self.delay_ns.load(Ordering::Relaxed)),
        }
    }

    /// Changes this instance's configuration. Memory already allocated keeps
    /// its mode; copies already queued owner their delay.
    pub fn set_config(&self, config: EmulatedConfig) {
        self.strict.store(config.strict, Ordering::Relaxed);
        let delay_ns = u64::try_from(config.delay.as_nanos()).unwrap_or(u64::MAX);
        self.delay_ns.store(delay_ns, Ordering::Relaxed);
    }

    fn error(&self, message: impl Into<String>) -> Error {
        Error::device(DeviceType::EXT_DEV, self.id, message)
    }

    fn stream<'s>(&self, stream: &'s Stream, call: &str) -> Result<&'s EmulatedStream> {
        stream.handle::<EmulatedStream>().ok_or_else(|| {
            self.error(format!(
                "{call}: the stream was not created by an emulated device"
            ))
        })
    }

    fn event_state(&self, sync_event: *mut c_void, call: &str) -> Result<Arc<event::EventState>> {
        event::lookup(sync_event).ok_or_else(|| {
            self.error(format!(
                "{call}: sync_event {sync_event:p} is not a live emulated event \
                 (expected the pointer of an Event from an emulated device's create_event; \
                 emulated devices are per binary: an array another binary made on its \
                 emulated device, such as another Python extension module linking its own \
                 copy of arrow-device, cannot be used here)"
            ))
        })
    }

    /// Validates both ends under one registry lock and queues the copy.
    ///
    /// # Safety
    /// Host ends valid for `len` bytes until the copy has run.
    unsafe fn enqueue(
        &self,
        stream: &Stream,
        call: &str,
        src: impl FnOnce(&memory::Memory) -> Result<Endpoint>,
        dst: impl FnOnce(&memory::Memory) -> Result<Endpoint>,
        len: usize,
    ) -> Result<()> {
        let stream = self.stream(stream, call)?;
        let memory = memory::lock();
        let (src, dst) = (src(&memory)?, dst(&memory)?);
        // SAFETY: device ends were validated under `memory`; host ends are
        // valid per this function's contract.
        unsafe { stream.enqueue_copy(&memory, src, dst, len, self.config().delay) }
    }
}

impl fmt::Debug for EmulatedDevice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EmulatedDevice")
            .field("id", &self.id)
            .field("config", &self.config())
            .finish()
    }
}

// SAFETY: memory is mapped and registered per allocation (`memory`), copies
// and events are ordered by the emulated streams, and every wait returns
// only once the work it waits for has run (`stream`, `event`).
unsafe impl Device for EmulatedDevice {
    fn device_type(&self) -> DeviceType {
        DeviceType::EXT_DEV
    }

    fn device_id(&self) -> i64 {
        self.id
    }

    fn is_host_accessible(&self) -> bool {
        false
    }

    /// Host memory (anything that is not emulated device memory) is
    /// host-accessible: that is where the variadic-sizes buffer of view arrays
    /// lives when Arrow C++ or this crate exports them.
    fn is_host_accessible_at(&self, ptr: *const u8, len: usize) -> bool {
        len == 0
            || memory::lock()
                .host_range(self.id, ptr as usize, len, "is_host_accessible_at")
                .is_ok()
    }

    /// Looks the range up in the registry of live allocations, as every
    /// copy does: it must lie inside one allocation of this device.
    fn check_device_range(&self, ptr: *const u8, len: usize) -> Result<()> {
        if len == 0 {
            return Ok(());
        }
        memory::lock()
            .device_range(self.id, ptr as usize, len, "check_device_range")
            .map(|_| ())
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    fn allocate(&self, len: usize) -> Result<DeviceBuffer> {
        memory::allocate(self.id, len, self.strict.load(Ordering::Relaxed))
    }

    fn create_stream(&self) -> Result<Stream> {
        Ok(Stream::new(Box::new(EmulatedStream::new(
            self.id, &self.pool,
        ))))
    }

    fn create_event(&self) -> Result<Event> {
        let event = EmulatedEvent::new();
        let sync_event = event.sync_event();
        // SAFETY: points into the boxed event, which the handle keeps.
        Ok(unsafe { Event::new(Box::new(event), sync_event) })
    }

    fn record_event(&self, event: &Event, stream: &Stream) -> Result<()> {
        let stream = self.stream(stream, "record_event")?;
        let event = event.handle::<EmulatedEvent>().ok_or_else(|| {
            self.error("record_event: the event was not created by an emulated device")
        })?;
        let state = Arc::clone(event.state());
        let generation = state.record();
        stream.enqueue_record(state, generation)
    }

    fn synchronize_stream(&self, stream: &Stream) -> Result<()> {
        self.stream(stream, "synchronize_stream")?.synchronize()
    }

    fn release_after(
        &self,
        stream: &Stream,
        owner: Box<dyn std::any::Any + Send + Sync>,
    ) -> Result<Option<Box<dyn std::any::Any + Send + Sync>>> {
        self.stream(stream, "release_after")?
            .enqueue_release(owner)?;
        Ok(None)
    }

    unsafe fn stream_wait_sync_event(
        &self,
        stream: &Stream,
        sync_event: *mut c_void,
    ) -> Result<()> {
        let stream = self.stream(stream, "stream_wait_sync_event")?;
        if sync_event.is_null() {
            return Ok(());
        }
        let state = self.event_state(sync_event, "stream_wait_sync_event")?;
        match state.latest() {
            // Never recorded: complete, nothing to wait for.
            0 => Ok(()),
            generation => stream.enqueue_wait(state, generation),
        }
    }

    unsafe fn synchronize_sync_event(&self, sync_event: *mut c_void) -> Result<()> {
        if sync_event.is_null() {
            return Ok(());
        }
        let state = self.event_state(sync_event, "synchronize_sync_event")?;
        // On a worker (a queued release dropping an array's owner), the
        // pool may start a stand-in meanwhile: see `pool::blocking`.
        pool::blocking(|| state.wait(state.latest()));
        Ok(())
    }

    unsafe fn copy_from_host(
        &self,
        src: *const u8,
        dst: *mut u8,
        len: usize,
        stream: &Stream,
    ) -> Result<()> {
        if len == 0 {
            return Ok(());
        }
        let what = "copy_from_host";
        let src_end = |m: &memory::Memory| {
            m.host_range(self.id, src as usize, len, &format!("{what}: source"))
                .map(|()| Endpoint::Host(src as usize))
        };
        let dst_end = |m: &memory::Memory| {
            m.device_range(self.id, dst as usize, len, &format!("{what}: destination"))
                .map(Endpoint::Device)
        };
        // SAFETY: the caller guarantees `src` is readable for `len` bytes until
        // the copy has run.
        unsafe { self.enqueue(stream, what, src_end, dst_end, len) }
    }

    unsafe fn copy_to_host(
        &self,
        src: *const u8,
        dst: *mut u8,
        len: usize,
        stream: &Stream,
    ) -> Result<()> {
        if len == 0 {
            return Ok(());
        }
        let what = "copy_to_host";
        let src_end = |m: &memory::Memory| {
            m.device_range(self.id, src as usize, len, &format!("{what}: source"))
                .map(Endpoint::Device)
        };
        let dst_end = |m: &memory::Memory| {
            m.host_range(self.id, dst as usize, len, &format!("{what}: destination"))
                .map(|()| Endpoint::Host(dst as usize))
        };
        // SAFETY: the caller guarantees `dst` is writable for `len` bytes until
        // the copy has run.
        unsafe { self.enqueue(stream, what, src_end, dst_end, len) }
    }

    unsafe fn copy_device_to_device(
        &self,
        src_device: &dyn Device,
        src: *const u8,
        dst: *mut u8,
        len: usize,
        stream: &Stream,
    ) -> Result<()> {
        if len == 0 {
            return Ok(());
        }
        let Some(src_device) = src_device.as_any().downcast_ref::<EmulatedDevice>() else {
            return Err(Error::NotSupported(format!(
                "emulated device {} cannot read {} (id {}) memory directly; stage the copy through the host",
                self.id,
                src_device.device_type(),
                src_device.device_id()
            )));
        };
        let what = "copy_device_to_device";
        let src_end = |m: &memory::Memory| {
            m.device_range(src_device.id, src as usize, len, &format!("{what}: source"))
                .map(Endpoint::Device)
        };
        let dst_end = |m: &memory::Memory| {
            m.device_range(self.id, dst as usize, len, &format!("{what}: destination"))
                .map(Endpoint::Device)
        };
        // SAFETY: both ends are device memory, validated when queued and
        // re-resolved under the registry lock when the copy runs.
        unsafe { self.enqueue(stream, what, src_end, dst_end, len) }
    }
}

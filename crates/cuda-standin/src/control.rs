//! What tests set and read: the settings (environment, read at `cuInit`),
//! injected faults, call counts, violations and the live-object counters.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use crate::result::{self, CUresult};

/// The stand-in's settings (see the README's table).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    pub devices: i32,
    pub delay: Duration,
    /// How long work nobody waits on stays queued (see `stream`).
    pub lazy: Duration,
    pub memory_per_device: u64,
    pub faults: Vec<(String, u32, CUresult)>,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            devices: 2,
            delay: Duration::from_micros(200),
            lazy: Duration::from_millis(20),
            memory_per_device: 4096 << 20,
            faults: Vec::new(),
        }
    }
}

impl Settings {
    /// Reads the settings from `get` (the environment, in `cuInit`).
    pub fn parse(get: impl Fn(&str) -> Option<String>) -> Result<Settings, String> {
        let mut settings = Settings::default();
        let number = |name: &str, max: u64| -> Result<Option<u64>, String> {
            match get(name) {
                None => Ok(None),
                Some(text) => match text.trim().parse::<u64>() {
                    Ok(n) if n <= max => Ok(Some(n)),
                    _ => Err(format!(
                        "{name}={text:?}: expected an integer from 0 to {max}"
                    )),
                },
            }
        };
        if let Some(n) = number("CUDA_STANDIN_DEVICES", 16)? {
            settings.devices = n as i32;
        }
        if let Some(n) = number("CUDA_STANDIN_DELAY_US", 10_000_000)? {
            settings.delay = Duration::from_micros(n);
        }
        if let Some(n) = number("CUDA_STANDIN_LAZY_US", 10_000_000)? {
            settings.lazy = Duration::from_micros(n);
        }
        if let Some(n) = number("CUDA_STANDIN_MEMORY_MIB", 1 << 20)? {
            settings.memory_per_device = n << 20;
        }
        if let Some(text) = get("CUDA_STANDIN_FAULTS") {
            for item in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
                settings.faults.push(
                    parse_fault(item)
                        .map_err(|e| format!("CUDA_STANDIN_FAULTS item {item:?}: {e}"))?,
                );
            }
        }
        Ok(settings)
    }
}

/// `entry:nth:CODE`.
fn parse_fault(item: &str) -> Result<(String, u32, CUresult), String> {
    let parts: Vec<&str> = item.split(':').collect();
    let [entry, nth, code] = parts[..] else {
        return Err("expected entry:nth:CODE".into());
    };
    if !crate::api::is_entry_point(entry) {
        return Err(format!("{entry} is not an entry point of the stand-in"));
    }
    let nth = nth
        .parse::<u32>()
        .ok()
        .filter(|n| *n >= 1)
        .ok_or_else(|| format!("nth {nth:?}: expected an integer from 1"))?;
    let code = result::parse(code).ok_or_else(|| format!("{code:?} is not a CUresult name"))?;
    Ok((entry.to_string(), nth, code))
}

/// Calls so far and faults still to trigger, by entry point.
#[derive(Default)]
struct Calls {
    counts: HashMap<&'static str, u64>,
    /// entry → (absolute call number, code).
    faults: HashMap<String, Vec<(u64, CUresult)>>,
}

fn calls() -> &'static Mutex<Calls> {
    static CALLS: OnceLock<Mutex<Calls>> = OnceLock::new();
    CALLS.get_or_init(Default::default)
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Every critical section leaves the data consistent: a panic in one (a
    // stand-in bug) must not disable the rest.
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

/// Counts a call of `entry`; the injected code if this call is to fail.
/// `CUDA_STANDIN_FAULTS` is read before the first call is counted, so that
/// `cuInit:1:...` fails the first `cuInit` (a malformed value fails
/// `cuInit`, which parses the settings again).
pub fn count_call(entry: &'static str) -> Option<CUresult> {
    static FROM_ENV: std::sync::Once = std::sync::Once::new();
    FROM_ENV.call_once(|| {
        let items = std::env::var("CUDA_STANDIN_FAULTS").unwrap_or_default();
        for (entry, nth, code) in items.split(',').filter_map(|i| parse_fault(i.trim()).ok()) {
            inject(&entry, nth, code);
        }
    });
    let mut calls = lock(calls());
    let count = calls.counts.entry(entry).or_insert(0);
    *count += 1;
    let now = *count;
    let faults = calls.faults.get_mut(entry)?;
    let at = faults.iter().position(|(n, _)| *n == now)?;
    Some(faults.remove(at).1)
}

/// Makes the `nth` call of `entry` from now on fail with `code`.
pub fn inject(entry: &str, nth: u32, code: CUresult) {
    let mut calls = lock(calls());
    let done = calls.counts.get(entry).copied().unwrap_or(0);
    calls
        .faults
        .entry(entry.to_string())
        .or_default()
        .push((done + u64::from(nth), code));
}

pub fn clear_faults() {
    lock(calls()).faults.clear();
}

pub fn calls_of(entry: &str) -> u64 {
    lock(calls()).counts.get(entry).copied().unwrap_or(0)
}

/// Live objects, for `cuStandinCounts`.
#[derive(Default)]
pub struct Counters {
    pub allocations: AtomicU64,
    pub allocated_bytes: AtomicU64,
    pub streams: AtomicU64,
    pub events: AtomicU64,
    pub modules: AtomicU64,
    pub retained_contexts: AtomicU64,
    pub pending_operations: AtomicU64,
    pub violations: AtomicU64,
    /// Mappings of other processes' memory (`cuIpcOpenMemHandle`), and
    /// events opened from other processes (`cuIpcOpenEventHandle`).
    pub ipc_mappings: AtomicU64,
    pub ipc_events: AtomicU64,
}

pub fn counters() -> &'static Counters {
    static COUNTERS: OnceLock<Counters> = OnceLock::new();
    COUNTERS.get_or_init(Default::default)
}

/// `cuStandinCounts`' struct.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct CuStandinCounts {
    pub allocations: u64,
    pub allocated_bytes: u64,
    pub streams: u64,
    pub events: u64,
    pub modules: u64,
    pub retained_contexts: u64,
    pub pending_operations: u64,
    pub violations: u64,
}

pub fn snapshot() -> CuStandinCounts {
    let c = counters();
    let get = |a: &AtomicU64| a.load(Ordering::SeqCst);
    CuStandinCounts {
        allocations: get(&c.allocations),
        allocated_bytes: get(&c.allocated_bytes),
        streams: get(&c.streams),
        events: get(&c.events),
        modules: get(&c.modules),
        retained_contexts: get(&c.retained_contexts),
        pending_operations: get(&c.pending_operations),
        violations: get(&c.violations),
    }
}

/// `cuStandinIpcCounts`' struct: the interprocess objects open in this
/// process (a struct of its own, so `CuStandinCounts` keeps its layout).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct CuStandinIpcCounts {
    pub memory_mappings: u64,
    pub events: u64,
}

pub fn snapshot_ipc() -> CuStandinIpcCounts {
    let c = counters();
    CuStandinIpcCounts {
        memory_mappings: c.ipc_mappings.load(Ordering::SeqCst),
        events: c.ipc_events.load(Ordering::SeqCst),
    }
}

fn last_violation() -> &'static Mutex<Option<String>> {
    static LAST: Mutex<Option<String>> = Mutex::new(None);
    &LAST
}

/// A use of the driver that its documentation forbids and a real GPU may
/// not report: printed, counted and kept for `cuStandinLastViolation`.
/// `fatal` ones (memory freed under queued work) abort the process, since
/// the real GPU would go on to read or write freed memory.
pub fn violation(message: String, fatal: bool) {
    counters().violations.fetch_add(1, Ordering::SeqCst);
    eprintln!("cuda-standin: VIOLATION: {message}");
    *lock(last_violation()) = Some(message);
    if fatal {
        eprintln!("cuda-standin: aborting: the real GPU would touch freed memory here");
        std::process::abort();
    }
}

pub fn last_violation_message() -> Option<String> {
    lock(last_violation()).clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |name| {
            pairs
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn settings_default_to_two_devices_and_a_short_delay() {
        let settings = Settings::parse(env(&[])).unwrap();
        assert_eq!(settings, Settings::default());
        assert_eq!(settings.devices, 2);
    }

    #[test]
    fn settings_are_read_and_checked() {
        let settings = Settings::parse(env(&[
            ("CUDA_STANDIN_DEVICES", "3"),
            ("CUDA_STANDIN_DELAY_US", "0"),
            ("CUDA_STANDIN_MEMORY_MIB", "16"),
            (
                "CUDA_STANDIN_FAULTS",
                "cuMemAlloc_v2:2:CUDA_ERROR_OUT_OF_MEMORY, cuEventRecord:1:719",
            ),
        ]))
        .unwrap();
        assert_eq!(settings.devices, 3);
        assert_eq!(settings.delay, Duration::ZERO);
        assert_eq!(settings.memory_per_device, 16 << 20);
        assert_eq!(
            settings.faults,
            [
                ("cuMemAlloc_v2".to_string(), 2, 2),
                ("cuEventRecord".to_string(), 1, 719)
            ]
        );
        for (name, value, expected) in [
            ("CUDA_STANDIN_DEVICES", "17", "from 0 to 16"),
            ("CUDA_STANDIN_DELAY_US", "-1", "CUDA_STANDIN_DELAY_US"),
            ("CUDA_STANDIN_FAULTS", "cuNope:1:2", "not an entry point"),
            ("CUDA_STANDIN_FAULTS", "cuInit:0:2", "from 1"),
            (
                "CUDA_STANDIN_FAULTS",
                "cuInit:1:CUDA_ERROR_X",
                "not a CUresult",
            ),
            ("CUDA_STANDIN_FAULTS", "cuInit", "entry:nth:CODE"),
        ] {
            let err = Settings::parse(env(&[(name, value)])).unwrap_err();
            assert!(err.contains(expected), "{name}={value}: {err}");
        }
    }
}

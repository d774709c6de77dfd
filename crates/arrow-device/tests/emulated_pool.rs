//! The emulated device under many live arrays: every array keeps the stream
//! its copy ran on, and a device's streams share a bounded pool of worker
//! threads, so tens of thousands of arrays cost no more threads than one.
//! Also: a delay over the bound in `ARROW_DEVICE_EMULATED` is rejected with a
//! message on stderr, checked in a child process (the variable is read once
//! per process).

use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use arrow_array::{Array, Int32Array};
use arrow_device::device::emulated::{EmulatedConfig, EmulatedDevice, MAX_STREAM_WORKERS};
use arrow_device::device::{self, DeviceRef};
use arrow_device::{export_array_to, DeviceArray, ValidationLevel};

/// An id no other test in this binary uses: worker threads are counted by
/// the name that carries it.
const ID: i64 = 811;

/// Threads of this process named after emulated device `id`'s workers.
fn workers_of(id: i64) -> usize {
    let name = format!("arrow-emu-{id}");
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("comm")).ok())
        .filter(|comm| comm.trim_end() == name)
        .count()
}

/// The `Threads:` line of /proc/self/status.
fn process_threads() -> usize {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|line| line.strip_prefix("Threads:"))
        .and_then(|n| n.trim().parse().ok())
        .expect("a Threads: line in /proc/self/status")
}

#[test]
fn twenty_thousand_live_emulated_arrays_share_a_bounded_pool_and_copy_back() {
    // Strict (each allocation two mappings: 40,000 of the kernel's default
    // 65,530) and without delay, whatever ARROW_DEVICE_EMULATED says: the
    // point is the count, not the timing.
    let emulated = EmulatedDevice::new(ID, EmulatedConfig::default());
    let device: DeviceRef = emulated.clone();
    device::register(device.clone());
    const ARRAYS: i32 = 20_000;
    let arrays: Vec<DeviceArray> = (0..ARRAYS)
        .map(|i| {
            let values = Int32Array::from(vec![i, -i, i / 7]);
            let (array, schema) = export_array_to(&values, &device)
                .unwrap_or_else(|e| panic!("array {i}: export failed: {e}"));
            // SAFETY: the structs come from this crate's exporter.
            unsafe { DeviceArray::try_new(array, schema, ValidationLevel::Default) }
                .unwrap_or_else(|e| panic!("array {i}: import failed: {e}"))
        })
        .collect();
    // Each array keeps its copy's stream; before streams shared a pool,
    // each kept a thread too, and about 16,300 of them exhausted the process.
    let workers = workers_of(ID);
    assert!(
        workers <= MAX_STREAM_WORKERS,
        "{workers} worker threads for {ARRAYS} live arrays"
    );
    let threads = process_threads();
    assert!(
        threads < 64,
        "{threads} threads in the process with {ARRAYS} live arrays"
    );
    // Every array comes back, each on a stream of its own, while all the
    // others are still alive.
    for (i, array) in (0..ARRAYS).zip(&arrays) {
        let back = array
            .to_host()
            .unwrap_or_else(|e| panic!("array {i}: to_host failed: {e}"));
        let back = back.as_any().downcast_ref::<Int32Array>().unwrap();
        assert_eq!(back.values(), &[i, -i, i / 7], "array {i}");
        if i % 2_000 == 0 {
            let workers = workers_of(ID);
            assert!(
                workers <= MAX_STREAM_WORKERS,
                "{workers} workers at array {i}"
            );
        }
    }
    assert!(workers_of(ID) <= MAX_STREAM_WORKERS);
    drop(arrays);
    // Nothing of the arrays holds the device any more: only this test's two
    // handles and the registry do.
    assert_eq!(Arc::strong_count(&emulated), 3);
}

/// Run by the test below in a child process with the variable set; does
/// nothing in a plain run.
#[test]
fn child_uses_the_default_config_when_the_delay_is_rejected() {
    if std::env::var_os("ARROW_DEVICE_EMULATED_CHILD").is_none() {
        return;
    }
    let device = EmulatedDevice::global(0).unwrap();
    assert_eq!(device.config(), EmulatedConfig::default());
    assert_eq!(EmulatedDevice::global_config(), EmulatedConfig::default());
    println!("child: default configuration in use");
}

#[test]
fn a_delay_over_the_bound_in_the_variable_is_rejected_on_stderr() {
    let output = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "child_uses_the_default_config_when_the_delay_is_rejected",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("ARROW_DEVICE_EMULATED_CHILD", "1")
        .env(EmulatedConfig::ENV_VAR, "strict=1,delay_ms=86400000")
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr),
    );
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("child: default configuration in use"),
        "{stdout}"
    );
    let expected = "arrow-device: ARROW_DEVICE_EMULATED: delay_ms=86400000 is above the \
                    bound of 10000 ms (10 seconds); the emulated devices use the default \
                    configuration\n";
    assert_eq!(stderr.matches(expected).count(), 1, "stderr:\n{stderr}");
    assert_eq!(EmulatedConfig::MAX_DELAY, Duration::from_secs(10));
}

//! Sharing arrays and streams between processes on one machine, zero-copy
//! where the device allows it, with lifetimes no crash can break (the
//! design is docs/design/sharing.md).
//!
//! [`share`] gives a handle (bytes) that [`open_shared`] opens in another
//! process as a [`DeviceArray`](crate::DeviceArray) over the same memory. Each open is a lease
//! (a Unix socket connection to the exporting process) that keeps the
//! exporter's memory alive until the opener drops the array or ends,
//! however it ends. [`share_stream`] serves a device stream to one other
//! process, batch by batch, with back-pressure.
//!
//! Linux only: memory files, `SCM_RIGHTS` and abstract sockets are Linux's.
//!
//! ```
//! # #[cfg(target_os = "linux")] {
//! use arrow_array::Int32Array;
//! use arrow_device::share::{open_shared, share};
//! use arrow_device::{DeviceArray, ValidationLevel};
//!
//! let array = DeviceArray::from_array(&Int32Array::from(vec![1, 2, 3]));
//! let shared = share(&array).unwrap();
//! // The handle's bytes travel to another process (a pipe, a pickle)...
//! let handle: Vec<u8> = shared.handle().to_vec();
//! // ... which opens the same memory, no copy.
//! let opened = open_shared(&handle, ValidationLevel::Full).unwrap();
//! assert_eq!(opened.to_host().unwrap().as_ref(), &Int32Array::from(vec![1, 2, 3]));
//! # }
//! ```

#[cfg(target_os = "linux")]
mod backend;
pub mod codec;
#[cfg(target_os = "linux")]
mod cpu;
#[cfg(all(feature = "cuda", target_os = "linux"))]
mod cuda;
#[cfg(target_os = "linux")]
mod emulated;
#[cfg(target_os = "linux")]
mod handle;
pub mod layout;
#[cfg(target_os = "linux")]
pub mod lease;
#[cfg(target_os = "linux")]
pub mod memfd;
#[cfg(target_os = "linux")]
mod stream;

#[cfg(target_os = "linux")]
pub use handle::{open_shared, share, SharedArray};
#[cfg(target_os = "linux")]
pub use stream::{open_shared_stream, share_stream, SharedStream};

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use std::sync::Arc;

    use arrow_array::{ArrayRef, Int64Array, RecordBatch, StringArray};

    use super::lease::Lender;
    use super::*;
    use crate::{DeviceArray, ValidationLevel};

    fn batch() -> RecordBatch {
        RecordBatch::try_from_iter([
            (
                "i",
                Arc::new(Int64Array::from(vec![Some(1), None, Some(3)])) as ArrayRef,
            ),
            (
                "s",
                Arc::new(StringArray::from(vec![Some("a"), None, Some("ccc")])) as ArrayRef,
            ),
        ])
        .unwrap()
    }

    #[test]
    fn a_cpu_array_opens_equal_and_its_lease_ends_with_it() {
        let batch = batch();
        // The methods are the functions.
        let shared = DeviceArray::from_record_batch(&batch).share().unwrap();
        let lender = Lender::get().unwrap();
        let id = shared.offer.id;
        let opened = open_shared(shared.handle(), ValidationLevel::Full).unwrap();
        let again = DeviceArray::open_shared(shared.handle(), ValidationLevel::Full).unwrap();
        assert_eq!(opened.to_record_batch().unwrap(), batch);
        assert_eq!(again.to_record_batch().unwrap(), batch);
        drop(shared);
        assert_eq!(
            opened.to_record_batch().unwrap(),
            batch,
            "a lease outlives the share"
        );
        wait_for_leases(lender, id, 2);
        drop((opened, again));
        wait_for_leases(lender, id, 0);
    }

    const HANDLE_VAR: &str = "ARROW_DEVICE_TEST_SHARE_HANDLE";

    /// This test binary run again as the test named `role` alone, with
    /// `var` set to `value` (the test does nothing without it).
    pub(super) fn role(role: &str, var: &str, value: &str) -> std::process::Command {
        let mut command = std::process::Command::new(std::env::current_exe().unwrap());
        command
            .args(["--exact", role, "--nocapture", "--test-threads=1"])
            .env(var, value)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        command
    }

    /// This test binary run again as an opener: the test named `role`
    /// with the handle in the environment.
    fn opener(role_name: &str, handle: &[u8]) -> std::process::Child {
        role(role_name, HANDLE_VAR, &crate::share::lease::hex(handle))
            .spawn()
            .unwrap()
    }

    /// Waits for `child`, which must succeed and print `says`; `what`
    /// names it in the failure, with its output.
    pub(super) fn assert_succeeded(child: std::process::Child, what: &str, says: &str) {
        let output = child.wait_with_output().unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success() && stdout.contains(says),
            "{what} failed:\n{stdout}\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }

    /// Runs the test `test` alone, in a process of its own, with
    /// `DEVICE_VAR` set to `value`; it must succeed and print `says`.
    fn run_alone(test: &str, value: &str, says: &str) {
        assert_succeeded(role(test, DEVICE_VAR, value).spawn().unwrap(), test, says);
    }

    /// `text` read as hexadecimal bytes.
    pub(super) fn unhex(text: &str) -> Vec<u8> {
        (0..text.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap())
            .collect()
    }

    /// The handle a child printed (`HANDLE <hex>`), read off its stdout.
    pub(super) fn printed_handle(child: &mut std::process::Child) -> Vec<u8> {
        use std::io::{BufRead, BufReader};

        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let text = lines
            .find_map(|line| Some(line.unwrap().split_once("HANDLE ")?.1.to_string()))
            .expect("the child prints its handle");
        unhex(&text)
    }

    fn handle_from_env() -> Option<Vec<u8>> {
        Some(unhex(&std::env::var(HANDLE_VAR).ok()?))
    }

    /// The opener's side (does nothing unless run as an opener).
    #[test]
    fn opener_reads_the_batch() {
        let Some(handle) = handle_from_env() else {
            return;
        };
        let opened = open_shared(&handle, ValidationLevel::Full).unwrap();
        assert_eq!(opened.to_record_batch().unwrap(), batch());
        println!("OPENED {}", opened.len());
    }

    /// The opener's side (does nothing unless run as an opener): opens,
    /// says so, then waits to be killed.
    #[test]
    fn opener_holds_until_killed() {
        let Some(handle) = handle_from_env() else {
            return;
        };
        let opened = open_shared(&handle, ValidationLevel::Full).unwrap();
        println!("HOLDING {}", opened.len());
        std::thread::sleep(std::time::Duration::from_secs(60));
    }

    fn wait_for_leases(lender: &Lender, id: u64, count: usize) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while lender.leases_of(id) != count {
            assert!(
                std::time::Instant::now() < deadline,
                "{} leases, expected {count}",
                lender.leases_of(id)
            );
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }

    #[test]
    fn other_processes_open_it_and_a_killed_opener_ends_its_lease() {
        use std::io::{BufRead, BufReader};

        let shared = share(&DeviceArray::from_record_batch(&batch())).unwrap();
        let lender = Lender::get().unwrap();
        let readers: Vec<_> = (0..2)
            .map(|_| opener("share::tests::opener_reads_the_batch", shared.handle()))
            .collect();
        for reader in readers {
            assert_succeeded(reader, "an opener", "OPENED 3");
        }
        wait_for_leases(lender, shared.offer.id, 0);
        let mut holder = opener("share::tests::opener_holds_until_killed", shared.handle());
        let mut lines = BufReader::new(holder.stdout.take().unwrap()).lines();
        assert!(lines.any(|line| line.unwrap().contains("HOLDING 3")));
        // The lender counts a lease once it has sent the grant, which the
        // holder may have read first.
        wait_for_leases(lender, shared.offer.id, 1);
        holder.kill().unwrap();
        holder.wait().unwrap();
        wait_for_leases(lender, shared.offer.id, 0);
    }

    #[test]
    fn bad_handles_are_clear_errors() {
        let shared = share(&DeviceArray::from_record_batch(&batch())).unwrap();
        let handle = shared.handle().to_vec();
        let mut forged = handle.clone();
        forged[0] = b'X';
        assert!(open_shared(&forged, ValidationLevel::Full)
            .unwrap_err()
            .to_string()
            .contains("not an arrow-device share handle"));
        for end in [0, 5, 20, handle.len() - 1] {
            let err = open_shared(&handle[..end], ValidationLevel::Full)
                .unwrap_err()
                .to_string();
            assert!(
                err.contains("the handle ends") || err.contains("refused"),
                "{end}: {err}"
            );
        }
        drop(shared);
        let err = open_shared(&handle, ValidationLevel::Full)
            .unwrap_err()
            .to_string();
        assert!(err.contains("refused the handle"), "{err}");
    }

    /// An emulated device of its own for a test: strict, `delay` per copy.
    fn emulated(id: i64, strict: bool, delay_ms: u64) -> crate::device::DeviceRef {
        crate::device::emulated::EmulatedDevice::new(
            id,
            crate::device::emulated::EmulatedConfig {
                strict,
                delay: std::time::Duration::from_millis(delay_ms),
            },
        )
    }

    /// The device pointer of the values of column `i` of a struct array.
    fn values_of(array: &DeviceArray, column: usize) -> *const u8 {
        array.children()[column].buffers()[1].ptr
    }

    #[test]
    fn an_emulated_array_is_shared_as_it_is_after_the_producers_work() {
        let batch = batch();
        let device = emulated(41, true, 50);
        // The copy onto the device is still pending (poison) when `share`
        // runs: the opener must see the final values all the same.
        let array = DeviceArray::from_record_batch(&batch)
            .to_device(&device)
            .unwrap();
        let shared = share(&array).unwrap();
        let opened = open_shared(shared.handle(), ValidationLevel::Full).unwrap();
        assert_eq!(opened.device_type(), crate::DeviceType::EXT_DEV);
        assert_eq!(opened.device_id(), 41);
        assert_eq!(opened.to_record_batch().unwrap(), batch);
        // Same memory, another mapping: what the exporter writes after the
        // share, the opener reads.
        assert_ne!(values_of(&opened, 0), values_of(&array, 0));
        let stream = device.create_stream().unwrap();
        let seven = 7i64.to_le_bytes();
        // SAFETY: 8 bytes of the exporter's values buffer (3 int64s), and
        // `seven` lives until the synchronize.
        unsafe {
            device
                .copy_from_host(seven.as_ptr(), values_of(&array, 0).cast_mut(), 8, &stream)
                .unwrap();
        }
        device.synchronize_stream(&stream).unwrap();
        let changed = opened.to_record_batch().unwrap();
        let first = changed
            .column(0)
            .as_any()
            .downcast_ref::<Int64Array>()
            .unwrap()
            .value(0);
        assert_eq!(first, 7);
    }

    #[test]
    fn a_non_strict_emulated_array_is_copied_into_strict_memory_to_be_shared() {
        let batch = batch();
        let device = emulated(42, false, 0);
        let array = DeviceArray::from_record_batch(&batch)
            .to_device(&device)
            .unwrap();
        let shared = share(&array).unwrap();
        let opened = open_shared(shared.handle(), ValidationLevel::Full).unwrap();
        assert_eq!(opened.to_record_batch().unwrap(), batch);
    }

    #[test]
    fn managed_memory_and_unknown_devices_are_clear_errors() {
        for (device_type, expected) in [
            (crate::DeviceType::CUDA_MANAGED, "copy the array to the GPU"),
            (crate::DeviceType::METAL, "is not supported"),
        ] {
            let (mut array, schema) = DeviceArray::from_record_batch(&batch()).export().unwrap();
            array.device_type = device_type;
            array.device_id = 0;
            // SAFETY: a CPU tree relabelled, never read: sharing refuses it
            // before it touches a buffer.
            let relabelled =
                unsafe { DeviceArray::try_new(array, schema, ValidationLevel::Minimal) }.unwrap();
            let err = share(&relabelled).unwrap_err().to_string();
            assert!(err.contains(expected), "{device_type}: {err}");
        }
    }

    const DEVICE_VAR: &str = "ARROW_DEVICE_TEST_SHARE_DEVICE";

    /// The exporter's side (does nothing unless run as one): shares the
    /// batch on the device the environment names, prints the handle, and
    /// waits to be killed.
    #[test]
    fn exporter_shares_until_killed() {
        let Ok(on) = std::env::var(DEVICE_VAR) else {
            return;
        };
        let array = DeviceArray::from_record_batch(&batch());
        let array = match on.as_str() {
            "cpu" => array,
            _ => array.to_device(&emulated(43, true, 5)).unwrap(),
        };
        let shared = share(&array).unwrap();
        println!("HANDLE {}", crate::share::lease::hex(shared.handle()));
        std::thread::sleep(std::time::Duration::from_secs(60));
    }

    #[test]
    fn an_opened_array_outlives_its_exporter_killed_on_the_cpu_and_the_emulated_device() {
        for on in ["cpu", "emulated"] {
            let mut exporter = role("share::tests::exporter_shares_until_killed", DEVICE_VAR, on)
                .spawn()
                .unwrap();
            let handle = printed_handle(&mut exporter);
            let opened = open_shared(&handle, ValidationLevel::Full).unwrap();
            exporter.kill().unwrap();
            exporter.wait().unwrap();
            // The mapping keeps the pages: the array stays whole.
            assert_eq!(opened.to_record_batch().unwrap(), batch(), "{on}");
            let err = open_shared(&handle, ValidationLevel::Full)
                .unwrap_err()
                .to_string();
            assert!(err.contains("does not answer"), "{on}: {err}");
            drop(opened);
        }
    }

    /// Open descriptors of this process, and its mappings of shared and
    /// emulated device memory files (thread stacks come and go with the
    /// device's idle workers: they are not counted).
    fn descriptors_and_mappings() -> (usize, usize) {
        let fds = std::fs::read_dir("/proc/self/fd").unwrap().count();
        let maps = std::fs::read_to_string("/proc/self/maps")
            .unwrap()
            .lines()
            .filter(|line| line.contains("/memfd:arrow-device"))
            .count();
        (fds, maps)
    }

    /// Shares and opens on the CPU and the emulated device many times,
    /// then checks that every descriptor and mapping is gone (does nothing
    /// unless run alone, in a process of its own: counts are exact there).
    #[test]
    fn isolated_nothing_leaks() {
        if std::env::var(DEVICE_VAR).as_deref() != Ok("count") {
            return;
        }
        let device = emulated(44, true, 1);
        let lender = Lender::get().unwrap();
        // A first round starts the lender, the device's workers and the
        // allocator's pools: what stays for the process's lifetime.
        let round = || {
            let cpu = DeviceArray::from_record_batch(&batch());
            let on_device = cpu.to_device(&device).unwrap();
            for array in [cpu, on_device] {
                let shared = share(&array).unwrap();
                let opened: Vec<_> = (0..3)
                    .map(|_| open_shared(shared.handle(), ValidationLevel::Full).unwrap())
                    .collect();
                for opened in &opened {
                    assert_eq!(opened.to_record_batch().unwrap(), batch());
                }
                let id = shared.offer.id;
                drop((shared, opened, array));
                wait_for_leases(lender, id, 0);
            }
        };
        round();
        std::thread::sleep(std::time::Duration::from_millis(200));
        let before = descriptors_and_mappings();
        for _ in 0..20 {
            round();
        }
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while descriptors_and_mappings() != before && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        assert_eq!(descriptors_and_mappings(), before, "(fds, mappings)");
        println!("NO LEAKS");
    }

    #[test]
    fn no_descriptor_or_mapping_leaks() {
        run_alone("share::tests::isolated_nothing_leaks", "count", "NO LEAKS");
    }

    /// Shares on the CPU and the emulated device, forks, and in the child
    /// opens the parent's shares, then shares and opens its own (does
    /// nothing unless run alone, in a process of its own: a fork while
    /// other tests hold locks could hang the child).
    #[test]
    fn isolated_fork() {
        if std::env::var(DEVICE_VAR).as_deref() != Ok("fork") {
            return;
        }
        let cpu = share(&DeviceArray::from_record_batch(&batch())).unwrap();
        let device = emulated(46, true, 1);
        let on_device = DeviceArray::from_record_batch(&batch())
            .to_device(&device)
            .unwrap();
        let emulated_share = share(&on_device).unwrap();
        // The device's workers run before the fork, and are gone after it.
        assert_eq!(on_device.to_record_batch().unwrap(), batch());
        // SAFETY: the child runs this crate's code only and leaves with
        // _exit; this process has no thread but the lender's and the
        // device's idle workers, which hold no lock between jobs.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork");
        if pid == 0 {
            let child = std::panic::catch_unwind(|| {
                for handle in [cpu.handle(), emulated_share.handle()] {
                    let opened = open_shared(handle, ValidationLevel::Full).unwrap();
                    assert_eq!(opened.to_record_batch().unwrap(), batch());
                }
                // The device's inherited copy works on workers of its own.
                assert_eq!(on_device.to_record_batch().unwrap(), batch());
                let own = share(&DeviceArray::from_record_batch(&batch())).unwrap();
                let opened = open_shared(own.handle(), ValidationLevel::Full).unwrap();
                assert_eq!(opened.to_record_batch().unwrap(), batch());
            });
            // SAFETY: leaves the forked child without running the parent's
            // destructors or the test harness.
            unsafe { libc::_exit(i32::from(child.is_err())) };
        }
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        let mut status = 0;
        loop {
            // SAFETY: our child, a valid out-parameter.
            let done = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
            if done == pid {
                break;
            }
            if std::time::Instant::now() > deadline {
                // SAFETY: our child.
                unsafe { libc::kill(pid, libc::SIGKILL) };
                panic!("the forked child hangs");
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "the forked child failed: status {status:#x}"
        );
        println!("FORKED");
    }

    #[test]
    fn a_forked_child_opens_its_parents_shares_and_shares_its_own() {
        run_alone("share::tests::isolated_fork", "fork", "FORKED");
    }

    /// Lowers the descriptor limit to 64 (16 kept memory files), then
    /// shares emulated arrays made beyond that budget (does nothing unless
    /// run alone, in a process of its own: the budget is per process).
    #[test]
    fn isolated_kept_files_budget() {
        if std::env::var(DEVICE_VAR).as_deref() != Ok("budget") {
            return;
        }
        let limit = libc::rlimit {
            rlim_cur: 64,
            rlim_max: 64,
        };
        // SAFETY: a valid resource and limit.
        assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) }, 0);
        let device = emulated(47, true, 0);
        let holders: Vec<_> = (0..16).map(|_| device.allocate(8).unwrap()).collect();
        // Made past the budget: its allocations keep no memory file.
        let array = DeviceArray::from_record_batch(&batch())
            .to_device(&device)
            .unwrap();
        let err = share(&array).unwrap_err().to_string();
        assert!(err.contains("keeps no memory file to share"), "{err}");
        drop(holders);
        // Room again: a share copies it once into allocations that do.
        let shared = share(&array).unwrap();
        let opened = open_shared(shared.handle(), ValidationLevel::Full).unwrap();
        assert_eq!(opened.to_record_batch().unwrap(), batch());
        println!("BUDGET KEPT");
    }

    #[test]
    fn emulated_arrays_beyond_the_kept_files_budget_are_shared_through_one_copy() {
        run_alone(
            "share::tests::isolated_kept_files_budget",
            "budget",
            "BUDGET KEPT",
        );
    }
}

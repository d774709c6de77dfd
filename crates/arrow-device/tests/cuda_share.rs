//! Sharing CUDA arrays between processes (`arrow_device::share`, feature
//! `cuda`): one IPC memory handle per allocation and an interprocess
//! event. Openers are this test binary run again with the handle in the
//! environment (the `opener_*` tests, which do nothing otherwise).
//!
//! Every test returns early, printing why, when no GPU is usable; with
//! `ARROW_DEVICE_REQUIRE_GPU=1` that is a failure. On the CUDA driver
//! stand-in (`scripts/test.sh`) the guard also checks that nothing is left
//! on the driver, and the openers that no IPC mapping or event is left
//! open; on a GPU (`scripts/gpu-check.sh`) the same tests run unchanged.
#![cfg(all(feature = "cuda", target_os = "linux"))]

mod common;

use std::io::{BufRead, BufReader};
use std::process::Child;
use std::sync::Arc;

use arrow_array::builder::{Int32Builder, ListBuilder, StringBuilder, StructBuilder};
use arrow_array::types::Int32Type;
use arrow_array::{ArrayRef, DictionaryArray, Int64Array, RecordBatch, StringArray};
use arrow_device::abi::DeviceType;
use arrow_device::share::{open_shared, share};
use arrow_device::{DeviceArray, ValidationLevel};
use arrow_schema::{DataType, Field};
use cudarc::driver::sys;

use common::gpu::{cuda_device, gpu, standin};
use common::{assert_same, assert_succeeded, hex, printed_handle, role, unhex};

const HANDLE_VAR: &str = "ARROW_DEVICE_TEST_CUDA_SHARE_HANDLE";

/// Ints with nulls, strings, a list of structs and a dictionary.
fn batch() -> RecordBatch {
    let ints = Int64Array::from(vec![Some(1), None, Some(3), Some(-4), None]);
    let strings = StringArray::from(vec![Some("a"), None, Some("ccc"), Some(""), Some("ee")]);
    let fields = vec![
        Field::new("x", DataType::Int32, true),
        Field::new("s", DataType::Utf8, true),
    ];
    let mut lists = ListBuilder::new(StructBuilder::new(
        fields,
        vec![
            Box::new(Int32Builder::new()),
            Box::new(StringBuilder::new()),
        ],
    ));
    for row in 0..5 {
        for item in 0..row % 3 {
            let entries = lists.values();
            entries
                .field_builder::<Int32Builder>(0)
                .unwrap()
                .append_value(row * 10 + item);
            entries
                .field_builder::<StringBuilder>(1)
                .unwrap()
                .append_option((item != 1).then(|| format!("r{row}i{item}")));
            entries.append(true);
        }
        lists.append(row != 3);
    }
    let dictionary: DictionaryArray<Int32Type> = vec!["red", "green", "red", "blue", "green"]
        .into_iter()
        .collect();
    RecordBatch::try_from_iter([
        ("ints", Arc::new(ints) as ArrayRef),
        ("strings", Arc::new(strings) as ArrayRef),
        ("lists", Arc::new(lists.finish()) as ArrayRef),
        ("dictionary", Arc::new(dictionary) as ArrayRef),
    ])
    .unwrap()
}

/// The batch as a struct array, to compare with what `to_host` returns.
fn expected() -> ArrayRef {
    Arc::new(arrow_array::StructArray::from(batch()))
}

/// The batch on GPU 0, its copies still queued.
fn on_gpu() -> DeviceArray {
    DeviceArray::from_record_batch(&batch())
        .to_device(&cuda_device(DeviceType::CUDA))
        .unwrap()
}

fn handle_from_env() -> Option<Vec<u8>> {
    Some(unhex(&std::env::var(HANDLE_VAR).ok()?))
}

/// This test binary run again as an opener: the test named `role` with
/// the handle in the environment.
fn opener(role_name: &str, handle: &[u8]) -> Child {
    role(role_name, HANDLE_VAR, &hex(handle)).spawn().unwrap()
}

/// The stand-in's interprocess objects open in this process
/// (`cuStandinIpcCounts`: memory mappings, events); `None` on a real
/// driver.
fn standin_ipc_counts() -> Option<[u64; 2]> {
    if !standin::loaded() {
        return None;
    }
    let mut counts = [0u64; 2];
    // SAFETY: the loaded driver library is the stand-in (checked), whose
    // function fills two u64s.
    unsafe {
        let f = sys::culib()
            .get::<unsafe extern "C" fn(*mut u64) -> sys::CUresult>(b"cuStandinIpcCounts\0")
            .ok()?;
        f(counts.as_mut_ptr());
    }
    Some(counts)
}

/// The UUID of GPU 0 (`cuDeviceGetUuid_v2`); the driver is initialised.
fn uuid_of_gpu_0() -> [u8; 16] {
    let mut uuid = sys::CUuuid { bytes: [0; 16] };
    // SAFETY: an out parameter of the documented type; device 0 exists
    // (the caller holds the GPU guard).
    let code = unsafe { sys::cuDeviceGetUuid_v2(&mut uuid, 0) };
    assert_eq!(code, sys::CUresult::CUDA_SUCCESS);
    uuid.bytes.map(|b| b as u8)
}

#[test]
fn a_cuda_array_opens_in_two_other_processes_with_the_producers_final_values() {
    let Some(_gpu) =
        gpu("a_cuda_array_opens_in_two_other_processes_with_the_producers_final_values")
    else {
        return;
    };
    let array = on_gpu();
    let shared = share(&array).unwrap();
    if standin::loaded() {
        assert!(
            standin::counts_now().pending_operations > 0,
            "the producer's copies are still queued when share returns"
        );
    }
    let err = open_shared(shared.handle(), ValidationLevel::Full)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("CUDA_ERROR_INVALID_CONTEXT"),
        "the driver opens IPC handles in other processes only: {err}"
    );
    let openers: Vec<_> = (0..2)
        .map(|_| opener("opener_reads_the_batch", shared.handle()))
        .collect();
    for child in openers {
        assert_succeeded(child, "the opener", "OPENED 5");
    }
    assert_same(
        "the exporter's own copy",
        expected().as_ref(),
        array.to_host().unwrap().as_ref(),
    );
}

const EXPORTER_VAR: &str = "ARROW_DEVICE_TEST_CUDA_SHARE_EXPORTER";

/// On the stand-in: an exporter whose queued work runs only after a second
/// (`CUDA_STANDIN_LAZY_US`), so an opener that did not wait on the
/// interprocess event would read the poison of the copy's destination.
#[test]
fn an_opener_waits_for_the_producers_queued_copy() {
    let Some(_gpu) = gpu("an_opener_waits_for_the_producers_queued_copy") else {
        return;
    };
    if !standin::loaded() {
        println!(
            "an_opener_waits_for_the_producers_queued_copy: the stand-in's lazy work is needed"
        );
        return;
    }
    let exporter = role("exporter_with_slow_work", EXPORTER_VAR, "1")
        .env("CUDA_STANDIN_LAZY_US", "1000000")
        .spawn()
        .unwrap();
    assert_succeeded(exporter, "the exporter", "EXPORTED");
}

/// The exporter's side (does nothing unless run as that exporter).
#[test]
fn exporter_with_slow_work() {
    if std::env::var_os(EXPORTER_VAR).is_none() {
        return;
    }
    let array = on_gpu();
    let shared = share(&array).unwrap();
    let started = std::time::Instant::now();
    assert_succeeded(
        opener("opener_reads_the_batch", shared.handle()),
        "the opener",
        "OPENED 5",
    );
    assert!(
        started.elapsed() >= std::time::Duration::from_millis(500),
        "the opener finished before the producer's copy could run"
    );
    array.synchronize().unwrap();
    println!("EXPORTED");
}

/// The opener's side (does nothing unless run as an opener).
#[test]
fn opener_reads_the_batch() {
    let Some(handle) = handle_from_env() else {
        return;
    };
    let opened = open_shared(&handle, ValidationLevel::Full).unwrap();
    assert_eq!(
        (opened.device_type(), opened.device_id()),
        (DeviceType::CUDA, 0)
    );
    assert!(!opened.sync_event().is_null(), "the interprocess event");
    if let Some(counts) = standin_ipc_counts() {
        assert_eq!(counts[1], 1, "one event opened");
        assert!(counts[0] >= 1, "the allocations mapped");
    }
    let host = opened.to_host().unwrap();
    assert_same("the opened batch", expected().as_ref(), host.as_ref());
    // Device to device from the mapping, too.
    let copy = opened.to_device(&cuda_device(DeviceType::CUDA)).unwrap();
    assert_same(
        "a copy of it",
        expected().as_ref(),
        copy.to_host().unwrap().as_ref(),
    );
    println!("OPENED {}", opened.len());
    drop((opened, copy));
    if let Some(counts) = standin_ipc_counts() {
        assert_eq!(counts, [0, 0], "every mapping closed, the event destroyed");
    }
}

/// The opener's side (does nothing unless run as an opener): opens, says
/// so, then waits to be killed.
#[test]
fn opener_holds_until_killed() {
    let Some(handle) = handle_from_env() else {
        return;
    };
    let opened = open_shared(&handle, ValidationLevel::Default).unwrap();
    println!("HOLDING {}", opened.len());
    std::thread::sleep(std::time::Duration::from_secs(60));
}

#[test]
fn a_lease_keeps_the_memory_until_its_opener_is_killed() {
    let Some(_gpu) = gpu("a_lease_keeps_the_memory_until_its_opener_is_killed") else {
        return;
    };
    let before = standin::counts();
    let array = on_gpu();
    array.synchronize().unwrap();
    let shared = share(&array).unwrap();
    let mut holder = opener("opener_holds_until_killed", shared.handle());
    let mut lines = BufReader::new(holder.stdout.take().unwrap()).lines();
    assert!(lines.any(|line| line.unwrap().contains("HOLDING 5")));
    drop((shared, array));
    if let Some(before) = before {
        std::thread::sleep(std::time::Duration::from_millis(100));
        assert!(
            standin::counts_now().allocations > before.allocations,
            "the holder's lease keeps the exporter's memory"
        );
    }
    holder.kill().unwrap();
    holder.wait().unwrap();
    if let Some(before) = before {
        let now = standin::wait_for_counts(|c| c.allocations <= before.allocations);
        assert!(
            now.allocations <= before.allocations,
            "freed once the killed opener's lease ended: {now:?}"
        );
    }
}

#[test]
fn cuda_host_arrays_arrive_as_cpu_arrays_and_managed_ones_are_a_clear_error() {
    let Some(_gpu) =
        gpu("cuda_host_arrays_arrive_as_cpu_arrays_and_managed_ones_are_a_clear_error")
    else {
        return;
    };
    let pinned = DeviceArray::from_record_batch(&batch())
        .to_device(&cuda_device(DeviceType::CUDA_HOST))
        .unwrap();
    let shared = share(&pinned).unwrap();
    let opened = open_shared(shared.handle(), ValidationLevel::Full).unwrap();
    assert_eq!(opened.device_type(), DeviceType::CPU);
    assert_eq!(opened.to_record_batch().unwrap(), batch());
    drop((opened, shared, pinned));
    let managed = DeviceArray::from_record_batch(&batch())
        .to_device(&cuda_device(DeviceType::CUDA_MANAGED))
        .unwrap();
    let err = share(&managed).unwrap_err().to_string();
    assert!(
        err.contains("managed memory has no IPC handle") && err.contains("to_host"),
        "{err}"
    );
    managed.synchronize().unwrap();
}

/// Replaces the first occurrence of `from` in `bytes`.
fn replaced(bytes: &[u8], from: &[u8], to: &[u8]) -> Vec<u8> {
    let at = bytes
        .windows(from.len())
        .position(|w| w == from)
        .expect("the handle holds the bytes");
    let mut out = bytes.to_vec();
    out[at..at + to.len()].copy_from_slice(to);
    out
}

#[test]
fn forged_cuda_parts_of_a_handle_are_clear_errors() {
    let Some(_gpu) = gpu("forged_cuda_parts_of_a_handle_are_clear_errors") else {
        return;
    };
    let array = on_gpu();
    let shared = share(&array).unwrap();
    let handle = shared.handle();
    let uuid = uuid_of_gpu_0();
    let mut version_and_uuid = vec![1u8];
    version_and_uuid.extend_from_slice(&uuid);
    let mut other = uuid;
    other[15] ^= 0xff;
    let cases = [
        (replaced(handle, &version_and_uuid, &[7]), "version 7"),
        (
            replaced(handle, &uuid, &other),
            "which this process does not see",
        ),
        (
            replaced(
                handle,
                &version_and_uuid,
                &[&[1u8][..], &uuid, &9u32.to_le_bytes()].concat(),
            ),
            "9 memory handles for",
        ),
    ];
    for (forged, expected) in cases {
        let err = open_shared(&forged, ValidationLevel::Full)
            .unwrap_err()
            .to_string();
        assert!(err.contains(expected), "{expected}: {err}");
    }
    for end in [10, handle.len() / 2, handle.len() - 1] {
        assert!(open_shared(&handle[..end], ValidationLevel::Full).is_err());
    }
    array.synchronize().unwrap();
}

const HOLDER_VAR: &str = "ARROW_DEVICE_TEST_CUDA_SHARE_HOLDER";

/// The exporter's side (does nothing unless run as one): shares the batch,
/// prints the handle, then waits to be killed.
#[test]
fn exporter_holds_until_killed() {
    if std::env::var_os(HOLDER_VAR).is_none() {
        return;
    }
    let array = on_gpu();
    let shared = share(&array).unwrap();
    println!("HANDLE {}", hex(shared.handle()));
    std::thread::sleep(std::time::Duration::from_secs(60));
}

#[test]
fn an_exporter_that_dies_makes_every_later_copy_of_its_memory_a_clear_error() {
    let Some(_gpu) =
        gpu("an_exporter_that_dies_makes_every_later_copy_of_its_memory_a_clear_error")
    else {
        return;
    };
    let mut exporter = role("exporter_holds_until_killed", HOLDER_VAR, "1")
        .spawn()
        .unwrap();
    let pid = exporter.id();
    let handle = printed_handle(&mut exporter);
    let opened = open_shared(&handle, ValidationLevel::Full).unwrap();
    assert_same(
        "before the exporter ends",
        expected().as_ref(),
        opened.to_host().unwrap().as_ref(),
    );
    exporter.kill().unwrap();
    exporter.wait().unwrap();
    let err = opened.to_host().unwrap_err().to_string();
    assert!(
        err.contains(&format!("shared by process {pid}")) && err.contains("has ended"),
        "{err}"
    );
    // A copy to another GPU (the same GPU would be no copy at all).
    if let Some(other) = arrow_device::device::lookup(DeviceType::CUDA, 1) {
        let err = opened.to_device(&other).unwrap_err().to_string();
        assert!(err.contains("has ended"), "{err}");
    }
}

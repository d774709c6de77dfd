//! The `cuIpc*` entry points across processes: the test binary runs itself
//! again as the opener (one test, named, with the handles in the
//! environment), as arrow-device's share tests do.

use std::ffi::c_void;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};

use super::device::*;
use super::ipc::*;
use super::memory::*;
use super::stream::*;
use super::tests::{device_alloc, setup, stream};
use crate::control;
use crate::result::*;

const HANDLES: &str = "CUDA_STANDIN_TEST_IPC_HANDLES";

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn handles_from_env() -> Option<Vec<IpcHandle>> {
    let text = std::env::var(HANDLES).ok()?;
    let bytes: Vec<u8> = (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap())
        .collect();
    Some(
        bytes
            .chunks(64)
            .map(|c| IpcHandle {
                reserved: c.try_into().unwrap(),
            })
            .collect(),
    )
}

/// This binary again, running only `test`, with `handles`; stdin and
/// stdout piped.
fn opener(test: &str, handles: &[IpcHandle]) -> Child {
    let bytes: Vec<u8> = handles.iter().flat_map(|h| h.reserved).collect();
    Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            &format!("api::ipc_tests::{test}"),
            "--nocapture",
            "--test-threads=1",
        ])
        .env(HANDLES, hex(&bytes))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap()
}

/// Reads the child's stdout until a line contains `word`.
fn wait_for_line(lines: &mut impl Iterator<Item = std::io::Result<String>>, word: &str) {
    for line in lines.by_ref() {
        if line.unwrap().contains(word) {
            return;
        }
    }
    panic!("the opener ended without saying {word}");
}

fn finish(mut child: Child) {
    let status = child.wait().unwrap();
    assert!(status.success(), "the opener failed: {status}");
}

fn mem_handle(ptr: u64) -> IpcHandle {
    let mut handle = IpcHandle { reserved: [0; 64] };
    // SAFETY: a valid out parameter.
    assert_eq!(unsafe { cuIpcGetMemHandle(&mut handle, ptr) }, CUDA_SUCCESS);
    handle
}

fn read(ptr: u64, len: usize) -> Vec<u8> {
    let mut back = vec![0u8; len];
    // SAFETY: a host buffer of `len` bytes.
    let code = unsafe { cuMemcpyDtoH_v2(back.as_mut_ptr().cast(), ptr, len) };
    assert_eq!(code, CUDA_SUCCESS);
    back
}

fn write(ptr: u64, data: &[u8]) {
    // SAFETY: a host buffer of `data.len()` bytes.
    let code = unsafe { cuMemcpyHtoD_v2(ptr, data.as_ptr().cast(), data.len()) };
    assert_eq!(code, CUDA_SUCCESS);
}

#[test]
fn memory_handles_open_in_another_process_only_and_map_the_same_bytes() {
    setup(0);
    let ptr = device_alloc(1000);
    let data: Vec<u8> = (0..1000).map(|i| (i % 251) as u8).collect();
    write(ptr, &data);
    let handle = mem_handle(ptr);
    let mut opened = 0u64;
    let mut other = IpcHandle { reserved: [0; 64] };
    let mut pinned: *mut c_void = std::ptr::null_mut();
    // SAFETY: valid out parameters; the pointers are the driver's.
    unsafe {
        assert_eq!(
            cuIpcOpenMemHandle_v2(&mut opened, handle, 1),
            CUDA_ERROR_INVALID_CONTEXT,
            "the exporting process cannot open its own handle"
        );
        assert_eq!(
            cuIpcGetMemHandle(&mut other, ptr + 8),
            CUDA_ERROR_INVALID_VALUE,
            "an interior pointer"
        );
        assert_eq!(cuMemHostAlloc(&mut pinned, 64, 0), CUDA_SUCCESS);
        assert_eq!(
            cuIpcGetMemHandle(&mut other, pinned as u64),
            CUDA_ERROR_INVALID_VALUE,
            "pinned memory has no IPC handle"
        );
        assert_eq!(cuMemFreeHost(pinned), CUDA_SUCCESS);
        assert_eq!(cuIpcCloseMemHandle(ptr), CUDA_ERROR_INVALID_VALUE);
    }
    let child = opener("opener_reads_writes_and_closes", &[handle]);
    finish(child);
    let mut expected = data.clone();
    expected[..4].copy_from_slice(b"seen");
    assert_eq!(read(ptr, 1000), expected, "the opener's write is shared");
    let violations = control::snapshot().violations;
    // SAFETY: the allocation made above, which no process maps any more.
    assert_eq!(unsafe { cuMemFree_v2(ptr) }, CUDA_SUCCESS);
    assert_eq!(control::snapshot().violations, violations);
}

/// The opener's side (does nothing unless run as an opener).
#[test]
fn opener_reads_writes_and_closes() {
    let Some(handles) = handles_from_env() else {
        return;
    };
    let handle = handles[0];
    setup(0);
    let (mut ptr, mut again) = (0u64, 0u64);
    // SAFETY: valid out parameters.
    unsafe {
        assert_eq!(
            cuIpcOpenMemHandle_v2(&mut ptr, handle, 0),
            CUDA_ERROR_INVALID_VALUE,
            "the flag is required"
        );
        let mut forged = handle;
        forged.reserved[33] ^= 1;
        assert_eq!(
            cuIpcOpenMemHandle_v2(&mut ptr, forged, 1),
            CUDA_ERROR_MAP_FAILED,
            "a handle naming another file"
        );
        forged.reserved[0] = b'X';
        assert_eq!(
            cuIpcOpenMemHandle_v2(&mut ptr, forged, 1),
            CUDA_ERROR_INVALID_VALUE
        );
        assert_eq!(cuIpcOpenMemHandle_v2(&mut ptr, handle, 1), CUDA_SUCCESS);
        assert_eq!(cuIpcOpenMemHandle_v2(&mut again, handle, 1), CUDA_SUCCESS);
    }
    assert_eq!(ptr, again, "opened twice in one context: the same pointer");
    let expected: Vec<u8> = (0..1000).map(|i| (i % 251) as u8).collect();
    assert_eq!(read(ptr, 1000), expected);
    let (mut base, mut size) = (0u64, 0usize);
    // SAFETY: valid out parameters.
    unsafe {
        assert_eq!(
            cuMemGetAddressRange_v2(&mut base, &mut size, ptr + 10),
            CUDA_SUCCESS
        );
        assert_eq!(
            cuMemFree_v2(ptr),
            CUDA_ERROR_INVALID_VALUE,
            "closed, not freed"
        );
    }
    assert_eq!((base, size), (ptr, 1000));
    write(ptr, b"seen");
    assert_eq!(control::snapshot_ipc().memory_mappings, 1);
    // SAFETY: the pointer opened (twice) above.
    unsafe {
        assert_eq!(cuIpcCloseMemHandle(ptr), CUDA_SUCCESS);
        assert_eq!(control::snapshot_ipc().memory_mappings, 1, "one open left");
        assert_eq!(cuIpcCloseMemHandle(ptr), CUDA_SUCCESS);
        assert_eq!(cuIpcCloseMemHandle(ptr), CUDA_ERROR_INVALID_VALUE);
    }
    assert_eq!(control::snapshot_ipc().memory_mappings, 0);
}

static RELEASED: AtomicBool = AtomicBool::new(false);

unsafe extern "C" fn wait_for_release(_: *mut c_void) {
    while !RELEASED.load(Ordering::SeqCst) {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

#[test]
fn an_interprocess_event_orders_the_openers_work_after_the_exporters() {
    setup(0);
    let ptr = device_alloc(256);
    write(ptr, &[1; 256]);
    let (mut plain, mut event) = (0usize, 0usize);
    let mut handle = IpcHandle { reserved: [0; 64] };
    let s = stream(1);
    // SAFETY: valid out parameters and handles made here.
    unsafe {
        assert_eq!(cuEventCreate(&mut plain, 2), CUDA_SUCCESS);
        assert_eq!(
            cuIpcGetEventHandle(&mut handle, plain),
            CUDA_ERROR_INVALID_HANDLE,
            "not CU_EVENT_INTERPROCESS"
        );
        assert_eq!(cuEventDestroy_v2(plain), CUDA_SUCCESS);
        assert_eq!(cuEventCreate(&mut event, 4), CUDA_ERROR_INVALID_VALUE);
        assert_eq!(cuEventCreate(&mut event, 6), CUDA_SUCCESS);
        assert_eq!(cuIpcGetEventHandle(&mut handle, event), CUDA_SUCCESS);
        let mut opened = 0usize;
        assert_eq!(
            cuIpcOpenEventHandle(&mut opened, handle),
            CUDA_ERROR_INVALID_CONTEXT
        );
        // The producer's work: held back until the opener has seen the
        // event pending, then 2s written and the event recorded.
        assert_eq!(
            cuLaunchHostFunc(s, Some(wait_for_release), std::ptr::null_mut()),
            CUDA_SUCCESS
        );
        assert_eq!(cuMemsetD8Async(ptr, 2, 256, s), CUDA_SUCCESS);
        assert_eq!(cuEventRecord(event, s), CUDA_SUCCESS);
    }
    let mut child = opener("opener_waits_on_the_event", &[mem_handle(ptr), handle]);
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    wait_for_line(&mut lines, "PENDING");
    RELEASED.store(true, Ordering::SeqCst);
    child.stdin.take().unwrap().write_all(b"go\n").unwrap();
    wait_for_line(&mut lines, "READ");
    finish(child);
    // SAFETY: handles made above; the stream has run.
    unsafe {
        assert_eq!(cuStreamSynchronize(s), CUDA_SUCCESS);
        assert_eq!(cuEventDestroy_v2(event), CUDA_SUCCESS);
        assert_eq!(cuMemFree_v2(ptr), CUDA_SUCCESS);
        assert_eq!(cuStreamDestroy_v2(s), CUDA_SUCCESS);
    }
}

/// The opener's side (does nothing unless run as an opener).
#[test]
fn opener_waits_on_the_event() {
    let Some(handles) = handles_from_env() else {
        return;
    };
    setup(0);
    let (mut ptr, mut event) = (0u64, 0usize);
    // SAFETY: valid out parameters.
    unsafe {
        assert_eq!(cuIpcOpenMemHandle_v2(&mut ptr, handles[0], 1), CUDA_SUCCESS);
        assert_eq!(cuIpcOpenEventHandle(&mut event, handles[1]), CUDA_SUCCESS);
        assert_eq!(cuEventQuery(event), CUDA_ERROR_NOT_READY);
    }
    assert_eq!(control::snapshot_ipc().events, 1);
    println!("PENDING");
    std::io::stdout().flush().unwrap();
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).unwrap();
    let s = stream(1);
    let mut back = vec![0u8; 256];
    // SAFETY: handles opened above; a host buffer of 256 bytes, read after
    // the stream's synchronization.
    unsafe {
        assert_eq!(cuStreamWaitEvent(s, event, 0), CUDA_SUCCESS);
        assert_eq!(
            cuMemcpyDtoHAsync_v2(back.as_mut_ptr().cast(), ptr, 256, s),
            CUDA_SUCCESS
        );
        assert_eq!(cuStreamSynchronize(s), CUDA_SUCCESS);
        assert_eq!(cuEventQuery(event), CUDA_SUCCESS);
        assert_eq!(cuEventSynchronize(event), CUDA_SUCCESS);
        assert_eq!(cuEventDestroy_v2(event), CUDA_SUCCESS);
        assert_eq!(cuIpcCloseMemHandle(ptr), CUDA_SUCCESS);
        assert_eq!(cuStreamDestroy_v2(s), CUDA_SUCCESS);
    }
    assert_eq!(back, [2; 256], "the exporter's final values");
    assert_eq!(control::snapshot_ipc(), Default::default());
    println!("READ");
}

#[test]
fn freeing_memory_a_live_process_maps_is_a_violation_and_a_killed_one_is_not_counted() {
    setup(0);
    for kill_first in [false, true] {
        let ptr = device_alloc(64);
        write(ptr, &[3; 64]);
        let mut child = opener("opener_holds_the_mapping", &[mem_handle(ptr)]);
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        wait_for_line(&mut lines, "MAPPED");
        if kill_first {
            child.kill().unwrap();
            child.wait().unwrap();
        }
        let violations = control::snapshot().violations;
        // SAFETY: the allocation made above.
        assert_eq!(unsafe { cuMemFree_v2(ptr) }, CUDA_SUCCESS);
        let now = control::snapshot().violations;
        if kill_first {
            assert_eq!(now, violations, "a killed opener maps nothing");
        } else {
            assert_eq!(now, violations + 1);
            let message = control::last_violation_message().unwrap();
            assert!(message.contains("still map it"), "{message}");
            child.kill().unwrap();
        }
        child.wait().unwrap();
    }
}

/// The opener's side (does nothing unless run as an opener): maps, says
/// so, waits to be killed.
#[test]
fn opener_holds_the_mapping() {
    let Some(handles) = handles_from_env() else {
        return;
    };
    setup(0);
    let mut ptr = 0u64;
    // SAFETY: a valid out parameter.
    assert_eq!(
        unsafe { cuIpcOpenMemHandle_v2(&mut ptr, handles[0], 1) },
        CUDA_SUCCESS
    );
    println!("MAPPED");
    std::io::stdout().flush().unwrap();
    std::thread::sleep(std::time::Duration::from_secs(60));
}

#[test]
fn devices_have_distinct_uuids() {
    setup(0);
    let (mut zero, mut one) = (Uuid { bytes: [0; 16] }, Uuid { bytes: [0; 16] });
    // SAFETY: valid out parameters.
    unsafe {
        assert_eq!(cuDeviceGetUuid_v2(&mut zero, 0), CUDA_SUCCESS);
        assert_eq!(cuDeviceGetUuid(&mut one, 1), CUDA_SUCCESS);
        assert_eq!(cuDeviceGetUuid_v2(&mut one, 99), CUDA_ERROR_INVALID_DEVICE);
        assert_eq!(
            cuDeviceGetUuid_v2(std::ptr::null_mut(), 0),
            CUDA_ERROR_INVALID_VALUE
        );
    }
    assert_ne!(zero, one);
    assert_eq!(zero, uuid_of(0));
}

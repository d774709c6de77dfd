//! The driver rules, called through the exported entry points as a C
//! caller would. Each test uses its own thread's context stack; the driver
//! state (devices, handles) is shared by the tests of this binary.

use std::ffi::c_void;
use std::ptr::null_mut;

use super::device::*;
use super::memory::*;
use super::module::*;
use super::stream::*;
use crate::result::*;
use crate::stream::POISON;

/// Initialises the stand-in and makes device `ordinal`'s primary context
/// current on this thread; returns it.
pub(super) fn setup(ordinal: i32) -> usize {
    let mut context = 0usize;
    // SAFETY: plain driver calls with valid out parameters.
    unsafe {
        assert_eq!(cuInit(0), CUDA_SUCCESS);
        assert_eq!(
            cuDevicePrimaryCtxRetain(&mut context, ordinal),
            CUDA_SUCCESS
        );
        assert_eq!(cuCtxPushCurrent_v2(context), CUDA_SUCCESS);
    }
    context
}

pub(super) fn device_alloc(len: usize) -> u64 {
    let mut ptr = 0u64;
    // SAFETY: a valid out parameter.
    assert_eq!(unsafe { cuMemAlloc_v2(&mut ptr, len) }, CUDA_SUCCESS);
    ptr
}

pub(super) fn stream(flags: u32) -> usize {
    let mut stream = 0usize;
    // SAFETY: a valid out parameter.
    assert_eq!(unsafe { cuStreamCreate(&mut stream, flags) }, CUDA_SUCCESS);
    stream
}

fn event() -> usize {
    let mut event = 0usize;
    // SAFETY: a valid out parameter.
    assert_eq!(unsafe { cuEventCreate(&mut event, 2) }, CUDA_SUCCESS);
    event
}

#[test]
fn calls_that_need_a_context_fail_without_one() {
    setup(0);
    let mut popped = 0usize;
    let mut ptr = 0u64;
    // SAFETY: valid out parameters.
    unsafe {
        assert_eq!(cuCtxPopCurrent_v2(&mut popped), CUDA_SUCCESS);
        assert_eq!(cuMemAlloc_v2(&mut ptr, 8), CUDA_ERROR_INVALID_CONTEXT);
        let mut stream = 0usize;
        assert_eq!(cuStreamCreate(&mut stream, 0), CUDA_ERROR_INVALID_CONTEXT);
        let host = [0u8; 8];
        assert_eq!(
            cuMemcpyHtoD_v2(0x1000, host.as_ptr().cast(), 8),
            CUDA_ERROR_INVALID_CONTEXT
        );
        assert_eq!(cuCtxPopCurrent_v2(&mut popped), CUDA_ERROR_INVALID_CONTEXT);
    }
}

#[test]
fn device_memory_round_trips_and_is_classified() {
    setup(1);
    let ptr = device_alloc(1000);
    let data: Vec<u8> = (0..1000).map(|i| i as u8).collect();
    let mut back = vec![0u8; 1000];
    let (mut memory_type, mut ordinal, mut managed) = (0u32, -1i32, 7u32);
    let mut attributes = [2u32, 9, 8];
    let mut slots: [*mut c_void; 3] = [
        (&mut memory_type as *mut u32).cast(),
        (&mut ordinal as *mut i32).cast(),
        (&mut managed as *mut u32).cast(),
    ];
    // SAFETY: buffers of the sizes passed.
    unsafe {
        assert_eq!(
            cuMemcpyHtoD_v2(ptr, data.as_ptr().cast(), 1000),
            CUDA_SUCCESS
        );
        assert_eq!(
            cuMemcpyDtoH_v2(back.as_mut_ptr().cast(), ptr + 1, 999),
            CUDA_SUCCESS
        );
        assert_eq!(
            cuPointerGetAttributes(3, attributes.as_mut_ptr(), slots.as_mut_ptr(), ptr + 500),
            CUDA_SUCCESS
        );
    }
    assert_eq!(back[..999], data[1..]);
    assert_eq!((memory_type, ordinal, managed), (2, 1, 0));
    // Pageable memory: zeros, success.
    // SAFETY: as above.
    unsafe {
        assert_eq!(
            cuPointerGetAttributes(
                3,
                attributes.as_mut_ptr(),
                slots.as_mut_ptr(),
                back.as_ptr() as u64
            ),
            CUDA_SUCCESS
        );
    }
    assert_eq!((memory_type, ordinal, managed), (0, 0, 0));
    // SAFETY: a copy past the end is refused before anything is read.
    unsafe {
        assert_eq!(
            cuMemcpyDtoH_v2(back.as_mut_ptr().cast(), ptr + 1, 1000),
            CUDA_ERROR_INVALID_VALUE
        );
        assert_eq!(cuMemFree_v2(ptr + 8), CUDA_ERROR_INVALID_VALUE);
        assert_eq!(cuMemFreeHost(ptr as *mut c_void), CUDA_ERROR_INVALID_VALUE);
        assert_eq!(cuMemFree_v2(ptr), CUDA_SUCCESS);
        assert_eq!(cuMemFree_v2(ptr), CUDA_ERROR_INVALID_VALUE);
    }
}

#[test]
fn address_ranges_are_the_allocations_that_hold_the_pointer() {
    setup(0);
    let ptr = device_alloc(1000);
    let mut pinned: *mut c_void = null_mut();
    let host = [0u8; 16];
    let (mut base, mut size) = (0u64, 0usize);
    // SAFETY: valid out parameters (or NULL, which the call allows).
    unsafe {
        assert_eq!(cuMemHostAlloc(&mut pinned, 64, 0), CUDA_SUCCESS);
        for inside in [ptr, ptr + 1, ptr + 999] {
            (base, size) = (0, 0);
            assert_eq!(
                cuMemGetAddressRange_v2(&mut base, &mut size, inside),
                CUDA_SUCCESS
            );
            assert_eq!((base, size), (ptr, 1000), "{inside:#x}");
        }
        assert_eq!(
            cuMemGetAddressRange_v2(&mut base, &mut size, pinned as u64 + 63),
            CUDA_SUCCESS
        );
        assert_eq!((base, size), (pinned as u64, 64));
        // Either out parameter may be NULL.
        size = 0;
        assert_eq!(
            cuMemGetAddressRange_v2(null_mut(), &mut size, ptr + 5),
            CUDA_SUCCESS
        );
        assert_eq!(size, 1000);
        base = 0;
        assert_eq!(
            cuMemGetAddressRange_v2(&mut base, null_mut(), ptr + 5),
            CUDA_SUCCESS
        );
        assert_eq!(base, ptr);
        // Past the size asked for (the page's padding), host memory, NULL.
        for outside in [ptr + 1000, host.as_ptr() as u64, 0] {
            assert_eq!(
                cuMemGetAddressRange_v2(&mut base, &mut size, outside),
                CUDA_ERROR_NOT_FOUND,
                "{outside:#x}"
            );
        }
        assert_eq!(cuMemFreeHost(pinned), CUDA_SUCCESS);
        assert_eq!(cuMemFree_v2(ptr), CUDA_SUCCESS);
        assert_eq!(
            cuMemGetAddressRange_v2(&mut base, &mut size, ptr),
            CUDA_ERROR_NOT_FOUND,
            "freed"
        );
        let mut popped = 0usize;
        assert_eq!(cuCtxPopCurrent_v2(&mut popped), CUDA_SUCCESS);
        assert_eq!(
            cuMemGetAddressRange_v2(&mut base, &mut size, ptr),
            CUDA_ERROR_INVALID_CONTEXT
        );
    }
}

#[test]
fn a_queued_copy_destination_holds_poison_until_the_copy_runs() {
    setup(0);
    let s = stream(1);
    let host = vec![5u8; 4096];
    let mut pinned: *mut c_void = null_mut();
    // SAFETY: buffers of the sizes passed; the pinned buffer is read only
    // after the synchronization.
    unsafe {
        assert_eq!(cuMemHostAlloc(&mut pinned, 4096, 1), CUDA_SUCCESS);
        assert_eq!(
            cuMemcpyAsync(pinned as u64, host.as_ptr() as u64, 4096, s),
            CUDA_SUCCESS
        );
        let now = std::slice::from_raw_parts(pinned.cast::<u8>(), 4096);
        assert!(now.iter().all(|b| *b == POISON), "poison while queued");
        assert_eq!(cuStreamQuery(s), CUDA_ERROR_NOT_READY);
        assert_eq!(cuStreamSynchronize(s), CUDA_SUCCESS);
        assert_eq!(cuStreamQuery(s), CUDA_SUCCESS);
        assert!(now.iter().all(|b| *b == 5));
        assert_eq!(cuMemFreeHost(pinned), CUDA_SUCCESS);
        assert_eq!(cuStreamDestroy_v2(s), CUDA_SUCCESS);
        assert_eq!(cuStreamDestroy_v2(s), CUDA_ERROR_INVALID_HANDLE);
    }
}

#[test]
fn events_order_one_stream_after_another() {
    setup(0);
    let (a, b) = (stream(1), stream(1));
    let done = event();
    let ptr = device_alloc(4);
    let mut value = 0u32;
    // SAFETY: valid handles and buffers; `value` is read after the sync.
    unsafe {
        assert_eq!(cuMemsetD32Async(ptr, 0xAABBCCDD, 1, a), CUDA_SUCCESS);
        assert_eq!(cuEventRecord(done, a), CUDA_SUCCESS);
        assert_eq!(cuEventQuery(done), CUDA_ERROR_NOT_READY);
        assert_eq!(cuStreamWaitEvent(b, done, 0), CUDA_SUCCESS);
        assert_eq!(
            cuMemcpyDtoHAsync_v2((&mut value as *mut u32).cast(), ptr, 4, b),
            CUDA_SUCCESS
        );
        assert_eq!(cuStreamSynchronize(b), CUDA_SUCCESS);
        assert_eq!(value, 0xAABBCCDD);
        assert_eq!(cuEventQuery(done), CUDA_SUCCESS);
        assert_eq!(cuEventDestroy_v2(done), CUDA_SUCCESS);
        assert_eq!(cuEventQuery(done), CUDA_ERROR_INVALID_HANDLE);
        assert_eq!(cuMemFree_v2(ptr), CUDA_SUCCESS);
        cuStreamDestroy_v2(a);
        cuStreamDestroy_v2(b);
    }
}

#[test]
fn the_legacy_stream_waits_for_blocking_streams_but_not_non_blocking_ones() {
    setup(0);
    let (blocking, non_blocking) = (stream(0), stream(1));
    let (first, second) = (device_alloc(4), device_alloc(4));
    let mut seen = [0u32; 2];
    // SAFETY: valid handles and buffers, read after synchronizations.
    unsafe {
        // Long queues on both: many memsets, each after the delay.
        for _ in 0..20 {
            cuMemsetD32Async(first, 1, 1, blocking);
            cuMemsetD32Async(second, 2, 1, non_blocking);
        }
        // The legacy stream's copy waits for `blocking`'s memsets only.
        assert_eq!(
            cuMemcpyDtoHAsync_v2(seen.as_mut_ptr().cast(), first, 4, 1),
            CUDA_SUCCESS
        );
        assert_eq!(cuStreamSynchronize(1), CUDA_SUCCESS);
        assert_eq!(seen[0], 1);
        assert_eq!(
            cuStreamQuery(blocking),
            CUDA_SUCCESS,
            "done before the legacy copy"
        );
        cuStreamSynchronize(non_blocking);
        cuMemFree_v2(first);
        cuMemFree_v2(second);
        cuStreamDestroy_v2(blocking);
        cuStreamDestroy_v2(non_blocking);
    }
}

unsafe extern "C" fn calls_cuda(data: *mut c_void) {
    let mut ptr = 0u64;
    // SAFETY: `data` is the test's u32 slot; the call is refused anyway.
    unsafe { *data.cast::<u32>() = cuMemAlloc_v2(&mut ptr, 8) };
}

#[test]
fn cuda_calls_from_a_host_function_are_not_permitted() {
    setup(0);
    let s = stream(1);
    let before = crate::control::snapshot().violations;
    let mut result = 0u32;
    // SAFETY: `result` outlives the synchronization after which the host
    // function has run.
    unsafe {
        assert_eq!(
            cuLaunchHostFunc(s, Some(calls_cuda), (&mut result as *mut u32).cast()),
            CUDA_SUCCESS
        );
        assert_eq!(cuStreamSynchronize(s), CUDA_SUCCESS);
        cuStreamDestroy_v2(s);
    }
    assert_eq!(result, CUDA_ERROR_NOT_PERMITTED);
    assert_eq!(crate::control::snapshot().violations, before + 1);
}

#[test]
fn a_stream_of_another_context_is_refused() {
    setup(1);
    let theirs = stream(1);
    setup(0);
    let ptr = device_alloc(4);
    let e = event();
    // SAFETY: valid handles; the calls are refused before any work.
    unsafe {
        assert_eq!(
            cuMemsetD32Async(ptr, 0, 1, theirs),
            CUDA_ERROR_INVALID_HANDLE
        );
        assert_eq!(cuEventRecord(e, theirs), CUDA_ERROR_INVALID_HANDLE);
        cuEventDestroy_v2(e);
        cuMemFree_v2(ptr);
        cuStreamDestroy_v2(theirs);
    }
}

#[test]
fn kernels_load_from_ptx_and_run_over_device_memory() {
    setup(0);
    let ptx = concat!(
        include_str!("../../../arrow-device/src/device/cuda/kernels/convert.ptx"),
        "\0"
    );
    let mut module = 0usize;
    let (mut pack, mut missing) = (0usize, 0usize);
    let values = [1u8, 0, 2, 0, 0, 0, 0, 9, 1, 1];
    let (src, dst) = (device_alloc(10), device_alloc(2));
    let mut bitmap = [0u8; 2];
    // SAFETY: the PTX is NUL-terminated; parameter slots are live u64s.
    unsafe {
        assert_eq!(
            cuModuleLoadData(&mut module, ptx.as_ptr().cast()),
            CUDA_SUCCESS
        );
        assert_eq!(
            cuModuleGetFunction(&mut pack, module, c"arrow_device_pack_bits".as_ptr()),
            CUDA_SUCCESS
        );
        assert_eq!(
            cuModuleGetFunction(&mut missing, module, c"arrow_device_nothing".as_ptr()),
            CUDA_ERROR_NOT_FOUND
        );
        cuMemcpyHtoD_v2(src, values.as_ptr().cast(), 10);
        let (mut a, mut n, mut b) = (src, 10u64, dst);
        let mut params: [*mut c_void; 3] = [
            (&mut a as *mut u64).cast(),
            (&mut n as *mut u64).cast(),
            (&mut b as *mut u64).cast(),
        ];
        assert_eq!(
            cuLaunchKernel(
                pack,
                1,
                1,
                1,
                256,
                1,
                1,
                0,
                1,
                params.as_mut_ptr(),
                null_mut()
            ),
            CUDA_SUCCESS
        );
        assert_eq!(
            cuLaunchKernel(
                pack,
                1,
                1,
                1,
                2048,
                1,
                1,
                0,
                1,
                params.as_mut_ptr(),
                null_mut()
            ),
            CUDA_ERROR_INVALID_VALUE
        );
        assert_eq!(
            cuMemcpyDtoH_v2(bitmap.as_mut_ptr().cast(), dst, 2),
            CUDA_SUCCESS
        );
        assert_eq!(cuModuleUnload(module), CUDA_SUCCESS);
        assert_eq!(
            cuLaunchKernel(
                pack,
                1,
                1,
                1,
                1,
                1,
                1,
                0,
                1,
                params.as_mut_ptr(),
                null_mut()
            ),
            CUDA_ERROR_INVALID_HANDLE
        );
        cuMemFree_v2(src);
        cuMemFree_v2(dst);
    }
    assert_eq!(bitmap, [0b1000_0101, 0b11]);
}

#[test]
fn an_injected_fault_fails_exactly_the_nth_call() {
    setup(0);
    // SAFETY: NUL-terminated name; valid out parameters.
    unsafe {
        assert_eq!(
            super::control_api::cuStandinInjectFault(
                c"cuEventCreate".as_ptr(),
                2,
                CUDA_ERROR_OUT_OF_MEMORY
            ),
            CUDA_SUCCESS
        );
        assert_eq!(
            super::control_api::cuStandinInjectFault(c"cuNothing".as_ptr(), 1, 2),
            CUDA_ERROR_INVALID_VALUE
        );
        assert_eq!(
            super::control_api::cuStandinInjectFault(c"cuEventCreate".as_ptr(), 1, 12345),
            CUDA_ERROR_INVALID_VALUE
        );
        let mut e = [0usize; 3];
        assert_eq!(cuEventCreate(&mut e[0], 0), CUDA_SUCCESS);
        assert_eq!(cuEventCreate(&mut e[1], 0), CUDA_ERROR_OUT_OF_MEMORY);
        assert_eq!(cuEventCreate(&mut e[2], 0), CUDA_SUCCESS);
        cuEventDestroy_v2(e[0]);
        cuEventDestroy_v2(e[2]);
    }
}

#[test]
fn a_stream_that_skips_the_producers_event_reads_poison_one_that_waits_reads_values() {
    setup(0);
    let (producer, consumer) = (stream(1), stream(1));
    let ptr = device_alloc(4);
    let done = event();
    let mut seen = [0u32; 2];
    // SAFETY: valid handles and buffers, read after the synchronizations.
    unsafe {
        // The producer's memset is lazy: nobody waits on it yet.
        assert_eq!(cuMemsetD32Async(ptr, 7, 1, producer), CUDA_SUCCESS);
        assert_eq!(cuEventRecord(done, producer), CUDA_SUCCESS);
        // Without a wait, the consumer's forced copy runs first.
        cuMemcpyDtoHAsync_v2(seen.as_mut_ptr().cast(), ptr, 4, consumer);
        assert_eq!(cuStreamSynchronize(consumer), CUDA_SUCCESS);
        // With one, the wait forces the producer's record and what precedes it.
        assert_eq!(cuStreamWaitEvent(consumer, done, 0), CUDA_SUCCESS);
        cuMemcpyDtoHAsync_v2(seen[1..].as_mut_ptr().cast(), ptr, 4, consumer);
        assert_eq!(cuStreamSynchronize(consumer), CUDA_SUCCESS);
        cuEventDestroy_v2(done);
        cuStreamSynchronize(producer);
        cuMemFree_v2(ptr);
        cuStreamDestroy_v2(producer);
        cuStreamDestroy_v2(consumer);
    }
    assert_eq!(seen[0], u32::from_ne_bytes([POISON; 4]));
    assert_eq!(seen[1], 7);
}

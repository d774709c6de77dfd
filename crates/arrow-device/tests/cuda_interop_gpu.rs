//! The CUDA devices and the Python protocols' streams and layouts, on a
//! real GPU: CUDA Array Interface import (zero-copy on each memory kind,
//! ordered after the producer's stream, masks and `|b1` values packed into
//! bitmaps by the kernels) and export (the byte mask made on the GPU, the
//! `stream` entry), and DLPack export for a consumer's stream.
//!
//! Every test returns early, printing why, when no GPU is usable, so the
//! suite passes on CPU machines; `scripts/gpu-check.sh` runs it on a GPU.
#![cfg(feature = "cuda")]

mod common;

use std::sync::Arc;

use arrow_array::{Array, BooleanArray, Int32Array, Int64Array, UInt8Array};
use arrow_device::abi::DeviceType;
use arrow_device::cai::cuda::{export_cai, import_cai};
use arrow_device::cai::StreamSync;
use arrow_device::dlpack::{export_dlpack_for_stream, DlpackAbi};
use arrow_device::{export_array_to, DeviceArray, Error, ValidationLevel};
use cudarc::driver::sys;

use common::gpu::interface::{plan, values_ptr};
use common::gpu::{counter, cuda_device, gpu, import, KINDS};
use common::producer::{bitmap, i32s, ArrayNode, Case, SchemaNode};
use common::{assert_same, build_on_device};

/// `array` copied onto GPU 0's `kind` memory.
fn on_gpu(array: &dyn Array, kind: DeviceType) -> DeviceArray {
    let (c_array, c_schema) = export_array_to(array, &cuda_device(kind)).unwrap();
    import("on_gpu", c_array, c_schema)
}

/// `array` copied onto GPU 0's `kind` memory, with the copy complete: the
/// tests below then play a CUDA Array Interface producer whose data is ready
/// on the stream it names. Our copy runs on a non-blocking stream of ours,
/// which the default streams (1 and 2) do not wait for, so an interface that
/// named them over a pending copy would be lying about its data (found on an
/// H100: managed memory read on the host before the copy had run).
fn ready_on_gpu(array: &dyn Array, kind: DeviceType) -> DeviceArray {
    let on_gpu = on_gpu(array, kind);
    on_gpu.synchronize().unwrap();
    on_gpu
}

#[test]
fn an_interface_over_each_memory_kind_imports_zero_copy_on_that_kind() {
    let Some(_gpu) = gpu("an_interface_over_each_memory_kind_imports_zero_copy") else {
        return;
    };
    let ints = Int32Array::from_iter_values(0..1000);
    for kind in KINDS {
        let source = ready_on_gpu(&ints, kind);
        let ptr = values_ptr(&source);
        let plan = plan((ptr, 1000, "<i4"), None, Some(1));
        // SAFETY: `source` (the owner) holds 1000 int32 at `ptr`.
        let imported = unsafe { import_cai(&plan, Arc::new(source.clone())) }.unwrap();
        assert_eq!(imported.device_type(), kind, "{kind}");
        assert_eq!(imported.device_id(), 0);
        assert_eq!(values_ptr(&imported), ptr, "{kind}: zero-copy");
        assert!(
            !imported.sync_event().is_null(),
            "{kind}: ordered by an event"
        );
        assert_same(
            &format!("{kind}"),
            &ints,
            imported.to_host().unwrap().as_ref(),
        );
    }
}

#[test]
fn a_mask_and_b1_values_become_arrow_bitmaps_on_the_gpu() {
    let Some(_gpu) = gpu("a_mask_and_b1_values_become_arrow_bitmaps_on_the_gpu") else {
        return;
    };
    for len in [0usize, 1, 7, 8, 9, 13, 64, 65, 1000, 100_003] {
        let ints = Int32Array::from_iter_values(0..len as i32);
        // Non-zero bytes of several values mean valid / true.
        let mask_bytes = UInt8Array::from_iter_values((0..len).map(|i| (i % 3 != 0) as u8 * 2));
        let bool_bytes = UInt8Array::from_iter_values((0..len).map(|i| (i % 5 == 1) as u8 * 255));
        let (values, mask, bools) = (
            ready_on_gpu(&ints, DeviceType::CUDA),
            ready_on_gpu(&mask_bytes, DeviceType::CUDA),
            ready_on_gpu(&bool_bytes, DeviceType::CUDA),
        );
        let owner = Arc::new((values.clone(), mask.clone(), bools.clone()));
        let masked = plan(
            (values_ptr(&values), len, "<i4"),
            Some((values_ptr(&mask), "|b1")),
            Some(2),
        );
        // SAFETY: `owner` holds `len` int32 and `len` mask bytes.
        let imported = unsafe { import_cai(&masked, owner.clone()) }.unwrap();
        let expected: Int32Array = (0..len).map(|i| (i % 3 != 0).then_some(i as i32)).collect();
        assert_same(
            &format!("mask, {len}"),
            &expected,
            imported.to_host().unwrap().as_ref(),
        );
        // An empty interface's data pointer is 0 (CAI v3), whatever the
        // producer's allocation: nothing to share.
        let expected_ptr = if len == 0 { 0 } else { values_ptr(&values) };
        assert_eq!(values_ptr(&imported), expected_ptr, "values zero-copy");

        let packed = plan((values_ptr(&bools), len, "|b1"), None, None);
        // SAFETY: `owner` holds `len` bool bytes.
        let imported = unsafe { import_cai(&packed, owner) }.unwrap();
        let expected: BooleanArray = (0..len).map(|i| Some(i % 5 == 1)).collect();
        assert_same(
            &format!("|b1, {len}"),
            &expected,
            imported.to_host().unwrap().as_ref(),
        );
    }
}

#[test]
fn a_sliced_array_with_nulls_exports_a_byte_mask_made_on_the_gpu() {
    let Some(_gpu) = gpu("a_sliced_array_with_nulls_exports_a_byte_mask") else {
        return;
    };
    let ints: Int32Array = (0..100)
        .map(|i| (i % 7 != 2 && i % 11 != 0).then_some(i))
        .collect();
    let whole = on_gpu(&ints, DeviceType::CUDA);
    for offset in 0..10 {
        let len = 100 - offset - 3;
        let sliced = whole.slice(offset, len).unwrap();
        let exported = export_cai(&sliced).unwrap();
        assert_eq!(exported.interface.shape, [len as i64]);
        assert_eq!(
            exported.interface.data.0,
            values_ptr(&whole) + offset * 4,
            "the first value of the slice"
        );
        let mask = exported.mask.expect("an array with nulls has a mask");
        assert_eq!(mask.interface.typestr, "|b1");
        assert_eq!(mask.interface.shape, [len as i64]);
        assert_eq!(mask.interface.data.0, values_ptr(&mask.bytes));
        assert_ne!(mask.interface.stream, Some(0));
        let expected = UInt8Array::from_iter_values(
            ints.slice(offset, len)
                .iter()
                .map(|v| u8::from(v.is_some())),
        );
        assert_same(
            &format!("offset {offset}"),
            &expected,
            mask.bytes.to_host().unwrap().as_ref(),
        );
    }
    let no_nulls = on_gpu(&Int32Array::from(vec![1, 2, 3]), DeviceType::CUDA);
    assert!(export_cai(&no_nulls).unwrap().mask.is_none());
}

#[test]
fn the_exported_stream_is_the_interface_stream_while_pending_and_none_once_ready() {
    let Some(_gpu) = gpu("the_exported_stream_is_the_interface_stream_while_pending") else {
        return;
    };
    let device = cuda_device(DeviceType::CUDA);
    let interface_stream = counter(&device).interface_stream().unwrap();
    assert!(interface_stream > 2, "a real handle, not 0, 1 or 2");
    let big = Int64Array::from_iter_values(0..8_000_000);
    let array = on_gpu(&big, DeviceType::CUDA);
    match export_cai(&array).unwrap().interface.stream {
        None => println!("the copy had completed before the export"),
        Some(stream) => assert_eq!(stream, interface_stream),
    }
    array.synchronize().unwrap();
    assert_eq!(export_cai(&array).unwrap().interface.stream, None);
}

/// A stream of GPU 0's primary context kept busy for tens of milliseconds
/// (memsets over `scratch`), then filling `target` (`n` int32) with 7.
struct BusyProducer {
    stream: sys::CUstream,
    /// Written by the queued memsets: dropped only once they have run.
    scratch: Option<arrow_device::device::DeviceBuffer>,
}

fn busy_then_fill(target: usize, n: usize) -> BusyProducer {
    // On a GPU, 100 memsets of 1 GiB keep the stream busy for tens of
    // milliseconds. The driver stand-in runs each queued operation after a
    // delay, so 1 MiB keeps it just as busy without 100 GiB of host writes.
    let scratch_len: usize = if common::gpu::standin::loaded() {
        1 << 20
    } else {
        1 << 30
    };
    let scratch = cuda_device(DeviceType::CUDA).allocate(scratch_len).unwrap();
    let mut stream: sys::CUstream = std::ptr::null_mut();
    // SAFETY: plain driver calls on GPU 0's primary context (made current),
    // on memory allocated above, which `BusyProducer` keeps until the
    // stream has finished.
    unsafe {
        let device = cudarc::driver::result::device::get(0).unwrap();
        let context = cudarc::driver::result::primary_ctx::retain(device).unwrap();
        cudarc::driver::result::ctx::set_current(context).unwrap();
        sys::cuStreamCreate(&mut stream, 1).result().unwrap();
        for _ in 0..100 {
            sys::cuMemsetD8Async(scratch.as_ptr() as sys::CUdeviceptr, 1, scratch_len, stream)
                .result()
                .unwrap();
        }
        sys::cuMemsetD32Async(target as sys::CUdeviceptr, 7, n, stream)
            .result()
            .unwrap();
    }
    BusyProducer {
        stream,
        scratch: Some(scratch),
    }
}

impl Drop for BusyProducer {
    /// Waits for the stream's work, then frees the scratch memory and the
    /// stream: nothing leaks (compute-sanitizer's leak check runs this).
    fn drop(&mut self) {
        // SAFETY: the stream this producer created, destroyed once here.
        unsafe {
            let synced = sys::cuStreamSynchronize(self.stream).result();
            drop(self.scratch.take());
            let destroyed = sys::cuStreamDestroy_v2(self.stream).result();
            if !std::thread::panicking() {
                synced.unwrap();
                destroyed.unwrap();
            }
        }
    }
}

#[test]
fn an_import_waits_for_work_still_queued_on_the_producers_stream() {
    let Some(_gpu) = gpu("an_import_waits_for_work_still_queued_on_the_producers_stream") else {
        return;
    };
    let n = 4096;
    let zeros = on_gpu(&Int32Array::from(vec![0; n]), DeviceType::CUDA);
    zeros.synchronize().unwrap();
    let ptr = values_ptr(&zeros);
    let producer = busy_then_fill(ptr, n);
    let plan = plan((ptr, n, "<i4"), None, Some(producer.stream as usize as u64));
    // SAFETY: `zeros` holds `n` int32 at `ptr`; the stream is live until
    // `producer` drops, after the import's event has been waited on.
    let imported = unsafe { import_cai(&plan, Arc::new(zeros.clone())) }.unwrap();
    assert_same(
        "filled after the busy work",
        &Int32Array::from(vec![7; n]),
        imported.to_host().unwrap().as_ref(),
    );
    drop(imported);
    drop(producer);
}

#[test]
fn a_pageable_host_pointer_is_refused_naming_the_entry() {
    let Some(_gpu) = gpu("a_pageable_host_pointer_is_refused_naming_the_entry") else {
        return;
    };
    let host = [1i32; 4];
    let plan = plan((host.as_ptr() as usize, 4, "<i4"), None, None);
    // SAFETY: refused after classifying the pointer; nothing is read.
    let err = unsafe { import_cai(&plan, Arc::new(())) }.unwrap_err();
    match &err {
        Error::Invalid { path, message } => {
            assert_eq!(path, "__cuda_array_interface__['data']");
            assert!(message.contains("is not CUDA memory"), "{message}");
        }
        other => panic!("expected Invalid, got {other}"),
    }
}

#[test]
fn dlpack_export_for_a_stream_orders_on_the_device_without_blocking_the_host() {
    let Some(_gpu) = gpu("dlpack_export_for_a_stream_orders_on_the_device") else {
        return;
    };
    let device = cuda_device(DeviceType::CUDA);
    let ints = Int32Array::from_iter_values(0..1_000_000);
    for stream in [StreamSync::Legacy, StreamSync::PerThread, StreamSync::None] {
        let array = on_gpu(&ints, DeviceType::CUDA);
        let before = counter(&device).host_synchronizations();
        let tensor = export_dlpack_for_stream(&array, DlpackAbi::Versioned, stream).unwrap();
        assert_eq!(
            counter(&device).host_synchronizations(),
            before,
            "{stream:?}: no host wait"
        );
        assert_eq!(tensor.dl_tensor().data as usize, values_ptr(&array));
        assert_eq!(tensor.shape(), [1_000_000]);
        assert_same(
            &format!("{stream:?}"),
            &ints,
            array.to_host().unwrap().as_ref(),
        );
    }
}

#[test]
fn dlpack_export_of_pinned_or_managed_memory_waits_on_the_host_for_host_readers() {
    let Some(_gpu) = gpu("dlpack_export_of_pinned_or_managed_memory_waits_on_the_host") else {
        return;
    };
    let ints = Int32Array::from_iter_values(0..1000);
    for kind in [DeviceType::CUDA_HOST, DeviceType::CUDA_MANAGED] {
        let device = cuda_device(kind);
        let array = on_gpu(&ints, kind);
        let before = counter(&device).host_synchronizations();
        let tensor =
            export_dlpack_for_stream(&array, DlpackAbi::Versioned, StreamSync::Legacy).unwrap();
        assert_eq!(
            counter(&device).host_synchronizations(),
            before + 1,
            "{kind}: one host wait on the copy's event"
        );
        // SAFETY: the host waited on the event; the memory is host-accessible
        // and kept alive by the tensor.
        let values =
            unsafe { std::slice::from_raw_parts(tensor.dl_tensor().data.cast::<i32>(), 1000) };
        assert_eq!(values, ints.values().as_ref(), "{kind}");
    }
}

/// An array whose validity bitmap claims more bytes than its device
/// allocation holds: the CUDA Array Interface export, whose mask kernel
/// reads the bitmap as claimed, refuses it before launching anything (under
/// the stand-in, whose allocations end in a guard page; on a GPU the
/// neighbouring memory may let the range run on, and the outcome is
/// printed). The same values with a truthful length export their mask.
#[test]
fn a_validity_bitmap_claiming_more_than_its_allocation_is_refused_by_the_mask_export() {
    let Some(_gpu) = gpu("a_validity_bitmap_claiming_more_than_its_allocation") else {
        return;
    };
    let gpu0 = cuda_device(DeviceType::CUDA);
    let values: Vec<i32> = (0..4000).collect();
    let with_length = |length: i64| {
        let validity = bitmap(&(0..8).map(|i| i != 3).collect::<Vec<_>>());
        let case = Case::new(
            ArrayNode::new(length, 1, vec![validity, i32s(&values)]),
            SchemaNode::new("i", "v"),
        );
        let built = build_on_device(&case, &gpu0, &|bytes| bytes.len());
        // SAFETY: every pointer is valid (each buffer in an allocation of
        // its own); only the length may claim more than the bitmap holds.
        unsafe { DeviceArray::try_new(built.array, built.schema, ValidationLevel::Default) }
            .unwrap_or_else(|e| panic!("length {length}: import: {e}"))
    };
    let mask = export_cai(&with_length(8)).unwrap().mask.expect("a mask");
    assert_same(
        "mask",
        &UInt8Array::from(vec![1, 1, 1, 0, 1, 1, 1, 1]),
        mask.bytes.to_host().unwrap().as_ref(),
    );
    let outcome = export_cai(&with_length(4000)).map(drop);
    if !common::gpu::standin::loaded() {
        println!("on a GPU, a mask export of a bitmap claim past its allocation: {outcome:?}");
        return;
    }
    match outcome {
        Err(Error::Invalid { path, message }) => {
            assert_eq!(path, "buffer 0");
            assert!(
                message.starts_with("the validity bitmap claims 500 bytes at 0x")
                    && message.contains("not all memory of the device"),
                "{message}"
            );
        }
        other => panic!("expected Error::Invalid at buffer 0, got {other:?}"),
    }
}

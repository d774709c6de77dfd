//! The CUDA devices on a real GPU: every type round-trips through device,
//! pinned and managed memory; exported arrays carry a real `CUevent*`; import
//! reads all the sizes of a tree with one host synchronization; allocations,
//! copies and pointer classification behave as the driver documents.
//!
//! Every test returns early, printing why, when no GPU is usable
//! (`cuda::is_available()` is false), so the suite passes on CPU machines and
//! is meaningful only where a GPU runs it (`scripts/test.sh` names it).
//! The tests share GPU 0 and its devices' synchronization counters, so they
//! run one at a time (a lock).
#![cfg(feature = "cuda")]

mod common;

use std::sync::Arc;

use arrow_array::types::Int32Type;
use arrow_array::{
    Array, ArrayRef, BinaryArray, Int32Array, LargeStringArray, ListArray, RecordBatch,
    StringArray, StringViewArray,
};
use arrow_device::abi::DeviceType;
use arrow_device::device;
use arrow_device::device::cuda::{self, CudaDevice, PointerMemoryType};
use arrow_device::{export_array_to, export_record_batch_to, DeviceArray, Error, ValidationLevel};

use common::gpu::{counter, cuda_device, gpu, import, standin, KINDS};
use common::producer::{i32s, ArrayNode, Case, SchemaNode};
use common::{assert_same, build_on_device, device_array, for_each_case};

#[test]
fn every_type_round_trips_through_device_pinned_and_managed_memory() {
    let Some(_gpu) = gpu("every_type_round_trips_through_device_pinned_and_managed_memory") else {
        return;
    };
    for device_type in KINDS {
        let device = cuda_device(device_type);
        for_each_case(&format!("{device_type} export/import"), |case, array| {
            let case = &format!("{device_type} {case}");
            let (c_array, c_schema) = export_array_to(array.as_ref(), &device)
                .unwrap_or_else(|e| panic!("{case}: export: {e}"));
            assert_eq!(
                (c_array.device_type, c_array.device_id),
                (device_type, 0),
                "{case}"
            );
            assert!(
                !c_array.sync_event.is_null(),
                "{case}: a CUevent* from the copy"
            );
            let imported = import(case, c_array, c_schema);
            let found = imported.device().expect("a device implementation");
            assert!(
                CudaDevice::of(found.as_ref()).is_some(),
                "{case}: import finds the registered CUDA device"
            );
            let host = imported
                .to_host()
                .unwrap_or_else(|e| panic!("{case}: to_host: {e}"));
            assert_same(case, array.as_ref(), host.as_ref());
        });
    }
}

#[test]
fn every_type_moves_to_each_cuda_memory_kind_with_to_device_and_back() {
    let Some(_gpu) = gpu("every_type_moves_to_each_cuda_memory_kind_with_to_device_and_back")
    else {
        return;
    };
    let cpu = device::cpu();
    for device_type in KINDS {
        let device = cuda_device(device_type);
        // The next kind round the ring: CUDA → CUDA_HOST → CUDA_MANAGED → CUDA.
        let next = KINDS[(KINDS.iter().position(|k| *k == device_type).unwrap_or(0) + 1) % 3];
        let other = cuda_device(next);
        for_each_case(&format!("{device_type} to_device"), |case, array| {
            let case = &format!("{device_type} {case}");
            let on_cpu = device_array(array.as_ref(), ValidationLevel::Full);
            let on_gpu = on_cpu
                .to_device(&device)
                .unwrap_or_else(|e| panic!("{case}: to_device: {e}"));
            assert_eq!(on_gpu.device_type(), device_type, "{case}");
            assert!(!on_gpu.sync_event().is_null(), "{case}: the copy's event");
            let back = on_gpu
                .to_host()
                .unwrap_or_else(|e| panic!("{case}: to_host: {e}"));
            assert_same(case, array.as_ref(), back.as_ref());
            let moved = on_gpu
                .to_device(&other)
                .unwrap_or_else(|e| panic!("{case}: to_device({next}): {e}"));
            assert_eq!(moved.device_type(), next, "{case}");
            let back = moved
                .to_host()
                .unwrap_or_else(|e| panic!("{case}: {next} to_host: {e}"));
            assert_same(&format!("{case} via {next}"), array.as_ref(), back.as_ref());
            let home = on_gpu
                .to_device(&cpu)
                .unwrap_or_else(|e| panic!("{case}: to_device(cpu): {e}"));
            let back = home
                .to_host()
                .unwrap_or_else(|e| panic!("{case}: cpu to_host: {e}"));
            assert_same(
                &format!("{case} back on the CPU"),
                array.as_ref(),
                back.as_ref(),
            );
        });
    }
}

#[test]
fn an_exported_sync_event_is_a_pointer_to_a_recorded_cuevent() {
    let Some(_gpu) = gpu("an_exported_sync_event_is_a_pointer_to_a_recorded_cuevent") else {
        return;
    };
    for device_type in KINDS {
        let device = cuda_device(device_type);
        let ints = Int32Array::from((0..100_000).collect::<Vec<i32>>());
        let (c_array, c_schema) = export_array_to(&ints, &device).unwrap();
        let sync_event = c_array.sync_event;
        assert!(!sync_event.is_null());
        // The consumer's two uses of the event, on this device's API.
        let stream = device.create_stream().unwrap();
        // SAFETY: the exporter's CUevent*, alive until the array is released.
        unsafe { device.stream_wait_sync_event(&stream, sync_event) }.unwrap();
        // SAFETY: as above.
        unsafe { device.synchronize_sync_event(sync_event) }.unwrap();
        device.synchronize_stream(&stream).unwrap();
        // A NULL sync_event means no wait.
        // SAFETY: NULL is allowed.
        unsafe { device.stream_wait_sync_event(&stream, std::ptr::null_mut()) }.unwrap();
        // SAFETY: NULL is allowed.
        unsafe { device.synchronize_sync_event(std::ptr::null_mut()) }.unwrap();

        let imported = import(&device_type.to_string(), c_array, c_schema);
        assert_eq!(
            imported.sync_event(),
            sync_event,
            "the import keeps the producer's event"
        );
        imported.synchronize().unwrap();
        // The exported buffers live in the memory the device type names
        // (the ordinal the driver reports for portable pinned memory is not
        // pinned down by its documentation, so only the type is compared).
        let values = imported.buffers()[1].ptr;
        let found = cuda::pointer_memory_type(values.cast()).unwrap();
        let matches_kind = match device_type {
            DeviceType::CUDA => found == PointerMemoryType::Device { device_ordinal: 0 },
            DeviceType::CUDA_HOST => matches!(found, PointerMemoryType::Host { .. }),
            _ => matches!(found, PointerMemoryType::Managed { .. }),
        };
        assert!(
            matches_kind,
            "{device_type}: the values buffer is {found:?}"
        );
        assert_eq!(
            found.device().map(|(t, _)| t),
            Some(device_type),
            "classification names the exporting device type"
        );
        let back = imported.to_host().unwrap();
        assert_eq!(back.as_ref(), &ints as &dyn Array, "{device_type}");
    }
}

/// Offsets at several levels (strings, large strings, binary, a list of
/// strings) and a view array with variadic buffers.
fn batch_with_sizes_to_read() -> RecordBatch {
    let strings = StringArray::from(vec![Some("a"), None, Some("bcd"), Some("")]);
    let large = LargeStringArray::from(vec!["x", "yy", "zzz", "wwww"]);
    let binary = BinaryArray::from(vec![&b"1"[..], b"22", b"", b"4444"]);
    let lists = ListArray::from_iter_primitive::<Int32Type, _, _>(vec![
        Some(vec![Some(1), None]),
        None,
        Some(vec![]),
        Some(vec![Some(4), Some(5), Some(6)]),
    ]);
    let views = StringViewArray::from(vec![
        "short",
        "a string longer than twelve bytes",
        "another one longer than twelve",
        "x",
    ]);
    RecordBatch::try_from_iter([
        ("strings", Arc::new(strings) as ArrayRef),
        ("large", Arc::new(large) as ArrayRef),
        ("binary", Arc::new(binary) as ArrayRef),
        ("lists", Arc::new(lists) as ArrayRef),
        ("views", Arc::new(views) as ArrayRef),
    ])
    .unwrap()
}

#[test]
fn import_reads_every_size_of_a_tree_with_one_host_synchronization() {
    let Some(_gpu) = gpu("import_reads_every_size_of_a_tree_with_one_host_synchronization") else {
        return;
    };
    let batch = batch_with_sizes_to_read();
    for device_type in KINDS {
        let device = cuda_device(device_type);
        let (c_array, c_schema) = export_record_batch_to(&batch, &device).unwrap();
        let before = counter(&device).host_synchronizations();
        let imported = import(&device_type.to_string(), c_array, c_schema);
        let syncs = counter(&device).host_synchronizations() - before;
        assert_eq!(
            syncs, 1,
            "{device_type}: one host synchronization for all sizes"
        );
        assert!(
            imported.buffers().iter().all(|b| b.len.is_some()),
            "{device_type}: every size is known after import"
        );
        assert_eq!(imported.to_record_batch().unwrap(), batch, "{device_type}");

        // Fixed-width data has no sizes to read: no synchronization at all.
        let ints = Int32Array::from(vec![1, 2, 3]);
        let (c_array, c_schema) = export_array_to(&ints, &device).unwrap();
        let before = counter(&device).host_synchronizations();
        let imported = import(&device_type.to_string(), c_array, c_schema);
        assert_eq!(
            counter(&device).host_synchronizations() - before,
            0,
            "{device_type}"
        );
        drop(imported);
    }
}

#[test]
fn allocations_are_aligned_and_copies_round_trip_on_every_kind() {
    let Some(_gpu) = gpu("allocations_are_aligned_and_copies_round_trip_on_every_kind") else {
        return;
    };
    let data: Vec<u8> = (0..=255u8).cycle().take(10_000).collect();
    for device_type in KINDS {
        let device = cuda_device(device_type);
        let empty = device.allocate(0).unwrap();
        assert!(
            !empty.as_ptr().is_null(),
            "{device_type}: zero-length allocation"
        );
        assert_eq!(empty.as_ptr() as usize % 64, 0, "{device_type}");
        assert_eq!(empty.len(), 0);

        let a = device.allocate(data.len()).unwrap();
        let b = device.allocate(data.len()).unwrap();
        assert_eq!(
            a.as_ptr() as usize % 64,
            0,
            "{device_type}: 64-byte aligned"
        );
        let stream = device.create_stream().unwrap();
        let mut back = vec![0u8; data.len()];
        // SAFETY: every end is valid for data.len() bytes until the
        // synchronize below.
        unsafe {
            device
                .copy_from_host(data.as_ptr(), a.as_ptr(), data.len(), &stream)
                .unwrap();
            device
                .copy_device_to_device(device.as_ref(), a.as_ptr(), b.as_ptr(), data.len(), &stream)
                .unwrap();
            device
                .copy_to_host(b.as_ptr(), back.as_mut_ptr(), data.len(), &stream)
                .unwrap();
        }
        device.synchronize_stream(&stream).unwrap();
        assert_eq!(back, data, "{device_type}");

        // An event recorded after the copies completes once they have.
        let event = device.create_event().unwrap();
        assert!(!event.sync_event().is_null());
        device.record_event(&event, &stream).unwrap();
        // SAFETY: the event lives until the end of this scope.
        unsafe { device.synchronize_sync_event(event.sync_event()) }.unwrap();
    }
}

#[test]
fn device_memory_is_not_host_readable_but_host_pinned_and_managed_memory_is() {
    let Some(_gpu) =
        gpu("device_memory_is_not_host_readable_but_host_pinned_and_managed_memory_is")
    else {
        return;
    };
    let gpu_memory = cuda_device(DeviceType::CUDA);
    let host = [0u64; 4];
    let host_ptr = host.as_ptr().cast::<u8>();
    assert!(
        gpu_memory.is_host_accessible_at(host_ptr, 32),
        "pageable host memory"
    );
    // Unregistered, or host memory where the driver maps system memory
    // (HMM/ATS): readable by the host either way.
    let found = cuda::pointer_memory_type(host_ptr.cast()).unwrap();
    assert!(
        found.is_host_accessible(),
        "pageable host memory is {found:?}"
    );
    let on_gpu = gpu_memory.allocate(32).unwrap();
    assert!(
        !gpu_memory.is_host_accessible_at(on_gpu.as_ptr(), 32),
        "device memory"
    );
    for device_type in [DeviceType::CUDA_HOST, DeviceType::CUDA_MANAGED] {
        let memory = cuda_device(device_type).allocate(32).unwrap();
        assert!(
            gpu_memory.is_host_accessible_at(memory.as_ptr(), 32),
            "{device_type} memory seen from the CUDA device"
        );
    }
}

#[test]
fn devices_are_cached_registered_and_found_by_lookup() {
    let Some(_gpu) = gpu("devices_are_cached_registered_and_found_by_lookup") else {
        return;
    };
    for device_type in KINDS {
        let first = cuda_device(device_type);
        let second = cuda_device(device_type);
        assert!(Arc::ptr_eq(&first, &second), "{device_type}: one handle");
        let found = device::lookup(device_type, 0).expect("registered");
        assert!(
            Arc::ptr_eq(&first, &found),
            "{device_type}: lookup finds it"
        );
        assert_eq!((found.device_type(), found.device_id()), (device_type, 0));
        assert_eq!(found.is_host_accessible(), device_type != DeviceType::CUDA);
    }
    let count = cuda::device_count().unwrap();
    assert!(count >= 1);
    let err = cuda::device(DeviceType::CUDA, count as i64).unwrap_err();
    assert!(matches!(err, Error::Device { .. }), "{err}");
    assert!(err.to_string().contains("no such GPU"), "{err}");
    assert!(cuda::device(DeviceType::CUDA, -1).is_err());
}

#[test]
fn a_view_arrays_variadic_sizes_are_exported_in_pinned_memory_readable_by_both_sides() {
    let Some(_gpu) = gpu("a_view_arrays_variadic_sizes_are_exported_in_pinned_memory") else {
        return;
    };
    let views = StringViewArray::from_iter_values(
        (0..100).map(|i| format!("a string longer than twelve bytes, number {i}")),
    );
    for kind in KINDS {
        let (c_array, c_schema) = export_array_to(&views, &cuda_device(kind)).unwrap();
        let last = c_array.array.num_buffers() - 1;
        let sizes = c_array.array.buffer(last).cast();
        assert!(
            matches!(
                cuda::pointer_memory_type(sizes).unwrap(),
                PointerMemoryType::Host { device_ordinal: 0 }
            ),
            "{kind}: the variadic-sizes buffer is pinned host memory"
        );
        let imported = import(&format!("{kind}"), c_array, c_schema);
        assert_same(
            &format!("{kind}"),
            &views,
            imported.to_host().unwrap().as_ref(),
        );
    }
}

#[test]
fn the_host_sources_of_a_copy_are_released_once_the_copy_has_run() {
    let Some(_gpu) = gpu("the_host_sources_of_a_copy_are_released_once_the_copy_has_run") else {
        return;
    };
    let ints = Int32Array::from_iter_values(0..1_000_000);
    let values = ints.values().inner().clone();
    let before = values.strong_count();
    let (c_array, c_schema) = export_array_to(&ints, &cuda_device(DeviceType::CUDA)).unwrap();
    drop(ints);
    let on_gpu = import("sources", c_array, c_schema);
    on_gpu.synchronize().unwrap();
    // The host function runs after the copies, the reaper thread shortly
    // after it: poll (no timing assertion, only an upper bound on waiting).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while values.strong_count() >= before && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    assert!(
        values.strong_count() < before,
        "the device copy no longer holds the host buffer ({} references, {before} before)",
        values.strong_count()
    );
    assert_same(
        "values",
        &Int32Array::from_iter_values(0..1_000_000),
        on_gpu.to_host().unwrap().as_ref(),
    );
}

/// A copy whose source is GPU memory that nothing else holds: the source
/// is freed once the copy has run, by the release thread, never by the
/// driver's host-function thread (which may not call CUDA: under the
/// stand-in such a call is refused and fails the test's guard).
#[test]
fn a_gpu_source_dropped_during_a_copy_is_freed_after_it_off_the_drivers_thread() {
    let Some(_gpu) = gpu("a_gpu_source_dropped_during_a_copy_is_freed_after_it") else {
        return;
    };
    let ints = Int32Array::from_iter_values(0..100_000);
    let multi_gpu = cuda::device_count().unwrap() > 1;
    // Pinned → managed (a host-accessible source), and device memory of GPU 0
    // → GPU 1 (a peer copy) where there are two GPUs.
    let mut routes = vec![(
        cuda_device(DeviceType::CUDA_HOST),
        cuda_device(DeviceType::CUDA_MANAGED),
    )];
    if multi_gpu {
        let gpu1 = cuda::device(DeviceType::CUDA, 1).unwrap();
        routes.push((cuda_device(DeviceType::CUDA), gpu1));
    }
    for (from, to) in routes {
        let case = format!(
            "{} {} -> {} {}",
            from.device_type(),
            from.device_id(),
            to.device_type(),
            to.device_id()
        );
        let (c_array, c_schema) = export_array_to(&ints, &from).unwrap();
        let source = import(&case, c_array, c_schema);
        let moved = source
            .to_device(&to)
            .unwrap_or_else(|e| panic!("{case}: {e}"));
        // The copy now holds the only reference to the source.
        drop(source);
        assert_same(&case, &ints, moved.to_host().unwrap().as_ref());
    }
}

/// A producer's array in GPU 0's device memory whose int32 node claims a
/// million values (4 MB) over an allocation of 100: every copy (to the
/// host, the CPU, pinned and managed memory, GPU 1) is refused before it
/// allocates, naming the buffer and what `cuMemGetAddressRange` said; with
/// its true length the same memory copies.
///
/// The refusal is asserted under the stand-in, whose allocations end in a
/// guard page. On a GPU, what follows an allocation depends on where the
/// driver placed it: a contiguous neighbour lets the range run on (as it
/// must for memory mapped with `cuMemMap`), and then the device cannot
/// tell; the outcome is printed.
#[test]
fn a_device_buffer_claiming_more_than_its_allocation_is_refused_before_any_copy() {
    let Some(_gpu) = gpu("a_device_buffer_claiming_more_than_its_allocation_is_refused") else {
        return;
    };
    let gpu0 = cuda_device(DeviceType::CUDA);
    let values: Vec<i32> = (0..100).collect();
    let with_length = |length: i64| {
        let case = Case::new(
            ArrayNode::new(length, 0, vec![None, i32s(&values)]),
            SchemaNode::new("i", "v"),
        );
        let built = build_on_device(&case, &gpu0, &|bytes| bytes.len());
        // SAFETY: every pointer is valid (the buffer in an allocation of its
        // own); only the length may claim more than the allocation holds.
        unsafe { DeviceArray::try_new(built.array, built.schema, ValidationLevel::Default) }
            .unwrap_or_else(|e| panic!("length {length}: import: {e}"))
    };
    let truthful = with_length(100);
    assert_same(
        "to_host",
        &Int32Array::from(values.clone()),
        truthful.to_host().unwrap().as_ref(),
    );

    let lying = with_length(1_000_000);
    let mut destinations = vec![
        device::cpu(),
        cuda_device(DeviceType::CUDA_HOST),
        cuda_device(DeviceType::CUDA_MANAGED),
    ];
    if cuda::device_count().unwrap() > 1 {
        destinations.push(cuda::device(DeviceType::CUDA, 1).unwrap());
    }
    let mut outcomes = vec![("to_host".to_string(), lying.to_host().map(drop))];
    for to in &destinations {
        let allocations = standin::counts().map(|c| c.allocations);
        let moved = lying.to_device(to).map(drop);
        assert_eq!(
            standin::counts().map(|c| c.allocations),
            allocations,
            "to_device({} {}): nothing is allocated for a refused copy",
            to.device_type(),
            to.device_id()
        );
        outcomes.push((
            format!("to_device({} {})", to.device_type(), to.device_id()),
            moved,
        ));
    }
    for (what, outcome) in outcomes {
        if !standin::loaded() {
            println!("on a GPU, {what} of a claim past its allocation: {outcome:?}");
            continue;
        }
        let message = match outcome {
            Err(Error::Invalid { path, message }) if path == "buffer 1" => message,
            other => panic!("{what}: expected Error::Invalid at buffer 1, got {other:?}"),
        };
        for expected in [
            "the values buffer claims 4000000 bytes at 0x",
            "which are not all memory of the device: device CUDA (id 0): check_device_range: \
             device pointer 0x",
            "(length 4000000) runs 3999600 bytes past the memory the driver knows there: \
             cuMemGetAddressRange gives the allocation of 400 bytes at 0x",
            ", then CUDA_ERROR_NOT_FOUND at 0x",
        ] {
            assert!(
                message.contains(expected),
                "{what}: expected {expected:?} in: {message}"
            );
        }
    }
}

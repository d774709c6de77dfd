//! Import across device types: zero-copy for host-accessible memory, opaque
//! handles for device types without an implementation.

use arrow_array::{Array, Int32Array, StringArray};
use arrow_device::abi::DeviceType;
use arrow_device::{export_array, DeviceArray, Error, ValidationLevel};

fn relabel(array: &dyn Array, device_type: DeviceType, device_id: i64) -> DeviceArray {
    let (mut c_array, schema) = export_array(array).unwrap();
    c_array.device_type = device_type;
    c_array.device_id = device_id;
    // SAFETY: the structs come from this crate's exporter (or a test producer), which follow the interface.
    unsafe { DeviceArray::try_new(c_array, schema, ValidationLevel::Default) }.unwrap()
}

#[test]
fn cpu_import_is_zero_copy() {
    let ints = Int32Array::from(vec![1, 2, 3, 4]);
    let imported = relabel(&ints, DeviceType::CPU, -1);
    let back = imported.to_host().unwrap();
    let back = back.as_any().downcast_ref::<Int32Array>().unwrap();
    assert_eq!(back.values().as_ptr(), ints.values().as_ptr());
    assert_eq!(imported.buffers()[1].ptr, ints.values().as_ptr().cast());
}

#[test]
fn pinned_and_managed_memory_import_zero_copy_without_a_runtime() {
    for device_type in [
        DeviceType::CUDA_HOST,
        DeviceType::CUDA_MANAGED,
        DeviceType::ROCM_HOST,
    ] {
        let strings = StringArray::from(vec![Some("x"), None, Some("yz")]);
        let imported = relabel(&strings, device_type, 0);
        assert_eq!(imported.device_type(), device_type);
        assert_eq!(
            imported.buffers()[2].len,
            Some(3),
            "{device_type}: data size from the last offset"
        );
        let back = imported.to_host().unwrap();
        assert_eq!(back.as_ref(), &strings as &dyn Array);
        let back = back.as_any().downcast_ref::<StringArray>().unwrap();
        assert_eq!(
            back.values().as_ptr(),
            strings.values().as_ptr(),
            "{device_type}: zero-copy"
        );
    }
}

#[test]
fn pinned_memory_with_an_event_needs_the_runtime() {
    let ints = Int32Array::from(vec![1, 2]);
    let (mut c_array, schema) = export_array(&ints).unwrap();
    c_array.device_type = DeviceType::CUDA_HOST;
    c_array.device_id = 0;
    let mut fake_event = 0u64;
    c_array.sync_event = (&mut fake_event as *mut u64).cast();
    // Fixed-width data needs no reads at import; the event is honoured (and
    // fails without CUDA) before the host touches the data.
    // SAFETY: the structs come from this crate's exporter (or a test producer), which follow the interface.
    let imported =
        unsafe { DeviceArray::try_new(c_array, schema, ValidationLevel::Default) }.unwrap();
    let err = imported.to_host().unwrap_err();
    assert!(matches!(err, Error::Device { .. }), "{err}");
    assert!(err.to_string().contains("sync_event"), "{err}");
}

#[test]
fn unknown_device_types_import_as_opaque_handles() {
    let strings = StringArray::from(vec!["a", "bb", "ccc"]);
    for (device_type, id) in [
        (DeviceType::OPENCL, 2),
        (DeviceType::from(17), 0),
        (DeviceType::METAL, 0),
    ] {
        let imported = relabel(&strings, device_type, id);
        assert_eq!(
            (imported.device_type(), imported.device_id()),
            (device_type, id)
        );
        assert!(imported.device().is_none());
        assert_eq!(imported.len(), 3);
        assert_eq!(imported.data_type(), strings.data_type());
        let buffers = imported.buffers();
        assert_eq!(
            buffers[1].len,
            Some(16),
            "offsets size follows from the length"
        );
        assert_eq!(buffers[2].len, None, "data size needs a device read");
        let err = imported.to_host().unwrap_err();
        assert!(
            err.to_string().contains("no device implementation"),
            "{err}"
        );
        let err = imported
            .to_device(&arrow_device::device::cpu())
            .unwrap_err();
        assert!(matches!(err, Error::NotSupported(_)), "{err}");
    }
}

#[test]
fn an_opaque_array_is_handed_on_only_where_the_consumer_can_use_it() {
    use arrow_device::dlpack::{dlpack_device, export_dlpack, DlpackAbi};
    let ints = Int32Array::from(vec![1, 2, 3]);
    let refused = |err: Error, device_type: DeviceType, why: &str| {
        assert!(
            matches!(err, Error::NotSupported(_)),
            "{device_type}: {err:?}"
        );
        let text = err.to_string();
        assert!(
            text.starts_with(&format!(
                "not supported: device type {device_type} id 0 has no implementation here, and"
            )) && text.contains(why),
            "{device_type}: {text}"
        );
    };
    // Device types the spec does not name: no consumer could use them.
    for device_type in [
        DeviceType::from(-1),
        DeviceType::from(0),
        DeviceType::from(17),
    ] {
        let opaque = relabel(&ints, device_type, 0);
        let why = "the spec names no such device type";
        refused(opaque.export().map(drop).unwrap_err(), device_type, why);
        refused(
            dlpack_device(&opaque).map(drop).unwrap_err(),
            device_type,
            why,
        );
        refused(
            export_dlpack(&opaque, DlpackAbi::Versioned)
                .map(drop)
                .unwrap_err(),
            device_type,
            why,
        );
    }
    // A named one without a sync_event: passed on as it came, zero-copy.
    let opencl = relabel(&ints, DeviceType::OPENCL, 0);
    let (c_array, c_schema) = opencl.export().unwrap();
    assert_eq!(
        (c_array.device_type, c_array.device_id),
        (DeviceType::OPENCL, 0)
    );
    assert!(c_array.sync_event.is_null());
    // SAFETY: our own export.
    let again =
        unsafe { DeviceArray::try_new(c_array, c_schema, ValidationLevel::Default) }.unwrap();
    assert_eq!(again.buffers()[1].ptr, opencl.buffers()[1].ptr, "zero-copy");
    let device = dlpack_device(&opencl).unwrap();
    assert_eq!(
        (device.device_type, device.device_id),
        (DeviceType::OPENCL, 0)
    );
    let tensor = export_dlpack(&opencl, DlpackAbi::Versioned).unwrap();
    assert_eq!(
        tensor.dl_tensor().data.cast_const(),
        opencl.buffers()[1].ptr.cast()
    );
    drop((tensor, again));
    // With a sync_event: the device interface carries it along; DLPack
    // cannot, and nobody here can wait on it.
    let (mut c_array, schema) = export_array(&ints).unwrap();
    (c_array.device_type, c_array.device_id) = (DeviceType::OPENCL, 0);
    let mut fake_event = 0u64;
    c_array.sync_event = (&mut fake_event as *mut u64).cast();
    // SAFETY: the event is never dereferenced: opaque devices cannot wait.
    let pending =
        unsafe { DeviceArray::try_new(c_array, schema, ValidationLevel::Default) }.unwrap();
    let (passed_on, _) = pending.export().unwrap();
    assert_eq!(
        passed_on.sync_event,
        pending.sync_event(),
        "the producer's event, passed on"
    );
    let why = "DLPack carries no sync_event";
    refused(
        dlpack_device(&pending).map(drop).unwrap_err(),
        DeviceType::OPENCL,
        why,
    );
    refused(
        export_dlpack(&pending, DlpackAbi::Legacy)
            .map(drop)
            .unwrap_err(),
        DeviceType::OPENCL,
        why,
    );
    drop(passed_on);
    // A view array's variadic sizes were never read on an opaque device.
    let views = relabel(
        &arrow_array::StringViewArray::from(vec!["a", "long enough to be out of line"]),
        DeviceType::OPENCL,
        0,
    );
    refused(
        views.export().map(drop).unwrap_err(),
        DeviceType::OPENCL,
        "variadic buffer sizes",
    );
}

#[test]
fn a_cpu_array_with_a_sync_event_is_rejected_when_read() {
    let strings = StringArray::from(vec!["a"]);
    let (mut c_array, schema) = export_array(&strings).unwrap();
    let mut fake_event = 0u64;
    c_array.sync_event = (&mut fake_event as *mut u64).cast();
    // SAFETY: the structs come from this crate's exporter (or a test producer), which follow the interface.
    let err =
        unsafe { DeviceArray::try_new(c_array, schema, ValidationLevel::Default) }.unwrap_err();
    assert!(err.to_string().contains("sync_event"), "{err}");
}

#[test]
fn slicing_out_of_bounds_is_an_error() {
    let imported = relabel(&Int32Array::from(vec![1, 2, 3]), DeviceType::CPU, -1);
    let err = imported.slice(2, 2).unwrap_err();
    assert!(matches!(err, Error::OutOfRange(_)), "{err:?}");
    assert_eq!(
        err.to_string(),
        "out of range: slice 2..4 of an array of length 3"
    );
    assert_eq!(err.errno(), libc::ERANGE);
    let err = imported.slice(usize::MAX, 2).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "out of range: slice {}..{} of an array of length 3",
            usize::MAX,
            usize::MAX
        )
    );
    let tail = imported.slice(1, 2).unwrap();
    assert_eq!((tail.offset(), tail.len()), (1, 2));
}

#[test]
fn sliced_arrays_copy_only_what_they_reference_and_round_trip_through_the_emulated_device() {
    use arrow_device::device::emulated::{EmulatedConfig, EmulatedDevice};
    use arrow_device::device::DeviceRef;
    use std::time::Duration;
    let device: DeviceRef = EmulatedDevice::new(
        40,
        EmulatedConfig {
            strict: true,
            delay: Duration::from_millis(1),
        },
    );
    arrow_device::device::register(device.clone());
    let strings: StringArray = (0..1000)
        .map(|i| {
            if i % 7 == 0 {
                None
            } else {
                Some(format!("s{i}"))
            }
        })
        .collect();
    let (c_array, schema) = arrow_device::export_array_to(&strings, &device).unwrap();
    assert_eq!(
        (c_array.device_type, c_array.device_id),
        (DeviceType::EXT_DEV, 40)
    );
    assert!(!c_array.sync_event.is_null());
    // SAFETY: the structs come from this crate's exporter (or a test producer), which follow the interface.
    let imported =
        unsafe { DeviceArray::try_new(c_array, schema, ValidationLevel::Default) }.unwrap();
    let slice = imported.slice(421, 17).unwrap();
    let host = slice.to_host().unwrap();
    assert_eq!(host.as_ref(), &strings.slice(421, 17) as &dyn Array);
    // 421 % 8 == 5: a copy keeps the bitmap byte-aligned and takes only the
    // validity and offsets of the referenced slots (plus the 5 before them).
    let copied = slice
        .to_device(&(EmulatedDevice::new(42, EmulatedConfig::default()) as DeviceRef))
        .unwrap();
    assert_eq!((copied.offset(), copied.len()), (5, 17));
    let sizes: Vec<_> = copied.buffers().iter().map(|b| b.len.unwrap()).collect();
    assert_eq!(sizes[..2], [(5 + 17usize).div_ceil(8), (5 + 17 + 1) * 4]);
    assert_eq!(
        copied.to_host().unwrap().as_ref(),
        &strings.slice(421, 17) as &dyn Array
    );
    let inner = slice.slice(3, 9).unwrap();
    assert_eq!(
        inner.to_host().unwrap().as_ref(),
        &strings.slice(424, 9) as &dyn Array
    );
    let on_emulated_1 =
        inner.to_device(&(EmulatedDevice::new(41, EmulatedConfig::default()) as DeviceRef));
    assert!(on_emulated_1.is_ok());
    let back_on_cpu = inner.to_device(&arrow_device::device::cpu()).unwrap();
    assert_eq!(back_on_cpu.device_type(), DeviceType::CPU);
    assert_eq!(
        back_on_cpu.to_host().unwrap().as_ref(),
        &strings.slice(424, 9) as &dyn Array
    );
}

#[test]
fn misaligned_foreign_buffers_are_copied_not_read_in_place() {
    use arrow_array::{Decimal128Array, Int64Array};
    use arrow_device::abi::raw;
    fn misaligned_copy(bytes: &[u8]) -> (Vec<u8>, *const u8) {
        let mut storage = vec![0u8; bytes.len() + 1];
        storage[1..].copy_from_slice(bytes);
        let ptr = storage[1..].as_ptr();
        (storage, ptr)
    }
    let ints = Int64Array::from(vec![Some(1), None, Some(-3), Some(i64::MAX)]);
    let decimals = Decimal128Array::from(vec![Some(12345), None, Some(-1)])
        .with_precision_and_scale(20, 2)
        .unwrap();
    for (array, values) in [
        (&ints as &dyn Array, ints.values().inner().as_slice()),
        (
            &decimals as &dyn Array,
            decimals.values().inner().as_slice(),
        ),
    ] {
        let (_storage, ptr) = misaligned_copy(values);
        assert_eq!(ptr as usize % 2, 1, "the test buffer must be misaligned");
        for level in [
            ValidationLevel::None,
            ValidationLevel::Default,
            ValidationLevel::Full,
        ] {
            let (c_array, schema) = export_array(array).unwrap();
            let raw = raw::array(&c_array.array);
            // SAFETY: the exported struct has two buffers; `_storage` outlives
            // every use of the repointed buffer below.
            unsafe { *raw.buffers.add(1) = ptr.cast() };
            // SAFETY: every pointer is valid (the values buffer is our
            // misaligned copy); only its alignment is unusual.
            let imported = unsafe { DeviceArray::try_new(c_array, schema, level) }.unwrap();
            assert_eq!(
                imported.buffers()[1].ptr,
                ptr,
                "the import describes the producer's pointer"
            );
            let back = imported.to_host().unwrap();
            assert_eq!(back.as_ref(), array, "{level:?}: values survive");
            let values_ptr = back.to_data().buffers()[0].as_ptr();
            assert_ne!(values_ptr, ptr, "{level:?}: misaligned data is copied");
            assert_eq!(values_ptr as usize % 8, 0, "{level:?}: the copy is aligned");
        }
    }
}

#[test]
fn slices_of_large_string_columns_copy_only_their_bytes_off_the_device() {
    use arrow_array::{LargeStringArray, StructArray};
    use arrow_device::device::emulated::{EmulatedConfig, EmulatedDevice};
    use arrow_device::device::DeviceRef;
    use std::sync::Arc;
    use std::time::Duration;
    let device: DeviceRef = EmulatedDevice::new(
        43,
        EmulatedConfig {
            strict: true,
            delay: Duration::from_millis(1),
        },
    );
    arrow_device::device::register(device.clone());
    // 2 MiB of string data: above the size at which slices are narrowed.
    let row = |i: usize| (i % 11 != 0).then(|| format!("{i:064}"));
    let strings: StringArray = (0..32_768).map(row).collect();
    let large: LargeStringArray = (0..32_768).map(row).collect();
    let nested = StructArray::from(vec![(
        Arc::new(arrow_schema::Field::new(
            "s",
            strings.data_type().clone(),
            true,
        )),
        Arc::new(strings.clone()) as arrow_array::ArrayRef,
    )]);
    for array in [&strings as &dyn Array, &large, &nested] {
        let (c_array, schema) = arrow_device::export_array_to(array, &device).unwrap();
        // SAFETY: the structs come from this crate's exporter.
        let imported =
            unsafe { DeviceArray::try_new(c_array, schema, ValidationLevel::Default) }.unwrap();
        let slice = imported.slice(20_001, 10).unwrap();
        let back = slice.to_host().unwrap();
        assert_eq!(back.as_ref(), &array.slice(20_001, 10) as &dyn Array);
        let data_len = match back.as_any().downcast_ref::<StringArray>() {
            Some(s) => s.values().len(),
            None => match back.as_any().downcast_ref::<LargeStringArray>() {
                Some(s) => s.values().len(),
                None => {
                    let s = back.as_any().downcast_ref::<StructArray>().unwrap();
                    s.column(0)
                        .as_any()
                        .downcast_ref::<StringArray>()
                        .unwrap()
                        .values()
                        .len()
                }
            },
        };
        // 10 rows (one null) of 64 bytes, plus the up to 7 rows before the
        // slice that keep the validity bitmap byte-aligned.
        assert!(
            data_len <= 17 * 64,
            "copied {data_len} bytes of string data for 10 rows"
        );
        // The whole column still copies whole.
        assert_eq!(imported.to_host().unwrap().as_ref(), array);
    }
}

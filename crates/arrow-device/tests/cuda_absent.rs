//! The CUDA device (feature `cuda`) where it cannot run: without `libcuda`
//! every entry point reports a clear error instead of panicking, imports of
//! pinned and managed memory still work through host access; and the pure
//! logic (device type → allocator, pointer attributes → memory type), which
//! needs no driver.
//!
//! The tests that need `libcuda` to be absent skip themselves (with a note)
//! on a machine that has it.
#![cfg(feature = "cuda")]

use arrow_array::{Array, Int32Array};
use arrow_device::abi::DeviceType;
use arrow_device::cai::cuda::{export_cai, import_cai};
use std::sync::Arc;

use arrow_device::cai;
use arrow_device::device;
use arrow_device::device::cuda::{self, MemoryKind, PointerMemoryType};
use arrow_device::{export_array, DeviceArray, Error, ValidationLevel};

/// True (after printing why) when `libcuda` is present, so the test must
/// not assert its absence.
fn driver_present(test: &str) -> bool {
    let present = cuda::is_driver_present();
    if present {
        println!("{test}: skipped, libcuda is present on this machine");
    }
    present
}

#[test]
fn without_libcuda_nothing_is_available() {
    if driver_present("without_libcuda_nothing_is_available") {
        return;
    }
    assert!(!cuda::is_available());
    let err = cuda::device_count().unwrap_err();
    assert!(err.to_string().contains("libcuda"), "{err}");
}

#[test]
fn without_libcuda_every_cuda_device_type_is_a_clear_error_naming_libcuda() {
    if driver_present("without_libcuda_every_cuda_device_type_is_a_clear_error") {
        return;
    }
    for device_type in [
        DeviceType::CUDA,
        DeviceType::CUDA_HOST,
        DeviceType::CUDA_MANAGED,
    ] {
        // Twice: the second call takes the cached path.
        for _ in 0..2 {
            let err = cuda::device(device_type, 0).unwrap_err();
            assert!(
                matches!(err, Error::NotSupported(_)),
                "{device_type}: {err}"
            );
            let message = err.to_string();
            assert!(
                message.contains("CUDA driver library (libcuda.so) not found"),
                "{device_type}: {message}"
            );
            assert!(
                message.contains("LD_LIBRARY_PATH"),
                "{device_type}: {message}"
            );
        }
    }
}

#[test]
fn without_libcuda_pointer_classification_is_an_error_naming_libcuda() {
    if driver_present("without_libcuda_pointer_classification_is_an_error") {
        return;
    }
    let value = 7u64;
    let err = cuda::pointer_memory_type((&value as *const u64).cast()).unwrap_err();
    assert!(err.to_string().contains("libcuda"), "{err}");
}

#[test]
fn without_libcuda_lookup_falls_back_to_host_access_for_pinned_and_managed_memory() {
    if driver_present("without_libcuda_lookup_falls_back_to_host_access") {
        return;
    }
    assert!(device::lookup(DeviceType::CUDA, 0).is_none());
    for device_type in [DeviceType::CUDA_HOST, DeviceType::CUDA_MANAGED] {
        let found = device::lookup(device_type, 0).expect("host access without the runtime");
        assert_eq!((found.device_type(), found.device_id()), (device_type, 0));
        assert!(found.is_host_accessible());
        assert!(
            cuda::CudaDevice::of(found.as_ref()).is_none(),
            "{device_type}: not the CUDA device"
        );
        // Import reads the relabelled host array zero-copy.
        let ints = Int32Array::from(vec![4, 5, 6]);
        let (mut c_array, c_schema) = export_array(&ints).unwrap();
        c_array.device_type = device_type;
        c_array.device_id = 0;
        // SAFETY: this crate's exporter's structs, relabelled as host-accessible memory.
        let imported =
            unsafe { DeviceArray::try_new(c_array, c_schema, ValidationLevel::Default) }.unwrap();
        assert_eq!(imported.to_host().unwrap().as_ref(), &ints as &dyn Array);
    }
}

/// A validated plan for `n` int32 values at a made-up device address.
fn int32_plan(n: i128, mask: bool, stream: Option<i128>) -> cai::ImportPlan {
    let int = |v: i128| cai::Value::Int(v);
    let interface = |typestr: &str, ptr: i128| {
        vec![
            ("shape".to_string(), cai::Value::Tuple(vec![int(n)])),
            ("typestr".to_string(), cai::Value::Str(typestr.into())),
            (
                "data".to_string(),
                cai::Value::Tuple(vec![int(ptr), cai::Value::Bool(false)]),
            ),
            ("version".to_string(), int(3)),
        ]
    };
    let mut entries = interface("<i4", 0x7f00_0000_0000);
    if mask {
        let mask = interface("|b1", 0x7f00_0001_0000);
        entries.push(("mask".to_string(), cai::Value::Dict(mask)));
    }
    if let Some(stream) = stream {
        entries.push(("stream".to_string(), int(stream)));
    }
    cai::CudaArrayInterface::from_entries(entries)
        .and_then(|c| c.validate())
        .unwrap()
}

#[test]
fn without_libcuda_importing_an_interface_is_an_error_naming_libcuda() {
    if driver_present("without_libcuda_importing_an_interface_is_an_error") {
        return;
    }
    for plan in [
        int32_plan(4, false, None),
        int32_plan(4, true, Some(1)),
        int32_plan(0, false, Some(2)),
    ] {
        // SAFETY: nothing is dereferenced: the driver is missing, so the
        // pointer cannot even be classified.
        let err = unsafe { import_cai(&plan, Arc::new(())) }.unwrap_err();
        assert!(matches!(err, Error::NotSupported(_)), "{err}");
        assert!(err.to_string().contains("libcuda"), "{err}");
    }
}

#[test]
fn the_generic_interface_import_refuses_conversions_and_names_them() {
    let cpu = device::cpu();
    // SAFETY: refused before anything is built or read.
    let err = unsafe { cai::import(&int32_plan(4, true, None), cpu, Arc::new(())) }.unwrap_err();
    assert!(matches!(err, Error::NotSupported(_)), "{err}");
    assert_eq!(
        err.to_string(),
        "not supported: a masked array (an element-wise mask, Arrow's validity is a bitmap): \
         needs a device conversion into an Arrow bitmap, which device type CPU does not run \
         (the CUDA devices do)"
    );
}

#[test]
fn without_a_cuda_device_an_export_describes_arrays_without_nulls_only() {
    if driver_present("without_a_cuda_device_an_export_describes_arrays_without_nulls_only") {
        return;
    }
    let on_cuda = |ints: &Int32Array| {
        let (mut c_array, c_schema) = export_array(ints).unwrap();
        c_array.device_type = DeviceType::CUDA;
        c_array.device_id = 0;
        // SAFETY: this crate's exporter's structs relabelled as CUDA memory
        // (never read: no CUDA device implementation is loaded).
        unsafe { DeviceArray::try_new(c_array, c_schema, ValidationLevel::Default) }.unwrap()
    };
    let ints = Int32Array::from(vec![1, 2, 3]);
    let exported = export_cai(&on_cuda(&ints)).unwrap();
    assert!(exported.mask.is_none());
    assert_eq!(exported.interface.shape, [3]);
    assert_eq!(exported.interface.typestr, "<i4");
    assert_eq!(
        exported.interface.data,
        (ints.values().inner().as_ptr() as usize, true)
    );
    assert_eq!(exported.interface.stream, None);

    let nulls = Int32Array::from(vec![Some(1), None]);
    let err = export_cai(&on_cuda(&nulls)).unwrap_err();
    assert!(matches!(err, Error::NotSupported(_)), "{err}");
    assert!(err.to_string().contains("1 nulls"), "{err}");

    let (c_array, c_schema) = export_array(&ints).unwrap();
    // SAFETY: this crate's exporter's structs.
    let on_cpu = unsafe { DeviceArray::try_new(c_array, c_schema, ValidationLevel::Default) };
    let err = export_cai(&on_cpu.unwrap()).unwrap_err();
    assert!(err.to_string().contains("this array is on CPU"), "{err}");
}

#[test]
fn a_non_cuda_device_type_is_refused_whether_or_not_the_driver_is_there() {
    for device_type in [DeviceType::CPU, DeviceType::ROCM, DeviceType::EXT_DEV] {
        let err = cuda::device(device_type, 0).unwrap_err();
        assert!(
            matches!(err, Error::NotSupported(_)),
            "{device_type}: {err}"
        );
        assert!(
            err.to_string().contains("not a CUDA memory type"),
            "{device_type}: {err}"
        );
    }
}

#[test]
fn each_cuda_device_type_maps_to_its_allocator_and_back() {
    let cases = [
        (DeviceType::CUDA, MemoryKind::Device, false),
        (DeviceType::CUDA_HOST, MemoryKind::Pinned, true),
        (DeviceType::CUDA_MANAGED, MemoryKind::Managed, true),
    ];
    for (device_type, kind, cpu_accessible) in cases {
        assert_eq!(MemoryKind::from_device_type(device_type), Some(kind));
        assert_eq!(kind.device_type(), device_type);
        assert_eq!(kind.is_host_accessible(), cpu_accessible, "{device_type}");
        assert_eq!(
            device_type.is_host_accessible(),
            cpu_accessible,
            "{device_type}: the kind agrees with the device type"
        );
    }
    for other in [
        DeviceType::CPU,
        DeviceType::ROCM,
        DeviceType::ROCM_HOST,
        DeviceType::EXT_DEV,
    ] {
        assert_eq!(MemoryKind::from_device_type(other), None, "{other}");
    }
}

#[test]
fn pointer_attributes_classify_into_device_types() {
    // (CU_POINTER_ATTRIBUTE_MEMORY_TYPE, IS_MANAGED, DEVICE_ORDINAL)
    let cases = [
        // Memory CUDA does not know: ordinary host memory.
        (
            (0, false, 0),
            PointerMemoryType::Unregistered,
            Some((DeviceType::CPU, -1)),
            true,
        ),
        // CU_MEMORYTYPE_HOST: pinned or registered host memory.
        (
            (1, false, 2),
            PointerMemoryType::Host { device_ordinal: 2 },
            Some((DeviceType::CUDA_HOST, 2)),
            true,
        ),
        // CU_MEMORYTYPE_DEVICE.
        (
            (2, false, 1),
            PointerMemoryType::Device { device_ordinal: 1 },
            Some((DeviceType::CUDA, 1)),
            false,
        ),
        // Managed memory reports DEVICE (or HOST) plus IS_MANAGED: managed wins.
        (
            (2, true, 0),
            PointerMemoryType::Managed { device_ordinal: 0 },
            Some((DeviceType::CUDA_MANAGED, 0)),
            true,
        ),
        (
            (1, true, 3),
            PointerMemoryType::Managed { device_ordinal: 3 },
            Some((DeviceType::CUDA_MANAGED, 3)),
            true,
        ),
        // CU_MEMORYTYPE_UNIFIED.
        (
            (4, false, 0),
            PointerMemoryType::Managed { device_ordinal: 0 },
            Some((DeviceType::CUDA_MANAGED, 0)),
            true,
        ),
        // CU_MEMORYTYPE_ARRAY and anything newer: unknown, never read by the host.
        (
            (3, false, 0),
            PointerMemoryType::Unknown { memory_type: 3 },
            None,
            false,
        ),
        (
            (99, false, 0),
            PointerMemoryType::Unknown { memory_type: 99 },
            None,
            false,
        ),
    ];
    for ((memory_type, is_managed, ordinal), expected, device, host_readable) in cases {
        let found = PointerMemoryType::from_attributes(memory_type, is_managed, ordinal);
        let case = format!("memory type {memory_type}, managed {is_managed}, ordinal {ordinal}");
        assert_eq!(found, expected, "{case}");
        assert_eq!(found.device(), device, "{case}");
        assert_eq!(found.is_host_accessible(), host_readable, "{case}");
    }
}

#[test]
fn ordering_a_non_cuda_array_after_a_cuda_stream_is_not_supported_naming_its_device() {
    let array = DeviceArray::from_array(&Int32Array::from(vec![1, 2]));
    // SAFETY: no stream is touched: the CPU device is refused first.
    let err = unsafe { array.ordered_after_stream(device::StreamSync::Legacy) }.unwrap_err();
    assert!(matches!(err, Error::NotSupported(_)), "{err:?}");
    assert_eq!(
        err.to_string(),
        "not supported: device type CPU id -1 is not a CUDA device of this crate"
    );
    // StreamSync::None asks for no ordering: the array comes back as it is.
    // SAFETY: as above; nothing is recorded.
    let same = unsafe { array.ordered_after_stream(device::StreamSync::None) }.unwrap();
    assert_eq!(
        same.to_host().unwrap().as_ref(),
        &Int32Array::from(vec![1, 2]) as &dyn Array
    );
}

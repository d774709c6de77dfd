//! Acceptance suite: every type arrow-rs supports round-trips export → import
//! with values equal to the input, sliced and unsliced, on the CPU and on the
//! emulated device in strict mode with delayed completion, and every exported
//! struct is released exactly once, only after everything that refers to it
//! has been dropped.
//!
//! Each test runs every case and reports all failing cases together, each
//! named after its type (see `common::all_types`).

mod common;

use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_device::abi::raw;
use arrow_device::device;
use arrow_device::{
    export_array, export_array_to, ArrowDeviceArray, DeviceArray, DeviceType, ValidationLevel,
};

use common::{
    all_types, assert_batch_round_trips, assert_released_once, assert_same, batch_with_metadata,
    counting, emulated, for_each_case,
};

/// The windows each case is sliced at: offset 1 (a partial first byte of the
/// bitmaps), offset 3 to the end (a bit offset that is not a byte boundary),
/// and an empty window in the middle.
fn windows(len: usize) -> Vec<(usize, usize)> {
    if len >= 4 {
        vec![(1, len - 3), (3, len - 3), (2, 0)]
    } else {
        vec![(0, len)]
    }
}

fn import(
    case: &str,
    array: ArrowDeviceArray,
    schema: arrow_device::abi::FFI_ArrowSchema,
    level: ValidationLevel,
) -> DeviceArray {
    // SAFETY: the structs come from this crate's exporter (or a test producer), which follow the interface.
    unsafe { DeviceArray::try_new(array, schema, level) }
        .unwrap_or_else(|e| panic!("{case}: import failed: {e}"))
}

fn to_host(case: &str, array: &DeviceArray) -> ArrayRef {
    array
        .to_host()
        .unwrap_or_else(|e| panic!("{case}: to_host failed: {e}"))
}

// ---------------------------------------------------------------- CPU

#[test]
fn every_type_round_trips_on_the_cpu_with_full_validation() {
    for_each_case("CPU round trip", |case, array| {
        let (c_array, c_schema) =
            export_array(array.as_ref()).unwrap_or_else(|e| panic!("{case}: export failed: {e}"));
        assert_eq!(c_array.device_type, DeviceType::CPU, "{case}: device_type");
        assert_eq!(
            c_array.device_id, -1,
            "{case}: a CPU array has device_id -1"
        );
        assert!(
            c_array.sync_event.is_null(),
            "{case}: a CPU array has no sync_event"
        );
        assert_eq!(
            c_array.reserved, [0; 3],
            "{case}: reserved bytes must be zero"
        );
        let (c_array, c_schema, counters) = counting(c_array, c_schema);

        let imported = import(case, c_array, c_schema, ValidationLevel::Full);
        assert_eq!(
            counters.schema_releases(),
            1,
            "{case}: import releases the schema once it has read it"
        );
        assert_eq!(
            counters.array_releases(),
            0,
            "{case}: the array is released only once the import is dropped"
        );
        assert_eq!(imported.len(), array.len(), "{case}: imported length");
        assert_eq!(
            imported.data_type(),
            array.data_type(),
            "{case}: imported data type"
        );
        assert_same(case, array.as_ref(), to_host(case, &imported).as_ref());
        drop(imported);
        assert_released_once(case, &counters);
    });
}

#[test]
fn every_type_round_trips_sliced_after_import_on_the_cpu() {
    for_each_case("CPU DeviceArray::slice", |case, array| {
        let (c_array, c_schema) = export_array(array.as_ref()).unwrap();
        let (c_array, c_schema, counters) = counting(c_array, c_schema);
        let imported = import(case, c_array, c_schema, ValidationLevel::Full);
        for (offset, len) in windows(array.len()) {
            let case = format!("{case} slice({offset}, {len})");
            let slice = imported
                .slice(offset, len)
                .unwrap_or_else(|e| panic!("{case}: {e}"));
            assert_eq!(slice.len(), len, "{case}: slice length");
            assert_same(
                &case,
                array.slice(offset, len).as_ref(),
                to_host(&case, &slice).as_ref(),
            );
        }
        drop(imported);
        assert_released_once(case, &counters);
    });
}

#[test]
fn every_already_sliced_array_exports_and_imports_unchanged() {
    for_each_case("export of a sliced arrow array", |case, array| {
        for (offset, len) in windows(array.len()) {
            let case = format!("{case} sliced({offset}, {len}) before export");
            let sliced = array.slice(offset, len);
            let (c_array, c_schema) =
                export_array(sliced.as_ref()).unwrap_or_else(|e| panic!("{case}: export: {e}"));
            let (c_array, c_schema, counters) = counting(c_array, c_schema);
            let imported = import(&case, c_array, c_schema, ValidationLevel::Full);
            assert_same(&case, sliced.as_ref(), to_host(&case, &imported).as_ref());
            // A slice of the slice exercises an offset on top of the export's.
            if len >= 2 {
                let inner = imported.slice(1, len - 1).unwrap();
                assert_same(
                    &format!("{case} then slice(1, {})", len - 1),
                    sliced.slice(1, len - 1).as_ref(),
                    to_host(&case, &inner).as_ref(),
                );
            }
            drop(imported);
            assert_released_once(&case, &counters);
        }
    });
}

#[test]
fn host_arrays_from_to_host_keep_the_cpu_export_alive_until_dropped() {
    for_each_case("CPU to_host lifetime", |case, array| {
        let (c_array, c_schema) = export_array(array.as_ref()).unwrap();
        let (c_array, c_schema, counters) = counting(c_array, c_schema);
        let imported = import(case, c_array, c_schema, ValidationLevel::Full);
        let host = to_host(case, &imported);
        let start = array.len().min(1);
        let slice = imported
            .slice(start, array.len() - start)
            .unwrap_or_else(|e| panic!("{case}: {e}"));
        drop(imported);
        // The arrow-rs buffers point into the exported memory (zero-copy):
        // the struct must outlive them.
        let has_memory = host.to_data().buffers().iter().any(|b| !b.is_empty())
            || host.to_data().nulls().is_some()
            || !host.to_data().child_data().is_empty();
        if has_memory {
            assert_eq!(
                counters.array_releases(),
                0,
                "{case}: released while a to_host result still reads it"
            );
        }
        assert_same(case, array.as_ref(), host.as_ref());
        drop(host);
        assert_eq!(
            counters.array_releases(),
            0,
            "{case}: released while a slice of the import is alive"
        );
        assert_same(
            case,
            array.slice(start, array.len() - start).as_ref(),
            to_host(case, &slice).as_ref(),
        );
        drop(slice);
        assert_released_once(case, &counters);
    });
}

#[test]
fn a_re_export_of_an_imported_cpu_array_round_trips_and_keeps_the_original_alive() {
    for_each_case("CPU DeviceArray::export", |case, array| {
        let (c_array, c_schema) = export_array(array.as_ref()).unwrap();
        let (c_array, c_schema, first) = counting(c_array, c_schema);
        let imported = import(case, c_array, c_schema, ValidationLevel::Full);
        let (again, again_schema) = imported
            .export()
            .unwrap_or_else(|e| panic!("{case}: re-export: {e}"));
        assert_eq!(
            (again.device_type, again.device_id),
            (DeviceType::CPU, -1),
            "{case}: re-export device"
        );
        let (again, again_schema, second) = counting(again, again_schema);
        drop(imported);
        assert_eq!(
            first.array_releases(),
            0,
            "{case}: the original was released while its re-export lives"
        );
        let reimported = import(case, again, again_schema, ValidationLevel::Full);
        assert_same(case, array.as_ref(), to_host(case, &reimported).as_ref());
        drop(reimported);
        assert_released_once(&format!("{case} (re-export)"), &second);
        assert_released_once(&format!("{case} (original)"), &first);
    });
}

#[test]
fn to_device_cpu_of_a_cpu_array_round_trips() {
    let cpu = device::cpu();
    for_each_case("CPU to_device(cpu)", |case, array| {
        let (c_array, c_schema) = export_array(array.as_ref()).unwrap();
        let (c_array, c_schema, counters) = counting(c_array, c_schema);
        let imported = import(case, c_array, c_schema, ValidationLevel::Full);
        let moved = imported
            .to_device(&cpu)
            .unwrap_or_else(|e| panic!("{case}: to_device(cpu): {e}"));
        drop(imported);
        assert_eq!(
            (moved.device_type(), moved.device_id()),
            (DeviceType::CPU, -1),
            "{case}: device"
        );
        assert_same(case, array.as_ref(), to_host(case, &moved).as_ref());
        drop(moved);
        assert_released_once(case, &counters);
    });
}

#[test]
fn every_type_imports_through_raw_pointers_and_leaves_the_sources_released() {
    let cpu = device::cpu();
    for_each_case("CPU try_from_raw", |case, array| {
        // export_array_to onto the CPU is the zero-copy export too.
        let (c_array, c_schema) =
            export_array_to(array.as_ref(), &cpu).unwrap_or_else(|e| panic!("{case}: {e}"));
        assert_eq!(
            (c_array.device_type, c_array.device_id),
            (DeviceType::CPU, -1),
            "{case}: device"
        );
        assert!(
            c_array.sync_event.is_null(),
            "{case}: a CPU export has no sync_event"
        );
        let (mut c_array, mut c_schema, counters) = counting(c_array, c_schema);
        // SAFETY: both structs are valid, initialized and owned by this frame.
        let imported = unsafe {
            DeviceArray::try_from_raw(&mut c_array, &mut c_schema, ValidationLevel::Full)
        }
        .unwrap_or_else(|e| panic!("{case}: try_from_raw: {e}"));
        assert!(
            c_array.is_released(),
            "{case}: the source array is marked released after the move"
        );
        assert!(
            raw::schema(&c_schema).release.is_none(),
            "{case}: the source schema is marked released after the move"
        );
        drop((c_array, c_schema));
        assert_eq!(
            counters.array_releases(),
            0,
            "{case}: dropping the moved-from source must not release"
        );
        assert_same(case, array.as_ref(), to_host(case, &imported).as_ref());
        drop(imported);
        assert_released_once(case, &counters);
    });
}

/// All non-empty cases as the columns of one batch (first 7 slots each).
fn batch_of_all_types() -> RecordBatch {
    let columns: Vec<(String, ArrayRef)> = all_types()
        .into_iter()
        .filter(|(_, a)| a.len() >= 7)
        .map(|(n, a)| (n, a.slice(0, 7)))
        .collect();
    assert!(
        columns.len() >= 60,
        "only {} non-empty cases",
        columns.len()
    );
    RecordBatch::try_from_iter(columns).unwrap()
}

#[test]
fn a_record_batch_round_trips_with_schema_and_field_metadata_on_the_cpu() {
    let batch = batch_with_metadata();
    assert_batch_round_trips("batch with metadata", &batch, None);
    assert_batch_round_trips("batch with metadata sliced(1, 5)", &batch.slice(1, 5), None);
    let field = batch.schema().field(0).clone();
    assert_eq!(field.metadata()[common::EXTENSION_NAME], "arrow.uuid");
}

#[test]
fn a_record_batch_of_every_type_round_trips_on_the_cpu() {
    let batch = batch_of_all_types();
    assert_batch_round_trips("batch of all types", &batch, None);
    assert_batch_round_trips("batch of all types sliced(3, 4)", &batch.slice(3, 4), None);
}

// ---------------------------------------------------------------- emulated device

/// Exports `array` onto emulated device 0 and checks the device fields.
fn export_to_emulated(
    case: &str,
    array: &dyn Array,
) -> (ArrowDeviceArray, arrow_device::abi::FFI_ArrowSchema) {
    let (c_array, c_schema) = export_array_to(array, &emulated(0))
        .unwrap_or_else(|e| panic!("{case}: export to the emulated device: {e}"));
    assert_eq!(
        c_array.device_type,
        DeviceType::EXT_DEV,
        "{case}: device_type"
    );
    assert_eq!(c_array.device_id, 0, "{case}: device_id");
    assert!(
        !c_array.sync_event.is_null(),
        "{case}: a device export carries the copy's sync_event"
    );
    assert_eq!(
        c_array.reserved, [0; 3],
        "{case}: reserved bytes must be zero"
    );
    (c_array, c_schema)
}

#[test]
fn every_type_round_trips_through_the_emulated_device_in_strict_delayed_mode() {
    for_each_case("emulated round trip", |case, array| {
        let (c_array, c_schema) = export_to_emulated(case, array.as_ref());
        let (c_array, c_schema, counters) = counting(c_array, c_schema);
        let imported = import(case, c_array, c_schema, ValidationLevel::Default);
        assert_eq!(
            (imported.device_type(), imported.device_id()),
            (DeviceType::EXT_DEV, 0),
            "{case}: device"
        );
        assert!(
            !imported.sync_event().is_null(),
            "{case}: the import keeps the producer's sync_event"
        );
        assert_eq!(imported.len(), array.len(), "{case}: imported length");
        // Delayed copies poison their destination until they have run: equal
        // values prove that the import and the copy back waited on the event.
        let host = to_host(case, &imported);
        assert_same(case, array.as_ref(), host.as_ref());
        drop(imported);
        assert_released_once(case, &counters);
        // The host copy owns its memory.
        assert_same(case, array.as_ref(), host.as_ref());
    });
}

#[test]
fn every_type_sliced_on_the_emulated_device_copies_back_equal() {
    for_each_case("emulated DeviceArray::slice", |case, array| {
        let (c_array, c_schema) = export_to_emulated(case, array.as_ref());
        let (c_array, c_schema, counters) = counting(c_array, c_schema);
        let imported = import(case, c_array, c_schema, ValidationLevel::Default);
        let slices: Vec<_> = windows(array.len())
            .into_iter()
            .map(|(offset, len)| {
                (
                    offset,
                    len,
                    imported
                        .slice(offset, len)
                        .unwrap_or_else(|e| panic!("{case}: {e}")),
                )
            })
            .collect();
        drop(imported);
        assert_eq!(
            counters.array_releases(),
            0,
            "{case}: released while slices of the import are alive"
        );
        for (offset, len, slice) in slices {
            let case = format!("{case} slice({offset}, {len})");
            assert_same(
                &case,
                array.slice(offset, len).as_ref(),
                to_host(&case, &slice).as_ref(),
            );
        }
        assert_released_once(case, &counters);
    });
}

#[test]
fn every_already_sliced_array_round_trips_through_the_emulated_device() {
    for_each_case("emulated export of a sliced arrow array", |case, array| {
        for (offset, len) in windows(array.len()) {
            let case = format!("{case} sliced({offset}, {len}) before export");
            let sliced = array.slice(offset, len);
            let (c_array, c_schema) = export_to_emulated(&case, sliced.as_ref());
            let imported = import(&case, c_array, c_schema, ValidationLevel::Default);
            assert_same(&case, sliced.as_ref(), to_host(&case, &imported).as_ref());
        }
    });
}

#[test]
fn every_type_copies_to_a_peer_emulated_device_and_back_to_the_cpu() {
    let peer = emulated(1);
    let cpu = device::cpu();
    for_each_case("emulated to_device", |case, array| {
        let (c_array, c_schema) = export_to_emulated(case, array.as_ref());
        let (c_array, c_schema, counters) = counting(c_array, c_schema);
        let imported = import(case, c_array, c_schema, ValidationLevel::Default);

        let on_peer = imported
            .to_device(&peer)
            .unwrap_or_else(|e| panic!("{case}: to_device(emulated 1): {e}"));
        assert_eq!(
            (on_peer.device_type(), on_peer.device_id()),
            (DeviceType::EXT_DEV, 1),
            "{case}: peer device"
        );
        assert!(
            !on_peer.sync_event().is_null(),
            "{case}: a device copy carries its own sync_event"
        );
        let on_cpu = imported
            .to_device(&cpu)
            .unwrap_or_else(|e| panic!("{case}: to_device(cpu): {e}"));
        assert_eq!(
            (on_cpu.device_type(), on_cpu.device_id()),
            (DeviceType::CPU, -1),
            "{case}: CPU device"
        );
        drop(imported);

        assert_same(
            &format!("{case} on emulated 1"),
            array.as_ref(),
            to_host(case, &on_peer).as_ref(),
        );
        assert_same(
            &format!("{case} to_device(cpu)"),
            array.as_ref(),
            to_host(case, &on_cpu).as_ref(),
        );
        // And a slice of the peer copy, then back onto device 0.
        if array.len() >= 4 {
            let back = on_peer
                .slice(3, array.len() - 3)
                .unwrap()
                .to_device(&emulated(0))
                .unwrap();
            assert_eq!(back.device_id(), 0, "{case}: copied back to device 0");
            assert_same(
                &format!("{case} peer slice(3, ..) back on 0"),
                array.slice(3, array.len() - 3).as_ref(),
                to_host(case, &back).as_ref(),
            );
        }
        drop((on_peer, on_cpu));
        assert_released_once(case, &counters);
    });
}

#[test]
fn a_re_export_of_an_emulated_array_re_imports_equal() {
    for_each_case("emulated DeviceArray::export", |case, array| {
        let (c_array, c_schema) = export_to_emulated(case, array.as_ref());
        let (c_array, c_schema, first) = counting(c_array, c_schema);
        let imported = import(case, c_array, c_schema, ValidationLevel::Default);
        let (again, again_schema) = imported
            .export()
            .unwrap_or_else(|e| panic!("{case}: re-export: {e}"));
        assert_eq!(
            (again.device_type, again.device_id),
            (DeviceType::EXT_DEV, 0),
            "{case}: re-export device"
        );
        assert!(
            !again.sync_event.is_null(),
            "{case}: the re-export passes the producer's sync_event on"
        );
        assert_eq!(
            again.reserved, [0; 3],
            "{case}: reserved bytes must be zero"
        );
        let (again, again_schema, second) = counting(again, again_schema);
        drop(imported);
        assert_eq!(
            first.array_releases(),
            0,
            "{case}: the original was released while its re-export lives"
        );
        let reimported = import(case, again, again_schema, ValidationLevel::Default);
        assert_same(case, array.as_ref(), to_host(case, &reimported).as_ref());
        if array.len() >= 4 {
            let slice = reimported.slice(1, array.len() - 3).unwrap();
            assert_same(
                &format!("{case} re-export slice(1, ..)"),
                array.slice(1, array.len() - 3).as_ref(),
                to_host(case, &slice).as_ref(),
            );
        }
        drop(reimported);
        assert_released_once(&format!("{case} (re-export)"), &second);
        assert_released_once(&format!("{case} (original)"), &first);
    });
}

#[test]
fn a_record_batch_round_trips_through_the_emulated_device() {
    let device = emulated(0);
    let batch = batch_with_metadata();
    assert_batch_round_trips("emulated batch with metadata", &batch, Some(&device));
    assert_batch_round_trips(
        "emulated batch with metadata sliced(1, 5)",
        &batch.slice(1, 5),
        Some(&device),
    );
    let all = batch_of_all_types();
    assert_batch_round_trips("emulated batch of all types", &all, Some(&device));
    assert_batch_round_trips(
        "emulated batch of all types sliced(3, 4)",
        &all.slice(3, 4),
        Some(&device),
    );
}

/// Minimal case of the view-type failures above: the variadic-sizes buffer
/// of a device export lives in host memory (export.rs), and the importer must
/// read it there rather than through the device's copy API.
#[test]
fn a_string_view_with_a_variadic_buffer_imports_from_the_emulated_device() {
    let array = arrow_array::StringViewArray::from(vec!["a string longer than twelve bytes"]);
    let (c_array, c_schema) = export_to_emulated("utf8_view", &array);
    // SAFETY: the structs come from this crate's exporter (or a test producer), which follow the interface.
    let imported = unsafe { DeviceArray::try_new(c_array, c_schema, ValidationLevel::Default) }
        .expect("a view array exported by this crate onto the emulated device imports");
    assert_same("utf8_view", &array, imported.to_host().unwrap().as_ref());
}

#[test]
fn an_emulated_array_released_without_being_read_is_released_once() {
    // A consumer may drop an array without waiting on its sync_event; the
    // producer must still free everything exactly once.
    for_each_case("emulated release without read", |case, array| {
        let (c_array, c_schema) = export_to_emulated(case, array.as_ref());
        let (c_array, c_schema, counters) = counting(c_array, c_schema);
        drop((c_array, c_schema));
        assert_released_once(case, &counters);
    });
}

#[test]
fn the_fixture_covers_every_type_family() {
    let names: Vec<String> = all_types().into_iter().map(|(n, _)| n).collect();
    for family in [
        "null",
        "boolean",
        "int8",
        "uint64",
        "float16",
        "decimal32",
        "decimal256",
        "date64",
        "time64_ns",
        "timestamp_ns_zone",
        "duration_us",
        "interval_month_day_nano",
        "binary_view",
        "fixed_size_binary",
        "large_list_view",
        "struct",
        "map",
        "sparse_union",
        "dense_union",
        "list_of_dictionary",
        "run_end_int64_boolean",
        "empty_utf8",
    ] {
        assert!(names.iter().any(|n| n == family), "missing case {family}");
    }
    let unique: std::collections::HashSet<_> = names.iter().collect();
    assert_eq!(unique.len(), names.len(), "case names must be unique");
}

#[test]
fn a_device_copy_lets_go_of_its_host_source_once_the_copy_has_run() {
    let device = emulated(9);
    let values = arrow_array::Int64Array::from_iter_values(0..4096);
    let source = values.values().inner().clone();
    let (array, schema) = arrow_device::export_array_to(&values, &device).unwrap();
    drop(values);
    // SAFETY: our exporter's structs.
    let imported =
        unsafe { DeviceArray::try_new(array, schema, ValidationLevel::Default) }.unwrap();
    // The release is queued before the copy's event: once the event has
    // completed, only this test holds the host buffer.
    imported.synchronize().unwrap();
    assert_eq!(
        source.strong_count(),
        1,
        "the device copy still holds its host source"
    );
    let back = imported.to_host().unwrap();
    let expected = arrow_array::Int64Array::from_iter_values(0..4096);
    assert_same("int64 on the device", &expected, back.as_ref());
}

#[test]
fn a_host_accessible_array_with_a_sync_event_is_waited_on_by_the_host_once() {
    use arrow_device::device::emulated::{EmulatedConfig, EmulatedDevice};
    use common::CountingWaits;
    // Pinned or managed memory (CUDA_HOST, CUDA_MANAGED) with an event: the
    // import waits on the host to read the last offset there, and from then
    // on the event is complete for every reader of the tree.
    let config = EmulatedConfig {
        strict: false,
        delay: std::time::Duration::from_millis(2),
    };
    let device = std::sync::Arc::new(CountingWaits::host_accessible(EmulatedDevice::new(
        731, config,
    )));
    let device_ref: device::DeviceRef = device.clone();
    arrow_device::device::register(device_ref.clone());
    let strings = arrow_array::StringArray::from(vec![Some("pinned"), None, Some("memory")]);
    let (array, schema) = arrow_device::export_array_to(&strings, &device_ref).unwrap();
    assert!(!array.sync_event.is_null());
    // SAFETY: our own export.
    let imported =
        unsafe { DeviceArray::try_new(array, schema, ValidationLevel::Default) }.unwrap();
    assert_eq!(device.waits(), (1, 0), "the import waits on the host");
    assert_eq!(imported.to_host().unwrap().as_ref(), &strings as &dyn Array);
    imported.synchronize().unwrap();
    imported.slice(1, 2).unwrap().to_host().unwrap();
    assert_eq!(device.waits(), (1, 0), "nothing waits a second time");
}

#[test]
fn arrow_rs_data_becomes_a_device_array_safely_as_the_import_of_its_export_would() {
    let device = emulated(3);
    for_each_case("from_array", |case, array| {
        let made = DeviceArray::from_array(array.as_ref());
        let (c_array, c_schema) = export_array(array.as_ref()).unwrap();
        // SAFETY: our own export.
        let imported =
            unsafe { DeviceArray::try_new(c_array, c_schema, ValidationLevel::Full) }.unwrap();
        assert_eq!(made.field(), imported.field(), "{case}: field");
        assert_eq!(
            (made.len(), made.offset(), made.null_count()),
            (imported.len(), imported.offset(), imported.null_count()),
            "{case}: shape"
        );
        assert_eq!(
            made.buffers().iter().map(|b| b.len).collect::<Vec<_>>(),
            imported.buffers().iter().map(|b| b.len).collect::<Vec<_>>(),
            "{case}: buffer sizes"
        );
        assert_same(case, array.as_ref(), made.to_host().unwrap().as_ref());
        let copied = made.to_device(&device).unwrap();
        assert_same(case, array.as_ref(), copied.to_host().unwrap().as_ref());
        let (again, again_schema) = made.export().unwrap();
        // SAFETY: our own export.
        let back =
            unsafe { DeviceArray::try_new(again, again_schema, ValidationLevel::Full) }.unwrap();
        assert_same(case, array.as_ref(), back.to_host().unwrap().as_ref());
    });
}

#[test]
fn a_record_batch_becomes_a_device_array_and_back_with_its_metadata() {
    let batch = batch_with_metadata();
    let made = DeviceArray::from_record_batch(&batch);
    let (c_array, c_schema) = arrow_device::export_record_batch(&batch).unwrap();
    // SAFETY: our own export.
    let imported =
        unsafe { DeviceArray::try_new(c_array, c_schema, ValidationLevel::Full) }.unwrap();
    assert_eq!(made.field(), imported.field());
    assert_eq!(made.to_record_batch().unwrap(), batch);
    let sliced = made.slice(1, 2).unwrap();
    assert_eq!(sliced.to_record_batch().unwrap(), batch.slice(1, 2));
    let on_device = made.to_device(&emulated(3)).unwrap();
    assert_eq!(on_device.to_record_batch().unwrap(), batch);
}

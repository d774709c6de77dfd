//! Copies to the host through a [`HostStaging`] give what `to_host` and
//! `to_record_batch` give, for every type arrow-rs supports, sliced and
//! unsliced, on the emulated device in strict, delayed mode; one staging
//! buffer is reused from case to case, so a byte of an earlier type left
//! where an array reads would show.

mod common;

use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_device::{export_array_to, DeviceArray, HostStaging, ValidationLevel};

use common::{all_types, assert_same, batch_with_metadata, emulated, for_each_case};

/// `array` exported onto emulated device 0 and imported back, as a foreign
/// producer's array arrives (with the copy's `sync_event`).
fn on_emulated(case: &str, array: &dyn Array) -> DeviceArray {
    let (c_array, c_schema) = export_array_to(array, &emulated(0))
        .unwrap_or_else(|e| panic!("{case}: export to the emulated device: {e}"));
    // SAFETY: the structs come from this crate's exporter.
    unsafe { DeviceArray::try_new(c_array, c_schema, ValidationLevel::Default) }
        .unwrap_or_else(|e| panic!("{case}: import: {e}"))
}

/// The IPC stream bytes of `array` as the one column of a batch (every
/// byte a writer reads, values under nulls included), or the writer's
/// error for the types it does not encode.
fn ipc_bytes(array: &ArrayRef) -> Result<Vec<u8>, String> {
    let batch =
        RecordBatch::try_from_iter([("column", array.clone())]).map_err(|e| e.to_string())?;
    let mut writer = arrow_ipc::writer::StreamWriter::try_new(Vec::new(), &batch.schema())
        .map_err(|e| e.to_string())?;
    writer.write(&batch).map_err(|e| e.to_string())?;
    writer.into_inner().map_err(|e| e.to_string())
}

#[test]
fn every_type_staged_equals_to_host_sliced_and_unsliced() {
    // One slot: every copy after the first reuses the buffer of the case
    // before, of another type.
    let staging = HostStaging::new(1);
    for_each_case("staged to_host", |case, array| {
        let imported = on_emulated(case, array.as_ref());
        let mut windows = vec![(0, array.len())];
        if array.len() >= 4 {
            windows.extend([(1, array.len() - 3), (3, array.len() - 3)]);
        }
        for (offset, len) in windows {
            let case = format!("{case} slice({offset}, {len})");
            let slice = imported.slice(offset, len).unwrap();
            let staged = slice
                .to_host_staged(&staging)
                .unwrap_or_else(|e| panic!("{case}: to_host_staged: {e}"));
            let fresh = slice.to_host().unwrap();
            assert_same(&case, array.slice(offset, len).as_ref(), staged.as_ref());
            assert_eq!(ipc_bytes(&staged), ipc_bytes(&fresh), "{case}: IPC bytes");
        }
    });
    assert!(staging.reuses() > 100, "{staging:?}");
    assert_eq!(staging.retained(), 1);
}

#[test]
fn record_batches_staged_equal_to_record_batch() {
    let staging = HostStaging::new(2);
    let columns: Vec<(String, ArrayRef)> = all_types()
        .into_iter()
        .filter(|(_, a)| a.len() >= 7)
        .map(|(name, array)| (name, array.slice(0, 7)))
        .collect();
    let all = RecordBatch::try_from_iter(columns).unwrap();
    let device = emulated(0);
    for (what, batch) in [
        ("all types", all.clone()),
        ("all types sliced(3, 4)", all.slice(3, 4)),
        ("batch with metadata", batch_with_metadata()),
    ] {
        let on_device = DeviceArray::from_record_batch(&batch)
            .to_device(&device)
            .unwrap();
        for round in 0..2 {
            let staged = on_device.to_record_batch_staged(&staging).unwrap();
            assert_eq!(staged, batch, "{what}, round {round}");
            assert_eq!(
                staged,
                on_device.to_record_batch().unwrap(),
                "{what}, round {round}"
            );
        }
        // The device batch sliced at a bit offset that is not a byte boundary.
        let sliced = on_device.slice(1, batch.num_rows() - 1).unwrap();
        let staged = sliced.to_record_batch_staged(&staging).unwrap();
        assert_eq!(
            staged,
            batch.slice(1, batch.num_rows() - 1),
            "{what} slice(1)"
        );
    }
    assert!(staging.reuses() >= 6, "{staging:?}");
}

/// A CUDA device offers pinned memory: the staging keeps it and lends it
/// again; `CUDA_HOST` arrays are host memory already and are not copied.
#[cfg(feature = "cuda")]
#[test]
fn cuda_copies_stage_through_reused_pinned_memory() {
    use arrow_device::DeviceType;
    use common::gpu::{cuda_device, gpu};

    let Some(_gpu) = gpu("cuda_copies_stage_through_reused_pinned_memory") else {
        return;
    };
    // Declared after the guard, so dropped (its pinned memory freed) before
    // the guard counts what the test left on the driver.
    let staging = HostStaging::new(2);
    let device = cuda_device(DeviceType::CUDA);
    let batch = batch_with_metadata();
    for round in 0..5 {
        let on_gpu = DeviceArray::from_record_batch(&batch)
            .to_device(&device)
            .unwrap();
        let staged = on_gpu.to_record_batch_staged(&staging).unwrap();
        assert_eq!(staged, batch, "round {round}");
    }
    assert_eq!((staging.allocations(), staging.reuses()), (1, 4));
    assert_eq!((staging.retained(), staging.pinned()), (1, 1));

    let pinned = cuda_device(DeviceType::CUDA_HOST);
    let on_host = DeviceArray::from_record_batch(&batch)
        .to_device(&pinned)
        .unwrap();
    assert_eq!(on_host.to_record_batch_staged(&staging).unwrap(), batch);
    assert_eq!(staging.allocations(), 1, "CUDA_HOST memory is not copied");
}

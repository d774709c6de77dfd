//! Golden data: the 33 Arrow IPC streams written by Arrow C++ 21 (see
//! `shared/golden/README.md`) round-trip batch by batch through export and
//! import, whole and sliced, on the CPU and on the emulated device in strict
//! mode with delayed completion.
//!
//! The files live in `shared/golden` beside the repository checkout.

mod common;

use std::fs::File;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;

use arrow_array::RecordBatch;
use arrow_device::{export_record_batch, export_record_batch_to, DeviceArray, ValidationLevel};
use arrow_ipc::reader::StreamReader;

use common::{assert_batch_round_trips, emulated};

/// The streams in `shared/golden`, by name without `.stream`. The golden
/// README counts 33, but the directory holds these 32: the list pins what is
/// there, so a file that goes missing or appears is reported by name.
const GOLDEN_STREAMS: [&str; 32] = [
    "generated_binary",
    "generated_binary_no_batches",
    "generated_binary_view",
    "generated_binary_zerolength",
    "generated_custom_metadata",
    "generated_datetime",
    "generated_decimal",
    "generated_decimal256",
    "generated_decimal32",
    "generated_decimal64",
    "generated_dictionary",
    "generated_dictionary_unsigned",
    "generated_duplicate_fieldnames",
    "generated_duration",
    "generated_extension",
    "generated_interval",
    "generated_interval_mdn",
    "generated_large_binary",
    "generated_list_view",
    "generated_map",
    "generated_map_non_canonical",
    "generated_nested",
    "generated_nested_dictionary",
    "generated_nested_large_offsets",
    "generated_null",
    "generated_null_trivial",
    "generated_primitive",
    "generated_primitive_no_batches",
    "generated_primitive_zerolength",
    "generated_recursive_nested",
    "generated_run_end_encoded",
    "generated_union",
];

fn golden_dir() -> PathBuf {
    PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../shared/golden"
    ))
}

/// One golden stream: its name and its batches (an empty batch of its schema
/// when the stream has none, so that every file exercises the schema).
struct Golden {
    name: String,
    batches: Vec<RecordBatch>,
    /// Batches the stream itself holds.
    stored: usize,
}

fn golden_files() -> Vec<Golden> {
    let dir = golden_dir();
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("golden directory {}: {e}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "stream"))
        .collect();
    paths.sort();
    let found: Vec<String> = paths
        .iter()
        .map(|p| p.file_stem().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        found,
        GOLDEN_STREAMS,
        "the golden streams in {}",
        dir.display()
    );
    paths
        .into_iter()
        .map(|path| {
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            let file = File::open(&path).unwrap_or_else(|e| panic!("{name}: {e}"));
            let reader =
                StreamReader::try_new(file, None).unwrap_or_else(|e| panic!("{name}: {e}"));
            let schema = reader.schema();
            let mut batches: Vec<RecordBatch> = reader
                .collect::<Result<_, _>>()
                .unwrap_or_else(|e| panic!("{name}: reading batches: {e}"));
            let stored = batches.len();
            if batches.is_empty() {
                batches.push(RecordBatch::new_empty(schema));
            }
            Golden {
                name,
                batches,
                stored,
            }
        })
        .collect()
}

/// Runs `check` on every batch of every golden file, and fails once naming
/// every file that failed. Returns the number of batches checked.
fn for_each_batch(what: &str, mut check: impl FnMut(&str, &RecordBatch)) -> usize {
    let files = golden_files();
    let mut failed = Vec::new();
    let mut checked = 0;
    for golden in &files {
        for (i, batch) in golden.batches.iter().enumerate() {
            let case = format!("{} batch {i} ({} rows)", golden.name, batch.num_rows());
            if catch_unwind(AssertUnwindSafe(|| check(&case, batch))).is_err() {
                failed.push(case);
            }
            checked += 1;
        }
    }
    assert!(
        failed.is_empty(),
        "{what}: {} of {checked} batches failed: {failed:#?}",
        failed.len()
    );
    checked
}

#[test]
fn the_golden_directory_holds_every_stream_with_its_batches() {
    let files = golden_files();
    assert_eq!(files.len(), GOLDEN_STREAMS.len());
    let without_batches: Vec<&str> = files
        .iter()
        .filter(|g| g.stored == 0)
        .map(|g| g.name.as_str())
        .collect();
    assert_eq!(
        without_batches,
        [
            "generated_binary_no_batches.stream",
            "generated_primitive_no_batches.stream"
        ]
    );
    let stored: usize = files.iter().map(|g| g.stored).sum();
    assert!(
        stored > GOLDEN_STREAMS.len(),
        "expected several batches per stream, found {stored} in all"
    );
    for golden in &files {
        assert!(
            !golden.batches.is_empty(),
            "{}: nothing to round-trip",
            golden.name
        );
    }
}

#[test]
fn every_golden_batch_round_trips_on_the_cpu_with_full_validation() {
    let checked = for_each_batch("golden on the CPU", |case, batch| {
        assert_batch_round_trips(case, batch, None)
    });
    let expected: usize = golden_files().iter().map(|g| g.batches.len()).sum();
    assert_eq!(checked, expected, "every batch of every file was checked");
}

#[test]
fn every_golden_batch_round_trips_sliced_on_the_cpu() {
    for_each_batch("golden sliced on the CPU", |case, batch| {
        let n = batch.num_rows();
        if n > 2 {
            assert_batch_round_trips(
                &format!("{case} slice(1, {})", n - 2),
                &batch.slice(1, n - 2),
                None,
            );
        }
        // Slicing the imported struct array agrees with slicing the batch.
        let (c_array, c_schema) = export_record_batch(batch).unwrap();
        // SAFETY: the structs come from this crate's exporter (or a test producer), which follow the interface.
        let imported =
            unsafe { DeviceArray::try_new(c_array, c_schema, ValidationLevel::Full) }.unwrap();
        for (offset, len) in [(n.min(3), n - n.min(3)), (n / 2, 0)] {
            let slice = imported
                .slice(offset, len)
                .unwrap()
                .to_record_batch()
                .unwrap();
            assert_eq!(
                slice,
                batch.slice(offset, len),
                "{case}: DeviceArray::slice({offset}, {len})"
            );
        }
    });
}

#[test]
fn every_golden_batch_round_trips_through_the_emulated_device() {
    let device = emulated(0);
    let checked = for_each_batch("golden on the emulated device", |case, batch| {
        assert_batch_round_trips(&format!("{case} on emulated 0"), batch, Some(&device));
        let n = batch.num_rows();
        if n > 2 {
            assert_batch_round_trips(
                &format!("{case} slice(1, {}) on emulated 0", n - 2),
                &batch.slice(1, n - 2),
                Some(&device),
            );
        }
    });
    let expected: usize = golden_files().iter().map(|g| g.batches.len()).sum();
    assert_eq!(checked, expected, "every batch of every file was checked");
}

#[test]
fn golden_batches_sliced_on_the_emulated_device_copy_back_equal() {
    let device = emulated(0);
    for_each_batch(
        "golden DeviceArray::slice on the emulated device",
        |case, batch| {
            let (c_array, c_schema) = export_record_batch_to(batch, &device).unwrap();
            // SAFETY: the structs come from this crate's exporter (or a test producer), which follow the interface.
            let imported =
                unsafe { DeviceArray::try_new(c_array, c_schema, ValidationLevel::Default) }
                    .unwrap_or_else(|e| panic!("{case}: import: {e}"));
            let n = batch.num_rows();
            for (offset, len) in [(n.min(3), n - n.min(3)), (n.min(1), n.saturating_sub(2))] {
                let slice = imported
                    .slice(offset, len)
                    .unwrap()
                    .to_record_batch()
                    .unwrap();
                assert_eq!(
                    slice,
                    batch.slice(offset, len),
                    "{case}: DeviceArray::slice({offset}, {len})"
                );
            }
        },
    );
}

/// Set in a process run as a golden opener: the file of handles to open,
/// one per line: `stream batch-index handle-in-hex`.
#[cfg(target_os = "linux")]
const HANDLES_VAR: &str = "ARROW_DEVICE_TEST_GOLDEN_HANDLES";

/// The opener's side (does nothing unless run as one): opens every handle
/// of the file and compares the batch with its own read of the golden file.
#[cfg(target_os = "linux")]
#[test]
fn golden_opener_compares_every_shared_batch() {
    let Ok(path) = std::env::var(HANDLES_VAR) else {
        return;
    };
    let files = golden_files();
    let lines = std::fs::read_to_string(path).unwrap();
    let mut opened = 0;
    for line in lines.lines() {
        let mut words = line.split(' ');
        let (name, index, text) = (
            words.next().unwrap(),
            words.next().unwrap().parse::<usize>().unwrap(),
            words.next().unwrap(),
        );
        let handle = common::unhex(text);
        let expected = &files.iter().find(|g| g.name == name).unwrap().batches[index];
        let array = arrow_device::share::open_shared(&handle, ValidationLevel::Full)
            .unwrap_or_else(|e| panic!("{name} batch {index}: {e}"));
        assert_eq!(
            &array.to_record_batch().unwrap(),
            expected,
            "{name} batch {index}"
        );
        opened += 1;
    }
    println!("OPENED {opened}");
}

#[cfg(target_os = "linux")]
#[test]
fn every_golden_batch_is_shared_to_1_2_and_4_processes_on_the_cpu_and_the_emulated_device() {
    let files = golden_files();
    for on in ["cpu", "emulated"] {
        let mut shared = Vec::new();
        let mut lines = String::new();
        for golden in &files {
            for (i, batch) in golden.batches.iter().enumerate() {
                let array = DeviceArray::from_record_batch(batch);
                let array = match on {
                    "cpu" => array,
                    _ => array.to_device(&emulated(0)).unwrap(),
                };
                // Shared at once: on the emulated device the copy is still
                // pending, and the openers must see its final values.
                let share = arrow_device::share::share(&array)
                    .unwrap_or_else(|e| panic!("{on}: {} batch {i}: {e}", golden.name));
                lines.push_str(&format!(
                    "{} {i} {}\n",
                    golden.name,
                    common::hex(share.handle())
                ));
                shared.push(share);
            }
        }
        let path = std::env::temp_dir().join(format!(
            "arrow-device-golden-handles-{}-{on}",
            std::process::id()
        ));
        std::fs::write(&path, lines).unwrap();
        for processes in [1, 2, 4] {
            let openers: Vec<_> = (0..processes)
                .map(|_| {
                    common::role(
                        "golden_opener_compares_every_shared_batch",
                        HANDLES_VAR,
                        path.to_str().unwrap(),
                    )
                    .env("ARROW_DEVICE_EMULATED", "strict=1,delay_ms=2")
                    .spawn()
                    .unwrap()
                })
                .collect();
            for opener in openers {
                common::assert_succeeded(
                    opener,
                    &format!("an opener ({on}, {processes} processes)"),
                    &format!("OPENED {}", shared.len()),
                );
            }
        }
        std::fs::remove_file(&path).unwrap();
    }
}

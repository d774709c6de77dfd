//! Helpers shared by the Flight test suites.
#![allow(dead_code)]

use std::fs::File;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use arrow_array::{RecordBatch, RecordBatchReader};
use arrow_device::device::emulated::{EmulatedConfig, EmulatedDevice};
use arrow_device::device::DeviceRef;
use arrow_device::stream::{export_reader_to, DeviceStreamReader};
use arrow_device::ValidationLevel;
use arrow_ipc::reader::StreamReader;
use arrow_schema::SchemaRef;

/// `shared/golden` beside the checkout, or `ARROW_DEVICE_GOLDEN_DIR` (the
/// GPU kit carries a copy to machines without the checkout's neighbours).
pub fn golden_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("ARROW_DEVICE_GOLDEN_DIR") {
        return PathBuf::from(dir);
    }
    PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../shared/golden"
    ))
}

/// Every golden stream: name (the file stem), path, schema and batches.
pub struct Golden {
    pub name: String,
    pub path: PathBuf,
    pub schema: SchemaRef,
    pub batches: Vec<RecordBatch>,
}

pub fn golden_streams() -> Vec<Golden> {
    let dir = golden_dir();
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("golden directory {}: {e}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "stream"))
        .collect();
    paths.sort();
    assert_eq!(paths.len(), 32, "the golden streams in {}", dir.display());
    paths
        .into_iter()
        .map(|path| {
            let name = path.file_stem().unwrap().to_string_lossy().into_owned();
            let reader = StreamReader::try_new(File::open(&path).unwrap(), None)
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            let schema = reader.schema();
            let batches = reader
                .collect::<Result<Vec<_>, _>>()
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            Golden {
                name,
                path,
                schema,
                batches,
            }
        })
        .collect()
}

/// A strict emulated device whose copies land `delay` late (their
/// destination holds poison until then).
pub fn emulated(delay: Duration) -> DeviceRef {
    EmulatedDevice::new(
        0,
        EmulatedConfig {
            strict: true,
            delay,
        },
    )
}

/// `batches` as a device stream on `device` (each copied when read).
pub fn device_stream(
    schema: SchemaRef,
    batches: Vec<RecordBatch>,
    device: &DeviceRef,
) -> DeviceStreamReader {
    let reader = arrow_array::RecordBatchIterator::new(batches.into_iter().map(Ok), schema);
    let stream = export_reader_to(reader, device).unwrap();
    // SAFETY: the core's own exporter.
    unsafe { DeviceStreamReader::try_new(stream, ValidationLevel::Full) }.unwrap()
}

/// A host reader over `batches`.
pub fn host_reader(
    schema: SchemaRef,
    batches: Vec<RecordBatch>,
) -> impl RecordBatchReader + Send + 'static {
    arrow_array::RecordBatchIterator::new(batches.into_iter().map(Ok), schema)
}

/// Waits until `condition` holds, up to 10 seconds; false if it never did.
pub fn eventually(mut condition: impl FnMut() -> bool) -> bool {
    for _ in 0..1000 {
        if condition() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    condition()
}

pub fn arc<T>(value: T) -> Arc<T> {
    Arc::new(value)
}

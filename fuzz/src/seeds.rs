//! What the seeds are made of: the golden IPC streams written by Arrow C++
//! (`shared/golden` beside the repository checkout), as arrow-rs arrays.

use std::fs::File;
use std::path::PathBuf;

use arrow_array::{Array, ArrayRef, RecordBatch, StructArray};

/// The golden directory: `ARROW_DEVICE_GOLDEN`, else `shared/golden` beside
/// the checkout.
pub fn golden_dir() -> PathBuf {
    match std::env::var_os("ARROW_DEVICE_GOLDEN") {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/golden")),
    }
}

/// Every golden stream's batches, by file name without `.stream`.
pub fn golden_batches() -> Vec<(String, Vec<RecordBatch>)> {
    let dir = golden_dir();
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("golden directory {}: {e}", dir.display()))
        .map(|entry| entry.expect("a readable directory entry").path())
        .filter(|path| path.extension().is_some_and(|e| e == "stream"))
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|path| {
            let name = path.file_stem().unwrap().to_string_lossy().into_owned();
            let file = File::open(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            let reader = arrow_ipc::reader::StreamReader::try_new(file, None)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            let schema = reader.schema();
            let mut batches: Vec<RecordBatch> = reader
                .map(|b| b.unwrap_or_else(|e| panic!("{}: {e}", path.display())))
                .collect();
            if batches.is_empty() {
                batches.push(RecordBatch::new_empty(schema));
            }
            (name, batches)
        })
        .collect()
}

/// Small arrays for seeds: every column of every golden stream's first
/// batch, and the batch itself as a struct, each cut to at most `max_rows`
/// rows (sliced from row 1 where there are rows enough, so that offsets
/// are exercised).
pub fn golden_arrays(max_rows: usize) -> Vec<(String, ArrayRef)> {
    let mut out = Vec::new();
    for (name, batches) in golden_batches() {
        let batch = &batches[0];
        let cut = |array: &ArrayRef| -> ArrayRef {
            let start = usize::from(array.len() > max_rows);
            let len = array.len().saturating_sub(start).min(max_rows);
            array.slice(start, len)
        };
        for (field, column) in batch.schema().fields().iter().zip(batch.columns()) {
            out.push((format!("{name}.{}", field.name()), cut(column)));
        }
        let whole: ArrayRef = std::sync::Arc::new(StructArray::from(batch.clone()));
        out.push((format!("{name}.batch"), cut(&whole)));
    }
    out
}

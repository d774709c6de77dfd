//! Helpers shared by the end-to-end tests: running the built binary,
//! temporary files and reading the report.

// Each test binary uses its own subset.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicUsize, Ordering};

use arrow_array::RecordBatch;
use arrow_device_cli::dataset::Dataset;

pub fn arrow_device(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_arrow-device"))
        .args(args)
        .output()
        .expect("the arrow-device binary runs")
}

pub fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

pub fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// A fresh path in the temp dir, removed when dropped.
pub struct TempPath(PathBuf);

impl TempPath {
    pub fn new(suffix: &str) -> Self {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let name = format!(
            "arrow-device-cli-test-{}-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed),
            suffix
        );
        TempPath(std::env::temp_dir().join(name))
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    pub fn arg(&self) -> &str {
        self.0.to_str().expect("temp paths are UTF-8 here")
    }
}

impl Drop for TempPath {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

pub fn dataset_batches(rows: u64, chunk_rows: usize) -> Vec<RecordBatch> {
    Dataset::new(rows, 11)
        .with_chunk_rows(chunk_rows)
        .batches()
        .collect::<Result<_, _>>()
        .unwrap()
}

/// The value of a `key   value` line of the report's header.
pub fn report_value<'a>(report: &'a str, key: &str) -> Option<&'a str> {
    report
        .lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(' ').map(str::trim))
}

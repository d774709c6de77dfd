//! Helpers shared by the end-to-end tests: running the built binary,
//! temporary files, input files of the dataset, the golden streams, and
//! reading and checking the report.

// Each test binary uses its own subset.
#![allow(dead_code)]

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicUsize, Ordering};

use arrow_array::RecordBatch;
use arrow_device_cli::dataset::Dataset;
use parquet::arrow::ArrowWriter;
use parquet::file::properties::WriterProperties;

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

/// Writes `batches` (of the dataset's schema) to `path` as an Arrow IPC file.
pub fn write_ipc_file(path: &Path, batches: &[RecordBatch]) {
    let mut writer =
        arrow_ipc::writer::FileWriter::try_new(File::create(path).unwrap(), &Dataset::schema())
            .unwrap();
    for batch in batches {
        writer.write(batch).unwrap();
    }
    writer.finish().unwrap();
}

/// `batches` (of the dataset's schema) as the bytes of an Arrow IPC stream.
pub fn ipc_stream_bytes(batches: &[RecordBatch]) -> Vec<u8> {
    let mut bytes = Vec::new();
    let mut writer =
        arrow_ipc::writer::StreamWriter::try_new(&mut bytes, &Dataset::schema()).unwrap();
    for batch in batches {
        writer.write(batch).unwrap();
    }
    writer.finish().unwrap();
    drop(writer);
    bytes
}

/// Writes `batches` (of the dataset's schema) to `path` as a Parquet file
/// with `props`.
pub fn write_parquet(path: &Path, batches: &[RecordBatch], props: WriterProperties) {
    let mut writer =
        ArrowWriter::try_new(File::create(path).unwrap(), Dataset::schema(), Some(props)).unwrap();
    for batch in batches {
        writer.write(batch).unwrap();
    }
    writer.close().unwrap();
}

/// The value of a `key   value` line of the report's header.
pub fn report_value<'a>(report: &'a str, key: &str) -> Option<&'a str> {
    report
        .lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(' ').map(str::trim))
}

/// Asserts that the run exited 0 (showing its stdout and stderr otherwise)
/// and returns its stdout.
pub fn assert_succeeded(output: &Output) -> String {
    let out = stdout(output);
    assert!(
        output.status.success(),
        "exit {:?}\nstdout:\n{out}\nstderr:\n{}",
        output.status,
        stderr(output)
    );
    out
}

/// Asserts that the run of `input` exited 0 and that its report ends with
/// `verified: equal`, showing the run's output otherwise; returns its stdout.
pub fn assert_input_verified(input: &Path, output: &Output) -> String {
    let out = stdout(output);
    assert!(
        output.status.success() && out.ends_with("\nverified: equal\n"),
        "{}: exit {:?}\n{out}\n{}",
        input.display(),
        output.status,
        stderr(output)
    );
    out
}

/// Asserts that the report's stage table has a row for every stage, the C
/// one named `c_stage` (`C hand-off` per array, `C relay` for a stream).
pub fn assert_stage_rows(report: &str, c_stage: &str) {
    for stage in [
        "read input",
        "export",
        c_stage,
        "import",
        "to_host",
        "verify",
        "total",
    ] {
        assert!(
            report.lines().any(|l| l.starts_with(stage)),
            "no {stage} row in\n{report}"
        );
    }
}

/// The Arrow C++ golden streams (`shared/golden` beside the checkout, see its
/// README), which cover every type: all 32 of them, sorted.
pub fn golden_streams() -> Vec<PathBuf> {
    let dir = PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../shared/golden"
    ));
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("golden directory {}: {e}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "stream"))
        .collect();
    paths.sort();
    assert_eq!(paths.len(), 32, "golden streams in {}", dir.display());
    paths
}

//! Where the record batches come from: an Arrow IPC file or stream, a Parquet
//! file (told apart by their first bytes), or the embedded dataset.

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use arrow_array::RecordBatch;
use arrow_ipc::reader::{FileReader, StreamReader};
use arrow_schema::SchemaRef;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

use crate::dataset::{Dataset, DEFAULT_CHUNK_ROWS, DEFAULT_ROWS};
use crate::error::{CliError, Result};

/// Magic bytes opening an Arrow IPC file (IPC format spec, "IPC File Format").
const ARROW_FILE_MAGIC: &[u8] = b"ARROW1";
/// Magic bytes opening a Parquet file.
const PARQUET_MAGIC: &[u8] = b"PAR1";
/// The continuation marker opening every message of an IPC stream (since
/// format 0.15, the only form Arrow C++ and arrow-rs write).
const IPC_CONTINUATION: &[u8] = &[0xFF, 0xFF, 0xFF, 0xFF];

/// An opened input: what it is and its batches.
pub struct Input {
    /// One line for the report, e.g. `Parquet file data.parquet (4 row groups, snappy)`.
    pub description: String,
    /// The schema of every batch.
    pub schema: SchemaRef,
    /// Total rows when known up front (for the progress bar).
    pub total_rows: Option<u64>,
    /// The batches, in order.
    pub batches: Box<dyn Iterator<Item = Result<RecordBatch>>>,
}

/// The file formats recognised from the first bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Arrow IPC file format (random access, magic `ARROW1`).
    IpcFile,
    /// Arrow IPC stream format.
    IpcStream,
    /// Parquet (magic `PAR1`).
    Parquet,
}

/// Recognises a format from a file's first bytes.
pub fn detect(head: &[u8]) -> Option<Format> {
    if head.starts_with(ARROW_FILE_MAGIC) {
        Some(Format::IpcFile)
    } else if head.starts_with(PARQUET_MAGIC) {
        Some(Format::Parquet)
    } else if head.starts_with(IPC_CONTINUATION) {
        Some(Format::IpcStream)
    } else {
        None
    }
}

/// Opens `file`, or the embedded dataset of `rows` rows (default
/// [`DEFAULT_ROWS`]) from `seed` when there is no file. With a file, `rows`
/// caps the rows read.
pub fn open(file: Option<&Path>, rows: Option<u64>, seed: u64) -> Result<Input> {
    let Some(path) = file else {
        let dataset = Dataset::new(rows.unwrap_or(DEFAULT_ROWS), seed);
        return Ok(Input {
            description: format!(
                "embedded dataset (seed {}, {} rows in batches of {})",
                dataset.seed(),
                dataset.rows(),
                dataset.chunk_rows()
            ),
            schema: Dataset::schema(),
            total_rows: Some(dataset.rows()),
            batches: Box::new(dataset.batches().map(|b| {
                b.map_err(|e| CliError::input("embedded dataset", format!("generating: {e}")))
            })),
        });
    };
    let mut input = open_file(path)?;
    if let Some(limit) = rows {
        input.total_rows = Some(input.total_rows.map_or(limit, |total| total.min(limit)));
        input.description.push_str(&format!(", first {limit} rows"));
        input.batches = Box::new(limit_rows(input.batches, limit));
    }
    Ok(input)
}

fn open_file(path: &Path) -> Result<Input> {
    let mut file =
        File::open(path).map_err(|e| CliError::input(path, format!("cannot open: {e}")))?;
    let mut head = [0u8; 8];
    let n = read_up_to(&mut file, &mut head)
        .map_err(|e| CliError::input(path, format!("cannot read: {e}")))?;
    let head = &head[..n];
    let format = detect(head).ok_or_else(|| {
        CliError::input(
            path,
            format!(
                "not an Arrow IPC file (magic \"ARROW1\"), Arrow IPC stream (0xFFFFFFFF) or \
                 Parquet file (magic \"PAR1\"); the file {}",
                if head.is_empty() {
                    "is empty".to_string()
                } else {
                    format!("starts with {}", hex(head))
                }
            ),
        )
    })?;
    // Reopen rather than seek so each reader starts from a fresh handle.
    let file = File::open(path).map_err(|e| CliError::input(path, format!("cannot open: {e}")))?;
    let name = path.display();
    let owned: PathBuf = path.to_path_buf();
    let decode = move |e: &dyn std::fmt::Display| CliError::input(&owned, format!("decoding: {e}"));
    match format {
        Format::IpcFile => {
            let reader = FileReader::try_new_buffered(file, None).map_err(|e| decode(&e))?;
            let batches = reader.num_batches();
            Ok(Input {
                description: format!("Arrow IPC file {name} ({batches} batches)"),
                schema: reader.schema(),
                total_rows: None,
                batches: Box::new(reader.map(move |b| b.map_err(|e| decode(&e)))),
            })
        }
        Format::IpcStream => {
            let reader = StreamReader::try_new_buffered(file, None).map_err(|e| decode(&e))?;
            Ok(Input {
                description: format!("Arrow IPC stream {name}"),
                schema: reader.schema(),
                total_rows: None,
                batches: Box::new(reader.map(move |b| b.map_err(|e| decode(&e)))),
            })
        }
        Format::Parquet => {
            let builder = ParquetRecordBatchReaderBuilder::try_new(file).map_err(|e| decode(&e))?;
            let metadata = builder.metadata().clone();
            let mut codecs: Vec<String> = metadata
                .row_groups()
                .iter()
                .flat_map(|rg| rg.columns().iter())
                // `GZIP(GzipLevel(6))` -> `GZIP`: the level is a writer setting.
                .map(|c| {
                    c.compression()
                        .to_string()
                        .split('(')
                        .next()
                        .unwrap_or_default()
                        .to_string()
                })
                .collect();
            codecs.sort();
            codecs.dedup();
            let total = metadata.file_metadata().num_rows().max(0) as u64;
            let schema = builder.schema().clone();
            let reader = builder
                .with_batch_size(DEFAULT_CHUNK_ROWS)
                .build()
                .map_err(|e| decode(&e))?;
            Ok(Input {
                description: format!(
                    "Parquet file {name} ({} row groups, {total} rows, {})",
                    metadata.num_row_groups(),
                    if codecs.is_empty() {
                        "no columns".to_string()
                    } else {
                        codecs.join(", ")
                    }
                ),
                schema,
                total_rows: Some(total),
                batches: Box::new(reader.map(move |b| b.map_err(|e| decode(&parquet_hint(&e))))),
            })
        }
    }
}

/// Adds the build feature to enable when a Parquet codec was left out.
fn parquet_hint(e: &dyn std::fmt::Display) -> String {
    let message = e.to_string();
    for (codec, feature) in [("zstd", "parquet-zstd"), ("brotli", "parquet-brotli")] {
        if message.contains(&format!("Disabled feature at compile time: {codec}")) {
            return format!(
                "{message} (the {codec} codec is not built in: rebuild with \
                 `cargo build -p arrow-device-cli --features {feature}`)"
            );
        }
    }
    message
}

fn read_up_to(file: &mut File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match file.read(&mut buf[filled..])? {
            0 => break,
            n => filled += n,
        }
    }
    Ok(filled)
}

fn hex(bytes: &[u8]) -> String {
    bytes
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Stops after `limit` rows, slicing the batch that crosses it.
fn limit_rows(
    batches: Box<dyn Iterator<Item = Result<RecordBatch>>>,
    limit: u64,
) -> impl Iterator<Item = Result<RecordBatch>> {
    let mut left = limit;
    batches.map_while(move |batch| {
        if left == 0 {
            return None;
        }
        Some(batch.map(|batch| {
            let take = (batch.num_rows() as u64).min(left);
            left -= take;
            // The cast is lossless: `take` is at most `num_rows()`, a usize.
            batch.slice(0, take as usize)
        }))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_are_told_apart_by_their_first_bytes() {
        assert_eq!(detect(b"ARROW1\0\0"), Some(Format::IpcFile));
        assert_eq!(detect(b"PAR1\x15\x04"), Some(Format::Parquet));
        assert_eq!(
            detect(&[0xFF, 0xFF, 0xFF, 0xFF, 0x10, 0, 0, 0]),
            Some(Format::IpcStream)
        );
        assert_eq!(detect(b"garbage!"), None);
        assert_eq!(detect(b""), None);
        assert_eq!(detect(b"ARR"), None);
    }

    #[test]
    fn row_limit_slices_the_crossing_batch() {
        let batches = Dataset::new(1_000, 3).with_chunk_rows(300).batches();
        let boxed: Box<dyn Iterator<Item = Result<RecordBatch>>> =
            Box::new(batches.map(|b| b.map_err(|e| CliError::Usage(e.to_string()))));
        let rows: Vec<usize> = limit_rows(boxed, 650)
            .map(|b| b.unwrap().num_rows())
            .collect();
        assert_eq!(rows, [300, 300, 50]);
    }

    #[test]
    fn a_missing_file_names_the_path() {
        let err = open(Some(Path::new("/nonexistent/x.arrow")), None, 0)
            .err()
            .unwrap();
        assert_eq!(err.exit_code(), 1);
        assert!(
            err.to_string()
                .starts_with("/nonexistent/x.arrow: cannot open:"),
            "{err}"
        );
    }
}

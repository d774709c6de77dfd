//! Where the record batches come from: an Arrow IPC file or stream, a Parquet
//! file (told apart by their first bytes), or the embedded dataset.
//!
//! Every input is read lazily, one batch at a time (the IPC readers decode a
//! message per batch, the Parquet reader a batch of a row group, the dataset
//! generates a chunk), so a run holds a few batches, never the whole file.
//! Batches have at most `--batch-rows` rows: the dataset and the Parquet
//! reader produce them at that size, and larger IPC batches are cut by
//! [`rechunk`] into compact copies of their slices ([`compact`]).
//!
//! An input is opened once (`-` is standard input) and every reader reads
//! through that handle. An IPC stream is read front to back, so it can come
//! from a pipe or FIFO; an IPC file or Parquet file is read by seeking to its
//! footer, so on a pipe it is refused with a one-line error that says so.

use std::fs::File;
use std::io::{Cursor, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use arrow_array::cast::AsArray;
use arrow_array::{make_array, Array, ArrayRef, RecordBatch};
use arrow_data::transform::MutableArrayData;
use arrow_ipc::reader::{FileReader, StreamReader};
use arrow_schema::{ArrowError, DataType, SchemaRef};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

use crate::dataset::{Dataset, DEFAULT_ROWS};
use crate::error::{CliError, Result};

/// Magic bytes opening an Arrow IPC file (IPC format spec, "IPC File Format").
const ARROW_FILE_MAGIC: &[u8] = b"ARROW1";
/// Magic bytes opening a Parquet file.
const PARQUET_MAGIC: &[u8] = b"PAR1";
/// The continuation marker opening every message of an IPC stream (since
/// format 0.15, the only form Arrow C++ and arrow-rs write).
const IPC_CONTINUATION: &[u8] = &[0xFF, 0xFF, 0xFF, 0xFF];

/// The batches of an input, in order; `Send` so they can feed a stream
/// exported to another owner.
pub type Batches = Box<dyn Iterator<Item = Result<RecordBatch>> + Send>;

/// An opened input: what it is and its batches.
pub struct Input {
    /// One line for the report, e.g. `Parquet file data.parquet (4 row groups, snappy)`.
    pub description: String,
    /// The schema of every batch.
    pub schema: SchemaRef,
    /// Total rows when known up front (for the progress bar).
    pub total_rows: Option<u64>,
    /// The batches, in order, read as they are pulled.
    pub batches: Batches,
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

/// Opens `file` ([`STDIN_ARG`] for standard input), or the embedded dataset
/// of `rows` rows (default [`DEFAULT_ROWS`]) from `seed` when there is no
/// file, in batches of at most `batch_rows` rows (at least 1). With a file,
/// `rows` caps the rows read.
pub fn open(file: Option<&Path>, rows: Option<u64>, seed: u64, batch_rows: usize) -> Result<Input> {
    let batch_rows = batch_rows.max(1);
    let Some(path) = file else {
        let dataset = Dataset::new(rows.unwrap_or(DEFAULT_ROWS), seed).with_chunk_rows(batch_rows);
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
    let mut input = open_file(path, batch_rows)?;
    if let Some(limit) = rows {
        input.total_rows = Some(input.total_rows.map_or(limit, |total| total.min(limit)));
        input.description.push_str(&format!(", first {limit} rows"));
        input.batches = Box::new(limit_rows(input.batches, limit, input_name(path)));
    }
    Ok(input)
}

fn open_file(path: &Path, batch_rows: usize) -> Result<Input> {
    // The input is opened once and read through that one handle: a FIFO or
    // pipe cannot be opened again (a second open of a FIFO waits for a new
    // writer; a second open of /dev/stdin starts where the first read
    // stopped).
    let mut source = Source::open(path)?;
    let path = source.name.as_path();
    let mut head = [0u8; 8];
    let n = read_up_to(&mut source.file, &mut head)
        .map_err(|e| CliError::input(path, format!("cannot read: {e}")))?;
    let head = &head[..n];
    let what = if source.seekable { "file" } else { "input" };
    let format = detect(head).ok_or_else(|| {
        CliError::input(
            path,
            format!(
                "not an Arrow IPC file (magic \"ARROW1\"), Arrow IPC stream (0xFFFFFFFF) or \
                 Parquet file (magic \"PAR1\"); the {what} {}",
                if head.is_empty() {
                    "is empty".to_string()
                } else {
                    format!("starts with {}", hex(head))
                }
            ),
        )
    })?;
    match format {
        // Read on from here, with the sniffed bytes put back (below).
        Format::IpcStream => {}
        // Their readers seek (to the footer and back): the handle is rewound.
        Format::IpcFile | Format::Parquet if source.seekable => {
            source.file.seek(SeekFrom::Start(0)).map_err(|e| {
                CliError::input(path, format!("cannot seek back to the start: {e}"))
            })?;
        }
        Format::IpcFile => {
            return Err(not_seekable(
                path,
                "an Arrow IPC file",
                "its reader seeks to the footer at the end",
            ));
        }
        Format::Parquet => {
            return Err(not_seekable(
                path,
                "a Parquet file",
                "its reader seeks to the metadata in the footer at the end",
            ));
        }
    }
    let name = path.display();
    let owned: PathBuf = path.to_path_buf();
    let decode = move |e: &dyn std::fmt::Display| CliError::input(&owned, format!("decoding: {e}"));
    match format {
        Format::IpcFile => {
            let reader = FileReader::try_new_buffered(source.file, None).map_err(|e| decode(&e))?;
            let batches = reader.num_batches();
            Ok(Input {
                description: format!("Arrow IPC file {name} ({batches} batches)"),
                schema: reader.schema(),
                total_rows: None,
                batches: Box::new(rechunk(
                    reader.map(move |b| b.map_err(|e| decode(&e))),
                    batch_rows,
                    path.to_path_buf(),
                )),
            })
        }
        Format::IpcStream => {
            // A stream is read front to back, so it needs no seek: the
            // sniffed bytes are put back in front of the rest of the handle,
            // which works the same on a regular file and on a pipe.
            let rest = Cursor::new(head.to_vec()).chain(source.file);
            let reader = StreamReader::try_new_buffered(rest, None).map_err(|e| decode(&e))?;
            Ok(Input {
                description: format!("Arrow IPC stream {name}"),
                schema: reader.schema(),
                total_rows: None,
                batches: Box::new(rechunk(
                    reader.map(move |b| b.map_err(|e| decode(&e))),
                    batch_rows,
                    path.to_path_buf(),
                )),
            })
        }
        Format::Parquet => {
            let builder =
                ParquetRecordBatchReaderBuilder::try_new(source.file).map_err(|e| decode(&e))?;
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
                .with_batch_size(batch_rows)
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

/// The `FILE` argument that names standard input, as in other command-line
/// tools.
pub const STDIN_ARG: &str = "-";

/// How an input is named in messages and the report: its path, or
/// `standard input` for [`STDIN_ARG`].
fn input_name(path: &Path) -> PathBuf {
    if path.as_os_str() == STDIN_ARG {
        PathBuf::from("standard input")
    } else {
        path.to_path_buf()
    }
}

/// An input opened once: the handle every reader of it uses.
struct Source {
    file: File,
    /// The path, or `standard input` (see [`input_name`]).
    name: PathBuf,
    /// A regular file, which readers may seek in. Pipes, FIFOs, terminals and
    /// sockets cannot seek, and a character device's offset means nothing.
    seekable: bool,
}

impl Source {
    fn open(path: &Path) -> Result<Source> {
        let name = input_name(path);
        let file = if path.as_os_str() == STDIN_ARG {
            stdin_file()
        } else {
            File::open(path)
        }
        .map_err(|e| CliError::input(&name, format!("cannot open: {e}")))?;
        let seekable = file
            .metadata()
            .map_err(|e| CliError::input(&name, format!("cannot stat: {e}")))?
            .is_file();
        Ok(Source {
            file,
            name,
            seekable,
        })
    }
}

/// Standard input as a `File` of its own (a duplicate descriptor), so that
/// it is read, and checked for seekability, like a named input: `- < x.arrow`
/// reads an IPC file or Parquet file as well as its path would.
#[cfg(unix)]
fn stdin_file() -> std::io::Result<File> {
    use std::os::fd::AsFd;
    Ok(File::from(std::io::stdin().as_fd().try_clone_to_owned()?))
}

#[cfg(windows)]
fn stdin_file() -> std::io::Result<File> {
    use std::os::windows::io::AsHandle;
    Ok(File::from(
        std::io::stdin().as_handle().try_clone_to_owned()?,
    ))
}

/// The one-line error for `what` (a format that needs seeking, `why`) on a
/// pipe, FIFO or terminal, saying what to do instead.
fn not_seekable(path: &Path, what: &str, why: &str) -> CliError {
    CliError::input(
        path,
        format!(
            "{what} cannot be read from a pipe, FIFO or terminal: {why}, which needs a \
             seekable file; save it to a file and pass its path, or pipe an Arrow IPC stream \
             instead"
        ),
    )
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

/// Splits batches longer than `batch_rows` (at least 1) into batches of
/// `batch_rows` rows (the last may be shorter), each a [`compact`] copy of
/// its slice; shorter batches pass unchanged (joining them would copy).
/// Lazy: one input batch is held at a time. `path` names the input in
/// errors.
pub fn rechunk(
    batches: impl Iterator<Item = Result<RecordBatch>> + Send,
    batch_rows: usize,
    path: PathBuf,
) -> impl Iterator<Item = Result<RecordBatch>> + Send {
    let batch_rows = batch_rows.max(1);
    let mut batches = batches;
    // The batch being sliced and the offset of its next slice.
    let mut current: Option<(RecordBatch, usize)> = None;
    std::iter::from_fn(move || loop {
        if let Some((batch, offset)) = current.take() {
            if offset < batch.num_rows() {
                let len = batch_rows.min(batch.num_rows() - offset);
                let slice = compact(&batch.slice(offset, len));
                current = Some((batch, offset + len));
                return Some(
                    slice.map_err(|e| CliError::input(&path, format!("re-chunking: {e}"))),
                );
            }
        }
        match batches.next()? {
            Ok(batch) if batch.num_rows() > batch_rows => current = Some((batch, 0)),
            other => return Some(other),
        }
    })
}

/// A copy of `batch` that owns only its rows' data.
///
/// A zero-copy slice keeps pointing into the whole of the buffers that are
/// addressed by values (string data, list children, view data buffers), and
/// a device export copies those whole (see `arrow-device`'s trimming): every
/// slice of a big batch would move the big batch's strings again. The copy
/// is made with arrow-rs' `MutableArrayData`; view columns go through `gc`,
/// which keeps only the strings the views reference. Dictionaries are kept
/// whole and shared.
pub fn compact(batch: &RecordBatch) -> std::result::Result<RecordBatch, ArrowError> {
    let columns = batch
        .columns()
        .iter()
        .map(compact_array)
        .collect::<std::result::Result<Vec<_>, _>>()?;
    RecordBatch::try_new(batch.schema(), columns)
}

fn compact_array(array: &ArrayRef) -> std::result::Result<ArrayRef, ArrowError> {
    Ok(match array.data_type() {
        DataType::Utf8View => std::sync::Arc::new(array.as_string_view().gc()),
        DataType::BinaryView => std::sync::Arc::new(array.as_binary_view().gc()),
        _ => {
            let data = array.to_data();
            let mut copy = MutableArrayData::new(vec![&data], false, data.len());
            copy.try_extend(0, 0, data.len())?;
            make_array(copy.freeze())
        }
    })
}

/// Stops after `limit` rows; the batch that crosses it is cut to a
/// [`compact`] copy of its first rows. `path` names the input in errors.
fn limit_rows(
    batches: Batches,
    limit: u64,
    path: PathBuf,
) -> impl Iterator<Item = Result<RecordBatch>> + Send {
    let mut left = limit;
    batches.map_while(move |batch| {
        if left == 0 {
            return None;
        }
        Some(batch.and_then(|batch| {
            let take = (batch.num_rows() as u64).min(left);
            left -= take;
            if take == batch.num_rows() as u64 {
                return Ok(batch);
            }
            // The cast is lossless: `take` is less than `num_rows()`, a usize.
            compact(&batch.slice(0, take as usize))
                .map_err(|e| CliError::input(&path, format!("cutting to --rows: {e}")))
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
        let boxed: Batches =
            Box::new(batches.map(|b| b.map_err(|e| CliError::Usage(e.to_string()))));
        let rows: Vec<usize> = limit_rows(boxed, 650, PathBuf::from("x"))
            .map(|b| b.unwrap().num_rows())
            .collect();
        assert_eq!(rows, [300, 300, 50]);
    }

    #[test]
    fn rechunk_slices_long_batches_and_passes_short_ones() {
        let batches = Dataset::new(2_500, 3).with_chunk_rows(1_000).batches();
        let batches = batches.map(|b| b.map_err(|e| CliError::Usage(e.to_string())));
        let chunks: Vec<RecordBatch> = rechunk(batches, 400, PathBuf::from("x"))
            .map(|b| b.unwrap())
            .collect();
        let rows: Vec<usize> = chunks.iter().map(|b| b.num_rows()).collect();
        assert_eq!(rows, [400, 400, 200, 400, 400, 200, 400, 100]);
        // The slices are the rows in order: 1,000 + 1,000 + 500.
        let whole = Dataset::new(2_500, 3).generate(0, 2_500).unwrap();
        let mut start = 0;
        for chunk in &chunks {
            assert_eq!(*chunk, whole.slice(start, chunk.num_rows()));
            start += chunk.num_rows();
        }
    }

    #[test]
    fn a_compact_slice_owns_only_its_rows() {
        let whole = Dataset::new(10_000, 4).generate(0, 10_000).unwrap();
        let slice = whole.slice(4_000, 1_000);
        let compacted = compact(&slice).unwrap();
        assert_eq!(compacted, slice);
        let bytes = crate::pipeline::batch_bytes;
        // The zero-copy slice points into all of the batch's string, list
        // and view data; the copy holds about a tenth of it.
        assert!(bytes(&slice) > bytes(&whole) / 3, "{}", bytes(&slice));
        assert!(
            bytes(&compacted) < bytes(&whole) / 8,
            "{}",
            bytes(&compacted)
        );
        assert!(
            bytes(&compacted) > bytes(&whole) / 12,
            "{}",
            bytes(&compacted)
        );
    }

    #[test]
    fn rechunk_passes_errors_through_in_order() {
        let items = vec![
            Dataset::new(10, 1)
                .generate(0, 10)
                .map_err(|e| CliError::Usage(e.to_string())),
            Err(CliError::Usage("broken".into())),
        ];
        let out: Vec<Result<RecordBatch>> =
            rechunk(items.into_iter(), 4, PathBuf::from("x")).collect();
        assert_eq!(out.len(), 4);
        assert_eq!(out[2].as_ref().unwrap().num_rows(), 2);
        assert_eq!(out[3].as_ref().unwrap_err().to_string(), "broken");
    }

    #[test]
    fn a_missing_file_names_the_path() {
        let err = open(Some(Path::new("/nonexistent/x.arrow")), None, 0, 1024)
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

//! `fetch --verify FILE`: the fetched batches, copied back to the host,
//! compared with a file's, row for row.
//!
//! A server may cut a dataset into batches differently from the file (the
//! main command's reader cuts long IPC batches, a pyarrow server sends its
//! own), so rows are compared, not batches: each fetched batch is compared
//! with the file's next rows, taken from as many of its batches as they
//! span (zero-copy slices, concatenated only when they span several).

use std::path::{Path, PathBuf};

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;

use crate::error::{CliError, Result};
use crate::input::{self, Batches};
use crate::pipeline::{describe_difference, describe_schema_difference};

/// The file's rows not yet compared.
pub(super) struct Expected {
    path: PathBuf,
    schema: SchemaRef,
    batches: Batches,
    /// The file's batch being compared, and the offset of its next row.
    current: Option<(RecordBatch, usize)>,
    /// Rows compared so far.
    rows: u64,
}

impl Expected {
    /// Opens `path` as the main command reads a file.
    pub fn open(path: &Path) -> Result<Expected> {
        // Uncut batches: no copies, and the comparison spans batches anyway.
        let input = input::open(Some(path), None, 0, usize::MAX)?;
        Ok(Expected {
            path: path.to_path_buf(),
            schema: input.schema,
            batches: input.batches,
            current: None,
            rows: 0,
        })
    }

    /// Fails unless the fetched dataset's schema is the file's, metadata
    /// included: a zero-batch dataset is compared by its schema alone.
    pub fn check_schema(&self, found: &SchemaRef) -> Result<()> {
        match describe_schema_difference(&self.schema, found) {
            None => Ok(()),
            Some(detail) => Err(self.differs(None, format!("the schema differs: {detail}"))),
        }
    }

    /// Compares `found`, the `index`-th fetched batch, with the file's next
    /// rows.
    pub fn compare(&mut self, index: usize, found: &RecordBatch) -> Result<()> {
        let expected = self.take(found.num_rows())?;
        if expected.num_rows() < found.num_rows() {
            return Err(self.differs(
                Some(index),
                format!(
                    "the fetched batch has {} rows, but the file has only {} left after row {}",
                    found.num_rows(),
                    expected.num_rows(),
                    self.rows
                ),
            ));
        }
        if expected != *found {
            let detail = format!(
                "{} (the batch starts at row {} of the file)",
                describe_difference(&expected, found),
                self.rows
            );
            return Err(self.differs(Some(index), detail));
        }
        self.rows += found.num_rows() as u64;
        Ok(())
    }

    /// Fails when the file has rows the fetch did not bring.
    pub fn finish(&mut self) -> Result<()> {
        let left = self.take(1)?;
        if left.num_rows() == 0 {
            return Ok(());
        }
        Err(self.differs(
            None,
            format!(
                "the fetch ended after {} rows, but the file has more",
                self.rows
            ),
        ))
    }

    /// Up to `rows` of the file's next rows (fewer only at its end).
    fn take(&mut self, rows: usize) -> Result<RecordBatch> {
        let mut pieces = Vec::new();
        let mut wanted = rows;
        while wanted > 0 {
            let (batch, offset) = match self.current.take() {
                Some((batch, offset)) if offset < batch.num_rows() => (batch, offset),
                _ => match self.batches.next() {
                    Some(batch) => (batch?, 0),
                    None => break,
                },
            };
            let len = wanted.min(batch.num_rows() - offset);
            pieces.push(batch.slice(offset, len));
            wanted -= len;
            self.current = Some((batch, offset + len));
        }
        match pieces.len() {
            0 => Ok(RecordBatch::new_empty(self.schema.clone())),
            // One slice: compared as is, no copy.
            1 => Ok(pieces.swap_remove(0)),
            _ => arrow_select::concat::concat_batches(&self.schema, &pieces).map_err(|e| {
                CliError::input(&self.path, format!("joining batches to compare: {e}"))
            }),
        }
    }

    fn differs(&self, batch: Option<usize>, detail: String) -> CliError {
        CliError::Differs {
            file: self.path.clone(),
            batch,
            detail,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataset::Dataset;

    /// The dataset's `rows` rows, in batches of `chunk` rows, as an
    /// `Expected` (no file behind it).
    fn expected(rows: u64, chunk: usize) -> Expected {
        let batches = Dataset::new(rows, 5).with_chunk_rows(chunk).batches();
        Expected {
            path: PathBuf::from("data.arrows"),
            schema: Dataset::schema(),
            batches: Box::new(batches.map(|b| b.map_err(|e| CliError::Usage(e.to_string())))),
            current: None,
            rows: 0,
        }
    }

    #[test]
    fn batches_cut_differently_compare_equal_row_for_row() {
        let mut file = expected(1_000, 300);
        let fetched: Vec<RecordBatch> = Dataset::new(1_000, 5)
            .with_chunk_rows(450)
            .batches()
            .collect::<std::result::Result<_, _>>()
            .unwrap();
        for (index, batch) in fetched.iter().enumerate() {
            file.compare(index, batch).unwrap();
        }
        file.finish().unwrap();
        assert_eq!(file.rows, 1_000);
    }

    #[test]
    fn a_different_row_names_the_batch_and_the_row_of_the_file() {
        let mut file = expected(100, 100);
        let other = Dataset::new(100, 6).generate(50, 50).unwrap();
        file.compare(0, &Dataset::new(100, 5).generate(0, 50).unwrap())
            .unwrap();
        let err = file.compare(1, &other).unwrap_err().to_string();
        assert!(
            err.starts_with("batch 1 differs from data.arrows: column"),
            "{err}"
        );
        assert!(
            err.ends_with("(the batch starts at row 50 of the file)"),
            "{err}"
        );
    }

    #[test]
    fn too_many_or_too_few_rows_are_differences() {
        let mut file = expected(10, 10);
        let err = file
            .compare(0, &Dataset::new(20, 5).generate(0, 20).unwrap())
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("has 20 rows, but the file has only 10 left after row 0"),
            "{err}"
        );

        let mut file = expected(10, 10);
        file.compare(0, &Dataset::new(10, 5).generate(0, 4).unwrap())
            .unwrap();
        let err = file.finish().unwrap_err().to_string();
        assert_eq!(
            err,
            "the fetched data differs from data.arrows: the fetch ended after 4 rows, \
             but the file has more"
        );
    }
}

//! The command's error type: one variant per kind of failure, each message
//! naming the file, batch or stage involved, and the exit code it maps to.

use std::fmt;
use std::path::PathBuf;

/// Everything that stops the command.
#[derive(Debug)]
pub enum CliError {
    /// The arguments ask for something this build cannot do (exit code 2).
    Usage(String),
    /// The input file cannot be opened or decoded.
    Input {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        message: String,
    },
    /// A stage of the round trip failed on one batch.
    Stage {
        /// The stage (`export`, `C hand-off`, `get_next`, `import`,
        /// `to_host`).
        stage: &'static str,
        /// Index of the batch, from 0.
        batch: usize,
        /// The library's (or the C code's) message.
        message: String,
    },
    /// A stage that concerns the whole stream (`--stream`), not one batch,
    /// failed: exporting or relaying the stream, or reading its schema.
    Stream {
        /// The stage (`export`, `C relay`, `import`).
        stage: &'static str,
        /// The library's (or the C code's) message.
        message: String,
    },
    /// An Arrow Flight call failed, or the server could not start
    /// (`serve`, `fetch`); the message names the location, the call and
    /// the gRPC status code.
    Flight(arrow_device_flight::Error),
    /// What `fetch` brought differs from the file given to `--verify`.
    Differs {
        /// The file.
        file: PathBuf,
        /// Index of the fetched batch, from 0; `None` when the difference
        /// is no one batch's (the schema, rows missing at the end).
        batch: Option<usize>,
        /// Where and how they differ.
        detail: String,
    },
    /// The batch that came back differs from the one that went in.
    Mismatch {
        /// Index of the batch, from 0.
        batch: usize,
        /// Where and how they differ.
        detail: String,
    },
}

impl CliError {
    /// The process exit code: 2 for usage errors (a malformed Flight
    /// location, or TLS options that do not fit it, included), 1 for
    /// everything else.
    pub fn exit_code(&self) -> i32 {
        match self {
            CliError::Usage(_) => 2,
            CliError::Flight(
                arrow_device_flight::Error::Location { .. }
                | arrow_device_flight::Error::Config { .. },
            ) => 2,
            _ => 1,
        }
    }

    pub(crate) fn input(path: impl Into<PathBuf>, message: impl fmt::Display) -> Self {
        CliError::Input {
            path: path.into(),
            message: message.to_string(),
        }
    }

    pub(crate) fn stage(stage: &'static str, batch: usize, message: impl fmt::Display) -> Self {
        CliError::Stage {
            stage,
            batch,
            message: message.to_string(),
        }
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CliError::Usage(message) => f.write_str(message),
            CliError::Input { path, message } => write!(f, "{}: {message}", path.display()),
            CliError::Stage {
                stage,
                batch,
                message,
            } => {
                write!(f, "batch {batch}: {stage} failed: {message}")
            }
            CliError::Stream { stage, message } => {
                write!(f, "stream: {stage} failed: {message}")
            }
            CliError::Flight(e) => write!(f, "{e}"),
            CliError::Differs {
                file,
                batch: Some(batch),
                detail,
            } => write!(f, "batch {batch} differs from {}: {detail}", file.display()),
            CliError::Differs {
                file,
                batch: None,
                detail,
            } => write!(
                f,
                "the fetched data differs from {}: {detail}",
                file.display()
            ),
            CliError::Mismatch { batch, detail } => {
                write!(
                    f,
                    "batch {batch}: the round trip changed the data: {detail}"
                )
            }
        }
    }
}

impl std::error::Error for CliError {}

/// The command's result type.
pub type Result<T, E = CliError> = std::result::Result<T, E>;

//! `arrow-device serve`: files, or the embedded dataset, served over Arrow
//! Flight.
//!
//! Each file is served under its file stem (`data/trips.parquet` as
//! `trips`), the embedded dataset as [`EMBEDDED`]. A file is read as the
//! main command reads it ([`crate::input`]: IPC file, IPC stream or
//! Parquet, told apart by the first bytes) and opened anew for every
//! `do_get`, so each client gets its own stream and a file is never held in
//! memory whole. Every file is opened once at start-up too, so that a file
//! that cannot be read stops the command there rather than failing the
//! first client.
//!
//! The server runs until the process is ended. SIGINT and SIGTERM are left
//! at their default action, which ends the process: the server holds
//! nothing that outlives it (the listening socket and connections close
//! with the process), so a handler would add a dependency (this crate uses
//! no libc) for nothing to clean up. `--until-stdin-closes` stops it
//! gracefully when standard input reaches its end instead, which a test or
//! a supervising process can trigger portably by closing the pipe.

// The field docs are the command's --help text, written for a terminal:
// `emulated[:N]` there is a usage pattern, not a rustdoc link.
#![allow(rustdoc::broken_intra_doc_links)]

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use arrow_array::RecordBatchIterator;
use arrow_device_flight::{Batches, FlightServer, ServerTls, Source};
use arrow_schema::ArrowError;
use clap::Parser;

use crate::error::{CliError, Result};
use crate::input::{self, Input};

/// The first argument that selects this command.
pub const SUBCOMMAND: &str = "serve";

/// The name the embedded dataset is served under when no file is given.
pub const EMBEDDED: &str = "embedded";

/// How long requests in flight may take to finish once `--until-stdin-closes`
/// sees the end of standard input.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

const AFTER_HELP: &str = "\
Examples:
  arrow-device serve --listen 127.0.0.1:8815              the embedded dataset, as `embedded`
  arrow-device serve trips.parquet events.arrows --listen 0.0.0.0:8815 --token-file token
  arrow-device fetch grpc://127.0.0.1:8815 trips --device cuda:0

Prints `serving N sources at LOCATION` (the port chosen when ADDR's is 0),
then serves until ended (Ctrl-C, SIGTERM), or with --until-stdin-closes until
standard input ends.

Exit codes: 0 stopped after standard input ended; 1 a file cannot be read or
the address cannot be bound; 2 usage error.";

/// Serves files, or the embedded dataset, over Arrow Flight.
///
/// Each FILE (Arrow IPC file or stream, or Parquet file, detected from the
/// first bytes) is served under its file stem: its ticket, and the path of
/// its flight descriptor. Without FILE the embedded dataset is served as
/// `embedded`. Any Flight client can read them (`arrow-device fetch`,
/// pyarrow.flight, Arrow C++ or Java).
#[derive(Debug, Parser)]
#[command(
    name = "arrow-device serve",
    bin_name = "arrow-device serve",
    version,
    after_help = AFTER_HELP
)]
pub struct ServeArgs {
    /// Files to serve, each under its file stem (two files with the same
    /// stem are refused). Regular files only: each is opened again for
    /// every request.
    pub files: Vec<PathBuf>,

    /// Address to listen on, HOST:PORT; port 0 picks a free port.
    #[arg(long, value_name = "ADDR")]
    pub listen: String,

    /// Require `authorization: Bearer TOKEN` on every call. Visible to
    /// other users in the process list: prefer --token-file.
    #[arg(long, value_name = "TOKEN", conflicts_with = "token_file")]
    pub token: Option<String>,

    /// Require the bearer token in this file (its trailing newline is not
    /// part of it).
    #[arg(long, value_name = "PATH")]
    pub token_file: Option<PathBuf>,

    /// Serve over TLS (grpc+tls://) with this certificate chain (PEM).
    #[arg(long, value_name = "PEM", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,

    /// The private key (PEM) of --tls-cert.
    #[arg(long, value_name = "PEM", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,

    /// Batches copied to the host and encoded ahead of the send, per
    /// request (default 2): what a client that stops reading costs the
    /// server.
    #[arg(long, value_name = "N", value_parser = super::parse_batches)]
    pub depth: Option<usize>,

    /// Rows of the embedded dataset (default 1000000), or at most this many
    /// rows of each FILE.
    #[arg(long, value_name = "N")]
    pub rows: Option<u64>,

    /// Seed of the embedded dataset.
    #[arg(long, default_value_t = crate::dataset::DEFAULT_SEED, value_name = "SEED")]
    pub seed: u64,

    /// Rows per batch, at least 1: the embedded dataset and Parquet files are
    /// read in batches of this size, and longer batches of IPC inputs are cut
    /// to it.
    #[arg(
        long,
        default_value_t = crate::dataset::DEFAULT_CHUNK_ROWS,
        value_name = "N",
        value_parser = crate::cli::parse_batch_rows
    )]
    pub batch_rows: usize,

    /// Stop (letting requests in flight finish) when standard input reaches
    /// its end, and exit 0: for tests and supervisors that hold a pipe.
    #[arg(long)]
    pub until_stdin_closes: bool,
}

/// What is served under one name: a file, or the embedded dataset (`None`).
#[derive(Debug, Clone)]
struct Served {
    file: Option<PathBuf>,
    rows: Option<u64>,
    seed: u64,
    batch_rows: usize,
}

impl Served {
    fn open(&self) -> Result<Input> {
        input::open(self.file.as_deref(), self.rows, self.seed, self.batch_rows)
    }
}

/// Starts the server, prints its location, and serves until the process
/// ends or, with `--until-stdin-closes`, until standard input ends.
pub fn run(args: &ServeArgs) -> Result<()> {
    let served = served(args)?;
    let mut builder = FlightServer::builder();
    let mut descriptions = Vec::with_capacity(served.len());
    for (name, served) in served {
        // Opened once here so that an unreadable file stops the command now.
        let opened = served.open()?;
        descriptions.push(format!("{name}: {}", opened.description));
        builder = builder.source(name, source(served));
    }
    if let Some(token) = super::read_token(args.token.as_deref(), args.token_file.as_deref())? {
        builder = builder.bearer_token(token);
    }
    if let (Some(certificate), Some(key)) = (&args.tls_cert, &args.tls_key) {
        builder = builder.tls(ServerTls {
            certificate: super::read_pem("--tls-cert", certificate)?,
            key: super::read_pem("--tls-key", key)?,
        });
    }
    if let Some(depth) = args.depth {
        builder = builder.depth(depth);
    }
    let server = builder.spawn(&args.listen).map_err(CliError::Flight)?;

    let count = descriptions.len();
    let noun = if count == 1 { "source" } else { "sources" };
    let mut stdout = std::io::stdout().lock();
    // A reader waits for this line to learn the port: flush it now.
    writeln!(stdout, "serving {count} {noun} at {}", server.location())
        .and_then(|()| stdout.flush())
        .map_err(|e| CliError::input("standard output", format!("cannot write: {e}")))?;
    drop(stdout);
    for description in &descriptions {
        eprintln!("  {description}");
    }

    if !args.until_stdin_closes {
        // Serving runs on the flight crate's threads; this one waits for
        // the serve loop, which ends only if it fails.
        return server.wait().map_err(CliError::Flight);
    }
    // Any error reading counts as the end: the other side is gone either way.
    let _ = std::io::copy(&mut std::io::stdin().lock(), &mut std::io::sink());
    server.shutdown(SHUTDOWN_GRACE).map_err(CliError::Flight)?;
    eprintln!("stopped: standard input ended");
    Ok(())
}

/// The sources by name: each file under its stem, or the embedded dataset.
fn served(args: &ServeArgs) -> Result<BTreeMap<String, Served>> {
    let served = |file: Option<PathBuf>| Served {
        file,
        rows: args.rows,
        seed: args.seed,
        batch_rows: args.batch_rows,
    };
    let mut sources = BTreeMap::new();
    if args.files.is_empty() {
        sources.insert(EMBEDDED.to_string(), served(None));
        return Ok(sources);
    }
    let mut paths: BTreeMap<String, &Path> = BTreeMap::new();
    for path in &args.files {
        let name = stem(path)?;
        if let Some(first) = paths.insert(name.clone(), path) {
            return Err(CliError::Usage(format!(
                "{} and {} would both be served as {name:?} (a file is served under its \
                 file stem); rename or link one of them",
                first.display(),
                path.display()
            )));
        }
        sources.insert(name, served(Some(path.clone())));
    }
    Ok(sources)
}

/// The name `path` is served under: its file stem, which must be UTF-8
/// (tickets are strings) and must be a regular file's (it is opened again
/// for every request, which a pipe or standard input cannot be).
fn stem(path: &Path) -> Result<String> {
    if path.as_os_str() == input::STDIN_ARG {
        return Err(CliError::Usage(
            "serve cannot serve standard input (`-`): every request opens the file again; \
             save the data to a file and serve its path"
                .to_string(),
        ));
    }
    let metadata =
        std::fs::metadata(path).map_err(|e| CliError::input(path, format!("cannot open: {e}")))?;
    if !metadata.is_file() {
        return Err(CliError::input(
            path,
            "not a regular file: every request opens the file again, which a pipe, FIFO or \
             directory does not allow",
        ));
    }
    let stem = path.file_stem().ok_or_else(|| {
        CliError::Usage(format!(
            "{}: has no file name to serve it under",
            path.display()
        ))
    })?;
    stem.to_str().map(str::to_string).ok_or_else(|| {
        CliError::Usage(format!(
            "{}: its file stem is not UTF-8, and tickets are strings; rename it",
            path.display()
        ))
    })
}

/// A Flight source that opens `served` for every request.
fn source(served: Served) -> Source {
    Source::new(move || {
        let input = served.open().map_err(source_error)?;
        // The reader's error type is arrow's: the CLI's error travels inside
        // it whole, and the server sends its message to the client.
        let batches = input
            .batches
            .map(|batch| batch.map_err(|e| ArrowError::ExternalError(Box::new(e))));
        Ok(Batches::host(RecordBatchIterator::new(
            batches,
            input.schema,
        )))
    })
}

/// The CLI's error as the flight crate's, kept whole (its message names
/// the file).
fn source_error(error: CliError) -> arrow_device_flight::Error {
    arrow_device_flight::Error::External(Box::new(error))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(argv: &[&str]) -> ServeArgs {
        let mut all = vec!["serve", "--listen", "127.0.0.1:0"];
        all.extend_from_slice(argv);
        ServeArgs::try_parse_from(all).unwrap()
    }

    #[test]
    fn without_files_the_embedded_dataset_is_served() {
        let sources = served(&args(&["--rows", "10"])).unwrap();
        assert_eq!(sources.keys().collect::<Vec<_>>(), [EMBEDDED]);
        assert_eq!(sources[EMBEDDED].rows, Some(10));
        assert!(sources[EMBEDDED].file.is_none());
    }

    #[test]
    fn standard_input_cannot_be_served() {
        let err = served(&args(&["-"])).unwrap_err();
        assert_eq!(err.exit_code(), 2);
        assert!(err.to_string().contains("standard input"), "{err}");
    }

    #[test]
    fn token_and_token_file_exclude_each_other_and_tls_needs_both_halves() {
        let err = ServeArgs::try_parse_from([
            "serve",
            "--listen",
            "h:1",
            "--token",
            "a",
            "--token-file",
            "f",
        ])
        .unwrap_err();
        assert_eq!(err.exit_code(), 2);
        assert!(err.to_string().contains("cannot be used with"), "{err}");
        let err = ServeArgs::try_parse_from(["serve", "--listen", "h:1", "--tls-cert", "c.pem"])
            .unwrap_err();
        assert!(err.to_string().contains("--tls-key <PEM>"), "{err}");
        let err = ServeArgs::try_parse_from(["serve", "x.arrows"]).unwrap_err();
        assert!(err.to_string().contains("--listen <ADDR>"), "{err}");
    }
}

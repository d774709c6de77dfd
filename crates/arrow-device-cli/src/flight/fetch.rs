//! `arrow-device fetch`: a dataset served over Arrow Flight, landed on a
//! device batch by batch, with a report of what it took.
//!
//! Each batch arrives decoded in host memory, its copy onto the device is
//! queued by `arrow-device-flight` (at most `--prefetch` batches ahead), and
//! this command waits on the batch's `sync_event` (`synchronize()`) before
//! counting it: a batch is fetched when its data is usable on the device.
//! With `--verify FILE` each batch is also copied back to the host and
//! compared with the file's rows (module `verify`).

// The field docs are the command's --help text, written for a terminal:
// `emulated[:N]` there is a usage pattern, not a rustdoc link.
#![allow(rustdoc::broken_intra_doc_links)]

use std::path::PathBuf;
use std::time::{Duration, Instant};

use arrow_device_flight::{fetch_batches, ClientOptions};
use clap::Parser;

use super::report::FetchReport;
use super::verify::Expected;
use crate::cli::DeviceSpec;
use crate::error::{CliError, Result};
use crate::progress::Progress;

/// The first argument that selects this command.
pub const SUBCOMMAND: &str = "fetch";

const AFTER_HELP: &str = "\
Examples:
  arrow-device fetch grpc://127.0.0.1:8815 embedded --device emulated:0
  arrow-device fetch grpc+tls://data.example:443 trips --token-file token --tls-root ca.pem
  arrow-device fetch grpc://127.0.0.1:8815 trips --verify trips.parquet

Exit codes: 0 fetched (and, with --verify, equal to FILE); 1 a Flight call, a
device step or the comparison failed (the message names the location, the
call and the gRPC status code); 2 usage error, a malformed LOCATION included.";

/// Fetches a dataset over Arrow Flight onto a device.
///
/// Calls do_get with TICKET at LOCATION (any Flight server: `arrow-device
/// serve`, pyarrow.flight, Arrow C++ or Java), lands each record batch on
/// the device and waits for its copy, and prints rows, bytes received,
/// throughput and the time to the first batch on the device.
#[derive(Debug, Parser)]
#[command(
    name = "arrow-device fetch",
    bin_name = "arrow-device fetch",
    version,
    after_help = AFTER_HELP
)]
pub struct FetchArgs {
    /// The server: grpc://HOST:PORT, grpc+tcp://HOST:PORT or
    /// grpc+tls://HOST:PORT.
    pub location: String,

    /// The ticket to pass to do_get; on an `arrow-device serve` server, the
    /// source's name (a file's stem, or `embedded`).
    pub ticket: String,

    /// Device to land the batches on: cpu, emulated[:N] or cuda[:N] (N
    /// defaults to 0). Default: the best device present (a GPU when there
    /// is one, else cpu).
    #[arg(long, value_name = "DEVICE")]
    pub device: Option<DeviceSpec>,

    /// Send `authorization: Bearer TOKEN` on every call. Visible to other
    /// users in the process list: prefer --token-file.
    #[arg(long, value_name = "TOKEN", conflicts_with = "token_file")]
    pub token: Option<String>,

    /// Send the bearer token in this file (its trailing newline is not part
    /// of it).
    #[arg(long, value_name = "PATH")]
    pub token_file: Option<PathBuf>,

    /// The certificate authority (PEM) that signed the server's
    /// certificate, for grpc+tls:// (default: the system's roots).
    #[arg(long, value_name = "PEM")]
    pub tls_root: Option<PathBuf>,

    /// Batches decoded or on their way to the device ahead of this command
    /// (default 2): memory stays bounded by it whatever the dataset's size.
    #[arg(long, value_name = "N", value_parser = super::parse_batches)]
    pub prefetch: Option<usize>,

    /// Do not draw the progress bar (it is never drawn when stderr is not a
    /// terminal).
    #[arg(long)]
    pub no_progress: bool,

    /// Compare the fetched rows, copied back to the host, with this Arrow
    /// IPC file or stream, or Parquet file; the first difference fails the
    /// command.
    #[arg(long, value_name = "FILE")]
    pub verify: Option<PathBuf>,
}

/// Fetches the dataset and returns the report to print.
pub fn run(args: &FetchArgs) -> Result<FetchReport> {
    let spec = args.device.unwrap_or_else(DeviceSpec::best_present);
    let device = spec.open()?;
    let defaults = ClientOptions::default();
    let options = ClientOptions {
        token: super::read_token(args.token.as_deref(), args.token_file.as_deref())?,
        tls_root: match &args.tls_root {
            Some(path) => Some(super::read_pem("--tls-root", path)?),
            None => None,
        },
        prefetch: args.prefetch.unwrap_or(defaults.prefetch),
        ..defaults
    };
    // Opened before the call, so that a file that cannot be read fails
    // before any data moves.
    let mut expected = args.verify.as_deref().map(Expected::open).transpose()?;

    let start = Instant::now();
    let mut batches = fetch_batches(&args.location, args.ticket.clone(), &device, &options)
        .map_err(CliError::Flight)?;
    // The flight crate measures the first batch from the do_get call, which
    // began `stats().elapsed` ago: moved onto this command's clock.
    let since_do_get = batches.stats().elapsed;
    let connected = start.elapsed();
    let do_get = connected.saturating_sub(since_do_get);
    let schema = batches.schema();
    if let Some(expected) = &expected {
        expected.check_schema(&schema)?;
    }

    let progress = Progress::new(None, !args.no_progress);
    let mut first_synchronized = None;
    let mut verifying = Duration::ZERO;
    let mut index = 0;
    for array in &mut batches {
        let array = array.map_err(|e| CliError::stage("fetch", index, e))?;
        array
            .synchronize()
            .map_err(|e| CliError::stage("synchronize", index, e))?;
        first_synchronized.get_or_insert_with(|| start.elapsed());
        if let Some(expected) = &mut expected {
            let t = Instant::now();
            let found = array
                .to_record_batch()
                .map_err(|e| CliError::stage("to_host", index, e))?;
            expected.compare(index, &found)?;
            verifying += t.elapsed();
        }
        index += 1;
        progress.advance(array.len() as u64);
        progress.set_message(format!("({index} batches)"));
    }
    if let Some(expected) = &mut expected {
        let t = Instant::now();
        expected.finish()?;
        verifying += t.elapsed();
    }
    let total = start.elapsed();
    progress.finish();

    let stats = batches.stats();
    Ok(FetchReport {
        location: args.location.clone(),
        ticket: args.ticket.clone(),
        device: format!(
            "{spec} ({}, device_id {})",
            device.device_type(),
            device.device_id()
        ),
        prefetch: options.prefetch,
        columns: schema.fields().len(),
        batches: stats.batches,
        rows: stats.rows as u64,
        wire_bytes: stats.wire_bytes as u64,
        connected,
        first_queued: stats.first_batch_landed.map(|t| do_get + t),
        first_synchronized,
        total,
        verified: args.verify.clone().map(|file| (file, verifying)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn location_and_ticket_are_required_and_counts_parsed() {
        let args = FetchArgs::try_parse_from([
            "fetch",
            "grpc://h:1",
            "trips",
            "--device",
            "emulated:1",
            "--prefetch",
            "4",
        ])
        .unwrap();
        assert_eq!(args.device, Some(DeviceSpec::Emulated(1)));
        assert_eq!(args.prefetch, Some(4));
        let err = FetchArgs::try_parse_from(["fetch", "grpc://h:1"]).unwrap_err();
        assert_eq!(err.exit_code(), 2);
        assert!(err.to_string().contains("<TICKET>"), "{err}");
        let err =
            FetchArgs::try_parse_from(["fetch", "grpc://h:1", "t", "--prefetch", "0"]).unwrap_err();
        assert!(err.to_string().contains("at least 1 batch"), "{err}");
    }

    #[test]
    fn a_malformed_location_is_a_usage_error_naming_it() {
        let args =
            FetchArgs::try_parse_from(["fetch", "localhost:1", "t", "--device", "cpu"]).unwrap();
        let err = run(&args).unwrap_err();
        assert_eq!(err.exit_code(), 2);
        assert!(
            err.to_string()
                .starts_with("location \"localhost:1\": expected grpc://"),
            "{err}"
        );
    }
}

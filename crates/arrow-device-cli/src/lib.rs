//! The `arrow-device` command: round-trips Arrow data through the Arrow C
//! Device Data Interface and reports what each stage costs.
//!
//! For each record batch of the input (an Arrow IPC file or stream, a Parquet
//! file, or the embedded [`dataset`]): export onto the chosen device, hand the
//! `ArrowDeviceArray` and `ArrowSchema` to C code that walks and moves them
//! ([`handoff`]), import the moved structs, copy back to the host, and compare
//! with the input ([`pipeline`]). With `--stream` the whole input goes
//! through one `ArrowDeviceArrayStream` instead, relayed by C code
//! ([`relay`]) and verified batch by batch ([`streaming`]). The [`report`]
//! gives per-stage times and bandwidths.
//!
//! `arrow-device check` ([`check`]) is a second command: it loads a
//! producer from a shared library and runs the conformance checker on it.
//! `arrow-device serve` and `arrow-device fetch` ([`flight`]) move the data
//! over Arrow Flight instead: serve files, fetch a dataset onto a device.
//!
//! The library part exists so the integration tests and benchmarks can reuse
//! the dataset generator; the command itself is `src/main.rs`.

pub mod check;
pub mod cli;
pub mod dataset;
pub mod error;
pub mod flight;
pub mod handoff;
pub mod input;
pub mod pipeline;
pub mod progress;
pub mod relay;
pub mod report;
pub mod streaming;

use std::ffi::OsStr;

use arrow_device::abi::DeviceType;
use arrow_device::ValidationLevel;

use crate::cli::{Args, DeviceSpec};
use crate::error::Result;
use crate::pipeline::{Pipeline, Totals};
use crate::report::Report;

/// The commands other than the round trip, each selected by a first
/// argument of exactly its name.
pub const SUBCOMMANDS: [&str; 3] = [
    check::SUBCOMMAND,
    flight::serve::SUBCOMMAND,
    flight::fetch::SUBCOMMAND,
];

/// The command `argv` (program name first) runs, when its first argument
/// is exactly one of [`SUBCOMMANDS`]; `None` runs the round trip, whose
/// `FILE` may be any other word (a file named `serve` is `./serve`).
///
/// ```
/// use arrow_device_cli::subcommand;
///
/// assert_eq!(subcommand(&["arrow-device", "fetch", "grpc://h:1", "t"]), Some("fetch"));
/// assert_eq!(subcommand(&["arrow-device", "./serve"]), None);
/// assert_eq!(subcommand(&["arrow-device", "--rows", "10", "check"]), None);
/// ```
pub fn subcommand<S: AsRef<OsStr>>(argv: &[S]) -> Option<&'static str> {
    let first = argv.get(1)?.as_ref();
    SUBCOMMANDS
        .into_iter()
        .find(|name| first == OsStr::new(name))
}

/// Runs the command for parsed `args`, returning the report to print.
pub fn run(args: &Args) -> Result<Report> {
    let spec = args.device.unwrap_or_else(DeviceSpec::best_present);
    let device = spec.open()?;
    let device_name = format!(
        "{spec} ({}, device_id {})",
        device.device_type(),
        device.device_id()
    );
    let level = ValidationLevel::from(args.validate);
    // On the CPU, export and import share the input's buffers: nothing is
    // copied, so the bandwidth column only measures overhead.
    let note = if device.device_type() == DeviceType::CPU {
        "cpu: export, import and to_host are zero-copy; GB/s is the data size over the stage time"
    } else {
        // Export queues the copies and records the sync_event; the host first
        // waits for it when import reads sizes from the device.
        "copies are asynchronous: export queues them; import waits on the sync_event to read buffer sizes"
    };
    let mut note = note.to_string();
    if args.stream {
        note.push_str(
            "\nstream: export is the time in the producer's get_next less reading the input, \
             as the C relay measures it; import is the rest of each get_next",
        );
    }
    let note = Some(note);

    let mut input = input::open(args.file.as_deref(), args.rows, args.seed, args.batch_rows)?;
    let description = std::mem::take(&mut input.description);
    let columns = input.schema.fields().len();
    let progress = progress::Progress::new(input.total_rows, !args.no_progress);
    let mut totals = Totals::default();
    let stream = if args.stream {
        let summary = streaming::run(
            input,
            device,
            level,
            args.batch_rows,
            &progress,
            &mut totals,
        )?;
        Some(summary)
    } else {
        round_trip_each(input, &Pipeline::new(device, level), &progress, &mut totals)?;
        None
    };
    progress.finish();

    Ok(Report {
        input: description,
        device: device_name,
        validation: format!("{:?}", args.validate).to_ascii_lowercase(),
        columns,
        totals,
        note,
        stream,
    })
}

/// Round-trips the input one `ArrowDeviceArray` per batch.
fn round_trip_each(
    mut input: input::Input,
    pipeline: &Pipeline,
    progress: &progress::Progress,
    totals: &mut Totals,
) -> Result<()> {
    let mut index = 0;
    loop {
        let t = std::time::Instant::now();
        let Some(batch) = input.batches.next() else {
            return Ok(());
        };
        totals.times.input += t.elapsed();
        let batch = batch?;
        pipeline.round_trip(index, &batch, totals)?;
        progress.advance(batch.num_rows() as u64);
        index += 1;
    }
}

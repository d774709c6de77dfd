//! `arrow-device`: round-trips Arrow data through the Arrow C Device Data
//! Interface (export onto a device, hand to C, import, copy back, compare)
//! and prints per-stage timings. See `arrow-device --help`.
//! `arrow-device check --lib PATH --symbol NAME [--stream]` checks a
//! producer in a shared library instead (`arrow-device check --help`);
//! `arrow-device serve` and `arrow-device fetch` move data over Arrow
//! Flight (`arrow-device serve --help`, `arrow-device fetch --help`).

use std::ffi::OsString;
use std::fmt::Display;
use std::process::ExitCode;

use arrow_device_cli::check::{self, CheckArgs};
use arrow_device_cli::cli::Args;
use arrow_device_cli::error::CliError;
use arrow_device_cli::flight::{fetch, serve};
use clap::Parser;

fn main() -> ExitCode {
    let argv: Vec<OsString> = std::env::args_os().collect();
    // Each subcommand's parser gets `argv` from its name on, which clap
    // takes as the program's name (each names itself `arrow-device NAME`).
    match arrow_device_cli::subcommand(&argv) {
        Some(check::SUBCOMMAND) => return main_check(&argv[1..]),
        Some(serve::SUBCOMMAND) => {
            let args = serve::ServeArgs::parse_from(&argv[1..]);
            return finish("arrow-device serve", serve::run(&args).map(|()| ""));
        }
        Some(fetch::SUBCOMMAND) => {
            let args = fetch::FetchArgs::parse_from(&argv[1..]);
            return finish("arrow-device fetch", fetch::run(&args));
        }
        _ => {}
    }
    // clap prints usage errors itself and exits with code 2.
    let args = Args::parse_from(argv);
    finish("arrow-device", arrow_device_cli::run(&args))
}

/// Prints the report, or `command`'s error with its exit code.
fn finish(command: &str, result: Result<impl Display, CliError>) -> ExitCode {
    match result {
        Ok(report) => {
            print!("{report}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{command}: error: {e}");
            // Exit codes fit in a u8: they are 1 or 2.
            ExitCode::from(e.exit_code() as u8)
        }
    }
}

/// `arrow-device check`; `argv` starts at `check`. Unlike the others, its
/// report can say that checks failed: exit 1 with the report printed.
fn main_check(argv: &[OsString]) -> ExitCode {
    let args = CheckArgs::parse_from(argv);
    match check::run(&args) {
        Ok(report) => {
            print!("{report}");
            if report.passed() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        Err(e) => {
            eprintln!("arrow-device check: error: {e}");
            // Exit codes fit in a u8: they are 1 or 2.
            ExitCode::from(e.exit_code() as u8)
        }
    }
}

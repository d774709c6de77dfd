//! `arrow-device`: round-trips Arrow data through the Arrow C Device Data
//! Interface (export onto a device, hand to C, import, copy back, compare)
//! and prints per-stage timings. See `arrow-device --help`.
//! `arrow-device check --lib PATH --symbol NAME [--stream]` checks a
//! producer in a shared library instead (`arrow-device check --help`).

use std::ffi::OsString;
use std::process::ExitCode;

use arrow_device_cli::check::{self, CheckArgs};
use arrow_device_cli::cli::Args;
use clap::Parser;

fn main() -> ExitCode {
    let argv: Vec<OsString> = std::env::args_os().collect();
    if check::is_check(&argv) {
        return main_check(&argv[1..]);
    }
    // clap prints usage errors itself and exits with code 2.
    let args = Args::parse_from(argv);
    match arrow_device_cli::run(&args) {
        Ok(report) => {
            print!("{report}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("arrow-device: error: {e}");
            // Exit codes fit in a u8: they are 1 or 2.
            ExitCode::from(e.exit_code() as u8)
        }
    }
}

/// `arrow-device check`; `argv` starts at `check`, which clap takes as the
/// program's name (`CheckArgs` names itself `arrow-device check`).
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

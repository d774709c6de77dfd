//! `arrow-device`: round-trips Arrow data through the Arrow C Device Data
//! Interface (export onto a device, hand to C, import, copy back, compare)
//! and prints per-stage timings. See `arrow-device --help`.

use std::process::ExitCode;

use arrow_device_cli::cli::Args;
use clap::Parser;

fn main() -> ExitCode {
    // clap prints usage errors itself and exits with code 2.
    let args = Args::parse();
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

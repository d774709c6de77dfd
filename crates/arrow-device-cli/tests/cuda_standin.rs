//! The `arrow-device` command on a GPU of the CUDA driver stand-in
//! (`crates/cuda-standin`, two GPUs by default): `--device cuda` and
//! `--device cuda:1`, per batch and `--stream`, on the embedded dataset and
//! on Arrow C++ golden streams, must verify equal; a GPU the driver does not
//! have is a usage error naming it and the device count; a driver failure
//! (an injected `cuMemAlloc` out-of-memory) ends the run with exit code 1
//! and a message naming it, never a panic.
//!
//! The binary is run with the stand-in's directory first on
//! `LD_LIBRARY_PATH`, taken from `CUDA_STANDIN_DIR`:
//!
//! ```sh
//! CUDA_STANDIN_DIR=$(bash scripts/cuda-standin.sh) cargo test -p arrow-device-cli --test cuda_standin
//! ```
//!
//! Without `CUDA_STANDIN_DIR` every test is skipped, saying why; with
//! `ARROW_DEVICE_REQUIRE_STANDIN=1` it fails instead.
#![cfg(feature = "cuda")]

mod common;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::{assert_stage_rows, golden_streams, report_value, stderr, stdout};

/// The stand-in's directory, or `None` (after printing why) when
/// `CUDA_STANDIN_DIR` is not set and the stand-in is not required.
fn standin_dir(test: &str) -> Option<PathBuf> {
    let Some(dir) = std::env::var_os("CUDA_STANDIN_DIR") else {
        let required = std::env::var("ARROW_DEVICE_REQUIRE_STANDIN").is_ok_and(|v| v == "1");
        assert!(
            !required,
            "{test}: CUDA_STANDIN_DIR is not set, and ARROW_DEVICE_REQUIRE_STANDIN=1"
        );
        println!(
            "{test}: skipped: CUDA_STANDIN_DIR is not set (the directory that \
             `bash scripts/cuda-standin.sh` prints)"
        );
        return None;
    };
    let dir = PathBuf::from(dir);
    assert!(
        dir.join("libcuda.so").is_file(),
        "{test}: CUDA_STANDIN_DIR={} holds no libcuda.so (build it with \
         `bash scripts/cuda-standin.sh`)",
        dir.display()
    );
    Some(dir)
}

/// Runs the command with the stand-in first on the library path, the
/// stand-in's default settings, and `faults` as `CUDA_STANDIN_FAULTS`.
fn arrow_device_on(dir: &Path, args: &[&str], faults: Option<&str>) -> Output {
    let mut library_path = OsString::from(dir.as_os_str());
    if let Some(rest) = std::env::var_os("LD_LIBRARY_PATH") {
        library_path.push(":");
        library_path.push(rest);
    }
    let mut command = Command::new(env!("CARGO_BIN_EXE_arrow-device"));
    command.args(args).env("LD_LIBRARY_PATH", library_path);
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("CUDA_STANDIN_") {
            command.env_remove(name);
        }
    }
    if let Some(faults) = faults {
        command.env("CUDA_STANDIN_FAULTS", faults);
    }
    command.output().expect("the arrow-device binary runs")
}

/// The run's command line, for messages.
fn shown(args: &[&str]) -> String {
    format!("arrow-device {}", args.join(" "))
}

/// Neither the command nor the stand-in reported a panic or a driver
/// violation on stderr.
fn assert_clean_stderr(args: &[&str], output: &Output) {
    let err = stderr(output);
    assert!(
        !err.contains("panicked"),
        "{}: a panic on stderr:\n{err}",
        shown(args)
    );
    assert!(
        !err.contains("VIOLATION"),
        "{}: the CUDA driver stand-in saw a violation:\n{err}",
        shown(args)
    );
}

/// Asserts exit 0 and a report of `device` ending in `verified: equal`;
/// returns the report.
fn assert_verified(args: &[&str], output: &Output, device: &str) -> String {
    let out = stdout(output);
    assert!(
        output.status.success() && out.ends_with("\nverified: equal\n"),
        "{}: exit {:?}\n--- stdout\n{out}\n--- stderr\n{}",
        shown(args),
        output.status,
        stderr(output)
    );
    assert_clean_stderr(args, output);
    let ordinal = device.strip_prefix("cuda:").unwrap_or("0");
    assert_eq!(
        report_value(&out, "device"),
        Some(format!("cuda:{ordinal} (CUDA, device_id {ordinal})").as_str()),
        "{}:\n{out}",
        shown(args)
    );
    out
}

const DEVICES: [&str; 2] = ["cuda", "cuda:1"];

#[test]
fn the_embedded_dataset_verifies_on_both_gpus_per_batch_and_as_a_stream() {
    let test = "the_embedded_dataset_verifies_on_both_gpus_per_batch_and_as_a_stream";
    let Some(dir) = standin_dir(test) else {
        return;
    };
    for device in DEVICES {
        for stream in [false, true] {
            // 20,000 rows in batches of 7,000: three batches.
            let mut args = vec![
                "--rows",
                "20000",
                "--batch-rows",
                "7000",
                "--device",
                device,
                "--no-progress",
            ];
            if stream {
                args.push("--stream");
            }
            let output = arrow_device_on(&dir, &args, None);
            let out = assert_verified(&args, &output, device);
            assert_eq!(report_value(&out, "rows"), Some("20000"), "{out}");
            assert_eq!(report_value(&out, "batches"), Some("3"), "{out}");
            assert_stage_rows(&out, if stream { "C relay" } else { "C hand-off" });
        }
    }
}

/// Golden streams of Arrow C++: primitive types, a view type (whose
/// variadic sizes go to pinned memory) and nested types; as a stream in
/// batches of 3 rows (compact copies of each batch's rows).
#[test]
fn golden_streams_verify_on_both_gpus_per_batch_and_as_a_stream() {
    let test = "golden_streams_verify_on_both_gpus_per_batch_and_as_a_stream";
    let Some(dir) = standin_dir(test) else {
        return;
    };
    let chosen = [
        "generated_primitive.stream",
        "generated_binary_view.stream",
        "generated_nested.stream",
    ];
    let paths: Vec<PathBuf> = golden_streams()
        .into_iter()
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| chosen.iter().any(|c| n == *c))
        })
        .collect();
    assert_eq!(paths.len(), chosen.len(), "golden streams {chosen:?}");
    for path in &paths {
        let file = path.to_str().expect("a UTF-8 path");
        for device in DEVICES {
            for stream in [false, true] {
                let mut args = vec![file, "--device", device, "--no-progress"];
                if stream {
                    args.extend(["--stream", "--batch-rows", "3"]);
                }
                let output = arrow_device_on(&dir, &args, None);
                let out = assert_verified(&args, &output, device);
                assert!(
                    report_value(&out, "input")
                        .is_some_and(|input| input.starts_with("Arrow IPC stream")),
                    "{}:\n{out}",
                    shown(&args)
                );
            }
        }
    }
}

/// The stand-in has GPUs 0 and 1: `cuda:2` is a usage error (exit 2) that
/// names the device and the count the driver reports.
#[test]
fn a_gpu_the_driver_does_not_have_is_a_usage_error_naming_the_count() {
    let test = "a_gpu_the_driver_does_not_have_is_a_usage_error_naming_the_count";
    let Some(dir) = standin_dir(test) else {
        return;
    };
    for stream in [false, true] {
        let mut args = vec!["--rows", "100", "--device", "cuda:2", "--no-progress"];
        if stream {
            args.push("--stream");
        }
        let output = arrow_device_on(&dir, &args, None);
        let err = stderr(&output);
        assert_eq!(
            output.status.code(),
            Some(2),
            "{}: exit {:?}\n{err}",
            shown(&args),
            output.status
        );
        assert!(err.contains("cuda:2"), "{}: {err}", shown(&args));
        assert!(
            err.contains("2 device(s)"),
            "{}: the message should give the device count: {err}",
            shown(&args)
        );
        assert!(stdout(&output).is_empty(), "{}: no report", shown(&args));
        assert_clean_stderr(&args, &output);
    }
}

/// The first device allocation fails (out of memory): exit 1, the message
/// naming the call and the driver's code, no panic and no report.
#[test]
fn a_failed_device_allocation_exits_1_naming_it() {
    let test = "a_failed_device_allocation_exits_1_naming_it";
    let Some(dir) = standin_dir(test) else {
        return;
    };
    for stream in [false, true] {
        let mut args = vec!["--rows", "1000", "--device", "cuda", "--no-progress"];
        if stream {
            args.push("--stream");
        }
        let output = arrow_device_on(
            &dir,
            &args,
            Some("cuMemAlloc_v2:1:CUDA_ERROR_OUT_OF_MEMORY"),
        );
        let err = stderr(&output);
        assert_eq!(
            output.status.code(),
            Some(1),
            "{}: exit {:?}\n--- stdout\n{}\n--- stderr\n{err}",
            shown(&args),
            output.status,
            stdout(&output)
        );
        assert!(
            err.starts_with("arrow-device: error: "),
            "{}: {err}",
            shown(&args)
        );
        for needle in ["cuMemAlloc", "CUDA_ERROR_OUT_OF_MEMORY"] {
            assert!(
                err.contains(needle),
                "{}: the message should name {needle}: {err}",
                shown(&args)
            );
        }
        assert!(
            !stdout(&output).contains("verified"),
            "{}: a report after a failure",
            shown(&args)
        );
        assert_clean_stderr(&args, &output);
    }
}

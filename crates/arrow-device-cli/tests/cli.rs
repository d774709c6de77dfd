//! End-to-end tests of the `arrow-device` command: the built binary is run
//! with `std::process::Command` and its report, messages and exit codes are
//! checked.

mod common;

use std::process::Output;

use common::{
    arrow_device, assert_input_verified, assert_stage_rows, assert_succeeded, dataset_batches,
    golden_streams, ipc_stream_bytes, report_value, stderr, stdout, write_ipc_file, write_parquet,
    TempPath,
};
use parquet::basic::Compression;
use parquet::file::properties::WriterProperties;

fn assert_verified(output: &Output, rows: &str, batches: Option<&str>) {
    let out = assert_succeeded(output);
    assert!(out.contains("\nverified: equal\n"), "{out}");
    assert_eq!(report_value(&out, "rows"), Some(rows), "{out}");
    if let Some(batches) = batches {
        assert_eq!(report_value(&out, "batches"), Some(batches), "{out}");
    }
    assert_eq!(report_value(&out, "columns"), Some("9"), "{out}");
    assert_stage_rows(&out, "C hand-off");
}

#[test]
fn embedded_dataset_round_trips_on_the_cpu() {
    let output = arrow_device(&["--rows", "20000", "--device", "cpu", "--no-progress"]);
    assert_verified(&output, "20000", Some("1"));
    let out = stdout(&output);
    assert_eq!(
        report_value(&out, "device"),
        Some("cpu (CPU, device_id -1)"),
        "{out}"
    );
    assert!(
        report_value(&out, "input")
            .unwrap()
            .starts_with("embedded dataset"),
        "{out}"
    );
}

#[test]
fn embedded_dataset_round_trips_on_the_emulated_device() {
    let output = arrow_device(&["--rows", "20000", "--device", "emulated:0", "--no-progress"]);
    assert_verified(&output, "20000", Some("1"));
    assert_eq!(
        report_value(&stdout(&output), "device"),
        Some("emulated:0 (EXT_DEV, device_id 0)")
    );
}

#[test]
fn embedded_dataset_in_several_batches_with_full_validation() {
    // 70,000 rows are two batches of the default 65,536-row chunking.
    let output = arrow_device(&["--rows", "70000", "--validate", "full", "--no-progress"]);
    assert_verified(&output, "70000", Some("2"));
    assert_eq!(report_value(&stdout(&output), "validation"), Some("full"));
}

#[test]
fn ipc_file_round_trips() {
    let file = TempPath::new("data.arrow");
    write_ipc_file(file.path(), &dataset_batches(5_000, 2_000));

    for device in ["cpu", "emulated:0"] {
        let output = arrow_device(&[file.arg(), "--device", device, "--no-progress"]);
        assert_verified(&output, "5000", Some("3"));
        let input = report_value(&stdout(&output), "input").unwrap().to_string();
        assert!(
            input.starts_with("Arrow IPC file") && input.ends_with("(3 batches)"),
            "{input}"
        );
    }
}

#[test]
fn ipc_stream_round_trips_and_rows_caps_it() {
    let file = TempPath::new("data.arrows");
    std::fs::write(
        file.path(),
        ipc_stream_bytes(&dataset_batches(5_000, 2_000)),
    )
    .unwrap();

    let output = arrow_device(&[file.arg(), "--no-progress"]);
    assert_verified(&output, "5000", Some("3"));
    assert!(report_value(&stdout(&output), "input")
        .unwrap()
        .starts_with("Arrow IPC stream"));

    // The cap slices the second batch: 2,000 + 1,000 rows.
    let output = arrow_device(&[
        file.arg(),
        "--rows",
        "3000",
        "--device",
        "cpu",
        "--no-progress",
    ]);
    assert_verified(&output, "3000", Some("2"));
}

#[test]
fn parquet_file_round_trips() {
    let file = TempPath::new("data.parquet");
    let props = WriterProperties::builder()
        .set_compression(Compression::SNAPPY)
        .set_max_row_group_row_count(Some(3_000))
        .build();
    write_parquet(file.path(), &dataset_batches(6_000, 2_500), props);

    for device in ["cpu", "emulated:0"] {
        let output = arrow_device(&[file.arg(), "--device", device, "--no-progress"]);
        // The reader's batches may span row groups: only the rows are fixed.
        assert_verified(&output, "6000", None);
        let input = report_value(&stdout(&output), "input").unwrap().to_string();
        assert!(
            input.starts_with("Parquet file")
                && input.contains("2 row groups")
                && input.contains("SNAPPY"),
            "{input}"
        );
    }
}

#[test]
fn a_missing_file_fails_with_its_path() {
    let missing = std::env::temp_dir().join(format!(
        "arrow-device-cli-missing-{}.arrow",
        std::process::id()
    ));
    let output = arrow_device(&[missing.to_str().unwrap(), "--no-progress"]);
    assert_eq!(output.status.code(), Some(1));
    let err = stderr(&output);
    assert!(err.starts_with("arrow-device: error: "), "{err}");
    assert!(
        err.contains(&format!("{}: cannot open:", missing.display())),
        "{err}"
    );
    assert!(stdout(&output).is_empty());
}

#[test]
fn a_garbage_file_is_rejected_with_the_formats_expected() {
    let file = TempPath::new("garbage.bin");
    std::fs::write(file.path(), b"this is not arrow data at all").unwrap();
    let output = arrow_device(&[file.arg(), "--no-progress"]);
    assert_eq!(output.status.code(), Some(1));
    let err = stderr(&output);
    assert!(
        err.contains("not an Arrow IPC file (magic \"ARROW1\")"),
        "{err}"
    );
    assert!(err.contains("starts with 74 68 69 73"), "{err}");

    // Right magic, broken content: the decoder's message comes through.
    std::fs::write(file.path(), b"ARROW1\0\0garbage").unwrap();
    let output = arrow_device(&[file.arg(), "--no-progress"]);
    assert_eq!(output.status.code(), Some(1));
    assert!(
        stderr(&output).contains(": decoding: "),
        "{}",
        stderr(&output)
    );
}

#[test]
fn an_empty_file_is_rejected() {
    let file = TempPath::new("empty.arrow");
    std::fs::write(file.path(), b"").unwrap();
    let output = arrow_device(&[file.arg()]);
    assert_eq!(output.status.code(), Some(1));
    assert!(
        stderr(&output).contains("the file is empty"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn a_bad_device_is_a_usage_error() {
    let output = arrow_device(&["--device", "tpu:0", "--rows", "10"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains("unknown device \"tpu\""),
        "{}",
        stderr(&output)
    );

    let output = arrow_device(&["--device", "emulated:x", "--rows", "10"]);
    assert_eq!(output.status.code(), Some(2));
}

#[test]
fn an_emulated_id_out_of_range_is_a_usage_error_naming_the_valid_ids() {
    let output = arrow_device(&["--device", "emulated:99999", "--rows", "10"]);
    assert_eq!(output.status.code(), Some(2));
    assert_eq!(
        stderr(&output),
        "arrow-device: error: device emulated:99999: emulated device ids are 0 to 1023\n"
    );
    assert!(stdout(&output).is_empty());
}

#[test]
fn an_emulated_delay_over_the_bound_is_a_usage_error_naming_the_variable() {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_arrow-device"))
        .args(["--device", "emulated:0", "--rows", "10", "--no-progress"])
        .env("ARROW_DEVICE_EMULATED", "delay_us=10000001")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert_eq!(
        stderr(&output),
        "arrow-device: error: ARROW_DEVICE_EMULATED: delay_us=10000001 is above the bound \
         of 10000000 us (10 seconds)\n"
    );
    assert!(stdout(&output).is_empty());
}

#[test]
fn cuda_without_a_usable_gpu_is_a_usage_error_with_the_drivers_reason() {
    let output = arrow_device(&["--device", "cuda:0", "--rows", "10", "--no-progress"]);
    if stdout(&output).contains("verified: equal") {
        return; // a machine with a GPU
    }
    assert_eq!(output.status.code(), Some(2));
    let message = stderr(&output);
    assert!(
        message.contains("device cuda:0 is not available"),
        "{message}"
    );
    // No libcuda (CI), or a driver without a GPU: either is named.
    assert!(
        message.contains("libcuda") || message.contains("GPU"),
        "{message}"
    );
}

#[test]
fn a_bad_validation_level_is_a_usage_error() {
    let output = arrow_device(&["--validate", "paranoid", "--rows", "10"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(stderr(&output).contains("paranoid"));
}

#[test]
fn zero_rows_is_an_empty_but_verified_run() {
    let output = arrow_device(&["--rows", "0", "--no-progress"]);
    assert_verified(&output, "0", Some("0"));
}

#[test]
fn every_validation_level_round_trips_on_a_second_emulated_device() {
    for level in ["none", "minimal", "default", "full"] {
        let output = arrow_device(&[
            "--rows",
            "3000",
            "--device",
            "emulated:1",
            "--validate",
            level,
            "--no-progress",
        ]);
        assert_verified(&output, "3000", Some("1"));
        assert_eq!(report_value(&stdout(&output), "validation"), Some(level));
    }
}

/// Every Arrow C++ golden stream (they cover every type) comes back equal
/// from the emulated device with full validation.
#[test]
fn golden_streams_round_trip_on_the_emulated_device() {
    for path in &golden_streams() {
        let output = arrow_device(&[
            path.to_str().unwrap(),
            "--device",
            "emulated:0",
            "--validate",
            "full",
            "--no-progress",
        ]);
        let out = assert_input_verified(path, &output);
        assert!(
            report_value(&out, "input")
                .unwrap()
                .starts_with("Arrow IPC stream"),
            "{out}"
        );
    }
}

//! End-to-end tests of `arrow-device --stream`: the whole input goes through
//! one `ArrowDeviceArrayStream`, relayed by C, and comes back verified batch
//! by batch.

mod common;

use std::process::Output;

use common::{
    arrow_device, assert_input_verified, assert_stage_rows, assert_succeeded, dataset_batches,
    golden_streams, ipc_stream_bytes, report_value, stderr, stdout, write_ipc_file, write_parquet,
    TempPath,
};
use parquet::file::properties::WriterProperties;

/// Checks a successful streamed run: exit 0, verified, the rows and batches
/// expected, the stream's stage table and summary lines.
fn assert_streamed(output: &Output, rows: &str, batches: &str) -> String {
    let out = assert_succeeded(output);
    assert!(out.ends_with("\nverified: equal\n"), "{out}");
    assert_eq!(report_value(&out, "rows"), Some(rows), "{out}");
    assert_eq!(report_value(&out, "batches"), Some(batches), "{out}");
    assert!(
        report_value(&out, "mode")
            .is_some_and(|m| m.starts_with("stream: one ArrowDeviceArrayStream relayed by C")),
        "{out}"
    );
    assert_stage_rows(&out, "C relay");
    assert!(!out.contains("C hand-off"), "{out}");
    assert!(
        report_value(&out, "throughput").is_some_and(|t| t.contains(" rows/s, ")),
        "{out}"
    );
    assert!(
        report_value(&out, "per batch").is_some_and(|t| t.starts_with("median ")),
        "{out}"
    );
    out
}

#[test]
fn the_embedded_dataset_streams_in_several_batches_on_the_cpu() {
    let output = arrow_device(&[
        "--stream",
        "--rows",
        "10000",
        "--batch-rows",
        "3000",
        "--device",
        "cpu",
        "--no-progress",
    ]);
    let out = assert_streamed(&output, "10000", "4");
    assert!(out.contains("batches of at most 3000 rows"), "{out}");
    assert_eq!(
        report_value(&out, "device"),
        Some("cpu (CPU, device_id -1)")
    );
    // The C relay read the offsets of CPU batches on the host.
    let walk = report_value(&out, "C walk").unwrap();
    assert!(
        !walk.ends_with(" 0 offset buffers read on the host"),
        "{walk}"
    );
}

#[test]
fn the_embedded_dataset_streams_onto_the_emulated_device_with_full_validation() {
    let output = arrow_device(&[
        "--stream",
        "--rows",
        "10001",
        "--batch-rows",
        "2500",
        "--device",
        "emulated:0",
        "--validate",
        "full",
        "--no-progress",
    ]);
    let out = assert_streamed(&output, "10001", "5");
    assert_eq!(
        report_value(&out, "device"),
        Some("emulated:0 (EXT_DEV, device_id 0)")
    );
    assert_eq!(report_value(&out, "validation"), Some("full"));
    // Device memory is never read by the C relay.
    let walk = report_value(&out, "C walk").unwrap();
    assert!(
        walk.ends_with(" 0 offset buffers read on the host"),
        "{walk}"
    );
}

#[test]
fn streaming_and_per_array_runs_move_the_same_batches_and_bytes() {
    let args = ["--rows", "7000", "--batch-rows", "2000", "--no-progress"];
    let streamed = arrow_device(&[&["--stream"], &args[..]].concat());
    let per_array = arrow_device(&args);
    let (streamed, per_array) = (stdout(&streamed), stdout(&per_array));
    for key in ["batches", "rows", "bytes", "C walk"] {
        assert_eq!(
            report_value(&streamed, key),
            report_value(&per_array, key),
            "{key}:\n{streamed}\n{per_array}"
        );
    }
    assert_eq!(report_value(&streamed, "batches"), Some("4"));
}

#[test]
fn an_ipc_file_streams_with_its_batches_sliced_to_batch_rows() {
    let file = TempPath::new("stream.arrow");
    // Two batches of 5,000 and one of 2,000 rows.
    write_ipc_file(file.path(), &dataset_batches(12_000, 5_000));

    for device in ["cpu", "emulated:0"] {
        // 5,000 rows are 2,000 + 2,000 + 1,000; the last batch fits whole.
        let output = arrow_device(&[
            file.arg(),
            "--stream",
            "--batch-rows",
            "2000",
            "--device",
            device,
            "--no-progress",
        ]);
        let out = assert_streamed(&output, "12000", "7");
        assert!(
            report_value(&out, "input").is_some_and(|i| i.starts_with("Arrow IPC file")),
            "{out}"
        );
    }

    // Without slicing the file's own batches flow, capped by --rows.
    let output = arrow_device(&[file.arg(), "--stream", "--rows", "6000", "--no-progress"]);
    assert_streamed(&output, "6000", "2");
}

#[test]
fn a_parquet_file_streams_in_batches_of_batch_rows() {
    let file = TempPath::new("stream.parquet");
    let props = WriterProperties::builder()
        .set_max_row_group_row_count(Some(3_000))
        .build();
    write_parquet(file.path(), &dataset_batches(6_000, 2_500), props);

    let output = arrow_device(&[
        file.arg(),
        "--stream",
        "--batch-rows",
        "1000",
        "--device",
        "emulated:0",
        "--no-progress",
    ]);
    let out = assert_streamed(&output, "6000", "6");
    assert!(
        report_value(&out, "input").is_some_and(|i| i.starts_with("Parquet file")),
        "{out}"
    );
}

#[test]
fn zero_batch_rows_is_a_usage_error() {
    let output = arrow_device(&["--stream", "--batch-rows", "0", "--rows", "10"]);
    assert_eq!(output.status.code(), Some(2));
    let err = stderr(&output);
    assert!(
        err.contains("invalid value '0' for '--batch-rows <N>': a batch needs at least 1 row"),
        "{err}"
    );
    assert!(stdout(&output).is_empty());
}

#[test]
fn an_empty_stream_is_verified() {
    let output = arrow_device(&["--stream", "--rows", "0", "--no-progress"]);
    assert_streamed(&output, "0", "0");
}

#[test]
fn a_broken_file_fails_the_stream_with_the_decoder_message() {
    let file = TempPath::new("broken.arrows");
    let bytes = ipc_stream_bytes(&dataset_batches(3_000, 1_000));
    // Cut the stream inside its second batch.
    let cut = bytes.len() / 2;
    std::fs::write(file.path(), &bytes[..cut]).unwrap();

    let output = arrow_device(&[file.arg(), "--stream", "--no-progress"]);
    assert_eq!(output.status.code(), Some(1), "{}", stdout(&output));
    let err = stderr(&output);
    assert!(
        err.starts_with(&format!("arrow-device: error: {}: decoding: ", file.arg())),
        "{err}"
    );
}

/// Every type of the Arrow C++ golden streams (`shared/golden` beside the
/// checkout) streams through the C relay; batches of 3 rows make the input
/// cut its batches into compact copies, which exercises that copy on every
/// type too.
#[test]
fn golden_streams_stream_through_the_relay_in_three_row_batches() {
    for path in &golden_streams() {
        let output = arrow_device(&[
            path.to_str().unwrap(),
            "--stream",
            "--batch-rows",
            "3",
            "--device",
            "emulated:0",
            "--validate",
            "full",
            "--no-progress",
        ]);
        assert_input_verified(path, &output);
    }
}

//! The command on inputs that cannot seek: FIFOs and standard input (`-`,
//! `/dev/stdin`). An IPC stream is read through the one handle the input was
//! opened with; an IPC file or Parquet file, whose readers seek, is refused
//! with a one-line error. Every child runs under a timeout and is killed
//! when it overruns, so a regression that hangs fails instead of hanging the
//! suite.

mod common;

use std::fs::File;
use std::io::Write;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use common::{
    assert_succeeded, dataset_batches, ipc_stream_bytes, report_value, stderr, stdout,
    write_ipc_file, write_parquet, TempPath,
};
use parquet::file::properties::WriterProperties;

/// Far above what any of these runs takes (a second or two in a debug
/// build); only a hang reaches it.
const TIMEOUT: Duration = Duration::from_secs(120);

/// The Linux default pipe capacity: an input smaller than this is written
/// whole, and the writer gone, before the reader reads much.
const PIPE_CAPACITY: usize = 64 * 1024;

fn command(args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_arrow-device"));
    command
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    command
}

/// Reads a child's pipe to the end on a thread of its own.
fn drain(pipe: Option<impl std::io::Read + Send + 'static>) -> JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut bytes = Vec::new();
        if let Some(mut pipe) = pipe {
            // A read error ends the output early; the assertions show it.
            let _ = pipe.read_to_end(&mut bytes);
        }
        bytes
    })
}

/// Waits for `child` for at most [`TIMEOUT`], killing it and failing the test
/// when it overruns; `what` names the run in the failure.
fn finish(mut child: Child, what: &str) -> Output {
    let out = drain(child.stdout.take());
    let err = drain(child.stderr.take());
    let deadline = Instant::now() + TIMEOUT;
    let status = loop {
        if let Some(status) = child.try_wait().expect("waiting for arrow-device") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            let err = String::from_utf8_lossy(&err.join().unwrap_or_default()).into_owned();
            panic!("{what}: arrow-device still runs after {TIMEOUT:?} (hangs); stderr:\n{err}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Output {
        status,
        stdout: out.join().expect("stdout reader"),
        stderr: err.join().expect("stderr reader"),
    }
}

/// Runs the command with `input` written into its standard input, a pipe
/// (as `cat FILE | arrow-device ...` gives it).
fn run_piped(args: &[&str], input: Vec<u8>) -> Output {
    let mut child = command(args)
        .stdin(Stdio::piped())
        .spawn()
        .expect("the arrow-device binary runs");
    let mut stdin = child.stdin.take().expect("a piped stdin");
    let writer = std::thread::spawn(move || {
        // The command may stop reading early (a refused format): the broken
        // pipe is expected then.
        let _ = stdin.write_all(&input);
    });
    let output = finish(child, &format!("{args:?} with a piped stdin"));
    writer.join().expect("stdin writer");
    output
}

/// Makes a FIFO at `path` with the `mkfifo` command.
fn mkfifo(path: &Path) {
    let status = Command::new("mkfifo")
        .arg(path)
        .status()
        .expect("the mkfifo command runs");
    assert!(status.success(), "mkfifo {}: {status}", path.display());
}

/// Runs the command on FIFO `fifo`, into which `input` is written whole and
/// the FIFO closed as soon as the command has opened it.
fn run_on_fifo(fifo: &Path, args: &[&str], input: Vec<u8>) -> Output {
    let child = command(args).spawn().expect("the arrow-device binary runs");
    let path = fifo.to_path_buf();
    let writer = std::thread::spawn(move || {
        // Opening for writing blocks until the command opens for reading.
        let mut file = File::options().write(true).open(&path).expect("open FIFO");
        let _ = file.write_all(&input);
    });
    let output = finish(child, &format!("{args:?} on a FIFO"));
    if !writer.is_finished() {
        // The command never opened the FIFO: be its reader, so that the
        // writer's open returns and its thread ends.
        drop(File::open(fifo));
    }
    writer.join().expect("FIFO writer");
    output
}

fn assert_stream_verified(output: &Output, input: &str, rows: &str, batches: &str) {
    let out = assert_succeeded(output);
    assert!(out.ends_with("\nverified: equal\n"), "{out}");
    assert_eq!(report_value(&out, "input"), Some(input), "{out}");
    assert_eq!(report_value(&out, "rows"), Some(rows), "{out}");
    assert_eq!(report_value(&out, "batches"), Some(batches), "{out}");
}

/// Asserts that the run failed on bad input (exit 1) with exactly one line
/// on stderr, which names `input` and says why, and returns that line.
fn assert_refused_in_one_line(output: &Output, input: &str, format: &str) -> String {
    assert_eq!(output.status.code(), Some(1), "{}", stderr(output));
    assert!(stdout(output).is_empty(), "{}", stdout(output));
    let err = stderr(output);
    assert_eq!(err.lines().count(), 1, "{err}");
    let line = err.trim_end().to_string();
    assert_eq!(
        line,
        format!(
            "arrow-device: error: {input}: {format} cannot be read from a pipe, FIFO or \
             terminal: {}, which needs a seekable file; save it to a file and pass its path, \
             or pipe an Arrow IPC stream instead",
            if format == "a Parquet file" {
                "its reader seeks to the metadata in the footer at the end"
            } else {
                "its reader seeks to the footer at the end"
            }
        )
    );
    line
}

#[test]
fn a_fifo_whose_writer_has_already_closed_is_read_to_the_end() {
    let fifo = TempPath::new("input.fifo");
    mkfifo(fifo.path());
    let bytes = ipc_stream_bytes(&dataset_batches(200, 80));
    assert!(
        bytes.len() < PIPE_CAPACITY,
        "{} bytes: the writer must be able to finish before the reader reads",
        bytes.len()
    );
    // The writer has written everything and closed by the time the command
    // is past its format sniff: the command used to open the FIFO a second
    // time there, and wait for a writer that never came.
    let output = run_on_fifo(
        fifo.path(),
        &[fifo.arg(), "--device", "emulated:0", "--no-progress"],
        bytes,
    );
    let input = format!("Arrow IPC stream {}", fifo.arg());
    assert_stream_verified(&output, &input, "200", "3");
}

#[test]
fn an_ipc_stream_piped_to_dash_round_trips() {
    // Larger than a pipe's capacity: the reader meets partial reads.
    let bytes = ipc_stream_bytes(&dataset_batches(5_000, 2_000));
    assert!(bytes.len() > PIPE_CAPACITY, "{}", bytes.len());
    let output = run_piped(&["-", "--device", "emulated:0", "--no-progress"], bytes);
    assert_stream_verified(&output, "Arrow IPC stream standard input", "5000", "3");
}

#[test]
fn an_ipc_stream_piped_to_dev_stdin_round_trips() {
    let bytes = ipc_stream_bytes(&dataset_batches(5_000, 2_000));
    let output = run_piped(&["/dev/stdin", "--device", "cpu", "--no-progress"], bytes);
    assert_stream_verified(&output, "Arrow IPC stream /dev/stdin", "5000", "3");
    // With --stream and a row cap, the same input goes through one stream.
    let bytes = ipc_stream_bytes(&dataset_batches(5_000, 2_000));
    let output = run_piped(&["-", "--stream", "--rows", "3000", "--no-progress"], bytes);
    let out = assert_succeeded(&output);
    assert!(out.ends_with("\nverified: equal\n"), "{out}");
    assert_eq!(report_value(&out, "rows"), Some("3000"), "{out}");
}

#[test]
fn an_ipc_file_on_standard_input_redirected_from_a_file_is_read() {
    // `arrow-device - < data.arrow`: standard input is the file itself,
    // which can seek, so every format works there.
    let file = TempPath::new("redirected.arrow");
    write_ipc_file(file.path(), &dataset_batches(5_000, 2_000));
    let child = command(&["-", "--device", "emulated:0", "--no-progress"])
        .stdin(File::open(file.path()).unwrap())
        .spawn()
        .expect("the arrow-device binary runs");
    let output = finish(child, "an IPC file redirected to stdin");
    let out = assert_succeeded(&output);
    assert!(out.ends_with("\nverified: equal\n"), "{out}");
    assert_eq!(
        report_value(&out, "input"),
        Some("Arrow IPC file standard input (3 batches)"),
        "{out}"
    );
    assert_eq!(report_value(&out, "rows"), Some("5000"), "{out}");
}

#[test]
fn an_ipc_file_piped_is_refused_in_one_line() {
    let file = TempPath::new("piped.arrow");
    write_ipc_file(file.path(), &dataset_batches(1_000, 500));
    let bytes = std::fs::read(file.path()).unwrap();
    let output = run_piped(&["-", "--no-progress"], bytes.clone());
    assert_refused_in_one_line(&output, "standard input", "an Arrow IPC file");
    let output = run_piped(&["/dev/stdin", "--no-progress"], bytes);
    assert_refused_in_one_line(&output, "/dev/stdin", "an Arrow IPC file");
}

#[test]
fn a_parquet_file_piped_or_in_a_fifo_is_refused_in_one_line() {
    let file = TempPath::new("piped.parquet");
    write_parquet(
        file.path(),
        &dataset_batches(1_000, 500),
        WriterProperties::builder().build(),
    );
    let bytes = std::fs::read(file.path()).unwrap();
    let output = run_piped(&["-", "--no-progress"], bytes.clone());
    assert_refused_in_one_line(&output, "standard input", "a Parquet file");

    let fifo = TempPath::new("parquet.fifo");
    mkfifo(fifo.path());
    let output = run_on_fifo(fifo.path(), &[fifo.arg(), "--no-progress"], bytes);
    assert_refused_in_one_line(&output, fifo.arg(), "a Parquet file");
}

#[test]
fn an_empty_pipe_is_rejected_as_an_empty_input() {
    let output = run_piped(&["-", "--no-progress"], Vec::new());
    assert_eq!(output.status.code(), Some(1));
    let err = stderr(&output);
    assert!(
        err.starts_with("arrow-device: error: standard input: not an Arrow IPC file"),
        "{err}"
    );
    assert!(err.trim_end().ends_with("the input is empty"), "{err}");
}

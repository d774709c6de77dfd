//! End-to-end tests of `arrow-device serve` and `arrow-device fetch`: a
//! server is started from the built binary on a free port, and the fetch
//! command, also the built binary, is run against it.

mod common;

use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

use arrow_ipc::reader::StreamReader;
use common::{
    arrow_device, assert_succeeded, dataset_batches, report_value, stderr, stdout, write_ipc_file,
    TempPath,
};

const TOKEN: &str = "s3cret-token";

/// A golden stream by file name (`shared/golden` beside the checkout, as
/// `common::golden_streams` finds it).
fn golden(name: &str) -> PathBuf {
    let path = PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../shared/golden"
    ))
    .join(name);
    assert!(path.is_file(), "golden stream {}", path.display());
    path
}

/// Batches and rows of an IPC stream file, read with arrow-rs.
fn batches_and_rows(path: &Path) -> (usize, usize) {
    let reader = StreamReader::try_new(File::open(path).unwrap(), None).unwrap();
    reader.fold((0, 0), |(batches, rows), batch| {
        (batches + 1, rows + batch.unwrap().num_rows())
    })
}

fn arg(path: &Path) -> &str {
    path.to_str().expect("test paths are UTF-8")
}

/// A running `arrow-device serve --until-stdin-closes`, stopped when
/// dropped: its standard input is closed (a clean shutdown), and it is
/// killed if it has not exited a few seconds later, so that no test leaves
/// a server behind, whether it passed or not.
struct Server {
    child: Child,
    /// The first line it printed.
    banner: String,
    /// The rest of its standard output, kept open so that it never sees a
    /// closed pipe.
    _stdout: BufReader<ChildStdout>,
}

impl Server {
    fn start(args: &[&str]) -> Server {
        let mut child = Command::new(env!("CARGO_BIN_EXE_arrow-device"))
            .arg("serve")
            .args(["--listen", "127.0.0.1:0", "--until-stdin-closes"])
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the arrow-device binary runs");
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut banner = String::new();
        stdout.read_line(&mut banner).unwrap();
        let mut server = Server {
            child,
            banner,
            _stdout: stdout,
        };
        if !server.banner.starts_with("serving ") {
            let (status, err) = server.stop();
            panic!("serve {args:?} did not start: {status:?}\n{err}");
        }
        server
    }

    /// The location from `serving N sources at LOCATION`.
    fn location(&self) -> &str {
        let (_, location) = self
            .banner
            .trim_end()
            .rsplit_once(" at ")
            .unwrap_or_else(|| panic!("no location in {:?}", self.banner));
        location
    }

    /// Closes its standard input and waits for it to exit (killing it
    /// after 10 s); returns how it exited and what it wrote to stderr.
    fn stop(&mut self) -> (ExitStatus, String) {
        drop(self.child.stdin.take());
        let deadline = Instant::now() + Duration::from_secs(10);
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                break self.child.wait().unwrap();
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let mut err = String::new();
        if let Some(mut stderr) = self.child.stderr.take() {
            stderr.read_to_string(&mut err).unwrap();
        }
        (status, err)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            self.stop();
        }
    }
}

fn fetch(server: &Server, ticket: &str, args: &[&str]) -> Output {
    let mut all = vec!["fetch", server.location(), ticket, "--no-progress"];
    all.extend_from_slice(args);
    arrow_device(&all)
}

/// Asserts that `output` is a fetch that exited 1 and returns its stderr.
fn assert_failed(output: &Output) -> String {
    let err = stderr(output);
    assert_eq!(
        output.status.code(),
        Some(1),
        "stdout:\n{}\nstderr:\n{err}",
        stdout(output)
    );
    assert!(err.starts_with("arrow-device fetch: error: "), "{err}");
    err
}

#[test]
fn golden_files_served_with_a_token_fetch_equal_onto_the_emulated_device() {
    let files = [
        golden("generated_primitive.stream"),
        golden("generated_nested.stream"),
    ];
    let server = Server::start(&[arg(&files[0]), arg(&files[1]), "--token", TOKEN]);
    assert!(
        server
            .banner
            .starts_with("serving 2 sources at grpc://127.0.0.1:"),
        "{}",
        server.banner
    );
    for (file, ticket) in files
        .iter()
        .zip(["generated_primitive", "generated_nested"])
    {
        let (batches, rows) = batches_and_rows(file);
        assert!(rows > 0, "{}", file.display());
        let output = fetch(
            &server,
            ticket,
            &[
                "--device",
                "emulated:0",
                "--token",
                TOKEN,
                "--verify",
                arg(file),
            ],
        );
        let out = assert_succeeded(&output);
        assert_eq!(
            report_value(&out, "rows"),
            Some(rows.to_string().as_str()),
            "{out}"
        );
        assert_eq!(
            report_value(&out, "batches"),
            Some(batches.to_string().as_str()),
            "{out}"
        );
        assert_eq!(report_value(&out, "ticket"), Some(ticket), "{out}");
        assert_eq!(
            report_value(&out, "device"),
            Some("emulated:0 (EXT_DEV, device_id 0)"),
            "{out}"
        );
        let wire: u64 = report_value(&out, "bytes")
            .and_then(|v| v.split(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no byte count in\n{out}"));
        assert!(wire > 0, "{out}");
        // A first batch landed, so both of its milestones have times.
        for milestone in ["first batch queued", "first batch synchronized"] {
            let time: f64 = report_value(&out, milestone)
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("no time for {milestone} in\n{out}"));
            assert!(time > 0.0, "{out}");
        }
        assert!(
            out.contains(&format!("\nverified: equal to {} (", file.display())),
            "{out}"
        );
    }
}

#[test]
fn a_wrong_or_missing_token_is_unauthenticated() {
    let file = golden("generated_primitive.stream");
    let server = Server::start(&[arg(&file), "--token", TOKEN]);
    for token_args in [&["--token", "wrong"][..], &[][..]] {
        let mut args = vec!["--device", "cpu"];
        args.extend_from_slice(token_args);
        let err = assert_failed(&fetch(&server, "generated_primitive", &args));
        assert!(
            err.contains(&format!(
                "do_get at {}: UNAUTHENTICATED (16)",
                server.location()
            )),
            "{err}"
        );
    }
}

#[test]
fn an_unknown_ticket_fails_naming_it_and_the_served_names() {
    let file = golden("generated_nested.stream");
    let server = Server::start(&[arg(&file)]);
    let err = assert_failed(&fetch(&server, "no_such_source", &["--device", "cpu"]));
    assert!(err.contains("NOT_FOUND (5)"), "{err}");
    assert!(err.contains("no source named \"no_such_source\""), "{err}");
    assert!(err.contains("[\"generated_nested\"]"), "{err}");
}

#[test]
fn without_files_the_embedded_dataset_is_served_and_fetched_onto_the_cpu() {
    // The dataset the server generates from --seed 11, written as a file
    // to verify against.
    let expected = TempPath::new("embedded.arrow");
    write_ipc_file(expected.path(), &dataset_batches(5_000, 2_000));
    let server = Server::start(&["--rows", "5000", "--seed", "11", "--batch-rows", "2000"]);
    assert!(
        server.banner.starts_with("serving 1 source at grpc://"),
        "{}",
        server.banner
    );
    let output = fetch(
        &server,
        "embedded",
        &["--device", "cpu", "--verify", expected.arg()],
    );
    let out = assert_succeeded(&output);
    assert_eq!(report_value(&out, "rows"), Some("5000"), "{out}");
    assert_eq!(report_value(&out, "batches"), Some("3"), "{out}");
    assert_eq!(report_value(&out, "columns"), Some("9"), "{out}");
    assert_eq!(
        report_value(&out, "device"),
        Some("cpu (CPU, device_id -1)"),
        "{out}"
    );
    assert!(out.contains("\nverified: equal to "), "{out}");
}

#[test]
fn a_fetch_that_differs_from_the_verify_file_fails_with_the_difference() {
    // The server's dataset is seed 42's; the file is seed 11's.
    let other = TempPath::new("other.arrow");
    write_ipc_file(other.path(), &dataset_batches(1_000, 1_000));
    let server = Server::start(&["--rows", "1000"]);
    let output = fetch(
        &server,
        "embedded",
        &["--device", "emulated:0", "--verify", other.arg()],
    );
    let err = assert_failed(&output);
    assert!(
        err.contains(&format!("batch 0 differs from {}: column", other.arg())),
        "{err}"
    );
    assert!(
        err.contains("(the batch starts at row 0 of the file)"),
        "{err}"
    );
}

#[test]
fn serve_stops_cleanly_when_its_standard_input_closes() {
    let mut server = Server::start(&[arg(&golden("generated_primitive.stream"))]);
    let location = server.location().to_string();
    let (status, err) = server.stop();
    assert_eq!(status.code(), Some(0), "{err}");
    assert!(
        err.contains("  generated_primitive: Arrow IPC stream "),
        "{err}"
    );
    assert!(err.ends_with("stopped: standard input ended\n"), "{err}");
    // Nothing listens there any more.
    let output = arrow_device(&["fetch", &location, "generated_primitive", "--device", "cpu"]);
    let err = assert_failed(&output);
    assert!(
        err.contains(&format!("cannot connect to {location}")),
        "{err}"
    );
}

#[test]
fn two_files_with_the_same_stem_are_a_usage_error_naming_both() {
    let dir = TempDir::new("same-stem");
    let copy = dir.0.join("generated_primitive.arrows");
    std::fs::copy(golden("generated_primitive.stream"), &copy).unwrap();
    let original = golden("generated_primitive.stream");
    let output = arrow_device(&[
        "serve",
        arg(&original),
        arg(&copy),
        "--listen",
        "127.0.0.1:0",
    ]);
    let err = stderr(&output);
    assert_eq!(output.status.code(), Some(2), "{err}");
    assert!(
        err.contains(arg(&original)) && err.contains(arg(&copy)),
        "{err}"
    );
    assert!(
        err.contains("would both be served as \"generated_primitive\""),
        "{err}"
    );
    assert_eq!(stdout(&output), "", "nothing was served");
}

#[test]
fn fetch_usage_errors_exit_2() {
    let output = arrow_device(&["fetch", "grpc://127.0.0.1:1"]);
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    assert!(stderr(&output).contains("<TICKET>"));

    let output = arrow_device(&["fetch", "127.0.0.1:1", "t", "--device", "cpu"]);
    let err = stderr(&output);
    assert_eq!(output.status.code(), Some(2), "{err}");
    assert!(
        err.starts_with("arrow-device fetch: error: location \"127.0.0.1:1\": expected grpc://"),
        "{err}"
    );
}

/// A fresh directory in the temp dir, removed with its files when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let path = std::env::temp_dir().join(format!(
            "arrow-device-cli-flight-{}-{name}",
            std::process::id()
        ));
        std::fs::create_dir_all(&path).unwrap();
        TempDir(path)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

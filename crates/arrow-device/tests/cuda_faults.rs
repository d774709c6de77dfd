//! Fault injection into each CUDA driver entry point this crate calls, on
//! the CUDA driver stand-in (`crates/cuda-standin`): the only driver where
//! one call can be made to fail on purpose.
//!
//! Each test makes one call of one entry point fail (the next call, or the
//! nth, counted with `cuStandinCalls`), runs the public operation that
//! reaches it, and checks that:
//!
//! * the operation returns an error naming the entry point and the driver's
//!   code, and does not panic;
//! * once the work queued before the failure has drained and the results
//!   are dropped, the driver holds as many allocations, streams and events
//!   as before (less what a failed destructor call must leak), and saw no
//!   violation;
//! * the same operation then succeeds, with the right values.
//!
//! Calls made only from destructors (`cuMemFree`, `cuMemFreeHost`,
//! `cuStreamDestroy`, `cuEventDestroy`, `cuCtxPopCurrent`) cannot report a
//! failure: there the operation must succeed, leaking exactly the object
//! whose release failed. `cuLaunchHostFunc` only tells when a copy's host
//! sources may go; without it the copy keeps them (documented), so there
//! too the operation succeeds.
//!
//! Every test's body runs in a child process of its own (this binary, run
//! again on that one test): injected faults and the driver's state are
//! process-wide, `cuInit` and `cuDeviceGetCount` run once per process, a
//! GPU's context is retained and the kernels' module loaded on first use,
//! and the stand-in aborts the process on a fatal violation (memory freed
//! under queued work), which must fail that one test with its message, not
//! the whole binary. The parent tests run their children one at a time (a
//! lock), so that timing-sensitive tests do not compete for the CPU.
//!
//! Without the stand-in (no driver, or a real one) every test is skipped,
//! saying why; with `ARROW_DEVICE_REQUIRE_STANDIN=1` it fails instead.
//!
//! ```sh
//! dir=$(bash scripts/cuda-standin.sh)
//! LD_LIBRARY_PATH=$dir ARROW_DEVICE_REQUIRE_STANDIN=1 \
//!     cargo test -p arrow-device --features cuda --test cuda_faults
//! ```
#![cfg(feature = "cuda")]

mod common;

use std::ffi::{c_char, c_uint, CString};
use std::fmt;
use std::os::unix::process::ExitStatusExt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arrow_array::{Array, ArrayRef, BooleanArray, Int32Array, UInt8Array};
use arrow_device::abi::DeviceType;
use arrow_device::cai::cuda::{export_cai, import_cai};
use arrow_device::cai::{ImportPlan, StreamSync};
use arrow_device::device::cuda;
use arrow_device::device::DeviceRef;
use arrow_device::dlpack::{export_dlpack_for_stream, DlpackAbi};
use arrow_device::{export_array_to, DeviceArray, Result, ValidationLevel};
use cudarc::driver::sys::{self, CUresult};

use common::gpu::interface::{plan, values_ptr};
use common::gpu::standin::{self, Counts};
use common::gpu::{counter, cuda_device};
use common::producer::{i32s, ArrayNode, Case, SchemaNode};
use common::{assert_same, build_on_device};

// ---------------------------------------------------------------------------
// Running each test in a child process
// ---------------------------------------------------------------------------

/// Set in a child process: the name of the test whose body it runs.
const CHILD: &str = "ARROW_DEVICE_CUDA_FAULTS_CHILD";

/// Stand-in settings for the tests whose failure leaves queued work behind:
/// every queued operation runs 50 ms after it was queued at the earliest,
/// so that whatever the error path frees is certainly still in use by it
/// (the default, 200 µs, makes that a race the error path usually wins).
const SLOW_QUEUE: &[(&str, &str)] = &[("CUDA_STANDIN_DELAY_US", "50000")];

fn standin_required() -> bool {
    std::env::var("ARROW_DEVICE_REQUIRE_STANDIN").is_ok_and(|v| v == "1")
}

/// Runs `body` in a child process (with `env` added), failing with the
/// child's output if it fails, aborts or crashes; skips (saying why) when the
/// stand-in is not the driver loaded, unless ARROW_DEVICE_REQUIRE_STANDIN=1.
fn isolated(test: &str, env: &[(&str, &str)], body: impl FnOnce()) {
    if let Some(child) = std::env::var_os(CHILD) {
        assert_eq!(child, test, "the child process runs one test");
        assert!(
            standin::loaded(),
            "{test}: the child process does not see the CUDA driver stand-in"
        );
        body();
        return;
    }
    if !standin::loaded() {
        let why = if cuda::is_driver_present() {
            "the libcuda loaded is not the CUDA driver stand-in (no cuStandinCounts), and \
             faults can only be injected into the stand-in"
        } else {
            "no libcuda can be loaded: put the stand-in's directory \
             (`bash scripts/cuda-standin.sh` prints it) on LD_LIBRARY_PATH"
        };
        assert!(
            !standin_required(),
            "{test}: {why}, and ARROW_DEVICE_REQUIRE_STANDIN=1"
        );
        println!("{test}: skipped: {why}");
        return;
    }
    static SERIAL: Mutex<()> = Mutex::new(());
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let exe = std::env::current_exe().expect("the test binary's path");
    let mut command = Command::new(exe);
    command
        .args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD, test)
        // Faults are injected by the tests themselves.
        .env_remove("CUDA_STANDIN_FAULTS");
    for (name, value) in env {
        command.env(name, value);
    }
    let output = command
        .output()
        .unwrap_or_else(|e| panic!("{test}: cannot run the child process: {e}"));
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let passed = stdout.contains("test result: ok. 1 passed");
    if output.status.success() && passed {
        // Shown by `cargo test -- --nocapture`; a failure shows it below.
        print!("{stdout}");
        eprint!("{stderr}");
        return;
    }
    let how = match (output.status.code(), output.status.signal()) {
        (Some(code), _) => format!("exited with status {code}"),
        (None, Some(libc::SIGABRT)) => "was aborted (SIGABRT: the stand-in aborts the process \
             on a fatal violation, see its VIOLATION line below)"
            .to_string(),
        (None, Some(libc::SIGSEGV)) => "crashed (SIGSEGV: memory written or read after it was \
             freed or unmapped?)"
            .to_string(),
        (None, Some(signal)) => format!("was killed by signal {signal}"),
        (None, None) => "ended without a status".to_string(),
    };
    panic!(
        "{test}: the child process that runs it {how}{}\n--- child stdout\n{stdout}\n--- child \
         stderr\n{stderr}",
        if passed { "" } else { ", the test not passed" }
    );
}

// ---------------------------------------------------------------------------
// The stand-in's controls
// ---------------------------------------------------------------------------

type InjectFault = unsafe extern "C" fn(*const c_char, c_uint, CUresult) -> CUresult;
type ClearFaults = unsafe extern "C" fn() -> CUresult;
type CallsOf = unsafe extern "C" fn(*const c_char) -> u64;

/// The stand-in's exported function `name`, of type `F`.
fn control<F: Copy>(name: &str) -> F {
    let symbol = format!("{name}\0");
    // SAFETY: the loaded driver is the stand-in (checked by `isolated`),
    // which exports `name` with the C signature `F` declares
    // (crates/cuda-standin/README.md).
    unsafe {
        *sys::culib()
            .get::<F>(symbol.as_bytes())
            .unwrap_or_else(|e| panic!("the stand-in exports no {name}: {e}"))
    }
}

/// How often `entry` has been called in this process.
fn calls(entry: &str) -> u64 {
    let name = CString::new(entry).unwrap();
    // SAFETY: a NUL-terminated name.
    unsafe { control::<CallsOf>("cuStandinCalls")(name.as_ptr()) }
}

/// One failing call: call `nth` (1 = the next) of `entry` from now on
/// returns `code`.
#[derive(Debug, Clone, Copy)]
struct Fault {
    entry: &'static str,
    nth: u32,
    code: CUresult,
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:?} injected into call {} of {}",
            self.code, self.nth, self.entry
        )
    }
}

impl Fault {
    const fn new(entry: &'static str, nth: u32, code: CUresult) -> Self {
        Fault { entry, nth, code }
    }

    /// What an error message must contain to name the entry point: its
    /// name without the ABI version suffix (`cuMemAlloc` for
    /// `cuMemAlloc_v2`).
    fn named(&self) -> &'static str {
        self.entry.strip_suffix("_v2").unwrap_or(self.entry)
    }

    fn inject(&self) {
        let entry = CString::new(self.entry).unwrap();
        // SAFETY: a NUL-terminated entry name.
        let code = unsafe {
            control::<InjectFault>("cuStandinInjectFault")(entry.as_ptr(), self.nth, self.code)
        };
        assert_eq!(
            code,
            CUresult::CUDA_SUCCESS,
            "cuStandinInjectFault refused {self}: is {} an entry point of the stand-in?",
            self.entry
        );
    }
}

fn clear_faults() {
    // SAFETY: no arguments.
    let code = unsafe { control::<ClearFaults>("cuStandinClearFaults")() };
    assert_eq!(code, CUresult::CUDA_SUCCESS);
}

fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(not a string)".to_string())
}

/// Runs `op` with `fault` armed and disarms it after: `op`'s value. Fails
/// if `op` panics, or if it did not reach the faulted call.
fn armed<T>(fault: &Fault, op: impl FnOnce() -> T) -> T {
    let made = calls(fault.entry);
    fault.inject();
    let outcome = catch_unwind(AssertUnwindSafe(op));
    clear_faults();
    let made = calls(fault.entry) - made;
    let value = outcome.unwrap_or_else(|payload| {
        panic!(
            "{fault}: the operation panicked: {}",
            panic_message(payload.as_ref())
        )
    });
    assert!(
        made >= u64::from(fault.nth),
        "{fault}: the operation called {} {made} time(s): the fault was never triggered",
        fault.entry
    );
    value
}

/// Asserts that `result` is an error naming the faulted entry point and
/// its code; returns the message.
fn expect_failure<T>(fault: &Fault, result: Result<T>) -> String {
    let message = match result {
        Ok(_) => panic!(
            "{fault}: the operation succeeded; expected an error naming {}",
            fault.named()
        ),
        Err(e) => e.to_string(),
    };
    println!("{fault}: the operation failed with: {message}");
    assert!(
        message.contains(fault.named()),
        "{fault}: the error does not name the entry point that failed ({}): {message}",
        fault.named()
    );
    let code = format!("{:?}", fault.code);
    assert!(
        message.contains(&code),
        "{fault}: the error does not name the driver's code ({code}): {message}"
    );
    message
}

// ---------------------------------------------------------------------------
// Accounting
// ---------------------------------------------------------------------------

/// Driver objects an operation keeps (or leaks) beyond a baseline.
#[derive(Debug, Clone, Copy, Default)]
struct Kept {
    allocations: u64,
    streams: u64,
    events: u64,
    modules: u64,
    contexts: u64,
}

const NOTHING: Kept = Kept {
    allocations: 0,
    streams: 0,
    events: 0,
    modules: 0,
    contexts: 0,
};

fn objects(c: &Counts) -> [u64; 5] {
    [
        c.allocations,
        c.streams,
        c.events,
        c.modules,
        c.retained_contexts,
    ]
}

/// The live objects once no work is queued and they have stopped changing
/// (the release thread may still be dropping what queued work held); waits
/// 10 s at most.
fn settled() -> Counts {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut last = standin::counts_now();
    loop {
        std::thread::sleep(Duration::from_millis(20));
        let now = standin::counts_now();
        if (now == last && now.pending_operations == 0) || Instant::now() > deadline {
            return now;
        }
        last = now;
    }
}

/// Waits (10 s at most) for queued work to drain and the live allocations,
/// streams, events, modules and retained contexts to be `before`'s plus
/// `kept`; asserts that they are, and that no violation happened since.
fn assert_back_to(when: &str, before: &Counts, kept: Kept) {
    let expected = [
        before.allocations + kept.allocations,
        before.streams + kept.streams,
        before.events + kept.events,
        before.modules + kept.modules,
        before.retained_contexts + kept.contexts,
    ];
    let now = standin::wait_for_counts(|c| c.pending_operations == 0 && objects(c) == expected);
    assert_eq!(
        now.violations,
        before.violations,
        "{when}: the CUDA driver stand-in saw a violation: {}",
        standin::last_violation().unwrap_or_default()
    );
    assert_eq!(
        now.pending_operations, 0,
        "{when}: queued work never drained: {now:?}"
    );
    assert_eq!(
        objects(&now),
        expected,
        "{when}: live [allocations, streams, events, modules, retained contexts] {:?}, \
         expected {expected:?}: before {before:?}, kept {kept:?}",
        objects(&now)
    );
    if kept.allocations == 0 {
        assert_eq!(
            now.allocated_bytes, before.allocated_bytes,
            "{when}: allocated bytes"
        );
    }
}

fn wait_for(what: &str, done: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !done() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(done(), "{what}: not within 10 s");
}

// ---------------------------------------------------------------------------
// The shapes of the tests
// ---------------------------------------------------------------------------

/// Runs `op` once without a fault (which makes what it keeps for the
/// process and checks that it reaches call `fault.nth` of the entry point).
fn warm_up<T>(fault: &Fault, op: &impl Fn() -> Result<T>, check: &impl Fn(T)) {
    let made = calls(fault.entry);
    check(
        op().unwrap_or_else(|e| {
            panic!("{}: the operation fails without a fault: {e}", fault.entry)
        }),
    );
    let made = calls(fault.entry) - made;
    assert!(
        made >= u64::from(fault.nth),
        "the operation calls {} {made} time(s): call {} cannot fail (the test is wrong)",
        fault.entry,
        fault.nth
    );
}

/// The usual test: `op` fails with an error naming the entry point, leaves
/// nothing behind, and succeeds (passing `check`) when run again.
fn fails_and_recovers<T>(fault: Fault, op: impl Fn() -> Result<T>, check: impl Fn(T)) {
    warm_up(&fault, &op, &check);
    let before = settled();
    expect_failure(&fault, armed(&fault, &op));
    println!("{fault}: waiting for the work queued before the failure to drain");
    assert_back_to(&format!("after {fault}"), &before, NOTHING);
    check(op().unwrap_or_else(|e| panic!("{fault}: the retry failed: {e}")));
    assert_back_to(
        &format!("after the retry following {fault}"),
        &before,
        NOTHING,
    );
}

/// As [`fails_and_recovers`], for a fault in what `op` makes on its first
/// success and keeps for the process (`kept`): no warm-up run.
fn fails_on_first_use<T>(fault: Fault, op: impl Fn() -> Result<T>, check: impl Fn(T), kept: Kept) {
    let before = settled();
    expect_failure(&fault, armed(&fault, &op));
    assert_back_to(&format!("after {fault}"), &before, NOTHING);
    check(op().unwrap_or_else(|e| panic!("{fault}: the retry failed: {e}")));
    assert_back_to(&format!("after the retry following {fault}"), &before, kept);
}

/// A fault in a call made only from a destructor, which cannot report it:
/// `op` (with `check` and the drop of everything it made) succeeds, and
/// exactly `leaked` is left behind, once; a second run leaks nothing more.
fn swallowed<T>(fault: Fault, op: impl Fn() -> Result<T>, check: impl Fn(T), leaked: Kept) {
    warm_up(&fault, &op, &check);
    let before = settled();
    armed(&fault, || {
        let value = op().unwrap_or_else(|e| {
            panic!(
                "{fault}: the operation failed ({e}), but only a destructor calls {}",
                fault.entry
            )
        });
        check(value);
    });
    assert_back_to(&format!("after {fault}"), &before, leaked);
    check(op().unwrap_or_else(|e| panic!("{fault}: the second run failed: {e}")));
    assert_back_to(
        &format!("after a second run following {fault}"),
        &before,
        leaked,
    );
}

// ---------------------------------------------------------------------------
// Data and operations
// ---------------------------------------------------------------------------

const N: usize = 1000;

fn ints() -> Int32Array {
    Int32Array::from_iter_values(0..N as i32)
}

/// Two buffers to copy (validity and values).
fn ints_with_nulls() -> Int32Array {
    (0..N as i32).map(|i| (i % 7 != 3).then_some(i)).collect()
}

/// `array` exported onto `device` and imported back.
fn export_import(array: &dyn Array, device: &DeviceRef) -> Result<DeviceArray> {
    let (c_array, c_schema) = export_array_to(array, device)?;
    // SAFETY: the structs come from this crate's exporter.
    unsafe { DeviceArray::try_new(c_array, c_schema, ValidationLevel::Default) }
}

/// `array` exported onto `device`, imported back and copied to the host.
fn round_trip(array: &dyn Array, device: &DeviceRef) -> Result<ArrayRef> {
    export_import(array, device)?.to_host()
}

fn equal_to(expected: &dyn Array) -> impl Fn(ArrayRef) + '_ {
    move |found| assert_same("the values", expected, found.as_ref())
}

fn on_host_equal_to(expected: &dyn Array) -> impl Fn(DeviceArray) + '_ {
    move |found| {
        let host = found.to_host().expect("to_host after the operation");
        assert_same("the values", expected, host.as_ref());
    }
}

/// `array` in GPU 0's device memory, the copy complete: a CUDA Array
/// Interface producer's data, ready on any stream.
fn ready_on_gpu(array: &dyn Array) -> DeviceArray {
    let on_gpu = export_import(array, &cuda_device(DeviceType::CUDA)).expect("export to GPU 0");
    on_gpu.synchronize().expect("the copy to GPU 0");
    on_gpu
}

/// One mask byte per value: non-zero (valid) unless `i % 3 == 0`.
fn mask_bytes() -> UInt8Array {
    UInt8Array::from_iter_values((0..N).map(|i| u8::from(i % 3 != 0) * 2))
}

/// Producers' device memory for a masked interface: int32 values, `|b1`
/// values and a `|b1` mask, with what imports of them must give.
struct MaskedInterfaces {
    ints: DeviceArray,
    bools: DeviceArray,
    mask: DeviceArray,
}

impl MaskedInterfaces {
    fn new() -> Self {
        let bools = UInt8Array::from_iter_values((0..N).map(|i| u8::from(i % 5 == 1) * 255));
        MaskedInterfaces {
            ints: ready_on_gpu(&ints()),
            bools: ready_on_gpu(&bools),
            mask: ready_on_gpu(&mask_bytes()),
        }
    }

    fn owner(&self) -> Arc<dyn std::any::Any + Send + Sync> {
        Arc::new((self.ints.clone(), self.bools.clone(), self.mask.clone()))
    }

    /// int32 values with a mask: one kernel launch (the mask).
    fn masked_ints(&self) -> ImportPlan {
        plan(
            (values_ptr(&self.ints), N, "<i4"),
            Some((values_ptr(&self.mask), "|b1")),
            None,
        )
    }

    fn expected_ints() -> Int32Array {
        (0..N as i32).map(|i| (i % 3 != 0).then_some(i)).collect()
    }

    /// `|b1` values with a mask: two kernel launches (values, then mask).
    fn masked_bools(&self) -> ImportPlan {
        plan(
            (values_ptr(&self.bools), N, "|b1"),
            Some((values_ptr(&self.mask), "|b1")),
            None,
        )
    }

    fn expected_bools() -> BooleanArray {
        (0..N).map(|i| (i % 3 != 0).then_some(i % 5 == 1)).collect()
    }
}

/// Imports `plan` over memory `owner` keeps alive.
fn import_interface(
    plan: &ImportPlan,
    owner: &Arc<dyn std::any::Any + Send + Sync>,
) -> Result<DeviceArray> {
    // SAFETY: `owner` holds the producer arrays whose memory the plan
    // describes; the plan names no stream, or the legacy stream.
    unsafe { import_cai(plan, Arc::clone(owner)) }
}

// ---------------------------------------------------------------------------
// Initialisation and contexts
// ---------------------------------------------------------------------------

/// `cuInit` runs once per process, and the crate keeps its outcome for the
/// process (as `cuInit` reads `CUDA_VISIBLE_DEVICES` once): the fault is
/// injected before anything initialises the driver (the child process is
/// fresh), and a retry in the same process reports the same failure
/// without calling `cuInit` again. Every other test is the retry in a new
/// process. The fault is injected with `cuStandinInjectFault` (which needs
/// no `cuInit`): `CUDA_STANDIN_FAULTS` is read by the first `cuInit`, after
/// that call was counted, so `cuInit:1:...` there never fires.
#[test]
fn cu_init() {
    isolated("cu_init", &[], || {
        let before = standin::counts_now();
        let fault = Fault::new("cuInit", 1, CUresult::CUDA_ERROR_NO_DEVICE);
        let first = expect_failure(&fault, armed(&fault, || cuda::device(DeviceType::CUDA, 0)));
        assert!(!cuda::is_available(), "{fault}: is_available");
        let again = cuda::device(DeviceType::CUDA, 0)
            .map(drop)
            .expect_err("the failed cuInit is kept for the process");
        assert_eq!(again.to_string(), first);
        assert_eq!(calls("cuInit"), 1, "cuInit is called once per process");
        assert_back_to(&format!("after {fault}"), &before, NOTHING);
    });
}

/// As `cu_init`: the device count is read once per process, with `cuInit`.
#[test]
fn cu_device_get_count() {
    isolated("cu_device_get_count", &[], || {
        let before = standin::counts_now();
        let fault = Fault::new("cuDeviceGetCount", 1, CUresult::CUDA_ERROR_UNKNOWN);
        let first = expect_failure(&fault, armed(&fault, || cuda::device(DeviceType::CUDA, 0)));
        assert!(!cuda::is_available(), "{fault}: is_available");
        assert!(cuda::device_count().is_err(), "{fault}: device_count");
        let again = cuda::device(DeviceType::CUDA, 0)
            .map(drop)
            .expect_err("the failed count is kept for the process");
        assert_eq!(again.to_string(), first);
        assert_eq!(calls("cuDeviceGetCount"), 1, "counted once per process");
        assert_back_to(&format!("after {fault}"), &before, NOTHING);
    });
}

/// GPU 1's primary context is retained on its first use; GPU 0 is set up
/// first, so the failure is that of a second GPU in a working driver.
fn first_use_of_gpu_1(fault: Fault) {
    cuda_device(DeviceType::CUDA);
    let ints = ints();
    fails_on_first_use(
        fault,
        || {
            let gpu1 = cuda::device(DeviceType::CUDA, 1)?;
            assert_eq!(gpu1.device_id(), 1);
            round_trip(&ints, &gpu1)
        },
        equal_to(&ints),
        Kept {
            contexts: 1,
            ..NOTHING
        },
    );
}

#[test]
fn cu_device_primary_ctx_retain_on_first_use_of_gpu_1() {
    isolated(
        "cu_device_primary_ctx_retain_on_first_use_of_gpu_1",
        &[],
        || {
            first_use_of_gpu_1(Fault::new(
                "cuDevicePrimaryCtxRetain",
                1,
                CUresult::CUDA_ERROR_OUT_OF_MEMORY,
            ))
        },
    );
}

#[test]
fn cu_device_get_on_first_use_of_gpu_1() {
    isolated("cu_device_get_on_first_use_of_gpu_1", &[], || {
        first_use_of_gpu_1(Fault::new(
            "cuDeviceGet",
            1,
            CUresult::CUDA_ERROR_INVALID_DEVICE,
        ))
    });
}

/// Every driver call is made with the GPU's context current: asked for
/// first (`cuCtxGetCurrent`), then pushed (`cuCtxPushCurrent`).
#[test]
fn cu_ctx_get_current() {
    isolated("cu_ctx_get_current", &[], || {
        let gpu = cuda_device(DeviceType::CUDA);
        let ints = ints();
        fails_and_recovers(
            Fault::new("cuCtxGetCurrent", 1, CUresult::CUDA_ERROR_INVALID_CONTEXT),
            || round_trip(&ints, &gpu),
            equal_to(&ints),
        );
    });
}

#[test]
fn cu_ctx_push_current() {
    isolated("cu_ctx_push_current", &[], || {
        let gpu = cuda_device(DeviceType::CUDA);
        let ints = ints();
        fails_and_recovers(
            Fault::new(
                "cuCtxPushCurrent_v2",
                1,
                CUresult::CUDA_ERROR_INVALID_CONTEXT,
            ),
            || round_trip(&ints, &gpu),
            equal_to(&ints),
        );
    });
}

/// The pop after a call cannot report a failure (it runs in a guard's
/// drop): the context stays current on the thread, and later calls find it
/// current. Not in the crate's list of failures to report, but it must not
/// break the operation.
#[test]
fn cu_ctx_pop_current_failure_is_swallowed() {
    isolated("cu_ctx_pop_current_failure_is_swallowed", &[], || {
        let gpu = cuda_device(DeviceType::CUDA);
        let ints = ints();
        swallowed(
            Fault::new(
                "cuCtxPopCurrent_v2",
                1,
                CUresult::CUDA_ERROR_INVALID_CONTEXT,
            ),
            || round_trip(&ints, &gpu),
            equal_to(&ints),
            NOTHING,
        );
    });
}

// ---------------------------------------------------------------------------
// Memory
// ---------------------------------------------------------------------------

fn allocation_fails(kind: DeviceType, entry: &'static str) {
    let device = cuda_device(kind);
    let ints = ints();
    fails_and_recovers(
        Fault::new(entry, 1, CUresult::CUDA_ERROR_OUT_OF_MEMORY),
        || round_trip(&ints, &device),
        equal_to(&ints),
    );
}

#[test]
fn cu_mem_alloc() {
    isolated("cu_mem_alloc", &[], || {
        allocation_fails(DeviceType::CUDA, "cuMemAlloc_v2")
    });
}

#[test]
fn cu_mem_host_alloc() {
    isolated("cu_mem_host_alloc", &[], || {
        allocation_fails(DeviceType::CUDA_HOST, "cuMemHostAlloc")
    });
}

#[test]
fn cu_mem_alloc_managed() {
    isolated("cu_mem_alloc_managed", &[], || {
        allocation_fails(DeviceType::CUDA_MANAGED, "cuMemAllocManaged")
    });
}

/// A failed free (in the allocation's drop) leaks that allocation, and
/// nothing else.
fn free_fails(kind: DeviceType, entry: &'static str) {
    let device = cuda_device(kind);
    let ints = ints();
    swallowed(
        Fault::new(entry, 1, CUresult::CUDA_ERROR_UNKNOWN),
        || round_trip(&ints, &device),
        equal_to(&ints),
        Kept {
            allocations: 1,
            ..NOTHING
        },
    );
}

#[test]
fn cu_mem_free_failure_is_swallowed() {
    isolated("cu_mem_free_failure_is_swallowed", &[], || {
        free_fails(DeviceType::CUDA, "cuMemFree_v2")
    });
}

#[test]
fn cu_mem_free_host_failure_is_swallowed() {
    isolated("cu_mem_free_host_failure_is_swallowed", &[], || {
        free_fails(DeviceType::CUDA_HOST, "cuMemFreeHost")
    });
}

#[test]
fn cu_pointer_get_attributes_in_an_interface_import() {
    isolated(
        "cu_pointer_get_attributes_in_an_interface_import",
        &[],
        || {
            let ints = ints();
            let source = ready_on_gpu(&ints);
            let owner: Arc<dyn std::any::Any + Send + Sync> = Arc::new(source.clone());
            let plan = plan((values_ptr(&source), N, "<i4"), None, None);
            fails_and_recovers(
                Fault::new(
                    "cuPointerGetAttributes",
                    1,
                    CUresult::CUDA_ERROR_INVALID_VALUE,
                ),
                || import_interface(&plan, &owner),
                on_host_equal_to(&ints),
            );
        },
    );
}

// ---------------------------------------------------------------------------
// Streams and events
// ---------------------------------------------------------------------------

#[test]
fn cu_stream_create() {
    isolated("cu_stream_create", &[], || {
        let gpu = cuda_device(DeviceType::CUDA);
        let ints = ints();
        fails_and_recovers(
            Fault::new("cuStreamCreate", 1, CUresult::CUDA_ERROR_OUT_OF_MEMORY),
            || round_trip(&ints, &gpu),
            equal_to(&ints),
        );
    });
}

#[test]
fn cu_stream_destroy_failure_is_swallowed() {
    isolated("cu_stream_destroy_failure_is_swallowed", &[], || {
        let gpu = cuda_device(DeviceType::CUDA);
        let ints = ints();
        swallowed(
            Fault::new("cuStreamDestroy_v2", 1, CUresult::CUDA_ERROR_INVALID_HANDLE),
            || round_trip(&ints, &gpu),
            equal_to(&ints),
            Kept {
                streams: 1,
                ..NOTHING
            },
        );
    });
}

/// The copy's event is created after the copies are queued: the memory
/// they write must outlive them (slow queue: still running when the error
/// returns).
#[test]
fn cu_event_create_in_an_export() {
    isolated("cu_event_create_in_an_export", SLOW_QUEUE, || {
        let gpu = cuda_device(DeviceType::CUDA);
        let ints = ints();
        fails_and_recovers(
            Fault::new("cuEventCreate", 1, CUresult::CUDA_ERROR_OUT_OF_MEMORY),
            || round_trip(&ints, &gpu),
            equal_to(&ints),
        );
    });
}

/// A zero-copy import ordered after the producer's stream (the legacy
/// stream) by an event of ours.
#[test]
fn cu_event_create_in_an_interface_import() {
    isolated("cu_event_create_in_an_interface_import", &[], || {
        let ints = ints();
        let source = ready_on_gpu(&ints);
        let owner: Arc<dyn std::any::Any + Send + Sync> = Arc::new(source.clone());
        let plan = plan((values_ptr(&source), N, "<i4"), None, Some(1));
        fails_and_recovers(
            Fault::new("cuEventCreate", 1, CUresult::CUDA_ERROR_OUT_OF_MEMORY),
            || import_interface(&plan, &owner),
            on_host_equal_to(&ints),
        );
    });
}

#[test]
fn cu_event_destroy_failure_is_swallowed() {
    isolated("cu_event_destroy_failure_is_swallowed", &[], || {
        let gpu = cuda_device(DeviceType::CUDA);
        let ints = ints();
        swallowed(
            Fault::new("cuEventDestroy_v2", 1, CUresult::CUDA_ERROR_INVALID_HANDLE),
            || round_trip(&ints, &gpu),
            equal_to(&ints),
            Kept {
                events: 1,
                ..NOTHING
            },
        );
    });
}

/// As `cu_event_create_in_an_export`: the record follows the queued copies.
#[test]
fn cu_event_record_in_an_export() {
    isolated("cu_event_record_in_an_export", SLOW_QUEUE, || {
        let gpu = cuda_device(DeviceType::CUDA);
        let ints = ints();
        fails_and_recovers(
            Fault::new("cuEventRecord", 1, CUresult::CUDA_ERROR_INVALID_HANDLE),
            || round_trip(&ints, &gpu),
            equal_to(&ints),
        );
    });
}

#[test]
fn cu_event_record_in_an_interface_import() {
    isolated("cu_event_record_in_an_interface_import", &[], || {
        let ints = ints();
        let source = ready_on_gpu(&ints);
        let owner: Arc<dyn std::any::Any + Send + Sync> = Arc::new(source.clone());
        let plan = plan((values_ptr(&source), N, "<i4"), None, Some(1));
        fails_and_recovers(
            Fault::new("cuEventRecord", 1, CUresult::CUDA_ERROR_INVALID_HANDLE),
            || import_interface(&plan, &owner),
            on_host_equal_to(&ints),
        );
    });
}

/// A CUDA Array Interface export of an array whose copy may be pending
/// asks whether its event has completed.
#[test]
fn cu_event_query_in_an_interface_export() {
    isolated("cu_event_query_in_an_interface_export", &[], || {
        let gpu = cuda_device(DeviceType::CUDA);
        // Made once per process: before the baseline.
        counter(&gpu).interface_stream().unwrap();
        let ints = ints();
        fails_and_recovers(
            Fault::new("cuEventQuery", 1, CUresult::CUDA_ERROR_LAUNCH_FAILED),
            || {
                let array = export_import(&ints, &gpu)?;
                let exported = export_cai(&array)?;
                Ok((array, exported))
            },
            |(array, exported)| {
                assert_eq!(exported.interface.shape, [N as i64]);
                assert_eq!(exported.interface.data.0, values_ptr(&array));
                assert!(exported.mask.is_none());
                on_host_equal_to(&ints)(array);
            },
        );
    });
}

#[test]
fn cu_event_synchronize() {
    isolated("cu_event_synchronize", &[], || {
        let gpu = cuda_device(DeviceType::CUDA);
        let ints = ints();
        fails_and_recovers(
            Fault::new("cuEventSynchronize", 1, CUresult::CUDA_ERROR_LAUNCH_FAILED),
            || {
                let array = export_import(&ints, &gpu)?;
                array.synchronize()?;
                Ok(array)
            },
            on_host_equal_to(&ints),
        );
    });
}

/// `to_host` of device memory queues its copies into host memory and then
/// synchronizes: a failed synchronization must not free that memory under
/// the copies. 36 MiB, so the destination is a mapping of its own (unmapped
/// when freed, which makes a late copy into it crash rather than corrupt
/// the heap), on a slow queue.
#[test]
fn cu_stream_synchronize_in_to_host() {
    isolated("cu_stream_synchronize_in_to_host", SLOW_QUEUE, || {
        let big = Int32Array::from_iter_values(0..9 << 20);
        let on_gpu = export_import(&big, &cuda_device(DeviceType::CUDA)).unwrap();
        fails_and_recovers(
            Fault::new("cuStreamSynchronize", 1, CUresult::CUDA_ERROR_LAUNCH_FAILED),
            || on_gpu.to_host(),
            equal_to(&big),
        );
    });
}

/// `to_host` makes its stream wait on the array's event first.
#[test]
fn cu_stream_wait_event_in_to_host() {
    isolated("cu_stream_wait_event_in_to_host", &[], || {
        let ints = ints_with_nulls();
        let on_gpu = export_import(&ints, &cuda_device(DeviceType::CUDA)).unwrap();
        fails_and_recovers(
            Fault::new("cuStreamWaitEvent", 1, CUresult::CUDA_ERROR_INVALID_HANDLE),
            || on_gpu.to_host(),
            equal_to(&ints),
        );
    });
}

/// A DLPack export for a consumer's stream makes that stream wait on the
/// array's event.
#[test]
fn cu_stream_wait_event_in_a_dlpack_export() {
    isolated("cu_stream_wait_event_in_a_dlpack_export", &[], || {
        let gpu = cuda_device(DeviceType::CUDA);
        let ints = ints();
        fails_and_recovers(
            Fault::new("cuStreamWaitEvent", 1, CUresult::CUDA_ERROR_INVALID_HANDLE),
            || {
                let array = export_import(&ints, &gpu)?;
                let tensor =
                    export_dlpack_for_stream(&array, DlpackAbi::Versioned, StreamSync::Legacy)?;
                Ok((array, tensor))
            },
            |(array, tensor)| {
                assert_eq!(tensor.shape(), [N as i64]);
                assert_eq!(tensor.dl_tensor().data as usize, values_ptr(&array));
                drop(tensor);
                on_host_equal_to(&ints)(array);
            },
        );
    });
}

// ---------------------------------------------------------------------------
// Copies
// ---------------------------------------------------------------------------

/// The second copy of an export (values, after validity) fails: the first
/// is queued and must finish before the memory goes (a slow queue: still
/// queued when the error path frees it, unless that waits).
#[test]
fn cu_memcpy_async_in_an_export() {
    isolated("cu_memcpy_async_in_an_export", SLOW_QUEUE, || {
        let gpu = cuda_device(DeviceType::CUDA);
        let ints = ints_with_nulls();
        fails_and_recovers(
            Fault::new("cuMemcpyAsync", 2, CUresult::CUDA_ERROR_INVALID_VALUE),
            || round_trip(&ints, &gpu),
            equal_to(&ints),
        );
    });
}

/// The second copy of a `to_host` fails, the first queued (slow queue).
#[test]
fn cu_memcpy_async_in_to_host() {
    isolated("cu_memcpy_async_in_to_host", SLOW_QUEUE, || {
        let ints = ints_with_nulls();
        let on_gpu = export_import(&ints, &cuda_device(DeviceType::CUDA)).unwrap();
        fails_and_recovers(
            Fault::new("cuMemcpyAsync", 2, CUresult::CUDA_ERROR_INVALID_VALUE),
            || on_gpu.to_host(),
            equal_to(&ints),
        );
    });
}

/// GPU 0's device memory to GPU 1's: the second peer copy fails, the first
/// queued (slow queue).
#[test]
fn cu_memcpy_peer_async() {
    isolated("cu_memcpy_peer_async", SLOW_QUEUE, || {
        let ints = ints_with_nulls();
        let gpu1 = cuda::device(DeviceType::CUDA, 1).expect("the stand-in's GPU 1");
        let source = export_import(&ints, &cuda_device(DeviceType::CUDA)).unwrap();
        fails_and_recovers(
            Fault::new("cuMemcpyPeerAsync", 2, CUresult::CUDA_ERROR_INVALID_VALUE),
            || source.to_device(&gpu1),
            |moved| {
                assert_eq!(moved.device_id(), 1);
                on_host_equal_to(&ints)(moved);
            },
        );
    });
}

/// Before a copy allocates, it asks `cuMemGetAddressRange` whether each
/// buffer lies inside its allocation. Whatever that call fails with, the
/// device cannot tell, and the copy goes ahead: a driver that cannot
/// describe memory never gets valid data refused.
#[test]
fn cu_mem_get_address_range_failure_lets_the_copy_go_ahead() {
    isolated(
        "cu_mem_get_address_range_failure_lets_the_copy_go_ahead",
        &[],
        || {
            let ints = ints_with_nulls();
            let on_gpu = export_import(&ints, &cuda_device(DeviceType::CUDA)).unwrap();
            let checks = calls("cuMemGetAddressRange_v2");
            assert_same("the values", &ints, on_gpu.to_host().unwrap().as_ref());
            assert_eq!(
                calls("cuMemGetAddressRange_v2") - checks,
                2,
                "one check per buffer (validity, values), each inside its allocation"
            );
            for code in [
                CUresult::CUDA_ERROR_NOT_FOUND,
                CUresult::CUDA_ERROR_INVALID_VALUE,
                CUresult::CUDA_ERROR_INVALID_CONTEXT,
                CUresult::CUDA_ERROR_UNKNOWN,
            ] {
                // The validity buffer's check, then the values buffer's.
                for nth in [1, 2] {
                    let fault = Fault::new("cuMemGetAddressRange_v2", nth, code);
                    let before = settled();
                    let back = armed(&fault, || on_gpu.to_host())
                        .unwrap_or_else(|e| panic!("{fault}: the copy was refused: {e}"));
                    assert_same(&fault.to_string(), &ints, back.as_ref());
                    drop(back);
                    assert_back_to(&format!("after {fault}"), &before, NOTHING);
                }
            }
        },
    );
}

/// A claim past its allocation (a million int32 values over 100) is
/// refused by the check; when the check cannot tell (its look-up past the
/// allocation's end fails), the copy goes ahead and fails where the driver
/// refuses to read past the allocation, as it did before the check: an
/// error, nothing left behind.
#[test]
fn cu_mem_get_address_range_failure_past_an_allocation_leaves_the_refusal_to_the_copy() {
    isolated(
        "cu_mem_get_address_range_failure_past_an_allocation_leaves_the_refusal_to_the_copy",
        &[],
        || {
            let gpu = cuda_device(DeviceType::CUDA);
            let case = Case::new(
                ArrayNode::new(
                    1_000_000,
                    0,
                    vec![None, i32s(&(0..100).collect::<Vec<_>>())],
                ),
                SchemaNode::new("i", "v"),
            );
            let built = build_on_device(&case, &gpu, &|bytes| bytes.len());
            // SAFETY: every pointer is valid (the buffer in an allocation of
            // its own); only the length claims more than it holds.
            let lying = unsafe {
                DeviceArray::try_new(built.array, built.schema, ValidationLevel::Default)
            }
            .unwrap();
            let refused = lying.to_host().unwrap_err().to_string();
            assert!(
                refused.starts_with("buffer 1: the values buffer claims 4000000 bytes")
                    && refused.contains("then CUDA_ERROR_NOT_FOUND at 0x"),
                "without a fault, the check refuses: {refused}"
            );
            let before = settled();
            let fault = Fault::new("cuMemGetAddressRange_v2", 2, CUresult::CUDA_ERROR_UNKNOWN);
            let failed = armed(&fault, || lying.to_host()).unwrap_err().to_string();
            assert!(
                failed.contains("cuMemcpyAsync") && failed.contains("CUDA_ERROR_INVALID_VALUE"),
                "{fault}: the copy is refused by the driver instead: {failed}"
            );
            assert_back_to(&format!("after {fault}"), &before, NOTHING);
        },
    );
}

/// `cuLaunchHostFunc` tells when a copy's host sources may be released;
/// when it fails, the copy keeps them until it is dropped (documented in
/// `release.rs`): the export succeeds.
#[test]
fn cu_launch_host_func_failure_keeps_the_sources_with_the_copy() {
    isolated(
        "cu_launch_host_func_failure_keeps_the_sources_with_the_copy",
        &[],
        || {
            let gpu = cuda_device(DeviceType::CUDA);
            let ints = Int32Array::from_iter_values(0..100_000);
            let values = ints.values().inner().clone();
            let alone = values.strong_count();
            let export = || export_import(&ints, &gpu);
            // Without a fault: released once the copy has run, while the
            // copy lives.
            let on_gpu = export().unwrap();
            on_gpu.synchronize().unwrap();
            wait_for("the host source released after the copy", || {
                values.strong_count() == alone
            });
            drop(on_gpu);

            let before = settled();
            let fault = Fault::new("cuLaunchHostFunc", 1, CUresult::CUDA_ERROR_OUT_OF_MEMORY);
            let on_gpu = armed(&fault, export).unwrap_or_else(|e| {
                panic!("{fault}: the export failed ({e}); the copy should keep its sources")
            });
            on_gpu.synchronize().unwrap();
            settled();
            assert!(
                values.strong_count() > alone,
                "{fault}: the host source was released although nothing was queued to say \
                 when the copy had run"
            );
            assert_same("the values", &ints, on_gpu.to_host().unwrap().as_ref());
            drop(on_gpu);
            wait_for("the host source released with the copy", || {
                values.strong_count() == alone
            });
            assert_back_to(&format!("after {fault}"), &before, NOTHING);

            let on_gpu = export().unwrap_or_else(|e| panic!("{fault}: the retry failed: {e}"));
            on_gpu.synchronize().unwrap();
            wait_for("the host source released after the retried copy", || {
                values.strong_count() == alone
            });
            assert_same("the values", &ints, on_gpu.to_host().unwrap().as_ref());
            drop(on_gpu);
            assert_back_to(
                &format!("after the retry following {fault}"),
                &before,
                NOTHING,
            );
        },
    );
}

// ---------------------------------------------------------------------------
// Kernels
// ---------------------------------------------------------------------------

/// The kernels' module is loaded on the first conversion that needs it
/// (a masked CUDA Array Interface import) and kept for the process.
fn kernels_fail_on_first_use(fault: Fault) {
    let producers = MaskedInterfaces::new();
    let owner = producers.owner();
    let plan = producers.masked_ints();
    let expected = MaskedInterfaces::expected_ints();
    assert_eq!(
        standin::counts_now().modules,
        0,
        "no module loaded before the test"
    );
    fails_on_first_use(
        fault,
        || import_interface(&plan, &owner),
        on_host_equal_to(&expected),
        Kept {
            modules: 1,
            ..NOTHING
        },
    );
}

#[test]
fn cu_module_load_data() {
    isolated("cu_module_load_data", &[], || {
        kernels_fail_on_first_use(Fault::new(
            "cuModuleLoadData",
            1,
            CUresult::CUDA_ERROR_INVALID_PTX,
        ))
    });
}

/// The second lookup (`arrow_device_unpack_bits`) fails after the first
/// succeeded: the module is unloaded again.
#[test]
fn cu_module_get_function() {
    isolated("cu_module_get_function", &[], || {
        kernels_fail_on_first_use(Fault::new(
            "cuModuleGetFunction",
            2,
            CUresult::CUDA_ERROR_NOT_FOUND,
        ))
    });
}

/// `|b1` values with a mask: two launches, the second fails with the first
/// queued (slow queue).
#[test]
fn cu_launch_kernel_in_an_interface_import() {
    isolated(
        "cu_launch_kernel_in_an_interface_import",
        SLOW_QUEUE,
        || {
            let producers = MaskedInterfaces::new();
            let owner = producers.owner();
            let plan = producers.masked_bools();
            let expected = MaskedInterfaces::expected_bools();
            fails_and_recovers(
                Fault::new(
                    "cuLaunchKernel",
                    2,
                    CUresult::CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES,
                ),
                || import_interface(&plan, &owner),
                on_host_equal_to(&expected),
            );
        },
    );
}

/// The element-wise mask of an exported array with nulls is made by a
/// kernel.
#[test]
fn cu_launch_kernel_in_an_interface_export() {
    isolated("cu_launch_kernel_in_an_interface_export", &[], || {
        let gpu = cuda_device(DeviceType::CUDA);
        counter(&gpu).interface_stream().unwrap();
        let with_nulls = ints_with_nulls();
        let array = ready_on_gpu(&with_nulls);
        let expected =
            UInt8Array::from_iter_values(with_nulls.iter().map(|v| u8::from(v.is_some())));
        fails_and_recovers(
            Fault::new(
                "cuLaunchKernel",
                1,
                CUresult::CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES,
            ),
            || export_cai(&array),
            |exported| {
                let mask = exported.mask.expect("an array with nulls has a mask");
                assert_eq!(mask.interface.typestr, "|b1");
                on_host_equal_to(&expected)(mask.bytes);
            },
        );
    });
}

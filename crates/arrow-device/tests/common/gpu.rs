//! Helpers of the GPU test binaries (feature `cuda`): the lock that runs
//! them one at a time on GPU 0, skipping with a note where no GPU is
//! usable, the devices, and import of this crate's own structs.
//!
//! The binaries run on a GPU (`scripts/gpu-check.sh`) and, in CI, on the
//! CUDA driver stand-in (`crates/cuda-standin`, loaded through
//! `LD_LIBRARY_PATH`). Under the stand-in, each test's guard also checks on
//! drop that the test made no driver violation and left no allocation or
//! event alive. `ARROW_DEVICE_REQUIRE_GPU=1` turns a skip into a failure, so
//! a CI run that finds no driver cannot pass by skipping.

use std::sync::{Mutex, MutexGuard};

use arrow_device::abi::{DeviceType, FFI_ArrowSchema};
use arrow_device::cai::cuda::export_cai;
use arrow_device::device::cuda::{self, CudaDevice};
use arrow_device::device::DeviceRef;
use arrow_device::{ArrowDeviceArray, DeviceArray, ValidationLevel};

/// The three CUDA memory kinds.
pub const KINDS: [DeviceType; 3] = [
    DeviceType::CUDA,
    DeviceType::CUDA_HOST,
    DeviceType::CUDA_MANAGED,
];

/// The GPU lock, or `None` (after printing why) when no GPU is usable. The
/// tests of one binary share GPU 0 and its devices' synchronization
/// counters, so they run one at a time.
pub fn gpu(test: &str) -> Option<GpuGuard> {
    static LOCK: Mutex<()> = Mutex::new(());
    if !cuda::is_available() {
        let why = match cuda::device(DeviceType::CUDA, 0) {
            Err(e) => e.to_string(),
            Ok(_) => "unknown".to_string(),
        };
        assert!(
            std::env::var_os("ARROW_DEVICE_REQUIRE_GPU").is_none(),
            "{test}: no CUDA GPU ({why}), and ARROW_DEVICE_REQUIRE_GPU is set"
        );
        println!("{test}: skipped, no CUDA GPU: {why}");
        return None;
    }
    let lock = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let before = standin::counts().map(|_| {
        warm_up();
        standin::wait_for_counts(|c| c.pending_operations == 0)
    });
    Some(GpuGuard {
        test: test.to_string(),
        before,
        _lock: lock,
    })
}

/// Creates what the CUDA devices keep for the process (the interface
/// stream of each kind on GPU 0, the kernels' module), so that a test's
/// accounting sees only what the test itself made.
fn warm_up() {
    for kind in KINDS {
        counter(&cuda_device(kind)).interface_stream().unwrap();
    }
    let with_nulls = arrow_array::Int32Array::from(vec![Some(1), None]);
    let (array, schema) =
        arrow_device::export_array_to(&with_nulls, &cuda_device(DeviceType::CUDA)).unwrap();
    let on_gpu = import("warm-up", array, schema);
    // The byte mask of an array with nulls is made by a kernel.
    drop(export_cai(&on_gpu).unwrap());
}

/// Held by a GPU test: the GPU lock and, under the stand-in, the driver's
/// accounting when the test began.
pub struct GpuGuard {
    test: String,
    before: Option<standin::Counts>,
    _lock: MutexGuard<'static, ()>,
}

impl Drop for GpuGuard {
    /// Under the stand-in, once the test's queued work and releases have
    /// run: no violation, and as many allocations, events and streams as
    /// before the test.
    fn drop(&mut self) {
        let Some(before) = self.before else {
            return;
        };
        if std::thread::panicking() {
            return;
        }
        let settled = |now: &standin::Counts| {
            now.pending_operations == 0
                && now.allocations <= before.allocations
                && now.events <= before.events
                && now.streams <= before.streams
        };
        let now = standin::wait_for_counts(settled);
        assert_eq!(
            now.violations,
            before.violations,
            "{}: the CUDA driver stand-in saw a violation: {}",
            self.test,
            standin::last_violation().unwrap_or_default()
        );
        assert!(
            settled(&now),
            "{}: left behind on the driver: {now:?}, before the test: {before:?}",
            self.test
        );
    }
}

/// GPU 0's device of `device_type`.
pub fn cuda_device(device_type: DeviceType) -> DeviceRef {
    cuda::device(device_type, 0).unwrap_or_else(|e| panic!("{device_type} 0: {e}"))
}

/// The CUDA device behind a handle from [`cuda_device`].
pub fn counter(device: &DeviceRef) -> &CudaDevice {
    CudaDevice::of(device.as_ref()).expect("cuda::device returns a CudaDevice")
}

/// Imports structs from this crate's exporter, naming the case on failure.
pub fn import(case: &str, array: ArrowDeviceArray, schema: FFI_ArrowSchema) -> DeviceArray {
    // SAFETY: the structs come from this crate's exporter.
    unsafe { DeviceArray::try_new(array, schema, ValidationLevel::Default) }
        .unwrap_or_else(|e| panic!("{case}: import: {e}"))
}

/// The CUDA driver stand-in's own functions (`crates/cuda-standin`), when
/// it is the driver loaded.
pub mod standin {
    use std::time::{Duration, Instant};

    use cudarc::driver::sys;

    /// `CuStandinCounts`.
    #[repr(C)]
    #[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
    pub struct Counts {
        pub allocations: u64,
        pub allocated_bytes: u64,
        pub streams: u64,
        pub events: u64,
        pub modules: u64,
        pub retained_contexts: u64,
        pub pending_operations: u64,
        pub violations: u64,
    }

    /// The stand-in's live objects; `None` when the driver is not the
    /// stand-in (or absent).
    pub fn counts() -> Option<Counts> {
        if !arrow_device::device::cuda::is_driver_present() {
            return None;
        }
        let mut counts = Counts::default();
        // SAFETY: the loaded driver library; the stand-in's function fills
        // the struct (the layout above), a real driver has no such symbol.
        unsafe {
            let lib = sys::culib();
            let f = lib
                .get::<unsafe extern "C" fn(*mut Counts) -> sys::CUresult>(b"cuStandinCounts\0")
                .ok()?;
            f(&mut counts);
        }
        Some(counts)
    }

    /// Whether the loaded driver is the stand-in.
    pub fn loaded() -> bool {
        counts().is_some()
    }

    /// The stand-in's live objects; panics when it is not loaded.
    pub fn counts_now() -> Counts {
        counts().expect("the CUDA driver stand-in is loaded")
    }

    /// Polls the live objects until `done` holds of them, 10 s at most
    /// (queued work and the release thread drain asynchronously); returns
    /// the last counts, for the caller to assert on.
    pub fn wait_for_counts(done: impl Fn(&Counts) -> bool) -> Counts {
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut now = counts_now();
        while !done(&now) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(2));
            now = counts_now();
        }
        now
    }

    /// The last violation's message.
    pub fn last_violation() -> Option<String> {
        let mut buf = vec![0u8; 1024];
        // SAFETY: as for `counts`; the buffer holds 1024 bytes.
        let code = unsafe {
            let lib = sys::culib();
            let f = lib
                .get::<unsafe extern "C" fn(*mut u8, usize) -> sys::CUresult>(
                    b"cuStandinLastViolation\0",
                )
                .ok()?;
            f(buf.as_mut_ptr(), buf.len())
        };
        if code != sys::CUresult::CUDA_SUCCESS {
            return None;
        }
        let end = buf.iter().position(|b| *b == 0).unwrap_or(buf.len());
        Some(String::from_utf8_lossy(&buf[..end]).into_owned())
    }
}

/// CUDA Array Interface dicts, for the tests that play a producer.
pub mod interface {
    use arrow_device::cai::{CudaArrayInterface, ImportPlan, Value};
    use arrow_device::DeviceArray;

    /// The address of an array's first value (buffer 1; offset 0).
    pub fn values_ptr(array: &DeviceArray) -> usize {
        array.buffers()[1].ptr as usize
    }

    /// The interface entries of `len` values of `typestr` at `ptr`.
    pub fn entries(ptr: usize, len: usize, typestr: &str) -> Vec<(String, Value)> {
        vec![
            (
                "shape".to_string(),
                Value::Tuple(vec![Value::Int(len as i128)]),
            ),
            ("typestr".to_string(), Value::Str(typestr.to_string())),
            (
                "data".to_string(),
                Value::Tuple(vec![Value::Int(ptr as i128), Value::Bool(false)]),
            ),
            ("version".to_string(), Value::Int(3)),
        ]
    }

    /// A validated CUDA Array Interface: `len` values of `typestr` at `ptr`,
    /// with an optional mask and stream.
    pub fn plan(
        (ptr, len, typestr): (usize, usize, &str),
        mask: Option<(usize, &str)>,
        stream: Option<u64>,
    ) -> ImportPlan {
        let mut dict = entries(ptr, len, typestr);
        if let Some((mask_ptr, mask_type)) = mask {
            dict.push((
                "mask".to_string(),
                Value::Dict(entries(mask_ptr, len, mask_type)),
            ));
        }
        if let Some(stream) = stream {
            dict.push(("stream".to_string(), Value::Int(stream.into())));
        }
        CudaArrayInterface::from_entries(dict)
            .and_then(|cai| cai.validate())
            .unwrap()
    }
}

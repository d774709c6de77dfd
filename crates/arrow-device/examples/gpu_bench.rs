//! GPU benchmark of the CUDA device: copy bandwidth against raw `cuMemcpy`,
//! host synchronizations per copy, and the cost of exporting and importing
//! a record batch that already lives on the GPU. Prints Markdown tables on
//! stdout (raw numbers: median, min and max of `--runs` timed runs after a
//! warm-up); `scripts/gpu-check.sh run` puts them into its report.
//!
//! ```sh
//! cargo run --release -p arrow-device --features cuda --example gpu_bench -- [--mib 1024] [--runs 10]
//! ```
//!
//! Every timing is a host clock around a complete operation that ends in a
//! host synchronization (`to_device` is followed by `synchronize()` of its
//! result; `to_host` synchronizes itself; each raw `cuMemcpy` is followed by
//! `cuCtxSynchronize`), so queued work is never mistaken for finished work.
//! Without a usable GPU the program says so and exits 0.

use std::error::Error;
use std::ffi::{c_int, c_void};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow_array::{
    ArrayRef, BooleanArray, Float64Array, Int32Array, Int64Array, ListArray, RecordBatch,
    StringArray,
};
use arrow_buffer::{Buffer, NullBuffer, OffsetBuffer};
use arrow_device::abi::DeviceType;
use arrow_device::device::cuda::{self, CudaDevice};
use arrow_device::device::DeviceRef;
use arrow_device::{
    export_record_batch, export_record_batch_to, DeviceArray, HostStaging, ValidationLevel,
};
use arrow_schema::{DataType, Field};
use cudarc::driver::{result as cu, sys};

type Result<T> = std::result::Result<T, Box<dyn Error>>;

/// Bytes per row of [`mixed_batch`], near enough to size the table.
const MIXED_ROW_BYTES: usize = 53;

/// Largest table: the utf8 column's 32-bit offsets must not overflow.
const MAX_MIB: usize = 4096;

struct Options {
    mib: usize,
    runs: usize,
}

fn main() -> ExitCode {
    let options = match parse_args() {
        Ok(options) => options,
        Err(e) => {
            eprintln!("gpu_bench: {e}\nusage: gpu_bench [--mib N (1..={MAX_MIB})] [--runs N]");
            return ExitCode::from(2);
        }
    };
    if !cuda::is_available() {
        let why = match cuda::device(DeviceType::CUDA, 0) {
            Err(e) => e.to_string(),
            Ok(_) => "the driver reports no GPU".to_string(),
        };
        println!("gpu_bench: no CUDA GPU available, nothing measured: {why}");
        return ExitCode::SUCCESS;
    }
    match run(&options) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("gpu_bench: {e}");
            ExitCode::FAILURE
        }
    }
}

fn parse_args() -> Result<Options> {
    let mut options = Options {
        mib: 1024,
        runs: 10,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = |name: &str| -> Result<usize> {
            let text = args.next().ok_or(format!("{name} needs a value"))?;
            Ok(text.parse().map_err(|e| format!("{name} {text:?}: {e}"))?)
        };
        match arg.as_str() {
            "--mib" => options.mib = value("--mib")?,
            "--runs" => options.runs = value("--runs")?,
            other => return Err(format!("unknown argument {other:?}").into()),
        }
    }
    if options.mib == 0 || options.mib > MAX_MIB || options.runs == 0 {
        return Err("--mib must be 1 to 4096 and --runs at least 1".into());
    }
    Ok(options)
}

fn run(options: &Options) -> Result<()> {
    let gpu = cuda::device(DeviceType::CUDA, 0)?;
    // The raw baselines call the driver directly, on the primary context that
    // arrow-device also uses (made current here, so its calls push nothing).
    let ordinal = cu::device::get(0)?;
    // SAFETY: `ordinal` was just returned by cuDeviceGet; the context is
    // retained for the life of the process, as arrow-device retains it.
    let context = unsafe { cu::primary_ctx::retain(ordinal) }?;
    // SAFETY: a retained primary context.
    unsafe { cu::ctx::set_current(context) }?;

    print_device(ordinal, options)?;
    bandwidth(&gpu, options)?;
    synchronizations(&gpu)?;
    export_import(&gpu)?;
    Ok(())
}

fn print_device(ordinal: sys::CUdevice, options: &Options) -> Result<()> {
    let name = cu::device::get_name(ordinal)?;
    // SAFETY: `ordinal` comes from cuDeviceGet.
    let memory = unsafe { cu::device::total_mem(ordinal) }?;
    let mut version: c_int = 0;
    // SAFETY: writes one int.
    unsafe { sys::cuDriverGetVersion(&mut version) }.result()?;
    println!("### GPU benchmark (arrow-device, feature `cuda`)\n");
    println!(
        "GPU 0: {name}, {:.1} GiB; CUDA driver API {}.{}; {} timed runs per figure after a warm-up; \
         GB = 10^9 bytes.\n",
        memory as f64 / (1u64 << 30) as f64,
        version / 1000,
        version % 1000 / 10,
        options.runs
    );
    Ok(())
}

// --- 1. Bandwidth ------------------------------------------------------------

fn bandwidth(gpu: &DeviceRef, options: &Options) -> Result<()> {
    let rows = options.mib * (1 << 20) / MIXED_ROW_BYTES;
    let built = Instant::now();
    let batch = mixed_batch(rows)?;
    let on_cpu = cpu_device_array(&batch)?;
    let bytes = tree_bytes(&on_cpu)?;
    println!(
        "#### 1. Bandwidth: a mixed table of {rows} rows, {bytes} bytes ({:.1} MiB) in {} buffers\n",
        bytes as f64 / (1u64 << 20) as f64,
        tree_buffers(&on_cpu)
    );
    println!(
        "Columns: int64, float64, utf8 (8 to 24 bytes per value), list<int32> with 10% nulls, \
         boolean; built in {:.1} s. Ours moves the arrow-rs buffers (pageable host memory) \
         one `cuMemcpyAsync` per buffer into one fresh allocation; the raw baselines move the \
         same number of bytes in one contiguous synchronous `cuMemcpyHtoD_v2` / \
         `cuMemcpyDtoH_v2` between one device allocation made beforehand and pageable \
         (`Vec<u8>`, touched beforehand) or pinned (`cuMemHostAlloc`) host memory.\n",
        built.elapsed().as_secs_f64()
    );
    let runs = options.runs;

    let ours_h2d = measure(runs, || {
        let start = Instant::now();
        let on_gpu = on_cpu.to_device(gpu)?;
        on_gpu.synchronize()?;
        let elapsed = start.elapsed();
        drop(on_gpu);
        Ok(elapsed)
    })?;
    let ours_export = measure(runs, || {
        let start = Instant::now();
        let (array, schema) = export_record_batch_to(&batch, gpu)?;
        // SAFETY: the structs come from this crate's exporter.
        let imported = unsafe { DeviceArray::try_new(array, schema, ValidationLevel::Default) }?;
        imported.synchronize()?;
        let elapsed = start.elapsed();
        drop(imported);
        Ok(elapsed)
    })?;
    let on_gpu = on_cpu.to_device(gpu)?;
    on_gpu.synchronize()?;
    let moved = tree_bytes(&on_gpu)?;
    if moved != bytes {
        return Err(format!("the GPU copy holds {moved} bytes, the host table {bytes}").into());
    }
    let ours_d2h = measure(runs, || {
        let start = Instant::now();
        let back = on_gpu.to_host()?;
        let elapsed = start.elapsed();
        drop(back);
        Ok(elapsed)
    })?;
    // The staged copy lands in a pool's pinned buffer, lent again once the
    // previous result is dropped: what a stream of batches (a Flight
    // server, say) pays per batch after the first.
    let staging = HostStaging::new(1);
    let ours_d2h_staged = measure(runs, || {
        let start = Instant::now();
        let back = on_gpu.to_host_staged(&staging)?;
        let elapsed = start.elapsed();
        drop(back);
        Ok(elapsed)
    })?;
    drop(on_gpu);

    let mut raw = RawBuffers::new(bytes)?;
    let device = raw.device;
    let mut pageable = vec![0x5au8; bytes];
    let raw_h2d_pageable = measure(runs, || {
        let start = Instant::now();
        // SAFETY: `device` holds `bytes` bytes, as does `pageable`.
        unsafe { cu::memcpy_htod_sync(device, &pageable) }?;
        cu::ctx::synchronize()?;
        Ok(start.elapsed())
    })?;
    let raw_d2h_pageable = measure(runs, || {
        let start = Instant::now();
        // SAFETY: as above.
        unsafe { cu::memcpy_dtoh_sync(&mut pageable, device) }?;
        cu::ctx::synchronize()?;
        Ok(start.elapsed())
    })?;
    drop(pageable);
    let raw_d2h_fresh = measure(runs, || {
        // Zeroed by calloc: fresh pages, faulted in by the copy, as the
        // allocation `to_host` makes is.
        let mut fresh = vec![0u8; bytes];
        let start = Instant::now();
        // SAFETY: as above.
        unsafe { cu::memcpy_dtoh_sync(&mut fresh, device) }?;
        cu::ctx::synchronize()?;
        let elapsed = start.elapsed();
        drop(fresh);
        Ok(elapsed)
    })?;
    let pinned = raw.pinned_mut();
    let raw_h2d_pinned = measure(runs, || {
        let start = Instant::now();
        // SAFETY: both sides hold `bytes` bytes.
        unsafe { cu::memcpy_htod_sync(device, &*pinned) }?;
        cu::ctx::synchronize()?;
        Ok(start.elapsed())
    })?;
    let raw_d2h_pinned = measure(runs, || {
        let start = Instant::now();
        // SAFETY: both sides hold `bytes` bytes.
        unsafe { cu::memcpy_dtoh_sync(&mut *pinned, device) }?;
        cu::ctx::synchronize()?;
        Ok(start.elapsed())
    })?;
    drop(raw);

    println!("| direction | path | median ms | min ms | max ms | GB/s at median |");
    println!("|---|---|---:|---:|---:|---:|");
    let lines = [
        ("host → GPU", "ours: `to_device` + `synchronize`", &ours_h2d),
        (
            "host → GPU",
            "ours: `export_record_batch_to` + import + `synchronize`",
            &ours_export,
        ),
        (
            "host → GPU",
            "raw `cuMemcpyHtoD`, pageable",
            &raw_h2d_pageable,
        ),
        ("host → GPU", "raw `cuMemcpyHtoD`, pinned", &raw_h2d_pinned),
        ("GPU → host", "ours: `to_host`", &ours_d2h),
        (
            "GPU → host",
            "ours: `to_host_staged` (a `HostStaging` pool's pinned buffer, reused)",
            &ours_d2h_staged,
        ),
        (
            "GPU → host",
            "raw `cuMemcpyDtoH`, pageable",
            &raw_d2h_pageable,
        ),
        (
            "GPU → host",
            "raw `cuMemcpyDtoH`, pageable, fresh allocation",
            &raw_d2h_fresh,
        ),
        ("GPU → host", "raw `cuMemcpyDtoH`, pinned", &raw_d2h_pinned),
    ];
    for (direction, path, stats) in lines {
        println!(
            "| {direction} | {path} | {:.2} | {:.2} | {:.2} | {:.2} |",
            ms(stats.median),
            ms(stats.min),
            ms(stats.max),
            gb_per_s(bytes, stats.median)
        );
    }
    println!();
    println!(
        "| direction | ours GB/s | raw pageable GB/s | ours / raw pageable | raw pinned GB/s | \
         ours / raw pinned | target: ours ≥ 0.80 × raw pageable |"
    );
    println!("|---|---:|---:|---:|---:|---:|---|");
    for (direction, ours, pageable, pinned) in [
        ("host → GPU", &ours_h2d, &raw_h2d_pageable, &raw_h2d_pinned),
        ("GPU → host", &ours_d2h, &raw_d2h_pageable, &raw_d2h_pinned),
        (
            "GPU → host, staged",
            &ours_d2h_staged,
            &raw_d2h_pageable,
            &raw_d2h_pinned,
        ),
    ] {
        let ours = gb_per_s(bytes, ours.median);
        let pageable = gb_per_s(bytes, pageable.median);
        let pinned = gb_per_s(bytes, pinned.median);
        let ratio = ours / pageable;
        println!(
            "| {direction} | {ours:.2} | {pageable:.2} | {ratio:.2} | {pinned:.2} | {:.2} | {} |",
            ours / pinned,
            if ratio >= 0.8 { "met" } else { "NOT met" }
        );
    }
    println!(
        "\nOurs includes its own allocation (`cuMemAlloc` of the tree on the GPU; a zeroed host \
         allocation for `to_host`) and, for `to_host`, the batched read of the large string \
         column's first and last offsets before the copy. `to_host` returns memory no one has \
         touched yet, whose pages the kernel must fault in and zero: the raw \"fresh \
         allocation\" row is that cost; the raw pageable rows reuse memory touched \
         beforehand. `to_host_staged` reuses pinned memory from a pool.\n"
    );
    Ok(())
}

/// A device allocation and a pinned host allocation of the same size, for
/// the raw baselines; both freed on drop.
struct RawBuffers {
    device: sys::CUdeviceptr,
    pinned: *mut u8,
    len: usize,
}

impl RawBuffers {
    fn new(len: usize) -> Result<Self> {
        // SAFETY: a plain allocation, freed by Drop; written before read.
        let device = unsafe { cu::malloc_sync(len) }?;
        // SAFETY: a plain allocation, freed by Drop.
        let pinned = match unsafe { cu::malloc_host(len, 0) } {
            Ok(pinned) => pinned.cast::<u8>(),
            Err(e) => {
                // SAFETY: allocated just above, not used since.
                let _ = unsafe { cu::free_sync(device) };
                return Err(e.into());
            }
        };
        // SAFETY: `len` writable bytes just allocated; initialized (and
        // faulted in) here so that `pinned_mut` views initialized memory.
        unsafe { std::ptr::write_bytes(pinned, 0x5a, len) };
        Ok(RawBuffers {
            device,
            pinned,
            len,
        })
    }

    fn pinned_mut(&mut self) -> &mut [u8] {
        // SAFETY: `len` bytes allocated by cuMemHostAlloc and initialized in
        // `new`, alive as long as `self` and borrowed through `&mut self`.
        unsafe { std::slice::from_raw_parts_mut(self.pinned, self.len) }
    }
}

impl Drop for RawBuffers {
    fn drop(&mut self) {
        // SAFETY: both allocated in `new`, freed once here; every copy using
        // them was synchronous and has completed.
        unsafe {
            let _ = cu::free_host(self.pinned.cast::<c_void>());
            let _ = cu::free_sync(self.device);
        }
    }
}

// --- 2. Host synchronizations ------------------------------------------------

fn synchronizations(gpu: &DeviceRef) -> Result<()> {
    const COLUMNS: usize = 100;
    const ROWS: usize = 10_000;
    let batch = string_batch(COLUMNS, ROWS)?;
    let on_cpu = cpu_device_array(&batch)?;
    let counter = CudaDevice::of(gpu.as_ref()).ok_or("cuda::device did not return a CudaDevice")?;
    println!(
        "#### 2. Host synchronizations per copy: {COLUMNS} utf8 columns × {ROWS} rows \
         ({} bytes)\n",
        tree_bytes(&on_cpu)?
    );
    // Warm-up: the first copy creates the driver's staging buffers.
    drop(on_cpu.to_device(gpu)?.to_host()?);

    let mut table = Steps::default();
    for _ in 0..5 {
        let on_gpu = counted(
            &mut table,
            counter,
            "`to_device` (host → GPU copy, event recorded)",
            || Ok(on_cpu.to_device(gpu)?),
        )?;
        let imported = counted(
            &mut table,
            counter,
            "`export` + import of the GPU copy (reads 100 last offsets)",
            || {
                let (array, schema) = on_gpu.export()?;
                // SAFETY: the structs come from this crate's exporter.
                Ok(unsafe { DeviceArray::try_new(array, schema, ValidationLevel::Default) }?)
            },
        )?;
        counted(
            &mut table,
            counter,
            "`to_host` of the import (GPU → host copy)",
            || {
                drop(imported.to_host()?);
                Ok(())
            },
        )?;
        let exported = counted(
            &mut table,
            counter,
            "`export_record_batch_to` + import",
            || {
                let (array, schema) = export_record_batch_to(&batch, gpu)?;
                // SAFETY: the structs come from this crate's exporter.
                Ok(unsafe { DeviceArray::try_new(array, schema, ValidationLevel::Default) }?)
            },
        )?;
        counted(
            &mut table,
            counter,
            "release of both GPU copies (each waits on its event)",
            || {
                drop((imported, on_gpu, exported));
                Ok(())
            },
        )?;
    }
    println!("| step | host synchronizations (each run) | median ms | min ms | max ms |");
    println!("|---|---|---:|---:|---:|");
    for (name, times, syncs) in &table.steps {
        let stats = Stats::of(times.clone());
        let syncs: Vec<String> = syncs.iter().map(u64::to_string).collect();
        println!(
            "| {name} | {} | {:.3} | {:.3} | {:.3} |",
            syncs.join(", "),
            ms(stats.median),
            ms(stats.min),
            ms(stats.max)
        );
    }
    println!(
        "\nTarget: one host synchronization per array tree for the size reads (import), \
         one per copy to the host; none for a copy to the GPU.\n"
    );
    Ok(())
}

/// Runs `f` as step `name`: its time and the host synchronizations it made.
fn counted<T>(
    table: &mut Steps,
    counter: &CudaDevice,
    name: &'static str,
    f: impl FnOnce() -> Result<T>,
) -> Result<T> {
    let before = counter.host_synchronizations();
    let start = Instant::now();
    let value = f()?;
    table.add(
        name,
        start.elapsed(),
        counter.host_synchronizations() - before,
    );
    Ok(value)
}

/// Per-step timings and synchronization counts, in first-seen order.
#[derive(Default)]
struct Steps {
    steps: Vec<(&'static str, Vec<Duration>, Vec<u64>)>,
}

impl Steps {
    fn add(&mut self, name: &'static str, time: Duration, syncs: u64) {
        match self.steps.iter_mut().find(|(n, _, _)| *n == name) {
            Some((_, times, counts)) => {
                times.push(time);
                counts.push(syncs);
            }
            None => self.steps.push((name, vec![time], vec![syncs])),
        }
    }
}

// --- 3. Export + import of a batch on the GPU -------------------------------

fn export_import(gpu: &DeviceRef) -> Result<()> {
    const ROWS: usize = 1_000;
    let counter = CudaDevice::of(gpu.as_ref()).ok_or("cuda::device did not return a CudaDevice")?;
    println!(
        "#### 3. `export()` + `DeviceArray::try_new` (validation `default`) of a record batch \
         already on the GPU, {ROWS} rows\n"
    );
    println!("Zero-copy on both sides; importing CUDA data reads the string columns' last offsets from device memory in one batch (one host synchronization). The same batch on the CPU for reference.\n");
    println!("| batch | iterations | GPU median µs | GPU min µs | GPU max µs | host syncs per import | CPU median µs |");
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for (columns, iterations) in [(3, 2_000), (100, 300)] {
        let batch = cycling_batch(columns, ROWS)?;
        let on_cpu = cpu_device_array(&batch)?;
        let on_gpu = on_cpu.to_device(gpu)?;
        on_gpu.synchronize()?;
        let before = counter.host_synchronizations();
        let gpu_stats = measure(iterations, || time_export_import(&on_gpu))?;
        // measure() runs a warm-up of its own on top of the iterations.
        let syncs = (counter.host_synchronizations() - before) as f64 / (iterations + 1) as f64;
        let cpu_stats = measure(iterations, || time_export_import(&on_cpu))?;
        println!(
            "| {columns} columns × {ROWS} rows | {iterations} | {:.1} | {:.1} | {:.1} | {syncs:.2} | {:.1} |",
            us(gpu_stats.median),
            us(gpu_stats.min),
            us(gpu_stats.max),
            us(cpu_stats.median)
        );
    }
    println!(
        "\nColumns cycle through int64, float64 with nulls and utf8. The import is dropped \
         (released) outside the timed span.\n"
    );
    Ok(())
}

fn time_export_import(array: &DeviceArray) -> Result<Duration> {
    let start = Instant::now();
    let (c_array, c_schema) = array.export()?;
    // SAFETY: the structs come from this crate's exporter.
    let imported = unsafe { DeviceArray::try_new(c_array, c_schema, ValidationLevel::Default) }?;
    let elapsed = start.elapsed();
    drop(imported);
    Ok(elapsed)
}

// --- Data --------------------------------------------------------------------

/// xorshift64: deterministic data without a dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// Strings of 8 to 24 lowercase letters (16 on average).
fn strings(rng: &mut Rng, rows: usize, nulls: bool) -> Result<StringArray> {
    let mut data = Vec::with_capacity(rows * 16);
    let mut lengths = Vec::with_capacity(rows);
    for _ in 0..rows {
        let r = rng.next();
        let len = 8 + (r % 17) as usize;
        let mut letters = rng.next();
        for _ in 0..len {
            data.push(b'a' + (letters % 26) as u8);
            letters = letters.rotate_right(5) ^ r;
        }
        lengths.push(len);
    }
    if i32::try_from(data.len()).is_err() {
        return Err(format!("{} bytes of strings overflow utf8 offsets", data.len()).into());
    }
    let valid = nulls.then(|| NullBuffer::from_iter((0..rows).map(|i| i % 11 != 0)));
    Ok(StringArray::try_new(
        OffsetBuffer::from_lengths(lengths),
        Buffer::from_vec(data),
        valid,
    )?)
}

fn mixed_batch(rows: usize) -> Result<RecordBatch> {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let ints = Int64Array::from_iter_values((0..rows as i64).map(|i| i * 7 - 3));
    let floats = Float64Array::from_iter_values((0..rows).map(|i| i as f64 * 0.5));
    let text = strings(&mut rng, rows, false)?;
    let list_valid: Vec<bool> = (0..rows).map(|i| i % 10 != 0).collect();
    let lengths: Vec<usize> = list_valid
        .iter()
        .map(|&valid| if valid { (rng.next() % 8) as usize } else { 0 })
        .collect();
    let values = Int32Array::from_iter_values((0..lengths.iter().sum::<usize>() as i32).rev());
    let lists = ListArray::try_new(
        Arc::new(Field::new("item", DataType::Int32, false)),
        OffsetBuffer::from_lengths(lengths),
        Arc::new(values),
        Some(NullBuffer::from(list_valid)),
    )?;
    let flags = BooleanArray::from_iter((0..rows).map(|i| Some(i % 3 == 0)));
    Ok(RecordBatch::try_from_iter([
        ("int64", Arc::new(ints) as ArrayRef),
        ("float64", Arc::new(floats) as ArrayRef),
        ("utf8", Arc::new(text) as ArrayRef),
        ("list_int32", Arc::new(lists) as ArrayRef),
        ("boolean", Arc::new(flags) as ArrayRef),
    ])?)
}

fn string_batch(columns: usize, rows: usize) -> Result<RecordBatch> {
    let mut rng = Rng(42);
    let mut fields = Vec::with_capacity(columns);
    for c in 0..columns {
        fields.push((
            format!("s{c}"),
            Arc::new(strings(&mut rng, rows, c % 2 == 0)?) as ArrayRef,
        ));
    }
    Ok(RecordBatch::try_from_iter(fields)?)
}

/// int64, float64 with nulls, utf8, int64, ...
fn cycling_batch(columns: usize, rows: usize) -> Result<RecordBatch> {
    let mut rng = Rng(7);
    let mut fields = Vec::with_capacity(columns);
    for c in 0..columns {
        let column: ArrayRef = match c % 3 {
            0 => Arc::new(Int64Array::from_iter_values(0..rows as i64)),
            1 => Arc::new(Float64Array::from_iter(
                (0..rows).map(|i| (i % 5 != 0).then_some(i as f64)),
            )),
            _ => Arc::new(strings(&mut rng, rows, true)?),
        };
        fields.push((format!("c{c}"), column));
    }
    Ok(RecordBatch::try_from_iter(fields)?)
}

/// The batch as a CPU `DeviceArray` (zero-copy).
fn cpu_device_array(batch: &RecordBatch) -> Result<DeviceArray> {
    let (array, schema) = export_record_batch(batch)?;
    // SAFETY: the structs come from this crate's exporter.
    Ok(unsafe { DeviceArray::try_new(array, schema, ValidationLevel::Default) }?)
}

/// The bytes a copy of the tree moves: every non-NULL buffer's size.
fn tree_bytes(array: &DeviceArray) -> Result<usize> {
    let mut total = 0;
    for buffer in array.buffers() {
        if !buffer.ptr.is_null() {
            total += buffer.len.ok_or("a buffer of unknown size")?;
        }
    }
    for child in array.children().iter().chain(array.dictionary().iter()) {
        total += tree_bytes(child)?;
    }
    Ok(total)
}

fn tree_buffers(array: &DeviceArray) -> usize {
    let own = array.buffers().iter().filter(|b| !b.ptr.is_null()).count();
    own + array
        .children()
        .iter()
        .chain(array.dictionary().iter())
        .map(tree_buffers)
        .sum::<usize>()
}

// --- Timing ------------------------------------------------------------------

struct Stats {
    median: Duration,
    min: Duration,
    max: Duration,
}

impl Stats {
    fn of(mut times: Vec<Duration>) -> Stats {
        times.sort();
        let n = times.len();
        let median = if n % 2 == 1 {
            times[n / 2]
        } else {
            (times[n / 2 - 1] + times[n / 2]) / 2
        };
        Stats {
            median,
            min: times[0],
            max: times[n - 1],
        }
    }
}

/// One untimed warm-up call, then `runs` calls; each returns the time of its
/// complete operation (the caller stops the clock before releasing).
fn measure(runs: usize, mut f: impl FnMut() -> Result<Duration>) -> Result<Stats> {
    f()?;
    let times = (0..runs).map(|_| f()).collect::<Result<Vec<_>>>()?;
    Ok(Stats::of(times))
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn gb_per_s(bytes: usize, d: Duration) -> f64 {
    bytes as f64 / d.as_secs_f64() / 1e9
}

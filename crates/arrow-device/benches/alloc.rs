//! Heap allocations per export and per import, this crate against arrow-rs'
//! C Data Interface, counted by a counting global allocator (exact, unlike
//! times). Prints a Markdown table.
//!
//! * export: `export_array` / `export_record_batch` against `to_ffi`, the
//!   structs then released;
//! * import: `DeviceArray::try_new` at `default` + `to_host` against
//!   `from_ffi` + `make_array`, of structs made beforehand (by the same
//!   side's exporter), the result then dropped.
//!
//! Run `cargo bench -p arrow-device --bench alloc`.
use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::sync::atomic::{AtomicUsize, Ordering};

use arrow_array::ffi::{from_ffi, to_ffi};
use arrow_array::{make_array, Array, StructArray};
use arrow_device::{export_array, DeviceArray, ValidationLevel};

mod common;
use common::{int64s, mixed_batch, strings};

struct Counting;

static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);
static BYTES: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards every call to the system allocator unchanged.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        BYTES.fetch_add(layout.size(), Ordering::Relaxed);
        // SAFETY: forwarded from the caller.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        BYTES.fetch_add(layout.size(), Ordering::Relaxed);
        // SAFETY: forwarded from the caller.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        BYTES.fetch_add(new_size, Ordering::Relaxed);
        // SAFETY: forwarded from the caller.
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded from the caller.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// (allocations, bytes) made by `f`, the figure of the second of two calls
/// so that one-time initialization (device registry, ...) is not counted.
fn count<T>(mut f: impl FnMut() -> T) -> (usize, usize) {
    black_box(f());
    let (a, b) = (
        ALLOCATIONS.load(Ordering::SeqCst),
        BYTES.load(Ordering::SeqCst),
    );
    black_box(f());
    (
        ALLOCATIONS.load(Ordering::SeqCst) - a,
        BYTES.load(Ordering::SeqCst) - b,
    )
}

fn row(case: &str, array: &dyn Array) {
    let ours_export = count(|| export_array(array).expect("exportable"));
    let theirs_export = count(|| to_ffi(&array.to_data()).expect("exportable"));
    // The structs an import consumes are made outside the count.
    let mut ours: Vec<_> = (0..2)
        .map(|_| export_array(array).expect("exportable"))
        .collect();
    let ours_import = count(|| {
        let (c_array, c_schema) = ours.pop().expect("two exports");
        // SAFETY: the structs come from this crate's exporter.
        let imported = unsafe { DeviceArray::try_new(c_array, c_schema, ValidationLevel::Default) }
            .expect("valid");
        imported.to_host().expect("CPU memory")
    });
    let mut theirs: Vec<_> = (0..2)
        .map(|_| to_ffi(&array.to_data()).expect("exportable"))
        .collect();
    let theirs_import = count(|| {
        let (c_array, c_schema) = theirs.pop().expect("two exports");
        // SAFETY: arrow-rs' own exporter made the structs.
        make_array(unsafe { from_ffi(c_array, &c_schema) }.expect("valid"))
    });
    for (side, (ours, theirs)) in [
        ("export", (ours_export, theirs_export)),
        ("import", (ours_import, theirs_import)),
    ] {
        println!(
            "| {case} | {side} | {} ({} B) | {} ({} B) |",
            ours.0, ours.1, theirs.0, theirs.1
        );
    }
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` too: both run
    // the count, which takes milliseconds.
    println!("| case | side | arrow-device allocations (bytes) | arrow-rs allocations (bytes) |");
    println!("|---|---|---:|---:|");
    row("int64, 1k rows", &int64s(1024));
    row("utf8, 1k rows", &strings(1024));
    row(
        "100-column record batch, 1k rows",
        &StructArray::from(mixed_batch(100, 1024)),
    );
}

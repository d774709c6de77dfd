//! Counting releases of root structs: the one [`Counters`] of the suites.
//!
//! The test producer (`producer.rs`) counts its own roots' releases in it.
//! For structs of another producer, [`counting`] swaps the release callback
//! and private data of a root `ArrowArray` and `ArrowSchema` for a wrapper
//! that restores the producer's pair, forwards the call and counts it, so
//! tests can assert that each struct is released exactly once, and not
//! before its data is unused.
//!
//! arrow-device-cli's unit tests compile this file too (see `producer.rs`).

use std::ffi::c_void;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use arrow_device::abi::{raw, ArrowDeviceArray, FFI_ArrowSchema};

/// How often the root structs of a pair (an `ArrowArray`, or the one inside
/// an `ArrowDeviceArray`, and an `ArrowSchema`) were released.
#[derive(Debug, Default)]
pub struct Counters {
    array: AtomicUsize,
    schema: AtomicUsize,
}

impl Counters {
    /// Releases of the root `ArrowArray` (inside the `ArrowDeviceArray`).
    pub fn array_releases(&self) -> usize {
        self.array.load(Ordering::SeqCst)
    }

    /// Releases of the root `ArrowSchema`.
    pub fn schema_releases(&self) -> usize {
        self.schema.load(Ordering::SeqCst)
    }

    /// Counts one release of the root array; for release callbacks.
    pub(super) fn count_array_release(&self) {
        self.array.fetch_add(1, Ordering::SeqCst);
    }

    /// Counts one release of the root schema; for release callbacks.
    pub(super) fn count_schema_release(&self) {
        self.schema.fetch_add(1, Ordering::SeqCst);
    }
}

/// The producer's callback and private data of a struct whose releases are
/// counted.
struct Forward<S> {
    release: Option<unsafe extern "C" fn(*mut S)>,
    private_data: *mut c_void,
    counters: Arc<Counters>,
}

/// Wraps the release callbacks of the root array and schema so that every
/// release is counted, then forwarded to the producer's callback.
pub fn counting(
    mut array: ArrowDeviceArray,
    mut schema: FFI_ArrowSchema,
) -> (ArrowDeviceArray, FFI_ArrowSchema, Arc<Counters>) {
    let counters = Arc::new(Counters::default());
    // SAFETY: the release written below forwards to the producer's, with
    // its private data.
    let a = unsafe { raw::array_mut(&mut array.array) };
    assert!(a.release.is_some(), "counting needs a non-released array");
    let forward = Forward {
        release: a.release,
        private_data: a.private_data,
        counters: counters.clone(),
    };
    a.private_data = Box::into_raw(Box::new(forward)).cast();
    a.release = Some(release_counted_array);

    // SAFETY: as for the array.
    let s = unsafe { raw::schema_mut(&mut schema) };
    assert!(s.release.is_some(), "counting needs a non-released schema");
    let forward = Forward {
        release: s.release,
        private_data: s.private_data,
        counters: counters.clone(),
    };
    s.private_data = Box::into_raw(Box::new(forward)).cast();
    s.release = Some(release_counted_schema);
    (array, schema, counters)
}

unsafe extern "C" fn release_counted_array(array: *mut raw::ArrowArray) {
    // SAFETY: the consumer calls this on the struct `counting` wrapped (or a
    // bitwise move of it), whose private data is our `Forward`.
    let array = unsafe { &mut *array };
    // SAFETY: boxed by `counting` and taken back once: the producer's
    // callback, restored below, replaces this one.
    let forward = unsafe { Box::from_raw(array.private_data.cast::<Forward<raw::ArrowArray>>()) };
    array.release = forward.release;
    array.private_data = forward.private_data;
    if let Some(release) = forward.release {
        // SAFETY: the producer's callback on its own struct, as exported.
        unsafe { release(array) };
    }
    forward.counters.count_array_release();
}

unsafe extern "C" fn release_counted_schema(schema: *mut raw::ArrowSchema) {
    // SAFETY: as in `release_counted_array`.
    let schema = unsafe { &mut *schema };
    // SAFETY: as in `release_counted_array`.
    let forward = unsafe { Box::from_raw(schema.private_data.cast::<Forward<raw::ArrowSchema>>()) };
    schema.release = forward.release;
    schema.private_data = forward.private_data;
    if let Some(release) = forward.release {
        // SAFETY: the producer's callback on its own struct, as exported.
        unsafe { release(schema) };
    }
    forward.counters.count_schema_release();
}

//! Counting the releases of this crate's own exports wherever a consumer
//! moves them: the consumer checks' half of [`watch`](super::watch).
//!
//! [`watch`](super::watch) finds a producer's callback by the struct's
//! address, so it cannot follow a struct a consumer moves (every consumer
//! moves the root out of its capsule). [`follow`] instead carries its
//! context in the struct itself: each node's `private_data` is swapped for
//! a shim that holds the producer's `private_data` and `release`, and the
//! shim's release puts both back before calling the producer's. That is
//! only sound for a producer whose callbacks read no struct but the one
//! they are given (the parent releases children through their own
//! `release`): this crate's exporters, which is all it is used for. A
//! followed stream also follows every schema and array it hands out.

use std::ffi::{c_char, c_int, c_void};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;

use super::watch::{walk_tree, Tally, Watch, Watchable};
use crate::abi::{raw, ArrowDeviceArray, ArrowDeviceArrayStream, FFI_ArrowArray, FFI_ArrowSchema};

struct Shim<T> {
    release: unsafe extern "C" fn(*mut T),
    private_data: *mut c_void,
    calls: Arc<AtomicU32>,
    marked: Arc<AtomicBool>,
}

/// The nodes of a followed tree: their `release` is [`Watchable::slot`];
/// this adds their `private_data`.
trait Followed: Watchable + raw::Tree {
    fn private_data(this: *mut Self) -> *mut *mut c_void;
}

impl Followed for raw::ArrowArray {
    fn private_data(this: *mut Self) -> *mut *mut c_void {
        // SAFETY: a field address only.
        unsafe { &raw mut (*this).private_data }
    }
}

impl Followed for raw::ArrowSchema {
    fn private_data(this: *mut Self) -> *mut *mut c_void {
        // SAFETY: a field address only.
        unsafe { &raw mut (*this).private_data }
    }
}

unsafe extern "C" fn shim_release<T: Followed>(this: *mut T) {
    // SAFETY: `follow_tree` put a `Shim<T>` box in this struct's
    // private_data; the struct moved with it.
    unsafe {
        let (release, private_data) = (T::slot(this), T::private_data(this));
        let shim = Box::from_raw((*private_data).cast::<Shim<T>>());
        *private_data = shim.private_data;
        *release = Some(shim.release);
        shim.calls.fetch_add(1, Ordering::SeqCst);
        (shim.release)(this);
        shim.marked.store(T::is_marked(this), Ordering::SeqCst);
    }
}

/// Follows every live node of the tree at `root`.
///
/// # Safety
/// `root` is a live tree exported by this crate.
unsafe fn follow_tree<T: Followed>(root: *mut T, tally: &Tally, path: &str) -> Result<(), String> {
    // SAFETY: a live tree (the caller's guarantee).
    unsafe {
        walk_tree(root, path, |node, path| {
            let (release, private_data) = (T::slot(node), T::private_data(node));
            let Some(original) = *release else {
                return;
            };
            let (calls, marked) = tally.add(path);
            let shim = Box::new(Shim::<T> {
                release: original,
                private_data: *private_data,
                calls,
                marked,
            });
            // The shim restores both fields before the producer's callback
            // runs.
            *private_data = Box::into_raw(shim).cast();
            *release = Some(shim_release::<T>);
        })
    }
}

/// A followed stream's context, in its `private_data`.
struct StreamShim<R> {
    original: R,
    tally: Arc<Tally>,
    batches: AtomicU32,
    calls: Arc<AtomicU32>,
    marked: Arc<AtomicBool>,
}

/// The shims of one stream layout (`$raw`, the public-field view of
/// `$outer`, whose `get_next` fills an `$out`): `$follow` installs them.
macro_rules! stream_shims {
    ($follow:ident, $raw:ty, $outer:ty, $out:ty, $root:expr) => {
        /// Follows a live stream of this layout, counting into `tally`.
        ///
        /// # Safety
        /// `view` is a live stream exported by this crate.
        unsafe fn $follow(view: *mut $raw, tally: &Arc<Tally>) {
            /// Runs `call` with the producer's fields back in place.
            unsafe fn with_original<R>(
                this: *mut $outer,
                call: impl FnOnce(&$raw, &StreamShim<$raw>) -> R,
            ) -> R {
                let view = this.cast::<$raw>();
                // SAFETY: a followed stream holds its shim in
                // private_data; the producer's callbacks see exactly their
                // own fields while they run.
                unsafe {
                    let followed = *view;
                    let shim = &*followed.private_data.cast::<StreamShim<$raw>>();
                    *view = shim.original;
                    let result = call(&shim.original, shim);
                    *view = followed;
                    result
                }
            }
            unsafe extern "C" fn get_schema(this: *mut $outer, out: *mut FFI_ArrowSchema) -> c_int {
                // SAFETY: a followed stream; `out` is the consumer's.
                unsafe {
                    with_original(this, |original, shim| {
                        let rc = original.get_schema.map_or(-1, |f| f(this, out));
                        if rc == 0 && !out.is_null() {
                            let _ = follow_tree(
                                out.cast::<raw::ArrowSchema>(),
                                &shim.tally,
                                "get_schema",
                            );
                        }
                        rc
                    })
                }
            }
            unsafe extern "C" fn get_next(this: *mut $outer, out: *mut $out) -> c_int {
                // SAFETY: as above.
                unsafe {
                    with_original(this, |original, shim| {
                        let rc = original.get_next.map_or(-1, |f| f(this, out));
                        let root: *mut raw::ArrowArray = $root(out);
                        if rc == 0 && !out.is_null() && (*root).release.is_some() {
                            let n = shim.batches.fetch_add(1, Ordering::SeqCst);
                            let _ = follow_tree(root, &shim.tally, &format!("batch {n}"));
                        }
                        rc
                    })
                }
            }
            unsafe extern "C" fn get_last_error(this: *mut $outer) -> *const c_char {
                // SAFETY: as above.
                unsafe {
                    with_original(this, |original, _| {
                        original
                            .get_last_error
                            .map_or(std::ptr::null(), |f| f(this))
                    })
                }
            }
            unsafe extern "C" fn release(this: *mut $outer) {
                let view = this.cast::<$raw>();
                // SAFETY: a followed stream: its shim goes, the producer's
                // fields come back, and the producer's release runs on them.
                unsafe {
                    let shim = Box::from_raw((*view).private_data.cast::<StreamShim<$raw>>());
                    *view = shim.original;
                    shim.calls.fetch_add(1, Ordering::SeqCst);
                    if let Some(release) = shim.original.release {
                        release(this);
                    }
                    shim.marked
                        .store((*view).release.is_none(), Ordering::SeqCst);
                }
            }
            // SAFETY: a live stream (the caller's guarantee).
            unsafe {
                if (*view).release.is_none() {
                    return;
                }
                let (calls, marked) = tally.add("stream".to_string());
                let shim = Box::new(StreamShim {
                    original: *view,
                    tally: tally.clone(),
                    batches: AtomicU32::new(0),
                    calls,
                    marked,
                });
                (*view).private_data = Box::into_raw(shim).cast();
                (*view).get_schema = Some(get_schema);
                (*view).get_next = Some(get_next);
                (*view).get_last_error = Some(get_last_error);
                (*view).release = Some(release);
            }
        }
    };
}

stream_shims!(
    follow_device_stream,
    raw::ArrowDeviceArrayStream,
    ArrowDeviceArrayStream,
    ArrowDeviceArray,
    |out: *mut ArrowDeviceArray| (&raw mut (*out).array).cast::<raw::ArrowArray>()
);
stream_shims!(
    follow_stream,
    raw::ArrowArrayStream,
    raw::ArrowArrayStream,
    FFI_ArrowArray,
    |out: *mut FFI_ArrowArray| out.cast::<raw::ArrowArray>()
);

/// Follows the struct of kind `kind` at `ptr` (as [`watch`](super::watch)
/// names kinds, DLPack aside) wherever a consumer
/// moves it: every release of it, of its children, and for a stream of
/// every schema and array it hands out, is counted in the returned
/// [`Watch`].
///
/// # Safety
/// `ptr` points to a live struct of that kind exported by this crate (whose
/// callbacks read only the struct they are given).
pub unsafe fn follow(kind: &str, ptr: *mut c_void) -> Result<Watch, String> {
    if ptr.is_null() {
        return Err(format!("a NULL {kind} pointer"));
    }
    let tally = Tally::new();
    // SAFETY (each arm): forwarded.
    unsafe {
        match kind {
            "arrow_schema" => follow_tree(ptr.cast::<raw::ArrowSchema>(), &tally, "schema")?,
            "arrow_array" | "arrow_device_array" => {
                follow_tree(ptr.cast::<raw::ArrowArray>(), &tally, "array")?
            }
            "arrow_device_array_stream" => follow_device_stream(ptr.cast(), &tally),
            "arrow_array_stream" => follow_stream(ptr.cast(), &tally),
            other => return Err(format!("cannot follow a struct of kind {other:?}")),
        }
    }
    Ok(Watch::from_tally(tally))
}

//! [`Device::release_after`](crate::device::Device::release_after) for
//! CUDA: what a stream's queued work needs (the host sources of a copy) is
//! dropped once that work has run, not when the copy's memory is freed, so
//! a host table moved to the GPU can be freed as soon as the copy is done.
//!
//! `cuLaunchHostFunc` runs a host function in stream order, on a driver
//! thread that must not call CUDA ("The host function must not make any
//! CUDA API calls"). What it releases may call CUDA when dropped (a foreign
//! array's release callback, pinned memory), so the host function only
//! hands it to a reaper thread, which drops it.

use std::any::Any;
use std::ffi::c_void;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::mpsc::{self, Sender};
use std::sync::OnceLock;

use cudarc::driver::sys;

use super::stream::CudaStream;

/// What is released: the trait's `owner`.
type Owned = Box<dyn Any + Send + Sync>;

/// The reaper's queue; `None` when its thread could not be started (then
/// nothing is handed over and callers keep their payloads).
fn reaper() -> Option<&'static Sender<Owned>> {
    static REAPER: OnceLock<Option<Sender<Owned>>> = OnceLock::new();
    REAPER
        .get_or_init(|| {
            let (sender, receiver) = mpsc::channel::<Owned>();
            std::thread::Builder::new()
                .name("arrow-device-cuda-release".into())
                .spawn(move || {
                    for payload in receiver {
                        // A panicking destructor must not end the reaper.
                        let _ = catch_unwind(AssertUnwindSafe(|| drop(payload)));
                    }
                })
                .ok()
                .map(|_| sender)
        })
        .as_ref()
}

/// The host function: passes its payload to the reaper.
unsafe extern "C" fn hand_to_reaper(user_data: *mut c_void) {
    let _ = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: `user_data` is the `Box<Owned>` leaked by
        // `release_after` for this one call.
        let payload = unsafe { Box::from_raw(user_data.cast::<Owned>()) };
        match reaper() {
            Some(queue) => {
                let sent = queue.send(*payload);
                // The reaper never ends while the process runs; were it
                // gone, dropping here could call CUDA: leak instead.
                if let Err(mpsc::SendError(payload)) = sent {
                    std::mem::forget(payload);
                }
            }
            // Unreachable: `release_after` checks the reaper first.
            None => std::mem::forget(payload),
        }
    }));
}

impl CudaStream {
    /// Queues `owner`'s release after the work queued on this stream so
    /// far; gives it back when that cannot be arranged (no reaper thread,
    /// or `cuLaunchHostFunc` failed), for the caller to keep.
    pub(super) fn release_after(&self, owner: Owned) -> Option<Owned> {
        if reaper().is_none() {
            return Some(owner);
        }
        let stream = self.raw();
        let user_data = Box::into_raw(Box::new(owner)).cast::<c_void>();
        let launched = self.context().run("cuLaunchHostFunc", || {
            // SAFETY: a live stream of this context; the host function
            // takes `user_data` over exactly once, when it runs.
            unsafe { sys::cuLaunchHostFunc(stream, Some(hand_to_reaper), user_data) }.result()
        });
        match launched {
            Ok(()) => None,
            Err(_) => {
                // SAFETY: not queued, so still ours: the box leaked above.
                let owner = unsafe { Box::from_raw(user_data.cast::<Owned>()) };
                Some(*owner)
            }
        }
    }
}

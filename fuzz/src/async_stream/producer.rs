//! The scripted producer of the `async_stream` target: its state
//! ([`AsyncProducer`]), the calls it makes into our handler (`send`), and
//! the callbacks the consumer makes into it (`request`, `cancel`,
//! `extract_data`), each checked against the protocol.

use std::cell::RefCell;
use std::ffi::{c_char, c_int, c_void};
use std::ptr;

use arrow_device::abi::{
    ArrowAsyncDeviceStreamHandler, ArrowAsyncProducer, ArrowAsyncTask, ArrowDeviceArray, DeviceType,
};

use super::case::{SchemaArg, EXTRACT_FAILS, EXTRACT_NORMAL, EXTRACT_NULL};
use crate::producer::SchemaNode;
use crate::stream_cases::{metadata_of, ArrayDesc, Expected, Failure, Ledger};

/// A metadata blob's pointer, NULL for none.
pub(super) fn blob_ptr(blob: &Option<Vec<u8>>) -> *const c_char {
    blob.as_ref().map_or(ptr::null(), |b| b.as_ptr().cast())
}

/// One task handed to `on_next_task`.
pub(super) struct TaskSlot {
    /// Taken by `extract_data` (or dropped by the producer at the end when
    /// nobody could extract it).
    pub array: Option<ArrowDeviceArray>,
    expected: Expected,
    pub flavor: u8,
    pub extract_calls: usize,
}

/// What a task's `private_data` points to: the producer and the slot.
pub(super) struct TaskRef {
    shared: *const Shared,
    index: usize,
}

/// The producer's state, reached from its callbacks (`request`, `cancel`,
/// `extract_data`) through `private_data`; owned by [`run`](super::run), so
/// that it outlives every struct that points to it.
pub(super) struct AsyncProducer {
    pub kind: u8,
    pub shape: SchemaNode,
    pub device_type: DeviceType,
    pub any_built: bool,
    pub on_request: u8,
    pub on_cancel: u8,
    pub handler: *mut ArrowAsyncDeviceStreamHandler,
    pub producer: *mut ArrowAsyncProducer,
    pub handler_released: bool,
    /// `handler->producer` was written (before an `on_schema`).
    pub producer_populated: bool,
    pub schemas_sent: usize,
    /// `on_schema` or `on_next_task` returned non-zero at least once.
    pub refused: bool,
    /// Nesting of our reactions inside `request` / `cancel`.
    pub depth: usize,
    pub requested: i64,
    pub cancels: usize,
    pub extracted_into: usize,
    pub tasks: Vec<TaskSlot>,
    // Boxed: each one's address is a task's `private_data`, so it must not
    // move when the vector grows.
    #[allow(clippy::vec_box)]
    pub task_refs: Vec<Box<TaskRef>>,
    /// The array the last successful `extract_data` with an `out` wrote.
    pub extracted: Option<Expected>,
    pub eager_seed: u32,
    pub ledger: Ledger,
    pub violations: Vec<String>,
}

pub(super) type Shared = RefCell<AsyncProducer>;

impl AsyncProducer {
    /// Checks a consumer call into the producer.
    fn consumer_call(&mut self, what: &str) {
        if !self.producer_populated {
            self.violations.push(format!(
                "{what} called before on_schema handed the producer over"
            ));
        }
        if self.handler_released {
            self.violations
                .push(format!("{what} called after the handler was released"));
        }
    }
}

/// The handler's callbacks, called by the producer (us) without holding a
/// borrow of the state: each may call back into `request` / `cancel` /
/// `extract_data`. None is called after the handler's release.
pub(super) mod send {
    use super::*;

    /// The live handler, or `None` once released.
    fn handler(shared: &Shared) -> Option<*mut ArrowAsyncDeviceStreamHandler> {
        let p = shared.borrow();
        (!p.handler_released).then_some(p.handler)
    }

    pub(in crate::async_stream) fn schema(shared: &Shared, pick: &SchemaArg, unset_producer: bool) {
        let Some(handler) = handler(shared) else {
            return;
        };
        let mut schema = {
            let mut p = shared.borrow_mut();
            let node = pick.schema(p.kind).ok();
            if !unset_producer {
                // SAFETY: the live handler; the spec has the producer write
                // this member before on_schema.
                unsafe { (*handler).producer = p.producer };
                p.producer_populated = true;
            }
            p.schemas_sent += 1;
            let what = format!("schema of on_schema call {}", p.schemas_sent);
            node.map(|node| p.ledger.build_schema(what, &node))
        };
        let out = schema.as_mut().map_or(ptr::null_mut(), ptr::from_mut);
        // SAFETY: the live handler's callback; the schema is ours to move
        // out of (left released when moved, so dropping it is a no-op).
        let on_schema = unsafe { (*handler).on_schema };
        if let Some(on_schema) = on_schema {
            // SAFETY: as above.
            if unsafe { on_schema(handler, out) } != 0 {
                shared.borrow_mut().refused = true;
            }
        }
        // Whatever the consumer did not take is released here, as a
        // producer cleans up a refused schema.
        drop(schema);
    }

    pub(in crate::async_stream) fn task(shared: &Shared, desc: &ArrayDesc, flavor: u8) {
        let Some(handler) = handler(shared) else {
            return;
        };
        let (mut task, metadata) = {
            let mut p = shared.borrow_mut();
            let p = &mut *p;
            let index = p.tasks.len();
            let desc = if p.any_built {
                desc.inert()
            } else {
                desc.clone()
            };
            let (array, expected) = p.ledger.build_array(
                format!("array of task {index}"),
                &desc,
                p.kind,
                &p.shape,
                p.device_type,
            );
            p.tasks.push(TaskSlot {
                array: Some(array),
                expected,
                flavor,
                extract_calls: 0,
            });
            let task_ref = Box::new(TaskRef {
                shared: ptr::from_ref(shared),
                index,
            });
            let private_data = ptr::from_ref(task_ref.as_ref()).cast_mut().cast::<c_void>();
            p.task_refs.push(task_ref);
            let task = ArrowAsyncTask {
                extract_data: (flavor & 3 != EXTRACT_NULL).then_some(extract_data as _),
                private_data,
            };
            let metadata = metadata_of(flavor >> 2 & 1, b"task", b"\xffmeta");
            (task, metadata)
        };
        // SAFETY: the live handler's callback; the task lives for the call.
        let on_next_task = unsafe { (*handler).on_next_task };
        if let Some(on_next_task) = on_next_task {
            // SAFETY: as above; the metadata outlives the call.
            if unsafe { on_next_task(handler, &mut task, blob_ptr(&metadata)) } != 0 {
                shared.borrow_mut().refused = true;
            }
        }
    }

    pub(in crate::async_stream) fn end(shared: &Shared) {
        let Some(handler) = handler(shared) else {
            return;
        };
        // SAFETY: the live handler's callback.
        let on_next_task = unsafe { (*handler).on_next_task };
        if let Some(on_next_task) = on_next_task {
            // SAFETY: NULL is the end marker.
            unsafe { on_next_task(handler, ptr::null_mut(), ptr::null()) };
        }
    }

    pub(in crate::async_stream) fn error(shared: &Shared, failure: &Failure, meta: u8) {
        let Some(handler) = handler(shared) else {
            return;
        };
        let message = failure.c_message();
        let metadata = metadata_of(meta % 3, b"retry", b"no");
        // SAFETY: the live handler's callback.
        let on_error = unsafe { (*handler).on_error };
        if let Some(on_error) = on_error {
            // SAFETY: message and metadata live for the call.
            unsafe {
                on_error(
                    handler,
                    failure.code(),
                    message.as_ref().map_or(ptr::null(), |m| m.as_ptr()),
                    blob_ptr(&metadata),
                )
            };
        }
    }

    /// Releases the handler: the producer's last call on it.
    pub(in crate::async_stream) fn release(shared: &Shared) {
        let Some(handler) = handler(shared) else {
            return;
        };
        shared.borrow_mut().handler_released = true;
        // SAFETY: the live handler, released once (marked above first, so
        // nothing calls it again, also from inside this call).
        let release = unsafe { (*handler).release };
        if let Some(release) = release {
            // SAFETY: as above. The struct may be freed by this call.
            unsafe { release(handler) };
        }
    }

    /// What the producer does from inside `request` (`on_request`) or
    /// `cancel` (`on_cancel`, shifted to the same numbering).
    pub(super) fn react(shared: &Shared, reaction: u8) {
        let eager = |shared: &Shared| {
            let seed = {
                let mut p = shared.borrow_mut();
                p.eager_seed += 1;
                p.eager_seed
            };
            task(shared, &ArrayDesc::data(2, seed), EXTRACT_NORMAL);
        };
        match reaction {
            1 => eager(shared),
            2 => end(shared),
            3 => error(
                shared,
                &Failure::new(libc::EIO, "producer failed in a callback"),
                1,
            ),
            4 => release(shared),
            5 => {
                eager(shared);
                end(shared);
                release(shared);
            }
            _ => {}
        }
    }
}

/// # Safety
/// `producer` is NULL or our producer struct, alive for the run.
unsafe fn producer_state<'a>(producer: *mut ArrowAsyncProducer) -> Option<&'a Shared> {
    // SAFETY: per the contract; private_data is the run's `Shared`.
    unsafe { producer.as_ref()?.private_data.cast::<Shared>().as_ref() }
}

pub(super) unsafe extern "C" fn request(producer: *mut ArrowAsyncProducer, n: i64) {
    // SAFETY: the consumer calls us on our producer.
    let Some(shared) = (unsafe { producer_state(producer) }) else {
        return;
    };
    let reaction = {
        let mut p = shared.borrow_mut();
        p.consumer_call("request");
        if n <= 0 {
            p.violations
                .push(format!("request called with n = {n}, expected n > 0"));
        }
        p.requested = p.requested.saturating_add(n.max(0));
        // Bounded: a reaction may make the consumer call us again.
        (p.depth < 2 && p.on_request != 0).then(|| {
            p.depth += 1;
            p.on_request
        })
    };
    if let Some(reaction) = reaction {
        send::react(shared, reaction);
        shared.borrow_mut().depth -= 1;
    }
}

pub(super) unsafe extern "C" fn cancel(producer: *mut ArrowAsyncProducer) {
    // SAFETY: the consumer calls us on our producer.
    let Some(shared) = (unsafe { producer_state(producer) }) else {
        return;
    };
    let reaction = {
        let mut p = shared.borrow_mut();
        p.consumer_call("cancel");
        p.cancels += 1;
        if p.cancels > 1 {
            let message = format!("cancel called {} times", p.cancels);
            p.violations.push(message);
        }
        let reaction = [0, 3, 4, 2][p.on_cancel as usize % 4];
        (p.depth < 2 && reaction != 0).then(|| {
            p.depth += 1;
            reaction
        })
    };
    if let Some(reaction) = reaction {
        send::react(shared, reaction);
        shared.borrow_mut().depth -= 1;
    }
}

pub(super) unsafe extern "C" fn extract_data(
    task: *mut ArrowAsyncTask,
    out: *mut ArrowDeviceArray,
) -> c_int {
    // SAFETY: the consumer passes a copy of one of our tasks.
    let Some(task) = (unsafe { task.as_ref() }) else {
        return libc::EINVAL;
    };
    // SAFETY: private_data is a TaskRef the run keeps alive.
    let Some(task_ref) = (unsafe { task.private_data.cast::<TaskRef>().as_ref() }) else {
        return libc::EINVAL;
    };
    // SAFETY: the run's `Shared`, alive for the run.
    let shared = unsafe { &*task_ref.shared };
    let mut p = shared.borrow_mut();
    let p = &mut *p;
    let slot = &mut p.tasks[task_ref.index];
    slot.extract_calls += 1;
    if slot.extract_calls > 1 {
        p.violations.push(format!(
            "extract_data called {} times on task {}",
            slot.extract_calls, task_ref.index
        ));
        return libc::EINVAL;
    }
    // Spec: the task cleans up in this call, whatever the outcome.
    let array = slot.array.take();
    p.extracted = None;
    if slot.flavor & 3 == EXTRACT_FAILS {
        return libc::EIO;
    }
    if !out.is_null() {
        if let Some(array) = array {
            // SAFETY: the consumer's struct to fill.
            unsafe { out.write(array) };
            p.extracted = Some(slot.expected.clone());
            p.extracted_into += 1;
        }
    }
    0
}

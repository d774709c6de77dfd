//! The scripted producer of the `sync_stream` target: its state
//! ([`Producer`]), whose answers come from the case, and the device and C
//! streams whose callbacks reach it through `private_data`.

use std::cell::{RefCell, RefMut};
use std::ffi::{c_char, c_int, c_void, CString};
use std::ptr;

use arrow_device::abi::{
    raw, ArrowDeviceArray, ArrowDeviceArrayStream, DeviceType, FFI_ArrowArray,
    FFI_ArrowArrayStream, FFI_ArrowSchema,
};

use super::case::{NextAnswer, SchemaAnswer, SyncCase};
use crate::producer::SchemaNode;
use crate::stream_cases::{ArrayDesc, Expected, Failure, Ledger, KINDS};
use raw::ArrowArrayStream as CStream;

/// The producer's state, shared by the stream's callbacks through
/// `private_data`; it outlives the stream (owned by [`run`](super::run)),
/// so that a call on a released stream is caught here rather than touching
/// freed memory.
pub(super) struct Producer {
    pub case: SyncCase,
    pub kind: u8,
    pub shape: SchemaNode,
    pub device_type: DeviceType,
    pub schema_calls: usize,
    pub next_calls: usize,
    /// The last failure's message, freed at the next call (so that a stale
    /// pointer is caught by ASan).
    pub message: Option<CString>,
    pub last_failed: bool,
    pub failed: bool,
    pub releases: usize,
    pub violations: Vec<String>,
    pub ledger: Ledger,
    /// The array handed over by the last `get_next`, if any.
    pub sent: Option<Expected>,
    /// Whether that array is a valid batch of the stream's own schema on
    /// the CPU, which every consumer must accept and read.
    pub sent_valid: bool,
    /// Whether the consumer's schema (the first answer) is a fixed one.
    pub fixed_schema: bool,
    pub c_producer: bool,
}

pub(super) type Shared = RefCell<Producer>;

impl Producer {
    /// Every entry of a callback but `release`: checks that the call is
    /// allowed; `what` names it.
    fn enter(&mut self, struct_released: bool, what: &str) {
        if struct_released || self.releases > 0 {
            self.violations
                .push(format!("{what} called on a released stream"));
        }
        if what != "get_last_error" {
            if self.failed {
                self.violations
                    .push(format!("{what} called after a failed call"));
            }
            self.message = None;
        }
    }

    fn fail(&mut self, failure: &Failure) -> c_int {
        let code = failure.code();
        self.last_failed = code != 0;
        self.failed |= code != 0;
        self.message = failure.c_message();
        code
    }

    /// `get_schema`'s answer: `Ok(None)` returns 0 without writing.
    fn answer_schema(&mut self) -> Result<Option<FFI_ArrowSchema>, c_int> {
        let call = self.schema_calls;
        self.schema_calls += 1;
        self.last_failed = false;
        let answer = match self.case.schemas.get(call).or(self.case.schemas.last()) {
            Some(answer) => answer.clone(),
            None => SchemaAnswer::Fixed {
                kind: 1,
                renamed: false,
            },
        };
        let what = format!("schema of get_schema call {call}");
        match answer.schema(self.kind) {
            Ok(node) => Ok(Some(self.ledger.build_schema(what, &node))),
            Err(failure) => match self.fail(failure) {
                0 => Ok(None),
                code => Err(code),
            },
        }
    }

    /// `get_next`'s answer: `Ok(None)` returns 0 without writing.
    fn answer_next(&mut self) -> Result<Option<ArrowDeviceArray>, c_int> {
        let call = self.next_calls;
        self.next_calls += 1;
        self.last_failed = false;
        self.sent = None;
        self.sent_valid = false;
        let answer = self
            .case
            .nexts
            .get(call)
            .cloned()
            .unwrap_or(NextAnswer::End);
        let what = format!("array of get_next call {call}");
        match answer {
            NextAnswer::Fail(failure) => match self.fail(&failure) {
                0 => Ok(None),
                code => Err(code),
            },
            NextAnswer::End => Ok(Some(ArrowDeviceArray::empty())),
            NextAnswer::GarbageEnd => Ok(Some(self.ledger.garbage_end(what))),
            NextAnswer::Array(desc) => {
                if let ArrayDesc::Data {
                    kind_delta, label, ..
                } = &desc
                {
                    self.sent_valid = self.fixed_schema
                        && kind_delta % KINDS == 0
                        && (self.c_producer
                            || (label.is_plain() && self.device_type == DeviceType::CPU));
                }
                let (array, expected) =
                    self.ledger
                        .build_array(what, &desc, self.kind, &self.shape, self.device_type);
                self.sent = Some(expected);
                Ok(Some(array))
            }
        }
    }

    fn last_error(&mut self) -> *const c_char {
        if !self.last_failed {
            self.violations
                .push("get_last_error called after a call that did not fail".into());
        }
        self.message.as_ref().map_or(ptr::null(), |m| m.as_ptr())
    }

    fn release(&mut self) {
        self.releases += 1;
        if self.releases > 1 {
            self.violations
                .push(format!("the stream was released {} times", self.releases));
        }
    }
}

/// The producer behind a stream's `private_data`.
///
/// # Safety
/// `private_data` is NULL or a `Shared` that [`run`] keeps alive.
unsafe fn producer<'a>(private_data: *mut c_void) -> Option<&'a Shared> {
    // SAFETY: per the contract.
    unsafe { private_data.cast::<Shared>().as_ref() }
}

/// The two stream structs our producer fills: the device stream, and the
/// plain C stream (no device type: arrays are CPU by definition, labels
/// are dropped). What differs between them; the callbacks are the same.
trait StreamStruct {
    /// What `get_next` writes.
    type Array;

    /// `private_data`, and whether `release` is NULL (released).
    fn state(&self) -> (*mut c_void, bool);

    /// Spec: a released struct has a NULL `release`. The private data
    /// stays (the run owns it), so later calls are caught.
    fn mark_released(&mut self);

    /// What `get_next` writes for the producer's array.
    fn hand_over(array: ArrowDeviceArray) -> Self::Array;
}

impl StreamStruct for ArrowDeviceArrayStream {
    type Array = ArrowDeviceArray;

    fn state(&self) -> (*mut c_void, bool) {
        let fields = raw::device_stream(self);
        (fields.private_data, fields.release.is_none())
    }

    fn mark_released(&mut self) {
        // SAFETY: only `release` changes, to NULL: a released struct.
        unsafe { raw::device_stream_mut(self) }.release = None;
    }

    fn hand_over(array: ArrowDeviceArray) -> ArrowDeviceArray {
        array
    }
}

impl StreamStruct for CStream {
    type Array = FFI_ArrowArray;

    fn state(&self) -> (*mut c_void, bool) {
        (self.private_data, self.release.is_none())
    }

    fn mark_released(&mut self) {
        self.release = None;
    }

    fn hand_over(mut array: ArrowDeviceArray) -> FFI_ArrowArray {
        std::mem::replace(&mut array.array, FFI_ArrowArray::empty())
    }
}

/// The stream callbacks, for either struct. Each records what it can
/// instead of panicking (a panic cannot unwind out of `extern "C"`).
mod callbacks {
    use super::*;

    /// # Safety
    /// `stream` is NULL or one of our streams (or a released copy of one).
    unsafe fn state<'a, S: StreamStruct>(stream: *mut S) -> Option<(&'a Shared, bool)> {
        // SAFETY: per the contract.
        let (private_data, released) = unsafe { stream.as_ref() }?.state();
        // SAFETY: our private data, alive for the whole run.
        let shared = unsafe { producer(private_data) }?;
        Some((shared, released))
    }

    /// The producer behind `stream`, for a call of `what` that writes to
    /// `out`: the call is checked ([`Producer::enter`]), and answered
    /// EINVAL when `stream` is not ours or `out` is NULL.
    ///
    /// # Safety
    /// As for [`state`].
    unsafe fn enter<'a, S: StreamStruct, O>(
        stream: *mut S,
        out: *mut O,
        what: &str,
    ) -> Result<RefMut<'a, Producer>, c_int> {
        // SAFETY: forwarded.
        let Some((shared, released)) = (unsafe { state(stream) }) else {
            return Err(libc::EINVAL);
        };
        let mut p = shared.borrow_mut();
        p.enter(released, what);
        if out.is_null() {
            p.violations.push(format!("{what}'s out is NULL"));
            return Err(libc::EINVAL);
        }
        Ok(p)
    }

    pub(super) unsafe extern "C" fn get_schema<S: StreamStruct>(
        stream: *mut S,
        out: *mut FFI_ArrowSchema,
    ) -> c_int {
        // SAFETY: the consumer passes our stream.
        let mut p = match unsafe { enter(stream, out, "get_schema") } {
            Ok(p) => p,
            Err(code) => return code,
        };
        match p.answer_schema() {
            // SAFETY: `out` is the consumer's struct to fill (spec); written
            // without dropping what it held.
            Ok(Some(schema)) => unsafe { out.write(schema) },
            Ok(None) => {}
            Err(code) => return code,
        }
        0
    }

    pub(super) unsafe extern "C" fn get_next<S: StreamStruct>(
        stream: *mut S,
        out: *mut S::Array,
    ) -> c_int {
        // SAFETY: the consumer passes our stream.
        let mut p = match unsafe { enter(stream, out, "get_next") } {
            Ok(p) => p,
            Err(code) => return code,
        };
        match p.answer_next() {
            // SAFETY: as in get_schema.
            Ok(Some(array)) => unsafe { out.write(S::hand_over(array)) },
            Ok(None) => {}
            Err(code) => return code,
        }
        0
    }

    pub(super) unsafe extern "C" fn get_last_error<S: StreamStruct>(
        stream: *mut S,
    ) -> *const c_char {
        // SAFETY: the consumer passes our stream.
        let Some((shared, released)) = (unsafe { state(stream) }) else {
            return ptr::null();
        };
        let mut p = shared.borrow_mut();
        p.enter(released, "get_last_error");
        p.last_error()
    }

    pub(super) unsafe extern "C" fn release<S: StreamStruct>(stream: *mut S) {
        // SAFETY: the consumer passes our stream.
        let Some((shared, released)) = (unsafe { state(stream) }) else {
            return;
        };
        let mut p = shared.borrow_mut();
        if released {
            p.violations
                .push("release called on a released stream".into());
        }
        p.release();
        // SAFETY: the consumer's pointer to our live struct.
        unsafe { &mut *stream }.mark_released();
    }
}

/// Our device stream over `shared`, as its flags say.
pub(super) fn device_stream(shared: &Shared) -> ArrowDeviceArrayStream {
    let p = shared.borrow();
    let flags = p.case.flags;
    let mut fields = raw::ArrowDeviceArrayStream {
        device_type: p.device_type,
        get_schema: Some(callbacks::get_schema::<ArrowDeviceArrayStream>),
        get_next: Some(callbacks::get_next::<ArrowDeviceArrayStream>),
        get_last_error: Some(callbacks::get_last_error::<ArrowDeviceArrayStream>),
        release: Some(callbacks::release::<ArrowDeviceArrayStream>),
        private_data: ptr::from_ref(shared).cast_mut().cast(),
    };
    if flags & 1 != 0 {
        fields.release = None;
    }
    if flags & 2 != 0 {
        fields.get_schema = None;
    }
    if flags & 4 != 0 {
        fields.get_next = None;
    }
    if flags & 8 != 0 {
        fields.get_last_error = None;
    }
    // SAFETY: the mirror has the same layout; `from_raw` moves the struct
    // out of `fields` (leaving it released, and never dropped as ours).
    unsafe { ArrowDeviceArrayStream::from_raw(ptr::from_mut(&mut fields).cast()) }
}

/// Our plain C stream over `shared`.
pub(super) fn c_stream(shared: &Shared) -> FFI_ArrowArrayStream {
    let flags = shared.borrow().case.flags;
    let mut stream = FFI_ArrowArrayStream::empty();
    // SAFETY: our callbacks; `release` only marks the struct released.
    let fields = unsafe { raw::stream_mut(&mut stream) };
    fields.get_schema = (flags & 2 == 0).then_some(callbacks::get_schema::<CStream> as _);
    fields.get_next = (flags & 4 == 0).then_some(callbacks::get_next::<CStream> as _);
    fields.get_last_error = (flags & 8 == 0).then_some(callbacks::get_last_error::<CStream> as _);
    fields.release = (flags & 1 == 0).then_some(callbacks::release::<CStream> as _);
    fields.private_data = ptr::from_ref(shared).cast_mut().cast();
    stream
}

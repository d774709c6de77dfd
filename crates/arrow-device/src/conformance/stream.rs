//! The rules of a stream: its callbacks, schema, batches, end and release.

use std::ffi::{c_char, c_int, CStr};

use arrow_schema::Field;

use super::array::{device_checks, first_use, on_cpu, release_once, release_schema};
use super::watch::{watch_one, Tally, Watchable};
use super::{Check, Outcome, Scope};
use crate::abi::{
    raw, ArrowDeviceArray, ArrowDeviceArrayStream, DeviceType, FFI_ArrowArray,
    FFI_ArrowArrayStream, FFI_ArrowSchema,
};

/// The most batches read from one stream; the rest is left unread (the
/// stream is still released).
pub const MAX_BATCHES: usize = 10_000;

/// Checks a producer of `ArrowDeviceArrayStream`s (`produce` is called
/// once): callbacks, `get_schema` stability, every batch as
/// [`check_device_array`](super::check_device_array) checks an array (on
/// the stream's device type), the end, `get_last_error`, and release.
pub fn check_device_stream(
    produce: &mut dyn FnMut() -> Result<ArrowDeviceArrayStream, String>,
) -> Vec<Check> {
    run(Scope::DeviceStream, produce().map(Box::new))
}

/// Checks a producer of C stream interface streams (`ArrowArrayStream`):
/// the rules of [`check_device_stream`] that apply without a device.
pub fn check_stream(
    produce: &mut dyn FnMut() -> Result<FFI_ArrowArrayStream, String>,
) -> Vec<Check> {
    run(Scope::Stream, produce().map(Box::new))
}

/// The two stream structs, seen the same way.
trait RawStream: Watchable {
    /// The device type of every batch (`None`: the CPU, without a field).
    fn device_type(&self) -> Option<DeviceType>;
    /// The names of the NULL callbacks.
    fn missing(&self) -> Vec<&'static str>;
    /// # Safety
    /// `this` is a live stream with its callbacks present.
    unsafe fn get_schema(this: *mut Self, out: &mut FFI_ArrowSchema) -> c_int;
    /// # Safety
    /// As for `get_schema`.
    unsafe fn get_next(this: *mut Self) -> (c_int, ArrowDeviceArray);
    /// # Safety
    /// As for `get_schema`.
    unsafe fn get_last_error(this: *mut Self) -> *const c_char;
}

fn missing<const N: usize>(present: [(bool, &'static str); N]) -> Vec<&'static str> {
    present
        .into_iter()
        .filter(|(p, _)| !p)
        .map(|(_, name)| name)
        .collect()
}

impl RawStream for ArrowDeviceArrayStream {
    fn device_type(&self) -> Option<DeviceType> {
        Some(ArrowDeviceArrayStream::device_type(self))
    }
    fn missing(&self) -> Vec<&'static str> {
        let s = raw::device_stream(self);
        missing([
            (s.get_schema.is_some(), "get_schema"),
            (s.get_next.is_some(), "get_next"),
            (s.get_last_error.is_some(), "get_last_error"),
            (s.release.is_some(), "release"),
        ])
    }
    unsafe fn get_schema(this: *mut Self, out: &mut FFI_ArrowSchema) -> c_int {
        // SAFETY: the caller's guarantee (present callbacks).
        unsafe {
            raw::device_stream(&*this)
                .get_schema
                .map_or(-1, |f| f(this, out))
        }
    }
    unsafe fn get_next(this: *mut Self) -> (c_int, ArrowDeviceArray) {
        let mut out = ArrowDeviceArray::empty();
        // SAFETY: as above.
        let rc = unsafe {
            raw::device_stream(&*this)
                .get_next
                .map_or(-1, |f| f(this, &mut out))
        };
        (rc, out)
    }
    unsafe fn get_last_error(this: *mut Self) -> *const c_char {
        // SAFETY: as above.
        unsafe {
            raw::device_stream(&*this)
                .get_last_error
                .map_or(std::ptr::null(), |f| f(this))
        }
    }
}

impl RawStream for raw::ArrowArrayStream {
    fn device_type(&self) -> Option<DeviceType> {
        None
    }
    fn missing(&self) -> Vec<&'static str> {
        missing([
            (self.get_schema.is_some(), "get_schema"),
            (self.get_next.is_some(), "get_next"),
            (self.get_last_error.is_some(), "get_last_error"),
            (self.release.is_some(), "release"),
        ])
    }
    unsafe fn get_schema(this: *mut Self, out: &mut FFI_ArrowSchema) -> c_int {
        // SAFETY: the caller's guarantee (present callbacks).
        unsafe { (*this).get_schema.map_or(-1, |f| f(this, out)) }
    }
    unsafe fn get_next(this: *mut Self) -> (c_int, ArrowDeviceArray) {
        let mut out = FFI_ArrowArray::empty();
        // SAFETY: as above.
        let rc = unsafe { (*this).get_next.map_or(-1, |f| f(this, &mut out)) };
        (rc, on_cpu(out))
    }
    unsafe fn get_last_error(this: *mut Self) -> *const c_char {
        // SAFETY: as above.
        unsafe { (*this).get_last_error.map_or(std::ptr::null(), |f| f(this)) }
    }
}

/// A boxed stream, seen through its public-field view.
trait Boxed {
    type Raw: RawStream;
    fn as_raw(&mut self) -> *mut Self::Raw;
}

impl Boxed for Box<ArrowDeviceArrayStream> {
    type Raw = ArrowDeviceArrayStream;
    fn as_raw(&mut self) -> *mut ArrowDeviceArrayStream {
        &raw mut **self
    }
}

impl Boxed for Box<FFI_ArrowArrayStream> {
    type Raw = raw::ArrowArrayStream;
    fn as_raw(&mut self) -> *mut raw::ArrowArrayStream {
        (&raw mut **self).cast()
    }
}

/// The message `get_last_error` gives, checked: `Ok(None)` for NULL.
///
/// # Safety
/// As for [`RawStream::get_last_error`].
unsafe fn last_error<S: RawStream>(stream: *mut S) -> Result<Option<String>, String> {
    // SAFETY: forwarded.
    let message = unsafe { S::get_last_error(stream) };
    if message.is_null() {
        return Ok(None);
    }
    // SAFETY: the producer's promise: a NUL-terminated string.
    match unsafe { CStr::from_ptr(message) }.to_str() {
        Ok(text) => Ok(Some(text.to_string())),
        Err(e) => Err(format!(
            "get_last_error returned a message that is not UTF-8 ({e})"
        )),
    }
}

/// Per rule, the first failure over the batches, or how many passed.
#[derive(Default)]
struct Batches {
    checks: Vec<(Check, usize)>,
}

impl Batches {
    fn add(&mut self, batch: usize, check: Check) {
        match self.checks.iter_mut().find(|(c, _)| c.id == check.id) {
            Some((kept, count)) => {
                if kept.outcome != Outcome::Failed && check.outcome == Outcome::Failed {
                    *kept = with_batch(batch, check);
                } else if kept.outcome == check.outcome {
                    *count += 1;
                }
            }
            None if check.outcome == Outcome::Failed => {
                self.checks.push((with_batch(batch, check), 1))
            }
            None => self.checks.push((check, 1)),
        }
    }

    fn finish(self, n_batches: usize) -> Vec<Check> {
        self.checks
            .into_iter()
            .map(|(mut check, count)| {
                if check.outcome != Outcome::Failed && n_batches > 1 {
                    check.message = format!("{count} of {n_batches} batches: {}", check.message);
                }
                check
            })
            .collect()
    }
}

fn with_batch(batch: usize, mut check: Check) -> Check {
    check.message = format!("batch {batch}: {}", check.message);
    check
}

fn run<B: Boxed>(scope: Scope, stream: Result<B, String>) -> Vec<Check> {
    let check = |name: &str, outcome, message: String| Check::new(scope, name, outcome, message);
    let mut stream = match stream {
        Ok(stream) => stream,
        Err(message) => return vec![check("export", Outcome::Failed, message)],
    };
    let this = stream.as_raw();
    // SAFETY: the boxed stream is live (or released, which `missing` shows).
    let missing = unsafe { (*this).missing() };
    if !missing.is_empty() {
        let message = format!("{} NULL on a live stream", missing.join(", "));
        if !missing.contains(&"release") {
            // SAFETY: the stream's own release, once.
            unsafe { release_once(this) };
        }
        return vec![check("callbacks", Outcome::Failed, message)];
    }
    let mut checks = vec![check(
        "callbacks",
        Outcome::Passed,
        "all four callbacks present".into(),
    )];
    let tally = Tally::new();
    // SAFETY: live and boxed: it stays in place until released.
    unsafe { watch_one(this, &tally, "stream".into()) };
    // SAFETY: live, callbacks present.
    let device_type = unsafe { (*this).device_type() };
    let mut error_seen = None;

    // The schema, twice.
    let mut fields: Vec<Field> = Vec::new();
    let mut schema_release = None;
    for _ in 0..2 {
        let mut schema = FFI_ArrowSchema::empty();
        // SAFETY: live, callbacks present.
        let rc = unsafe { RawStream::get_schema(this, &mut schema) };
        if rc != 0 {
            // SAFETY: as above.
            let message = unsafe { last_error(this) };
            error_seen = Some(message.clone());
            checks.push(check(
                "valid_full",
                Outcome::Failed,
                format!("get_schema returned {rc} ({})", describe(&message)),
            ));
            break;
        }
        let (field, release) = release_schema(scope, schema);
        if schema_release
            .as_ref()
            .is_none_or(|c: &Check| c.outcome != Outcome::Failed)
        {
            schema_release = Some(release);
        }
        match field {
            Ok(field) => fields.push(field),
            Err(message) => {
                checks.push(check(
                    "valid_full",
                    Outcome::Failed,
                    format!("schema: {message}"),
                ));
                break;
            }
        }
    }
    checks.extend(schema_release);
    checks.push(match fields.as_slice() {
        [a, b] if a == b => check(
            "get_schema_stable",
            Outcome::Passed,
            format!("{} both times", a.data_type()),
        ),
        [a, b] => check(
            "get_schema_stable",
            Outcome::Failed,
            format!("the first call gave {a:?}, the second {b:?} (expected the same schema)"),
        ),
        _ => check(
            "get_schema_stable",
            Outcome::NotApplicable,
            "get_schema did not give two schemas".into(),
        ),
    });

    // The batches.
    let mut batches = Batches::default();
    let mut n_batches = 0;
    let mut ended = false;
    if let Some(field) = fields.first() {
        while n_batches < MAX_BATCHES {
            // SAFETY: live, callbacks present.
            let (rc, batch) = unsafe { RawStream::get_next(this) };
            if rc != 0 {
                drop(batch);
                // SAFETY: as above.
                let message = unsafe { last_error(this) };
                error_seen = Some(message.clone());
                batches.add(
                    n_batches,
                    check(
                        "valid_full",
                        Outcome::Failed,
                        format!("get_next returned {rc} ({})", describe(&message)),
                    ),
                );
                break;
            }
            if batch.is_released() {
                ended = true;
                break;
            }
            if scope.is_device() {
                for c in device_checks(scope, &batch, device_type) {
                    batches.add(n_batches, c);
                }
            }
            let mut batch = Box::new(batch);
            let mut found = Vec::new();
            // SAFETY: a live batch from the producer, boxed; released here.
            let release = unsafe { first_use(scope, &mut batch, Some(field), &mut found) };
            for c in found.into_iter().chain([release]) {
                batches.add(n_batches, c);
            }
            n_batches += 1;
        }
    }
    let batch_checks = batches.finish(n_batches);
    if n_batches == 0 && batch_checks.is_empty() && ended {
        for name in ["valid_full", "alignment", "release_once"] {
            checks.push(check(
                name,
                Outcome::NotApplicable,
                "the stream has no batches".into(),
            ));
        }
    }
    checks.extend(batch_checks);

    // After the end.
    checks.push(if !ended {
        check(
            "end_repeats",
            Outcome::NotApplicable,
            if n_batches == MAX_BATCHES {
                format!("the stream has more than {MAX_BATCHES} batches; the end was not reached")
            } else {
                "the stream failed before its end".to_string()
            },
        )
    } else {
        let mut problems = Vec::new();
        for call in 1..=2 {
            // SAFETY: live, callbacks present.
            let (rc, batch) = unsafe { RawStream::get_next(this) };
            if rc != 0 {
                problems.push(format!("call {call} after the end returned {rc}"));
            } else if !batch.is_released() {
                problems.push(format!("call {call} after the end gave a batch"));
            }
        }
        if problems.is_empty() {
            check(
                "end_repeats",
                Outcome::Passed,
                "two more get_next calls each returned 0 and a released array".into(),
            )
        } else {
            check(
                "end_repeats",
                Outcome::Failed,
                format!("{} (expected 0 and a released array)", problems.join("; ")),
            )
        }
    });

    // get_last_error: read right after the failing call, if any. Spec (C
    // Stream Interface, get_last_error): it "must only be called if the last
    // stream operation failed", so a stream that never failed is not asked.
    checks.push(match error_seen {
        Some(Ok(message)) => check(
            "last_error",
            Outcome::Passed,
            format!("{} after a failure", describe(&Ok(message))),
        ),
        Some(Err(message)) => check("last_error", Outcome::Failed, message),
        None => check(
            "last_error",
            Outcome::NotApplicable,
            "no call failed, and get_last_error may only be called after a failure".into(),
        ),
    });

    // Release.
    // SAFETY: the stream's (watched) callback, once; the box stays released.
    unsafe { release_once(this) };
    checks.push(match tally.problems(|_| true) {
        Some(problems) => check("stream_release", Outcome::Failed, problems),
        None => check(
            "stream_release",
            Outcome::Passed,
            "one call released the stream and set release to NULL".into(),
        ),
    });
    checks
}

fn describe(message: &Result<Option<String>, String>) -> String {
    match message {
        Ok(Some(text)) => format!("get_last_error: {text:?}"),
        Ok(None) => "get_last_error: NULL".to_string(),
        Err(e) => e.clone(),
    }
}

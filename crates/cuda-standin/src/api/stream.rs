//! Streams, events and host functions.

use std::ffi::c_uint;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::{out, stream_any, stream_in};
use crate::control;
use crate::driver;
use crate::result::*;
use crate::stream::{After, Event, HostFn, Stream, StreamKind, Work};

const CU_STREAM_NON_BLOCKING: c_uint = 1;
const CU_EVENT_BLOCKING_SYNC: c_uint = 1;
const CU_EVENT_DISABLE_TIMING: c_uint = 2;
const CU_EVENT_INTERPROCESS: c_uint = 4;

fn event(handle: usize) -> Result<Arc<Event>> {
    let found = driver::handles()
        .events
        .get(&handle)
        .cloned()
        .ok_or(CUDA_ERROR_INVALID_HANDLE)?;
    if found.exporter_destroyed() {
        control::violation(
            format!(
                "event {handle:#x}, opened with cuIpcOpenEventHandle, used after its exporter \
                 destroyed it (\"undefined behavior\")"
            ),
            false,
        );
    }
    Ok(found)
}

entry_points! {
    fn cuStreamCreate(stream: *mut usize, flags: c_uint) {
        if stream.is_null() || flags & !CU_STREAM_NON_BLOCKING != 0 {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let context = driver::current()?;
        let blocking = flags & CU_STREAM_NON_BLOCKING == 0;
        let created = Stream::new(context.handle, context.ordinal, StreamKind::Created { blocking });
        if blocking {
            context.add_blocking(&created);
        }
        let handle = created.handle;
        driver::handles().streams.insert(handle, created);
        control::counters().streams.fetch_add(1, Ordering::SeqCst);
        // SAFETY: checked non-NULL; the caller's out parameter.
        unsafe { out(stream, handle) }
    }

    /// Work already queued still runs (the driver releases the stream once
    /// it has); the handle is invalid from now on.
    fn cuStreamDestroy_v2(stream: usize) {
        driver::handles()
            .streams
            .remove(&stream)
            .ok_or(CUDA_ERROR_INVALID_HANDLE)?;
        control::counters().streams.fetch_sub(1, Ordering::SeqCst);
        Ok(())
    }

    fn cuStreamSynchronize(stream: usize) {
        let stream = stream_any(stream)?;
        let ticket = if stream.kind == StreamKind::Legacy {
            // The legacy stream's work includes what it waits for in the
            // blocking streams: a marker queued now picks that up.
            let context = driver::context(stream.context)?;
            stream.enqueue(&context, Work::Nothing, Vec::new(), Vec::new(), Vec::new(), None)
        } else {
            stream.tail()
        };
        stream.wait_for(ticket);
        Ok(())
    }

    fn cuStreamQuery(stream: usize) {
        if stream_any(stream)?.is_idle() {
            Ok(())
        } else {
            Err(CUDA_ERROR_NOT_READY)
        }
    }

    /// The event may belong to any context (documented); the stream must be
    /// one of the current context.
    fn cuStreamWaitEvent(stream: usize, event_handle: usize, flags: c_uint) {
        if flags != 0 {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let context = driver::current()?;
        let stream = stream_in(stream, &context)?;
        let event = event(event_handle)?;
        let generation = event.recorded();
        let after = if generation == 0 {
            Vec::new()
        } else {
            vec![After::Event(event, generation)]
        };
        stream.enqueue(&context, Work::Nothing, after, Vec::new(), Vec::new(), None);
        Ok(())
    }

    fn cuEventCreate(event: *mut usize, flags: c_uint) {
        let known = CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS;
        let interprocess_with_timing =
            flags & CU_EVENT_INTERPROCESS != 0 && flags & CU_EVENT_DISABLE_TIMING == 0;
        if event.is_null() || flags & !known != 0 || interprocess_with_timing {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let context = driver::current()?;
        let created = if flags & CU_EVENT_INTERPROCESS != 0 {
            Event::interprocess(context.handle)?
        } else {
            Event::new(context.handle)
        };
        let handle = created.handle;
        driver::handles().events.insert(handle, created);
        control::counters().events.fetch_add(1, Ordering::SeqCst);
        // SAFETY: checked non-NULL; the caller's out parameter.
        unsafe { out(event, handle) }
    }

    /// Records still queued complete; the handle is invalid from now on.
    /// An exported interprocess event is marked destroyed for its openers.
    fn cuEventDestroy_v2(event: usize) {
        let found = driver::handles()
            .events
            .remove(&event)
            .ok_or(CUDA_ERROR_INVALID_HANDLE)?;
        if found.imported {
            control::counters().ipc_events.fetch_sub(1, Ordering::SeqCst);
        } else {
            found.mark_destroyed();
        }
        control::counters().events.fetch_sub(1, Ordering::SeqCst);
        Ok(())
    }

    /// "event and stream must be on the same context".
    fn cuEventRecord(event_handle: usize, stream: usize) {
        let context = driver::current()?;
        let stream = stream_in(stream, &context)?;
        let event = event(event_handle)?;
        if event.context != stream.context {
            eprintln!("cuda-standin: cuEventRecord: the event and the stream belong to different contexts");
            return Err(CUDA_ERROR_INVALID_HANDLE);
        }
        let generation = event.next_record();
        let ticket = stream.enqueue(
            &context,
            Work::Record(Arc::clone(&event), generation),
            Vec::new(),
            Vec::new(),
            Vec::new(),
            None,
        );
        event.recorded_at(&stream, ticket);
        Ok(())
    }

    fn cuEventQuery(event_handle: usize) {
        let event = event(event_handle)?;
        if event.completed() >= event.recorded() {
            Ok(())
        } else {
            Err(CUDA_ERROR_NOT_READY)
        }
    }

    fn cuEventSynchronize(event_handle: usize) {
        let event = event(event_handle)?;
        let generation = event.recorded();
        event.force(generation);
        crate::stream::wait_until(|| event.completed() >= generation);
        Ok(())
    }

    /// Runs `function(data)` on the stream's worker once the work queued
    /// before it has run; CUDA calls from inside it are refused.
    fn cuLaunchHostFunc(stream: usize, function: Option<HostFn>, data: *mut std::ffi::c_void) {
        let function = function.ok_or(CUDA_ERROR_INVALID_VALUE)?;
        let context = driver::current()?;
        let stream = stream_in(stream, &context)?;
        stream.enqueue(
            &context,
            Work::HostFunc(function, data as usize),
            Vec::new(),
            Vec::new(),
            Vec::new(),
            None,
        );
        Ok(())
    }
}

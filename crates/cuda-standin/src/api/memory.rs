//! Allocation, pointer attributes, copies and memsets.

use std::ffi::{c_uchar, c_uint, c_void};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::{out, stream_in};
use crate::driver::{self, Context};
use crate::memory::{self, Kind};
use crate::result::*;
use crate::stream::{Stream, Work};

const CU_MEMHOSTALLOC_PORTABLE: c_uint = 1;
const CU_MEMHOSTALLOC_DEVICEMAP: c_uint = 2;
const CU_MEMHOSTALLOC_WRITECOMBINED: c_uint = 4;
const CU_MEM_ATTACH_GLOBAL: c_uint = 1;
const CU_MEM_ATTACH_HOST: c_uint = 2;

/// `CUpointer_attribute` values the stand-in answers.
const CU_POINTER_ATTRIBUTE_CONTEXT: u32 = 1;
const CU_POINTER_ATTRIBUTE_MEMORY_TYPE: u32 = 2;
const CU_POINTER_ATTRIBUTE_DEVICE_POINTER: u32 = 3;
const CU_POINTER_ATTRIBUTE_HOST_POINTER: u32 = 4;
const CU_POINTER_ATTRIBUTE_IS_MANAGED: u32 = 8;
const CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: u32 = 9;
const CU_POINTER_ATTRIBUTE_RANGE_START_ADDR: u32 = 11;
const CU_POINTER_ATTRIBUTE_RANGE_SIZE: u32 = 12;

/// Allocates in the current context, within the device's memory for device
/// and managed memory.
fn allocate(len: usize, kind: Kind) -> Result<usize> {
    let context = driver::current()?;
    let limit = driver::driver()?.settings.memory_per_device;
    let counted = kind != Kind::Pinned;
    if counted {
        let used = context.used_memory.fetch_add(len as u64, Ordering::SeqCst);
        if used.saturating_add(len as u64) > limit {
            context.used_memory.fetch_sub(len as u64, Ordering::SeqCst);
            return Err(CUDA_ERROR_OUT_OF_MEMORY);
        }
    }
    memory::allocate(len, kind, context.handle, context.ordinal).inspect_err(|_| {
        if counted {
            context.used_memory.fetch_sub(len as u64, Ordering::SeqCst);
        }
    })
}

/// Writes one attribute of `ptr` (zeros for memory CUDA does not know).
///
/// # Safety
/// `data` valid for a write of the attribute's type.
unsafe fn attribute(attribute: u32, data: *mut c_void, ptr: usize) -> Result<()> {
    let found = memory::find(ptr);
    let found = found.as_deref();
    // SAFETY (all writes): `data` per this function's contract, with the
    // widths the driver documents for each attribute.
    unsafe {
        match attribute {
            CU_POINTER_ATTRIBUTE_CONTEXT => {
                out(data.cast::<usize>(), found.map_or(0, |a| a.context))
            }
            CU_POINTER_ATTRIBUTE_MEMORY_TYPE => out(
                data.cast::<u32>(),
                found.map_or(0, |a| a.kind.memory_type()),
            ),
            CU_POINTER_ATTRIBUTE_DEVICE_POINTER => {
                out(data.cast::<usize>(), found.map_or(0, |_| ptr))
            }
            CU_POINTER_ATTRIBUTE_HOST_POINTER => out(
                data.cast::<usize>(),
                found.filter(|a| a.kind != Kind::Device).map_or(0, |_| ptr),
            ),
            CU_POINTER_ATTRIBUTE_IS_MANAGED => out(
                data.cast::<u32>(),
                u32::from(found.is_some_and(|a| a.kind == Kind::Managed)),
            ),
            CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL => {
                out(data.cast::<i32>(), found.map_or(0, |a| a.ordinal))
            }
            CU_POINTER_ATTRIBUTE_RANGE_START_ADDR => {
                out(data.cast::<usize>(), found.map_or(0, |a| a.start))
            }
            CU_POINTER_ATTRIBUTE_RANGE_SIZE => {
                out(data.cast::<usize>(), found.map_or(0, |a| a.len))
            }
            other => {
                eprintln!("cuda-standin: pointer attribute {other} is not implemented");
                Err(CUDA_ERROR_INVALID_VALUE)
            }
        }
    }
}

/// Queues a copy of `len` bytes on `stream` of `context`. `dst_cuda` /
/// `src_cuda`: that end must be CUDA memory (the typed variants).
#[allow(clippy::too_many_arguments)]
fn queue_copy(
    entry: &str,
    context: &Arc<Context>,
    stream: &Arc<Stream>,
    dst: usize,
    src: usize,
    len: usize,
    dst_cuda: bool,
    src_cuda: bool,
) -> Result<Option<u64>> {
    if len == 0 {
        return Ok(None);
    }
    let to = memory::region(dst, len, !dst_cuda, &format!("{entry} destination"))?;
    let from = memory::region(src, len, !src_cuda, &format!("{entry} source"))?;
    let uses = to
        .allocation
        .iter()
        .chain(from.allocation.iter())
        .cloned()
        .collect();
    let ticket = stream.enqueue(
        context,
        Work::Copy {
            dst: to.host,
            src: from.host,
            len,
        },
        Vec::new(),
        uses,
        vec![(dst, len), (src, len)],
        Some((dst, to.host, len)),
    );
    Ok(Some(ticket))
}

/// Queues `count` elements of `width` bytes set to `value` at `dst` (CUDA
/// memory, aligned to `width`).
fn queue_fill(
    entry: &str,
    context: &Arc<Context>,
    stream: &Arc<Stream>,
    dst: usize,
    value: u32,
    width: usize,
    count: usize,
) -> Result<Option<u64>> {
    if count == 0 {
        return Ok(None);
    }
    if dst % width != 0 {
        eprintln!("cuda-standin: {entry}: {dst:#x} is not aligned to {width} bytes");
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let len = count.checked_mul(width).ok_or(CUDA_ERROR_INVALID_VALUE)?;
    let to = memory::region(dst, len, false, entry)?;
    let ticket = stream.enqueue(
        context,
        Work::Fill {
            dst: to.host,
            value,
            width,
            count,
        },
        Vec::new(),
        to.allocation.into_iter().collect(),
        vec![(dst, len)],
        Some((dst, to.host, len)),
    );
    Ok(Some(ticket))
}

/// An asynchronous copy on `stream` (a handle) of the current context.
fn copy_async(
    entry: &str,
    dst: usize,
    src: usize,
    len: usize,
    stream: usize,
    ends: (bool, bool),
) -> Result<()> {
    let context = driver::current()?;
    let stream = stream_in(stream, &context)?;
    queue_copy(entry, &context, &stream, dst, src, len, ends.0, ends.1).map(drop)
}

/// A synchronous copy: on the legacy stream, returning once it has run.
fn copy_sync(entry: &str, dst: usize, src: usize, len: usize, ends: (bool, bool)) -> Result<()> {
    let context = driver::current()?;
    let stream = Arc::clone(&context.legacy);
    if let Some(ticket) = queue_copy(entry, &context, &stream, dst, src, len, ends.0, ends.1)? {
        stream.wait_for(ticket);
    }
    Ok(())
}

fn fill(
    entry: &str,
    dst: usize,
    value: u32,
    width: usize,
    count: usize,
    stream: Option<usize>,
) -> Result<()> {
    let context = driver::current()?;
    let queue = match stream {
        Some(handle) => stream_in(handle, &context)?,
        None => Arc::clone(&context.legacy),
    };
    let ticket = queue_fill(entry, &context, &queue, dst, value, width, count)?;
    if let (None, Some(ticket)) = (stream, ticket) {
        queue.wait_for(ticket);
    }
    Ok(())
}

entry_points! {
    fn cuMemAlloc_v2(dptr: *mut u64, size: usize) {
        if dptr.is_null() {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let ptr = allocate(size, Kind::Device)?;
        // SAFETY: checked non-NULL; the caller's out parameter.
        unsafe { out(dptr, ptr as u64) }
    }

    fn cuMemFree_v2(dptr: u64) {
        driver::current()?;
        memory::free(dptr as usize, &[Kind::Device, Kind::Managed], "cuMemFree")
    }

    fn cuMemHostAlloc(pp: *mut *mut c_void, size: usize, flags: c_uint) {
        let known = CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_WRITECOMBINED;
        if pp.is_null() || flags & !known != 0 {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let ptr = allocate(size, Kind::Pinned)?;
        // SAFETY: checked non-NULL; the caller's out parameter.
        unsafe { out(pp, ptr as *mut c_void) }
    }

    fn cuMemFreeHost(p: *mut c_void) {
        driver::current()?;
        memory::free(p as usize, &[Kind::Pinned], "cuMemFreeHost")
    }

    fn cuMemAllocManaged(dptr: *mut u64, size: usize, flags: c_uint) {
        if dptr.is_null() || (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST) {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let ptr = allocate(size, Kind::Managed)?;
        // SAFETY: checked non-NULL; the caller's out parameter.
        unsafe { out(dptr, ptr as u64) }
    }

    /// As the driver: the base and the size asked for of the allocation
    /// (device, pinned or managed) that holds `dptr`, each written when its
    /// pointer is not NULL; `CUDA_ERROR_NOT_FOUND` for an address no
    /// allocation holds (foreign memory, freed memory, the padding after an
    /// allocation's size); `CUDA_ERROR_INVALID_CONTEXT` without a current
    /// context (the call needs one, as on a GPU).
    fn cuMemGetAddressRange_v2(base: *mut u64, size: *mut usize, dptr: u64) {
        driver::current()?;
        let found = memory::find(dptr as usize).ok_or(CUDA_ERROR_NOT_FOUND)?;
        // SAFETY: optional out parameters of the caller.
        unsafe {
            if !base.is_null() {
                base.write(found.start as u64);
            }
            if !size.is_null() {
                size.write(found.len);
            }
        }
        Ok(())
    }

    fn cuPointerGetAttribute(data: *mut c_void, which: u32, ptr: u64) {
        if memory::find(ptr as usize).is_none() {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        // SAFETY: the caller's out parameter for this attribute.
        unsafe { attribute(which, data, ptr as usize) }
    }

    fn cuPointerGetAttributes(count: c_uint, attributes: *mut u32, data: *mut *mut c_void, ptr: u64) {
        if count == 0 || attributes.is_null() || data.is_null() {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        for i in 0..count as usize {
            // SAFETY: the caller's arrays of `count` attributes and slots.
            unsafe { attribute(*attributes.add(i), *data.add(i), ptr as usize) }?;
        }
        Ok(())
    }

    fn cuMemcpyAsync(dst: u64, src: u64, len: usize, stream: usize) {
        copy_async("cuMemcpyAsync", dst as usize, src as usize, len, stream, (false, false))
    }

    fn cuMemcpyHtoDAsync_v2(dst: u64, src: *const c_void, len: usize, stream: usize) {
        copy_async("cuMemcpyHtoDAsync", dst as usize, src as usize, len, stream, (true, false))
    }

    fn cuMemcpyDtoHAsync_v2(dst: *mut c_void, src: u64, len: usize, stream: usize) {
        copy_async("cuMemcpyDtoHAsync", dst as usize, src as usize, len, stream, (false, true))
    }

    fn cuMemcpyDtoDAsync_v2(dst: u64, src: u64, len: usize, stream: usize) {
        copy_async("cuMemcpyDtoDAsync", dst as usize, src as usize, len, stream, (true, true))
    }

    fn cuMemcpyPeerAsync(dst: u64, dst_context: usize, src: u64, src_context: usize, len: usize, stream: usize) {
        let (to, from) = (driver::context(dst_context)?, driver::context(src_context)?);
        for (end, ptr, owner) in [("destination", dst, &to), ("source", src, &from)] {
            if let Some(found) = memory::find(ptr as usize) {
                if found.ordinal != owner.ordinal {
                    eprintln!(
                        "cuda-standin: cuMemcpyPeerAsync: the {end} {ptr:#x} is memory of device {}, \
                         not of the {end} context's device {}",
                        found.ordinal, owner.ordinal
                    );
                    return Err(CUDA_ERROR_INVALID_VALUE);
                }
            }
        }
        copy_async("cuMemcpyPeerAsync", dst as usize, src as usize, len, stream, (true, true))
    }

    fn cuMemcpy(dst: u64, src: u64, len: usize) {
        copy_sync("cuMemcpy", dst as usize, src as usize, len, (false, false))
    }

    fn cuMemcpyHtoD_v2(dst: u64, src: *const c_void, len: usize) {
        copy_sync("cuMemcpyHtoD", dst as usize, src as usize, len, (true, false))
    }

    fn cuMemcpyDtoH_v2(dst: *mut c_void, src: u64, len: usize) {
        copy_sync("cuMemcpyDtoH", dst as usize, src as usize, len, (false, true))
    }

    fn cuMemcpyDtoD_v2(dst: u64, src: u64, len: usize) {
        copy_sync("cuMemcpyDtoD", dst as usize, src as usize, len, (true, true))
    }

    fn cuMemsetD8Async(dst: u64, value: c_uchar, count: usize, stream: usize) {
        fill("cuMemsetD8Async", dst as usize, u32::from(value), 1, count, Some(stream))
    }

    fn cuMemsetD32Async(dst: u64, value: c_uint, count: usize, stream: usize) {
        fill("cuMemsetD32Async", dst as usize, value, 4, count, Some(stream))
    }

    fn cuMemsetD8_v2(dst: u64, value: c_uchar, count: usize) {
        fill("cuMemsetD8", dst as usize, u32::from(value), 1, count, None)
    }

    fn cuMemsetD32_v2(dst: u64, value: c_uint, count: usize) {
        fill("cuMemsetD32", dst as usize, value, 4, count, None)
    }
}

//! Modules and kernel launches.

use std::ffi::{c_char, c_uint, c_void, CStr, CString};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::{out, stream_in};
use crate::control;
use crate::driver;
use crate::memory;
use crate::module::{host_params, parse_ptx, Function, Module};
use crate::result::*;
use crate::stream::Work;

/// The driver's launch limits (every GPU since Maxwell).
const MAX_BLOCK: [u32; 3] = [1024, 1024, 64];
const MAX_THREADS_PER_BLOCK: u64 = 1024;
const MAX_GRID: [u32; 3] = [i32::MAX as u32, 65535, 65535];
const MAX_STATIC_SHARED: c_uint = 48 << 10;

entry_points! {
    fn cuModuleLoadData(module: *mut usize, image: *const c_void) {
        if module.is_null() || image.is_null() {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let context = driver::current()?;
        // SAFETY: the caller's image; PTX is a NUL-terminated text (a cubin
        // starts with "\x7fELF", which is not PTX and fails below).
        let text = unsafe { CStr::from_ptr(image.cast::<c_char>()) };
        let text = text.to_str().map_err(|_| CUDA_ERROR_INVALID_IMAGE)?;
        let entries = parse_ptx(text)?;
        let loaded = Arc::new(Module {
            handle: driver::new_handle(),
            context: context.handle,
            entries,
        });
        let handle = loaded.handle;
        driver::handles().modules.insert(handle, loaded);
        control::counters().modules.fetch_add(1, Ordering::SeqCst);
        // SAFETY: checked non-NULL; the caller's out parameter.
        unsafe { out(module, handle) }
    }

    fn cuModuleUnload(module: usize) {
        let mut handles = driver::handles();
        handles.modules.remove(&module).ok_or(CUDA_ERROR_INVALID_HANDLE)?;
        handles.functions.retain(|_, f| f.module != module);
        control::counters().modules.fetch_sub(1, Ordering::SeqCst);
        Ok(())
    }

    fn cuModuleGetFunction(function: *mut usize, module: usize, name: *const c_char) {
        if function.is_null() || name.is_null() {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let loaded = driver::handles()
            .modules
            .get(&module)
            .cloned()
            .ok_or(CUDA_ERROR_INVALID_HANDLE)?;
        // SAFETY: the caller's NUL-terminated name.
        let name = unsafe { CStr::from_ptr(name) };
        let entry = loaded
            .entries
            .iter()
            .find(|e| e.name.as_bytes() == name.to_bytes())
            .ok_or(CUDA_ERROR_NOT_FOUND)?;
        let params = host_params(name).filter(|n| *n == entry.params.len() && entry.params.iter().all(|s| *s == 8));
        let Some(params) = params else {
            eprintln!(
                "cuda-standin: cuModuleGetFunction: the stand-in has no host build of {name:?} \
                 with these parameters"
            );
            return Err(CUDA_ERROR_NOT_FOUND);
        };
        let found = Arc::new(Function {
            handle: driver::new_handle(),
            module,
            context: loaded.context,
            entry: CString::from(name),
            params,
        });
        let handle = found.handle;
        driver::handles().functions.insert(handle, found);
        // SAFETY: checked non-NULL; the caller's out parameter.
        unsafe { out(function, handle) }
    }

    fn cuLaunchKernel(
        function: usize,
        grid_x: c_uint, grid_y: c_uint, grid_z: c_uint,
        block_x: c_uint, block_y: c_uint, block_z: c_uint,
        shared_bytes: c_uint,
        stream: usize,
        params: *mut *mut c_void,
        extra: *mut *mut c_void,
    ) {
        let (grid, block) = ([grid_x, grid_y, grid_z], [block_x, block_y, block_z]);
        let threads: u64 = block.iter().map(|b| u64::from(*b)).product();
        let fits = |dims: [u32; 3], max: [u32; 3]| dims.iter().zip(max).all(|(d, m)| (1..=m).contains(d));
        if !fits(grid, MAX_GRID) || !fits(block, MAX_BLOCK) || threads > MAX_THREADS_PER_BLOCK {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        if shared_bytes > MAX_STATIC_SHARED {
            return Err(CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES);
        }
        if !extra.is_null() {
            eprintln!("cuda-standin: cuLaunchKernel: `extra` parameters are not implemented");
            return Err(CUDA_ERROR_NOT_SUPPORTED);
        }
        let context = driver::current()?;
        let found = driver::handles()
            .functions
            .get(&function)
            .cloned()
            .ok_or(CUDA_ERROR_INVALID_HANDLE)?;
        if found.context != context.handle {
            eprintln!("cuda-standin: cuLaunchKernel: the function belongs to another context");
            return Err(CUDA_ERROR_INVALID_HANDLE);
        }
        let stream = stream_in(stream, &context)?;
        if found.params > 0 && params.is_null() {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let mut values = Vec::with_capacity(found.params);
        let mut uses = Vec::new();
        let mut ranges = Vec::new();
        for i in 0..found.params {
            // SAFETY: the caller's array of one pointer per parameter, each
            // to an 8-byte value (all the kernels' parameters are 64-bit).
            let value = unsafe { (*params.add(i)).cast::<u64>().read_unaligned() };
            let (translated, allocation) = memory::translate(value);
            if let Some(allocation) = allocation {
                ranges.push((allocation.start, allocation.len));
                uses.push(allocation);
            }
            values.push(translated);
        }
        stream.enqueue(
            &context,
            Work::Kernel { entry: found.entry.clone(), grid, block, params: values },
            Vec::new(),
            uses,
            ranges,
            None,
        );
        Ok(())
    }
}

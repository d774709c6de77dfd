//! Interprocess memory and events (`cuIpc*`): handles made here are opened
//! in other processes of the same user (see `ipc`).

use std::ffi::c_uint;
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;

use super::out;
use crate::control;
use crate::driver;
use crate::ipc::{self, EventHandle, MemoryHandle, SharedPage, HANDLE_SIZE};
use crate::memory;
use crate::result::*;
use crate::stream::Event;

/// `CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS`: the one flag, and a required one.
const CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS: c_uint = 1;

/// `CUipcMemHandle` and `CUipcEventHandle`: 64 opaque bytes, passed by
/// value.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IpcHandle {
    pub reserved: [u8; HANDLE_SIZE],
}

entry_points! {
    /// The handle of the `cuMemAlloc` allocation that starts at `dptr`.
    fn cuIpcGetMemHandle(handle: *mut IpcHandle, dptr: u64) {
        if handle.is_null() {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        driver::current()?;
        let found = memory::export(dptr as usize)?;
        // SAFETY: checked non-NULL; the caller's out parameter.
        unsafe { out(handle, IpcHandle { reserved: found.encode() }) }
    }

    /// Maps another process's allocation in the current context; the same
    /// pointer again (counted) for a handle this context has open. A
    /// handle of this process is `CUDA_ERROR_INVALID_CONTEXT`; one whose
    /// exporter has ended, or that names another file,
    /// `CUDA_ERROR_MAP_FAILED`.
    fn cuIpcOpenMemHandle_v2(dptr: *mut u64, handle: IpcHandle, flags: c_uint) {
        if dptr.is_null() || flags != CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS {
            eprintln!(
                "cuda-standin: cuIpcOpenMemHandle: flags {flags:#x} (must be \
                 CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) or a NULL pointer"
            );
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let context = driver::current()?;
        let Some(decoded) = MemoryHandle::decode(&handle.reserved) else {
            eprintln!("cuda-standin: cuIpcOpenMemHandle: not a memory handle of the stand-in");
            return Err(CUDA_ERROR_INVALID_VALUE);
        };
        driver::device(decoded.ordinal)?;
        let ptr = memory::import(decoded, context.handle)?;
        // SAFETY: checked non-NULL; the caller's out parameter.
        unsafe { out(dptr, ptr as u64) }
    }

    /// Closes one open of the mapping at `dptr` (the last one unmaps).
    fn cuIpcCloseMemHandle(dptr: u64) {
        let context = driver::current()?;
        memory::close(dptr as usize, context.handle)
    }

    /// The handle of an event created with `CU_EVENT_INTERPROCESS`
    /// (`CUDA_ERROR_INVALID_HANDLE` for any other event).
    fn cuIpcGetEventHandle(handle: *mut IpcHandle, event: usize) {
        if handle.is_null() {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let found = driver::handles()
            .events
            .get(&event)
            .cloned()
            .ok_or(CUDA_ERROR_INVALID_HANDLE)?;
        let page = match found.shared() {
            Some(page) if !found.imported => page,
            _ => {
                eprintln!(
                    "cuda-standin: cuIpcGetEventHandle({event:#x}): the event was not created \
                     with CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING in this process"
                );
                return Err(CUDA_ERROR_INVALID_HANDLE);
            }
        };
        let (dev, ino, _) = ipc::identity(page.file()).ok_or(CUDA_ERROR_MAP_FAILED)?;
        let exported = EventHandle {
            pid: ipc::this_process(),
            fd: page.file().as_raw_fd(),
            dev,
            ino,
        };
        // SAFETY: checked non-NULL; the caller's out parameter.
        unsafe { out(handle, IpcHandle { reserved: exported.encode() }) }
    }

    /// Opens another process's interprocess event in the current context:
    /// an event like one created with `CU_EVENT_DISABLE_TIMING`, destroyed
    /// with `cuEventDestroy`.
    fn cuIpcOpenEventHandle(event: *mut usize, handle: IpcHandle) {
        if event.is_null() {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let context = driver::current()?;
        let Some(decoded) = EventHandle::decode(&handle.reserved) else {
            eprintln!("cuda-standin: cuIpcOpenEventHandle: not an event handle of the stand-in");
            return Err(CUDA_ERROR_INVALID_VALUE);
        };
        if decoded.pid == ipc::this_process() {
            eprintln!(
                "cuda-standin: cuIpcOpenEventHandle: the handle was exported by this process; \
                 IPC handles are opened in other processes"
            );
            return Err(CUDA_ERROR_INVALID_CONTEXT);
        }
        let file = ipc::open_remote(
            decoded.pid,
            decoded.fd,
            (decoded.dev, decoded.ino),
            ipc::page() as u64,
            "cuIpcOpenEventHandle",
        )?;
        let opened = Event::opened(context.handle, SharedPage::map(file, 0)?);
        let created = opened.handle;
        driver::handles().events.insert(created, opened);
        control::counters().events.fetch_add(1, Ordering::SeqCst);
        control::counters().ipc_events.fetch_add(1, Ordering::SeqCst);
        // SAFETY: checked non-NULL; the caller's out parameter.
        unsafe { out(event, created) }
    }
}

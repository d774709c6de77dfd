//! CUDA interprocess handles (`cuIpc*`), for sharing arrays between
//! processes (`crate::share`): device UUIDs, memory handles of whole
//! allocations, and an interprocess event recorded after a producer's
//! `sync_event`. Like the rest of the bottom layer, every driver call runs
//! with its context current and fails with a message naming the call.

use std::collections::BTreeMap;
use std::ffi::c_void;
use std::os::fd::RawFd;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use cudarc::driver::sys;

use super::driver::{self, Context, Failure};
use super::memory::{self, AddressRange};
use super::stream::{CudaStream, RawEvent};
use super::CudaDevice;
use crate::abi::DeviceType;
use crate::error::{Error, Result};

/// `CU_IPC_HANDLE_SIZE`: the bytes of a memory or event handle.
pub(crate) const HANDLE_SIZE: usize = 64;

/// The UUID of GPU `ordinal` (`cuDeviceGetUuid_v2`), which names it in
/// every process, whatever `CUDA_VISIBLE_DEVICES` does to ordinals.
pub(crate) fn device_uuid(ordinal: i32) -> Result<[u8; 16]> {
    let fail = |e: Failure| Error::device(DeviceType::CUDA, ordinal.into(), e);
    let device = driver::call("cuDeviceGet", || {
        cudarc::driver::result::device::get(ordinal)
    })
    .map_err(fail)?;
    let mut uuid = sys::CUuuid { bytes: [0; 16] };
    driver::call("cuDeviceGetUuid_v2", || {
        // SAFETY: an out parameter of the documented type; `device` was
        // just returned by cuDeviceGet.
        unsafe { sys::cuDeviceGetUuid_v2(&mut uuid, device) }.result()
    })
    .map_err(fail)?;
    Ok(uuid.bytes.map(|b| b as u8))
}

/// `GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`, as `nvidia-smi -L` writes
/// a UUID.
pub(crate) fn uuid_text(uuid: &[u8; 16]) -> String {
    let hex: String = uuid.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "GPU-{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    )
}

/// The ordinal, in this process, of the GPU with `uuid`; `None` when no
/// visible GPU has it.
pub(crate) fn ordinal_of(uuid: &[u8; 16]) -> Result<Option<i32>> {
    let count = i32::try_from(super::device_count()?).unwrap_or(i32::MAX);
    for ordinal in 0..count {
        if &device_uuid(ordinal)? == uuid {
            return Ok(Some(ordinal));
        }
    }
    Ok(None)
}

impl CudaDevice {
    /// The allocation (base, size) that holds `addr`
    /// (`cuMemGetAddressRange`): an error naming what the driver said when
    /// it knows none.
    pub(crate) fn allocation_of(&self, addr: usize) -> Result<(usize, usize), String> {
        match memory::address_range(&self.context, addr) {
            AddressRange::Found { base, size } => Ok((base, size)),
            AddressRange::Unknown(code) => Err(format!(
                "cuMemGetAddressRange({addr:#x}) failed: {code}: not memory the CUDA driver \
                 allocated"
            )),
            AddressRange::CannotTell => Err(format!(
                "cuMemGetAddressRange({addr:#x}) could not tell which allocation holds it"
            )),
        }
    }

    /// The IPC handle of the allocation that starts at `base`
    /// (`cuIpcGetMemHandle`).
    pub(crate) fn ipc_memory_handle(&self, base: usize) -> Result<[u8; HANDLE_SIZE], String> {
        let mut handle = sys::CUipcMemHandle {
            reserved: [0; HANDLE_SIZE],
        };
        self.context.run("cuIpcGetMemHandle", || {
            // SAFETY: an out parameter of the documented type; the driver
            // only reads `base` as an address.
            unsafe { sys::cuIpcGetMemHandle(&mut handle, base as sys::CUdeviceptr) }.result()
        })?;
        Ok(handle.reserved.map(|b| b as u8))
    }

    /// An interprocess event recorded, on a stream of ours, after the
    /// producer's `sync_event` (NULL: after nothing), and its handle.
    ///
    /// # Safety
    /// `sync_event` is NULL or points to a live `CUevent`.
    pub(crate) unsafe fn interprocess_event_after(
        &self,
        sync_event: *mut c_void,
    ) -> Result<(InterprocessEvent, [u8; HANDLE_SIZE])> {
        let stream = CudaStream::new(Arc::clone(&self.context)).map_err(|e| self.error(e))?;
        if !sync_event.is_null() {
            // SAFETY: per this function's contract.
            unsafe {
                stream.wait_event(
                    "cuStreamWaitEvent on the shared array's sync_event",
                    RawEvent::at(sync_event),
                )
            }
            .map_err(|e| self.error(e))?;
        }
        let flags = sys::CUevent_flags::CU_EVENT_INTERPROCESS as u32
            | sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32;
        let mut raw: sys::CUevent = std::ptr::null_mut();
        self.context
            .run("cuEventCreate (interprocess)", || {
                // SAFETY: an out parameter of the documented type.
                unsafe { sys::cuEventCreate(&mut raw, flags) }.result()
            })
            .map_err(|e| self.error(e))?;
        let event = InterprocessEvent::owning(Arc::clone(&self.context), raw);
        let on = stream.raw();
        self.context
            .run("cuEventRecord (interprocess)", || {
                // SAFETY: a live event and stream of this context.
                unsafe { sys::cuEventRecord(raw, on) }.result()
            })
            .map_err(|e| self.error(e))?;
        let mut handle = sys::CUipcEventHandle {
            reserved: [0; HANDLE_SIZE],
        };
        self.context
            .run("cuIpcGetEventHandle", || {
                // SAFETY: an out parameter; a live interprocess event.
                unsafe { sys::cuIpcGetEventHandle(&mut handle, raw) }.result()
            })
            .map_err(|e| self.error(e))?;
        // The stream goes (the driver finishes its work first); the event
        // stays with the share.
        Ok((event, handle.reserved.map(|b| b as u8)))
    }

    /// Opens another process's allocation (`cuIpcOpenMemHandle` with
    /// `CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS`): closed when dropped.
    pub(crate) fn open_ipc_memory(&self, handle: &[u8; HANDLE_SIZE]) -> Result<IpcMapping> {
        let handle = sys::CUipcMemHandle {
            reserved: handle.map(|b| b as _),
        };
        let mut ptr: sys::CUdeviceptr = 0;
        self.context
            .run("cuIpcOpenMemHandle", || {
                // SAFETY: an out parameter; the handle is bytes the driver
                // checks.
                unsafe {
                    sys::cuIpcOpenMemHandle_v2(
                        &mut ptr,
                        handle,
                        sys::CUipcMem_flags::CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS as u32,
                    )
                }
                .result()
            })
            .map_err(|e| self.error(e))?;
        // Closed on every path from here on.
        let mut mapping = IpcMapping {
            context: Arc::clone(&self.context),
            ptr: ptr as usize,
            len: 0,
        };
        let (base, len) = self.allocation_of(mapping.ptr).map_err(|e| self.error(e))?;
        if base != mapping.ptr {
            return Err(self.error(format!(
                "cuIpcOpenMemHandle returned {:#x}, inside an allocation at {base:#x}",
                mapping.ptr
            )));
        }
        mapping.len = len;
        Ok(mapping)
    }

    /// Opens another process's interprocess event
    /// (`cuIpcOpenEventHandle`): destroyed when dropped.
    pub(crate) fn open_ipc_event(&self, handle: &[u8; HANDLE_SIZE]) -> Result<InterprocessEvent> {
        let handle = sys::CUipcEventHandle {
            reserved: handle.map(|b| b as _),
        };
        let mut raw: sys::CUevent = std::ptr::null_mut();
        self.context
            .run("cuIpcOpenEventHandle", || {
                // SAFETY: an out parameter; the handle is bytes the driver
                // checks.
                unsafe { sys::cuIpcOpenEventHandle(&mut raw, handle) }.result()
            })
            .map_err(|e| self.error(e))?;
        Ok(InterprocessEvent::owning(Arc::clone(&self.context), raw))
    }
}

/// Another process's allocation mapped here; `cuIpcCloseMemHandle` on
/// drop, with its context current (a failure cannot be reported there).
#[derive(Debug)]
pub(crate) struct IpcMapping {
    context: Arc<Context>,
    ptr: usize,
    len: usize,
}

impl IpcMapping {
    /// The mapping's device pointer and size.
    pub(crate) fn range(&self) -> (*const u8, usize) {
        (self.ptr as *const u8, self.len)
    }

    /// Ties the mapping to the lease on its exporter: once the lease's
    /// connection `lease` ends (the exporting process `pid` ended, and the
    /// driver freed its memory), every copy that touches the mapping fails
    /// with a clear error instead of reading freed memory. `lease` must stay
    /// open until the mapping is dropped.
    pub(crate) fn watch(&self, lease: RawFd, pid: u32) {
        let mut watched = lock_watched();
        watched.insert(
            self.ptr,
            Watched {
                len: self.len,
                lease,
                pid,
            },
        );
        WATCHED.store(watched.len(), Ordering::Release);
    }
}

/// A mapping of another process's memory, and the lease that says whether
/// that process lives.
struct Watched {
    len: usize,
    lease: RawFd,
    pid: u32,
}

/// How many mappings are watched: copies skip the lock when none is.
static WATCHED: AtomicUsize = AtomicUsize::new(0);

fn lock_watched() -> std::sync::MutexGuard<'static, BTreeMap<usize, Watched>> {
    static MAP: Mutex<BTreeMap<usize, Watched>> = Mutex::new(BTreeMap::new());
    // Every update is one insert or remove: a panic leaves no half state.
    MAP.lock().unwrap_or_else(|e| e.into_inner())
}

/// An error naming the exporter when `[ptr, ptr + len)` touches a mapping
/// of another process's memory and that process has ended (its lease's
/// connection is closed): the driver freed that memory.
///
/// A copy queued before the exporter ended may still read it; the check
/// runs when a copy is queued, as early as the host can tell.
pub(crate) fn check_exporter_alive(ptr: *const u8, len: usize) -> Result<(), String> {
    if WATCHED.load(Ordering::Acquire) == 0 || len == 0 {
        return Ok(());
    }
    let address = ptr as usize;
    let watched = lock_watched();
    let Some((&base, mapping)) = watched
        .range(..address.saturating_add(len))
        .next_back()
        .filter(|(&base, m)| address < base + m.len)
    else {
        return Ok(());
    };
    let mut poll = libc::pollfd {
        fd: mapping.lease,
        events: libc::POLLRDHUP,
        revents: 0,
    };
    // SAFETY: one valid pollfd; the lease stays open while it is watched.
    let ready = unsafe { libc::poll(&mut poll, 1, 0) };
    if ready > 0 && poll.revents & (libc::POLLRDHUP | libc::POLLHUP | libc::POLLERR) != 0 {
        return Err(format!(
            "the memory at {address:#x} was shared by process {} (allocation at {base:#x}), \
             which has ended: the CUDA driver freed it, and it can no longer be read or written",
            mapping.pid
        ));
    }
    Ok(())
}

impl Drop for IpcMapping {
    fn drop(&mut self) {
        {
            let mut watched = lock_watched();
            watched.remove(&self.ptr);
            WATCHED.store(watched.len(), Ordering::Release);
        }
        let ptr = self.ptr as sys::CUdeviceptr;
        // SAFETY: the pointer cuIpcOpenMemHandle returned, closed once.
        let _ = self.context.run("cuIpcCloseMemHandle", || unsafe {
            sys::cuIpcCloseMemHandle(ptr).result()
        });
    }
}

/// An interprocess `CUevent` (made here, or opened from another process)
/// in a heap slot whose address is a `sync_event` (`CUevent*`);
/// `cuEventDestroy` on drop, with its context current.
#[derive(Debug)]
pub(crate) struct InterprocessEvent {
    context: Arc<Context>,
    /// From `Box::leak`, freed in `drop`.
    slot: NonNull<sys::CUevent>,
}

// SAFETY: the slot is written once in `owning` and only read afterwards;
// the CUevent is a driver handle usable from any thread.
unsafe impl Send for InterprocessEvent {}
// SAFETY: as above.
unsafe impl Sync for InterprocessEvent {}

impl InterprocessEvent {
    fn owning(context: Arc<Context>, event: sys::CUevent) -> Self {
        InterprocessEvent {
            context,
            slot: NonNull::from(Box::leak(Box::new(event))),
        }
    }

    /// The `sync_event` to give an array (`CUevent*`), valid while `self`
    /// lives.
    pub(crate) fn sync_event(&self) -> *mut c_void {
        self.slot.as_ptr().cast()
    }
}

impl Drop for InterprocessEvent {
    fn drop(&mut self) {
        // SAFETY: the slot is a live box owned by `self`.
        let event = unsafe { *self.slot.as_ptr() };
        // SAFETY: a live event, destroyed once (the driver releases one
        // still pending once it completes).
        let _ = self.context.run("cuEventDestroy", || unsafe {
            sys::cuEventDestroy_v2(event).result()
        });
        // SAFETY: from `Box::leak` in `owning`, freed once, here.
        drop(unsafe { Box::from_raw(self.slot.as_ptr()) });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuids_are_written_as_nvidia_smi_writes_them() {
        let uuid = *b"standin-gpu-\0\0\0\x01";
        assert_eq!(uuid_text(&uuid), "GPU-7374616e-6469-6e2d-6770-752d00000001");
    }
}

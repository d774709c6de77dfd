//! Allocations: device memory the host cannot touch, pinned and managed
//! memory it can, and the registry that answers "which allocation holds this
//! address" for copies, kernels and `cuPointerGetAttributes`.
//!
//! Device memory is an address range reserved `PROT_NONE` (the device
//! pointer: a host read or write faults, as on a discrete GPU) beside a
//! separate read-write mapping (the alias) that only the stand-in's own
//! copies, memsets and kernels reach, by translating the device pointer
//! through the registry. Pinned and managed memory are one read-write
//! mapping. Every mapping ends in a `PROT_NONE` guard page, so a kernel or
//! copy that runs past the end faults instead of corrupting a neighbour.

use std::collections::{BTreeMap, HashMap};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};

use crate::control;
use crate::ipc::{self, Importers, MemoryHandle};
use crate::result::*;

/// Which allocator made an allocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `cuMemAlloc`.
    Device,
    /// `cuMemHostAlloc`.
    Pinned,
    /// `cuMemAllocManaged`.
    Managed,
}

/// `CUmemorytype` values.
pub const CU_MEMORYTYPE_HOST: u32 = 1;
pub const CU_MEMORYTYPE_DEVICE: u32 = 2;

impl Kind {
    /// What `CU_POINTER_ATTRIBUTE_MEMORY_TYPE` reports (managed memory
    /// reports device memory, with `IS_MANAGED` set).
    pub fn memory_type(self) -> u32 {
        match self {
            Kind::Pinned => CU_MEMORYTYPE_HOST,
            Kind::Device | Kind::Managed => CU_MEMORYTYPE_DEVICE,
        }
    }
}

/// One live allocation, or one mapping of another process's allocation
/// (`cuIpcOpenMemHandle`).
pub struct Allocation {
    /// The pointer handed out.
    pub start: usize,
    /// The size asked for.
    pub len: usize,
    pub kind: Kind,
    pub ordinal: i32,
    /// The context it was allocated in.
    pub context: usize,
    /// Where the stand-in reads and writes the bytes (`start` itself for
    /// host-accessible memory).
    alias: usize,
    mapped: usize,
    /// Operations queued and not yet run that read or write it.
    pub pending: AtomicU64,
    /// Device memory's memory file (which the alias maps), with one more
    /// page after the allocation's pages: its importers' table. `None`
    /// for host-accessible memory, and for device memory made when the
    /// process had no descriptor left (it cannot be exported).
    pub file: Option<OwnedFd>,
    /// Set for a mapping opened with `cuIpcOpenMemHandle`.
    pub imported: Option<Imported>,
}

/// What a mapping of another process's allocation keeps.
pub struct Imported {
    pub handle: MemoryHandle,
    /// `cuIpcOpenMemHandle` calls of this handle in this context not yet
    /// closed: a handle already open returns the same pointer.
    refs: Mutex<u64>,
    importers: Importers,
}

use crate::ipc::page;

/// Maps `len` bytes plus a guard page, `PROT_NONE`, then opens the first
/// `len` bytes read-write when `writable`.
fn map(len: usize, writable: bool) -> Result<usize> {
    let total = len.checked_add(page()).ok_or(CUDA_ERROR_OUT_OF_MEMORY)?;
    // SAFETY: a fresh anonymous private mapping at an address the kernel
    // chooses; nothing else is affected.
    let ptr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            total,
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if ptr == libc::MAP_FAILED {
        return Err(CUDA_ERROR_OUT_OF_MEMORY);
    }
    // SAFETY: the first `len` bytes of the mapping just made.
    if writable && unsafe { libc::mprotect(ptr, len, libc::PROT_READ | libc::PROT_WRITE) } != 0 {
        // SAFETY: the mapping just made, unmapped once.
        unsafe { libc::munmap(ptr, total) };
        return Err(CUDA_ERROR_OUT_OF_MEMORY);
    }
    Ok(ptr as usize)
}

/// As [`map`], with the first `len` bytes mapped read-write from `file`
/// (shared): device memory's alias.
fn map_file(len: usize, file: &OwnedFd) -> Result<usize> {
    let ptr = map(len, false)?;
    // SAFETY: replaces the first `len` bytes of the reservation just made
    // with a shared mapping of a file of at least `len` bytes.
    let mapped = unsafe {
        libc::mmap(
            ptr as *mut libc::c_void,
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED | libc::MAP_FIXED,
            file.as_raw_fd(),
            0,
        )
    };
    if mapped == libc::MAP_FAILED {
        unmap(ptr, len);
        return Err(CUDA_ERROR_OUT_OF_MEMORY);
    }
    Ok(ptr)
}

fn unmap(ptr: usize, len: usize) {
    // SAFETY: a mapping made by `map` with this length, unmapped once. A
    // failure would leave address space mapped; nothing to report to.
    unsafe { libc::munmap(ptr as *mut libc::c_void, len + page()) };
}

fn registry() -> &'static RwLock<BTreeMap<usize, Arc<Allocation>>> {
    static REGISTRY: OnceLock<RwLock<BTreeMap<usize, Arc<Allocation>>>> = OnceLock::new();
    REGISTRY.get_or_init(Default::default)
}

/// Allocates `len > 0` bytes of `kind` for `context` (device `ordinal`).
pub fn allocate(len: usize, kind: Kind, context: usize, ordinal: i32) -> Result<usize> {
    if len == 0 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let mapped = len
        .div_ceil(page())
        .checked_mul(page())
        .ok_or(CUDA_ERROR_OUT_OF_MEMORY)?;
    // The importers' page follows the allocation's pages.
    let file = (kind == Kind::Device)
        .then(|| ipc::memory_file("cuda-standin device memory", mapped + page()))
        .flatten();
    let start = map(mapped, kind != Kind::Device)?;
    let alias = if kind == Kind::Device {
        let alias = match &file {
            Some(file) => map_file(mapped, file),
            None => map(mapped, true),
        };
        match alias {
            Ok(alias) => alias,
            Err(e) => {
                unmap(start, mapped);
                return Err(e);
            }
        }
    } else {
        start
    };
    let allocation = Arc::new(Allocation {
        start,
        len,
        kind,
        ordinal,
        context,
        alias,
        mapped,
        pending: AtomicU64::new(0),
        file,
        imported: None,
    });
    registry()
        .write()
        .unwrap_or_else(|e| e.into_inner())
        .insert(start, allocation);
    let counters = control::counters();
    counters.allocations.fetch_add(1, Ordering::SeqCst);
    counters
        .allocated_bytes
        .fetch_add(len as u64, Ordering::SeqCst);
    Ok(start)
}

/// The allocation holding `addr`, if any.
pub fn find(addr: usize) -> Option<Arc<Allocation>> {
    let registry = registry().read().unwrap_or_else(|e| e.into_inner());
    let (_, found) = registry.range(..=addr).next_back()?;
    (addr < found.start + found.len).then(|| Arc::clone(found))
}

/// Frees the allocation starting at `ptr`, which must have been made by an
/// allocator of `kinds`. Unknown or interior pointers, or another
/// allocator's memory: `CUDA_ERROR_INVALID_VALUE`. Memory that queued work
/// still uses: a fatal violation.
pub fn free(ptr: usize, kinds: &[Kind], entry: &str) -> Result<()> {
    let mut registry = registry().write().unwrap_or_else(|e| e.into_inner());
    let Some(found) = registry.get(&ptr) else {
        let inside = registry
            .range(..=ptr)
            .next_back()
            .filter(|(_, a)| ptr < a.start + a.len)
            .map(|(_, a)| a.start);
        match inside {
            Some(start) => eprintln!(
                "cuda-standin: {entry}({ptr:#x}): an interior pointer of the allocation at \
                 {start:#x}"
            ),
            None => eprintln!("cuda-standin: {entry}({ptr:#x}): not an allocation"),
        }
        return Err(CUDA_ERROR_INVALID_VALUE);
    };
    if found.imported.is_some() {
        eprintln!(
            "cuda-standin: {entry}({ptr:#x}): a mapping opened with cuIpcOpenMemHandle, closed \
             with cuIpcCloseMemHandle"
        );
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    if !kinds.contains(&found.kind) {
        eprintln!(
            "cuda-standin: {entry}({ptr:#x}): {:?} memory, not freed by this call",
            found.kind
        );
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let pending = found.pending.load(Ordering::SeqCst);
    if pending > 0 {
        control::violation(
            format!(
                "{entry}({ptr:#x}): {} bytes of {:?} memory freed while {pending} queued \
                 operation(s) still read or write it",
                found.len, found.kind
            ),
            true,
        );
    }
    if let Some(file) = &found.file {
        let others: Vec<_> = ipc::live_importers(file, found.mapped)
            .into_iter()
            .filter(|(pid, _)| *pid != ipc::this_process())
            .collect();
        if !others.is_empty() {
            control::violation(
                format!(
                    "{entry}({ptr:#x}): {} bytes of exported device memory freed while other \
                     processes still map it (pid, mappings): {others:?} (\"Calling cuMemFree on \
                     an exported memory region before calling cuIpcCloseMemHandle in the \
                     importing context will result in undefined behavior\")",
                    found.len
                ),
                false,
            );
        }
    }
    let found = registry.remove(&ptr).ok_or(CUDA_ERROR_INVALID_VALUE)?;
    drop(registry);
    if found.kind != Kind::Pinned {
        if let Ok(context) = crate::driver::context(found.context) {
            context
                .used_memory
                .fetch_sub(found.len as u64, Ordering::SeqCst);
        }
    }
    unmap(found.start, found.mapped);
    if found.alias != found.start {
        unmap(found.alias, found.mapped);
    }
    let counters = control::counters();
    counters.allocations.fetch_sub(1, Ordering::SeqCst);
    counters
        .allocated_bytes
        .fetch_sub(found.len as u64, Ordering::SeqCst);
    Ok(())
}

/// A range of memory an operation reads or writes: the host address the
/// stand-in uses, and the allocation it lies in (none for pageable host
/// memory).
pub struct Region {
    pub host: usize,
    pub allocation: Option<Arc<Allocation>>,
}

/// Resolves `len` bytes at `addr`: inside one allocation (past its end is
/// `CUDA_ERROR_INVALID_VALUE`), or pageable host memory when no allocation
/// holds `addr`, if `pageable_ok`.
pub fn region(addr: usize, len: usize, pageable_ok: bool, what: &str) -> Result<Region> {
    if addr == 0 {
        eprintln!("cuda-standin: {what}: NULL pointer");
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    match find(addr) {
        Some(allocation) => {
            let offset = addr - allocation.start;
            if len > allocation.len - offset {
                eprintln!(
                    "cuda-standin: {what}: {len} bytes at {addr:#x} run past the end of the \
                     {}-byte allocation at {:#x}",
                    allocation.len, allocation.start
                );
                return Err(CUDA_ERROR_INVALID_VALUE);
            }
            Ok(Region {
                host: allocation.alias + offset,
                allocation: Some(allocation),
            })
        }
        None if pageable_ok => Ok(Region {
            host: addr,
            allocation: None,
        }),
        None => {
            eprintln!("cuda-standin: {what}: {addr:#x} is not CUDA memory");
            Err(CUDA_ERROR_INVALID_VALUE)
        }
    }
}

/// A kernel parameter as the host code must see it: a device pointer into
/// an allocation becomes its alias; anything else is passed as it is.
pub fn translate(value: u64) -> (u64, Option<Arc<Allocation>>) {
    match usize::try_from(value).ok().and_then(find) {
        Some(allocation) => {
            let host = allocation.alias + (value as usize - allocation.start);
            (host as u64, Some(allocation))
        }
        None => (value, None),
    }
}

/// `cuIpcGetMemHandle`: the handle of the device allocation that starts
/// at `ptr` (the base the driver documents; an interior pointer, host
/// memory, or a mapping of another process's memory is
/// `CUDA_ERROR_INVALID_VALUE`).
pub fn export(ptr: usize) -> Result<MemoryHandle> {
    let registry = registry().read().unwrap_or_else(|e| e.into_inner());
    let Some(found) = registry.get(&ptr) else {
        eprintln!(
            "cuda-standin: cuIpcGetMemHandle({ptr:#x}): not the base of an allocation (the \
             driver takes \"a pointer to the base of an existing device memory allocation\")"
        );
        return Err(CUDA_ERROR_INVALID_VALUE);
    };
    if found.kind != Kind::Device || found.imported.is_some() {
        eprintln!(
            "cuda-standin: cuIpcGetMemHandle({ptr:#x}): {} memory has no IPC handle (only \
             cuMemAlloc memory does)",
            if found.imported.is_some() {
                "another process's".to_string()
            } else {
                format!("{:?}", found.kind)
            }
        );
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let Some(file) = &found.file else {
        eprintln!(
            "cuda-standin: cuIpcGetMemHandle({ptr:#x}): the allocation has no memory file (the \
             process had no descriptor left when it was made)"
        );
        return Err(CUDA_ERROR_MAP_FAILED);
    };
    let (dev, ino, _) = ipc::identity(file).ok_or(CUDA_ERROR_MAP_FAILED)?;
    Ok(MemoryHandle {
        pid: ipc::this_process(),
        fd: file.as_raw_fd(),
        ordinal: found.ordinal,
        len: found.len as u64,
        dev,
        ino,
    })
}

/// The mappings of other processes' memory open in this one:
/// (device, inode, context) → the device pointer.
type Opened = Mutex<HashMap<(u64, u64, usize), usize>>;

fn opened() -> &'static Opened {
    static OPENED: OnceLock<Opened> = OnceLock::new();
    OPENED.get_or_init(Default::default)
}

/// `cuIpcOpenMemHandle` in `context`: maps another process's allocation
/// (the same pointer again, counted, when this context has it open).
pub fn import(handle: MemoryHandle, context: usize) -> Result<usize> {
    if handle.pid == ipc::this_process() {
        eprintln!(
            "cuda-standin: cuIpcOpenMemHandle: the handle was exported by this process; IPC \
             handles are opened in other processes"
        );
        return Err(CUDA_ERROR_INVALID_CONTEXT);
    }
    let len = usize::try_from(handle.len)
        .ok()
        .filter(|len| *len > 0)
        .ok_or(CUDA_ERROR_INVALID_VALUE)?;
    let mut opened = crate::driver::lock(opened());
    let key = (handle.dev, handle.ino, context);
    if let Some(&start) = opened.get(&key) {
        let found = find(start).ok_or(CUDA_ERROR_INVALID_VALUE)?;
        let imported = found.imported.as_ref().ok_or(CUDA_ERROR_INVALID_VALUE)?;
        *crate::driver::lock(&imported.refs) += 1;
        return Ok(start);
    }
    let mapped = len
        .div_ceil(page())
        .checked_mul(page())
        .ok_or(CUDA_ERROR_INVALID_VALUE)?;
    let file = ipc::open_remote(
        handle.pid,
        handle.fd,
        (handle.dev, handle.ino),
        (mapped + page()) as u64,
        "cuIpcOpenMemHandle",
    )?;
    let importers = Importers(ipc::SharedPage::map(
        file.try_clone().map_err(|_| CUDA_ERROR_MAP_FAILED)?,
        mapped,
    )?);
    let start = map(mapped, false)?;
    let alias = match map_file(mapped, &file) {
        Ok(alias) => alias,
        Err(e) => {
            unmap(start, mapped);
            return Err(e);
        }
    };
    importers.add();
    let allocation = Arc::new(Allocation {
        start,
        len,
        kind: Kind::Device,
        ordinal: handle.ordinal,
        context,
        alias,
        mapped,
        pending: AtomicU64::new(0),
        // The mappings keep the file; no descriptor is held.
        file: None,
        imported: Some(Imported {
            handle,
            refs: Mutex::new(1),
            importers,
        }),
    });
    registry()
        .write()
        .unwrap_or_else(|e| e.into_inner())
        .insert(start, allocation);
    opened.insert(key, start);
    control::counters()
        .ipc_mappings
        .fetch_add(1, Ordering::SeqCst);
    Ok(start)
}

/// `cuIpcCloseMemHandle` in `context`: one close per open; the last one
/// unmaps. A pointer `cuIpcOpenMemHandle` did not return is
/// `CUDA_ERROR_INVALID_VALUE`; one of another context
/// `CUDA_ERROR_INVALID_CONTEXT`; unmapping memory that queued work still
/// uses is a fatal violation, as for `cuMemFree`.
pub fn close(ptr: usize, context: usize) -> Result<()> {
    let mut opened = crate::driver::lock(opened());
    let mut registry = registry().write().unwrap_or_else(|e| e.into_inner());
    let Some(found) = registry.get(&ptr).filter(|a| a.imported.is_some()) else {
        eprintln!(
            "cuda-standin: cuIpcCloseMemHandle({ptr:#x}): not a pointer cuIpcOpenMemHandle \
             returned (or closed already)"
        );
        return Err(CUDA_ERROR_INVALID_VALUE);
    };
    if found.context != context {
        eprintln!(
            "cuda-standin: cuIpcCloseMemHandle({ptr:#x}): opened in another context than the \
             current one"
        );
        return Err(CUDA_ERROR_INVALID_CONTEXT);
    }
    let Some(imported) = &found.imported else {
        return Err(CUDA_ERROR_INVALID_VALUE);
    };
    {
        let mut refs = crate::driver::lock(&imported.refs);
        *refs -= 1;
        if *refs > 0 {
            return Ok(());
        }
    }
    let pending = found.pending.load(Ordering::SeqCst);
    if pending > 0 {
        control::violation(
            format!(
                "cuIpcCloseMemHandle({ptr:#x}): {} bytes of another process's memory unmapped \
                 while {pending} queued operation(s) still read or write it",
                found.len
            ),
            true,
        );
    }
    let found = registry.remove(&ptr).ok_or(CUDA_ERROR_INVALID_VALUE)?;
    drop(registry);
    if let Some(imported) = &found.imported {
        opened.remove(&(imported.handle.dev, imported.handle.ino, context));
        imported.importers.remove();
    }
    unmap(found.start, found.mapped);
    unmap(found.alias, found.mapped);
    control::counters()
        .ipc_mappings
        .fetch_sub(1, Ordering::SeqCst);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_memory_has_a_writable_alias_and_a_guard_page() {
        let ptr = allocate(100, Kind::Device, 0, 0).unwrap();
        let found = find(ptr + 99).unwrap();
        assert_eq!(
            (found.start, found.len, found.kind),
            (ptr, 100, Kind::Device)
        );
        assert!(find(ptr + 100).is_none(), "past the end");
        let region = region(ptr + 10, 90, false, "test").unwrap();
        assert_ne!(region.host, ptr + 10, "an alias, not the device view");
        // SAFETY: the alias is read-write for the allocation's 100 bytes.
        unsafe { *(region.host as *mut u8) = 7 };
        assert_eq!(
            super::region(ptr + 10, 91, false, "test").err(),
            Some(CUDA_ERROR_INVALID_VALUE)
        );
        drop(found);
        assert_eq!(
            free(ptr + 1, &[Kind::Device], "t"),
            Err(CUDA_ERROR_INVALID_VALUE)
        );
        assert_eq!(
            free(ptr, &[Kind::Pinned], "t"),
            Err(CUDA_ERROR_INVALID_VALUE)
        );
        free(ptr, &[Kind::Device], "t").unwrap();
        assert_eq!(
            free(ptr, &[Kind::Device], "t"),
            Err(CUDA_ERROR_INVALID_VALUE)
        );
        assert!(find(ptr).is_none());
    }

    #[test]
    fn pinned_memory_is_its_own_alias_and_pageable_memory_is_not_cuda_memory() {
        let ptr = allocate(10, Kind::Pinned, 0, 1).unwrap();
        assert_eq!(region(ptr, 10, false, "t").unwrap().host, ptr);
        let host = [0u8; 4];
        let addr = host.as_ptr() as usize;
        assert!(region(addr, 4, true, "t").unwrap().allocation.is_none());
        assert!(region(addr, 4, false, "t").is_err());
        assert_eq!(
            allocate(0, Kind::Pinned, 0, 0),
            Err(CUDA_ERROR_INVALID_VALUE)
        );
        free(ptr, &[Kind::Pinned], "t").unwrap();
    }
}

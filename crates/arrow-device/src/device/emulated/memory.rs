//! Emulated device memory: allocations, and the process-wide registry of live
//! allocations that every copy checks its device pointers against.
//!
//! Strict mode backs an allocation by a memfd mapped twice: a `PROT_NONE`
//! view, whose address is the device pointer handed out, so that a host
//! dereference faults (SIGSEGV) as it would for real device memory; and a
//! read-write alias that only the device's own copy routines reach, by looking
//! the device pointer up here. Both views share the same pages, so nothing
//! ever flips page protections and no thread can race another one's
//! `mprotect`. A strict allocation keeps its memfd open, so that it can be
//! shared with another process as it is, as a CUDA allocation can through
//! its IPC handle (`crate::share`); at most a quarter of the descriptor
//! limit is spent so ([`kept_files_budget`]), and allocations beyond it are
//! shared through one copy.
//! Non-strict mode uses one anonymous read-write mapping, so the device
//! pointer is its own alias and host reads go unnoticed.
//!
//! Device pointers of all emulated devices live in one address space (the
//! process's), which is what lets a copy between devices 0 and 1 resolve both
//! ends, and lets a host pointer be checked for not being device memory.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{OnceLock, RwLock, RwLockReadGuard};

use crate::abi::DeviceType;
use crate::device::cpu::ALIGNMENT;
use crate::device::DeviceBuffer;
use crate::error::os_error;
use crate::error::{Error, Result};

/// What a delayed copy's destination holds until the copy has run.
pub(super) const POISON: u8 = 0xDB;

/// A live allocation in the registry, keyed by its device pointer.
struct Entry {
    /// Tells this allocation apart from a later one at the same address.
    id: u64,
    device_id: i64,
    /// The length asked for; copies may not touch the page padding after it.
    len: usize,
    mapping: Mapping,
}

/// The registry, one for all emulated devices: device pointer → allocation.
///
/// Copies hold the read lock while they touch an alias; freeing takes the
/// write lock to remove the entry before unmapping, so an alias is never used
/// after its pages are gone.
fn registry() -> &'static RwLock<BTreeMap<usize, Entry>> {
    static REGISTRY: OnceLock<RwLock<BTreeMap<usize, Entry>>> = OnceLock::new();
    REGISTRY.get_or_init(Default::default)
}

/// The two views of an allocation, unmapped on drop.
struct Mapping {
    device: usize,
    /// Equal to `device` in non-strict mode (one mapping).
    alias: usize,
    mapped_len: usize,
    /// The memory file behind a strict allocation, kept (within
    /// [`kept_files_budget`]) so that the allocation can be shared with
    /// another process as it is.
    #[cfg(target_os = "linux")]
    file: Option<KeptFile>,
}

/// A strict allocation's memory file, counted against
/// [`kept_files_budget`] while open.
#[cfg(target_os = "linux")]
struct KeptFile(std::os::fd::OwnedFd);

/// How many memory files strict allocations keep open now.
#[cfg(target_os = "linux")]
static KEPT_FILES: AtomicU64 = AtomicU64::new(0);

/// How many memory files strict allocations keep open at most: a quarter
/// of the process's descriptor limit (`RLIMIT_NOFILE`), so that a process
/// with many live allocations never runs out of descriptors for them.
/// Allocations made beyond it close their file once mapped, and a share of
/// them copies once into allocations that keep theirs.
#[cfg(target_os = "linux")]
pub(super) fn kept_files_budget() -> u64 {
    static BUDGET: OnceLock<u64> = OnceLock::new();
    *BUDGET.get_or_init(|| {
        // SAFETY: a zeroed rlimit is a valid out-parameter.
        let mut limit: libc::rlimit = unsafe { std::mem::zeroed() };
        // SAFETY: a valid resource and out-parameter.
        let known = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } == 0;
        if known && limit.rlim_cur != libc::RLIM_INFINITY {
            limit.rlim_cur / 4
        } else {
            256
        }
    })
}

#[cfg(target_os = "linux")]
impl KeptFile {
    /// Keeps `fd` if the budget allows; `None` (and `fd` closed) if not.
    fn keep(fd: std::os::fd::OwnedFd) -> Option<KeptFile> {
        let kept = KEPT_FILES.fetch_add(1, Ordering::Relaxed);
        if kept < kept_files_budget() {
            Some(KeptFile(fd))
        } else {
            KEPT_FILES.fetch_sub(1, Ordering::Relaxed);
            None
        }
    }
}

#[cfg(target_os = "linux")]
impl Drop for KeptFile {
    fn drop(&mut self) {
        KEPT_FILES.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // munmap of a range we mapped cannot fail short of a kernel bug, and a
        // destructor has nobody to report to: the result is ignored.
        // SAFETY: both ranges were mapped by `map_strict`/`map_plain` with this
        // length, are unmapped once (here), and their registry entry is gone,
        // so nothing can reach them any more.
        unsafe {
            libc::munmap(self.device as *mut libc::c_void, self.mapped_len);
            if self.alias != self.device {
                libc::munmap(self.alias as *mut libc::c_void, self.mapped_len);
            }
        }
    }
}

/// The owner inside a [`DeviceBuffer`]: frees the allocation when dropped.
struct Allocation {
    device_ptr: usize,
    id: u64,
}

impl Drop for Allocation {
    fn drop(&mut self) {
        let entry = {
            let mut map = registry().write().unwrap_or_else(|e| e.into_inner());
            match map.get(&self.device_ptr) {
                Some(entry) if entry.id == self.id => map.remove(&self.device_ptr),
                _ => None,
            }
        };
        // Unmap outside the lock: the entry is out of the registry already.
        drop(entry);
    }
}

fn page_size() -> usize {
    static PAGE: OnceLock<usize> = OnceLock::new();
    *PAGE.get_or_init(|| {
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        usize::try_from(page)
            .ok()
            .filter(|p| p.is_power_of_two())
            .unwrap_or(4096)
    })
}

/// Maps `mapped_len` bytes of `fd` (or anonymous memory when `fd` is -1).
fn map(fd: libc::c_int, mapped_len: usize, prot: libc::c_int) -> Result<usize, String> {
    let flags = if fd < 0 {
        libc::MAP_PRIVATE | libc::MAP_ANONYMOUS
    } else {
        libc::MAP_SHARED
    };
    // SAFETY: a fresh mapping at an address of the kernel's choosing aliases
    // no Rust object; `fd` is -1 or a valid descriptor of `mapped_len` bytes.
    let ptr = unsafe { libc::mmap(std::ptr::null_mut(), mapped_len, prot, flags, fd, 0) };
    if ptr == libc::MAP_FAILED {
        Err(os_error("mmap"))
    } else {
        Ok(ptr as usize)
    }
}

/// A memfd mapped `PROT_NONE` (the device pointer) and read-write (the alias).
#[cfg(target_os = "linux")]
fn map_strict(device_id: i64, mapped_len: usize) -> Result<Mapping, String> {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

    // The name shows in /proc/self/maps, which is how leaks are found.
    let name = std::ffi::CString::new(format!("arrow-device-emulated-{device_id}"))
        .map_err(|e| format!("memfd name: {e}"))?;
    // SAFETY: `name` is a NUL-terminated string that outlives the call.
    let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(os_error("memfd_create"));
    }
    // SAFETY: `fd` was just returned by memfd_create and nothing else owns it;
    // the OwnedFd closes it on every path out of this function.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let size = libc::off_t::try_from(mapped_len)
        .map_err(|_| format!("{mapped_len} bytes exceed off_t"))?;
    // SAFETY: `fd` is a valid memfd.
    if unsafe { libc::ftruncate(fd.as_raw_fd(), size) } != 0 {
        return Err(os_error("ftruncate"));
    }
    map_views(fd, mapped_len)
}

/// `fd` mapped twice, `PROT_NONE` (the device pointer) and read-write (the
/// alias), for `mapped_len` bytes; the mapping keeps `fd`.
#[cfg(target_os = "linux")]
fn map_views(fd: std::os::fd::OwnedFd, mapped_len: usize) -> Result<Mapping, String> {
    use std::os::fd::AsRawFd;

    let device = map(fd.as_raw_fd(), mapped_len, libc::PROT_NONE)?;
    let mut mapping = Mapping {
        device,
        alias: device,
        mapped_len,
        file: None,
    };
    mapping.alias = map(
        fd.as_raw_fd(),
        mapped_len,
        libc::PROT_READ | libc::PROT_WRITE,
    )?;
    mapping.file = KeptFile::keep(fd);
    Ok(mapping)
}

#[cfg(not(target_os = "linux"))]
fn map_strict(_device_id: i64, _mapped_len: usize) -> Result<Mapping, String> {
    Err("strict mode needs memfd_create (Linux); use strict=0".into())
}

/// Allocates `len` bytes of emulated memory of device `device_id`.
pub(super) fn allocate(device_id: i64, len: usize, strict: bool) -> Result<DeviceBuffer> {
    let fail = |message: String| Error::device(DeviceType::EXT_DEV, device_id, message);
    if len == 0 {
        // Never dereferenced and never registered: every zero-length copy is a
        // no-op, and a host read of address 64 faults like device memory.
        // SAFETY: zero bytes: an aligned pointer valid for nothing.
        return Ok(unsafe { DeviceBuffer::new(ALIGNMENT as *mut u8, 0, Box::new(())) });
    }
    let mapped_len = len
        .checked_next_multiple_of(page_size())
        .ok_or_else(|| fail(format!("cannot allocate {len} bytes: size overflows")))?;
    let mapping = if strict {
        map_strict(device_id, mapped_len)
    } else {
        map(-1, mapped_len, libc::PROT_READ | libc::PROT_WRITE).map(|device| Mapping {
            device,
            alias: device,
            mapped_len,
            #[cfg(target_os = "linux")]
            file: None,
        })
    }
    .map_err(|e| fail(format!("cannot allocate {len} bytes: {e}")))?;
    Ok(register(device_id, len, mapping))
}

/// Enters `mapping` (of at least `len` bytes) in the registry, as the
/// allocation the returned buffer owns.
fn register(device_id: i64, len: usize, mapping: Mapping) -> DeviceBuffer {
    static NEXT_ID: AtomicU64 = AtomicU64::new(1);
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    let device_ptr = mapping.device;
    let entry = Entry {
        id,
        device_id,
        len,
        mapping,
    };
    registry()
        .write()
        .unwrap_or_else(|e| e.into_inner())
        .insert(device_ptr, entry);
    // SAFETY: the mapping holds at least `len` bytes and is unmapped when
    // its `Allocation` drops.
    unsafe {
        DeviceBuffer::new(
            device_ptr as *mut u8,
            len,
            Box::new(Allocation { device_ptr, id }),
        )
    }
}

/// The live strict allocation of emulated device `device_id` that holds
/// device pointer `ptr`: its base pointer, its length, and a duplicate of
/// its memory file, for another process to map.
#[cfg(target_os = "linux")]
pub(super) fn export_file(
    device_id: i64,
    ptr: usize,
) -> Result<(usize, usize, std::os::fd::OwnedFd), String> {
    let memory = lock();
    let (base, len, file) = memory.kept_file(device_id, ptr)?;
    let file = file
        .try_clone()
        .map_err(|e| format!("dup of an allocation's memory file: {e}"))?;
    Ok((base, len, file))
}

/// Whether the allocation that holds device pointer `ptr` keeps a memory
/// file to share (no descriptor is duplicated to tell).
#[cfg(target_os = "linux")]
pub(super) fn keeps_file(device_id: i64, ptr: usize) -> bool {
    lock().kept_file(device_id, ptr).is_ok()
}

/// Maps `len` bytes of memory file `fd` (another process's allocation) as
/// a strict allocation of emulated device `device_id`: a device pointer
/// the host cannot dereference, reached by copies through its alias.
#[cfg(target_os = "linux")]
pub(super) fn import_file(
    device_id: i64,
    fd: std::os::fd::OwnedFd,
    len: usize,
) -> Result<DeviceBuffer, String> {
    use std::os::fd::AsRawFd;

    if len == 0 {
        return Err("a shared allocation of 0 bytes".into());
    }
    // SAFETY: a zeroed stat is a valid out-parameter.
    let mut stat: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: a valid fd and out-parameter.
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut stat) } != 0 {
        return Err(os_error("fstat"));
    }
    let mapped_len = len
        .checked_next_multiple_of(page_size())
        .ok_or_else(|| format!("an allocation of {len} bytes overflows"))?;
    if stat.st_mode & libc::S_IFMT != libc::S_IFREG
        || u64::try_from(stat.st_size).ok() != Some(mapped_len as u64)
    {
        return Err(format!(
            "the shared memory file has {} bytes, an allocation of {len} bytes maps {mapped_len}",
            stat.st_size
        ));
    }
    let mapping = map_views(fd, mapped_len)?;
    Ok(register(device_id, len, mapping))
}

/// Where a validated device range lies: enough to find its alias again when
/// the copy runs, and to notice if the allocation was freed in between.
#[derive(Debug, Clone, Copy)]
pub(super) struct DeviceRange {
    base: usize,
    id: u64,
    offset: usize,
}

impl DeviceRange {
    /// The unique id of the allocation (never reused, unlike addresses).
    pub(super) fn allocation_id(&self) -> u64 {
        self.id
    }

    /// The offset of the range inside its allocation.
    pub(super) fn offset(&self) -> usize {
        self.offset
    }

    /// The device pointer the range starts at.
    pub(super) fn address(&self) -> usize {
        self.base + self.offset
    }
}

/// The registry, read-locked: allocations cannot be freed while it lives.
pub(super) struct Memory(RwLockReadGuard<'static, BTreeMap<usize, Entry>>);

/// Locks the registry for reading.
pub(super) fn lock() -> Memory {
    Memory(registry().read().unwrap_or_else(|e| e.into_inner()))
}

impl Memory {
    /// Checks that `[ptr, ptr + len)` (`len > 0`) lies inside one live
    /// allocation of emulated device `device_id`; `what` names the operand in
    /// the error (e.g. "copy_to_host: source").
    pub(super) fn device_range(
        &self,
        device_id: i64,
        ptr: usize,
        len: usize,
        what: &str,
    ) -> Result<DeviceRange> {
        let fail = |detail: String| {
            Error::device(
                DeviceType::EXT_DEV,
                device_id,
                format!("{what}: device pointer {ptr:#x} (length {len}) {detail}"),
            )
        };
        let Some((&base, entry)) = self
            .0
            .range(..=ptr)
            .next_back()
            .filter(|(&b, e)| ptr - b < e.len)
        else {
            return Err(fail(format!(
                "is not inside a live allocation of emulated device {device_id}"
            )));
        };
        if entry.device_id != device_id {
            return Err(fail(format!(
                "belongs to emulated device {}, not {device_id}",
                entry.device_id
            )));
        }
        let offset = ptr - base;
        if len > entry.len - offset {
            return Err(fail(format!(
                "runs {} bytes past the end of its allocation ({} bytes at {base:#x}, range starts at offset {offset})",
                len - (entry.len - offset),
                entry.len
            )));
        }
        Ok(DeviceRange {
            base,
            id: entry.id,
            offset,
        })
    }

    /// Checks that host range `[ptr, ptr + len)` (`len > 0`) is not NULL and
    /// is not emulated device memory, which the host must never touch.
    pub(super) fn host_range(
        &self,
        device_id: i64,
        ptr: usize,
        len: usize,
        what: &str,
    ) -> Result<()> {
        let fail = |detail: String| {
            Error::device(
                DeviceType::EXT_DEV,
                device_id,
                format!("{what}: host pointer {ptr:#x} (length {len}) {detail}"),
            )
        };
        if ptr == 0 {
            return Err(fail("is NULL".into()));
        }
        let end = ptr
            .checked_add(len)
            .ok_or_else(|| fail("wraps around the address space".into()))?;
        // Mappings are disjoint, so only the last one starting before `end`
        // can overlap the range.
        if let Some((&base, entry)) = self.0.range(..end).next_back() {
            if base + entry.mapping.mapped_len > ptr {
                return Err(fail(format!(
                    "overlaps memory of emulated device {} ({} bytes at {base:#x}); \
                     device memory is reached only through the device's copy API",
                    entry.device_id, entry.len
                )));
            }
        }
        Ok(())
    }

    /// The allocation of emulated device `device_id` that holds device
    /// pointer `ptr`, and the memory file it keeps for sharing: its base
    /// pointer, its length and the file.
    #[cfg(target_os = "linux")]
    fn kept_file(
        &self,
        device_id: i64,
        ptr: usize,
    ) -> Result<(usize, usize, &std::os::fd::OwnedFd), String> {
        let range = self
            .device_range(device_id, ptr, 1, "share")
            .map_err(|e| e.to_string())?;
        let entry = &self.0[&range.base];
        let file = entry.mapping.file.as_ref().ok_or_else(|| {
            format!(
                "the allocation at {:#x} keeps no memory file to share (it is not strict, or \
                 was made while {} others kept theirs)",
                range.base,
                kept_files_budget()
            )
        })?;
        Ok((range.base, entry.len, &file.0))
    }

    /// The alias of the first `len` bytes of `range`, or `None` if its
    /// allocation has been freed since the range was validated.
    pub(super) fn alias(&self, range: DeviceRange, len: usize) -> Option<*mut u8> {
        let entry = self.0.get(&range.base).filter(|e| e.id == range.id)?;
        if range.offset.checked_add(len)? > entry.len {
            return None;
        }
        Some((entry.mapping.alias + range.offset) as *mut u8)
    }
}

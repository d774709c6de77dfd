//! Interprocess memory and events (`cuIpc*`), between processes of one
//! user on one machine, with no GPU.
//!
//! Device memory is a memory file (`memfd`) that the allocation's alias
//! maps shared (see `memory`). A memory handle names the file by the
//! exporter's pid and descriptor number, and by its identity (device and
//! inode); the opener opens `/proc/<pid>/fd/<n>`, checks that it is the
//! same file (a dead exporter, a reused pid or a forged handle is an
//! error, never another file), and maps it with the same strictness: a
//! `PROT_NONE` device pointer and a read-write alias of its own.
//!
//! Past the allocation's pages, the file has one more page: the importers'
//! table, one slot per importing process (its pid and how many mappings it
//! holds). The exporter reads it when it frees the allocation: freeing
//! memory that a live process still maps is a violation (the driver's
//! "undefined behavior"), which a missing lease would cause.
//!
//! An interprocess event's state (latest record, latest completion, which
//! process recorded, whether the exporter destroyed it) lives in a
//! one-page memory file shared the same way, so a record that runs on the
//! exporter's stream completes the event in every opener.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::result::*;

/// `CU_IPC_HANDLE_SIZE`.
pub const HANDLE_SIZE: usize = 64;

const MEMORY_MAGIC: &[u8; 4] = b"CSIM";
const EVENT_MAGIC: &[u8; 4] = b"CSIE";

pub fn page() -> usize {
    // SAFETY: sysconf has no preconditions.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(size).unwrap_or(4096)
}

/// A new memory file of `len` bytes (close-on-exec); `None` when the
/// process cannot make one (out of descriptors, say).
pub fn memory_file(name: &str, len: usize) -> Option<OwnedFd> {
    let name = std::ffi::CString::new(name).ok()?;
    // SAFETY: a NUL-terminated name; the flags are memfd_create's.
    let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return None;
    }
    // SAFETY: a descriptor memfd_create just returned, owned from here on.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let len = libc::off_t::try_from(len).ok()?;
    // SAFETY: a memory file of ours.
    (unsafe { libc::ftruncate(fd.as_raw_fd(), len) } == 0).then_some(fd)
}

/// A file's identity and size: (device, inode, size).
pub fn identity(fd: &OwnedFd) -> Option<(u64, u64, u64)> {
    // SAFETY: a zeroed stat is a valid out parameter.
    let mut stat: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: a live descriptor and a stat to fill.
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut stat) } != 0 {
        return None;
    }
    Some((stat.st_dev, stat.st_ino, u64::try_from(stat.st_size).ok()?))
}

/// Whether process `pid` is alive (or exists, at least: a zombie counts).
pub fn alive(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return false;
    };
    // SAFETY: signal 0 checks existence and permission only.
    let sent = unsafe { libc::kill(pid, 0) } == 0;
    sent || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

pub fn this_process() -> u32 {
    std::process::id()
}

/// Opens descriptor `fd` of process `pid` (`/proc/<pid>/fd/<fd>`), which
/// must be the file with identity `(dev, ino)` and at least `len` bytes.
/// A process that has ended, or a descriptor that names another file:
/// `CUDA_ERROR_MAP_FAILED`; `what` names the call in the trace.
pub fn open_remote(
    pid: u32,
    fd: i32,
    (dev, ino): (u64, u64),
    len: u64,
    what: &str,
) -> Result<OwnedFd> {
    let path = format!("/proc/{pid}/fd/{fd}");
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .map_err(|e| {
            eprintln!(
                "cuda-standin: {what}: cannot open the exporter's memory ({path}: {e}); has \
                 process {pid} ended?"
            );
            CUDA_ERROR_MAP_FAILED
        })?;
    let file = OwnedFd::from(file);
    match identity(&file) {
        Some((d, i, size)) if (d, i) == (dev, ino) && size >= len => Ok(file),
        found => {
            eprintln!(
                "cuda-standin: {what}: {path} is not the memory the handle names (found \
                 {found:?}, expected device {dev} inode {ino}, at least {len} bytes)"
            );
            Err(CUDA_ERROR_MAP_FAILED)
        }
    }
}

/// What a `CUipcMemHandle` holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryHandle {
    pub pid: u32,
    pub fd: i32,
    pub ordinal: i32,
    /// The allocation's size.
    pub len: u64,
    pub dev: u64,
    pub ino: u64,
}

/// The little-endian integer of `N` bytes at `at`.
fn le<const N: usize>(bytes: &[u8; HANDLE_SIZE], at: usize) -> [u8; N] {
    bytes[at..at + N].try_into().unwrap_or([0; N])
}

/// Both handles: a magic, then the file they name in the exporting process
/// (its pid and descriptor at 4..12, the file's device and inode at
/// 24..40), then zeros from 40 on; bytes 12..24 are the handle's own.
fn encode_file(magic: &[u8; 4], (pid, fd, dev, ino): (u32, i32, u64, u64)) -> [u8; HANDLE_SIZE] {
    let mut bytes = [0u8; HANDLE_SIZE];
    bytes[..4].copy_from_slice(magic);
    bytes[4..8].copy_from_slice(&pid.to_le_bytes());
    bytes[8..12].copy_from_slice(&fd.to_le_bytes());
    bytes[24..32].copy_from_slice(&dev.to_le_bytes());
    bytes[32..40].copy_from_slice(&ino.to_le_bytes());
    bytes
}

/// The file a handle with `magic` names; `None` for other bytes.
fn decode_file(magic: &[u8; 4], bytes: &[u8; HANDLE_SIZE]) -> Option<(u32, i32, u64, u64)> {
    (&bytes[..4] == magic && bytes[40..].iter().all(|b| *b == 0)).then(|| {
        (
            u32::from_le_bytes(le(bytes, 4)),
            i32::from_le_bytes(le(bytes, 8)),
            u64::from_le_bytes(le(bytes, 24)),
            u64::from_le_bytes(le(bytes, 32)),
        )
    })
}

impl MemoryHandle {
    pub fn encode(&self) -> [u8; HANDLE_SIZE] {
        let mut bytes = encode_file(MEMORY_MAGIC, (self.pid, self.fd, self.dev, self.ino));
        bytes[12..16].copy_from_slice(&self.ordinal.to_le_bytes());
        bytes[16..24].copy_from_slice(&self.len.to_le_bytes());
        bytes
    }

    /// `None` for bytes that are not a memory handle of the stand-in.
    pub fn decode(bytes: &[u8; HANDLE_SIZE]) -> Option<Self> {
        let (pid, fd, dev, ino) = decode_file(MEMORY_MAGIC, bytes)?;
        Some(MemoryHandle {
            pid,
            fd,
            ordinal: i32::from_le_bytes(le(bytes, 12)),
            len: u64::from_le_bytes(le(bytes, 16)),
            dev,
            ino,
        })
    }
}

/// What a `CUipcEventHandle` holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EventHandle {
    pub pid: u32,
    pub fd: i32,
    pub dev: u64,
    pub ino: u64,
}

impl EventHandle {
    pub fn encode(&self) -> [u8; HANDLE_SIZE] {
        encode_file(EVENT_MAGIC, (self.pid, self.fd, self.dev, self.ino))
    }

    /// `None` for bytes that are not an event handle of the stand-in.
    pub fn decode(bytes: &[u8; HANDLE_SIZE]) -> Option<Self> {
        let (pid, fd, dev, ino) = decode_file(EVENT_MAGIC, bytes)?;
        bytes[12..24]
            .iter()
            .all(|b| *b == 0)
            .then_some(EventHandle { pid, fd, dev, ino })
    }
}

/// One page of a memory file, mapped shared: what two processes read and
/// write with atomics.
pub struct SharedPage {
    file: OwnedFd,
    ptr: NonNull<AtomicU64>,
}

// SAFETY: the page is only reached through atomics; the file is a
// descriptor.
unsafe impl Send for SharedPage {}
// SAFETY: as above.
unsafe impl Sync for SharedPage {}

/// How many `u64` slots one page holds.
pub fn slots() -> usize {
    page() / 8
}

impl SharedPage {
    /// Maps the page at byte `offset` (a multiple of the page size) of
    /// `file`.
    pub fn map(file: OwnedFd, offset: usize) -> Result<Self> {
        let offset = libc::off_t::try_from(offset).map_err(|_| CUDA_ERROR_INVALID_VALUE)?;
        // SAFETY: a shared mapping of one page of a file we hold, at an
        // address the kernel chooses.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                page(),
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                offset,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(CUDA_ERROR_MAP_FAILED);
        }
        let ptr = NonNull::new(ptr.cast::<AtomicU64>()).ok_or(CUDA_ERROR_MAP_FAILED)?;
        Ok(SharedPage { file, ptr })
    }

    /// A new one-page memory file, mapped.
    pub fn create(name: &str) -> Result<Self> {
        let file = memory_file(name, page()).ok_or(CUDA_ERROR_OUT_OF_MEMORY)?;
        SharedPage::map(file, 0)
    }

    pub fn file(&self) -> &OwnedFd {
        &self.file
    }

    /// Slot `i` (< [`slots`]).
    pub fn slot(&self, i: usize) -> &AtomicU64 {
        assert!(i < slots(), "slot {i} of a page of {}", slots());
        // SAFETY: inside the mapped page (checked), aligned (a page start
        // plus a multiple of 8), live while `self` is; every access is
        // atomic.
        unsafe { &*self.ptr.as_ptr().add(i) }
    }
}

impl Drop for SharedPage {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `map`, unmapped once.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), page()) };
    }
}

/// The slots of an event's page.
pub mod event_slot {
    /// The latest record's generation.
    pub const RECORDED: usize = 0;
    /// The latest completed generation.
    pub const COMPLETED: usize = 1;
    /// The pid of the process that made the latest record.
    pub const RECORDER: usize = 2;
    /// Non-zero once the exporter destroyed the event.
    pub const DESTROYED: usize = 3;
}

/// The importers' table of an exported allocation: slot = pid << 32 |
/// mappings held.
pub struct Importers(pub SharedPage);

impl Importers {
    /// Counts one more mapping of this process.
    pub fn add(&self) {
        let pid = u64::from(this_process());
        for i in 0..slots() {
            let slot = self.0.slot(i);
            let mut now = slot.load(Ordering::SeqCst);
            loop {
                let next = if now == 0 {
                    pid << 32 | 1
                } else if now >> 32 == pid {
                    now + 1
                } else {
                    break;
                };
                match slot.compare_exchange(now, next, Ordering::SeqCst, Ordering::SeqCst) {
                    Ok(_) => return,
                    Err(found) => now = found,
                }
            }
        }
        eprintln!("cuda-standin: more importing processes than the table holds; not counted");
    }

    /// Counts one mapping of this process less.
    pub fn remove(&self) {
        let pid = u64::from(this_process());
        for i in 0..slots() {
            let slot = self.0.slot(i);
            let now = slot.load(Ordering::SeqCst);
            if now >> 32 == pid && now & 0xffff_ffff > 0 {
                let next = if now & 0xffff_ffff == 1 { 0 } else { now - 1 };
                // Only this process changes its own slot.
                slot.store(next, Ordering::SeqCst);
                return;
            }
        }
    }
}

/// Whether process `pid` maps the file with inode `ino` now (its
/// `/proc/<pid>/maps`). A process that is exiting has unmapped its memory
/// before its descriptors (and so its leases) close: it maps nothing, as
/// the driver's cleanup of a dead process's mappings does.
pub fn maps_file(pid: u32, ino: u64) -> bool {
    let Ok(maps) = std::fs::read_to_string(format!("/proc/{pid}/maps")) else {
        return false;
    };
    let ino = ino.to_string();
    maps.lines()
        .any(|line| line.split_whitespace().nth(4) == Some(ino.as_str()))
}

/// The processes that still map the allocation whose file is `file` (its
/// importers' page at `offset`), and how many mappings each holds.
pub fn live_importers(file: &OwnedFd, offset: usize) -> Vec<(u32, u64)> {
    let Some((_, ino, _)) = identity(file) else {
        return Vec::new();
    };
    let Ok(dup) = file.try_clone() else {
        return Vec::new();
    };
    let Ok(page) = SharedPage::map(dup, offset) else {
        return Vec::new();
    };
    (0..slots())
        .map(|i| page.slot(i).load(Ordering::SeqCst))
        .filter(|slot| *slot != 0)
        .map(|slot| ((slot >> 32) as u32, slot & 0xffff_ffff))
        .filter(|(pid, count)| *count > 0 && maps_file(*pid, ino))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_round_trip_and_other_bytes_are_refused() {
        let memory = MemoryHandle {
            pid: 7,
            fd: 9,
            ordinal: 1,
            len: 100,
            dev: 3,
            ino: 42,
        };
        assert_eq!(MemoryHandle::decode(&memory.encode()), Some(memory));
        let mut bytes = memory.encode();
        bytes[63] = 1;
        assert_eq!(MemoryHandle::decode(&bytes), None);
        let event = EventHandle {
            pid: 7,
            fd: 9,
            dev: 3,
            ino: 42,
        };
        assert_eq!(EventHandle::decode(&event.encode()), Some(event));
        assert_eq!(EventHandle::decode(&memory.encode()), None);
        assert_eq!(MemoryHandle::decode(&event.encode()), None);
    }

    #[test]
    fn a_remote_file_must_be_the_one_named() {
        let file = memory_file("t", 4096).unwrap();
        let (dev, ino, _) = identity(&file).unwrap();
        let fd = file.as_raw_fd();
        let pid = this_process();
        let opened = open_remote(pid, fd, (dev, ino), 4096, "t").unwrap();
        assert_eq!(identity(&opened).map(|i| (i.0, i.1)), Some((dev, ino)));
        assert_eq!(
            open_remote(pid, fd, (dev, ino + 1), 4096, "t").err(),
            Some(CUDA_ERROR_MAP_FAILED)
        );
        assert_eq!(
            open_remote(pid, fd, (dev, ino), 8192, "t").err(),
            Some(CUDA_ERROR_MAP_FAILED),
            "too small"
        );
        assert_eq!(
            open_remote(pid, 1 << 20, (dev, ino), 1, "t").err(),
            Some(CUDA_ERROR_MAP_FAILED)
        );
    }

    #[test]
    fn importers_are_counted_per_process() {
        let file = memory_file("t", 2 * page()).unwrap();
        let importers = Importers(SharedPage::map(file.try_clone().unwrap(), page()).unwrap());
        assert!(live_importers(&file, page()).is_empty());
        importers.add();
        importers.add();
        assert_eq!(live_importers(&file, page()), [(this_process(), 2)]);
        importers.remove();
        importers.remove();
        assert!(live_importers(&file, page()).is_empty());
    }
}

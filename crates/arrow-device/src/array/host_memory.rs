//! Host memory that a copy from a device writes: zero-filled, 64-byte
//! aligned, and with its pages already faulted in, so that the copy runs at
//! the speed of a copy into memory that was touched before.
//!
//! [`HostAllocation::zeroed`] allocates; the device driver writes through
//! [`HostAllocation::as_mut_ptr`] while nothing else can see the memory; then
//! [`HostAllocation::into_buffer`] (or `Buffer::from`) freezes it into an
//! immutable, shareable [`Buffer`].
//!
//! # Why prefault
//!
//! Measured on the project's GPU machine (H100, 16 cores, Linux 6.18 in a
//! Firecracker VM, transparent huge pages in `madvise` mode), copying 1 GiB
//! GPU → host with `cuMemcpyDtoHAsync` into:
//!
//! | destination                                              | ms  | GB/s |
//! |----------------------------------------------------------|-----|------|
//! | pageable memory touched before                           | 104 | 10.3 |
//! | fresh `malloc` / fresh `mmap` (faults inside the copy)   | 686 / 656 | 1.6 |
//! | `calloc`                                                 | 721 | 1.5  |
//! | `mmap(MAP_POPULATE)`                                     | 399 | 2.7  |
//! | fresh `mmap` + `MADV_HUGEPAGE`                           | 313 | 3.4  |
//! | fresh `mmap`, 16 threads write one byte per 4 KiB page   | 130 | 8.3  |
//! | fresh `mmap` + `MADV_HUGEPAGE`, 8 threads prefault       | 111 | 9.7  |
//!
//! The driver copies to pageable memory through its own pinned staging
//! buffer with one CPU thread, so every first touch of a destination page is
//! a page fault taken serially inside the copy: the faults, not the bus, set
//! its speed. `MutableBuffer::from_len_zeroed` moves them, but does not
//! remove them: a 64-byte alignment is more than `calloc` promises, so the
//! allocation is zeroed with a `memset` that takes the faults, on one
//! thread. Faulting in beforehand, in parallel, in 2 MiB huge pages where
//! the kernel grants them (512 times fewer faults), is what works.
//!
//! Allocate, `cuMemcpyDtoHAsync` + synchronize, drop; medians of 7 on the
//! same machine, ms (GB/s of the whole):
//!
//! | bytes   | `from_len_zeroed` | [`HostAllocation`] | copy into touched memory |
//! |---------|-------------------|--------------------|--------------------------|
//! | 31 MiB  | 5.5 (5.9)         | 5.6 (the heap too) | 2.3                      |
//! | 32 MiB  | 20.5 (1.6)        | 7.3 (4.6)          | 2.6                      |
//! | 64 MiB  | 41.2 (1.6)        | 11.2 (6.0)         | 4.8                      |
//! | 256 MiB | 181 (1.5)         | 28.5 (9.4)         | 26.5                     |
//! | 1 GiB   | 665 (1.6)         | 106 (10.2)         | 104                      |
//!
//! Of the 106 ms for 1 GiB, the prefault is 31, the copy 71 (15 GB/s: huge
//! pages spare the copy TLB misses) and the unmap 2.5 (`free` of the heap
//! buffer: 32).
//!
//! # The numbers
//!
//! * `MAPPED_FROM` (32 MiB): glibc's `malloc` serves every request of at
//!   least 32 MiB (its largest `mmap` threshold) with a fresh mapping, so at
//!   and above it the heap path faults on every copy (20.5 ms for 32 MiB).
//!   Below it, once a block of that size has been freed, glibc serves such
//!   requests from its heap, whose pages stay resident: repeated copies of
//!   small tables already get touched memory (5.5 ms for 31 MiB), which a
//!   fresh mapping would give back to the kernel every time (with `memcpy`
//!   standing in for the driver, a prefaulted 31 MiB mapping took 12.7 ms
//!   against 7.4 from the heap).
//! * `BYTES_PER_THREAD` (32 MiB): starting a thread costs tens of
//!   microseconds; faulting in 32 MiB costs about 5 ms, so every thread has
//!   two orders of magnitude more work than its start-up. A 32 MiB
//!   allocation is faulted in by the calling thread alone.
//! * `MAX_THREADS` (8): the faults of one process share its memory map and
//!   the kernel's page allocator. Prefaulting 1 GiB took 178 ms on 1
//!   thread, 95 on 2, 43 on 4, 30 on 8: the copy (71 ms) then dominates,
//!   and more threads would take cores from the caller's other work.

use arrow_buffer::{Buffer, MutableBuffer};
use arrow_schema::ArrowError;

use crate::error::{Error, Result};

/// Zero-filled host memory, not yet shared, that a copy is about to write.
pub(crate) struct HostAllocation {
    memory: Memory,
}

enum Memory {
    /// arrow-rs' own allocation, as every `MutableBuffer` makes.
    Heap(MutableBuffer),
    /// An anonymous mapping whose pages are resident.
    #[cfg(target_os = "linux")]
    Mapped(mapped::Mapping),
}

impl HostAllocation {
    /// `len` zero bytes of host memory, 64-byte aligned, with every page
    /// faulted in when `len` is large enough for faults to matter (Linux
    /// only; elsewhere, and below that size, arrow-rs' zeroed allocation).
    ///
    /// Fails with [`ArrowError::MemoryError`] (errno `ENOMEM`) when the
    /// memory cannot be had: a copy of a large table to the host is the
    /// likeliest allocation of a process to fail, and the caller can then
    /// free something or copy less, which an abort would not let it do.
    pub(crate) fn zeroed(len: usize) -> Result<Self> {
        #[cfg(target_os = "linux")]
        if len >= mapped::MAPPED_FROM {
            let mapping = mapped::Mapping::prefaulted(len)?;
            return Ok(HostAllocation {
                memory: Memory::Mapped(mapping),
            });
        }
        let heap =
            MutableBuffer::try_from_len_zeroed(len).map_err(|e| out_of_host_memory(len, e))?;
        Ok(HostAllocation {
            memory: Memory::Heap(heap),
        })
    }

    /// The start of the memory, for the device to write into before
    /// [`into_buffer`](Self::into_buffer). Writes through it must have
    /// completed (the copies synchronized) before then: the buffer is
    /// immutable from that point on, and readable from every thread.
    pub(crate) fn as_mut_ptr(&mut self) -> *mut u8 {
        match &mut self.memory {
            Memory::Heap(heap) => heap.as_mut_ptr(),
            #[cfg(target_os = "linux")]
            Memory::Mapped(mapping) => mapping.as_mut_ptr(),
        }
    }

    /// Freezes the memory into a [`Buffer`] of the allocated length; the
    /// memory is released when the last clone or slice of it is dropped.
    /// Pointers taken from [`as_mut_ptr`](Self::as_mut_ptr) stay valid for
    /// reading as long as that buffer lives (neither kind moves its memory).
    pub(crate) fn into_buffer(self) -> Buffer {
        match self.memory {
            Memory::Heap(heap) => Buffer::from(heap),
            #[cfg(target_os = "linux")]
            Memory::Mapped(mapping) => mapping.into_buffer(),
        }
    }

    /// Whether the memory is a prefaulted mapping rather than the heap.
    #[cfg(test)]
    fn is_mapped(&self) -> bool {
        !matches!(self.memory, Memory::Heap(_))
    }
}

impl From<HostAllocation> for Buffer {
    fn from(allocation: HostAllocation) -> Self {
        allocation.into_buffer()
    }
}

/// The error for `len` bytes of host memory that could not be allocated.
fn out_of_host_memory(len: usize, cause: impl std::fmt::Display) -> Error {
    Error::Arrow(ArrowError::MemoryError(format!(
        "cannot allocate {len} bytes of host memory for a copy from a device: {cause}"
    )))
}

/// Anonymous mappings, prefaulted in parallel (Linux only: the huge page
/// advice and the measurements behind the numbers are Linux's).
#[cfg(target_os = "linux")]
mod mapped {
    use std::io;
    use std::num::NonZeroUsize;
    use std::ptr::{self, NonNull};
    use std::sync::{Arc, Mutex, PoisonError};
    use std::thread;

    use arrow_buffer::Buffer;

    use super::out_of_host_memory;
    use crate::error::Result;

    /// Allocations of at least this many bytes are mapped and prefaulted.
    pub(super) const MAPPED_FROM: usize = 32 << 20;
    /// Each prefault thread is started for at least this many bytes.
    pub(super) const BYTES_PER_THREAD: usize = 32 << 20;
    /// At most this many threads (the caller included) prefault.
    pub(super) const MAX_THREADS: usize = 8;
    /// The unit of work a prefault thread takes at a time: a multiple of the
    /// 2 MiB huge page, so that no huge page is faulted by two threads at
    /// once, and small enough (128 units per GiB) that threads which start
    /// late still find work.
    const CHUNK: usize = 8 << 20;

    /// An anonymous private mapping of `len` bytes, unmapped on drop.
    pub(super) struct Mapping {
        ptr: NonNull<u8>,
        len: usize,
    }

    // SAFETY: a `Mapping` is the sole owner of its pages, like a `Vec<u8>`
    // of its allocation: it hands out no access through `&Mapping`, and the
    // `Buffer` that owns it reads the memory through `&[u8]` only, which any
    // thread may do at the same time. A mapping belongs to the process, not
    // to the thread that made it, so `munmap` on drop may run on any thread.
    unsafe impl Send for Mapping {}
    // SAFETY: as for `Send`: `&Mapping` gives no access at all.
    unsafe impl Sync for Mapping {}

    #[cfg(test)]
    thread_local! {
        /// Mappings made and not yet unmapped by this thread (tests drop
        /// their buffers on the thread that made them).
        pub(super) static LIVE: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    }

    impl Mapping {
        /// Maps `len` (> 0) zero bytes and faults every page of them in.
        pub(super) fn prefaulted(len: usize) -> Result<Mapping> {
            // SAFETY: a new anonymous private mapping with no address hint
            // and no file: the kernel picks a range that aliases nothing.
            let raw = unsafe {
                libc::mmap(
                    ptr::null_mut(),
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                )
            };
            if raw == libc::MAP_FAILED {
                return Err(out_of_host_memory(len, io::Error::last_os_error()));
            }
            let Some(ptr) = NonNull::new(raw.cast::<u8>()) else {
                // Only with `vm.mmap_min_addr = 0` could a mapping start at
                // address 0, which a `Buffer` cannot hold.
                // SAFETY: `raw`/`len` is the mapping just made, unused.
                unsafe { libc::munmap(raw, len) };
                return Err(out_of_host_memory(len, "the kernel mapped it at address 0"));
            };
            // From here on, dropping `mapping` unmaps, on every path.
            let mapping = Mapping { ptr, len };
            #[cfg(test)]
            LIVE.with(|live| live.set(live.get() + 1));

            // Advice only: it fails (EINVAL) on kernels built without
            // transparent huge pages, and does nothing in THP `never` mode;
            // either way the memory is the same, only faulted in 4 KiB pages.
            // SAFETY: `raw`/`len` is exactly the mapping made above.
            let _ = unsafe { libc::madvise(raw, len, libc::MADV_HUGEPAGE) };

            // SAFETY: the mapping is readable and writable, its `len` bytes
            // are initialized (the kernel fills anonymous mappings with
            // zeros), and nothing else refers to it; the slice is gone when
            // `prefault` returns.
            let bytes = unsafe { std::slice::from_raw_parts_mut(ptr.as_ptr(), len) };
            let parallelism = thread::available_parallelism().map_or(1, NonZeroUsize::get);
            prefault(bytes, page_size(), threads_for(len, parallelism));
            Ok(mapping)
        }

        pub(super) fn as_mut_ptr(&mut self) -> *mut u8 {
            self.ptr.as_ptr()
        }

        pub(super) fn into_buffer(self) -> Buffer {
            let (ptr, len) = (self.ptr, self.len);
            // SAFETY: `ptr` addresses `len` initialized bytes (zeros, and
            // whatever the caller wrote before this point) that stay mapped
            // until `self`, moved into the owner `Arc`, is dropped, which the
            // buffer does after its last clone and slice are gone; mapped
            // memory is page-aligned, beyond the 64 bytes arrow-rs expects.
            unsafe { Buffer::from_custom_allocation(ptr, len, Arc::new(self)) }
        }
    }

    impl Drop for Mapping {
        fn drop(&mut self) {
            // SAFETY: `ptr`/`len` is a mapping this `Mapping` made and owns,
            // unmapped only here; no buffer refers to it any more (the
            // buffer's owner `Arc` is what is being dropped).
            let rc = unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
            // munmap fails only for a range that is not page-aligned (EINVAL),
            // which a range mmap returned is; a destructor has no one to tell.
            debug_assert_eq!(rc, 0, "munmap of {} bytes failed", self.len);
            #[cfg(test)]
            LIVE.with(|live| live.set(live.get().saturating_sub(1)));
        }
    }

    /// How many threads (the caller included) prefault `len` bytes on a
    /// machine that gives this process `parallelism` cores.
    pub(super) fn threads_for(len: usize, parallelism: usize) -> usize {
        parallelism
            .min(MAX_THREADS)
            .min(len / BYTES_PER_THREAD)
            .max(1)
    }

    /// The page size, or 4 KiB when the system does not say: every page
    /// size in use is a multiple of 4 KiB, so touching every 4 KiB still
    /// touches every page.
    fn page_size() -> usize {
        // SAFETY: sysconf has no preconditions.
        let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        usize::try_from(size)
            .ok()
            .filter(|&s| s > 0)
            .unwrap_or(4096)
    }

    /// Faults in every page of `bytes` (which starts on a page boundary)
    /// with `threads` threads, the calling one included. A thread that
    /// cannot be started leaves its work to the others (at the least the
    /// caller): the memory is correct either way, only faulted in later.
    pub(super) fn prefault(bytes: &mut [u8], page: usize, threads: usize) {
        // Chunks start at multiples of the chunk size from the page-aligned
        // start, so each starts on a page boundary and `touch_pages` reaches
        // every page of it.
        let chunk = CHUNK.next_multiple_of(page);
        let work = Mutex::new(bytes.chunks_mut(chunk));
        // `touch_pages` cannot panic, so a poisoned lock still holds a
        // consistent iterator.
        let next = || work.lock().unwrap_or_else(PoisonError::into_inner).next();
        let worker = || {
            while let Some(chunk) = next() {
                touch_pages(chunk, page);
            }
        };
        thread::scope(|scope| {
            for _ in 1..threads {
                let started = thread::Builder::new()
                    .name("arrow-device prefault".into())
                    .spawn_scoped(scope, worker);
                if started.is_err() {
                    break;
                }
            }
            worker();
        });
    }

    /// Writes one zero byte into each page of `bytes`, which starts on a
    /// page boundary. A write, not a read: reading a never-written private
    /// page maps the kernel's shared zero page, and the copy's first write
    /// would fault again.
    fn touch_pages(bytes: &mut [u8], page: usize) {
        for page in bytes.chunks_mut(page) {
            if let Some(first) = page.first_mut() {
                // SAFETY: `first` is a valid, exclusive `&mut u8`. Volatile
                // because the store is for its effect on the page tables: the
                // byte is already zero, and the store must not be elided.
                unsafe { ptr::write_volatile(first, 0) };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every byte of `bytes` is zero (compared in blocks: a byte loop over
    /// tens of MiB is slow in debug builds).
    fn all_zero(bytes: &[u8]) -> bool {
        const ZEROS: [u8; 4096] = [0; 4096];
        bytes.chunks(ZEROS.len()).all(|c| c == &ZEROS[..c.len()])
    }

    #[cfg(target_os = "linux")]
    const THRESHOLD: usize = mapped::MAPPED_FROM;
    #[cfg(not(target_os = "linux"))]
    const THRESHOLD: usize = 32 << 20;

    #[test]
    fn sizes_around_the_threshold_are_zeroed_aligned_and_of_the_asked_length() {
        let page = 4096;
        for len in [
            0,
            1,
            THRESHOLD - 1,
            THRESHOLD,
            THRESHOLD + 1,
            THRESHOLD + 3 * page + 123,
        ] {
            let allocation = HostAllocation::zeroed(len).unwrap();
            let mapped = allocation.is_mapped();
            assert_eq!(
                mapped,
                cfg!(target_os = "linux") && len >= THRESHOLD,
                "{len}"
            );
            let buffer = allocation.into_buffer();
            assert_eq!(buffer.len(), len);
            assert_eq!(buffer.as_ptr() as usize % 64, 0, "{len}");
            assert!(all_zero(&buffer), "{len} bytes not all zero");
            if len > 0 {
                let (first, middle, last) = (buffer[0], buffer[len / 2], buffer[len - 1]);
                assert_eq!((first, middle, last), (0, 0, 0), "{len}");
            }
        }
    }

    #[test]
    fn writes_through_the_pointer_are_in_the_buffer() {
        for len in [1000, THRESHOLD + 4097] {
            let mut allocation = HostAllocation::zeroed(len).unwrap();
            let ptr = allocation.as_mut_ptr();
            // SAFETY: offsets 0, len / 2 and len - 1 lie inside the `len`
            // bytes, which nothing else references before `into_buffer`.
            unsafe {
                ptr.write(1);
                ptr.add(len / 2).write(2);
                ptr.add(len - 1).write(3);
            }
            let buffer = Buffer::from(allocation);
            assert_eq!((buffer[0], buffer[len / 2], buffer[len - 1]), (1, 2, 3));
            assert_eq!(buffer.iter().map(|&b| b as usize).sum::<usize>(), 6);
        }
    }

    /// The `Anonymous:` kilobytes of the mapping that contains `addr`, from
    /// `/proc/self/smaps`: pages a write made private. Pages that were only
    /// read map the kernel's shared zero page and are not counted here
    /// (`mincore` counts them as resident, so it cannot tell the two apart).
    #[cfg(target_os = "linux")]
    fn anonymous_kib_around(addr: usize) -> Option<usize> {
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let mut inside = false;
        for line in smaps.lines() {
            let range = line
                .split_once(' ')
                .and_then(|(range, _)| range.split_once('-'));
            if let Some((start, end)) = range {
                let start = usize::from_str_radix(start, 16);
                let end = usize::from_str_radix(end, 16);
                if let (Ok(start), Ok(end)) = (start, end) {
                    inside = start <= addr && addr < end;
                    continue;
                }
            }
            if let Some(kib) = line.strip_prefix("Anonymous:").filter(|_| inside) {
                return kib.trim().trim_end_matches("kB").trim().parse().ok();
            }
        }
        None
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn every_page_is_written_in_before_the_first_access() {
        let len = 2 * mapped::BYTES_PER_THREAD + 12345;
        let mut allocation = HostAllocation::zeroed(len).unwrap();
        assert!(allocation.is_mapped());
        let addr = allocation.as_mut_ptr() as usize;
        // The kernel may merge the mapping with a neighbour, which only adds
        // to the count: at least every page of ours must be there.
        let kib = anonymous_kib_around(addr).unwrap();
        assert!(
            kib >= len / 1024,
            "{kib} KiB private, expected >= {}",
            len / 1024
        );
        drop(allocation);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn the_calling_thread_alone_touches_every_page() {
        // Prefaulting with one thread is what happens when no thread starts:
        // the caller's worker alone drains every chunk.
        let len = 3 * 4096 * 1024 + 100;
        let mut memory = vec![7u8; len];
        mapped::prefault(&mut memory, 4096, 1);
        let written = memory.chunks(4096).filter(|page| page[0] == 0).count();
        assert_eq!(written, len.div_ceil(4096));
        assert_eq!(memory[1], 7, "only one byte per page is written");
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn thread_count_grows_with_size_up_to_cores_and_eight() {
        let mib = 1 << 20;
        assert_eq!(mapped::threads_for(32 * mib, 16), 1);
        assert_eq!(mapped::threads_for(64 * mib - 1, 16), 1);
        assert_eq!(mapped::threads_for(64 * mib, 16), 2);
        assert_eq!(mapped::threads_for(1024 * mib, 16), 8);
        assert_eq!(mapped::threads_for(1024 * mib, 2), 2);
        assert_eq!(mapped::threads_for(1024 * mib, 1), 1);
        assert_eq!(mapped::threads_for(0, 0), 1);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn memory_is_unmapped_when_the_last_clone_or_slice_goes() {
        let live = || mapped::LIVE.with(|live| live.get());
        assert_eq!(live(), 0);
        let buffer = HostAllocation::zeroed(THRESHOLD).unwrap().into_buffer();
        assert_eq!(live(), 1);
        let clone = buffer.clone();
        let slice = buffer.slice(THRESHOLD - 10);
        drop(buffer);
        drop(clone);
        assert_eq!(live(), 1, "a slice keeps the mapping");
        assert_eq!(slice.as_slice(), &[0u8; 10]);
        drop(slice);
        assert_eq!(live(), 0);

        // Many in a row: each is unmapped before the next is made.
        for _ in 0..20 {
            let buffer = HostAllocation::zeroed(THRESHOLD + 1).unwrap().into_buffer();
            assert_eq!((live(), buffer.len()), (1, THRESHOLD + 1));
        }
        assert_eq!(live(), 0);
    }

    #[test]
    fn an_impossible_size_is_a_memory_error_naming_the_size() {
        let len = usize::MAX - 4096;
        let err = match HostAllocation::zeroed(len) {
            Ok(_) => panic!("allocated {len} bytes"),
            Err(err) => err,
        };
        assert_eq!(err.errno(), libc::ENOMEM);
        let message = err.to_string();
        assert!(
            message.contains(&format!(
                "cannot allocate {len} bytes of host memory for a copy from a device"
            )),
            "{message}"
        );
    }
}

//! [`HostStaging`]: host memory that copies of device arrays to the host
//! lend out again, batch after batch.
//!
//! A copy to the host ([`DeviceArray::to_host`]) sets fresh memory aside
//! for every array and faults it in first (see `host_memory`): for a stream
//! of batches the allocation, the faults and the unmap recur per batch, and
//! the copy runs at the speed of pageable memory. A [`HostStaging`] keeps
//! the memory of earlier copies and lends it to later ones: pinned memory
//! where the source device offers it
//! ([`Device::allocate_host_accessible`]: the DMA engine writes it
//! directly, without the driver's bounce buffer), ordinary host memory
//! otherwise.
//!
//! # When memory is lent again
//!
//! The arrays of a copy read its memory for as long as they live, and the
//! next copy writes it: a buffer is lent again only once nothing refers to
//! it. Every arrow-rs `Buffer` over a staging buffer holds the staging
//! buffer's `Arc` as its owner (`Buffer::from_custom_allocation`), and the
//! pool lends a buffer only while it holds the one reference, checked under
//! the pool's lock (new references are only ever made from the pool's, under
//! that lock). A copy whose end is unknown (its stream's synchronization
//! failed) takes its buffer out of the pool and leaks it, as
//! `copy::device_to_host` does with fresh memory.
//!
//! # What a reused buffer still holds
//!
//! The previous batch's bytes, which no array can read: every arrow-rs
//! buffer of a copy covers exactly the bytes that one queued copy writes
//! (the layout of `copy::plan`: each buffer of the trimmed tree whole, at a
//! 64-byte aligned offset), later rewritten in place only by the offsets
//! rebase of narrowed strings. The bits and slots a trimmed node keeps
//! before its offset (up to seven, so that bitmaps start on a byte) are
//! copied from the source with the rest of their buffer, so a bitmap's
//! leading and trailing bits are the producer's, never the last batch's.
//! The alignment padding between buffers, and the capacity past the last,
//! lie in no array's buffer.
//!
//! [`DeviceArray::to_host`]: crate::DeviceArray::to_host

use std::fmt;
use std::panic::RefUnwindSafe;
use std::ptr::NonNull;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use arrow_buffer::alloc::Allocation;
use arrow_buffer::Buffer;

use crate::abi::DeviceType;
use crate::array::host_memory::HostAllocation;
use crate::device::{Device, DeviceBuffer};
use crate::error::{Error, Result};

/// Alignment of staging memory: that of every buffer of a copied tree.
const ALIGN: usize = 64;

/// Host memory reused by copies of device arrays to the host
/// ([`DeviceArray::to_host_staged`], [`DeviceArray::to_record_batch_staged`]):
/// up to `slots` buffers are kept, each lent again once no array refers to
/// it anymore. Pinned memory where the source device offers it (CUDA),
/// ordinary prefaulted host memory otherwise (the emulated device). One
/// `HostStaging` may serve many threads and devices at once.
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use arrow_array::{ArrayRef, Int64Array, RecordBatch, StringArray};
/// use arrow_device::device::emulated::{EmulatedConfig, EmulatedDevice};
/// use arrow_device::device::DeviceRef;
/// use arrow_device::{DeviceArray, HostStaging};
///
/// let device: DeviceRef =
///     EmulatedDevice::new(0, EmulatedConfig { strict: true, delay: Duration::ZERO });
/// let batch = RecordBatch::try_from_iter([
///     ("id", Arc::new(Int64Array::from(vec![1, 2, 3])) as ArrayRef),
///     ("name", Arc::new(StringArray::from(vec![Some("a"), None, Some("c")])) as ArrayRef),
/// ])
/// .unwrap();
/// let on_device = DeviceArray::from_record_batch(&batch).to_device(&device).unwrap();
///
/// let staging = HostStaging::new(2);
/// let first = on_device.to_record_batch_staged(&staging).unwrap();
/// assert_eq!(first, batch);
/// assert_eq!((staging.allocations(), staging.reuses()), (1, 0));
/// // Nothing refers to the first copy's memory anymore: the second reuses it.
/// drop(first);
/// let second = on_device.to_record_batch_staged(&staging).unwrap();
/// assert_eq!(second, batch);
/// assert_eq!((staging.allocations(), staging.reuses(), staging.retained()), (1, 1, 1));
/// // The emulated device has no pinned memory to offer.
/// assert_eq!(staging.pinned(), 0);
/// ```
///
/// [`DeviceArray::to_host_staged`]: crate::DeviceArray::to_host_staged
/// [`DeviceArray::to_record_batch_staged`]: crate::DeviceArray::to_record_batch_staged
pub struct HostStaging {
    slots: usize,
    pool: Mutex<Pool>,
}

/// What the lock guards: the kept buffers (each lent while something
/// besides the pool holds its `Arc`) and the counters.
struct Pool {
    buffers: Vec<Arc<Staged>>,
    allocations: usize,
    reuses: usize,
}

/// One staging buffer: `capacity` initialized bytes (zeroed when made) at
/// `ptr`, 64-byte aligned, owned by `memory`.
pub(crate) struct Staged {
    ptr: NonNull<u8>,
    capacity: usize,
    memory: Memory,
}

enum Memory {
    /// Ordinary host memory: a copy from any device may write it.
    Host { _allocation: HostAllocation },
    /// Host memory of one device (pinned memory for CUDA), which only
    /// copies from that device use.
    HostAccessible {
        device_type: DeviceType,
        device_id: i64,
        _buffer: DeviceBuffer,
    },
}

// SAFETY: a `Staged` owns its memory as a `Vec<u8>` owns its allocation
// (`HostAllocation` and `DeviceBuffer` are both `Send + Sync`); `ptr` points
// into that memory, and `&Staged` gives no access to the bytes: copies write
// them while only the pool and the copy hold the `Arc`, arrays read them
// once it is shared (see the module documentation).
unsafe impl Send for Staged {}
// SAFETY: as for `Send`.
unsafe impl Sync for Staged {}
// Nothing behind `&Staged` changes, so a panic cannot leave it half-changed
// (`DeviceBuffer` lacks the trait only for its `dyn Any` owner).
impl RefUnwindSafe for Staged {}

impl Staged {
    /// Whether a copy from `src` may write this buffer: ordinary host
    /// memory serves every device, a device's host memory only that device.
    fn serves(&self, src: &dyn Device) -> bool {
        match &self.memory {
            Memory::Host { .. } => true,
            Memory::HostAccessible {
                device_type,
                device_id,
                ..
            } => *device_type == src.device_type() && *device_id == src.device_id(),
        }
    }

    fn is_pinned(&self) -> bool {
        matches!(self.memory, Memory::HostAccessible { .. })
    }

    /// `capacity` zero bytes: host memory of `src` when `pin` and the device
    /// offers some of the right size and alignment, ordinary host memory
    /// otherwise.
    fn allocate(capacity: usize, src: &dyn Device, pin: bool) -> Result<Staged> {
        if let Some(buffer) = pin
            .then(|| src.allocate_host_accessible(capacity))
            .flatten()
        {
            match NonNull::new(buffer.as_ptr()) {
                Some(ptr) if buffer.len() >= capacity && ptr.as_ptr() as usize % ALIGN == 0 => {
                    // SAFETY: host-writable memory of at least `capacity`
                    // bytes (the `Device` contract, length checked), not yet
                    // shared. Zeroed so that every byte of a staging buffer
                    // is initialized.
                    unsafe { ptr.as_ptr().write_bytes(0, capacity) };
                    return Ok(Staged {
                        ptr,
                        capacity,
                        memory: Memory::HostAccessible {
                            device_type: src.device_type(),
                            device_id: src.device_id(),
                            _buffer: buffer,
                        },
                    });
                }
                // Too small or misaligned: the heap, as for no offer.
                _ => drop(buffer),
            }
        }
        let mut host = HostAllocation::zeroed(capacity)?;
        let ptr = NonNull::new(host.as_mut_ptr()).ok_or_else(|| {
            Error::NotSupported(format!(
                "host memory of {capacity} bytes for staging came at address 0"
            ))
        })?;
        Ok(Staged {
            ptr,
            capacity,
            memory: Memory::Host { _allocation: host },
        })
    }
}

/// The capacity made for a request of `len` bytes: rounded up to one of
/// eight sizes per power of two (at most 1/8 more than asked, or up to the
/// next multiple of 64 bytes for requests below 512), so that
/// batches whose sizes differ by a few percent share one buffer instead of
/// each new largest one allocating.
fn capacity_for(len: usize) -> usize {
    let step = len
        .checked_next_power_of_two()
        .map_or(ALIGN, |power| (power / 16).max(ALIGN));
    len.checked_next_multiple_of(step).unwrap_or(len)
}

impl HostStaging {
    /// A pool that keeps at most `slots` buffers for reuse. With 0 nothing
    /// is kept: every copy allocates, as [`DeviceArray::to_host`] does.
    ///
    /// [`DeviceArray::to_host`]: crate::DeviceArray::to_host
    pub fn new(slots: usize) -> HostStaging {
        HostStaging {
            slots,
            pool: Mutex::new(Pool {
                buffers: Vec::with_capacity(slots.min(64)),
                allocations: 0,
                reuses: 0,
            }),
        }
    }

    /// How many staging buffers were allocated so far (kept or not).
    pub fn allocations(&self) -> usize {
        self.lock().allocations
    }

    /// How many copies were served by a kept buffer.
    pub fn reuses(&self) -> usize {
        self.lock().reuses
    }

    /// How many buffers are kept now (lent or free); at most `slots`.
    pub fn retained(&self) -> usize {
        self.lock().buffers.len()
    }

    /// How many of the kept buffers are a device's host memory (pinned
    /// memory of a CUDA device) rather than ordinary host memory.
    pub fn pinned(&self) -> usize {
        self.lock().buffers.iter().filter(|b| b.is_pinned()).count()
    }

    fn lock(&self) -> MutexGuard<'_, Pool> {
        // Every change under the lock is one push, swap or removal plus a
        // counter: a panic cannot leave the pool half-changed.
        self.pool.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A buffer of at least `len` bytes that a copy from `src` may write
    /// and that nothing else refers to: a kept one, or a new one, kept when
    /// there is room (or a free, smaller one to replace).
    fn lend(&self, len: usize, src: &dyn Device) -> Result<Arc<Staged>> {
        let keep = {
            let mut pool = self.lock();
            let mut chosen: Option<(usize, (bool, usize))> = None;
            let mut replaceable = false;
            for (i, buffer) in pool.buffers.iter_mut().enumerate() {
                // `get_mut`, not `strong_count() == 1`: its acquire load
                // orders the reads of the arrays that dropped the other
                // references before the writes of the next copy.
                if Arc::get_mut(buffer).is_none() {
                    continue;
                }
                if buffer.capacity < len {
                    replaceable = true;
                } else if buffer.serves(src) {
                    // Its own device's pinned memory first, then the smallest.
                    let rank = (!buffer.is_pinned(), buffer.capacity);
                    if chosen.is_none_or(|(_, best)| rank < best) {
                        chosen = Some((i, rank));
                    }
                }
            }
            if let Some((i, _)) = chosen {
                pool.reuses += 1;
                // A clone made under the lock: no other copy can take it.
                return Ok(pool.buffers[i].clone());
            }
            pool.buffers.len() < self.slots || replaceable
        };
        // Allocated without the lock: a large allocation takes milliseconds.
        // Pinning costs more than a copy, so only memory that the pool
        // expects to keep is pinned.
        let fresh = Arc::new(Staged::allocate(capacity_for(len), src, keep)?);
        let evicted = {
            let mut pool = self.lock();
            pool.allocations += 1;
            if pool.buffers.len() < self.slots {
                pool.buffers.push(fresh.clone());
                None
            } else {
                // The smallest free buffer smaller than the new one makes
                // room: the pool grows towards the largest batch.
                let mut smallest: Option<(usize, usize)> = None;
                for (i, buffer) in pool.buffers.iter_mut().enumerate() {
                    let capacity = buffer.capacity;
                    if capacity < fresh.capacity
                        && Arc::get_mut(buffer).is_some()
                        && smallest.is_none_or(|(_, c)| capacity < c)
                    {
                        smallest = Some((i, capacity));
                    }
                }
                smallest.map(|(i, _)| std::mem::replace(&mut pool.buffers[i], fresh.clone()))
            }
        };
        // Freed without the lock (an unmap, or a driver call for pinned
        // memory); nothing else refers to it (checked above, under the lock).
        drop(evicted);
        Ok(fresh)
    }

    /// Takes `buffer` out of the pool and never frees it: a copy into it
    /// may still be running.
    fn leak(&self, buffer: Arc<Staged>) {
        let removed = {
            let mut pool = self.lock();
            let found = pool.buffers.iter().position(|b| Arc::ptr_eq(b, &buffer));
            found.map(|i| pool.buffers.swap_remove(i))
        };
        // The pool's reference goes; the count stays above zero forever
        // with ours forgotten, so the memory is neither freed nor lent.
        drop(removed);
        std::mem::forget(buffer);
    }
}

impl fmt::Debug for HostStaging {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let pool = self.lock();
        f.debug_struct("HostStaging")
            .field("slots", &self.slots)
            .field("retained", &pool.buffers.len())
            .field(
                "pinned",
                &pool.buffers.iter().filter(|b| b.is_pinned()).count(),
            )
            .field("allocations", &pool.allocations)
            .field("reuses", &pool.reuses)
            .finish()
    }
}

/// The host memory that one copy to the host writes
/// (`copy::device_to_host`): fresh, or lent by a [`HostStaging`].
pub(crate) enum HostTarget<'a> {
    Fresh(HostAllocation),
    Lent {
        staging: &'a HostStaging,
        buffer: Arc<Staged>,
        len: usize,
    },
}

impl<'a> HostTarget<'a> {
    /// `len` bytes for a copy from `src`: lent by `staging` when there is
    /// one (and anything to copy), fresh otherwise.
    pub(crate) fn acquire(
        len: usize,
        src: &dyn Device,
        staging: Option<&'a HostStaging>,
    ) -> Result<Self> {
        match staging {
            Some(staging) if len > 0 => Ok(HostTarget::Lent {
                staging,
                buffer: staging.lend(len, src)?,
                len,
            }),
            _ => Ok(HostTarget::Fresh(HostAllocation::zeroed(len)?)),
        }
    }

    /// Where the copies write, until [`into_buffer`](Self::into_buffer).
    pub(crate) fn as_mut_ptr(&mut self) -> *mut u8 {
        match self {
            HostTarget::Fresh(host) => host.as_mut_ptr(),
            HostTarget::Lent { buffer, .. } => buffer.ptr.as_ptr(),
        }
    }

    /// Gives the memory up without freeing or lending it again: for copies
    /// whose end is unknown.
    pub(crate) fn leak(self) {
        match self {
            HostTarget::Fresh(host) => std::mem::forget(host),
            HostTarget::Lent {
                staging, buffer, ..
            } => staging.leak(buffer),
        }
    }

    /// The memory as an immutable arrow-rs buffer of the requested length,
    /// once the copies into it have completed; lent memory returns to its
    /// pool when the buffer's last clone or slice is dropped.
    pub(crate) fn into_buffer(self) -> Buffer {
        match self {
            HostTarget::Fresh(host) => host.into_buffer(),
            HostTarget::Lent { buffer, len, .. } => {
                let ptr = buffer.ptr;
                let owner: Arc<dyn Allocation> = buffer;
                // SAFETY: `len <= capacity` initialized bytes at `ptr`, which
                // `owner` keeps allocated; the pool writes them again only
                // once `owner` is its one reference, after every clone and
                // slice of this buffer is gone.
                unsafe { Buffer::from_custom_allocation(ptr, len, owner) }
            }
        }
    }
}

#[cfg(test)]
mod tests;

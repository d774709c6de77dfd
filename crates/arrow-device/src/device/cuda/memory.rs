//! CUDA memory: the three kinds a device type allocates, the allocation that
//! frees itself, and what the driver says about a pointer.
//!
//! ```
//! use arrow_device::abi::DeviceType;
//! use arrow_device::device::cuda::{MemoryKind, PointerMemoryType};
//!
//! assert_eq!(MemoryKind::from_device_type(DeviceType::CUDA_HOST), Some(MemoryKind::Pinned));
//! assert_eq!(MemoryKind::from_device_type(DeviceType::CPU), None);
//!
//! // CU_MEMORYTYPE_DEVICE, not managed, on GPU 1.
//! let found = PointerMemoryType::from_attributes(2, false, 1);
//! assert_eq!(found, PointerMemoryType::Device { device_ordinal: 1 });
//! assert_eq!(found.device(), Some((DeviceType::CUDA, 1)));
//! assert!(!found.is_host_accessible());
//! ```

use std::ffi::c_void;
use std::sync::Arc;

use cudarc::driver::result as cu;
use cudarc::driver::sys;

use super::driver::{self, Context, Failure};
use crate::abi::DeviceType;

/// Which allocator a CUDA device type uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MemoryKind {
    /// Device memory (`cuMemAlloc`): `CUDA`, not readable by the host.
    Device,
    /// Page-locked host memory (`cuMemHostAlloc`, portable to every
    /// context): `CUDA_HOST`.
    Pinned,
    /// Managed (unified) memory (`cuMemAllocManaged`): `CUDA_MANAGED`.
    Managed,
}

impl MemoryKind {
    /// The kind a CUDA device type allocates; `None` for other types.
    pub fn from_device_type(device_type: DeviceType) -> Option<Self> {
        match device_type {
            DeviceType::CUDA => Some(MemoryKind::Device),
            DeviceType::CUDA_HOST => Some(MemoryKind::Pinned),
            DeviceType::CUDA_MANAGED => Some(MemoryKind::Managed),
            _ => None,
        }
    }

    /// The device type whose arrays live in this kind of memory.
    pub fn device_type(self) -> DeviceType {
        match self {
            MemoryKind::Device => DeviceType::CUDA,
            MemoryKind::Pinned => DeviceType::CUDA_HOST,
            MemoryKind::Managed => DeviceType::CUDA_MANAGED,
        }
    }

    /// Whether the host may read this memory (after the array's event).
    pub fn is_host_accessible(self) -> bool {
        !matches!(self, MemoryKind::Device)
    }
}

/// Where a pointer points, as `cuPointerGetAttributes` reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum PointerMemoryType {
    /// Memory CUDA does not know: ordinary (pageable) host memory, or no
    /// allocation at all.
    Unregistered,
    /// Page-locked host memory (`cuMemHostAlloc`, `cuMemHostRegister`),
    /// allocated against GPU `device_ordinal`.
    Host {
        /// The GPU the allocation was made against.
        device_ordinal: i32,
    },
    /// Device memory of GPU `device_ordinal`.
    Device {
        /// The GPU that holds the memory.
        device_ordinal: i32,
    },
    /// Managed memory, allocated against GPU `device_ordinal`.
    Managed {
        /// The GPU the allocation was made against.
        device_ordinal: i32,
    },
    /// A memory type this crate does not know (the driver's value).
    Unknown {
        /// The `CU_POINTER_ATTRIBUTE_MEMORY_TYPE` value.
        memory_type: u32,
    },
}

/// `CUmemorytype` values (stable across driver versions).
const CU_MEMORYTYPE_HOST: u32 = 1;
const CU_MEMORYTYPE_DEVICE: u32 = 2;
const CU_MEMORYTYPE_UNIFIED: u32 = 4;

impl PointerMemoryType {
    /// Classifies the attributes the driver reported for a pointer:
    /// `CU_POINTER_ATTRIBUTE_MEMORY_TYPE` (0 for memory CUDA does not know),
    /// `CU_POINTER_ATTRIBUTE_IS_MANAGED` and
    /// `CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL`. Managed memory reports the
    /// memory type of where it was allocated, so `is_managed` wins.
    pub fn from_attributes(memory_type: u32, is_managed: bool, device_ordinal: i32) -> Self {
        if is_managed {
            return PointerMemoryType::Managed { device_ordinal };
        }
        match memory_type {
            0 => PointerMemoryType::Unregistered,
            CU_MEMORYTYPE_HOST => PointerMemoryType::Host { device_ordinal },
            CU_MEMORYTYPE_DEVICE => PointerMemoryType::Device { device_ordinal },
            CU_MEMORYTYPE_UNIFIED => PointerMemoryType::Managed { device_ordinal },
            other => PointerMemoryType::Unknown { memory_type: other },
        }
    }

    /// The `(device_type, device_id)` an array in this memory reports:
    /// `(CPU, -1)` for unregistered memory, `None` for an unknown type.
    pub fn device(self) -> Option<(DeviceType, i64)> {
        match self {
            PointerMemoryType::Unregistered => Some((DeviceType::CPU, -1)),
            PointerMemoryType::Host { device_ordinal } => {
                Some((DeviceType::CUDA_HOST, device_ordinal.into()))
            }
            PointerMemoryType::Device { device_ordinal } => {
                Some((DeviceType::CUDA, device_ordinal.into()))
            }
            PointerMemoryType::Managed { device_ordinal } => {
                Some((DeviceType::CUDA_MANAGED, device_ordinal.into()))
            }
            PointerMemoryType::Unknown { .. } => None,
        }
    }

    /// Whether the host may dereference the pointer (device memory and
    /// unknown types: no).
    pub fn is_host_accessible(self) -> bool {
        matches!(
            self,
            PointerMemoryType::Unregistered
                | PointerMemoryType::Host { .. }
                | PointerMemoryType::Managed { .. }
        )
    }
}

/// Asks the driver about `ptr` (with some context current).
pub(super) fn classify(
    context: &Context,
    ptr: *const c_void,
) -> Result<PointerMemoryType, Failure> {
    let mut attributes = [
        sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
        sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_IS_MANAGED,
        sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
    ];
    // MEMORY_TYPE is an unsigned int and DEVICE_ORDINAL an int; IS_MANAGED
    // is documented as "a boolean" without a width, so it gets a zeroed
    // 8-byte slot and any non-zero byte means true.
    let mut memory_type: u32 = 0;
    let mut is_managed: u64 = 0;
    let mut device_ordinal: i32 = 0;
    let mut data: [*mut c_void; 3] = [
        (&mut memory_type as *mut u32).cast(),
        (&mut is_managed as *mut u64).cast(),
        (&mut device_ordinal as *mut i32).cast(),
    ];
    context.run("cuPointerGetAttributes", || {
        // SAFETY: three attributes with three slots of the documented widths
        // (or wider), live for the call. Unlike cuPointerGetAttribute, this
        // call succeeds for pointers CUDA does not know, leaving zeros.
        unsafe {
            sys::cuPointerGetAttributes(
                3,
                attributes.as_mut_ptr(),
                data.as_mut_ptr(),
                driver::address(ptr),
            )
        }
        .result()
    })?;
    Ok(PointerMemoryType::from_attributes(
        memory_type,
        is_managed != 0,
        device_ordinal,
    ))
}

/// What `cuMemGetAddressRange` says about one address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum AddressRange {
    /// The allocation `[base, base + size)` holds the address.
    Found { base: usize, size: usize },
    /// No allocation the driver knows holds it: `CUDA_ERROR_NOT_FOUND` or
    /// `CUDA_ERROR_INVALID_VALUE`, named.
    Unknown(&'static str),
    /// The driver could not answer (another error, or no context).
    CannotTell,
}

/// Asks the driver which allocation holds `addr` (with `context` current).
pub(super) fn address_range(context: &Context, addr: usize) -> AddressRange {
    let (mut base, mut size): (sys::CUdeviceptr, usize) = (0, 0);
    // The code itself is the answer, so the call "succeeds" whatever it
    // returns; only a failure to make the context current (or a missing
    // symbol) fails it.
    let code = context.run("cuMemGetAddressRange", || {
        // SAFETY: two out parameters of the documented types, live for
        // the call; the driver only reads `addr` as a number.
        Ok(unsafe { sys::cuMemGetAddressRange_v2(&mut base, &mut size, addr as sys::CUdeviceptr) })
    });
    match code {
        Ok(sys::CUresult::CUDA_SUCCESS) => match usize::try_from(base) {
            Ok(base) => AddressRange::Found { base, size },
            Err(_) => AddressRange::CannotTell,
        },
        Ok(sys::CUresult::CUDA_ERROR_NOT_FOUND) => AddressRange::Unknown("CUDA_ERROR_NOT_FOUND"),
        Ok(sys::CUresult::CUDA_ERROR_INVALID_VALUE) => {
            AddressRange::Unknown("CUDA_ERROR_INVALID_VALUE")
        }
        Ok(_) | Err(_) => AddressRange::CannotTell,
    }
}

/// The most allocations [`check_range`] follows one range through.
pub(super) const MAX_SEGMENTS: usize = 256;

/// Checks that `[ptr, ptr + len)` (`len > 0`) lies in memory the driver
/// knows, as `lookup` (`address_range`) describes it. `Err` (what the
/// driver said) only when it says so itself: the range starts in an
/// allocation it describes, and past the end of the allocations that follow
/// one another from there, at an address it knows no allocation for.
///
/// The range may run on from one allocation into the next when they are
/// contiguous: memory mapped with the virtual memory management API
/// (`cuMemMap`, used by pools such as PyTorch's expandable segments) is
/// one range of addresses that the driver describes one mapped allocation
/// at a time. So the check follows contiguous allocations, up to
/// [`MAX_SEGMENTS`] of them, then gives up (cannot tell). Every failure of
/// the driver to answer also means "cannot tell": never refuse data the
/// driver merely cannot describe.
pub(super) fn check_range(
    ptr: usize,
    len: usize,
    mut lookup: impl FnMut(usize) -> AddressRange,
) -> Result<(), Failure> {
    let Some(end) = ptr.checked_add(len) else {
        return Err(format!(
            "{ptr:#x} (length {len}) runs past the end of the address space"
        ));
    };
    let AddressRange::Found { base, size } = lookup(ptr) else {
        return Ok(());
    };
    let first_end = base.saturating_add(size);
    let mut covered = first_end;
    for _ in 1..MAX_SEGMENTS {
        if covered >= end {
            return Ok(());
        }
        match lookup(covered) {
            AddressRange::Found { base, size } if base.saturating_add(size) > covered => {
                covered = base.saturating_add(size);
            }
            AddressRange::Unknown(code) => {
                let followed = if covered == first_end {
                    String::new()
                } else {
                    format!(" and contiguous ones up to {covered:#x}")
                };
                return Err(format!(
                    "{ptr:#x} (length {len}) runs {} bytes past the memory the driver knows \
                     there: cuMemGetAddressRange gives the allocation of {size} bytes at \
                     {base:#x}{followed}, then {code} at {covered:#x}",
                    end - covered
                ));
            }
            // No progress, or no answer: cannot tell.
            _ => return Ok(()),
        }
    }
    Ok(())
}

/// Memory from one of the CUDA allocators, freed (with its context
/// current) when dropped: the owner inside a [`DeviceBuffer`].
///
/// [`DeviceBuffer`]: crate::device::DeviceBuffer
#[derive(Debug)]
pub(super) struct Allocation {
    context: Arc<Context>,
    kind: MemoryKind,
    ptr: usize,
}

impl Allocation {
    /// Allocates `len > 0` bytes of `kind` on `context`'s GPU.
    pub(super) fn new(
        context: Arc<Context>,
        kind: MemoryKind,
        len: usize,
    ) -> Result<Self, Failure> {
        let entry = match kind {
            MemoryKind::Device => "cuMemAlloc",
            MemoryKind::Pinned => "cuMemHostAlloc",
            MemoryKind::Managed => "cuMemAllocManaged",
        };
        let ptr = context.run(entry, || {
            // SAFETY: plain allocations; the memory is not read before it is
            // written by a copy.
            unsafe {
                match kind {
                    MemoryKind::Device => cu::malloc_sync(len).map(|p| p as usize),
                    MemoryKind::Pinned => {
                        cu::malloc_host(len, sys::CU_MEMHOSTALLOC_PORTABLE).map(|p| p as usize)
                    }
                    MemoryKind::Managed => {
                        cu::malloc_managed(len, sys::CUmemAttach_flags::CU_MEM_ATTACH_GLOBAL)
                            .map(|p| p as usize)
                    }
                }
            }
        });
        let ptr = ptr.map_err(|e| format!("{e} ({len} bytes of {kind:?} memory)"))?;
        Ok(Allocation { context, kind, ptr })
    }

    /// The start of the allocation.
    pub(super) fn ptr(&self) -> *mut u8 {
        self.ptr as *mut u8
    }
}

impl Drop for Allocation {
    fn drop(&mut self) {
        let (kind, ptr) = (self.kind, self.ptr);
        // A failure cannot be reported from a destructor. Owners wait on the
        // copies' event before dropping (see `array::copy`): nothing may be
        // freed while queued work can still touch it.
        let entry = match kind {
            MemoryKind::Pinned => "cuMemFreeHost",
            MemoryKind::Device | MemoryKind::Managed => "cuMemFree",
        };
        let _ = self.context.run(entry, || {
            // SAFETY: allocated in `Allocation::new` with this kind, freed once.
            unsafe {
                match kind {
                    MemoryKind::Pinned => cu::free_host(ptr as *mut c_void),
                    MemoryKind::Device | MemoryKind::Managed => {
                        cu::memory_free(ptr as sys::CUdeviceptr)
                    }
                }
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A driver that knows `allocations` (base, size), in no order.
    fn driver(allocations: &[(usize, usize)]) -> impl FnMut(usize) -> AddressRange + '_ {
        move |addr| {
            allocations
                .iter()
                .find(|(base, size)| (*base..base + size).contains(&addr))
                .map_or(
                    AddressRange::Unknown("CUDA_ERROR_NOT_FOUND"),
                    |&(base, size)| AddressRange::Found { base, size },
                )
        }
    }

    #[test]
    fn a_range_inside_one_allocation_is_accepted() {
        let known = [(0x1000, 100)];
        check_range(0x1000, 100, driver(&known)).unwrap();
        check_range(0x1063, 1, driver(&known)).unwrap();
    }

    #[test]
    fn a_range_past_its_allocation_is_refused_with_what_the_driver_said() {
        let known = [(0x1000, 4), (0x9000, 64)];
        let err = check_range(0x1000, 8 << 30, driver(&known)).unwrap_err();
        assert_eq!(
            err,
            "0x1000 (length 8589934592) runs 8589934588 bytes past the memory the driver knows \
             there: cuMemGetAddressRange gives the allocation of 4 bytes at 0x1000, then \
             CUDA_ERROR_NOT_FOUND at 0x1004"
        );
    }

    #[test]
    fn contiguous_allocations_are_followed_as_one_range() {
        // Three mappings of one reserved range, as cuMemMap makes them.
        let known = [(0x2000, 0x1000), (0x1000, 0x1000), (0x3000, 0x800)];
        check_range(0x1800, 0x2000, driver(&known)).unwrap();
        let err = check_range(0x1800, 0x2001, driver(&known)).unwrap_err();
        assert_eq!(
            err,
            "0x1800 (length 8193) runs 1 bytes past the memory the driver knows there: \
             cuMemGetAddressRange gives the allocation of 4096 bytes at 0x1000 and contiguous \
             ones up to 0x3800, then CUDA_ERROR_NOT_FOUND at 0x3800"
        );
    }

    #[test]
    fn whatever_the_driver_cannot_describe_is_accepted() {
        // A pointer it knows nothing about (memory of another allocator).
        check_range(0x1000, 1 << 40, driver(&[])).unwrap();
        // No answer at all, at the start or further on.
        check_range(0x1000, 1 << 40, |_| AddressRange::CannotTell).unwrap();
        let mut answers = [
            AddressRange::Found {
                base: 0x1000,
                size: 16,
            },
            AddressRange::CannotTell,
        ]
        .into_iter();
        check_range(0x1000, 32, |_| answers.next().unwrap()).unwrap();
        // An answer that makes no progress.
        check_range(0x1000, 32, |_| AddressRange::Found {
            base: 0x1000,
            size: 16,
        })
        .unwrap();
    }

    #[test]
    fn the_walk_through_contiguous_allocations_is_bounded() {
        let mut lookups = 0;
        let segments = |addr: usize| {
            lookups += 1;
            AddressRange::Found {
                base: addr,
                size: 0x1000,
            }
        };
        check_range(0x1000, usize::MAX / 2, segments).unwrap();
        assert_eq!(lookups, MAX_SEGMENTS);
    }

    #[test]
    fn a_range_that_wraps_around_the_address_space_is_refused() {
        let err = check_range(usize::MAX - 3, 8, driver(&[])).unwrap_err();
        assert!(
            err.contains("runs past the end of the address space"),
            "{err}"
        );
    }
}

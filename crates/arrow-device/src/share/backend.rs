//! What each device does to share an array: where its buffers lie among
//! the allocations shared, what the lease passes (memory files), what the
//! handle carries for the device, and how an opener maps it all again.
//!
//! - CPU (and CUDA_HOST, whose pinned memory has no IPC handle): the
//!   buffers are copied once into a sealed memory file ([`super::cpu`]).
//! - The emulated device: its allocations are memory files already; each
//!   one is passed as it is, no copy ([`super::emulated`]).
//! - CUDA: one IPC handle per allocation and an interprocess event
//!   ([`super::cuda`]).

use std::any::Any;
use std::collections::BTreeMap;
use std::ffi::c_void;
use std::os::fd::OwnedFd;

use super::layout::Place;
use super::lease::Keep;
use crate::abi::DeviceType;
use crate::error::{Error, Result};
use crate::DeviceArray;

/// What a device's exporter hands to the handle and the lender.
pub(super) struct Exported {
    /// The size of each allocation, in the order [`Place::allocation`]
    /// counts them.
    pub sizes: Vec<u64>,
    /// Passed to each opener over its lease (`SCM_RIGHTS`): memory files.
    pub fds: Vec<OwnedFd>,
    /// The device's own part of the handle (IPC handles, say).
    pub extra: Vec<u8>,
    /// Kept alive while any lease holds it: the shared memory.
    pub keep: Keep,
}

/// One device's way of sharing an array.
pub(super) trait Exporter {
    /// Where the buffer at `ptr` of `len` bytes (`len > 0`) lies among the
    /// allocations shared.
    fn place(&mut self, ptr: *const u8, len: usize) -> Result<Place, String>;

    /// The allocations met by [`Exporter::place`], ready to lend.
    fn finish(self: Box<Self>) -> Result<Exported>;
}

/// An opener's mapping of a shared array's allocations.
pub(super) struct Opened {
    /// The base pointer and length of each allocation, in the handle's order.
    pub allocations: Vec<(*const u8, usize)>,
    /// Keeps the mappings (and the event) valid; dropped with the array.
    pub owner: Box<dyn Any + Send + Sync>,
    /// The opened array's `sync_event`: NULL, or an event `owner` keeps.
    pub sync_event: *mut c_void,
    /// The opened array's device id where it differs from the exporter's
    /// (a GPU found by its UUID under another ordinal).
    pub device_id: Option<i64>,
}

/// How an array is shared: by which exporter, laying out which array (the
/// one given, or a copy the device made to share it), under which device.
pub(super) struct Plan {
    pub exporter: Box<dyn Exporter>,
    pub array: DeviceArray,
    /// The device type and id the handle names: the CPU for CUDA_HOST,
    /// whose buffers are copied out of pinned memory.
    pub device_type: DeviceType,
    pub device_id: i64,
}

/// How `array` is shared.
pub(super) fn plan(array: &DeviceArray) -> Result<Plan> {
    let on_cpu = |array: &DeviceArray| Plan {
        exporter: Box::new(super::cpu::Exporter::default()),
        array: array.clone(),
        device_type: DeviceType::CPU,
        device_id: -1,
    };
    match array.device_type() {
        DeviceType::CPU => Ok(on_cpu(array)),
        DeviceType::CUDA_HOST => {
            // Pinned memory has no IPC handle; the host reads it once the
            // producer's work is done.
            array.synchronize()?;
            Ok(on_cpu(array))
        }
        DeviceType::EXT_DEV => {
            let (exporter, array) = super::emulated::exporter(array)?;
            Ok(Plan {
                exporter,
                device_type: DeviceType::EXT_DEV,
                device_id: array.device_id(),
                array,
            })
        }
        #[cfg(feature = "cuda")]
        DeviceType::CUDA => {
            let (exporter, array) = super::cuda::exporter(array)?;
            Ok(Plan {
                exporter,
                device_type: DeviceType::CUDA,
                device_id: array.device_id(),
                array,
            })
        }
        DeviceType::CUDA_MANAGED => Err(Error::NotSupported(
            "CUDA managed memory has no IPC handle and cannot be shared between processes: \
             copy the array to the GPU (to_device with a CUDA device) or to the CPU (to_host) \
             first"
                .into(),
        )),
        other => Err(Error::NotSupported(format!(
            "sharing arrays on {other} between processes is not supported (the CPU, \
             CUDA_HOST, the emulated device{} are)",
            if cfg!(feature = "cuda") {
                " and CUDA"
            } else {
                "; CUDA is, in builds with the `cuda` feature"
            }
        ))),
    }
}

/// Maps a shared array's allocations in the opener; `lease` (which
/// outlives the mappings) tells whether the exporter lives.
pub(super) fn open(
    device_type: DeviceType,
    device_id: i64,
    sizes: &[usize],
    extra: &[u8],
    fds: Vec<OwnedFd>,
    lease: &super::lease::Lease,
) -> Result<Opened> {
    // Only CUDA mappings watch their lease (the others outlive the exporter).
    #[cfg(not(feature = "cuda"))]
    let _ = lease;
    match device_type {
        DeviceType::CPU => super::cpu::open(sizes, extra, fds),
        DeviceType::EXT_DEV => super::emulated::open(device_id, sizes, extra, fds),
        #[cfg(feature = "cuda")]
        DeviceType::CUDA => super::cuda::open(device_id, sizes, extra, fds, lease),
        other => Err(Error::NotSupported(format!(
            "a share handle of an array on {other}, which this build cannot open{}",
            if other == DeviceType::CUDA {
                " (it has no `cuda` feature)"
            } else {
                ""
            }
        ))),
    }
}

/// Whole allocations met while placing buffers: for devices that share
/// memory as it is, without a copy. `A` is what the device keeps about
/// each allocation (a memory file, an IPC handle).
pub(super) struct Allocations<A> {
    /// Base address → index in `found`.
    by_base: BTreeMap<usize, usize>,
    /// In the order they were met: base address, size, the device's part.
    pub found: Vec<(usize, usize, A)>,
}

impl<A> Default for Allocations<A> {
    fn default() -> Self {
        Allocations {
            by_base: BTreeMap::new(),
            found: Vec::new(),
        }
    }
}

impl<A> Allocations<A> {
    /// Where `[ptr, ptr + len)` lies; `find` gives the base address, size
    /// and the device's part of the allocation that holds `ptr`, the first
    /// time one is met.
    pub fn place(
        &mut self,
        ptr: *const u8,
        len: usize,
        find: impl FnOnce(usize) -> Result<(usize, usize, A), String>,
    ) -> Result<Place, String> {
        let address = ptr as usize;
        let known = self
            .by_base
            .range(..=address)
            .next_back()
            .map(|(_, &index)| index)
            .filter(|&index| address - self.found[index].0 < self.found[index].1);
        let index = match known {
            Some(index) => index,
            None => {
                let (base, size, part) = find(address)?;
                if !(base <= address && address - base < size) {
                    return Err(format!(
                        "the allocation found for {address:#x} ({size} bytes at {base:#x}) does not hold it"
                    ));
                }
                let index = self.found.len();
                self.found.push((base, size, part));
                self.by_base.insert(base, index);
                index
            }
        };
        let (base, size, _) = &self.found[index];
        let offset = address - base;
        if len > size - offset {
            return Err(format!(
                "a buffer of {len} bytes at {address:#x} runs past the end of its allocation \
                 ({size} bytes at {base:#x})"
            ));
        }
        Ok(Place {
            allocation: u32::try_from(index).map_err(|_| "too many allocations".to_string())?,
            offset: offset as u64,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_of_one_allocation_share_it_and_overruns_are_errors() {
        let mut allocations = Allocations::<&str>::default();
        let mut finds = 0;
        let mut find = |address: usize| {
            finds += 1;
            let base = address & !0xfff;
            Ok((base, 0x1000, "a"))
        };
        let at = allocations
            .place(std::ptr::without_provenance::<u8>(0x2010), 16, &mut find)
            .unwrap();
        assert_eq!((at.allocation, at.offset), (0, 0x10));
        let at = allocations
            .place(std::ptr::without_provenance::<u8>(0x2ff0), 16, &mut find)
            .unwrap();
        assert_eq!((at.allocation, at.offset), (0, 0xff0));
        let at = allocations
            .place(std::ptr::without_provenance::<u8>(0x5000), 1, &mut find)
            .unwrap();
        assert_eq!((at.allocation, at.offset), (1, 0));
        let err = allocations
            .place(std::ptr::without_provenance::<u8>(0x2ff0), 17, &mut find)
            .unwrap_err();
        assert!(err.contains("runs past the end"), "{err}");
        assert_eq!(finds, 2);
        let err = allocations
            .place(std::ptr::without_provenance::<u8>(0x9000), 1, |_| {
                Ok((0x1000, 16, "b"))
            })
            .unwrap_err();
        assert!(err.contains("does not hold it"), "{err}");
    }
}

//! Sharing arrays of the emulated device (`EXT_DEV`): its strict
//! allocations are memory files already, so each allocation that holds a
//! buffer is passed to the opener as it is (no copy), and mapped there with
//! the same strictness: a device pointer the host cannot dereference,
//! reached by the device's copies through a read-write alias.
//!
//! The emulated device has no interprocess event. The exporter waits on
//! the array's `sync_event` before it makes the handle, so every opener is
//! ordered after the producer's work, and a delayed copy's poison never
//! reaches it.

use std::os::fd::OwnedFd;
use std::sync::Arc;

use super::backend::{self, Allocations, Exported, Opened};
use super::handle::invalid;
use super::layout::Place;
use crate::device::emulated::{self, EmulatedConfig, EmulatedDevice};
use crate::device::DeviceRef;
use crate::error::{Error, Result};
use crate::DeviceArray;

struct Exporter {
    /// The array shared (a strict copy when it was not strict), which the
    /// leases keep alive.
    array: DeviceArray,
    allocations: Allocations<OwnedFd>,
}

/// The exporter of `array`, once the producer's work on it is done, and
/// the array it lays out (`array`, or its strict copy).
pub(super) fn exporter(array: &DeviceArray) -> Result<(Box<dyn backend::Exporter>, DeviceArray)> {
    let device_id = array.device_id();
    let array = if all_buffers(array, &|ptr| emulated::keeps_file(device_id, ptr as usize)) {
        array.clone()
    } else {
        // Non-strict memory is anonymous, with no file to pass: a copy in
        // strict memory of the same device, through the host (a copy onto
        // the same device would be no copy at all).
        let strict: DeviceRef = EmulatedDevice::new(
            device_id,
            EmulatedConfig {
                strict: true,
                ..EmulatedConfig::default()
            },
        );
        DeviceArray::from_array(array.to_host()?.as_ref()).to_device(&strict)?
    };
    array.synchronize()?;
    let exporter = Exporter {
        array: array.clone(),
        allocations: Allocations::default(),
    };
    Ok((Box::new(exporter), array))
}

/// Whether `check` holds for every non-empty buffer of `array`'s tree.
fn all_buffers(array: &DeviceArray, check: &dyn Fn(*const u8) -> bool) -> bool {
    array
        .buffers()
        .iter()
        .filter(|b| !b.ptr.is_null() && b.len != Some(0))
        .all(|b| check(b.ptr))
        && array.children().iter().all(|c| all_buffers(c, check))
        && array.dictionary().is_none_or(|d| all_buffers(&d, check))
}

impl backend::Exporter for Exporter {
    fn place(&mut self, ptr: *const u8, len: usize) -> Result<Place, String> {
        let device_id = self.array.device_id();
        self.allocations.place(ptr, len, |address| {
            emulated::export_file(device_id, address)
        })
    }

    fn finish(self: Box<Self>) -> Result<Exported> {
        let Exporter { array, allocations } = *self;
        let mut sizes = Vec::with_capacity(allocations.found.len());
        let mut fds = Vec::with_capacity(allocations.found.len());
        for (_, size, fd) in allocations.found {
            sizes.push(size as u64);
            fds.push(fd);
        }
        Ok(Exported {
            sizes,
            fds,
            extra: Vec::new(),
            keep: Arc::new(array),
        })
    }
}

/// Maps each shared allocation as a strict allocation of emulated device
/// `device_id` in this process.
pub(super) fn open(
    device_id: i64,
    sizes: &[usize],
    extra: &[u8],
    fds: Vec<OwnedFd>,
) -> Result<Opened> {
    if !extra.is_empty() {
        return Err(invalid(format!(
            "an emulated-device share has no device part, the handle has {} bytes of one",
            extra.len()
        )));
    }
    if fds.len() != sizes.len() {
        return Err(invalid(format!(
            "the exporter sent {} memory files for {} allocations",
            fds.len(),
            sizes.len()
        )));
    }
    let buffers = fds
        .into_iter()
        .zip(sizes)
        .enumerate()
        .map(|(i, (fd, &size))| {
            emulated::import_file(device_id, fd, size).map_err(|e| {
                Error::device(
                    crate::DeviceType::EXT_DEV,
                    device_id,
                    format!("shared allocation {i}: {e}"),
                )
            })
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(Opened {
        allocations: buffers
            .iter()
            .map(|b| (b.as_ptr().cast_const(), b.len()))
            .collect(),
        owner: Box::new(buffers),
        sync_event: std::ptr::null_mut(),
        device_id: None,
    })
}

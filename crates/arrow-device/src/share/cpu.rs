//! Sharing CPU arrays: the buffers are copied once into a sealed memory
//! file, which every opener maps read-only (zero-copy for any number of
//! openers; the exporter's copy is the only one).

use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::sync::Arc;

use super::backend::{self, Exported, Opened};
use super::handle::invalid;
use super::layout::Place;
use super::memfd::Sealed;
use crate::error::{Error, Result};

/// Buffers start at multiples of this in a shared memory file.
const ALIGN: usize = 64;

/// Lays the buffers out in one memory file as they are placed.
#[derive(Default)]
pub(super) struct Exporter {
    /// Where each distinct (pointer, length) goes in the file.
    places: HashMap<(usize, usize), u64>,
    /// What to copy: source, length, offset in the file.
    pieces: Vec<(*const u8, usize, usize)>,
    size: usize,
}

impl backend::Exporter for Exporter {
    fn place(&mut self, ptr: *const u8, len: usize) -> Result<Place, String> {
        let offset = match self.places.get(&(ptr as usize, len)) {
            Some(&offset) => offset,
            None => {
                let at = self
                    .size
                    .checked_next_multiple_of(ALIGN)
                    .and_then(|at| Some((at, at.checked_add(len)?)))
                    .ok_or_else(|| "the shared copy's size overflows".to_string())?;
                self.size = at.1;
                self.pieces.push((ptr, len, at.0));
                self.places.insert((ptr as usize, len), at.0 as u64);
                at.0 as u64
            }
        };
        Ok(Place {
            allocation: 0,
            offset,
        })
    }

    fn finish(self: Box<Self>) -> Result<Exported> {
        let pieces: Vec<(usize, &[u8])> = self
            .pieces
            .iter()
            // SAFETY: a host buffer of `len` bytes of the array being
            // shared, which the caller of `share` keeps alive.
            .map(|&(ptr, len, at)| (at, unsafe { std::slice::from_raw_parts(ptr, len) }))
            .collect();
        let sealed =
            Sealed::create("arrow-device-share", self.size, &pieces).map_err(Error::Share)?;
        let fd = sealed
            .fd()
            .try_clone()
            .map_err(|e| Error::Share(format!("dup of the shared memory file: {e}")))?;
        Ok(Exported {
            sizes: vec![self.size as u64],
            fds: vec![fd],
            extra: Vec::new(),
            keep: Arc::new(sealed),
        })
    }
}

/// Maps the one sealed memory file of a CPU share.
pub(super) fn open(sizes: &[usize], extra: &[u8], fds: Vec<OwnedFd>) -> Result<Opened> {
    let &[size] = sizes else {
        return Err(invalid(format!(
            "a CPU share has one memory file, the handle says {}",
            sizes.len()
        )));
    };
    if !extra.is_empty() {
        return Err(invalid(format!(
            "a CPU share has no device part, the handle has {} bytes of one",
            extra.len()
        )));
    }
    let [fd] = <[_; 1]>::try_from(fds).map_err(|fds: Vec<_>| {
        invalid(format!(
            "the exporter sent {} memory files, expected 1",
            fds.len()
        ))
    })?;
    let sealed = Sealed::open(fd, size).map_err(invalid)?;
    Ok(Opened {
        allocations: vec![(sealed.as_ptr(), sealed.len())],
        owner: Box::new(sealed),
        sync_event: std::ptr::null_mut(),
        device_id: None,
    })
}

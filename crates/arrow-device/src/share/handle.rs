//! Share handles: the bytes another process opens. An array's handle holds
//! the lender's ticket, the device, the schema tree, the allocations and
//! the tree's layout over them (docs/design/sharing.md, "The handle").

use super::backend::{self, Opened};
use super::codec::{Reader, Writer};
use super::layout;
use super::lease::{borrow, Lender, Ticket};
use crate::abi::DeviceType;
use crate::error::{Error, Result};
use crate::{DeviceArray, ValidationLevel};

const MAGIC: &[u8; 4] = b"ADSH";
const VERSION: u32 = 1;

/// What a handle describes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(super) enum Kind {
    Array = 0,
    Stream = 1,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Array => "an array",
            Kind::Stream => "a stream",
        }
    }
}

pub(super) fn invalid(message: String) -> Error {
    Error::invalid(&crate::error::Path::root(), message)
}

/// Starts a handle of `kind` for the object `ticket` opens.
pub(super) fn write_header(kind: Kind, ticket: &Ticket) -> Writer {
    let mut handle = Writer::default();
    for &byte in MAGIC {
        handle.u8(byte);
    }
    handle.u32(VERSION);
    handle.u8(kind as u8);
    handle.bytes(&ticket.name);
    handle.u64(ticket.id);
    handle.bytes(&ticket.token);
    handle
}

/// Reads a handle's start: it must be a handle of `kind`.
pub(super) fn read_header(reader: &mut Reader<'_>, kind: Kind) -> Result<Ticket> {
    let mut magic = [0u8; 4];
    for byte in &mut magic {
        *byte = reader.u8("the handle's magic").map_err(invalid)?;
    }
    if &magic != MAGIC {
        return Err(invalid(format!(
            "not an arrow-device share handle (starts with {magic:?}, expected {MAGIC:?})"
        )));
    }
    let version = reader.u32("the handle's version").map_err(invalid)?;
    if version != VERSION {
        return Err(invalid(format!(
            "a share handle of version {version} (this build reads version {VERSION})"
        )));
    }
    let found = reader.u8("the handle's kind").map_err(invalid)?;
    if found != kind as u8 {
        let other = [Kind::Array, Kind::Stream]
            .into_iter()
            .find(|k| *k as u8 == found)
            .map_or("an unknown object", Kind::name);
        return Err(invalid(format!(
            "the handle shares {other}, expected {}",
            kind.name()
        )));
    }
    let name = reader.bytes("the lender's name").map_err(invalid)?.to_vec();
    let id = reader.u64("the object id").map_err(invalid)?;
    let token: [u8; 16] = reader
        .bytes("the token")
        .map_err(invalid)?
        .try_into()
        .map_err(|_| invalid("the token is not 16 bytes".to_string()))?;
    Ok(Ticket { name, id, token })
}

/// A handle and the lent object it opens, withdrawn from the lender when
/// dropped (the leases granted keep what they hold): what [`SharedArray`]
/// and [`super::SharedStream`] are made of.
#[derive(Debug)]
pub(super) struct Offer {
    pub(super) handle: Vec<u8>,
    pub(super) id: u64,
}

impl Drop for Offer {
    fn drop(&mut self) {
        if let Ok(lender) = Lender::get() {
            lender.withdraw(self.id);
        }
    }
}

/// An array this process shares: alive, it can be opened with its
/// handle; dropped, no new opens (the leases granted keep the memory
/// until each ends).
#[derive(Debug)]
pub struct SharedArray {
    pub(super) offer: Offer,
}

impl SharedArray {
    /// The bytes another process passes to [`open_shared`].
    pub fn handle(&self) -> &[u8] {
        &self.offer.handle
    }
}

/// Shares `array` with other processes on this machine.
///
/// - CPU (and CUDA_HOST) arrays are copied once into a sealed memory file
///   that every opener maps read-only.
/// - Emulated-device arrays are shared as they are: the opener maps the
///   same allocations.
/// - CUDA arrays (with the `cuda` feature) are shared through one CUDA IPC
///   handle per allocation, ordered by an interprocess event.
/// - CUDA_MANAGED and other devices are an error that says what to do.
///
/// The exporter's memory stays alive while the returned [`SharedArray`]
/// lives and while any opener holds a lease.
pub fn share(array: &DeviceArray) -> Result<SharedArray> {
    let backend::Plan {
        mut exporter,
        array,
        device_type,
        device_id,
    } = backend::plan(array)?;
    let mut layout_bytes = Writer::default();
    layout::write(&mut layout_bytes, &array, &mut |ptr, len| {
        exporter.place(ptr, len)
    })
    .map_err(invalid)?;
    let exported = exporter.finish()?;
    let lender = Lender::get().map_err(Error::Share)?;
    let ticket = lender
        .lend(exported.fds, exported.keep)
        .map_err(Error::Share)?;
    // The shared array withdraws the ticket on every path from here on.
    // The offer withdraws the ticket on every path from here on.
    let mut offer = Offer {
        handle: Vec::new(),
        id: ticket.id,
    };
    let mut handle = write_header(Kind::Array, &ticket);
    handle.u32(device_type.0 as u32);
    handle.i64(device_id);
    handle.field(array.field()).map_err(invalid)?;
    handle.u32(exported.sizes.len() as u32);
    for size in exported.sizes {
        handle.u64(size);
    }
    handle.bytes(&exported.extra);
    let mut bytes = handle.into_bytes();
    bytes.extend_from_slice(&layout_bytes.into_bytes());
    offer.handle = bytes;
    Ok(SharedArray { offer })
}

/// Opens an array another process (or this one) shared, over the same
/// memory (no copy), validated at `level` like any import. The array
/// holds a lease on the exporter's memory until its last reference goes.
pub fn open_shared(handle: &[u8], level: ValidationLevel) -> Result<DeviceArray> {
    let mut reader = Reader::new(handle);
    let ticket = read_header(&mut reader, Kind::Array)?;
    let device_type = DeviceType(reader.u32("the device type").map_err(invalid)? as i32);
    let device_id = reader.i64("the device id").map_err(invalid)?;
    let field = reader.field().map_err(invalid)?;
    let n_allocations = reader.u32("the allocation count").map_err(invalid)? as usize;
    if n_allocations > super::lease::MAX_ALLOCATIONS {
        return Err(invalid(format!(
            "the handle has {n_allocations} allocations (at most {})",
            super::lease::MAX_ALLOCATIONS
        )));
    }
    let sizes = (0..n_allocations)
        .map(|i| {
            let size = reader.u64("an allocation's size").map_err(invalid)?;
            usize::try_from(size).map_err(|_| invalid(format!("allocation {i} has {size} bytes")))
        })
        .collect::<Result<Vec<_>>>()?;
    let extra = reader.bytes("the device's part").map_err(invalid)?;
    let (lease, fds) = borrow(&ticket).map_err(Error::Share)?;
    let Opened {
        allocations,
        owner,
        sync_event,
        device_id: local_id,
    } = backend::open(device_type, device_id, &sizes, extra, fds, &lease)?;
    let device_id = local_id.unwrap_or(device_id);
    // The mappings go before the lease that keeps the exporter's memory.
    let owner: Box<dyn std::any::Any + Send + Sync> = Box::new((owner, lease));
    // SAFETY: each allocation is mapped for its length and kept by `owner`;
    // the exporter finished its work before the handle existed (CPU and
    // emulated) or the event orders the opener after it (CUDA).
    let array = unsafe {
        layout::open_with_event(
            &mut reader,
            field,
            &allocations,
            owner,
            (device_type, device_id, sync_event),
            level,
        )
    }
    .map_err(invalid)?;
    if !reader.finished() {
        return Err(invalid("the handle has bytes after its layout".to_string()));
    }
    Ok(array)
}

impl DeviceArray {
    /// Shares this array with other processes on this machine: [`share`].
    pub fn share(&self) -> Result<SharedArray> {
        share(self)
    }

    /// Opens an array another process shared: [`open_shared`].
    pub fn open_shared(handle: &[u8], level: ValidationLevel) -> Result<DeviceArray> {
        open_shared(handle, level)
    }
}

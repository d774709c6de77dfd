//! Sharing arrays of the `CUDA` device (feature `cuda`): one CUDA IPC
//! memory handle per *allocation* that holds a buffer (buffers of one
//! allocation share it and carry their offsets), and an interprocess event
//! that orders every opener after the producer's work
//! (docs/design/sharing.md, "Per device → CUDA").
//!
//! - The exporter finds each buffer's allocation with
//!   `cuMemGetAddressRange` (foreign buffers included), takes its handle
//!   with `cuIpcGetMemHandle`, and records an event created with
//!   `CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING` on a stream of its
//!   own that first waits on the array's `sync_event`. The host does not
//!   wait: `share` returns while the producer's work may still be queued.
//! - The handle's device part names the GPU by UUID (`cuDeviceGetUuid`):
//!   ordinals differ between processes under `CUDA_VISIBLE_DEVICES`.
//! - The opener maps each allocation (`cuIpcOpenMemHandle`, with
//!   `CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS`), opens the event
//!   (`cuIpcOpenEventHandle`) and makes it the opened array's
//!   `sync_event`, so its copies and kernels wait for the producer's work
//!   on the GPU, and host reads after a host wait. The mappings are closed
//!   and the event destroyed when the opened array's last reference goes,
//!   before its lease ends; the lease keeps the exporter's array (its
//!   memory) and its event alive until then.
//! - The driver does not let a process open its own handles: opening a
//!   share in the process that made it is an error
//!   (`CUDA_ERROR_INVALID_CONTEXT`).
//!
//! **An exporter that dies.** The driver frees a process's allocations
//! when it exits, SIGKILL included, and with them every other process's
//! IPC mapping of them: an opener's array then names memory that is gone.
//! Each mapping is therefore tied to its lease: when the lease's connection
//! ends (the kernel closes it as the exporter exits), every later copy
//! that touches the mapping (to the host, to another device, a re-export's
//! copy) is a clear error naming the exporter's pid, checked as the copy
//! is queued. What the host cannot stop: a copy or kernel queued before
//! the exporter ended, and a consumer that was handed the raw pointers
//! through the C Device Data Interface.

use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Arc;

use super::backend::{self, Allocations, Exported, Opened};
use super::handle::invalid;
use super::layout::Place;
use super::lease::Lease;
use crate::abi::DeviceType;
use crate::device::cuda::ipc::{self, InterprocessEvent, IpcMapping, HANDLE_SIZE};
use crate::device::cuda::{self, CudaDevice};
use crate::device::DeviceRef;
use crate::error::{Error, Result};
use crate::DeviceArray;

/// The version of the device part's layout.
const EXTRA_VERSION: u8 = 1;

/// The handle's device part: which GPU, each allocation's memory handle,
/// the event's handle.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Extra {
    uuid: [u8; 16],
    memory: Vec<[u8; HANDLE_SIZE]>,
    event: [u8; HANDLE_SIZE],
}

impl Extra {
    /// `version, uuid, count (u32 LE), count memory handles, event handle`.
    fn encode(&self) -> Vec<u8> {
        let mut bytes = Vec::with_capacity(1 + 16 + 4 + (self.memory.len() + 1) * HANDLE_SIZE);
        bytes.push(EXTRA_VERSION);
        bytes.extend_from_slice(&self.uuid);
        bytes.extend_from_slice(&(self.memory.len() as u32).to_le_bytes());
        for handle in &self.memory {
            bytes.extend_from_slice(handle);
        }
        bytes.extend_from_slice(&self.event);
        bytes
    }

    /// Reads the device part of a handle of `allocations` allocations
    /// (hostile input: every length is checked).
    fn decode(bytes: &[u8], allocations: usize) -> Result<Extra, String> {
        const HEAD: usize = 1 + 16 + 4;
        if bytes.len() < HEAD {
            return Err(format!(
                "the CUDA part of the handle has {} bytes, shorter than its {HEAD}-byte header",
                bytes.len()
            ));
        }
        if bytes[0] != EXTRA_VERSION {
            return Err(format!(
                "the CUDA part of the handle has version {}, this build reads version \
                 {EXTRA_VERSION}",
                bytes[0]
            ));
        }
        let uuid: [u8; 16] = bytes[1..17].try_into().map_err(|_| "uuid".to_string())?;
        let count =
            u32::from_le_bytes(bytes[17..21].try_into().map_err(|_| "count".to_string())?) as usize;
        if count != allocations {
            return Err(format!(
                "the CUDA part of the handle has {count} memory handles for {allocations} \
                 allocations"
            ));
        }
        let expected = (count + 1)
            .checked_mul(HANDLE_SIZE)
            .and_then(|n| n.checked_add(HEAD))
            .ok_or_else(|| format!("{count} memory handles overflow"))?;
        if bytes.len() != expected {
            return Err(format!(
                "the CUDA part of the handle has {} bytes, expected {expected} ({count} memory \
                 handles and an event handle of {HANDLE_SIZE} bytes each)",
                bytes.len()
            ));
        }
        let mut chunks = bytes[HEAD..].chunks_exact(HANDLE_SIZE);
        let memory = chunks
            .by_ref()
            .take(count)
            .map(|c| c.try_into().map_err(|_| "memory handle".to_string()))
            .collect::<Result<Vec<_>, _>>()?;
        let event = chunks
            .next()
            .and_then(|c| c.try_into().ok())
            .ok_or_else(|| "the event handle is missing".to_string())?;
        Ok(Extra {
            uuid,
            memory,
            event,
        })
    }
}

struct Exporter {
    device: DeviceRef,
    /// The array shared: the leases keep it (its memory) alive.
    array: DeviceArray,
    allocations: Allocations<[u8; HANDLE_SIZE]>,
}

/// What a lease keeps in the exporter: the array's memory and the event
/// the openers wait on.
struct Kept {
    _event: InterprocessEvent,
    _array: DeviceArray,
}

/// The exporter of `array`, which is laid out as it is (no copy).
pub(super) fn exporter(array: &DeviceArray) -> Result<(Box<dyn backend::Exporter>, DeviceArray)> {
    let device = cuda::device(DeviceType::CUDA, array.device_id())?;
    let exporter = Exporter {
        device,
        array: array.clone(),
        allocations: Allocations::default(),
    };
    Ok((Box::new(exporter), array.clone()))
}

impl Exporter {
    fn cuda(&self) -> Result<&CudaDevice> {
        CudaDevice::require(self.device.as_ref())
    }
}

impl backend::Exporter for Exporter {
    fn place(&mut self, ptr: *const u8, len: usize) -> Result<Place, String> {
        let device = CudaDevice::require(self.device.as_ref()).map_err(|e| e.to_string())?;
        self.allocations.place(ptr, len, |address| {
            let (base, size) = device.allocation_of(address)?;
            let handle = device.ipc_memory_handle(base).map_err(|e| {
                format!(
                    "the buffer at {address:#x} lies in an allocation of {size} bytes at \
                     {base:#x} that has no IPC handle (only cuMemAlloc memory has one): {e}"
                )
            })?;
            Ok((base, size, handle))
        })
    }

    fn finish(self: Box<Self>) -> Result<Exported> {
        let device = self.cuda()?;
        let ordinal = i32::try_from(self.array.device_id()).map_err(|_| {
            Error::device(
                DeviceType::CUDA,
                self.array.device_id(),
                "not a GPU ordinal",
            )
        })?;
        let uuid = ipc::device_uuid(ordinal)?;
        // SAFETY: the array's sync_event is NULL or a CUevent* its
        // producer keeps alive while the array lives (spec, "Synchronization
        // event types").
        let (event, event_handle) =
            unsafe { device.interprocess_event_after(self.array.sync_event()) }?;
        let Exporter {
            array, allocations, ..
        } = *self;
        let mut sizes = Vec::with_capacity(allocations.found.len());
        let mut memory = Vec::with_capacity(allocations.found.len());
        for (_, size, handle) in allocations.found {
            sizes.push(size as u64);
            memory.push(handle);
        }
        let extra = Extra {
            uuid,
            memory,
            event: event_handle,
        };
        Ok(Exported {
            sizes,
            fds: Vec::new(),
            extra: extra.encode(),
            keep: Arc::new(Kept {
                _event: event,
                _array: array,
            }),
        })
    }
}

/// What the opened array's storage keeps: the mappings and the event,
/// closed and destroyed (with their context current) when it is dropped.
struct OpenedShare {
    _event: InterprocessEvent,
    _mappings: Vec<IpcMapping>,
}

/// Maps a CUDA share's allocations on the local GPU with the UUID the
/// handle names, and opens its event as the array's `sync_event`.
pub(super) fn open(
    device_id: i64,
    sizes: &[usize],
    extra: &[u8],
    fds: Vec<OwnedFd>,
    lease: &Lease,
) -> Result<Opened> {
    if !fds.is_empty() {
        return Err(invalid(format!(
            "a CUDA share passes no memory files, the exporter sent {}",
            fds.len()
        )));
    }
    let extra = Extra::decode(extra, sizes.len()).map_err(invalid)?;
    let ordinal = ipc::ordinal_of(&extra.uuid)?.ok_or_else(|| {
        Error::device(
            DeviceType::CUDA,
            device_id,
            format!(
                "the shared array is on the GPU {}, which this process does not see \
                 (CUDA_VISIBLE_DEVICES?)",
                ipc::uuid_text(&extra.uuid)
            ),
        )
    })?;
    let local = cuda::device(DeviceType::CUDA, ordinal.into())?;
    let device = CudaDevice::require(local.as_ref())?;
    let mut mappings = Vec::with_capacity(sizes.len());
    for (i, (handle, &size)) in extra.memory.iter().zip(sizes).enumerate() {
        let mapping = device.open_ipc_memory(handle).map_err(|e| {
            Error::device(
                DeviceType::CUDA,
                ordinal.into(),
                format!("shared allocation {i}: {e}"),
            )
        })?;
        let (_, mapped) = mapping.range();
        if mapped < size {
            return Err(invalid(format!(
                "shared allocation {i} maps {mapped} bytes, the handle says {size}"
            )));
        }
        // The lease outlives the mapping (the opened array drops its
        // mappings first).
        mapping.watch(lease.socket().as_raw_fd(), lease.exporter_pid());
        mappings.push(mapping);
    }
    let event = device.open_ipc_event(&extra.event)?;
    let sync_event = event.sync_event();
    Ok(Opened {
        allocations: mappings
            .iter()
            .zip(sizes)
            .map(|(m, &size)| (m.range().0, size))
            .collect(),
        owner: Box::new(OpenedShare {
            _event: event,
            _mappings: mappings,
        }),
        sync_event,
        device_id: Some(ordinal.into()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn extra(n: usize) -> Extra {
        Extra {
            uuid: *b"0123456789abcdef",
            memory: (0..n).map(|i| [i as u8; HANDLE_SIZE]).collect(),
            event: [0xee; HANDLE_SIZE],
        }
    }

    #[test]
    fn the_device_part_round_trips() {
        for n in [0, 1, 3] {
            assert_eq!(Extra::decode(&extra(n).encode(), n), Ok(extra(n)));
        }
    }

    #[test]
    fn a_forged_device_part_is_a_clear_error() {
        let bytes = extra(2).encode();
        let cases: Vec<(Vec<u8>, usize, &str)> = vec![
            (Vec::new(), 2, "shorter than its 21-byte header"),
            (bytes[..20].to_vec(), 2, "shorter than its 21-byte header"),
            (bytes[..bytes.len() - 1].to_vec(), 2, "expected 213"),
            ([&bytes[..], &[0]].concat(), 2, "expected 213"),
            (bytes.clone(), 3, "2 memory handles for 3 allocations"),
            ([&[9u8][..], &bytes[1..]].concat(), 2, "version 9"),
        ];
        for (forged, allocations, expected) in cases {
            let err = Extra::decode(&forged, allocations).unwrap_err();
            assert!(err.contains(expected), "{expected}: {err}");
        }
        let mut huge = bytes.clone();
        huge[17..21].copy_from_slice(&u32::MAX.to_le_bytes());
        let err = Extra::decode(&huge, u32::MAX as usize).unwrap_err();
        assert!(err.contains("expected"), "{err}");
    }
}

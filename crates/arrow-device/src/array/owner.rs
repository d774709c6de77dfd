//! Owners of memory: what keeps an array's buffers valid, below every
//! module that makes or reads arrays (export, import, copies, the CUDA
//! Array Interface and DLPack adapters).
//!
//! * [`Owner`]: any value whose life is the memory's. An exported tree's
//!   private data holds one per node, so children moved out by a consumer
//!   stay valid after the parent is released (spec: "Moving child
//!   arrays"); a [`DeviceArray`](crate::DeviceArray) holds one for memory
//!   it did not import.
//! * [`PendingMemory`]: device memory that queued work writes, with what
//!   that work reads; dropping it first waits for the work.

use smallvec::SmallVec;

use crate::device::{DeviceBuffer, DeviceRef, Event, Stream, SyncEvent};

/// What keeps memory valid: the memory lives as long as the value.
pub(crate) type Owner = std::sync::Arc<dyn std::any::Any + Send + Sync>;

/// Device memory that queued work writes (a copied tree, the bitmaps of a
/// conversion), with what that work reads. Dropping it first waits for the
/// work (the event), so sources and destination stay valid while it runs,
/// even when a consumer releases the array without waiting on its
/// `sync_event`.
pub(crate) struct PendingMemory {
    device: DeviceRef,
    event: Event,
    _stream: Stream,
    _memory: SmallVec<[DeviceBuffer; 2]>,
    /// What the work reads, when the device could not take it over.
    _sources: Option<Box<dyn std::any::Any + Send + Sync>>,
}

impl PendingMemory {
    /// Owns `memory`, written by work queued on `stream` before `event`
    /// (of `device`) was recorded, and `sources`, which that work reads.
    pub(crate) fn new(
        device: DeviceRef,
        event: Event,
        stream: Stream,
        memory: SmallVec<[DeviceBuffer; 2]>,
        sources: Option<Box<dyn std::any::Any + Send + Sync>>,
    ) -> Self {
        PendingMemory {
            device,
            event,
            _stream: stream,
            _memory: memory,
            _sources: sources,
        }
    }
}

impl Drop for PendingMemory {
    fn drop(&mut self) {
        // SAFETY: the event was created by `device` and lives in `self`.
        let sync = unsafe { SyncEvent::new(self.event.sync_event()) };
        // A failure cannot be reported from a destructor; the memory is freed
        // by the device's own deallocation, which orders after pending work.
        let _ = sync.wait_host(self.device.as_ref());
    }
}

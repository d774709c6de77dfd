//! Target `share_handle`: the bytes of a share handle as an opener reads
//! them ([`arrow_device::share`]): a schema tree ([`Reader::field`]), then
//! an array tree's layout over the shared allocations ([`layout::open`]),
//! imported on the CPU at every validation level.
//!
//! This file holds the harness ([`run`]) and its oracles; `memory.rs` the
//! allocations the layout points into and the packing of an array into
//! one, `seeds.rs` the named inputs.
//!
//! ## Byte layout
//!
//! The handle's own encoding (`share::codec`: integers little-endian,
//! `bytes` a u64 length and that many bytes), read with the opener's
//! [`Reader`], with the allocations' contents where a real handle names
//! its memory file (an opener maps that; here it is copied from the input):
//!
//! ```text
//! case        := field allocations layout
//! field       := a schema tree as codec::Writer::field writes it
//! allocations := count:u8 (% 4) allocation*
//! allocation  := bytes, at most 64 KiB: copied into memory of exactly
//!                that size, 64-byte aligned (as a mapping's buffers are)
//! layout      := an array tree's layout as layout::write writes it
//! ```
//!
//! A read error anywhere is the decoder's to report, never a crash.
//!
//! ## Memory that is real by the handle
//!
//! Unlike the C Data Interface, a handle says how long every buffer is and
//! in which allocation it lies, and the opener checks those against the
//! allocations it mapped. So nothing in the handle may make the opener
//! read outside them: each allocation is backed by exactly its bytes, and
//! a read past one is the library's bug (AddressSanitizer reports it; the
//! oracles below check the buffers the array ends up with).
//!
//! ## Oracles
//!
//! * Nothing panics; whatever the level, an open's owner (the allocations)
//!   is dropped exactly once: before an error returns, and otherwise only
//!   when the array and everything converted from it are gone.
//! * Every buffer of an opened array (children and dictionary included)
//!   lies inside one allocation, for the size the library uses.
//! * Levels are monotonic: a case opened at a level opens at every lower
//!   one. Whatever opens converts to the host (or fails cleanly) into data
//!   arrow-rs' `validate_full` can read.
//! * A decoded field writes ([`Writer::field`]) and reads back equal.
//! * What opens at `full` converts to the host, passes arrow-rs'
//!   `validate_full`, converts to a record batch when it is a struct, and
//!   comes back equal through [`layout::write`] into a fresh allocation and
//!   [`layout::open`] over it.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use arrow_array::{Array, ArrayRef};
use arrow_device::abi::DeviceType;
use arrow_device::share::codec::{Reader, Writer};
use arrow_device::share::layout;
use arrow_device::{DeviceArray, ValidationLevel};
use arrow_schema::{DataType, Field};

use crate::array_import::assert_same;

mod memory;
mod seeds;

pub use memory::{encode, pack, Allocation};
pub use seeds::seeds;

/// The most allocations a case has.
const MAX_ALLOCATIONS: u8 = 3;
/// The most bytes of one allocation.
const MAX_ALLOCATION: usize = 64 * 1024;

const LEVELS: [ValidationLevel; 4] = [
    ValidationLevel::None,
    ValidationLevel::Minimal,
    ValidationLevel::Default,
    ValidationLevel::Full,
];

pub fn run(data: &[u8]) {
    let Ok(field) = Reader::new(data).field() else {
        return;
    };
    field_round_trips(&field);
    let mut accepted = Vec::new();
    for level in LEVELS {
        let Some(opened) = open(data, level) else {
            return;
        };
        accepted.push(opened.result.is_ok());
        opened.check(level);
    }
    for pair in accepted.windows(2) {
        assert!(
            pair[0] || !pair[1],
            "levels are monotonic: {accepted:?} for {LEVELS:?}"
        );
    }
}

/// A decoded field writes and reads back the same.
fn field_round_trips(field: &Field) {
    let mut writer = Writer::default();
    writer
        .field(field)
        .unwrap_or_else(|e| panic!("a decoded field does not write: {e}"));
    let bytes = writer.into_bytes();
    let mut reader = Reader::new(&bytes);
    let back = reader
        .field()
        .unwrap_or_else(|e| panic!("a written field does not read: {e}"));
    assert!(reader.finished(), "a written field reads to its end");
    assert_eq!(&back, field, "a field changed through the handle");
}

/// One open of a case, and what to check it against.
struct Opened {
    result: Result<DeviceArray, String>,
    /// Where the allocations lie: (address, length).
    allocations: Vec<(usize, usize)>,
    /// How often the owner was dropped.
    drops: Arc<AtomicUsize>,
}

/// Decodes `data` and opens it at `level`, as an opener does; `None` where
/// the input ends or lies before the layout (the field, the allocations).
fn open(data: &[u8], level: ValidationLevel) -> Option<Opened> {
    let mut reader = Reader::new(data);
    let field = reader.field().ok()?;
    let count = reader.u8("the allocation count").ok()? % (MAX_ALLOCATIONS + 1);
    let mut memory = Vec::new();
    for _ in 0..count {
        let bytes = reader.bytes("an allocation").ok()?;
        if bytes.len() > MAX_ALLOCATION {
            return None;
        }
        memory.push(Allocation::copy_of(bytes));
    }
    let allocations: Vec<(*const u8, usize)> =
        memory.iter().map(|a| (a.as_ptr(), a.len())).collect();
    let drops = Arc::new(AtomicUsize::new(0));
    let owner = Owner {
        _memory: memory,
        drops: drops.clone(),
    };
    if crate::debug() {
        eprintln!("level {level:?}, field {field:?}, allocations {allocations:?}");
    }
    // SAFETY: each allocation is valid for its length on the host, kept
    // alive by `owner`, and written completely (copied above).
    let result = unsafe {
        layout::open(
            &mut reader,
            field,
            &allocations,
            Box::new(owner),
            DeviceType::CPU,
            -1,
            level,
        )
    };
    if crate::debug() {
        eprintln!("{level:?}: {:?}", result.as_ref().map(|a| a.data_type()));
    }
    Some(Opened {
        result,
        allocations: allocations
            .iter()
            .map(|&(ptr, len)| (ptr as usize, len))
            .collect(),
        drops,
    })
}

impl Opened {
    fn check(self, level: ValidationLevel) {
        let drops = || self.drops.load(Ordering::SeqCst);
        let array = match self.result {
            Ok(array) => array,
            Err(_) => {
                assert_eq!(drops(), 1, "a refused handle drops its owner once");
                return;
            }
        };
        assert_eq!(drops(), 0, "an opened array's owner was dropped");
        assert_eq!(array.device_type(), DeviceType::CPU);
        buffers_inside(&array, &self.allocations, "root");
        let host = array.to_host();
        if level == ValidationLevel::Full {
            let host = host.unwrap_or_else(|e| panic!("opened at full, to_host fails: {e}"));
            host.to_data()
                .validate_full()
                .unwrap_or_else(|e| panic!("opened at full, arrow-rs rejects it: {e}"));
            if let DataType::Struct(_) = array.data_type() {
                if let Ok(batch) = array.to_record_batch() {
                    assert_eq!(batch.num_rows(), array.len());
                }
            }
            round_trip(&array, &host);
        } else if let Ok(host) = host {
            let _ = host.to_data().validate_full();
        }
        drop(array);
        assert_eq!(drops(), 1, "the owner is dropped once with the array");
    }
}

/// The allocations of one open and a count of their drops.
struct Owner {
    _memory: Vec<Allocation>,
    drops: Arc<AtomicUsize>,
}

impl Drop for Owner {
    fn drop(&mut self) {
        self.drops.fetch_add(1, Ordering::SeqCst);
    }
}

/// Every buffer of `array`'s tree with bytes lies inside one allocation.
fn buffers_inside(array: &DeviceArray, allocations: &[(usize, usize)], path: &str) {
    for (i, info) in array.buffers().iter().enumerate() {
        let Some(len) = info.len.filter(|&len| len > 0) else {
            continue;
        };
        let start = info.ptr as usize;
        let inside = allocations.iter().any(|&(base, size)| {
            start >= base && start - base <= size && len <= size - (start - base)
        });
        assert!(
            inside,
            "{path}: buffer {i} ({len} bytes at {start:#x}) lies outside the allocations {allocations:x?}"
        );
    }
    for (i, child) in array.children().iter().enumerate() {
        buffers_inside(child, allocations, &format!("{path}.{i}"));
    }
    if let Some(dictionary) = array.dictionary() {
        buffers_inside(&dictionary, allocations, &format!("{path}.dictionary"));
    }
}

/// What opened at `full` comes back equal through a new layout over a
/// fresh allocation.
fn round_trip(array: &DeviceArray, host: &ArrayRef) {
    let (memory, layout_bytes) =
        pack(array).unwrap_or_else(|e| panic!("an opened array does not write: {e}"));
    let memory = Allocation::copy_of(&memory);
    let allocations = [(memory.as_ptr(), memory.len())];
    let mut reader = Reader::new(&layout_bytes);
    // SAFETY: `memory` holds every buffer the layout names, on the host,
    // and lives in the owner.
    let again = unsafe {
        layout::open(
            &mut reader,
            array.field().clone(),
            &allocations,
            Box::new(memory),
            DeviceType::CPU,
            -1,
            ValidationLevel::Full,
        )
    }
    .unwrap_or_else(|e| panic!("a re-written layout does not open: {e}"));
    assert!(reader.finished(), "a written layout reads to its end");
    assert_eq!(again.len(), host.len());
    let back = again
        .to_host()
        .unwrap_or_else(|e| panic!("a re-opened array does not convert: {e}"));
    assert_same(host, &back, "layout round trip");
}

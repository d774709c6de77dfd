//! Target `cai`: `__cuda_array_interface__` dicts through the plain-Rust
//! layers of [`arrow_device::cai`]: [`CudaArrayInterface::from_entries`]
//! (which keys, which value types), [`CudaArrayInterface::validate`] (the
//! import rules, giving an [`ImportPlan`]), [`cai::import`] of a plan on
//! the CPU or on CUDA_MANAGED memory read through the host (no GPU, no
//! Python), and [`describe`] / [`typestr()`] back. The CUDA import
//! (`cai::cuda`, feature `cuda`) adds only device work to these, and is not
//! built here.
//!
//! This file holds the harness ([`run`]); `decode.rs` the byte layout
//! below, `build.rs` the dict and the memory behind it, `oracles.rs` what a
//! plan and its import must do, `seeds.rs` the named inputs.
//!
//! ## Byte layout
//!
//! Integers are little-endian; `bytes` is a u16 length and that many bytes,
//! read as UTF-8 lossily where a `str` is wanted.
//!
//! ```text
//! case      := target:u8 (bit 0: import onto CUDA_MANAGED, else the CPU)
//!              interface values:bytes mask_values:bytes
//! interface := shape typestr data version strides descr mask stream extras
//!   each entry := mode:u8, by mode % 4: 0 typical (below), 1 absent,
//!                 2 None, 3 any value (`value`)
//!   shape   typical: n:u8 % 4, then n i64: a tuple of ints
//!   typestr typical: form:u8 % 2: 0 composed: order:u8 % 4 (`<>=|`),
//!           kind:u8 % 10 (`biufcMmVOx`), size:u8 (decimal), unit:u8 % 8
//!           (none, `[s]`, `[ms]`, `[us]`, `[ns]`, `[D]`, `[10ms]`, `[`);
//!           1 raw: bytes
//!   data    typical: pointer:u8 % 4 (0 real memory, 1 zero, 2 an address
//!           u64, 3 a negative i64), read_only:u8 (low bit)
//!   version typical: u8 % 4: 3, 2, 1, or 3: an i64
//!   strides typical: n:u8 % 4, then n i64
//!   descr   typical: form:u8 % 3: 0 `[('', typestr)]` (this typestr),
//!           1 `[(name:bytes, typestr)]`, 2 n:u8 % 3 fields of
//!           (name:bytes, typestr:bytes)
//!   mask    typical: the dict of an `interface` (past one level: None)
//!   stream  typical: an i64
//!   extras  := n:u8 % 4, then n (key, value): key:u8 % 9 one of the eight
//!              names above (last one wins) or 8: bytes
//! value     := kind:u8 % 7 (nesting past 3 levels: None): None, Bool:u8,
//!              Int: i64 shifted left by u8 % 72 bits, Str: bytes,
//!              Tuple: n:u8 % 4 values, Dict: n:u8 % 4 of (bytes, value),
//!              Other: bytes
//! ```
//!
//! ## Memory
//!
//! Nothing but [`cai::import`] and the host reads after it touch the
//! memory. A "real memory" pointer points to an allocation that holds every
//! byte the interface claims (computed from the shape, the strides or the
//! C-contiguous ones, and the item size in the type string; it may start
//! before the pointer, for negative strides), filled from `values`, when
//! that fits 64 KiB; otherwise, and for the other pointer forms, the
//! pointer is only validated, never imported. An interface is imported
//! only when the memory holds what the dict claims as read back (a repeated
//! key may change the shape), and its mask's too.
//!
//! ## Oracles
//!
//! * Nothing panics; an interface read from entries writes entries that
//!   read back equal ([`CudaArrayInterface::to_entries`]).
//! * An accepted plan agrees with the interface, checked independently: a
//!   version of 2 or 3; at most one dimension, `len` its extent (1 for
//!   0-d); strides absent or one per dimension and, over more than one
//!   value, the item size; the item size the type string states, the
//!   type's width (1 byte for `|b1`, which alone needs packing); no
//!   foreign byte order on multi-byte types; the byte extent that the
//!   shape and strides span equals `len * itemsize` without overflow, and
//!   ends inside the address space; pointer 0 exactly for empty arrays; a
//!   descr absent or plain; stream 0 refused and the others mapped as the
//!   spec says; a mask of one-byte values of the same length.
//! * The plan's type writes a type string ([`typestr()`]) that plans the
//!   same type and item size.
//! * A plan over real memory imports: zero-copy, with the values written
//!   there, the owner kept until the array is dropped (plans that need a
//!   conversion are refused, and the owner released); on CUDA_MANAGED the
//!   array [`describe`]s itself as an interface that plans the same array.
//!
//! [`ImportPlan`]: arrow_device::cai::ImportPlan
//! [`cai::import`]: arrow_device::cai::import
//! [`describe`]: arrow_device::cai::describe
//! [`typestr()`]: arrow_device::cai::typestr

use arrow_device::cai::CudaArrayInterface;

mod build;
mod decode;
mod oracles;
mod seeds;

pub use decode::{
    decode, encode, CaseSpec, DescrSpec, Entry, InterfaceSpec, PointerSpec, TypestrSpec,
    VersionSpec,
};
use oracles::{check_import, check_plan, check_typestr_round_trip};
pub use seeds::seeds;

pub fn run(data: &[u8]) {
    let case = decode(data);
    let memory = case.interface.memory(&case.values);
    let mask_memory = match &case.interface.mask {
        Entry::Typical(mask) => Some(mask.memory(&case.mask_values)),
        _ => None,
    };
    let mask_address = mask_memory.as_ref().map_or(0, |m| m.address);
    let entries = case.interface.entries(memory.address, mask_address);

    let Ok(interface) = CudaArrayInterface::from_entries(entries) else {
        return;
    };
    let again = CudaArrayInterface::from_entries(interface.to_entries())
        .unwrap_or_else(|e| panic!("the entries of {interface:?} do not read back: {e}"));
    assert_eq!(again, interface, "to_entries then from_entries");

    let Ok(plan) = interface.validate() else {
        return;
    };
    check_plan(&interface, &plan);
    check_typestr_round_trip(&plan);
    // Import only what real memory holds, as read: a repeated key (the
    // last one wins) may claim more than the memory made for the first.
    let mask_real = match (&interface.mask, &mask_memory) {
        (None, _) => true,
        (Some(mask), Some(memory)) => memory.covers(mask),
        (Some(_), None) => false,
    };
    if let (Some(bytes), true) = (&memory.readable, memory.covers(&interface) && mask_real) {
        check_import(&plan, bytes, case.managed);
    }
}

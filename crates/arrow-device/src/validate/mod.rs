//! Validation levels for imported arrays.
//!
//! The structural checks (every level from [`ValidationLevel::Minimal`]) run
//! while the importer walks the structs; [`ValidationLevel::Full`] adds the
//! value checks of `full`, on CPU-accessible memory only: device memory is
//! never read on the host.
//!
//! Whatever the level, two rules hold after import:
//! * data becomes arrow-rs data (`DeviceArray::to_host` and everything built
//!   on it) only with the structure arrow-rs builds its arrays on: child
//!   lengths, first and last offsets, list-view offsets (`structure`, run
//!   where the import level did not cover it);
//! * data reaches an arrow-rs kernel (a conversion to another
//!   representation) only after every value it holds was checked (`full`,
//!   once per tree): kernels trust their input.

//! ```
//! use arrow_array::StringArray;
//! use arrow_device::abi::raw;
//! use arrow_device::{export_array, DeviceArray, ValidationLevel};
//!
//! let (mut array, schema) = export_array(&StringArray::from(vec!["ab", "c"])).unwrap();
//! // Corrupt the length: the offsets buffer is now too short for it.
//! // SAFETY: `release` and `private_data` stay the exporter's.
//! unsafe { raw::array_mut(&mut array.array) }.length = -4;
//! // SAFETY: every pointer is still the exporter's; the length is for
//! // validation to reject.
//! let err = unsafe { DeviceArray::try_new(array, schema, ValidationLevel::Minimal) }.unwrap_err();
//! assert_eq!(err.to_string(), "array: length is -4, expected >= 0");
//! ```

mod full;
pub(crate) use full::{full, structure};

/// How much an importer checks before using a foreign array, as in nanoarrow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub enum ValidationLevel {
    /// Only what keeps this library memory-safe: struct counts, pointers it
    /// must follow, non-negative lengths, buffer sizes and their offsets.
    None,
    /// Metadata: lengths, offsets, null counts, buffer presence, child and
    /// dictionary shape. Reads only the O(1) values that buffer sizes depend
    /// on (first/last offset of string and binary arrays, view variadic
    /// sizes), which every level reads and checks for consistency.
    Minimal,
    /// Minimal plus O(1) reads of data: first/last offsets, view variadic sizes.
    #[default]
    Default,
    /// Default plus every value on CPU-accessible memory: offsets monotonic and
    /// in range, UTF-8, union type ids, run ends, view lengths and buffer
    /// indices, dictionary indices.
    Full,
}

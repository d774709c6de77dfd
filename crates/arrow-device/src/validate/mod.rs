//! Validation levels for imported arrays.
//!
//! The structural checks (every level from [`ValidationLevel::Minimal`]) run
//! while the importer walks the structs; [`ValidationLevel::Full`] adds the
//! value checks of `full`, on CPU-accessible memory only: device memory is
//! never read on the host.

mod full;
pub(crate) use full::full;

/// How much an importer checks before using a foreign array, as in nanoarrow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub enum ValidationLevel {
    /// Only what keeps this library memory-safe while reading the structs
    /// (struct counts, pointers it must follow).
    None,
    /// Metadata only: lengths, offsets, null counts, buffer presence, child
    /// and dictionary shape. Never reads a data buffer.
    Minimal,
    /// Minimal plus O(1) reads of data: first/last offsets, view variadic sizes.
    #[default]
    Default,
    /// Default plus every value on CPU-accessible memory: offsets monotonic and
    /// in range, UTF-8, union type ids, run ends, view lengths and buffer
    /// indices, dictionary indices.
    Full,
}

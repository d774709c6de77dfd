//! Validation levels for imported arrays.
//!
//! The structural checks (every level from [`ValidationLevel::Minimal`]) run
//! while the importer walks the structs; [`ValidationLevel::Full`] adds the
//! value checks of `full`, on host-accessible memory only: device memory is
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
///
/// Each level adds to the one before it. The checks are those of
/// `array::import` (and `validate::full` for [`Full`](ValidationLevel::Full)),
/// every one named in its error with the node's path:
///
/// | level | adds |
/// |---|---|
/// | [`None`](ValidationLevel::None) | the struct is not released; nesting at most 64 deep; `length` and `offset` >= 0 and `offset + length` fits int64; `null_count` -1 or 0..=`length`; `n_buffers` and `n_children` as the type has them (views: validity, views, variadic buffers, then the sizes buffer), `buffers` / `children` / child pointers non-NULL, `dictionary` set exactly for dictionary-encoded types; every buffer the slots need is non-NULL (offsets, values, type ids, union offsets); a CPU array has a NULL `sync_event`. The sizes that depend on data are read, in one batch after the `sync_event`: string and binary first and last offsets (>= 0, first <= last, the data buffer non-NULL when the last offset is > 0) and view variadic sizes (>= 0, their buffers non-NULL when > 0) |
/// | [`Minimal`](ValidationLevel::Minimal) | a validity buffer where `null_count` > 0; child lengths that follow from the parent's metadata: struct and sparse-union children cover `offset + length`, a fixed-size list's child `(offset + length) × size`; run-end encoding: `run_ends` and `values` of equal length, `run_ends` without nulls and non-empty when the array has slots |
/// | [`Default`](ValidationLevel::Default) (the default) | O(1) reads of data for lists and run ends: a list's, large list's or map's first and last offsets (the child covers the last), a run-end array's last run end (covers `offset + length`) |
/// | [`Full`](ValidationLevel::Full) | every value, on host-accessible memory (device memory is never read on the host): offsets monotonic and inside the data or child, list-view offsets and sizes, UTF-8, view lengths, prefixes and buffer indices, run ends increasing, dictionary keys inside the dictionary, union type ids among the declared ones, no nulls in non-nullable children, null counts |
///
/// Whatever the level, data becomes arrow-rs data only with the structure
/// arrow-rs builds its arrays on (checked then where the level did not),
/// and reaches an arrow-rs kernel only after every value was checked (see
/// the module documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub enum ValidationLevel {
    /// What keeps this crate memory-safe while it walks the structs and
    /// sizes the buffers (see the table).
    None,
    /// Metadata that needs no read of data: validity presence and child
    /// lengths.
    Minimal,
    /// Minimal plus O(1) reads of list offsets and of the last run end.
    #[default]
    Default,
    /// Default plus every value, on host-accessible memory.
    Full,
}

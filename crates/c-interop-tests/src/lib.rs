//! The Rust side of the C interop tests: declarations of the C functions in
//! `c/` (see `c/interop.h`) and small safe helpers around them.
//!
//! The C sources are compiled by `build.rs` against
//! `crates/arrow-device/include/arrow_device.h` with
//! `-std=c99 -Wall -Wextra -Werror -pedantic` (and one C++11 file), so the
//! header's validity as C and C++ is checked on every build. The tests in
//! `tests/` then exchange arrays between that C code and `arrow-device`.
//! The sync device stream code (`c/stream.h`) is declared in [`stream`],
//! the async one (`c/async_stream.h`, POSIX only) in `async_stream`.
#![deny(unsafe_op_in_unsafe_fn)]

#[cfg(unix)]
pub mod async_stream;
pub mod stream;

use std::ffi::{c_char, c_int, CStr, CString};
use std::sync::atomic::{AtomicI32, Ordering};

use arrow_device::abi::{ArrowDeviceArray, FFI_ArrowSchema};

/// `struct interop_layout_entry`: one struct (`field` empty) or one member.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct LayoutEntry {
    /// Struct name as in the header, e.g. `ArrowDeviceArray`.
    pub type_name: *const c_char,
    /// Member name, or `""` for the struct itself.
    pub field: *const c_char,
    /// `offsetof` (0 for a struct row).
    pub offset: usize,
    /// `sizeof` of the struct or member.
    pub size: usize,
    /// Alignment of the struct (0 for a member row).
    pub align: usize,
}

/// `struct interop_macro_entry`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct MacroEntry {
    /// The macro's name.
    pub name: *const c_char,
    /// Its value.
    pub value: i64,
}

/// `struct interop_struct_expect` (`c/batch.h`): the `"+s"` schema a C
/// consumer expects, pointing into a [`StructExpect`].
#[repr(C)]
#[derive(Debug)]
pub struct RawStructExpect {
    n_children: i64,
    formats: *const *const c_char,
    names: *const *const c_char,
}

/// The children a C stream consumer expects of a `"+s"` schema, as the C
/// strings and pointer arrays its [`RawStructExpect`] points to.
#[derive(Debug)]
pub struct StructExpect {
    _strings: Vec<CString>,
    formats: Vec<*const c_char>,
    names: Vec<*const c_char>,
}

impl StructExpect {
    /// Children as `(format, name)`.
    pub fn new<S: AsRef<str>>(children: &[(S, S)]) -> Self {
        let c_string = |s: &S| CString::new(s.as_ref()).expect("no NUL in test names");
        let formats: Vec<CString> = children.iter().map(|(f, _)| c_string(f)).collect();
        let names: Vec<CString> = children.iter().map(|(_, n)| c_string(n)).collect();
        let format_ptrs = formats.iter().map(|s| s.as_ptr()).collect();
        let name_ptrs = names.iter().map(|s| s.as_ptr()).collect();
        let mut strings = formats;
        strings.extend(names);
        StructExpect {
            _strings: strings,
            formats: format_ptrs,
            names: name_ptrs,
        }
    }

    /// The C view, valid while `self` lives (moving `self` moves no heap
    /// buffer it points to).
    pub fn raw(&self) -> RawStructExpect {
        RawStructExpect {
            n_children: self.formats.len() as i64,
            formats: self.formats.as_ptr(),
            names: self.names.as_ptr(),
        }
    }
}

/// Size of the text fields of [`Report`] (`INTEROP_TEXT`).
pub const INTEROP_TEXT: usize = 512;
/// Number of release-counter slots in `producer.c` (`INTEROP_SLOTS`).
pub const INTEROP_SLOTS: i32 = 1024;

/// `struct interop_report`: what the C consumer saw (see `c/interop.h`).
#[repr(C)]
#[derive(Clone)]
pub struct Report {
    /// 0, or the line of `consumer.c` whose check failed.
    pub status: i32,
    /// `ArrowDeviceArray.device_type` as read by C.
    pub device_type: i32,
    /// `ArrowDeviceArray.device_id` as read by C.
    pub device_id: i64,
    /// 1 when `sync_event` was NULL.
    pub sync_event_is_null: i32,
    /// 1 when `reserved[0..3]` were all zero.
    pub reserved_all_zero: i32,
    /// The root's `length`.
    pub length: i64,
    /// The root's `null_count` as declared.
    pub declared_null_count: i64,
    /// Nulls counted from the root's validity bitmap.
    pub counted_null_count: i64,
    /// Sum of the non-null int32 values.
    pub int_sum: i64,
    /// 1 when the array's release callback set `release` to NULL.
    pub array_release_nulled: i32,
    /// 1 when the schema's release callback set `release` to NULL.
    pub schema_release_nulled: i32,
    /// Moved-out children (arrays and schemas) read after their parents were
    /// released, then released with `release` set to NULL.
    pub moved_children_released: i32,
    /// `ArrowSchema.flags` of the root.
    pub root_flags: i64,
    /// `ArrowSchema.flags` of the first two children.
    pub child_flags: [i64; 2],
    format: [c_char; 16],
    child_names: [c_char; 64],
    ints: [c_char; INTEROP_TEXT],
    strs: [c_char; INTEROP_TEXT],
}

impl Report {
    /// The root's format string.
    pub fn format(&self) -> String {
        text(&self.format)
    }
    /// The struct children's names, joined by `,`.
    pub fn child_names(&self) -> String {
        text(&self.child_names)
    }
    /// The int32 values read, joined by `|`, nulls as `null`.
    pub fn ints(&self) -> String {
        text(&self.ints)
    }
    /// The utf8 values read, joined by `|`, nulls as `null`.
    pub fn strs(&self) -> String {
        text(&self.strs)
    }
}

impl std::fmt::Debug for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Report")
            .field("status", &self.status)
            .field("device_type", &self.device_type)
            .field("device_id", &self.device_id)
            .field("format", &self.format())
            .field("length", &self.length)
            .field("ints", &self.ints())
            .field("strs", &self.strs())
            .finish_non_exhaustive()
    }
}

fn text(chars: &[c_char]) -> String {
    // SAFETY: c_char and u8 have the same size and alignment.
    let bytes = unsafe { std::slice::from_raw_parts(chars.as_ptr().cast::<u8>(), chars.len()) };
    CStr::from_bytes_until_nul(bytes)
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|_| String::from("<not NUL-terminated>"))
}

/// A C producer: fills a consumer-allocated device array and schema.
pub type Producer = unsafe extern "C" fn(
    slot: c_int,
    out: *mut ArrowDeviceArray,
    schema: *mut FFI_ArrowSchema,
) -> c_int;

extern "C" {
    pub fn interop_layout_table(n: *mut usize) -> *const LayoutEntry;
    pub fn interop_device_type_macros(n: *mut usize) -> *const MacroEntry;
    pub fn interop_flag_macros(n: *mut usize) -> *const MacroEntry;

    pub fn interop_coexist_ours_first() -> usize;
    pub fn interop_coexist_theirs_first() -> usize;
    pub fn interop_cpp_sizeof_device_array() -> usize;
    pub fn interop_cpp_read_device_fields(
        array: *const ArrowDeviceArray,
        device_id: *mut i64,
    ) -> i32;

    pub fn interop_array_releases(slot: c_int) -> i64;
    pub fn interop_schema_releases(slot: c_int) -> i64;
    pub fn interop_child_array_releases(slot: c_int) -> i64;
    pub fn interop_child_schema_releases(slot: c_int) -> i64;
    pub fn interop_live_allocations(slot: c_int) -> i64;

    pub fn interop_produce_int32(
        slot: c_int,
        offset: i64,
        out: *mut ArrowDeviceArray,
        schema: *mut FFI_ArrowSchema,
    ) -> c_int;
    pub fn interop_produce_utf8(
        slot: c_int,
        out: *mut ArrowDeviceArray,
        schema: *mut FFI_ArrowSchema,
    ) -> c_int;
    pub fn interop_produce_struct(
        slot: c_int,
        out: *mut ArrowDeviceArray,
        schema: *mut FFI_ArrowSchema,
    ) -> c_int;
    pub fn interop_produce_int32_wrong_n_buffers(
        slot: c_int,
        out: *mut ArrowDeviceArray,
        schema: *mut FFI_ArrowSchema,
    ) -> c_int;
    pub fn interop_produce_struct_missing_child(
        slot: c_int,
        out: *mut ArrowDeviceArray,
        schema: *mut FFI_ArrowSchema,
    ) -> c_int;
    pub fn interop_produce_utf8_decreasing_offsets(
        slot: c_int,
        out: *mut ArrowDeviceArray,
        schema: *mut FFI_ArrowSchema,
    ) -> c_int;
    pub fn interop_int32_values_pointer(array: *const ArrowDeviceArray) -> *const std::ffi::c_void;

    pub fn interop_consume(
        array: *mut ArrowDeviceArray,
        schema: *mut FFI_ArrowSchema,
        report: *mut Report,
    );
    pub fn interop_consume_moved_children(
        array: *mut ArrowDeviceArray,
        schema: *mut FFI_ArrowSchema,
        report: *mut Report,
    );
    pub fn interop_report_size() -> usize;
}

/// Reads a C string from the tables above.
///
/// # Safety
/// `ptr` must be a NUL-terminated string that outlives `'a`.
pub unsafe fn c_str<'a>(ptr: *const c_char) -> &'a str {
    // SAFETY: guaranteed by the caller; the C tables hold static literals.
    unsafe { CStr::from_ptr(ptr) }
        .to_str()
        .expect("ASCII names")
}

/// The layout table of `layout.c` as `(type, field, offset, size, align)`.
pub fn c_layout() -> Vec<(String, String, usize, usize, usize)> {
    let mut n = 0;
    // SAFETY: the function writes the length and returns a static table.
    let table = unsafe { interop_layout_table(&mut n) };
    // SAFETY: `table` points to `n` static entries.
    let rows = unsafe { std::slice::from_raw_parts(table, n) };
    rows.iter()
        .map(|e| {
            // SAFETY: the names are static string literals in layout.c.
            let (t, f) = unsafe { (c_str(e.type_name), c_str(e.field)) };
            (t.to_owned(), f.to_owned(), e.offset, e.size, e.align)
        })
        .collect()
}

/// A macro table of `layout.c` as `(name, value)`.
pub fn c_macros(
    table: unsafe extern "C" fn(*mut usize) -> *const MacroEntry,
) -> Vec<(String, i64)> {
    let mut n = 0;
    // SAFETY: the function writes the length and returns a static table.
    let ptr = unsafe { table(&mut n) };
    // SAFETY: `ptr` points to `n` static entries.
    let rows = unsafe { std::slice::from_raw_parts(ptr, n) };
    // SAFETY: the names are static string literals in layout.c.
    rows.iter()
        .map(|e| (unsafe { c_str(e.name) }.to_owned(), e.value))
        .collect()
}

/// Release bookkeeping of one producer slot, read from C.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Releases {
    /// Release calls on the base `ArrowArray`.
    pub array: i64,
    /// Release calls on the base `ArrowSchema`.
    pub schema: i64,
    /// Release calls on child arrays.
    pub child_arrays: i64,
    /// Release calls on child schemas.
    pub child_schemas: i64,
    /// Allocations not yet freed.
    pub live_allocations: i64,
}

/// A slot of the C producers' bookkeeping used by no other test of this
/// process.
pub fn next_slot() -> c_int {
    static NEXT: AtomicI32 = AtomicI32::new(0);
    let slot = NEXT.fetch_add(1, Ordering::Relaxed);
    assert!(slot < INTEROP_SLOTS, "out of producer slots");
    slot
}

/// Reads the release bookkeeping of `slot`.
pub fn releases(slot: c_int) -> Releases {
    // SAFETY: plain reads of C globals; each slot is only written by the
    // releases of structs produced for it, which happen on this test's thread.
    unsafe {
        Releases {
            array: interop_array_releases(slot),
            schema: interop_schema_releases(slot),
            child_arrays: interop_child_array_releases(slot),
            child_schemas: interop_child_schema_releases(slot),
            live_allocations: interop_live_allocations(slot),
        }
    }
}

/// Runs a C producer into fresh structs for a new slot; panics if it fails.
pub fn produce(producer: Producer) -> (c_int, ArrowDeviceArray, FFI_ArrowSchema) {
    let slot = next_slot();
    let mut array = ArrowDeviceArray::empty();
    let mut schema = FFI_ArrowSchema::empty();
    // SAFETY: both pointers are to valid, writable, released structs, which
    // the producer overwrites without reading.
    let rc = unsafe { producer(slot, &mut array, &mut schema) };
    assert_eq!(rc, 0, "C producer failed");
    (slot, array, schema)
}

/// A C consumer entry point (`interop_consume`, ...).
pub type Consumer = unsafe extern "C" fn(*mut ArrowDeviceArray, *mut FFI_ArrowSchema, *mut Report);

/// Hands an exported array and schema to a C consumer, which releases them.
pub fn consume_in_c_with(
    consumer: Consumer,
    array: &mut ArrowDeviceArray,
    schema: &mut FFI_ArrowSchema,
) -> Report {
    // SAFETY: a plain query of a size.
    assert_eq!(
        unsafe { interop_report_size() },
        std::mem::size_of::<Report>(),
        "Report mirrors C"
    );
    let mut report = std::mem::MaybeUninit::<Report>::uninit();
    // SAFETY: `array` and `schema` are valid structs (released ones are
    // detected by the consumer); `report` is writable and fully initialized
    // by the consumer (it starts with a memset).
    unsafe {
        consumer(array, schema, report.as_mut_ptr());
        report.assume_init()
    }
}

/// Hands an exported array and schema to `interop_consume`.
pub fn consume_in_c(array: &mut ArrowDeviceArray, schema: &mut FFI_ArrowSchema) -> Report {
    consume_in_c_with(interop_consume, array, schema)
}

//! The structs of `include/arrow_device.h`, as a C compiler lays them out,
//! have exactly the sizes, alignments and member offsets of the Rust
//! definitions in `arrow_device::abi` (and of arrow-rs' FFI structs).

use std::collections::BTreeMap;
use std::ffi::{c_char, c_int, c_void};
use std::mem::{align_of, offset_of, size_of};

use arrow_array::ffi_stream::FFI_ArrowArrayStream;
use arrow_device::abi::{
    raw, ArrowAsyncDeviceStreamHandler, ArrowAsyncProducer, ArrowAsyncTask, ArrowDeviceArray,
    ArrowDeviceArrayStream, DeviceType, FFI_ArrowArray, FFI_ArrowSchema,
};
use arrow_schema::ffi::Flags;
use c_interop_tests::{c_layout, c_macros, interop_device_type_macros, interop_flag_macros};

/// `struct ArrowArrayStream` with public fields: arrow-rs keeps the fields of
/// [`FFI_ArrowArrayStream`] private, so member offsets are taken from this
/// mirror, whose size is checked against arrow-rs' type below.
#[repr(C)]
#[allow(dead_code)]
struct ArrowArrayStream {
    get_schema: Option<unsafe extern "C" fn(*mut ArrowArrayStream, *mut raw::ArrowSchema) -> c_int>,
    get_next: Option<unsafe extern "C" fn(*mut ArrowArrayStream, *mut raw::ArrowArray) -> c_int>,
    get_last_error: Option<unsafe extern "C" fn(*mut ArrowArrayStream) -> *const c_char>,
    release: Option<unsafe extern "C" fn(*mut ArrowArrayStream)>,
    private_data: *mut c_void,
}

type Row = (String, String, usize, usize, usize);

fn member_size<T, F>(_: fn(&T) -> &F) -> usize {
    size_of::<F>()
}

macro_rules! struct_row {
    ($name:literal, $t:ty) => {
        (
            $name.to_owned(),
            String::new(),
            0,
            size_of::<$t>(),
            align_of::<$t>(),
        )
    };
}

macro_rules! member_rows {
    ($name:literal, $t:ty, [$($f:ident),* $(,)?]) => {
        vec![$((
            $name.to_owned(),
            stringify!($f).to_owned(),
            offset_of!($t, $f),
            member_size(|s: &$t| &s.$f),
            0,
        )),*]
    };
}

/// The same table as `c/layout.c`, computed from the Rust types.
fn rust_layout() -> Vec<Row> {
    let mut rows = vec![struct_row!("ArrowDeviceType", DeviceType)];
    rows.push(struct_row!("ArrowSchema", raw::ArrowSchema));
    rows.extend(member_rows!(
        "ArrowSchema",
        raw::ArrowSchema,
        [
            format,
            name,
            metadata,
            flags,
            n_children,
            children,
            dictionary,
            release,
            private_data
        ]
    ));
    rows.push(struct_row!("ArrowArray", raw::ArrowArray));
    rows.extend(member_rows!(
        "ArrowArray",
        raw::ArrowArray,
        [
            length,
            null_count,
            offset,
            n_buffers,
            n_children,
            buffers,
            children,
            dictionary,
            release,
            private_data
        ]
    ));
    rows.push(struct_row!("ArrowArrayStream", ArrowArrayStream));
    rows.extend(member_rows!(
        "ArrowArrayStream",
        ArrowArrayStream,
        [get_schema, get_next, get_last_error, release, private_data]
    ));
    rows.push(struct_row!("ArrowDeviceArray", ArrowDeviceArray));
    rows.extend(member_rows!(
        "ArrowDeviceArray",
        ArrowDeviceArray,
        [array, device_id, device_type, sync_event, reserved]
    ));
    rows.push(struct_row!(
        "ArrowDeviceArrayStream",
        ArrowDeviceArrayStream
    ));
    // The fields are private; the public mirror has the same layout
    // (asserted at compile time in `abi`).
    rows.extend(member_rows!(
        "ArrowDeviceArrayStream",
        raw::ArrowDeviceArrayStream,
        [
            device_type,
            get_schema,
            get_next,
            get_last_error,
            release,
            private_data
        ]
    ));
    rows.push(struct_row!("ArrowAsyncTask", ArrowAsyncTask));
    rows.extend(member_rows!(
        "ArrowAsyncTask",
        ArrowAsyncTask,
        [extract_data, private_data]
    ));
    rows.push(struct_row!("ArrowAsyncProducer", ArrowAsyncProducer));
    rows.extend(member_rows!(
        "ArrowAsyncProducer",
        ArrowAsyncProducer,
        [
            device_type,
            request,
            cancel,
            additional_metadata,
            private_data
        ]
    ));
    rows.push(struct_row!(
        "ArrowAsyncDeviceStreamHandler",
        ArrowAsyncDeviceStreamHandler
    ));
    rows.extend(member_rows!(
        "ArrowAsyncDeviceStreamHandler",
        ArrowAsyncDeviceStreamHandler,
        [
            on_schema,
            on_next_task,
            on_error,
            release,
            producer,
            private_data
        ]
    ));
    rows
}

fn by_key(rows: Vec<Row>) -> BTreeMap<(String, String), (usize, usize, usize)> {
    rows.into_iter()
        .map(|(t, f, offset, size, align)| ((t, f), (offset, size, align)))
        .collect()
}

fn c_row(type_name: &str, field: &str) -> (usize, usize, usize) {
    *by_key(c_layout())
        .get(&(type_name.to_owned(), field.to_owned()))
        .unwrap_or_else(|| panic!("layout.c has no row for {type_name}.{field}"))
}

#[test]
fn every_struct_and_member_of_the_c_header_has_the_rust_abi_layout() {
    let c = by_key(c_layout());
    let rust = by_key(rust_layout());
    assert_eq!(c.len(), 57, "rows in layout.c");
    let c_keys: Vec<_> = c.keys().collect();
    let rust_keys: Vec<_> = rust.keys().collect();
    assert_eq!(
        c_keys, rust_keys,
        "both tables cover the same structs and members"
    );
    for (key, c_layout) in &c {
        assert_eq!(
            (key, c_layout),
            (key, &rust[key]),
            "(offset, size, align) of {}.{} in C vs Rust",
            key.0,
            key.1
        );
    }
}

#[cfg(target_pointer_width = "64")]
#[test]
fn c_header_gives_the_spec_sizes_and_offsets_on_64_bit_targets() {
    assert_eq!(c_row("ArrowSchema", "").1, 72);
    assert_eq!(c_row("ArrowSchema", "release").0, 56);
    assert_eq!(c_row("ArrowArray", "").1, 80);
    assert_eq!(c_row("ArrowArray", "release").0, 64);
    assert_eq!(c_row("ArrowArrayStream", "").1, 40);

    assert_eq!(c_row("ArrowDeviceArray", ""), (0, 128, 8));
    assert_eq!(c_row("ArrowDeviceArray", "array"), (0, 80, 0));
    assert_eq!(c_row("ArrowDeviceArray", "device_id"), (80, 8, 0));
    assert_eq!(c_row("ArrowDeviceArray", "device_type"), (88, 4, 0));
    assert_eq!(c_row("ArrowDeviceArray", "sync_event"), (96, 8, 0));
    assert_eq!(c_row("ArrowDeviceArray", "reserved"), (104, 24, 0));

    assert_eq!(c_row("ArrowDeviceArrayStream", "").1, 48);
    assert_eq!(c_row("ArrowDeviceArrayStream", "get_schema").0, 8);
    assert_eq!(c_row("ArrowDeviceArrayStream", "release").0, 32);

    assert_eq!(c_row("ArrowAsyncTask", "").1, 16);
    assert_eq!(c_row("ArrowAsyncTask", "private_data").0, 8);
    // abi.h's producer: no `release` member, so additional_metadata at 24.
    assert_eq!(c_row("ArrowAsyncProducer", "").1, 40);
    assert_eq!(c_row("ArrowAsyncProducer", "additional_metadata").0, 24);
    assert_eq!(c_row("ArrowAsyncDeviceStreamHandler", "").1, 48);
    assert_eq!(c_row("ArrowAsyncDeviceStreamHandler", "producer").0, 32);

    assert_eq!(c_row("ArrowDeviceType", ""), (0, 4, 4));
}

#[test]
fn arrow_rs_ffi_structs_have_the_c_header_sizes_and_alignments() {
    let c = |t: &str| {
        let (_, size, align) = c_row(t, "");
        (size, align)
    };
    assert_eq!(
        c("ArrowArray"),
        (size_of::<FFI_ArrowArray>(), align_of::<FFI_ArrowArray>())
    );
    assert_eq!(
        c("ArrowSchema"),
        (size_of::<FFI_ArrowSchema>(), align_of::<FFI_ArrowSchema>())
    );
    assert_eq!(
        c("ArrowArrayStream"),
        (
            size_of::<FFI_ArrowArrayStream>(),
            align_of::<FFI_ArrowArrayStream>()
        )
    );
}

#[test]
fn device_type_macros_have_the_values_of_the_rust_constants() {
    let c = c_macros(interop_device_type_macros);
    let rust: Vec<(String, i64)> = DeviceType::ALL
        .iter()
        .map(|t| {
            (
                format!("ARROW_DEVICE_{}", t.name().expect("named")),
                i64::from(t.0),
            )
        })
        .collect();
    assert_eq!(c.len(), 14);
    assert_eq!(c, rust);
}

#[test]
fn flag_macros_have_the_values_of_arrow_rs_flags() {
    let c: BTreeMap<String, i64> = c_macros(interop_flag_macros).into_iter().collect();
    let expected: BTreeMap<String, i64> = [
        (
            "ARROW_FLAG_DICTIONARY_ORDERED",
            Flags::DICTIONARY_ORDERED.bits(),
        ),
        ("ARROW_FLAG_NULLABLE", Flags::NULLABLE.bits()),
        ("ARROW_FLAG_MAP_KEYS_SORTED", Flags::MAP_KEYS_SORTED.bits()),
    ]
    .into_iter()
    .map(|(name, bits)| (name.to_owned(), bits))
    .collect();
    assert_eq!(c, expected);
}

//! Export + import round trips on the CPU, this crate against arrow-rs' own
//! C Data Interface (`arrow_array::ffi`), in one run so the ratio is fair.
//!
//! Each group is one input; its functions are:
//! * `arrow-rs`: `to_ffi` → `from_ffi` → `make_array` → drop;
//! * `arrow-device`: `export_array` / `export_record_batch` →
//!   // SAFETY: the structs come from this crate's exporter (or a test producer), which follow the interface.
//!   `unsafe { DeviceArray::try_new(.., ValidationLevel::Default) }` → `to_host` → drop;
//! * `arrow-device-minimal`, `arrow-device-none`: the same at the lower
//!   validation levels, for reference.
//!
//! `schema_export_100cols` times the schema half of a batch export alone:
//! arrow-rs' `FFI_ArrowSchema::try_from(&Schema)` against this crate's
//! `export_schema`, each released at once.
//!
//! Run `cargo bench -p arrow-device --bench ffi`, then
//! `python3 scripts/bench-table.py` for the Markdown table of medians.

use std::hint::black_box;

use arrow_array::ffi::{from_ffi, to_ffi};
use arrow_array::{make_array, Array, ArrayRef, RecordBatch, StructArray};
use arrow_device::schema::export_schema;
use arrow_device::{export_array, export_record_batch, DeviceArray, ValidationLevel};
use arrow_schema::ffi::FFI_ArrowSchema;
use criterion::{criterion_group, criterion_main, Criterion};

mod common;
use common::{configure, int64s, mixed_batch, strings};

fn arrow_rs_round_trip(array: &dyn Array) -> ArrayRef {
    let (c_array, c_schema) = to_ffi(&array.to_data()).expect("exportable type");
    // SAFETY: the structs were just produced by arrow-rs' own exporter.
    let data = unsafe { from_ffi(c_array, &c_schema) }.expect("valid import");
    make_array(data)
}

fn device_round_trip(array: &dyn Array, level: ValidationLevel) -> ArrayRef {
    let (c_array, c_schema) = export_array(array).expect("exportable type");
    // SAFETY: the structs come from this crate's exporter (or a test producer), which follow the interface.
    let imported = unsafe { DeviceArray::try_new(c_array, c_schema, level) }.expect("valid import");
    imported.to_host().expect("CPU memory")
}

fn device_batch_round_trip(batch: &RecordBatch, level: ValidationLevel) -> ArrayRef {
    let (c_array, c_schema) = export_record_batch(batch).expect("exportable batch");
    // SAFETY: the structs come from this crate's exporter (or a test producer), which follow the interface.
    let imported = unsafe { DeviceArray::try_new(c_array, c_schema, level) }.expect("valid import");
    imported.to_host().expect("CPU memory")
}

const LEVELS: [(&str, ValidationLevel); 3] = [
    ("arrow-device", ValidationLevel::Default),
    ("arrow-device-minimal", ValidationLevel::Minimal),
    ("arrow-device-none", ValidationLevel::None),
];

fn bench_array(c: &mut Criterion, name: &str, array: &dyn Array) {
    // Both paths must give back the input before their speed means anything.
    assert_eq!(arrow_rs_round_trip(array).as_ref(), array);
    assert_eq!(
        device_round_trip(array, ValidationLevel::Default).as_ref(),
        array
    );

    let mut group = configure(c, name);
    group.bench_function("arrow-rs", |b| {
        b.iter(|| arrow_rs_round_trip(black_box(array)))
    });
    for (function, level) in LEVELS {
        group.bench_function(function, |b| {
            b.iter(|| device_round_trip(black_box(array), level))
        });
    }
    group.finish();
}

fn bench_batch(c: &mut Criterion, name: &str, batch: &RecordBatch) {
    let as_struct = StructArray::from(batch.clone());
    let arrow_rs = |batch: &RecordBatch| arrow_rs_round_trip(&StructArray::from(batch.clone()));
    assert_eq!(arrow_rs(batch).as_ref(), &as_struct as &dyn Array);
    assert_eq!(
        device_batch_round_trip(batch, ValidationLevel::Default).as_ref(),
        &as_struct as &dyn Array
    );

    let mut group = configure(c, name);
    // The struct conversion is part of both paths: export_record_batch does it too.
    group.bench_function("arrow-rs", |b| b.iter(|| arrow_rs(black_box(batch))));
    for (function, level) in LEVELS {
        group.bench_function(function, |b| {
            b.iter(|| device_batch_round_trip(black_box(batch), level))
        });
    }
    group.finish();
}

/// The schema half of a batch export alone: arrow-rs' writer against this
/// crate's, each export dropped (released) at once.
fn bench_schema_export(c: &mut Criterion, name: &str, batch: &RecordBatch) {
    let schema = batch.schema();
    let mut group = configure(c, name);
    group.bench_function("arrow-rs", |b| {
        b.iter(|| FFI_ArrowSchema::try_from(black_box(schema.as_ref())).expect("exportable"))
    });
    group.bench_function("arrow-device", |b| {
        b.iter(|| export_schema(black_box(schema.as_ref())).expect("exportable"))
    });
    group.finish();
}

fn round_trips(c: &mut Criterion) {
    bench_array(c, "primitive_1k", &int64s(1024));
    bench_array(c, "primitive_1m", &int64s(1 << 20));
    bench_array(c, "utf8_1k", &strings(1024));
    bench_array(c, "utf8_100k", &strings(100_000));
    bench_batch(c, "batch_100cols_1k", &mixed_batch(100, 1024));
    bench_schema_export(c, "schema_export_100cols", &mixed_batch(100, 1024));
}

criterion_group!(benches, round_trips);
criterion_main!(benches);

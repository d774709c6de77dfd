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
//! Each round-trip group also times the halves alone
//! (`arrow-rs-export` / `arrow-device-export`: an export released at once;
//! `arrow-rs-import` / `arrow-device-import`: an import, with the
//! conversion back, of structs exported beforehand), and the `scale_*`
//! groups time round trips of trees of growing size (columns, list nesting
//! depth, dictionary-encoded columns), with the node count as throughput.
//!
//! `schema_export_100cols` times the schema half of a batch export alone:
//! arrow-rs' `FFI_ArrowSchema::try_from(&Schema)` against this crate's
//! `export_schema`, each released at once.
//!
//! Run `cargo bench -p arrow-device --bench ffi`, then
//! `python3 scripts/bench-table.py` for the Markdown table of medians.

use std::hint::black_box;

use arrow_array::ffi::FFI_ArrowArray;
use arrow_array::ffi::{from_ffi, to_ffi};
use arrow_array::{make_array, Array, ArrayRef, RecordBatch, StructArray};
use arrow_device::abi::ArrowDeviceArray;
use arrow_device::schema::export_schema;
use arrow_device::{export_array, export_record_batch, DeviceArray, ValidationLevel};
use arrow_schema::ffi::FFI_ArrowSchema;
use criterion::measurement::WallTime;
use criterion::{
    criterion_group, criterion_main, BatchSize, BenchmarkGroup, Criterion, Throughput,
};

mod common;
use common::{configure, dictionary_batch, int64s, mixed_batch, nested_lists, strings};

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
    bench_halves(
        &mut group,
        || to_ffi(&array.to_data()).expect("exportable"),
        || export_array(array).expect("exportable"),
    );
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
    bench_halves(
        &mut group,
        || to_ffi(&StructArray::from(batch.clone()).into_data()).expect("exportable"),
        || export_record_batch(batch).expect("exportable"),
    );
    group.finish();
}

/// Each half alone, on both sides: an export released at once, and an
/// import (with the conversion back) of structs exported beforehand.
fn bench_halves(
    group: &mut BenchmarkGroup<'_, WallTime>,
    arrow_rs_export: impl Fn() -> (FFI_ArrowArray, FFI_ArrowSchema),
    device_export: impl Fn() -> (ArrowDeviceArray, FFI_ArrowSchema),
) {
    group.bench_function("arrow-rs-export", |b| b.iter(&arrow_rs_export));
    group.bench_function("arrow-device-export", |b| b.iter(&device_export));
    group.bench_function("arrow-rs-import", |b| {
        b.iter_batched(
            &arrow_rs_export,
            // SAFETY: the structs were just produced by arrow-rs' own exporter.
            |(c_array, c_schema)| {
                make_array(unsafe { from_ffi(c_array, &c_schema) }.expect("valid import"))
            },
            BatchSize::SmallInput,
        )
    });
    group.bench_function("arrow-device-import", |b| {
        b.iter_batched(
            &device_export,
            |(c_array, c_schema)| {
                // SAFETY: the structs come from this crate's exporter.
                unsafe { DeviceArray::try_new(c_array, c_schema, ValidationLevel::Default) }
                    .expect("valid import")
                    .to_host()
                    .expect("CPU memory")
            },
            BatchSize::SmallInput,
        )
    });
}

/// How the cost grows with the tree: one group per size, whose throughput
/// is the number of nodes (structs) in the tree, for the table's per-node
/// column. Round trips only, at `default`.
fn bench_scaling(c: &mut Criterion) {
    let mut run = |name: String, nodes: usize, array: &dyn Array| {
        assert_eq!(arrow_rs_round_trip(array).as_ref(), array);
        assert_eq!(
            device_round_trip(array, ValidationLevel::Default).as_ref(),
            array
        );
        let mut group = configure(c, &name);
        group
            .warm_up_time(std::time::Duration::from_millis(500))
            .measurement_time(std::time::Duration::from_secs(2))
            .throughput(Throughput::Elements(nodes as u64));
        group.bench_function("arrow-rs", |b| {
            b.iter(|| arrow_rs_round_trip(black_box(array)))
        });
        group.bench_function("arrow-device", |b| {
            b.iter(|| device_round_trip(black_box(array), ValidationLevel::Default))
        });
        group.finish();
    };
    for columns in [1, 10, 100, 1000] {
        let batch = StructArray::from(mixed_batch(columns, 1024));
        run(format!("scale_columns_{columns}"), columns + 1, &batch);
    }
    for depth in [1, 4, 16] {
        run(
            format!("scale_depth_{depth}"),
            depth + 1,
            &nested_lists(depth, 1024),
        );
    }
    for dictionaries in [1, 10, 100] {
        let batch = StructArray::from(dictionary_batch(dictionaries, 1024));
        run(
            format!("scale_dictionaries_{dictionaries}"),
            1 + 2 * dictionaries,
            &batch,
        );
    }
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
    bench_scaling(c);
}

criterion_group!(benches, round_trips);
criterion_main!(benches);

//! Arrays exported by `arrow_device::export_array` / `export_record_batch`
//! are read correctly by C code that walks the buffers by hand (validity
//! bitmaps, offsets, string offsets), carry the CPU device fields the spec
//! asks for, and release cleanly through their callbacks.

use std::sync::Arc;

use arrow_array::{ArrayRef, Int32Array, RecordBatch, StringArray, StructArray};
use arrow_buffer::{NullBuffer, ScalarBuffer};
use arrow_device::abi::{raw, ArrowDeviceArray, FFI_ArrowSchema};
use arrow_device::{export_array, export_record_batch};
use arrow_schema::{DataType, Field, Fields, Schema};
use c_interop_tests::{
    consume_in_c_with, interop_consume, interop_consume_moved_children, Consumer, Report,
};

const ARROW_DEVICE_CPU: i32 = 1;

/// [1, null, 3, null, 5, 6, 7] whose null slots hold -999: a consumer that
/// ignores the validity bitmap gets a different sum.
fn int32_with_garbage_under_nulls() -> Int32Array {
    let values = ScalarBuffer::from(vec![1, -999, 3, -999, 5, 6, 7]);
    let validity = NullBuffer::from(vec![true, false, true, false, true, true, true]);
    Int32Array::new(values, Some(validity))
}

fn utf8() -> StringArray {
    StringArray::from(vec![
        Some("hello"),
        Some(""),
        None,
        Some("arrow"),
        Some("device"),
    ])
}

fn batch() -> RecordBatch {
    let schema = Schema::new(vec![
        Field::new("ints", DataType::Int32, true),
        Field::new("strs", DataType::Utf8, true),
    ]);
    let columns: Vec<ArrayRef> = vec![
        Arc::new(int32_with_garbage_under_nulls().slice(0, 5)),
        Arc::new(utf8()),
    ];
    RecordBatch::try_new(Arc::new(schema), columns).expect("valid batch")
}

/// Hands the exported structs to `interop_consume` and checks what every
/// export must show: the CPU device fields, and release callbacks that mark
/// the structs released.
fn consume(exported: (ArrowDeviceArray, FFI_ArrowSchema)) -> Report {
    let report = consume_with(interop_consume, exported);
    assert_eq!(report.device_type, ARROW_DEVICE_CPU);
    assert_eq!(report.device_id, -1);
    assert_eq!(report.sync_event_is_null, 1);
    assert_eq!(report.reserved_all_zero, 1);
    report
}

fn consume_with(consumer: Consumer, mut exported: (ArrowDeviceArray, FFI_ArrowSchema)) -> Report {
    let (array, schema) = (&mut exported.0, &mut exported.1);
    let report = consume_in_c_with(consumer, array, schema);
    assert_eq!(
        report.status, 0,
        "consumer.c failed the check at line {}: {report:?}",
        report.status
    );
    assert_eq!(
        report.array_release_nulled, 1,
        "the array's release callback must set release to NULL"
    );
    assert_eq!(
        report.schema_release_nulled, 1,
        "the schema's release callback must set release to NULL"
    );
    assert!(array.is_released());
    assert!(raw::schema(schema).release.is_none());
    report
}

#[test]
fn exported_int32_is_summed_by_c_honouring_the_validity_bitmap() {
    let report = consume(export_array(&int32_with_garbage_under_nulls()).expect("export"));
    assert_eq!(report.format(), "i");
    assert_eq!(report.length, 7);
    assert_eq!(report.ints(), "1|null|3|null|5|6|7");
    assert_eq!(report.int_sum, 22);
    assert_eq!(report.counted_null_count, 2);
    assert_eq!(report.declared_null_count, 2);
}

#[test]
fn exported_sliced_int32_is_read_by_c_from_its_offset() {
    let sliced = int32_with_garbage_under_nulls().slice(2, 4);
    let report = consume(export_array(&sliced).expect("export"));
    assert_eq!(report.length, 4);
    assert_eq!(report.ints(), "3|null|5|6");
    assert_eq!(report.int_sum, 14);
    assert_eq!(report.counted_null_count, 1);
    // The producer may declare the exact count or -1 (unknown), nothing else.
    assert!(
        [1, -1].contains(&report.declared_null_count),
        "declared {}",
        report.declared_null_count
    );
}

#[test]
fn exported_int32_without_nulls_omits_nothing_c_needs() {
    let report = consume(export_array(&Int32Array::from(vec![10, 20, 30])).expect("export"));
    assert_eq!(report.ints(), "10|20|30");
    assert_eq!(report.int_sum, 60);
    assert_eq!(report.counted_null_count, 0);
    assert_eq!(report.declared_null_count, 0);
}

#[test]
fn exported_utf8_is_concatenated_by_c_through_its_offsets() {
    let report = consume(export_array(&utf8()).expect("export"));
    assert_eq!(report.format(), "u");
    assert_eq!(report.length, 5);
    assert_eq!(report.strs(), "hello||null|arrow|device");
    assert_eq!(report.counted_null_count, 1);
    assert_eq!(report.declared_null_count, 1);
}

#[test]
fn exported_sliced_utf8_is_read_by_c_from_its_offset() {
    let report = consume(export_array(&utf8().slice(1, 3)).expect("export"));
    assert_eq!(report.length, 3);
    assert_eq!(report.strs(), "|null|arrow");
    assert_eq!(report.counted_null_count, 1);
}

#[test]
fn exported_record_batch_is_read_by_c_as_a_struct_of_both_columns() {
    let report = consume(export_record_batch(&batch()).expect("export"));
    assert_eq!(report.format(), "+s");
    assert_eq!(report.length, 5);
    assert_eq!(report.child_names(), "ints,strs");
    assert_eq!(report.ints(), "1|null|3|null|5");
    assert_eq!(report.int_sum, 9);
    assert_eq!(report.strs(), "hello||null|arrow|device");
    assert_eq!(report.declared_null_count, 0);
    assert_eq!(report.counted_null_count, 0);
}

#[test]
fn exported_sliced_record_batch_is_read_by_c_from_its_offset() {
    let report = consume(export_record_batch(&batch().slice(1, 3)).expect("export"));
    assert_eq!(report.length, 3);
    assert_eq!(report.ints(), "null|3|null");
    assert_eq!(report.int_sum, 3);
    assert_eq!(report.strs(), "|null|arrow");
}

#[test]
fn exported_struct_with_top_level_nulls_hides_its_children_from_c() {
    let fields = Fields::from(vec![
        Field::new("ints", DataType::Int32, true),
        Field::new("strs", DataType::Utf8, true),
    ]);
    let columns: Vec<ArrayRef> = vec![
        Arc::new(Int32Array::from(vec![1, 2, 3, 4, 5])),
        Arc::new(utf8()),
    ];
    let validity = NullBuffer::from(vec![false, true, true, true, false]);
    let structs = StructArray::try_new(fields, columns, Some(validity)).expect("valid struct");

    let report = consume(export_array(&structs).expect("export"));
    assert_eq!(report.format(), "+s");
    assert_eq!(report.ints(), "null|2|3|4|null");
    assert_eq!(report.int_sum, 9);
    assert_eq!(report.strs(), "null||null|arrow|null");
    assert_eq!(report.counted_null_count, 2);
    assert_eq!(report.declared_null_count, 2);
}

#[test]
fn exported_array_stays_readable_after_the_arrow_rs_array_is_dropped() {
    let source = utf8();
    let exported = export_array(&source).expect("export");
    drop(source);
    let report = consume(exported);
    assert_eq!(report.strs(), "hello||null|arrow|device");
}

#[test]
fn exported_array_released_by_c_leaves_the_source_array_intact() {
    let source = int32_with_garbage_under_nulls();
    let report = consume(export_array(&source).expect("export"));
    assert_eq!(report.int_sum, 22);
    assert_eq!(source, int32_with_garbage_under_nulls());
    assert_eq!(source.values().as_ref(), &[1, -999, 3, -999, 5, 6, 7]);
}

#[test]
fn exported_empty_arrays_are_read_by_c_as_empty() {
    let report = consume(export_array(&Int32Array::from(Vec::<i32>::new())).expect("export"));
    assert_eq!(
        (report.length, report.ints().as_str(), report.int_sum),
        (0, "", 0)
    );
    let report = consume(export_array(&StringArray::from(Vec::<&str>::new())).expect("export"));
    assert_eq!((report.length, report.strs().as_str()), (0, ""));
    let report = consume(export_array(&utf8().slice(5, 0)).expect("export"));
    assert_eq!((report.length, report.strs().as_str()), (0, ""));
}

#[test]
fn exported_schemas_carry_the_nullable_flag_of_each_field() {
    const ARROW_FLAG_NULLABLE: i64 = 2;
    let report = consume(export_array(&utf8()).expect("export"));
    assert_eq!(report.root_flags, ARROW_FLAG_NULLABLE);

    let schema = Schema::new(vec![
        Field::new("a", DataType::Int32, false),
        Field::new("b", DataType::Utf8, true),
    ]);
    let columns: Vec<ArrayRef> = vec![
        Arc::new(Int32Array::from(vec![7, 8])),
        Arc::new(StringArray::from(vec!["x", "y"])),
    ];
    let batch = RecordBatch::try_new(Arc::new(schema), columns).expect("valid batch");
    let report = consume(export_record_batch(&batch).expect("export"));
    assert_eq!(report.child_names(), "a,b");
    assert_eq!(report.child_flags, [0, ARROW_FLAG_NULLABLE]);
    assert_eq!(
        (report.ints().as_str(), report.strs().as_str()),
        ("7|8", "x|y")
    );
}

#[test]
fn exported_children_moved_out_by_c_stay_valid_after_their_parents_are_released() {
    let report = consume_with(
        interop_consume_moved_children,
        export_record_batch(&batch()).expect("export"),
    );
    assert_eq!(report.length, 5);
    assert_eq!(report.ints(), "1|null|3|null|5");
    assert_eq!(report.strs(), "hello||null|arrow|device");
    assert_eq!(
        report.moved_children_released, 4,
        "2 child arrays + 2 child schemas released by C"
    );
}

//! What the sync and async stream tests share: the device type codes the C
//! reports use, the Rust batches they send to the C consumers, the batches
//! the C producers are known to send, and the emulated device they use.

use std::sync::Arc;
use std::time::Duration;

use arrow_array::{Array, ArrayRef, Int32Array, Int64Array, RecordBatch, StringArray};
use arrow_buffer::{NullBuffer, ScalarBuffer};
use arrow_device::device::emulated::{EmulatedConfig, EmulatedDevice};
use arrow_device::device::DeviceRef;
use arrow_schema::{DataType, Field, Schema, SchemaRef};

/// `ARROW_DEVICE_CPU` and `ARROW_DEVICE_EXT_DEV`, as the C reports hold them.
pub const CPU: i32 = 1;
pub const EXT_DEV: i32 = 12;

// ---- Rust produces, C consumes ---------------------------------------------

pub fn v_s_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("v", DataType::Int64, true),
        Field::new("s", DataType::Utf8, true),
    ]))
}

/// The children of [`v_s_schema`] as the C consumers expect them.
pub const V_S: [(&str, &str); 2] = [("l", "v"), ("u", "s")];

/// Batch `i`: v = [100 i, null, 100 i + 2, 100 i + 3] whose null slot holds
/// -999 (a consumer ignoring the validity bitmap gets another sum), and s.
pub fn v_s_batch(i: i64) -> RecordBatch {
    let values = ScalarBuffer::from(vec![100 * i, -999, 100 * i + 2, 100 * i + 3]);
    let validity = NullBuffer::from(vec![true, false, true, true]);
    let v = Int64Array::new(values, Some(validity));
    let s = StringArray::from(vec![Some("p"), None, Some("q"), Some("r")]);
    RecordBatch::try_new(v_s_schema(), vec![Arc::new(v), Arc::new(s)]).expect("valid batch")
}

/// The sum of v's non-null values, computed by arrow-rs.
pub fn v_sum(batches: &[RecordBatch]) -> i64 {
    batches
        .iter()
        .map(|b| {
            let v = b.column(0).as_any().downcast_ref::<Int64Array>();
            v.expect("v is int64").iter().flatten().sum::<i64>()
        })
        .sum()
}

/// The process-wide emulated device `id`, strict (device memory is
/// `PROT_NONE` on the host, so a C consumer touching a buffer crashes) and
/// delayed; the same configuration as arrow-device's own tests.
pub fn emulated(id: i64) -> DeviceRef {
    let config = EmulatedConfig {
        strict: true,
        delay: Duration::from_millis(2),
    };
    EmulatedDevice::set_global_config(config);
    assert_eq!(EmulatedDevice::global_config(), config);
    EmulatedDevice::global(id).expect("emulated device ids 0 and up exist")
}

// ---- C produces, Rust consumes ---------------------------------------------

/// The schema of the C producers' batches (`c/batch.c`).
pub fn a_b_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("a", DataType::Int32, true),
        Field::new("b", DataType::Utf8, true),
    ]))
}

/// What the C producers' batch `index` holds: a = index * rows + r,
/// b = "x{a}".
pub fn expected_c_batch(index: i64, rows: i64) -> RecordBatch {
    let a: Vec<i32> = (index * rows..(index + 1) * rows)
        .map(|v| v as i32)
        .collect();
    let b: Vec<String> = a.iter().map(|v| format!("x{v}")).collect();
    let columns: Vec<ArrayRef> = vec![
        Arc::new(Int32Array::from(a)),
        Arc::new(StringArray::from(b)),
    ];
    RecordBatch::try_new(a_b_schema(), columns).expect("valid batch")
}

/// Column a of `batches`, end to end, read by arrow-rs (nulls included as
/// their slot values; the C producers send none).
pub fn a_values(batches: &[RecordBatch]) -> Vec<i32> {
    batches
        .iter()
        .flat_map(|b| {
            let a = b.column(0).as_any().downcast_ref::<Int32Array>();
            a.expect("a is int32").values().to_vec()
        })
        .collect()
}

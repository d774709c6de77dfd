//! The CUDA Array Interface rules (`arrow_device::cai`) and DLPack's
//! `stream` argument rules, without Python and without a GPU: CUDA arrays
//! are CPU exports relabelled as CUDA (their memory is never read).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use arrow_array::{
    Array, ArrayRef, BooleanArray, DurationNanosecondArray, Float16Array, Float32Array,
    Float64Array, Int16Array, Int32Array, Int64Array, Int8Array, StringArray,
    TimestampMicrosecondArray, TimestampMillisecondArray, TimestampNanosecondArray,
    TimestampSecondArray, UInt16Array, UInt32Array, UInt64Array, UInt8Array,
};
use arrow_buffer::NullBuffer;
use arrow_device::abi::DeviceType;
use arrow_device::cai::{self, CudaArrayInterface, MaskPlan, StreamSync, Value};
use arrow_device::dlpack::dlpack_stream;
use arrow_device::{device, export_array, DeviceArray, Error, ValidationLevel};
use arrow_schema::{DataType, TimeUnit};

const PTR: usize = 0x7f00_0000_1000;

/// A valid version 3 interface of `shape` values of `typestr`.
fn interface(shape: &[i64], typestr: &str) -> CudaArrayInterface {
    CudaArrayInterface {
        shape: shape.to_vec(),
        typestr: typestr.to_string(),
        data: (PTR, false),
        version: 3,
        strides: None,
        descr: None,
        mask: None,
        stream: None,
    }
}

fn entries(cai: &CudaArrayInterface) -> Vec<(String, Value)> {
    cai.to_entries()
}

fn without(mut entries: Vec<(String, Value)>, key: &str) -> Vec<(String, Value)> {
    entries.retain(|(k, _)| k != key);
    entries
}

fn with(mut entries: Vec<(String, Value)>, key: &str, value: Value) -> Vec<(String, Value)> {
    entries.retain(|(k, _)| k != key);
    entries.push((key.to_string(), value));
    entries
}

fn message(result: Result<impl std::fmt::Debug, Error>) -> String {
    result.unwrap_err().to_string()
}

fn is_invalid<T: std::fmt::Debug>(result: Result<T, Error>) -> String {
    match result {
        Err(err @ Error::Invalid { .. }) => err.to_string(),
        other => panic!("expected Error::Invalid, got {other:?}"),
    }
}

fn is_not_supported<T: std::fmt::Debug>(result: Result<T, Error>) -> String {
    match result {
        Err(Error::NotSupported(message)) => message,
        other => panic!("expected Error::NotSupported, got {other:?}"),
    }
}

// --- typestr ------------------------------------------------------------------

/// Every type that crosses both ways: the canonical typestr and the Arrow type.
fn both_ways() -> Vec<(&'static str, DataType)> {
    use TimeUnit::*;
    vec![
        ("|i1", DataType::Int8),
        ("<i2", DataType::Int16),
        ("<i4", DataType::Int32),
        ("<i8", DataType::Int64),
        ("|u1", DataType::UInt8),
        ("<u2", DataType::UInt16),
        ("<u4", DataType::UInt32),
        ("<u8", DataType::UInt64),
        ("<f2", DataType::Float16),
        ("<f4", DataType::Float32),
        ("<f8", DataType::Float64),
        ("<M8[s]", DataType::Timestamp(Second, None)),
        ("<M8[ms]", DataType::Timestamp(Millisecond, None)),
        ("<M8[us]", DataType::Timestamp(Microsecond, None)),
        ("<M8[ns]", DataType::Timestamp(Nanosecond, None)),
        ("<m8[s]", DataType::Duration(Second)),
        ("<m8[ms]", DataType::Duration(Millisecond)),
        ("<m8[us]", DataType::Duration(Microsecond)),
        ("<m8[ns]", DataType::Duration(Nanosecond)),
    ]
}

#[test]
fn every_typestr_maps_to_its_arrow_type_and_back() {
    for (typestr, data_type) in both_ways() {
        let plan = interface(&[5], typestr).validate().unwrap();
        assert_eq!(plan.data_type, data_type, "{typestr}");
        assert_eq!(
            Some(plan.itemsize),
            data_type.primitive_width(),
            "{typestr}"
        );
        assert!(!plan.bool_needs_packing, "{typestr}");
        assert_eq!(cai::typestr(&data_type).unwrap(), typestr, "{data_type}");
    }
}

#[test]
fn native_and_not_applicable_byte_orders_are_accepted() {
    for (typestr, data_type) in [
        ("<i1", DataType::Int8),
        (">i1", DataType::Int8), // NumPy normalises it to |i1
        (">u1", DataType::UInt8),
        ("=i4", DataType::Int32),
        ("|i4", DataType::Int32), // NumPy reads | on a multi-byte type as native
        ("=f8", DataType::Float64),
        ("=M8[us]", DataType::Timestamp(TimeUnit::Microsecond, None)),
    ] {
        assert_eq!(
            interface(&[1], typestr).validate().unwrap().data_type,
            data_type,
            "{typestr}"
        );
    }
}

#[test]
fn big_endian_multi_byte_types_are_refused() {
    for typestr in [">i2", ">i4", ">u8", ">f4", ">f8", ">M8[ns]"] {
        let message = is_not_supported(interface(&[3], typestr).validate());
        assert!(message.contains(&format!("{typestr:?}")), "{message}");
        assert!(
            message.contains("big-endian") && message.contains("byte-swap"),
            "{message}"
        );
        assert!(message.contains("['typestr']"), "{message}");
    }
}

#[test]
fn bool_typestr_plans_a_bit_packing_conversion() {
    for typestr in ["|b1", "<b1", "=b1"] {
        let plan = interface(&[9], typestr).validate().unwrap();
        assert_eq!(plan.data_type, DataType::Boolean);
        assert_eq!(plan.itemsize, 1);
        assert!(plan.bool_needs_packing);
    }
}

#[test]
fn typestrs_without_an_arrow_type_are_refused_naming_them() {
    let cases = [
        ("<c8", "complex"),
        ("<c16", "complex"),
        ("|O", "not a type string"),
        ("|O8", "hold bool"),
        ("|V8", "hold bool"),
        ("<U4", "hold bool"),
        ("|S3", "hold bool"),
        ("<f16", "2, 4 or 8 bytes"),
        ("<i3", "3-byte"),
        ("|b2", "2-byte"),
        ("<M8[D]", "unit [D]"),
        ("<M8[h]", "unit [h]"),
        ("<m8[10ms]", "unit [10ms]"),
        ("<M8[ps]", "unit [ps]"),
        ("<M8", "without a unit"),
    ];
    for (typestr, needle) in cases {
        let message = message(interface(&[2], typestr).validate());
        assert!(
            message.contains(&format!("{typestr:?}")),
            "{typestr}: {message}"
        );
        assert!(message.contains(needle), "{typestr}: {message}");
    }
}

#[test]
fn malformed_typestrs_are_invalid() {
    for typestr in [
        "", "<", "<i", "i4", "<ix", "<i-4", "<M8[ns", "<i4[ns]", "xi4",
    ] {
        let message = is_invalid(interface(&[2], typestr).validate());
        assert!(
            message.starts_with("__cuda_array_interface__['typestr']: "),
            "{message}"
        );
        assert!(message.contains("is not a type string"), "{message}");
    }
}

#[test]
fn arrow_types_without_a_typestr_are_refused_with_the_reason() {
    let cases = [
        (DataType::Boolean, "bit-packed"),
        (
            DataType::Timestamp(TimeUnit::Second, Some("UTC".into())),
            "no time zone",
        ),
        (DataType::Utf8, "one fixed-width number per value"),
        (DataType::Date32, "one fixed-width number per value"),
        (
            DataType::Decimal128(10, 2),
            "one fixed-width number per value",
        ),
        (
            DataType::Dictionary(Box::new(DataType::Int8), Box::new(DataType::Utf8)),
            "dictionary-encoded",
        ),
    ];
    for (data_type, needle) in cases {
        let message = is_not_supported(cai::typestr(&data_type));
        assert!(message.contains(needle), "{data_type}: {message}");
        assert!(message.contains(&data_type.to_string()), "{message}");
    }
}

// --- shape, strides, data -----------------------------------------------------

#[test]
fn one_dimension_is_read_and_zero_dimensions_is_one_value() {
    let plan = interface(&[7], "<i4").validate().unwrap();
    assert_eq!((plan.len, plan.data_ptr, plan.itemsize), (7, PTR, 4));
    let scalar = interface(&[], "<f8").validate().unwrap();
    assert_eq!((scalar.len, scalar.data_ptr), (1, PTR));
}

#[test]
fn two_or_more_dimensions_are_refused() {
    for shape in [&[2, 3][..], &[3, 1], &[1, 1, 4]] {
        let message = is_not_supported(interface(shape, "<f4").validate());
        assert!(
            message.contains(&format!("has {} dimensions", shape.len())),
            "{message}"
        );
        assert!(message.contains("flatten"), "{message}");
    }
}

#[test]
fn negative_sizes_are_invalid() {
    let message = is_invalid(interface(&[-3], "<f4").validate());
    assert_eq!(
        message,
        "__cuda_array_interface__['shape']: size -3 is negative"
    );
}

#[test]
fn strides_none_or_the_item_size_are_contiguous() {
    let mut cai = interface(&[4], "<i8");
    assert_eq!(cai.validate().unwrap().len, 4);
    cai.strides = Some(vec![8]);
    assert_eq!(cai.validate().unwrap().len, 4);
    let mut scalar = interface(&[], "<i8");
    scalar.strides = Some(vec![]);
    assert_eq!(scalar.validate().unwrap().len, 1);
}

#[test]
fn other_strides_are_refused_as_non_contiguous() {
    for stride in [16, 4, 0, -8] {
        let mut cai = interface(&[4], "<i8");
        cai.strides = Some(vec![stride]);
        let message = is_not_supported(cai.validate());
        assert!(
            message.contains(&format!(
                "not contiguous: stride {stride} bytes, expected 8"
            )),
            "{message}"
        );
        assert!(message.contains("['strides']"), "{message}");
    }
}

#[test]
fn any_stride_is_fine_for_at_most_one_value() {
    for len in [0, 1] {
        let mut cai = interface(&[len], "<i8");
        cai.strides = Some(vec![1234]);
        assert_eq!(cai.validate().unwrap().len, len as usize);
    }
}

#[test]
fn strides_must_match_the_dimensions() {
    let mut cai = interface(&[4], "<i8");
    cai.strides = Some(vec![8, 8]);
    assert_eq!(
        is_invalid(cai.validate()),
        "__cuda_array_interface__['strides']: 2 strides for 1 dimensions (expected one per dimension)"
    );
}

#[test]
fn zero_size_arrays_have_no_pointer() {
    let mut cai = interface(&[0], "<f4");
    cai.data = (0, false);
    let plan = cai.validate().unwrap();
    assert_eq!((plan.len, plan.data_ptr), (0, 0));
    // A producer that leaves its pointer in: nothing is read, the plan says 0.
    cai.data = (PTR, true);
    assert_eq!(cai.validate().unwrap().data_ptr, 0);
}

#[test]
fn a_null_pointer_with_values_is_invalid() {
    let mut cai = interface(&[3], "<f4");
    cai.data = (0, false);
    let message = is_invalid(cai.validate());
    assert!(
        message.starts_with(
            "__cuda_array_interface__['data']: pointer is 0 but the array has 3 values"
        ),
        "{message}"
    );
}

#[test]
fn values_that_run_past_the_end_of_the_address_space_are_invalid() {
    let mut cai = interface(&[4], "<f4");
    cai.data = (usize::MAX - 8, false);
    let message = is_invalid(cai.validate());
    assert!(
        message.starts_with(
            "__cuda_array_interface__['data']: pointer 0xfffffffffffffff7 with 4 values of 4 \
             bytes runs past the end of the address space"
        ),
        "{message}"
    );
    // Values that end just short of the end are fine; an empty array reads
    // nothing, whatever its pointer.
    cai.data = (usize::MAX - 16, false);
    assert_eq!(cai.validate().unwrap().data_ptr, usize::MAX - 16);
    cai.shape = vec![0];
    cai.data = (usize::MAX, false);
    assert_eq!(cai.validate().unwrap().data_ptr, 0);
    // The mask is checked the same way.
    let mut mask = interface(&[4], "|b1");
    mask.data = (usize::MAX, false);
    let mut masked = interface(&[4], "<f4");
    masked.mask = Some(Box::new(mask));
    let message = is_invalid(masked.validate());
    assert!(
        message.starts_with("__cuda_array_interface__['mask']['data']: pointer"),
        "{message}"
    );
}

#[test]
fn plain_descr_is_accepted_and_structured_descr_refused() {
    let mut cai = interface(&[2], "<f4");
    cai.descr = Some(vec![(String::new(), "<f4".into())]);
    assert_eq!(cai.validate().unwrap().data_type, DataType::Float32);
    for descr in [
        vec![("x".to_string(), "<f4".to_string())],
        vec![(String::new(), "<i4".to_string())],
        vec![("a".into(), "<f4".into()), ("b".into(), "<i4".into())],
    ] {
        cai.descr = Some(descr);
        let message = is_not_supported(cai.validate());
        assert!(
            message.contains("['descr']: describes a structured"),
            "{message}"
        );
    }
    // A field with a shape (3-tuple) is structured too.
    let shaped = Value::Tuple(vec![Value::Tuple(vec![
        Value::Str("v".into()),
        Value::Str("<f4".into()),
        Value::Tuple(vec![Value::Int(3)]),
    ])]);
    let message = is_not_supported(CudaArrayInterface::from_entries(with(
        entries(&interface(&[2], "<f4")),
        "descr",
        shaped,
    )));
    assert!(message.contains("structured"), "{message}");
}

// --- version and stream ---------------------------------------------------------

#[test]
fn version_3_streams_follow_the_spec() {
    let cases = [
        (None, StreamSync::None),
        (Some(1), StreamSync::Legacy),
        (Some(2), StreamSync::PerThread),
        (Some(3), StreamSync::Handle(3)),
        (Some(0x5555_0000_1234), StreamSync::Handle(0x5555_0000_1234)),
        (Some(u64::MAX), StreamSync::Handle(u64::MAX)),
    ];
    for (stream, expected) in cases {
        let mut cai = interface(&[2], "<f4");
        cai.stream = stream;
        assert_eq!(cai.validate().unwrap().stream, expected, "{stream:?}");
    }
}

#[test]
fn stream_zero_is_disallowed() {
    let mut cai = interface(&[2], "<f4");
    cai.stream = Some(0);
    let message = is_invalid(cai.validate());
    assert!(
        message.starts_with("__cuda_array_interface__['stream']: 0 is disallowed"),
        "{message}"
    );
    assert!(message.contains("use None, 1 or 2"), "{message}");
}

#[test]
fn negative_and_non_integer_streams_are_invalid() {
    let base = entries(&interface(&[2], "<f4"));
    let message = is_invalid(CudaArrayInterface::from_entries(with(
        base.clone(),
        "stream",
        Value::Int(-1),
    )));
    assert!(
        message.contains("['stream']: -1 is not a stream"),
        "{message}"
    );
    assert!(message.contains("DLPack"), "{message}");
    let message = is_invalid(CudaArrayInterface::from_entries(with(
        base,
        "stream",
        Value::Bool(true),
    )));
    assert_eq!(
        message,
        "__cuda_array_interface__['stream']: expected None or an int, found bool True"
    );
}

#[test]
fn version_2_has_no_synchronization() {
    let mut cai = interface(&[2], "<f4");
    cai.version = 2;
    assert_eq!(cai.validate().unwrap().stream, StreamSync::None);
    // Its entries have no stream key.
    assert!(cai.to_entries().iter().all(|(k, _)| k != "stream"));
    // A stream a v2 producer sends anyway is honoured (waiting is never wrong).
    cai.stream = Some(7);
    assert_eq!(cai.validate().unwrap().stream, StreamSync::Handle(7));
}

#[test]
fn versions_other_than_2_and_3_are_refused() {
    for version in [0, 1, 4, 99] {
        let mut cai = interface(&[2], "<f4");
        cai.version = version;
        let message = is_not_supported(cai.validate());
        assert!(
            message.contains(&format!("['version']: version {version} is not supported")),
            "{message}"
        );
    }
    let base = entries(&interface(&[2], "<f4"));
    let message = is_not_supported(CudaArrayInterface::from_entries(with(
        base,
        "version",
        Value::Int(-3),
    )));
    assert!(message.contains("version -3 is not supported"), "{message}");
}

// --- the dict's entries ---------------------------------------------------------

#[test]
fn missing_required_keys_are_named() {
    let base = entries(&interface(&[2], "<f4"));
    for key in ["shape", "typestr", "data", "version"] {
        let message = is_invalid(CudaArrayInterface::from_entries(without(base.clone(), key)));
        assert_eq!(
            message,
            format!("__cuda_array_interface__['{key}']: missing (a required entry of the CUDA Array Interface)")
        );
    }
}

#[test]
fn optional_keys_may_be_absent_or_none() {
    let base = entries(&interface(&[2], "<f4"));
    let mut bare = base.clone();
    bare.retain(|(k, _)| matches!(k.as_str(), "shape" | "typestr" | "data" | "version"));
    let expected = CudaArrayInterface::from_entries(base).unwrap();
    assert_eq!(
        CudaArrayInterface::from_entries(bare.clone()).unwrap(),
        expected
    );
    let mut nones = bare;
    for key in ["strides", "descr", "mask", "stream"] {
        nones.push((key.to_string(), Value::None));
    }
    nones.push((
        "unknown_future_key".to_string(),
        Value::Other("object".into()),
    ));
    assert_eq!(CudaArrayInterface::from_entries(nones).unwrap(), expected);
}

#[test]
fn values_of_the_wrong_type_are_named_with_what_was_found() {
    let base = entries(&interface(&[2], "<f4"));
    let cases = [
        (
            "shape",
            Value::Str("2".into()),
            "['shape']: expected a tuple of ints, found str \"2\"",
        ),
        (
            "shape",
            Value::Tuple(vec![Value::None]),
            "['shape']: expected a tuple of ints, found None",
        ),
        (
            "shape",
            Value::Tuple(vec![Value::Int(1 << 70)]),
            "does not fit a 64-bit integer",
        ),
        (
            "typestr",
            Value::Int(4),
            "['typestr']: expected a str, found int 4",
        ),
        (
            "data",
            Value::Int(PTR as i128),
            "['data']: expected a tuple (pointer: int, read_only: bool), found int",
        ),
        (
            "data",
            Value::Tuple(vec![Value::Int(1)]),
            "['data']: expected (pointer: int, read_only: bool)",
        ),
        (
            "data",
            Value::Tuple(vec![Value::Int(1), Value::Int(0)]),
            "['data']: expected (pointer: int, read_only: bool)",
        ),
        (
            "data",
            Value::Tuple(vec![Value::Int(-16), Value::Bool(false)]),
            "['data']: pointer -16 is not a valid address",
        ),
        (
            "version",
            Value::Str("3".into()),
            "['version']: expected an int, found str \"3\"",
        ),
        (
            "strides",
            Value::Int(4),
            "['strides']: expected a tuple of ints, found int 4",
        ),
        (
            "mask",
            Value::Int(1),
            "['mask']: expected None or an object exposing __cuda_array_interface__",
        ),
        (
            "stream",
            Value::Str("1".into()),
            "['stream']: expected None or an int",
        ),
        (
            "descr",
            Value::Str("<f4".into()),
            "['descr']: expected a list of (name, typestr) tuples",
        ),
    ];
    for (key, value, needle) in cases {
        let message = is_invalid(CudaArrayInterface::from_entries(with(
            base.clone(),
            key,
            value,
        )));
        assert!(message.contains(needle), "{key}: {message}");
    }
}

#[test]
fn entries_round_trip() {
    let mut cai = interface(&[3], "<u2");
    cai.strides = Some(vec![2]);
    cai.stream = Some(99);
    cai.descr = Some(vec![(String::new(), "<u2".into())]);
    let mut mask = interface(&[3], "|b1");
    mask.stream = Some(2);
    cai.mask = Some(Box::new(mask));
    assert_eq!(
        CudaArrayInterface::from_entries(cai.to_entries()).unwrap(),
        cai
    );
}

// --- mask -------------------------------------------------------------------------

fn masked(mask: CudaArrayInterface) -> CudaArrayInterface {
    let mut cai = interface(&[4], "<f8");
    cai.mask = Some(Box::new(mask));
    cai
}

#[test]
fn byte_masks_plan_a_validity_conversion() {
    for typestr in ["|b1", "|u1", "|i1"] {
        let mut mask = interface(&[4], typestr);
        mask.data = (PTR + 4096, false);
        mask.stream = Some(2);
        let plan = masked(mask).validate().unwrap();
        assert_eq!(
            plan.mask,
            Some(MaskPlan {
                data_ptr: PTR + 4096,
                itemsize: 1,
                stream: StreamSync::PerThread,
            }),
            "{typestr}"
        );
        assert_eq!(plan.data_type, DataType::Float64);
    }
}

#[test]
fn masks_of_wider_types_or_other_shapes_are_refused() {
    let message = is_not_supported(masked(interface(&[4], "<i4")).validate());
    assert!(
        message.contains("['mask']['typestr']: a mask of \"<i4\""),
        "{message}"
    );
    let message = is_invalid(masked(interface(&[5], "|b1")).validate());
    assert_eq!(
        message,
        "__cuda_array_interface__['mask']['shape']: the mask has 5 values, the array 4 (expected the array's shape)"
    );
    let message = is_not_supported(masked(interface(&[2, 2], "|b1")).validate());
    assert!(message.contains("['mask']['shape']"), "{message}");
}

#[test]
fn a_mask_is_checked_like_the_array() {
    let mut mask = interface(&[4], "|b1");
    mask.stream = Some(0);
    let message = is_invalid(masked(mask).validate());
    assert!(
        message.starts_with("__cuda_array_interface__['mask']['stream']: 0 is disallowed"),
        "{message}"
    );
    let mut mask = interface(&[4], "|b1");
    mask.mask = Some(Box::new(interface(&[4], "|b1")));
    let message = is_not_supported(masked(mask).validate());
    assert!(
        message.contains("['mask']['mask']: a mask cannot have a mask"),
        "{message}"
    );
    // Read from entries, a mask's mask is refused before it is read.
    let inner = Value::Dict(vec![("mask".to_string(), Value::Other("object".into()))]);
    let mask = Value::Dict(with(entries(&interface(&[4], "|b1")), "mask", inner));
    let message = is_not_supported(CudaArrayInterface::from_entries(with(
        entries(&interface(&[4], "<f8")),
        "mask",
        mask,
    )));
    assert!(
        message.contains("['mask']['mask']: a mask cannot have a mask"),
        "{message}"
    );
    // A missing key of the mask's own dict names the path through the mask.
    let mask = Value::Dict(without(entries(&interface(&[4], "|b1")), "typestr"));
    let message = is_invalid(CudaArrayInterface::from_entries(with(
        entries(&interface(&[4], "<f8")),
        "mask",
        mask,
    )));
    assert!(
        message.starts_with("__cuda_array_interface__['mask']['typestr']: missing"),
        "{message}"
    );
}

// --- import -----------------------------------------------------------------------

struct DropFlag(Arc<AtomicBool>);

impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

#[test]
fn import_wraps_the_memory_and_keeps_the_owner_alive() {
    let values: Vec<i64> = vec![10, 20, 30, 40];
    let mut cai = interface(&[4], "<i8");
    cai.data = (values.as_ptr() as usize, true);
    let plan = cai.validate().unwrap();
    let dropped = Arc::new(AtomicBool::new(false));
    let owner = Arc::new(DropFlag(dropped.clone()));
    // SAFETY: host memory of the CPU device, valid for 4 values until the
    // end of the test, ready (no stream).
    let array = unsafe { cai::import(&plan, device::cpu(), owner) }.unwrap();
    assert_eq!(array.device_type(), DeviceType::CPU);
    assert_eq!(array.buffers()[1].ptr, values.as_ptr().cast());
    let host = array.slice(1, 2).unwrap().to_host().unwrap();
    assert_eq!(host.as_ref(), &Int64Array::from(vec![20, 30]) as &dyn Array);
    drop(host);
    assert!(!dropped.load(Ordering::SeqCst));
    drop(array);
    assert!(
        dropped.load(Ordering::SeqCst),
        "the owner is released with the array"
    );
}

#[test]
fn import_of_an_empty_timestamp_array() {
    let mut cai = interface(&[0], "<M8[ms]");
    cai.data = (0, false);
    let plan = cai.validate().unwrap();
    // SAFETY: an empty array reads nothing.
    let array = unsafe { cai::import(&plan, device::cpu(), Arc::new(())) }.unwrap();
    let host = array.to_host().unwrap();
    assert_eq!(
        host.as_ref(),
        &TimestampMillisecondArray::from(Vec::<i64>::new()) as &dyn Array
    );
}

#[test]
fn import_refuses_plans_that_need_a_conversion() {
    let plan = interface(&[3], "|b1").validate().unwrap();
    // SAFETY: refused before the memory is wrapped.
    let message = is_not_supported(unsafe { cai::import(&plan, device::cpu(), Arc::new(())) });
    assert!(message.contains("bit-packed"), "{message}");
    let plan = masked(interface(&[4], "|b1")).validate().unwrap();
    // SAFETY: as above.
    let message = is_not_supported(unsafe { cai::import(&plan, device::cpu(), Arc::new(())) });
    assert!(message.contains("mask"), "{message}");
}

// --- describe ---------------------------------------------------------------------

fn relabel(array: &dyn Array, device_type: DeviceType) -> DeviceArray {
    let (mut c_array, schema) = export_array(array).unwrap();
    c_array.device_type = device_type;
    c_array.device_id = 0;
    // SAFETY: the structs come from this crate's exporter; the memory is only
    // described, never read as device memory.
    unsafe { DeviceArray::try_new(c_array, schema, ValidationLevel::Default) }.unwrap()
}

fn exportable() -> Vec<ArrayRef> {
    vec![
        Arc::new(Int8Array::from(vec![1, 2, 3])),
        Arc::new(Int16Array::from(vec![1, 2, 3])),
        Arc::new(Int32Array::from(vec![1, 2, 3])),
        Arc::new(Int64Array::from(vec![1, 2, 3])),
        Arc::new(UInt8Array::from(vec![1, 2, 3])),
        Arc::new(UInt16Array::from(vec![1, 2, 3])),
        Arc::new(UInt32Array::from(vec![1, 2, 3])),
        Arc::new(UInt64Array::from(vec![1, 2, 3])),
        Arc::new(Float16Array::from(vec![half::f16::ONE; 3])),
        Arc::new(Float32Array::from(vec![1.0, 2.0, 3.0])),
        Arc::new(Float64Array::from(vec![1.0, 2.0, 3.0])),
        Arc::new(TimestampSecondArray::from(vec![1, 2, 3])),
        Arc::new(TimestampMillisecondArray::from(vec![1, 2, 3])),
        Arc::new(TimestampMicrosecondArray::from(vec![1, 2, 3])),
        Arc::new(TimestampNanosecondArray::from(vec![1, 2, 3])),
        Arc::new(DurationNanosecondArray::from(vec![1, 2, 3])),
    ]
}

#[test]
fn describe_gives_version_3_of_every_fixed_width_type() {
    for device_type in [DeviceType::CUDA, DeviceType::CUDA_MANAGED] {
        for values in exportable() {
            let array = relabel(values.as_ref(), device_type);
            let cai = cai::describe(&array).unwrap();
            let width = values.data_type().primitive_width().unwrap();
            assert_eq!(cai.shape, [3]);
            assert_eq!(cai.typestr, cai::typestr(values.data_type()).unwrap());
            assert_eq!(cai.data, (array.buffers()[1].ptr as usize, true));
            assert_eq!(
                (cai.version, cai.strides.clone(), cai.stream),
                (3, None, None)
            );
            assert_eq!((cai.mask.clone(), cai.descr.clone()), (None, None));
            // And back: the plan points at the same values.
            let plan = CudaArrayInterface::from_entries(cai.to_entries())
                .unwrap()
                .validate()
                .unwrap();
            assert_eq!(&plan.data_type, values.data_type());
            assert_eq!(
                (plan.len, plan.itemsize, plan.data_ptr),
                (3, width, cai.data.0)
            );
        }
    }
}

#[test]
fn describe_points_at_the_first_value_of_a_slice() {
    let ints = Int32Array::from(vec![1, 2, 3, 4, 5]);
    let array = relabel(&ints, DeviceType::CUDA);
    let start = array.buffers()[1].ptr as usize;
    let cai = cai::describe(&array.slice(2, 3).unwrap()).unwrap();
    assert_eq!((cai.shape.as_slice(), cai.data.0), (&[3][..], start + 8));
    let empty = cai::describe(&array.slice(5, 0).unwrap()).unwrap();
    assert_eq!((empty.shape.as_slice(), empty.data.0), (&[0][..], 0));
}

#[test]
fn describe_accepts_a_validity_buffer_without_nulls() {
    let ints = Int32Array::new(vec![1, 2, 3].into(), Some(NullBuffer::new_valid(3)));
    let cai = cai::describe(&relabel(&ints, DeviceType::CUDA)).unwrap();
    assert_eq!(cai.shape, [3]);
}

#[test]
fn describe_refuses_nulls_other_devices_and_other_types() {
    let with_nulls = Int32Array::from(vec![Some(1), None, Some(3)]);
    let message = is_not_supported(cai::describe(&relabel(&with_nulls, DeviceType::CUDA)));
    assert!(
        message.contains("1 nulls") && message.contains("element-wise"),
        "{message}"
    );
    let ints = Int32Array::from(vec![1, 2]);
    for device_type in [
        DeviceType::CPU,
        DeviceType::CUDA_HOST,
        DeviceType::ROCM,
        DeviceType::EXT_DEV,
    ] {
        let message = is_not_supported(cai::describe(&relabel(&ints, device_type)));
        assert!(
            message.contains(&format!("this array is on {device_type}")),
            "{message}"
        );
    }
    let message = is_not_supported(cai::describe(&relabel(
        &BooleanArray::from(vec![true]),
        DeviceType::CUDA,
    )));
    assert!(message.contains("bit-packed"), "{message}");
    let message = is_not_supported(cai::describe(&relabel(
        &StringArray::from(vec!["a"]),
        DeviceType::CUDA,
    )));
    assert!(message.contains("Utf8"), "{message}");
}

// --- DLPack's stream argument -----------------------------------------------------

#[test]
fn dlpack_stream_rules_by_device_type() {
    use StreamSync as S;
    let ok = |device_type, stream| dlpack_stream(device_type, stream).ok();
    for cuda in [
        DeviceType::CUDA,
        DeviceType::CUDA_HOST,
        DeviceType::CUDA_MANAGED,
    ] {
        assert_eq!(ok(cuda, None), Some(S::Legacy));
        assert_eq!(ok(cuda, Some(-1)), Some(S::None));
        assert_eq!(ok(cuda, Some(0)), None);
        assert_eq!(ok(cuda, Some(1)), Some(S::Legacy));
        assert_eq!(ok(cuda, Some(2)), Some(S::PerThread));
        assert_eq!(ok(cuda, Some(3)), Some(S::Handle(3)));
        assert_eq!(ok(cuda, Some(i64::MAX)), Some(S::Handle(i64::MAX as u64)));
        assert_eq!(ok(cuda, Some(-2)), None);
    }
    for rocm in [DeviceType::ROCM, DeviceType::ROCM_HOST] {
        assert_eq!(ok(rocm, None), Some(S::Legacy));
        assert_eq!(ok(rocm, Some(0)), Some(S::Legacy));
        assert_eq!(ok(rocm, Some(-1)), Some(S::None));
        assert_eq!(ok(rocm, Some(1)), None);
        assert_eq!(ok(rocm, Some(2)), None);
        assert_eq!(ok(rocm, Some(77)), Some(S::Handle(77)));
    }
    for streamless in [
        DeviceType::CPU,
        DeviceType::EXT_DEV,
        DeviceType::METAL,
        DeviceType(17),
    ] {
        assert_eq!(ok(streamless, None), Some(S::None));
        assert_eq!(ok(streamless, Some(-1)), Some(S::None));
        for bad in [0, 1, 2, 3, -2, i64::MAX] {
            assert_eq!(ok(streamless, Some(bad)), None, "{streamless} {bad}");
        }
    }
}

#[test]
fn dlpack_stream_errors_say_what_is_allowed() {
    let message = is_invalid(dlpack_stream(DeviceType::CUDA, Some(0)));
    assert!(message.contains("0 is disallowed for CUDA"), "{message}");
    assert!(message.ends_with("got 0"), "{message}");
    let message = is_invalid(dlpack_stream(DeviceType::CPU, Some(2)));
    assert_eq!(
        message,
        "__dlpack__(stream=...): stream must be None or -1 for device type CPU (a device without streams), got 2"
    );
}

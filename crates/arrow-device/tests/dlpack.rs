//! DLPack export and import: every supported type both ways, the refusals
//! and their messages, ownership (each deleter runs exactly once: on drop,
//! after the last shared buffer, on every import error), and the emulated
//! device, which proves that device memory is never touched on the host and
//! that export honours the producer's `sync_event`.

mod common;

use std::ffi::c_void;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use arrow_array::types::Int32Type;
use arrow_array::{
    Array, ArrayRef, BooleanArray, Decimal128Array, DictionaryArray, Float16Array, Float32Array,
    Float64Array, Int16Array, Int32Array, Int64Array, Int8Array, ListArray, StringArray,
    TimestampNanosecondArray, UInt16Array, UInt32Array, UInt64Array, UInt8Array,
};
use arrow_device::abi::DeviceType;
use std::time::Duration;

use arrow_device::device::emulated::{EmulatedConfig, EmulatedDevice};
use arrow_device::device::{DeviceBuffer, DeviceRef};
use arrow_device::dlpack::abi::{
    type_code, DLDataType, DLDevice, DLManagedTensor, DLManagedTensorVersioned, DLPackVersion,
    DLTensor, DLPACK_FLAG_BITMASK_READ_ONLY,
};
use arrow_device::dlpack::{
    dlpack_device, export_dlpack, export_dlpack_unsynchronized, import_dlpack,
    import_dlpack_versioned, DlpackAbi, DlpackTensor,
};
use arrow_device::{DeviceArray, Result, ValidationLevel};
use arrow_schema::DataType;
use half::f16;

use common::{assert_mentions, assert_same, device_array, emulated, Counters, CountingWaits};

fn cpu(array: &dyn Array) -> DeviceArray {
    device_array(array, ValidationLevel::Full)
}

const CPU: DLDevice = DLDevice {
    device_type: DeviceType::CPU,
    device_id: 0,
};

// ---------------------------------------------------------------------------
// Counting deleters: a forwarder swapped into any managed struct.

/// A managed struct's `manager_ctx` and `deleter`, which the counting
/// wrapper swaps.
type Slots<'a, M> = (
    &'a mut *mut c_void,
    &'a mut Option<unsafe extern "C" fn(*mut M)>,
);

/// The two managed structs, seen by the counting wrapper.
trait Managed: Sized {
    fn slots(&mut self) -> Slots<'_, Self>;
}

impl Managed for DLManagedTensor {
    fn slots(&mut self) -> Slots<'_, Self> {
        (&mut self.manager_ctx, &mut self.deleter)
    }
}

impl Managed for DLManagedTensorVersioned {
    fn slots(&mut self) -> Slots<'_, Self> {
        (&mut self.manager_ctx, &mut self.deleter)
    }
}

struct Forward<M> {
    manager_ctx: *mut c_void,
    deleter: Option<unsafe extern "C" fn(*mut M)>,
    deletes: Arc<AtomicUsize>,
}

/// Wraps the deleter of `managed` so that each call is counted, then
/// forwarded to the producer's deleter with its own context restored.
fn count_deletes<M: Managed>(managed: *mut M) -> Arc<AtomicUsize> {
    let deletes = Arc::new(AtomicUsize::new(0));
    // SAFETY: a live tensor owned by the test.
    let (ctx, deleter) = unsafe { (*managed).slots() };
    let forward = Box::new(Forward {
        manager_ctx: *ctx,
        deleter: *deleter,
        deletes: deletes.clone(),
    });
    *ctx = Box::into_raw(forward).cast();
    *deleter = Some(counted::<M>);
    deletes
}

unsafe extern "C" fn counted<M: Managed>(managed: *mut M) {
    // SAFETY: called once by the consumer on the struct `count_deletes`
    // wrapped, whose context is our `Forward`.
    let (ctx, deleter) = unsafe { (*managed).slots() };
    // SAFETY: boxed by `count_deletes`; a second call would double free,
    // which the counter below would not hide (it would crash or count 2).
    let forward = unsafe { Box::from_raw((*ctx).cast::<Forward<M>>()) };
    *ctx = forward.manager_ctx;
    *deleter = forward.deleter;
    forward.deletes.fetch_add(1, Ordering::SeqCst);
    if let Some(deleter) = forward.deleter {
        // SAFETY: the producer's deleter on its own struct, restored above.
        unsafe { deleter(managed) };
    }
}

fn deletes(counter: &AtomicUsize) -> usize {
    counter.load(Ordering::SeqCst)
}

// ---------------------------------------------------------------------------
// Hand-made tensors, as a foreign producer would write them.

enum Data {
    /// Host bytes, copied into 8-byte aligned storage.
    Host(Vec<u8>),
    /// `data` is NULL.
    Null,
    /// Device memory (kept alive by the tensor).
    Device(DeviceBuffer),
    /// A pointer that must never be dereferenced (an opaque device).
    Opaque(usize),
}

struct Spec {
    dtype: DLDataType,
    shape: Vec<i64>,
    strides: Option<Vec<i64>>,
    data: Data,
    byte_offset: u64,
    device: DLDevice,
}

impl Spec {
    fn new(dtype: DLDataType, shape: &[i64], data: Data) -> Self {
        Spec {
            dtype,
            shape: shape.to_vec(),
            strides: None,
            data,
            byte_offset: 0,
            device: CPU,
        }
    }

    fn int32(values: &[i32]) -> Self {
        let bytes = values.iter().flat_map(|v| v.to_ne_bytes()).collect();
        Spec::new(
            DLDataType::new(type_code::INT, 32),
            &[values.len() as i64],
            Data::Host(bytes),
        )
    }

    /// Zeroed host data for `shape` values of `dtype`.
    fn zeros(dtype: DLDataType, shape: &[i64]) -> Self {
        let values: i64 = shape.iter().product();
        let bytes = values as usize * usize::from(dtype.bits) * usize::from(dtype.lanes) / 8;
        Spec::new(dtype, shape, Data::Host(vec![0; bytes]))
    }

    fn strides(mut self, strides: &[i64]) -> Self {
        self.strides = Some(strides.to_vec());
        self
    }

    fn byte_offset(mut self, byte_offset: u64) -> Self {
        self.byte_offset = byte_offset;
        self
    }

    /// The tensor as described on another device (the data pointer is not
    /// checked against it).
    fn on(mut self, device_type: DeviceType, device_id: i32) -> Self {
        self.device = DLDevice {
            device_type,
            device_id,
        };
        self
    }
}

/// What a hand-made tensor's context owns; the managed struct comes first.
#[repr(C)]
struct Hand<M> {
    managed: M,
    storage: Vec<u64>,
    shape: Vec<i64>,
    strides: Vec<i64>,
    _device: Option<DeviceBuffer>,
}

unsafe extern "C" fn free_hand<M>(managed: *mut M) {
    // SAFETY: `managed` is the first field of a boxed `Hand<M>`.
    drop(unsafe { Box::from_raw(managed.cast::<Hand<M>>()) });
}

impl Spec {
    fn tensor(&self, storage: &mut Vec<u64>, device: &mut Option<DeviceBuffer>) -> DLTensor {
        let data = match &self.data {
            Data::Host(bytes) => {
                storage.resize(bytes.len().div_ceil(8), 0);
                // SAFETY: `storage` holds at least `bytes.len()` bytes.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        bytes.as_ptr(),
                        storage.as_mut_ptr().cast::<u8>(),
                        bytes.len(),
                    )
                };
                storage.as_mut_ptr().cast()
            }
            Data::Null => std::ptr::null_mut(),
            Data::Device(_) => match device {
                Some(buffer) => buffer.as_ptr().cast(),
                None => std::ptr::null_mut(),
            },
            Data::Opaque(address) => *address as *mut c_void,
        };
        DLTensor {
            data,
            device: self.device,
            ndim: self.shape.len() as i32,
            dtype: self.dtype,
            shape: std::ptr::null_mut(),
            strides: std::ptr::null_mut(),
            byte_offset: self.byte_offset,
        }
    }

    fn boxed<M>(
        mut self,
        make: impl FnOnce(DLTensor) -> M,
        tensor_of: fn(&mut M) -> &mut DLTensor,
    ) -> *mut M {
        let mut storage = Vec::new();
        let mut device = match std::mem::replace(&mut self.data, Data::Null) {
            Data::Device(buffer) => {
                // SAFETY: zero bytes at NULL: a placeholder valid for nothing.
                self.data = Data::Device(unsafe {
                    DeviceBuffer::new(std::ptr::null_mut(), 0, Box::new(()))
                });
                Some(buffer)
            }
            other => {
                self.data = other;
                None
            }
        };
        let tensor = self.tensor(&mut storage, &mut device);
        let hand = Box::into_raw(Box::new(Hand {
            managed: make(tensor),
            storage,
            shape: self.shape.clone(),
            strides: self.strides.clone().unwrap_or_default(),
            _device: device,
        }));
        // SAFETY: fresh allocation; the vectors' heap buffers do not move
        // when the box is created.
        unsafe {
            let t = tensor_of(&mut (*hand).managed);
            t.shape = if (*hand).shape.is_empty() {
                std::ptr::null_mut()
            } else {
                (*hand).shape.as_mut_ptr()
            };
            t.strides = if self.strides.is_some() {
                (*hand).strides.as_mut_ptr()
            } else {
                std::ptr::null_mut()
            };
        }
        hand.cast()
    }

    fn versioned_with(self, version: DLPackVersion) -> *mut DLManagedTensorVersioned {
        self.boxed(
            |dl_tensor| DLManagedTensorVersioned {
                version,
                manager_ctx: std::ptr::null_mut(),
                deleter: Some(free_hand::<DLManagedTensorVersioned>),
                flags: DLPACK_FLAG_BITMASK_READ_ONLY,
                dl_tensor,
            },
            |m| &mut m.dl_tensor,
        )
    }

    fn versioned(self) -> *mut DLManagedTensorVersioned {
        self.versioned_with(DLPackVersion { major: 1, minor: 1 })
    }

    fn legacy(self) -> *mut DLManagedTensor {
        self.boxed(
            |dl_tensor| DLManagedTensor {
                dl_tensor,
                manager_ctx: std::ptr::null_mut(),
                deleter: Some(free_hand::<DLManagedTensor>),
            },
            |m| &mut m.dl_tensor,
        )
    }
}

/// A one-column batch of `column`, exported by this crate and imported back
/// with its root struct's releases counted.
fn counted_batch(column: ArrayRef) -> (DeviceArray, Arc<Counters>) {
    let batch = arrow_array::RecordBatch::try_from_iter([("x", column)]).unwrap();
    common::counted_device_array(&batch, ValidationLevel::Full)
}

/// Imports a versioned tensor exported by this crate, with its deletes
/// counted.
fn import_back(tensor: DlpackTensor) -> (DeviceArray, Arc<AtomicUsize>) {
    let raw = tensor.into_raw_versioned().unwrap();
    let counter = count_deletes(raw);
    // SAFETY: a live tensor of this crate, handed over once.
    (unsafe { import_dlpack_versioned(raw) }.unwrap(), counter)
}

/// Imports a hand-made versioned tensor with its deletes counted.
fn import_counted(spec: Spec) -> (Result<DeviceArray>, Arc<AtomicUsize>) {
    let raw = spec.versioned();
    let counter = count_deletes(raw);
    // SAFETY: a live tensor made above, handed over once.
    (unsafe { import_dlpack_versioned(raw) }, counter)
}

// ---------------------------------------------------------------------------
// Export, and round trips through import.

fn supported_arrays() -> Vec<ArrayRef> {
    vec![
        Arc::new(Int8Array::from(vec![1, -2, i8::MIN, i8::MAX])),
        Arc::new(Int16Array::from(vec![1, -2, i16::MIN, i16::MAX])),
        Arc::new(Int32Array::from(vec![1, -2, i32::MIN, i32::MAX])),
        Arc::new(Int64Array::from(vec![1, -2, i64::MIN, i64::MAX])),
        Arc::new(UInt8Array::from(vec![1, 2, 0, u8::MAX])),
        Arc::new(UInt16Array::from(vec![1, 2, 0, u16::MAX])),
        Arc::new(UInt32Array::from(vec![1, 2, 0, u32::MAX])),
        Arc::new(UInt64Array::from(vec![1, 2, 0, u64::MAX])),
        Arc::new(Float16Array::from(vec![
            f16::from_f32(0.5),
            f16::from_f32(-1.25),
            f16::MAX,
            f16::MIN_POSITIVE,
        ])),
        Arc::new(Float32Array::from(vec![0.5, -1.25, f32::MAX, f32::NAN])),
        Arc::new(Float64Array::from(vec![0.5, -1.25, f64::MIN, f64::EPSILON])),
    ]
}

#[test]
fn every_supported_type_round_trips_through_both_structs() {
    for expected in supported_arrays() {
        let case = expected.data_type().to_string();
        let array = cpu(expected.as_ref());
        let width = expected.data_type().primitive_width().unwrap();
        for abi in [DlpackAbi::Versioned, DlpackAbi::Legacy] {
            let tensor = export_dlpack(&array, abi).unwrap();
            let t = tensor.dl_tensor();
            assert_eq!(t.ndim, 1, "{case}");
            assert_eq!(usize::from(t.dtype.bits), width * 8, "{case}");
            assert_eq!(t.dtype.lanes, 1, "{case}");
            assert_eq!(t.device, CPU, "{case}");
            assert_eq!(t.byte_offset, 0, "{case}");
            assert_eq!(t.data.cast_const(), array.buffers()[1].ptr.cast(), "{case}");
            assert_eq!(tensor.shape(), [4], "{case}");
            assert_eq!(tensor.strides(), [1], "{case}");
            let back = if abi == DlpackAbi::Versioned {
                assert_eq!(tensor.version(), Some(DLPackVersion { major: 1, minor: 1 }));
                assert_eq!(tensor.flags(), DLPACK_FLAG_BITMASK_READ_ONLY);
                import_back(tensor).0
            } else {
                assert_eq!(tensor.version(), None);
                assert_eq!(tensor.flags(), 0);
                let raw = tensor.into_raw_legacy().unwrap();
                // SAFETY: as above.
                unsafe { import_dlpack(raw) }.unwrap()
            };
            assert_eq!(
                (back.device_type(), back.device_id()),
                (DeviceType::CPU, -1)
            );
            assert_eq!(back.null_count(), Some(0), "{case}");
            assert_eq!(
                back.buffers()[1].ptr,
                array.buffers()[1].ptr,
                "{case}: zero-copy"
            );
            assert_same(&case, expected.as_ref(), back.to_host().unwrap().as_ref());
        }
    }
}

#[test]
fn a_slice_exports_a_pointer_to_its_first_value() {
    let values = Int32Array::from((0..10).collect::<Vec<i32>>());
    // Sliced by DeviceArray (offset 3 over the whole buffer) and by arrow-rs
    // before the C export (which moves the buffer start instead): both must
    // point at value 3.
    let by_device = cpu(&values).slice(3, 4).unwrap();
    assert_eq!(by_device.offset(), 3);
    let by_arrow = cpu(&values.slice(3, 4));
    for array in [by_device, by_arrow] {
        let tensor = export_dlpack(&array, DlpackAbi::Versioned).unwrap();
        let t = tensor.dl_tensor();
        assert_eq!(
            t.data.cast_const(),
            values.values().as_ptr().wrapping_add(3).cast()
        );
        assert_eq!((t.byte_offset, tensor.shape()), (0, &[4i64][..]));
        // SAFETY: CPU memory of 4 i32 values, kept alive by `tensor`.
        let seen = unsafe { std::slice::from_raw_parts(t.data.cast::<i32>(), 4) };
        assert_eq!(seen, [3, 4, 5, 6]);
        let (back, _) = import_back(tensor);
        assert_same(
            "slice",
            &values.slice(3, 4),
            back.to_host().unwrap().as_ref(),
        );
    }
}

#[test]
fn an_empty_array_exports_null_data_and_imports_back() {
    let empty = Float64Array::from(Vec::<f64>::new());
    let tensor = export_dlpack(&cpu(&empty), DlpackAbi::Versioned).unwrap();
    assert!(tensor.dl_tensor().data.is_null());
    assert_eq!(tensor.shape(), [0]);
    let (back, _) = import_back(tensor);
    assert_same("empty", &empty, back.to_host().unwrap().as_ref());
}

#[test]
fn arrays_with_nulls_are_refused_with_their_null_count() {
    let with_nulls = Int32Array::from(vec![Some(1), None, None, Some(4), None]);
    let err = export_dlpack(&cpu(&with_nulls), DlpackAbi::Versioned).unwrap_err();
    assert_mentions(
        &err,
        "the Int32 array has 3 nulls; DLPack has no validity mask",
    );
    // A slice without nulls keeps the bitmap (null count unknown after
    // slicing): it is counted, found 0, and exported.
    let array = cpu(&with_nulls).slice(0, 1).unwrap();
    assert_eq!(array.null_count(), None);
    assert!(!array.buffers()[0].ptr.is_null());
    let tensor = export_dlpack(&array, DlpackAbi::Versioned).unwrap();
    assert_eq!(tensor.shape(), [1]);
    let err = export_dlpack(&cpu(&with_nulls).slice(1, 3).unwrap(), DlpackAbi::Legacy).unwrap_err();
    assert_mentions(&err, "has 2 nulls");
}

#[test]
fn types_dlpack_cannot_carry_are_refused_with_the_reason() {
    let list = ListArray::from_iter_primitive::<Int32Type, _, _>([Some(vec![Some(1)])]);
    let dictionary: DictionaryArray<Int32Type> = vec!["a", "b"].into_iter().collect();
    let cases: Vec<(ArrayRef, &str)> =
        vec![
        (
            Arc::new(BooleanArray::from(vec![true, false])),
            "boolean is bit-packed in Arrow (one bit per value) while DLPack bool is one byte",
        ),
        (Arc::new(StringArray::from(vec!["a"])), "Utf8 is not one fixed-width number"),
        (Arc::new(list), "is not one fixed-width number per value"),
        (
            Arc::new(Decimal128Array::from(vec![1]).with_precision_and_scale(10, 2).unwrap()),
            "DLPack has no decimal type",
        ),
        (
            Arc::new(TimestampNanosecondArray::from(vec![1]).with_timezone("UTC")),
            "DLPack has no temporal types, so Timestamp(ns, \"UTC\") would arrive as bare integers",
        ),
        (Arc::new(dictionary), "is dictionary-encoded"),
    ];
    for (array, needle) in cases {
        let err = export_dlpack(&cpu(array.as_ref()), DlpackAbi::Versioned).unwrap_err();
        assert!(matches!(err, arrow_device::Error::NotSupported(_)), "{err}");
        assert_mentions(&err, "cannot export");
        assert_mentions(&err, needle);
    }
}

#[test]
fn dlpack_device_reports_cpu_as_id_zero_and_devices_by_their_id() {
    let array = cpu(&Int8Array::from(vec![1]));
    assert_eq!(array.device_id(), -1);
    assert_eq!(dlpack_device(&array).unwrap(), CPU);
    let on_device = array.to_device(&emulated(1)).unwrap();
    assert_eq!(
        dlpack_device(&on_device).unwrap(),
        DLDevice {
            device_type: DeviceType::EXT_DEV,
            device_id: 1
        }
    );
}

#[test]
fn into_raw_of_the_other_kind_is_an_error_that_deletes_the_tensor() {
    let (imported, releases) = counted_batch(Arc::new(Int8Array::from(vec![1, 2])));
    let column = imported.children().remove(0);
    drop(imported);
    let tensor: DlpackTensor = export_dlpack(&column, DlpackAbi::Legacy).unwrap();
    assert_eq!(tensor.abi(), DlpackAbi::Legacy);
    let err = tensor.into_raw_versioned().unwrap_err();
    assert_mentions(
        &err,
        "is a legacy DLManagedTensor: hand it over with into_raw_legacy",
    );
    let tensor = export_dlpack(&column, DlpackAbi::Versioned).unwrap();
    assert_eq!(tensor.abi(), DlpackAbi::Versioned);
    let err = tensor.into_raw_legacy().unwrap_err();
    assert_mentions(
        &err,
        "is a DLManagedTensorVersioned: hand it over with into_raw_versioned",
    );
    drop(column);
    assert_eq!(releases.array_releases(), 1, "both tensors were deleted");
}

// ---------------------------------------------------------------------------
// Ownership.

#[test]
fn an_exported_tensor_keeps_the_producer_alive_until_its_deleter_runs_once() {
    let values: ArrayRef = Arc::new(Int64Array::from(vec![10, 20, 30]));
    let (imported, releases) = counted_batch(values.clone());
    let column = imported.children().remove(0);
    let tensor = export_dlpack(&column, DlpackAbi::Versioned).unwrap();
    drop((imported, column));
    assert_eq!(releases.array_releases(), 0, "the tensor holds the array");

    let (back, tensor_deletes) = import_back(tensor);
    let host = back.to_host().unwrap();
    drop(back);
    assert_eq!(
        deletes(&tensor_deletes),
        0,
        "arrow-rs buffers still share the memory"
    );
    assert_same("column", values.as_ref(), host.as_ref());
    drop(host);
    assert_eq!(deletes(&tensor_deletes), 1);
    assert_eq!(
        releases.array_releases(),
        1,
        "released once, by the deleter"
    );
}

#[test]
fn dropping_an_unhanded_tensor_calls_its_deleter() {
    let (imported, releases) = counted_batch(Arc::new(Int16Array::from(vec![1, 2])));
    for abi in [DlpackAbi::Versioned, DlpackAbi::Legacy] {
        drop(export_dlpack(&imported.children()[0], abi).unwrap());
    }
    assert_eq!(releases.array_releases(), 0);
    drop(imported);
    assert_eq!(releases.array_releases(), 1);
}

#[test]
fn an_imported_tensor_is_deleted_once_after_its_last_slice() {
    let (array, counter) = import_counted(Spec::int32(&[1, 2, 3, 4]));
    let array = array.unwrap();
    let slice = array.slice(1, 2).unwrap();
    drop(array);
    assert_eq!(deletes(&counter), 0);
    assert_same(
        "slice",
        &Int32Array::from(vec![2, 3]),
        slice.to_host().unwrap().as_ref(),
    );
    drop(slice);
    assert_eq!(deletes(&counter), 1);
}

#[test]
fn legacy_tensors_import_and_are_deleted_once() {
    let raw = Spec::int32(&[7, 8, 9]).legacy();
    let counter = count_deletes(raw);
    // SAFETY: a live tensor made above, handed over once.
    let array = unsafe { import_dlpack(raw) }.unwrap();
    assert_same(
        "legacy",
        &Int32Array::from(vec![7, 8, 9]),
        array.to_host().unwrap().as_ref(),
    );
    drop(array);
    assert_eq!(deletes(&counter), 1);
}

#[test]
fn every_import_error_names_the_defect_and_deletes_the_tensor_once() {
    let int32 = DLDataType::new(type_code::INT, 32);
    let cases: Vec<(&str, Spec, &str)> = vec![
        (
            "ndim 2",
            Spec::zeros(int32, &[2, 2]),
            "has 2 dimensions; an Arrow array is one-dimensional",
        ),
        (
            "strides [2]",
            Spec::int32(&[1, 2, 3, 4]).strides(&[2]),
            "not contiguous: stride 2 (in elements), expected 1",
        ),
        (
            "lanes 2",
            Spec::zeros(
                DLDataType {
                    code: type_code::FLOAT,
                    bits: 32,
                    lanes: 2,
                },
                &[2],
            ),
            "float32 has 2 lanes",
        ),
        (
            "bfloat16",
            Spec::zeros(DLDataType::new(type_code::BFLOAT, 16), &[2]),
            "bfloat16 has no Arrow type",
        ),
        (
            "complex64",
            Spec::zeros(DLDataType::new(type_code::COMPLEX, 64), &[1]),
            "complex64 has no Arrow type",
        ),
        (
            "NULL data with 5 values",
            Spec::new(int32, &[5], Data::Null),
            "data is NULL but it has 5 values",
        ),
        (
            "negative shape",
            Spec::new(int32, &[-1], Data::Null),
            "shape[0] is -1, expected >= 0",
        ),
        (
            "bool off the CPU",
            Spec::new(
                DLDataType::new(type_code::BOOL, 8),
                &[1],
                Data::Opaque(0x1000),
            )
            .on(DeviceType::CUDA, 0),
            "is done on the CPU only",
        ),
    ];
    for (case, spec, needle) in cases {
        let (result, counter) = import_counted(spec);
        let err = result.expect_err(case);
        assert_mentions(&err, needle);
        assert_eq!(deletes(&counter), 1, "{case}: deleted exactly once");
    }
}

#[test]
fn values_past_the_end_of_the_address_space_are_refused_and_deleted_once() {
    let int32 = DLDataType::new(type_code::INT, 32);
    let cases = [
        ("data", Spec::new(int32, &[4], Data::Opaque(usize::MAX - 8))),
        (
            "byte_offset",
            Spec::new(int32, &[1], Data::Opaque(0x1000)).byte_offset(u64::MAX - 0x800),
        ),
    ];
    for (case, spec) in cases {
        let (result, counter) = import_counted(spec.on(DeviceType::CUDA, 0));
        let err = result.expect_err(case);
        assert_mentions(&err, "runs past the end of the address space");
        assert_eq!(deletes(&counter), 1, "{case}: deleted exactly once");
    }
    // Values that end just short of the end are fine (an opaque device:
    // nothing is read).
    let spec = Spec::new(int32, &[4], Data::Opaque(usize::MAX - 16)).on(DeviceType::CUDA, 0);
    let (result, counter) = import_counted(spec);
    assert_eq!(result.unwrap().buffers()[1].ptr as usize, usize::MAX - 16);
    assert_eq!(deletes(&counter), 1);
}

#[test]
fn a_newer_major_version_is_deleted_unread() {
    let raw = Spec::int32(&[1]).versioned_with(DLPackVersion { major: 2, minor: 0 });
    let counter = count_deletes(raw);
    // SAFETY: a live tensor made above, handed over once.
    let err = unsafe { import_dlpack_versioned(raw) }.unwrap_err();
    assert_mentions(
        &err,
        "version 2.0 is not supported: this consumer reads major version 1",
    );
    assert_eq!(deletes(&counter), 1);
}

#[test]
fn a_null_pointer_is_an_error() {
    // SAFETY: NULL is allowed and reported.
    let err = unsafe { import_dlpack_versioned(std::ptr::null_mut()) }.unwrap_err();
    assert_mentions(&err, "NULL DLManagedTensorVersioned pointer");
    // SAFETY: as above.
    let err = unsafe { import_dlpack(std::ptr::null_mut()) }.unwrap_err();
    assert_mentions(&err, "NULL DLManagedTensor pointer");
}

// ---------------------------------------------------------------------------
// Import details.

#[test]
fn bool_tensors_are_copied_into_bit_packed_booleans() {
    let spec = Spec::new(
        DLDataType::new(type_code::BOOL, 8),
        &[5],
        Data::Host(vec![9, 1, 0, 2, 1, 0]),
    )
    .byte_offset(1);
    let (array, counter) = import_counted(spec);
    let array = array.unwrap();
    assert_eq!(
        deletes(&counter),
        1,
        "copied, so the tensor is released at once"
    );
    assert_eq!(array.data_type(), &DataType::Boolean);
    assert_same(
        "bool",
        &BooleanArray::from(vec![true, false, true, true, false]),
        array.to_host().unwrap().as_ref(),
    );
}

#[test]
fn a_misaligned_byte_offset_is_read_correctly() {
    let mut bytes = vec![0xAA];
    bytes.extend([1i32, -2, 3].iter().flat_map(|v| v.to_ne_bytes()));
    let spec =
        Spec::new(DLDataType::new(type_code::INT, 32), &[3], Data::Host(bytes)).byte_offset(1);
    let (array, _) = import_counted(spec);
    let array = array.unwrap();
    assert_eq!(
        array.buffers()[1].ptr as usize % 4,
        1,
        "the tensor's own pointer"
    );
    assert_same(
        "misaligned",
        &Int32Array::from(vec![1, -2, 3]),
        array.to_host().unwrap().as_ref(),
    );
}

#[test]
fn a_zero_d_tensor_is_one_value_and_size_one_strides_are_ignored() {
    let scalar = Spec::new(
        DLDataType::new(type_code::FLOAT, 64),
        &[],
        Data::Host(2.5f64.to_ne_bytes().to_vec()),
    );
    let (array, _) = import_counted(scalar);
    assert_same(
        "0-d",
        &Float64Array::from(vec![2.5]),
        array.unwrap().to_host().unwrap().as_ref(),
    );

    let (array, _) = import_counted(Spec::int32(&[42]).strides(&[7]));
    assert_same(
        "size 1",
        &Int32Array::from(vec![42]),
        array.unwrap().to_host().unwrap().as_ref(),
    );
    let (array, _) = import_counted(Spec::int32(&[4, 5]).strides(&[1]));
    assert_same(
        "strides [1]",
        &Int32Array::from(vec![4, 5]),
        array.unwrap().to_host().unwrap().as_ref(),
    );
}

#[test]
fn a_zero_length_tensor_with_null_data_is_an_empty_array() {
    let (array, counter) = import_counted(Spec::new(
        DLDataType::new(type_code::UINT, 16),
        &[0],
        Data::Null,
    ));
    let array = array.unwrap();
    assert_eq!((array.len(), array.data_type()), (0, &DataType::UInt16));
    assert_same(
        "empty",
        &UInt16Array::from(Vec::<u16>::new()),
        array.to_host().unwrap().as_ref(),
    );
    drop(array);
    assert_eq!(deletes(&counter), 1);
}

#[test]
fn a_tensor_on_an_unknown_device_is_described_but_not_read() {
    let spec = Spec::new(
        DLDataType::new(type_code::FLOAT, 32),
        &[8],
        Data::Opaque(0xdead_0000),
    )
    .on(DeviceType::VULKAN, 3);
    let (array, counter) = import_counted(spec);
    let array = array.unwrap();
    assert_eq!(
        (array.device_type(), array.device_id()),
        (DeviceType::VULKAN, 3)
    );
    assert!(array.device().is_none());
    assert_eq!(array.buffers()[1].ptr as usize, 0xdead_0000);
    assert_eq!(array.buffers()[1].len, Some(32));
    assert_mentions(
        &array.to_host().unwrap_err(),
        "no device implementation for device type VULKAN id 3",
    );
    // Re-exporting needs no access either: same pointer, same device.
    let tensor = export_dlpack(&array, DlpackAbi::Versioned).unwrap();
    assert_eq!(tensor.dl_tensor().data as usize, 0xdead_0000);
    assert_eq!(tensor.dl_tensor().device.device_id, 3);
    drop((array, tensor));
    assert_eq!(deletes(&counter), 1);
}

// ---------------------------------------------------------------------------
// The emulated device (strict: PROT_NONE memory; delayed: copies complete
// later, their destinations poisoned until then).

#[test]
fn an_emulated_device_array_round_trips_without_host_access() {
    let device = emulated(0);
    let values = Int64Array::from((0..40).map(|v| v * 3 - 7).collect::<Vec<i64>>());
    // `to_device` leaves a pending sync_event, which export waits on (see
    // `export_waits_on_the_producers_sync_event_unless_told_not_to`).
    let on_device = cpu(&values)
        .to_device(&device)
        .unwrap()
        .slice(5, 30)
        .unwrap();
    assert!(!on_device.sync_event().is_null());
    let tensor = export_dlpack(&on_device, DlpackAbi::Versioned).unwrap();
    let t = tensor.dl_tensor();
    assert_eq!(
        t.device,
        DLDevice {
            device_type: DeviceType::EXT_DEV,
            device_id: 0
        }
    );
    assert_eq!(
        t.data.cast_const(),
        on_device.buffers()[1].ptr.wrapping_add(5 * 8).cast()
    );
    let (back, counter) = import_back(tensor);
    assert_eq!(
        (back.device_type(), back.device_id()),
        (DeviceType::EXT_DEV, 0)
    );
    assert!(back.device().is_some());
    assert_same(
        "emulated",
        &values.slice(5, 30),
        back.to_host().unwrap().as_ref(),
    );
    drop((back, on_device));
    assert_eq!(deletes(&counter), 1);
}

#[test]
fn a_hand_made_ext_dev_tensor_is_read_through_the_device() {
    let device = emulated(1);
    let values: Vec<f32> = vec![9.0, 1.5, -2.5, 3.25, 100.0];
    let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_ne_bytes()).collect();
    let buffer = device.allocate(bytes.len()).unwrap();
    let stream = device.create_stream().unwrap();
    // SAFETY: both sides are valid for the copy, which completes before
    // `bytes` is dropped (synchronized below).
    unsafe { device.copy_from_host(bytes.as_ptr(), buffer.as_ptr(), bytes.len(), &stream) }
        .unwrap();
    device.synchronize_stream(&stream).unwrap();
    let spec = Spec::new(
        DLDataType::new(type_code::FLOAT, 32),
        &[4],
        Data::Device(buffer),
    )
    .on(DeviceType::EXT_DEV, 1)
    // Skip the first value.
    .byte_offset(4);
    let (array, counter) = import_counted(spec);
    let array = array.unwrap();
    assert_eq!(
        (array.device_type(), array.device_id()),
        (DeviceType::EXT_DEV, 1)
    );
    assert_same(
        "ext_dev",
        &Float32Array::from(values[1..].to_vec()),
        array.to_host().unwrap().as_ref(),
    );
    drop(array);
    assert_eq!(
        deletes(&counter),
        1,
        "the device memory is freed by the deleter"
    );
}

#[test]
fn export_waits_on_the_producers_sync_event_unless_told_not_to() {
    let config = EmulatedConfig {
        strict: true,
        delay: Duration::from_millis(2),
    };
    let device = Arc::new(CountingWaits::new(EmulatedDevice::new(5, config)));
    let device_ref: DeviceRef = device.clone();
    let on_device = cpu(&Int32Array::from(vec![1, 2, 3]))
        .to_device(&device_ref)
        .unwrap();
    assert!(!on_device.sync_event().is_null());

    let unsynchronized = export_dlpack_unsynchronized(&on_device, DlpackAbi::Versioned).unwrap();
    assert_eq!(device.host_waits.load(Ordering::SeqCst), 0);
    let synchronized = export_dlpack(&on_device, DlpackAbi::Versioned).unwrap();
    assert_eq!(device.host_waits.load(Ordering::SeqCst), 1, "waited once");
    // The same zero-copy tensor either way.
    assert_eq!(
        unsynchronized.dl_tensor().data,
        synchronized.dl_tensor().data
    );
    // The wait is remembered: the event has completed.
    drop(export_dlpack(&on_device, DlpackAbi::Legacy).unwrap());
    assert_eq!(device.host_waits.load(Ordering::SeqCst), 1);
}

#[test]
fn the_managed_tensor_struct_follows_the_consumers_max_version() {
    // DLPack: "if max_version is None ... the legacy capsule", 1.x and later
    // the versioned one.
    assert_eq!(DlpackAbi::for_max_version(None), DlpackAbi::Legacy);
    assert_eq!(DlpackAbi::for_max_version(Some((0, 8))), DlpackAbi::Legacy);
    assert_eq!(
        DlpackAbi::for_max_version(Some((1, 0))),
        DlpackAbi::Versioned
    );
    assert_eq!(
        DlpackAbi::for_max_version(Some((2, 3))),
        DlpackAbi::Versioned
    );
}

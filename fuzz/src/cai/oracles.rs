//! The oracles of an accepted plan, written from the spec apart from the
//! library: what the plan must say about the interface, and what its
//! import must yield.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use arrow_device::abi::DeviceType;
use arrow_device::cai::{self, describe, typestr, CudaArrayInterface, ImportPlan, StreamSync};
use arrow_device::{device, Error};
use arrow_schema::DataType;

use super::build::{byte_extent, typestr_itemsize};
use crate::memory::{self, OPAQUE_ADDRESS};

/// The plan agrees with the interface, checked without the library.
pub(super) fn check_plan(interface: &CudaArrayInterface, plan: &ImportPlan) {
    let what = || format!("{interface:?} planned as {plan:?}");
    assert!(matches!(interface.version, 2 | 3), "{}", what());
    let len = match interface.shape.as_slice() {
        [] => 1,
        [extent] => usize::try_from(*extent).unwrap_or_else(|_| panic!("{}", what())),
        _ => panic!("more than one dimension: {}", what()),
    };
    assert_eq!(plan.len, len, "{}", what());
    let itemsize = typestr_itemsize(&interface.typestr)
        .unwrap_or_else(|| panic!("not a type string: {}", what()));
    assert_eq!(plan.itemsize, itemsize, "{}", what());
    let is_bool = plan.data_type == DataType::Boolean;
    assert_eq!(plan.bool_needs_packing, is_bool, "{}", what());
    let width = if is_bool {
        Some(1)
    } else {
        plan.data_type.primitive_width()
    };
    assert_eq!(width, Some(itemsize), "{}", what());
    let native = if cfg!(target_endian = "big") {
        '>'
    } else {
        '<'
    };
    let order = interface.typestr.chars().next();
    if itemsize > 1 && matches!(order, Some('<' | '>')) {
        assert_eq!(order, Some(native), "a foreign byte order: {}", what());
    }
    if let Some(strides) = &interface.strides {
        assert_eq!(strides.len(), interface.shape.len(), "{}", what());
        if len > 1 {
            assert_eq!(strides.as_slice(), [itemsize as i64], "{}", what());
        }
    }
    // The bytes the shape and strides span, computed apart.
    let bytes = len.checked_mul(itemsize);
    assert!(bytes.is_some(), "the size overflows: {}", what());
    let bytes = bytes.unwrap_or_default();
    if len > 1 {
        let spanned = byte_extent(&interface.shape, interface.strides.as_deref(), itemsize);
        assert_eq!(
            spanned,
            Some((0, bytes as i128)),
            "the span of the shape and strides is not len * itemsize: {}",
            what()
        );
    }
    if len == 0 {
        assert_eq!(plan.data_ptr, 0, "{}", what());
    } else {
        assert_eq!(plan.data_ptr, interface.data.0, "{}", what());
        assert_ne!(plan.data_ptr, 0, "{}", what());
        assert!(
            plan.data_ptr.checked_add(bytes).is_some(),
            "the data wraps around the address space: {}",
            what()
        );
    }
    if let Some(descr) = &interface.descr {
        assert_eq!(
            descr.as_slice(),
            [(String::new(), interface.typestr.clone())],
            "{}",
            what()
        );
    }
    assert_eq!(plan.stream, stream_sync(interface.stream), "{}", what());
    match (&interface.mask, &plan.mask) {
        (None, None) => {}
        (Some(mask), Some(mask_plan)) => {
            assert!(mask.mask.is_none(), "{}", what());
            assert!(matches!(mask.version, 2 | 3), "{}", what());
            let mask_len = match mask.shape.as_slice() {
                [] => 1,
                [extent] => usize::try_from(*extent).unwrap_or(usize::MAX),
                _ => panic!("a mask of more than one dimension: {}", what()),
            };
            assert_eq!(mask_len, len, "{}", what());
            assert_eq!(mask_plan.itemsize, 1, "{}", what());
            let pointer = if len == 0 { 0 } else { mask.data.0 };
            assert_eq!(mask_plan.data_ptr, pointer, "{}", what());
            assert_eq!(mask_plan.stream, stream_sync(mask.stream), "{}", what());
        }
        _ => panic!("the mask is lost or made up: {}", what()),
    }
}

/// The spec's `stream` (0 is refused before this is asked).
fn stream_sync(stream: Option<u64>) -> StreamSync {
    match stream {
        None => StreamSync::None,
        Some(0) => panic!("stream 0 was accepted"),
        Some(1) => StreamSync::Legacy,
        Some(2) => StreamSync::PerThread,
        Some(handle) => StreamSync::Handle(handle),
    }
}

/// A minimal interface of one value of `typestr`.
fn one_value(typestr: &str) -> CudaArrayInterface {
    CudaArrayInterface {
        shape: vec![1],
        typestr: typestr.to_string(),
        data: (OPAQUE_ADDRESS, true),
        version: 3,
        strides: None,
        descr: None,
        mask: None,
        stream: None,
    }
}

/// `typestr()` of a planned type plans the same type again.
pub(super) fn check_typestr_round_trip(plan: &ImportPlan) {
    if plan.bool_needs_packing {
        assert!(typestr(&plan.data_type).is_err(), "Boolean has no typestr");
        return;
    }
    let written = typestr(&plan.data_type)
        .unwrap_or_else(|e| panic!("a planned {} has no typestr: {e}", plan.data_type));
    let again = one_value(&written)
        .validate()
        .unwrap_or_else(|e| panic!("typestr {written:?} does not plan: {e}"));
    assert_eq!(
        (&again.data_type, again.itemsize),
        (&plan.data_type, plan.itemsize),
        "{written:?}"
    );
}

/// Drops its flag's value to true.
struct DropFlag(Arc<AtomicBool>);

impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// The plan over real memory (`bytes` from its pointer on) imports.
pub(super) fn check_import(plan: &ImportPlan, bytes: &[u8], managed: bool) {
    let target = if managed {
        device::lookup(DeviceType::CUDA_MANAGED, 0).expect("managed memory reads on the host")
    } else {
        device::cpu()
    };
    let dropped = Arc::new(AtomicBool::new(false));
    let owner = Arc::new(DropFlag(dropped.clone()));
    // SAFETY: the pointer holds every byte the plan claims (see `memory`),
    // alive until this returns; host memory, read on the host by both
    // targets; no stream is pending.
    let result = unsafe { cai::import(plan, target, owner) };
    if plan.bool_needs_packing || plan.mask.is_some() {
        assert!(
            matches!(result, Err(Error::NotSupported(_))),
            "a plan that needs a conversion: {result:?}"
        );
        assert!(dropped.load(Ordering::SeqCst), "the owner is released");
        return;
    }
    let array = result.unwrap_or_else(|e| panic!("{plan:?} does not import: {e}"));
    assert_eq!(array.len(), plan.len);
    assert_eq!(array.data_type(), &plan.data_type);
    assert_eq!(array.null_count(), Some(0));
    if plan.len > 0 {
        assert_eq!(array.buffers()[1].ptr as usize, plan.data_ptr);
    }
    let values = memory::expected_values(&plan.data_type, plan.len, bytes, "plan");
    let host = array
        .to_host()
        .unwrap_or_else(|e| panic!("an imported host array does not read: {e}"));
    assert_eq!(&host, &values, "the values are not the bytes written");
    drop(host);
    assert!(!dropped.load(Ordering::SeqCst), "the owner went early");

    match describe(&array) {
        Ok(described) if managed => {
            let pointer = if plan.len == 0 { 0 } else { plan.data_ptr };
            assert_eq!(described.shape, [plan.len as i64]);
            assert_eq!(
                Some(&described.typestr),
                typestr(&plan.data_type).ok().as_ref()
            );
            assert_eq!(described.data, (pointer, true));
            assert_eq!(described.version, 3);
            assert_eq!(
                (&described.strides, &described.mask, described.stream),
                (&None, &None, None)
            );
            let again = described
                .validate()
                .unwrap_or_else(|e| panic!("{described:?} does not plan: {e}"));
            assert_eq!(
                (&again.data_type, again.len, again.data_ptr, again.itemsize),
                (&plan.data_type, plan.len, pointer, plan.itemsize)
            );
        }
        Ok(described) => panic!("a CPU array was described: {described:?}"),
        Err(e) if managed => panic!("a CUDA_MANAGED array does not describe: {e}"),
        Err(_) => {}
    }
    drop(array);
    assert!(
        dropped.load(Ordering::SeqCst),
        "the owner outlives the array"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_typestr_plans_its_type() {
        use arrow_schema::TimeUnit;
        for data_type in [
            DataType::Int8,
            DataType::Int16,
            DataType::Int32,
            DataType::Int64,
            DataType::UInt8,
            DataType::UInt16,
            DataType::UInt32,
            DataType::UInt64,
            DataType::Float16,
            DataType::Float32,
            DataType::Float64,
            DataType::Timestamp(TimeUnit::Second, None),
            DataType::Timestamp(TimeUnit::Nanosecond, None),
            DataType::Duration(TimeUnit::Millisecond),
        ] {
            let written = typestr(&data_type).unwrap();
            let plan = one_value(&written).validate().unwrap();
            assert_eq!(plan.data_type, data_type);
            check_typestr_round_trip(&plan);
        }
    }
}

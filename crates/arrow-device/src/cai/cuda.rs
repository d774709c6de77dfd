//! The CUDA Array Interface on the CUDA devices (feature `cuda`):
//! [`import_cai`] takes a validated interface's memory (honouring its
//! `stream`, converting its `mask` and `|b1` values into Arrow bitmaps on
//! the GPU), [`export_cai`] describes an array (naming a stream when work
//! is pending, and making the element-wise mask of an array with nulls on
//! the GPU).
//!
//! Neither blocks the host: conversions are queued on a stream of ours
//! after the producer's work, and the result carries an event recorded
//! after them. The GPU work goes through the narrow interface of
//! [`CudaDevice`] (stream ordering and the bitmap kernels); this adapter
//! builds the arrays.
//!
//! ```
//! use arrow_device::cai::{cuda, CudaArrayInterface, Value};
//!
//! // A CuPy-style dict of four float32 values, pointer 0x1000.
//! let dict = vec![
//!     ("shape".to_string(), Value::Tuple(vec![Value::Int(4)])),
//!     ("typestr".to_string(), Value::Str("<f4".into())),
//!     ("data".to_string(), Value::Tuple(vec![Value::Int(0x1000), Value::Bool(false)])),
//!     ("version".to_string(), Value::Int(3)),
//! ];
//! let plan = CudaArrayInterface::from_entries(dict).unwrap().validate().unwrap();
//! if !arrow_device::device::cuda::is_available() {
//!     // Without a driver the pointer cannot be classified: an error that
//!     // says so, never a panic.
//!     // SAFETY: nothing is read when the import fails.
//!     let err = unsafe { cuda::import_cai(&plan, std::sync::Arc::new(())) }.unwrap_err();
//!     assert!(matches!(err, arrow_device::Error::NotSupported(_)), "{err}");
//! }
//! ```

use std::any::Any;
use std::ffi::c_void;
use std::sync::Arc;

use arrow_schema::{DataType, Field};

use smallvec::{smallvec, SmallVec};

use super::{
    describe_values, import, import_with_bitmaps, refuse_nulls, Bitmaps, CudaArrayInterface,
    ImportPlan,
};
use crate::abi::DeviceType;
use crate::array::node::{Node, RawBuf};
use crate::array::owner::{Owner, PendingMemory};
use crate::array::DeviceArray;
use crate::device::cuda::{device, pointer_memory_type, CudaDevice};
use crate::device::{drain_then_free, DeviceBuffer, DeviceRef, Stream};
use crate::error::{Error, Path, Result};

/// What `__cuda_array_interface__` hands out for an array on a CUDA device.
#[derive(Debug)]
pub struct CaiExport {
    /// The dict's entries, `stream` set; `mask` is left `None`: the spec
    /// wants an *object* exposing the interface there, which the binding
    /// makes from [`CaiExport::mask`].
    pub interface: CudaArrayInterface,
    /// The element-wise mask of an array with nulls.
    pub mask: Option<CaiMask>,
}

/// An element-wise mask made on the GPU: one byte per value, 1 for valid
/// and 0 for null (typestr `|b1`).
#[derive(Debug)]
pub struct CaiMask {
    /// The mask's own interface (`stream` set).
    pub interface: CudaArrayInterface,
    /// The bytes it describes (a `UInt8` array on the same device), to be
    /// kept alive by the mask object.
    pub bytes: DeviceArray,
}

/// The CUDA device whose memory `ptr` is (an interface's `data` pointer,
/// named `entry` in messages); GPU 0's device memory for a zero-size array,
/// which has no pointer to ask about.
fn device_of(ptr: usize, entry: &str) -> Result<DeviceRef> {
    if ptr == 0 {
        return device(DeviceType::CUDA, 0);
    }
    let found = pointer_memory_type(ptr as *const c_void)?;
    match found.device() {
        Some((DeviceType::CPU, _)) => Err(Error::Invalid {
            path: entry.to_string(),
            message: format!(
                "pointer {ptr:#x} is not CUDA memory (the driver does not know it: pageable \
                 host memory?); the CUDA Array Interface describes device-accessible memory"
            ),
        }),
        Some((device_type, ordinal)) => device(device_type, ordinal),
        None => Err(Error::NotSupported(format!(
            "{entry}: pointer {ptr:#x} is CUDA memory of a type this crate does not know \
             ({found:?})"
        ))),
    }
}

/// The array `build` makes over converted memory of `device`, written by
/// work queued on `stream`: ordered after that work by an event recorded
/// now, and owning `memory` and `source` (what the work reads) until the
/// event has completed, so a consumer that releases the array without
/// waiting cannot free memory a kernel still reads or writes.
fn converted_array(
    device: &DeviceRef,
    stream: Stream,
    memory: SmallVec<[DeviceBuffer; 2]>,
    source: Box<dyn Any + Send + Sync>,
    build: impl FnOnce(Owner) -> Result<DeviceArray>,
) -> Result<DeviceArray> {
    let recorded = device
        .create_event()
        .and_then(|event| device.record_event(&event, &stream).map(|()| event));
    let event = match recorded {
        Ok(event) => event,
        // The kernels may still read `source` and write `memory`.
        Err(e) => return Err(drain_then_free(device, &stream, (memory, source), e)),
    };
    let sync_event = event.sync_event();
    let owner: Owner = Arc::new(PendingMemory::new(
        device.clone(),
        event,
        stream,
        memory,
        Some(source),
    ));
    let array = build(owner.clone())?;
    // SAFETY: the device's own event (a CUevent*), kept valid by `owner`.
    unsafe { array.ordered_after(sync_event, owner) }
}

/// Imports the memory a validated CUDA Array Interface describes, on the
/// CUDA device its pointer belongs to (found with
/// [`pointer_memory_type`]: device, managed or pinned memory of a GPU):
///
/// * zero-copy when no conversion is needed, ordered after the producer's
///   `stream` by an event recorded there (the result's `sync_event`);
/// * otherwise the `|b1` values and the mask are packed into Arrow bitmaps
///   by kernels queued after the producer's stream(s); the result's
///   `sync_event` follows them. A masked array's null count is unknown
///   (-1 when exported): counting would block the host.
///
/// Errors name the entry: a pointer CUDA does not know (pageable host
/// memory) is [`Error::Invalid`]; no driver or GPU, [`Error::NotSupported`].
///
/// # Safety
/// `plan` comes from [`CudaArrayInterface::validate`] of the interface of
/// an object that `owner` keeps alive; its pointers are valid for the
/// sizes it describes while `owner` lives, and its streams are live streams
/// of the GPU's primary context (or the special handles 1 and 2).
pub unsafe fn import_cai(
    plan: &ImportPlan,
    owner: Arc<dyn Any + Send + Sync>,
) -> Result<DeviceArray> {
    let device = device_of(plan.data_ptr, "__cuda_array_interface__['data']")?;
    let cuda = CudaDevice::require(device.as_ref())?;
    if let Some(mask) = &plan.mask {
        let mask_device = device_of(mask.data_ptr, "__cuda_array_interface__['mask']['data']")?;
        if plan.len > 0 && mask_device.device_id() != device.device_id() {
            return Err(Error::Invalid {
                path: "__cuda_array_interface__['mask']['data']".to_string(),
                message: format!(
                    "the mask is on GPU {}, the data on GPU {} (expected the same GPU)",
                    mask_device.device_id(),
                    device.device_id()
                ),
            });
        }
    }
    if !plan.bool_needs_packing && plan.mask.is_none() {
        // SAFETY: forwarded contract; ordered after the producer's stream
        // just below, before anyone can use it.
        let array = unsafe { import(plan, device.clone(), owner) }?;
        // SAFETY: the stream is live per the contract.
        return unsafe { array.ordered_after_stream(plan.stream) };
    }
    let stream = device.create_stream()?;
    let mut waited = Vec::new();
    let streams = [Some(plan.stream), plan.mask.map(|m| m.stream)];
    for producer in streams.into_iter().flatten() {
        if waited.contains(&producer) {
            continue;
        }
        // SAFETY: a live producer stream per the contract.
        unsafe { cuda.stream_wait_protocol_stream(&stream, producer) }?;
        waited.push(producer);
    }
    let mut buffers = SmallVec::new();
    let queued = (|| {
        let mut bitmaps = Bitmaps::default();
        let mut pack = |src: usize| -> Result<*const u8> {
            if plan.len == 0 {
                return Ok(std::ptr::null());
            }
            let buffer = device.allocate(plan.len.div_ceil(8))?;
            let dst = buffer.as_ptr();
            buffers.push(buffer);
            // SAFETY: `src` holds `len` one-byte values (validated plan,
            // kept alive by `owner`, which the result keeps until the
            // event); `dst` was just allocated with `len / 8` rounded up
            // bytes.
            unsafe { cuda.pack_bits(src as *const u8, plan.len, dst, &stream) }?;
            Ok(dst.cast_const())
        };
        if plan.bool_needs_packing {
            bitmaps.values = Some(pack(plan.data_ptr)?);
        }
        if let Some(mask) = &plan.mask {
            bitmaps.validity = Some(pack(mask.data_ptr)?);
        }
        Ok(bitmaps)
    })();
    let bitmaps = match queued {
        Ok(bitmaps) => bitmaps,
        // Kernels queued before the failure may still read the producer's
        // memory and write `buffers`.
        Err(e) => return Err(drain_then_free(&device, &stream, (buffers, owner), e)),
    };
    converted_array(&device, stream, buffers, Box::new(owner), |owner| {
        // SAFETY: forwarded contract; the bitmaps were made above and
        // `owner` keeps them; the array is ordered after the kernels.
        unsafe { import_with_bitmaps(plan, device.clone(), owner, bitmaps) }
    })
}

/// The CUDA Array Interface of `array` (version 3; see
/// [`crate::cai::describe`] for what can be described): `stream` names
/// this device's interface stream when the array's `sync_event` is still
/// pending, `None` otherwise; an array with nulls gets an element-wise
/// mask made on the GPU. An array without a CUDA device of this crate (no
/// driver here) is described as [`crate::cai::describe`] does: only
/// without nulls and without a pending `sync_event`.
pub fn export_cai(array: &DeviceArray) -> Result<CaiExport> {
    let mut interface = describe_values(array)?;
    let Some((device, cuda)) = array
        .device()
        .and_then(|d| CudaDevice::of(d.as_ref()).map(|cuda| (d, cuda)))
    else {
        // No CUDA device for the array (no driver, or a foreign
        // implementation): it can be described, but not waited on or
        // masked.
        if !array.is_synchronized() {
            return Err(Error::NotSupported(format!(
                "cannot name a stream for the pending sync_event of an array on {} device {}: \
                 no CUDA device implementation is loaded for it",
                array.device_type(),
                array.device_id()
            )));
        }
        refuse_nulls(array)?;
        return Ok(CaiExport {
            interface,
            mask: None,
        });
    };
    interface.stream = array
        .sync()
        // SAFETY: the array's own event, kept valid by the array.
        .order_foreign(|event| unsafe { cuda.stream_after(event) })?
        .flatten();
    let validity = array.buffers().first().map_or(std::ptr::null(), |b| b.ptr);
    let has_nulls = !validity.is_null() && array.null_count() != Some(0) && !array.is_empty();
    let mask = if has_nulls {
        Some(mask_of(array, device, cuda, validity)?)
    } else {
        None
    };
    Ok(CaiExport { interface, mask })
}

/// Unpacks the validity bitmap at `validity` (from bit `array.offset()`)
/// into one byte per value on the GPU.
fn mask_of(
    array: &DeviceArray,
    device: &DeviceRef,
    cuda: &CudaDevice,
    validity: *const u8,
) -> Result<CaiMask> {
    let len = array.len();
    // The kernel reads the bitmap as far as the array claims: a claim past
    // the device's memory is refused first, as copies refuse it.
    let claimed = (array.offset() + len).div_ceil(8);
    if let Err(answer) = device.check_device_range(validity, claimed) {
        return Err(Error::invalid(
            &Path::root().buffer(0),
            format!(
                "the validity bitmap claims {claimed} bytes at {validity:p}, which are not \
                 all memory of the device: {answer}"
            ),
        ));
    }
    let stream = device.create_stream()?;
    array.sync().order_stream(device.as_ref(), &stream)?;
    let buffer = device.allocate(len)?;
    let dst = buffer.as_ptr();
    // SAFETY: the bitmap covers `offset + len` bits (an imported array was
    // validated); `array`, kept by the result until the event, keeps it
    // alive; `dst` holds `len` bytes.
    let queued = unsafe { cuda.unpack_bits(validity, array.offset(), len, dst, &stream) };
    if let Err(e) = queued {
        return Err(drain_then_free(device, &stream, (buffer, array.clone()), e));
    }
    let node = Node::primitive(DataType::UInt8, len, RawBuf { ptr: dst, len });
    let bytes = converted_array(
        device,
        stream,
        smallvec![buffer],
        Box::new(array.clone()),
        |owner| {
            Ok(DeviceArray::from_node(
                node,
                Field::new("", DataType::UInt8, false),
                device.device_type(),
                device.device_id(),
                Some(device.clone()),
                owner,
            ))
        },
    )?;
    let mut interface = describe_values(&bytes)?;
    interface.typestr = "|b1".to_string();
    interface.stream = bytes
        .sync()
        // SAFETY: the mask's event, kept by `bytes`.
        .order_foreign(|event| unsafe { cuda.stream_after(event) })?
        .flatten();
    Ok(CaiMask { interface, bytes })
}

//! Import: the rules that turn a [`CudaArrayInterface`] into an
//! [`ImportPlan`], and the array a plan describes ([`import`]).

use std::any::Any;
use std::sync::Arc;

use arrow_schema::{DataType, Field};

use super::entries::{structured, unsupported_version};
use super::typestr::{self, Element};
use super::{invalid, key, CudaArrayInterface, ROOT};
use crate::array::node::{Node, RawBuf};
use crate::array::DeviceArray;
use crate::device::{DeviceRef, StreamSync};
use crate::error::{Error, Result};

/// What importing a validated interface takes: the Arrow type, where the
/// values are, what must be converted and which stream to wait on first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImportPlan {
    /// The Arrow type of the array (`Boolean` for `|b1`).
    pub data_type: DataType,
    /// Number of values.
    pub len: usize,
    /// Device address of the first value; 0 when `len` is 0.
    pub data_ptr: usize,
    /// Bytes per value in the producer's memory.
    pub itemsize: usize,
    /// `|b1`: one byte per value, to be bit-packed into Arrow's `Boolean`
    /// (a conversion, not zero-copy).
    pub bool_needs_packing: bool,
    /// The element-wise mask, to be converted into the validity bitmap.
    pub mask: Option<MaskPlan>,
    /// The stream the producer may still have work on (spec v3,
    /// "Synchronization"): wait on it, or queue the reads on it, before
    /// touching the data.
    pub stream: StreamSync,
}

/// An element-wise mask (spec: "true or not true" per element), one byte
/// per value, of the array's length: a non-zero byte marks a valid value.
/// It always needs a conversion into Arrow's validity bitmap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MaskPlan {
    /// Device address of the first mask byte; 0 when the array is empty.
    pub data_ptr: usize,
    /// Bytes per mask value (1).
    pub itemsize: usize,
    /// The stream of the mask's own interface, waited on like the data's.
    pub stream: StreamSync,
}

/// One level (the array or its mask), checked.
struct Checked {
    element: Element,
    len: usize,
    data_ptr: usize,
    stream: StreamSync,
}

impl CudaArrayInterface {
    /// Checks everything the interface says against the spec and this
    /// crate's rules (see the [module](super) documentation) and returns
    /// what importing it takes. Errors name the entry: [`Error::Invalid`]
    /// for what breaks the spec (stream 0, pointer 0 with values, a negative
    /// size, values past the end of the address space),
    /// [`Error::NotSupported`] for valid data that no Arrow array
    /// here holds (two dimensions, a non-contiguous stride, a big-endian or
    /// complex type).
    pub fn validate(&self) -> Result<ImportPlan> {
        let data = self.check(ROOT)?;
        let mask = match &self.mask {
            None => None,
            Some(mask) => Some(mask_plan(mask, &data)?),
        };
        Ok(ImportPlan {
            data_type: data.element.data_type,
            len: data.len,
            data_ptr: data.data_ptr,
            itemsize: data.element.itemsize,
            bool_needs_packing: data.element.bool_needs_packing,
            mask,
            stream: data.stream,
        })
    }

    fn check(&self, prefix: &str) -> Result<Checked> {
        if !matches!(self.version, 2 | 3) {
            return Err(unsupported_version(&key(prefix, "version"), self.version));
        }
        let element = typestr::parse(&self.typestr, &key(prefix, "typestr"))?;
        if let Some(descr) = &self.descr {
            let plain =
                matches!(descr.as_slice(), [(name, t)] if name.is_empty() && *t == self.typestr);
            if !plain {
                return Err(structured(&key(prefix, "descr")));
            }
        }
        let len = self.len(prefix)?;
        self.check_strides(prefix, len, element.itemsize)?;
        let bytes = len.checked_mul(element.itemsize).ok_or_else(|| {
            invalid(
                &key(prefix, "shape"),
                format!(
                    "{len} values of {} bytes overflow the address space",
                    element.itemsize
                ),
            )
        })?;
        let (ptr, _read_only) = self.data;
        if len > 0 && ptr == 0 {
            return Err(invalid(
                &key(prefix, "data"),
                format!(
                    "pointer is 0 but the array has {len} values (0 is for zero-size arrays only)"
                ),
            ));
        }
        // No allocation ends past the address space: such a pointer cannot
        // hold the values, and an array over it would wrap.
        if len > 0 && ptr.checked_add(bytes).is_none() {
            return Err(invalid(
                &key(prefix, "data"),
                format!(
                    "pointer {ptr:#x} with {len} values of {} bytes runs past the end of the \
                     address space",
                    element.itemsize
                ),
            ));
        }
        Ok(Checked {
            element,
            len,
            // Nothing is read from a zero-size array, whatever its pointer.
            data_ptr: if len == 0 { 0 } else { ptr },
            stream: stream_sync(self.stream, &key(prefix, "stream"))?,
        })
    }

    /// The number of values: one dimension, or one value for 0-d.
    fn len(&self, prefix: &str) -> Result<usize> {
        let shape_key = key(prefix, "shape");
        match self.shape.as_slice() {
            [] => Ok(1),
            [extent] => usize::try_from(*extent)
                .map_err(|_| invalid(&shape_key, format!("size {extent} is negative"))),
            shape => Err(Error::NotSupported(format!(
                "{shape_key}: {shape:?} has {} dimensions; an Arrow array is one-dimensional \
                 (expected one dimension, or none for a single value): flatten it first",
                shape.len()
            ))),
        }
    }

    /// `None` is C-contiguous (spec: "If strides is not given, or it is
    /// None, the array is in C-contiguous layout"); otherwise the stride
    /// must be the item size, unless there is at most one value.
    fn check_strides(&self, prefix: &str, len: usize, itemsize: usize) -> Result<()> {
        let Some(strides) = &self.strides else {
            return Ok(());
        };
        let strides_key = key(prefix, "strides");
        if strides.len() != self.shape.len() {
            return Err(invalid(
                &strides_key,
                format!(
                    "{} strides for {} dimensions (expected one per dimension)",
                    strides.len(),
                    self.shape.len()
                ),
            ));
        }
        match strides.as_slice() {
            [stride] if len > 1 && usize::try_from(*stride).ok() != Some(itemsize) => {
                Err(Error::NotSupported(format!(
                    "{strides_key}: the array is not contiguous: stride {stride} bytes, expected \
                     {itemsize} (the item size) or None; make a contiguous copy first"
                )))
            }
            _ => Ok(()),
        }
    }
}

/// The mask: element-wise, one byte per value, of the array's shape.
fn mask_plan(mask: &CudaArrayInterface, data: &Checked) -> Result<MaskPlan> {
    let prefix = key(ROOT, "mask");
    if mask.mask.is_some() {
        return Err(Error::NotSupported(format!(
            "{}: a mask cannot have a mask of its own",
            key(&prefix, "mask")
        )));
    }
    let checked = mask.check(&prefix)?;
    let one_byte = matches!(
        checked.element.data_type,
        DataType::Boolean | DataType::UInt8 | DataType::Int8
    );
    if !one_byte {
        return Err(Error::NotSupported(format!(
            "{}: a mask of {:?} is not supported: masks are element-wise bools or one-byte \
             integers (|b1, |u1, |i1)",
            key(&prefix, "typestr"),
            mask.typestr
        )));
    }
    if checked.len != data.len {
        return Err(invalid(
            &key(&prefix, "shape"),
            format!(
                "the mask has {} values, the array {} (expected the array's shape)",
                checked.len, data.len
            ),
        ));
    }
    Ok(MaskPlan {
        data_ptr: checked.data_ptr,
        itemsize: checked.element.itemsize,
        stream: checked.stream,
    })
}

/// Spec v3 `stream`: 0 is disallowed, 1 and 2 are the default streams,
/// other integers are handles, `None` needs no synchronization.
fn stream_sync(stream: Option<u64>, stream_key: &str) -> Result<StreamSync> {
    Ok(match stream {
        None => StreamSync::None,
        Some(0) => {
            return Err(invalid(
                stream_key,
                "0 is disallowed (spec v3: ambiguous between None and the default stream, and \
                 between the legacy and per-thread default streams); use None, 1 or 2",
            ))
        }
        Some(1) => StreamSync::Legacy,
        Some(2) => StreamSync::PerThread,
        Some(handle) => StreamSync::Handle(handle),
    })
}

/// The array `plan` describes on `device`, zero-copy: its values buffer is
/// the producer's memory, kept alive by `owner` (the interface has no owner
/// slot, spec "Lifetime management": pass the producer object) until the
/// last handle over it is dropped. The array has no nulls.
///
/// Plans that need a conversion (`|b1` packing, a mask) are
/// [`Error::NotSupported`] here: they need device kernels, which the CUDA
/// device runs (`cai::cuda::import_cai`, feature `cuda`).
///
/// # Safety
/// `plan` must come from [`CudaArrayInterface::validate`] of the interface
/// of an object that `owner` keeps alive; `plan.data_ptr` must be memory of
/// `device` valid for `len * itemsize` bytes while `owner` lives; and the
/// data must be ready: the caller has waited on `plan.stream` (or ordered
/// every later use of the array after it).
pub unsafe fn import(
    plan: &ImportPlan,
    device: DeviceRef,
    owner: Arc<dyn Any + Send + Sync>,
) -> Result<DeviceArray> {
    if plan.bool_needs_packing || plan.mask.is_some() {
        return Err(Error::NotSupported(format!(
            "{}: needs a device conversion into an Arrow bitmap, which device type {} does not \
             run (the CUDA devices do)",
            conversion_needed(plan),
            device.device_type()
        )));
    }
    // SAFETY: forwarded contract; no conversion is needed.
    unsafe { import_with_bitmaps(plan, device, owner, Bitmaps::default()) }
}

/// What a plan needs converted, for messages.
fn conversion_needed(plan: &ImportPlan) -> &'static str {
    match (plan.bool_needs_packing, plan.mask.is_some()) {
        (true, true) => "a |b1 array with a mask (one byte per value for both)",
        (true, false) => "a |b1 array (one byte per value, Arrow's Boolean is bit-packed)",
        _ => "a masked array (an element-wise mask, Arrow's validity is a bitmap)",
    }
}

/// Bitmaps a device made for a plan's conversions: `(len + 7) / 8` bytes
/// each, LSB first, in memory of the importing device.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Bitmaps {
    /// The `|b1` values, bit-packed (for `bool_needs_packing`).
    pub values: Option<*const u8>,
    /// The validity bitmap made from the mask.
    pub validity: Option<*const u8>,
}

/// [`import`] with the conversions done: `bitmaps` holds one bitmap for
/// each conversion the plan needs. A validity bitmap's null count is not
/// known without reading it on the host, so it is reported as unknown.
///
/// # Safety
/// As for [`import`]; the bitmaps are valid device memory, kept alive by
/// `owner`, and written before every use of the array (the caller orders
/// the array after the conversion).
pub(crate) unsafe fn import_with_bitmaps(
    plan: &ImportPlan,
    device: DeviceRef,
    owner: Arc<dyn Any + Send + Sync>,
    bitmaps: Bitmaps,
) -> Result<DeviceArray> {
    let bitmap_len = plan.len.div_ceil(8);
    let bitmap = |ptr: Option<*const u8>, what: &str| match ptr {
        Some(ptr) => Ok(if plan.len == 0 {
            RawBuf::NULL
        } else {
            RawBuf {
                ptr,
                len: bitmap_len,
            }
        }),
        None => Err(Error::NotSupported(format!(
            "{}: the {what} bitmap was not made",
            conversion_needed(plan)
        ))),
    };
    let values = if plan.bool_needs_packing {
        bitmap(bitmaps.values, "values")?
    } else {
        let bytes = plan.len.checked_mul(plan.itemsize).ok_or_else(|| {
            invalid(
                &key(ROOT, "shape"),
                format!(
                    "{} values of {} bytes overflow the address space",
                    plan.len, plan.itemsize
                ),
            )
        })?;
        if plan.len == 0 {
            RawBuf::NULL
        } else {
            RawBuf {
                // A device address, never dereferenced here.
                ptr: plan.data_ptr as *const u8,
                len: bytes,
            }
        }
    };
    let mut node = Node::primitive(plan.data_type.clone(), plan.len, values);
    if plan.mask.is_some() {
        node.buffers[0] = bitmap(bitmaps.validity, "validity")?;
        node.null_count = if plan.len == 0 { Some(0) } else { None };
    }
    let nullable = plan.mask.is_some();
    let (device_type, device_id) = (device.device_type(), device.device_id());
    Ok(DeviceArray::from_node(
        node,
        Field::new("", plan.data_type.clone(), nullable),
        device_type,
        device_id,
        Some(device),
        owner,
    ))
}

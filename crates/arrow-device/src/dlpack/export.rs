//! Export: a [`DeviceArray`] → an owned DLPack tensor, zero-copy.
//!
//! The tensor points into the array's values buffer; its manager context
//! holds a clone of the array (which keeps the memory alive) together with the
//! shape and strides, in one allocation that also holds the managed struct
//! itself. The deleter frees that allocation; [`DlpackTensor`] calls it on
//! drop unless the pointer was handed over with `into_raw_*`.

use std::ffi::c_void;
use std::fmt;
use std::mem::ManuallyDrop;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr::{self, NonNull};

use super::abi::*;
use super::dtype::dlpack_data_type;
use crate::array::{DeviceArray, HandOn};
use crate::device::StreamSync;
use crate::error::{Error, Result};

/// The DLPack device of `array`: its device type (Arrow's values are
/// DLPack's) and id, with id 0 for CPU, pinned and managed host memory, as
/// dlpack.h asks (Arrow's CPU arrays use -1). This is what `__dlpack_device__`
/// returns.
///
/// An array on a device type without an implementation here (an opaque
/// import) goes through the one rule of every hand-over
/// (`DeviceArray::check_hand_on`): a device type the spec names, and no
/// `sync_event`, which DLPack could not carry and this crate cannot wait on.
pub fn dlpack_device(array: &DeviceArray) -> Result<DLDevice> {
    array.check_hand_on(HandOn::Dlpack)?;
    let device_type = array.device_type();
    let device_id = if device_type.is_host_accessible() {
        0
    } else {
        i32::try_from(array.device_id()).map_err(|_| {
            Error::NotSupported(format!(
                "device id {} of {device_type} does not fit DLPack's int32 device_id",
                array.device_id()
            ))
        })?
    };
    Ok(DLDevice {
        device_type,
        device_id,
    })
}

/// Which managed-tensor struct an export writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DlpackAbi {
    /// [`DLManagedTensorVersioned`] (DLPack 1.x, flagged read-only): for
    /// consumers that pass a `max_version` of 1.0 or more.
    Versioned,
    /// The legacy [`DLManagedTensor`]: for consumers that pass no
    /// `max_version`, or one below 1.0.
    Legacy,
}

impl DlpackAbi {
    /// The struct a consumer asks for with `max_version` (DLPack's
    /// `__dlpack__(max_version=...)`: `None` when it passed none).
    pub fn for_max_version(max_version: Option<(u32, u32)>) -> DlpackAbi {
        match max_version {
            Some((major, _)) if major >= 1 => DlpackAbi::Versioned,
            _ => DlpackAbi::Legacy,
        }
    }
}

/// Exports `array` as a DLPack tensor, zero-copy, after waiting on the host
/// for the producer's `sync_event` ([`DeviceArray::synchronize`]), as the
/// managed-tensor struct `abi` names.
///
/// Only one-dimensional arrays of fixed-width numbers without nulls can be
/// exported ([`dlpack_data_type`](super::dlpack_data_type) lists the types);
/// a validity buffer is fine when no slot is null. Everything else is
/// [`Error::NotSupported`] with the reason.
///
/// Waiting on the host is always correct, whatever stream the consumer then
/// reads on; a consumer-stream-ordered export (DLPack's `stream` argument,
/// without blocking the host) can be built on
/// [`export_dlpack_unsynchronized`].
pub fn export_dlpack(array: &DeviceArray, abi: DlpackAbi) -> Result<DlpackTensor> {
    let tensor = export_dlpack_unsynchronized(array, abi)?;
    array.synchronize()?;
    Ok(tensor)
}

/// As [`export_dlpack`], for a consumer that named its `stream` (DLPack's
/// `__dlpack__(stream=...)`, read by [`dlpack_stream`](super::dlpack_stream)):
///
/// * for device memory of a CUDA GPU of this crate (`CUDA`, feature
///   `cuda`), the consumer's stream is made to wait on the array's
///   `sync_event` on the device, and the host does not block;
///   [`StreamSync::None`] (DLPack's `-1`) does no synchronization at all, as
///   the standard says ("producer must not perform any synchronization":
///   the consumer takes that on);
/// * everywhere else the host waits for the `sync_event`, which orders the
///   data before any stream and before host reads: pinned and managed
///   memory are often read by the host, which a stream wait would not
///   order.
pub fn export_dlpack_for_stream(
    array: &DeviceArray,
    abi: DlpackAbi,
    stream: StreamSync,
) -> Result<DlpackTensor> {
    #[cfg(feature = "cuda")]
    if let Some(cuda) = array
        .device()
        .filter(|d| d.device_type() == crate::abi::DeviceType::CUDA)
        .and_then(|d| crate::device::cuda::CudaDevice::of(d.as_ref()))
    {
        let tensor = export_dlpack_unsynchronized(array, abi)?;
        // SAFETY: the array's own event, kept valid by the tensor's clone
        // of the array; the stream is the consumer's, which the protocol
        // makes it answer for.
        array
            .sync()
            .order_foreign(|event| unsafe { cuda.make_stream_wait(stream, event) })?;
        return Ok(tensor);
    }
    let _ = stream;
    export_dlpack(array, abi)
}

/// As [`export_dlpack`], without waiting for the producer's `sync_event`
/// ([`DeviceArray::sync_event`]): the caller must order the consumer's reads
/// after it, e.g. by making the consumer's stream wait on the event
/// (`cudaStreamWaitEvent`) before handing the tensor over.
pub fn export_dlpack_unsynchronized(array: &DeviceArray, abi: DlpackAbi) -> Result<DlpackTensor> {
    let dtype = dlpack_data_type(array.data_type())?;
    let device = dlpack_device(array)?;
    check_no_nulls(array)?;
    let width = usize::from(dtype.bits / 8);
    let len = array.len();
    let values = array
        .buffers()
        .get(1)
        .map_or(ptr::null(), |buffer| buffer.ptr);
    // The first element, not the buffer start with a byte_offset: most
    // consumers (PyTorch, CuPy, NumPy) produce byte_offset 0 and some ignore
    // it, and dlpack.h itself says not to rely on data being 256-aligned.
    // `wrapping_add` because device pointers are never dereferenced here.
    // An empty tensor's data is NULL (dlpack.h: "if the tensor is of size
    // zero, then the data pointer should be set to NULL").
    let data = if len == 0 || values.is_null() {
        ptr::null_mut()
    } else {
        values
            .wrapping_add(array.offset() * width)
            .cast_mut()
            .cast()
    };
    let shape = i64::try_from(len).map_err(|_| {
        Error::NotSupported(format!("length {len} does not fit DLPack's int64 shape"))
    })?;
    let dl_tensor = DLTensor {
        data,
        device,
        ndim: 1,
        dtype,
        // Set once the context has its final address (see `leak`).
        shape: ptr::null_mut(),
        strides: ptr::null_mut(),
        byte_offset: 0,
    };
    let context = Context {
        shape: [shape],
        // Always written: NULL strides meant "compact" before DLPack 1.2,
        // which forbids NULL when ndim != 0; [1] reads right under both.
        strides: [1],
        _array: array.clone(),
    };
    let managed = if abi == DlpackAbi::Versioned {
        Managed::Versioned(leak(
            DLManagedTensorVersioned {
                version: DLPackVersion::CURRENT,
                manager_ctx: ptr::null_mut(),
                deleter: Some(delete_versioned),
                // Arrow data is immutable: every holder of these buffers may
                // share them, so no consumer may write through this tensor.
                flags: DLPACK_FLAG_BITMASK_READ_ONLY,
                dl_tensor,
            },
            context,
        ))
    } else {
        Managed::Legacy(leak(
            DLManagedTensor {
                dl_tensor,
                manager_ctx: ptr::null_mut(),
                deleter: Some(delete_legacy),
            },
            context,
        ))
    };
    Ok(DlpackTensor { managed })
}

/// Refuses an array with nulls: DLPack has no validity mask.
fn check_no_nulls(array: &DeviceArray) -> Result<()> {
    let nulls = match array.null_count() {
        Some(count) => count,
        // Unknown (a slice of an array with nulls, or a producer that sent
        // -1): count them, unless there is no bitmap at all. On the CPU this
        // reads the bitmap in place; on a device it copies the slice to the
        // host first.
        None if array.buffers().first().is_none_or(|b| b.ptr.is_null()) => 0,
        None => array.to_host()?.null_count(),
    };
    if nulls > 0 {
        return Err(Error::NotSupported(format!(
            "cannot export through DLPack: the {} array has {nulls} nulls; DLPack has no \
             validity mask (fill or drop the nulls first)",
            array.data_type()
        )));
    }
    Ok(())
}

/// What a tensor's manager context owns: the shape and strides it points to,
/// and the array whose memory it describes.
struct Context {
    shape: [i64; 1],
    strides: [i64; 1],
    _array: DeviceArray,
}

/// One allocation: the managed struct first, then its context.
#[repr(C)]
struct Exported<M> {
    managed: M,
    context: Context,
}

/// The fields of either managed struct that [`leak`] fills in.
trait ManagedStruct {
    fn parts(&mut self) -> (&mut DLTensor, &mut *mut c_void);
}

impl ManagedStruct for DLManagedTensor {
    fn parts(&mut self) -> (&mut DLTensor, &mut *mut c_void) {
        (&mut self.dl_tensor, &mut self.manager_ctx)
    }
}

impl ManagedStruct for DLManagedTensorVersioned {
    fn parts(&mut self) -> (&mut DLTensor, &mut *mut c_void) {
        (&mut self.dl_tensor, &mut self.manager_ctx)
    }
}

/// Allocates `Exported { managed, context }`, points `manager_ctx` at the
/// allocation and `shape`/`strides` into it, and returns the managed struct
/// (the allocation's start), which the deleter frees.
fn leak<M: ManagedStruct>(managed: M, context: Context) -> NonNull<M> {
    let exported = Box::into_raw(Box::new(Exported { managed, context }));
    // SAFETY: `exported` is a fresh, unique allocation that never moves; the
    // pointers written into it stay valid until the deleter frees it. The
    // `&mut` to `managed` does not overlap `context`, whose address is taken
    // first without a reference.
    unsafe {
        let shape = ptr::addr_of_mut!((*exported).context.shape).cast::<i64>();
        let strides = ptr::addr_of_mut!((*exported).context.strides).cast::<i64>();
        let (tensor, manager_ctx) = (*exported).managed.parts();
        tensor.shape = shape;
        tensor.strides = strides;
        *manager_ctx = exported.cast();
    }
    // SAFETY: a field's address inside a non-null allocation is non-null.
    unsafe { NonNull::new_unchecked(ptr::addr_of_mut!((*exported).managed)) }
}

/// The deleter of both managed structs: frees the allocation `manager_ctx`
/// points to, dropping the array clone (which may release foreign memory).
///
/// # Safety
/// `manager_ctx` must come from [`leak`] for an `Exported<M>` not yet freed.
unsafe fn delete<M>(manager_ctx: *mut c_void) {
    // A panic must not unwind into the consumer's C frame, and there is no
    // one to report it to: it is swallowed.
    let _ = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: per the contract; the consumer calls the deleter once.
        drop(unsafe { Box::from_raw(manager_ctx.cast::<Exported<M>>()) });
    }));
}

unsafe extern "C" fn delete_legacy(managed: *mut DLManagedTensor) {
    if managed.is_null() {
        return;
    }
    // SAFETY: a non-NULL pointer passed to this deleter is one of our
    // tensors (the deleter is only ever set by `export_dlpack`), live until
    // this call.
    unsafe { delete::<DLManagedTensor>((*managed).manager_ctx) }
}

unsafe extern "C" fn delete_versioned(managed: *mut DLManagedTensorVersioned) {
    if managed.is_null() {
        return;
    }
    // SAFETY: as in `delete_legacy`.
    unsafe { delete::<DLManagedTensorVersioned>((*managed).manager_ctx) }
}

/// Which managed struct a [`DlpackTensor`] owns.
enum Managed {
    Legacy(NonNull<DLManagedTensor>),
    Versioned(NonNull<DLManagedTensorVersioned>),
}

/// An exported DLPack tensor, owned: dropping it calls the deleter, unless
/// the pointer was handed to a consumer with
/// [`into_raw_versioned`](DlpackTensor::into_raw_versioned) /
/// [`into_raw_legacy`](DlpackTensor::into_raw_legacy) (which then calls the
/// deleter exactly once, from any thread).
pub struct DlpackTensor {
    managed: Managed,
}

// SAFETY: the tensor owns its allocation alone; what it holds (a
// `DeviceArray`, plain numbers) is Send, and the deleter may run on any
// thread.
unsafe impl Send for DlpackTensor {}
// SAFETY: shared references only read plain fields.
unsafe impl Sync for DlpackTensor {}

impl DlpackTensor {
    /// Which managed-tensor struct this is.
    pub fn abi(&self) -> DlpackAbi {
        match self.managed {
            Managed::Versioned(_) => DlpackAbi::Versioned,
            Managed::Legacy(_) => DlpackAbi::Legacy,
        }
    }

    /// The tensor (data pointer, device, dtype, shape and strides pointers).
    pub fn dl_tensor(&self) -> &DLTensor {
        match &self.managed {
            // SAFETY: owned and live until drop or `into_raw_*`.
            Managed::Legacy(m) => unsafe { &m.as_ref().dl_tensor },
            // SAFETY: as above.
            Managed::Versioned(m) => unsafe { &m.as_ref().dl_tensor },
        }
    }

    /// The tensor's shape: one extent, the array's length.
    pub fn shape(&self) -> &[i64] {
        // SAFETY: export points `shape` at an array of `ndim` (1) extents in
        // the context, which lives as long as `self`.
        unsafe { std::slice::from_raw_parts(self.dl_tensor().shape, 1) }
    }

    /// The tensor's strides in elements: always `[1]`.
    pub fn strides(&self) -> &[i64] {
        // SAFETY: as for `shape`.
        unsafe { std::slice::from_raw_parts(self.dl_tensor().strides, 1) }
    }

    /// The version of a versioned tensor (1.1), `None` for a legacy one.
    pub fn version(&self) -> Option<DLPackVersion> {
        match &self.managed {
            Managed::Legacy(_) => None,
            // SAFETY: owned and live.
            Managed::Versioned(m) => Some(unsafe { m.as_ref().version }),
        }
    }

    /// The flags of a versioned tensor (`DLPACK_FLAG_BITMASK_READ_ONLY`); 0
    /// for a legacy tensor, which has no way to say read-only.
    pub fn flags(&self) -> u64 {
        match &self.managed {
            Managed::Legacy(_) => 0,
            // SAFETY: owned and live.
            Managed::Versioned(m) => unsafe { m.as_ref().flags },
        }
    }

    /// Hands the versioned struct over (e.g. into a `"dltensor_versioned"`
    /// PyCapsule): its receiver must call `deleter` exactly once. A legacy
    /// tensor is an error (and is deleted): [`abi`](Self::abi)
    /// tells which one export made.
    pub fn into_raw_versioned(self) -> Result<*mut DLManagedTensorVersioned> {
        match self.managed {
            Managed::Versioned(m) => {
                let _ = ManuallyDrop::new(self);
                Ok(m.as_ptr())
            }
            Managed::Legacy(_) => Err(wrong_kind("a legacy DLManagedTensor", "into_raw_legacy")),
        }
    }

    /// Hands the legacy struct over (e.g. into a `"dltensor"` PyCapsule): its
    /// receiver must call `deleter` exactly once. A versioned tensor is an
    /// error (and is deleted).
    pub fn into_raw_legacy(self) -> Result<*mut DLManagedTensor> {
        match self.managed {
            Managed::Legacy(m) => {
                let _ = ManuallyDrop::new(self);
                Ok(m.as_ptr())
            }
            Managed::Versioned(_) => Err(wrong_kind(
                "a DLManagedTensorVersioned",
                "into_raw_versioned",
            )),
        }
    }
}

fn wrong_kind(found: &str, instead: &str) -> Error {
    Error::NotSupported(format!(
        "the DLPack tensor is {found}: hand it over with {instead}"
    ))
}

impl Drop for DlpackTensor {
    fn drop(&mut self) {
        match self.managed {
            // SAFETY: the tensor was not handed over (`into_raw_*` skips
            // this drop), so the deleter has not run.
            Managed::Legacy(m) => unsafe { delete_legacy(m.as_ptr()) },
            // SAFETY: as above.
            Managed::Versioned(m) => unsafe { delete_versioned(m.as_ptr()) },
        }
    }
}

impl fmt::Debug for DlpackTensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let tensor = self.dl_tensor();
        f.debug_struct("DlpackTensor")
            .field("version", &self.version())
            .field("flags", &self.flags())
            .field("data", &tensor.data)
            .field("device", &tensor.device)
            .field("dtype", &tensor.dtype)
            .field("shape", &self.shape())
            .finish()
    }
}

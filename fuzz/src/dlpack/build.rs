//! Building a case as a producer would: the memory a conforming reader may
//! touch ([`TensorSpec::extent`]), made real where it can be, and the
//! managed struct around the tensor, whose deleter frees it all.

use std::ffi::c_void;
use std::sync::atomic::{AtomicUsize, Ordering};

use arrow_device::abi::DeviceType;
use arrow_device::dlpack::{
    import_dlpack, import_dlpack_versioned, DLDevice, DLManagedTensor, DLManagedTensorVersioned,
    DLTensor, DlpackAbi,
};
use arrow_device::DeviceArray;

use super::decode::{DataSpec, TensorSpec, MAX_NDIM};
use crate::memory::{self, MAX_BACKED, OPAQUE_ADDRESS};

/// Where a tensor moves when its memory cannot be real: nothing here
/// implements this device type, so nothing reads it.
const NEVER_READ: DeviceType = DeviceType::VULKAN;

/// What a conforming reader of a tensor may touch, relative to `data`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Extent {
    /// Bytes `[-before, after)` around `data`.
    Bytes { before: u64, after: u64 },
    /// Too large to back (or past what integers hold).
    TooLarge,
    /// The tensor says something a consumer sees is wrong before reading
    /// (NULL shape, a negative extent, `ndim` out of range): no conforming
    /// reader reads it.
    Visible,
}

impl TensorSpec {
    /// Whether `shape` and `strides` are given real arrays (when not NULL).
    pub(super) fn shape_readable(&self) -> bool {
        (0..=MAX_NDIM).contains(&self.ndim)
    }

    fn element_bytes(&self) -> u64 {
        (u64::from(self.dtype.bits) * u64::from(self.dtype.lanes)).div_ceil(8)
    }

    pub(super) fn extent(&self) -> Extent {
        if !self.shape_readable() || (self.ndim > 0 && self.shape_null) {
            return Extent::Visible;
        }
        if self.shape.iter().any(|s| *s < 0) {
            return Extent::Visible;
        }
        if self.shape.contains(&0) {
            return Extent::Bytes {
                before: 0,
                after: 0,
            };
        }
        let strides = if self.strides_null {
            compact_strides(&self.shape)
        } else {
            Some(self.strides.clone())
        };
        let Some(strides) = strides else {
            return Extent::TooLarge;
        };
        let strides = strides.iter().map(|s| i128::from(*s));
        let Some((low, high)) = memory::reach(&self.shape, strides) else {
            return Extent::TooLarge;
        };
        let width = i128::from(self.element_bytes());
        let offset = i128::from(self.byte_offset);
        let start = low.checked_mul(width).and_then(|l| l.checked_add(offset));
        let end = high
            .checked_add(1)
            .and_then(|h| h.checked_mul(width))
            .and_then(|h| h.checked_add(offset));
        let (Some(start), Some(end)) = (start, end) else {
            return Extent::TooLarge;
        };
        let before = start.checked_neg().map_or(i128::MAX, |b| b.max(0));
        if before.saturating_add(end) > MAX_BACKED as i128 {
            return Extent::TooLarge;
        }
        Extent::Bytes {
            before: before as u64,
            after: end as u64,
        }
    }
}

/// Row-major strides of `shape`, in elements; `None` on overflow.
pub(super) fn compact_strides(shape: &[i64]) -> Option<Vec<i64>> {
    let mut strides = vec![1i64; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        strides[i] = strides[i + 1].checked_mul(shape[i + 1])?;
    }
    Some(strides)
}

/// Memory the host may read, were the pointer real.
fn host_readable(device_type: DeviceType) -> bool {
    device_type.is_host_accessible() || device_type == DeviceType::EXT_DEV
}

/// The managed struct and everything its deleter frees; the struct comes
/// first, so a pointer to it is a pointer to this.
#[repr(C)]
pub(super) struct Hand<M> {
    managed: M,
    deletes: AtomicUsize,
    storage: Option<Vec<u64>>,
    shape: Option<Vec<i64>>,
    strides: Option<Vec<i64>>,
}

/// The two managed structs (DLPack 1.x's versioned one and the legacy
/// one): what the harness does the same way for both, apart from how each
/// is made and which import takes it.
pub(super) trait Managed: Sized {
    const ABI: DlpackAbi;

    /// The struct around `dl_tensor` for `spec`, with our deleter unless
    /// `deleter` is false.
    fn new(spec: &TensorSpec, dl_tensor: DLTensor, deleter: bool) -> Self;

    fn tensor(&mut self) -> &mut DLTensor;

    /// The import of this struct.
    ///
    /// # Safety
    /// As for [`import_dlpack_versioned`] / [`import_dlpack`].
    unsafe fn import(managed: *mut Self) -> arrow_device::Result<DeviceArray>;
}

impl Managed for DLManagedTensor {
    const ABI: DlpackAbi = DlpackAbi::Legacy;

    fn new(_: &TensorSpec, dl_tensor: DLTensor, deleter: bool) -> Self {
        DLManagedTensor {
            dl_tensor,
            manager_ctx: std::ptr::null_mut(),
            deleter: deleter.then_some(delete::<DLManagedTensor>),
        }
    }

    fn tensor(&mut self) -> &mut DLTensor {
        &mut self.dl_tensor
    }

    unsafe fn import(managed: *mut Self) -> arrow_device::Result<DeviceArray> {
        // SAFETY: forwarded.
        unsafe { import_dlpack(managed) }
    }
}

impl Managed for DLManagedTensorVersioned {
    const ABI: DlpackAbi = DlpackAbi::Versioned;

    fn new(spec: &TensorSpec, dl_tensor: DLTensor, deleter: bool) -> Self {
        let (version, flags) = spec
            .versioned
            .expect("a versioned struct is built for a versioned case only");
        DLManagedTensorVersioned {
            version,
            manager_ctx: std::ptr::null_mut(),
            deleter: deleter.then_some(delete::<DLManagedTensorVersioned>),
            flags,
            dl_tensor,
        }
    }

    fn tensor(&mut self) -> &mut DLTensor {
        &mut self.dl_tensor
    }

    unsafe fn import(managed: *mut Self) -> arrow_device::Result<DeviceArray> {
        // SAFETY: forwarded.
        unsafe { import_dlpack_versioned(managed) }
    }
}

/// Counts the call; the first one frees the data, shape and strides and
/// poisons the tensor. The struct itself stays allocated (the harness frees
/// it), so that a second call is counted rather than a double free.
unsafe extern "C" fn delete<M: Managed>(managed: *mut M) {
    let hand = managed.cast::<Hand<M>>();
    // SAFETY: `managed` is the first field of a live `Hand<M>` (freed by
    // the harness only after the import's result is gone).
    let hand = unsafe { &mut *hand };
    if hand.deletes.fetch_add(1, Ordering::SeqCst) == 0 {
        hand.storage = None;
        hand.shape = None;
        hand.strides = None;
        let tensor = hand.managed.tensor();
        tensor.data = std::ptr::dangling_mut::<u8>().cast();
        tensor.shape = std::ptr::null_mut();
        tensor.strides = std::ptr::null_mut();
        tensor.ndim = -1;
    }
}

/// A built tensor: the pointer to hand over and what the harness knows.
pub(super) struct Built<M> {
    hand: *mut Hand<M>,
    /// `data` as written (after any move of the device).
    pub data: *mut c_void,
    pub device: DLDevice,
    /// The bytes from `data + byte_offset` on, when the memory is real.
    pub readable: Option<Vec<u8>>,
}

impl<M: Managed> Built<M> {
    /// Hands the tensor to its import.
    ///
    /// # Safety
    /// Once per built tensor: the import takes it over.
    pub(super) unsafe fn import(&self) -> arrow_device::Result<DeviceArray> {
        // SAFETY: a live tensor whose memory is what it claims (see
        // `crate::dlpack`), handed over once per the contract.
        unsafe { M::import(self.hand.cast()) }
    }

    pub(super) fn deletes(&self) -> usize {
        // SAFETY: the hand is alive until `free`.
        unsafe { (*self.hand).deletes.load(Ordering::SeqCst) }
    }

    pub(super) fn free(self) {
        // SAFETY: from Box::into_raw in `build`, freed once, after the
        // import's result (and every clone of it) is dropped.
        drop(unsafe { Box::from_raw(self.hand) });
    }
}

/// `spec` as the managed struct `M`, with our deleter unless `deleter` is
/// false.
pub(super) fn build<M: Managed>(spec: &TensorSpec, deleter: bool) -> Built<M> {
    let mut device = spec.device;
    let extent = spec.extent();
    let mut storage = None;
    let mut readable = None;
    let data: *mut c_void = match (spec.data, extent) {
        (DataSpec::Null, _) => std::ptr::null_mut(),
        (DataSpec::Real, Extent::Bytes { before, after }) => {
            let len = (before + after) as usize;
            let (mut words, fill) = memory::filled(len, &spec.values);
            let base = words.as_mut_ptr().cast::<u8>();
            let from = (before + spec.byte_offset) as usize;
            readable = Some(fill[from.min(len)..].to_vec());
            storage = Some(words);
            // SAFETY: `before` <= `len`, inside the allocation.
            unsafe { base.add(before as usize) }.cast()
        }
        // Nothing a conforming reader reads: a small real allocation.
        (DataSpec::Real, Extent::Visible) => {
            let words = vec![0u64; 8];
            let ptr = words.as_ptr().cast_mut().cast();
            storage = Some(words);
            ptr
        }
        (DataSpec::Real, Extent::TooLarge) | (DataSpec::Opaque(_), _) => {
            if host_readable(device.device_type) {
                device.device_type = NEVER_READ;
            }
            match spec.data {
                DataSpec::Opaque(address) => address as usize as *mut c_void,
                _ => OPAQUE_ADDRESS as *mut c_void,
            }
        }
    };
    let mut shape = (!spec.shape_null && spec.shape_readable()).then(|| spec.shape.clone());
    let mut strides = (!spec.strides_null && spec.shape_readable()).then(|| spec.strides.clone());
    let pointer = |v: &mut Option<Vec<i64>>| match v {
        // An empty vector's pointer is dangling but valid for zero reads.
        Some(v) => v.as_mut_ptr(),
        None => std::ptr::null_mut(),
    };
    let tensor = DLTensor {
        data,
        device,
        ndim: spec.ndim,
        dtype: spec.dtype,
        shape: pointer(&mut shape),
        strides: pointer(&mut strides),
        byte_offset: spec.byte_offset,
    };
    let hand = Box::into_raw(Box::new(Hand {
        managed: M::new(spec, tensor, deleter),
        deletes: AtomicUsize::new(0),
        storage,
        shape,
        strides,
    }));
    Built {
        hand,
        data,
        device,
        readable,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dlpack::seeds::float32;

    #[test]
    fn extents_cover_what_a_reader_touches() {
        let bytes = |before, after| Extent::Bytes { before, after };
        assert_eq!(float32(&[6], true).extent(), bytes(0, 24));
        assert_eq!(float32(&[2, 3], true).extent(), bytes(0, 24));
        assert_eq!(float32(&[], true).extent(), bytes(0, 4));
        let reversed = TensorSpec {
            strides: vec![-1],
            byte_offset: 2,
            ..float32(&[4], true)
        };
        // Elements at data + 2 - 12 ..= data + 2.
        assert_eq!(reversed.extent(), bytes(10, 6));
        assert_eq!(float32(&[0, 5], true).extent(), bytes(0, 0));
        // A 0-d tensor may leave shape NULL.
        let scalar = TensorSpec {
            shape_null: true,
            byte_offset: 256,
            ..float32(&[], true)
        };
        assert_eq!(scalar.extent(), bytes(0, 260));
        assert_eq!(float32(&[1 << 20], true).extent(), Extent::TooLarge);
        assert_eq!(float32(&[i64::MAX, 4], true).extent(), Extent::TooLarge);
        let negative = TensorSpec {
            shape: vec![-3],
            ..float32(&[3], true)
        };
        assert_eq!(negative.extent(), Extent::Visible);
    }
}

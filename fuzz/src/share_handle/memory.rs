//! The allocations a layout points into, and an array packed into one, as
//! a share lays it out.

use std::alloc::Layout;
use std::collections::HashMap;
use std::ptr::NonNull;

use arrow_device::abi::DeviceType;
use arrow_device::share::codec::Writer;
use arrow_device::share::layout::{self, Place};
use arrow_device::DeviceArray;

/// Buffers start at multiples of this in a packed allocation (as in a
/// shared memory file), and allocations are aligned to it.
const ALIGN: usize = 64;

/// Host memory of exactly its length, 64-byte aligned: a read past its end
/// is one AddressSanitizer sees.
pub struct Allocation {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: plain bytes, never written after `copy_of`; the pointer is owned.
unsafe impl Send for Allocation {}
// SAFETY: as above.
unsafe impl Sync for Allocation {}

impl Allocation {
    /// A new allocation holding `bytes`.
    pub fn copy_of(bytes: &[u8]) -> Self {
        let len = bytes.len();
        if len == 0 {
            // Nothing to read: an aligned, dangling pointer, never freed.
            return Allocation {
                ptr: NonNull::new(ALIGN as *mut u8).expect("non-zero"),
                len,
            };
        }
        let layout = Layout::from_size_align(len, ALIGN).expect("a small allocation");
        // SAFETY: `layout` has a non-zero size.
        let ptr = NonNull::new(unsafe { std::alloc::alloc(layout) })
            .unwrap_or_else(|| std::alloc::handle_alloc_error(layout));
        // SAFETY: a fresh allocation of `len` bytes; `bytes` is another.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), ptr.as_ptr(), len) };
        Allocation { ptr, len }
    }

    pub fn as_ptr(&self) -> *const u8 {
        self.ptr.as_ptr()
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for Allocation {
    fn drop(&mut self) {
        if self.len > 0 {
            let layout = Layout::from_size_align(self.len, ALIGN).expect("allocated with it");
            // SAFETY: allocated in `copy_of` with this layout, freed once.
            unsafe { std::alloc::dealloc(self.ptr.as_ptr(), layout) };
        }
    }
}

/// Every buffer of a CPU `array` copied into one allocation (each distinct
/// buffer once, at a multiple of 64 bytes), and the layout that says
/// where: what a share writes into its memory file and its handle.
pub fn pack(array: &DeviceArray) -> Result<(Vec<u8>, Vec<u8>), String> {
    assert_eq!(array.device_type(), DeviceType::CPU, "packs host memory");
    let mut memory = Vec::new();
    let mut placed: HashMap<(usize, usize), u64> = HashMap::new();
    let mut writer = Writer::default();
    layout::write(&mut writer, array, &mut |ptr, len| {
        let offset = *placed.entry((ptr as usize, len)).or_insert_with(|| {
            let at = memory.len().next_multiple_of(ALIGN);
            memory.resize(at, 0);
            // SAFETY: a CPU buffer of `len` bytes of `array`, alive here.
            memory.extend_from_slice(unsafe { std::slice::from_raw_parts(ptr, len) });
            at as u64
        });
        Ok(Place {
            allocation: 0,
            offset,
        })
    })?;
    Ok((memory, writer.into_bytes()))
}

/// The target's input for a CPU `array`: its field, its buffers packed
/// into one allocation, and their layout.
pub fn encode(array: &DeviceArray) -> Result<Vec<u8>, String> {
    let (memory, layout_bytes) = pack(array)?;
    let mut writer = Writer::default();
    writer.field(array.field())?;
    writer.u8(1);
    writer.bytes(&memory);
    let mut bytes = writer.into_bytes();
    bytes.extend_from_slice(&layout_bytes);
    Ok(bytes)
}

//! The C ABI of the Arrow C Device Data Interface, as `#[repr(C)]` Rust types.
//!
//! * [`ArrowDeviceArray`] embeds arrow-rs' [`FFI_ArrowArray`] and adds the
//!   device fields (spec: "The ArrowDeviceArray structure").
//! * [`ArrowDeviceArrayStream`] is the device stream (spec: "Device Stream
//!   Interface").
//! * [`ArrowAsyncDeviceStreamHandler`], [`ArrowAsyncProducer`] and
//!   [`ArrowAsyncTask`] are laid out as Arrow C++'s `abi.h` has them: the spec's
//!   listing shows a `release` member in `ArrowAsyncProducer` that no shipping
//!   implementation has, so we follow `abi.h` for ABI compatibility.
//! * [`DeviceType`] is an open newtype over `i32`: any value a producer sends is
//!   representable.
//! * [`raw`] holds plain-old-data mirrors of `ArrowArray` and `ArrowSchema`
//!   with public fields, for code that must write the structs by hand (as C
//!   producers do).
//!
//! Layouts are checked at compile time against the C header in
//! `include/arrow_device.h` (and by a C test that compiles it).
//!
//! ```
//! use arrow_device::abi::{ArrowDeviceArray, DeviceType};
//!
//! let empty = ArrowDeviceArray::empty();
//! assert!(empty.is_released());
//! assert_eq!(std::mem::size_of::<ArrowDeviceArray>(), 128);
//! assert_eq!(DeviceType::CUDA_HOST.name(), Some("CUDA_HOST"));
//! assert_eq!(DeviceType::from(42).to_string(), "DeviceType(42)");
//! ```

use std::ffi::{c_char, c_int, c_void};
use std::fmt;
use std::mem::{offset_of, size_of};

pub use arrow_array::ffi_stream::FFI_ArrowArrayStream;
pub use arrow_data::ffi::FFI_ArrowArray;
pub use arrow_schema::ffi::FFI_ArrowSchema;

/// `ArrowDeviceType`: which kind of device the buffers of an array live on.
///
/// The spec defines the values as macros so that the storage type is fixed to
/// `int32_t`. Values outside the named constants (for example DLPack's 17 and
/// 18) are representable and displayed by number.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(transparent)]
pub struct DeviceType(pub i32);

macro_rules! device_types {
    ($($(#[$doc:meta])* $name:ident = $value:expr;)*) => {
        impl DeviceType {
            $($(#[$doc])* pub const $name: DeviceType = DeviceType($value);)*

            /// Every device type the spec names, in ascending order.
            pub const ALL: &'static [DeviceType] = &[$(DeviceType::$name),*];

            /// The spec's name without the `ARROW_DEVICE_` prefix, or `None`
            /// for a value the spec does not name.
            pub const fn name(self) -> Option<&'static str> {
                match self.0 {
                    $($value => Some(stringify!($name)),)*
                    _ => None,
                }
            }

            /// Parses a spec name (`"CUDA_HOST"`, case-insensitive, with or
            /// without the `ARROW_DEVICE_` prefix).
            pub fn from_name(name: &str) -> Option<DeviceType> {
                let upper = name.to_ascii_uppercase();
                let bare = upper.strip_prefix("ARROW_DEVICE_").unwrap_or(&upper);
                match bare {
                    $(stringify!($name) => Some(DeviceType::$name),)*
                    _ => None,
                }
            }
        }
    };
}

device_types! {
    /// Host memory; `device_id` is -1 by convention and `sync_event` is NULL.
    CPU = 1;
    /// CUDA device memory (`cudaMalloc` / `cuMemAlloc`).
    CUDA = 2;
    /// Pinned host memory (`cudaMallocHost` / `cuMemAllocHost`); host-accessible.
    CUDA_HOST = 3;
    /// OpenCL device memory.
    OPENCL = 4;
    /// Vulkan device memory.
    VULKAN = 7;
    /// Apple Metal device memory.
    METAL = 8;
    /// Verilog simulator buffer.
    VPI = 9;
    /// AMD ROCm device memory.
    ROCM = 10;
    /// Pinned host memory from `hipMallocHost`; host-accessible.
    ROCM_HOST = 11;
    /// Extension devices; this crate's emulated device reports this type.
    EXT_DEV = 12;
    /// CUDA managed (unified) memory; host-accessible.
    CUDA_MANAGED = 13;
    /// oneAPI unified shared memory.
    ONEAPI = 14;
    /// WebGPU.
    WEBGPU = 15;
    /// Qualcomm Hexagon DSP.
    HEXAGON = 16;
}

impl DeviceType {
    /// Whether memory of this type may be read by the host once the array's
    /// `sync_event` has completed (CPU, CUDA_HOST, CUDA_MANAGED, ROCM_HOST).
    pub const fn is_host_accessible(self) -> bool {
        matches!(self.0, 1 | 3 | 11 | 13)
    }
}

impl From<i32> for DeviceType {
    fn from(value: i32) -> Self {
        DeviceType(value)
    }
}

impl From<DeviceType> for i32 {
    fn from(value: DeviceType) -> Self {
        value.0
    }
}

impl fmt::Display for DeviceType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(name) => f.write_str(name),
            None => write!(f, "DeviceType({})", self.0),
        }
    }
}

impl fmt::Debug for DeviceType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// `struct ArrowDeviceArray`: an `ArrowArray` plus the device it lives on.
///
/// Dropping a non-released value calls its release callback (through the
/// embedded [`FFI_ArrowArray`]), which also frees the `sync_event`.
///
/// The device fields are public because nothing trusts them in safe code:
/// `Drop` reads only the embedded array, whose fields arrow-rs keeps
/// private, and every function that acts on `sync_event` or on the device
/// pointers (`DeviceArray::try_new`, ...) is `unsafe`, its caller vouching
/// for the struct as a whole.
#[repr(C)]
#[derive(Debug)]
pub struct ArrowDeviceArray {
    /// The array; its buffer pointers are device pointers.
    pub array: FFI_ArrowArray,
    /// Which device of `device_type` (GPU ordinal, ...); -1 for the CPU.
    pub device_id: i64,
    /// The kind of device the buffers live on.
    pub device_type: DeviceType,
    /// A pointer to the device's event type (`cudaEvent_t*`, ...) that must be
    /// waited on before the buffers are accessed, or NULL. Owned by the
    /// producer and freed by the array's release callback.
    pub sync_event: *mut c_void,
    /// Must be zero (spec: "These bytes MUST be zero'd out").
    pub reserved: [i64; 3],
}

// SAFETY: the struct is an owned handle; the spec lets the consumer release it
// from any thread, and arrow-rs already declares FFI_ArrowArray Send + Sync.
unsafe impl Send for ArrowDeviceArray {}
// SAFETY: shared references only read plain fields.
unsafe impl Sync for ArrowDeviceArray {}

impl ArrowDeviceArray {
    /// A released (empty) struct, for a producer to fill in.
    pub fn empty() -> Self {
        Self {
            array: FFI_ArrowArray::empty(),
            device_id: -1,
            device_type: DeviceType::CPU,
            sync_event: std::ptr::null_mut(),
            reserved: [0; 3],
        }
    }

    /// Whether the struct was released (its `array.release` is NULL).
    pub fn is_released(&self) -> bool {
        self.array.is_released()
    }

    /// Moves a struct out of `src` (spec: "Moving an array": a bitwise copy,
    /// after which the source is marked released).
    ///
    /// # Safety
    /// `src` must be valid for reads and writes and point to an initialized
    /// `ArrowDeviceArray`.
    pub unsafe fn from_raw(src: *mut ArrowDeviceArray) -> Self {
        // SAFETY: the caller guarantees `src` is valid; `replace` leaves a
        // released struct behind, which is exactly the spec's move.
        unsafe { std::ptr::replace(src, Self::empty()) }
    }
}

/// `struct ArrowDeviceArrayStream` (spec: "Device Stream Interface").
///
/// The fields are private, as arrow-rs keeps [`FFI_ArrowArrayStream`]'s:
/// `Drop` calls `release` with `private_data`, so safe code that could
/// write either (or swap `private_data` between two streams) could make
/// drop undefined behaviour. A stream is made by this crate's exporters
/// ([`crate::stream::export_reader`], ...), moved in from a C producer with
/// [`ArrowDeviceArrayStream::from_raw`], or written field by field through
/// the unsafe [`raw::device_stream_mut`].
///
/// ```compile_fail,E0451
/// use arrow_device::ArrowDeviceArrayStream;
/// // Private fields: a stream cannot be built (or its release swapped) in safe code.
/// let stream = ArrowDeviceArrayStream { private_data: 8 as _, ..ArrowDeviceArrayStream::empty() };
/// ```
#[repr(C)]
#[derive(Debug)]
pub struct ArrowDeviceArrayStream {
    /// The device type every array of the stream is on.
    pub(crate) device_type: DeviceType,
    /// Gets the stream's schema; returns 0 or an errno-compatible code.
    pub(crate) get_schema: Option<
        unsafe extern "C" fn(
            self_: *mut ArrowDeviceArrayStream,
            out: *mut FFI_ArrowSchema,
        ) -> c_int,
    >,
    /// Gets the next array; a released `out` marks the end of the stream.
    pub(crate) get_next: Option<
        unsafe extern "C" fn(
            self_: *mut ArrowDeviceArrayStream,
            out: *mut ArrowDeviceArray,
        ) -> c_int,
    >,
    /// The last error's message, valid until the next call on the stream.
    pub(crate) get_last_error:
        Option<unsafe extern "C" fn(self_: *mut ArrowDeviceArrayStream) -> *const c_char>,
    /// Releases the stream; NULL once released.
    pub(crate) release: Option<unsafe extern "C" fn(self_: *mut ArrowDeviceArrayStream)>,
    /// Producer-owned data.
    pub(crate) private_data: *mut c_void,
}

// SAFETY: the spec lets a stream be moved and used from any one thread at a
// time; the producer's private data must allow that (ours is Send).
unsafe impl Send for ArrowDeviceArrayStream {}

impl Drop for ArrowDeviceArrayStream {
    /// Releases a stream that was not released or moved out.
    fn drop(&mut self) {
        if let Some(release) = self.release {
            // SAFETY: a non-NULL release is the producer's callback for this
            // struct (the fields are private: only this crate's exporters,
            // `from_raw` and the unsafe `raw::device_stream_mut` set them),
            // called exactly once (it marks the struct released).
            unsafe { release(self) };
        }
    }
}

impl ArrowDeviceArrayStream {
    /// Whether the stream was released (its `release` is NULL).
    pub fn is_released(&self) -> bool {
        self.release.is_none()
    }

    /// The device type every array of the stream is on.
    pub fn device_type(&self) -> DeviceType {
        self.device_type
    }

    /// Moves a stream out of `src`, leaving a released struct behind (spec:
    /// "Moving a stream" follows the same rule as moving an array).
    ///
    /// # Safety
    /// `src` must be valid for reads and writes and point to an initialized
    /// `ArrowDeviceArrayStream` whose callbacks follow the spec.
    pub unsafe fn from_raw(src: *mut ArrowDeviceArrayStream) -> Self {
        // SAFETY: the caller guarantees `src` is valid; `replace` leaves a
        // released struct behind.
        unsafe { std::ptr::replace(src, Self::empty()) }
    }

    /// A released (empty) stream.
    pub fn empty() -> Self {
        Self {
            device_type: DeviceType::CPU,
            get_schema: None,
            get_next: None,
            get_last_error: None,
            release: None,
            private_data: std::ptr::null_mut(),
        }
    }
}

/// `struct ArrowAsyncTask` (Arrow C++ `abi.h`).
///
/// The async structs have public fields and no `Drop`, as in C: nothing
/// calls their callbacks in safe code (a producer or consumer is handed
/// one only through an `unsafe` function, such as
/// [`crate::stream::AsyncDeviceStreamProducer::run`]).
#[repr(C)]
#[derive(Debug)]
pub struct ArrowAsyncTask {
    /// Moves the task's array into `out` (or releases it when `out` is NULL);
    /// must be called exactly once.
    pub extract_data: Option<
        unsafe extern "C" fn(self_: *mut ArrowAsyncTask, out: *mut ArrowDeviceArray) -> c_int,
    >,
    /// Producer-owned data.
    pub private_data: *mut c_void,
}

/// `struct ArrowAsyncProducer` (Arrow C++ `abi.h`: no `release` member).
#[repr(C)]
#[derive(Debug)]
pub struct ArrowAsyncProducer {
    /// The device type of the arrays the producer sends.
    pub device_type: DeviceType,
    /// Grants the producer credit for `n` more calls to `on_next_task`.
    pub request: Option<unsafe extern "C" fn(self_: *mut ArrowAsyncProducer, n: i64)>,
    /// Asks the producer to stop; idempotent.
    pub cancel: Option<unsafe extern "C" fn(self_: *mut ArrowAsyncProducer)>,
    /// Key/value pairs encoded like `ArrowSchema.metadata`, or NULL.
    pub additional_metadata: *const c_char,
    /// Producer-owned data.
    pub private_data: *mut c_void,
}

/// `struct ArrowAsyncDeviceStreamHandler` (Arrow C++ `abi.h`).
#[repr(C)]
#[derive(Debug)]
pub struct ArrowAsyncDeviceStreamHandler {
    /// Called once with the schema and the producer handle.
    pub on_schema: Option<
        unsafe extern "C" fn(
            self_: *mut ArrowAsyncDeviceStreamHandler,
            stream_schema: *mut FFI_ArrowSchema,
        ) -> c_int,
    >,
    /// Called for each task; a NULL task marks the end of the stream.
    pub on_next_task: Option<
        unsafe extern "C" fn(
            self_: *mut ArrowAsyncDeviceStreamHandler,
            task: *mut ArrowAsyncTask,
            metadata: *const c_char,
        ) -> c_int,
    >,
    /// Called once on a producer error; `release` follows.
    pub on_error: Option<
        unsafe extern "C" fn(
            self_: *mut ArrowAsyncDeviceStreamHandler,
            code: c_int,
            message: *const c_char,
            metadata: *const c_char,
        ),
    >,
    /// Releases the handler; called exactly once, last.
    pub release: Option<unsafe extern "C" fn(self_: *mut ArrowAsyncDeviceStreamHandler)>,
    /// Set by the producer before `on_schema`.
    pub producer: *mut ArrowAsyncProducer,
    /// Consumer-owned data.
    pub private_data: *mut c_void,
}

/// Plain-old-data mirrors of the C Data Interface structs, with public fields
/// and no `Drop`.
///
/// arrow-rs keeps the fields of [`FFI_ArrowArray`], [`FFI_ArrowSchema`] and
/// [`FFI_ArrowArrayStream`] private, and this crate those of
/// [`ArrowDeviceArrayStream`]: their `Drop` calls `release`, trusting the
/// fields. Code that writes a struct field by field, as a C producer does
/// (hand-written producers, the validation suites), views the same memory
/// through these mirrors with the `unsafe` [`raw::array_mut`],
/// [`raw::schema_mut`], [`raw::stream_mut`] and [`raw::device_stream_mut`];
/// reading through [`raw::array`] and its siblings is safe.
///
/// ```compile_fail,E0133
/// use arrow_device::abi::{raw, FFI_ArrowArray};
/// let mut array = FFI_ArrowArray::empty();
/// // Writing `private_data`, which `release` trusts, needs `unsafe`.
/// raw::array_mut(&mut array).private_data = 8 as _;
/// ```
pub mod raw {
    use super::*;

    /// `struct ArrowArray` with public fields.
    #[repr(C)]
    #[derive(Debug, Clone, Copy)]
    #[allow(missing_docs)]
    pub struct ArrowArray {
        pub length: i64,
        pub null_count: i64,
        pub offset: i64,
        pub n_buffers: i64,
        pub n_children: i64,
        pub buffers: *mut *const c_void,
        pub children: *mut *mut ArrowArray,
        pub dictionary: *mut ArrowArray,
        pub release: Option<unsafe extern "C" fn(*mut ArrowArray)>,
        pub private_data: *mut c_void,
    }

    /// `struct ArrowSchema` with public fields.
    #[repr(C)]
    #[derive(Debug, Clone, Copy)]
    #[allow(missing_docs)]
    pub struct ArrowSchema {
        pub format: *const c_char,
        pub name: *const c_char,
        pub metadata: *const c_char,
        pub flags: i64,
        pub n_children: i64,
        pub children: *mut *mut ArrowSchema,
        pub dictionary: *mut ArrowSchema,
        pub release: Option<unsafe extern "C" fn(*mut ArrowSchema)>,
        pub private_data: *mut c_void,
    }

    /// What the two C structs of a tree (`ArrowArray`, `ArrowSchema`) share
    /// for releasing it: children, a dictionary, a release callback.
    pub(crate) trait Tree: Sized {
        fn release_callback(&self) -> Option<unsafe extern "C" fn(*mut Self)>;
        /// `(n_children, children)`.
        fn children_of(&self) -> (i64, *mut *mut Self);
        fn dictionary_of(&self) -> *mut Self;
    }

    impl Tree for ArrowArray {
        fn release_callback(&self) -> Option<unsafe extern "C" fn(*mut Self)> {
            self.release
        }
        fn children_of(&self) -> (i64, *mut *mut Self) {
            (self.n_children, self.children)
        }
        fn dictionary_of(&self) -> *mut Self {
            self.dictionary
        }
    }

    impl Tree for ArrowSchema {
        fn release_callback(&self) -> Option<unsafe extern "C" fn(*mut Self)> {
            self.release
        }
        fn children_of(&self) -> (i64, *mut *mut Self) {
            (self.n_children, self.children)
        }
        fn dictionary_of(&self) -> *mut Self {
            self.dictionary
        }
    }

    /// Releases the children and the dictionary of `node` that are still in
    /// place, in a producer's release callback: a child the consumer moved
    /// out (spec: "Moving child arrays") has a NULL `release`, and its moved
    /// copy releases itself.
    ///
    /// # Safety
    /// `node` is a struct this crate exported, not yet released: its
    /// `children` hold `n_children` pointers to structs, and its
    /// `dictionary` is NULL or a struct, all alive while `node` is.
    #[inline]
    pub(crate) unsafe fn release_children_in_place<T: Tree>(node: &T) {
        let (n_children, children) = node.children_of();
        for i in 0..usize::try_from(n_children).unwrap_or(0) {
            // SAFETY: `n_children` pointers to structs (the caller's
            // guarantee).
            unsafe { release_in_place(*children.add(i)) };
        }
        // SAFETY: NULL or a struct (the caller's guarantee).
        unsafe { release_in_place(node.dictionary_of()) };
    }

    /// Releases `child` unless it is NULL or already released (moved out).
    ///
    /// # Safety
    /// `child` is NULL or points to a struct.
    #[inline]
    unsafe fn release_in_place<T: Tree>(child: *mut T) {
        // SAFETY: NULL or a struct (the caller's guarantee).
        if let Some(release) = unsafe { child.as_ref() }.and_then(T::release_callback) {
            // SAFETY: the child's own callback, called once: it marks the
            // child released.
            unsafe { release(child) };
        }
    }

    /// `struct ArrowArrayStream` (the C stream interface) with public fields;
    /// arrow-rs keeps [`FFI_ArrowArrayStream`]'s private.
    #[repr(C)]
    #[derive(Debug, Clone, Copy)]
    #[allow(missing_docs)]
    pub struct ArrowArrayStream {
        pub get_schema:
            Option<unsafe extern "C" fn(*mut ArrowArrayStream, *mut FFI_ArrowSchema) -> c_int>,
        pub get_next:
            Option<unsafe extern "C" fn(*mut ArrowArrayStream, *mut FFI_ArrowArray) -> c_int>,
        pub get_last_error: Option<unsafe extern "C" fn(*mut ArrowArrayStream) -> *const c_char>,
        pub release: Option<unsafe extern "C" fn(*mut ArrowArrayStream)>,
        pub private_data: *mut c_void,
    }

    /// `struct ArrowDeviceArrayStream` with public fields.
    #[repr(C)]
    #[derive(Debug, Clone, Copy)]
    #[allow(missing_docs)]
    pub struct ArrowDeviceArrayStream {
        pub device_type: DeviceType,
        pub get_schema: Option<
            unsafe extern "C" fn(*mut super::ArrowDeviceArrayStream, *mut FFI_ArrowSchema) -> c_int,
        >,
        pub get_next: Option<
            unsafe extern "C" fn(
                *mut super::ArrowDeviceArrayStream,
                *mut ArrowDeviceArray,
            ) -> c_int,
        >,
        pub get_last_error:
            Option<unsafe extern "C" fn(*mut super::ArrowDeviceArrayStream) -> *const c_char>,
        pub release: Option<unsafe extern "C" fn(*mut super::ArrowDeviceArrayStream)>,
        pub private_data: *mut c_void,
    }

    /// Views an [`ArrowDeviceArrayStream`](super::ArrowDeviceArrayStream)
    /// through its public-field mirror, for writing.
    ///
    /// # Safety
    /// What is written must keep the struct valid for its `Drop`: a
    /// non-NULL `release` that releases exactly this struct's
    /// `private_data`, and callbacks that follow the spec.
    pub unsafe fn device_stream_mut(
        stream: &mut super::ArrowDeviceArrayStream,
    ) -> &mut ArrowDeviceArrayStream {
        // SAFETY: identical #[repr(C)] layouts (asserted below); the caller
        // keeps what it writes valid.
        unsafe {
            &mut *(stream as *mut super::ArrowDeviceArrayStream).cast::<ArrowDeviceArrayStream>()
        }
    }

    /// Views an [`ArrowDeviceArrayStream`](super::ArrowDeviceArrayStream)
    /// through its public-field mirror.
    pub fn device_stream(stream: &super::ArrowDeviceArrayStream) -> &ArrowDeviceArrayStream {
        // SAFETY: identical #[repr(C)] layouts (asserted below).
        unsafe {
            &*(stream as *const super::ArrowDeviceArrayStream).cast::<ArrowDeviceArrayStream>()
        }
    }

    /// Views an [`FFI_ArrowArrayStream`] through its public-field mirror,
    /// for writing.
    ///
    /// # Safety
    /// As for [`device_stream_mut`]: `Drop` trusts what is written.
    pub unsafe fn stream_mut(stream: &mut FFI_ArrowArrayStream) -> &mut ArrowArrayStream {
        // SAFETY: identical #[repr(C)] layouts (asserted below); the caller
        // keeps what it writes valid.
        unsafe { &mut *(stream as *mut FFI_ArrowArrayStream).cast::<ArrowArrayStream>() }
    }

    /// Views an [`FFI_ArrowArrayStream`] through its public-field mirror.
    pub fn stream(stream: &FFI_ArrowArrayStream) -> &ArrowArrayStream {
        // SAFETY: identical #[repr(C)] layouts (asserted below).
        unsafe { &*(stream as *const FFI_ArrowArrayStream).cast::<ArrowArrayStream>() }
    }

    /// Views an [`FFI_ArrowArray`] through its public-field mirror, for
    /// writing.
    ///
    /// # Safety
    /// `FFI_ArrowArray`'s `Drop` calls `release` and arrow-rs' importers
    /// trust every field: what is written must describe a valid C Data
    /// Interface array (or a released one) whose `release` frees exactly
    /// its `private_data`.
    pub unsafe fn array_mut(array: &mut FFI_ArrowArray) -> &mut ArrowArray {
        // SAFETY: both types are #[repr(C)] with the same fields in the same
        // order (asserted below), so the cast reinterprets identical memory;
        // the caller keeps what it writes valid.
        unsafe { &mut *(array as *mut FFI_ArrowArray).cast::<ArrowArray>() }
    }

    /// Views an [`FFI_ArrowArray`] through its public-field mirror.
    pub fn array(array: &FFI_ArrowArray) -> &ArrowArray {
        // SAFETY: as for `array_mut`.
        unsafe { &*(array as *const FFI_ArrowArray).cast::<ArrowArray>() }
    }

    /// Views an [`FFI_ArrowSchema`] through its public-field mirror, for
    /// writing.
    ///
    /// # Safety
    /// As for [`array_mut`]: `Drop` and arrow-rs' accessors trust every
    /// field (NUL-terminated strings, `n_children` children, ...).
    pub unsafe fn schema_mut(schema: &mut FFI_ArrowSchema) -> &mut ArrowSchema {
        // SAFETY: identical #[repr(C)] layouts (asserted below); the caller
        // keeps what it writes valid.
        unsafe { &mut *(schema as *mut FFI_ArrowSchema).cast::<ArrowSchema>() }
    }

    /// Views an [`FFI_ArrowSchema`] through its public-field mirror.
    pub fn schema(schema: &FFI_ArrowSchema) -> &ArrowSchema {
        // SAFETY: identical #[repr(C)] layouts (asserted below).
        unsafe { &*(schema as *const FFI_ArrowSchema).cast::<ArrowSchema>() }
    }
}

// Compile-time layout checks (64-bit targets, as the spec's sizes assume).
#[cfg(target_pointer_width = "64")]
const _: () = {
    assert!(size_of::<raw::ArrowArray>() == 80);
    assert!(size_of::<FFI_ArrowArray>() == 80);
    assert!(size_of::<raw::ArrowSchema>() == 72);
    assert!(size_of::<FFI_ArrowSchema>() == 72);
    assert!(offset_of!(raw::ArrowArray, release) == 64);
    assert!(offset_of!(raw::ArrowSchema, release) == 56);
    assert!(size_of::<ArrowDeviceArray>() == 128);
    assert!(offset_of!(ArrowDeviceArray, array) == 0);
    assert!(offset_of!(ArrowDeviceArray, device_id) == 80);
    assert!(offset_of!(ArrowDeviceArray, device_type) == 88);
    assert!(offset_of!(ArrowDeviceArray, sync_event) == 96);
    assert!(offset_of!(ArrowDeviceArray, reserved) == 104);
    assert!(size_of::<raw::ArrowArrayStream>() == 40);
    assert!(size_of::<FFI_ArrowArrayStream>() == 40);
    assert!(offset_of!(raw::ArrowArrayStream, release) == 24);
    assert!(size_of::<ArrowDeviceArrayStream>() == 48);
    assert!(size_of::<raw::ArrowDeviceArrayStream>() == 48);
    assert!(offset_of!(raw::ArrowDeviceArrayStream, release) == 32);
    assert!(offset_of!(raw::ArrowDeviceArrayStream, private_data) == 40);
    assert!(offset_of!(ArrowDeviceArrayStream, get_schema) == 8);
    assert!(offset_of!(ArrowDeviceArrayStream, release) == 32);
    assert!(size_of::<ArrowAsyncTask>() == 16);
    assert!(size_of::<ArrowAsyncProducer>() == 40);
    assert!(offset_of!(ArrowAsyncProducer, request) == 8);
    assert!(offset_of!(ArrowAsyncProducer, additional_metadata) == 24);
    assert!(size_of::<ArrowAsyncDeviceStreamHandler>() == 48);
    assert!(offset_of!(ArrowAsyncDeviceStreamHandler, producer) == 32);
    assert!(size_of::<DeviceType>() == 4);
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_named_device_type_round_trips_through_its_name() {
        assert_eq!(DeviceType::ALL.len(), 14);
        for &t in DeviceType::ALL {
            let name = t.name().expect("named");
            assert_eq!(DeviceType::from_name(name), Some(t));
            assert_eq!(
                DeviceType::from_name(&format!("arrow_device_{name}")),
                Some(t)
            );
        }
        assert_eq!(DeviceType::from_name("TPU"), None);
    }

    #[test]
    fn unknown_device_types_are_representable() {
        let t = DeviceType::from(17);
        assert_eq!(t.name(), None);
        assert_eq!(i32::from(t), 17);
        assert_eq!(format!("{t}"), "DeviceType(17)");
        assert!(!t.is_host_accessible());
    }

    #[test]
    fn cpu_accessible_types_are_the_host_memory_ones() {
        let accessible: Vec<_> = DeviceType::ALL
            .iter()
            .copied()
            .filter(|t| t.is_host_accessible())
            .collect();
        assert_eq!(
            accessible,
            [
                DeviceType::CPU,
                DeviceType::CUDA_HOST,
                DeviceType::ROCM_HOST,
                DeviceType::CUDA_MANAGED
            ]
        );
    }

    #[test]
    fn moving_marks_the_source_released() {
        let mut src = ArrowDeviceArray::empty();
        src.device_id = 3;
        src.device_type = DeviceType::EXT_DEV;
        // SAFETY: `src` is a valid initialized struct.
        let moved = unsafe { ArrowDeviceArray::from_raw(&mut src) };
        assert_eq!(moved.device_id, 3);
        assert_eq!(moved.device_type, DeviceType::EXT_DEV);
        assert!(src.is_released());
        assert_eq!(src.reserved, [0; 3]);
    }
}

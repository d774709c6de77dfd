//! [`DeviceArray`]: an imported (or copied) array tree on some device.
//!
//! A `DeviceArray` owns the foreign structs it was built from and releases
//! them exactly once, when the last handle, slice, child or arrow-rs buffer
//! that refers to them is dropped. It knows its device, data type, length,
//! null count and each buffer's pointer and size, and never dereferences
//! non-CPU memory on the host: [`DeviceArray::to_host`] copies through the
//! device, [`DeviceArray::to_device`] copies to another device.
//!
//! ```
//! use arrow_array::{Array, StringArray};
//! use arrow_device::{export_array, DeviceArray, DeviceType, ValidationLevel};
//!
//! let strings = StringArray::from(vec![Some("a"), None, Some("ccc")]);
//! let (array, schema) = export_array(&strings).unwrap();
//! // SAFETY: the structs come from this crate's exporter, a conforming producer.
//! let imported = unsafe { DeviceArray::try_new(array, schema, ValidationLevel::Default) }.unwrap();
//! assert_eq!(imported.device_type(), DeviceType::CPU);
//! assert_eq!((imported.len(), imported.null_count()), (3, Some(1)));
//! // validity, offsets, data: the data buffer's size is the last offset.
//! let sizes: Vec<_> = imported.buffers().iter().map(|b| b.len).collect();
//! assert_eq!(sizes, [Some(1), Some(16), Some(4)]);
//!
//! let tail = imported.slice(1, 2).unwrap().to_host().unwrap();
//! assert_eq!(tail.as_ref(), &strings.slice(1, 2) as &dyn Array);
//! ```

use std::ffi::c_void;
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use arrow_array::{make_array, Array, ArrayRef, RecordBatch, RecordBatchOptions, StructArray};
use arrow_buffer::alloc::Allocation;
use arrow_buffer::Buffer;
use arrow_data::ArrayData;
use arrow_schema::{DataType, Field, FieldRef, Schema, SchemaRef};

use crate::abi::{ArrowDeviceArray, DeviceType, FFI_ArrowArray, FFI_ArrowSchema};
use crate::array::copy;
use crate::array::export::export_node;
use crate::array::import::Importer;
use crate::array::layout;
use crate::array::node::{wrap_owned, Node, RawBuf};
use crate::array::owner::Owner;
use crate::array::HostStaging;
use crate::device::{self, DeviceRef, SyncEvent};
use crate::error::{Error, Path, Result};
use crate::validate::{self, ValidationLevel};

/// An array tree on a device, with the memory it refers to kept alive.
#[derive(Clone)]
pub struct DeviceArray {
    storage: Arc<Storage>,
    node: NodeRef,
    /// `None`: the storage's root field (no allocation per import).
    field: Option<FieldRef>,
}

/// The node a handle describes: the storage's root (no allocation per
/// import), or one derived from it (a slice, a child, a dictionary).
#[derive(Clone)]
enum NodeRef {
    Root,
    Derived(Arc<Node>),
}

/// One buffer of a node, in C Data Interface order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BufferInfo {
    /// The device pointer (NULL where the producer left the buffer out).
    pub ptr: *const u8,
    /// Size in bytes that the array uses; `None` when it depends on data that
    /// could not be read (an opaque device).
    pub len: Option<usize>,
}

/// What keeps a tree's memory valid, and how to synchronize with it.
struct Storage {
    device_type: DeviceType,
    device_id: i64,
    device: Option<DeviceRef>,
    /// The producer's event (kept valid by `_owner`), the one owner of every
    /// wait on it.
    sync: SyncEvent,
    /// Whether the import checked all the structure arrow-rs builds its
    /// arrays on (`validate::structure`), which depends on the level and
    /// the types in the tree (`layout::structure_unchecked_at`).
    structure_checked: bool,
    /// Set once every value of the tree is known valid (`validate::full`
    /// passed, or this crate or arrow-rs built the data): arrow-rs may read
    /// it unchecked, kernels included. Until then, data becomes arrow-rs
    /// data only after `validate::structure` (unless `structure_checked`),
    /// and reaches a kernel only after `validate::full`.
    values_checked: AtomicBool,
    sizes_known: bool,
    /// The tree as imported (or copied).
    root: Node,
    /// The root's field.
    field: Field,
    /// The foreign struct (released on drop) or what owns our memory.
    _owner: StorageOwner,
}

/// What a [`Storage`] keeps alive. An imported struct is held inline rather
/// than as an `Arc<ArrowDeviceArray>`: one allocation fewer per import.
enum StorageOwner {
    /// Released when the storage drops.
    Imported(#[allow(dead_code)] ArrowDeviceArray),
    /// Memory of ours, or another tree's storage.
    Shared(#[allow(dead_code)] Owner),
}

// SAFETY: the node's pointers are only handed to the device API (or read
// on the host where the device allows it); everything else is Send + Sync.
unsafe impl Send for Storage {}
// SAFETY: as above.
unsafe impl Sync for Storage {}
impl std::panic::RefUnwindSafe for Storage {}

impl DeviceArray {
    fn node(&self) -> &Node {
        match &self.node {
            NodeRef::Root => &self.storage.root,
            NodeRef::Derived(node) => node,
        }
    }

    /// Imports a device array and its schema, taking ownership of both: they
    /// are released exactly once, also when an error is returned.
    ///
    /// Validation (at `level`) checks everything the structs say about
    /// themselves, but no importer can check that a pointer is valid: that is
    /// the producer's promise, as for arrow-rs' `from_ffi`.
    ///
    /// # Safety
    /// The structs must follow the C (Device) Data Interface: every pointer
    /// valid for what it describes (the struct tree, `sync_event` pointing to
    /// an event of `device_type`, buffers of at least the sizes their
    /// offsets and lengths imply), as any conforming producer, including this
    /// crate's exporters, guarantees.
    pub unsafe fn try_new(
        array: ArrowDeviceArray,
        schema: FFI_ArrowSchema,
        level: ValidationLevel,
    ) -> Result<Self> {
        // The schema is only needed to learn the type; it is released when
        // `schema` drops at the end of this function, on every path.
        if schema.release().is_none() {
            return Err(Error::invalid(
                &Path::root(),
                "schema struct was released (release is NULL)",
            ));
        }
        if array.is_released() {
            return Err(Error::invalid(
                &Path::root(),
                "array struct was released (release is NULL)",
            ));
        }
        let field = crate::schema::import_field(&schema)?;
        drop(schema);
        // SAFETY: forwarded from the caller.
        unsafe { Self::try_new_with_field(array, field, level) }
    }

    /// Imports a device array whose type is already known, taking ownership:
    /// it is released exactly once, also when an error is returned. This is
    /// how a stream imports its batches against the schema `get_schema`
    /// gave, without a schema per batch.
    ///
    /// # Safety
    /// As for [`DeviceArray::try_new`]; the array must be of `field`'s type
    /// (which validation checks as far as the structs can show).
    pub unsafe fn try_new_with_field(
        array: ArrowDeviceArray,
        field: Field,
        level: ValidationLevel,
    ) -> Result<Self> {
        if array.is_released() {
            return Err(Error::invalid(
                &Path::root(),
                "array struct was released (release is NULL)",
            ));
        }
        if array.device_type == DeviceType::CPU && !array.sync_event.is_null() {
            // Spec, "Synchronization event types": N/A for the CPU, so the
            // event cannot be honoured; reading anyway could race the producer.
            return Err(Error::invalid(
                &Path::root(),
                "sync_event is non-NULL, but CPU arrays have no event type (expected NULL)",
            ));
        }
        let device = device::lookup(array.device_type, array.device_id);
        let device_type = array.device_type;
        let device_id = array.device_id;
        // SAFETY: the caller promises an event of `device_type`; `array`,
        // which the storage keeps, keeps it valid.
        let sync = unsafe { SyncEvent::new(array.sync_event) };
        let raw = crate::abi::raw::array(&array.array);
        // SAFETY: the struct is non-released and owned by `array`, which an
        // error return releases.
        let (node, sizes_known) =
            unsafe { Importer::new(level, device.as_ref()).import(raw, field.data_type(), &sync) }?;
        // Moving the struct is allowed (spec: "Moving an array"): the node's
        // pointers point into the producer's memory, not into the struct.
        let storage = Arc::new(Storage {
            device_type,
            device_id,
            device,
            sync,
            structure_checked: !layout::structure_unchecked_at(field.data_type(), level),
            values_checked: AtomicBool::new(false),
            sizes_known,
            root: node,
            field,
            _owner: StorageOwner::Imported(array),
        });
        let imported = DeviceArray {
            storage,
            node: NodeRef::Root,
            field: None,
        };
        if level == ValidationLevel::Full {
            imported.validate_full()?;
        }
        Ok(imported)
    }

    /// Imports from raw pointers, moving both structs out (spec: "Moving an
    /// array"): the sources are marked released, and what was moved is
    /// released exactly once, also on error.
    ///
    /// # Safety
    /// Both pointers must be valid for reads and writes and point to
    /// initialized structs that follow the C (Device) Data Interface.
    pub unsafe fn try_from_raw(
        array: *mut ArrowDeviceArray,
        schema: *mut FFI_ArrowSchema,
        level: ValidationLevel,
    ) -> Result<Self> {
        if array.is_null() || schema.is_null() {
            // Move whichever is non-NULL so it is released, then report.
            // SAFETY: non-NULL pointers are valid per the contract.
            unsafe {
                if !array.is_null() {
                    drop(ArrowDeviceArray::from_raw(array));
                }
                if !schema.is_null() {
                    drop(FFI_ArrowSchema::from_raw(schema));
                }
            }
            return Err(Error::invalid(
                &Path::root(),
                "NULL ArrowDeviceArray or ArrowSchema pointer",
            ));
        }
        // SAFETY: valid per the contract; from_raw leaves released structs.
        let (array, schema) = unsafe {
            (
                ArrowDeviceArray::from_raw(array),
                FFI_ArrowSchema::from_raw(schema),
            )
        };
        // SAFETY: forwarded from the caller.
        unsafe { Self::try_new(array, schema, level) }
    }

    /// Imports a plain C Data Interface array (CPU memory), as arrow-rs'
    /// `from_ffi` does, taking ownership of both structs.
    ///
    /// # Safety
    /// As for [`DeviceArray::try_new`].
    pub unsafe fn try_from_ffi(
        array: FFI_ArrowArray,
        schema: FFI_ArrowSchema,
        level: ValidationLevel,
    ) -> Result<Self> {
        let device_array = ArrowDeviceArray {
            array,
            ..ArrowDeviceArray::empty()
        };
        // SAFETY: forwarded from the caller.
        unsafe { Self::try_new(device_array, schema, level) }
    }

    /// arrow-rs data as a `DeviceArray` on the CPU, zero-copy: the safe way
    /// in for data this process already holds. Its field is unnamed and
    /// nullable, as [`export_array`](crate::export_array) describes it;
    /// [`DeviceArray::to_device`] copies it onto a device.
    ///
    /// ```
    /// use arrow_array::{Array, Int32Array};
    /// use arrow_device::{device, DeviceArray, DeviceType};
    ///
    /// let ints = Int32Array::from(vec![Some(1), None, Some(3)]);
    /// let array = DeviceArray::from_array(&ints);
    /// assert_eq!((array.device_type(), array.null_count()), (DeviceType::CPU, Some(1)));
    /// let emulated = device::lookup(DeviceType::EXT_DEV, 0).unwrap();
    /// let on_device = array.to_device(&emulated).unwrap();
    /// assert_eq!(on_device.to_host().unwrap().as_ref(), &ints as &dyn Array);
    /// ```
    pub fn from_array(array: &dyn Array) -> DeviceArray {
        Self::from_array_data(
            array.to_data(),
            Field::new("", array.data_type().clone(), true),
        )
    }

    /// A record batch as a struct `DeviceArray` on the CPU, zero-copy; the
    /// schema's metadata becomes the struct field's, as
    /// [`export_record_batch`](crate::export_record_batch) writes it, so
    /// [`DeviceArray::to_record_batch`] gives the batch back.
    pub fn from_record_batch(batch: &RecordBatch) -> DeviceArray {
        let field = crate::stream::record_batch_field(batch.schema_ref());
        Self::from_array_data(StructArray::from(batch.clone()).into_data(), field)
    }

    fn from_array_data(data: ArrayData, field: Field) -> DeviceArray {
        let mut realigned = Vec::new();
        let node = Node::from_array_data(&data, &mut realigned);
        let cpu = device::cpu();
        let owner: Owner = Arc::new((data, realigned));
        // arrow-rs data: built by arrow-rs' checked constructors (or
        // vouched for by the caller of an unchecked one), so valid as a
        // whole, as `from_node` records.
        DeviceArray::from_node(node, field, DeviceType::CPU, -1, Some(cpu), owner)
    }

    /// The device type the buffers live on.
    pub fn device_type(&self) -> DeviceType {
        self.storage.device_type
    }

    /// The device id (-1 for the CPU).
    pub fn device_id(&self) -> i64 {
        self.storage.device_id
    }

    /// The device implementation, or `None` for an opaque device type.
    pub fn device(&self) -> Option<&DeviceRef> {
        self.storage.device.as_ref()
    }

    /// The producer's `sync_event` (NULL when none).
    pub fn sync_event(&self) -> *mut c_void {
        self.storage.sync.as_ptr()
    }

    /// The owner of every wait on this tree's `sync_event`.
    #[cfg(feature = "cuda")]
    pub(crate) fn sync(&self) -> &SyncEvent {
        &self.storage.sync
    }

    /// The field (name, type, nullability, metadata) from the schema.
    pub fn field(&self) -> &Field {
        self.field.as_deref().unwrap_or(&self.storage.field)
    }

    /// The same array described by `field` (another name or metadata); the
    /// caller has checked that `field` has this array's data type.
    pub(crate) fn with_field(&self, field: Field) -> DeviceArray {
        debug_assert_eq!(field.data_type(), self.data_type());
        DeviceArray {
            storage: self.storage.clone(),
            node: self.node.clone(),
            field: Some(Arc::new(field)),
        }
    }

    /// The data type.
    pub fn data_type(&self) -> &DataType {
        self.field().data_type()
    }

    /// The number of slots.
    pub fn len(&self) -> usize {
        self.node().len
    }

    /// Whether the array has no slots.
    pub fn is_empty(&self) -> bool {
        self.node().len == 0
    }

    /// The offset into the buffers, in slots.
    pub fn offset(&self) -> usize {
        self.node().offset
    }

    /// The null count, `None` when the producer reported -1 (unknown).
    pub fn null_count(&self) -> Option<usize> {
        self.node().null_count
    }

    /// The buffers of this node in C Data Interface order (for view types
    /// without the variadic-sizes buffer).
    pub fn buffers(&self) -> Vec<BufferInfo> {
        let data_type = &self.node().data_type;
        let data_dependent = |i: usize| {
            (layout::has_data_buffer(data_type) && i == 2) || (layout::is_view(data_type) && i >= 2)
        };
        self.node()
            .buffers
            .iter()
            .enumerate()
            .map(|(i, b)| BufferInfo {
                ptr: b.ptr,
                len: if self.storage.sizes_known || !data_dependent(i) {
                    Some(b.len)
                } else {
                    None
                },
            })
            .collect()
    }

    /// The children as the producer laid them out (a parent's offset is not
    /// applied to them).
    pub fn children(&self) -> Vec<DeviceArray> {
        let fields: Vec<FieldRef> = layout::child_fields(self.data_type())
            .into_iter()
            .cloned()
            .collect();
        self.node()
            .children
            .iter()
            .zip(fields)
            .map(|(child, field)| DeviceArray {
                storage: self.storage.clone(),
                node: NodeRef::Derived(Arc::new(child.clone())),
                field: Some(field),
            })
            .collect()
    }

    /// The dictionary of a dictionary-encoded array.
    pub fn dictionary(&self) -> Option<DeviceArray> {
        let DataType::Dictionary(_, value_type) = self.data_type() else {
            return None;
        };
        let dictionary = self.node().dictionary.as_ref()?;
        Some(DeviceArray {
            storage: self.storage.clone(),
            node: NodeRef::Derived(dictionary.clone()),
            field: Some(Arc::new(Field::new(
                "dictionary",
                (**value_type).clone(),
                true,
            ))),
        })
    }

    /// A zero-copy slice of `len` slots starting at `offset`.
    pub fn slice(&self, offset: usize, len: usize) -> Result<DeviceArray> {
        if offset
            .checked_add(len)
            .is_none_or(|end| end > self.node().len)
        {
            return Err(Error::OutOfRange(format!(
                "slice {offset}..{} of an array of length {}",
                offset.saturating_add(len),
                self.node().len
            )));
        }
        let mut node = self.node().clone();
        node.offset += offset;
        node.len = len;
        if node.null_count != Some(0) || offset + len != self.node().len || offset != 0 {
            node.null_count = if self.node().null_count == Some(0) {
                Some(0)
            } else {
                None
            };
        }
        if !layout::has_validity(&node.data_type) {
            node.null_count = Some(0);
        }
        Ok(DeviceArray {
            storage: self.storage.clone(),
            node: NodeRef::Derived(Arc::new(node)),
            field: self.field.clone(),
        })
    }

    /// Copies (or, for host-accessible memory, wraps) the array as arrow-rs data,
    /// after honouring the producer's `sync_event`.
    ///
    /// The result has the structure arrow-rs builds its arrays on (checked
    /// here where the import level did not: child lengths, first and last
    /// offsets, list-view offsets); its values are what the producer wrote,
    /// checked only if the import was at [`ValidationLevel::Full`]. Run
    /// arrow-rs' `validate_full` before handing data from an untrusted
    /// producer, imported at a lower level, to a kernel.
    pub fn to_host(&self) -> Result<ArrayRef> {
        self.to_host_with(None)
    }

    /// [`DeviceArray::to_host`], copying into memory that `staging` lends
    /// (and takes back once the result and everything sliced or cloned from
    /// it are dropped) instead of fresh memory: for a stream of batches.
    /// Host-accessible memory is wrapped as by `to_host`, without a copy.
    pub fn to_host_staged(&self, staging: &HostStaging) -> Result<ArrayRef> {
        self.to_host_with(Some(staging))
    }

    fn to_host_with(&self, staging: Option<&HostStaging>) -> Result<ArrayRef> {
        if !self.structure_known() {
            let data = self.host_data(staging)?;
            validate::structure(&data, &Path::root())?;
            return Ok(make_array(data));
        }
        // SAFETY: the structure was checked (above); the wrapped buffers are
        // the host's (see `on_host`).
        self.on_host(staging, |node, mut wrap| unsafe {
            node.to_array(&mut wrap)
        })
    }

    /// [`DeviceArray::to_host`] with every value checked first
    /// (`validate::full`, once per tree): what this crate hands to an
    /// arrow-rs kernel, since kernels trust their input.
    pub(crate) fn to_host_checked(&self) -> Result<ArrayRef> {
        let data = self.host_data(None)?;
        self.check_values(&data)?;
        Ok(make_array(data))
    }

    /// `validate::full` on `data`, this array's host data, unless the tree
    /// is known valid; remembered for the whole tree when this is its root.
    fn check_values(&self, data: &ArrayData) -> Result<()> {
        if !self.values_checked() {
            validate::full(data, &Path::root())?;
            if matches!(self.node, NodeRef::Root) {
                self.storage.values_checked.store(true, Ordering::Release);
            }
        }
        Ok(())
    }

    /// Whether the structure arrow-rs builds its arrays on is known good:
    /// checked by the import at its level, or with every value since.
    fn structure_known(&self) -> bool {
        self.storage.structure_checked || self.values_checked()
    }

    fn values_checked(&self) -> bool {
        self.storage.values_checked.load(Ordering::Acquire)
    }

    /// The tree as arrow-rs data, waited on, copied to the host (into
    /// memory `staging` lends, where given) if needed; no check beyond the
    /// import's.
    // Inlined: a returned `ArrayData` is otherwise moved (memcpy) on the
    // import hot path, measurable on a single small array.
    #[inline(always)]
    fn host_data(&self, staging: Option<&HostStaging>) -> Result<ArrayData> {
        // SAFETY: `on_host` hands over host buffers of a tree that passed
        // import validation.
        self.on_host(staging, |node, mut wrap| unsafe {
            node.to_array_data(&mut wrap)
        })
    }

    /// Runs `build` on the tree in host memory (waited on, copied to the
    /// host if needed, into memory `staging` lends where given), with
    /// `wrap` turning each of its buffers into an arrow-rs buffer that
    /// keeps the memory alive. `build` may assume that the node's buffers
    /// are host-accessible for their sizes while the wrapped buffers live,
    /// and that the tree passed import validation.
    #[inline(always)]
    fn on_host<T>(
        &self,
        staging: Option<&HostStaging>,
        build: impl FnOnce(&Node, &mut dyn FnMut(RawBuf) -> Buffer) -> Result<T>,
    ) -> Result<T> {
        let device = self.require_device()?;
        if device.is_host_accessible() {
            self.storage.sync.wait_host(device.as_ref())?;
            let owner: Arc<dyn Allocation> = self.storage.clone();
            // SAFETY: host-accessible memory, synchronized above, kept alive
            // by `owner`.
            build(self.node(), &mut |b| unsafe { wrap_owned(b, &owner) })
        } else {
            let (host_node, memory) =
                copy::device_to_host(self.node(), device, &self.storage.sync, staging)?;
            let base = memory.as_ptr() as usize;
            // Every buffer of `host_node` lies inside `memory`, which each
            // slice keeps alive.
            build(&host_node, &mut |b: RawBuf| {
                memory.slice_with_length(b.ptr as usize - base, b.len)
            })
        }
    }

    /// Copies a struct array to the host as a record batch; the schema's
    /// metadata comes from the struct's field metadata.
    pub fn to_record_batch(&self) -> Result<RecordBatch> {
        self.record_batch_with(None)
    }

    /// [`DeviceArray::to_record_batch`], copying into memory that `staging`
    /// lends (and takes back once the batch and every column, clone or
    /// slice of it are dropped) instead of fresh memory: what a server that
    /// encodes a stream's batches on the host calls per batch.
    /// Host-accessible memory is wrapped as by `to_record_batch`, without a
    /// copy.
    pub fn to_record_batch_staged(&self, staging: &HostStaging) -> Result<RecordBatch> {
        self.record_batch_with(Some(staging))
    }

    fn record_batch_with(&self, staging: Option<&HostStaging>) -> Result<RecordBatch> {
        let DataType::Struct(fields) = self.data_type() else {
            return Err(not_a_record_batch(self.data_type()));
        };
        let schema = Arc::new(Schema::new_with_metadata(
            fields.clone(),
            self.field().metadata().clone(),
        ));
        self.record_batch_on_host(schema, staging)
    }

    /// As [`DeviceArray::to_record_batch`], with a schema the caller already
    /// has (a stream's): no schema is built per batch.
    pub(crate) fn to_record_batch_with_schema(&self, schema: SchemaRef) -> Result<RecordBatch> {
        self.record_batch_on_host(schema, None)
    }

    fn record_batch_on_host(
        &self,
        schema: SchemaRef,
        staging: Option<&HostStaging>,
    ) -> Result<RecordBatch> {
        if !matches!(self.data_type(), DataType::Struct(_)) {
            return Err(not_a_record_batch(self.data_type()));
        }
        let (columns, nulls) = if !self.structure_known() {
            // Through `to_host`, which checks the structure first.
            let array = self.to_host_with(staging)?;
            let Some(struct_array) = array.as_any().downcast_ref::<StructArray>() else {
                return Err(Error::NotSupported("struct array expected".into()));
            };
            (
                struct_array.columns().to_vec(),
                struct_array.nulls().cloned(),
            )
        } else {
            // The columns straight from the tree, without a struct array.
            // SAFETY: the structure was checked; `on_host` hands over host
            // buffers.
            self.on_host(staging, |node, mut wrap| unsafe {
                node.struct_columns(&mut wrap)
            })?
        };
        if nulls.is_some_and(|n| n.null_count() > 0) {
            return Err(Error::invalid(
                &Path::root(),
                "a record batch cannot have top-level nulls",
            ));
        }
        // The row count is explicit: a batch of no columns still has rows.
        let options = RecordBatchOptions::new().with_row_count(Some(self.len()));
        Ok(RecordBatch::try_new_with_options(
            schema, columns, &options,
        )?)
    }

    /// Copies the array onto `device` (directly between devices of one type,
    /// through the host otherwise). The result carries the copy's event.
    pub fn to_device(&self, device: &DeviceRef) -> Result<DeviceArray> {
        let src = self.require_device()?;
        if device::same_device(src.as_ref(), device.as_ref()) {
            return Ok(self.clone());
        }
        if device.device_type() == DeviceType::CPU {
            let (node, owner): (Node, Owner) = if src.is_host_accessible() {
                self.storage.sync.wait_host(src.as_ref())?;
                (self.node().clone(), self.storage.clone())
            } else {
                let (node, memory) =
                    copy::device_to_host(self.node(), src, &self.storage.sync, None)?;
                (node, Arc::new(memory))
            };
            // SAFETY: no event.
            return Ok(unsafe {
                self.with_storage(node, device.clone(), std::ptr::null_mut(), owner)
            });
        }
        let src_owner: Owner = self.storage.clone();
        let copied =
            copy::device_to_device(self.node(), src, &self.storage.sync, src_owner, device)?;
        // SAFETY: the copy's event, of `copied.device`, kept by its memory.
        Ok(unsafe {
            self.with_storage(copied.node, copied.device, copied.sync_event, copied.owner)
        })
    }

    /// Exports this array (zero-copy) as a new pair of C structs that owner it
    /// alive; `sync_event` is the producer's, still owned by this tree.
    ///
    /// An array on a device type without an implementation here (opaque) is
    /// passed on as it came, `sync_event` included, when the spec names its
    /// device type and it holds no view array (whose variadic sizes were
    /// never read); otherwise this is [`Error::NotSupported`].
    pub fn export(&self) -> Result<(ArrowDeviceArray, FFI_ArrowSchema)> {
        self.check_hand_on(HandOn::DeviceInterface)?;
        let schema = crate::schema::export_field(self.field())?;
        let owner: Owner = self.storage.clone();
        Ok((
            export_node(
                self.node(),
                owner,
                (self.storage.device_type, self.storage.device_id),
                self.storage.device.as_deref(),
                self.storage.sync.as_ptr(),
            ),
            schema,
        ))
    }

    /// The one rule for handing an array's data on to another consumer
    /// without copying it ([`export`](Self::export), DLPack): always allowed
    /// on a device with an implementation here. An opaque array (device type
    /// without one) is handed on only where the consumer could use it: its
    /// device type must be one the spec names, and the interface must carry
    /// what this crate cannot do for it: the C Device Data Interface passes
    /// the producer's `sync_event` along (but not a view's variadic sizes,
    /// which were never read), DLPack carries no event, so only an array
    /// without one goes there.
    pub(crate) fn check_hand_on(&self, interface: HandOn) -> Result<()> {
        if self.storage.device.is_some() {
            return Ok(());
        }
        let (device_type, device_id) = (self.storage.device_type, self.storage.device_id);
        let refuse = |why: &str| {
            Err(Error::NotSupported(format!(
                "device type {device_type} id {device_id} has no implementation here, \
                 and {why}"
            )))
        };
        if device_type.name().is_none() {
            return refuse("the spec names no such device type: no consumer could find the memory");
        }
        match interface {
            HandOn::DeviceInterface if layout::contains(self.data_type(), &layout::is_view) => {
                refuse("a view array's variadic buffer sizes live in memory this crate cannot read")
            }
            HandOn::Dlpack if self.storage.sync.is_some() => {
                refuse("DLPack carries no sync_event, and this one cannot be waited on here")
            }
            _ => Ok(()),
        }
    }

    /// Blocks the host until the producer's `sync_event` has completed (once
    /// per tree: later calls return at once). Afterwards the data is ready
    /// for any reader of its device, on any stream; this is how data is
    /// handed to an interface without events of its own (DLPack).
    ///
    /// An array without a `sync_event` returns at once; one whose device has
    /// no implementation here cannot be waited on and is an error.
    pub fn synchronize(&self) -> Result<()> {
        if !self.storage.sync.is_pending() {
            return Ok(());
        }
        let device = self.storage.device.as_ref().ok_or_else(|| {
            Error::NotSupported(format!(
                "cannot wait on the sync_event of device type {} id {}: no device \
                 implementation is loaded for it",
                self.storage.device_type, self.storage.device_id
            ))
        })?;
        self.storage.sync.wait_host(device.as_ref())
    }

    /// The same data ordered after `sync_event` (an event of the array's
    /// device type), which the result exports as its own; `owner` keeps the
    /// event valid (and whatever else the result needs). For memory handed
    /// over by a foreign producer with a stream (CUDA Array Interface,
    /// DLPack), where the event was recorded on that stream, or after a
    /// conversion queued on a stream of ours.
    ///
    /// The array must have no `sync_event` of its own that is still
    /// pending: it would be lost.
    ///
    /// # Safety
    /// `sync_event` is NULL or points to an event of the array's device
    /// type, valid while `owner` lives.
    #[cfg(feature = "cuda")]
    pub(crate) unsafe fn ordered_after(
        &self,
        sync_event: *mut c_void,
        owner: Owner,
    ) -> Result<DeviceArray> {
        let device = self.require_device()?.clone();
        if !self.is_synchronized() {
            return Err(Error::NotSupported(
                "the array already has a pending sync_event; wait on it before ordering the \
                 array after another event"
                    .to_string(),
            ));
        }
        let owner: Owner = Arc::new((self.storage.clone(), owner));
        // With a device every size was read at import: `with_storage`'s
        // "all sizes known" holds.
        // SAFETY: forwarded from the caller; `owner` holds the caller's.
        Ok(unsafe { self.with_storage(self.node().clone(), device, sync_event, owner) })
    }

    /// The same data ordered after the work queued so far on `stream`, a
    /// stream that a foreign producer handed this array's memory over with
    /// (a CUDA Array Interface `stream` entry, or the stream given to a
    /// DLPack producer): an event recorded there
    /// ([`CudaDevice::record_on_protocol_stream`]) becomes the result's
    /// `sync_event`, owned by the result. [`StreamSync::None`] returns the
    /// array as it is, whatever its device. The host does not wait.
    ///
    /// Errors: the array's device is not a CUDA device of this crate
    /// ([`Error::NotSupported`]), the array already has a pending
    /// `sync_event`, or the driver failed.
    ///
    /// # Safety
    /// `stream` names a live stream of the primary context of the array's
    /// GPU (1 and 2 name the default streams and are always valid).
    ///
    /// [`CudaDevice::record_on_protocol_stream`]: crate::device::cuda::CudaDevice::record_on_protocol_stream
    /// [`StreamSync::None`]: crate::device::StreamSync::None
    #[cfg(feature = "cuda")]
    pub unsafe fn ordered_after_stream(
        &self,
        stream: crate::device::StreamSync,
    ) -> Result<DeviceArray> {
        if stream == crate::device::StreamSync::None {
            return Ok(self.clone());
        }
        let cuda = crate::device::cuda::CudaDevice::require(self.require_device()?.as_ref())?;
        // SAFETY: the stream is live, per this function's contract.
        let Some(event) = (unsafe { cuda.record_on_protocol_stream(stream) })? else {
            return Ok(self.clone());
        };
        let sync_event = event.sync_event();
        // SAFETY: a `CUevent*` of the array's device type, kept valid by
        // `event`, which the result keeps.
        unsafe { self.ordered_after(sync_event, Arc::new(event)) }
    }

    /// Whether the host has already waited on the `sync_event` (or there
    /// is none): nothing is pending on the data.
    #[cfg(feature = "cuda")]
    pub(crate) fn is_synchronized(&self) -> bool {
        !self.storage.sync.is_pending()
    }

    /// A handle over a tree this crate described itself (every size known,
    /// no `sync_event`) whose memory `owner` keeps valid; `device` is `None`
    /// for a device type without an implementation.
    pub(crate) fn from_node(
        node: Node,
        field: Field,
        device_type: DeviceType,
        device_id: i64,
        device: Option<DeviceRef>,
        owner: Owner,
    ) -> DeviceArray {
        let storage = Arc::new(Storage {
            device_type,
            device_id,
            device,
            sync: SyncEvent::none(),
            // Fixed-width values (every bit pattern is a value) and bitmaps
            // that this crate made: nothing to check.
            structure_checked: true,
            values_checked: AtomicBool::new(true),
            sizes_known: true,
            root: node,
            field,
            _owner: StorageOwner::Shared(owner),
        });
        DeviceArray {
            storage,
            node: NodeRef::Root,
            field: None,
        }
    }

    /// # Safety
    /// `sync_event` is NULL or an event of `device`'s type, valid while
    /// `owner` lives.
    unsafe fn with_storage(
        &self,
        node: Node,
        device: DeviceRef,
        sync_event: *mut c_void,
        owner: Owner,
    ) -> DeviceArray {
        let storage = Arc::new(Storage {
            device_type: device.device_type(),
            device_id: device.device_id(),
            device: Some(device),
            // SAFETY: forwarded from the caller.
            sync: unsafe { SyncEvent::new(sync_event) },
            // A copy (or a re-ordering) of checked data is checked.
            structure_checked: self.storage.structure_checked,
            values_checked: AtomicBool::new(self.values_checked()),
            sizes_known: true,
            root: node,
            field: self.field().clone(),
            _owner: StorageOwner::Shared(owner),
        });
        DeviceArray {
            storage,
            node: NodeRef::Root,
            field: None,
        }
    }

    fn require_device(&self) -> Result<&DeviceRef> {
        self.storage.device.as_ref().ok_or_else(|| {
            Error::NotSupported(format!(
                "no device implementation for device type {} id {}: the array's metadata can be read but its data cannot be copied",
                self.storage.device_type, self.storage.device_id
            ))
        })
    }

    /// Full validation of values on host-accessible memory (Full level).
    pub(crate) fn validate_full(&self) -> Result<()> {
        if !self
            .storage
            .device
            .as_ref()
            .is_some_and(|d| d.is_host_accessible())
        {
            return Ok(());
        }
        // Zero-copy on host-accessible memory, after the producer's event.
        let data = self.host_data(None)?;
        self.check_values(&data)
    }
}

/// The interfaces that hand an array's data on, for
/// [`DeviceArray::check_hand_on`]: they differ in what they can carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HandOn {
    /// The C Device Data Interface (`export`): carries a `sync_event`.
    DeviceInterface,
    /// DLPack: carries no event.
    Dlpack,
}

fn not_a_record_batch(data_type: &DataType) -> Error {
    Error::NotSupported(format!(
        "a record batch needs a struct array, found {data_type}"
    ))
}

impl fmt::Debug for DeviceArray {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeviceArray")
            .field("data_type", self.data_type())
            .field("len", &self.len())
            .field("device_type", &self.device_type())
            .field("device_id", &self.device_id())
            .finish()
    }
}

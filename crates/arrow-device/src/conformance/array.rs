//! The rules of one exported array: device fields, validity, release and
//! moved children.

use std::ffi::c_void;

use arrow_array::{make_array, ArrayRef};
use arrow_data::transform::MutableArrayData;
use arrow_schema::Field;

use super::watch::{watch_tree, Tally, Watchable};
use super::{Check, Outcome, Scope};
use crate::abi::{raw, ArrowDeviceArray, DeviceType, FFI_ArrowArray, FFI_ArrowSchema};
use crate::array::layout;
use crate::device::{self, SyncEvent};
use crate::{DeviceArray, ValidationLevel};

/// What a producer closure returns: a device array and its schema, or why
/// it could not export.
pub type DeviceArrayExport = Result<(ArrowDeviceArray, FFI_ArrowSchema), String>;

/// What a C Data Interface producer closure returns.
pub type ArrayExport = Result<(FFI_ArrowArray, FFI_ArrowSchema), String>;

/// Checks a producer of `ArrowDeviceArray`s: `produce` exports a fresh tree
/// each call (it is called once, and a second time for the moved-child
/// rule when the array has children). `scope` is [`Scope::DeviceArray`]
/// (or a stream's scope when a stream's batch is checked this way);
/// `expect_device_type` is the stream's device type for a stream's batch.
///
/// Every struct `produce` returns is released exactly once. The producer is
/// trusted as far as a consumer must trust one: pointers are valid for
/// what the structs say (the checker validates everything else).
pub fn check_device_array(
    scope: Scope,
    expect_device_type: Option<DeviceType>,
    produce: &mut dyn FnMut() -> DeviceArrayExport,
) -> Vec<Check> {
    let mut checks = Vec::new();
    let export = |checks: &mut Vec<Check>, export: DeviceArrayExport| match export {
        Ok(pair) => Some(pair),
        Err(message) => {
            checks.push(Check::new(scope, "export", Outcome::Failed, message));
            None
        }
    };
    let Some((array, schema)) = export(&mut checks, produce()) else {
        return checks;
    };
    let mut array = Box::new(array);
    let field = schema_checks(scope, schema, &mut checks);
    if scope.is_device() {
        checks.extend(device_checks(scope, &array, expect_device_type));
    }
    let has_children = raw::array(&array.array).n_children > 0;
    // SAFETY: `array` is a live tree from the producer, boxed so that it
    // stays in place; `first_use` releases it.
    let release = unsafe { first_use(scope, &mut array, field.as_ref(), &mut checks) };
    checks.push(release);
    if scope == Scope::Array || scope == Scope::DeviceArray {
        let check = match (field, has_children) {
            (Some(field), true) => match export(&mut Vec::new(), produce()) {
                Some((array, schema)) => {
                    drop(schema);
                    // SAFETY: a fresh live tree from the producer.
                    unsafe { child_move(scope, Box::new(array), &field) }
                }
                None => Check::new(
                    scope,
                    "child_move",
                    Outcome::NotApplicable,
                    "the second export (needed to move a child out) failed",
                ),
            },
            (None, _) => Check::new(
                scope,
                "child_move",
                Outcome::NotApplicable,
                "the schema did not import",
            ),
            (_, false) => Check::new(
                scope,
                "child_move",
                Outcome::NotApplicable,
                "the array has no children",
            ),
        };
        checks.push(check);
    }
    checks
}

/// Checks a producer of C Data Interface arrays (`ArrowArray` and schema,
/// host memory): [`check_device_array`]'s rules that apply without a device.
pub fn check_array(produce: &mut dyn FnMut() -> ArrayExport) -> Vec<Check> {
    check_device_array(Scope::Array, None, &mut || {
        produce().map(|(array, schema)| (on_cpu(array), schema))
    })
}

/// Checks a producer of schemas (`__arrow_c_schema__`, called once): the
/// schema parses, and one release call releases it whole.
pub fn check_schema(produce: &mut dyn FnMut() -> Result<FFI_ArrowSchema, String>) -> Vec<Check> {
    let schema = match produce() {
        Ok(schema) => schema,
        Err(message) => {
            return vec![Check::new(
                Scope::Schema,
                "export",
                Outcome::Failed,
                message,
            )]
        }
    };
    let (field, release) = release_schema(Scope::Schema, schema);
    let valid = match field {
        Ok(field) => Check::new(
            Scope::Schema,
            "valid_schema",
            Outcome::Passed,
            format!("{}", field.data_type()),
        ),
        Err(message) => Check::new(Scope::Schema, "valid_schema", Outcome::Failed, message),
    };
    vec![valid, release]
}

/// A C Data Interface array as a CPU device array.
pub(crate) fn on_cpu(array: FFI_ArrowArray) -> ArrowDeviceArray {
    ArrowDeviceArray {
        array,
        ..ArrowDeviceArray::empty()
    }
}

/// Releases the schema once (watched) and imports its field first.
fn schema_checks(scope: Scope, schema: FFI_ArrowSchema, checks: &mut Vec<Check>) -> Option<Field> {
    let (field, check) = release_schema(scope, schema);
    checks.push(check);
    match field {
        Ok(field) => Some(field),
        Err(message) => {
            checks.push(Check::new(
                scope,
                "valid_full",
                Outcome::Failed,
                format!("schema: {message}"),
            ));
            None
        }
    }
}

/// Imports `schema`'s field and releases it with one call of its release,
/// watching every node: the field (or why it did not import) and the
/// `schema_release_once` check.
pub(super) fn release_schema(
    scope: Scope,
    schema: FFI_ArrowSchema,
) -> (Result<Field, String>, Check) {
    let mut schema = Box::new(schema);
    let root = (&raw mut *schema).cast::<raw::ArrowSchema>();
    if raw::schema(&schema).release.is_none() {
        let message = "the schema struct is released (release is NULL)".to_string();
        return (
            Err(message.clone()),
            Check::new(scope, "schema_release_once", Outcome::Failed, message),
        );
    }
    let field = crate::schema::import_field(&schema).map_err(|e| e.to_string());
    let tally = Tally::new();
    // SAFETY: a live tree, boxed: it stays in place until released below.
    let watched = unsafe { watch_tree(root, &tally, "schema") };
    // SAFETY: the root's (watched) callback, called once.
    unsafe { release_once(root) };
    // Marked released by `release_once`, so its Drop only frees the box.
    drop(schema);
    let check = match (watched, tally.problems(|_| true)) {
        (Err(message), _) => Check::new(scope, "schema_release_once", Outcome::Failed, message),
        (_, Some(problems)) => Check::new(scope, "schema_release_once", Outcome::Failed, problems),
        (_, None) => Check::new(
            scope,
            "schema_release_once",
            Outcome::Passed,
            format!(
                "one release call released {} schema struct{}, each once",
                tally.seen().len(),
                if tally.seen().len() == 1 { "" } else { "s" }
            ),
        ),
    };
    (field, check)
}

/// Calls the release callback of the struct at `root` once, then marks it
/// released whatever the callback did, so that nothing calls it again.
///
/// # Safety
/// `root` points to a live struct whose callback has not been called.
pub(crate) unsafe fn release_once<T: Watchable>(root: *mut T) {
    // SAFETY: the caller's guarantee.
    unsafe {
        let slot = T::slot(root);
        if let Some(release) = *slot {
            release(root);
        }
        *slot = None;
    }
}

/// `device`, `sync_event` and `reserved`.
pub(super) fn device_checks(
    scope: Scope,
    array: &ArrowDeviceArray,
    expect_device_type: Option<DeviceType>,
) -> Vec<Check> {
    let (device_type, device_id) = (array.device_type, array.device_id);
    let name = device_type.name();
    let device = match (name, expect_device_type) {
        (None, _) => Check::new(scope, "device", Outcome::Failed, format!(
            "device_type is {}, which is not an ArrowDeviceType value", device_type.0)),
        (_, Some(expected)) if expected != device_type => Check::new(scope, "device", Outcome::Failed, format!(
            "an array on {device_type} from a stream of device_type {expected} (spec: every array of a device stream is on the stream's device type)")),
        _ if device_type == DeviceType::CPU && device_id != -1 => Check::new(scope, "device", Outcome::Failed, format!(
            "a CPU array with device_id {device_id} (spec: the CPU, which has no device ids, uses -1)")),
        _ if device_type != DeviceType::CPU && device_type != DeviceType::EXT_DEV && device_id < 0 => {
            Check::new(scope, "device", Outcome::Failed, format!(
                "device_id {device_id} on {device_type} (expected a device ordinal, 0 or more)"))
        }
        _ => Check::new(scope, "device", Outcome::Passed, format!("{device_type}, device_id {device_id}")),
    };
    let sync_event = if device_type == DeviceType::CPU {
        if array.sync_event.is_null() {
            Check::new(scope, "sync_event", Outcome::Passed, "NULL on the CPU")
        } else {
            Check::new(
                scope,
                "sync_event",
                Outcome::Failed,
                format!(
                    "sync_event is {:p} on the CPU (spec: the CPU has no event type: NULL)",
                    array.sync_event
                ),
            )
        }
    } else if array.sync_event.is_null() {
        Check::new(
            scope,
            "sync_event",
            Outcome::Passed,
            format!("NULL on {device_type}: the producer promises the data is ready"),
        )
    } else {
        match device::lookup(device_type, device_id) {
            Some(device) => {
                // SAFETY: the producer's promise: an event of `device_type`,
                // alive while its array is (the array is alive here).
                let event = unsafe { SyncEvent::new(array.sync_event) };
                match event.wait_host(device.as_ref()) {
                    Ok(()) => Check::new(scope, "sync_event", Outcome::Passed, format!(
                        "an event of {device_type}, waited on")),
                    Err(e) => Check::new(scope, "sync_event", Outcome::Failed, format!(
                        "waiting on the sync_event of {device_type} failed: {e}")),
                }
            }
            None => Check::new(scope, "sync_event", Outcome::NotApplicable, format!(
                "an event of {device_type}, which this process cannot wait on (no such device here)")),
        }
    };
    let reserved = if array.reserved == [0; 3] {
        Check::new(scope, "reserved", Outcome::Passed, "zero")
    } else {
        Check::new(
            scope,
            "reserved",
            Outcome::Failed,
            format!(
                "reserved is {:?} (spec: these bytes MUST be zeroed)",
                array.reserved
            ),
        )
    };
    vec![device, sync_event, reserved]
}

/// A bitwise copy of `array` whose release does nothing but mark the copy
/// released: an import of it reads the producer's tree without owning it.
///
/// # Safety
/// The copy must not outlive the original's release.
unsafe fn borrowed(array: &ArrowDeviceArray) -> ArrowDeviceArray {
    let mut root = *raw::array(&array.array);
    root.release = Some(release_borrowed);
    // A CPU array's non-NULL sync_event is the `sync_event` rule's failure;
    // the importer would refuse it too, and `valid_full` would fail for a
    // defect of the device fields rather than of the data. The CPU has no
    // event to wait on, so the view goes without.
    let sync_event = if array.device_type == DeviceType::CPU {
        std::ptr::null_mut()
    } else {
        array.sync_event
    };
    ArrowDeviceArray {
        // SAFETY: identical layouts; the copy's release is ours.
        array: unsafe { std::mem::transmute::<raw::ArrowArray, FFI_ArrowArray>(root) },
        device_id: array.device_id,
        device_type: array.device_type,
        sync_event,
        reserved: [0; 3],
    }
}

unsafe extern "C" fn release_borrowed(array: *mut raw::ArrowArray) {
    // SAFETY: called by the importer on the copy it owns.
    unsafe { (*array).release = None };
}

/// Imports a borrowed view of `array` at the full level: the
/// `valid_full` message, and the imported array on success.
///
/// # Safety
/// `array` is a live tree of `field`'s type.
unsafe fn import_full(array: &ArrowDeviceArray, field: &Field) -> Result<DeviceArray, String> {
    // SAFETY: the view is dropped (released) before the original is.
    let view = unsafe { borrowed(array) };
    // SAFETY: the producer's promise, as for any import.
    unsafe { DeviceArray::try_new_with_field(view, field.clone(), ValidationLevel::Full) }
        .map_err(|e| e.to_string())
}

/// The first use of a tree: validation, alignment, then one release call
/// (watched) whose `release_once` check is returned.
///
/// # Safety
/// `array` is a live tree from the producer; it is released here.
pub(super) unsafe fn first_use(
    scope: Scope,
    array: &mut Box<ArrowDeviceArray>,
    field: Option<&Field>,
    checks: &mut Vec<Check>,
) -> Check {
    let root = (&raw mut array.array).cast::<raw::ArrowArray>();
    if array.is_released() {
        let message = "the array struct is released (release is NULL)";
        checks.push(Check::new(scope, "valid_full", Outcome::Failed, message));
        return Check::new(scope, "release_once", Outcome::Failed, message);
    }
    let tally = Tally::new();
    // SAFETY: a live tree in a box (the caller's guarantee).
    let watched = unsafe { watch_tree(root, &tally, "array") };
    if let Some(field) = field {
        // SAFETY: as above.
        match unsafe { import_full(array, field) } {
            Ok(imported) => {
                checks.push(values_on_host(scope, &imported));
                checks.push(alignment(scope, &imported));
            }
            Err(message) => {
                checks.push(Check::new(scope, "valid_full", Outcome::Failed, message));
                checks.push(Check::new(
                    scope,
                    "alignment",
                    Outcome::NotApplicable,
                    "the array did not import",
                ));
            }
        }
    }
    // SAFETY: the root's callback, once; the struct stays boxed after.
    unsafe { release_once(root) };
    match (watched, tally.problems(|_| true)) {
        (Err(message), _) => Check::new(scope, "release_once", Outcome::Failed, message),
        (_, Some(problems)) => Check::new(scope, "release_once", Outcome::Failed, problems),
        (_, None) => {
            let n = tally.seen().len();
            Check::new(
                scope,
                "release_once",
                Outcome::Passed,
                format!(
                    "one release call released {n} array struct{}, each once",
                    if n == 1 { "" } else { "s" }
                ),
            )
        }
    }
}

/// `valid_full` of an array the full-level import accepted: an import
/// checks the values of host-accessible memory itself; device memory is
/// copied to the host and checked there.
fn values_on_host(scope: Scope, imported: &DeviceArray) -> Check {
    let what = format!(
        "{} of {} value{}",
        imported.data_type(),
        imported.len(),
        if imported.len() == 1 { "" } else { "s" }
    );
    let host_accessible = imported.device().is_some_and(|d| d.is_host_accessible());
    if host_accessible {
        return Check::new(
            scope,
            "valid_full",
            Outcome::Passed,
            format!("{what} valid at the full level"),
        );
    }
    match imported.device() {
        None => Check::new(
            scope,
            "valid_full",
            Outcome::NotApplicable,
            format!(
            "{what}: the structure is valid; the values on {} were not read (no such device here)",
            imported.device_type()),
        ),
        Some(_) => match imported.to_host_checked() {
            Ok(_) => Check::new(
                scope,
                "valid_full",
                Outcome::Passed,
                format!("{what} valid at the full level (copied to the host and checked)"),
            ),
            Err(e) => Check::new(scope, "valid_full", Outcome::Failed, e.to_string()),
        },
    }
}

/// Whether every buffer of the tree is aligned to its values' width.
fn alignment(scope: Scope, array: &DeviceArray) -> Check {
    let mut misaligned = Vec::new();
    let mut pending = vec![(array.clone(), "array".to_string())];
    while let Some((node, path)) = pending.pop() {
        for (i, buffer) in node.buffers().iter().enumerate() {
            let align = layout::buffer_alignment(node.data_type(), i);
            if !buffer.ptr.is_null() && buffer.len != Some(0) && (buffer.ptr as usize) % align != 0
            {
                misaligned.push(format!(
                    "{path}.buffers[{i}] ({}) at {:p}, not a multiple of {align}",
                    layout::buffer_name(node.data_type(), i),
                    buffer.ptr
                ));
            }
        }
        for (i, child) in node.children().into_iter().enumerate() {
            pending.push((child, format!("{path}.children[{i}]")));
        }
        if let Some(dictionary) = node.dictionary() {
            pending.push((dictionary, format!("{path}.dictionary")));
        }
    }
    if misaligned.is_empty() {
        Check::new(
            scope,
            "alignment",
            Outcome::Passed,
            "every buffer aligned to its values' width",
        )
    } else {
        Check::new(
            scope,
            "alignment",
            Outcome::Failed,
            format!(
                "{} (arrow-rs copies misaligned buffers instead of sharing them)",
                misaligned.join("; ")
            ),
        )
    }
}

/// A copy of `array` in memory of its own (to compare with later).
fn deep_copy(array: &ArrayRef) -> Result<ArrayRef, String> {
    let data = array.to_data();
    let mut copy = MutableArrayData::new(vec![&data], false, data.len());
    copy.try_extend(0, 0, data.len())
        .map_err(|e| e.to_string())?;
    Ok(make_array(copy.freeze()))
}

/// The moved-child rule on a fresh tree: child 0 is moved out, the parent
/// released, and the child must keep its values and release on its own.
///
/// # Safety
/// `array` is a live tree of `field`'s type with at least one child.
// Boxed as `first_use`'s tree is: the watched root must not move.
#[allow(clippy::boxed_local)]
unsafe fn child_move(scope: Scope, mut array: Box<ArrowDeviceArray>, field: &Field) -> Check {
    let fail = |message: String| Check::new(scope, "child_move", Outcome::Failed, message);
    let root = (&raw mut array.array).cast::<raw::ArrowArray>();
    // The second export is validated like the first before its children
    // are touched: the move reads `children[0]`.
    // SAFETY: a live tree (the caller's guarantee).
    if let Err(message) = unsafe { import_full(&array, field) } {
        // SAFETY: released once, here.
        unsafe { release_once(root) };
        return Check::new(
            scope,
            "child_move",
            Outcome::NotApplicable,
            format!("the second export did not validate: {message}"),
        );
    }
    // SAFETY: a live tree with children (the caller's guarantee).
    let slot = unsafe { *(*root).children };
    let Some(child_field) = layout::child_field(field.data_type(), 0).cloned() else {
        // SAFETY: released once, here.
        unsafe { release_once(root) };
        return Check::new(
            scope,
            "child_move",
            Outcome::NotApplicable,
            format!("{} has no child type", field.data_type()),
        );
    };
    // Spec, "Moving child arrays": a bitwise copy, then the source marked released.
    // SAFETY: the child slot is a live struct of the tree.
    let mut moved = Box::new(unsafe { std::ptr::read(slot) });
    // SAFETY: as above.
    unsafe { (*slot).release = None };
    let moved_root = &raw mut *moved;
    let parent_tally = Tally::new();
    let child_tally = Tally::new();
    // SAFETY: both trees are live and stay in place (boxes, the producer's memory).
    let watched = unsafe { watch_tree(root, &parent_tally, "array") }
        .and(unsafe { watch_tree(moved_root, &child_tally, "array.children[0]") });
    // Before the parent goes, its event (which the moved child's data waits
    // on) is waited on: the parent's release may free it.
    let (device_type, device_id, sync_event) =
        (array.device_type, array.device_id, array.sync_event);
    let child_view = |moved: &raw::ArrowArray, sync_event: *mut c_void| ArrowDeviceArray {
        // SAFETY: identical layouts; the copy is only ever viewed (`borrowed`).
        array: unsafe { std::mem::transmute::<raw::ArrowArray, FFI_ArrowArray>(*moved) },
        device_id,
        device_type,
        sync_event,
        reserved: [0; 3],
    };
    let snapshot = |view: ArrowDeviceArray| {
        // SAFETY: the moved child is live; the view is a borrowed import.
        let imported = unsafe { import_full(&view, &child_field) };
        std::mem::forget(view);
        imported
            .and_then(|a| a.to_host().map_err(|e| e.to_string()))
            .and_then(|a| deep_copy(&a))
    };
    // SAFETY: the moved child is live.
    let before = snapshot(child_view(unsafe { &*moved_root }, sync_event));
    // SAFETY: the parent's callback, once.
    unsafe { release_once(root) };
    let parent_problems = parent_tally.problems(|path| path != "array.children[0]");
    let after = snapshot(child_view(unsafe { &*moved_root }, std::ptr::null_mut()));
    // SAFETY: the moved child's callback, once.
    unsafe { release_once(moved_root) };
    let child_problems = child_tally.problems(|_| true);
    if let Err(message) = watched {
        return fail(message);
    }
    match (before, after) {
        (Err(message), _) => Check::new(scope, "child_move", Outcome::NotApplicable, format!(
            "child 0 did not import before the move: {message}")),
        (_, Err(message)) => fail(format!(
            "child 0, moved out, is no longer valid after its parent's release: {message}")),
        (Ok(before), Ok(after)) if before.as_ref() != after.as_ref() => fail(
            "child 0, moved out, changed values when its parent was released (the parent's release freed or reused what the moved child holds)".to_string()),
        _ => match (parent_problems, child_problems) {
            (Some(problems), _) => fail(format!("releasing the parent after moving child 0 out: {problems}")),
            (_, Some(problems)) => fail(format!("releasing the moved child 0 on its own: {problems}")),
            (None, None) => Check::new(scope, "child_move", Outcome::Passed,
                "child 0 moved out kept its values after the parent's release and released on its own"),
        },
    }
}

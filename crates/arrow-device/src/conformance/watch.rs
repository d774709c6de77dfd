//! Observing a producer's release callbacks without changing what they see.
//!
//! [`watch_tree`] swaps the `release` of every live node of a struct tree
//! for [`watched`], which counts the call, puts the producer's callback
//! back, calls it on the same struct, and notes whether it marked the
//! struct released. The producer's callback is found by the struct's
//! address, so a watched struct must not move until it is released; the
//! checker keeps the roots it watches at fixed addresses (boxes, capsules)
//! and children stay where their producer put them.
//!
//! A call for an address that is not watched (a struct moved after the
//! swap) cannot reach the producer's callback: it is counted in
//! [`lost_calls`] and leaks, rather than crash.

use std::collections::BTreeMap;
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use crate::abi::{raw, ArrowDeviceArrayStream};
use crate::dlpack::abi::{DLManagedTensor, DLManagedTensorVersioned};

/// The most nodes of one tree that are watched; a larger (or cyclic) tree
/// is reported as such rather than walked for ever.
pub(crate) const MAX_NODES: usize = 100_000;

/// The calls seen for each node of a watched tree.
#[derive(Debug, Default)]
pub(crate) struct Tally {
    nodes: Mutex<Vec<Node>>,
}

#[derive(Debug)]
struct Node {
    path: String,
    calls: Arc<AtomicU32>,
    marked: Arc<AtomicBool>,
}

/// One node's record, as read back.
#[derive(Debug, Clone)]
pub(crate) struct Seen {
    pub path: String,
    pub calls: u32,
    pub marked: bool,
}

impl Tally {
    pub(crate) fn new() -> Arc<Tally> {
        Arc::new(Tally::default())
    }

    pub(crate) fn add(&self, path: String) -> (Arc<AtomicU32>, Arc<AtomicBool>) {
        let calls = Arc::new(AtomicU32::new(0));
        let marked = Arc::new(AtomicBool::new(false));
        lock(&self.nodes).push(Node {
            path,
            calls: calls.clone(),
            marked: marked.clone(),
        });
        (calls, marked)
    }

    /// Every node watched, in the order they were found (root first).
    pub(crate) fn seen(&self) -> Vec<Seen> {
        lock(&self.nodes)
            .iter()
            .map(|n| Seen {
                path: n.path.clone(),
                calls: n.calls.load(Ordering::SeqCst),
                marked: n.marked.load(Ordering::SeqCst),
            })
            .collect()
    }

    /// What is wrong with the calls seen so far, for nodes whose path
    /// `expect_released` says should have been released exactly once (and
    /// the others, not at all); `None` when nothing is.
    pub(crate) fn problems(&self, expect_released: impl Fn(&str) -> bool) -> Option<String> {
        let mut problems = Vec::new();
        for node in self.seen() {
            let expected = u32::from(expect_released(&node.path));
            if node.calls != expected {
                problems.push(format!(
                    "{} released {} time{} (expected {expected})",
                    node.path,
                    node.calls,
                    if node.calls == 1 { "" } else { "s" }
                ));
            } else if expected == 1 && !node.marked {
                problems.push(format!(
                    "{}'s release did not set release to NULL (spec: the release callback MUST mark the struct released)",
                    node.path
                ));
            }
        }
        (!problems.is_empty()).then(|| problems.join("; "))
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panic while the lock is held cannot leave the map inconsistent
    // (each operation is one insert or remove), so a poisoned lock is used.
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A struct whose release callback can be watched: `T` is what the
/// callback receives.
pub(crate) trait Watchable: Sized + 'static {
    /// The struct's `release` member.
    ///
    /// # Safety
    /// `this` points to a live struct of this type.
    unsafe fn slot(this: *mut Self) -> *mut Option<unsafe extern "C" fn(*mut Self)>;
    /// Whether the struct is released, read after its callback returned.
    ///
    /// # Safety
    /// As for [`Watchable::slot`].
    unsafe fn is_marked(this: *mut Self) -> bool {
        // SAFETY: forwarded.
        unsafe { (*Self::slot(this)).is_none() }
    }
    fn registry() -> &'static Registry<Self>;
}

struct Entry<T> {
    original: unsafe extern "C" fn(*mut T),
    calls: Arc<AtomicU32>,
    marked: Arc<AtomicBool>,
}

/// The producers' callbacks of the watched structs of one type, by address.
pub(crate) struct Registry<T>(Mutex<BTreeMap<usize, Entry<T>>>);

impl<T> Registry<T> {
    const fn new() -> Self {
        Registry(Mutex::new(BTreeMap::new()))
    }
}

static LOST: AtomicUsize = AtomicUsize::new(0);

/// Calls of a watching callback for a struct that was not (or no longer)
/// watched: each such call leaked its struct rather than crash.
pub fn lost_calls() -> usize {
    LOST.load(Ordering::SeqCst)
}

/// The callback put in place of a watched struct's `release`.
unsafe extern "C" fn watched<T: Watchable>(this: *mut T) {
    let entry = lock(&T::registry().0).remove(&(this as usize));
    let Some(entry) = entry else {
        LOST.fetch_add(1, Ordering::SeqCst);
        return;
    };
    entry.calls.fetch_add(1, Ordering::SeqCst);
    // SAFETY: `this` is the watched struct (registered by its address, which
    // its producer's callback is now called with, as it would have been).
    unsafe {
        *T::slot(this) = Some(entry.original);
        (entry.original)(this);
        entry.marked.store(T::is_marked(this), Ordering::SeqCst);
    }
}

/// Watches the one struct at `this` (not its children) as node `path` of
/// `tally`; a released struct (NULL release) is left alone.
///
/// # Safety
/// `this` points to a live struct that stays at this address until it is
/// released.
pub(crate) unsafe fn watch_one<T: Watchable>(this: *mut T, tally: &Tally, path: String) {
    // SAFETY: a live struct (the caller's guarantee).
    let slot = unsafe { T::slot(this) };
    // SAFETY: as above.
    let Some(original) = (unsafe { *slot }) else {
        return;
    };
    // A node reached twice (a shared child, a cycle) is watched once: its
    // callback is already ours.
    if std::ptr::fn_addr_eq(original, watched::<T> as unsafe extern "C" fn(*mut T)) {
        return;
    }
    let (calls, marked) = tally.add(path);
    lock(&T::registry().0).insert(
        this as usize,
        Entry {
            original,
            calls,
            marked,
        },
    );
    // SAFETY: as above; the registry holds the original from now on.
    unsafe { *slot = Some(watched::<T>) };
}

/// Visits every node of the tree at `root` (children, dictionaries,
/// recursively; NULL pointers skipped), each with its path from `path`.
/// Returns an error when the tree has more than [`MAX_NODES`] nodes (those
/// found until then were visited).
///
/// # Safety
/// `root` points to a valid struct tree whose `children` and `dictionary`
/// pointers are valid as its `n_children` says, for as long as this runs.
pub(crate) unsafe fn walk_tree<T: raw::Tree>(
    root: *mut T,
    path: &str,
    mut visit: impl FnMut(*mut T, String),
) -> Result<(), String> {
    let mut pending = vec![(root, path.to_string())];
    let mut count = 0usize;
    while let Some((node, path)) = pending.pop() {
        count += 1;
        if count > MAX_NODES {
            return Err(format!(
                "the tree has more than {MAX_NODES} nodes (a cycle?)"
            ));
        }
        // SAFETY: a valid node (the caller's guarantee for the tree).
        let (n_children, children, dictionary) = unsafe {
            let node_ref = &*node;
            let (n, c) = node_ref.children_of();
            (n, c, node_ref.dictionary_of())
        };
        if !dictionary.is_null() {
            pending.push((dictionary, format!("{path}.dictionary")));
        }
        if n_children > 0 && !children.is_null() {
            for i in (0..n_children as usize).rev() {
                // SAFETY: `n_children` pointers (the caller's guarantee).
                let child = unsafe { *children.add(i) };
                if !child.is_null() {
                    pending.push((child, format!("{path}.children[{i}]")));
                }
            }
        }
        visit(node, path);
    }
    Ok(())
}

/// Watches every live node of the tree at `root`, named from `path`
/// ([`walk_tree`]'s bound and error).
///
/// # Safety
/// As for [`walk_tree`], and the tree's structs stay in place until
/// released.
pub(crate) unsafe fn watch_tree<T: Watchable + raw::Tree>(
    root: *mut T,
    tally: &Tally,
    path: &str,
) -> Result<(), String> {
    // SAFETY: forwarded; each node is a valid struct that stays in place.
    unsafe { walk_tree(root, path, |node, path| watch_one(node, tally, path)) }
}

macro_rules! watchable {
    ($t:ty, $field:ident) => {
        impl Watchable for $t {
            unsafe fn slot(this: *mut Self) -> *mut Option<unsafe extern "C" fn(*mut Self)> {
                // SAFETY: the caller's guarantee.
                unsafe { &raw mut (*this).$field }
            }
            fn registry() -> &'static Registry<Self> {
                static REGISTRY: Registry<$t> = Registry::new();
                &REGISTRY
            }
        }
    };
}

watchable!(raw::ArrowArray, release);
watchable!(raw::ArrowSchema, release);
watchable!(raw::ArrowArrayStream, release);

impl Watchable for ArrowDeviceArrayStream {
    unsafe fn slot(this: *mut Self) -> *mut Option<unsafe extern "C" fn(*mut Self)> {
        // SAFETY: the caller's guarantee; the public mirror has the same layout.
        unsafe { &raw mut (*this.cast::<raw::ArrowDeviceArrayStream>()).release }
    }
    fn registry() -> &'static Registry<Self> {
        static REGISTRY: Registry<ArrowDeviceArrayStream> = Registry::new();
        &REGISTRY
    }
}

/// DLPack tensors: the deleter frees the struct itself, so nothing is read
/// after it (a deleter call counts as marking it released).
macro_rules! watchable_tensor {
    ($t:ty) => {
        impl Watchable for $t {
            unsafe fn slot(this: *mut Self) -> *mut Option<unsafe extern "C" fn(*mut Self)> {
                // SAFETY: the caller's guarantee.
                unsafe { &raw mut (*this).deleter }
            }
            unsafe fn is_marked(_: *mut Self) -> bool {
                true
            }
            fn registry() -> &'static Registry<Self> {
                static REGISTRY: Registry<$t> = Registry::new();
                &REGISTRY
            }
        }
    };
}

watchable_tensor!(DLManagedTensor);
watchable_tensor!(DLManagedTensorVersioned);

/// The release calls of a struct someone else releases (a capsule's
/// destructor, a consumer under test), counted per node.
#[derive(Debug, Clone)]
pub struct Watch {
    tally: Arc<Tally>,
}

impl Watch {
    pub(crate) fn from_tally(tally: Arc<Tally>) -> Watch {
        Watch { tally }
    }

    /// `(path, calls, marked released)` for every node watched, root first.
    pub fn calls(&self) -> Vec<(String, u32, bool)> {
        self.tally
            .seen()
            .into_iter()
            .map(|s| (s.path, s.calls, s.marked))
            .collect()
    }

    /// What is wrong so far, when every node should have been released
    /// exactly once (and marked released); `None` when nothing is.
    pub fn problems(&self) -> Option<String> {
        self.tally.problems(|_| true)
    }

    /// Whether no node has been released yet.
    pub fn untouched(&self) -> bool {
        self.tally.seen().iter().all(|s| s.calls == 0)
    }
}

/// Watches the struct of kind `kind` at `ptr` (a capsule's pointer, for
/// example), with its children for trees: every release of it from now on
/// is counted in the returned [`Watch`]. `kind` is a capsule name:
/// `arrow_schema`, `arrow_array`, `arrow_device_array`, `arrow_array_stream`,
/// `arrow_device_array_stream`, `dltensor`, `dltensor_versioned`.
///
/// # Safety
/// `ptr` points to a live struct of that kind that stays in place until it
/// is released (a struct moved elsewhere first is released through its new
/// address, which is not watched: the call is lost and the struct leaks).
pub unsafe fn watch(kind: &str, ptr: *mut c_void) -> Result<Watch, String> {
    let tally = Tally::new();
    // SAFETY: forwarded.
    unsafe { watch_kind(kind, ptr, &tally) }?;
    Ok(Watch { tally })
}

unsafe fn watch_kind(kind: &str, ptr: *mut c_void, tally: &Tally) -> Result<(), String> {
    if ptr.is_null() {
        return Err(format!("a NULL {kind} pointer"));
    }
    // SAFETY (each arm): forwarded; an ArrowDeviceArray starts with its ArrowArray.
    unsafe {
        match kind {
            "arrow_schema" => watch_tree(ptr.cast::<raw::ArrowSchema>(), tally, "schema"),
            "arrow_array" | "arrow_device_array" => {
                watch_tree(ptr.cast::<raw::ArrowArray>(), tally, "array")
            }
            "arrow_array_stream" => {
                watch_one(ptr.cast::<raw::ArrowArrayStream>(), tally, "stream".into());
                Ok(())
            }
            "arrow_device_array_stream" => {
                watch_one(ptr.cast::<ArrowDeviceArrayStream>(), tally, "stream".into());
                Ok(())
            }
            "dltensor" => {
                watch_one(ptr.cast::<DLManagedTensor>(), tally, "tensor".into());
                Ok(())
            }
            "dltensor_versioned" => {
                watch_one(
                    ptr.cast::<DLManagedTensorVersioned>(),
                    tally,
                    "tensor".into(),
                );
                Ok(())
            }
            other => Err(format!("no struct kind named {other:?}")),
        }
    }
}

//! Recently imported schemas, recognised without importing them again.
//!
//! Importing a schema builds an arrow-rs `Field` tree: a name string and a
//! counted `Field` per node, a `Fields` list per struct. Producers hand over
//! the same schema again and again (a batch at a time through
//! `__arrow_c_device_array__`, a pipeline stage per batch), and for a
//! 100-column batch that rebuild is a third of an import.
//!
//! The import is a function of what it reads from the structs, and only of
//! that: per node the format, the name (NULL or its bytes), the flags, the
//! metadata blob, the child count and whether there is a dictionary, then the
//! children and the dictionary. A successful import records those reads, in
//! that order, as a *fingerprint* beside its `Field`. A later tree whose
//! reads give the same bytes would import to the same `Field` (every check
//! the import makes passed on those bytes), so a clone of it is returned.
//! The comparison reads no more of the structs than the import would (it
//! stops at the first difference, and never allocates); anything else,
//! released structs and NULL pointers included, is a miss, and the full
//! import runs and reports it.
//!
//! Each thread keeps its own few entries (no lock on the import path);
//! schemas too large to be worth keeping are not recorded.

use std::cell::RefCell;
use std::ffi::{c_char, CStr};

use arrow_schema::Field;

use crate::abi::raw;

/// Entries per thread: room for the schemas of a few interleaved streams.
const ENTRIES: usize = 8;

/// Fingerprints longer than this are not kept (about 2,000 plain columns).
const MAX_FINGERPRINT: usize = 64 * 1024;

struct Entry {
    fingerprint: Vec<u8>,
    field: Field,
}

thread_local! {
    /// Most recently recorded last.
    static ENTRIES_OF_THREAD: RefCell<Vec<Entry>> = const { RefCell::new(Vec::new()) };
}

/// The field a tree imported to before, when `root` reads the same as it.
///
/// # Safety
/// `root` must be a schema the import may read (see `import_field`).
pub(super) unsafe fn recall(root: &raw::ArrowSchema) -> Option<Field> {
    ENTRIES_OF_THREAD
        .try_with(|entries| {
            let entries = entries.try_borrow().ok()?;
            entries.iter().rev().find_map(|entry| {
                let mut rest = entry.fingerprint.as_slice();
                // SAFETY: forwarded from the caller.
                (unsafe { same(root, &mut rest) } && rest.is_empty()).then(|| entry.field.clone())
            })
        })
        .ok()
        .flatten()
}

/// Records that `root`, just imported without error, gave `field`.
///
/// # Safety
/// `root` must be the tree `field` was imported from, unchanged: the import
/// checked every pointer and string this walk follows.
pub(super) unsafe fn record(root: &raw::ArrowSchema, field: &Field) {
    let mut fingerprint = Vec::new();
    // SAFETY: forwarded from the caller.
    if !unsafe { write(root, &mut fingerprint) } {
        return;
    }
    let _ = ENTRIES_OF_THREAD.try_with(|entries| {
        let Ok(mut entries) = entries.try_borrow_mut() else {
            return;
        };
        if entries.len() == ENTRIES {
            entries.remove(0);
        }
        entries.push(Entry {
            fingerprint,
            field: field.clone(),
        });
    });
}

/// Appends the fingerprint of `node`'s tree; false when it grows past
/// [`MAX_FINGERPRINT`].
///
/// # Safety
/// As for [`record`].
unsafe fn write(node: &raw::ArrowSchema, out: &mut Vec<u8>) -> bool {
    // SAFETY: an imported node: live, with a valid format string.
    out.extend_from_slice(unsafe { CStr::from_ptr(node.format) }.to_bytes_with_nul());
    if node.name.is_null() {
        out.push(0);
    } else {
        out.push(1);
        // SAFETY: an imported node's non-NULL name is a valid string.
        out.extend_from_slice(unsafe { CStr::from_ptr(node.name) }.to_bytes_with_nul());
    }
    out.extend_from_slice(&node.flags.to_le_bytes());
    if node.metadata.is_null() {
        out.push(0);
    } else {
        out.push(1);
        // SAFETY: imported metadata: a valid encoding.
        out.extend_from_slice(unsafe { metadata_bytes(node.metadata) });
    }
    out.extend_from_slice(&node.n_children.to_le_bytes());
    out.push(u8::from(!node.dictionary.is_null()));
    if out.len() > MAX_FINGERPRINT {
        return false;
    }
    for index in 0..usize::try_from(node.n_children).unwrap_or(0) {
        // SAFETY: an imported node's children are valid structs.
        if !unsafe { write(&**node.children.add(index), out) } {
            return false;
        }
    }
    // SAFETY: as above, for the dictionary.
    match unsafe { node.dictionary.as_ref() } {
        Some(dictionary) => unsafe { write(dictionary, out) },
        None => true,
    }
}

/// The whole encoding of a valid metadata blob.
///
/// # Safety
/// `metadata` is a valid encoding (spec: "ArrowSchema.metadata").
unsafe fn metadata_bytes<'a>(metadata: *const c_char) -> &'a [u8] {
    let start = metadata.cast::<u8>();
    let mut at = 0usize;
    // SAFETY: a valid encoding: an int32 count, then that many pairs of
    // length-prefixed strings.
    unsafe {
        let read = |at: usize| start.add(at).cast::<i32>().read_unaligned() as usize;
        let pairs = read(0);
        at += 4;
        for _ in 0..pairs * 2 {
            at += 4 + read(at);
        }
        std::slice::from_raw_parts(start, at)
    }
}

/// Whether `node`'s tree reads as `fingerprint` begins, consuming what it
/// matched. Reads each member only after everything before it matched, so
/// no more than an import would read.
///
/// # Safety
/// As for [`recall`].
unsafe fn same(node: &raw::ArrowSchema, fingerprint: &mut &[u8]) -> bool {
    if node.release.is_none() || node.format.is_null() {
        return false;
    }
    // SAFETY: a live node's format is a NUL-terminated string.
    if !unsafe { c_string(node.format, fingerprint) } {
        return false;
    }
    let name_matches = match take_u8(fingerprint) {
        Some(0) => node.name.is_null(),
        // SAFETY: a live node's non-NULL name is a NUL-terminated string.
        Some(1) => !node.name.is_null() && unsafe { c_string(node.name, fingerprint) },
        _ => false,
    };
    if !name_matches || take_i64(fingerprint) != Some(node.flags) {
        return false;
    }
    let metadata_matches = match take_u8(fingerprint) {
        Some(0) => node.metadata.is_null(),
        // SAFETY: non-NULL metadata is an encoding (the producer's promise,
        // as for the import); it is compared piece by piece.
        Some(1) => !node.metadata.is_null() && unsafe { same_metadata(node.metadata, fingerprint) },
        _ => false,
    };
    if !metadata_matches
        || take_i64(fingerprint) != Some(node.n_children)
        || take_u8(fingerprint) != Some(u8::from(!node.dictionary.is_null()))
    {
        return false;
    }
    // A count that matched is one a successful import accepted.
    let n_children = usize::try_from(node.n_children).unwrap_or(0);
    if n_children > 0 && node.children.is_null() {
        return false;
    }
    for index in 0..n_children {
        // SAFETY: a non-NULL children array of `n_children` pointers.
        let child = unsafe { *node.children.add(index) };
        // SAFETY: a non-NULL child points to a struct (spec).
        match unsafe { child.as_ref() } {
            Some(child) if unsafe { same(child, fingerprint) } => {}
            _ => return false,
        }
    }
    // SAFETY: a non-NULL dictionary points to a struct (spec).
    match unsafe { node.dictionary.as_ref() } {
        Some(dictionary) => unsafe { same(dictionary, fingerprint) },
        None => true,
    }
}

/// Whether the C string at `text` is the next NUL-terminated string of
/// `fingerprint` (consumed when it is).
///
/// # Safety
/// `text` is a NUL-terminated string.
unsafe fn c_string(text: *const c_char, fingerprint: &mut &[u8]) -> bool {
    let text = text.cast::<u8>();
    for (i, &expected) in fingerprint.iter().enumerate() {
        // SAFETY: every byte before this one matched a non-NUL byte of the
        // fingerprint, so the string has not ended before `i`.
        let byte = unsafe { *text.add(i) };
        if byte != expected {
            return false;
        }
        if byte == 0 {
            *fingerprint = &fingerprint[i + 1..];
            return true;
        }
    }
    false
}

/// Whether the metadata encoding at `metadata` is the next one of
/// `fingerprint`, compared one int32 or string at a time.
///
/// # Safety
/// `metadata` is readable as far as it matches a valid encoding.
unsafe fn same_metadata(metadata: *const c_char, fingerprint: &mut &[u8]) -> bool {
    let start = metadata.cast::<u8>();
    let mut at = 0usize;
    // Compares the next `n` bytes; the fingerprint is a valid encoding, so
    // reading them is reading no further than that encoding goes.
    let mut next = |n: usize, fingerprint: &mut &[u8]| -> Option<usize> {
        let expected = take(fingerprint, n)?;
        // SAFETY: the bytes up to `at` matched a valid encoding, which
        // continues for `n` more bytes here.
        let actual = unsafe { std::slice::from_raw_parts(start.add(at), n) };
        at += n;
        (actual == expected).then_some(at)
    };
    let Some(_) = next(4, fingerprint) else {
        return false;
    };
    // The count just matched the fingerprint's, which is a valid count.
    // SAFETY: 4 readable bytes at the start.
    let pairs = unsafe { start.cast::<i32>().read_unaligned() } as usize;
    for _ in 0..pairs * 2 {
        let Some(end) = next(4, fingerprint) else {
            return false;
        };
        // SAFETY: the 4 bytes before `end` matched a valid length.
        let length = unsafe { start.add(end - 4).cast::<i32>().read_unaligned() } as usize;
        if next(length, fingerprint).is_none() {
            return false;
        }
    }
    true
}

fn take_u8(fingerprint: &mut &[u8]) -> Option<u8> {
    let (&first, rest) = fingerprint.split_first()?;
    *fingerprint = rest;
    Some(first)
}

fn take_i64(fingerprint: &mut &[u8]) -> Option<i64> {
    let (bytes, rest) = fingerprint.split_first_chunk::<8>()?;
    *fingerprint = rest;
    Some(i64::from_le_bytes(*bytes))
}

/// The next `n` bytes of `fingerprint`, consumed; `None` when it is shorter.
fn take<'f>(fingerprint: &mut &'f [u8], n: usize) -> Option<&'f [u8]> {
    if fingerprint.len() < n {
        return None;
    }
    let (head, rest) = fingerprint.split_at(n);
    *fingerprint = rest;
    Some(head)
}

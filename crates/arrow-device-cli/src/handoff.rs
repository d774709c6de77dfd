//! The hand-off to C: the exported structs go to `ad_cli_passthrough`
//! (`c/passthrough.c`, compiled against `arrow_device.h` by build.rs), which
//! walks them the way any C consumer would and moves them into fresh structs.
//!
//! This is the interface's whole point: after the call, the data is owned by
//! structs that only C code has written, and importing them back proves the
//! exporter's output is self-describing and movable (spec, "Moving an array").

use std::ffi::{c_char, c_int, CStr};

use arrow_device::abi::{raw, ArrowDeviceArray, FFI_ArrowSchema};

/// What the C walk counted in one array tree. Mirrors `struct ad_cli_counts`
/// in `c/passthrough.c` field for field.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct HandoffCounts {
    /// Array nodes, dictionaries included.
    pub nodes: i64,
    /// Buffer slots (`n_buffers` summed over the nodes).
    pub buffers: i64,
    /// Buffer slots holding NULL.
    pub null_buffers: i64,
    /// Dictionary-encoded nodes.
    pub dictionaries: i64,
    /// Depth of the deepest node, the root being 1.
    pub max_depth: i64,
    /// Offset buffers the C code read on the host (CPU arrays only).
    pub host_checked: i64,
}

impl HandoffCounts {
    /// Adds `other`'s counts (the maximum for `max_depth`).
    pub fn accumulate(&mut self, other: &HandoffCounts) {
        self.nodes += other.nodes;
        self.buffers += other.buffers;
        self.null_buffers += other.null_buffers;
        self.dictionaries += other.dictionaries;
        self.max_depth = self.max_depth.max(other.max_depth);
        self.host_checked += other.host_checked;
    }
}

extern "C" {
    fn ad_cli_passthrough(
        array_in: *mut ArrowDeviceArray,
        schema_in: *mut FFI_ArrowSchema,
        array_out: *mut ArrowDeviceArray,
        schema_out: *mut FFI_ArrowSchema,
        counts: *mut HandoffCounts,
        err: *mut c_char,
        err_len: usize,
    ) -> c_int;
}

/// Hands `array` and `schema` to the C code and returns the structs it moved
/// them into, with what it counted. On a rejection, the message names the node
/// and both inputs are released here.
pub fn pass_through(
    mut array: ArrowDeviceArray,
    mut schema: FFI_ArrowSchema,
) -> Result<(ArrowDeviceArray, FFI_ArrowSchema, HandoffCounts), String> {
    let mut array_out = ArrowDeviceArray::empty();
    let mut schema_out = FFI_ArrowSchema::empty();
    let mut counts = HandoffCounts::default();
    let mut err = [0 as c_char; 1024];
    // SAFETY: all pointers are to live, initialized locals; `err` is writable
    // for its length. The C function moves the inputs only when it returns 0
    // and never unwinds.
    let rc = unsafe {
        ad_cli_passthrough(
            &mut array,
            &mut schema,
            &mut array_out,
            &mut schema_out,
            &mut counts,
            err.as_mut_ptr(),
            err.len(),
        )
    };
    if rc != 0 {
        // SAFETY: the C code NUL-terminates `err` (snprintf), and zeroed it
        // first, so it is a C string within the array.
        let message = unsafe { CStr::from_ptr(err.as_ptr()) }
            .to_string_lossy()
            .into_owned();
        return Err(format!(
            "C consumer rejected the array (errno {rc}): {message}"
        ));
    }
    // The move leaves the sources released; a source still live would be
    // released twice (once here, once through the copy), so check.
    if !array.is_released() || raw::schema(&schema).release.is_some() {
        std::mem::forget(array);
        std::mem::forget(schema);
        return Err(
            "C consumer returned 0 but did not mark the moved-from structs released".into(),
        );
    }
    Ok((array_out, schema_out, counts))
}

// The one hand-written producer of malformed trees of the Rust suites, and
// its release counters, from arrow-device's integration tests.
#[cfg(test)]
#[allow(dead_code)]
#[path = "../../arrow-device/tests/common/producer.rs"]
mod producer;
#[cfg(test)]
#[allow(dead_code)]
#[path = "../../arrow-device/tests/common/release.rs"]
mod release;

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    use arrow_array::{ArrayRef, Int32Array, RecordBatch, StringArray};

    use super::producer::{bitmap, i32s, ArrayNode, Built, Case, SchemaNode};

    fn batch() -> RecordBatch {
        RecordBatch::try_from_iter([
            (
                "i",
                Arc::new(Int32Array::from(vec![Some(1), None, Some(3)])) as ArrayRef,
            ),
            (
                "s",
                Arc::new(StringArray::from(vec!["a", "bc", "def"])) as ArrayRef,
            ),
        ])
        .unwrap()
    }

    #[test]
    fn pass_through_moves_the_structs_and_counts_the_tree() {
        let batch = batch();
        let (array, schema) = arrow_device::export_record_batch(&batch).unwrap();
        let (array, schema, counts) = pass_through(array, schema).unwrap();
        // Root struct (1 buffer), int32 (2), utf8 (3); the utf8 offsets are
        // readable on the CPU.
        assert_eq!(counts.nodes, 3);
        assert_eq!(counts.buffers, 6);
        assert_eq!(counts.max_depth, 2);
        assert_eq!(counts.dictionaries, 0);
        assert_eq!(counts.host_checked, 1);
        let imported =
            // SAFETY: the structs come from this crate's exporter (or a test producer), which follow the interface.
            unsafe { arrow_device::DeviceArray::try_new(array, schema, arrow_device::ValidationLevel::Full) }
                .unwrap();
        assert_eq!(imported.to_record_batch().unwrap(), batch);
    }

    #[test]
    fn nonzero_reserved_bytes_are_rejected_and_nothing_moves() {
        let (mut array, schema) = arrow_device::export_record_batch(&batch()).unwrap();
        array.reserved[1] = 7;
        let err = pass_through(array, schema).unwrap_err();
        assert_eq!(
            err,
            "C consumer rejected the array (errno 22): array: reserved[1] is 7, expected 0"
        );
    }

    #[test]
    fn a_buffer_count_that_contradicts_the_format_names_the_field() {
        // struct<i: int32, s: utf8> whose utf8 child has no data buffer.
        let case = Case::new(
            ArrayNode::new(3, 0, vec![None]).with_children(vec![
                ArrayNode::new(3, 1, vec![bitmap(&[true, false, true]), i32s(&[1, 0, 3])]),
                ArrayNode::new(3, 0, vec![None, i32s(&[0, 1, 3, 6])]),
            ]),
            SchemaNode::new("+s", "")
                .with_children(vec![SchemaNode::new("i", "i"), SchemaNode::new("u", "s")]),
        );
        let Built {
            array: mut array_in,
            schema: mut schema_in,
            counters,
        } = case.build();
        let mut out = ArrowDeviceArray::empty();
        let mut schema_out = FFI_ArrowSchema::empty();
        let mut err = [0 as c_char; 256];
        // SAFETY: as in `pass_through`.
        let rc = unsafe {
            ad_cli_passthrough(
                &mut array_in,
                &mut schema_in,
                &mut out,
                &mut schema_out,
                std::ptr::null_mut(),
                err.as_mut_ptr(),
                err.len(),
            )
        };
        assert_eq!(rc, libc_einval());
        // SAFETY: NUL-terminated by the C code.
        let message = unsafe { CStr::from_ptr(err.as_ptr()) }
            .to_string_lossy()
            .into_owned();
        assert_eq!(
            message,
            r#"field "s": format "u" has 3 buffers, found n_buffers 2"#
        );
        assert!(
            !array_in.is_released(),
            "a rejected array must not be moved"
        );
        assert!(out.is_released());
        assert_eq!(
            (counters.array_releases(), counters.schema_releases()),
            (0, 0),
            "the C consumer released nothing it rejected"
        );
        drop((array_in, schema_in));
        assert_eq!(
            (counters.array_releases(), counters.schema_releases()),
            (1, 1),
            "the owner released both roots, once"
        );
    }

    fn libc_einval() -> c_int {
        22 // EINVAL on Linux and macOS
    }
}

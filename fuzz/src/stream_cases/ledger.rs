//! The ledger of release counters: every schema and array a stream
//! producer builds is counted ([`crate::release::Counters`]), and must be
//! released exactly once by the end of the run, whoever ends up owning it.

use std::ffi::c_void;
use std::sync::Arc;

use arrow_device::abi::{ArrowDeviceArray, DeviceType, FFI_ArrowSchema};
use arrow_device::export_array;

use super::arrays::{inert_array, ArrayDesc, Expected};
use super::kinds::{fixed_data, KINDS};
use crate::producer::{ArrayNode, Case as TreeCase, SchemaNode};
use crate::release::{counting, Counters};

/// Every release counter of the structs a producer built, and what it
/// should read at the end.
#[derive(Default)]
pub(crate) struct Ledger {
    entries: Vec<(String, Arc<Counters>, usize, usize)>,
}

impl Ledger {
    /// An array (and the schema that came with it, dropped by the
    /// producer): each released once.
    pub(crate) fn array(&mut self, what: String, counters: Arc<Counters>) {
        self.entries.push((what, counters, 1, 1));
    }

    /// A schema alone.
    pub(crate) fn schema(&mut self, what: String, counters: Arc<Counters>) {
        self.entries.push((what, counters, 0, 1));
    }

    /// Panics naming every struct not released exactly once.
    pub(crate) fn check(&self) {
        let wrong: Vec<String> = self
            .entries
            .iter()
            .filter_map(|(what, c, arrays, schemas)| {
                let found = (c.array_releases(), c.schema_releases());
                (found != (*arrays, *schemas)).then(|| {
                    format!(
                        "{what}: array released {} times (expected {arrays}), schema {} times (expected {schemas})",
                        found.0, found.1
                    )
                })
            })
            .collect();
        assert!(
            wrong.is_empty(),
            "leaked or double-released: {}",
            wrong.join("; ")
        );
    }

    /// Builds `desc` for a stream of `kind` / `shape` on `stream_type`:
    /// the array and what its consumer must find in it.
    pub(crate) fn build_array(
        &mut self,
        what: String,
        desc: &ArrayDesc,
        kind: u8,
        shape: &SchemaNode,
        stream_type: DeviceType,
    ) -> (ArrowDeviceArray, Expected) {
        match desc {
            ArrayDesc::Data {
                kind_delta,
                rows,
                seed,
                label,
            } => {
                let data = fixed_data((kind + kind_delta % KINDS) % KINDS, *rows, *seed);
                let (array, schema) = export_array(&data).expect("fixed kinds export");
                let (mut array, schema, counters) = counting(array, schema);
                drop(schema);
                self.array(what, counters);
                label.apply(&mut array, stream_type);
                (array, Expected::Data(data))
            }
            ArrayDesc::Inert { perturb, label } => {
                let built =
                    TreeCase::new(inert_array(shape, *perturb), SchemaNode::new("n", "")).build();
                drop(built.schema);
                self.array(what, built.counters);
                let mut array = built.array;
                label.apply(&mut array, stream_type);
                (array, Expected::Empty)
            }
        }
    }

    /// A schema built from `node`.
    pub(crate) fn build_schema(&mut self, what: String, node: &SchemaNode) -> FFI_ArrowSchema {
        let built = node.build();
        self.schema(what, built.counters);
        built.schema
    }

    /// The end marker as a released tree whose other fields are garbage:
    /// a consumer must look at nothing but `release`.
    pub(crate) fn garbage_end(&mut self, what: String) -> ArrowDeviceArray {
        let mut node = ArrayNode::new(3, 1, vec![Some(vec![1; 8]), Some(vec![2; 24])]);
        node.released = true;
        let built = TreeCase::new(node, SchemaNode::new("i", "")).build();
        drop(built.schema);
        self.array(what, built.counters);
        let mut array = built.array;
        array.device_type = DeviceType::EXT_DEV;
        array.device_id = 77;
        array.sync_event = 0x10 as *mut c_void;
        array.reserved = [-1; 3];
        array
    }
}

//! The arrays a stream producer hands over ([`ArrayDesc`]): data of a
//! fixed kind, or a length-0 "inert" array shaped after any schema; the
//! device label written on each; and what a consumer must find in it
//! ([`Expected`]).
//!
//! ```text
//! data     := kind_delta:u8 (% 5, 0 = the stream's kind) rows:u8 (% 5)
//!             seed:u32 Label
//! inert    := perturb:u8 Label  (length 0, zeroed buffers)
//! Label    := bits:u8 [Device when bits & 3 == 1] [raw:i32 when bits & 3
//!             == 2] [device_id:i8 when bit 3]; bit 2: non-NULL sync_event
//! ```

use std::ptr;

use arrow_array::{Array, ArrayRef, StructArray};
use arrow_device::abi::{ArrowDeviceArray, DeviceType};
use arrow_device::DeviceArray;

use super::{decode_device, DeviceChoice};
use crate::input::{Encoder, Input};
use crate::producer::{ArrayNode, SchemaNode};

/// How many buffers an array of `format` has (views without variadic
/// buffers); 2 for formats nothing knows.
fn buffers_for(format: &[u8]) -> usize {
    match format {
        b"n" | b"+r" => 0,
        b"+s" => 1,
        b"u" | b"U" | b"z" | b"Z" | b"vu" | b"vz" | b"+vl" | b"+vL" => 3,
        f if f.starts_with(b"+w:") || f.starts_with(b"+us:") => 1,
        _ => 2,
    }
}

/// Bytes of every buffer of an inert array: zeros, more than any length-0
/// array of any type reads (an offset, the sizes of a few variadic
/// buffers).
const INERT_BUFFER: usize = 64;

/// A length-0 array shaped after `schema`, every buffer zeroed: safe to
/// read under any type whose shape (buffer and child counts) the importer
/// checks, which is what makes it a fair array to send with any schema.
fn inert_node(schema: &SchemaNode) -> ArrayNode {
    let n_buffers = schema.format.as_deref().map_or(2, buffers_for);
    let mut node = ArrayNode::new(0, 0, vec![Some(vec![0; INERT_BUFFER]); n_buffers]);
    node.children = schema.children.iter().map(inert_node).collect();
    node.dictionary = schema.dictionary.as_ref().map(|d| Box::new(inert_node(d)));
    node
}

/// [`inert_node`] with its root's shape changed by the bits of `perturb`.
pub(crate) fn inert_array(schema: &SchemaNode, perturb: u8) -> ArrayNode {
    let mut node = inert_node(schema);
    let zeros = || Some(vec![0u8; INERT_BUFFER]);
    if perturb & 1 != 0 {
        node.buffers.push(zeros());
    }
    if perturb & 2 != 0 {
        node.buffers.pop();
    }
    if perturb & 4 != 0 {
        node.children
            .push(ArrayNode::new(0, 0, vec![zeros(), zeros()]));
    }
    if perturb & 8 != 0 {
        node.children.pop();
    }
    if perturb & 16 != 0 {
        node.dictionary = match node.dictionary {
            Some(_) => None,
            None => Some(Box::new(ArrayNode::new(0, 0, vec![zeros(), zeros()]))),
        };
    }
    if perturb & 32 != 0 {
        if let Some(child) = node.children.first_mut() {
            child.released = true;
        }
    }
    if perturb & 64 != 0 {
        if let Some(validity) = node.buffers.first_mut() {
            *validity = None; // allowed: null_count is not > 0
        }
    }
    if perturb & 128 != 0 {
        node.null_count = -1;
    }
    node
}

/// Where an array says it lives, relative to its stream.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Label {
    /// bits 0-1: 0 or 3 the stream's type, 1 `device`, 2 `raw`; bit 2 a
    /// non-NULL sync_event; bit 3 `device_id`.
    pub bits: u8,
    pub device: DeviceChoice,
    pub raw: i32,
    pub device_id: i8,
}

impl Label {
    /// The stream's device type, no event.
    pub(crate) const SAME: Label = Label {
        bits: 0,
        device: DeviceChoice::CPU,
        raw: 0,
        device_id: 0,
    };

    pub(crate) fn on(device: DeviceChoice) -> Label {
        Label {
            bits: 1,
            device,
            ..Label::SAME
        }
    }

    pub(crate) fn decode(input: &mut Input) -> Label {
        let bits = input.u8();
        let device = if bits & 3 == 1 {
            decode_device(input)
        } else {
            DeviceChoice::CPU
        };
        let raw = if bits & 3 == 2 { input.i32() } else { 0 };
        let device_id = if bits & 8 != 0 { input.u8() as i8 } else { 0 };
        Label {
            bits,
            device,
            raw,
            device_id,
        }
    }

    pub(crate) fn encode(&self, e: &mut Encoder) {
        e.u8(self.bits);
        if self.bits & 3 == 1 {
            self.device.encode(e);
        }
        if self.bits & 3 == 2 {
            e.i32(self.raw);
        }
        if self.bits & 8 != 0 {
            e.u8(self.device_id as u8);
        }
    }

    /// Writes the label on an array of a stream on `stream_type`.
    pub(crate) fn apply(&self, array: &mut ArrowDeviceArray, stream_type: DeviceType) {
        array.device_type = match self.bits & 3 {
            1 => self.device.device_type(),
            2 => DeviceType(self.raw),
            _ => stream_type,
        };
        if array.device_type != DeviceType::CPU {
            array.device_id = 0;
        }
        if self.bits & 8 != 0 {
            array.device_id = i64::from(self.device_id);
        }
        if self.bits & 4 != 0 {
            array.sync_event = ptr::addr_of!(NOT_AN_EVENT).cast_mut().cast();
        }
    }

    /// Whether the label keeps the stream's device type and no event.
    pub(crate) fn is_plain(&self) -> bool {
        self.bits & 3 != 1 && self.bits & 3 != 2 && self.bits & 4 == 0
    }
}

/// What a labelled `sync_event` points to: a consumer may only look it up
/// (the emulated device's registry), or refuse it, never wait on it.
static NOT_AN_EVENT: u64 = 0;

/// An array a producer hands over, as the input describes it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum ArrayDesc {
    /// `fixed_data(stream kind + kind_delta, rows, seed)`, exported.
    Data {
        kind_delta: u8,
        rows: u8,
        seed: u32,
        label: Label,
    },
    /// [`inert_array`] of the stream's schema.
    Inert { perturb: u8, label: Label },
}

impl ArrayDesc {
    pub(crate) fn data(rows: u8, seed: u32) -> ArrayDesc {
        ArrayDesc::Data {
            kind_delta: 0,
            rows,
            seed,
            label: Label::SAME,
        }
    }

    pub(crate) fn decode_data(input: &mut Input) -> ArrayDesc {
        ArrayDesc::Data {
            kind_delta: input.u8(),
            rows: input.u8(),
            seed: input.u32(),
            label: Label::decode(input),
        }
    }

    pub(crate) fn decode_inert(input: &mut Input) -> ArrayDesc {
        ArrayDesc::Inert {
            perturb: input.u8(),
            label: Label::decode(input),
        }
    }

    /// Writes the fields after the tag.
    pub(crate) fn encode(&self, e: &mut Encoder) {
        match self {
            ArrayDesc::Data {
                kind_delta,
                rows,
                seed,
                label,
            } => {
                e.u8(*kind_delta).u8(*rows).u32(*seed);
                label.encode(e);
            }
            ArrayDesc::Inert { perturb, label } => {
                e.u8(*perturb);
                label.encode(e);
            }
        }
    }

    /// The same array, made one that arrow-rs' unchecked import reads
    /// safely: data of the stream's kind, its label kept (the bridge
    /// refuses other devices and events before arrow-rs sees them).
    pub(crate) fn for_arrow_rs(&self) -> ArrayDesc {
        match self {
            ArrayDesc::Data {
                rows, seed, label, ..
            } => ArrayDesc::Data {
                kind_delta: 0,
                rows: *rows,
                seed: *seed,
                label: label.clone(),
            },
            ArrayDesc::Inert { perturb, label } => ArrayDesc::Data {
                kind_delta: 0,
                rows: 1,
                seed: u32::from(*perturb),
                label: label.clone(),
            },
        }
    }

    /// The same array, made one that is safe under any schema: inert.
    pub(crate) fn inert(&self) -> ArrayDesc {
        match self {
            ArrayDesc::Data { rows, label, .. } => ArrayDesc::Inert {
                perturb: *rows,
                label: label.clone(),
            },
            inert => inert.clone(),
        }
    }
}

/// What a consumer must find in a yielded array.
#[derive(Debug, Clone)]
pub(crate) enum Expected {
    Data(ArrayRef),
    /// An inert array: no rows.
    Empty,
}

impl Expected {
    /// Why `found` (the consumer's host copy) is not what was sent, if it
    /// is not.
    fn mismatch(&self, found: &dyn Array) -> Option<String> {
        match self {
            Expected::Empty => (!found.is_empty()).then(|| {
                format!(
                    "an inert (length 0) array came out with {} rows",
                    found.len()
                )
            }),
            Expected::Data(sent) => (!same_values(found, sent.as_ref()))
                .then(|| format!("a batch came out changed: sent {sent:?}, received {found:?}")),
        }
    }

    /// Panics, naming `what` read it, if `found` is not what was sent.
    pub(crate) fn check(&self, found: &dyn Array, what: &str) {
        if let Some(why) = self.mismatch(found) {
            panic!("{what}: {why}");
        }
    }
}

/// Whether two arrays hold the same values; struct columns are compared one
/// by one, so that a renamed schema (names are not in the array) matches.
fn same_values(found: &dyn Array, sent: &dyn Array) -> bool {
    if found.len() != sent.len() || found.null_count() != sent.null_count() {
        return false;
    }
    match (
        found.as_any().downcast_ref::<StructArray>(),
        sent.as_any().downcast_ref::<StructArray>(),
    ) {
        (Some(found), Some(sent)) => {
            found.num_columns() == sent.num_columns()
                && found
                    .columns()
                    .iter()
                    .zip(sent.columns())
                    .all(|(f, s)| f.to_data() == s.to_data())
        }
        _ => found.to_data() == sent.to_data(),
    }
}

/// Once the stream is gone, every array a consumer yielded must still read
/// what was sent (arrays own their memory, not the stream); `what` names
/// the moment in the message.
pub(crate) fn check_after_release(yielded: &[(DeviceArray, Expected)], what: &str) {
    for (array, expected) in yielded {
        if let Ok(host) = array.to_host() {
            expected.check(host.as_ref(), what);
        }
    }
}

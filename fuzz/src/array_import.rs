//! Target 1, array import: a schema and array tree built from the input,
//! imported at every validation level, on the CPU or on the emulated device
//! in strict mode.
//!
//! Input layout ([`crate::input`]):
//!
//! * a header byte: bit 0 places the buffers on the emulated device
//!   (`EXT_DEV` 0, strict: device pointers fault on a host read), bit 1
//!   (device only) leaves buffers as short as the input made them instead of
//!   backing what they claim;
//! * the root node: a tag byte; tag 0 is an explicit node (format, name,
//!   metadata, flags, length, null count, offset, buffers, children,
//!   dictionary, released flags: see `explicit`), any other tag a valid
//!   array of [`crate::gen`] read back from its exported structs;
//! * up to 8 mutations (see `mutate`), each aimed at a node by a path of
//!   child indices: lengths, offsets, null counts, buffer bytes, NULL or cut
//!   buffers, buffers and children added or dropped, another format, flags,
//!   metadata, nodes handed over released.
//!
//! Unless bit 1 says otherwise, every buffer is then backed by the bytes
//! its node's type claims ([`tree::back_claims`]): on the CPU a consumer may
//! read all of that, so a read past it is the library's bug and a crash is
//! a finding. On the emulated device, cut buffers are fair game: every
//! device read is checked against the allocation.
//!
//! Oracles: no crash or sanitizer report; the array and the schema are each
//! released exactly once whatever the outcome; the levels are monotonic (an
//! array accepted at a level is accepted at every lower one); whatever
//! imports converts to arrow-rs data (or fails cleanly) that arrow-rs'
//! `validate_full` can read; what a CPU import accepts at `full` converts,
//! validates, and comes back equal through a re-export and a copy to the
//! emulated device and back.

use std::sync::{Arc, Once};
use std::time::Duration;

use arrow_array::{Array, ArrayRef};
use arrow_device::abi::DeviceType;
use arrow_device::device::emulated::{EmulatedConfig, EmulatedDevice};
use arrow_device::device::{DeviceBuffer, DeviceRef};
use arrow_device::schema::import_field;
use arrow_device::{export_array, DeviceArray, ValidationLevel};

use crate::input::{Encoder, Input};
use crate::producer::{ArrayNode, Built, Case, Placed, SchemaNode};
use crate::tree;

const LEVELS: [ValidationLevel; 4] = [
    ValidationLevel::None,
    ValidationLevel::Minimal,
    ValidationLevel::Default,
    ValidationLevel::Full,
];

/// Nesting the decoder builds at most; deeper explicit children are not
/// read (the library's own limit, 64, is reached through mutations of
/// generated trees and the schema target).
const MAX_DEPTH: usize = 6;

pub fn run(data: &[u8]) {
    let mut input = Input::new(data);
    let header = input.u8();
    let on_device = header & 1 == 1;
    let cut = on_device && header & 2 == 2;
    let (mut array, mut schema) = node(&mut input, 0);
    let mutations = input.below(9);
    for _ in 0..mutations {
        mutate(&mut input, &mut array, &mut schema);
    }
    // Metadata is read as far as it claims, on every device.
    tree::back_schema(&mut schema);
    if !cut {
        // The schema's type decides what the buffers claim; a schema that
        // does not import is rejected before any buffer is read.
        let built = schema.build();
        if let Ok(field) = import_field(&built.schema) {
            tree::back_claims(field.data_type(), &mut array);
        }
    }
    if crate::debug() {
        eprintln!(
            "on_device {on_device}, cut {cut}\n{}",
            tree::describe(&array, &schema)
        );
    }
    check(&Case::new(array, schema), on_device);
}

/// Imports `case` at every level and checks the oracles.
pub fn check(case: &Case, on_device: bool) {
    let mut accepted = Vec::new();
    // On the device, one allocation per buffer serves the builds of every
    // level (each build is a new tree of structs over the same memory).
    let mut placer = on_device.then(|| DevicePlacer::new(emulated()));
    for level in LEVELS {
        let built = match &mut placer {
            Some(placer) => {
                let mut built = placer.build(case);
                built.array.device_type = DeviceType::EXT_DEV;
                built.array.device_id = 0;
                built
            }
            None => case.build(),
        };
        let counters = built.counters.clone();
        // SAFETY: the producer's trees are memory-safe by the spec (every
        // buffer holds what it claims, or lives on the emulated device whose
        // reads are checked); everything else in them is for the importer
        // to reject.
        let imported = unsafe { DeviceArray::try_new(built.array, built.schema, level) };
        if let Ok(array) = &imported {
            use_imported(array, level, on_device);
        }
        accepted.push(imported.is_ok());
        drop(imported);
        assert_eq!(
            (counters.array_releases(), counters.schema_releases()),
            (1, 1),
            "level {level:?}: the array and the schema are each released once"
        );
    }
    for pair in accepted.windows(2) {
        assert!(
            pair[0] || !pair[1],
            "levels are monotonic: {accepted:?} for {LEVELS:?}"
        );
    }
}

/// What a consumer does with an imported array.
fn use_imported(array: &DeviceArray, level: ValidationLevel, on_device: bool) {
    let _ = (array.len(), array.null_count(), array.buffers());
    for child in array.children() {
        let _ = child.buffers();
    }
    let host = array.to_host();
    if level == ValidationLevel::Full && !on_device {
        let host = host.unwrap_or_else(|e| panic!("accepted at full, to_host fails: {e}"));
        host.to_data()
            .validate_full()
            .unwrap_or_else(|e| panic!("accepted at full, arrow-rs rejects it: {e}"));
        round_trip(&host);
        return;
    }
    if let Ok(host) = host {
        // Structure is checked at every level: arrow-rs may read every
        // value of the buffers the library sized without going past them.
        if host.to_data().validate_full().is_ok() && on_device {
            let device = emulated();
            if let Ok(copy) = array.to_device(&device) {
                let back = copy.to_host().expect("a valid device copy comes back");
                assert_same(&host, &back, "device copy");
            }
        }
    }
}

/// A valid host array comes back equal through a re-export and through the
/// emulated device.
pub fn round_trip(host: &ArrayRef) {
    let (c_array, c_schema) = export_array(host.as_ref()).expect("a valid array exports");
    // SAFETY: the crate's own exporter.
    let again = unsafe { DeviceArray::try_new(c_array, c_schema, ValidationLevel::Full) }
        .unwrap_or_else(|e| panic!("re-export is rejected: {e}"));
    assert_same(
        host,
        &again.to_host().expect("re-import converts"),
        "re-export",
    );
    let on_device = DeviceArray::from_array(host.as_ref())
        .to_device(&emulated())
        .unwrap_or_else(|e| panic!("copy to the emulated device: {e}"));
    let back = on_device.to_host().expect("copy back to the host");
    assert_same(host, &back, "emulated device copy");
}

/// Equal as arrow-rs compares arrays (logically: offsets, slicing and
/// unused bytes may differ).
pub fn assert_same(expected: &ArrayRef, actual: &ArrayRef, what: &str) {
    let (e, a) = (expected.to_data(), actual.to_data());
    assert!(
        e == a,
        "{what}: the array changed:\nexpected {expected:?}\nactual   {actual:?}"
    );
}

/// The process-wide emulated device 0, strict and without delay (a delay
/// tests sync rules, which the stream targets cover; here it would only
/// slow the campaign down).
pub fn emulated() -> DeviceRef {
    static CONFIGURE: Once = Once::new();
    CONFIGURE.call_once(|| {
        EmulatedDevice::set_global_config(EmulatedConfig {
            strict: true,
            delay: Duration::ZERO,
        })
    });
    EmulatedDevice::global(0).expect("emulated device 0 exists")
}

/// Places a case's buffers in emulated device memory, each its own
/// allocation of exactly its size, once for all the builds of the case.
struct DevicePlacer {
    device: DeviceRef,
    placed: Vec<Arc<DeviceBuffer>>,
}

impl DevicePlacer {
    fn new(device: DeviceRef) -> Self {
        DevicePlacer {
            device,
            placed: Vec::new(),
        }
    }

    /// Builds `case` over the device memory, copying the buffers there on
    /// the first build (a build visits them in the same order every time).
    fn build(&mut self, case: &Case) -> Built {
        let first = self.placed.is_empty();
        let stream = self.device.create_stream().expect("an emulated stream");
        let mut next = 0;
        let built = case.build_with(&mut |bytes: &[u8]| {
            if next == self.placed.len() {
                let buffer = self
                    .device
                    .allocate(bytes.len())
                    .expect("emulated memory for a buffer");
                // SAFETY: `bytes` (the case's) outlives the synchronize
                // below; the destination is a fresh allocation of its size.
                unsafe {
                    self.device.copy_from_host(
                        bytes.as_ptr(),
                        buffer.as_ptr(),
                        bytes.len(),
                        &stream,
                    )
                }
                .expect("a copy into a fresh allocation");
                self.placed.push(Arc::new(buffer));
            }
            let buffer = self.placed[next].clone();
            next += 1;
            Placed {
                ptr: buffer.as_ptr().cast_const().cast(),
                keep: Box::new(buffer),
            }
        });
        if first {
            self.device
                .synchronize_stream(&stream)
                .expect("the copies complete");
        }
        built
    }
}

// ------------------------------------------------------------------ decoding

/// One node of both trees.
fn node(input: &mut Input, depth: usize) -> (ArrayNode, SchemaNode) {
    if input.u8() == 0 {
        explicit(input, depth)
    } else {
        generated(input, depth)
    }
}

/// A valid array of [`crate::gen`], as its exporter writes it.
fn generated(input: &mut Input, depth: usize) -> (ArrayNode, SchemaNode) {
    let array = crate::gen::array(input, depth.min(crate::gen::MAX_DEPTH));
    nodes_of(&array)
}

/// The nodes of a valid array, read back from the crate's exporter.
pub fn nodes_of(array: &dyn Array) -> (ArrayNode, SchemaNode) {
    let (c_array, c_schema) = export_array(array).expect("a valid array exports");
    // SAFETY: the crate's exporter is conforming; the structs are live.
    unsafe {
        (
            tree::array_from_c(array.data_type(), &c_array.array),
            tree::schema_from_c(&c_schema),
        )
    }
}

/// An explicit node: every field from the input.
///
/// `format`, `name` (byte strings; a NUL ends them; `name` empty is NULL
/// when the next flag is set), metadata (a flag, then a byte string), flags
/// (i64), length, null count, offset (i64 each), buffers (a count below 8,
/// then per buffer a flag: present, and its byte string), children (a count
/// below 5, then each a node), a dictionary (a flag, then a node), and a
/// byte whose bits 0 and 1 hand the array and schema node over released.
fn explicit(input: &mut Input, depth: usize) -> (ArrayNode, SchemaNode) {
    let format = c_bytes(input.bytes());
    let name = c_bytes(input.bytes());
    let name = if input.bool() && name.is_empty() {
        None
    } else {
        Some(name)
    };
    let metadata = input.bool().then(|| input.bytes().to_vec());
    let flags = input.i64();
    let length = input.i64();
    let null_count = input.i64();
    let offset = input.i64();
    let n_buffers = input.below(8);
    let buffers = (0..n_buffers)
        .map(|_| input.bool().then(|| input.bytes().to_vec()))
        .collect();
    let mut array = ArrayNode::new(length, null_count, buffers);
    array.offset = offset;
    let mut schema = SchemaNode {
        format: Some(format),
        name,
        metadata,
        flags,
        children: Vec::new(),
        dictionary: None,
        released: false,
    };
    let n_children = input.below(5);
    if depth < MAX_DEPTH {
        for _ in 0..n_children {
            let (a, s) = node(input, depth + 1);
            array.children.push(a);
            schema.children.push(s);
        }
        if input.bool() {
            let (a, s) = node(input, depth + 1);
            array.dictionary = Some(Box::new(a));
            schema.dictionary = Some(Box::new(s));
        }
    }
    let released = input.u8();
    array.released = released & 1 == 1;
    schema.released = released & 2 == 2;
    (array, schema)
}

/// A C string's bytes: up to the first NUL.
fn c_bytes(bytes: &[u8]) -> Vec<u8> {
    bytes.split(|b| *b == 0).next().unwrap_or_default().to_vec()
}

/// Writes what `explicit` reads for the nodes of a tree: how the seeds
/// from real arrays are encoded.
pub fn encode_explicit(out: &mut Encoder, array: &ArrayNode, schema: &SchemaNode) {
    out.u8(0);
    out.bytes(schema.format.as_deref().unwrap_or_default());
    out.bytes(schema.name.as_deref().unwrap_or_default());
    out.bool(schema.name.is_none());
    out.bool(schema.metadata.is_some());
    if let Some(metadata) = &schema.metadata {
        out.bytes(metadata);
    }
    out.i64(schema.flags);
    out.i64(array.length)
        .i64(array.null_count)
        .i64(array.offset);
    out.u8(array.buffers.len() as u8);
    for buffer in &array.buffers {
        out.bool(buffer.is_some());
        if let Some(bytes) = buffer {
            out.bytes(bytes);
        }
    }
    out.u8(array.children.len() as u8);
    for (a, s) in array.children.iter().zip(&schema.children) {
        encode_explicit(out, a, s);
    }
    out.bool(array.dictionary.is_some());
    if let (Some(a), Some(s)) = (&array.dictionary, &schema.dictionary) {
        encode_explicit(out, a, s);
    }
    out.u8(array.released as u8 | (schema.released as u8) << 1);
}

// ------------------------------------------------------------------ mutations

/// One mutation: a kind byte, a path (a depth byte below 4, then per step a
/// byte: a child index modulo the children, or 255 for the dictionary),
/// then the kind's operands.
fn mutate(input: &mut Input, array: &mut ArrayNode, schema: &mut SchemaNode) {
    let kind = input.below(16);
    let path = path(input, array, schema);
    let (a, s) = node_at(array, schema, &path);
    match kind {
        0 => a.length = int(input, a.length),
        1 => a.offset = int(input, a.offset),
        2 => a.null_count = int(input, a.null_count),
        3..=6 => {
            if a.buffers.is_empty() {
                return;
            }
            let i = input.below(a.buffers.len());
            let at = input.u16() as usize;
            let Some(bytes) = &mut a.buffers[i] else {
                return;
            };
            match kind {
                3 => a.buffers[i] = None,
                4 => bytes.truncate(at % (bytes.len() + 1)),
                5 if !bytes.is_empty() => {
                    let len = bytes.len();
                    bytes[at % len] = input.u8();
                }
                6 => {
                    // An int32 or int64 written over slot `at` (offsets,
                    // views, run ends, sizes): the values that size things.
                    let wide = input.bool();
                    let value = int(input, 0);
                    let width = if wide { 8 } else { 4 };
                    let start = (at % (bytes.len() / width).max(1)) * width;
                    if bytes.len() >= start + width {
                        let le = value.to_le_bytes();
                        bytes[start..start + width].copy_from_slice(&le[..width]);
                    }
                }
                _ => {}
            }
        }
        7 => {
            if input.bool() {
                a.buffers.pop();
            } else {
                a.buffers.push(input.bool().then(|| input.bytes().to_vec()));
            }
        }
        8 => {
            if input.bool() {
                a.children.pop();
                if input.bool() {
                    s.children.pop();
                }
            } else if let (Some(ca), Some(cs)) =
                (a.children.first().cloned(), s.children.first().cloned())
            {
                a.children.push(ca);
                s.children.push(cs);
            }
        }
        9 => s.format = Some(c_bytes(input.bytes())),
        10 => a.released = true,
        11 => s.released = true,
        12 => s.flags = int(input, s.flags),
        13 => s.metadata = input.bool().then(|| input.bytes().to_vec()),
        14 => {
            if input.bool() {
                a.dictionary = None;
            } else {
                s.dictionary = None;
            }
        }
        _ => {
            if a.children.len() >= 2 {
                a.children.swap(0, 1);
            }
        }
    }
}

enum Step {
    Child(usize),
    Dictionary,
}

/// A path read from the input (see `mutate`), cut where the trees end or
/// disagree.
fn path(input: &mut Input, array: &ArrayNode, schema: &SchemaNode) -> Vec<Step> {
    let depth = input.below(4);
    let (mut a, mut s) = (array, schema);
    let mut steps = Vec::new();
    for _ in 0..depth {
        let step = input.u8();
        if step == 255 {
            let (Some(da), Some(ds)) = (&a.dictionary, &s.dictionary) else {
                break;
            };
            (a, s) = (da, ds);
            steps.push(Step::Dictionary);
        } else if !a.children.is_empty() && a.children.len() == s.children.len() {
            let i = step as usize % a.children.len();
            (a, s) = (&a.children[i], &s.children[i]);
            steps.push(Step::Child(i));
        } else {
            break;
        }
    }
    steps
}

fn node_at<'a>(
    array: &'a mut ArrayNode,
    schema: &'a mut SchemaNode,
    path: &[Step],
) -> (&'a mut ArrayNode, &'a mut SchemaNode) {
    match path.split_first() {
        None => (array, schema),
        Some((Step::Child(i), rest)) => {
            node_at(&mut array.children[*i], &mut schema.children[*i], rest)
        }
        Some((Step::Dictionary, rest)) => node_at(
            array
                .dictionary
                .as_deref_mut()
                .expect("the path's dictionary"),
            schema
                .dictionary
                .as_deref_mut()
                .expect("the path's dictionary"),
            rest,
        ),
    }
}

/// An integer that sizes something: a byte picks -1, 0, `current` ± 1, an
/// extreme, or the next eight bytes.
fn int(input: &mut Input, current: i64) -> i64 {
    match input.u8() % 10 {
        0 => -1,
        1 => 0,
        2 => current.wrapping_add(1),
        3 => current.wrapping_sub(1),
        4 => i64::MAX,
        5 => i64::MIN,
        6 => 1 << 31,
        7 => (1 << 31) - 1,
        _ => input.i64(),
    }
}

// ------------------------------------------------------------------ seeds

/// Every column of every golden stream (and each batch as a struct), on the
/// CPU and on the device; every case of [`crate::gen`]'s type tags.
pub fn seeds() -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    for (name, array) in crate::seeds::golden_arrays(8) {
        let (a, s) = nodes_of(array.as_ref());
        for (header, place) in [(0u8, "cpu"), (1, "device")] {
            let mut e = Encoder::new();
            e.u8(header);
            encode_explicit(&mut e, &a, &s);
            e.u8(0);
            out.push((format!("golden-{name}-{place}"), e.finish()));
        }
    }
    // The malformed suite's valid cases, whole and with one defect of each
    // mutation kind at the root and at its first child (operands zero:
    // -1 for integers, buffer 0, offset 0).
    for (name, case) in crate::malformed_cases::all() {
        for (header, place) in [(0u8, "cpu"), (1, "device")] {
            for mutation in [None]
                .into_iter()
                .chain((0..16u8).flat_map(|k| [Some((k, 0u8)), Some((k, 1))]))
            {
                let mut e = Encoder::new();
                e.u8(header);
                encode_explicit(&mut e, &case.array, &case.schema);
                let label = match mutation {
                    None => {
                        e.u8(0);
                        String::new()
                    }
                    Some((kind, depth)) => {
                        // One mutation: kind, path (depth, then child 0),
                        // then zero operands.
                        e.u8(1).u8(kind).u8(depth);
                        if depth == 1 {
                            e.u8(0);
                        }
                        e.u64(0).u64(0);
                        format!("-mutation{kind}-depth{depth}")
                    }
                };
                out.push((format!("malformed-{name}-{place}{label}"), e.finish()));
            }
        }
    }
    out.push(("generated-empty-input".into(), Vec::new()));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_explicit_encoding_decodes_to_the_same_nodes() {
        let array: ArrayRef = Arc::new(arrow_array::StringArray::from(vec![Some("ab"), None]));
        let (a, s) = nodes_of(array.as_ref());
        let mut e = Encoder::new();
        encode_explicit(&mut e, &a, &s);
        let data = e.finish();
        let (a2, s2) = node(&mut Input::new(&data), 0);
        assert_eq!(format!("{a:?}{s:?}"), format!("{a2:?}{s2:?}"));
    }

    #[test]
    fn a_case_accepted_at_full_comes_back_equal() {
        let array: ArrayRef = Arc::new(arrow_array::Int32Array::from(vec![Some(1), None, Some(3)]));
        let (a, s) = nodes_of(array.as_ref());
        check(&Case::new(a.clone(), s.clone()), false);
        check(&Case::new(a, s), true);
    }

    #[test]
    fn the_backing_makes_a_hostile_string_offset_cheap_and_safe() {
        let array: ArrayRef = Arc::new(arrow_array::StringArray::from(vec!["ab", "c"]));
        let (mut a, s) = nodes_of(array.as_ref());
        let offsets = a.buffers[1].as_mut().unwrap();
        offsets[8..12].copy_from_slice(&i32::MAX.to_le_bytes());
        tree::back_claims(&arrow_schema::DataType::Utf8, &mut a);
        assert_eq!(
            a.buffers[2].as_ref().unwrap().len(),
            tree::MAX_DATA as usize
        );
        check(&Case::new(a, s), false);
    }
}

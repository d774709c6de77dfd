//! Array and schema trees as the fuzzers describe them (the test producer's
//! [`ArrayNode`] / [`SchemaNode`]), and what ties them to memory:
//!
//! * [`claims`]: how many bytes of each buffer a node's type, length and
//!   offset make a conforming consumer entitled to read. It is written from
//!   the C Data Interface's layouts, independently of the library's own
//!   sizing, so a library that reads more than this is caught by
//!   AddressSanitizer rather than excused by it.
//! * [`back_claims`]: pads a (possibly hostile) tree's buffers to what they
//!   claim, so that a CPU tree is memory-safe by the spec whatever its
//!   values say. Without it a consumer would be entitled to read past the
//!   producer's memory (the C interface carries no buffer sizes), and a
//!   crash would be the producer's fault, not a finding.
//! * [`array_from_c`] and [`schema_from_c`]: read a tree that a conforming
//!   producer exported back into nodes, for seeds.

use std::ffi::CStr;

use arrow_device::abi::{raw, FFI_ArrowArray, FFI_ArrowSchema};
use arrow_schema::{DataType, FieldRef, UnionMode};

use crate::metadata;
use crate::producer::{ArrayNode, SchemaNode};

/// The largest slot count (`offset + length`) and the largest byte size a
/// data-dependent claim (a string offset, a view buffer size) may reach in a
/// backed tree: larger values are capped, so that every case stays cheap.
pub const MAX_SLOTS: i64 = 1 << 12;
pub const MAX_DATA: i64 = 1 << 14;

/// What the buffers of a node of type `data_type` hold, in C order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Buffer {
    /// A bitmap of `offset + length` bits (validity, boolean values).
    Bits,
    /// `offset + length` values of this many bytes.
    Fixed(usize),
    /// `offset + length + 1` offsets of this many bytes; the next buffer
    /// holds the data they point into.
    Offsets(usize),
    /// The bytes the offsets before it point into.
    Data,
    /// `offset + length` 16-byte views.
    Views,
    /// A view array's variadic data buffer; its size is in the last buffer.
    Variadic,
    /// The int64 sizes of the variadic buffers.
    VariadicSizes,
}

/// The buffers of a node of `data_type` with `n_buffers` buffers (which
/// only matters for views: validity, views, variadic buffers, sizes).
fn layout(data_type: &DataType, n_buffers: usize) -> Vec<Buffer> {
    use Buffer::*;
    let fixed = |width: usize| vec![Bits, Fixed(width)];
    match data_type {
        DataType::Null | DataType::RunEndEncoded(..) => vec![],
        DataType::Boolean => vec![Bits, Bits],
        DataType::Utf8 | DataType::Binary => vec![Bits, Offsets(4), Data],
        DataType::LargeUtf8 | DataType::LargeBinary => vec![Bits, Offsets(8), Data],
        DataType::Utf8View | DataType::BinaryView => {
            let mut buffers = vec![Bits, Views];
            buffers.extend(std::iter::repeat_n(Variadic, n_buffers.saturating_sub(3)));
            buffers.push(VariadicSizes);
            buffers
        }
        DataType::FixedSizeBinary(width) => fixed((*width).max(0) as usize),
        DataType::List(_) | DataType::Map(..) => vec![Bits, Offsets(4)],
        DataType::LargeList(_) => vec![Bits, Offsets(8)],
        DataType::ListView(_) => vec![Bits, Fixed(4), Fixed(4)],
        DataType::LargeListView(_) => vec![Bits, Fixed(8), Fixed(8)],
        DataType::FixedSizeList(..) | DataType::Struct(_) => vec![Bits],
        DataType::Union(_, UnionMode::Sparse) => vec![Fixed(1)],
        DataType::Union(_, UnionMode::Dense) => vec![Fixed(1), Fixed(4)],
        DataType::Dictionary(key, _) => fixed(key.primitive_width().unwrap_or(8)),
        other => fixed(other.primitive_width().unwrap_or(16)),
    }
}

/// The bytes a conforming consumer may read from each of `node`'s buffers
/// (by index; buffers beyond the type's layout claim nothing). Negative
/// lengths and offsets claim nothing: they are for the consumer to reject
/// before reading. Offsets and variadic sizes are read from `node`'s own
/// buffers where those are long enough, else the data claims nothing.
pub fn claims(data_type: &DataType, node: &ArrayNode) -> Vec<usize> {
    let slots = if node.length < 0 || node.offset < 0 {
        0
    } else {
        node.length.saturating_add(node.offset).max(0) as usize
    };
    let layout = layout(data_type, node.buffers.len());
    let mut out = vec![0usize; node.buffers.len()];
    let buffer = |i: usize| node.buffers.get(i).and_then(|b| b.as_deref());
    for (i, kind) in layout.iter().enumerate().take(out.len()) {
        out[i] = match *kind {
            Buffer::Bits => slots.div_ceil(8),
            Buffer::Fixed(width) => slots.saturating_mul(width),
            Buffer::Offsets(width) => (slots.saturating_add(1)).saturating_mul(width),
            Buffer::Views => slots.saturating_mul(16),
            Buffer::VariadicSizes => node.buffers.len().saturating_sub(3).saturating_mul(8),
            Buffer::Data => {
                let Buffer::Offsets(width) = layout[i - 1] else {
                    unreachable!("data follows its offsets")
                };
                let first = node.offset.max(0) as usize;
                match buffer(i - 1) {
                    Some(offsets) => (first..=slots)
                        .filter_map(|k| read_int(offsets, k, width))
                        .max()
                        .unwrap_or(0)
                        .max(0) as usize,
                    None => 0,
                }
            }
            Buffer::Variadic => {
                let sizes = buffer(node.buffers.len() - 1);
                sizes
                    .and_then(|s| read_int(s, i - 2, 8))
                    .unwrap_or(0)
                    .max(0) as usize
            }
        };
    }
    out
}

/// The little-endian integer `index` of `width` bytes (4 or 8) in `bytes`.
fn read_int(bytes: &[u8], index: usize, width: usize) -> Option<i64> {
    let start = index.checked_mul(width)?;
    let raw = bytes.get(start..start.checked_add(width)?)?;
    Some(match width {
        4 => i32::from_le_bytes(raw.try_into().unwrap()) as i64,
        _ => i64::from_le_bytes(raw.try_into().unwrap()),
    })
}

fn write_int(bytes: &mut [u8], index: usize, width: usize, value: i64) {
    let start = index * width;
    match width {
        4 => bytes[start..start + 4].copy_from_slice(&(value as i32).to_le_bytes()),
        _ => bytes[start..start + 8].copy_from_slice(&value.to_le_bytes()),
    }
}

/// Makes `node` (of `data_type`, with `children_types` for its children)
/// memory-safe by the spec: slot counts above [`MAX_SLOTS`] are cut down,
/// string offsets and view buffer sizes above [`MAX_DATA`] capped, and every
/// present buffer padded with zeros to what it claims. Values stay hostile:
/// non-monotonic offsets, negative sizes, null counts that lie, views that
/// point anywhere are all still for the consumer to reject.
pub fn back_claims(data_type: &DataType, node: &mut ArrayNode) {
    node.length = node.length.min(MAX_SLOTS);
    node.offset = node.offset.min(MAX_SLOTS - node.length.max(0));
    let slots = node.length.max(0) + node.offset.max(0);
    // The integers that size other buffers first: offsets and view sizes.
    for (i, kind) in layout(data_type, node.buffers.len()).iter().enumerate() {
        let (width, entries) = match *kind {
            Buffer::Offsets(width) => (width, slots as usize + 1),
            Buffer::VariadicSizes => (8, node.buffers.len().saturating_sub(3)),
            _ => continue,
        };
        if let Some(Some(bytes)) = node.buffers.get_mut(i) {
            if bytes.len() < entries * width {
                bytes.resize(entries * width, 0);
            }
            for k in 0..entries {
                if read_int(bytes, k, width).is_some_and(|v| v > MAX_DATA) {
                    write_int(bytes, k, width, MAX_DATA);
                }
            }
        }
    }
    let claims = claims(data_type, node);
    for (buffer, claim) in node.buffers.iter_mut().zip(claims) {
        if let Some(bytes) = buffer {
            if bytes.len() < claim {
                bytes.resize(claim, 0);
            }
        }
    }
    let children: Vec<DataType> = child_types(data_type);
    for (child, child_type) in node.children.iter_mut().zip(&children) {
        back_claims(child_type, child);
    }
    if let (DataType::Dictionary(_, value), Some(dictionary)) = (data_type, &mut node.dictionary) {
        back_claims(value, dictionary);
    }
}

/// The types of a node's children, in C order.
pub fn child_types(data_type: &DataType) -> Vec<DataType> {
    child_fields(data_type)
        .into_iter()
        .map(|f| f.data_type().clone())
        .collect()
}

/// The fields of a node's children, in C order (a dictionary's values are
/// its `dictionary`, not a child).
pub fn child_fields(data_type: &DataType) -> Vec<&FieldRef> {
    match data_type {
        DataType::List(f)
        | DataType::LargeList(f)
        | DataType::ListView(f)
        | DataType::LargeListView(f)
        | DataType::FixedSizeList(f, _)
        | DataType::Map(f, _) => vec![f],
        DataType::Struct(fields) => fields.iter().collect(),
        DataType::Union(fields, _) => fields.iter().map(|(_, f)| f).collect(),
        DataType::RunEndEncoded(ends, values) => vec![ends, values],
        _ => vec![],
    }
}

/// A conforming producer's array tree of `data_type`, read back into nodes:
/// each buffer copied for what it [`claims`].
///
/// # Safety
/// `array` is live and conforming (this crate's or arrow-rs' exporter).
pub unsafe fn array_from_c(data_type: &DataType, array: &FFI_ArrowArray) -> ArrayNode {
    // SAFETY: forwarded.
    unsafe { array_node(data_type, raw::array(array)) }
}

unsafe fn array_node(data_type: &DataType, array: &raw::ArrowArray) -> ArrayNode {
    let n = array.n_buffers as usize;
    // SAFETY: a conforming struct has `n_buffers` buffer pointers.
    let pointers: &[*const std::ffi::c_void] = if n == 0 {
        &[]
    } else {
        unsafe { std::slice::from_raw_parts(array.buffers.cast(), n) }
    };
    let mut node = ArrayNode::new(array.length, array.null_count, vec![None; n]);
    node.offset = array.offset;
    // Sizes first (they need no data), then the claims that read them.
    for _ in 0..2 {
        let claims = claims(data_type, &node);
        for (i, (&ptr, claim)) in pointers.iter().zip(claims).enumerate() {
            if !ptr.is_null() {
                // SAFETY: a conforming producer's buffer holds its claim.
                let bytes = unsafe { std::slice::from_raw_parts(ptr.cast::<u8>(), claim) };
                node.buffers[i] = Some(bytes.to_vec());
            }
        }
    }
    let children = child_types(data_type);
    for (i, child_type) in children.iter().enumerate().take(array.n_children as usize) {
        // SAFETY: a conforming struct has `n_children` live child pointers.
        node.children
            .push(unsafe { array_node(child_type, &**array.children.add(i)) });
    }
    if let (DataType::Dictionary(_, value), false) = (data_type, array.dictionary.is_null()) {
        // SAFETY: as for the children.
        node.dictionary = Some(Box::new(unsafe { array_node(value, &*array.dictionary) }));
    }
    node
}

/// A live schema tree read back into nodes.
///
/// # Safety
/// `schema` is live and conforming.
pub unsafe fn schema_from_c(schema: &FFI_ArrowSchema) -> SchemaNode {
    // SAFETY: forwarded.
    unsafe { schema_node(raw::schema(schema)) }
}

unsafe fn schema_node(schema: &raw::ArrowSchema) -> SchemaNode {
    // SAFETY: a conforming schema's strings are NUL-terminated.
    let string = |p: *const std::ffi::c_char| {
        (!p.is_null()).then(|| unsafe { CStr::from_ptr(p) }.to_bytes().to_vec())
    };
    let metadata = (!schema.metadata.is_null()).then(|| {
        // SAFETY: a conforming blob holds the lengths it encodes.
        unsafe { metadata_bytes(schema.metadata.cast()) }
    });
    let mut node = SchemaNode {
        format: string(schema.format),
        name: string(schema.name),
        metadata,
        flags: schema.flags,
        children: Vec::new(),
        dictionary: None,
        released: false,
    };
    for i in 0..schema.n_children.max(0) as usize {
        // SAFETY: a conforming struct has `n_children` live child pointers.
        node.children
            .push(unsafe { schema_node(&**schema.children.add(i)) });
    }
    if !schema.dictionary.is_null() {
        // SAFETY: as for the children.
        node.dictionary = Some(Box::new(unsafe { schema_node(&*schema.dictionary) }));
    }
    node
}

/// The bytes of a conforming metadata blob: its count, then each key and
/// value as a length and bytes.
unsafe fn metadata_bytes(blob: *const u8) -> Vec<u8> {
    // SAFETY: the caller's blob is conforming, so every read below is
    // within it.
    unsafe {
        let int = |at: usize| i32::from_ne_bytes(*blob.add(at).cast::<[u8; 4]>()).max(0) as usize;
        let mut at = 4;
        for _ in 0..int(0) * 2 {
            at += 4 + int(at);
        }
        std::slice::from_raw_parts(blob, at).to_vec()
    }
}

/// The most key/value pairs and the longest key or value a backed metadata
/// blob claims: larger counts and lengths are capped.
pub const MAX_PAIRS: i32 = 64;
pub const MAX_STRING: i32 = 1 << 12;

/// Makes every metadata blob of a schema tree memory-safe by the spec: the
/// C interface gives a blob no length, so a consumer may read every byte its
/// count and lengths claim. Counts and lengths above [`MAX_PAIRS`] and
/// [`MAX_STRING`] are capped and the blob padded with zeros to what it then
/// claims; a negative count or length stays, for the consumer to reject
/// before it reads on.
pub fn back_schema(schema: &mut SchemaNode) {
    if let Some(blob) = &mut schema.metadata {
        back_metadata(blob);
    }
    for child in &mut schema.children {
        back_schema(child);
    }
    if let Some(dictionary) = &mut schema.dictionary {
        back_schema(dictionary);
    }
}

fn back_metadata(blob: &mut Vec<u8>) {
    let caps = metadata::Caps {
        pairs: MAX_PAIRS,
        string: MAX_STRING,
        total: usize::MAX,
    };
    metadata::back(blob, &caps);
}

/// A one-line-per-node description of a case, for `ARROW_DEVICE_FUZZ_DEBUG`.
pub fn describe(array: &ArrayNode, schema: &SchemaNode) -> String {
    let mut out = String::new();
    describe_node(&mut out, Some(array), Some(schema), 0);
    out
}

fn describe_node(out: &mut String, a: Option<&ArrayNode>, s: Option<&SchemaNode>, depth: usize) {
    use std::fmt::Write;
    let text = |b: &Option<Vec<u8>>| {
        b.as_deref()
            .map(|b| String::from_utf8_lossy(b).into_owned())
    };
    let _ = write!(out, "{:indent$}", "", indent = depth * 2);
    if let Some(s) = s {
        let _ = write!(
            out,
            "format {:?} name {:?} flags {} metadata {:?}{}; ",
            text(&s.format),
            text(&s.name),
            s.flags,
            s.metadata.as_ref().map(|m| m.len()),
            if s.released { " RELEASED" } else { "" }
        );
    }
    if let Some(a) = a {
        let buffers: Vec<String> = a
            .buffers
            .iter()
            .map(|b| match b {
                None => "NULL".into(),
                Some(b) if b.len() <= 16 => format!("{b:?}"),
                Some(b) => format!("{:?}..({} bytes)", &b[..16], b.len()),
            })
            .collect();
        let _ = write!(
            out,
            "length {} offset {} null_count {} buffers [{}]{}",
            a.length,
            a.offset,
            a.null_count,
            buffers.join(", "),
            if a.released { " RELEASED" } else { "" }
        );
    }
    out.push('\n');
    let n = a
        .map_or(0, |a| a.children.len())
        .max(s.map_or(0, |s| s.children.len()));
    for i in 0..n {
        describe_node(
            out,
            a.and_then(|a| a.children.get(i)),
            s.and_then(|s| s.children.get(i)),
            depth + 1,
        );
    }
    let (da, ds) = (
        a.and_then(|a| a.dictionary.as_deref()),
        s.and_then(|s| s.dictionary.as_deref()),
    );
    if da.is_some() || ds.is_some() {
        let _ = writeln!(out, "{:indent$}dictionary:", "", indent = depth * 2 + 2);
        describe_node(out, da, ds, depth + 2);
    }
}

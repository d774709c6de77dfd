//! Building a decoded tree: the producer's description of it
//! ([`schema_node`]), its format strings and its metadata blobs.

use super::decode::{DecimalWidth, FlagsSpec, FormatSpec, MetadataSpec, NodeSpec, FIXED_FORMATS};
use crate::metadata;
use crate::producer::SchemaNode;

/// The most bytes a metadata blob is grown to so that its claims are real.
const METADATA_BUDGET: usize = 16 * 1024;
const FLAG_NULLABLE: i64 = 2;

/// The bytes of a format string (`None`: a NULL pointer), cut at a NUL.
pub fn format_bytes(format: &FormatSpec) -> Option<Vec<u8>> {
    let bytes = match format {
        FormatSpec::Fixed(index) => FIXED_FORMATS[usize::from(*index)].as_bytes().to_vec(),
        FormatSpec::FixedSizeBinary(n) => format!("w:{n}").into_bytes(),
        FormatSpec::FixedSizeList(n) => format!("+w:{n}").into_bytes(),
        FormatSpec::Decimal {
            precision,
            scale,
            width,
        } => match width {
            DecimalWidth::Absent => format!("d:{precision},{scale}"),
            DecimalWidth::Bits(bits) => format!("d:{precision},{scale},{bits}"),
            DecimalWidth::Other(bits) => format!("d:{precision},{scale},{bits}"),
        }
        .into_bytes(),
        FormatSpec::Timestamp { unit, time_zone } => {
            let mut out = b"ts".to_vec();
            out.push(b"smunx"[usize::from(*unit % 5)]);
            out.push(b':');
            out.extend_from_slice(time_zone);
            out
        }
        FormatSpec::Union { dense, type_ids } => {
            let ids: Vec<String> = type_ids.iter().map(u8::to_string).collect();
            format!("+u{}:{}", if *dense { 'd' } else { 's' }, ids.join(",")).into_bytes()
        }
        FormatSpec::Raw(bytes) => bytes.clone(),
        FormatSpec::Mutated(inner, m) => {
            let mut bytes = format_bytes(inner).unwrap_or_default();
            let at = usize::from(m.position) % (bytes.len() + 1);
            match m.op {
                0 => bytes.insert(at, m.byte),
                1 if at < bytes.len() => {
                    bytes.remove(at);
                }
                2 if at < bytes.len() => bytes[at] = m.byte,
                3 => bytes.truncate(at),
                _ => {}
            }
            bytes
        }
        FormatSpec::Null => return None,
        FormatSpec::Chain(_) => b"+l".to_vec(),
    };
    Some(c_text(&bytes))
}

/// `bytes` up to its first NUL, as a C string holds it.
fn c_text(bytes: &[u8]) -> Vec<u8> {
    let end = bytes.iter().position(|b| *b == 0).unwrap_or(bytes.len());
    bytes[..end].to_vec()
}

fn flags_value(flags: FlagsSpec) -> i64 {
    match flags {
        FlagsSpec::Nullable => FLAG_NULLABLE,
        FlagsSpec::None => 0,
        FlagsSpec::Raw(v) => v,
        FlagsSpec::Bits(b) => i64::from(b & 7),
    }
}

/// The metadata blob `spec` describes, grown or cut so that every length a
/// conforming reader follows is backed by that many bytes: zero-filled up
/// to `METADATA_BUDGET`, counts and lengths that claim more lowered to
/// fit (see [`metadata::back`]).
pub fn metadata_blob(spec: &MetadataSpec) -> Vec<u8> {
    let lie = |n: usize, lie: i32| (n as i32).wrapping_add(lie);
    let pairs: Vec<(i32, &[u8], i32, &[u8])> = spec
        .pairs
        .iter()
        .map(|(key_lie, key, value_lie, value)| {
            (
                lie(key.len(), *key_lie),
                key.as_slice(),
                lie(value.len(), *value_lie),
                value.as_slice(),
            )
        })
        .collect();
    let mut blob = metadata::write(lie(spec.pairs.len(), spec.count_lie), &pairs);
    let caps = metadata::Caps {
        pairs: i32::MAX,
        string: i32::MAX,
        total: METADATA_BUDGET,
    };
    metadata::back(&mut blob, &caps);
    blob
}

/// The producer's description of the tree.
pub fn schema_node(spec: &NodeSpec) -> SchemaNode {
    let mut children: Vec<SchemaNode> = spec.children.iter().map(schema_node).collect();
    if let FormatSpec::Chain(levels) = spec.format {
        for _ in 0..levels {
            let list = SchemaNode::new("+l", "item").with_children(std::mem::take(&mut children));
            children = vec![list];
        }
    }
    SchemaNode {
        format: format_bytes(&spec.format),
        name: spec.name.as_deref().map(c_text),
        metadata: spec.metadata.as_ref().map(metadata_blob),
        flags: flags_value(spec.flags),
        children,
        dictionary: spec.dictionary.as_deref().map(|d| Box::new(schema_node(d))),
        released: spec.released,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    #[test]
    fn metadata_claims_are_backed_by_bytes() {
        let spec = MetadataSpec {
            count_lie: 2,
            pairs: vec![(0, b"k".to_vec(), 10, b"v".to_vec())],
        };
        let blob = metadata_blob(&spec);
        // count 3; pair 0: "k", then an 11-byte value; pairs 1 and 2 zero
        // lengths read from the zero fill.
        assert_eq!(blob.len(), 4 + (4 + 1) + (4 + 11) + 2 * 8);
        // SAFETY: every length the blob states is backed.
        let decoded = unsafe { arrow_device::schema::decode_metadata(blob.as_ptr().cast()) };
        let expected = HashMap::from([
            ("k".to_string(), format!("v{}", "\0".repeat(10))),
            (String::new(), String::new()),
        ]);
        assert_eq!(decoded.unwrap(), expected);
    }

    #[test]
    fn huge_metadata_claims_are_lowered_to_the_budget() {
        let spec = MetadataSpec {
            count_lie: i32::MAX - 1,
            pairs: vec![(i32::MAX - 1, b"k".to_vec(), 0, Vec::new())],
        };
        let blob = metadata_blob(&spec);
        assert!(blob.len() <= METADATA_BUDGET + 8, "{}", blob.len());
        let count = i32::from_ne_bytes(blob[0..4].try_into().unwrap());
        assert_eq!(count, 1, "no room is left for a second pair");
    }
}

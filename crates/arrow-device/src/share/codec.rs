//! The bytes of a share handle: a schema tree and an array tree's layout,
//! written by the exporter and read, as hostile input, by the opener.
//!
//! Integers are little-endian; every length is checked against what is
//! left before anything is allocated from it, and node counts are bounded
//! ([`MAX_NODES`]), so that no handle can make the decoder allocate or
//! recurse without bound.

use std::ffi::{c_char, CString};

use arrow_schema::Field;

use crate::abi::{raw, FFI_ArrowSchema};
use crate::schema::{export_field, import_field, metadata, MAX_NESTING_DEPTH};

/// The most nodes (schema or array) a handle may describe.
pub const MAX_NODES: usize = 1 << 20;

/// Writes the pieces of a handle.
#[derive(Debug, Default)]
pub struct Writer {
    bytes: Vec<u8>,
}

impl Writer {
    /// The bytes written so far.
    pub fn into_bytes(self) -> Vec<u8> {
        self.bytes
    }

    /// Appends `value`.
    pub fn u8(&mut self, value: u8) {
        self.bytes.push(value);
    }

    /// Appends `value`.
    pub fn u32(&mut self, value: u32) {
        self.bytes.extend_from_slice(&value.to_le_bytes());
    }

    /// Appends `value`.
    pub fn u64(&mut self, value: u64) {
        self.bytes.extend_from_slice(&value.to_le_bytes());
    }

    /// Appends `value`.
    pub fn i64(&mut self, value: i64) {
        self.bytes.extend_from_slice(&value.to_le_bytes());
    }

    /// Appends `bytes`, length first.
    pub fn bytes(&mut self, bytes: &[u8]) {
        self.u64(bytes.len() as u64);
        self.bytes.extend_from_slice(bytes);
    }

    /// Appends `field` as the C schema tree it exports to (format, name,
    /// metadata, flags, children, dictionary, in pre-order).
    pub fn field(&mut self, field: &Field) -> Result<(), String> {
        let schema = export_field(field).map_err(|e| e.to_string())?;
        self.schema_node(raw::schema(&schema))
    }

    fn schema_node(&mut self, node: &raw::ArrowSchema) -> Result<(), String> {
        // SAFETY (the reads below): `node` is a node of a tree this crate
        // exported: NUL-terminated strings, metadata in the spec's encoding,
        // `n_children` children.
        let format = unsafe { std::ffi::CStr::from_ptr(node.format) };
        self.bytes(format.to_bytes());
        if node.name.is_null() {
            self.u8(0);
        } else {
            self.u8(1);
            self.bytes(unsafe { std::ffi::CStr::from_ptr(node.name) }.to_bytes());
        }
        let pairs = unsafe { metadata::decode(node.metadata) }?;
        if node.metadata.is_null() {
            self.u8(0);
        } else {
            self.u8(1);
            self.bytes(&metadata::encode(&pairs)?);
        }
        self.i64(node.flags);
        let n_children = usize::try_from(node.n_children).unwrap_or(0);
        self.u32(n_children as u32);
        self.u8(u8::from(!node.dictionary.is_null()));
        for i in 0..n_children {
            self.schema_node(unsafe { &**node.children.add(i) })?;
        }
        if !node.dictionary.is_null() {
            self.schema_node(unsafe { &*node.dictionary })?;
        }
        Ok(())
    }
}

/// Reads the pieces of a handle; every read says what was expected where
/// the bytes end or lie.
#[derive(Debug)]
pub struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    /// A reader at the start of `bytes`.
    pub fn new(bytes: &'a [u8]) -> Self {
        Reader { bytes, at: 0 }
    }

    /// Whether every byte was read.
    pub fn finished(&self) -> bool {
        self.at == self.bytes.len()
    }

    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], String> {
        let end = self
            .at
            .checked_add(n)
            .filter(|&end| end <= self.bytes.len())
            .ok_or_else(|| {
                format!(
                    "the handle ends at byte {} in {what} (expected {n} more bytes)",
                    self.bytes.len()
                )
            })?;
        let slice = &self.bytes[self.at..end];
        self.at = end;
        Ok(slice)
    }

    /// Reads one byte.
    pub fn u8(&mut self, what: &str) -> Result<u8, String> {
        Ok(self.take(1, what)?[0])
    }

    /// Reads a u32.
    pub fn u32(&mut self, what: &str) -> Result<u32, String> {
        let bytes = self.take(4, what)?;
        Ok(u32::from_le_bytes(bytes.try_into().expect("4 bytes")))
    }

    /// Reads a u64.
    pub fn u64(&mut self, what: &str) -> Result<u64, String> {
        let bytes = self.take(8, what)?;
        Ok(u64::from_le_bytes(bytes.try_into().expect("8 bytes")))
    }

    /// Reads an i64.
    pub fn i64(&mut self, what: &str) -> Result<i64, String> {
        let bytes = self.take(8, what)?;
        Ok(i64::from_le_bytes(bytes.try_into().expect("8 bytes")))
    }

    /// Reads length-prefixed bytes.
    pub fn bytes(&mut self, what: &str) -> Result<&'a [u8], String> {
        let len = self.u64(what)?;
        let len = usize::try_from(len).map_err(|_| format!("{what}: length {len} is too large"))?;
        self.take(len, what)
    }

    /// Reads a schema tree written by [`Writer::field`] and imports it, with
    /// the validation of any import.
    pub fn field(&mut self) -> Result<Field, String> {
        let mut tree = SchemaTree::default();
        let root = tree.node(self, 0)?;
        // SAFETY: `root` is a pushed index.
        let root_ptr = unsafe { tree.link().add(root) };
        // SAFETY: the tree's nodes, strings and pointer arrays live in
        // `tree` until after the import; the view's release is a no-op that
        // only marks it released, so the `FFI_ArrowSchema` owns nothing.
        let view = std::mem::ManuallyDrop::new(unsafe {
            std::ptr::read(root_ptr.cast::<FFI_ArrowSchema>())
        });
        import_field(&view).map_err(|e| format!("the handle's schema: {e}"))
    }
}

/// A schema tree decoded from a handle, owned here.
#[derive(Default)]
struct SchemaTree {
    /// Pointers into it are taken once every node is read (`link`).
    nodes: Vec<raw::ArrowSchema>,
    /// Formats and names, as `CString::into_raw` gave them (a raw pointer is
    /// never invalidated by moving its owner), freed on drop.
    strings: Vec<*mut c_char>,
    metadata: Vec<Vec<u8>>,
    /// Per node: its children's node indices, then its dictionary's.
    links: Vec<(Vec<usize>, Option<usize>)>,
    pointer_arrays: Vec<Vec<*mut raw::ArrowSchema>>,
}

impl Drop for SchemaTree {
    fn drop(&mut self) {
        for string in self.strings.drain(..) {
            // SAFETY: each came from `CString::into_raw`, freed once here.
            drop(unsafe { CString::from_raw(string) });
        }
    }
}

unsafe extern "C" fn release_decoded(schema: *mut raw::ArrowSchema) {
    // SAFETY: called on a node of a decoded tree, which owns nothing itself.
    unsafe { (*schema).release = None };
}

impl SchemaTree {
    fn node(&mut self, reader: &mut Reader<'_>, depth: usize) -> Result<usize, String> {
        // The import refuses deeper trees; reading them first would only
        // recurse as deep as the handle says (a few bytes a level), past
        // the stack of a small thread.
        if self.nodes.len() >= MAX_NODES || depth > MAX_NESTING_DEPTH {
            return Err(format!(
                "the handle's schema has more than {MAX_NODES} nodes or is nested deeper than {MAX_NESTING_DEPTH} levels"
            ));
        }
        let format = CString::new(reader.bytes("a schema format")?)
            .map_err(|_| "a schema format holds a NUL byte".to_string())?;
        let name = match reader.u8("a schema name flag")? {
            0 => None,
            1 => Some(
                CString::new(reader.bytes("a schema name")?)
                    .map_err(|_| "a schema name holds a NUL byte".to_string())?,
            ),
            other => return Err(format!("a schema name flag is {other} (expected 0 or 1)")),
        };
        let metadata = match reader.u8("a schema metadata flag")? {
            0 => None,
            1 => {
                let bytes = reader.bytes("schema metadata")?.to_vec();
                check_metadata(&bytes)?;
                Some(bytes)
            }
            other => {
                return Err(format!(
                    "a schema metadata flag is {other} (expected 0 or 1)"
                ))
            }
        };
        let flags = reader.i64("schema flags")?;
        let n_children = reader.u32("a schema child count")? as usize;
        let has_dictionary = match reader.u8("a schema dictionary flag")? {
            0 => false,
            1 => true,
            other => {
                return Err(format!(
                    "a schema dictionary flag is {other} (expected 0 or 1)"
                ))
            }
        };
        let index = self.nodes.len();
        let format = format.into_raw();
        self.strings.push(format);
        let name = name.map_or(std::ptr::null_mut(), CString::into_raw);
        if !name.is_null() {
            self.strings.push(name);
        }
        self.nodes.push(raw::ArrowSchema {
            format,
            name,
            metadata: metadata
                .as_ref()
                .map_or(std::ptr::null(), |m| m.as_ptr().cast::<c_char>()),
            flags,
            n_children: n_children as i64,
            children: std::ptr::null_mut(),
            dictionary: std::ptr::null_mut(),
            release: Some(release_decoded),
            private_data: std::ptr::null_mut(),
        });
        self.metadata.extend(metadata);
        self.links.push((Vec::new(), None));
        let mut children = Vec::with_capacity(n_children.min(64));
        for _ in 0..n_children {
            children.push(self.node(reader, depth + 1)?);
        }
        let dictionary = if has_dictionary {
            Some(self.node(reader, depth + 1)?)
        } else {
            None
        };
        self.links[index] = (children, dictionary);
        Ok(index)
    }

    /// Points each node at its children and dictionary; returns the root.
    /// Every pointer comes from one base pointer of the node vector, which
    /// is not touched otherwise from here on (no reference to an element
    /// may invalidate a pointer taken before it).
    fn link(&mut self) -> *mut raw::ArrowSchema {
        let base = self.nodes.as_mut_ptr();
        for (index, (children, dictionary)) in self.links.iter().enumerate() {
            // SAFETY: every index was pushed, so lies inside the vector.
            let mut pointers: Vec<*mut raw::ArrowSchema> =
                children.iter().map(|&c| unsafe { base.add(c) }).collect();
            // SAFETY: as above; the pointer array's heap buffer stays put
            // when it is moved into `pointer_arrays`.
            unsafe {
                let node = base.add(index);
                (*node).children = pointers.as_mut_ptr();
                (*node).dictionary = dictionary.map_or(std::ptr::null_mut(), |d| base.add(d));
            }
            self.pointer_arrays.push(pointers);
        }
        base
    }
}

/// Checks that `bytes` is exactly one metadata encoding (the spec's
/// encoding has no total length: a short one would be read past its end).
fn check_metadata(bytes: &[u8]) -> Result<(), String> {
    let mut reader = Reader::new(bytes);
    let int = |reader: &mut Reader<'_>, what: &str| -> Result<usize, String> {
        let bytes = reader.take(4, what)?;
        let value = i32::from_ne_bytes(bytes.try_into().expect("4 bytes"));
        usize::try_from(value).map_err(|_| format!("{what} is {value} (expected >= 0)"))
    };
    let count = int(&mut reader, "the metadata pair count")?;
    for _ in 0..count {
        for what in ["a metadata key", "a metadata value"] {
            let len = int(&mut reader, what)?;
            reader.take(len, what)?;
        }
    }
    if reader.finished() {
        Ok(())
    } else {
        Err("schema metadata has bytes after its last pair".to_string())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use arrow_schema::{DataType, Field, Fields};

    use super::*;

    fn round_trip(field: &Field) -> Field {
        let mut writer = Writer::default();
        writer.field(field).unwrap();
        let bytes = writer.into_bytes();
        let mut reader = Reader::new(&bytes);
        let back = reader.field().unwrap();
        assert!(reader.finished());
        back
    }

    #[test]
    fn fields_of_every_shape_round_trip() {
        let metadata = HashMap::from([("k".to_string(), "v".to_string())]);
        let fields = [
            Field::new("a", DataType::Int64, true),
            Field::new(
                "s",
                DataType::Struct(Fields::from(vec![
                    Field::new("x", DataType::Utf8, false).with_metadata(metadata.clone()),
                    Field::new_list("l", Field::new("item", DataType::Int32, true), true),
                ])),
                true,
            ),
            Field::new_dictionary("d", DataType::Int32, DataType::Utf8, true),
            Field::new("u", DataType::Utf8View, true).with_metadata(metadata),
        ];
        for field in fields {
            let back = round_trip(&field);
            assert_eq!(back.data_type(), field.data_type());
            assert_eq!(back.name(), field.name());
            assert_eq!(back.metadata(), field.metadata());
        }
    }

    #[test]
    fn every_truncation_of_a_handle_is_a_clear_error() {
        let field = Field::new_dictionary("d", DataType::Int32, DataType::Utf8, true);
        let mut writer = Writer::default();
        writer.field(&field).unwrap();
        let bytes = writer.into_bytes();
        for end in 0..bytes.len() {
            let err = Reader::new(&bytes[..end]).field().unwrap_err();
            assert!(
                err.contains("the handle ends") || err.contains("schema"),
                "{end}: {err}"
            );
        }
    }

    #[test]
    fn lying_lengths_and_flags_are_refused_before_any_allocation() {
        let mut bytes = Vec::new();
        bytes.extend_from_slice(&u64::MAX.to_le_bytes());
        assert!(Reader::new(&bytes)
            .field()
            .unwrap_err()
            .contains("the handle ends"));
        let mut writer = Writer::default();
        writer.bytes(b"l");
        writer.u8(7);
        let err = Reader::new(&writer.into_bytes()).field().unwrap_err();
        assert!(err.contains("name flag is 7"), "{err}");
        assert!(check_metadata(&[1, 0, 0, 0]).unwrap_err().contains("ends"));
        assert!(check_metadata(&[0, 0, 0, 0, 9])
            .unwrap_err()
            .contains("after its last pair"));
    }

    /// A schema of `levels` nested structs (the last a null leaf), as
    /// [`Writer::field`] writes one.
    fn nested(levels: usize) -> Vec<u8> {
        let mut writer = Writer::default();
        for level in 0..levels {
            let leaf = level + 1 == levels;
            writer.bytes(if leaf { b"n" } else { b"+s" });
            writer.u8(0);
            writer.u8(0);
            writer.i64(2);
            writer.u32(u32::from(!leaf));
            writer.u8(0);
        }
        writer.into_bytes()
    }

    #[test]
    fn a_schema_nested_past_the_import_limit_is_refused_without_reading_it_all() {
        // As deep as the import takes (the root and 64 levels below it).
        assert!(Reader::new(&nested(MAX_NESTING_DEPTH + 1)).field().is_ok());
        // 100,000 levels, a few bytes each, would overflow a test thread's
        // stack if read before being refused.
        for levels in [MAX_NESTING_DEPTH + 2, 100_000] {
            let err = Reader::new(&nested(levels)).field().unwrap_err();
            assert!(
                err.contains("nested deeper than 64 levels"),
                "{levels}: {err}"
            );
        }
    }
}

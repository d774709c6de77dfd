//! `ArrowSchema.metadata`: an int32 count, then for each pair an int32 key
//! length, the key bytes, an int32 value length and the value bytes, in native
//! endianness and without NUL terminators (spec: "ArrowSchema.metadata").

use std::collections::HashMap;
use std::ffi::c_char;

use arrow_schema::Metadata;

/// Decodes the metadata string at `ptr` (NULL means no metadata).
///
/// Rejects negative counts and lengths and keys or values that are not UTF-8.
/// A key that appears twice keeps its last value: the spec does not forbid
/// repeats and arrow-rs' field metadata is a map.
///
/// # Safety
/// `ptr` is NULL or points to a buffer in the spec's encoding: every length
/// the buffer states is backed by that many readable bytes. The encoding has
/// no total size, so a producer that lies about a length cannot be caught.
pub unsafe fn decode(ptr: *const c_char) -> Result<HashMap<String, String>, String> {
    if ptr.is_null() {
        return Ok(HashMap::new());
    }
    let mut reader = Reader {
        next: ptr.cast::<u8>(),
    };
    // SAFETY: the caller guarantees the encoding, which starts with an int32.
    let count = unsafe { reader.int32() };
    let count = usize::try_from(count)
        .map_err(|_| format!("metadata has {count} key/value pairs, expected a count >= 0"))?;
    // The count comes from the producer: do not let it size the allocation.
    let mut metadata = HashMap::with_capacity(count.min(64));
    for index in 0..count {
        // SAFETY: pair `index` < count follows, as the encoding states.
        let key = unsafe { reader.string() }
            .map_err(|defect| format!("metadata key {index} {defect}"))?;
        // SAFETY: as above; each key is followed by its value.
        let value = unsafe { reader.string() }
            .map_err(|defect| format!("metadata value {index} (key {key:?}) {defect}"))?;
        metadata.insert(key, value);
    }
    Ok(metadata)
}

/// Encodes `metadata` in the spec's format, keys in sorted order so that the
/// bytes are reproducible. The result has no terminator: the encoding states
/// every length.
///
/// Returns an error when there are more pairs, or a longer key or value, than
/// an int32 can count.
pub fn encode(metadata: &HashMap<String, String>) -> Result<Vec<u8>, String> {
    let mut pairs: Vec<_> = metadata.iter().collect();
    pairs.sort_unstable();
    let mut out = Vec::with_capacity(pairs_len(pairs.iter().copied())?);
    write_pairs(pairs.len(), pairs, |bytes| out.extend_from_slice(bytes))?;
    Ok(out)
}

/// The length of the encoding of a field's metadata (already sorted by key),
/// or why it has none.
pub(crate) fn encoded_len(metadata: &Metadata) -> Result<usize, String> {
    pairs_len(metadata.iter())
}

/// Hands the encoding of a field's metadata to `sink` piece by piece, without
/// building it in a buffer of its own (the schema exporter writes it straight
/// into its shared block).
pub(crate) fn write_encoded(metadata: &Metadata, sink: impl FnMut(&[u8])) -> Result<(), String> {
    write_pairs(metadata.len(), metadata.iter(), sink)
}

fn pairs_len<'a>(pairs: impl Iterator<Item = (&'a String, &'a String)>) -> Result<usize, String> {
    let (mut count, mut size) = (0, 4);
    for (key, value) in pairs {
        int32(key.len(), &|| format!("metadata key {key:?}"))?;
        int32(value.len(), &|| format!("metadata value of {key:?}"))?;
        size += 8 + key.len() + value.len();
        count += 1;
    }
    int32(count, &|| "the metadata".to_string())?;
    Ok(size)
}

fn write_pairs<'a>(
    count: usize,
    pairs: impl IntoIterator<Item = (&'a String, &'a String)>,
    mut sink: impl FnMut(&[u8]),
) -> Result<(), String> {
    sink(&int32(count, &|| "the metadata".to_string())?);
    for (key, value) in pairs {
        sink(&int32(key.len(), &|| format!("metadata key {key:?}"))?);
        sink(key.as_bytes());
        sink(&int32(value.len(), &|| {
            format!("metadata value of {key:?}")
        })?);
        sink(value.as_bytes());
    }
    Ok(())
}

/// `n` as the spec's native-endian int32, or an error naming `what`.
fn int32(n: usize, what: &dyn Fn() -> String) -> Result<[u8; 4], String> {
    i32::try_from(n)
        .map(i32::to_ne_bytes)
        .map_err(|_| format!("{} is {n} long, more than an int32 can state", what()))
}

struct Reader {
    next: *const u8,
}

impl Reader {
    /// # Safety
    /// Four readable bytes at `self.next`.
    unsafe fn int32(&mut self) -> i32 {
        // SAFETY: the caller guarantees 4 readable bytes; the producer's buffer
        // has no alignment promise, hence the unaligned read.
        let value = unsafe { self.next.cast::<i32>().read_unaligned() };
        // SAFETY: the 4 bytes just read are inside the buffer, so one past
        // them is at most its end.
        self.next = unsafe { self.next.add(4) };
        value
    }

    /// A length-prefixed UTF-8 string, or the defect as the end of a sentence.
    ///
    /// # Safety
    /// An int32 length and that many readable bytes at `self.next`.
    unsafe fn string(&mut self) -> Result<String, String> {
        // SAFETY: the caller guarantees the length prefix.
        let length = unsafe { self.int32() };
        let length =
            usize::try_from(length).map_err(|_| format!("has length {length}, expected >= 0"))?;
        // SAFETY: the caller guarantees `length` readable bytes after the
        // prefix; they are not mutated while we hold the slice.
        let bytes = unsafe { std::slice::from_raw_parts(self.next, length) };
        // SAFETY: the slice just formed lies inside the buffer.
        self.next = unsafe { self.next.add(length) };
        match std::str::from_utf8(bytes) {
            Ok(text) => Ok(text.to_owned()),
            Err(err) => Err(format!(
                "is not valid UTF-8: {}",
                super::utf8_defect(bytes, &err)
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encode(pairs: &[(&[u8], &[u8])]) -> Vec<u8> {
        let mut out = (pairs.len() as i32).to_ne_bytes().to_vec();
        for (key, value) in pairs {
            out.extend((key.len() as i32).to_ne_bytes());
            out.extend_from_slice(key);
            out.extend((value.len() as i32).to_ne_bytes());
            out.extend_from_slice(value);
        }
        out
    }

    fn decode_bytes(bytes: &[u8]) -> Result<HashMap<String, String>, String> {
        // SAFETY: `bytes` holds a complete encoding whose lengths are all in
        // bounds (or stop at a negative one before reading further).
        unsafe { decode(bytes.as_ptr().cast()) }
    }

    #[test]
    fn the_spec_example_decodes() {
        let bytes = encode(&[(b"key1", b"value1")]);
        if cfg!(target_endian = "little") {
            assert_eq!(
                bytes,
                b"\x01\x00\x00\x00\x04\x00\x00\x00key1\x06\x00\x00\x00value1"
            );
        }
        let metadata = decode_bytes(&bytes).unwrap();
        assert_eq!(
            metadata,
            HashMap::from([("key1".to_string(), "value1".to_string())])
        );
    }

    #[test]
    fn encoding_round_trips_in_sorted_key_order() {
        let metadata = HashMap::from([
            ("b".to_string(), "2".to_string()),
            ("a".to_string(), "ü".to_string()),
        ]);
        let bytes = super::encode(&metadata).unwrap();
        assert_eq!(bytes, encode(&[(b"a", "ü".as_bytes()), (b"b", b"2")]));
        assert_eq!(decode_bytes(&bytes).unwrap(), metadata);
        assert_eq!(super::encode(&HashMap::new()).unwrap(), 0i32.to_ne_bytes());
    }

    #[test]
    fn null_and_zero_pairs_are_empty_and_empty_strings_are_kept() {
        // SAFETY: NULL is allowed.
        assert!(unsafe { decode(std::ptr::null()) }.unwrap().is_empty());
        assert!(decode_bytes(&encode(&[])).unwrap().is_empty());
        let metadata = decode_bytes(&encode(&[(b"", b""), (b"k", "ü".as_bytes())])).unwrap();
        assert_eq!(metadata[""], "");
        assert_eq!(metadata["k"], "ü");
    }

    #[test]
    fn a_repeated_key_keeps_its_last_value() {
        let metadata = decode_bytes(&encode(&[(b"k", b"1"), (b"k", b"2")])).unwrap();
        assert_eq!(metadata.len(), 1);
        assert_eq!(metadata["k"], "2");
    }

    #[test]
    fn negative_counts_and_lengths_are_rejected() {
        let err = decode_bytes(&(-1i32).to_ne_bytes()).unwrap_err();
        assert_eq!(
            err,
            "metadata has -1 key/value pairs, expected a count >= 0"
        );

        let mut bytes = 1i32.to_ne_bytes().to_vec();
        bytes.extend((-3i32).to_ne_bytes());
        assert_eq!(
            decode_bytes(&bytes).unwrap_err(),
            "metadata key 0 has length -3, expected >= 0"
        );

        let mut bytes = encode(&[(b"a", b"b")]);
        bytes[0..4].copy_from_slice(&2i32.to_ne_bytes());
        bytes.extend(1i32.to_ne_bytes());
        bytes.push(b'c');
        bytes.extend(i32::MIN.to_ne_bytes());
        assert_eq!(
            decode_bytes(&bytes).unwrap_err(),
            r#"metadata value 1 (key "c") has length -2147483648, expected >= 0"#
        );
    }

    #[test]
    fn non_utf8_keys_and_values_are_rejected() {
        let err = decode_bytes(&encode(&[(b"ok", b"x"), (b"b\xffd", b"v")])).unwrap_err();
        assert_eq!(
            err,
            "metadata key 1 is not valid UTF-8: invalid byte 0xff at offset 1"
        );
        let err = decode_bytes(&encode(&[(b"k", b"\xc3")])).unwrap_err();
        assert_eq!(
            err,
            r#"metadata value 0 (key "k") is not valid UTF-8: incomplete sequence at offset 0"#
        );
    }
}

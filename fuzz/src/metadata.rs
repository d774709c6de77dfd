//! The C Data Interface's metadata blob (CDataInterface.rst, "Metadata"):
//! an int32 count, then for each pair an int32 length and that many bytes
//! for the key, then the same for the value, all in native byte order.
//!
//! The blob carries no total length, so a consumer may read every byte its
//! count and lengths claim. Every target that hands a blob over writes it
//! with [`write()`] and makes its claims real with [`back`], each under its
//! own [`Caps`] (`tree::back_schema`, the schema target's metadata).
//!
//! ```
//! use arrow_device_fuzz::metadata::{back, write, Caps};
//! // One pair whose value claims 3 bytes but holds 1.
//! let mut blob = write(1, &[(1, b"k", 3, b"v")]);
//! back(&mut blob, &Caps { pairs: 8, string: 16, total: usize::MAX });
//! assert_eq!(blob.len(), 4 + (4 + 1) + (4 + 3));
//! ```

/// A blob stating `count` pairs, then each pair as `(key length, key,
/// value length, value)`. Stated counts and lengths may lie: the bytes are
/// written as they are.
pub fn write(count: i32, pairs: &[(i32, &[u8], i32, &[u8])]) -> Vec<u8> {
    let mut out = count.to_ne_bytes().to_vec();
    for (key_len, key, value_len, value) in pairs {
        out.extend(key_len.to_ne_bytes());
        out.extend_from_slice(key);
        out.extend(value_len.to_ne_bytes());
        out.extend_from_slice(value);
    }
    out
}

/// A truthful blob of one pair.
pub fn one_pair(key: &[u8], value: &[u8]) -> Vec<u8> {
    write(1, &[(key.len() as i32, key, value.len() as i32, value)])
}

/// The most a backed blob may claim, so that every case stays cheap.
#[derive(Debug, Clone, Copy)]
pub struct Caps {
    /// The most pairs the count may state.
    pub pairs: i32,
    /// The longest key or value a length may state.
    pub string: i32,
    /// The most bytes the blob may span: a pair that would start within 8
    /// bytes of it is dropped (the count lowered to the pairs before it),
    /// a length that would run past it shortened.
    pub total: usize,
}

/// Follows `blob` as the spec's reader does, zero-filling what it would
/// read past the end and lowering counts and lengths above `caps`. A
/// reader stops at a negative count or length (it cannot follow one), so
/// nothing after one is backed, and the value stays for the consumer to
/// reject.
pub fn back(blob: &mut Vec<u8>, caps: &Caps) {
    let count = int32_capped(blob, 0, caps.pairs);
    let mut at = 4;
    for pair in 0..count.max(0) {
        if at + 8 > caps.total {
            blob[0..4].copy_from_slice(&pair.to_ne_bytes());
            return;
        }
        for _ in 0..2 {
            let room = caps.total.saturating_sub(at + 4);
            let max = i32::try_from(room).unwrap_or(i32::MAX).min(caps.string);
            let len = int32_capped(blob, at, max);
            if len < 0 {
                return;
            }
            at += 4 + len as usize;
            if blob.len() < at {
                blob.resize(at, 0);
            }
        }
    }
}

/// The int32 at `at`, lowered to `max` (in the blob too); the blob is grown
/// with zeros to hold it.
fn int32_capped(blob: &mut Vec<u8>, at: usize, max: i32) -> i32 {
    if blob.len() < at + 4 {
        blob.resize(at + 4, 0);
    }
    let value = i32::from_ne_bytes(blob[at..at + 4].try_into().expect("four bytes"));
    if value > max {
        blob[at..at + 4].copy_from_slice(&max.to_ne_bytes());
    }
    value.min(max)
}

#[cfg(test)]
mod tests {
    use super::*;

    const UNCAPPED: Caps = Caps {
        pairs: i32::MAX,
        string: i32::MAX,
        total: usize::MAX,
    };

    #[test]
    fn a_truthful_blob_is_left_as_it_is() {
        let blob = one_pair(b"key", b"value");
        let mut backed = blob.clone();
        back(&mut backed, &UNCAPPED);
        assert_eq!(backed, blob);
    }

    #[test]
    fn counts_and_lengths_above_the_caps_are_lowered() {
        let mut blob = write(100, &[(1, b"k", 50, b"v")]);
        let caps = Caps {
            pairs: 2,
            string: 8,
            ..UNCAPPED
        };
        back(&mut blob, &caps);
        let int = |at: usize| i32::from_ne_bytes(blob[at..at + 4].try_into().unwrap());
        assert_eq!(int(0), 2);
        assert_eq!(int(9), 8, "the value's length is capped");
        // Pair 0: key 1 + value 8; pair 1: two zero lengths from the fill.
        assert_eq!(blob.len(), 4 + (4 + 1) + (4 + 8) + 8);
    }

    #[test]
    fn a_negative_length_stops_the_backing() {
        let mut blob = write(3, &[(-1, b"", 0, b"")]);
        back(&mut blob, &UNCAPPED);
        assert_eq!(blob, write(3, &[(-1, b"", 0, b"")]));
    }
}

//! Real memory behind the strided buffers of the tensor targets (`dlpack`,
//! `cai`), and the values a reader must find in it.
//!
//! Neither a DLPack tensor nor a `__cuda_array_interface__` dict says how
//! much memory its pointer holds: a consumer may read every element its
//! shape and strides reach. So a target backs exactly that span with real
//! memory ([`filled`]) when it fits [`MAX_BACKED`], and otherwise hands over
//! [`OPAQUE_ADDRESS`] where nothing reads it; a crash is then the
//! consumer's fault, not the harness's.

use arrow_array::{make_array, ArrayRef, BooleanArray};
use arrow_buffer::Buffer;
use arrow_data::ArrayData;
use arrow_schema::DataType;

/// The most bytes of real memory behind one pointer.
pub const MAX_BACKED: usize = 64 * 1024;
/// A stand-in address for memory that is not real: never dereferenced.
pub const OPAQUE_ADDRESS: usize = 0x7e57_0000_0000;

/// `len` bytes of real memory, 8-byte aligned (at least one word), holding
/// `values` repeated (zeros when there are none); and those bytes.
pub fn filled(len: usize, values: &[u8]) -> (Vec<u64>, Vec<u8>) {
    let fill: Vec<u8> = if values.is_empty() {
        vec![0; len]
    } else {
        values.iter().copied().cycle().take(len).collect()
    };
    let mut words = vec![0u64; len.div_ceil(8).max(1)];
    // SAFETY: `words` holds at least `len` bytes.
    unsafe { std::ptr::copy_nonoverlapping(fill.as_ptr(), words.as_mut_ptr().cast(), len) };
    (words, fill)
}

/// How far an array of `shape` with `strides` (in any unit) reaches from
/// its first element: `(low, high)`, the most negative and most positive
/// offsets of an element; `None` where that overflows. Every extent must
/// be positive (an empty array reaches nothing, which callers say first).
pub fn reach(shape: &[i64], strides: impl IntoIterator<Item = i128>) -> Option<(i128, i128)> {
    let (mut low, mut high) = (0i128, 0i128);
    for (extent, stride) in shape.iter().zip(strides) {
        let reach = i128::from(extent - 1).checked_mul(stride)?;
        if reach < 0 {
            low = low.checked_add(reach)?;
        } else {
            high = high.checked_add(reach)?;
        }
    }
    Some((low, high))
}

/// The array of `len` values of `data_type` whose bytes are `bytes`: a
/// primitive array over them, or for `Boolean` one byte a value. `what`
/// names the import (`tensor`, `plan`) when `bytes` is too short, which
/// means the harness backed less than the library read.
pub fn expected_values(data_type: &DataType, len: usize, bytes: &[u8], what: &str) -> ArrayRef {
    if *data_type == DataType::Boolean {
        return std::sync::Arc::new(BooleanArray::from_iter(
            bytes[..len].iter().map(|b| Some(*b != 0)),
        ));
    }
    let width = data_type.primitive_width().expect("a primitive type");
    assert!(
        bytes.len() >= len * width,
        "an imported {what} of {len} {data_type} values reads past the {} bytes it claims",
        bytes.len()
    );
    let data = ArrayData::builder(data_type.clone())
        .len(len)
        .add_buffer(Buffer::from(&bytes[..len * width]))
        .build()
        .expect("a primitive array");
    make_array(data)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filled_memory_repeats_the_values_and_rounds_up_to_words() {
        let (words, fill) = filled(5, &[1, 2]);
        assert_eq!(fill, [1, 2, 1, 2, 1]);
        assert_eq!(words.len(), 1);
        assert_eq!(words[0].to_ne_bytes()[..5], [1, 2, 1, 2, 1]);
        assert_eq!(
            filled(0, &[]).0.len(),
            1,
            "an empty allocation has one word"
        );
    }

    #[test]
    fn reach_covers_negative_strides_and_overflows_to_none() {
        assert_eq!(reach(&[4, 3], [3, 1]), Some((0, 11)));
        assert_eq!(reach(&[4], [-2]), Some((-6, 0)));
        assert_eq!(reach(&[i64::MAX], [i128::MAX]), None);
    }
}

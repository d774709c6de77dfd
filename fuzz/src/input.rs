//! The byte format every target decodes its input with, and its encoder.
//!
//! A target reads its input front to back through [`Input`]: fixed-width
//! little-endian integers and length-prefixed byte strings, taken from an
//! [`arbitrary::Unstructured`]. Reads past the end yield zeros (and empty
//! byte strings), so every byte string decodes to some case: libFuzzer's
//! mutations land on structure, not on parse errors of the harness.
//!
//! [`Encoder`] writes exactly what [`Input`] reads, so seeds (the golden
//! streams, the malformed suites' cases) are encoded into inputs that
//! decode back to the same case, and the committed corpus can be read.

use arbitrary::Unstructured;

/// A decoder over a fuzz input.
pub struct Input<'a> {
    u: Unstructured<'a>,
}

macro_rules! read_int {
    ($($name:ident: $ty:ty),*) => {$(
        /// The next little-endian value; zero bytes past the end.
        pub fn $name(&mut self) -> $ty {
            let mut bytes = [0u8; std::mem::size_of::<$ty>()];
            // Pads with zeros where the input is short; never fails.
            let _ = self.u.fill_buffer(&mut bytes);
            <$ty>::from_le_bytes(bytes)
        }
    )*};
}

impl<'a> Input<'a> {
    pub fn new(data: &'a [u8]) -> Self {
        Input {
            u: Unstructured::new(data),
        }
    }

    read_int!(u8: u8, u16: u16, u32: u32, u64: u64, i32: i32, i64: i64);

    /// The next byte as a flag (its lowest bit).
    pub fn bool(&mut self) -> bool {
        self.u8() & 1 == 1
    }

    /// The next byte, reduced below `n` (which must be > 0).
    pub fn below(&mut self, n: usize) -> usize {
        self.u8() as usize % n
    }

    /// A byte string: a u16 length, then that many bytes (fewer where the
    /// input ends first).
    pub fn bytes(&mut self) -> &'a [u8] {
        let len = self.u16() as usize;
        let len = len.min(self.u.len());
        self.u.bytes(len).unwrap_or_default()
    }

    /// Whether the input is used up.
    pub fn is_empty(&self) -> bool {
        self.u.is_empty()
    }
}

/// Writes what [`Input`] reads, for seeds.
#[derive(Default)]
pub struct Encoder {
    out: Vec<u8>,
}

macro_rules! write_int {
    ($($name:ident: $ty:ty),*) => {$(
        pub fn $name(&mut self, value: $ty) -> &mut Self {
            self.out.extend_from_slice(&value.to_le_bytes());
            self
        }
    )*};
}

impl Encoder {
    pub fn new() -> Self {
        Encoder::default()
    }

    write_int!(u8: u8, u16: u16, u32: u32, u64: u64, i32: i32, i64: i64);

    pub fn bool(&mut self, value: bool) -> &mut Self {
        self.u8(value as u8)
    }

    /// What [`Input::bytes`] reads back as `bytes`; at most `u16::MAX` bytes.
    pub fn bytes(&mut self, bytes: &[u8]) -> &mut Self {
        let len = u16::try_from(bytes.len()).expect("seed byte strings fit a u16 length");
        self.u16(len);
        self.out.extend_from_slice(bytes);
        self
    }

    pub fn finish(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_the_encoder_writes_decodes_back() {
        let data = Encoder::new()
            .u8(7)
            .u16(513)
            .i32(-2)
            .i64(i64::MIN)
            .bytes(b"abc")
            .bool(true)
            .finish();
        let mut input = Input::new(&data);
        assert_eq!(input.u8(), 7);
        assert_eq!(input.u16(), 513);
        assert_eq!(input.i32(), -2);
        assert_eq!(input.i64(), i64::MIN);
        assert_eq!(input.bytes(), b"abc");
        assert!(input.bool());
        assert!(input.is_empty());
        // Past the end: zeros and empty strings, never a failure.
        assert_eq!(input.u64(), 0);
        assert_eq!(input.bytes(), b"");
    }

    #[test]
    fn a_byte_string_longer_than_the_input_is_cut_short() {
        let mut input = Input::new(&[5, 0, b'x', b'y']);
        assert_eq!(input.bytes(), b"xy");
    }
}

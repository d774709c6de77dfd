//! What the two stream targets (`sync_stream`, `async_stream`) hand over,
//! and how their inputs name it. Both targets' byte layouts embed these
//! encodings, so a change here changes both corpora.
//!
//! * this file: devices, validation levels, failures and metadata;
//! * `kinds`: the stream kinds with fixed schemas, and their data;
//! * `schemas`: the schema a producer hands over, fixed or input-built;
//! * `arrays`: the arrays a producer hands over, and what a consumer must
//!   find in them;
//! * `ledger`: the release counters of everything a producer built.
//!
//! The layouts of the pieces both targets' inputs are made of:
//!
//! ```text
//! Device   := index:u8 [raw:i32 when index % 9 == 8]
//!            (CPU, CUDA, CUDA_HOST, EXT_DEV, ROCM, CUDA_MANAGED, 0, -7, raw)
//! Failure  := code:u8 [raw:i32 when % 5 == 4] message:u8 [bytes when
//!             % 3 == 1]; code: EINVAL, EIO, ENOMEM, ENOSYS, raw;
//!             message: NULL, bytes, non-UTF-8
//! Meta     := choice:u8 [key:bytes value:bytes when % 4 == 1]; choice
//!             % 4: NULL, one pair, count -1, count 0
//! ```

use std::ffi::{c_int, CString};

use arrow_device::abi::DeviceType;
use arrow_device::ValidationLevel;

use crate::input::{Encoder, Input};
use crate::metadata;

mod arrays;
mod kinds;
mod ledger;
mod schemas;

pub(crate) use arrays::{check_after_release, ArrayDesc, Expected, Label};
pub(crate) use kinds::KINDS;
pub(crate) use ledger::Ledger;
pub(crate) use schemas::{kind_and_shape, NodeDesc, SchemaPick};

/// Device types the input picks from; index 8 reads a raw `i32`.
const DEVICES: [i32; 8] = [1, 2, 3, 12, 10, 13, 0, -7];

pub(crate) fn decode_device(input: &mut Input) -> DeviceChoice {
    let index = input.u8();
    if index as usize % 9 == 8 {
        DeviceChoice::Raw(input.i32())
    } else {
        DeviceChoice::Palette(index % 9)
    }
}

/// A device type as the input names it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum DeviceChoice {
    /// An index into the palette (below 8).
    Palette(u8),
    Raw(i32),
}

impl DeviceChoice {
    pub(crate) const CPU: DeviceChoice = DeviceChoice::Palette(0);
    pub(crate) const CUDA: DeviceChoice = DeviceChoice::Palette(1);
    pub(crate) const CUDA_HOST: DeviceChoice = DeviceChoice::Palette(2);
    pub(crate) const EXT_DEV: DeviceChoice = DeviceChoice::Palette(3);

    pub(crate) fn device_type(self) -> DeviceType {
        match self {
            DeviceChoice::Palette(i) => DeviceType(DEVICES[i as usize % 8]),
            DeviceChoice::Raw(raw) => DeviceType(raw),
        }
    }

    pub(crate) fn encode(self, e: &mut Encoder) {
        match self {
            DeviceChoice::Palette(i) => e.u8(i),
            DeviceChoice::Raw(raw) => e.u8(8).i32(raw),
        };
    }
}

pub(crate) fn level_of(byte: u8) -> ValidationLevel {
    [
        ValidationLevel::None,
        ValidationLevel::Minimal,
        ValidationLevel::Default,
        ValidationLevel::Full,
    ][byte as usize % 4]
}

/// An error code and message a producer fails with.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Failure {
    /// 0 to 3 from the palette, 4 raw.
    pub code: u8,
    pub raw_code: i32,
    pub message: Message,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Message {
    Null,
    Bytes(Vec<u8>),
    /// Bytes that are not UTF-8.
    Broken,
}

impl Failure {
    pub(crate) fn new(code: i32, message: &str) -> Failure {
        Failure {
            code: 4,
            raw_code: code,
            message: Message::Bytes(message.as_bytes().to_vec()),
        }
    }

    pub(crate) fn decode(input: &mut Input) -> Failure {
        let code = input.u8() % 5;
        let raw_code = if code == 4 { input.i32() } else { 0 };
        let message = match input.u8() % 3 {
            0 => Message::Null,
            1 => Message::Bytes(input.bytes().to_vec()),
            _ => Message::Broken,
        };
        Failure {
            code,
            raw_code,
            message,
        }
    }

    pub(crate) fn encode(&self, e: &mut Encoder) {
        e.u8(self.code);
        if self.code == 4 {
            e.i32(self.raw_code);
        }
        match &self.message {
            Message::Null => e.u8(0),
            Message::Bytes(bytes) => e.u8(1).bytes(bytes),
            Message::Broken => e.u8(2),
        };
    }

    pub(crate) fn code(&self) -> c_int {
        match self.code {
            0 => libc::EINVAL,
            1 => libc::EIO,
            2 => libc::ENOMEM,
            3 => libc::ENOSYS,
            _ => self.raw_code,
        }
    }

    /// The message as a C string (NULs dropped), `None` for NULL.
    pub(crate) fn c_message(&self) -> Option<CString> {
        let bytes = match &self.message {
            Message::Null => return None,
            Message::Bytes(bytes) => bytes.clone(),
            Message::Broken => b"broken \xff\xfe\xc3 message".to_vec(),
        };
        let bytes: Vec<u8> = bytes.into_iter().filter(|b| *b != 0).collect();
        Some(CString::new(bytes).expect("NULs were dropped"))
    }
}

/// Metadata as the input picks it (`Meta` above).
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct MetaDesc {
    /// % 4: NULL, one pair, count -1, count 0.
    pub choice: u8,
    /// The one pair's key and value.
    pub pair: (Vec<u8>, Vec<u8>),
}

impl MetaDesc {
    pub(crate) fn decode(input: &mut Input) -> MetaDesc {
        let choice = input.u8();
        let pair = if choice % 4 == 1 {
            (input.bytes().to_vec(), input.bytes().to_vec())
        } else {
            (Vec::new(), Vec::new())
        };
        MetaDesc { choice, pair }
    }

    pub(crate) fn encode(&self, e: &mut Encoder) {
        e.u8(self.choice);
        if self.choice % 4 == 1 {
            e.bytes(&self.pair.0).bytes(&self.pair.1);
        }
    }

    /// The blob, `None` for NULL.
    pub(crate) fn blob(&self) -> Option<Vec<u8>> {
        metadata_of(self.choice, &self.pair.0, &self.pair.1)
    }
}

/// The metadata blob of `choice % 4` (as in [`MetaDesc`]), `key` and
/// `value` being the one pair.
pub(crate) fn metadata_of(choice: u8, key: &[u8], value: &[u8]) -> Option<Vec<u8>> {
    match choice % 4 {
        0 => None,
        1 => Some(metadata::one_pair(key, value)),
        2 => Some((-1i32).to_ne_bytes().to_vec()),
        _ => Some(0i32.to_ne_bytes().to_vec()),
    }
}

/// Named cases as named inputs, each written with `encode`.
pub(crate) fn encode_all<C>(
    cases: Vec<(&str, C)>,
    encode: impl Fn(&C) -> Vec<u8>,
) -> Vec<(String, Vec<u8>)> {
    cases
        .into_iter()
        .map(|(name, case)| (name.to_string(), encode(&case)))
        .collect()
}

/// Panics unless every seed decodes to a case that `reencode` (decode,
/// then encode) writes back byte for byte: the encoder of the seeds and the
/// decoder of the target agree on the layout.
#[cfg(test)]
pub(crate) fn assert_seeds_reencode(
    seeds: Vec<(String, Vec<u8>)>,
    reencode: impl Fn(&[u8]) -> Vec<u8>,
) {
    for (name, data) in seeds {
        assert_eq!(reencode(&data), data, "seed {name}");
    }
}

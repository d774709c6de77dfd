//! A decoded `sync_stream` input ([`SyncCase`]): how the stream reaches
//! its consumer, and the producer's answers, in the byte layout that the
//! module documentation of [`crate::sync_stream`] gives.

use crate::input::{Encoder, Input};
use crate::producer::SchemaNode;
use crate::stream_cases::{
    decode_device, kind_and_shape, ArrayDesc, DeviceChoice, Failure, SchemaPick,
};

/// `get_schema`'s answer; no schema is a failure.
pub(super) type SchemaAnswer = SchemaPick<Failure>;

#[derive(Debug, Clone, PartialEq)]
pub(super) enum NextAnswer {
    Array(ArrayDesc),
    End,
    GarbageEnd,
    Fail(Failure),
}

impl NextAnswer {
    fn decode(input: &mut Input) -> NextAnswer {
        match input.u8() % 5 {
            0 => NextAnswer::Array(ArrayDesc::decode_data(input)),
            1 => NextAnswer::Array(ArrayDesc::decode_inert(input)),
            2 => NextAnswer::End,
            3 => NextAnswer::GarbageEnd,
            _ => NextAnswer::Fail(Failure::decode(input)),
        }
    }

    fn encode(&self, e: &mut Encoder) {
        match self {
            NextAnswer::Array(desc @ ArrayDesc::Data { .. }) => desc.encode(e.u8(0)),
            NextAnswer::Array(desc @ ArrayDesc::Inert { .. }) => desc.encode(e.u8(1)),
            NextAnswer::End => {
                e.u8(2);
            }
            NextAnswer::GarbageEnd => {
                e.u8(3);
            }
            NextAnswer::Fail(failure) => failure.encode(e.u8(4)),
        }
    }
}

/// How the stream reaches its consumer.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Path {
    TryNew,
    TryFromRaw,
    ToArrowRs,
    FromC,
    CRoundTrip,
    DeviceRoundTrip,
}

pub(super) const PATHS: [Path; 6] = [
    Path::TryNew,
    Path::TryFromRaw,
    Path::ToArrowRs,
    Path::FromC,
    Path::CRoundTrip,
    Path::DeviceRoundTrip,
];

impl Path {
    /// Whether arrow-rs' reader, which trusts every array, reads the arrays.
    pub(super) fn arrow_rs_reads(self) -> bool {
        matches!(self, Path::ToArrowRs | Path::CRoundTrip)
    }

    /// Whether the producer is a plain C stream.
    pub(super) fn c_producer(self) -> bool {
        matches!(self, Path::FromC | Path::CRoundTrip)
    }
}

/// One decoded input.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct SyncCase {
    pub path: u8,
    pub flags: u8,
    pub device: DeviceChoice,
    pub level: u8,
    pub consume: u8,
    pub take: u8,
    pub schemas: Vec<SchemaAnswer>,
    pub nexts: Vec<NextAnswer>,
}

impl SyncCase {
    pub(super) fn decode(data: &[u8]) -> SyncCase {
        let mut input = Input::new(data);
        let path = input.u8();
        let flags = input.u8();
        let device = decode_device(&mut input);
        let level = input.u8();
        let consume = input.u8();
        let take = input.u8();
        let n_schemas = input.u8() % 4;
        let schemas = (0..n_schemas)
            .map(|_| {
                let tag = input.u8();
                SchemaAnswer::decode(tag, &mut input, Failure::decode)
            })
            .collect();
        let n_nexts = input.u8() % 17;
        let nexts = (0..n_nexts)
            .map(|_| NextAnswer::decode(&mut input))
            .collect();
        SyncCase {
            path,
            flags,
            device,
            level,
            consume,
            take,
            schemas,
            nexts,
        }
    }

    pub(super) fn encode(&self) -> Vec<u8> {
        let mut e = Encoder::new();
        e.u8(self.path).u8(self.flags);
        self.device.encode(&mut e);
        e.u8(self.level)
            .u8(self.consume)
            .u8(self.take)
            .u8(self.schemas.len() as u8);
        for schema in &self.schemas {
            schema.encode(&mut e, 0, |e, failure| failure.encode(e));
        }
        e.u8(self.nexts.len() as u8);
        for next in &self.nexts {
            next.encode(&mut e);
        }
        e.finish()
    }

    pub(super) fn path(&self) -> Path {
        PATHS[self.path as usize % PATHS.len()]
    }

    /// Makes every array safe for the consumer that reads it: arrow-rs'
    /// readers get only valid schemas (never a 0 without one) and arrays of
    /// the stream's kind (they trust both); a stream with any input-built
    /// schema carries only inert arrays (an array of a fixed kind could be
    /// misread under it).
    pub(super) fn normalize(&mut self) {
        if self.path().arrow_rs_reads() {
            for schema in &mut self.schemas {
                match schema {
                    SchemaAnswer::Built(_) | SchemaAnswer::Released => {
                        *schema = SchemaAnswer::Fixed {
                            kind: 1,
                            renamed: false,
                        }
                    }
                    // 0 without a schema: arrow-rs reads the released
                    // struct (it asserts on its NULL format).
                    SchemaAnswer::NoSchema(failure) if failure.code() == 0 => failure.code = 0,
                    _ => {}
                }
            }
            for next in &mut self.nexts {
                if let NextAnswer::Array(desc) = next {
                    *desc = desc.for_arrow_rs();
                }
            }
        } else if self.schemas.iter().any(SchemaAnswer::is_built) {
            for next in &mut self.nexts {
                if let NextAnswer::Array(desc) = next {
                    *desc = desc.inert();
                }
            }
        }
    }

    /// The kind of the stream's data and the schema inert arrays follow:
    /// those of the first answer.
    pub(super) fn kind_and_shape(&self) -> (u8, SchemaNode) {
        kind_and_shape(self.schemas.first())
    }
}

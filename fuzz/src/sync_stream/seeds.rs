//! The named inputs of the `sync_stream` target.

use super::case::{NextAnswer, Path, SchemaAnswer, SyncCase, PATHS};
use crate::stream_cases::{
    encode_all, ArrayDesc, DeviceChoice, Failure, Label, Message, MetaDesc, NodeDesc,
};

fn clean(nexts: Vec<NextAnswer>) -> SyncCase {
    SyncCase {
        path: 0,
        flags: 0,
        device: DeviceChoice::CPU,
        level: 3,
        consume: 0,
        take: 0,
        schemas: vec![SchemaAnswer::Fixed {
            kind: 1,
            renamed: false,
        }],
        nexts,
    }
}

fn batch(rows: u8, seed: u32) -> NextAnswer {
    NextAnswer::Array(ArrayDesc::data(rows, seed))
}

fn three_batches() -> Vec<NextAnswer> {
    vec![batch(3, 1), batch(4, 2), batch(2, 3), NextAnswer::End]
}

fn with_schema(mut case: SyncCase, schema: SchemaAnswer) -> SyncCase {
    case.schemas = vec![schema];
    case
}

fn on_path(mut case: SyncCase, path: Path) -> SyncCase {
    case.path = PATHS.iter().position(|p| *p == path).unwrap() as u8;
    case
}

fn labelled(label: Label) -> NextAnswer {
    NextAnswer::Array(ArrayDesc::Data {
        kind_delta: 0,
        rows: 2,
        seed: 9,
        label,
    })
}

/// Named inputs, each decoding to the case its name says.
pub fn seeds() -> Vec<(String, Vec<u8>)> {
    let fail = |code: i32, message: &str| NextAnswer::Fail(Failure::new(code, message));
    let mut cases: Vec<(&str, SyncCase)> = vec![
        ("clean-3-batches", clean(three_batches())),
        (
            "every-kind-through-the-host-reader",
            SyncCase {
                consume: 1,
                ..with_schema(
                    clean(three_batches()),
                    SchemaAnswer::Fixed {
                        kind: 3,
                        renamed: false,
                    },
                )
            },
        ),
        (
            "plain-int32-stream",
            with_schema(
                clean(three_batches()),
                SchemaAnswer::Fixed {
                    kind: 4,
                    renamed: false,
                },
            ),
        ),
        (
            "record-batch-reader-of-lists",
            SyncCase {
                consume: 2,
                level: 0,
                ..with_schema(
                    clean(three_batches()),
                    SchemaAnswer::Fixed {
                        kind: 2,
                        renamed: false,
                    },
                )
            },
        ),
        (
            "error-mid-stream",
            clean(vec![
                batch(2, 1),
                fail(libc::EIO, "disk on fire"),
                batch(2, 2),
            ]),
        ),
        (
            "error-with-null-message",
            clean(vec![
                batch(1, 1),
                NextAnswer::Fail(Failure {
                    code: 2,
                    raw_code: 0,
                    message: Message::Null,
                }),
            ]),
        ),
        (
            "error-with-non-utf8-message",
            clean(vec![NextAnswer::Fail(Failure {
                code: 0,
                raw_code: 0,
                message: Message::Broken,
            })]),
        ),
        (
            "end-then-get-next-again",
            SyncCase {
                consume: 2 << 2,
                ..on_path(
                    clean(vec![
                        batch(2, 1),
                        NextAnswer::End,
                        batch(3, 2),
                        NextAnswer::End,
                    ]),
                    Path::ToArrowRs,
                )
            },
        ),
        (
            "mismatching-batch",
            clean(vec![
                batch(2, 1),
                NextAnswer::Array(ArrayDesc::Data {
                    kind_delta: 1,
                    rows: 2,
                    seed: 5,
                    label: Label::SAME,
                }),
            ]),
        ),
        (
            "batch-on-another-device",
            clean(vec![batch(1, 1), labelled(Label::on(DeviceChoice::CUDA))]),
        ),
        (
            "cpu-batch-with-a-sync-event",
            clean(vec![labelled(Label {
                bits: 4,
                ..Label::SAME
            })]),
        ),
        (
            "garbage-end-marker",
            clean(vec![batch(2, 1), NextAnswer::GarbageEnd]),
        ),
        (
            "get-schema-fails",
            with_schema(
                clean(three_batches()),
                SchemaAnswer::NoSchema(Failure::new(libc::ENOMEM, "no schema today")),
            ),
        ),
        (
            "released-schema",
            with_schema(clean(three_batches()), SchemaAnswer::Released),
        ),
        (
            "schema-changes-between-calls",
            SyncCase {
                schemas: vec![
                    SchemaAnswer::Fixed {
                        kind: 1,
                        renamed: true,
                    },
                    SchemaAnswer::Fixed {
                        kind: 0,
                        renamed: false,
                    },
                ],
                ..clean(three_batches())
            },
        ),
        (
            "built-schema-with-inert-arrays",
            with_schema(
                clean(vec![
                    NextAnswer::Array(ArrayDesc::Inert {
                        perturb: 0,
                        label: Label::SAME,
                    }),
                    NextAnswer::Array(ArrayDesc::Inert {
                        perturb: 1,
                        label: Label::SAME,
                    }),
                ]),
                SchemaAnswer::Built(NodeDesc {
                    format: 28,                                            // "+s"
                    children: vec![NodeDesc::leaf(15), NodeDesc::leaf(8)], // "u", "l"
                    ..NodeDesc::leaf(28)
                }),
            ),
        ),
        (
            "built-schema-malformed",
            with_schema(
                clean(vec![NextAnswer::Array(ArrayDesc::Inert {
                    perturb: 0,
                    label: Label::SAME,
                })]),
                SchemaAnswer::Built(NodeDesc {
                    format: 0xFF,
                    raw_format: b"+w:".to_vec(),
                    meta: MetaDesc {
                        choice: 1,
                        pair: (b"key".to_vec(), b"\xff value".to_vec()),
                    },
                    ..NodeDesc::leaf(0)
                }),
            ),
        ),
        (
            "c-stream-bridge",
            on_path(clean(three_batches()), Path::FromC),
        ),
        (
            "c-stream-round-trip-to-arrow-rs",
            on_path(
                clean(vec![batch(2, 1), fail(libc::EINVAL, "bad"), batch(1, 1)]),
                Path::CRoundTrip,
            ),
        ),
        (
            "device-stream-round-trip",
            on_path(clean(three_batches()), Path::DeviceRoundTrip),
        ),
        (
            "from-raw-early-drop",
            SyncCase {
                take: 1,
                ..on_path(clean(three_batches()), Path::TryFromRaw)
            },
        ),
        (
            "handed-over-released",
            SyncCase {
                flags: 1,
                ..clean(three_batches())
            },
        ),
        (
            "get-next-null",
            SyncCase {
                flags: 4,
                ..clean(three_batches())
            },
        ),
        (
            "emulated-device-stream",
            SyncCase {
                device: DeviceChoice::EXT_DEV,
                ..clean(three_batches())
            },
        ),
        (
            "pinned-host-stream",
            SyncCase {
                device: DeviceChoice::CUDA_HOST,
                ..clean(three_batches())
            },
        ),
    ];
    cases.push((
        "bridge-refuses-device-batch",
        on_path(
            clean(vec![batch(1, 1), labelled(Label::on(DeviceChoice::CUDA))]),
            Path::ToArrowRs,
        ),
    ));
    encode_all(cases, SyncCase::encode)
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::stream_cases::assert_seeds_reencode;

    #[test]
    fn every_seed_decodes_back_to_its_case() {
        assert_seeds_reencode(seeds(), |data| SyncCase::decode(data).encode());
    }
}

//! The named inputs of the `async_stream` target.

use super::case::{
    Action, AsyncCase, EXTRACT_FAILS, EXTRACT_NORMAL, EXTRACT_NULL, NULL_POINTER, WITH_METADATA,
};
use crate::stream_cases::{
    encode_all, ArrayDesc, DeviceChoice, Failure, Label, Message, MetaDesc, NodeDesc, SchemaPick,
};

fn schema(kind: u8) -> Action {
    Action::Schema {
        pick: SchemaPick::Fixed {
            kind,
            renamed: false,
        },
        unset_producer: false,
    }
}

fn task(rows: u8, seed: u32) -> Action {
    Action::Task {
        array: ArrayDesc::data(rows, seed),
        flavor: EXTRACT_NORMAL,
    }
}

fn case(actions: Vec<Action>) -> AsyncCase {
    AsyncCase {
        queue_size: 4,
        level: 3,
        device: DeviceChoice::CPU,
        flags: 0,
        meta: MetaDesc::default(),
        on_request: 0,
        on_cancel: 0,
        actions,
    }
}

/// Named inputs, each decoding to the case its name says.
pub fn seeds() -> Vec<(String, Vec<u8>)> {
    let clean = || {
        vec![
            schema(1),
            task(3, 1),
            Action::Poll(0),
            task(2, 2),
            task(4, 3),
            Action::End,
            Action::Release,
        ]
    };
    let cases: Vec<(&str, AsyncCase)> = vec![
        ("clean-3-batches", case(clean())),
        (
            "every-kind-with-metadata",
            AsyncCase {
                meta: MetaDesc {
                    choice: 1,
                    pair: (b"rows".to_vec(), b"9".to_vec()),
                },
                ..case(vec![
                    schema(3),
                    Action::Task {
                        array: ArrayDesc::data(4, 1),
                        flavor: EXTRACT_NORMAL | WITH_METADATA,
                    },
                    Action::Poll(1),
                    Action::End,
                ])
            },
        ),
        (
            "pending-then-task-wakes",
            case(vec![
                Action::Poll(0),
                schema(0),
                Action::Poll(0),
                task(2, 1),
                Action::Poll(0),
                Action::End,
                Action::Poll(0),
            ]),
        ),
        (
            "wait-schema-before-and-after",
            case(vec![
                Action::PollSchema,
                schema(4),
                Action::PollSchema,
                task(3, 1),
                Action::End,
            ]),
        ),
        (
            "task-before-schema",
            case(vec![task(1, 1), schema(1), task(1, 2), Action::End]),
        ),
        (
            "two-schemas",
            case(vec![schema(1), schema(2), task(1, 1), Action::End]),
        ),
        (
            "error-after-end",
            case(vec![
                schema(1),
                task(2, 1),
                Action::End,
                Action::Error {
                    failure: Failure::new(libc::EIO, "too late"),
                    meta: 1,
                },
            ]),
        ),
        (
            "error-mid-stream-null-message",
            case(vec![
                schema(1),
                task(2, 1),
                Action::Error {
                    failure: Failure {
                        code: 2,
                        raw_code: 0,
                        message: Message::Null,
                    },
                    meta: 0,
                },
                Action::Release,
                Action::Poll(3),
            ]),
        ),
        (
            "null-extract-data",
            case(vec![
                schema(1),
                Action::Task {
                    array: ArrayDesc::data(2, 1),
                    flavor: EXTRACT_NULL,
                },
                task(1, 2),
                Action::End,
            ]),
        ),
        (
            "extract-data-fails",
            case(vec![
                schema(1),
                Action::Task {
                    array: ArrayDesc::data(2, 1),
                    flavor: EXTRACT_FAILS,
                },
                Action::Poll(0),
                Action::Error {
                    failure: Failure::new(libc::EIO, "the decode failed"),
                    meta: 2,
                },
            ]),
        ),
        (
            "wrong-device-type",
            case(vec![
                schema(1),
                Action::Task {
                    array: ArrayDesc::Data {
                        kind_delta: 0,
                        rows: 2,
                        seed: 1,
                        label: Label::on(DeviceChoice::CUDA),
                    },
                    flavor: EXTRACT_NORMAL,
                },
                task(1, 2),
                Action::End,
            ]),
        ),
        (
            "mismatching-batch-cancel-errors",
            AsyncCase {
                on_cancel: 1,
                ..case(vec![
                    schema(1),
                    Action::Task {
                        array: ArrayDesc::Data {
                            kind_delta: 2,
                            rows: 2,
                            seed: 1,
                            label: Label::SAME,
                        },
                        flavor: EXTRACT_NORMAL,
                    },
                    Action::Poll(1),
                    task(1, 2),
                ])
            },
        ),
        (
            "eager-tasks-from-request",
            AsyncCase {
                queue_size: 2,
                on_request: 1,
                ..case(vec![schema(1), Action::Poll(3), Action::End])
            },
        ),
        (
            "finish-from-request",
            AsyncCase {
                queue_size: 1,
                on_request: 5,
                ..case(vec![schema(2), Action::Poll(2)])
            },
        ),
        (
            "release-from-request",
            AsyncCase {
                on_request: 4,
                ..case(vec![schema(1), task(1, 1), Action::Poll(1)])
            },
        ),
        (
            "release-from-cancel-on-drop",
            AsyncCase {
                on_cancel: 2,
                ..case(vec![
                    schema(1),
                    task(1, 1),
                    task(1, 2),
                    Action::DropStream,
                    task(1, 3),
                ])
            },
        ),
        (
            "drop-stream-mid-way",
            case(vec![
                schema(1),
                task(1, 1),
                Action::Poll(0),
                task(2, 2),
                Action::DropStream,
                task(1, 3),
                Action::End,
                Action::Release,
            ]),
        ),
        (
            "never-handed-over",
            AsyncCase {
                flags: 4,
                ..case(clean())
            },
        ),
        (
            "producer-not-populated",
            case(vec![
                Action::Schema {
                    pick: SchemaPick::Fixed {
                        kind: 1,
                        renamed: false,
                    },
                    unset_producer: true,
                },
                task(1, 1),
                Action::Release,
            ]),
        ),
        (
            "null-schema-pointer-then-schema",
            case(vec![
                Action::Schema {
                    pick: NULL_POINTER,
                    unset_producer: false,
                },
                schema(1),
                task(1, 1),
                Action::End,
            ]),
        ),
        (
            "released-schema",
            case(vec![
                Action::Schema {
                    pick: SchemaPick::Released,
                    unset_producer: false,
                },
                task(1, 1),
            ]),
        ),
        (
            "built-schema-inert-tasks",
            case(vec![
                Action::Schema {
                    pick: SchemaPick::Built(NodeDesc {
                        children: vec![NodeDesc::leaf(15)],
                        ..NodeDesc::leaf(28)
                    }),
                    unset_producer: false,
                },
                task(2, 1),
                Action::Task {
                    array: ArrayDesc::Inert {
                        perturb: 4,
                        label: Label::SAME,
                    },
                    flavor: EXTRACT_NORMAL,
                },
                Action::End,
            ]),
        ),
        (
            "request-null",
            AsyncCase {
                flags: 1,
                ..case(clean())
            },
        ),
        (
            "beyond-the-credit",
            AsyncCase {
                queue_size: 1,
                ..case(vec![
                    schema(1),
                    task(1, 1),
                    task(1, 2),
                    task(1, 3),
                    Action::End,
                ])
            },
        ),
        (
            "end-before-schema",
            case(vec![Action::End, Action::Release]),
        ),
        (
            "release-without-end",
            case(vec![
                schema(1),
                task(2, 1),
                Action::Release,
                Action::Poll(3),
            ]),
        ),
        (
            "emulated-device",
            AsyncCase {
                device: DeviceChoice::EXT_DEV,
                ..case(clean())
            },
        ),
        (
            "pinned-host-device",
            AsyncCase {
                device: DeviceChoice::CUDA_HOST,
                ..case(clean())
            },
        ),
    ];
    encode_all(cases, AsyncCase::encode)
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::stream_cases::assert_seeds_reencode;

    #[test]
    fn every_seed_decodes_back_to_its_case() {
        assert_seeds_reencode(seeds(), |data| AsyncCase::decode(data).encode());
    }
}

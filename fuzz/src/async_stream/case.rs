//! A decoded `async_stream` input ([`AsyncCase`]): the producer's setup
//! and the script of its actions, in the byte layout that the module
//! documentation of [`crate::async_stream`] gives.

use crate::input::{Encoder, Input};
use crate::producer::SchemaNode;
use crate::stream_cases::{
    decode_device, kind_and_shape, ArrayDesc, DeviceChoice, Failure, MetaDesc, SchemaPick,
};

/// The schema an `on_schema` call passes; no schema is a NULL pointer.
pub(super) type SchemaArg = SchemaPick<()>;

/// `on_schema` with a NULL pointer.
pub(super) const NULL_POINTER: SchemaArg = SchemaPick::NoSchema(());

#[derive(Debug, Clone, PartialEq)]
pub(super) enum Action {
    Schema {
        pick: SchemaArg,
        unset_producer: bool,
    },
    Task {
        array: ArrayDesc,
        flavor: u8,
    },
    End,
    Error {
        failure: Failure,
        meta: u8,
    },
    Poll(u8),
    PollSchema,
    DropStream,
    Release,
}

/// `flavor` bits 0-1: how `extract_data` behaves.
pub(super) const EXTRACT_NORMAL: u8 = 0;
pub(super) const EXTRACT_NULL: u8 = 1;
pub(super) const EXTRACT_FAILS: u8 = 2;
/// `flavor` bit 2: `on_next_task` gets metadata.
pub(super) const WITH_METADATA: u8 = 4;

impl Action {
    fn decode(input: &mut Input) -> Action {
        match input.u8() % 9 {
            0 => {
                let how = input.u8();
                Action::Schema {
                    pick: SchemaPick::decode(how, input, |_| ()),
                    unset_producer: how & 4 != 0,
                }
            }
            1 => {
                let flavor = input.u8();
                Action::Task {
                    array: ArrayDesc::decode_data(input),
                    flavor,
                }
            }
            2 => {
                let flavor = input.u8();
                Action::Task {
                    array: ArrayDesc::decode_inert(input),
                    flavor,
                }
            }
            3 => Action::End,
            4 => Action::Error {
                failure: Failure::decode(input),
                meta: input.u8(),
            },
            5 => Action::Poll(input.u8()),
            6 => Action::PollSchema,
            7 => Action::DropStream,
            _ => Action::Release,
        }
    }

    fn encode(&self, e: &mut Encoder) {
        match self {
            Action::Schema {
                pick,
                unset_producer,
            } => {
                let unset = if *unset_producer { 4 } else { 0 };
                pick.encode(e.u8(0), unset, |_, ()| {});
            }
            Action::Task { array, flavor } => {
                let tag = match array {
                    ArrayDesc::Data { .. } => 1,
                    ArrayDesc::Inert { .. } => 2,
                };
                array.encode(e.u8(tag).u8(*flavor));
            }
            Action::End => {
                e.u8(3);
            }
            Action::Error { failure, meta } => {
                failure.encode(e.u8(4));
                e.u8(*meta);
            }
            Action::Poll(count) => {
                e.u8(5).u8(*count);
            }
            Action::PollSchema => {
                e.u8(6);
            }
            Action::DropStream => {
                e.u8(7);
            }
            Action::Release => {
                e.u8(8);
            }
        }
    }
}

/// One decoded input.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct AsyncCase {
    pub queue_size: u8,
    pub level: u8,
    pub device: DeviceChoice,
    pub flags: u8,
    /// The producer's `additional_metadata`.
    pub meta: MetaDesc,
    pub on_request: u8,
    pub on_cancel: u8,
    pub actions: Vec<Action>,
}

impl AsyncCase {
    pub(super) fn decode(data: &[u8]) -> AsyncCase {
        let mut input = Input::new(data);
        let queue_size = input.u8() % 5;
        let level = input.u8() % 4;
        let device = decode_device(&mut input);
        let flags = input.u8();
        let meta = MetaDesc::decode(&mut input);
        let on_request = input.u8() % 6;
        let on_cancel = input.u8() % 4;
        let n_actions = input.u8() % 33;
        let actions = (0..n_actions).map(|_| Action::decode(&mut input)).collect();
        AsyncCase {
            queue_size,
            level,
            device,
            flags,
            meta,
            on_request,
            on_cancel,
            actions,
        }
    }

    pub(super) fn encode(&self) -> Vec<u8> {
        let mut e = Encoder::new();
        e.u8(self.queue_size).u8(self.level);
        self.device.encode(&mut e);
        e.u8(self.flags);
        self.meta.encode(&mut e);
        e.u8(self.on_request)
            .u8(self.on_cancel)
            .u8(self.actions.len() as u8);
        for action in &self.actions {
            action.encode(&mut e);
        }
        e.finish()
    }

    /// Whether any `on_schema` passes an input-built schema: then every
    /// array is sent inert (see the module documentation).
    pub(super) fn any_built_schema(&self) -> bool {
        self.actions
            .iter()
            .any(|a| matches!(a, Action::Schema { pick, .. } if pick.is_built()))
    }

    /// The kind of the data and the schema inert arrays follow: those of
    /// the first `on_schema`.
    pub(super) fn kind_and_shape(&self) -> (u8, SchemaNode) {
        kind_and_shape(self.actions.iter().find_map(|a| match a {
            Action::Schema { pick, .. } => Some(pick),
            _ => None,
        }))
    }
}

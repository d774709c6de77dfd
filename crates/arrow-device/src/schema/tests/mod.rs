//! Tests of the schema module: format strings, round trips of every type,
//! and the release semantics of exported trees.
//!
//! Trees written by hand, as a careless or hostile C producer would write
//! them, are built by the integration tests' one producer
//! (`tests/common/producer.rs`) and imported through the public API:
//! malformed ones in `tests/malformed/schema.rs` and `schema_shapes.rs`, odd
//! but legal ones in `tests/malformed/accepted.rs`.

mod format;
mod memo;
mod release;
mod round_trip;

use std::collections::HashMap;
use std::ptr::null_mut;
use std::sync::Arc;

use arrow_schema::{
    DataType, Field, Fields, IntervalUnit, Schema, TimeUnit, UnionFields, UnionMode,
};

use super::*;
use crate::abi::{raw, FFI_ArrowSchema};
use crate::error::Error;

type Node = *mut raw::ArrowSchema;

//! Export of arrow-rs fields, schemas and types as `ArrowSchema` structs,
//! through this crate's own writer ([`super::writer`]).
//!
//! A [`DataType`] that has no valid C Data Interface form is refused here, on
//! the producer's side, with [`Error::NotSupported`](crate::Error) naming the
//! node's path and type: a dictionary with a non-integer index, a negative
//! fixed size, a decimal precision out of range for its width, a time unit
//! its width cannot hold, a map with nullable keys, run ends that are not
//! non-nullable Int16/32/64, and names or time zones with a NUL byte.
//! arrow-rs would write some of these as structs that conforming consumers
//! (this crate's importer included) reject.
//!
//! [`DataType`]: arrow_schema::DataType

use arrow_schema::{DataType, Field, Schema};

use super::writer::{self, Node};
use crate::abi::FFI_ArrowSchema;
use crate::error::Result;

/// Exports `field` (name, type, nullability, dictionary ordering, metadata)
/// as an owned `ArrowSchema`, released when dropped or by its consumer.
pub fn export_field(field: &Field) -> Result<FFI_ArrowSchema> {
    writer::write(Node::field(field))
}

/// Exports `schema` as a struct (`+s`) whose children are its fields and whose
/// metadata is the schema's metadata, as a record batch's schema travels. The
/// root has no name and no flags, as arrow-rs writes it.
pub fn export_schema(schema: &Schema) -> Result<FFI_ArrowSchema> {
    // Cloning `Fields` clones one Arc.
    let root = DataType::Struct(schema.fields().clone());
    writer::write(Node {
        metadata: Some(&schema.metadata),
        ..Node::data_type(&root, false)
    })
}

/// Exports a bare type: no name, no metadata, `nullable` as the flag. The
/// schema of an exported array, whose `name` is optional (spec:
/// "ArrowSchema.name").
pub(crate) fn export_data_type(data_type: &DataType, nullable: bool) -> Result<FFI_ArrowSchema> {
    writer::write(Node::data_type(data_type, nullable))
}

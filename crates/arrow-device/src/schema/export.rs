//! Export of arrow-rs fields and schemas as `ArrowSchema` structs.
//!
//! arrow-rs' `FFI_ArrowSchema::try_from` writes the structs; it is correct for
//! every type that arrow-rs can represent (the tests of this module round-trip
//! each one). What it does not do is refuse a [`DataType`] that has no valid C
//! Data Interface form, such as a dictionary with a string index, a negative
//! fixed size, a decimal precision of 0 or a map with nullable keys: it writes
//! a struct that conforming consumers (this crate's importer included) reject.
//! So each export is read back by the importer before it is handed out, and a
//! type that cannot travel fails here, on the producer's side, with the path
//! of the offending node.
//!
//! [`DataType`]: arrow_schema::DataType

use arrow_schema::{Field, Schema};

use super::import::{import_field, import_schema};
use crate::abi::FFI_ArrowSchema;
use crate::error::{Error, Result};

/// Exports `field` (name, type, nullability, dictionary ordering, metadata)
/// as an owned `ArrowSchema`, released when dropped or by its consumer.
pub fn export_field(field: &Field) -> Result<FFI_ArrowSchema> {
    let schema = FFI_ArrowSchema::try_from(field)?;
    import_field(&schema).map_err(refused)?;
    Ok(schema)
}

/// Exports `schema` as a struct (`+s`) whose children are its fields and whose
/// metadata is the schema's metadata, as a record batch's schema travels.
pub fn export_schema(schema: &Schema) -> Result<FFI_ArrowSchema> {
    let exported = FFI_ArrowSchema::try_from(schema)?;
    import_schema(&exported).map_err(refused)?;
    Ok(exported)
}

/// Says that the defect was found on export.
fn refused(err: Error) -> Error {
    match err {
        Error::Invalid { path, message } => Error::Invalid {
            path,
            message: format!("{message} (this type cannot be exported to the C Data Interface)"),
        },
        other => other,
    }
}

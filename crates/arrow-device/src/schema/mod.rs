//! Schemas: `ArrowSchema` trees to and from arrow-rs [`Field`]s and
//! [`Schema`]s (spec: CDataInterface.rst, "Data type description -- format
//! strings" and "The ArrowSchema structure").
//!
//! * [`import_field`] / [`import_schema`] read a foreign tree. They borrow it
//!   (the caller still owns and releases it), parse every format string with
//!   this crate's own [`parse_format`], and reject every defect they can see
//!   with an [`Error::Invalid`](crate::Error::Invalid) naming the node and what
//!   was expected: released or NULL members, bad UTF-8, wrong child counts,
//!   bad dictionary index types, bad metadata, cycles and nesting deeper than
//!   [`MAX_NESTING_DEPTH`]. A tree that reads exactly as one the same thread
//!   imported recently is recognised without being imported again (the
//!   `memo` module: the same checks passed on the same bytes).
//! * [`export_field`] / [`export_schema`] write owned structs with this
//!   crate's writer: a whole tree in at most four heap allocations whatever
//!   its width, format strings as [`write_format`] writes them, metadata in
//!   [`encode_metadata`]'s encoding.
//!   Types that have no valid C form are refused with
//!   [`Error::NotSupported`](crate::Error::NotSupported), naming the node.
//!
//! ```
//! use arrow_device::schema::{export_field, import_field, parse_format};
//! use arrow_schema::{DataType, Field};
//!
//! // A nullable column of dictionary-encoded decimals with uint16 indices.
//! let value_type = DataType::Decimal64(18, 2);
//! let field = Field::new(
//!     "price",
//!     DataType::Dictionary(Box::new(DataType::UInt16), Box::new(value_type)),
//!     true,
//! );
//! let c_schema = export_field(&field)?;
//! assert_eq!(c_schema.format(), "S");
//! assert_eq!(c_schema.dictionary().map(|d| d.format()), Some("d:18,2,64"));
//! assert_eq!(import_field(&c_schema)?, field);
//!
//! // Defects are named, with what was expected.
//! assert_eq!(
//!     parse_format("+w:").unwrap_err().to_string(),
//!     r#"array: format "+w:" is truncated: expected a list size after "+w:""#
//! );
//! # Ok::<(), arrow_device::Error>(())
//! ```
//!
//! [`Field`]: arrow_schema::Field
//! [`Schema`]: arrow_schema::Schema

mod export;
mod format;
mod import;
mod memo;
pub(crate) mod metadata;
#[cfg(test)]
mod tests;
mod writer;

pub(crate) use export::export_data_type;
pub use export::{export_field, export_schema};
pub use format::{parse_format, write_format, ParsedFormat};
pub use import::{import_field, import_schema, MAX_NESTING_DEPTH, MAX_SCHEMA_NODES};
pub use metadata::{decode as decode_metadata, encode as encode_metadata};

/// Where `bytes` stops being UTF-8, for messages: "invalid byte 0xff at
/// offset 3" or "incomplete sequence at offset 3".
fn utf8_defect(bytes: &[u8], err: &std::str::Utf8Error) -> String {
    let offset = err.valid_up_to();
    match (err.error_len(), bytes.get(offset)) {
        (Some(_), Some(byte)) => format!("invalid byte {byte:#04x} at offset {offset}"),
        _ => format!("incomplete sequence at offset {offset}"),
    }
}

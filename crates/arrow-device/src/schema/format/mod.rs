//! Format strings (spec: "Data type description -- format strings"), both
//! ways: [`parse_format`] reads one for the importer, [`write_format`] (and
//! the exporter's [`Format`] beneath it) writes one. The two are inverses for
//! every type that has a C form: the tests parse what is written, and
//! compare it with what arrow-rs writes.

mod parse;
mod write;

pub(crate) use parse::{parse, quote};
pub use parse::{parse_format, ParsedFormat};
pub use write::write_format;
pub(crate) use write::Format;

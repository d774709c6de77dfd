//! Another Arrow representation of the same data: what a consumer asks for
//! with the PyCapsule protocol's `requested_schema` ("negotiate between
//! different representations of the same data and not ... arbitrary schema
//! transformations").
//!
//! Same data, other layout: `utf8` / `large_utf8` / `utf8_view`, the binary
//! equivalents, `list` / `large_list` / `list_view` / `large_list_view`,
//! dictionary-encoded values and the values themselves (or another index
//! width), and structs, maps and fixed-size lists whose children are such.
//! Everything else (another integer width, another unit, a cast that may
//! lose or invent values) is refused.
//!
//! ```
//! use arrow_array::{Array, LargeStringArray, StringArray};
//! use arrow_device::DeviceArray;
//! use arrow_schema::{DataType, Field};
//!
//! let strings = StringArray::from(vec![Some("a"), None]);
//! let imported = DeviceArray::from_array(&strings);
//!
//! let large = imported.to_representation(&Field::new("s", DataType::LargeUtf8, true))?;
//! let host = large.to_host()?;
//! assert_eq!(host.as_any().downcast_ref::<LargeStringArray>().unwrap().value(0), "a");
//!
//! let refused = imported.to_representation(&Field::new("s", DataType::Int32, true));
//! assert!(refused.unwrap_err().to_string().contains("not another representation"));
//! # Ok::<(), arrow_device::Error>(())
//! ```

use arrow_schema::{DataType, Field};

use crate::array::DeviceArray;
use crate::error::{Error, Path, Result};

impl DeviceArray {
    /// The same data as `field`'s type: zero-copy when it already is, else
    /// converted on the host (host-accessible devices only: this crate never
    /// copies between devices implicitly). The result carries `field`'s name
    /// and metadata.
    pub fn to_representation(&self, field: &Field) -> Result<DeviceArray> {
        let from = self.data_type();
        let to = field.data_type();
        check_representation(from, to)?;
        if !field.is_nullable() && self.null_count() != Some(0) {
            return Err(Error::invalid(
                &Path::root(),
                "the requested field is not nullable, but the array may have nulls",
            ));
        }
        if from == to {
            return Ok(self.with_field(field.clone()));
        }
        if !self.device_type().is_host_accessible() {
            return Err(Error::NotSupported(format!(
                "converting {from} to {to} happens on the host, and the array is on device type {}: copy it to the CPU first",
                self.device_type()
            )));
        }
        // arrow-rs kernels trust their input: a string view naming a
        // variadic buffer that does not exist, an offset past the data, a
        // dictionary key past the dictionary would make `cast` read out of
        // bounds or panic. The default import level reads none of those.
        let converted = arrow_cast::cast(self.to_host_checked()?.as_ref(), to)?;
        Ok(DeviceArray::from_array(converted.as_ref()).with_field(field.clone()))
    }
}

/// An error unless `to` holds the data of `from` in another layout (what a
/// stream checks once, before converting each batch).
pub fn check_representation(from: &DataType, to: &DataType) -> Result<()> {
    if same_data(from, to) {
        Ok(())
    } else {
        Err(Error::invalid(
            &Path::root(),
            format!("requested type {to} is not another representation of {from}"),
        ))
    }
}

/// Whether `to` holds the data of `from` in another layout.
pub fn same_data(from: &DataType, to: &DataType) -> bool {
    use DataType::*;
    match (from, to) {
        _ if from == to => true,
        (Utf8 | LargeUtf8 | Utf8View, Utf8 | LargeUtf8 | Utf8View) => true,
        (Binary | LargeBinary | BinaryView, Binary | LargeBinary | BinaryView) => true,
        (
            List(a) | LargeList(a) | ListView(a) | LargeListView(a),
            List(b) | LargeList(b) | ListView(b) | LargeListView(b),
        ) => same_child(a, b),
        (FixedSizeList(a, n), FixedSizeList(b, m)) => n == m && same_child(a, b),
        (Map(a, sorted_a), Map(b, sorted_b)) => sorted_a == sorted_b && same_child(a, b),
        (Struct(a), Struct(b)) => {
            a.len() == b.len() && a.iter().zip(b.iter()).all(|(a, b)| same_child(a, b))
        }
        (Dictionary(_, a), Dictionary(_, b)) => same_data(a, b),
        (Dictionary(_, values), other) | (other, Dictionary(_, values)) => same_data(values, other),
        _ => false,
    }
}

/// Children must keep their names: a renamed column is another schema.
fn same_child(a: &Field, b: &Field) -> bool {
    a.name() == b.name() && same_data(a.data_type(), b.data_type())
}

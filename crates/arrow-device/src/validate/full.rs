//! Full validation: every value of CPU-accessible data.

use arrow_data::ArrayData;
use arrow_schema::DataType;

use crate::error::{Error, Path, Result};

/// Checks the values of `data` and its descendants, naming the node at fault.
///
/// arrow-rs' `validate_data` covers offsets (monotonic, in range), UTF-8,
/// view lengths and buffer indices, run ends, dictionary keys and null
/// counts, one node at a time; union type ids are checked here since
/// arrow-rs does not check them all.
pub(crate) fn full(data: &ArrayData, path: &Path<'_>) -> Result<()> {
    // Before arrow-rs' own check, which reports a non-nullable child with
    // nulls without saying which child.
    check_non_nullable_children(data, path)?;
    data.validate_data()
        .map_err(|e| Error::invalid(path, strip_prefix(e.to_string())))?;
    if let DataType::Union(fields, _) = data.data_type() {
        let ids = &data.buffers()[0].as_slice()[data.offset()..data.offset() + data.len()];
        for (i, id) in ids.iter().enumerate() {
            if !fields.iter().any(|(declared, _)| declared == *id as i8) {
                return Err(Error::invalid(
                    &path.buffer(0),
                    format!(
                        "type id {} at index {i} is not one of the union's type ids",
                        *id as i8
                    ),
                ));
            }
        }
    }
    match data.data_type() {
        DataType::Dictionary(_, _) => {
            if let Some(dictionary) = data.child_data().first() {
                full(dictionary, &path.dictionary())?;
            }
        }
        DataType::Struct(fields) => {
            for (i, (child, field)) in data.child_data().iter().zip(fields.iter()).enumerate() {
                full(child, &path.field(i, Some(field.name())))?;
            }
        }
        _ => {
            for (i, child) in data.child_data().iter().enumerate() {
                full(child, &path.child(i, None))?;
            }
        }
    }
    Ok(())
}

/// A non-nullable child of a struct or fixed-size list may not be null where
/// its parent slot is valid.
fn check_non_nullable_children(data: &ArrayData, path: &Path<'_>) -> Result<()> {
    match data.data_type() {
        DataType::Struct(fields) => {
            for (i, (field, child)) in fields.iter().zip(data.child_data()).enumerate() {
                if !field.is_nullable() && child.len() >= data.offset() + data.len() {
                    let child = child.slice(data.offset(), data.len());
                    check_nulls(&child, data.nulls(), 1, &path.field(i, Some(field.name())))?;
                }
            }
        }
        DataType::FixedSizeList(field, size) if !field.is_nullable() => {
            let size = usize::try_from(*size).unwrap_or(0);
            if let Some(child) = data.child_data().first() {
                if size > 0 && child.len() >= (data.offset() + data.len()) * size {
                    let child = child.slice(data.offset() * size, data.len() * size);
                    check_nulls(
                        &child,
                        data.nulls(),
                        size,
                        &path.child(0, Some(field.name())),
                    )?;
                }
            }
        }
        _ => {}
    }
    Ok(())
}

fn check_nulls(
    child: &ArrayData,
    parent: Option<&arrow_buffer::NullBuffer>,
    repeat: usize,
    path: &Path<'_>,
) -> Result<()> {
    let Some(nulls) = child.nulls() else {
        return Ok(());
    };
    for slot in 0..child.len() {
        if nulls.is_null(slot) && parent.is_none_or(|p| p.is_valid(slot / repeat)) {
            return Err(Error::invalid(
                path,
                format!(
                    "non-nullable field has a null at slot {slot}, where its parent slot is valid"
                ),
            ));
        }
    }
    Ok(())
}

fn strip_prefix(message: String) -> String {
    message
        .strip_prefix("Invalid argument error: ")
        .map(str::to_string)
        .unwrap_or(message)
}

//! Checks of host-accessible arrow-rs data, naming the node at fault: the
//! structure arrow-rs builds its arrays on ([`structure`]) and every value
//! ([`full`]).

use arrow_data::ArrayData;
use arrow_schema::DataType;

use crate::error::{Error, Path, Result};

/// What arrow-rs assumes of any `ArrayData` it builds typed arrays from
/// (its `ArrayData::validate`, on every node): buffer sizes, children as
/// long as their parent needs (a struct's, a fixed-size list's), first and
/// last offsets inside the data or child, list-view offsets and sizes
/// inside the child, a last run end covering the array. `make_array` slices
/// children and offsets by these without further checks, so an array below
/// them panics or reads out of bounds. O(nodes), plus one pass over
/// list-view offsets.
///
/// Imports below `Full` check less than this (`None` no child lengths,
/// `Minimal` no list offsets or run ends, `Default` no list-view offsets,
/// see `layout::structure_unchecked_at`): this runs before such a tree
/// becomes arrow-rs data (`DeviceArray::to_host`).
pub(crate) fn structure(data: &ArrayData, path: &Path<'_>) -> Result<()> {
    check_list_view(data, path)?;
    check_last_run_end(data, path)?;
    data.validate()
        .map_err(|e| Error::invalid(path, strip_prefix(e.to_string())))?;
    for_each_child(data, path, structure)
}

/// Checks the values of `data` and its descendants, naming the node at fault.
///
/// arrow-rs' `validate_data` covers offsets (monotonic, in range), UTF-8,
/// view lengths and buffer indices, run ends, dictionary keys and null
/// counts, one node at a time; union type ids are checked here since
/// arrow-rs does not check them all. What every arrow-rs kernel relies on:
/// it runs before this crate hands data to one (`array::represent`).
pub(crate) fn full(data: &ArrayData, path: &Path<'_>) -> Result<()> {
    // Before arrow-rs' own check, which reports a non-nullable child with
    // nulls without saying which child.
    check_non_nullable_children(data, path)?;
    check_list_view(data, path)?;
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
    for_each_child(data, path, full)
}

/// Runs `check` on each child (and the dictionary) of `data`, with its path.
fn for_each_child(
    data: &ArrayData,
    path: &Path<'_>,
    check: fn(&ArrayData, &Path<'_>) -> Result<()>,
) -> Result<()> {
    match data.data_type() {
        DataType::Dictionary(_, _) => {
            if let Some(dictionary) = data.child_data().first() {
                check(dictionary, &path.dictionary())?;
            }
        }
        DataType::Struct(fields) => {
            for (i, (child, field)) in data.child_data().iter().zip(fields.iter()).enumerate() {
                check(child, &path.field(i, Some(field.name())))?;
            }
        }
        _ => {
            for (i, child) in data.child_data().iter().enumerate() {
                check(child, &path.child(i, None))?;
            }
        }
    }
    Ok(())
}

/// Each list view's offset + size must lie inside the child. arrow-rs checks
/// this too (its `validate`), but names neither the offset nor the child's
/// length ("Size 0 at index 1 is larger than the remaining values").
fn check_list_view(data: &ArrayData, path: &Path<'_>) -> Result<()> {
    match data.data_type() {
        DataType::ListView(_) => check_views::<i32>(data, path),
        DataType::LargeListView(_) => check_views::<i64>(data, path),
        _ => Ok(()),
    }
}

fn check_views<O: arrow_buffer::ArrowNativeType + Into<i64>>(
    data: &ArrayData,
    path: &Path<'_>,
) -> Result<()> {
    let (Some(offsets), Some(sizes), Some(child)) = (
        data.buffers().first(),
        data.buffers().get(1),
        data.child_data().first(),
    ) else {
        return Ok(()); // arrow-rs' own check reports the missing parts
    };
    let range = data.offset()..data.offset() + data.len();
    let (offsets, sizes) = (offsets.typed_data::<O>(), sizes.typed_data::<O>());
    if offsets.len() < range.end || sizes.len() < range.end {
        return Ok(()); // likewise: buffer sizes are arrow-rs' first check
    }
    let child_len = child.len() as i64;
    for i in range {
        if data.is_null(i - data.offset()) {
            continue;
        }
        let (offset, size): (i64, i64) = (offsets[i].into(), sizes[i].into());
        if offset < 0 || size < 0 || offset.checked_add(size).is_none_or(|end| end > child_len) {
            return Err(Error::invalid(
                path,
                format!(
                    "list view {} has offset {offset} and size {size}, expected both >= 0 and \
                     offset + size <= {child_len} (the child's length)",
                    i - data.offset()
                ),
            ));
        }
    }
    Ok(())
}

/// A run-end-encoded array's last run end must cover `offset + length`:
/// `RunArray` finds a slot's run by searching the run ends, and arrow-rs'
/// `validate` does not check this (its `validate_values` does).
fn check_last_run_end(data: &ArrayData, path: &Path<'_>) -> Result<()> {
    let DataType::RunEndEncoded(_, _) = data.data_type() else {
        return Ok(());
    };
    let Some(run_ends) = data.child_data().first().filter(|r| !r.is_empty()) else {
        return Ok(()); // an empty array needs none; arrow-rs reports the rest
    };
    fn value_at<T: arrow_buffer::ArrowNativeType + Into<i64>>(
        data: &ArrayData,
        index: usize,
    ) -> Option<i64> {
        let values = data.buffers().first()?.typed_data::<T>();
        values.get(index).map(|&v| v.into())
    }
    let last_index = run_ends.offset() + run_ends.len() - 1;
    let last = match run_ends.data_type() {
        DataType::Int16 => value_at::<i16>(run_ends, last_index),
        DataType::Int32 => value_at::<i32>(run_ends, last_index),
        DataType::Int64 => value_at::<i64>(run_ends, last_index),
        _ => None,
    };
    let needed = (data.offset() + data.len()) as i64;
    match last {
        Some(last) if last < needed => Err(Error::invalid(
            &path.child(0, Some("run_ends")),
            format!("the last run end is {last}, expected at least {needed} (offset + length)"),
        )),
        _ => Ok(()),
    }
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

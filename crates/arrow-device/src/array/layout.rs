//! Buffer layout of every Arrow type in C Data Interface order.
//!
//! One table answers, for a data type: which buffers a node has (in the order
//! of `ArrowArray.buffers`), how large each must be for `offset + length`
//! slots, and which sizes depend on data (the last offset of a variable-size
//! buffer, the variadic buffers of view types). Import, export, validation and
//! copies all read it, so the rules live in one place.

use arrow_schema::{DataType, FieldRef, UnionMode};

use crate::validate::ValidationLevel;

/// What a buffer holds, which fixes how its size follows from the slot count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BufferKind {
    /// Validity bitmap: one bit per slot; may be NULL when there are no nulls.
    Validity,
    /// Bit-packed boolean values.
    Bits,
    /// Fixed-width values of this many bytes.
    Fixed(usize),
    /// `slots + 1` offsets of this many bytes (4 or 8).
    Offsets(usize),
    /// Variable-size data addressed by the preceding offsets buffer; its size
    /// is the last offset (data-dependent).
    Data,
    /// Union type ids (one byte per slot).
    TypeIds,
}

/// The buffers of a node of `data_type`, excluding the variadic data buffers
/// and the variadic-sizes buffer of view types (see [`is_view`]).
pub(crate) fn buffer_kinds(data_type: &DataType) -> &'static [BufferKind] {
    use BufferKind::*;
    match data_type {
        DataType::Null | DataType::RunEndEncoded(_, _) => &[],
        DataType::Boolean => &[Validity, Bits],
        DataType::Int8 | DataType::UInt8 => &[Validity, Fixed(1)],
        DataType::Int16 | DataType::UInt16 | DataType::Float16 => &[Validity, Fixed(2)],
        DataType::Int32
        | DataType::UInt32
        | DataType::Float32
        | DataType::Date32
        | DataType::Time32(_)
        | DataType::Decimal32(_, _)
        | DataType::Interval(arrow_schema::IntervalUnit::YearMonth) => &[Validity, Fixed(4)],
        DataType::Int64
        | DataType::UInt64
        | DataType::Float64
        | DataType::Date64
        | DataType::Time64(_)
        | DataType::Timestamp(_, _)
        | DataType::Duration(_)
        | DataType::Decimal64(_, _)
        | DataType::Interval(arrow_schema::IntervalUnit::DayTime) => &[Validity, Fixed(8)],
        DataType::Decimal128(_, _)
        | DataType::Interval(arrow_schema::IntervalUnit::MonthDayNano) => &[Validity, Fixed(16)],
        DataType::Decimal256(_, _) => &[Validity, Fixed(32)],
        DataType::FixedSizeBinary(_) => &[Validity, Fixed(0)],
        DataType::Utf8 | DataType::Binary => &[Validity, Offsets(4), Data],
        DataType::LargeUtf8 | DataType::LargeBinary => &[Validity, Offsets(8), Data],
        DataType::Utf8View | DataType::BinaryView => &[Validity, Fixed(16)],
        DataType::List(_) | DataType::Map(_, _) => &[Validity, Offsets(4)],
        DataType::LargeList(_) => &[Validity, Offsets(8)],
        DataType::ListView(_) => &[Validity, Fixed(4), Fixed(4)],
        DataType::LargeListView(_) => &[Validity, Fixed(8), Fixed(8)],
        DataType::FixedSizeList(_, _) | DataType::Struct(_) => &[Validity],
        DataType::Union(_, UnionMode::Sparse) => &[TypeIds],
        DataType::Union(_, UnionMode::Dense) => &[TypeIds, Fixed(4)],
        DataType::Dictionary(key, _) => buffer_kinds(key),
    }
}

/// The alignment arrow-rs expects of buffer `index` of a node of
/// `data_type` to use it without a copy: the width of its values (at most
/// 16), 1 for bitmaps, type ids and variable-size data.
pub(crate) fn buffer_alignment(data_type: &DataType, index: usize) -> usize {
    match buffer_kinds(data_type).get(index) {
        Some(BufferKind::Fixed(width) | BufferKind::Offsets(width)) => (*width).clamp(1, 16),
        _ => 1,
    }
}

/// Byte width of a `Fixed` buffer, resolving the per-type width of
/// fixed-size binary (encoded as `Fixed(0)` in the table).
pub(crate) fn fixed_width(data_type: &DataType, kind_width: usize) -> usize {
    match data_type {
        DataType::FixedSizeBinary(w) => usize::try_from(*w).unwrap_or(0),
        _ => kind_width,
    }
}

/// Whether `data_type` is a view type with variadic data buffers.
pub(crate) fn is_view(data_type: &DataType) -> bool {
    matches!(data_type, DataType::Utf8View | DataType::BinaryView)
}

/// Whether nodes of `data_type` have a variable-size data buffer addressed by
/// offsets (string and binary types; buffer 2).
pub(crate) fn has_data_buffer(data_type: &DataType) -> bool {
    buffer_kinds(data_type).last() == Some(&BufferKind::Data)
}

/// Whether nodes of `data_type` carry a validity bitmap as buffer 0.
pub(crate) fn has_validity(data_type: &DataType) -> bool {
    buffer_kinds(data_type).first() == Some(&BufferKind::Validity)
}

/// The number of children a node of `data_type` has in the C interface
/// (dictionary values travel in `dictionary`, not as a child).
pub(crate) fn n_children(data_type: &DataType) -> Option<usize> {
    match data_type {
        DataType::List(_)
        | DataType::LargeList(_)
        | DataType::ListView(_)
        | DataType::LargeListView(_)
        | DataType::FixedSizeList(_, _)
        | DataType::Map(_, _) => Some(1),
        DataType::Struct(fields) => Some(fields.len()),
        DataType::Union(fields, _) => Some(fields.len()),
        DataType::RunEndEncoded(_, _) => Some(2),
        DataType::Dictionary(key, _) => n_children(key),
        _ => Some(0),
    }
}

/// Child `index` of `data_type` in C order (dictionary values travel in
/// `dictionary`, not as a child), without allocating.
pub(crate) fn child_field(data_type: &DataType, index: usize) -> Option<&FieldRef> {
    match data_type {
        DataType::List(f)
        | DataType::LargeList(f)
        | DataType::ListView(f)
        | DataType::LargeListView(f)
        | DataType::FixedSizeList(f, _)
        | DataType::Map(f, _) => (index == 0).then_some(f),
        DataType::Struct(fields) => fields.get(index),
        DataType::Union(fields, _) => fields.iter().nth(index).map(|(_, f)| f),
        DataType::RunEndEncoded(r, v) => [r, v].get(index).copied(),
        _ => None,
    }
}

/// Whether `data_type` or any type nested in it (children, dictionary
/// values) satisfies `matches`.
pub(crate) fn contains(data_type: &DataType, matches: &impl Fn(&DataType) -> bool) -> bool {
    matches(data_type)
        || match data_type {
            DataType::Dictionary(_, values) => contains(values, matches),
            _ => (0..n_children(data_type).unwrap_or(0))
                .filter_map(|i| child_field(data_type, i))
                .any(|f| contains(f.data_type(), matches)),
        }
}

/// Whether an import of `data_type` at `level` leaves unchecked some of the
/// structure arrow-rs builds its arrays on (`validate::structure`): child
/// lengths are checked from `Minimal` on, list offsets against their child
/// and the last run end from `Default` on, list-view offsets (one per slot)
/// never. Leaves and strings are covered at every level.
pub(crate) fn structure_unchecked_at(data_type: &DataType, level: ValidationLevel) -> bool {
    if n_children(data_type) == Some(0) && !matches!(data_type, DataType::Dictionary(_, _)) {
        return false; // a leaf: the common case, on every import
    }
    contains(data_type, &|t| match t {
        DataType::ListView(_) | DataType::LargeListView(_) => true,
        DataType::List(_)
        | DataType::LargeList(_)
        | DataType::Map(_, _)
        | DataType::RunEndEncoded(_, _) => level < ValidationLevel::Default,
        DataType::Struct(_) | DataType::FixedSizeList(_, _) | DataType::Union(_, _) => {
            level < ValidationLevel::Minimal
        }
        _ => false,
    })
}

/// Every child field of `data_type` in C order.
pub(crate) fn child_fields(data_type: &DataType) -> Vec<&FieldRef> {
    (0..n_children(data_type).unwrap_or(0))
        .filter_map(|i| child_field(data_type, i))
        .collect()
}

/// Size in bytes of a buffer of `kind` for `slots` slots, when it does not
/// depend on data (`None` for [`BufferKind::Data`]).
pub(crate) fn buffer_size(data_type: &DataType, kind: BufferKind, slots: usize) -> Option<usize> {
    match kind {
        BufferKind::Validity | BufferKind::Bits => Some(slots.div_ceil(8)),
        BufferKind::Fixed(w) => slots.checked_mul(fixed_width(data_type, w)),
        BufferKind::Offsets(w) => slots.checked_add(1)?.checked_mul(w),
        BufferKind::TypeIds => Some(slots),
        BufferKind::Data => None,
    }
}

/// A short name for buffer `index` of `data_type`, used in error messages.
pub(crate) fn buffer_name(data_type: &DataType, index: usize) -> &'static str {
    let Some(kind) = buffer_kinds(data_type).get(index) else {
        return "variadic data";
    };
    match (data_type, index) {
        (DataType::Union(_, UnionMode::Dense), 1)
        | (DataType::ListView(_) | DataType::LargeListView(_), 1) => return "offsets",
        (DataType::ListView(_) | DataType::LargeListView(_), 2) => return "sizes",
        (DataType::Utf8View | DataType::BinaryView, 1) => return "views",
        (DataType::Dictionary(_, _), 1) => return "indices",
        _ => {}
    }
    match kind {
        BufferKind::Validity => "validity",
        BufferKind::Bits => "values (bits)",
        BufferKind::Fixed(_) => "values",
        BufferKind::Offsets(_) => "offsets",
        BufferKind::Data => "data",
        BufferKind::TypeIds => "type ids",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_schema::{Field, Fields};
    use std::sync::Arc;

    #[test]
    fn buffer_counts_follow_the_c_data_interface() {
        let item = Arc::new(Field::new("item", DataType::Int32, true));
        let cases: Vec<(DataType, usize)> = vec![
            (DataType::Null, 0),
            (DataType::Boolean, 2),
            (DataType::Int32, 2),
            (DataType::Utf8, 3),
            (DataType::LargeBinary, 3),
            (DataType::Utf8View, 2),
            (DataType::List(item.clone()), 2),
            (DataType::ListView(item.clone()), 3),
            (DataType::FixedSizeList(item.clone(), 3), 1),
            (DataType::Struct(Fields::empty()), 1),
            (
                DataType::Union(arrow_schema::UnionFields::empty(), UnionMode::Sparse),
                1,
            ),
            (
                DataType::Union(arrow_schema::UnionFields::empty(), UnionMode::Dense),
                2,
            ),
            (DataType::RunEndEncoded(item.clone(), item.clone()), 0),
            (
                DataType::Dictionary(Box::new(DataType::Int8), Box::new(DataType::Utf8)),
                2,
            ),
        ];
        for (t, n) in cases {
            assert_eq!(buffer_kinds(&t).len(), n, "{t}");
        }
    }

    #[test]
    fn sizes_cover_offset_plus_length_slots() {
        assert_eq!(
            buffer_size(&DataType::Int32, BufferKind::Validity, 9),
            Some(2)
        );
        assert_eq!(
            buffer_size(&DataType::Int32, BufferKind::Fixed(4), 9),
            Some(36)
        );
        assert_eq!(
            buffer_size(&DataType::FixedSizeBinary(5), BufferKind::Fixed(0), 3),
            Some(15)
        );
        assert_eq!(
            buffer_size(&DataType::Utf8, BufferKind::Offsets(4), 3),
            Some(16)
        );
        assert_eq!(buffer_size(&DataType::Utf8, BufferKind::Data, 3), None);
        assert_eq!(
            buffer_size(&DataType::Int64, BufferKind::Fixed(8), usize::MAX),
            None
        );
    }
}

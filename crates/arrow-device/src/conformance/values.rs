//! Whether a consumer read the values a producer exported.

use arrow_array::{make_array, Array, ArrayRef};
use arrow_cast::cast;
use arrow_data::transform::MutableArrayData;

/// The emulated device's poison byte (what a delayed copy's destination
/// holds until the copy has run).
const POISON: u8 = 0xDB;

/// Compares what a consumer gave back (`found`: its batches, in order, on
/// the host) with what it was given (`expected`). Types may differ where a
/// consumer chooses another representation (`utf8` read as `string_view`
/// or `large_utf8`, ...): `found` is cast to `expected`'s type first.
/// The error says where the values differ, and whether they hold the
/// emulated device's poison (the consumer read before waiting on the
/// `sync_event`).
pub fn compare_values(expected: &dyn Array, found: &[ArrayRef]) -> Result<(), String> {
    let mut cast_parts = Vec::with_capacity(found.len());
    for part in found {
        if part.data_type() == expected.data_type() {
            cast_parts.push(part.clone());
        } else {
            cast_parts.push(cast(part, expected.data_type()).map_err(|e| {
                format!(
                    "the consumer's {} cannot be compared with the {} it was given: {e}",
                    part.data_type(),
                    expected.data_type()
                )
            })?);
        }
    }
    let data: Vec<_> = cast_parts.iter().map(|a| a.to_data()).collect();
    let total: usize = data.iter().map(|d| d.len()).sum();
    if total != expected.len() {
        return Err(format!(
            "the consumer read {total} values, expected {}",
            expected.len()
        ));
    }
    let mut joined = MutableArrayData::new(data.iter().collect(), false, total);
    for (i, d) in data.iter().enumerate() {
        joined
            .try_extend(i, 0, d.len())
            .map_err(|e| e.to_string())?;
    }
    let joined = make_array(joined.freeze());
    if joined.to_data() == expected.to_data() {
        return Ok(());
    }
    let index = (0..expected.len())
        .find(|&i| joined.slice(i, 1).to_data() != expected.slice(i, 1).to_data())
        .unwrap_or(0);
    let poisoned = found.iter().any(|a| holds_poison(&a.to_data()));
    Err(format!(
        "the consumer's values differ from the producer's from index {index}{}",
        if poisoned {
            " and hold the emulated device's poison bytes (0xDB): it read before the sync_event completed"
        } else {
            ""
        }
    ))
}

/// Whether any buffer of the tree holds a run of 8 poison bytes.
fn holds_poison(data: &arrow_data::ArrayData) -> bool {
    data.buffers().iter().any(|b| {
        b.as_slice()
            .windows(8)
            .any(|w| w.iter().all(|&x| x == POISON))
    }) || data.child_data().iter().any(holds_poison)
}

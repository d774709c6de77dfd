//! Target 6, round trip: a valid arrow-rs array of any type, with any
//! values, sliced ([`crate::gen`]), exported and imported on the CPU and
//! on the emulated device; it must come back equal every way.
//!
//! Input layout: the [`crate::gen`] array, then a byte for a further
//! slice of the imported array (an offset and a length byte, reduced into
//! it).
//!
//! Oracles: the CPU export imports at `full` and converts back equal; the
//! copy exported onto the emulated device (`export_array_to`) imports and
//! copies back equal; an imported array's `to_device` and back is equal;
//! `DeviceArray::slice` equals arrow-rs' `slice` of the same array, on
//! either device; every exported struct is released exactly once (the
//! imports own them, and the release counts of a counted pair are checked).

use arrow_array::{Array, ArrayRef};
use arrow_device::{export_array, export_array_to, DeviceArray, ValidationLevel};

use crate::array_import::{assert_same, emulated};
use crate::gen;
use crate::input::{Encoder, Input};
use crate::release::counting;

pub fn run(data: &[u8]) {
    let mut input = Input::new(data);
    let array = gen::array(&mut input, 0);
    let offset = input.below(array.len() + 1);
    let length = input.below(array.len() - offset + 1);
    check(&array, offset, length);
}

fn check(array: &ArrayRef, offset: usize, length: usize) {
    let device = emulated();
    // The CPU: zero-copy export, import at full, back equal.
    let (c_array, c_schema) = export_array(array.as_ref()).expect("a valid array exports");
    let (c_array, c_schema, counters) = counting(c_array, c_schema);
    // SAFETY: the crate's own exporter.
    let on_cpu = unsafe { DeviceArray::try_new(c_array, c_schema, ValidationLevel::Full) }
        .unwrap_or_else(|e| panic!("a valid {} array is rejected: {e}", array.data_type()));
    assert_same(
        array,
        &on_cpu.to_host().expect("a CPU array converts"),
        "CPU export",
    );
    // The device: the exporter's copy, then the importer's.
    let (d_array, d_schema) =
        export_array_to(array.as_ref(), &device).expect("a copy onto the device");
    // SAFETY: as above.
    let on_device = unsafe { DeviceArray::try_new(d_array, d_schema, ValidationLevel::Full) }
        .unwrap_or_else(|e| panic!("the device copy is rejected: {e}"));
    assert_same(
        array,
        &on_device.to_host().expect("copied back"),
        "device export",
    );
    let again = on_cpu.to_device(&device).expect("to_device");
    assert_same(array, &again.to_host().expect("copied back"), "to_device");
    // Slices of both, against arrow-rs' slice.
    let expected = array.slice(offset, length);
    for (name, imported) in [("CPU", &on_cpu), ("device", &on_device)] {
        let slice = imported
            .slice(offset, length)
            .expect("a slice inside the array");
        assert_same(&expected, &slice.to_host().expect("a slice converts"), name);
    }
    drop((on_cpu, on_device, again));
    assert_eq!(
        (counters.array_releases(), counters.schema_releases()),
        (1, 1),
        "the CPU export's structs are each released once"
    );
}

/// One seed per type tag of [`gen`], with values from a few fill bytes.
pub fn seeds() -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    for tag in 0..gen::TYPES {
        for fill in [1u8, 0x41, 0xC3] {
            let mut e = Encoder::new();
            e.u8(6).u8(tag);
            for i in 0..200u8 {
                e.u8(fill.wrapping_add(i.wrapping_mul(7)));
            }
            out.push((format!("tag{tag}-fill{fill:02x}"), e.finish()));
        }
    }
    out
}

//! `include/arrow_device.h` is valid C99 and C++11 and coexists with another
//! project's copy of the same definitions. That the C and C++ files compile at
//! all (with warnings as errors) is most of the proof; these tests check that
//! what they compiled is what Rust expects.

use arrow_device::abi::{ArrowDeviceArray, DeviceType};
use c_interop_tests::{
    interop_coexist_ours_first, interop_coexist_theirs_first, interop_cpp_read_device_fields,
    interop_cpp_sizeof_device_array,
};

#[test]
fn header_coexists_with_another_projects_copy_included_before_or_after_it() {
    // SAFETY: the functions take no arguments and return a size.
    let (ours_first, theirs_first) =
        unsafe { (interop_coexist_ours_first(), interop_coexist_theirs_first()) };
    assert_eq!(ours_first, size_of::<ArrowDeviceArray>());
    assert_eq!(theirs_first, size_of::<ArrowDeviceArray>());
}

#[test]
fn header_compiles_as_cpp_and_cpp_code_reads_a_rust_device_array() {
    // SAFETY: the function takes no arguments and returns a size.
    assert_eq!(
        unsafe { interop_cpp_sizeof_device_array() },
        size_of::<ArrowDeviceArray>()
    );

    let mut array = ArrowDeviceArray::empty();
    array.device_id = 3;
    array.device_type = DeviceType::CUDA_MANAGED;
    let mut device_id = 0;
    // SAFETY: `array` is a valid struct and `device_id` a writable i64; the
    // C++ function only reads the former and writes the latter.
    let device_type = unsafe { interop_cpp_read_device_fields(&array, &mut device_id) };
    assert_eq!(device_type, 13);
    assert_eq!(device_id, 3);
}

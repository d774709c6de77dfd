// The public-field mirrors let a producer write a struct field by field;
// `Drop` then calls `release` with `private_data`, so writing needs `unsafe`.
use arrow_device::abi::{raw, ArrowDeviceArrayStream, FFI_ArrowArray, FFI_ArrowArrayStream, FFI_ArrowSchema};

fn main() {
    let mut array = FFI_ArrowArray::empty();
    raw::array_mut(&mut array).private_data = 8 as _;

    let mut schema = FFI_ArrowSchema::empty();
    raw::schema_mut(&mut schema).private_data = 8 as _;

    let mut stream = FFI_ArrowArrayStream::empty();
    raw::stream_mut(&mut stream).private_data = 8 as _;

    let mut device_stream = ArrowDeviceArrayStream::empty();
    raw::device_stream_mut(&mut device_stream).private_data = 8 as _;
}

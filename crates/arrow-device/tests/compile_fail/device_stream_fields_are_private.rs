// `ArrowDeviceArrayStream`'s `Drop` calls `release(self)`: swapping
// `private_data` between two streams, or writing any callback, must not be
// possible in safe code.
use arrow_device::ArrowDeviceArrayStream;

fn main() {
    let mut a = ArrowDeviceArrayStream::empty();
    let mut b = ArrowDeviceArrayStream::empty();
    std::mem::swap(&mut a.private_data, &mut b.private_data);
    a.release = None;
    let _c = ArrowDeviceArrayStream {
        private_data: 8 as _,
        ..ArrowDeviceArrayStream::empty()
    };
}

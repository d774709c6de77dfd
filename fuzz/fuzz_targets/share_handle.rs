#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| arrow_device_fuzz::share_handle::run(data));

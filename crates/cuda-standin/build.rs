//! Compiles src/kernels.cpp, the stand-in's host implementation of
//! cuLaunchKernel's kernels: it includes arrow-device's CUDA kernel source
//! (convert.cu) and launch loop (host_launch.h) themselves, so the stand-in
//! runs the one definition of the kernels that the GPU and the kernels' host
//! test run. The static library it makes is linked into the cdylib
//! (libcuda.so), with the C++ standard library.

use std::path::PathBuf;

fn main() {
    let manifest =
        PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let kernels = manifest.join("../arrow-device/src/device/cuda/kernels");
    let source = manifest.join("src/kernels.cpp");

    for path in [
        source.clone(),
        kernels.join("host_launch.h"),
        kernels.join("convert.cu"),
    ] {
        println!("cargo:rerun-if-changed={}", path.display());
    }
    println!("cargo:rerun-if-changed=build.rs");

    cc::Build::new()
        .cpp(true)
        .std("c++17")
        .file(&source)
        .include(&kernels)
        .warnings(true)
        .extra_warnings(true)
        .warnings_into_errors(true)
        // `#pragma unroll` in convert.cu is NVCC's.
        .flag_if_supported("-Wno-unknown-pragmas")
        // Nothing here throws; no unwinding tables or RTTI needed across the C ABI.
        .flag_if_supported("-fno-exceptions")
        .flag_if_supported("-fno-rtti")
        .compile("cuda_standin_kernels");
}

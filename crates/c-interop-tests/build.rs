//! Compiles the C sources in `c/` (strict C99, warnings as errors) and one
//! C++11 file against `arrow-device/include/arrow_device.h`, so that the
//! header is proven valid C and C++, and links them into the test binaries.

use std::path::PathBuf;

const C_SOURCES: &[&str] = &[
    "c/layout.c",
    "c/batch.c",
    "c/producer.c",
    "c/consumer.c",
    "c/stream.c",
    "c/coexist_ours_first.c",
    "c/coexist_theirs_first.c",
];
/// C sources that need POSIX threads; compiled on Unix targets only (the
/// Rust module and test that use them are `#[cfg(unix)]` too).
const POSIX_C_SOURCES: &[&str] = &["c/async_stream.c"];
const CPP_SOURCES: &[&str] = &["c/header_check.cpp"];

fn main() {
    let manifest_dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("set by cargo"));
    let include = manifest_dir.join("../arrow-device/include");
    let local = manifest_dir.join("c");

    for path in [include.join("arrow_device.h"), local.clone()] {
        println!("cargo:rerun-if-changed={}", path.display());
    }
    println!("cargo:rerun-if-changed=build.rs");

    let mut c = cc::Build::new();
    c.include(&include).include(&local);
    if c.get_compiler().is_like_msvc() {
        c.flags(["/W4", "/WX"]);
    } else {
        c.flags(["-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic"]);
    }
    c.files(C_SOURCES.iter().map(|s| manifest_dir.join(s)));
    if std::env::var("CARGO_CFG_TARGET_FAMILY").is_ok_and(|f| f.split(',').any(|f| f == "unix")) {
        // `-pthread` for compilers and libcs that still need it for
        // <pthread.h>; the Rust standard library links the thread library.
        c.flag_if_supported("-pthread");
        c.files(POSIX_C_SOURCES.iter().map(|s| manifest_dir.join(s)));
    }
    c.compile("interop_c");

    let mut cpp = cc::Build::new();
    cpp.cpp(true).include(&include).include(&local);
    if cpp.get_compiler().is_like_msvc() {
        cpp.flags(["/W4", "/WX"]);
    } else {
        cpp.flags(["-std=c++11", "-Wall", "-Wextra", "-Werror", "-pedantic"]);
    }
    cpp.files(CPP_SOURCES.iter().map(|s| manifest_dir.join(s)));
    cpp.compile("interop_cpp");
}

//! Compiles the C side of the hand-off (`c/passthrough.c`) against the
//! crate's C header, so the program exercises the ABI exactly as a C consumer
//! sees it.

fn main() {
    let header_dir = "../arrow-device/include";
    println!("cargo:rerun-if-changed=c/passthrough.c");
    println!("cargo:rerun-if-changed={header_dir}/arrow_device.h");
    cc::Build::new()
        .file("c/passthrough.c")
        .include(header_dir)
        .std("c99")
        .warnings(true)
        .extra_warnings(true)
        .compile("ad_cli_passthrough");
}

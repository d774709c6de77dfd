//! Compiles the C side of the hand-off (`c/passthrough.c`, one array at a
//! time) and of the stream relay (`c/relay.c`, `--stream`) against the
//! crate's C header, so the program exercises the ABI exactly as a C consumer
//! sees it.

fn main() {
    let header_dir = "../arrow-device/include";
    for file in ["c/ad_cli.h", "c/passthrough.c", "c/relay.c"] {
        println!("cargo:rerun-if-changed={file}");
    }
    println!("cargo:rerun-if-changed={header_dir}/arrow_device.h");
    cc::Build::new()
        .file("c/passthrough.c")
        .file("c/relay.c")
        .include(header_dir)
        .std("c99")
        .warnings(true)
        .extra_warnings(true)
        .compile("ad_cli_passthrough");
}

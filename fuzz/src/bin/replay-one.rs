//! Runs one input through a target's harness on stable Rust, for reading a
//! crash with a debugger or `ARROW_DEVICE_FUZZ_DEBUG=1`:
//! `replay-one TARGET FILE ...`.

fn main() {
    let mut args = std::env::args().skip(1);
    let name = args.next().expect("usage: replay-one TARGET FILE ...");
    let target = arrow_device_fuzz::TARGETS
        .iter()
        .find(|t| t.name == name)
        .unwrap_or_else(|| panic!("no target {name}"));
    for file in args {
        let data = std::fs::read(&file).unwrap_or_else(|e| panic!("{file}: {e}"));
        (target.run)(&data);
        println!("{file}: passed");
    }
}

//! The corpus replay: every committed input of every target (`corpus/`)
//! through the same harness libFuzzer runs, on stable Rust. An input that
//! once crashed a target stays here as its regression test.

use std::path::PathBuf;

use arrow_device_fuzz::TARGETS;

fn corpus(target: &str) -> Vec<PathBuf> {
    let dir = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/corpus")).join(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("corpus {}: {e}", dir.display()))
        .map(|entry| entry.expect("a readable directory entry").path())
        .filter(|path| path.is_file())
        .collect();
    files.sort();
    files
}

fn replay(name: &str) {
    let target = TARGETS
        .iter()
        .find(|t| t.name == name)
        .expect("a registered target");
    let files = corpus(name);
    assert!(!files.is_empty(), "the corpus of {name} is committed");
    for path in &files {
        let data = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let outcome = std::panic::catch_unwind(|| (target.run)(&data));
        if let Err(panic) = outcome {
            let message = panic
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| panic.downcast_ref::<&str>().copied())
                .unwrap_or("(no message)");
            panic!("{name}: {} fails: {message}", path.display());
        }
    }
}

/// The seeds decode and pass: a seed that fails its own target is a bug in
/// the seed's encoder or in the library.
fn seeds_pass(name: &str) {
    let target = TARGETS
        .iter()
        .find(|t| t.name == name)
        .expect("a registered target");
    let seeds = (target.seeds)();
    assert!(!seeds.is_empty(), "{name} has seeds");
    for (seed, data) in seeds {
        let outcome = std::panic::catch_unwind(|| (target.run)(&data));
        assert!(outcome.is_ok(), "{name}: seed {seed} fails");
    }
}

macro_rules! targets {
    ($($name:ident),*) => {$(
        mod $name {
            #[test]
            fn corpus_replays() {
                super::replay(stringify!($name));
            }
            #[test]
            fn seeds_pass() {
                super::seeds_pass(stringify!($name));
            }
        }
    )*};
}

targets!(
    array_import,
    schema,
    sync_stream,
    async_stream,
    dlpack,
    cai,
    roundtrip,
    share_handle
);

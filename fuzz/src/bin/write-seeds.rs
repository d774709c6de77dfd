//! Writes the seeds of the named targets (all when none is named) into
//! `DIR/<target>/seed-<name>`: `write-seeds DIR [TARGET ...]`. The campaign
//! script starts each target from them; the committed corpus is their
//! minimized union with what the campaigns found.

use std::path::PathBuf;

fn main() {
    let mut args = std::env::args().skip(1);
    let dir = PathBuf::from(args.next().expect("usage: write-seeds DIR [TARGET ...]"));
    let wanted: Vec<String> = args.collect();
    for target in arrow_device_fuzz::TARGETS {
        if !wanted.is_empty() && !wanted.iter().any(|w| w == target.name) {
            continue;
        }
        let out = dir.join(target.name);
        std::fs::create_dir_all(&out).unwrap_or_else(|e| panic!("{}: {e}", out.display()));
        let seeds = (target.seeds)();
        for (name, data) in &seeds {
            let name: String = name
                .chars()
                .map(|c| {
                    if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                        c
                    } else {
                        '_'
                    }
                })
                .collect();
            let path = out.join(format!("seed-{name}"));
            std::fs::write(&path, data).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        }
        println!("{}: {} seeds", target.name, seeds.len());
    }
}

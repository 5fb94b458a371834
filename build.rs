//! Computes the decision's identity (`redis_index::RULE`): a hash of the
//! source files whose code decides, so that workers of different builds of
//! the decision never share an index in Redis.

use std::path::Path;

/// The files and folders whose contents make up the rule.
const SOURCES: [&str; 4] = [
    "src/engine",
    "src/redis_index/log.rs",
    "src/redis_index/replica.rs",
    "src/state/snapshot.rs",
];

fn main() {
    let mut files = Vec::new();
    for source in SOURCES {
        println!("cargo:rerun-if-changed={source}");
        collect(Path::new(source), &mut files);
    }
    files.sort();
    // FNV-1a, 64 bits: stable across Rust versions, unlike the std hasher.
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |bytes: &[u8]| {
        for &b in bytes {
            hash ^= u64::from(b);
            hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
        }
    };
    for file in &files {
        let text = std::fs::read(file).unwrap_or_default();
        eat(file.to_string_lossy().replace('\\', "/").as_bytes());
        eat(&(text.len() as u64).to_le_bytes());
        // Line endings as checked out do not change the rule.
        eat(&text
            .iter()
            .copied()
            .filter(|&b| b != b'\r')
            .collect::<Vec<u8>>());
    }
    println!("cargo:rustc-env=DEDUP_RULE_ID={hash:016x}");
}

fn collect(path: &Path, files: &mut Vec<std::path::PathBuf>) {
    if path.is_dir() {
        if let Ok(entries) = std::fs::read_dir(path) {
            for entry in entries.flatten() {
                collect(&entry.path(), files);
            }
        }
    } else if path.extension().is_some_and(|e| e == "rs") {
        files.push(path.to_path_buf());
    }
}

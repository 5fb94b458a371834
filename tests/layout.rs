//! The library's layers, checked from its source: each top-level module or
//! folder of `src/` imports only the layers below it (ARCHITECTURE.md's
//! table, each folder's `mod.rs`), so there is no import circle between
//! them and the engine depends on nothing else of the crate.
//!
//! The check reads the `crate::` paths of the code (`use` items and paths
//! in expressions; comments and doc links, which may point anywhere, are
//! not imports). The binary (`src/main.rs`, `src/cli/`) sits on top and is
//! not checked.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// Each layer of the library, lowest first, with the top-level modules (and
/// the re-exported old paths, which name the same modules) that make it.
/// Two top-level modules of one layer do not import each other: a folder
/// is one module, so what belongs together goes in a folder.
const LAYERS: &[(&str, &[&str])] = &[
    ("engine", &["engine", "config"]),
    (
        "wire",
        &["wire", "record", "lines", "input", "timestamp", "batch"],
    ),
    ("metrics", &["metrics"]),
    ("tools", &["tune", "values", "compare", "report_html"]),
    ("state", &["state", "snapshot", "journal", "output"]),
    ("error", &["error"]),
    ("pipeline", &["pipeline", "report", "stats", "stream"]),
    ("forget", &["forget"]),
    ("server", &["server"]),
    ("redis_index", &["redis_index"]),
    (
        "queue",
        &[
            "queue",
            "queue_batch",
            "broker",
            "consume",
            "consume_nats",
            "consume_kafka",
        ],
    ),
    ("fuzzing", &["fuzzing"]),
];

fn layer_of(module: &str) -> Option<(usize, &'static str)> {
    LAYERS
        .iter()
        .enumerate()
        .find(|(_, (_, modules))| modules.contains(&module))
        .map(|(rank, (name, _))| (rank, *name))
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The top-level module a file of `src/` belongs to (`src/wire/record.rs`:
/// `wire`; `src/error.rs`: `error`), or `None` for the crate roots and the
/// binary's folder.
fn top_module(src: &Path, file: &Path) -> Option<String> {
    let relative = file.strip_prefix(src).unwrap();
    let first = relative.components().next()?.as_os_str().to_str()?;
    let name = first.strip_suffix(".rs").unwrap_or(first);
    match name {
        "lib" | "main" | "cli" => None,
        _ => Some(name.to_owned()),
    }
}

/// The top-level modules a file names through `crate::`, with the line.
fn crate_references(text: &str) -> Vec<(String, usize)> {
    let mut found = Vec::new();
    for (number, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("//") {
            continue;
        }
        let mut rest = line;
        while let Some(at) = rest.find("crate::") {
            let before = rest[..at].chars().next_back();
            rest = &rest[at + "crate::".len()..];
            // `dedup_crate::` and the like are not the crate's root.
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
                continue;
            }
            if let Some(group) = rest.strip_prefix('{') {
                let names = group.split('}').next().unwrap_or("");
                for name in names.split(',') {
                    let name = name.trim().split("::").next().unwrap_or("").trim();
                    if !name.is_empty() {
                        found.push((name.to_owned(), number + 1));
                    }
                }
                continue;
            }
            let name: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            // `crate::Deduper` and other items of the root are re-exports of
            // the engine's, the wire format's and the error's.
            if name.chars().next().is_some_and(|c| c.is_ascii_lowercase())
                && rest[name.len()..].starts_with("::")
            {
                found.push((name, number + 1));
            }
        }
    }
    found
}

#[test]
fn every_module_imports_only_the_layers_below_it() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.sort();
    let mut wrong = Vec::new();
    let mut unplaced = BTreeSet::new();
    for file in &files {
        let Some(module) = top_module(&src, file) else {
            continue;
        };
        let Some((rank, layer)) = layer_of(&module) else {
            unplaced.insert(module);
            continue;
        };
        let text = fs::read_to_string(file).unwrap();
        for (name, line) in crate_references(&text) {
            if name == module {
                continue;
            }
            let Some((their_rank, their_layer)) = layer_of(&name) else {
                unplaced.insert(name);
                continue;
            };
            if their_rank >= rank {
                wrong.push(format!(
                    "{}:{line}: {module} ({layer}) imports {name} ({their_layer})",
                    file.strip_prefix(&src).unwrap().display()
                ));
            }
        }
    }
    assert!(
        unplaced.is_empty(),
        "modules in no layer (add them to LAYERS): {unplaced:?}"
    );
    assert!(
        wrong.is_empty(),
        "imports against the layers:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn the_engine_imports_nothing_outside_itself() {
    let engine = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/engine");
    let mut files = Vec::new();
    rust_files(&engine, &mut files);
    let mut outside: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for file in &files {
        let text = fs::read_to_string(file).unwrap();
        for (name, line) in crate_references(&text) {
            if name != "engine" {
                outside
                    .entry(name)
                    .or_default()
                    .push(format!("{}:{line}", file.display()));
            }
        }
    }
    assert!(outside.is_empty(), "the engine reaches out: {outside:?}");
}

#[test]
fn the_reference_reader_sees_grouped_and_nested_paths() {
    let found = crate_references(
        "use crate::{engine::Deduper, wire};\nlet x = crate::state::snapshot::MAGIC;\n/// [`crate::server`]\nlet y = dedup_crate::x::y;\nuse crate::Deduper;",
    );
    assert_eq!(
        found,
        vec![
            ("engine".to_owned(), 1),
            ("wire".to_owned(), 1),
            ("state".to_owned(), 2)
        ]
    );
}

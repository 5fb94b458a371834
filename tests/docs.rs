//! The documentation's examples, run: they cannot drift from the code.
//!
//! - Every ```` ```console ```` block of README.md and docs/*.md is a
//!   session: a line starting with `$ ` is a command, run by `sh` (stdout
//!   and stderr together) in a scratch directory that sees the repository's
//!   `fixtures/`, with the binary under test first on the PATH; the lines up
//!   to the next command or the block's end are what it must print, where
//!   `[..]` stands for any text (times, rates).
//! - The Python queue consumer of docs/sidecar.md is run against a real
//!   `dedup-stream serve` on a Unix socket, and must print the block that
//!   follows it.

mod common;

use std::fs;
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::bin;

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// One command of a console block, and what it must print.
#[derive(Debug)]
struct Example {
    /// `file:line` of the command.
    at: String,
    command: String,
    expected: Vec<String>,
}

/// The commands of every console block in `markdown`.
fn examples(name: &str, markdown: &str) -> Vec<Example> {
    let mut found = Vec::new();
    let mut in_console = false;
    let mut in_other = false;
    for (index, line) in markdown.lines().enumerate() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("```") {
            if in_console || in_other {
                in_console = false;
                in_other = false;
            } else if trimmed == "```console" {
                in_console = true;
            } else {
                in_other = true;
            }
            continue;
        }
        if !in_console {
            continue;
        }
        if let Some(command) = line.strip_prefix("$ ") {
            found.push(Example {
                at: format!("{name}:{}", index + 1),
                command: command.to_string(),
                expected: Vec::new(),
            });
        } else {
            found
                .last_mut()
                .unwrap_or_else(|| panic!("{name}:{}: output before a command", index + 1))
                .expected
                .push(line.to_string());
        }
    }
    found
}

/// Whether `line` matches `pattern`, where `[..]` matches any text.
fn matches(pattern: &str, line: &str) -> bool {
    let pieces: Vec<&str> = pattern.split("[..]").collect();
    if pieces.len() == 1 {
        return pattern == line;
    }
    let (first, last) = (pieces[0], pieces[pieces.len() - 1]);
    if !line.starts_with(first) || !line[first.len()..].ends_with(last) {
        return false;
    }
    let mut rest = &line[first.len()..line.len() - last.len()];
    for piece in &pieces[1..pieces.len() - 1] {
        match rest.find(piece) {
            Some(at) => rest = &rest[at + piece.len()..],
            None => return false,
        }
    }
    true
}

/// A scratch directory with `fixtures` linked to the repository's.
fn scratch() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(repo().join("fixtures"), dir.path().join("fixtures")).unwrap();
    dir
}

fn path_with_binary() -> String {
    let bin_dir = Path::new(bin()).parent().unwrap();
    format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

fn documents() -> Vec<PathBuf> {
    let mut docs = vec![repo().join("README.md")];
    let mut more: Vec<PathBuf> = fs::read_dir(repo().join("docs"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "md"))
        .collect();
    more.sort();
    docs.extend(more);
    docs
}

#[test]
fn every_console_example_in_the_docs_prints_what_it_shows() {
    let mut checked = 0;
    for doc in documents() {
        let name = doc.strip_prefix(repo()).unwrap().display().to_string();
        let dir = scratch();
        for example in examples(&name, &fs::read_to_string(&doc).unwrap()) {
            let output = Command::new("sh")
                .arg("-c")
                .arg(format!("exec 2>&1\n{}", example.command))
                .current_dir(dir.path())
                .env("PATH", path_with_binary())
                .env("NO_COLOR", "1")
                .env_remove("RUST_LOG")
                .stdin(Stdio::null())
                .output()
                .unwrap();
            let got = String::from_utf8_lossy(&output.stdout);
            let got: Vec<&str> = got.lines().collect();
            let fits = got.len() == example.expected.len()
                && example
                    .expected
                    .iter()
                    .zip(&got)
                    .all(|(want, line)| matches(want, line));
            assert!(
                fits,
                "{}: `{}` printed\n{}\ninstead of\n{}",
                example.at,
                example.command,
                got.join("\n"),
                example.expected.join("\n")
            );
            checked += 1;
        }
    }
    // The README's tour alone has more; a parser that finds none is broken.
    assert!(checked >= 6, "only {checked} examples found");
}

#[test]
fn the_pattern_matcher_matches_what_it_should_and_only_that() {
    assert!(matches("a [..] b", "a 1.5 s b"));
    assert!(matches(
        "[..] s, [..] messages/s",
        "0.003 s, 11922 messages/s"
    ));
    assert!(!matches("a [..] b", "a 1.5 s c"));
    assert!(!matches("exact", "exact!"));
    assert!(!matches("x[..]y[..]z", "xzy"));
}

/// The first fenced block of kind `kind` after byte `from`, and where it ends.
fn block_after(markdown: &str, kind: &str, from: usize) -> (String, usize) {
    let open = format!("```{kind}\n");
    let start = from + markdown[from..].find(&open).expect("the block") + open.len();
    let end = start + markdown[start..].find("```").expect("its end");
    (markdown[start..end].to_string(), end + 3)
}

#[test]
fn the_python_sidecar_example_prints_what_docs_sidecar_md_shows() {
    let doc = fs::read_to_string(repo().join("docs/sidecar.md")).unwrap();
    let heading = doc.find("## A queue consumer using the sidecar").unwrap();
    let (code, end) = block_after(&doc, "python", heading);
    let (expected, _) = block_after(&doc, "text", end);
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("dedup.sock");
    let address = format!("unix:{}", socket.display());
    assert!(code.contains("unix:/run/dedup/dedup.sock"));
    let code = code.replace("unix:/run/dedup/dedup.sock", &address);

    let mut server = Command::new(bin())
        .args(["serve", "--listen", &address])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut log = std::io::BufReader::new(server.stderr.take().unwrap());
    let mut line = String::new();
    while !line.contains("listening") {
        line.clear();
        assert!(log.read_line(&mut line).unwrap() > 0, "the server stopped");
    }
    let script = dir.path().join("worker.py");
    fs::write(&script, code).unwrap();
    let output = Command::new("python3").arg(&script).output().unwrap();
    server.kill().unwrap();
    server.wait().unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&output.stdout), expected);
}

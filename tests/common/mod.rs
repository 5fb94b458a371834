//! Helpers shared by the integration tests: run the real binary.

#![allow(dead_code)]

pub mod kafka;
pub mod nats;
pub mod redis;
pub mod served;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

/// The fixture feeds with expected outputs (`fixtures/NAME.jsonl`,
/// `fixtures/expected/NAME.jsonl`) and the options each runs with. A name
/// `FILE@VARIANT` replays `fixtures/FILE.jsonl` with other options (see
/// [`feed_input`]).
pub const FIXTURE_FEEDS: &[(&str, &[&str])] = &[
    ("retweet_storm", &[]),
    ("v2_tweets", &[]),
    ("cjk", &[]),
    ("bad_lines", &[]),
    (
        "news_items",
        &[
            "--id-field",
            "id",
            "--text-field",
            "title",
            "--text-field",
            "summary",
        ],
    ),
    (
        "long_items",
        &[
            "--id-field",
            "id",
            "--text-field",
            "title",
            "--text-field",
            "body",
            "--sample",
            "mod:4",
        ],
    ),
    (
        "long_items@spots",
        &[
            "--id-field",
            "id",
            "--text-field",
            "title",
            "--text-field",
            "body",
            "--shingle",
            "spots:2",
        ],
    ),
    ("window", &["--window", "1h"]),
    ("deletions", &[]),
];

/// The input file of a fixture feed: `NAME.jsonl`, or `FILE.jsonl` for a
/// variant `FILE@VARIANT`.
pub fn feed_input(name: &str) -> String {
    let file = name.split_once('@').map_or(name, |(file, _)| file);
    format!("{file}.jsonl")
}

/// Says that a test (or part of one) was skipped, and why, where `cargo
/// test` shows it: past the harness's capture (which keeps `eprintln!` of
/// a passing test to itself), so a run without a broker says so.
pub fn skipped(what: &str, why: &str) {
    let _ = writeln!(std::io::stderr(), "SKIPPED {what}: {why}");
}

/// The binary under test.
pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_dedup-stream")
}

/// A path under `fixtures/`.
pub fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures")
        .join(name)
}

/// Runs the binary with `args`, feeding `input` on stdin.
pub fn run(args: &[&str], input: &[u8]) -> Output {
    let mut child = Command::new(bin())
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the binary starts");
    let mut stdin = child.stdin.take().expect("piped stdin");
    let input = input.to_vec();
    let feeder = std::thread::spawn(move || {
        // The binary may stop reading early (--on-invalid fail): ignore a
        // closed pipe.
        let _ = stdin.write_all(&input);
    });
    let output = child.wait_with_output().expect("the binary runs");
    feeder.join().expect("feeder thread");
    output
}

/// Stdout as lines of text.
pub fn stdout_lines(output: &Output) -> Vec<String> {
    String::from_utf8(output.stdout.clone())
        .expect("output is UTF-8")
        .lines()
        .map(str::to_string)
        .collect()
}

/// The `dedup` member of each output line.
pub fn verdicts(output: &Output) -> Vec<serde_json::Value> {
    stdout_lines(output)
        .iter()
        .map(|line| {
            let value: serde_json::Value =
                serde_json::from_str(line).expect("output lines are JSON");
            value["dedup"].clone()
        })
        .collect()
}

/// Sends a worker SIGTERM, then waits (at most 30 s) for its exit status.
pub fn terminate(child: &mut Child) -> ExitStatus {
    Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill runs");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            return status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the worker did not stop within 30 s of SIGTERM");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// SIGTERM, then asserts the worker stopped with success; shows its log
/// when it did not (it may have stopped long before).
pub fn stops_cleanly(child: &mut Child, log: &Path) {
    let status = terminate(child);
    assert!(
        status.success(),
        "the worker stopped with {status}; its log:\n{}",
        std::fs::read_to_string(log).unwrap_or_default()
    );
}

//! Helpers shared by the integration tests: run the real binary, and the
//! pieces every real server the tests start is made of (a program that
//! must be there in CI, a free loopback port, a process killed when
//! dropped); `redis`, `nats` and `kafka` build their servers from them.

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

/// A server program the tests run: its name, the variable that makes its
/// absence a failure (CI sets it), and how to install it.
pub struct Program {
    pub name: &'static str,
    pub required_by: &'static str,
    pub install: &'static str,
}

impl Program {
    /// Whether the program can be run; if not, and it is not required, the
    /// caller skips (and this says so).
    pub fn available(&self, test: &str) -> bool {
        let found = Command::new(self.name)
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !found {
            if std::env::var(self.required_by).is_ok_and(|v| v == "1") {
                panic!(
                    "{test}: {} is required ({}=1) but not on the PATH",
                    self.name, self.required_by
                );
            }
            skipped(
                test,
                &format!("{} is not on the PATH ({})", self.name, self.install),
            );
        }
        found
    }
}

/// A loopback port nobody listens on now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// Waits until something listens on the loopback `port`, failing the test
/// after `limit`.
pub fn wait_for_port(port: u16, limit: Duration, what: &str) {
    let deadline = Instant::now() + limit;
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            Instant::now() < deadline,
            "{what} did not come up on {port}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A server's process: killed (SIGKILL) when asked or when dropped, and
/// let go on first if it was paused, so that nothing outlives a test.
#[derive(Default)]
pub struct ServerProcess(Option<Child>);

impl ServerProcess {
    /// Runs `command`, which must start.
    pub fn spawn(command: &mut Command, what: &str) -> ServerProcess {
        let child = command
            .spawn()
            .unwrap_or_else(|e| panic!("{what} starts: {e}"));
        ServerProcess(Some(child))
    }

    /// Its process id, while it runs.
    pub fn id(&self) -> Option<u32> {
        self.0.as_ref().map(Child::id)
    }

    /// Sends `signal` (`-STOP`, `-CONT`, …) to the running process.
    pub fn signal(&self, signal: &str) {
        let id = self.id().expect("the server runs");
        let status = Command::new("kill")
            .args([signal, &id.to_string()])
            .status()
            .expect("kill runs");
        assert!(status.success(), "kill {signal} {id}");
    }

    /// Kills it (SIGKILL) and reaps it; nothing if it is not running.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = Command::new("kill")
                .args(["-CONT", &child.id().to_string()])
                .status();
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Whether it runs (was started and not killed).
    pub fn running(&self) -> bool {
        self.0.is_some()
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        self.kill();
    }
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

/// The first `n` lines of the bundled synthetic stream (tweets shaped as
/// the API gives them, with their retweets, copies and edits), each with
/// its newline.
pub fn synthetic(n: usize) -> Vec<Vec<u8>> {
    use std::io::Read;
    let file = std::fs::File::open(fixture("synthetic/dev.jsonl.gz")).unwrap();
    let mut text = Vec::new();
    flate2::read::GzDecoder::new(file)
        .read_to_end(&mut text)
        .unwrap();
    text.split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .take(n)
        .map(|l| [l, b"\n"].concat())
        .collect()
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

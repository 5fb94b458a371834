//! `--explain` in the sidecar: `serve --explain` answers each line of the
//! explain fixture with the tag the filter's `--explain` writes, in both
//! reply forms; with the index in Redis the option is refused.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::process::Command;

use common::served::Served;
use common::{bin, fixture};
use dedup_stream::server::ListenAddr;

/// Sends `input` to a server started with `args` and reads one reply per
/// line.
fn ask(args: &[&str], input: &str) -> Vec<String> {
    let mut all = vec!["--listen", "127.0.0.1:0"];
    all.extend_from_slice(args);
    let mut served = Served::start(&all);
    let ListenAddr::Tcp(addr) = served.tcp_addr() else {
        panic!("a TCP address")
    };
    let mut stream = TcpStream::connect(addr).unwrap();
    stream.write_all(input.as_bytes()).unwrap();
    stream.flush().unwrap();
    let mut reader = BufReader::new(stream);
    input
        .lines()
        .map(|_| {
            let mut line = String::new();
            reader.read_line(&mut line).unwrap();
            line
        })
        .collect()
}

#[test]
fn the_sidecar_explains_as_the_filter_does() {
    let input = std::fs::read_to_string(fixture("explain.jsonl")).unwrap();
    let expected = std::fs::read_to_string(fixture("expected/explain.jsonl")).unwrap();
    let replies = ask(&["--explain"], &input);
    assert_eq!(replies.concat(), expected);
    // The verdict form carries the same explain member.
    let verdicts = ask(&["--explain", "--reply", "verdict"], &input);
    for (reply, tagged) in verdicts.iter().zip(expected.lines()) {
        let reply: serde_json::Value = serde_json::from_str(reply).unwrap();
        let tagged: serde_json::Value = serde_json::from_str(tagged).unwrap();
        assert_eq!(reply["dedup"], tagged["dedup"]);
        assert!(reply["dedup"]["explain"]["rule"].is_string());
    }
    // Off by default.
    let plain = ask(&[], &input);
    assert!(
        plain.iter().all(|r| !r.contains("\"explain\"")),
        "{plain:?}"
    );
}

#[test]
fn explain_needs_the_index_in_memory() {
    for sub in [&[][..], &["serve"][..]] {
        let output = Command::new(bin())
            .args(sub)
            .args(["--explain", "--index", "redis://127.0.0.1:1"])
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(2), "{output:?}");
        assert!(
            String::from_utf8_lossy(&output.stderr).contains("--explain needs the index in memory"),
            "{output:?}"
        );
    }
}

//! Replays every fixture feed through the real binary and compares its
//! output with the expected file, byte for byte.
//!
//! After a deliberate change of behaviour, regenerate the expected files with
//! `BLESS=1 cargo test --test fixtures` and review the diff.

mod common;

use std::fs;

use common::{feed_input, fixture, run};

/// Fixture name and the options it runs with.
const CASES: &[(&str, &[&str])] = common::FIXTURE_FEEDS;

fn check(name: &str, args: &[&str]) {
    let input = fs::read(fixture(&feed_input(name))).expect("fixture exists");
    let mut all_args = vec!["--quiet"];
    all_args.extend_from_slice(args);
    let output = run(&all_args, &input);
    assert!(output.status.success(), "{name}: {:?}", output);
    let expected_path = fixture(&format!("expected/{name}.jsonl"));
    if std::env::var_os("BLESS").is_some() {
        fs::write(&expected_path, &output.stdout).expect("write expected output");
    }
    let expected = fs::read(&expected_path).expect("expected output exists (BLESS=1 writes it)");
    if output.stdout != expected {
        let got = String::from_utf8_lossy(&output.stdout);
        let want = String::from_utf8_lossy(&expected);
        for (i, (g, w)) in got.lines().zip(want.lines()).enumerate() {
            assert_eq!(g, w, "{name}: output line {} differs", i + 1);
        }
        panic!(
            "{name}: {} output lines, expected {}",
            got.lines().count(),
            want.lines().count()
        );
    }
    assert_passes_bytes_through(name, &input, &output.stdout);
}

/// Each output line is its input line, unchanged but for the tag spliced in
/// before the closing brace (and `\n` for `\r\n`).
fn assert_passes_bytes_through(name: &str, input: &[u8], output: &[u8]) {
    let mut inputs = input
        .split(|&b| b == b'\n')
        .map(|l| l.strip_suffix(b"\r").unwrap_or(l))
        .filter(|l| !l.iter().all(u8::is_ascii_whitespace));
    for out in output.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
        let tag_start = find(out, b",\"dedup\":{").expect("a tag");
        let tag_end = out.len() - 1;
        let stripped: Vec<u8> = [&out[..tag_start], &out[tag_end..]].concat();
        let original = inputs
            .by_ref()
            .find(|l| *l == stripped.as_slice())
            .unwrap_or_else(|| {
                panic!(
                    "{name}: output line is not an input line plus a tag: {}",
                    String::from_utf8_lossy(out)
                )
            });
        assert_eq!(original, stripped.as_slice());
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).rposition(|w| w == needle)
}

#[test]
fn retweet_storm() {
    check(CASES[0].0, CASES[0].1);
}

#[test]
fn v2_tweets() {
    check(CASES[1].0, CASES[1].1);
}

#[test]
fn cjk() {
    check(CASES[2].0, CASES[2].1);
}

#[test]
fn bad_lines() {
    check(CASES[3].0, CASES[3].1);
}

#[test]
fn news_items() {
    check(CASES[4].0, CASES[4].1);
}

#[test]
fn long_items_sampled() {
    check(CASES[5].0, CASES[5].1);
}

#[test]
fn long_items_spots() {
    check(CASES[6].0, CASES[6].1);
}

#[test]
fn window() {
    check(CASES[7].0, CASES[7].1);
}

#[test]
fn deletions() {
    check(CASES[8].0, CASES[8].1);
}

#[test]
fn output_is_the_same_for_every_thread_count() {
    for (name, args) in CASES {
        let input = fs::read(fixture(&feed_input(name))).unwrap();
        let mut outputs = Vec::new();
        for threads in ["1", "2", "7"] {
            let mut all = vec!["--quiet", "--threads", threads];
            all.extend_from_slice(args);
            outputs.push(run(&all, &input).stdout);
        }
        assert!(outputs.windows(2).all(|w| w[0] == w[1]), "{name}");
    }
}

/// `--explain`: each rule of the decision shows on a line of its own
/// fixture (docs/explain.md), and without the option the output is the
/// same bytes less the `"explain"` members.
#[test]
fn explain() {
    check("explain", &["--explain"]);
    let expected = String::from_utf8(fs::read(fixture("expected/explain.jsonl")).unwrap()).unwrap();
    for rule in [
        "exact",
        "threshold",
        "anchor",
        "lone_recent",
        "empty",
        "no_candidate",
        "below_threshold",
    ] {
        let shown = format!(r#""explain":{{"rule":"{rule}""#);
        assert!(expected.contains(&shown), "no line shows {rule}");
    }
    let input = fs::read(fixture("explain.jsonl")).unwrap();
    let plain = run(&["--quiet"], &input);
    let stripped: String = expected
        .lines()
        .map(|line| {
            let at = line.find(r#","explain":{"#).expect("explained");
            // The explain object is the tag's last member: it ends two
            // braces before the end of the line.
            format!("{}{}\n", &line[..at], &line[line.len() - 2..])
        })
        .collect();
    assert_eq!(String::from_utf8(plain.stdout).unwrap(), stripped);
}

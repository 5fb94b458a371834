//! The command line's behaviour: options, errors, exit statuses, hostile
//! input. Every test runs the real binary.

mod common;

use std::io::{Read, Write};
use std::process::{Command, Stdio};

use common::{bin, run, stdout_lines, verdicts};

fn tweet(id: &str, text: &str) -> String {
    format!(
        "{{\"id_str\":\"{id}\",\"text\":{}}}\n",
        serde_json::to_string(text).unwrap()
    )
}

const STORY: &str = "Flooding has closed the coastal highway north of the city tonight, police say";

#[test]
fn tags_new_and_duplicates_in_input_order() {
    let input = [
        tweet("1", STORY),
        tweet(
            "2",
            "Completely unrelated: the bakery on 5th street reopens on Monday",
        ),
        tweet("3", &format!("RT @police: {STORY}")),
    ]
    .concat();
    let output = run(&["--quiet"], input.as_bytes());
    assert!(output.status.success());
    let v = verdicts(&output);
    assert_eq!(v[0], serde_json::json!({"status": "new"}));
    assert_eq!(v[1], serde_json::json!({"status": "new"}));
    assert_eq!(
        v[2],
        serde_json::json!({"status": "duplicate", "duplicate_of": "1", "similarity": 1, "cluster": "1"})
    );
    assert!(
        output.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn numeric_ids_keep_every_digit() {
    // 2^63 + 1 and its neighbours: all the same f64.
    let input = "{\"id\":9223372036854775809,\"text\":\"the same words over and over again\"}\n\
                 {\"id\":9223372036854775808,\"text\":\"the same words over and over again\"}\n";
    let output = run(&["--quiet"], input.as_bytes());
    let lines = stdout_lines(&output);
    assert!(
        lines[1].contains("\"duplicate_of\":9223372036854775809,"),
        "{}",
        lines[1]
    );
}

#[test]
fn summary_goes_to_stderr_unless_quiet() {
    let input = tweet("1", STORY);
    let output = run(&[], input.as_bytes());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("1 message: 1 new, 0 duplicates, 0 invalid lines, 0 evicted"),
        "{stderr}"
    );
    let quiet = run(&["--quiet"], input.as_bytes());
    assert!(quiet.stderr.is_empty());
}

#[test]
fn invalid_lines_are_reported_by_number_and_skipped() {
    let input = format!(
        "{}not json\n[1,2]\n{{\"id_str\":\"9\"}}\n\n{}",
        tweet("1", STORY),
        tweet("2", STORY)
    );
    let output = run(&[], input.as_bytes());
    assert!(output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("line 2: not valid JSON"), "{stderr}");
    assert!(stderr.contains("line 3: not a JSON object"), "{stderr}");
    assert!(stderr.contains("line 4: no text field"), "{stderr}");
    assert!(stderr.contains("3 invalid lines"), "{stderr}");
    assert_eq!(stdout_lines(&output).len(), 2);
}

#[test]
fn on_invalid_fail_stops_with_status_65_after_writing_what_came_before() {
    let input = format!("{}oops\n{}", tweet("1", STORY), tweet("2", STORY));
    let output = run(&["--on-invalid", "fail"], input.as_bytes());
    assert_eq!(output.status.code(), Some(65));
    assert_eq!(stdout_lines(&output).len(), 1);
    assert!(String::from_utf8_lossy(&output.stderr).contains("line 2: not valid JSON"));
}

#[test]
fn bad_usage_exits_2() {
    for args in [
        &["--threshold", "1.5"][..],
        &["--shingle", "bytes:3"],
        &["--sample", "mod:1"],
        &["--measure", "cosine"],
        &["--capacity", "0"],
        &["--no-such-option"],
        &["--text-field", "a..b"],
    ] {
        let output = run(args, b"");
        assert_eq!(
            output.status.code(),
            Some(2),
            "{args:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
}

#[test]
fn emit_filters_what_is_written() {
    let input = [
        tweet("1", STORY),
        tweet("2", STORY),
        tweet("3", "something else entirely, see"),
    ]
    .concat();
    let new = run(&["--quiet", "--emit", "new"], input.as_bytes());
    let dups = run(&["--quiet", "--emit", "duplicates"], input.as_bytes());
    assert_eq!(stdout_lines(&new).len(), 2);
    assert_eq!(stdout_lines(&dups).len(), 1);
    assert!(stdout_lines(&dups)[0].starts_with("{\"id_str\":\"2\""));
}

#[test]
fn capacity_one_compares_with_the_message_before() {
    let input = [
        tweet("1", STORY),
        tweet("2", "an entirely different message here"),
        tweet("3", STORY),
    ]
    .concat();
    let output = run(&["--capacity", "1"], input.as_bytes());
    let v = verdicts(&output);
    assert_eq!(v[2]["status"], "new", "1 was evicted by 2");
    assert!(String::from_utf8_lossy(&output.stderr).contains("2 evicted"));
}

#[test]
fn field_options_pick_the_id_and_join_texts() {
    let input = "{\"guid\":\"a\",\"title\":\"Harbour bridge to close\",\"summary\":\"The harbour bridge closes for repairs all of next week\"}\n\
                 {\"guid\":\"b\",\"title\":\"Harbour bridge to close\",\"summary\":\"The harbour bridge closes for repairs all of next week.\"}\n";
    let output = run(
        &[
            "--quiet",
            "--id-field",
            "guid",
            "--text-field",
            "title",
            "--text-field",
            "summary",
        ],
        input.as_bytes(),
    );
    let v = verdicts(&output);
    assert_eq!(v[1]["duplicate_of"], "a");
}

#[test]
fn native_retweets_compare_the_retweeted_text() {
    let input = concat!(
        r#"{"id_str":"1","full_text":"A long original tweet about the launch of the new rover mission to Mars, with every detail"}"#,
        "\n",
        r#"{"id_str":"2","full_text":"RT @nasa: A long original tweet about the launch of…","retweeted_status":{"id_str":"1","full_text":"A long original tweet about the launch of the new rover mission to Mars, with every detail"}}"#,
        "\n",
        r#"{"id":"3","text":"RT @nasa: A long original tweet about the…","referenced_tweets":[{"type":"retweeted","id":"1","text":"A long original tweet about the launch of the new rover mission to Mars, with every detail"}]}"#,
        "\n"
    );
    let v = verdicts(&run(&["--quiet"], input.as_bytes()));
    assert_eq!(v[1]["duplicate_of"], "1");
    assert_eq!(v[1]["similarity"], 1);
    assert_eq!(v[2]["duplicate_of"], "1");
}

#[test]
fn a_huge_line_is_skipped_without_being_read_whole() {
    let mut input = tweet("1", STORY).into_bytes();
    input.extend_from_slice(b"{\"id_str\":\"2\",\"text\":\"");
    input.extend(std::iter::repeat_n(b'x', 8 << 20));
    input.extend_from_slice(b"\"}\n");
    input.extend_from_slice(tweet("3", STORY).as_bytes());
    let output = run(&["--max-line-bytes", "4096"], &input);
    assert!(output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("line 2: line is longer than the limit of 4096 bytes"),
        "{stderr}"
    );
    assert_eq!(verdicts(&output)[1]["duplicate_of"], "1");
}

#[test]
fn invalid_utf8_and_deep_nesting_do_not_crash() {
    let mut input = b"{\"id_str\":\"1\",\"text\":\"caf\xe9\"}\n".to_vec();
    input.extend_from_slice(b"{\"id_str\":\"2\",\"text\":\"deep\",\"x\":");
    input.extend(std::iter::repeat_n(b'[', 100_000));
    input.extend(std::iter::repeat_n(b']', 100_000));
    input.extend_from_slice(b"}\n{\"id_str\":\"3\",\"text\":");
    input.extend(std::iter::repeat_n(b'[', 100_000));
    input.extend_from_slice(b"\n");
    let output = run(&[], &input);
    assert!(output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("line 1: invalid UTF-8 at byte 25"),
        "{stderr}"
    );
    assert!(stderr.contains("line 3: not valid JSON"), "{stderr}");
    assert_eq!(stdout_lines(&output).len(), 1);
}

#[test]
fn a_closed_output_pipe_ends_the_run_quietly() {
    let mut child = Command::new(bin())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let mut first = [0u8; 1];
    let mut stdin = child.stdin.take().unwrap();
    let feeder = std::thread::spawn(move || {
        for i in 0..200_000 {
            if stdin
                .write_all(
                    tweet(&i.to_string(), &format!("message number {i} says hello")).as_bytes(),
                )
                .is_err()
            {
                break;
            }
        }
    });
    stdout.read_exact(&mut first).unwrap();
    drop(stdout);
    let status = child.wait().unwrap();
    feeder.join().unwrap();
    assert_eq!(status.code(), Some(0));
}

#[test]
fn compare_explains_a_verdict() {
    let output = Command::new(bin())
        .args(["compare", STORY, &format!("RT @police: {STORY}…")])
        .output()
        .unwrap();
    assert!(output.status.success());
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(text.starts_with("similarity: "), "{text}");
    assert!(text.contains(": duplicate"), "{text}");
    assert!(text.contains("shared ("), "{text}");
    assert!(text.contains("\"coastal highway\""), "{text}");
    assert!(!text.contains("rule: "), "only with --explain: {text}");
}

/// `compare --explain` names the rule the filter's `--explain` would tag
/// the second text with, and the counts behind the similarity.
#[test]
fn compare_explain_names_the_rule() {
    let cases = [
        (format!("RT @police: {STORY}"), "rule: exact (containment: "),
        (
            format!(
                "{STORY}, police say. Avoid the area and take the inland road until the water goes down"
            ),
            "rule: anchor (containment: ",
        ),
        (
            "A bake sale on main street this Sunday morning".to_string(),
            "rule: below_threshold (",
        ),
    ];
    for (b, want) in cases {
        let output = Command::new(bin())
            .args(["compare", "--explain", STORY, &b])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&output.stdout);
        assert!(text.contains(want), "{b}: {text}");
        assert!(text.contains("only in B ("), "{text}");
    }
}

/// Two texts of one template that differ in a number (issue 39) are not
/// duplicates, in `compare` as in the filter; a copy that keeps the number
/// is.
#[test]
fn a_number_that_differs_is_a_template_not_a_copy() {
    const A: &str = "I'm at Los Angeles International Airport (LAX) - @lax_official (Los Angeles, CA) w/ 175 others";
    const B: &str = "I'm at Los Angeles International Airport (LAX) - @lax_official (Los Angeles, CA) w/ 17 others";
    let output = Command::new(bin())
        .args(["compare", "--explain", A, B])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(1), "{text}");
    assert!(text.contains("rule: slot_differs ("), "{text}");
    let stream = [
        tweet("1", A),
        tweet("2", B),
        tweet("3", &format!("RT @x: {A}")),
    ]
    .concat();
    let v = verdicts(&run(&["--quiet", "--explain"], stream.as_bytes()));
    assert_eq!(v[1]["status"], "new", "{:?}", v[1]);
    assert_eq!(v[1]["explain"]["rule"], "slot_differs", "{:?}", v[1]);
    assert_eq!(v[1]["explain"]["nearest"]["id"], "1", "{:?}", v[1]);
    assert_eq!(v[2]["duplicate_of"], "1", "{:?}", v[2]);
}

/// A one-word edit of a ten-word tweet is 0.79 similar: a duplicate as a
/// lone recent match (the only story near, right after its original), new
/// with `--recent 0`, new when another story is near it, and new once its
/// original is more than `--recent` messages back.
#[test]
fn a_lone_recent_edit_is_a_duplicate() {
    const ORIGINAL: &str = "She was following my life with the dark night. #wwdc #tbt";
    const EDIT: &str = "She following my cool with the dark night. #wwdc #tbt";
    let pair = [tweet("1", ORIGINAL), tweet("2", EDIT)].concat();
    let v = verdicts(&run(&["--quiet"], pair.as_bytes()));
    assert_eq!(v[1]["status"], "duplicate");
    assert_eq!(v[1]["duplicate_of"], "1");
    assert_eq!(v[1]["similarity"], 0.7895);
    let v = verdicts(&run(&["--quiet", "--recent", "0"], pair.as_bytes()));
    assert_eq!(v[1]["status"], "new");
    // Another story within 0.5 of the edit (0.6): a template's crowd, not
    // a copy.
    let crowded = [
        tweet("3", "We all saw the dark night. #wwdc #tbt"),
        tweet("1", ORIGINAL),
        tweet("2", EDIT),
    ]
    .concat();
    let v = verdicts(&run(&["--quiet"], crowded.as_bytes()));
    assert_eq!(v[2]["status"], "new", "{:?}", v[2]);
    // Two messages in between, a reach of one.
    let apart = [
        tweet("1", ORIGINAL),
        tweet("3", "an entirely different message here"),
        tweet("4", "and another one about something else"),
        tweet("2", EDIT),
    ]
    .concat();
    let v = verdicts(&run(&["--quiet", "--recent", "1"], apart.as_bytes()));
    assert_eq!(v[3]["status"], "new");
    let v = verdicts(&run(&["--quiet", "--recent", "3"], apart.as_bytes()));
    assert_eq!(v[3]["status"], "duplicate");
    // compare says so too, and why.
    let output = Command::new(bin())
        .args(["compare", ORIGINAL, EDIT])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        text.contains("0.8: duplicate (a lone recent match"),
        "{text}"
    );
    assert_eq!(output.status.code(), Some(0), "a duplicate: 0, as grep");
    let output = Command::new(bin())
        .args(["compare", "--recent", "0", ORIGINAL, EDIT])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(text.contains("0.8: not a duplicate"), "{text}");
    assert_eq!(output.status.code(), Some(1), "not a duplicate: 1, as grep");
    // Trouble is 2.
    let output = Command::new(bin())
        .args(["compare", "@/no/such/file", EDIT])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
}

#[test]
fn compare_shows_spot_signatures_and_the_sampling() {
    let output = Command::new(bin())
        .args([
            "compare",
            "--shingle",
            "spots:2",
            "--sample",
            "mod:4",
            "Home | News: The cat sat on the warm mat by the front door",
            "the cat sat on the warm mat by",
        ])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1), "not near-duplicates");
    let text = String::from_utf8_lossy(&output.stdout);
    // B holds three of A's five chains: under two thirds of A, and the two
    // neither begin nor end alike, so the pair is compared by Jaccard.
    assert!(
        text.starts_with("similarity: 0.6000 (containment, spots:2+mod:4)"),
        "{text}"
    );
    // The stop word, then the next two words that are not stop words; the
    // menu has no stop word, and a chain the end cuts short is left out.
    assert!(text.contains("shared (3): "), "{text}");
    for chain in ["\"the cat sat\"", "\"on warm mat\"", "\"the warm mat\""] {
        assert!(text.contains(chain), "{text}");
    }
    assert!(text.contains("only in A (2): "), "{text}");
    assert!(text.contains("only in B (0):"), "{text}");
}

/// SIGTERM and SIGINT stop the filter at a line boundary: every line already
/// read is decided and written, and the exit status says which signal.
#[test]
fn signals_stop_the_filter_after_answering_what_was_read() {
    use std::io::BufRead;
    for (signal, status) in [("TERM", 0), ("INT", 130)] {
        let mut child = Command::new(bin())
            .arg("--quiet")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
        stdin
            .write_all(
                [tweet("1", STORY), tweet("2", &format!("RT @x: {STORY}"))]
                    .concat()
                    .as_bytes(),
            )
            .unwrap();
        stdin.flush().unwrap();
        // Both lines are answered while the input stays open (the writer
        // flushes when it has nothing queued).
        let mut lines = Vec::new();
        for _ in 0..2 {
            let mut line = String::new();
            stdout.read_line(&mut line).unwrap();
            lines.push(line);
        }
        assert!(lines[1].contains("\"duplicate_of\":\"1\""), "{lines:?}");
        let killed = Command::new("kill")
            .args([&format!("-{signal}"), &child.id().to_string()])
            .status()
            .unwrap();
        assert!(killed.success());
        let exit = child.wait().unwrap();
        assert_eq!(exit.code(), Some(status), "SIG{signal}");
        let mut rest = String::new();
        stdout.read_to_string(&mut rest).unwrap();
        assert_eq!(rest, "", "nothing after the lines already answered");
        drop(stdin);
    }
}

/// Texts with nothing left once normalised (empty, blank, a bare link) have
/// nothing to compare: each is new, and none is a duplicate of another.
#[test]
fn texts_empty_once_normalised_are_all_new() {
    let input = b"{\"id\":1,\"text\":\"\"}\n{\"id\":2,\"text\":\"\"}\n{\"id\":3,\"text\":\"   \"}\n{\"id\":4,\"text\":\"https://t.co/abc\"}\n{\"id\":5,\"text\":\"https://t.co/abc\"}\n";
    let output = common::run(&["--quiet"], input);
    assert!(output.status.success());
    let verdicts = common::verdicts(&output);
    assert_eq!(verdicts.len(), 5);
    assert!(
        verdicts.iter().all(|v| v["status"] == "new"),
        "{verdicts:?}"
    );
}

/// `--empty-text invalid`: such texts are refused like bad lines, each
/// named with its line number and the reason, and the other lines pass as
/// before; a run where every line is such a text exits as one with no
/// usable line.
#[test]
fn empty_text_invalid_refuses_texts_with_nothing_to_compare() {
    let words = "Flooding closes the coastal highway north of the city tonight";
    let input = format!(
        "{{\"id\":1,\"text\":\"{words}\"}}\n{{\"id\":2,\"text\":\"  \"}}\n{{\"id\":3,\"text\":\"RT @news: https://t.co/abc\"}}\n{{\"id\":4,\"text\":\"RT @x: {words}\"}}\n"
    );
    let output = common::run(&["--quiet", "--empty-text", "invalid"], input.as_bytes());
    assert!(output.status.success(), "{output:?}");
    let lines = common::stdout_lines(&output);
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert!(lines[0].starts_with("{\"id\":1,"), "{lines:?}");
    assert!(lines[1].contains("\"duplicate_of\":1"), "{lines:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    for line in [2, 3] {
        assert!(
            stderr.contains(&format!("line {line}: text has nothing to compare")),
            "{stderr}"
        );
    }
    let all_empty = common::run(
        &["--quiet", "--empty-text", "invalid"],
        b"{\"id\":1,\"text\":\"\"}\n",
    );
    assert_eq!(all_empty.status.code(), Some(65), "{all_empty:?}");
    let bad = common::run(&["--empty-text", "skip"], b"");
    assert_eq!(bad.status.code(), Some(2));
}

/// Runs the binary with `args` in `dir`, feeding `input`.
fn run_in(dir: &std::path::Path, args: &[&str], input: &[u8]) -> std::process::Output {
    let mut child = Command::new(bin())
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let input = input.to_vec();
    let feeder = std::thread::spawn(move || {
        let _ = stdin.write_all(&input);
    });
    let output = child.wait_with_output().unwrap();
    feeder.join().unwrap();
    output
}

#[test]
fn output_options_never_replace_an_input_or_a_file_of_another_kind() {
    let dir = tempfile::tempdir().unwrap();
    let tweets = [
        tweet("1", STORY),
        tweet("2", &format!("RT @police: {STORY}")),
    ]
    .concat();
    std::fs::write(dir.path().join("in.jsonl"), &tweets).unwrap();
    std::fs::write(dir.path().join("notes.txt"), "my notes\n").unwrap();
    let untouched = |what: &str| {
        assert_eq!(
            std::fs::read(dir.path().join("in.jsonl")).unwrap(),
            tweets.as_bytes(),
            "{what}: the input was changed"
        );
        assert_eq!(
            std::fs::read(dir.path().join("notes.txt")).unwrap(),
            b"my notes\n",
            "{what}: the notes were changed"
        );
    };
    let refused = |args: &[&str], input: &[u8], says: &str| {
        let output = run_in(dir.path(), args, input);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(output.stdout.is_empty(), "{args:?}: nothing read or tagged");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
        untouched(&format!("{args:?}"));
    };
    // The slip of a ripgrep user: --stats takes a value here.
    refused(
        &["--stats", "in.jsonl"],
        tweets.as_bytes(),
        "--stats in.jsonl: the file exists and is not a stats file",
    );
    // Its own input, however spelt.
    refused(
        &["--stats", "./in.jsonl", "in.jsonl"],
        b"",
        "is also an input file",
    );
    refused(
        &["-o", "in.jsonl", "in.jsonl"],
        b"",
        "--output in.jsonl: is also an input file",
    );
    refused(
        &["-o", "./in.jsonl", "--force", "in.jsonl"],
        b"",
        "is also an input file",
    );
    refused(
        &["--state", "in.jsonl", "--fresh-state"],
        tweets.as_bytes(),
        "is not a state file",
    );
    refused(
        &["--state", "in.jsonl", "in.jsonl"],
        b"",
        "is also an input file",
    );
    refused(
        &["--stats", "notes.txt", "in.jsonl"],
        b"",
        "is not a stats file",
    );
    refused(&["-o", "notes.txt", "in.jsonl"], b"", "pass --force");
    refused(
        &["--stats", "s.json", "--state", "s.json", "in.jsonl"],
        b"",
        "is also the file of --state",
    );
    let serve = run_in(dir.path(), &["serve", "--state", "notes.txt"], b"");
    assert_eq!(serve.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&serve.stderr).contains("is not a state file"));
    untouched("serve");
    #[cfg(unix)]
    refused(
        &["--state", "/dev/null", "in.jsonl"],
        b"",
        "is not a regular file",
    );

    // Files of their own kind are replaced, run after run.
    for _ in 0..2 {
        let output = run_in(
            dir.path(),
            &[
                "-q",
                "-o",
                "out.jsonl",
                "--stats",
                "run.json",
                "--state",
                "x.state",
                "in.jsonl",
            ],
            b"",
        );
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        assert!(output.stdout.is_empty(), "the lines went to the file");
        let out = std::fs::read_to_string(dir.path().join("out.jsonl")).unwrap();
        assert_eq!(out.lines().count(), 2);
        assert!(
            out.lines()
                .nth(1)
                .unwrap()
                .contains("\"duplicate_of\":\"1\"")
        );
        let stats = std::fs::read_to_string(dir.path().join("run.json")).unwrap();
        assert!(stats.contains("\"messages\":2"), "{stats}");
    }
    // -o - is stdout.
    let output = run_in(dir.path(), &["-q", "-o", "-", "in.jsonl"], b"");
    assert!(output.status.success());
    assert_eq!(verdicts(&output).len(), 2);
    assert!(!dir.path().join("-").exists());
    // --force replaces what is not tagged output (never an input).
    let output = run_in(
        dir.path(),
        &["-q", "-o", "notes.txt", "--force", "in.jsonl"],
        b"",
    );
    assert!(output.status.success());
    assert_eq!(
        std::fs::read_to_string(dir.path().join("notes.txt"))
            .unwrap()
            .lines()
            .count(),
        2
    );
    // Nothing left behind: no temporary files (the state file's journal,
    // emptied by the save, stays beside it).
    let mut names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "in.jsonl",
            "notes.txt",
            "out.jsonl",
            "run.json",
            "x.state",
            "x.state.journal"
        ]
    );
}

#[test]
fn a_failed_run_leaves_the_previous_output_whole() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.jsonl");
    let before = "{\"id\":7,\"dedup\":{\"status\":\"new\"}}\n";
    std::fs::write(&out, before).unwrap();
    // An invalid line with --on-invalid fail stops the run (exit 65).
    let input = [tweet("1", STORY), "not json\n".to_string()].concat();
    let output = run_in(
        dir.path(),
        &["-q", "-o", "out.jsonl", "--on-invalid", "fail"],
        input.as_bytes(),
    );
    assert_eq!(output.status.code(), Some(65));
    assert_eq!(std::fs::read_to_string(&out).unwrap(), before);
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        1,
        "no temporary left"
    );
}

#[test]
fn an_unreadable_created_at_under_window_is_warned_about_and_counted() {
    let line = |id: u32, text: &str, created_at: Option<&str>| {
        let mut value = serde_json::json!({"id_str": id.to_string(), "text": text});
        if let Some(at) = created_at {
            value["created_at"] = at.into();
        }
        format!("{value}\n")
    };
    let input = [
        line(1, STORY, Some("Wed Oct 10 20:19:24 +0000 2018")),
        line(
            2,
            "the bakery on 5th street reopens on Monday",
            Some("last tuesday"),
        ),
        line(3, "no time on this one about the football match", None),
        line(
            4,
            "and another unreadable one, about the weather",
            Some("2018-13-45"),
        ),
    ]
    .concat();
    let output = run(&["--window", "1h"], input.as_bytes());
    assert!(output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    for number in [2, 4] {
        assert!(
            stderr.contains(&format!(
                "line {number}: created_at is not a date in Twitter v1.1 or RFC 3339 form"
            )),
            "line {number}: {stderr}"
        );
    }
    assert!(
        !stderr.contains("<stdin>:3:"),
        "an absent one is not: {stderr}"
    );
    assert!(
        stderr.contains("2 messages with an unreadable created_at took the arrival time"),
        "{stderr}"
    );
    assert_eq!(verdicts(&output).len(), 4, "every message is still decided");
    // Without --window the time does not matter: nothing is said.
    let output = run(&[], input.as_bytes());
    assert!(!String::from_utf8_lossy(&output.stderr).contains("created_at"));
}

#[test]
fn a_gz_file_is_read_decompressed() {
    let plain = common::fixture("retweet_storm.jsonl");
    let bytes = std::fs::read(&plain).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let gz = dir.path().join("retweet_storm.jsonl.gz");
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    encoder.write_all(&bytes).unwrap();
    std::fs::write(&gz, encoder.finish().unwrap()).unwrap();
    let expected = run(&["--quiet", plain.to_str().unwrap()], b"");
    let output = run(&["--quiet", gz.to_str().unwrap()], b"");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(!expected.stdout.is_empty());
    assert_eq!(
        output.stdout, expected.stdout,
        "byte for byte the plain file's output"
    );
}

#[test]
fn rejects_keeps_every_skipped_line_with_where_and_why() {
    let dir = tempfile::tempdir().unwrap();
    let mut a = tweet("1", STORY);
    for i in 0..24 {
        a.push_str(&format!("not json {i}\n"));
    }
    std::fs::write(dir.path().join("a.jsonl"), &a).unwrap();
    let b = [
        tweet("2", &format!("RT @police: {STORY}")),
        format!("{{\"id\":3,\"text\":\"{}\"}}\n", "long ".repeat(40)),
        "{\"id\":4}\n".to_string(),
    ]
    .concat();
    std::fs::write(dir.path().join("b.jsonl"), &b).unwrap();
    for _ in 0..2 {
        let output = run_in(
            dir.path(),
            &[
                "-q",
                "--max-line-bytes",
                "150",
                "--rejects",
                "r.jsonl",
                "a.jsonl",
                "b.jsonl",
            ],
            b"",
        );
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        assert_eq!(verdicts(&output).len(), 2);
        let rejects = std::fs::read_to_string(dir.path().join("r.jsonl")).unwrap();
        let records: Vec<serde_json::Value> = rejects
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(records.len(), 26, "all of them, past the 20 warnings");
        assert_eq!(records[0]["at"], "a.jsonl:2");
        assert!(
            records[0]["reason"]
                .as_str()
                .unwrap()
                .starts_with("not valid JSON")
        );
        assert_eq!(records[0]["line"], "not json 0");
        assert_eq!(records[23]["line"], "not json 23");
        assert_eq!(records[24]["at"], "b.jsonl:2");
        assert_eq!(
            records[24]["reason"],
            "line is longer than the limit of 150 bytes"
        );
        assert!(records[24].get("line").is_none(), "never read whole");
        assert_eq!(records[25]["at"], "b.jsonl:3");
        assert!(
            records[25]["reason"]
                .as_str()
                .unwrap()
                .starts_with("no text field")
        );
    }
    // Like --stats: never an input, never a file of another kind.
    let output = run_in(dir.path(), &["--rejects", "b.jsonl", "a.jsonl"], b"");
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("is not a rejects file"));
}

/// A shell's completion of `dedup-stream WORDS…`, with the script
/// `completions SHELL` writes loaded; `None` when the shell is not there.
fn complete_in(shell: &str, line: &str) -> Option<String> {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("completion");
    let out = Command::new(bin())
        .args(["completions", shell])
        .output()
        .unwrap();
    assert!(out.status.success());
    std::fs::write(&script, &out.stdout).unwrap();
    let script = script.to_str().unwrap();
    let program = match shell {
        "bash" => {
            let words = line.split(' ').collect::<Vec<_>>();
            format!(
                "source {script}; COMP_WORDS=({}); COMP_CWORD={}; _dedup__stream dedup-stream {} {}; \
                 printf '%s\\n' \"${{COMPREPLY[@]}}\"",
                line,
                words.len() - 1,
                words[words.len() - 1],
                words[words.len() - 2],
            )
        }
        "fish" => format!("source {script}; complete -C '{line}'"),
        _ => unreachable!(),
    };
    let done = Command::new(shell).args(["-c", &program]).output().ok()?;
    Some(String::from_utf8_lossy(&done.stdout).into_owned())
}

/// Completion works past a subcommand: `serve --li` completes to
/// `--listen` (bash's script from clap_complete needs a fix for a program
/// name with a hyphen, see main.rs).
#[test]
fn completion_works_for_subcommands() {
    let bash = complete_in("bash", "dedup-stream serve --li").expect("bash runs");
    assert!(bash.lines().any(|l| l == "--listen"), "{bash}");
    assert!(bash.lines().all(|l| l.starts_with("--li")), "{bash}");
    let consume = complete_in("bash", "dedup-stream consume --cla").expect("bash runs");
    assert!(consume.contains("--claim-idle"), "{consume}");
    match complete_in("fish", "dedup-stream serve --li") {
        Some(fish) => assert!(fish.contains("--listen"), "{fish}"),
        None => common::skipped("the fish part", "fish is not installed"),
    }
    // zsh's script names every subcommand's options.
    let zsh = Command::new(bin())
        .args(["completions", "zsh"])
        .output()
        .unwrap();
    let zsh = String::from_utf8(zsh.stdout).unwrap();
    assert!(
        zsh.contains("'*--listen=") && zsh.contains("(serve)"),
        "zsh"
    );
}

/// The filter's options can come from `DEDUP_STREAM_*` variables too (as
/// the services' do), the command line winning; a bad value from one is
/// reported as the variable's.
#[test]
fn filter_options_come_from_the_environment_and_bad_ones_are_named() {
    let input = format!(
        "{}{}",
        tweet("1", "The bakery on 5th street reopens on Monday"),
        tweet("2", "the bakery on 5th street reopens monday!")
    );
    let with_env = |vars: &[(&str, &str)], args: &[&str]| {
        let mut command = Command::new(bin());
        command
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (k, v) in vars {
            command.env(k, v);
        }
        let mut child = command.spawn().unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.as_bytes())
            .unwrap();
        child.wait_with_output().unwrap()
    };
    let default = with_env(&[], &["--quiet"]);
    assert_eq!(verdicts(&default)[1]["status"], "duplicate");
    let strict = [
        ("DEDUP_STREAM_THRESHOLD", "0.99"),
        ("DEDUP_STREAM_RECENT", "0"),
    ];
    let strict_run = with_env(&strict, &["--quiet"]);
    assert_eq!(
        verdicts(&strict_run)[1]["status"],
        "new",
        "0.99 from the environment"
    );
    let typed = with_env(&strict, &["--quiet", "--threshold", "0.8"]);
    assert_eq!(
        verdicts(&typed)[1]["status"],
        "duplicate",
        "the command line wins"
    );
    let bad = with_env(&[("DEDUP_STREAM_THRESHOLD", "7")], &["--quiet"]);
    assert_eq!(bad.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&bad.stderr);
    assert!(
        stderr.contains("the environment variable DEDUP_STREAM_THRESHOLD: invalid value '7'"),
        "{stderr}"
    );
}

/// A named pipe given as an input loses nothing: the check that inputs
/// can be read before the run does not open it (opening and closing it
/// threw away what its writer sent first).
#[cfg(unix)]
#[test]
fn a_named_pipe_input_loses_no_line() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("in.fifo");
    assert!(
        Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    let child = Command::new(bin())
        .arg("--quiet")
        .arg(&fifo)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut writer = std::fs::OpenOptions::new().write(true).open(&fifo).unwrap();
    writer
        .write_all(format!("{}{}", tweet("1", STORY), tweet("2", STORY)).as_bytes())
        .unwrap();
    drop(writer);
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let tags = verdicts(&out);
    assert_eq!(tags.len(), 2, "both lines, the first one too");
    assert_eq!(tags[1]["duplicate_of"], "1");
}

/// A Twitter API v2 response page (tweets in its "data" array), on one
/// line or pretty-printed over many, is not a stream of tweets: the run
/// says how to unpack it.
#[test]
fn a_v2_response_page_gets_a_hint_to_unpack_it() {
    let page = r#"{"data":[{"id":"1","text":"hello world"}],"meta":{"result_count":1}}"#;
    let out = run(&["--quiet"], format!("{page}\n").as_bytes());
    assert_eq!(out.status.code(), Some(65));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("no line had an id field"), "{stderr}");
    assert!(stderr.contains("Twitter API v2 response page"), "{stderr}");
    assert!(stderr.contains("jq -c '.data[]'"), "{stderr}");
    let pretty =
        serde_json::to_string_pretty(&serde_json::from_str::<serde_json::Value>(page).unwrap())
            .unwrap();
    let out = run(&["--quiet"], pretty.as_bytes());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("a JSON document spread over lines"),
        "{stderr}"
    );
}

/// With the tagged lines on the terminal, no status line is drawn there
/// (it would run into them); with them in a file, it is.
#[cfg(target_os = "linux")]
#[test]
fn the_status_line_never_runs_into_output_on_the_terminal() {
    if Command::new("script").arg("--version").output().is_err() {
        common::skipped(
            "the_status_line_never_runs_into_output_on_the_terminal",
            "no script(1) to give the run a terminal",
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let out_file = dir.path().join("tagged.jsonl");
    // A run of two seconds (the line is drawn after one), in a terminal.
    let in_terminal = |extra: &str| {
        let program = format!(
            "(printf '%s\\n' '{{\"id\":1,\"text\":\"a b c\"}}'; sleep 2; \
             printf '%s\\n' '{{\"id\":2,\"text\":\"d e f\"}}') | {} {extra}",
            bin()
        );
        let done = Command::new("script")
            .args(["-qec", &program, "/dev/null"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&done.stdout).into_owned()
    };
    let shown = in_terminal("");
    assert!(shown.contains("\"id\":2"), "{shown}");
    assert!(
        !shown.contains(" messages, "),
        "no status line among the output: {shown:?}"
    );
    let to_file = in_terminal(&format!("-o {}", out_file.display()));
    assert!(
        to_file.contains(" messages, "),
        "the status line when the output is a file: {to_file:?}"
    );
}

/// A file whose name ends in `.zst` is read decompressed, as `.gz` is.
#[test]
fn a_zst_file_is_read_decompressed() {
    let dir = tempfile::tempdir().unwrap();
    let plain = common::fixture("retweet_storm.jsonl");
    let bytes = std::fs::read(&plain).unwrap();
    let packed = dir.path().join("storm.jsonl.zst");
    std::fs::write(&packed, zstd::encode_all(&bytes[..], 3).unwrap()).unwrap();
    let expected = run(&["--quiet", plain.to_str().unwrap()], b"");
    let got = run(&["--quiet", packed.to_str().unwrap()], b"");
    assert!(
        got.status.success(),
        "{}",
        String::from_utf8_lossy(&got.stderr)
    );
    assert!(
        got.stdout == expected.stdout,
        "the same tags as the plain file"
    );
}

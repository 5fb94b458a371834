//! A newcomer's first hour (issue 15), through the real binary: files as
//! arguments, mistakes caught before any work, invalid input reported
//! humanely, progress on a terminal, `compare`'s arguments, usage errors,
//! completions and the manual page, `--stats`, environment variables.
//!
//! The terminal tests run the binary under a pseudo-terminal with `script`
//! (util-linux).

mod common;

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use common::{bin, fixture, run, stdout_lines, verdicts};

fn tweet(id: &str, text: &str) -> String {
    format!(
        "{{\"id_str\":\"{id}\",\"text\":{}}}\n",
        serde_json::to_string(text).unwrap()
    )
}

const STORY: &str = "Flooding has closed the coastal highway north of the city tonight, police say";
const OTHER: &str = "The bakery on 5th street reopens on Monday with a new menu and longer hours";

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// Runs the binary with `args` and `env`, stdin empty.
fn run_env(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(bin());
    command.args(args).stdin(Stdio::null());
    for (key, value) in env {
        command.env(key, value);
    }
    command.output().unwrap()
}

fn write(dir: &Path, name: &str, content: &[u8]) -> PathBuf {
    let path = dir.join(name);
    fs::write(&path, content).unwrap();
    path
}

#[test]
fn files_are_read_in_order_as_one_stream_and_warnings_name_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let a = write(
        dir.path(),
        "a.jsonl",
        format!("{}not json\n", tweet("1", STORY)).as_bytes(),
    );
    // No newline at the end of b: its last line must not run into c's first.
    let b = write(
        dir.path(),
        "b.jsonl",
        tweet("2", OTHER).trim_end().as_bytes(),
    );
    let c = write(
        dir.path(),
        "c.jsonl",
        format!("{}{{\"id_str\":\"4\"}}\n", tweet("3", STORY)).as_bytes(),
    );
    let (a, b, c) = (
        a.to_str().unwrap(),
        b.to_str().unwrap(),
        c.to_str().unwrap(),
    );
    let output = run(&[a, b, c], b"");
    assert!(output.status.success(), "{}", stderr(&output));
    let ids: Vec<String> = stdout_lines(&output)
        .iter()
        .map(|line| serde_json::from_str::<serde_json::Value>(line).unwrap()["id_str"].to_string())
        .collect();
    assert_eq!(ids, ["\"1\"", "\"2\"", "\"3\""]);
    assert_eq!(verdicts(&output)[2]["duplicate_of"], "1");
    let err = stderr(&output);
    assert!(err.contains(&format!("{a}:2: not valid JSON")), "{err}");
    assert!(err.contains(&format!("{c}:2: no text field")), "{err}");
}

#[test]
fn a_dash_reads_stdin_between_files_and_stdin_alone_keeps_plain_line_numbers() {
    let dir = tempfile::tempdir().unwrap();
    let a = write(dir.path(), "a.jsonl", tweet("1", STORY).as_bytes());
    let a = a.to_str().unwrap();
    let output = run(&[a, "-"], format!("oops\n{}", tweet("2", STORY)).as_bytes());
    let v = verdicts(&output);
    assert_eq!(v.len(), 2);
    assert_eq!(v[1]["duplicate_of"], "1");
    assert!(
        stderr(&output).contains("<stdin>:1: not valid JSON"),
        "{}",
        stderr(&output)
    );
    let alone = run(&[], b"oops\n");
    assert!(
        stderr(&alone).contains("line 1: not valid JSON"),
        "{}",
        stderr(&alone)
    );
}

#[test]
fn a_byte_order_mark_is_skipped_on_stdin_and_at_the_start_of_each_file() {
    let dir = tempfile::tempdir().unwrap();
    let with_bom = |id: &str, text: &str| {
        let mut bytes = b"\xEF\xBB\xBF".to_vec();
        bytes.extend_from_slice(tweet(id, text).as_bytes());
        bytes
    };
    let a = write(dir.path(), "a.jsonl", &with_bom("1", STORY));
    let b = write(dir.path(), "b.jsonl", &with_bom("2", STORY));
    let output = run(&[a.to_str().unwrap(), b.to_str().unwrap()], b"");
    assert_eq!(
        stderr(&output).matches("invalid").count(),
        1,
        "{}",
        stderr(&output)
    );
    assert!(stderr(&output).contains("0 invalid lines"));
    assert_eq!(verdicts(&output)[1]["duplicate_of"], "1");
    // The bytes written are the line's, without the mark.
    assert!(stdout_lines(&output)[0].starts_with("{\"id_str\":\"1\""));
    let stdin = run(&["--quiet"], &with_bom("1", STORY));
    assert!(stdin.stderr.is_empty(), "{}", stderr(&stdin));
    assert_eq!(verdicts(&stdin).len(), 1);
}

#[test]
fn an_unwritable_output_path_stops_the_run_before_any_input_is_read() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no/such/dir/x.state");
    for option in ["--state", "--stats"] {
        let output = run(
            &[option, missing.to_str().unwrap()],
            tweet("1", STORY).as_bytes(),
        );
        assert_eq!(output.status.code(), Some(2), "{option}");
        assert!(
            output.stdout.is_empty(),
            "{option}: nothing was read or tagged"
        );
        let err = stderr(&output);
        assert!(err.starts_with("error: "), "clap's style: {err}");
        assert!(
            err.contains(option) && err.contains("does not exist"),
            "{err}"
        );
    }
    // The server checks its state file before it binds.
    let output = run_env(&["serve", "--state", missing.to_str().unwrap()], &[]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains("does not exist"),
        "{}",
        stderr(&output)
    );
    let output = run(&["--stats", dir.path().to_str().unwrap()], b"");
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains("is a directory"),
        "{}",
        stderr(&output)
    );
    assert_eq!(
        fs::read_dir(dir.path()).unwrap().count(),
        0,
        "no probe file left"
    );
}

#[test]
fn a_missing_input_file_stops_the_run_before_any_input_is_read() {
    let dir = tempfile::tempdir().unwrap();
    let a = write(dir.path(), "a.jsonl", tweet("1", STORY).as_bytes());
    let output = run(&[a.to_str().unwrap(), "no-such-file.jsonl"], b"");
    assert_eq!(output.status.code(), Some(2));
    assert!(output.stdout.is_empty());
    assert!(
        stderr(&output).contains("no-such-file.jsonl"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn twenty_warnings_then_a_count_of_the_rest_and_all_of_them_with_v() {
    let mut input = tweet("0", STORY);
    for i in 1..=50 {
        input.push_str(&format!("bad line {i}\n"));
    }
    let output = run(&[], input.as_bytes());
    assert!(output.status.success());
    let err = stderr(&output);
    assert_eq!(err.matches("not valid JSON").count(), 20, "{err}");
    assert!(err.contains("line 21: not valid JSON"), "{err}");
    assert!(!err.contains("line 22:"), "{err}");
    assert!(
        err.contains("30 more invalid lines not shown (-v shows every one)"),
        "{err}"
    );
    assert!(err.contains("50 invalid lines"), "{err}");
    let verbose = run(&["-v"], input.as_bytes());
    let err = stderr(&verbose);
    assert_eq!(err.matches("not valid JSON").count(), 50, "{err}");
    assert!(!err.contains("not shown"), "{err}");
}

#[test]
fn no_usable_line_exits_65_and_names_the_most_common_reason() {
    let input = [
        r#"{"id_str":"1","text":"hello there","user":{"name":"a"}}"#,
        "\n",
        r#"{"id_str":"2","text":"hello again","user":{"name":"b"}}"#,
        "\n",
    ]
    .concat();
    let output = run(&["--text-field", "nope"], input.as_bytes());
    assert_eq!(output.status.code(), Some(65));
    let err = stderr(&output);
    assert!(
        err.contains(
            "no usable line: no line had a text field at `nope`; fields seen on line 1: id_str, text, user"
        ),
        "{err}"
    );
    // A binary file: not UTF-8.
    let binary: Vec<u8> = (0..4096u32).map(|i| (i * 7 % 251) as u8 | 0x80).collect();
    let output = run(&[], &binary);
    assert_eq!(output.status.code(), Some(65));
    assert!(stderr(&output).contains("UTF-8"), "{}", stderr(&output));
    // Empty input is not a failure, nor is one usable line among bad ones.
    assert_eq!(run(&[], b"").status.code(), Some(0));
    assert_eq!(run(&[], b"\n\n").status.code(), Some(0));
    let some = format!("oops\n{}", tweet("1", STORY));
    assert_eq!(run(&[], some.as_bytes()).status.code(), Some(0));
}

#[test]
fn stats_writes_the_summary_as_json() {
    let dir = tempfile::tempdir().unwrap();
    let stats = dir.path().join("run.json");
    let input = [tweet("1", STORY), tweet("2", STORY), "oops\n".into()].concat();
    let output = run(
        &["--quiet", "--stats", stats.to_str().unwrap()],
        input.as_bytes(),
    );
    assert!(output.status.success());
    let json: serde_json::Value = serde_json::from_slice(&fs::read(&stats).unwrap()).unwrap();
    assert_eq!(json["messages"], 2);
    assert_eq!(json["new"], 1);
    assert_eq!(json["duplicates"], 1);
    assert_eq!(json["invalid"], 1);
    assert_eq!(json["evicted"], 0);
    assert_eq!(json["index_size"], 1);
    assert!(json["elapsed_seconds"].as_f64().unwrap() > 0.0);
    assert!(json["messages_per_second"].as_f64().unwrap() > 0.0);
}

#[test]
fn the_summary_speaks_in_the_singular_for_one() {
    let input = [tweet("1", STORY), tweet("2", STORY)].concat();
    let err = stderr(&run(&[], input.as_bytes()));
    assert!(
        err.contains("2 messages: 1 new, 1 duplicate, 0 invalid lines"),
        "{err}"
    );
}

#[test]
fn usage_errors_are_in_clap_style_with_the_valid_range_and_exit_2() {
    for (args, range) in [
        (&["--threshold", "1.5"][..], "(0, 1]"),
        (&["--threshold", "high"], "(0, 1]"),
        (&["--capacity", "0"], "from 1 to 4294967295"),
        (&["--max-line-bytes", "0"], "from 1 to"),
        (&["--max-bucket", "0"], "from 1 to"),
        (
            &["--shingle", "bytes:3"],
            "words:N, words:1-N, chars:N or spots:N",
        ),
        (&["--sample", "mod:1"], "mod:M with M from 2 to 64"),
        (&["--measure", "cosine"], "jaccard or containment"),
        (&["--text-field", "a..b"], "dotted names"),
        (
            &["--emit", "some"],
            "[possible values: all, new, duplicates]",
        ),
        (&["serve", "--max-connections", "0"], "from 1 to"),
        (&["serve", "--idle-timeout", "3d"], "30s, 500ms"),
        (&["serve", "--listen", "nowhere"], "HOST:PORT"),
    ] {
        let output = run_env(args, &[]);
        assert_eq!(output.status.code(), Some(2), "{args:?}");
        let err = stderr(&output);
        assert!(err.starts_with("error: invalid value"), "{args:?}: {err}");
        assert!(err.contains(range), "{args:?}: {err}");
        assert!(err.contains("For more information, try '--help'."), "{err}");
    }
}

/// Reads the server's stderr until it reports listening, then stops it.
fn serve_until_listening(args: &[&str], env: &[(&str, &str)]) -> String {
    use std::io::BufRead;
    let mut command = Command::new(bin());
    command
        .arg("serve")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    for (key, value) in env {
        command.env(key, value);
    }
    let mut child = command.spawn().unwrap();
    let mut err = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut seen = String::new();
    let mut line = String::new();
    while err.read_line(&mut line).unwrap() > 0 {
        seen.push_str(&line);
        if line.contains("listening") {
            break;
        }
        line.clear();
    }
    child.kill().unwrap();
    child.wait().unwrap();
    seen
}

#[test]
fn listen_accepts_a_host_name() {
    let seen = serve_until_listening(&["--listen", "localhost:0"], &[]);
    assert!(seen.contains("listening"), "{seen}");
    assert!(
        seen.contains("127.0.0.1:") || seen.contains("[::1]:"),
        "{seen}"
    );
}

#[test]
fn serve_options_come_from_environment_variables_too() {
    let help = String::from_utf8(run_env(&["serve", "--help"], &[]).stdout).unwrap();
    for var in [
        "[env: DEDUP_STREAM_LISTEN=]",
        "[env: DEDUP_STREAM_THRESHOLD=]",
        "[env: DEDUP_STREAM_IDLE_TIMEOUT=]",
        "[env: DEDUP_STREAM_STATE=]",
    ] {
        assert!(help.contains(var), "{var} in {help}");
    }
    // The variable is read: a bad value is refused like the option's.
    let output = run_env(&["serve"], &[("DEDUP_STREAM_THRESHOLD", "1.5")]);
    assert_eq!(output.status.code(), Some(2));
    assert!(stderr(&output).contains("(0, 1]"), "{}", stderr(&output));
    // And a good one is used.
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("s.sock");
    let listen = format!("unix:{}", socket.display());
    let seen = serve_until_listening(&[], &[("DEDUP_STREAM_LISTEN", &listen)]);
    assert!(seen.contains(&listen), "{seen}");
    // The filter reads them too, and names the variable of a bad value.
    let filter = run_env(&["--quiet"], &[("DEDUP_STREAM_THRESHOLD", "1.5")]);
    assert_eq!(filter.status.code(), Some(2));
    assert!(
        stderr(&filter).contains("DEDUP_STREAM_THRESHOLD"),
        "{}",
        stderr(&filter)
    );
}

#[test]
fn rust_log_chooses_the_log_filter() {
    let input = [tweet("1", STORY), "oops\n".into()].concat();
    let mut child = Command::new(bin())
        .env("RUST_LOG", "error")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let output = child.wait_with_output().unwrap();
    let err = stderr(&output);
    assert!(
        !err.contains("not valid JSON"),
        "warnings filtered out: {err}"
    );
    assert!(err.contains("1 invalid line"), "the summary stays: {err}");
    let shown = run(&[], input.as_bytes());
    assert!(stderr(&shown).contains("line 2: not valid JSON"));
}

#[test]
fn completions_and_the_manual_page() {
    for (shell, marker) in [
        ("bash", "complete -F"),
        ("zsh", "#compdef dedup-stream"),
        ("fish", "complete -c dedup-stream"),
    ] {
        let output = run_env(&["completions", shell], &[]);
        assert!(output.status.success(), "{shell}");
        let script = String::from_utf8(output.stdout).unwrap();
        assert!(script.contains(marker), "{shell}: {script}");
        for word in ["serve", "compare", "threshold", "max-line-bytes"] {
            assert!(script.contains(word), "{shell} completes {word}");
        }
    }
    let bad = run_env(&["completions", "tcsh"], &[]);
    assert_eq!(bad.status.code(), Some(2));
    let man = run_env(&["man"], &[]);
    assert!(man.status.success());
    let page = String::from_utf8(man.stdout).unwrap();
    assert!(page.starts_with(".ie"), "roff: {page}");
    assert!(page.contains(".TH dedup-stream 1"), "{page}");
    assert!(page.contains("\\-\\-threshold"), "{page}");
}

fn compare(args: &[&str]) -> Output {
    let mut all = vec!["compare"];
    all.extend_from_slice(args);
    run_env(&all, &[])
}

#[test]
fn compare_takes_texts_and_reads_files_only_when_asked() {
    let dir = tempfile::tempdir().unwrap();
    let a = write(dir.path(), "a.txt", STORY.as_bytes());
    let a = a.to_str().unwrap();
    // A path without @ is a text, compared as such.
    let as_text = compare(&[a, STORY]);
    assert_eq!(as_text.status.code(), Some(1), "not near-duplicates");
    let text = String::from_utf8_lossy(&as_text.stdout);
    assert!(text.contains("not a duplicate"), "{text}");
    // @PATH and --file read the file.
    for args in [&[&format!("@{a}")[..], STORY][..], &["--file", a, a]] {
        let output = compare(args);
        assert!(output.status.success(), "{args:?}: {}", stderr(&output));
        let text = String::from_utf8_lossy(&output.stdout);
        assert!(text.starts_with("similarity: 1.0000"), "{args:?}: {text}");
    }
    // @@ is a literal @.
    let literal = compare(&["@@nobody here at all", "@nobody here at all"]);
    assert_eq!(literal.status.code(), Some(2), "the second is a file");
    let literal = compare(&["@@nobody here at all", "@@nobody here at all"]);
    assert!(literal.status.success(), "{}", stderr(&literal));
    let text = String::from_utf8_lossy(&literal.stdout);
    assert!(text.starts_with("similarity: 1.0000"), "{text}");
}

#[test]
fn compare_refuses_a_missing_file_and_a_json_lines_file() {
    let missing = compare(&["@no-such-file.txt", STORY]);
    assert_eq!(missing.status.code(), Some(2));
    assert!(
        stderr(&missing).contains("no-such-file.txt"),
        "{}",
        stderr(&missing)
    );
    assert!(missing.stdout.is_empty());
    let feed = fixture("retweet_storm.jsonl");
    let feed = feed.to_str().unwrap();
    let refused = compare(&["--file", feed, feed]);
    assert_eq!(refused.status.code(), Some(2));
    assert!(refused.stdout.is_empty());
    let err = stderr(&refused);
    assert!(err.contains("JSON lines"), "{err}");
    assert!(err.contains(&format!("dedup-stream {feed}")), "{err}");
}

#[test]
fn gen_stream_prints_help_instead_of_a_million_lines() {
    // `cargo test` builds the examples beside the test binaries.
    let deps = std::env::current_exe().unwrap();
    let examples = deps.parent().unwrap().parent().unwrap().join("examples");
    let output = Command::new(examples.join("gen_stream"))
        .arg("--help")
        .output()
        .unwrap();
    assert!(output.status.success());
    let help = String::from_utf8(output.stdout).unwrap();
    assert!(
        help.contains("Usage: gen_stream [COUNT] [short|full|v1] [SEED]"),
        "{help}"
    );
    assert_eq!(
        help.lines().count(),
        help.lines().filter(|l| !l.starts_with('{')).count()
    );
    let bad = Command::new(examples.join("gen_stream"))
        .arg("lots")
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
    assert!(bad.stdout.is_empty());
}

/// Runs `command` (a shell command line) under a pseudo-terminal, with
/// `input` typed at it, and returns everything the terminal showed.
fn on_terminal(command: &str, env: &[(&str, &str)], input: &[u8]) -> String {
    let mut script = Command::new("script");
    script
        .args(["-qec", command, "/dev/null"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (key, value) in env {
        script.env(key, value);
    }
    let mut child = script.spawn().expect("script (util-linux) is installed");
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(input).unwrap();
    let output = child.wait_with_output().unwrap();
    drop(stdin);
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// A shell command that feeds the retweet fixture, then holds stdin open a
/// moment (so that the run lasts past the first redraw) and ends.
fn slow_feed(args: &str) -> String {
    format!(
        "(cat {}; sleep 1) | {} {args} > /dev/null",
        fixture("retweet_storm.jsonl").display(),
        bin()
    )
}

#[test]
fn a_status_line_shows_on_a_terminal_and_is_cleared_at_the_end() {
    let env = [("DEDUP_STREAM_PROGRESS_AFTER_MS", "0")];
    let shown = on_terminal(&slow_feed(""), &env, b"");
    assert!(shown.contains("\r\x1b[2K"), "{shown:?}");
    assert!(
        shown.contains("31 messages, ") && shown.contains("18 duplicates (58.1%)"),
        "{shown:?}"
    );
    assert!(shown.contains("index 17/1000000 (0%)"), "{shown:?}");
    // Cleared before the summary.
    let summary = shown.find("dedup-stream: 31 messages").expect("summary");
    assert!(shown[..summary].ends_with("\r\x1b[2K"), "{shown:?}");
    // Never with --quiet.
    let quiet = on_terminal(&slow_feed("--quiet"), &env, b"");
    assert!(!quiet.contains("messages"), "{quiet:?}");
    // Never when stderr is not a terminal.
    let piped = on_terminal(
        &format!(
            "(cat {}; sleep 1) | {} 2>&1 > /dev/null | cat",
            fixture("retweet_storm.jsonl").display(),
            bin()
        ),
        &env,
        b"",
    );
    assert!(!piped.contains('\x1b'), "{piped:?}");
    assert!(piped.contains("dedup-stream: 31 messages"), "{piped:?}");
}

#[test]
fn a_terminal_on_stdin_gets_a_hint_that_input_is_read_from_it() {
    let shown = on_terminal(bin(), &[], b"\x04");
    assert!(
        shown.contains("dedup-stream: reading JSON lines from stdin (end with Ctrl-D)"),
        "{shown:?}"
    );
    // Not with a file, nor with stdin a pipe.
    let file = fixture("cjk.jsonl");
    let with_file = on_terminal(
        &format!("{} {} > /dev/null", bin(), file.display()),
        &[],
        b"\x04",
    );
    assert!(!with_file.contains("reading JSON lines"), "{with_file:?}");
    let piped = run(&[], b"");
    assert!(!stderr(&piped).contains("reading JSON lines"));
}

#[test]
fn no_color_turns_colour_off_in_warning_lines() {
    let command = format!("printf 'oops\\n' | {} > /dev/null", bin());
    let coloured = on_terminal(&command, &[], b"");
    assert!(
        coloured.contains("\x1b["),
        "colour on a terminal: {coloured:?}"
    );
    let plain = on_terminal(&command, &[("NO_COLOR", "1")], b"");
    assert!(plain.contains("line 1: not valid JSON"), "{plain:?}");
    assert!(!plain.contains('\x1b'), "{plain:?}");
}

//! A newcomer's second hour (issue 38), through the real binary: nothing
//! clobbered, nothing silently wrong. Standard output that is an input,
//! `index forget` on a missing or mismatched state file, `--window` and
//! lines without a time, and the conventions of options and messages.

mod common;

use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{bin, run};

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

fn write(dir: &Path, name: &str, content: &[u8]) -> PathBuf {
    let path = dir.join(name);
    fs::write(&path, content).unwrap();
    path
}

/// Runs the binary with `args`, stdin empty, stdout into `stdout`; kills
/// it after 20 s (a run that reads its own output never ends by itself).
fn run_into(args: &[&str], stdout: Stdio) -> Output {
    let mut child = Command::new(bin())
        .args(args)
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

#[test]
fn stdout_that_is_an_input_file_is_refused_before_anything_is_read() {
    let dir = tempfile::tempdir().unwrap();
    let content = format!("{}{}", tweet("1", STORY), tweet("2", OTHER));
    let f = write(dir.path(), "f.jsonl", content.as_bytes());
    let spelt = dir.path().join(".").join("f.jsonl");
    // `dedup-stream f >> f`: it would read its own output for ever.
    let append = File::options().append(true).open(&f).unwrap();
    let output = run_into(&[spelt.to_str().unwrap()], append.into());
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    let err = stderr(&output);
    assert!(
        err.contains("standard output is the input") && err.contains("f.jsonl"),
        "{err}"
    );
    assert_eq!(fs::read_to_string(&f).unwrap(), content, "f untouched");
    // `dedup-stream - < f >> f`, and no file at all: stdin is f.
    for args in [&["-"][..], &[][..]] {
        let mut child = Command::new(bin())
            .args(args)
            .stdin(File::open(&f).unwrap())
            .stdout(File::options().append(true).open(&f).unwrap())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let started = Instant::now();
        while child.try_wait().unwrap().is_none() && started.elapsed() < Duration::from_secs(20) {
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let output = child.wait_with_output().unwrap();
        assert_eq!(
            output.status.code(),
            Some(2),
            "{args:?}: {}",
            stderr(&output)
        );
        assert!(
            stderr(&output).contains("the input <stdin>"),
            "{}",
            stderr(&output)
        );
    }
    // `dedup-stream f > f`: the shell emptied f; no "0 messages", exit 0.
    let truncated = File::create(&f).unwrap();
    let output = run_into(&[f.to_str().unwrap()], truncated.into());
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    assert!(
        !stderr(&output).contains("0 messages"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn stdout_to_another_file_a_pipe_or_dev_null_is_taken() {
    let dir = tempfile::tempdir().unwrap();
    let f = write(dir.path(), "f.jsonl", tweet("1", STORY).as_bytes());
    let out = dir.path().join("out.jsonl");
    let output = run_into(
        &["--quiet", f.to_str().unwrap()],
        File::create(&out).unwrap().into(),
    );
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(fs::read_to_string(&out).unwrap().contains("\"dedup\""));
    let output = run_into(&["--quiet", f.to_str().unwrap()], Stdio::null());
    assert!(output.status.success(), "{}", stderr(&output));
    let output = run(&["--quiet", f.to_str().unwrap()], b"");
    assert!(output.status.success(), "{}", stderr(&output));
    // With -o, stdout is not where the lines go.
    let tagged = dir.path().join("tagged.jsonl");
    let output = run_into(
        &[
            "--quiet",
            "-o",
            tagged.to_str().unwrap(),
            f.to_str().unwrap(),
        ],
        File::options().append(true).open(&f).unwrap().into(),
    );
    assert!(output.status.success(), "{}", stderr(&output));
}

/// A state file holding `1` (STORY) and `2` (OTHER), saved by the filter.
fn saved_state(dir: &Path) -> PathBuf {
    let state = dir.join("s.state");
    let input = [tweet("1", STORY), tweet("2", OTHER)].concat();
    let output = run(
        &["--quiet", "--state", state.to_str().unwrap()],
        input.as_bytes(),
    );
    assert!(output.status.success(), "{}", stderr(&output));
    state
}

#[test]
fn index_forget_on_a_missing_state_file_is_a_usage_error_and_creates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nosuch.state");
    let output = run(
        &["index", "forget", "--state", missing.to_str().unwrap()],
        b"1\n",
    );
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("no such state file"),
        "{}",
        stderr(&output)
    );
    assert!(output.stdout.is_empty());
    assert_eq!(
        fs::read_dir(dir.path()).unwrap().count(),
        0,
        "neither a state file nor a journal made"
    );
}

#[test]
fn index_forget_never_suggests_nor_takes_fresh_state() {
    let dir = tempfile::tempdir().unwrap();
    let state = saved_state(dir.path());
    let before = fs::read(&state).unwrap();
    let s = state.to_str().unwrap();
    // Settings that do not match the file's: refused, the file kept, and
    // no advice that would empty it.
    let output = run(
        &["index", "forget", "--state", s, "--shingle", "chars:5"],
        b"1\n",
    );
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    let err = stderr(&output);
    assert!(!err.contains("--fresh-state"), "{err}");
    assert!(err.contains("the engine options"), "{err}");
    assert_eq!(fs::read(&state).unwrap(), before);
    // Following the old advice is a usage error now.
    let output = run(
        &[
            "index",
            "forget",
            "--state",
            s,
            "--shingle",
            "chars:5",
            "--fresh-state",
        ],
        b"1\n",
    );
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    assert_eq!(fs::read(&state).unwrap(), before);
    // With the right settings it forgets.
    let output = run(&["index", "forget", "--state", s], b"1\n");
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(
        String::from_utf8_lossy(&output.stdout),
        "1 ids read: 1 held and forgotten, 0 not held; 0 invalid lines\n"
    );
}

#[test]
fn window_warns_once_about_a_line_without_created_at_and_counts_them_at_the_end() {
    let timed = |id: &str, text: &str| {
        format!(
            "{{\"id_str\":\"{id}\",\"created_at\":\"Wed Oct 10 20:19:24 +0000 2018\",\"text\":{}}}\n",
            serde_json::to_string(text).unwrap()
        )
    };
    let input = [
        timed("1", STORY),
        tweet("2", OTHER),
        tweet(
            "3",
            "A third story about the harbour festival and its fireworks tonight",
        ),
        timed("4", STORY),
    ]
    .concat();
    let output = run(&["--window", "1h"], input.as_bytes());
    assert!(output.status.success(), "{}", stderr(&output));
    let err = stderr(&output);
    assert_eq!(err.matches("no created_at").count(), 1, "{err}");
    assert!(err.contains("line 2: no created_at"), "{err}");
    assert!(
        err.contains(
            "2 messages without a created_at took the arrival time of the line (--window)"
        ),
        "{err}"
    );
    // Without --window a message's time does not matter: nothing said.
    let output = run(&[], input.as_bytes());
    assert!(
        !stderr(&output).contains("created_at"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn threads_0_is_automatic_and_numbers_say_what_is_allowed() {
    let input = std::fs::read(common::fixture("retweet_storm.jsonl")).unwrap();
    let one = run(&["--quiet", "--threads", "1"], &input);
    let auto = run(&["--quiet", "--threads", "0"], &input);
    assert!(auto.status.success(), "{}", stderr(&auto));
    assert_eq!(auto.stdout, one.stdout);
    let tune = run(
        &["tune", "--threads", "0", "--label-field", "x", "/dev/null"],
        b"",
    );
    assert!(!stderr(&tune).contains("--threads"), "{}", stderr(&tune));
    let recent = run(&["--recent", "-1"], b"");
    assert_eq!(recent.status.code(), Some(2));
    assert!(
        stderr(&recent).contains("for '--recent <N>': must be a whole number from 0 to"),
        "{}",
        stderr(&recent)
    );
    let shingle = run(&["--shingle", "word3"], b"");
    assert_eq!(shingle.status.code(), Some(2));
    assert!(
        stderr(&shingle).contains("words:N, words:1-N, chars:N or spots:N"),
        "{}",
        stderr(&shingle)
    );
}

/// Runs the binary with `args` and `env` on `input`.
fn run_env(args: &[&str], env: &[(&str, &str)], input: &[u8]) -> Output {
    use std::io::Write;
    let mut command = Command::new(bin());
    command
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (key, value) in env {
        command.env(key, value);
    }
    let mut child = command.spawn().unwrap();
    child.stdin.take().unwrap().write_all(input).unwrap();
    child.wait_with_output().unwrap()
}

#[test]
fn a_flags_variable_takes_the_usual_words_for_yes_and_no() {
    let input = tweet("1", STORY);
    for on in ["1", "yes", "true", "on", "TRUE", "y"] {
        let output = run_env(&[], &[("DEDUP_STREAM_QUIET", on)], input.as_bytes());
        assert!(output.status.success(), "{on}: {}", stderr(&output));
        assert!(!stderr(&output).contains("1 message:"), "{on}: quiet");
    }
    for off in ["0", "no", "false", "off", ""] {
        let output = run_env(&[], &[("DEDUP_STREAM_QUIET", off)], input.as_bytes());
        assert!(output.status.success(), "{off:?}: {}", stderr(&output));
        assert!(
            stderr(&output).contains("dedup-stream: 1 message:"),
            "{off:?}: not quiet: {}",
            stderr(&output)
        );
    }
    let output = run_env(&[], &[("DEDUP_STREAM_QUIET", "maybe")], input.as_bytes());
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains("DEDUP_STREAM_QUIET: invalid value 'maybe'")
            && stderr(&output).contains("1 or 0, yes or no, true or false, on or off"),
        "{}",
        stderr(&output)
    );
    // serve's flags too, and --help says what they take.
    let output = run_env(
        &["serve", "--listen", "256.0.0.1:1"],
        &[("DEDUP_STREAM_EXPLAIN", "yes")],
        b"",
    );
    assert!(
        !stderr(&output).contains("DEDUP_STREAM_EXPLAIN"),
        "{}",
        stderr(&output)
    );
    let help = run_env(&["serve", "--help"], &[], b"");
    assert!(
        String::from_utf8_lossy(&help.stdout)
            .contains("1 or 0, yes or no, true or false, on or off"),
        "{}",
        String::from_utf8_lossy(&help.stdout)
    );
}

#[test]
fn a_filter_run_says_which_options_came_from_the_environment() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("sidecar.state");
    let output = run_env(
        &["--quiet"],
        &[
            ("DEDUP_STREAM_STATE", state.to_str().unwrap()),
            ("DEDUP_STREAM_INDEX", "memory"),
        ],
        tweet("1", STORY).as_bytes(),
    );
    assert!(output.status.success(), "{}", stderr(&output));
    let err = stderr(&output);
    assert!(
        err.contains(&format!(
            "DEDUP_STREAM_STATE={} sets --state (from the environment)",
            state.display()
        )),
        "said even with --quiet: {err}"
    );
    // A location may hold a password: named, not shown.
    assert!(
        err.contains("DEDUP_STREAM_INDEX sets --index") && !err.contains("=memory"),
        "{err}"
    );
    // Nothing said when nothing came from there.
    let plain = run_env(&["--quiet"], &[], tweet("1", STORY).as_bytes());
    assert!(plain.stderr.is_empty(), "{}", stderr(&plain));
}

#[test]
fn a_subcommands_usage_error_shows_the_subcommands_usage() {
    let dir = tempfile::tempdir().unwrap();
    let tagged = write(
        dir.path(),
        "tagged.jsonl",
        b"{\"id\":1,\"dedup\":{\"status\":\"new\"}}\n",
    );
    let tagged = tagged.to_str().unwrap();
    let output = run(&["serve", "--state", tagged], b"");
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains("not a state file")
            && stderr(&output).contains("Usage: dedup-stream serve [OPTIONS]"),
        "{}",
        stderr(&output)
    );
    let data = common::fixture("tour.jsonl");
    let data = data.to_str().unwrap();
    let output = run(
        &["tune", "--csv", tagged, "--label-field", "id_str", data],
        b"",
    );
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains("--csv") && stderr(&output).contains("Usage: dedup-stream tune"),
        "{}",
        stderr(&output)
    );
    let missing = dir.path().join("nosuch.state");
    let output = run(
        &["index", "forget", "--state", missing.to_str().unwrap()],
        b"",
    );
    assert!(
        stderr(&output).contains("Usage: dedup-stream index forget"),
        "{}",
        stderr(&output)
    );
    // tune needs one of two: it names both.
    let output = run(&["tune", data], b"");
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains("--truth <FILE>|--label-field <PATH>"),
        "{}",
        stderr(&output)
    );
    // The filter's stays the filter's.
    let output = run(&["--stats", data], b"");
    assert!(
        stderr(&output).contains("Usage: dedup-stream [OPTIONS] [FILE]..."),
        "{}",
        stderr(&output)
    );
}

/// Runs `command` in a shell under a pseudo-terminal (`script`, from
/// util-linux), typing `input`; what the terminal showed.
fn on_terminal(command: &str, input: &[u8]) -> String {
    use std::io::Write;
    let mut child = Command::new("script")
        .args(["-qec", command, "/dev/null"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("script (util-linux) is installed");
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(input).unwrap();
    let output = child.wait_with_output().unwrap();
    drop(stdin);
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[test]
fn index_drop_asks_on_a_terminal_and_needs_yes_without_one() {
    let test = "index_drop_asks_on_a_terminal_and_needs_yes_without_one";
    if !common::redis::available(test) {
        return;
    }
    let redis = common::redis::RedisServer::start();
    let url = redis.url();
    let made = run(&["--quiet", "--index", &url], tweet("1", STORY).as_bytes());
    assert!(made.status.success(), "{}", stderr(&made));
    let held = || !redis.keys_with_prefix("").is_empty();
    assert!(held());
    // A script without --yes: refused before anything is removed.
    let output = run(&["index", "drop", "--index", &url], b"y\n");
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("pass --yes"),
        "{}",
        stderr(&output)
    );
    assert!(held());
    // On a terminal it asks; anything but y keeps the index.
    let drop = format!("{} index drop --index {url}", bin());
    let shown = on_terminal(&drop, b"n\n");
    assert!(
        shown.contains("Remove every key of index \"dedup-stream\""),
        "{shown}"
    );
    assert!(shown.contains("nothing dropped"), "{shown}");
    assert!(held());
    let shown = on_terminal(&drop, b"y\n");
    assert!(shown.contains("keys removed"), "{shown}");
    assert!(!held());
    // --yes does it without asking.
    assert!(
        run(&["--quiet", "--index", &url], tweet("1", STORY).as_bytes())
            .status
            .success()
    );
    let output = run(&["index", "drop", "--yes", "--index", &url], b"");
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(!held());
}

#[test]
fn index_info_reads_a_state_file_without_loading_it() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("chars.state");
    let s = state.to_str().unwrap();
    let input = [tweet("1", STORY), tweet("2", OTHER)].concat();
    let made = run(
        &["--quiet", "--shingle", "chars:5", "--state", s],
        input.as_bytes(),
    );
    assert!(made.status.success(), "{}", stderr(&made));
    // No engine options needed: the settings are read from the file.
    let output = run(&["index", "info", "--state", s], b"");
    assert!(output.status.success(), "{}", stderr(&output));
    let shown = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(shown.contains("settings:   chars:5"), "{shown}");
    assert!(shown.contains("messages:   2 indexed"), "{shown}");
    assert!(
        shown.contains(&format!("{} bytes", fs::metadata(&state).unwrap().len())),
        "{shown}"
    );
    assert!(shown.contains("journal:"), "{shown}");
    let forgot = run(
        &["index", "forget", "--shingle", "chars:5", "--state", s],
        b"1\n",
    );
    assert!(forgot.status.success(), "{}", stderr(&forgot));
    let shown = run(&["index", "info", "--state", s], b"");
    assert!(
        String::from_utf8_lossy(&shown.stdout).contains("messages:   1 indexed"),
        "{shown:?}"
    );
    // A missing file is a usage error; a file of another kind, an error.
    let output = run(&["index", "info", "--state", "nosuch.state"], b"");
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    let notes = write(dir.path(), "notes.txt", b"my notes\n");
    let output = run(&["index", "info", "--state", notes.to_str().unwrap()], b"");
    assert_eq!(output.status.code(), Some(1));
    assert!(
        stderr(&output).contains("not a dedup-stream state file"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn compressed_input_on_stdin_is_recognised_by_its_magic_number() {
    use std::io::Write;
    let plain = fs::read(common::fixture("tour.jsonl")).unwrap();
    let expected = run(&["--quiet"], &plain);
    assert!(expected.status.success());
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(&plain).unwrap();
    let gz = gz.finish().unwrap();
    let zst = zstd::encode_all(&plain[..], 3).unwrap();
    for (kind, bytes) in [("gzip", &gz), ("zstd", &zst)] {
        let output = run(&["--quiet"], bytes);
        assert!(output.status.success(), "{kind}: {}", stderr(&output));
        assert_eq!(output.stdout, expected.stdout, "{kind} on stdin");
        // A file whose name does not say so, too.
        let dir = tempfile::tempdir().unwrap();
        let file = write(dir.path(), "day.jsonl", bytes);
        let output = run(&["--quiet", file.to_str().unwrap()], b"");
        assert_eq!(output.stdout, expected.stdout, "{kind} in day.jsonl");
    }
    // bzip2 is named, with what to do.
    let output = run(&["--quiet"], b"BZh91AY&SY\x00\x00");
    assert_eq!(output.status.code(), Some(1));
    assert!(stderr(&output).contains("bzcat"), "{}", stderr(&output));
}

#[test]
fn a_file_named_like_a_subcommand_is_read_as_a_path_and_help_says_so() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "serve", tweet("1", STORY).as_bytes());
    let output = Command::new(bin())
        .args(["--quiet", "./serve"])
        .current_dir(dir.path())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(String::from_utf8_lossy(&output.stdout).contains("\"dedup\""));
    let help = run(&["--help"], b"");
    assert!(
        String::from_utf8_lossy(&help.stdout).contains("./serve"),
        "{}",
        String::from_utf8_lossy(&help.stdout)
    );
}

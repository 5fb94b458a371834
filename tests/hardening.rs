//! Hardening regressions (issue 14), each named after the defect it pins,
//! run through the real binary or a real server.

mod common;

use common::{run, stdout_lines, verdicts};

#[test]
fn lone_surrogate_escape_is_tagged_and_passed_through_unchanged() {
    let input = concat!(
        r#"{"id":1,"text":"\ud83d cut off at the limit of the old client"}"#,
        "\n",
        r#"{"id":2,"text":"\ud83d cut off at the limit of the old client"}"#,
        "\n",
    );
    let output = run(&[], input.as_bytes());
    assert!(output.status.success());
    let lines = stdout_lines(&output);
    assert_eq!(
        lines.len(),
        2,
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    // The bytes of the line, escape included, come back as they were.
    assert!(
        lines[0].starts_with(
            r#"{"id":1,"text":"\ud83d cut off at the limit of the old client","dedup":"#
        ),
        "{}",
        lines[0]
    );
    // serde_json refuses the lone surrogate the line carries: read the tag
    // on its own.
    let v: Vec<serde_json::Value> = lines.iter().map(|l| tag(l)).collect();
    assert_eq!(v[0]["status"], "new");
    assert_eq!(v[1]["status"], "duplicate");
    assert_eq!(v[1]["duplicate_of"], 1);
}

/// The `dedup` member spliced at the end of an output line.
fn tag(line: &str) -> serde_json::Value {
    let at = line.rfind(",\"dedup\":").expect("a tag") + ",\"dedup\":".len();
    serde_json::from_str(&line[at..line.len() - 1]).expect("the tag is JSON")
}

#[test]
fn lone_surrogate_in_a_key_is_refused_naming_the_surrogate() {
    let output = run(&[], b"{\"\\ud83d\":1,\"id\":1,\"text\":\"a\"}\n");
    assert!(stdout_lines(&output).is_empty());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("line 1"), "{stderr}");
    assert!(stderr.contains("surrogate"), "{stderr}");
}

#[test]
fn duplicate_keys_take_the_last_occurrence() {
    let input = concat!(
        r#"{"id":"d0","text":"bridge repairs close the northern lane all week"}"#,
        "\n",
        r#"{"id":"d1","id":"d2","text":"bridge repairs close the northern lane all week","text":"an entirely different story about the harbour festival"}"#,
        "\n",
        r#"{"id":"d3","text":"an entirely different story about the harbour festival"}"#,
        "\n",
    );
    let output = run(&[], input.as_bytes());
    let v = verdicts(&output);
    assert_eq!(v.len(), 3);
    // Judged by its last text (new, not a copy of d0) ...
    assert_eq!(v[1]["status"], "new");
    // ... and indexed under its last id.
    assert_eq!(v[2]["status"], "duplicate");
    assert_eq!(v[2]["duplicate_of"], "d2");
    // The line itself passes through with both occurrences.
    assert!(stdout_lines(&output)[1].starts_with(r#"{"id":"d1","id":"d2","#));
}

/// A PID no process has: a child that has exited and been waited for.
fn dead_pid() -> u32 {
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let pid = child.id();
    child.wait().unwrap();
    pid
}

#[cfg(target_os = "linux")]
#[test]
fn kill_9_during_save_leaves_no_temporary_forever() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("s.state");
    // What a save killed mid-way leaves: a big temporary nobody removes.
    let orphan = dir.path().join(format!(".s.state.tmp-{}-3", dead_pid()));
    std::fs::write(&orphan, vec![0u8; 1 << 20]).unwrap();
    let unrelated = dir.path().join(".notes.tmp-1-1");
    std::fs::write(&unrelated, b"not ours").unwrap();
    let output = run(
        &["--state", state.to_str().unwrap()],
        b"{\"id\":1,\"text\":\"a\"}\n",
    );
    assert!(output.status.success());
    assert!(!orphan.exists(), "the orphan was removed at start");
    assert!(unrelated.exists(), "other files are left alone");
    assert!(state.exists());
}

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

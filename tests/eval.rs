//! The quality targets, checked on the labelled slice in `fixtures/eval/`
//! by the same evaluation script that measures the full data
//! (`scripts/eval.py`; Python 3 standard library only).

use std::process::Command;

#[test]
fn quality_targets_hold_on_the_labelled_slice() {
    let root = env!("CARGO_MANIFEST_DIR");
    let output = Command::new("python3")
        .arg(format!("{root}/scripts/eval.py"))
        .args(["--bin", env!("CARGO_BIN_EXE_dedup-stream")])
        .args(["--fixtures", &format!("{root}/fixtures/eval")])
        .arg("--strict")
        .output()
        .expect("python3 runs (the evaluation script needs Python 3)");
    let report = String::from_utf8_lossy(&output.stdout);
    let targets: Vec<&str> = report
        .lines()
        .filter(|l| l.starts_with("PASS ") || l.starts_with("FAIL "))
        .collect();
    assert!(
        targets.len() >= 6,
        "the report lists every target:\n{report}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let failed: Vec<&&str> = targets.iter().filter(|l| l.starts_with("FAIL")).collect();
    assert!(failed.is_empty(), "targets missed: {failed:#?}\n{report}");
    assert!(output.status.success(), "{report}");
}

//! `dedup-stream report`: the page from tagged output, its counts, its
//! inputs (.gz, .zst, several files) and the files it will not replace.

mod common;

use std::io::Write;

use common::{bin, fixture, run};

/// The filter's output for `fixtures/explain.jsonl`, with `--explain`.
fn explained() -> Vec<u8> {
    let out = run(
        &[
            "--quiet",
            "--explain",
            fixture("explain.jsonl").to_str().unwrap(),
        ],
        b"",
    );
    assert!(out.status.success());
    out.stdout
}

fn count_of(page: &str, id: &str) -> String {
    let start = page.find(&format!("id=\"{id}\">")).expect(id) + id.len() + 6;
    page[start..].split('<').next().unwrap().to_string()
}

#[test]
fn the_page_holds_the_counts_of_the_output() {
    let tagged = explained();
    let text = String::from_utf8(tagged.clone()).unwrap();
    let duplicates = text.matches(r#""status":"duplicate""#).count();
    let new = text.matches(r#""status":"new""#).count();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tagged.jsonl.gz");
    let mut gz = flate2::write::GzEncoder::new(
        std::fs::File::create(&path).unwrap(),
        flate2::Compression::fast(),
    );
    gz.write_all(&tagged).unwrap();
    gz.finish().unwrap();
    let html = dir.path().join("report.html");
    let out = std::process::Command::new(bin())
        .args([
            "report",
            path.to_str().unwrap(),
            "-o",
            html.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let page = std::fs::read_to_string(&html).unwrap();
    assert_eq!(count_of(&page, "duplicates"), duplicates.to_string());
    assert_eq!(count_of(&page, "new"), new.to_string());
    assert_eq!(count_of(&page, "messages"), (new + duplicates).to_string());
    // Every rule of the fixture is counted, and the near misses shown.
    for rule in [
        "exact",
        "threshold",
        "anchor",
        "lone_recent",
        "below_threshold",
    ] {
        assert!(page.contains(&format!("<code>{rule}</code>")), "{rule}");
    }
    assert!(page.contains("id=\"near\""));
    assert!(page.contains("threshold 0.8"));
    // Self-contained: nothing fetched, no script.
    for outside in ["http://", "https://", "<script", "src=", "@import"] {
        assert!(!page.contains(outside), "{outside}");
    }
    // The same bytes again; and an earlier report may be replaced.
    let again = std::process::Command::new(bin())
        .args([
            "report",
            path.to_str().unwrap(),
            "-o",
            html.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(again.status.success());
    assert_eq!(std::fs::read_to_string(&html).unwrap(), page);
}

#[test]
fn zstd_input_and_several_files_add_up() {
    let tagged = explained();
    let dir = tempfile::tempdir().unwrap();
    let zst = dir.path().join("a.jsonl.zst");
    std::fs::write(&zst, zstd::encode_all(&tagged[..], 1).unwrap()).unwrap();
    let plain = dir.path().join("b.jsonl");
    std::fs::write(&plain, &tagged).unwrap();
    let out = run(
        &["report", zst.to_str().unwrap(), plain.to_str().unwrap()],
        b"",
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let page = String::from_utf8(out.stdout).unwrap();
    let lines = tagged
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .count();
    assert_eq!(count_of(&page, "messages"), (2 * lines).to_string());
}

#[test]
fn it_refuses_to_replace_another_file_and_untagged_input() {
    let dir = tempfile::tempdir().unwrap();
    let tagged = dir.path().join("tagged.jsonl");
    std::fs::write(&tagged, explained()).unwrap();
    let notes = dir.path().join("notes.html");
    std::fs::write(&notes, "<html>mine</html>").unwrap();
    let out = run(
        &[
            "report",
            tagged.to_str().unwrap(),
            "-o",
            notes.to_str().unwrap(),
        ],
        b"",
    );
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        std::fs::read_to_string(&notes).unwrap(),
        "<html>mine</html>"
    );
    // The input itself is never the page.
    let out = run(
        &[
            "report",
            tagged.to_str().unwrap(),
            "-o",
            tagged.to_str().unwrap(),
        ],
        b"",
    );
    assert_eq!(out.status.code(), Some(2));
    // Input that is not tagged output: said so, exit 1.
    let out = run(&["report", fixture("explain.jsonl").to_str().unwrap()], b"");
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no tagged line"));
}

//! `dedup-stream tune` against the filter itself: every row of its table is
//! what a separate run of the filter at that point, scored as `score.py`
//! scores it, gives.

mod common;

use std::collections::{HashMap, HashSet};
use std::fs;
use std::process::Command;

use common::{bin, fixture, run};

/// Precision, recall, F1, tagged, correct and hits of the filter's output,
/// counted as `score.py` counts them: a duplicate is right when its
/// `duplicate_of` names an earlier message (the latest of that id) of its
/// cluster.
fn score(output: &[u8], clusters: &[String]) -> (f64, f64, f64, usize, usize, usize) {
    let mut index_of: HashMap<String, usize> = HashMap::new();
    let mut seen = HashSet::new();
    let (mut tagged, mut correct, mut dups, mut hits) = (0, 0, 0, 0);
    let lines: Vec<serde_json::Value> = output
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_slice(l).unwrap())
        .collect();
    assert_eq!(
        lines.len(),
        clusters.len(),
        "one output line per input line"
    );
    for (i, line) in lines.iter().enumerate() {
        let cluster = &clusters[i];
        let is_dup = !seen.insert(cluster.clone());
        let target = match line["dedup"]["status"].as_str() {
            Some("duplicate") => {
                let of = line["dedup"]["duplicate_of"].to_string();
                index_of.get(&of).copied()
            }
            _ => None,
        };
        if let Some(j) = target {
            tagged += 1;
            correct += usize::from(clusters[j] == *cluster);
        }
        if is_dup {
            dups += 1;
            hits += usize::from(target.is_some());
        }
        index_of.insert(line["id_str"].to_string(), i);
    }
    let p = if tagged == 0 {
        1.0
    } else {
        correct as f64 / tagged as f64
    };
    let r = if dups == 0 {
        1.0
    } else {
        hits as f64 / dups as f64
    };
    let f1 = if p + r == 0.0 {
        0.0
    } else {
        2.0 * p * r / (p + r)
    };
    (p, r, f1, tagged, correct, hits)
}

#[test]
fn the_table_is_what_separate_runs_give() {
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("table.csv");
    let data = fixture("tune.jsonl");
    let truth = fixture("tune.truth.tsv");
    let output = Command::new(bin())
        .args(["tune", "--thresholds", "0.5,0.6,0.7,0.9", "--shingles"])
        .args([
            "words:1-2,words:2",
            "--measures",
            "containment,jaccard",
            "--csv",
        ])
        .arg(&csv)
        .arg("--truth")
        .arg(&truth)
        .arg(&data)
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    let report = String::from_utf8(output.stdout).unwrap();
    assert!(report.contains("recommended: --shingle "), "{report}");
    let clusters: Vec<String> = fs::read_to_string(&truth)
        .unwrap()
        .lines()
        .skip(1)
        .map(|row| row.split('\t').nth(2).unwrap().to_string())
        .collect();
    let input = fs::read(&data).unwrap();
    let table = fs::read_to_string(&csv).unwrap();
    let mut rows = table.lines();
    assert_eq!(
        rows.next(),
        Some("shingle,measure,threshold,precision,recall,f1,tagged,correct,true_duplicates,hits")
    );
    let rows: Vec<Vec<&str>> = rows.map(|r| r.split(',').collect()).collect();
    // 2 shingle choices x 2 measures x 5 thresholds (0.8, the default, is
    // always one).
    assert_eq!(rows.len(), 20);
    let mut f1s = HashSet::new();
    for row in rows {
        let args = [
            "--quiet",
            "--shingle",
            row[0],
            "--measure",
            row[1],
            "--threshold",
            row[2],
        ];
        let filtered = run(&args, &input);
        assert!(filtered.status.success());
        let (p, r, f1, tagged, correct, hits) = score(&filtered.stdout, &clusters);
        let shown = |x: f64| format!("{x:.4}");
        assert_eq!(
            [row[3], row[4], row[5]],
            [shown(p), shown(r), shown(f1)]
                .each_ref()
                .map(|s| s.as_str()),
            "{args:?}"
        );
        assert_eq!(
            [row[6], row[7], row[9]],
            [tagged, correct, hits]
                .map(|n| n.to_string())
                .each_ref()
                .map(|s| s.as_str()),
            "{args:?}"
        );
        assert_eq!(row[8], "21");
        f1s.insert(row[5].to_string());
    }
    assert!(f1s.len() > 3, "the grid's points differ: {f1s:?}");
}

/// Labels in a field of each line give the table a truth file gives.
#[test]
fn labels_from_a_field() {
    let dir = tempfile::tempdir().unwrap();
    let truth = fs::read_to_string(fixture("tune.truth.tsv")).unwrap();
    let labelled: String = fs::read_to_string(fixture("tune.jsonl"))
        .unwrap()
        .lines()
        .zip(truth.lines().skip(1))
        .map(|(line, row)| {
            let cluster = row.split('\t').nth(2).unwrap();
            format!(
                "{},\"cluster\":\"{cluster}\"}}\n",
                line.strip_suffix('}').unwrap()
            )
        })
        .collect();
    let data = dir.path().join("labelled.jsonl");
    fs::write(&data, labelled).unwrap();
    let table = |extra: &[&str], data: &std::path::Path| {
        let csv = dir.path().join("t.csv");
        let _ = fs::remove_file(&csv);
        let output = Command::new(bin())
            .args(["tune", "--thresholds", "0.6,0.9", "--shingles", "words:1-2"])
            .args(extra)
            .arg("--csv")
            .arg(&csv)
            .arg(data)
            .output()
            .unwrap();
        assert!(output.status.success(), "{output:?}");
        fs::read_to_string(&csv).unwrap()
    };
    let truth_path = fixture("tune.truth.tsv");
    assert_eq!(
        table(&["--label-field", "cluster"], &data),
        table(
            &["--truth", truth_path.to_str().unwrap()],
            &fixture("tune.jsonl")
        )
    );
    // A file that is not a table is never replaced.
    let output = Command::new(bin())
        .args(["tune", "--label-field", "cluster", "--csv"])
        .arg(&data)
        .arg(&data)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2), "{output:?}");
}

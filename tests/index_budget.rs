//! `--max-index-bytes`: the in-memory index held to a byte budget, through
//! the real binary (filter and sidecar), its figures in `--stats` and
//! `/metrics`, and the index in Redis refusing it.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::time::Duration;

use common::served::Served;

/// A message of distinct words (word `i`'s spelling depends on `seq`), of
/// `words` words.
fn message(seq: u64, words: usize) -> String {
    let text: Vec<String> = (0..words)
        .map(|i| format!("w{}x{}", seq * 7919 + i as u64 * 104_729, i))
        .collect();
    format!("{{\"id\":{seq},\"text\":\"{}\"}}\n", text.join(" "))
}

/// Runs the filter over `input` with `args` and `--stats`; the stats JSON
/// and the output's verdicts.
fn filter_with_stats(args: &[&str], input: &str) -> (serde_json::Value, Vec<serde_json::Value>) {
    let dir = tempfile::tempdir().unwrap();
    let stats = dir.path().join("stats.json");
    let mut all = vec!["--quiet", "--stats", stats.to_str().unwrap()];
    all.extend_from_slice(args);
    let output = common::run(&all, input.as_bytes());
    assert!(output.status.success(), "{output:?}");
    let stats = serde_json::from_slice(&std::fs::read(&stats).unwrap()).unwrap();
    (stats, common::verdicts(&output))
}

#[test]
fn the_index_stays_within_its_byte_budget_and_keeps_the_most_recent() {
    let budget = 1 << 20;
    let count = 20_000;
    let mut input: String = (0..count).map(|seq| message(seq, 20)).collect();
    // Copies of the first and of the last message come at the end: the
    // first is long gone, the last is still held.
    input.push_str(&message(0, 20).replacen("\"id\":0", "\"id\":900000", 1));
    input.push_str(&message(count - 1, 20).replacen(
        &format!("\"id\":{}", count - 1),
        "\"id\":900001",
        1,
    ));
    let (stats, verdicts) = filter_with_stats(&["--max-index-bytes", "1M"], &input);
    let held = stats["index_bytes"].as_u64().unwrap();
    assert!(held <= budget, "{held} > {budget}");
    assert!(held > budget / 2, "the budget is used: {held}");
    assert_eq!(stats["index_max_bytes"], budget);
    let size = stats["index_size"].as_u64().unwrap();
    assert!((1_000..count).contains(&size), "{size}");
    assert_eq!(stats["evicted"].as_u64().unwrap(), count - size + 1);
    assert_eq!(verdicts[count as usize]["status"], "new", "evicted");
    assert_eq!(verdicts[count as usize + 1]["duplicate_of"], count - 1);

    // Long texts take the room of several short ones.
    let long: String = (0..count / 4).map(|seq| message(seq, 200)).collect();
    let (long_stats, _) = filter_with_stats(&["--max-index-bytes", "1M"], &long);
    let long_size = long_stats["index_size"].as_u64().unwrap();
    assert!(
        long_size * 4 < size,
        "{long_size} long against {size} short"
    );
    assert!(long_stats["index_bytes"].as_u64().unwrap() <= budget);

    // Without a budget the same stream keeps everything and still says
    // what it holds.
    let (unbounded, _) = filter_with_stats(&[], &input);
    assert_eq!(unbounded["index_size"], count);
    assert!(unbounded.get("index_max_bytes").is_none());
    assert!(unbounded["index_bytes"].as_u64().unwrap() > budget);
}

#[test]
fn sizes_are_read_with_units_and_a_floor() {
    let (stats, _) = filter_with_stats(&["--max-index-bytes", "2MiB"], &message(1, 5));
    assert_eq!(stats["index_max_bytes"], 2 << 20);
    let (stats, _) = filter_with_stats(&["--max-index-bytes", "3000000"], &message(1, 5));
    assert_eq!(stats["index_max_bytes"], 3_000_000);
    for bad in ["10K", "1.5G", "12X", "", "0"] {
        let output = common::run(&["--max-index-bytes", bad], b"");
        assert_eq!(output.status.code(), Some(2), "{bad}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains("expected a size like 512M"), "{stderr}");
    }
}

#[test]
fn an_index_in_redis_refuses_a_byte_budget() {
    // Refused before any connection is tried: no Redis is needed.
    let output = common::run(
        &["--index", "redis://127.0.0.1:1", "--max-index-bytes", "64M"],
        b"",
    );
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("--max-index-bytes bounds an index in memory"),
        "{stderr}"
    );
}

/// One request on the admin endpoint; the whole response.
fn http_get(addr: &str, path: &str) -> String {
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    write!(stream, "GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    response
}

/// A gauge's value in a Prometheus text page.
fn gauge(metrics: &str, name: &str) -> Option<u64> {
    metrics
        .lines()
        .find_map(|line| line.strip_prefix(&format!("{name} ")))
        .map(|value| value.parse().unwrap())
}

#[cfg(unix)]
#[test]
fn the_sidecar_reports_its_index_bytes_and_refuses_empty_texts_when_asked() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("s.sock");
    let mut served = Served::start(&[
        "--listen",
        &format!("unix:{}", socket.display()),
        "--admin",
        "127.0.0.1:0",
        "--max-index-bytes",
        "1M",
        "--empty-text",
        "invalid",
    ]);
    let line = served.wait_for("admin endpoint listening");
    let admin = line.rsplit("address=").next().unwrap().trim().to_string();
    served.wait_for("listening address=unix:");

    let stream = std::os::unix::net::UnixStream::connect(&socket).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut writer = stream.try_clone().unwrap();
    let count = 10_000;
    let sender = std::thread::spawn(move || {
        for seq in 0..count {
            writer.write_all(message(seq, 20).as_bytes()).unwrap();
        }
        writer
            .write_all(b"{\"id\":\"blank\",\"text\":\" \"}\n")
            .unwrap();
    });
    let mut replies = BufReader::new(stream).lines();
    for seq in 0..count {
        let reply = replies.next().unwrap().unwrap();
        assert!(reply.contains("\"new\""), "{seq}: {reply}");
    }
    let refused = replies.next().unwrap().unwrap();
    assert!(refused.contains("text has nothing to compare"), "{refused}");
    sender.join().unwrap();

    // The gauges follow the engine after each batch: the last batch has
    // been answered, so they are current.
    let metrics = http_get(&admin, "/metrics");
    let held = gauge(&metrics, "dedup_index_bytes").expect("reported");
    assert_eq!(gauge(&metrics, "dedup_index_max_bytes"), Some(1 << 20));
    assert!(held <= 1 << 20, "{held}");
    let entries = gauge(&metrics, "dedup_index_entries").unwrap();
    let evicted = gauge(&metrics, "dedup_evictions_total").unwrap();
    assert!(entries < count, "{entries}");
    assert_eq!(entries + evicted, count, "{metrics}");
}

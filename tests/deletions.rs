//! Deletions through the real binary (issue 27, `docs/deletions.md`):
//! notices in the filter with a state file, `index forget` on a state file
//! and on an index in Redis (a real `redis-server`, skipped without one
//! unless `DEDUP_REQUIRE_REDIS=1`), and the figures a run reports. The
//! fixture `deletions.jsonl` (tests/fixtures.rs) pins the tags; the sidecar's
//! removals are in tests/server.rs.

mod common;

use common::redis::{RedisServer, available};
use common::{run, verdicts};
use dedup_stream::{Deduper, EngineConfig};
use serde_json::json;

const STORY: &str = "Flooding has closed the coastal highway north of the city tonight, police say";
const OTHER: &str = "The library reopens on Monday with longer hours and a new children's corner";

fn tweet(id: &str, text: &str) -> String {
    format!("{}\n", json!({"id_str": id, "text": text}))
}

fn v11_notice(id: u64) -> String {
    format!(
        "{{\"delete\":{{\"status\":{{\"id\":{id},\"id_str\":\"{id}\",\"user_id\":9,\"user_id_str\":\"9\"}},\"timestamp_ms\":\"1700000000000\"}}}}\n"
    )
}

/// The ids a state file holds.
fn held(state: &std::path::Path) -> Vec<String> {
    let mut deduper = Deduper::new(EngineConfig::default()).unwrap();
    dedup_stream::state::snapshot::load(state, &mut deduper).unwrap();
    deduper
        .index()
        .iter_lru_first()
        .map(|e| e.id.to_string())
        .collect()
}

#[test]
fn a_deleted_id_is_absent_after_save_and_load() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("s.state");
    let state = state.to_str().unwrap();
    let first = [tweet("1", STORY), tweet("2", OTHER), v11_notice(1)].concat();
    let out = run(&["--state", state], first.as_bytes());
    assert!(out.status.success(), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("; 1 deletion notice"), "{stderr}");
    assert_eq!(held(state.as_ref()), ["\"2\""]);
    // The next run loads the file: a copy of 1 is new.
    let out = run(&["--state", state, "--quiet"], tweet("3", STORY).as_bytes());
    assert_eq!(verdicts(&out), [json!({"status": "new"})]);
}

#[test]
fn emit_passes_notices_on_and_stats_count_them() {
    let dir = tempfile::tempdir().unwrap();
    let stats = dir.path().join("stats.json");
    let input = [tweet("1", STORY), tweet("2", STORY), v11_notice(1)].concat();
    for emit in ["new", "duplicates"] {
        let out = run(
            &[
                "--quiet",
                "--emit",
                emit,
                "--stats",
                stats.to_str().unwrap(),
            ],
            input.as_bytes(),
        );
        let tags = verdicts(&out);
        assert_eq!(tags.len(), 2, "{emit}: {tags:?}");
        assert_eq!(
            tags[1],
            json!({"status": "deleted", "held": true}),
            "{emit}"
        );
        let counted: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&stats).unwrap()).unwrap();
        assert_eq!(counted["messages"], 2);
        assert_eq!(counted["deletions"], 1);
    }
    // Without notices, no "deletions" at all: the summary is as it was.
    run(
        &["--quiet", "--stats", stats.to_str().unwrap()],
        tweet("1", STORY).as_bytes(),
    );
    let counted: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&stats).unwrap()).unwrap();
    assert!(counted.get("deletions").is_none(), "{counted}");
}

#[test]
fn index_forget_on_a_state_file_reports_what_was_held() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("s.state");
    let state = state.to_str().unwrap();
    let input = [tweet("1", STORY), tweet("2", OTHER), tweet("3", "a third")].concat();
    assert!(
        run(&["--state", state, "--quiet"], input.as_bytes())
            .status
            .success()
    );
    // Ids bare, quoted, in a notice, in a v2 compliance result; one bad
    // line, skipped and reported by number.
    let ids =
        "1\n\"99\"\n{\"id\":\"3\",\"action\":\"delete\",\"reason\":\"deleted\"}\n{\"no\":1}\n";
    let ids_file = dir.path().join("ids.txt");
    std::fs::write(&ids_file, ids).unwrap();
    for from_stdin in [false, true] {
        let mut args = vec!["index", "forget", "--state", state];
        if !from_stdin {
            args.push(ids_file.to_str().unwrap());
        }
        let out = run(&args, if from_stdin { ids.as_bytes() } else { b"" });
        assert!(out.status.success(), "{out:?}");
        let held_now = if from_stdin { 0 } else { 2 };
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            format!(
                "3 ids read: {held_now} held and forgotten, {} not held; 1 invalid line\n",
                3 - held_now
            )
        );
        assert!(String::from_utf8_lossy(&out.stderr).contains("line 4"));
        assert_eq!(held(state.as_ref()), ["\"2\""]);
    }
    // Without an index to forget from: a usage error.
    let out = run(&["index", "forget"], b"1\n");
    assert_eq!(out.status.code(), Some(2), "{out:?}");
}

#[test]
fn index_forget_in_redis_reaches_every_worker() {
    if !available("index_forget_in_redis_reaches_every_worker") {
        return;
    }
    let redis = RedisServer::start();
    let url = redis.url();
    let index = ["--index", url.as_str(), "--quiet"];
    let out = run(
        &index,
        [tweet("1", STORY), tweet("2", OTHER)].concat().as_bytes(),
    );
    assert!(out.status.success(), "{out:?}");
    let out = run(&["index", "forget", "--index", &url], b"1\n5\n");
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "2 ids read: 1 held and forgotten, 1 not held; 0 invalid lines\n"
    );
    // Another worker, starting from the log: 1 is gone, 2 is not; a notice
    // in its stream removes 2 where it stands.
    let input = [
        tweet("3", STORY),
        tweet("4", OTHER),
        v11_notice(2),
        tweet("5", OTHER),
    ]
    .concat();
    let out = run(&index, input.as_bytes());
    assert_eq!(
        verdicts(&out),
        [
            json!({"status": "new"}),
            json!({"status": "duplicate", "duplicate_of": "2", "similarity": 1, "cluster": "2"}),
            json!({"status": "deleted", "held": true}),
            json!({"status": "new"}),
        ]
    );
}

/// The dev stream with a notice every few lines (of messages a few lines
/// back, and of ids never seen): the same output for every thread count.
#[test]
fn notices_are_applied_alike_whatever_the_thread_count() {
    use std::io::Read;
    let file = std::fs::File::open(common::fixture("synthetic/dev.jsonl.gz")).unwrap();
    let mut dev = String::new();
    flate2::read::GzDecoder::new(file)
        .read_to_string(&mut dev)
        .unwrap();
    let mut input = String::new();
    let mut ids = Vec::new();
    for (i, line) in dev.lines().take(4_000).enumerate() {
        let tweet: serde_json::Value = serde_json::from_str(line).unwrap();
        ids.push(tweet["id_str"].as_str().unwrap().parse::<u64>().unwrap());
        input.push_str(line);
        input.push('\n');
        if i % 3 == 2 {
            input.push_str(&v11_notice(ids[i - 2]));
        }
        if i % 11 == 10 {
            input.push_str(&v11_notice(i as u64));
        }
    }
    let outputs: Vec<Vec<u8>> = ["1", "2", "4"]
        .iter()
        .map(|threads| {
            let out = run(&["--quiet", "--threads", threads], input.as_bytes());
            assert!(out.status.success());
            out.stdout
        })
        .collect();
    assert!(outputs.windows(2).all(|w| w[0] == w[1]));
    let text = String::from_utf8_lossy(&outputs[0]);
    let held = text.matches("\"deleted\",\"held\":true").count();
    assert!(held > 500, "{held} notices found their tweet");
    assert!(text.matches("\"held\":false").count() > 300);
}

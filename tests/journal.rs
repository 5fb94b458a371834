//! `serve --state`'s journal through the real binary: `kill -9` at moments
//! spread over a run (mid-stream, between and during snapshots), then a
//! restart, under each `--fsync` policy: every message answered before the
//! kill is still held. A torn last record is dropped with a warning.

#![cfg(unix)]

mod common;

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use common::served::Served;

/// A text of twelve words from a vocabulary of 5,000, unlike the others.
fn text(n: u64) -> String {
    let mut x = n
        .wrapping_mul(6_364_136_223_846_793_005)
        .wrapping_add(1_442_695_040_888_963_407);
    (0..12)
        .map(|_| {
            x = x
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            format!("w{}", (x >> 33) % 5000)
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn line(id: u64, op: Option<&str>) -> String {
    let mut value = serde_json::json!({"id": id, "text": text(id)});
    if let Some(op) = op {
        value["dedup_op"] = op.into();
    }
    format!("{value}\n")
}

fn serve(dir: &Path, fsync: &str) -> Served {
    let sock = dir.join("s.sock");
    let _ = std::fs::remove_file(&sock);
    let mut served = Served::start(&[
        "--listen",
        &format!("unix:{}", sock.display()),
        "--state",
        dir.join("s.state").to_str().unwrap(),
        "--fsync",
        fsync,
        "--snapshot-interval",
        "150ms",
    ]);
    served.wait_for("listening");
    served
}

/// Sends `ids` on one connection and reads replies until `answered` came
/// back (or all of them): the ids answered.
fn send(dir: &Path, ids: std::ops::Range<u64>, answered: usize) -> Vec<serde_json::Value> {
    let stream = UnixStream::connect(dir.join("s.sock")).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut writer = stream.try_clone().unwrap();
    let lines: String = ids.clone().map(|id| line(id, None)).collect();
    let feeder = std::thread::spawn(move || {
        // The server may be killed mid-way: a broken pipe is expected.
        let _ = writer.write_all(lines.as_bytes());
    });
    let mut replies = Vec::new();
    let mut reader = BufReader::new(stream);
    while replies.len() < answered.min(ids.clone().count()) {
        let mut reply = String::new();
        if reader.read_line(&mut reply).unwrap_or(0) == 0 {
            break;
        }
        replies.push(serde_json::from_str(&reply).unwrap());
    }
    drop(reader);
    if replies.len() == ids.count() {
        let _ = feeder.join();
    }
    replies
}

fn kill_9_loses_nothing_answered(fsync: &str) {
    let dir = tempfile::tempdir().unwrap();
    // The ids the client got an answer for, over every round.
    let mut answered_ids: Vec<u64> = Vec::new();
    let mut next = 0u64;
    // Kills at moments spread over the run: after a few replies, many,
    // right after a snapshot interval, mid-way through a long batch.
    for (round, (sent, answered, pause)) in [
        (3000, 3, 0),
        (4000, 2500, 0),
        (3000, 1700, 160),
        (5000, 4999, 310),
        (2000, 800, 40),
    ]
    .into_iter()
    .enumerate()
    {
        let mut served = serve(dir.path(), fsync);
        let replies = send(dir.path(), next..next + sent, answered);
        assert!(
            replies.len() >= answered.min(sent as usize),
            "round {round}"
        );
        std::thread::sleep(Duration::from_millis(pause));
        served.child.kill().unwrap(); // SIGKILL
        served.child.wait().unwrap();
        answered_ids.extend(next..next + replies.len() as u64);
        next += sent;

        // Restarted: every message answered so far is still held.
        let served = serve(dir.path(), fsync);
        let check = query(dir.path(), &answered_ids);
        let missing: Vec<u64> = answered_ids
            .iter()
            .zip(&check)
            // A query naming a held message and its text is a repeat.
            .filter(|(_, reply)| reply["dedup"]["repeat"] != true)
            .map(|(id, _)| *id)
            .collect();
        assert_eq!(check.len(), answered_ids.len());
        assert!(
            missing.is_empty(),
            "--fsync {fsync}, round {round}: {} of {} answered messages lost, the first {:?}",
            missing.len(),
            answered_ids.len(),
            &missing[..missing.len().min(5)]
        );
        drop(served);
    }
    assert!(answered_ids.len() > 9_000);
}

/// Asks (without indexing) about each of `ids`: the replies, in order.
fn query(dir: &Path, ids: &[u64]) -> Vec<serde_json::Value> {
    let stream = UnixStream::connect(dir.join("s.sock")).unwrap();
    let mut writer = stream.try_clone().unwrap();
    let lines: String = ids.iter().map(|&id| line(id, Some("query"))).collect();
    let feeder = std::thread::spawn(move || writer.write_all(lines.as_bytes()));
    let replies = BufReader::new(stream)
        .lines()
        .take(ids.len())
        .map(|l| serde_json::from_str(&l.unwrap()).unwrap())
        .collect();
    feeder.join().unwrap().unwrap();
    replies
}

#[test]
fn kill_9_loses_nothing_answered_with_fsync_always() {
    kill_9_loses_nothing_answered("always");
}

#[test]
fn kill_9_loses_nothing_answered_with_fsync_everysec() {
    kill_9_loses_nothing_answered("everysec");
}

#[test]
fn kill_9_loses_nothing_answered_with_fsync_never() {
    kill_9_loses_nothing_answered("never");
}

#[test]
fn a_torn_last_record_is_dropped_with_a_warning() {
    let dir = tempfile::tempdir().unwrap();
    let mut served = serve(dir.path(), "always");
    let replies = send(dir.path(), 0..100, 100);
    assert_eq!(replies.len(), 100);
    served.child.kill().unwrap();
    served.child.wait().unwrap();
    // A record cut short: its length says more than is there.
    let journal = dir.path().join("s.state.journal");
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(&journal)
        .unwrap();
    file.write_all(&[200, 0, 0, 0, 7, 7, 7, 7, 0, 1, 2])
        .unwrap();
    drop(file);
    let mut served = serve(dir.path(), "always");
    served.wait_for("torn or corrupt record");
    let check = query(dir.path(), &(0..100).collect::<Vec<_>>());
    assert!(check.iter().all(|r| r["dedup"]["repeat"] == true));
    // And a journal that is not one stops the server, as a bad state file
    // does.
    drop(served);
    std::fs::write(&journal, b"my notes").unwrap();
    let sock = dir.path().join("s.sock");
    let _ = std::fs::remove_file(&sock);
    let refused = Served::start(&[
        "--listen",
        &format!("unix:{}", sock.display()),
        "--state",
        dir.path().join("s.state").to_str().unwrap(),
    ]);
    let (status, log) = refused.wait();
    assert_eq!(status.code(), Some(1), "{log:?}");
    assert!(
        log.join("\n").contains("not a dedup-stream journal"),
        "{log:?}"
    );
    assert_eq!(
        std::fs::read(&journal).unwrap(),
        b"my notes",
        "left as it was"
    );
}

/// The filter with `--state` keeps the journal too: killed midway on a
/// live input, its next run holds every message it wrote out, and decides
/// what follows exactly as one run over everything would have.
#[test]
fn the_filter_killed_midway_holds_every_line_it_wrote() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("index.state");
    // Copies of earlier texts among the new ones, so that verdicts depend
    // on what is held.
    let input: Vec<String> = (0..600u64)
        .map(|n| {
            let source = if n % 3 == 2 { n / 3 } else { n };
            format!("{{\"id\":{n},\"text\":\"{}\"}}\n", text(source))
        })
        .collect();
    let (before, after) = input.split_at(300);
    let whole = common::run(&["--quiet"], input.concat().as_bytes());
    let expected: Vec<&str> = std::str::from_utf8(&whole.stdout)
        .unwrap()
        .lines()
        .skip(before.len())
        .collect();

    for fsync in ["always", "never"] {
        let _ = std::fs::remove_file(&state);
        let _ = std::fs::remove_file(dir.path().join("index.state.journal"));
        let mut child = filter_with_state(&state, fsync);
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(before.concat().as_bytes()).unwrap();
        stdin.flush().unwrap();
        let mut out = BufReader::new(child.stdout.take().unwrap());
        for _ in 0..before.len() {
            let mut line = String::new();
            out.read_line(&mut line).unwrap();
            assert!(line.ends_with('\n'), "a whole line before the kill");
        }
        // Written out: now SIGKILL, the input still open.
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(!state.exists(), "no state file was saved");
        let resumed = common::run(
            &["--quiet", "--state", state.to_str().unwrap()],
            after.concat().as_bytes(),
        );
        assert!(resumed.status.success());
        let got: Vec<&str> = std::str::from_utf8(&resumed.stdout)
            .unwrap()
            .lines()
            .collect();
        assert!(
            got == expected,
            "--fsync {fsync}: the run after the kill decides as one run over everything"
        );
    }
}

/// The input of the retry tests: copies of earlier texts among new ones,
/// so that verdicts depend on what is held, and one message of every
/// fifty a comment on an earlier one (a near-duplicate that is indexed).
fn retry_input(n: u64) -> Vec<String> {
    (0..n)
        .map(|n| {
            let text = match n % 50 {
                49 => format!("{} so true", text(n / 2)),
                _ if n % 3 == 2 => text(n / 3),
                _ => text(n),
            };
            format!("{{\"id\":{n},\"text\":\"{text}\"}}\n")
        })
        .collect()
}

/// The points a retry test kills at: replies read before the kill, spread
/// over the run by a fixed seed.
fn kill_points(seed: u64, total: usize, kills: usize) -> Vec<usize> {
    let mut x = seed;
    let mut points: Vec<usize> = (0..kills)
        .map(|_| {
            x = x
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (x >> 33) as usize % total
        })
        .collect();
    points.sort_unstable();
    points
}

/// The lines of one run over all of `input`, never interrupted.
fn one_run(input: &[String]) -> Vec<String> {
    let run = common::run(&["--quiet"], input.concat().as_bytes());
    String::from_utf8(run.stdout)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect()
}

/// The filter with `--state STATE --fsync FSYNC` on piped stdin and
/// stdout, to be fed and killed.
fn filter_with_state(state: &Path, fsync: &str) -> std::process::Child {
    use std::process::{Command, Stdio};
    Command::new(common::bin())
        .args(["--quiet", "--fsync", fsync, "--state"])
        .arg(state)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// An answer without the repeat marker: what one uninterrupted run answers.
fn unmarked(answer: &str) -> String {
    answer.replace(r#","repeat":true"#, "")
}

/// Checks the answers of an interrupted run, given in input order, against
/// one uninterrupted run's: equal but for the repeat markers, and no
/// message a duplicate of itself. Returns how many were repeats.
fn same_as_one_run(answers: &[String], whole: &[&str], what: &str) -> usize {
    assert_eq!(answers.len(), whole.len(), "{what}: one answer a message");
    let mut repeats = 0;
    for (n, (got, want)) in answers.iter().zip(whole).enumerate() {
        let value: serde_json::Value = serde_json::from_str(got).unwrap();
        assert_ne!(
            value["dedup"]["duplicate_of"], value["id"],
            "{what}: message {n} a duplicate of itself: {got}"
        );
        repeats += usize::from(value["dedup"]["repeat"] == true);
        assert_eq!(&unmarked(got), want, "{what}: message {n}");
    }
    repeats
}

/// A client pipelines messages to a sidecar, which is killed with
/// `kill -9` at several points (`seed` picks them); after each restart
/// (`serve` starts one and says where its socket is) the client sends again
/// everything it got no answer for, as the only safe retry. What it was
/// answered, put together, is what one run that never stopped answers, but
/// that messages decided before a kill and sent again are marked repeats;
/// none is a duplicate of itself. Returns how many were repeats.
fn answers_through_kills(seed: u64, serve: impl Fn() -> (Served, std::path::PathBuf)) -> usize {
    let input = retry_input(2400);
    let whole = one_run(&input);
    let whole: Vec<&str> = whole.iter().map(String::as_str).collect();
    let mut answers: Vec<String> = Vec::new();
    let mut points = kill_points(seed, input.len(), 5).into_iter();
    while answers.len() < input.len() {
        let (served, sock) = serve();
        let stop = points.next().map(|p| p.max(answers.len() + 1));
        let stream = UnixStream::connect(sock).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        let mut writer = stream.try_clone().unwrap();
        let rest = input[answers.len()..].concat();
        let feeder = std::thread::spawn(move || {
            let _ = writer.write_all(rest.as_bytes());
        });
        let mut reader = BufReader::new(stream);
        let mut served = Some(served);
        while answers.len() < input.len() {
            if stop == Some(answers.len()) {
                // SIGKILL, with messages decided (and journaled, or logged
                // in Redis) whose answers the client has not read.
                let mut served = served.take().unwrap();
                served.child.kill().unwrap();
                served.child.wait().unwrap();
                break;
            }
            let mut reply = String::new();
            if reader.read_line(&mut reply).unwrap_or(0) == 0 || !reply.ends_with('\n') {
                break;
            }
            answers.push(reply.trim_end().to_string());
        }
        drop(reader);
        let _ = feeder.join();
    }
    same_as_one_run(&answers, &whole, "serve")
}

#[test]
fn a_client_that_sends_again_what_was_not_answered_gets_one_runs_answers() {
    // `everysec` keeps what `kill -9` hits as `always` does (the journal is
    // in the system's cache); it differs on a power cut.
    for (seed, fsync) in [(7, "always"), (8, "everysec")] {
        let dir = tempfile::tempdir().unwrap();
        let repeats = answers_through_kills(seed, || {
            (serve(dir.path(), fsync), dir.path().join("s.sock"))
        });
        assert!(
            repeats > 0,
            "--fsync {fsync}: the kills left decided messages unanswered"
        );
    }
}

/// The same with the index in Redis (a sidecar of a fleet): the replica
/// restarted from Redis finds the messages logged before the kill.
#[test]
fn a_client_of_a_sidecar_with_its_index_in_redis_gets_one_runs_answers() {
    if !common::redis::available(
        "a_client_of_a_sidecar_with_its_index_in_redis_gets_one_runs_answers",
    ) {
        return;
    }
    let redis = common::redis::RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("r.sock");
    let repeats = answers_through_kills(9, || {
        let _ = std::fs::remove_file(&sock);
        let mut served = Served::start(&[
            "--listen",
            &format!("unix:{}", sock.display()),
            "--index",
            &redis.url(),
        ]);
        served.wait_for("listening");
        (served, sock.clone())
    });
    assert!(repeats > 0, "the kills left decided messages unanswered");
}

/// The filter with `--state --fsync always` on a live input, killed with
/// `kill -9` at several points, then run again on the input from the
/// first line it did not write: the lines written, put together, are one
/// run's but for the repeat markers of lines decided before a kill.
#[test]
fn the_filter_run_again_on_what_it_did_not_write_gives_one_runs_lines() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("index.state");
    let input = retry_input(2400);
    let whole = one_run(&input);
    let whole: Vec<&str> = whole.iter().map(String::as_str).collect();
    let mut written: Vec<String> = Vec::new();
    for stop in kill_points(11, input.len(), 4) {
        let stop = stop.max(written.len() + 1);
        let mut child = filter_with_state(&state, "always");
        let mut stdin = child.stdin.take().unwrap();
        let rest = input[written.len()..].concat();
        // The input stays open: the filter is killed, it never ends.
        let feeder = std::thread::spawn(move || {
            let _ = stdin.write_all(rest.as_bytes());
            std::thread::sleep(Duration::from_secs(60));
        });
        let mut out = BufReader::new(child.stdout.take().unwrap());
        while written.len() < stop {
            let mut line = String::new();
            if out.read_line(&mut line).unwrap_or(0) == 0 || !line.ends_with('\n') {
                break;
            }
            written.push(line.trim_end().to_string());
        }
        child.kill().unwrap();
        child.wait().unwrap();
        drop(feeder);
    }
    let last = common::run(
        &["--quiet", "--state", state.to_str().unwrap()],
        input[written.len()..].concat().as_bytes(),
    );
    assert!(last.status.success());
    written.extend(
        std::str::from_utf8(&last.stdout)
            .unwrap()
            .lines()
            .map(str::to_string),
    );
    let repeats = same_as_one_run(&written, &whole, "the filter --fsync always");
    assert!(repeats > 0, "the kills left decided lines unwritten");
    // `--repeats drop` leaves them out: a merge of overlapping inputs.
    let dropped = common::run(
        &[
            "--quiet",
            "--repeats",
            "drop",
            "--state",
            state.to_str().unwrap(),
        ],
        input[..100].concat().as_bytes(),
    );
    assert!(dropped.status.success());
    // Every message is held but the exact copies, which are not indexed:
    // those are decided again, alike.
    let kept: Vec<&str> = std::str::from_utf8(&dropped.stdout)
        .unwrap()
        .lines()
        .collect();
    let mut texts = std::collections::HashSet::new();
    let exact_copies: Vec<&str> = (0..100)
        .filter(|&n| {
            let line: serde_json::Value = serde_json::from_str(&input[n]).unwrap();
            !texts.insert(line["text"].as_str().unwrap().to_string())
        })
        .map(|n| whole[n])
        .collect();
    assert_eq!(kept, exact_copies);
    assert!(!kept.is_empty());
}

/// `dedup-stream --state F input | head -n 2` (issue 38): the messages
/// decided past what the output took are kept in the state; the run says
/// so, and a run again on the input gives each its first verdict, marked.
#[test]
fn a_closed_output_with_state_says_what_was_kept_unwritten() {
    use std::io::Read;
    use std::process::{Command, Stdio};
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("index.state");
    let input = retry_input(3000).concat();
    let mut child = Command::new(common::bin())
        .args(["--quiet", "--state"])
        .arg(&state)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let feeder = std::thread::spawn(move || {
        let _ = stdin.write_all(input.as_bytes());
    });
    let mut out = BufReader::new(child.stdout.take().unwrap());
    for _ in 0..2 {
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
    }
    drop(out); // `head -n 2` exits
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert!(child.wait().unwrap().success(), "{stderr}");
    let _ = feeder.join();
    assert!(
        stderr.contains("the output closed after") && stderr.contains("\"repeat\":true"),
        "{stderr}"
    );
    let again = common::run(
        &["--quiet", "--state", state.to_str().unwrap()],
        retry_input(3000).concat().as_bytes(),
    );
    let text = String::from_utf8(again.stdout).unwrap();
    let repeats = text
        .lines()
        .filter(|l| l.contains("\"repeat\":true"))
        .count();
    assert!(repeats > 2, "{repeats} repeats: decided messages were kept");
    assert!(!text.lines().any(|l| {
        let v: serde_json::Value = serde_json::from_str(l).unwrap();
        v["dedup"]["duplicate_of"] == v["id"]
    }));
}

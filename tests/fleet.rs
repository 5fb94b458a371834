//! The shared index's failure cases, through the real binary and a real
//! `redis-server`: Redis losing its last writes under a running worker, the
//! index dropped under it, a Redis that evicts keys, another build of the
//! decision, and many workers on copies of the same few texts.
//!
//! Each test starts its own `redis-server` on a free loopback port and is
//! skipped, saying so, when there is none, unless `DEDUP_REQUIRE_REDIS=1`.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use common::redis::{RedisServer, available};
use common::{bin, run, synthetic};

const FIELDS: [&str; 5] = ["--quiet", "--id-field", "id_str", "--text-field", "text"];

/// A filter that runs while the test feeds it part by part.
struct Worker {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
    stderr: std::thread::JoinHandle<String>,
}

impl Worker {
    fn start(args: &[&str]) -> Worker {
        let mut child = Command::new(bin())
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (send, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                if send.send(line).is_err() {
                    return;
                }
            }
        });
        let mut stderr = child.stderr.take().unwrap();
        let stderr = std::thread::spawn(move || {
            let mut text = String::new();
            let _ = std::io::Read::read_to_string(&mut stderr, &mut text);
            text
        });
        Worker {
            stdin: child.stdin.take(),
            child,
            lines,
            stderr,
        }
    }

    /// Writes `part` and waits for its tagged lines.
    fn feed(&mut self, part: &[Vec<u8>]) -> Vec<String> {
        let stdin = self.stdin.as_mut().unwrap();
        stdin.write_all(&part.concat()).unwrap();
        stdin.flush().unwrap();
        (0..part.len())
            .map(|i| {
                self.lines
                    .recv_timeout(Duration::from_secs(120))
                    .unwrap_or_else(|_| panic!("line {i} of {} never came", part.len()))
            })
            .collect()
    }

    /// Closes its input and waits for it: its exit status and stderr.
    fn finish(mut self) -> (std::process::ExitStatus, String) {
        drop(self.stdin.take());
        let status = self.child.wait().unwrap();
        (status, self.stderr.join().unwrap())
    }
}

/// What the in-memory filter writes for the last `tail` lines of `input`.
fn memory_tail(input: &[Vec<u8>], tail: usize, extra: &[&str]) -> Vec<String> {
    let mut args = FIELDS.to_vec();
    args.extend(extra);
    let out = run(&args, &input.concat());
    assert!(out.status.success());
    let lines: Vec<String> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    lines[lines.len() - tail..].to_vec()
}

fn is_own_duplicate(line: &str) -> bool {
    let v: serde_json::Value = serde_json::from_str(line).unwrap();
    v["dedup"]["duplicate_of"] == v["id_str"]
}

/// Redis restarts and has lost its last writes (here: everything after a
/// `SAVE`, as a machine crash loses the last second of an `everysec` AOF).
/// The running worker finds that the log no longer continues where its
/// replica stands, says so, and starts again from what Redis kept: what
/// follows is decided as if the lost messages had never come, never as a
/// duplicate of itself.
#[test]
fn a_worker_follows_redis_back_when_it_loses_its_last_writes() {
    if !available("a_worker_follows_redis_back_when_it_loses_its_last_writes") {
        return;
    }
    let mut redis = RedisServer::start_with(&["--save", "", "--appendonly", "no"]);
    let url = redis.url();
    let input = synthetic(900);
    let (kept, rest) = input.split_at(300);
    let (lost, after) = rest.split_at(300);
    let mut args = FIELDS.to_vec();
    args.extend([
        "--index",
        &url,
        "--index-name",
        "rollback",
        "--log-snapshot-every",
        "100",
    ]);
    let mut worker = Worker::start(&args);
    worker.feed(kept);
    redis::cmd("SAVE")
        .query::<()>(&mut redis.connection())
        .unwrap();
    worker.feed(lost);
    // SIGKILL: what came after the SAVE is gone.
    redis.restart();
    let got = worker.feed(after);
    let (status, stderr) = worker.finish();
    assert!(status.success(), "{stderr}");
    assert!(stderr.contains("Redis lost log entries"), "{stderr}");
    assert!(!got.iter().any(|l| is_own_duplicate(l)));
    let expected = memory_tail(&[kept, after].concat(), after.len(), &[]);
    assert!(
        got == expected,
        "after the loss, the verdicts of a run that never saw the lost messages"
    );
}

/// The index is dropped (or Redis flushed) under a running worker: it says
/// so and goes on with the new, empty index, deciding as a fresh process
/// would, with no trace of what its replica held.
#[test]
fn a_worker_follows_an_index_dropped_under_it() {
    if !available("a_worker_follows_an_index_dropped_under_it") {
        return;
    }
    let redis = RedisServer::start();
    let url = redis.url();
    let input = synthetic(600);
    let (before, after) = input.split_at(300);
    let mut args = FIELDS.to_vec();
    args.extend(["--index", &url, "--index-name", "dropped"]);
    let mut worker = Worker::start(&args);
    worker.feed(before);
    let dropped = Command::new(bin())
        .args([
            "index",
            "drop",
            "--yes",
            "--index",
            &url,
            "--index-name",
            "dropped",
        ])
        .output()
        .unwrap();
    assert!(dropped.status.success());
    let got = worker.feed(after);
    let (status, stderr) = worker.finish();
    assert!(status.success(), "{stderr}");
    assert!(stderr.contains("gone from Redis"), "{stderr}");
    assert!(got == memory_tail(after, after.len(), &[]));
    // A worker that joins now agrees with the one that followed the drop.
    let again = run(&args, &after.concat());
    let lines: Vec<String> = String::from_utf8(again.stdout)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    assert_eq!(lines.len(), after.len());
    // Each message is held already under its id (a repeat of its first
    // verdict) or copies exactly one that is (not indexed itself).
    assert!(
        lines
            .iter()
            .all(|l| l.contains("\"repeat\":true}") || l.contains("\"similarity\":1,"))
    );
    assert!(lines.iter().any(|l| l.contains("\"repeat\":true}")));
}

/// A Redis that may evict any key when full would lose the index's keys
/// without a word: it is refused before anything is read.
#[test]
fn a_redis_that_evicts_any_key_is_refused() {
    if !available("a_redis_that_evicts_any_key_is_refused") {
        return;
    }
    let redis = RedisServer::start_with(&[
        "--save",
        "",
        "--maxmemory",
        "64mb",
        "--maxmemory-policy",
        "allkeys-lru",
    ]);
    let url = redis.url();
    let out = run(
        &["--quiet", "--index", &url],
        b"{\"id\":1,\"text\":\"one two three\"}\n",
    );
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("maxmemory-policy allkeys-lru"), "{stderr}");
    assert!(out.stdout.is_empty());
    assert!(redis.keys_with_prefix("{dedup-stream}:").is_empty());
}

/// Issue 37: an eviction policy set while the fleet ran (`CONFIG SET
/// maxmemory-policy allkeys-lru`) went unnoticed: the index's keys were
/// evicted, the worker made it again, empty, and went on with exit 0 and
/// wrong verdicts. The policy is read again at every snapshot and whenever
/// the index is found gone: the worker stops with exit 1, naming it.
#[test]
fn an_eviction_policy_set_while_running_stops_the_worker() {
    if !available("an_eviction_policy_set_while_running_stops_the_worker") {
        return;
    }
    let redis = RedisServer::start();
    let mut con = redis.connection();
    let url = redis.url();
    let input = synthetic(60);
    let set_policy = |con: &mut redis::Connection, policy: &str| {
        redis::cmd("CONFIG")
            .arg("SET")
            .arg("maxmemory-policy")
            .arg(policy)
            .query::<()>(con)
            .unwrap();
    };
    // At the next snapshot (every 10 messages here).
    let mut args = FIELDS.to_vec();
    args.extend([
        "--index",
        &url,
        "--index-name",
        "snap",
        "--log-snapshot-every",
        "10",
    ]);
    let mut worker = Worker::start(&args);
    let got = worker.feed(&input[..20]);
    assert_eq!(got.len(), 20);
    set_policy(&mut con, "allkeys-lru");
    let stdin = worker.stdin.as_mut().unwrap();
    stdin.write_all(&input[20..40].concat()).unwrap();
    let (status, stderr) = worker.finish();
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("maxmemory-policy allkeys-lru"), "{stderr}");

    // When the index is found gone (evicted, here flushed), before it
    // would be made again, empty.
    set_policy(&mut con, "noeviction");
    let mut args = FIELDS.to_vec();
    args.extend(["--index", &url, "--index-name", "gone"]);
    let mut worker = Worker::start(&args);
    let got = worker.feed(&input[..20]);
    assert_eq!(got.len(), 20);
    set_policy(&mut con, "allkeys-random");
    redis::cmd("FLUSHALL").query::<()>(&mut con).unwrap();
    let stdin = worker.stdin.as_mut().unwrap();
    stdin.write_all(&input[20..40].concat()).unwrap();
    let (status, stderr) = worker.finish();
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("maxmemory-policy allkeys-random"),
        "{stderr}"
    );
    assert!(!stderr.contains("creating it again"), "{stderr}");
    assert!(
        redis.keys_with_prefix("{gone}:").is_empty(),
        "the index was made again in a Redis that evicts it"
    );
}

/// An index made by another build of the decision (another rule in its
/// settings) is refused, never applied with this build's rule.
#[test]
fn an_index_of_another_build_of_the_decision_is_refused() {
    if !available("an_index_of_another_build_of_the_decision_is_refused") {
        return;
    }
    let redis = RedisServer::start();
    let url = redis.url();
    let input = b"{\"id\":1,\"text\":\"one two three four five six\"}\n";
    assert!(run(&["--quiet", "--index", &url], input).status.success());
    let mut con = redis.connection();
    let settings: String = redis::cmd("HGET")
        .arg("{dedup-stream}:cfg")
        .arg("settings")
        .query(&mut con)
        .unwrap();
    let rule = settings
        .split(' ')
        .find(|f| f.starts_with("rule="))
        .expect("the settings name the rule");
    let older = settings.replace(rule, "rule=00000000deadbeef");
    redis::cmd("HSET")
        .arg("{dedup-stream}:cfg")
        .arg("settings")
        .arg(&older)
        .query::<()>(&mut con)
        .unwrap();
    let out = run(&["--quiet", "--index", &url], input);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("rule=00000000deadbeef") && stderr.contains(rule),
        "{stderr}"
    );
    assert!(out.stdout.is_empty());
}

/// Eight workers all sending copies of the same few texts at once: every
/// one finishes, and each text is new exactly once in the whole fleet (the
/// log orders every decision; nothing is decided twice or missed).
#[test]
fn eight_workers_on_the_same_few_texts_all_progress() {
    if !available("eight_workers_on_the_same_few_texts_all_progress") {
        return;
    }
    let redis = RedisServer::start();
    let url = redis.url();
    let stories = [
        "the river burst its banks overnight and the old mill road is closed",
        "city council votes to build a new bridge across the harbour next spring",
        "local bakery wins the national prize for the best sourdough loaf this year",
    ];
    let workers: Vec<_> = (0..8)
        .map(|w| {
            let input: Vec<u8> = (0..300)
                .flat_map(|i| {
                    format!(
                        "{{\"id\":{},\"text\":\"{}\"}}\n",
                        w * 1000 + i,
                        stories[(i + w) % stories.len()]
                    )
                    .into_bytes()
                })
                .collect();
            let url = url.clone();
            std::thread::spawn(move || run(&["--quiet", "--index", &url], &input))
        })
        .collect();
    let mut new = 0;
    for worker in workers {
        let out = worker.join().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8(out.stdout).unwrap();
        assert_eq!(text.lines().count(), 300);
        assert!(!text.lines().any(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            v["dedup"]["duplicate_of"] == v["id"]
        }));
        new += text.matches("\"status\":\"new\"").count();
    }
    assert_eq!(new, stories.len(), "each story new once in the fleet");
}

/// `consume --output -` writes its lines before it acknowledges: a worker
/// stopped in between leaves its entries pending, and the worker that
/// finishes them writes their lines again. Every replica remembers the
/// verdict each entry got, so the repeats are byte for byte the first
/// lines, never "a duplicate of itself" (failure case 3 of issue 23).
#[test]
fn an_entry_written_twice_to_stdout_carries_its_first_verdict() {
    if !available("an_entry_written_twice_to_stdout_carries_its_first_verdict") {
        return;
    }
    let redis = RedisServer::start();
    let url = redis.url();
    let mut con = redis.connection();
    let add = |con: &mut redis::Connection, id: u32, text: &str| {
        redis::cmd("XADD")
            .arg("in")
            .arg("*")
            .arg("json")
            .arg(format!("{{\"id_str\":\"{id}\",\"text\":\"{text}\"}}"))
            .query::<String>(con)
            .unwrap();
    };
    const STORY: &str = "Flooding closes the coastal highway north of the city tonight";
    add(&mut con, 1, STORY);
    add(&mut con, 2, "The bakery on 5th street reopens on Monday");
    let consume = || {
        Worker::start(&[
            "consume",
            "--redis",
            &url,
            "--stream",
            "in",
            "--group",
            "g",
            "--consumer",
            "a",
            "--output",
            "-",
            "--quiet",
        ])
    };
    let first = consume();
    let early: Vec<String> = (0..2)
        .map(|_| first.lines.recv_timeout(Duration::from_secs(60)).unwrap())
        .collect();
    assert!(
        early.iter().all(|l| l.contains("\"status\":\"new\"")),
        "{early:?}"
    );
    // Lines go out before their entries are acknowledged: wait for that.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let pending: redis::Value = redis::cmd("XPENDING")
            .arg("in")
            .arg("g")
            .query(&mut con)
            .unwrap();
        if matches!(&pending, redis::Value::Array(p) if p.first() == Some(&redis::Value::Int(0))) {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "never acknowledged");
        std::thread::sleep(Duration::from_millis(20));
    }
    // The dead-letter stream turns into a list: the next batch's lines are
    // written, and its acknowledgement refused (nothing acknowledged).
    redis::cmd("RPUSH")
        .arg("in:invalid")
        .arg("x")
        .query::<()>(&mut con)
        .unwrap();
    redis::pipe()
        .atomic()
        .cmd("XADD")
        .arg("in")
        .arg("*")
        .arg("json")
        .arg(format!(
            "{{\"id_str\":\"3\",\"text\":\"RT @police: {STORY}\"}}"
        ))
        .cmd("XADD")
        .arg("in")
        .arg("*")
        .arg("json")
        .arg("{\"id_str\":\"4\",\"text\":\"Sunny all weekend, say the forecasters\"}")
        .query::<()>(&mut con)
        .unwrap();
    let written: Vec<String> = first.lines.iter().take(2).collect();
    let (status, stderr) = first.finish();
    assert_eq!(written.len(), 2, "{stderr}");
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(written[0].contains("\"duplicate_of\":\"1\""), "{written:?}");
    redis::cmd("DEL")
        .arg("in:invalid")
        .query::<()>(&mut con)
        .unwrap();
    // The same consumer again: its pending entries first.
    let mut second = consume();
    let again: Vec<String> = (0..2)
        .map(|_| second.lines.recv_timeout(Duration::from_secs(60)).unwrap())
        .collect();
    second.child.kill().unwrap();
    let _ = second.finish();
    assert_eq!(
        again, written,
        "the repeats are the first lines, byte for byte"
    );
}

/// What waiting will not cure stops the run at once, with the reason: a
/// host name that does not resolve, a cluster location whose node is not
/// a cluster. An outage is waited out, for at most `--redis-wait`.
#[test]
fn errors_waiting_cannot_cure_fail_fast_and_the_wait_is_bounded() {
    if !available("errors_waiting_cannot_cure_fail_fast_and_the_wait_is_bounded") {
        return;
    }
    let input = b"{\"id\":1,\"text\":\"one two three four\"}\n";
    let timed = |args: &[&str]| {
        let started = std::time::Instant::now();
        let out = run(args, input);
        (out, started.elapsed())
    };
    let (out, took) = timed(&["--quiet", "--index", "redis://no-such-host.invalid:6379"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("failed to lookup address"));
    assert!(took < Duration::from_secs(15), "{took:?}");

    let redis = RedisServer::start();
    let cluster = format!("redis+cluster://127.0.0.1:{}", redis.port);
    let (out, _) = timed(&["--quiet", "--index", &cluster]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("cluster mode off"), "{stderr}");

    let closed = common::redis::free_port(false);
    let (out, took) = timed(&[
        "--quiet",
        "--index",
        &format!("redis://127.0.0.1:{closed}"),
        "--redis-wait",
        "1s",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("gave up waiting"), "{stderr}");
    assert!(took < Duration::from_secs(15), "{took:?}");
    assert!(out.stdout.is_empty());
}

/// Runs the binary on `input`, killing it if it is still running after
/// `limit` (the defect this guards against is a hang): its output and how
/// long it ran.
fn run_within(args: &[&str], input: &[u8], limit: Duration) -> (std::process::Output, Duration) {
    let started = std::time::Instant::now();
    let mut child = Command::new(bin())
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let _ = child.stdin.take().unwrap().write_all(input);
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > limit {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "{args:?} still ran after {limit:?}; stderr: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let took = started.elapsed();
    (child.wait_with_output().unwrap(), took)
}

/// Issue 37: `rediss://` to a port that does not speak TLS hung for ever
/// with nothing on stderr, and a port that accepts and never answers took
/// 12 s (`redis://`) or for ever (`rediss://`) with `--redis-wait 2s
/// --redis-timeout 3s`. Now each gives up within the waits, naming why:
/// a plain `redis-server` spoken to with `rediss://`, and a listener of the
/// test's own that accepts and never answers, through the filter and
/// `consume`; and a real TLS `redis-server` (when `openssl` can make it a
/// certificate) still works through the same path.
#[test]
fn a_tls_handshake_or_a_silent_server_is_bounded_by_the_waits_and_named() {
    if !available("a_tls_handshake_or_a_silent_server_is_bounded_by_the_waits_and_named") {
        return;
    }
    let plain = RedisServer::start();
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let silent_port = silent.local_addr().unwrap().port();
    // Accepts, holds every connection open, and never writes a byte.
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in silent.incoming() {
            held.push(stream);
        }
    });
    let waits = ["--redis-wait", "2s", "--redis-timeout", "1s"];
    let bound = Duration::from_secs(6); // three times the wait
    let input = b"{\"id\":1,\"text\":\"one two three four\"}\n";
    let handshake = "did not answer the TLS handshake";
    for (url, expected) in [
        (format!("rediss://127.0.0.1:{}", plain.port), handshake),
        (format!("rediss://127.0.0.1:{silent_port}"), handshake),
        (
            format!("redis://127.0.0.1:{silent_port}"),
            "accepted the connection but did not answer within 1s",
        ),
    ] {
        let mut args = vec!["--quiet", "--index", &url];
        args.extend(waits);
        let (out, took) = run_within(&args, input, bound * 2);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{url}: {stderr}");
        assert!(stderr.contains(expected), "{url}: {stderr}");
        assert!(stderr.contains("gave up waiting"), "{url}: {stderr}");
        if expected == handshake {
            assert!(stderr.contains("is it a TLS port?"), "{url}: {stderr}");
        }
        assert!(took < bound, "{url}: gave up after {took:?}");
        assert!(out.stdout.is_empty());
    }

    // consume: the streams' Redis spoken to with rediss://, and a silent
    // one with redis://.
    for (url, expected) in [
        (format!("rediss://127.0.0.1:{}", plain.port), handshake),
        (
            format!("redis://127.0.0.1:{silent_port}"),
            "accepted the connection but did not answer within 1s",
        ),
    ] {
        let mut args = vec![
            "consume", "--redis", &url, "--stream", "in", "--group", "g", "--output", "out",
        ];
        args.extend(waits);
        let (out, took) = run_within(&args, b"", bound * 2);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{url}: {stderr}");
        assert!(stderr.contains(expected), "{url}: {stderr}");
        assert!(took < bound, "{url}: consume gave up after {took:?}");
    }

    // A server that does speak TLS is reached through the same probe.
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    let made = std::process::Command::new("openssl")
        .args([
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
        ])
        .args(["-subj", "/CN=localhost", "-keyout"])
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !made {
        eprintln!("openssl cannot make a certificate: the TLS server part is skipped");
        return;
    }
    let port = common::redis::free_port(false);
    let mut tls = Command::new("redis-server")
        .args([
            "--port",
            "0",
            "--tls-port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
        ])
        .arg("--tls-cert-file")
        .arg(&cert)
        .arg("--tls-key-file")
        .arg(&key)
        .args([
            "--tls-auth-clients",
            "no",
            "--save",
            "",
            "--appendonly",
            "no",
        ])
        .arg("--dir")
        .arg(dir.path())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            std::time::Instant::now() < deadline,
            "the TLS redis-server did not start"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // A self-signed certificate: `#insecure` skips its verification.
    let url = format!("rediss://127.0.0.1:{port}/#insecure");
    let (out, _) = run_within(
        &["--quiet", "--index", &url, "--redis-wait", "5s"],
        input,
        Duration::from_secs(60),
    );
    let _ = tls.kill();
    let _ = tls.wait();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("\"status\":\"new\""),
        "{stderr}"
    );
}

/// The first `n` messages of the synthetic stream, as ids and sketches.
fn sketched(n: usize) -> Vec<(dedup_stream::MessageId, dedup_stream::SketchBuf)> {
    let preparer = dedup_stream::Preparer::new(&dedup_stream::EngineConfig::default());
    let mut scratch = dedup_stream::engine::Scratch::default();
    synthetic(n)
        .iter()
        .map(|line| {
            let value: serde_json::Value = serde_json::from_slice(line).unwrap();
            let id = value["id_str"].as_str().unwrap().parse::<u64>().unwrap();
            let text = value["text"].as_str().unwrap();
            let sketch = preparer.sketch(text, &[], &mut scratch);
            (dedup_stream::MessageId::DigitString(id), sketch)
        })
        .collect()
}

/// The asks of `messages`, all of `op`.
fn asks(
    messages: &[(dedup_stream::MessageId, dedup_stream::SketchBuf)],
    op: dedup_stream::engine::Op,
) -> Vec<dedup_stream::engine::Ask<'_>> {
    messages
        .iter()
        .map(|(id, sketch)| dedup_stream::engine::Ask {
            id,
            sketch: sketch.as_sketch(),
            op,
            token: None,
            time: 0,
        })
        .collect()
}

/// Opens the index `name` on `redis` with the default settings.
fn open_index(
    redis: &RedisServer,
    name: &str,
) -> Result<dedup_stream::redis_index::RedisIndex, dedup_stream::StoreError> {
    let location = redis.url().parse().unwrap();
    dedup_stream::redis_index::RedisIndex::open(
        &location,
        name,
        &dedup_stream::EngineConfig::default(),
        dedup_stream::redis_index::RedisOptions {
            snapshot_every: Some(u64::MAX),
            ..Default::default()
        },
    )
}

#[test]
fn a_replica_reading_the_log_ahead_applies_what_deciding_in_memory_gives() {
    use dedup_stream::engine::{IndexStore, Op};
    if !available("a_replica_reading_the_log_ahead_applies_what_deciding_in_memory_gives") {
        return;
    }
    let redis = RedisServer::start();
    let messages = sketched(6_000);
    let (head, tail) = messages.split_at(5_000);
    // Entries of 8 messages: 625 of them, ten pages of the log, which a
    // replica opening the index reads ahead of the one it applies.
    // One replica follows from the start: it reads the entries when it
    // decides next, up to its own (a page here, the rest read ahead).
    let mut follower = open_index(&redis, "ahead").unwrap();
    let mut writer = open_index(&redis, "ahead").unwrap();
    let mut memory = dedup_stream::Deduper::new(dedup_stream::EngineConfig::default()).unwrap();
    let (mut written, mut decided) = (Vec::new(), Vec::new());
    for entry in head.chunks(8) {
        writer
            .decide(&asks(entry, Op::Check), &mut written)
            .unwrap();
        memory
            .decide(&asks(entry, Op::Check), &mut decided)
            .unwrap();
    }
    assert_eq!(written, decided);
    assert_eq!(writer.applied(), 625);

    // Another opens the index now: it reads the whole log ahead.
    let mut replica = open_index(&redis, "ahead").unwrap();
    assert_eq!(replica.applied(), 625);
    let held = |s: dedup_stream::engine::IndexStats| (s.len, s.evictions, s.bytes);
    assert_eq!(held(replica.stats()), held(memory.stats()));
    // The rest asked without indexing it: each verdict depends on what
    // the replica holds, and a page applied twice, left out or out of
    // order would change some of them.
    let (mut found, mut expected) = (Vec::new(), Vec::new());
    replica.decide(&asks(tail, Op::Query), &mut found).unwrap();
    memory
        .decide(&asks(tail, Op::Query), &mut expected)
        .unwrap();
    let duplicates = expected
        .iter()
        .filter(|v| !matches!(v, dedup_stream::Verdict::New))
        .count();
    assert!(duplicates > 100, "only {duplicates} duplicates in the tail");
    assert_eq!(found, expected);
    let mut followed = Vec::new();
    follower
        .decide(&asks(tail, Op::Query), &mut followed)
        .unwrap();
    assert_eq!(follower.applied(), 627);
    assert_eq!(held(follower.stats()), held(memory.stats()));
    assert_eq!(followed, expected);

    // An entry that cannot be read, deep in the log: the replica opening
    // the index stops there, naming the index, whichever thread read it.
    let mut redis_cli = redis.connection();
    let _: String = redis::cmd("XADD")
        .arg("{ahead}:log")
        .arg("*")
        .arg("n")
        .arg(628)
        .arg("w")
        .arg("someone")
        .arg("c")
        .arg(1)
        .arg("b")
        .arg(&b"\xff"[..])
        .query(&mut redis_cli)
        .unwrap();
    let error = open_index(&redis, "ahead").unwrap_err().to_string();
    assert!(
        error.contains("index \"ahead\": a log entry is corrupt: unknown version"),
        "{error}"
    );
}

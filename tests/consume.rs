//! `dedup-stream consume` where it could lose or leak: an output key of
//! the wrong type (nothing acknowledged without its output), a password in
//! the Redis URL (never printed), and the entries the filter would take or
//! refuse. Through the real binary and a real `redis-server` (skipped,
//! saying so, without one, unless `DEDUP_REQUIRE_REDIS=1`).

mod common;

use std::io::Read;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::bin;
use common::redis::{RedisServer, available};

const TEXT: &str = "Flooding closes the coastal highway north of the city tonight";

fn add(con: &mut redis::Connection, stream: &str, field: &str, value: &[u8]) -> String {
    redis::cmd("XADD")
        .arg(stream)
        .arg("*")
        .arg(field)
        .arg(value)
        .query(con)
        .unwrap()
}

fn xlen(con: &mut redis::Connection, stream: &str) -> usize {
    redis::cmd("XLEN").arg(stream).query(con).unwrap_or(0)
}

fn pending(con: &mut redis::Connection, stream: &str, group: &str) -> usize {
    match redis::cmd("XPENDING").arg(stream).arg(group).query(con) {
        Ok(redis::Value::Array(parts)) => match parts.first() {
            Some(redis::Value::Int(n)) => *n as usize,
            _ => 0,
        },
        _ => 0,
    }
}

/// An entry as XRANGE gives it: its id and `(field, value)` pairs.
type RawEntry = (String, Vec<(String, Vec<u8>)>);

/// The `(field, value)` pairs of every entry of `stream`, as text.
fn entries(con: &mut redis::Connection, stream: &str) -> Vec<Vec<(String, String)>> {
    let all: Vec<RawEntry> = redis::cmd("XRANGE")
        .arg(stream)
        .arg("-")
        .arg("+")
        .query(con)
        .unwrap();
    all.into_iter()
        .map(|(_, fields)| {
            fields
                .into_iter()
                .map(|(k, v)| (k, String::from_utf8_lossy(&v).into_owned()))
                .collect()
        })
        .collect()
}

fn worker(url: &str, name: &str, output: &str, extra: &[&str]) -> Child {
    Command::new(bin())
        .args([
            "consume",
            "--redis",
            url,
            "--stream",
            "in",
            "--group",
            "g",
            "--consumer",
            name,
            "--output",
            output,
            "--claim-idle",
            "1s",
        ])
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn wait_until(what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting: {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Waits for the worker to exit by itself: its status and stderr.
fn exited(mut child: Child, limit: Duration) -> (Option<i32>, String) {
    let deadline = Instant::now() + limit;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the worker did not exit within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    (child.wait().unwrap().code(), stderr)
}

/// SIGTERM, then the exit status and stderr.
fn terminate(child: Child) -> (Option<i32>, String) {
    Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    exited(child, Duration::from_secs(20))
}

fn message(id: u32, text: &str) -> Vec<u8> {
    format!("{{\"id_str\":\"{id}\",\"text\":\"{text}\"}}").into_bytes()
}

#[test]
fn an_output_key_of_another_type_stops_the_worker_before_it_acknowledges_anything() {
    if !available("an_output_key_of_another_type_stops_the_worker") {
        return;
    }
    let redis = RedisServer::start();
    let mut con = redis.connection();
    add(&mut con, "in", "json", &message(1, TEXT));
    redis::cmd("SET")
        .arg("notastream")
        .arg("hello")
        .query::<()>(&mut con)
        .unwrap();

    // At the start: refused before anything is read.
    let (code, stderr) = exited(
        worker(&redis.url(), "a", "notastream", &[]),
        Duration::from_secs(20),
    );
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("the output stream \"notastream\" holds a string, not a stream"),
        "{stderr}"
    );
    assert_eq!(pending(&mut con, "in", "g"), 0, "nothing was read");
    let unread: usize = redis::cmd("XINFO")
        .arg("GROUPS")
        .arg("in")
        .query::<Vec<std::collections::HashMap<String, redis::Value>>>(&mut con)
        .unwrap()
        .first()
        .and_then(|g| match g.get("lag") {
            Some(redis::Value::Int(n)) => Some(*n as usize),
            _ => None,
        })
        .unwrap();
    assert_eq!(unread, 1, "the entry is still to be read");

    // Midway: the output key changes type under a running worker. The
    // batch that meets it stops the worker; its entries stay pending, not
    // acknowledged and lost.
    let running = worker(&redis.url(), "b", "out", &[]);
    wait_until("the first entry out", Duration::from_secs(20), || {
        xlen(&mut con, "out") == 1
    });
    redis::cmd("DEL").arg("out").query::<()>(&mut con).unwrap();
    redis::cmd("HSET")
        .arg("out")
        .arg("f")
        .arg("v")
        .query::<()>(&mut con)
        .unwrap();
    // In one transaction, so that one read takes both.
    redis::pipe()
        .atomic()
        .cmd("XADD")
        .arg("in")
        .arg("*")
        .arg("json")
        .arg(message(2, "The bakery on 5th street reopens on Monday"))
        .cmd("XADD")
        .arg("in")
        .arg("*")
        .arg("json")
        .arg(message(3, &format!("RT @news: {TEXT}")))
        .query::<()>(&mut con)
        .unwrap();
    let (code, stderr) = exited(running, Duration::from_secs(20));
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("the output stream \"out\" holds a hash, not a stream"),
        "{stderr}"
    );
    assert_eq!(pending(&mut con, "in", "g"), 2, "both entries stay pending");

    // Once the key is put right, the same consumer finishes them.
    redis::cmd("DEL").arg("out").query::<()>(&mut con).unwrap();
    let again = worker(&redis.url(), "b", "out", &[]);
    wait_until("the pending entries out", Duration::from_secs(20), || {
        xlen(&mut con, "out") == 2
    });
    let (code, stderr) = terminate(again);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(pending(&mut con, "in", "g"), 0);
    let out = entries(&mut con, "out");
    assert!(out[0][0].1.contains("\"id_str\":\"2\""), "{out:?}");
    assert!(
        out[1][0].1.contains("\"duplicate_of\":\"1\""),
        "the verdict against the first entry: {out:?}"
    );
}

#[test]
fn a_dead_letter_key_of_another_type_is_refused_too() {
    if !available("a_dead_letter_key_of_another_type_is_refused_too") {
        return;
    }
    let redis = RedisServer::start();
    let mut con = redis.connection();
    add(&mut con, "in", "json", b"not json");
    redis::cmd("RPUSH")
        .arg("out:invalid")
        .arg("x")
        .query::<()>(&mut con)
        .unwrap();
    let (code, stderr) = exited(
        worker(&redis.url(), "a", "out", &[]),
        Duration::from_secs(20),
    );
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("the dead-letter stream \"out:invalid\" holds a list"),
        "{stderr}"
    );
    assert_eq!(xlen(&mut con, "out"), 0);
}

/// Runs the binary to its end: status, stdout and stderr as text.
fn run_to_end(args: &[&str], input: &[u8]) -> (Option<i32>, String, String) {
    let output = common::run(args, input);
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// `GET /metrics` from an admin endpoint.
fn metrics(port: u16) -> String {
    use std::io::Write;
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut reply = String::new();
    stream.read_to_string(&mut reply).unwrap();
    reply
}

#[test]
fn a_password_in_a_redis_url_is_never_printed() {
    if !available("a_password_in_a_redis_url_is_never_printed") {
        return;
    }
    const SECRET: &str = "s3cretPassw0rd";
    let redis =
        RedisServer::start_with(&["--save", "", "--appendonly", "no", "--requirepass", SECRET]);
    let url = format!("redis://:{SECRET}@127.0.0.1:{}", redis.port);
    let shown = format!("redis://:***@127.0.0.1:{}", redis.port);
    let input = format!(
        "{}\n{}\n",
        String::from_utf8(message(1, TEXT)).unwrap(),
        String::from_utf8(message(2, &format!("RT @news: {TEXT}"))).unwrap()
    );
    let mut everything = String::new();
    let mut check =
        |what: &str, (code, stdout, stderr): (Option<i32>, String, String), want: i32| {
            assert_eq!(code, Some(want), "{what}: {stderr}");
            assert!(
                !stdout.contains(SECRET) && !stderr.contains(SECRET),
                "{what} printed the password:\n{stdout}\n{stderr}"
            );
            everything.push_str(&stderr);
            everything.push_str(&stdout);
        };

    // The filter, index info and index drop, at their most talkative.
    check(
        "the filter",
        run_to_end(&["-vv", "--index", &url], input.as_bytes()),
        0,
    );
    check(
        "index info",
        run_to_end(&["index", "info", "--index", &url], b""),
        0,
    );
    check(
        "index drop",
        run_to_end(&["index", "drop", "--yes", "--index", &url], b""),
        0,
    );
    // A wrong password, and a URL refused, are reported without it.
    let wrong = format!("redis://:{SECRET}x@127.0.0.1:{}", redis.port);
    check(
        "a wrong password",
        run_to_end(&["--index", &wrong], input.as_bytes()),
        1,
    );
    check(
        "a URL refused",
        run_to_end(&["--index", &format!("redis+cluster://:{SECRET}@")], b""),
        2,
    );
    check(
        "consume --redis of a cluster",
        run_to_end(
            &[
                "consume",
                "--redis",
                &format!("redis+cluster://:{SECRET}@h:1"),
                "--stream",
                "in",
                "--group",
                "g",
                "--output",
                "out",
            ],
            b"",
        ),
        2,
    );

    // A consume worker with its admin endpoint, then one whose Redis is
    // down (it says so, with the URL).
    let mut con = redis::Client::open(url.as_str())
        .unwrap()
        .get_connection()
        .unwrap();
    add(&mut con, "in", "json", &message(1, TEXT));
    let admin = common::redis::free_port(false);
    let consuming = worker(
        &url,
        "a",
        "out",
        &["-vv", "--admin", &format!("127.0.0.1:{admin}")],
    );
    wait_until("the entry out", Duration::from_secs(20), || {
        xlen(&mut con, "out") == 1
    });
    let scraped = metrics(admin);
    assert!(scraped.contains("dedup_index_store_up"), "{scraped}");
    assert!(!scraped.contains(SECRET), "/metrics: {scraped}");
    let (code, stderr) = terminate(consuming);
    check("consume", (code, String::new(), stderr), 0);
    let down = format!(
        "redis://:{SECRET}@127.0.0.1:{}",
        common::redis::free_port(false)
    );
    let waiting = worker(&down, "b", "out", &[]);
    std::thread::sleep(Duration::from_millis(700));
    let (code, stderr) = terminate(waiting);
    assert!(stderr.contains("Redis cannot be reached"), "{stderr}");
    // (Stopped while opening the index: exit 1, nothing read.)
    check("consume, Redis down", (code, String::new(), stderr), 1);

    // The URL is shown where it helps, redacted.
    assert!(everything.contains(&shown), "{everything}");
}

#[test]
fn entries_are_read_as_the_filter_reads_lines() {
    if !available("entries_are_read_as_the_filter_reads_lines") {
        return;
    }
    let redis = RedisServer::start();
    let mut con = redis.connection();
    // A byte-order mark, as the filter skips at the start of a file.
    let mut bom = b"\xEF\xBB\xBF".to_vec();
    bom.extend_from_slice(&message(1, TEXT));
    add(&mut con, "in", "json", &bom);
    // Longer than --max-line-bytes: refused, as the filter refuses it.
    let long = message(2, &"word ".repeat(100));
    assert!(long.len() > 300);
    add(&mut con, "in", "json", &long);
    add(
        &mut con,
        "in",
        "json",
        &message(3, &format!("RT @news: {TEXT}")),
    );
    let consuming = worker(&redis.url(), "a", "out", &["--max-line-bytes", "300"]);
    wait_until("every entry acknowledged", Duration::from_secs(20), || {
        xlen(&mut con, "out") == 2 && xlen(&mut con, "out:invalid") == 1
    });
    let (code, stderr) = terminate(consuming);
    assert_eq!(code, Some(0), "{stderr}");
    let out = entries(&mut con, "out");
    assert!(
        out[0][0].1.starts_with("{\"id_str\":\"1\"")
            && out[0][0].1.ends_with("\"dedup\":{\"status\":\"new\"}}"),
        "{out:?}"
    );
    assert!(out[1][0].1.contains("\"duplicate_of\":\"1\""), "{out:?}");
    let dead = entries(&mut con, "out:invalid");
    let field = |name: &str| {
        dead[0]
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
    };
    assert_eq!(
        field("error").as_deref(),
        Some("line is longer than the limit of 300 bytes")
    );
    assert_eq!(field("json").as_deref(), Some(""), "not copied");
    assert!(stderr.contains("longer than the limit"), "{stderr}");
}

/// Issue 38: an entry without the message field was dead-lettered with
/// an empty field and nothing else: what it held is copied now.
#[test]
fn an_entry_without_the_message_field_is_dead_lettered_with_its_fields() {
    if !available("an_entry_without_the_message_field_is_dead_lettered_with_its_fields") {
        return;
    }
    let redis = RedisServer::start();
    let mut con = redis.connection();
    let id: String = redis::cmd("XADD")
        .arg("in")
        .arg("*")
        .arg("payload")
        .arg(message(1, TEXT))
        .arg("origin")
        .arg("crawler-7")
        .query(&mut con)
        .unwrap();
    add(&mut con, "in", "json", &message(2, TEXT));
    let consuming = worker(&redis.url(), "a", "out", &[]);
    wait_until("every entry acknowledged", Duration::from_secs(20), || {
        xlen(&mut con, "out") == 1 && xlen(&mut con, "out:invalid") == 1
    });
    let (code, stderr) = terminate(consuming);
    assert_eq!(code, Some(0), "{stderr}");
    let dead = entries(&mut con, "out:invalid");
    assert_eq!(
        dead[0],
        [
            ("source".to_string(), id),
            ("error".to_string(), "no field \"json\"".to_string()),
            (
                "payload".to_string(),
                String::from_utf8(message(1, TEXT)).unwrap()
            ),
            ("origin".to_string(), "crawler-7".to_string()),
        ],
        "{dead:?}"
    );
}

#[test]
fn stopping_an_idle_worker_reports_no_outage() {
    if !available("stopping_an_idle_worker_reports_no_outage") {
        return;
    }
    let redis = RedisServer::start();
    let mut con = redis.connection();
    add(&mut con, "in", "json", &message(1, TEXT));
    // Several times: the signal must land while the worker waits in a
    // blocked read (up to a second), which it interrupts.
    for round in 0..3 {
        let idle = worker(&redis.url(), "a", "out", &["-v"]);
        wait_until("the entry out", Duration::from_secs(20), || {
            xlen(&mut con, "out") == 1
        });
        std::thread::sleep(Duration::from_millis(300 + 250 * round));
        let (code, stderr) = terminate(idle);
        assert_eq!(code, Some(0), "{stderr}");
        for false_alarm in ["cannot be reached", "unreachable", "Interrupted"] {
            assert!(!stderr.contains(false_alarm), "round {round}: {stderr}");
        }
        assert!(stderr.contains(" errors=0 "), "none counted: {stderr}");
        assert!(stderr.contains("1 entries read") || round > 0, "{stderr}");
    }
}

#[test]
fn the_group_is_made_again_when_redis_restarts_empty() {
    if !available("the_group_is_made_again_when_redis_restarts_empty") {
        return;
    }
    let mut redis = RedisServer::start();
    let mut con = redis.connection();
    add(&mut con, "in", "json", &message(1, TEXT));
    let consuming = worker(&redis.url(), "a", "out", &[]);
    wait_until("the first entry out", Duration::from_secs(20), || {
        xlen(&mut con, "out") == 1
    });
    // Restarted without persistence: the stream, its group and the index
    // are gone; a producer writes again before the worker notices.
    redis.restart();
    let mut con = redis.connection();
    add(
        &mut con,
        "in",
        "json",
        &message(2, &format!("RT @news: {TEXT}")),
    );
    wait_until(
        "the entry after the restart out",
        Duration::from_secs(30),
        || xlen(&mut con, "out") == 1 && pending(&mut con, "in", "g") == 0,
    );
    let (code, stderr) = terminate(consuming);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stderr.contains("the consumer group is gone from Redis"),
        "said so: {stderr}"
    );
    let out = entries(&mut con, "out");
    assert!(
        out[0][0].1.starts_with("{\"id_str\":\"2\"")
            && out[0][0].1.ends_with("{\"status\":\"new\"}}"),
        "new: the index was lost too: {out:?}"
    );
}

#[test]
fn a_missing_or_wrong_password_is_reported_as_such() {
    if !available("a_missing_or_wrong_password_is_reported_as_such") {
        return;
    }
    let redis =
        RedisServer::start_with(&["--save", "", "--appendonly", "no", "--requirepass", "pw"]);
    let none = redis.url();
    let wrong = format!("redis://:nope@127.0.0.1:{}", redis.port);
    for url in [&none, &wrong] {
        let filter = common::run(&["--index", url], message(1, TEXT).as_slice());
        let consume = common::run(
            &[
                "consume", "--redis", url, "--stream", "in", "--group", "g", "--output", "out",
            ],
            b"",
        );
        let info = common::run(&["index", "info", "--index", url], b"");
        for (what, output) in [
            ("filter", filter),
            ("consume", consume),
            ("index info", info),
        ] {
            let stderr = String::from_utf8_lossy(&output.stderr);
            assert_eq!(output.status.code(), Some(1), "{what}, {url}: {stderr}");
            assert!(
                stderr.contains("Redis refused the connection's authentication")
                    && stderr.contains("redis://:PASSWORD@HOST:PORT"),
                "{what}, {url}: {stderr}"
            );
        }
    }
}

/// A stream that does not exist is waited for, saying so (a misspelt name
/// must not be consumed as a new, empty stream forever); `--create` makes
/// it. Consumers that hold nothing and have been idle long are removed
/// from the group, so restarts do not pile them up.
#[test]
fn a_missing_stream_is_waited_for_and_idle_consumers_are_removed() {
    if !available("a_missing_stream_is_waited_for_and_idle_consumers_are_removed") {
        return;
    }
    let redis = RedisServer::start();
    let mut con = redis.connection();
    let waiting = worker(&redis.url(), "a", "out", &[]);
    std::thread::sleep(Duration::from_millis(1500));
    let exists: bool = redis::cmd("EXISTS").arg("in").query(&mut con).unwrap();
    assert!(!exists, "the worker did not make the stream");
    add(&mut con, "in", "json", &message(1, TEXT));
    wait_until("the entry out", Duration::from_secs(20), || {
        xlen(&mut con, "out") == 1
    });
    let (code, stderr) = terminate(waiting);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stderr.contains("the stream does not exist: waiting for it"),
        "{stderr}"
    );

    // --create makes a missing stream at once.
    let created = Command::new(bin())
        .args([
            "consume",
            "--redis",
            &redis.url(),
            "--stream",
            "other",
            "--group",
            "g",
            "--output",
            "out2",
            "--create",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_until("the stream made", Duration::from_secs(20), || {
        redis::cmd("EXISTS")
            .arg("other")
            .query(&mut con)
            .unwrap_or(false)
    });
    let _ = terminate(created);

    // Consumer "a" holds nothing now; one idle past the limit is removed
    // by the next worker's claim round.
    std::thread::sleep(Duration::from_millis(300));
    let sweeping = worker(
        &redis.url(),
        "c",
        "out",
        &["--forget-idle-consumers", "200ms"],
    );
    wait_until("consumer a removed", Duration::from_secs(20), || {
        let consumers: Vec<std::collections::HashMap<String, redis::Value>> = redis::cmd("XINFO")
            .arg("CONSUMERS")
            .arg("in")
            .arg("g")
            .query(&mut con)
            .unwrap_or_default();
        consumers
            .iter()
            .all(|c| c.get("name") != Some(&redis::Value::BulkString(b"a".to_vec())))
    });
    let _ = terminate(sweeping);
}

#[test]
fn deletion_notices_in_the_stream_are_honoured_and_passed_on() {
    if !available("deletion_notices_in_the_stream_are_honoured_and_passed_on") {
        return;
    }
    let redis = RedisServer::start();
    let mut con = redis.connection();
    add(&mut con, "in", "json", &message(1, TEXT));
    let notice = br#"{"delete":{"status":{"id":1,"id_str":"1","user_id":5,"user_id_str":"5"},"timestamp_ms":"1"}}"#;
    add(&mut con, "in", "json", notice);
    add(&mut con, "in", "json", &message(2, TEXT));
    let consuming = worker(&redis.url(), "a", "out", &[]);
    wait_until("every entry acknowledged", Duration::from_secs(20), || {
        xlen(&mut con, "out") == 3
    });
    let (code, stderr) = terminate(consuming);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(pending(&mut con, "in", "g"), 0);
    let out = entries(&mut con, "out");
    assert!(
        out[0][0].1.ends_with("\"dedup\":{\"status\":\"new\"}}"),
        "{out:?}"
    );
    assert!(
        out[1][0]
            .1
            .ends_with("\"timestamp_ms\":\"1\"},\"dedup\":{\"status\":\"deleted\",\"held\":true}}"),
        "{out:?}"
    );
    assert!(
        out[2][0].1.ends_with("\"dedup\":{\"status\":\"new\"}}"),
        "1 was forgotten: {out:?}"
    );
}

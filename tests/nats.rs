//! `dedup-stream consume --nats` against a real `nats-server -js` (Debian's
//! `nats-server`; skipped, saying so, without one unless
//! `DEDUP_REQUIRE_NATS=1`): the filter's output with one worker, dead
//! letters, SIGTERM, exactly one output per input through `kill -9` of the
//! worker and a restart of the server, a consumer whose settings
//! conflict, and workers that start together on a new server.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::nats::{Client, NatsServer, Stored, available};
use common::{bin, run, stops_cleanly, terminate};

const IN_STREAM: &str = "tweets";
const IN_SUBJECT: &str = "tweets.in";
const OUT_STREAM: &str = "tagged";
const OUT_SUBJECT: &str = "tagged.out";
const DEAD_SUBJECT: &str = "tagged.out.invalid";

/// `n` tweets in v1.1 form where stories repeat as retweets and edits.
fn tweets(n: usize) -> Vec<Vec<u8>> {
    let places = ["coastal", "northern", "river", "mountain", "harbour", "old"];
    (0..n)
        .map(|i| {
            let story = (i * 7) % 41;
            let text = match i % 4 {
                0 => format!(
                    "Storm {story} has closed the {} highway north of the city tonight",
                    places[story % places.len()]
                ),
                1 => format!(
                    "RT @news{}: Storm {story} has closed the {} highway north of the city tonight",
                    i % 5,
                    places[story % places.len()]
                ),
                2 => format!(
                    "Market report {i}: prices of item {} rose by {} percent",
                    i * 13,
                    i % 9
                ),
                _ => format!(
                    "Storm {story} has closed the {} highway north of the city tonight, police say",
                    places[story % places.len()]
                ),
            };
            format!(r#"{{"id_str":"{i}","text":"{text}"}}"#).into_bytes()
        })
        .collect()
}

/// A worker on `server`'s streams (ack wait 2 s, durable `dedup` created
/// if missing) with these extra options; its stderr goes to `log`.
fn worker(server: &NatsServer, extra: &[&str], log: &Path) -> Child {
    worker_of(server, "dedup", &["--create"], extra, log)
}

/// A worker of the durable `durable` with these options.
fn worker_of(
    server: &NatsServer,
    durable: &str,
    options: &[&str],
    extra: &[&str],
    log: &Path,
) -> Child {
    let url = server.url();
    Command::new(bin())
        .args([
            "consume",
            "--nats",
            &url,
            "--stream",
            IN_STREAM,
            "--subject",
            IN_SUBJECT,
            "--durable",
            durable,
            "--output-subject",
            OUT_SUBJECT,
            "--output-stream",
            OUT_STREAM,
            "--ack-wait",
            "2s",
        ])
        .args(options)
        .args(extra)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).expect("a log file"))
        .spawn()
        .expect("the worker starts")
}

/// Waits until `done` holds (at most `limit`), polling; on a timeout
/// shows the worker's log.
fn wait_for(limit: Duration, what: &str, log: &Path, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !done() {
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}; the worker's log:\n{}",
            std::fs::read_to_string(log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn outputs(client: &Client) -> Vec<Stored> {
    client
        .read(OUT_STREAM)
        .into_iter()
        .filter(|m| m.subject == OUT_SUBJECT)
        .collect()
}

/// The input stream sequence an output answers, from its `Nats-Msg-Id`
/// (`dedup.STREAM.DURABLE.CREATED.SEQUENCE`), and the rest of the id.
fn source_of(output: &Stored) -> (String, u64) {
    let id = output
        .header("Nats-Msg-Id")
        .expect("every output has Nats-Msg-Id");
    id.rsplit_once('.')
        .filter(|(base, _)| base.starts_with(&format!("dedup.{IN_STREAM}.")))
        .and_then(|(base, sequence)| Some((base.to_string(), sequence.parse().ok()?)))
        .unwrap_or_else(|| panic!("Nats-Msg-Id {id:?} names its input"))
}

/// The outputs by their input's stream sequence (from `Nats-Msg-Id`),
/// failing on two outputs of one input.
fn by_sequence(outputs: &[Stored]) -> BTreeMap<u64, Vec<u8>> {
    let mut seen = BTreeMap::new();
    for output in outputs {
        let (_, sequence) = source_of(output);
        assert!(
            seen.insert(sequence, output.payload.clone()).is_none(),
            "input {sequence} has two outputs"
        );
    }
    seen
}

/// The filter's output for these lines, one tagged line per input.
fn filtered(lines: &[Vec<u8>]) -> Vec<Vec<u8>> {
    let input = lines.join(&b"\n"[..]);
    let output = run(&["--quiet"], &input);
    assert!(output.status.success());
    output
        .stdout
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .map(<[u8]>::to_vec)
        .collect()
}

/// Asserts that `tagged` is `input` with a `dedup` member spliced in.
fn is_tagged(input: &[u8], tagged: &[u8]) {
    let body = &input[..input.len() - 1];
    assert!(
        tagged.starts_with(body) && tagged[body.len()..].starts_with(br#","dedup":{"status":""#),
        "{} is not {} tagged",
        String::from_utf8_lossy(tagged),
        String::from_utf8_lossy(input)
    );
}

#[test]
fn one_worker_publishes_what_the_filter_writes_and_stops_on_sigterm() {
    if !available("one_worker_publishes_what_the_filter_writes_and_stops_on_sigterm") {
        return;
    }
    let server = NatsServer::start();
    let client = Client::connect(&server.url());
    let lines = tweets(400);
    client.create_stream(IN_STREAM, &[IN_SUBJECT]);
    client.publish(IN_SUBJECT, &lines);
    let temp = tempfile::tempdir().unwrap();
    let log = temp.path().join("worker.log");
    let mut child = worker(&server, &["--batch", "64"], &log);
    wait_for(Duration::from_secs(20), "every output", &log, || {
        client.count(OUT_STREAM) >= lines.len() as u64
    });
    let started = Instant::now();
    let status = terminate(&mut child);
    let stderr = std::fs::read_to_string(&log).unwrap();
    assert!(status.success(), "{status}: {stderr}");
    assert!(started.elapsed() < Duration::from_secs(5), "a quick stop");
    assert!(stderr.contains("created the output stream"), "{stderr}");
    assert!(stderr.contains("created the durable consumer"), "{stderr}");
    assert!(
        stderr.contains("400 messages read (0 redelivered)") && stderr.contains("400 acknowledged"),
        "{stderr}"
    );

    let outputs = outputs(&client);
    let expected = filtered(&lines);
    assert_eq!(outputs.len(), expected.len());
    for (i, (output, line)) in outputs.iter().zip(&expected).enumerate() {
        assert_eq!(
            String::from_utf8_lossy(&output.payload),
            String::from_utf8_lossy(line),
            "output {i}"
        );
        let (base, sequence) = source_of(output);
        assert_eq!(sequence, i as u64 + 1);
        assert!(
            base.starts_with(&format!("dedup.{IN_STREAM}.dedup.")),
            "{base}"
        );
    }
    assert!(
        expected
            .iter()
            .any(|l| String::from_utf8_lossy(l).contains("duplicate")),
        "the stream has duplicates"
    );
    assert_eq!(client.consumer_backlog(IN_STREAM, "dedup"), (0, 0));
}

#[test]
fn malformed_messages_go_to_the_dead_letter_subject_and_are_terminated() {
    if !available("malformed_messages_go_to_the_dead_letter_subject_and_are_terminated") {
        return;
    }
    let server = NatsServer::start();
    let client = Client::connect(&server.url());
    client.create_stream(IN_STREAM, &[IN_SUBJECT]);
    let good = tweets(2);
    let inputs = vec![
        good[0].clone(),
        b"not json at all".to_vec(),
        br#"{"id_str":"9"}"#.to_vec(),
        good[1].clone(),
        vec![b'x'; 300],
    ];
    client.publish(IN_SUBJECT, &inputs);
    let temp = tempfile::tempdir().unwrap();
    let log = temp.path().join("worker.log");
    let mut child = worker(&server, &["--max-line-bytes", "200"], &log);
    wait_for(
        Duration::from_secs(20),
        "every message handled",
        &log,
        || client.read(OUT_STREAM).len() >= 5,
    );
    let status = terminate(&mut child);
    let stderr = std::fs::read_to_string(&log).unwrap();
    assert!(status.success(), "{stderr}");
    assert!(stderr.contains("3 invalid"), "{stderr}");

    let all = client.read(OUT_STREAM);
    assert_eq!(all.len(), 5);
    let dead: Vec<&Stored> = all.iter().filter(|m| m.subject == DEAD_SUBJECT).collect();
    assert_eq!(dead.len(), 3);
    assert_eq!(dead[0].payload, inputs[1]);
    assert_eq!(dead[0].header("Dedup-Source"), Some("tweets.2"));
    assert!(
        dead[0]
            .header("Dedup-Error")
            .is_some_and(|e| e.contains("JSON")),
        "{dead:?}"
    );
    assert_eq!(dead[1].payload, inputs[2]);
    assert!(
        dead[1]
            .header("Dedup-Error")
            .is_some_and(|e| e.contains("text")),
        "{dead:?}"
    );
    // Over --max-line-bytes: named, not copied.
    assert!(dead[2].payload.is_empty());
    assert_eq!(dead[2].header("Dedup-Source"), Some("tweets.5"));
    let tagged = outputs(&client);
    assert_eq!(tagged.len(), 2);
    is_tagged(&inputs[0], &tagged[0].payload);
    is_tagged(&inputs[3], &tagged[1].payload);
    // Terminated and acknowledged: nothing waits, nothing comes back.
    assert_eq!(client.consumer_backlog(IN_STREAM, "dedup"), (0, 0));
}

#[test]
fn a_worker_killed_mid_stream_leaves_exactly_one_output_per_input() {
    kill_a_worker_mid_stream(
        "a_worker_killed_mid_stream_leaves_exactly_one_output_per_input",
        &[],
    );
}

#[test]
fn a_worker_killed_mid_stream_with_one_batch_in_flight_leaves_one_output_per_input() {
    kill_a_worker_mid_stream(
        "a_worker_killed_mid_stream_with_one_batch_in_flight_leaves_one_output_per_input",
        &["--in-flight", "1"],
    );
}

/// A worker (with `extra` options) `kill -9`ed mid-stream, and another
/// that finishes the stream: one output per input, the first worker's
/// the filter's.
fn kill_a_worker_mid_stream(test: &str, extra: &[&str]) {
    if !available(test) {
        return;
    }
    let server = NatsServer::start();
    let client = Client::connect(&server.url());
    let lines = tweets(3000);
    client.create_stream(IN_STREAM, &[IN_SUBJECT]);
    client.publish(IN_SUBJECT, &lines);
    let temp = tempfile::tempdir().unwrap();
    let log = temp.path().join("worker.log");
    let mut first = worker(&server, &[&["--batch", "8"], extra].concat(), &log);
    wait_for(Duration::from_secs(20), "some outputs", &log, || {
        client.count(OUT_STREAM) >= 100
    });
    first.kill().unwrap(); // SIGKILL: mid-stream, mid-batch
    first.wait().unwrap();
    let done = outputs(&client).len();
    assert!(done < lines.len(), "killed before the end ({done})");

    let log2 = temp.path().join("worker2.log");
    let mut second = worker(&server, &[&["--batch", "16"], extra].concat(), &log2);
    wait_for(
        Duration::from_secs(25),
        "every input answered",
        &log2,
        || {
            client.consumer_backlog(IN_STREAM, "dedup") == (0, 0)
                && client.count(OUT_STREAM) >= lines.len() as u64
        },
    );
    let status = terminate(&mut second);
    let stderr = std::fs::read_to_string(&log2).unwrap();
    assert!(status.success(), "{stderr}");
    eprintln!(
        "the restarted worker: {}",
        stderr.lines().last().unwrap_or("")
    );

    let outputs = outputs(&client);
    let answered = by_sequence(&outputs);
    assert_eq!(outputs.len(), lines.len(), "exactly one output per input");
    assert_eq!(answered.len(), lines.len());
    for (sequence, payload) in &answered {
        is_tagged(&lines[*sequence as usize - 1], payload);
    }
    // What the first worker published before it died is what the filter
    // writes for those messages (it saw them in order, from the start).
    let expected = filtered(&lines);
    for (i, output) in outputs.iter().take(done).enumerate() {
        assert_eq!(output.payload, expected[i], "output {i}");
    }
}

#[test]
fn a_worker_waits_out_a_server_restart_and_loses_nothing() {
    restart_the_server_under_a_worker("a_worker_waits_out_a_server_restart_and_loses_nothing", &[]);
}

#[test]
fn a_worker_with_one_batch_in_flight_waits_out_a_server_restart_and_loses_nothing() {
    restart_the_server_under_a_worker(
        "a_worker_with_one_batch_in_flight_waits_out_a_server_restart_and_loses_nothing",
        &["--in-flight", "1"],
    );
}

/// The server `kill -9`ed and started again under a worker (with `extra`
/// options) mid-stream: every input answered once.
fn restart_the_server_under_a_worker(test: &str, extra: &[&str]) {
    if !available(test) {
        return;
    }
    let mut server = NatsServer::start();
    let lines = tweets(800);
    let (before, after) = lines.split_at(400);
    {
        let client = Client::connect(&server.url());
        client.create_stream(IN_STREAM, &[IN_SUBJECT]);
        client.publish(IN_SUBJECT, before);
    }
    let temp = tempfile::tempdir().unwrap();
    let log = temp.path().join("worker.log");
    let mut child = worker(&server, &[&["--batch", "16"], extra].concat(), &log);
    {
        let client = Client::connect(&server.url());
        wait_for(Duration::from_secs(20), "some outputs", &log, || {
            client.count(OUT_STREAM) >= 100
        });
    }
    server.restart();
    std::thread::sleep(Duration::from_millis(500));
    let client = Client::connect(&server.url());
    client.publish(IN_SUBJECT, after);
    wait_for(
        Duration::from_secs(25),
        "every input answered",
        &log,
        || {
            client.count(OUT_STREAM) >= lines.len() as u64
                && client.consumer_backlog(IN_STREAM, "dedup") == (0, 0)
        },
    );
    let status = terminate(&mut child);
    let stderr = std::fs::read_to_string(&log).unwrap();
    assert!(status.success(), "{stderr}");
    eprintln!("the worker: {}", stderr.lines().last().unwrap_or(""));
    assert!(
        stderr.contains("disconnected from NATS"),
        "the outage was seen: {stderr}"
    );
    let outputs = outputs(&client);
    assert_eq!(outputs.len(), lines.len(), "{stderr}");
    let answered = by_sequence(&outputs);
    assert_eq!(answered.len(), lines.len());
    for (sequence, payload) in &answered {
        is_tagged(&lines[*sequence as usize - 1], payload);
    }
}

#[test]
fn a_consumer_with_other_settings_is_refused() {
    if !available("a_consumer_with_other_settings_is_refused") {
        return;
    }
    let server = NatsServer::start();
    let client = Client::connect(&server.url());
    client.create_stream(IN_STREAM, &["tweets.>"]);
    let temp = tempfile::tempdir().unwrap();
    // A worker makes the consumer on tweets.in; one on tweets.other with
    // the same durable is refused, as is one whose output it would read.
    let log = temp.path().join("worker.log");
    let mut child = worker(&server, &[], &log);
    wait_for(Duration::from_secs(20), "the consumer", &log, || {
        std::fs::read_to_string(&log).is_ok_and(|l| l.contains("created the durable consumer"))
    });
    stops_cleanly(&mut child, &log);

    let url = server.url();
    let refused = |extra: &[&str]| {
        let output = Command::new(bin())
            .args([
                "consume",
                "--nats",
                &url,
                "--stream",
                IN_STREAM,
                "--durable",
                "dedup",
                "--output-stream",
                OUT_STREAM,
            ])
            .args(extra)
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(1));
        String::from_utf8_lossy(&output.stderr).into_owned()
    };
    let stderr = refused(&["--subject", "tweets.other", "--output-subject", OUT_SUBJECT]);
    assert!(
        stderr.contains("exists with other settings") && stderr.contains("tweets.in"),
        "{stderr}"
    );
    let stderr = refused(&[
        "--subject",
        "tweets.in",
        "--output-subject",
        "tagged.out",
        "--ack-wait",
        "9s",
    ]);
    assert!(stderr.contains("ack wait"), "{stderr}");
    let stderr = refused(&["--subject", "tweets.>", "--output-subject", "tweets.out"]);
    assert!(stderr.contains("read its own output"), "{stderr}");
}

#[test]
fn passwords_in_the_url_are_never_printed() {
    let output = Command::new(bin())
        .args([
            "consume",
            "--nats",
            "nats://me:s3cret@127.0.0.1:1",
            "--stream",
            "s",
            "--subject",
            "a",
            "--durable",
            "d",
            "--output-subject",
            "b",
            "--redis",
            "redis://x",
        ])
        .output()
        .unwrap();
    assert_eq!(
        output.status.code(),
        Some(2),
        "--redis and --nats exclude each other"
    );
    let output = Command::new(bin())
        .args([
            "consume",
            "-v",
            "--nats",
            "nats://me:s3cret@127.0.0.1:1",
            "--stream",
            "s",
            "--subject",
            "a",
            "--durable",
            "d",
            "--output-subject",
            "b",
        ])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    let mut child = output;
    terminate(&mut child);
    let mut stderr = String::new();
    use std::io::Read;
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert!(!stderr.contains("s3cret"), "{stderr}");
    assert!(stderr.contains("nats://me:***@127.0.0.1:1"), "{stderr}");
}

#[test]
fn the_state_file_carries_the_index_across_restarts() {
    if !available("the_state_file_carries_the_index_across_restarts") {
        return;
    }
    let server = NatsServer::start();
    let client = Client::connect(&server.url());
    client.create_stream(IN_STREAM, &[IN_SUBJECT]);
    client.publish(
        IN_SUBJECT,
        &[br#"{"id_str":"1","text":"Flooding has closed the coastal highway north of the city tonight"}"#.to_vec()],
    );
    let temp = tempfile::tempdir().unwrap();
    let state = temp.path().join("index.state");
    let state_arg = state.to_str().unwrap();
    let log = temp.path().join("worker.log");
    let mut child = worker(&server, &["--state", state_arg], &log);
    wait_for(Duration::from_secs(20), "the first output", &log, || {
        client.count(OUT_STREAM) >= 1
    });
    stops_cleanly(&mut child, &log);
    assert!(state.exists(), "saved at the stop");

    client.publish(
        IN_SUBJECT,
        &[br#"{"id_str":"2","text":"RT @police: Flooding has closed the coastal highway north of the city tonight"}"#.to_vec()],
    );
    let mut child = worker(&server, &["--state", state_arg], &log);
    wait_for(Duration::from_secs(20), "the second output", &log, || {
        client.count(OUT_STREAM) >= 2
    });
    stops_cleanly(&mut child, &log);
    let outputs = outputs(&client);
    let second = String::from_utf8_lossy(&outputs[1].payload).into_owned();
    assert!(second.contains(r#""duplicate_of":"1""#), "{second}");
}

#[test]
fn workers_started_together_all_set_up_the_streams_and_consumer_they_share() {
    // Each worker of a fleet started at once may find the streams and the
    // consumer missing; the server refuses every creation but one, and the
    // others must take what the first made, not stop. The workers run in
    // this process, so that their requests reach the server together, and
    // are told to stop before they start: each sets up, then returns.
    // Before the fix, one round in 30 to 60 lost a worker.
    use dedup_stream::queue::nats::{self, NatsConfig};
    use dedup_stream::{Deduper, EngineConfig, Preparer};
    use std::sync::atomic::AtomicBool;

    let test = "workers_started_together_all_set_up_the_streams_and_consumer_they_share";
    if !available(test) {
        return;
    }
    let server = NatsServer::start();
    let client = Client::connect(&server.url());
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    let engine = EngineConfig::default();
    let preparer = Preparer::new(&engine);
    let metrics = std::sync::Arc::new(dedup_stream::metrics::Metrics::default());
    let stop = AtomicBool::new(true);
    let nats = nats::NatsServer {
        url: server.url(),
        creds: None,
        ca: None,
    };
    for round in 0..300 {
        let (input, output) = (format!("in{round}"), format!("out{round}"));
        let config = NatsConfig {
            stream: input.clone(),
            subject: format!("{input}.x"),
            durable: "dedup".into(),
            create: true,
            output_subject: format!("{output}.x"),
            output_stream: Some(output.clone()),
            dead_letter_subject: format!("{output}.x.invalid"),
            options: dedup_stream::queue::Options {
                emit: Default::default(),
                fields: Default::default(),
                batch: 4,
                in_flight: 2,
                prepare_threads: 0,
                relay: false,
            },
            max_line_bytes: Some(1 << 20),
            ack_wait: Duration::from_secs(2),
        };
        let clients = runtime.block_on(async {
            let mut clients = Vec::new();
            for _ in 0..4 {
                clients.push(nats::connect(&nats).await.expect("connected"));
            }
            clients
        });
        // A thread each, so that their set-ups reach the server together.
        let results: Vec<_> = std::thread::scope(|scope| {
            let workers: Vec<_> = clients
                .into_iter()
                .map(|client| {
                    let (config, preparer, stop, metrics) = (&config, &preparer, &stop, &metrics);
                    let (engine, handle) = (&engine, runtime.handle());
                    scope.spawn(move || {
                        let deduper = Deduper::new(engine.clone()).expect("an engine");
                        let mut store = nats::Memo::new(deduper);
                        nats::run(handle, client, config, preparer, &mut store, stop, metrics)
                    })
                })
                .collect();
            workers
                .into_iter()
                .map(|w| w.join().expect("no panic"))
                .collect()
        });
        for result in results {
            if let Err(e) = result {
                panic!("round {round}: a worker stopped: {e}");
            }
        }
        assert_eq!(client.consumer_backlog(&input, "dedup"), (0, 0));
    }
}

#[test]
fn two_workers_sharing_an_index_in_redis_answer_each_input_once_through_a_kill() {
    let test = "two_workers_sharing_an_index_in_redis_answer_each_input_once_through_a_kill";
    if !available(test) || !common::redis::available(test) {
        return;
    }
    let redis = common::redis::RedisServer::start();
    let index = format!("redis://127.0.0.1:{}", redis.port);
    let server = NatsServer::start();
    let client = Client::connect(&server.url());
    let lines = tweets(1200);
    client.create_stream(IN_STREAM, &[IN_SUBJECT]);
    client.publish(IN_SUBJECT, &lines);
    let temp = tempfile::tempdir().unwrap();
    let logs: Vec<_> = (0..3)
        .map(|i| temp.path().join(format!("w{i}.log")))
        .collect();
    let options = ["--batch", "16", "--index", &index];
    let mut a = worker(&server, &options, &logs[0]);
    let mut b = worker(&server, &options, &logs[1]);
    wait_for(Duration::from_secs(20), "some outputs", &logs[0], || {
        client.count(OUT_STREAM) >= 200
    });
    a.kill().unwrap();
    a.wait().unwrap();
    let mut c = worker(&server, &options, &logs[2]);
    wait_for(
        Duration::from_secs(25),
        "every input answered",
        &logs[1],
        || {
            client.consumer_backlog(IN_STREAM, "dedup") == (0, 0)
                && client.count(OUT_STREAM) >= lines.len() as u64
        },
    );
    stops_cleanly(&mut b, &logs[1]);
    stops_cleanly(&mut c, &logs[2]);
    let outputs = outputs(&client);
    assert_eq!(outputs.len(), lines.len(), "exactly one output per input");
    let answered = by_sequence(&outputs);
    assert_eq!(answered.len(), lines.len());
    for (sequence, payload) in &answered {
        is_tagged(&lines[*sequence as usize - 1], payload);
    }
    // One index: each story is new once, whichever worker saw it.
    let new = outputs
        .iter()
        .filter(|o| String::from_utf8_lossy(&o.payload).contains(r#""status":"new""#))
        .count();
    let expected_new = filtered(&lines)
        .iter()
        .filter(|l| String::from_utf8_lossy(l).contains(r#""status":"new""#))
        .count();
    eprintln!("new: {new} with two workers and a kill, {expected_new} in the filter");
    assert!(
        new.abs_diff(expected_new) <= expected_new / 20,
        "{new} vs {expected_new}"
    );
}

/// `GET path` on the admin endpoint: the status line's code, 0 if none.
fn http_status(port: u16, path: &str) -> u16 {
    use std::io::{Read, Write};
    let Ok(mut stream) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return 0;
    };
    let _ = write!(stream, "GET {path} HTTP/1.1\r\nHost: x\r\n\r\n");
    let mut response = String::new();
    let _ = stream.read_to_string(&mut response);
    response
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or(0)
}

#[test]
fn health_follows_the_server_and_a_password_in_the_url_logs_in() {
    if !available("health_follows_the_server_and_a_password_in_the_url_logs_in") {
        return;
    }
    let mut server = NatsServer::start_with(&["--user", "me", "--pass", "s3cret"]);
    let url = format!("nats://me:s3cret@127.0.0.1:{}", server.port);
    let client = Client::connect(&url);
    client.create_stream(IN_STREAM, &[IN_SUBJECT]);
    client.publish(IN_SUBJECT, &tweets(10));
    let admin = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let temp = tempfile::tempdir().unwrap();
    let log = temp.path().join("worker.log");
    let mut child = Command::new(bin())
        .args([
            "consume",
            "--nats",
            &url,
            "--stream",
            IN_STREAM,
            "--subject",
            IN_SUBJECT,
            "--durable",
            "dedup",
            "--output-subject",
            OUT_SUBJECT,
            "--output-stream",
            OUT_STREAM,
            "--create",
            "--admin",
            &format!("127.0.0.1:{admin}"),
        ])
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    wait_for(Duration::from_secs(20), "the outputs", &log, || {
        client.count(OUT_STREAM) >= 10
    });
    assert_eq!(http_status(admin, "/healthz"), 200);
    server.kill();
    wait_for(Duration::from_secs(25), "/healthz 503", &log, || {
        http_status(admin, "/healthz") == 503
    });
    server.restart();
    wait_for(Duration::from_secs(25), "/healthz 200 again", &log, || {
        http_status(admin, "/healthz") == 200
    });
    stops_cleanly(&mut child, &log);
    let stderr = std::fs::read_to_string(&log).unwrap();
    assert!(!stderr.contains("s3cret"), "{stderr}");
    assert!(stderr.contains("NATS reachable again"), "{stderr}");
}

#[test]
fn a_token_in_the_url_logs_in() {
    if !available("a_token_in_the_url_logs_in") {
        return;
    }
    let server = NatsServer::start_with(&["--auth", "t0ken"]);
    let url = format!("nats://t0ken@127.0.0.1:{}", server.port);
    let temp = tempfile::tempdir().unwrap();
    let log = temp.path().join("worker.log");
    let mut child = Command::new(bin())
        .args([
            "consume",
            "--nats",
            &url,
            "--stream",
            IN_STREAM,
            "--subject",
            IN_SUBJECT,
            "--durable",
            "dedup",
            "--output-subject",
            OUT_SUBJECT,
            "--output-stream",
            OUT_STREAM,
            "--create",
        ])
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    wait_for(Duration::from_secs(20), "the consumer", &log, || {
        std::fs::read_to_string(&log).is_ok_and(|l| l.contains("created the durable consumer"))
    });
    stops_cleanly(&mut child, &log);
    let stderr = std::fs::read_to_string(&log).unwrap();
    assert!(!stderr.contains("t0ken"), "{stderr}");
}

#[test]
fn an_output_over_max_payload_is_dead_lettered_without_its_bytes() {
    let test = "an_output_over_max_payload_is_dead_lettered_without_its_bytes";
    if !available(test) {
        return;
    }
    // A server that takes 8 KiB at most (nats-server's own setting, read by
    // the worker from the server's INFO).
    let conf = tempfile::tempdir().unwrap();
    let path = conf.path().join("nats.conf");
    std::fs::write(&path, "max_payload: 8192\n").unwrap();
    let server = NatsServer::start_with(&["-c", path.to_str().unwrap()]);
    let client = Client::connect(&server.url());
    client.create_stream(IN_STREAM, &[IN_SUBJECT]);
    let long = format!(
        r#"{{"id_str":"2","text":"Long report {}"}}"#,
        "word ".repeat(1620)
    );
    assert!(long.len() > 8100 && long.len() < 8192, "{}", long.len());
    let small = tweets(2);
    let inputs = vec![small[0].clone(), long.into_bytes(), small[1].clone()];
    client.publish(IN_SUBJECT, &inputs);

    // --max-line-bytes at the server's limit: the long message is decided,
    // and its tagged output no longer fits.
    let temp = tempfile::tempdir().unwrap();
    let log = temp.path().join("worker.log");
    let mut child = worker(&server, &["--max-line-bytes", "8192"], &log);
    wait_for(
        Duration::from_secs(20),
        "every message handled",
        &log,
        || client.read(OUT_STREAM).len() >= 3,
    );
    let status = terminate(&mut child);
    let stderr = std::fs::read_to_string(&log).unwrap();
    assert!(status.success(), "{stderr}");
    assert!(stderr.contains("1 outputs too large to store"), "{stderr}");
    assert!(
        stderr.contains("close to or over the server's max_payload"),
        "{stderr}"
    );
    let all = client.read(OUT_STREAM);
    assert_eq!(all.len(), 3, "{all:?}");
    let tagged = outputs(&client);
    assert_eq!(tagged.len(), 2);
    is_tagged(&inputs[0], &tagged[0].payload);
    is_tagged(&inputs[2], &tagged[1].payload);
    let dead: Vec<&Stored> = all.iter().filter(|m| m.subject == DEAD_SUBJECT).collect();
    assert_eq!(dead.len(), 1);
    assert!(dead[0].payload.is_empty());
    assert_eq!(dead[0].header("Dedup-Source"), Some("tweets.2"));
    let reason = dead[0].header("Dedup-Error").unwrap_or_default();
    assert!(
        reason.contains("max_payload") && reason.contains("8192"),
        "{reason}"
    );
    // Terminated: nothing waits, nothing comes back.
    assert_eq!(client.consumer_backlog(IN_STREAM, "dedup"), (0, 0));

    // By default the worker decides messages of at most max_payload less
    // 4,096 bytes: the long one is refused as too long, unread.
    client.publish(IN_SUBJECT, &[inputs[1].clone()]);
    let log = temp.path().join("default.log");
    let mut child = worker(&server, &[], &log);
    wait_for(
        Duration::from_secs(20),
        "the long message handled",
        &log,
        || client.read(OUT_STREAM).len() >= 4,
    );
    stops_cleanly(&mut child, &log);
    let all = client.read(OUT_STREAM);
    let last = all.last().unwrap();
    assert_eq!(last.subject, DEAD_SUBJECT);
    assert_eq!(last.header("Dedup-Source"), Some("tweets.4"));
    let reason = last.header("Dedup-Error").unwrap_or_default();
    assert!(reason.contains("4096"), "{reason}");
}

#[test]
fn two_durables_on_one_input_stream_both_store_all_their_outputs() {
    let test = "two_durables_on_one_input_stream_both_store_all_their_outputs";
    if !available(test) {
        return;
    }
    let server = NatsServer::start();
    let client = Client::connect(&server.url());
    client.create_stream(IN_STREAM, &[IN_SUBJECT]);
    let lines = tweets(300);
    client.publish(IN_SUBJECT, &lines);
    let temp = tempfile::tempdir().unwrap();
    let (log_a, log_b) = (temp.path().join("a.log"), temp.path().join("b.log"));
    let mut a = worker_of(&server, "first", &["--create"], &[], &log_a);
    let mut b = worker_of(&server, "second", &["--create"], &[], &log_b);
    wait_for(
        Duration::from_secs(30),
        "both durables' outputs",
        &log_b,
        || client.count(OUT_STREAM) >= 600,
    );
    stops_cleanly(&mut a, &log_a);
    stops_cleanly(&mut b, &log_b);
    let outputs = outputs(&client);
    assert_eq!(outputs.len(), 600);
    for durable in ["first", "second"] {
        let prefix = format!("dedup.{IN_STREAM}.{durable}.");
        let mine: Vec<Stored> = outputs
            .iter()
            .filter(|o| o.header("Nats-Msg-Id").unwrap().starts_with(&prefix))
            .cloned()
            .collect();
        let by_sequence = by_sequence(&mine);
        assert_eq!(
            by_sequence.keys().copied().collect::<Vec<_>>(),
            (1..=300).collect::<Vec<u64>>(),
            "{durable}"
        );
    }
    assert_eq!(client.consumer_backlog(IN_STREAM, "first"), (0, 0));
    assert_eq!(client.consumer_backlog(IN_STREAM, "second"), (0, 0));
}

#[test]
fn an_input_stream_made_again_stores_the_outputs_of_its_new_messages() {
    let test = "an_input_stream_made_again_stores_the_outputs_of_its_new_messages";
    if !available(test) {
        return;
    }
    let server = NatsServer::start();
    let client = Client::connect(&server.url());
    client.create_stream(IN_STREAM, &[IN_SUBJECT]);
    let lines = tweets(200);
    client.publish(IN_SUBJECT, &lines[..100]);
    let temp = tempfile::tempdir().unwrap();
    let log = temp.path().join("worker.log");
    let mut child = worker(&server, &[], &log);
    wait_for(Duration::from_secs(20), "the first outputs", &log, || {
        client.count(OUT_STREAM) >= 100
    });
    // Deleted and made again under the running worker: sequences start at
    // 1 again, and the worker's outputs must not be taken for the old ones.
    client.delete_stream(IN_STREAM);
    client.create_stream(IN_STREAM, &[IN_SUBJECT]);
    client.publish(IN_SUBJECT, &lines[100..]);
    wait_for(Duration::from_secs(30), "the new outputs", &log, || {
        client.count(OUT_STREAM) >= 200
    });
    stops_cleanly(&mut child, &log);
    let outputs = outputs(&client);
    assert_eq!(outputs.len(), 200);
    let (first, _) = source_of(&outputs[0]);
    let (again, _) = source_of(&outputs[100]);
    assert_ne!(first, again, "the ids name the stream's incarnation");
    assert_eq!(by_sequence(&outputs[100..]).len(), 100);
    for (output, line) in outputs[100..].iter().zip(&lines[100..]) {
        is_tagged(line, &output.payload);
    }
    assert_eq!(client.consumer_backlog(IN_STREAM, "dedup"), (0, 0));
}

/// Regression (issue 36): with more messages in flight than the consumer
/// lets wait unacknowledged (`max_ack_pending`), the server held back the
/// next pull without answering it, and the worker waited 10 s a fetch
/// instead of acknowledging what it held. A durable that lets 100 wait,
/// batches of 64 at the default depth: the worker keeps one batch in
/// flight, and the 2,000 come out within 60 s, each once.
#[test]
fn a_worker_keeps_in_flight_what_the_consumers_max_ack_pending_allows() {
    let test = "a_worker_keeps_in_flight_what_the_consumers_max_ack_pending_allows";
    if !available(test) {
        return;
    }
    let server = NatsServer::start();
    let client = Client::connect(&server.url());
    client.create_stream(IN_STREAM, &[IN_SUBJECT]);
    client.create_consumer_holding(IN_STREAM, "dedup", IN_SUBJECT, Duration::from_secs(2), 100);
    let lines = tweets(2_000);
    client.publish(IN_SUBJECT, &lines);
    let temp = tempfile::tempdir().unwrap();
    let log = temp.path().join("worker.log");
    let mut child = worker_of(&server, "dedup", &[], &["--batch", "64"], &log);
    wait_for(Duration::from_secs(60), "every output", &log, || {
        by_sequence(&outputs(&client)).len() >= lines.len()
    });
    stops_cleanly(&mut child, &log);
    let outputs = outputs(&client);
    assert_eq!(outputs.len(), lines.len(), "one output per input");
    let stderr = std::fs::read_to_string(&log).unwrap();
    assert!(stderr.contains("1 batches in flight"), "{stderr}");
    assert!(!stderr.contains("no answer to a fetch"), "{stderr}");
}

#[test]
fn two_workers_of_one_durable_share_its_max_ack_pending_without_stalling() {
    let test = "two_workers_of_one_durable_share_its_max_ack_pending_without_stalling";
    if !available(test) {
        return;
    }
    let server = NatsServer::start();
    let client = Client::connect(&server.url());
    client.create_stream(IN_STREAM, &[IN_SUBJECT]);
    client.create_consumer_holding(IN_STREAM, "dedup", IN_SUBJECT, Duration::from_secs(2), 100);
    let lines = tweets(3_000);
    client.publish(IN_SUBJECT, &lines);
    let temp = tempfile::tempdir().unwrap();
    let logs = [temp.path().join("a.log"), temp.path().join("b.log")];
    // Each keeps 3 batches of 32 in flight (what 100 lets one worker
    // have): together they ask for more than the server lets wait.
    let options = ["--batch", "32", "--in-flight", "4"];
    let mut workers: Vec<Child> = logs
        .iter()
        .map(|log| worker_of(&server, "dedup", &[], &options, log))
        .collect();
    wait_for(Duration::from_secs(90), "every output", &logs[0], || {
        by_sequence(&outputs(&client)).len() >= lines.len()
    });
    for (child, log) in workers.iter_mut().zip(&logs) {
        stops_cleanly(child, log);
    }
    let mut redelivered = 0;
    for log in &logs {
        let stderr = std::fs::read_to_string(log).unwrap();
        assert!(stderr.contains("3 batches in flight"), "{stderr}");
        // Held back by the server is not an outage.
        assert!(!stderr.contains("NATS failed while fetching"), "{stderr}");
        let summary = stderr.lines().last().unwrap_or("");
        eprintln!("a worker: {summary}");
        redelivered += summary
            .split_once(" redelivered")
            .and_then(|(head, _)| head.rsplit('(').next()?.parse::<usize>().ok())
            .unwrap_or_else(|| panic!("a summary: {summary}"));
    }
    assert_eq!(by_sequence(&outputs(&client)).len(), lines.len());
    // A worker blocked on a pull the server held back left its batches in
    // flight unacknowledged past the ack wait: nearly every message was
    // delivered twice (2,848 and 2,852 of 3,000 in two runs before; 95 to
    // 402 with such pulls dropped after 1 s; none with them kept).
    assert!(
        redelivered < lines.len() / 4,
        "{redelivered} of {} delivered again",
        lines.len()
    );
}

#[test]
fn a_missing_durable_is_waited_for_unless_create_is_given() {
    let test = "a_missing_durable_is_waited_for_unless_create_is_given";
    if !available(test) {
        return;
    }
    let server = NatsServer::start();
    let client = Client::connect(&server.url());
    client.create_stream(IN_STREAM, &[IN_SUBJECT]);
    let lines = tweets(50);
    client.publish(IN_SUBJECT, &lines);
    let temp = tempfile::tempdir().unwrap();
    let log = temp.path().join("worker.log");
    let mut child = worker_of(&server, "dedpu", &[], &[], &log);
    wait_for(Duration::from_secs(20), "the warning", &log, || {
        std::fs::read_to_string(&log).is_ok_and(|l| {
            l.contains(r#"the durable consumer "dedpu" does not exist on stream "tweets""#)
                && l.contains("--create")
        })
    });
    std::thread::sleep(Duration::from_secs(2));
    assert!(!client.has_consumer(IN_STREAM, "dedpu"), "not created");
    assert_eq!(client.count(OUT_STREAM), 0, "nothing read");
    // Stopped while waiting: a clean exit, nothing read.
    stops_cleanly(&mut child, &log);

    // Made by its operator, the durable is found and read.
    let log = temp.path().join("again.log");
    let mut child = worker_of(&server, "dedup", &[], &[], &log);
    wait_for(Duration::from_secs(20), "the warning", &log, || {
        std::fs::read_to_string(&log).is_ok_and(|l| l.contains("does not exist"))
    });
    client.create_consumer(IN_STREAM, "dedup", IN_SUBJECT, Duration::from_secs(2));
    wait_for(Duration::from_secs(20), "every output", &log, || {
        client.count(OUT_STREAM) >= 50
    });
    stops_cleanly(&mut child, &log);
    let stderr = std::fs::read_to_string(&log).unwrap();
    assert!(
        stderr.contains("the durable consumer exists now"),
        "{stderr}"
    );
    assert!(!stderr.contains("created the durable consumer"), "{stderr}");
    assert_eq!(by_sequence(&outputs(&client)).len(), 50);
}

#[test]
fn an_output_over_its_streams_max_msg_size_is_dead_lettered_without_its_bytes() {
    let test = "an_output_over_its_streams_max_msg_size_is_dead_lettered_without_its_bytes";
    if !available(test) {
        return;
    }
    let server = NatsServer::start();
    let client = Client::connect(&server.url());
    client.create_stream(IN_STREAM, &[IN_SUBJECT]);
    // The output stream takes messages of 1,000 bytes at most: the server
    // refuses a longer one with error 10054, every time it is sent.
    client
        .runtime
        .block_on(
            client
                .js
                .create_stream(async_nats::jetstream::stream::Config {
                    name: OUT_STREAM.into(),
                    subjects: vec![OUT_SUBJECT.into(), DEAD_SUBJECT.into()],
                    max_message_size: 1000,
                    ..Default::default()
                }),
        )
        .expect("the output stream");
    let long = format!(
        r#"{{"id_str":"2","text":"Long report {}"}}"#,
        "word ".repeat(190)
    );
    assert!(long.len() > 980 && long.len() < 1000, "{}", long.len());
    let small = tweets(2);
    let inputs = vec![small[0].clone(), long.into_bytes(), small[1].clone()];
    client.publish(IN_SUBJECT, &inputs);
    let temp = tempfile::tempdir().unwrap();
    let log = temp.path().join("worker.log");
    let mut child = worker(&server, &[], &log);
    wait_for(
        Duration::from_secs(20),
        "every message handled",
        &log,
        || client.read(OUT_STREAM).len() >= 3,
    );
    let status = terminate(&mut child);
    let stderr = std::fs::read_to_string(&log).unwrap();
    assert!(status.success(), "{stderr}");
    assert!(stderr.contains("1 outputs too large to store"), "{stderr}");
    let all = client.read(OUT_STREAM);
    assert_eq!(all.len(), 3, "{all:?}");
    let dead: Vec<&Stored> = all.iter().filter(|m| m.subject == DEAD_SUBJECT).collect();
    assert_eq!(dead.len(), 1);
    assert!(dead[0].payload.is_empty());
    assert_eq!(dead[0].header("Dedup-Source"), Some("tweets.2"));
    let reason = dead[0].header("Dedup-Error").unwrap_or_default();
    assert!(
        reason.contains("refused") && reason.contains("size"),
        "{reason}"
    );
    assert_eq!(outputs(&client).len(), 2);
    assert_eq!(client.consumer_backlog(IN_STREAM, "dedup"), (0, 0));
}

/// A fetch asks for 16 MiB at most (so a batch of large messages is
/// bounded in memory): 24 messages of about 800 KB, more than one fetch's
/// bytes with `--batch 64`, all come out tagged, none left behind by a
/// fetch too small for it.
#[test]
fn messages_larger_together_than_a_fetchs_bytes_all_come_out() {
    let test = "messages_larger_together_than_a_fetchs_bytes_all_come_out";
    if !available(test) {
        return;
    }
    let server = NatsServer::start();
    let client = Client::connect(&server.url());
    client.create_stream(IN_STREAM, &[IN_SUBJECT]);
    let inputs: Vec<Vec<u8>> = (0..24)
        .map(|i| {
            format!(
                r#"{{"id_str":"{}","text":"Report {i} {}"}}"#,
                i + 1,
                format!("part{i} ").repeat(900_000 / 7)
            )
            .into_bytes()
        })
        .collect();
    assert!(inputs.iter().map(Vec::len).sum::<usize>() > 16 << 20);
    client.publish(IN_SUBJECT, &inputs);
    let temp = tempfile::tempdir().unwrap();
    let log = temp.path().join("worker.log");
    let mut child = worker(&server, &["--batch", "64"], &log);
    wait_for(
        Duration::from_secs(60),
        "every large message out",
        &log,
        || client.read(OUT_STREAM).len() >= inputs.len(),
    );
    stops_cleanly(&mut child, &log);
    // A batch's outputs are published together: matched by sequence.
    let tagged = by_sequence(&outputs(&client));
    assert_eq!(tagged.len(), inputs.len());
    for (sequence, input) in (1..).zip(&inputs) {
        let output = &tagged[&sequence];
        // Not `is_tagged`: it would print megabytes.
        assert!(
            output.len() > input.len() && output.starts_with(&input[..input.len() - 1]),
            "input {sequence} is not in its output"
        );
    }
    assert_eq!(client.consumer_backlog(IN_STREAM, "dedup"), (0, 0));
}

/// The benchmarks' relay (`--relay`) publishes every message on as it
/// came, malformed ones too, under the same ids, and acknowledges it.
#[test]
fn the_relay_publishes_every_message_on_untagged_and_acknowledges_it() {
    if !available("the_relay_publishes_every_message_on_untagged_and_acknowledges_it") {
        return;
    }
    let server = NatsServer::start();
    let client = Client::connect(&server.url());
    let mut inputs = tweets(300);
    inputs.insert(7, b"not json at all".to_vec());
    client.create_stream(IN_STREAM, &[IN_SUBJECT]);
    client.publish(IN_SUBJECT, &inputs);
    let temp = tempfile::tempdir().unwrap();
    let log = temp.path().join("worker.log");
    let mut child = worker(&server, &["--relay", "--batch", "32"], &log);
    wait_for(
        Duration::from_secs(20),
        "every message relayed",
        &log,
        || client.count(OUT_STREAM) >= inputs.len() as u64,
    );
    stops_cleanly(&mut child, &log);
    let outputs = outputs(&client);
    assert_eq!(outputs.len(), inputs.len());
    for (sequence, payload) in by_sequence(&outputs) {
        assert_eq!(payload, inputs[sequence as usize - 1], "message {sequence}");
    }
    assert_eq!(client.consumer_backlog(IN_STREAM, "dedup"), (0, 0));
}

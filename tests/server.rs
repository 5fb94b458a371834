//! The sidecar, end to end: a real server on 127.0.0.1:0 and on a Unix
//! socket in a temporary directory, real clients; the real binary for
//! signals and state files.

mod common;

use common::served::Served;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use dedup_stream::server::{self, ListenAddr, Listeners, Reply, ServerConfig};
use dedup_stream::{Deduper, EngineConfig, Error};

type Reader = BufReader<Box<dyn AsyncRead + Unpin + Send>>;
type Writer = Box<dyn AsyncWrite + Unpin + Send>;

/// A server running in this process.
struct TestServer {
    tcp: ListenAddr,
    unix: ListenAddr,
    admin: std::net::SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    handle: JoinHandle<Result<Deduper, Error>>,
    _dir: tempfile::TempDir,
}

impl TestServer {
    async fn start(config: ServerConfig) -> TestServer {
        TestServer::start_with(config, EngineConfig::default()).await
    }

    async fn start_with(config: ServerConfig, engine: EngineConfig) -> TestServer {
        let dir = tempfile::tempdir().unwrap();
        let tcp = ListenAddr::Tcp("127.0.0.1:0".parse().unwrap())
            .bind()
            .await
            .unwrap();
        let unix = ListenAddr::Unix(dir.path().join("dedup.sock"))
            .bind()
            .await
            .unwrap();
        let admin = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let (tcp_addr, unix_addr) = (tcp.local_addr(), unix.local_addr());
        let admin_addr = admin.local_addr().unwrap();
        let (stop, stopped) = oneshot::channel::<()>();
        let deduper = Deduper::new(engine).unwrap();
        let listeners = Listeners {
            data: vec![tcp, unix],
            admin: Some(admin),
            ..Listeners::default()
        };
        let handle = tokio::spawn(server::run(
            config,
            deduper.preparer().clone(),
            deduper,
            listeners,
            async {
                let _ = stopped.await;
            },
        ));
        TestServer {
            tcp: tcp_addr,
            unix: unix_addr,
            admin: admin_addr,
            stop: Some(stop),
            handle,
            _dir: dir,
        }
    }

    /// Address `i` alternates between TCP and the Unix socket.
    fn addr(&self, i: usize) -> &ListenAddr {
        if i.is_multiple_of(2) {
            &self.tcp
        } else {
            &self.unix
        }
    }

    async fn stop(mut self) -> Deduper {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        tokio::time::timeout(Duration::from_secs(20), self.handle)
            .await
            .expect("the server stops in time")
            .unwrap()
            .unwrap()
    }
}

async fn connect(addr: &ListenAddr) -> (Reader, Writer) {
    match addr {
        ListenAddr::Tcp(addr) => {
            let (r, w) = tokio::net::TcpStream::connect(addr)
                .await
                .unwrap()
                .into_split();
            (BufReader::new(Box::new(r)), Box::new(w))
        }
        ListenAddr::Unix(path) => {
            let (r, w) = tokio::net::UnixStream::connect(path)
                .await
                .unwrap()
                .into_split();
            (BufReader::new(Box::new(r)), Box::new(w))
        }
    }
}

/// Reads one reply line as JSON; `None` at the end of the stream.
async fn reply(reader: &mut Reader) -> Option<Value> {
    let mut line = String::new();
    let n = tokio::time::timeout(Duration::from_secs(20), reader.read_line(&mut line))
        .await
        .expect("a reply in time")
        .unwrap();
    if n == 0 {
        return None;
    }
    assert!(line.ends_with('\n'), "a whole line: {line:?}");
    Some(serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line:?}")))
}

/// Sends `lines` while reading as many replies (pipelined).
async fn exchange(addr: &ListenAddr, lines: Vec<String>) -> Vec<Value> {
    let (mut reader, mut writer) = connect(addr).await;
    let n = lines.len();
    let send = tokio::spawn(async move {
        for line in lines {
            writer.write_all(line.as_bytes()).await.unwrap();
        }
        writer.flush().await.unwrap();
        writer
    });
    let mut replies = Vec::with_capacity(n);
    for _ in 0..n {
        replies.push(reply(&mut reader).await.expect("one reply per line"));
    }
    drop(send.await.unwrap());
    replies
}

fn message(id: &str, text: &str) -> String {
    format!("{}\n", json!({"id_str": id, "text": text}))
}

/// A sentence of `n` pseudo-random words, different for every seed.
fn sentence(seed: u64, n: usize) -> String {
    const SYLLABLES: [&str; 16] = [
        "ka", "lo", "mi", "ne", "ru", "sa", "to", "vi", "ze", "po", "da", "fe", "gu", "hi", "jo",
        "be",
    ];
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut words = Vec::with_capacity(n);
    for _ in 0..n {
        let mut word = String::new();
        for _ in 0..4 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            word.push_str(SYLLABLES[(x % 16) as usize]);
        }
        words.push(word);
    }
    words.join(" ")
}

fn quick_config() -> ServerConfig {
    ServerConfig {
        state: None,
        ..ServerConfig::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_clients_get_their_verdicts_in_order() {
    let server = TestServer::start(quick_config()).await;
    let clients = 16u64;
    let per_client = 300u64;
    let mut tasks = Vec::new();
    for c in 0..clients {
        // Message i of client c; every fifth repeats the one before it.
        let lines: Vec<String> = (0..per_client)
            .map(|i| {
                let id = format!("{c}-{i}");
                if i % 5 == 4 {
                    message(&id, &format!("RT @x: {}", sentence(c * 1000 + i - 1, 12)))
                } else {
                    message(&id, &sentence(c * 1000 + i, 12))
                }
            })
            .collect();
        let addr = server.addr(c as usize).clone();
        tasks.push(tokio::spawn(
            async move { (c, exchange(&addr, lines).await) },
        ));
    }
    for task in tasks {
        let (c, replies) = task.await.unwrap();
        for (i, reply) in replies.iter().enumerate() {
            let i = i as u64;
            assert_eq!(reply["id_str"], format!("{c}-{i}"), "order on client {c}");
            if i % 5 == 4 {
                assert_eq!(
                    reply["dedup"],
                    json!({
                        "status": "duplicate",
                        "duplicate_of": format!("{c}-{}", i - 1),
                        "similarity": 1,
                        "cluster": format!("{c}-{}", i - 1),
                    }),
                    "client {c} message {i}"
                );
            } else {
                assert_eq!(
                    reply["dedup"],
                    json!({"status": "new"}),
                    "client {c} message {i}"
                );
            }
        }
    }
    let deduper = server.stop().await;
    assert_eq!(deduper.index().len() as u64, clients * per_client * 4 / 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_duplicate_across_connections_is_found_and_queries_leave_no_trace() {
    let server = TestServer::start(quick_config()).await;
    let story = "Flooding has closed the coastal highway north of the city tonight, police say";
    let a = exchange(&server.tcp, vec![message("1", story)]).await;
    assert_eq!(a[0]["dedup"], json!({"status": "new"}));
    let b = exchange(
        &server.unix,
        vec![message("2", &format!("RT @police: {story}"))],
    )
    .await;
    assert_eq!(
        b[0]["dedup"],
        json!({"status": "duplicate", "duplicate_of": "1", "similarity": 1, "cluster": "1"})
    );
    // A query finds the duplicate but indexes nothing.
    let other = "The bakery on fifth street reopens on Monday with a brand new menu";
    let query = |id: &str, text: &str| {
        format!(
            "{}\n",
            json!({"id_str": id, "text": text, "dedup_op": "query"})
        )
    };
    let q = exchange(
        &server.tcp,
        vec![query("3", story), query("4", other), query("5", other)],
    )
    .await;
    assert_eq!(q[0]["dedup"]["duplicate_of"], "1");
    assert_eq!(q[1]["dedup"], json!({"status": "new"}));
    assert_eq!(
        q[2]["dedup"],
        json!({"status": "new"}),
        "the query did not index"
    );
    assert_eq!(q[1]["dedup_op"], "query", "the message comes back whole");
    let c = exchange(&server.unix, vec![message("6", other)]).await;
    assert_eq!(c[0]["dedup"], json!({"status": "new"}));
    let deduper = server.stop().await;
    assert_eq!(deduper.index().len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_a_window_the_sidecar_forgets_what_is_older() {
    let server = TestServer::start_with(
        quick_config(),
        EngineConfig {
            window: "1h".parse().ok(),
            ..EngineConfig::default()
        },
    )
    .await;
    let story = "Flooding has closed the coastal highway north of the city tonight, police say";
    let timed = |id: &str, text: &str, at: &str| {
        format!(
            "{}\n",
            json!({"id_str": id, "text": text, "created_at": at})
        )
    };
    let replies = exchange(
        &server.tcp,
        vec![
            timed("1", story, "2018-10-10T20:00:00Z"),
            timed("2", &format!("{story}!"), "2018-10-10T20:59:00Z"),
            timed(
                "3",
                "an unrelated message about a bake sale today",
                "2018-10-10T22:00:00Z",
            ),
            timed("4", story, "2018-10-10T22:01:00Z"),
        ],
    )
    .await;
    let statuses: Vec<&Value> = replies.iter().map(|r| &r["dedup"]["status"]).collect();
    assert_eq!(statuses, ["new", "duplicate", "new", "new"], "{replies:?}");
    let deduper = server.stop().await;
    assert_eq!(deduper.index().len(), 2, "1 expired; 3 and 4 are indexed");
    assert_eq!(deduper.index().evictions(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_line_gets_an_error_and_the_connection_goes_on() {
    let server = TestServer::start(ServerConfig {
        max_line_bytes: 1000,
        ..quick_config()
    })
    .await;
    let lines = vec![
        message("1", "a perfectly good first message about the weather"),
        "not json\n".to_string(),
        "\n".to_string(),
        format!("{}\n", json!({"id_str": "x", "text": "y".repeat(2000)})),
        "[1,2,3]\n".to_string(),
        "{\"id_str\":\"3\"}\n".to_string(),
        format!(
            "{}\n",
            json!({"id_str": "4", "text": "z", "dedup_op": "insert"})
        ),
        "{\"id_str\":\"5\",\"text\":\"caf\u{e9}\"\r\n".to_string(),
        message("6", "a perfectly good first message about the weather"),
    ];
    // Line 3 is blank: no reply, but it is counted.
    let replies = {
        let (mut reader, mut writer) = connect(&server.unix).await;
        for line in &lines {
            writer.write_all(line.as_bytes()).await.unwrap();
        }
        writer.shutdown().await.unwrap();
        let mut replies = Vec::new();
        while let Some(r) = reply(&mut reader).await {
            replies.push(r);
        }
        replies
    };
    assert_eq!(replies.len(), 8, "{replies:#?}");
    assert_eq!(replies[0]["dedup"], json!({"status": "new"}));
    let errors: Vec<(u64, String)> = replies[1..7]
        .iter()
        .map(|r| {
            (
                r["line"].as_u64().unwrap(),
                r["error"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let expect = [
        (2, "not valid JSON"),
        (4, "longer than the limit of 1000 bytes"),
        (5, "not a JSON object"),
        (6, "no text field"),
        (7, "dedup_op must be"),
        (8, "not valid JSON"),
    ];
    for ((line, error), (want_line, want)) in errors.iter().zip(expect) {
        assert_eq!(*line, want_line, "{error}");
        assert!(error.contains(want), "line {line}: {error}");
    }
    assert_eq!(replies[7]["dedup"]["duplicate_of"], "1");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verdict_replies_carry_only_the_id_and_the_verdict() {
    let server = TestServer::start(ServerConfig {
        reply: Reply::Verdict,
        ..quick_config()
    })
    .await;
    let text = "Keynote starts now at the conference, come see the new borrow checker";
    let replies = exchange(
        &server.tcp,
        vec![
            "{\"id\":12345678901234567890,\"text\":\"x y z\",\"other\":[1,2]}\n".to_string(),
            message("a", text),
            format!("{}\n", json!({"id": 7, "text": text})),
        ],
    )
    .await;
    assert_eq!(
        replies[0],
        json!({"id": 12345678901234567890u64, "dedup": {"status": "new"}})
    );
    assert_eq!(replies[1], json!({"id": "a", "dedup": {"status": "new"}}));
    assert_eq!(
        replies[2],
        json!({"id": 7, "dedup": {"status": "duplicate", "duplicate_of": "a", "similarity": 1, "cluster": "a"}})
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_client_stalls_nobody_and_is_not_buffered() {
    let server = TestServer::start(ServerConfig {
        drain_timeout: Duration::from_millis(500),
        ..quick_config()
    })
    .await;
    // The stalled client writes 256 MB and never reads a reply.
    let chunk: Vec<u8> = (0..10_000)
        .map(|i| message(&format!("s{i}"), &sentence(i, 10)))
        .collect::<String>()
        .into_bytes();
    let total = 256 * 1024 * 1024;
    let written = Arc::new(AtomicU64::new(0));
    let (_stalled_reader, mut stalled_writer) = connect(&server.tcp).await;
    let stalled = {
        let written = Arc::clone(&written);
        tokio::spawn(async move {
            while written.load(Ordering::Relaxed) < total {
                if stalled_writer.write_all(&chunk).await.is_err() {
                    return;
                }
                written.fetch_add(chunk.len() as u64, Ordering::Relaxed);
            }
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    // Meanwhile, another client does a hundred round trips, one at a time.
    let started = Instant::now();
    let (mut reader, mut writer) = connect(&server.unix).await;
    for i in 0..100 {
        writer
            .write_all(message(&format!("f{i}"), &sentence(1_000_000 + i, 10)).as_bytes())
            .await
            .unwrap();
        let r = reply(&mut reader).await.unwrap();
        assert_eq!(r["id_str"], format!("f{i}"));
    }
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "the fast client took {:?}",
        started.elapsed()
    );
    // The server stopped reading the stalled client: what it managed to
    // write is what fits in socket buffers and the bounded queues.
    // (It settles within moments; the deadline is for a loaded machine.)
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut last = written.load(Ordering::Relaxed);
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let now = written.load(Ordering::Relaxed);
        if now == last {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the stalled client is still read: {now} bytes"
        );
        last = now;
    }
    assert!(last < 64 * 1024 * 1024, "{last} bytes taken in");
    assert!(!stalled.is_finished());
    // Shutdown does not wait for it beyond the drain timeout.
    let started = Instant::now();
    server.stop().await;
    assert!(started.elapsed() < Duration::from_secs(5));
    stalled.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_over_the_limit_are_told_and_closed() {
    let server = TestServer::start(ServerConfig {
        max_connections: 2,
        ..quick_config()
    })
    .await;
    let first = connect(&server.tcp).await;
    let second = connect(&server.unix).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let (mut reader, _writer) = connect(&server.tcp).await;
    let refused = reply(&mut reader).await.unwrap();
    assert!(
        refused["error"]
            .as_str()
            .unwrap()
            .contains("too many connections"),
        "{refused}"
    );
    assert!(reply(&mut reader).await.is_none(), "then closed");
    drop((first, second));
    tokio::time::sleep(Duration::from_millis(100)).await;
    let ok = exchange(&server.tcp, vec![message("1", "room again")]).await;
    assert_eq!(ok[0]["dedup"]["status"], "new");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_are_closed() {
    let server = TestServer::start(ServerConfig {
        idle_timeout: Some(Duration::from_millis(300)),
        ..quick_config()
    })
    .await;
    let (mut reader, mut writer) = connect(&server.unix).await;
    writer
        .write_all(message("1", "hello there").as_bytes())
        .await
        .unwrap();
    assert!(reply(&mut reader).await.is_some());
    let started = Instant::now();
    assert!(reply(&mut reader).await.is_none(), "closed when idle");
    assert!(started.elapsed() >= Duration::from_millis(250));
    server.stop().await;
}

async fn http_get(addr: std::net::SocketAddr, path: &str) -> String {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream
        .write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    response
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_endpoint_reports_health_and_metrics() {
    let server = TestServer::start(quick_config()).await;
    let health = http_get(server.admin, "/healthz").await;
    assert!(health.starts_with("HTTP/1.1 200 OK\r\n"), "{health}");
    assert!(health.ends_with("\r\n\r\nok\n"));
    let text = "Flooding has closed the coastal highway north of the city tonight";
    exchange(
        &server.tcp,
        vec![
            message("1", text),
            message("2", text),
            "bad\n".to_string(),
            format!("{}\n", json!({"id": 3, "text": text, "dedup_op": "query"})),
            format!("{}\n", json!({"id": 1, "dedup_op": "remove"})),
            format!(
                "{}\n",
                json!({"delete": {"status": {"id": 1, "user_id": 5}}})
            ),
            message("4", text),
        ],
    )
    .await;
    let metrics = http_get(server.admin, "/metrics").await;
    assert!(metrics.contains("Content-Type: text/plain; version=0.0.4"));
    for expected in [
        "dedup_messages_total{op=\"check\",verdict=\"new\"} 2\n",
        "dedup_messages_total{op=\"check\",verdict=\"duplicate\"} 1\n",
        "dedup_messages_total{op=\"query\",verdict=\"duplicate\"} 1\n",
        "dedup_messages_total{op=\"remove\",verdict=\"held\"} 1\n",
        "dedup_messages_total{op=\"remove\",verdict=\"unknown\"} 1\n",
        "dedup_invalid_lines_total 1\n",
        "dedup_index_entries 1\n",
        "dedup_index_capacity 1000000\n",
        "dedup_evictions_total 0\n",
        "dedup_connections_total 1\n",
        "dedup_check_duration_seconds_count 7\n",
        "# TYPE dedup_check_duration_seconds histogram\n",
    ] {
        assert!(metrics.contains(expected), "{expected} in\n{metrics}");
    }
    assert!(
        http_get(server.admin, "/nope")
            .await
            .starts_with("HTTP/1.1 404")
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_answers_every_line_received_then_closes() {
    let server = TestServer::start(quick_config()).await;
    let (mut reader, mut writer) = connect(&server.tcp).await;
    let lines: String = (0..20_000)
        .map(|i| message(&i.to_string(), &sentence(i, 10)))
        .collect();
    let send = tokio::spawn(async move {
        let _ = writer.write_all(lines.as_bytes()).await;
        writer
    });
    // Shut down once replies are flowing.
    let first = reply(&mut reader).await.unwrap();
    assert_eq!(first["id_str"], "0");
    let stop = tokio::spawn(server.stop());
    let mut n = 1u64;
    while let Some(r) = reply(&mut reader).await {
        assert_eq!(r["id_str"], n.to_string(), "in order, none lost");
        n += 1;
    }
    let deduper = stop.await.unwrap();
    // Everything answered was decided, and nothing decided went unanswered.
    assert_eq!(deduper.index().len() as u64, n);
    drop(send.await.unwrap());
}

// ---- The binary: signals and state files ----

const STORY: &str = "Flooding has closed the coastal highway north of the city tonight, police say";

fn unix(path: &Path) -> (String, ListenAddr) {
    (
        format!("unix:{}", path.display()),
        ListenAddr::Unix(path.to_path_buf()),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_drains_saves_and_exits_zero() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state.bin");
    let mut served = Served::start(&[
        "--listen",
        "127.0.0.1:0",
        "--state",
        state.to_str().unwrap(),
    ]);
    let addr = served.tcp_addr();
    let (mut reader, mut writer) = connect(&addr).await;
    let lines: String = (0..5_000)
        .map(|i| message(&i.to_string(), &sentence(i, 10)))
        .collect();
    writer.write_all(lines.as_bytes()).await.unwrap();
    writer.flush().await.unwrap();
    let first = reply(&mut reader).await.unwrap();
    assert_eq!(first["id_str"], "0");
    // Everything was sent: once a reply came back the server holds it
    // all in its buffers or the socket's. SIGTERM now.
    tokio::time::sleep(Duration::from_millis(50)).await;
    served.signal("TERM");
    let mut n = 1;
    while let Some(r) = reply(&mut reader).await {
        assert_eq!(r["id_str"], n.to_string());
        n += 1;
    }
    let (status, log) = tokio::task::spawn_blocking(move || served.wait())
        .await
        .unwrap();
    assert_eq!(status.code(), Some(0), "{log:#?}");
    assert!(log.iter().any(|l| l.contains("state saved")), "{log:#?}");
    // The saved index holds exactly the messages that were answered.
    let mut deduper = Deduper::new(EngineConfig::default()).unwrap();
    let loaded = dedup_stream::state::snapshot::load(&state, &mut deduper).unwrap();
    assert_eq!(loaded, dedup_stream::state::snapshot::Loaded::Restored(n));
    // No temporary file left behind; the journal holds nothing the state
    // file does not (its header only).
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 2);
    let journal = dir.path().join("state.bin.journal");
    assert_eq!(std::fs::metadata(&journal).unwrap().len(), 32);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_with_state_finds_duplicates_of_earlier_messages() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state.bin");
    let (listen, addr) = unix(&dir.path().join("s.sock"));
    let args = ["--listen", &listen, "--state", state.to_str().unwrap()];

    let mut first = Served::start(&args);
    first.wait_for("listening");
    let r = exchange(&addr, vec![message("100", STORY)]).await;
    assert_eq!(r[0]["dedup"]["status"], "new");
    first.signal("TERM");
    let (status, log) = tokio::task::spawn_blocking(move || first.wait())
        .await
        .unwrap();
    assert_eq!(status.code(), Some(0), "{log:#?}");
    assert!(!dir.path().join("s.sock").exists(), "socket file removed");

    let mut second = Served::start(&args);
    second.wait_for("listening");
    assert!(second.log.iter().any(|l| l.contains("state loaded")));
    let r = exchange(&addr, vec![message("200", &format!("RT @police: {STORY}"))]).await;
    assert_eq!(
        r[0]["dedup"],
        json!({"status": "duplicate", "duplicate_of": "100", "similarity": 1, "cluster": "100"})
    );
    // SIGINT drains and saves too, and is a clean stop (exit status 0).
    second.signal("INT");
    let (status, _) = tokio::task::spawn_blocking(move || second.wait())
        .await
        .unwrap();
    assert_eq!(status.code(), Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn periodic_snapshots_are_written_while_serving() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state.bin");
    let (listen, addr) = unix(&dir.path().join("s.sock"));
    let mut served = Served::start(&[
        "--listen",
        &listen,
        "--state",
        state.to_str().unwrap(),
        "--snapshot-interval",
        "200ms",
    ]);
    served.wait_for("listening");
    exchange(&addr, vec![message("1", STORY)]).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let mut deduper = Deduper::new(EngineConfig::default()).unwrap();
        if let Ok(dedup_stream::state::snapshot::Loaded::Restored(1)) =
            dedup_stream::state::snapshot::load(&state, &mut deduper)
        {
            break;
        }
        assert!(Instant::now() < deadline, "no snapshot written");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Killed hard, the last snapshot is still whole.
    drop(served);
    let mut deduper = Deduper::new(EngineConfig::default()).unwrap();
    assert!(dedup_stream::state::snapshot::load(&state, &mut deduper).is_ok());
}

fn write_state(path: &Path) {
    let mut deduper = Deduper::new(EngineConfig::default()).unwrap();
    deduper.check_text(dedup_stream::MessageId::Integer(1), STORY);
    dedup_stream::state::snapshot::save(path, &deduper).unwrap();
}

#[test]
fn a_corrupt_state_file_is_refused_and_left_as_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state.bin");
    write_state(&state);
    let mut bytes = std::fs::read(&state).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x10;
    std::fs::write(&state, &bytes).unwrap();
    let sock = dir.path().join("s.sock");
    let listen = format!("unix:{}", sock.display());

    let served = Served::start(&["--listen", &listen, "--state", state.to_str().unwrap()]);
    let (status, log) = served.wait();
    assert_eq!(status.code(), Some(1), "{log:#?}");
    let log = log.join("\n");
    assert!(
        log.contains("state.bin") && log.contains("corrupt"),
        "{log}"
    );
    assert!(log.contains("--fresh-state"), "{log}");
    assert_eq!(std::fs::read(&state).unwrap(), bytes, "left untouched");

    // The filter refuses it the same way.
    let output = common::run(
        &["--state", state.to_str().unwrap()],
        message("1", STORY).as_bytes(),
    );
    assert_eq!(output.status.code(), Some(1));
    assert!(output.stdout.is_empty());
    assert_eq!(std::fs::read(&state).unwrap(), bytes, "left untouched");

    // An incompatible one too, with the reason.
    write_state(&state);
    let good = std::fs::read(&state).unwrap();
    let output = common::run(
        &["--state", state.to_str().unwrap(), "--shingle", "chars:5"],
        message("1", STORY).as_bytes(),
    );
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("words:1-2") && stderr.contains("chars:5"),
        "{stderr}"
    );
    assert_eq!(std::fs::read(&state).unwrap(), good);

    // Unless the operator asks to start empty.
    std::fs::write(&state, &bytes).unwrap();
    let output = common::run(
        &[
            "--state",
            state.to_str().unwrap(),
            "--fresh-state",
            "--quiet",
        ],
        message("1", STORY).as_bytes(),
    );
    assert_eq!(output.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&output.stderr).contains("starting empty"));
    let mut deduper = Deduper::new(EngineConfig::default()).unwrap();
    assert!(dedup_stream::state::snapshot::load(&state, &mut deduper).is_ok());
}

#[test]
fn the_filter_picks_up_where_yesterday_stopped() {
    let dir = tempfile::tempdir().unwrap();
    let state: PathBuf = dir.path().join("nightly.state");
    let state_arg = state.to_str().unwrap();
    let yesterday = [message("1", STORY), message("2", &sentence(7, 12))].concat();
    let output = common::run(&["--state", state_arg, "--quiet"], yesterday.as_bytes());
    assert!(output.status.success());
    assert_eq!(
        common::verdicts(&output),
        vec![json!({"status": "new"}), json!({"status": "new"})]
    );
    assert!(state.exists());

    let today = [
        message("3", &format!("RT @police: {STORY}")),
        message("4", &sentence(8, 12)),
        message("5", &sentence(7, 12)),
    ]
    .concat();
    let output = common::run(&["--state", state_arg, "--quiet"], today.as_bytes());
    assert!(output.status.success());
    let v = common::verdicts(&output);
    assert_eq!(v[0]["duplicate_of"], "1");
    assert_eq!(v[1], json!({"status": "new"}));
    assert_eq!(v[2]["duplicate_of"], "2");

    // And the server reads the filter's state.
    let mut deduper = Deduper::new(EngineConfig::default()).unwrap();
    assert_eq!(
        dedup_stream::state::snapshot::load(&state, &mut deduper).unwrap(),
        dedup_stream::state::snapshot::Loaded::Restored(3)
    );
}

/// Deletions through the sidecar: `"dedup_op":"remove"` and the notices
/// (v1.1 and v2) forget their id, answered `{"status":"deleted","held":…}`;
/// the journal keeps the removals, so a `kill -9` does not bring a deleted
/// message back; and the state file saved at the end is without it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn removals_and_deletion_notices_are_honoured_and_survive_a_kill() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state.bin");
    let (listen, addr) = unix(&dir.path().join("s.sock"));
    let args = ["--listen", &listen, "--state", state.to_str().unwrap()];
    let mut first = Served::start(&args);
    first.wait_for("listening");
    let r = exchange(
        &addr,
        vec![
            message("100", STORY),
            message("101", &format!("{STORY}, more soon")),
            "{\"dedup_op\":\"remove\",\"id_str\":\"100\"}\n".into(),
            "{\"delete\":{\"status\":{\"id\":7,\"id_str\":\"7\",\"user_id\":1,\"user_id_str\":\"1\"},\"timestamp_ms\":\"1\"}}\n".into(),
            "{\"dedup_op\":\"remove\"}\n".into(),
            message("102", STORY),
            "{\"data\":{\"delete\":{\"tweet\":{\"id\":\"101\",\"author_id\":\"1\"},\"event_at\":\"2022-12-23T12:34:56.789Z\"}}}\n".into(),
        ],
    )
    .await;
    assert_eq!(r[0]["dedup"]["status"], "new");
    assert_eq!(r[1]["dedup"]["duplicate_of"], "100");
    assert_eq!(r[2]["dedup"], json!({"status": "deleted", "held": true}));
    assert_eq!(r[2]["dedup_op"], "remove", "the line comes back tagged");
    assert_eq!(r[3]["dedup"], json!({"status": "deleted", "held": false}));
    assert!(
        r[4]["error"].as_str().unwrap().contains("no id field"),
        "{}",
        r[4]
    );
    // 100 is gone: its copy is decided against what is left of its
    // cluster (101), whose name stays 100.
    assert_eq!(
        r[5]["dedup"],
        json!({"status": "duplicate", "duplicate_of": "101", "similarity": 1, "cluster": "100"})
    );
    assert_eq!(r[6]["dedup"], json!({"status": "deleted", "held": true}));
    // Killed before any save: the journal alone carries the removals.
    first.signal("KILL");
    let _ = tokio::task::spawn_blocking(move || first.wait()).await;
    let mut second = Served::start(&args);
    second.wait_for("listening");
    let r = exchange(&addr, vec![message("103", STORY)]).await;
    // 102 was indexed (100's set had gone); 100 itself, the earliest of
    // equals, would be named had its removal been lost.
    assert_eq!(
        r[0]["dedup"],
        json!({"status": "duplicate", "duplicate_of": "102", "similarity": 1, "cluster": "100"}),
        "100 and 101 stay deleted"
    );
    second.signal("TERM");
    let (status, log) = tokio::task::spawn_blocking(move || second.wait())
        .await
        .unwrap();
    assert_eq!(status.code(), Some(0), "{log:#?}");
    let mut deduper = Deduper::new(EngineConfig::default()).unwrap();
    dedup_stream::state::snapshot::load(&state, &mut deduper).unwrap();
    let ids: Vec<String> = deduper
        .index()
        .iter_lru_first()
        .map(|e| e.id.to_string())
        .collect();
    assert_eq!(ids, ["\"102\""], "the deleted ids are absent once saved");
}

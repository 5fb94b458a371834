//! Hardening regressions (issue 14), each named after the defect it pins,
//! run through the real binary or a real server.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use common::served::Served;
use common::{run, stdout_lines, verdicts};
use dedup_stream::state::snapshot::{self, Loaded};
use dedup_stream::{Deduper, EngineConfig};

/// Polls `done` every 50 ms until it holds, failing after a generous
/// deadline (a bound on a hang, not a timing assertion).
async fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !done() {
        assert!(Instant::now() < deadline, "never happened: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Sends lines on a Unix socket and reads one reply line per line.
async fn exchange_unix(path: &Path, lines: &str) -> Vec<String> {
    let stream = tokio::net::UnixStream::connect(path).await.unwrap();
    let (r, mut w) = stream.into_split();
    w.write_all(lines.as_bytes()).await.unwrap();
    let mut reader = BufReader::new(r).lines();
    let mut replies = Vec::new();
    for _ in 0..lines.lines().count() {
        let line = tokio::time::timeout(Duration::from_secs(30), reader.next_line())
            .await
            .expect("a reply in time")
            .unwrap()
            .expect("one reply per line");
        replies.push(line);
    }
    replies
}

/// How many entries the state file at `path` holds, if it loads.
fn state_entries(path: &Path) -> Option<usize> {
    let mut deduper = Deduper::new(EngineConfig::default()).unwrap();
    match snapshot::load(path, &mut deduper) {
        Ok(Loaded::Restored(n)) => Some(n),
        _ => None,
    }
}

#[test]
fn lone_surrogate_escape_is_tagged_and_passed_through_unchanged() {
    let input = concat!(
        r#"{"id":1,"text":"\ud83d cut off at the limit of the old client"}"#,
        "\n",
        r#"{"id":2,"text":"\ud83d cut off at the limit of the old client"}"#,
        "\n",
    );
    let output = run(&[], input.as_bytes());
    assert!(output.status.success());
    let lines = stdout_lines(&output);
    assert_eq!(
        lines.len(),
        2,
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    // The bytes of the line, escape included, come back as they were.
    assert!(
        lines[0].starts_with(
            r#"{"id":1,"text":"\ud83d cut off at the limit of the old client","dedup":"#
        ),
        "{}",
        lines[0]
    );
    // serde_json refuses the lone surrogate the line carries: read the tag
    // on its own.
    let v: Vec<serde_json::Value> = lines.iter().map(|l| tag(l)).collect();
    assert_eq!(v[0]["status"], "new");
    assert_eq!(v[1]["status"], "duplicate");
    assert_eq!(v[1]["duplicate_of"], 1);
}

/// The `dedup` member spliced at the end of an output line.
fn tag(line: &str) -> serde_json::Value {
    let at = line.rfind(",\"dedup\":").expect("a tag") + ",\"dedup\":".len();
    serde_json::from_str(&line[at..line.len() - 1]).expect("the tag is JSON")
}

#[test]
fn lone_surrogate_in_a_key_is_refused_naming_the_surrogate() {
    let output = run(&[], b"{\"\\ud83d\":1,\"id\":1,\"text\":\"a\"}\n");
    assert!(stdout_lines(&output).is_empty());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("line 1"), "{stderr}");
    assert!(stderr.contains("surrogate"), "{stderr}");
}

#[test]
fn duplicate_keys_take_the_last_occurrence() {
    let input = concat!(
        r#"{"id":"d0","text":"bridge repairs close the northern lane all week"}"#,
        "\n",
        r#"{"id":"d1","id":"d2","text":"bridge repairs close the northern lane all week","text":"an entirely different story about the harbour festival"}"#,
        "\n",
        r#"{"id":"d3","text":"an entirely different story about the harbour festival"}"#,
        "\n",
    );
    let output = run(&[], input.as_bytes());
    let v = verdicts(&output);
    assert_eq!(v.len(), 3);
    // Judged by its last text (new, not a copy of d0) ...
    assert_eq!(v[1]["status"], "new");
    // ... and indexed under its last id.
    assert_eq!(v[2]["status"], "duplicate");
    assert_eq!(v[2]["duplicate_of"], "d2");
    // The line itself passes through with both occurrences.
    assert!(stdout_lines(&output)[1].starts_with(r#"{"id":"d1","id":"d2","#));
}

/// A PID no process has: a child that has exited and been waited for.
fn dead_pid() -> u32 {
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let pid = child.id();
    child.wait().unwrap();
    pid
}

#[cfg(target_os = "linux")]
#[test]
fn kill_9_during_save_leaves_no_temporary_forever() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("s.state");
    // What a save killed mid-way leaves: a big temporary nobody removes.
    let orphan = dir.path().join(format!(".s.state.tmp-{}-3", dead_pid()));
    std::fs::write(&orphan, vec![0u8; 1 << 20]).unwrap();
    let unrelated = dir.path().join(".notes.tmp-1-1");
    std::fs::write(&unrelated, b"not ours").unwrap();
    let output = run(
        &["--state", state.to_str().unwrap()],
        b"{\"id\":1,\"text\":\"a\"}\n",
    );
    assert!(output.status.success());
    assert!(!orphan.exists(), "the orphan was removed at start");
    assert!(unrelated.exists(), "other files are left alone");
    assert!(state.exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_periodic_save_is_retried_while_no_message_arrives() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("s.state");
    let socket = dir.path().join("s.sock");
    let mut served = Served::start(&[
        "--listen",
        &format!("unix:{}", socket.display()),
        "--state",
        state.to_str().unwrap(),
        "--snapshot-interval",
        "200ms",
    ]);
    served.wait_for("listening");
    // Saving cannot succeed while a directory (not empty) stands where the
    // state file goes: the rename fails, whoever runs the test (root
    // ignores a read-only directory).
    std::fs::create_dir(&state).unwrap();
    std::fs::write(state.join("blocker"), b"x").unwrap();
    let replies = exchange_unix(&socket, "{\"id\":1,\"text\":\"the one message\"}\n").await;
    assert!(replies[0].contains("\"new\""), "{replies:?}");
    served.wait_for("saving the state failed; will retry");
    // The way is clear again; no message arrives from now on.
    std::fs::remove_dir_all(&state).unwrap();
    eventually("the snapshot is written", || {
        state_entries(&state) == Some(1)
    })
    .await;
    // No temporary file left behind by the failed attempts.
    let mut names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(
        names,
        ["s.sock", "s.state", "s.state.journal"],
        "{:#?}",
        served.drain_log()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slowloris_line_trickled_byte_by_byte_is_cut_off_by_the_line_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("s.sock");
    let mut served = Served::start(&[
        "--listen",
        &format!("unix:{}", socket.display()),
        "--max-connections",
        "1",
        "--line-timeout",
        "300ms",
    ]);
    served.wait_for("listening");
    let stream = tokio::net::UnixStream::connect(&socket).await.unwrap();
    let (r, mut w) = stream.into_split();
    w.write_all(b"{\"id\":1,\"text\":\"a whole line first\"}\n{\"id\":2,")
        .await
        .unwrap();
    // One byte every 50 ms, for ever: never idle, never a whole line.
    let trickle = tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_millis(50)).await;
            if w.write_all(b" ").await.is_err() {
                return;
            }
        }
    });
    let mut reader = BufReader::new(r).lines();
    let mut next = async || {
        tokio::time::timeout(Duration::from_secs(30), reader.next_line())
            .await
            .expect("no hang")
            .unwrap()
    };
    let first = next().await.unwrap();
    assert!(first.contains("\"new\""), "{first}");
    let error: serde_json::Value = serde_json::from_str(&next().await.unwrap()).unwrap();
    assert!(
        error["error"].as_str().unwrap().contains("line timeout"),
        "{error}"
    );
    assert_eq!(error["line"], 2);
    // Closed after the error line: an end of stream, or a reset when the
    // server closed with trickled bytes it had not read (Linux resets a
    // Unix socket closed with unread data, once what was sent is read).
    let after = tokio::time::timeout(Duration::from_secs(30), reader.next_line())
        .await
        .expect("no hang");
    match after {
        Ok(None) => {}
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
        other => panic!("not closed after the error line: {other:?}"),
    }
    trickle.abort();
    // Its slot (the only one) is freed for the next client: once the
    // connection's task has ended, which may be a moment after the client
    // saw the socket close, so the next client may have to try again.
    // A client turned away may also find the socket closed before it has
    // written its line (a broken pipe): that is a try again too.
    let mut replies = Vec::new();
    for _ in 0..50 {
        let line = "{\"id\":3,\"text\":\"next client\"}\n";
        let stream = tokio::net::UnixStream::connect(&socket).await.unwrap();
        let (r, mut w) = stream.into_split();
        if w.write_all(line.as_bytes()).await.is_ok()
            && let Ok(Ok(Some(reply))) = tokio::time::timeout(
                Duration::from_secs(30),
                BufReader::new(r).lines().next_line(),
            )
            .await
        {
            replies = vec![reply];
            if !replies[0].contains("too many connections") {
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        replies.first().is_some_and(|r| r.contains("\"new\"")),
        "{replies:?}"
    );
}

/// One HTTP request on a new connection; the whole response.
async fn http_get(addr: std::net::SocketAddr, path: &str) -> String {
    use tokio::io::AsyncReadExt;
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream
        .write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut response = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(30), stream.read_to_end(&mut response))
        .await
        .expect("no hang");
    // A connection closed unanswered may be reset: that is no response.
    if read.is_err() {
        return String::new();
    }
    String::from_utf8(response).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_endpoint_starvation_by_silent_connections() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("s.sock");
    let mut served = Served::start(&[
        "--listen",
        &format!("unix:{}", socket.display()),
        "--max-connections",
        "2",
        "--admin",
        "127.0.0.1:0",
    ]);
    let line = served.wait_for("admin endpoint listening");
    let admin: std::net::SocketAddr = line
        .rsplit("address=")
        .next()
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    served.wait_for("listening address=unix:");
    // Data clients fill every slot and then some, sending nothing.
    let mut silent = Vec::new();
    for _ in 0..4 {
        silent.push(tokio::net::UnixStream::connect(&socket).await.unwrap());
    }
    // And more admin connections than the admin limit, sending nothing.
    let mut silent_admin = Vec::new();
    for _ in 0..(dedup_stream::server::admin::MAX_ADMIN_CONNECTIONS * 2 + 8) {
        silent_admin.push(tokio::net::TcpStream::connect(admin).await.unwrap());
    }
    for _ in 0..3 {
        let health = http_get(admin, "/healthz").await;
        assert!(health.starts_with("HTTP/1.1 200 OK\r\n"), "{health:?}");
    }
    let metrics = http_get(admin, "/metrics").await;
    assert!(
        metrics.contains("dedup_connections_rejected_total"),
        "{metrics}"
    );
    drop((silent, silent_admin));
}

/// The soft open-files limit of a running process.
#[cfg(target_os = "linux")]
fn soft_open_files(pid: u32) -> u64 {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap();
    line.split_whitespace().nth(3).unwrap().parse().unwrap()
}

#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_descriptors_a_low_soft_limit_is_raised_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("s.sock");
    let listen = format!("unix:{}", socket.display());
    let mut served = Served::start_with_ulimit("-Sn 100", &["--listen", &listen]);
    served.wait_for("raised the open-files limit");
    served.wait_for("listening");
    let wanted =
        dedup_stream::server::DEFAULT_MAX_CONNECTIONS + dedup_stream::server::RESERVED_DESCRIPTORS;
    assert!(soft_open_files(served.child.id()) >= wanted as u64);
}

#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_descriptors_a_low_hard_limit_lowers_max_connections() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("s.sock");
    let listen = format!("unix:{}", socket.display());
    let reserved = dedup_stream::server::RESERVED_DESCRIPTORS;
    let limit = reserved + 5;
    let mut served = Served::start_with_ulimit(&format!("-n {limit}"), &["--listen", &listen]);
    let warning = served.wait_for("lowering --max-connections");
    assert!(warning.contains("max_connections=5"), "{warning}");
    served.wait_for("listening");
    // Five clients are served; the sixth is told the limit, not left
    // waiting in the backlog.
    let mut held = Vec::new();
    for i in 0..5 {
        let stream = tokio::net::UnixStream::connect(&socket).await.unwrap();
        let (r, mut w) = stream.into_split();
        w.write_all(format!("{{\"id\":{i},\"text\":\"client {i}\"}}\n").as_bytes())
            .await
            .unwrap();
        let mut lines = BufReader::new(r).lines();
        let reply = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
            .await
            .expect("no hang")
            .unwrap()
            .unwrap();
        assert!(reply.contains("\"dedup\""), "{reply}");
        held.push((lines, w));
    }
    let stream = tokio::net::UnixStream::connect(&socket).await.unwrap();
    let mut lines = BufReader::new(stream).lines();
    let refused = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
        .await
        .expect("no hang")
        .unwrap()
        .unwrap();
    assert!(
        refused.contains("too many connections (the limit is 5)"),
        "{refused}"
    );
    drop(held);
}

/// A text of `n` distinct made-up words.
fn long_text(seed: u64, n: usize) -> String {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            format!("w{:x}", x % 1_000_000_007)
        })
        .collect::<Vec<_>>()
        .join(" ")
}

#[test]
fn memory_of_one_long_message_is_capped_and_copies_still_match() {
    use dedup_stream::engine::shingle::MAX_SHINGLES;
    let text = long_text(14, 20 * MAX_SHINGLES);
    let half: String = text[..text.len() / 2].to_string();
    let other = long_text(15, 20 * MAX_SHINGLES);
    // In the index: at most MAX_SHINGLES shingles for the long message.
    let mut deduper = Deduper::new(EngineConfig::default()).unwrap();
    deduper.check_text(dedup_stream::MessageId::Integer(1), &text);
    let entry = deduper.index().iter_lru_first().next().unwrap();
    assert_eq!(entry.shingles().len(), MAX_SHINGLES);
    // Through the binary: a copy, its first half (contained) and an
    // unrelated long text.
    let input: String = [(1, &text), (2, &text), (3, &half), (4, &other)]
        .iter()
        .map(|(id, t)| format!("{}\n", serde_json::json!({"id": id, "text": t})))
        .collect();
    let output = run(&["--measure", "containment"], input.as_bytes());
    let v = verdicts(&output);
    assert_eq!(v[0]["status"], "new");
    assert_eq!(v[1]["duplicate_of"], 1);
    assert_eq!(v[1]["similarity"], 1);
    assert_eq!(v[2]["duplicate_of"], 1, "{:?}", v[2]);
    assert_eq!(v[3]["status"], "new");
}

/// The temporary files beside a state file, and the PIDs in their names.
fn temporaries(dir: &Path, state_name: &str) -> Vec<(String, u32)> {
    let prefix = format!(".{state_name}.tmp-");
    std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().into_string().unwrap();
            let pid = name
                .strip_prefix(&prefix)?
                .split('-')
                .next()?
                .parse()
                .ok()?;
            Some((name, pid))
        })
        .collect()
}

#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_at_random_moments_of_saves_loses_no_snapshot_and_leaves_no_orphan() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("s.state");
    let socket = dir.path().join("s.sock");
    let listen = format!("unix:{}", socket.display());
    let args = [
        "--listen",
        &listen,
        "--state",
        state.to_str().unwrap(),
        "--snapshot-interval",
        "10ms",
    ];
    // A pseudo-random pause before each kill, different every round.
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let mut sent = 0u64;
    let mut last_loaded = 0;
    for round in 0..20 {
        let mut served = Served::start(&args);
        served.wait_for("listening");
        // Whatever the last run left, only this process's own temporaries
        // may be there now (it may be saving already).
        let pid = served.child.id();
        for (name, owner) in temporaries(dir.path(), "s.state") {
            assert_eq!(
                owner, pid,
                "round {round}: orphan {name} survived a restart"
            );
        }
        // The state it loaded is whole, and never older than the one
        // before.
        if let Some(n) = state_entries(&state) {
            assert!(n >= last_loaded, "round {round}: {n} < {last_loaded}");
            last_loaded = n;
        }
        let lines: String = (sent..sent + 300)
            .map(|i| format!("{{\"id\":{i},\"text\":\"{}\"}}\n", long_text(i, 12)))
            .collect();
        sent += 300;
        exchange_unix(&socket, &lines).await;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        tokio::time::sleep(Duration::from_millis(x % 60)).await;
        // SIGKILL, wherever the periodic save is.
        drop(served);
        assert!(state_entries(&state).is_some() || !state.exists());
    }
    assert!(last_loaded > 0, "some snapshot was written and loaded");
}

/// A tmpfs of `size` mounted on a directory of the test's own; unmounted
/// when dropped.
struct SmallDisk {
    dir: tempfile::TempDir,
}

impl SmallDisk {
    /// The reason when it cannot be made (not root, or a sandbox that
    /// refuses mounts).
    fn mount(size: &str) -> Result<SmallDisk, String> {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .output()
            .map_err(|e| format!("mount: {e}"))?;
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stderr).trim().to_string());
        }
        Ok(SmallDisk { dir })
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Fills what is left of it with one file; returns the file.
    fn fill(&self) -> std::path::PathBuf {
        use std::io::Write;
        let filler = self.path().join("filler");
        let mut file = std::fs::File::create(&filler).unwrap();
        let block = vec![0u8; 4096];
        while file.write_all(&block).is_ok() {}
        let _ = file.sync_all();
        filler
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.dir.path()).status();
    }
}

/// A full disk at save time: a clear error naming the file and the cause,
/// the previous state file untouched (it still loads, with what it held),
/// and no temporary left behind.
#[test]
fn full_disk_at_save_time_keeps_the_previous_state_file() {
    let test = "full_disk_at_save_time_keeps_the_previous_state_file";
    let disk = match SmallDisk::mount("1m") {
        Ok(disk) => disk,
        Err(why) => {
            common::skipped(test, &format!("cannot mount a small tmpfs ({why})"));
            return;
        }
    };
    let state = disk.path().join("s.state");
    let state_arg = state.to_str().unwrap();
    let message = |id: usize| {
        format!(
            "{{\"id\":{id},\"text\":\"message {id} says w{} w{} w{} w{} w{} w{} and more\"}}\n",
            id * 7,
            id * 11,
            id * 13,
            id * 17,
            id * 19,
            id * 23
        )
    };
    let first: String = (0..50).map(message).collect();
    let saved = run(&["--quiet", "--state", state_arg], first.as_bytes());
    assert!(saved.status.success());
    let before = std::fs::read(&state).unwrap();

    let filler = disk.fill();
    let more: String = (1_000..21_000).map(message).collect();
    let failed = run(&["--quiet", "--state", state_arg], more.as_bytes());
    assert_eq!(failed.status.code(), Some(1), "the save fails");
    let stderr = String::from_utf8_lossy(&failed.stderr);
    assert!(stderr.contains(state_arg), "names the file: {stderr}");
    assert!(
        stderr.to_lowercase().contains("space"),
        "names the cause: {stderr}"
    );
    assert_eq!(
        stdout_lines(&failed).len(),
        20_000,
        "the run itself answered every line"
    );
    assert_eq!(
        std::fs::read(&state).unwrap(),
        before,
        "the previous state file is untouched"
    );
    assert!(
        temporaries(disk.path(), "s.state").is_empty(),
        "no temporary left"
    );

    std::fs::remove_file(filler).unwrap();
    let again = run(&["--quiet", "--state", state_arg], first.as_bytes());
    assert!(again.status.success());
    assert!(
        verdicts(&again).iter().all(|v| v["repeat"] == true),
        "the previous state loads, with what it held: each message a repeat"
    );
}

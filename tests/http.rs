//! `serve --listen-http` from the outside: the real binary, driven by
//! `curl` (and, in `python_clients`, Python's `requests` and `httpx`, and
//! schemathesis against the OpenAPI document), compared with the line
//! protocol of a server started alike.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::served::Served;

/// A server with the line protocol and HTTP on free loopback ports.
fn start(extra: &[&str]) -> (Served, String, String) {
    let mut args = vec!["--listen", "127.0.0.1:0", "--listen-http", "127.0.0.1:0"];
    args.extend_from_slice(extra);
    let mut served = Served::start(&args);
    let tcp = served.tcp_addr().to_string();
    let line = served.wait_for("HTTP listening http=");
    let http = line.rsplit("http=").next().unwrap().trim().to_string();
    (served, tcp, format!("http://{http}"))
}

/// What curl received: the status, the headers (lower-cased) and the body.
struct Got {
    status: u16,
    headers: String,
    body: Vec<u8>,
    stderr: String,
}

impl Got {
    fn text(&self) -> String {
        String::from_utf8(self.body.clone()).expect("UTF-8 body")
    }

    fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).expect("a JSON body")
    }
}

/// Runs curl with `args`, feeding `body` on stdin (`--data-binary @-`).
fn curl(args: &[&str], body: Option<&[u8]>) -> Got {
    let mut command = Command::new("curl");
    // No "Expect: 100-continue" pause before large bodies.
    command.args(["-sS", "-D", "-", "-H", "Expect:"]).args(args);
    if body.is_some() {
        command.args(["--data-binary", "@-"]);
    }
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("curl runs");
    let mut stdin = child.stdin.take().unwrap();
    let input = body.unwrap_or_default().to_vec();
    let feeder = std::thread::spawn(move || {
        let _ = stdin.write_all(&input);
    });
    let out = child.wait_with_output().unwrap();
    feeder.join().unwrap();
    assert!(
        out.status.success(),
        "curl failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // With keep-alive, several responses follow one another: the last one.
    let raw = out.stdout;
    let mut at = 0;
    let mut last = None;
    while let Some(i) = find(&raw[at..], b"\r\n\r\n") {
        let head = String::from_utf8_lossy(&raw[at..at + i]).to_lowercase();
        if !head.starts_with("http/") {
            break;
        }
        last = Some((at, at + i + 4));
        let length = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length: "))
            .and_then(|n| n.trim().parse::<usize>().ok());
        match length {
            Some(n) if at + i + 4 + n < raw.len() => at = at + i + 4 + n,
            _ => break,
        }
    }
    let (head_start, body_start) = last.expect("a response head");
    let headers = String::from_utf8_lossy(&raw[head_start..body_start]).to_lowercase();
    let status = headers.split_whitespace().nth(1).unwrap().parse().unwrap();
    Got {
        status,
        headers,
        body: raw[body_start..].to_vec(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// Sends `lines` over the line protocol and reads every reply.
fn line_protocol(addr: &str, lines: &[u8]) -> Vec<u8> {
    let mut stream = TcpStream::connect(addr).unwrap();
    let mut writer = stream.try_clone().unwrap();
    let input = lines.to_vec();
    let feeder = std::thread::spawn(move || {
        writer.write_all(&input).unwrap();
        writer.shutdown(std::net::Shutdown::Write).unwrap();
    });
    let mut out = Vec::new();
    stream.read_to_end(&mut out).unwrap();
    feeder.join().unwrap();
    out
}

/// 3,000 synthetic tweets (with their near-duplicates), the bad lines'
/// fixture, blank lines, a query and a removal: every kind of reply.
fn mixed_input() -> Vec<u8> {
    let gz = std::fs::File::open(common::fixture("synthetic/dev.jsonl.gz")).unwrap();
    let mut text = String::new();
    flate2::read::GzDecoder::new(gz)
        .read_to_string(&mut text)
        .unwrap();
    let mut input: Vec<u8> = Vec::new();
    for line in text.lines().take(3000) {
        input.extend_from_slice(line.as_bytes());
        input.push(b'\n');
    }
    input.extend(std::fs::read(common::fixture("bad_lines.jsonl")).unwrap());
    input.extend_from_slice(b"\n   \n");
    input.extend_from_slice(
        br#"{"id_str":"q1","text":"Flooding closes the coastal highway tonight","dedup_op":"query"}"#,
    );
    input.extend_from_slice(b"\n{\"dedup_op\":\"remove\",\"id_str\":\"q1\"}\r\nnot json");
    input
}

#[test]
fn http_answers_byte_for_byte_what_the_line_protocol_answers() {
    let input = mixed_input();
    let (_a, tcp, _) = start(&[]);
    let expected = line_protocol(&tcp, &input);
    assert!(expected.len() > input.len(), "every line answered");
    let expected_lines = expected.split(|&b| b == b'\n').count();
    assert!(expected_lines > 3000, "{expected_lines}");

    let (_b, _, http) = start(&[]);
    let got = curl(
        &[
            "-H",
            "Content-Type: application/x-ndjson",
            &format!("{http}/v1/check"),
        ],
        Some(&input),
    );
    assert_eq!(got.status, 200);
    assert!(got.headers.contains("content-type: application/x-ndjson"));
    assert!(
        got.body == expected,
        "HTTP/1.1 differs from the line protocol"
    );

    let (_c, _, http) = start(&[]);
    let got = curl(
        &["--http2-prior-knowledge", &format!("{http}/v1/check")],
        Some(&input),
    );
    assert!(got.headers.starts_with("http/2 200"), "{}", got.headers);
    assert!(
        got.body == expected,
        "HTTP/2 differs from the line protocol"
    );
    let text = got.text();
    assert!(text.contains(r#""status":"duplicate""#));
    assert!(text.contains(r#"{"error":"not valid JSON"#));
}

#[test]
fn a_json_array_is_answered_by_an_array_of_the_same_replies() {
    let (_a, tcp, _) = start(&[]);
    let messages = [
        r#"{"id_str":"1","text":"Flooding closes the coastal highway tonight"}"#,
        "{\n  \"id_str\": \"2\",\n  \"text\": \"RT @news: Flooding closes the coastal highway tonight\"\n}",
        r#""not an object""#,
    ];
    let ndjson: String = messages
        .iter()
        .map(|m| format!("{}\n", m.replace('\n', " ")))
        .collect();
    let expected = String::from_utf8(line_protocol(&tcp, ndjson.as_bytes())).unwrap();
    let (_b, _, http) = start(&[]);
    let array = format!("[{}]", messages.join(",\n"));
    let got = curl(
        &[
            "-H",
            "Content-Type: application/json",
            &format!("{http}/v1/check"),
        ],
        Some(array.as_bytes()),
    );
    assert_eq!(got.status, 200);
    assert_eq!(
        got.text(),
        format!("[{}]\n", expected.trim_end().replace('\n', ","))
    );
    let replies = got.json();
    assert_eq!(replies[1]["dedup"]["status"], "duplicate");
    assert_eq!(replies[2]["line"], 3);
    // Not an array: refused as a whole.
    let got = curl(
        &[
            "-H",
            "Content-Type: application/json",
            &format!("{http}/v1/check"),
        ],
        Some(b"{\"id\":1}"),
    );
    assert_eq!(got.status, 400);
    assert!(got.json()["error"].as_str().unwrap().contains("JSON array"));
}

#[test]
fn query_asks_without_indexing_and_delete_forgets() {
    let (_s, _, http) = start(&[]);
    let story = r#"{"id_str":"1","text":"Flooding closes the coastal highway tonight"}"#;
    let retweet =
        r#"{"id_str":"2","text":"RT @news: Flooding closes the coastal highway tonight"}"#;
    let status = |got: &Got| -> Vec<String> {
        got.text()
            .lines()
            .map(|l| {
                let v: serde_json::Value = serde_json::from_str(l).unwrap();
                v["dedup"]["status"]
                    .as_str()
                    .map_or_else(|| format!("error: {}", v["error"]), str::to_string)
            })
            .collect()
    };
    let post = |path: &str, body: &str| curl(&[&format!("{http}{path}")], Some(body.as_bytes()));
    // Asked twice: nothing indexed, so new both times.
    let got = post("/v1/query", &format!("{story}\n{story}\n"));
    assert_eq!(status(&got), ["new", "new"]);
    assert_eq!(status(&post("/v1/check", story)), ["new"]);
    assert_eq!(status(&post("/v1/query", retweet)), ["duplicate"]);
    // A removal is not a question.
    let got = post("/v1/query", r#"{"dedup_op":"remove","id_str":"1"}"#);
    assert!(got.text().contains("/v1/query"), "{}", got.text());
    assert!(got.text().contains(r#""line":1"#));

    let got = curl(&["-X", "DELETE", &format!("{http}/v1/messages/1")], None);
    assert_eq!(got.status, 200);
    assert_eq!(
        got.json()["dedup"],
        serde_json::json!({"status":"deleted","held":true})
    );
    let got = curl(&["-X", "DELETE", &format!("{http}/v1/messages/1")], None);
    assert_eq!(got.json()["dedup"]["held"], false);
    assert_eq!(status(&post("/v1/query", retweet)), ["new"]);
}

#[test]
fn limits_are_answered_413_503_or_in_place() {
    let (_s, _, http) = start(&[
        "--http-max-body-bytes",
        "2000",
        "--http-max-lines",
        "3",
        "--http-max-requests",
        "1",
    ]);
    let line =
        |i: usize| format!("{{\"id_str\":\"{i}\",\"text\":\"message number {i} of the batch\"}}\n");
    let check = format!("{http}/v1/check");
    // Declared too large: 413 before anything is read.
    let big: String = (0..60).map(line).collect();
    let got = curl(&[&check], Some(big.as_bytes()));
    assert_eq!(got.status, 413);
    assert!(got.json()["error"].as_str().unwrap().contains("2000 bytes"));
    // Streamed (chunked) past the limit: answered up to there, then one
    // error line; here the line limit comes first.
    let five: String = (0..5).map(line).collect();
    let got = curl(
        &["-H", "Transfer-Encoding: chunked", &check],
        Some(five.as_bytes()),
    );
    assert_eq!(got.status, 200);
    let lines: Vec<serde_json::Value> = got
        .text()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 4, "{}", got.text());
    assert_eq!(lines[3]["line"], 4);
    assert!(
        lines[3]["error"]
            .as_str()
            .unwrap()
            .contains("limit of 3 lines")
    );
    // The byte limit reached while streaming.
    let long: String = (0..2)
        .map(|i| {
            format!(
                "{{\"id_str\":\"{i}\",\"text\":\"{}\"}}\n",
                "word ".repeat(250)
            )
        })
        .collect();
    let got = curl(
        &["-H", "Transfer-Encoding: chunked", &check],
        Some(long.as_bytes()),
    );
    let text = got.text();
    assert!(text.contains("limit of 2000 bytes"), "{text}");
    // A second request while one is open: 503 with Retry-After.
    let host = http.trim_start_matches("http://");
    let mut open = TcpStream::connect(host).unwrap();
    write!(
        open,
        "POST /v1/check HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
    )
    .unwrap();
    let first = line(1);
    write!(open, "{:x}\r\n{first}\r\n", first.len()).unwrap();
    open.flush().unwrap();
    // Its reply comes back while the request is still open.
    let mut reply = [0u8; 512];
    let n = open.read(&mut reply).unwrap();
    assert!(String::from_utf8_lossy(&reply[..n]).contains("200 OK"));
    let got = curl(&[&check], Some(line(2).as_bytes()));
    assert_eq!(got.status, 503);
    assert!(got.headers.contains("retry-after: 1"), "{}", got.headers);
    assert!(
        got.json()["error"]
            .as_str()
            .unwrap()
            .contains("the limit is 1")
    );
    // Both refusals are counted, and the requests taken.
    let metrics = curl(&[&format!("{http}/metrics")], None).text();
    assert!(
        metrics.contains("dedup_http_rejected_total 2\n"),
        "{metrics}"
    );
    assert!(
        metrics.contains("dedup_http_requests_total 4\n"),
        "{metrics}"
    );
    drop(open);
}

#[test]
fn compare_health_metrics_and_the_openapi_document() {
    let (_s, _, http) = start(&[]);
    let got = curl(
        &[
            "-G",
            "--data-urlencode",
            "a=Flooding closes the coastal highway tonight",
            "--data-urlencode",
            "b=RT @news: Flooding closes the coastal highway tonight",
            &format!("{http}/v1/compare"),
        ],
        None,
    );
    assert_eq!(got.status, 200);
    let c = got.json();
    assert_eq!(c["duplicate"], true);
    assert_eq!(c["similarity"], 1.0);
    let got = curl(
        &["-H", "Content-Type: application/json", &format!("{http}/v1/compare")],
        Some(br#"{"a":"Flooding closes the coastal highway tonight","b":"The bakery sells rye bread on Sundays"}"#),
    );
    assert_eq!(got.json()["duplicate"], false);
    assert_eq!(got.json()["rule"], "below_threshold");
    let got = curl(&[&format!("{http}/v1/compare")], None);
    assert_eq!(got.status, 400);

    // Two requests on one connection (keep-alive).
    let got = curl(
        &["-v", &format!("{http}/healthz"), &format!("{http}/metrics")],
        None,
    );
    assert_eq!(got.status, 200);
    assert!(got.text().contains("dedup_index_entries"));
    assert!(
        got.stderr.contains("Re-using existing connection"),
        "{}",
        got.stderr
    );

    let got = curl(&[&format!("{http}/openapi.json")], None);
    let file =
        std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/openapi.json")).unwrap();
    assert!(got.body == file, "the served document is docs/openapi.json");
    let got = curl(&[&format!("{http}/nowhere")], None);
    assert_eq!(got.status, 404);
    assert!(got.json()["error"].is_string());
}

/// The test's Python environment: `DEDUP_HTTP_VENV`, or `target/http-venv`
/// (made by .ci/run, or here when missing).
fn venv() -> Result<PathBuf, String> {
    let dir = match std::env::var_os("DEDUP_HTTP_VENV") {
        Some(dir) => PathBuf::from(dir),
        None => Path::new(env!("CARGO_TARGET_TMPDIR"))
            .parent()
            .unwrap()
            .join("http-venv"),
    };
    let python = dir.join("bin/python");
    let ready = |python: &Path| {
        Command::new(python)
            .args(["-c", "import requests, httpx, h2, schemathesis"])
            .status()
            .is_ok_and(|s| s.success())
    };
    if ready(&python) {
        return Ok(dir);
    }
    let made = Command::new("python3")
        .args(["-m", "venv"])
        .arg(&dir)
        .status()
        .is_ok_and(|s| s.success());
    if !made {
        return Err("python3 -m venv failed".into());
    }
    let installed = Command::new(&python)
        .args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
        ])
        .args(PYTHON_TOOLS)
        .status()
        .is_ok_and(|s| s.success());
    if installed && ready(&python) {
        Ok(dir)
    } else {
        Err(format!("pip could not install {}", PYTHON_TOOLS.join(", ")))
    }
}

/// What the Python clients' environment holds (.ci/run installs the same).
const PYTHON_TOOLS: &[&str] = &["requests>=2", "httpx[http2]>=0.27", "schemathesis>=3.30"];

#[test]
fn python_clients() {
    let dir = match venv() {
        Ok(dir) => dir,
        Err(reason) => {
            assert!(
                !std::env::var("DEDUP_REQUIRE_PYTHON").is_ok_and(|v| v == "1"),
                "the Python clients are required (DEDUP_REQUIRE_PYTHON=1): {reason}"
            );
            return common::skipped("http python_clients", &reason);
        }
    };
    let (_s, _, http) = start(&[]);
    let input = mixed_input();
    let (_l, line_tcp, _) = start(&[]);
    let expected = line_protocol(&line_tcp, &input);
    let scratch = tempfile::tempdir().unwrap();
    let input_path = scratch.path().join("input.jsonl");
    std::fs::write(&input_path, &input).unwrap();
    let expected_path = scratch.path().join("expected.jsonl");
    std::fs::write(&expected_path, &expected).unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/http_clients.py");
    let status = Command::new(dir.join("bin/python"))
        .arg(&script)
        .args([&http])
        .arg(&input_path)
        .arg(&expected_path)
        .status()
        .unwrap();
    assert!(status.success(), "tests/http_clients.py failed");

    // schemathesis: every operation of the document, generated requests;
    // it must find nothing (5xx, responses off the schema).
    let (_t, _, http) = start(&["--http-max-body-bytes", "65536"]);
    let tests_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests");
    let output = Command::new(dir.join("bin/schemathesis"))
        .args([
            "run",
            "--checks",
            "all",
            "--max-examples",
            "30",
            "--no-color",
        ])
        .args(["--url", &http])
        .arg(format!("{http}/openapi.json"))
        // How to send NDJSON bodies (tests/schemathesis_hooks.py).
        .env("PYTHONPATH", &tests_dir)
        .env("SCHEMATHESIS_HOOKS", "schemathesis_hooks")
        .current_dir(scratch.path())
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "schemathesis found problems:\n{report}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn shutdown_answers_what_an_open_request_sent() {
    let (served, _, http) = start(&["--drain-timeout", "5s", "-vv"]);
    let host = http.trim_start_matches("http://");
    let mut open = TcpStream::connect(host).unwrap();
    write!(
        open,
        "POST /v1/check HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
    )
    .unwrap();
    let lines = "{\"id_str\":\"1\",\"text\":\"Flooding closes the coastal highway tonight\"}\n\
                 {\"id_str\":\"2\",\"text\":\"RT @news: Flooding closes the coastal highway tonight\"}\n";
    write!(open, "{:x}\r\n{lines}\r\n", lines.len()).unwrap();
    open.flush().unwrap();
    let mut got = Vec::new();
    let mut chunk = [0u8; 4096];
    while got.windows(9).filter(|w| w == b"\"status\":").count() < 2 {
        let n = open.read(&mut chunk).unwrap();
        assert!(n > 0, "closed early: {}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&chunk[..n]);
    }
    // The request is still open when the server is told to stop: it is
    // ended cleanly (the chunked body's last chunk), and the server exits 0.
    let stopped = std::time::Instant::now();
    served.signal("TERM");
    let read = open.read_to_end(&mut got);
    let took = stopped.elapsed();
    // The server's log goes with every failure below: it tells a drained
    // stop ("shutting down") from a process killed by the signal itself,
    // which once cut this response short (see
    // `a_signal_the_moment_it_listens_drains_and_stops`).
    let (status, log) = served.wait();
    let text = String::from_utf8_lossy(&got);
    assert!(read.is_ok(), "{read:?} after {took:?}: {text}\n{log:#?}");
    assert!(
        text.ends_with("0\r\n\r\n"),
        "after {took:?}: {text}\n{log:#?}"
    );
    assert!(text.contains(r#""status":"duplicate""#), "{text}");
    assert!(status.success(), "{log:#?}");
}

#[test]
fn a_signal_the_moment_it_listens_drains_and_stops() {
    // SIGTERM is listened for before any listener is bound. It was once
    // listened for only once the server's loop first ran, after the
    // listeners (HTTP's already answering): a TERM then killed the
    // process outright, cutting off a response mid-body, in about half of
    // these tries.
    for _ in 0..10 {
        let (served, _, _) = start(&[]);
        served.signal("TERM");
        let (status, log) = served.wait();
        assert_eq!(status.code(), Some(0), "{status:?}: {log:#?}");
        assert!(log.iter().any(|l| l.contains("stopped")), "{log:#?}");
    }
}

#[test]
fn a_request_head_sent_too_slowly_is_cut_off() {
    let (_s, _, http) = start(&[]);
    let host = http.trim_start_matches("http://");
    let mut slow = TcpStream::connect(host).unwrap();
    slow.write_all(b"POST /v1/check HTTP/1.1\r\nHost: x\r\n")
        .unwrap();
    slow.set_read_timeout(Some(std::time::Duration::from_secs(30)))
        .unwrap();
    let started = std::time::Instant::now();
    // The head never ends: the server gives up after its head timeout
    // (10 s), well before this test's 30 s.
    let mut rest = Vec::new();
    let closed = slow.read_to_end(&mut rest);
    assert!(closed.is_ok(), "not closed by the server: {closed:?}");
    let waited = started.elapsed();
    assert!(
        waited >= std::time::Duration::from_secs(9) && waited < std::time::Duration::from_secs(25),
        "{waited:?}"
    );
    // And the server still answers others.
    let got = curl(&[&format!("{http}/healthz")], None);
    assert_eq!(got.status, 200);
}

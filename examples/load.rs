//! Load benchmark for `dedup-stream serve`: throughput and round-trip
//! latency over loopback.
//!
//! ```text
//! cargo build --release
//! cargo run --release --example load                       # starts target/release/dedup-stream
//! cargo run --release --example load -- --addr 127.0.0.1:7878   # or a running server
//! ```
//!
//! Scenarios, each bounded by `--seconds` (default 3) and `--messages`
//! (default 3,000,000 in total):
//!
//! - pipelined, over 1, 8 and 64 connections: each connection keeps up to
//!   `--window` messages (default 1024) in flight, written 64 at a time;
//!   the reported latency includes the time a message waits behind the
//!   others in its window;
//! - paced: 20,000 messages/s in total over 8 connections (`--rate`), each
//!   message written on its own and evenly spaced (connections staggered),
//!   as consumers asking per message would; a message's latency runs from
//!   its write to its reply.
//!
//! Besides throughput and latency it prints the CPU time the server (when it
//! started it) and the client spent per message, read from `/proc`: on a
//! shared machine that figure holds when the wall-clock ones do not.
//!
//! `--print N` writes the first N messages of the workload to stdout
//! instead, to compare with the filter on the same data.
//!
//! Messages are tweet-like JSON lines of 10 to 20 words (about 120 bytes):
//! four words in five drawn from 16,384 rare ones, one in five from 32
//! common ones ("the", "of"...); a third are retweets of one of the 64
//! messages before; every id is unique.
//! Only loopback addresses and Unix sockets are accepted: this is a
//! benchmark, not a load generator for other people's machines.

use std::collections::VecDeque;
use std::io::BufRead;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::Mutex;

/// Where the server is.
#[derive(Clone, Debug)]
enum Target {
    Tcp(SocketAddr),
    Unix(PathBuf),
}

/// The command line.
struct Options {
    target: Option<Target>,
    seconds: f64,
    messages: u64,
    window: usize,
    rate: u64,
    print: Option<u64>,
}

fn usage() -> ! {
    eprintln!(
        "usage: load [--addr IP:PORT|unix:PATH] [--seconds S] [--messages N] [--window N] [--rate MSG_PER_S] [--print N]"
    );
    std::process::exit(2)
}

fn options() -> Options {
    let mut options = Options {
        target: None,
        seconds: 3.0,
        messages: 3_000_000,
        window: 1024,
        rate: 20_000,
        print: None,
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args.next().unwrap_or_else(|| usage());
        match flag.as_str() {
            "--addr" => {
                options.target = Some(match value.strip_prefix("unix:") {
                    Some(path) => Target::Unix(PathBuf::from(path)),
                    None => {
                        let addr: SocketAddr = value.parse().unwrap_or_else(|_| usage());
                        if !addr.ip().is_loopback() {
                            eprintln!("load: only loopback addresses are accepted");
                            std::process::exit(2);
                        }
                        Target::Tcp(addr)
                    }
                })
            }
            "--seconds" => options.seconds = value.parse().unwrap_or_else(|_| usage()),
            "--messages" => options.messages = value.parse().unwrap_or_else(|_| usage()),
            "--window" => options.window = value.parse().unwrap_or_else(|_| usage()),
            "--rate" => options.rate = value.parse().unwrap_or_else(|_| usage()),
            "--print" => options.print = Some(value.parse().unwrap_or_else(|_| usage())),
            _ => usage(),
        }
    }
    options
}

/// Starts `dedup-stream serve` from the same target directory on an
/// ephemeral loopback port.
fn start_server() -> (Child, Target) {
    let exe = std::env::current_exe().expect("the example knows where it is");
    let binary = exe
        .parent()
        .and_then(|examples| examples.parent())
        .map(|dir| dir.join("dedup-stream"))
        .filter(|path| path.exists())
        .unwrap_or_else(|| {
            eprintln!("load: build the binary first (cargo build --release), or pass --addr");
            std::process::exit(2)
        });
    let mut child = Command::new(&binary)
        .args(["serve", "--listen", "127.0.0.1:0"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the server starts");
    let stderr = child.stderr.take().expect("piped");
    let mut lines = std::io::BufReader::new(stderr).lines();
    let addr = loop {
        let Some(Ok(line)) = lines.next() else {
            eprintln!("load: the server did not start");
            std::process::exit(1);
        };
        if let Some(addr) = line.split("address=").nth(1) {
            break addr.trim().parse().expect("a socket address");
        }
    };
    // Keep draining its stderr so it never blocks on it.
    std::thread::spawn(move || for _ in lines {});
    eprintln!("load: started {} serve on {addr}", binary.display());
    (child, Target::Tcp(addr))
}

/// Distinct rare words in generated texts.
const VOCABULARY: usize = 16_384;

/// A deterministic message generator: the same id gives the same message.
struct Messages {
    words: Vec<String>,
}

impl Messages {
    fn new() -> Messages {
        const SYLLABLES: [&str; 16] = [
            "ka", "lo", "mi", "ne", "ru", "sa", "to", "vi", "ze", "po", "da", "fe", "gu", "hi",
            "jo", "be",
        ];
        const COMMON: [&str; 32] = [
            "the", "of", "and", "to", "a", "in", "is", "it", "you", "that", "he", "was", "for",
            "on", "are", "with", "as", "i", "his", "they", "be", "at", "one", "have", "this",
            "from", "or", "had", "by", "not", "but", "what",
        ];
        // 16,384 distinct words of three or four syllables, then 32 common
        // ones.
        let mut words: Vec<String> = (0..VOCABULARY as u32)
            .map(|i| {
                let len = 3 + (i >> 12 & 1) as usize;
                (0..len)
                    .map(|k| SYLLABLES[((i >> (4 * k)) & 15) as usize])
                    .collect()
            })
            .collect();
        words.extend(COMMON.iter().map(|w| w.to_string()));
        Messages { words }
    }

    /// Appends a text of 10 to 20 words; one word in five is a common one.
    fn text(&self, seed: u64, out: &mut Vec<u8>) {
        let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let n = 10 + next() % 11;
        for k in 0..n {
            if k > 0 {
                out.push(b' ');
            }
            let r = next();
            let word = if r.is_multiple_of(5) {
                VOCABULARY + (r >> 8) as usize % 32
            } else {
                (r >> 8) as usize % VOCABULARY
            };
            out.extend_from_slice(self.words[word].as_bytes());
        }
    }

    /// Appends message `id` (a JSON line).
    fn write(&self, id: u64, out: &mut Vec<u8>) {
        out.extend_from_slice(b"{\"id\":");
        out.extend_from_slice(itoa::Buffer::new().format(id).as_bytes());
        out.extend_from_slice(b",\"user\":\"load\",\"text\":\"");
        // One in three retweets one of the 64 messages before it.
        let h = id.wrapping_mul(0xbf58_476d_1ce4_e5b9);
        if h.is_multiple_of(3) && id > 64 {
            out.extend_from_slice(b"RT @someone: ");
            self.text(id - 1 - (h >> 8) % 64, out);
        } else {
            self.text(id, out);
        }
        out.extend_from_slice(b"\"}\n");
    }
}

/// What one scenario measured.
struct Outcome {
    replies: u64,
    errors: u64,
    elapsed: Duration,
    latencies_us: Vec<u32>,
}

type BoxRead = Box<dyn AsyncRead + Unpin + Send>;
type BoxWrite = Box<dyn AsyncWrite + Unpin + Send>;

async fn connect(target: &Target) -> (BoxRead, BoxWrite) {
    match target {
        Target::Tcp(addr) => {
            let stream = tokio::net::TcpStream::connect(addr)
                .await
                .expect("connects");
            stream.set_nodelay(true).expect("nodelay");
            let (r, w) = stream.into_split();
            (Box::new(r), Box::new(w))
        }
        Target::Unix(path) => {
            let (r, w) = tokio::net::UnixStream::connect(path)
                .await
                .expect("connects")
                .into_split();
            (Box::new(r), Box::new(w))
        }
    }
}

/// How a scenario sends.
#[derive(Clone, Copy)]
enum Mode {
    /// Up to `window` in flight per connection, written `chunk` at a time.
    Pipelined { window: usize, chunk: usize },
    /// `rate` messages per second per connection, one write each.
    Paced { rate: f64 },
}

/// Runs one pipelined scenario: `connections` clients, each with up to
/// `window` messages in flight written `chunk` at a time, until `seconds`
/// pass or `budget` messages are sent.
#[allow(clippy::too_many_arguments)]
async fn pipelined(
    target: &Target,
    connections: usize,
    window: usize,
    chunk: usize,
    seconds: f64,
    budget: u64,
    first_id: Arc<AtomicU64>,
) -> Outcome {
    let messages = Arc::new(Messages::new());
    let sent = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let deadline = started + Duration::from_secs_f64(seconds);
    let mut tasks = Vec::new();
    for _ in 0..connections {
        let (mut reader, mut writer) = connect(target).await;
        // (send time, messages) per write, oldest first.
        let in_flight: Arc<Mutex<VecDeque<(Instant, usize)>>> = Arc::default();
        let window = Arc::new(tokio::sync::Semaphore::new(window));
        let send = {
            let (messages, sent, stop, first_id) = (
                Arc::clone(&messages),
                Arc::clone(&sent),
                Arc::clone(&stop),
                Arc::clone(&first_id),
            );
            let (in_flight, window) = (Arc::clone(&in_flight), Arc::clone(&window));
            tokio::spawn(async move {
                let mut buf = Vec::with_capacity(64 * 1024);
                loop {
                    if stop.load(Ordering::Relaxed) || Instant::now() >= deadline {
                        break;
                    }
                    let n = chunk;
                    let Ok(permit) = window.acquire_many(n as u32).await else {
                        break;
                    };
                    permit.forget();
                    if sent.fetch_add(n as u64, Ordering::Relaxed) + n as u64 > budget {
                        stop.store(true, Ordering::Relaxed);
                        break;
                    }
                    buf.clear();
                    let id = first_id.fetch_add(n as u64, Ordering::Relaxed);
                    for k in 0..n as u64 {
                        messages.write(id + k, &mut buf);
                    }
                    in_flight.lock().await.push_back((Instant::now(), n));
                    if writer.write_all(&buf).await.is_err() {
                        break;
                    }
                }
                // Half-close: the server answers what it has, then closes.
                let _ = writer.shutdown().await;
            })
        };
        let receive = tokio::spawn(async move {
            let mut buf = vec![0u8; 64 * 1024];
            let mut latencies = Vec::new();
            let (mut replies, mut errors) = (0u64, 0u64);
            let mut at_line_start = true;
            let mut current: Option<(Instant, usize)> = None;
            loop {
                let n = match reader.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => n,
                };
                let now = Instant::now();
                let mut start = 0;
                for end in memchr::memchr_iter(b'\n', &buf[..n]) {
                    if at_line_start && buf[start..].starts_with(b"{\"error\"") {
                        errors += 1;
                    }
                    at_line_start = true;
                    start = end + 1;
                    replies += 1;
                    let (sent_at, left) = match current.take() {
                        Some(c) => c,
                        None => in_flight.lock().await.pop_front().unwrap_or((now, 1)),
                    };
                    latencies.push(
                        now.duration_since(sent_at)
                            .as_micros()
                            .min(u32::MAX as u128) as u32,
                    );
                    if left > 1 {
                        current = Some((sent_at, left - 1));
                    }
                    window.add_permits(1);
                }
                if start < n {
                    at_line_start = false;
                }
            }
            (replies, errors, latencies)
        });
        tasks.push((send, receive));
    }
    let mut outcome = Outcome {
        replies: 0,
        errors: 0,
        elapsed: Duration::ZERO,
        latencies_us: Vec::new(),
    };
    for (send, receive) in tasks {
        let _ = send.await;
        let (replies, errors, latencies) = receive.await.expect("the receiver runs");
        outcome.replies += replies;
        outcome.errors += errors;
        outcome.latencies_us.extend(latencies);
    }
    outcome.elapsed = started.elapsed();
    outcome
}

/// CPU time a process has used (user + system), from `/proc` (Linux); `None`
/// elsewhere.
fn cpu_seconds(pid: &str) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name, which is in parentheses.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks: f64 = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
    // USER_HZ is 100 on every Linux this runs on.
    Some(ticks / 100.0)
}

/// CPU microseconds per message between two readings, as text.
fn per_message(before: Option<f64>, after: Option<f64>, messages: u64) -> String {
    match (before, after) {
        (Some(b), Some(a)) if messages > 0 => format!("{:.1}", (a - b) * 1e6 / messages as f64),
        _ => "-".to_string(),
    }
}

/// The paced scenario on OS threads with blocking sockets: tokio's timer
/// ticks every millisecond, which would send in bursts; a thread sleeps to
/// within tens of microseconds, so messages go out evenly spaced (the
/// connections staggered), as independent consumers would send them.
fn paced(
    target: &Target,
    connections: usize,
    total_rate: f64,
    seconds: f64,
    budget: u64,
) -> Outcome {
    use std::io::{BufReader, Read, Write};
    let messages = Arc::new(Messages::new());
    let next_id = Arc::new(AtomicU64::new(1 << 40));
    let started = Instant::now();
    let interval = Duration::from_secs_f64(connections as f64 / total_rate);
    let count = ((total_rate * seconds) as u64).min(budget) / connections as u64;
    let mut threads = Vec::new();
    for c in 0..connections {
        let (read_half, mut write_half): (Box<dyn Read + Send>, Box<dyn Write + Send>) =
            match target {
                Target::Tcp(addr) => {
                    let stream = std::net::TcpStream::connect(addr).expect("connects");
                    stream.set_nodelay(true).expect("nodelay");
                    (
                        Box::new(stream.try_clone().expect("clone")),
                        Box::new(stream),
                    )
                }
                Target::Unix(path) => {
                    let stream = std::os::unix::net::UnixStream::connect(path).expect("connects");
                    (
                        Box::new(stream.try_clone().expect("clone")),
                        Box::new(stream),
                    )
                }
            };
        let sent_at: Arc<std::sync::Mutex<VecDeque<Instant>>> = Arc::default();
        let offset = interval.mul_f64(c as f64 / connections as f64);
        let writer = {
            let (messages, next_id, sent_at) = (
                Arc::clone(&messages),
                Arc::clone(&next_id),
                Arc::clone(&sent_at),
            );
            std::thread::spawn(move || {
                let mut buf = Vec::with_capacity(256);
                for k in 0..count {
                    let due = started + offset + interval.mul_f64(k as f64);
                    if let Some(wait) = due.checked_duration_since(Instant::now()) {
                        std::thread::sleep(wait);
                    }
                    buf.clear();
                    messages.write(next_id.fetch_add(1, Ordering::Relaxed), &mut buf);
                    if let Ok(mut queue) = sent_at.lock() {
                        queue.push_back(Instant::now());
                    }
                    if write_half.write_all(&buf).is_err() {
                        return;
                    }
                }
            })
        };
        let reader = std::thread::spawn(move || {
            let mut reader = BufReader::new(read_half);
            let mut line = Vec::new();
            let (mut latencies, mut errors) = (Vec::with_capacity(count as usize), 0u64);
            for _ in 0..count {
                line.clear();
                match std::io::BufRead::read_until(&mut reader, b'\n', &mut line) {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {}
                }
                let now = Instant::now();
                if line.starts_with(b"{\"error\"") {
                    errors += 1;
                }
                let sent = sent_at
                    .lock()
                    .ok()
                    .and_then(|mut q| q.pop_front())
                    .unwrap_or(now);
                latencies.push(now.duration_since(sent).as_micros().min(u32::MAX as u128) as u32);
            }
            (latencies, errors)
        });
        threads.push((writer, reader));
    }
    let mut outcome = Outcome {
        replies: 0,
        errors: 0,
        elapsed: Duration::ZERO,
        latencies_us: Vec::new(),
    };
    for (writer, reader) in threads {
        let _ = writer.join();
        if let Ok((latencies, errors)) = reader.join() {
            outcome.replies += latencies.len() as u64;
            outcome.errors += errors;
            outcome.latencies_us.extend(latencies);
        }
    }
    outcome.elapsed = started.elapsed();
    outcome
}

fn percentile(sorted: &[u32], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    f64::from(sorted[i]) / 1000.0
}

fn main() {
    let options = options();
    if let Some(n) = options.print {
        // The workload itself, to run the filter on: no server involved.
        use std::io::Write;
        let messages = Messages::new();
        let mut out = std::io::BufWriter::new(std::io::stdout().lock());
        let mut buf = Vec::new();
        for id in 1..=n {
            buf.clear();
            messages.write(id, &mut buf);
            if out.write_all(&buf).is_err() {
                return;
            }
        }
        let _ = out.flush();
        return;
    }
    let (mut child, target) = match options.target.clone() {
        Some(target) => (None, target),
        None => {
            let (child, target) = start_server();
            (Some(child), target)
        }
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    let first_id = Arc::new(AtomicU64::new(1));
    let server_pid = child.as_ref().map(|c| c.id().to_string());
    println!(
        "{:<30} {:>5} {:>9} {:>6} {:>9} {:>8} {:>8} {:>6} {:>11} {:>11}",
        "scenario",
        "conns",
        "replies",
        "secs",
        "msg/s",
        "p50 ms",
        "p99 ms",
        "errors",
        "server µs/m",
        "client µs/m"
    );
    let window = options.window.max(64);
    let mut scenarios = vec![
        ("pipelined", 1, Mode::Pipelined { window, chunk: 64 }),
        ("pipelined", 8, Mode::Pipelined { window, chunk: 64 }),
        ("pipelined", 64, Mode::Pipelined { window, chunk: 64 }),
    ];
    let paced_name = format!("paced {} msg/s total", options.rate);
    scenarios.push((
        &paced_name,
        8,
        Mode::Paced {
            rate: options.rate as f64 / 8.0,
        },
    ));
    for (name, connections, mode) in scenarios {
        let server_before = server_pid.as_deref().and_then(cpu_seconds);
        let client_before = cpu_seconds("self");
        let mut outcome = match mode {
            Mode::Paced { rate } => paced(
                &target,
                connections,
                rate * connections as f64,
                options.seconds,
                options.messages,
            ),
            Mode::Pipelined { window, chunk } => runtime.block_on(pipelined(
                &target,
                connections,
                window,
                chunk,
                options.seconds,
                options.messages,
                Arc::clone(&first_id),
            )),
        };
        let server_cpu = per_message(
            server_before,
            server_pid.as_deref().and_then(cpu_seconds),
            outcome.replies,
        );
        let client_cpu = per_message(client_before, cpu_seconds("self"), outcome.replies);
        outcome.latencies_us.sort_unstable();
        println!(
            "{:<30} {:>5} {:>9} {:>6.2} {:>9.0} {:>8.3} {:>8.3} {:>6} {:>11} {:>11}",
            name,
            connections,
            outcome.replies,
            outcome.elapsed.as_secs_f64(),
            outcome.replies as f64 / outcome.elapsed.as_secs_f64(),
            percentile(&outcome.latencies_us, 0.50),
            percentile(&outcome.latencies_us, 0.99),
            outcome.errors,
            server_cpu,
            client_cpu,
        );
    }
    if let Some(child) = child.as_mut() {
        let _ = child.kill();
        let _ = child.wait();
    }
}

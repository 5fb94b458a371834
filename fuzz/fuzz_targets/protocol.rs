//! The sidecar's line protocol, end to end: any bytes sent on a connection
//! to a real server (Unix socket) get exactly one reply line per non-blank
//! line (or over-long line), each JSON (an error, or the message with its
//! tag; a tagged line with a lone surrogate escape is not read by
//! serde_json, and is only checked for its tag).
#![no_main]

use std::sync::LazyLock;

use dedup_stream::server::{self, ListenAddr, Listeners, ServerConfig};
use dedup_stream::{Deduper, EngineConfig};
use libfuzzer_sys::fuzz_target;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Short, so that the over-long path is reached.
const MAX_LINE: usize = 200;

struct Running {
    runtime: tokio::runtime::Runtime,
    path: std::path::PathBuf,
}

static SERVER: LazyLock<Running> = LazyLock::new(|| {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let dir = std::env::temp_dir().join(format!("dedup-fuzz-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    let path = dir.join("s.sock");
    let listener = runtime
        .block_on(ListenAddr::Unix(path.clone()).bind())
        .unwrap();
    let config = ServerConfig {
        max_line_bytes: MAX_LINE,
        batch_lines: 3,
        state: None,
        ..ServerConfig::default()
    };
    let deduper = Deduper::new(EngineConfig {
        capacity: std::num::NonZeroUsize::new(1000).unwrap(),
        ..EngineConfig::default()
    })
    .unwrap();
    let listeners = Listeners {
        data: vec![listener],
        ..Listeners::default()
    };
    runtime.spawn(server::run(
        config,
        deduper.preparer().clone(),
        deduper,
        listeners,
        std::future::pending(),
    ));
    Running { runtime, path }
});

fuzz_target!(|data: &[u8]| {
    let server = &*SERVER;
    let replies = server.runtime.block_on(async {
        let mut stream = tokio::net::UnixStream::connect(&server.path).await.unwrap();
        let (mut r, mut w) = stream.split();
        let send = async {
            w.write_all(data).await.unwrap();
            w.shutdown().await.unwrap();
        };
        let mut replies = Vec::new();
        let receive = r.read_to_end(&mut replies);
        let ((), read) = tokio::join!(send, receive);
        read.unwrap();
        replies
    });
    let expected = data
        .split(|&b| b == b'\n')
        .map(|l| l.strip_suffix(b"\r").unwrap_or(l))
        // Blank lines get no reply, unless they are over the limit.
        .filter(|l| l.len() > MAX_LINE || !l.iter().all(u8::is_ascii_whitespace))
        .count();
    assert!(replies.is_empty() || replies.ends_with(b"\n"));
    let lines: Vec<&[u8]> = replies
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .collect();
    assert_eq!(lines.len(), expected, "one reply per non-blank line");
    for line in lines {
        assert!(
            serde_json::from_slice::<serde_json::Value>(line).is_ok()
                || line.windows(8).any(|w| w == b"\"dedup\":"),
            "{:?}",
            String::from_utf8_lossy(line)
        );
    }
});

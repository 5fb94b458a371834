//! The admin endpoint: a tiny HTTP/1.1 responder for `GET /healthz` and
//! `GET /metrics`.
//!
//! Two routes and no request bodies do not need a web framework: each
//! connection gets one response and is closed (`Connection: close`). The
//! request head is read with a size cap and a time limit, and at most
//! [`MAX_ADMIN_CONNECTIONS`] are served at once, so a scraper that hangs
//! costs nothing. `HEAD` is answered like `GET`, without the body.

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

use super::Shutdown;
use super::metrics::Metrics;

/// Admin connections served at once; more are closed unanswered.
pub const MAX_ADMIN_CONNECTIONS: usize = 16;

/// The longest request head read.
const MAX_HEAD_BYTES: usize = 8 * 1024;

/// Time a client has to send its request and read the response.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// A response, before it is written.
#[derive(Debug, PartialEq, Eq)]
pub struct Response {
    /// Status code and reason (`200 OK`).
    pub status: &'static str,
    /// The `Content-Type`.
    pub content_type: &'static str,
    /// The body.
    pub body: String,
}

impl Response {
    fn text(status: &'static str, body: impl Into<String>) -> Response {
        Response {
            status,
            content_type: "text/plain; charset=utf-8",
            body: body.into(),
        }
    }
}

/// Answers one request line's method and target.
pub fn route(method: &str, target: &str, metrics: &Metrics) -> Response {
    if method != "GET" && method != "HEAD" {
        return Response::text("405 Method Not Allowed", "only GET and HEAD\n");
    }
    let path = target.split(['?', '#']).next().unwrap_or(target);
    match path {
        "/healthz" if metrics.healthy() => Response::text("200 OK", "ok\n"),
        "/healthz" => Response::text(
            "503 Service Unavailable",
            "unhealthy: the index store (Redis) cannot be reached\n",
        ),
        "/metrics" => Response {
            status: "200 OK",
            content_type: "text/plain; version=0.0.4; charset=utf-8",
            body: metrics.render(),
        },
        _ => Response::text("404 Not Found", "not found: try /healthz or /metrics\n"),
    }
}

/// Serves the admin endpoint until shutdown.
pub(crate) async fn serve(listener: TcpListener, metrics: Arc<Metrics>, mut shutdown: Shutdown) {
    let limit = Arc::new(Semaphore::new(MAX_ADMIN_CONNECTIONS));
    loop {
        let accepted = tokio::select! {
            biased;
            () = shutdown.recv() => return,
            accepted = listener.accept() => accepted,
        };
        match accepted {
            Ok((stream, _)) => {
                let Ok(permit) = Arc::clone(&limit).try_acquire_owned() else {
                    continue; // Dropping the stream closes it.
                };
                let metrics = Arc::clone(&metrics);
                tokio::spawn(async move {
                    let _ = tokio::time::timeout(REQUEST_TIMEOUT, respond(stream, &metrics)).await;
                    drop(permit);
                });
            }
            Err(e) => {
                tracing::warn!(error = %e, "admin endpoint: accepting failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// Reads one request head and writes one response.
async fn respond(mut stream: TcpStream, metrics: &Metrics) -> std::io::Result<()> {
    let mut head = Vec::with_capacity(512);
    let mut chunk = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && !head.windows(2).any(|w| w == b"\n\n") {
        if head.len() >= MAX_HEAD_BYTES {
            break;
        }
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            break;
        }
        head.extend_from_slice(&chunk[..n]);
    }
    let request_line = head
        .split(|&b| b == b'\n')
        .next()
        .map(|l| String::from_utf8_lossy(l).trim_end().to_string())
        .unwrap_or_default();
    let mut parts = request_line.split(' ');
    let (method, target, version) = (parts.next(), parts.next(), parts.next());
    let response = match (method, target, version) {
        (Some(method), Some(target), Some(v)) if v.starts_with("HTTP/1.") => {
            route(method, target, metrics)
        }
        _ => Response::text("400 Bad Request", "bad request\n"),
    };
    let mut out = format!(
        "HTTP/1.1 {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n",
        response.status,
        response.content_type,
        response.body.len()
    );
    if response.status.starts_with("405") {
        out.push_str("Allow: GET, HEAD\r\n");
    }
    out.push_str("\r\n");
    if method != Some("HEAD") {
        out.push_str(&response.body);
    }
    stream.write_all(out.as_bytes()).await?;
    stream.shutdown().await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes() {
        let m = Metrics::default();
        assert_eq!(route("GET", "/healthz", &m).status, "200 OK");
        assert!(
            route("GET", "/metrics?x=1", &m)
                .body
                .contains("dedup_index_entries")
        );
        assert_eq!(route("GET", "/", &m).status, "404 Not Found");
        assert_eq!(
            route("POST", "/metrics", &m).status,
            "405 Method Not Allowed"
        );
    }
}

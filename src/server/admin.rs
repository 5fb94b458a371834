//! The admin endpoint: a tiny HTTP/1.1 responder for `GET /healthz`,
//! `GET /metrics` and the live page, `GET /` ([`crate::metrics::live`]).
//!
//! Two routes and no request bodies do not need a web framework: each
//! connection gets one response and is closed (`Connection: close`). The
//! request head is read with a size cap and a short deadline
//! ([`HEAD_TIMEOUT`]), and at most [`MAX_ADMIN_CONNECTIONS`] are served at
//! once, apart from the data connections and their limit. When all are
//! taken, the one that has waited longest for its request head is closed
//! to make room for the newcomer: clients that connect and send nothing
//! cannot keep a health probe (which sends its request at once) from being
//! answered, and a supervisor from restarting a healthy server. `HEAD` is
//! answered like `GET`, without the body.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, oneshot};

use super::Shutdown;
use super::metrics::Metrics;

/// Admin connections served at once; more are closed unanswered.
pub const MAX_ADMIN_CONNECTIONS: usize = 16;

/// The longest request head read.
const MAX_HEAD_BYTES: usize = 8 * 1024;

/// Time a client has to send its request head, from its connection.
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(2);

/// Time a client has to send its request and read the response.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// The connections still waiting for their request head, oldest first:
/// each with its number and the sender that closes it.
type Waiting = Arc<Mutex<VecDeque<(u64, oneshot::Sender<()>)>>>;

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
        "/" => Response {
            status: "200 OK",
            content_type: "text/html; charset=utf-8",
            body: crate::metrics::live::page(metrics),
        },
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
        _ => Response::text("404 Not Found", "not found: try /, /healthz or /metrics\n"),
    }
}

/// Serves the admin endpoint until shutdown.
pub(crate) async fn serve(listener: TcpListener, metrics: Arc<Metrics>, mut shutdown: Shutdown) {
    let limit = Arc::new(Semaphore::new(MAX_ADMIN_CONNECTIONS));
    let waiting: Waiting = Arc::default();
    let mut next_id = 0u64;
    loop {
        let accepted = tokio::select! {
            biased;
            () = shutdown.recv() => return,
            accepted = listener.accept() => accepted,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(e) => {
                tracing::warn!(error = %e, "admin endpoint: accepting failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let permit = match Arc::clone(&limit).try_acquire_owned() {
            Ok(permit) => permit,
            Err(_) => {
                // Close the connection that has waited longest for its
                // request head; its permit comes back as its task ends.
                let oldest = waiting.lock().map(|mut w| w.pop_front()).ok().flatten();
                let Some((_, close)) = oldest else {
                    continue; // All are answering: dropping the stream closes it.
                };
                let _ = close.send(());
                match tokio::time::timeout(HEAD_TIMEOUT, Arc::clone(&limit).acquire_owned()).await {
                    Ok(Ok(permit)) => permit,
                    _ => continue,
                }
            }
        };
        let id = next_id;
        next_id += 1;
        let (close, closed) = oneshot::channel();
        if let Ok(mut w) = waiting.lock() {
            w.push_back((id, close));
        }
        let (metrics, waiting) = (Arc::clone(&metrics), Arc::clone(&waiting));
        tokio::spawn(async move {
            let _ = tokio::time::timeout(
                REQUEST_TIMEOUT,
                respond(stream, &metrics, closed, || forget(&waiting, id)),
            )
            .await;
            forget(&waiting, id);
            drop(permit);
        });
    }
}

/// Takes connection `id` off the waiting list (once its head has come, or
/// it has ended).
fn forget(waiting: &Waiting, id: u64) {
    if let Ok(mut w) = waiting.lock() {
        w.retain(|(i, _)| *i != id);
    }
}

/// Reads one request head and writes one response. The head must come
/// within [`HEAD_TIMEOUT`], and before `closed` fires (the connection was
/// chosen to make room); `head_read` is called once it has come.
async fn respond(
    mut stream: TcpStream,
    metrics: &Metrics,
    closed: oneshot::Receiver<()>,
    head_read: impl FnOnce(),
) -> std::io::Result<()> {
    let mut head = Vec::with_capacity(512);
    let read_head = async {
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
        Ok::<(), std::io::Error>(())
    };
    tokio::select! {
        read = tokio::time::timeout(HEAD_TIMEOUT, read_head) => match read {
            Ok(read) => read?,
            Err(_) => return Ok(()),
        },
        // Only a send closes it (the sender is dropped after `head_read`).
        Ok(()) = closed => return Ok(()),
    }
    head_read();
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
        assert_eq!(route("GET", "/", &m).status, "200 OK");
        assert_eq!(route("GET", "/nowhere", &m).status, "404 Not Found");
        assert_eq!(
            route("POST", "/metrics", &m).status,
            "405 Method Not Allowed"
        );
    }
}

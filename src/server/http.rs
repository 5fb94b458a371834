//! The sidecar's HTTP door (`serve --listen-http ADDR`): the line protocol
//! over HTTP/1.1 (keep-alive) and HTTP/2 (h2c, prior knowledge), for
//! callers that have an HTTP client and no socket client of ours.
//!
//! ```text
//!  POST /v1/check ─body─▶ StreamReader ─▶ connection::read_requests ─▶ owner
//!                                           (the line protocol's own path)  │
//!  response body (NDJSON, streamed) ◀── reply queue of the request ◀────────┘
//! ```
//!
//! - `POST /v1/check` and `POST /v1/query` take an NDJSON body and answer
//!   each non-blank line with one line, in order, streamed as decided: the
//!   bytes a line-protocol connection would receive for the same lines
//!   (`/v1/query` asks every line as `"dedup_op":"query"` does). The lines
//!   go through the line protocol's reading half (`connection::read_requests`), so the decision, the
//!   error lines and their numbering are the line protocol's. A body sent
//!   as `Content-Type: application/json` is a JSON array of messages,
//!   answered by a JSON array of the replies.
//! - `DELETE /v1/messages/{id}` forgets an id (a `"dedup_op":"remove"`
//!   line), `GET`/`POST /v1/compare` compares two texts as `dedup-stream
//!   compare` does, `GET /healthz` and `GET /metrics` answer as on the admin
//!   port, `GET /openapi.json` serves `docs/openapi.json`.
//! - Limits ([`HttpConfig`]): a body declared larger than the byte limit
//!   gets `413`; one that grows past it while streamed has its lines up to
//!   there answered, then one error line naming where reading stopped; the
//!   same for the line limit. A request over the concurrent-request limit
//!   gets `503` with `Retry-After`. Errors of the request itself are JSON
//!   objects `{"error":"..."}`.
//! - Memory: each request's reply queue holds up to a whole request's
//!   replies, so that a client which sends its whole body before reading
//!   (most HTTP clients do) is never stalled by its own unread replies; the
//!   bound is the request limit times about twice the body limit.

use std::convert::Infallible;
use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use futures::{Stream, StreamExt};
use serde::Deserialize;
use tokio::net::TcpListener;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, broadcast, mpsc};
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::io::StreamReader;

use crate::engine::config::EngineConfig;
use crate::error::InvalidReason;

use super::connection::{self, Limits};
use super::{Context, Shutdown, admin};

/// The OpenAPI 3 document of this interface, as kept in the repository.
pub const OPENAPI: &str = include_str!("../../docs/openapi.json");

/// Default most bytes in one request body.
pub const DEFAULT_MAX_BODY_BYTES: usize = 4 * 1024 * 1024;
/// Default most messages (non-blank lines, or array elements) in one
/// request.
pub const DEFAULT_MAX_REQUEST_LINES: u64 = 10_000;
/// Default most requests served at once.
pub const DEFAULT_MAX_REQUESTS: usize = 32;
/// What `Retry-After` tells a client refused for load, in seconds.
const RETRY_AFTER_SECONDS: &str = "1";

/// The HTTP door's limits.
#[derive(Clone, Debug)]
pub struct HttpConfig {
    /// Most bytes in one request body.
    pub max_body_bytes: usize,
    /// Most messages in one request.
    pub max_lines: u64,
    /// Most requests served at once, all connections together.
    pub max_requests: usize,
    /// The engine's settings, for `/v1/compare`.
    pub engine: EngineConfig,
}

impl Default for HttpConfig {
    fn default() -> Self {
        HttpConfig {
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            max_lines: DEFAULT_MAX_REQUEST_LINES,
            max_requests: DEFAULT_MAX_REQUESTS,
            engine: EngineConfig::default(),
        }
    }
}

/// What every request handler shares.
struct Http {
    /// The server's context: the engine queue, the decoder, the counters.
    ctx: Arc<Context>,
    /// One permit per request served.
    requests: Arc<Semaphore>,
    /// Subscribed to for each request, to stop reading at shutdown.
    shutdown: broadcast::Receiver<()>,
}

impl Http {
    fn config(&self) -> &HttpConfig {
        &self.ctx.config.http
    }
}

/// Time a client has to send a request head (HTTP/1.1) once it has
/// connected or its previous response went out: a client trickling its
/// head a byte at a time cannot hold a connection for ever.
pub const HEAD_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Serves HTTP on `listener` until shutdown; every request still being
/// answered then is answered up to the line it had reached.
pub(crate) async fn serve(
    listener: TcpListener,
    ctx: Arc<Context>,
    shutdown: broadcast::Receiver<()>,
) {
    use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
    use hyper_util::server::conn::auto::Builder;
    use hyper_util::server::graceful::GracefulShutdown;
    use hyper_util::service::TowerToHyperService;

    let requests = Arc::new(Semaphore::new(ctx.config.http.max_requests.max(1)));
    let mut stop = Shutdown::new(shutdown.resubscribe());
    let http = Arc::new(Http {
        ctx,
        requests,
        shutdown,
    });
    let app = router(http);
    let mut builder = Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(HEAD_TIMEOUT);
    builder.http2().timer(TokioTimer::new());
    let graceful = GracefulShutdown::new();
    loop {
        let accepted = tokio::select! {
            biased;
            () = stop.recv() => break,
            accepted = listener.accept() => accepted,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(e) => {
                // Out of file descriptors, most likely: back off a little.
                tracing::warn!(error = %e, "HTTP: accepting a connection failed");
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                continue;
            }
        };
        // Replies are flushed as soon as none is waiting: send them at once.
        let _ = stream.set_nodelay(true);
        let service = TowerToHyperService::new(app.clone());
        let connection = builder
            .serve_connection(TokioIo::new(stream), service)
            .into_owned();
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(error = %e, "HTTP connection ended");
            }
        });
    }
    // Idle keep-alive connections are closed; those answering a request
    // finish it (its lines are read up to a line boundary).
    drop(listener);
    graceful.shutdown().await;
}

fn router(http: Arc<Http>) -> Router {
    Router::new()
        .route("/v1/check", post(check))
        .route("/v1/query", post(query))
        .route("/v1/messages/{id}", delete(remove))
        .route("/v1/compare", get(compare_get).post(compare_post))
        .route("/healthz", get(health))
        .route("/metrics", get(metrics))
        .route("/openapi.json", get(openapi))
        .fallback(not_found)
        .with_state(http)
}

/// `{"error":"..."}` with `status`.
fn error(status: StatusCode, message: &str) -> Response {
    let body = serde_json::json!({ "error": message }).to_string();
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        body + "\n",
    )
        .into_response()
}

async fn not_found() -> Response {
    error(
        StatusCode::NOT_FOUND,
        "not found: see /openapi.json for the routes",
    )
}

async fn openapi() -> Response {
    ([(header::CONTENT_TYPE, "application/json")], OPENAPI).into_response()
}

async fn health(State(http): State<Arc<Http>>) -> Response {
    admin_route("/healthz", &http)
}

async fn metrics(State(http): State<Arc<Http>>) -> Response {
    admin_route("/metrics", &http)
}

/// Answers as the admin port does.
fn admin_route(path: &str, http: &Http) -> Response {
    let answer = admin::route("GET", path, &http.ctx.metrics);
    let status = answer
        .status
        .split(' ')
        .next()
        .and_then(|code| code.parse().ok())
        .and_then(|code| StatusCode::from_u16(code).ok())
        .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (
        status,
        [(header::CONTENT_TYPE, answer.content_type)],
        answer.body,
    )
        .into_response()
}

async fn check(State(http): State<Arc<Http>>, headers: HeaderMap, body: Body) -> Response {
    lines(http, &headers, body, false).await
}

async fn query(State(http): State<Arc<Http>>, headers: HeaderMap, body: Body) -> Response {
    lines(http, &headers, body, true).await
}

/// `503` with `Retry-After`: every request slot is taken.
fn busy(http: &Http) -> Response {
    http.ctx
        .metrics
        .http_rejected
        .fetch_add(1, Ordering::Relaxed);
    let mut response = error(
        StatusCode::SERVICE_UNAVAILABLE,
        &format!(
            "too many requests at once (the limit is {}); try again later",
            http.config().max_requests
        ),
    );
    response.headers_mut().insert(
        header::RETRY_AFTER,
        HeaderValue::from_static(RETRY_AFTER_SECONDS),
    );
    response
}

fn too_large(http: &Http, what: &str) -> Response {
    http.ctx
        .metrics
        .http_rejected
        .fetch_add(1, Ordering::Relaxed);
    error(StatusCode::PAYLOAD_TOO_LARGE, what)
}

/// A request's place among the concurrent ones; `None` when every place
/// is taken.
fn admit(http: &Http) -> Option<OwnedSemaphorePermit> {
    let permit = Arc::clone(&http.requests).try_acquire_owned().ok()?;
    http.ctx
        .metrics
        .http_requests
        .fetch_add(1, Ordering::Relaxed);
    Some(permit)
}

/// `/v1/check` and `/v1/query`.
async fn lines(http: Arc<Http>, headers: &HeaderMap, body: Body, query_only: bool) -> Response {
    let Some(permit) = admit(&http) else {
        return busy(&http);
    };
    let max_body = http.config().max_body_bytes;
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > max_body as u64) {
        return too_large(
            &http,
            &format!("the body is over the limit of {max_body} bytes"),
        );
    }
    let limits = Limits {
        query_only,
        max_lines: Some(http.config().max_lines),
    };
    if is_json(headers) {
        return json_array(http, body, limits, permit).await;
    }
    let over = Arc::new(AtomicBool::new(false));
    let stream = limited(body, max_body, Arc::clone(&over));
    let replies = spawn_reader(&http, StreamReader::new(stream), limits, over);
    let body = replies.map(move |chunk| {
        // The request's place is held until its last reply is sent.
        let _held = &permit;
        Ok::<_, Infallible>(Bytes::from(chunk))
    });
    (
        [(header::CONTENT_TYPE, "application/x-ndjson")],
        Body::from_stream(body),
    )
        .into_response()
}

/// Whether the body is declared JSON (an array of messages) rather than
/// NDJSON.
fn is_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("application/json"))
}

/// The body's bytes, ending with an error (and `over` set) once more than
/// `max` have come.
fn limited(
    body: Body,
    max: usize,
    over: Arc<AtomicBool>,
) -> impl Stream<Item = io::Result<Bytes>> + Send + Unpin + 'static {
    let mut seen = 0usize;
    body.into_data_stream().map(move |chunk| {
        let chunk = chunk.map_err(io::Error::other)?;
        seen = seen.saturating_add(chunk.len());
        if seen > max {
            over.store(true, Ordering::Relaxed);
            return Err(io::Error::other("the body is over the limit"));
        }
        Ok(chunk)
    })
}

/// Runs the line protocol's reading half over `reader` on a task of its
/// own, and returns the stream of reply chunks, in order. Lines past the
/// body limit (`over` set) get one error line.
fn spawn_reader<R>(
    http: &Http,
    reader: R,
    limits: Limits,
    over: Arc<AtomicBool>,
) -> ReceiverStream<Vec<u8>>
where
    R: tokio::io::AsyncRead + Unpin + Send + 'static,
{
    let config = http.config();
    let batch_bytes = http.ctx.config.batch_bytes.max(1);
    let batch_lines = http.ctx.config.batch_lines.max(1) as u64;
    // Room for a whole request's replies: see the module documentation.
    let slots = config.max_body_bytes / batch_bytes
        + usize::try_from(config.max_lines / batch_lines).unwrap_or(usize::MAX / 4)
        + 4;
    let (tx, rx) = mpsc::channel(slots);
    let ctx = Arc::clone(&http.ctx);
    let max_body = config.max_body_bytes;
    let shutdown = Shutdown::new(http.shutdown.resubscribe());
    let mut drain = Shutdown::new(http.shutdown.resubscribe());
    tokio::spawn(async move {
        let drain_timeout = ctx.config.drain_timeout;
        let read = async {
            let mut reader = reader;
            let (_end, last) =
                connection::read_requests(&mut reader, tx.clone(), &ctx, shutdown, limits).await;
            if over.load(Ordering::Relaxed) {
                let reason = InvalidReason::Refused(format!(
                    "the body is over the limit of {max_body} bytes: this line and the rest were not read"
                ));
                connection::refuse(last + 1, reason, &tx, &ctx).await;
            }
        };
        tokio::select! {
            () = read => {}
            () = async {
                drain.recv().await;
                tokio::time::sleep(drain_timeout).await;
            } => tracing::warn!("an HTTP request did not finish within the drain timeout: dropped"),
        }
    });
    ReceiverStream::new(rx)
}

/// A JSON array body: each element one message, answered by an array of
/// the replies. The body is read whole (it is bounded by the body limit).
async fn json_array(
    http: Arc<Http>,
    body: Body,
    limits: Limits,
    permit: OwnedSemaphorePermit,
) -> Response {
    let max_body = http.config().max_body_bytes;
    let mut bytes = Vec::new();
    let mut stream = body.into_data_stream();
    while let Some(chunk) = stream.next().await {
        let Ok(chunk) = chunk else {
            return error(StatusCode::BAD_REQUEST, "reading the body failed");
        };
        if bytes.len() + chunk.len() > max_body {
            return too_large(
                &http,
                &format!("the body is over the limit of {max_body} bytes"),
            );
        }
        bytes.extend_from_slice(&chunk);
    }
    let elements: Vec<&serde_json::value::RawValue> = match serde_json::from_slice(&bytes) {
        Ok(elements) => elements,
        Err(e) => {
            return error(
                StatusCode::BAD_REQUEST,
                &format!(
                    "with Content-Type application/json the body must be a JSON array of messages: {e}"
                ),
            );
        }
    };
    let max_lines = http.config().max_lines;
    if elements.len() as u64 > max_lines {
        return too_large(
            &http,
            &format!(
                "the array has {} messages, over the limit of {max_lines}",
                elements.len()
            ),
        );
    }
    // One element a line: a raw newline or carriage return in a JSON text
    // can only be white space between tokens, so a space stands in for it.
    let mut ndjson = Vec::with_capacity(bytes.len() + elements.len());
    for element in &elements {
        ndjson.extend(element.get().bytes().map(|b| match b {
            b'\n' | b'\r' => b' ',
            b => b,
        }));
        ndjson.push(b'\n');
    }
    drop(elements);
    drop(bytes);
    let over = Arc::new(AtomicBool::new(false));
    let mut replies = spawn_reader(&http, io::Cursor::new(ndjson), limits, over);
    let mut out = Vec::new();
    out.push(b'[');
    let mut first = true;
    while let Some(chunk) = replies.next().await {
        for line in chunk.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
            if !first {
                out.push(b',');
            }
            first = false;
            out.extend_from_slice(line);
        }
    }
    out.extend_from_slice(b"]\n");
    drop(permit);
    ([(header::CONTENT_TYPE, "application/json")], out).into_response()
}

/// `DELETE /v1/messages/{id}`: the line protocol's `"dedup_op":"remove"`.
async fn remove(State(http): State<Arc<Http>>, Path(id): Path<String>) -> Response {
    let Some(permit) = admit(&http) else {
        return busy(&http);
    };
    let line = removal_line(&http.ctx.decoder.spec().id[0].to_string(), &id);
    let over = Arc::new(AtomicBool::new(false));
    let mut replies = spawn_reader(&http, io::Cursor::new(line), Limits::default(), over);
    let mut out = Vec::new();
    while let Some(chunk) = replies.next().await {
        out.extend_from_slice(&chunk);
    }
    drop(permit);
    let status = if out.starts_with(b"{\"error\":") || out.is_empty() {
        StatusCode::BAD_REQUEST
    } else {
        StatusCode::OK
    };
    (status, [(header::CONTENT_TYPE, "application/json")], out).into_response()
}

/// `{"dedup_op":"remove",...}` with `id` (as a string) where the first id
/// path (`id_str`, or `--id-field`'s) puts it.
fn removal_line(path: &str, id: &str) -> Vec<u8> {
    let mut line = String::from("{\"dedup_op\":\"remove\",");
    let steps: Vec<&str> = path.split('.').collect();
    for step in &steps {
        line.push_str(&serde_json::to_string(step.trim_end_matches("[]")).unwrap_or_default());
        line.push(':');
        line.push('{');
    }
    // The last step holds the id itself, not an object.
    line.pop();
    line.push_str(&serde_json::to_string(id).unwrap_or_default());
    for _ in 1..steps.len() {
        line.push('}');
    }
    line.push_str("}\n");
    line.into_bytes()
}

/// `/v1/compare`'s two texts.
#[derive(Debug, Deserialize)]
struct CompareParams {
    a: String,
    b: String,
}

async fn compare_get(
    State(http): State<Arc<Http>>,
    params: Result<Query<CompareParams>, QueryRejection>,
) -> Response {
    match params {
        Ok(Query(params)) => compare(&http, &params),
        Err(e) => error(
            StatusCode::BAD_REQUEST,
            &format!("expected ?a=TEXT&b=TEXT: {e}"),
        ),
    }
}

async fn compare_post(
    State(http): State<Arc<Http>>,
    params: Result<axum::Json<CompareParams>, JsonRejection>,
) -> Response {
    match params {
        Ok(axum::Json(params)) => compare(&http, &params),
        Err(e) => error(
            StatusCode::BAD_REQUEST,
            &format!("expected a JSON object {{\"a\":TEXT,\"b\":TEXT}}: {e}"),
        ),
    }
}

/// Compares B (the later) with A, as `dedup-stream compare` does.
fn compare(http: &Http, params: &CompareParams) -> Response {
    let max = http.ctx.config.max_line_bytes;
    if params.a.len() > max || params.b.len() > max {
        return too_large(http, &format!("a text is over the limit of {max} bytes"));
    }
    let engine = &http.config().engine;
    let explain =
        |text: &str| crate::compare::explain_input(&http.ctx.preparer, &http.ctx.decoder, text);
    let c = crate::compare::compare(engine, explain(&params.a), explain(&params.b));
    let side = |e: &crate::engine::Explained| serde_json::json!({"normalised": e.normalised, "shingles": e.shingles.len()});
    let body = serde_json::json!({
        "similarity": c.similarity,
        "threshold": engine.threshold,
        "duplicate": c.duplicate,
        "rule": c.rule.name(),
        "measure": c.counts.measure.to_string(),
        "shared": c.counts.shared,
        "total": c.counts.total,
        "a": side(&c.a),
        "b": side(&c.b),
    });
    (
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string() + "\n",
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_removal_line_puts_the_id_where_the_id_path_says() {
        assert_eq!(
            removal_line("id_str", "12"),
            b"{\"dedup_op\":\"remove\",\"id_str\":\"12\"}\n"
        );
        assert_eq!(
            removal_line("data.id", "a\"b"),
            b"{\"dedup_op\":\"remove\",\"data\":{\"id\":\"a\\\"b\"}}\n"
        );
    }

    #[test]
    fn the_openapi_document_is_json_and_names_every_route() {
        let doc: serde_json::Value = serde_json::from_str(OPENAPI).unwrap();
        assert!(doc["openapi"].as_str().unwrap().starts_with("3."));
        for path in [
            "/v1/check",
            "/v1/query",
            "/v1/messages/{id}",
            "/v1/compare",
            "/healthz",
            "/metrics",
            "/openapi.json",
        ] {
            assert!(doc["paths"].get(path).is_some(), "{path}");
        }
    }
}

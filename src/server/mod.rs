//! The sidecar: one shared engine behind TCP and Unix sockets
//! (`dedup-stream serve`).
//!
//! ```text
//!  listeners ─accept─▶ connection tasks (≤ max_connections)
//!                        │ read lines, batch, prepare
//!                        ▼
//!                 [engine queue, bounded] ─▶ owner thread: Deduper (one index)
//!                                                  │ replies, in order
//!  clients ◀─write── connection tasks ◀─[reply queue per connection, bounded]
//!
//!  admin listener ─▶ GET /healthz, GET /metrics     snapshot timer ─▶ state file
//! ```
//!
//! - **Protocol**: JSON lines, as the filter reads them. For each non-blank
//!   line a client sends it receives exactly one line, in the order sent:
//!   the message tagged as the filter tags it ([`Reply::Tagged`]) or only
//!   `{"id":ID,"dedup":{...}}` ([`Reply::Verdict`]); a line that cannot be
//!   processed gets `{"error":"...","line":N}`, `N` counting the
//!   connection's lines from 1, and the connection goes on. A top-level
//!   `"dedup_op":"query"` asks without indexing (see [`op`]).
//! - **One index**: every connection's batches go to one owner thread
//!   (`owner.rs`), which decides them in the order they reach it, so a
//!   message on one connection is found as a duplicate of one sent earlier
//!   on another.
//! - **Backpressure** ([`connection`]): every queue is bounded; a client
//!   that does not read its replies stops being read, and holds up nobody
//!   else. Memory is bounded by the connection limit times (the reply queue
//!   plus two) batches and one line, plus the engine queue and the index.
//! - **Shutdown** (mini-redis style): when the `shutdown` future given to
//!   [`run`] completes, the listeners are closed, a broadcast tells every
//!   connection to stop reading at a line boundary, each answers what it
//!   has received, flushes and closes (or is dropped after the drain
//!   timeout), the owner finishes the queue and gives the engine back, and
//!   the state file is saved.
//!
//! The sidecar may import the engine, the wire format, the state files,
//! the pipeline's batches and [`crate::metrics`]; nothing imports it but the
//! binary.

pub mod admin;
pub mod connection;
pub mod http;
pub mod op;
mod owner;

// Where the counters were before every mode kept them: kept for imports.
#[doc(hidden)]
pub use crate::metrics;

use std::fmt;
use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, broadcast, mpsc, oneshot};

use crate::engine::{IndexStore, Preparer};
use crate::error::Error;
use crate::state::journal::{Fsync, Journal, SnapshotId};
use crate::state::snapshot::{self, Saveable};
use crate::wire::record::{Decoder, FieldSpec};
use metrics::Metrics;
use owner::Request;

/// Default address served when none is given: loopback only, because the
/// service has no authentication.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:7878";
/// Default most connections open at once.
pub const DEFAULT_MAX_CONNECTIONS: usize = 1024;
/// Default time a connection may sit idle before it is closed.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(300);
/// Default time a client has to complete a line once its first byte has
/// arrived (a client trickling bytes is never idle, so the idle timeout
/// alone cannot free its slot).
pub const DEFAULT_LINE_TIMEOUT: Duration = Duration::from_secs(30);
/// Default time connections get to finish after shutdown begins.
pub const DEFAULT_DRAIN_TIMEOUT: Duration = Duration::from_secs(10);
/// Default time between two saves of the state file.
pub const DEFAULT_SNAPSHOT_INTERVAL: Duration = Duration::from_secs(60);
/// Default most lines in one batch.
pub const DEFAULT_BATCH_LINES: usize = 512;
/// Default most bytes in one batch (a batch is cut after the line that
/// reaches it).
pub const DEFAULT_BATCH_BYTES: usize = 64 * 1024;
/// Default batches of replies queued per connection.
pub const DEFAULT_REPLY_QUEUE: usize = 4;
/// Default batches queued for the engine's owner, all connections together.
pub const DEFAULT_ENGINE_QUEUE: usize = 64;

/// What a client receives for each message.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Reply {
    /// The message with its verdict spliced in, as the filter writes it.
    #[default]
    Tagged,
    /// Only `{"id":ID,"dedup":{...}}`.
    Verdict,
}

/// How the server runs (the engine's own settings are in the [`Preparer`]
/// and the index store).
#[derive(Clone, Debug)]
pub struct ServerConfig {
    /// Where the id and text are in a message.
    pub fields: FieldSpec,
    /// Longest line read; a longer one is answered with an error and
    /// skipped without being held in memory.
    pub max_line_bytes: usize,
    /// What a client receives for each message.
    pub reply: Reply,
    /// Most connections open at once; one more is answered with an error
    /// line and closed.
    pub max_connections: usize,
    /// A connection that receives nothing and has no reply pending for this
    /// long, or whose replies cannot be written for this long, is closed.
    /// `None`: never.
    pub idle_timeout: Option<Duration>,
    /// A line must be complete this long after its first byte arrived;
    /// otherwise the client gets an error line and the connection is
    /// closed. `None`: no limit.
    pub line_timeout: Option<Duration>,
    /// How long connections get to answer what they received once shutdown
    /// begins; past it they are dropped.
    pub drain_timeout: Duration,
    /// The state file saved periodically and at shutdown, if any.
    pub state: Option<PathBuf>,
    /// Time between two periodic saves; `None`: only at shutdown.
    pub snapshot_interval: Option<Duration>,
    /// Most lines in one batch.
    pub batch_lines: usize,
    /// Most bytes in one batch.
    pub batch_bytes: usize,
    /// Batches of replies queued per connection.
    pub reply_queue: usize,
    /// Batches queued for the engine's owner.
    pub engine_queue: usize,
    /// The HTTP door's limits (`--listen-http`).
    pub http: http::HttpConfig,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            fields: FieldSpec::default(),
            max_line_bytes: crate::pipeline::DEFAULT_MAX_LINE_BYTES,
            reply: Reply::Tagged,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            idle_timeout: Some(DEFAULT_IDLE_TIMEOUT),
            line_timeout: Some(DEFAULT_LINE_TIMEOUT),
            drain_timeout: DEFAULT_DRAIN_TIMEOUT,
            state: None,
            snapshot_interval: Some(DEFAULT_SNAPSHOT_INTERVAL),
            batch_lines: DEFAULT_BATCH_LINES,
            batch_bytes: DEFAULT_BATCH_BYTES,
            reply_queue: DEFAULT_REPLY_QUEUE,
            engine_queue: DEFAULT_ENGINE_QUEUE,
            http: http::HttpConfig::default(),
        }
    }
}

/// An address to serve: `IP:PORT` for TCP, `unix:PATH` for a Unix domain
/// socket.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ListenAddr {
    /// A TCP address.
    Tcp(SocketAddr),
    /// A Unix domain socket's path.
    Unix(PathBuf),
}

/// An address that is neither `IP:PORT` nor `unix:PATH`.
#[derive(Debug, thiserror::Error)]
#[error("expected IP:PORT (like 127.0.0.1:7878) or unix:PATH, got {0:?}")]
pub struct BadListenAddr(String);

impl FromStr for ListenAddr {
    type Err = BadListenAddr;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if let Some(path) = s.strip_prefix("unix:") {
            if path.is_empty() {
                return Err(BadListenAddr(s.to_string()));
            }
            return Ok(ListenAddr::Unix(PathBuf::from(path)));
        }
        s.parse()
            .map(ListenAddr::Tcp)
            .map_err(|_| BadListenAddr(s.to_string()))
    }
}

impl fmt::Display for ListenAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ListenAddr::Tcp(addr) => write!(f, "{addr}"),
            ListenAddr::Unix(path) => write!(f, "unix:{}", path.display()),
        }
    }
}

impl ListenAddr {
    /// Binds the address. A Unix socket file left behind by a server that
    /// is gone is replaced; one that a live server answers on is not.
    pub async fn bind(&self) -> Result<Listener, Error> {
        let failed = |source| Error::Listen {
            address: self.to_string(),
            source,
        };
        match self {
            ListenAddr::Tcp(addr) => {
                if !addr.ip().is_loopback() {
                    tracing::warn!(
                        address = %addr,
                        "serving beyond loopback: the service has no authentication"
                    );
                }
                TcpListener::bind(addr)
                    .await
                    .map(Listener::Tcp)
                    .map_err(failed)
            }
            #[cfg(unix)]
            ListenAddr::Unix(path) => {
                use std::os::unix::fs::FileTypeExt;
                if let Ok(meta) = std::fs::symlink_metadata(path)
                    && meta.file_type().is_socket()
                    && std::os::unix::net::UnixStream::connect(path).is_err()
                {
                    // A stale socket: nobody answers on it.
                    let _ = std::fs::remove_file(path);
                }
                tokio::net::UnixListener::bind(path)
                    .map(|listener| {
                        Listener::Unix(UnixSocket {
                            listener,
                            path: path.clone(),
                        })
                    })
                    .map_err(failed)
            }
            #[cfg(not(unix))]
            ListenAddr::Unix(_) => Err(failed(std::io::Error::new(
                std::io::ErrorKind::Unsupported,
                "Unix domain sockets are not available on this platform",
            ))),
        }
    }
}

/// A Unix listener that removes its socket file when dropped.
#[cfg(unix)]
#[derive(Debug)]
pub struct UnixSocket {
    /// The listener.
    listener: tokio::net::UnixListener,
    /// Its socket file.
    path: PathBuf,
}

#[cfg(unix)]
impl Drop for UnixSocket {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// A bound listener.
#[derive(Debug)]
pub enum Listener {
    /// TCP.
    Tcp(TcpListener),
    /// A Unix domain socket.
    #[cfg(unix)]
    Unix(UnixSocket),
}

impl Listener {
    /// The address it is bound to (with the actual port when bound to
    /// port 0).
    pub fn local_addr(&self) -> ListenAddr {
        match self {
            Listener::Tcp(l) => l
                .local_addr()
                .map(ListenAddr::Tcp)
                .unwrap_or(ListenAddr::Tcp(SocketAddr::from(([0, 0, 0, 0], 0)))),
            #[cfg(unix)]
            Listener::Unix(socket) => ListenAddr::Unix(socket.path.clone()),
        }
    }

    async fn accept(&self) -> std::io::Result<Accepted> {
        match self {
            Listener::Tcp(l) => {
                let (stream, _) = l.accept().await?;
                // Replies are flushed as soon as none is waiting: send them
                // at once.
                let _ = stream.set_nodelay(true);
                Ok(Accepted::Tcp(stream))
            }
            #[cfg(unix)]
            Listener::Unix(socket) => {
                let (stream, _) = socket.listener.accept().await?;
                Ok(Accepted::Unix(stream))
            }
        }
    }
}

/// An accepted connection.
enum Accepted {
    Tcp(TcpStream),
    #[cfg(unix)]
    Unix(tokio::net::UnixStream),
}

/// What the server listens on.
#[derive(Debug, Default)]
pub struct Listeners {
    /// Where clients connect.
    pub data: Vec<Listener>,
    /// The admin HTTP endpoint, if any.
    pub admin: Option<TcpListener>,
    /// The HTTP door to the index (see [`http`]), if any.
    pub http: Option<TcpListener>,
}

/// Shared by every connection. The engine queue closes when the last copy
/// is dropped, which is how the owner knows every connection is done.
pub(crate) struct Context {
    /// The server's settings.
    pub config: ServerConfig,
    /// The engine's queue.
    pub engine: mpsc::Sender<Request>,
    /// The stateless stages, for preparing batches.
    pub preparer: Arc<Preparer>,
    /// The record decoder.
    pub decoder: Arc<Decoder>,
    /// The counters.
    pub metrics: Arc<Metrics>,
}

/// Listens for the shutdown broadcast (as in mini-redis): `recv` completes
/// once the server begins to shut down, and at once ever after.
#[derive(Debug)]
pub(crate) struct Shutdown {
    /// Whether the notice was received.
    is_shutdown: bool,
    /// The broadcast; it says "stop" by being closed.
    notify: broadcast::Receiver<()>,
}

impl Shutdown {
    fn new(notify: broadcast::Receiver<()>) -> Shutdown {
        Shutdown {
            is_shutdown: false,
            notify,
        }
    }

    /// Whether shutdown has begun (as far as this receiver knows).
    pub(crate) fn is_shutdown(&self) -> bool {
        self.is_shutdown
    }

    /// Completes when shutdown begins.
    pub(crate) async fn recv(&mut self) {
        if self.is_shutdown {
            return;
        }
        let _ = self.notify.recv().await;
        self.is_shutdown = true;
    }
}

/// Runs the server until `shutdown` completes, then drains, saves the state
/// file (if configured) and gives the engine back.
///
/// The engine is used as given: load a state file into it first (see
/// [`snapshot::load`]). Must be called within a multi-threaded tokio runtime.
pub async fn run<S>(
    config: ServerConfig,
    preparer: Preparer,
    store: S,
    listeners: Listeners,
    shutdown: impl Future<Output = ()>,
) -> Result<S, Error>
where
    S: IndexStore + Saveable + Send + 'static,
{
    run_with_metrics(
        config,
        preparer,
        store,
        listeners,
        shutdown,
        Arc::new(Metrics::default()),
    )
    .await
}

/// [`run`], counting into `metrics` (which a Redis index store shares to
/// report its connection's health).
pub async fn run_with_metrics<S>(
    config: ServerConfig,
    preparer: Preparer,
    store: S,
    listeners: Listeners,
    shutdown: impl Future<Output = ()>,
    metrics: Arc<Metrics>,
) -> Result<S, Error>
where
    S: IndexStore + Saveable + Send + 'static,
{
    run_with_journal(config, preparer, store, listeners, shutdown, metrics, None).await
}

/// [`run_with_metrics`], writing what is indexed to `journal` (opened, and
/// replayed into the store, by [`crate::state::journal::open`]) before it is
/// answered, so that a crash loses nothing answered.
pub async fn run_with_journal<S>(
    config: ServerConfig,
    preparer: Preparer,
    store: S,
    listeners: Listeners,
    shutdown: impl Future<Output = ()>,
    metrics: Arc<Metrics>,
    journal: Option<Journal>,
) -> Result<S, Error>
where
    S: IndexStore + Saveable + Send + 'static,
{
    let sync_every_second = journal
        .as_ref()
        .is_some_and(|j| j.fsync() == Fsync::EverySec);
    let mut config = config;
    config.max_connections = fit_open_files(config.max_connections.max(1));
    metrics.record_index(store.stats());
    let preparer = Arc::new(preparer);
    let (engine_tx, engine_rx) = mpsc::channel(config.engine_queue.max(1));
    // The owner gets an OS thread of its own, named so that `top -H` shows
    // it; it gives the engine back through a oneshot channel (dropped
    // unsent if the thread panics).
    let (owner_done, owner) = oneshot::channel();
    {
        let (metrics, reply) = (Arc::clone(&metrics), config.reply);
        std::thread::Builder::new()
            .name("dedup-engine".into())
            .spawn(move || {
                let _ = owner_done.send(owner::run(store, journal, engine_rx, metrics, reply));
            })
            .map_err(|e| Error::Internal(format!("cannot start the engine thread: {e}")))?;
    }
    let ctx = Arc::new(Context {
        decoder: Arc::new(Decoder::new(config.fields.clone())),
        preparer,
        engine: engine_tx,
        metrics: Arc::clone(&metrics),
        config,
    });
    let (notify_shutdown, _) = broadcast::channel::<()>(1);
    let Listeners {
        data,
        admin,
        http: http_listener,
    } = listeners;
    for listener in &data {
        tracing::info!(address = %listener.local_addr(), "listening");
    }
    let admin = admin.map(|listener| {
        if let Ok(addr) = listener.local_addr() {
            tracing::info!(address = %addr, "admin endpoint listening");
        }
        let shutdown = Shutdown::new(notify_shutdown.subscribe());
        tokio::spawn(admin::serve(listener, Arc::clone(&metrics), shutdown))
    });
    let http = http_listener.map(|listener| {
        if let Ok(addr) = listener.local_addr() {
            tracing::info!(http = %addr, "HTTP listening");
            if !addr.ip().is_loopback() {
                tracing::warn!(
                    address = %addr,
                    "serving HTTP beyond loopback: the service has no authentication"
                );
            }
        }
        tokio::spawn(http::serve(
            listener,
            Arc::clone(&ctx),
            notify_shutdown.subscribe(),
        ))
    });
    let saver = match (&ctx.config.state, ctx.config.snapshot_interval) {
        (Some(path), Some(interval)) => Some(tokio::spawn(save_periodically(
            path.clone(),
            interval,
            ctx.engine.clone(),
            Arc::clone(&metrics),
            Shutdown::new(notify_shutdown.subscribe()),
        ))),
        _ => None,
    };

    let ticker = sync_every_second.then(|| {
        let engine = ctx.engine.clone();
        let mut shutdown = Shutdown::new(notify_shutdown.subscribe());
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    biased;
                    () = shutdown.recv() => return,
                    () = tokio::time::sleep(crate::state::journal::SYNC_EVERY) => {}
                }
                if engine.send(Request::Tick).await.is_err() {
                    return;
                }
            }
        })
    });

    let state = ctx.config.state.clone();
    let limit = Arc::new(Semaphore::new(ctx.config.max_connections.max(1)));
    tracing::debug!(
        max_connections = ctx.config.max_connections,
        "connection limit"
    );
    tokio::select! {
        () = accept_loop(&data, &ctx, &limit, &notify_shutdown) => {}
        () = shutdown => tracing::info!("shutting down: answering what was received"),
    }

    // Stop accepting (and remove Unix socket files), then tell everyone.
    let drain_timeout = ctx.config.drain_timeout;
    drop(data);
    drop(notify_shutdown);
    drop(ctx);
    if let Some(mut http) = http {
        // Its requests are dropped after the drain timeout; a response a
        // client does not read is given a moment more, then dropped too.
        let grace = drain_timeout + Duration::from_secs(1);
        if tokio::time::timeout(grace, &mut http).await.is_err() {
            tracing::warn!("HTTP connections did not finish within the drain timeout: dropped");
            http.abort();
            let _ = http.await;
        }
    }
    if let Some(saver) = saver {
        let _ = saver.await;
    }
    if let Some(ticker) = ticker {
        let _ = ticker.await;
    }
    if let Some(admin) = admin {
        let _ = admin.await;
    }
    // The owner ends once every connection is done with the engine queue.
    let (store, journal) = owner
        .await
        .map_err(|_| Error::Internal("the engine thread panicked".into()))?;
    let get = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
    tracing::info!(
        checks = get(&metrics.checks_new) + get(&metrics.checks_duplicate),
        duplicates = get(&metrics.checks_duplicate),
        queries = get(&metrics.queries_new) + get(&metrics.queries_duplicate),
        invalid = get(&metrics.invalid_lines),
        indexed = store.stats().len,
        "stopped"
    );
    match state {
        Some(path) => save_final(path, store, journal, &metrics).await,
        None => Ok(store),
    }
}

/// Serves the admin endpoint (`GET /healthz`, `GET /metrics`) for
/// `metrics` on its own, until `shutdown` completes: for workers that have
/// no data listeners (`consume`).
pub async fn serve_admin(
    listener: TcpListener,
    metrics: Arc<Metrics>,
    shutdown: impl Future<Output = ()>,
) {
    let (notify, _) = broadcast::channel::<()>(1);
    let admin = admin::serve(listener, metrics, Shutdown::new(notify.subscribe()));
    tokio::select! {
        () = admin => {}
        () = shutdown => {}
    }
}

/// Descriptors kept for everything but client connections: the
/// listeners, the admin endpoint's connections, the state file and its
/// temporary, the runtime's own, standard streams, and connections over the
/// limit while they are told so.
pub const RESERVED_DESCRIPTORS: usize = 64 + admin::MAX_ADMIN_CONNECTIONS;

/// Makes room for `max_connections` client connections (one descriptor
/// each) plus [`RESERVED_DESCRIPTORS`] within the open-files limit
/// (`RLIMIT_NOFILE`): the soft limit is raised toward the hard one as far
/// as needed; if even the hard limit is too low, fewer connections are
/// allowed, with a warning. Returns the connection limit to use.
///
/// Without it, a server at its file limit fails every `accept`, and
/// clients wait in the backlog unanswered.
pub fn fit_open_files(max_connections: usize) -> usize {
    #[cfg(unix)]
    {
        use rustix::process::{Resource, getrlimit, setrlimit};
        let want = (max_connections as u64).saturating_add(RESERVED_DESCRIPTORS as u64);
        let limit = getrlimit(Resource::Nofile);
        let soft = limit.current.unwrap_or(u64::MAX);
        if soft >= want {
            return max_connections;
        }
        let hard = limit.maximum.unwrap_or(u64::MAX);
        let raised = want.min(hard);
        let mut available = soft;
        if raised > soft {
            let new = rustix::process::Rlimit {
                current: Some(raised),
                maximum: limit.maximum,
            };
            match setrlimit(Resource::Nofile, new) {
                Ok(()) => {
                    tracing::info!(from = soft, to = raised, "raised the open-files limit");
                    available = raised;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "cannot raise the open-files limit");
                }
            }
        }
        if available >= want {
            return max_connections;
        }
        let fits = usize::try_from(available)
            .unwrap_or(usize::MAX)
            .saturating_sub(RESERVED_DESCRIPTORS)
            .max(1);
        tracing::warn!(
            max_connections = fits,
            asked = max_connections,
            open_files_limit = available,
            "lowering --max-connections to fit the open-files limit (raise its hard limit, ulimit -Hn, to allow more)"
        );
        fits
    }
    #[cfg(not(unix))]
    {
        max_connections
    }
}

/// Lets a repeated log line through at most once per period, counting the
/// ones held back (so a failing `accept` cannot flood the log).
#[derive(Debug)]
struct Throttle {
    /// The shortest time between two lines let through.
    period: Duration,
    /// When the last line was let through.
    last: Option<std::time::Instant>,
    /// Lines held back since.
    suppressed: u64,
}

impl Throttle {
    fn new(period: Duration) -> Throttle {
        Throttle {
            period,
            last: None,
            suppressed: 0,
        }
    }

    /// `Some(lines held back before this one)` if a line may be logged at
    /// `now`; `None` if it is held back.
    fn allow(&mut self, now: std::time::Instant) -> Option<u64> {
        match self.last {
            Some(last) if now.saturating_duration_since(last) < self.period => {
                self.suppressed += 1;
                None
            }
            _ => {
                self.last = Some(now);
                Some(std::mem::take(&mut self.suppressed))
            }
        }
    }
}

/// Accepts connections on every listener until dropped.
async fn accept_loop(
    listeners: &[Listener],
    ctx: &Arc<Context>,
    limit: &Arc<Semaphore>,
    notify_shutdown: &broadcast::Sender<()>,
) {
    if listeners.is_empty() {
        return std::future::pending().await;
    }
    let mut accept_failures = Throttle::new(Duration::from_secs(1));
    loop {
        let accepts = listeners.iter().map(|l| Box::pin(l.accept()));
        let (accepted, _, _) = futures::future::select_all(accepts).await;
        let stream = match accepted {
            Ok(stream) => stream,
            Err(e) => {
                // Out of file descriptors, most likely: back off a little,
                // and say so at most once a second.
                if let Some(suppressed) = accept_failures.allow(std::time::Instant::now()) {
                    tracing::warn!(
                        error = %e,
                        suppressed,
                        "accepting a connection failed (one such line a second at most: suppressed counts the others)"
                    );
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        ctx.metrics
            .connections_total
            .fetch_add(1, Ordering::Relaxed);
        let Ok(permit) = Arc::clone(limit).try_acquire_owned() else {
            ctx.metrics
                .connections_rejected
                .fetch_add(1, Ordering::Relaxed);
            tokio::spawn(reject(stream, ctx.config.max_connections));
            continue;
        };
        let ctx = Arc::clone(ctx);
        let shutdown = Shutdown::new(notify_shutdown.subscribe());
        let mut drain = Shutdown::new(notify_shutdown.subscribe());
        tokio::spawn(async move {
            ctx.metrics.connections_open.fetch_add(1, Ordering::Relaxed);
            let drain_timeout = ctx.config.drain_timeout;
            let metrics = Arc::clone(&ctx.metrics);
            let serve = async move {
                match stream {
                    Accepted::Tcp(stream) => {
                        let (r, w) = stream.into_split();
                        connection::run(r, w, ctx, shutdown).await;
                    }
                    #[cfg(unix)]
                    Accepted::Unix(stream) => {
                        let (r, w) = stream.into_split();
                        connection::run(r, w, ctx, shutdown).await;
                    }
                }
            };
            tokio::select! {
                () = serve => {}
                () = async {
                    drain.recv().await;
                    tokio::time::sleep(drain_timeout).await;
                } => tracing::warn!("a connection did not finish within the drain timeout: dropped"),
            }
            metrics.connections_open.fetch_sub(1, Ordering::Relaxed);
            drop(permit);
        });
    }
}

/// Tells a client over the connection limit why it is being closed.
async fn reject(stream: Accepted, limit: usize) {
    let mut line = Vec::new();
    owner::write_error(
        &mut line,
        &format!("too many connections (the limit is {limit}); try again later"),
        0,
    );
    let write = async {
        match stream {
            Accepted::Tcp(mut s) => s.write_all(&line).await.and(s.shutdown().await),
            #[cfg(unix)]
            Accepted::Unix(mut s) => s.write_all(&line).await.and(s.shutdown().await),
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(1), write).await;
}

/// Asks the owner for the index's bytes and writes them to the state file.
///
/// `pending` holds the bytes of a save that failed: the owner answers
/// `None` when nothing was checked since it last encoded the index, and
/// then those bytes are still the current index, so they are written
/// again. A failed save is thus retried at every interval, whether or not
/// new messages arrive, until it succeeds (holding one encoded index
/// meanwhile).
async fn save_snapshot(
    path: &std::path::Path,
    engine: &mpsc::Sender<Request>,
    metrics: &Metrics,
    pending: &mut Option<Vec<u8>>,
) -> Result<(), String> {
    let (tx, rx) = oneshot::channel();
    engine
        .send(Request::Snapshot(tx))
        .await
        .map_err(|_| "the engine is gone".to_string())?;
    let bytes = match rx.await.map_err(|_| "the engine is gone".to_string())? {
        Some(bytes) => bytes,
        None => match pending.take() {
            Some(bytes) => bytes,
            None => {
                tracing::debug!("nothing checked since the last save: state file unchanged");
                return Ok(());
            }
        },
    };
    let target = path.to_path_buf();
    let size = bytes.len();
    let (bytes, written) = tokio::task::spawn_blocking(move || {
        let written = snapshot::write_atomic(&target, &bytes);
        (bytes, written)
    })
    .await
    .map_err(|e| e.to_string())?;
    match written {
        Ok(()) => {
            metrics.snapshots_saved.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(path = %path.display(), bytes = size, "state saved");
            // The journal can drop what the file now holds.
            let _ = engine.send(Request::Saved(SnapshotId::of(&bytes))).await;
            Ok(())
        }
        Err(e) => {
            *pending = Some(bytes);
            Err(e.to_string())
        }
    }
}

/// Saves the state file every `interval` until shutdown; a failed save is
/// retried at the next interval (see [`save_snapshot`]).
async fn save_periodically(
    path: PathBuf,
    interval: Duration,
    engine: mpsc::Sender<Request>,
    metrics: Arc<Metrics>,
    mut shutdown: Shutdown,
) {
    let mut pending = None;
    loop {
        tokio::select! {
            biased;
            () = shutdown.recv() => return,
            () = tokio::time::sleep(interval) => {}
        }
        if let Err(e) = save_snapshot(&path, &engine, &metrics, &mut pending).await {
            metrics.snapshot_failures.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(
                path = %path.display(),
                error = %e,
                retry_in = ?interval,
                "saving the state failed; will retry"
            );
        }
    }
}

/// Saves the state file one last time, off the reactor (marked in the
/// journal first, and the journal emptied once it is written).
async fn save_final<S>(
    path: PathBuf,
    store: S,
    mut journal: Option<Journal>,
    metrics: &Metrics,
) -> Result<S, Error>
where
    S: IndexStore + Saveable + Send + 'static,
{
    let saved = tokio::task::spawn_blocking(move || {
        let result = match store.encode_snapshot() {
            Some(bytes) => {
                let id = SnapshotId::of(&bytes);
                if let Some(journal) = journal.as_mut() {
                    journal.mark(id);
                }
                let written =
                    snapshot::write_atomic(&path, &bytes).map_err(|e| snapshot::SnapshotError {
                        path: path.clone(),
                        kind: snapshot::ErrorKind::Io(e),
                    });
                if written.is_ok()
                    && let Some(journal) = journal.as_mut()
                {
                    journal.saved(id);
                }
                written
            }
            None => Ok(()),
        };
        if result.is_ok() {
            tracing::info!(path = %path.display(), entries = store.stats().len, "state saved");
        }
        (store, result)
    })
    .await
    .map_err(|e| Error::Internal(format!("saving the state failed: {e}")))?;
    match saved {
        (store, Ok(())) => {
            metrics.snapshots_saved.fetch_add(1, Ordering::Relaxed);
            Ok(store)
        }
        (_, Err(e)) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    #[test]
    fn repeated_accept_failures_are_logged_once_a_second_with_a_count() {
        let mut throttle = Throttle::new(Duration::from_secs(1));
        let t0 = Instant::now();
        let at = |ms| t0 + Duration::from_millis(ms);
        assert_eq!(throttle.allow(at(0)), Some(0));
        // Ten a second, as a failing accept loop goes: held back...
        for ms in (100..1000).step_by(100) {
            assert_eq!(throttle.allow(at(ms)), None);
        }
        // ... and counted in the next line let through.
        assert_eq!(throttle.allow(at(1000)), Some(9));
        assert_eq!(throttle.allow(at(1500)), None);
        assert_eq!(throttle.allow(at(2600)), Some(1));
        assert_eq!(throttle.allow(at(9000)), Some(0));
    }

    #[cfg(unix)]
    #[test]
    fn the_connection_limit_fits_the_open_files_limit() {
        use rustix::process::{Resource, getrlimit};
        // A few connections fit whatever the limit.
        assert_eq!(fit_open_files(8), 8);
        let limit = getrlimit(Resource::Nofile);
        assert!(limit.current.unwrap_or(u64::MAX) >= (8 + RESERVED_DESCRIPTORS) as u64);
        // More than the hard limit allows: raised to the hard limit, and
        // the connections cut to what fits in it.
        if let Some(hard) = limit.maximum.filter(|&h| h < u64::from(u32::MAX)) {
            let fits = fit_open_files(usize::MAX / 2);
            assert_eq!(fits as u64, hard - RESERVED_DESCRIPTORS as u64);
            assert_eq!(getrlimit(Resource::Nofile).current, Some(hard));
        }
    }
}

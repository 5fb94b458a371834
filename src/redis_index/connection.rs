//! Where an index lives (`--index`), and a connection to Redis that waits
//! out an outage: it reconnects with backoff, reports on stderr and in the
//! metrics, and never turns an error into an answer.

use std::fmt;
use std::io::{self, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use redis::{ConnectionAddr, ConnectionLike, ErrorKind, RedisError, RedisResult, ServerErrorKind};

use super::replies::PlainConnection;
use crate::error::StoreError;
use crate::metrics::Metrics;

/// What a password is shown as.
const HIDDEN: &str = "***";

/// `url` with its password replaced by `***` (the user is kept):
/// `redis://:s3cret@host:6379` shows as `redis://:***@host:6379`, and a
/// `pass=` or `password=` query parameter (`redis+unix:///PATH?pass=…`)
/// likewise. Every URL that reaches a log line, an error or a report goes
/// through it, so a password given in a URL is never printed.
pub fn redact_url(url: &str) -> std::borrow::Cow<'_, str> {
    let Some(start) = url.find("://").map(|i| i + 3) else {
        return url.into();
    };
    let rest = &url[start..];
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    let mut shown = String::with_capacity(url.len());
    shown.push_str(&url[..start]);
    match authority.rsplit_once('@') {
        Some((userinfo, hosts)) => {
            match userinfo.split_once(':') {
                Some((user, _password)) => {
                    shown.push_str(user);
                    shown.push(':');
                    shown.push_str(HIDDEN);
                }
                None => shown.push_str(userinfo),
            }
            shown.push('@');
            shown.push_str(hosts);
        }
        None => shown.push_str(authority),
    }
    match tail.split_once('?') {
        Some((path, query)) => {
            shown.push_str(path);
            shown.push('?');
            let params: Vec<String> = query
                .split('&')
                .map(|param| match param.split_once('=') {
                    Some((name, _)) if matches!(name, "pass" | "password") => {
                        format!("{name}={HIDDEN}")
                    }
                    _ => param.to_string(),
                })
                .collect();
            shown.push_str(&params.join("&"));
        }
        None => shown.push_str(tail),
    }
    if shown == url {
        url.into()
    } else {
        shown.into()
    }
}

/// Where an index lives, as `--index` gives it.
///
/// Its `Display` and `Debug` hide the password of a URL (`redis://:***@…`):
/// the URL itself is only handed to the Redis client.
#[derive(Clone, PartialEq, Eq)]
pub enum IndexLocation {
    /// In this process (`memory`, the default).
    Memory,
    /// On one Redis server: `redis://`, `rediss://` (TLS), `redis+unix://`
    /// or `unix://` URLs, as the `redis` crate reads them.
    Redis(String),
    /// On a Redis Cluster: `redis+cluster://HOST:PORT[,HOST:PORT…]` names
    /// some of its nodes.
    Cluster(Vec<String>),
}

impl FromStr for IndexLocation {
    type Err = StoreError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = |reason: String| StoreError::Location {
            given: redact_url(s).into_owned(),
            reason,
        };
        if s == "memory" {
            return Ok(IndexLocation::Memory);
        }
        if let Some(nodes) = s.strip_prefix("redis+cluster://") {
            let (auth, hosts) = match nodes.rsplit_once('@') {
                Some((auth, hosts)) => (format!("{auth}@"), hosts),
                None => (String::new(), nodes),
            };
            let urls: Vec<String> = hosts
                .split(',')
                .map(|node| format!("redis://{auth}{}", node.trim()))
                .collect();
            if hosts.is_empty() || hosts.split(',').any(|node| node.trim().is_empty()) {
                return Err(bad(
                    "name at least one node, as HOST:PORT[,HOST:PORT…]".into()
                ));
            }
            for url in &urls {
                redis::Client::open(url.as_str()).map_err(|e| bad(e.to_string()))?;
            }
            return Ok(IndexLocation::Cluster(urls));
        }
        if ["redis://", "rediss://", "redis+unix://", "unix://"]
            .iter()
            .any(|scheme| s.starts_with(scheme))
        {
            redis::Client::open(s).map_err(|e| bad(e.to_string()))?;
            return Ok(IndexLocation::Redis(s.to_string()));
        }
        Err(bad(
            "expected memory, redis://HOST:PORT[/DB], rediss://…, redis+unix:///PATH or \
             redis+cluster://HOST:PORT[,HOST:PORT…]"
                .into(),
        ))
    }
}

impl fmt::Display for IndexLocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IndexLocation::Memory => f.write_str("memory"),
            IndexLocation::Redis(url) => f.write_str(&redact_url(url)),
            IndexLocation::Cluster(urls) => {
                // Every node's URL carries the same credentials: show them
                // once, redacted, as they were given.
                let shown: Vec<String> = urls.iter().map(|u| redact_url(u).into_owned()).collect();
                let auth = shown[0]
                    .strip_prefix("redis://")
                    .and_then(|rest| rest.rsplit_once('@'))
                    .map(|(auth, _)| format!("{auth}@"))
                    .unwrap_or_default();
                let hosts: Vec<&str> = shown
                    .iter()
                    .map(|u| {
                        let rest = u.strip_prefix("redis://").unwrap_or(u);
                        rest.rsplit_once('@').map_or(rest, |(_, host)| host)
                    })
                    .collect();
                write!(f, "redis+cluster://{auth}{}", hosts.join(","))
            }
        }
    }
}

/// As `Display`: a derived `Debug` would print the password.
impl fmt::Debug for IndexLocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "IndexLocation({self})")
    }
}

/// Longest time to establish a connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Default time Redis has to answer one call (a script over a few hundred
/// messages takes milliseconds; a blocked read waits a second at most)
/// before the connection is taken for dead, dropped and made again.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
/// First and longest wait between two attempts.
const BACKOFF: (Duration, Duration) = (Duration::from_millis(50), Duration::from_secs(2));
/// How often a continuing outage is reported.
const REPORT_EVERY: Duration = Duration::from_secs(10);

#[derive(Clone)]
enum Client {
    Single(redis::Client),
    Cluster(redis::cluster::ClusterClient),
}

enum Connection {
    Single(redis::Connection),
    /// A single Redis, its replies read by [`super::replies`].
    Plain(PlainConnection),
    Cluster(Box<redis::cluster::ClusterConnection>),
}

impl Connection {
    fn as_dyn(&mut self) -> &mut dyn ConnectionLike {
        match self {
            Connection::Single(c) => c,
            Connection::Plain(c) => c,
            Connection::Cluster(c) => c.as_mut(),
        }
    }
}

/// A connection to the Redis behind a location, made on first use and
/// made again after an error.
pub struct Link {
    client: Client,
    connection: Option<Connection>,
    /// What it reaches, for messages.
    location: String,
    /// Where reachability is reported.
    metrics: Option<Arc<Metrics>>,
    /// Set when the worker should stop waiting for Redis.
    stop: Option<Arc<AtomicBool>>,
    /// Set when the one thread this link serves no longer wants its
    /// answers (see [`Link::with_cancel`]).
    cancel: Option<Arc<AtomicBool>>,
    /// Time Redis has to answer a call.
    timeout: Duration,
    /// Longest an outage is waited out; `None`: until told to stop.
    wait: Option<Duration>,
    /// A cluster's seed nodes, checked once to be a cluster at all.
    seeds: Vec<String>,
    /// Connections made so far: one more than before means the one before
    /// broke (Redis may have restarted in between).
    connections: u64,
    /// Replies read by [`super::replies`] where it can (see
    /// [`Link::with_own_parser`]).
    own_parser: bool,
}

impl fmt::Debug for Link {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Link")
            .field("location", &self.location)
            .field("connected", &self.connection.is_some())
            .finish()
    }
}

impl Link {
    /// A link to `location`'s Redis (not yet connected), whose calls time
    /// out after `timeout` (see [`DEFAULT_TIMEOUT`]).
    pub fn new(location: &IndexLocation, timeout: Duration) -> Result<Link, StoreError> {
        let timeout = timeout.max(Duration::from_millis(100));
        let connect_timeout = timeout.min(CONNECT_TIMEOUT);
        let bad = |e: RedisError| StoreError::Location {
            given: location.to_string(),
            reason: e.to_string(),
        };
        let client = match location {
            IndexLocation::Memory => {
                return Err(StoreError::Location {
                    given: location.to_string(),
                    reason: "not a Redis location".into(),
                });
            }
            IndexLocation::Redis(url) => {
                Client::Single(redis::Client::open(url.as_str()).map_err(bad)?)
            }
            IndexLocation::Cluster(urls) => Client::Cluster(
                redis::cluster::ClusterClient::builder(urls.iter().map(String::as_str))
                    .connection_timeout(connect_timeout)
                    .response_timeout(timeout)
                    .build()
                    .map_err(bad)?,
            ),
        };
        Ok(Link {
            client,
            connection: None,
            location: location.to_string(),
            metrics: None,
            stop: None,
            cancel: None,
            timeout,
            wait: None,
            seeds: match location {
                IndexLocation::Cluster(urls) => urls.clone(),
                _ => Vec::new(),
            },
            connections: 0,
            own_parser: false,
        })
    }

    /// A second link to the same Redis, with the same settings, not yet
    /// connected: for a thread that calls Redis while this link's owner
    /// does too (one connection answers one call at a time).
    pub fn another(&self) -> Link {
        Link {
            client: self.client.clone(),
            connection: None,
            location: self.location.clone(),
            metrics: self.metrics.clone(),
            stop: self.stop.clone(),
            cancel: None,
            timeout: self.timeout,
            wait: self.wait,
            seeds: self.seeds.clone(),
            connections: 0,
            own_parser: false,
        }
    }

    /// Reads replies with a parser of this crate's (`redis_index::replies`)
    /// when the link reaches a single Redis over TCP without TLS or a Unix
    /// socket: for a link that reads many entries at a time, whose parsing
    /// by the `redis` crate costs as much as deciding them.
    pub fn with_own_parser(mut self) -> Link {
        self.own_parser = true;
        self
    }

    /// Waits out an outage for at most `wait` (`--redis-wait`), then gives
    /// up with [`RetryError::Stopped`].
    pub fn with_wait(mut self, wait: Option<Duration>) -> Link {
        self.wait = wait;
        self
    }

    /// A cluster location whose seed node answers but is not a cluster
    /// (`cluster_enabled:0`) would never connect: say so. Seeds that do not
    /// answer are waited for as any outage.
    fn check_cluster_seeds(&mut self) -> Result<(), RedisError> {
        for seed in std::mem::take(&mut self.seeds) {
            let Ok(client) = redis::Client::open(seed.as_str()) else {
                continue;
            };
            let Ok(mut con) = client.get_connection_with_timeout(CONNECT_TIMEOUT) else {
                continue;
            };
            if let Ok(info) = redis::cmd("INFO").arg("cluster").query::<String>(&mut con)
                && info.contains("cluster_enabled:0")
            {
                return Err(RedisError::from((
                    ErrorKind::InvalidClientConfig,
                    "not a Redis Cluster",
                    format!(
                        "{} answers but has cluster mode off (cluster_enabled:0): use \
                         redis://HOST:PORT for a single Redis",
                        redact_url(&seed)
                    ),
                )));
            }
        }
        Ok(())
    }

    /// Reports reachability and errors to `metrics`.
    pub fn with_metrics(mut self, metrics: Arc<Metrics>) -> Link {
        // The store's series say something now: export them.
        metrics.uses_redis.store(true, Ordering::Relaxed);
        self.metrics = Some(metrics);
        self
    }

    /// Stops waiting out an outage once `stop` is set.
    pub fn with_stop(mut self, stop: Arc<AtomicBool>) -> Link {
        self.stop = Some(stop);
        self
    }

    /// Also stops waiting out an outage once `cancel` is set: for a link
    /// of a thread working ahead of another (reading the index's log),
    /// which the other may stop wanting while Redis is away, and then
    /// must not wait for.
    pub fn with_cancel(mut self, cancel: Arc<AtomicBool>) -> Link {
        self.cancel = Some(cancel);
        self
    }

    /// What the link reaches.
    pub fn location(&self) -> &str {
        &self.location
    }

    /// How many connections the link has made: it changes when a
    /// connection broke and was made again.
    pub fn connections(&self) -> u64 {
        self.connections
    }

    /// Time Redis has to answer a call.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    fn connect(&mut self) -> RedisResult<&mut Connection> {
        if self.connection.is_none() {
            let connection = match &self.client {
                Client::Single(client)
                    if self.own_parser && PlainConnection::serves(client.get_connection_info()) =>
                {
                    // Probed as the crate's connection is: a server that
                    // accepts and never answers is named, within the budget.
                    let budget = self.timeout.min(CONNECT_TIMEOUT);
                    probe_single(client, budget)?;
                    Connection::Plain(PlainConnection::open(
                        client.get_connection_info(),
                        budget,
                        self.timeout,
                    )?)
                }
                Client::Single(client) => {
                    let c = connect_single(client, self.timeout)?;
                    c.set_read_timeout(Some(self.timeout))?;
                    c.set_write_timeout(Some(self.timeout))?;
                    Connection::Single(c)
                }
                Client::Cluster(client) => Connection::Cluster(Box::new(client.get_connection()?)),
            };
            self.connection = Some(connection);
            self.connections += 1;
        }
        Ok(self.connection.as_mut().expect("connected just above"))
    }

    /// Runs `call` once on the connection (connecting first if need be);
    /// an error drops the connection so the next call makes a new one.
    pub fn once<T>(
        &mut self,
        call: impl FnOnce(&mut dyn ConnectionLike) -> RedisResult<T>,
    ) -> RedisResult<T> {
        if let Some(metrics) = &self.metrics {
            metrics.store_calls.fetch_add(1, Ordering::Relaxed);
        }
        let result = self.connect().and_then(|c| call(c.as_dyn()));
        if result.as_ref().is_err_and(is_transient) {
            self.connection = None;
        }
        result
    }

    /// Runs `call` until it succeeds or fails for a reason waiting will not
    /// cure. While Redis cannot be reached it waits with growing pauses,
    /// says so on stderr (at once, then every ten seconds) and in the
    /// metrics, and tells `call` it is a retry (`true`), so that what it
    /// sends can be made safe to repeat. Gives up only when told to stop.
    pub fn retry<T>(
        &mut self,
        what: &str,
        mut call: impl FnMut(&mut dyn ConnectionLike, bool) -> RedisResult<T>,
    ) -> Result<T, RetryError> {
        if !self.seeds.is_empty() {
            self.check_cluster_seeds().map_err(RetryError::Failed)?;
        }
        let mut wait = BACKOFF.0;
        let mut down_since: Option<Instant> = None;
        let mut last_report = Instant::now();
        let mut attempts = 0u64;
        loop {
            let retry = attempts > 0;
            attempts += 1;
            // An outage is timed from the start of the first call that
            // failed, not its end: a server that accepts and never answers
            // takes a whole timeout to fail, and that counts towards the
            // wait.
            let attempt_started = Instant::now();
            match self.once(|c| call(c, retry)) {
                Ok(value) => {
                    self.recovered(down_since, what);
                    return Ok(value);
                }
                Err(e) if interrupted(&e) => {
                    // A signal (most likely the stop request) cut the call
                    // short (EINTR): not an outage, so neither reported nor
                    // counted. The call may still have run: its reply is
                    // lost with the connection, which is made again, and
                    // the call repeated, as every call here may be. Giving
                    // up instead left a stopping worker's batches in flight
                    // undecided and pending (1 stop in 10 or so of
                    // `a_worker_stopped_mid_stream_decides_the_batch_it_read_ahead`).
                    self.connection = None;
                }
                Err(e) if is_transient(&e) => {
                    if let Some(metrics) = &self.metrics {
                        metrics.store_errors.fetch_add(1, Ordering::Relaxed);
                    }
                    match down_since {
                        None => {
                            down_since = Some(attempt_started);
                            last_report = Instant::now();
                            self.set_unreachable(true);
                            tracing::warn!(
                                redis = %self.location,
                                error = %e,
                                "Redis cannot be reached; {what} waits and retries"
                            );
                        }
                        Some(since) if last_report.elapsed() >= REPORT_EVERY => {
                            last_report = Instant::now();
                            tracing::warn!(
                                redis = %self.location,
                                error = %e,
                                seconds = since.elapsed().as_secs(),
                                attempts,
                                "Redis still cannot be reached; {what} is waiting"
                            );
                        }
                        Some(_) => {}
                    }
                    if self.stopping()
                        || self
                            .wait
                            .zip(down_since)
                            .is_some_and(|(limit, since)| since.elapsed() >= limit)
                    {
                        return Err(RetryError::Stopped(e));
                    }
                    std::thread::sleep(wait);
                    wait = (wait * 2).min(BACKOFF.1);
                }
                Err(e) => {
                    // Redis answered: it is reachable, whatever it said.
                    self.recovered(down_since, what);
                    if let Some(metrics) = &self.metrics {
                        metrics.store_errors.fetch_add(1, Ordering::Relaxed);
                    }
                    return Err(RetryError::Failed(e));
                }
            }
        }
    }

    /// Whether the worker was told to stop.
    fn stopping(&self) -> bool {
        [&self.stop, &self.cancel]
            .into_iter()
            .flatten()
            .any(|s| s.load(Ordering::Relaxed))
    }

    /// Says so when Redis answers again after an outage.
    fn recovered(&self, down_since: Option<Instant>, what: &str) {
        if let Some(since) = down_since {
            tracing::warn!(
                redis = %self.location,
                seconds = since.elapsed().as_secs_f64(),
                "Redis is reachable again; {what} resumes"
            );
            self.set_unreachable(false);
        }
    }

    fn set_unreachable(&self, unreachable: bool) {
        if let Some(metrics) = &self.metrics {
            metrics
                .store_unreachable
                .store(u64::from(unreachable), Ordering::Relaxed);
        }
    }
}

/// A connection to one Redis server, made within `timeout` (at most
/// [`CONNECT_TIMEOUT`]) whatever the peer does.
///
/// The `redis` client bounds only the TCP connect and its own set-up
/// commands, not a TLS handshake: `rediss://` to a port that does not
/// speak TLS (a plain Redis waits for a line end that never comes) or that
/// accepts and never answers would hang for ever. So a TCP location is
/// first probed on a connection of its own, every step under the deadline:
/// the TLS handshake for `rediss://`, then one `PING`, whose answer (any
/// answer, `-NOAUTH` included) shows the server speaks. What fails is
/// named ("did not answer the TLS handshake … is it a TLS port?"), as an
/// I/O error, so that it is waited out for `--redis-wait` like any outage.
/// Only then does the client connect, to a server that just answered.
pub(crate) fn connect_single(
    client: &redis::Client,
    timeout: Duration,
) -> RedisResult<redis::Connection> {
    let budget = timeout.min(CONNECT_TIMEOUT);
    probe_single(client, budget)?;
    client.get_connection_with_timeout(budget)
}

/// Probes a TCP location (see [`connect_single`]); other locations need
/// no probe.
fn probe_single(client: &redis::Client, budget: Duration) -> RedisResult<()> {
    match client.get_connection_info().addr() {
        ConnectionAddr::Tcp(host, port) => probe(host, *port, false, budget),
        ConnectionAddr::TcpTls { host, port, .. } => probe(host, *port, true, budget),
        _ => Ok(()),
    }
}

/// Whether the server at `host:port` answers within `budget`: see
/// [`connect_single`]. The probe checks no certificate (the client that
/// connects next does) and sends no credentials.
fn probe(host: &str, port: u16, tls: bool, budget: Duration) -> RedisResult<()> {
    let deadline = Instant::now() + budget;
    // A zero timeout means "none" to the socket calls: keep it above zero.
    let left = || {
        deadline
            .saturating_duration_since(Instant::now())
            .max(Duration::from_millis(1))
    };
    let mut tcp = None;
    let mut last_error = None;
    for addr in (host, port).to_socket_addrs()? {
        match TcpStream::connect_timeout(&addr, left()) {
            Ok(stream) => {
                tcp = Some(stream);
                break;
            }
            Err(e) => last_error = Some(e),
        }
    }
    let tcp = match (tcp, last_error) {
        (Some(tcp), _) => tcp,
        (None, Some(e)) => return Err(e.into()),
        (None, None) => {
            return Err(RedisError::from((
                ErrorKind::InvalidClientConfig,
                "could not resolve to any addresses",
            )));
        }
    };
    tcp.set_read_timeout(Some(left()))?;
    tcp.set_write_timeout(Some(left()))?;
    let server = format!("{host}:{port}");
    if !tls {
        return answers(tcp, &server, budget);
    }
    let connector = native_tls::TlsConnector::builder()
        .danger_accept_invalid_certs(true)
        .danger_accept_invalid_hostnames(true)
        .build()
        .map_err(|e| io::Error::other(format!("TLS cannot be set up: {e}")))?;
    match connector.connect(host, tcp) {
        Ok(stream) => {
            stream.get_ref().set_read_timeout(Some(left()))?;
            stream.get_ref().set_write_timeout(Some(left()))?;
            answers(stream, &server, budget)
        }
        // A blocking socket whose timeout ran out mid-handshake.
        Err(native_tls::HandshakeError::WouldBlock(_)) => Err(io::Error::new(
            io::ErrorKind::TimedOut,
            format!(
                "the server at {server} did not answer the TLS handshake within {budget:?}: \
                 is it a TLS port?"
            ),
        )
        .into()),
        Err(native_tls::HandshakeError::Failure(e)) => Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "the server at {server} did not answer the TLS handshake ({e}): is it a TLS \
                 port?"
            ),
        )
        .into()),
    }
}

/// Sends `PING` and waits for the first byte of an answer.
fn answers(mut stream: impl Read + Write, server: &str, budget: Duration) -> RedisResult<()> {
    let silent = || {
        io::Error::new(
            io::ErrorKind::TimedOut,
            format!(
                "the server at {server} accepted the connection but did not answer within {budget:?}"
            ),
        )
    };
    let mut byte = [0u8; 1];
    let result = stream
        .write_all(b"PING\r\n")
        .and_then(|()| stream.flush())
        .and_then(|()| stream.read(&mut byte));
    match result {
        Ok(0) => Err(io::Error::new(
            io::ErrorKind::ConnectionAborted,
            format!("the server at {server} closed the connection without an answer"),
        )
        .into()),
        Ok(_) => Ok(()),
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
            ) =>
        {
            Err(silent().into())
        }
        Err(e) => Err(e.into()),
    }
}

/// Why [`Link::retry`] gave up.
#[derive(Debug)]
pub enum RetryError {
    /// Redis answered with an error that waiting will not cure.
    Failed(RedisError),
    /// Redis could not be reached, and the worker was told to stop.
    Stopped(RedisError),
}

impl From<RetryError> for StoreError {
    fn from(e: RetryError) -> StoreError {
        match e {
            RetryError::Failed(e) => refused(&e),
            RetryError::Stopped(e) => StoreError::Unavailable(e.to_string()),
        }
    }
}

/// What an error Redis answered means for the user: an authentication
/// failure says how to pass the password; anything else is refused as is.
pub fn refused(e: &RedisError) -> StoreError {
    let text = e.to_string();
    // Redis answers NOAUTH, or WRONGPASS; and to a large request from a
    // client that has not authenticated, "Protocol error: unauthenticated
    // multibulk length" before it closes the connection.
    let auth = matches!(e.code(), Some("NOAUTH" | "WRONGPASS"))
        || e.kind() == ErrorKind::AuthenticationFailed
        || [
            "NOAUTH",
            "WRONGPASS",
            "unauthenticated",
            "Authentication required",
        ]
        .iter()
        .any(|sign| text.contains(sign));
    if auth {
        StoreError::Auth(text)
    } else {
        StoreError::Refused(text)
    }
}

/// Whether a call failed because a signal interrupted it (EINTR): the
/// redis crate keeps the I/O error only as text.
fn interrupted(e: &RedisError) -> bool {
    #[cfg(unix)]
    {
        let eintr = std::io::Error::from_raw_os_error(rustix::io::Errno::INTR.raw_os_error());
        e.is_io_error() && e.to_string().contains(&eintr.to_string())
    }
    #[cfg(not(unix))]
    {
        let _ = e;
        false
    }
}

/// Whether an error is one that waiting and reconnecting cures: the
/// connection failed or timed out, or Redis is loading its data, failing
/// over or resharding.
pub fn is_transient(e: &RedisError) -> bool {
    // A host name that does not resolve will not resolve by waiting.
    if e.to_string()
        .contains("failed to lookup address information")
    {
        return false;
    }
    e.is_io_error()
        || e.is_timeout()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
        || matches!(
            e.kind(),
            ErrorKind::ClusterConnectionNotFound
                | ErrorKind::Server(
                    ServerErrorKind::BusyLoading
                        | ServerErrorKind::TryAgain
                        | ServerErrorKind::ClusterDown
                        | ServerErrorKind::MasterDown
                        | ServerErrorKind::ReadOnly
                        | ServerErrorKind::Moved
                        | ServerErrorKind::Ask
                )
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locations_parse() {
        assert_eq!(
            "memory".parse::<IndexLocation>().unwrap(),
            IndexLocation::Memory
        );
        assert_eq!(
            "redis://127.0.0.1:6379/2".parse::<IndexLocation>().unwrap(),
            IndexLocation::Redis("redis://127.0.0.1:6379/2".into())
        );
        assert_eq!(
            "redis+cluster://10.0.0.1:7000, 10.0.0.2:7001"
                .parse::<IndexLocation>()
                .unwrap(),
            IndexLocation::Cluster(vec![
                "redis://10.0.0.1:7000".into(),
                "redis://10.0.0.2:7001".into()
            ])
        );
        assert!(
            "redis+unix:///run/redis.sock"
                .parse::<IndexLocation>()
                .is_ok()
        );
        for bad in [
            "",
            "mem",
            "http://x",
            "redis+cluster://",
            "redis+cluster://a:1,,b:2",
        ] {
            assert!(bad.parse::<IndexLocation>().is_err(), "{bad}");
        }
    }

    #[test]
    fn passwords_are_never_shown() {
        for (given, shown) in [
            ("redis://:s3cret@h:6379", "redis://:***@h:6379"),
            ("redis://app:s3cret@h:6379/2", "redis://app:***@h:6379/2"),
            ("rediss://app:p%40ss:w@h", "rediss://app:***@h"),
            ("redis://app@h:6379", "redis://app@h:6379"),
            (
                "redis+unix:///run/r.sock?db=1&pass=s3cret",
                "redis+unix:///run/r.sock?db=1&pass=***",
            ),
            (
                "unix:///run/r.sock?user=app&password=s3cret",
                "unix:///run/r.sock?user=app&password=***",
            ),
            (
                "redis+cluster://:s3cret@h:1,h:2",
                "redis+cluster://:***@h:1,h:2",
            ),
        ] {
            let location: IndexLocation = given.parse().unwrap();
            assert_eq!(location.to_string(), shown, "{given}");
            assert_eq!(format!("{location:?}"), format!("IndexLocation({shown})"));
        }
        // Also when the location is refused.
        let refused = "redis+cluster://:s3cret@".parse::<IndexLocation>();
        assert!(!refused.unwrap_err().to_string().contains("s3cret"));
        assert_eq!(redact_url("memory"), "memory");
    }

    #[test]
    fn a_location_prints_as_given() {
        for given in [
            "memory",
            "redis://127.0.0.1:6379",
            "redis+cluster://h:1,h:2",
        ] {
            assert_eq!(given.parse::<IndexLocation>().unwrap().to_string(), given);
        }
    }
}

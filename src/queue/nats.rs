//! `dedup-stream consume --nats`: a worker of a NATS JetStream durable pull
//! consumer.
//!
//! ```text
//!  stream IN ──fetch (pull)──▶ prepare ──▶ index store ──▶ publish OUT (Nats-Msg-Id)  ──▶ AckSync IN
//!   (durable, explicit acks)  (sketch)    (one call)       await every publish ack        (Term for dead
//!                                                          (stored in the output stream)   letters)
//! ```
//!
//! - Each message's payload is one JSON message, tagged exactly as the
//!   filter tags a line and published to the output subject (without the
//!   newline). A leading UTF-8 byte-order mark is skipped; a payload longer
//!   than `--max-line-bytes` is refused, as the filter refuses such a line.
//! - **Exactly once in the output stream.** Each output is published with
//!   the header `Nats-Msg-Id: dedup.STREAM.DURABLE.CREATED.SEQUENCE` (the
//!   input stream's creation time in nanoseconds and the input's stream
//!   sequence: unique across durables and across a stream deleted and made
//!   again). The worker runs on the [`queue`] runtime: a batch's outputs
//!   are sent without waiting, the next batches fetched and decided
//!   meanwhile (up to `--in-flight` batches), and when a batch's turn
//!   comes (the oldest first) every publish acknowledgement is awaited
//!   (the output is stored) and only then are its inputs acknowledged:
//!   plain acks and a double ack of the batch's last (`AckSync`: the
//!   server confirms it, after the acks before it on the connection). A
//!   worker that dies between the two leaves the inputs pending; they are
//!   delivered again after `ack_wait`, the index answers them from its
//!   memo (their first verdict: a message is never "a duplicate of
//!   itself"), and the republish, byte for byte the same, is dropped by
//!   the output stream's duplicate window. That holds while the republish
//!   comes within the window (two minutes by default): a fleet with one
//!   live worker republishes within `ack_wait` and a batch.
//! - Malformed messages (not a JSON object with an id and a text, too long)
//!   are published to the dead-letter subject with the reason in the
//!   header `Dedup-Error` and the original bytes, then terminated
//!   (`AckTerm`): never retried forever.
//! - An output or dead letter the server refuses for its size (over its
//!   `max_payload`, or its stream's `max_msg_size`) is dead-lettered
//!   without its bytes, the reason and the input named in its headers, and
//!   its input terminated. `--max-line-bytes` defaults to `max_payload`
//!   less [`broker::TAG_ROOM`], so that this is rare.
//! - The input stream and (with `--output-stream`) the output stream are
//!   created when missing, and said so; the durable consumer only with
//!   `--create` (a misspelt `--durable` would otherwise read the whole
//!   stream again): without it the worker waits for it, saying so. Existing ones
//!   whose settings conflict with this worker's are refused with
//!   [`NatsError::Conflict`] before anything is read.
//!   Workers that start together may all find them missing: the server
//!   lets one create each, and the others check what it made.
//! - NATS unreachable (a restart, a network cut): the client reconnects by
//!   itself, and every step is retried with backoff, reported on stderr
//!   every ten seconds and in the metrics (`/healthz` answers 503).
//!   Nothing is acknowledged that was not stored.
//! - A stop request (SIGTERM) finishes the batches in flight, acknowledges
//!   them and returns.
//!
//! The engine and the runtime stay synchronous: [`run`] drives the async
//! client on a tokio runtime's [`Handle`] from its own thread.

use std::fmt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use async_nats::connection::State;
use async_nats::jetstream::{self, AckKind, consumer::pull, stream};
use bytes::Bytes;
use futures::StreamExt;
use tokio::runtime::Handle;

use crate::engine::{IndexStore, Preparer};
use crate::error::{InvalidReason, StoreError};
use crate::metrics::Metrics;
pub use crate::queue::Memo;
use crate::queue::batch::{DecidedBatch, Payload};
use crate::queue::broker::{self, Outage};
use crate::queue::nats_acks::{ACK_ROOM, Acks, Stored};
use crate::queue::{self, Settled};
use crate::wire::record::Decoder;

/// Default time the server waits for a delivered message's acknowledgement
/// before it delivers it again (to this worker or another).
pub const DEFAULT_ACK_WAIT: Duration = Duration::from_secs(30);
/// Default messages fetched at a time.
pub const DEFAULT_BATCH: usize = 256;
/// Header of a dead letter that says why its message was refused.
pub const ERROR_HEADER: &str = "Dedup-Error";
/// Header of a dead letter that names its input: `STREAM.SEQUENCE`.
pub const SOURCE_HEADER: &str = "Dedup-Source";
/// Longest wait for a message when none is ready, before looking around
/// (stop requests, progress).
const IDLE_WAIT: Duration = Duration::from_secs(1);
/// Longest time one fetch may take (it asks the server to answer within
/// [`IDLE_WAIT`]).
const FETCH_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest wait for the end of a pull of what is ready: nats-server 2.9
/// holds such a pull unanswered while the durable's `max_ack_pending` is
/// reached (by this worker's batches and other workers' together), and
/// the batches in flight, whose acknowledgements would make room, must not
/// wait behind it. The pull is kept (see [`HeldPull`]), so a pull merely
/// slow to end loses nothing.
const HELD_BACK_AFTER: Duration = Duration::from_millis(200);
/// First and longest wait between two attempts.
const BACKOFF: (Duration, Duration) = (Duration::from_millis(50), Duration::from_secs(2));
/// Longest wait for a batch's publish acknowledgements once its turn
/// comes (the client's own for a JetStream publish): one not answered by
/// then is published again.
const PUBLISH_ACK_WAIT: Duration = Duration::from_secs(5);

/// Why the NATS worker stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NatsError {
    /// The server address or credentials cannot be used.
    #[error("bad NATS server {given}: {reason}")]
    Location {
        /// The address, its password hidden.
        given: String,
        /// What is wrong with it.
        reason: String,
    },
    /// An existing stream or consumer has settings this worker cannot
    /// work with (nothing was read).
    #[error("{0}")]
    Conflict(String),
    /// NATS could not be reached, and the worker was told to stop while
    /// waiting: what was not acknowledged will be delivered again.
    #[error("NATS unreachable while {0}")]
    Unavailable(String),
    /// The server refused a request outright.
    #[error("NATS refused {what}: {reason}")]
    Refused {
        /// The request.
        what: String,
        /// The server's answer.
        reason: String,
    },
    /// The index store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Where the NATS server is and how to log in.
#[derive(Clone)]
pub struct NatsServer {
    /// `nats://[USER:PASSWORD@|TOKEN@]HOST:PORT` or `tls://…`; several
    /// separated by commas.
    pub url: String,
    /// A credentials file (JWT and NKey seed, as `nsc` writes them).
    pub creds: Option<PathBuf>,
    /// A CA certificate (PEM) to verify the server's TLS certificate with.
    pub ca: Option<PathBuf>,
}

impl fmt::Display for NatsServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&redact(&self.url))
    }
}

/// As `Display`: a derived `Debug` would print the password.
impl fmt::Debug for NatsServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "NatsServer({self})")
    }
}

/// A server URL with its password or token replaced by `***`: URLs are
/// printed in logs and errors, secrets never.
pub fn redact(url: &str) -> String {
    url.split(',')
        .map(|one| {
            let (scheme, rest) = one.split_once("://").unwrap_or(("", one));
            let Some((auth, host)) = rest.rsplit_once('@') else {
                return one.to_string();
            };
            let auth = match auth.split_once(':') {
                Some((user, _)) => format!("{user}:***"),
                // A lone name before the host is a token.
                None => "***".to_string(),
            };
            if scheme.is_empty() {
                format!("{auth}@{host}")
            } else {
                format!("{scheme}://{auth}@{host}")
            }
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// How the worker runs (the engine's settings are in the [`Preparer`] and
/// the index store).
#[derive(Clone, Debug)]
pub struct NatsConfig {
    /// The JetStream stream read (created on `subject` if missing).
    pub stream: String,
    /// The subject read (the consumer's filter).
    pub subject: String,
    /// The durable pull consumer's name: workers of one name share its
    /// messages.
    pub durable: String,
    /// Create the durable consumer when it is missing (`--create`);
    /// otherwise wait for it to appear.
    pub create: bool,
    /// The subject tagged messages are published to.
    pub output_subject: String,
    /// The stream that stores them: created on the output and dead-letter
    /// subjects if missing. `None`: a stream must already take them.
    pub output_stream: Option<String>,
    /// The subject malformed messages are published to.
    pub dead_letter_subject: String,
    /// The options every worker takes, whatever its broker.
    pub options: queue::Options,
    /// Longest message, in bytes (`--max-line-bytes`); `None`: the
    /// server's `max_payload` less [`broker::TAG_ROOM`].
    pub max_line_bytes: Option<usize>,
    /// Time the server waits for an acknowledgement before delivering a
    /// message again (the consumer's `ack_wait`).
    pub ack_wait: Duration,
}

/// What a run did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NatsSummary {
    /// Messages fetched (deliveries: a redelivered message counts again).
    pub read: u64,
    /// Of those, delivered more than once.
    pub redelivered: u64,
    /// Messages tagged new.
    pub new: u64,
    /// Messages tagged duplicate.
    pub duplicates: u64,
    /// Deletion notices, passed on tagged (their ids forgotten).
    pub deletions: u64,
    /// Messages sent to the dead-letter subject.
    pub invalid: u64,
    /// Of those, messages whose output the server refused for its size.
    pub too_large: u64,
    /// Outputs the output stream already held (a republish after a
    /// redelivery), dropped by its duplicate window.
    pub republished: u64,
    /// Messages acknowledged (terminated ones included).
    pub acked: u64,
}

impl fmt::Display for NatsSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} messages read ({} redelivered): {} new, {} duplicates, {} invalid; \
             {} outputs already stored; {} acknowledged",
            self.read,
            self.redelivered,
            self.new,
            self.duplicates,
            self.invalid,
            self.republished,
            self.acked
        )?;
        if self.too_large > 0 {
            write!(f, "; {} outputs too large to store", self.too_large)?;
        }
        if self.deletions > 0 {
            write!(f, "; {} deletion notices", self.deletions)?;
        }
        Ok(())
    }
}

/// Connects to the server: the client connects in the background and
/// reconnects for ever, so a server that is down at the start is waited
/// for (and reported) like one that goes down later.
pub async fn connect(server: &NatsServer) -> Result<async_nats::Client, NatsError> {
    let bad = |reason: String| NatsError::Location {
        given: server.to_string(),
        reason,
    };
    let mut options = async_nats::ConnectOptions::new()
        .name("dedup-stream")
        .retry_on_initial_connect()
        .max_reconnects(None::<usize>)
        .subscription_capacity(ACK_ROOM)
        .event_callback(|event| async move {
            match event {
                async_nats::Event::Connected => tracing::info!("connected to NATS"),
                async_nats::Event::Disconnected => {
                    tracing::warn!("disconnected from NATS: reconnecting")
                }
                other => tracing::debug!(event = %other, "NATS"),
            }
        });
    if let Some(creds) = &server.creds {
        options = options
            .credentials_file(creds)
            .await
            .map_err(|e| bad(format!("credentials file {}: {e}", creds.display())))?;
    }
    if let Some(ca) = &server.ca {
        options = options.add_root_certificates(ca.clone()).require_tls(true);
    }
    // The client does not log in with credentials written in the URL:
    // they are taken out of it and given as options.
    let (urls, auth) = split_auth(&server.url);
    match auth {
        Some((user, Some(password))) => options = options.user_and_password(user, password),
        Some((token, None)) => options = options.token(token),
        None => {}
    }
    options
        .connect(urls.as_str())
        .await
        .map_err(|e| bad(e.to_string()))
}

/// A server list without its credentials, and the first credentials
/// found: `(user, Some(password))` or `(token, None)`.
pub fn split_auth(urls: &str) -> (String, Option<(String, Option<String>)>) {
    let mut auth = None;
    let bare: Vec<String> = urls
        .split(',')
        .map(|one| {
            let one = one.trim();
            let (scheme, rest) = match one.split_once("://") {
                Some((scheme, rest)) => (format!("{scheme}://"), rest),
                None => (String::new(), one),
            };
            match rest.rsplit_once('@') {
                Some((credentials, host)) => {
                    if auth.is_none() {
                        auth = Some(match credentials.split_once(':') {
                            Some((user, password)) => {
                                (user.to_string(), Some(password.to_string()))
                            }
                            None => (credentials.to_string(), None),
                        });
                    }
                    format!("{scheme}{host}")
                }
                None => one.to_string(),
            }
        })
        .collect();
    (bare.join(","), auth)
}

/// Whether `subject` is among those `pattern` takes (`*`: one token, `>`:
/// one or more at the end).
pub fn subject_matches(pattern: &str, subject: &str) -> bool {
    let mut tokens = subject.split('.');
    for want in pattern.split('.') {
        match (want, tokens.next()) {
            (">", Some(_)) => return true,
            ("*", Some(_)) => {}
            (want, Some(token)) if want == token => {}
            _ => return false,
        }
    }
    tokens.next().is_none()
}

/// The messages' memo scope for an index in Redis (see
/// [`RedisOptions::token_scope`](crate::redis_index::RedisOptions::token_scope)).
pub fn token_scope(config: &NatsConfig) -> String {
    format!("nats:{}:{}", config.stream, config.durable)
}

/// Waits out outages: runs `attempt` until it succeeds, retrying with
/// backoff, reporting, and giving up only when `stop` is set.
struct Retry<'a> {
    stop: &'a AtomicBool,
    metrics: &'a Metrics,
}

impl Retry<'_> {
    async fn run<T, E: fmt::Display, F, Fut>(
        &self,
        what: &str,
        mut attempt: F,
    ) -> Result<T, NatsError>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, E>>,
    {
        let mut wait = BACKOFF.0;
        let mut outage = Outage::new("NATS", self.metrics);
        loop {
            match attempt().await {
                Ok(value) => {
                    outage.over(what);
                    return Ok(value);
                }
                Err(e) => {
                    outage.failed(what, &e);
                    if self.stop.load(Ordering::Relaxed) {
                        return Err(NatsError::Unavailable(what.to_string()));
                    }
                    tokio::time::sleep(wait).await;
                    wait = (wait * 2).min(BACKOFF.1);
                }
            }
        }
    }
}

/// One message a batch publishes.
struct Publish<'a> {
    subject: &'a str,
    /// `Nats-Msg-Id`: the output stream stores one message per id.
    id: String,
    /// The payload: shared, not copied, each time the message is sent.
    payload: Bytes,
    /// A dead letter's reason and input (`STREAM.SEQUENCE`), its headers.
    headers: Option<(String, String)>,
    /// Its size as the server counts it against `max_payload`.
    size: usize,
    /// A dead letter (rather than an output), and whether it carries its
    /// input's bytes.
    dead: Option<bool>,
    /// The input it answers: its place in the batch.
    input: usize,
}

impl<'a> Publish<'a> {
    /// The message to `subject` with `payload`, and for a dead letter the
    /// reason and the input (`STREAM.SEQUENCE`) in its headers.
    fn new(
        subject: &'a str,
        id: String,
        payload: Bytes,
        dead: Option<(&str, &str)>,
        input: usize,
    ) -> Publish<'a> {
        // As the server counts it: the payload and the headers block
        // (`NATS/1.0`, one `Name: value` line per header, a blank line).
        let header = |name: &str, value: &str| name.len() + value.len() + 4;
        let mut size = payload.len() + "NATS/1.0\r\n\r\n".len() + header("Nats-Msg-Id", &id);
        if let Some((reason, source)) = dead {
            size += header(ERROR_HEADER, reason) + header(SOURCE_HEADER, source);
        }
        Publish {
            subject,
            id,
            dead: dead.map(|_| !payload.is_empty()),
            payload,
            headers: dead.map(|(reason, source)| (reason.to_string(), source.to_string())),
            size,
            input,
        }
    }

    /// The headers the message is sent with. Built for each send rather
    /// than kept and cloned: a clone copies the map, a build makes one.
    fn headers(&self) -> async_nats::HeaderMap {
        let mut headers = async_nats::HeaderMap::new();
        headers.insert(async_nats::header::NATS_MESSAGE_ID, self.id.as_str());
        if let Some((reason, source)) = &self.headers {
            headers.insert(ERROR_HEADER, reason.as_str());
            headers.insert(SOURCE_HEADER, source.as_str());
        }
        headers
    }
}

/// The answer to a request that may be refused for good (`Err` inside) or
/// fail for now (`Err` outside, retried).
type Answer<T> = Result<Result<T, NatsError>, async_nats::Error>;

/// Looks up a stream's subjects and duplicate window; `None` if missing.
async fn stream_info(
    js: &jetstream::Context,
    name: &str,
) -> Answer<Option<(Vec<String>, Duration)>> {
    use jetstream::context::GetStreamErrorKind as Kind;
    match js.get_stream(name).await {
        Ok(stream) => {
            let config = &stream.cached_info().config;
            Ok(Ok(Some((config.subjects.clone(), config.duplicate_window))))
        }
        Err(e) => match e.kind() {
            Kind::JetStream(j) if j.error_code() == jetstream::ErrorCode::STREAM_NOT_FOUND => {
                Ok(Ok(None))
            }
            Kind::JetStream(_) | Kind::EmptyName | Kind::InvalidStreamName => {
                Ok(Err(NatsError::Refused {
                    what: format!("looking up stream {name:?}"),
                    reason: e.to_string(),
                }))
            }
            _ => Err(Box::new(e)),
        },
    }
}

/// Makes the stream `name` on `subjects` if it is missing (saying so), or
/// checks that the existing one takes them; returns its duplicate window.
///
/// Workers of a fleet often start together, and each may find the stream
/// missing: the server refuses all creations but the first ("subjects
/// overlap", "name already in use"). A worker whose creation is refused
/// therefore looks again, and checks the stream another worker made as it
/// checks any existing one; only a stream still missing is a refusal.
async fn ensure_stream(
    js: &jetstream::Context,
    retry: &Retry<'_>,
    name: &str,
    subjects: &[&str],
    role: &str,
) -> Result<Duration, NatsError> {
    let mut looked_again = false;
    loop {
        let found = retry
            .run("looking up the streams", || stream_info(js, name))
            .await??;
        if let Some((taken, window)) = found {
            for subject in subjects {
                if !taken.iter().any(|p| subject_matches(p, subject)) {
                    return Err(NatsError::Conflict(format!(
                        "stream {name:?} (the {role}) exists with subjects {taken:?}, which do \
                         not take {subject:?}: add the subject to it, or name another stream"
                    )));
                }
            }
            return Ok(window);
        }
        match create_stream(js, retry, name, subjects).await? {
            Ok(window) => {
                tracing::info!(stream = name, subjects = ?subjects, "created the {role} (it was missing)");
                return Ok(window);
            }
            Err(refused) if looked_again => return Err(refused),
            Err(_) => looked_again = true,
        }
    }
}

/// Asks the server to create the stream `name` on `subjects`: its
/// duplicate window, or the server's refusal (`Err` inside).
async fn create_stream(
    js: &jetstream::Context,
    retry: &Retry<'_>,
    name: &str,
    subjects: &[&str],
) -> Result<Result<Duration, NatsError>, NatsError> {
    let config = stream::Config {
        name: name.to_string(),
        subjects: subjects.iter().map(|s| s.to_string()).collect(),
        storage: stream::StorageType::File,
        ..Default::default()
    };
    retry
        .run("creating a stream", || {
            let config = config.clone();
            async move {
                match js.create_stream(config).await {
                    Ok(stream) => Ok(Ok(stream.cached_info().config.duplicate_window)),
                    Err(e) => match e.kind() {
                        jetstream::context::CreateStreamErrorKind::JetStream(_) => {
                            Ok(Err(NatsError::Refused {
                                what: format!("creating stream {name:?} on {subjects:?}"),
                                reason: e.to_string(),
                            }))
                        }
                        _ => Err(async_nats::Error::from(e)),
                    },
                }
            }
        })
        .await
}

/// The consumer a worker reads and the input stream's incarnation.
struct Reader {
    consumer: jetstream::consumer::PullConsumer,
    /// `STREAM.DURABLE.CREATED`: what an output's `Nats-Msg-Id` starts
    /// with (and its memo token, without the names), so that neither two
    /// durables on one stream nor a stream made again (its sequences
    /// starting at 1 again) reuse an id the output stream has seen.
    incarnation: String,
    /// The input stream's creation time, in nanoseconds since 1970.
    created: i128,
    /// The consumer's creation time: a consumer made again (with its
    /// stream, or alone) has another.
    consumer_created: i128,
}

/// Makes the streams and the consumer this worker needs, or checks the
/// existing ones (see the module documentation); returns the consumer.
async fn setup(
    js: &jetstream::Context,
    config: &NatsConfig,
    retry: &Retry<'_>,
) -> Result<Reader, NatsError> {
    for subject in [&config.output_subject, &config.dead_letter_subject] {
        if subject_matches(&config.subject, subject) {
            return Err(NatsError::Conflict(format!(
                "the input subject {:?} takes {subject:?}: the worker would read its own \
                 output; publish to a subject outside it",
                config.subject
            )));
        }
    }
    ensure_stream(
        js,
        retry,
        &config.stream,
        &[&config.subject],
        "input stream",
    )
    .await?;
    let outputs = [
        config.output_subject.as_str(),
        config.dead_letter_subject.as_str(),
    ];
    match &config.output_stream {
        Some(name) => {
            let window = ensure_stream(js, retry, name, &outputs, "output stream").await?;
            if window.is_zero() || window < config.ack_wait * 2 {
                tracing::warn!(
                    stream = %name,
                    duplicate_window_seconds = window.as_secs(),
                    ack_wait_seconds = config.ack_wait.as_secs(),
                    "the output stream's duplicate window is short beside --ack-wait: a \
                     message delivered again after it would be published twice"
                );
            }
        }
        None => {
            for subject in outputs {
                let found = retry
                    .run("looking up the output stream", || async move {
                        match js.stream_by_subject(subject).await {
                            Ok(name) => Ok(Ok(name)),
                            Err(e) => match e.kind() {
                                jetstream::context::GetStreamByNameErrorKind::NotFound => {
                                    Ok(Err(NatsError::Conflict(format!(
                                        "no stream stores {subject:?}: name one with \
                                         --output-stream (created if missing) or create it"
                                    ))))
                                }
                                _ => Err(async_nats::Error::from(e)),
                            },
                        }
                    })
                    .await??;
                tracing::debug!(subject, stream = %found, "output stored");
            }
        }
    }
    let stream = retry
        .run("opening the input stream", || js.get_stream(&config.stream))
        .await?;
    let created = stream.cached_info().created.unix_timestamp_nanos();
    // As with streams, workers starting together may each find the
    // consumer missing: one whose creation is refused looks again.
    let mut looked_again = false;
    let mut waiting = false;
    loop {
        if let Some(found) = consumer_config(&stream, retry, &config.durable).await? {
            check_consumer(&found, config)?;
            if waiting {
                tracing::info!(durable = %config.durable, "the durable consumer exists now");
            }
            break;
        }
        if !config.create {
            // A misspelt --durable must not read the whole stream again
            // under a new name: wait, as for a missing Redis stream.
            if !waiting {
                waiting = true;
                tracing::warn!(
                    stream = %config.stream,
                    durable = %config.durable,
                    "the durable consumer {:?} does not exist on stream {:?}: waiting for it to \
                     appear (pass --create to create it)",
                    config.durable,
                    config.stream
                );
            }
            if retry.stop.load(Ordering::Relaxed) {
                return Err(NatsError::Unavailable(format!(
                    "waiting for the durable consumer {:?} to exist",
                    config.durable
                )));
            }
            tokio::time::sleep(IDLE_WAIT).await;
            continue;
        }
        match create_consumer(&stream, retry, config).await? {
            Ok(()) => {
                tracing::info!(
                    stream = %config.stream,
                    durable = %config.durable,
                    subject = %config.subject,
                    "created the durable consumer (it was missing)"
                );
                break;
            }
            Err(refused) if looked_again => return Err(refused),
            Err(_) => looked_again = true,
        }
    }
    let consumer: jetstream::consumer::PullConsumer = retry
        .run("opening the consumer", || {
            stream.get_consumer::<pull::Config>(&config.durable)
        })
        .await?;
    // The consumer lives on the stream read above only if that stream is
    // still the one there now (a consumer dies with its stream).
    let again = retry
        .run("opening the input stream", || js.get_stream(&config.stream))
        .await?;
    if again.cached_info().created.unix_timestamp_nanos() != created {
        return Err(NatsError::Unavailable(
            "the input stream was made again while setting up".into(),
        ));
    }
    Ok(Reader {
        consumer_created: consumer.cached_info().created.unix_timestamp_nanos(),
        consumer,
        incarnation: format!("{}.{}.{created}", config.stream, config.durable),
        created,
    })
}

/// [`setup`], again while the input stream is made again under it.
async fn set_up(
    js: &jetstream::Context,
    config: &NatsConfig,
    retry: &Retry<'_>,
) -> Result<Reader, NatsError> {
    loop {
        match setup(js, config, retry).await {
            Err(NatsError::Unavailable(why)) if !retry.stop.load(Ordering::Relaxed) => {
                tracing::info!("{why}: setting up again");
            }
            other => return other,
        }
    }
}

/// The settings of the durable consumer `name`; `None` if missing.
async fn consumer_config(
    stream: &jetstream::stream::Stream,
    retry: &Retry<'_>,
    name: &str,
) -> Result<Option<jetstream::consumer::Config>, NatsError> {
    retry
        .run("looking up the consumer", || async {
            use jetstream::context::ConsumerInfoErrorKind as Kind;
            match stream.consumer_info(name).await {
                Ok(info) => Ok(Ok(Some(info.config))),
                Err(e) => match e.kind() {
                    Kind::NotFound => Ok(Ok(None)),
                    Kind::InvalidName | Kind::JetStream(_) | Kind::StreamNotFound => {
                        Ok(Err(NatsError::Refused {
                            what: format!("looking up consumer {name:?}"),
                            reason: e.to_string(),
                        }))
                    }
                    _ => Err(async_nats::Error::from(e)),
                },
            }
        })
        .await?
}

/// Asks the server to create this worker's durable pull consumer on
/// `stream`: `Err` inside when the server refuses.
async fn create_consumer(
    stream: &jetstream::stream::Stream,
    retry: &Retry<'_>,
    config: &NatsConfig,
) -> Result<Result<(), NatsError>, NatsError> {
    let consumer = pull::Config {
        durable_name: Some(config.durable.clone()),
        filter_subject: config.subject.clone(),
        ack_policy: jetstream::consumer::AckPolicy::Explicit,
        ack_wait: config.ack_wait,
        // Room for this worker's batches in flight: the server's default
        // (1,000) holds a worker of the default --batch and --in-flight to
        // three batches (see `within_ack_pending`), never less than it.
        max_ack_pending: created_max_ack_pending(config.options.batch, config.options.in_flight),
        ..Default::default()
    };
    retry
        .run("creating the consumer", || async {
            match stream.create_consumer(consumer.clone()).await {
                Ok(_) => Ok(Ok(())),
                Err(e) => match e.kind() {
                    jetstream::stream::ConsumerErrorKind::JetStream(_) => {
                        Ok(Err(NatsError::Refused {
                            what: format!("creating consumer {:?}", config.durable),
                            reason: e.to_string(),
                        }))
                    }
                    _ => Err(async_nats::Error::from(e)),
                },
            }
        })
        .await
}

/// The `max_ack_pending` of a durable the worker creates: its `--in-flight`
/// batches of `--batch` messages, and never below the server's default.
fn created_max_ack_pending(batch: usize, in_flight: usize) -> i64 {
    i64::try_from(batch.max(1).saturating_mul(in_flight.max(1)))
        .unwrap_or(i64::MAX)
        .max(1_000)
}

/// Refuses an existing consumer whose settings are not this worker's.
fn check_consumer(
    found: &jetstream::consumer::Config,
    config: &NatsConfig,
) -> Result<(), NatsError> {
    let mut conflicts = Vec::new();
    if found.deliver_subject.is_some() {
        conflicts.push("it is a push consumer (this worker pulls)".to_string());
    }
    if found.ack_policy != jetstream::consumer::AckPolicy::Explicit {
        conflicts.push(format!(
            "its ack policy is {:?}, not explicit",
            found.ack_policy
        ));
    }
    if found.filter_subject != config.subject {
        conflicts.push(format!(
            "it filters {:?}, not {:?}",
            found.filter_subject, config.subject
        ));
    }
    if found.ack_wait != config.ack_wait {
        conflicts.push(format!(
            "its ack wait is {:?}, not {:?} (--ack-wait)",
            found.ack_wait, config.ack_wait
        ));
    }
    if conflicts.is_empty() {
        return Ok(());
    }
    Err(NatsError::Conflict(format!(
        "consumer {:?} on stream {:?} exists with other settings: {}; start with its settings, \
         name another --durable, or delete it",
        config.durable,
        config.stream,
        conflicts.join("; ")
    )))
}

/// Bytes a fetch asks for at most, so that a batch's memory is bounded
/// whatever its messages' sizes (`--batch` messages of up to `max_payload`
/// each would be gigabytes).
const FETCH_BYTES: usize = 16 << 20;

/// The byte limit of a fetch: [`FETCH_BYTES`], or twice `max_payload` if
/// that is more. The server refuses a pull request outright for a message
/// larger than its limit (subject and headers counted), and would refuse
/// that message to every fetch: the limit must pass the largest message
/// the server takes (`messages_larger_together_than_a_fetchs_bytes_all_come_out`
/// stalls with a limit below its messages).
fn fetch_bytes(max_payload: usize) -> usize {
    FETCH_BYTES.max(max_payload.saturating_mul(2))
}

/// A pull of what was ready that the server has not ended: held back
/// while the durable's `max_ack_pending` is reached (nats-server 2.9
/// answers nothing until there is room). Kept, not dropped: what the
/// server delivers to it later is taken by the next fetch, where a
/// dropped pull's deliveries would wait out the ack wait to come again.
struct HeldPull {
    batch: pull::Batch,
    /// When the pull was made.
    since: Instant,
}

/// Fetches a batch of at most `max` messages and `max_bytes` bytes: what
/// is ready now (or what a pull held back has delivered since), else
/// (unless `wait` is zero) waits up to `wait` for one message and takes
/// what is ready with it. Low latency when the stream is quiet, full
/// batches when it is busy. A pull of what is ready that has not ended
/// within [`HELD_BACK_AFTER`] is handed back to be taken up again.
async fn fetch(
    consumer: &jetstream::consumer::PullConsumer,
    held: Option<HeldPull>,
    (max, max_bytes): (usize, usize),
    wait: Duration,
    out: &mut Vec<jetstream::Message>,
) -> Result<Option<HeldPull>, async_nats::Error> {
    let mut ready = match held {
        Some(held) => held,
        None => HeldPull {
            batch: consumer
                .fetch()
                .max_messages(max)
                .max_bytes(max_bytes)
                .messages()
                .await?,
            since: Instant::now(),
        },
    };
    let limit = if wait.is_zero() {
        HELD_BACK_AFTER
    } else {
        wait.max(HELD_BACK_AFTER)
    };
    match tokio::time::timeout(limit, take(&mut ready.batch, out)).await {
        Ok(ended) => ended?,
        Err(_) => return Ok(Some(ready)),
    }
    if out.is_empty() && !wait.is_zero() {
        let mut first = consumer
            .batch()
            .max_messages(1)
            .max_bytes(max_bytes)
            .expires(wait)
            .messages()
            .await?;
        take(&mut first, out).await?;
        if !out.is_empty() && max > 1 {
            let mut ready = consumer
                .fetch()
                .max_messages(max - 1)
                .max_bytes(max_bytes)
                .messages()
                .await?;
            take(&mut ready, out).await?;
        }
    }
    Ok(None)
}

/// The times a JetStream message was delivered and its stream sequence,
/// read from its reply subject: `$JS.ACK.` then `STREAM.CONSUMER.DELIVERED.
/// STREAM_SEQ.CONSUMER_SEQ.TIME.PENDING`, or the same after `DOMAIN.
/// ACCOUNT_HASH.` with more tokens allowed at the end (ADR-15). The client's
/// `Message::info` reads every token, the time into a date too: about
/// 2,700 instructions a message, where these two cost a tenth of that.
fn delivery_of(reply: &str) -> Option<(u64, u64)> {
    let rest = reply.strip_prefix("$JS.ACK.")?;
    let mut tokens: [&[u8]; 10] = [&[]; 10];
    let mut count = 0;
    for token in rest.as_bytes().split(|&b| b == b'.') {
        if count < tokens.len() {
            tokens[count] = token;
        }
        count += 1;
    }
    let first = match count {
        7 => 2,
        9.. => 4,
        _ => return None,
    };
    let number = |token: &[u8]| std::str::from_utf8(token).ok()?.parse::<u64>().ok();
    Some((number(tokens[first])?, number(tokens[first + 1])?))
}

/// The batches that may be in flight at once: `in_flight`, or fewer when
/// the consumer's `max_ack_pending` (the server's default is 1,000; 0 or
/// less: no limit) would hold back the next batch while they wait to be
/// acknowledged. At least one.
fn within_ack_pending(in_flight: usize, batch: usize, max_ack_pending: i64) -> usize {
    match usize::try_from(max_ack_pending) {
        Ok(limit) if limit > 0 => in_flight.min(limit / batch.max(1)).max(1),
        _ => in_flight.max(1),
    }
}

/// Appends what a pull request delivers to `out`. The server holding back
/// because the consumer has `max_ack_pending` messages unacknowledged (its
/// 409 "Exceeded MaxAckPending", which the client gives as an error) ends
/// the request as "nothing more now": the batches in flight are then
/// stored and acknowledged, which lets it deliver again. Taken for a fault,
/// it stalled a worker with more messages in flight than that.
async fn take(
    delivered: &mut pull::Batch,
    out: &mut Vec<jetstream::Message>,
) -> Result<(), async_nats::Error> {
    while let Some(message) = delivered.next().await {
        match message {
            Ok(message) => out.push(message),
            Err(e) if e.to_string().contains("Exceeded MaxAckPending") => break,
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// One message fetched.
pub struct Delivery {
    message: jetstream::Message,
    /// Its input stream sequence.
    sequence: u64,
    /// `CREATED.SEQUENCE`: its memo token. The incarnation is in it, so
    /// that a stream made again reuses sequences, not verdicts.
    token: String,
    /// `dedup.STREAM.DURABLE.CREATED.SEQUENCE`: its output's `Nats-Msg-Id`
    /// (taken when fetched: the consumer may be set up again meanwhile).
    id: String,
    /// Which fetch delivered it, counted from 1.
    fetch: u64,
}

impl queue::Input for Delivery {
    fn payload(&self) -> Option<&[u8]> {
        Some(&self.message.payload)
    }

    fn token(&self) -> &[u8] {
        self.token.as_bytes()
    }
}

/// A batch's outputs and dead letters sent, their publish acknowledgements
/// not yet awaited.
pub struct Pending<'a> {
    publishes: Vec<Publish<'a>>,
    /// Each publish's serial in [`Acks`].
    acks: Vec<u64>,
    /// Which inputs are terminated (`AckTerm`) rather than acknowledged.
    terminate: Vec<bool>,
    /// The batch's input sequences, by input.
    sequences: Vec<u64>,
}

/// The worker's NATS side: the queue runtime's adapter. The client is
/// async; each step runs on the binary's tokio runtime with
/// [`Handle::block_on`] from the worker's own thread.
struct Worker<'a> {
    config: &'a NatsConfig,
    runtime: Handle,
    js: jetstream::Context,
    /// The outputs' publishes, awaiting their acknowledgements.
    acks: Acks,
    retry: Retry<'a>,
    summary: NatsSummary,
    reader: Reader,
    /// The server's `max_payload`.
    max_payload: usize,
    /// Reports of failed fetches.
    reading: Outage<'a>,
    /// The wait before the next fetch after a failed one.
    backoff: Duration,
    /// Which inputs of the batch last stored are terminated.
    terminate: Vec<bool>,
    /// Acknowledgements made since the runtime last asked.
    settled: Settled,
    /// Deliveries the durable's `max_ack_pending` had room for at the last
    /// look (after the last batch fetched); `None`: not known, or no limit.
    room: Option<usize>,
    /// A pull of what is ready the server has not ended.
    held: Option<HeldPull>,
    /// Fetches made so far.
    fetches: u64,
    /// The deliveries of fetches up to this one are acknowledged without
    /// waiting for an answer: the server did not answer an acknowledgement
    /// after they were fetched (see [`Adapter::acknowledge`]).
    unanswered_through: u64,
}

/// Runs the worker on `client`'s server until `stop` is set (or a fatal
/// error): makes or checks the streams and the consumer, then runs the
/// [`queue`] runtime on it: up to `config.options.in_flight` batches published
/// ahead of their acknowledgements. Synchronous: call it from a thread
/// that is not one of `runtime`'s workers (each step of the client is run
/// with [`Handle::block_on`]).
pub fn run<S: IndexStore + ?Sized>(
    runtime: &Handle,
    client: async_nats::Client,
    config: &NatsConfig,
    preparer: &Preparer,
    store: &mut S,
    stop: &AtomicBool,
    metrics: &Metrics,
) -> Result<NatsSummary, NatsError> {
    // Made on the runtime: the context spawns a task.
    let js = runtime.block_on(async { jetstream::new(client.clone()) });
    let acks = runtime
        .block_on(Acks::new(&client))
        .map_err(|e| NatsError::Refused {
            what: "a subscription for publish acknowledgements".into(),
            reason: e.to_string(),
        })?;
    let retry = Retry { stop, metrics };
    let reader = match runtime.block_on(set_up(&js, config, &retry)) {
        // Stopped while waiting for the durable consumer: nothing read.
        Err(NatsError::Unavailable(_)) if stop.load(Ordering::Relaxed) => {
            return Ok(NatsSummary::default());
        }
        other => other?,
    };
    // Setting up talked to the server: its INFO (and limit) is known.
    let max_payload = client.server_info().max_payload;
    let pending_allows = within_ack_pending(
        config.options.in_flight,
        config.options.batch,
        reader.consumer.cached_info().config.max_ack_pending,
    );
    // Every output of the batches in flight may wait, answered and
    // unread, on the subscription of acknowledgements: they must fit.
    let in_flight = pending_allows.min((ACK_ROOM / config.options.batch.max(1)).max(1));
    if in_flight < config.options.in_flight {
        let why = if in_flight < pending_allows {
            format!("their publish acknowledgements ({ACK_ROOM} at most) would not all fit")
        } else {
            "the durable consumer lets fewer wait for their acknowledgement (its \
             max_ack_pending)"
                .to_string()
        };
        tracing::info!(
            in_flight,
            "fewer than --in-flight batches of --batch messages: {why}; {in_flight} batches \
             in flight"
        );
    }
    let settings = queue::Settings {
        in_flight,
        ..config
            .options
            .settings(line_limit(config.max_line_bytes, max_payload), IDLE_WAIT)
    };
    let mut worker = Worker {
        config,
        runtime: runtime.clone(),
        js,
        acks,
        retry,
        summary: NatsSummary::default(),
        reader,
        max_payload,
        reading: Outage::new("NATS", metrics),
        backoff: BACKOFF.0,
        terminate: Vec::new(),
        settled: Settled::default(),
        room: None,
        held: None,
        fetches: 0,
        unanswered_through: 0,
    };
    let decoder = Decoder::new(config.options.fields.clone());
    let engine = queue::Engine {
        preparer,
        decoder: &decoder,
        store,
    };
    let counts = queue::run(&mut worker, engine, settings, stop, metrics)?;
    worker.summary.read = counts.read;
    worker.summary.acked = counts.acknowledged;
    worker.summary.new = counts.verdicts.new;
    worker.summary.duplicates = counts.verdicts.duplicates;
    worker.summary.deletions = counts.verdicts.deletions;
    Ok(worker.summary)
}

impl<'a> Worker<'a> {
    /// Sets the consumer up again (deleted, or its stream made again): the
    /// stream's incarnation is read anew. Told to stop meanwhile, keeps the
    /// one it had: nothing more is fetched.
    fn set_up_again(&mut self) -> Result<(), NatsError> {
        match self
            .runtime
            .block_on(set_up(&self.js, self.config, &self.retry))
        {
            Err(NatsError::Unavailable(_)) if self.retry.stop.load(Ordering::Relaxed) => Ok(()),
            other => {
                self.reader = other?;
                // A pull of the consumer that was.
                self.held = None;
                Ok(())
            }
        }
    }

    /// Counts and reports a dead letter.
    fn dead_lettered(&mut self, sequence: u64, reason: &str) {
        self.summary.invalid += 1;
        let metrics = self.retry.metrics;
        metrics.invalid_lines.fetch_add(1, Ordering::Relaxed);
        metrics.queue_dead_lettered.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(
            stream = %self.config.stream,
            sequence,
            "{reason}: sent to {}",
            self.config.dead_letter_subject
        );
    }

    /// Hands `publishes` to the client without awaiting their
    /// acknowledgements.
    fn send(&mut self, publishes: &[Publish<'_>]) -> Vec<u64> {
        let acks = &mut self.acks;
        self.runtime.block_on(async {
            let mut sent = Vec::with_capacity(publishes.len());
            // A batch's publishes go to one or two subjects: each is made
            // once and shared, not copied for every message.
            let mut subject: Option<async_nats::Subject> = None;
            for publish in publishes {
                let to = match subject.take() {
                    Some(same) if same.as_str() == publish.subject => same,
                    _ => async_nats::Subject::from(publish.subject),
                };
                subject = Some(to.clone());
                let payload = publish.payload.clone();
                sent.push(acks.publish(to, publish.headers(), payload).await);
            }
            sent
        })
    }

    /// The dead letter, without its bytes, that stands for `publish`,
    /// refused for its size (`error`); `Err` when `publish` is one
    /// already: a limit this small leaves nothing to do but stop, loudly.
    fn instead_of(
        &self,
        publish: Publish<'a>,
        error: &str,
        sequences: &[u64],
    ) -> Result<(Publish<'a>, String), NatsError> {
        let source = format!("{}.{}", self.config.stream, sequences[publish.input]);
        if publish.dead == Some(false) {
            return Err(NatsError::Refused {
                what: format!("a dead letter for {source}"),
                reason: error.into(),
            });
        }
        let what = match publish.dead {
            Some(_) => "dead letter",
            None => "tagged output",
        };
        let reason = if publish.size > self.max_payload {
            broker::too_large(
                what,
                publish.size,
                Some((self.max_payload, "the server's max_payload")),
            )
        } else {
            format!("{} ({error})", broker::too_large(what, publish.size, None))
        };
        let config: &'a NatsConfig = self.config;
        let letter = Publish::new(
            &config.dead_letter_subject,
            publish.id,
            Bytes::new(),
            Some((&reason, &source)),
            publish.input,
        );
        Ok((letter, reason))
    }

    /// Acknowledges a batch with one request-reply: every message but the
    /// last with a plain ack (or `AckTerm`), the last with a double ack.
    /// The server takes a consumer's acknowledgements in the order they
    /// come on a connection, so the last one's reply says every one before
    /// it was taken, if they all went over one connection: the client's
    /// count of connections must not change from the first to the reply.
    async fn acknowledge_at_once(&self, inputs: &[Delivery], terminate: &[bool]) -> AtOnce {
        let Some((last, rest)) = inputs.split_last() else {
            return AtOnce::Confirmed;
        };
        let statistics = self.js.client().statistics();
        let connects = statistics.connects.load(Ordering::Relaxed);
        for (input, &terminated) in rest.iter().zip(terminate) {
            if input.message.ack_with(ack_kind(terminated)).await.is_err() {
                return AtOnce::Reconnected;
            }
        }
        let replied = last
            .message
            .double_ack_with(ack_kind(terminate[rest.len()]))
            .await;
        match replied {
            Err(e) => AtOnce::Unanswered(e),
            Ok(()) if statistics.connects.load(Ordering::Relaxed) == connects => AtOnce::Confirmed,
            Ok(()) => AtOnce::Reconnected,
        }
    }

    /// Sends each of `inputs` its acknowledgement without waiting for an
    /// answer: taken if the server still knows the delivery, else it is
    /// delivered again.
    async fn acknowledge_unanswered(&self, inputs: &[Delivery], terminate: &[bool]) {
        for (input, &terminated) in inputs.iter().zip(terminate) {
            // A failure here is a redelivery later, as an unanswered
            // acknowledgement is.
            let _ = input.message.ack_with(ack_kind(terminated)).await;
        }
    }
}

/// What acknowledging a batch at once (see
/// [`Worker::acknowledge_at_once`]) came to.
enum AtOnce {
    /// Every acknowledgement taken.
    Confirmed,
    /// The server answered, but the connection changed meanwhile (or a
    /// plain ack could not be sent): some may be lost.
    Reconnected,
    /// The server did not answer the last one.
    Unanswered(async_nats::Error),
}

/// How an input is acknowledged: `AckTerm` for one dead-lettered.
fn ack_kind(terminated: bool) -> AckKind {
    if terminated {
        AckKind::Term
    } else {
        AckKind::Ack
    }
}

impl<'a> queue::Adapter for Worker<'a> {
    type Input = Delivery;
    type Pending = Pending<'a>;
    type Error = NatsError;

    /// A batch (see [`fetch`]), once the consumer is known to be the one
    /// set up: a consumer deleted and made again between two fetches
    /// (another worker's `--create`) would otherwise have its messages
    /// published under ids of the stream that was, which the output
    /// stream may drop as seen. A failed fetch sets up again.
    ///
    /// With batches in flight (`wait` zero), at most what the durable's
    /// `max_ack_pending` had room for at the last look is asked for, and a
    /// pull the server holds back (see [`HELD_BACK_AFTER`]) ends with what
    /// came: the runtime then acknowledges a batch in flight, which makes
    /// room. Not an outage while the client is connected.
    fn fetch(&mut self, max: usize, wait: Duration) -> Result<Vec<Delivery>, NatsError> {
        let bytes = fetch_bytes(self.max_payload);
        // A batch's acknowledgements must fit the subscription's buffer
        // (with `run`'s cut of the batches in flight, all of theirs do).
        let max = match self.room.take() {
            Some(room) if wait.is_zero() => max.min(room),
            _ => max,
        }
        .min(ACK_ROOM);
        if max == 0 {
            return Ok(Vec::new());
        }
        let consumer = &self.reader.consumer;
        let held = self.held.take();
        let mut messages = Vec::with_capacity(max);
        let fetched = self.runtime.block_on(async {
            // A pull whose server went away may never end by itself.
            tokio::time::timeout(
                FETCH_TIMEOUT,
                fetch(consumer, held, (max, bytes), wait, &mut messages),
            )
            .await
            .unwrap_or_else(|_| Err("no answer to a fetch within 10 s".into()))
        });
        // A pull not ended is held back by the server, or has lost it: an
        // outage only when nothing came of it. One on a lost connection is
        // not kept.
        let connected = self.js.client().connection_state() == State::Connected;
        let fetched = match fetched {
            Ok(Some(held))
                if messages.is_empty() && (!connected || held.since.elapsed() >= FETCH_TIMEOUT) =>
            {
                Err(if connected {
                    "no answer to a fetch within 10 s"
                } else {
                    "no answer to a fetch: not connected"
                }
                .into())
            }
            Ok(held) => {
                self.held = held.filter(|_| connected);
                Ok(())
            }
            Err(e) => Err(e),
        };
        let messages = match fetched {
            Ok(()) => {
                self.reading.over("fetching messages");
                self.backoff = BACKOFF.0;
                messages
            }
            Err(e) => {
                self.reading.failed("fetching messages", &e);
                if !self.retry.stop.load(Ordering::Relaxed) {
                    std::thread::sleep(self.backoff);
                    self.backoff = (self.backoff * 2).min(BACKOFF.1);
                    // The consumer or its stream may be gone (deleted, or
                    // made again with sequences from 1).
                    self.set_up_again()?;
                }
                return Ok(Vec::new());
            }
        };
        if messages.is_empty() {
            return Ok(Vec::new());
        }
        let current = self.runtime.block_on(self.reader.consumer.get_info());
        self.room = current.as_ref().ok().and_then(|info| {
            let limit = usize::try_from(info.config.max_ack_pending).ok()?;
            (limit > 0).then(|| limit.saturating_sub(info.num_ack_pending))
        });
        if current
            .as_ref()
            .map(|info| info.created.unix_timestamp_nanos())
            .ok()
            != Some(self.reader.consumer_created)
        {
            // Not acknowledged: the consumer that holds them delivers them
            // again after the ack wait.
            tracing::warn!(
                durable = %self.config.durable,
                messages = messages.len(),
                "the durable consumer was deleted or made again: setting up again, leaving \
                 the batch fetched to be delivered again"
            );
            self.set_up_again()?;
            return Ok(Vec::new());
        }
        self.fetches += 1;
        let mut deliveries = Vec::with_capacity(messages.len());
        // Each message's token and id are these and its sequence: built
        // without `format!`, which cost about 1,000 instructions each.
        let token_prefix = format!("{}.", self.reader.created);
        let id_prefix = format!("dedup.{}.", self.reader.incarnation);
        let with_sequence = |prefix: &str, sequence: u64| {
            let mut digits = itoa::Buffer::new();
            let digits = digits.format(sequence);
            let mut text = String::with_capacity(prefix.len() + digits.len());
            text.push_str(prefix);
            text.push_str(digits);
            text
        };
        for message in messages {
            let (delivered, sequence) =
                message
                    .reply
                    .as_deref()
                    .and_then(delivery_of)
                    .ok_or_else(|| NatsError::Refused {
                        what: "a delivered message".into(),
                        reason: format!(
                            "its reply subject is not JetStream's: {:?}",
                            message.reply.as_deref()
                        ),
                    })?;
            debug_assert!(
                message.info().is_ok_and(|info| {
                    (u64::try_from(info.delivered).ok(), info.stream_sequence)
                        == (Some(delivered), sequence)
                }),
                "{:?}",
                message.reply
            );
            if delivered > 1 {
                self.summary.redelivered += 1;
                let metrics = self.retry.metrics;
                metrics.queue_claimed.fetch_add(1, Ordering::Relaxed);
            }
            deliveries.push(Delivery {
                token: with_sequence(&token_prefix, sequence),
                id: with_sequence(&id_prefix, sequence),
                sequence,
                message,
                fetch: self.fetches,
            });
        }
        Ok(deliveries)
    }

    /// Sends the batch's outputs and dead letters; their acknowledgements
    /// are awaited when the batch's turn comes.
    fn publish(
        &mut self,
        inputs: &[Delivery],
        decided: &DecidedBatch,
    ) -> Result<Pending<'a>, NatsError> {
        let mut terminate = vec![false; inputs.len()];
        let config: &'a NatsConfig = self.config;
        let mut publishes = Vec::with_capacity(inputs.len());
        for (at, input) in inputs.iter().enumerate() {
            let output =
                |payload| Publish::new(&config.output_subject, input.id.clone(), payload, None, at);
            match decided.payload(at) {
                Payload::Missing if config.options.relay => {
                    publishes.push(output(input.message.payload.clone()));
                }
                Payload::Missing => {}
                Payload::Invalid(invalid) => {
                    let reason = invalid.reason.to_string();
                    self.dead_lettered(input.sequence, &reason);
                    terminate[at] = true;
                    let message = match invalid.reason {
                        // Over the limit: not copied (it may not fit in a
                        // message either); Dedup-Source names it.
                        InvalidReason::TooLong { .. } => Bytes::new(),
                        _ => input.message.payload.clone(),
                    };
                    // A header value is one line.
                    let reason = reason.replace(['\r', '\n'], " ");
                    let source = format!("{}.{}", config.stream, input.sequence);
                    publishes.push(Publish::new(
                        &config.dead_letter_subject,
                        input.id.clone(),
                        message,
                        Some((&reason, &source)),
                        at,
                    ));
                }
                Payload::Message(message, verdict) if config.options.emit.wants(verdict) => {
                    publishes.push(output(decided.tagged(message, verdict).into()));
                }
                Payload::Message(..) => {}
            }
        }
        let acks = self.send(&publishes);
        Ok(Pending {
            publishes,
            acks,
            terminate,
            sequences: inputs.iter().map(|i| i.sequence).collect(),
        })
    }

    /// Awaits the batch's publish acknowledgements, publishing again with
    /// backoff what failed for now (an outage), until each is stored. One
    /// the server refuses for its size is replaced by a dead letter
    /// without its bytes (sending it again would be refused again), and
    /// its input terminated.
    fn stored(&mut self, pending: Pending<'a>) -> Result<(), NatsError> {
        let Pending {
            mut publishes,
            mut acks,
            mut terminate,
            sequences,
        } = pending;
        let mut outage = Outage::new("NATS", self.retry.metrics);
        let mut wait = BACKOFF.0;
        loop {
            let results = self
                .runtime
                .block_on(self.acks.wait(&acks, PUBLISH_ACK_WAIT));
            let mut again = Vec::new();
            let mut error = None;
            for (publish, result) in publishes.into_iter().zip(results) {
                match result {
                    Stored::Yes { duplicate } => self.summary.republished += u64::from(duplicate),
                    Stored::TooLarge(e) => {
                        let input = publish.input;
                        let (letter, reason) = self.instead_of(publish, &e, &sequences)?;
                        self.summary.too_large += 1;
                        if std::mem::replace(&mut terminate[input], true) {
                            // A dead letter already (and counted): sent
                            // without its bytes.
                            tracing::warn!(stream = %self.config.stream, sequence = sequences[input], "{reason}");
                        } else {
                            self.dead_lettered(sequences[input], &reason);
                        }
                        again.push(letter);
                    }
                    Stored::Failed(e) => {
                        error = Some(e);
                        again.push(publish);
                    }
                }
            }
            publishes = again;
            match error {
                None => outage.over("publishing outputs"),
                Some(e) => {
                    outage.failed("publishing outputs", &e);
                    if self.retry.stop.load(Ordering::Relaxed) {
                        return Err(NatsError::Unavailable("publishing outputs".into()));
                    }
                    std::thread::sleep(wait);
                    wait = (wait * 2).min(BACKOFF.1);
                }
            }
            if publishes.is_empty() {
                self.terminate = terminate;
                return Ok(());
            }
            acks = self.send(&publishes);
        }
    }

    /// Acknowledges the batch, whose outputs are stored: at once (see
    /// [`Worker::acknowledge_at_once`]); after a reconnection, each with
    /// its own reply. One whose acknowledgement is not confirmed stays in
    /// the memo: if delivered again (after the ack wait) it is answered as
    /// before and its republish dropped.
    ///
    /// When the server does not answer, every batch fetched until then is
    /// acknowledged without waiting for an answer. A server restarted from
    /// a consumer state older than these deliveries (nats-server 2.10 and
    /// later write it lazily) never answers acknowledgements of deliveries
    /// it no longer knows; waiting out each batch in flight in turn stalled
    /// the worker for minutes while that state's own deliveries waited.
    fn acknowledge(&mut self, inputs: Vec<Delivery>) -> Result<(), NatsError> {
        let terminate = std::mem::take(&mut self.terminate);
        let Some(fetch) = inputs.first().map(|input| input.fetch) else {
            return Ok(());
        };
        let runtime = self.runtime.clone();
        if fetch <= self.unanswered_through {
            runtime.block_on(self.acknowledge_unanswered(&inputs, &terminate));
            self.settled.failed += inputs.len() as u64;
            return Ok(());
        }
        match runtime.block_on(self.acknowledge_at_once(&inputs, &terminate)) {
            AtOnce::Confirmed => {
                self.settled
                    .acknowledged
                    .extend(inputs.into_iter().map(|i| i.token.into_bytes()));
            }
            AtOnce::Reconnected => {
                let results = runtime.block_on(futures::future::join_all(
                    inputs.iter().zip(&terminate).map(|(input, &terminated)| {
                        input.message.double_ack_with(ack_kind(terminated))
                    }),
                ));
                let mut failed = 0;
                for (input, result) in inputs.iter().zip(results) {
                    match result {
                        Ok(()) => self
                            .settled
                            .acknowledged
                            .push(input.token.as_bytes().to_vec()),
                        Err(_) => failed += 1,
                    }
                }
                if failed > 0 {
                    tracing::warn!(
                        messages = failed,
                        "NATS did not answer acknowledgements after reconnecting: the batches \
                         fetched so far are acknowledged without waiting"
                    );
                    self.unanswered_through = self.fetches;
                }
                self.settled.failed += failed;
            }
            AtOnce::Unanswered(e) => {
                tracing::warn!(
                    messages = inputs.len(),
                    "NATS did not answer an acknowledgement ({e}): the batches fetched so far \
                     are acknowledged without waiting; any it does not take are delivered \
                     again and answered as before"
                );
                self.unanswered_through = self.fetches;
                self.settled.failed += inputs.len() as u64;
            }
        }
        Ok(())
    }

    fn settled(&mut self) -> Settled {
        std::mem::take(&mut self.settled)
    }

    /// Nothing is left under way: each batch is acknowledged in turn.
    fn finish(&mut self) -> Result<(), NatsError> {
        Ok(())
    }
}

/// The longest message the worker decides: `--max-line-bytes`, or by
/// default the server's `max_payload` less room for the tag and headers.
fn line_limit(given: Option<usize>, max_payload: usize) -> usize {
    let fits = broker::default_max_line_bytes(max_payload);
    match given {
        None => {
            tracing::info!(
                max_payload,
                max_line_bytes = fits,
                "messages longer than the server's max_payload less room for the tag are \
                 dead-lettered (--max-line-bytes)"
            );
            fits
        }
        Some(given) => {
            if given > fits {
                tracing::warn!(
                    max_payload,
                    max_line_bytes = given,
                    "--max-line-bytes is close to or over the server's max_payload: outputs \
                     it refuses are dead-lettered without their bytes"
                );
            }
            given
        }
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn a_created_durable_lets_the_batches_in_flight_wait() {
        assert_eq!(created_max_ack_pending(256, 16), 4_096);
        assert_eq!(created_max_ack_pending(32, 4), 1_000);
        assert_eq!(
            within_ack_pending(16, 256, created_max_ack_pending(256, 16)),
            16
        );
        assert_eq!(created_max_ack_pending(usize::MAX, 2), i64::MAX);
    }

    #[test]
    fn batches_in_flight_fit_the_consumers_max_ack_pending() {
        assert_eq!(within_ack_pending(16, 256, 1_000), 3);
        assert_eq!(within_ack_pending(16, 256, -1), 16);
        assert_eq!(within_ack_pending(16, 256, 0), 16);
        assert_eq!(within_ack_pending(16, 2_048, 1_000), 1);
        assert_eq!(within_ack_pending(2, 100, 1_000), 2);
    }

    use super::*;

    #[test]
    fn a_deliverys_count_and_sequence_are_read_from_either_form_of_its_reply_subject() {
        assert_eq!(
            delivery_of("$JS.ACK.IN.dedup.3.1042.1040.1764300000000000000.17"),
            Some((3, 1042))
        );
        assert_eq!(
            delivery_of("$JS.ACK._.ACCHASH.IN.dedup.1.7.7.1764300000000000000.0"),
            Some((1, 7))
        );
        assert_eq!(
            delivery_of("$JS.ACK.hub.ACCHASH.IN.dedup.2.18446744073709551615.9.1.0.rnd.more"),
            Some((2, u64::MAX))
        );
        for bad in [
            "$JS.ACK.IN.dedup.3.1042.1040.1764300000000000000",
            "$JS.ACK.IN.dedup.3.1042.1040.1764300000000000000.17.x",
            "$JS.ACK.IN.dedup.x.1042.1040.1764300000000000000.17",
            "$JS.ACK.IN.dedup.3.-1.1040.1764300000000000000.17",
            "$JS.ACK.IN.dedup.3..1040.1764300000000000000.17",
            "_INBOX.IN.dedup.3.1042.1040.1764300000000000000.17",
            "",
        ] {
            assert_eq!(delivery_of(bad), None, "{bad}");
        }
    }

    #[test]
    fn subjects_match_as_nats_matches_them() {
        assert!(subject_matches("tweets", "tweets"));
        assert!(subject_matches("tweets.*", "tweets.in"));
        assert!(!subject_matches("tweets.*", "tweets.in.x"));
        assert!(subject_matches("tweets.>", "tweets.in.x"));
        assert!(!subject_matches("tweets.>", "tweets"));
        assert!(!subject_matches("tweets", "tweets.in"));
        assert!(!subject_matches("a.b", "a"));
    }

    #[test]
    fn credentials_are_taken_out_of_the_url() {
        assert_eq!(split_auth("nats://h:1"), ("nats://h:1".into(), None));
        assert_eq!(
            split_auth("nats://me:pw@h:1,nats://me:pw@h:2"),
            (
                "nats://h:1,nats://h:2".into(),
                Some(("me".into(), Some("pw".into())))
            )
        );
        assert_eq!(
            split_auth("tls://tok@h:1"),
            ("tls://h:1".into(), Some(("tok".into(), None)))
        );
    }

    #[test]
    fn passwords_and_tokens_are_never_shown() {
        assert_eq!(redact("nats://127.0.0.1:4222"), "nats://127.0.0.1:4222");
        assert_eq!(redact("nats://me:secret@h:4222"), "nats://me:***@h:4222");
        assert_eq!(redact("tls://s3cr3t@h:4222"), "tls://***@h:4222");
        assert_eq!(
            redact("nats://a:b@h1:1,nats://a:b@h2:2"),
            "nats://a:***@h1:1,nats://a:***@h2:2"
        );
        let server = NatsServer {
            url: "nats://me:secret@h:4222".into(),
            creds: None,
            ca: None,
        };
        assert!(!format!("{server} {server:?}").contains("secret"));
    }
}

//! `dedup-stream consume --kafka`: a worker of a Kafka consumer group, on
//! the [`queue`] runtime.
//!
//! ```text
//!  topics IN ──poll (group)──▶ prepare ──▶ index store ──▶ produce OUT (key = id) ──▶ commit offsets
//!   (offsets committed         (sketch)    (one call)      idempotent producer;        (asynchronous,
//!    by the worker only)                                   up to --in-flight batches   in order, each once
//!                                                          not yet delivered           its batch is delivered)
//! ```
//!
//! - Each record's value is one JSON message, tagged exactly as the filter
//!   tags a line and produced to the output topic with the message's id as
//!   its key. A leading UTF-8 byte-order mark is skipped; a value longer
//!   than `--max-line-bytes` is refused, as the filter refuses such a line.
//! - **At least once, with the same verdict every time.** A batch's
//!   outputs are handed to the producer (`acks=all`, idempotent) without
//!   waiting; the worker reads and decides the next batches meanwhile, up
//!   to `--in-flight` batches not yet committed. When a batch's turn comes
//!   (the oldest first), its deliveries are awaited, and only then are its
//!   offsets committed (asynchronously; never automatically): a commit,
//!   which covers every earlier offset of its partition, never passes an
//!   output the broker has not acknowledged. A worker that dies leaves the
//!   offsets of the batches in flight behind: the records are delivered
//!   again (to it or, after a rebalance, to another worker), the index
//!   answers them from its memo, keyed by `TOPIC/PARTITION/OFFSET` (their
//!   first verdict: a record is never "a duplicate of itself"), and the
//!   repeated output is byte for byte the same, with the same key: a
//!   consumer of the output topic drops it by key. Kafka transactions
//!   (KIP-98) are not used: see docs/queues.md.
//! - **Rebalances.** Partitions are revoked and assigned inside `poll`.
//!   Records gathered from a revoked partition and not yet decided are
//!   abandoned; those of batches in flight are produced but not committed
//!   (their next owner reads them again and produces the same bytes), so
//!   no offset is committed for a partition under an assignment it was not
//!   read under. A commit the group refuses is not retried: a later commit
//!   of the partition covers it, else the records are read again.
//! - **Records the broker skips.** A partition assigned is expected to
//!   resume at its committed offset, and each record to follow the last.
//!   A record past the offset expected (Tansu 0.6 answers a fetch from
//!   inside a record batch with the next batch) is not taken: the
//!   partition is sought back until the broker delivers from before the
//!   offset expected, and the gap is counted (`dedup_queue_gaps_total`).
//! - Malformed records (not a JSON object with an id and a text, too long,
//!   no value) are produced to the dead-letter topic with the reason in the
//!   header `Dedup-Error`, their input in `Dedup-Source`
//!   (`TOPIC/PARTITION/OFFSET`) and the original bytes as the value, then
//!   committed with the rest: never retried forever.
//! - An output or dead letter refused for its size (over the producer's
//!   `message.max.bytes` or the topic's `max.message.bytes`, read from the
//!   brokers at the start) is dead-lettered without its bytes, with the
//!   reason, and committed. A record refused inside a batch is produced
//!   again by itself first, so that only a record too large alone is.
//!   `--max-line-bytes` defaults to the smaller limit less
//!   [`broker::TAG_ROOM`].
//! - The output and dead-letter topics must exist (their partitions and
//!   replication are the operator's choice), and the input topics too:
//!   missing ones are refused with [`KafkaError::Conflict`] before
//!   anything is read, as is an input topic that is also an output.
//! - Kafka unreachable: the clients reconnect by themselves; undelivered
//!   outputs are produced again with backoff, reported on stderr every ten
//!   seconds and in the metrics (`/healthz` answers 503). Nothing is
//!   committed that was not stored. A broker that takes requests and
//!   answers none (hung, stopped) is found from librdkafka's statistics:
//!   requests waiting and no answer for [`STALL_AFTER`] is reported the
//!   same way, by a thread of its own (the worker may be blocked in the
//!   client meanwhile).
//! - **A member that makes no progress.** A thread watches the partitions
//!   the worker does not hold: one with records waiting whose committed
//!   offset has not moved for [`kafka_group::STUCK_AFTER`] is reported
//!   with the member that holds it (see [`kafka_group`]).
//! - A stop request (SIGTERM) finishes the batches in flight, commits
//!   them (waiting up to ten seconds for the answers), and leaves the
//!   group.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use rdkafka::ClientContext;
use rdkafka::admin::{AdminClient, AdminOptions, ResourceSpecifier};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::{ClientConfig, RDKafkaLogLevel};
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance};
use rdkafka::error::{KafkaError as RdError, RDKafkaErrorCode};
use rdkafka::message::{Header, Message, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};
use rdkafka::statistics::Statistics;
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};

use crate::engine::{IndexStore, Preparer};
use crate::error::{InvalidReason, StoreError};
use crate::metrics::Metrics;
use crate::queue::batch::{DecidedBatch, Payload};
use crate::queue::broker::{self, Outage};
use crate::queue::kafka_group;
use crate::queue::{self, Settled};
use crate::wire::record::{Decoder, MessageId};

/// Default records gathered at a time.
pub const DEFAULT_BATCH: usize = 256;
/// Header of a dead letter that says why its record was refused.
pub const ERROR_HEADER: &str = "Dedup-Error";
/// Header of a dead letter that names its input: `TOPIC/PARTITION/OFFSET`.
pub const SOURCE_HEADER: &str = "Dedup-Source";
/// Longest wait for a record when none is ready, before looking around
/// (stop requests, progress).
const IDLE_WAIT: Duration = Duration::from_secs(1);
/// How long the brokers may leave requests unanswered before the worker
/// reports a stall (`/healthz` 503): far above a healthy fetch's long
/// poll (0.5 s) and the group's heartbeats (3 s).
pub const STALL_AFTER: Duration = Duration::from_secs(10);
/// How often librdkafka reports its statistics (what the stall watch
/// reads).
const STATISTICS_EVERY_MS: &str = "1000";
/// librdkafka's default `message.max.bytes`: the largest record the
/// producer sends (and, with `batch.size`, the largest batch).
const PRODUCER_LIMIT: usize = 1_000_000;
/// First and longest wait between two attempts.
const BACKOFF: (Duration, Duration) = (Duration::from_millis(50), Duration::from_secs(2));
/// Longest wait at a stop for the group's answers to the last commits.
const COMMIT_WAIT: Duration = Duration::from_secs(10);
/// Longest wait for the broker's metadata at the start, per attempt.
const METADATA_TIMEOUT: Duration = Duration::from_secs(5);

/// Why the Kafka worker stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KafkaError {
    /// The client settings cannot be used (a `--kafka-option` librdkafka
    /// refuses, say).
    #[error("bad Kafka settings: {0}")]
    Settings(String),
    /// A topic is missing or used both ways (nothing was read).
    #[error("{0}")]
    Conflict(String),
    /// Kafka could not be reached, and the worker was told to stop while
    /// waiting: what was not committed will be delivered again.
    #[error("Kafka unreachable while {0}")]
    Unavailable(String),
    /// The idempotent producer hit an error it cannot go on after.
    #[error("the Kafka producer failed for good: {0}")]
    Fatal(String),
    /// The index store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Where the brokers are and how the clients connect.
#[derive(Clone)]
pub struct KafkaBrokers {
    /// `HOST:PORT[,HOST:PORT…]`: the bootstrap servers.
    pub servers: String,
    /// librdkafka properties set on both clients (`security.protocol`,
    /// `sasl.username`, `session.timeout.ms`, …); they may hold secrets
    /// and are never printed.
    pub options: Vec<(String, String)>,
}

impl fmt::Display for KafkaBrokers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.servers)
    }
}

/// As `Display`: a derived `Debug` would print the options' values.
impl fmt::Debug for KafkaBrokers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let keys: Vec<&str> = self.options.iter().map(|(k, _)| k.as_str()).collect();
        write!(f, "KafkaBrokers({self}, options {keys:?})")
    }
}

/// How the worker runs (the engine's settings are in the [`Preparer`] and
/// the index store).
#[derive(Clone, Debug)]
pub struct KafkaConfig {
    /// The topics read.
    pub topics: Vec<String>,
    /// The consumer group: workers of one group share the partitions.
    pub group: String,
    /// The topic tagged messages are produced to.
    pub output_topic: String,
    /// The topic malformed records are produced to.
    pub dead_letter_topic: String,
    /// The options every worker takes, whatever its broker.
    pub options: queue::Options,
    /// Longest message, in bytes (`--max-line-bytes`); `None`: the
    /// brokers' size limit less [`broker::TAG_ROOM`].
    pub max_line_bytes: Option<usize>,
}

/// What a run did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KafkaSummary {
    /// Records gathered and decided.
    pub read: u64,
    /// Records tagged new.
    pub new: u64,
    /// Records tagged duplicate.
    pub duplicates: u64,
    /// Deletion notices, passed on tagged (their ids forgotten).
    pub deletions: u64,
    /// Records sent to the dead-letter topic.
    pub invalid: u64,
    /// Of those, records whose output was refused for its size.
    pub too_large: u64,
    /// Records gathered, then abandoned at a rebalance (read again by
    /// their next owner).
    pub abandoned: u64,
    /// Records whose offsets were committed.
    pub committed: u64,
    /// Records whose commit failed (they are read again).
    pub uncommitted: u64,
    /// Fetches that began past the offset expected (records the broker
    /// skipped), sought back.
    pub gaps: u64,
}

impl fmt::Display for KafkaSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} records read: {} new, {} duplicates, {} invalid; {} committed, {} left to \
             read again, {} abandoned at rebalances",
            self.read,
            self.new,
            self.duplicates,
            self.invalid,
            self.committed,
            self.uncommitted,
            self.abandoned
        )?;
        if self.too_large > 0 {
            write!(f, "; {} outputs too large to store", self.too_large)?;
        }
        if self.deletions > 0 {
            write!(f, "; {} deletion notices", self.deletions)?;
        }
        if self.gaps > 0 {
            write!(f, "; {} skips by the broker sought back", self.gaps)?;
        }
        Ok(())
    }
}

/// The memo scope of the worker's tokens in an index in Redis (see
/// [`RedisOptions::token_scope`](crate::redis_index::RedisOptions::token_scope)):
/// a token is `TOPIC/PARTITION/OFFSET`, unique within a cluster's group.
pub fn token_scope(config: &KafkaConfig) -> String {
    format!("kafka:{}", config.group)
}

/// The record key of a message: its id's digits, or its JSON text (a
/// string without its quotes).
pub fn record_key(id: &MessageId) -> Vec<u8> {
    match id {
        MessageId::DigitString(n) | MessageId::Integer(n) => n.to_string().into_bytes(),
        MessageId::Raw(raw) => raw
            .strip_prefix('"')
            .and_then(|r| r.strip_suffix('"'))
            .unwrap_or(raw)
            .as_bytes()
            .to_vec(),
    }
}

/// Forwards librdkafka's log lines and errors to `tracing`.
fn log_line(level: RDKafkaLogLevel, facility: &str, line: &str) {
    use RDKafkaLogLevel as L;
    if facility == "CONFWARN" {
        // --kafka-option sets every property on both clients: a consumer
        // property "ignored by this producer" is no news.
        tracing::debug!(facility, "librdkafka: {line}");
        return;
    }
    match level {
        L::Emerg | L::Alert | L::Critical | L::Error => {
            tracing::error!(facility, "librdkafka: {line}")
        }
        L::Warning => tracing::warn!(facility, "librdkafka: {line}"),
        L::Notice | L::Info => tracing::debug!(facility, "librdkafka: {line}"),
        L::Debug => tracing::trace!(facility, "librdkafka: {line}"),
    }
}

/// Whether a client's brokers answer it, from librdkafka's statistics
/// (every [`STATISTICS_EVERY_MS`]): a broker that accepts requests and
/// answers none (hung, or stopped with SIGSTOP) raises no error for a
/// minute (`socket.timeout.ms`), and a consumer's poll just comes back
/// empty, as on a quiet topic.
///
/// Reports come only while the worker polls the client (a consumer while
/// it gathers, a producer while it awaits deliveries): a client not polled
/// for a while (an idle producer, a consumer during a batch) is not judged.
#[derive(Debug)]
struct Progress {
    /// (answers received so far, when they last grew or nothing waited,
    /// when the last report came).
    state: Mutex<(u64, Instant, Instant)>,
}

/// A client whose last statistics report is older than this is not being
/// polled, and so not judged.
const UNPOLLED_AFTER: Duration = Duration::from_secs(3);

impl Progress {
    fn new() -> Progress {
        Progress {
            state: Mutex::new((0, Instant::now(), Instant::now())),
        }
    }

    /// Takes a statistics report: progress if a broker answered since the
    /// last, or if no request waits for an answer.
    fn update(&self, statistics: &Statistics) {
        let received: u64 = statistics.brokers.values().map(|b| b.rx).sum();
        let waiting: i64 = statistics
            .brokers
            .values()
            .map(|b| b.waitresp_cnt + b.outbuf_cnt)
            .sum();
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        if received != state.0 || waiting == 0 || state.2.elapsed() >= UNPOLLED_AFTER {
            // Answered, idle, or just polled again after a pause: the
            // wait counts from here.
            state.1 = now;
        }
        state.0 = received;
        state.2 = now;
    }

    /// How long the client, polled all along, has waited without an
    /// answer (zero when it is not being polled).
    fn stalled_for(&self) -> Duration {
        let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if state.2.elapsed() >= UNPOLLED_AFTER {
            return Duration::ZERO;
        }
        state.1.elapsed()
    }
}

/// Reports, every [`broker::REPORT_EVERY`], a client whose brokers have
/// answered nothing for [`STALL_AFTER`] (`/healthz` 503), until `done`.
/// A thread of its own: the worker may be blocked in a flush or a commit.
fn watch_stalls(clients: [(&str, &Progress); 2], metrics: &Metrics, done: &AtomicBool) {
    let mut outage = Outage::new("Kafka", metrics);
    while !done.load(Ordering::Relaxed) {
        let stalled = clients
            .iter()
            .map(|(what, progress)| (*what, progress.stalled_for()))
            .find(|(_, waited)| *waited >= STALL_AFTER);
        match stalled {
            Some((what, waited)) => outage.stalled(
                what,
                &format_args!(
                    "requests unanswered by the brokers for {} s (hung or stopped?)",
                    waited.as_secs()
                ),
            ),
            None => outage.over("the brokers answer again"),
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The group's answer to a commit: the offsets committed (sorted), and
/// whether they were. (librdkafka reports an asynchronous commit's answer
/// only to a callback or queue the Rust client does not offer, so the
/// committer thread commits synchronously, in order, off the worker's
/// thread: see [`committer`].)
type CommitAnswer = (Vec<(String, i32, i64)>, Result<(), String>);

/// The consumer's callbacks: notes rebalances and commit answers for the
/// worker.
struct ConsumerHooks {
    /// Partitions revoked since the worker last looked.
    revoked: Mutex<Vec<(String, i32)>>,
    /// Partitions assigned since the worker last looked.
    assigned: Mutex<Vec<(String, i32)>>,
    /// Commits answered since the worker last looked.
    commits: Mutex<Vec<CommitAnswer>>,
    progress: Arc<Progress>,
}

impl ClientContext for ConsumerHooks {
    fn log(&self, level: RDKafkaLogLevel, facility: &str, line: &str) {
        log_line(level, facility, line);
    }

    fn stats(&self, statistics: Statistics) {
        self.progress.update(&statistics);
    }

    fn error(&self, error: RdError, reason: &str) {
        tracing::warn!("Kafka consumer: {error}: {reason}");
    }
}

impl ConsumerContext for ConsumerHooks {
    fn pre_rebalance(&self, _: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        match rebalance {
            Rebalance::Revoke(list) => {
                let mut revoked = self.revoked.lock().unwrap_or_else(|e| e.into_inner());
                for element in list.elements() {
                    revoked.push((element.topic().to_string(), element.partition()));
                }
                tracing::info!(partitions = list.count(), "partitions revoked");
            }
            Rebalance::Assign(list) => {
                let mut assigned = self.assigned.lock().unwrap_or_else(|e| e.into_inner());
                for element in list.elements() {
                    assigned.push((element.topic().to_string(), element.partition()));
                }
                tracing::info!(partitions = list.count(), "partitions assigned");
            }
            Rebalance::Error(e) => tracing::warn!("rebalance failed: {e}"),
        }
    }
}

/// A delivery report: `Err` with the error and whether it refused the
/// record (or its batch) for its size.
type Delivery = Result<(), (String, bool)>;

/// Commits each list of offsets sent, in the order sent, and posts the
/// group's answers for the worker (which goes on reading and producing
/// meanwhile), until the sender is dropped. Lists that queued up while a
/// commit was under way go as one commit (for each partition, the offset
/// of the last list that names it: what committing them one by one would
/// leave), whose answer is each one's.
fn committer(
    consumer: &BaseConsumer<ConsumerHooks>,
    lists: mpsc::Receiver<Vec<(String, i32, i64)>>,
) {
    while let Ok(first) = lists.recv() {
        let mut queued = vec![first];
        queued.extend(lists.try_iter());
        let mut merged: BTreeMap<(&str, i32), i64> = BTreeMap::new();
        for offsets in &queued {
            for (topic, partition, offset) in offsets {
                merged.insert((topic.as_str(), *partition), *offset);
            }
        }
        let mut list = TopicPartitionList::new();
        let mut result = Ok(());
        for ((topic, partition), offset) in &merged {
            if let Err(e) = list.add_partition_offset(topic, *partition, Offset::Offset(*offset)) {
                result = Err(e.to_string());
            }
        }
        if result.is_ok() {
            result = consumer
                .commit(&list, CommitMode::Sync)
                .map_err(|e| e.to_string());
        }
        let mut answers = consumer
            .context()
            .commits
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        for offsets in queued {
            answers.push((offsets, result.clone()));
        }
    }
}

/// The producer's callbacks: collects delivery reports by their opaque
/// (a sequence number of the worker's).
struct ProducerHooks {
    /// foldhash, as `expect`: two look-ups a record.
    delivered: Mutex<foldhash::HashMap<usize, Delivery>>,
    progress: Arc<Progress>,
}

impl ClientContext for ProducerHooks {
    fn log(&self, level: RDKafkaLogLevel, facility: &str, line: &str) {
        log_line(level, facility, line);
    }

    fn stats(&self, statistics: Statistics) {
        self.progress.update(&statistics);
    }

    fn error(&self, error: RdError, reason: &str) {
        tracing::warn!("Kafka producer: {error}: {reason}");
    }
}

impl ProducerContext for ProducerHooks {
    type DeliveryOpaque = usize;

    fn delivery(&self, result: &DeliveryResult<'_>, index: usize) {
        let result = match result {
            Ok(_) => Ok(()),
            Err((e, _)) => Err((e.to_string(), refused_for_size(e))),
        };
        self.delivered
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(index, result);
    }
}

/// Whether `error` refused a record (or its batch) for its size.
fn refused_for_size(error: &RdError) -> bool {
    error.rdkafka_error_code() == Some(RDKafkaErrorCode::MessageSizeTooLarge)
}

/// The settings both clients share.
fn client_config(brokers: &KafkaBrokers) -> ClientConfig {
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", &brokers.servers)
        .set("client.id", "dedup-stream")
        .set("statistics.interval.ms", STATISTICS_EVERY_MS)
        .set_log_level(RDKafkaLogLevel::Warning);
    for (key, value) in &brokers.options {
        config.set(key, value);
    }
    config
}

/// A settings error without the value it names: librdkafka's own
/// message repeats it, and it may be a password.
fn settings_error(error: &RdError) -> String {
    match error {
        RdError::ClientConfig(_, description, key, value) => {
            let description = if value.is_empty() {
                description.clone()
            } else {
                description.replace(value.as_str(), "***")
            };
            format!("{description} (--kafka-option {key}=…)")
        }
        other => other.to_string(),
    }
}

/// One record gathered.
struct Record {
    topic: String,
    partition: i32,
    offset: i64,
    /// Its value; `None`: it has none (a tombstone).
    value: Option<Vec<u8>>,
    /// `TOPIC/PARTITION/OFFSET`: the record's memo token.
    token: String,
    /// The assignment it was read under: its offset is committed only if
    /// its partition was not revoked since.
    epoch: u64,
}

/// `TOPIC/PARTITION/OFFSET`, without `format!` (about 1,000
/// instructions a record).
fn record_token(topic: &str, partition: i32, offset: i64) -> String {
    let (mut partition_digits, mut offset_digits) = (itoa::Buffer::new(), itoa::Buffer::new());
    let (partition, offset) = (
        partition_digits.format(partition),
        offset_digits.format(offset),
    );
    let mut token = String::with_capacity(topic.len() + partition.len() + offset.len() + 2);
    for part in [topic, "/", partition, "/", offset] {
        token.push_str(part);
    }
    token
}

impl queue::Input for Record {
    fn payload(&self) -> Option<&[u8]> {
        // A record without a value is refused as an empty line is.
        Some(self.value.as_deref().unwrap_or_default())
    }

    fn token(&self) -> &[u8] {
        self.token.as_bytes()
    }
}

/// What becomes of a record once decided.
enum Outcome {
    /// Produce this to the output topic under this key, then commit.
    Output { key: Vec<u8>, value: Vec<u8> },
    /// Commit only (a verdict not emitted).
    Skip,
    /// Produce to the dead-letter topic, then commit.
    Dead { reason: String, value: Vec<u8> },
}

/// One record a batch produces.
struct Produce<'a> {
    topic: &'a str,
    key: Vec<u8>,
    value: Vec<u8>,
    /// For a dead letter: the reason and the input's token.
    dead: Option<(String, String)>,
    /// The record it answers: its place in the batch.
    input: usize,
}

impl Produce<'_> {
    /// Its bytes as the producer counts them against `message.max.bytes`
    /// (key, value and headers; the batch's framing is not counted).
    fn size(&self) -> usize {
        let headers = self.dead.as_ref().map_or(0, |(reason, source)| {
            ERROR_HEADER.len() + reason.len() + SOURCE_HEADER.len() + source.len()
        });
        self.key.len() + self.value.len() + headers
    }
}

/// A batch's records handed to the producer, their deliveries not yet
/// awaited.
struct Pending<'a> {
    produces: Vec<Produce<'a>>,
    /// The sequence number (delivery opaque) of each produce sent.
    sent: Vec<(usize, usize)>,
    /// What the first attempt already knows failed.
    round: Round,
    /// The batch's tokens, by input.
    tokens: Vec<String>,
}

/// What one attempt at producing some records left to do.
#[derive(Default)]
struct Round {
    /// Produces to send again.
    failed: Vec<usize>,
    /// Produces refused for their size, alone: (produce, error).
    oversized: Vec<(usize, String)>,
    /// Refused for their size in a batch: sent again by themselves.
    alone: HashSet<usize>,
    /// The last error that was not about size (an outage).
    last_error: String,
}

/// Where the worker expects a partition's next record (see
/// [`Worker::in_sequence`]).
#[derive(Clone, Copy, Debug)]
struct Expect {
    /// The next offset.
    next: i64,
    /// How far back the last seek went (0: no gap being mended).
    step: i64,
    /// Whether the broker delivered a record before `next` since the
    /// last seek: what follows is then the log as it is.
    crossed: bool,
}

impl Expect {
    fn at(next: i64) -> Expect {
        Expect {
            next,
            step: 0,
            crossed: false,
        }
    }
}

/// A commit sent and not yet answered: its offsets (sorted) and the
/// tokens of the records it covers.
type Commit = (Vec<(String, i32, i64)>, Vec<Vec<u8>>);

/// The worker's Kafka side: the queue runtime's adapter.
struct Worker<'a> {
    config: &'a KafkaConfig,
    consumer: Arc<BaseConsumer<ConsumerHooks>>,
    /// To the committer thread; `None` once the worker is done.
    to_commit: Option<mpsc::Sender<Vec<(String, i32, i64)>>>,
    producer: BaseProducer<ProducerHooks>,
    stop: &'a AtomicBool,
    metrics: &'a Metrics,
    summary: KafkaSummary,
    /// The largest record the producer and the output topics take.
    limit: Limit,
    /// Reports of failed reads.
    reading: Outage<'a>,
    /// The delivery opaque of the next record produced.
    next_seq: usize,
    /// Revocations so far: a record is read under the current one.
    epoch: u64,
    /// The epoch at which each partition was last revoked.
    revoked_at: HashMap<(String, i32), u64>,
    /// The next offset expected of each partition read. Looked up for
    /// every record: hashed with foldhash, not SipHash (partitions are the
    /// broker's, and SipHash cost about 300 instructions a record).
    expect: foldhash::HashMap<(String, i32), Expect>,
    /// Commits sent, oldest first, awaiting the group's answer.
    commits: VecDeque<Commit>,
    /// Commits answered since the runtime last asked.
    settled: Settled,
}

/// The largest record the worker can store, and who says so.
#[derive(Clone, Debug)]
struct Limit {
    bytes: usize,
    /// "the producer's message.max.bytes", "topic T's max.message.bytes".
    source: String,
}

/// Runs the worker until `stop` is set (or a fatal error): checks the
/// topics, joins the group, then runs the [`queue`] runtime on it: up to
/// `--in-flight` batches produced ahead of their commits. Synchronous:
/// librdkafka's clients run their own threads, and a thread of this one
/// watches them for stalls.
pub fn run<S: IndexStore + ?Sized>(
    brokers: &KafkaBrokers,
    config: &KafkaConfig,
    preparer: &Preparer,
    store: &mut S,
    stop: &AtomicBool,
    metrics: &Metrics,
) -> Result<KafkaSummary, KafkaError> {
    let settings = |e: RdError| KafkaError::Settings(settings_error(&e));
    let reading = Arc::new(Progress::new());
    let consumer: BaseConsumer<ConsumerHooks> = client_config(brokers)
        .set("group.id", &config.group)
        // Offsets are committed by the worker, after the outputs are stored.
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("auto.offset.reset", "earliest")
        .create_with_context(ConsumerHooks {
            revoked: Mutex::new(Vec::new()),
            assigned: Mutex::new(Vec::new()),
            commits: Mutex::new(Vec::new()),
            progress: Arc::clone(&reading),
        })
        .map_err(settings)?;
    check_topics(&consumer, config, stop, metrics)?;
    let limit = size_limit(brokers, config)?;
    let writing = Arc::new(Progress::new());
    let producer: BaseProducer<ProducerHooks> = client_config(brokers)
        .set("enable.idempotence", "true")
        .set("acks", "all")
        // A delivery that takes longer is produced again (same bytes, same
        // key); a stop request waits for it at most this long.
        .set("message.timeout.ms", "60000")
        // Batches no larger than the topics take: a record refused for
        // its size is then refused alone, not with its neighbours.
        .set("message.max.bytes", limit.bytes.to_string())
        .set("batch.size", limit.bytes.min(PRODUCER_LIMIT).to_string())
        .create_with_context(ProducerHooks {
            delivered: Mutex::new(foldhash::HashMap::default()),
            progress: Arc::clone(&writing),
        })
        .map_err(settings)?;
    let max_line_bytes = line_limit(config.max_line_bytes, &limit);
    let topics: Vec<&str> = config.topics.iter().map(String::as_str).collect();
    consumer.subscribe(&topics).map_err(settings)?;
    let consumer = Arc::new(consumer);
    let (to_commit, lists) = mpsc::channel();
    let mut worker = Worker {
        config,
        consumer: Arc::clone(&consumer),
        to_commit: Some(to_commit),
        producer,
        stop,
        metrics,
        summary: KafkaSummary::default(),
        limit,
        reading: Outage::new("Kafka", metrics),
        next_seq: 0,
        epoch: 0,
        revoked_at: HashMap::new(),
        expect: foldhash::HashMap::default(),
        commits: VecDeque::new(),
        settled: Settled::default(),
    };
    let decoder = Decoder::new(config.options.fields.clone());
    let runtime = config.options.settings(max_line_bytes, IDLE_WAIT);
    let done = AtomicBool::new(false);
    let result = std::thread::scope(|scope| {
        scope.spawn(|| {
            watch_stalls(
                [
                    ("reading records", &reading),
                    ("producing outputs", &writing),
                ],
                metrics,
                &done,
            )
        });
        scope.spawn(|| committer(&consumer, lists));
        scope
            .spawn(|| kafka_group::watch(&consumer, &config.group, &config.topics, metrics, &done));
        let engine = queue::Engine {
            preparer,
            decoder: &decoder,
            store,
        };
        let result = queue::run(&mut worker, engine, runtime, stop, metrics);
        done.store(true, Ordering::Relaxed);
        // The committer ends with its last commit.
        worker.to_commit = None;
        result
    });
    let counts = result?;
    worker.summary.read = counts.read;
    worker.summary.committed = counts.acknowledged;
    worker.summary.uncommitted = counts.unacknowledged;
    worker.summary.new = counts.verdicts.new;
    worker.summary.duplicates = counts.verdicts.duplicates;
    worker.summary.deletions = counts.verdicts.deletions;
    // Dropping the consumer closes it: it leaves the group, and its
    // partitions go to the others at once.
    Ok(worker.summary)
}

/// The largest record the worker may produce: the producer's
/// `message.max.bytes` (a `--kafka-option`, else librdkafka's default)
/// and each output topic's `max.message.bytes`, as the brokers describe
/// it. A broker that describes no configuration leaves the producer's.
fn size_limit(brokers: &KafkaBrokers, config: &KafkaConfig) -> Result<Limit, KafkaError> {
    let given = brokers
        .options
        .iter()
        .rev()
        .find(|(key, _)| key == "message.max.bytes")
        .and_then(|(_, value)| value.parse::<usize>().ok());
    let mut limit = Limit {
        bytes: given.unwrap_or(PRODUCER_LIMIT),
        source: "the producer's message.max.bytes".into(),
    };
    let admin: AdminClient<DefaultClientContext> = client_config(brokers)
        .create()
        .map_err(|e| KafkaError::Settings(settings_error(&e)))?;
    let topics = [
        ResourceSpecifier::Topic(&config.output_topic),
        ResourceSpecifier::Topic(&config.dead_letter_topic),
    ];
    let options = AdminOptions::new().request_timeout(Some(METADATA_TIMEOUT));
    match futures::executor::block_on(admin.describe_configs(&topics, &options)) {
        Ok(results) => {
            for (topic, result) in [&config.output_topic, &config.dead_letter_topic]
                .into_iter()
                .zip(results)
            {
                let topic_limit = result.ok().and_then(|resource| {
                    resource
                        .get("max.message.bytes")
                        .and_then(|entry| entry.value.as_deref()?.parse::<usize>().ok())
                });
                match topic_limit {
                    Some(bytes) if bytes < limit.bytes => {
                        limit = Limit {
                            bytes,
                            source: format!("topic {topic:?}'s max.message.bytes"),
                        };
                    }
                    Some(_) => {}
                    None => tracing::debug!(topic, "the brokers did not say max.message.bytes"),
                }
            }
        }
        Err(e) => tracing::info!(
            "the brokers did not describe the output topics ({e}): records over the topic's \
             max.message.bytes are found when refused"
        ),
    }
    Ok(limit)
}

/// The longest message the worker decides: `--max-line-bytes`, or by
/// default the size limit less room for the tag, key and headers.
fn line_limit(given: Option<usize>, limit: &Limit) -> usize {
    let fits = broker::default_max_line_bytes(limit.bytes);
    match given {
        None => {
            tracing::info!(
                limit = limit.bytes,
                max_line_bytes = fits,
                "records longer than {} less room for the tag are dead-lettered \
                 (--max-line-bytes)",
                limit.source
            );
            fits
        }
        Some(given) => {
            if given > fits {
                tracing::warn!(
                    limit = limit.bytes,
                    max_line_bytes = given,
                    "--max-line-bytes is close to or over {}: outputs refused for their size \
                     are dead-lettered without their bytes",
                    limit.source
                );
            }
            given
        }
    }
}

/// Checks that the topics exist and that no input is an output, waiting
/// for the brokers while they cannot be reached.
fn check_topics(
    consumer: &BaseConsumer<ConsumerHooks>,
    config: &KafkaConfig,
    stop: &AtomicBool,
    metrics: &Metrics,
) -> Result<(), KafkaError> {
    for output in [&config.output_topic, &config.dead_letter_topic] {
        if config.topics.contains(output) {
            return Err(KafkaError::Conflict(format!(
                "topic {output:?} is both read and written: the worker would read its own output"
            )));
        }
    }
    let mut outage = Outage::new("Kafka", metrics);
    let mut wait = BACKOFF.0;
    let metadata = loop {
        match consumer.fetch_metadata(None, METADATA_TIMEOUT) {
            Ok(metadata) => break metadata,
            Err(e) => {
                outage.failed("reading the topics", &e.to_string());
                if stop.load(Ordering::Relaxed) {
                    return Err(KafkaError::Unavailable("reading the topics".into()));
                }
                std::thread::sleep(wait);
                wait = (wait * 2).min(BACKOFF.1);
            }
        }
    };
    outage.over("reading the topics");
    let known: HashSet<&str> = metadata
        .topics()
        .iter()
        .filter(|t| t.error().is_none() && !t.partitions().is_empty())
        .map(|t| t.name())
        .collect();
    let roles = config.topics.iter().map(|t| (t, "input")).chain([
        (&config.output_topic, "output"),
        (&config.dead_letter_topic, "dead-letter"),
    ]);
    let missing: Vec<String> = roles
        .filter(|(topic, _)| !known.contains(topic.as_str()))
        .map(|(topic, role)| format!("{topic:?} (the {role} topic)"))
        .collect();
    if !missing.is_empty() {
        return Err(KafkaError::Conflict(format!(
            "no such topic on the brokers: {}; create it with the partitions and replication \
             you want (the worker does not create topics)",
            missing.join(", ")
        )));
    }
    Ok(())
}

impl<'a> Worker<'a> {
    /// Takes the partitions revoked and assigned inside the last poll:
    /// records gathered from a revoked partition are abandoned (see the
    /// module documentation), and a partition assigned is expected to go
    /// on from its committed offset.
    fn rebalanced(&mut self, records: &mut Vec<Record>) {
        let hooks = self.consumer.context();
        let revoked = std::mem::take(&mut *hooks.revoked.lock().unwrap_or_else(|e| e.into_inner()));
        let assigned =
            std::mem::take(&mut *hooks.assigned.lock().unwrap_or_else(|e| e.into_inner()));
        if !revoked.is_empty() {
            self.epoch += 1;
            for partition in &revoked {
                self.revoked_at.insert(partition.clone(), self.epoch);
                self.expect.remove(partition);
            }
            let before = records.len();
            records.retain(|r| {
                !revoked
                    .iter()
                    .any(|(t, p)| *t == r.topic && *p == r.partition)
            });
            let dropped = (before - records.len()) as u64;
            if dropped > 0 {
                self.summary.abandoned += dropped;
                tracing::info!(
                    records = dropped,
                    "abandoned records of revoked partitions: their next owner reads them"
                );
            }
        }
        if !assigned.is_empty() {
            self.expect_committed(&assigned);
        }
    }

    /// Expects each partition of `assigned` to start at its committed
    /// offset (where the consumer resumes), so that a broker answering
    /// from further on is caught. Partitions without one start wherever
    /// the broker says.
    fn expect_committed(&mut self, assigned: &[(String, i32)]) {
        let mut list = TopicPartitionList::new();
        for (topic, partition) in assigned {
            list.add_partition(topic, *partition);
        }
        match self.consumer.committed_offsets(list, METADATA_TIMEOUT) {
            Ok(committed) => {
                for element in committed.elements() {
                    if let Offset::Offset(next) = element.offset() {
                        self.expect.insert(
                            (element.topic().to_string(), element.partition()),
                            Expect::at(next),
                        );
                    }
                }
            }
            Err(e) => tracing::debug!("the committed offsets of new partitions are unknown: {e}"),
        }
    }

    /// Whether a record at `offset` of `partition` comes in order. A
    /// record past the expected offset means the broker skipped some
    /// (Tansu 0.6 answers a fetch from inside a record batch with the
    /// next batch): the partition is sought back, further each time (the
    /// broker may skip again from the offset sought), counted
    /// (`dedup_queue_gaps_total`) and reported; records before the
    /// expected offset, delivered again from there, were read already and
    /// are passed over. A hole the broker delivers across (compaction,
    /// transaction markers: a record before the expected offset, then
    /// one past it) is the log as it is.
    fn in_sequence(&mut self, partition: &(String, i32), offset: i64) -> bool {
        let Some(expect) = self.expect.get_mut(partition) else {
            self.expect
                .insert(partition.clone(), Expect::at(offset + 1));
            return true;
        };
        let sought_to_start = expect.step > 0 && expect.next - expect.step <= 0;
        if offset == expect.next || (offset > expect.next && (expect.crossed || sought_to_start)) {
            *expect = Expect::at(offset + 1);
            return true;
        }
        if offset < expect.next {
            expect.crossed = true;
            return false;
        }
        if expect.step == 0 {
            self.metrics.queue_gaps.fetch_add(1, Ordering::Relaxed);
            self.summary.gaps += 1;
            tracing::warn!(
                topic = %partition.0,
                partition = partition.1,
                expected = expect.next,
                got = offset,
                "the broker skipped records: seeking back to read them"
            );
        }
        expect.step = (expect.step * 2).max(1);
        expect.crossed = false;
        let to = (expect.next - expect.step).max(0);
        if let Err(e) = self.consumer.seek(
            &partition.0,
            partition.1,
            Offset::Offset(to),
            METADATA_TIMEOUT,
        ) {
            // The next record comes out of order again, and is sought
            // back again.
            tracing::warn!("seeking back to offset {to} failed: {e}");
        }
        false
    }

    /// What each record of a decided batch becomes.
    fn outcomes(&self, records: &[Record], decided: &DecidedBatch) -> Vec<Outcome> {
        records
            .iter()
            .enumerate()
            .map(|(at, record)| match decided.payload(at) {
                Payload::Missing => match &record.value {
                    Some(value) if self.config.options.relay => Outcome::Output {
                        key: record.token.as_bytes().to_vec(),
                        value: value.clone(),
                    },
                    _ => Outcome::Skip,
                },
                Payload::Invalid(invalid) => Outcome::Dead {
                    reason: match record.value {
                        None => "the record has no value".to_string(),
                        Some(_) => invalid.reason.to_string(),
                    },
                    value: match invalid.reason {
                        // Over the limit: not copied (it may not fit in a
                        // record either); Dedup-Source names it.
                        InvalidReason::TooLong { .. } => Vec::new(),
                        _ => record.value.clone().unwrap_or_default(),
                    },
                },
                Payload::Message(message, verdict) if self.config.options.emit.wants(verdict) => {
                    Outcome::Output {
                        key: record_key(&message.id),
                        value: decided.tagged(message, verdict),
                    }
                }
                Payload::Message(..) => Outcome::Skip,
            })
            .collect()
    }

    /// Counts and reports a dead letter.
    fn dead_lettered(&mut self, token: &str, reason: &str) {
        self.summary.invalid += 1;
        self.metrics.invalid_lines.fetch_add(1, Ordering::Relaxed);
        self.metrics
            .queue_dead_lettered
            .fetch_add(1, Ordering::Relaxed);
        tracing::warn!(
            record = %token,
            "{reason}: sent to {}",
            self.config.dead_letter_topic
        );
    }

    /// Hands one record to the producer (serving deliveries while its
    /// local queue is full); returns its delivery's opaque.
    fn send(&mut self, produce: &Produce<'_>) -> Result<usize, RdError> {
        let seq = self.next_seq;
        self.next_seq = self.next_seq.wrapping_add(1);
        let mut record = BaseRecord::with_opaque_to(produce.topic, seq)
            .key(&produce.key)
            .payload(&produce.value);
        if let Some((reason, source)) = &produce.dead {
            record = record.headers(
                OwnedHeaders::new()
                    .insert(Header {
                        key: ERROR_HEADER,
                        value: Some(reason.as_str()),
                    })
                    .insert(Header {
                        key: SOURCE_HEADER,
                        value: Some(source.as_str()),
                    }),
            );
        }
        loop {
            match self.producer.send(record) {
                Ok(()) => return Ok(seq),
                Err((RdError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                    record = back;
                    self.producer.poll(Duration::from_millis(100));
                }
                Err((e, _)) => return Err(e),
            }
        }
    }

    /// Notes in `round` what refused to take produce `i` at once.
    fn refused_at_once(round: &mut Round, i: usize, error: RdError) {
        if refused_for_size(&error) {
            // Over message.max.bytes: refused before sending.
            round.oversized.push((i, error.to_string()));
        } else {
            round.failed.push(i);
            round.last_error = error.to_string();
        }
    }

    /// Waits for the deliveries of `sent` ((produce, opaque) pairs) and
    /// notes in `round` those that failed. A record refused for its size
    /// in a batch is sent next by itself; refused alone, it is oversized.
    fn deliveries(&mut self, sent: &[(usize, usize)], round: &mut Round) {
        let mut left: Vec<(usize, usize)> = sent.to_vec();
        while !left.is_empty() {
            {
                let mut delivered = self
                    .producer
                    .context()
                    .delivered
                    .lock()
                    .unwrap_or_else(|e| e.into_inner());
                left.retain(|&(i, seq)| match delivered.remove(&seq) {
                    None => true,
                    Some(Ok(())) => false,
                    Some(Err((e, true))) if round.alone.contains(&i) => {
                        round.oversized.push((i, e));
                        false
                    }
                    Some(Err((e, true))) => {
                        // Not an outage: produced again, by itself, at once.
                        tracing::debug!("a record was refused for its size in a batch: {e}");
                        round.alone.insert(i);
                        round.failed.push(i);
                        false
                    }
                    Some(Err((e, false))) => {
                        round.failed.push(i);
                        round.last_error = e;
                        false
                    }
                });
            }
            if !left.is_empty() {
                // Deliveries are reported within message.timeout.ms; the
                // stall watch reports a broker that does not answer.
                self.producer.poll(Duration::from_millis(100));
            }
        }
    }

    /// Produces again, until the broker has acknowledged each one, what
    /// the first attempt (`round`) left; gives up only when told to stop
    /// (or on a fatal producer error). A record refused for its size is
    /// produced again by itself (its batch may have been what was too
    /// large); refused alone, it is replaced by a dead letter without its
    /// bytes. Returns those: (whether it was a dead letter already, its
    /// input, the reason).
    fn complete(
        &mut self,
        produces: &mut [Produce<'a>],
        tokens: &[String],
        mut round: Round,
    ) -> Result<Vec<(bool, usize, String)>, KafkaError> {
        let mut refused = Vec::new();
        let mut outage = Outage::new("Kafka", self.metrics);
        let mut wait = BACKOFF.0;
        loop {
            for (i, error) in std::mem::take(&mut round.oversized) {
                let produce = &produces[i];
                if produce.dead.is_some() && produce.value.is_empty() {
                    // Not even its reason fits: nothing to do but stop.
                    return Err(KafkaError::Fatal(format!(
                        "a dead letter for {} was refused for its size: {error}",
                        produce.key.escape_ascii()
                    )));
                }
                let what = match produce.dead {
                    Some(_) => "dead letter",
                    None => "tagged output",
                };
                let size = produce.size();
                let reason = if size > self.limit.bytes {
                    broker::too_large(what, size, Some((self.limit.bytes, &self.limit.source)))
                } else {
                    format!("{} ({error})", broker::too_large(what, size, None))
                };
                let was_dead = produce.dead.is_some();
                let input = produce.input;
                let token = tokens[input].clone();
                refused.push((was_dead, input, reason.clone()));
                let config: &'a KafkaConfig = self.config;
                produces[i] = Produce {
                    topic: &config.dead_letter_topic,
                    key: token.as_bytes().to_vec(),
                    value: Vec::new(),
                    dead: Some((reason, token)),
                    input,
                };
                round.alone.remove(&i);
                round.failed.push(i);
            }
            if round.failed.is_empty() {
                outage.over("producing outputs");
                return Ok(refused);
            }
            if let Some((code, reason)) = self.producer.client().fatal_error() {
                return Err(KafkaError::Fatal(format!("{code}: {reason}")));
            }
            if !round.last_error.is_empty() {
                outage.failed(
                    "producing outputs",
                    &format!("{} not delivered: {}", round.failed.len(), round.last_error),
                );
                if self.stop.load(Ordering::Relaxed) {
                    return Err(KafkaError::Unavailable("producing outputs".into()));
                }
                std::thread::sleep(wait);
                wait = (wait * 2).min(BACKOFF.1);
            }
            let mut left = std::mem::take(&mut round.failed);
            left.sort_unstable();
            left.dedup();
            round.last_error.clear();
            let mut sent = Vec::new();
            for i in left {
                let alone = round.alone.contains(&i);
                if alone {
                    // Nothing else in its batch.
                    self.await_deliveries();
                }
                match self.send(&produces[i]) {
                    Ok(seq) => sent.push((i, seq)),
                    Err(e) => Self::refused_at_once(&mut round, i, e),
                }
                if alone {
                    self.await_deliveries();
                }
            }
            self.deliveries(&sent, &mut round);
        }
    }

    /// Waits until every delivery under way is reported (within
    /// `message.timeout.ms`); the reports stay for whoever awaits them.
    fn await_deliveries(&self) {
        while self.producer.in_flight_count() > 0 {
            let _ = self.producer.flush(Duration::from_secs(1));
        }
    }

    /// Takes the group's answers to commits: a commit answered is
    /// settled, its records acknowledged or left to be read again.
    fn commit_answers(&mut self) {
        let answers = std::mem::take(
            &mut *self
                .consumer
                .context()
                .commits
                .lock()
                .unwrap_or_else(|e| e.into_inner()),
        );
        for (offsets, result) in answers {
            let Some(at) = self.commits.iter().position(|(sent, _)| *sent == offsets) else {
                continue; // not one of ours
            };
            let Some((_, tokens)) = self.commits.remove(at) else {
                continue;
            };
            match result {
                Ok(()) => self.settled.acknowledged.extend(tokens),
                Err(e) => {
                    // Not retried: a later commit of the partition covers
                    // them, else they are read again, here or by the
                    // next owner, with the same verdicts.
                    self.settled.failed += tokens.len() as u64;
                    tracing::warn!(
                        records = tokens.len(),
                        "committing failed ({e}); they will be read again unless a later \
                         commit covers them"
                    );
                }
            }
        }
    }
}

impl<'a> queue::Adapter for Worker<'a> {
    type Input = Record;
    type Pending = Pending<'a>;
    type Error = KafkaError;

    /// What is ready now, else waits up to `wait` for one record and takes
    /// what is ready with it. Records of a partition revoked meanwhile
    /// are dropped, records out of sequence sought back (see
    /// [`Worker::in_sequence`]).
    fn fetch(&mut self, max: usize, wait: Duration) -> Result<Vec<Record>, KafkaError> {
        let deadline = Instant::now() + wait;
        let mut records: Vec<Record> = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let polled = self
                .consumer
                .poll(if records.is_empty() {
                    left
                } else {
                    Duration::ZERO
                })
                .map(|polled| {
                    polled.map(|message| {
                        (
                            (message.topic().to_string(), message.partition()),
                            message.offset(),
                            message.payload().map(<[u8]>::to_vec),
                        )
                    })
                });
            // The rebalance callbacks ran inside that poll, before the
            // record it returns (read under the new assignment).
            self.rebalanced(&mut records);
            match polled {
                // A poll also comes back empty after serving an event (a
                // commit's answer): wait on while time is left.
                None if records.is_empty() && !left.is_zero() => {}
                None => break,
                Some(Ok((partition, offset, value))) => {
                    self.reading.over("reading records");
                    if !self.in_sequence(&partition, offset) {
                        continue;
                    }
                    let (topic, partition) = partition;
                    records.push(Record {
                        token: record_token(&topic, partition, offset),
                        topic,
                        partition,
                        offset,
                        value,
                        epoch: self.epoch,
                    });
                    if records.len() >= max {
                        break;
                    }
                }
                Some(Err(e)) => {
                    self.reading.failed("reading records", &e.to_string());
                    if records.is_empty() {
                        // An error comes back at once: not a busy loop.
                        std::thread::sleep(BACKOFF.0);
                    }
                    break;
                }
            }
        }
        Ok(records)
    }

    /// Hands the batch's outputs and dead letters to the producer; their
    /// deliveries are awaited when the batch's turn to commit comes.
    fn publish(
        &mut self,
        records: &[Record],
        decided: &DecidedBatch,
    ) -> Result<Pending<'a>, KafkaError> {
        let config: &'a KafkaConfig = self.config;
        let tokens: Vec<String> = records.iter().map(|r| r.token.clone()).collect();
        let mut produces = Vec::new();
        for (input, outcome) in self.outcomes(records, decided).into_iter().enumerate() {
            match outcome {
                Outcome::Output { key, value } => produces.push(Produce {
                    topic: &config.output_topic,
                    key,
                    value,
                    dead: None,
                    input,
                }),
                Outcome::Dead { reason, value } => {
                    self.dead_lettered(&tokens[input], &reason);
                    produces.push(Produce {
                        topic: &config.dead_letter_topic,
                        key: tokens[input].as_bytes().to_vec(),
                        value,
                        dead: Some((reason, tokens[input].clone())),
                        input,
                    });
                }
                Outcome::Skip => {}
            }
        }
        let mut round = Round::default();
        let mut sent = Vec::with_capacity(produces.len());
        for (i, produce) in produces.iter().enumerate() {
            match self.send(produce) {
                Ok(seq) => sent.push((i, seq)),
                Err(e) => Self::refused_at_once(&mut round, i, e),
            }
        }
        // Serves the delivery reports already in.
        self.producer.poll(Duration::ZERO);
        Ok(Pending {
            produces,
            sent,
            round,
            tokens,
        })
    }

    /// Awaits the batch's deliveries, producing again what failed, and
    /// dead-letters without their bytes the records refused for size.
    fn stored(&mut self, pending: Pending<'a>) -> Result<(), KafkaError> {
        let Pending {
            mut produces,
            sent,
            mut round,
            tokens,
        } = pending;
        self.deliveries(&sent, &mut round);
        for (was_dead, input, reason) in self.complete(&mut produces, &tokens, round)? {
            self.summary.too_large += 1;
            if was_dead {
                // A dead letter already (and counted): sent without its bytes.
                tracing::warn!(record = %tokens[input], "{reason}");
            } else {
                self.dead_lettered(&tokens[input], &reason);
            }
        }
        Ok(())
    }

    /// Commits the next offset of each partition of the batch
    /// (asynchronously: the answer comes through a later poll), except
    /// for partitions revoked since it was read, whose next owner reads
    /// them again.
    fn acknowledge(&mut self, records: Vec<Record>) -> Result<(), KafkaError> {
        let mut next: BTreeMap<(String, i32), i64> = BTreeMap::new();
        let mut tokens = Vec::with_capacity(records.len());
        let mut left = 0u64;
        for record in records {
            let revoked = self.revoked_at.iter().any(|((t, p), at)| {
                *t == record.topic && *p == record.partition && *at > record.epoch
            });
            if revoked {
                left += 1;
                continue;
            }
            let at = next.entry((record.topic, record.partition)).or_insert(0);
            *at = (*at).max(record.offset + 1);
            tokens.push(record.token.into_bytes());
        }
        if left > 0 {
            self.settled.failed += left;
            tracing::info!(
                records = left,
                "produced records of revoked partitions left uncommitted: their next owner \
                 reads them again"
            );
        }
        if next.is_empty() {
            return Ok(());
        }
        tracing::debug!(records = tokens.len(), next = ?next, "committing");
        let offsets: Vec<(String, i32, i64)> =
            next.into_iter().map(|((t, p), o)| (t, p, o)).collect();
        let sent = self
            .to_commit
            .as_ref()
            .is_some_and(|to| to.send(offsets.clone()).is_ok());
        if sent {
            self.commits.push_back((offsets, tokens));
        } else {
            self.settled.failed += tokens.len() as u64;
            tracing::warn!(
                records = tokens.len(),
                "the committer is gone; these records will be read again"
            );
        }
        Ok(())
    }

    fn settled(&mut self) -> Settled {
        self.commit_answers();
        std::mem::take(&mut self.settled)
    }

    /// Waits until every commit is answered (at most [`COMMIT_WAIT`]).
    fn finish(&mut self) -> Result<(), KafkaError> {
        let deadline = Instant::now() + COMMIT_WAIT;
        self.commit_answers();
        while !self.commits.is_empty() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
            self.commit_answers();
        }
        let unanswered: u64 = self.commits.drain(..).map(|(_, t)| t.len() as u64).sum();
        if unanswered > 0 {
            self.settled.failed += unanswered;
            tracing::warn!(
                records = unanswered,
                "commits unanswered at the stop: those records may be read again"
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_token_is_topic_partition_offset() {
        for (topic, partition, offset) in [
            ("tweets", 0, 0),
            ("a.b-c", 17, 1_234_567),
            ("t", i32::MAX, i64::MAX),
        ] {
            assert_eq!(
                record_token(topic, partition, offset),
                format!("{topic}/{partition}/{offset}")
            );
        }
    }

    #[test]
    fn keys_are_the_ids_without_json_quotes() {
        assert_eq!(record_key(&MessageId::DigitString(42)), b"42");
        assert_eq!(record_key(&MessageId::Integer(7)), b"7");
        assert_eq!(
            record_key(&MessageId::from_json(r#""abc-1""#).unwrap()),
            b"abc-1"
        );
    }

    #[test]
    fn a_refused_option_is_named_without_its_value() {
        let brokers = KafkaBrokers {
            servers: "127.0.0.1:9092".into(),
            options: vec![("security.protocol".into(), "s3cr3t".into())],
        };
        let refused = client_config(&brokers)
            .create::<BaseProducer>()
            .err()
            .expect("an unknown protocol is refused");
        let shown = settings_error(&refused);
        assert!(
            shown.contains("security.protocol") && !shown.contains("s3cr3t"),
            "{shown}"
        );
    }

    #[test]
    fn option_values_are_never_shown() {
        let brokers = KafkaBrokers {
            servers: "127.0.0.1:9092".into(),
            options: vec![("sasl.password".into(), "secret".into())],
        };
        let shown = format!("{brokers} {brokers:?}");
        assert!(shown.contains("sasl.password") && !shown.contains("secret"));
    }
}

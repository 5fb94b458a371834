//! `dedup-stream consume --kafka`: a worker of a Kafka consumer group.
//!
//! ```text
//!  topics IN ──poll (group)──▶ prepare ──▶ index store ──▶ produce OUT (key = id) ──▶ commit offsets
//!   (offsets committed         (sketch)    (one call)      idempotent producer,        (synchronous,
//!    by the worker only)                                   every delivery awaited)     per partition)
//! ```
//!
//! - Each record's value is one JSON message, tagged exactly as the filter
//!   tags a line and produced to the output topic with the message's id as
//!   its key. A leading UTF-8 byte-order mark is skipped; a value longer
//!   than `--max-line-bytes` is refused, as the filter refuses such a line.
//! - **At least once, with the same verdict every time.** Offsets are
//!   committed (synchronously, never automatically) only after every output
//!   of the batch is acknowledged by the broker (`acks=all`, idempotent
//!   producer). A worker that dies between the two leaves the offsets
//!   behind: the records are delivered again (to it or, after a rebalance,
//!   to another worker), the index answers them from its memo, keyed by
//!   `TOPIC/PARTITION/OFFSET` (their first verdict: a record is never "a
//!   duplicate of itself"), and the repeated output is byte for byte the
//!   same, with the same key: a consumer of the output topic drops it by
//!   key. Kafka transactions (KIP-98) are not used: see docs/queues.md.
//! - **Rebalances.** Partitions are revoked and assigned inside `poll`, and
//!   only while a batch is being gathered: records gathered before a
//!   revocation from a revoked partition are abandoned (nothing of them was
//!   produced or committed; their next owner reads them from the committed
//!   offset). A batch, once gathered, is produced and committed before the
//!   next poll, so no commit is made for a partition under an assignment
//!   it was not read under. A commit the group refuses (the worker was
//!   taken out of it, a rebalance began) is not retried: the records are
//!   read again by their next owner and get the same verdicts.
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
//! - A stop request (SIGTERM) finishes the batch in hand, commits it, and
//!   leaves the group.

use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
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

use crate::broker::{self, Outage};
use crate::engine::{IndexStore, Preparer};
use crate::error::{InvalidReason, StoreError};
use crate::pipeline::Emit;
use crate::queue_batch::{self, Payload};
use crate::record::{Decoder, FieldSpec, MessageId};
use crate::server::metrics::Metrics;

/// Default records gathered at a time.
pub const DEFAULT_BATCH: usize = 256;
/// Header of a dead letter that says why its record was refused.
pub const ERROR_HEADER: &str = "Dedup-Error";
/// Header of a dead letter that names its input: `TOPIC/PARTITION/OFFSET`.
pub const SOURCE_HEADER: &str = "Dedup-Source";
/// Longest wait for a record when none is ready, before looking around
/// (stop requests, progress).
const IDLE_WAIT: Duration = Duration::from_secs(1);
/// How often progress is logged.
const PROGRESS_EVERY: Duration = Duration::from_secs(10);
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
/// Attempts at a commit before its records are left to be read again.
const COMMIT_TRIES: u32 = 3;
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
    /// Which verdicts are produced (every record is committed).
    pub emit: Emit,
    /// Where the id and text are in a message.
    pub fields: FieldSpec,
    /// Records gathered at a time.
    pub batch: usize,
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

/// The consumer's callbacks: notes revoked partitions for the worker.
struct ConsumerHooks {
    /// Partitions revoked since the worker last looked.
    revoked: Mutex<Vec<(String, i32)>>,
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
                tracing::info!(partitions = list.count(), "partitions assigned");
            }
            Rebalance::Error(e) => tracing::warn!("rebalance failed: {e}"),
        }
    }
}

/// A delivery report: `Err` with the error and whether it refused the
/// record (or its batch) for its size.
type Delivery = Result<(), (String, bool)>;

/// The producer's callbacks: collects delivery reports by output index.
struct ProducerHooks {
    delivered: Mutex<Vec<(usize, Delivery)>>,
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
            .push((index, result));
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
}

impl Record {
    /// `TOPIC/PARTITION/OFFSET`: the record's memo token.
    fn token(&self) -> String {
        format!("{}/{}/{}", self.topic, self.partition, self.offset)
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

/// The worker's state between batches.
struct Worker<'a, S> {
    config: &'a KafkaConfig,
    preparer: &'a Preparer,
    decoder: Decoder,
    store: &'a mut S,
    consumer: BaseConsumer<ConsumerHooks>,
    producer: BaseProducer<ProducerHooks>,
    stop: &'a AtomicBool,
    metrics: &'a Metrics,
    summary: KafkaSummary,
    /// The largest record the producer and the output topics take.
    limit: Limit,
    /// Longest message decided (`--max-line-bytes`, or its default).
    max_line_bytes: usize,
}

/// The largest record the worker can store, and who says so.
#[derive(Clone, Debug)]
struct Limit {
    bytes: usize,
    /// "the producer's message.max.bytes", "topic T's max.message.bytes".
    source: String,
}

/// Runs the worker until `stop` is set (or a fatal error): checks the
/// topics, joins the group, then gathers, decides, produces and commits
/// batch after batch. Synchronous: librdkafka's clients run their own
/// threads, and a thread of this one watches them for stalls.
pub fn run<S: IndexStore>(
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
            delivered: Mutex::new(Vec::new()),
            progress: Arc::clone(&writing),
        })
        .map_err(settings)?;
    let max_line_bytes = line_limit(config.max_line_bytes, &limit);
    let topics: Vec<&str> = config.topics.iter().map(String::as_str).collect();
    consumer.subscribe(&topics).map_err(settings)?;
    let mut worker = Worker {
        config,
        preparer,
        decoder: Decoder::new(config.fields.clone()),
        store,
        consumer,
        producer,
        stop,
        metrics,
        summary: KafkaSummary::default(),
        limit,
        max_line_bytes,
    };
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
        let result = worker.consume();
        done.store(true, Ordering::Relaxed);
        result
    });
    result?;
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

impl<'a, S: IndexStore> Worker<'a, S> {
    /// Gathers, decides, produces and commits batch after batch until
    /// `stop` is set (or a fatal error).
    fn consume(&mut self) -> Result<(), KafkaError> {
        let started = Instant::now();
        let mut last_report = Instant::now();
        let mut outage = Outage::new("Kafka", self.metrics);
        while !self.stop.load(Ordering::Relaxed) {
            if last_report.elapsed() >= PROGRESS_EVERY {
                last_report = Instant::now();
                let s = self.summary;
                tracing::info!(
                    read = s.read,
                    per_second = (s.read as f64 / started.elapsed().as_secs_f64()).round(),
                    duplicates = s.duplicates,
                    invalid = s.invalid,
                    committed = s.committed,
                    abandoned = s.abandoned,
                    "consuming"
                );
            }
            let records = self.gather(&mut outage);
            if records.is_empty() {
                continue;
            }
            self.process(records)?;
        }
        Ok(())
    }

    /// Gathers a batch: what is ready now, else waits up to [`IDLE_WAIT`]
    /// for one record and takes what is ready with it. Records of a
    /// partition revoked meanwhile are dropped (see the module
    /// documentation).
    fn gather(&mut self, outage: &mut Outage<'_>) -> Vec<Record> {
        let mut records: Vec<Record> = Vec::new();
        loop {
            let wait = if records.is_empty() {
                IDLE_WAIT
            } else {
                Duration::ZERO
            };
            let polled = self.consumer.poll(wait);
            // The rebalance callbacks ran inside that poll, before the
            // record it returns (read under the new assignment).
            let revoked = std::mem::take(
                &mut *self
                    .consumer
                    .context()
                    .revoked
                    .lock()
                    .unwrap_or_else(|e| e.into_inner()),
            );
            if !revoked.is_empty() {
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
            match polled {
                None => break,
                Some(Ok(message)) => {
                    outage.over("reading records");
                    records.push(Record {
                        topic: message.topic().to_string(),
                        partition: message.partition(),
                        offset: message.offset(),
                        value: message.payload().map(<[u8]>::to_vec),
                    });
                    if records.len() >= self.config.batch {
                        break;
                    }
                }
                Some(Err(e)) => {
                    outage.failed("reading records", &e.to_string());
                    if records.is_empty() {
                        // An error comes back at once: not a busy loop.
                        std::thread::sleep(BACKOFF.0);
                    }
                    break;
                }
            }
        }
        records
    }

    /// Prepares and decides a batch: one outcome per record.
    fn decide(
        &mut self,
        records: &[Record],
        tokens: &[String],
    ) -> Result<Vec<Outcome>, KafkaError> {
        // A record without a value is refused as an empty line is.
        let payloads: Vec<Option<&[u8]>> = records
            .iter()
            .map(|record| Some(record.value.as_deref().unwrap_or_default()))
            .collect();
        let tokens: Vec<&[u8]> = tokens.iter().map(String::as_bytes).collect();
        let (decided, tally) = queue_batch::decide(
            (self.preparer, &self.decoder),
            &mut *self.store,
            &payloads,
            &tokens,
            self.max_line_bytes,
            self.metrics,
        )?;
        self.summary.new += tally.new;
        self.summary.duplicates += tally.duplicates;
        self.summary.deletions += tally.deletions;
        let outcomes = records
            .iter()
            .enumerate()
            .map(|(at, record)| match decided.payload(at) {
                Payload::Missing => Outcome::Skip,
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
                Payload::Message(message, verdict) if self.config.emit.wants(verdict) => {
                    Outcome::Output {
                        key: record_key(&message.id),
                        value: decided.tagged(message, verdict),
                    }
                }
                Payload::Message(..) => Outcome::Skip,
            })
            .collect();
        Ok(outcomes)
    }

    /// Decides a batch, produces its outputs and dead letters (every
    /// delivery acknowledged), then commits its offsets.
    fn process(&mut self, records: Vec<Record>) -> Result<(), KafkaError> {
        let n = records.len() as u64;
        self.summary.read += n;
        self.metrics.queue_read.fetch_add(n, Ordering::Relaxed);
        let tokens: Vec<String> = records.iter().map(Record::token).collect();
        let outcomes = self.decide(&records, &tokens)?;
        let config = self.config;
        let mut produces = Vec::new();
        for (input, (outcome, token)) in outcomes.into_iter().zip(&tokens).enumerate() {
            match outcome {
                Outcome::Output { key, value } => produces.push(Produce {
                    topic: &config.output_topic,
                    key,
                    value,
                    dead: None,
                    input,
                }),
                Outcome::Dead { reason, value } => {
                    self.dead_lettered(token, &reason);
                    produces.push(Produce {
                        topic: &config.dead_letter_topic,
                        key: token.as_bytes().to_vec(),
                        value,
                        dead: Some((reason, token.clone())),
                        input,
                    });
                }
                Outcome::Skip => {}
            }
        }
        for (was_dead, input, reason) in self.produce(produces, &tokens)? {
            self.summary.too_large += 1;
            if was_dead {
                // A dead letter already (and counted): sent without its bytes.
                tracing::warn!(record = %tokens[input], "{reason}");
            } else {
                self.dead_lettered(&tokens[input], &reason);
            }
        }

        // The outputs are stored: now the offsets may go. The next offset
        // of each partition is committed.
        let mut next: BTreeMap<(&str, i32), i64> = BTreeMap::new();
        for record in &records {
            let at = next
                .entry((record.topic.as_str(), record.partition))
                .or_insert(0);
            *at = (*at).max(record.offset + 1);
        }
        tracing::debug!(records = n, next = ?next, "committing");
        let mut list = TopicPartitionList::new();
        for ((topic, partition), offset) in &next {
            list.add_partition_offset(topic, *partition, Offset::Offset(*offset))
                .map_err(|e| KafkaError::Settings(e.to_string()))?;
        }
        let mut tries = 0;
        loop {
            tries += 1;
            match self.consumer.commit(&list, CommitMode::Sync) {
                Ok(()) => {
                    self.summary.committed += n;
                    self.metrics.queue_acked.fetch_add(n, Ordering::Relaxed);
                    let forget: Vec<&[u8]> = tokens.iter().map(|t| t.as_bytes()).collect();
                    self.store.forget(&forget);
                    return Ok(());
                }
                Err(e) => {
                    let refused = matches!(
                        e.rdkafka_error_code(),
                        Some(
                            RDKafkaErrorCode::IllegalGeneration
                                | RDKafkaErrorCode::UnknownMemberId
                                | RDKafkaErrorCode::RebalanceInProgress
                                | RDKafkaErrorCode::FencedInstanceId
                        )
                    );
                    if refused || tries >= COMMIT_TRIES || self.stop.load(Ordering::Relaxed) {
                        // Not committed: read again (here or by the next
                        // owner), answered from the memo, produced again
                        // byte for byte.
                        self.summary.uncommitted += n;
                        tracing::warn!(
                            records = n,
                            "committing failed ({e}); they will be read again"
                        );
                        return Ok(());
                    }
                    self.metrics.store_errors.fetch_add(1, Ordering::Relaxed);
                    std::thread::sleep(BACKOFF.1);
                }
            }
        }
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

    /// Produces `produces` until the broker has acknowledged each one;
    /// gives up only when told to stop (or on a fatal producer error). A
    /// record refused for its size is produced again by itself (its batch
    /// may have been what was too large); refused alone, it is replaced by
    /// a dead letter without its bytes. Returns those: (whether it was a
    /// dead letter already, its input, the reason).
    fn produce(
        &mut self,
        mut produces: Vec<Produce<'a>>,
        tokens: &[String],
    ) -> Result<Vec<(bool, usize, String)>, KafkaError> {
        let mut refused = Vec::new();
        let mut left: Vec<usize> = (0..produces.len()).collect();
        // Refused for size in a batch: produced next by themselves.
        let mut alone: HashSet<usize> = HashSet::new();
        let mut outage = Outage::new("Kafka", self.metrics);
        let mut wait = BACKOFF.0;
        while !left.is_empty() {
            let mut failed: Vec<usize> = Vec::new();
            let mut oversized: Vec<(usize, String)> = Vec::new();
            let mut last_error = String::new();
            for &i in &left {
                if alone.contains(&i) {
                    // Nothing else in its batch.
                    self.await_deliveries();
                }
                let produce = &produces[i];
                let mut record = BaseRecord::with_opaque_to(produce.topic, i)
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
                        Ok(()) => break,
                        Err((RdError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                            // The local queue is full: serve deliveries.
                            record = back;
                            self.producer.poll(Duration::from_millis(100));
                        }
                        // Over message.max.bytes: refused before sending.
                        Err((e, _)) if refused_for_size(&e) => {
                            oversized.push((i, e.to_string()));
                            break;
                        }
                        Err((e, _)) => {
                            failed.push(i);
                            last_error = e.to_string();
                            break;
                        }
                    }
                }
                if alone.contains(&i) {
                    self.await_deliveries();
                }
            }
            self.await_deliveries();
            let delivered = std::mem::take(
                &mut *self
                    .producer
                    .context()
                    .delivered
                    .lock()
                    .unwrap_or_else(|e| e.into_inner()),
            );
            for (i, result) in delivered {
                match result {
                    Ok(()) => {}
                    Err((e, true)) if alone.contains(&i) => oversized.push((i, e)),
                    Err((e, true)) => {
                        // Not an outage: produced again, by itself, at once.
                        tracing::debug!("a record was refused for its size in a batch: {e}");
                        alone.insert(i);
                        failed.push(i);
                    }
                    Err((e, false)) => {
                        failed.push(i);
                        last_error = e;
                    }
                }
            }
            for (i, error) in oversized {
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
                alone.remove(&i);
                failed.push(i);
            }
            if failed.is_empty() {
                outage.over("producing outputs");
                return Ok(refused);
            }
            if let Some((code, reason)) = self.producer.client().fatal_error() {
                return Err(KafkaError::Fatal(format!("{code}: {reason}")));
            }
            if !last_error.is_empty() {
                outage.failed(
                    "producing outputs",
                    &format!("{} not delivered: {last_error}", failed.len()),
                );
                if self.stop.load(Ordering::Relaxed) {
                    return Err(KafkaError::Unavailable("producing outputs".into()));
                }
                std::thread::sleep(wait);
                wait = (wait * 2).min(BACKOFF.1);
            }
            failed.sort_unstable();
            failed.dedup();
            left = failed;
        }
        Ok(refused)
    }

    /// Waits until every delivery is reported (within
    /// `message.timeout.ms`); the stall watch reports a broker that does
    /// not answer meanwhile.
    fn await_deliveries(&self) {
        while self.producer.in_flight_count() > 0 {
            let _ = self.producer.flush(Duration::from_secs(1));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

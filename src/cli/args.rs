//! The command line: clap definitions, turned into library configs. Nothing
//! past this module sees a clap type.

use std::net::{SocketAddr, ToSocketAddrs};
use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand, ValueEnum};

use dedup_stream::engine::config::{
    DEFAULT_CAPACITY, DEFAULT_EMPTY_TEXT, DEFAULT_MAX_BUCKET, DEFAULT_MEASURE, DEFAULT_RECENT,
    DEFAULT_SAMPLE, DEFAULT_SHINGLE, DEFAULT_THRESHOLD, EmptyText, EngineConfig, Measure, Sampling,
    Shingling, Window,
};
use dedup_stream::pipeline::{self, Emit, OnInvalid, PipelineConfig, Repeats};
use dedup_stream::queue;
use dedup_stream::queue::kafka::{KafkaBrokers, KafkaConfig};
use dedup_stream::queue::nats::{NatsConfig, NatsServer};
use dedup_stream::queue::redis_streams::{self, ConsumeConfig, Output};
use dedup_stream::redis_index::{DEFAULT_INDEX_NAME, IndexLocation};
use dedup_stream::server::{self, ListenAddr, Reply, ServerConfig};
use dedup_stream::state::journal::Fsync;
use dedup_stream::values::{
    at_least_one, parse_capacity, parse_duration, parse_recent, parse_size, parse_threads,
    parse_threshold,
};
use dedup_stream::{ConfigError, FieldSpec, StoreError};

/// Tags every JSON line of the files (or stdin) as new or as a
/// near-duplicate of an earlier message, and writes it to stdout in input
/// order.
#[derive(Debug, Parser)]
#[command(name = "dedup-stream", version, about, long_about = None)]
#[command(after_help = "Examples:\n  \
    dedup-stream tweets.jsonl > tagged.jsonl\n  \
    zcat day1.jsonl.gz | dedup-stream --emit new - day2.jsonl\n  \
    dedup-stream compare 'first text' 'second text'\n  \
    dedup-stream serve --listen localhost:7878\n\n\
    Environment: the filter's options can also be set by DEDUP_STREAM_ and the option's long \
    name in capitals (--threshold: DEDUP_STREAM_THRESHOLD; a flag's: 1 or 0, yes or no, true \
    or false, on or off, or nothing), the command line winning; each one taken from the \
    environment is said on stderr.")]
#[command(args_conflicts_with_subcommands = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,

    #[command(flatten)]
    pub filter: FilterArgs,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Print the similarity of two texts (or files) and the shingles they
    /// share: the quick check when a verdict surprises you. Exit status 0
    /// when they are near-duplicates, 1 when not, 2 on an error.
    Compare(CompareArgs),
    /// Write one self-contained HTML page of what a run decided, from its
    /// tagged output (.gz and .zst read as they are): totals, duplicates
    /// over time, similarities against the threshold, the largest
    /// clusters, rules and near misses (with --explain output).
    Report(ReportArgs),
    /// Serve one shared index over TCP and Unix sockets: a sidecar that
    /// several consumers ask per message (JSON lines in, one reply line per
    /// line out). Every option can also be set by an environment variable
    /// (DEDUP_STREAM_ and the option's name, as --help shows).
    Serve(Box<ServeArgs>),
    /// Read a Redis Streams consumer group (or, with --nats, a NATS
    /// JetStream durable consumer; with --kafka, a Kafka consumer group),
    /// tag every message, and append it to an output stream: a worker of a
    /// fleet that shares one index in Redis.
    Consume(Box<ConsumeArgs>),
    /// Look after an index kept in Redis: what it holds, or remove it.
    Index(IndexAdminArgs),
    /// Find the settings that suit a labelled sample of your data.
    ///
    /// Runs the engine over the sample at a grid of thresholds, measures
    /// and shingle choices, and prints precision, recall and F1 of each
    /// (scored as the synthetic streams' score.py scores the filter's
    /// output), the threshold curve and the recommended flags
    /// (docs/tune.md).
    Tune(Box<TuneArgs>),
    /// Print a shell completion script to stdout (for example
    /// `dedup-stream completions bash > ~/.local/share/bash-completion/completions/dedup-stream`).
    Completions(CompletionsArgs),
    /// Print a manual page (roff) to stdout: the main one, or a
    /// subcommand's (for example
    /// `dedup-stream man > ~/.local/share/man/man1/dedup-stream.1`,
    /// `dedup-stream man serve > ~/.local/share/man/man1/dedup-stream-serve.1`).
    Man(ManArgs),
}

/// `man`'s argument.
#[derive(Debug, Args)]
pub struct ManArgs {
    /// The subcommand whose page to print (index-forget: `index
    /// forget`'s); none: the main page.
    #[arg(value_parser = clap::builder::PossibleValuesParser::new(crate::cli::manual::PAGES))]
    pub page: Option<String>,

    /// Write every page into DIR instead (dedup-stream.1,
    /// dedup-stream-serve.1, dedup-stream-index-forget.1, …), for a
    /// man1 directory.
    #[arg(long, value_name = "DIR", conflicts_with = "page")]
    pub all: Option<PathBuf>,
}

/// `completions`' argument.
#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell to complete for.
    #[arg(value_enum)]
    pub shell: ShellArg,
}

/// The shells `completions` writes for.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum ShellArg {
    Bash,
    Zsh,
    Fish,
    Elvish,
    Powershell,
}

/// The index's name in Redis and how calls to Redis are waited for: the
/// same for the filter, `serve` and `consume` (whose streams are in Redis
/// too).
#[derive(Debug, Args)]
pub struct RedisArgs {
    /// Name of the index in Redis: the prefix and hash tag of its keys, so
    /// that several indexes share one Redis.
    #[arg(long, value_name = "NAME", default_value = DEFAULT_INDEX_NAME)]
    pub index_name: String,

    /// How long a call may wait for Redis's answer before the connection
    /// is taken for dead, made again, and the call repeated (safely: Redis
    /// remembers what it answered). Units: ms, s, m.
    #[arg(long, default_value = "30s", value_name = "DURATION", value_parser = parse_duration)]
    pub redis_timeout: Duration,

    /// How long an outage of Redis is waited out (the input held, calls
    /// retried; a worker's unacknowledged entries stay pending) before the
    /// run stops with an error; `forever` waits until Redis is back or a
    /// signal comes. Units: ms, s, m. A host name that does not resolve, a
    /// refused password, or a cluster location that is not a cluster stop
    /// the run at once.
    #[arg(long, default_value = "forever", value_name = "DURATION|forever", value_parser = parse_wait)]
    pub redis_wait: Wait,

    /// With the index in Redis: messages logged between two snapshots of
    /// the index stored there (the log is trimmed behind them). Default:
    /// half the capacity.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub log_snapshot_every: Option<u64>,
}

/// Where the index lives.
#[derive(Debug, Args)]
pub struct IndexArgs {
    /// Where the index lives: memory (this process), or a Redis that
    /// several workers share: redis://HOST:PORT[/DB], rediss://…,
    /// redis+unix:///PATH, or redis+cluster://HOST:PORT[,HOST:PORT…].
    #[arg(long, value_name = "URL", default_value = "memory", value_parser = LocationParser)]
    pub index: IndexLocation,

    /// The index's name in Redis, and how calls to Redis are waited for.
    #[command(flatten)]
    pub in_redis: RedisArgs,

    /// With the index in memory: the most memory it may hold (its entries,
    /// shingle sets and postings), in bytes or with a unit, K, M or G
    /// (powers of 1024: 512M, 2G), at least 1M; past it the least recently
    /// used messages are evicted, whatever --capacity allows.
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub max_index_bytes: Option<NonZeroUsize>,
}

/// `consume`'s options.
#[derive(Debug, Args)]
pub struct ConsumeArgs {
    #[command(flatten)]
    pub engine: EngineArgs,

    #[command(flatten)]
    pub message: MessageArgs,

    /// The Redis that holds the streams: redis://HOST:PORT[/DB],
    /// rediss://… or redis+unix:///PATH.
    #[arg(
        long,
        value_name = "URL",
        required_unless_present_any = ["nats", "kafka"],
        conflicts_with_all = ["nats", "kafka"]
    )]
    pub redis: Option<String>,

    /// Read a NATS JetStream stream instead of Redis: the server,
    /// nats://[USER:PASSWORD@|TOKEN@]HOST:PORT or tls://… (several
    /// separated by commas). Takes --subject, --durable, --output-subject.
    #[arg(long, value_name = "URL", conflicts_with = "kafka")]
    pub nats: Option<String>,

    /// Read a Kafka consumer group instead of Redis: the bootstrap
    /// brokers, HOST:PORT[,HOST:PORT…]. Takes --topic, --group,
    /// --output-topic.
    #[arg(long, value_name = "HOST:PORT")]
    pub kafka: Option<String>,

    /// With --kafka: a librdkafka property set on the consumer and the
    /// producer (security.protocol=SASL_SSL, sasl.username=…,
    /// session.timeout.ms=10000, …); repeat it for several.
    #[arg(long, value_name = "KEY=VALUE", requires = "kafka", value_parser = parse_property)]
    pub kafka_option: Vec<(String, String)>,

    /// With --kafka: a topic to read (repeat it for several).
    #[arg(long, value_name = "TOPIC", requires = "kafka")]
    pub topic: Vec<String>,

    /// With --kafka: the topic tagged messages are produced to (key: the
    /// message's id). It must exist.
    #[arg(long, value_name = "TOPIC", requires = "kafka")]
    pub output_topic: Option<String>,

    /// With --kafka: the topic malformed records are produced to, with the
    /// reason in the Dedup-Error header (default: OUTPUT-TOPIC.invalid). It
    /// must exist.
    #[arg(long, value_name = "TOPIC", requires = "kafka")]
    pub dead_letter_topic: Option<String>,

    /// With --nats: a credentials file (JWT and NKey seed) to log in with.
    #[arg(long, value_name = "FILE", requires = "nats")]
    pub nats_creds: Option<PathBuf>,

    /// With --nats: a CA certificate (PEM) to verify the server's TLS
    /// certificate with (TLS is then required).
    #[arg(long, value_name = "FILE", requires = "nats")]
    pub nats_ca: Option<PathBuf>,

    /// The stream to read (a Redis key, or with --nats a JetStream stream,
    /// created on --subject if missing).
    #[arg(
        long,
        value_name = "KEY",
        required_unless_present = "kafka",
        conflicts_with = "kafka"
    )]
    pub stream: Option<String>,

    /// The consumer group (created at the start of the stream if missing;
    /// with --kafka, the Kafka consumer group).
    #[arg(
        long,
        value_name = "NAME",
        required_unless_present = "nats",
        conflicts_with = "nats"
    )]
    pub group: Option<String>,

    /// With --nats: the subject read (the consumer's filter).
    #[arg(
        long,
        value_name = "SUBJECT",
        requires = "nats",
        required_unless_present_any = ["redis", "kafka"]
    )]
    pub subject: Option<String>,

    /// With --nats: the durable pull consumer (created if missing only with
    /// --create, else waited for; workers of one name share the messages).
    #[arg(
        long,
        value_name = "NAME",
        requires = "nats",
        required_unless_present_any = ["redis", "kafka"]
    )]
    pub durable: Option<String>,

    /// With --nats: the subject tagged messages are published to (each with
    /// Nats-Msg-Id dedup.STREAM.DURABLE.CREATED.SEQUENCE).
    #[arg(
        long,
        value_name = "SUBJECT",
        requires = "nats",
        required_unless_present_any = ["redis", "kafka"]
    )]
    pub output_subject: Option<String>,

    /// With --nats: the stream that stores the output and dead-letter
    /// subjects, created on them if missing (default: a stream must
    /// already take them).
    #[arg(long, value_name = "NAME", requires = "nats")]
    pub output_stream: Option<String>,

    /// With --nats: the subject malformed messages are published to, with
    /// the reason in the Dedup-Error header (default: OUTPUT-SUBJECT.invalid).
    #[arg(long, value_name = "SUBJECT", requires = "nats")]
    pub dead_letter_subject: Option<String>,

    /// With --nats: how long the server waits for a message's
    /// acknowledgement before delivering it again (the consumer's ack
    /// wait). Units: ms, s, m, h.
    #[arg(long, default_value = "30s", value_name = "DURATION", value_parser = parse_duration, requires = "nats")]
    pub ack_wait: Duration,

    /// This worker's name in the group (default: HOSTNAME-PID). A worker
    /// restarted under the same name first finishes its own pending
    /// entries.
    #[arg(long, value_name = "NAME", conflicts_with_all = ["nats", "kafka"])]
    pub consumer: Option<String>,

    /// The stream tagged messages are appended to, or - to write them as
    /// lines to stdout (then at least once rather than exactly once).
    #[arg(
        long,
        value_name = "KEY",
        required_unless_present_any = ["nats", "kafka"],
        conflicts_with_all = ["nats", "kafka"]
    )]
    pub output: Option<String>,

    /// The entry field that holds the message's JSON (in and out).
    #[arg(long, value_name = "NAME", default_value = redis_streams::DEFAULT_FIELD, conflicts_with_all = ["nats", "kafka"])]
    pub field: String,

    /// The stream malformed entries are sent to (default: OUTPUT:invalid,
    /// or STREAM:invalid with --output -).
    #[arg(long, value_name = "KEY", conflicts_with_all = ["nats", "kafka"])]
    pub invalid_stream: Option<String>,

    /// Which messages to append: all (tagged), new or duplicates. Every
    /// entry is acknowledged either way.
    #[arg(long, value_enum, default_value_t = EmitArg::All)]
    pub emit: EmitArg,

    /// Entries pending this long on another consumer (one that died) are
    /// claimed and finished here. Units: ms, s, m, h.
    #[arg(long, default_value = "60s", value_name = "DURATION", value_parser = parse_duration, conflicts_with_all = ["nats", "kafka"])]
    pub claim_idle: Duration,

    /// Create the input stream if it does not exist (empty), instead of
    /// waiting for it to appear (a misspelt name otherwise waits, saying
    /// so, rather than consuming a new, empty stream forever). With
    /// --nats: create the durable consumer if it does not exist (a NATS
    /// stream is created when missing).
    #[arg(long, conflicts_with = "kafka")]
    pub create: bool,

    /// Consumers of the group that hold no pending entry and have been idle
    /// this long (workers that stopped, under names not used again) are
    /// removed from the group. Units: ms, s, m, h.
    /// Redis Streams only.
    #[arg(long, default_value = "1h", value_name = "DURATION", value_parser = parse_duration, conflicts_with_all = ["nats", "kafka"])]
    pub forget_idle_consumers: Duration,

    /// Entries read at a time.
    #[arg(long, default_value_t = redis_streams::DEFAULT_BATCH, value_name = "N")]
    pub batch: usize,

    /// Batches written and not yet acknowledged (or committed), at most.
    /// The worker reads and decides the next batches while the broker
    /// stores the earlier ones; acknowledgements stay in order, each after
    /// its outputs are stored. 1: each batch stored and acknowledged
    /// before the next is read. A crash makes the worker write these again
    /// (same bytes).
    #[arg(long, default_value_t = queue::DEFAULT_IN_FLIGHT, value_name = "N")]
    pub in_flight: usize,

    /// Threads that parse and sketch the batches read while the worker
    /// decides, writes and acknowledges on one more; with 1, one thread
    /// does all. Default (and 0): the number of CPUs. The output does not
    /// depend on it.
    #[arg(long, value_name = "N", value_parser = parse_threads_arg)]
    pub threads: Option<Threads>,

    /// Benchmarks only: pass every message on untagged, deciding nothing,
    /// with the same client, batching and acknowledgements (the broker's
    /// own limit).
    #[arg(long, hide = true)]
    pub relay: bool,

    /// Where the index lives (default: on the --redis server; with --nats
    /// or --kafka, memory).
    #[arg(long, value_name = "URL", value_parser = LocationParser)]
    pub index: Option<IndexLocation>,

    /// The index's name in Redis, and how calls to Redis are waited for.
    #[command(flatten)]
    pub in_redis: RedisArgs,

    /// Serve GET /healthz and GET /metrics (Prometheus) over HTTP on
    /// IP:PORT.
    #[arg(long, value_name = "ADDR")]
    pub admin: Option<SocketAddr>,

    /// With --nats or --kafka and --index memory: the index's state file, loaded at
    /// the start and saved at a clean stop.
    #[command(flatten)]
    pub state: StateArgs,

    /// No summary at the end.
    #[arg(short, long)]
    pub quiet: bool,

    /// More logging on stderr (-v: progress and the index log's counts, -vv: debugging).
    #[arg(short, long, action = clap::ArgAction::Count, conflicts_with = "quiet")]
    pub verbose: u8,
}

/// `index`'s actions.
#[derive(Debug, Args)]
pub struct IndexAdminArgs {
    #[command(subcommand)]
    pub action: IndexAction,
}

#[derive(Debug, Subcommand)]
pub enum IndexAction {
    /// Print an index's settings, size, evictions and Redis memory (--index
    /// URL), or a state file's settings, size and entries (--state FILE).
    Info(InfoArgs),
    /// Remove every key of an index. Asks first on a terminal; --yes in
    /// scripts (without a terminal and without --yes, nothing is removed).
    Drop(DropArgs),
    /// Forget ids (deleted tweets: a compliance batch) from a state file
    /// (--state FILE) or an index in Redis (--index redis://…): one id a
    /// line from FILE or stdin, bare (1234) or in a JSON object (a
    /// deletion notice, a tweet, a compliance result). Prints how many
    /// were held. The engine options must be those the index was made
    /// with.
    Forget(Box<ForgetArgs>),
}

/// `index forget`'s options.
#[derive(Debug, Args)]
pub struct ForgetArgs {
    /// The file of ids (-: stdin; default: stdin).
    #[arg(value_name = "FILE")]
    pub file: Option<PathBuf>,

    #[command(flatten)]
    pub engine: EngineArgs,

    #[command(flatten)]
    pub message: MessageArgs,

    #[command(flatten)]
    pub index: IndexArgs,

    #[command(flatten)]
    pub state: ForgetStateArgs,
}

/// `index forget`'s state file: one that exists, and never
/// `--fresh-state` (forgetting from an index started empty would throw
/// the file's messages away and say it succeeded).
#[derive(Debug, Args)]
pub struct ForgetStateArgs {
    /// The state file to forget the ids from (with its journal), saved
    /// back atomically. It must exist, and the engine options must be
    /// those it was made with.
    #[arg(long, value_name = "FILE")]
    pub state: Option<PathBuf>,

    /// When the journal is forced to the disk: always, everysec or never
    /// (see the filter's --fsync).
    #[arg(long, default_value = "everysec", value_name = "POLICY", value_parser = parse_fsync)]
    pub fsync: Fsync,
}

impl ForgetStateArgs {
    /// As the filter's state options, without `--fresh-state` and
    /// without ever suggesting it.
    pub fn state_args(&self) -> StateArgs {
        StateArgs {
            state: self.state.clone(),
            fresh_state: false,
            fsync: self.fsync,
            offer_fresh_state: false,
        }
    }
}

impl ForgetArgs {
    /// The engine config.
    pub fn engine_config(&self) -> Result<EngineConfig, ConfigError> {
        let config = self.message.engine_config(&self.engine)?;
        Ok(EngineConfig {
            max_index_bytes: self.index.max_index_bytes,
            ..config
        })
    }
}

/// `index info`'s options: an index in Redis, or a state file.
#[derive(Debug, Args)]
#[command(group = clap::ArgGroup::new("where").required(true).multiple(false))]
pub struct InfoArgs {
    /// An index in Redis: redis://HOST:PORT[/DB], rediss://…,
    /// redis+unix:///PATH or redis+cluster://HOST:PORT[,HOST:PORT…].
    #[arg(long, value_name = "URL", value_parser = LocationParser, group = "where")]
    pub index: Option<IndexLocation>,

    /// Its name.
    #[arg(long, value_name = "NAME", default_value = DEFAULT_INDEX_NAME)]
    pub index_name: String,

    /// A state file (--state of the filter, serve, index forget): its
    /// settings, size, entries and journal, read without loading it.
    #[arg(long, value_name = "FILE", group = "where")]
    pub state: Option<PathBuf>,
}

/// `index drop`'s options.
#[derive(Debug, Args)]
pub struct DropArgs {
    #[command(flatten)]
    pub target: IndexTarget,

    /// Remove it without asking (for scripts: without a terminal to ask
    /// on, `index drop` removes nothing unless given --yes).
    #[arg(short, long)]
    pub yes: bool,
}

/// Which index in Redis.
#[derive(Debug, Args)]
pub struct IndexTarget {
    /// Where it lives: redis://HOST:PORT[/DB], rediss://…,
    /// redis+unix:///PATH or redis+cluster://HOST:PORT[,HOST:PORT…].
    #[arg(long, value_name = "URL", value_parser = LocationParser)]
    pub index: IndexLocation,

    /// Its name.
    #[arg(long, value_name = "NAME", default_value = DEFAULT_INDEX_NAME)]
    pub index_name: String,
}

/// How messages are compared.
#[derive(Debug, Args, Clone)]
pub struct EngineArgs {
    /// Similarity at or above which a message is a near-duplicate, in (0, 1].
    #[arg(long, default_value_t = DEFAULT_THRESHOLD, value_name = "F", value_parser = parse_threshold)]
    pub threshold: f64,

    /// How texts are cut into shingles: words:N (word N-grams), words:1-N
    /// (every word k-gram for k from 1 to N: the default, words and word
    /// pairs), chars:N (character N-grams) or spots:N (each English stop
    /// word and the next N other words, SpotSigs).
    #[arg(long, default_value_t = DEFAULT_SHINGLE, value_name = "KIND:N", value_parser = parse_shingling)]
    pub shingle: Shingling,

    /// Which shingles are kept: all, or mod:M (those whose fingerprint is 0
    /// modulo M, for long documents; a text with fewer than 32 such
    /// shingles keeps all of its own).
    #[arg(long, default_value_t = DEFAULT_SAMPLE, value_name = "all|mod:M", value_parser = parse_sampling)]
    pub sample: Sampling,

    /// How shingle sets are compared: jaccard (|A∩B|/|A∪B|) or containment
    /// (|A∩B|/min(|A|,|B|)).
    #[arg(long, default_value_t = DEFAULT_MEASURE, value_parser = parse_measure)]
    pub measure: Measure,

    /// Match only messages at most DURATION older than the newest seen
    /// (by created_at when a record has one, else arrival time), and evict
    /// older ones: a whole number and ms, s, m, h or d (10m, 24h, 7d).
    #[arg(long, value_name = "DURATION", value_parser = parse_window)]
    pub window: Option<Window>,

    /// What a message whose text is empty once normalised (blank, only a
    /// link and an RT prefix) gets: new (tagged new, never a duplicate, not
    /// indexed) or invalid (refused like a bad line, with its line number).
    #[arg(long, default_value_t = DEFAULT_EMPTY_TEXT, value_name = "new|invalid", value_parser = parse_empty_text)]
    pub empty_text: EmptyText,

    /// A match at most N messages old needs only the threshold minus 0.1
    /// when it is the only story near the message (no other indexed message
    /// of another cluster is within the threshold minus 0.3) and both texts
    /// have 6 to 20 words: edits of short texts. Under words:1-2 shingling
    /// only. 0: every match must reach the threshold.
    #[arg(long, default_value_t = DEFAULT_RECENT, value_name = "N", value_parser = parse_recent, allow_negative_numbers = true)]
    pub recent: u64,
}

/// Options the filter and the server share: the index's size and where
/// the id and text are.
#[derive(Debug, Args)]
pub struct MessageArgs {
    /// Most messages the index holds; past it the least recently used is
    /// evicted with everything it holds in the index.
    #[arg(long, default_value_t = NonZeroUsize::new(DEFAULT_CAPACITY).expect("non-zero"), value_name = "N", value_parser = parse_capacity)]
    pub capacity: NonZeroUsize,

    /// Dotted path of the id field (default: the first present of id_str,
    /// id, data.id).
    #[arg(long, value_name = "PATH", value_parser = parse_field_path)]
    pub id_field: Option<String>,

    /// Dotted path of a text field; repeat to join several with a space
    /// (default: the first present of extended_tweet.full_text, full_text,
    /// text, data.text, following native retweets).
    #[arg(long, value_name = "PATH", value_parser = parse_field_path)]
    pub text_field: Vec<String>,

    /// Longest input line in bytes; longer lines are skipped as invalid
    /// without being read into memory [default: 1048576; with --nats or
    /// --kafka, the broker's message size limit less 4096 bytes, so that a
    /// message still fits once tagged].
    #[arg(long = "max-line-bytes", value_name = "BYTES", value_parser = at_least_one)]
    pub max_line_bytes_given: Option<usize>,

    /// Most indexed messages one LSH bucket holds.
    #[arg(long, default_value_t = DEFAULT_MAX_BUCKET, value_name = "N", hide_short_help = true, value_parser = at_least_one)]
    pub max_bucket: usize,
}

/// The state file options.
#[derive(Debug, Args)]
pub struct StateArgs {
    /// Load the index from FILE at start (if it exists) and save it there at
    /// the end, atomically. A corrupt or incompatible file stops the run
    /// and is left untouched; a file that is not a state file at all (nor
    /// empty) is refused before anything is read.
    #[arg(long, value_name = "FILE")]
    pub state: Option<PathBuf>,

    /// With --state: if the file is corrupt or incompatible, start with an
    /// empty index (and replace the file at the next save) instead of
    /// stopping.
    #[arg(long, requires = "state")]
    pub fresh_state: bool,

    /// With --state: when the journal (FILE.journal, what was indexed since
    /// the last save, written before each answer or output line) is forced
    /// to the disk: always (before each batch's answers: a power cut loses
    /// nothing answered), everysec (at most a second's worth lost), or never
    /// (the system's choice). kill -9 loses nothing answered with any of
    /// them.
    #[arg(long, default_value = "everysec", value_name = "POLICY", value_parser = parse_fsync)]
    pub fsync: Fsync,

    /// Whether a state file that cannot be loaded suggests --fresh-state
    /// (not for `index forget`, which does not take it).
    #[arg(skip = true)]
    pub offer_fresh_state: bool,
}

/// The filter's options.
#[derive(Debug, Args)]
pub struct FilterArgs {
    /// JSON-lines files to read in order, as one stream (`-`: stdin; gzip
    /// and zstd, by a name ending in .gz or .zst or by their first bytes,
    /// are read decompressed). Default: stdin. A file named like a
    /// subcommand is read when given as a path: ./serve.
    #[arg(value_name = "FILE")]
    pub files: Vec<PathBuf>,

    /// Write the end-of-run summary as JSON to FILE (counts, elapsed
    /// seconds, messages per second, index size), for scripts and
    /// pipelines. Checked before any input is read: never an input file,
    /// and an existing file is replaced only if it is a stats file.
    #[arg(long, value_name = "FILE")]
    pub stats: Option<PathBuf>,

    /// Write the tagged lines to FILE instead of stdout (-: stdout), whole
    /// or not at all (a temporary file renamed over FILE when the run
    /// ends). Never an input file; an existing FILE is replaced only if it
    /// is tagged output (its first line has a "dedup" member) or with
    /// --force.
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,

    /// With --output: replace FILE even if it is not tagged output (never
    /// an input file, though).
    #[arg(long, requires = "output")]
    pub force: bool,

    /// Write every skipped line to FILE, one JSON object per line: where it
    /// was (file:line), why, and the line itself; nothing is dropped unseen
    /// past the first 20 warnings. Checked as --stats is.
    #[arg(long, value_name = "FILE")]
    pub rejects: Option<PathBuf>,

    #[command(flatten)]
    pub engine: EngineArgs,

    #[command(flatten)]
    pub message: MessageArgs,

    #[command(flatten)]
    pub index: IndexArgs,

    #[command(flatten)]
    pub state: StateArgs,

    /// Which lines to write: all (tagged), new (the deduplicated stream) or
    /// duplicates.
    #[arg(long, value_enum, default_value_t = EmitArg::All)]
    pub emit: EmitArg,

    /// What to do with a repeat, a message indexed already under its id
    /// with the same text (sent again after a crash, or in two files):
    /// tag it with its first verdict and "repeat":true, or drop it.
    #[arg(long, value_enum, default_value_t = RepeatsArg::Tag, value_name = "tag|drop")]
    pub repeats: RepeatsArg,

    /// Add to each tag what decided it, as "explain": the rule, the
    /// measure, the shingle counts behind the similarity, the threshold,
    /// and for a new message the nearest candidate (docs/explain.md). With
    /// the index in memory.
    #[arg(long)]
    pub explain: bool,

    /// What an invalid line does: skip (warn with its number and go on) or
    /// fail (stop with exit status 65).
    #[arg(long, value_enum, default_value_t = OnInvalidArg::Skip)]
    pub on_invalid: OnInvalidArg,

    /// Threads that parse and sketch while the index decides on one more;
    /// with 1, a single thread does both (one core). Default (and 0): the
    /// number of CPUs. The output does not depend on it.
    #[arg(long, value_name = "N", value_parser = parse_threads_arg)]
    pub threads: Option<Threads>,

    /// No summary and no progress line (invalid lines are still reported).
    #[arg(short, long)]
    pub quiet: bool,

    /// More on stderr (-v: every invalid line, not only the first 20, and
    /// the state file's loading and saving; -vv: debugging). RUST_LOG, when
    /// set, chooses the log filter instead.
    #[arg(short, long, action = clap::ArgAction::Count, conflicts_with = "quiet")]
    pub verbose: u8,

    /// The options set by an environment variable rather than the command
    /// line, said on stderr at the start: a sidecar's `DEDUP_STREAM_STATE`
    /// must not make a filter run load and replace a state file unseen.
    #[arg(skip)]
    pub from_env: Vec<String>,
}

/// `serve`'s options.
#[derive(Debug, Args)]
pub struct ServeArgs {
    #[command(flatten)]
    pub engine: EngineArgs,

    #[command(flatten)]
    pub message: MessageArgs,

    #[command(flatten)]
    pub index: IndexArgs,

    #[command(flatten)]
    pub state: StateArgs,

    /// Address to serve: HOST:PORT for TCP (an IP or a host name, such as
    /// localhost:7878) or unix:PATH for a Unix domain socket; repeat for
    /// several. The service has no authentication, so the default is
    /// loopback only; any other address must be given.
    #[arg(long, value_name = "ADDR", default_value = server::DEFAULT_LISTEN, value_parser = parse_listen)]
    pub listen: Vec<ListenAddr>,

    /// What each message gets back: tagged (the message with its verdict,
    /// as the filter writes it) or verdict (only {"id":ID,"dedup":{...}}).
    #[arg(long, value_enum, default_value_t = ReplyArg::Tagged)]
    pub reply: ReplyArg,

    /// Add to each verdict what decided it, as "explain" (see the
    /// filter's --explain and docs/explain.md). With the index in memory.
    #[arg(long)]
    pub explain: bool,

    /// Also serve the index over HTTP/1.1 and HTTP/2 (h2c) on HOST:PORT:
    /// POST /v1/check and /v1/query with NDJSON, and more (docs/http.md).
    #[arg(long, value_name = "ADDR", value_parser = parse_socket_addr)]
    pub listen_http: Option<SocketAddr>,

    /// With --listen-http: most bytes in one request body; a larger one
    /// gets 413.
    #[arg(long, default_value_t = server::http::DEFAULT_MAX_BODY_BYTES, value_name = "BYTES", value_parser = at_least_one)]
    pub http_max_body_bytes: usize,

    /// With --listen-http: most messages in one request.
    #[arg(long, default_value_t = server::http::DEFAULT_MAX_REQUEST_LINES, value_name = "N")]
    pub http_max_lines: u64,

    /// With --listen-http: most requests served at once; one more gets 503
    /// with Retry-After.
    #[arg(long, default_value_t = server::http::DEFAULT_MAX_REQUESTS, value_name = "N", value_parser = at_least_one)]
    pub http_max_requests: usize,

    /// Most client connections open at once; one more gets an error line
    /// and is closed.
    #[arg(long, default_value_t = server::DEFAULT_MAX_CONNECTIONS, value_name = "N", value_parser = at_least_one)]
    pub max_connections: usize,

    /// Close a connection idle this long: nothing received and no reply
    /// pending, or replies not read. 0: never. Units: ms, s, m, h.
    #[arg(long, default_value = "300s", value_name = "DURATION", value_parser = parse_duration)]
    pub idle_timeout: Duration,

    /// Close a connection that does not complete a line within this time of
    /// its first byte, with an error line (a client trickling bytes is
    /// never idle). 0: no limit. Units: ms, s, m, h.
    #[arg(long, default_value = "30s", value_name = "DURATION", value_parser = parse_duration)]
    pub line_timeout: Duration,

    /// Serve GET /healthz and GET /metrics (Prometheus) over HTTP on
    /// HOST:PORT.
    #[arg(long, value_name = "ADDR", value_parser = parse_socket_addr)]
    pub admin: Option<SocketAddr>,

    /// With --state: save this often as well as at shutdown. 0: only at
    /// shutdown.
    #[arg(long, default_value = "60s", value_name = "DURATION", value_parser = parse_duration)]
    pub snapshot_interval: Duration,

    /// At shutdown, how long connections get to answer what they received
    /// before they are dropped.
    #[arg(long, default_value = "10s", value_name = "DURATION", value_parser = parse_duration)]
    pub drain_timeout: Duration,

    /// Only warnings and errors on stderr.
    #[arg(short, long)]
    pub quiet: bool,

    /// More logging on stderr (-v: every connection, per-line errors).
    #[arg(short, long, action = clap::ArgAction::Count, conflicts_with = "quiet")]
    pub verbose: u8,
}

/// `report`'s arguments.
#[derive(Debug, Args)]
pub struct ReportArgs {
    /// Tagged output of the filter, serve or consume (JSON lines with a
    /// "dedup" member); .gz and .zst are decompressed.
    #[arg(required = true, value_name = "TAGGED")]
    pub files: Vec<PathBuf>,

    /// Write the page here (a file that exists must be an earlier report);
    /// default: standard output.
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,

    /// The threshold marked on the histogram when the output carries none
    /// (--explain output does).
    #[arg(long, value_name = "T")]
    pub threshold: Option<f64>,

    /// Largest clusters shown.
    #[arg(long, default_value_t = 20, value_name = "N")]
    pub clusters: usize,
}

/// `compare`'s arguments.
#[derive(Debug, Args)]
#[command(
    after_help = "A and B are texts. @PATH reads a file instead (as curl does; @@ \
    starts a text with a literal @), and so does every argument with --file. A file holds \
    plain text or one JSON record; a JSON-lines file is refused (tag it with \
    `dedup-stream FILE`)."
)]
pub struct CompareArgs {
    #[command(flatten)]
    pub engine: EngineArgs,

    /// Read A and B as paths of files holding the texts.
    #[arg(long)]
    pub file: bool,

    /// Also say which rule decides (as the filter's --explain would tag B
    /// after A) and the counts behind the similarity.
    #[arg(long)]
    pub explain: bool,

    /// First text (@PATH: the text in a file).
    pub a: String,

    /// Second text (@PATH: the text in a file).
    pub b: String,
}

/// `tune`'s arguments.
#[derive(Debug, Args)]
#[command(group = clap::ArgGroup::new("labels").required(true).multiple(false))]
#[command(
    after_help = "Labels: --truth FILE, a TSV with a header row and one row per line of \
    DATA (its `cluster` column; rows whose `kind` is `invalid` are not scored), as the \
    synthetic streams' truth files; or --label-field PATH, a field of each line. Lines \
    of one cluster are copies of one another. The engine options give the settings to \
    compare against, always one point of the grid."
)]
pub struct TuneArgs {
    /// The sample: JSON lines in stream order.
    #[arg(value_name = "DATA")]
    pub data: PathBuf,

    /// Each line's cluster, from a truth TSV of one row per line.
    #[arg(long, value_name = "FILE", group = "labels")]
    pub truth: Option<PathBuf>,

    /// Each line's cluster, from a field of the line (a dotted path; a
    /// string or a number).
    #[arg(long, value_name = "PATH", group = "labels")]
    pub label_field: Option<String>,

    /// Thresholds to try, separated by commas (default: 0.5 to 0.95 by
    /// 0.05).
    #[arg(long, value_name = "F,F,…", value_delimiter = ',', value_parser = parse_threshold)]
    pub thresholds: Vec<f64>,

    /// Measures to try, separated by commas (default: both).
    #[arg(long, value_name = "M,M", value_delimiter = ',', value_parser = parse_measure)]
    pub measures: Vec<Measure>,

    /// Shingle choices to try, separated by commas (default:
    /// words:1-2,words:2,words:3,words:1-3,chars:5).
    #[arg(long, value_name = "KIND:N,…", value_delimiter = ',', value_parser = parse_shingling)]
    pub shingles: Vec<Shingling>,

    /// Runs at once (default, and 0: the number of CPUs).
    #[arg(long, value_name = "N", value_parser = parse_threads_arg)]
    pub threads: Option<Threads>,

    /// Write every run's figures to FILE as CSV.
    #[arg(long, value_name = "FILE")]
    pub csv: Option<PathBuf>,

    /// Write every run's figures, the recommended and the given settings'
    /// to FILE as JSON.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,

    #[command(flatten)]
    pub engine: EngineArgs,

    #[command(flatten)]
    pub message: MessageArgs,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum EmitArg {
    All,
    New,
    Duplicates,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum RepeatsArg {
    Tag,
    Drop,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum ReplyArg {
    Tagged,
    Verdict,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum OnInvalidArg {
    Skip,
    Fail,
}

/// A dotted field path such as `data.text`.
fn parse_field_path(s: &str) -> Result<String, ConfigError> {
    FieldSpec::new(Some(s), Vec::new())?;
    Ok(s.to_string())
}

/// A TCP address: an IP and a port, or a host name and a port (resolved
/// now; the first address it resolves to is used).
fn parse_socket_addr(s: &str) -> Result<SocketAddr, String> {
    if let Ok(addr) = s.parse() {
        return Ok(addr);
    }
    if !s.contains(':') {
        return Err("expected HOST:PORT, such as 127.0.0.1:7878 or localhost:7878".into());
    }
    match s.to_socket_addrs() {
        Ok(mut addrs) => addrs
            .next()
            .ok_or_else(|| format!("host name {s:?} resolves to no address")),
        Err(e) => Err(format!("cannot resolve {s:?}: {e}")),
    }
}

/// A `--listen` address: `unix:PATH`, or a TCP address as
/// [`parse_socket_addr`] reads it.
fn parse_listen(s: &str) -> Result<ListenAddr, String> {
    if s.starts_with("unix:") {
        return s.parse().map_err(|e: server::BadListenAddr| e.to_string());
    }
    parse_socket_addr(s).map(ListenAddr::Tcp)
}

/// Prefix of the environment variables that set `serve`'s options.
pub const ENV_PREFIX: &str = "DEDUP_STREAM_";

/// The command line definition, with every option of `serve` (and of any
/// other service subcommand listed in [`ENV_SUBCOMMANDS`]) also read from
/// an environment variable: `DEDUP_STREAM_` and the option's long name in
/// capitals, dashes as underscores (`--idle-timeout`:
/// `DEDUP_STREAM_IDLE_TIMEOUT`). `--help` shows each variable.
pub fn command() -> clap::Command {
    let mut command = Cli::command().mut_args(from_env);
    for name in ENV_SUBCOMMANDS {
        if command.find_subcommand(name).is_some() {
            command =
                command.mut_subcommand(name, |sub| sub.mut_args(from_env).after_help(ENV_HELP));
        }
    }
    command
}

/// An option that also reads `DEDUP_STREAM_` and its long name from the
/// environment (see [`command`]).
fn from_env(arg: clap::Arg) -> clap::Arg {
    let Some(long) = arg.get_long() else {
        return arg;
    };
    // Counted flags (-v) have no value to read from the environment.
    use clap::ArgAction::{Count, Help, HelpLong, HelpShort, Version};
    if matches!(
        arg.get_action(),
        Count | Help | HelpLong | HelpShort | Version
    ) {
        return arg;
    }
    let var = env_var(long);
    // A URL's value may hold a password: --help must not show it.
    let secret = is_secret(long);
    let arg = arg.env(var).hide_env_values(secret);
    // A flag's variable takes what people write in a container's
    // environment (1, yes, on, empty…), not only clap's true/false.
    if matches!(arg.get_action(), clap::ArgAction::SetTrue) {
        arg.value_parser(EnvFlag)
    } else {
        arg
    }
}

/// What a flag's environment variable takes.
const FLAG_VALUES: &str = "a flag's variable takes 1 or 0, yes or no, true or false, on or off \
                           (any case), or nothing (off)";

/// What `--help` says of the environment, for the commands that read it.
const ENV_HELP: &str = "Environment: every option can also be set by DEDUP_STREAM_ and its \
    long name in capitals, dashes as underscores (--idle-timeout: DEDUP_STREAM_IDLE_TIMEOUT); \
    the command line wins. A flag's variable takes 1 or 0, yes or no, true or false, on or off, \
    or nothing (off).";

/// Whether the value of `--long` may hold a password.
fn is_secret(long: &str) -> bool {
    matches!(long, "redis" | "index" | "nats" | "kafka-option")
}

/// A flag's value from its environment variable: `1`/`0`, `yes`/`no`,
/// `y`/`n`, `true`/`false`, `t`/`f`, `on`/`off` (any case, as clap's
/// `BoolishValueParser`), and empty for off.
#[derive(Clone, Copy)]
struct EnvFlag;

impl clap::builder::TypedValueParser for EnvFlag {
    type Value = bool;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<bool, clap::Error> {
        if value.is_empty() {
            return Ok(false);
        }
        clap::builder::BoolishValueParser::new()
            .parse_ref(cmd, arg, value)
            .map_err(|_| {
                // A flag typed on the command line takes no value: this one
                // came from its variable.
                let long = arg.and_then(clap::Arg::get_long).unwrap_or_default();
                clap::Error::raw(
                    clap::error::ErrorKind::ValueValidation,
                    format!(
                        "the environment variable {}: invalid value '{}' for '--{long}': \
                         {FLAG_VALUES}\n",
                        env_var(long),
                        value.to_string_lossy()
                    ),
                )
                .with_cmd(cmd)
            })
    }

    fn possible_values(
        &self,
    ) -> Option<Box<dyn Iterator<Item = clap::builder::PossibleValue> + '_>> {
        None
    }
}

/// The environment variable of the option `--long`.
fn env_var(long: &str) -> String {
    format!("{ENV_PREFIX}{}", long.to_uppercase().replace('-', "_"))
}

/// The subcommands whose options environment variables can set: services
/// configured as sidecars in containers.
pub const ENV_SUBCOMMANDS: &[&str] = &["serve", "consume"];

/// Parses the process's arguments (and, for the services, environment),
/// exiting with clap's message and status 2 on a usage error.
pub fn parse() -> Cli {
    let matches = command()
        .try_get_matches()
        .unwrap_or_else(|e| blame_the_environment(e).exit());
    let mut cli =
        Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.format(&mut command()).exit());
    if cli.command.is_none() {
        cli.filter.from_env = taken_from_env(&command(), &matches);
    }
    let mut running = Vec::new();
    let mut at = &matches;
    while let Some((name, sub)) = at.subcommand() {
        running.push(name.to_string());
        at = sub;
    }
    let _ = RUNNING.set(running);
    cli
}

/// The options of `matches` whose value came from their environment
/// variable, each said as `DEDUP_STREAM_STATE=idx.state sets --state`
/// (a value that may hold a password is not shown).
fn taken_from_env(command: &clap::Command, matches: &clap::ArgMatches) -> Vec<String> {
    command
        .get_arguments()
        .filter_map(|arg| {
            let long = arg.get_long()?;
            let id = arg.get_id().as_str();
            if matches.value_source(id) != Some(clap::parser::ValueSource::EnvVariable) {
                return None;
            }
            let var = env_var(long);
            Some(if is_secret(long) {
                format!("{var} sets --{long}")
            } else {
                let value = std::env::var_os(&var).unwrap_or_default();
                format!("{var}={} sets --{long}", value.to_string_lossy())
            })
        })
        .collect()
}

/// A bad value that came from a `DEDUP_STREAM_*` variable rather than the
/// command line is reported as the variable's: the user did not type it.
fn blame_the_environment(e: clap::Error) -> clap::Error {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    if !matches!(
        e.kind(),
        ErrorKind::ValueValidation | ErrorKind::InvalidValue
    ) {
        return e;
    }
    let Some(ContextValue::String(arg)) = e.get(ContextKind::InvalidArg) else {
        return e;
    };
    let Some(long) = arg
        .strip_prefix("--")
        .map(|a| a.split([' ', '=']).next().unwrap_or(a))
    else {
        return e;
    };
    let var = env_var(long);
    let typed =
        std::env::args().any(|a| a == format!("--{long}") || a.starts_with(&format!("--{long}=")));
    if typed || std::env::var_os(&var).is_none() {
        return e;
    }
    let message = e.to_string();
    let first = message
        .lines()
        .next()
        .unwrap_or_default()
        .trim_start_matches("error: ");
    command().error(
        ErrorKind::ValueValidation,
        format!("the environment variable {var}: {first}"),
    )
}

/// The subcommand being run (`["index", "forget"]`), for its usage line
/// in [`usage_error`]; empty for the filter.
static RUNNING: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();

/// Prints a usage error in clap's style (`error: ...`, the usage line of
/// the subcommand being run, a pointer to --help) and returns exit status
/// 2.
pub fn usage_error(message: impl std::fmt::Display) -> u8 {
    let mut command = command();
    // Built, so that a subcommand's usage names the program too
    // (`dedup-stream serve [OPTIONS]`).
    command.build();
    for name in RUNNING.get().into_iter().flatten() {
        match command.find_subcommand(name).cloned() {
            Some(sub) => command = sub,
            None => break,
        }
    }
    let error = command.error(clap::error::ErrorKind::ValueValidation, message);
    let _ = error.print();
    2
}

fn parse_shingling(s: &str) -> Result<Shingling, ConfigError> {
    s.parse()
}

fn parse_sampling(s: &str) -> Result<Sampling, ConfigError> {
    s.parse()
}

fn parse_measure(s: &str) -> Result<Measure, ConfigError> {
    s.parse()
}

fn parse_empty_text(s: &str) -> Result<EmptyText, ConfigError> {
    s.parse()
}

/// A `--threads` count; `None`: one a CPU (`0`, or no option).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Threads(pub Option<NonZeroUsize>);

fn parse_threads_arg(s: &str) -> Result<Threads, String> {
    parse_threads(s).map(Threads)
}

/// How long an outage of Redis is waited out (`--redis-wait`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Wait(pub Option<Duration>);

fn parse_wait(s: &str) -> Result<Wait, String> {
    dedup_stream::values::parse_wait(s).map(Wait)
}

fn parse_fsync(s: &str) -> Result<Fsync, String> {
    s.parse()
}

fn parse_window(s: &str) -> Result<Window, ConfigError> {
    s.parse()
}

/// Reads `--index`. Not a plain function parser: clap would repeat the
/// value refused, and a URL may hold a password, so the message names
/// only the option and the reason (whose location is redacted).
#[derive(Clone)]
struct LocationParser;

impl clap::builder::TypedValueParser for LocationParser {
    type Value = IndexLocation;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<IndexLocation, clap::Error> {
        use clap::error::ErrorKind;
        let refused = |reason: String| {
            let option = arg.map(ToString::to_string).unwrap_or_default();
            clap::Error::raw(
                ErrorKind::ValueValidation,
                format!("invalid value for '{option}': {reason}\n"),
            )
            .with_cmd(cmd)
        };
        let s = value.to_str().ok_or_else(|| refused("not UTF-8".into()))?;
        s.parse().map_err(|e: StoreError| refused(e.to_string()))
    }
}

/// Zero means "never" for the durations that can be turned off.
fn non_zero(d: Duration) -> Option<Duration> {
    (!d.is_zero()).then_some(d)
}

impl EngineArgs {
    /// The engine config these options describe.
    pub fn engine_config(
        &self,
        capacity: NonZeroUsize,
        max_bucket: usize,
    ) -> Result<EngineConfig, ConfigError> {
        let config = EngineConfig {
            max_index_bytes: None,
            empty_text: self.empty_text,
            recent: self.recent,
            threshold: self.threshold,
            capacity,
            shingling: self.shingle,
            sampling: self.sample,
            measure: self.measure,
            max_bucket,
            window: self.window,
        };
        config.validate()?;
        Ok(config)
    }
}

impl MessageArgs {
    /// `--max-line-bytes`, or its default outside the brokers' workers.
    pub fn max_line_bytes(&self) -> usize {
        self.max_line_bytes_given
            .unwrap_or(pipeline::DEFAULT_MAX_LINE_BYTES)
    }

    /// The engine config, with `engine`'s comparison settings.
    pub fn engine_config(&self, engine: &EngineArgs) -> Result<EngineConfig, ConfigError> {
        engine.engine_config(self.capacity, self.max_bucket)
    }

    /// Where the id and text are.
    pub fn fields(&self) -> Result<FieldSpec, ConfigError> {
        FieldSpec::new(self.id_field.as_deref(), self.text_field.clone())
    }
}

impl FilterArgs {
    /// The engine config.
    pub fn engine_config(&self) -> Result<EngineConfig, ConfigError> {
        let config = self.message.engine_config(&self.engine)?;
        Ok(EngineConfig {
            max_index_bytes: self.index.max_index_bytes,
            ..config
        })
    }

    /// The pipeline config.
    pub fn pipeline_config(&self) -> Result<PipelineConfig, ConfigError> {
        let defaults = PipelineConfig::default();
        Ok(PipelineConfig {
            fields: self.message.fields()?,
            max_line_bytes: self.message.max_line_bytes(),
            threads: self.threads.and_then(|t| t.0).unwrap_or(defaults.threads),
            emit: self.emit.emit(),
            repeats: match self.repeats {
                RepeatsArg::Tag => Repeats::Tag,
                RepeatsArg::Drop => Repeats::Drop,
            },
            on_invalid: match self.on_invalid {
                OnInvalidArg::Skip => OnInvalid::Skip,
                OnInvalidArg::Fail => OnInvalid::Fail,
            },
            ..defaults
        })
    }
}

impl EmitArg {
    /// The library's value.
    pub fn emit(self) -> Emit {
        match self {
            EmitArg::All => Emit::All,
            EmitArg::New => Emit::New,
            EmitArg::Duplicates => Emit::Duplicates,
        }
    }
}

impl FilterArgs {
    /// The file `--output` names; `None` for stdout (no option, or `-`).
    pub fn output_file(&self) -> Option<&std::path::Path> {
        self.output
            .as_deref()
            .filter(|path| *path != std::path::Path::new("-"))
    }
}

impl ConsumeArgs {
    /// The engine config.
    pub fn engine_config(&self) -> Result<EngineConfig, ConfigError> {
        self.message.engine_config(&self.engine)
    }

    /// The worker's config; `consumer` names it when --consumer does not.
    pub fn consume_config(&self, consumer: String) -> Result<ConsumeConfig, ConfigError> {
        let output = match self.output.as_deref().unwrap_or("-") {
            "-" => Output::Lines,
            name => Output::Stream(name.to_string()),
        };
        let invalid_stream = self
            .invalid_stream
            .clone()
            .unwrap_or_else(|| match &output {
                Output::Stream(name) => format!("{name}:invalid"),
                Output::Lines => format!("{}:invalid", self.stream.as_deref().unwrap_or_default()),
            });
        Ok(ConsumeConfig {
            stream: self.stream.clone().unwrap_or_default(),
            group: self.group.clone().unwrap_or_default(),
            consumer: self.consumer.clone().unwrap_or(consumer),
            output,
            invalid_stream,
            field: self.field.clone(),
            options: self.queue_options()?,
            claim_idle: self.claim_idle,
            create: self.create,
            forget_idle_consumers: self.forget_idle_consumers,
            max_line_bytes: self.message.max_line_bytes(),
        })
    }

    /// The options every worker takes, whatever its broker.
    fn queue_options(&self) -> Result<queue::Options, ConfigError> {
        // Threads that prepare the batches read (`--threads`): none with 1
        // (the worker's own thread prepares).
        let threads = self.threads.and_then(|t| t.0);
        let prepare_threads = match threads.unwrap_or(PipelineConfig::default().threads).get() {
            1 => 0,
            threads => threads,
        };
        Ok(queue::Options {
            emit: self.emit.emit(),
            fields: self.message.fields()?,
            batch: self.batch.max(1),
            in_flight: self.in_flight.max(1),
            prepare_threads,
            relay: self.relay,
        })
    }

    /// With --nats: the server and the worker's config.
    pub fn nats_config(&self) -> Result<(NatsServer, NatsConfig), String> {
        let url = self.nats.clone().ok_or("--nats is missing")?;
        let need = |value: &Option<String>, name: &str| {
            value
                .clone()
                .filter(|v| !v.is_empty())
                .ok_or_else(|| format!("--nats needs {name}"))
        };
        let subject = need(&self.subject, "--subject SUBJECT")?;
        let durable = need(&self.durable, "--durable NAME")?;
        let output_subject = need(&self.output_subject, "--output-subject SUBJECT")?;
        let dead_letter_subject = self
            .dead_letter_subject
            .clone()
            .unwrap_or_else(|| format!("{output_subject}.invalid"));
        let server = NatsServer {
            url,
            creds: self.nats_creds.clone(),
            ca: self.nats_ca.clone(),
        };
        let config = NatsConfig {
            stream: self.stream.clone().unwrap_or_default(),
            subject,
            durable,
            create: self.create,
            output_subject,
            output_stream: self.output_stream.clone(),
            dead_letter_subject,
            options: self.queue_options().map_err(|e| e.to_string())?,
            max_line_bytes: self.message.max_line_bytes_given,
            ack_wait: self.ack_wait.max(Duration::from_secs(1)),
        };
        Ok((server, config))
    }
}

impl ConsumeArgs {
    /// With --kafka: the brokers and the worker's config.
    pub fn kafka_config(&self) -> Result<(KafkaBrokers, KafkaConfig), String> {
        let servers = self.kafka.clone().ok_or("--kafka is missing")?;
        if self.topic.is_empty() {
            return Err("--kafka needs --topic TOPIC".into());
        }
        let need = |value: &Option<String>, name: &str| {
            value
                .clone()
                .filter(|v| !v.is_empty())
                .ok_or_else(|| format!("--kafka needs {name}"))
        };
        let group = need(&self.group, "--group NAME")?;
        let output_topic = need(&self.output_topic, "--output-topic TOPIC")?;
        let dead_letter_topic = self
            .dead_letter_topic
            .clone()
            .unwrap_or_else(|| format!("{output_topic}.invalid"));
        let brokers = KafkaBrokers {
            servers,
            options: self.kafka_option.clone(),
        };
        let config = KafkaConfig {
            topics: self.topic.clone(),
            group,
            output_topic,
            dead_letter_topic,
            options: self.queue_options().map_err(|e| e.to_string())?,
            max_line_bytes: self.message.max_line_bytes_given,
        };
        Ok((brokers, config))
    }
}

/// Parses a `KEY=VALUE` librdkafka property.
fn parse_property(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((key, value)) if !key.trim().is_empty() => {
            Ok((key.trim().to_string(), value.to_string()))
        }
        _ => Err("expected KEY=VALUE (a librdkafka property)".into()),
    }
}

impl ServeArgs {
    /// The engine config.
    pub fn engine_config(&self) -> Result<EngineConfig, ConfigError> {
        let config = self.message.engine_config(&self.engine)?;
        Ok(EngineConfig {
            max_index_bytes: self.index.max_index_bytes,
            ..config
        })
    }

    /// The server config.
    pub fn server_config(&self) -> Result<ServerConfig, ConfigError> {
        Ok(ServerConfig {
            fields: self.message.fields()?,
            max_line_bytes: self.message.max_line_bytes(),
            reply: match self.reply {
                ReplyArg::Tagged => Reply::Tagged,
                ReplyArg::Verdict => Reply::Verdict,
            },
            max_connections: self.max_connections.max(1),
            idle_timeout: non_zero(self.idle_timeout),
            line_timeout: non_zero(self.line_timeout),
            drain_timeout: self.drain_timeout,
            state: self.state.state.clone(),
            snapshot_interval: non_zero(self.snapshot_interval),
            http: server::http::HttpConfig {
                max_body_bytes: self.http_max_body_bytes,
                max_lines: self.http_max_lines.max(1),
                max_requests: self.http_max_requests,
                engine: self.engine_config()?,
            },
            ..ServerConfig::default()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_with_units() {
        assert_eq!(parse_duration("30"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_duration("2h"), Ok(Duration::from_secs(7200)));
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        for bad in ["", "s", "1.5s", "-1s", "10 s", "3d"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }
}

//! The command line: clap definitions, turned into library configs. Nothing
//! past this module sees a clap type.

use std::net::SocketAddr;
use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

use dedup_stream::config::{
    DEFAULT_CAPACITY, DEFAULT_MAX_BUCKET, DEFAULT_MEASURE, DEFAULT_SHINGLE, DEFAULT_THRESHOLD,
    EngineConfig, Measure, Shingling,
};
use dedup_stream::pipeline::{self, Emit, OnInvalid, PipelineConfig};
use dedup_stream::server::{self, ListenAddr, Reply, ServerConfig};
use dedup_stream::{ConfigError, FieldSpec};

/// Tags every JSON line on stdin as new or as a near-duplicate of an earlier
/// message, and writes it to stdout in input order.
#[derive(Debug, Parser)]
#[command(name = "dedup-stream", version, about, long_about = None)]
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
    /// share: the quick check when a verdict surprises you.
    Compare(CompareArgs),
    /// Serve one shared index over TCP and Unix sockets: a sidecar that
    /// several consumers ask per message (JSON lines in, one reply line per
    /// line out).
    Serve(ServeArgs),
}

/// How messages are compared.
#[derive(Debug, Args, Clone)]
pub struct EngineArgs {
    /// Similarity at or above which a message is a near-duplicate, in (0, 1].
    #[arg(long, default_value_t = DEFAULT_THRESHOLD, value_name = "F")]
    pub threshold: f64,

    /// How texts are cut into shingles: words:N (word N-grams) or chars:N
    /// (character N-grams).
    #[arg(long, default_value_t = DEFAULT_SHINGLE, value_name = "KIND:N", value_parser = parse_shingling)]
    pub shingle: Shingling,

    /// How shingle sets are compared: jaccard (|A∩B|/|A∪B|) or containment
    /// (|A∩B|/min(|A|,|B|)).
    #[arg(long, default_value_t = DEFAULT_MEASURE, value_parser = parse_measure)]
    pub measure: Measure,
}

/// Options the filter and the server share: the index's size and where
/// the id and text are.
#[derive(Debug, Args)]
pub struct MessageArgs {
    /// Most messages the index holds; past it the least recently used is
    /// evicted with everything it holds in the index.
    #[arg(long, default_value_t = NonZeroUsize::new(DEFAULT_CAPACITY).expect("non-zero"), value_name = "N")]
    pub capacity: NonZeroUsize,

    /// Dotted path of the id field (default: the first present of id_str,
    /// id, data.id).
    #[arg(long, value_name = "PATH")]
    pub id_field: Option<String>,

    /// Dotted path of a text field; repeat to join several with a space
    /// (default: the first present of extended_tweet.full_text, full_text,
    /// text, data.text, following native retweets).
    #[arg(long, value_name = "PATH")]
    pub text_field: Vec<String>,

    /// Longest input line in bytes; longer lines are skipped as invalid
    /// without being read into memory.
    #[arg(long, default_value_t = pipeline::DEFAULT_MAX_LINE_BYTES, value_name = "BYTES")]
    pub max_line_bytes: usize,

    /// Most indexed messages one LSH bucket holds.
    #[arg(long, default_value_t = DEFAULT_MAX_BUCKET, value_name = "N", hide_short_help = true)]
    pub max_bucket: usize,
}

/// The state file options.
#[derive(Debug, Args)]
pub struct StateArgs {
    /// Load the index from FILE at start (if it exists) and save it there at
    /// the end, atomically. A corrupt or incompatible file stops the run
    /// and is left untouched.
    #[arg(long, value_name = "FILE")]
    pub state: Option<PathBuf>,

    /// With --state: if the file is corrupt or incompatible, start with an
    /// empty index (and replace the file at the next save) instead of
    /// stopping.
    #[arg(long, requires = "state")]
    pub fresh_state: bool,
}

/// The filter's options.
#[derive(Debug, Args)]
pub struct FilterArgs {
    #[command(flatten)]
    pub engine: EngineArgs,

    #[command(flatten)]
    pub message: MessageArgs,

    #[command(flatten)]
    pub state: StateArgs,

    /// Which lines to write: all (tagged), new (the deduplicated stream) or
    /// duplicates.
    #[arg(long, value_enum, default_value_t = EmitArg::All)]
    pub emit: EmitArg,

    /// What an invalid line does: skip (warn with its number and go on) or
    /// fail (stop with exit status 65).
    #[arg(long, value_enum, default_value_t = OnInvalidArg::Skip)]
    pub on_invalid: OnInvalidArg,

    /// Threads that parse and sketch (the index decides on one more).
    /// Default: the number of CPUs. The output does not depend on it.
    #[arg(long, value_name = "N")]
    pub threads: Option<NonZeroUsize>,

    /// No summary at the end (invalid lines are still reported).
    #[arg(short, long)]
    pub quiet: bool,

    /// More logging on stderr (-v: progress, -vv: debugging).
    #[arg(short, long, action = clap::ArgAction::Count, conflicts_with = "quiet")]
    pub verbose: u8,
}

/// `serve`'s options.
#[derive(Debug, Args)]
pub struct ServeArgs {
    #[command(flatten)]
    pub engine: EngineArgs,

    #[command(flatten)]
    pub message: MessageArgs,

    #[command(flatten)]
    pub state: StateArgs,

    /// Address to serve: IP:PORT for TCP or unix:PATH for a Unix domain
    /// socket; repeat for several. The service has no authentication, so
    /// the default is loopback only; any other address must be given.
    #[arg(long, value_name = "ADDR", default_value = server::DEFAULT_LISTEN)]
    pub listen: Vec<ListenAddr>,

    /// What each message gets back: tagged (the message with its verdict,
    /// as the filter writes it) or verdict (only {"id":ID,"dedup":{...}}).
    #[arg(long, value_enum, default_value_t = ReplyArg::Tagged)]
    pub reply: ReplyArg,

    /// Most client connections open at once; one more gets an error line
    /// and is closed.
    #[arg(long, default_value_t = server::DEFAULT_MAX_CONNECTIONS, value_name = "N")]
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
    /// IP:PORT.
    #[arg(long, value_name = "ADDR")]
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

/// `compare`'s arguments.
#[derive(Debug, Args)]
pub struct CompareArgs {
    #[command(flatten)]
    pub engine: EngineArgs,

    /// First text, or a file holding it (plain text or one JSON record).
    pub a: String,

    /// Second text, or a file holding it.
    pub b: String,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum EmitArg {
    All,
    New,
    Duplicates,
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

fn parse_shingling(s: &str) -> Result<Shingling, ConfigError> {
    s.parse()
}

fn parse_measure(s: &str) -> Result<Measure, ConfigError> {
    s.parse()
}

/// A duration: a number with an optional unit (ms, s, m, h; seconds when
/// none).
fn parse_duration(s: &str) -> Result<Duration, String> {
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (number, unit) = s.split_at(split);
    let bad = || format!("expected a duration like 30s, 500ms, 5m or 1h, got {s:?}");
    let n: u64 = number.parse().map_err(|_| bad())?;
    let seconds = match unit {
        "ms" => return Ok(Duration::from_millis(n)),
        "" | "s" => n,
        "m" => n.checked_mul(60).ok_or_else(bad)?,
        "h" => n.checked_mul(3600).ok_or_else(bad)?,
        _ => return Err(bad()),
    };
    Ok(Duration::from_secs(seconds))
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
            threshold: self.threshold,
            capacity,
            shingling: self.shingle,
            measure: self.measure,
            max_bucket,
        };
        config.validate()?;
        Ok(config)
    }
}

impl MessageArgs {
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
        self.message.engine_config(&self.engine)
    }

    /// The pipeline config.
    pub fn pipeline_config(&self) -> Result<PipelineConfig, ConfigError> {
        let defaults = PipelineConfig::default();
        Ok(PipelineConfig {
            fields: self.message.fields()?,
            max_line_bytes: self.message.max_line_bytes.max(1),
            threads: self.threads.unwrap_or(defaults.threads),
            emit: match self.emit {
                EmitArg::All => Emit::All,
                EmitArg::New => Emit::New,
                EmitArg::Duplicates => Emit::Duplicates,
            },
            on_invalid: match self.on_invalid {
                OnInvalidArg::Skip => OnInvalid::Skip,
                OnInvalidArg::Fail => OnInvalid::Fail,
            },
            ..defaults
        })
    }
}

impl ServeArgs {
    /// The engine config.
    pub fn engine_config(&self) -> Result<EngineConfig, ConfigError> {
        self.message.engine_config(&self.engine)
    }

    /// The server config.
    pub fn server_config(&self) -> Result<ServerConfig, ConfigError> {
        Ok(ServerConfig {
            fields: self.message.fields()?,
            max_line_bytes: self.message.max_line_bytes.max(1),
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

//! The command line: clap definitions, turned into library configs. Nothing
//! past this module sees a clap type.

use std::num::NonZeroUsize;

use clap::{Args, Parser, Subcommand, ValueEnum};

use dedup_stream::config::{
    DEFAULT_CAPACITY, DEFAULT_MAX_BUCKET, DEFAULT_MEASURE, DEFAULT_SHINGLE, DEFAULT_THRESHOLD,
    EngineConfig, Measure, Shingling,
};
use dedup_stream::pipeline::{self, Emit, OnInvalid, PipelineConfig};
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

/// The filter's options.
#[derive(Debug, Args)]
pub struct FilterArgs {
    #[command(flatten)]
    pub engine: EngineArgs,

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

    /// Which lines to write: all (tagged), new (the deduplicated stream) or
    /// duplicates.
    #[arg(long, value_enum, default_value_t = EmitArg::All)]
    pub emit: EmitArg,

    /// What an invalid line does: skip (warn with its number and go on) or
    /// fail (stop with exit status 65).
    #[arg(long, value_enum, default_value_t = OnInvalidArg::Skip)]
    pub on_invalid: OnInvalidArg,

    /// Longest input line in bytes; longer lines are skipped as invalid
    /// without being read into memory.
    #[arg(long, default_value_t = pipeline::DEFAULT_MAX_LINE_BYTES, value_name = "BYTES")]
    pub max_line_bytes: usize,

    /// Threads that parse and sketch (the index decides on one more).
    /// Default: the number of CPUs. The output does not depend on it.
    #[arg(long, value_name = "N")]
    pub threads: Option<NonZeroUsize>,

    /// Most indexed messages one LSH bucket holds.
    #[arg(long, default_value_t = DEFAULT_MAX_BUCKET, value_name = "N", hide_short_help = true)]
    pub max_bucket: usize,

    /// No summary at the end (invalid lines are still reported).
    #[arg(short, long)]
    pub quiet: bool,

    /// More logging on stderr (-v: progress, -vv: debugging).
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

impl FilterArgs {
    /// The engine config.
    pub fn engine_config(&self) -> Result<EngineConfig, ConfigError> {
        self.engine.engine_config(self.capacity, self.max_bucket)
    }

    /// The pipeline config.
    pub fn pipeline_config(&self) -> Result<PipelineConfig, ConfigError> {
        let defaults = PipelineConfig::default();
        Ok(PipelineConfig {
            fields: FieldSpec::new(self.id_field.as_deref(), self.text_field.clone())?,
            max_line_bytes: self.max_line_bytes.max(1),
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

//! # dedup-stream
//!
//! A streaming near-duplicate filter for tweets and feed items: every
//! message is tagged new, or a near-duplicate of an earlier message's id,
//! in input order, with memory bounded by an LRU index.
//!
//! ```
//! use dedup_stream::{Deduper, EngineConfig, MessageId, Verdict};
//!
//! let mut deduper = Deduper::new(EngineConfig::default())?;
//! let a = deduper.check_text(MessageId::Integer(1), "Flooding closes the coastal highway north of the city tonight");
//! let b = deduper.check_text(MessageId::Integer(2), "RT @news: Flooding closes the coastal highway north of the city tonight…");
//! assert_eq!(a, Verdict::New);
//! assert!(b.is_duplicate());
//! # Ok::<(), dedup_stream::ConfigError>(())
//! ```
//!
//! ## Layout
//!
//! Data flows one way, top to bottom:
//!
//! - [`input`]: files and stdin chained into one stream (byte-order marks
//!   skipped), each line traceable to `file:line`; output paths checked
//!   before a run.
//! - [`output`]: the files a run writes (`--stats`, `--state`, `-o`):
//!   never an input, never a file of another kind; tagged output written
//!   whole or not at all.
//! - [`lines`]: bounded line reading (a huge line never sits in memory).
//! - [`record`]: the wire format: a JSON line decoded once into id, text and
//!   URL entities, borrowing the line; the tag spliced back into its bytes.
//! - [`engine`]: synchronous and free of I/O. [`engine::normalise`],
//!   [`engine::tokenise`], [`engine::shingle`] and [`engine::sketch`] are
//!   pure (the [`Preparer`]); [`engine::index`] and [`engine::verdict`]
//!   decide in input order (the [`Deduper`]).
//! - [`batch`]: the unit of work between stages.
//! - [`pipeline`]: reader → parallel preparation → engine → writer, over
//!   bounded channels; the only module that knows about tasks.
//! - [`compare`]: two texts compared as the filter would (the
//!   `compare` command and the sidecar's `/v1/compare`).
//! - [`config`], [`error`], [`stats`]: settings with their defaults, typed
//!   errors, counters.
//! - [`report`]: what a run tells as it goes: live counters (updated per
//!   batch) for a progress line, invalid lines warned about up to a limit,
//!   and the hint when no line was usable.
//! - [`report_html`]: `dedup-stream report`, one self-contained HTML page
//!   of what a run decided, from its tagged output.
//! - [`server`]: the sidecar (`dedup-stream serve`): one shared engine behind
//!   TCP and Unix sockets, the `dedup_op` query form, limits, an admin HTTP
//!   endpoint with Prometheus metrics, graceful shutdown.
//! - [`snapshot`]: versioned, checksummed, atomically written state files,
//!   so an index survives restarts; [`journal`]: the sidecar's log of what
//!   it indexed since the last one, so a crash loses nothing answered.
//! - [`stream`]: the engine as an async `Stream` adapter, for Rust
//!   consumers that embed it.
//! - [`timestamp`]: message times for `--window` (`created_at`, or arrival).
//! - [`redis_index`]: the index kept in Redis, shared by a fleet of
//!   workers, behind the same [`engine::IndexStore`] trait as the in-memory
//!   one; [`consume`]: a worker that reads a Redis Streams consumer group;
//!   [`consume_nats`]: one that reads a NATS JetStream durable consumer;
//!   [`consume_kafka`]: one that reads a Kafka consumer group; [`broker`]:
//!   what the last two share at the broker's door (size limits, outage
//!   reports); [`queue`]: the pipelined runtime a worker runs on, with its
//!   broker behind an adapter (Kafka's so far).
//!
//! The binary (`src/main.rs`) parses the command line, sets up logging and
//! signals, and calls into this library.

#![deny(missing_docs)]

pub mod batch;
pub mod broker;
pub mod compare;
pub mod config;
pub mod consume;
pub mod consume_kafka;
pub mod consume_nats;
pub mod engine;
pub mod error;
pub mod forget;
#[doc(hidden)]
pub mod fuzzing;
pub mod input;
pub mod journal;
pub mod lines;
pub mod output;
pub mod pipeline;
pub mod queue;
pub mod queue_batch;
pub mod record;
pub mod redis_index;
pub mod report;
pub mod report_html;
pub mod server;
pub mod snapshot;
pub mod stats;
pub mod stream;
pub mod timestamp;
pub mod tune;
pub mod values;

pub use config::{EmptyText, EngineConfig, Measure, Sampling, Shingling};
pub use engine::{Deduper, Match, Preparer, Sketch, SketchBuf, Verdict};
pub use error::{ConfigError, Error, InvalidLine, InvalidReason, StoreError};
pub use record::{Decoder, FieldSpec, MessageId, RawId};
pub use stats::Summary;

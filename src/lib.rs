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
//! Folders by layer; each imports only the layers above it in this list
//! (its `mod.rs` says which), so data and dependencies flow one way:
//!
//! - [`engine`]: the decision, synchronous and free of I/O, with its own
//!   settings ([`engine::config`]), message ids and errors.
//!   [`engine::normalise`], [`engine::tokenise`], [`engine::shingle`] and
//!   [`engine::sketch`] are pure (the [`Preparer`]); [`engine::index`] and
//!   [`engine::verdict`] decide in input order (the [`Deduper`]).
//! - [`wire`]: the wire format: bounded line reading, JSON lines decoded
//!   once ([`wire::record`]) and the tag spliced back into their bytes,
//!   message times, input files, and the [`wire::batch`] of lines decoded
//!   and sketched that every stage hands on.
//! - [`tune`] (which settings suit a labelled sample) and [`values`]
//!   (option values as people type them).
//! - [`state`]: what a run keeps on disk: state files, the sidecar's
//!   journal, and the rules of every file a run writes.
//! - [`error`]: the error that ends a run, composed of the layers' own.
//! - [`pipeline`]: reader → parallel preparation → engine → writer, over
//!   bounded channels, with its progress [`pipeline::report`], its
//!   [`pipeline::stats`] and the async [`pipeline::stream`] adapter;
//!   [`forget`]: ids forgotten in bulk.
//! - [`metrics`]: the counters every long-running mode keeps and the admin
//!   endpoint serves (Prometheus text), and its health.
//! - [`compare`]: two texts compared as the filter would (the
//!   `compare` command and the sidecar's `/v1/compare`).
//! - [`report_html`]: `dedup-stream report`, one self-contained HTML page
//!   of what a run decided, from its tagged output.
//! - [`server`]: the sidecar (`dedup-stream serve`): one shared engine behind
//!   TCP and Unix sockets, the `dedup_op` query form, limits, an admin HTTP
//!   endpoint with Prometheus metrics, graceful shutdown.
//! - [`redis_index`]: the index kept in Redis, shared by a fleet of
//!   workers, behind the same [`engine::IndexStore`] trait as the in-memory
//!   one.
//! - [`queue`]: the pipelined runtime a queue worker runs on, with one
//!   file per broker: [`queue::redis_streams`], [`queue::nats`] and
//!   [`queue::kafka`].
//!
//! The binary (`src/main.rs`, with its parts in `src/cli/`) parses the
//! command line, sets up logging and signals, and calls into this library.
//! Paths of the modules before they moved into folders
//! (`dedup_stream::record`, `dedup_stream::config`, ...) are still
//! re-exported.

#![deny(missing_docs)]

pub mod compare;
pub mod engine;
pub mod error;
pub mod forget;
#[doc(hidden)]
pub mod fuzzing;
pub mod metrics;
pub mod pipeline;
pub mod queue;
pub mod redis_index;
pub mod report_html;
pub mod server;
pub mod state;
pub mod tune;
pub mod values;
pub mod wire;

// Where these modules were before the folders: kept for users' imports.
#[doc(hidden)]
pub use engine::config;
#[doc(hidden)]
pub use pipeline::{report, stats, stream};
#[doc(hidden)]
pub use queue::{
    batch as queue_batch, broker, kafka as consume_kafka, nats as consume_nats,
    redis_streams as consume,
};
#[doc(hidden)]
pub use state::{journal, output, snapshot};
#[doc(hidden)]
pub use wire::{batch, input, lines, record, timestamp};

pub use engine::config::{ConfigError, EmptyText, EngineConfig, Measure, Sampling, Shingling};
pub use engine::id::{MessageId, RawId};
pub use engine::store::StoreError;
pub use engine::{Deduper, Match, Preparer, Sketch, SketchBuf, Verdict};
pub use error::Error;
pub use pipeline::stats::Summary;
pub use wire::invalid::{InvalidLine, InvalidReason};
pub use wire::record::{Decoder, FieldSpec};

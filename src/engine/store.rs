//! Where the index lives: the one trait through which messages reach it.
//!
//! Deciding on a message reads the index (its exact copy, its candidates,
//! their shingle sets) and changes it (the match is refreshed, the message
//! is inserted, the least recently used one is evicted). For one process
//! those are memory accesses, and [`Deduper`](super::Deduper) makes them
//! one message at a time. For an index shared by a fleet of workers (in
//! Redis, see [`crate::redis_index`]) every one of them is a network round
//! trip, and two workers interleaving them could both call two copies
//! "new". So the trait is cut where an index shared over a network must be
//! cut: a whole decision per message, atomic, and many messages per call.
//! The verdict of each message is the one the in-memory engine gives had it
//! seen the messages in the order the store applied them.

use super::{Explanation, Sketch, Verdict};
use crate::engine::id::MessageId;

/// What a message asks of the index.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Op {
    /// Decide, and index the message if it is new.
    #[default]
    Check,
    /// Decide without indexing anything or refreshing what it matches (the
    /// sidecar's `"dedup_op":"query"`).
    Query,
    /// Forget every indexed message of this id (a deletion notice, the
    /// sidecar's `"dedup_op":"remove"`): the sketch is not read, and the
    /// verdict is [`Verdict::Deleted`].
    Remove,
}

/// One message for the index to decide on.
#[derive(Clone, Copy, Debug)]
pub struct Ask<'a> {
    /// The id reported when a later message duplicates this one.
    pub id: &'a MessageId,
    /// Its sketch.
    pub sketch: Sketch<'a>,
    /// Whether it is indexed.
    pub op: Op,
    /// A name for this message that outlives the process asking (a queue
    /// entry's id), so that a store shared over a network answers a message
    /// asked again, after a worker died or a reply was lost, with the
    /// verdict it gave the first time instead of deciding it twice. `None`:
    /// the store needs none (the in-memory index) or makes its own.
    pub token: Option<&'a [u8]>,
    /// The message's time, in milliseconds since the Unix epoch (its
    /// `created_at`, or when it arrived): what `--window` measures (see
    /// [`super::window`]). Unused without a window.
    pub time: i64,
}

/// How full an index is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IndexStats {
    /// Messages indexed now.
    pub len: u64,
    /// The most messages it holds.
    pub capacity: u64,
    /// Messages evicted since it was created.
    pub evictions: u64,
    /// Bytes of memory it holds, where the store counts them (the in-memory
    /// index: [`super::index::Index::bytes`]).
    pub bytes: Option<u64>,
    /// Its byte budget, if it has one (`--max-index-bytes`).
    pub max_bytes: Option<u64>,
    /// Where the time of deciding went, where the store measures it (the
    /// in-memory index and a replica of a shared one).
    pub times: Option<DecisionTimes>,
}

/// Where the time of deciding went since the index was created: the part
/// that runs in order, which no extra thread shortens, and the part that
/// runs on every thread (see [`super::overlaps`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DecisionTimes {
    /// Processor time of the deciding thread in the in-order decision
    /// (verifying what the batch itself changed, inserting, evicting).
    pub serial_cpu: std::time::Duration,
    /// Wall-clock time of counting batches' overlaps ahead of their
    /// decision, on every thread at once.
    pub counting: std::time::Duration,
    /// Processor time of that counting, all threads together.
    pub counting_cpu: std::time::Duration,
    /// Batches whose overlaps were counted ahead (large enough, with more
    /// than one thread set).
    pub counted_batches: u64,
}

/// An index that decides messages: in memory ([`Deduper`](super::Deduper))
/// or shared in Redis ([`crate::redis_index::RedisIndex`]).
pub trait IndexStore {
    /// Decides `asks` in order, appending one verdict per ask to
    /// `verdicts`. Each decision is atomic, and sees every decision before
    /// it. On error no verdict is appended; a store that can retry (a lost
    /// connection) does so before it returns an error.
    fn decide(&mut self, asks: &[Ask<'_>], verdicts: &mut Vec<Verdict>) -> Result<(), StoreError>;

    /// How full the index is, as of the last call.
    fn stats(&self) -> IndexStats;

    /// Says that the messages named by `tokens` (see [`Ask::token`]) have
    /// been answered for good: their remembered verdicts may go. The
    /// in-memory index remembers none.
    fn forget(&mut self, tokens: &[&[u8]]) {
        let _ = tokens;
    }

    /// Turns explanations of verdicts on or off (`--explain`, see
    /// [`super::explain`]); whether this store gives them. The index in
    /// Redis does not: a message asked again gets its remembered verdict,
    /// whose reasons were not kept.
    fn set_explain(&mut self, on: bool) -> bool {
        let _ = on;
        false
    }

    /// With explanations on, those of the last [`IndexStore::decide`]
    /// call: one per ask, in order. Empty otherwise.
    fn explanations(&self) -> &[Explanation] {
        &[]
    }
}

/// Why an index store could not decide.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The index location is not `memory` nor a Redis URL.
    #[error("bad index location {given:?}: {reason}")]
    Location {
        /// The location as given.
        given: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The index name cannot make Redis keys of one hash slot.
    #[error("bad index name {0:?}: use 1 to 200 characters other than '{{' and '}}'")]
    Name(String),
    /// The index in Redis was made with other settings than this worker's.
    #[error(
        "index {name:?} was created with other settings: it has [{stored}], this worker has [{ours}]; \
         start with the same settings, use another --index-name, or drop it (dedup-stream index drop)"
    )]
    Mismatch {
        /// The index name.
        name: String,
        /// The settings stored with the index.
        stored: String,
        /// This worker's settings.
        ours: String,
    },
    /// Redis could not be reached, and the worker was told to stop while
    /// it waited.
    #[error("Redis is unreachable ({0}); gave up waiting for it")]
    Unavailable(String),
    /// A setting the index in Redis does not take.
    #[error("{0}")]
    Unsupported(&'static str),
    /// Redis answered with an error that retrying will not cure.
    #[error("Redis refused: {0}")]
    Refused(String),
    /// Redis wants a password the URL does not give (NOAUTH), or refused
    /// the one it gives (WRONGPASS).
    #[error(
        "Redis refused the connection's authentication ({0}): give the password in the URL, \
         redis://:PASSWORD@HOST:PORT (or redis://USER:PASSWORD@HOST:PORT with an ACL user)"
    )]
    Auth(String),
    /// A key `consume` appends to holds something else than a stream, so
    /// nothing was written or acknowledged: the entries stay pending.
    #[error(
        "the {role} {key:?} holds a {holds}, not a stream: nothing was written or acknowledged \
         (the entries stay pending); rename or delete that key, or name another stream"
    )]
    NotAStream {
        /// The key.
        key: String,
        /// What it is for: the stream read, the output or the dead-letter
        /// stream.
        role: &'static str,
        /// Its Redis type (`string`, `hash`, …).
        holds: String,
    },
}

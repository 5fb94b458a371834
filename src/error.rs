//! Typed errors. The library says what went wrong and where; the binary turns
//! it into a message and an exit status.

use std::io;

/// A configuration value is out of range or unreadable.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The threshold is not in (0, 1].
    #[error("threshold must be in (0, 1], got {0}")]
    Threshold(f64),
    /// The capacity does not fit the index's 32-bit slots.
    #[error("capacity must be between 1 and 4294967295, got {0}")]
    Capacity(usize),
    /// The shingle specification is not `words:N`, `words:1-N`, `chars:N`
    /// or `spots:N` with N in 1..=32.
    #[error(
        "shingling must be words:N, words:1-N, chars:N or spots:N with N from 1 to 32, got {0:?}"
    )]
    Shingle(String),
    /// The sampling is not `all` or `mod:M` with M in 2..=64.
    #[error("sampling must be all or mod:M with M from 2 to 64, got {0:?}")]
    Sample(String),
    /// The measure is not one of the known names.
    #[error("measure must be jaccard or containment, got {0:?}")]
    Measure(String),
    /// The LSH bucket cap is zero.
    #[error("the bucket cap must be at least 1")]
    MaxBucket,
    /// A field path is empty or has an empty component.
    #[error("field path must be dotted names like data.text, got {0:?}")]
    FieldPath(String),
    /// The window is not a positive whole number and a unit.
    #[error(
        "window must be a positive whole number and a unit (ms, s, m, h, d), like 10m, 24h or 7d, got {0:?}"
    )]
    Window(String),
    /// The empty-text rule is not one of the known names.
    #[error("empty-text must be new or invalid, got {0:?}")]
    EmptyText(String),
}

/// Why one input line could not be processed. The line is skipped (or, when
/// the user asks, the run stops), and the reason is reported with its line
/// number.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InvalidReason {
    /// The line exceeds the configured maximum length; it was never read
    /// whole into memory.
    #[error("line is longer than the limit of {max} bytes")]
    TooLong {
        /// The limit in force.
        max: usize,
    },
    /// The line is not UTF-8.
    #[error("invalid UTF-8 at byte {0}")]
    Utf8(usize),
    /// The line is not JSON (or nests deeper than the parser allows).
    #[error("not valid JSON: {0}")]
    Json(String),
    /// The line is JSON but not an object.
    #[error("not a JSON object")]
    NotObject,
    /// None of the text fields is present.
    #[error("no text field (looked for {0})")]
    NoText(String),
    /// A text field is present but is not a string.
    #[error("text field {0} is not a string")]
    TextNotString(String),
    /// None of the id fields is present.
    #[error("no id field (looked for {0})")]
    NoId(String),
    /// The id field is neither a string nor an integer.
    #[error("id field {0} is not a string or an integer")]
    BadId(String),
    /// A top-level `dedup_op` member (server only) is not `"check"`,
    /// `"query"` or `"remove"`.
    #[error("dedup_op must be \"check\", \"query\" or \"remove\", got {0}")]
    BadOp(String),
    /// The text has nothing left once normalised (empty, blank, only a link
    /// or mentions), and such messages are refused
    /// ([`crate::config::EmptyText::Invalid`]).
    #[error(
        "text has nothing to compare once normalised (empty, blank, or only links and retweet markers)"
    )]
    NothingToCompare,
    /// A line (server only) was not complete within the line timeout of its
    /// first byte; the connection is closed.
    #[error("line not complete within the line timeout of {limit:?}: closing the connection")]
    LineTimeout {
        /// The limit in force.
        limit: std::time::Duration,
    },
    /// A line of an HTTP request (server only) that the request may not
    /// carry: past its limits, or a removal sent to `/v1/query`.
    #[error("{0}")]
    Refused(String),
}

/// An invalid input line: where, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {reason}")]
pub struct InvalidLine {
    /// 1-based line number in the input.
    pub line: u64,
    /// What is wrong with it.
    pub reason: InvalidReason,
}

/// A failure that ends a run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Reading the input failed.
    #[error("reading input: {0}")]
    Read(#[source] io::Error),
    /// Writing the output failed (other than a closed pipe, which is a quiet
    /// stop).
    #[error("writing output: {0}")]
    Write(#[source] io::Error),
    /// An invalid line, when invalid lines are fatal.
    #[error("invalid input: {0}")]
    Invalid(InvalidLine),
    /// A configuration value is out of range.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A state file could not be loaded or saved.
    #[error(transparent)]
    Snapshot(#[from] crate::snapshot::SnapshotError),
    /// A server address could not be bound.
    #[error("cannot listen on {address}: {source}")]
    Listen {
        /// The address as given.
        address: String,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// The index store failed (Redis unreachable past the point of
    /// retrying, or an index made with other settings).
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A worker thread died (a bug: please report it).
    #[error("internal error: {0}")]
    Internal(String),
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

//! Why a line is refused: the reasons the wire format (and the line
//! protocol of the sidecar) gives, with the line's number.

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
    /// ([`crate::engine::config::EmptyText::Invalid`]).
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

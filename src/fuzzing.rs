//! Entry points into the crate's private decoders, for the fuzz targets in
//! `fuzz/` (issue 14, docs/reliability.md) and nothing else.
//!
//! This module exists only so that the fuzz targets, a package outside the
//! crate, can reach decoders that stay private: each function here is a
//! thin call of one of them on arbitrary bytes. It is hidden from the
//! documentation and is **not a stable API**: it may change or go without
//! notice.

use crate::engine::Verdict;
use crate::error::StoreError;

pub use redis::Value as RespValue;

/// Parses bytes in the Redis protocol (RESP) into a reply value, as the
/// `redis` client reads what the server sends; `None` when they are not
/// one complete value.
pub fn resp_value(bytes: &[u8]) -> Option<RespValue> {
    redis::parse_redis_value(bytes).ok()
}

/// An indexed message's cached entry, as the Redis index reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CachedEntry {
    /// Its sequence number.
    pub seq: u64,
    /// Whether its text was cut.
    pub truncated: bool,
    /// Its anchor keys.
    pub anchors: Vec<u32>,
    /// Its shingle set.
    pub shingles: Vec<u32>,
    /// Its id's JSON.
    pub id: Vec<u8>,
    /// Its cluster's JSON (empty: the id).
    pub cluster: Vec<u8>,
}

/// Reads a cached entry of the Redis index (an indexed message's value, as
/// decide.lua writes it) for an index of `bands` LSH bands.
pub fn redis_cached_entry(bytes: &[u8], bands: usize) -> Option<CachedEntry> {
    let cached = crate::redis_index::Cached::parse(bytes, bands)?;
    Some(CachedEntry {
        seq: cached.seq,
        truncated: cached.truncated,
        anchors: cached.anchors.into_vec(),
        shingles: cached.shingles.into_vec(),
        id: cached.id,
        cluster: cached.cluster,
    })
}

/// Reads one verdict of decide.lua's reply.
pub fn redis_verdict(bytes: &[u8]) -> Option<Verdict> {
    crate::redis_index::decode_verdict(bytes)
}

/// What a reply of decide.lua says besides its verdicts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReplyCounts {
    /// Messages in the index.
    pub len: u64,
    /// Messages evicted so far.
    pub evictions: u64,
    /// Claims refused.
    pub claims_refused: u64,
}

/// Reads a whole reply of decide.lua for `asks` messages, appending the
/// verdicts to `verdicts` (which is left as it was on error).
pub fn redis_reply(
    reply: RespValue,
    asks: usize,
    verdicts: &mut Vec<Verdict>,
) -> Result<ReplyCounts, StoreError> {
    let counts = crate::redis_index::read_reply(reply, asks, verdicts)?;
    Ok(ReplyCounts {
        len: counts.len,
        evictions: counts.evictions,
        claims_refused: counts.claims_refused,
    })
}

/// An entry of a Redis stream, as the consumer reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamEntry {
    /// The entry's id.
    pub id: String,
    /// The value of the message field, if the entry has one.
    pub message: Option<Vec<u8>>,
    /// Deleted from the stream while pending.
    pub deleted: bool,
}

/// Reads an entry of an `XREADGROUP` or `XAUTOCLAIM` reply, the message
/// being in `field`.
pub fn stream_entry(item: RespValue, field: &str) -> Option<StreamEntry> {
    let entry = crate::consume::parse_entry(item, field)?;
    Some(StreamEntry {
        id: entry.id,
        message: entry.message,
        deleted: entry.deleted,
    })
}

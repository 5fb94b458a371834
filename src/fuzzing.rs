//! Entry points into the crate's private decoders, for the fuzz targets in
//! `fuzz/` (issue 14, docs/reliability.md) and nothing else.
//!
//! This module exists only so that the fuzz targets, a package outside the
//! crate, can reach decoders that stay private: each function here is a
//! thin call of one of them on arbitrary bytes. It is hidden from the
//! documentation and is **not a stable API**: it may change or go without
//! notice.

use crate::error::StoreError;

pub use redis::Value as RespValue;

/// Whether `decoder`'s fast path reads `line` as serde_json alone reads
/// it (see `record::Decoder::decode`): the same record or the same
/// refusal; otherwise both, in words.
pub fn decoder_agrees(decoder: &crate::wire::record::Decoder, line: &[u8]) -> Result<(), String> {
    decoder.fast_path_agrees(line)
}

/// Parses bytes in the Redis protocol (RESP) into a reply value, as the
/// `redis` client reads what the server sends; `None` when they are not
/// one complete value.
pub fn resp_value(bytes: &[u8]) -> Option<RespValue> {
    redis::parse_redis_value(bytes).ok()
}

/// Reads a log entry's batch (see `redis_index::log`) and writes it back:
/// `None` when it does not read, else the bytes written from what was
/// read (ids in their canonical kind, so not always the input's bytes, but
/// always bytes that read back the same).
pub fn log_batch(bytes: &[u8]) -> Option<Vec<u8>> {
    let batch = crate::redis_index::log::Batch::decode(bytes).ok()?;
    Some(reencode(&batch))
}

/// A batch written back (its tokens are already scoped).
fn reencode(batch: &crate::redis_index::log::Batch) -> Vec<u8> {
    let asks: Vec<_> = (0..batch.len()).map(|i| batch.ask(i)).collect();
    let forget: Vec<Vec<u8>> = batch.forget().map(<[u8]>::to_vec).collect();
    let mut out = Vec::new();
    crate::redis_index::log::encode(&asks, b"", &forget, &mut out);
    out
}

/// Reads a replica snapshot (see `redis_index::replica`) into an engine
/// of the default settings and writes it back: `None` when it does not
/// read.
pub fn replica_snapshot(bytes: &[u8]) -> Option<Vec<u8>> {
    let deduper = crate::Deduper::new(crate::EngineConfig::default()).ok()?;
    let replica = crate::redis_index::replica::Replica::decode(bytes, deduper).ok()?;
    Some(replica.encode())
}

/// Reads an `XRANGE` reply of an index's log: how many entries it holds.
pub fn log_entries(reply: RespValue) -> Result<usize, StoreError> {
    crate::redis_index::parse_entries(reply).map(|entries| entries.len())
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
    let entry = crate::queue::redis_streams::parse_entry(item, field)?;
    Some(StreamEntry {
        id: entry.id,
        message: entry.message,
        deleted: entry.deleted,
    })
}

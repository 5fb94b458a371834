//! What the shared index and the stream consumer decode from Redis, on any
//! bytes: a batch of the index's log, a replica's snapshot, an `XRANGE`
//! reply of the log and a stream entry (the last two as RESP, the bytes
//! Redis sends). Each gives `None` or an error, or a value that writes back
//! to bytes that read the same; never a panic nor an allocation beyond the
//! input's size (libFuzzer's malloc limit).
//!
//! The first byte picks the decoder, the second its parameter (the
//! stream's message field).
#![no_main]

use dedup_stream::fuzzing::{
    self, RespValue, log_batch, log_entries, replica_snapshot, stream_entry,
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let [which, param, bytes @ ..] = data else {
        return;
    };
    match which % 4 {
        0 => batch(bytes),
        1 => snapshot(bytes),
        2 => entries(bytes),
        _ => entry(bytes, if param % 2 == 0 { "json" } else { "message" }),
    }
});

/// A batch that reads writes back to bytes that read back to themselves.
fn batch(bytes: &[u8]) {
    let Some(again) = log_batch(bytes) else {
        return;
    };
    assert_eq!(log_batch(&again).as_deref(), Some(again.as_slice()));
}

/// A snapshot that loads writes back to bytes that load back to themselves.
fn snapshot(bytes: &[u8]) {
    let Some(again) = replica_snapshot(bytes) else {
        return;
    };
    assert_eq!(replica_snapshot(&again).as_deref(), Some(again.as_slice()));
}

/// A reply of the log reads as at most one entry per element.
fn entries(bytes: &[u8]) {
    let Some(value) = fuzzing::resp_value(bytes) else {
        return;
    };
    let elements = match &value {
        RespValue::Array(items) => items.len(),
        _ => 0,
    };
    if let Ok(n) = log_entries(value) {
        assert_eq!(n, elements);
    }
}

/// An entry that reads, rebuilt as Redis would send it, reads the same.
fn entry(bytes: &[u8], field: &str) {
    let Some(value) = fuzzing::resp_value(bytes) else {
        return;
    };
    let Some(entry) = stream_entry(value, field) else {
        return;
    };
    assert!(entry.id.len() <= bytes.len());
    assert!(
        entry
            .message
            .as_ref()
            .is_none_or(|m| m.len() <= bytes.len())
    );
    assert!(!(entry.deleted && entry.message.is_some()));
    let fields = if entry.deleted {
        RespValue::Nil
    } else {
        RespValue::Array(
            entry
                .message
                .iter()
                .flat_map(|m| {
                    [
                        RespValue::BulkString(field.as_bytes().to_vec()),
                        RespValue::BulkString(m.clone()),
                    ]
                })
                .collect(),
        )
    };
    let again = RespValue::Array(vec![
        RespValue::BulkString(entry.id.clone().into_bytes()),
        fields,
    ]);
    assert_eq!(stream_entry(again, field), Some(entry));
}

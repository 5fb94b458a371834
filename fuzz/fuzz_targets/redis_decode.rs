//! What the Redis index and the stream consumer decode from Redis, on any
//! bytes: an indexed message's cached entry, one verdict of the decide
//! script, a whole script reply and a stream entry (the last two as RESP,
//! the bytes Redis sends). Each gives `None` or an error, or a value that
//! accounts for every input byte and reads back the same; a similarity is
//! always a number in [0, 1]; never a panic nor an allocation beyond the
//! input's size (libFuzzer's malloc limit).
//!
//! The first byte picks the decoder, the second its parameter (the LSH
//! bands, the messages a reply answers, the stream's message field).
#![no_main]

use dedup_stream::fuzzing::{
    self, RespValue, redis_cached_entry, redis_reply, redis_verdict, stream_entry,
};
use dedup_stream::record::MessageId;
use dedup_stream::{Match, Verdict};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let [which, param, bytes @ ..] = data else {
        return;
    };
    match which % 4 {
        0 => cached_entry(bytes, usize::from(param % 64)),
        1 => verdict(bytes),
        2 => reply(bytes, usize::from(*param)),
        _ => entry(bytes, if param % 2 == 0 { "json" } else { "message" }),
    }
});

fn be32(bytes: &[u8], at: usize) -> u32 {
    u32::from_be_bytes(bytes[at..at + 4].try_into().unwrap())
}

/// An entry rebuilt from what was read, with the key section of the input
/// (only its anchors are kept) gives the input back.
fn cached_entry(bytes: &[u8], bands: usize) {
    let Some(entry) = redis_cached_entry(bytes, bands) else {
        return;
    };
    let keys = usize::from(bytes[8] & 0x7f);
    assert_eq!(entry.truncated, bytes[8] & 0x80 != 0);
    assert_eq!(
        entry.seq,
        u64::from(be32(bytes, 0)) << 32 | u64::from(be32(bytes, 4))
    );
    let anchors: Vec<u32> = (bands..keys.saturating_sub(1))
        .map(|r| be32(bytes, 13 + 4 * r))
        .collect();
    assert_eq!(entry.anchors, anchors);
    assert_eq!(be32(bytes, 9) as usize, entry.shingles.len());
    let mut again = bytes[..13 + 4 * keys].to_vec();
    for s in &entry.shingles {
        again.extend_from_slice(&s.to_be_bytes());
    }
    again.extend_from_slice(&(entry.id.len() as u32).to_be_bytes());
    again.extend_from_slice(&entry.id);
    again.extend_from_slice(&entry.cluster);
    assert_eq!(again, bytes, "every byte is accounted for");
    assert_eq!(redis_cached_entry(&again, bands), Some(entry));
}

fn check_match(m: &Match) {
    assert!(
        (0.0..=1.0).contains(&m.similarity),
        "similarity {}",
        m.similarity
    );
    for id in [&m.of, &m.cluster] {
        assert_eq!(MessageId::from_json(&id.to_json()).as_ref(), Some(id));
    }
}

/// A verdict that reads is written back, byte for byte, from its counts
/// and the ids read.
fn verdict(bytes: &[u8]) {
    let Some(verdict) = redis_verdict(bytes) else {
        return;
    };
    match &verdict {
        Verdict::New => assert_eq!(bytes, b"n"),
        Verdict::Duplicate(m) => {
            check_match(m);
            let (shared, of) = (be32(bytes, 1), be32(bytes, 5));
            assert!(of > 0 && shared <= of);
            assert_eq!(m.similarity, f64::from(shared) / f64::from(of));
            let id = m.of.to_json();
            let cluster = m.cluster.to_json();
            let mut again = vec![b'd'];
            again.extend_from_slice(&shared.to_be_bytes());
            again.extend_from_slice(&of.to_be_bytes());
            again.extend_from_slice(&(id.len() as u32).to_be_bytes());
            again.extend_from_slice(id.as_bytes());
            again.extend_from_slice(cluster.as_bytes());
            assert_eq!(again, bytes);
        }
    }
    assert_eq!(redis_verdict(bytes), Some(verdict));
}

/// A reply gives `asks` verdicts and the three counts, or an error that
/// leaves the verdicts already there as they were.
fn reply(bytes: &[u8], asks: usize) {
    let Some(value) = fuzzing::resp_value(bytes) else {
        return;
    };
    let before = vec![Verdict::New];
    let mut verdicts = before.clone();
    match redis_reply(value.clone(), asks, &mut verdicts) {
        Ok(counts) => {
            assert_eq!(verdicts.len(), before.len() + asks);
            for v in &verdicts {
                if let Verdict::Duplicate(m) = v {
                    check_match(m);
                }
            }
            let RespValue::Array(items) = &value else {
                panic!("a reply that reads is an array");
            };
            assert_eq!(items.len(), asks + 3);
            assert_eq!(
                items[asks..],
                [
                    RespValue::Int(counts.len as i64),
                    RespValue::Int(counts.evictions as i64),
                    RespValue::Int(counts.claims_refused as i64),
                ]
            );
        }
        Err(_) => assert_eq!(verdicts, before),
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

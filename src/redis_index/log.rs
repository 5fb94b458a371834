//! One entry of an index's log: a batch of prepared messages, as a worker
//! appends it and every worker reads it back.
//!
//! The log carries what the decision needs and nothing of the decision
//! itself: each message's id, sketch (shingles, band and anchor keys, set
//! fingerprint, whether the text was cut), time, operation and queue token,
//! and the tokens whose verdicts may be forgotten. Every replica decides
//! the messages itself, in log order, with the same [`Deduper`] the filter
//! uses (see [`super::replica`]).
//!
//! # Format (version 2, little-endian)
//!
//! ```text
//! version      u8        2 (1 is read too: it has no removals)
//! forget       u32       tokens whose remembered verdicts go, then each:
//!   token        u16 + N   length, bytes
//! messages     u32       count, then each:
//!   flags        u8        1: a query (decide, index nothing), 2: the text
//!                          was cut, 4: a token follows the id, 8: a
//!                          removal (forget the id; no shingles, no keys)
//!   time         i64       milliseconds since the Unix epoch (--window)
//!   id           u8 + …    kind and value, as in state files (src/snapshot.rs)
//!   token        u16 + N   (flag 4) the queue entry's token, scoped
//!   fingerprint  u64       of the shingle set
//!   shingles     u16 + 4N  count, sorted fingerprints
//!   keys         u8 + 4N   count, LSH band keys then anchor keys
//! ```
//!
//! [`Deduper`]: crate::engine::Deduper

use std::ops::Range;

use crate::engine::index::entry_data;
use crate::engine::shingle::MAX_SHINGLES;
use crate::engine::{Ask, Op, Sketch};
use crate::state::snapshot::{Reader, encode_id};
use crate::wire::record::MessageId;

/// The format version this build writes (and reads).
const VERSION: u8 = 2;
/// The oldest version it reads: version 1 entries hold no removals.
const PREVIOUS_VERSION: u8 = 1;

const QUERY: u8 = 1;
const TRUNCATED: u8 = 2;
const TOKEN: u8 = 4;
/// Version 2: every replica forgets the id where the entry stands in the
/// log, so removals are ordered with the checks around them.
const REMOVE: u8 = 8;

/// Most keys a message may carry (LSH bands, anchors): a byte's count.
const MAX_KEYS: usize = u8::MAX as usize;

/// Why an entry's bytes could not be read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("a log entry is corrupt: {0}")]
pub struct Corrupt(pub &'static str);

/// Encodes a batch: `forget` (scoped tokens) and the messages, each token
/// given scoped by `scope`.
pub fn encode(asks: &[Ask<'_>], scope: &[u8], forget: &[Vec<u8>], out: &mut Vec<u8>) {
    out.clear();
    out.push(VERSION);
    out.extend_from_slice(&(forget.len() as u32).to_le_bytes());
    for token in forget {
        push_token(out, token, &[]);
    }
    out.extend_from_slice(&(asks.len() as u32).to_le_bytes());
    for ask in asks {
        let mut flags = 0;
        match ask.op {
            Op::Query => flags |= QUERY,
            Op::Remove => flags |= REMOVE,
            Op::Check => {}
        }
        if ask.sketch.truncated {
            flags |= TRUNCATED;
        }
        if ask.token.is_some() {
            flags |= TOKEN;
        }
        out.push(flags);
        out.extend_from_slice(&ask.time.to_le_bytes());
        encode_id(ask.id, out);
        if let Some(token) = ask.token {
            push_token(out, scope, token);
        }
        out.extend_from_slice(&ask.sketch.set_fingerprint.to_le_bytes());
        let shingles = &ask.sketch.shingles[..ask.sketch.shingles.len().min(MAX_SHINGLES)];
        out.extend_from_slice(&(shingles.len() as u16).to_le_bytes());
        for s in shingles {
            out.extend_from_slice(&s.to_le_bytes());
        }
        let keys = &ask.sketch.band_keys[..ask.sketch.band_keys.len().min(MAX_KEYS)];
        out.push(keys.len() as u8);
        for k in keys {
            out.extend_from_slice(&k.to_le_bytes());
        }
    }
}

/// Appends a token of at most `u16::MAX` bytes: `scope` then `token`.
fn push_token(out: &mut Vec<u8>, scope: &[u8], token: &[u8]) {
    let len = (scope.len() + token.len()).min(usize::from(u16::MAX));
    out.extend_from_slice(&(len as u16).to_le_bytes());
    out.extend(scope.iter().chain(token).take(len));
}

/// Appends the little-endian u32s of `bytes` (a multiple of four long):
/// one bounds check for the run rather than one a value, on a replica's
/// serial path.
fn push_u32s(out: &mut Vec<u32>, bytes: &[u8]) {
    out.extend(
        bytes
            .chunks_exact(4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]])),
    );
}

/// A message read from the log (its slices live in the [`Batch`]).
#[derive(Clone, Debug)]
struct Logged {
    id: MessageId,
    op: Op,
    truncated: bool,
    time: i64,
    token: Option<Range<usize>>,
    set_fingerprint: u64,
    shingles: Range<usize>,
    keys: Range<usize>,
}

/// A decoded entry: the tokens to forget and the messages.
#[derive(Clone, Debug, Default)]
pub struct Batch {
    forget: Vec<Range<usize>>,
    messages: Vec<Logged>,
    tokens: Vec<u8>,
    shingles: Vec<u32>,
    keys: Vec<u32>,
    /// For each message to check, the data an index entry holds of it (its
    /// keys, then its shingles), made here, on the thread that reads the
    /// log ahead, rather than on the one that applies it (see
    /// [`crate::engine::index::Index::offer`]); `None` for the others, and
    /// once taken.
    entry_data: Vec<Option<Box<[u32]>>>,
}

impl Batch {
    /// Reads an entry's bytes.
    pub fn decode(bytes: &[u8]) -> Result<Batch, Corrupt> {
        let truncated = |_| Corrupt("it ends too soon");
        let mut r = Reader::new(bytes);
        if !(PREVIOUS_VERSION..=VERSION).contains(&r.u8().map_err(truncated)?) {
            return Err(Corrupt("unknown version (written by another build?)"));
        }
        let mut batch = Batch::default();
        let forget = r.u32().map_err(truncated)? as usize;
        if forget > bytes.len() / 2 {
            return Err(Corrupt("more tokens than it can hold"));
        }
        for _ in 0..forget {
            let token = batch.token(&mut r)?;
            batch.forget.push(token);
        }
        let count = r.u32().map_err(truncated)? as usize;
        // The smallest message is 24 bytes.
        if count > bytes.len() / 24 {
            return Err(Corrupt("more messages than it can hold"));
        }
        batch.messages.reserve(count);
        for _ in 0..count {
            let flags = r.u8().map_err(truncated)?;
            let time = r.u64().map_err(truncated)? as i64;
            let kind = r.u8().map_err(truncated)?;
            let id = r.id(kind).map_err(|_| Corrupt("an id is out of shape"))?;
            let token = if flags & TOKEN != 0 {
                Some(batch.token(&mut r)?)
            } else {
                None
            };
            let set_fingerprint = r.u64().map_err(truncated)?;
            let n = usize::from(r.u16().map_err(truncated)?);
            if n > MAX_SHINGLES {
                return Err(Corrupt("more shingles than a set keeps"));
            }
            let start = batch.shingles.len();
            push_u32s(&mut batch.shingles, r.take(4 * n).map_err(truncated)?);
            if !batch.shingles[start..].is_sorted_by(|a, b| a < b) {
                return Err(Corrupt("a shingle set is not sorted"));
            }
            let shingles = start..batch.shingles.len();
            let k = usize::from(r.u8().map_err(truncated)?);
            let start = batch.keys.len();
            push_u32s(&mut batch.keys, r.take(4 * k).map_err(truncated)?);
            let data = (flags & (QUERY | REMOVE) == 0)
                .then(|| entry_data(&batch.keys[start..], &batch.shingles[shingles.clone()]));
            batch.entry_data.push(data);
            batch.messages.push(Logged {
                id,
                op: match (flags & QUERY != 0, flags & REMOVE != 0) {
                    (false, false) => Op::Check,
                    (true, false) => Op::Query,
                    (false, true) => Op::Remove,
                    (true, true) => return Err(Corrupt("a message both queries and removes")),
                },
                truncated: flags & TRUNCATED != 0,
                time,
                token,
                set_fingerprint,
                shingles,
                keys: start..batch.keys.len(),
            });
        }
        if !r.is_empty() {
            return Err(Corrupt("bytes after the last message"));
        }
        Ok(batch)
    }

    fn token(&mut self, r: &mut Reader<'_>) -> Result<Range<usize>, Corrupt> {
        let len = usize::from(r.u16().map_err(|_| Corrupt("it ends too soon"))?);
        let bytes = r.take(len).map_err(|_| Corrupt("it ends too soon"))?;
        let start = self.tokens.len();
        self.tokens.extend_from_slice(bytes);
        Ok(start..self.tokens.len())
    }

    /// How many messages it holds.
    pub fn len(&self) -> usize {
        self.messages.len()
    }

    /// Whether it holds no message.
    pub fn is_empty(&self) -> bool {
        self.messages.is_empty()
    }

    /// The tokens whose verdicts may be forgotten.
    pub fn forget(&self) -> impl Iterator<Item = &[u8]> {
        self.forget.iter().map(|r| &self.tokens[r.clone()])
    }

    /// Takes the entries' data made as the batch was read (see
    /// `entry_data`): one per message, `None` where there is none.
    pub fn take_entry_data(&mut self) -> Vec<Option<Box<[u32]>>> {
        std::mem::take(&mut self.entry_data)
    }

    /// The `i`-th message as the index store takes it (its token scoped).
    pub fn ask(&self, i: usize) -> Ask<'_> {
        let m = &self.messages[i];
        Ask {
            id: &m.id,
            sketch: Sketch {
                shingles: &self.shingles[m.shingles.clone()],
                band_keys: &self.keys[m.keys.clone()],
                set_fingerprint: m.set_fingerprint,
                truncated: m.truncated,
            },
            op: m.op,
            token: m.token.clone().map(|r| &self.tokens[r]),
            time: m.time,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_reads_back_as_written() {
        let ids = [
            MessageId::DigitString(1_234_567_890_123_456_789),
            MessageId::Raw("\"item-é\"".into()),
        ];
        let shingles = [vec![1, 5, 9], vec![]];
        let keys = [vec![10, 20, 30, 40], vec![7]];
        let asks: Vec<Ask<'_>> = (0..2)
            .map(|i| Ask {
                id: &ids[i],
                sketch: Sketch {
                    shingles: &shingles[i],
                    band_keys: &keys[i],
                    set_fingerprint: 77 + i as u64,
                    truncated: i == 0,
                },
                op: if i == 0 { Op::Check } else { Op::Query },
                token: (i == 0).then_some(&b"1700000000000-3"[..]),
                time: -5 + i as i64,
            })
            .collect();
        let mut bytes = Vec::new();
        encode(&asks, b"q:in:g:", &[b"q:in:g:1-0".to_vec()], &mut bytes);
        let batch = Batch::decode(&bytes).unwrap();
        assert_eq!(batch.len(), 2);
        assert_eq!(batch.forget().collect::<Vec<_>>(), [&b"q:in:g:1-0"[..]]);
        for (i, ask) in asks.iter().enumerate() {
            let got = batch.ask(i);
            assert_eq!(got.id, ask.id);
            assert_eq!(got.sketch.shingles, ask.sketch.shingles);
            assert_eq!(got.sketch.band_keys, ask.sketch.band_keys);
            assert_eq!(got.sketch.set_fingerprint, ask.sketch.set_fingerprint);
            assert_eq!(got.sketch.truncated, ask.sketch.truncated);
            assert_eq!(got.op, ask.op);
            assert_eq!(got.time, ask.time);
        }
        assert_eq!(batch.ask(0).token, Some(&b"q:in:g:1700000000000-3"[..]));
        assert_eq!(batch.ask(1).token, None);
        // Every cut and every flipped version is refused, never misread.
        for cut in 0..bytes.len() {
            assert!(Batch::decode(&bytes[..cut]).is_err(), "cut at {cut}");
        }
        let mut other = bytes.clone();
        other[0] = 3;
        assert!(Batch::decode(&other).is_err());
        // Version 1 (no removals) is read as it was.
        other[0] = 1;
        assert_eq!(Batch::decode(&other).unwrap().len(), 2);
    }

    #[test]
    fn a_removal_reads_back_in_its_place() {
        let ids = [MessageId::Integer(5), MessageId::DigitString(5)];
        let asks: Vec<Ask<'_>> = [Op::Check, Op::Remove]
            .iter()
            .zip(&ids)
            .map(|(&op, id)| Ask {
                id,
                sketch: Sketch {
                    shingles: &[],
                    band_keys: &[],
                    set_fingerprint: 0,
                    truncated: false,
                },
                op,
                token: None,
                time: 0,
            })
            .collect();
        let mut bytes = Vec::new();
        encode(&asks, b"", &[], &mut bytes);
        let batch = Batch::decode(&bytes).unwrap();
        assert_eq!(batch.ask(0).op, Op::Check);
        assert_eq!(batch.ask(1).op, Op::Remove);
        assert_eq!(batch.ask(1).id, &MessageId::DigitString(5));
    }
}

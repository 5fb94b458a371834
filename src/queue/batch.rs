//! What every queue worker (Redis Streams, NATS JetStream, Kafka) does to a
//! batch it has read: its payloads made lines as the filter reads them
//! ([`Lines`]), decoded and sketched on any thread ([`prepare`]), one call
//! to the index store for the batch ([`decide`]), and each payload's
//! outcome with its verdict counted. Only how a worker reads, publishes and acknowledges
//! is its own.

use std::sync::atomic::Ordering;

use crate::engine::{Ask, IndexStore, Preparer, Verdict};
use crate::error::{InvalidLine, StoreError};
use crate::metrics::Metrics;
use crate::wire::batch::{self, Item, PreparedBatch, PreparedMessage, RawBatch, RawLine};
use crate::wire::input::BOM;
use crate::wire::record::Decoder;

/// A batch of payloads, prepared and decided.
#[derive(Debug)]
pub struct DecidedBatch {
    prepared: PreparedBatch,
    verdicts: Vec<Verdict>,
    /// Where each payload went.
    places: Vec<Place>,
}

/// Where a payload went in a [`DecidedBatch`].
#[derive(Clone, Copy, Debug)]
enum Place {
    /// Nowhere: there was none.
    Missing,
    /// An invalid line: its item.
    Invalid(usize),
    /// A message: its item and its verdict.
    Message(usize, usize),
}

/// What became of one payload.
#[derive(Debug)]
pub enum Payload<'a> {
    /// There was none (a Redis entry without the field, or deleted).
    Missing,
    /// Not a message: why (to dead-letter it).
    Invalid(&'a InvalidLine),
    /// A message and its verdict.
    Message(&'a PreparedMessage, &'a Verdict),
}

/// How many verdicts of each kind a batch got.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    /// Messages tagged new.
    pub new: u64,
    /// Messages tagged duplicate.
    pub duplicates: u64,
    /// Deletion notices.
    pub deletions: u64,
    /// Messages found indexed already under their id with the same text
    /// (entries delivered again), written with their first verdict and
    /// counted in `new` or `duplicates` too.
    pub repeats: u64,
}

impl Tally {
    /// Adds another batch's counts.
    pub fn add(&mut self, other: Tally) {
        self.new += other.new;
        self.duplicates += other.duplicates;
        self.deletions += other.deletions;
        self.repeats += other.repeats;
    }
}

impl DecidedBatch {
    /// A batch nothing was decided for (a relay's: see
    /// [`crate::queue::Settings::relay`]): every payload is
    /// [`Payload::Missing`].
    pub fn undecided() -> DecidedBatch {
        DecidedBatch {
            prepared: PreparedBatch::default(),
            verdicts: Vec::new(),
            places: Vec::new(),
        }
    }

    /// What became of payload `at` (in the order given to [`decide`]).
    pub fn payload(&self, at: usize) -> Payload<'_> {
        let place = self.places.get(at).copied().unwrap_or(Place::Missing);
        match place {
            Place::Missing => Payload::Missing,
            Place::Invalid(item) | Place::Message(item, _) => match &self.prepared.items[item] {
                Item::Invalid(invalid) => Payload::Invalid(invalid),
                Item::Message(message) => match place {
                    Place::Message(_, verdict) => {
                        Payload::Message(message, &self.verdicts[verdict])
                    }
                    _ => Payload::Missing,
                },
            },
        }
    }

    /// A message tagged with its verdict, as one record (no newline).
    pub fn tagged(&self, message: &PreparedMessage, verdict: &Verdict) -> Vec<u8> {
        let mut tagged = Vec::with_capacity(message.line.len() + 80);
        batch::write_message(&mut tagged, &self.prepared, message, verdict);
        tagged.pop(); // the newline: a record is not a line
        tagged
    }
}

/// A fetched batch's payloads made lines, as the filter reads them, for
/// [`prepare`] (on any thread: it owns its bytes).
#[derive(Debug)]
pub struct Lines {
    raw: RawBatch,
    /// Each payload's line in `raw`; `None`: it had none.
    items: Vec<Option<usize>>,
}

impl Lines {
    /// Copies `payloads` into lines as the filter reads them: a leading
    /// byte-order mark skipped, one over `max_line_bytes` refused unread.
    pub fn new(payloads: &[Option<&[u8]>], max_line_bytes: usize) -> Lines {
        // Room for every line at once: grown line by line, the bytes of a
        // batch (over a megabyte of tweets) were copied again at each
        // doubling, on the thread that decides.
        let bytes = payloads
            .iter()
            .flatten()
            .map(|payload| payload.len())
            .filter(|&len| len <= max_line_bytes.saturating_add(BOM.len()))
            .sum();
        let mut raw = RawBatch {
            bytes: Vec::with_capacity(bytes),
            lines: Vec::with_capacity(payloads.len()),
        };
        let mut items = Vec::with_capacity(payloads.len());
        for payload in payloads {
            items.push(payload.map(|payload| {
                let number = raw.len() as u64 + 1;
                // Some producers write a byte-order mark in every message.
                let payload = payload.strip_prefix(BOM).unwrap_or(payload);
                if payload.len() > max_line_bytes {
                    raw.lines.push(RawLine::TooLong {
                        number,
                        max: max_line_bytes,
                    });
                } else {
                    raw.push_line(number, payload);
                }
                raw.len() - 1
            }));
        }
        Lines { raw, items }
    }
}

/// A batch decoded and sketched, not yet decided.
#[derive(Debug)]
pub struct Prepared {
    prepared: PreparedBatch,
    items: Vec<Option<usize>>,
}

/// Decodes and sketches a batch's lines (pure work, any thread).
pub fn prepare((preparer, decoder): (&Preparer, &Decoder), lines: Lines) -> Prepared {
    Prepared {
        prepared: batch::prepare(preparer, decoder, lines.raw, None),
        items: lines.items,
    }
}

/// Decides a prepared batch's messages in one call to `store`, each under
/// its redelivery token (`tokens`, one per payload, in the order given to
/// [`Lines::new`]). Counts the verdicts in `metrics` and returns them
/// counted.
pub fn decide<S: IndexStore + ?Sized>(
    store: &mut S,
    prepared: Prepared,
    tokens: &[&[u8]],
    metrics: &Metrics,
) -> Result<(DecidedBatch, Tally), StoreError> {
    let Prepared { prepared, items } = prepared;
    let mut asks = Vec::with_capacity(items.len());
    let mut places = Vec::with_capacity(items.len());
    for (item, token) in items.iter().zip(tokens) {
        places.push(match item.map(|item| (item, &prepared.items[item])) {
            None => Place::Missing,
            Some((item, Item::Invalid(_))) => Place::Invalid(item),
            Some((item, Item::Message(message))) => {
                asks.push(Ask {
                    id: &message.id,
                    sketch: prepared.sketch(message),
                    op: message.op,
                    token: Some(token),
                    time: message.time,
                });
                Place::Message(item, asks.len() - 1)
            }
        });
    }
    let mut verdicts = Vec::with_capacity(asks.len());
    store.decide(&asks, &mut verdicts)?;
    if verdicts.len() != asks.len() {
        return Err(StoreError::Unavailable(
            "the index store lost a verdict".into(),
        ));
    }
    drop(asks);
    let mut tally = Tally::default();
    for verdict in &mut verdicts {
        // An entry delivered again (its worker died before acknowledging
        // it, or the broker lost the acknowledgement) is the same entry:
        // its output is the first delivery's, byte for byte, whether the
        // store still remembered its token or found it indexed.
        if verdict.is_repeat() {
            tally.repeats += 1;
            metrics.repeats.fetch_add(1, Ordering::Relaxed);
            *verdict = verdict.first();
        }
        match verdict {
            Verdict::Deleted { held } => {
                tally.deletions += 1;
                let counter = if *held {
                    &metrics.removals_held
                } else {
                    &metrics.removals_unknown
                };
                counter.fetch_add(1, Ordering::Relaxed);
            }
            Verdict::Duplicate(_) | Verdict::Repeat(Some(_)) => {
                tally.duplicates += 1;
                metrics.checks_duplicate.fetch_add(1, Ordering::Relaxed);
            }
            Verdict::New | Verdict::Repeat(None) => {
                tally.new += 1;
                metrics.checks_new.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
    // For the live page (`GET /` on the admin port).
    metrics
        .live
        .note(places.iter().filter_map(|place| match place {
            Place::Message(item, v) => match (&prepared.items[*item], &verdicts[*v]) {
                (Item::Message(message), Verdict::Duplicate(m)) => Some((&m.cluster, &message.id)),
                _ => None,
            },
            _ => None,
        }));
    metrics.record_index(store.stats());
    let decided = DecidedBatch {
        prepared,
        verdicts,
        places,
    };
    Ok((decided, tally))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::Deduper;
    use crate::engine::config::EngineConfig;
    use crate::wire::record::{FieldSpec, MessageId};

    #[test]
    fn every_payload_gets_its_own_outcome_and_the_verdicts_are_counted() {
        let mut deduper = Deduper::new(EngineConfig::default()).unwrap();
        let preparer = deduper.preparer().clone();
        let decoder = Decoder::new(FieldSpec::default());
        let metrics = Metrics::default();
        let original =
            br#"{"id":1,"text":"the river burst its banks at dawn and the town is cut off"}"#;
        let copy = b"\xef\xbb\xbf{\"id\":2,\"text\":\"the river burst its banks at dawn and the town is cut off\"}";
        let long = format!(r#"{{"id":5,"text":"{}"}}"#, "word ".repeat(100));
        let payloads: Vec<Option<&[u8]>> = vec![
            Some(original),
            Some(b"not json"),
            None,
            Some(copy),
            Some(long.as_bytes()),
            Some(br#"{"delete":{"status":{"id":1,"id_str":"1"}}}"#),
        ];
        let tokens: Vec<&[u8]> = vec![b"a", b"b", b"c", b"d", b"e", b"f"];
        let prepared = prepare((&preparer, &decoder), Lines::new(&payloads, 200));
        let (decided, tally) = decide(&mut deduper, prepared, &tokens, &metrics).unwrap();
        assert!(matches!(
            decided.payload(0),
            Payload::Message(_, Verdict::New)
        ));
        assert!(matches!(decided.payload(1), Payload::Invalid(_)));
        assert!(matches!(decided.payload(2), Payload::Missing));
        // The byte-order mark is skipped, as the filter skips one.
        match decided.payload(3) {
            Payload::Message(message, verdict @ Verdict::Duplicate(m)) => {
                assert_eq!(m.cluster, MessageId::Integer(1));
                let tagged = decided.tagged(message, verdict);
                assert!(tagged.starts_with(b"{\"id\":2,"), "{tagged:?}");
                assert!(!tagged.ends_with(b"\n"));
            }
            other => panic!("{other:?}"),
        }
        match decided.payload(4) {
            Payload::Invalid(invalid) => assert!(matches!(
                invalid.reason,
                crate::error::InvalidReason::TooLong { max: 200 }
            )),
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            decided.payload(5),
            Payload::Message(_, Verdict::Deleted { held: true })
        ));
        assert!(matches!(decided.payload(6), Payload::Missing));
        let expected = Tally {
            new: 1,
            duplicates: 1,
            deletions: 1,
            repeats: 0,
        };
        assert_eq!(tally, expected);
        assert_eq!(metrics.checks_new.load(Ordering::Relaxed), 1);
        assert_eq!(metrics.checks_duplicate.load(Ordering::Relaxed), 1);
        assert_eq!(metrics.removals_held.load(Ordering::Relaxed), 1);
    }
}

//! Batches: the unit of work between the pipeline's stages.
//!
//! Lines travel in batches (a few hundred at a time) so that channels,
//! thread hand-offs and allocations are paid per batch, not per message. A
//! [`RawBatch`] holds the lines' bytes in one buffer; [`prepare`] decodes and
//! sketches every line of it (pure work, any thread); [`asks`] hands its
//! messages to the index store (one call per batch: one round trip when the
//! index is in Redis), and [`write_message`] splices each verdict in.

use std::ops::Range;

use crate::engine::{Ask, Explanation, Preparer, Scratch, Sketch, Verdict};
use crate::wire::invalid::{InvalidLine, InvalidReason};
use crate::wire::record::{Decoder, MessageId, Splice, write_tagged};

pub use crate::engine::Op;

/// Lines read but not yet prepared.
#[derive(Debug, Default)]
pub struct RawBatch {
    /// The bytes the lines lie in, in input order: back to back, or (as
    /// the filter's reader leaves them, read in place) with their
    /// terminators, blank lines and bytes read past the last line between
    /// and after them. Only the lines' ranges say what is a line.
    pub bytes: Vec<u8>,
    /// One entry per non-blank line, in input order.
    pub lines: Vec<RawLine>,
}

/// One line of a [`RawBatch`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RawLine {
    /// A line that was read whole.
    Content {
        /// 1-based line number.
        number: u64,
        /// Where its bytes are in [`RawBatch::bytes`].
        range: Range<usize>,
    },
    /// A line over the length limit, skipped unread.
    TooLong {
        /// 1-based line number.
        number: u64,
        /// The limit in force.
        max: usize,
    },
}

impl RawBatch {
    /// Appends a complete line.
    pub fn push_line(&mut self, number: u64, line: &[u8]) {
        let start = self.bytes.len();
        self.bytes.extend_from_slice(line);
        self.lines.push(RawLine::Content {
            number,
            range: start..self.bytes.len(),
        });
    }

    /// Where the last line's bytes end in [`RawBatch::bytes`] (0 without
    /// one): what the batch holds, whatever lies past it.
    pub fn lines_end(&self) -> usize {
        self.lines
            .iter()
            .rev()
            .find_map(|line| match line {
                RawLine::Content { range, .. } => Some(range.end),
                RawLine::TooLong { .. } => None,
            })
            .unwrap_or(0)
    }

    /// Number of lines held.
    pub fn len(&self) -> usize {
        self.lines.len()
    }

    /// Whether it holds no line.
    pub fn is_empty(&self) -> bool {
        self.lines.is_empty()
    }
}

/// A prepared line.
#[derive(Debug)]
pub enum Item {
    /// A valid message, sketched.
    Message(PreparedMessage),
    /// An invalid line.
    Invalid(InvalidLine),
}

/// A decoded and sketched message; its sketch lives in the batch's shared
/// buffers.
#[derive(Debug)]
pub struct PreparedMessage {
    /// 1-based line number.
    pub number: u64,
    /// The line's bytes in the raw batch.
    pub line: Range<usize>,
    /// The message's id.
    pub id: MessageId,
    /// Where the tag goes.
    pub splice: Splice,
    /// What the message asks for.
    pub op: Op,
    /// Its time (see [`Ask::time`]): its `created_at`, or else when its
    /// batch was prepared.
    pub time: i64,
    /// Its `created_at` is a string in neither known format, so `time` is
    /// its arrival time (reported under `--window`, see
    /// [`crate::pipeline::report::Report::unreadable_time`]).
    pub unreadable_time: bool,
    /// It has no `created_at` (none that is a string), so `time` is its
    /// arrival time (reported under `--window`, see
    /// [`crate::pipeline::report::Report::missing_time`]).
    pub missing_time: bool,
    shingles: Range<usize>,
    band_keys: Range<usize>,
    set_fingerprint: u64,
    truncated: bool,
}

impl PreparedMessage {
    /// A removal (a deletion notice, or the sidecar's
    /// `"dedup_op":"remove"`): the id to forget, no sketch.
    pub fn removal(
        number: u64,
        line: Range<usize>,
        record: crate::wire::record::Record<'_>,
    ) -> Self {
        PreparedMessage {
            number,
            line,
            id: record.id,
            splice: record.splice,
            op: Op::Remove,
            time: 0,
            unreadable_time: false,
            missing_time: false,
            shingles: 0..0,
            band_keys: 0..0,
            set_fingerprint: 0,
            truncated: false,
        }
    }
}

/// A batch whose lines are all prepared, in input order.
#[derive(Debug, Default)]
pub struct PreparedBatch {
    /// The raw lines.
    pub raw: RawBatch,
    /// One item per raw line.
    pub items: Vec<Item>,
    shingles: Vec<u32>,
    band_keys: Vec<u32>,
}

impl PreparedBatch {
    /// The sketch of a prepared message of this batch.
    pub fn sketch(&self, message: &PreparedMessage) -> Sketch<'_> {
        Sketch {
            shingles: &self.shingles[message.shingles.clone()],
            band_keys: &self.band_keys[message.band_keys.clone()],
            set_fingerprint: message.set_fingerprint,
            truncated: message.truncated,
        }
    }

    /// The raw bytes of a prepared message's line.
    pub fn line(&self, message: &PreparedMessage) -> &[u8] {
        &self.raw.bytes[message.line.clone()]
    }
}

/// Reads a message's `dedup_op` request from its line. Only the server asks
/// for this: see [`prepare`]'s `read_op`.
pub type OpReader = fn(&[u8]) -> Op;

/// The shingles a batch's vector is made for. A message's shingles are at
/// most about one per two bytes of its text, and a tweet's line is mostly
/// not text: a quarter of the batch's bytes holds a batch of tweets (24 a
/// line fell short, and growing a batch's vector twice copied it, about 110
/// instructions a message), and is no more memory than the batch's own
/// bytes.
fn shingle_room(raw: &RawBatch) -> usize {
    (raw.lines.len() * 24).max(raw.lines_end() / 4)
}

/// Decodes and sketches every line of a batch.
pub fn prepare(
    preparer: &Preparer,
    decoder: &Decoder,
    raw: RawBatch,
    read_op: Option<OpReader>,
) -> PreparedBatch {
    let mut scratch = Scratch::default();
    let mut batch = PreparedBatch {
        items: Vec::with_capacity(raw.lines.len()),
        shingles: Vec::with_capacity(shingle_room(&raw)),
        // The LSH bands and the anchors per message.
        band_keys: Vec::with_capacity(
            raw.lines.len() * (preparer.lsh_params().bands + crate::engine::MAX_ANCHORS),
        ),
        raw: RawBatch::default(),
    };
    // The arrival time of the batch's lines without a created_at: read
    // once, when the first such line comes.
    let mut arrival = None;
    // The thread's decoding buffers borrowed once for the batch, and one
    // vector for every record's URL pairs (see `Decoding::decode_into`).
    decoder.decoding(|decoding| {
        let mut urls = Vec::new();
        for line in &raw.lines {
            let item = match line {
                RawLine::TooLong { number, max } => Item::Invalid(InvalidLine {
                    line: *number,
                    reason: InvalidReason::TooLong { max: *max },
                }),
                RawLine::Content { number, range } => {
                    let bytes = &raw.bytes[range.clone()];
                    match decoding.decode_into(bytes, std::mem::take(&mut urls)) {
                        Err(reason) => Item::Invalid(InvalidLine {
                            line: *number,
                            reason,
                        }),
                        Ok(mut record) if record.deletion => {
                            urls = std::mem::take(&mut record.urls);
                            Item::Message(PreparedMessage::removal(*number, range.clone(), record))
                        }
                        Ok(record) => {
                            let created_at = record.created_at_millis();
                            let unreadable_time =
                                created_at.is_none() && record.created_at.is_some();
                            let time = created_at.unwrap_or_else(|| {
                                *arrival.get_or_insert_with(crate::wire::timestamp::now_millis)
                            });
                            let shingle_start = batch.shingles.len();
                            let band_start = batch.band_keys.len();
                            let set_fingerprint = preparer.sketch_into(
                                &record.text,
                                &record.urls,
                                &mut scratch,
                                &mut batch.shingles,
                                &mut batch.band_keys,
                            );
                            urls = record.urls;
                            if batch.shingles.len() == shingle_start && preparer.refuses_empty() {
                                batch.band_keys.truncate(band_start);
                                batch.items.push(Item::Invalid(InvalidLine {
                                    line: *number,
                                    reason: InvalidReason::NothingToCompare,
                                }));
                                continue;
                            }
                            Item::Message(PreparedMessage {
                                number: *number,
                                line: range.clone(),
                                id: record.id,
                                splice: record.splice,
                                op: read_op.map_or(Op::Check, |read| read(bytes)),
                                time,
                                unreadable_time,
                                missing_time: record.created_at.is_none(),
                                shingles: shingle_start..batch.shingles.len(),
                                band_keys: band_start..batch.band_keys.len(),
                                set_fingerprint,
                                truncated: scratch.truncated(),
                            })
                        }
                    }
                }
            };
            batch.items.push(item);
        }
    });
    batch.raw = raw;
    batch
}

/// The messages of a batch (its valid lines, in order, up to `limit`
/// items), as the index is asked them.
pub fn asks(batch: &PreparedBatch, limit: usize) -> Vec<Ask<'_>> {
    let items = &batch.items[..limit.min(batch.items.len())];
    // Room for every item at once: collected from a filter, the vector
    // grew by doubling, seven reallocations a batch on the deciding thread
    // (about 80 instructions a message).
    let mut asks = Vec::with_capacity(items.len());
    asks.extend(items.iter().filter_map(|item| match item {
        Item::Message(message) => Some(Ask {
            id: &message.id,
            sketch: batch.sketch(message),
            op: message.op,
            token: None,
            time: message.time,
        }),
        Item::Invalid(_) => None,
    }));
    asks
}

/// Writes a message's line with its verdict spliced in.
pub fn write_message(
    out: &mut Vec<u8>,
    batch: &PreparedBatch,
    message: &PreparedMessage,
    verdict: &Verdict,
) {
    write_tagged(out, batch.line(message), message.splice, |out| {
        verdict.write_json(out)
    });
}

/// [`write_message`] with the verdict's explanation in its tag, when there
/// is one (`--explain`); without one, the same bytes.
pub fn write_explained(
    out: &mut Vec<u8>,
    batch: &PreparedBatch,
    message: &PreparedMessage,
    verdict: &Verdict,
    explanation: Option<&Explanation>,
) {
    write_tagged(out, batch.line(message), message.splice, |out| {
        verdict.write_json_explained(explanation, out)
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::config::EngineConfig;
    use crate::wire::record::FieldSpec;

    /// A batch of tweets fits the shingles' vector made for it: it is not
    /// grown (and copied) while the batch is prepared.
    #[test]
    fn a_batch_of_tweets_fits_its_shingles_vector() {
        let preparer = Preparer::new(&EngineConfig::default());
        let decoder = Decoder::new(FieldSpec::default());
        let mut raw = RawBatch::default();
        let lines = [
            include_str!("../../fixtures/retweet_storm.jsonl"),
            include_str!("../../fixtures/v2_tweets.jsonl"),
        ];
        for line in lines.iter().flat_map(|text| text.lines()) {
            raw.push_line(raw.len() as u64 + 1, line.as_bytes());
        }
        let room = shingle_room(&raw);
        let batch = prepare(&preparer, &decoder, raw, None);
        let messages = batch
            .items
            .iter()
            .filter(|item| matches!(item, Item::Message(_)))
            .count();
        assert!(messages > 40, "{messages} messages");
        // More than the old 24 a line, so the room is what holds them.
        assert!(
            batch.shingles.len() > 24 * batch.items.len(),
            "{} shingles",
            batch.shingles.len()
        );
        assert!(batch.shingles.len() <= room);
        assert_eq!(batch.shingles.capacity(), room);
    }
}

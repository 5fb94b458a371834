//! Forgetting ids in bulk (`dedup-stream index forget`): a compliance batch
//! of deleted tweets, applied to an index at rest (a state file) or shared
//! (in Redis), without a stream to carry the notices.
//!
//! Each non-blank line names one id, in any of the shapes a user is likely
//! to hold: a bare id (`1234`, `"1234"`, or any other text, taken as a
//! string), or a JSON object read as the filter reads a line (a deletion
//! notice, v1.1 or v2; a tweet; a v2 batch compliance result such as
//! `{"id":"1234","action":"delete",…}`), whose id is found where a
//! message's or a notice's is. The ids go to the index store as removals
//! ([`Op::Remove`]), a few thousand per call, so that a million ids cost a
//! few hundred round trips to Redis, in the order they were read.

use std::fmt;
use std::io::BufRead;

use crate::engine::{Ask, IndexStore, Op, Sketch, Verdict};
use crate::error::{Error, InvalidLine, InvalidReason};
use crate::wire::lines::{Line, LineReader, is_blank};
use crate::wire::record::{Decoder, MessageId};

/// Ids sent to the index store per call.
pub const BATCH: usize = 4096;

/// What a run of [`forget`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Forgotten {
    /// Ids read.
    pub ids: u64,
    /// Of those, ids the index held (each now forgotten with every message
    /// indexed under it).
    pub held: u64,
    /// Lines that named no id (each reported to the caller).
    pub invalid: u64,
}

impl fmt::Display for Forgotten {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} ids read: {} held and forgotten, {} not held; {}",
            self.ids,
            self.held,
            self.ids - self.held,
            crate::pipeline::stats::counted(self.invalid, "invalid line", "invalid lines")
        )
    }
}

/// The id a line names (see the module documentation).
pub fn read_id(line: &[u8], decoder: &Decoder) -> Result<MessageId, InvalidReason> {
    let line = line.trim_ascii();
    if line.first() == Some(&b'{') {
        return decoder.decode_removal(line).map(|record| record.id);
    }
    let text = std::str::from_utf8(line).map_err(|e| InvalidReason::Utf8(e.valid_up_to()))?;
    if let Some(id) = MessageId::from_json(text) {
        return Ok(id);
    }
    // Bare text: the id is that text as a JSON string.
    let quoted = serde_json::to_string(text).map_err(|e| InvalidReason::Json(e.to_string()))?;
    MessageId::from_json(&quoted).ok_or_else(|| InvalidReason::BadId("the line".into()))
}

/// Reads ids from `input` (lines of at most `max_line_bytes`) and has
/// `store` forget each, in order; `invalid` hears of every line that names
/// no id. Fails only when reading fails or the store does.
pub fn forget<R: BufRead, S: IndexStore + ?Sized>(
    input: R,
    max_line_bytes: usize,
    decoder: &Decoder,
    store: &mut S,
    mut invalid: impl FnMut(InvalidLine),
) -> Result<Forgotten, Error> {
    let mut lines = LineReader::new(input, max_line_bytes);
    let mut done = Forgotten::default();
    let mut ids: Vec<MessageId> = Vec::with_capacity(BATCH);
    let mut verdicts = Vec::with_capacity(BATCH);
    let mut buf = Vec::new();
    loop {
        buf.clear();
        let next = lines.next_line(&mut buf).map_err(Error::Read)?;
        let line = lines.line_number();
        match next {
            None => break,
            Some(Line::TooLong) => {
                done.invalid += 1;
                invalid(InvalidLine {
                    line,
                    reason: InvalidReason::TooLong {
                        max: max_line_bytes,
                    },
                });
            }
            Some(Line::Content) if is_blank(&buf) => {}
            Some(Line::Content) => match read_id(&buf, decoder) {
                Ok(id) => ids.push(id),
                Err(reason) => {
                    done.invalid += 1;
                    invalid(InvalidLine { line, reason });
                }
            },
        }
        if ids.len() == BATCH {
            apply(store, &ids, &mut verdicts, &mut done)?;
            ids.clear();
        }
    }
    apply(store, &ids, &mut verdicts, &mut done)?;
    Ok(done)
}

/// Sends one batch of removals.
fn apply<S: IndexStore + ?Sized>(
    store: &mut S,
    ids: &[MessageId],
    verdicts: &mut Vec<Verdict>,
    done: &mut Forgotten,
) -> Result<(), Error> {
    if ids.is_empty() {
        return Ok(());
    }
    let asks: Vec<Ask<'_>> = ids
        .iter()
        .map(|id| Ask {
            id,
            sketch: Sketch {
                shingles: &[],
                band_keys: &[],
                set_fingerprint: 0,
                truncated: false,
            },
            op: Op::Remove,
            token: None,
            time: 0,
        })
        .collect();
    verdicts.clear();
    store.decide(&asks, verdicts)?;
    done.ids += ids.len() as u64;
    done.held += verdicts
        .iter()
        .filter(|v| matches!(v, Verdict::Deleted { held: true }))
        .count() as u64;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::Deduper;
    use crate::engine::config::EngineConfig;
    use crate::wire::record::FieldSpec;

    #[test]
    fn ids_come_bare_quoted_or_in_objects() {
        let decoder = Decoder::new(FieldSpec::default());
        let read = |line: &str| read_id(line.as_bytes(), &decoder);
        assert_eq!(read("1234 "), Ok(MessageId::Integer(1234)));
        assert_eq!(read("\"1234\""), Ok(MessageId::DigitString(1234)));
        assert_eq!(read("item-7"), Ok(MessageId::Raw("\"item-7\"".into())));
        assert_eq!(
            read(r#"{"id":"55","action":"delete","reason":"deleted"}"#),
            Ok(MessageId::DigitString(55))
        );
        assert_eq!(
            read(r#"{"delete":{"status":{"id":9,"id_str":"9","user_id":1}}}"#),
            Ok(MessageId::DigitString(9))
        );
        assert!(read(r#"{"action":"delete"}"#).is_err());
        assert!(read("{not json").is_err());
    }

    #[test]
    fn forgets_every_id_and_counts_those_held() {
        let mut deduper = Deduper::new(EngineConfig::default()).unwrap();
        for (n, text) in [
            (
                1,
                "the river burst its banks overnight and the old mill road is closed",
            ),
            (
                2,
                "keynote starts now at rustconf, come see the new borrow checker",
            ),
            (
                3,
                "a third story about nothing the other two are about at all",
            ),
        ] {
            deduper.check_text(MessageId::Integer(n), text);
        }
        let input = "1\n\n\"3\"\n{\"no\":\"id\"}\n99\n1\n";
        let mut bad = Vec::new();
        let decoder = Decoder::new(FieldSpec::default());
        let done = forget(input.as_bytes(), 1024, &decoder, &mut deduper, |i| {
            bad.push(i.line)
        })
        .unwrap();
        assert_eq!(
            done,
            Forgotten {
                ids: 4,
                held: 2,
                invalid: 1
            }
        );
        assert_eq!(bad, [4]);
        let left: Vec<&MessageId> = deduper.index().iter_lru_first().map(|e| &e.id).collect();
        assert_eq!(left, [&MessageId::Integer(2)]);
        assert_eq!(
            done.to_string(),
            "4 ids read: 2 held and forgotten, 2 not held; 1 invalid line"
        );
    }
}

//! The `dedup_op` member: what a message asks of the shared index.
//!
//! A message may carry a top-level `"dedup_op"` member:
//!
//! - absent, `null` or `"check"`: decide, and index the message if it is new
//!   (what the filter does to every line);
//! - `"query"`: decide without indexing anything or refreshing what it
//!   matches, for consumers that ask before they commit;
//! - `"remove"`: forget every indexed message of the line's id (found where
//!   a message's id is; the line needs no text), answered
//!   `{"status":"deleted","held":true|false}` (see `docs/deletions.md`);
//! - anything else: the line is answered with an error, so a typo never
//!   silently indexes a message.
//!
//! Reading it must cost nothing on the lines that do not carry it, which is
//! nearly all of them. [`read`] first looks for the bytes `"dedup_op"` in the
//! line (a SIMD substring search); only a line that contains them is parsed
//! again, properly, for its top-level members, so the name inside a text or a
//! nested object is not mistaken for the member. The member name must be
//! written plainly (as every JSON encoder writes it), not with `\u` escapes.
//!
//! [`batch::prepare`](crate::wire::batch::prepare) takes an
//! [`OpReader`](crate::wire::batch::OpReader), but that signature cannot report a
//! bad value; the server instead runs [`apply`] on each prepared batch,
//! which sets each message's [`Op`] and turns a bad value into an invalid
//! line in place, keeping the batch's order.

use std::borrow::Cow;
use std::sync::LazyLock;

use memchr::memmem;
use serde::Deserialize;
use serde_json::value::RawValue;

use crate::error::{InvalidLine, InvalidReason};
use crate::wire::batch::{Item, Op, PreparedBatch, PreparedMessage, RawLine};
use crate::wire::record::Decoder;

/// The member's name, as it appears in the line's bytes, with its search
/// tables built once.
static NEEDLE: LazyLock<memmem::Finder<'static>> =
    LazyLock::new(|| memmem::Finder::new(b"\"dedup_op\""));

/// The one member looked for; every other member is skipped unbuilt.
#[derive(Deserialize)]
struct OpOnly<'a> {
    #[serde(borrow, default)]
    dedup_op: Option<&'a RawValue>,
}

/// Reads a line's `dedup_op` request.
pub fn read(line: &[u8]) -> Result<Op, InvalidReason> {
    if NEEDLE.find(line).is_none() {
        return Ok(Op::Check);
    }
    let found: OpOnly<'_> = serde_json::from_slice(line).map_err(|e| {
        // The record was decoded already: the line is JSON, and what can
        // be wrong here is a repeated member, which is refused rather than
        // guessed (a typo must never index a message).
        if e.to_string().starts_with("duplicate field") {
            InvalidReason::BadOp("more than one dedup_op member".into())
        } else {
            InvalidReason::Json(e.to_string())
        }
    })?;
    let Some(raw) = found.dedup_op else {
        return Ok(Op::Check);
    };
    // The value as text, escapes resolved ("qu\u0065ry" is "query").
    let value = serde_json::from_str::<Cow<'_, str>>(raw.get()).ok();
    match (raw.get(), value.as_deref()) {
        ("null", _) | (_, Some("check")) => Ok(Op::Check),
        (_, Some("query")) => Ok(Op::Query),
        (_, Some("remove")) => Ok(Op::Remove),
        (other, _) => {
            let mut shown: String = other.chars().take(40).collect();
            if shown.len() < other.len() {
                shown.push('…');
            }
            Err(InvalidReason::BadOp(shown))
        }
    }
}

/// Sets the [`Op`] of every message of a prepared batch from its line; a
/// message with a bad `dedup_op` becomes an invalid line. A line refused
/// for want of a text is read again if it asks for a removal, which needs
/// only an id (`decoder` reads it).
pub fn apply(batch: &mut PreparedBatch, decoder: &Decoder) {
    for i in 0..batch.items.len() {
        if let Item::Invalid(InvalidLine {
            line: number,
            reason: InvalidReason::NoText(_),
        }) = &batch.items[i]
            && let Some(RawLine::Content { range, .. }) = batch.raw.lines.get(i)
        {
            let bytes = &batch.raw.bytes[range.clone()];
            if read(bytes) == Ok(Op::Remove) {
                batch.items[i] = match decoder.decode_removal(bytes) {
                    Ok(record) => {
                        Item::Message(PreparedMessage::removal(*number, range.clone(), record))
                    }
                    Err(reason) => Item::Invalid(InvalidLine {
                        line: *number,
                        reason,
                    }),
                };
            }
            continue;
        }
        let Item::Message(message) = &batch.items[i] else {
            continue;
        };
        // A deletion notice stays one, whatever it asks.
        if message.op == Op::Remove {
            continue;
        }
        match read(batch.line(message)) {
            Ok(op) => {
                if let Item::Message(message) = &mut batch.items[i] {
                    message.op = op;
                }
            }
            Err(reason) => {
                let line = message.number;
                batch.items[i] = Item::Invalid(InvalidLine { line, reason });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_removal_needs_an_id_and_no_text() {
        let preparer =
            crate::engine::Preparer::new(&crate::engine::config::EngineConfig::default());
        let decoder = Decoder::new(crate::wire::record::FieldSpec::default());
        let mut raw = crate::wire::batch::RawBatch::default();
        for line in [
            r#"{"dedup_op":"remove","id_str":"7"}"#,
            r#"{"dedup_op":"remove","id":7,"text":"with a text too"}"#,
            r#"{"dedup_op":"remove"}"#,
            r#"{"id":7}"#,
            r#"{"delete":{"status":{"id":7}},"dedup_op":"query"}"#,
        ] {
            raw.push_line(raw.len() as u64 + 1, line.as_bytes());
        }
        let mut batch = crate::wire::batch::prepare(&preparer, &decoder, raw, None);
        apply(&mut batch, &decoder);
        let ops: Vec<Option<Op>> = batch
            .items
            .iter()
            .map(|item| match item {
                Item::Message(m) => Some(m.op),
                Item::Invalid(_) => None,
            })
            .collect();
        assert_eq!(
            ops,
            [
                Some(Op::Remove),
                Some(Op::Remove),
                None,
                None,
                Some(Op::Remove)
            ]
        );
        assert!(matches!(
            &batch.items[2],
            Item::Invalid(InvalidLine {
                reason: InvalidReason::NoId(_),
                ..
            })
        ));
    }

    #[test]
    fn reads_the_top_level_member_only() {
        assert_eq!(read(br#"{"id":1,"text":"a"}"#), Ok(Op::Check));
        assert_eq!(
            read(br#"{"id":1,"dedup_op":"query","text":"a"}"#),
            Ok(Op::Query)
        );
        assert_eq!(read(br#"{"dedup_op" : "check","id":1}"#), Ok(Op::Check));
        assert_eq!(read(br#"{"dedup_op":null,"id":1}"#), Ok(Op::Check));
        assert_eq!(read(br#"{"dedup_op":"qu\u0065ry","id":1}"#), Ok(Op::Query));
        // In a text, or nested: not the member.
        assert_eq!(
            read(br#"{"id":1,"text":"say \"dedup_op\":\"query\""}"#),
            Ok(Op::Check)
        );
        assert_eq!(
            read(br#"{"id":1,"meta":{"dedup_op":"query"},"text":"a"}"#),
            Ok(Op::Check)
        );
    }

    #[test]
    fn a_bad_value_is_an_error_not_a_check() {
        for line in [
            &br#"{"id":1,"dedup_op":"qeury"}"#[..],
            br#"{"id":1,"dedup_op":1}"#,
            br#"{"id":1,"dedup_op":"query","dedup_op":"check"}"#,
        ] {
            assert!(read(line).is_err(), "{}", String::from_utf8_lossy(line));
        }
        // A repeated member is refused as such, not as invalid JSON.
        assert_eq!(
            read(br#"{"id":1,"dedup_op":"query","dedup_op":"query"}"#),
            Err(InvalidReason::BadOp("more than one dedup_op member".into()))
        );
        let long = format!(r#"{{"id":1,"dedup_op":"{}"}}"#, "x".repeat(100));
        let Err(InvalidReason::BadOp(shown)) = read(long.as_bytes()) else {
            panic!("not refused");
        };
        assert!(shown.chars().count() <= 41);
    }
}

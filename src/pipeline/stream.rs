//! The engine as an async [`Stream`] adapter, for Rust programs that embed
//! it instead of running the filter or the sidecar.
//!
//! [`dedup`] wraps any stream of JSON lines (anything that is
//! `AsRef<[u8]>`: `Vec<u8>`, `String`, `Bytes`...) and yields one item per
//! input item, in order: the message tagged exactly as the filter writes it,
//! or the reason it is invalid. A deletion notice (v1.1 or v2, see
//! `docs/deletions.md`) makes the engine forget its id, and comes out
//! tagged `{"status":"deleted","held":…}`.
//!
//! ```
//! use dedup_stream::{Deduper, EngineConfig, FieldSpec, Verdict};
//! use futures::StreamExt;
//!
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! let lines = futures::stream::iter([
//!     r#"{"id":1,"text":"Flooding closes the coastal highway north of the city"}"#,
//!     r#"{"id":2,"text":"RT @news: Flooding closes the coastal highway north of the city"}"#,
//!     r#"not json"#,
//! ]);
//! let deduper = Deduper::new(EngineConfig::default())?;
//! let mut tagged = dedup_stream::pipeline::stream::dedup(lines, deduper, FieldSpec::default());
//! let first = tagged.next().await.unwrap().unwrap();
//! assert_eq!(first.verdict, Verdict::New);
//! let second = tagged.next().await.unwrap().unwrap();
//! assert!(second.verdict.is_duplicate());
//! assert!(second.line.ends_with(b"\"similarity\":1,\"cluster\":1}}\n"));
//! assert_eq!(tagged.next().await.unwrap().unwrap_err().line, 3);
//! assert!(tagged.next().await.is_none());
//! // The engine comes back, with everything it indexed (to save it, say).
//! assert_eq!(tagged.into_deduper().index().len(), 1);
//! # Ok::<(), dedup_stream::ConfigError>(())
//! # }).unwrap();
//! ```
//!
//! The work runs on the task that polls the stream (a few microseconds per
//! message). At high rates, poll it from its own task, or use the
//! [`pipeline`](crate::pipeline), which prepares on several threads.

use std::pin::Pin;
use std::task::{Context, Poll};

use futures::{Stream, StreamExt};

use crate::engine::{Deduper, Scratch, Verdict};
use crate::error::{InvalidLine, InvalidReason};
use crate::wire::record::{Decoder, FieldSpec, MessageId, write_tagged};

/// A message with its verdict.
#[derive(Clone, Debug, PartialEq)]
pub struct Tagged {
    /// 1-based position of the message in the input stream.
    pub number: u64,
    /// The message's id.
    pub id: MessageId,
    /// What the engine decided.
    pub verdict: Verdict,
    /// The message with its verdict spliced in, newline included, exactly as
    /// the filter writes it.
    pub line: Vec<u8>,
}

/// Tags every message of `input` (see the [module documentation](self)).
pub fn dedup<S>(input: S, deduper: Deduper, fields: FieldSpec) -> Dedup<S> {
    Dedup {
        input,
        deduper,
        decoder: Decoder::new(fields),
        scratch: Scratch::default(),
        number: 0,
    }
}

/// The stream [`dedup`] returns.
#[derive(Debug)]
pub struct Dedup<S> {
    /// The messages.
    input: S,
    /// The engine; given back by [`Dedup::into_deduper`].
    deduper: Deduper,
    /// Finds the id and text.
    decoder: Decoder,
    /// Reused buffers of the preparing stages.
    scratch: Scratch,
    /// Items taken from `input` so far.
    number: u64,
}

impl<S> Dedup<S> {
    /// The engine (to read its counters or index).
    pub fn deduper(&self) -> &Deduper {
        &self.deduper
    }

    /// Ends the stream and gives the engine back.
    pub fn into_deduper(self) -> Deduper {
        self.deduper
    }

    fn tag(&mut self, line: &[u8]) -> Result<Tagged, InvalidLine> {
        let line = line.strip_suffix(b"\n").unwrap_or(line);
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let invalid = |reason| InvalidLine {
            line: self.number,
            reason,
        };
        let record = self.decoder.decode(line).map_err(invalid)?;
        if record.deletion {
            // A deletion notice: its id is forgotten, the notice tagged.
            let verdict = Verdict::Deleted {
                held: self.deduper.remove(&record.id) > 0,
            };
            let mut out = Vec::with_capacity(line.len() + 40);
            write_tagged(&mut out, line, record.splice, |o| verdict.write_json(o));
            return Ok(Tagged {
                number: self.number,
                id: record.id,
                verdict,
                line: out,
            });
        }
        let sketch = self
            .deduper
            .preparer()
            .sketch(&record.text, &record.urls, &mut self.scratch);
        if sketch.as_sketch().shingles.is_empty() && self.deduper.preparer().refuses_empty() {
            return Err(invalid(InvalidReason::NothingToCompare));
        }
        // Its time, for a window: its created_at, or now.
        let time = record
            .created_at_millis()
            .unwrap_or_else(crate::wire::timestamp::now_millis);
        let verdict = self
            .deduper
            .check_at(record.id.clone(), sketch.as_sketch(), time);
        let mut out = Vec::with_capacity(line.len() + 80);
        write_tagged(&mut out, line, record.splice, |out| verdict.write_json(out));
        Ok(Tagged {
            number: self.number,
            id: record.id,
            verdict,
            line: out,
        })
    }
}

impl<S> Stream for Dedup<S>
where
    S: Stream + Unpin,
    S::Item: AsRef<[u8]>,
{
    type Item = Result<Tagged, InvalidLine>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        match this.input.poll_next_unpin(cx) {
            Poll::Ready(Some(line)) => {
                this.number += 1;
                Poll::Ready(Some(this.tag(line.as_ref())))
            }
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.input.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::config::{EmptyText, EngineConfig};

    #[test]
    fn texts_with_nothing_to_compare_are_refused_when_the_engine_says_so() {
        let lines = [
            &b"{\"id\":1,\"text\":\"Flooding closes the coastal highway north of the city\"}"[..],
            b"{\"id\":2,\"text\":\"RT @news: https://t.co/abc\"}",
            b"{\"id\":3,\"text\":\"RT @x: Flooding closes the coastal highway north of the city\"}",
        ];
        let run = |empty_text| {
            let deduper = Deduper::new(EngineConfig {
                empty_text,
                ..EngineConfig::default()
            })
            .unwrap();
            let stream = dedup(futures::stream::iter(lines), deduper, FieldSpec::default());
            futures::executor::block_on(stream.collect::<Vec<_>>())
        };
        let refused = run(EmptyText::Invalid);
        assert_eq!(
            refused[1],
            Err(InvalidLine {
                line: 2,
                reason: InvalidReason::NothingToCompare
            })
        );
        assert!(refused[2].as_ref().unwrap().verdict.is_duplicate());
        let tagged = run(EmptyText::New);
        assert_eq!(tagged[1].as_ref().unwrap().verdict, Verdict::New);
    }

    #[test]
    fn a_deletion_notice_forgets_its_id_and_passes_through_tagged() {
        let lines = [
            r#"{"id":1,"text":"Flooding closes the coastal highway north of the city"}"#,
            r#"{"delete":{"status":{"id":1,"id_str":"1","user_id":5,"user_id_str":"5"},"timestamp_ms":"1"}}"#,
            r#"{"id":2,"text":"Flooding closes the coastal highway north of the city"}"#,
            r#"{"data":{"delete":{"tweet":{"id":"3","author_id":"5"},"event_at":"2022-12-23T12:34:56.789Z"}}}"#,
        ];
        let deduper = Deduper::new(EngineConfig::default()).unwrap();
        let stream = dedup(futures::stream::iter(lines), deduper, FieldSpec::default());
        let tagged: Vec<Tagged> = futures::executor::block_on(stream.collect::<Vec<_>>())
            .into_iter()
            .map(Result::unwrap)
            .collect();
        assert_eq!(tagged[1].verdict, Verdict::Deleted { held: true });
        assert!(
            tagged[1].line.ends_with(
                b"\"timestamp_ms\":\"1\"},\"dedup\":{\"status\":\"deleted\",\"held\":true}}\n"
            ),
            "{}",
            String::from_utf8_lossy(&tagged[1].line)
        );
        assert_eq!(tagged[2].verdict, Verdict::New, "1 is forgotten");
        assert_eq!(tagged[3].verdict, Verdict::Deleted { held: false });
        assert_eq!(tagged[3].id, MessageId::DigitString(3));
    }
}

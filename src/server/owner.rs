//! The engine's owner: one thread that holds the [`Deduper`] and decides
//! every message of every connection, in the order batches reach it.
//!
//! Connections send it prepared batches over one bounded channel. Each batch
//! comes with an [`OwnedPermit`] on its connection's reply queue, reserved
//! before the batch was sent: the owner hands the replies over without ever
//! waiting, so a client that does not read its replies can only stop its own
//! connection from sending more, never the owner nor the other connections.
//!
//! Snapshots are taken here too, between two batches, so a state file is
//! always a consistent picture of the index; and the journal is written
//! here, before each batch's replies are handed over.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use tokio::sync::mpsc::{self, OwnedPermit};
use tokio::sync::oneshot;

use crate::engine::{IndexStore, Verdict};
use crate::state::journal::{Journal, SnapshotId};
use crate::state::snapshot::Saveable;
use crate::wire::batch::{self, Item, Op, PreparedBatch};

use super::Reply;
use super::metrics::Metrics;

/// What the owner is asked to do.
pub(crate) enum Request {
    /// Decide a batch and hand its replies to its connection.
    Batch(Job),
    /// Encode the index as a state file's bytes; `None` when no check was
    /// decided since the last snapshot (the file on disk is current).
    Snapshot(oneshot::Sender<Option<Vec<u8>>>),
    /// The state file of these bytes was written: the journal can drop
    /// what it holds.
    Saved(SnapshotId),
    /// Sync the journal if a second has passed (`--fsync everysec`).
    Tick,
}

/// One connection's prepared batch.
pub(crate) struct Job {
    /// The lines, prepared, in the connection's order.
    pub batch: PreparedBatch,
    /// A reserved slot on the connection's reply queue.
    pub reply: OwnedPermit<Vec<u8>>,
    /// When the batch's lines were read off the connection (for the latency
    /// histogram).
    pub received: Instant,
}

/// Runs until every sender is gone, then gives the index store (and the
/// journal) back. The journal, when there is one, gets every batch's
/// checks before the batch's replies go out.
pub(crate) fn run<S: IndexStore + Saveable>(
    mut store: S,
    mut journal: Option<Journal>,
    mut requests: mpsc::Receiver<Request>,
    metrics: Arc<Metrics>,
    reply: Reply,
) -> (S, Option<Journal>) {
    // Checks and removals decided since the last snapshot (queries change
    // nothing).
    let mut checks_since_snapshot = 0u64;
    let mut verdicts = Vec::new();
    while let Some(request) = requests.blocking_recv() {
        match request {
            Request::Batch(job) => {
                let out = decide(&mut store, &job.batch, reply, &metrics, &mut verdicts);
                if let Some(journal) = journal.as_mut() {
                    journal.append(&job.batch);
                }
                checks_since_snapshot += job
                    .batch
                    .items
                    .iter()
                    .filter(|item| matches!(item, Item::Message(m) if m.op != Op::Query))
                    .count() as u64;
                metrics.record_index(store.stats());
                metrics
                    .check_latency
                    .observe_n(job.received.elapsed(), job.batch.items.len() as u64);
                // Never waits: the slot was reserved. If the connection is
                // gone the replies are dropped with its queue.
                job.reply.send(out);
            }
            Request::Snapshot(done) if checks_since_snapshot == 0 => {
                let _ = done.send(None);
            }
            Request::Snapshot(done) => {
                checks_since_snapshot = 0;
                let started = Instant::now();
                let bytes = store.encode_snapshot();
                if let Some(bytes) = &bytes {
                    if let Some(journal) = journal.as_mut() {
                        journal.mark(SnapshotId::of(bytes));
                    }
                    tracing::debug!(
                        entries = store.stats().len,
                        bytes = bytes.len(),
                        millis = started.elapsed().as_millis() as u64,
                        "index encoded for a snapshot"
                    );
                }
                let _ = done.send(bytes);
            }
            Request::Saved(id) => {
                if let Some(journal) = journal.as_mut() {
                    journal.saved(id);
                }
            }
            Request::Tick => {
                if let Some(journal) = journal.as_mut() {
                    journal.tick();
                }
            }
        }
    }
    (store, journal)
}

/// Decides every message of a batch, in order, and writes one reply line
/// per line.
fn decide<S: IndexStore>(
    store: &mut S,
    batch: &PreparedBatch,
    reply: Reply,
    metrics: &Metrics,
    verdicts: &mut Vec<Verdict>,
) -> Vec<u8> {
    let mut out = Vec::with_capacity(match reply {
        Reply::Tagged => batch.raw.bytes.len() + batch.items.len() * 64,
        Reply::Verdict => batch.items.len() * 96,
    });
    verdicts.clear();
    if let Err(e) = store.decide(&batch::asks(batch, usize::MAX), verdicts) {
        // Only a store that gave up waiting for Redis gets here (at
        // shutdown): every line is answered with the reason, none with a
        // verdict.
        tracing::warn!(error = %e, "a batch could not be decided");
        for item in &batch.items {
            let line = match item {
                Item::Invalid(invalid) => invalid.line,
                Item::Message(message) => message.number,
            };
            write_error(&mut out, &e.to_string(), line);
        }
        return out;
    }
    let mut verdicts = verdicts.iter();
    // One per verdict when the store explains them (--explain).
    let mut explanations = store.explanations().iter();
    // [check new, check duplicate, query new, query duplicate, invalid,
    // remove unknown, remove held]
    let mut counts = [0u64; 7];
    // For the live page: (cluster, id) of each duplicate checked.
    let mut clusters = Vec::new();
    for item in &batch.items {
        match item {
            Item::Invalid(invalid) => {
                counts[4] += 1;
                tracing::debug!(line = invalid.line, "invalid line: {}", invalid.reason);
                write_error(&mut out, &invalid.reason.to_string(), invalid.line);
            }
            Item::Message(message) => {
                let Some(verdict) = verdicts.next() else {
                    write_error(&mut out, "internal error: no verdict", message.number);
                    continue;
                };
                let slot = match (message.op, verdict) {
                    (_, Verdict::Deleted { held }) => 5 + usize::from(*held),
                    (Op::Query, _) => 2 + usize::from(verdict.is_duplicate()),
                    _ => usize::from(verdict.is_duplicate()),
                };
                counts[slot] += 1;
                if let (Op::Check, Verdict::Duplicate(m)) = (message.op, verdict) {
                    clusters.push((&m.cluster, &message.id));
                }
                if verdict.is_repeat() {
                    metrics.repeats.fetch_add(1, Ordering::Relaxed);
                }
                let explanation = explanations.next();
                match reply {
                    Reply::Tagged => {
                        batch::write_explained(&mut out, batch, message, verdict, explanation)
                    }
                    Reply::Verdict => write_verdict(&mut out, &message.id, verdict, explanation),
                }
            }
        }
    }
    if !clusters.is_empty() {
        metrics.live.note(clusters);
    }
    for (counter, n) in [
        &metrics.checks_new,
        &metrics.checks_duplicate,
        &metrics.queries_new,
        &metrics.queries_duplicate,
        &metrics.invalid_lines,
        &metrics.removals_unknown,
        &metrics.removals_held,
    ]
    .into_iter()
    .zip(counts)
    {
        if n > 0 {
            counter.fetch_add(n, Ordering::Relaxed);
        }
    }
    out
}

/// `{"id":ID,"dedup":VERDICT}` and a newline.
fn write_verdict(
    out: &mut Vec<u8>,
    id: &crate::wire::record::MessageId,
    verdict: &Verdict,
    explanation: Option<&crate::engine::Explanation>,
) {
    out.extend_from_slice(b"{\"id\":");
    id.write_json(out);
    out.extend_from_slice(b",\"dedup\":");
    verdict.write_json_explained(explanation, out);
    out.extend_from_slice(b"}\n");
}

/// `{"error":"...","line":N}` and a newline.
pub(crate) fn write_error(out: &mut Vec<u8>, message: &str, line: u64) {
    out.extend_from_slice(b"{\"error\":");
    // Serialising a string into a Vec cannot fail.
    let _ = serde_json::to_writer(&mut *out, message);
    out.extend_from_slice(b",\"line\":");
    out.extend_from_slice(itoa::Buffer::new().format(line).as_bytes());
    out.extend_from_slice(b"}\n");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::Match;
    use crate::wire::record::MessageId;

    #[test]
    fn reply_lines_are_json() {
        let mut out = Vec::new();
        write_error(&mut out, "not valid JSON: \"x\"\n", 7);
        write_verdict(&mut out, &MessageId::DigitString(12), &Verdict::New, None);
        write_verdict(
            &mut out,
            &MessageId::Integer(3),
            &Verdict::Duplicate(Match {
                of: MessageId::Raw("\"a\"".into()),
                similarity: 0.5,
                cluster: MessageId::Integer(1),
            }),
            None,
        );
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(
            lines[0],
            serde_json::json!({"error": "not valid JSON: \"x\"\n", "line": 7})
        );
        assert_eq!(
            text.lines().nth(1),
            Some(r#"{"id":"12","dedup":{"status":"new"}}"#)
        );
        assert_eq!(
            lines[2],
            serde_json::json!({"id": 3, "dedup": {"status": "duplicate", "duplicate_of": "a", "similarity": 0.5, "cluster": 1}})
        );
    }
}

//! `dedup-stream consume`: a worker of a Redis Streams consumer group.
//!
//! ```text
//!  IN ──XREADGROUP / XAUTOCLAIM──▶ prepare ──▶ index store ──▶ one script: XADD, then XACK ──▶ OUT
//!       (a batch of entries)      (sketch)    (one call,       (only what is still pending       (or OUT:invalid)
//!                                              atomic)          is written; types checked first)
//! ```
//!
//! - Each entry's message is the JSON in one of its fields (`--field`,
//!   default `json`), tagged exactly as the filter tags a line, and
//!   appended to the output stream under the same field.
//! - **Exactly once in the output.** The tagged message is written and the
//!   entry acknowledged in one Lua script, in that order, and only if the
//!   entry was still pending: when two workers finish the same entry (one was slow, and the
//!   other claimed it), the first writes and the second writes nothing. An
//!   entry whose worker died before that script is read again (by its
//!   consumer on restart, or claimed by another after `--claim-idle`), and
//!   the index answers it from its memo: the verdict it got the first time,
//!   never "a duplicate of itself".
//! - A message is read as the filter reads a line: a leading UTF-8
//!   byte-order mark is skipped, and one longer than `--max-line-bytes` is
//!   refused (dead-lettered without its bytes).
//! - Malformed entries (no such field, not a JSON object with an id and a
//!   text) are acknowledged, counted, reported on stderr, and appended to
//!   the dead-letter stream with the reason: never retried forever.
//! - With `--output -` the tagged lines go to a writer (stdout) and are
//!   flushed before the entries are acknowledged: at least once, since a
//!   line can be written and its worker die before the acknowledgement.
//!   They are written in pieces of whole lines of at most `PIPE_BUF`
//!   bytes, so a worker killed mid-batch leaves no torn line.
//! - **Never acknowledged without its output.** Redis does not undo a
//!   script that fails halfway, so the script checks that the keys it
//!   writes are streams (or absent) before writing anything: an output key
//!   of another type stops the worker with
//!   [`StoreError::NotAStream`] (at
//!   its start, or at the batch that meets it), and the entries stay
//!   pending.
//! - A stop request (SIGTERM) finishes the batch in hand, acknowledges it
//!   and returns.

use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use redis::{ConnectionLike, RedisResult, Script, Value};

use crate::engine::{IndexStore, Preparer};
use crate::error::{Error, InvalidReason, StoreError};
use crate::metrics::Metrics;
use crate::pipeline::Emit;
use crate::queue_batch::{self, Payload};
use crate::redis_index::{Link, RetryError};
use crate::wire::record::{Decoder, FieldSpec};

/// Default field of an entry that holds the message.
pub const DEFAULT_FIELD: &str = "json";
/// Default time an entry may stay pending on a consumer before another
/// claims it.
pub const DEFAULT_CLAIM_IDLE: Duration = Duration::from_secs(60);
/// Default entries read at a time.
pub const DEFAULT_BATCH: usize = 256;
/// Longest wait for new entries before looking around (stop requests,
/// entries to claim).
const BLOCK: Duration = Duration::from_millis(1000);
/// How often progress is logged.
const PROGRESS_EVERY: Duration = Duration::from_secs(10);

/// Where tagged messages go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Output {
    /// Appended to this stream, atomically with the acknowledgement.
    Stream(String),
    /// Written as lines to the writer given to [`run`].
    Lines,
}

/// How the worker runs (the engine's settings are in the [`Preparer`] and
/// the index store).
#[derive(Clone, Debug)]
pub struct ConsumeConfig {
    /// The stream read.
    pub stream: String,
    /// The consumer group (created at `0` if missing).
    pub group: String,
    /// This worker's name in the group.
    pub consumer: String,
    /// Where tagged messages go.
    pub output: Output,
    /// Where malformed entries go.
    pub invalid_stream: String,
    /// The entry field that holds the message's JSON.
    pub field: String,
    /// Which verdicts are written.
    pub emit: Emit,
    /// Where the id and text are in a message.
    pub fields: FieldSpec,
    /// Entries pending longer than this on another consumer are claimed.
    pub claim_idle: Duration,
    /// Create the stream if missing, rather than wait for it.
    pub create: bool,
    /// Consumers holding nothing and idle this long are removed from the
    /// group.
    pub forget_idle_consumers: Duration,
    /// Entries read at a time.
    pub batch: usize,
    /// Longest message, in bytes (`--max-line-bytes`): a longer one is
    /// dead-lettered, as the filter refuses such a line.
    pub max_line_bytes: usize,
}

/// What a run did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ConsumeSummary {
    /// Entries read (claimed ones included).
    pub read: u64,
    /// Of those, claimed from consumers that went quiet.
    pub claimed: u64,
    /// Messages tagged new.
    pub new: u64,
    /// Messages tagged duplicate.
    pub duplicates: u64,
    /// Deletion notices, passed on tagged (their ids forgotten).
    pub deletions: u64,
    /// Entries sent to the dead-letter stream.
    pub invalid: u64,
    /// Entries acknowledged.
    pub acked: u64,
}

impl std::fmt::Display for ConsumeSummary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} entries read ({} claimed): {} new, {} duplicates, {} invalid; {} acknowledged",
            self.read, self.claimed, self.new, self.duplicates, self.invalid, self.acked
        )?;
        if self.deletions > 0 {
            write!(f, "; {} deletion notices", self.deletions)?;
        }
        Ok(())
    }
}

/// One entry read from the stream.
#[derive(Debug)]
pub(crate) struct Entry {
    pub(crate) id: String,
    /// The message field's value, if the entry has one.
    pub(crate) message: Option<Vec<u8>>,
    /// Deleted from the stream while it was pending: there is nothing to
    /// decide, only to acknowledge.
    pub(crate) deleted: bool,
}

/// What becomes of an entry once decided.
enum Outcome {
    /// Acknowledge it and append this to the output stream.
    Output(Vec<u8>),
    /// Acknowledge it only (not emitted, or written as a line already).
    Ack,
    /// Acknowledge it and send it to the dead-letter stream.
    Dead { reason: String, message: Vec<u8> },
    /// Acknowledge it and send it to the dead-letter stream with every
    /// field it has (it has no `--field`: its other fields are all there is
    /// to see what it was).
    DeadWithFields { reason: String },
}

/// Writes a batch's output and acknowledges it, entry by entry, only for
/// entries still pending: see the module documentation.
///
/// Redis does not undo a script that fails halfway, so the order matters:
/// the keys' types are checked before anything is written (a key of
/// another type would fail the `XADD`), and each entry's output is
/// appended before the entry is acknowledged. Whatever fails, an entry is
/// never acknowledged without its output: at worst it stays pending and is
/// read again, and the index's memo gives it the same verdict.
const ACK_SCRIPT: &str = r"
for k = 1, 3 do
  local t = redis.call('TYPE', KEYS[k])['ok']
  if t ~= 'stream' and t ~= 'none' then
    return redis.error_reply('NOTSTREAM ' .. k .. ' ' .. t)
  end
end
local acked = {}
for i = 3, #ARGV, 4 do
  local id, kind = ARGV[i], ARGV[i + 1]
  if #redis.call('XPENDING', KEYS[1], ARGV[1], id, id, 1) == 1 then
    if kind == 'o' then
      redis.call('XADD', KEYS[2], '*', ARGV[2], ARGV[i + 2])
    elseif kind == 'd' then
      redis.call('XADD', KEYS[3], '*', 'source', id, 'error', ARGV[i + 3], ARGV[2], ARGV[i + 2])
    elseif kind == 'm' then
      local dead = {'source', id, 'error', ARGV[i + 3]}
      local entry = redis.call('XRANGE', KEYS[1], id, id)
      if #entry == 1 then
        for _, v in ipairs(entry[1][2]) do dead[#dead + 1] = v end
      end
      redis.call('XADD', KEYS[3], '*', unpack(dead))
    end
    redis.call('XACK', KEYS[1], ARGV[1], id)
    acked[#acked + 1] = '1'
  else
    acked[#acked + 1] = '0'
  end
end
return table.concat(acked)
";

/// The worker's state between batches.
struct Worker<'a, S> {
    config: &'a ConsumeConfig,
    preparer: &'a Preparer,
    decoder: Decoder,
    store: &'a mut S,
    link: &'a mut Link,
    lines: Option<Box<dyn Write>>,
    metrics: &'a Metrics,
    ack: Script,
    summary: ConsumeSummary,
    stop: &'a AtomicBool,
    /// The last batch's entry ids, acknowledged: their remembered verdicts
    /// may go (see `process`).
    acked_tokens: Vec<String>,
    /// The link's count of connections when they were acknowledged.
    acked_on: u64,
}

/// Runs the worker until `stop` is set (or a fatal error): reads its own
/// pending entries first, then new ones, claiming entries idle on other
/// consumers every `claim_idle / 2`.
///
/// `lines` (for [`Output::Lines`]) should be unbuffered, each write one
/// `write(2)`: the lines are handed to it in pieces of whole lines.
pub fn run<S: IndexStore>(
    config: &ConsumeConfig,
    preparer: &Preparer,
    store: &mut S,
    link: &mut Link,
    lines: Option<Box<dyn Write>>,
    stop: &AtomicBool,
    metrics: &Arc<Metrics>,
) -> Result<ConsumeSummary, Error> {
    let mut worker = Worker {
        config,
        preparer,
        decoder: Decoder::new(config.fields.clone()),
        store,
        link,
        lines,
        metrics: metrics.as_ref(),
        ack: Script::new(ACK_SCRIPT),
        summary: ConsumeSummary::default(),
        stop,
        acked_tokens: Vec::new(),
        acked_on: 0,
    };
    worker.create_group(false)?;
    // An empty acknowledgement only checks the keys' types: a key that
    // cannot take the output stops the worker before it decides anything.
    worker.acknowledge(&[])?;
    let claim_every = (config.claim_idle / 2).max(Duration::from_millis(100));
    let mut last_claim: Option<Instant> = None;
    let mut claim_cursor = "0-0".to_string();
    let mut own_pending = true;
    let started = Instant::now();
    let mut last_report = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        if last_report.elapsed() >= PROGRESS_EVERY {
            last_report = Instant::now();
            let s = worker.summary;
            tracing::info!(
                read = s.read,
                per_second = (s.read as f64 / started.elapsed().as_secs_f64()).round(),
                duplicates = s.duplicates,
                claimed = s.claimed,
                invalid = s.invalid,
                acknowledged = s.acked,
                "consuming"
            );
        }
        if last_claim.is_none_or(|at| at.elapsed() >= claim_every) {
            let (next, entries, deleted) = worker.claim(&claim_cursor)?;
            if next == "0-0" {
                last_claim = Some(Instant::now());
                worker.forget_idle_consumers();
            }
            claim_cursor = next;
            worker.summary.claimed += (entries.len() + deleted.len()) as u64;
            metrics
                .queue_claimed
                .fetch_add((entries.len() + deleted.len()) as u64, Ordering::Relaxed);
            if !entries.is_empty() || !deleted.is_empty() {
                tracing::info!(
                    entries = entries.len() + deleted.len(),
                    "claimed entries left pending by a consumer that went quiet"
                );
                worker.process(entries, deleted)?;
                continue;
            }
        }
        let entries = match worker.read(if own_pending { "0" } else { ">" }) {
            // The stop signal cut the blocked read short: a clean stop
            // (anything Redis handed out stays pending for this consumer).
            Err(Error::Store(StoreError::Unavailable(_))) if stop.load(Ordering::Relaxed) => {
                break;
            }
            read => read?,
        };
        if entries.is_empty() {
            own_pending = false;
            continue;
        }
        worker.process(entries, Vec::new())?;
    }
    Ok(worker.summary)
}

fn store_error(e: RetryError) -> Error {
    Error::Store(StoreError::from(e))
}

impl<S: IndexStore> Worker<'_, S> {
    /// Creates the consumer group at the start of the stream (and the
    /// stream with `--create`), first waiting for the stream without it.
    /// `gone`: the stream existed and was deleted under the worker.
    fn create_group(&mut self, gone: bool) -> Result<(), Error> {
        if !self.config.create {
            self.wait_for_stream(gone)?;
        }
        let (stream, group, create) = (&self.config.stream, &self.config.group, self.config.create);
        self.link
            .retry("creating the consumer group", |c, _| {
                let mut command = redis::cmd("XGROUP");
                command.arg("CREATE").arg(stream).arg(group).arg("0");
                if create {
                    command.arg("MKSTREAM");
                }
                let created: RedisResult<()> = command.query(c);
                match created {
                    Err(e) if e.code() == Some("BUSYGROUP") => Ok(()),
                    other => other,
                }
            })
            .map_err(store_error)
    }

    /// Whether the input stream exists.
    fn stream_exists(&mut self) -> Result<bool, Error> {
        let stream = &self.config.stream;
        self.link
            .retry("looking for the stream", |c, _| {
                redis::cmd("EXISTS").arg(stream).query(c)
            })
            .map_err(store_error)
    }

    /// Waits, saying so, until the input stream exists (or the worker is
    /// told to stop): a worker started before its producer, or on a
    /// misspelt name, must not create and consume an empty stream; and one
    /// whose stream was deleted (`DEL`, `FLUSHALL`) waits for it to come
    /// back, as for a missing one.
    fn wait_for_stream(&mut self, gone: bool) -> Result<(), Error> {
        let mut said = false;
        loop {
            if self.stream_exists()? {
                if said {
                    tracing::info!(stream = %self.config.stream, "the stream exists now");
                }
                return Ok(());
            }
            if !said {
                if gone {
                    tracing::warn!(
                        stream = %self.config.stream,
                        group = %self.config.group,
                        "the stream is gone from Redis (deleted, or flushed), and its consumer \
                         group with it: waiting for it to come back, then creating the group \
                         again at its start"
                    );
                } else {
                    tracing::warn!(
                        stream = %self.config.stream,
                        "the stream does not exist: waiting for it to appear (pass --create to \
                         create it empty instead)"
                    );
                }
                said = true;
            }
            if self.stop.load(Ordering::Relaxed) {
                return Err(Error::Store(StoreError::Unavailable(format!(
                    "stopped while waiting for the stream {:?} to exist",
                    self.config.stream
                ))));
            }
            std::thread::sleep(BLOCK);
        }
    }

    /// Removes from the group the consumers that hold no pending entry and
    /// have been idle for `--forget-idle-consumers` (workers that stopped;
    /// a restarted worker takes a new name): otherwise they pile up, one
    /// per restart. Best effort: a failure is only logged.
    fn forget_idle_consumers(&mut self) {
        let (stream, group) = (&self.config.stream, &self.config.group);
        let consumers: Result<Vec<std::collections::HashMap<String, Value>>, _> =
            self.link.once(|c| {
                redis::cmd("XINFO")
                    .arg("CONSUMERS")
                    .arg(stream)
                    .arg(group)
                    .query(c)
            });
        let Ok(consumers) = consumers else {
            return;
        };
        let limit = self.config.forget_idle_consumers.as_millis() as i64;
        for consumer in consumers {
            let number = |key: &str| match consumer.get(key) {
                Some(Value::Int(n)) => Some(*n),
                _ => None,
            };
            let Some(name) = consumer.get("name").cloned().and_then(text) else {
                continue;
            };
            if name == self.config.consumer
                || number("pending") != Some(0)
                || number("idle").is_none_or(|idle| idle < limit)
            {
                continue;
            }
            let removed: RedisResult<i64> = self.link.once(|c| {
                redis::cmd("XGROUP")
                    .arg("DELCONSUMER")
                    .arg(stream)
                    .arg(group)
                    .arg(&name)
                    .query(c)
            });
            if removed.is_ok() {
                tracing::info!(consumer = %name, "removed a consumer that held nothing and was idle");
            }
        }
    }

    /// The consumer group is gone (Redis restarted without persistence, or
    /// the group was destroyed): says so and makes it again, at the start
    /// of the stream as at the first start. What it had pending went with
    /// it.
    ///
    /// The stream itself may be what went (`DEL`, `FLUSHALL`; a read
    /// blocked on it ends with `UNBLOCKED`): it is then waited for, as a
    /// missing stream is at start, and read from its start when it comes
    /// back; with `--create` it is made again, empty.
    fn group_lost(&mut self) -> Result<(), Error> {
        let exists = self.stream_exists()?;
        if exists {
            tracing::warn!(
                stream = %self.config.stream,
                group = %self.config.group,
                "the consumer group is gone from Redis (restarted without persistence, or \
                 destroyed): creating it again at the start of the stream"
            );
        } else if self.config.create {
            tracing::warn!(
                stream = %self.config.stream,
                group = %self.config.group,
                "the stream is gone from Redis (deleted, or flushed), and its consumer group \
                 with it: creating both again, empty (--create)"
            );
        }
        self.create_group(!exists)
    }

    /// Reads a batch: `0` for this consumer's own pending entries, `>` for
    /// new ones (waiting a little when there are none).
    fn read(&mut self, from: &str) -> Result<Vec<Entry>, Error> {
        let config = self.config;
        // A blocked read must end well before the call times out.
        let block = BLOCK.min(self.link.timeout() / 2);
        let reply: Value = match self.link.retry("reading the stream", |c, _| {
            let mut cmd = redis::cmd("XREADGROUP");
            cmd.arg("GROUP")
                .arg(&config.group)
                .arg(&config.consumer)
                .arg("COUNT")
                .arg(config.batch);
            if from == ">" {
                cmd.arg("BLOCK").arg(block.as_millis() as u64);
            }
            cmd.arg("STREAMS").arg(&config.stream).arg(from).query(c)
        }) {
            // NOGROUP: the group (or the stream) is gone. UNBLOCKED: the
            // stream was deleted while this read waited on it.
            Err(RetryError::Failed(e)) if matches!(e.code(), Some("NOGROUP" | "UNBLOCKED")) => {
                self.group_lost()?;
                return Ok(Vec::new());
            }
            reply => reply.map_err(store_error)?,
        };
        let mut entries = Vec::new();
        if let Value::Array(streams) = reply {
            for stream in streams {
                if let Value::Array(parts) = stream
                    && let Some(Value::Array(items)) = parts.into_iter().nth(1)
                {
                    entries.extend(
                        items
                            .into_iter()
                            .filter_map(|item| parse_entry(item, &config.field)),
                    );
                }
            }
        }
        let n = entries.len() as u64;
        self.summary.read += n;
        self.metrics.queue_read.fetch_add(n, Ordering::Relaxed);
        Ok(entries)
    }

    /// Claims a page of entries idle on other consumers: the next cursor,
    /// the entries, and the ids of pending entries deleted from the stream.
    fn claim(&mut self, cursor: &str) -> Result<(String, Vec<Entry>, Vec<String>), Error> {
        let config = self.config;
        let reply: Value = match self.link.retry("claiming idle entries", |c, _| {
            redis::cmd("XAUTOCLAIM")
                .arg(&config.stream)
                .arg(&config.group)
                .arg(&config.consumer)
                .arg(config.claim_idle.as_millis() as u64)
                .arg(cursor)
                .arg("COUNT")
                .arg(config.batch)
                .query(c)
        }) {
            Err(RetryError::Failed(e)) if e.code() == Some("NOGROUP") => {
                self.group_lost()?;
                return Ok(("0-0".into(), Vec::new(), Vec::new()));
            }
            reply => reply.map_err(store_error)?,
        };
        let Value::Array(parts) = reply else {
            return Ok(("0-0".into(), Vec::new(), Vec::new()));
        };
        let mut parts = parts.into_iter();
        let next = parts.next().and_then(text).unwrap_or_else(|| "0-0".into());
        let entries: Vec<Entry> = match parts.next() {
            Some(Value::Array(items)) => items
                .into_iter()
                .filter_map(|item| parse_entry(item, &config.field))
                .collect(),
            _ => Vec::new(),
        };
        let deleted = match parts.next() {
            Some(Value::Array(ids)) => ids.into_iter().filter_map(text).collect(),
            _ => Vec::new(),
        };
        let n = entries.len() as u64;
        self.summary.read += n;
        self.metrics.queue_read.fetch_add(n, Ordering::Relaxed);
        Ok((next, entries, deleted))
    }

    /// Decides a batch, writes its output and acknowledges it.
    fn process(&mut self, entries: Vec<Entry>, deleted: Vec<String>) -> Result<(), Error> {
        // The last batch's tokens are forgotten (with this batch's append)
        // only if the connection its acknowledgement went over still
        // stands: one made again since may reach a Redis that restarted
        // and lost the acknowledgement (an `everysec` AOF loses its last
        // second), and an entry read again must find its remembered
        // verdict. (The index in Redis checks its own connection too.)
        if !self.acked_tokens.is_empty() {
            if self.link.connections() == self.acked_on {
                let tokens: Vec<&[u8]> = self.acked_tokens.iter().map(|t| t.as_bytes()).collect();
                self.store.forget(&tokens);
            } else {
                tracing::warn!(
                    stream = %self.config.stream,
                    entries = self.acked_tokens.len(),
                    "the connection to Redis was made again since entries were acknowledged \
                     (Redis may have restarted and lost the acknowledgements): their remembered \
                     verdicts are kept"
                );
            }
            self.acked_tokens.clear();
        }
        let payloads: Vec<Option<&[u8]>> = entries.iter().map(|e| e.message.as_deref()).collect();
        let tokens: Vec<&[u8]> = entries.iter().map(|e| e.id.as_bytes()).collect();
        let (decided, tally) = queue_batch::decide(
            (self.preparer, &self.decoder),
            &mut *self.store,
            &payloads,
            &tokens,
            self.config.max_line_bytes,
            self.metrics,
        )?;
        self.summary.new += tally.new;
        self.summary.duplicates += tally.duplicates;
        self.summary.deletions += tally.deletions;

        let mut outcomes = Vec::with_capacity(entries.len() + deleted.len());
        let mut text = Vec::new();
        for (at, entry) in entries.iter().enumerate() {
            let outcome = match decided.payload(at) {
                Payload::Missing if entry.deleted => Outcome::Ack,
                Payload::Missing => Outcome::DeadWithFields {
                    reason: format!("no field {:?}", self.config.field),
                },
                // A message over the limit is not copied: the dead letter
                // names its entry (`source`), which is still in the stream.
                Payload::Invalid(invalid) => Outcome::Dead {
                    reason: invalid.reason.to_string(),
                    message: match invalid.reason {
                        InvalidReason::TooLong { .. } => Vec::new(),
                        _ => entry.message.clone().unwrap_or_default(),
                    },
                },
                Payload::Message(_, verdict) if !self.config.emit.wants(verdict) => Outcome::Ack,
                Payload::Message(message, verdict) => {
                    let tagged = decided.tagged(message, verdict);
                    match self.config.output {
                        Output::Stream(_) => Outcome::Output(tagged),
                        Output::Lines => {
                            text.extend_from_slice(&tagged);
                            text.push(b'\n');
                            Outcome::Ack
                        }
                    }
                }
            };
            if let Outcome::Dead { reason, .. } | Outcome::DeadWithFields { reason } = &outcome {
                self.summary.invalid += 1;
                self.metrics.invalid_lines.fetch_add(1, Ordering::Relaxed);
                self.metrics
                    .queue_dead_lettered
                    .fetch_add(1, Ordering::Relaxed);
                tracing::warn!(
                    entry = %entry.id,
                    stream = %self.config.stream,
                    "{reason}: sent to {}",
                    self.config.invalid_stream
                );
            }
            outcomes.push((entry.id.as_str(), outcome));
        }
        outcomes.extend(deleted.iter().map(|id| (id.as_str(), Outcome::Ack)));

        // Lines are out before anything is acknowledged.
        if let Some(lines) = self.lines.as_mut()
            && !text.is_empty()
        {
            write_whole_lines(lines, &text)
                .and_then(|()| lines.flush())
                .map_err(Error::Write)?;
        }
        let acked = self.acknowledge(&outcomes)?;
        let count = acked.iter().filter(|&&a| a).count() as u64;
        self.summary.acked += count;
        self.metrics.queue_acked.fetch_add(count, Ordering::Relaxed);
        // Only the entries this script acknowledged: one it found not
        // pending was acknowledged by another worker (which forgets it),
        // or its delivery was lost with Redis's last second, and it comes
        // back as a new entry that must find its remembered verdict.
        self.acked_on = self.link.connections();
        self.acked_tokens = entries
            .into_iter()
            .zip(acked)
            .filter_map(|(entry, acked)| acked.then_some(entry.id))
            .collect();
        Ok(())
    }

    /// The acknowledgement script over a batch's outcomes; returns, for
    /// each, whether it acknowledged it (it acknowledges only entries still
    /// pending: not those acknowledged by someone else first).
    fn acknowledge(&mut self, outcomes: &[(&str, Outcome)]) -> Result<Vec<bool>, Error> {
        let config = self.config;
        let out_stream = match &config.output {
            Output::Stream(name) => name.as_str(),
            Output::Lines => config.invalid_stream.as_str(),
        };
        let script = &self.ack;
        let result = self
            .link
            .retry("acknowledging", |c: &mut dyn ConnectionLike, _| {
                let mut invocation = script.key(&config.stream);
                invocation
                    .key(out_stream)
                    .key(&config.invalid_stream)
                    .arg(&config.group)
                    .arg(&config.field);
                for (id, outcome) in outcomes {
                    invocation.arg(*id);
                    match outcome {
                        Outcome::Output(bytes) => invocation.arg("o").arg(bytes.as_slice()).arg(""),
                        Outcome::Ack => invocation.arg("a").arg("").arg(""),
                        Outcome::Dead { reason, message } => invocation
                            .arg("d")
                            .arg(message.as_slice())
                            .arg(reason.as_str()),
                        Outcome::DeadWithFields { reason } => {
                            invocation.arg("m").arg("").arg(reason.as_str())
                        }
                    };
                }
                invocation.invoke::<Vec<u8>>(c)
            });
        match result {
            Ok(acked) => Ok(acked.iter().map(|&flag| flag == b'1').collect()),
            // The group went with what it had pending: nothing of this
            // batch is written (the script stops at its first entry, before
            // any write), and the entries are read again from the new
            // group if they are still in the stream.
            Err(RetryError::Failed(e)) if e.to_string().contains("NOGROUP") => {
                self.group_lost()?;
                Ok(vec![false; outcomes.len()])
            }
            Err(e) => Err(match e {
                RetryError::Failed(e) if e.code() == Some("NOTSTREAM") => {
                    let detail = e.detail().unwrap_or_default();
                    let (which, holds) = detail.split_once(' ').unwrap_or((detail, "?"));
                    let (role, key) = match which {
                        "1" => ("input stream", config.stream.as_str()),
                        "2" if matches!(config.output, Output::Stream(_)) => {
                            ("output stream", out_stream)
                        }
                        _ => ("dead-letter stream", config.invalid_stream.as_str()),
                    };
                    Error::Store(StoreError::NotAStream {
                        key: key.to_string(),
                        role,
                        holds: holds.to_string(),
                    })
                }
                e => store_error(e),
            }),
        }
    }
}

/// Most bytes of whole lines given to one write: `PIPE_BUF` on Linux, the
/// most a pipe takes in one piece (a write of up to this many bytes is
/// never split, whatever the reader and whenever the writer dies).
const WHOLE_WRITE: usize = 4096;

/// Writes `text` (whole lines, each ending in `\n`) in writes of whole
/// lines only, each of at most [`WHOLE_WRITE`] bytes (a longer line alone),
/// so that a worker killed mid-batch leaves no torn line: one write of the
/// whole batch (hundreds of KB) is copied into a pipe as the reader makes
/// room, and a kill in the middle left a line cut short (1 in 200,258 in
/// the trial of issue 37). `out` should be unbuffered, so that each write
/// here is one `write(2)`; only an interrupted write of a line longer than
/// `PIPE_BUF` can still be split.
fn write_whole_lines(out: &mut dyn Write, text: &[u8]) -> std::io::Result<()> {
    let mut start = 0;
    while start < text.len() {
        let mut end = start;
        // Take lines while they fit; at least one.
        for newline in memchr::memchr_iter(b'\n', &text[start..]).map(|i| start + i + 1) {
            if newline - start > WHOLE_WRITE && end > start {
                break;
            }
            end = newline;
            if end - start >= WHOLE_WRITE {
                break;
            }
        }
        if end == start {
            // No line end left (the caller ends every line; kept whole).
            end = text.len();
        }
        out.write_all(&text[start..end])?;
        start = end;
    }
    Ok(())
}

/// Text of a reply element.
fn text(value: Value) -> Option<String> {
    match value {
        Value::BulkString(bytes) => String::from_utf8(bytes).ok(),
        Value::SimpleString(s) => Some(s),
        _ => None,
    }
}

/// An entry of a read or claim reply: `[id, [field, value, …]]`; the
/// fields are nil for an entry deleted from the stream while pending.
pub(crate) fn parse_entry(item: Value, field: &str) -> Option<Entry> {
    let Value::Array(parts) = item else {
        return None;
    };
    let mut parts = parts.into_iter();
    let id = parts.next().and_then(text)?;
    let mut message = None;
    let fields = parts.next();
    let deleted = matches!(fields, None | Some(Value::Nil));
    if let Some(Value::Array(fields)) = fields {
        let mut fields = fields.into_iter();
        while let (Some(name), Some(value)) = (fields.next(), fields.next()) {
            if let (Value::BulkString(name), Value::BulkString(value)) = (name, value)
                && name == field.as_bytes()
            {
                // The last one wins, as with duplicate JSON keys.
                message = Some(value);
            }
        }
    }
    Some(Entry {
        id,
        message,
        deleted,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    /// Records each write it is given.
    #[derive(Default)]
    struct Writes(Vec<Vec<u8>>);

    impl Write for Writes {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.push(buf.to_vec());
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn lines_are_written_whole_in_writes_of_at_most_pipe_buf() {
        let mut text = Vec::new();
        for (i, len) in [10, 3000, 1500, 5000, 20, 4095, 1, 4096, 700]
            .iter()
            .enumerate()
        {
            text.extend(std::iter::repeat_n(b'a' + i as u8, *len));
            text.push(b'\n');
        }
        let mut writes = Writes::default();
        write_whole_lines(&mut writes, &text).unwrap();
        assert_eq!(writes.0.concat(), text);
        for write in &writes.0 {
            assert!(write.ends_with(b"\n"), "a write ends mid-line");
            let lines = write.iter().filter(|&&b| b == b'\n').count();
            assert!(
                write.len() <= WHOLE_WRITE || lines == 1,
                "{} bytes in {lines} lines",
                write.len()
            );
        }
        // Lines are grouped, not written one by one.
        assert!(writes.0.len() < 9, "{}", writes.0.len());
        let mut none = Writes::default();
        write_whole_lines(&mut none, b"").unwrap();
        assert!(none.0.is_empty());
    }

    #[test]
    fn entries_are_read_from_replies() {
        let item = Value::Array(vec![
            bulk("1-0"),
            Value::Array(vec![
                bulk("other"),
                bulk("x"),
                bulk("json"),
                bulk("{\"id\":1}"),
            ]),
        ]);
        let entry = parse_entry(item, "json").unwrap();
        assert_eq!(entry.id, "1-0");
        assert_eq!(entry.message.as_deref(), Some(&b"{\"id\":1}"[..]));

        let missing = Value::Array(vec![
            bulk("2-0"),
            Value::Array(vec![bulk("body"), bulk("x")]),
        ]);
        assert_eq!(parse_entry(missing, "json").unwrap().message, None);

        let deleted = parse_entry(Value::Array(vec![bulk("3-0"), Value::Nil]), "json").unwrap();
        assert!(deleted.deleted && deleted.message.is_none());
        assert!(parse_entry(Value::Nil, "json").is_none());
    }
}

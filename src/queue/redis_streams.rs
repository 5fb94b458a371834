//! `dedup-stream consume`: a worker of a Redis Streams consumer group, on
//! the queue runtime ([`crate::queue`]).
//!
//! ```text
//!  IN ──XREADGROUP / XAUTOCLAIM──▶ prepare ──▶ index store ──▶ writer thread: one script a batch ──▶ OUT
//!       (reading thread: a batch    (sketch)    (one call a     (per entry its XACK, then its XADD;     (or OUT:invalid)
//!        of entries, one ahead)                  batch)          in the order read; up to --in-flight)
//! ```
//!
//! - Each entry's message is the JSON in one of its fields (`--field`,
//!   default `json`), tagged exactly as the filter tags a line, and
//!   appended to the output stream under the same field.
//! - **Batches in flight.** A reading thread reads up to four batches
//!   ahead, on a connection of its own, with its own reply parser
//!   ([`crate::redis_index`]'s plain connections: the `redis` crate's
//!   costs as much as deciding the messages); this thread decides batch
//!   after batch; a writer thread, on a third connection, runs each
//!   batch's script in the order read. Up to `--in-flight` batches are
//!   decided and not yet acknowledged, and up to four more read ahead; the
//!   runtime waits for the oldest when that many are out. `--in-flight 1` is read, decide, write
//!   and acknowledge, in turn, with no reading thread.
//! - **Exactly once in the output.** The tagged messages of a batch are
//!   written and its entries acknowledged in one Lua script, and only for
//!   the entries still pending in the group: when two workers finish the
//!   same entry (one was slow, and the other claimed it), the first whose
//!   script runs acknowledges and writes it, the other finds it
//!   acknowledged and writes nothing. An entry
//!   whose worker died before that script is read again (by its consumer
//!   on restart, or claimed by another after `--claim-idle`), and the
//!   index answers it from its memo: the verdict it got the first time,
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
//! - A stop request (SIGTERM) finishes the batches in flight, acknowledges
//!   them and returns.

use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use redis::{ConnectionLike, ErrorKind, RedisResult, Script, ServerErrorKind, Value};

use crate::engine::{IndexStore, Preparer};
use crate::error::{Error, InvalidReason, StoreError};
use crate::metrics::Metrics;
use crate::queue::batch::{DecidedBatch, Payload};
use crate::queue::{self, Settled};
use crate::redis_index::{Link, RetryError};
use crate::wire::record::Decoder;

/// Default field of an entry that holds the message.
pub const DEFAULT_FIELD: &str = "json";
/// Default time an entry may stay pending on a consumer before another
/// claims it.
pub const DEFAULT_CLAIM_IDLE: Duration = Duration::from_secs(60);
/// Batches the reading thread reads ahead of the runtime, at most. One
/// was too few: Redis runs the scripts and the reads of one worker in
/// turn, and a read waits behind them, so the runtime often found none
/// ready, and then waited for the oldest script instead, while Redis
/// idled (`scripts/redis_bench.py --queue`: about 0.3 × more messages a
/// second with four; docs/queues.md).
const READ_AHEAD: usize = 4;
/// Default entries read at a time.
pub const DEFAULT_BATCH: usize = 256;
/// Longest wait for new entries before looking around (stop requests,
/// entries to claim).
const BLOCK: Duration = Duration::from_millis(1000);

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
    /// The options every worker takes, whatever its broker.
    pub options: queue::Options,
    /// Entries pending longer than this on another consumer are claimed.
    pub claim_idle: Duration,
    /// Create the stream if missing, rather than wait for it.
    pub create: bool,
    /// Consumers holding nothing and idle this long are removed from the
    /// group.
    pub forget_idle_consumers: Duration,
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

impl queue::Input for Entry {
    fn payload(&self) -> Option<&[u8]> {
        self.message.as_deref()
    }
    fn token(&self) -> &[u8] {
        self.id.as_bytes()
    }
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

impl Outcome {
    /// Its letter in the acknowledging script's `ARGV`.
    fn kind(&self) -> u8 {
        match self {
            Outcome::Output(_) => b'o',
            Outcome::Ack => b'a',
            Outcome::Dead { .. } => b'd',
            Outcome::DeadWithFields { .. } => b'm',
        }
    }
}

/// Writes a batch's output and acknowledges it, only for the entries
/// still pending in the group: see the module documentation.
///
/// Each entry is acknowledged and then, if that acknowledged it, written,
/// in one script: when two workers finish the same entry (one was slow and
/// the other claimed it), the first script to run writes it and the other
/// finds it acknowledged and writes nothing. Redis does not undo a script
/// that fails halfway, so nothing may fail once the first entry is
/// acknowledged: the keys' types are checked before anything else (a key
/// of another type would fail the `XADD`), and the `#!lua` line makes it a
/// script that declares it may write, which Redis refuses whole, before it
/// runs, when it is over its `maxmemory` (without the line, a script that
/// has written may go on past the limit). A missing group makes every
/// `XACK` answer 0; the script then asks `XPENDING`, which fails with
/// `NOGROUP`, before anything is written.
///
/// A call per entry costs less than one `XPENDING` over the batch: Lua
/// builds a table for each of its replies' entries, and an `XACK`'s reply
/// is one number (Redis's instructions per entry: 29,900 against 37,400,
/// `scripts/redis_script_bench.py`).
///
/// `ARGV`: group, field, the kinds of the batch's entries as one string,
/// one byte each (`o` output, `a` acknowledge only, `d` dead letter, `m`
/// dead letter with the entry's fields), then per entry its id and its
/// bytes, then the reasons of its dead letters, in order. Returns a `1` or
/// `0` per entry: whether it acknowledged it.
pub const ACK_SCRIPT: &str = r"#!lua
for k = 1, 3 do
  local t = redis.call('TYPE', KEYS[k])['ok']
  if t ~= 'stream' and t ~= 'none' then
    return redis.error_reply('NOTSTREAM ' .. k .. ' ' .. t)
  end
end
local group, field, kinds = ARGV[1], ARGV[2], ARGV[3]
local n = #kinds
local reason = 3 + 2 * n
local flags, any = {}, false
for j = 1, n do
  local id, kind = ARGV[2 + 2 * j], string.byte(kinds, j)
  local dead = kind == 100 or kind == 109
  if dead then
    reason = reason + 1
  end
  if redis.call('XACK', KEYS[1], group, id) == 1 then
    any = true
    if kind == 111 then
      redis.call('XADD', KEYS[2], '*', field, ARGV[3 + 2 * j])
    elseif kind == 100 then
      redis.call('XADD', KEYS[3], '*', 'source', id, 'error', ARGV[reason], field, ARGV[3 + 2 * j])
    elseif kind == 109 then
      local letter = {'source', id, 'error', ARGV[reason]}
      local entry = redis.call('XRANGE', KEYS[1], id, id)
      if #entry == 1 then
        for _, v in ipairs(entry[1][2]) do letter[#letter + 1] = v end
      end
      redis.call('XADD', KEYS[3], '*', unpack(letter))
    end
    flags[j] = '1'
  else
    flags[j] = '0'
  end
end
if n > 0 and not any then
  redis.call('XPENDING', KEYS[1], group)
end
return table.concat(flags)
";

/// Runs the worker until `stop` is set (or a fatal error): reads its own
/// pending entries first, then new ones, claiming entries idle on other
/// consumers every `claim_idle / 2`.
///
/// The batches run through the queue runtime ([`queue::run`]): up to
/// `config.options.in_flight` of them decided and handed to a writer
/// thread, which runs each one's acknowledging script (on a connection of
/// its own) in the order they were read, while this thread decides the
/// next and a reading thread reads the one after.
///
/// `lines` (for [`Output::Lines`]) should be unbuffered, each write one
/// `write(2)`: the lines are handed to it in pieces of whole lines.
pub fn run<S: IndexStore>(
    config: &ConsumeConfig,
    preparer: &Preparer,
    store: &mut S,
    link: &mut Link,
    lines: Option<Box<dyn Write + Send>>,
    stop: &AtomicBool,
    metrics: &Arc<Metrics>,
) -> Result<ConsumeSummary, Error> {
    let script = Script::new(ACK_SCRIPT);
    let mut writer_link = link.another();
    let progress = ReadProgress::default();
    let quit = Arc::new(AtomicBool::new(false));
    // Reading ahead needs room for two: with one batch in flight, each is
    // read only once the one before is acknowledged.
    let ahead = config.options.in_flight > 1;
    let mut reader = Reader {
        config,
        link: if ahead {
            link.another()
                .with_own_parser()
                .with_cancel(Arc::clone(&quit))
        } else {
            link.another().with_own_parser()
        },
        stop,
        metrics: metrics.as_ref(),
        progress: &progress,
        summary: ConsumeSummary::default(),
        claim_every: (config.claim_idle / 2).max(Duration::from_millis(100)),
        last_claim: None,
        claim_cursor: "0-0".into(),
        own_pending: Some("0".into()),
    };
    reader.create_group(false)?;
    // An empty acknowledgement only checks the keys' types: a key that
    // cannot take the output stops the worker before it decides anything.
    match acknowledge(&mut writer_link, config, &script, &Job::default()) {
        Err(Written::Failed(e)) => return Err(e),
        Ok(_) | Err(Written::GroupLost) => {}
    }
    let decoder = Decoder::new(config.options.fields.clone());
    let abort = AtomicBool::new(false);
    std::thread::scope(|scope| {
        // As many jobs wait as batches may be in flight: the runtime never
        // hands over more, so sending never blocks for long.
        let (jobs, queued) = mpsc::sync_channel::<Job>(config.options.in_flight.max(1));
        let (answers, answered) = mpsc::channel();
        let (script, abort) = (&script, &abort);
        let writer = scope.spawn(move || {
            write_batches(writer_link, config, script, lines, queued, answers, abort);
        });
        let source = if ahead {
            // The channel holds all but one of the batches read ahead; the
            // thread holds the last until there is room.
            let (reads, ready) = mpsc::sync_channel(READ_AHEAD - 1);
            let quit = Arc::clone(&quit);
            let thread = scope.spawn(move || read_ahead(reader, &reads, &quit));
            Source::Ahead { ready, thread }
        } else {
            Source::Inline(Box::new(reader))
        };
        let mut adapter = Streams {
            config,
            metrics: metrics.as_ref(),
            source,
            stop,
            progress: &progress,
            jobs: Some(jobs),
            answered,
            stored: Vec::new(),
            stored_on: 0,
            held: Vec::new(),
            settled: Settled::default(),
            invalid: 0,
        };
        let settings = config.options.settings(config.max_line_bytes, BLOCK);
        let engine = queue::Engine {
            preparer,
            decoder: &decoder,
            store,
        };
        let result = queue::run(&mut adapter, engine, settings, stop, metrics);
        // On an error, the batches still queued are not written: the worker
        // stops now, and they stay pending; so does a batch read ahead.
        abort.store(result.is_err(), Ordering::Relaxed);
        quit.store(true, Ordering::Relaxed);
        drop(adapter.jobs.take());
        let Streams {
            source, invalid, ..
        } = adapter;
        let mut summary = match source {
            Source::Inline(reader) => reader.summary,
            Source::Ahead { ready, thread } => {
                // The reading thread ends once it cannot hand over a batch.
                drop(ready);
                thread
                    .join()
                    .map_err(|_| Error::Internal("the stream reader panicked".into()))?
            }
        };
        if writer.join().is_err() {
            return Err(Error::Internal("the stream writer panicked".into()));
        }
        let counts = result?;
        summary.invalid += invalid;
        summary.acked = counts.acknowledged;
        summary.new = counts.verdicts.new;
        summary.duplicates = counts.verdicts.duplicates;
        summary.deletions = counts.verdicts.deletions;
        Ok(summary)
    })
}

fn store_error(e: RetryError) -> Error {
    Error::Store(StoreError::from(e))
}

/// A decided batch for the writer thread: what to write and acknowledge.
#[derive(Default)]
struct Job {
    /// Each entry's id and outcome, in the order read.
    outcomes: Vec<(String, Outcome)>,
    /// Tagged lines for [`Output::Lines`], written before the script runs.
    text: Vec<u8>,
    /// Each entry's kind for the script, one byte each.
    kinds: Vec<u8>,
}

/// What the writer thread made of a job, when not all went well.
enum Written {
    /// The consumer group is gone: nothing of the batch was written.
    GroupLost,
    /// The worker must stop.
    Failed(Error),
}

/// The writer thread's answer to a job: which entries it acknowledged.
type Answer = Result<Vec<bool>, Written>;

/// The writer thread: runs each job's lines and script in turn, answers,
/// and stops at the first failure (no later batch is acknowledged past
/// one that was not) or when `abort` is set.
fn write_batches(
    mut link: Link,
    config: &ConsumeConfig,
    script: &Script,
    mut lines: Option<Box<dyn Write + Send>>,
    jobs: mpsc::Receiver<Job>,
    answers: mpsc::Sender<Answer>,
    abort: &AtomicBool,
) {
    for job in jobs {
        if abort.load(Ordering::Relaxed) {
            return;
        }
        let mut answer = Ok(());
        // Lines are out before anything is acknowledged.
        if let Some(lines) = lines.as_mut()
            && !job.text.is_empty()
        {
            answer = write_whole_lines(lines, &job.text)
                .and_then(|()| lines.flush())
                .map_err(|e| Written::Failed(Error::Write(e)));
        }
        let answer = answer.and_then(|()| acknowledge(&mut link, config, script, &job));
        let failed = matches!(answer, Err(Written::Failed(_)));
        if answers.send(answer).is_err() || failed {
            return;
        }
    }
}

/// The acknowledgement script over a batch's outcomes; returns, for
/// each, whether it acknowledged it (it acknowledges only entries still
/// pending in the group: not those another worker finished first).
fn acknowledge(
    link: &mut Link,
    config: &ConsumeConfig,
    script: &Script,
    job: &Job,
) -> Result<Vec<bool>, Written> {
    let out_stream = match &config.output {
        Output::Stream(name) => name.as_str(),
        Output::Lines => config.invalid_stream.as_str(),
    };
    // The command is built once, in one buffer sized for it: a script's
    // invocation copies each argument into a vector of its own, then all
    // of them into a command, at every attempt.
    let reasons = job
        .outcomes
        .iter()
        .filter_map(|(_, outcome)| match outcome {
            Outcome::Dead { reason, .. } | Outcome::DeadWithFields { reason } => Some(reason),
            Outcome::Output(_) | Outcome::Ack => None,
        });
    let bytes: usize = job
        .outcomes
        .iter()
        .map(|(id, outcome)| {
            id.len()
                + match outcome {
                    Outcome::Output(bytes) | Outcome::Dead { message: bytes, .. } => bytes.len(),
                    Outcome::Ack | Outcome::DeadWithFields { .. } => 0,
                }
        })
        .chain(reasons.clone().map(String::len))
        .sum();
    let mut command = redis::Cmd::with_capacity(
        9 + 2 * job.outcomes.len() + reasons.clone().count(),
        bytes + 256 + job.kinds.len(),
    );
    command
        .arg("EVALSHA")
        .arg(script.get_hash())
        .arg(3)
        .arg(&config.stream)
        .arg(out_stream)
        .arg(&config.invalid_stream)
        .arg(&config.group)
        .arg(&config.field)
        .arg(job.kinds.as_slice());
    for (id, outcome) in &job.outcomes {
        command.arg(id.as_str());
        match outcome {
            Outcome::Output(bytes) | Outcome::Dead { message: bytes, .. } => {
                command.arg(bytes.as_slice())
            }
            Outcome::Ack | Outcome::DeadWithFields { .. } => command.arg(""),
        };
    }
    for reason in reasons {
        command.arg(reason.as_str());
    }
    let result = link.retry("acknowledging", |c: &mut dyn ConnectionLike, _| {
        match command.query::<Vec<u8>>(c) {
            // Redis has lost its scripts (restarted, `SCRIPT FLUSH`).
            Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                script.load(c)?;
                command.query(c)
            }
            result => result,
        }
    });
    match result {
        Ok(acked) => Ok(acked.iter().map(|&flag| flag == b'1').collect()),
        // The group went with what it had pending: nothing of this batch
        // is written (the script stops at its `XPENDING`, before any
        // write), and the entries are read again from the new group if
        // they are still in the stream.
        Err(RetryError::Failed(e)) if e.to_string().contains("NOGROUP") => Err(Written::GroupLost),
        Err(RetryError::Failed(e)) if e.code() == Some("NOTSTREAM") => {
            let detail = e.detail().unwrap_or_default();
            let (which, holds) = detail.split_once(' ').unwrap_or((detail, "?"));
            let (role, key) = match which {
                "1" => ("input stream", config.stream.as_str()),
                "2" if matches!(config.output, Output::Stream(_)) => ("output stream", out_stream),
                _ => ("dead-letter stream", config.invalid_stream.as_str()),
            };
            Err(Written::Failed(Error::Store(StoreError::NotAStream {
                key: key.to_string(),
                role,
                holds: holds.to_string(),
            })))
        }
        Err(e) => Err(Written::Failed(store_error(e))),
    }
}

/// The Redis Streams adapter of the queue runtime: the reading half on a
/// thread of its own (or this one, with one batch in flight), the writing
/// half on the writer thread.
struct Streams<'a, 's> {
    config: &'a ConsumeConfig,
    metrics: &'a Metrics,
    source: Source<'a, 's>,
    stop: &'a AtomicBool,
    progress: &'a ReadProgress,
    /// Batches to the writer thread (`None` once the run is over, which
    /// ends the thread).
    jobs: Option<mpsc::SyncSender<Job>>,
    /// Its answers, in the order of the jobs.
    answered: mpsc::Receiver<Answer>,
    /// Whether each entry of the batch last stored was acknowledged.
    stored: Vec<bool>,
    /// The reading link's count of connections when that batch was
    /// published.
    stored_on: u64,
    /// The batches acknowledged and not yet known to have held: see
    /// [`Held`].
    held: Vec<Held>,
    /// What the runtime has not yet been told.
    settled: Settled,
    /// Entries sent to the dead-letter stream.
    invalid: u64,
}

/// Where the runtime's batches come from.
enum Source<'a, 's> {
    /// Read by this thread when the runtime fetches.
    Inline(Box<Reader<'a>>),
    /// Read ahead by a thread of its own (see [`read_ahead`], [`READ_AHEAD`]),
    /// so that reading Redis's replies, which costs this worker's thread
    /// as much as deciding their messages, overlaps the decision.
    Ahead {
        ready: mpsc::Receiver<Result<Read, Error>>,
        thread: std::thread::ScopedJoinHandle<'s, ConsumeSummary>,
    },
}

/// A batch read, with what shows whether acknowledgements made before it
/// held.
struct Read {
    entries: Vec<Entry>,
    /// Its number: reads completed, this one included.
    number: u64,
    /// The reading link's count of connections when it completed.
    connections: u64,
}

/// What the reading half tells the rest as it reads.
#[derive(Default)]
struct ReadProgress {
    /// Reads completed.
    completed: AtomicU64,
    /// The reading link's count of connections after the last read.
    connections: AtomicU64,
}

/// The tokens of a batch acknowledged, forgotten once a read shows that
/// its acknowledgement held: a read completed after the script answered,
/// on a reading connection that stood since before the script ran. One
/// made again since may reach a Redis that restarted and lost the
/// acknowledgement (an `everysec` AOF loses its last second), and an entry
/// read again must find its remembered verdict. (The index in Redis checks
/// its own connection too.)
struct Held {
    tokens: Vec<Vec<u8>>,
    /// The reading link's count of connections when the batch was
    /// published.
    on: u64,
    /// Reads completed when its script had answered: a read numbered
    /// higher completed after.
    after: u64,
}

impl Streams<'_, '_> {
    /// Forgets the batches acknowledged whose acknowledgement `read` shows
    /// held; keeps, saying so, those it shows may have been lost.
    fn settle_held(&mut self, read: &Read) {
        let shown = self
            .held
            .iter()
            .take_while(|held| held.after < read.number)
            .count();
        for held in self.held.drain(..shown) {
            if held.on == read.connections {
                self.settled.acknowledged.extend(held.tokens);
            } else {
                tracing::warn!(
                    stream = %self.config.stream,
                    entries = held.tokens.len(),
                    "the connection to Redis was made again since entries were acknowledged \
                     (Redis may have restarted and lost the acknowledgements): their remembered \
                     verdicts are kept"
                );
                self.settled.kept += held.tokens.len() as u64;
            }
        }
    }
}

impl queue::Adapter for Streams<'_, '_> {
    type Input = Entry;
    /// The reading link's count of connections when the batch was
    /// published.
    type Pending = u64;
    type Error = Error;

    fn fetch(&mut self, max: usize, wait: Duration) -> Result<Vec<Entry>, Error> {
        let read = match &mut self.source {
            Source::Inline(reader) => reader.next(max, wait)?,
            Source::Ahead { ready, .. } => {
                // `Err(true)`: the reading thread is gone.
                let got = if wait.is_zero() {
                    ready
                        .try_recv()
                        .map_err(|e| e == mpsc::TryRecvError::Disconnected)
                } else {
                    ready
                        .recv_timeout(wait)
                        .map_err(|e| e == mpsc::RecvTimeoutError::Disconnected)
                };
                match got {
                    Ok(read) => read?,
                    Err(false) => return Ok(Vec::new()),
                    // It ends only at a stop, or after handing over its
                    // error.
                    Err(true) if self.stop.load(Ordering::Relaxed) => return Ok(Vec::new()),
                    Err(true) => return Err(Error::Internal("the stream reader stopped".into())),
                }
            }
        };
        self.settle_held(&read);
        Ok(read.entries)
    }

    fn publish(&mut self, inputs: &[Entry], decided: &DecidedBatch) -> Result<u64, Error> {
        let config = self.config;
        let mut outcomes = Vec::with_capacity(inputs.len());
        let mut text = Vec::new();
        for (at, entry) in inputs.iter().enumerate() {
            let outcome = match decided.payload(at) {
                Payload::Missing if entry.deleted => Outcome::Ack,
                Payload::Missing if config.options.relay => {
                    match (&entry.message, &config.output) {
                        (Some(message), Output::Stream(_)) => Outcome::Output(message.clone()),
                        (Some(message), Output::Lines) => {
                            text.extend_from_slice(message);
                            text.push(b'\n');
                            Outcome::Ack
                        }
                        (None, _) => Outcome::Ack,
                    }
                }
                Payload::Missing => Outcome::DeadWithFields {
                    reason: format!("no field {:?}", config.field),
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
                Payload::Message(_, verdict) if !config.options.emit.wants(verdict) => Outcome::Ack,
                Payload::Message(message, verdict) => {
                    let tagged = decided.tagged(message, verdict);
                    match config.output {
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
                self.invalid += 1;
                self.metrics.invalid_lines.fetch_add(1, Ordering::Relaxed);
                self.metrics
                    .queue_dead_lettered
                    .fetch_add(1, Ordering::Relaxed);
                tracing::warn!(
                    entry = %entry.id,
                    stream = %config.stream,
                    "{reason}: sent to {}",
                    config.invalid_stream
                );
            }
            outcomes.push((entry.id.clone(), outcome));
        }
        let job = Job {
            kinds: outcomes.iter().map(|(_, outcome)| outcome.kind()).collect(),
            outcomes,
            text,
        };
        if let Some(jobs) = &self.jobs {
            // A send fails only if the writer stopped at a failure: its
            // answer to an earlier batch says which, when that is awaited.
            let _ = jobs.send(job);
        }
        Ok(self.progress.connections.load(Ordering::Relaxed))
    }

    fn stored(&mut self, on: u64) -> Result<(), Error> {
        let answer = self
            .answered
            .recv()
            .map_err(|_| Error::Internal("the stream writer stopped".into()))?;
        match answer {
            Ok(flags) => {
                self.stored = flags;
                self.stored_on = on;
                Ok(())
            }
            // Nothing of the batch was acknowledged. The reading half
            // meets the loss at its next read (`NOGROUP`, or `UNBLOCKED` for
            // a read waiting on a stream deleted), says so and makes the
            // group again; the batches in flight behind this one meet the
            // same loss, or the group made again.
            Err(Written::GroupLost) => {
                self.stored.clear();
                self.stored_on = on;
                Ok(())
            }
            Err(Written::Failed(e)) => Err(e),
        }
    }

    fn acknowledge(&mut self, inputs: Vec<Entry>) -> Result<(), Error> {
        // Only the entries this script acknowledged: one it found not
        // pending was claimed by another worker (which forgets it), or its
        // delivery was lost with Redis's last second, and it comes back as
        // a new entry that must find its remembered verdict.
        let tokens: Vec<Vec<u8>> = inputs
            .into_iter()
            .zip(std::mem::take(&mut self.stored))
            .filter_map(|(entry, acked)| acked.then(|| entry.id.into_bytes()))
            .collect();
        self.held.push(Held {
            tokens,
            on: self.stored_on,
            after: self.progress.completed.load(Ordering::Relaxed),
        });
        Ok(())
    }

    fn settled(&mut self) -> Settled {
        std::mem::take(&mut self.settled)
    }

    fn finish(&mut self) -> Result<(), Error> {
        // No read comes after the last batches to show their
        // acknowledgements held: their verdicts are kept.
        for held in self.held.drain(..) {
            self.settled.kept += held.tokens.len() as u64;
        }
        Ok(())
    }

    fn take_read_ahead(&mut self) -> Result<Vec<Entry>, Error> {
        let Source::Ahead { ready, .. } = &self.source else {
            return Ok(Vec::new());
        };
        // The reading thread hands over what it read, then sees the stop
        // and ends.
        let mut entries = Vec::new();
        let mut reads = Vec::new();
        for read in ready.iter() {
            reads.push(read?);
        }
        for mut read in reads {
            self.settle_held(&read);
            entries.append(&mut read.entries);
        }
        Ok(entries)
    }
}

/// The reading thread: reads batch after batch and hands each over (an
/// error too, and then ends), until the worker stops, `quit` is set, or
/// nobody takes them.
fn read_ahead(
    mut reader: Reader<'_>,
    reads: &mpsc::SyncSender<Result<Read, Error>>,
    quit: &AtomicBool,
) -> ConsumeSummary {
    while !reader.stop.load(Ordering::Relaxed) && !quit.load(Ordering::Relaxed) {
        let read = reader.next(reader.config.options.batch, BLOCK);
        let failed = read.is_err();
        if reads.send(read).is_err() || failed {
            break;
        }
    }
    reader.summary
}

/// The reading half of the worker: the group, reads and claims.
struct Reader<'a> {
    config: &'a ConsumeConfig,
    link: Link,
    stop: &'a AtomicBool,
    metrics: &'a Metrics,
    progress: &'a ReadProgress,
    summary: ConsumeSummary,
    /// How often the pending entries of others are looked through.
    claim_every: Duration,
    /// When they were last looked through to the end.
    last_claim: Option<Instant>,
    /// Where the look through goes on (`0-0`: from the start).
    claim_cursor: String,
    /// Read this consumer's own pending entries after this id; `None`: all
    /// are read, only new ones now.
    own_pending: Option<String>,
}

impl Reader<'_> {
    /// Reads a batch (entries to claim, this consumer's own pending ones,
    /// else new ones, waiting up to `wait` for them) and counts the read.
    fn next(&mut self, max: usize, wait: Duration) -> Result<Read, Error> {
        let entries = self.entries(max, wait)?;
        let connections = self.link.connections();
        self.progress
            .connections
            .store(connections, Ordering::Relaxed);
        let number = self.progress.completed.fetch_add(1, Ordering::Relaxed) + 1;
        Ok(Read {
            entries,
            number,
            connections,
        })
    }

    /// The entries of a batch: entries to claim, this consumer's own
    /// pending ones, else new ones.
    fn entries(&mut self, max: usize, wait: Duration) -> Result<Vec<Entry>, Error> {
        let reader = self;
        if reader
            .last_claim
            .is_none_or(|at| at.elapsed() >= reader.claim_every)
        {
            let cursor = std::mem::take(&mut reader.claim_cursor);
            let (next, mut entries, deleted) = reader.claim(&cursor, max)?;
            if next == "0-0" {
                reader.last_claim = Some(Instant::now());
                reader.forget_idle_consumers();
            }
            reader.claim_cursor = next;
            let claimed = (entries.len() + deleted.len()) as u64;
            reader.summary.claimed += claimed;
            reader
                .metrics
                .queue_claimed
                .fetch_add(claimed, Ordering::Relaxed);
            if claimed > 0 {
                tracing::info!(
                    entries = claimed,
                    "claimed entries left pending by a consumer that went quiet"
                );
                entries.extend(deleted.into_iter().map(|id| Entry {
                    id,
                    message: None,
                    deleted: true,
                }));
                return Ok(entries);
            }
        }
        // This consumer's own pending entries first (a worker restarted
        // under its name), from past the last one read: those in flight
        // are pending too.
        if let Some(after) = reader.own_pending.take() {
            let entries = reader.read(&after, max, None)?;
            if let Some(last) = entries.last() {
                reader.own_pending = Some(last.id.clone());
                return Ok(entries);
            }
        }
        match reader.read(">", max, Some(wait)) {
            // The stop signal cut the blocked read short: a clean stop
            // (anything Redis handed out stays pending for this consumer).
            Err(Error::Store(StoreError::Unavailable(_)))
                if reader.stop.load(Ordering::Relaxed) =>
            {
                Ok(Vec::new())
            }
            read => read,
        }
    }

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
    fn read(
        &mut self,
        from: &str,
        max: usize,
        block: Option<Duration>,
    ) -> Result<Vec<Entry>, Error> {
        let config = self.config;
        // A blocked read must end well before the call times out; one that
        // must not wait has no BLOCK (`BLOCK 0` waits for ever).
        let block = block
            .map(|wait| wait.min(self.link.timeout() / 2))
            .filter(|wait| wait.as_millis() > 0);
        let reply: Value = match self.link.retry("reading the stream", |c, _| {
            let mut cmd = redis::cmd("XREADGROUP");
            cmd.arg("GROUP")
                .arg(&config.group)
                .arg(&config.consumer)
                .arg("COUNT")
                .arg(max);
            if let Some(block) = block {
                cmd.arg("BLOCK").arg(block.as_millis() as u64);
            }
            cmd.arg("STREAMS").arg(&config.stream).arg(from);
            // Not `query`, which looks for an error in every entry of the
            // reply: Redis answers a read with an error, or with entries.
            match c.req_command(&cmd)? {
                Value::ServerError(e) => Err(e.into()),
                reply => Ok(reply),
            }
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
        Ok(entries)
    }

    /// Claims a page of entries idle on other consumers: the next cursor,
    /// the entries, and the ids of pending entries deleted from the stream.
    fn claim(
        &mut self,
        cursor: &str,
        max: usize,
    ) -> Result<(String, Vec<Entry>, Vec<String>), Error> {
        let config = self.config;
        let reply: Value = match self.link.retry("claiming idle entries", |c, _| {
            redis::cmd("XAUTOCLAIM")
                .arg(&config.stream)
                .arg(&config.group)
                .arg(&config.consumer)
                .arg(config.claim_idle.as_millis() as u64)
                .arg(cursor)
                .arg("COUNT")
                .arg(max)
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
        Ok((next, entries, deleted))
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

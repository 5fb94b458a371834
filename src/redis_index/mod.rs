//! The index kept in Redis: one index shared by a fleet of workers, as a
//! replicated log.
//!
//! Redis holds no rule of the decision. It holds the index's **log**: a
//! stream whose entries are batches of prepared messages (ids, sketches,
//! times, queue tokens; see [`log`]), numbered 1, 2, 3… by a small script
//! (`append.lua`) as workers append them. Every worker keeps a **replica**
//! of the whole index in memory ([`replica`]): the same
//! [`Deduper`] the filter uses, applied to every
//! entry in log order. A worker appends its batch, reads and applies the
//! entries other workers appended before it, then applies its own: its
//! verdicts are those of the in-memory engine on the messages in log order,
//! by construction, and every replica that has applied the same entries
//! holds the same index. Appends never conflict, so no worker ever retries
//! for another's sake.
//!
//! So that the log does not grow forever, a worker now and then stores its
//! replica in Redis as a **snapshot** (chunks of a state file, with the
//! memo of queue tokens) at the entry it has applied (`publish.lua`), and
//! the log is trimmed behind the snapshot before it. A worker that starts,
//! or that finds the log no longer continues where it stands, loads the
//! newest snapshot and applies the log after it.
//!
//! What can go wrong is detected, never guessed around:
//! - entries are numbered, so a replica that finds a number other than the
//!   one it expects knows that Redis lost writes it had applied (a restart
//!   that lost its last second), and starts again from the snapshot;
//! - an index dropped or created again gets a new **epoch**, and every
//!   worker starts again from the new, empty index, saying so;
//! - a call whose reply was lost is repeated safely: the script answers a
//!   worker's call number with the entry it already appended;
//! - the settings and the **rule** (a hash of the decision's source, see
//!   [`RULE`]) are stored with the index, and a worker of other settings or
//!   of another build of the decision is refused;
//! - a Redis that may evict any key when full (`maxmemory-policy allkeys-*`)
//!   is refused: at start, and again whenever keys are found missing and
//!   at every snapshot, since the policy can be changed while workers run.
//!
//! The keys of one index all carry the hash tag `{NAME}`, so they share one
//! hash slot and a Redis Cluster keeps each index on one node.
//!
//! It may import the engine, the wire format, the state files (a replica's
//! snapshot is a state file) and [`crate::metrics`]; the queue workers and the
//! binary build on it.

pub mod admin;
mod connection;
pub mod log;
pub mod replica;
mod replies;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use redis::{Script, Value};

pub use connection::{DEFAULT_TIMEOUT, IndexLocation, Link, RetryError, is_transient};

use crate::engine::config::EngineConfig;
use crate::engine::{ANCHOR_TOKENS, Ask, Deduper, IndexStats, IndexStore, Verdict, lsh_params};
use crate::error::StoreError;
use crate::metrics::Metrics;
use crate::state::snapshot::Saveable;
use log::Batch;
use replica::Replica;

/// The index name used when none is given: the prefix of every key.
pub const DEFAULT_INDEX_NAME: &str = "dedup-stream";

/// Format of the keys and values; part of the stored settings, so a worker
/// of another format is refused. 8: the replicated log; 9: its entries
/// may hold removals (deletion notices).
const FORMAT: u32 = 9;

/// The decision's identity: a hash of the source files of the engine, the
/// log and the state files, computed when the crate is built. Workers share
/// an index only if they decide alike, so it is stored with the index and a
/// worker of another build of the decision is refused.
pub const RULE: &str = env!("DEDUP_RULE_ID");

/// Bytes of one snapshot chunk (one Redis string).
const CHUNK_BYTES: usize = 4 << 20;

/// Log entries read at a time.
const PAGE_ENTRIES: usize = 64;

/// Pages of the log a replica reads and decodes ahead of the one it
/// applies, when the log is long: what bounds the memory reading ahead
/// takes, while the thread that applies never waits for Redis between
/// pages.
const PAGES_AHEAD: usize = 1;

/// How long a worker may take to write a snapshot before another may.
const SNAPSHOT_LOCK_MS: u64 = 120_000;

/// Fewest messages between snapshots.
const MIN_SNAPSHOT_EVERY: u64 = 1_000;

/// Checks an index name: it becomes the hash tag `{NAME}` of every key.
pub fn check_name(name: &str) -> Result<(), StoreError> {
    if name.is_empty() || name.len() > 200 || name.contains(['{', '}']) {
        return Err(StoreError::Name(name.to_string()));
    }
    Ok(())
}

/// The prefix of every key of the index `name`.
pub fn key_prefix(name: &str) -> String {
    format!("{{{name}}}:")
}

/// The settings an index is made with, as the text stored beside it: what
/// must be the same for every worker that shares it (every option the
/// decision reads, and the rule).
pub fn settings_text(config: &EngineConfig) -> String {
    let lsh = lsh_params(config);
    format!(
        "format={FORMAT} rule={RULE} shingle={} threshold={} recent={} measure={} bands={} \
         rows={} anchors={ANCHOR_TOKENS} capacity={} max_bucket={} window_ms={}",
        config.shingle_settings(),
        config.threshold,
        config.lone_reach(),
        config.measure,
        lsh.bands,
        lsh.rows,
        config.capacity,
        config.max_bucket,
        config
            .window
            .map_or_else(|| "none".to_string(), |w| w.millis().to_string())
    )
}

/// The keys of one index.
#[derive(Clone, Debug)]
struct Keys {
    /// `{NAME}:`.
    prefix: String,
    /// Settings, epoch, the last entry number, the newest snapshot.
    cfg: String,
    /// The log (a stream).
    log: String,
    /// Each worker's last call (so a repeated call is not appended twice).
    calls: String,
    /// Held by the worker writing a snapshot.
    lock: String,
}

impl Keys {
    fn new(name: &str) -> Keys {
        let prefix = key_prefix(name);
        Keys {
            cfg: format!("{prefix}cfg"),
            log: format!("{prefix}log"),
            calls: format!("{prefix}calls"),
            lock: format!("{prefix}snaplock"),
            prefix,
        }
    }

    fn chunk(&self, entry: u64, chunk: usize) -> String {
        format!("{}snap:{entry}:{chunk}", self.prefix)
    }
}

/// One entry of the log, as read.
#[derive(Debug)]
pub(crate) struct Entry {
    id: String,
    number: u64,
    worker: Vec<u8>,
    call: u64,
    batch: Vec<u8>,
}

/// Where reading the log stands, and what ends it.
#[derive(Clone, Debug)]
struct Cursor {
    /// The log's key.
    log: String,
    /// The index's name, for errors.
    name: String,
    /// The `XRANGE` start of the next page.
    start: String,
    /// Its end (a stream id, or `+`).
    end: String,
    /// The entry number that continues the run read so far.
    next: u64,
    /// This worker and the call whose entry ends the reading.
    own: Option<(Vec<u8>, u64)>,
}

/// One page of the log, read and decoded: the entries that continue the
/// replica's position, up to this worker's own or a gap.
#[derive(Debug)]
struct Page {
    /// Entries of the page read.
    entries: usize,
    /// Those that continue the position, decoded, each with whether it is
    /// this worker's own (which ends the run).
    run: Vec<(Batch, bool)>,
    /// The last of the run's number and stream id.
    last: Option<(u64, String)>,
    /// The number of the entry found where the run's next was expected.
    gap: Option<u64>,
}

impl Page {
    /// Whether nothing after this page is to be read: the log's end, a
    /// gap (the replica starts again from a snapshot), or the worker's
    /// own entry.
    fn ends_reading(&self) -> bool {
        self.entries == 0 || self.gap.is_some() || self.run.last().is_some_and(|(_, mine)| *mine)
    }
}

/// What applying a page leaves to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    /// Read the next page.
    More,
    /// The worker's own entry was applied.
    Found,
    /// The log was read to its end.
    End,
    /// The log jumps to this entry number.
    Gap(u64),
}

/// Reads the page of the log at `cursor` and decodes its entries that
/// continue the run (see [`Page`]); moves the cursor past them.
fn read_page(link: &mut Link, cursor: &mut Cursor) -> Result<Page, StoreError> {
    let reply: Value = link.retry("reading the index's log", |c, _| {
        redis::cmd("XRANGE")
            .arg(&cursor.log)
            .arg(&cursor.start)
            .arg(&cursor.end)
            .arg("COUNT")
            .arg(PAGE_ENTRIES)
            .query(c)
    })?;
    let entries = parse_entries(reply)?;
    let mut page = Page {
        entries: entries.len(),
        run: Vec::with_capacity(entries.len()),
        last: None,
        gap: None,
    };
    for entry in entries {
        if entry.number != cursor.next {
            page.gap = Some(entry.number);
            break;
        }
        let batch = Batch::decode(&entry.batch)
            .map_err(|e| StoreError::Refused(format!("index {:?}: {e}", cursor.name)))?;
        let mine = cursor
            .own
            .as_ref()
            .is_some_and(|(worker, call)| entry.worker == *worker && entry.call == *call);
        page.run.push((batch, mine));
        cursor.next += 1;
        cursor.start = format!("({}", entry.id);
        page.last = Some((entry.number, entry.id));
        if mine {
            break;
        }
    }
    Ok(page)
}

/// The index of one name on one Redis (or Redis Cluster).
pub struct RedisIndex {
    link: Link,
    name: String,
    keys: Keys,
    settings: String,
    config: EngineConfig,
    /// The incarnation of the index this replica follows.
    epoch: String,
    replica: Replica,
    /// The link a thread reads the log ahead on (see
    /// [`RedisIndex::read_until`]), kept between reads; and what tells
    /// that thread its pages are no longer wanted.
    reader: Option<Link>,
    reader_cancel: Arc<AtomicBool>,
    /// This worker's name in the log.
    worker: String,
    /// Its calls so far.
    call: u64,
    /// Prefix of the tokens given with messages (queue and group).
    token_scope: Vec<u8>,
    /// Scoped tokens whose verdicts may go, sent with the next batch.
    forget: Vec<Vec<u8>>,
    /// The link's count of connections made when the oldest of `forget`
    /// was queued: a connection made since may be to a Redis that lost the
    /// acknowledgements those forgets stand on (see [`IndexStore::forget`]).
    forget_on: u64,
    /// The batch being appended was encoded again without its forgets
    /// after a failed attempt: what Redis holds may be either encoding, so
    /// the entry is read back from the log, not applied from `payload`.
    payload_reencoded: bool,
    /// The batch being appended, encoded, and how many of its messages
    /// are checks (not queries).
    payload: Vec<u8>,
    checks: usize,
    /// Messages between snapshots.
    snapshot_every: u64,
    /// The entry of the newest snapshot, as last heard from Redis.
    snapshot_at: u64,
    /// Messages applied since then (as far as this worker knows).
    since_snapshot: u64,
    /// No snapshot is tried before this entry (another worker holds the
    /// lock, or the last attempt failed).
    snapshot_not_before: u64,
    metrics: Option<Arc<Metrics>>,
    create_script: Script,
    append_script: Script,
    publish_script: Script,
}

impl std::fmt::Debug for RedisIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisIndex")
            .field("link", &self.link)
            .field("name", &self.name)
            .field("settings", &self.settings)
            .field("applied", &self.replica.applied)
            .finish()
    }
}

/// Options of a [`RedisIndex`] beyond where it is and what it holds.
#[derive(Clone, Debug, Default)]
pub struct RedisOptions {
    /// Where reachability, errors and round trips are counted.
    pub metrics: Option<Arc<Metrics>>,
    /// Once set, a worker waiting for Redis gives up.
    pub stop: Option<Arc<AtomicBool>>,
    /// Memo scope of the tokens given with messages (see [`Ask::token`]):
    /// the queue and group they come from.
    pub token_scope: Option<String>,
    /// Time Redis has to answer a call; `None`: [`DEFAULT_TIMEOUT`].
    pub timeout: Option<std::time::Duration>,
    /// Longest an outage of Redis is waited out; `None`: until told to
    /// stop.
    pub wait: Option<std::time::Duration>,
    /// Messages between snapshots of the index in Redis; `None`: half the
    /// capacity (the log is trimmed behind the snapshot before the newest,
    /// so it holds at most about one capacity of messages).
    pub snapshot_every: Option<u64>,
    /// Threads the replica's decision counts overlaps on (see
    /// [`crate::engine::overlaps`]); `None`: one per processor.
    pub threads: Option<std::num::NonZeroUsize>,
}

impl RedisIndex {
    /// Connects to the index `name` at `location`, creating it with
    /// `config`'s settings if it does not exist, and refusing it if it
    /// was made with other settings; then loads the newest snapshot and
    /// applies the log after it. Waits for Redis while it cannot be
    /// reached (until told to stop).
    pub fn open(
        location: &IndexLocation,
        name: &str,
        config: &EngineConfig,
        options: RedisOptions,
    ) -> Result<RedisIndex, StoreError> {
        config
            .validate()
            .map_err(|e| StoreError::Refused(e.to_string()))?;
        if config.max_index_bytes.is_some() {
            return Err(StoreError::Unsupported(
                "a byte budget (max_index_bytes) bounds an index in memory; bound an index in \
                 Redis by its capacity",
            ));
        }
        check_name(name)?;
        let mut link = Link::new(location, options.timeout.unwrap_or(DEFAULT_TIMEOUT))?
            .with_wait(options.wait);
        if let Some(metrics) = options.metrics.clone() {
            link = link.with_metrics(metrics);
        }
        if let Some(stop) = options.stop {
            link = link.with_stop(stop);
        }
        check_eviction_policy(&mut link)?;
        let worker = format!(
            "{:016x}",
            crate::engine::shingle::mix64(
                u64::from(std::process::id())
                    ^ std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .map_or(0, |d| d.as_nanos() as u64)
            )
        );
        let mut deduper =
            Deduper::new(config.clone()).map_err(|e| StoreError::Refused(e.to_string()))?;
        if let Some(threads) = options.threads {
            deduper.set_threads(threads);
        }
        let mut index = RedisIndex {
            link,
            name: name.to_string(),
            keys: Keys::new(name),
            settings: settings_text(config),
            config: config.clone(),
            epoch: String::new(),
            replica: Replica::new(deduper),
            reader: None,
            reader_cancel: Arc::new(AtomicBool::new(false)),
            worker,
            call: 0,
            token_scope: options
                .token_scope
                .map_or_else(|| b"tokens:".to_vec(), |s| format!("{s}:").into_bytes()),
            forget: Vec::new(),
            forget_on: 0,
            payload_reencoded: false,
            payload: Vec::new(),
            checks: 0,
            snapshot_every: options
                .snapshot_every
                .unwrap_or((config.capacity.get() as u64 / 2).max(MIN_SNAPSHOT_EVERY))
                .max(1),
            snapshot_at: 0,
            since_snapshot: 0,
            snapshot_not_before: 0,
            metrics: options.metrics,
            create_script: Script::new(include_str!("create.lua")),
            append_script: Script::new(include_str!("append.lua")),
            publish_script: Script::new(include_str!("publish.lua")),
        };
        index.create()?;
        index.resync()?;
        let mut none = Vec::new();
        index.read_until("+", None, &mut none)?;
        index.record_metrics();
        Ok(index)
    }

    /// The index name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The settings stored with the index.
    pub fn settings(&self) -> &str {
        &self.settings
    }

    /// The log position this worker's replica has reached.
    pub fn applied(&self) -> u64 {
        self.replica.applied
    }

    /// Creates the index if it is missing (with a new epoch); refuses one
    /// of other settings. Adopts the stored epoch.
    fn create(&mut self) -> Result<(), StoreError> {
        let new_epoch = format!(
            "{:016x}",
            crate::engine::shingle::mix64(
                self.call
                    ^ std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .map_or(0, |d| d.as_nanos() as u64)
            ) ^ u64::from_str_radix(&self.worker, 16).unwrap_or(0)
        );
        let (script, cfg, ours) = (&self.create_script, &self.keys.cfg, &self.settings);
        let (stored, epoch): (String, String) = self.link.retry("opening the index", |c, _| {
            script.key(cfg).arg(ours).arg(&new_epoch).invoke(c)
        })?;
        if stored != *ours {
            return Err(StoreError::Mismatch {
                name: self.name.clone(),
                stored,
                ours: ours.clone(),
            });
        }
        self.epoch = epoch;
        Ok(())
    }

    /// Starts the replica again from the newest snapshot of the index (or
    /// empty when there is none), at the entry it was taken at.
    ///
    /// Keys found missing may have been evicted: Redis's eviction policy
    /// is read again first, and one that may evict any key stops the
    /// worker rather than start it again from what is left.
    fn resync(&mut self) -> Result<(), StoreError> {
        check_eviction_policy(&mut self.link)?;
        for _ in 0..5 {
            let keys = &self.keys;
            let fields: Vec<Option<String>> = self.link.retry("reading the snapshot", |c, _| {
                redis::cmd("HMGET")
                    .arg(&keys.cfg)
                    .arg(&["epoch", "snap_n", "snap_id", "snap_chunks", "snap_crc"])
                    .query(c)
            })?;
            let field = |i: usize| fields.get(i).cloned().flatten();
            let Some(epoch) = field(0) else {
                return Err(StoreError::Refused(format!(
                    "index {:?} vanished from Redis while this worker read it",
                    self.name
                )));
            };
            self.epoch = epoch;
            let mut fresh = Deduper::new(self.config.clone())
                .map_err(|e| StoreError::Refused(e.to_string()))?;
            fresh.set_threads(self.replica.deduper().threads());
            let (Some(at), Some(chunks), Some(crc)) = (
                field(1).and_then(|n| n.parse::<u64>().ok()),
                field(3).and_then(|n| n.parse::<usize>().ok()),
                field(4).and_then(|n| n.parse::<u32>().ok()),
            ) else {
                self.replica = Replica::new(fresh);
                self.snapshot_at = 0;
                self.since_snapshot = 0;
                self.count(|m| &m.log_resyncs, 1);
                return Ok(());
            };
            let names: Vec<String> = (0..chunks).map(|i| self.keys.chunk(at, i)).collect();
            let mut bytes = Vec::new();
            let mut whole = true;
            for page in names.chunks(16) {
                let parts: Vec<Option<Vec<u8>>> =
                    self.link.retry("reading the snapshot", |c, _| {
                        redis::cmd("MGET").arg(page).query(c)
                    })?;
                for part in parts {
                    match part {
                        Some(part) => bytes.extend_from_slice(&part),
                        None => whole = false,
                    }
                }
            }
            // A newer snapshot replaced this one while it was read: read
            // that one.
            if !whole || crc32fast::hash(&bytes) != crc {
                continue;
            }
            let replica =
                Replica::decode(&bytes, fresh).map_err(|e| StoreError::Refused(e.to_string()))?;
            if replica.applied != at {
                return Err(StoreError::Refused(
                    "the index's snapshot in Redis does not say where in the log it stands".into(),
                ));
            }
            self.replica = replica;
            self.snapshot_at = at;
            self.since_snapshot = 0;
            self.count(|m| &m.log_resyncs, 1);
            return Ok(());
        }
        Err(StoreError::Refused(format!(
            "the snapshot of index {:?} kept changing or is corrupt (checksum) while this \
             worker read it",
            self.name
        )))
    }

    /// Reads the log after the replica's position up to the entry `end`
    /// (a stream id, or `+`) and applies it. `own`: this worker's call
    /// whose entry it is looking for: when it is found, its verdicts are
    /// appended to `verdicts` and reading stops. Returns whether it was
    /// found.
    fn read_until(
        &mut self,
        end: &str,
        own: Option<u64>,
        verdicts: &mut Vec<Verdict>,
    ) -> Result<bool, StoreError> {
        let mut resyncs = 0;
        loop {
            let mut cursor = Cursor {
                log: self.keys.log.clone(),
                name: self.name.clone(),
                start: if self.replica.applied == 0 && self.replica.applied_id == "0-0" {
                    "-".to_string()
                } else {
                    format!("({}", self.replica.applied_id)
                },
                end: end.to_string(),
                next: self.replica.applied + 1,
                own: own.map(|call| (self.worker.as_bytes().to_vec(), call)),
            };
            // A worker reading up to its own entry most often needs one
            // page, and a thread would only cost it: pages are read here
            // until one comes full. Past a full page the log is long (a
            // worker catching up), and the rest is read ahead while each
            // page is applied; so is the whole log when a worker starts.
            let step = if own.is_none() {
                self.apply_read_ahead(cursor, verdicts)?
            } else {
                loop {
                    let page = read_page(&mut self.link, &mut cursor)?;
                    let full = page.entries == PAGE_ENTRIES;
                    match self.apply_page(page, verdicts) {
                        Step::More if full => break self.apply_read_ahead(cursor, verdicts)?,
                        Step::More => {}
                        step => break step,
                    }
                }
            };
            let number = match step {
                Step::Found => return Ok(true),
                Step::End | Step::More => return Ok(false),
                Step::Gap(number) => number,
            };
            resyncs += 1;
            if resyncs > 2 {
                return Err(StoreError::Refused(format!(
                    "the log of index {:?} jumps from entry {} to {} and no snapshot \
                     covers the gap (were keys of it deleted or evicted?)",
                    self.name, self.replica.applied, number
                )));
            }
            if number <= self.replica.applied {
                tracing::warn!(
                    index = %self.name,
                    redis = %self.link.location(),
                    applied = self.replica.applied,
                    found = number,
                    "Redis lost log entries this worker had applied (it restarted and \
                     lost its last writes): starting again from the index's snapshot"
                );
            }
            self.resync()?;
        }
    }

    /// Applies the pages after `cursor`, read and decoded on another
    /// thread (on a link of its own) at most [`PAGES_AHEAD`] pages ahead
    /// of the one applied, until one ends the reading. The pages come in
    /// the order they were read, each decoded as [`read_page`] here would,
    /// so what is applied is what reading page by page applies. An error
    /// reading ahead stops the applying where it stands, as it would here.
    ///
    /// A thread that cannot be started (the process is out of threads or
    /// memory) is said on stderr, and the pages are read here instead.
    fn apply_read_ahead(
        &mut self,
        cursor: Cursor,
        verdicts: &mut Vec<Verdict>,
    ) -> Result<Step, StoreError> {
        let cancel = Arc::clone(&self.reader_cancel);
        cancel.store(false, Ordering::Relaxed);
        let mut link = self.reader.take().unwrap_or_else(|| {
            self.link
                .another()
                .with_cancel(Arc::clone(&self.reader_cancel))
        });
        let (pages, ahead) = std::sync::mpsc::sync_channel(PAGES_AHEAD);
        std::thread::scope(|scope| {
            let mut ahead_of = cursor.clone();
            let spawned = std::thread::Builder::new()
                .name("log-reader".into())
                .spawn_scoped(scope, move || {
                    let cursor = &mut ahead_of;
                    loop {
                        let page = read_page(&mut link, cursor);
                        let last = page.as_ref().map_or(true, Page::ends_reading);
                        if pages.send(page).is_err() || last {
                            return link;
                        }
                    }
                });
            let reader = match spawned {
                Ok(reader) => reader,
                Err(e) => {
                    tracing::warn!(
                        index = %self.name,
                        error = %e,
                        "cannot start a thread to read the index's log ahead: reading it on this one"
                    );
                    return self.apply_in_turn(cursor, verdicts);
                }
            };
            let result = loop {
                // The reader sends the page that ends the reading before it
                // returns, and returns on an error after sending it: a
                // closed channel means it panicked, which join reports.
                let Ok(page) = ahead.recv() else {
                    break Ok(Step::End);
                };
                match page.map(|page| self.apply_page(page, verdicts)) {
                    Ok(Step::More) => {}
                    other => break other,
                };
            };
            // A reader still waiting out an outage of Redis, ahead of a
            // step that ended the reading, is not waited for.
            cancel.store(true, Ordering::Relaxed);
            drop(ahead);
            match reader.join() {
                Ok(link) => self.reader = Some(link),
                Err(panic) => std::panic::resume_unwind(panic),
            }
            result
        })
    }

    /// Applies the pages after `cursor`, each read on this thread, until
    /// one ends the reading.
    fn apply_in_turn(
        &mut self,
        mut cursor: Cursor,
        verdicts: &mut Vec<Verdict>,
    ) -> Result<Step, StoreError> {
        loop {
            let page = read_page(&mut self.link, &mut cursor)?;
            match self.apply_page(page, verdicts) {
                Step::More => {}
                step => return Ok(step),
            }
        }
    }

    /// Applies one page's entries (see [`read_page`]) and moves the
    /// replica's position past them.
    fn apply_page(&mut self, mut page: Page, verdicts: &mut Vec<Verdict>) -> Step {
        let mut entry_data: Vec<_> = page
            .run
            .iter_mut()
            .map(|(batch, _)| batch.take_entry_data())
            .collect();
        let refs: Vec<(&Batch, bool)> = page
            .run
            .iter()
            .map(|(batch, mine)| (batch, *mine))
            .collect();
        self.replica
            .apply_entries_with_data(&refs, &mut entry_data, verdicts);
        let messages: u64 = page.run.iter().map(|(batch, _)| batch.len() as u64).sum();
        self.since_snapshot += messages;
        if let Some((number, id)) = page.last {
            self.replica.applied = number;
            self.replica.applied_id = id;
        }
        if let Some((own, true)) = page.run.last() {
            self.count(|m| &m.log_applied, messages - own.len() as u64);
            return Step::Found;
        }
        self.count(|m| &m.log_applied, messages);
        match page.gap {
            Some(number) => Step::Gap(number),
            None if page.entries == 0 => Step::End,
            None => Step::More,
        }
    }

    /// Appends the encoded batch: returns its entry number and stream id,
    /// and the newest snapshot's entry. An index that vanished is created
    /// again, and one created again by another worker is followed: both
    /// start this replica again from the new index.
    ///
    /// The batch's forgets stand on acknowledgements this worker made on
    /// the Redis it reached then. An attempt that fails for want of Redis
    /// may mean Redis restarted and lost them (an `everysec` AOF loses its
    /// last second): the batch is then sent again without its forgets, so
    /// that an entry whose acknowledgement was lost, read again, still
    /// finds its remembered verdict, never "a duplicate of itself".
    fn append(&mut self, asks: &[Ask<'_>]) -> Result<(u64, String, u64), StoreError> {
        for _ in 0..5 {
            let checks = self.checks;
            let (script, keys, settings, epoch, worker, call, payload) = (
                &self.append_script,
                &self.keys,
                &self.settings,
                &self.epoch,
                &self.worker,
                self.call,
                &mut self.payload,
            );
            let (forget, scope, reencoded) = (
                &mut self.forget,
                &self.token_scope,
                &mut self.payload_reencoded,
            );
            let result = self.link.retry("appending to the index's log", |c, retry| {
                if retry && !forget.is_empty() {
                    forget.clear();
                    log::encode(asks, scope, forget, payload);
                    *reencoded = true;
                }
                script
                    .key(&keys.cfg)
                    .key(&keys.log)
                    .key(&keys.calls)
                    .arg(settings)
                    .arg(epoch)
                    .arg(worker)
                    .arg(call)
                    .arg(payload.as_slice())
                    .arg(checks)
                    .invoke::<(u64, String, u64)>(c)
            });
            match result {
                Ok(appended) => return Ok(appended),
                Err(RetryError::Failed(e)) if e.code() == Some("DEDUP_NOINDEX") => {
                    // Evicted? Then making it again, empty, would be a
                    // silent restart from nothing.
                    check_eviction_policy(&mut self.link)?;
                    tracing::warn!(
                        index = %self.name,
                        redis = %self.link.location(),
                        "the index is gone from Redis (dropped, evicted, or Redis restarted \
                         without persistence): creating it again, empty; what it held is lost"
                    );
                    self.create()?;
                    self.resync()?;
                }
                Err(RetryError::Failed(e)) if e.code() == Some("DEDUP_EPOCH") => {
                    tracing::warn!(
                        index = %self.name,
                        redis = %self.link.location(),
                        "the index was created again in Redis (dropped, or lost by Redis) since \
                         this worker joined it: following the new index"
                    );
                    self.resync()?;
                }
                Err(RetryError::Failed(e)) if e.code() == Some("DEDUP_MISMATCH") => {
                    return Err(StoreError::Mismatch {
                        name: self.name.clone(),
                        stored: e.detail().unwrap_or_default().to_string(),
                        ours: self.settings.clone(),
                    });
                }
                Err(e) => return Err(e.into()),
            }
        }
        Err(StoreError::Refused(format!(
            "index {:?} keeps vanishing from Redis",
            self.name
        )))
    }

    /// Stores the replica as the index's newest snapshot when enough
    /// messages came since the last one and no other worker is writing
    /// one. A failure is reported and tried again later: the log is only
    /// trimmed less.
    ///
    /// Each time a snapshot is due, Redis's eviction policy is read again
    /// (it can be changed while the fleet runs, `CONFIG SET`): one that may
    /// evict any key is an error, which stops the worker.
    fn maybe_publish(&mut self) -> Result<(), StoreError> {
        let applied = self.replica.applied;
        if self.since_snapshot < self.snapshot_every || applied < self.snapshot_not_before {
            return Ok(());
        }
        check_eviction_policy(&mut self.link)?;
        if let Err(e) = self.publish() {
            tracing::warn!(
                index = %self.name,
                error = %e,
                "could not store a snapshot of the index in Redis; trying again later"
            );
            self.snapshot_not_before = applied + 64;
        }
        Ok(())
    }

    fn publish(&mut self) -> Result<(), StoreError> {
        let (keys, worker) = (&self.keys, &self.worker);
        let locked: Option<String> = self.link.retry("locking the snapshot", |c, _| {
            redis::cmd("SET")
                .arg(&keys.lock)
                .arg(worker)
                .arg("NX")
                .arg("PX")
                .arg(SNAPSHOT_LOCK_MS)
                .query(c)
        })?;
        if locked.is_none() {
            // Another worker is writing one.
            self.snapshot_not_before = self.replica.applied + 16;
            return Ok(());
        }
        let at = self.replica.applied;
        let bytes = self.replica.encode();
        let chunks: Vec<&[u8]> = bytes.chunks(CHUNK_BYTES).collect();
        let names: Vec<String> = (0..chunks.len()).map(|i| self.keys.chunk(at, i)).collect();
        for (name, chunk) in names.iter().zip(&chunks) {
            self.link.retry("writing the snapshot", |c, _| {
                redis::cmd("SET").arg(name).arg(*chunk).query::<()>(c)
            })?;
        }
        let stats = self.replica.deduper().stats();
        let (script, keys) = (&self.publish_script, &self.keys);
        let args = [
            self.settings.clone(),
            self.epoch.clone(),
            self.worker.clone(),
            at.to_string(),
            self.replica.applied_id.clone(),
            chunks.len().to_string(),
            crc32fast::hash(&bytes).to_string(),
            stats.len.to_string(),
            stats.evictions.to_string(),
            bytes.len().to_string(),
        ];
        let published: u64 = self.link.retry("publishing the snapshot", |c, _| {
            let mut invocation = script.key(&keys.cfg);
            invocation.key(&keys.log).key(&keys.lock);
            for arg in &args {
                invocation.arg(arg);
            }
            invocation.invoke(c)
        })?;
        if published == 1 {
            self.snapshot_at = at;
            self.since_snapshot = 0;
            self.count(|m| &m.log_snapshots, 1);
            tracing::debug!(index = %self.name, entry = at, bytes = bytes.len(), "snapshot stored");
        } else {
            self.link.retry("removing an unused snapshot", |c, _| {
                redis::cmd("UNLINK").arg(&names).query::<()>(c)
            })?;
            self.snapshot_not_before = at + 16;
        }
        Ok(())
    }

    fn count(&self, counter: impl Fn(&Metrics) -> &std::sync::atomic::AtomicU64, n: u64) {
        if let Some(metrics) = &self.metrics {
            counter(metrics).fetch_add(n, Ordering::Relaxed);
        }
    }

    fn record_metrics(&self) {
        if let Some(metrics) = &self.metrics {
            metrics.record_index(self.stats());
        }
    }
}

impl RedisIndex {
    /// Whether Redis makes each write durable before it answers
    /// (`appendonly yes` with `appendfsync always`): where it does not, a
    /// crash of Redis may lose the last second of the index's log, and
    /// the messages decided in it are decided again, perhaps otherwise.
    /// `None` when Redis does not say (`CONFIG` renamed away).
    pub fn writes_are_durable(&mut self) -> Option<bool> {
        let get = |c: &mut dyn redis::ConnectionLike, name: &str| -> Option<String> {
            redis::cmd("CONFIG")
                .arg("GET")
                .arg(name)
                .query::<Vec<String>>(c)
                .ok()
                .and_then(|pair| pair.get(1).cloned())
        };
        self.link
            .retry("reading Redis's persistence settings", |c, _| {
                Ok(get(c, "appendonly")
                    .zip(get(c, "appendfsync"))
                    .map(|(on, fsync)| on == "yes" && fsync == "always"))
            })
            .ok()
            .flatten()
    }
}

/// Refuses a Redis that may evict any key when its memory is full: the
/// index would lose keys without a word. (`volatile-*` policies evict only
/// keys with a time to live, and the index sets none but its lock.)
fn check_eviction_policy(link: &mut Link) -> Result<(), StoreError> {
    let policy: Option<String> = link.retry("reading Redis's eviction policy", |c, _| {
        match redis::cmd("CONFIG")
            .arg("GET")
            .arg("maxmemory-policy")
            .query::<Vec<String>>(c)
        {
            Ok(pair) => Ok(pair.get(1).cloned()),
            Err(e) if is_transient(&e) => Err(e),
            // CONFIG may be renamed away (managed Redis): INFO says it too.
            Err(_) => {
                let info: String = redis::cmd("INFO").arg("memory").query(c)?;
                Ok(info
                    .lines()
                    .find_map(|l| l.strip_prefix("maxmemory_policy:"))
                    .map(|p| p.trim().to_string()))
            }
        }
    })?;
    match policy {
        Some(policy) if policy.starts_with("allkeys-") => Err(StoreError::Refused(format!(
            "this Redis evicts any key when its memory is full (maxmemory-policy {policy}), \
             and an index whose keys vanish gives wrong verdicts; set maxmemory-policy \
             noeviction (Redis then refuses writes when full, and the workers stop and say so)"
        ))),
        _ => Ok(()),
    }
}

/// The entries of an `XRANGE` reply.
pub(crate) fn parse_entries(reply: Value) -> Result<Vec<Entry>, StoreError> {
    let bad = || StoreError::Refused("unexpected reply reading the index's log".into());
    let Value::Array(items) = reply else {
        return Err(bad());
    };
    let mut entries = Vec::with_capacity(items.len());
    for item in items {
        let Value::Array(parts) = item else {
            return Err(bad());
        };
        let mut parts = parts.into_iter();
        let id = match parts.next() {
            Some(Value::BulkString(id)) => String::from_utf8(id).map_err(|_| bad())?,
            Some(Value::SimpleString(id)) => id,
            _ => return Err(bad()),
        };
        let Some(Value::Array(fields)) = parts.next() else {
            return Err(bad());
        };
        let mut entry = Entry {
            id,
            number: 0,
            worker: Vec::new(),
            call: 0,
            batch: Vec::new(),
        };
        let mut fields = fields.into_iter();
        while let (Some(Value::BulkString(name)), Some(Value::BulkString(value))) =
            (fields.next(), fields.next())
        {
            let number = || {
                std::str::from_utf8(&value)
                    .ok()
                    .and_then(|v| v.parse::<u64>().ok())
            };
            match name.as_slice() {
                b"n" => entry.number = number().ok_or_else(bad)?,
                b"c" => entry.call = number().ok_or_else(bad)?,
                b"w" => entry.worker = value,
                b"b" => entry.batch = value,
                _ => {}
            }
        }
        if entry.number == 0 {
            return Err(bad());
        }
        entries.push(entry);
    }
    Ok(entries)
}

impl IndexStore for RedisIndex {
    /// Appends the batch to the log, applies what came before it, then the
    /// batch itself: its verdicts are the in-memory engine's on the log.
    fn decide(&mut self, asks: &[Ask<'_>], verdicts: &mut Vec<Verdict>) -> Result<(), StoreError> {
        if asks.is_empty() {
            return Ok(());
        }
        if self.since_snapshot + asks.len() as u64 >= self.snapshot_every {
            // A snapshot is due after this batch, and with it a look at the
            // eviction policy (see `maybe_publish`): look before appending,
            // so that a worker refusing the policy leaves no entry of its
            // batch in the log.
            check_eviction_policy(&mut self.link)?;
        }
        if !self.forget.is_empty() && self.link.connections() != self.forget_on {
            tracing::warn!(
                index = %self.name,
                redis = %self.link.location(),
                tokens = self.forget.len(),
                "the connection to Redis was made again since entries were acknowledged (Redis \
                 may have restarted and lost the acknowledgements): their remembered verdicts \
                 are kept"
            );
            self.forget.clear();
        }
        log::encode(asks, &self.token_scope, &self.forget, &mut self.payload);
        self.payload_reencoded = false;
        self.checks = asks
            .iter()
            .filter(|a| a.op == crate::engine::Op::Check)
            .count();
        let start = verdicts.len();
        let mut lost = 0;
        loop {
            self.call += 1;
            let (number, id, snapshot) = self.append(asks)?;
            if snapshot > self.snapshot_at {
                // Another worker stored one.
                self.snapshot_at = snapshot;
                self.since_snapshot = 0;
            }
            if number <= self.replica.applied {
                tracing::warn!(
                    index = %self.name,
                    redis = %self.link.location(),
                    applied = self.replica.applied,
                    appended = number,
                    "Redis lost log entries this worker had applied (it restarted and lost its \
                     last writes): starting again from the index's snapshot"
                );
                self.resync()?;
            }
            if number <= self.replica.applied {
                return Err(StoreError::Refused(format!(
                    "index {:?}: a snapshot taken after this worker's batch was appended \
                     replaced the log before the worker read it; its verdicts are unknown",
                    self.name
                )));
            }
            let found = if number == self.replica.applied + 1 && !self.payload_reencoded {
                // Nothing came between: the batch is applied as it was sent,
                // read back from the very bytes the other replicas read (not
                // from the asks), so no difference between the two can make
                // this replica decide otherwise than theirs.
                let batch =
                    Batch::decode(&self.payload).map_err(|e| StoreError::Refused(e.to_string()))?;
                self.replica.apply(&batch, true, verdicts);
                self.since_snapshot += batch.len() as u64;
                self.replica.applied = number;
                self.replica.applied_id = id;
                true
            } else {
                self.read_until(&id, Some(self.call), verdicts)?
            };
            if found {
                break;
            }
            verdicts.truncate(start);
            if self.replica.applied >= number {
                // A snapshot at or past the entry was loaded while it was
                // looked for: the entry may be in it, so appending it again
                // could decide its messages twice.
                return Err(StoreError::Refused(format!(
                    "index {:?}: this worker's batch was folded into a snapshot before the \
                     worker read it back; its verdicts are unknown",
                    self.name
                )));
            }
            lost += 1;
            self.count(|m| &m.log_reappends, 1);
            if lost > 3 {
                return Err(StoreError::Refused(format!(
                    "index {:?}: Redis keeps losing this worker's batches",
                    self.name
                )));
            }
            tracing::warn!(
                index = %self.name,
                "this worker's batch is not in the log any more (Redis lost it): appending it again"
            );
        }
        self.forget.clear();
        self.count(|m| &m.log_appended, asks.len() as u64);
        self.maybe_publish()?;
        self.record_metrics();
        Ok(())
    }

    fn stats(&self) -> IndexStats {
        self.replica.deduper().stats()
    }

    /// The tokens' verdicts are forgotten by every replica when they apply
    /// this worker's next batch, unless the connection to Redis is made
    /// again first (Redis may have lost the acknowledgements): then they
    /// are kept, and go only when the memo is full.
    fn forget(&mut self, tokens: &[&[u8]]) {
        if self.forget.is_empty() {
            self.forget_on = self.link.connections();
        }
        for token in tokens {
            let mut scoped = self.token_scope.clone();
            scoped.extend_from_slice(token);
            self.forget.push(scoped);
        }
    }
}

impl Saveable for RedisIndex {
    /// Redis keeps this index (its log and snapshots): no state file.
    fn encode_snapshot(&self) -> Option<Vec<u8>> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_name_the_format_and_the_rule() {
        let text = settings_text(&EngineConfig::default());
        assert!(
            text.starts_with(&format!("format={FORMAT} rule={RULE} ")),
            "{text}"
        );
        assert_eq!(RULE.len(), 16);
    }

    #[test]
    fn log_entries_are_read_from_replies() {
        let bulk = |s: &[u8]| Value::BulkString(s.to_vec());
        let reply = Value::Array(vec![Value::Array(vec![
            bulk(b"1700000000000-0"),
            Value::Array(vec![
                bulk(b"n"),
                bulk(b"12"),
                bulk(b"w"),
                bulk(b"abc"),
                bulk(b"c"),
                bulk(b"3"),
                bulk(b"b"),
                bulk(b"\x01\x00"),
            ]),
        ])]);
        let entries = parse_entries(reply).unwrap();
        assert_eq!(entries.len(), 1);
        let e = &entries[0];
        assert_eq!(
            (e.id.as_str(), e.number, e.worker.as_slice(), e.call),
            ("1700000000000-0", 12, &b"abc"[..], 3)
        );
        assert!(parse_entries(Value::Nil).is_err());
        let unnumbered = Value::Array(vec![Value::Array(vec![
            bulk(b"1-0"),
            Value::Array(vec![bulk(b"b"), bulk(b"")]),
        ])]);
        assert!(parse_entries(unnumbered).is_err());
    }
}

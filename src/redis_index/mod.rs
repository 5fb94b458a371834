//! The index kept in Redis: one index shared by a fleet of workers.
//!
//! [`RedisIndex`] is an [`IndexStore`]: the workers prepare their messages
//! (normalise, tokenise, shingle, sketch) as ever, read the posting lists of
//! a few hundred at a time (`lookup.lua`), verify the candidates themselves,
//! and send each message with its verdict and the lists it was computed
//! from to a Lua script (`decide.lua`, loaded once and called by its hash).
//! The script takes a verdict whose lists have not changed, verifies what
//! was added since, decides from scratch only when the claimed match left
//! the index, and then refreshes the match, inserts the message and evicts
//! the least recently used one with all its postings, exactly as the
//! in-memory engine does. Redis runs one script at a time, so every
//! decision is atomic: two workers can never both call two near-duplicates
//! new, and every verdict is the one the in-memory engine gives had it seen
//! the messages in the order Redis ran them.
//!
//! The keys of one index all carry the hash tag `{NAME}`, so they share one
//! hash slot and a Redis Cluster keeps each index on one node (and runs its
//! scripts there); several indexes spread over the cluster.
//!
//! A call whose reply is lost (the connection broke after Redis ran it) is
//! safe to repeat: every checked message carries a token, and the script
//! keeps each token's verdict in a memo until the worker says it is done,
//! so a repeated message gets the verdict it had the first time rather than
//! being found a duplicate of itself.

pub mod admin;
mod connection;

use std::collections::{HashMap, HashSet};
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use lru::LruCache;
use redis::{ConnectionLike, RedisError, Script, Value};

pub use connection::{DEFAULT_TIMEOUT, IndexLocation, Link, RetryError, is_transient};

use crate::config::{EngineConfig, Measure};
use crate::engine::index::exact_key;
use crate::engine::shingle::{MAX_SHINGLES, comparable};
use crate::engine::verdict::{
    LoneMatch, MAX_RECENT_SHINGLES, MIN_CONTAINED_SHARE, MIN_CONTAINED_SHINGLES,
    MIN_RECENT_SHINGLES, NEAR_MARGIN, PairHints, RECENT_MARGIN, by_containment, intersection,
    ratio,
};
use crate::engine::{
    ANCHOR_TOKENS, AnchorClusters, Ask, IndexStats, IndexStore, MAX_ANCHOR_CLUSTERS, Match, Op,
    Verdict, lsh_params, share_anchor,
};
use crate::error::StoreError;
use crate::record::MessageId;
use crate::server::metrics::Metrics;
use crate::snapshot::Saveable;

/// The index name used when none is given: the prefix of every key.
pub const DEFAULT_INDEX_NAME: &str = "dedup-stream";

/// Most messages sent in one call: large enough that a round trip is shared
/// by hundreds of messages, small enough that one script keeps Redis busy
/// for milliseconds, not longer.
const CALL_MESSAGES: usize = 256;
/// Most argument bytes in one call (long texts make big sketches).
const CALL_BYTES: usize = 1 << 20;

/// Format of the keys and values; part of the stored settings, so a worker
/// of another format is refused.
const FORMAT: u32 = 7;

/// Most indexed messages a worker keeps in its cache of candidates (each is
/// immutable: a slot given to another message is another cell).
const CACHE_ENTRIES: usize = 100_000;

/// An indexed message, as a worker caches it to verify candidates.
#[derive(Debug)]
pub(crate) struct Cached {
    pub(crate) seq: u64,
    pub(crate) shingles: Box<[u32]>,
    /// The id's JSON, as the verdict reports it.
    pub(crate) id: Vec<u8>,
    /// The cluster's JSON; empty when it is the message's own id.
    pub(crate) cluster: Vec<u8>,
    /// Its anchor keys (its keys past the LSH bands, before the exact-set
    /// key).
    pub(crate) anchors: Box<[u32]>,
    /// Whether its text was cut (the high bit of the key count).
    pub(crate) truncated: bool,
}

impl Cached {
    /// The cluster's JSON: the id's when it is its own (as decide.lua's
    /// `id_of` reads it).
    pub(crate) fn cluster_json(&self) -> &[u8] {
        if self.cluster.is_empty() {
            &self.id
        } else {
            &self.cluster
        }
    }

    /// Reads an entry as decide.lua writes it: seq (two u32), number of
    /// keys (u8), of shingles (u32), the keys (u32 each), the shingles
    /// (u32 each), the id's length (u32), its JSON, the cluster's JSON
    /// (empty: the id).
    pub(crate) fn parse(bytes: &[u8], bands: usize) -> Option<Cached> {
        let u32_at = |at: usize| -> Option<u32> {
            Some(u32::from_be_bytes(bytes.get(at..at + 4)?.try_into().ok()?))
        };
        let seq = (u64::from(u32_at(0)?) << 32) | u64::from(u32_at(4)?);
        let keys = usize::from(*bytes.get(8)? & 0x7f);
        let truncated = *bytes.get(8)? & 0x80 != 0;
        let shingles = u32_at(9)? as usize;
        let anchors = (bands..keys.saturating_sub(1))
            .map(|r| u32_at(13 + 4 * r))
            .collect::<Option<Box<[u32]>>>()?;
        let from = 13 + 4 * keys;
        let to = from.checked_add(shingles.checked_mul(4)?)?;
        let set = bytes
            .get(from..to)?
            .chunks_exact(4)
            .map(|c| u32::from_be_bytes(c.try_into().expect("4 bytes")))
            .collect();
        let id_len = u32_at(to)? as usize;
        let id = bytes.get(to + 4..to.checked_add(4 + id_len)?)?;
        Some(Cached {
            seq,
            shingles: set,
            id: id.to_vec(),
            cluster: bytes.get(to + 4 + id_len..)?.to_vec(),
            anchors,
            truncated,
        })
    }
}

/// Shared shingles and what they are counted against, as the verdict's
/// similarity is their quotient (see [`crate::engine::verdict`]): on the
/// parts of the two sets that can be compared (long texts' capped sets, see
/// [`comparable`]), containment counts against the smaller, unless it is
/// too small to be contained, Jaccard against the union. `None` when a part
/// is empty: the pair is no candidate.
fn similarity_parts(
    measure: Measure,
    a: &[u32],
    b: &[u32],
    hints: PairHints,
) -> Option<(usize, usize)> {
    let (a, b) = comparable(a, b);
    if a.is_empty() || b.is_empty() {
        return None;
    }
    let shared = intersection(a, b);
    Some(if by_containment(measure, a.len(), b.len(), hints) {
        (shared, a.len().min(b.len()))
    } else {
        (shared, a.len() + b.len() - shared)
    })
}

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
/// must be the same for every worker that shares it. The shingle field
/// names the sampling only when there is one
/// ([`EngineConfig::shingle_settings`]), so the text, and `FORMAT`, are
/// those of indexes made before sampling existed.
pub fn settings_text(config: &EngineConfig) -> String {
    let lsh = lsh_params(config);
    format!(
        "format={FORMAT} shingle={} threshold={} recent={} measure={} bands={} rows={} \
         anchors={ANCHOR_TOKENS} capacity={} max_bucket={} window_ms={}",
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

/// The index of one name on one Redis (or Redis Cluster).
pub struct RedisIndex {
    link: Link,
    name: String,
    /// `{NAME}:meta`: the key every call names (it routes the call in a
    /// cluster).
    meta_key: String,
    settings: String,
    /// The numbers the script needs, as text: capacity, bucket cap,
    /// threshold, measure, containment's bounds, most shingles a
    /// set keeps.
    params: [String; 6],
    decide_script: Script,
    lookup_script: Script,
    create_script: Script,
    /// `{NAME}:`.
    prefix: String,
    measure: Measure,
    /// LSH bands: a message's keys past them are its anchors.
    bands: usize,
    threshold: f64,
    /// How many arrivals back a lone recent match reaches (0: off).
    recent: u64,
    /// Indexed messages read to verify candidates, by cell (slot and low
    /// seq bits).
    cache: LruCache<[u8; 8], Arc<Cached>>,
    /// Messages sent with a claim, and claims the script did not take
    /// (their lists had changed).
    claims: u64,
    claims_refused: u64,
    /// Whether this worker verifies candidates (or leaves it all to Redis).
    verify_here: bool,
    metrics: Option<Arc<Metrics>>,
    /// The memo of this worker's own tokens (messages asked without one).
    worker_scope: String,
    /// The memo of tokens given with the messages (queue entries).
    token_scope: String,
    /// Calls made, for this worker's own tokens.
    calls: u64,
    /// Given tokens whose verdicts may go, sent with the next call.
    forget: Vec<Vec<u8>>,
    stats: IndexStats,
}

impl std::fmt::Debug for RedisIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisIndex")
            .field("link", &self.link)
            .field("name", &self.name)
            .field("settings", &self.settings)
            .field("stats", &self.stats)
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
    /// Leave every verification to Redis instead of verifying candidates
    /// on the worker and sending verdicts for Redis to check: slower, the
    /// same verdicts; for diagnosis and tests.
    pub redis_verifies: bool,
    /// Time Redis has to answer a call; `None`: [`DEFAULT_TIMEOUT`].
    pub timeout: Option<std::time::Duration>,
}

impl RedisIndex {
    /// Connects to the index `name` at `location`, creating it with
    /// `config`'s settings if it does not exist, and refusing it if it
    /// was made with other settings. Waits for Redis while it cannot be
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
        let mut link = Link::new(location, options.timeout.unwrap_or(DEFAULT_TIMEOUT))?;
        if let Some(metrics) = options.metrics.clone() {
            link = link.with_metrics(metrics);
        }
        if let Some(stop) = options.stop {
            link = link.with_stop(stop);
        }
        let prefix = key_prefix(name);
        let worker = format!(
            "w:{:016x}",
            crate::engine::shingle::mix64(
                u64::from(std::process::id())
                    ^ std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .map_or(0, |d| d.as_nanos() as u64)
            )
        );
        let mut index = RedisIndex {
            link,
            name: name.to_string(),
            meta_key: format!("{prefix}meta"),
            settings: settings_text(config),
            params: [
                config.capacity.to_string(),
                config.max_bucket.to_string(),
                // "T B N": the threshold, and a lone recent match's bar and
                // near bar (engine::verdict::LoneMatch), as Rust computes
                // them: the script compares with the very same numbers.
                format!(
                    "{} {} {}",
                    config.threshold,
                    config.threshold - RECENT_MARGIN,
                    config.threshold - NEAR_MARGIN
                ),
                match config.measure {
                    Measure::Jaccard => "j".into(),
                    Measure::Containment => "c".into(),
                },
                // "3,2,3,B,C,R,M,X": the fewest shingles and the share of the
                // longer set containment needs
                // (engine::verdict::by_containment), the LSH bands, past
                // which a message's keys are its anchors, and the most
                // clusters an anchor's messages may span
                // (engine::MAX_ANCHOR_CLUSTERS); then how many arrivals back
                // a lone recent match reaches and the fewest and most
                // shingles its texts may have (engine::verdict::LoneMatch).
                format!(
                    "{MIN_CONTAINED_SHINGLES},{},{},{},{MAX_ANCHOR_CLUSTERS},{},{MIN_RECENT_SHINGLES},\
                     {MAX_RECENT_SHINGLES}",
                    MIN_CONTAINED_SHARE.0,
                    MIN_CONTAINED_SHARE.1,
                    lsh_params(config).bands,
                    config.lone_reach()
                ),
                MAX_SHINGLES.to_string(),
            ],
            decide_script: Script::new(
                &[include_str!("prelude.lua"), include_str!("decide.lua")].concat(),
            ),
            lookup_script: Script::new(
                &[include_str!("prelude.lua"), include_str!("lookup.lua")].concat(),
            ),
            create_script: Script::new(include_str!("create.lua")),
            prefix: prefix.clone(),
            measure: config.measure,
            bands: lsh_params(config).bands,
            threshold: config.threshold,
            recent: config.lone_reach(),
            cache: LruCache::new(
                NonZeroUsize::new(config.capacity.get().min(CACHE_ENTRIES))
                    .unwrap_or(NonZeroUsize::MIN),
            ),
            claims: 0,
            claims_refused: 0,
            verify_here: !options.redis_verifies,
            metrics: options.metrics.clone(),
            worker_scope: worker,
            token_scope: options.token_scope.unwrap_or_else(|| "tokens".into()),
            calls: 0,
            forget: Vec::new(),
            stats: IndexStats {
                capacity: config.capacity.get() as u64,
                ..IndexStats::default()
            },
        };
        index.create()?;
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

    /// Messages sent with a verdict verified here, and of those, how many
    /// the script decided itself because their candidates had changed.
    pub fn claims(&self) -> (u64, u64) {
        (self.claims, self.claims_refused)
    }

    /// Creates the index if it is missing; refuses one of other settings.
    fn create(&mut self) -> Result<(), StoreError> {
        let (script, meta, ours) = (&self.create_script, &self.meta_key, &self.settings);
        let stored: String = self.link.retry("opening the index", |c, _| {
            script.key(meta).arg(ours).invoke(c)
        })?;
        if stored != *ours {
            return Err(StoreError::Mismatch {
                name: self.name.clone(),
                stored,
                ours: ours.clone(),
            });
        }
        Ok(())
    }

    /// Runs a script of the index until Redis answers: recreates the index
    /// if Redis lost it, and reports other settings as such. `flags_at`
    /// names the argument that says whether the call is a repeat.
    fn run_script(
        &mut self,
        decide: bool,
        args: &mut [Vec<u8>],
        flags_at: Option<(usize, bool)>,
    ) -> Result<Value, StoreError> {
        let mut recreated = false;
        loop {
            let script = if decide {
                &self.decide_script
            } else {
                &self.lookup_script
            };
            let meta = &self.meta_key;
            let result = self.link.retry(
                if decide {
                    "deciding"
                } else {
                    "reading posting lists"
                },
                |c, retry| {
                    if let Some((at, own_tokens)) = flags_at {
                        // A repeated call looks its tokens up instead of
                        // deciding them again; a first call of this worker's
                        // own tokens clears the memo of the call before, which
                        // has been answered.
                        args[at] = if retry || !own_tokens {
                            b"r".to_vec()
                        } else {
                            b"c".to_vec()
                        };
                    }
                    invoke(script, meta, args, c)
                },
            );
            match result {
                Err(RetryError::Failed(e)) if e.code() == Some("DEDUP_NOINDEX") && !recreated => {
                    // Redis lost the index (restarted without persistence,
                    // or it was dropped): start it again, and say so.
                    tracing::warn!(
                        index = %self.name,
                        redis = %self.link.location(),
                        "the index is gone from Redis (dropped, or Redis restarted without \
                         persistence): creating it again, empty"
                    );
                    self.create()?;
                    recreated = true;
                }
                Err(RetryError::Failed(e)) if e.code() == Some("DEDUP_MISMATCH") => {
                    return Err(StoreError::Mismatch {
                        name: self.name.clone(),
                        stored: e.detail().unwrap_or_default().to_string(),
                        ours: self.settings.clone(),
                    });
                }
                Err(e) => return Err(e.into()),
                Ok(reply) => return Ok(reply),
            }
        }
    }

    /// The posting keys of a message (u32 each, big-endian): its band and
    /// anchor keys, then its exact-set key.
    fn records(&self, ask: &Ask<'_>) -> Vec<u8> {
        let exact = exact_key(ask.sketch.set_fingerprint);
        ask.sketch
            .band_keys
            .iter()
            .chain(std::iter::once(&exact))
            .flat_map(|key| key.to_be_bytes())
            .collect()
    }

    /// Reads the posting list of every distinct record of the messages.
    fn read_lists(&mut self, records: &[Vec<u8>]) -> Result<HashMap<[u8; 4], Vec<u8>>, StoreError> {
        let mut wanted: Vec<[u8; 4]> = Vec::new();
        let mut seen = HashSet::new();
        for recs in records {
            for rec in recs.chunks_exact(4) {
                let rec: [u8; 4] = rec.try_into().expect("chunks of 4");
                if seen.insert(rec) {
                    wanted.push(rec);
                }
            }
        }
        let mut args = vec![self.settings.clone().into_bytes(), wanted.concat()];
        let reply = self.run_script(false, &mut args, None)?;
        let Value::Array(lists) = reply else {
            return Err(StoreError::Refused(
                "unexpected reply from the lookup script".into(),
            ));
        };
        if lists.len() != wanted.len() {
            return Err(StoreError::Refused(
                "unexpected reply from the lookup script".into(),
            ));
        }
        Ok(wanted
            .into_iter()
            .zip(lists)
            .map(|(rec, list)| match list {
                Value::BulkString(bytes) => (rec, bytes),
                _ => (rec, Vec::new()),
            })
            .collect())
    }

    /// Loads into the cache every message the lists name that it lacks.
    fn fetch_entries(&mut self, lists: &HashMap<[u8; 4], Vec<u8>>) -> Result<(), StoreError> {
        let mut missing: Vec<[u8; 8]> = Vec::new();
        let mut seen = HashSet::new();
        for list in lists.values() {
            for cell in list.chunks_exact(8) {
                let cell: [u8; 8] = cell.try_into().expect("chunks of 8");
                if !self.cache.contains(&cell) && seen.insert(cell) {
                    missing.push(cell);
                }
            }
        }
        for wanted in missing.chunks(1000) {
            let keys: Vec<Vec<u8>> = wanted
                .iter()
                .map(|cell| {
                    let mut key = format!("{}e:", self.prefix).into_bytes();
                    key.extend_from_slice(&cell[..4]);
                    key
                })
                .collect();
            let entries: Vec<Option<Vec<u8>>> = self
                .link
                .retry("reading candidates", |c, _| {
                    redis::cmd("MGET").arg(&keys).query(c)
                })
                .map_err(StoreError::from)?;
            for (cell, entry) in wanted.iter().zip(entries) {
                // A slot given to another message since the lists were
                // read is left out: its claims are not made.
                if let Some(entry) = entry
                    .as_deref()
                    .and_then(|bytes| Cached::parse(bytes, self.bands))
                    && entry.seq as u32
                        == u32::from_be_bytes(cell[4..].try_into().expect("4 bytes"))
                {
                    self.cache.put(*cell, Arc::new(entry));
                }
            }
        }
        Ok(())
    }

    /// The verdict this message gets if the lists are still as read, with
    /// those lists (see decide.lua); empty when it cannot be made here.
    fn claim(&self, ask: &Ask<'_>, records: &[u8], lists: &HashMap<[u8; 4], Vec<u8>>) -> Vec<u8> {
        if ask.sketch.shingles.is_empty() {
            return Vec::new();
        }
        let list = |rec: &[u8]| -> &[u8] {
            let rec: [u8; 4] = rec.try_into().expect("4 bytes");
            lists.get(&rec).map_or(&[], Vec::as_slice)
        };
        let recs: Vec<&[u8]> = records.chunks_exact(4).collect();
        let Some((&exact_rec, band_recs)) = recs.split_last() else {
            return Vec::new();
        };
        let mut exact: Option<[u8; 8]> = None;
        for cell in list(exact_rec).chunks_exact(8) {
            let Some(entry) = self.cache.peek(cell) else {
                return Vec::new();
            };
            if *entry.shingles == *ask.sketch.shingles {
                exact = cell.try_into().ok();
                break;
            }
        }
        // The message's anchors, each with whether it is a copy's: the
        // messages on its list, as read, span at most MAX_ANCHOR_CLUSTERS
        // clusters (engine::Index::anchor_is_a_copys).
        let anchor_recs = band_recs.get(self.bands..).unwrap_or_default();
        let my_anchors = ask.sketch.band_keys.get(self.bands..).unwrap_or_default();
        let mut copy_anchors: Vec<bool> = Vec::with_capacity(anchor_recs.len());
        for rec in anchor_recs {
            let mut clusters = AnchorClusters::new();
            let mut within = true;
            for cell in list(rec).chunks_exact(8) {
                let Some(entry) = self.cache.peek(cell) else {
                    return Vec::new();
                };
                within = clusters.add(entry.cluster_json());
                if !within {
                    break;
                }
            }
            copy_anchors.push(within);
        }
        // (cell, shared, of, seq) of the best match so far.
        let mut best: Option<([u8; 8], usize, usize, u64)> = None;
        // Whether a candidate below the threshold could be a lone recent
        // match: whether it is recent is known only in the script, which
        // then decides the message itself.
        let lone = LoneMatch::<(), ()>::new(self.threshold, self.recent, 0);
        let mut lone_possible = false;
        if let (Measure::Jaccard, Some(cell)) = (self.measure, exact) {
            best = Some((cell, 1, 1, 0));
        } else {
            let mut seen = HashSet::new();
            let cells = band_recs
                .iter()
                .flat_map(|rec| list(rec).chunks_exact(8))
                .chain(exact.as_ref().map(|c| c.as_slice()));
            for cell in cells {
                if !seen.insert(&cell[..4]) {
                    continue;
                }
                let Some(entry) = self.cache.peek(cell) else {
                    return Vec::new();
                };
                let hints = PairHints {
                    anchored: share_anchor(
                        my_anchors,
                        ask.sketch.truncated,
                        &entry.anchors,
                        |at| copy_anchors.get(at).copied().unwrap_or(false),
                    ),
                    earlier_truncated: entry.truncated,
                };
                let Some((shared, of)) =
                    similarity_parts(self.measure, ask.sketch.shingles, &entry.shingles, hints)
                else {
                    continue;
                };
                let s = ratio(shared, of);
                lone_possible |=
                    lone.could_take(s, ask.sketch.shingles.len(), entry.shingles.len());
                let floor = best.map_or(self.threshold, |(_, n, d, _)| ratio(n, d));
                let better = match best {
                    None => true,
                    Some((_, n, d, seq)) => {
                        let best_s = ratio(n, d);
                        s > best_s || entry.seq < seq
                    }
                };
                if s >= floor && better {
                    best = Some((cell.try_into().expect("8 bytes"), shared, of, entry.seq));
                }
            }
        }
        let mut claim = Vec::with_capacity(64);
        // Flags: an exact copy (1), a match (2), which anchors were a
        // copy's on the lists as read (4, 8, 16): where an anchor's list has
        // changed since, the script takes the claim only if it finds the
        // same (decide.lua, take_claim); and no match but a candidate that
        // could be a lone recent match (32): the script decides it.
        let mut flags = u8::from(exact.is_some())
            | (u8::from(best.is_some()) << 1)
            | (u8::from(best.is_none() && lone_possible) << 5);
        for (at, &copy) in copy_anchors.iter().take(3).enumerate() {
            flags |= u8::from(copy) << (2 + at);
        }
        claim.push(flags);
        claim.extend_from_slice(exact.as_ref().unwrap_or(&[0; 8]));
        let matched = best.and_then(|(cell, ..)| self.cache.peek(&cell));
        let id = matched.map(|e| e.id.clone());
        // The cluster as the script returns it: the id when it is its own.
        let cluster = matched.map(|e| e.cluster_json().to_vec());
        match best {
            Some((cell, shared, of, _)) => {
                claim.extend_from_slice(&cell);
                claim.extend_from_slice(&(shared as u32).to_be_bytes());
                claim.extend_from_slice(&(of as u32).to_be_bytes());
            }
            None => claim.extend_from_slice(&[0; 16]),
        }
        let id = id.unwrap_or_default();
        let Ok(id_len) = u16::try_from(id.len()) else {
            return Vec::new();
        };
        claim.extend_from_slice(&id_len.to_be_bytes());
        claim.extend_from_slice(&id);
        let cluster = cluster.unwrap_or_default();
        let Ok(cluster_len) = u16::try_from(cluster.len()) else {
            return Vec::new();
        };
        claim.extend_from_slice(&cluster_len.to_be_bytes());
        claim.extend_from_slice(&cluster);
        // Each list by its length and last cell: enough to tell that it has
        // not changed (see decide.lua).
        for rec in &recs {
            let list = list(rec);
            let Ok(n) = u16::try_from(list.len()) else {
                return Vec::new();
            };
            claim.extend_from_slice(&n.to_be_bytes());
            match list.len().checked_sub(8) {
                Some(last) => claim.extend_from_slice(&list[last..]),
                None => claim.extend_from_slice(&[0; 8]),
            }
        }
        claim
    }

    /// One commit: the decide script over `asks`, appending their verdicts.
    fn call(&mut self, asks: &[Ask<'_>], verdicts: &mut Vec<Verdict>) -> Result<(), StoreError> {
        self.calls += 1;
        let own_tokens = asks.iter().any(|ask| ask.token.is_none());
        let records: Vec<Vec<u8>> = asks.iter().map(|ask| self.records(ask)).collect();
        // Read, verify here, and claim; the script checks the claims hold.
        let lists = if self.verify_here {
            let lists = self.read_lists(&records)?;
            self.fetch_entries(&lists)?;
            lists
        } else {
            HashMap::new()
        };
        let mut args: Vec<Vec<u8>> = Vec::with_capacity(10 + self.forget.len() + 5 * asks.len());
        args.push(self.settings.clone().into_bytes());
        args.extend(self.params.iter().map(|p| p.clone().into_bytes()));
        args.push(
            if own_tokens {
                &self.worker_scope
            } else {
                &self.token_scope
            }
            .clone()
            .into_bytes(),
        );
        let flags_at = args.len();
        args.push(Vec::new());
        args.push(if own_tokens {
            self.calls.to_be_bytes().to_vec()
        } else {
            Vec::new()
        });
        // The lists as read, in the order the messages first name their
        // keys: when Redis still has them all so, every claim holds.
        let mut snapshot = Vec::new();
        if self.verify_here {
            let mut named = HashSet::new();
            for recs in &records {
                for rec in recs.chunks_exact(4) {
                    let rec: [u8; 4] = rec.try_into().expect("chunks of 4");
                    if named.insert(rec) {
                        snapshot.extend_from_slice(lists.get(&rec).map_or(&[][..], Vec::as_slice));
                    }
                }
            }
        }
        args.push(snapshot);
        // Given tokens are forgotten from their scope, with the next call
        // that names it.
        let forget = if own_tokens { 0 } else { self.forget.len() };
        args.push(forget.to_string().into_bytes());
        args.extend(self.forget[..forget].iter().cloned());
        let mut claims = 0;
        for (ask, recs) in asks.iter().zip(records) {
            // Upper case: the text was cut (engine::verdict::PairHints).
            let mut op = vec![match (ask.op, ask.sketch.truncated) {
                (Op::Check, false) => b'c',
                (Op::Check, true) => b'C',
                (Op::Query, false) => b'q',
                (Op::Query, true) => b'Q',
            }];
            // Times are ms since the epoch, below 2^53 (crate::timestamp).
            op.extend_from_slice(&(ask.time.max(0) as u64).to_be_bytes());
            op.extend_from_slice(ask.token.unwrap_or_default());
            args.push(op);
            let claim = if self.verify_here {
                self.claim(ask, &recs, &lists)
            } else {
                Vec::new()
            };
            claims += u64::from(!claim.is_empty());
            args.push(recs);
            args.push(
                ask.sketch
                    .shingles
                    .iter()
                    .flat_map(|s| s.to_be_bytes())
                    .collect(),
            );
            let mut id = Vec::with_capacity(24);
            ask.id.write_json(&mut id);
            args.push(id);
            args.push(claim);
        }
        let reply = self.run_script(true, &mut args, Some((flags_at, own_tokens)))?;
        self.forget.drain(..forget);
        self.parse_reply(reply, asks.len(), claims, verdicts)
    }

    fn parse_reply(
        &mut self,
        reply: Value,
        asks: usize,
        claims: u64,
        verdicts: &mut Vec<Verdict>,
    ) -> Result<(), StoreError> {
        let reply = read_reply(reply, asks, verdicts)?;
        self.stats.len = reply.len;
        self.stats.evictions = reply.evictions;
        self.claims_refused += reply.claims_refused;
        self.claims += claims;
        if let Some(metrics) = &self.metrics {
            metrics.store_claims.fetch_add(claims, Ordering::Relaxed);
            metrics
                .store_claims_refused
                .fetch_add(reply.claims_refused, Ordering::Relaxed);
        }
        Ok(())
    }
}

/// What a reply of decide.lua says besides its verdicts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ReplyCounts {
    /// Messages in the index.
    pub(crate) len: u64,
    /// Messages evicted so far.
    pub(crate) evictions: u64,
    /// Claims of this call the script refused.
    pub(crate) claims_refused: u64,
}

/// Reads a reply of decide.lua for `asks` messages: their verdicts (each
/// [`decode_verdict`]), then the index's length, its evictions and the
/// claims refused. The verdicts are appended to `verdicts` only when the
/// whole reply reads; on error `verdicts` is as it was.
pub(crate) fn read_reply(
    reply: Value,
    asks: usize,
    verdicts: &mut Vec<Verdict>,
) -> Result<ReplyCounts, StoreError> {
    let bad = |what: &str| StoreError::Refused(format!("unexpected reply from the script: {what}"));
    let Value::Array(items) = reply else {
        return Err(bad("not an array"));
    };
    if items.len() != asks.saturating_add(3) {
        return Err(bad("wrong length"));
    }
    let int = |v: &Value| match v {
        Value::Int(n) => u64::try_from(*n).ok(),
        _ => None,
    };
    let counts = ReplyCounts {
        len: int(&items[asks]).ok_or_else(|| bad("length"))?,
        evictions: int(&items[asks + 1]).ok_or_else(|| bad("evictions"))?,
        claims_refused: int(&items[asks + 2]).ok_or_else(|| bad("claims"))?,
    };
    let start = verdicts.len();
    for item in &items[..asks] {
        let verdict = match item {
            Value::BulkString(bytes) => decode_verdict(bytes),
            _ => None,
        };
        match verdict {
            Some(verdict) => verdicts.push(verdict),
            None => {
                verdicts.truncate(start);
                return Err(bad("a verdict cannot be read"));
            }
        }
    }
    Ok(counts)
}

fn invoke(
    script: &Script,
    meta: &str,
    args: &[Vec<u8>],
    c: &mut dyn ConnectionLike,
) -> Result<Value, RedisError> {
    let mut invocation = script.key(meta);
    for arg in args {
        invocation.arg(arg.as_slice());
    }
    invocation.invoke(c)
}

/// Reads one verdict as the script writes it: `n`, or `d`, the shared
/// shingles and what they are counted against (big-endian u32 each), the
/// length of the matched message's id (u32), its id as JSON, then its
/// cluster as JSON. A duplicate that shares more than it is counted
/// against, or is counted against nothing (a similarity of 0 / 0, a NaN),
/// is no verdict: the script never writes one.
pub(crate) fn decode_verdict(bytes: &[u8]) -> Option<Verdict> {
    match bytes.split_first()? {
        (b'n', []) => Some(Verdict::New),
        (b'd', rest) if rest.len() > 12 => {
            let shared = u32::from_be_bytes(rest[..4].try_into().ok()?);
            let of = u32::from_be_bytes(rest[4..8].try_into().ok()?);
            if of == 0 || shared > of {
                return None;
            }
            let id_len = u32::from_be_bytes(rest[8..12].try_into().ok()?) as usize;
            let (id, cluster) = rest[12..].split_at_checked(id_len)?;
            let json = |bytes| MessageId::from_json(std::str::from_utf8(bytes).ok()?);
            Some(Verdict::Duplicate(Match {
                of: json(id)?,
                similarity: ratio(shared as usize, of as usize),
                cluster: json(cluster)?,
            }))
        }
        _ => None,
    }
}

impl IndexStore for RedisIndex {
    fn decide(&mut self, asks: &[Ask<'_>], verdicts: &mut Vec<Verdict>) -> Result<(), StoreError> {
        let start = verdicts.len();
        let mut from = 0;
        while from < asks.len() {
            // A call takes messages until it holds enough of them or bytes.
            let mut to = from;
            let mut bytes = 0;
            while to < asks.len() && to - from < CALL_MESSAGES && (bytes < CALL_BYTES || to == from)
            {
                let sketch = asks[to].sketch;
                bytes += 32 + 4 * sketch.shingles.len() + 4 * sketch.band_keys.len();
                to += 1;
            }
            if let Err(e) = self.call(&asks[from..to], verdicts) {
                verdicts.truncate(start);
                return Err(e);
            }
            from = to;
        }
        Ok(())
    }

    fn stats(&self) -> IndexStats {
        self.stats
    }

    fn forget(&mut self, tokens: &[&[u8]]) {
        self.forget.extend(tokens.iter().map(|t| t.to_vec()));
    }
}

impl Saveable for RedisIndex {
    /// Redis keeps the index: its persistence (RDB, AOF) is the state.
    fn encode_snapshot(&self) -> Option<Vec<u8>> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn duplicate(shared: u32, of: u32, id: &str, cluster: &str) -> Vec<u8> {
        let mut bytes = vec![b'd'];
        bytes.extend_from_slice(&shared.to_be_bytes());
        bytes.extend_from_slice(&of.to_be_bytes());
        bytes.extend_from_slice(&(id.len() as u32).to_be_bytes());
        bytes.extend_from_slice(id.as_bytes());
        bytes.extend_from_slice(cluster.as_bytes());
        bytes
    }

    #[test]
    fn verdicts_are_read_as_the_script_writes_them() {
        assert_eq!(decode_verdict(b"n"), Some(Verdict::New));
        assert_eq!(
            decode_verdict(&duplicate(3, 4, "\"12\"", "7")),
            Some(Verdict::Duplicate(Match {
                of: MessageId::DigitString(12),
                similarity: 0.75,
                cluster: MessageId::Integer(7),
            }))
        );
        assert_eq!(decode_verdict(b"nn"), None);
        assert_eq!(decode_verdict(b""), None);
        // An id cut short, or ids that are no JSON string or integer.
        assert_eq!(decode_verdict(&duplicate(1, 2, "\"12\"", "7")[..15]), None);
        assert_eq!(decode_verdict(&duplicate(1, 2, "\"", "\"")), None);
    }

    /// Regression (fuzzing, issue 14): a duplicate counted against nothing
    /// gave a similarity of 0 / 0, a NaN in the verdict (and one sharing
    /// more than it is counted against, a similarity above 1). Neither is
    /// a verdict the script writes: both are refused.
    #[test]
    fn a_verdict_with_a_zero_denominator_is_refused() {
        assert_eq!(decode_verdict(&duplicate(0, 0, "1", "1")), None);
        assert_eq!(decode_verdict(&duplicate(5, 0, "1", "1")), None);
        assert_eq!(decode_verdict(&duplicate(5, 4, "1", "1")), None);
        let Some(Verdict::Duplicate(m)) = decode_verdict(&duplicate(0, 1, "1", "1")) else {
            panic!("a duplicate sharing nothing still reads");
        };
        assert_eq!(m.similarity, 0.0);
        // A reply holding such a verdict is an error, and adds no verdict.
        let reply = Value::Array(vec![
            Value::BulkString(b"n".to_vec()),
            Value::BulkString(duplicate(0, 0, "1", "1")),
            Value::Int(2),
            Value::Int(0),
            Value::Int(0),
        ]);
        let mut verdicts = vec![Verdict::New];
        assert!(read_reply(reply, 2, &mut verdicts).is_err());
        assert_eq!(verdicts, [Verdict::New]);
    }

    /// The worker-side comparison never divides by zero: a pair with an
    /// empty part is no candidate, and any other is counted against at
    /// least one shingle.
    #[test]
    fn similarity_parts_never_count_against_nothing() {
        let hints = PairHints {
            anchored: false,
            earlier_truncated: false,
        };
        for measure in [Measure::Jaccard, Measure::Containment] {
            assert_eq!(similarity_parts(measure, &[], &[], hints), None);
            assert_eq!(similarity_parts(measure, &[1, 2], &[], hints), None);
            assert_eq!(similarity_parts(measure, &[], &[1, 2], hints), None);
            for (a, b) in [(&[1][..], &[2][..]), (&[1, 2, 3][..], &[1, 2, 3, 4, 5][..])] {
                let (shared, of) = similarity_parts(measure, a, b, hints).unwrap();
                assert!(of > 0 && shared <= of, "{measure} {a:?} {b:?}");
            }
        }
    }

    #[test]
    fn replies_give_their_verdicts_and_counts() {
        let reply = Value::Array(vec![
            Value::BulkString(b"n".to_vec()),
            Value::BulkString(duplicate(2, 4, "1", "1")),
            Value::Int(12),
            Value::Int(3),
            Value::Int(1),
        ]);
        let mut verdicts = Vec::new();
        assert_eq!(
            read_reply(reply.clone(), 2, &mut verdicts).unwrap(),
            ReplyCounts {
                len: 12,
                evictions: 3,
                claims_refused: 1
            }
        );
        assert_eq!(verdicts.len(), 2);
        assert!(read_reply(reply.clone(), 1, &mut verdicts).is_err());
        assert!(read_reply(reply, usize::MAX, &mut verdicts).is_err());
        assert!(read_reply(Value::Nil, 0, &mut verdicts).is_err());
        assert_eq!(verdicts.len(), 2);
    }
}

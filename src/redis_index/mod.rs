//! The index kept in Redis: one index shared by a fleet of workers.
//!
//! [`RedisIndex`] is an [`IndexStore`]: the workers prepare their messages
//! (normalise, tokenise, shingle, sketch) as ever, and send them to Redis a
//! few hundred at a time, where a Lua script (`decide.lua`, loaded once and
//! called by its hash) decides each message exactly as the in-memory engine
//! would: exact lookup, LSH and anchor candidates, exact verification of
//! the shingle sets, refresh of the match, insertion, eviction of the least
//! recently used message with all its postings. Redis runs one script at a
//! time, so every decision is atomic: two workers can never both call two
//! near-duplicates new, and every verdict is the one the in-memory engine
//! gives had it seen the messages in the order Redis ran them.
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

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use redis::{ConnectionLike, RedisError, Script, Value};

pub use connection::{IndexLocation, Link, RetryError, is_transient};

use crate::config::{EngineConfig, Measure};
use crate::engine::index::exact_key;
use crate::engine::sketch::LshParams;
use crate::engine::verdict::MIN_CONTAINED_SHINGLES;
use crate::engine::{ANCHOR_TOKENS, Ask, IndexStats, IndexStore, Match, Op, Verdict, lsh_params};
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
const FORMAT: u32 = 1;

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

/// How many top bits of a posting key pick its bucket (one Redis hash):
/// enough buckets that each holds a few dozen postings when the index is
/// full, few enough that a small index does not pay for many empty ones.
fn bucket_bits(capacity: usize, keys_per_message: usize) -> u32 {
    let postings = capacity.saturating_mul(keys_per_message) as u64;
    let buckets = (postings / 40).max(1).next_power_of_two();
    buckets.trailing_zeros().clamp(4, 24)
}

/// The settings an index is made with, as the text stored beside it: what
/// must be the same for every worker that shares it.
pub fn settings_text(config: &EngineConfig) -> String {
    let lsh = lsh_params(config);
    format!(
        "format={FORMAT} shingle={} threshold={} measure={} bands={} rows={} anchors={ANCHOR_TOKENS} \
         capacity={} max_bucket={}",
        config.shingling,
        config.threshold,
        config.measure,
        lsh.bands,
        lsh.rows,
        config.capacity,
        config.max_bucket
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
    /// threshold, measure, fewest shingles for containment.
    params: [String; 5],
    /// Right shift from a posting key to its bucket.
    bucket_shift: u32,
    decide_script: Script,
    create_script: Script,
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
        check_name(name)?;
        let mut link = Link::new(location)?;
        if let Some(metrics) = options.metrics {
            link = link.with_metrics(metrics);
        }
        if let Some(stop) = options.stop {
            link = link.with_stop(stop);
        }
        let lsh: LshParams = lsh_params(config);
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
                config.threshold.to_string(),
                match config.measure {
                    Measure::Jaccard => "j".into(),
                    Measure::Containment => "c".into(),
                },
                MIN_CONTAINED_SHINGLES.to_string(),
            ],
            bucket_shift: 32 - bucket_bits(config.capacity.get(), lsh.bands + 3),
            decide_script: Script::new(include_str!("decide.lua")),
            create_script: Script::new(include_str!("create.lua")),
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

    /// One call: the script over `asks`, appending their verdicts.
    fn call(&mut self, asks: &[Ask<'_>], verdicts: &mut Vec<Verdict>) -> Result<(), StoreError> {
        self.calls += 1;
        let own_tokens = asks.iter().any(|ask| ask.token.is_none());
        let mut args: Vec<Vec<u8>> = Vec::with_capacity(9 + self.forget.len() + 4 * asks.len());
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
        // Given tokens are forgotten from their scope, with the next call
        // that names it.
        let forget = if own_tokens { 0 } else { self.forget.len() };
        args.push(forget.to_string().into_bytes());
        args.extend(self.forget[..forget].iter().cloned());
        for (position, ask) in asks.iter().enumerate() {
            let mut op = vec![match ask.op {
                Op::Check => b'c',
                Op::Query => b'q',
            }];
            match ask.token {
                Some(token) => op.extend_from_slice(token),
                None => {
                    op.extend_from_slice(&self.calls.to_be_bytes());
                    op.extend_from_slice(&(position as u32).to_be_bytes());
                }
            }
            args.push(op);
            let mut records = Vec::with_capacity(7 * (ask.sketch.band_keys.len() + 1));
            let exact = exact_key(ask.sketch.set_fingerprint);
            for &key in ask.sketch.band_keys.iter().chain(std::iter::once(&exact)) {
                let bucket = key >> self.bucket_shift;
                records.extend_from_slice(&bucket.to_be_bytes()[1..]);
                records.extend_from_slice(&key.to_be_bytes());
            }
            args.push(records);
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
        }
        let mut recreated = false;
        let reply = loop {
            let (script, meta) = (&self.decide_script, &self.meta_key);
            let result = self.link.retry("deciding", |c, retry| {
                // A repeated call looks its tokens up instead of deciding
                // them again; a first call of this worker's own tokens
                // clears the memo of the call before, which has answered.
                args[flags_at] = if retry || !own_tokens {
                    b"r".to_vec()
                } else {
                    b"c".to_vec()
                };
                invoke(script, meta, &args, c)
            });
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
                Ok(reply) => break reply,
            }
        };
        self.forget.drain(..forget);
        self.parse_reply(reply, asks.len(), verdicts)
    }

    fn parse_reply(
        &mut self,
        reply: Value,
        asks: usize,
        verdicts: &mut Vec<Verdict>,
    ) -> Result<(), StoreError> {
        let bad =
            |what: &str| StoreError::Refused(format!("unexpected reply from the script: {what}"));
        let Value::Array(items) = reply else {
            return Err(bad("not an array"));
        };
        if items.len() != asks + 2 {
            return Err(bad("wrong length"));
        }
        let start = verdicts.len();
        for item in &items[..asks] {
            let Value::BulkString(bytes) = item else {
                verdicts.truncate(start);
                return Err(bad("a verdict is not a string"));
            };
            match decode_verdict(bytes) {
                Some(verdict) => verdicts.push(verdict),
                None => {
                    verdicts.truncate(start);
                    return Err(bad("a verdict cannot be read"));
                }
            }
        }
        let int = |v: &Value| match v {
            Value::Int(n) => u64::try_from(*n).ok(),
            _ => None,
        };
        self.stats.len = int(&items[asks]).ok_or_else(|| bad("length"))?;
        self.stats.evictions = int(&items[asks + 1]).ok_or_else(|| bad("evictions"))?;
        Ok(())
    }
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
/// shingles and what they are counted against (big-endian u32 each), then
/// the matched message's id as JSON.
fn decode_verdict(bytes: &[u8]) -> Option<Verdict> {
    match bytes.split_first()? {
        (b'n', []) => Some(Verdict::New),
        (b'd', rest) if rest.len() > 8 => {
            let shared = u32::from_be_bytes(rest[..4].try_into().ok()?);
            let of = u32::from_be_bytes(rest[4..8].try_into().ok()?);
            let id = MessageId::from_json(std::str::from_utf8(&rest[8..]).ok()?)?;
            Some(Verdict::Duplicate(Match {
                of: id,
                similarity: f64::from(shared) / f64::from(of),
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
                bytes += 32 + 4 * sketch.shingles.len() + 7 * sketch.band_keys.len();
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

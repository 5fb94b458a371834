//! `dedup_stream._engine`: the dedup-stream engine behind PyO3.
//!
//! The Python package (`python/dedup_stream/`) re-exports what is here and
//! adds the DataFrame helper. Layout:
//!
//! - [`options`]: the constructor's options, parsed by the CLI's rules.
//! - [`errors`]: the engine's errors as Python exceptions.
//! - [`ids`]: message ids between Python values and [`MessageId`].
//! - [`logs`]: the engine's warnings as records of Python's `logging`.
//! - this file: `Deduper` (one engine behind a mutex), `Verdict`,
//!   `compare`.
//!
//! Thread safety: a `Deduper` is one engine behind a [`Mutex`]; every
//! method takes it for the length of its decision, with the GIL released
//! (so a thread waiting for it never holds the GIL, and threads that
//! prepare texts in `check_many` run in parallel). Verdicts depend on
//! arrival order, and the lock makes each call's messages arrive together.

mod errors;
mod ids;
mod logs;
mod options;

use std::borrow::Cow;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use dedup_stream::engine::verdict::{LoneMatch, RECENT_MARGIN};
use dedup_stream::engine::{
    Ask, Explained, Explanation, IndexStats, IndexStore, Op, PairHints, Preparer, Scratch, Sketch,
    share_anchor, similarity,
};
use dedup_stream::pipeline::report::Report;
use dedup_stream::pipeline::{self, Emit, OnInvalid, PipelineConfig};
use dedup_stream::redis_index::{IndexLocation, RedisIndex, RedisOptions};
use dedup_stream::state::output::{self, OutputKind, Spelling};
use dedup_stream::state::snapshot;
use dedup_stream::wire::input::{Inputs, Source};
use dedup_stream::{Decoder, Deduper as Engine, FieldSpec, MessageId, StoreError, Verdict as V};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString, PyTuple, PyType};

use options::{Options, Raw};

/// The CLI's output checks in the words of `dedupe_jsonl`: `dst`,
/// `state`, `force=True`.
const RUN_SPELLING: Spelling = Spelling {
    option: run_argument,
    force: "force=True",
    fresh_state: false,
};

/// `dedupe_jsonl`'s argument for an output.
fn run_argument(kind: OutputKind) -> &'static str {
    match kind {
        OutputKind::Tagged => "dst",
        OutputKind::State => "state",
        other => other.option(),
    }
}

/// The CLI's `--state` check in the words of `save`.
const SAVE_SPELLING: Spelling = Spelling {
    option: save_argument,
    force: "force=True",
    fresh_state: false,
};

/// `save`'s name for its file.
fn save_argument(kind: OutputKind) -> &'static str {
    match kind {
        OutputKind::State => "save",
        other => other.option(),
    }
}

/// The paths of `src`: one path, or a list or tuple of them.
fn source_paths(src: &Bound<'_, PyAny>) -> PyResult<Vec<PathBuf>> {
    if src.is_instance_of::<PyList>() || src.is_instance_of::<PyTuple>() {
        src.extract()
    } else {
        Ok(vec![src.extract()?])
    }
}

/// Refuses `dst` and `state` as the CLI refuses `-o` and `--state`,
/// before anything is opened for writing: an input file however spelt
/// (`./`, a symbolic or hard link: the same device and inode), one file
/// for both, or an existing file of another kind (`dst` that is not
/// tagged output, unless `force`; `state` that is not a state file).
fn check_outputs(
    py: Python<'_>,
    sources: &[PathBuf],
    dst: Option<&std::path::Path>,
    state: Option<&std::path::Path>,
    force: bool,
) -> PyResult<()> {
    let inputs: Vec<Source> = sources.iter().cloned().map(Source::File).collect();
    let outputs: Vec<(OutputKind, &std::path::Path)> =
        [(OutputKind::Tagged, dst), (OutputKind::State, state)]
            .into_iter()
            .filter_map(|(kind, path)| Some((kind, path?)))
            .collect();
    output::check_spelt(&outputs, &inputs, force, RUN_SPELLING).map_err(|e| errors::refused(py, e))
}

/// `dedupe_jsonl`'s checks of its paths, for the module-level function to
/// make before it loads `state` (see [`check_outputs`]).
#[pyfunction]
#[pyo3(signature = (src, dst, state=None, force=false))]
fn _check_outputs(
    py: Python<'_>,
    src: &Bound<'_, PyAny>,
    dst: PathBuf,
    state: Option<PathBuf>,
    force: bool,
) -> PyResult<()> {
    check_outputs(py, &source_paths(src)?, Some(&dst), state.as_deref(), force)
}

/// Where a `Deduper`'s index lives.
enum Store {
    /// In this process.
    Memory(Box<Engine>),
    /// In Redis, shared with CLI workers and other processes.
    Redis(Box<RedisIndex>),
}

impl Store {
    fn decide(&mut self, asks: &[Ask<'_>], out: &mut Vec<V>) -> Result<(), StoreError> {
        match self {
            Store::Memory(engine) => engine.decide(asks, out),
            Store::Redis(index) => index.decide(asks, out),
        }
    }

    /// Turns explanations on or off; whether the store gives them (the
    /// index in memory does).
    fn set_explain(&mut self, on: bool) -> bool {
        match self {
            Store::Memory(engine) => IndexStore::set_explain(engine.as_mut(), on),
            Store::Redis(index) => index.set_explain(on),
        }
    }

    /// The explanations of the last `decide`, when on.
    fn explanations(&self) -> &[Explanation] {
        match self {
            Store::Memory(engine) => IndexStore::explanations(engine.as_ref()),
            Store::Redis(index) => index.explanations(),
        }
    }

    fn stats(&self) -> IndexStats {
        match self {
            Store::Memory(engine) => engine.stats(),
            Store::Redis(index) => index.stats(),
        }
    }
}

/// What the mutex guards.
struct Inner {
    store: Store,
    /// Buffers of `check`'s preparation.
    scratch: Scratch,
    /// The next id given to a message checked without one.
    next_auto: u64,
    counts: Counts,
}

/// What this `Deduper` decided (`stats()`).
#[derive(Clone, Copy, Debug, Default)]
struct Counts {
    messages: u64,
    new: u64,
    duplicates: u64,
    queries: u64,
    invalid: u64,
}

impl Counts {
    fn add(&mut self, verdicts: &[V]) {
        for v in verdicts {
            if v.is_deletion() {
                // A deletion notice is not a message.
                continue;
            }
            self.messages += 1;
            if v.is_duplicate() {
                self.duplicates += 1;
            } else {
                self.new += 1;
            }
        }
    }
}

/// Messages sketched together, their sketches in shared buffers (as the
/// CLI's batches hold them).
#[derive(Default)]
struct Batch {
    shingles: Vec<u32>,
    band_keys: Vec<u32>,
    items: Vec<Prepared>,
}

struct Prepared {
    id: MessageId,
    shingles: std::ops::Range<usize>,
    band_keys: std::ops::Range<usize>,
    set_fingerprint: u64,
    truncated: bool,
    time: i64,
    /// A deletion notice (`check_records`): the id is forgotten.
    remove: bool,
}

impl Batch {
    /// A deletion notice's id, to forget where it stands.
    fn push_removal(&mut self, id: MessageId) {
        let (s0, b0) = (self.shingles.len(), self.band_keys.len());
        self.items.push(Prepared {
            id,
            shingles: s0..s0,
            band_keys: b0..b0,
            set_fingerprint: 0,
            truncated: false,
            time: 0,
            remove: true,
        });
    }

    /// Sketches a text; `false` (nothing added) when it has nothing to
    /// compare and the engine refuses such texts (`empty_text="invalid"`).
    fn push(
        &mut self,
        preparer: &Preparer,
        scratch: &mut Scratch,
        id: MessageId,
        text: &str,
        urls: &[(std::borrow::Cow<'_, str>, std::borrow::Cow<'_, str>)],
        time: i64,
    ) -> bool {
        let (s0, b0) = (self.shingles.len(), self.band_keys.len());
        let set_fingerprint =
            preparer.sketch_into(text, urls, scratch, &mut self.shingles, &mut self.band_keys);
        if self.shingles.len() == s0 && preparer.refuses_empty() {
            self.band_keys.truncate(b0);
            return false;
        }
        self.items.push(Prepared {
            id,
            shingles: s0..self.shingles.len(),
            band_keys: b0..self.band_keys.len(),
            set_fingerprint,
            truncated: scratch.truncated(),
            time,
            remove: false,
        });
        true
    }

    fn asks(&self, op: Op) -> Vec<Ask<'_>> {
        self.items
            .iter()
            .map(|p| Ask {
                id: &p.id,
                sketch: Sketch {
                    shingles: &self.shingles[p.shingles.clone()],
                    band_keys: &self.band_keys[p.band_keys.clone()],
                    set_fingerprint: p.set_fingerprint,
                    truncated: p.truncated,
                },
                op: if p.remove { Op::Remove } else { op },
                token: None,
                time: p.time,
            })
            .collect()
    }
}

/// How many messages go to the index in one call (the CLI's batch size).
const CHUNK: usize = 512;

/// The shared engine: the mutex, and what needs no lock.
struct Shared {
    inner: Mutex<Inner>,
    /// Set on Ctrl-C during a call (see [`interruptible`]).
    stop: Arc<AtomicBool>,
    preparer: Preparer,
    decoder: Decoder,
    options: Options,
}

impl Shared {
    /// Runs `work` without the GIL: directly for an index in memory (it
    /// never waits on anything but the lock), interruptibly for one in
    /// Redis.
    fn run<T: Send>(&self, py: Python<'_>, work: impl FnOnce() -> T + Send) -> PyResult<T> {
        match self.options.location {
            IndexLocation::Memory => Ok(py.detach(work)),
            _ => interruptible(py, &self.stop, work),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic inside a decision is a bug; the index is still whole
        // (every change is made in one place), so the lock is taken back.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// An index store for the pipeline that decides through the `Deduper`'s
/// lock, batch by batch.
struct Locked(Arc<Shared>);

impl IndexStore for Locked {
    fn decide(&mut self, asks: &[Ask<'_>], verdicts: &mut Vec<V>) -> Result<(), StoreError> {
        let mut inner = self.0.lock();
        let start = verdicts.len();
        inner.store.decide(asks, verdicts)?;
        inner.counts.add(&verdicts[start..]);
        Ok(())
    }

    fn stats(&self) -> IndexStats {
        self.0.lock().store.stats()
    }
}

/// A streaming near-duplicate filter: the dedup-stream engine, with the
/// CLI's options and defaults.
///
/// Each `check` decides whether a text is new or a near-duplicate of one
/// checked before, and indexes it. Safe to share between threads: one
/// lock inside, taken without the GIL.
#[pyclass(frozen, module = "dedup_stream._engine")]
struct Deduper {
    shared: Arc<Shared>,
}

/// The milliseconds since the epoch of a `created_at`: a str in Twitter's
/// v1.1 or v2 format, an int of milliseconds, or a `datetime`; `None` (or
/// an unreadable str): now, as the CLI takes a line without one.
fn message_time(value: Option<&Bound<'_, PyAny>>) -> PyResult<i64> {
    let now = dedup_stream::wire::timestamp::now_millis;
    let Some(value) = value.filter(|v| !v.is_none()) else {
        return Ok(now());
    };
    if let Ok(text) = value.cast::<PyString>() {
        return Ok(
            dedup_stream::wire::timestamp::parse_created_at(&text.to_cow()?).unwrap_or_else(now),
        );
    }
    if let Ok(ms) = value.extract::<i64>() {
        return Ok(ms.clamp(0, dedup_stream::wire::timestamp::MAX_TIME));
    }
    if value.hasattr("timestamp")? {
        let seconds: f64 = value.call_method0("timestamp")?.extract()?;
        return Ok(
            ((seconds * 1000.0).floor() as i64).clamp(0, dedup_stream::wire::timestamp::MAX_TIME)
        );
    }
    Err(pyo3::exceptions::PyTypeError::new_err(
        "created_at takes a str (Twitter v1.1 or v2 format), an int of milliseconds since the \
         epoch, or a datetime",
    ))
}

/// Runs `work` without the GIL on a helper thread while this thread
/// watches for Python's signals: on Ctrl-C, `stop` is set (an index in
/// Redis waiting for Redis gives up; the pipeline stops reading at a line
/// boundary and drains), the work is let finish, and `KeyboardInterrupt`
/// is raised.
fn interruptible<T: Send>(
    py: Python<'_>,
    stop: &AtomicBool,
    work: impl FnOnce() -> T + Send,
) -> PyResult<T> {
    match interruptible_keeping(py, stop, work)? {
        (_, Some(signal)) => Err(signal),
        (value, None) => Ok(value),
    }
}

/// [`interruptible`], handing back what `work` returned beside the signal
/// that stopped it (if one did), for a call that returns what it decided
/// before the stop.
fn interruptible_keeping<T: Send>(
    py: Python<'_>,
    stop: &AtomicBool,
    work: impl FnOnce() -> T + Send,
) -> PyResult<(T, Option<PyErr>)> {
    let done = (Mutex::new(false), Condvar::new());
    let mut signal = None;
    let result = std::thread::scope(|scope| {
        let handle = scope.spawn(|| {
            let value = work();
            *done.0.lock().unwrap_or_else(PoisonError::into_inner) = true;
            done.1.notify_all();
            value
        });
        loop {
            let finished = py.detach(|| {
                let guard = done.0.lock().unwrap_or_else(PoisonError::into_inner);
                let (guard, _) = done
                    .1
                    .wait_timeout_while(guard, Duration::from_millis(50), |d| !*d)
                    .unwrap_or_else(PoisonError::into_inner);
                *guard
            });
            if finished {
                break;
            }
            logs::flush(py);
            if signal.is_none()
                && let Err(e) = py.check_signals()
            {
                stop.store(true, Ordering::Relaxed);
                signal = Some(e);
            }
        }
        py.detach(|| handle.join())
    });
    logs::flush(py);
    stop.store(false, Ordering::Relaxed);
    let value = result.map_err(|_| {
        pyo3::panic::PanicException::new_err("dedup-stream: a worker thread panicked")
    })?;
    Ok((value, signal))
}

/// A `KeyboardInterrupt` (or other signal's error) that stopped a batch
/// call, with the call's list as it stood attached as `verdicts`: those
/// decided (and indexed), then `None` for those that were not.
fn stopped_with(py: Python<'_>, signal: PyErr, verdicts: Vec<Option<Verdict>>) -> PyErr {
    let _ = signal.value(py).setattr("verdicts", verdicts);
    signal
}

/// A message's URL entities: short link to expanded link, as the CLI
/// reads them from a tweet's `entities` (so that two posts with one
/// caption and different links stay apart, and a copy with another t.co
/// address of the same link is caught): a dict, or (short, expanded)
/// pairs; `None`: none.
type Urls = Vec<(Cow<'static, str>, Cow<'static, str>)>;

fn read_urls(value: Option<&Bound<'_, PyAny>>) -> PyResult<Urls> {
    let Some(value) = value.filter(|v| !v.is_none()) else {
        return Ok(Vec::new());
    };
    let pairs: Vec<(String, String)> = if let Ok(dict) = value.cast::<PyDict>() {
        dict.iter()
            .map(|(k, v)| Ok((k.extract()?, v.extract()?)))
            .collect::<PyResult<_>>()?
    } else {
        value.extract().map_err(|_| {
            pyo3::exceptions::PyTypeError::new_err(
                "urls takes a dict of short link to expanded link, or (short, expanded) pairs",
            )
        })?
    };
    Ok(pairs
        .into_iter()
        .map(|(short, long)| (Cow::Owned(short), Cow::Owned(long)))
        .collect())
}

impl Deduper {
    fn open(py: Python<'_>, options: Options) -> PyResult<Deduper> {
        let config = options.config.clone();
        let stop = Arc::new(AtomicBool::new(false));
        let store = match &options.location {
            IndexLocation::Memory => Store::Memory(Box::new(
                Engine::new(config.clone()).map_err(|e| errors::config(py, e.to_string()))?,
            )),
            location => {
                let location = location.clone();
                let name = options.index_name.clone();
                let redis_options = RedisOptions {
                    timeout: Some(options.redis_timeout),
                    wait: options.redis_wait,
                    stop: Some(Arc::clone(&stop)),
                    ..RedisOptions::default()
                };
                let opened = interruptible(py, &stop, || {
                    RedisIndex::open(&location, &name, &config, redis_options)
                })?;
                Store::Redis(Box::new(opened.map_err(|e| errors::store(py, &e))?))
            }
        };
        Ok(Deduper {
            shared: Arc::new(Shared {
                inner: Mutex::new(Inner {
                    store,
                    scratch: Scratch::default(),
                    next_auto: 0,
                    counts: Counts::default(),
                }),
                stop,
                preparer: Preparer::new(&config),
                decoder: Decoder::new(options.fields()),
                options,
            }),
        })
    }

    /// One message, checked or queried, explained if asked.
    #[allow(clippy::too_many_arguments)]
    fn one(
        &self,
        py: Python<'_>,
        text: &str,
        id: Option<&Bound<'_, PyAny>>,
        created_at: Option<&Bound<'_, PyAny>>,
        urls: Option<&Bound<'_, PyAny>>,
        op: Op,
        explain: bool,
    ) -> PyResult<Verdict> {
        let urls = read_urls(urls)?;
        let id = match id.filter(|v| !v.is_none()) {
            Some(id) => Some(ids::from_py(id)?),
            None => None,
        };
        let time = message_time(created_at)?;
        let shared = &*self.shared;
        let result = shared.run(py, || {
            let mut guard = shared.lock();
            let inner = &mut *guard;
            let id = id.unwrap_or_else(|| match op {
                // A query without an id is never a repeat, even where the
                // next automatic id was given to a message by hand: it asks
                // under the id "\u0000", which no feed gives a message (a
                // valid JSON string, so an index in Redis logs it as any).
                Op::Query => MessageId::Raw(r#""\u0000""#.into()),
                _ => MessageId::Integer(inner.next_auto),
            });
            if op == Op::Check {
                inner.next_auto += 1;
            }
            let mut batch = Batch::default();
            if !batch.push(&shared.preparer, &mut inner.scratch, id, text, &urls, time) {
                inner.counts.invalid += 1;
                return Ok(None);
            }
            let mut out = Vec::with_capacity(1);
            // Explanations are on for this one call only.
            let explaining = explain && inner.store.set_explain(true);
            if explain && !explaining {
                return Err(StoreError::Refused(
                    "explain=True needs the index in memory".into(),
                ));
            }
            let decided = inner.store.decide(&batch.asks(op), &mut out);
            let explanation = inner.store.explanations().first().cloned();
            if explaining {
                inner.store.set_explain(false);
            }
            decided?;
            match op {
                Op::Check => inner.counts.add(&out),
                Op::Query => inner.counts.queries += 1,
                Op::Remove => {}
            }
            Ok(out.pop().map(|v| (v, explanation)))
        })?;
        match result {
            Ok(Some((v, explanation))) => Ok(Verdict(v, explanation)),
            Ok(None) => Err(errors::invalid(
                py,
                dedup_stream::InvalidReason::NothingToCompare.to_string(),
            )),
            Err(e) => Err(errors::store(py, &e)),
        }
    }

    /// Decides prepared messages (in order), a chunk at a time, and stops
    /// at a chunk's end once `stop` is set (Ctrl-C): the verdicts of the
    /// chunks decided, and the store's error if one failed.
    fn decide_batches(&self, batches: &[Batch]) -> (Vec<V>, Option<StoreError>) {
        let mut out = Vec::new();
        for batch in batches {
            if self.shared.stop.load(Ordering::Relaxed) {
                break;
            }
            let mut inner = self.shared.lock();
            let start = out.len();
            if let Err(e) = inner.store.decide(&batch.asks(Op::Check), &mut out) {
                // A chunk is decided whole or not at all.
                out.truncate(start);
                return (out, Some(e));
            }
            inner.counts.add(&out[start..]);
        }
        (out, None)
    }

    /// The error of a state-file operation on an index in Redis.
    fn in_redis(&self, py: Python<'_>) -> PyErr {
        errors::dedup(
            py,
            format!(
                "the index is in Redis ({}): Redis keeps it, so use Redis persistence \
                 (appendonly yes, or RDB snapshots) instead of a state file",
                self.shared.options.location
            ),
        )
    }
}

#[pymethods]
impl Deduper {
    #[new]
    #[pyo3(
        text_signature = "(threshold=0.8, *, measure='containment', shingle='words:1-2', \
        sample='all', capacity=1000000, window=None, recent=3000, empty_text='new', max_bucket=32, \
        max_index_bytes=None, index='memory', index_name='dedup-stream', redis_timeout='30s', \
        redis_wait='forever', id_field=None, text_field=None)"
    )]
    #[pyo3(signature = (
        threshold=None, *, measure=None, shingle=None, sample=None, capacity=None, window=None,
        recent=None, empty_text=None, max_bucket=None, max_index_bytes=None, index=None,
        index_name=None, redis_timeout=None, redis_wait=None, id_field=None, text_field=None
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new<'py>(
        py: Python<'py>,
        threshold: Option<Bound<'py, PyAny>>,
        measure: Option<Bound<'py, PyAny>>,
        shingle: Option<Bound<'py, PyAny>>,
        sample: Option<Bound<'py, PyAny>>,
        capacity: Option<Bound<'py, PyAny>>,
        window: Option<Bound<'py, PyAny>>,
        recent: Option<Bound<'py, PyAny>>,
        empty_text: Option<Bound<'py, PyAny>>,
        max_bucket: Option<Bound<'py, PyAny>>,
        max_index_bytes: Option<Bound<'py, PyAny>>,
        index: Option<Bound<'py, PyAny>>,
        index_name: Option<Bound<'py, PyAny>>,
        redis_timeout: Option<Bound<'py, PyAny>>,
        redis_wait: Option<Bound<'py, PyAny>>,
        id_field: Option<Bound<'py, PyAny>>,
        text_field: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Deduper> {
        let raw = Raw {
            threshold,
            measure,
            shingle,
            sample,
            capacity,
            window,
            recent,
            empty_text,
            max_bucket,
            max_index_bytes,
            index,
            index_name,
            redis_timeout,
            redis_wait,
            id_field,
            text_field,
        };
        Deduper::open(py, raw.read(py)?)
    }

    /// Decides whether `text` is new or a near-duplicate of a text checked
    /// before, and indexes it. With `explain=True` the verdict's `explain`
    /// says what decided it (the CLI's `--explain`; index in memory only).
    #[pyo3(signature = (text, id=None, created_at=None, urls=None, *, explain=false))]
    fn check(
        &self,
        py: Python<'_>,
        text: &str,
        id: Option<&Bound<'_, PyAny>>,
        created_at: Option<&Bound<'_, PyAny>>,
        urls: Option<&Bound<'_, PyAny>>,
        explain: bool,
    ) -> PyResult<Verdict> {
        self.one(py, text, id, created_at, urls, Op::Check, explain)
    }

    /// Forgets the message indexed under `id` (a deleted tweet), with
    /// everything the index holds of it; every message indexed under that
    /// id goes (a number and its digits as a string are one id). True if
    /// the index held it. A later copy is decided against what remains; an
    /// unknown id changes nothing. With `index="redis://…"`, every worker
    /// sharing the index forgets it, in the index's log order.
    fn remove(&self, py: Python<'_>, id: &Bound<'_, PyAny>) -> PyResult<bool> {
        let id = ids::from_py(id)?;
        let shared = &*self.shared;
        let result = shared.run(py, || {
            let ask = Ask {
                id: &id,
                sketch: Sketch {
                    shingles: &[],
                    band_keys: &[],
                    set_fingerprint: 0,
                    truncated: false,
                },
                op: Op::Remove,
                token: None,
                time: 0,
            };
            let mut out = Vec::with_capacity(1);
            shared.lock().store.decide(&[ask], &mut out)?;
            Ok::<bool, StoreError>(matches!(out.pop(), Some(V::Deleted { held: true })))
        })?;
        result.map_err(|e| errors::store(py, &e))
    }

    /// Decides like `check`, but indexes nothing and refreshes nothing.
    #[pyo3(signature = (text, created_at=None, urls=None, *, explain=false))]
    fn query(
        &self,
        py: Python<'_>,
        text: &str,
        created_at: Option<&Bound<'_, PyAny>>,
        urls: Option<&Bound<'_, PyAny>>,
        explain: bool,
    ) -> PyResult<Verdict> {
        self.one(py, text, None, created_at, urls, Op::Query, explain)
    }

    /// Checks many texts in order, with the GIL released; a list of
    /// verdicts (`None` for a text refused by `empty_text="invalid"`).
    #[pyo3(signature = (texts, ids=None, urls=None))]
    fn check_many<'py>(
        &self,
        py: Python<'py>,
        texts: &Bound<'py, PyAny>,
        ids: Option<&Bound<'py, PyAny>>,
        urls: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Vec<Option<Verdict>>> {
        let mut owned: Vec<Option<String>> = Vec::new();
        for text in texts.try_iter()? {
            let text = text?;
            owned.push(if text.is_none() {
                None
            } else {
                Some(text.extract::<String>().map_err(|_| {
                    pyo3::exceptions::PyTypeError::new_err(format!(
                        "texts must be str (or None), got {}",
                        text.get_type()
                            .name()
                            .map(|n| n.to_string())
                            .unwrap_or_default()
                    ))
                })?)
            });
        }
        let given: Option<Vec<MessageId>> = match ids.filter(|v| !v.is_none()) {
            Some(ids) => {
                let mut out = Vec::with_capacity(owned.len());
                for id in ids.try_iter()? {
                    out.push(ids::from_py(&id?)?);
                }
                if out.len() != owned.len() {
                    return Err(pyo3::exceptions::PyValueError::new_err(format!(
                        "ids has {} items, texts {}",
                        out.len(),
                        owned.len()
                    )));
                }
                Some(out)
            }
            None => None,
        };
        let urls: Vec<Urls> = match urls.filter(|v| !v.is_none()) {
            Some(urls) => {
                let mut out = Vec::with_capacity(owned.len());
                for entry in urls.try_iter()? {
                    out.push(read_urls(Some(&entry?))?);
                }
                if out.len() != owned.len() {
                    return Err(pyo3::exceptions::PyValueError::new_err(format!(
                        "urls has {} items, texts {}",
                        out.len(),
                        owned.len()
                    )));
                }
                out
            }
            None => Vec::new(),
        };
        let shared = &*self.shared;
        let this = self;
        let (result, signal) = interruptible_keeping(py, &shared.stop, move || {
            // Auto ids are taken for the whole call at once.
            let first_auto = {
                let mut inner = shared.lock();
                let first = inner.next_auto;
                if given.is_none() {
                    inner.next_auto += owned.len() as u64;
                }
                first
            };
            let now = dedup_stream::wire::timestamp::now_millis();
            let mut scratch = Scratch::default();
            let mut batches = Vec::new();
            let mut refused = Vec::new();
            let mut batch = Batch::default();
            let mut given = given.map(Vec::into_iter);
            for (n, text) in owned.iter().enumerate() {
                if n % CHUNK == 0 && shared.stop.load(Ordering::Relaxed) {
                    break; // Ctrl-C: nothing more is prepared or decided.
                }
                let id = match &mut given {
                    Some(ids) => ids.next().expect("as many ids as texts"),
                    None => MessageId::Integer(first_auto + n as u64),
                };
                let text = text.as_deref().unwrap_or("");
                let urls = urls.get(n).map_or(&[][..], Vec::as_slice);
                if !batch.push(&shared.preparer, &mut scratch, id, text, urls, now) {
                    refused.push(n);
                }
                if batch.items.len() == CHUNK {
                    batches.push(std::mem::take(&mut batch));
                }
            }
            batches.push(batch);
            if !refused.is_empty() {
                shared.lock().counts.invalid += refused.len() as u64;
            }
            let (verdicts, failed) = this.decide_batches(&batches);
            let placed = place(owned.len(), verdicts, &refused);
            match failed {
                Some(e) => Err((e, placed)),
                None => Ok(placed),
            }
        })?;
        match (result, signal) {
            (Ok(placed) | Err((_, placed)), Some(signal)) => Err(stopped_with(py, signal, placed)),
            (Ok(placed), None) => Ok(placed),
            (Err((e, _)), None) => Err(errors::store(py, &e)),
        }
    }

    /// Checks tweets given as dicts (or JSON text), finding the id and the
    /// text as the CLI does (v1.1 and v2 shapes, native retweets, URL
    /// entities), or at `id_field` / `text_field`.
    #[pyo3(signature = (records, id_field=None, text_field=None, on_invalid="skip"))]
    fn check_records<'py>(
        &self,
        py: Python<'py>,
        records: &Bound<'py, PyAny>,
        id_field: Option<&Bound<'py, PyAny>>,
        text_field: Option<&Bound<'py, PyAny>>,
        on_invalid: &str,
    ) -> PyResult<Vec<Option<Verdict>>> {
        let raise = match on_invalid {
            "skip" => false,
            "raise" => true,
            other => {
                return Err(options::bad_value(
                    py,
                    "on_invalid",
                    other,
                    "must be skip or raise",
                ));
            }
        };
        let custom =
            if id_field.is_some_and(|v| !v.is_none()) || text_field.is_some_and(|v| !v.is_none()) {
                let (id, text) = options::read_fields(py, id_field, text_field)?;
                let id = id.or_else(|| self.shared.options.id_field.clone());
                let text = if text.is_empty() {
                    self.shared.options.text_field.clone()
                } else {
                    text
                };
                Some(Decoder::new(
                    FieldSpec::new(id.as_deref(), text)
                        .map_err(|e| errors::config(py, e.to_string()))?,
                ))
            } else {
                None
            };
        let dumps = py.import("json")?.getattr("dumps")?;
        let kwargs = PyDict::new(py);
        kwargs.set_item("ensure_ascii", false)?;
        kwargs.set_item("separators", PyTuple::new(py, [",", ":"])?)?;
        let mut lines: Vec<Vec<u8>> = Vec::new();
        let read = (|| {
            for record in records.try_iter()? {
                let record = record?;
                let line: Vec<u8> = if let Ok(text) = record.cast::<PyString>() {
                    text.to_cow()?.as_bytes().to_vec()
                } else if let Ok(bytes) = record.cast::<PyBytes>() {
                    bytes.as_bytes().to_vec()
                } else {
                    dumps
                        .call((&record,), Some(&kwargs))?
                        .extract::<String>()?
                        .into_bytes()
                };
                lines.push(line);
            }
            Ok::<(), PyErr>(())
        })();
        if let Err(e) = read {
            // Ctrl-C while the records were read (json.dumps runs Python
            // code, which hears it): nothing was decided.
            if e.is_instance_of::<pyo3::exceptions::PyKeyboardInterrupt>(py) {
                let total = records.len().unwrap_or(lines.len());
                return Err(stopped_with(py, e, (0..total).map(|_| None).collect()));
            }
            return Err(e);
        }
        let shared = &*self.shared;
        let this = self;
        let (result, signal) = interruptible_keeping(py, &shared.stop, move || {
            let decoder = custom.as_ref().unwrap_or(&shared.decoder);
            let now = dedup_stream::wire::timestamp::now_millis();
            let mut scratch = Scratch::default();
            let mut batches = Vec::new();
            let mut refused = Vec::new();
            let mut batch = Batch::default();
            for (n, line) in lines.iter().enumerate() {
                if n % CHUNK == 0 && shared.stop.load(Ordering::Relaxed) {
                    break; // Ctrl-C: nothing more is prepared or decided.
                }
                let line = line.strip_suffix(b"\n").unwrap_or(line);
                match decoder.decode(line) {
                    Ok(record) if record.deletion => batch.push_removal(record.id),
                    Ok(record) => {
                        let time = record.created_at_millis().unwrap_or(now);
                        if !batch.push(
                            &shared.preparer,
                            &mut scratch,
                            record.id,
                            &record.text,
                            &record.urls,
                            time,
                        ) {
                            if raise {
                                return Err(Err(format!(
                                    "record {n}: {}",
                                    dedup_stream::InvalidReason::NothingToCompare
                                )));
                            }
                            refused.push(n);
                        }
                    }
                    Err(reason) => {
                        if raise {
                            return Err(Err(format!("record {n}: {reason}")));
                        }
                        refused.push(n);
                    }
                }
                if batch.items.len() == CHUNK {
                    batches.push(std::mem::take(&mut batch));
                }
            }
            batches.push(batch);
            if !refused.is_empty() {
                shared.lock().counts.invalid += refused.len() as u64;
            }
            let (verdicts, failed) = this.decide_batches(&batches);
            let placed = place(lines.len(), verdicts, &refused);
            match failed {
                Some(e) => Err(Ok((e, placed))),
                None => Ok(placed),
            }
        })?;
        match (result, signal) {
            (Ok(placed) | Err(Ok((_, placed))), Some(signal)) => {
                Err(stopped_with(py, signal, placed))
            }
            (Ok(placed), None) => Ok(placed),
            (Err(Ok((e, _))), None) => Err(errors::store(py, &e)),
            (Err(Err(message)), _) => Err(errors::invalid(py, message)),
        }
    }

    /// Streams JSON-lines files through the CLI's pipeline into `dst`,
    /// with this `Deduper`'s index: each line written as it came with its
    /// verdict spliced in, byte for byte as `dedup-stream` writes it.
    /// Returns the run's summary (what `--stats` writes).
    ///
    /// `dst` is checked first as the CLI checks `-o`: never an input file
    /// (however spelt), and an existing file only if it is tagged output
    /// or with `force=True`; `ConfigError` (a `ValueError`) otherwise.
    #[pyo3(signature = (src, dst, *, emit="all", on_invalid="skip", threads=None, max_line_bytes=None, force=false))]
    #[allow(clippy::too_many_arguments)]
    fn dedupe_jsonl<'py>(
        &self,
        py: Python<'py>,
        src: &Bound<'py, PyAny>,
        dst: PathBuf,
        emit: &str,
        on_invalid: &str,
        threads: Option<&Bound<'py, PyAny>>,
        max_line_bytes: Option<&Bound<'py, PyAny>>,
        force: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let sources = source_paths(src)?;
        let emit = match emit {
            "all" => Emit::All,
            "new" => Emit::New,
            "duplicates" => Emit::Duplicates,
            other => {
                return Err(options::bad_value(
                    py,
                    "emit",
                    other,
                    "must be all, new or duplicates",
                ));
            }
        };
        let on_invalid = match on_invalid {
            "skip" => OnInvalid::Skip,
            "fail" => OnInvalid::Fail,
            other => {
                return Err(options::bad_value(
                    py,
                    "on_invalid",
                    other,
                    "must be skip or fail",
                ));
            }
        };
        let mut config = PipelineConfig {
            fields: self.shared.options.fields(),
            emit,
            on_invalid,
            ..PipelineConfig::default()
        };
        if let Some(v) = threads.filter(|v| !v.is_none()) {
            let text = options::as_cli_text("threads", v)?;
            // 0 is the default, one a CPU, as the CLI's `--threads 0`.
            if let Some(n) = dedup_stream::values::parse_threads(&text)
                .map_err(|e| options::bad_value(py, "threads", &text, e))?
            {
                config.threads = n;
            }
        }
        if let Some(v) = max_line_bytes.filter(|v| !v.is_none()) {
            let text = options::as_cli_text("max_line_bytes", v)?;
            config.max_line_bytes = options::at_least_one(&text)
                .map_err(|e| options::bad_value(py, "max_line_bytes", &text, e))?;
        }
        // Every input is checked before the run, as the CLI checks them, but
        // only a regular file is opened to see that it can be read: opening
        // and closing a named pipe (a FIFO) would cut off a writer that
        // opened it meanwhile (its next write fails with EPIPE).
        for path in &sources {
            let meta = std::fs::metadata(path).map_err(|e| errors::io(&e, path))?;
            if meta.is_dir() {
                return Err(pyo3::exceptions::PyIsADirectoryError::new_err((
                    21,
                    "Is a directory",
                    path.display().to_string(),
                )));
            }
            if meta.is_file() {
                std::fs::File::open(path).map_err(|e| errors::io(&e, path))?;
            }
        }
        check_outputs(py, &sources, Some(&dst), None, force)?;
        let sources: Vec<Source> = sources.into_iter().map(Source::File).collect();
        let output = std::fs::File::create(&dst).map_err(|e| errors::io(&e, &dst))?;
        let inputs = Inputs::new(sources);
        // Invalid lines are counted in the summary, not warned about.
        let report = Arc::new(Report::new(inputs.line_map(), Some(0)));
        config.report = Arc::clone(&report);
        let preparer = self.shared.preparer.clone();
        let store = Locked(Arc::clone(&self.shared));
        let threads = config.threads.get();
        let stop = Arc::clone(&self.shared.stop);
        let run = interruptible(py, &self.shared.stop, move || {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(threads.max(1))
                .enable_all()
                .build()
                .map_err(|e| format!("cannot start the runtime: {e}"))?;
            let result = runtime.block_on(pipeline::run(
                config,
                preparer,
                store,
                inputs,
                output,
                async move {
                    while !stop.load(Ordering::Relaxed) {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                },
            ));
            runtime.shutdown_background();
            match result {
                Ok(finished) => {
                    let hint = report.no_usable_line(&finished.summary);
                    let json = finished.summary.to_json(&finished.store.stats());
                    Ok((json.to_string(), hint))
                }
                Err(dedup_stream::Error::Invalid(invalid)) => {
                    Err(format!("invalid input: {}", report.describe(&invalid)))
                }
                Err(e) => Err(e.to_string()),
            }
        })?;
        match run {
            Ok((json, None)) => py.import("json")?.call_method1("loads", (json,)),
            Ok((_, Some(hint))) => Err(errors::invalid(py, format!("no usable line: {hint}"))),
            Err(message) if message.starts_with("invalid input") => {
                Err(errors::invalid(py, message))
            }
            Err(message) => Err(errors::dedup(py, message)),
        }
    }

    /// How many messages the index holds.
    fn __len__(&self, py: Python<'_>) -> usize {
        py.detach(|| self.shared.lock().store.stats().len as usize)
    }

    /// Counters and the index's fill, as a dict.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let (counts, index) = py.detach(|| {
            let inner = self.shared.lock();
            (inner.counts, inner.store.stats())
        });
        let d = PyDict::new(py);
        d.set_item("messages", counts.messages)?;
        d.set_item("new", counts.new)?;
        d.set_item("duplicates", counts.duplicates)?;
        d.set_item("queries", counts.queries)?;
        d.set_item("invalid", counts.invalid)?;
        d.set_item("index_size", index.len)?;
        d.set_item("capacity", index.capacity)?;
        d.set_item("evicted", index.evictions)?;
        d.set_item("index_bytes", index.bytes)?;
        d.set_item("index_max_bytes", index.max_bytes)?;
        Ok(d)
    }

    /// The options this `Deduper` was made with, as keyword arguments.
    #[getter]
    fn options<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        self.shared.options.to_kwargs(py)
    }

    /// Saves the index to a state file in the CLI's format (`--state`),
    /// atomically. As the CLI's `--state`, an existing file is replaced
    /// only if it is a state file (or empty): anything else, or a device
    /// such as `/dev/null`, is refused with `ConfigError`.
    fn save(&self, py: Python<'_>, path: PathBuf) -> PyResult<()> {
        output::check_spelt(&[(OutputKind::State, &path)], &[], false, SAVE_SPELLING)
            .map_err(|e| errors::refused(py, e))?;
        let bytes = py.detach(|| match &self.shared.lock().store {
            Store::Memory(engine) => Some(snapshot::encode(engine)),
            Store::Redis(_) => None,
        });
        let Some(bytes) = bytes else {
            return Err(self.in_redis(py));
        };
        py.detach(|| snapshot::write_atomic(&path, &bytes))
            .map_err(|e| errors::io(&e, &path))
    }

    /// A `Deduper` with `options`, its index loaded from a state file the
    /// CLI (or `save`) wrote.
    #[classmethod]
    #[pyo3(signature = (path, **options))]
    fn load<'py>(
        cls: &Bound<'py, PyType>,
        path: PathBuf,
        options: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let py = cls.py();
        let deduper = cls.call((), options)?;
        let this = deduper.cast::<Deduper>()?.get();
        let loaded = py.detach(|| {
            let mut guard = this.shared.lock();
            let inner = &mut *guard;
            let Store::Memory(engine) = &mut inner.store else {
                return None;
            };
            let loaded = snapshot::load(&path, engine);
            if let Ok(snapshot::Loaded::Restored(_)) = loaded {
                inner.next_auto = engine.next_seq();
            }
            Some(loaded)
        });
        let Some(loaded) = loaded else {
            return Err(this.in_redis(py));
        };
        match loaded {
            Ok(snapshot::Loaded::Restored(_)) => Ok(deduper),
            Ok(snapshot::Loaded::Missing) => Err(pyo3::exceptions::PyFileNotFoundError::new_err((
                2,
                "No such file or directory",
                path.display().to_string(),
            ))),
            Err(e) => Err(errors::snapshot(py, &e)),
        }
    }

    /// Pickling: the options and, for an index in memory, its state-file
    /// bytes (an index in Redis is pickled as a reference to it).
    fn __reduce__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        let (state, next_auto) = py.detach(|| {
            let inner = self.shared.lock();
            let state = match &inner.store {
                Store::Memory(engine) => Some(snapshot::encode(engine)),
                Store::Redis(_) => None,
            };
            (state, inner.next_auto)
        });
        let restore = py.import("dedup_stream._engine")?.getattr("_unpickle")?;
        let state = state.map(|b| PyBytes::new(py, &b));
        let args = (self.shared.options.to_kwargs(py)?, state, next_auto).into_pyobject(py)?;
        PyTuple::new(py, [restore, args.into_any()])
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        let len = self.__len__(py);
        let o = &self.shared.options;
        let c = &o.config;
        format!(
            "Deduper(threshold={}, measure='{}', shingle='{}', capacity={}, window={}, \
             recent={}, index='{}', len={len})",
            c.threshold,
            c.measure,
            c.shingle_settings(),
            c.capacity,
            c.window.map_or("None".to_string(), |w| format!("'{w}'")),
            c.recent,
            o.location,
        )
    }

    /// The constructor's defaults (the CLI's), as keyword arguments.
    #[staticmethod]
    fn defaults(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
        options::defaults(py)
    }
}

/// Puts verdicts back among the refused positions (`None`).
fn place(total: usize, verdicts: Vec<V>, refused: &[usize]) -> Vec<Option<Verdict>> {
    let mut verdicts = verdicts.into_iter();
    let mut refused = refused.iter().peekable();
    (0..total)
        .map(|n| {
            if refused.next_if(|&&r| r == n).is_some() {
                None
            } else {
                verdicts.next().map(|v| Verdict(v, None))
            }
        })
        .collect()
}

/// Rebuilds a pickled `Deduper`.
#[pyfunction]
fn _unpickle<'py>(
    py: Python<'py>,
    options: &Bound<'py, PyDict>,
    state: Option<&Bound<'py, PyBytes>>,
    next_auto: u64,
) -> PyResult<Deduper> {
    let cls = py.get_type::<Deduper>();
    let made = cls.call((), Some(options))?;
    let deduper = made.cast::<Deduper>()?.get();
    {
        let mut inner = deduper.shared.lock();
        if let (Some(state), Store::Memory(engine)) = (state, &mut inner.store) {
            snapshot::decode_into(state.as_bytes(), engine)
                .map_err(|e| errors::invalid(py, format!("pickled state: {e}")))?;
        }
        inner.next_auto = next_auto;
    }
    Ok(Deduper {
        shared: Arc::clone(&deduper.shared),
    })
}

/// What the engine decided about one message.
///
/// `status` is "new" or "duplicate"; a duplicate names the earlier
/// message (`duplicate_of`), the `similarity` and the `cluster` (the id of
/// the first message of its chain). `repeat` is True for a message indexed
/// already under its id with the same text: it gets the verdict it was
/// first given.
#[pyclass(frozen, eq, module = "dedup_stream._engine")]
#[derive(Clone, PartialEq)]
struct Verdict(V, Option<Explanation>);

impl Verdict {
    /// The match of a duplicate (a repeat of one included).
    fn matched(&self) -> Option<&dedup_stream::Match> {
        match &self.0 {
            V::Duplicate(m) | V::Repeat(Some(m)) => Some(m),
            _ => None,
        }
    }
}

#[pymethods]
impl Verdict {
    /// "new" or "duplicate" ("deleted" for a deletion notice given to
    /// `check_records`); a repeat's is its first verdict's.
    #[getter]
    fn status(&self) -> &'static str {
        match self.0 {
            V::Duplicate(_) | V::Repeat(Some(_)) => "duplicate",
            V::Deleted { .. } => "deleted",
            V::New | V::Repeat(None) => "new",
        }
    }

    /// Whether the message was indexed already under its id with the same
    /// text (sent again): its verdict is the one it was first given.
    #[getter]
    fn repeat(&self) -> bool {
        self.0.is_repeat()
    }

    /// For a deletion notice: whether the index held its tweet (None
    /// otherwise).
    #[getter]
    fn held(&self) -> Option<bool> {
        match self.0 {
            V::Deleted { held } => Some(held),
            _ => None,
        }
    }

    /// Whether it is a near-duplicate.
    #[getter]
    fn is_duplicate(&self) -> bool {
        self.0.is_duplicate()
    }

    /// The id of the earlier message it duplicates (None when new).
    #[getter]
    fn duplicate_of<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        self.matched().map(|m| ids::to_py(py, &m.of)).transpose()
    }

    /// The similarity with it, in [0, 1] (None when new).
    #[getter]
    fn similarity(&self) -> Option<f64> {
        self.matched().map(|m| m.similarity)
    }

    /// The id of the first message of its chain (None when new: a new
    /// message is its own cluster).
    #[getter]
    fn cluster<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        self.matched()
            .map(|m| ids::to_py(py, &m.cluster))
            .transpose()
    }

    /// What decided it, as the CLI's `--explain` writes it (a dict with
    /// `rule`, `threshold`, and `measure`, `shared`, `total` or `nearest`),
    /// when `check` or `query` was asked `explain=True`; else None.
    #[getter]
    fn explain<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        let Some(e) = &self.1 else {
            return Ok(None);
        };
        let counts = |d: &Bound<'py, PyDict>, c: &dedup_stream::engine::explain::PairCounts| {
            d.set_item("measure", c.measure.to_string())?;
            d.set_item("shared", c.shared)?;
            d.set_item("total", c.total)
        };
        let d = PyDict::new(py);
        d.set_item("rule", e.rule.name())?;
        if let Some(c) = &e.counts {
            counts(&d, c)?;
        }
        d.set_item("threshold", e.threshold)?;
        if let Some(n) = &e.nearest {
            let nearest = PyDict::new(py);
            nearest.set_item("id", ids::to_py(py, &n.id)?)?;
            nearest.set_item("similarity", n.similarity)?;
            counts(&nearest, &n.counts)?;
            d.set_item("nearest", nearest)?;
        }
        Ok(Some(d))
    }

    /// The verdict as a dict, with the keys of the CLI's `dedup` member
    /// (`explain` too when it was asked for).
    fn to_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        d.set_item("status", self.status())?;
        if let V::Deleted { held } = self.0 {
            d.set_item("held", held)?;
        }
        if let Some(m) = self.matched() {
            d.set_item("duplicate_of", ids::to_py(py, &m.of)?)?;
            d.set_item("similarity", m.similarity)?;
            d.set_item("cluster", ids::to_py(py, &m.cluster)?)?;
        }
        if self.0.is_repeat() {
            d.set_item("repeat", true)?;
        }
        if let Some(explain) = self.explain(py)? {
            d.set_item("explain", explain)?;
        }
        Ok(d)
    }

    /// The CLI's `dedup` member, byte for byte (similarity to four
    /// decimals; with `explain=True`, as `--explain` writes it).
    fn to_json(&self) -> String {
        let mut out = Vec::new();
        self.0.write_json_explained(self.1.as_ref(), &mut out);
        String::from_utf8(out).expect("JSON is UTF-8")
    }

    fn __bool__(&self) -> bool {
        self.0.is_duplicate()
    }

    /// Pickling: the ids as their JSON text, the similarity exactly.
    fn __reduce__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        let make = py.import("dedup_stream._engine")?.getattr("_verdict")?;
        let repeat = self.0.is_repeat();
        let args = match (&self.0, self.matched()) {
            (_, Some(m)) => (
                Some(m.of.to_json()),
                Some(m.similarity),
                Some(m.cluster.to_json()),
                repeat,
            )
                .into_pyobject(py)?,
            (V::Deleted { held }, None) => (
                Some(format!("deleted:{held}")),
                None::<f64>,
                None::<String>,
                repeat,
            )
                .into_pyobject(py)?,
            _ => (None::<String>, None::<f64>, None::<String>, repeat).into_pyobject(py)?,
        };
        PyTuple::new(py, [make, args.into_any()])
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let repeat = if self.0.is_repeat() {
            ", repeat=True"
        } else {
            ""
        };
        Ok(match (&self.0, self.matched()) {
            (_, Some(m)) => format!(
                "Verdict(status='duplicate', duplicate_of={}, similarity={:?}, cluster={}{repeat})",
                ids::to_py(py, &m.of)?.repr()?,
                m.similarity,
                ids::to_py(py, &m.cluster)?.repr()?,
            ),
            (V::Deleted { held }, None) => format!(
                "Verdict(status='deleted', held={})",
                if *held { "True" } else { "False" }
            ),
            _ => format!("Verdict(status='new'{repeat})"),
        })
    }
}

/// Rebuilds a pickled `Verdict`.
#[pyfunction]
#[pyo3(signature = (of, similarity, cluster, repeat = false))]
fn _verdict(
    of: Option<&str>,
    similarity: Option<f64>,
    cluster: Option<&str>,
    repeat: bool,
) -> PyResult<Verdict> {
    let id = |json: &str| {
        MessageId::from_json(json).ok_or_else(|| {
            pyo3::exceptions::PyValueError::new_err(format!("not a pickled id: {json}"))
        })
    };
    let verdict = match (of, similarity, cluster) {
        (Some("deleted:true"), None, None) => V::Deleted { held: true },
        (Some("deleted:false"), None, None) => V::Deleted { held: false },
        (Some(of), Some(similarity), Some(cluster)) => V::Duplicate(dedup_stream::Match {
            of: id(of)?,
            similarity,
            cluster: id(cluster)?,
        }),
        _ => V::New,
    };
    Ok(Verdict(
        match (repeat, verdict) {
            (true, V::Duplicate(m)) => V::Repeat(Some(m)),
            (true, V::New) => V::Repeat(None),
            (_, verdict) => verdict,
        },
        None,
    ))
}

/// How the engine sees two texts, as `dedup-stream compare A B` prints
/// it. A text that parses as one JSON record (or a dict) is read as a
/// record, as the CLI reads it.
#[pyfunction]
#[pyo3(signature = (a, b, **options))]
fn compare<'py>(
    py: Python<'py>,
    a: &Bound<'py, PyAny>,
    b: &Bound<'py, PyAny>,
    options: Option<&Bound<'py, PyDict>>,
) -> PyResult<Bound<'py, PyDict>> {
    let mut raw = Raw::default();
    if let Some(options) = options {
        for (key, value) in options.iter() {
            let key: String = key.extract()?;
            let slot = match key.as_str() {
                "threshold" => &mut raw.threshold,
                "measure" => &mut raw.measure,
                "shingle" => &mut raw.shingle,
                "sample" => &mut raw.sample,
                "window" => &mut raw.window,
                "recent" => &mut raw.recent,
                "empty_text" => &mut raw.empty_text,
                other => {
                    return Err(pyo3::exceptions::PyTypeError::new_err(format!(
                        "compare() got an unexpected keyword argument '{other}' (it takes \
                         threshold, measure, shingle, sample, window, recent, empty_text)"
                    )));
                }
            };
            *slot = (!value.is_none()).then_some(value);
        }
    }
    let config = raw.read(py)?.config;
    let dumps = py.import("json")?.getattr("dumps")?;
    let mut texts = Vec::new();
    for t in [a, b] {
        texts.push(if t.is_instance_of::<PyDict>() {
            dumps.call1((t,))?.extract::<String>()?
        } else {
            t.extract::<String>()?
        });
    }
    let preparer = Preparer::new(&config);
    let decoder = Decoder::new(FieldSpec::default());
    let explained: Vec<Explained> = py.detach(|| {
        texts
            .iter()
            .map(|text| match decoder.decode(text.as_bytes()) {
                Ok(record) => preparer.explain(&record.text, &record.urls),
                Err(_) => preparer.explain(text, &[]),
            })
            .collect()
    });
    let (ea, eb) = (&explained[0], &explained[1]);
    let set = |e: &Explained| e.shingles.iter().map(|(f, _)| *f).collect::<Vec<u32>>();
    // As src/main.rs's compare: B is the later message, right after A.
    let hints = PairHints {
        anchored: share_anchor(&eb.anchors, eb.truncated, &ea.anchors, |_| true),
        earlier_truncated: ea.truncated,
    };
    let s = similarity(config.measure, &set(eb), &set(ea), hints);
    let mut lone = LoneMatch::new(config.threshold, config.lone_reach(), 1);
    lone.offer((), s, 0, eb.shingles.len(), ea.shingles.len(), || ());
    let lone_recent = s < config.threshold && lone.result().is_some();
    let only = |e: &Explained, other: &Explained| -> Vec<String> {
        e.shingles
            .iter()
            .filter(|(f, _)| !other.shingles.iter().any(|(g, _)| g == f))
            .map(|(_, s)| s.clone())
            .collect()
    };
    let shared: Vec<String> = ea
        .shingles
        .iter()
        .filter(|(f, _)| eb.shingles.iter().any(|(g, _)| g == f))
        .map(|(_, s)| s.clone())
        .collect();
    let squeeze = |e: &Explained| {
        e.normalised
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
    };
    let d = PyDict::new(py);
    d.set_item("similarity", s)?;
    d.set_item("is_duplicate", s >= config.threshold || lone_recent)?;
    d.set_item("lone_recent_match", lone_recent)?;
    d.set_item("threshold", config.threshold)?;
    d.set_item("measure", config.measure.to_string())?;
    d.set_item("shingle", config.shingle_settings())?;
    d.set_item("a_normalised", squeeze(ea))?;
    d.set_item("b_normalised", squeeze(eb))?;
    d.set_item("a_shingles", ea.shingles.len())?;
    d.set_item("b_shingles", eb.shingles.len())?;
    d.set_item("shared", shared)?;
    d.set_item("only_in_a", only(ea, eb))?;
    d.set_item("only_in_b", only(eb, ea))?;
    let _ = RECENT_MARGIN;
    Ok(d)
}

/// The extension module.
#[pymodule]
fn _engine(m: &Bound<'_, PyModule>) -> PyResult<()> {
    logs::install();
    m.add_class::<Deduper>()?;
    m.add_class::<Verdict>()?;
    m.add_function(wrap_pyfunction!(compare, m)?)?;
    m.add_function(wrap_pyfunction!(_unpickle, m)?)?;
    m.add_function(wrap_pyfunction!(_verdict, m)?)?;
    m.add_function(wrap_pyfunction!(_check_outputs, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}

//! The costly half of deciding a batch, on several threads.
//!
//! Verdicts depend on arrival order, so [`super::Deduper`] decides a batch
//! one message at a time. But most of a decision's work is verifying
//! candidates: counting the shingles a message shares with each indexed
//! message its keys found ([`Verifier::overlap_at_least`]). That count
//! depends on the two sets only, and an indexed message's set never
//! changes while it is indexed. So before deciding a batch, this module
//! looks up every message's candidates in the index as it stands when the
//! batch begins and counts, on every thread, what each shares with each
//! (a read-only pass: the index is shared, not changed). It keeps only the
//! candidates that could reach the lowest floor the decision ever uses
//! ([`min_floor`]); the others cannot matter, whatever the batch does.
//!
//! Then the decision runs in order as before. Its candidates are those
//! counted here that are still indexed (a message keeps its postings
//! exactly as long as it is indexed), whose counts it reads rather than
//! makes again, and the messages the batch itself has indexed since, found
//! under the keys the batch posted under and verified then and there (see
//! `Deduper::best_match`); a candidate missing here cannot reach the floor.
//! The verdicts are therefore the serial ones exactly, whatever the thread
//! count: what moves to other threads is arithmetic on sets that do not
//! change, and what depends on order stays in order.

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use super::index::Index;
use super::store::{Ask, Op};
use super::verdict::{self, Overlap, PairHints, Verifier};
use super::{PrefetchStage, Sketch, SlotSet};
use crate::engine::config::{EngineConfig, Measure};

/// Messages a thread takes at a time: small enough that threads finish
/// together (a template's messages cost a hundred times a lone one's),
/// large enough that taking one is rare.
const CHUNK: usize = 32;

/// How many messages ahead, within a chunk, the postings, the entries and
/// the sets of a message's candidates start loading (see
/// [`super::PrefetchStage`]): as the decision does, closer together since
/// a chunk is short.
const POSTINGS_AHEAD: usize = 8;
const ENTRIES_AHEAD: usize = 4;
const SETS_AHEAD: usize = 2;

/// Messages whose noted slots a worker keeps between its entries and sets
/// stages.
const RING: usize = 4;

const _: () = assert!(RING > ENTRIES_AHEAD - SETS_AHEAD);

/// Fewest messages a batch needs for the pass to run on other threads
/// too: below it, starting threads costs more than it saves, and the
/// decision verifies on its own.
pub const MIN_PARALLEL_BATCH: usize = 4 * CHUNK;

/// Fewest threads for the pass to run at all. Counting ahead costs more
/// processor time than the verification it takes off the decision (on
/// `dev-200k`, 2.6 µs a message counted against 1.6 µs saved: the postings
/// are walked twice, and the candidates' lines loaded on another core's
/// caches), so it pays only where cores would otherwise wait on the
/// decision. On two cores the filter's preparation keeps the second busy
/// already, and counting there cost a quarter of the throughput
/// (`docs/performance.md`).
pub const MIN_THREADS: usize = 3;

/// The lowest floor down to which the decision verifies a candidate: the
/// bar of a near story while a lone recent match is looked for, else the
/// threshold (see `Deduper::best_match` and [`verdict::LoneMatch`]).
pub fn min_floor(config: &EngineConfig) -> f64 {
    if config.lone_reach() > 0 {
        config.threshold - verdict::NEAR_MARGIN
    } else {
        config.threshold
    }
}

/// The candidates of one message that could reach the floor, with what
/// each shares with it.
pub type Counted = [(u32, Overlap)];

/// The counts of one batch: for each message, its candidates in the index
/// as it stood when the batch began that could reach [`min_floor`].
#[derive(Debug, Default)]
pub struct BatchOverlaps {
    /// Per chunk of [`CHUNK`] messages, what its thread found.
    chunks: Vec<ChunkOverlaps>,
}

/// What one thread found for a chunk of messages.
#[derive(Debug, Default)]
struct ChunkOverlaps {
    /// Where each message's candidates start in `found`, and the end.
    starts: Vec<u32>,
    found: Vec<(u32, Overlap)>,
}

impl BatchOverlaps {
    /// The counted candidates of the message at `position` in the batch.
    pub fn of(&self, position: usize) -> &Counted {
        let chunk = &self.chunks[position / CHUNK];
        let at = position % CHUNK;
        &chunk.found[chunk.starts[at] as usize..chunk.starts[at + 1] as usize]
    }
}

/// One thread's reusable buffers.
#[derive(Debug, Default)]
pub struct Worker {
    verifier: Verifier,
    seen: SlotSet,
    candidates: Vec<u32>,
    /// The slots whose entries the entries stage loaded, by position
    /// modulo [`RING`], for the sets stage.
    noted: [Vec<u32>; RING],
}

/// Counts, on `workers.len()` threads (the caller's among them), the
/// overlaps of every message of `asks` with its candidates in `index`.
///
/// Also returns the processor time the threads spent, all together.
pub fn count(
    index: &Index,
    config: &EngineConfig,
    asks: &[Ask<'_>],
    workers: &mut [Worker],
) -> (BatchOverlaps, Duration) {
    let floor = min_floor(config);
    let chunks = asks.len().div_ceil(CHUNK);
    let next = AtomicUsize::new(0);
    let done: Mutex<Vec<(usize, ChunkOverlaps)>> = Mutex::new(Vec::with_capacity(chunks));
    let cpu = Mutex::new(Duration::ZERO);
    let run = |worker: &mut Worker| {
        let started = super::thread_cpu_time();
        let mut mine = Vec::new();
        loop {
            let chunk = next.fetch_add(1, Ordering::Relaxed);
            let start = chunk * CHUNK;
            if start >= asks.len() {
                break;
            }
            let asks = &asks[start..asks.len().min(start + CHUNK)];
            mine.push((
                chunk,
                worker.count_chunk(index, config.measure, floor, asks),
            ));
        }
        done.lock().expect("no worker panics").extend(mine);
        *cpu.lock().expect("no worker panics") += super::thread_cpu_time().saturating_sub(started);
    };
    let (mine, others) = workers.split_first_mut().expect("at least one worker");
    std::thread::scope(|scope| {
        for worker in others.iter_mut() {
            scope.spawn(|| run(worker));
        }
        run(mine);
    });
    let mut done = done.into_inner().expect("no worker panics");
    done.sort_unstable_by_key(|&(chunk, _)| chunk);
    debug_assert_eq!(done.len(), chunks);
    let overlaps = BatchOverlaps {
        chunks: done.into_iter().map(|(_, found)| found).collect(),
    };
    (overlaps, cpu.into_inner().expect("no worker panics"))
}

impl Worker {
    /// Counts the overlaps of each message of a chunk. Never inlined, so
    /// that profiles tell the part that runs in parallel from the serial.
    #[inline(never)]
    fn count_chunk(
        &mut self,
        index: &Index,
        measure: Measure,
        floor: f64,
        asks: &[Ask<'_>],
    ) -> ChunkOverlaps {
        let mut out = ChunkOverlaps {
            starts: Vec::with_capacity(asks.len() + 1),
            found: Vec::new(),
        };
        for (at, ask) in asks.iter().enumerate() {
            // The chain of reads a message's candidates make starts a few
            // messages ahead, one link per stage: the walk below then finds
            // each link in cache.
            if let Some(ahead) = asks.get(at + POSTINGS_AHEAD) {
                index.prefetch(
                    ahead.sketch.band_keys,
                    ahead.sketch.set_fingerprint,
                    PrefetchStage::Postings,
                );
            }
            if let Some(ahead) = asks.get(at + ENTRIES_AHEAD) {
                index.prefetch_entries(
                    ahead.sketch.band_keys,
                    ahead.sketch.set_fingerprint,
                    &mut self.noted[(at + ENTRIES_AHEAD) % RING],
                );
            }
            if at + SETS_AHEAD < asks.len() && at + SETS_AHEAD >= ENTRIES_AHEAD {
                index.prefetch_sets(&self.noted[(at + SETS_AHEAD) % RING]);
            }
            out.starts.push(out.found.len() as u32);
            if matches!(ask.op, Op::Check | Op::Query) && !ask.sketch.shingles.is_empty() {
                self.count_one(index, measure, floor, ask.sketch, &mut out.found);
            }
        }
        out.starts.push(out.found.len() as u32);
        out
    }

    /// Appends the candidates of one message that could reach `floor`.
    fn count_one(
        &mut self,
        index: &Index,
        measure: Measure,
        floor: f64,
        sketch: Sketch<'_>,
        found: &mut Vec<(u32, Overlap)>,
    ) {
        self.candidates.clear();
        index.candidates(sketch.band_keys, &mut self.candidates);
        self.candidates
            .extend(index.exact(sketch.set_fingerprint, sketch.shingles));
        self.seen.clear(self.candidates.len());
        let seen = &mut self.seen;
        self.candidates.retain(|&slot| seen.insert(slot));
        self.verifier.load(sketch.shingles);
        for &slot in &self.candidates {
            let Some(entry) = index.peek(slot) else {
                continue;
            };
            let hints = PairHints {
                anchored: false,
                earlier_truncated: entry.truncated(),
            };
            if let Some(overlap) = self.verifier.overlap_at_least(
                measure,
                sketch.shingles,
                entry.shingles(),
                hints,
                floor,
            ) {
                found.push((slot, overlap));
            }
        }
    }
}

//! The engine: synchronous, free of I/O, one owner.
//!
//! A message goes through the stages in one direction:
//!
//! ```text
//! text ─ normalise ─ tokenise ─ shingle ─ sketch ─┐
//!                                                  ├─ index ─ verdict
//!           (Preparer: pure, runs on any thread) ─┘ (Deduper: in input order)
//! ```
//!
//! [`Preparer`] holds the stateless stages and may run on many threads at
//! once. [`Deduper`] owns the index: verdicts depend on arrival order, so one
//! owner decides, one message at a time.
//!
//! Two choices shape what the index holds, both for a stream that never ends:
//! - **Exact copies are not inserted; near-duplicates are.** A message whose
//!   shingle set is identical to an indexed one adds nothing: any later
//!   message is exactly as similar to it as to the indexed one, and ties go
//!   to the earliest anyway. So a retweet storm of ten thousand copies costs
//!   one entry. A near-duplicate (an edited copy, a truncation, a copy with a
//!   comment) is inserted, so that a later copy of *it* finds its closest
//!   match rather than the looser one it shares with the first version.
//! - **A match refreshes the matched message.** A story still being copied
//!   stays in the index however old its first message is, and what is
//!   evicted is what nobody has repeated for longest.
//!
//! Under `--window`, messages also leave the index once they are older
//! than the window: [`window`] states the rule.
//!
//! The engine imports nothing else of this crate: its settings
//! ([`config`]), message ids ([`id`]) and errors are its own, and every
//! other layer builds on it (`tests/layout.rs` checks this).

mod ahead;
pub mod bitmap;
pub mod cells;
pub mod config;
pub mod explain;
pub mod hint;
pub mod id;
pub mod index;
pub mod normalise;
pub mod overlaps;
pub mod postings;
pub mod shingle;
pub mod sketch;
pub mod store;
pub mod tokenise;
pub mod verdict;
pub mod window;

use std::borrow::Cow;
use std::num::NonZeroUsize;

use crate::engine::config::{EmptyText, EngineConfig, Measure, Sampling, Shingling};
use crate::engine::id::MessageId;
use config::ConfigError;
pub use explain::{Explanation, Rule};
pub use index::PrefetchStage;
use index::{Index, Insert, set_fingerprint};
use normalise::Normaliser;
use sketch::{LshParams, Sketcher};
use store::StoreError;
pub use store::{Ask, DecisionTimes, IndexStats, IndexStore, Op};
use tokenise::{Tokeniser, is_number, token_hash};
pub use verdict::{Match, PairHints, Verdict, similarity};

/// A message's sketch: what the index needs to find and verify candidates.
#[derive(Clone, Copy, Debug)]
pub struct Sketch<'a> {
    /// Sorted, deduplicated 32-bit shingle fingerprints.
    pub shingles: &'a [u32],
    /// One key per LSH band.
    pub band_keys: &'a [u32],
    /// Fingerprint of the whole shingle set (the exact-duplicate key).
    pub set_fingerprint: u64,
    /// Whether the text was cut (it ended in an ellipsis): a shorter copy
    /// of a longer text is expected to be (see [`verdict::by_containment`]).
    pub truncated: bool,
}

/// An owned [`Sketch`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SketchBuf {
    /// Sorted, deduplicated 32-bit shingle fingerprints.
    pub shingles: Vec<u32>,
    /// One key per LSH band.
    pub band_keys: Vec<u32>,
    /// Fingerprint of the whole shingle set.
    pub set_fingerprint: u64,
    /// Whether the text was cut.
    pub truncated: bool,
}

impl SketchBuf {
    /// Borrows it as a [`Sketch`].
    pub fn as_sketch(&self) -> Sketch<'_> {
        Sketch {
            shingles: &self.shingles,
            band_keys: &self.band_keys,
            set_fingerprint: self.set_fingerprint,
            truncated: self.truncated,
        }
    }
}

/// Reusable buffers of one preparing thread, so that preparing a message
/// allocates nothing once they have grown.
#[derive(Debug, Default)]
pub struct Scratch {
    normalised: String,
    spare: String,
    joined: String,
    tokens: Vec<u64>,
    spans: Vec<(usize, usize, bool)>,
    char_starts: Vec<usize>,
    mixed: Vec<u64>,
    truncated: bool,
}

impl Scratch {
    /// Whether the text last sketched with these buffers was cut (see
    /// [`Sketch::truncated`]).
    pub fn truncated(&self) -> bool {
        self.truncated
    }
}

/// The stateless stages: normalise, tokenise, shingle, sketch. Cheap to
/// clone (compiled regexes are shared); one per thread.
#[derive(Clone, Debug)]
pub struct Preparer {
    normaliser: Normaliser,
    tokeniser: Tokeniser,
    shingling: Shingling,
    sampling: Sampling,
    sketcher: Sketcher,
    empty_text: EmptyText,
}

impl Preparer {
    /// The stages for a configuration.
    pub fn new(config: &EngineConfig) -> Preparer {
        Preparer {
            normaliser: Normaliser::new(),
            tokeniser: Tokeniser::new(),
            shingling: config.shingling,
            sampling: config.sampling,
            sketcher: Sketcher::new(lsh_params(config)),
            empty_text: config.empty_text,
        }
    }

    /// Whether a message whose sketch has no shingles (its text is empty
    /// once normalised) is refused as invalid rather than tagged new (see
    /// [`EmptyText`]).
    pub fn refuses_empty(&self) -> bool {
        self.empty_text == EmptyText::Invalid
    }

    /// The LSH banding in use.
    pub fn lsh_params(&self) -> LshParams {
        self.sketcher.params()
    }

    /// Normalises a text into `scratch` and returns it (for `compare` and
    /// debugging).
    pub fn normalise<'s>(
        &self,
        text: &str,
        urls: &[(Cow<'_, str>, Cow<'_, str>)],
        scratch: &'s mut Scratch,
    ) -> &'s str {
        self.normaliser
            .normalise_into(text, urls, &mut scratch.normalised, &mut scratch.spare);
        &scratch.normalised
    }

    /// Sketches `text`, appending its shingles and band keys to the given
    /// vectors; returns the set fingerprint (and [`Scratch::truncated`]
    /// says whether the text was cut). Appending lets a batch of messages
    /// share two allocations.
    pub fn sketch_into(
        &self,
        text: &str,
        urls: &[(Cow<'_, str>, Cow<'_, str>)],
        scratch: &mut Scratch,
        shingles: &mut Vec<u32>,
        band_keys: &mut Vec<u32>,
    ) -> u64 {
        let normalised =
            self.normaliser
                .normalise(text, urls, &mut scratch.normalised, &mut scratch.spare);
        scratch.truncated = normalised.truncated;
        scratch.tokens.clear();
        scratch.joined.clear();
        let want_joined = matches!(self.shingling, Shingling::Chars(_));
        if want_joined {
            self.tokeniser.tokenise(
                &scratch.normalised,
                &mut scratch.tokens,
                Some(&mut scratch.joined),
            );
        } else {
            self.tokeniser.tokenise_with(
                &scratch.normalised,
                normalised.ascii,
                normalised.hashless,
                &mut scratch.spans,
                &mut scratch.tokens,
            );
        }
        if scratch.tokens.is_empty() {
            let fallback = scratch.normalised.trim();
            if fallback.is_empty() {
                // Nothing left to compare ("", blanks, a bare link): an
                // empty set, which the index calls new and never stores.
                return set_fingerprint(&[]);
            }
            // No word, but something (emoji, punctuation): the normalised
            // text itself is the one token, so identical texts still match.
            scratch.tokens.push(token_hash(fallback));
            scratch.joined.clear();
            scratch.joined.push_str(fallback);
        }
        // The set is written where the batch keeps it, and read there.
        let from = shingles.len();
        shingle::append_shingles(
            self.shingling,
            self.sampling,
            &scratch.tokens,
            &scratch.joined,
            &mut scratch.char_starts,
            shingles,
        );
        let set = &shingles[from..];
        self.sketcher.band_keys(set, &mut scratch.mixed, band_keys);
        push_anchor_keys(&scratch.tokens, band_keys);
        set_fingerprint(set)
    }

    /// Sketches one text into an owned buffer.
    pub fn sketch(
        &self,
        text: &str,
        urls: &[(Cow<'_, str>, Cow<'_, str>)],
        scratch: &mut Scratch,
    ) -> SketchBuf {
        let mut buf = SketchBuf::default();
        buf.set_fingerprint =
            self.sketch_into(text, urls, scratch, &mut buf.shingles, &mut buf.band_keys);
        buf.truncated = scratch.truncated;
        buf
    }
}

/// Tokens in an anchor: enough that two texts sharing them are about the
/// same thing, few enough that a truncated retweet still has them.
pub const ANCHOR_TOKENS: usize = 6;

/// Tokens in the short anchor: the beginning of a text cut after four or
/// five words ("should i stay up…"), which has no anchor of
/// [`ANCHOR_TOKENS`].
pub const SHORT_ANCHOR_TOKENS: usize = 4;

/// Appends the anchor keys of a token sequence: the short anchor (its first
/// [`SHORT_ANCHOR_TOKENS`] tokens), then its first and its last
/// [`ANCHOR_TOKENS`] tokens, each hashed to a 32-bit key. A text of fewer
/// tokens has fewer anchors, but the short one, when there is one, comes
/// first.
///
/// MinHash finds pairs by their Jaccard similarity, and a copy with a long
/// comment added, or a retweet cut to a third of its original, has a low
/// one even though one text contains the other. Such copies keep the
/// original's beginning (a truncation, a comment after it) or its end (a
/// comment before it): the anchors make them candidates, and the measure
/// decides (see [`share_anchor`]). They cost three postings per message.
pub fn push_anchor_keys(tokens: &[u64], out: &mut Vec<u32>) {
    // Runs of fixed length (no bound checks, loops unrolled) and the keys
    // appended together: one check of the vector's room, not three.
    if let (Some(first), Some(last)) = (
        tokens.first_chunk::<ANCHOR_TOKENS>(),
        tokens.last_chunk::<ANCHOR_TOKENS>(),
    ) {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the processor has AVX2 (checked just above).
            out.extend_from_slice(&unsafe { anchor_keys_avx2(first, last) });
            return;
        }
        out.extend_from_slice(&anchor_keys(first, last));
    } else if let Some(first) = tokens.first_chunk::<SHORT_ANCHOR_TOKENS>() {
        out.push(anchor_key(SHORT_TAG, first));
    }
}

/// The short, prefix and suffix keys of a text of at least
/// [`ANCHOR_TOKENS`] tokens, whose first and last that many are `first` and
/// `last` (see [`push_anchor_keys`]).
#[inline(always)]
fn anchor_keys(first: &[u64; ANCHOR_TOKENS], last: &[u64; ANCHOR_TOKENS]) -> [u32; 3] {
    [
        anchor_key(SHORT_TAG, &first[..SHORT_ANCHOR_TOKENS]),
        anchor_key(PREFIX_TAG, first),
        anchor_key(SUFFIX_TAG, last),
    ]
}

/// [`anchor_keys`] with the three hashes side by side in 64-bit lanes
/// (the short key's, the prefix's, the suffix's, and the suffix's again):
/// six steps of four-lane [`mix64`](shingle::mix64) (about 24
/// instructions each) instead of sixteen scalar ones (about 14 each). The
/// short key is read after its fourth step.
///
/// # Safety
/// The processor must have AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn anchor_keys_avx2(first: &[u64; ANCHOR_TOKENS], last: &[u64; ANCHOR_TOKENS]) -> [u32; 3] {
    use std::arch::x86_64::*;
    let mut h = _mm256_setr_epi64x(
        SHORT_TAG as i64,
        PREFIX_TAG as i64,
        SUFFIX_TAG as i64,
        SUFFIX_TAG as i64,
    );
    let mut short = 0;
    for (at, (&f, &l)) in first.iter().zip(last).enumerate() {
        let tokens = _mm256_setr_epi64x(f as i64, f as i64, l as i64, l as i64);
        h = sketch::avx2::mix64_x4(_mm256_xor_si256(h, tokens));
        if at + 1 == SHORT_ANCHOR_TOKENS {
            short = (_mm256_extract_epi64::<0>(h) as u64 >> 32) as u32;
        }
    }
    let high = |lane: i64| (lane as u64 >> 32) as u32;
    [
        short,
        high(_mm256_extract_epi64::<1>(h)),
        high(_mm256_extract_epi64::<2>(h)),
    ]
}

/// The tags that keep the three kinds of anchor key apart (see
/// [`push_anchor_keys`]).
const PREFIX_TAG: u64 = 0x7072_6566_6978_0001;
const SUFFIX_TAG: u64 = 0x7375_6666_6978_0002;
const SHORT_TAG: u64 = 0x7368_6f72_7470_0003;

/// The key of an anchor: its run of tokens hashed under its kind's tag.
/// Always inlined, so that a run of fixed length is hashed unrolled.
#[inline(always)]
fn anchor_key(tag: u64, run: &[u64]) -> u32 {
    let mut h = tag;
    for &t in run {
        h = shingle::mix64(h ^ t);
    }
    (h >> 32) as u32
}

/// Most anchor keys a message has (see [`push_anchor_keys`]).
pub const MAX_ANCHORS: usize = 3;

/// Whether a later message (its anchor keys `later`, and whether its text
/// was cut) and an earlier one (`earlier`) share an anchor that counts, so
/// that the pair may be compared by containment whatever their lengths (see
/// [`verdict::by_containment`]). A key only ever equals a key of its kind
/// (short, prefix, suffix). The short anchor counts only for a later text
/// that was cut: four words in common say "copy" of a cut text, not of two
/// whole ones. `copy_anchor(i)` says whether the later's `i`-th anchor is a
/// copy's rather than a template's (see [`MAX_ANCHOR_CLUSTERS`]); it is
/// asked only for a shared key.
pub fn share_anchor(
    later: &[u32],
    later_cut: bool,
    earlier: &[u32],
    mut copy_anchor: impl FnMut(usize) -> bool,
) -> bool {
    // The short anchor, when a text has any anchor, is its first.
    later
        .iter()
        .enumerate()
        .any(|(at, key)| (at > 0 || later_cut) && earlier.contains(key) && copy_anchor(at))
}

/// Most clusters the messages indexed under an anchor key may belong to
/// for the anchor to count (see [`share_anchor`]); past it, the anchor is a
/// template's.
///
/// Copies begin or end as their original does, and so do the messages of
/// a template ("I added a video to a @YouTube playlist", "Is it just me or
/// ..."): an anchor says "copy" only when what shares it is one story or
/// two or three, not when it is shared by many different ones. The
/// messages under a key are a set (at most the bucket cap, the first
/// indexed), and their clusters are stored with them, so the Redis index
/// answers exactly as the one in memory. On the 200,000-message synthetic
/// stream, 518 → 413 wrong tags for the same recall (`docs/evaluation.md`).
pub const MAX_ANCHOR_CLUSTERS: usize = 3;

/// The distinct clusters of the messages under an anchor key, counted up
/// to one past [`MAX_ANCHOR_CLUSTERS`] without allocating: the one count
/// behind the in-memory index's answer and a Redis worker's.
#[derive(Debug)]
pub struct AnchorClusters<T> {
    seen: [Option<T>; MAX_ANCHOR_CLUSTERS],
    found: usize,
}

impl<T: PartialEq> AnchorClusters<T> {
    /// None counted yet.
    pub fn new() -> AnchorClusters<T> {
        AnchorClusters {
            seen: [const { None }; MAX_ANCHOR_CLUSTERS],
            found: 0,
        }
    }

    /// Counts one more message's cluster; `false` once the messages span
    /// more than [`MAX_ANCHOR_CLUSTERS`] (the anchor is a template's, and
    /// the rest need not be read).
    pub fn add(&mut self, cluster: T) -> bool {
        let cluster = Some(cluster);
        if self.seen[..self.found].contains(&cluster) {
            return true;
        }
        if self.found == MAX_ANCHOR_CLUSTERS {
            return false;
        }
        self.seen[self.found] = cluster;
        self.found += 1;
        true
    }
}

impl<T: PartialEq> Default for AnchorClusters<T> {
    fn default() -> Self {
        AnchorClusters::new()
    }
}

/// A text as the engine sees it, for explaining a comparison.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Explained {
    /// The normalised text.
    pub normalised: String,
    /// Each distinct shingle: its fingerprint and its readable form, sorted
    /// by fingerprint (the order of the shingle set).
    pub shingles: Vec<(u32, String)>,
    /// Its anchor keys (see [`push_anchor_keys`]).
    pub anchors: Vec<u32>,
    /// Whether the text was cut (see [`Sketch::truncated`]).
    pub truncated: bool,
}

impl Preparer {
    /// Shows how a text is normalised and shingled. Slow; for people, not
    /// for the stream.
    pub fn explain(&self, text: &str, urls: &[(Cow<'_, str>, Cow<'_, str>)]) -> Explained {
        let mut scratch = Scratch::default();
        let truncated =
            self.normaliser
                .normalise_into(text, urls, &mut scratch.normalised, &mut scratch.spare);
        let normalised = scratch.normalised.clone();
        let mut explained = self.tokeniser.token_texts(&normalised);
        if explained.is_empty() && !normalised.trim().is_empty() {
            let fallback = normalised.trim().to_string();
            explained.push((token_hash(&fallback), fallback));
        }
        if explained.is_empty() {
            return Explained {
                normalised,
                shingles: Vec::new(),
                anchors: Vec::new(),
                truncated,
            };
        }
        let (hashes, tokens): (Vec<u64>, Vec<String>) = explained.into_iter().unzip();
        let word_shingles = |width: usize| -> Vec<(u32, String)> {
            let width = width.min(tokens.len());
            (0..=tokens.len() - width)
                .map(|i| {
                    (
                        shingle::fingerprint(&hashes[i..i + width]),
                        tokens[i..i + width].join(" "),
                    )
                })
                .collect()
        };
        let mut shingles: Vec<(u32, String)> = match self.shingling {
            Shingling::Words(width) => word_shingles(width),
            Shingling::WordsUpTo(longest) => {
                let widest = longest.min(tokens.len());
                let hashes = &hashes;
                (1..=widest)
                    .flat_map(|width| {
                        word_shingles(width)
                            .into_iter()
                            .enumerate()
                            .map(move |(i, (f, text))| {
                                let f = shingle::tag_width(f, width == widest);
                                // Numbers marked as shingle_into marks them.
                                let number = width == 1 && widest > 1 && is_number(hashes[i]);
                                (shingle::tag_slot(f, number), text)
                            })
                    })
                    .collect()
            }
            Shingling::Spots(width) => {
                let mut chains = Vec::new();
                if shingle::spot_chains(&hashes, width, &mut chains) {
                    chains
                        .chunks_exact(width + 1)
                        .map(|chain| {
                            (
                                shingle::spot_fingerprint(chain.iter().map(|&at| hashes[at])),
                                // The stop word, then its chain.
                                chain
                                    .iter()
                                    .map(|&at| tokens[at].as_str())
                                    .collect::<Vec<_>>()
                                    .join(" "),
                            )
                        })
                        .collect()
                } else {
                    word_shingles(width + 1)
                }
            }
            Shingling::Chars(width) => {
                let joined: Vec<char> = tokens.join(" ").chars().collect();
                let width = width.min(joined.len()).max(1);
                (0..=joined.len().saturating_sub(width))
                    .map(|i| {
                        joined[i..(i + width).min(joined.len())]
                            .iter()
                            .collect::<String>()
                    })
                    .map(|gram| (shingle::char_fingerprint(&gram), gram))
                    .collect()
            }
        };
        shingles.sort();
        shingles.dedup_by_key(|(f, _)| *f);
        // The sample the stream compares (--sample, then
        // shingle::MAX_SHINGLES).
        let mut kept: Vec<u32> = shingles.iter().map(|(f, _)| *f).collect();
        shingle::sample(self.sampling, &mut kept);
        if kept.len() < shingles.len() {
            shingles.retain(|(f, _)| kept.binary_search(f).is_ok());
        }
        shingles.truncate(shingle::MAX_SHINGLES);
        let mut anchors = Vec::new();
        push_anchor_keys(&hashes, &mut anchors);
        Explained {
            normalised,
            shingles,
            anchors,
            truncated,
        }
    }
}

/// The banding for a configuration: bands cut for the threshold as a
/// Jaccard similarity, whichever the measure. Under containment, a copy
/// much longer or shorter than its original has a low Jaccard similarity;
/// such copies (a truncation, a comment added) keep the original's first or
/// last words, and the anchor keys find them instead (see
/// [`push_anchor_keys`]).
pub fn lsh_params(config: &EngineConfig) -> LshParams {
    LshParams::for_threshold(config.threshold)
}

/// What a state file keeps of an indexed message beyond its shingles (see
/// [`Deduper::restore`]).
#[derive(Clone, Copy, Debug, Default)]
pub struct Restored<'a> {
    /// How it was first decided, `None` when it was new (see
    /// [`index::Joined`]).
    pub joined: Option<&'a index::Joined>,
    /// Its time (see [`index::Entry::time`]).
    pub time: i64,
    /// Whether its text was cut (see [`Sketch::truncated`]).
    pub truncated: bool,
    /// Which of its keys held a posting of it when it was saved (see
    /// [`index::Index::posted_mask`]); `None`: as many as the bucket cap
    /// allows now.
    pub posted: Option<u32>,
}

/// Counters of the engine's decisions.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EngineCounts {
    /// Messages checked (queries included).
    pub messages: u64,
    /// Verdicts `new`.
    pub new: u64,
    /// Verdicts `duplicate`.
    pub duplicates: u64,
    /// Repeats (see [`Verdict::Repeat`]), counted in `new` or
    /// `duplicates` too, as their first verdict was.
    pub repeats: u64,
}

/// The deciding half of the engine: owns the index, one message at a time.
///
/// ```
/// use dedup_stream::{Deduper, EngineConfig, MessageId, Verdict};
///
/// let mut deduper = Deduper::new(EngineConfig::default()).unwrap();
/// let first = deduper.check_text(MessageId::Integer(1), "Keynote starts now at #RustConf, come see the new borrow checker");
/// assert_eq!(first, Verdict::New);
/// let retweet = deduper.check_text(MessageId::Integer(2), "RT @conf: Keynote starts now at #RustConf, come see the new borrow checker");
/// assert!(matches!(retweet, Verdict::Duplicate(m) if m.of == MessageId::Integer(1)));
/// ```
pub struct Deduper {
    config: EngineConfig,
    preparer: Preparer,
    index: Index,
    next_seq: u64,
    clock: window::Clock,
    counts: EngineCounts,
    /// The distinct candidates of the message being decided.
    candidates: Vec<u32>,
    /// The candidates [`PrefetchStage::Entries`] found for the messages a
    /// few places ahead, by position modulo [`WALKED_RING`]: the sets
    /// stage loads their sets, and the decision takes them rather than
    /// walking the postings again (see [`ahead`]).
    walked: [ahead::Walked; WALKED_RING],
    /// Where in `walked` the message being decided finds its candidates,
    /// when they were walked ahead and may be taken.
    walked_for: Option<usize>,
    /// The last few inserts, to mend candidates walked ahead of them.
    recent: ahead::RecentInserts,
    /// Which slots are among them (see [`SlotSet`]).
    seen: SlotSet,
    /// The message's set, laid out for verifying its candidates.
    verifier: verdict::Verifier,
    scratch: Scratch,
    /// Explanations of verdicts (`--explain`), worked out only when on.
    explainer: explain::Explainer,
    /// The buffers of the threads that count a batch's overlaps ahead of
    /// its decision (see [`overlaps`]), the deciding thread's first: one
    /// per thread to use.
    workers: Vec<overlaps::Worker>,
    /// The overlaps of the first candidates of the message being decided,
    /// counted ahead of its batch (see [`overlaps`]).
    known: Vec<verdict::Overlap>,
    /// The slots the batch being decided has filled: their messages came
    /// after the overlaps were counted, so they are verified in order.
    filled: FilledSlots,
    /// The keys the batch being decided has posted under (a superset):
    /// where a message looks for the messages the batch indexed.
    batch_keys: KeyFilter,
    /// Whether the message being checked has put its keys in `batch_keys`
    /// already, as it looked its candidates up (see [`Deduper::best_match`]).
    keys_in_batch: bool,
    times: DecisionTimes,
    /// The guards a match must pass, from the configuration.
    guards: Guards,
    /// The most similar candidate of the message just decided that a guard
    /// refused, with its similarity and why (for `--explain`).
    refused: Option<(u32, f64, verdict::Refusal)>,
}

/// A set of slots that empties in constant time: the candidates a message
/// found so far, so that one found under several keys is verified once,
/// without sorting them. An open-addressing table of `stamp << 32 | slot`
/// cells, where a cell of an older stamp is empty; it stays small (a few
/// times the most postings one message's keys hold) and so in cache.
#[derive(Debug, Default)]
struct SlotSet {
    cells: Vec<u64>,
    stamp: u32,
}

impl SlotSet {
    /// Empties it, with room for `most` slots at a load of at most 1/2.
    fn clear(&mut self, most: usize) {
        let size = (2 * most).next_power_of_two().max(64);
        self.stamp = self.stamp.wrapping_add(1);
        if size > self.cells.len() || self.stamp == 0 {
            self.cells = vec![0; size.max(self.cells.len())];
            self.stamp = 1;
        }
    }

    /// Whether `slot` is in the set.
    fn contains(&self, slot: u32) -> bool {
        let mask = self.cells.len().wrapping_sub(1);
        let wanted = u64::from(self.stamp) << 32 | u64::from(slot);
        let mut at = (slot.wrapping_mul(0x9e37_79b1) as usize) & mask;
        while let Some(&c) = self.cells.get(at) {
            if c == wanted {
                return true;
            }
            if (c >> 32) as u32 != self.stamp {
                return false;
            }
            at = (at + 1) & mask;
        }
        false
    }

    /// Adds `slot`; whether it was not there yet.
    fn insert(&mut self, slot: u32) -> bool {
        let mask = self.cells.len() - 1;
        let wanted = u64::from(self.stamp) << 32 | u64::from(slot);
        let mut at = (slot.wrapping_mul(0x9e37_79b1) as usize) & mask;
        loop {
            let c = self.cells[at];
            if c == wanted {
                return false;
            }
            if (c >> 32) as u32 != self.stamp {
                self.cells[at] = wanted;
                return true;
            }
            at = (at + 1) & mask;
        }
    }
}

/// The slots a batch has filled since it started: every slot at or past
/// the index's slots at the start (`from`: slots are added at the end, one
/// by one, and never taken away), and those below it the batch refilled (an
/// evicted, expired or removed message's), in a [`SlotSet`].
///
/// A replica whose index is not full only ever adds slots: a slot counted
/// ahead of the batch, which lay below `from`, is then told from the filled
/// ones by one comparison, not by a probe of a table that finds nothing.
#[derive(Debug, Default)]
struct FilledSlots {
    /// The index's slots when the batch started.
    from: u32,
    /// Slots below `from` the batch has refilled.
    refilled: SlotSet,
    /// Whether `refilled` holds any.
    any_refilled: bool,
}

impl FilledSlots {
    /// Empties it for a batch of up to `most` inserts into an index of
    /// `slots` slots.
    fn clear(&mut self, slots: usize, most: usize) {
        self.from = u32::try_from(slots).unwrap_or(u32::MAX);
        self.refilled.clear(most);
        self.any_refilled = false;
    }

    /// Adds `slot`, just filled.
    fn insert(&mut self, slot: u32) {
        if slot < self.from {
            self.refilled.insert(slot);
            self.any_refilled = true;
        }
    }

    /// Whether the batch has filled `slot`.
    #[inline]
    fn contains(&self, slot: u32) -> bool {
        slot >= self.from || (self.any_refilled && self.refilled.contains(slot))
    }
}

/// A set of keys that may answer yes for a key it lacks, never no for one
/// it holds: one bit a key, picked by the key's top bits, in a bitmap of 8
/// to 16 bits a key it will hold (so a key it lacks finds its bit set
/// between once in sixteen and once in eight at the batch's end, and less
/// before).
///
/// A batch's keys: a message walks the postings of each of its keys the
/// batch may have posted under, for the messages the batch indexed. A key
/// it has not posted under, walked, finds no message the batch indexed
/// (every such message posted under all its keys), so an answer of yes too
/// many changes no candidate, only costs a walk. Where a set of the keys
/// themselves took two hashed lookups into a table of up to 256 KiB a key
/// (one to insert it, one to ask), this takes one bit in a table of a few
/// KiB.
#[derive(Debug, Default)]
struct KeyFilter {
    /// The bitmap; its first `1 << (32 - shift)` bits are in use.
    words: Vec<u64>,
    /// The key's bits below the ones that pick its bit.
    shift: u32,
}

impl KeyFilter {
    /// Fewest bits in use: 4 Ki (512 bytes).
    const MIN_BITS: usize = 1 << 12;

    /// Empties it, sized for up to `keys` keys.
    fn clear(&mut self, keys: usize) {
        let bits = keys
            .saturating_mul(8)
            .next_power_of_two()
            .clamp(Self::MIN_BITS, 1 << 31);
        let words = bits / 64;
        if self.words.len() < words {
            self.words.resize(words, 0);
        }
        self.words[..words].fill(0);
        self.shift = 32 - bits.trailing_zeros();
    }

    /// The word and the bit of `key`. Band keys are hashes, but some bits
    /// of a key may mark its kind: a multiply spreads them over the top
    /// bits that pick the bit.
    #[inline]
    fn place(&self, key: u32) -> (usize, u64) {
        let bit = key.wrapping_mul(0x9e37_79b1) >> self.shift;
        ((bit / 64) as usize, 1 << (bit % 64))
    }

    /// Adds `key`.
    #[inline]
    fn insert(&mut self, key: u32) {
        let (word, bit) = self.place(key);
        if let Some(w) = self.words.get_mut(word) {
            *w |= bit;
        }
    }

    /// Whether `key` may be in the set: always when it is.
    #[inline]
    fn may_contain(&self, key: u32) -> bool {
        let (word, bit) = self.place(key);
        self.words.get(word).is_some_and(|w| w & bit != 0)
    }

    /// Whether `key` may have been in the set (as [`KeyFilter::may_contain`]
    /// answered before), and adds it: one place worked out for both.
    #[inline]
    fn may_contain_then_insert(&mut self, key: u32) -> bool {
        let (word, bit) = self.place(key);
        self.words.get_mut(word).is_some_and(|w| {
            let held = *w & bit != 0;
            *w |= bit;
            held
        })
    }
}

impl std::fmt::Debug for Deduper {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Deduper")
            .field("config", &self.config)
            .field("index", &self.index)
            .field("counts", &self.counts)
            .finish()
    }
}

impl Deduper {
    /// An engine with an empty index.
    pub fn new(config: EngineConfig) -> Result<Deduper, ConfigError> {
        config.validate()?;
        // Band keys, the anchors and the exact-set key.
        let index = Index::new(
            config.capacity,
            config.max_bucket,
            lsh_params(&config).bands + MAX_ANCHORS + 1,
        );
        let index = match config.max_index_bytes {
            Some(max_bytes) => index.with_max_bytes(max_bytes.get()),
            None => index,
        };
        let clock = window::Clock::new(config.window.map(|w| w.millis()));
        Ok(Deduper {
            preparer: Preparer::new(&config),
            guards: Guards::new(&config),
            refused: None,
            index: if clock.is_on() {
                index.with_expiry()
            } else {
                index
            },
            config,
            next_seq: 0,
            clock,
            counts: EngineCounts::default(),
            candidates: Vec::new(),
            walked: Default::default(),
            walked_for: None,
            recent: ahead::RecentInserts::default(),
            seen: SlotSet::default(),
            verifier: verdict::Verifier::new(),
            scratch: Scratch::default(),
            explainer: explain::Explainer::default(),
            workers: (0..default_threads())
                .map(|_| overlaps::Worker::default())
                .collect(),
            known: Vec::new(),
            filled: FilledSlots::default(),
            batch_keys: KeyFilter::default(),
            keys_in_batch: false,
            times: DecisionTimes::default(),
        })
    }

    /// The configuration in force.
    pub fn config(&self) -> &EngineConfig {
        &self.config
    }

    /// The stateless stages, to clone onto preparing threads.
    pub fn preparer(&self) -> &Preparer {
        &self.preparer
    }

    /// The index (read-only).
    pub fn index(&self) -> &Index {
        &self.index
    }

    /// Decision counters.
    pub fn counts(&self) -> EngineCounts {
        self.counts
    }

    /// Decides on a message and indexes it unless an identical shingle set
    /// is indexed already. Under a window, the message is taken to be as
    /// new as the newest seen (see [`Deduper::check_at`]).
    pub fn check(&mut self, id: MessageId, sketch: Sketch<'_>) -> Verdict {
        let now = self.clock.newest().unwrap_or(0);
        self.check_at(id, sketch, now)
    }

    /// [`Deduper::check`] for a message of time `time` (milliseconds since
    /// the epoch): under a window, first expires what is older than the
    /// window (see [`window`]). Without one, the time is ignored.
    pub fn check_at(&mut self, id: MessageId, sketch: Sketch<'_>, time: i64) -> Verdict {
        self.check_counted(id, sketch, time, None)
    }

    /// [`Deduper::check_at`], with the message's candidates counted ahead
    /// of its batch if they were (see [`overlaps`]).
    fn check_counted(
        &mut self,
        id: MessageId,
        sketch: Sketch<'_>,
        time: i64,
        counted: Option<&overlaps::Counted>,
    ) -> Verdict {
        // The range the Redis index keeps exactly (crate::wire::timestamp).
        let time = time.clamp(0, window::MAX_TIME);
        let horizon = self.clock.advance(time);
        if let Some(horizon) = horizon {
            self.index.expire(horizon);
        }
        // Without a window, no time is kept: state files stay the same.
        let time = if horizon.is_some() { time } else { 0 };
        if sketch.shingles.is_empty() {
            return self.nothing_to_compare();
        }
        self.keys_in_batch = false;
        let (verdict, identical) = self.decide(Some(&id), sketch, true, counted);
        if verdict.is_repeat() {
            // Decided already: it takes no arrival number, refreshes
            // nothing and is not indexed again, so a retry leaves the index
            // as the run that never needed one.
            return verdict;
        }
        if let Some(slot) = identical {
            self.index.renew(slot, time);
        } else if horizon.is_none_or(|horizon| time >= horizon) {
            // A near-duplicate joins the chain of what it matched, and
            // keeps its match for a repeat of it.
            let joined = match &verdict {
                Verdict::Duplicate(m) => Some(index::Joined {
                    cluster: m.cluster.clone(),
                    matched: Some((m.of.clone(), m.similarity)),
                }),
                _ => None,
            };
            let slots = self.index.slots();
            self.index.insert(
                id,
                Insert {
                    seq: self.next_seq,
                    shingles: sketch.shingles,
                    band_keys: sketch.band_keys,
                    set_fingerprint: sketch.set_fingerprint,
                    time,
                    joined: joined.as_ref(),
                    truncated: sketch.truncated,
                },
            );
            // The newest slot is the one just filled (an insert is the most
            // recently used, and a byte budget evicts the least).
            let filled = self.index.newest_slot();
            // A batch counted ahead walks nothing ahead (see `ahead`), and
            // a walk is taken only within its own batch.
            if counted.is_none()
                && let Some(slot) = filled
            {
                self.recent
                    .note(slot, sketch.band_keys, (slot as usize) < slots);
            }
            if counted.is_some()
                && let Some(slot) = filled
            {
                self.filled.insert(slot);
                if !self.keys_in_batch {
                    for &key in sketch.band_keys {
                        self.batch_keys.insert(key);
                    }
                }
            }
        }
        self.next_seq += 1;
        verdict
    }

    /// A hint that `sketch` will be checked soon: starts loading one stage
    /// of the parts of the index it will read (see [`PrefetchStage`]).
    /// Called for each stage in order, a few messages apart, ahead of
    /// [`Deduper::check`], it hides memory latency on a large index; it
    /// changes nothing else.
    pub fn prefetch(&self, sketch: Sketch<'_>, stage: PrefetchStage) {
        self.index
            .prefetch(sketch.band_keys, sketch.set_fingerprint, stage);
    }

    /// A hint, once per message: starts loading what the next evictions
    /// will read (see [`Index::prefetch_evictions`]).
    pub fn prefetch_evictions(&self) {
        self.index.prefetch_evictions();
    }

    /// Decides on a message without indexing it or refreshing what it
    /// matches: a question that leaves no trace.
    pub fn query(&mut self, sketch: Sketch<'_>) -> Verdict {
        self.query_counted(None, sketch, None)
    }

    /// [`Deduper::query`], with the message's candidates counted ahead of
    /// its batch if they were (see [`overlaps`]).
    /// A query naming its message's id is answered as a repeat when the
    /// message is indexed (see [`Verdict::Repeat`]).
    fn query_counted(
        &mut self,
        id: Option<&MessageId>,
        sketch: Sketch<'_>,
        counted: Option<&overlaps::Counted>,
    ) -> Verdict {
        if sketch.shingles.is_empty() {
            return self.nothing_to_compare();
        }
        self.decide(id, sketch, false, counted).0
    }

    /// Offers the index the data of a message about to be decided, made
    /// ahead on another thread (see [`Index::offer`]).
    pub fn offer_entry_data(&mut self, band_keys: &[u32], shingles: &[u32], data: Box<[u32]>) {
        self.index.offer(band_keys, shingles, data);
    }

    /// Drops what no insert took of the data offered (see
    /// [`Index::clear_offered`]).
    pub fn clear_offered(&mut self) {
        self.index.clear_offered();
    }

    /// How many threads verify a batch's candidates (see [`overlaps`]):
    /// the deciding thread and `threads - 1` more, started per batch, from
    /// [`overlaps::MIN_THREADS`] on (below, the deciding thread verifies
    /// alone). The verdicts are the same whatever the number. By default,
    /// one per processor.
    pub fn set_threads(&mut self, threads: NonZeroUsize) {
        self.workers
            .resize_with(threads.get(), overlaps::Worker::default);
    }

    /// How many threads verify a batch's candidates.
    pub fn threads(&self) -> NonZeroUsize {
        NonZeroUsize::new(self.workers.len()).unwrap_or(NonZeroUsize::MIN)
    }

    /// A message with no shingles (its text is empty once normalised): new,
    /// never a duplicate, and never stored, so never a candidate either.
    fn nothing_to_compare(&mut self) -> Verdict {
        self.counts.messages += 1;
        self.counts.new += 1;
        if self.explainer.on {
            self.explain_empty();
        }
        Verdict::New
    }

    /// Prepares and checks a text in one call (no URL entities).
    pub fn check_text(&mut self, id: MessageId, text: &str) -> Verdict {
        let sketch = self.preparer.sketch(text, &[], &mut self.scratch);
        self.check(id, sketch.as_sketch())
    }

    /// Forgets every indexed message whose id is `id` (a tweet's number
    /// whether as a string or a number), with all its postings; returns
    /// how many were held. A later copy of it is decided against what
    /// remains. An unknown id changes nothing. See [`Index::remove`].
    ///
    /// ```
    /// use dedup_stream::{Deduper, EngineConfig, MessageId, Verdict};
    ///
    /// let mut deduper = Deduper::new(EngineConfig::default()).unwrap();
    /// let text = "Keynote starts now at #RustConf, come see the new borrow checker";
    /// deduper.check_text(MessageId::Integer(1), text);
    /// assert_eq!(deduper.remove(&MessageId::DigitString(1)), 1);
    /// assert_eq!(deduper.check_text(MessageId::Integer(2), text), Verdict::New);
    /// ```
    pub fn remove(&mut self, id: &MessageId) -> usize {
        self.index.remove(id)
    }

    /// Restores an indexed message (from a snapshot) without deciding: its
    /// shingle set, its anchor keys (see [`Deduper::anchor_keys`]) and its
    /// [`Restored`] cluster and time. The LSH band keys are recomputed from
    /// the shingles, so a state file outlives a change of threshold.
    pub fn restore(
        &mut self,
        id: MessageId,
        seq: u64,
        shingles: &[u32],
        anchor_keys: &[u32],
        restored: Restored<'_>,
    ) {
        let mut band_keys =
            Vec::with_capacity(self.preparer.lsh_params().bands + anchor_keys.len());
        let mut mixed = Vec::new();
        self.preparer
            .sketcher
            .band_keys(shingles, &mut mixed, &mut band_keys);
        band_keys.extend_from_slice(anchor_keys);
        let insert = Insert {
            seq,
            shingles,
            band_keys: &band_keys,
            set_fingerprint: set_fingerprint(shingles),
            time: if self.clock.is_on() { restored.time } else { 0 },
            joined: restored.joined,
            truncated: restored.truncated,
        };
        match restored.posted {
            Some(posted) => self.index.insert_posted(id, insert, posted),
            None => self.index.insert(id, insert),
        };
        self.next_seq = self.next_seq.max(seq.saturating_add(1));
    }

    /// Makes room at once for the messages a snapshot is about to restore,
    /// given for each the posted mask it was recorded with and its number
    /// of anchor keys (see [`Deduper::restore`]): the index's postings
    /// table then grows once, to the size restoring them one by one would
    /// grow it to, instead of doubling as they come.
    pub fn reserve_restored(&mut self, restored: impl IntoIterator<Item = (u32, usize)>) {
        let bands = self.preparer.lsh_params().bands;
        let (mut messages, mut postings) = (0usize, 0usize);
        for (posted, anchors) in restored {
            // Only the bits of keys the message has are posted (see
            // Index::insert_posted).
            let keys = bands + anchors + 1;
            let held = if keys >= 32 {
                posted
            } else {
                posted & ((1 << keys) - 1)
            };
            messages += 1;
            postings += held.count_ones() as usize;
        }
        self.index.reserve_restored(messages, postings);
    }

    /// Restores the count of evictions (from a replica's snapshot, see
    /// [`crate::redis_index::replica`]).
    pub fn restore_evictions(&mut self, evictions: u64) {
        self.index.restore_evictions(evictions);
    }

    /// Restores the next arrival sequence number (from a state file): the
    /// messages decided since the newest indexed one (exact copies, which
    /// are not indexed) count towards a lone recent match's reach.
    pub fn restore_next_seq(&mut self, next_seq: u64) {
        self.next_seq = self.next_seq.max(next_seq);
    }

    /// The anchor keys of an indexed entry: its keys past the LSH bands.
    pub fn anchor_keys<'e>(&self, entry: &'e index::Entry) -> &'e [u32] {
        let keys = entry.band_keys();
        &keys[self.preparer.lsh_params().bands.min(keys.len())..]
    }

    /// The next arrival sequence number.
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// The newest message time seen under a window (see [`window`]).
    pub fn newest_time(&self) -> Option<i64> {
        self.clock.newest()
    }

    /// Restores the newest message time seen (from a state file), so that
    /// a run resumed from a state file expires what the whole run would.
    /// Ignored without a window.
    pub fn restore_newest_time(&mut self, newest: Option<i64>) {
        if self.clock.is_on() {
            self.clock.restore(newest);
        }
    }

    /// The verdict, and the slot of the identical shingle set, if indexed.
    ///
    /// A message whose identical set is indexed under its own id (`id`) is
    /// a repeat: it gets the verdict that message was first given, and
    /// nothing is compared. Where the index does not know that verdict
    /// (the entry came from an older state file), the message is decided
    /// against every other indexed message, never against itself.
    fn decide(
        &mut self,
        id: Option<&MessageId>,
        sketch: Sketch<'_>,
        refresh: bool,
        counted: Option<&overlaps::Counted>,
    ) -> (Verdict, Option<u32>) {
        self.counts.messages += 1;
        self.refused = None;
        let mut exact = self.index.exact(sketch.set_fingerprint, sketch.shingles);
        let mut itself = None;
        if let (Some(id), Some(slot)) = (id, exact)
            && let Some(entry) = self.index.peek(slot)
            && index::same_id(&entry.id, id)
        {
            if let Some(first) = entry.first_match() {
                return (self.repeat(first), exact);
            }
            itself = exact.take();
        }
        let best = match (self.config.measure, exact) {
            // Under Jaccard only an identical set reaches 1, and the index
            // holds at most one message per set: nothing can beat or tie it.
            (Measure::Jaccard, Some(slot)) => Some((slot, 1.0)),
            _ => self.best_match(id, sketch, exact, counted),
        };
        if self.explainer.on {
            if itself.is_some() {
                self.explainer.last = Some(Explanation::repeat(self.config.threshold));
            } else {
                self.explain_decision(sketch, exact, best);
            }
        }
        let verdict = match best {
            Some((slot, similarity)) => {
                self.counts.duplicates += 1;
                if refresh && itself.is_none() {
                    self.index.touch(slot);
                }
                let entry = self.index.peek(slot).expect("candidate is indexed");
                Verdict::Duplicate(Match {
                    of: entry.id.clone(),
                    similarity,
                    cluster: entry.cluster().clone(),
                })
            }
            _ => {
                self.counts.new += 1;
                Verdict::New
            }
        };
        if itself.is_some() {
            self.counts.repeats += 1;
            let verdict = match verdict {
                Verdict::Duplicate(m) => Verdict::Repeat(Some(m)),
                _ => Verdict::Repeat(None),
            };
            return (verdict, itself);
        }
        (verdict, exact)
    }

    /// Counts a repeat whose first verdict the index knows, and answers it.
    fn repeat(&mut self, first: Option<Match>) -> Verdict {
        self.counts.repeats += 1;
        match first {
            Some(_) => self.counts.duplicates += 1,
            None => self.counts.new += 1,
        }
        if self.explainer.on {
            self.explainer.last = Some(Explanation::repeat(self.config.threshold));
        }
        Verdict::Repeat(first)
    }

    /// The inserts since the message being decided had its candidates
    /// walked ahead, if they were, may be taken, and were few enough to
    /// mend them by (see [`ahead`]).
    fn walked_since(&mut self) -> Option<(usize, ahead::Since)> {
        let at = self.walked_for.take()?;
        let walked = &self.walked[at];
        Some((at, self.recent.since(walked.fills, walked.slots_at)?))
    }

    /// Takes as the message's candidates those walked ahead of its
    /// decision (in `walked[at]`, with the inserts `since` made since),
    /// mended for what the decisions in between changed, and `exact`: the
    /// distinct slots a walk of the postings now would find, in another
    /// order.
    fn take_walked(
        &mut self,
        at: usize,
        sketch: Sketch<'_>,
        exact: Option<u32>,
        since: ahead::Since,
    ) {
        let walked = &mut self.walked[at];
        std::mem::swap(&mut self.candidates, &mut walked.slots);
        self.candidates.truncate(walked.candidates);
        let (index, recent, candidates) = (&self.index, &self.recent, &mut self.candidates);
        // A slot emptied since left the postings, and may hold a newcomer:
        // without one emptied, every slot walked still holds its message.
        if index.emptied() != walked.freed {
            candidates.retain(|&slot| index.holds(slot) && !recent.filled(since, slot));
        }
        // The messages indexed since, under the keys they may have posted
        // under: a handful of slots at most, so looked for in a list.
        let start = candidates.len();
        if since.any() {
            for &key in sketch.band_keys {
                if recent.may_have_posted(since, key) {
                    index.for_each_posted(key, |slot| {
                        if recent.filled(since, slot) && !candidates[start..].contains(&slot) {
                            candidates.push(slot);
                        }
                    });
                }
            }
        }
        if let Some(slot) = exact
            && !candidates.contains(&slot)
        {
            candidates.push(slot);
        }
    }

    /// Walks the postings of the message at `position` in the batch being
    /// decided, a few places ahead of its decision (see [`ahead`]): keeps
    /// its distinct candidates for the decision, and starts loading the
    /// entries of the first [`index::PREFETCH_BUDGET`], and of the slots
    /// under its exact-set key.
    fn walk_ahead(&mut self, position: usize, sketch: Sketch<'_>) {
        let walked = &mut self.walked[position % WALKED_RING];
        walked.slots.clear();
        self.index.candidates(sketch.band_keys, &mut walked.slots);
        self.seen.clear(walked.slots.len());
        let seen = &mut self.seen;
        walked.slots.retain(|&slot| seen.insert(slot));
        walked.candidates = walked.slots.len();
        self.index
            .for_each_posted(index::exact_key(sketch.set_fingerprint), |slot| {
                walked.slots.push(slot)
            });
        self.index
            .prefetch_slots(walked.slots.iter().take(index::PREFETCH_BUDGET).copied());
        walked.position = Some(position);
        walked.fills = self.recent.fills();
        walked.freed = self.index.emptied();
        walked.slots_at = u32::try_from(self.index.slots()).unwrap_or(u32::MAX);
    }

    /// The most similar indexed message (ties: the earliest), if any is at
    /// least as similar as the threshold; otherwise the lone recent match,
    /// if there is one (see [`verdict::LoneMatch`]).
    ///
    /// `counted`: the message's candidates counted ahead of its batch, if
    /// they were (see [`overlaps`]).
    ///
    /// A message indexed under `id`, the message's own, is never its match:
    /// it is the message itself, sent again, or an earlier text of it.
    fn best_match(
        &mut self,
        id: Option<&MessageId>,
        sketch: Sketch<'_>,
        exact: Option<u32>,
        counted: Option<&overlaps::Counted>,
    ) -> Option<(u32, f64)> {
        #[cfg(target_arch = "x86_64")]
        if self.verifier.counts_eight_at_a_time() {
            // SAFETY: the processor has AVX2 and POPCNT (the verifier
            // checked).
            return unsafe { self.best_match_avx2(id, sketch, exact, counted) };
        }
        self.best_match_in::<false>(id, sketch, exact, counted)
    }

    /// [`Deduper::best_match`] compiled for AVX2, so that the verifier's
    /// eight-at-a-time count is inlined in the candidates' loop: as a call
    /// a candidate, its set-up, saved registers and return cost about 40
    /// instructions each time, a dozen times a message.
    ///
    /// # Safety
    /// The processor must have AVX2 and POPCNT.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,popcnt")]
    unsafe fn best_match_avx2(
        &mut self,
        id: Option<&MessageId>,
        sketch: Sketch<'_>,
        exact: Option<u32>,
        counted: Option<&overlaps::Counted>,
    ) -> Option<(u32, f64)> {
        self.best_match_in::<true>(id, sketch, exact, counted)
    }

    /// [`Deduper::best_match`]'s body, inlined in each of its two builds;
    /// `AVX2`: the build for AVX2 and POPCNT, which counts eight shingles
    /// at a time with [`verdict::Verifier::overlap_at_least_laid_out`].
    #[inline(always)]
    fn best_match_in<const AVX2: bool>(
        &mut self,
        id: Option<&MessageId>,
        sketch: Sketch<'_>,
        exact: Option<u32>,
        counted: Option<&overlaps::Counted>,
    ) -> Option<(u32, f64)> {
        // Each distinct candidate once; the order they are verified in
        // changes no verdict (the best is the most similar, ties to the
        // earliest, and a lone match is looked for among them all).
        self.candidates.clear();
        self.known.clear();
        match counted {
            None if let Some((at, since)) = self.walked_since() => {
                self.take_walked(at, sketch, exact, since);
            }
            None => {
                self.index
                    .candidates(sketch.band_keys, &mut self.candidates);
                self.candidates.extend(exact);
                self.seen.clear(self.candidates.len());
                let seen = &mut self.seen;
                self.candidates.retain(|&slot| seen.insert(slot));
            }
            Some(counted) => {
                // The candidates the batch found at its start that could
                // reach the floor and are still indexed (a message keeps its
                // postings while it is), counted already...
                for &(slot, overlap) in counted {
                    if !self.filled.contains(slot) && self.index.holds(slot) {
                        self.candidates.push(slot);
                        self.known.push(overlap);
                    }
                }
                // ...then those the batch has indexed since, under the
                // message's keys: only keys the batch posted under are
                // walked.
                let start = self.candidates.len();
                // A message with no exact copy indexed is about to be
                // indexed itself (or is a query, rarely): its keys go in the
                // filter as they are asked, one place worked out for both.
                // A key put in for a message that is not indexed after all
                // only costs a walk that finds nothing.
                let file_keys = exact.is_none();
                for &key in sketch.band_keys {
                    let may_hold = if file_keys {
                        self.batch_keys.may_contain_then_insert(key)
                    } else {
                        self.batch_keys.may_contain(key)
                    };
                    if may_hold {
                        self.index
                            .candidates(std::slice::from_ref(&key), &mut self.candidates);
                    }
                }
                self.keys_in_batch = file_keys;
                self.candidates.extend(exact);
                let fresh = self.candidates.len() - start;
                self.seen.clear(fresh);
                // Only the fresh part is sifted: the counted candidates
                // before it stay where they are, unread.
                let (filled, seen) = (&self.filled, &mut self.seen);
                let mut kept = start;
                for at in start..self.candidates.len() {
                    let slot = self.candidates[at];
                    if filled.contains(slot) && seen.insert(slot) {
                        self.candidates[kept] = slot;
                        kept += 1;
                    }
                }
                self.candidates.truncate(kept);
            }
        }
        self.verifier.load(sketch.shingles);
        let bands = self.preparer.lsh_params().bands;
        let anchors = sketch.band_keys.get(bands..).unwrap_or_default();
        let mut best: Option<(u32, f64, u64)> = None;
        let mut lone = verdict::LoneMatch::new(
            self.config.threshold,
            self.config.lone_reach(),
            self.next_seq,
        );
        // Whether each of the message's anchors is a copy's (see
        // MAX_ANCHOR_CLUSTERS), found out when first needed.
        let mut specific: [Option<bool>; MAX_ANCHORS] = [None; MAX_ANCHORS];
        // The most similar candidate a guard refused (for `--explain`).
        let mut refused: Option<(u32, f64, verdict::Refusal)> = None;
        // The set laid out once, ahead of the loop, so that counting only
        // reads the verifier: the loop over the candidates that cannot reach
        // the floor (nearly all) then keeps what it needs in registers.
        let counted_ahead = self.known.len().min(self.candidates.len());
        if counted_ahead < self.candidates.len() {
            self.verifier.lay_out_now(sketch.shingles);
        }
        let mut next = 0;
        loop {
            // Only a candidate that reaches the best so far (or the
            // threshold, or until one does, a lone match's near bar)
            // matters, so the comparison may give up early.
            let floor = match best {
                Some((_, s, _)) => s,
                None if lone.is_on() => lone.floor(),
                None => self.config.threshold,
            };
            // A candidate counted ahead of the batch is not verified again
            // (see [`overlaps`]): those come first, each taken here with its
            // count; the others are counted in a loop of their own.
            let (slot, entry, hints, overlap) = if next < counted_ahead {
                let (slot, overlap) = (self.candidates[next], self.known[next]);
                next += 1;
                let Some(entry) = self.index.peek(slot) else {
                    continue;
                };
                (slot, entry, pair_hints(entry), overlap)
            } else {
                let Some((at, slot, entry, hints, overlap)) =
                    self.first_reaching::<AVX2>(next, sketch.shingles, floor)
                else {
                    break;
                };
                next = at + 1;
                (slot, entry, hints, overlap)
            };
            let Some(s) = overlap.similarity_at_least(
                self.config.measure,
                hints,
                || {
                    let theirs = entry.band_keys().get(bands..).unwrap_or_default();
                    share_anchor(anchors, sketch.truncated, theirs, |at| {
                        let copy_anchor = || self.index.anchor_is_a_copys(anchors[at]);
                        // A sketch made by hand may carry more anchors than
                        // push_anchor_keys gives: those are asked each time.
                        match specific.get_mut(at) {
                            Some(known) => *known.get_or_insert_with(copy_anchor),
                            None => copy_anchor(),
                        }
                    })
                },
                floor,
            ) else {
                continue;
            };
            // Checked only for a candidate that reached the floor: rare.
            if id.is_some_and(|id| index::same_id(&entry.id, id)) {
                continue;
            }
            // The guards, asked only of a candidate that could be the
            // match (rarer still).
            let could_be = s >= self.config.threshold
                || (best.is_none()
                    && lone.could_take(s, sketch.shingles.len(), entry.shingles().len()));
            if could_be {
                let far = self.next_seq.saturating_sub(entry.seq) > self.guards.far;
                if let Some(refusal) = self.guards.refusal(sketch, entry, far) {
                    if refused.is_none_or(|(_, best_s, _)| s > best_s) {
                        refused = Some((slot, s, refusal));
                    }
                    if best.is_none() {
                        lone.near(s, || entry.cluster());
                    }
                    continue;
                }
            }
            if best.is_none() {
                lone.offer(
                    slot,
                    s,
                    entry.seq,
                    sketch.shingles.len(),
                    entry.shingles().len(),
                    || entry.cluster(),
                );
                if s < self.config.threshold {
                    continue;
                }
            }
            let better = match best {
                None => true,
                Some((_, best_s, best_seq)) => s > best_s || (s == best_s && entry.seq < best_seq),
            };
            if better {
                best = Some((slot, s, entry.seq));
            }
        }
        let best = best.map(|(slot, s, _)| (slot, s)).or_else(|| lone.result());
        self.refused = refused;
        best
    }

    /// The first of the message's candidates from place `from` on that may
    /// reach `floor` (see [`Deduper::best_match`]), none of them counted
    /// ahead: its place, slot, entry, hints, and overlap with the loaded
    /// set (`set`, laid out). `AVX2`: as in [`Deduper::best_match_in`].
    #[inline(always)]
    fn first_reaching<const AVX2: bool>(
        &self,
        from: usize,
        set: &[u32],
        floor: f64,
    ) -> Option<(
        usize,
        u32,
        &index::Entry,
        verdict::PairHints,
        verdict::Overlap,
    )> {
        debug_assert!(from >= self.known.len());
        let measure = self.config.measure;
        let rest = self.candidates.get(from..).unwrap_or_default();
        for (at, &slot) in (from..).zip(rest) {
            let Some(entry) = self.index.peek(slot) else {
                continue;
            };
            let hints = pair_hints(entry);
            // SAFETY: `AVX2` is only asked by `best_match_avx2`, whose
            // caller checked the processor has AVX2 and POPCNT.
            let overlap = unsafe {
                self.verifier.overlap_at_least_laid_out::<AVX2>(
                    measure,
                    set,
                    entry.shingles(),
                    hints,
                    floor,
                )
            };
            if let Some(overlap) = overlap {
                return Some((at, slot, entry, hints, overlap));
            }
        }
        None
    }
}

/// What a candidate's entry tells of the pair before its anchors are
/// asked.
#[inline(always)]
fn pair_hints(entry: &index::Entry) -> verdict::PairHints {
    verdict::PairHints {
        anchored: false,
        earlier_truncated: entry.truncated(),
    }
}

/// The guards a pair that reached its bar must pass (see
/// [`verdict::Refusal`]), as the configuration applies them.
#[derive(Clone, Copy, Debug)]
struct Guards {
    /// Whether sets mark numbers and may be compared by them: under
    /// `words:1-N` without sampling ([`verdict::slots_differ`]).
    slots: bool,
    /// Whether a short text's words are counted: under `words:1-2`, whose
    /// narrower shingles are its words ([`verdict::words_missing`]).
    words: bool,
    /// How many arrivals back a match is far: `--recent`, or its default
    /// when that is 0 (the lower bar off does not make every match far).
    far: u64,
}

impl Guards {
    fn new(config: &EngineConfig) -> Guards {
        Guards {
            slots: verdict::slots_apply(config),
            words: config.shingling == Shingling::WordsUpTo(2),
            far: if config.recent == 0 {
                crate::engine::config::DEFAULT_RECENT
            } else {
                config.recent
            },
        }
    }

    /// Why the message (`sketch`) may not match `entry`, if it may not;
    /// `far`: `entry` is more than [`Guards::far`] arrivals old.
    fn refusal(
        &self,
        sketch: Sketch<'_>,
        entry: &index::Entry,
        far: bool,
    ) -> Option<verdict::Refusal> {
        let (later, earlier) = (sketch.shingles, entry.shingles());
        if self.slots && verdict::slots_differ(later, earlier, sketch.truncated, entry.truncated())
        {
            Some(verdict::Refusal::Slot)
        } else if self.words && far && verdict::words_missing(later, earlier) {
            Some(verdict::Refusal::ShortWording)
        } else {
            None
        }
    }
}

/// Processor time of the calling thread so far, where the system tells it
/// (elsewhere, time since an arbitrary start: wall-clock time).
fn thread_cpu_time() -> std::time::Duration {
    #[cfg(target_os = "linux")]
    {
        let mut t = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `t` is a valid timespec to write; the clock exists on
        // every Linux since 2.6.12. (libc's, not rustix's vDSO reader, which
        // faults under valgrind, where the benchmarks count instructions.)
        if unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) } == 0 {
            return std::time::Duration::new(t.tv_sec as u64, t.tv_nsec as u32);
        }
        std::time::Duration::ZERO
    }
    #[cfg(not(target_os = "linux"))]
    {
        static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
        START.get_or_init(std::time::Instant::now).elapsed()
    }
}

/// One thread per processor, as the filter's `--threads` defaults to.
fn default_threads() -> usize {
    std::thread::available_parallelism().map_or(1, NonZeroUsize::get)
}

/// The prefetch stages and how many messages ahead of the one being decided
/// [`Deduper`]'s [`IndexStore::decide`] runs each. A stage reads what the
/// one before loaded, so each comes a few messages after it: far enough that
/// a few hundred nanoseconds of memory latency pass, near enough that what
/// it loaded is still cached. 12, 6 and 3 rather than 8, 4 and 2 since a
/// message's verification costs less: on `dev-200k`, 12 to 14% less CPU on
/// the engine's thread (`docs/performance.md`).
pub const PREFETCH_STAGES: [(usize, PrefetchStage); 3] = [
    (12, PrefetchStage::Postings),
    (ENTRIES_DISTANCE, PrefetchStage::Entries),
    (SETS_DISTANCE, PrefetchStage::Sets),
];

/// How many messages ahead the entries stage runs (see [`PREFETCH_STAGES`]).
const ENTRIES_DISTANCE: usize = 6;

/// How many messages ahead the sets stage runs (see [`PREFETCH_STAGES`]).
const SETS_DISTANCE: usize = 3;

/// Messages whose candidates [`Deduper`] keeps from its entries stage to
/// their decision: at least the entries stage's distance, plus one.
const WALKED_RING: usize = 8;

const _: () = assert!(WALKED_RING > ENTRIES_DISTANCE);

impl IndexStore for Deduper {
    /// Decides in order, and before each message asks the memory to start
    /// loading, stage by stage, what the messages a few places later will
    /// read, and what the next evictions will: on a large index the
    /// decision then does not wait on memory. Never fails.
    ///
    /// A batch of [`overlaps::MIN_PARALLEL_BATCH`] messages or more, with
    /// at least [`overlaps::MIN_THREADS`] threads set, first has its
    /// candidates counted on every
    /// thread (see [`overlaps`]); the decision then walks only the postings
    /// ahead, the rest being counted.
    fn decide(&mut self, asks: &[Ask<'_>], verdicts: &mut Vec<Verdict>) -> Result<(), StoreError> {
        verdicts.reserve(asks.len());
        self.explainer.batch.clear();
        let started = std::time::Instant::now();
        // `--explain` names a new message's nearest candidate, counted or
        // not: it takes the decision's own path.
        let counted = (self.workers.len() >= overlaps::MIN_THREADS
            && asks.len() >= overlaps::MIN_PARALLEL_BATCH
            && !self.explainer.on)
            .then(|| {
                let (counted, cpu) =
                    overlaps::count(&self.index, &self.config, asks, &mut self.workers);
                self.times.counting += started.elapsed();
                self.times.counting_cpu += cpu;
                self.times.counted_batches += 1;
                counted
            });
        let serial_started = thread_cpu_time();
        self.filled.clear(self.index.slots(), asks.len());
        if counted.is_some() {
            let keys = asks.iter().map(|ask| ask.sketch.band_keys.len()).sum();
            self.batch_keys.clear(keys);
            // The batch's growth of the postings waits for its end, and is
            // then shared among the counting threads.
            self.index.defer_growth();
        }
        // Candidates walked in an earlier call are not this batch's.
        for walked in &mut self.walked {
            walked.position = None;
        }
        for (position, ask) in asks.iter().enumerate() {
            for (distance, stage) in PREFETCH_STAGES {
                let Some(ahead) = asks.get(position + distance) else {
                    continue;
                };
                // With the overlaps counted, the decision reads the entries
                // of only the few candidates that could reach the floor,
                // and not their sets.
                if let Some(counted) = &counted
                    && stage != PrefetchStage::Postings
                {
                    if stage == PrefetchStage::Entries {
                        let slots = counted
                            .of(position + distance)
                            .iter()
                            .map(|&(slot, _)| slot);
                        self.index.prefetch_slots(slots);
                    }
                    continue;
                }
                // The entries stage walks the message's postings and keeps
                // its candidates; the sets stage reads them, when that ran
                // in this call.
                match stage {
                    PrefetchStage::Entries => {
                        if ahead.op != Op::Remove {
                            self.walk_ahead(position + distance, ahead.sketch);
                        }
                    }
                    PrefetchStage::Sets => {
                        let walked = &self.walked[(position + distance) % WALKED_RING];
                        if walked.position == Some(position + distance) {
                            let loaded = walked.slots.len().min(index::PREFETCH_BUDGET);
                            self.index.prefetch_sets(&walked.slots[..loaded]);
                        }
                    }
                    PrefetchStage::Postings => self.prefetch(ahead.sketch, stage),
                }
            }
            self.prefetch_evictions();
            // `--explain` takes the decision's own walk, as it does the
            // uncounted path (see `counted` above).
            let walked = &self.walked[position % WALKED_RING];
            self.walked_for =
                (counted.is_none() && !self.explainer.on && walked.position == Some(position))
                    .then_some(position % WALKED_RING);
            let counted = counted.as_ref().map(|counted| counted.of(position));
            verdicts.push(match ask.op {
                Op::Check => self.check_counted(ask.id.clone(), ask.sketch, ask.time, counted),
                Op::Query => self.query_counted(Some(ask.id), ask.sketch, counted),
                Op::Remove => {
                    if self.explainer.on {
                        self.explainer.last = Some(Explanation::deleted(self.config.threshold));
                    }
                    Verdict::Deleted {
                        held: self.remove(ask.id) > 0,
                    }
                }
            });
            self.walked_for = None;
            if self.explainer.on {
                let last = self.explainer.last.take();
                self.explainer.batch.extend(last);
            }
        }
        if counted.is_some() {
            self.index.finish_growth(self.workers.len());
        }
        self.times.serial_cpu += thread_cpu_time().saturating_sub(serial_started);
        Ok(())
    }

    fn set_explain(&mut self, on: bool) -> bool {
        Deduper::set_explain(self, on);
        true
    }

    fn explanations(&self) -> &[Explanation] {
        &self.explainer.batch
    }

    fn stats(&self) -> IndexStats {
        IndexStats {
            len: self.index.len() as u64,
            capacity: self.index.capacity() as u64,
            evictions: self.index.evictions(),
            bytes: Some(self.index.bytes() as u64),
            max_bytes: self.index.max_bytes().map(|b| b as u64),
            times: Some(self.times),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::config::DEFAULT_RECENT;
    use std::num::NonZeroUsize;

    /// The anchor keys as they were appended before the fixed-length runs
    /// (the oracle of `push_anchor_keys`).
    fn reference_anchor_keys(tokens: &[u64], out: &mut Vec<u32>) {
        if tokens.len() >= SHORT_ANCHOR_TOKENS {
            out.push(anchor_key(SHORT_TAG, &tokens[..SHORT_ANCHOR_TOKENS]));
        }
        if tokens.len() >= ANCHOR_TOKENS {
            out.push(anchor_key(PREFIX_TAG, &tokens[..ANCHOR_TOKENS]));
            out.push(anchor_key(
                SUFFIX_TAG,
                &tokens[tokens.len() - ANCHOR_TOKENS..],
            ));
        }
    }

    proptest::proptest! {
        /// Every length of token sequence, around the anchors' lengths and
        /// past them, gets the keys it got, after what the vector held.
        #[test]
        fn anchor_keys_are_the_reference_keys(
            tokens in proptest::collection::vec(proptest::prelude::any::<u64>(), 0..14),
            before in proptest::collection::vec(proptest::prelude::any::<u32>(), 0..3),
        ) {
            let (mut got, mut want) = (before.clone(), before);
            push_anchor_keys(&tokens, &mut got);
            reference_anchor_keys(&tokens, &mut want);
            proptest::prop_assert_eq!(got, want);
        }

        /// The AVX2 anchor keys, which [`push_anchor_keys`] takes where
        /// the processor has AVX2, are the portable ones.
        #[cfg(target_arch = "x86_64")]
        #[test]
        fn the_avx2_anchor_keys_are_the_portable_ones(
            first in proptest::prelude::any::<[u64; ANCHOR_TOKENS]>(),
            last in proptest::prelude::any::<[u64; ANCHOR_TOKENS]>(),
        ) {
            if std::arch::is_x86_feature_detected!("avx2") {
                // SAFETY: the processor has AVX2 (checked just above).
                let got = unsafe { anchor_keys_avx2(&first, &last) };
                proptest::prop_assert_eq!(got, anchor_keys(&first, &last));
            }
        }
    }

    proptest::proptest! {
        /// The filled slots answer as a plain set of every slot inserted
        /// since the batch started, below the start's slots (refilled) or
        /// past them, over batches one after another (so a stale batch's
        /// slots must not answer).
        #[test]
        fn filled_slots_are_the_slots_inserted_in_the_batch(
            batches in proptest::collection::vec(
                (0u32..300, proptest::collection::vec(0u32..400, 0..80)),
                1..5,
            ),
        ) {
            let mut filled = FilledSlots::default();
            for (slots, inserted) in batches {
                filled.clear(slots as usize, inserted.len());
                let mut want = std::collections::HashSet::new();
                for &slot in &inserted {
                    filled.insert(slot);
                    want.insert(slot);
                }
                for slot in 0..400 {
                    // A slot at or past the start's is one the batch filled
                    // (the index adds slots at its end only).
                    let filled_by_batch = want.contains(&slot) || slot >= slots;
                    proptest::prop_assert_eq!(filled.contains(slot), filled_by_batch, "slot {}", slot);
                }
            }
        }
    }

    fn deduper(capacity: usize) -> Deduper {
        Deduper::new(EngineConfig {
            capacity: NonZeroUsize::new(capacity).unwrap(),
            ..EngineConfig::default()
        })
        .unwrap()
    }

    fn id(n: u64) -> MessageId {
        MessageId::Integer(n)
    }

    /// Checks `text` as message `n` and says whether it is a duplicate of
    /// message `of`.
    fn dup_of(d: &mut Deduper, n: u64, text: &str, of: u64) -> bool {
        matches!(d.check_text(id(n), text), Verdict::Duplicate(m) if m.of == id(of))
    }

    /// Fills the index with `count` unrelated messages from `from` on, so
    /// that what came before is beyond `--recent`.
    fn pass_time(d: &mut Deduper, from: u64, count: u64) {
        for n in from..from + count {
            d.check_text(id(n), &format!("filler {n} message w{n}a w{n}b w{n}c"));
        }
    }

    // Texts of one template with a number changed (issue 39, real tweets of
    // 2012-2013): not duplicates, however close in the stream.
    #[test]
    fn template_texts_that_differ_in_a_number_are_not_duplicates() {
        let pairs = [
            (
                "I'm at Frankenstorm Apocalypse - Hurricane Sandy (Everywhere) w/ 2910 others",
                "I'm at Frankenstorm Apocalypse - Hurricane Sandy (Everywhere) w/ 226 others",
            ),
            (
                "Hurricane Sandy hits the east coast: 12 photos of the damage",
                "Hurricane Sandy hits the east coast: 23 photos of the damage",
            ),
            (
                "Boston marathon explosions: 160 Injured, two dead, police say",
                "Boston marathon explosions: 200 Injured, two dead, police say",
            ),
        ];
        for (a, b) in pairs {
            let mut d = deduper(100);
            d.check_text(id(1), a);
            assert_eq!(d.check_text(id(2), b), Verdict::New, "{b}");
        }
    }

    // Copies keep their numbers, or lose them only where they were cut; a
    // number written with or without separators is the same.
    #[test]
    fn copies_of_texts_with_numbers_are_still_duplicates() {
        let original =
            "Boston marathon explosions: 160 Injured, two dead, police say http://t.co/abc";
        let copies = [
            "RT @news: Boston marathon explosions: 160 Injured, two dead, police say",
            "Praying for Boston +1 \u{201c}@news: Boston marathon explosions: 160 Injured, two dead, police say\u{201d}",
            "Boston marathon explosions: 160 Injured, two dead, police…",
        ];
        for copy in copies {
            let mut d = deduper(100);
            d.check_text(id(1), original);
            assert!(dup_of(&mut d, 2, copy, 1), "{copy}");
        }
        let mut d = deduper(100);
        d.check_text(
            id(1),
            "Magnitude 7.2 earthquake hits Bohol, no more joke #prayforbohol",
        );
        assert!(dup_of(
            &mut d,
            2,
            "magnitude 72 earthquake hits bohol no more joke #prayforbohol",
            1
        ));
    }

    // A short common phrase written again far back in the stream by someone
    // else (issue 39: more than 6,000 tweets apart, across events).
    #[test]
    fn a_short_text_from_far_back_needs_all_its_words() {
        let mut d = deduper(100_000);
        d.check_text(id(1), "I don't give a fuck.");
        d.check_text(id(2), "Prayers go out to everyone in Oklahoma tonight");
        pass_time(&mut d, 10, DEFAULT_RECENT + 10);
        assert_eq!(
            d.check_text(id(100_000), "I don't give a boo boo"),
            Verdict::New
        );
        // The same words from far back are still a copy...
        assert!(dup_of(
            &mut d,
            100_001,
            "RT @x: Prayers go out to everyone in Oklahoma tonight",
            2
        ));
        // A cut copy whose cut fell in a run of hashtags has its words
        // too: what is left of the run goes with the cut word.
        d.check_text(
            id(100_002),
            "Quick question: she was meeting the first shop? #javascript #worldcup #photography",
        );
        pass_time(&mut d, 100_003, DEFAULT_RECENT + 10);
        assert!(dup_of(
            &mut d,
            200_000,
            "Quick question: she was meeting the first shop? #javascript #worldcup...",
            100_002
        ));
        // ...and a recent match needs no more than before.
        let mut d = deduper(100);
        d.check_text(id(1), "I don't give a fuck.");
        assert!(d.check_text(id(2), "I don't give a boo boo").is_duplicate());
    }

    #[test]
    fn retweets_truncations_and_comments_are_caught() {
        let mut d = deduper(100);
        let original = "Our new paper on streaming near-duplicate detection is out today, with code and data for everyone";
        assert_eq!(d.check_text(id(1), original), Verdict::New);
        for (n, copy) in [
            (2, format!("RT @lab: {original}")),
            (3, format!("RT @bob: RT @lab: {original}")),
            (4, "RT @lab: Our new paper on streaming near-duplicate detection is out today, with code and da…".to_string()),
            (5, format!("{original} so good, read it")),
            (6, original.to_uppercase()),
        ] {
            match d.check_text(id(n), &copy) {
                Verdict::Duplicate(m) => assert_eq!(m.of, id(1), "{copy}"),
                other => panic!("missed: {copy}: {other:?}"),
            }
        }
        assert_eq!(
            d.index().len(),
            3,
            "exact copies are not indexed; the truncation and the comment are"
        );
    }

    #[test]
    fn a_message_sent_again_gets_its_first_verdict_and_changes_nothing() {
        let mut d = deduper(100);
        let original = "Our new paper on streaming near-duplicate detection is out today, with code and data for everyone";
        let comment = format!("{original} so good, read it");
        assert_eq!(d.check_text(id(1), original), Verdict::New);
        let first = d.check_text(id(2), &comment);
        let Verdict::Duplicate(m) = first.clone() else {
            panic!("{first:?}");
        };
        assert_eq!(d.check_text(id(3), original).first(), first.first().clone());
        let (len, seq, counts) = (d.index().len(), d.next_seq(), d.counts());
        // Sent again (a retry, a redelivery): never a duplicate of itself.
        assert_eq!(d.check_text(id(1), original), Verdict::Repeat(None));
        assert_eq!(d.check_text(id(2), &comment), Verdict::Repeat(Some(m)));
        // The tweet's number as a string is the same tweet.
        assert!(
            d.check_text(MessageId::DigitString(1), original)
                .is_repeat()
        );
        assert_eq!(d.index().len(), len, "nothing indexed again");
        assert_eq!(d.next_seq(), seq, "no arrival number taken");
        let after = d.counts();
        assert_eq!(after.repeats, 3);
        assert_eq!(
            (after.new, after.duplicates),
            (counts.new + 2, counts.duplicates + 1)
        );
        // An exact copy is not indexed: sent again, it is decided again,
        // and gets the same verdict.
        assert_eq!(
            d.check_text(id(3), original),
            Verdict::Duplicate(Match {
                of: id(1),
                similarity: 1.0,
                cluster: id(1),
            })
        );
    }

    #[test]
    fn another_text_under_a_known_id_is_never_a_duplicate_of_itself() {
        let mut d = deduper(100);
        let text = "Flooding has closed the coastal highway north of the city tonight, police say";
        assert_eq!(d.check_text(id(1), text), Verdict::New);
        // An edit under the same id: its own earlier text is not a match.
        let edited = format!("{text}. Avoid the area");
        assert_eq!(d.check_text(id(1), &edited), Verdict::New);
        match d.check_text(id(2), &edited) {
            Verdict::Duplicate(m) => assert_eq!(m.of, id(1)),
            other => panic!("{other:?}"),
        }
        // A query naming an indexed message's id and text is a repeat too.
        let sketch = d.preparer().sketch(text, &[], &mut Scratch::default());
        let mut verdicts = Vec::new();
        let ask = Ask {
            id: &id(1),
            sketch: sketch.as_sketch(),
            op: Op::Query,
            token: None,
            time: 0,
        };
        IndexStore::decide(&mut d, &[ask], &mut verdicts).unwrap();
        assert_eq!(verdicts, [Verdict::Repeat(None)]);
    }

    /// The batch's key filter holds every key put in it, at every size, and
    /// turns most others away (else every key would be walked).
    #[test]
    fn the_key_filter_holds_its_keys_and_turns_most_others_away() {
        let mut filter = KeyFilter::default();
        let mut x = 7u32;
        let mut next = || {
            x = x.wrapping_mul(0x2c1b_3c6d).wrapping_add(0x297a_2d39);
            x
        };
        for keys in [0usize, 1, 100, 512, 10_000, 40_000, 3_000] {
            filter.clear(keys);
            // Random keys, and keys alike but for their high bits.
            let held: Vec<u32> = (0..keys)
                .map(|n| if n % 2 == 0 { next() } else { (n as u32) << 20 })
                .collect();
            for &key in &held {
                filter.insert(key);
            }
            for &key in &held {
                assert!(filter.may_contain(key), "{keys} keys lost {key:#x}");
            }
            let others = (0..10_000).filter(|_| filter.may_contain(next())).count();
            assert!(
                others < 1_500,
                "{keys} keys: {others} of 10,000 others let in"
            );
        }
        // Emptied, it holds nothing of before.
        filter.clear(10);
        assert_eq!(
            (0..10_000).filter(|_| filter.may_contain(next())).count(),
            0
        );
    }

    /// Asking and adding in one call answers as asking alone did before the
    /// key went in, and holds the key after, at every size.
    #[test]
    fn the_key_filter_asked_and_filled_at_once_answers_as_asked_before() {
        let mut x = 11u32;
        let mut next = || {
            x = x.wrapping_mul(0x2c1b_3c6d).wrapping_add(0x297a_2d39);
            x
        };
        for keys in [0usize, 1, 100, 512, 10_000] {
            let (mut both, mut apart) = (KeyFilter::default(), KeyFilter::default());
            both.clear(keys);
            apart.clear(keys);
            // Twice as many asks as the filter is sized for, so that some
            // find their bit set by a key before them.
            for n in 0..2 * keys {
                let key = if n % 3 == 0 { (n as u32) << 20 } else { next() };
                let asked = apart.may_contain(key);
                apart.insert(key);
                assert_eq!(
                    both.may_contain_then_insert(key),
                    asked,
                    "{keys} keys: {key:#x}"
                );
                assert!(both.may_contain(key));
            }
            assert_eq!(both.words, apart.words);
        }
    }

    #[test]
    fn repeats_in_a_batch_counted_ahead_get_their_first_verdicts() {
        // The same through the batch decision with overlaps counted on
        // several threads (see overlaps): a batch of originals, then the
        // same batch again.
        let mut d = deduper(10_000);
        d.set_threads(NonZeroUsize::new(3).unwrap());
        let preparer = d.preparer().clone();
        let texts: Vec<String> = (0..200)
            .map(|n| {
                format!(
                    "story {} about the {} river and the {} bridge closing tonight",
                    n / 2,
                    n % 7,
                    n / 2
                )
            })
            .collect();
        let sketches: Vec<SketchBuf> = texts
            .iter()
            .map(|t| preparer.sketch(t, &[], &mut Scratch::default()))
            .collect();
        let ids: Vec<MessageId> = (0..200).map(id).collect();
        let asks = checks(&sketches, &ids);
        let (mut first, mut again) = (Vec::new(), Vec::new());
        IndexStore::decide(&mut d, &asks, &mut first).unwrap();
        assert!(first.iter().any(Verdict::is_duplicate));
        IndexStore::decide(&mut d, &asks, &mut again).unwrap();
        for (one, two) in first.iter().zip(&again) {
            match one {
                // An exact copy is decided again, alike.
                Verdict::Duplicate(m) if m.similarity >= 1.0 => assert_eq!(two, one),
                _ => {
                    assert!(two.is_repeat(), "{one:?} then {two:?}");
                    assert_eq!(&two.first(), one);
                }
            }
        }
    }

    /// The cluster of a verdict, or `None` for a new message.
    fn cluster(v: &Verdict) -> Option<(MessageId, MessageId)> {
        match v {
            Verdict::Duplicate(m) => Some((m.of.clone(), m.cluster.clone())),
            _ => None,
        }
    }

    #[test]
    fn a_chain_keeps_the_cluster_of_its_head_after_the_head_is_evicted() {
        let mut d = deduper(3);
        let words = |edits: &[(usize, &str)]| {
            let mut w: Vec<&str> = "the river burst its banks overnight and the old mill road \
                 is closed until further notice say county officials"
                .split(' ')
                .collect();
            for &(at, word) in edits {
                w[at] = word;
            }
            w.join(" ")
        };
        let c_text = words(&[(18, "officers"), (0, "a")]);
        assert_eq!(d.check_text(id(1), &words(&[])), Verdict::New);
        let b = d.check_text(id(2), &words(&[(18, "officers")]));
        assert_eq!(cluster(&b), Some((id(1), id(1))));
        let c = d.check_text(id(3), &c_text);
        assert_eq!(cluster(&c), Some((id(2), id(1))), "joins 2's chain");
        // An exact copy is not indexed, but still reports the cluster.
        let copy = d.check_text(id(4), &c_text);
        assert_eq!(cluster(&copy), Some((id(3), id(1))));
        assert_eq!(
            d.check_text(id(5), "something else entirely about a bake sale"),
            Verdict::New
        );
        assert!(
            d.index().iter_lru_first().all(|e| e.id != id(1)),
            "the head is evicted"
        );
        let e = d.check_text(id(6), &format!("{c_text} this morning"));
        assert_eq!(cluster(&e), Some((id(3), id(1))), "the cluster outlives it");
        let clusters: Vec<(MessageId, MessageId)> = d
            .index()
            .iter_lru_first()
            .map(|e| (e.id.clone(), e.cluster().clone()))
            .collect();
        assert_eq!(
            clusters,
            [(id(5), id(5)), (id(3), id(1)), (id(6), id(1))],
            "a new message is its own cluster"
        );
    }

    fn windowed(window_ms: u64) -> Deduper {
        Deduper::new(EngineConfig {
            capacity: NonZeroUsize::new(100).unwrap(),
            window: crate::engine::config::Window::from_millis(window_ms),
            ..EngineConfig::default()
        })
        .unwrap()
    }

    /// A candidate counted ahead of its batch that leaves the index within
    /// the batch before the message comes (expired here; evicted under a
    /// byte budget or removed alike) is no longer a candidate, though its
    /// entry still sits in its slot until the slot is refilled.
    #[test]
    fn a_counted_candidate_that_expired_meanwhile_is_not_matched() {
        let story = "Flooding has closed the coastal highway north of the city tonight";
        let decide = |threads: usize| {
            // Room for the whole batch: the story leaves by expiring.
            let mut d = Deduper::new(EngineConfig {
                capacity: NonZeroUsize::new(1000).unwrap(),
                window: crate::engine::config::Window::from_millis(50),
                ..EngineConfig::default()
            })
            .unwrap();
            d.set_threads(NonZeroUsize::new(threads).unwrap());
            at(&mut d, 0, story, 0);
            let mut scratch = Scratch::default();
            let fillers: Vec<SketchBuf> = (0..overlaps::MIN_PARALLEL_BATCH)
                .map(|n| {
                    let text = format!("unrelated note number {n} about {}", n * 7919);
                    d.preparer().sketch(&text, &[], &mut scratch)
                })
                .collect();
            let copy = d.preparer().sketch(story, &[], &mut scratch);
            let ids: Vec<MessageId> = (1..=fillers.len() as u64 + 1).map(id).collect();
            // The copy comes last, late enough that the story expires
            // when it arrives.
            let asks: Vec<Ask<'_>> = fillers
                .iter()
                .chain(std::iter::once(&copy))
                .zip(&ids)
                .enumerate()
                .map(|(n, (sketch, id))| Ask {
                    id,
                    sketch: sketch.as_sketch(),
                    op: Op::Check,
                    token: None,
                    time: if n == fillers.len() { 100 } else { 0 },
                })
                .collect();
            let mut verdicts = Vec::new();
            IndexStore::decide(&mut d, &asks, &mut verdicts).unwrap();
            let counted = d.stats().times.map_or(0, |t| t.counted_batches);
            (verdicts.pop().unwrap(), counted)
        };
        assert_eq!(decide(1), (Verdict::New, 0));
        assert_eq!(decide(overlaps::MIN_THREADS), (Verdict::New, 1));
    }

    /// A message's candidates are walked a few places before its decision
    /// (see [`ahead`]). When the slot of one of them is given to another
    /// message in between, the newcomer is no candidate unless it posted
    /// under the message's keys, however similar: here it did not, and the
    /// message is new, as it is when walked at its decision.
    #[test]
    fn a_slot_walked_ahead_and_refilled_meanwhile_is_not_its_newcomers() {
        let mut d = Deduper::new(EngineConfig {
            capacity: NonZeroUsize::new(1).unwrap(),
            ..EngineConfig::default()
        })
        .unwrap();
        d.set_threads(NonZeroUsize::MIN);
        let bands = d.preparer().lsh_params().bands;
        let sketch = |shingles: Vec<u32>, key: u32| SketchBuf {
            set_fingerprint: index::set_fingerprint(&shingles),
            shingles,
            band_keys: (0..bands as u32).map(|band| key * 100 + band).collect(),
            truncated: false,
        };
        let set = |last: u32| (1..20).chain(std::iter::once(last)).collect::<Vec<_>>();
        // In slot 0 when the message is walked, under its keys.
        let walked = sketch(set(40), 1);
        let walked_verdict = d.check(id(100), walked.as_sketch());
        assert_eq!(walked_verdict, Verdict::New);
        // Each insert evicts the one before, into slot 0; the last, of
        // nearly the message's set, under other keys.
        let mut batch: Vec<SketchBuf> = (0..ENTRIES_DISTANCE as u32 - 1)
            .map(|n| sketch((1000 * (n + 1)..1000 * (n + 1) + 20).collect(), n + 2))
            .collect();
        batch.push(sketch(set(50), 9));
        batch.push(sketch(set(30), 1));
        let ids: Vec<MessageId> = (0..batch.len() as u64).map(id).collect();
        let asks = checks(&batch, &ids);
        let mut verdicts = Vec::new();
        IndexStore::decide(&mut d, &asks, &mut verdicts).unwrap();
        assert_eq!(verdicts.last(), Some(&Verdict::New));
        // The same message, walked at its decision.
        let mut alone = Deduper::new(EngineConfig {
            capacity: NonZeroUsize::new(1).unwrap(),
            ..EngineConfig::default()
        })
        .unwrap();
        alone.check(id(5), batch[ENTRIES_DISTANCE - 1].as_sketch());
        assert_eq!(
            alone.check(id(6), batch[ENTRIES_DISTANCE].as_sketch()),
            Verdict::New
        );
    }

    /// The candidates' loop is built twice, for AVX2 (the count inlined)
    /// and for any processor; both give every message the same verdict, on
    /// a stream of copies cut, edited, commented and retweeted, decided in
    /// batches.
    #[test]
    fn the_candidates_loop_built_for_avx2_decides_as_the_portable_one() {
        const WORDS: [&str; 24] = [
            "river", "flood", "mayor", "road", "closed", "bridge", "storm", "night", "school",
            "rescue", "water", "people", "city", "north", "help", "power", "out", "homes",
            "warning", "rain", "still", "rising", "today", "update",
        ];
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut next = move |n: usize| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % n as u64) as usize
        };
        let stories: Vec<Vec<&str>> = (0..40)
            .map(|_| {
                (0..6 + next(14))
                    .map(|_| WORDS[next(WORDS.len())])
                    .collect()
            })
            .collect();
        let texts: Vec<String> = (0..1_500)
            .map(|_| {
                let mut words = stories[next(stories.len())].clone();
                match next(5) {
                    0 => words.truncate(words.len() - next(3)),
                    1 => {
                        let at = next(words.len());
                        words[at] = WORDS[next(WORDS.len())];
                    }
                    2 => words.extend(["so", "sad", "#news"]),
                    3 => words.insert(0, "RT @desk:"),
                    _ => {}
                }
                words.join(" ")
            })
            .collect();
        let decide_all = |portable: bool| {
            let mut d = Deduper::new(EngineConfig {
                capacity: NonZeroUsize::new(300).unwrap(),
                ..EngineConfig::default()
            })
            .unwrap();
            d.set_threads(NonZeroUsize::MIN);
            if portable {
                d.verifier.count_one_at_a_time();
            }
            let sketches: Vec<SketchBuf> = texts
                .iter()
                .map(|text| d.preparer().sketch(text, &[], &mut Scratch::default()))
                .collect();
            let ids: Vec<MessageId> = (0..texts.len() as u64).map(id).collect();
            let mut verdicts = Vec::new();
            for (sketches, ids) in sketches.chunks(16).zip(ids.chunks(16)) {
                IndexStore::decide(&mut d, &checks(sketches, ids), &mut verdicts).unwrap();
            }
            verdicts
        };
        let (eight, one) = (decide_all(false), decide_all(true));
        assert_eq!(eight.len(), one.len());
        if let Some(at) = (0..eight.len()).find(|&at| eight[at] != one[at]) {
            panic!("message {at}: {:?} against {:?}", eight[at], one[at]);
        }
        let near = eight
            .iter()
            .filter(|v| matches!(v, Verdict::Duplicate(m) if m.similarity < 1.0))
            .count();
        assert!(near > 100, "{near} near-duplicates: too few to compare");
    }

    /// A batch checking each of `sketches` under the id beside it, at time 0.
    fn checks<'a>(sketches: &'a [SketchBuf], ids: &'a [MessageId]) -> Vec<Ask<'a>> {
        sketches
            .iter()
            .zip(ids)
            .map(|(sketch, id)| Ask {
                id,
                sketch: sketch.as_sketch(),
                op: Op::Check,
                token: None,
                time: 0,
            })
            .collect()
    }

    /// Checks `text` as message `n` of time `time`.
    fn at(d: &mut Deduper, n: u64, text: &str, time: i64) -> Verdict {
        let sketch = d.preparer().sketch(text, &[], &mut Scratch::default());
        d.check_at(id(n), sketch.as_sketch(), time)
    }

    const STORY: &str = "the river burst its banks overnight and the old mill road is closed";

    #[test]
    fn messages_older_than_the_window_are_not_matched_and_leave() {
        let mut d = windowed(100);
        assert_eq!(at(&mut d, 1, STORY, 1_000), Verdict::New);
        assert!(
            at(&mut d, 2, &format!("{STORY} today"), 1_100).is_duplicate(),
            "exactly the window apart: still matched"
        );
        assert_eq!(d.index().len(), 2, "a near-duplicate is indexed");
        assert_eq!(
            at(&mut d, 3, &format!("{STORY}!!"), 1_201),
            Verdict::New,
            "both are older than the window"
        );
        assert_eq!(d.index().len(), 1);
        assert_eq!(d.index().evictions(), 2);
    }

    #[test]
    fn an_exact_copy_renews_a_near_duplicate_does_not() {
        let mut d = windowed(100);
        at(&mut d, 1, STORY, 0);
        // An exact copy (not indexed) renews 1 to its time.
        assert!(at(&mut d, 2, STORY, 80).is_duplicate());
        assert_eq!(d.index().len(), 1);
        assert!(at(&mut d, 3, STORY, 170).is_duplicate(), "renewed at 80");
        // A near-duplicate is indexed with its own time; 1 keeps 170.
        assert!(at(&mut d, 4, &format!("{STORY} today"), 260).is_duplicate());
        let times: Vec<(MessageId, i64)> = d
            .index()
            .iter_lru_first()
            .map(|e| (e.id.clone(), e.time))
            .collect();
        assert_eq!(times, [(id(1), 170), (id(4), 260)]);
        // At 275, 1 (170) is gone and 4 (260) is the chain's last link.
        let v = at(&mut d, 5, &format!("{STORY} today"), 275);
        assert!(
            matches!(&v, Verdict::Duplicate(m) if m.of == id(4) && m.cluster == id(1)),
            "{v:?}"
        );
        assert_eq!(d.index().len(), 1);
    }

    #[test]
    fn the_window_reaches_back_from_the_newest_time_seen() {
        let mut d = windowed(100);
        at(&mut d, 1, STORY, 1_000);
        at(
            &mut d,
            2,
            "a different story about a bake sale on main street",
            2_000,
        );
        // Out of order: 500 is not the clock; 2000 is, and 1 is gone.
        assert_eq!(at(&mut d, 3, STORY, 500), Verdict::New);
        assert_eq!(
            d.index().len(),
            1,
            "a message older than the window is not indexed"
        );
        // A late message is still matched against what is indexed.
        assert!(
            at(
                &mut d,
                4,
                "a different story about a bake sale on main street",
                1_950
            )
            .is_duplicate()
        );
        assert_eq!(d.newest_time(), Some(2_000));
    }

    #[test]
    fn a_quiet_stream_shrinks_the_index_to_the_window() {
        let mut d = windowed(25);
        for n in 0..40u64 {
            let text = format!("message number {n} says something of its own w{n} x{n}");
            assert_eq!(at(&mut d, n, &text, n as i64 * 10), Verdict::New);
            assert!(d.index().len() <= 3, "{n}: {}", d.index().len());
        }
        assert_eq!(d.index().evictions(), 37);
        // Freed slots are reused: the entries never grew past the window.
        assert!(d.index().postings() <= 3 * (lsh_params(d.config()).bands + MAX_ANCHORS + 1));
    }

    #[test]
    fn without_a_window_times_are_not_kept() {
        let mut d = deduper(10);
        at(&mut d, 1, STORY, 1_000);
        assert!(at(&mut d, 2, STORY, 1_000_000_000).is_duplicate());
        assert_eq!(d.index().iter_lru_first().next().unwrap().time, 0);
        assert_eq!(d.newest_time(), None);
    }

    #[test]
    fn shared_hashtags_and_templates_are_not_duplicates() {
        let mut d = deduper(100);
        assert_eq!(
            d.check_text(
                id(1),
                "Just landed in Portland for #RustConf, so excited to meet everyone"
            ),
            Verdict::New
        );
        assert_eq!(
            d.check_text(
                id(2),
                "Great talk on async cancellation this morning #RustConf"
            ),
            Verdict::New
        );
        assert_eq!(
            d.check_text(id(3), "I'm at Blue Bottle Coffee in San Francisco, CA"),
            Verdict::New
        );
        assert_eq!(
            d.check_text(id(4), "I'm at Powell's City of Books in Portland, OR"),
            Verdict::New
        );
    }

    #[test]
    fn anchor_clusters_count_distinct_clusters_up_to_the_limit() {
        let mut clusters = AnchorClusters::new();
        for cluster in [1, 1, 2, 1, 3, 2, 3] {
            assert!(clusters.add(cluster), "{cluster}");
        }
        assert!(!clusters.add(4));
    }

    /// A copy with a comment after it begins as its original does; so do
    /// the messages of a template. The shared beginning makes the pair one
    /// of containment only while the messages that begin so are few
    /// stories: past MAX_ANCHOR_CLUSTERS, it is a template's opening.
    #[test]
    fn an_anchor_shared_by_many_stories_is_a_templates() {
        let short = "I added a video to a YouTube playlist";
        let longer = "I added a video to a YouTube playlist acoustic quick in full easy mix";
        // One story begins so: the longer text holds it, a comment added.
        let mut d = deduper(100);
        assert_eq!(d.check_text(id(1), short), Verdict::New);
        assert!(d.check_text(id(2), longer).is_duplicate());
        // Four stories begin so: the beginning is a template's, and the
        // longer text shares too little else (Jaccard 0.56) to be a copy.
        let mut d = deduper(100);
        let openings = [
            short,
            "I added a video to a list of cooking clips for Sunday",
            "I added a video to a thread about river birds at dawn",
            "I added a video to a folder of old concert recordings",
        ];
        for (n, text) in openings.into_iter().enumerate() {
            assert_eq!(d.check_text(id(n as u64 + 1), text), Verdict::New, "{text}");
        }
        assert_eq!(d.check_text(id(9), longer), Verdict::New);
        // Copies of one story keep their anchor, however many they are.
        let mut d = deduper(100);
        assert_eq!(d.check_text(id(1), short), Verdict::New);
        for n in 2..=6 {
            assert!(d.check_text(id(n), short).is_duplicate());
        }
        assert!(d.check_text(id(9), longer).is_duplicate());
    }

    #[test]
    fn most_similar_wins_and_ties_go_to_the_earliest() {
        let mut d = deduper(100);
        d.check_text(id(1), "alpha beta gamma delta epsilon zeta eta theta");
        d.check_text(id(2), "one two three four five six seven eight nine");
        let v = d.check_text(id(3), "one two three four five six seven eight nine ten");
        assert!(
            matches!(v, Verdict::Duplicate(ref m) if m.of == id(2)),
            "{v:?}"
        );
    }

    #[test]
    fn capacity_one_compares_with_the_previous_message() {
        let mut d = deduper(1);
        assert_eq!(
            d.check_text(id(1), "the same words in the same order"),
            Verdict::New
        );
        assert_eq!(
            d.check_text(id(2), "entirely different content right here"),
            Verdict::New
        );
        assert_eq!(
            d.check_text(id(3), "the same words in the same order"),
            Verdict::New,
            "1 was evicted"
        );
        assert!(
            d.check_text(id(4), "the same words in the same order")
                .is_duplicate()
        );
        assert_eq!(d.index().evictions(), 2);
    }

    #[test]
    fn queries_leave_no_trace() {
        let mut d = deduper(10);
        let s = d
            .preparer()
            .sketch("a query about nothing much", &[], &mut Scratch::default());
        assert_eq!(d.query(s.as_sketch()), Verdict::New);
        assert_eq!(d.index().len(), 0);
        assert_eq!(d.check(id(1), s.as_sketch()), Verdict::New);
        assert!(d.query(s.as_sketch()).is_duplicate());
        assert_eq!(d.index().len(), 1);
    }

    #[test]
    fn explain_shows_the_shingles_the_stream_compares() {
        let long: String = (0..400)
            .map(|i| format!("w{} the x{} ", i % 97, i % 89))
            .collect();
        let texts = [
            "Flooding closes the coastal highway north of the city tonight, police say",
            "the cat sat on the warm mat by the front door",
            "Der Zug nach Hamburg fährt heute in zwei Stunden ab",
            "😂😂😂",
            "hi",
            long.as_str(),
        ];
        for (shingling, sampling) in [
            (Shingling::Words(2), Sampling::All),
            (Shingling::Words(2), Sampling::Mod(2)),
            (Shingling::Spots(1), Sampling::All),
            (Shingling::Spots(2), Sampling::Mod(4)),
            (Shingling::Chars(4), Sampling::Mod(8)),
        ] {
            let preparer = Preparer::new(&EngineConfig {
                shingling,
                sampling,
                ..EngineConfig::default()
            });
            for text in texts {
                let explained: Vec<u32> = preparer
                    .explain(text, &[])
                    .shingles
                    .iter()
                    .map(|(f, _)| *f)
                    .collect();
                let sketch = preparer.sketch(text, &[], &mut Scratch::default());
                assert_eq!(explained, sketch.shingles, "{shingling} {sampling}: {text}");
            }
        }
    }

    #[test]
    fn texts_without_words_still_match_themselves() {
        let mut d = deduper(10);
        assert_eq!(d.check_text(id(1), "😂😂😂"), Verdict::New);
        assert!(d.check_text(id(2), "😂😂😂").is_duplicate());
        assert_eq!(d.check_text(id(3), "🙏"), Verdict::New);
    }

    #[test]
    fn texts_empty_once_normalised_are_new_and_never_candidates() {
        let mut d = deduper(10);
        // The last: all one word cut short by a truncation, dropped with its
        // ellipsis (found by the fuzzer, with NULs in the word).
        for (n, text) in [
            "",
            "   ",
            "https://t.co/abc123",
            "",
            "  \t ",
            "https://t.co/abc123",
            "lu0n\0\0...",
        ]
        .into_iter()
        .enumerate()
        {
            assert_eq!(d.check_text(id(n as u64), text), Verdict::New, "{text:?}");
        }
        assert_eq!(d.index().len(), 0, "nothing stored");
        assert_eq!(d.counts().new, 7);
        let s = d.preparer().sketch("", &[], &mut Scratch::default());
        assert!(s.shingles.is_empty());
        assert_eq!(d.query(s.as_sketch()), Verdict::New);
    }

    #[test]
    fn a_copy_of_a_deleted_tweet_is_decided_against_what_remains() {
        const TWEET: &str = "Keynote starts now at #RustConf, come see the new borrow checker";
        let mut d = deduper(100);
        assert_eq!(d.check_text(id(1), TWEET), Verdict::New);
        let comment = format!("{TWEET} so good, read it");
        let joined = d.check_text(id(2), &comment);
        assert!(matches!(&joined, Verdict::Duplicate(m) if m.of == id(1)));
        // 1 is deleted: a copy of it matches 2, what is left of its cluster
        // (whose name stays 1: the label downstream already holds).
        assert_eq!(d.remove(&MessageId::DigitString(1)), 1);
        match d.check_text(id(3), TWEET) {
            Verdict::Duplicate(m) => assert_eq!((m.of, m.cluster), (id(2), id(1))),
            other => panic!("{other:?}"),
        }
        // Once 2 and 3 (indexed: 1's set was gone) are deleted too,
        // nothing of the cluster is held: new.
        assert_eq!(d.remove(&id(2)), 1);
        assert_eq!(d.remove(&id(3)), 1);
        assert_eq!(d.check_text(id(4), TWEET), Verdict::New);
        assert_eq!(d.remove(&id(99)), 0, "an unknown id changes nothing");
        assert_eq!(d.index().len(), 1);
    }

    #[test]
    fn a_removal_in_a_batch_applies_where_it_stands() {
        const TWEET: &str = "the river burst its banks overnight and the old mill road is closed";
        let mut d = deduper(100);
        let sketch = d.preparer().sketch(TWEET, &[], &mut Scratch::default());
        let ids = [id(1), id(1), id(2), id(2)];
        let ops = [Op::Check, Op::Remove, Op::Check, Op::Remove];
        let asks: Vec<Ask<'_>> = ids
            .iter()
            .zip(ops)
            .map(|(id, op)| Ask {
                id,
                sketch: sketch.as_sketch(),
                op,
                token: None,
                time: 0,
            })
            .collect();
        let mut verdicts = Vec::new();
        IndexStore::decide(&mut d, &asks, &mut verdicts).unwrap();
        assert_eq!(
            verdicts,
            [
                Verdict::New,
                Verdict::Deleted { held: true },
                Verdict::New,
                Verdict::Deleted { held: true },
            ]
        );
        assert!(d.index().is_empty());
        assert_eq!(d.counts().messages, 2, "removals are not messages");
    }
}

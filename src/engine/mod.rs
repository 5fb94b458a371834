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

pub mod bitmap;
pub mod hint;
pub mod index;
pub mod normalise;
pub mod postings;
pub mod shingle;
pub mod sketch;
pub mod store;
pub mod tokenise;
pub mod verdict;

use std::borrow::Cow;

use crate::config::{EngineConfig, Measure, Shingling};
use crate::error::{ConfigError, StoreError};
use crate::record::MessageId;
pub use index::PrefetchStage;
use index::{Index, Insert, set_fingerprint};
use normalise::Normaliser;
use sketch::{LshParams, Sketcher};
pub use store::{Ask, IndexStats, IndexStore, Op};
use tokenise::{Tokeniser, token_hash};
pub use verdict::{Match, Verdict, similarity};

/// A message's sketch: what the index needs to find and verify candidates.
#[derive(Clone, Copy, Debug)]
pub struct Sketch<'a> {
    /// Sorted, deduplicated 32-bit shingle fingerprints.
    pub shingles: &'a [u32],
    /// One key per LSH band.
    pub band_keys: &'a [u32],
    /// Fingerprint of the whole shingle set (the exact-duplicate key).
    pub set_fingerprint: u64,
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
}

impl SketchBuf {
    /// Borrows it as a [`Sketch`].
    pub fn as_sketch(&self) -> Sketch<'_> {
        Sketch {
            shingles: &self.shingles,
            band_keys: &self.band_keys,
            set_fingerprint: self.set_fingerprint,
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
    char_starts: Vec<usize>,
    set: Vec<u32>,
    mixed: Vec<u64>,
}

/// The stateless stages: normalise, tokenise, shingle, sketch. Cheap to
/// clone (compiled regexes are shared); one per thread.
#[derive(Clone, Debug)]
pub struct Preparer {
    normaliser: Normaliser,
    tokeniser: Tokeniser,
    shingling: Shingling,
    sketcher: Sketcher,
}

impl Preparer {
    /// The stages for a configuration.
    pub fn new(config: &EngineConfig) -> Preparer {
        Preparer {
            normaliser: Normaliser::new(),
            tokeniser: Tokeniser::new(),
            shingling: config.shingling,
            sketcher: Sketcher::new(lsh_params(config)),
        }
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
    /// vectors; returns the set fingerprint. Appending lets a batch of
    /// messages share two allocations.
    pub fn sketch_into(
        &self,
        text: &str,
        urls: &[(Cow<'_, str>, Cow<'_, str>)],
        scratch: &mut Scratch,
        shingles: &mut Vec<u32>,
        band_keys: &mut Vec<u32>,
    ) -> u64 {
        self.normaliser
            .normalise_into(text, urls, &mut scratch.normalised, &mut scratch.spare);
        scratch.tokens.clear();
        scratch.joined.clear();
        let want_joined = matches!(self.shingling, Shingling::Chars(_));
        self.tokeniser.tokenise(
            &scratch.normalised,
            &mut scratch.tokens,
            want_joined.then_some(&mut scratch.joined),
        );
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
        shingle::shingle_into(
            self.shingling,
            &scratch.tokens,
            &scratch.joined,
            &mut scratch.char_starts,
            &mut scratch.set,
        );
        shingles.extend_from_slice(&scratch.set);
        self.sketcher
            .band_keys(&scratch.set, &mut scratch.mixed, band_keys);
        push_anchor_keys(&scratch.tokens, band_keys);
        set_fingerprint(&scratch.set)
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
        buf
    }
}

/// Tokens in an anchor: enough that two texts sharing them are about the
/// same thing, few enough that a truncated retweet still has them.
pub const ANCHOR_TOKENS: usize = 6;

/// Appends the anchor keys of a token sequence: its first and its last
/// [`ANCHOR_TOKENS`] tokens, each hashed to a 32-bit key.
///
/// MinHash finds pairs by their Jaccard similarity, and a copy with a long
/// comment added, or a retweet cut to a third of its original, has a low
/// one even though one text contains the other. Such copies keep the
/// original's beginning (a truncation, a comment after it) or its end (a
/// comment before it): the anchors make them candidates, and the measure
/// decides. They cost two postings per message.
pub fn push_anchor_keys(tokens: &[u64], out: &mut Vec<u32>) {
    const PREFIX_TAG: u64 = 0x7072_6566_6978_0001;
    const SUFFIX_TAG: u64 = 0x7375_6666_6978_0002;
    if tokens.len() < ANCHOR_TOKENS {
        return;
    }
    let anchor = |tag: u64, run: &[u64]| {
        let mut h = tag;
        for &t in run {
            h = shingle::mix64(h ^ t);
        }
        (h >> 32) as u32
    };
    out.push(anchor(PREFIX_TAG, &tokens[..ANCHOR_TOKENS]));
    if tokens.len() > ANCHOR_TOKENS {
        out.push(anchor(SUFFIX_TAG, &tokens[tokens.len() - ANCHOR_TOKENS..]));
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
}

impl Preparer {
    /// Shows how a text is normalised and shingled. Slow; for people, not
    /// for the stream.
    pub fn explain(&self, text: &str, urls: &[(Cow<'_, str>, Cow<'_, str>)]) -> Explained {
        let mut scratch = Scratch::default();
        let normalised = self.normalise(text, urls, &mut scratch).to_string();
        let mut explained = self.tokeniser.token_texts(&normalised);
        if explained.is_empty() && !normalised.trim().is_empty() {
            let fallback = normalised.trim().to_string();
            explained.push((token_hash(&fallback), fallback));
        }
        if explained.is_empty() {
            return Explained {
                normalised,
                shingles: Vec::new(),
            };
        }
        let (hashes, tokens): (Vec<u64>, Vec<String>) = explained.into_iter().unzip();
        let mut shingles: Vec<(u32, String)> = match self.shingling {
            Shingling::Words(width) => {
                let width = width.min(tokens.len());
                (0..=tokens.len() - width)
                    .map(|i| {
                        (
                            shingle::fingerprint(&hashes[i..i + width]),
                            tokens[i..i + width].join(" "),
                        )
                    })
                    .collect()
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
        // The sample the stream compares (shingle::MAX_SHINGLES).
        shingles.truncate(shingle::MAX_SHINGLES);
        Explained {
            normalised,
            shingles,
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

/// Counters of the engine's decisions.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EngineCounts {
    /// Messages checked (queries included).
    pub messages: u64,
    /// Verdicts `new`.
    pub new: u64,
    /// Verdicts `duplicate`.
    pub duplicates: u64,
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
    counts: EngineCounts,
    candidates: Vec<u32>,
    scratch: Scratch,
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
        Ok(Deduper {
            preparer: Preparer::new(&config),
            // Band keys, two anchors and the exact-set key.
            index: Index::new(
                config.capacity,
                config.max_bucket,
                lsh_params(&config).bands + 3,
            ),
            config,
            next_seq: 0,
            counts: EngineCounts::default(),
            candidates: Vec::new(),
            scratch: Scratch::default(),
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
    /// is indexed already.
    pub fn check(&mut self, id: MessageId, sketch: Sketch<'_>) -> Verdict {
        if sketch.shingles.is_empty() {
            return self.nothing_to_compare();
        }
        let (verdict, identical) = self.decide(sketch, true);
        if !identical {
            self.index.insert(
                id,
                Insert {
                    seq: self.next_seq,
                    shingles: sketch.shingles,
                    band_keys: sketch.band_keys,
                    set_fingerprint: sketch.set_fingerprint,
                },
            );
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
        if sketch.shingles.is_empty() {
            return self.nothing_to_compare();
        }
        self.decide(sketch, false).0
    }

    /// A message with no shingles (its text is empty once normalised): new,
    /// never a duplicate, and never stored, so never a candidate either.
    fn nothing_to_compare(&mut self) -> Verdict {
        self.counts.messages += 1;
        self.counts.new += 1;
        Verdict::New
    }

    /// Prepares and checks a text in one call (no URL entities).
    pub fn check_text(&mut self, id: MessageId, text: &str) -> Verdict {
        let sketch = self.preparer.sketch(text, &[], &mut self.scratch);
        self.check(id, sketch.as_sketch())
    }

    /// Restores an indexed message (from a snapshot) without deciding: its
    /// shingle set and its anchor keys (see [`Deduper::anchor_keys`]). The
    /// LSH band keys are recomputed from the shingles, so a state file
    /// outlives a change of threshold.
    pub fn restore(&mut self, id: MessageId, seq: u64, shingles: &[u32], anchor_keys: &[u32]) {
        let mut band_keys =
            Vec::with_capacity(self.preparer.lsh_params().bands + anchor_keys.len());
        let mut mixed = Vec::new();
        self.preparer
            .sketcher
            .band_keys(shingles, &mut mixed, &mut band_keys);
        band_keys.extend_from_slice(anchor_keys);
        self.index.insert(
            id,
            Insert {
                seq,
                shingles,
                band_keys: &band_keys,
                set_fingerprint: set_fingerprint(shingles),
            },
        );
        self.next_seq = self.next_seq.max(seq + 1);
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

    /// The verdict, and whether an identical shingle set is indexed.
    fn decide(&mut self, sketch: Sketch<'_>, refresh: bool) -> (Verdict, bool) {
        self.counts.messages += 1;
        let exact = self.index.exact(sketch.set_fingerprint, sketch.shingles);
        let best = match (self.config.measure, exact) {
            // Under Jaccard only an identical set reaches 1, and the index
            // holds at most one message per set: nothing can beat or tie it.
            (Measure::Jaccard, Some(slot)) => Some((slot, 1.0)),
            _ => self.best_match(sketch, exact),
        };
        let verdict = match best {
            Some((slot, similarity)) if similarity >= self.config.threshold => {
                self.counts.duplicates += 1;
                if refresh {
                    self.index.touch(slot);
                }
                let of = self
                    .index
                    .peek(slot)
                    .expect("candidate is indexed")
                    .id
                    .clone();
                Verdict::Duplicate(Match { of, similarity })
            }
            _ => {
                self.counts.new += 1;
                Verdict::New
            }
        };
        (verdict, exact.is_some())
    }

    /// The most similar indexed message (ties: the earliest), if any is at
    /// least as similar as the threshold.
    fn best_match(&mut self, sketch: Sketch<'_>, exact: Option<u32>) -> Option<(u32, f64)> {
        self.candidates.clear();
        self.index
            .candidates(sketch.band_keys, &mut self.candidates);
        self.candidates.extend(exact);
        self.candidates.sort_unstable();
        self.candidates.dedup();
        let filter = verdict::SetFilter::new(sketch.shingles);
        let mut best: Option<(u32, f64, u64)> = None;
        for &slot in &self.candidates {
            let Some(entry) = self.index.peek(slot) else {
                continue;
            };
            // Only a candidate that reaches the best so far (or the
            // threshold) matters, so the comparison may give up early.
            let floor = best.map_or(self.config.threshold, |(_, s, _)| s);
            let Some(s) = verdict::similarity_at_least_filtered(
                self.config.measure,
                sketch.shingles,
                &filter,
                entry.shingles(),
                floor,
            ) else {
                continue;
            };
            let better = match best {
                None => true,
                Some((_, best_s, best_seq)) => s > best_s || (s == best_s && entry.seq < best_seq),
            };
            if better {
                best = Some((slot, s, entry.seq));
            }
        }
        best.map(|(slot, s, _)| (slot, s))
    }
}

/// The prefetch stages and how many messages ahead of the one being decided
/// [`Deduper`]'s [`IndexStore::decide`] runs each. A stage reads what the
/// one before loaded, so each comes a few messages after it: far enough that
/// a few hundred nanoseconds of memory latency pass, near enough that what
/// it loaded is still cached.
pub const PREFETCH_STAGES: [(usize, PrefetchStage); 3] = [
    (8, PrefetchStage::Postings),
    (4, PrefetchStage::Entries),
    (2, PrefetchStage::Sets),
];

impl IndexStore for Deduper {
    /// Decides in order, and before each message asks the memory to start
    /// loading, stage by stage, what the messages a few places later will
    /// read, and what the next evictions will: on a large index the
    /// decision then does not wait on memory. Never fails.
    fn decide(&mut self, asks: &[Ask<'_>], verdicts: &mut Vec<Verdict>) -> Result<(), StoreError> {
        verdicts.reserve(asks.len());
        for (position, ask) in asks.iter().enumerate() {
            for (distance, stage) in PREFETCH_STAGES {
                if let Some(ahead) = asks.get(position + distance) {
                    self.prefetch(ahead.sketch, stage);
                }
            }
            self.prefetch_evictions();
            verdicts.push(match ask.op {
                Op::Check => self.check(ask.id.clone(), ask.sketch),
                Op::Query => self.query(ask.sketch),
            });
        }
        Ok(())
    }

    fn stats(&self) -> IndexStats {
        IndexStats {
            len: self.index.len() as u64,
            capacity: self.index.capacity() as u64,
            evictions: self.index.evictions(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::num::NonZeroUsize;

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
                Verdict::New => panic!("missed: {copy}"),
            }
        }
        assert_eq!(
            d.index().len(),
            3,
            "exact copies are not indexed; the truncation and the comment are"
        );
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
}

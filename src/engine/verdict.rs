//! Stage 5, verdict: compare candidate shingle sets exactly and say what a
//! message is.

use crate::engine::config::Measure;
use crate::engine::id::MessageId;

/// What the engine decided about one message.
#[derive(Clone, Debug, PartialEq)]
pub enum Verdict {
    /// Nothing indexed is similar enough.
    New,
    /// A near-duplicate of an indexed message.
    Duplicate(Match),
    /// The message is indexed already, under its id and with the same
    /// text: it was sent again (a retry after a crash, a redelivery, an
    /// overlapping collection), and gets the verdict it was first given:
    /// new (`None`) or a duplicate of the match it had then. Deciding it
    /// again would find itself and call it a duplicate of itself.
    Repeat(Option<Match>),
    /// The answer to a removal ([`super::Op::Remove`]): whether a message
    /// of that id was held (and is now forgotten).
    Deleted {
        /// Whether the index held a message of that id.
        held: bool,
    },
}

/// The earlier message a duplicate matches.
#[derive(Clone, Debug, PartialEq)]
pub struct Match {
    /// The earlier message's id, as it was in the input.
    pub of: MessageId,
    /// Similarity under the configured measure, in [0, 1].
    pub similarity: f64,
    /// The id of the first message of the chain the duplicate joins: the
    /// cluster of the matched message (its own id when it was new, its
    /// cluster when it was a duplicate itself). Kept with every indexed
    /// message, so it outlives the eviction of the chain's head.
    pub cluster: MessageId,
}

impl Verdict {
    /// Whether this is a duplicate (a repeat of one included).
    pub fn is_duplicate(&self) -> bool {
        matches!(self, Verdict::Duplicate(_) | Verdict::Repeat(Some(_)))
    }

    /// Whether this is a repeat (see [`Verdict::Repeat`]).
    pub fn is_repeat(&self) -> bool {
        matches!(self, Verdict::Repeat(_))
    }

    /// The verdict the message was first given: a repeat's, or this one.
    /// A queue writes a redelivered entry's output with it, byte for byte
    /// the output of its first delivery.
    pub fn first(&self) -> Verdict {
        match self {
            Verdict::Repeat(None) => Verdict::New,
            Verdict::Repeat(Some(m)) => Verdict::Duplicate(m.clone()),
            other => other.clone(),
        }
    }

    /// Appends the verdict's JSON object: `{"status":"new"}`,
    /// `{"status":"duplicate","duplicate_of":ID,"similarity":S,"cluster":ID}`
    /// or, for a removal, `{"status":"deleted","held":true}` (or `false`).
    /// A repeat is its first verdict's object with `"repeat":true` last.
    pub fn write_json(&self, out: &mut Vec<u8>) {
        match self {
            Verdict::New => out.extend_from_slice(br#"{"status":"new"}"#),
            Verdict::Duplicate(m) => {
                write_match(m, out);
                out.push(b'}');
            }
            Verdict::Repeat(None) => out.extend_from_slice(br#"{"status":"new","repeat":true}"#),
            Verdict::Repeat(Some(m)) => {
                write_match(m, out);
                out.extend_from_slice(br#","repeat":true}"#);
            }
            Verdict::Deleted { held: true } => {
                out.extend_from_slice(br#"{"status":"deleted","held":true}"#)
            }
            Verdict::Deleted { held: false } => {
                out.extend_from_slice(br#"{"status":"deleted","held":false}"#)
            }
        }
    }

    /// [`Verdict::write_json`], with an `"explain"` member last when an
    /// explanation is given (`--explain`); without one, the same bytes.
    pub fn write_json_explained(
        &self,
        explanation: Option<&super::Explanation>,
        out: &mut Vec<u8>,
    ) {
        self.write_json(out);
        if let Some(explanation) = explanation {
            out.pop();
            out.extend_from_slice(br#","explain":"#);
            explanation.write_json(out);
            out.push(b'}');
        }
    }

    /// Whether this answers a removal (see [`Verdict::Deleted`]).
    pub fn is_deletion(&self) -> bool {
        matches!(self, Verdict::Deleted { .. })
    }
}

/// Appends a duplicate's members, without the closing brace.
fn write_match(m: &Match, out: &mut Vec<u8>) {
    out.extend_from_slice(br#"{"status":"duplicate","duplicate_of":"#);
    m.of.write_json(out);
    out.extend_from_slice(br#","similarity":"#);
    write_similarity(m.similarity, out);
    out.extend_from_slice(br#","cluster":"#);
    m.cluster.write_json(out);
}

/// A similarity as the quotient of shared shingles and what they are
/// counted against, in [0, 1]: 0 when `of` is 0 (two empty parts share
/// nothing), so that no NaN (0 / 0) or infinity ever reaches a verdict.
pub fn ratio(shared: usize, of: usize) -> f64 {
    if of == 0 {
        return 0.0;
    }
    (shared as f64 / of as f64).clamp(0.0, 1.0)
}

/// Writes a similarity with at most four decimals and no trailing zeros
/// (`1`, `0.5`, `0.8571`): short, and the same on every machine. Whatever
/// the value (a NaN included, though none should reach here), the text is
/// a JSON number in [0, 1].
pub fn write_similarity(similarity: f64, out: &mut Vec<u8>) {
    let similarity = if similarity.is_nan() { 0.0 } else { similarity };
    let scaled = (similarity.clamp(0.0, 1.0) * 10_000.0).round() as u32;
    let (whole, mut frac) = (scaled / 10_000, scaled % 10_000);
    out.push(b'0' + whole as u8);
    if frac == 0 {
        return;
    }
    out.push(b'.');
    let mut digits = 4;
    while frac % 10 == 0 {
        frac /= 10;
        digits -= 1;
    }
    // Written a digit at a time: `format!` cost each duplicate's tag an
    // allocation (about 100 instructions, on the deciding thread).
    let mut text = [b'0'; 4];
    for digit in text[..digits].iter_mut().rev() {
        *digit = b'0' + (frac % 10) as u8;
        frac /= 10;
    }
    out.extend_from_slice(&text[..digits]);
}

/// Size of the intersection of two sorted, deduplicated sets.
pub fn intersection(a: &[u32], b: &[u32]) -> usize {
    intersection_at_least(a, b, 0).unwrap_or(0)
}

/// Size of the intersection of two sorted, deduplicated sets, or `None` as
/// soon as it is sure to be below `need`.
///
/// The merge is branch-free: which side advances is data, not a jump, so
/// two unrelated sets (most candidates) cost no mispredicted branches, and
/// a candidate that can no longer reach `need` is dropped after a few
/// steps instead of at the end of both sets.
pub fn intersection_at_least(a: &[u32], b: &[u32], need: usize) -> Option<usize> {
    let (mut i, mut j, mut shared) = (0, 0, 0);
    while i < a.len() && j < b.len() {
        if shared + (a.len() - i).min(b.len() - j) < need {
            return None;
        }
        let (x, y) = (a[i], b[j]);
        shared += usize::from(x == y);
        i += usize::from(x <= y);
        j += usize::from(x >= y);
    }
    (shared >= need).then_some(shared)
}

/// Fewest shingles a set needs for containment to apply to it: a text of a
/// word or three ("Happy New Year!") is contained in countless others that
/// say more, so below this the pair is compared by Jaccard instead.
pub const MIN_CONTAINED_SHINGLES: usize = 3;

/// The share of the longer set the shorter must reach for containment to
/// apply to a pair that neither begins nor ends alike: 2/3, as (numerator,
/// denominator).
///
/// Containment says a text is a copy of another when one holds the other,
/// and that is true of copies (a truncated retweet holds part of its
/// original; a copy with a comment holds all of it) but also of a short
/// sentence said among much else in an unrelated text ("They need to make
/// this day!"), which on a large index of template or grammar-made texts
/// was the largest source of wrong tags. What tells the two apart is what
/// copies keep: a cut copy begins as its original does, and a commented
/// copy begins or ends as its original does (they share an anchor, see
/// [`super::share_anchor`]) or adds a few words, so that the original is
/// most of it. Two thirds rather than three fifths: on the 200,000-message
/// synthetic stream, 317 → 290 wrong tags (template texts that differ in a
/// word or two) for 0.1 point of recall (`docs/evaluation.md`). See
/// [`by_containment`].
pub const MIN_CONTAINED_SHARE: (usize, usize) = (2, 3);

/// What the verdict knows of a pair besides the two sets.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PairHints {
    /// The two texts begin or end alike: they share an anchor that counts
    /// (see [`super::share_anchor`]).
    pub anchored: bool,
    /// The earlier text (the indexed one) was cut.
    pub earlier_truncated: bool,
}

/// Whether a pair is compared by containment (against the smaller set)
/// rather than Jaccard. Under [`Measure::Containment`], the smaller set
/// needs at least [`MIN_CONTAINED_SHINGLES`], and then:
/// - when the message being decided (`later`, of `later_len` shingles) is
///   the smaller: the two begin or end alike (for a cut text, its first
///   words are enough), or it is at least [`MIN_CONTAINED_SHARE`] of the
///   other;
/// - when the indexed one is the smaller (a comment added): it was not cut,
///   and the two begin or end alike or it is at least
///   [`MIN_CONTAINED_SHARE`] of the other.
///
/// Sizes are those of the parts compared ([`super::shingle::comparable`]).
pub fn by_containment(
    measure: Measure,
    later_len: usize,
    earlier_len: usize,
    hints: PairHints,
) -> bool {
    let (num, den) = MIN_CONTAINED_SHARE;
    let smaller = later_len.min(earlier_len);
    let larger = later_len.max(earlier_len);
    measure == Measure::Containment
        && smaller >= MIN_CONTAINED_SHINGLES
        && if later_len <= earlier_len {
            // A copy shorter than what it copies: beginning or ending as it
            // does (a cut copy begins so), or most of it. Being cut is not
            // enough: the opening of a template, cut, is in every text of
            // the template.
            hints.anchored || smaller * den >= larger * num
        } else {
            // A copy longer than what it copies: a comment added. A text
            // that was cut is contained in no longer one: what it lost is
            // unknown, and a cut template is little more than the template.
            !hints.earlier_truncated && (hints.anchored || smaller * den >= larger * num)
        }
}

/// How far below the threshold a lone recent match may be (see
/// [`LoneMatch`]): 0.1, so 0.7 at the default threshold of 0.8.
pub const RECENT_MARGIN: f64 = 0.1;

/// How far below the threshold another story still counts as near the
/// message (see [`LoneMatch`]): 0.3, so 0.5 at the default threshold.
pub const NEAR_MARGIN: f64 = 0.3;

/// Fewest shingles both texts of a lone recent match need: six words and
/// their five pairs under the default `words:1-2`. A one-word edit of a
/// six-word text keeps 8 of its 11 shingles (0.73); below six words, a word
/// changed is a different text as often as an edit ("I want kfc again" and
/// "i want kfc mash potato").
pub const MIN_RECENT_SHINGLES: usize = 11;

/// Most shingles either text of a lone recent match may have: twenty
/// words and their pairs. A one-word edit of a longer text is above 0.8
/// already, and two long items that share most of their shingles below it
/// share boilerplate (a feed's "Read the full story on … Subscribe …").
pub const MAX_RECENT_SHINGLES: usize = 40;

/// The lower bar for a lone recent match, collected over a message's
/// candidates: the best candidate (ties: the earliest) that is at least
/// the threshold minus [`RECENT_MARGIN`], at most
/// [`crate::engine::config::EngineConfig::recent`] arrivals old, with at least
/// [`MIN_RECENT_SHINGLES`] and at most [`MAX_RECENT_SHINGLES`] on both
/// sides, neither more than half as long again as the other (see
/// [`MIN_CONTAINED_SHARE`]), taken only if every candidate at
/// least the threshold minus [`NEAR_MARGIN`] is of one cluster.
///
/// A one- or two-word edit of a tweet of 6 to 15 words leaves it 0.7 to 0.8
/// similar, where two texts of one template ("70% off good bridges this
/// weekend only!" with another hashtag) or of a grammar also meet. What
/// tells them apart is not in the pair but around it: an edit comes soon
/// after its original, and a template's texts come anywhere in the stream
/// and have others of the template near them. On the synthetic streams,
/// recall 0.9857 → 0.9913 (10,000 messages) and 0.9866 → 0.9906 (200,000)
/// at precision 0.9993 and 0.9950 (`docs/evaluation.md`). Used only when
/// no candidate reaches the threshold. The engine collects it; a Redis
/// worker asks only [`LoneMatch::could_take`] and leaves the rest to the
/// script, which mirrors it.
#[derive(Debug)]
pub struct LoneMatch<H, C> {
    bar: f64,
    near_bar: f64,
    recent: u64,
    now: u64,
    /// (handle, similarity, seq) of the best recent candidate.
    best: Option<(H, f64, u64)>,
    near: Option<C>,
    crowded: bool,
}

impl<H: Copy, C: PartialEq> LoneMatch<H, C> {
    /// Nothing seen yet, for a message of arrival number `now` (the engine's
    /// next seq) at `threshold`, reaching `recent` arrivals back (0: off).
    pub fn new(threshold: f64, recent: u64, now: u64) -> LoneMatch<H, C> {
        LoneMatch {
            bar: threshold - RECENT_MARGIN,
            near_bar: threshold - NEAR_MARGIN,
            recent,
            now,
            best: None,
            near: None,
            crowded: false,
        }
    }

    /// Whether it is on (a reach of 0 turns it off).
    pub fn is_on(&self) -> bool {
        self.recent > 0
    }

    /// The similarity down to which candidates must be verified for it to
    /// see them: the bar of a near story. Only meaningful while no
    /// candidate has reached the threshold.
    pub fn floor(&self) -> f64 {
        self.near_bar
    }

    /// Whether a candidate `s` similar could be a lone match, were it
    /// recent: the lists a Redis worker read tell it whether to leave the
    /// decision to the script (the message's arrival number is known only
    /// there).
    pub fn could_take(&self, s: f64, later_len: usize, earlier_len: usize) -> bool {
        self.is_on()
            && s >= self.bar
            && later_len >= MIN_RECENT_SHINGLES
            && earlier_len >= MIN_RECENT_SHINGLES
            && later_len.max(earlier_len) <= MAX_RECENT_SHINGLES
            && {
                let (num, den) = MIN_CONTAINED_SHARE;
                later_len.min(earlier_len) * den >= later_len.max(earlier_len) * num
            }
    }

    /// Sees one candidate: `handle` names it, `s` is its similarity (exact
    /// down to [`LoneMatch::floor`]), `seq` its arrival number, the lengths
    /// those of the two full sets, `cluster` gives its cluster.
    pub fn offer(
        &mut self,
        handle: H,
        s: f64,
        seq: u64,
        later_len: usize,
        earlier_len: usize,
        cluster: impl FnOnce() -> C,
    ) {
        if !self.is_on() || s < self.near_bar {
            return;
        }
        if !self.crowded {
            let cluster = cluster();
            match &self.near {
                None => self.near = Some(cluster),
                Some(near) if *near != cluster => self.crowded = true,
                Some(_) => {}
            }
        }
        if self.could_take(s, later_len, earlier_len)
            && self.now.saturating_sub(seq) <= self.recent
            && self
                .best
                .is_none_or(|(_, best_s, best_seq)| s > best_s || (s == best_s && seq < best_seq))
        {
            self.best = Some((handle, s, seq));
        }
    }

    /// Sees a candidate at least `s` similar that cannot be the match (a
    /// [`Refusal`]): it still makes the message's neighbourhood crowded
    /// if it is of another cluster, as [`LoneMatch::offer`] would.
    pub fn near(&mut self, s: f64, cluster: impl FnOnce() -> C) {
        if !self.is_on() || s < self.near_bar || self.crowded {
            return;
        }
        let cluster = cluster();
        match &self.near {
            None => self.near = Some(cluster),
            Some(near) if *near != cluster => self.crowded = true,
            Some(_) => {}
        }
    }

    /// The lone recent match and its similarity, if there is one.
    pub fn result(&self) -> Option<(H, f64)> {
        if self.crowded {
            return None;
        }
        self.best.map(|(handle, s, _)| (handle, s))
    }
}

/// Why a candidate that reached its bar is still not the message's match.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The two differ in a number: a template's slot ("w/ 2910 others" and
    /// "w/ 226 others", "12 photos" and "23 photos"), see [`slots_differ`].
    Slot,
    /// A short text matched from far back or by an anchor alone, without
    /// every content word of the shorter in the other ("I don't give a
    /// fuck." and "I don't give a boo boo"), see [`words_missing`].
    ShortWording,
}

/// Most content words (words that are not [`super::shingle::STOP_WORDS`])
/// a text may have for [`words_missing`] to apply to it: a text this short
/// is a common phrase as often as a message ("Prayers go out to
/// Oklahoma"), and one word changed makes another message of it.
pub const SHORT_CONTENT_WORDS: usize = 7;

/// Whether two `words:1-N` sets differ in a number (a template's slot, see
/// [`super::shingle::tag_slot`]): a number of one that the other lacks.
/// Only what a cut text may have lost is let pass: a number of the earlier
/// text missing from a later one that was cut (`later_cut`), or of the
/// later missing from an earlier one that was cut (`earlier_cut`); the cut
/// word itself is gone already (the normaliser drops it). A copy keeps its
/// numbers: a retweet, a quote, a comment added; two texts of one template
/// are alike but for them, and often 0.8 similar or more.
///
/// Sets at the cap are compared on a sample (see
/// [`super::shingle::comparable`]), where a number may be missing from one
/// sample only: they are never said to differ.
pub fn slots_differ(later: &[u32], earlier: &[u32], later_cut: bool, earlier_cut: bool) -> bool {
    use super::shingle::MAX_SHINGLES;
    if later.len() >= MAX_SHINGLES || earlier.len() >= MAX_SHINGLES {
        return false;
    }
    // A number only one text has is not enough: it may be in a comment
    // added ("day 3"), and an edit may put a word in its place (measured:
    // 0.0007 of recall on the 200,000-message stream for no precision).
    // So the earlier set is read only when the later has a number of its
    // own: most pairs asked share their numbers, and it is then not read.
    !earlier_cut
        && !later_cut
        && has_slot_missing_from(later, earlier)
        && has_slot_missing_from(earlier, later)
}

/// Whether `set` has a number's word (see [`super::shingle::is_slot`])
/// that the sorted `other` lacks.
///
/// Most shingles are not numbers: blocks of [`SLOT_BLOCK`] are first
/// tested for a number without a branch a shingle (a few vector
/// instructions, as the compiler lays it out), and only a block that holds
/// one is looked through and its numbers looked up.
fn has_slot_missing_from(set: &[u32], other: &[u32]) -> bool {
    use super::shingle::is_slot;
    let missing = |block: &[u32]| {
        block
            .iter()
            .any(|&f| is_slot(f) && other.binary_search(&f).is_err())
    };
    let mut blocks = set.chunks_exact(SLOT_BLOCK);
    for block in &mut blocks {
        let slots = block
            .iter()
            .fold(0u32, |slots, &f| slots | u32::from(is_slot(f)));
        if slots != 0 && missing(block) {
            return true;
        }
    }
    missing(blocks.remainder())
}

/// Shingles [`has_slot_missing_from`] tests for a number at once: two
/// SSE2 vectors of four (the portable code the build compiles).
const SLOT_BLOCK: usize = 8;

/// [`slots_differ`] as it was before blocks and the second set read only
/// when needed: each set looked through shingle by shingle (the reference
/// its tests hold it to).
#[cfg(test)]
fn slots_differ_reference(
    later: &[u32],
    earlier: &[u32],
    later_cut: bool,
    earlier_cut: bool,
) -> bool {
    use super::shingle::{MAX_SHINGLES, is_slot};
    if later.len() >= MAX_SHINGLES || earlier.len() >= MAX_SHINGLES {
        return false;
    }
    let lacks = |set: &[u32], other: &[u32]| {
        set.iter()
            .any(|&f| is_slot(f) && other.binary_search(&f).is_err())
    };
    let later_has = !earlier_cut && lacks(later, earlier);
    let earlier_has = !later_cut && lacks(earlier, later);
    later_has && earlier_has
}

/// Whether sets made under `config` mark numbers and are compared by them
/// ([`slots_differ`]): under `words:1-N` without sampling.
pub fn slots_apply(config: &crate::engine::config::EngineConfig) -> bool {
    matches!(
        config.shingling,
        crate::engine::config::Shingling::WordsUpTo(_)
    ) && config.sampling == crate::engine::config::Sampling::All
}

/// The stop words' shingles under `words:1-2`, with a bitmap of their top
/// eight bits in front: most words are not stop words, and the bitmap (at
/// most 36 bits set of 256) tells most of them so in one read, where a
/// binary search took six steps.
struct StopWordShingles {
    /// Bit `f >> 24` is set for every stop word's shingle `f`.
    tops: [u64; 4],
    /// The shingles, sorted.
    sorted: &'static [u32],
}

impl StopWordShingles {
    fn get() -> &'static StopWordShingles {
        static STOPS: std::sync::OnceLock<StopWordShingles> = std::sync::OnceLock::new();
        STOPS.get_or_init(|| {
            let sorted = super::shingle::stop_word_shingles();
            let mut tops = [0u64; 4];
            for &f in sorted {
                let top = (f >> 24) as usize;
                tops[top / 64] |= 1 << (top % 64);
            }
            StopWordShingles { tops, sorted }
        })
    }

    /// Whether `f` is a stop word's shingle.
    #[inline]
    fn contains(&self, f: u32) -> bool {
        let top = (f >> 24) as usize;
        self.tops[top / 64] >> (top % 64) & 1 == 1 && self.sorted.binary_search(&f).is_ok()
    }
}

/// The narrower shingles (single words) of a `words:1-2` set that are not
/// stop words: its content words.
fn content_words(set: &[u32]) -> impl Iterator<Item = u32> + '_ {
    let stops = StopWordShingles::get();
    set.iter()
        .copied()
        .filter(move |&f| f & 1 == 0 && !stops.contains(f))
}

/// Whether the shorter of two `words:1-2` sets (fewer shingles; the later
/// on a tie) is a short text (at most [`SHORT_CONTENT_WORDS`] content
/// words) with a content word the other lacks. The engine asks it of a
/// match from beyond `--recent` or allowed by an anchor alone: there a
/// short text needs its every word in the other (mentions and hashtags are
/// words here too). A copy of a short text keeps its words; two people
/// writing a common phrase ("I don't give a …") change one.
pub fn words_missing(later: &[u32], earlier: &[u32]) -> bool {
    let (shorter, longer) = if later.len() <= earlier.len() {
        (later, earlier)
    } else {
        (earlier, later)
    };

    // One pass over the shorter set: its first content words, kept until
    // one too many says it is not short.
    let mut words = [0u32; SHORT_CONTENT_WORDS];
    let mut count = 0;
    for f in content_words(shorter) {
        let Some(slot) = words.get_mut(count) else {
            return false;
        };
        *slot = f;
        count += 1;
    }
    words[..count]
        .iter()
        .any(|f| longer.binary_search(f).is_err())
}

/// Exact similarity of two sorted, deduplicated shingle sets: `a` the
/// message being decided (the later), `b` the indexed one (see
/// [`by_containment`] for why the order matters).
pub fn similarity(measure: Measure, a: &[u32], b: &[u32], hints: PairHints) -> f64 {
    similarity_at_least(measure, a, b, hints, 0.0).unwrap_or(0.0)
}

/// A 256-bit summary of a shingle set: one bit per value of a shingle's
/// low eight bits, set when the set has a shingle there.
///
/// A shingle of another set whose bit is clear is not in this set, so the
/// other set's shingles whose bits are set bound how many the two share,
/// counted in one pass over the other set without comparing the two. In a
/// template family's big buckets most candidates share most but not enough
/// of a message's shingles, and the merge that proves it reads nearly both
/// sets to their end; the bound turns most of them away first.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SetFilter([u64; 4]);

impl SetFilter {
    /// The summary of a set.
    pub fn new(set: &[u32]) -> SetFilter {
        let mut words = [0u64; 4];
        for &s in set {
            words[(s >> 6 & 3) as usize] |= 1 << (s & 63);
        }
        SetFilter(words)
    }

    /// An upper bound on how many shingles `other` shares with the set.
    pub fn bound(&self, other: &[u32]) -> usize {
        other
            .iter()
            .map(|&s| (self.0[(s >> 6 & 3) as usize] >> (s & 63) & 1) as usize)
            .sum()
    }
}

/// Exact similarity of two sorted, deduplicated shingle sets (`a` the
/// later, as in [`similarity`]) if it is at least `floor`; `None`, often
/// early, if it is below.
pub fn similarity_at_least(
    measure: Measure,
    a: &[u32],
    b: &[u32],
    hints: PairHints,
    floor: f64,
) -> Option<f64> {
    similarity_at_least_with(measure, a, None, b, hints, || false, floor)
}

/// [`similarity_at_least`], given `a`'s [`SetFilter`], with whether the
/// two share an anchor asked only when the measure depends on it: a
/// candidate whose bound on the shared shingles falls short of the floor
/// under the most generous measure the pair could get is turned away before
/// the anchors are read or the sets merged. The same result, often sooner:
/// most candidates of a big bucket are turned away by the bound.
pub fn similarity_at_least_filtered(
    measure: Measure,
    a: &[u32],
    a_filter: &SetFilter,
    b: &[u32],
    hints: PairHints,
    anchored: impl FnOnce() -> bool,
    floor: f64,
) -> Option<f64> {
    similarity_at_least_with(measure, a, Some(a_filter), b, hints, anchored, floor)
}

/// The fewest shared shingles that could reach `floor`, rounded down (and a
/// hair lower against rounding), so that no pair at the floor is ever cut
/// off; the exact test is on the exact similarity.
fn shared_needed(containment: bool, floor: f64, a_len: usize, b_len: usize) -> usize {
    let need = if containment {
        floor * a_len.min(b_len) as f64
    } else {
        // shared / (|a| + |b| - shared) >= floor  <=>
        // shared >= floor (|a| + |b|) / (1 + floor)
        floor * (a_len + b_len) as f64 / (1.0 + floor)
    };
    // Truncation is `floor` for what is not negative, and the cast sends
    // what is (and a NaN) to 0: the same count as `floor().max(0.0)`,
    // without a call into libm per candidate. Through `u32`: x86-64 has no
    // unsigned 64-bit conversion before AVX-512, so a saturating cast to
    // `usize` takes a dozen instructions, to `u32` four; a count above
    // `u32::MAX` would need a set of over four billion shingles, and is
    // above either set's size whichever it is (no pair reaches it).
    (need - 1e-9) as u32 as usize
}

fn similarity_at_least_with(
    measure: Measure,
    a: &[u32],
    a_filter: Option<&SetFilter>,
    b: &[u32],
    hints: PairHints,
    anchored: impl FnOnce() -> bool,
    floor: f64,
) -> Option<f64> {
    // Capped sets (long texts) are compared on a common sample; `a`'s
    // filter, made from all of `a`, still bounds what the parts share.
    let (a, b) = super::shingle::comparable(a, b);
    if a.is_empty() || b.is_empty() {
        return (floor <= 0.0).then_some(0.0);
    }
    let smaller = a.len().min(b.len());
    let mut containment = by_containment(measure, a.len(), b.len(), hints);
    // Whether an anchor would change the measure: only then is it read.
    let anchor_decides = !containment
        && !hints.anchored
        && by_containment(
            measure,
            a.len(),
            b.len(),
            PairHints {
                anchored: true,
                ..hints
            },
        );
    if let Some(filter) = a_filter {
        let generous = shared_needed(containment || anchor_decides, floor, a.len(), b.len());
        if filter.bound(b) < generous {
            return None;
        }
    }
    if anchor_decides && anchored() {
        containment = true;
    }
    let need = shared_needed(containment, floor, a.len(), b.len());
    let shared = intersection_at_least(a, b, need)?;
    let s = if containment {
        ratio(shared, smaller)
    } else {
        ratio(shared, a.len() + b.len() - shared)
    };
    (s >= floor).then_some(s)
}

/// Most cells of a [`Verifier`]'s table: 4,096 (16 KiB), room for a set
/// of up to [`super::shingle::MAX_SHINGLES`] shingles at a load of at
/// most 1/8.
const VERIFIER_CELLS: usize = 1 << 12;

/// A message's shingle set laid out for verifying many candidates against
/// it, with the same results as [`similarity_at_least_filtered`] (a
/// property test holds them equal) for less work a candidate:
/// - the set is in an open-addressing table that stays in the first-level
///   cache, so how many shingles a candidate shares is counted exactly in
///   one pass over the candidate's set (eight at a time with AVX2), without
///   a filter pass and then a merge of the two sets;
/// - the count is given up as soon as what is left of the candidate could
///   no longer reach the floor, and a candidate whose size alone keeps it
///   below the floor is turned away before its set is read;
/// - the set is laid out only when a first candidate needs it.
///
/// The verdict is still the float comparison of the exact similarity with
/// the floor, as in [`similarity_at_least`]: the counts that prune are
/// lower bounds of the count needed, computed without `floor`.
///
/// Sets of [`super::shingle::MAX_SHINGLES`] or more (long texts compared on
/// a common sample, see [`super::shingle::comparable`]) take the general
/// path.
#[derive(Debug)]
pub struct Verifier {
    /// The cells; those below `1 << bits` are in use. Every cell holds a
    /// shingle of the set (those listed in `used`) or `empty`.
    table: Box<[u32; VERIFIER_CELLS]>,
    /// Cells in use: `1 << bits`.
    bits: u32,
    /// A value that is not a shingle of the set: the mark of an empty cell.
    empty: u32,
    /// The cells the set's shingles took, to empty them for the next set.
    used: Vec<u32>,
    /// Size of the set.
    len: usize,
    /// Whether the set takes the general path (see [`Verifier`]).
    general: bool,
    /// Whether the loaded set is in the table yet.
    laid_out: bool,
    /// Whether the processor has AVX2 (the eight-at-a-time count).
    #[cfg(target_arch = "x86_64")]
    avx2: bool,
}

impl Default for Verifier {
    fn default() -> Self {
        Verifier::new()
    }
}

/// The multiplier of a shingle's cell in a [`Verifier`]'s table (its high
/// bits pick the cell): shingle fingerprints are hashes, but some bits of
/// them mark the shingle's kind (see [`super::shingle::tag_width`]).
const CELL_MULTIPLIER: u32 = 0x9e37_79b1;

/// The home cell of shingle `s` in a [`Verifier`]'s table of `1 << bits`
/// cells (the AVX2 count computes it eight at a time, alike).
#[inline(always)]
fn home_cell(s: u32, bits: u32) -> usize {
    (s.wrapping_mul(CELL_MULTIPLIER) >> (32 - bits)) as usize
}

impl Verifier {
    /// A verifier with no set loaded.
    pub fn new() -> Verifier {
        Verifier {
            table: Box::new([0; VERIFIER_CELLS]),
            bits: 0,
            empty: 0,
            used: Vec::new(),
            len: 0,
            general: true,
            laid_out: false,
            #[cfg(target_arch = "x86_64")]
            avx2: std::arch::is_x86_feature_detected!("avx2")
                && std::arch::is_x86_feature_detected!("popcnt"),
        }
    }

    /// Takes the set of the message to verify candidates against (sorted
    /// and deduplicated, as every shingle set is); it is laid out when the
    /// first candidate needs it, so a message without candidates costs
    /// nothing here.
    pub fn load(&mut self, set: &[u32]) {
        self.len = set.len();
        self.general = set.is_empty() || set.len() >= super::shingle::MAX_SHINGLES;
        self.laid_out = false;
    }

    /// Lays the loaded set out in the table. Out of line: once a message,
    /// and kept out of the inlined [`Verifier::overlap_at_least`].
    #[inline(never)]
    fn lay_out(&mut self, set: &[u32]) {
        self.laid_out = true;
        // Cells are masked with the table's own size (a no-op: they are
        // below `1 << bits`), so that no index is bound-checked.
        for &cell in &self.used {
            self.table[cell as usize & (VERIFIER_CELLS - 1)] = self.empty;
        }
        self.used.clear();
        // At most 1/32 of the cells in use taken (up to 1/8 for sets of
        // over 128 shingles), fewer for small sets: most lookups of a
        // shingle the set lacks end on their first cell, and a group of
        // eight gathered is settled without a lane looked up further more
        // often (the decision read 1.3% fewer instructions than at 1/16 on
        // dev-200k's first 30,000 lines; the table stays within the
        // first-level cache).
        let bits = (set.len().next_power_of_two().trailing_zeros() + 5).clamp(6, 12);
        // Every cell holds `empty` once the last set's are emptied, so a new
        // size needs no fill (6 lay-outs in 10 change size); only a set
        // holding `empty` needs a new mark, written to the whole table to
        // keep that true.
        if set.binary_search(&self.empty).is_ok() {
            // The smallest value the set lacks (it is sorted).
            let mut empty = 0u32;
            for &s in set {
                if s != empty {
                    break;
                }
                empty += 1;
            }
            self.empty = empty;
            self.table.fill(empty);
        }
        self.bits = bits;
        let mask = (1usize << bits) - 1;
        let (table, empty) = (&mut self.table, self.empty);
        // Extended from a mapped slice: room is made once, not per shingle.
        self.used.extend(set.iter().map(|&s| {
            let mut at = home_cell(s, bits);
            while table[at & (VERIFIER_CELLS - 1)] != empty {
                at = (at + 1) & mask;
            }
            table[at & (VERIFIER_CELLS - 1)] = s;
            at as u32
        }));
    }

    /// Whether the count runs eight shingles at a time (the processor has
    /// AVX2 and POPCNT): then a caller compiled for AVX2 may have it
    /// inlined.
    #[cfg(target_arch = "x86_64")]
    pub fn counts_eight_at_a_time(&self) -> bool {
        self.avx2
    }

    /// Counts one shingle at a time from now on, as on a processor without
    /// AVX2: for tests that compare the two.
    #[cfg(test)]
    pub(crate) fn count_one_at_a_time(&mut self) {
        #[cfg(target_arch = "x86_64")]
        {
            self.avx2 = false;
        }
    }

    /// The home cell of a shingle.
    fn cell(&self, s: u32) -> usize {
        home_cell(s, self.bits)
    }

    /// Whether the set holds `s`, looking from cell `at` on.
    fn holds_from(&self, s: u32, mut at: usize) -> bool {
        let mask = (1usize << self.bits) - 1;
        loop {
            let c = self.table[at];
            if c == self.empty {
                return false;
            }
            if c == s {
                return true;
            }
            at = (at + 1) & mask;
        }
    }

    /// How many shingles `other` shares with the set, or `None` as soon as
    /// that is sure to be below `need`.
    ///
    /// Always inlined: it runs a dozen times a message, and as a call of
    /// its own around the call into the AVX2 version it cost about 22
    /// instructions each time.
    #[inline(always)]
    fn shared_at_least(&self, other: &[u32], need: usize) -> Option<usize> {
        #[cfg(target_arch = "x86_64")]
        if self.avx2 {
            // SAFETY: the processor has AVX2 and POPCNT (checked at
            // construction).
            return unsafe { self.shared_at_least_avx2(other, need) };
        }
        let mut shared = 0;
        for (at, &s) in other.iter().enumerate() {
            if shared + (other.len() - at) < need {
                return None;
            }
            shared += usize::from(self.holds_from(s, self.cell(s)));
        }
        (shared >= need).then_some(shared)
    }

    /// [`Verifier::shared_at_least`], eight shingles at a time: their cells
    /// gathered in one instruction, and only the few that found another
    /// shingle in their home cell looked up further one by one. The last
    /// few shingles are one more group, loaded masked.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,popcnt")]
    fn shared_at_least_avx2(&self, other: &[u32], need: usize) -> Option<usize> {
        // SAFETY: this function is compiled for AVX2 and POPCNT.
        unsafe { self.shared_at_least_eight(other, need) }
    }

    /// [`Verifier::shared_at_least_avx2`]'s body, always inlined, so that a
    /// caller compiled for AVX2 (the candidates' loop, see
    /// [`Verifier::overlap_at_least_laid_out`]) has it without a call.
    ///
    /// # Safety
    /// The processor must have AVX2 and POPCNT, and the caller must be
    /// compiled for them (or the intrinsics stay calls).
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn shared_at_least_eight(&self, other: &[u32], need: usize) -> Option<usize> {
        use std::arch::x86_64::*;
        // The shingles found shared so far and those still to look at, less
        // `need`: one count a group, where a count of each cost three
        // instructions more. Below 0, `need` is out of reach. (Sets here
        // hold fewer than `MAX_SHINGLES`: no count overflows.)
        let mut slack = other.len() as isize - need as isize;
        let mut groups = other.chunks_exact(8);
        for group in &mut groups {
            if slack < 0 {
                return None;
            }
            // SAFETY: the group is 8 u32s (an unaligned load); the processor
            // has AVX2 and POPCNT (this function's condition).
            let shared = unsafe {
                let s = _mm256_loadu_si256(group.as_ptr().cast());
                self.shared_in_group(s, group, 0xff)
            };
            slack += shared as isize - 8;
        }
        let rest = groups.remainder();
        if !rest.is_empty() {
            if slack < 0 {
                return None;
            }
            // SAFETY: the masked load reads only the lanes below
            // `rest.len()`, all within `rest`; the others read nothing. The
            // processor has AVX2 and POPCNT.
            let shared = unsafe {
                let live = _mm256_cmpgt_epi32(
                    _mm256_set1_epi32(rest.len() as i32),
                    _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
                );
                let s = _mm256_maskload_epi32(rest.as_ptr().cast(), live);
                self.shared_in_group(s, rest, (1 << rest.len()) - 1)
            };
            slack += shared as isize - rest.len() as isize;
        }
        // Every shingle looked at: `slack` is the count less `need`.
        (slack >= 0).then(|| (slack + need as isize) as usize)
    }

    /// How many of the shingles `s` (those of `group`, in the lanes set in
    /// `lanes`) the set holds.
    ///
    /// # Safety
    /// As [`Verifier::shared_at_least_eight`].
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn shared_in_group(
        &self,
        s: std::arch::x86_64::__m256i,
        group: &[u32],
        lanes: u32,
    ) -> usize {
        use std::arch::x86_64::*;
        // SAFETY: every cell index is below `1 << bits`, within the table
        // (bits <= 12); the processor has AVX2 and POPCNT (this function's
        // condition).
        let (vacant, found) = unsafe {
            let cells = _mm256_srl_epi32(
                _mm256_mullo_epi32(s, _mm256_set1_epi32(CELL_MULTIPLIER as i32)),
                _mm_cvtsi32_si128(32 - self.bits as i32),
            );
            let there = _mm256_i32gather_epi32::<4>(self.table.as_ptr().cast(), cells);
            let vacant = _mm256_cmpeq_epi32(there, _mm256_set1_epi32(self.empty as i32));
            let found = _mm256_andnot_si256(vacant, _mm256_cmpeq_epi32(there, s));
            (
                _mm256_movemask_ps(_mm256_castsi256_ps(vacant)) as u32,
                _mm256_movemask_ps(_mm256_castsi256_ps(found)) as u32 & lanes,
            )
        };
        let mut shared = found.count_ones() as usize;
        // Lanes whose home cell holds another shingle: look further.
        let mut open = lanes & !(found | vacant);
        while open != 0 {
            let s = group[open.trailing_zeros() as usize];
            let next = (self.cell(s) + 1) & ((1usize << self.bits) - 1);
            shared += usize::from(self.holds_from(s, next));
            open &= open - 1;
        }
        shared
    }

    /// [`similarity_at_least_filtered`] of the loaded set (`a`, passed
    /// again for the general path) and a candidate `b`: its exact
    /// similarity if at least `floor`, else `None`; `anchored` is asked
    /// only when the measure depends on it and the candidate could reach
    /// the floor.
    pub fn similarity_at_least(
        &mut self,
        measure: Measure,
        a: &[u32],
        b: &[u32],
        hints: PairHints,
        anchored: impl FnOnce() -> bool,
        floor: f64,
    ) -> Option<f64> {
        self.overlap_at_least(measure, a, b, hints, floor)?
            .similarity_at_least(measure, hints, anchored, floor)
    }

    /// How many shingles the loaded set (`a`, passed again for the general
    /// path) shares with a candidate `b`, exactly, unless the pair cannot
    /// reach `floor` whatever the anchors say: then `None`, often early.
    /// What [`Overlap::similarity_at_least`] turns into the similarity at
    /// any floor at least `floor`, so that the count, the costly half of a
    /// verification, can be made ahead and on another thread (see
    /// [`super::overlaps`]).
    ///
    /// Inlined: it runs for every candidate counted (on the counting
    /// threads, see [`super::overlaps`]), and as a call it saved and
    /// restored a dozen registers each time; the rare paths (long texts,
    /// the lay-out) stay calls.
    #[inline]
    pub fn overlap_at_least(
        &mut self,
        measure: Measure,
        a: &[u32],
        b: &[u32],
        hints: PairHints,
        floor: f64,
    ) -> Option<Overlap> {
        self.lay_out_now(a);
        // SAFETY: without `EIGHT`, no condition.
        unsafe { self.overlap_at_least_laid_out::<false>(measure, a, b, hints, floor) }
    }

    /// Lays the loaded set (`a`) out now, if it takes the table and is not
    /// laid out yet: [`Verifier::overlap_at_least`] does it at its first
    /// candidate; a caller about to count several candidates with
    /// [`Verifier::overlap_at_least_laid_out`] does it first, so that its
    /// loop reads the verifier without writing it.
    pub fn lay_out_now(&mut self, a: &[u32]) {
        debug_assert_eq!(a.len(), self.len);
        if !self.general && !self.laid_out {
            self.lay_out(a);
        }
    }

    /// [`Verifier::overlap_at_least`] once the set is laid out
    /// ([`Verifier::lay_out_now`]). `EIGHT`: eight shingles at a time, the
    /// AVX2 count inlined, not called, for a caller compiled for AVX2 and
    /// POPCNT (elsewhere `EIGHT` changes nothing).
    ///
    /// # Safety
    /// With `EIGHT`, the processor must have AVX2 and POPCNT
    /// ([`Verifier::counts_eight_at_a_time`]).
    #[inline(always)]
    pub unsafe fn overlap_at_least_laid_out<const EIGHT: bool>(
        &self,
        measure: Measure,
        a: &[u32],
        b: &[u32],
        hints: PairHints,
        floor: f64,
    ) -> Option<Overlap> {
        debug_assert!(self.general || self.laid_out);
        if self.general || b.is_empty() || b.len() >= super::shingle::MAX_SHINGLES {
            return overlap_of_samples(measure, a, b, hints, floor);
        }
        let (a_len, b_len) = (self.len, b.len());
        let need = generous_need(measure, hints, floor, a_len, b_len);
        if need > a_len.min(b_len) {
            return None;
        }
        #[cfg(target_arch = "x86_64")]
        if EIGHT {
            // SAFETY: with `EIGHT` the processor has AVX2 and POPCNT (this
            // function's condition).
            let shared = unsafe { self.shared_at_least_eight(b, need) }?;
            return Some(Overlap::new(shared, a_len, b_len));
        }
        let shared = self.shared_at_least(b, need)?;
        Some(Overlap::new(shared, a_len, b_len))
    }
}

/// The shared shingles a pair of these sizes needs to reach `floor` under
/// the measure it would get with an anchor. Containment is the more
/// generous measure, and an anchor only ever turns Jaccard into
/// containment: what cannot reach the floor under the measure the pair gets
/// with an anchor cannot without one. The count is a lower bound (see
/// [`shared_needed`]); the test is on the exact similarity.
#[inline]
fn generous_need(
    measure: Measure,
    hints: PairHints,
    floor: f64,
    a_len: usize,
    b_len: usize,
) -> usize {
    let anchored = PairHints {
        anchored: true,
        ..hints
    };
    shared_needed(
        by_containment(measure, a_len, b_len, anchored),
        floor,
        a_len,
        b_len,
    )
}

/// [`Verifier::overlap_at_least`] for a pair one of whose sets is empty or
/// capped (a long text): counted on the two sets' common sample (see
/// [`super::shingle::comparable`]). Out of line: rare, and kept out of the
/// inlined common path.
#[cold]
#[inline(never)]
fn overlap_of_samples(
    measure: Measure,
    a: &[u32],
    b: &[u32],
    hints: PairHints,
    floor: f64,
) -> Option<Overlap> {
    let (a, b) = super::shingle::comparable(a, b);
    let need = generous_need(measure, hints, floor, a.len(), b.len());
    let shared = intersection_at_least(a, b, need)?;
    Some(Overlap::new(shared, a.len(), b.len()))
}

/// What a verification counts of a pair: the shingles the two share and
/// the sizes of the parts compared (the whole sets, or for long texts
/// their common sample, see [`super::shingle::comparable`]). The similarity
/// follows from it once the measure and the anchors are known.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Overlap {
    shared: u32,
    a_len: u32,
    b_len: u32,
}

impl Overlap {
    /// Sets and samples hold at most a few thousand shingles, but a set
    /// made by hand may hold more: the counts saturate (the similarity of
    /// such a pair is then approximate, never out of [0, 1]).
    fn new(shared: usize, a_len: usize, b_len: usize) -> Overlap {
        let narrow = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
        Overlap {
            shared: narrow(shared),
            a_len: narrow(a_len),
            b_len: narrow(b_len),
        }
    }

    /// The shingles the two share.
    pub fn shared(&self) -> usize {
        self.shared as usize
    }

    /// The pair's exact similarity if at least `floor` (which must be at
    /// least the floor the count was made for), else `None`: the measure
    /// [`by_containment`] gives the pair, with `anchored` asked only when
    /// an anchor would change it.
    ///
    /// Always inlined: it runs a dozen times a message, and the build of
    /// the candidates' loop for AVX2 left it a call.
    #[inline(always)]
    pub fn similarity_at_least(
        &self,
        measure: Measure,
        hints: PairHints,
        anchored: impl FnOnce() -> bool,
        floor: f64,
    ) -> Option<f64> {
        let (shared, a_len, b_len) = (
            self.shared as usize,
            self.a_len as usize,
            self.b_len as usize,
        );
        let anchor_decides = |hints: PairHints| {
            !hints.anchored
                && by_containment(
                    measure,
                    a_len,
                    b_len,
                    PairHints {
                        anchored: true,
                        ..hints
                    },
                )
        };
        let containment =
            by_containment(measure, a_len, b_len, hints) || (anchor_decides(hints) && anchored());
        let s = if containment {
            ratio(shared, a_len.min(b_len))
        } else {
            ratio(shared, (a_len + b_len).saturating_sub(shared))
        };
        (s >= floor).then_some(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `shared_needed` casts through `u32` for speed: the count is the one
    /// the saturating cast to `usize` gave, for every floor (NaN, negative,
    /// above 1 included) and any pair of sizes a set can have.
    #[test]
    fn shared_needed_is_the_usize_casts_count() {
        let floors = [
            f64::NAN,
            f64::NEG_INFINITY,
            -0.5,
            0.0,
            1e-12,
            0.1,
            0.3,
            0.5,
            0.65,
            0.7,
            0.8,
            0.9,
            0.999_999_999,
            1.0,
            1.5,
        ];
        for containment in [false, true] {
            for floor in floors {
                for a_len in (0..300).chain([1 << 20, 3 << 20]) {
                    for b_len in [0, 1, 2, 7, 31, 64, 255, 299, 511, 4096, 1 << 20] {
                        let need = if containment {
                            floor * a_len.min(b_len) as f64
                        } else {
                            floor * (a_len + b_len) as f64 / (1.0 + floor)
                        };
                        assert_eq!(
                            shared_needed(containment, floor, a_len, b_len),
                            (need - 1e-9).max(0.0) as usize,
                            "{containment} {floor} {a_len} {b_len}"
                        );
                    }
                }
            }
        }
    }

    fn similarity_text(s: f64) -> String {
        let mut out = Vec::new();
        write_similarity(s, &mut out);
        String::from_utf8(out).unwrap()
    }

    /// Every similarity the tag can say (ten thousand steps) is written as
    /// formatting it with `format!` wrote it: up to four decimals, the
    /// trailing zeros dropped.
    #[test]
    fn similarities_are_written_as_format_wrote_them() {
        for scaled in 0..=10_000u32 {
            let (whole, frac) = (scaled / 10_000, scaled % 10_000);
            let expected = if frac == 0 {
                whole.to_string()
            } else {
                let decimals = format!("{frac:04}");
                format!("{whole}.{}", decimals.trim_end_matches('0'))
            };
            let s = f64::from(scaled) / 10_000.0;
            assert_eq!(similarity_text(s), expected, "{scaled}");
        }
    }

    /// Regression (fuzzing, issue 14): a similarity whose denominator is 0
    /// was 0 / 0, a NaN in the verdict; it is 0, and a NaN or an infinity
    /// given to the writer still prints a number in [0, 1].
    #[test]
    fn a_zero_denominator_gives_no_nan() {
        assert_eq!(ratio(0, 0), 0.0);
        assert_eq!(ratio(3, 0), 0.0);
        assert_eq!(ratio(5, 4), 1.0);
        assert_eq!(ratio(1, 4), 0.25);
        for measure in [Measure::Jaccard, Measure::Containment] {
            for (a, b) in [
                (&[][..], &[][..]),
                (&[][..], &[1, 2][..]),
                (&[1][..], &[][..]),
            ] {
                let s = similarity(measure, a, b, PLAIN);
                assert_eq!(s, 0.0, "{measure} {a:?} {b:?}");
                assert_eq!(similarity_at_least(measure, a, b, PLAIN, 0.5), None);
            }
        }
        assert_eq!(similarity_text(f64::NAN), "0");
        assert_eq!(similarity_text(f64::INFINITY), "1");
        assert_eq!(similarity_text(f64::NEG_INFINITY), "0");
    }

    #[test]
    fn similarity_prints_short_and_fixed() {
        assert_eq!(similarity_text(1.0), "1");
        assert_eq!(similarity_text(0.5), "0.5");
        assert_eq!(similarity_text(6.0 / 7.0), "0.8571");
        assert_eq!(similarity_text(0.05), "0.05");
        assert_eq!(similarity_text(0.0), "0");
    }

    #[test]
    fn measures_are_exact() {
        let a = [1, 2, 3, 4];
        let b = [3, 4, 5, 6];
        assert_eq!(similarity(Measure::Jaccard, &a, &b, PLAIN), 2.0 / 6.0);
        assert_eq!(similarity(Measure::Containment, &a, &b, PLAIN), 0.5);
        assert_eq!(similarity(Measure::Containment, &[3, 4, 5], &b, PLAIN), 1.0);
        // Too small to be "contained": Jaccard.
        assert_eq!(similarity(Measure::Containment, &[3, 4], &b, PLAIN), 0.5);
        assert_eq!(similarity(Measure::Jaccard, &a, &a, PLAIN), 1.0);
        assert_eq!(similarity(Measure::Jaccard, &[], &a, PLAIN), 0.0);
    }

    const PLAIN: PairHints = PairHints {
        anchored: false,
        earlier_truncated: false,
    };

    #[test]
    fn containment_needs_what_copies_keep() {
        let short = [1, 2, 3];
        let long: Vec<u32> = (1..=10).collect();
        let contained = |later: &[u32], earlier: &[u32], hints| {
            similarity(Measure::Containment, later, earlier, hints)
        };
        // A later, short text inside a longer one: contained only if it
        // begins or ends alike (a cut copy begins so); otherwise Jaccard.
        assert_eq!(contained(&short, &long, PLAIN), 0.3);
        let anchored = PairHints {
            anchored: true,
            ..PLAIN
        };
        assert_eq!(contained(&short, &long, anchored), 1.0);
        // ... or if it is two thirds of it.
        assert_eq!(contained(&[1, 2, 3, 4], &[1, 2, 3, 4, 5, 6], PLAIN), 1.0);
        assert_eq!(
            contained(&[1, 2, 3, 4], &[1, 2, 3, 4, 5, 6, 7], PLAIN),
            4.0 / 7.0
        );
        // An earlier, short text inside a later, longer one: a comment added.
        // A word (3 of 4): contained; more: only if anchored.
        assert_eq!(contained(&[1, 2, 3, 4], &short, PLAIN), 1.0);
        assert_eq!(contained(&[1, 2, 3, 4, 5], &short, PLAIN), 0.6);
        assert_eq!(contained(&[1, 2, 3, 4, 5], &short, anchored), 1.0);
        // ... and never when the earlier text was cut.
        let earlier_cut = PairHints {
            anchored: true,
            earlier_truncated: true,
        };
        assert_eq!(contained(&[1, 2, 3, 4], &short, earlier_cut), 0.75);
        assert!(!by_containment(Measure::Jaccard, 3, 10, anchored));
        // Too small to be contained, whatever the hints.
        assert_eq!(contained(&[1, 2], &long, anchored), 0.2);
    }

    /// Similarity by the textbook definitions, over hash sets.
    fn reference_similarity(measure: Measure, a: &[u32], b: &[u32], hints: PairHints) -> f64 {
        use std::collections::HashSet;
        let (sa, sb): (HashSet<_>, HashSet<_>) = (a.iter().collect(), b.iter().collect());
        if sa.is_empty() || sb.is_empty() {
            return 0.0;
        }
        let shared = sa.intersection(&sb).count() as f64;
        let smaller = sa.len().min(sb.len());
        let larger = sa.len().max(sb.len());
        // The rule of by_containment, in words: a later, shorter text
        // needs to be anchored or 2/3 of the earlier; an earlier, shorter
        // one must not be cut and needs an anchor or 2/3.
        let share = 3 * smaller >= 2 * larger;
        let rule = if sa.len() <= sb.len() {
            hints.anchored || share
        } else {
            !hints.earlier_truncated && (hints.anchored || share)
        };
        if measure == Measure::Containment && smaller >= MIN_CONTAINED_SHINGLES && rule {
            shared / smaller as f64
        } else {
            shared / sa.union(&sb).count() as f64
        }
    }

    /// A sorted `words:1-N` set of `0..max` shingles from a small
    /// alphabet (so that two sets share some), about a third of them
    /// numbers' words: marked as [`super::super::shingle::tag_slot`] marks
    /// them.
    fn set_with_slots(max: usize) -> impl proptest::strategy::Strategy<Value = Vec<u32>> {
        use super::super::shingle::SLOT_MARK;
        proptest::collection::btree_set(
            (0u32..(2 * max as u32).max(8), 0u32..3)
                .prop_map(|(word, kind)| (word << 8) | [SLOT_MARK, 0x02, 0x13][kind as usize]),
            0..max,
        )
        .prop_map(|s| s.into_iter().collect())
    }

    fn sorted_set() -> impl proptest::strategy::Strategy<Value = Vec<u32>> {
        // A small alphabet, so that sets overlap.
        proptest::collection::btree_set(0u32..40, 0..30).prop_map(|s| s.into_iter().collect())
    }

    use proptest::prelude::*;

    /// `words_missing` as it read before its one pass and the stop words'
    /// bitmap (the reference its tests hold it to).
    fn words_missing_reference(later: &[u32], earlier: &[u32]) -> bool {
        let stops = super::super::shingle::stop_word_shingles();
        let content = |set: &'_ [u32]| {
            set.iter()
                .copied()
                .filter(|&f| f & 1 == 0 && stops.binary_search(&f).is_err())
                .collect::<Vec<u32>>()
        };
        let (shorter, longer) = if later.len() <= earlier.len() {
            (later, earlier)
        } else {
            (earlier, later)
        };
        let words = content(shorter);
        words.len() <= SHORT_CONTENT_WORDS && words.iter().any(|f| longer.binary_search(f).is_err())
    }

    /// A `words:1-2` set drawn from a few words, stop words among them,
    /// and the words' pairs (odd shingles), so that two sets share many.
    fn set_of_words() -> impl proptest::strategy::Strategy<Value = Vec<u32>> {
        let stops = super::super::shingle::stop_word_shingles().to_vec();
        proptest::collection::btree_set(
            (0usize..3, 0usize..stops.len(), 0u32..24).prop_map(move |(kind, stop, word)| {
                match kind {
                    0 => stops[stop],
                    // A word: even, and spread over the top bits too.
                    1 => word.wrapping_mul(0x9e37_79b1) & !1,
                    _ => word.wrapping_mul(0x85eb_ca6b) | 1,
                }
            }),
            0..24,
        )
        .prop_map(|s| s.into_iter().collect())
    }

    #[test]
    fn the_stop_words_bitmap_knows_every_stop_word_and_only_those() {
        let stops = super::super::shingle::stop_word_shingles();
        let filter = StopWordShingles::get();
        for &f in stops {
            assert!(filter.contains(f));
            for other in [f ^ 2, f.wrapping_add(2), f ^ (1 << 30)] {
                assert_eq!(filter.contains(other), stops.binary_search(&other).is_ok());
            }
        }
        let mut x = 1u32;
        for _ in 0..100_000 {
            x = x.wrapping_mul(0x2c1b_3c6d).wrapping_add(0x297a_2d39);
            assert_eq!(filter.contains(x), stops.binary_search(&x).is_ok());
        }
    }

    proptest! {
        /// `words_missing` in one pass, stop words told by their bitmap,
        /// answers as its two passes and binary searches did.
        #[test]
        fn words_missing_answers_as_two_passes_did(
            later in set_of_words(),
            earlier in set_of_words(),
        ) {
            prop_assert_eq!(
                words_missing(&later, &earlier),
                words_missing_reference(&later, &earlier)
            );
            prop_assert_eq!(
                words_missing(&earlier, &later),
                words_missing_reference(&earlier, &later)
            );
        }
    }

    proptest! {
        #[test]
        fn similarity_at_least_is_the_exact_similarity_cut_at_the_floor(
            a in sorted_set(),
            b in sorted_set(),
            floor in 0.0f64..=1.0,
            jaccard in any::<bool>(),
            anchored in any::<bool>(),
            earlier_truncated in any::<bool>(),
        ) {
            let hints = PairHints { anchored, earlier_truncated };
            let measure = if jaccard { Measure::Jaccard } else { Measure::Containment };
            let exact = reference_similarity(measure, &a, &b, hints);
            prop_assert_eq!(similarity(measure, &a, &b, hints), exact);
            prop_assert_eq!(
                similarity_at_least(measure, &a, &b, hints, floor),
                (exact >= floor).then_some(exact)
            );
            // A tie with the floor is kept: the earliest of equals wins.
            prop_assert_eq!(similarity_at_least(measure, &a, &b, hints, exact), Some(exact));
        }

        /// `slots_differ` by blocks, reading the earlier set only when the
        /// later has a number of its own, answers as reading both shingle
        /// by shingle did: sets of every length around the blocks' edges,
        /// cut or not, and sets at the cap.
        #[test]
        fn slots_differ_answers_as_reading_shingle_by_shingle_did(
            later in set_with_slots(40),
            earlier in set_with_slots(40),
            long in set_with_slots(600),
            later_cut in any::<bool>(),
            earlier_cut in any::<bool>(),
        ) {
            for (a, b) in [(&later, &earlier), (&earlier, &later), (&later, &long), (&long, &earlier)] {
                prop_assert_eq!(
                    slots_differ(a, b, later_cut, earlier_cut),
                    slots_differ_reference(a, b, later_cut, earlier_cut),
                    "later {:?} earlier {:?}", a, b
                );
            }
        }

        /// The filter never turns away a pair that reaches the floor:
        /// shingles spread over more values than the filter has bits, so
        /// that bits collide.
        #[test]
        fn the_filter_changes_no_result(
            a in proptest::collection::btree_set(0u32..3000, 0..40),
            b in proptest::collection::btree_set(0u32..3000, 0..40),
            shared in proptest::collection::btree_set(0u32..3000, 0..30),
            floor in 0.0f64..=1.0,
            jaccard in any::<bool>(),
            anchored in any::<bool>(),
            earlier_truncated in any::<bool>(),
        ) {
            let hints = PairHints { anchored, earlier_truncated };
            let measure = if jaccard { Measure::Jaccard } else { Measure::Containment };
            let a: Vec<u32> = a.union(&shared).copied().collect();
            let b: Vec<u32> = b.union(&shared).copied().collect();
            let filter = SetFilter::new(&a);
            prop_assert!(filter.bound(&b) >= intersection(&a, &b));
            let exact = similarity(measure, &a, &b, hints);
            // The filtered comparison asks for the anchor only when it
            // matters: the same result as knowing it from the start.
            let unknown = PairHints { anchored: false, ..hints };
            prop_assert_eq!(
                similarity_at_least_filtered(measure, &a, &filter, &b, unknown, || anchored, floor),
                similarity_at_least(measure, &a, &b, hints, floor)
            );
            prop_assert_eq!(
                similarity_at_least_filtered(measure, &a, &filter, &b, unknown, || anchored, exact),
                similarity_at_least(measure, &a, &b, hints, exact)
            );
        }
    }

    proptest! {
        /// The verifier gives what the general path gives, on its fast
        /// path (AVX2 where the processor has it, and the scalar count)
        /// and on sets large enough to take the general path; the same
        /// verifier serves one set after another, as in the engine.
        #[test]
        fn the_verifier_is_the_general_path(
            sets in proptest::collection::vec(
                (
                    proptest::collection::btree_set(0u32..3000, 0..40),
                    proptest::collection::vec(
                        (
                            proptest::collection::btree_set(0u32..3000, 0..40),
                            proptest::collection::vec(any::<bool>(), 0..40),
                            0.0f64..=1.0,
                            any::<bool>(),
                            any::<bool>(),
                        ),
                        1..6,
                    ),
                ),
                1..4,
            ),
            jaccard in any::<bool>(),
            long in any::<bool>(),
        ) {
            let measure = if jaccard { Measure::Jaccard } else { Measure::Containment };
            let mut fast = Verifier::new();
            let mut scalar = Verifier::new();
            #[cfg(target_arch = "x86_64")]
            {
                scalar.avx2 = false;
            }
            for (a, candidates) in sets {
                let mut a: Vec<u32> = a.into_iter().collect();
                if long {
                    // Past MAX_SHINGLES: compared on a common sample.
                    a.extend(10_000..10_000 + super::super::shingle::MAX_SHINGLES as u32);
                }
                let filter = SetFilter::new(&a);
                fast.load(&a);
                scalar.load(&a);
                for (mut b, keep, floor, anchored, earlier_truncated) in candidates {
                    // Some of `a`'s shingles, so that the two overlap.
                    b.extend(a.iter().zip(keep).filter(|(_, k)| *k).map(|(s, _)| *s));
                    let b: Vec<u32> = b.into_iter().collect();
                    let unknown = PairHints { anchored: false, earlier_truncated };
                    let want = similarity_at_least_filtered(
                        measure, &a, &filter, &b, unknown, || anchored, floor,
                    );
                    for verifier in [&mut fast, &mut scalar] {
                        prop_assert_eq!(
                            verifier.similarity_at_least(measure, &a, &b, unknown, || anchored, floor),
                            want
                        );
                        let exact = similarity(
                            measure,
                            &a,
                            &b,
                            PairHints { anchored, earlier_truncated },
                        );
                        prop_assert_eq!(
                            verifier.similarity_at_least(measure, &a, &b, unknown, || anchored, exact),
                            similarity_at_least_filtered(
                                measure, &a, &filter, &b, unknown, || anchored, exact,
                            )
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn verdicts_render_as_the_contract_says() {
        let mut out = Vec::new();
        Verdict::New.write_json(&mut out);
        assert_eq!(out, br#"{"status":"new"}"#);
        out.clear();
        Verdict::Duplicate(Match {
            of: MessageId::DigitString(1234567890123456789),
            similarity: 0.75,
            cluster: MessageId::Integer(17),
        })
        .write_json(&mut out);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            r#"{"status":"duplicate","duplicate_of":"1234567890123456789","similarity":0.75,"cluster":17}"#
        );
    }

    /// A lone recent match: below the threshold but above its bar, recent,
    /// long enough, and the only story near the message.
    #[test]
    fn a_lone_recent_match_is_taken() {
        let mut lone = LoneMatch::<u32, u32>::new(0.8, 3000, 10_000);
        lone.offer(1, 0.72, 9_000, 15, 15, || 7);
        lone.offer(2, 0.75, 8_000, 15, 15, || 7);
        assert_eq!(lone.result(), Some((2, 0.75)));
    }

    /// Ties go to the earliest, as they do at the threshold.
    #[test]
    fn a_tie_goes_to_the_earliest() {
        let mut lone = LoneMatch::<u32, u32>::new(0.8, 3000, 10_000);
        lone.offer(1, 0.75, 9_000, 15, 15, || 7);
        lone.offer(2, 0.75, 8_000, 15, 15, || 7);
        lone.offer(3, 0.75, 8_500, 15, 15, || 7);
        assert_eq!(lone.result(), Some((2, 0.75)));
    }

    /// Each condition, broken alone, leaves no lone match.
    #[test]
    fn each_condition_is_needed() {
        let offer = |recent: u64, s: f64, seq: u64, lens: (usize, usize)| {
            let mut lone = LoneMatch::<u32, u32>::new(0.8, recent, 10_000);
            lone.offer(1, s, seq, lens.0, lens.1, || 7);
            lone.result()
        };
        assert!(offer(3000, 0.72, 7_000, (15, 15)).is_some());
        // Below the bar.
        assert!(offer(3000, 0.69, 7_000, (15, 15)).is_none());
        // Too old.
        assert!(offer(3000, 0.72, 6_999, (15, 15)).is_none());
        // Off.
        assert!(offer(0, 0.72, 9_999, (15, 15)).is_none());
        // A text too short, on either side.
        assert!(offer(3000, 0.72, 9_000, (10, 15)).is_none());
        assert!(offer(3000, 0.72, 9_000, (15, 10)).is_none());
        // Lengths too far apart: a comment or a cut, which the
        // threshold and the anchors judge.
        assert!(offer(3000, 0.72, 9_000, (15, 23)).is_none());
        assert!(offer(3000, 0.72, 9_000, (16, 24)).is_some());
        // Long texts: an edit of one is above the threshold already.
        assert!(offer(3000, 0.72, 9_000, (40, 40)).is_some());
        assert!(offer(3000, 0.72, 9_000, (40, 41)).is_none());
    }

    /// Another story near the message, even an old one below the bar,
    /// makes it a template's: no lone match.
    #[test]
    fn another_story_near_takes_it_away() {
        let mut lone = LoneMatch::<u32, u32>::new(0.8, 3000, 10_000);
        lone.offer(1, 0.75, 9_000, 15, 15, || 7);
        lone.offer(2, 0.55, 100, 15, 15, || 8);
        assert_eq!(lone.result(), None);
        // Below the near bar, another story does not count.
        let mut lone = LoneMatch::<u32, u32>::new(0.8, 3000, 10_000);
        lone.offer(1, 0.75, 9_000, 15, 15, || 7);
        lone.offer(2, 0.45, 100, 15, 15, || 8);
        assert_eq!(lone.result(), Some((1, 0.75)));
    }
}

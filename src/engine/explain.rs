//! Why a verdict is what it is (`--explain`): the rule that decided it,
//! the measure and the shingle counts behind its similarity, the threshold
//! in force, and for a new message the nearest candidate that fell short.
//!
//! The decision itself records nothing: when explanations are on, the
//! [`Deduper`] works the explanation out afterwards, from what the decision
//! left behind (the winning slot and its similarity, or the candidates it
//! verified), before the message is inserted, so that it sees the index the
//! decision saw. When they are off, the only cost is one test of a flag per
//! message, and the output is what it was byte for byte.

use crate::engine::config::Measure;
use crate::engine::id::MessageId;

use super::verdict::{PairHints, Refusal, by_containment, intersection, ratio, write_similarity};
use super::{Deduper, Sketch, share_anchor, shingle};

/// The rule that decided a verdict.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rule {
    /// Duplicate: the same shingle set as an indexed message (similarity 1).
    Exact,
    /// Duplicate: the most similar candidate reached the threshold, by
    /// Jaccard or, under `--measure containment`, by containment because
    /// one set is most of the other.
    Threshold,
    /// Duplicate: the most similar candidate reached the threshold by
    /// containment, allowed only because the two texts begin or end alike
    /// (they share an anchor: a cut copy, a comment added).
    Anchor,
    /// Duplicate: no candidate reached the threshold, but a recent one
    /// reached the threshold minus [`super::verdict::RECENT_MARGIN`] and
    /// was the only story near the message (`--recent`).
    LoneRecent,
    /// New: the text is empty once normalised; nothing to compare.
    Empty,
    /// New: no indexed message shares an LSH band, an anchor or the exact
    /// set with it.
    NoCandidate,
    /// New: candidates were found, none similar enough (the nearest is
    /// given).
    BelowThreshold,
    /// New: a candidate was similar enough, but the two differ in a number
    /// each has and the other lacks, a template's slot ("w/ 2910 others"
    /// and "w/ 226 others"); it is given as the nearest (see
    /// [`super::verdict::slots_differ`]).
    SlotDiffers,
    /// New: a candidate was similar enough, but from beyond `--recent`,
    /// and the shorter of two short texts has a word the other lacks ("I
    /// don't give a fuck." and "I don't give a boo boo"); it is given as
    /// the nearest (see [`super::verdict::words_missing`]).
    ShortWording,
    /// A delete notice or a removal: the id left the index, or was not
    /// held (see `docs/deletions.md`); nothing was compared.
    Deleted,
    /// A repeat: the message is indexed already under its id with the same
    /// text, and gets the verdict it was first given; nothing was compared.
    Repeat,
}

impl Rule {
    /// Its name in the tag.
    pub fn name(self) -> &'static str {
        match self {
            Rule::Exact => "exact",
            Rule::Threshold => "threshold",
            Rule::Anchor => "anchor",
            Rule::LoneRecent => "lone_recent",
            Rule::Empty => "empty",
            Rule::NoCandidate => "no_candidate",
            Rule::BelowThreshold => "below_threshold",
            Rule::SlotDiffers => "slot_differs",
            Rule::ShortWording => "short_wording",
            Rule::Deleted => "deleted",
            Rule::Repeat => "repeat",
        }
    }

    /// Every rule, in the order of the documentation.
    pub const ALL: [Rule; 11] = [
        Rule::Exact,
        Rule::Threshold,
        Rule::Anchor,
        Rule::LoneRecent,
        Rule::Empty,
        Rule::NoCandidate,
        Rule::BelowThreshold,
        Rule::SlotDiffers,
        Rule::ShortWording,
        Rule::Deleted,
        Rule::Repeat,
    ];
}

/// The counts behind a pair's similarity.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PairCounts {
    /// The measure that compared the pair: under `--measure containment` a
    /// pair may still be compared by Jaccard (see
    /// [`super::verdict::by_containment`]).
    pub measure: Measure,
    /// Shingles the two share.
    pub shared: usize,
    /// What they are counted against: the union (Jaccard) or the smaller
    /// set (containment). The similarity is `shared / total`.
    pub total: usize,
    /// Containment applied only because the two share an anchor.
    pub anchored: bool,
}

impl PairCounts {
    /// The similarity these counts give.
    pub fn similarity(&self) -> f64 {
        ratio(self.shared, self.total)
    }
}

/// The counts behind [`super::verdict::similarity`] of the same arguments
/// (`a` the later message, `b` the indexed one), worked out as it does:
/// capped sets on their common sample, containment when
/// [`by_containment`] says so.
pub fn pair_counts(measure: Measure, a: &[u32], b: &[u32], hints: PairHints) -> PairCounts {
    let (a, b) = shingle::comparable(a, b);
    if a.is_empty() || b.is_empty() {
        return PairCounts {
            measure: Measure::Jaccard,
            shared: 0,
            total: 0,
            anchored: false,
        };
    }
    let containment = by_containment(measure, a.len(), b.len(), hints);
    let unanchored = PairHints {
        anchored: false,
        ..hints
    };
    let shared = intersection(a, b);
    PairCounts {
        measure: if containment {
            Measure::Containment
        } else {
            Measure::Jaccard
        },
        shared,
        total: if containment {
            a.len().min(b.len())
        } else {
            a.len() + b.len() - shared
        },
        anchored: containment && !by_containment(measure, a.len(), b.len(), unanchored),
    }
}

/// The candidate nearest a new message.
#[derive(Clone, Debug, PartialEq)]
pub struct Nearest {
    /// Its id.
    pub id: MessageId,
    /// Its similarity, below the threshold.
    pub similarity: f64,
    /// The counts behind it.
    pub counts: PairCounts,
}

/// What decided one verdict.
#[derive(Clone, Debug, PartialEq)]
pub struct Explanation {
    /// The rule.
    pub rule: Rule,
    /// The threshold in force.
    pub threshold: f64,
    /// For a duplicate: the counts behind its similarity.
    pub counts: Option<PairCounts>,
    /// For a new message that had candidates: the most similar (ties: the
    /// earliest).
    pub nearest: Option<Nearest>,
}

impl Explanation {
    /// The explanation of a removal ([`Rule::Deleted`]).
    pub fn deleted(threshold: f64) -> Explanation {
        Explanation::bare(Rule::Deleted, threshold)
    }

    /// The explanation of a repeat ([`Rule::Repeat`]).
    pub fn repeat(threshold: f64) -> Explanation {
        Explanation::bare(Rule::Repeat, threshold)
    }

    /// An explanation without counts.
    fn bare(rule: Rule, threshold: f64) -> Explanation {
        Explanation {
            rule,
            threshold,
            counts: None,
            nearest: None,
        }
    }

    /// Appends its JSON object: `{"rule":R,"measure":M,"shared":N,"total":N,
    /// "threshold":T}` for a duplicate, `{"rule":R,"threshold":T,
    /// "nearest":{"id":ID,"similarity":S,"measure":M,"shared":N,"total":N}}`
    /// for a new message (`nearest` only when there was a candidate).
    pub fn write_json(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(b"{\"rule\":\"");
        out.extend_from_slice(self.rule.name().as_bytes());
        out.push(b'"');
        if let Some(counts) = &self.counts {
            write_counts(counts, out);
        }
        out.extend_from_slice(b",\"threshold\":");
        // Display of an f64 is its shortest exact form, never an exponent
        // for a threshold in (0, 1]: a JSON number.
        out.extend_from_slice(self.threshold.to_string().as_bytes());
        if let Some(nearest) = &self.nearest {
            out.extend_from_slice(b",\"nearest\":{\"id\":");
            nearest.id.write_json(out);
            out.extend_from_slice(b",\"similarity\":");
            write_similarity(nearest.similarity, out);
            write_counts(&nearest.counts, out);
            out.push(b'}');
        }
        out.push(b'}');
    }
}

/// `,"measure":M,"shared":N,"total":N`.
fn write_counts(counts: &PairCounts, out: &mut Vec<u8>) {
    let mut digits = itoa::Buffer::new();
    out.extend_from_slice(b",\"measure\":\"");
    out.extend_from_slice(counts.measure.to_string().as_bytes());
    out.extend_from_slice(b"\",\"shared\":");
    out.extend_from_slice(digits.format(counts.shared).as_bytes());
    out.extend_from_slice(b",\"total\":");
    out.extend_from_slice(digits.format(counts.total).as_bytes());
}

/// The [`Deduper`]'s explanations: whether it gives them, the last one,
/// and those of the batch an [`super::IndexStore::decide`] call decides.
#[derive(Debug, Default)]
pub(super) struct Explainer {
    pub(super) on: bool,
    pub(super) last: Option<Explanation>,
    pub(super) batch: Vec<Explanation>,
}

impl Deduper {
    /// Turns explanations on or off: when on, every decision leaves an
    /// [`Explanation`] ([`Deduper::explanation`], and one per ask of an
    /// [`super::IndexStore::decide`] call). Off by default; verdicts are
    /// the same either way.
    pub fn set_explain(&mut self, on: bool) {
        self.explainer.on = on;
        self.explainer.last = None;
        self.explainer.batch.clear();
    }

    /// The explanation of the last decision, when explanations are on.
    pub fn explanation(&self) -> Option<&Explanation> {
        self.explainer.last.as_ref()
    }

    /// Records why a message with nothing to compare is new.
    pub(super) fn explain_empty(&mut self) {
        self.explainer.last = Some(Explanation::bare(Rule::Empty, self.config.threshold));
    }

    /// Records why the decision just made is what it is: `exact` is the
    /// slot of the identical set, `best` the slot and similarity chosen (by
    /// the threshold or as a lone recent match). Called before the message
    /// is inserted, so the index is the one the decision saw; for a new
    /// message, `self.candidates` still holds the candidates it verified.
    pub(super) fn explain_decision(
        &mut self,
        sketch: Sketch<'_>,
        exact: Option<u32>,
        best: Option<(u32, f64)>,
    ) {
        let threshold = self.config.threshold;
        let explanation = match best {
            Some((slot, s)) => {
                let counts = self.counts_against(sketch, slot);
                let rule = if Some(slot) == exact && s >= 1.0 {
                    Rule::Exact
                } else if s < threshold {
                    Rule::LoneRecent
                } else if counts.is_some_and(|c| c.anchored) {
                    Rule::Anchor
                } else {
                    Rule::Threshold
                };
                Explanation {
                    rule,
                    threshold,
                    counts,
                    nearest: None,
                }
            }
            None if self.candidates.is_empty() => Explanation::bare(Rule::NoCandidate, threshold),
            None if self.refused.is_some() => {
                let (slot, _, refusal) = self.refused.expect("checked");
                let rule = match refusal {
                    Refusal::Slot => Rule::SlotDiffers,
                    Refusal::ShortWording => Rule::ShortWording,
                };
                Explanation {
                    rule,
                    threshold,
                    counts: None,
                    nearest: self.counts_against(sketch, slot).and_then(|counts| {
                        Some(Nearest {
                            id: self.index.peek(slot)?.id.clone(),
                            similarity: counts.similarity(),
                            counts,
                        })
                    }),
                }
            }
            None => {
                // The decision gave up on most candidates early, below its
                // floor: each is compared again, exactly.
                let mut nearest: Option<(u32, u64, PairCounts)> = None;
                for &slot in &self.candidates {
                    let (Some(entry), Some(counts)) =
                        (self.index.peek(slot), self.counts_against(sketch, slot))
                    else {
                        continue;
                    };
                    let closer = nearest.is_none_or(|(_, seq, best)| {
                        let (s, b) = (counts.similarity(), best.similarity());
                        s > b || (s == b && entry.seq < seq)
                    });
                    if closer {
                        nearest = Some((slot, entry.seq, counts));
                    }
                }
                Explanation {
                    rule: Rule::BelowThreshold,
                    threshold,
                    counts: None,
                    nearest: nearest.and_then(|(slot, _, counts)| {
                        Some(Nearest {
                            id: self.index.peek(slot)?.id.clone(),
                            similarity: counts.similarity(),
                            counts,
                        })
                    }),
                }
            }
        };
        self.explainer.last = Some(explanation);
    }

    /// The counts of the message against the indexed message in `slot`,
    /// with the hints the decision had (whether they share an anchor that
    /// counts, whether the indexed text was cut).
    fn counts_against(&self, sketch: Sketch<'_>, slot: u32) -> Option<PairCounts> {
        let entry = self.index.peek(slot)?;
        let bands = self.preparer.lsh_params().bands;
        let anchors = sketch.band_keys.get(bands..).unwrap_or_default();
        let theirs = entry.band_keys().get(bands..).unwrap_or_default();
        let hints = PairHints {
            anchored: share_anchor(anchors, sketch.truncated, theirs, |at| {
                self.index.anchor_is_a_copys(anchors[at])
            }),
            earlier_truncated: entry.truncated(),
        };
        Some(pair_counts(
            self.config.measure,
            sketch.shingles,
            entry.shingles(),
            hints,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::config::EngineConfig;
    use crate::engine::verdict::similarity;
    use crate::engine::{Scratch, Verdict};
    use proptest::prelude::*;

    fn id(n: u64) -> MessageId {
        MessageId::Integer(n)
    }

    fn explaining(config: EngineConfig) -> Deduper {
        let mut d = Deduper::new(config).unwrap();
        d.set_explain(true);
        d
    }

    fn check(d: &mut Deduper, n: u64, text: &str) -> (Verdict, Explanation) {
        let sketch = d.preparer().sketch(text, &[], &mut Scratch::default());
        let verdict = d.check(id(n), sketch.as_sketch());
        (verdict, d.explanation().cloned().expect("explained"))
    }

    fn json(e: &Explanation) -> String {
        let mut out = Vec::new();
        e.write_json(&mut out);
        String::from_utf8(out).unwrap()
    }

    const STORY: &str = "Flooding closes the coastal highway north of the city tonight, police say";

    #[test]
    fn each_rule_is_named_where_it_decides() {
        let mut d = explaining(EngineConfig::default());
        let (v, e) = check(&mut d, 1, STORY);
        assert_eq!((v, e.rule), (Verdict::New, Rule::NoCandidate));
        let (v, e) = check(&mut d, 2, &format!("RT @news: {STORY}"));
        assert!(v.is_duplicate());
        assert_eq!(e.rule, Rule::Exact);
        assert_eq!(
            json(&e),
            r#"{"rule":"exact","measure":"containment","shared":22,"total":22,"threshold":0.8}"#
        );
        let (v, e) = check(&mut d, 3, &format!("{STORY} and more rain is on its way"));
        assert!(v.is_duplicate());
        assert_eq!(e.rule, Rule::Anchor, "{}", json(&e));
        let (_, e) = check(&mut d, 4, "");
        assert_eq!(e.rule, Rule::Empty);
        assert_eq!(json(&e), r#"{"rule":"empty","threshold":0.8}"#);
        let (v, e) = check(
            &mut d,
            5,
            "Flooding closes the coastal railway south of the town today, officials say",
        );
        assert_eq!(v, Verdict::New);
        assert_eq!(e.rule, Rule::BelowThreshold);
        let nearest = e.nearest.expect("a nearest candidate");
        assert!(nearest.similarity < 0.8 && nearest.similarity > 0.0);
        assert_eq!(nearest.similarity, nearest.counts.similarity());
    }

    #[test]
    fn the_guards_are_named_with_the_candidate_they_refused() {
        let mut d = explaining(EngineConfig::default());
        check(
            &mut d,
            1,
            "Hurricane Sandy hits the east coast: 12 photos of the damage",
        );
        let (v, e) = check(
            &mut d,
            2,
            "Hurricane Sandy hits the east coast: 23 photos of the damage",
        );
        assert_eq!(
            (v, e.rule),
            (Verdict::New, Rule::SlotDiffers),
            "{}",
            json(&e)
        );
        let nearest = e.nearest.expect("the refused candidate");
        assert_eq!(nearest.id, id(1));
        assert!(nearest.similarity >= 0.8);
        let mut d = explaining(EngineConfig::default());
        check(&mut d, 1, "I don't give a fuck.");
        for n in 0..crate::engine::config::DEFAULT_RECENT + 1 {
            check(&mut d, 10 + n, &format!("filler {n} w{n}a w{n}b"));
        }
        let (v, e) = check(&mut d, 1_000_000, "I don't give a boo boo");
        assert_eq!(
            (v, e.rule),
            (Verdict::New, Rule::ShortWording),
            "{}",
            json(&e)
        );
        assert!(
            json(&e).starts_with(r#"{"rule":"short_wording","threshold":0.8,"nearest":{"id":1,"#)
        );
    }

    #[test]
    fn a_lone_recent_edit_is_named() {
        let mut d = explaining(EngineConfig::default());
        check(
            &mut d,
            1,
            "we are going to the beach this weekend with all the kids",
        );
        let (v, e) = check(
            &mut d,
            2,
            "we are going to the lake this weekend with all the dogs",
        );
        assert!(v.is_duplicate(), "{}", json(&e));
        assert_eq!(e.rule, Rule::LoneRecent);
    }

    #[test]
    fn the_counts_give_the_verdicts_similarity() {
        let mut d = explaining(EngineConfig::default());
        check(&mut d, 1, STORY);
        for (n, text) in [
            (2, format!("{STORY} today")),
            (3, format!("Breaking: {STORY}")),
            (
                4,
                "Flooding closes the coastal highway north of the…".to_string(),
            ),
        ] {
            let (v, e) = check(&mut d, n, &text);
            let Verdict::Duplicate(m) = v else {
                panic!("{text}: {}", json(&e))
            };
            assert_eq!(m.similarity, e.counts.unwrap().similarity(), "{text}");
        }
    }

    #[test]
    fn off_leaves_nothing() {
        let mut d = Deduper::new(EngineConfig::default()).unwrap();
        d.check_text(id(1), STORY);
        assert!(d.explanation().is_none());
        d.set_explain(true);
        d.check_text(id(2), STORY);
        assert!(d.explanation().is_some());
        d.set_explain(false);
        assert!(d.explanation().is_none());
    }

    fn sorted_set() -> impl Strategy<Value = Vec<u32>> {
        proptest::collection::btree_set(0u32..40, 0..30).prop_map(|s| s.into_iter().collect())
    }

    /// Texts from a small vocabulary, so that a stream has copies, edits
    /// and near misses.
    fn stream() -> impl Strategy<Value = Vec<Vec<u8>>> {
        proptest::collection::vec(proptest::collection::vec(0u8..12, 0..16), 1..60)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Explanations change no verdict, and each agrees with its
        /// verdict: a duplicate's counts give its similarity, a lone
        /// recent match is below the threshold and nothing else is, a new
        /// message's nearest is below the threshold.
        #[test]
        fn explaining_changes_nothing_and_agrees(texts in stream(), threshold in 0.5f64..=0.95) {
            const WORDS: [&str; 12] = [
                "river", "road", "closed", "flood", "north", "city", "the", "police",
                "tonight", "bakery", "opens", "monday",
            ];
            let config = EngineConfig { threshold, ..EngineConfig::default() };
            let mut plain = Deduper::new(config.clone()).unwrap();
            let mut explained = explaining(config);
            for (n, words) in texts.iter().enumerate() {
                let text: Vec<&str> = words.iter().map(|&w| WORDS[w as usize]).collect();
                let text = text.join(" ");
                let want = plain.check_text(id(n as u64), &text);
                let (got, e) = check(&mut explained, n as u64, &text);
                prop_assert_eq!(&got, &want);
                prop_assert_eq!(e.threshold, threshold);
                match &got {
                    Verdict::Duplicate(m) => {
                        let counts = e.counts.expect("a duplicate's counts");
                        prop_assert_eq!(counts.similarity(), m.similarity);
                        prop_assert!(matches!(
                            e.rule,
                            Rule::Exact | Rule::Threshold | Rule::Anchor | Rule::LoneRecent
                        ));
                        prop_assert_eq!(e.rule == Rule::LoneRecent, m.similarity < threshold);
                    }
                    Verdict::New => {
                        prop_assert!(matches!(
                            e.rule,
                            Rule::Empty | Rule::NoCandidate | Rule::BelowThreshold
                        ));
                        prop_assert_eq!(e.rule == Rule::Empty, text.is_empty());
                        if let Some(nearest) = &e.nearest {
                            prop_assert!(nearest.similarity < threshold);
                        }
                    }
                    Verdict::Deleted { .. } => prop_assert!(false, "a check is never a removal"),
                    Verdict::Repeat(_) => prop_assert!(false, "distinct ids are never repeats"),
                }
            }
        }

        /// The counts are those of the similarity the verdict reports.
        #[test]
        fn counts_are_the_similarity(
            a in sorted_set(),
            b in sorted_set(),
            jaccard in any::<bool>(),
            anchored in any::<bool>(),
            earlier_truncated in any::<bool>(),
        ) {
            let hints = PairHints { anchored, earlier_truncated };
            let measure = if jaccard { Measure::Jaccard } else { Measure::Containment };
            let counts = pair_counts(measure, &a, &b, hints);
            prop_assert_eq!(counts.similarity(), similarity(measure, &a, &b, hints));
            if counts.anchored {
                prop_assert!(anchored);
                prop_assert_eq!(counts.measure, Measure::Containment);
            }
        }
    }
}

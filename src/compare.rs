//! Two texts compared as the filter would compare them (`dedup-stream
//! compare`, and the sidecar's `/v1/compare`).
//!
//! The second text is taken as the later message, arriving right after the
//! first with nothing else indexed: the similarity is the engine's own
//! ([`crate::engine::similarity`]), and a pair just under the threshold is
//! still a duplicate when it would be a lone recent match. Keeping this in
//! the library lets the command line and the server give the same answer.

use crate::engine::config::EngineConfig;
use crate::engine::explain::{PairCounts, pair_counts};
use crate::engine::verdict::{LoneMatch, slots_apply, slots_differ};
use crate::engine::{Explained, PairHints, Preparer, Rule, share_anchor, similarity};
use crate::wire::record::Decoder;

/// What comparing two texts found.
#[derive(Debug)]
pub struct Comparison {
    /// The first text, normalised and shingled.
    pub a: Explained,
    /// The second text, normalised and shingled.
    pub b: Explained,
    /// The engine's similarity of B to A.
    pub similarity: f64,
    /// Whether B would be tagged a duplicate of A.
    pub duplicate: bool,
    /// Whether it is one only as a lone recent match (under the threshold).
    pub lone_recent: bool,
    /// Whether it would be one but for a number each has that the other
    /// lacks (a template's slot: not a copy).
    pub slot_differs: bool,
    /// The rule that decides, as `--explain` names it.
    pub rule: Rule,
    /// The counts behind the similarity.
    pub counts: PairCounts,
}

/// Reads `text` as one JSON record when it is one (its text and URL
/// entities), as plain text otherwise, and explains it.
pub fn explain_input(preparer: &Preparer, decoder: &Decoder, text: &str) -> Explained {
    match decoder.decode(text.as_bytes()) {
        Ok(record) => preparer.explain(&record.text, &record.urls),
        Err(_) => preparer.explain(text, &[]),
    }
}

/// Compares B (the later message) with A.
pub fn compare(config: &EngineConfig, a: Explained, b: Explained) -> Comparison {
    let set = |e: &Explained| e.shingles.iter().map(|(f, _)| *f).collect::<Vec<u32>>();
    let (set_a, set_b) = (set(&a), set(&b));
    // Two texts alone: every anchor they share is a copy's.
    let hints = PairHints {
        anchored: share_anchor(&b.anchors, b.truncated, &a.anchors, |_| true),
        earlier_truncated: a.truncated,
    };
    let similarity = similarity(config.measure, &set_b, &set_a, hints);
    let mut lone = LoneMatch::new(config.threshold, config.lone_reach(), 1);
    lone.offer((), similarity, 0, b.shingles.len(), a.shingles.len(), || ());
    let above = similarity >= config.threshold;
    let lone_recent = !above && lone.result().is_some();
    // Two texts of one template that differ in a number are not copies,
    // however similar (`--explain`'s `slot_differs`).
    let slot_differs = (above || lone_recent)
        && slots_apply(config)
        && slots_differ(&set_b, &set_a, b.truncated, a.truncated);
    let counts = pair_counts(config.measure, &set_b, &set_a, hints);
    let rule = if set_a == set_b {
        Rule::Exact
    } else if slot_differs {
        Rule::SlotDiffers
    } else if above && counts.anchored {
        Rule::Anchor
    } else if above {
        Rule::Threshold
    } else if lone_recent {
        Rule::LoneRecent
    } else {
        Rule::BelowThreshold
    };
    Comparison {
        a,
        b,
        similarity,
        duplicate: !slot_differs && (above || lone_recent),
        lone_recent: lone_recent && !slot_differs,
        slot_differs,
        rule,
        counts,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::record::FieldSpec;

    #[test]
    fn a_retweet_is_a_duplicate_and_an_unrelated_text_is_not() {
        let config = EngineConfig::default();
        let preparer = Preparer::new(&config);
        let decoder = Decoder::new(FieldSpec::default());
        let e = |t: &str| explain_input(&preparer, &decoder, t);
        let same = compare(
            &config,
            e("Flooding closes the coastal highway tonight"),
            e("RT @news: Flooding closes the coastal highway tonight"),
        );
        assert!(same.duplicate);
        assert_eq!(same.similarity, 1.0);
        assert_eq!(same.rule, Rule::Exact);
        let other = compare(
            &config,
            e("Flooding closes the coastal highway tonight"),
            e("The bakery on Main Street sells rye bread on Sundays"),
        );
        assert!(!other.duplicate);
        assert_eq!(other.rule, Rule::BelowThreshold);
    }
}

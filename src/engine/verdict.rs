//! Stage 5, verdict: compare candidate shingle sets exactly and say what a
//! message is.

use crate::config::Measure;
use crate::record::MessageId;

/// What the engine decided about one message.
#[derive(Clone, Debug, PartialEq)]
pub enum Verdict {
    /// Nothing indexed is similar enough.
    New,
    /// A near-duplicate of an indexed message.
    Duplicate(Match),
}

/// The earlier message a duplicate matches.
#[derive(Clone, Debug, PartialEq)]
pub struct Match {
    /// The earlier message's id, as it was in the input.
    pub of: MessageId,
    /// Similarity under the configured measure, in [0, 1].
    pub similarity: f64,
}

impl Verdict {
    /// Whether this is a duplicate.
    pub fn is_duplicate(&self) -> bool {
        matches!(self, Verdict::Duplicate(_))
    }

    /// Appends the verdict's JSON object: `{"status":"new"}` or
    /// `{"status":"duplicate","duplicate_of":ID,"similarity":S}`.
    pub fn write_json(&self, out: &mut Vec<u8>) {
        match self {
            Verdict::New => out.extend_from_slice(br#"{"status":"new"}"#),
            Verdict::Duplicate(m) => {
                out.extend_from_slice(br#"{"status":"duplicate","duplicate_of":"#);
                m.of.write_json(out);
                out.extend_from_slice(br#","similarity":"#);
                write_similarity(m.similarity, out);
                out.push(b'}');
            }
        }
    }
}

/// Writes a similarity with at most four decimals and no trailing zeros
/// (`1`, `0.5`, `0.8571`): short, and the same on every machine.
pub fn write_similarity(similarity: f64, out: &mut Vec<u8>) {
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
    let text = format!("{frac:0digits$}");
    out.extend_from_slice(text.as_bytes());
}

/// Size of the intersection of two sorted, deduplicated sets.
pub fn intersection(a: &[u32], b: &[u32]) -> usize {
    let (mut i, mut j, mut n) = (0, 0, 0);
    while i < a.len() && j < b.len() {
        match a[i].cmp(&b[j]) {
            std::cmp::Ordering::Less => i += 1,
            std::cmp::Ordering::Greater => j += 1,
            std::cmp::Ordering::Equal => {
                n += 1;
                i += 1;
                j += 1;
            }
        }
    }
    n
}

/// Fewest shingles a set needs for containment to apply to it: a text of a
/// word or three ("Happy New Year!") is contained in countless others that
/// say more, so below this the pair is compared by Jaccard instead.
pub const MIN_CONTAINED_SHINGLES: usize = 3;

/// Exact similarity of two sorted, deduplicated shingle sets.
pub fn similarity(measure: Measure, a: &[u32], b: &[u32]) -> f64 {
    if a.is_empty() || b.is_empty() {
        return 0.0;
    }
    let shared = intersection(a, b) as f64;
    let smaller = a.len().min(b.len());
    match measure {
        Measure::Containment if smaller >= MIN_CONTAINED_SHINGLES => shared / smaller as f64,
        _ => shared / ((a.len() + b.len()) as f64 - shared),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn similarity_text(s: f64) -> String {
        let mut out = Vec::new();
        write_similarity(s, &mut out);
        String::from_utf8(out).unwrap()
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
        assert_eq!(similarity(Measure::Jaccard, &a, &b), 2.0 / 6.0);
        assert_eq!(similarity(Measure::Containment, &a, &b), 0.5);
        assert_eq!(similarity(Measure::Containment, &[3, 4, 5], &b), 1.0);
        // Too small to be "contained": Jaccard.
        assert_eq!(similarity(Measure::Containment, &[3, 4], &b), 0.5);
        assert_eq!(similarity(Measure::Jaccard, &a, &a), 1.0);
        assert_eq!(similarity(Measure::Jaccard, &[], &a), 0.0);
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
        })
        .write_json(&mut out);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            r#"{"status":"duplicate","duplicate_of":"1234567890123456789","similarity":0.75}"#
        );
    }
}

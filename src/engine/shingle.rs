//! Stage 3, shingle: turn a token sequence into the set of its w-grams
//! (Broder's w-shingling), or a text into its character k-grams, each hashed
//! to 32 bits.
//!
//! A text shorter than the shingle width still gets one shingle (all of it),
//! so a three-word tweet is comparable. That shingle spans fewer tokens than
//! a full window, so it never equals a window of a longer text: a two-word
//! text is not "contained" in every text that happens to use those words.
//!
//! Shingles are kept as 32-bit fingerprints: within the few dozen shingles of
//! two short texts a false collision has odds below one in ten million, and
//! the index stores half the bytes.
//!
//! A set holds at most [`MAX_SHINGLES`] fingerprints: the smallest ones (a
//! bottom-k sample). What one message may hold in the index is then bounded
//! whatever its length (a 0.77 MB text had 100,000 shingles, 430 KB
//! indexed). The sample is deterministic, a function of the set alone, so
//! two copies of a long text keep the same shingles and still match at
//! similarity 1; for two different long texts, the similarity of their
//! samples estimates that of their full sets (the smallest fingerprints
//! are a uniform random sample of the distinct shingles, as the hash is).
//! Tweets and feed items are far below the cap and are not affected.

use crate::config::Shingling;

/// Most shingles a set keeps: the smallest fingerprints (see the module
/// documentation). 512 fingerprints are 2 KiB; a 280-character tweet has
/// under 300 shingles even as character 3-grams.
pub const MAX_SHINGLES: usize = 512;

/// Seed of the shingle fingerprint. Fixed: fingerprints must be the same on
/// every run and machine.
const SHINGLE_SEED: u64 = 0x7368_696e_676c_6531;

/// Finalises a 64-bit hash (the murmur3 / splitmix finaliser): every input
/// bit moves every output bit.
pub fn mix64(mut x: u64) -> u64 {
    x ^= x >> 30;
    x = x.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x ^= x >> 27;
    x = x.wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// Hash of a sequence of token hashes, folded to 32 bits: a word shingle.
pub fn fingerprint(tokens: &[u64]) -> u32 {
    let mut h = SHINGLE_SEED ^ (tokens.len() as u64);
    for &t in tokens {
        h = mix64(h ^ t);
    }
    (h >> 32) as u32
}

/// Writes the sorted, deduplicated shingle set of a text into `out`: at
/// most [`MAX_SHINGLES`], the smallest.
///
/// `tokens` are the token hashes; `joined` the tokens' text separated by
/// single spaces (used by character shingles only). `char_starts` is a
/// reusable buffer.
pub fn shingle_into(
    shingling: Shingling,
    tokens: &[u64],
    joined: &str,
    char_starts: &mut Vec<usize>,
    out: &mut Vec<u32>,
) {
    out.clear();
    match shingling {
        Shingling::Words(width) => {
            if tokens.len() <= width {
                if !tokens.is_empty() {
                    out.push(fingerprint(tokens));
                }
            } else {
                out.extend(tokens.windows(width).map(fingerprint));
            }
        }
        Shingling::Chars(width) => {
            char_starts.clear();
            char_starts.extend(joined.char_indices().map(|(i, _)| i));
            char_starts.push(joined.len());
            let chars = char_starts.len() - 1;
            if chars <= width {
                // Even an empty text has one shingle, so that identical
                // texts always match.
                out.push(char_fingerprint(joined));
            } else {
                for i in 0..=chars - width {
                    out.push(char_fingerprint(
                        &joined[char_starts[i]..char_starts[i + width]],
                    ));
                }
            }
        }
    }
    out.sort_unstable();
    out.dedup();
    out.truncate(MAX_SHINGLES);
}

/// The parts of two shingle sets that can be compared with each other.
///
/// A set cut to [`MAX_SHINGLES`] still holds every fingerprint of its text
/// up to its largest one, and none above. Cut at the smaller of the two
/// sets' bounds, both are the complete shingles of their texts below a
/// common bound: the same random sample of both, so that the similarity of
/// the parts estimates that of the whole sets without bias, Jaccard and
/// containment alike. (Comparing two bottom-k samples as they are would
/// not: a text and its first half keep different smallest shingles, and
/// would look only half contained.) Sets below the cap are returned whole.
pub fn comparable<'a>(a: &'a [u32], b: &'a [u32]) -> (&'a [u32], &'a [u32]) {
    let bound = |set: &[u32]| {
        if set.len() >= MAX_SHINGLES {
            set.last().copied()
        } else {
            None
        }
    };
    let bound = match (bound(a), bound(b)) {
        (None, None) => return (a, b),
        (Some(x), None) | (None, Some(x)) => x,
        (Some(x), Some(y)) => x.min(y),
    };
    let cut = |set: &'a [u32]| &set[..set.partition_point(|&f| f <= bound)];
    (cut(a), cut(b))
}

/// Fingerprint of a character shingle.
pub fn char_fingerprint(gram: &str) -> u32 {
    (xxhash_rust::xxh3::xxh3_64_with_seed(gram.as_bytes(), SHINGLE_SEED) >> 32) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(tokens: &[u64], width: usize) -> Vec<u32> {
        let mut out = Vec::new();
        shingle_into(
            Shingling::Words(width),
            tokens,
            "",
            &mut Vec::new(),
            &mut out,
        );
        out
    }

    fn chars(text: &str, width: usize) -> Vec<u32> {
        let mut out = Vec::new();
        shingle_into(
            Shingling::Chars(width),
            &[],
            text,
            &mut Vec::new(),
            &mut out,
        );
        out
    }

    #[test]
    fn word_windows_are_counted_once() {
        assert_eq!(words(&[1, 2, 3, 4], 2).len(), 3);
        assert_eq!(words(&[1, 2, 1, 2], 2).len(), 2, "(1,2) twice, (2,1) once");
        assert!(words(&[], 2).is_empty());
    }

    #[test]
    fn short_texts_still_get_a_shingle_unlike_any_window() {
        let short = words(&[7, 8], 3);
        assert_eq!(short.len(), 1);
        let long = words(&[7, 8, 9, 10], 3);
        assert!(!long.contains(&short[0]));
    }

    #[test]
    fn char_grams_respect_char_boundaries() {
        assert_eq!(chars("héllo", 3).len(), 3);
        assert_eq!(chars("日本", 3).len(), 1);
        assert_eq!(chars("", 3).len(), 1);
        assert_eq!(chars("abcab", 2), chars("abcab", 2));
    }

    #[test]
    fn a_long_text_keeps_its_smallest_shingles_only() {
        let tokens: Vec<u64> = (0..20_000).map(|i| mix64(i % 7_919)).collect();
        let all = {
            let mut all: Vec<u32> = tokens.windows(2).map(fingerprint).collect();
            all.sort_unstable();
            all.dedup();
            all
        };
        assert!(all.len() > MAX_SHINGLES);
        let capped = words(&tokens, 2);
        assert_eq!(capped, all[..MAX_SHINGLES]);
        // A copy gives the same sample.
        assert_eq!(words(&tokens.clone(), 2), capped);
        let long: String = (0..3_000).map(|i| format!("w{} ", i % 977)).collect();
        assert_eq!(chars(&long, 4).len(), MAX_SHINGLES);
        // Short texts are untouched.
        assert_eq!(words(&[1, 2, 3, 4], 2).len(), 3);
    }

    #[test]
    fn capped_sets_are_compared_below_a_common_bound() {
        let tokens: Vec<u64> = (0..40_000).map(mix64).collect();
        let whole = words(&tokens, 2);
        let first_half = words(&tokens[..20_000], 2);
        assert_eq!(
            (whole.len(), first_half.len()),
            (MAX_SHINGLES, MAX_SHINGLES)
        );
        // The half's sample, cut where the whole's ends, lies inside it.
        let (half, all) = comparable(&first_half, &whole);
        assert!(half.len() > MAX_SHINGLES / 4 && half.len() < all.len());
        assert!(half.iter().all(|f| all.binary_search(f).is_ok()));
        // Uncapped sets are compared whole.
        let short = words(&tokens[..10], 2);
        assert_eq!(comparable(&short, &short), (&short[..], &short[..]));
        // An uncapped set against a capped one is cut at the capped one's
        // bound.
        let (s, w) = comparable(&short, &whole);
        assert_eq!(w, &whole[..]);
        assert!(s.iter().all(|&f| f <= *whole.last().unwrap()));
    }

    #[test]
    fn fingerprints_are_fixed() {
        // Pinned: a change here changes every verdict and every state file.
        assert_eq!(fingerprint(&[1, 2]), fingerprint(&[1, 2]));
        assert_ne!(fingerprint(&[1, 2]), fingerprint(&[2, 1]));
        assert_eq!(mix64(0), 0);
        assert_eq!(mix64(1), 0x5692_161d_100b_05e5);
    }
}

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

use crate::config::Shingling;

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

/// Writes the sorted, deduplicated shingle set of a text into `out`.
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
    fn fingerprints_are_fixed() {
        // Pinned: a change here changes every verdict and every state file.
        assert_eq!(fingerprint(&[1, 2]), fingerprint(&[1, 2]));
        assert_ne!(fingerprint(&[1, 2]), fingerprint(&[2, 1]));
        assert_eq!(mix64(0), 0);
        assert_eq!(mix64(1), 0x5692_161d_100b_05e5);
    }
}

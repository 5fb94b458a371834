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
//!
//! # Spot signatures (`spots:N`)
//!
//! SpotSigs (Theobald, Siddharth and Paepcke, SIGIR 2008) anchor shingles on
//! stop words: a signature is a stop word (the *antecedent*) followed by the
//! next `N` words that are not stop words, skipping stop words in between
//! ("the cat sat on the warm mat" gives, for `N` = 2, `the·cat·sat`,
//! `on·warm·mat` and `the·warm·mat`). Running prose is dense in stop words, and boilerplate (menus,
//! link lists, hashtag and byline blocks) is nearly free of them, so the
//! signatures fall on the text that was written, and a copy that changes the
//! boilerplate around it keeps them. A chain cut short by the end of the
//! text is left out: a truncated copy then keeps only signatures its
//! original has.
//!
//! The stop words ([`STOP_WORDS`]) are a short English list: articles,
//! forms of *be* and *have*, the commonest prepositions and conjunctions,
//! and *said* (the paper's antecedents were a handful of such words — *a*,
//! *the*, *is*, *was*, *there*, *said* — chosen for being frequent in prose
//! and rare in boilerplate). Pronouns are left out: in tweets they start
//! templates ("I liked a video", "I'm at ...") more than prose. Words are
//! matched after normalisation (lower case), by token hash.
//!
//! A text with few English stop words (another language, a list of names, a
//! short title) would get few signatures or none, and two such texts
//! sharing one signature would look identical. So when the signatures cover
//! less than a quarter of the text's tokens ([`MIN_SPOT_COVER`]) the text
//! falls back to word shingles of `N + 1` words, the span of a signature:
//! other languages are compared as by `words:N+1`, and a text with words is
//! never an empty set.
//!
//! # Sampling (`--sample mod:M`)
//!
//! Broder's mod-m sample, as the PHP Shingler of the seed article used: of
//! a long document keep only the shingles whose fingerprint, less its lowest
//! bit (which `words:1-N` uses to mark widths), is 0 modulo `M`, about one
//! in `M`. Two texts' samples are the same random selection of
//! their shared shingles, so similarities estimate those of the whole sets.
//! A text with fewer than [`MIN_SAMPLED`] such shingles keeps all of its
//! own: a tweet has none to spare. Sampling comes before the cap of
//! [`MAX_SHINGLES`], and both are functions of the set alone, so the result
//! is deterministic; a set at the cap holds every sampled fingerprint of its
//! text up to its largest, which is what [`comparable`] relies on.
//!
//! The two kinds of set meet when a short text (kept whole) is compared
//! with a long one (sampled): only about one in `M` of the short text's
//! shingles can be found in the long one's sample, so a short excerpt of a
//! long document is not found as contained in it. Sampling is for streams
//! of long documents, where that is the rare case.

mod sort;

use std::sync::OnceLock;

use super::tokenise::{is_number, token_hash};
use crate::engine::config::{Sampling, Shingling};

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

/// The stop words of spot signatures (see the module documentation), in
/// lower case as the normaliser leaves them.
pub const STOP_WORDS: [&str; 36] = [
    "a", "an", "the", "is", "are", "was", "were", "be", "been", "being", "has", "have", "had",
    "there", "that", "this", "these", "those", "it", "its", "of", "to", "in", "on", "at", "for",
    "with", "by", "from", "as", "and", "or", "but", "not", "will", "said",
];

/// Below this share of a text's tokens covered by its spot signatures
/// (anchors and chains), the text falls back to word shingles: one in four.
pub const MIN_SPOT_COVER: (usize, usize) = (1, 4);

/// Fewest shingles a `mod:M` sample keeps: a text with fewer shingles that
/// are 0 modulo `M` keeps all of its shingles. 32 shingles estimate a
/// similarity of 0.8 within about ±0.07; fewer would make verdicts on the
/// sample noisy.
pub const MIN_SAMPLED: usize = 32;

/// Folded into every spot signature's hash, so that a signature never
/// equals the word shingle of the same words.
const SPOT_TAG: u64 = 0x7370_6f74_7369_6773;

/// The token hashes of [`STOP_WORDS`], sorted.
fn stop_hashes() -> &'static [u64] {
    static HASHES: OnceLock<Vec<u64>> = OnceLock::new();
    HASHES.get_or_init(|| {
        let mut hashes: Vec<u64> = STOP_WORDS.iter().map(|w| token_hash(w)).collect();
        hashes.sort_unstable();
        hashes
    })
}

/// The `words:1-N` single-word shingles of [`STOP_WORDS`], sorted: what
/// is left of a set without them are its content words (see
/// `verdict::words_missing`).
pub fn stop_word_shingles() -> &'static [u32] {
    static SHINGLES: OnceLock<Vec<u32>> = OnceLock::new();
    SHINGLES.get_or_init(|| {
        let mut shingles: Vec<u32> = STOP_WORDS
            .iter()
            .map(|w| tag_slot(tag_width(fingerprint(&[token_hash(w)]), false), false))
            .collect();
        shingles.sort_unstable();
        shingles
    })
}

/// Whether a token hash is that of a stop word.
pub fn is_stop_word(token: u64) -> bool {
    stop_hashes().binary_search(&token).is_ok()
}

/// The spot chains of a token sequence, `width + 1` token positions each
/// (the stop word, then the next `width` tokens that are not stop words),
/// written one after another into `out`. Returns `false`, with `out`
/// cleared, when the chains cover less than [`MIN_SPOT_COVER`] of the
/// tokens: the text is to be shingled by words instead.
pub fn spot_chains(tokens: &[u64], width: usize, out: &mut Vec<usize>) -> bool {
    out.clear();
    // Tokens in some chain. Chains are runs of consecutive non-stop tokens
    // after their anchors, in the anchors' order, so a chain's token at or
    // before the last one counted was counted already.
    let mut covered = 0;
    let mut last_counted = None;
    let mut chain_start = 0;
    for (anchor, &token) in tokens.iter().enumerate() {
        if !is_stop_word(token) {
            continue;
        }
        out.push(anchor);
        let mut next = anchor + 1;
        while out.len() - chain_start <= width && next < tokens.len() {
            if !is_stop_word(tokens[next]) {
                out.push(next);
            }
            next += 1;
        }
        if out.len() - chain_start <= width {
            // Cut short by the end of the text, as every later chain is.
            out.truncate(chain_start);
            break;
        }
        covered += 1;
        for &at in &out[chain_start + 1..] {
            if last_counted.is_none_or(|last| at > last) {
                covered += 1;
                last_counted = Some(at);
            }
        }
        chain_start = out.len();
    }
    let (num, den) = MIN_SPOT_COVER;
    if out.is_empty() || covered * den < tokens.len() * num {
        out.clear();
        return false;
    }
    true
}

/// Hash of a spot chain's tokens (token hashes, stop word first), folded to
/// 32 bits.
pub fn spot_fingerprint(chain: impl IntoIterator<Item = u64>) -> u32 {
    let mut h = SHINGLE_SEED ^ SPOT_TAG;
    for t in chain {
        h = mix64(h ^ t);
    }
    (h >> 32) as u32
}

/// Keeps the shingles of a sorted set that `sampling` selects (see the
/// module documentation): all of them, or those 0 modulo `M` when there are
/// at least [`MIN_SAMPLED`].
pub fn sample(sampling: Sampling, set: &mut Vec<u32>) {
    sample_from(sampling, set, 0);
}

/// [`sample`] of the set that starts at `from` in `set` (what comes
/// before it is left alone).
fn sample_from(sampling: Sampling, set: &mut Vec<u32>, from: usize) {
    if let Sampling::Mod(modulus) = sampling {
        // The lowest bit may say a shingle's width (tag_width): sample on
        // the others, so that every width is sampled alike.
        let keep = |f: u32| (f >> 1).is_multiple_of(modulus);
        let kept = set[from..].iter().filter(|&&f| keep(f)).count();
        if kept >= MIN_SAMPLED {
            let mut end = from;
            for at in from..set.len() {
                let f = set[at];
                if keep(f) {
                    set[end] = f;
                    end += 1;
                }
            }
            set.truncate(end);
        }
    }
}

/// Marks a `words:1-N` fingerprint by its width in its lowest bit: set for
/// the widest runs of the text (N words, or all of a shorter text), clear
/// for the narrower ones, so that a word and a run of words never share a
/// fingerprint, and the set alone says which shingle is which.
pub fn tag_width(fingerprint: u32, widest: bool) -> u32 {
    (fingerprint & !1) | u32::from(widest)
}

/// The low bits that mark a number's word in a `words:1-N` set (see
/// [`tag_slot`]).
pub const SLOT_MASK: u32 = 0xff;

/// The mark of a number's word in a `words:1-N` set: its low eight bits
/// (the lowest, clear, says a narrower shingle, see [`tag_width`]).
pub const SLOT_MARK: u32 = 0xae;

/// Marks a `words:1-N` fingerprint as a number's word (see
/// `tokenise::is_number`), so that the set alone says which of its words
/// are numbers (the slots of a template, see `verdict::slots_differ`) and
/// nothing else in the index needs to. Other shingles are left as they
/// are, so the sets (and candidates) of texts without numbers do not
/// change; one word in 256 looks like a number by chance, and a pair is
/// told apart by numbers only when each has one the other lacks.
pub fn tag_slot(fingerprint: u32, number: bool) -> u32 {
    if number {
        (fingerprint & !SLOT_MASK) | SLOT_MARK
    } else {
        fingerprint
    }
}

/// Whether a shingle of a `words:1-N` set is (or looks like) a number's
/// word (see [`tag_slot`]).
pub fn is_slot(fingerprint: u32) -> bool {
    fingerprint & SLOT_MASK == SLOT_MARK
}

/// How [`word_shingles`] marks the fingerprints it writes (see
/// [`tag_width`] and [`tag_slot`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Tag {
    /// Left as they are (`words:N`, `spots:N`).
    None,
    /// Marked by width: the widest runs of the text or narrower ones.
    Width(bool),
    /// Single words, narrower than the widest runs, numbers marked.
    Slot,
}

/// Writes the word w-grams of `tokens` into `out` (a text shorter than `w`
/// gives one shingle, all of it), each marked as `tag` says (in the same
/// pass: a second pass over the set to mark it cost about 400
/// instructions a message).
///
/// Compiled once per instruction set and chosen when first called: with
/// AVX2 or AVX-512 the compiler mixes four or eight windows at once, the
/// same hashes (400 instructions a message fewer on `dev-200k` with AVX2).
#[multiversion::multiversion(targets("x86_64+avx512f+avx512dq+avx512vl", "x86_64+avx2"))]
fn word_shingles(tokens: &[u64], width: usize, tag: Tag, out: &mut Vec<u32>) {
    // One loop for each kind of mark, so that each is compiled (and
    // vectorised) without a branch on the kind inside it.
    match tag {
        Tag::None => marked_word_shingles(tokens, width, out, |f, _| f),
        Tag::Width(widest) => marked_word_shingles(tokens, width, out, |f, _| tag_width(f, widest)),
        Tag::Slot => marked_word_shingles(tokens, width, out, |f, token| {
            tag_slot(tag_width(f, false), is_number(token))
        }),
    }
}

/// The body of [`word_shingles`], each fingerprint marked by `mark(f,
/// first token of its window)`. Inlined into every version of it.
#[inline(always)]
fn marked_word_shingles(
    tokens: &[u64],
    width: usize,
    out: &mut Vec<u32>,
    mark: impl Fn(u32, u64) -> u32,
) {
    if tokens.len() <= width {
        if let Some(&first) = tokens.first() {
            out.push(mark(fingerprint(tokens), first));
        }
    } else {
        // `fingerprint` unrolled for the common widths: the same hash,
        // without a loop over a window whose length the compiler cannot see.
        match width {
            1 => out.extend(
                tokens
                    .iter()
                    .map(|&t| mark((mix64(SHINGLE_SEED ^ 1 ^ t) >> 32) as u32, t)),
            ),
            2 => out.extend(tokens.windows(2).map(|pair| {
                mark(
                    (mix64(mix64(SHINGLE_SEED ^ 2 ^ pair[0]) ^ pair[1]) >> 32) as u32,
                    pair[0],
                )
            })),
            _ => out.extend(
                tokens
                    .windows(width)
                    .map(|window| mark(fingerprint(window), window[0])),
            ),
        }
    }
}

/// Writes the sorted, deduplicated shingle set of a text into `out`:
/// sampled as `sampling` says, and at most [`MAX_SHINGLES`], the smallest.
///
/// `tokens` are the token hashes; `joined` the tokens' text separated by
/// single spaces (used by character shingles only). `char_starts` is a
/// reusable buffer.
pub fn shingle_into(
    shingling: Shingling,
    sampling: Sampling,
    tokens: &[u64],
    joined: &str,
    char_starts: &mut Vec<usize>,
    out: &mut Vec<u32>,
) {
    out.clear();
    append_shingles(shingling, sampling, tokens, joined, char_starts, out);
}

/// [`shingle_into`], the set appended to `out` after what it holds
/// (which is left as it is): a batch's sets are written where they are
/// kept, not built apart and copied there (about a hundred instructions a
/// message).
pub fn append_shingles(
    shingling: Shingling,
    sampling: Sampling,
    tokens: &[u64],
    joined: &str,
    char_starts: &mut Vec<usize>,
    out: &mut Vec<u32>,
) {
    let from = out.len();
    match shingling {
        Shingling::Words(width) => word_shingles(tokens, width, Tag::None, out),
        Shingling::WordsUpTo(longest) => {
            let widest = longest.min(tokens.len().max(1));
            for width in 1..=widest {
                // Single words below the widest runs are one a token, in
                // order: numbers are marked.
                let tag = if width == 1 && widest > 1 {
                    Tag::Slot
                } else {
                    Tag::Width(width == widest)
                };
                word_shingles(tokens, width, tag, out);
            }
        }
        Shingling::Spots(width) => {
            if spot_chains(tokens, width, char_starts) {
                out.extend(
                    char_starts
                        .chunks_exact(width + 1)
                        .map(|chain| spot_fingerprint(chain.iter().map(|&at| tokens[at]))),
                );
            } else {
                word_shingles(tokens, width + 1, Tag::None, out);
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
    sort::sort_dedup_from(out, from);
    sample_from(sampling, out, from);
    out.truncate(from + MAX_SHINGLES);
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

    #[test]
    fn words_up_to_two_are_words_and_pairs_marked_by_width() {
        let tokens = [11u64, 22, 33];
        let mut set = Vec::new();
        shingle_into(
            Shingling::WordsUpTo(2),
            Sampling::All,
            &tokens,
            "",
            &mut Vec::new(),
            &mut set,
        );
        let mut want: Vec<u32> = tokens
            .windows(1)
            .map(|w| tag_slot(tag_width(fingerprint(w), false), false))
            .chain(tokens.windows(2).map(|w| tag_width(fingerprint(w), true)))
            .collect();
        want.sort_unstable();
        assert_eq!(set, want);
        // A one-word text: its word is its widest run.
        shingle_into(
            Shingling::WordsUpTo(2),
            Sampling::All,
            &tokens[..1],
            "",
            &mut Vec::new(),
            &mut set,
        );
        assert_eq!(set, [tag_width(fingerprint(&tokens[..1]), true)]);
    }

    fn words(tokens: &[u64], width: usize) -> Vec<u32> {
        let mut out = Vec::new();
        shingle_into(
            Shingling::Words(width),
            Sampling::All,
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
            Sampling::All,
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

    fn hashes(text: &str) -> Vec<u64> {
        text.split(' ').map(token_hash).collect()
    }

    fn spots(text: &str, width: usize, sampling: Sampling) -> Vec<u32> {
        let mut out = Vec::new();
        shingle_into(
            Shingling::Spots(width),
            sampling,
            &hashes(text),
            "",
            &mut Vec::new(),
            &mut out,
        );
        out
    }

    /// The spot chains of a text as words.
    fn chains(text: &str, width: usize) -> Option<Vec<String>> {
        let words: Vec<&str> = text.split(' ').collect();
        let mut out = Vec::new();
        spot_chains(&hashes(text), width, &mut out).then(|| {
            out.chunks_exact(width + 1)
                .map(|chain| {
                    chain
                        .iter()
                        .map(|&at| words[at])
                        .collect::<Vec<_>>()
                        .join(" ")
                })
                .collect()
        })
    }

    #[test]
    fn spot_chains_skip_stop_words_and_drop_chains_cut_by_the_end() {
        assert_eq!(
            chains("the cat sat on the warm mat", 2).unwrap(),
            ["the cat sat", "on warm mat", "the warm mat"]
        );
        assert_eq!(
            chains("police said the fire at the old mill was out by noon", 1).unwrap(),
            [
                "said fire",
                "the fire",
                "at old",
                "the old",
                "was out",
                "by noon"
            ]
        );
        // "by noon" needs two words after "by": dropped, as a truncated
        // copy's last chains would be.
        assert_eq!(
            chains("police said the fire at the old mill was out by noon", 2).unwrap(),
            [
                "said fire old",
                "the fire old",
                "at old mill",
                "the old mill",
                "was out noon"
            ]
        );
        // Every signature of a truncated copy is one of the original's.
        let original = spots("the cat sat on the warm mat by the door", 2, Sampling::All);
        let truncated = spots("the cat sat on the warm mat by", 2, Sampling::All);
        assert!(truncated.iter().all(|f| original.contains(f)));
        assert_eq!(truncated.len(), 3);
    }

    #[test]
    fn boilerplate_without_stop_words_gives_no_signatures() {
        let article = "the council voted on the new budget for the city schools";
        let framed = format!("home news sports weather {article} share tweet email print");
        assert_eq!(
            spots(article, 2, Sampling::All),
            spots(&framed, 2, Sampling::All)
        );
    }

    #[test]
    fn texts_with_too_few_stop_words_fall_back_to_word_shingles() {
        // German: "in" is an English stop word too, and gives one chain,
        // which covers 3 of 14 tokens.
        let german = "der zug nach hamburg fährt heute in zwei stunden ab sagt die deutsche bahn";
        assert_eq!(chains(german, 2), None);
        assert_eq!(
            spots(german, 2, Sampling::All),
            words(&hashes(german), 3),
            "words of the span of a signature"
        );
        // No stop word at all, and a stop word with nothing after it.
        assert_eq!(chains("breaking news tonight", 1), None);
        assert_eq!(spots("breaking news tonight", 1, Sampling::All).len(), 2);
        assert_eq!(spots("hello the", 2, Sampling::All).len(), 1);
        assert_eq!(spots("the", 2, Sampling::All).len(), 1);
        // Spot signatures never equal the word shingle of the same words.
        let spot = spots("the cat sat", 2, Sampling::All);
        assert_eq!(spot.len(), 1);
        assert_ne!(spot, words(&hashes("the cat sat"), 3));
    }

    #[test]
    fn stop_words_are_matched_by_token_hash_in_lower_case() {
        for word in STOP_WORDS {
            assert!(is_stop_word(token_hash(word)), "{word}");
        }
        assert!(
            !is_stop_word(token_hash("The")),
            "the normaliser lowers case"
        );
        assert!(!is_stop_word(token_hash("cat")));
    }

    #[test]
    fn mod_sampling_keeps_one_in_m_of_long_texts_and_all_of_short_ones() {
        let sampled = |tokens: &[u64], modulus: u32| {
            let mut out = Vec::new();
            shingle_into(
                Shingling::Words(2),
                Sampling::Mod(modulus),
                tokens,
                "",
                &mut Vec::new(),
                &mut out,
            );
            out
        };
        // A tweet: fewer than MIN_SAMPLED shingles 0 modulo 4, all kept.
        let tweet: Vec<u64> = (0..30).map(mix64).collect();
        assert_eq!(sampled(&tweet, 4), words(&tweet, 2));
        // A long text: only multiples of M, about one in M.
        let long: Vec<u64> = (0..1_000).map(mix64).collect();
        let mut all: Vec<u32> = long.windows(2).map(fingerprint).collect();
        all.sort_unstable();
        let kept = sampled(&long, 4);
        assert!(kept.iter().all(|f| (f >> 1) % 4 == 0));
        assert_eq!(
            kept,
            all.iter()
                .copied()
                .filter(|f| (f >> 1) % 4 == 0)
                .collect::<Vec<_>>()
        );
        assert!((200..300).contains(&kept.len()), "{}", kept.len());
        // The limit: exactly MIN_SAMPLED multiples sample, one fewer keeps all.
        // (Sampled on the fingerprint less its lowest bit: 8i is kept,
        // 8i + 2 is not.)
        let mut set: Vec<u32> = (0..MIN_SAMPLED as u32).map(|i| i * 8).collect();
        set.extend((0..100).map(|i| i * 8 + 2));
        set.sort_unstable();
        let mut at_limit = set.clone();
        sample(Sampling::Mod(4), &mut at_limit);
        assert_eq!(at_limit.len(), MIN_SAMPLED);
        let mut below = set[1..].to_vec();
        sample(Sampling::Mod(4), &mut below);
        assert_eq!(below, set[1..]);
    }

    #[test]
    fn sampling_comes_before_the_cap() {
        let tokens: Vec<u64> = (0..20_000).map(mix64).collect();
        let mut out = Vec::new();
        shingle_into(
            Shingling::Words(2),
            Sampling::Mod(8),
            &tokens,
            "",
            &mut Vec::new(),
            &mut out,
        );
        // Some 2,500 multiples of 8, capped to the smallest 512 of them.
        assert_eq!(out.len(), MAX_SHINGLES);
        assert!(out.iter().all(|f| (f >> 1) % 8 == 0));
        let mut all: Vec<u32> = tokens.windows(2).map(fingerprint).collect();
        all.sort_unstable();
        all.dedup();
        let expected: Vec<u32> = all
            .into_iter()
            .filter(|f| (f >> 1) % 8 == 0)
            .take(MAX_SHINGLES)
            .collect();
        assert_eq!(out, expected);
    }

    proptest::proptest! {
        /// A set appended after other values is the set [`shingle_into`]
        /// makes, and the values before it stay: every shingling, sampled
        /// or not, short and long texts (past [`MAX_SHINGLES`] and the
        /// sort network's length).
        #[test]
        fn an_appended_set_is_the_set_built_apart(
            tokens in proptest::collection::vec(0u64..60, 0..700),
            before in proptest::collection::vec(proptest::prelude::any::<u32>(), 0..20),
            kind in 0usize..4,
            width in 1usize..4,
            sampled in proptest::prelude::any::<bool>(),
        ) {
            let tokens: Vec<u64> = tokens.into_iter().map(mix64).collect();
            let shingling = match kind {
                0 => Shingling::Words(width),
                1 => Shingling::WordsUpTo(width),
                2 => Shingling::Spots(width),
                _ => Shingling::Chars(width),
            };
            let sampling = if sampled { Sampling::Mod(3) } else { Sampling::All };
            let joined = "ab cd éf gh";
            let mut apart = vec![7];
            shingle_into(shingling, sampling, &tokens, joined, &mut Vec::new(), &mut apart);
            let mut appended = before.clone();
            append_shingles(shingling, sampling, &tokens, joined, &mut Vec::new(), &mut appended);
            proptest::prop_assert_eq!(&appended[..before.len()], &before[..]);
            proptest::prop_assert_eq!(&appended[before.len()..], &apart[..]);
        }

        /// The unrolled widths hash as [`fingerprint`] does, window by
        /// window.
        #[test]
        fn word_shingles_are_the_fingerprints_of_the_windows(
            tokens in proptest::collection::vec(proptest::prelude::any::<u64>(), 0..40),
            width in 1usize..5,
        ) {
            let mut out = Vec::new();
            word_shingles(&tokens, width, Tag::None, &mut out);
            let expected: Vec<u32> = if tokens.len() <= width {
                (!tokens.is_empty()).then(|| fingerprint(&tokens)).into_iter().collect()
            } else {
                tokens.windows(width).map(fingerprint).collect()
            };
            proptest::prop_assert_eq!(out, expected);
        }
    }

    /// `words:1-N` as it was built before the marks were put on in
    /// `word_shingles`'s own pass: each width unmarked, then marked in a
    /// second pass over it (the oracle of the one-pass marking).
    fn words_up_to_in_two_passes(tokens: &[u64], longest: usize) -> Vec<u32> {
        let mut out = Vec::new();
        let widest = longest.min(tokens.len().max(1));
        for width in 1..=widest {
            let from = out.len();
            word_shingles(tokens, width, Tag::None, &mut out);
            if width == 1 && widest > 1 {
                for (f, &token) in out[from..].iter_mut().zip(tokens) {
                    *f = tag_slot(tag_width(*f, false), is_number(token));
                }
            } else {
                for f in &mut out[from..] {
                    *f = tag_width(*f, width == widest);
                }
            }
        }
        out.sort_unstable();
        out.dedup();
        out.truncate(MAX_SHINGLES);
        out
    }

    proptest::proptest! {
        /// Marking widths and numbers in the hashing pass gives the set
        /// that marking them afterwards gave, numbers among the words or
        /// not, for texts shorter and longer than the widest runs.
        #[test]
        fn words_up_to_marks_as_the_two_passes_did(
            tokens in proptest::collection::vec(
                proptest::prop_oneof![
                    proptest::prelude::any::<u64>(),
                    proptest::strategy::Strategy::prop_map(0u64..1 << 32, |low| {
                        crate::engine::tokenise::NUMBER_TAG << 32 | low
                    }),
                ],
                0..40,
            ),
            longest in 1usize..5,
        ) {
            let mut set = Vec::new();
            shingle_into(
                Shingling::WordsUpTo(longest),
                Sampling::All,
                &tokens,
                "",
                &mut Vec::new(),
                &mut set,
            );
            proptest::prop_assert_eq!(set, words_up_to_in_two_passes(&tokens, longest));
        }
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

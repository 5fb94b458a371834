//! Stage 2, tokenise: cut a normalised text into word tokens, each hashed to
//! 64 bits with a fixed seed.
//!
//! A token is a run of Unicode word characters (`\w`), so `#` and `@` fall
//! away and `#RustConf` and `RustConf` are one word. Chinese and Japanese are
//! written without spaces: a run of Han, Hiragana or Katakana becomes its
//! character bigrams (a lone character stays a token), the usual way to
//! compare such text without a dictionary.
//!
//! A block of three or more hashtags in a row (`#BigData #AI #ML #Python
//! ...`) is one token: bots and spammers append the same block to every
//! message, and counted word by word it would make unrelated messages look
//! alike. One or two hashtags inside a sentence stay words.
//!
//! Hashes are taken directly from slices of the text: tokenising allocates
//! nothing once its output buffers have grown.
//!
//! A token of ASCII digits only (`226`, `2910`, `2013`) is a *number*, and
//! its hash says so: its high 32 bits are [`NUMBER_TAG`] (see
//! [`is_number`]). Numbers are the slots of templates ("w/ 2910 others",
//! "12 photos", "160 injured"), and the verdict tells a changed slot from
//! an edit by them (see `verdict::slots_differ`).

use std::sync::Arc;

use regex_syntax::hir::{Class, HirKind};

use super::bitmap::{BLOCK, BlockAt};
use super::shingle::mix64;
use xxhash_rust::xxh3::xxh3_64_with_seed;

/// Seed of the token hash. Fixed: hashes must be the same on every run.
const TOKEN_SEED: u64 = 0x746f_6b65_6e5f_7631;

/// The token pattern, as a regex: a CJK run, or a run of word characters
/// without CJK. The tokeniser finds exactly its matches without running it
/// (see `Tokeniser::for_each_token`); the tests check one against the
/// other.
pub const TOKEN_PATTERN: &str =
    r"[\p{Han}\p{Hiragana}\p{Katakana}]+|[\w--[\p{Han}\p{Hiragana}\p{Katakana}]]+";

/// The compiled tokeniser. Immutable; share freely.
#[derive(Clone, Debug)]
pub struct Tokeniser {
    /// The pattern's two classes of characters, as sorted ranges taken from
    /// the regex crate's own parser (so from the tables a regex would use).
    cjk: Arc<[(char, char)]>,
    word: Arc<[(char, char)]>,
    /// The class of every character below U+40000, taken from the ranges
    /// above (see [`ClassTable`]).
    table: Arc<ClassTable>,
}

/// The class (`WORD`, `CJK` or `OTHER`) of every character below
/// [`TABLED`], in blocks of 256: `blocks[index[c >> 8]][c & 0xff]`. A
/// block all of one class is stored once (most blocks are), so the table
/// is some 35 kilobytes (137 blocks).
///
/// Why: a binary search of the word ranges (some 700) cost about 500
/// instructions a run holding non-ASCII text, two lookups here a few.
/// Emoji (U+1F300 and up) are the most common characters of such runs,
/// hence the table reaches past the Basic Multilingual Plane, to the end of
/// the CJK planes.
#[derive(Debug)]
struct ClassTable {
    index: Box<[u16; TABLED >> 8]>,
    blocks: Box<[[u8; 256]]>,
}

/// The characters [`ClassTable`] holds: those below U+40000 (planes 0 to 3).
const TABLED: usize = 0x4_0000;

impl ClassTable {
    /// Builds the table from the classes' ranges, as [`class_by_ranges`]
    /// reads them: ASCII by its own rule, then `word`, then `cjk`.
    fn new(word: &[(char, char)], cjk: &[(char, char)]) -> ClassTable {
        let mut flat = vec![OTHER; TABLED];
        // Lowest precedence first: a later fill overwrites an earlier one.
        for (ranges, class) in [(cjk, CJK), (word, WORD)] {
            for &(start, end) in ranges {
                let start = start as usize;
                let end = (end as usize).min(TABLED - 1);
                if start <= end {
                    flat[start..=end].fill(class);
                }
            }
        }
        for (code, entry) in flat[..128].iter_mut().enumerate() {
            let c = code as u8;
            *entry = if c.is_ascii_alphanumeric() || c == b'_' {
                WORD
            } else {
                OTHER
            };
        }
        let mut index = Box::new([0u16; TABLED >> 8]);
        let mut blocks: Vec<[u8; 256]> = Vec::new();
        // Where the block all of one class is, by class (the classes are
        // below 32).
        let mut uniform_at = [None; 32];
        for (slot, chunk) in index.iter_mut().zip(flat.as_chunks::<256>().0) {
            // Most blocks are one class throughout: those are stored once
            // for each class. The mixed ones are kept as they are: hardly
            // any two are alike, and looking for copies made the table's
            // build cost more (it is built a tokeniser).
            let class = chunk[0];
            let at = if *chunk == [class; 256] {
                *uniform_at[usize::from(class)].get_or_insert_with(|| {
                    blocks.push(*chunk);
                    blocks.len() - 1
                })
            } else {
                blocks.push(*chunk);
                blocks.len() - 1
            };
            // At most TABLED >> 8 blocks: the number fits.
            *slot = at as u16;
        }
        ClassTable {
            index,
            blocks: blocks.into_boxed_slice(),
        }
    }

    /// The class of `c`, if the table holds it.
    #[inline(always)]
    fn get(&self, c: char) -> Option<u8> {
        let code = c as usize;
        let block = *self.index.get(code >> 8)? as usize;
        self.blocks.get(block).map(|block| block[code & 0xff])
    }
}

impl Default for Tokeniser {
    fn default() -> Self {
        Tokeniser::new()
    }
}

/// The high 32 bits of a number token's hash (see the module
/// documentation). Any other token has them too with odds of one in four
/// billion.
pub const NUMBER_TAG: u64 = 0x6e75_6d62;

/// Hashes one token's text.
#[inline]
pub fn token_hash(token: &str) -> u64 {
    hash_bytes(token.as_bytes())
}

/// Hashes one token's bytes: xxh3-64 with [`TOKEN_SEED`], the crate's
/// value on every input (a property test checks every length to 40).
///
/// Most tokens are 1 to 16 bytes. For those the crate tests the length
/// against 16, 8, 4 and 0 in turn; here one `match` on it picks the case
/// (a jump table), and each case is the crate's arithmetic with the seed's
/// and secret's part folded into one constant. Longer and empty inputs go
/// to the crate.
#[inline(always)]
fn hash_bytes(bytes: &[u8]) -> u64 {
    match *bytes {
        [first, ..] if bytes.len() <= 3 => {
            let len = bytes.len();
            let combo = u32::from(first) << 16
                | u32::from(bytes[len >> 1]) << 24
                | u32::from(bytes[len - 1])
                | (len as u32) << 8;
            xxh64_avalanche(u64::from(combo) ^ short_token::FLIP_1_TO_3)
        }
        [a, b, c, d, ..] if bytes.len() <= 8 => {
            let len = bytes.len();
            let high = u32::from_le_bytes([a, b, c, d]);
            let low = match bytes[len - 4..] {
                [a, b, c, d] => u32::from_le_bytes([a, b, c, d]),
                _ => 0,
            };
            let keyed = (u64::from(low) + (u64::from(high) << 32)) ^ short_token::FLIP_4_TO_8;
            strong_avalanche(keyed, len as u64)
        }
        [a, b, c, d, e, f, g, h, ..] if bytes.len() <= 16 => {
            let len = bytes.len();
            let lo = u64::from_le_bytes([a, b, c, d, e, f, g, h]) ^ short_token::FLIP_9_TO_16_LO;
            let hi = match bytes[len - 8..] {
                [a, b, c, d, e, f, g, h] => u64::from_le_bytes([a, b, c, d, e, f, g, h]),
                _ => 0,
            } ^ short_token::FLIP_9_TO_16_HI;
            let product = u128::from(lo) * u128::from(hi);
            let acc = (len as u64)
                .wrapping_add(lo.swap_bytes())
                .wrapping_add(hi)
                .wrapping_add(product as u64 ^ (product >> 64) as u64);
            xxh3_avalanche(acc)
        }
        _ => xxh3_64_with_seed(bytes, TOKEN_SEED),
    }
}

/// The constants of xxh3-64 for inputs of 1 to 16 bytes with
/// [`TOKEN_SEED`]: the parts of its default secret those lengths read,
/// combined with the seed as the crate combines them.
mod short_token {
    use super::TOKEN_SEED;

    /// The first 56 bytes of xxh3's default secret (`XXH3_kSecret`).
    const SECRET: [u8; 56] = [
        0xb8, 0xfe, 0x6c, 0x39, 0x23, 0xa4, 0x4b, 0xbe, 0x7c, 0x01, 0x81, 0x2c, 0xf7, 0x21, 0xad,
        0x1c, 0xde, 0xd4, 0x6d, 0xe9, 0x83, 0x90, 0x97, 0xdb, 0x72, 0x40, 0xa4, 0xa4, 0xb7, 0xb3,
        0x67, 0x1f, 0xcb, 0x79, 0xe6, 0x4e, 0xcc, 0xc0, 0xe5, 0x78, 0x82, 0x5a, 0xd0, 0x7d, 0xcc,
        0xff, 0x72, 0x21, 0xb8, 0x08, 0x46, 0x74, 0xf7, 0x43, 0x24, 0x8e,
    ];

    const fn read32(at: usize) -> u64 {
        u32::from_le_bytes([SECRET[at], SECRET[at + 1], SECRET[at + 2], SECRET[at + 3]]) as u64
    }

    const fn read64(at: usize) -> u64 {
        read32(at) | read32(at + 4) << 32
    }

    /// 1 to 3 bytes.
    pub(super) const FLIP_1_TO_3: u64 = (read32(0) ^ read32(4)).wrapping_add(TOKEN_SEED);
    /// 4 to 8 bytes (the seed with its low half's bytes swapped into its
    /// high half, as the crate does).
    pub(super) const FLIP_4_TO_8: u64 = (read64(8) ^ read64(16))
        .wrapping_sub(TOKEN_SEED ^ ((TOKEN_SEED as u32).swap_bytes() as u64) << 32);
    /// 9 to 16 bytes: the first eight bytes' and the last eight's.
    pub(super) const FLIP_9_TO_16_LO: u64 = (read64(24) ^ read64(32)).wrapping_add(TOKEN_SEED);
    pub(super) const FLIP_9_TO_16_HI: u64 = (read64(40) ^ read64(48)).wrapping_sub(TOKEN_SEED);
}

/// xxh64's final mix (xxh3 ends inputs of 1 to 3 bytes with it).
#[inline(always)]
fn xxh64_avalanche(mut value: u64) -> u64 {
    value ^= value >> 33;
    value = value.wrapping_mul(0xC2B2_AE3D_27D4_EB4F);
    value ^= value >> 29;
    value = value.wrapping_mul(0x1656_67B1_9E37_79F9);
    value ^ value >> 32
}

/// xxh3's final mix for inputs of 4 to 8 bytes.
#[inline(always)]
fn strong_avalanche(mut value: u64, len: u64) -> u64 {
    value ^= value.rotate_left(49) ^ value.rotate_left(24);
    value = value.wrapping_mul(0x9FB2_1C65_1E98_DF25);
    value ^= (value >> 35).wrapping_add(len);
    value = value.wrapping_mul(0x9FB2_1C65_1E98_DF25);
    value ^ value >> 28
}

/// xxh3's final mix for inputs of 9 to 16 bytes.
#[inline(always)]
fn xxh3_avalanche(mut value: u64) -> u64 {
    value ^= value >> 37;
    value = value.wrapping_mul(0x1656_6791_9E37_79F9);
    value ^ value >> 32
}

/// Whether the token `text[start..end]` is a number: ASCII digits only,
/// but not the `1` of a `+1` (a comment, not a slot) nor a part of a
/// number written with separators (`7.2`, `23:06`, `1,000`), which copies
/// write with or without them (`72`).
#[inline(always)]
fn is_number_at(bytes: &[u8], start: usize, end: usize) -> bool {
    let token = &bytes[start..end];
    // Most tokens begin with a letter: one comparison rules them out.
    if !token.first().is_some_and(u8::is_ascii_digit) || !token.iter().all(u8::is_ascii_digit) {
        return false;
    }
    let separator = |c: u8| matches!(c, b'.' | b':' | b',');
    let after_digits =
        start >= 2 && separator(bytes[start - 1]) && bytes[start - 2].is_ascii_digit();
    let before_digits =
        end + 1 < bytes.len() && separator(bytes[end]) && bytes[end + 1].is_ascii_digit();
    let plus_one = start >= 1 && bytes[start - 1] == b'+';
    !(plus_one || after_digits || before_digits)
}

/// A number's token hash: `hash` with [`NUMBER_TAG`] for its high bits.
#[inline]
fn tag_number(hash: u64, number: bool) -> u64 {
    if number {
        (hash & 0xffff_ffff) | NUMBER_TAG << 32
    } else {
        hash
    }
}

/// Whether a token hash is a number's (see the module documentation).
#[inline]
pub fn is_number(token: u64) -> bool {
    token >> 32 == NUMBER_TAG
}

impl Tokeniser {
    /// The tokeniser: its tables are built once a process and shared
    /// (a run builds several preparers, and the class table costs some
    /// 550,000 instructions to build).
    pub fn new() -> Tokeniser {
        static BUILT: std::sync::LazyLock<Tokeniser> = std::sync::LazyLock::new(Tokeniser::build);
        BUILT.clone()
    }

    /// Builds the tables of the token pattern's classes.
    fn build() -> Tokeniser {
        let ranges = |class: &str| -> Arc<[(char, char)]> {
            let hir = regex_syntax::parse(class).expect("built-in class parses");
            match hir.kind() {
                HirKind::Class(Class::Unicode(class)) => class
                    .ranges()
                    .iter()
                    .map(|range| (range.start(), range.end()))
                    .collect(),
                _ => unreachable!("a Unicode class parses to a Unicode class"),
            }
        };
        // The two alternatives of TOKEN_PATTERN.
        let cjk = ranges(r"[\p{Han}\p{Hiragana}\p{Katakana}]");
        let word = ranges(r"[\w--[\p{Han}\p{Hiragana}\p{Katakana}]]");
        let table = Arc::new(ClassTable::new(&word, &cjk));
        Tokeniser { cjk, word, table }
    }

    /// Which alternative of the token pattern `c` may continue: `CJK`,
    /// `WORD`, or neither (`OTHER`).
    #[inline(always)]
    fn char_class(&self, c: char) -> u8 {
        match self.table.get(c) {
            Some(class) => class,
            None => class_by_ranges(&self.word, &self.cjk, c),
        }
    }

    /// Appends the token hashes of `text` to `out`. When `joined` is given,
    /// also writes the tokens' text to it, separated by single spaces (the
    /// input of character shingles).
    pub fn tokenise(&self, text: &str, out: &mut Vec<u64>, joined: Option<&mut String>) {
        if joined.is_some() {
            self.tokenise_explained(text, out, joined, None);
            return;
        }
        // The usual case: nothing to write but hashes.
        let mut run = HashtagFold::default();
        self.for_each_token(text, |start, end, ascii| {
            run.token(text, start, end, ascii, out);
        });
        run.finish(out);
    }

    /// [`Tokeniser::tokenise`] without joined text, through `spans` (a
    /// reusable buffer). `ascii` says the caller knows `text` to be all
    /// ASCII (the normaliser says so); when it is false, the text is looked
    /// at. `hashless` says the caller knows it holds no `#`: then no token
    /// is a hashtag and no run is folded.
    ///
    /// The tokens are found first, into `spans`, and hashed in a loop of
    /// their own: handing each token to a closure that hashes it (as
    /// [`Tokeniser::tokenise`] does) made the closure too large to inline,
    /// and its call cost a third of a token's hash.
    pub fn tokenise_with(
        &self,
        text: &str,
        ascii: bool,
        hashless: bool,
        spans: &mut Vec<(usize, usize, bool)>,
        out: &mut Vec<u64>,
    ) {
        spans.clear();
        let mut run = HashtagFold::default();
        let bytes = text.as_bytes();
        if ascii || text.is_ascii() {
            if hashless {
                // No hashtag, no run to fold: each token is its hash.
                push_ascii_word_hashes(bytes, out);
                return;
            }
            // Hashtags, maybe a block of them to fold.
            push_ascii_word_hashes_folded(bytes, out);
            return;
        } else {
            self.for_each_token(text, |start, end, ascii| spans.push((start, end, ascii)));
            for &(start, end, ascii) in spans.iter() {
                run.token(text, start, end, ascii, out);
            }
        }
        run.finish(out);
    }

    /// The tokens of `text` as strings (CJK runs as their bigrams, hashtag
    /// blocks as one token), with their hashes: what
    /// [`Tokeniser::tokenise`] yields, for explaining a comparison.
    pub fn token_texts(&self, text: &str) -> Vec<(u64, String)> {
        let mut hashes = Vec::new();
        let mut texts = Vec::new();
        self.tokenise_explained(text, &mut hashes, None, Some(&mut texts));
        hashes.into_iter().zip(texts).collect()
    }

    fn tokenise_explained(
        &self,
        text: &str,
        out: &mut Vec<u64>,
        mut joined: Option<&mut String>,
        mut texts: Option<&mut Vec<String>>,
    ) {
        // A run of hashtags is emitted as words as it goes, and folded into
        // one token when it ends if it had three or more: no buffer.
        let mut run = HashtagRun::default();
        let bytes = text.as_bytes();
        self.for_each_token(text, |start, end, ascii| {
            let token = &text[start..end];
            if let Some(joined) = joined.as_deref_mut() {
                if !joined.is_empty() {
                    joined.push(' ');
                }
                joined.push_str(token);
            }
            let number = ascii && is_number_at(bytes, start, end);
            if start > 0 && bytes[start - 1] == b'#' {
                run.push(token, ascii, number, out, &mut texts);
                return;
            }
            if run.len > 0 {
                run.finish(out, &mut texts);
            }
            if ascii && texts.is_none() {
                // The hot path, kept free of calls but the hash.
                out.push(tag_number(token_hash(token), number));
            } else {
                push_token(token, ascii, number, out, &mut texts);
            }
        });
        run.finish(out, &mut texts);
    }

    /// Calls `f(start, end, ascii)` for every match of the token pattern in
    /// `text`, in order; `ascii` says the token is all ASCII.
    ///
    /// ASCII bytes other than word bytes (white space, punctuation) are in
    /// neither of the pattern's classes, so no token spans one: the text is
    /// cut at them first, 64 bytes at a time (see [`for_each_run`]). A piece
    /// that is all ASCII word bytes is a token; a piece holding other
    /// characters is cut by the classes of its characters. The result is
    /// the regex's on every input (a property test checks it) at a fraction
    /// of the cost: a regex search per short token is dominated by its
    /// fixed overhead.
    fn for_each_token(&self, text: &str, mut f: impl FnMut(usize, usize, bool)) {
        let bytes = text.as_bytes();
        if text.is_ascii() {
            // The common case, in one pass: the tokens of ASCII text are its
            // maximal runs of word bytes.
            for_each_run(bytes, false, &mut |start, end, _| f(start, end, true));
            return;
        }
        for_each_run(bytes, true, &mut |start, end, non_ascii| {
            if non_ascii {
                self.split_by_class(text, start, end, &mut f);
            } else {
                f(start, end, true);
            }
        });
    }

    /// Calls `f` for the matches of the token pattern in `text[start..end]`,
    /// a run holding a non-ASCII character (see
    /// [`Tokeniser::for_each_token`]).
    ///
    /// Out of line, behind a `dyn`: most runs are ASCII words, and with
    /// this loop inside it the closure called for every run was too large
    /// to inline.
    #[inline(never)]
    fn split_by_class(
        &self,
        text: &str,
        start: usize,
        end: usize,
        f: &mut dyn FnMut(usize, usize, bool),
    ) {
        // The pattern's matches are the maximal runs of characters of one
        // alternative's class (the two classes are disjoint): a CJK run, or
        // a run of other word characters.
        let mut run: Option<(usize, u8)> = None;
        for (at, c) in text[start..end].char_indices() {
            let class = self.char_class(c);
            match run {
                Some((_, kind)) if kind == class => continue,
                Some((from, _)) => f(start + from, start + at, false),
                None => {}
            }
            run = (class != OTHER).then_some((at, class));
        }
        if let Some((from, _)) = run {
            f(start + from, end, false);
        }
    }

    /// Every match of the token pattern, by the regex alone (the reference
    /// [`Tokeniser::for_each_token`] is tested against).
    #[cfg(test)]
    fn regex_spans(&self, text: &str) -> Vec<(usize, usize)> {
        regex::Regex::new(TOKEN_PATTERN)
            .expect("built-in pattern compiles")
            .find_iter(text)
            .map(|m| (m.start(), m.end()))
            .collect()
    }
}

/// Which alternative of the token pattern `c` may continue, by a binary
/// search of the classes' ranges: `word`'s, then `cjk`'s.
fn class_by_ranges(word: &[(char, char)], cjk: &[(char, char)], c: char) -> u8 {
    let holds = |ranges: &[(char, char)]| {
        ranges
            .binary_search_by(|&(start, end)| {
                if end < c {
                    std::cmp::Ordering::Less
                } else if start > c {
                    std::cmp::Ordering::Greater
                } else {
                    std::cmp::Ordering::Equal
                }
            })
            .is_ok()
    };
    if c.is_ascii() {
        if c.is_ascii_alphanumeric() || c == '_' {
            WORD
        } else {
            OTHER
        }
    } else if holds(word) {
        WORD
    } else if holds(cjk) {
        CJK
    } else {
        OTHER
    }
}

/// Calls `f(start, end, non_ascii)` for every maximal run of bytes of
/// `bytes` that are ASCII word bytes (`[0-9A-Za-z_]`) or, when `non_ascii`
/// is asked for, not ASCII; the flag says whether the run holds a byte that
/// is not ASCII. Without `non_ascii` the runs are the ASCII words.
///
/// Runs are found 64 bytes at a time from bitmaps of the bytes
/// ([`BlockAt::word`], [`BlockAt::non_ascii`]): the bits where a run starts
/// or ends are computed at once, and visited with `trailing_zeros`. Starts
/// and ends alternate, so they are taken in pairs without a branch on which
/// an edge is: a byte-by-byte scan takes a hard-to-predict branch at every
/// token edge, which cost more than all the rest of tokenising. A text
/// with a few accented letters or emoji goes through here whole, instead
/// of piece by piece between spaces.
#[inline]
fn for_each_run(bytes: &[u8], non_ascii: bool, f: &mut impl FnMut(usize, usize, bool)) {
    // Whether the byte before the current block is in a run, where that
    // run started, and whether it holds a non-ASCII byte so far.
    let mut carry = 0u64;
    let mut start = 0;
    let mut run_high = false;
    for base in (0..bytes.len()).step_by(BLOCK) {
        // The block's bytes: at most BLOCK, at least one.
        let chunk_len = (bytes.len() - base).min(BLOCK);
        let bits = BlockAt::new(bytes, base);
        let high = if non_ascii { bits.non_ascii() } else { 0 };
        let in_run = bits.word() | high;
        let before = (in_run << 1) | carry;
        let edges = (in_run ^ before) & (u64::MAX >> (64 - chunk_len));
        let mut starts = edges & in_run;
        let mut ends = edges & !in_run;
        if carry != 0 {
            if ends == 0 {
                // The run goes on through the whole block (and no other
                // starts in it).
                run_high |= high != 0;
                carry = in_run >> (chunk_len - 1) & 1;
                continue;
            }
            // The run from the block before ends first.
            let end = ends.trailing_zeros();
            run_high |= high & ((1u64 << end) - 1) != 0;
            f(start, base + end as usize, run_high);
            ends &= ends - 1;
        }
        while ends != 0 {
            let (from, to) = (starts.trailing_zeros(), ends.trailing_zeros());
            // `to` < 64: it is the place of a byte of the block.
            let span = (1u64 << to) - (1u64 << from);
            f(base + from as usize, base + to as usize, high & span != 0);
            starts &= starts - 1;
            ends &= ends - 1;
        }
        if starts != 0 {
            // A run that goes on to the block's end (and maybe beyond).
            let from = starts.trailing_zeros();
            start = base + from as usize;
            run_high = high >> from != 0;
        }
        carry = in_run >> (chunk_len - 1) & 1;
    }
    if carry != 0 {
        f(start, bytes.len(), run_high);
    }
}

/// Appends to `out` the token hash of every maximal run of ASCII word
/// bytes of `bytes` (the tokens of an ASCII text holding no `#`, so no
/// hashtag block), in order: what hashing the spans of [`for_each_run`]
/// gives.
///
/// The hashes are taken as the words are found: no span is stored and
/// read back, and its bounds are not checked against the text a second
/// time. Room for every hash is made once, before the scan: two words
/// are apart by at least one byte, so a text of `n` bytes has at most
/// `n.div_ceil(2)` of them; a `push` a hash loaded the vector's length
/// and room from memory, compared them and stored the length back.
///
/// Out of line and with a loop of its own ([`for_each_ascii_word`]):
/// inlined into the preparer, through [`for_each_run`]'s closure, the
/// span loop kept its state in too few registers and moved seven of them
/// about for every span (measured: +140 instructions a message).
///
/// With AVX2 the blocks' word masks are taken 32 bytes at a time
/// ([`BlockAt::word_avx2`]), in a copy of the function compiled for it.
#[inline]
fn push_ascii_word_hashes(bytes: &[u8], out: &mut Vec<u64>) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the processor has AVX2 (checked just above).
        return unsafe { ascii_x86::push_word_hashes_avx2(bytes, out) };
    }
    push_ascii_word_hashes_sse2(bytes, out);
}

/// [`push_ascii_word_hashes`] with the blocks' masks of [`BlockAt::word`].
#[inline(never)]
fn push_ascii_word_hashes_sse2(bytes: &[u8], out: &mut Vec<u64>) {
    push_ascii_word_hashes_by(bytes, out, BlockAt::word);
}

/// The body of [`push_ascii_word_hashes`], with `word` the blocks' word
/// masks.
#[inline(always)]
fn push_ascii_word_hashes_by(bytes: &[u8], out: &mut Vec<u64>, word: impl Fn(&BlockAt) -> u64) {
    out.reserve(bytes.len().div_ceil(2));
    let room = out.spare_capacity_mut();
    let mut hashes = HashInto {
        bytes,
        room,
        written: 0,
    };
    for_each_ascii_word(bytes, &mut hashes, word);
    let written = hashes.written;
    let len = out.len() + written;
    // SAFETY: the `written` slots after the vector's length were written
    // (a slot is counted only once written: see `HashInto::put`), and
    // they are within its capacity (they are slots of its spare room).
    unsafe { out.set_len(len) };
}

/// Appends to `out` the token hashes of the ASCII text `bytes`, a block of
/// hashtags folded into one token: what [`HashtagFold::ascii_token`] gives
/// for every span of [`for_each_run`] in turn.
///
/// As [`push_ascii_word_hashes`]: the hashes taken as the words are found,
/// into room made once. A fold takes back hashes already written, so
/// the room is never outgrown.
///
/// With AVX2 as [`push_ascii_word_hashes`].
#[inline]
fn push_ascii_word_hashes_folded(bytes: &[u8], out: &mut Vec<u64>) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the processor has AVX2 (checked just above).
        return unsafe { ascii_x86::push_word_hashes_folded_avx2(bytes, out) };
    }
    push_ascii_word_hashes_folded_sse2(bytes, out);
}

/// [`push_ascii_word_hashes_folded`] with the blocks' masks of
/// [`BlockAt::word`].
#[inline(never)]
fn push_ascii_word_hashes_folded_sse2(bytes: &[u8], out: &mut Vec<u64>) {
    push_ascii_word_hashes_folded_by(bytes, out, BlockAt::word);
}

/// The body of [`push_ascii_word_hashes_folded`], with `word` the blocks'
/// word masks.
#[inline(always)]
fn push_ascii_word_hashes_folded_by(
    bytes: &[u8],
    out: &mut Vec<u64>,
    word: impl Fn(&BlockAt) -> u64,
) {
    out.reserve(bytes.len().div_ceil(2));
    let room = out.spare_capacity_mut();
    let mut hashes = FoldInto {
        hashes: HashInto {
            bytes,
            room,
            written: 0,
        },
        len: 0,
        from: 0,
        hash: 0,
    };
    for_each_ascii_word(bytes, &mut hashes, word);
    hashes.finish();
    let written = hashes.hashes.written;
    let len = out.len() + written;
    // SAFETY: as in `push_ascii_word_hashes`: the slots counted were
    // written (a fold only counts fewer of them), and they are within the
    // vector's capacity.
    unsafe { out.set_len(len) };
}

/// The ASCII paths compiled with AVX2.
#[cfg(target_arch = "x86_64")]
mod ascii_x86 {
    use super::{BlockAt, push_ascii_word_hashes_by, push_ascii_word_hashes_folded_by};

    /// [`push_ascii_word_hashes`](super::push_ascii_word_hashes) with
    /// [`BlockAt::word_avx2`].
    ///
    /// # Safety
    /// The processor must have AVX2.
    #[target_feature(enable = "avx2")]
    #[inline(never)]
    pub(super) unsafe fn push_word_hashes_avx2(bytes: &[u8], out: &mut Vec<u64>) {
        // SAFETY: the processor has AVX2 (this function's contract).
        push_ascii_word_hashes_by(bytes, out, |block: &BlockAt| unsafe { block.word_avx2() });
    }

    /// [`push_ascii_word_hashes_folded`](super::push_ascii_word_hashes_folded)
    /// with [`BlockAt::word_avx2`].
    ///
    /// # Safety
    /// The processor must have AVX2.
    #[target_feature(enable = "avx2")]
    #[inline(never)]
    pub(super) unsafe fn push_word_hashes_folded_avx2(bytes: &[u8], out: &mut Vec<u64>) {
        // SAFETY: the processor has AVX2 (this function's contract).
        push_ascii_word_hashes_folded_by(bytes, out, |block: &BlockAt| unsafe {
            block.word_avx2()
        });
    }
}

/// Where the words [`for_each_ascii_word`] finds go.
///
/// A trait, not a closure: the hashing closure of
/// [`push_ascii_word_hashes`] was compiled as a function of its own, a
/// call a token (measured).
trait WordSink {
    /// Takes the word `start..end`.
    fn put(&mut self, start: usize, end: usize);
}

impl<F: FnMut(usize, usize)> WordSink for F {
    #[inline(always)]
    fn put(&mut self, start: usize, end: usize) {
        self(start, end)
    }
}

/// The hashes of [`push_ascii_word_hashes`], written into the spare room
/// of the output.
struct HashInto<'a> {
    bytes: &'a [u8],
    room: &'a mut [std::mem::MaybeUninit<u64>],
    /// How many of `room`'s slots are written (the first ones).
    written: usize,
}

impl WordSink for HashInto<'_> {
    #[inline(always)]
    fn put(&mut self, start: usize, end: usize) {
        // The slot is always there (see `push_ascii_word_hashes`), the
        // token always in the text; neither is written or read out of
        // bounds if not.
        if let (Some(slot), Some(token)) =
            (self.room.get_mut(self.written), self.bytes.get(start..end))
        {
            slot.write(tag_number(
                hash_bytes(token),
                is_number_at(self.bytes, start, end),
            ));
            self.written += 1;
        }
    }
}

/// The hashes of [`push_ascii_word_hashes_folded`]: [`HashInto`]'s, with a
/// run of hashtags folded as [`HashtagFold`] folds it.
struct FoldInto<'a> {
    hashes: HashInto<'a>,
    /// Hashtags in the run so far.
    len: usize,
    /// Where the run's hashes start in the room.
    from: usize,
    /// The block token, folded as the run grows.
    hash: u64,
}

impl FoldInto<'_> {
    /// Ends the run: folds it into one token if it is a block.
    #[inline(always)]
    fn finish(&mut self) {
        if self.len >= HASHTAG_BLOCK {
            // The run's hashes are taken back (they were written: `from`
            // is below `written`), and the block's is written first.
            if let Some(slot) = self.hashes.room.get_mut(self.from) {
                slot.write(self.hash);
                self.hashes.written = self.from + 1;
            }
        }
        self.len = 0;
    }
}

impl WordSink for FoldInto<'_> {
    #[inline(always)]
    fn put(&mut self, start: usize, end: usize) {
        let bytes = self.hashes.bytes;
        let hashtag = start > 0 && bytes.get(start - 1) == Some(&b'#');
        if !hashtag && self.len > 0 {
            self.finish();
        }
        let (Some(slot), Some(token)) = (
            self.hashes.room.get_mut(self.hashes.written),
            bytes.get(start..end),
        ) else {
            return;
        };
        let hash = hash_bytes(token);
        if hashtag {
            if self.len == 0 {
                self.from = self.hashes.written;
                self.hash = HASHTAG_BLOCK_SEED;
            }
            self.len += 1;
            self.hash = mix64(self.hash ^ hash);
        }
        slot.write(tag_number(hash, is_number_at(bytes, start, end)));
        self.hashes.written += 1;
    }
}

/// Hands `sink` the span `start..end` of every maximal run of ASCII word bytes of
/// `bytes`, in order: [`for_each_run`] without `non_ascii`, written for
/// its two callers above alone (each its own copy, out of line; see
/// [`push_ascii_word_hashes`]).
#[inline(always)]
fn for_each_ascii_word(bytes: &[u8], sink: &mut impl WordSink, word: impl Fn(&BlockAt) -> u64) {
    // Whether the byte before the current block is in a run, and where
    // that run started.
    let mut carry = 0u64;
    let mut start = 0;
    for base in (0..bytes.len()).step_by(BLOCK) {
        // The block's bytes: at most BLOCK, at least one.
        let chunk_len = (bytes.len() - base).min(BLOCK);
        let in_run = word(&BlockAt::new(bytes, base));
        let before = (in_run << 1) | carry;
        let edges = (in_run ^ before) & (u64::MAX >> (64 - chunk_len));
        let mut starts = edges & in_run;
        let mut ends = edges & !in_run;
        if carry != 0 && ends != 0 {
            // The run from the block before ends first.
            sink.put(start, base + ends.trailing_zeros() as usize);
            ends &= ends - 1;
        }
        // Starts and ends alternate: taken in pairs (see `for_each_run`).
        while ends != 0 {
            sink.put(
                base + starts.trailing_zeros() as usize,
                base + ends.trailing_zeros() as usize,
            );
            starts &= starts - 1;
            ends &= ends - 1;
        }
        if starts != 0 {
            // A run that goes on to the block's end (and maybe beyond). A
            // run going on through the whole block has no start in it and
            // keeps the start it had.
            start = base + starts.trailing_zeros() as usize;
        }
        carry = in_run >> (chunk_len - 1) & 1;
    }
    if carry != 0 {
        sink.put(start, bytes.len());
    }
}

/// The spans of the ASCII words of `bytes`, by [`for_each_run`]: the
/// reference [`for_each_ascii_word`] is tested against.
#[cfg(test)]
fn push_ascii_words_one_by_one(bytes: &[u8], spans: &mut Vec<(usize, usize, bool)>) {
    for_each_run(bytes, false, &mut |start, end, _| {
        spans.push((start, end, true));
    });
}

/// The hashes [`push_ascii_word_hashes`] appends, as they were taken
/// before it: the spans pushed one by one, then hashed in one `extend`.
/// The reference it is tested against.
#[cfg(test)]
fn push_ascii_word_hashes_through_spans(bytes: &[u8], out: &mut Vec<u64>) {
    let mut spans = Vec::new();
    push_ascii_words_one_by_one(bytes, &mut spans);
    out.extend(spans.iter().map(|&(start, end, _)| {
        tag_number(
            hash_bytes(&bytes[start..end]),
            is_number_at(bytes, start, end),
        )
    }));
}

/// The hashes [`push_ascii_word_hashes_folded`] appends, as they were
/// taken before it: the spans pushed one by one, then each handed to
/// [`HashtagFold::ascii_token`]. The reference it is tested against.
#[cfg(test)]
fn push_ascii_word_hashes_folded_through_spans(bytes: &[u8], out: &mut Vec<u64>) {
    let mut spans = Vec::new();
    push_ascii_words_one_by_one(bytes, &mut spans);
    let mut run = HashtagFold::default();
    for &(start, end, _) in spans.iter() {
        run.ascii_token(bytes, start, end, out);
    }
    run.finish(out);
}

/// The token hashes of a text with a hashtag run folded on the way: what
/// the general path yields when nothing is asked for but hashes.
///
/// The general path keeps a hashtag run as a value that can also explain
/// itself (its words' texts), and so carries that option through every
/// token; per token that cost several times the hash. Here a run is three
/// numbers: its length, where its tokens start in the output, and its
/// block token folded as it grows (the same fold as [`HashtagRun`]). A
/// property test checks the two paths against each other.
#[derive(Default)]
struct HashtagFold {
    len: usize,
    out_start: usize,
    hash: u64,
}

impl HashtagFold {
    /// Appends the token `text[start..end]` (all ASCII if `ascii`).
    #[inline(always)]
    fn token(&mut self, text: &str, start: usize, end: usize, ascii: bool, out: &mut Vec<u64>) {
        let bytes = text.as_bytes();
        if ascii {
            self.ascii_token(bytes, start, end, out);
            return;
        }
        let hashtag = start > 0 && bytes[start - 1] == b'#';
        if !hashtag && self.len > 0 {
            self.finish(out);
        }
        let token = &text[start..end];
        if hashtag {
            self.fold(token_hash(token), out);
        }
        push_token(token, false, false, out, &mut None);
    }

    /// Appends the token `bytes[start..end]`, all ASCII.
    #[inline(always)]
    fn ascii_token(&mut self, bytes: &[u8], start: usize, end: usize, out: &mut Vec<u64>) {
        let hashtag = start > 0 && bytes[start - 1] == b'#';
        if !hashtag && self.len > 0 {
            self.finish(out);
        }
        let hash = hash_bytes(&bytes[start..end]);
        if hashtag {
            self.fold(hash, out);
        }
        out.push(tag_number(hash, is_number_at(bytes, start, end)));
    }

    #[inline(always)]
    fn fold(&mut self, hash: u64, out: &[u64]) {
        if self.len == 0 {
            self.out_start = out.len();
            self.hash = HASHTAG_BLOCK_SEED;
        }
        self.len += 1;
        self.hash = mix64(self.hash ^ hash);
    }

    /// Ends the run: folds it into one token if it is a block.
    #[inline]
    fn finish(&mut self, out: &mut Vec<u64>) {
        if self.len >= HASHTAG_BLOCK {
            out.truncate(self.out_start);
            out.push(self.hash);
        }
        self.len = 0;
    }
}

/// The classes of characters of the token pattern: ASCII word characters
/// (`[0-9A-Za-z_]`) and the other word characters that are not CJK, CJK
/// characters, and the rest.
const WORD: u8 = 2;
const OTHER: u8 = 4;
const CJK: u8 = 16;

/// A run of hashtags in the making. Its tokens are emitted as they come; a
/// run of [`HASHTAG_BLOCK`] or more is then replaced by one token, the hash
/// of its tokens' hashes in order.
#[derive(Default)]
struct HashtagRun<'t> {
    /// Hashtags in the run so far.
    len: usize,
    /// Where the run's tokens start in the output.
    out_start: usize,
    /// Where the run's token texts start (when explaining).
    texts_start: usize,
    /// The block token, folded as the run grows.
    hash: u64,
    /// The run's hashtags, kept only when explaining.
    words: Vec<&'t str>,
}

impl<'t> HashtagRun<'t> {
    fn push(
        &mut self,
        token: &'t str,
        ascii: bool,
        number: bool,
        out: &mut Vec<u64>,
        texts: &mut Option<&mut Vec<String>>,
    ) {
        if self.len == 0 {
            self.out_start = out.len();
            self.texts_start = texts.as_deref().map_or(0, Vec::len);
            self.hash = HASHTAG_BLOCK_SEED;
        }
        self.len += 1;
        self.hash = mix64(self.hash ^ token_hash(token));
        if texts.is_some() {
            self.words.push(token);
        }
        push_token(token, ascii, number, out, texts);
    }

    /// Ends the run: folds it into one token if it is a block.
    fn finish(&mut self, out: &mut Vec<u64>, texts: &mut Option<&mut Vec<String>>) {
        if self.len == 0 {
            return;
        }
        if self.len >= HASHTAG_BLOCK {
            out.truncate(self.out_start);
            out.push(self.hash);
            if let Some(texts) = texts.as_deref_mut() {
                texts.truncate(self.texts_start);
                let words: Vec<String> = self.words.iter().map(|w| format!("#{w}")).collect();
                texts.push(words.join(" "));
            }
        }
        self.len = 0;
        self.words.clear();
    }
}

/// Whether a token is a CJK run (to be cut into bigrams).
fn starts_cjk(token: &str) -> bool {
    token.chars().next().is_some_and(is_cjk)
}

/// Hashtags in a row that count as one block.
pub const HASHTAG_BLOCK: usize = 3;

/// Seed of a hashtag block's token.
const HASHTAG_BLOCK_SEED: u64 = 0x6861_7368_7461_6773;

/// Appends one matched token: a word, or the bigrams of a CJK run.
/// `ascii` says the token is all ASCII, so not CJK; `number` that it is a
/// number (see [`is_number_at`]).
fn push_token(
    token: &str,
    ascii: bool,
    number: bool,
    out: &mut Vec<u64>,
    texts: &mut Option<&mut Vec<String>>,
) {
    let start = out.len();
    if !ascii && starts_cjk(token) {
        push_bigrams(token, out);
        if let Some(texts) = texts.as_deref_mut() {
            let chars: Vec<char> = token.chars().collect();
            if chars.len() == 1 {
                texts.push(token.to_string());
            } else {
                texts.extend(chars.windows(2).map(|pair| pair.iter().collect::<String>()));
            }
        }
    } else {
        out.push(tag_number(token_hash(token), number));
        if let Some(texts) = texts.as_deref_mut() {
            texts.push(token.to_string());
        }
    }
    debug_assert!(texts.as_ref().is_none_or(|t| t.len() >= out.len() - start));
}

fn is_cjk(c: char) -> bool {
    matches!(c as u32,
        0x3040..=0x30FF | 0x31F0..=0x31FF | 0x3400..=0x4DBF | 0x4E00..=0x9FFF | 0xF900..=0xFAFF | 0x20000..=0x3FFFF)
}

/// Character bigrams of a CJK run; a run of one character is its own token.
fn push_bigrams(run: &str, out: &mut Vec<u64>) {
    let mut starts = run
        .char_indices()
        .map(|(i, _)| i)
        .chain(std::iter::once(run.len()));
    let mut a = starts.next().unwrap_or(0);
    let Some(mut b) = starts.next() else { return };
    let Some(mut c) = starts.next() else {
        out.push(token_hash(run));
        return;
    };
    loop {
        out.push(token_hash(&run[a..c]));
        match starts.next() {
            Some(next) => {
                a = b;
                b = c;
                c = next;
            }
            None => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tokens(text: &str) -> Vec<u64> {
        let mut out = Vec::new();
        Tokeniser::new().tokenise(text, &mut out, None);
        out
    }

    /// The tokens by the plain definition: regex matches, CJK runs as
    /// bigrams, runs of three or more hashtags as one token.
    fn reference_tokens(text: &str) -> Vec<u64> {
        let mut out = Vec::new();
        let mut block: Vec<(u64, &str, bool)> = Vec::new();
        let flush = |block: &mut Vec<(u64, &str, bool)>, out: &mut Vec<u64>| {
            if block.len() >= HASHTAG_BLOCK {
                out.push(
                    block
                        .iter()
                        .fold(HASHTAG_BLOCK_SEED, |h, &(t, _, _)| mix64(h ^ t)),
                );
            } else {
                for &(_, token, number) in block.iter() {
                    push_token(token, false, number, out, &mut None);
                }
            }
            block.clear();
        };
        for (start, end) in Tokeniser::new().regex_spans(text) {
            let token = &text[start..end];
            let number = is_number_at(text.as_bytes(), start, end);
            if text[..start].ends_with('#') {
                block.push((token_hash(token), token, number));
            } else {
                flush(&mut block, &mut out);
                push_token(token, false, number, &mut out, &mut None);
            }
        }
        flush(&mut block, &mut out);
        out
    }

    #[test]
    fn words_lose_their_signs() {
        assert_eq!(tokens("#rustconf @alice, hi!"), tokens("rustconf alice hi"));
        assert_eq!(tokens("a b").len(), 2);
        assert!(tokens("!!! ... 😂").is_empty());
    }

    #[test]
    fn cjk_runs_become_bigrams() {
        // 今日は雨 → 今日, 日は, は雨
        let expected: Vec<u64> = ["今日", "日は", "は雨"]
            .iter()
            .map(|t| token_hash(t))
            .collect();
        assert_eq!(tokens("今日は雨"), expected);
        assert_eq!(tokens("雨"), vec![token_hash("雨")]);
        // Mixed scripts split at the boundary.
        assert_eq!(
            tokens("rust言語"),
            vec![token_hash("rust"), token_hash("言語")]
        );
    }

    #[test]
    fn hashtag_blocks_are_one_token() {
        assert_eq!(tokens("spam #a #b #c").len(), 2);
        assert_eq!(tokens("spam #a #b").len(), 3, "two hashtags stay words");
        assert_eq!(tokens("#a #b #c #d"), tokens("#a, #b  #c #d"));
        assert_ne!(tokens("x #a #b #c"), tokens("x #a #b #d"));
        let explained = Tokeniser::new().token_texts("spam #a #b #c 日本語");
        let texts: Vec<&str> = explained.iter().map(|(_, t)| t.as_str()).collect();
        assert_eq!(texts, ["spam", "#a #b #c", "日本", "本語"]);
        let hashes: Vec<u64> = explained.iter().map(|(h, _)| *h).collect();
        assert_eq!(hashes, tokens("spam #a #b #c 日本語"));
    }

    proptest::proptest! {
        #[test]
        fn the_ascii_fast_path_finds_what_the_regex_finds(text in "[ a-zA-Z0-9_#@.,!é日本\u{3000}\u{a0}\t\n`{\\[^-]{0,200}|[ a_#.é日本はカー々\u{301}\u{3000}\u{a0}٣ſ😀\u{200d}\u{ff21}\u{1f1ef}]{0,40}") {
            let tokeniser = Tokeniser::new();
            let mut spans = Vec::new();
            let mut claimed_ascii = Vec::new();
            tokeniser.for_each_token(&text, |s, e, ascii| {
                spans.push((s, e));
                if ascii {
                    claimed_ascii.push(&text[s..e]);
                }
            });
            proptest::prop_assert_eq!(&spans, &tokeniser.regex_spans(&text));
            proptest::prop_assert!(claimed_ascii.iter().all(|t| t.is_ascii()));
            // And an ASCII text takes the fast path for every token.
            if text.is_ascii() {
                proptest::prop_assert_eq!(claimed_ascii.len(), spans.len());
            }
        }

        #[test]
        fn the_lean_path_gives_the_general_paths_tokens(
            text in "(#{0,2}[a-zA-Z0-9_]{0,3}[ #@.,!\t\n\x0b]{0,3}){0,30}|[ a-z#_.]{0,200}|(#[a-c]{1,70} ?){0,6}|(#?#?@?[a-cé日本はカー_😀\u{301}]{1,3}[ ,.#\u{3000}\u{a0}]{0,2}){0,16}"
        ) {
            let mut fast = Vec::new();
            Tokeniser::new().tokenise(&text, &mut fast, None);
            let mut general = Vec::new();
            Tokeniser::new().tokenise_explained(&text, &mut general, None, None);
            proptest::prop_assert_eq!(&fast, &general);
            proptest::prop_assert_eq!(fast, reference_tokens(&text));
        }

        #[test]
        fn tokenising_through_spans_gives_the_general_paths_tokens(
            text in "(#{0,2}[a-zA-Z0-9_]{0,3}[ #@.,!+:\t\n\x0b]{0,3}){0,30}|(#?#?@?[a-cé日本はカー_😀\u{301}]{1,3}[ ,.#\u{3000}\u{a0}]{0,2}){0,16}|\\PC{0,40}"
        ) {
            let tokeniser = Tokeniser::new();
            let mut general = Vec::new();
            tokeniser.tokenise(&text, &mut general, None);
            let mut spans = vec![(7, 3, false)];
            for ascii in [false, text.is_ascii()] {
                for hashless in [false, !text.contains('#')] {
                    let mut through_spans = vec![1];
                    tokeniser.tokenise_with(&text, ascii, hashless, &mut spans, &mut through_spans);
                    proptest::prop_assert_eq!(&through_spans[1..], &general[..]);
                }
            }
        }

        #[test]
        fn ascii_words_are_the_spans_pushed_one_by_one(
            text in "[ a-zA-Z0-9_#@.,!\t\n]{0,300}|([a-z_]{0,70}[ .#]{0,2}){0,6}|( ?[a-z]){0,200}",
            before in 0usize..3,
        ) {
            // Spans already there stay, and the new ones follow them.
            let mut spans = vec![(1, 2, false); before];
            let mut expected = spans.clone();
            for_each_ascii_word(text.as_bytes(), &mut |start, end| spans.push((start, end, true)), BlockAt::word);
            push_ascii_words_one_by_one(text.as_bytes(), &mut expected);
            proptest::prop_assert_eq!(spans, expected);
        }

        #[test]
        fn folded_ascii_word_hashes_are_the_folds_of_the_spans(
            text in "(#{0,2}[a-zA-Z0-9_]{0,3}[ #@.,!+:\t\n]{0,3}){0,60}|(#[a-z0-9]{1,30} ?){0,12}|([a-z]{0,9} (#[a-c]{1,4} ){0,5}){0,8}",
            before in 0usize..3,
        ) {
            // Hashes already there stay (a fold never takes them back), and
            // the new ones follow them.
            let mut hashes = vec![5; before];
            let mut expected = hashes.clone();
            let mut by_sse2 = hashes.clone();
            push_ascii_word_hashes_folded(text.as_bytes(), &mut hashes);
            push_ascii_word_hashes_folded_sse2(text.as_bytes(), &mut by_sse2);
            push_ascii_word_hashes_folded_through_spans(text.as_bytes(), &mut expected);
            proptest::prop_assert_eq!(&hashes, &expected);
            proptest::prop_assert_eq!(by_sse2, expected);
        }

        #[test]
        fn ascii_word_hashes_are_the_hashes_of_the_spans(
            text in "[ a-zA-Z0-9_@.,:+!\t\n]{0,300}|([a-z0-9_]{0,70}[ .:,+]{0,2}){0,6}|( ?[a-z0-9]){0,200}",
            before in 0usize..3,
        ) {
            // Hashes already there stay, and the new ones follow them.
            let mut hashes = vec![5; before];
            let mut expected = hashes.clone();
            let mut by_sse2 = hashes.clone();
            push_ascii_word_hashes(text.as_bytes(), &mut hashes);
            push_ascii_word_hashes_sse2(text.as_bytes(), &mut by_sse2);
            push_ascii_word_hashes_through_spans(text.as_bytes(), &mut expected);
            proptest::prop_assert_eq!(&hashes, &expected);
            proptest::prop_assert_eq!(by_sse2, expected);
        }

        #[test]
        fn short_token_hashes_are_the_crates(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..=40)) {
            // Every length to 40: the three short cases, their edges, and
            // the crate's own cases on either side.
            for len in 0..=bytes.len() {
                proptest::prop_assert_eq!(
                    hash_bytes(&bytes[..len]),
                    xxh3_64_with_seed(&bytes[..len], TOKEN_SEED),
                    "{:?}", &bytes[..len]
                );
            }
        }

        #[test]
        fn tokens_are_the_reference_tokens(text in "(#?#?@?[a-cé日本_]{1,3}[ ,.#\u{3000}]{0,2}){0,12}") {
            proptest::prop_assert_eq!(tokens(&text), reference_tokens(&text));
        }
    }

    #[test]
    fn every_characters_class_is_the_ranges_class() {
        // Every character, not a sample: the table must agree wherever it
        // holds the class, and above it the ranges answer.
        let tokeniser = Tokeniser::new();
        for c in (0..=char::MAX as u32).filter_map(char::from_u32) {
            assert_eq!(
                tokeniser.char_class(c),
                class_by_ranges(&tokeniser.word, &tokeniser.cjk, c),
                "{:?} (U+{:04X})",
                c,
                c as u32
            );
        }
        // And the table is the small one its documentation promises.
        let blocks = tokeniser.table.blocks.len();
        assert!(blocks < 256, "{blocks}");
    }

    #[test]
    fn words_across_64_byte_blocks_are_whole() {
        let tokeniser = Tokeniser::new();
        for text in [
            format!("{} straddles", "w".repeat(62)),
            format!("{} x", "a".repeat(64)),
            "b".repeat(128),
            format!("{}{}", " ".repeat(63), "tail"),
            format!("{}.", "c".repeat(127)),
            // Non-ASCII characters across a block's edge, inside a word,
            // after one, and alone.
            format!("{}é{}", "w".repeat(63), "x"),
            format!("{}日本語 ab", " ".repeat(62)),
            format!("{}\u{a0}{}😀", "d".repeat(63), "e".repeat(64)),
            format!("{}é", "f".repeat(127)),
            "é".repeat(70),
        ] {
            let mut spans = Vec::new();
            tokeniser.for_each_token(&text, |s, e, _| spans.push((s, e)));
            assert_eq!(spans, tokeniser.regex_spans(&text), "{text:?}");
        }
    }

    #[test]
    fn joined_text_is_the_tokens() {
        let mut out = Vec::new();
        let mut joined = String::new();
        Tokeniser::new().tokenise("#hello,  world!", &mut out, Some(&mut joined));
        assert_eq!(joined, "hello world");
    }
}

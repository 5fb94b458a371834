//! Stage 1, normalise: strip what differs between copies of the same message
//! but is not its content.
//!
//! In order:
//! 1. HTML entities are decoded (`&amp;` → `&`): feeds and old API payloads
//!    escape them, other sources do not.
//! 2. URLs become one token each: the record's `expanded_url` for the short
//!    link when it has one (the same link arrives as different t.co
//!    addresses), otherwise nothing (a bare t.co address says nothing about
//!    the content). A URL cut off by truncation (`https://t.co/ab…`) goes too.
//! 3. Unicode compatibility forms are folded (NFKC: full-width letters, `…`
//!    to `...`, ligatures) and case is folded (Unicode lowercase).
//! 4. Retweet markers go, wherever they stand: `RT @user:`, `RT: @user`,
//!    `MT @user:`, and chains of them; a `via @user` or `(via @user)` that
//!    ends or begins the text too (a credit, like a retweet marker); and so
//!    do the markers of old-style quoted retweets, `“@user: …”`,
//!    `"@user: …"`, `RT "@user: …"`, `RT: "…"` (the quote mark, the
//!    mention, a `RT` before it, and the closing mark that ends the text).
//! 5. A truncated text loses its trailing ellipsis and the cut word before
//!    it (and, when that word was a hashtag, the hashtags left of its run).
//!    An ellipsis glued to a link that ends the text (or a link cut short)
//!    still says the text was cut; the link's token, if it has one, stays.
//!
//! The `#` and `@` signs are left for the tokeniser, which keeps only words.

use std::borrow::Cow;
use std::sync::atomic::{AtomicU64, Ordering};

use unicode_normalization::{IsNormalized, UnicodeNormalization, is_nfkc_quick};
use xxhash_rust::xxh3::xxh3_64_with_seed;

use super::bitmap::BLOCK;

/// Seed of the URL token hash. Fixed: tokens must be the same on every run.
const URL_SEED: u64 = 0x7572_6c5f_746f_6b6e;

/// The normaliser. Its rules are scans of its own (each checked against the
/// regex it stands for, in the tests), so it has nothing to compile; it
/// stays a value to build and share, as the stages beside it are.
#[derive(Clone, Debug, Default)]
pub struct Normaliser;

impl Normaliser {
    /// The normaliser.
    pub fn new() -> Normaliser {
        Normaliser
    }

    /// Normalises `text` into `out` (cleared first). `urls` maps short URLs
    /// to their expansions. `scratch` is a reusable buffer. Returns whether
    /// the text was cut (it ended in an ellipsis, which went with the cut
    /// word before it).
    pub fn normalise_into(
        &self,
        text: &str,
        urls: &[(Cow<'_, str>, Cow<'_, str>)],
        out: &mut String,
        scratch: &mut String,
    ) -> bool {
        self.normalise(text, urls, out, scratch).truncated
    }

    /// [`Normaliser::normalise_into`], saying also whether the result is
    /// all ASCII (so that the tokeniser need not look again).
    pub fn normalise(
        &self,
        text: &str,
        urls: &[(Cow<'_, str>, Cow<'_, str>)],
        out: &mut String,
        scratch: &mut String,
    ) -> Normalised {
        out.clear();
        scratch.clear();
        // One pass over the text says whether it is ASCII and which of the
        // rules' signs it holds (each was a `memchr` or an `is_ascii` of
        // its own, about 70 instructions a call on a tweet).
        let mut marks = Marks::of(text.as_bytes());
        // Feeds escape twice now and then (`&amp;amp;`): decode until stable,
        // a few rounds at most.
        let mut decoded = Cow::Borrowed(text);
        if marks.amp {
            for _ in 0..3 {
                // (The `memchr` crate's search: `str::contains` scans byte
                // by byte on short texts.)
                if memchr::memchr(b'&', decoded.as_bytes()).is_none() {
                    break;
                }
                match html_escape::decode_html_entities(&decoded) {
                    Cow::Borrowed(_) => break,
                    Cow::Owned(once_more) => decoded = Cow::Owned(once_more),
                }
            }
            if let Cow::Owned(text) = &decoded {
                marks = Marks::of(text.as_bytes());
            }
        }

        // An ASCII text (most of them) stays ASCII: its URLs become ASCII
        // tokens, and NFKC leaves ASCII alone. It is written straight into
        // `out` and lowercased there, in one pass and one copy, where other
        // text goes through `scratch` and the Unicode tables.
        let ascii = marks.ascii;
        if ascii {
            push_without_urls(&decoded, urls, out);
            lowercase_ascii(out);
        } else {
            push_without_urls(&decoded, urls, scratch);
            fold_non_ascii(scratch, out);
        }

        // Retweet markers and credits hold an `@`, and quoted retweets a
        // quote mark (`"`, or `“`, whose first byte is 0xe2): most texts
        // are ruled out by the marks, or a `memchr`. The ASCII path writes
        // no `@` or `"` of its own (a link's token is `url` and hex digits,
        // an ellipsis dots), so its output holds one only if the text did;
        // when the text's was in a link that went, the rules find nothing
        // to remove, as they would not have run. Folding other text may make
        // one (`＠` is `@` in NFKC): its output is searched.
        let has_at = if ascii {
            marks.at
        } else {
            find_byte(out.as_bytes(), 0, b'@').is_some()
        };
        if has_at {
            remove_retweet_markers(out, scratch);
        }
        let may_quote = if ascii {
            marks.quote
        } else {
            memchr::memchr2(b'"', 0xe2, out.as_bytes()).is_some()
        };
        if may_quote && remove_quote_markers(out, scratch) {
            // The quote's closing mark, when it ends the text, hides an
            // ellipsis before it (a quote cut short).
            let end = out.trim_end().trim_end_matches(['"', '\u{201d}']).len();
            out.truncate(end);
        }
        let trimmed = out.trim_end().len();
        out.truncate(trimmed);
        if has_at && holds_via(out) {
            if let Some(start) = trailing_via_credit(out) {
                out.truncate(start);
            }
            let start = out.trim_start().trim_start_matches(['(', '[']);
            if start.starts_with("via")
                && let Some(end) = leading_via_credit(out)
            {
                out.drain(..end);
            }
        }
        let truncated = out.ends_with("...");
        if truncated {
            cut_truncated_word(out);
        }
        Normalised {
            truncated,
            ascii,
            hashless: ascii && !marks.hash,
        }
    }

    /// The normaliser as it was before the ASCII path (issue 42, sixth
    /// session): the oracle [`Normaliser::normalise`] is tested against.
    #[cfg(test)]
    pub(crate) fn normalise_into_reference(
        &self,
        text: &str,
        urls: &[(Cow<'_, str>, Cow<'_, str>)],
        out: &mut String,
        scratch: &mut String,
    ) -> bool {
        out.clear();
        scratch.clear();
        // Feeds escape twice now and then (`&amp;amp;`): decode until stable,
        // a few rounds at most.
        let mut decoded = Cow::Borrowed(text);
        for _ in 0..3 {
            // (The `memchr` crate's search: `str::contains` scans byte by
            // byte on short texts.)
            if memchr::memchr(b'&', decoded.as_bytes()).is_none() {
                break;
            }
            match html_escape::decode_html_entities(&decoded) {
                Cow::Borrowed(_) => break,
                Cow::Owned(once_more) => decoded = Cow::Owned(once_more),
            }
        }

        // URLs, before case folding: short links are case-sensitive keys.
        // (Each rule runs only where a cheap test says it can match.)
        let mut last = 0;
        for found in may_hold_url(&decoded)
            .then(|| UrlSpans::new(&decoded))
            .into_iter()
            .flatten()
        {
            scratch.push_str(&decoded[last..found.start]);
            scratch.push(' ');
            let url = &decoded[found.clone()];
            if let Some(expanded) = expand(url, urls) {
                push_url_token(scratch, expanded);
                scratch.push(' ');
            }
            // A URL runs to the next space, so an ellipsis glued to its end
            // (`https://t.co/x...`, `https://t.co/x…`, a link cut short) is
            // in it: put it back after the link, where it says the text was
            // cut.
            if url.ends_with("...") || url.ends_with('…') {
                scratch.push_str("... ");
            }
            last = found.end;
        }
        scratch.push_str(&decoded[last..]);

        // NFKC, then lowercase. ASCII is already in both forms but for case.
        // `…`, the one non-ASCII character of many truncated tweets, is
        // replaced by what NFKC makes of it first, which often leaves plain
        // ASCII.
        if !scratch.is_ascii() && scratch.contains('…') {
            let mut last = 0;
            for (at, _) in scratch.match_indices('…') {
                out.push_str(&scratch[last..at]);
                out.push_str("...");
                last = at + '…'.len_utf8();
            }
            out.push_str(&scratch[last..]);
            std::mem::swap(out, scratch);
            out.clear();
        }
        if scratch.is_ascii() {
            out.push_str(scratch);
            out.make_ascii_lowercase();
        } else {
            // The definition, without the quick check's shortcut.
            scratch.nfkc().for_each(|c| push_lowercase(out, c));
        }

        // Retweet markers and credits hold an `@`: most texts are ruled out
        // by one `memchr` (removing markers adds none).
        let has_at = memchr::memchr(b'@', out.as_bytes()).is_some();
        if has_at {
            remove_retweet_markers(out, scratch);
        }
        // Quoted retweets hold a quote mark (`"`, or `“`, whose first byte
        // is 0xe2): most texts are ruled out by one `memchr2`.
        if memchr::memchr2(b'"', 0xe2, out.as_bytes()).is_some()
            && remove_quote_markers(out, scratch)
        {
            // The quote's closing mark, when it ends the text, hides an
            // ellipsis before it (a quote cut short).
            let end = out.trim_end().trim_end_matches(['"', '\u{201d}']).len();
            out.truncate(end);
        }
        let trimmed = out.trim_end().len();
        out.truncate(trimmed);
        if has_at && out.contains("via") {
            if let Some(start) = trailing_via_credit(out) {
                out.truncate(start);
            }
            let start = out.trim_start().trim_start_matches(['(', '[']);
            if start.starts_with("via")
                && let Some(end) = leading_via_credit(out)
            {
                out.drain(..end);
            }
        }
        let truncated = out.ends_with("...");
        if truncated {
            cut_truncated_word(out);
        }
        truncated
    }
}

/// What [`Normaliser::normalise`] says of a text besides its normal form.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Normalised {
    /// The text was cut: it ended in an ellipsis, which went with the cut
    /// word before it.
    pub truncated: bool,
    /// The normal form is known to be all ASCII (the text was, and so its
    /// normal form is); `false` says nothing either way.
    pub ascii: bool,
    /// The normal form is known to hold no `#` (an ASCII text without one:
    /// its normal form writes none of its own); `false` says nothing
    /// either way.
    pub hashless: bool,
}

/// What one pass over a text finds: whether it is all ASCII, and whether
/// it holds an `&` (an entity to decode), an `@` (a retweet marker or
/// credit may stand there), a `"` (a quoted retweet's mark) or a `#` (a
/// hashtag, which the tokeniser folds into runs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Marks {
    ascii: bool,
    amp: bool,
    at: bool,
    quote: bool,
    hash: bool,
}

impl Marks {
    /// The marks of `bytes`, 16 or 32 bytes at a time (see `marks_x86`).
    fn of(bytes: &[u8]) -> Marks {
        #[cfg(target_arch = "x86_64")]
        {
            if bytes.len() >= 32 && std::arch::is_x86_feature_detected!("avx2") {
                // SAFETY: the processor has AVX2, and there are 32 bytes or
                // more (both checked just above).
                unsafe { marks_x86::of_avx2(bytes) }
            } else {
                marks_x86::of(bytes)
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            Marks::of_bytes(bytes)
        }
    }

    /// The marks of `bytes`, byte by byte: the portable version, the x86
    /// one's for texts of fewer than 16 bytes, and the vector versions'
    /// oracle.
    fn of_bytes(bytes: &[u8]) -> Marks {
        Marks {
            ascii: bytes.is_ascii(),
            amp: bytes.contains(&b'&'),
            at: bytes.contains(&b'@'),
            quote: bytes.contains(&b'"'),
            hash: bytes.contains(&b'#'),
        }
    }
}

#[cfg(target_arch = "x86_64")]
/// [`Marks::of`] with vector instructions: SSE2 (the x86-64 baseline), and
/// AVX2 where the processor has it.
mod marks_x86 {
    use super::Marks;
    use std::arch::x86_64::*;

    /// [`Marks::of`] with SSE2 (part of the x86-64 baseline): each 16
    /// bytes are compared with the four signs, the results and the bytes
    /// themselves (whose high bits say non-ASCII) gathered by `or`, and
    /// read once at the end. A text's last 16 bytes are read as one more
    /// group, overlapping the one before (a test of presence counts no
    /// byte twice wrongly), so no byte is copied; a text of fewer than 16
    /// bytes is read byte by byte.
    pub(super) fn of(bytes: &[u8]) -> Marks {
        if bytes.len() < 16 {
            return Marks::of_bytes(bytes);
        }
        let (groups, _) = bytes.as_chunks::<16>();
        let last = bytes.len() - 16;
        // SAFETY: SSE2 is part of the x86-64 baseline; every load reads 16
        // bytes inside `bytes` (a whole group, or the 16 ending at its
        // end, which exist as `bytes.len()` >= 16).
        unsafe {
            let (amp, at, quote, hash) = (
                _mm_set1_epi8(b'&' as i8),
                _mm_set1_epi8(b'@' as i8),
                _mm_set1_epi8(b'"' as i8),
                _mm_set1_epi8(b'#' as i8),
            );
            let tail = _mm_loadu_si128(bytes.as_ptr().add(last).cast());
            let mut high = tail;
            let mut amps = _mm_cmpeq_epi8(tail, amp);
            let mut ats = _mm_cmpeq_epi8(tail, at);
            let mut quotes = _mm_cmpeq_epi8(tail, quote);
            let mut hashes = _mm_cmpeq_epi8(tail, hash);
            for group in groups {
                let v = _mm_loadu_si128(group.as_ptr().cast());
                high = _mm_or_si128(high, v);
                amps = _mm_or_si128(amps, _mm_cmpeq_epi8(v, amp));
                ats = _mm_or_si128(ats, _mm_cmpeq_epi8(v, at));
                quotes = _mm_or_si128(quotes, _mm_cmpeq_epi8(v, quote));
                hashes = _mm_or_si128(hashes, _mm_cmpeq_epi8(v, hash));
            }
            Marks {
                ascii: _mm_movemask_epi8(high) == 0,
                amp: _mm_movemask_epi8(amps) != 0,
                at: _mm_movemask_epi8(ats) != 0,
                quote: _mm_movemask_epi8(quotes) != 0,
                hash: _mm_movemask_epi8(hashes) != 0,
            }
        }
    }

    /// [`of`] 32 bytes at a time, for texts of 32 bytes or more (half the
    /// instructions of 16 at a time on a tweet).
    ///
    /// # Safety
    /// The processor must have AVX2, and `bytes` hold at least 32 bytes.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn of_avx2(bytes: &[u8]) -> Marks {
        debug_assert!(bytes.len() >= 32);
        let (groups, _) = bytes.as_chunks::<32>();
        let last = bytes.len() - 32;
        let (amp, at, quote, hash) = (
            _mm256_set1_epi8(b'&' as i8),
            _mm256_set1_epi8(b'@' as i8),
            _mm256_set1_epi8(b'"' as i8),
            _mm256_set1_epi8(b'#' as i8),
        );
        // SAFETY: every load reads 32 bytes inside `bytes` (a whole group,
        // or the 32 ending at its end, which exist as `bytes.len()` >= 32
        // is the caller's promise).
        let tail = unsafe { _mm256_loadu_si256(bytes.as_ptr().add(last).cast()) };
        let mut high = tail;
        let mut amps = _mm256_cmpeq_epi8(tail, amp);
        let mut ats = _mm256_cmpeq_epi8(tail, at);
        let mut quotes = _mm256_cmpeq_epi8(tail, quote);
        let mut hashes = _mm256_cmpeq_epi8(tail, hash);
        for group in groups {
            // SAFETY: as above.
            let v = unsafe { _mm256_loadu_si256(group.as_ptr().cast()) };
            high = _mm256_or_si256(high, v);
            amps = _mm256_or_si256(amps, _mm256_cmpeq_epi8(v, amp));
            ats = _mm256_or_si256(ats, _mm256_cmpeq_epi8(v, at));
            quotes = _mm256_or_si256(quotes, _mm256_cmpeq_epi8(v, quote));
            hashes = _mm256_or_si256(hashes, _mm256_cmpeq_epi8(v, hash));
        }
        Marks {
            ascii: _mm256_movemask_epi8(high) == 0,
            amp: _mm256_movemask_epi8(amps) != 0,
            at: _mm256_movemask_epi8(ats) != 0,
            quote: _mm256_movemask_epi8(quotes) != 0,
            hash: _mm256_movemask_epi8(hashes) != 0,
        }
    }
}

/// Lowercases the ASCII letters of `text` in place, as
/// `str::make_ascii_lowercase` does, eight bytes at a time: the standard
/// library's loop takes about two instructions a byte, a large share of
/// normalising an ASCII tweet.
fn lowercase_ascii(text: &mut str) {
    // SAFETY: only bytes `A`..=`Z` change, each to its lowercase letter
    // (see `lowercase_ascii_word`): ASCII stays ASCII and every other byte
    // is left as it is, so the text stays valid UTF-8.
    let bytes = unsafe { text.as_bytes_mut() };
    #[cfg(target_arch = "x86_64")]
    let bytes = {
        // Sixteen bytes at a time: about half the instructions of the
        // eight-byte words alone on a tweet.
        let (groups, rest) = bytes.as_chunks_mut::<16>();
        for group in groups {
            *group = lowercase_ascii_group(*group);
        }
        if rest.is_empty() {
            return;
        }
        // The last fifteen or fewer as the text's last sixteen, one more
        // group overlapping the one before (lowercasing leaves lowercase
        // bytes as they are): the words and single bytes below cost some
        // 30 instructions a text. Only a text shorter than 16 goes there.
        if let Some(last) = bytes.last_chunk_mut::<16>() {
            *last = lowercase_ascii_group(*last);
            return;
        }
        bytes
    };
    let (words, tail) = bytes.as_chunks_mut::<8>();
    for word in words {
        *word = lowercase_ascii_word(u64::from_le_bytes(*word)).to_le_bytes();
    }
    tail.make_ascii_lowercase();
}

/// Sixteen bytes with their ASCII capitals lowercased and every other byte
/// unchanged, by one SSE2 signed compare: `A`..=`Z` moved to the bottom of
/// the signed range are the bytes below `i8::MIN + 26`.
#[cfg(target_arch = "x86_64")]
#[inline]
fn lowercase_ascii_group(group: [u8; 16]) -> [u8; 16] {
    use std::arch::x86_64::*;
    // SAFETY: SSE2 is part of the x86-64 baseline; the load and the store
    // read and write the 16 bytes of local arrays.
    unsafe {
        let v = _mm_loadu_si128(group.as_ptr().cast());
        let shifted = _mm_add_epi8(v, _mm_set1_epi8(0x80u8.wrapping_sub(b'A') as i8));
        let capitals = _mm_cmplt_epi8(shifted, _mm_set1_epi8((0x80u8 + 26) as i8));
        let lowered = _mm_or_si128(v, _mm_and_si128(capitals, _mm_set1_epi8(0x20)));
        let mut out = [0u8; 16];
        _mm_storeu_si128(out.as_mut_ptr().cast(), lowered);
        out
    }
}

/// Eight bytes with their ASCII capitals lowercased and every other byte
/// (non-ASCII ones included) unchanged. Each byte's low seven bits plus
/// 0x3f reach the high bit from `A` up, plus 0x25 from `[` up, and no sum
/// carries into the next byte; a capital (below 0x80) gains 0x20.
#[inline]
fn lowercase_ascii_word(word: u64) -> u64 {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x80 * ONES;
    let low = word & !HIGH;
    let from_a = low + 0x3f * ONES;
    let from_after_z = low + 0x25 * ONES;
    let capitals = from_a & !from_after_z & !word & HIGH;
    word | capitals >> 2
}

/// Whether `text` holds `via` (as `text.contains("via")`, without setting
/// up a substring searcher for a three-letter word).
fn holds_via(text: &str) -> bool {
    let bytes = text.as_bytes();
    let mut from = 0;
    while let Some(at) = find_byte(bytes, from, b'v') {
        if bytes[at + 1..].starts_with(b"ia") {
            return true;
        }
        from = at + 1;
    }
    false
}

/// Where the first `byte` at or after `from` in `bytes` is, if there is
/// one, 16 bytes at a time. On a tweet this is cheaper than a `memchr`,
/// whose every call costs about 60 instructions before it reads a byte,
/// and the rules look for `@` and `v` a few times a text.
#[inline]
fn find_byte(bytes: &[u8], from: usize, byte: u8) -> Option<usize> {
    let mut at = from;
    #[cfg(target_arch = "x86_64")]
    while let Some(group) = bytes.get(at..at + 16) {
        use std::arch::x86_64::*;
        // SAFETY: SSE2 is part of the x86-64 baseline, and the load reads
        // the 16 bytes of `group`.
        let found = unsafe {
            let v = _mm_loadu_si128(group.as_ptr().cast());
            _mm_movemask_epi8(_mm_cmpeq_epi8(v, _mm_set1_epi8(byte as i8)))
        };
        if found != 0 {
            return Some(at + found.trailing_zeros() as usize);
        }
        at += 16;
    }
    // The last fewer than 16 bytes: as the text's last 16, overlapping the
    // group before (or bytes before `from`), their bits below `at` dropped.
    // Byte by byte they cost about five instructions each.
    #[cfg(target_arch = "x86_64")]
    if at < bytes.len()
        && let Some(last) = bytes.last_chunk::<16>()
    {
        use std::arch::x86_64::*;
        // SAFETY: SSE2 is part of the x86-64 baseline, and the load reads
        // the 16 bytes of `last`.
        let found = unsafe {
            let v = _mm_loadu_si128(last.as_ptr().cast());
            _mm_movemask_epi8(_mm_cmpeq_epi8(v, _mm_set1_epi8(byte as i8)))
        };
        // `at` is past the text's first 16 bytes' start: the last 16
        // start at or before it (fewer than 16 bytes are left).
        let first = bytes.len() - 16;
        let found = found as u32 >> (at - first) << (at - first);
        return (found != 0).then(|| first + found.trailing_zeros() as usize);
    }
    let rest = bytes.get(at..)?;
    rest.iter().position(|&b| b == byte).map(|i| at + i)
}

/// Appends `text` to `out` with each URL replaced by its token (the
/// record's expansion, hashed) or by nothing (see the module
/// documentation).
fn push_without_urls(text: &str, urls: &[(Cow<'_, str>, Cow<'_, str>)], out: &mut String) {
    // URLs, before case folding: short links are case-sensitive keys.
    // (Each rule runs only where a cheap test says it can match.)
    // The scan for URLs goes on from the block where the test found the
    // first possible one.
    let mut last = 0;
    for found in first_url_block(text)
        .map(|(block, starts)| UrlSpans::from_block(text, block, starts))
        .into_iter()
        .flatten()
    {
        out.push_str(&text[last..found.start]);
        out.push(' ');
        let url = &text[found.clone()];
        if let Some(expanded) = expand(url, urls) {
            push_url_token(out, expanded);
            out.push(' ');
        }
        // A URL runs to the next space, so an ellipsis glued to its end
        // (`https://t.co/x...`, `https://t.co/x…`, a link cut short) is
        // in it: put it back after the link, where it says the text was
        // cut.
        if url.ends_with("...") || url.ends_with('…') {
            out.push_str("... ");
        }
        last = found.end;
    }
    out.push_str(&text[last..]);
}

/// Writes `text` (not all ASCII) into `out` in NFKC and lowercase, through
/// `text` itself as a second buffer.
fn fold_non_ascii(text: &mut String, out: &mut String) {
    // ASCII is already in both forms but for case, and most other text is
    // already NFKC: the quick check says so without building anything.
    // `…`, the one non-ASCII character of many truncated tweets, is
    // replaced by what NFKC makes of it first, which often leaves plain
    // ASCII.
    if text.contains('…') {
        let mut last = 0;
        for (at, _) in text.match_indices('…') {
            out.push_str(&text[last..at]);
            out.push_str("...");
            last = at + '…'.len_utf8();
        }
        out.push_str(&text[last..]);
        std::mem::swap(out, text);
        out.clear();
    }
    // (An ASCII text, as many are once `…` is gone, is copied and
    // lowercased by `fold_if_nfkc` as one ASCII run: a test of the whole
    // text first read its ASCII prefix twice.)
    if !fold_if_nfkc(text, out) {
        out.clear();
        text.nfkc().for_each(|c| push_lowercase(out, c));
    }
}

/// The pattern of a URL in a text, as a regex: `https?` then anything up to
/// white space (`http…` alone is a URL cut by truncation), or `www.` and a
/// host. The normaliser finds exactly its matches, faster, by a scan of its
/// own (`UrlSpans`); the tests check one against the other.
pub const URL_PATTERN: &str = r"(?i)\bhttps?(?::\S*|…)|\bwww\.[^\s.]+\.\S+";

/// Whether `text` holds `http` or `www.`, in any case: a test every text
/// with a URL passes, and most texts without one fail.
#[cfg(test)]
fn may_hold_url(text: &str) -> bool {
    first_url_block(text).is_some()
}

/// The first block of [`url_starts`] that has a place where `http` or
/// `www.` begins, and those places, if there is one.
fn first_url_block(text: &str) -> Option<(usize, u64)> {
    let bytes = text.as_bytes();
    let mut at = 0;
    while at + 3 < bytes.len() {
        let starts = url_starts(bytes, at);
        if starts != 0 {
            return Some((at, starts));
        }
        at += URL_STEP;
    }
    None
}

/// How far apart the blocks of [`url_starts`] are read: they overlap by 3
/// bytes, so that every four bytes in a row lie whole in some block.
const URL_STEP: usize = BLOCK - 3;

/// The mask of the places in the block of `bytes` at `at` where `http` or
/// `www.` begins, in any case, whole in the block (so at most bit
/// [`URL_STEP`] - 1): what [`url_starts_by_letters`] gives for
/// `&bytes[at..]`.
///
/// The four bytes of each place are compared at once, from four loads
/// of the text one byte apart, straight from the text: no block is
/// copied but for a text shorter than a block. A block that ends past the
/// text is read as the text's last [`BLOCK`] bytes, its mask shifted onto
/// `at` (a place's bit depends only on its own four bytes, and the places
/// whose four bytes do not fit in the text fall off the top, as they
/// would for the zero bytes that pad a copied block).
#[inline]
fn url_starts(bytes: &[u8], at: usize) -> u64 {
    if let Some(block) = bytes.get(at..).and_then(|rest| rest.first_chunk::<BLOCK>()) {
        url_starts_in(block)
    } else if let Some(last) = bytes.last_chunk::<BLOCK>() {
        // The text's last block starts at or before `at` here.
        let back = at.saturating_sub(bytes.len() - BLOCK);
        url_starts_in(last).checked_shr(back as u32).unwrap_or(0)
    } else {
        let mut block = [0u8; BLOCK];
        let rest = bytes.get(at..).unwrap_or_default();
        block[..rest.len()].copy_from_slice(rest);
        url_starts_in(&block)
    }
}

/// [`url_starts`] of a whole block: vector compares where there are, the
/// letters' masks elsewhere.
#[inline]
fn url_starts_in(block: &[u8; BLOCK]) -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the processor has AVX2 (checked just above).
            unsafe { url_x86::starts_avx2(block) }
        } else {
            url_x86::starts_sse2(block)
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        url_starts_by_letters(block)
    }
}

#[cfg(target_arch = "x86_64")]
/// [`url_starts_in`] with vector instructions: for a lane of places, the
/// block loaded at them and at the next three bytes, each load compared
/// with its letter of `http` (folded) and of `www.`, the compares joined
/// by `and`, one `movemask` a lane.
mod url_x86 {
    use super::BLOCK;
    use std::arch::x86_64::*;

    /// With SSE2 (the x86-64 baseline): four lanes of 16 places, the last
    /// starting at place 45 so that its loads end at the block's end (its
    /// first three places overlap the lane before, with the same bits).
    pub(super) fn starts_sse2(block: &[u8; BLOCK]) -> u64 {
        // SAFETY: SSE2 is part of the x86-64 baseline.
        unsafe { starts_sse2_enabled(block) }
    }

    #[target_feature(enable = "sse2")]
    fn starts_sse2_enabled(block: &[u8; BLOCK]) -> u64 {
        let case = _mm_set1_epi8(0x20);
        let eq = |x: __m128i, c: u8| _mm_cmpeq_epi8(x, _mm_set1_epi8(c as i8));
        let lane = |place: usize| {
            debug_assert!(place + 3 + 16 <= BLOCK);
            // SAFETY: every load reads 16 bytes from `place` + 3 at most,
            // which end inside the block (`place` is at most 45).
            let [b0, b1, b2, b3] = [0, 1, 2, 3]
                .map(|i| unsafe { _mm_loadu_si128(block.as_ptr().add(place + i).cast()) });
            let (f0, f1, f2) = (
                _mm_or_si128(b0, case),
                _mm_or_si128(b1, case),
                _mm_or_si128(b2, case),
            );
            let http = _mm_and_si128(
                _mm_and_si128(eq(f0, b'h'), eq(f1, b't')),
                _mm_and_si128(eq(f2, b't'), eq(_mm_or_si128(b3, case), b'p')),
            );
            let www = _mm_and_si128(
                _mm_and_si128(eq(f0, b'w'), eq(f1, b'w')),
                _mm_and_si128(eq(f2, b'w'), eq(b3, b'.')),
            );
            u64::from(_mm_movemask_epi8(_mm_or_si128(http, www)) as u16)
        };
        lane(0) | lane(16) << 16 | lane(32) << 32 | lane(45) << 45
    }

    /// With AVX2: two lanes of 32 places, the second starting at place 29
    /// so that its loads end at the block's end.
    ///
    /// # Safety
    /// The processor must have AVX2.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn starts_avx2(block: &[u8; BLOCK]) -> u64 {
        let case = _mm256_set1_epi8(0x20);
        let eq = |x: __m256i, c: u8| _mm256_cmpeq_epi8(x, _mm256_set1_epi8(c as i8));
        let lane = |place: usize| {
            debug_assert!(place + 3 + 32 <= BLOCK);
            // SAFETY: every load reads 32 bytes from `place` + 3 at most,
            // which end inside the block (`place` is at most 29).
            let [b0, b1, b2, b3] = [0, 1, 2, 3]
                .map(|i| unsafe { _mm256_loadu_si256(block.as_ptr().add(place + i).cast()) });
            let (f0, f1, f2) = (
                _mm256_or_si256(b0, case),
                _mm256_or_si256(b1, case),
                _mm256_or_si256(b2, case),
            );
            let http = _mm256_and_si256(
                _mm256_and_si256(eq(f0, b'h'), eq(f1, b't')),
                _mm256_and_si256(eq(f2, b't'), eq(_mm256_or_si256(b3, case), b'p')),
            );
            let www = _mm256_and_si256(
                _mm256_and_si256(eq(f0, b'w'), eq(f1, b'w')),
                _mm256_and_si256(eq(f2, b'w'), eq(b3, b'.')),
            );
            u64::from(_mm256_movemask_epi8(_mm256_or_si256(http, www)) as u32)
        };
        lane(0) | lane(29) << 29
    }
}

/// The mask of the places in the block at the start of `bytes` where
/// `http` or `www.` begins, in any case, whole in the block (so at most
/// bit [`URL_STEP`] - 1): the masks of the letters shifted onto the start
/// of the word they would spell. The portable [`url_starts_in`], and the
/// vector versions' reference.
#[cfg_attr(target_arch = "x86_64", cfg(test))]
fn url_starts_by_letters(bytes: &[u8]) -> u64 {
    let block = super::bitmap::Block::new(bytes);
    let (h, t, w) = (
        block.eq_ignoring_case(b'h'),
        block.eq_ignoring_case(b't'),
        block.eq_ignoring_case(b'w'),
    );
    // `htt` and `ww` are rare in words: most blocks end here.
    let htt = h & t >> 1 & t >> 2;
    let ww = w & w >> 1 & w >> 2;
    let mut starts = 0;
    if htt != 0 {
        starts |= htt & block.eq_ignoring_case(b'p') >> 3;
    }
    if ww != 0 {
        starts |= ww & block.eq(b'.') >> 3;
    }
    starts
}

/// The URLs of a text: the spans [`URL_PATTERN`] matches, leftmost first,
/// without overlaps, as `regex::Regex::find_iter` would give them.
///
/// A regex search has a fixed cost of several hundred instructions a call,
/// a large share of normalising a tweet. Every match begins with `http` or
/// `www.` in some case (the one non-ASCII letter that folds to one of the
/// pattern's, `ſ`, can only stand after them), so this scan takes the
/// places where those begin from the masks of [`url_starts`], block by
/// block, and checks the few bytes after each. (It visited every `h` and
/// `w` before, a `memchr` each, and ordinary words are full of them.)
#[derive(Debug)]
struct UrlSpans<'t> {
    text: &'t str,
    /// Where the next match may start (the end of the last one).
    at: usize,
    /// Where the current block starts, and its places still to try.
    block: usize,
    starts: u64,
}

impl<'t> UrlSpans<'t> {
    /// The scan of a whole text (the Preparer starts from
    /// [`first_url_block`]'s block instead, see [`UrlSpans::from_block`]).
    #[cfg(test)]
    fn new(text: &'t str) -> UrlSpans<'t> {
        let starts = if text.len() > 3 {
            url_starts(text.as_bytes(), 0)
        } else {
            0
        };
        UrlSpans {
            text,
            at: 0,
            block: 0,
            starts,
        }
    }

    /// The scan from the block at `block`, whose places where a match may
    /// start are `starts` (the blocks before it having none).
    fn from_block(text: &'t str, block: usize, starts: u64) -> UrlSpans<'t> {
        UrlSpans {
            text,
            at: 0,
            block,
            starts,
        }
    }

    /// The end of a match starting at `start`, if one does.
    fn match_at(&self, start: usize) -> Option<usize> {
        let text = self.text;
        let bytes = text.as_bytes();
        if text[..start].chars().next_back().is_some_and(is_word_char) {
            return None;
        }
        let folds_to = |at: usize, lower: &[u8]| {
            bytes.len() >= at + lower.len()
                && bytes[at..at + lower.len()]
                    .iter()
                    .zip(lower)
                    .all(|(&b, &l)| b | 0x20 == l)
        };
        if folds_to(start, b"http") {
            let mut at = start + 4;
            if let Some(c) = text[at..].chars().next()
                && matches!(c, 's' | 'S' | 'ſ')
            {
                at += c.len_utf8();
            }
            return if text[at..].starts_with(':') {
                Some(non_space_run_end(text, at + 1))
            } else if text[at..].starts_with('…') {
                Some(at + '…'.len_utf8())
            } else {
                None
            };
        }
        if folds_to(start, b"www") && bytes.get(start + 3) == Some(&b'.') {
            let host = start + 4;
            let dot = text[host..]
                .find(|c: char| c == '.' || c.is_whitespace())
                .map_or(text.len(), |i| host + i);
            if dot > host && bytes.get(dot) == Some(&b'.') {
                let end = non_space_run_end(text, dot + 1);
                return (end > dot + 1).then_some(end);
            }
        }
        None
    }
}

impl Iterator for UrlSpans<'_> {
    type Item = std::ops::Range<usize>;

    fn next(&mut self) -> Option<Self::Item> {
        let bytes = self.text.as_bytes();
        loop {
            while self.starts == 0 {
                self.block += URL_STEP;
                if self.block + 3 >= bytes.len() {
                    return None;
                }
                self.starts = url_starts(bytes, self.block);
            }
            let start = self.block + self.starts.trailing_zeros() as usize;
            self.starts &= self.starts - 1;
            if start < self.at {
                continue;
            }
            if let Some(end) = self.match_at(start) {
                self.at = end;
                return Some(start..end);
            }
        }
    }
}

/// Where the run of non-white-space characters starting at `at` ends.
///
/// Byte by byte: an ASCII byte is white space or not on its own (a URL is
/// nearly all ASCII), and only a non-ASCII character is decoded and looked
/// up. Decoding every character cost some 250 instructions a URL.
fn non_space_run_end(text: &str, at: usize) -> usize {
    let bytes = text.as_bytes();
    let mut i = at;
    while i < bytes.len() {
        // Sixteen bytes at a time past those that cannot end the run
        // (ASCII above the space: white space is the space, controls, or
        // not ASCII): a URL's bytes nearly all are, and going byte by byte
        // cost about seven instructions a byte.
        #[cfg(target_arch = "x86_64")]
        while let Some(group) = bytes.get(i..i + 16) {
            let stops = may_stop_a_run(group);
            if stops != 0 {
                i += stops.trailing_zeros() as usize;
                break;
            }
            i += 16;
        }
        let Some(&b) = bytes.get(i) else {
            break;
        };
        if b.is_ascii() {
            // `char::is_whitespace` on ASCII: also the vertical tab, which
            // `u8::is_ascii_whitespace` leaves out.
            if b.is_ascii_whitespace() || b == 0x0b {
                return i;
            }
            i += 1;
        } else {
            // `i` is on a character boundary: every byte before it on this
            // run was a whole ASCII character or a whole character skipped.
            let Some(c) = text[i..].chars().next() else {
                return i;
            };
            if c.is_whitespace() {
                return i;
            }
            i += c.len_utf8();
        }
    }
    bytes.len()
}

/// The mask of the bytes of `group` (16) that are the space, below it, or
/// not ASCII: those that may be (or begin) white space.
#[cfg(target_arch = "x86_64")]
#[inline]
fn may_stop_a_run(group: &[u8]) -> u32 {
    use std::arch::x86_64::*;
    debug_assert_eq!(group.len(), 16);
    // SAFETY: SSE2 is part of the x86-64 baseline, and the load reads the
    // 16 bytes of `group`.
    unsafe {
        let v = _mm_loadu_si128(group.as_ptr().cast());
        // As signed bytes, those not ASCII are negative: one compare.
        let stops = _mm_cmplt_epi8(v, _mm_set1_epi8(0x21));
        _mm_movemask_epi8(stops) as u32
    }
}

/// Whether `c` is a word character as a regex's Unicode `\w` (and so `\b`)
/// defines it.
fn is_word_char(c: char) -> bool {
    if c.is_ascii() {
        c.is_ascii_alphanumeric() || c == '_'
    } else {
        regex_syntax::is_word_character(c)
    }
}

/// `text` past its leading word characters (as
/// `text.trim_start_matches(is_word_char)`): ASCII bytes are judged on
/// their own (sixteen at a time by a vector mask while the text has that
/// many left), and only a non-ASCII character is decoded and looked up.
/// Mentions are nearly all ASCII, and the `str` trim decoded every
/// character through the closure, about 200 instructions a mention.
fn skip_word_chars(text: &str) -> &str {
    let bytes = text.as_bytes();
    let mut at = 0;
    while let Some(&b) = bytes.get(at) {
        if let Some(group) = bytes.get(at..).and_then(<[u8]>::first_chunk::<16>) {
            // ASCII word bytes sixteen at a time (a mention's name is at
            // most 15): byte by byte they cost some eight instructions
            // each. Then the byte that ends them is judged as below.
            let run = super::bitmap::word_group(group).trailing_ones() as usize;
            at += run;
            if run == 16 {
                continue;
            }
            let Some(&b) = bytes.get(at) else {
                break;
            };
            if b.is_ascii() {
                break;
            }
            let Some(c) = text.get(at..).and_then(|rest| rest.chars().next()) else {
                break;
            };
            if !regex_syntax::is_word_character(c) {
                break;
            }
            at += c.len_utf8();
        } else if b.is_ascii_alphanumeric() || b == b'_' {
            at += 1;
        } else if b.is_ascii() {
            break;
        } else {
            // `at` is on a character boundary: every byte before it was a
            // whole ASCII character or a whole character skipped.
            let Some(c) = text[at..].chars().next() else {
                break;
            };
            if !regex_syntax::is_word_character(c) {
                break;
            }
            at += c.len_utf8();
        }
    }
    &text[at..]
}

/// Appends `text` lowercased to `out` and returns true if `text` is already
/// NFKC; returns false, with `out` partly written, if it may not be.
///
/// Most text is ASCII, or mostly ASCII with a few accented letters or emoji:
/// ASCII runs are copied and lowercased in bulk, and only the runs of other
/// characters go through the Unicode tables, one character at a time. An
/// ASCII character is a starter that NFKC leaves alone, so the quick check
/// of the whole text is that of its non-ASCII runs taken one by one.
fn fold_if_nfkc(text: &str, out: &mut String) -> bool {
    let mut rest = text;
    while !rest.is_empty() {
        let ascii = ascii_prefix_len(rest.as_bytes());
        let start = out.len();
        out.push_str(&rest[..ascii]);
        // Sixteen bytes at a time: `make_ascii_lowercase` went byte by
        // byte (this read 15 instructions a message fewer).
        lowercase_ascii(&mut out[start..]);
        rest = &rest[ascii..];
        // Every byte of a non-ASCII character is non-ASCII: the run ends on
        // a character boundary.
        let other = rest
            .bytes()
            .position(|b| b.is_ascii())
            .unwrap_or(rest.len());
        let run = &rest[..other];
        // Curly quotes and emoji, most of the non-ASCII characters of
        // tweets, are copied as they are (see `is_plain`); the characters
        // between them go through the tables. A plain character is a
        // starter that the quick check allows, as an ASCII one is, so the
        // check of the run is that of the pieces between them.
        let mut piece = 0;
        for (at, c) in run.char_indices() {
            if is_plain(c) {
                if !fold_piece_if_nfkc(&run[piece..at], out) {
                    return false;
                }
                out.push(c);
                piece = at + c.len_utf8();
            }
        }
        if !fold_piece_if_nfkc(&run[piece..], out) {
            return false;
        }
        rest = &rest[other..];
    }
    true
}

/// Appends `piece` lowercased if the quick check says it is NFKC, and
/// returns whether it did.
#[inline]
fn fold_piece_if_nfkc(piece: &str, out: &mut String) -> bool {
    if piece.is_empty() {
        return true;
    }
    if is_nfkc_quick(piece.chars()) != IsNormalized::Yes {
        return false;
    }
    piece.chars().for_each(|c| push_lowercase(out, c));
    true
}

/// Whether `c` is a character that NFKC and lowercasing leave as they are,
/// and that the NFKC quick check allows as a starter (canonical combining
/// class 0): in the Basic Multilingual Plane by the Unicode tables, each
/// character's answer kept the first time it is asked ([`PLAIN_MEMO`]);
/// above it the main emoji blocks. A test checks each of them against the
/// tables.
#[inline]
fn is_plain(c: char) -> bool {
    let code = c as usize;
    let Some(word) = PLAIN_MEMO.get(code >> 5) else {
        return matches!(code, 0x1F300..=0x1F64F | 0x1F680..=0x1F6FF | 0x1F900..=0x1F9FF);
    };
    let shift = 2 * (code & 31);
    // Relaxed: an answer is the same whoever writes it, and nothing else
    // is published with it.
    let known = word.load(Ordering::Relaxed) >> shift;
    if known & KNOWN != 0 {
        return known & PLAIN != 0;
    }
    let plain = is_plain_by_the_tables(c);
    word.fetch_or((KNOWN | u64::from(plain)) << shift, Ordering::Relaxed);
    plain
}

/// Two bits a character of the Basic Multilingual Plane, 32 to a word:
/// [`KNOWN`] once its answer is kept, [`PLAIN`] if it is plain (see
/// [`is_plain`]).
///
/// Why: before it, each non-ASCII character other than curly quotes and
/// emoji cost the quick check and the lowercase of its piece of text (some
/// 400 instructions); here a kept answer is a few. The answers are kept as
/// they are asked for rather than built ahead: the tables take some 700
/// instructions a character, and a process meets a few hundred distinct
/// characters, not the 65,536 of the plane.
static PLAIN_MEMO: [AtomicU64; 0x1_0000 / 32] = [const { AtomicU64::new(0) }; 0x1_0000 / 32];

/// The bit of a character in [`PLAIN_MEMO`] that says its answer is kept.
const KNOWN: u64 = 2;

/// The bit of a character in [`PLAIN_MEMO`] that says it is plain.
const PLAIN: u64 = 1;

/// Whether `c` is plain (see [`is_plain`]), by the Unicode tables: the
/// slow answer the table holds.
fn is_plain_by_the_tables(c: char) -> bool {
    unicode_normalization::char::canonical_combining_class(c) == 0
        && is_nfkc_quick(std::iter::once(c)) == IsNormalized::Yes
        && (c.is_lowercase() || !c.is_alphabetic() || c.to_lowercase().eq(std::iter::once(c)))
}

/// The length of the longest all-ASCII prefix of `bytes`, found 16 bytes
/// at a time.
fn ascii_prefix_len(bytes: &[u8]) -> usize {
    const HIGH_BITS: u128 = u128::from_le_bytes([0x80; 16]);
    // The place of the first byte with its high bit set in a chunk whose
    // high bits are `high` (not zero), read little-endian.
    let first_high = |high: u128| (high.trailing_zeros() / 8) as usize;
    let (chunks, rest) = bytes.as_chunks::<16>();
    for (i, chunk) in chunks.iter().enumerate() {
        let high = u128::from_le_bytes(*chunk) & HIGH_BITS;
        if high != 0 {
            return 16 * i + first_high(high);
        }
    }
    if rest.is_empty() {
        return bytes.len();
    }
    // The last fifteen or fewer as the text's last sixteen, overlapping the
    // chunks before (all ASCII, so their high bits are clear): byte by
    // byte they cost some four instructions each.
    if let Some(last) = bytes.last_chunk::<16>() {
        let high = u128::from_le_bytes(*last) & HIGH_BITS;
        return if high == 0 {
            bytes.len()
        } else {
            bytes.len() - 16 + first_high(high)
        };
    }
    rest.iter()
        .position(|b| !b.is_ascii())
        .unwrap_or(rest.len())
}

/// [`ascii_prefix_len`] as it was: whole chunks, then byte by byte. The
/// reference it is tested against.
#[cfg(test)]
fn ascii_prefix_len_bytewise(bytes: &[u8]) -> usize {
    bytes
        .iter()
        .position(|b| !b.is_ascii())
        .unwrap_or(bytes.len())
}

/// Appends `c` lowercased (Unicode lowercase; ASCII without a table).
#[inline]
fn push_lowercase(out: &mut String, c: char) {
    if c.is_ascii() {
        out.push(c.to_ascii_lowercase());
    } else if c.is_lowercase() || !c.is_alphabetic() {
        out.push(c);
    } else {
        out.extend(c.to_lowercase());
    }
}

/// The pattern of a `via @user` credit that ends a text, as a regex;
/// `trailing_via_credit` finds where its match starts.
pub const VIA_CREDIT_PATTERN: &str = r"[(\[]?\bvia\s+@\w+[)\]]?[\s.:]*$";

/// The pattern of a `via @user` credit that begins a text, as a regex;
/// `leading_via_credit` finds where its match ends.
pub const LEADING_VIA_CREDIT_PATTERN: &str = r"^\s*[(\[]?via\s+@\w+[)\]]?\s*:?";

/// Where the match of [`VIA_CREDIT_PATTERN`] starts, if `text` has one.
/// After the mention's word characters only a bracket, white space, dots
/// and colons may follow, so its `@` is the text's last: the credit is read
/// forward from it to the end, and back from it to `via` standing as a word
/// (and one bracket before it, where the leftmost match starts).
fn trailing_via_credit(text: &str) -> Option<usize> {
    let mention = text.rfind('@')?;
    let after = &text[mention + 1..];
    let name = skip_word_chars(after);
    if name.len() == after.len() {
        return None;
    }
    let tail = name.strip_prefix([')', ']']).unwrap_or(name);
    if !tail
        .chars()
        .all(|c| c.is_whitespace() || c == '.' || c == ':')
    {
        return None;
    }
    let before = &text[..mention];
    let spaced = before.trim_end_matches(char::is_whitespace);
    if spaced.len() == before.len() {
        return None;
    }
    let head = spaced.strip_suffix("via")?;
    if head.chars().next_back().is_some_and(is_word_char) {
        return None;
    }
    Some(head.strip_suffix(['(', '[']).unwrap_or(head).len())
}

/// Where the match of [`LEADING_VIA_CREDIT_PATTERN`] ends, if `text` begins
/// with one: read forward, each part of the pattern in turn (none of them
/// can take a character the next one needs).
fn leading_via_credit(text: &str) -> Option<usize> {
    let rest = text.trim_start_matches(char::is_whitespace);
    let rest = rest.strip_prefix(['(', '[']).unwrap_or(rest);
    let rest = rest.strip_prefix("via")?;
    let spaced = rest.trim_start_matches(char::is_whitespace);
    if spaced.len() == rest.len() {
        return None;
    }
    let name = spaced.strip_prefix('@')?;
    let rest = skip_word_chars(name);
    if rest.len() == name.len() {
        return None;
    }
    let rest = rest.strip_prefix([')', ']']).unwrap_or(rest);
    let rest = rest.trim_start_matches(char::is_whitespace);
    let rest = rest.strip_prefix(':').unwrap_or(rest);
    Some(text.len() - rest.len())
}

/// The pattern of a truncation (an ellipsis that ends the text, and the cut
/// word glued to it), as a regex; `cut_truncated_word` removes its match.
pub const TRUNCATION_PATTERN: &str = r"\S*\.\.\.+\s*$";

/// Removes what [`TRUNCATION_PATTERN`] matches in a text that ends in `...`.
/// Its leftmost match then starts after the last white space: what
/// follows is all non-white-space, `\S*` and the dots, and the pattern
/// allows no white space before the dots. An end-anchored regex search costs
/// more than a thousand instructions a cut text; this is one backward scan.
///
/// A hashtag cut short was one of a run at the text's end, and the
/// hashtags left of that run go too: the tokeniser makes a run of three
/// or more one token (see `tokenise`), so what is left of a cut run (one
/// or two hashtags, words) is in no text that has the whole run.
fn cut_truncated_word(text: &mut String) {
    debug_assert!(text.ends_with("..."));
    let kept = text.trim_end_matches(|c: char| !c.is_whitespace()).len();
    let mut run = kept;
    if text[kept..].starts_with('#') {
        loop {
            let before = text[..run].trim_end();
            let word = before.trim_end_matches(|c: char| !c.is_whitespace()).len();
            if word == before.len() || !before[word..].starts_with('#') {
                break;
            }
            run = word;
        }
    }
    // A text of hashtags only keeps them: two such texts are compared by
    // what is left of them, as any other cut texts are.
    let kept = if text[..run].trim_end().is_empty() {
        kept
    } else {
        run
    };
    text.truncate(kept);
}

/// The pattern of a retweet marker in a lowercased text, as a regex:
/// `rt` or `mt` as a word, an optional colon between white space, and a
/// mention with an optional colon after it. The normaliser finds exactly
/// its matches by a scan of its own (`RetweetMarkers`); the tests
/// check one against the other.
pub const RETWEET_MARKER_PATTERN: &str = r"\b(?:rt|mt)\b\s*:?\s*@\w+\s*:?";

/// Replaces every retweet marker in `text` by a space, through `scratch`,
/// without allocating when there is none (most texts: one `memchr` for
/// `@`).
fn remove_retweet_markers(text: &mut String, scratch: &mut String) {
    let mut last = 0;
    let mut found = false;
    for span in RetweetMarkers::new(text) {
        if !found {
            scratch.clear();
            found = true;
        }
        scratch.push_str(&text[last..span.start]);
        scratch.push(' ');
        last = span.end;
    }
    if found {
        scratch.push_str(&text[last..]);
        std::mem::swap(text, scratch);
    }
}

/// Removes the markers of old-style quoted retweets from a lowercased text,
/// as retweet markers are removed (see [`remove_retweet_markers`]): an
/// opening quote mark (`"` or `“`) followed by a mention and an optional
/// colon (`Stay safe! “@user: Flooding closes …”`), with a `rt` or `mt`
/// (and a colon) standing before it (`RT "@user: …`), and a `rt` or `rt:`
/// standing before a quote mark alone (`RT: "…"`). A comment and a quoted
/// copy then hold the same words as the original and are found as a copy
/// with a comment. Returns whether it found one (the caller then drops the
/// closing quote mark that ends the text).
fn remove_quote_markers(text: &mut String, scratch: &mut String) -> bool {
    let mut spans: Vec<std::ops::Range<usize>> = Vec::new();
    // The quote marks are found by their bytes (a `"`, or the first byte
    // of `“`, 0xe2, which only ever begins a character): decoding every
    // character of the text to find them cost about four instructions a
    // character.
    for at in memchr::memchr2_iter(b'"', 0xe2, text.as_bytes()) {
        let quote = if text.as_bytes()[at] == b'"' {
            '"'
        } else if text[at..].starts_with('\u{201c}') {
            '\u{201c}'
        } else {
            continue;
        };
        let after = at + quote.len_utf8();
        // Back over white space and a colon to a `rt` or `mt` word.
        let before = text[..at].trim_end_matches(char::is_whitespace);
        let before = before.strip_suffix(':').unwrap_or(before);
        let before = before.trim_end_matches(char::is_whitespace);
        let marker = before
            .strip_suffix("rt")
            .or_else(|| before.strip_suffix("mt"))
            .filter(|head| !head.chars().next_back().is_some_and(is_word_char))
            .map(str::len);
        let rest = &text[after..];
        let end = match rest.strip_prefix('@') {
            Some(name) => {
                let tail = skip_word_chars(name);
                if tail.len() == name.len() {
                    continue;
                }
                let tail = tail.strip_prefix(':').unwrap_or(tail);
                text.len() - tail.len()
            }
            None if marker.is_some() => after,
            None => continue,
        };
        let start = marker.unwrap_or(at);
        if spans.last().is_none_or(|last| last.end <= start) {
            spans.push(start..end);
        }
    }
    if spans.is_empty() {
        return false;
    }
    scratch.clear();
    let mut last = 0;
    for span in &spans {
        scratch.push_str(&text[last..span.start]);
        scratch.push(' ');
        last = span.end;
    }
    scratch.push_str(&text[last..]);
    std::mem::swap(text, scratch);
    true
}

/// The retweet markers of a lowercased text: the spans
/// [`RETWEET_MARKER_PATTERN`] matches, leftmost first, without overlaps, as
/// `regex::Regex::find_iter` gives them.
///
/// A regex search costs about a thousand instructions a text that holds a
/// marker; this scan costs a search for `@` (see `find_byte`) and a few
/// steps an `@`. Every match holds exactly one `@` (nothing else in the
/// pattern can be one), so matches are found from their `@`s, in order:
/// back from it over white space, one optional colon and white space to
/// `rt` or `mt` standing as a word, then forward over the mention's word
/// characters, white space and one optional colon. Both ways the pattern
/// reads one way only: white space and colons are not word characters,
/// nor `@`.
struct RetweetMarkers<'t> {
    text: &'t str,
    /// Where the next match may start (the end of the last one).
    at: usize,
    /// Where to look for the next `@`.
    next: usize,
}

impl<'t> RetweetMarkers<'t> {
    fn new(text: &'t str) -> RetweetMarkers<'t> {
        RetweetMarkers {
            text,
            at: 0,
            next: 0,
        }
    }

    /// The match whose `@` is at `mention`, if there is one.
    fn match_at(&self, mention: usize) -> Option<std::ops::Range<usize>> {
        let text = self.text;
        // Most `@`s are mentions in running text. Back over ASCII white
        // space and colons (more than the pattern allows: this only rules
        // out), a marker needs a `t` or a non-ASCII character (which may be
        // white space): anything else fails without the scans below.
        let bytes = text.as_bytes();
        let mut back = mention;
        while back > 0
            && matches!(
                bytes[back - 1],
                b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c | b':'
            )
        {
            back -= 1;
        }
        if back == 0 || (bytes[back - 1].is_ascii() && bytes[back - 1] != b't') {
            return None;
        }
        // Back: `\s*`, `:?`, `\s*`, then `rt` or `mt` as a word.
        let before = trim_white_end(&text[..mention]);
        let before = before.strip_suffix(':').unwrap_or(before);
        let before = trim_white_end(before);
        let marker = before
            .strip_suffix("rt")
            .or_else(|| before.strip_suffix("mt"))?;
        let start = marker.len();
        if start < self.at || marker.chars().next_back().is_some_and(is_word_char) {
            return None;
        }
        // Forward: `\w+`, `\s*`, `:?`.
        let after = &text[mention + 1..];
        let name = skip_word_chars(after);
        if name.len() == after.len() {
            return None;
        }
        let rest = trim_white_start(name);
        let rest = rest.strip_prefix(':').unwrap_or(rest);
        Some(start..text.len() - rest.len())
    }
}

/// `text.trim_end_matches(char::is_whitespace)`, ASCII bytes judged on
/// their own: `str`'s trim decodes every character, some 30 instructions
/// each, and the white space round a mention is nearly always ASCII.
fn trim_white_end(text: &str) -> &str {
    let bytes = text.as_bytes();
    let mut end = bytes.len();
    while let Some(&b) = end.checked_sub(1).and_then(|last| bytes.get(last)) {
        if matches!(b, b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c) {
            end -= 1;
        } else if b.is_ascii() {
            break;
        } else {
            // `end` is on a character boundary: only whole ASCII
            // characters were cut.
            return text[..end].trim_end_matches(char::is_whitespace);
        }
    }
    &text[..end]
}

/// `text.trim_start_matches(char::is_whitespace)`, ASCII bytes judged on
/// their own (see [`trim_white_end`]).
fn trim_white_start(text: &str) -> &str {
    let bytes = text.as_bytes();
    let mut start = 0;
    while let Some(&b) = bytes.get(start) {
        if matches!(b, b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c) {
            start += 1;
        } else if b.is_ascii() {
            break;
        } else {
            return text[start..].trim_start_matches(char::is_whitespace);
        }
    }
    &text[start..]
}

impl Iterator for RetweetMarkers<'_> {
    type Item = std::ops::Range<usize>;

    fn next(&mut self) -> Option<Self::Item> {
        while let Some(mention) = find_byte(self.text.as_bytes(), self.next, b'@') {
            self.next = mention + 1;
            if let Some(span) = self.match_at(mention) {
                self.at = span.end;
                self.next = span.end;
                return Some(span);
            }
        }
        None
    }
}

/// The expansion of a short URL found in the text, if the record has one.
/// Tolerates punctuation glued to the end of the link in the text.
fn expand<'u>(found: &str, urls: &'u [(Cow<'_, str>, Cow<'_, str>)]) -> Option<&'u str> {
    let mut candidate = found;
    loop {
        if let Some((_, long)) = urls.iter().find(|(short, _)| short == candidate) {
            return Some(long);
        }
        let trimmed = candidate.trim_end_matches(|c: char| c.is_ascii_punctuation() && c != '/');
        if trimmed.len() == candidate.len() || trimmed.is_empty() {
            return None;
        }
        candidate = trimmed;
    }
}

/// Appends one word standing for `url`: `url` and 16 hex digits of a hash of
/// its canonical form (no scheme, no `www.`, no fragment, no trailing slash,
/// lowercase host), so two spellings of one address give one token.
fn push_url_token(out: &mut String, url: &str) {
    // Byte scans rather than `str` patterns: `split_once("://")` alone set
    // up a two-way searcher for every link, and the searches cost more than
    // the hash. (`find_byte`, not `memchr`, whose calls cost about 46
    // instructions each on a link's few dozen bytes.) Every byte looked for
    // is ASCII, so every cut is on a character boundary.
    let rest = &url[after_scheme(url)..];
    let rest = rest.strip_prefix("www.").unwrap_or(rest);
    let rest = &rest[..find_byte(rest.as_bytes(), 0, b'#').unwrap_or(rest.len())];
    let rest = rest.trim_end_matches('/');
    let (host, path) = match find_byte(rest.as_bytes(), 0, b'/') {
        Some(slash) => (&rest[..slash], &rest[slash + 1..]),
        None => (rest, ""),
    };
    let hash = if host.len() < rest.len() && !host.bytes().any(|b| b.is_ascii_uppercase()) {
        // The key is `rest` as it stands (host, `/`, path): no copy.
        xxh3_64_with_seed(rest.as_bytes(), URL_SEED)
    } else {
        // The key is the host lowercased, `/` and the path: built on the
        // stack when it fits (most links), not in a new string.
        let len = host.len() + 1 + path.len();
        let mut stack = [0u8; 256];
        let mut heap = Vec::new();
        let key = if len <= stack.len() {
            &mut stack[..len]
        } else {
            heap.resize(len, 0);
            &mut heap[..]
        };
        key[..host.len()].copy_from_slice(host.as_bytes());
        key[..host.len()].make_ascii_lowercase();
        key[host.len()] = b'/';
        key[host.len() + 1..].copy_from_slice(path.as_bytes());
        xxh3_64_with_seed(key, URL_SEED)
    };
    // `format!("url{hash:016x}")`, without the formatting machinery.
    let mut token = *b"url0000000000000000";
    token[3..11].copy_from_slice(&hex_digits((hash >> 32) as u32));
    token[11..].copy_from_slice(&hex_digits(hash as u32));
    // SAFETY: `url` and hex digits are ASCII, so the bytes are UTF-8 (a
    // checked conversion cost about 60 instructions a link).
    out.push_str(unsafe { std::str::from_utf8_unchecked(&token) });
}

/// The eight lowercase hex digits of `x`, most significant first (as
/// `format!("{x:08x}")` writes them), computed in a `u64` a digit a byte:
/// a digit at a time through a table cost about 80 instructions a link.
fn hex_digits(x: u32) -> [u8; 8] {
    const ONES: u64 = 0x0101_0101_0101_0101;
    // Spread the nibbles, least significant in the lowest byte.
    let x = u64::from(x);
    let x = (x & 0xffff_0000) << 16 | (x & 0xffff);
    let x = (x & 0x0000_ff00_0000_ff00) << 8 | (x & 0x0000_00ff_0000_00ff);
    let x = (x & 0x00f0_00f0_00f0_00f0) << 4 | (x & 0x000f_000f_000f_000f);
    // A nibble of 10 or more reaches 16 with 6 added: it is a letter, and
    // takes `a` - `0` - 10 more. No byte's sum carries into the next.
    let letters = (x + 6 * ONES) >> 4 & ONES;
    let digits = x + u64::from(b'0') * ONES + letters * u64::from(b'a' - b'0' - 10);
    digits.to_be_bytes()
}

/// Where what follows the first `://` of `url` starts (0 if it has none),
/// as `url.split_once("://")` would cut it.
fn after_scheme(url: &str) -> usize {
    let bytes = url.as_bytes();
    let mut from = 0;
    while let Some(colon) = find_byte(bytes, from, b':') {
        if bytes[colon + 1..].starts_with(b"//") {
            return colon + 3;
        }
        from = colon + 1;
    }
    0
}

#[cfg(test)]
mod tests {
    use super::*;
    use regex::Regex;

    fn norm(text: &str) -> String {
        norm_with(text, &[])
    }

    fn norm_with(text: &str, urls: &[(&str, &str)]) -> String {
        let urls: Vec<_> = urls
            .iter()
            .map(|(a, b)| (Cow::Borrowed(*a), Cow::Borrowed(*b)))
            .collect();
        let mut out = String::new();
        let mut scratch = String::new();
        Normaliser::new().normalise_into(text, &urls, &mut out, &mut scratch);
        out.split_whitespace().collect::<Vec<_>>().join(" ")
    }

    #[test]
    fn quoted_retweet_markers_go_as_retweet_markers_do() {
        // Examples of the form from CrisisLex T26 (issue 39).
        assert_eq!(
            norm("Stay safe! \u{201c}@user: Flooding closes the coastal road\u{201d}"),
            "stay safe! flooding closes the coastal road"
        );
        assert_eq!(
            norm(
                "\u{201c}@newsfromitaly: #Earthquake hits northern #Italy 3 deaths confirmed\u{201d} i've heard 4 so far :("
            ),
            "#earthquake hits northern #italy 3 deaths confirmed\u{201d} i've heard 4 so far :("
        );
        assert_eq!(norm("so true \"@bob: hello world\""), "so true hello world");
        assert_eq!(norm("RT \"@bob: hello world\""), "hello world");
        assert_eq!(norm("RT: \"hello world\""), "hello world");
        assert_eq!(
            norm("RT @a: \u{201c}@b: the quick brown fox\u{201d}"),
            "the quick brown fox"
        );
        // A quote cut short is known to be cut: the ellipsis is inside it.
        let mut out = String::new();
        let cut = Normaliser::new().normalise_into(
            "wow \u{201c}@bob: the quick brown fox jum\u{2026}\u{201d}",
            &[],
            &mut out,
            &mut String::new(),
        );
        assert!(cut);
        assert_eq!(
            out.split_whitespace().collect::<Vec<_>>(),
            ["wow", "the", "quick", "brown", "fox"]
        );
        // Quotes that are not retweets stay as they are.
        assert_eq!(norm("she said \"start now\""), "she said \"start now\"");
        assert_eq!(norm("\"@ is a sign\""), "\"@ is a sign\"");
    }

    #[test]
    fn retweet_markers_go_wherever_they_stand() {
        assert_eq!(norm("RT @alice: hello world"), "hello world");
        assert_eq!(norm("RT: @alice hello world"), "hello world");
        assert_eq!(norm("RT @alice: RT @bob: hello world"), "hello world");
        assert_eq!(norm("MT @alice: hello world"), "hello world");
        assert_eq!(
            norm("so true RT @alice: hello world"),
            "so true hello world"
        );
        assert_eq!(norm("hello world via @alice"), "hello world");
        assert_eq!(norm("hello world (via @alice)"), "hello world");
        assert_eq!(norm("via @alice: hello world"), "hello world");
        assert_eq!(norm("(via @alice) hello world"), "hello world");
        assert_eq!(norm("hello via @alice world"), "hello via @alice world");
        // `rt` without a mention is a word.
        assert_eq!(norm("art rt is fun"), "art rt is fun");
    }

    #[test]
    fn urls_become_their_expansion_or_nothing() {
        let a = norm_with(
            "read this https://t.co/AAA",
            &[("https://t.co/AAA", "https://example.com/story/")],
        );
        let b = norm_with(
            "read this https://t.co/BBB.",
            &[("https://t.co/BBB", "http://www.example.com/story")],
        );
        assert_eq!(a, b);
        assert!(a.starts_with("read this url"));
        assert_eq!(norm("read this https://t.co/xyz"), "read this");
        assert_eq!(norm("read this http://t.co/x…"), "read this");
        assert_eq!(norm("read this http…"), "read this");
        // The pattern ignores case, and so must the test for whether a text
        // may hold a URL at all.
        assert_eq!(norm("READ THIS HTTPS://T.CO/XYZ"), "read this");
        assert_eq!(norm("Read this Http://t.co/xyz"), "read this");
        assert_eq!(norm("visit WWW.EXAMPLE.COM today"), "visit today");
    }

    #[test]
    fn entities_case_and_compatibility_forms_fold() {
        assert_eq!(norm("Tom &amp; Jerry"), "tom & jerry");
        assert_eq!(
            norm("Tom &amp;amp; Jerry &#8230; &lt;3"),
            "tom & jerry ... <3"
        );
        assert_eq!(norm("ＨＥＬＬＯ Ｗｏｒｌｄ"), "hello world");
        assert_eq!(norm("ÉCOLE"), "école");
    }

    #[test]
    fn truncation_loses_the_cut_word() {
        assert_eq!(norm("the quick brown fox jum…"), "the quick brown fox");
        assert_eq!(
            norm("RT @a: the quick brown fox jum…"),
            "the quick brown fox"
        );
        assert_eq!(norm("the quick brown fox ..."), "the quick brown fox");
        // The ellipsis short cut gives what NFKC gives, beside other
        // non-ASCII text too.
        assert_eq!(norm("Ｃafé… au lait…"), "café... au");
        assert_eq!(norm("e\u{301}…x"), "é...x");
    }

    // Issue 39: a cut copy of a text that ends in a run of hashtags kept
    // one or two of them as words, which the whole run (one token) lacks,
    // and a short text from far back was refused for it (dev-200k).
    #[test]
    fn a_hashtag_run_cut_short_goes_with_the_cut_word() {
        assert_eq!(
            norm("Quick question: she was meeting the first shop? #javascript #worldcup..."),
            "quick question: she was meeting the first shop?"
        );
        assert_eq!(
            norm("RT @x: Prayers for quake victims #cebu #bohol #Philippines…"),
            "prayers for quake victims"
        );
        // A cut word that is not a hashtag leaves the hashtags before it.
        assert_eq!(
            norm("A tribute to #Calgary #yyc and the fl…"),
            "a tribute to #calgary #yyc and the"
        );
        // Hashtags only: what is left of them stays.
        assert_eq!(norm("#cloudy #clouds #sky #bird…"), "#cloudy #clouds #sky");
        // Not cut: nothing goes.
        assert_eq!(
            norm("Donald are supporting this night! #love #happy"),
            "donald are supporting this night! #love #happy"
        );
    }

    /// Regression (issue 12): a text cut just after a link (`...` glued to
    /// it) lost its ellipsis inside the link, so it was not known to be
    /// cut, and a later text holding it with more after was taken for a
    /// copy with a comment added.
    #[test]
    fn an_ellipsis_glued_to_a_link_still_says_cut() {
        let cut = |text: &str, urls: &[(&str, &str)]| {
            let urls: Vec<_> = urls
                .iter()
                .map(|(a, b)| (Cow::Borrowed(*a), Cow::Borrowed(*b)))
                .collect();
            let (mut out, mut scratch) = (String::new(), String::new());
            let cut = Normaliser::new().normalise_into(text, &urls, &mut out, &mut scratch);
            (out.split_whitespace().collect::<Vec<_>>().join(" "), cut)
        };
        let link = [("https://t.co/Bnu1VtynOk", "https://youtube.com/watch?v=C7")];
        let (text, was_cut) = cut("I added a video https://t.co/Bnu1VtynOk...", &link);
        assert!(was_cut);
        assert_eq!(
            text,
            cut("I added a video https://t.co/Bnu1VtynOk", &link).0
        );
        assert!(cut("I added a video https://t.co/Bnu1Vt…", &[]).1);
        assert!(cut("a cut link http…", &[]).1);
        // Not at the end: a pause, not a cut.
        let (text, was_cut) = cut("see https://t.co/Bnu1VtynOk... and more", &link);
        assert!(!was_cut);
        assert!(text.ends_with("and more"), "{text}");
        assert!(!cut("I added a video https://t.co/Bnu1VtynOk", &link).1);
    }

    /// The URL token as it was first written: a key built in a new string,
    /// formatted with `format!`.
    fn reference_url_token(url: &str) -> String {
        let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
        let rest = rest.strip_prefix("www.").unwrap_or(rest);
        let rest = rest.split('#').next().unwrap_or(rest);
        let rest = rest.trim_end_matches('/');
        let (host, path) = rest.split_once('/').unwrap_or((rest, ""));
        let mut key = host.to_ascii_lowercase();
        key.push('/');
        key.push_str(path);
        format!("url{:016x}", xxh3_64_with_seed(key.as_bytes(), URL_SEED))
    }

    #[test]
    fn url_tokens_are_the_reference_tokens() {
        for url in [
            "https://example.com/story/",
            "http://www.Example.COM/story#x",
            "https://example.com",
            "example.com/",
            "https://a.b/c/d/",
            "",
            "/",
            "https://x.y/é?q=1",
        ] {
            let mut out = String::new();
            push_url_token(&mut out, url);
            assert_eq!(out, reference_url_token(url), "{url}");
        }
    }

    proptest::proptest! {
        #[test]
        fn url_tokens_match_the_reference_on_any_url(url in "[a-z:/#]{0,3}(https?://)?(www\\.)?[a-zA-Z.:]{0,8}(/[a-zA-Z/#:é]{0,8})?[a-zA-Z]{0,300}") {
            let mut out = String::new();
            push_url_token(&mut out, &url);
            proptest::prop_assert_eq!(out, reference_url_token(&url));
        }
    }

    /// Pieces of tweets: words, mentions, hashtags, retweet markers and
    /// credits, links (some with an expansion, see [`TWEET_URLS`]),
    /// ellipses, entities, quote marks, emoji, combining marks, full-width
    /// and other case-folding letters, CJK, odd white space.
    fn tweet_piece(ascii_only: bool) -> proptest::strategy::BoxedStrategy<String> {
        use proptest::prelude::*;
        let ascii = prop_oneof![
            "[a-zA-Z0-9_]{1,8}",
            "[0-9]{1,4}",
            "[ \t\n\r\x0b\x0c]{1,2}",
            "@[a-zA-Z0-9_]{1,6}:?",
            "#[a-zA-Z0-9_]{1,6}",
            r"(RT|rt|Rt|MT|mt|RT:|via|VIA|\(via|\[via|\)|\])",
            "https?://t\\.co/(abc|ABC|xyz|q)(\\.\\.\\.)?",
            "(www\\.[a-z]{1,5}\\.com|HTTP://X\\.Y/z|http:|https|www\\.|httpx)",
            "(\\.\\.\\.|\\.\\.|\\.\\.\\.\\.)",
            "(&amp;|&lt;|&gt;|&#8230;|&amp;amp;|&quot;|&#64;|&nbsp;|&)",
            "[\"'.,!?:;()+\\-/*]",
        ];
        if ascii_only {
            return ascii.boxed();
        }
        prop_oneof![
            4 => ascii,
            1 => "[\u{a0}\u{3000}\u{85}\u{2028}\u{1680}\u{180e}\u{200b}]",
            1 => "[\u{2026}\u{201c}\u{201d}\u{2018}\u{2019}\u{ff02}\u{ff20}\u{ff03}]",
            1 => "[😀🚀🤔\u{1f1ef}\u{1f1f5}\u{fe0f}\u{200d}\u{301}\u{316}]",
            1 => "[ÉéÅﬁẞİΣσςſＨＥＬＬＯｗ①²ǅ]{1,3}",
            1 => "[日本語はカーﾊﾟ々]{1,3}",
            1 => "\\PC{1,3}",
        ]
        .boxed()
    }

    /// The short links of [`tweet_piece`] that the record expands.
    const TWEET_URLS: [(&str, &str); 3] = [
        ("https://t.co/abc", "https://example.com/story/"),
        ("http://t.co/ABC", "http://www.Example.com/story"),
        ("https://t.co/q", "https://example.org/q?x=1#frag"),
    ];

    /// Normalises and tokenises `text` as the Preparer does, and as the
    /// stages did before the ASCII paths (the oracle), and compares the
    /// normal forms, the cut flags and the token hashes.
    fn same_as_the_reference(text: &str) -> Result<(), proptest::test_runner::TestCaseError> {
        use crate::engine::tokenise::Tokeniser;
        use crate::engine::{Preparer, Scratch, config::EngineConfig};
        let urls: Vec<_> = TWEET_URLS
            .iter()
            .map(|&(a, b)| (Cow::Borrowed(a), Cow::Borrowed(b)))
            .collect();
        let (mut reference, mut spare) = (String::new(), String::new());
        let cut =
            Normaliser::new().normalise_into_reference(text, &urls, &mut reference, &mut spare);
        let mut tokens = Vec::new();
        Tokeniser::new().tokenise(&reference, &mut tokens, None);

        let (mut out, mut scratch) = (String::new(), String::new());
        let normalised = Normaliser::new().normalise(text, &urls, &mut out, &mut scratch);
        proptest::prop_assert_eq!(&out, &reference);
        proptest::prop_assert_eq!(normalised.truncated, cut);
        proptest::prop_assert!(!normalised.ascii || out.is_ascii());
        proptest::prop_assert!(!normalised.hashless || !out.contains('#'));
        // An ASCII text takes the ASCII path (entities may decode to
        // anything, so a text with an `&` may or may not).
        if text.is_ascii() && !text.contains('&') {
            proptest::prop_assert!(normalised.ascii);
        }

        let preparer = Preparer::new(&EngineConfig::default());
        let mut scratch = Scratch::default();
        let (mut shingles, mut keys) = (Vec::new(), Vec::new());
        // Twice, so that the reused buffers are seen holding another text.
        for _ in 0..2 {
            preparer.sketch_into(text, &urls, &mut scratch, &mut shingles, &mut keys);
            proptest::prop_assert_eq!(&scratch.normalised, &reference);
            proptest::prop_assert_eq!(scratch.truncated, cut);
            if !tokens.is_empty() {
                proptest::prop_assert_eq!(&scratch.tokens, &tokens);
            }
        }
        Ok(())
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2_000))]

        #[test]
        fn tweets_normalise_and_tokenise_as_the_reference(
            pieces in proptest::collection::vec(tweet_piece(false), 0..24)
        ) {
            same_as_the_reference(&pieces.concat())?;
        }

        #[test]
        fn ascii_tweets_normalise_and_tokenise_as_the_reference(
            pieces in proptest::collection::vec(tweet_piece(true), 0..40)
        ) {
            same_as_the_reference(&pieces.concat())?;
        }

        #[test]
        fn holds_via_is_contains_via(text in "(v|i|a|vi|ia|via|é|x| ){0,12}") {
            proptest::prop_assert_eq!(holds_via(&text), text.contains("via"));
        }

        #[test]
        fn any_text_normalises_and_tokenises_as_the_reference(text in proptest::prelude::any::<String>()) {
            same_as_the_reference(&text)?;
        }
    }

    proptest::proptest! {
        /// `find_byte` finds what `memchr` finds, from every place of any
        /// bytes (short and long, the byte absent, once, often).
        #[test]
        fn bytes_are_found_where_memchr_finds_them(
            bytes in proptest::collection::vec(proptest::prop_oneof![
                proptest::prelude::Just(b'@'),
                proptest::prelude::Just(b'v'),
                proptest::prelude::any::<u8>(),
            ], 0..100),
            byte in proptest::prop_oneof![
                proptest::prelude::Just(b'@'),
                proptest::prelude::Just(b'v'),
                proptest::prelude::any::<u8>(),
            ],
        ) {
            for from in 0..=bytes.len() + 1 {
                let want = bytes
                    .get(from..)
                    .and_then(|rest| memchr::memchr(byte, rest))
                    .map(|i| from + i);
                proptest::prop_assert_eq!(find_byte(&bytes, from, byte), want, "from {}", from);
            }
        }

        /// The run of non-white-space from every character of a text ends
        /// where the first white space character (`char::is_whitespace`)
        /// after it is: long runs (past a group of 16), controls that are
        /// white space and others that are not, non-ASCII white space and
        /// other non-ASCII characters.
        #[test]
        fn non_space_runs_end_at_the_first_white_space(
            text in "([a-zA-Z0-9/:.?=_-]{0,40}[ \t\n\x0b\x0c\r\x01\x1f\u{85}\u{a0}\u{2003}\u{3000}é…😀]?){0,8}"
        ) {
            for (at, _) in text.char_indices() {
                let want = text[at..]
                    .char_indices()
                    .find(|&(_, c)| c.is_whitespace())
                    .map_or(text.len(), |(i, _)| at + i);
                proptest::prop_assert_eq!(non_space_run_end(&text, at), want, "from {}", at);
            }
        }

        /// Skipping a text's leading word characters leaves what
        /// `trim_start_matches(is_word_char)` leaves, from every character:
        /// ASCII word bytes and others, non-ASCII word characters (letters,
        /// digits, a combining mark) and non-ASCII ones that are not.
        #[test]
        fn ascii_prefixes_are_as_long_as_byte_by_byte(
            text in "[a-z ]{0,40}[é😀\u{a0}]?[a-z é]{0,40}",
        ) {
            // From every byte: the chunks, the overlapping last sixteen
            // and texts shorter than sixteen.
            for at in 0..=text.len() {
                let bytes = &text.as_bytes()[at..];
                proptest::prop_assert_eq!(ascii_prefix_len(bytes), ascii_prefix_len_bytewise(bytes), "from {}", at);
            }
        }

        #[test]
        fn word_chars_are_skipped_as_trim_start_matches_does(
            text in "[a-zA-Z0-9_]{0,40}[a-zA-Z0-9_@:. \t()é\u{301}\u{663}ſ…😀\u{a0}-]{0,40}"
        ) {
            // From every character: runs of word bytes longer and shorter
            // than a group of 16, ending in the text or at its end.
            for (at, _) in text.char_indices() {
                let want = text[at..].trim_start_matches(is_word_char);
                proptest::prop_assert_eq!(skip_word_chars(&text[at..]), want, "from {}", at);
            }
        }

        /// The same on any text.
        #[test]
        fn word_chars_of_any_text_are_skipped_as_trim_start_matches_does(
            text in proptest::prelude::any::<String>()
        ) {
            proptest::prop_assert_eq!(
                skip_word_chars(&text),
                text.trim_start_matches(is_word_char)
            );
        }
    }

    /// The hex digits are `format!`'s, for every value of each nibble in
    /// every place, and others.
    #[test]
    fn hex_digits_are_formats() {
        let mut values = vec![0, u32::MAX, 0x0123_4567, 0x89ab_cdef, 0xa5a5_5a5a];
        for place in 0..8 {
            for nibble in 0..16u32 {
                values.push(nibble << (4 * place));
                values.push(!(nibble << (4 * place)));
            }
        }
        let mut state = 0x5eed_u64;
        for _ in 0..10_000 {
            state = crate::engine::shingle::mix64(state.wrapping_add(0x9e37_79b9_7f4a_7c15));
            values.push(state as u32);
        }
        for x in values {
            assert_eq!(hex_digits(x), *format!("{x:08x}").as_bytes(), "{x:#x}");
        }
    }

    /// Both vector versions of [`Marks::of`] (16 bytes at a time, and 32
    /// where AVX2 is and the text is long enough) give `marks`.
    #[cfg(target_arch = "x86_64")]
    fn the_vector_marks_are(bytes: &[u8], marks: Marks) {
        assert_eq!(marks_x86::of(bytes), marks, "{bytes:?}");
        if bytes.len() >= 32 && std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the processor has AVX2, and there are 32 bytes or more.
            let avx2 = unsafe { marks_x86::of_avx2(bytes) };
            assert_eq!(avx2, marks, "{bytes:?}");
        }
    }

    /// The one-pass marks are those of byte-by-byte searches: every
    /// length from 0 to 80 (below, at and past a group of 16 or 32, and
    /// the last group's overlap), each sign and a non-ASCII byte alone at
    /// every place, and all of them together.
    #[test]
    fn marks_are_the_byte_searches() {
        for len in 0..=80 {
            let plain = vec![b'x'; len];
            assert_eq!(Marks::of(&plain), Marks::of_bytes(&plain), "len {len}");
            for at in 0..len {
                for sign in [b'&', b'@', b'"', b'#', 0xc3, 0x80, 0xff] {
                    let mut bytes = plain.clone();
                    bytes[at] = sign;
                    let marks = Marks::of_bytes(&bytes);
                    assert_eq!(Marks::of(&bytes), marks, "len {len}, {sign:#x} at {at}");
                    #[cfg(target_arch = "x86_64")]
                    the_vector_marks_are(&bytes, marks);
                }
            }
        }
        let all = b"say @you & \"me\" \xe2 and some more text past sixteen";
        assert_eq!(
            Marks::of(all),
            Marks {
                ascii: false,
                amp: true,
                at: true,
                quote: true,
                hash: false
            }
        );
    }

    proptest::proptest! {
        #[test]
        fn marks_of_any_bytes_are_the_byte_searches(
            bytes in proptest::collection::vec(proptest::prop_oneof![
                proptest::prelude::Just(b'&'),
                proptest::prelude::Just(b'@'),
                proptest::prelude::Just(b'"'),
                proptest::prelude::Just(b'#'),
                proptest::prelude::Just(b'a'),
                proptest::prelude::any::<u8>(),
            ], 0..200)
        ) {
            proptest::prop_assert_eq!(Marks::of(&bytes), Marks::of_bytes(&bytes));
            #[cfg(target_arch = "x86_64")]
            the_vector_marks_are(&bytes, Marks::of_bytes(&bytes));
        }
    }

    /// The word-at-a-time lowercasing is `to_ascii_lowercase` on every
    /// byte value, in every lane, beside any other bytes.
    #[test]
    fn lowercasing_eight_bytes_at_once_is_to_ascii_lowercase() {
        for b in 0..=255u8 {
            for lane in 0..8 {
                for other in [
                    0u8, b'A', b'Z', b'@', b'[', b'`', b'a', 0x7f, 0x80, 0xc1, 0xdb, 0xff,
                ] {
                    let mut bytes = [other; 8];
                    bytes[lane] = b;
                    let expected = bytes.map(|b| b.to_ascii_lowercase());
                    let got = lowercase_ascii_word(u64::from_le_bytes(bytes)).to_le_bytes();
                    assert_eq!(got, expected, "{bytes:?}");
                }
            }
        }
        for text in [
            "",
            "A",
            "HeLLo WORLD, Zebra@[`{",
            "ÉCOLE ÀB Zz 😀 ẞ",
            "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ",
        ] {
            let mut lowered = text.to_string();
            lowercase_ascii(&mut lowered);
            assert_eq!(lowered, text.to_ascii_lowercase());
        }
    }

    /// Every byte value in every place of a group of 16, among others at
    /// the edges of the capitals and of ASCII, lowercases as
    /// `to_ascii_lowercase` does; and so do texts of every length 0–80
    /// (groups, words and single bytes at the end).
    #[test]
    fn lowercasing_sixteen_bytes_at_once_is_to_ascii_lowercase() {
        #[cfg(target_arch = "x86_64")]
        for b in 0..=255u8 {
            for lane in 0..16 {
                for other in [0u8, b'@', b'A', b'Z', b'[', b'a', 0x7f, 0x80, 0xc1, 0xff] {
                    let mut bytes = [other; 16];
                    bytes[lane] = b;
                    let expected = bytes.map(|b| b.to_ascii_lowercase());
                    assert_eq!(lowercase_ascii_group(bytes), expected, "{bytes:?}");
                }
            }
        }
        let pattern = "AbZ@[`{ÉzQ😀Mx";
        for len in 0..=80 {
            let text: String = pattern.chars().cycle().take(len).collect();
            let mut lowered = text.clone();
            lowercase_ascii(&mut lowered);
            assert_eq!(lowered, text.to_ascii_lowercase(), "{text:?}");
        }
    }

    /// Every plain character is what `is_plain` promises, by the tables.
    #[test]
    fn plain_characters_are_starters_nfkc_and_lowercase_leave_alone() {
        let mut plain = 0;
        for c in (0x80..=0x10FFFFu32)
            .filter_map(char::from_u32)
            .filter(|&c| is_plain(c))
        {
            plain += 1;
            assert_eq!(
                unicode_normalization::char::canonical_combining_class(c),
                0,
                "{c:?}"
            );
            assert_eq!(
                is_nfkc_quick(std::iter::once(c)),
                IsNormalized::Yes,
                "{c:?}"
            );
            assert_eq!(
                c.to_string().nfkc().collect::<String>(),
                c.to_string(),
                "{c:?}"
            );
            let mut lower = String::new();
            push_lowercase(&mut lower, c);
            assert_eq!(lower, c.to_string(), "{c:?}");
        }
        assert!(plain > 5_000, "{plain}");
    }

    /// The memo's answer is the tables', asked for the first time and
    /// asked again (the test above checks every plain answer).
    #[test]
    fn the_plain_memo_keeps_the_tables_answers() {
        for c in ('\u{80}'..='\u{FFFF}').filter(|c| !c.is_ascii()) {
            let first = is_plain(c);
            assert_eq!(first, is_plain_by_the_tables(c), "{c:?}");
            assert_eq!(is_plain(c), first, "{c:?} asked again");
        }
    }

    /// Every character of the Basic Multilingual Plane, alone and between
    /// others (a letter with a combining mark after it, an upper-case
    /// letter, an emoji), folds as NFKC then lowercase does.
    #[test]
    fn every_bmp_character_folds_as_nfkc_then_lowercase() {
        let reference = |text: &str| {
            let mut out = String::new();
            text.nfkc().for_each(|c| push_lowercase(&mut out, c));
            out
        };
        for c in ('\u{80}'..='\u{FFFF}').filter(|c| !c.is_ascii()) {
            for text in [
                format!("{c}"),
                format!("x{c}\u{301}É"),
                format!("É{c}{c}\u{327}\u{301}"),
                format!("\u{301}{c}😀Ω\u{308}{c}"),
                format!("A{c}\u{2018}\u{fe0f}"),
            ] {
                let mut scratch = text.clone();
                let mut out = String::new();
                fold_non_ascii(&mut scratch, &mut out);
                assert_eq!(out, reference(&text), "{text:?}");
            }
        }
    }

    fn regex_url_spans(text: &str) -> Vec<std::ops::Range<usize>> {
        Regex::new(URL_PATTERN)
            .unwrap()
            .find_iter(text)
            .map(|m| m.range())
            .collect()
    }

    #[test]
    fn url_spans_are_the_patterns_matches() {
        for text in [
            "read https://t.co/abc now",
            "HTTPS://T.CO/ABC and http://x.y/z?q=1#f",
            "cut http… and https… and httpx: no",
            "www.example.com/path and www.nodot and www..com and www.a.",
            "ahttp://glued xhttp: _http://under éhttp://accent",
            "httpſ://long-s and Www.Mixed.Case",
            "http:\u{3000}ideographic space ends it",
            "",
            "http",
            "www.",
        ] {
            assert_eq!(
                UrlSpans::new(text).collect::<Vec<_>>(),
                regex_url_spans(text),
                "{text}"
            );
        }
    }

    /// Each vector version of `url_starts_in` (the one the processor
    /// takes, and SSE2 and AVX2 by name) against the letters' masks.
    fn the_url_starts_are_the_letters(bytes: &[u8]) {
        for at in 0..bytes.len() {
            let reference = url_starts_by_letters(&bytes[at..]);
            assert_eq!(url_starts(bytes, at), reference, "at {at} of {bytes:?}");
            #[cfg(target_arch = "x86_64")]
            if let Some(block) = bytes[at..].first_chunk::<BLOCK>() {
                assert_eq!(url_x86::starts_sse2(block), reference, "SSE2 at {at}");
                if std::arch::is_x86_feature_detected!("avx2") {
                    // SAFETY: the processor has AVX2 (checked just above).
                    assert_eq!(
                        unsafe { url_x86::starts_avx2(block) },
                        reference,
                        "AVX2 at {at}"
                    );
                }
            }
        }
    }

    #[test]
    fn url_starts_are_found_at_every_place_of_a_block() {
        // `http` and `www.` at every place of a text of 200 bytes, in two
        // cases, among bytes that each match one letter (and zero bytes,
        // the copied block's padding).
        for word in [&b"http"[..], b"HtTp", b"www.", b"WwW."] {
            for place in 0..200 - word.len() {
                let mut bytes = b"htw.ptxHW \0".repeat(20);
                bytes.truncate(200);
                bytes[place..place + word.len()].copy_from_slice(word);
                the_url_starts_are_the_letters(&bytes);
                the_url_starts_are_the_letters(&bytes[..place + word.len()]);
            }
        }
    }

    proptest::proptest! {
        #[test]
        fn url_starts_match_the_letters_masks_on_any_bytes(
            bytes in proptest::collection::vec(
                proptest::sample::select(b"hHtTpPwW.:/ \0\x80\xc8\xd0\xe8\xf0\x08\x0e".to_vec()),
                0..300,
            )
        ) {
            the_url_starts_are_the_letters(&bytes);
        }
    }

    proptest::proptest! {
        #[test]
        fn url_spans_match_the_regex_on_any_text(
            text in "(http|HTTP|hTtP|https|httpſ|s|www|WWW|\\.|:|…|/| |\u{3000}|\u{a0}|é|_|a|x|h|w|ſ|\u{301}|\t|\u{b}|\u{85}|\u{1680}){0,48}"
        ) {
            proptest::prop_assert_eq!(UrlSpans::new(&text).collect::<Vec<_>>(), regex_url_spans(&text));
        }

        #[test]
        fn the_url_gate_is_a_case_blind_substring_test(
            text in "(http|HTTP|hTtP|www\\.|WwW\\.|htt|ww|h|t|p|w|\\.| |é|x){0,60}"
        ) {
            let lower = text.to_ascii_lowercase();
            proptest::prop_assert_eq!(
                may_hold_url(&text),
                lower.contains("http") || lower.contains("www.")
            );
        }

        #[test]
        fn via_credits_are_the_regex_matches(
            text in "(via|vía|xvia|@a|@é|@|\\(|\\[|\\)|\\]|:|\\.| |\u{a0}|\u{3000}|x|_|\u{301}){0,10}"
        ) {
            let trailing = Regex::new(VIA_CREDIT_PATTERN).unwrap().replace_all(&text, "").into_owned();
            let mut cut = text.clone();
            if let Some(start) = trailing_via_credit(&cut) {
                cut.truncate(start);
            }
            proptest::prop_assert_eq!(cut, trailing);
            let leading = Regex::new(LEADING_VIA_CREDIT_PATTERN).unwrap().replace_all(&text, "").into_owned();
            let mut cut = text.clone();
            if let Some(end) = leading_via_credit(&cut) {
                cut.drain(..end);
            }
            proptest::prop_assert_eq!(cut, leading);
        }

        #[test]
        fn the_cut_word_is_the_regex_match(
            text in "(a|é|\\.| |\u{a0}|\u{3000}|\u{85}|\u{180e}|\n|…|x){0,12}\\.\\.\\."
        ) {
            let reference = Regex::new(TRUNCATION_PATTERN).unwrap().replace_all(&text, "").into_owned();
            let mut cut = text.clone();
            cut_truncated_word(&mut cut);
            proptest::prop_assert_eq!(cut, reference);
        }

        #[test]
        fn white_space_is_trimmed_as_str_trims_it(
            text in "( |\t|\n|\r|\u{b}|\u{c}|\u{1c}|\u{a0}|\u{3000}|\u{85}|\u{180e}|:|x|é){0,12}"
        ) {
            proptest::prop_assert_eq!(trim_white_end(&text), text.trim_end_matches(char::is_whitespace));
            proptest::prop_assert_eq!(trim_white_start(&text), text.trim_start_matches(char::is_whitespace));
        }

        #[test]
        fn retweet_marker_spans_match_the_regex_on_any_text(
            text in "(rt|mt|art|rtx|@a|@é|@|:| |\u{a0}|\u{3000}|\u{85}|\u{180e}|é|x|_|\u{301}|\n|\t|\u{b}|\u{c}|\r){0,14}"
        ) {
            let reference: Vec<_> = Regex::new(RETWEET_MARKER_PATTERN)
                .unwrap()
                .find_iter(&text)
                .map(|m| m.range())
                .collect();
            proptest::prop_assert_eq!(RetweetMarkers::new(&text).collect::<Vec<_>>(), reference);
        }

        #[test]
        fn folding_in_runs_and_the_ellipsis_short_cut_give_nfkc_lowercase(text in "[a-zA-ZÉé.\u{301}\u{316}\u{2026}\u{ff21}\u{2019}\u{201c}😀🚀🤔\u{1f1ef}\u{fe0f}\u{200d} ]{0,40}") {
            let mut out = String::new();
            let mut scratch = String::new();
            Normaliser::new().normalise_into(&text, &[], &mut out, &mut scratch);
            let nfkc: String = text.nfkc().collect::<String>().to_lowercase();
            // Markers, truncation and trailing space aside, the text is its
            // NFKC lowercase form.
            proptest::prop_assume!(!nfkc.trim_end().ends_with("..."));
            proptest::prop_assert_eq!(out, nfkc.trim_end());
        }
    }
}

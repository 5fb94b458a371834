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

use regex::Regex;

use super::shingle::mix64;
use xxhash_rust::xxh3::xxh3_64_with_seed;

/// Seed of the token hash. Fixed: hashes must be the same on every run.
const TOKEN_SEED: u64 = 0x746f_6b65_6e5f_7631;

/// The compiled tokeniser. Immutable; share freely.
#[derive(Clone, Debug)]
pub struct Tokeniser {
    token: Regex,
}

impl Default for Tokeniser {
    fn default() -> Self {
        Tokeniser::new()
    }
}

/// Hashes one token's text.
pub fn token_hash(token: &str) -> u64 {
    xxh3_64_with_seed(token.as_bytes(), TOKEN_SEED)
}

impl Tokeniser {
    /// Compiles the token pattern.
    pub fn new() -> Tokeniser {
        Tokeniser {
            // First alternative: a CJK run; second: a word run without CJK.
            token: Regex::new(
                r"[\p{Han}\p{Hiragana}\p{Katakana}]+|[\w--[\p{Han}\p{Hiragana}\p{Katakana}]]+",
            )
            .expect("built-in pattern compiles"),
        }
    }

    /// Appends the token hashes of `text` to `out`. When `joined` is given,
    /// also writes the tokens' text to it, separated by single spaces (the
    /// input of character shingles).
    pub fn tokenise(&self, text: &str, out: &mut Vec<u64>, joined: Option<&mut String>) {
        self.tokenise_explained(text, out, joined, None);
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
        // A run of hashtags is held back until it ends: three or more
        // become one token.
        let mut block: Vec<(u64, &str)> = Vec::new();
        self.for_each_token(text, |start, end| {
            let token = &text[start..end];
            if let Some(joined) = joined.as_deref_mut() {
                if !joined.is_empty() {
                    joined.push(' ');
                }
                joined.push_str(token);
            }
            if text[..start].ends_with('#') {
                block.push((token_hash(token), token));
            } else {
                flush_hashtags(&mut block, out, &mut texts);
                push_token(token, out, &mut texts);
            }
        });
        flush_hashtags(&mut block, out, &mut texts);
    }

    /// Calls `f(start, end)` for every match of the token pattern in
    /// `text`, in order.
    ///
    /// Tokens never span white space, so the text is cut at ASCII white
    /// space first; a piece that is all ASCII is split at its non-word bytes
    /// directly (ASCII `\w` is `[0-9A-Za-z_]`), and any other piece goes to
    /// the regex. The result is the regex's on every input (a property test
    /// checks it) at a fraction of the cost: a regex search per short token
    /// is dominated by its fixed overhead.
    fn for_each_token(&self, text: &str, mut f: impl FnMut(usize, usize)) {
        let bytes = text.as_bytes();
        let mut i = 0;
        while i < bytes.len() {
            while i < bytes.len() && bytes[i].is_ascii_whitespace() {
                i += 1;
            }
            let start = i;
            let mut ascii = true;
            while i < bytes.len() && !bytes[i].is_ascii_whitespace() {
                ascii &= bytes[i].is_ascii();
                i += 1;
            }
            if ascii {
                let mut j = start;
                while j < i {
                    while j < i && !is_word_byte(bytes[j]) {
                        j += 1;
                    }
                    let word = j;
                    while j < i && is_word_byte(bytes[j]) {
                        j += 1;
                    }
                    if word < j {
                        f(word, j);
                    }
                }
            } else {
                for found in self.token.find_iter(&text[start..i]) {
                    f(start + found.start(), start + found.end());
                }
            }
        }
    }

    /// Every match of the token pattern, by the regex alone (the reference
    /// [`Tokeniser::for_each_token`] is tested against).
    #[cfg(test)]
    fn regex_spans(&self, text: &str) -> Vec<(usize, usize)> {
        self.token
            .find_iter(text)
            .map(|m| (m.start(), m.end()))
            .collect()
    }
}

fn is_word_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// Emits a held-back run of hashtags: one token for a block, words for a
/// shorter run.
fn flush_hashtags(
    block: &mut Vec<(u64, &str)>,
    out: &mut Vec<u64>,
    texts: &mut Option<&mut Vec<String>>,
) {
    if block.len() >= HASHTAG_BLOCK {
        let mut h = HASHTAG_BLOCK_SEED;
        for &(t, _) in block.iter() {
            h = mix64(h ^ t);
        }
        out.push(h);
        if let Some(texts) = texts.as_deref_mut() {
            texts.push(
                block
                    .iter()
                    .map(|(_, t)| format!("#{t}"))
                    .collect::<Vec<_>>()
                    .join(" "),
            );
        }
    } else {
        for &(_, token) in block.iter() {
            push_token(token, out, texts);
        }
    }
    block.clear();
}

/// Hashtags in a row that count as one block.
pub const HASHTAG_BLOCK: usize = 3;

/// Seed of a hashtag block's token.
const HASHTAG_BLOCK_SEED: u64 = 0x6861_7368_7461_6773;

/// Appends one matched token: a word, or the bigrams of a CJK run.
fn push_token(token: &str, out: &mut Vec<u64>, texts: &mut Option<&mut Vec<String>>) {
    let first = token.chars().next().expect("matches are non-empty");
    let start = out.len();
    if is_cjk(first) {
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
        out.push(token_hash(token));
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
        fn the_ascii_fast_path_finds_what_the_regex_finds(text in "[ a-zA-Z0-9_#@.,!é日本\u{3000}\u{a0}\t\n-]{0,40}") {
            let tokeniser = Tokeniser::new();
            let mut spans = Vec::new();
            tokeniser.for_each_token(&text, |s, e| spans.push((s, e)));
            proptest::prop_assert_eq!(spans, tokeniser.regex_spans(&text));
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

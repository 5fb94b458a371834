//! The wire format: one JSON object per line in, the same bytes plus a tag
//! out.
//!
//! # Decoding
//!
//! A line is read in one checked pass that enters only the paths it was
//! asked for (the id, the text, URL entities, retweet originals) and skips
//! every other value without building it, checked as serde_json checks what
//! it skips (a line the pass refuses, or does not read itself, is read
//! again by serde_json, whose verdict and words stand). What it finds are
//! offsets into the line, so a several-kilobyte v1.1 tweet costs no
//! allocation beyond the text's unescaping.
//!
//! Default discovery (no `--id-field` / `--text-field`):
//! - id: the first present of `id_str`, `id`, `data.id`;
//! - text: the first present of `extended_tweet.full_text`, `full_text`,
//!   `text`, `data.text`;
//! - a native retweet (v1.1 `retweeted_status`, or a v2 `referenced_tweets`
//!   element of type `retweeted` that carries its `text`) is compared by the
//!   full text of the tweet it retweets;
//! - `entities.urls[]` (and the same under `extended_tweet`,
//!   `retweeted_status`, and `data`) give each short URL's `expanded_url`.
//!
//! A field that is `null` counts as absent.
//!
//! **Repeated keys**: when an object holds the same key more than once
//! (`{"id":"d1","id":"d2","text":"a","text":"b"}`), the last occurrence
//! wins and the earlier ones are ignored, whole (nested members included),
//! as serde_json's `Value`, Python's `json` and JavaScript's `JSON.parse`
//! read it: the line above is message `"d2"` with text `b`, so the verdict
//! matches what a downstream reader sees. (The sidecar's own `dedup_op`
//! member is the exception: repeated, it is refused; see `server::op`.)
//!
//! **Lone surrogates**: a `\u` escape of half a UTF-16 surrogate pair without
//! its other half (`"\ud83d cut"`, as in tweets cut at 140 UTF-16 units) is
//! read as U+FFFD for comparison; the line's bytes are passed through
//! unchanged. In an object key it is refused, as invalid JSON naming it.
//!
//! # Encoding
//!
//! The tag is spliced in before the object's closing brace:
//!
//! ```text
//! {"id_str":"1","text":"hello"}
//! {"id_str":"1","text":"hello","dedup":{"status":"new"}}
//! {"id_str":"2","text":"hello!","dedup":{"status":"duplicate","duplicate_of":"1","similarity":1,"cluster":"1"}}
//! ```
//!
//! Every other byte of the line is written back unchanged, the id is copied as
//! the JSON text it was (a number is never read into a float), and the line
//! ends in `\n` whatever it ended in.

use std::borrow::Cow;
use std::fmt;

use serde::Deserialize;
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;
#[cfg(test)]
use sonic_rs::parser::Parser;

pub use crate::engine::id::{MessageId, RawId};

use crate::engine::config::ConfigError;
use crate::wire::invalid::InvalidReason;

mod stops;

/// A dotted field path such as `data.text`; `[]` after a name means "every
/// element of this array".
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldPath {
    text: String,
    steps: Vec<Step>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Step {
    Field(String),
    Each,
}

impl FieldPath {
    /// Parses a dotted path (`title`, `data.text`, `entities.urls[].url`).
    pub fn parse(text: &str) -> Result<FieldPath, ConfigError> {
        let bad = || ConfigError::FieldPath(text.to_string());
        let mut steps = Vec::new();
        for part in text.split('.') {
            let (name, each) = match part.strip_suffix("[]") {
                Some(name) => (name, true),
                None => (part, false),
            };
            if name.is_empty() {
                return Err(bad());
            }
            steps.push(Step::Field(name.to_string()));
            if each {
                steps.push(Step::Each);
            }
        }
        Ok(FieldPath {
            text: text.to_string(),
            steps,
        })
    }

    /// The path as the user wrote it.
    pub fn as_str(&self) -> &str {
        &self.text
    }
}

impl fmt::Display for FieldPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// Which fields hold the id and the text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldSpec {
    /// Candidate id paths, the first present wins.
    pub id: Vec<FieldPath>,
    /// Text paths. With discovery the first present wins; otherwise every
    /// present one is used, joined by a space.
    pub text: Vec<FieldPath>,
    /// Whether `text` lists alternatives to discover (and retweets are
    /// followed) or the user's fields to join.
    pub discover_text: bool,
}

const DEFAULT_ID_PATHS: [&str; 3] = ["id_str", "id", "data.id"];
const DEFAULT_TEXT_PATHS: [&str; 4] =
    ["extended_tweet.full_text", "full_text", "text", "data.text"];
const RETWEET_TEXT_PATHS: [&str; 3] = [
    "retweeted_status.extended_tweet.full_text",
    "retweeted_status.full_text",
    "retweeted_status.text",
];
/// Where short URLs and their expansions are. Media links count: two
/// photo posts with the same caption are different posts, and a retweet
/// carries its original's media link.
const URL_PARENTS: [&str; 11] = [
    "entities.urls[]",
    "entities.media[]",
    "extended_entities.media[]",
    "extended_tweet.entities.urls[]",
    "extended_tweet.entities.media[]",
    "extended_tweet.extended_entities.media[]",
    "retweeted_status.entities.urls[]",
    "retweeted_status.entities.media[]",
    "retweeted_status.extended_tweet.entities.urls[]",
    "retweeted_status.extended_tweet.entities.media[]",
    "data.entities.urls[]",
];
const REFERENCED: &str = "referenced_tweets[]";
/// Where a deletion notice names the deleted tweet (see
/// `docs/deletions.md`): a v1.1 streaming notice,
/// `{"delete":{"status":{"id":1,"id_str":"1","user_id":2,"user_id_str":"2"},"timestamp_ms":"…"}}`
/// (its string first: an integer past 2^53 has been through a float in some
/// producers), and a v2 compliance stream event,
/// `{"data":{"delete":{"tweet":{"id":"1","author_id":"2"},"event_at":"…"}}}`.
const NOTICE_ID_PATHS: [&str; 3] = [
    "delete.status.id_str",
    "delete.status.id",
    "data.delete.tweet.id",
];
/// Where a message's time is (v1.1 and v2 tweets; see [`crate::wire::timestamp`]).
const CREATED_AT_PATHS: [&str; 2] = ["created_at", "data.created_at"];

impl Default for FieldSpec {
    fn default() -> Self {
        FieldSpec::new(None, Vec::new()).expect("default paths are valid")
    }
}

impl FieldSpec {
    /// Builds a spec from the user's overrides: `id` replaces the id
    /// discovery, a non-empty `text` replaces the text discovery (and turns
    /// off retweet following).
    pub fn new(id: Option<&str>, text: Vec<String>) -> Result<FieldSpec, ConfigError> {
        let id = match id {
            Some(path) => vec![FieldPath::parse(path)?],
            None => DEFAULT_ID_PATHS
                .iter()
                .map(|p| FieldPath::parse(p))
                .collect::<Result<_, _>>()?,
        };
        let discover_text = text.is_empty();
        let text = if discover_text {
            DEFAULT_TEXT_PATHS
                .iter()
                .map(|p| FieldPath::parse(p))
                .collect::<Result<_, _>>()?
        } else {
            text.iter()
                .map(|p| FieldPath::parse(p))
                .collect::<Result<_, _>>()?
        };
        Ok(FieldSpec {
            id,
            text,
            discover_text,
        })
    }

    fn looked_for(paths: &[FieldPath]) -> String {
        paths
            .iter()
            .map(FieldPath::as_str)
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// A [`Decoder`] with the thread's buffers borrowed, for many lines (see
/// [`Decoder::decoding`]).
pub struct Decoding<'d> {
    decoder: &'d Decoder,
    buffers: &'d mut Buffers,
}

impl Decoding<'_> {
    /// [`Decoder::decode`], the record's [`Record::urls`] put in `urls`
    /// (emptied first): the lines of a batch, which outlive every record
    /// made of them, can share one vector, handed from each record to the
    /// next, so that a line with URL entities costs no allocation (a
    /// vector grown from empty, and freed, cost a third of `dev-200k`'s
    /// lines about 280 instructions).
    pub fn decode_into<'a>(
        &mut self,
        line: &'a [u8],
        urls: UrlPairs<'a>,
    ) -> Result<Record<'a>, InvalidReason> {
        self.decoder
            .decode_buffered(line, Reader::Fast, false, urls, self.buffers)
    }
}

/// Short URL → expanded URL pairs, borrowed from a line where they hold
/// no escape.
pub type UrlPairs<'a> = Vec<(Cow<'a, str>, Cow<'a, str>)>;

/// A decoded line: what the engine needs, borrowed from the line.
#[derive(Debug)]
pub struct Record<'a> {
    /// The message's id.
    pub id: MessageId,
    /// The text to compare (for a native retweet, the retweeted text).
    pub text: Cow<'a, str>,
    /// Short URL → expanded URL pairs from the record's URL entities.
    pub urls: UrlPairs<'a>,
    /// Where the tag goes: the offset of the closing brace.
    pub splice: Splice,
    /// The first `created_at` found that is a string, its text as in the
    /// line (read by [`Record::created_at_millis`]).
    pub created_at: Option<&'a str>,
    /// The line is a deletion notice (v1.1 or v2, see `docs/deletions.md`)
    /// or a removal the sidecar was asked for: `id` is the message to
    /// forget, and there is no text.
    pub deletion: bool,
}

impl Record<'_> {
    /// The message's `created_at` in milliseconds since the epoch, when it
    /// has one in a known format (see [`crate::wire::timestamp`]).
    pub fn created_at_millis(&self) -> Option<i64> {
        self.created_at
            .and_then(crate::wire::timestamp::parse_created_at)
    }
}

/// Where and how the tag is spliced into a line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Splice {
    /// Offset of the object's closing `}` in the line.
    pub at: usize,
    /// Whether the object had members (and so the tag needs a comma).
    pub needs_comma: bool,
}

/// A compiled [`FieldSpec`]: the tree of paths the visitor walks.
#[derive(Debug)]
pub struct Decoder {
    tree: Node,
    spec: FieldSpec,
    ids: Vec<u16>,
    texts: Vec<u16>,
    retweet_texts: Vec<u16>,
    /// The short and expanded URL paths, paired; the last pair is under
    /// `referenced_tweets[]`.
    url_pairs: Vec<(u16, u16)>,
    /// The short URL paths, as a [`Found`] mask.
    url_shorts: PathMask,
    /// Each short URL path's expanded one, by the short's number, when
    /// every short path is below 64 and they come in the pairs' order:
    /// a line's pairs are then found from its mask's bits, not by a look
    /// at each of the thirteen.
    url_long_of: Option<[u16; 64]>,
    referenced_type: u16,
    referenced_text: u16,
    created_at: Vec<u16>,
    notice_ids: Vec<u16>,
    /// The notice id paths, as a [`Found`] mask: most lines are no notice,
    /// and are told so without a search for each path.
    notices: PathMask,
}

#[derive(Debug, Default)]
struct Node {
    fields: Vec<(String, Node)>,
    /// Each field's name as [`key_head`] reads a key, its next eight bytes
    /// read the same way ([`key_words`]), and its length, in the order of
    /// `fields`: a key of up to sixteen bytes is matched by word compares
    /// alone, without a call of `memcmp`.
    heads: Vec<(u64, u64, usize)>,
    /// Bit `n` set when a field's name is `n` bytes long (bit 63 for any
    /// of 63 or more): most keys a line holds beside the wanted ones
    /// (`hashtags`, `user_mentions`, `indices`, `display_url`) have a
    /// length no field has, and are passed over before their words are
    /// read and hashed.
    lengths: u64,
    /// `fields` by a hash of a key's head and length ([`Node::slot`]): the
    /// field's index plus one in the key's slot, 0 for none. `None` when
    /// no multiplier tried spread the fields apart, and `heads` is
    /// searched. A fixed size, so a slot (six bits) needs no bounds check.
    table: Option<Box<[u8; Node::TABLE_SLOTS]>>,
    /// The multiplier of that hash.
    multiplier: u64,
    each: Option<Box<Node>>,
    captures: Vec<u16>,
    /// Every capture made at this node or below it: what an earlier
    /// occurrence of a repeated key left behind.
    below: Vec<u16>,
}

impl Node {
    fn insert(&mut self, steps: &[Step], capture: u16) {
        self.below.push(capture);
        match steps.split_first() {
            None => self.captures.push(capture),
            Some((Step::Each, rest)) => self
                .each
                .get_or_insert_with(Default::default)
                .insert(rest, capture),
            Some((Step::Field(name), rest)) => {
                let child = match self.fields.iter().position(|(n, _)| n == name) {
                    Some(i) => &mut self.fields[i].1,
                    None => {
                        self.fields.push((name.clone(), Node::default()));
                        let (head, tail) = key_words(name.as_bytes());
                        self.heads.push((head, tail, name.len()));
                        self.lengths |= Self::length_bit(name.len());
                        &mut self.fields.last_mut().expect("just pushed").1
                    }
                };
                child.insert(rest, capture);
            }
        }
    }

    /// A key length's bit in [`Node::lengths`].
    #[inline(always)]
    fn length_bit(len: usize) -> u64 {
        1 << len.min(63)
    }

    /// Whether a field may have a name of `len` bytes.
    #[inline(always)]
    fn may_have_length(&self, len: usize) -> bool {
        self.lengths & Self::length_bit(len) != 0
    }

    fn is_branch(&self) -> bool {
        !self.fields.is_empty() || self.each.is_some()
    }

    /// Which field a key names, from its length, its [`key_words`] and,
    /// asked only for a key of more than sixteen bytes, its text (without
    /// escapes).
    #[inline(always)]
    fn field<'k>(
        &self,
        key_len: usize,
        head: u64,
        tail: u64,
        key: impl FnOnce() -> &'k [u8],
    ) -> Option<usize> {
        let candidate = match &self.table {
            Some(table) => {
                usize::from(table[Self::slot(head, key_len, self.multiplier)]).checked_sub(1)?
            }
            None => self
                .heads
                .iter()
                .position(|&(h, _, len)| h == head && len == key_len)?,
        };
        let (h, t, len) = self.heads[candidate];
        (h == head
            && len == key_len
            && t == tail
            && (len <= 16 || self.fields[candidate].0.as_bytes().get(16..) == key().get(16..)))
        .then_some(candidate)
    }

    /// The slot of a key's head and length in a table of
    /// [`Node::TABLE_SLOTS`].
    #[inline(always)]
    fn slot(head: u64, len: usize, multiplier: u64) -> usize {
        ((head ^ len as u64).wrapping_mul(multiplier) >> 58) as usize
    }

    /// Slots of a node's table (a power of two, `slot` takes six bits).
    const TABLE_SLOTS: usize = 64;

    /// Builds the tables of this node and those below it, once every path
    /// is in: a multiplier under which no two fields share a slot, tried
    /// from a fixed list (so a spec always gets the same table).
    fn index(&mut self) {
        self.table = None;
        if self.fields.len() < Self::TABLE_SLOTS / 4 {
            for k in 0..64u64 {
                let multiplier = 0x9E37_79B9_7F4A_7C15u64
                    .wrapping_add(k.wrapping_mul(0x2545_F491_4F6C_DD1D))
                    | 1;
                let mut table = Box::new([0u8; Self::TABLE_SLOTS]);
                let spread = self.heads.iter().enumerate().all(|(i, &(head, _, len))| {
                    let slot = &mut table[Self::slot(head, len, multiplier)];
                    let free = *slot == 0;
                    *slot = u8::try_from(i + 1).unwrap_or(0);
                    free
                });
                if spread {
                    self.table = Some(table);
                    self.multiplier = multiplier;
                    break;
                }
            }
        }
        for (_, child) in &mut self.fields {
            child.index();
        }
        if let Some(each) = self.each.as_deref_mut() {
            each.index();
        }
    }
}

/// A key's first eight bytes (fewer when it is shorter, the rest zero) as
/// a word: most keys differ there.
#[inline(always)]
fn key_head(key: &[u8]) -> u64 {
    let mut word = [0; 8];
    let n = key.len().min(8);
    word[..n].copy_from_slice(&key[..n]);
    u64::from_le_bytes(word)
}

/// A key's first eight bytes and its next eight, each as [`key_head`]
/// reads them (0 for none).
fn key_words(key: &[u8]) -> (u64, u64) {
    (key_head(key), key.get(8..).map_or(0, key_head))
}

/// One value found on a wanted path: where its JSON text lies in the line.
/// Offsets rather than a borrowed slice, so that one buffer of them serves
/// every line a thread decodes (see [`BUFFERS`]).
#[derive(Clone, Copy, Debug)]
struct Capture {
    path: u16,
    /// Index within the innermost array on the path (0 outside arrays).
    element: u32,
    start: usize,
    end: usize,
    /// Whether the fast path's scan found the value a string without an
    /// escape: its contents are then what lies between its quotes, with
    /// no second look for a backslash ([`json_str`]).
    plain: bool,
}

impl Capture {
    /// Whether the captured value is `null`: of checked JSON values, the
    /// one of four bytes that starts with `n`.
    fn is_null(&self, line: &str) -> bool {
        self.end - self.start == 4 && line.as_bytes().get(self.start) == Some(&b'n')
    }

    /// The captured value's JSON text in `line`, the text it was found in.
    fn raw<'a>(&self, line: &'a str) -> &'a str {
        &line[self.start..self.end]
    }

    /// The captured value's contents as a string ([`json_str`]), `None`
    /// when it is not one.
    fn text<'a>(&self, line: &'a str) -> Option<Cow<'a, str>> {
        if let Some(text) = self.plain_text(line) {
            return Some(Cow::Borrowed(text));
        }
        json_str(self.raw(line))
    }

    /// The contents of a string the scan captured plain (without an
    /// escape): what lies between its quotes, taken without a second look
    /// at their offsets (a checked slice of the line cost a v1.1 tweet
    /// about 35 instructions).
    fn plain_text<'a>(&self, line: &'a str) -> Option<&'a str> {
        if !self.plain {
            return None;
        }
        let (from, to) = (self.start + 1, self.end - 1);
        debug_assert!(from <= to && line.is_char_boundary(from) && line.is_char_boundary(to));
        // SAFETY: a plain capture is a string the scan read in `line`, from
        // its opening quote at `start` to its closing quote at `end - 1`:
        // two ASCII bytes of the line, so the text between them starts and
        // ends on character boundaries.
        Some(unsafe { line.get_unchecked(from..to) })
    }
}

/// A set of paths, as bits. Paths from 64 up (the default spec has 41;
/// only many chosen text fields make more) are not told apart: a set
/// holding one meets every other. Sixty-four bits, not more: a wider
/// shift costs more than a search of a line's few captures would save.
#[derive(Clone, Copy, Debug, Default)]
struct PathMask {
    /// Bit `p` set when path `p` (below 64) is in the set.
    bits: u64,
    /// Whether a path from 64 up is in the set.
    high: bool,
}

impl PathMask {
    fn of(paths: impl IntoIterator<Item = u16>) -> PathMask {
        // Without a branch a path: a line's captures are looked at each
        // time it is decoded.
        paths
            .into_iter()
            .fold(PathMask::default(), |mut mask, path| {
                let path = u32::from(path);
                mask.bits |= 1u64.checked_shl(path).unwrap_or(0);
                mask.high |= path >= u64::BITS;
                mask
            })
    }

    /// Whether the two sets may share a path.
    fn meets(&self, other: &PathMask) -> bool {
        self.high || other.high || self.bits & other.bits != 0
    }
}

/// A line's captures, with a mask of the paths they are on: most wanted
/// paths are absent from a line (eleven URL entity paths, notices,
/// retweets), and a path not in the mask costs no search.
///
/// A search starts at the path's first capture: the id, the text and the
/// date are found without a look at the captures before them.
struct Found<'c> {
    captures: &'c [Capture],
    present: PathMask,
    /// For each path below 64 in `present`: where its first capture is,
    /// or 255 when that is further (a search from 255 still meets it).
    first: [u8; 64],
}

impl<'c> Found<'c> {
    fn new(captures: &'c [Capture]) -> Found<'c> {
        let mut present = PathMask::default();
        let mut first = [0u8; 64];
        for (at, capture) in captures.iter().enumerate() {
            let path = u32::from(capture.path);
            match 1u64.checked_shl(path) {
                Some(bit) => {
                    if present.bits & bit == 0 {
                        first[(path & 63) as usize] = at.min(255) as u8;
                    }
                    present.bits |= bit;
                }
                None => present.high = true,
            }
        }
        Found {
            captures,
            present,
            first,
        }
    }

    /// Whether any capture is on a path of `paths`.
    fn any(&self, paths: &PathMask) -> bool {
        self.present.meets(paths)
    }

    /// The captures on `path`, in the order they were made.
    fn of(&self, path: u16) -> impl Iterator<Item = &'c Capture> + use<'c> {
        let captures = match 1u64.checked_shl(u32::from(path)) {
            Some(bit) if self.present.bits & bit != 0 => {
                let from = usize::from(self.first[usize::from(path & 63)]);
                self.captures.get(from..).unwrap_or_default()
            }
            Some(_) => &[],
            None => self.captures,
        };
        captures.iter().filter(move |c| c.path == path)
    }
}

/// Which reader decodes a line: the fast path, or a reference the tests
/// hold it to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Reader {
    /// [`Walk`], falling back to serde_json on what it refuses.
    Fast,
    /// The walk over sonic-rs's parser that was the fast path before issue
    /// 42, falling back alike: today's decoder, the tests' oracle.
    #[cfg(test)]
    Sonic,
    /// serde_json alone: the reference the tests and the fuzz targets hold
    /// the fast path to.
    Serde,
}

/// What decoding a line needs besides the line, kept between the lines a
/// thread decodes: fresh vectors grown from empty cost an allocation or
/// two per line, a tenth of decoding a v1.1 tweet.
struct Buffers {
    /// The line being walked, padded, and its stops.
    scanned: Scanned,
    /// The captures of the line being decoded.
    captures: Vec<Capture>,
}

thread_local! {
    /// The thread's [`Buffers`]: one thread-local, borrowed once a line
    /// (two taken and put back cost a v1.1 tweet about 120 instructions).
    static BUFFERS: std::cell::RefCell<Buffers> = const {
        std::cell::RefCell::new(Buffers {
            scanned: Scanned::new(),
            captures: Vec::new(),
        })
    };
}

impl Decoder {
    /// Compiles a field spec.
    pub fn new(spec: FieldSpec) -> Decoder {
        let mut tree = Node::default();
        let mut next = 0u16;
        let mut add = |tree: &mut Node, path: &FieldPath| {
            let id = next;
            next += 1;
            tree.insert(&path.steps, id);
            id
        };
        let parse = |p: &str| FieldPath::parse(p).expect("built-in paths are valid");
        let ids = spec.id.iter().map(|p| add(&mut tree, p)).collect();
        let texts = spec.text.iter().map(|p| add(&mut tree, p)).collect();
        let retweet_texts = if spec.discover_text {
            RETWEET_TEXT_PATHS
                .iter()
                .map(|p| add(&mut tree, &parse(p)))
                .collect()
        } else {
            Vec::new()
        };
        let mut url_pairs: Vec<(u16, u16)> = URL_PARENTS
            .iter()
            .map(|parent| {
                let short = add(&mut tree, &parse(&format!("{parent}.url")));
                let long = add(&mut tree, &parse(&format!("{parent}.expanded_url")));
                (short, long)
            })
            .collect();
        let referenced_type = add(&mut tree, &parse(&format!("{REFERENCED}.type")));
        let referenced_text = add(&mut tree, &parse(&format!("{REFERENCED}.text")));
        url_pairs.push((
            add(
                &mut tree,
                &parse(&format!("{REFERENCED}.entities.urls[].url")),
            ),
            add(
                &mut tree,
                &parse(&format!("{REFERENCED}.entities.urls[].expanded_url")),
            ),
        ));
        let url_shorts = PathMask::of(url_pairs.iter().map(|&(short, _)| short));
        let url_long_of = url_pairs
            .windows(2)
            .all(|pair| pair[0].0 < pair[1].0)
            .then(|| {
                let mut long_of = [0u16; 64];
                for &(short, long) in &url_pairs {
                    *long_of.get_mut(usize::from(short))? = long;
                }
                Some(long_of)
            })
            .flatten();
        let created_at = CREATED_AT_PATHS
            .iter()
            .map(|p| add(&mut tree, &parse(p)))
            .collect();
        let notice_ids: Vec<u16> = NOTICE_ID_PATHS
            .iter()
            .map(|p| add(&mut tree, &parse(p)))
            .collect();
        let notices = PathMask::of(notice_ids.iter().copied());
        tree.index();
        Decoder {
            notice_ids,
            notices,
            tree,
            spec,
            created_at,
            ids,
            texts,
            retweet_texts,
            url_pairs,
            url_shorts,
            url_long_of,
            referenced_type,
            referenced_text,
        }
    }

    /// The spec this decoder was built from.
    pub fn spec(&self) -> &FieldSpec {
        &self.spec
    }

    /// Decodes one line (without its line terminator).
    pub fn decode<'a>(&self, line: &'a [u8]) -> Result<Record<'a>, InvalidReason> {
        self.decode_with(line, Reader::Fast)
    }

    /// Runs `work` with this decoder and the thread's buffers borrowed
    /// once for every line it decodes ([`Decoding::decode_into`]), rather
    /// than once a line (about 30 instructions a line). Nothing else may
    /// decode a line on this thread meanwhile: the buffers are taken.
    pub fn decoding<T>(&self, work: impl FnOnce(&mut Decoding<'_>) -> T) -> T {
        BUFFERS.with_borrow_mut(|buffers| {
            work(&mut Decoding {
                decoder: self,
                buffers,
            })
        })
    }

    /// [`Decoder::decode`], with the fast path or with a reference reader
    /// (what the tests compare the fast path with).
    fn decode_with<'a>(&self, line: &'a [u8], reader: Reader) -> Result<Record<'a>, InvalidReason> {
        self.decode_line(line, reader, false, Vec::new())
    }

    /// A line's stops classified, its text checked as UTF-8 (only when the
    /// classification found a byte that is not ASCII) and decoded.
    fn decode_line<'a>(
        &self,
        line: &'a [u8],
        reader: Reader,
        removal: bool,
        urls: UrlPairs<'a>,
    ) -> Result<Record<'a>, InvalidReason> {
        // Nothing below decodes another line, so the borrow is never
        // taken twice.
        BUFFERS
            .with_borrow_mut(|buffers| self.decode_buffered(line, reader, removal, urls, buffers))
    }

    /// [`Decoder::decode_line`] with the buffers at hand.
    #[inline(always)]
    fn decode_buffered<'a>(
        &self,
        line: &'a [u8],
        reader: Reader,
        removal: bool,
        urls: UrlPairs<'a>,
        Buffers { scanned, captures }: &mut Buffers,
    ) -> Result<Record<'a>, InvalidReason> {
        let text = scanned.load(line)?;
        captures.clear();
        self.decode_str(text, scanned, captures, reader, removal, urls)
    }

    /// Whether the fast path reads `line` as serde_json alone reads it: the
    /// same record or the same refusal, compared as their `Debug` text;
    /// otherwise both, in words. For the fuzz targets (`crate::fuzzing`).
    pub(crate) fn fast_path_agrees(&self, line: &[u8]) -> Result<(), String> {
        let show = |record: Result<Record<'_>, InvalidReason>| format!("{record:?}");
        let fast = show(self.decode_with(line, Reader::Fast));
        let reference = show(self.decode_with(line, Reader::Serde));
        if fast == reference {
            return Ok(());
        }
        Err(format!("fast path: {fast}\nserde_json: {reference}"))
    }

    /// Decodes a line that asks for a removal (the sidecar's
    /// `"dedup_op":"remove"`): only its id is needed, found where a
    /// message's is (or where a notice's is). The record is a
    /// [`Record::deletion`].
    pub fn decode_removal<'a>(&self, line: &'a [u8]) -> Result<Record<'a>, InvalidReason> {
        self.decode_line(line, Reader::Fast, true, Vec::new())
    }

    fn decode_str<'a>(
        &self,
        line: &'a str,
        scanned: &Scanned,
        captures: &mut Vec<Capture>,
        reader: Reader,
        removal: bool,
        mut urls: UrlPairs<'a>,
    ) -> Result<Record<'a>, InvalidReason> {
        urls.clear();
        let mut shape = RootShape::default();
        // The fast path: one checked pass that records where the wanted
        // values lie ([`Walk`]). Anything it refuses goes to serde_json,
        // whose verdict and words stand: errors read as they always did,
        // and a line the fast path would wrongly refuse is still read.
        let fast = match reader {
            Reader::Fast => self.walk(line, scanned, captures, &mut shape),
            #[cfg(test)]
            Reader::Sonic => self.walk_with_sonic(line, captures, &mut shape),
            Reader::Serde => false,
        };
        if !fast {
            captures.clear();
            shape = RootShape::default();
            let mut de = serde_json::Deserializer::from_str(line);
            NodeSeed {
                node: &self.tree,
                captures: &mut *captures,
                line,
                element: 0,
                shape: Some(&mut shape),
            }
            .deserialize(&mut de)
            .and_then(|()| de.end())
            .map_err(json_error)?;
        }
        let captures = Found::new(captures);
        if !shape.object {
            return Err(InvalidReason::NotObject);
        }
        let splice = Splice {
            // The closing brace: after it, an object read as JSON has only
            // JSON's four whitespace bytes.
            at: line
                .as_bytes()
                .iter()
                .rposition(|&b| !matches!(b, b' ' | b'\t' | b'\n' | b'\r'))
                .unwrap_or_default(),
            needs_comma: shape.members > 0,
        };
        let found = |path: u16| captures.of(path);
        // The first path with a non-null value: its position and the value.
        let first_present = |paths: &[u16]| {
            paths
                .iter()
                .enumerate()
                .find_map(|(index, &p)| found(p).find(|c| !c.is_null(line)).map(|c| (index, c)))
        };

        // A deletion notice: the id it names, and nothing to compare.
        let notice = if captures.any(&self.notices) {
            first_present(&self.notice_ids)
        } else {
            None
        };
        if notice.is_some() || removal {
            let (id_raw, path) = match notice {
                Some((index, c)) => (c.raw(line), NOTICE_ID_PATHS[index].to_string()),
                None => {
                    let (index, c) = first_present(&self.ids)
                        .ok_or_else(|| InvalidReason::NoId(FieldSpec::looked_for(&self.spec.id)))?;
                    (c.raw(line), self.spec.id[index].to_string())
                }
            };
            return Ok(Record {
                id: MessageId::from_json(id_raw).ok_or(InvalidReason::BadId(path))?,
                text: Cow::Borrowed(""),
                urls,
                splice,
                created_at: None,
                deletion: true,
            });
        }

        let (id_index, id_capture) = first_present(&self.ids)
            .ok_or_else(|| InvalidReason::NoId(FieldSpec::looked_for(&self.spec.id)))?;
        let id = MessageId::from_json(id_capture.raw(line))
            .ok_or_else(|| InvalidReason::BadId(self.spec.id[id_index].to_string()))?;

        let text = if self.spec.discover_text {
            match self.retweet_text(line, &captures) {
                Some(text) => text,
                None => {
                    let (index, c) = first_present(&self.texts).ok_or_else(|| {
                        InvalidReason::NoText(FieldSpec::looked_for(&self.spec.text))
                    })?;
                    c.text(line).ok_or_else(|| {
                        InvalidReason::TextNotString(self.spec.text[index].to_string())
                    })?
                }
            }
        } else {
            let mut joined: Option<Cow<'a, str>> = None;
            for (index, &path) in self.texts.iter().enumerate() {
                for c in found(path).filter(|c| !c.is_null(line)) {
                    let part = c.text(line).ok_or_else(|| {
                        InvalidReason::TextNotString(self.spec.text[index].to_string())
                    })?;
                    joined = Some(match joined {
                        None => part,
                        Some(so_far) => Cow::Owned(format!("{so_far} {part}")),
                    });
                }
            }
            joined.ok_or_else(|| InvalidReason::NoText(FieldSpec::looked_for(&self.spec.text)))?
        };

        // Most lines have no URL entity: one test of the mask for all the
        // pairs' paths.
        if captures.any(&self.url_shorts) {
            let mut pair = |short: u16, long: u16| {
                for s in found(short) {
                    let l = found(long).find(|l| l.element == s.element);
                    if let (Some(s), Some(l)) = (s.text(line), l.and_then(|l| l.text(line))) {
                        urls.push((s, l));
                    }
                }
            };
            match &self.url_long_of {
                // The pairs whose short path is present, in order.
                Some(long_of) => {
                    let mut shorts = captures.present.bits & self.url_shorts.bits;
                    while shorts != 0 {
                        let short = shorts.trailing_zeros() as u16;
                        shorts &= shorts - 1;
                        pair(short, long_of[usize::from(short & 63)]);
                    }
                }
                None => {
                    for &(short, long) in &self.url_pairs {
                        pair(short, long);
                    }
                }
            }
        }
        // A date has no escapes: a string with one is no date.
        let created_at = self.created_at.iter().find_map(|&path| {
            let c = found(path).next()?;
            c.plain_text(line).or_else(|| {
                let text = c.raw(line).strip_prefix('"')?.strip_suffix('"')?;
                (!text.contains('\\')).then_some(text)
            })
        });
        Ok(Record {
            id,
            text,
            urls,
            splice,
            created_at,
            deletion: false,
        })
    }

    /// Walks `line` with the fast path ([`Walk`]); false when it refuses
    /// the line.
    fn walk(
        &self,
        line: &str,
        scanned: &Scanned,
        captures: &mut Vec<Capture>,
        shape: &mut RootShape,
    ) -> bool {
        debug_assert_eq!(scanned.padded.len(), line.len() + PAD);
        let mut walk = Walk {
            scan: Scan {
                bytes: &scanned.padded,
                stops: &scanned.stops,
                len: line.len(),
                at: 0,
            },
            line,
            captures,
        };
        walk.walked(&self.tree, 0, Some(shape)).is_ok() && walk.scan.at_end()
    }

    /// Walks `line` with sonic-rs's parser, if it may (see
    /// `sonic_checks_enough`); false when it may not or refuses the line.
    #[cfg(test)]
    fn walk_with_sonic(
        &self,
        line: &str,
        captures: &mut Vec<Capture>,
        shape: &mut RootShape,
    ) -> bool {
        if !sonic_checks_enough(line.as_bytes()) {
            return false;
        }
        let mut walk = SonicWalk {
            parser: Parser::new(sonic_rs::Read::from(line)),
            line,
            captures,
            scratch: Vec::new(),
        };
        walk.walked(&self.tree, 0, Some(shape)).is_ok() && walk.parser.skip_space().is_none()
    }

    /// The retweeted tweet's text, when this record is a native retweet that
    /// carries it.
    fn retweet_text<'a>(&self, line: &'a str, captures: &Found<'_>) -> Option<Cow<'a, str>> {
        for &path in &self.retweet_texts {
            if let Some(text) = captures.of(path).next().and_then(|c| c.text(line)) {
                return Some(text);
            }
        }
        for kind in captures.of(self.referenced_type) {
            if kind.raw(line) == "\"retweeted\"" {
                let text = captures
                    .of(self.referenced_text)
                    .find(|c| c.element == kind.element)
                    .and_then(|c| c.text(line));
                if text.is_some() {
                    return text;
                }
            }
        }
        None
    }
}

/// A JSON string literal's contents, borrowed when it has no escapes. A
/// lone surrogate escape (`\ud83d` without its pair) becomes U+FFFD; `None`
/// only when `raw` (a value's JSON text, checked by the parser) is not a
/// string.
fn json_str(raw: &str) -> Option<Cow<'_, str>> {
    #[derive(Deserialize)]
    struct Text<'a>(#[serde(borrow)] Cow<'a, str>);
    let quoted = raw.strip_prefix('"')?;
    // The parser has checked the string already: without a backslash, its
    // text is what lies between the quotes, and no second parse is needed.
    if let Some(text) = quoted.strip_suffix('"')
        && memchr::memchr(b'\\', text.as_bytes()).is_none()
    {
        return Some(Cow::Borrowed(text));
    }
    if let Some(text) = quoted.strip_suffix('"').and_then(unescape_simple) {
        return Some(Cow::Owned(text));
    }
    match serde_json::from_str::<Text<'_>>(raw) {
        Ok(text) => Some(text.0),
        // The one thing the first parse accepts and a string refuses: an
        // unpaired surrogate escape.
        Err(_) => lossy_json_str(raw).map(Cow::Owned),
    }
}

/// The contents of a checked string's text (between its quotes) whose
/// escapes all stand for one ASCII character (`\"`, `\\`, `\/`, `\b`,
/// `\f`, `\n`, `\r`, `\t`), copied between them at once; `None` at a
/// `\u` escape, which serde_json reads. One text in twelve of `dev-200k`
/// has such an escape (quotes, line breaks), and serde_json's reading,
/// from a scratch buffer grown from empty, cost about 1,680 instructions.
fn unescape_simple(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(bytes.len());
    let mut from = 0;
    for at in memchr::memchr_iter(b'\\', bytes) {
        // The second backslash of an escaped backslash.
        if at < from {
            continue;
        }
        out.push_str(text.get(from..at)?);
        out.push(match bytes.get(at + 1)? {
            b'"' => '"',
            b'\\' => '\\',
            b'/' => '/',
            b'b' => '\u{8}',
            b'f' => '\u{c}',
            b'n' => '\n',
            b'r' => '\r',
            b't' => '\t',
            _ => return None,
        });
        from = at + 2;
    }
    out.push_str(text.get(from..)?);
    Some(out)
}

/// Decodes a JSON string literal whose escapes may hold lone surrogates,
/// each replaced by U+FFFD. serde_json decodes such a literal as bytes into
/// WTF-8, where a lone surrogate is the three bytes `ED A0..BF 80..BF`, the
/// same length as U+FFFD's `EF BF BD`: they are swapped in place.
fn lossy_json_str(literal: &str) -> Option<String> {
    struct Bytes;
    impl Visitor<'_> for Bytes {
        type Value = Vec<u8>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a string")
        }
        fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<Vec<u8>, E> {
            Ok(v.to_vec())
        }
    }
    let mut de = serde_json::Deserializer::from_str(literal);
    let mut bytes = de.deserialize_bytes(Bytes).ok()?;
    let mut i = 0;
    while let Some(at) = memchr::memchr(0xED, &bytes[i..]) {
        let at = i + at;
        if bytes.len() >= at + 3 && (0xA0..=0xBF).contains(&bytes[at + 1]) {
            bytes[at..at + 3].copy_from_slice("\u{FFFD}".as_bytes());
        }
        i = at + 1;
    }
    String::from_utf8(bytes).ok()
}

/// How many zero bytes follow a line's copy in [`Scanned::padded`] (as
/// [`stops::classify`] copies it): a block, so that the scan's stop past
/// the line's last block, and every read of up to sixteen bytes from a
/// position within the line or at its end, lie in the copy.
const PAD: usize = stops::BLOCK;

/// A line as [`Scan`] reads it: its bytes followed by [`PAD`] zero bytes,
/// and its stops ([`stops::classify`]) followed by a word of all ones. With
/// them, the scan reads bytes and stop words without a bound check of its
/// own (see [`Scan`]): a zero byte is part of no JSON token, so no scan
/// goes past the line's end, and a string's search for its next stop ends
/// at the sentinel word at the latest.
struct Scanned {
    padded: Vec<u8>,
    stops: Vec<u64>,
}

impl Scanned {
    const fn new() -> Scanned {
        Scanned {
            padded: Vec::new(),
            stops: Vec::new(),
        }
    }

    /// Loads `line`: its stops classified, its copy padded, and the line as
    /// text, checked as UTF-8 only when the classification met a byte that
    /// is not ASCII (ASCII is UTF-8), refused as [`utf8`] refuses it.
    fn load<'a>(&mut self, line: &'a [u8]) -> Result<&'a str, InvalidReason> {
        let ascii = stops::classify(line, &mut self.stops, &mut self.padded);
        self.stops.push(u64::MAX);
        debug_assert_eq!(self.padded.len(), line.len() + PAD);
        if ascii {
            debug_assert!(line.is_ascii());
            // SAFETY: `classify` found every byte of the line below 0x80,
            // and ASCII text is UTF-8 (its tests hold that answer to
            // `is_ascii` on every path).
            return Ok(unsafe { std::str::from_utf8_unchecked(line) });
        }
        utf8(line)
    }
}

/// The line as text, checked with SIMD where the processor has it: every
/// byte of a line not found all ASCII ([`Scanned::load`]) is checked, and the
/// standard library's check (which skips ASCII a word at a time) cost a
/// tweet-sized line 340 instructions.
fn utf8(line: &[u8]) -> Result<&str, InvalidReason> {
    simdutf8::compat::from_utf8(line).map_err(|e| InvalidReason::Utf8(e.valid_up_to()))
}

/// Why a line is not JSON, in words. String values are only checked as
/// JSON text, where a lone surrogate escape is valid; keys are read as
/// strings, where it is not, and serde_json's words for that ("unexpected
/// end of hex escape") do not say so.
fn json_error(e: serde_json::Error) -> InvalidReason {
    let message = e.to_string();
    if message.starts_with("unexpected end of hex escape")
        || message.starts_with("lone leading surrogate")
    {
        return InvalidReason::Json(format!(
            "an object key holds an unpaired UTF-16 surrogate escape ({message})"
        ));
    }
    InvalidReason::Json(message)
}

/// Writes `line` with the tag spliced in, then `\n`.
///
/// Every output line is written here: the member's name goes with its
/// comma in one copy, and the line's end (its closing brace, most often
/// all there is after the splice) with its `\n`, without a call to
/// `memcpy` for a byte or two.
pub fn write_tagged(
    out: &mut Vec<u8>,
    line: &[u8],
    splice: Splice,
    tag: impl FnOnce(&mut Vec<u8>),
) {
    let (head, rest) = line.split_at(splice.at.min(line.len()));
    out.extend_from_slice(head);
    if splice.needs_comma {
        out.extend_from_slice(b",\"dedup\":");
    } else {
        out.extend_from_slice(b"\"dedup\":");
    }
    tag(out);
    match rest {
        [brace] => out.extend_from_slice(&[*brace, b'\n']),
        _ => {
            out.extend_from_slice(rest);
            out.push(b'\n');
        }
    }
}

#[derive(Default)]
struct RootShape {
    object: bool,
    members: usize,
}

/// Matches an object key against a node's wanted fields without allocating.
struct FieldMatch<'n>(&'n Node);

impl<'de, 'n> DeserializeSeed<'de> for FieldMatch<'n> {
    type Value = Option<usize>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Option<usize>, D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl<'de, 'n> Visitor<'de> for FieldMatch<'n> {
    type Value = Option<usize>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object key")
    }

    fn visit_str<E: de::Error>(self, key: &str) -> Result<Option<usize>, E> {
        Ok(self.0.fields.iter().position(|(name, _)| name == key))
    }
}

/// The fast path: one validating pass over the line that descends only into
/// wanted paths and records where their values lie, skipping everything
/// else with a checked scan ([`Scan`]) instead of a parser's token calls.
/// It reads a line as serde_json's walk (`NodeSeed`) does, check for check:
/// where a path ends, the value is skipped as serde_json skips it (checked
/// as JSON text: escapes, control characters, the number grammar; a lone
/// surrogate escape allowed) and its text captured; where that walk visits
/// a value (the root, a node no path ends at), a key or string holding an
/// escape, or a number, is read by serde_json itself (a lone surrogate
/// refused, `1e400` refused), so nothing is judged twice in two ways. Any
/// refusal sends the line to serde_json, whose verdict and words stand.
struct Walk<'a, 'c> {
    scan: Scan<'a>,
    /// The line being decoded: captures are offsets into it.
    line: &'a str,
    captures: &'c mut Vec<Capture>,
}

/// The walk met something it does not read itself (serde_json says what).
struct Refused;

impl Walk<'_, '_> {
    /// One value on a wanted path: captured if a path ends here, walked if
    /// paths go on.
    #[inline(always)]
    fn value(&mut self, node: &Node, element: u32) -> Result<(), Refused> {
        if node.captures.is_empty() {
            return self.walked(node, element, None);
        }
        let branch = node.is_branch();
        let first = self.captures.len();
        if branch {
            // A path ends here and others go on (say `data` and
            // `data.id`): walked, and its text captured too. The captures
            // go in first, so they come before the ones made below.
            for &path in &node.captures {
                self.captures.push(Capture {
                    path,
                    element,
                    start: 0,
                    end: 0,
                    plain: false,
                });
            }
        }
        let first_byte = self.scan.space();
        let start = self.scan.at;
        let mut plain = false;
        if branch {
            self.walked(node, element, None)?;
        } else if first_byte == b'"' {
            // A string, skipped as `skip` would, noting whether it held an
            // escape.
            self.scan.at += 1;
            plain = !self.scan.string()?;
        } else {
            self.scan.skip()?;
        }
        let end = self.scan.at;
        if branch {
            for capture in &mut self.captures[first..first + node.captures.len()] {
                capture.start = start;
                capture.end = end;
            }
        } else {
            for &path in &node.captures {
                self.captures.push(Capture {
                    path,
                    element,
                    start,
                    end,
                    plain,
                });
            }
        }
        Ok(())
    }

    /// A value serde_json's walk visits (`deserialize_any`): objects and
    /// arrays entered, strings and numbers read, as it reads them.
    fn walked(
        &mut self,
        node: &Node,
        element: u32,
        shape: Option<&mut RootShape>,
    ) -> Result<(), Refused> {
        let first = self.scan.space();
        let start = self.scan.at;
        match first {
            b'{' => {
                self.scan.at += 1;
                self.object(node, element, shape)
            }
            b'[' => {
                self.scan.at += 1;
                self.array(node)
            }
            b'"' => {
                self.scan.at += 1;
                if self.scan.string()? {
                    // Read as a string, where an unpaired surrogate escape
                    // is refused: serde_json's own reading, on a rare path.
                    let text = &self.line[start..self.scan.at];
                    serde_json::from_str::<String>(text).map_err(|_| Refused)?;
                }
                Ok(())
            }
            b'-' | b'0'..=b'9' => {
                self.scan.number()?;
                // Read as a number, where one past `f64` is refused.
                let text = &self.line[start..self.scan.at];
                serde_json::from_str::<serde_json::Number>(text).map_err(|_| Refused)?;
                Ok(())
            }
            b't' => self.scan.literal(b"true"),
            b'f' => self.scan.literal(b"false"),
            b'n' => self.scan.literal(b"null"),
            _ => Err(Refused),
        }
    }

    /// An object's members, after its `{`: wanted keys walked, the others'
    /// values skipped; of a repeated key the last occurrence wins, as in
    /// `NodeSeed::visit_map`.
    fn object(
        &mut self,
        node: &Node,
        element: u32,
        mut shape: Option<&mut RootShape>,
    ) -> Result<(), Refused> {
        if let Some(shape) = shape.as_deref_mut() {
            shape.object = true;
        }
        match self.scan.space() {
            b'}' => {
                self.scan.at += 1;
                return Ok(());
            }
            b'"' => {}
            _ => return Err(Refused),
        }
        // Captures of this object start here; `seen` has bit `i % 64` set
        // once wanted field `i` was met in it.
        let start = self.captures.len();
        let mut seen = 0u64;
        loop {
            let field = self.key(node)?;
            self.scan.colon()?;
            if let Some(shape) = shape.as_deref_mut() {
                shape.members += 1;
            }
            match field {
                Some(i) => {
                    let bit = 1u64 << (i % 64);
                    if seen & bit != 0 {
                        drop_earlier(self.captures, start, &node.fields[i].1.below);
                    }
                    seen |= bit;
                    self.value(&node.fields[i].1, element)?;
                }
                None => self.scan.skip_value()?,
            }
            if self.scan.next_key() {
                continue;
            }
            match self.scan.space() {
                b',' => {
                    self.scan.at += 1;
                    if self.scan.space() != b'"' {
                        return Err(Refused);
                    }
                }
                b'}' => {
                    self.scan.at += 1;
                    return Ok(());
                }
                _ => return Err(Refused),
            }
        }
    }

    /// A key of an object on a wanted path, at its opening quote: which of
    /// `node`'s fields it names. Compared as it lies in the line; one with
    /// an escape is read by serde_json (a lone surrogate refused), rare.
    #[inline(always)]
    fn key(&mut self, node: &Node) -> Result<Option<usize>, Refused> {
        let open = self.scan.at;
        self.scan.at += 1;
        let escaped = self.scan.string()?;
        if escaped {
            let text = &self.line[open..self.scan.at];
            let key = serde_json::from_str::<String>(text).map_err(|_| Refused)?;
            let key = key.as_bytes();
            let (head, tail) = key_words(key);
            return Ok(node.field(key.len(), head, tail, || key));
        }
        // The key lies between the quotes; its text is sliced only for a
        // key too long for its two words.
        let (from, to) = (open + 1, self.scan.at - 1);
        let key_len = to - from;
        if !node.may_have_length(key_len) {
            return Ok(None);
        }
        // The key's two words read from the line's padded copy (the
        // closing quote, and what follows it or the padding, are there),
        // the bytes past the key masked off.
        let keep = |word: u64, n: usize| match n {
            0..8 => word & ((1u64 << (8 * n)) - 1),
            _ => word,
        };
        let head = keep(self.scan.word(from), key_len);
        let tail = match key_len {
            0..=8 => 0,
            n => keep(self.scan.word(from + 8), n - 8),
        };
        let line = self.line.as_bytes();
        Ok(node.field(key_len, head, tail, || &line[from..to]))
    }

    /// An array's elements, after its `[`: each walked when a path goes
    /// through every element, skipped otherwise.
    fn array(&mut self, node: &Node) -> Result<(), Refused> {
        if self.scan.space() == b']' {
            self.scan.at += 1;
            return Ok(());
        }
        let mut element = 0u32;
        loop {
            match node.each.as_deref() {
                Some(each) => self.value(each, element)?,
                None => self.scan.skip_value()?,
            }
            element = element.saturating_add(1);
            match self.scan.space() {
                b',' => self.scan.at += 1,
                b']' => {
                    self.scan.at += 1;
                    return Ok(());
                }
                _ => return Err(Refused),
            }
        }
    }
}

/// A checked scan of JSON text, at byte `at` of a line already known to be
/// UTF-8: it accepts only what serde_json's skipping (`ignore_value`)
/// accepts, and refuses the rest, which then goes to serde_json. Skipped
/// values nest at most [`Scan::MAX_DEPTH`] deep here (a bit each on one
/// word); deeper ones go to serde_json, which has no limit there.
///
/// It reads the line's padded copy ([`Scanned`]) without bound checks, on
/// one invariant: `at` never passes `len`. The scan moves only over bytes
/// it has read and found part of a JSON token (or over a string's
/// contents, up to a stop inside the line), and the zero bytes past the
/// line are part of none, so it halts at the line's end at the latest.
/// From there it reads at most sixteen bytes ahead; a stop it finds is
/// inside the line or is the sentinel word's first, less than a block past
/// the line's end; and the padding holds a block ([`PAD`]). Debug builds
/// (every test) check each read.
struct Scan<'a> {
    /// The line followed by [`PAD`] zero bytes.
    bytes: &'a [u8],
    /// The line's stops (quotes, backslashes, control characters), a word
    /// per 64 bytes ([`stops::classify`]), and a word of all ones.
    stops: &'a [u64],
    /// The line's length: where the padding starts.
    len: usize,
    /// The offset of the next byte to read.
    at: usize,
}

/// Eight copies of a byte, for the word-at-a-time scans.
const fn splat(byte: u8) -> u64 {
    u64::from_ne_bytes([byte; 8])
}

impl Scan<'_> {
    /// The most containers a skipped value may nest.
    const MAX_DEPTH: u32 = 64;

    /// The byte at `at`: the line's, or a zero past its end.
    #[inline(always)]
    fn byte(&self, at: usize) -> u8 {
        debug_assert!(at < self.bytes.len());
        // SAFETY: `at` is less than `PAD` past the line's end (the scan's
        // invariant, [`Scan`]), and `bytes` holds `PAD` bytes after it.
        unsafe { *self.bytes.get_unchecked(at) }
    }

    /// The eight bytes from `at`, the first the lowest.
    #[inline(always)]
    fn word(&self, at: usize) -> u64 {
        debug_assert!(at <= self.len + 8 && at + 8 <= self.bytes.len());
        // SAFETY: as for [`Scan::byte`]: the eight bytes end at most 16
        // past the line's end, within the padding.
        u64::from_le(unsafe { self.bytes.as_ptr().add(at).cast::<u64>().read_unaligned() })
    }

    /// Whether the scan has reached the line's end (whitespace skipped).
    #[inline(always)]
    fn at_end(&mut self) -> bool {
        self.space();
        self.at == self.len
    }

    /// Skips JSON whitespace (the four bytes serde_json takes as such) and
    /// peeks at the next byte: zero at the line's end.
    #[inline(always)]
    fn space(&mut self) -> u8 {
        // Compact JSON first: every whitespace byte is at most a space.
        let byte = self.byte(self.at);
        if byte > b' ' {
            return byte;
        }
        loop {
            let byte = self.byte(self.at);
            if !matches!(byte, b' ' | b'\n' | b'\t' | b'\r') {
                return byte;
            }
            self.at += 1;
        }
    }

    /// The offset of the first stop at or after `from` (which is at most
    /// the line's end): the sentinel's first bit, past the line's end, when
    /// the line has none from there.
    #[inline(always)]
    fn next_stop(&self, from: usize) -> usize {
        let stop_word = |block: usize| {
            debug_assert!(block < self.stops.len());
            // SAFETY: `from` is at most the line's end, so `from / BLOCK`
            // is at most the index of the sentinel word, which ends the
            // search (it is all ones).
            unsafe { *self.stops.get_unchecked(block) }
        };
        debug_assert!(from <= self.len);
        let mut block = from / stops::BLOCK;
        let mut mask = stop_word(block) & (!0u64 << (from % stops::BLOCK));
        while mask == 0 {
            block += 1;
            mask = stop_word(block);
        }
        block * stops::BLOCK + mask.trailing_zeros() as usize
    }

    /// A string's rest, after its opening quote, up to and past its closing
    /// one; whether it held an escape. Only the stops are looked at: the
    /// first one is the closing quote, an escape (checked, then the search
    /// goes on after it) or a control character (refused).
    #[inline(always)]
    fn string(&mut self) -> Result<bool, Refused> {
        let at = self.next_stop(self.at);
        if self.byte(at) == b'"' {
            self.at = at + 1;
            return Ok(false);
        }
        self.string_from(at)
    }

    /// [`Scan::string`] past its first stop, at `at`, when that is not the
    /// closing quote: escapes are rare, and kept out of the many places
    /// the scan of a plain string is inlined into.
    #[inline(never)]
    fn string_from(&mut self, mut at: usize) -> Result<bool, Refused> {
        let mut escaped = false;
        loop {
            // Past the line's end (the sentinel's stop) the byte is zero.
            match self.byte(at) {
                b'"' => {
                    self.at = at + 1;
                    return Ok(escaped);
                }
                b'\\' => {
                    escaped = true;
                    match self.byte(at + 1) {
                        b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => {
                            self.at = at + 2;
                        }
                        b'u' => {
                            // A zero byte past the line's end is no digit.
                            if !(at + 2..at + 6).all(|at| self.byte(at).is_ascii_hexdigit()) {
                                return Err(Refused);
                            }
                            self.at = at + 6;
                        }
                        _ => return Err(Refused),
                    }
                }
                _ => return Err(Refused),
            }
            at = self.next_stop(self.at);
        }
    }

    /// A number, at its first byte: `-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`.
    /// A digit after a leading `0` ends the number, and the container
    /// refuses it.
    #[inline(always)]
    fn number(&mut self) -> Result<(), Refused> {
        let digits = |at: &mut usize| {
            let from = *at;
            // Eight at a time: an id is nineteen digits. The first flagged
            // byte ends the digits, at the line's end at the latest (the
            // padding's zeros are flagged).
            loop {
                let word = self.word(*at);
                // A byte is flagged if below `0` (borrowing), above `9`
                // (carrying into its top bit) or non-ASCII; a borrow or a
                // carry only ever flags bytes after a flagged one.
                let not_digit =
                    (word.wrapping_sub(splat(b'0')) | word.wrapping_add(splat(0x7f - b'9')) | word)
                        & splat(0x80);
                if not_digit != 0 {
                    *at += (not_digit.trailing_zeros() / 8) as usize;
                    return *at > from;
                }
                *at += 8;
            }
        };
        let mut at = self.at;
        if self.byte(at) == b'-' {
            at += 1;
        }
        match self.byte(at) {
            b'0' => at += 1,
            b'1'..=b'9' => {
                digits(&mut at);
            }
            _ => return Err(Refused),
        }
        if self.byte(at) == b'.' {
            at += 1;
            if !digits(&mut at) {
                return Err(Refused);
            }
        }
        if matches!(self.byte(at), b'e' | b'E') {
            at += 1;
            if matches!(self.byte(at), b'+' | b'-') {
                at += 1;
            }
            if !digits(&mut at) {
                return Err(Refused);
            }
        }
        self.at = at;
        Ok(())
    }

    /// `true`, `false` or `null`, at its first byte.
    fn literal(&mut self, word: &[u8]) -> Result<(), Refused> {
        // A literal is at most five bytes: read from within the line, they
        // end inside the padding.
        if !word
            .iter()
            .enumerate()
            .all(|(i, &b)| self.byte(self.at + i) == b)
        {
            return Err(Refused);
        }
        self.at += word.len();
        Ok(())
    }

    /// A whole value, whitespace first: a string, the commonest value an
    /// unwanted member holds, is scanned here, without a call of
    /// [`Scan::skip`].
    #[inline(always)]
    fn skip_value(&mut self) -> Result<(), Refused> {
        match self.space() {
            b'"' => {
                self.at += 1;
                self.string().map(drop)
            }
            _ => self.skip(),
        }
    }

    /// A whole value, at its first byte (whitespace skipped), containers
    /// and all, without recursion: the open containers are bits of one
    /// word, 1 for an object.
    fn skip(&mut self) -> Result<(), Refused> {
        let mut open = 0u64;
        let mut depth = 0u32;
        'value: loop {
            match self.space() {
                b'"' => {
                    self.at += 1;
                    self.string()?;
                }
                b'{' => {
                    self.at += 1;
                    match self.space() {
                        b'}' => self.at += 1,
                        b'"' if depth < Self::MAX_DEPTH => {
                            open = open << 1 | 1;
                            depth += 1;
                            self.member_key()?;
                            continue 'value;
                        }
                        _ => return Err(Refused),
                    }
                }
                b'[' => {
                    self.at += 1;
                    match self.space() {
                        b']' => self.at += 1,
                        _ if depth < Self::MAX_DEPTH => {
                            open <<= 1;
                            depth += 1;
                            continue 'value;
                        }
                        _ => return Err(Refused),
                    }
                }
                b'-' | b'0'..=b'9' => self.number()?,
                b't' => self.literal(b"true")?,
                b'f' => self.literal(b"false")?,
                b'n' => self.literal(b"null")?,
                _ => return Err(Refused),
            }
            // After a value: close what it ends, until a comma calls for
            // the next.
            loop {
                if depth == 0 {
                    return Ok(());
                }
                let object = open & 1 == 1;
                if object && self.next_key() {
                    self.member_key()?;
                    continue 'value;
                }
                match self.space() {
                    b',' => {
                        self.at += 1;
                        if object {
                            if self.space() != b'"' {
                                return Err(Refused);
                            }
                            self.member_key()?;
                        }
                        continue 'value;
                    }
                    b'}' if object => {}
                    b']' if !object => {}
                    _ => return Err(Refused),
                }
                self.at += 1;
                open >>= 1;
                depth -= 1;
            }
        }
    }

    /// A skipped object's key and its colon, at the key's opening quote.
    #[inline(always)]
    fn member_key(&mut self) -> Result<(), Refused> {
        self.at += 1;
        self.string()?;
        self.colon()
    }

    /// The colon after a key, whitespace first; compact JSON's colon right
    /// after the key's quote is taken without the whitespace test.
    #[inline(always)]
    fn colon(&mut self) -> Result<(), Refused> {
        if self.byte(self.at) != b':' && self.space() != b':' {
            return Err(Refused);
        }
        self.at += 1;
        Ok(())
    }

    /// After a member's value: whether the next two bytes are compact
    /// JSON's `,"`, the comma then taken and the scan left at the next
    /// key's quote. Anything else (whitespace, the object's end, an error)
    /// is left for the general test.
    #[inline(always)]
    fn next_key(&mut self) -> bool {
        let next = self.word(self.at) as u16 == u16::from_le_bytes(*b",\"");
        if next {
            self.at += 1;
        }
        next
    }
}

/// Today's fast path until issue 42, kept as a test oracle: a walk over
/// sonic-rs's parser that descends only into
/// wanted paths and skips everything else with the parser's checked
/// skipping, without serde's visitor machinery. It reads a line as
/// serde_json's walk (`NodeSeed`) does, check for check: where that walk
/// visits a value (the root, a node no path ends at), keys and strings are
/// read as strings (a lone surrogate escape refused) and numbers as
/// numbers (`1e400` refused); where a path ends, the value is skipped
/// (checked as JSON text, lone surrogates allowed) and its text captured.
/// Any refusal sends the line to serde_json, whose verdict stands.
#[cfg(test)]
struct SonicWalk<'a, 'c> {
    parser: Parser<sonic_rs::Read<'a>>,
    /// The line being decoded: captures are offsets into it.
    line: &'a str,
    captures: &'c mut Vec<Capture>,
    /// Where keys and strings holding escapes are unescaped.
    scratch: Vec<u8>,
}

#[cfg(test)]
impl From<sonic_rs::Error> for Refused {
    fn from(_: sonic_rs::Error) -> Refused {
        Refused
    }
}

#[cfg(test)]
impl SonicWalk<'_, '_> {
    /// One value on a wanted path: captured if a path ends here, walked if
    /// paths go on.
    fn value(&mut self, node: &Node, element: u32) -> Result<(), Refused> {
        if node.captures.is_empty() {
            return self.walked(node, element, None);
        }
        let first = self.captures.len();
        let (start, end) = if node.is_branch() {
            // A path ends here and others go on (say `data` and
            // `data.id`): walked, and its text captured too. The captures
            // go in first, so they come before the ones made below.
            for &path in &node.captures {
                self.captures.push(Capture {
                    path,
                    element,
                    start: 0,
                    end: 0,
                    plain: false,
                });
            }
            self.parser.skip_space_peek().ok_or(Refused)?;
            let start = self.parser.offset();
            self.walked(node, element, None)?;
            (start, self.parser.offset())
        } else {
            let (raw, _) = self.parser.skip_one(true)?;
            let start = (raw.as_ptr() as usize).wrapping_sub(self.line.as_ptr() as usize);
            (start, start + raw.len())
        };
        if self.line.get(start..end).is_none() {
            return Err(Refused);
        }
        if node.is_branch() {
            for capture in &mut self.captures[first..first + node.captures.len()] {
                capture.start = start;
                capture.end = end;
            }
        } else {
            for &path in &node.captures {
                self.captures.push(Capture {
                    path,
                    element,
                    start,
                    end,
                    plain: false,
                });
            }
        }
        Ok(())
    }

    /// A value serde_json's walk visits (`deserialize_any`): objects and
    /// arrays entered, strings and numbers read, as it reads them.
    fn walked(
        &mut self,
        node: &Node,
        element: u32,
        shape: Option<&mut RootShape>,
    ) -> Result<(), Refused> {
        match self.parser.skip_space().ok_or(Refused)? {
            b'{' => self.object(node, element, shape),
            b'[' => self.array(node),
            b'"' => {
                self.parser.parse_str(&mut self.scratch)?;
                Ok(())
            }
            c @ (b'-' | b'0'..=b'9') => {
                self.parser.parse_number(c)?;
                Ok(())
            }
            b't' => Ok(self.parser.parse_literal("rue")?),
            b'f' => Ok(self.parser.parse_literal("alse")?),
            b'n' => Ok(self.parser.parse_literal("ull")?),
            _ => Err(Refused),
        }
    }

    /// An object's members, after its `{`: wanted keys walked, the others'
    /// values skipped; of a repeated key the last occurrence wins, as in
    /// `NodeSeed::visit_map`.
    fn object(
        &mut self,
        node: &Node,
        element: u32,
        mut shape: Option<&mut RootShape>,
    ) -> Result<(), Refused> {
        if let Some(shape) = shape.as_deref_mut() {
            shape.object = true;
        }
        match self.parser.skip_space() {
            Some(b'}') => return Ok(()),
            Some(b'"') => {}
            _ => return Err(Refused),
        }
        // Captures of this object start here; `seen` has bit `i % 64` set
        // once wanted field `i` was met in it.
        let start = self.captures.len();
        let mut seen = 0u64;
        loop {
            let field = {
                let key = self.parser.parse_str(&mut self.scratch)?;
                let key = key.as_bytes();
                // The first byte before the whole key: most keys met are
                // not wanted, and this spares them a `memcmp` call.
                node.fields.iter().position(|(name, _)| {
                    let name = name.as_bytes();
                    name.len() == key.len() && name.first() == key.first() && name == key
                })
            };
            if self.parser.skip_space() != Some(b':') {
                return Err(Refused);
            }
            if let Some(shape) = shape.as_deref_mut() {
                shape.members += 1;
            }
            match field {
                Some(i) => {
                    let bit = 1u64 << (i % 64);
                    if seen & bit != 0 {
                        drop_earlier(self.captures, start, &node.fields[i].1.below);
                    }
                    seen |= bit;
                    self.value(&node.fields[i].1, element)?;
                }
                None => {
                    self.parser.skip_one(true)?;
                }
            }
            match self.parser.skip_space() {
                Some(b',') => {
                    if self.parser.skip_space() != Some(b'"') {
                        return Err(Refused);
                    }
                }
                Some(b'}') => return Ok(()),
                _ => return Err(Refused),
            }
        }
    }

    /// An array's elements, after its `[`: each walked when a path goes
    /// through every element, skipped otherwise.
    fn array(&mut self, node: &Node) -> Result<(), Refused> {
        if self.parser.skip_space_peek() == Some(b']') {
            self.parser.skip_space();
            return Ok(());
        }
        let mut element = 0u32;
        loop {
            match node.each.as_deref() {
                Some(each) => self.value(each, element)?,
                None => {
                    self.parser.skip_one(true)?;
                }
            }
            element = element.saturating_add(1);
            match self.parser.skip_space() {
                Some(b',') => {}
                Some(b']') => return Ok(()),
                _ => return Err(Refused),
            }
        }
    }
}

/// Drops what an earlier occurrence of a repeated key captured: the
/// captures made since `start` (this object's first) whose path is in
/// `below` (the field's subtree). Fields' subtrees are disjoint, so within
/// this object only that field made captures of those paths (a `seen` bit
/// shared by two fields only costs a search that finds none).
fn drop_earlier(captures: &mut Vec<Capture>, start: usize, below: &[u16]) {
    let mut kept = start;
    for j in start..captures.len() {
        if !below.contains(&captures[j].path) {
            captures.swap(kept, j);
            kept += 1;
        }
    }
    captures.truncate(kept);
}

#[cfg(test)]
/// Whether sonic-rs's checked skipping refuses every line serde_json
/// refuses, for this line. It does not check the four hex digits of a `\u`
/// escape (serde_json does, in values skipped too), and it skips nested
/// values by recursion without serde_json's limit of 128 levels: a line
/// with a `\u` not followed by four hex digits, or with more than
/// [`SONIC_MAX_OPENINGS`] brackets and braces (a bound on its depth,
/// strings counted in), goes to serde_json. Both tests are SIMD scans of
/// the line, a few hundred instructions on a tweet.
fn sonic_checks_enough(line: &[u8]) -> bool {
    // Counted in bytes, 255 at most at a time: the compiler makes this a
    // vector loop (`memchr`'s count, one pass per byte, measured dearer).
    let openings: usize = line
        .chunks(255)
        .map(|chunk| {
            let count = chunk
                .iter()
                .fold(0u8, |n, &b| n + u8::from((b == b'{') | (b == b'[')));
            usize::from(count)
        })
        .sum();
    if openings > SONIC_MAX_OPENINGS {
        return false;
    }
    // Every escape, from each backslash: `\u` and four hex digits, or two
    // bytes (the second byte is sonic-rs's to check). A backslash outside a
    // string is refused by sonic-rs anyway.
    let mut at = 0;
    while let Some(found) = memchr::memchr(b'\\', &line[at..]) {
        let escape = at + found;
        if line.get(escape + 1) == Some(&b'u') {
            let hex = line.get(escape + 2..escape + 6);
            if !hex.is_some_and(|hex| hex.iter().all(u8::is_ascii_hexdigit)) {
                return false;
            }
            at = escape + 6;
        } else {
            at = escape + 2;
        }
        if at >= line.len() {
            break;
        }
    }
    true
}

#[cfg(test)]
/// The most brackets and braces a line may hold for sonic-rs to read it.
/// Its checked skipping recurses once a level, about 45 KB of stack a level
/// in a debug build (a test thread has 2 MB): 32 keeps a test's stack safe
/// and is more than all but 1 in 5,000 lines of dev-200k hold (a full v1.1
/// tweet with a retweet holds 20 to 50; one over goes to serde_json).
const SONIC_MAX_OPENINGS: usize = 32;

/// The reference walk, driven by serde_json: walks one wanted value,
/// captures it if a path ends here, descends if paths go on. It reads the
/// lines the fast path ([`Walk`]) refuses, so that their refusal is in
/// serde_json's words, and the tests hold the fast path to it.
struct NodeSeed<'n, 'c, 'l> {
    node: &'n Node,
    captures: &'c mut Vec<Capture>,
    /// The line being decoded: captured values are borrowed from it, and
    /// kept as offsets into it.
    line: &'l str,
    element: u32,
    /// Set at the top level only, where the shape of the object matters.
    shape: Option<&'c mut RootShape>,
}

impl<'de> DeserializeSeed<'de> for NodeSeed<'_, '_, '_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        if self.node.captures.is_empty() || self.shape.is_some() {
            return deserializer.deserialize_any(self);
        }
        // serde_json hands over a wanted value's text, checked as it is
        // skipped, through its `RawValue`.
        let raw = <&'de RawValue>::deserialize(deserializer)?.get();
        let (address, len) = (raw.as_ptr() as usize, raw.len());
        let start = address.wrapping_sub(self.line.as_ptr() as usize);
        let Some(raw) = start
            .checked_add(len)
            .and_then(|end| self.line.get(start..end))
        else {
            return Err(de::Error::custom("a value outside the line"));
        };
        for &path in &self.node.captures {
            self.captures.push(Capture {
                path,
                element: self.element,
                start,
                end: start + len,
                plain: false,
            });
        }
        if self.node.is_branch() {
            // A path ends here and others go on (say `data` and `data.id`):
            // walk the captured text again, a rare case not worth a second
            // code path.
            let mut de = serde_json::Deserializer::from_str(raw);
            let seed = BranchSeed {
                node: self.node,
                captures: self.captures,
                line: self.line,
                element: self.element,
            };
            seed.deserialize(&mut de).map_err(de::Error::custom)?;
        }
        Ok(())
    }
}

/// Descends into a value whose own capture was already taken.
struct BranchSeed<'n, 'c, 'l> {
    node: &'n Node,
    captures: &'c mut Vec<Capture>,
    line: &'l str,
    element: u32,
}

impl<'de> DeserializeSeed<'de> for BranchSeed<'_, '_, '_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(NodeSeed {
            node: self.node,
            captures: self.captures,
            line: self.line,
            element: self.element,
            shape: None,
        })
    }
}

impl<'de> Visitor<'de> for NodeSeed<'_, '_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_map<M: MapAccess<'de>>(mut self, mut map: M) -> Result<(), M::Error> {
        if let Some(shape) = self.shape.as_deref_mut() {
            shape.object = true;
        }
        // Captures of this object start here; `seen` has bit `i % 64` set once
        // wanted field `i` was met in it.
        let start = self.captures.len();
        let mut seen = 0u64;
        while let Some(field) = map.next_key_seed(FieldMatch(self.node))? {
            if let Some(shape) = self.shape.as_deref_mut() {
                shape.members += 1;
            }
            match field {
                Some(i) => {
                    let bit = 1u64 << (i % 64);
                    if seen & bit != 0 {
                        // A repeated key: the last occurrence wins, so drop
                        // what the earlier one captured.
                        drop_earlier(self.captures, start, &self.node.fields[i].1.below);
                    }
                    seen |= bit;
                    map.next_value_seed(NodeSeed {
                        node: &self.node.fields[i].1,
                        captures: &mut *self.captures,
                        line: self.line,
                        element: self.element,
                        shape: None,
                    })?
                }
                None => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(())
    }

    fn visit_seq<S: SeqAccess<'de>>(self, mut seq: S) -> Result<(), S::Error> {
        match self.node.each.as_deref() {
            Some(each) => {
                let mut element = 0u32;
                while seq
                    .next_element_seed(NodeSeed {
                        node: each,
                        captures: &mut *self.captures,
                        line: self.line,
                        element,
                        shape: None,
                    })?
                    .is_some()
                {
                    element = element.saturating_add(1);
                }
            }
            None => while seq.next_element::<IgnoredAny>()?.is_some() {},
        }
        Ok(())
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(line: &str) -> Result<Record<'_>, InvalidReason> {
        Decoder::new(FieldSpec::default()).decode(line.as_bytes())
    }

    fn tagged(line: &str) -> String {
        let record = decode(line).unwrap();
        let mut out = Vec::new();
        write_tagged(&mut out, line.as_bytes(), record.splice, |o| {
            o.extend_from_slice(b"{}")
        });
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn deletion_notices_name_the_deleted_tweet() {
        let notice = |line: &str| {
            let r = decode(line).unwrap();
            assert!(r.deletion, "{line}");
            assert!(r.text.is_empty());
            r.id
        };
        // v1.1: the string first (a number may have been through a float).
        assert_eq!(
            notice(
                r#"{"delete":{"status":{"id":777838091897712600,"id_str":"777838091897712641","user_id":243730082,"user_id_str":"243730082"},"timestamp_ms":"1474286059935"}}"#
            ),
            MessageId::DigitString(777_838_091_897_712_641)
        );
        assert_eq!(
            notice(r#"{"delete":{"status":{"id":12189009100,"user_id":132553242}}}"#),
            MessageId::Integer(12_189_009_100)
        );
        // Each notice path alone is enough: a line is looked at for
        // notices only when it holds one of the paths.
        assert_eq!(
            notice(r#"{"delete":{"status":{"id_str":"5"}}}"#),
            MessageId::DigitString(5)
        );
        // v2 compliance stream.
        assert_eq!(
            notice(
                r#"{"data":{"delete":{"tweet":{"id":"601430178305220608","author_id":"3198576760"},"event_at":"2022-12-23T12:34:56.789Z"}}}"#
            ),
            MessageId::DigitString(601_430_178_305_220_608)
        );
        assert_eq!(
            tagged(r#"{"delete":{"status":{"id":1}}}"#),
            "{\"delete\":{\"status\":{\"id\":1}},\"dedup\":{}}\n"
        );
        // A tweet that merely has a member called delete is a tweet; a
        // notice without an id is refused, not guessed.
        assert!(
            !decode(r#"{"id":1,"text":"x","delete":true}"#)
                .unwrap()
                .deletion
        );
        assert!(matches!(
            decode(r#"{"delete":{"status":{"id":1.5}}}"#),
            Err(InvalidReason::BadId(path)) if path == "delete.status.id"
        ));
        assert!(decode(r#"{"delete":{"status":{}}}"#).is_err());
        // A removal the sidecar asks for needs only the id.
        let decoder = Decoder::new(FieldSpec::default());
        let r = decoder
            .decode_removal(br#"{"dedup_op":"remove","id_str":"9"}"#)
            .unwrap();
        assert!(r.deletion);
        assert_eq!(r.id, MessageId::DigitString(9));
        assert!(decoder.decode_removal(br#"{"dedup_op":"remove"}"#).is_err());
    }

    #[test]
    fn created_at_is_read_at_the_top_or_under_data_not_from_the_user() {
        let time = |line: &str| decode(line).unwrap().created_at_millis();
        assert_eq!(
            time(
                r#"{"id":1,"text":"x","created_at":"Wed Oct 10 20:19:24 +0000 2018","user":{"created_at":"Mon Jan 01 00:00:00 +0000 2007"}}"#
            ),
            Some(1_539_202_764_000)
        );
        assert_eq!(
            time(r#"{"data":{"id":"1","text":"x","created_at":"2018-10-10T20:19:24.000Z"}}"#),
            Some(1_539_202_764_000)
        );
        for absent in [
            r#"{"id":1,"text":"x","user":{"created_at":"Mon Jan 01 00:00:00 +0000 2007"}}"#,
            r#"{"id":1,"text":"x","created_at":1539202764}"#,
            r#"{"id":1,"text":"x","created_at":"last tuesday"}"#,
            r#"{"id":1,"text":"x","created_at":"2018-10-10T20:19:24\u002e000Z"}"#,
        ] {
            assert_eq!(time(absent), None, "{absent}");
        }
    }

    #[test]
    fn discovery_takes_the_first_present_field() {
        let r = decode(r#"{"id":1,"id_str":"1","text":"short","full_text":"full"}"#).unwrap();
        assert_eq!(r.id, MessageId::DigitString(1));
        assert_eq!(r.text, "full");
        let r = decode(r#"{"id_str":null,"id":7,"extended_tweet":{"full_text":"ext"},"text":"t"}"#)
            .unwrap();
        assert_eq!(r.id, MessageId::Integer(7));
        assert_eq!(r.text, "ext");
        let r = decode(r#"{"data":{"id":"55","text":"v2 \u00e9"}}"#).unwrap();
        assert_eq!(r.id, MessageId::DigitString(55));
        assert_eq!(r.text, "v2 é");
    }

    #[test]
    fn strings_are_borrowed_unless_they_hold_escapes() {
        let raw = |json: &str| serde_json::from_str::<Box<RawValue>>(json).unwrap();
        let plain = raw(r#""plain text, 日本語""#);
        assert!(matches!(
            json_str(plain.get()),
            Some(Cow::Borrowed("plain text, 日本語"))
        ));
        let escaped = raw(r#""say \"hi\" \u00e9\\""#);
        assert_eq!(json_str(escaped.get()).as_deref(), Some(r#"say "hi" é\"#));
        assert!(matches!(
            json_str(raw(r#""""#).get()),
            Some(Cow::Borrowed(""))
        ));
        assert_eq!(json_str(raw("12").get()), None);
        assert_eq!(json_str(raw("null").get()), None);
    }

    #[test]
    fn native_retweets_are_read_as_their_original() {
        let v1 = r#"{"id_str":"2","full_text":"RT @a: cut…","retweeted_status":{"full_text":"the whole original"}}"#;
        assert_eq!(decode(v1).unwrap().text, "the whole original");
        let v2 = r#"{"id":"3","text":"RT @a: cut…","referenced_tweets":[{"type":"quoted","id":"8","text":"not this"},{"type":"retweeted","id":"9","text":"the original"}]}"#;
        assert_eq!(decode(v2).unwrap().text, "the original");
        // A quote is compared by its own text.
        let quote = r#"{"id":"4","text":"my take","referenced_tweets":[{"type":"quoted","id":"9","text":"theirs"}]}"#;
        assert_eq!(decode(quote).unwrap().text, "my take");
    }

    #[test]
    fn url_entities_pair_short_and_expanded_links() {
        let line = r#"{"id_str":"1","text":"x https://t.co/a https://t.co/b","entities":{"urls":[{"url":"https://t.co/a","expanded_url":"https://a.example/1"},{"url":"https://t.co/b","expanded_url":"https://b.example/2"}],"media":[{"url":"https://t.co/m","expanded_url":"https://pic.example/3"}]}}"#;
        let urls = decode(line).unwrap().urls;
        let pairs: Vec<(&str, &str)> = urls.iter().map(|(s, l)| (s.as_ref(), l.as_ref())).collect();
        assert!(pairs.contains(&("https://t.co/a", "https://a.example/1")));
        assert!(pairs.contains(&("https://t.co/b", "https://b.example/2")));
        assert!(pairs.contains(&("https://t.co/m", "https://pic.example/3")));
    }

    #[test]
    fn the_tag_is_spliced_before_the_closing_brace() {
        assert_eq!(
            tagged(r#"{"id":1,"text":"a"}"#),
            "{\"id\":1,\"text\":\"a\",\"dedup\":{}}\n"
        );
        assert_eq!(
            tagged("{\"id\":1,\"text\":\"a\"}  \t"),
            "{\"id\":1,\"text\":\"a\",\"dedup\":{}}  \t\n"
        );
        assert_eq!(
            tagged(r#" { "id" : 1 , "text" : "a" } "#),
            " { \"id\" : 1 , \"text\" : \"a\" ,\"dedup\":{}} \n"
        );
    }

    #[test]
    fn bad_records_say_what_is_wrong() {
        assert_eq!(decode("[1]").unwrap_err(), InvalidReason::NotObject);
        assert_eq!(decode("\"text\"").unwrap_err(), InvalidReason::NotObject);
        assert!(matches!(
            decode("{\"id\":1,").unwrap_err(),
            InvalidReason::Json(_)
        ));
        assert!(matches!(
            decode("{\"id\":1} x").unwrap_err(),
            InvalidReason::Json(_)
        ));
        assert!(matches!(
            decode(r#"{"text":"a"}"#).unwrap_err(),
            InvalidReason::NoId(_)
        ));
        assert!(matches!(
            decode(r#"{"id":1}"#).unwrap_err(),
            InvalidReason::NoText(_)
        ));
        assert!(matches!(
            decode(r#"{"id":1.5,"text":"a"}"#).unwrap_err(),
            InvalidReason::BadId(_)
        ));
        assert!(matches!(
            decode(r#"{"id":[1],"text":"a"}"#).unwrap_err(),
            InvalidReason::BadId(_)
        ));
        assert!(matches!(
            decode(r#"{"id":1,"text":5}"#).unwrap_err(),
            InvalidReason::TextNotString(_)
        ));
        assert_eq!(
            Decoder::new(FieldSpec::default())
                .decode(b"{\"id\":1,\"text\":\"\xff\"}")
                .unwrap_err(),
            InvalidReason::Utf8(16)
        );
        // Far into a long line (the checks run 64 bytes at a time), after
        // valid multi-byte characters, a cut one is found where it starts.
        let mut long = format!("{{\"id\":1,\"text\":\"{}", "é ".repeat(150)).into_bytes();
        let at = long.len();
        long.extend_from_slice(b"\xe2\x82\"}");
        assert_eq!(
            Decoder::new(FieldSpec::default())
                .decode(&long)
                .unwrap_err(),
            InvalidReason::Utf8(at)
        );
    }

    #[test]
    fn lone_surrogate_escapes_are_read_as_replacement_characters() {
        let r = decode(r#"{"id":1,"text":"\ud83d cut"}"#).unwrap();
        assert_eq!(r.text, "\u{FFFD} cut");
        // A trailing half alone, two leading halves, and a pair among them.
        let r = decode(r#"{"id":1,"text":"a\udc00b\ud83d\ud83d\ude00\u00e9"}"#).unwrap();
        assert_eq!(r.text, "a\u{FFFD}b\u{FFFD}\u{1F600}é");
        // Chosen text fields and URL entities too.
        let spec = FieldSpec::new(None, vec!["title".into()]).unwrap();
        let r = Decoder::new(spec)
            .decode(br#"{"id":1,"title":"x \udbff"}"#)
            .unwrap();
        assert_eq!(r.text, "x \u{FFFD}");
        // A text that is not a string is still refused as such.
        assert_eq!(
            decode(r#"{"id":1,"text":["\ud83d"]}"#).unwrap_err(),
            InvalidReason::TextNotString("text".into())
        );
        // In a key, the refusal names the surrogate.
        let err = decode(r#"{"\ud83d":1,"id":1,"text":"a"}"#).unwrap_err();
        assert!(err.to_string().contains("surrogate"), "{err}");
    }

    #[test]
    fn repeated_keys_take_the_last_occurrence() {
        let r = decode(r#"{"id":"d1","id":"d2","text":"a first","text":"b last"}"#).unwrap();
        assert_eq!(r.id.to_json(), "\"d2\"");
        assert_eq!(r.text, "b last");
        // A later null hides an earlier value, as in a JSON object.
        assert!(matches!(
            decode(r#"{"id":1,"text":"a","text":null}"#).unwrap_err(),
            InvalidReason::NoText(_)
        ));
        // Nested: the whole earlier object is dropped, not merged.
        let line = r#"{"id":1,"text":"x","entities":{"urls":[{"url":"https://t.co/a","expanded_url":"https://a.example"}]},"entities":{"urls":[{"url":"https://t.co/b","expanded_url":"https://b.example"}]}}"#;
        let urls = decode(line).unwrap().urls;
        assert_eq!(urls.len(), 1);
        assert_eq!(urls[0].0, "https://t.co/b");
        let r =
            decode(r#"{"data":{"id":"1","text":"old"},"data":{"id":"2","text":"new"}}"#).unwrap();
        assert_eq!((r.id.to_json().as_str(), r.text.as_ref()), ("\"2\"", "new"));
        // Inside an object repeated keys do not reach across array elements.
        let line = r#"{"id":1,"text":"x","entities":{"urls":[{"url":"https://t.co/a","expanded_url":"https://a.example","url":"https://t.co/c"},{"url":"https://t.co/b","expanded_url":"https://b.example"}]}}"#;
        let urls = decode(line).unwrap().urls;
        let shorts: Vec<&str> = urls.iter().map(|(s, _)| s.as_ref()).collect();
        assert_eq!(shorts, ["https://t.co/c", "https://t.co/b"]);
        // Agrees with serde_json's Value.
        let line = r#"{"id_str":"7","id_str":"8","full_text":"p","full_text":"q"}"#;
        let value: serde_json::Value = serde_json::from_str(line).unwrap();
        let r = decode(line).unwrap();
        assert_eq!(r.id.to_json(), value["id_str"].to_string());
        assert_eq!(r.text, value["full_text"].as_str().unwrap());
    }

    #[test]
    fn nothing_of_one_line_is_left_for_the_next() {
        // The captures' buffer is shared by the lines a thread decodes: a
        // line refused halfway, or one with URLs, leaves nothing behind.
        let decoder = Decoder::new(FieldSpec::default());
        let with_urls = r#"{"id":1,"text":"x","entities":{"urls":[{"url":"https://t.co/a","expanded_url":"https://a.example"}]}}"#;
        assert_eq!(decoder.decode(with_urls.as_bytes()).unwrap().urls.len(), 1);
        let cut =
            r#"{"id":2,"text":"y","entities":{"urls":[{"url":"https://t.co/b","expanded_url":"#;
        assert!(matches!(
            decoder.decode(cut.as_bytes()).unwrap_err(),
            InvalidReason::Json(_)
        ));
        let r = decoder.decode(br#"{"id":3,"text":"z"}"#).unwrap();
        assert!(r.urls.is_empty());
        assert_eq!((r.id, r.text.as_ref()), (MessageId::Integer(3), "z"));
        assert!(matches!(
            decoder.decode(br#"{"text":"no id"}"#).unwrap_err(),
            InvalidReason::NoId(_)
        ));
    }

    /// Paths from 64 up are outside the mask of present paths: with many
    /// chosen fields they are searched, and the URL entities (numbered
    /// after them) still found.
    #[test]
    fn many_chosen_fields_are_all_read() {
        let fields: Vec<String> = (0..70).map(|i| format!("t{i}")).collect();
        let decoder = Decoder::new(FieldSpec::new(None, fields).unwrap());
        let r = decoder
            .decode(br#"{"id":1,"t69":"last","t0":"first","entities":{"urls":[{"url":"https://t.co/a","expanded_url":"https://a.example"}]}}"#)
            .unwrap();
        assert_eq!(r.text, "first last");
        assert_eq!(r.urls.len(), 1);
        assert_eq!(r.urls[0].1, "https://a.example");
    }

    /// Keys of a length no field has are passed over unread; lengths from
    /// 63 up share one bit, so a long field is found beside long keys of
    /// other lengths, and a key that differs from it only in length is not
    /// taken for it.
    #[test]
    fn keys_are_passed_over_by_length_only_when_no_field_has_it() {
        let long = "l".repeat(70);
        let decoder = Decoder::new(FieldSpec::new(Some("i"), vec![long.clone()]).unwrap());
        let line = format!(
            r#"{{"{}":"not 64","{}":"not 71","indices":[1],"ix":[2],"i":7,"{long}":"seventy"}}"#,
            "l".repeat(64),
            "l".repeat(71),
        );
        assert!(takes_the_fast_path(&decoder, &line));
        let r = decoder.decode(line.as_bytes()).unwrap();
        assert_eq!(r.text, "seventy");
        assert_eq!(r.id.to_json(), "7");
        let tree = &decoder.tree;
        assert!(tree.may_have_length(1) && tree.may_have_length(70));
        assert!(!tree.may_have_length(2) && !tree.may_have_length(7));
        for reader in [Reader::Fast, Reader::Sonic, Reader::Serde] {
            assert_eq!(
                outcome(&decoder, &line, reader),
                outcome(&decoder, &line, Reader::Serde)
            );
        }
    }

    #[test]
    fn chosen_fields_are_joined_and_may_overlap() {
        let spec = FieldSpec::new(Some("guid"), vec!["title".into(), "summary".into()]).unwrap();
        let decoder = Decoder::new(spec);
        let r = decoder
            .decode(br#"{"guid":"g1","title":"Bridge closes","summary":"for repairs"}"#)
            .unwrap();
        assert_eq!(r.text, "Bridge closes for repairs");
        assert_eq!(r.id.to_json(), "\"g1\"");
        // A path that ends where another goes on: `data` and `data.id`.
        let spec = FieldSpec::new(Some("data.id"), vec!["data".into()]).unwrap();
        let err = Decoder::new(spec)
            .decode(br#"{"data":{"id":"1"}}"#)
            .unwrap_err();
        assert_eq!(err, InvalidReason::TextNotString("data".into()));
        assert!(FieldSpec::new(None, vec!["a..b".into()]).is_err());
    }

    /// What a decoded line says, comparable: the fast path, today's
    /// decoder and serde_json alone must give the same for every line,
    /// refusals included.
    fn outcome(decoder: &Decoder, line: &str, reader: Reader) -> String {
        outcome_of_bytes(decoder, line.as_bytes(), reader)
    }

    /// Every decoder's fast path reads `bytes` as serde_json does, or
    /// refuses them alike (invalid UTF-8 refused before either reads).
    fn read_as_serde_reads(bytes: &[u8]) -> Result<(), proptest::test_runner::TestCaseError> {
        for decoder in &decoders() {
            let before = match utf8(bytes) {
                Err(e) => format!("refused: {e:?}"),
                Ok(_) => outcome_of_bytes(decoder, bytes, Reader::Serde),
            };
            proptest::prop_assert_eq!(outcome_of_bytes(decoder, bytes, Reader::Fast), before);
        }
        Ok(())
    }

    /// [`outcome`] of a line of any bytes, UTF-8 or not.
    fn outcome_of_bytes(decoder: &Decoder, line: &[u8], reader: Reader) -> String {
        match decoder.decode_with(line, reader) {
            Ok(r) => format!(
                "{:?} {:?} {:?} {:?} {:?} {:?}",
                r.id, r.text, r.urls, r.splice, r.created_at, r.deletion
            ),
            Err(e) => format!("refused: {e:?}"),
        }
    }

    fn decoders() -> Vec<Decoder> {
        vec![
            Decoder::new(FieldSpec::default()),
            Decoder::new(FieldSpec::new(Some("id_str"), vec!["text".into()]).unwrap()),
            Decoder::new(FieldSpec::new(Some("data.id"), vec!["data".into(), "x".into()]).unwrap()),
        ]
    }

    /// Whether the fast path reads `line` itself (and does not hand it to
    /// serde_json).
    fn takes_the_fast_path(decoder: &Decoder, line: &str) -> bool {
        let mut captures = Vec::new();
        let mut shape = RootShape::default();
        let mut scanned = Scanned::new();
        scanned.load(line.as_bytes()).expect("UTF-8");
        decoder.walk(line, &scanned, &mut captures, &mut shape)
    }

    /// The fast path agrees with serde_json and with today's decoder (the
    /// walk over sonic-rs, the fast path before issue 42) on `line`, and
    /// reads it itself whenever serde_json reads it as JSON and it nests no
    /// deeper than the scan's limit: agreement alone would hold were every
    /// line handed over.
    fn agrees(decoder: &Decoder, line: &str) -> Result<(), String> {
        let fast = outcome(decoder, line, Reader::Fast);
        let reference = outcome(decoder, line, Reader::Serde);
        let today = outcome(decoder, line, Reader::Sonic);
        if fast != reference || fast != today {
            return Err(format!(
                "{line}\n fast: {fast}\n serde_json: {reference}\n before: {today}"
            ));
        }
        let json = !matches!(
            decoder.decode_with(line.as_bytes(), Reader::Serde),
            Err(InvalidReason::Json(_) | InvalidReason::Utf8(_))
        );
        let openings = line.bytes().filter(|&b| b == b'{' || b == b'[').count();
        if json && openings <= Scan::MAX_DEPTH as usize && !takes_the_fast_path(decoder, line) {
            return Err(format!("{line}\n handed to serde_json"));
        }
        Ok(())
    }

    /// Strings are found from 64-byte blocks' stop masks (`stops`): a
    /// quote, an escape, a control character or the line's end at every
    /// offset around a block's edges, in a wanted value and in a skipped
    /// one, is read as serde_json reads it.
    #[test]
    fn strings_across_block_edges_agree() {
        let ends = [
            "\"",
            "\\\"x\"",
            "\\\\\"",
            "\\u00e9\"",
            "\\u00\"",
            "\u{1}\"",
            "\\",
            "\u{e9}\"",
            "",
        ];
        for decoder in decoders() {
            for pad in 0..140 {
                for end in ends {
                    let run = "a".repeat(pad);
                    for line in [
                        format!(r#"{{"id_str":"1","text":"{run}{end}}}"#),
                        format!(r#"{{"id_str":"1","skip":"{run}{end},"text":"t"}}"#),
                        format!(r#"{{"{run}{end}:1,"id_str":"1","text":"t"}}"#),
                        // Inside a container skipped whole (`Scan::skip`).
                        format!(r#"{{"id_str":"1","user":{{"a":[1,"{run}{end}]}},"text":"t"}}"#),
                        format!(r#"{{"id_str":"1","user":[{{"{run}{end}:true}}],"text":"t"}}"#),
                    ] {
                        agrees(&decoder, &line).unwrap();
                    }
                }
            }
        }
    }

    /// The scan reads a line's padded copy without bound checks, on the
    /// invariant that it never moves past the line's end ([`Scan`]): a
    /// line cut at every byte, so that its end meets every token in every
    /// state (a number's digits, an escape, a literal, a key, whitespace,
    /// inside a skipped container and on a wanted path), and moved by a
    /// run of leading spaces across a block's edge, is read as serde_json
    /// reads it. Debug builds check every read against the copy's length.
    #[test]
    fn every_cut_of_a_line_is_read_as_serde_json_reads_it() {
        let lines = [
            r#"{"created_at":"Fri Mar 01 12:00:00 +0000 2019","id":1101452019152977920,"id_str":"1101452019152977920","text":"caf\u00e9 \"q\"\n","user":{"id":-4.5e+3,"id_str":"4","f":[true,false,null,0,1.25E-2],"screen_name":"A\\B"},"entities":{"hashtags":[{"text":"x","indices":[1,2]}],"urls":[{"url":"https://t.co/a","expanded_url":"https://a.example/\u00e9","indices":[0,1]}]},"lang":"en"}"#,
            r#" { "id_str" : "7" , "text" : "t\ud83d\ude00" , "retweeted_status" : { "text" : "the original" , "n" : [ 1 , { } , [ ] ] } , "data" : { "id" : 12 , "x" : null } } "#,
            r#"{"data":{"id":"9","text":"v2 é","referenced_tweets":[{"type":"retweeted","id":"8"}]},"includes":{"tweets":[{"id":"8","text":"inner"}]},"a_key_longer_than_sixteen":false}"#,
        ];
        for decoder in decoders() {
            for line in lines {
                for lead in 0..9 {
                    let line = format!("{}{line}", " ".repeat(lead));
                    for cut in (0..=line.len()).filter(|&cut| line.is_char_boundary(cut)) {
                        agrees(&decoder, &line[..cut]).unwrap();
                    }
                }
            }
        }
    }

    /// Keys are matched through each node's table, which every node of the
    /// built-in specs gets, and only a field's exact name matches: not one
    /// sharing its first eight bytes, nor a prefix, nor an extension.
    #[test]
    fn keys_match_their_fields_exactly_through_the_table() {
        fn check(node: &Node) {
            if !node.fields.is_empty() {
                assert!(node.table.is_some(), "{:?}", node.heads);
            }
            for (i, (name, child)) in node.fields.iter().enumerate() {
                let name = name.as_bytes();
                let field = |key: &[u8]| {
                    let (head, tail) = key_words(key);
                    node.field(key.len(), head, tail, || key)
                };
                assert_eq!(field(name), Some(i));
                // Nor is the key passed over for its length.
                assert!(node.may_have_length(name.len()), "{name:?}");
                // A byte changed anywhere: at the head, in the tail or past
                // sixteen bytes.
                for at in 0..name.len() {
                    let mut other = name.to_vec();
                    other[at] ^= 1;
                    assert_eq!(field(&other), None);
                }
                let longer = [name, b"x"].concat();
                assert_eq!(field(&longer), None);
                let shorter = &name[..name.len() - 1];
                assert_ne!(field(shorter), Some(i));
                check(child);
            }
            if let Some(each) = node.each.as_deref() {
                check(each);
            }
        }
        for decoder in decoders() {
            check(&decoder.tree);
        }
    }

    /// `line` with a character put in, taken out or replaced.
    fn edited(mut line: String, (at, kind, c): (usize, usize, char)) -> String {
        let boundaries: Vec<usize> = line.char_indices().map(|(i, _)| i).collect();
        let at = boundaries[at % boundaries.len()];
        match kind {
            0 => line.insert(at, c),
            1 => {
                line.remove(at);
            }
            _ => {
                line.remove(at);
                line.insert(at, c);
            }
        }
        line
    }

    /// An edit for [`edited`]: mostly characters that matter to JSON.
    fn edit() -> impl proptest::strategy::Strategy<Value = (usize, usize, char)> {
        (
            0usize..1000,
            0usize..3,
            proptest::sample::select(vec![
                '{', '}', '[', ']', '"', ',', ':', '\\', 'u', '0', 'e', '-', '.', ' ', 'x', 'é',
                '\t', '\u{1f}', 'n', '+',
            ]),
        )
    }

    #[test]
    fn the_fast_path_reads_what_serde_json_reads() {
        let decoders = decoders();
        for line in [
            r#"{"id":9007199254740993,"text":"above 2^53"}"#,
            r#"{"id_str":"18446744073709551615","id":1,"text":"max"}"#,
            r#"{"id":18446744073709551616,"text":"one past u64"}"#,
            r#"{"id":-9007199254740993,"text":"negative"}"#,
            r#"{"id":1e400,"text":"huge float id"}"#,
            r#"{"id":1,"text":"x","other":1e400}"#,
            r#"{"id":1,"text":"x","data":1e400}"#,
            r#"{"id":1,"text":"a\ud83d\ude00 \ud83d lone \udc00 \u00e9 \n \" \\ \/"}"#,
            r#"{"id":1,"text":"x","junk":"\uZZZZ"}"#,
            r#"{"id":1,"text":"x","junk":"\u12"}"#,
            r#"{"id":1,"text":"x","junk":"\q"}"#,
            r#"{"\u0069d":"7","te\u0078t":"escaped keys"}"#,
            r#"{"\ud83d":1,"id":1,"text":"a"}"#,
            r#"{"id":1,"text":"x","a":[1,2,]}"#,
            r#"{"id":1,"text":"x",}"#,
            r#"{"id":1,"text":"x","n":01}"#,
            r#"{"id":1,"text":"x","n":-}"#,
            r#"{"id":1,"text":"x","n":1.}"#,
            r#"{"id":1,"text":"x","t":tru}"#,
            "{\"id\":1,\"text\":\"tab\there\"}",
            "{\"id\":1,\"text\":\"x\"}\u{0b}",
            "{\"id\":1,\"text\":\"x\"}\u{a0}",
            "\u{feff}{\"id\":1,\"text\":\"x\"}",
            r#"{"id":1,"text":"x"} {}"#,
            r#"{"id":1,"text":"x"}}"#,
            "",
            "   ",
            "{}",
            "[]",
            &format!(
                r#"{{"id":1,"text":"x","deep":{}1{}}}"#,
                "[".repeat(29),
                "]".repeat(29)
            ),
        ] {
            for decoder in &decoders {
                agrees(decoder, line).unwrap_or_else(|e| panic!("{e}"));
            }
        }
        // Deep nesting, where it is walked and where it is skipped.
        for depth in [10, 29, 30, 31, 127, 128, 129, 5000] {
            let (open, close) = ("[".repeat(depth), "]".repeat(depth));
            for line in [
                format!(r#"{{"id":1,"text":"x","d":{open}1{close}}}"#),
                format!(r#"{{"id":1,"text":{open}"x"{close}}}"#),
                format!(r#"{{"id":1,"text":"x","entities":{{"urls":{open}{close}}}}}"#),
            ] {
                for decoder in &decoders {
                    agrees(decoder, &line).unwrap_or_else(|e| panic!("{depth}: {e}"));
                }
            }
        }
        // Ids above 2^53 are read exactly.
        let r = decoders[0]
            .decode(br#"{"id":9007199254740993,"text":"a"}"#)
            .unwrap();
        assert_eq!(r.id, MessageId::Integer(9_007_199_254_740_993));
        let r = decoders[0]
            .decode(br#"{"id_str":"18446744073709551615","text":"a"}"#)
            .unwrap();
        assert_eq!(r.id, MessageId::DigitString(u64::MAX));
    }

    /// The fast path is taken on ordinary tweets: were the walk to refuse
    /// them, every line would go to serde_json and agreement alone could
    /// not tell.
    #[test]
    fn the_fast_path_reads_ordinary_tweets_itself() {
        let decoder = Decoder::new(FieldSpec::default());
        for line in [
            r#"{"id_str":"1","text":"plain"}"#,
            r#"{"created_at":"Wed Oct 10 20:19:24 +0000 2018","id":9007199254740993,"id_str":"9007199254740993","text":"caf\u00e9 \ud83d\ude00 \"q\"\n","user":{"id":1,"name":"a"},"entities":{"hashtags":[],"urls":[{"url":"https://t.co/a","expanded_url":"https://a.example/1","indices":[0,1]}]},"retweeted_status":{"text":"the original"}}"#,
        ] {
            let mut captures = Vec::new();
            let mut shape = RootShape::default();
            let mut scanned = Scanned::new();
            scanned.load(line.as_bytes()).expect("UTF-8");
            assert!(
                decoder.walk(line, &scanned, &mut captures, &mut shape),
                "{line}"
            );
            assert!(shape.object && !captures.is_empty());
            agrees(&decoder, line).unwrap_or_else(|e| panic!("{e}"));
        }
    }

    /// JSON text of a string made of plain characters and escapes of every
    /// kind, lone surrogates included.
    fn json_string() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        let piece = prop_oneof![
            Just("a"),
            Just(" "),
            Just("é"),
            Just("😀"),
            Just("RT @x: "),
            Just("https://t.co/a"),
            Just("…"),
            Just("\\n"),
            Just("\\\""),
            Just("\\\\"),
            Just("\\/"),
            Just("\\u00e9"),
            Just("\\u0041"),
            Just("\\ud83d\\ude00"),
            Just("\\ud83d"),
            Just("\\udc00"),
            Just("\\uD83D\\uDE00"),
        ];
        proptest::collection::vec(piece, 0..8).prop_map(|p| format!("\"{}\"", p.concat()))
    }

    /// JSON text of a value, with the keys the decoder looks for.
    fn json_value() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        let leaf = prop_oneof![
            Just("null".to_string()),
            Just("true".to_string()),
            Just("false".to_string()),
            any::<u64>().prop_map(|n| n.to_string()),
            any::<i64>().prop_map(|n| n.to_string()),
            "-?(0|[1-9][0-9]{0,24})(\\.[0-9]{1,3})?([eE][+-]?[0-9]{1,3})?",
            json_string(),
        ];
        let key = prop_oneof![
            Just("\"id\"".to_string()),
            Just("\"id_str\"".to_string()),
            Just("\"text\"".to_string()),
            Just("\"full_text\"".to_string()),
            Just("\"data\"".to_string()),
            Just("\"entities\"".to_string()),
            Just("\"urls\"".to_string()),
            Just("\"url\"".to_string()),
            Just("\"expanded_url\"".to_string()),
            Just("\"retweeted_status\"".to_string()),
            Just("\"extended_tweet\"".to_string()),
            Just("\"referenced_tweets\"".to_string()),
            Just("\"type\"".to_string()),
            Just("\"retweeted\"".to_string()),
            Just("\"created_at\"".to_string()),
            Just("\"x\"".to_string()),
            Just("\"\\u0069d\"".to_string()),
            Just("\"te\\u0078t\"".to_string()),
            Just("\"ur\\u006c\"".to_string()),
            Just("\"media\"".to_string()),
            Just("\"delete\"".to_string()),
            Just("\"status\"".to_string()),
            json_string(),
        ];
        leaf.prop_recursive(4, 48, 6, move |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..5)
                    .prop_map(|items| format!("[{}]", items.join(","))),
                proptest::collection::vec((key.clone(), inner, " {0,1}"), 0..6).prop_map(
                    |members| {
                        let members: Vec<String> = members
                            .into_iter()
                            .map(|(k, v, space)| format!("{k}:{space}{v}"))
                            .collect();
                        format!("{{{}}}", members.join(","))
                    }
                ),
            ]
        })
    }

    /// A tweet-shaped line: members drawn from a v1.1 or v2 tweet's, some
    /// of them twice.
    fn tweet_line() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        let entry = (json_string(), json_string(), any::<bool>(), any::<bool>()).prop_map(
            |(short, long, escaped, repeated)| {
                let key = if escaped { r#""ur\u006c""# } else { r#""url""# };
                let mut entry =
                    format!(r#"{{{key}:{short},"expanded_url":{long},"indices":[0,23]"#);
                if repeated {
                    entry.push_str(&format!(r#","url":{long}"#));
                }
                entry + "}"
            },
        );
        let urls = proptest::collection::vec(entry, 0..4)
            .prop_map(|e| format!("[{}]", e.join(",")))
            .boxed();
        let member = prop_oneof![
            urls.clone()
                .prop_map(|u| format!(r#""entities":{{"hashtags":[{{"text":"h"}}],"urls":{u}}}"#)),
            urls.clone().prop_map(|u| format!(r#""extended_entities":{{"media":{u}}}"#)),
            (json_string(), urls.clone()).prop_map(|(t, u)| format!(
                r#""extended_tweet":{{"full_text":{t},"entities":{{"urls":{u},"media":{u}}}}}"#
            )),
            (json_string(), urls.clone()).prop_map(|(t, u)| format!(
                r#""retweeted_status":{{"te\u0078t":{t},"user":{{"id":2}},"entities":{{"urls":{u}}}}}"#
            )),
            json_string().prop_map(|t| format!(r#""text":{t}"#)),
            json_string().prop_map(|t| format!(r#""full_text":{t}"#)),
            json_string().prop_map(|t| format!(r#""te\u0078t":{t}"#)),
            Just(r#""id_str":"5""#.to_string()),
            Just(r#""id":9007199254740993"#.to_string()),
            Just(r#""id":null"#.to_string()),
            Just(r#""user":{"id":1,"entities":{"urls":[{"url":"u","expanded_url":"e"}]},"created_at":"x"}"#.to_string()),
            Just(r#""created_at":"Wed Oct 10 20:19:24 +0000 2018""#.to_string()),
            (json_string(), urls.clone()).prop_map(|(t, u)| format!(
                r#""referenced_tweets":[{{"type":"quoted","text":"q"}},{{"type":"retweeted","text":{t},"entities":{{"urls":{u}}}}}]"#
            )),
            (json_string(), urls).prop_map(|(t, u)| format!(
                r#""data":{{"id":"7","text":{t},"entities":{{"urls":{u}}},"created_at":"2018-10-10T20:19:24.000Z"}}"#
            )),
            Just(r#""delete":{"status":{"id":3,"id_str":"3"}}"#.to_string()),
            Just(r#""x":[1,{"text":"no"},[]]"#.to_string()),
        ];
        proptest::collection::vec(member, 1..8).prop_map(|m| format!("{{{}}}", m.join(",")))
    }

    /// Bytes put into a line by `bytes_anywhere_are_read_as_before`: ASCII,
    /// UTF-8 of two to four bytes, and bytes no UTF-8 text has where they
    /// land (a lone continuation byte, a lead byte cut short, 0xff).
    fn put_in_bytes() -> impl proptest::strategy::Strategy<Value = Vec<u8>> {
        use proptest::prelude::*;
        let piece = prop_oneof![
            Just(b"a".to_vec()),
            Just("é".as_bytes().to_vec()),
            Just("…".as_bytes().to_vec()),
            Just("😀".as_bytes().to_vec()),
            Just(vec![0x80]),
            Just(vec![0xbf]),
            Just(vec![0xc3]),
            Just(vec![0xe2, 0x80]),
            Just(vec![0xf0, 0x9f, 0x98]),
            Just(vec![0xed, 0xa0, 0x80]),
            Just(vec![0xff]),
            any::<u8>().prop_map(|b| vec![b]),
        ];
        proptest::collection::vec(piece, 1..4).prop_map(|p| p.concat())
    }

    /// URL pairs under several parents, found from the mask's bits: each
    /// parent's, in the pairs' order, as the pair-by-pair look finds them
    /// (with the decoders that read this line's id and text).
    #[test]
    fn url_pairs_under_several_parents_are_all_found() {
        let line = r#"{"id_str":"1","text":"t","retweeted_status":{"entities":{"urls":[{"url":"r","expanded_url":"R"}]}},"extended_entities":{"media":[{"url":"m","expanded_url":"M"}]},"entities":{"urls":[{"url":"a","expanded_url":"A"},{"url":"b","expanded_url":"B"}]}}"#;
        for decoder in decoders().into_iter().take(2) {
            let record = decoder.decode(line.as_bytes()).unwrap();
            let pairs: Vec<(&str, &str)> = record
                .urls
                .iter()
                .map(|(s, l)| (s.as_ref(), l.as_ref()))
                .collect();
            assert_eq!(
                pairs,
                [("a", "A"), ("b", "B"), ("m", "M"), ("r", "R")],
                "{:?}",
                decoder.spec()
            );
            let by_bits = format!("{record:?}");
            let mut pair_by_pair = decoder;
            pair_by_pair.url_long_of = None;
            assert_eq!(
                by_bits,
                format!("{:?}", pair_by_pair.decode(line.as_bytes()).unwrap())
            );
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2000))]

        /// A line is checked as UTF-8 only when the stops' classification
        /// finds a byte that is not ASCII: with bytes of every kind put in
        /// anywhere in a tweet, each decoder gives what checking every
        /// line first (as before) and then decoding gives, refusal or
        /// record, byte for byte; a removal is refused alike.
        #[test]
        fn bytes_anywhere_are_read_as_before(
            line in tweet_line(),
            at in proptest::prelude::any::<proptest::sample::Index>(),
            put in put_in_bytes(),
        ) {
            let mut bytes = line.into_bytes();
            let at = at.index(bytes.len() + 1);
            bytes.splice(at..at, put);
            read_as_serde_reads(&bytes)?;
            if utf8(&bytes).is_err() {
                for decoder in &decoders() {
                    proptest::prop_assert_eq!(decoder.decode_removal(&bytes).err(), utf8(&bytes).err());
                }
            }
        }

        /// On random objects, and on them with a character put in, taken
        /// out or replaced (most of those are no JSON), the fast path and
        /// serde_json alone read the same record or refuse alike.
        #[test]
        fn the_fast_path_agrees_with_serde_json(
            value in json_value(),
            edit in proptest::option::of(edit()),
        ) {
            let mut line = format!(r#"{{"id":1,"text":"t","v":{value}}}"#);
            if let Some(edit) = edit {
                line = edited(line, edit);
            }
            for decoder in &decoders() {
                agrees(decoder, &line).map_err(proptest::test_runner::TestCaseError::fail)?;
            }
            // The value alone as the whole line too: ids and texts in every
            // shape, at the top or under `data`.
            for decoder in &decoders() {
                agrees(decoder, &value).map_err(proptest::test_runner::TestCaseError::fail)?;
            }
        }

        /// A string's contents read past its one-character escapes are
        /// serde_json's reading of the string, and only a `\u` escape is
        /// left to serde_json.
        #[test]
        fn simple_escapes_read_as_serde_json_reads_them(
            pieces in proptest::collection::vec(proptest::sample::select(vec![
                "a", "é", "😀", " ", "\\\"", "\\\\", "\\/", "\\b", "\\f", "\\n", "\\r",
                "\\t", "\\u00e9", "\\ud83d\\ude00", "\\\\n", "\\\\u0041",
            ]), 0..12),
        ) {
            let text = pieces.concat();
            let expected: String = serde_json::from_str(&format!("\"{text}\"")).expect("valid");
            let has_u = pieces.iter().any(|p| p.starts_with("\\u"));
            match unescape_simple(&text) {
                Some(read) => {
                    proptest::prop_assert!(!has_u);
                    proptest::prop_assert_eq!(read, expected);
                }
                None => proptest::prop_assert!(has_u),
            }
        }

        /// Unwanted containers a tweet holds (`user`, `entities.hashtags`)
        /// holding any value, at any offset, with one edit or bytes of any
        /// kind (a control byte, invalid UTF-8) put in inside them, or one
        /// bracket, comma, colon or quote swapped for another: the
        /// fast path reads the line as serde_json does, refusal included,
        /// byte for byte.
        #[test]
        fn skipped_containers_are_read_as_serde_json_reads_them(
            value in json_value(),
            edit in proptest::option::of(edit()),
            swap in proptest::option::of((
                proptest::prelude::any::<proptest::sample::Index>(),
                proptest::sample::select(vec![b'{', b'}', b'[', b']', b',', b':', b'"']),
            )),
            put in proptest::option::of(put_in_bytes()),
            at in proptest::prelude::any::<proptest::sample::Index>(),
            pad in 0usize..80,
        ) {
            let mut value = match edit {
                Some(edit) => edited(value, edit),
                None => value,
            };
            // One structural byte swapped for another (an object closed by
            // `]`, a comma for a colon): an edit anywhere seldom hits one.
            let structural: Vec<usize> = value
                .bytes()
                .enumerate()
                .filter(|&(_, b)| b"{}[],:\"".contains(&b))
                .map(|(i, _)| i)
                .collect();
            if let (Some((which, with)), false) = (swap, structural.is_empty()) {
                let mut bytes = value.into_bytes();
                bytes[structural[which.index(structural.len())]] = with;
                value = String::from_utf8(bytes).expect("an ASCII byte for an ASCII byte");
            }
            let run = "p".repeat(pad);
            let line = format!(
                r#"{{"pad":"{run}","user":{{"v":{value}}},"id_str":"5","entities":{{"hashtags":[{value}],"urls":[]}},"text":"t"}}"#
            );
            for decoder in &decoders() {
                agrees(decoder, &line).map_err(proptest::test_runner::TestCaseError::fail)?;
            }
            if let Some(put) = put {
                // Inside the `user` object's value.
                let start = line.find(r#""v":"#).expect("the member") + 4;
                let at = start + at.index(value.len() + 1);
                let mut bytes = line.into_bytes();
                bytes.splice(at..at, put);
                read_as_serde_reads(&bytes)?;
            }
        }

        /// A search of a line's captures by path finds what a look at
        /// every capture finds, in order, for every path (above 64 too)
        /// and however many captures come first (past 255 too).
        #[test]
        fn captures_are_found_as_a_look_at_each_finds_them(
            paths in proptest::collection::vec(
                proptest::prop_oneof![
                    8 => 0u16..6,
                    1 => 60u16..70,
                ],
                0..40,
            ),
            lead in proptest::prop_oneof![proptest::prelude::Just(0usize), 250usize..300],
        ) {
            let capture = |path: u16, element: u32| Capture {
                path,
                element,
                start: 0,
                end: 0,
                plain: false,
            };
            // Many captures on path 7 first, so that others start late.
            let captures: Vec<Capture> = (0..lead)
                .map(|i| capture(7, i as u32))
                .chain(paths.iter().enumerate().map(|(i, &p)| capture(p, i as u32)))
                .collect();
            let found = Found::new(&captures);
            for path in (0..10).chain(58..72) {
                let searched: Vec<u32> = found.of(path).map(|c| c.element).collect();
                let looked: Vec<u32> = captures
                    .iter()
                    .filter(|c| c.path == path)
                    .map(|c| c.element)
                    .collect();
                proptest::prop_assert_eq!(searched, looked, "path {}", path);
            }
        }

        /// A line's URL pairs found from its mask's bits are those a look
        /// at each pair finds, in the same order.
        #[test]
        fn url_pairs_found_by_bits_are_those_found_pair_by_pair(
            line in tweet_line(),
            edit in proptest::option::of(edit()),
        ) {
            let line = match edit {
                Some(edit) => edited(line, edit),
                None => line,
            };
            for decoder in decoders() {
                proptest::prop_assert!(decoder.url_long_of.is_some());
                let by_bits = format!("{:?}", decoder.decode(line.as_bytes()));
                let mut pair_by_pair = decoder;
                pair_by_pair.url_long_of = None;
                proptest::prop_assert_eq!(
                    by_bits,
                    format!("{:?}", pair_by_pair.decode(line.as_bytes()))
                );
            }
        }

        /// A tag is spliced in as it always was: the line up to the
        /// splice, a comma if asked, the member, the line's rest and
        /// `\n`, whatever the rest holds (a brace alone, white space
        /// after it, nothing) and whatever the buffer held before.
        #[test]
        fn tags_are_spliced_in_as_before(
            line in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..12),
            at in proptest::prelude::any::<proptest::sample::Index>(),
            needs_comma: bool,
            tag in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..6),
            before in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..4),
        ) {
            let splice = Splice { at: at.index(line.len() + 1), needs_comma };
            let mut expected = before.clone();
            expected.extend_from_slice(&line[..splice.at]);
            if splice.needs_comma {
                expected.push(b',');
            }
            expected.extend_from_slice(b"\"dedup\":");
            expected.extend_from_slice(&tag);
            expected.extend_from_slice(&line[splice.at..]);
            expected.push(b'\n');
            let mut out = before;
            write_tagged(&mut out, &line, splice, |out| out.extend_from_slice(&tag));
            proptest::prop_assert_eq!(out, expected);
        }

        /// A record decoded into the URL vector of the one before it (as
        /// a batch decodes its lines) is the record decoded afresh,
        /// refusal included: no pair of the line before is left in it.
        #[test]
        fn records_decoded_into_a_used_vector_are_those_decoded_afresh(
            first in tweet_line(),
            second in tweet_line(),
            edit in proptest::option::of(edit()),
        ) {
            let second = match edit {
                Some(edit) => edited(second, edit),
                None => second,
            };
            let lines = [first.as_bytes(), second.as_bytes()];
            for decoder in &decoders() {
                let fresh = lines.map(|line| format!("{:?}", decoder.decode(line)));
                let into = decoder.decoding(|decoding| {
                    let mut urls = Vec::new();
                    lines.map(|line| {
                        let record = decoding.decode_into(line, std::mem::take(&mut urls));
                        let seen = format!("{record:?}");
                        if let Ok(record) = record {
                            urls = record.urls;
                        }
                        seen
                    })
                });
                proptest::prop_assert_eq!(into, fresh);
            }
        }

        /// Tweet-shaped lines, where the walk goes deep: URL entities in
        /// arrays at several depths, repeated members (whole subtrees
        /// replaced), escaped keys (`te\u0078t`, `ur\u006c`), retweets,
        /// v2 references, notices, and the same with one character edited.
        #[test]
        fn tweet_shaped_lines_agree(
            line in tweet_line(),
            edit in proptest::option::of(edit()),
        ) {
            for decoder in &decoders() {
                agrees(decoder, &line).map_err(proptest::test_runner::TestCaseError::fail)?;
            }
            if let Some(edit) = edit {
                let line = edited(line, edit);
                for decoder in &decoders() {
                    agrees(decoder, &line).map_err(proptest::test_runner::TestCaseError::fail)?;
                }
            }
        }
    }
}

//! Engine configuration: every tunable of the decision, its default, and its
//! validation.
//!
//! A [`EngineConfig`] is plain data. [`EngineConfig::validate`] checks it once,
//! and everything downstream trusts it. The defaults were chosen on real data
//! (see "How to tune it" in `docs/how-it-works.md` and `scripts/eval.py`).

use std::fmt;
use std::num::NonZeroUsize;
use std::str::FromStr;

/// Default similarity threshold: a message is a near-duplicate of an earlier
/// one when their similarity is at least this. Chosen on the threshold curve
/// of `scripts/eval.py` (`docs/how-it-works.md`, "How to tune it").
pub const DEFAULT_THRESHOLD: f64 = 0.8;

/// Default number of messages the index holds before it evicts the least
/// recently used one.
pub const DEFAULT_CAPACITY: usize = 1_000_000;

/// Default shingling: words and word bigrams (`words:1-2`). Short texts
/// need short shingles, and a one-word edit of a 10-word tweet leaves its
/// bigrams 0.78 contained but its words and bigrams together 0.84; longer
/// shingles make such an edit cost too much of the overlap. Measured on the
/// labelled synthetic streams in `docs/evaluation.md`.
pub const DEFAULT_SHINGLE: Shingling = Shingling::WordsUpTo(2);

/// Default sampling: none, every shingle is kept. Sampling is for long
/// documents; a tweet has too few shingles to spare any.
pub const DEFAULT_SAMPLE: Sampling = Sampling::All;

/// Default similarity measure: containment, because truncated retweets and
/// copies with a comment added are the duplicates that matter most on
/// social feeds, and Jaccard misses both once the cut or the comment is long.
pub const DEFAULT_MEASURE: Measure = Measure::Containment;

/// Default reach of the lower bar for a lone recent match: the last 3,000
/// messages (see [`EngineConfig::recent`]).
///
/// Copies follow their original closely: a retweet or an edited copy comes
/// within minutes, while two different texts of one template or grammar
/// meet anywhere in the stream. On the 200,000-message synthetic stream
/// (copies ~2,000 messages after their original), 3,000 keeps precision at
/// 0.995 and 5,000 lets it fall below (`docs/evaluation.md`).
pub const DEFAULT_RECENT: u64 = 3_000;

/// Default for a text with nothing left once normalised: it is new.
pub const DEFAULT_EMPTY_TEXT: EmptyText = EmptyText::New;

/// Default cap on how many indexed messages one LSH bucket may hold. A bucket
/// past it takes no more entries: the message stays reachable through its
/// other bands, and a template shared by thousands of messages cannot turn
/// every lookup into a scan. 32 rather than 64 since issue 22: on the
/// 200,000-message synthetic stream a quarter less time deciding, for F1
/// 0.99281 → 0.99277 (precision up, recall down; `dev` unchanged;
/// `docs/evaluation.md`).
pub const DEFAULT_MAX_BUCKET: usize = 32;

/// How long a message stays matchable (`--window`): messages older than
/// this, measured back from the newest message time seen, are no longer
/// matched and leave the index (see [`crate::engine::window`]). Whole
/// milliseconds, at least one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Window(std::num::NonZeroU64);

/// Units a [`Window`] is written in, largest first.
const WINDOW_UNITS: [(&str, u64); 5] = [
    ("d", 86_400_000),
    ("h", 3_600_000),
    ("m", 60_000),
    ("s", 1_000),
    ("ms", 1),
];

impl Window {
    /// A window of `millis` milliseconds; `None` for 0.
    pub fn from_millis(millis: u64) -> Option<Window> {
        std::num::NonZeroU64::new(millis).map(Window)
    }

    /// Its length in milliseconds.
    pub fn millis(self) -> u64 {
        self.0.get()
    }
}

impl fmt::Display for Window {
    /// The largest unit that divides it: `10m`, `36h`, `1500ms`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = self.millis();
        let (unit, size) = WINDOW_UNITS
            .into_iter()
            .find(|(_, size)| ms.is_multiple_of(*size))
            .expect("ms divides everything");
        write!(f, "{}{unit}", ms / size)
    }
}

impl FromStr for Window {
    type Err = ConfigError;

    /// A positive whole number and a unit: `ms`, `s`, `m`, `h` or `d`
    /// (`90s`, `10m`, `24h`, `7d`); at most about 285,000 years.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || ConfigError::Window(s.to_string());
        let digits = s.bytes().take_while(u8::is_ascii_digit).count();
        let (number, unit) = s.split_at(digits);
        let number: u64 = number.parse().map_err(|_| bad())?;
        let (_, size) = WINDOW_UNITS
            .into_iter()
            .find(|(name, _)| *name == unit)
            .ok_or_else(bad)?;
        number
            .checked_mul(size)
            .filter(|&ms| ms < MAX_WINDOW_MS)
            .and_then(Window::from_millis)
            .ok_or_else(bad)
    }
}

/// Longer than any window anyone needs, and small enough that message
/// times (milliseconds, below 2^53 so that Redis's Lua holds them exactly)
/// minus a window never overflow.
const MAX_WINDOW_MS: u64 = 1 << 53;

/// How a normalised text is cut into shingles.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shingling {
    /// Word w-grams: every run of `N` consecutive tokens.
    Words(usize),
    /// Word k-grams for every k from 1 to `N`: the words themselves and
    /// their runs. A one-word edit breaks `N` runs of each length but only
    /// one word, so the pair keeps more in common than under
    /// [`Shingling::Words`] alone, while the runs still tell word order.
    WordsUpTo(usize),
    /// Character k-grams: every run of `N` consecutive characters of the
    /// normalised text, spaces folded to one.
    Chars(usize),
    /// Spot signatures (SpotSigs): each English stop word followed by the
    /// next `N` words that are not stop words (see
    /// [`crate::engine::shingle`] for the list and the fallback of texts
    /// with too few stop words).
    Spots(usize),
}

impl fmt::Display for Shingling {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Shingling::Words(n) => write!(f, "words:{n}"),
            Shingling::WordsUpTo(n) => write!(f, "words:1-{n}"),
            Shingling::Chars(n) => write!(f, "chars:{n}"),
            Shingling::Spots(n) => write!(f, "spots:{n}"),
        }
    }
}

impl FromStr for Shingling {
    type Err = ConfigError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || ConfigError::Shingle(s.to_string());
        let (kind, width) = s.split_once(':').ok_or_else(bad)?;
        if let Some(upto) = width.strip_prefix("1-") {
            let upto: usize = upto.parse().map_err(|_| bad())?;
            return match kind {
                "words" | "word" | "w" if upto == 1 => Ok(Shingling::Words(1)),
                "words" | "word" | "w" if (2..=32).contains(&upto) => {
                    Ok(Shingling::WordsUpTo(upto))
                }
                _ => Err(bad()),
            };
        }
        let width: usize = width.parse().map_err(|_| bad())?;
        if !(1..=32).contains(&width) {
            return Err(bad());
        }
        match kind {
            "words" | "word" | "w" => Ok(Shingling::Words(width)),
            "chars" | "char" | "c" => Ok(Shingling::Chars(width)),
            "spots" | "spot" | "s" => Ok(Shingling::Spots(width)),
            _ => Err(bad()),
        }
    }
}

/// Which of a text's shingles are kept (after shingling, before the cap of
/// [`MAX_SHINGLES`](crate::engine::shingle::MAX_SHINGLES)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sampling {
    /// Every shingle.
    All,
    /// Only the shingles whose fingerprint is 0 modulo `M` (Broder's mod-m
    /// sample), for long documents; a text with too few such shingles keeps
    /// all of its own (see [`crate::engine::shingle::MIN_SAMPLED`]).
    Mod(u32),
}

/// Largest modulus `--sample mod:M` takes: beyond it a sample of a feed
/// item's body is a handful of shingles.
pub const MAX_SAMPLE_MODULUS: u32 = 64;

impl fmt::Display for Sampling {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Sampling::All => f.write_str("all"),
            Sampling::Mod(m) => write!(f, "mod:{m}"),
        }
    }
}

impl FromStr for Sampling {
    type Err = ConfigError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || ConfigError::Sample(s.to_string());
        if matches!(s, "all" | "none") {
            return Ok(Sampling::All);
        }
        let modulus = s.strip_prefix("mod:").ok_or_else(bad)?;
        let modulus: u32 = modulus.parse().map_err(|_| bad())?;
        if !(2..=MAX_SAMPLE_MODULUS).contains(&modulus) {
            return Err(bad());
        }
        Ok(Sampling::Mod(modulus))
    }
}

/// How two shingle sets are compared. Both are computed exactly on the
/// stored sets, never estimated from the MinHash signature.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Measure {
    /// |A ∩ B| / |A ∪ B|: symmetric, penalises added or removed text.
    Jaccard,
    /// |A ∩ B| / min(|A|, |B|): how much of the shorter text the longer one
    /// contains. Catches truncations and appended comments at any length.
    /// A set of fewer than three shingles is compared by Jaccard instead, so
    /// "Happy New Year!" is not contained in every longer greeting.
    Containment,
}

/// What a message whose text has nothing left once normalised (`""`,
/// blanks, only links and retweet markers) gets. It has nothing to compare,
/// so it is never a duplicate and never indexed either way. The paths that
/// read lines (the filter, the sidecar, the worker, [`crate::pipeline::stream`])
/// apply it; [`crate::Deduper::check`] itself answers such a sketch new.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum EmptyText {
    /// Tagged new.
    #[default]
    New,
    /// Refused as an invalid line
    /// ([`crate::InvalidReason::NothingToCompare`]), for pipelines that
    /// would rather not pass such messages on.
    Invalid,
}

/// `Display` and `FromStr` for a setting that is one of a few names, from
/// one table, so that what is printed is always what is read back.
macro_rules! named_setting {
    ($setting:ident, $error:ident, { $($variant:ident => $name:literal),+ $(,)? }) => {
        impl fmt::Display for $setting {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(match self {
                    $($setting::$variant => $name,)+
                })
            }
        }

        impl FromStr for $setting {
            type Err = ConfigError;

            fn from_str(s: &str) -> Result<Self, Self::Err> {
                match s {
                    $($name => Ok($setting::$variant),)+
                    _ => Err(ConfigError::$error(s.to_string())),
                }
            }
        }
    };
}

named_setting!(EmptyText, EmptyText, { New => "new", Invalid => "invalid" });
named_setting!(Measure, Measure, { Jaccard => "jaccard", Containment => "containment" });

/// Everything that decides a verdict.
#[derive(Clone, Debug, PartialEq)]
pub struct EngineConfig {
    /// Similarity at or above which a message is a near-duplicate, in (0, 1].
    pub threshold: f64,
    /// The most messages the index holds; the least recently used is evicted
    /// past it.
    pub capacity: NonZeroUsize,
    /// How texts are cut into shingles.
    pub shingling: Shingling,
    /// Which shingles are kept.
    pub sampling: Sampling,
    /// How shingle sets are compared.
    pub measure: Measure,
    /// The most indexed messages one LSH bucket holds.
    pub max_bucket: usize,
    /// How long a message stays matchable; `None`: until it is evicted.
    pub window: Option<Window>,
    /// The most bytes of memory the in-memory index may hold (its entries,
    /// their shingle sets and its postings table, as
    /// [`crate::engine::index::Index::bytes`] counts them); past it the least
    /// recently used messages are evicted. `None`: only `capacity` bounds it.
    /// An index in Redis refuses it (Redis's own memory is its business).
    pub max_index_bytes: Option<NonZeroUsize>,
    /// What a message with nothing to compare gets (see [`EmptyText`]).
    pub empty_text: EmptyText,
    /// How many messages back a lone match may reach with the lower bar,
    /// threshold minus [`crate::engine::verdict::RECENT_MARGIN`]: a
    /// candidate that many arrivals old or newer, and the only story near
    /// the message (see [`crate::engine::verdict::LoneMatch`]). 0 turns the
    /// lower bar off: every match must reach the threshold. Applies under
    /// `words:1-2` shingling only (see [`EngineConfig::lone_reach`]).
    pub recent: u64,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            threshold: DEFAULT_THRESHOLD,
            capacity: NonZeroUsize::new(DEFAULT_CAPACITY).expect("non-zero constant"),
            shingling: DEFAULT_SHINGLE,
            sampling: DEFAULT_SAMPLE,
            measure: DEFAULT_MEASURE,
            max_bucket: DEFAULT_MAX_BUCKET,
            window: None,
            max_index_bytes: None,
            empty_text: DEFAULT_EMPTY_TEXT,
            recent: DEFAULT_RECENT,
        }
    }
}

impl EngineConfig {
    /// What decides a text's shingle set, as text: the shingling, and the
    /// sampling when there is one (`words:1-2`, `spots:2+mod:4`). State files
    /// and the Redis index record it; without sampling it is the shingling
    /// alone, as they recorded before sampling existed.
    pub fn shingle_settings(&self) -> String {
        match self.sampling {
            Sampling::All => self.shingling.to_string(),
            sampling => format!("{}+{sampling}", self.shingling),
        }
    }

    /// How many arrivals back a lone recent match reaches as this
    /// configuration applies it: [`EngineConfig::recent`] under `words:1-2`
    /// shingling, for which the rule's bounds in shingles are set (six to
    /// twenty words), and 0 (off) under any other: there, every match must
    /// reach the threshold.
    pub fn lone_reach(&self) -> u64 {
        if self.shingling == Shingling::WordsUpTo(2) {
            self.recent
        } else {
            0
        }
    }

    /// Checks every field's range.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if !(self.threshold > 0.0 && self.threshold <= 1.0) {
            return Err(ConfigError::Threshold(self.threshold));
        }
        if self.capacity.get() > u32::MAX as usize {
            return Err(ConfigError::Capacity(self.capacity.get()));
        }
        if self.max_bucket == 0 {
            return Err(ConfigError::MaxBucket);
        }
        Ok(())
    }
}

/// A configuration value is out of range or unreadable.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The threshold is not in (0, 1].
    #[error("threshold must be in (0, 1], got {0}")]
    Threshold(f64),
    /// The capacity does not fit the index's 32-bit slots.
    #[error("capacity must be between 1 and 4294967295, got {0}")]
    Capacity(usize),
    /// The shingle specification is not `words:N`, `words:1-N`, `chars:N`
    /// or `spots:N` with N in 1..=32.
    #[error(
        "shingling must be words:N, words:1-N, chars:N or spots:N with N from 1 to 32, got {0:?}"
    )]
    Shingle(String),
    /// The sampling is not `all` or `mod:M` with M in 2..=64.
    #[error("sampling must be all or mod:M with M from 2 to 64, got {0:?}")]
    Sample(String),
    /// The measure is not one of the known names.
    #[error("measure must be jaccard or containment, got {0:?}")]
    Measure(String),
    /// The LSH bucket cap is zero.
    #[error("the bucket cap must be at least 1")]
    MaxBucket,
    /// A field path is empty or has an empty component.
    #[error("field path must be dotted names like data.text, got {0:?}")]
    FieldPath(String),
    /// The window is not a positive whole number and a unit.
    #[error(
        "window must be a positive whole number and a unit (ms, s, m, h, d), like 10m, 24h or 7d, got {0:?}"
    )]
    Window(String),
    /// The empty-text rule is not one of the known names.
    #[error("empty-text must be new or invalid, got {0:?}")]
    EmptyText(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shingling_parses_and_prints() {
        assert_eq!("words:3".parse::<Shingling>().unwrap(), Shingling::Words(3));
        assert_eq!(
            "words:1-2".parse::<Shingling>().unwrap(),
            Shingling::WordsUpTo(2)
        );
        assert_eq!(
            "words:1-1".parse::<Shingling>().unwrap(),
            Shingling::Words(1)
        );
        assert_eq!(Shingling::WordsUpTo(3).to_string(), "words:1-3");
        for bad in [
            "words:1-0",
            "words:1-33",
            "chars:1-2",
            "words:2-3",
            "words:1-",
        ] {
            assert!(bad.parse::<Shingling>().is_err(), "{bad}");
        }
        assert_eq!("chars:5".parse::<Shingling>().unwrap(), Shingling::Chars(5));
        assert_eq!(Shingling::Chars(4).to_string(), "chars:4");
        assert_eq!("spots:2".parse::<Shingling>().unwrap(), Shingling::Spots(2));
        assert_eq!(Shingling::Spots(1).to_string(), "spots:1");
        for bad in [
            "words", "words:0", "bytes:3", "words:x", "chars:33", "spots:0",
        ] {
            assert!(bad.parse::<Shingling>().is_err(), "{bad}");
        }
    }

    #[test]
    fn sampling_parses_prints_and_joins_the_shingle_settings() {
        assert_eq!("mod:4".parse::<Sampling>().unwrap(), Sampling::Mod(4));
        assert_eq!("all".parse::<Sampling>().unwrap(), Sampling::All);
        assert_eq!(Sampling::Mod(8).to_string(), "mod:8");
        for bad in ["mod:1", "mod:0", "mod:65", "mod:x", "mod", "4", "every"] {
            assert!(bad.parse::<Sampling>().is_err(), "{bad}");
        }
        let mut config = EngineConfig::default();
        assert_eq!(config.shingle_settings(), "words:1-2", "as before sampling");
        config.shingling = Shingling::Spots(2);
        config.sampling = Sampling::Mod(4);
        assert_eq!(config.shingle_settings(), "spots:2+mod:4");
    }

    #[test]
    fn windows_parse_and_print() {
        for (text, ms, printed) in [
            ("10m", 600_000, "10m"),
            ("24h", 86_400_000, "1d"),
            ("7d", 604_800_000, "7d"),
            ("90s", 90_000, "90s"),
            ("1500ms", 1_500, "1500ms"),
            ("120m", 7_200_000, "2h"),
        ] {
            let window: Window = text.parse().unwrap();
            assert_eq!(window.millis(), ms, "{text}");
            assert_eq!(window.to_string(), printed);
            assert_eq!(printed.parse::<Window>().unwrap(), window);
        }
        for bad in [
            "",
            "0s",
            "10",
            "m",
            "-5m",
            "1.5h",
            "10 m",
            "10M",
            "5w",
            "99999999999999d",
        ] {
            assert!(bad.parse::<Window>().is_err(), "{bad}");
        }
    }

    #[test]
    fn threshold_out_of_range_is_refused() {
        for t in [0.0, -0.1, 1.5, f64::NAN] {
            let config = EngineConfig {
                threshold: t,
                ..EngineConfig::default()
            };
            assert!(config.validate().is_err(), "{t}");
        }
        assert!(EngineConfig::default().validate().is_ok());
    }
}

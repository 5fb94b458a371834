//! Writes a deterministic, realistic tweet stream to stdout, for benchmarks.
//!
//! ```text
//! cargo run --release --example gen_stream -- [COUNT] [short|full|v1] [SEED]
//! ```
//!
//! About a quarter of the messages copy a recent one the way people and bots
//! do (a retweet marker, a truncation with `…`, a comment added, a case
//! change, an exact repeat); the rest are fresh texts of 8 to 30 words drawn
//! from a Zipf-like vocabulary, with hashtags, mentions and links. `short`
//! lines are `{"id_str":..,"text":..}` (about 150 bytes); `full` lines wrap
//! the text in a real v1.1 tweet's envelope (about 4 KB).
//!
//! `v1` is shaped like the shared synthetic stream (`dev-200k.jsonl`), for
//! when that file is not there: v1.1 objects of about 500 bytes with `user`
//! and `entities` (hashtags, mentions and URLs with their indices); 30% of
//! the messages copy one about 2,000 messages back (exact, whitespace, case,
//! one or two words edited, a comment added, `RT @user:`, cut with `…`,
//! another link); 15% of the others are template families that share most
//! of their words (check-ins, "I liked a @YouTube video", "Just posted a
//! photo", birthday wishes, hashtag blocks, "New video is up!"), which make
//! the large LSH buckets of real streams; the rest draw from a long-tail
//! vocabulary of 60,000 words.

use std::io::{self, BufWriter, Write};

/// xorshift64*: tiny, fast, and the same on every machine.
pub struct Rng(u64);

impl Rng {
    /// The generator `main` makes for a seed.
    pub fn with_seed(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

const SYLLABLES: &[&str] = &[
    "ka", "lo", "mi", "ner", "sta", "tion", "pre", "dis", "ver", "ul", "an", "bro", "cle", "dra",
    "fen", "gor", "hal", "is", "jun", "kel", "lam", "mor", "nus", "opt", "pal", "qui", "ros",
    "sen", "tur", "vo",
];

const USAGE: &str = "\
Writes a deterministic tweet stream (JSON lines) to stdout, for benchmarks.

Usage: gen_stream [COUNT] [short|full|v1] [SEED]

  COUNT   messages to write (default 1000000)
  short   {\"id_str\":..,\"text\":..} lines of about 150 bytes (the default)
  full    the text in a real v1.1 tweet's envelope, about 4 KB a line
  v1      v1.1 objects of about 500 bytes with user and entities, 30% copies,
          15% template families (like the shared synthetic stream)
  SEED    the random seed (default 42): the same seed writes the same stream
";

/// The arguments, or the reason they are wrong.
fn parse_args(args: &[String]) -> Result<(u64, Shape, u64), String> {
    if args.len() > 3 {
        return Err(format!("at most three arguments, got {}", args.len()));
    }
    let count = match args.first() {
        Some(a) => a
            .parse()
            .map_err(|_| format!("COUNT must be a whole number, got {a:?}"))?,
        None => 1_000_000,
    };
    let shape = match args.get(1).map(String::as_str) {
        None | Some("short") => Shape::Short,
        Some("full") => Shape::Full,
        Some("v1") => Shape::V1,
        Some(other) => return Err(format!("expected short, full or v1, got {other:?}")),
    };
    let seed = match args.get(2) {
        Some(a) => a
            .parse()
            .map_err(|_| format!("SEED must be a whole number, got {a:?}"))?,
        None => 42,
    };
    Ok((count, shape, seed))
}

/// The kind of line written.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Shape {
    Short,
    Full,
    V1,
}

fn main() -> io::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "-h" || a == "--help") {
        print!("{USAGE}");
        return Ok(());
    }
    let (count, shape, seed) = match parse_args(&args) {
        Ok(parsed) => parsed,
        Err(e) => {
            eprintln!("gen_stream: {e}\n\n{USAGE}");
            std::process::exit(2);
        }
    };
    let mut rng = Rng::with_seed(seed);
    if shape == Shape::V1 {
        return v1::write(count, &mut rng, io::stdout().lock());
    }
    let full = shape == Shape::Full;

    let vocabulary: Vec<String> = (0..20_000)
        .map(|_| {
            (0..2 + rng.below(3))
                .map(|_| SYLLABLES[rng.below(SYLLABLES.len())])
                .collect()
        })
        .collect();
    let hashtags: Vec<String> = (0..300)
        .map(|i| format!("#{}", vocabulary[i * 7]))
        .collect();
    let users: Vec<String> = (0..5_000)
        .map(|i| format!("user_{}{}", vocabulary[i * 3], i))
        .collect();
    let envelope = if full { Some(Envelope::new()) } else { None };

    let mut recent: Vec<String> = Vec::with_capacity(10_000);
    let mut out = BufWriter::with_capacity(1 << 20, io::stdout().lock());
    let mut line = String::new();
    for n in 0..count {
        let text = if !recent.is_empty() && rng.unit() < 0.25 {
            let original = &recent[rng.below(recent.len())];
            match rng.below(5) {
                0 => format!("RT @{}: {original}", users[rng.below(users.len())]),
                1 => {
                    let cut = original
                        .char_indices()
                        .map(|(i, _)| i)
                        .nth(original.chars().count() * 2 / 3)
                        .unwrap_or(0);
                    format!(
                        "RT @{}: {}…",
                        users[rng.below(users.len())],
                        &original[..cut]
                    )
                }
                2 => format!(
                    "{original} {} {}",
                    vocabulary[rng.below(2000)],
                    vocabulary[rng.below(2000)]
                ),
                3 => original.to_uppercase(),
                _ => original.clone(),
            }
        } else {
            let words = 8 + rng.below(23);
            let mut text = String::new();
            for w in 0..words {
                if w > 0 {
                    text.push(' ');
                }
                // Zipf-like: low ranks far more often.
                let rank = (vocabulary.len() as f64 * rng.unit().powi(3)) as usize;
                text.push_str(&vocabulary[rank]);
            }
            for _ in 0..rng.below(3) {
                text.push(' ');
                text.push_str(&hashtags[rng.below(hashtags.len())]);
            }
            if rng.unit() < 0.3 {
                text.insert_str(0, &format!("@{} ", users[rng.below(users.len())]));
            }
            if rng.unit() < 0.4 {
                text.push_str(&format!(" https://t.co/{:010x}", rng.next() >> 24));
            }
            if recent.len() < 10_000 {
                recent.push(text.clone());
            } else {
                let slot = rng.below(recent.len());
                recent[slot] = text.clone();
            }
            text
        };
        let id = 1_500_000_000_000_000_000u64 + n * 1_000 + rng.below(1000) as u64;
        line.clear();
        match &envelope {
            None => {
                line.push_str(&format!(
                    "{{\"id_str\":\"{id}\",\"text\":{}}}",
                    json_string(&text)
                ));
            }
            Some(envelope) => envelope.write(&mut line, id, &text),
        }
        line.push('\n');
        out.write_all(line.as_bytes())?;
    }
    out.flush()
}

fn json_string(s: &str) -> String {
    serde_json::to_string(s).expect("strings serialise")
}

/// A real v1.1 tweet (the first line of `fixtures/retweet_storm.jsonl`), cut
/// around its id and text so each message is spliced in without
/// re-serialising the rest.
struct Envelope {
    parts: Vec<String>,
}

impl Envelope {
    fn new() -> Envelope {
        let template = include_str!("../fixtures/retweet_storm.jsonl")
            .lines()
            .next()
            .expect("a line");
        let mut value: serde_json::Value = serde_json::from_str(template).expect("fixture is JSON");
        let object = value.as_object_mut().expect("an object");
        object.insert(
            "id".into(),
            serde_json::Value::String("\u{1}ID\u{1}".into()),
        );
        object.insert(
            "id_str".into(),
            serde_json::Value::String("\u{1}IDS\u{1}".into()),
        );
        object.insert(
            "full_text".into(),
            serde_json::Value::String("\u{1}TEXT\u{1}".into()),
        );
        let text = value.to_string();
        let parts = text
            .split("\"\\u0001")
            .flat_map(|p| p.split("\\u0001\""))
            .map(str::to_string)
            .collect();
        Envelope { parts }
    }

    fn write(&self, out: &mut String, id: u64, text: &str) {
        for part in &self.parts {
            match part.as_str() {
                "ID" => out.push_str(&id.to_string()),
                "IDS" => out.push_str(&format!("\"{id}\"")),
                "TEXT" => out.push_str(&json_string(text)),
                other => out.push_str(other),
            }
        }
    }
}

/// The `v1` shape: v1.1 objects like the shared synthetic stream's (the
/// criterion benches include this file to make it too).
pub mod v1 {
    use super::{Rng, SYLLABLES, json_string};
    use std::fmt::Write as _;
    use std::io::{self, BufWriter, Write};

    const FAMILIES: usize = 6;
    const STATES: &[&str] = &["CA", "NY", "TX", "FL", "WA", "IL", "MA", "OR", "GA", "CO"];

    /// Writes `count` lines to `out`.
    pub fn write(count: u64, rng: &mut Rng, out: impl Write) -> io::Result<()> {
        // A long tail: 60,000 words, drawn with a Zipf-like skew.
        let vocabulary: Vec<String> = (0..60_000)
            .map(|_| {
                (0..2 + rng.below(3))
                    .map(|_| SYLLABLES[rng.below(SYLLABLES.len())])
                    .collect()
            })
            .collect();
        let names: Vec<String> = (0..20_000)
            .map(|i| {
                let mut name = vocabulary[i * 3 % vocabulary.len()].clone();
                name.push_str(&vocabulary[(i * 7 + 1) % vocabulary.len()][..2]);
                name
            })
            .collect();
        let word =
            |rng: &mut Rng| -> usize { (vocabulary.len() as f64 * rng.unit().powi(3)) as usize };
        let mut recent: Vec<String> = Vec::with_capacity(4_000);
        let mut out = BufWriter::with_capacity(1 << 20, out);
        let mut line = String::new();
        for n in 0..count {
            let copy = !recent.is_empty() && rng.unit() < 0.30;
            let text = if copy {
                // Uniform over the last 4,000 fresh messages: about 2,000 back.
                let original = &recent[rng.below(recent.len())];
                copy_of(original, rng, &vocabulary, &names)
            } else {
                let text = if rng.unit() < 0.15 {
                    template(rng.below(FAMILIES), rng, &vocabulary, &names, word)
                } else {
                    let words = 6 + rng.below(14);
                    let mut text = String::new();
                    if rng.unit() < 0.3 {
                        let _ = write!(text, "@{} ", names[rng.below(names.len())]);
                    }
                    for w in 0..words {
                        if w > 0 {
                            text.push(' ');
                        }
                        text.push_str(&vocabulary[word(rng)]);
                    }
                    for _ in 0..rng.below(3) {
                        let _ = write!(text, " #{}", vocabulary[rng.below(400)]);
                    }
                    if rng.unit() < 0.35 {
                        let _ = write!(text, " https://t.co/{}", link(rng));
                    }
                    text
                };
                if recent.len() < 4_000 {
                    recent.push(text.clone());
                } else {
                    let slot = rng.below(recent.len());
                    recent[slot] = text.clone();
                }
                text
            };
            line.clear();
            tweet(&mut line, n, &text, rng, &names);
            line.push('\n');
            out.write_all(line.as_bytes())?;
        }
        out.flush()
    }

    fn link(rng: &mut Rng) -> String {
        const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
        (0..10)
            .map(|_| ALPHABET[rng.below(ALPHABET.len())] as char)
            .collect()
    }

    /// A copy of `original`, made one of the ways people and bots copy.
    fn copy_of(original: &str, rng: &mut Rng, vocabulary: &[String], names: &[String]) -> String {
        match rng.below(8) {
            0 => original.to_string(),
            1 => original.replace(' ', "  "),
            2 => original.to_uppercase(),
            3 => {
                let mut words: Vec<&str> = original.split(' ').collect();
                for _ in 0..1 + rng.below(2) {
                    let at = rng.below(words.len());
                    words[at] = &vocabulary[rng.below(5_000)];
                }
                words.join(" ")
            }
            4 => format!(
                "{original} {} {}",
                vocabulary[rng.below(3_000)],
                vocabulary[rng.below(3_000)]
            ),
            5 => format!("RT @{}: {original}", names[rng.below(names.len())]),
            6 => {
                let chars = original.chars().count();
                let cut: String = original.chars().take(chars * 2 / 3).collect();
                format!("RT @{}: {cut}…", names[rng.below(names.len())])
            }
            _ => match original.find("https://t.co/") {
                Some(at) => format!("{}https://t.co/{}", &original[..at], link(rng)),
                None => format!("{original} https://t.co/{}", link(rng)),
            },
        }
    }

    /// A message of a template family: most of its words are the family's.
    fn template(
        family: usize,
        rng: &mut Rng,
        vocabulary: &[String],
        names: &[String],
        word: impl Fn(&mut Rng) -> usize,
    ) -> String {
        // A title of `least` to `least + spread - 1` capitalised words.
        let title = |rng: &mut Rng, least: usize, spread: usize| -> String {
            let words = least + rng.below(spread);
            (0..words)
                .map(|_| capitalised(&vocabulary[word(rng)]))
                .collect::<Vec<_>>()
                .join(" ")
        };
        match family {
            0 => format!(
                "I'm at {} in {}, {}",
                title(rng, 1, 3),
                title(rng, 1, 1),
                STATES[rng.below(STATES.len())]
            ),
            1 => format!(
                "I liked a @YouTube video https://t.co/{} {}",
                link(rng),
                title(rng, 3, 5)
            ),
            2 => format!(
                "Just posted a photo @ {} https://t.co/{}",
                title(rng, 1, 3),
                link(rng)
            ),
            3 => format!(
                "Happy birthday @{}! Have a great day {}",
                names[rng.below(names.len())],
                ["🎉", "🎂", "❤️", "!!", ""][rng.below(5)]
            ),
            4 => {
                let mut text = String::new();
                for i in 0..6 + rng.below(6) {
                    if i > 0 {
                        text.push(' ');
                    }
                    // Blocks draw from a small set of popular tags.
                    let _ = write!(text, "#{}", vocabulary[rng.below(60)]);
                }
                text
            }
            _ => format!(
                "New video is up! {} https://t.co/{}",
                title(rng, 2, 4),
                link(rng)
            ),
        }
    }

    fn capitalised(word: &str) -> String {
        let mut chars = word.chars();
        match chars.next() {
            Some(first) => first.to_uppercase().chain(chars).collect(),
            None => String::new(),
        }
    }

    /// Writes the v1.1 object around `text`: `entities` lists the text's
    /// hashtags, mentions and links with their code-point indices.
    fn tweet(line: &mut String, n: u64, text: &str, rng: &mut Rng, names: &[String]) {
        let id = 1_101_452_019_152_977_920u64 + n * 90_000_000 + rng.below(1 << 20) as u64;
        let user = 10_000_000 + rng.below(1 << 40) as u64;
        let second = n / 40;
        let _ = write!(
            line,
            "{{\"created_at\":\"Fri Mar 01 {:02}:{:02}:{:02} +0000 2019\",\"id\":{id},\"id_str\":\"{id}\",\"text\":{},\"user\":{{\"id\":{user},\"id_str\":\"{user}\",\"screen_name\":\"{}\"}},\"entities\":{{",
            12 + second / 3600 % 12,
            second / 60 % 60,
            second % 60,
            json_string(text),
            names[rng.below(names.len())],
        );
        let (mut hashtags, mut mentions, mut urls) = (Vec::new(), Vec::new(), Vec::new());
        let mut at = 0;
        for token in text.split(' ') {
            let len = token.chars().count();
            let clean = token.trim_end_matches(|c: char| !c.is_alphanumeric() && c != '_');
            let clean_len = clean.chars().count();
            if let Some(tag) = clean.strip_prefix('#').filter(|t| !t.is_empty()) {
                hashtags.push(format!(
                    "{{\"text\":{},\"indices\":[{at},{}]}}",
                    json_string(tag),
                    at + clean_len
                ));
            } else if let Some(name) = clean.strip_prefix('@').filter(|t| !t.is_empty()) {
                mentions.push(format!(
                    "{{\"screen_name\":{},\"indices\":[{at},{}]}}",
                    json_string(name),
                    at + clean_len
                ));
            } else if let Some(path) = token.strip_prefix("https://t.co/") {
                let site =
                    ["instagram.com/p", "youtu.be", "bit.ly", "example.com/news"][(at + len) % 4];
                urls.push(format!(
                    "{{\"url\":\"{token}\",\"expanded_url\":\"https://{site}/{path}\",\"display_url\":\"{site}/{path}\",\"indices\":[{at},{}]}}",
                    at + len
                ));
            }
            at += len + 1;
        }
        let _ = write!(
            line,
            "\"hashtags\":[{}],\"user_mentions\":[{}],\"urls\":[{}]}},\"lang\":\"en\"}}",
            hashtags.join(","),
            mentions.join(","),
            urls.join(",")
        );
    }
}

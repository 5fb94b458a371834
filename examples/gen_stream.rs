//! Writes a deterministic, realistic tweet stream to stdout, for benchmarks.
//!
//! ```text
//! cargo run --release --example gen_stream -- [COUNT] [short|full] [SEED]
//! ```
//!
//! About a quarter of the messages copy a recent one the way people and bots
//! do (a retweet marker, a truncation with `…`, a comment added, a case
//! change, an exact repeat); the rest are fresh texts of 8 to 30 words drawn
//! from a Zipf-like vocabulary, with hashtags, mentions and links. `short`
//! lines are `{"id_str":..,"text":..}` (about 150 bytes); `full` lines wrap
//! the text in a real v1.1 tweet's envelope (about 4 KB).

use std::io::{self, BufWriter, Write};

/// xorshift64*: tiny, fast, and the same on every machine.
struct Rng(u64);

impl Rng {
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

Usage: gen_stream [COUNT] [short|full] [SEED]

  COUNT   messages to write (default 1000000)
  short   {\"id_str\":..,\"text\":..} lines of about 150 bytes (the default)
  full    the text in a real v1.1 tweet's envelope, about 4 KB a line
  SEED    the random seed (default 42): the same seed writes the same stream
";

/// The arguments, or the reason they are wrong.
fn parse_args(args: &[String]) -> Result<(u64, bool, u64), String> {
    if args.len() > 3 {
        return Err(format!("at most three arguments, got {}", args.len()));
    }
    let count = match args.first() {
        Some(a) => a
            .parse()
            .map_err(|_| format!("COUNT must be a whole number, got {a:?}"))?,
        None => 1_000_000,
    };
    let full = match args.get(1).map(String::as_str) {
        None | Some("short") => false,
        Some("full") => true,
        Some(other) => return Err(format!("expected short or full, got {other:?}")),
    };
    let seed = match args.get(2) {
        Some(a) => a
            .parse()
            .map_err(|_| format!("SEED must be a whole number, got {a:?}"))?,
        None => 42,
    };
    Ok((count, full, seed))
}

fn main() -> io::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "-h" || a == "--help") {
        print!("{USAGE}");
        return Ok(());
    }
    let (count, full, seed) = match parse_args(&args) {
        Ok(parsed) => parsed,
        Err(e) => {
            eprintln!("gen_stream: {e}\n\n{USAGE}");
            std::process::exit(2);
        }
    };
    let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);

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

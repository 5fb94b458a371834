//! Decoding alone: microseconds per line to read a record's id, text and URL
//! entities, next to serde_json's validate-only pass (`IgnoredAny`) over the
//! same lines in the same run, and sonic-rs's (`sonic`: the same pass on the
//! parser the decoder walks).
//!
//! ```text
//! cargo run --release --example decode -- [all|floor|sonic|skip|utf8|default|chosen|read] [ROUNDS] < stream.jsonl
//! ```
//!
//! `default` is field discovery, `chosen` is `--id-field id_str --text-field
//! text`; `all` times the three, interleaved, and keeps each one's best
//! round (this machine is shared). One mode alone is what to run under
//! `valgrind --tool=callgrind`; `read` only reads and splits the input, the
//! part of every mode's count that is not decoding. `skip` is sonic-rs's
//! checked skipping of each whole line alone (the validating pass the
//! decoder before issue 42 was built on), `utf8` the UTF-8 check alone.

use std::io::{self, Read};
use std::time::Instant;

use dedup_stream::wire::record::{Decoder, FieldSpec};

fn main() -> io::Result<()> {
    let mode = std::env::args().nth(1).unwrap_or_else(|| "all".into());
    let rounds: usize = std::env::args()
        .nth(2)
        .and_then(|a| a.parse().ok())
        .unwrap_or(5);
    let mut input = Vec::new();
    io::stdin().lock().read_to_end(&mut input)?;
    let lines: Vec<&[u8]> = input
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .collect();
    let default = Decoder::new(FieldSpec::default());
    let chosen =
        Decoder::new(FieldSpec::new(Some("id_str"), vec!["text".into()]).expect("valid paths"));
    let floor = |lines: &[&[u8]]| {
        lines
            .iter()
            .filter(|l| serde_json::from_slice::<serde::de::IgnoredAny>(l).is_ok())
            .count()
    };
    let sonic = |lines: &[&[u8]]| {
        lines
            .iter()
            .filter(|l| sonic_rs::from_slice::<serde::de::IgnoredAny>(l).is_ok())
            .count()
    };
    let skip = |lines: &[&[u8]]| {
        lines
            .iter()
            .filter(|l| {
                let mut p = sonic_rs::parser::Parser::new(sonic_rs::Read::from(**l));
                p.skip_one(true).is_ok() && p.skip_space().is_none()
            })
            .count()
    };
    let utf8 = |lines: &[&[u8]]| {
        lines
            .iter()
            .filter(|l| simdutf8::basic::from_utf8(l).is_ok())
            .count()
    };
    let decode = |decoder: &Decoder, lines: &[&[u8]]| {
        lines
            .iter()
            .filter_map(|l| decoder.decode(l).ok())
            .map(|r| r.text.len() + r.urls.len())
            .sum::<usize>()
    };
    let modes: Vec<&str> = match mode.as_str() {
        "all" => vec!["floor", "sonic", "default", "chosen"],
        one => vec![one],
    };
    let mut best = vec![f64::INFINITY; modes.len()];
    for _ in 0..rounds {
        for (i, mode) in modes.iter().enumerate() {
            let started = Instant::now();
            let n = match *mode {
                "floor" => floor(&lines),
                "sonic" => sonic(&lines),
                "skip" => skip(&lines),
                "utf8" => utf8(&lines),
                "read" => lines.len(),
                "default" => decode(&default, &lines),
                "chosen" => decode(&chosen, &lines),
                other => panic!("unknown mode {other}"),
            };
            std::hint::black_box(n);
            best[i] = best[i].min(started.elapsed().as_secs_f64());
        }
    }
    let per = |seconds: f64| seconds / lines.len() as f64 * 1e6;
    let floor_best = modes.iter().position(|m| *m == "floor").map(|i| best[i]);
    for (mode, seconds) in modes.iter().zip(&best) {
        match floor_best {
            Some(f) if *mode != "floor" => println!(
                "{mode}: {:.3} µs/line ({:.2} × the validate-only floor)",
                per(*seconds),
                seconds / f
            ),
            _ => println!("{mode}: {:.3} µs/line", per(*seconds)),
        }
    }
    println!("{} lines", lines.len());
    Ok(())
}

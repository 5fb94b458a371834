//! The parse-only floor of the end-to-end benchmark: reads JSON lines from
//! stdin and parses each with serde_json, deciding nothing.
//!
//! ```text
//! cargo run --release --example parse_floor -- [value|ignored|sonic] < stream.jsonl
//! ```
//!
//! `value` builds a `serde_json::Value` per line (what a consumer that parses
//! its input does); `ignored` only validates (`IgnoredAny`), the fastest
//! parse serde_json offers; `sonic` validates with sonic-rs (`IgnoredAny`
//! through its SIMD parser), the floor of the decoder's own parser. Prints
//! `lines seconds` on stdout.

use std::io::{self, BufRead};
use std::time::Instant;

fn main() -> io::Result<()> {
    let mode = std::env::args().nth(1).unwrap_or_else(|| "value".into());
    let started = Instant::now();
    let mut input = io::BufReader::with_capacity(1 << 16, io::stdin().lock());
    let mut line = Vec::new();
    let (mut lines, mut parsed) = (0u64, 0u64);
    loop {
        line.clear();
        if input.read_until(b'\n', &mut line)? == 0 {
            break;
        }
        lines += 1;
        let ok = match mode.as_str() {
            "ignored" => serde_json::from_slice::<serde::de::IgnoredAny>(&line).is_ok(),
            "sonic" => sonic_rs::from_slice::<serde::de::IgnoredAny>(&line).is_ok(),
            _ => serde_json::from_slice::<serde_json::Value>(&line).is_ok(),
        };
        parsed += u64::from(ok);
    }
    let seconds = started.elapsed().as_secs_f64();
    assert_eq!(lines, parsed, "every line parses");
    println!("{lines} {seconds:.6}");
    Ok(())
}

//! Where the time of a run goes: preparation (decode, normalise, tokenise,
//! shingle, sketch) and the engine (index check and insert, splicing the
//! tag), each timed alone on one thread over the same lines.
//!
//! ```text
//! cargo run --release --example stages -- [CAPACITY] < stream.jsonl
//! ```
//!
//! Prints microseconds per message for each half. On a machine with `n`
//! cores the filter can go no faster than `1 / engine` messages per second,
//! nor than `n / (prepare + engine)`: the two figures say which bound is
//! nearer, and so what to make cheaper.

use std::io::{self, BufRead};
use std::num::NonZeroUsize;
use std::time::Instant;

use dedup_stream::engine::{IndexStore, Scratch};
use dedup_stream::pipeline::DEFAULT_BATCH_LINES;
use dedup_stream::wire::batch::{self, Item, RawBatch, RawLine};
use dedup_stream::wire::record::{Decoder, FieldSpec};
use dedup_stream::{Deduper, EngineConfig};

fn main() -> io::Result<()> {
    let capacity: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1_000_000);
    let mut raws = Vec::new();
    let mut raw = RawBatch::default();
    let mut number = 0;
    for line in io::stdin().lock().split(b'\n') {
        number += 1;
        raw.push_line(number, &line?);
        if raw.len() == DEFAULT_BATCH_LINES {
            raws.push(std::mem::take(&mut raw));
        }
    }
    raws.push(raw);
    let messages = number as f64;

    let config = EngineConfig {
        capacity: NonZeroUsize::new(capacity.max(1)).expect("at least 1"),
        ..EngineConfig::default()
    };
    let mut deduper = Deduper::new(config).expect("valid configuration");
    let preparer = deduper.preparer().clone();
    let decoder = Decoder::new(FieldSpec::default());

    // The parts of preparation, each timed over every line.
    let started = Instant::now();
    let mut texts = Vec::new();
    for raw in &raws {
        for line in &raw.lines {
            if let RawLine::Content { range, .. } = line
                && let Ok(record) = decoder.decode(&raw.bytes[range.clone()])
            {
                texts.push(record.text.into_owned());
            }
        }
    }
    let decode = started.elapsed().as_secs_f64();
    let mut scratch = Scratch::default();
    let started = Instant::now();
    for text in &texts {
        std::hint::black_box(preparer.normalise(text, &[], &mut scratch).len());
    }
    let normalise = started.elapsed().as_secs_f64();
    let (mut shingles, mut keys) = (Vec::new(), Vec::new());
    let started = Instant::now();
    for text in &texts {
        shingles.clear();
        keys.clear();
        std::hint::black_box(preparer.sketch_into(
            text,
            &[],
            &mut scratch,
            &mut shingles,
            &mut keys,
        ));
    }
    let sketch = started.elapsed().as_secs_f64();
    drop(texts);

    let started = Instant::now();
    let prepared: Vec<_> = raws
        .into_iter()
        .map(|raw| batch::prepare(&preparer, &decoder, raw, None))
        .collect();
    let prepare = started.elapsed().as_secs_f64();

    let started = Instant::now();
    let mut out = Vec::new();
    let mut duplicates = 0u64;
    let mut verdicts = Vec::new();
    for batch in &prepared {
        out.clear();
        verdicts.clear();
        deduper
            .decide(&batch::asks(batch, usize::MAX), &mut verdicts)
            .map_err(io::Error::other)?;
        let messages = batch.items.iter().filter_map(|item| match item {
            Item::Message(message) => Some(message),
            Item::Invalid(_) => None,
        });
        for (message, verdict) in messages.zip(&verdicts) {
            duplicates += u64::from(verdict.is_duplicate());
            batch::write_message(&mut out, batch, message, verdict);
        }
    }
    let engine = started.elapsed().as_secs_f64();
    let per = |seconds: f64| seconds / messages * 1e6;
    println!(
        "decode {:.2} µs/msg (with a copy of the text), normalise {:.2}, normalise+tokenise+shingle+sketch {:.2}",
        per(decode),
        per(normalise),
        per(sketch)
    );
    println!(
        "{number} messages ({duplicates} duplicates), capacity {capacity}: prepare {:.2} µs/msg, engine {:.2} µs/msg",
        per(prepare),
        per(engine)
    );
    Ok(())
}

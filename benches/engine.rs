//! Criterion benchmarks of the engine's stages.
//!
//! `realistic`: 20,000 v1.1 tweets with `user` and `entities` objects, 30%
//! copies and 15% template families (the first lines of the shared
//! synthetic stream `../shared/data/synthetic/dev-200k.jsonl.gz` when it is
//! there, else `gen_stream`'s `v1` stream, which is shaped like it; the
//! `DEDUP_BENCH_STREAM` variable names another JSON-lines file), read with
//! `--id-field id_str --text-field text`: decoding, preparing (decode,
//! normalise, tokenise, shingle, sketch) and the engine deciding on all of
//! them in order from an empty index.
//!
//! `stages` and `index`, the easy case: five short texts, normalised and
//! sketched, and check + insert of distinct synthetic messages into a full
//! index of 1,000,000.
//!
//! `cargo bench --bench engine`; throughput is in messages.

use std::hint::black_box;
use std::io::{BufRead, BufReader};
use std::num::NonZeroUsize;

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use dedup_stream::engine::{IndexStore, Preparer, Scratch};
use dedup_stream::pipeline::DEFAULT_BATCH_LINES;
use dedup_stream::wire::batch::{self, RawBatch, RawLine};
use dedup_stream::wire::record::{Decoder, FieldSpec};
use dedup_stream::{Deduper, EngineConfig, MessageId};

#[allow(dead_code)]
#[path = "../examples/gen_stream.rs"]
mod gen_stream;

/// Lines of the realistic stream each iteration goes through.
const REALISTIC_LINES: usize = 20_000;

/// The realistic stream's first [`REALISTIC_LINES`] lines, and where they
/// came from.
fn realistic_lines() -> (Vec<Vec<u8>>, String) {
    let take = |reader: Box<dyn BufRead>| -> Vec<Vec<u8>> {
        reader
            .split(b'\n')
            .take(REALISTIC_LINES)
            .map(|line| line.expect("the stream reads"))
            .collect()
    };
    if let Some(path) = std::env::var_os("DEDUP_BENCH_STREAM") {
        let file = std::fs::File::open(&path).expect("DEDUP_BENCH_STREAM opens");
        return (
            take(Box::new(BufReader::new(file))),
            path.to_string_lossy().into_owned(),
        );
    }
    let shared = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../shared/data/synthetic/dev-200k.jsonl.gz"
    );
    if let Ok(file) = std::fs::File::open(shared) {
        let gunzip = flate2::read::GzDecoder::new(file);
        return (take(Box::new(BufReader::new(gunzip))), "dev-200k".into());
    }
    let mut bytes = Vec::new();
    gen_stream::v1::write(
        REALISTIC_LINES as u64,
        &mut gen_stream::Rng::with_seed(42),
        &mut bytes,
    )
    .expect("writing to memory");
    (
        take(Box::new(std::io::Cursor::new(bytes))),
        "gen_stream v1".into(),
    )
}

fn realistic(c: &mut Criterion) {
    let (lines, source) = realistic_lines();
    eprintln!("realistic: {} lines of {source}", lines.len());
    let make_raws = || -> Vec<RawBatch> {
        lines
            .chunks(DEFAULT_BATCH_LINES)
            .enumerate()
            .map(|(chunk, lines)| {
                let mut raw = RawBatch::default();
                for (i, line) in lines.iter().enumerate() {
                    raw.push_line((chunk * DEFAULT_BATCH_LINES + i + 1) as u64, line);
                }
                raw
            })
            .collect()
    };
    let raws = make_raws();
    let config = EngineConfig::default();
    let preparer = Preparer::new(&config);
    let decoder =
        Decoder::new(FieldSpec::new(Some("id_str"), vec!["text".into()]).expect("valid paths"));

    let mut group = c.benchmark_group("realistic");
    group.sample_size(10);
    group.throughput(Throughput::Elements(lines.len() as u64));
    group.bench_function("decode", |b| {
        b.iter(|| {
            for raw in &raws {
                for line in &raw.lines {
                    if let RawLine::Content { range, .. } = line {
                        let record = decoder.decode(black_box(&raw.bytes[range.clone()]));
                        black_box(record.map(|r| r.text.len()).ok());
                    }
                }
            }
        })
    });
    group.bench_function("prepare", |b| {
        b.iter_batched(
            make_raws,
            |raws| {
                for raw in raws {
                    black_box(batch::prepare(&preparer, &decoder, raw, None));
                }
            },
            BatchSize::PerIteration,
        )
    });
    let prepared: Vec<_> = make_raws()
        .into_iter()
        .map(|raw| batch::prepare(&preparer, &decoder, raw, None))
        .collect();
    group.bench_function("engine, from an empty index", |b| {
        b.iter_batched(
            || Deduper::new(config.clone()).expect("valid config"),
            |mut deduper| {
                let mut verdicts = Vec::new();
                for batch in &prepared {
                    verdicts.clear();
                    deduper
                        .decide(&batch::asks(batch, usize::MAX), &mut verdicts)
                        .expect("the in-memory engine does not fail");
                    black_box(&verdicts);
                }
                deduper
            },
            BatchSize::PerIteration,
        )
    });
    group.finish();
}

/// Realistic short messages: a retweet with a link, a plain sentence, a
/// hashtag-heavy post, a Japanese tweet, a truncated retweet.
const TEXTS: &[&str] = &[
    "RT @OgbeniDipo: Top 15 In-Demand Tech Skills For 2023 •AI •AR •Blockchain •Cybersecurity https://t.co/abcdEFGH12",
    "Flooding has closed the coastal highway north of the city tonight, police say; expect delays until morning",
    "Join us at #RustConf for the keynote on async cancellation &amp; structured concurrency #rustlang #conference",
    "今日は東京で大雨です。電車が遅れているので気をつけてください",
    "RT @nasa: A long original tweet about the launch of the new rover mission to Mars, with every det…",
];

/// A synthetic message number `n`: 20 words from a 5,000-word vocabulary.
fn synthetic(n: u64) -> String {
    let mut x = n.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..20)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            format!("w{}", x % 5_000)
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn stages(c: &mut Criterion) {
    let config = EngineConfig::default();
    let preparer = Preparer::new(&config);
    let mut scratch = Scratch::default();

    let mut group = c.benchmark_group("stages");
    group.throughput(Throughput::Elements(TEXTS.len() as u64));
    group.bench_function("normalise", |b| {
        b.iter(|| {
            for text in TEXTS {
                black_box(preparer.normalise(black_box(text), &[], &mut scratch).len());
            }
        })
    });
    let (mut shingles, mut keys) = (Vec::new(), Vec::new());
    group.bench_function("normalise+shingle+sketch", |b| {
        b.iter(|| {
            for text in TEXTS {
                shingles.clear();
                keys.clear();
                black_box(preparer.sketch_into(
                    black_box(text),
                    &[],
                    &mut scratch,
                    &mut shingles,
                    &mut keys,
                ));
            }
        })
    });
    group.finish();
}

fn index(c: &mut Criterion) {
    let capacity = 1_000_000;
    let config = EngineConfig {
        capacity: NonZeroUsize::new(capacity).expect("non-zero"),
        ..EngineConfig::default()
    };
    let mut deduper = Deduper::new(config.clone()).expect("valid config");
    let preparer = deduper.preparer().clone();
    let mut scratch = Scratch::default();
    // Fill the index to capacity with distinct messages.
    for n in 0..capacity as u64 {
        let sketch = preparer.sketch(&synthetic(n), &[], &mut scratch);
        deduper.check(MessageId::Integer(n), sketch.as_sketch());
    }
    let fresh: Vec<_> = (0..10_000u64)
        .map(|n| preparer.sketch(&synthetic(10_000_000 + n), &[], &mut scratch))
        .collect();
    let mut group = c.benchmark_group("index");
    group.throughput(Throughput::Elements(fresh.len() as u64));
    let mut next = 20_000_000u64;
    group.bench_function("check+insert, full index of 1M", |b| {
        b.iter_batched(
            || (),
            |()| {
                for sketch in &fresh {
                    next += 1;
                    black_box(deduper.check(MessageId::Integer(next), sketch.as_sketch()));
                }
            },
            BatchSize::PerIteration,
        )
    });
    group.finish();
}

criterion_group!(benches, realistic, stages, index);
criterion_main!(benches);

//! Criterion benchmarks of the engine's stages, one message at a time:
//! normalise, tokenise + shingle + sketch, and index check + insert with a
//! full index of 1,000,000 messages.
//!
//! `cargo bench --bench engine`; throughput is in messages.

use std::hint::black_box;
use std::num::NonZeroUsize;

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use dedup_stream::engine::{Preparer, Scratch};
use dedup_stream::{Deduper, EngineConfig, MessageId};

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

criterion_group!(benches, stages, index);
criterion_main!(benches);

//! Invariants, checked on generated input with proptest.

use std::io::Cursor;
use std::num::NonZeroUsize;

use dedup_stream::engine::verdict::RECENT_MARGIN;
use dedup_stream::pipeline::{self, PipelineConfig};
use dedup_stream::{Deduper, EngineConfig, Measure, MessageId, Shingling, Verdict};
use proptest::prelude::*;

fn engine(capacity: usize, measure: Measure, shingling: Shingling) -> Deduper {
    Deduper::new(EngineConfig {
        capacity: NonZeroUsize::new(capacity).unwrap(),
        measure,
        shingling,
        ..EngineConfig::default()
    })
    .unwrap()
}

/// Short texts over a small vocabulary, so that near-duplicates, exact
/// copies and evictions all happen often.
fn texts() -> impl Strategy<Value = Vec<String>> {
    let word = prop::sample::select(vec![
        "rust",
        "conf",
        "keynote",
        "flood",
        "highway",
        "closed",
        "the",
        "a",
        "of",
        "RT",
        "@bob:",
        "#news",
        "東京",
        "雨",
        "https://t.co/x",
        "…",
        "&amp;",
        "Ünïcode",
        "ＷＩＤＥ",
        "😂",
    ]);
    prop::collection::vec(
        prop::collection::vec(word, 0..12).prop_map(|w| w.join(" ")),
        1..60,
    )
}

fn measures() -> impl Strategy<Value = (Measure, Shingling)> {
    (
        prop::sample::select(vec![Measure::Jaccard, Measure::Containment]),
        prop::sample::select(vec![
            Shingling::Words(1),
            Shingling::Words(2),
            Shingling::Words(3),
            Shingling::Chars(4),
            Shingling::Spots(2),
        ]),
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Under a window, a duplicate names only a message indexed when it was
    /// decided whose time is within the window of the newest time seen,
    /// however the times are ordered; nothing older stays indexed.
    #[test]
    fn a_window_never_matches_or_keeps_an_older_message(
        texts in texts(),
        steps in prop::collection::vec(-30i64..60, 60),
        window in 1u64..100,
        (measure, shingling) in measures(),
    ) {
        let mut d = Deduper::new(EngineConfig {
            capacity: NonZeroUsize::new(1000).unwrap(),
            measure,
            shingling,
            window: dedup_stream::engine::config::Window::from_millis(window),
            ..EngineConfig::default()
        })
        .unwrap();
        let preparer = d.preparer().clone();
        let mut scratch = dedup_stream::engine::Scratch::default();
        let (mut time, mut newest) = (1_000i64, i64::MIN);
        for (i, text) in texts.iter().enumerate() {
            time += steps[i];
            newest = newest.max(time);
            let horizon = newest - window as i64;
            let matchable: Vec<MessageId> = d
                .index()
                .iter_lru_first()
                .filter(|e| e.time >= horizon)
                .map(|e| e.id.clone())
                .collect();
            let sketch = preparer.sketch(text, &[], &mut scratch);
            let verdict = d.check_at(MessageId::Integer(i as u64), sketch.as_sketch(), time);
            if let Verdict::Duplicate(m) = verdict {
                prop_assert!(matchable.contains(&m.of), "{:?} not in {:?}", m.of, matchable);
            }
            prop_assert!(d.index().iter_lru_first().all(|e| e.time >= horizon));
            prop_assert_eq!(d.newest_time(), Some(newest));
        }
    }

    /// Under a byte budget (with or without a window), the index never
    /// holds more than the budget, and a duplicate names only a message
    /// that was indexed when it was decided: eviction by bytes, like
    /// eviction by count, forgets everything of the evicted.
    #[test]
    fn a_byte_budget_holds_and_never_reports_an_evicted_message(
        texts in prop::collection::vec(texts(), 1..6),
        windowed in any::<bool>(),
        (measure, shingling) in measures(),
    ) {
        // Many short texts and a budget that holds a few dozen of them: the
        // postings table alone takes a third of it.
        let budget = 24 << 10;
        let mut d = Deduper::new(EngineConfig {
            capacity: NonZeroUsize::new(1000).unwrap(),
            measure,
            shingling,
            window: if windowed { dedup_stream::engine::config::Window::from_millis(50) } else { None },
            max_index_bytes: NonZeroUsize::new(budget),
            ..EngineConfig::default()
        })
        .unwrap();
        let preparer = d.preparer().clone();
        let mut scratch = dedup_stream::engine::Scratch::default();
        for (i, text) in texts.iter().flatten().enumerate() {
            let indexed: Vec<MessageId> =
                d.index().iter_lru_first().map(|e| e.id.clone()).collect();
            let sketch = preparer.sketch(text, &[], &mut scratch);
            let verdict = d.check_at(MessageId::Integer(i as u64), sketch.as_sketch(), i as i64);
            if let Verdict::Duplicate(m) = verdict {
                prop_assert!(indexed.contains(&m.of), "{:?} not in {:?}", m.of, indexed);
            }
            prop_assert!(d.index().bytes() <= budget || d.index().len() <= 1);
        }
    }

    /// A deleted id is never named as `duplicate_of` afterwards, whatever
    /// comes later (copies of it included), under every measure and
    /// capacity, and a removal says whether the index held it.
    #[test]
    fn a_deleted_id_is_never_named_afterwards(
        texts in texts(),
        deletions in prop::collection::vec((1usize..60, any::<prop::sample::Index>()), 0..20),
        capacity in 2usize..80,
        (measure, shingling) in measures(),
    ) {
        let mut d = engine(capacity, measure, shingling);
        let mut deleted = std::collections::HashSet::new();
        for (i, text) in texts.iter().enumerate() {
            for (at, which) in &deletions {
                if *at == i {
                    // One of the ids seen so far, as a string or a number.
                    let n = which.index(i) as u64;
                    let held = d.index().iter_lru_first().any(|e| e.id == MessageId::Integer(n));
                    let removed = d.remove(&MessageId::DigitString(n));
                    prop_assert_eq!(removed > 0, held);
                    prop_assert!(d.index().iter_lru_first().all(|e| e.id != MessageId::Integer(n)));
                    deleted.insert(MessageId::Integer(n));
                }
            }
            let verdict = d.check_text(MessageId::Integer(i as u64), text);
            prop_assert!(d.index().len() <= capacity);
            if let Verdict::Duplicate(m) = verdict {
                prop_assert!(!deleted.contains(&m.of), "{} was deleted", m.of);
            }
        }
    }

    /// While a chain stays indexed (nothing is evicted), following
    /// `duplicate_of` from any duplicate ends at a new message, and that
    /// message's id is the duplicate's `cluster`.
    #[test]
    fn duplicate_of_links_end_at_the_cluster(
        texts in texts(),
        (measure, shingling) in measures(),
    ) {
        let mut d = engine(1000, measure, shingling);
        let verdicts: Vec<Verdict> = texts
            .iter()
            .enumerate()
            .map(|(i, text)| d.check_text(MessageId::Integer(i as u64), text))
            .collect();
        prop_assert_eq!(d.index().evictions(), 0);
        for verdict in &verdicts {
            let Verdict::Duplicate(m) = verdict else { continue };
            let mut at = m.of.clone();
            // Each link goes to an earlier message, so the walk ends.
            loop {
                let MessageId::Integer(n) = at else {
                    unreachable!("ids are integers")
                };
                match &verdicts[n as usize] {
                    Verdict::Duplicate(earlier) => at = earlier.of.clone(),
                    _ => break,
                }
            }
            prop_assert_eq!(&at, &m.cluster);
        }
    }

    /// The index never holds more than its capacity, and a reported
    /// duplicate always names a message the index held when the decision
    /// was made, so an evicted message is never reported.
    #[test]
    fn capacity_holds_and_evicted_messages_are_never_reported(
        texts in texts(),
        capacity in 1usize..8,
        (measure, shingling) in measures(),
    ) {
        let mut d = engine(capacity, measure, shingling);
        for (i, text) in texts.iter().enumerate() {
            let indexed: Vec<MessageId> = d.index().iter_lru_first().map(|e| e.id.clone()).collect();
            let verdict = d.check_text(MessageId::Integer(i as u64), text);
            prop_assert!(d.index().len() <= capacity);
            if let Verdict::Duplicate(m) = verdict {
                prop_assert!(indexed.contains(&m.of), "reported {} was not indexed", m.of);
                // The threshold, or below it by the margin a lone recent
                // match is allowed (under words:1-2).
                let bar = if d.config().lone_reach() > 0 {
                    d.config().threshold - RECENT_MARGIN
                } else {
                    d.config().threshold
                };
                prop_assert!(m.similarity >= bar && m.similarity <= 1.0);
                if let MessageId::Integer(of) = m.of {
                    prop_assert!(of < i as u64, "a message is a duplicate of an earlier one");
                }
            }
        }
        let expected_evictions = d.index().evictions() as usize;
        prop_assert!(expected_evictions + d.index().len() <= texts.len());
    }

    /// A run saved to a state file at any point and loaded into a new
    /// engine decides every later message exactly as the run that was never
    /// stopped: the sequence numbers, the recency order, which messages a
    /// full bucket holds and the window's clock all come back. This is what
    /// lets a fleet's worker start from a snapshot (crate::redis_index).
    #[test]
    fn a_state_file_resumes_the_run_exactly(
        texts in texts(),
        cut in 0usize..60,
        capacity in 1usize..12,
        max_bucket in 1usize..4,
        (measure, shingling) in measures(),
        window in prop::option::of(1u64..40),
    ) {
        let config = EngineConfig {
            capacity: NonZeroUsize::new(capacity).unwrap(),
            max_bucket,
            measure,
            shingling,
            window: window.and_then(dedup_stream::engine::config::Window::from_millis),
            ..EngineConfig::default()
        };
        let mut whole = Deduper::new(config.clone()).unwrap();
        let mut resumed = Deduper::new(config.clone()).unwrap();
        let cut = cut.min(texts.len());
        let mut scratch = dedup_stream::engine::Scratch::default();
        let mut check = |d: &mut Deduper, i: usize, text: &str| {
            let sketch = d.preparer().sketch(text, &[], &mut scratch);
            // Times that go back now and then, so the window's clock matters.
            let time = (i as i64 * 7) % 50 + i as i64;
            d.check_at(MessageId::Integer(i as u64), sketch.as_sketch(), time)
        };
        for (i, text) in texts[..cut].iter().enumerate() {
            check(&mut whole, i, text);
            check(&mut resumed, i, text);
        }
        let bytes = dedup_stream::state::snapshot::encode(&resumed);
        let mut resumed = Deduper::new(config).unwrap();
        dedup_stream::state::snapshot::decode_into(&bytes, &mut resumed).unwrap();
        for (i, text) in texts.iter().enumerate().skip(cut) {
            let expected = check(&mut whole, i, text);
            let got = check(&mut resumed, i, text);
            prop_assert_eq!(&got, &expected, "message {} after a cut at {}", i, cut);
        }
        prop_assert_eq!(dedup_stream::state::snapshot::encode(&resumed), dedup_stream::state::snapshot::encode(&whole));
    }

    /// A text seen again while its first copy is indexed is always a
    /// duplicate of it, with similarity 1, unless nothing of it is left to
    /// compare once normalised (then both are new).
    #[test]
    fn identical_texts_are_always_duplicates(
        text in "\\PC{0,80}",
        (measure, shingling) in measures(),
    ) {
        let mut d = engine(4, measure, shingling);
        prop_assert_eq!(d.check_text(MessageId::Integer(1), &text), Verdict::New);
        let empty = d
            .preparer()
            .sketch(&text, &[], &mut dedup_stream::engine::Scratch::default())
            .shingles
            .is_empty();
        if empty {
            prop_assert_eq!(d.check_text(MessageId::Integer(2), &text), Verdict::New);
            return Ok(());
        }
        match d.check_text(MessageId::Integer(2), &text) {
            Verdict::Duplicate(m) => {
                prop_assert_eq!(m.of, MessageId::Integer(1));
                prop_assert_eq!(m.similarity, 1.0);
            }
            other => prop_assert!(false, "identical text not caught: {:?}: {:?}", text, other),
        }
    }

    /// Through the whole pipeline: one output line per valid input line, in
    /// input order, and the same bytes whatever the thread count, batch size
    /// or queue size.
    #[test]
    fn pipeline_output_is_one_line_per_valid_line_and_independent_of_threading(
        texts in texts(),
        invalid_every in 2usize..9,
    ) {
        let mut input = Vec::new();
        let mut valid = 0;
        for (i, text) in texts.iter().enumerate() {
            if i % invalid_every == 0 {
                input.extend_from_slice(b"{\"id_str\":\"no text here\"}\n");
            } else {
                valid += 1;
                let line = serde_json::json!({"id_str": i.to_string(), "text": text});
                input.extend_from_slice(line.to_string().as_bytes());
                input.push(b'\n');
            }
        }
        let mut outputs = Vec::new();
        for (threads, batch_lines, queue_batches) in [(1, 1, 1), (4, 3, 1), (2, 512, 1024)] {
            outputs.push(run_pipeline(&input, threads, batch_lines, queue_batches));
        }
        let first = &outputs[0];
        prop_assert!(outputs.iter().all(|o| o == first));
        let lines: Vec<&[u8]> = first.split(|&b| b == b'\n').filter(|l| !l.is_empty()).collect();
        prop_assert_eq!(lines.len(), valid);
        let ids: Vec<u64> = lines
            .iter()
            .map(|l| serde_json::from_slice::<serde_json::Value>(l).unwrap()["id_str"].as_str().unwrap().parse().unwrap())
            .collect();
        prop_assert!(ids.windows(2).all(|w| w[0] < w[1]), "input order");
    }
}

fn run_pipeline(input: &[u8], threads: usize, batch_lines: usize, queue_batches: usize) -> Vec<u8> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let output = SharedBuf::default();
    let config = PipelineConfig {
        threads: NonZeroUsize::new(threads).unwrap(),
        batch_lines,
        queue_batches,
        ..PipelineConfig::default()
    };
    let deduper = Deduper::new(EngineConfig::default()).unwrap();
    runtime
        .block_on(pipeline::run(
            config,
            deduper.preparer().clone(),
            deduper,
            Cursor::new(input.to_vec()),
            output.clone(),
            std::future::pending(),
        ))
        .unwrap();
    output.0.lock().unwrap().clone()
}

/// A `Write` whose bytes the test can read after the pipeline drops it.
#[derive(Clone, Default)]
struct SharedBuf(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for SharedBuf {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// One message of a batch for [`batches_are_decided_alike_on_any_number_of_threads`].
struct Planned {
    id: MessageId,
    sketch: dedup_stream::SketchBuf,
    op: dedup_stream::engine::Op,
    time: i64,
}

/// Decides `planned` in batches of the given sizes on `threads` threads:
/// the verdicts, the final state, how many batches were counted ahead and
/// how many were large enough to be.
fn decide_in_batches(
    config: &EngineConfig,
    threads: usize,
    planned: &[Planned],
    sizes: &[usize],
) -> (Vec<Verdict>, Vec<u8>, u64, u64) {
    use dedup_stream::engine::{Ask, IndexStore};
    let mut d = Deduper::new(config.clone()).unwrap();
    d.set_threads(NonZeroUsize::new(threads).unwrap());
    let mut verdicts = Vec::new();
    let mut large = 0;
    let mut rest = planned;
    for &size in sizes.iter().cycle() {
        if rest.is_empty() {
            break;
        }
        let (batch, later) = rest.split_at(size.clamp(1, rest.len()));
        rest = later;
        large += u64::from(batch.len() >= dedup_stream::engine::overlaps::MIN_PARALLEL_BATCH);
        let asks: Vec<Ask<'_>> = batch
            .iter()
            .map(|p| Ask {
                id: &p.id,
                sketch: p.sketch.as_sketch(),
                op: p.op,
                token: None,
                time: p.time,
            })
            .collect();
        d.decide(&asks, &mut verdicts).unwrap();
    }
    let counted = d.stats().times.map_or(0, |t| t.counted_batches);
    (
        verdicts,
        dedup_stream::state::snapshot::encode(&d),
        counted,
        large,
    )
}

/// The messages of `texts` as [`decide_in_batches`] takes them: checks,
/// with `queries` in seven queries instead, and with `removals` every
/// ninth a removal of an earlier message (a delete notice: its slot goes
/// on the free list mid-batch); times that go back and forth.
fn plan(config: &EngineConfig, texts: &[String], queries: u32, removals: bool) -> Vec<Planned> {
    let d = Deduper::new(config.clone()).unwrap();
    let mut scratch = dedup_stream::engine::Scratch::default();
    texts
        .iter()
        .enumerate()
        .map(|(i, text)| {
            if removals && i % 9 == 8 {
                return Planned {
                    id: MessageId::Integer(i as u64 / 2),
                    sketch: dedup_stream::SketchBuf::default(),
                    op: dedup_stream::engine::Op::Remove,
                    time: 0,
                };
            }
            Planned {
                id: MessageId::Integer(i as u64),
                sketch: d.preparer().sketch(text, &[], &mut scratch),
                op: if queries > 0 && i as u32 % 7 < queries {
                    dedup_stream::engine::Op::Query
                } else {
                    dedup_stream::engine::Op::Check
                },
                time: (i as i64 * 7) % 50 + i as i64,
            }
        })
        .collect()
}

/// The configuration the batch properties draw: the index's capacity and
/// bucket cap, the measure and shingling, a window (milliseconds) and a
/// byte budget, if any.
fn batch_config(
    capacity: usize,
    max_bucket: usize,
    measure: Measure,
    shingling: Shingling,
    window: Option<u64>,
    max_bytes: Option<usize>,
) -> EngineConfig {
    EngineConfig {
        capacity: NonZeroUsize::new(capacity).unwrap(),
        max_bucket,
        measure,
        shingling,
        window: window.and_then(dedup_stream::engine::config::Window::from_millis),
        max_index_bytes: max_bytes.and_then(NonZeroUsize::new),
        ..EngineConfig::default()
    }
}

/// Texts of a few words from a small vocabulary, many near one another:
/// retweet marks, templates, repeats.
fn batch_texts() -> impl Strategy<Value = Vec<String>> {
    prop::collection::vec(
        prop::collection::vec(
            prop::sample::select(vec![
                "rust", "conf", "keynote", "flood", "highway", "closed", "the", "a", "of", "RT",
                "@bob:", "#news", "東京", "雨", "…", "now", "live", "news",
            ]),
            0..14,
        )
        .prop_map(|w| w.join(" ")),
        64..400,
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// A batch decided with its overlaps counted ahead on several threads
    /// (engine::overlaps) gets the verdicts of the one-thread decision,
    /// message for message, and leaves the same index, whatever the batch
    /// does to it meanwhile: evictions at a small capacity that free slots
    /// and fill them again, full buckets, a window that expires messages,
    /// a byte budget, queries among the checks, removals.
    #[test]
    fn batches_are_decided_alike_on_any_number_of_threads(
        texts in batch_texts(),
        sizes in prop::collection::vec(1usize..300, 1..4),
        capacity in 1usize..80,
        max_bucket in 1usize..6,
        (measure, shingling) in measures(),
        window in prop::option::of(1u64..60),
        max_bytes in prop::option::of(2_000usize..20_000),
        queries in 0u32..4,
        removals in any::<bool>(),
        threads in dedup_stream::engine::overlaps::MIN_THREADS..6,
    ) {
        let config = batch_config(capacity, max_bucket, measure, shingling, window, max_bytes);
        let planned = plan(&config, &texts, queries, removals);
        let (serial, serial_state, none, _) = decide_in_batches(&config, 1, &planned, &sizes);
        prop_assert_eq!(none, 0, "one thread counts nothing ahead");
        let (parallel, parallel_state, counted, large) =
            decide_in_batches(&config, threads, &planned, &sizes);
        prop_assert_eq!(counted, large, "batches of {:?}", sizes);
        for (at, (p, s)) in parallel.iter().zip(&serial).enumerate() {
            prop_assert_eq!(p, s, "message {}", at);
        }
        prop_assert_eq!(parallel.len(), serial.len());
        prop_assert!(parallel_state == serial_state, "the indexes differ");
    }

    /// A batch decided on one thread, whose messages have their candidates
    /// walked a few places ahead of their decisions and mended for what
    /// the decisions in between did (engine::ahead), gets the verdicts of
    /// batches of one message, which walk at the decision: whatever the
    /// messages in between do to the index (inserts under the same keys,
    /// evictions at a small capacity that fill freed slots again, full
    /// buckets, a window that expires messages, a byte budget, queries,
    /// removals, messages sent again), and leaves the same index.
    #[test]
    fn candidates_walked_ahead_are_those_walked_at_the_decision(
        texts in batch_texts(),
        sizes in prop::collection::vec(7usize..300, 1..4),
        capacity in 1usize..80,
        max_bucket in 1usize..6,
        (measure, shingling) in prop_oneof![
            measures(),
            Just((Measure::Jaccard, EngineConfig::default().shingling)),
            Just((Measure::Containment, EngineConfig::default().shingling)),
        ],
        window in prop::option::of(1u64..60),
        max_bytes in prop::option::of(2_000usize..20_000),
        queries in 0u32..4,
        removals in any::<bool>(),
    ) {
        let config = batch_config(capacity, max_bucket, measure, shingling, window, max_bytes);
        let mut planned = plan(&config, &texts, queries, removals);
        // Now and then an earlier message sent again, text and id.
        let d = Deduper::new(config.clone()).unwrap();
        let mut scratch = dedup_stream::engine::Scratch::default();
        for i in (10..planned.len()).step_by(11) {
            planned[i].id = MessageId::Integer(i as u64 / 2);
            planned[i].sketch = d.preparer().sketch(&texts[i / 2], &[], &mut scratch);
        }
        let (walked, walked_state, _, _) = decide_in_batches(&config, 1, &planned, &sizes);
        let (alone, alone_state, _, _) = decide_in_batches(&config, 1, &planned, &[1]);
        for (at, (w, a)) in walked.iter().zip(&alone).enumerate() {
            prop_assert_eq!(w, a, "message {}", at);
        }
        prop_assert_eq!(walked.len(), alone.len());
        prop_assert!(walked_state == alone_state, "the indexes differ");
    }
}

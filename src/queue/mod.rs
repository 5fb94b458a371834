//! The queue runtime: what every queue worker does between its broker's
//! client and the index store, once, with only the broker's own steps in
//! an [`Adapter`].
//!
//! ```text
//!  fetch ──▶ prepare ──▶ decide (one store call) ──▶ publish ──┐   up to --in-flight batches
//!    ▲      (--threads)                                        ▼   fetched, not yet acknowledged
//!    └───────────────── acknowledge, oldest first ◀──────── stored?
//! ```
//!
//! The runtime fetches a batch and hands it to the preparation threads
//! ([`preparing`]: decoding and sketching, the engine's pure work, as the
//! filter spreads it over every core), then fetches the next while they
//! work. It takes the batches back prepared in the order fetched, decides
//! each in one call to the store ([`batch::decide`], so the store has one
//! owner and batches are decided in the order they were fetched), and
//! hands the outputs to the broker without waiting for them to be stored.
//! It goes on fetching while the broker stores the earlier ones. Once
//! `in_flight` batches are held (preparing, or published and
//! unacknowledged), or when nothing new comes, it waits for the *oldest*
//! batch's outputs to be stored and only then acknowledges that batch's
//! inputs. So:
//!
//! - inputs are acknowledged in the order they were fetched, each only
//!   after its own outputs and those of every batch before it are stored:
//!   an acknowledgement (a Kafka commit, which covers every earlier offset)
//!   never passes an output the broker has not stored;
//! - at most `in_flight` batches are held (and what an adapter reads ahead
//!   of [`Adapter::fetch`]: up to four batches, for Redis Streams), so memory stays
//!   bounded, and a worker killed loses nothing more than those: they are delivered again
//!   and answered from the memo (or the index's repeat rule), so their
//!   outputs are the first ones byte for byte;
//! - `in_flight = 1` is the stop-and-wait of before: each batch is stored
//!   and acknowledged before the next is fetched;
//! - the outputs do not depend on the number of preparation threads, only
//!   how far ahead batches are fetched does.
//!
//! Acknowledgements may complete later (Kafka commits asynchronously):
//! [`Adapter::settled`] reports them, and only then are their tokens
//! forgotten by the store, so an input whose acknowledgement failed keeps
//! its first verdict when it comes again. A stop request finishes every
//! batch in flight, then [`Adapter::finish`] waits for the
//! acknowledgements still under way.
//!
//! The folder holds the runtime and one file per broker:
//! [`redis_streams`] (`consume --redis`), [`nats`] (`consume --nats`) and
//! [`kafka`] (`consume --kafka`), with what they share: [`batch`] (a
//! fetched batch made lines, prepared, decided, each payload's outcome),
//! [`preparing`] (the preparation threads) and
//! [`broker`] (size limits and outage reports at the broker's door). It
//! may import every layer below it (the engine, the wire format, the state
//! files, the pipeline's pieces, the index in Redis, the metrics); only the
//! binary imports it.

pub mod batch;
pub mod broker;
pub mod kafka;
pub mod kafka_group;
mod memo;
pub mod nats;
mod nats_acks;
pub mod preparing;
pub mod redis_streams;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::engine::{IndexStore, Preparer};
use crate::error::StoreError;
use crate::metrics::Metrics;
use crate::pipeline::Emit;
use crate::wire::record::{Decoder, FieldSpec};
use batch::{DecidedBatch, Lines, Tally};
use preparing::Preparers;

pub use memo::Memo;

/// Default batches published and not yet acknowledged (`--in-flight`).
pub const DEFAULT_IN_FLIGHT: usize = 16;
/// How often progress is logged.
const PROGRESS_EVERY: Duration = Duration::from_secs(10);

/// One input as fetched.
pub trait Input {
    /// Its payload; `None`: it has none (an entry without the field).
    fn payload(&self) -> Option<&[u8]>;
    /// Its redelivery token: the same every time the broker delivers it,
    /// unique among the inputs the store's memo keeps.
    fn token(&self) -> &[u8];
}

/// The inputs whose acknowledgement completed (or failed) since the last
/// report.
#[derive(Debug, Default)]
pub struct Settled {
    /// Tokens of inputs now acknowledged for good (forgotten by the store).
    pub acknowledged: Vec<Vec<u8>>,
    /// Inputs whose acknowledgement failed: they will be delivered again.
    pub failed: u64,
    /// Inputs acknowledged whose tokens the store keeps all the same: the
    /// broker may yet lose the acknowledgement (Redis restarted since it
    /// answered), and an input delivered again must find its verdict.
    pub kept: u64,
}

/// A broker's part of a worker: how it fetches, publishes, learns that
/// outputs are stored, and acknowledges.
pub trait Adapter {
    /// One input.
    type Input: Input;
    /// A batch's outputs handed to the broker, not yet known stored.
    type Pending;
    /// Why the worker stops.
    type Error: From<StoreError>;

    /// Up to `max` inputs: what is ready now, else what comes within
    /// `wait` (none at all is an empty batch, not an error).
    fn fetch(&mut self, max: usize, wait: Duration) -> Result<Vec<Self::Input>, Self::Error>;

    /// Hands the outputs and dead letters of a decided batch to the broker
    /// without waiting for them to be stored.
    fn publish(
        &mut self,
        inputs: &[Self::Input],
        decided: &DecidedBatch,
    ) -> Result<Self::Pending, Self::Error>;

    /// Waits until every output of `pending` is stored (retrying what the
    /// broker refused); an error leaves the batch unacknowledged.
    fn stored(&mut self, pending: Self::Pending) -> Result<(), Self::Error>;

    /// Acknowledges `inputs`, whose outputs (and every earlier batch's)
    /// are stored. May complete later: see [`Adapter::settled`].
    fn acknowledge(&mut self, inputs: Vec<Self::Input>) -> Result<(), Self::Error>;

    /// Acknowledgements completed or failed since the last call.
    fn settled(&mut self) -> Settled;

    /// At a stop, with nothing in flight: waits (a bounded time) for the
    /// acknowledgements still under way.
    fn finish(&mut self) -> Result<(), Self::Error>;

    /// At a stop: the inputs the adapter took from the broker ahead of
    /// [`Adapter::fetch`], which the runtime decides and acknowledges
    /// before it stops (none by default).
    fn take_read_ahead(&mut self) -> Result<Vec<Self::Input>, Self::Error> {
        Ok(Vec::new())
    }
}

/// How the runtime runs.
#[derive(Clone, Copy, Debug)]
pub struct Settings {
    /// Inputs fetched at a time.
    pub batch: usize,
    /// Batches published and not yet acknowledged, at most (at least 1).
    pub in_flight: usize,
    /// Longest payload decided (`--max-line-bytes`).
    pub max_line_bytes: usize,
    /// Longest wait for an input when none is ready and nothing is in
    /// flight, before looking around (stop requests, progress).
    pub idle_wait: Duration,
    /// Decide nothing: every batch goes to [`Adapter::publish`] undecided
    /// ([`DecidedBatch::undecided`]), and the adapter passes its inputs
    /// on as they came. The benchmarks' relay: the broker's own limit with
    /// this client, batching and ordering, without the engine.
    pub relay: bool,
    /// Threads that decode and sketch the batches fetched while this one
    /// decides, publishes and acknowledges; 0 (or `in_flight` 1: nothing
    /// to overlap): this one does it all.
    pub prepare_threads: usize,
}

/// What every worker is told whatever its broker: the `consume` options
/// that are not the broker's.
#[derive(Clone, Debug)]
pub struct Options {
    /// Which verdicts are written (every input is acknowledged).
    pub emit: Emit,
    /// Where the id and text are in a message.
    pub fields: FieldSpec,
    /// Inputs fetched at a time.
    pub batch: usize,
    /// Batches decided and not yet acknowledged, at most (`--in-flight`;
    /// 1: each batch acknowledged before the next is fetched).
    pub in_flight: usize,
    /// Threads that prepare the batches fetched (`--threads`): see
    /// [`Settings::prepare_threads`].
    pub prepare_threads: usize,
    /// Pass every input on as it came, deciding nothing (the benchmarks'
    /// relay, `--relay`): see [`Settings::relay`].
    pub relay: bool,
}

impl Options {
    /// The runtime's settings for these options, with the longest payload
    /// decided and the longest idle wait of the broker's worker.
    pub fn settings(&self, max_line_bytes: usize, idle_wait: Duration) -> Settings {
        Settings {
            batch: self.batch,
            in_flight: self.in_flight,
            max_line_bytes,
            idle_wait,
            relay: self.relay,
            prepare_threads: self.prepare_threads,
        }
    }
}

/// What the runtime did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Inputs fetched and decided.
    pub read: u64,
    /// Inputs acknowledged.
    pub acknowledged: u64,
    /// Inputs whose acknowledgement failed (delivered again).
    pub unacknowledged: u64,
    /// The verdicts of the inputs decided.
    pub verdicts: Tally,
}

/// The engine's half of a worker: how payloads become messages, and the
/// store that decides them.
pub struct Engine<'a, S: ?Sized> {
    /// Prepares messages (shingles, sketches).
    pub preparer: &'a Preparer,
    /// Finds the id and text in a payload.
    pub decoder: &'a Decoder,
    /// Decides; forgets tokens once their inputs are acknowledged.
    pub store: &'a mut S,
}

/// A batch published and not yet acknowledged.
struct Flight<A: Adapter> {
    inputs: Vec<A::Input>,
    pending: A::Pending,
}

/// Runs a worker until `stop` is set (then finishes what is in flight) or
/// an error: fetches, prepares (on `settings.prepare_threads` threads),
/// decides and publishes batch after batch with up to `settings.in_flight`
/// of them held, and acknowledges each in order once stored.
pub fn run<A: Adapter, S: IndexStore + ?Sized>(
    adapter: &mut A,
    engine: Engine<'_, S>,
    settings: Settings,
    stop: &AtomicBool,
    metrics: &Metrics,
) -> Result<Counts, A::Error> {
    let Engine {
        preparer,
        decoder,
        store,
    } = engine;
    std::thread::scope(|scope| {
        // One batch held at a time leaves nothing to overlap: a thread
        // would only add a hand-off.
        let threads = if settings.relay || settings.in_flight <= 1 {
            0
        } else {
            settings.prepare_threads
        };
        let mut runtime = Runtime {
            adapter,
            store,
            preparers: Preparers::start(scope, threads, preparer, decoder),
            settings: Settings {
                in_flight: settings.in_flight.max(1),
                batch: settings.batch.max(1),
                ..settings
            },
            metrics,
            flight: VecDeque::new(),
            counts: Counts::default(),
        };
        runtime.pump(stop)?;
        // Stopping: every batch fetched is decided, published, stored and
        // acknowledged first, with what the adapter read ahead.
        let ahead = runtime.adapter.take_read_ahead()?;
        if !ahead.is_empty() {
            runtime.fetched(ahead)?;
        }
        while runtime.publish_next(true)? {}
        while !runtime.flight.is_empty() {
            runtime.retire()?;
        }
        runtime.adapter.finish()?;
        runtime.settle();
        Ok(runtime.counts)
    })
}

/// The runtime's state.
struct Runtime<'r, 's, A: Adapter, S: ?Sized> {
    adapter: &'r mut A,
    store: &'r mut S,
    /// The threads that prepare what is fetched; each batch carries its
    /// inputs.
    preparers: Preparers<'s, Vec<A::Input>>,
    settings: Settings,
    metrics: &'r Metrics,
    flight: VecDeque<Flight<A>>,
    counts: Counts,
}

impl<A: Adapter, S: IndexStore + ?Sized> Runtime<'_, '_, A, S> {
    /// Fetches, prepares, decides and publishes until `stop` is set.
    fn pump(&mut self, stop: &AtomicBool) -> Result<(), A::Error> {
        let started = Instant::now();
        let mut last_report = Instant::now();
        // Batches prepared ahead of the one to decide: one a thread keeps
        // every thread busy.
        let ahead = self.preparers.threads().max(1);
        while !stop.load(Ordering::Relaxed) {
            if last_report.elapsed() >= PROGRESS_EVERY {
                last_report = Instant::now();
                let c = self.counts;
                tracing::info!(
                    read = c.read,
                    per_second = (c.read as f64 / started.elapsed().as_secs_f64()).round(),
                    acknowledged = c.acknowledged,
                    in_flight = self.flight.len() + self.preparers.len(),
                    "consuming"
                );
            }
            // What is prepared already is decided and published, in order.
            while self.publish_next(false)? {}
            // A batch fetched is held until acknowledged, prepared or not.
            let held = self.preparers.len() + self.flight.len();
            if held >= self.settings.in_flight {
                // No room: the oldest batch moves on.
                if self.flight.is_empty() {
                    self.publish_next(true)?;
                } else {
                    self.retire()?;
                }
                continue;
            }
            if self.preparers.len() >= ahead {
                self.publish_next(true)?;
                continue;
            }
            // With batches held, only what is ready now: waiting for more
            // would hold their acknowledgements back.
            let wait = if held == 0 {
                self.settings.idle_wait
            } else {
                Duration::ZERO
            };
            let inputs = self.adapter.fetch(self.settings.batch, wait)?;
            self.settle();
            if inputs.is_empty() {
                if !self.publish_next(true)? && !self.flight.is_empty() {
                    self.retire()?;
                }
                continue;
            }
            self.fetched(inputs)?;
        }
        Ok(())
    }

    /// Counts a batch fetched and hands it to the preparation threads (a
    /// relay publishes it at once, undecided).
    fn fetched(&mut self, inputs: Vec<A::Input>) -> Result<(), A::Error> {
        let n = inputs.len() as u64;
        self.counts.read += n;
        self.metrics.queue_read.fetch_add(n, Ordering::Relaxed);
        if self.settings.relay {
            let pending = self.adapter.publish(&inputs, &DecidedBatch::undecided())?;
            self.flight.push_back(Flight { inputs, pending });
            return Ok(());
        }
        let payloads: Vec<Option<&[u8]>> = inputs.iter().map(Input::payload).collect();
        let lines = Lines::new(&payloads, self.settings.max_line_bytes);
        drop(payloads);
        self.preparers.give(inputs, lines);
        Ok(())
    }

    /// Decides the oldest batch given to the preparation threads in one
    /// store call and hands its outputs to the broker; `wait`: until it is
    /// prepared, else only if it is already. False: none was.
    fn publish_next(&mut self, wait: bool) -> Result<bool, A::Error> {
        let Some((inputs, prepared)) = self.preparers.take(wait) else {
            return Ok(false);
        };
        let tokens: Vec<&[u8]> = inputs.iter().map(Input::token).collect();
        let (decided, tally) = batch::decide(&mut *self.store, prepared, &tokens, self.metrics)?;
        drop(tokens);
        self.counts.verdicts.add(tally);
        let pending = self.adapter.publish(&inputs, &decided)?;
        self.flight.push_back(Flight { inputs, pending });
        Ok(true)
    }

    /// Waits for the oldest batch's outputs to be stored, then
    /// acknowledges its inputs.
    fn retire(&mut self) -> Result<(), A::Error> {
        if let Some(Flight { inputs, pending }) = self.flight.pop_front() {
            self.adapter.stored(pending)?;
            self.adapter.acknowledge(inputs)?;
            self.settle();
        }
        Ok(())
    }

    /// Takes the acknowledgements completed: their tokens are forgotten.
    fn settle(&mut self) {
        let settled = self.adapter.settled();
        self.counts.acknowledged += settled.kept;
        self.metrics
            .queue_acked
            .fetch_add(settled.kept, Ordering::Relaxed);
        if !settled.acknowledged.is_empty() {
            let n = settled.acknowledged.len() as u64;
            self.counts.acknowledged += n;
            self.metrics.queue_acked.fetch_add(n, Ordering::Relaxed);
            let tokens: Vec<&[u8]> = settled.acknowledged.iter().map(Vec::as_slice).collect();
            self.store.forget(&tokens);
        }
        self.counts.unacknowledged += settled.failed;
    }
}

#[cfg(test)]
mod tests {
    //! The ordering logic against a broker double that records what
    //! happens when; the brokers themselves are tested in tests/kafka.rs.

    use std::cell::RefCell;
    use std::rc::Rc;

    use super::*;
    use crate::engine::Deduper;
    use crate::engine::config::EngineConfig;
    use crate::queue::batch::Payload;
    use crate::wire::record::FieldSpec;

    /// What the double saw, in order.
    #[derive(Clone, Debug, PartialEq, Eq)]
    enum Event {
        Published(u64),
        Stored(u64),
        Acknowledged(u64),
    }

    struct Message {
        payload: Vec<u8>,
        token: Vec<u8>,
        batch: u64,
    }

    impl Input for Message {
        fn payload(&self) -> Option<&[u8]> {
            Some(&self.payload)
        }
        fn token(&self) -> &[u8] {
            &self.token
        }
    }

    /// A broker with `batches` batches of `size` messages; storing batch
    /// `fail_at` fails.
    struct Double {
        batches: u64,
        size: usize,
        fetched: u64,
        events: Rc<RefCell<Vec<Event>>>,
        outputs: Outputs,
        fail_at: Option<u64>,
        stop: Rc<AtomicBool>,
        settled: Settled,
    }

    impl Adapter for Double {
        type Input = Message;
        type Pending = u64;
        type Error = StoreError;

        fn fetch(&mut self, _max: usize, _wait: Duration) -> Result<Vec<Message>, StoreError> {
            if self.fetched == self.batches {
                self.stop.store(true, Ordering::Relaxed);
                return Ok(Vec::new());
            }
            let batch = self.fetched;
            self.fetched += 1;
            Ok((0..self.size)
                .map(|i| Message {
                    payload: format!(
                        r#"{{"id":{},"text":"story {i} of batch {batch} is told here"}}"#,
                        batch * 100 + i as u64 + 1
                    )
                    .into_bytes(),
                    token: format!("{batch}/{i}").into_bytes(),
                    batch,
                })
                .collect())
        }

        fn publish(
            &mut self,
            inputs: &[Message],
            decided: &DecidedBatch,
        ) -> Result<u64, StoreError> {
            let batch = inputs[0].batch;
            for at in 0..inputs.len() {
                if let Payload::Message(message, verdict) = decided.payload(at) {
                    self.outputs.push((batch, decided.tagged(message, verdict)));
                }
            }
            self.events.borrow_mut().push(Event::Published(batch));
            Ok(batch)
        }

        fn stored(&mut self, batch: u64) -> Result<(), StoreError> {
            if self.fail_at == Some(batch) {
                return Err(StoreError::Unavailable("the broker is gone".into()));
            }
            self.events.borrow_mut().push(Event::Stored(batch));
            Ok(())
        }

        fn acknowledge(&mut self, inputs: Vec<Message>) -> Result<(), StoreError> {
            let batch = inputs[0].batch;
            assert!(
                inputs.iter().all(|m| m.batch == batch),
                "one batch at a time"
            );
            self.events.borrow_mut().push(Event::Acknowledged(batch));
            self.settled
                .acknowledged
                .extend(inputs.into_iter().map(|m| m.token));
            Ok(())
        }

        fn settled(&mut self) -> Settled {
            std::mem::take(&mut self.settled)
        }

        fn finish(&mut self) -> Result<(), StoreError> {
            Ok(())
        }
    }

    /// The outputs a run published: (batch, tagged bytes).
    type Outputs = Vec<(u64, Vec<u8>)>;

    /// Runs `batches` batches of 3 through the runtime at `in_flight`,
    /// prepared on the runtime's thread.
    fn run_double(
        batches: u64,
        in_flight: usize,
        fail_at: Option<u64>,
    ) -> (Result<Counts, StoreError>, Vec<Event>, Outputs) {
        run_double_on(batches, in_flight, 0, fail_at)
    }

    /// The same, prepared on `threads` threads.
    fn run_double_on(
        batches: u64,
        in_flight: usize,
        threads: usize,
        fail_at: Option<u64>,
    ) -> (Result<Counts, StoreError>, Vec<Event>, Outputs) {
        let mut deduper = Deduper::new(EngineConfig::default()).unwrap();
        let preparer = deduper.preparer().clone();
        let decoder = Decoder::new(FieldSpec::default());
        let metrics = Metrics::default();
        let stop = Rc::new(AtomicBool::new(false));
        let events = Rc::new(RefCell::new(Vec::new()));
        let mut double = Double {
            batches,
            size: 3,
            fetched: 0,
            events: Rc::clone(&events),
            outputs: Vec::new(),
            fail_at,
            stop: Rc::clone(&stop),
            settled: Settled::default(),
        };
        let settings = Settings {
            batch: 3,
            in_flight,
            max_line_bytes: 1 << 20,
            idle_wait: Duration::ZERO,
            relay: false,
            prepare_threads: threads,
        };
        let engine = Engine {
            preparer: &preparer,
            decoder: &decoder,
            store: &mut deduper,
        };
        let result = run(&mut double, engine, settings, &stop, &metrics);
        let events = events.borrow().clone();
        (result, events, double.outputs)
    }

    /// Fails unless every acknowledgement comes after its batch and every
    /// earlier batch are stored, in the order published.
    fn assert_acknowledged_in_order_after_storage(events: &[Event]) {
        let mut stored = Vec::new();
        let mut acknowledged = Vec::new();
        for event in events {
            match event {
                Event::Published(_) => {}
                Event::Stored(b) => stored.push(*b),
                Event::Acknowledged(b) => {
                    assert!(
                        (0..=*b).all(|earlier| stored.contains(&earlier)),
                        "batch {b} acknowledged before an output up to it was stored: {events:?}"
                    );
                    acknowledged.push(*b);
                }
            }
        }
        let mut sorted = acknowledged.clone();
        sorted.sort_unstable();
        assert_eq!(acknowledged, sorted, "acknowledged in order: {events:?}");
    }

    #[test]
    fn batches_are_pipelined_and_acknowledged_in_order_once_stored() {
        let (result, events, _) = run_double(10, 4, None);
        let counts = result.unwrap();
        assert_eq!(counts.read, 30);
        assert_eq!(counts.acknowledged, 30);
        assert_acknowledged_in_order_after_storage(&events);
        // Four batches were published before the first was awaited.
        assert_eq!(
            &events[..5],
            &[
                Event::Published(0),
                Event::Published(1),
                Event::Published(2),
                Event::Published(3),
                Event::Stored(0)
            ]
        );
        for b in 0..10 {
            assert!(events.contains(&Event::Acknowledged(b)), "{events:?}");
        }
    }

    #[test]
    fn one_in_flight_is_stop_and_wait() {
        // With preparation threads too: one batch held leaves nothing to
        // prepare ahead.
        for threads in [0, 2] {
            let (result, events, _) = run_double_on(3, 1, threads, None);
            assert_eq!(result.unwrap().acknowledged, 9);
            let expected: Vec<Event> = (0..3)
                .flat_map(|b| {
                    [
                        Event::Published(b),
                        Event::Stored(b),
                        Event::Acknowledged(b),
                    ]
                })
                .collect();
            assert_eq!(events, expected, "{threads} threads");
        }
    }

    #[test]
    fn a_batch_not_stored_stops_every_acknowledgement_after_it() {
        let (result, events, _) = run_double(10, 4, Some(2));
        assert!(result.is_err());
        assert_acknowledged_in_order_after_storage(&events);
        let acknowledged: Vec<u64> = events
            .iter()
            .filter_map(|e| match e {
                Event::Acknowledged(b) => Some(*b),
                _ => None,
            })
            .collect();
        assert_eq!(acknowledged, vec![0, 1], "nothing from batch 2 on");
    }

    #[test]
    fn the_depth_changes_nothing_in_the_outputs() {
        let (_, _, one) = run_double(6, 1, None);
        let (_, _, four) = run_double(6, 4, None);
        assert_eq!(one, four);
        assert_eq!(one.len(), 18);
    }

    #[test]
    fn preparing_on_threads_changes_nothing_but_when_batches_are_fetched() {
        let (_, alone_events, alone) = run_double(12, 4, None);
        for threads in [1, 2, 3] {
            let (result, events, outputs) = run_double_on(12, 4, threads, None);
            let counts = result.unwrap();
            assert_eq!((counts.read, counts.acknowledged), (36, 36));
            assert_eq!(outputs, alone, "{threads} threads");
            assert_acknowledged_in_order_after_storage(&events);
            let published: Vec<u64> = events
                .iter()
                .filter_map(|e| match e {
                    Event::Published(b) => Some(*b),
                    _ => None,
                })
                .collect();
            assert_eq!(published, (0..12).collect::<Vec<_>>());
            // Batches fetched and preparing count against the depth: never
            // more than 4 published and unacknowledged.
            let mut open = 0i64;
            for event in &events {
                match event {
                    Event::Published(_) => open += 1,
                    Event::Acknowledged(_) => open -= 1,
                    Event::Stored(_) => {}
                }
                assert!(open <= 4, "{events:?}");
            }
        }
        assert_eq!(alone.len(), 36);
        assert_eq!(alone_events.len(), 36);
    }

    #[test]
    fn a_batch_not_stored_stops_acknowledgements_with_preparation_threads() {
        let (result, events, _) = run_double_on(10, 4, 2, Some(2));
        assert!(result.is_err());
        assert_acknowledged_in_order_after_storage(&events);
        assert!(!events.contains(&Event::Acknowledged(2)), "{events:?}");
    }
}

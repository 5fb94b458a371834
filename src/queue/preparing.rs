//! The queue runtime's preparation threads: batches fetched are decoded
//! and sketched on them while the runtime's thread decides, publishes and
//! acknowledges earlier ones, as the filter prepares on every core while
//! its index decides.
//!
//! Each thread is a lane with a queue in and a queue out. Batch `n` goes
//! to lane `n % lanes`, and a lane answers in the order it was given, so
//! the batches come back in the order they were fetched without a ticket
//! or a reordering buffer; how many are given at a time is the runtime's
//! to bound. Each batch carries a value of the caller's (its inputs),
//! kept here, on the caller's side, and handed back with it. With no lane
//! (`--threads 1`, or no thread could be started) a batch is prepared on
//! the caller's thread when given.

use std::collections::VecDeque;
use std::sync::mpsc;
use std::thread::{Scope, ScopedJoinHandle};

use crate::engine::Preparer;
use crate::queue::batch::{self, Lines, Prepared};
use crate::wire::record::Decoder;

/// The preparation threads of one run, started in a thread scope; `T`:
/// what each batch carries back.
pub struct Preparers<'scope, T> {
    lanes: Vec<Lane<'scope>>,
    /// The lane of the next batch given.
    next_in: usize,
    /// The lane of the next batch taken back.
    next_out: usize,
    /// The batches given and not taken back, in order: what each carries,
    /// and, without lanes, the batch prepared.
    given: VecDeque<(T, Option<Prepared>)>,
    /// Without lanes: how batches are prepared when given.
    inline: (&'scope Preparer, &'scope Decoder),
}

/// One preparation thread and its queues.
struct Lane<'scope> {
    jobs: mpsc::Sender<Lines>,
    done: mpsc::Receiver<Prepared>,
    thread: Option<ScopedJoinHandle<'scope, ()>>,
}

impl<'scope, T> Preparers<'scope, T> {
    /// Starts `threads` preparation threads in `scope` (fewer, with a
    /// warning, if the system refuses some; none prepares on the caller's
    /// thread).
    pub fn start<'env>(
        scope: &'scope Scope<'scope, 'env>,
        threads: usize,
        preparer: &'scope Preparer,
        decoder: &'scope Decoder,
    ) -> Preparers<'scope, T> {
        let mut lanes = Vec::with_capacity(threads);
        for n in 0..threads {
            let (jobs, queued) = mpsc::channel::<Lines>();
            let (answer, done) = mpsc::channel();
            let started = std::thread::Builder::new()
                .name(format!("dedup-prepare-{n}"))
                .spawn_scoped(scope, move || {
                    for lines in queued {
                        // The runtime gone (an error), no one waits.
                        if answer
                            .send(batch::prepare((preparer, decoder), lines))
                            .is_err()
                        {
                            return;
                        }
                    }
                });
            match started {
                Ok(thread) => lanes.push(Lane {
                    jobs,
                    done,
                    thread: Some(thread),
                }),
                Err(e) => {
                    tracing::warn!(
                        started = lanes.len(),
                        wanted = threads,
                        "could not start a preparation thread ({e}): going on with fewer"
                    );
                    break;
                }
            }
        }
        Preparers {
            lanes,
            next_in: 0,
            next_out: 0,
            given: VecDeque::new(),
            inline: (preparer, decoder),
        }
    }

    /// How many threads prepare (0: the caller's thread does).
    pub fn threads(&self) -> usize {
        self.lanes.len()
    }

    /// Batches given and not taken back.
    pub fn len(&self) -> usize {
        self.given.len()
    }

    /// Whether every batch given was taken back.
    pub fn is_empty(&self) -> bool {
        self.given.is_empty()
    }

    /// Hands a batch over to be prepared, with what it carries back.
    pub fn give(&mut self, carried: T, lines: Lines) {
        if self.lanes.is_empty() {
            let prepared = batch::prepare(self.inline, lines);
            self.given.push_back((carried, Some(prepared)));
            return;
        }
        let at = self.next_in;
        self.next_in = (at + 1) % self.lanes.len();
        if self.lanes[at].jobs.send(lines).is_err() {
            self.lost(at);
        }
        self.given.push_back((carried, None));
    }

    /// The next batch in the order given, with what it carries; `wait`:
    /// until it is prepared, else only if it is already. `None`: none was
    /// given (or, not waiting, it is not ready).
    pub fn take(&mut self, wait: bool) -> Option<(T, Prepared)> {
        let prepared = match self.given.front_mut()? {
            (_, prepared @ Some(_)) => prepared.take(),
            (_, None) => {
                let at = self.next_out;
                let done = &self.lanes[at].done;
                let answer = if wait {
                    done.recv().ok()
                } else {
                    match done.try_recv() {
                        Ok(prepared) => Some(prepared),
                        Err(mpsc::TryRecvError::Empty) => return None,
                        Err(mpsc::TryRecvError::Disconnected) => None,
                    }
                };
                let answer = answer.unwrap_or_else(|| self.lost(at));
                self.next_out = (at + 1) % self.lanes.len();
                Some(answer)
            }
        };
        let (carried, _) = self.given.pop_front()?;
        Some((carried, prepared?))
    }

    /// Lane `at`'s thread ended while the runtime still wants it: it
    /// panicked (preparing is pure work, so a bug), and the panic is
    /// raised here, as it would have been had this thread prepared.
    fn lost(&mut self, at: usize) -> ! {
        if let Some(Err(panic)) = self.lanes[at].thread.take().map(ScopedJoinHandle::join) {
            std::panic::resume_unwind(panic);
        }
        panic!("a preparation thread stopped with batches still to prepare");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::Deduper;
    use crate::engine::config::EngineConfig;
    use crate::metrics::Metrics;
    use crate::queue::batch::Payload;
    use crate::queue::batch::decide;
    use crate::wire::record::{FieldSpec, MessageId};

    /// Batch `b` of `n`: one message, id `b + 1`.
    fn lines(b: usize) -> Lines {
        let line = format!(
            r#"{{"id":{},"text":"message number {b} of the run"}}"#,
            b + 1
        );
        Lines::new(&[Some(line.as_bytes())], 1 << 20)
    }

    /// The ids of the batches taken back, given `given` at a time.
    fn ids_taken(threads: usize, batches: usize, given: usize) -> Vec<MessageId> {
        let deduper = Deduper::new(EngineConfig::default()).unwrap();
        let preparer = deduper.preparer().clone();
        let decoder = Decoder::new(FieldSpec::default());
        let mut store = deduper;
        let metrics = Metrics::default();
        let mut ids = Vec::new();
        std::thread::scope(|scope| {
            let mut preparers = Preparers::start(scope, threads, &preparer, &decoder);
            assert_eq!(preparers.threads(), threads);
            assert!(preparers.take(false).is_none() && preparers.take(true).is_none());
            let mut next = 0;
            while ids.len() < batches {
                while next < batches && next < ids.len() + given {
                    preparers.give(next, lines(next));
                    next += 1;
                }
                // Taken back without waiting where ready, else waited for.
                let (carried, prepared) = preparers
                    .take(false)
                    .or_else(|| preparers.take(true))
                    .unwrap();
                assert_eq!(carried, ids.len(), "each batch carries back its own");
                let (decided, _) = decide(&mut store, prepared, &[b"t"], &metrics).unwrap();
                match decided.payload(0) {
                    Payload::Message(message, _) => ids.push(message.id.clone()),
                    other => panic!("{other:?}"),
                }
            }
            assert!(preparers.take(true).is_none());
        });
        ids
    }

    #[test]
    fn batches_come_back_in_the_order_given_whatever_the_threads() {
        let expected: Vec<MessageId> = (1..=20).map(MessageId::Integer).collect();
        for threads in [0, 1, 2, 3] {
            for given in [1, 2, 5] {
                assert_eq!(
                    ids_taken(threads, 20, given),
                    expected,
                    "{threads} threads, {given} given"
                );
            }
        }
    }
}

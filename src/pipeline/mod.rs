//! The stdin-to-stdout flow, and the only module that knows about channels
//! and tasks.
//!
//! ```text
//!  reader thread      tokio: up to `threads` at once     engine thread     writer thread
//!  Read ────lines──▶ [batches] ──spawn_blocking(prepare)──▶ [prepared] ──▶ IndexStore ──▶ [bytes] ──▶ Write
//!            (bounded)            (ordered, in parallel)     (bounded)      (in order)  (bounded)
//! ```
//!
//! - The reader is a plain OS thread doing blocking reads: tokio's stdin can
//!   hold up shutdown, and a blocking thread cannot stall the runtime. It
//!   sends a batch when it is full or when the input has nothing more
//!   buffered, so a slow stream (`tail -f`) is answered line by line.
//! - Preparation (parse, normalise, sketch) is pure; up to `threads` batches
//!   are prepared at once and handed on in input order, so the output is
//!   the same byte for byte whatever the thread count. While the engine's
//!   queue is (all but) full, one fewer: its thread is the one that sets the
//!   pace then, and should not share a core (see `batches_preparing`).
//! - The engine decides on its own thread, in input order. With one thread
//!   it also prepares each batch itself, just before deciding it: `--threads
//!   1` keeps the work on one core, beside a reader and a writer that only
//!   move bytes.
//! - The writer owns the output. It flushes when it has nothing queued:
//!   throughput under load, prompt output when idle. A closed pipe
//!   (`| head`) ends the run quietly.
//!
//! Every channel is bounded, so memory is bounded by the queue sizes, the
//! batch size, the line limit and the index capacity.
//!
//! Shutdown: at the end of input everything drains. When the `shutdown`
//! future completes, reading stops at a line boundary, the lines already read
//! are still decided and written, and the run returns normally.
//!
//! Beside the flow: [`report`] (live counters and invalid lines reported as
//! the run goes), [`stats`] (the end-of-run summary) and [`stream`] (the
//! same engine as an async `Stream`, for programs that embed it). This
//! folder may import the engine, the wire format, the state files and
//! [`crate::error`]; the sidecar and the workers build on it.

pub mod report;
pub mod stats;
pub mod stream;

use std::future::Future;
use std::io::{self, Read, Write};
use std::num::NonZeroUsize;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use futures::future::Either;
use futures::stream::FuturesOrdered;
use futures::{FutureExt, StreamExt};
use tokio::sync::mpsc;

use crate::engine::{Deduper, IndexStore, Preparer, Verdict};
use crate::error::Error;
use crate::pipeline::report::Report;
use crate::pipeline::stats::Summary;
use crate::state::journal::Journal;
use crate::wire::batch::{self, Item, PreparedBatch, RawBatch, RawLine};
use crate::wire::lines::{InPlaceLineReader, LineAt, is_blank};
use crate::wire::record::{Decoder, FieldSpec};

/// Default longest input line, in bytes.
pub const DEFAULT_MAX_LINE_BYTES: usize = 1 << 20;
/// Default lines per batch.
pub const DEFAULT_BATCH_LINES: usize = 512;
/// Bytes read from the input at a time.
const INPUT_BUFFER: usize = 1 << 16;

/// Default batches queued between two stages.
pub const DEFAULT_QUEUE_BATCHES: usize = 4;

/// Which verdicts are written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Emit {
    /// Every valid line, tagged.
    #[default]
    All,
    /// Only lines tagged new: the deduplicated stream.
    New,
    /// Only lines tagged duplicate.
    Duplicates,
}

impl Emit {
    /// Whether a message with this verdict is written. A deletion notice
    /// always is: whoever reads the output must honour it too.
    pub fn wants(self, verdict: &Verdict) -> bool {
        match self {
            Emit::All => true,
            _ if verdict.is_deletion() => true,
            Emit::New => !verdict.is_duplicate(),
            Emit::Duplicates => verdict.is_duplicate(),
        }
    }
}

/// What becomes of a repeat: a message indexed already under its id with
/// the same text (see [`Verdict::Repeat`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Repeats {
    /// Written with its first verdict and `"repeat":true` (then `--emit`
    /// applies as to its first verdict): a retry after a crash loses no
    /// message.
    #[default]
    Tag,
    /// Not written: for merging collections that overlap.
    Drop,
}

impl Repeats {
    /// Whether a message with this verdict is written.
    pub fn wants(self, verdict: &Verdict) -> bool {
        self == Repeats::Tag || !verdict.is_repeat()
    }
}

/// What an invalid line does to the run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum OnInvalid {
    /// Warn on stderr with the line number, skip it, count it.
    #[default]
    Skip,
    /// Stop the run with an error.
    Fail,
}

/// How the flow runs (the engine's own settings are in the [`Preparer`] and
/// the index store).
#[derive(Clone, Debug)]
pub struct PipelineConfig {
    /// Where the id and text are.
    pub fields: FieldSpec,
    /// Longest line read; longer ones are skipped as invalid.
    pub max_line_bytes: usize,
    /// Batches prepared at once; with one, the deciding thread prepares
    /// them itself.
    pub threads: NonZeroUsize,
    /// Lines per batch.
    pub batch_lines: usize,
    /// Batches queued between two stages.
    pub queue_batches: usize,
    /// Which verdicts are written.
    pub emit: Emit,
    /// Whether repeats are written.
    pub repeats: Repeats,
    /// What an invalid line does.
    pub on_invalid: OnInvalid,
    /// Live counters and invalid-line warnings (by default: every invalid
    /// line warned about, by its number).
    pub report: Arc<Report>,
}

impl Default for PipelineConfig {
    fn default() -> Self {
        PipelineConfig {
            fields: FieldSpec::default(),
            max_line_bytes: DEFAULT_MAX_LINE_BYTES,
            threads: std::thread::available_parallelism().unwrap_or(NonZeroUsize::MIN),
            batch_lines: DEFAULT_BATCH_LINES,
            queue_batches: DEFAULT_QUEUE_BATCHES,
            emit: Emit::All,
            repeats: Repeats::Tag,
            on_invalid: OnInvalid::Skip,
            report: Arc::default(),
        }
    }
}

/// The outcome of a run: its summary and the index store, whose index may
/// be saved.
#[derive(Debug)]
pub struct Finished<S = Deduper> {
    /// What the run did.
    pub summary: Summary,
    /// The index store, with everything it indexed.
    pub store: S,
    /// The journal of `--state`, if the run kept one: cut down once the
    /// state file is saved.
    pub journal: Option<Journal>,
    /// When the output closed before the run ended (`| head`): how many
    /// lines it took for sure. Every message decided is indexed all the
    /// same, so the lines past these are in the index (and its state)
    /// without having been written out.
    pub output_closed_after: Option<u64>,
}

/// Runs the filter from `input` to `output` until the input ends or
/// `shutdown` completes: `preparer` sketches, `store` decides. Must be
/// called within a multi-threaded tokio runtime.
pub async fn run<S, R, W>(
    config: PipelineConfig,
    preparer: Preparer,
    store: S,
    input: R,
    output: W,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<Finished<S>, Error>
where
    S: IndexStore + Send + 'static,
    R: Read + Send + 'static,
    W: Write + Send + 'static,
{
    run_with_journal(config, preparer, store, input, output, shutdown, None).await
}

/// [`run`], writing what is indexed to `journal` (see [`crate::state::journal`])
/// before each batch's lines go to the writer, so that a run killed midway
/// holds, at its next start, every message it wrote out. The journal comes
/// back in [`Finished`], for the state file's save to cut it down.
pub async fn run_with_journal<S, R, W>(
    config: PipelineConfig,
    preparer: Preparer,
    store: S,
    input: R,
    output: W,
    shutdown: impl Future<Output = ()> + Send + 'static,
    journal: Option<Journal>,
) -> Result<Finished<S>, Error>
where
    S: IndexStore + Send + 'static,
    R: Read + Send + 'static,
    W: Write + Send + 'static,
{
    let started = Instant::now();
    let queue = config.queue_batches.max(1);
    let stop_reading = Arc::new(AtomicBool::new(false));
    let (raw_tx, mut raw_rx) = mpsc::channel::<RawBatch>(queue);
    let (prepared_tx, prepared_rx) = mpsc::channel::<ToDecide>(queue);
    let (bytes_tx, bytes_rx) = mpsc::channel::<Tagged>(queue);
    // Buffers flow back upstream once used: the engine returns each batch's
    // line buffer to the reader, the writer each output buffer to the engine.
    let (spare_lines_tx, spare_lines_rx) = std::sync::mpsc::channel::<Vec<u8>>();
    let (spare_out_tx, spare_out_rx) = std::sync::mpsc::channel::<Vec<u8>>();

    let reader = {
        let stop = Arc::clone(&stop_reading);
        let (max, batch_lines) = (config.max_line_bytes, config.batch_lines.max(1));
        std::thread::Builder::new()
            .name("dedup-reader".into())
            .spawn(move || read_batches(input, max, batch_lines, &stop, &raw_tx, &spare_lines_rx))
            .map_err(|e| Error::Internal(format!("cannot start the reader thread: {e}")))?
    };
    let writer = std::thread::Builder::new()
        .name("dedup-writer".into())
        .spawn(move || write_batches(output, bytes_rx, &spare_out_tx))
        .map_err(|e| Error::Internal(format!("cannot start the writer thread: {e}")))?;
    let preparer = Arc::new(preparer);
    let decoder = Arc::new(Decoder::new(config.fields.clone()));
    let engine = {
        let policy = (config.emit, config.repeats, config.on_invalid);
        let report = Arc::clone(&config.report);
        let inbox = Inbox {
            batches: prepared_rx,
            preparer: Arc::clone(&preparer),
            decoder: Arc::clone(&decoder),
        };
        tokio::task::spawn_blocking(move || {
            let spares = Spares {
                lines: spare_lines_tx,
                out: spare_out_rx,
            };
            decide_batches(store, inbox, bytes_tx, &spares, policy, &report, journal)
        })
    };

    // Raw batches as a stream that, once `shutdown` fires, stops taking new
    // input but still yields what was already read.
    let mut shutdown = Box::pin(shutdown.fuse());
    let stop = Arc::clone(&stop_reading);
    let raw_batches = futures::stream::poll_fn(move |cx| {
        if !stop.load(Ordering::Relaxed) && Pin::new(&mut shutdown).poll(cx).is_ready() {
            tracing::info!("shutdown requested: finishing the lines already read");
            stop.store(true, Ordering::Relaxed);
            raw_rx.close();
        }
        raw_rx.poll_recv(cx)
    });
    let threads = config.threads.get();
    let inline = threads == 1;
    let prepare = |raw: RawBatch| {
        if inline {
            return Either::Left(futures::future::ready(Ok(ToDecide::Raw(raw))));
        }
        let decoder = Arc::clone(&decoder);
        let preparer = Arc::clone(&preparer);
        Either::Right(
            tokio::task::spawn_blocking(move || batch::prepare(&preparer, &decoder, raw, None))
                .map(|prepared| prepared.map(ToDecide::Prepared)),
        )
    };
    let mut raw_batches = Box::pin(raw_batches);
    let mut preparing = FuturesOrdered::new();
    let mut raw_ended = false;
    // Whether the reader ended the stream itself (end of input or a read
    // error) rather than the engine stopping or a shutdown.
    let mut reader_ended = true;
    loop {
        let queued = prepared_tx.max_capacity() - prepared_tx.capacity();
        let room = batches_preparing(threads, queued, prepared_tx.max_capacity());
        tokio::select! {
            biased;
            Some(batch) = preparing.next(), if !preparing.is_empty() => {
                let batch: Result<ToDecide, tokio::task::JoinError> = batch;
                let batch = batch.map_err(|e| Error::Internal(format!("a preparing task failed: {e}")))?;
                if prepared_tx.send(batch).await.is_err() {
                    reader_ended = false; // The engine stopped (fatal invalid line or closed output).
                    break;
                }
            }
            raw = raw_batches.next(), if !raw_ended && preparing.len() < room => match raw {
                Some(raw) => preparing.push_back(prepare(raw)),
                None => raw_ended = true,
            },
            else => break,
        }
    }
    let reader_ended = reader_ended && !stop_reading.load(Ordering::Relaxed);
    drop(prepared_tx);
    // Dropping the stream drops the raw receiver: a reader blocked on a full
    // queue wakes up and ends.
    drop(preparing);
    drop(raw_batches);
    stop_reading.store(true, Ordering::Relaxed);

    let decided = engine
        .await
        .map_err(|e| Error::Internal(format!("the engine task failed: {e}")));
    // Join the writer before reporting any engine error, so every line
    // decided before it is written out.
    let written = writer
        .join()
        .map_err(|_| Error::Internal("the writer thread panicked".into()));
    let (store, mut summary, journal) = decided??;
    let output_closed_after = written??;
    // A reader that ended the stream has returned (perhaps with a read error
    // to report). Otherwise it may be blocked on an idle input: it is joined
    // only if it is done, or ends with the process.
    if reader_ended || reader.is_finished() {
        reader
            .join()
            .map_err(|_| Error::Internal("the reader thread panicked".into()))??;
    }
    summary.evicted = store.stats().evictions;
    summary.elapsed = started.elapsed();
    Ok(Finished {
        summary,
        store,
        journal,
        output_closed_after,
    })
}

/// How many batches may be prepared at once, with `threads` set and
/// `queued` of the engine's `queue` places taken: `threads`, but one fewer
/// while the queue is full or all but full. The engine's thread then sets
/// the pace, and one preparing thread more would only take turns with it
/// on the cores: on two cores, `--threads 2` ran 5% faster on `dev-200k`
/// and 7% on CrisisLex (`docs/performance.md`). While the engine waits for
/// work, every thread prepares.
fn batches_preparing(threads: usize, queued: usize, queue: usize) -> usize {
    if queued >= queue.saturating_sub(1).max(1) {
        threads.saturating_sub(1).max(1)
    } else {
        threads.max(1)
    }
}

/// Largest buffer handed back for reuse: a batch of very long lines keeps
/// its memory only until it is written.
const RECYCLE_MAX_BYTES: usize = 8 << 20;

/// Hands a used buffer back upstream, emptied, unless it grew too large.
fn give_back(spare: &std::sync::mpsc::Sender<Vec<u8>>, mut buffer: Vec<u8>) {
    if buffer.capacity() <= RECYCLE_MAX_BYTES {
        buffer.clear();
        let _ = spare.send(buffer);
    }
}

/// Hands a batch's line buffer back to the reader, unless it grew too
/// large, as it is: its length is how much of it the reader has written,
/// which it reads into again without first writing zeros over it (see
/// [`InPlaceLineReader`]).
fn give_back_read(spare: &std::sync::mpsc::Sender<Vec<u8>>, buffer: Vec<u8>) {
    if buffer.capacity() <= RECYCLE_MAX_BYTES {
        let _ = spare.send(buffer);
    }
}

/// An empty buffer with room for `bytes`: a used one handed back if there
/// is one, so its pages are mapped already (a fresh megabyte costs page
/// faults and the kernel's zeroing), else a new one. Buffers are only made
/// when none is spare (or the spare one is too small, and is dropped), so
/// there are never more than the pipeline holds.
///
/// A new one has an eighth more room than asked: one made just large
/// enough was grown a little for the next batch, and growing it copied
/// its whole old room (about 15 instructions a message).
fn reuse(spare: &std::sync::mpsc::Receiver<Vec<u8>>, bytes: usize) -> Vec<u8> {
    match spare.try_recv() {
        Ok(buffer) if buffer.capacity() >= bytes => buffer,
        _ => Vec::with_capacity(bytes.saturating_add(bytes / 8)),
    }
}

/// A batch on its way to the engine: prepared by the preparing tasks, or
/// raw, for the engine to prepare itself (one thread).
enum ToDecide {
    /// Decoded and sketched.
    Prepared(PreparedBatch),
    /// As read.
    Raw(RawBatch),
}

/// Where the engine takes its batches from.
struct Inbox {
    /// Batches in input order.
    batches: mpsc::Receiver<ToDecide>,
    /// What prepares a raw batch.
    preparer: Arc<Preparer>,
    /// What decodes a raw batch's lines.
    decoder: Arc<Decoder>,
}

impl Inbox {
    /// The next batch, prepared (here, if it came raw); `None` at the end.
    fn next(&mut self) -> Option<PreparedBatch> {
        Some(match self.batches.blocking_recv()? {
            ToDecide::Prepared(batch) => batch,
            ToDecide::Raw(raw) => batch::prepare(&self.preparer, &self.decoder, raw, None),
        })
    }
}

/// The engine's ends of the buffer-recycling channels.
struct Spares {
    /// Where batches' line buffers go back to the reader.
    lines: std::sync::mpsc::Sender<Vec<u8>>,
    /// Where output buffers come back from the writer.
    out: std::sync::mpsc::Receiver<Vec<u8>>,
}

/// The reader thread: lines into batches, until the input ends, the reading
/// side is told to stop, or nobody takes batches any more.
fn read_batches<R: Read>(
    input: R,
    max_line_bytes: usize,
    batch_lines: usize,
    stop: &AtomicBool,
    batches: &mpsc::Sender<RawBatch>,
    spare: &std::sync::mpsc::Receiver<Vec<u8>>,
) -> Result<(), Error> {
    // The input is read straight into the batches' buffers: a batch is
    // the buffer with the lines found in it. Each new buffer (when none is
    // handed back) has room for as many bytes as the last batch took and a
    // read, so that it seldom grows, and is made of zeros, as the reader
    // wants it written (see `InPlaceLineReader`): the allocator has fresh
    // pages zeroed already, where zeros written as the buffer grew cost a
    // byte each under callgrind.
    let buffer = |bytes: usize| {
        spare
            .try_recv()
            .unwrap_or_else(|_| vec![0; bytes + INPUT_BUFFER])
    };
    let mut reader =
        InPlaceLineReader::new(input, max_line_bytes, INPUT_BUFFER, buffer(0)).taking(batch_lines);
    let mut lines = Vec::with_capacity(batch_lines);
    while !stop.load(Ordering::Relaxed) {
        match reader.next_line().map_err(Error::Read)? {
            None => break,
            Some(LineAt::TooLong) => lines.push(RawLine::TooLong {
                number: reader.line_number(),
                max: max_line_bytes,
            }),
            Some(LineAt::Content(range)) if is_blank(&reader.buffer()[range.clone()]) => {}
            Some(LineAt::Content(range)) => lines.push(RawLine::Content {
                number: reader.line_number(),
                range,
            }),
        }
        // A batch goes when it is full, and also when the input has nothing
        // more buffered: the next read may wait for a slow producer (`tail
        // -f`), and the lines already here must not wait with it.
        let full = lines.len() >= batch_lines || reader.lines_end() >= max_line_bytes;
        let idle = !reader.has_buffered_input();
        if full || (idle && !lines.is_empty()) {
            let next = buffer(reader.lines_end().min(max_line_bytes));
            let batch = RawBatch {
                bytes: reader.take_buffer(next),
                lines: std::mem::replace(&mut lines, Vec::with_capacity(batch_lines)),
            };
            if batches.blocking_send(batch).is_err() {
                return Ok(());
            }
        }
    }
    if !lines.is_empty() {
        let _ = batches.blocking_send(RawBatch {
            bytes: reader.take_buffer(Vec::new()),
            lines,
        });
    }
    Ok(())
}

/// A batch's tagged lines, on their way to the writer.
struct Tagged {
    bytes: Vec<u8>,
    /// How many lines `bytes` holds: counted as they are written, so that
    /// the writer need not count them again (a pass over every output byte,
    /// about 130 instructions a tweet-sized line).
    lines: u64,
}

/// The engine's owner: verdicts in input order, tagged lines out.
fn decide_batches<S: IndexStore>(
    mut store: S,
    mut inbox: Inbox,
    output: mpsc::Sender<Tagged>,
    spares: &Spares,
    (emit, repeats, on_invalid): (Emit, Repeats, OnInvalid),
    report: &Report,
    mut journal: Option<Journal>,
) -> Result<(S, Summary, Option<Journal>), Error> {
    let mut summary = Summary::default();
    let mut verdicts = Vec::new();
    while let Some(batch) = inbox.next() {
        // With invalid lines fatal, nothing past the first one is decided.
        let first_invalid = match on_invalid {
            OnInvalid::Fail => batch
                .items
                .iter()
                .position(|item| matches!(item, Item::Invalid(_))),
            OnInvalid::Skip => None,
        };
        verdicts.clear();
        store.decide(
            &batch::asks(&batch, first_invalid.unwrap_or(usize::MAX)),
            &mut verdicts,
        )?;
        // On disk (as the policy says) before any of its lines goes out.
        if let Some(journal) = journal.as_mut() {
            journal.append_until(&batch, first_invalid.unwrap_or(usize::MAX));
            journal.tick();
        }
        let mut verdicts = verdicts.iter();
        // One per verdict when the store explains them (--explain), none
        // otherwise.
        let mut explanations = store.explanations().iter();
        let mut out = reuse(&spares.out, batch.raw.lines_end() + batch.items.len() * 64);
        let mut lines = 0u64;
        for (at, item) in batch.items.iter().enumerate() {
            match item {
                Item::Invalid(invalid) => {
                    summary.invalid += 1;
                    if on_invalid == OnInvalid::Fail {
                        let _ = output.blocking_send(Tagged { bytes: out, lines });
                        return Err(Error::Invalid(invalid.clone()));
                    }
                    report.skipped(invalid);
                    let line = match batch.raw.lines.get(at) {
                        Some(RawLine::Content { range, .. }) => {
                            Some(&batch.raw.bytes[range.clone()])
                        }
                        _ => None,
                    };
                    report.rejected(invalid, line);
                }
                Item::Message(message) => {
                    let verdict = verdicts
                        .next()
                        .ok_or_else(|| Error::Internal("the store lost a verdict".into()))?;
                    if message.unreadable_time {
                        report.unreadable_time(message.number);
                    }
                    if message.missing_time {
                        report.missing_time(message.number);
                    }
                    if verdict.is_deletion() {
                        summary.deletions += 1;
                    } else {
                        summary.messages += 1;
                        summary.repeats += u64::from(verdict.is_repeat());
                        if verdict.is_duplicate() {
                            summary.duplicates += 1;
                        } else {
                            summary.new += 1;
                        }
                    }
                    let explanation = explanations.next();
                    if emit.wants(verdict) && repeats.wants(verdict) {
                        batch::write_explained(&mut out, &batch, message, verdict, explanation);
                        lines += 1;
                    }
                }
            }
        }
        give_back_read(&spares.lines, batch.raw.bytes);
        report.progress.update(&summary, store.stats().len as usize);
        if !out.is_empty() && output.blocking_send(Tagged { bytes: out, lines }).is_err() {
            break; // The output is closed: stop quietly.
        }
    }
    Ok((store, summary, journal))
}

/// The writer thread: owns the output, flushes when idle, treats a closed
/// pipe as a quiet end.
///
/// Returns, when the output closed before the end (a broken pipe), how many
/// lines it took for sure: those flushed before it closed.
fn write_batches<W: Write>(
    output: W,
    mut chunks: mpsc::Receiver<Tagged>,
    spare: &std::sync::mpsc::Sender<Vec<u8>>,
) -> Result<Option<u64>, Error> {
    let mut output = io::BufWriter::with_capacity(1 << 16, output);
    // Lines flushed, and lines handed to the buffer since.
    let (mut flushed, mut buffered) = (0u64, 0u64);
    let result = (|| {
        while let Some(chunk) = chunks.blocking_recv() {
            output.write_all(&chunk.bytes)?;
            debug_assert_eq!(
                chunk.lines,
                memchr::memchr_iter(b'\n', &chunk.bytes).count() as u64,
                "a tagged line is one line"
            );
            buffered += chunk.lines;
            give_back(spare, chunk.bytes);
            if chunks.is_empty() {
                output.flush()?;
                flushed += std::mem::take(&mut buffered);
            }
        }
        output.flush()
    })();
    match result {
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => {
            tracing::debug!(lines = flushed, "output closed: stopping");
            Ok(Some(flushed))
        }
        other => other.map(|()| None).map_err(Error::Write),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::config::EngineConfig;

    /// Yields some lines, then fails.
    struct FailingInput {
        data: io::Cursor<Vec<u8>>,
    }

    impl io::Read for FailingInput {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            match self.data.read(buf)? {
                0 => Err(io::Error::other("the disk went away")),
                n => Ok(n),
            }
        }
    }

    #[test]
    fn one_batch_fewer_is_prepared_while_the_engine_is_behind() {
        // Queue of four: behind from three waiting.
        assert_eq!(batches_preparing(2, 0, 4), 2);
        assert_eq!(batches_preparing(2, 2, 4), 2);
        assert_eq!(batches_preparing(2, 3, 4), 1);
        assert_eq!(batches_preparing(8, 4, 4), 7);
        // Never none, whatever the settings.
        assert_eq!(batches_preparing(1, 4, 4), 1);
        assert_eq!(batches_preparing(2, 1, 1), 1);
        assert_eq!(batches_preparing(2, 0, 1), 2);
        assert_eq!(batches_preparing(3, 0, 2), 3);
    }

    fn run_on(input: impl Read + Send + 'static) -> Result<Finished, Error> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let deduper = Deduper::new(EngineConfig::default()).unwrap();
        runtime.block_on(run(
            PipelineConfig::default(),
            deduper.preparer().clone(),
            deduper,
            input,
            io::sink(),
            std::future::pending(),
        ))
    }

    #[test]
    fn a_read_error_is_reported_not_taken_for_the_end() {
        let lines = b"{\"id\":1,\"text\":\"one two three\"}\n".repeat(3);
        let input = FailingInput {
            data: io::Cursor::new(lines),
        };
        match run_on(input) {
            Err(Error::Read(e)) => assert_eq!(e.to_string(), "the disk went away"),
            other => panic!("expected a read error, got {other:?}"),
        }
    }

    #[test]
    fn the_end_of_input_finishes_with_a_summary() {
        let lines = b"{\"id\":1,\"text\":\"one two three\"}\n\n{\"id\":2,\"text\":\"one two three\"}\nnope\n".to_vec();
        let finished = run_on(io::Cursor::new(lines)).unwrap();
        assert_eq!(finished.summary.messages, 2);
        assert_eq!(finished.summary.duplicates, 1);
        assert_eq!(finished.summary.invalid, 1);
        assert_eq!(finished.store.index().len(), 1);
    }
}

//! One client connection: lines in, one reply line per line out, in order.
//!
//! ```text
//!  socket ─read─▶ LineBuffer ─batch─▶ prepare ─▶ [engine queue] ─▶ owner
//!    ▲                                  (reserve a reply slot first)   │
//!    └──────────── writer ◀── [reply queue: bounded, per connection] ◀─┘
//! ```
//!
//! The reader and the writer are two halves of one task. The reader takes
//! every complete line already received, up to a batch, prepares the batch
//! (inline when it is small, on the blocking pool otherwise) and sends it to
//! the engine's owner together with a slot it reserved on the connection's
//! reply queue. When the client does not read its replies, the writer stops,
//! the queue fills, reserving waits, and the reader stops reading: the
//! client's own socket buffers fill and it is slowed down, while nothing
//! grows in the server and no other connection notices.
//!
//! A connection ends when the client closes its side (everything sent is
//! still answered), when it has been idle for the idle timeout (nothing
//! received and no reply pending, or a reply that could not be written for
//! that long), when a line it began is not complete within the line timeout
//! (a client trickling a byte at a time is never idle, and would otherwise
//! hold its connection slot for ever: it gets an error line after its last
//! reply, and is closed), when the client goes away, or at shutdown: then
//! it stops reading at a line boundary, answers every complete line
//! already received, flushes and closes.

use std::io;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use futures::Future;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufWriter};
use tokio::sync::mpsc::{self, OwnedPermit};

use crate::error::{InvalidLine, InvalidReason};
use crate::wire::batch::{self, Item, Op, PreparedBatch, RawBatch, RawLine};
use crate::wire::lines::is_blank;

use super::owner::{Job, Request};
use super::{Context, Shutdown, op};

/// Bytes asked of the socket per read.
const READ_CHUNK: usize = 64 * 1024;

/// Batches up to this many bytes are prepared on the connection's task; a
/// larger one goes to the blocking pool so it cannot hold up the reactor.
const INLINE_PREPARE_BYTES: usize = 8 * 1024;

/// Serves one connection until it ends (see the module documentation).
pub(crate) async fn run<R, W>(reader: R, writer: W, ctx: Arc<Context>, shutdown: Shutdown)
where
    R: AsyncRead + Unpin + Send,
    W: AsyncWrite + Unpin + Send,
{
    let mut reader = reader;
    let (reply_tx, reply_rx) = mpsc::channel(ctx.config.reply_queue.max(1));
    let read = read_requests(&mut reader, reply_tx, &ctx, shutdown, Limits::default());
    let write = write_replies(writer, reply_rx, ctx.config.idle_timeout);
    let ((read_end, _), write_end) = tokio::join!(read, write);
    if read_end == End::Stopped && write_end == End::Done {
        // Closing a socket with unread input makes the kernel send a reset,
        // and a reset can destroy replies the client has not read yet. The
        // replies are written and the write side is shut: discard what the
        // client still sends until it closes, for a moment at most.
        let mut sink = vec![0; READ_CHUNK];
        let _ = tokio::time::timeout(LINGER, async {
            while let Ok(n) = reader.read(&mut sink).await {
                if n == 0 {
                    break;
                }
            }
        })
        .await;
    }
    if read_end == End::TimedOut || write_end == End::TimedOut {
        ctx.metrics
            .connections_timed_out
            .fetch_add(1, Ordering::Relaxed);
    }
    tracing::debug!(?read_end, ?write_end, "connection closed");
}

/// How long a connection stopped by shutdown keeps discarding input after
/// its last reply, so that closing it does not reset the client.
const LINGER: Duration = Duration::from_secs(1);

/// Why one half of a connection ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum End {
    /// The client closed its side: everything was answered.
    Done,
    /// Shutdown: every complete line received was answered, but the client
    /// may still be sending.
    Stopped,
    /// Idle for the idle timeout, or replies not read for that long.
    TimedOut,
    /// The client went away, or the server is stopping hard.
    Gone,
}

/// Runs `f` under the idle timeout, if there is one. `None`: timed out.
async fn within<F: Future>(limit: Option<Duration>, f: F) -> Option<F::Output> {
    match limit {
        Some(limit) => tokio::time::timeout(limit, f).await.ok(),
        None => Some(f.await),
    }
}

/// What one stream of lines may carry: a line-protocol connection takes
/// anything; an HTTP request has a line limit, and `/v1/query` only asks.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Limits {
    /// Every message is a query; a removal is refused.
    pub query_only: bool,
    /// Most messages (non-blank lines) taken; the first line past it is
    /// answered with an error, and nothing after it is read.
    pub max_lines: Option<u64>,
}

/// The reading half: lines into batches into the engine. Returns why it
/// ended, and the number of the last line read whole.
pub(crate) async fn read_requests<R: AsyncRead + Unpin>(
    reader: &mut R,
    replies: mpsc::Sender<Vec<u8>>,
    ctx: &Context,
    shutdown: Shutdown,
    limits: Limits,
) -> (End, u64) {
    let mut lines = LineBuffer::new(ctx.config.max_line_bytes);
    let end = read_lines(reader, &mut lines, replies, ctx, shutdown, limits).await;
    (end, lines.line_number)
}

async fn read_lines<R: AsyncRead + Unpin>(
    reader: &mut R,
    lines: &mut LineBuffer,
    replies: mpsc::Sender<Vec<u8>>,
    ctx: &Context,
    mut shutdown: Shutdown,
    limits: Limits,
) -> End {
    let config = &ctx.config;
    let mut eof = false;
    // When the line being received began, and its number.
    let mut line_clock: Option<(Instant, u64)> = None;
    // Messages taken so far.
    let mut taken = 0u64;
    loop {
        let mut raw = RawBatch::default();
        let cap = match limits.max_lines {
            // One more, to learn whether the limit is passed.
            Some(max) if taken >= max => 1,
            Some(max) => usize::try_from(max - taken)
                .unwrap_or(usize::MAX)
                .min(config.batch_lines.max(1)),
            None => config.batch_lines.max(1),
        };
        let full = lines.take_lines(&mut raw, cap, config.batch_bytes);
        if eof && !full {
            lines.finish(&mut raw);
        }
        if let Some(max) = limits.max_lines
            && taken >= max
            && let Some(first) = raw.lines.first()
        {
            let line = match first {
                RawLine::Content { number, .. } | RawLine::TooLong { number, .. } => *number,
            };
            let reason = InvalidReason::Refused(format!(
                "the request is over the limit of {max} lines: this line and the rest were not read"
            ));
            refuse(line, reason, &replies, ctx).await;
            return End::Done;
        }
        if !raw.is_empty() {
            taken += raw.len() as u64;
            if submit(raw, Instant::now(), &replies, ctx, limits)
                .await
                .is_err()
            {
                return End::Gone;
            }
            continue;
        }
        if eof {
            return End::Done;
        }
        if shutdown.is_shutdown() {
            // Every complete line received was answered; a partial one is
            // dropped.
            return End::Stopped;
        }
        lines.reserve();
        let number = lines.line_number + 1;
        line_clock = match line_clock {
            _ if !lines.has_partial_line() => None,
            Some((began, n)) if n == number => Some((began, n)),
            _ => Some((Instant::now(), number)),
        };
        let line_deadline = match (config.line_timeout, line_clock) {
            (Some(limit), Some((began, _))) => Some(began + limit),
            _ => None,
        };
        let read = tokio::select! {
            biased;
            () = shutdown.recv() => continue,
            () = replies.closed() => return End::Gone,
            () = sleep_until(line_deadline) => {
                let limit = config.line_timeout.unwrap_or_default();
                tracing::debug!(line = number, "line timeout: closing the connection");
                refuse(number, InvalidReason::LineTimeout { limit }, &replies, ctx).await;
                return End::TimedOut;
            }
            read = within(config.idle_timeout, reader.read_buf(&mut lines.buf)) => read,
        };
        match read {
            None if replies.capacity() == replies.max_capacity() => {
                tracing::debug!("idle timeout: closing the connection");
                return End::TimedOut;
            }
            // Replies are still on their way: not idle.
            None => {}
            Some(Ok(0)) => eof = true,
            Some(Ok(_)) => {}
            Some(Err(e)) => {
                tracing::debug!(error = %e, "reading from the client failed");
                return End::Gone;
            }
        }
    }
}

/// Answers line `line` with an error, after the replies to the lines
/// before it: the error goes the way of every reply, through the owner.
pub(crate) async fn refuse(
    line: u64,
    reason: InvalidReason,
    replies: &mpsc::Sender<Vec<u8>>,
    ctx: &Context,
) {
    let mut batch = PreparedBatch::default();
    batch
        .items
        .push(Item::Invalid(InvalidLine { line, reason }));
    if let Ok(reply) = replies.clone().reserve_owned().await {
        let _ = send(batch, reply, Instant::now(), ctx).await;
    }
}

/// Completes at `deadline`, or never when there is none.
async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline.into()).await,
        None => std::future::pending().await,
    }
}

/// Prepares a batch and hands it to the engine's owner, with a reply slot
/// reserved first (this is where a client that does not read is held up).
async fn submit(
    raw: RawBatch,
    received: Instant,
    replies: &mpsc::Sender<Vec<u8>>,
    ctx: &Context,
    limits: Limits,
) -> Result<(), ()> {
    let reply = replies.clone().reserve_owned().await.map_err(|_| ())?;
    let query_only = limits.query_only;
    let batch = if raw.bytes.len() <= INLINE_PREPARE_BYTES {
        prepare(&ctx.preparer, &ctx.decoder, raw, query_only)
    } else {
        let (preparer, decoder) = (Arc::clone(&ctx.preparer), Arc::clone(&ctx.decoder));
        match tokio::task::spawn_blocking(move || prepare(&preparer, &decoder, raw, query_only))
            .await
        {
            Ok(batch) => batch,
            Err(e) => {
                tracing::error!(error = %e, "preparing a batch failed");
                return Err(());
            }
        }
    };
    send(batch, reply, received, ctx).await
}

/// Hands a prepared batch to the engine's owner with its reserved reply
/// slot.
async fn send(
    batch: batch::PreparedBatch,
    reply: OwnedPermit<Vec<u8>>,
    received: Instant,
    ctx: &Context,
) -> Result<(), ()> {
    ctx.engine
        .send(Request::Batch(Job {
            batch,
            reply,
            received,
        }))
        .await
        .map_err(|_| ())
}

fn prepare(
    preparer: &crate::engine::Preparer,
    decoder: &crate::wire::record::Decoder,
    raw: RawBatch,
    query_only: bool,
) -> batch::PreparedBatch {
    let mut batch = batch::prepare(preparer, decoder, raw, None);
    op::apply(&mut batch, decoder);
    if query_only {
        for item in &mut batch.items {
            let Item::Message(message) = item else {
                continue;
            };
            match message.op {
                Op::Check | Op::Query => message.op = Op::Query,
                Op::Remove => {
                    *item = Item::Invalid(InvalidLine {
                        line: message.number,
                        reason: InvalidReason::Refused(
                            "a removal sent to /v1/query (which only asks): send it to /v1/check, or DELETE /v1/messages/{id}".into(),
                        ),
                    });
                }
            }
        }
    }
    batch
}

/// The writing half: replies out, flushed whenever none is waiting.
async fn write_replies<W: AsyncWrite + Unpin>(
    writer: W,
    mut replies: mpsc::Receiver<Vec<u8>>,
    idle_timeout: Option<Duration>,
) -> End {
    let mut out = BufWriter::with_capacity(READ_CHUNK, writer);
    let result: Option<io::Result<()>> = async {
        while let Some(chunk) = replies.recv().await {
            if let Err(e) = within(idle_timeout, out.write_all(&chunk)).await? {
                return Some(Err(e));
            }
            if replies.is_empty()
                && let Err(e) = within(idle_timeout, out.flush()).await?
            {
                return Some(Err(e));
            }
        }
        Some(within(idle_timeout, out.shutdown()).await.unwrap_or(Ok(())))
    }
    .await;
    match result {
        Some(Ok(())) => End::Done,
        None => {
            tracing::info!("a client did not read its replies for the idle timeout: closing it");
            End::TimedOut
        }
        Some(Err(e)) => {
            tracing::debug!(error = %e, "writing to the client failed");
            End::Gone
        }
    }
}

/// Splits the bytes read from a connection into lines, with the limit
/// semantics of [`crate::wire::lines`]: a line longer than the limit is dropped as
/// it streams past (never held whole) and reported by its number; `\r\n`
/// ends a line as `\n` does; blank lines are counted but not answered.
#[derive(Debug)]
pub(crate) struct LineBuffer {
    /// Bytes received and not yet taken; holds at most one partial line of
    /// up to the limit, plus one read.
    buf: Vec<u8>,
    /// Where the current, incomplete line starts in `buf`.
    start: usize,
    /// Where the search for the next newline resumes.
    scan: usize,
    /// The line limit in bytes (terminator excluded).
    max: usize,
    /// The current line is over the limit: its bytes are being dropped.
    skipping: bool,
    /// Lines ended so far (1-based number of the last).
    line_number: u64,
}

impl LineBuffer {
    /// An empty buffer for lines of at most `max` bytes.
    pub(crate) fn new(max: usize) -> LineBuffer {
        LineBuffer {
            buf: Vec::new(),
            start: 0,
            scan: 0,
            max,
            skipping: false,
            line_number: 0,
        }
    }

    /// Whether part of a line has been received (and not taken), or a line
    /// over the limit is being dropped.
    fn has_partial_line(&self) -> bool {
        self.skipping || self.start < self.buf.len()
    }

    /// Drops the bytes already taken and makes room for one more read.
    fn reserve(&mut self) {
        if self.start > 0 {
            self.buf.drain(..self.start);
            self.scan -= self.start;
            self.start = 0;
        }
        self.buf.reserve(READ_CHUNK);
    }

    /// Appends bytes as if read (for tests).
    #[cfg(test)]
    fn extend(&mut self, bytes: &[u8]) {
        self.reserve();
        self.buf.extend_from_slice(bytes);
    }

    /// Moves every complete line received into `batch`, until it holds
    /// `max_lines` lines or `max_bytes` bytes. Returns whether it stopped
    /// because the batch is full.
    pub(crate) fn take_lines(
        &mut self,
        batch: &mut RawBatch,
        max_lines: usize,
        max_bytes: usize,
    ) -> bool {
        loop {
            if batch.len() >= max_lines || batch.bytes.len() >= max_bytes {
                return true;
            }
            let Some(i) = memchr::memchr(b'\n', &self.buf[self.scan..]) else {
                self.scan = self.buf.len();
                if self.skipping {
                    self.buf.truncate(self.start);
                    self.scan = self.start;
                } else if self.buf.len() - self.start > self.max + 1 {
                    // One byte of slack for a `\r` before the `\n`.
                    self.skipping = true;
                    self.buf.truncate(self.start);
                    self.scan = self.start;
                }
                return false;
            };
            let end = self.scan + i;
            self.end_line(batch, end);
            self.start = end + 1;
            self.scan = self.start;
        }
    }

    /// Takes the last line, unterminated, once the client has closed its
    /// side.
    pub(crate) fn finish(&mut self, batch: &mut RawBatch) {
        if self.skipping || self.start < self.buf.len() {
            let end = self.buf.len();
            self.end_line(batch, end);
            self.start = end;
            self.scan = end;
        }
    }

    /// Ends the line that runs from `start` to `end` (exclusive).
    fn end_line(&mut self, batch: &mut RawBatch, end: usize) {
        self.line_number += 1;
        let mut line = &self.buf[self.start..end];
        if let Some(stripped) = line.strip_suffix(b"\r") {
            line = stripped;
        }
        if std::mem::take(&mut self.skipping) || line.len() > self.max {
            batch.lines.push(RawLine::TooLong {
                number: self.line_number,
                max: self.max,
            });
        } else if !is_blank(line) {
            batch.push_line(self.line_number, line);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `chunks` as successive reads, taking batches of two lines.
    fn lines(chunks: &[&[u8]], max: usize) -> Vec<Result<(u64, String), u64>> {
        let mut buffer = LineBuffer::new(max);
        let mut out = Vec::new();
        for chunk in chunks {
            buffer.extend(chunk);
            loop {
                let mut batch = RawBatch::default();
                let full = buffer.take_lines(&mut batch, 2, usize::MAX);
                collect(&batch, &mut out);
                if !full {
                    break;
                }
            }
        }
        let mut batch = RawBatch::default();
        buffer.finish(&mut batch);
        collect(&batch, &mut out);
        out
    }

    fn collect(batch: &RawBatch, out: &mut Vec<Result<(u64, String), u64>>) {
        for line in &batch.lines {
            out.push(match line {
                RawLine::Content { number, range } => Ok((
                    *number,
                    String::from_utf8(batch.bytes[range.clone()].to_vec()).unwrap(),
                )),
                RawLine::TooLong { number, .. } => Err(*number),
            });
        }
    }

    #[test]
    fn splits_across_reads_with_the_filter_s_semantics() {
        assert_eq!(
            lines(&[b"ab\r", b"\ncd\n\n  \nef"], 10),
            vec![
                Ok((1, "ab".into())),
                Ok((2, "cd".into())),
                Ok((5, "ef".into()))
            ]
        );
        assert!(lines(&[b""], 10).is_empty());
    }

    #[test]
    fn long_lines_are_skipped_by_number_without_being_held() {
        let mut buffer = LineBuffer::new(8);
        let mut batch = RawBatch::default();
        buffer.extend(b"short\nthis one is ");
        buffer.take_lines(&mut batch, 100, usize::MAX);
        for _ in 0..1000 {
            buffer.extend(b"far far far too long ");
            buffer.take_lines(&mut batch, 100, usize::MAX);
            assert!(buffer.buf.len() <= 8 + 64, "held {}", buffer.buf.len());
        }
        buffer.extend(b"\nok\n12345678\r\n123456789\r\n");
        buffer.take_lines(&mut batch, 100, usize::MAX);
        let mut out = Vec::new();
        collect(&batch, &mut out);
        assert_eq!(
            out,
            vec![
                Ok((1, "short".into())),
                Err(2),
                Ok((3, "ok".into())),
                Ok((4, "12345678".into())),
                Err(5)
            ]
        );
        // An over-long last line without a newline.
        assert_eq!(
            lines(&[b"ok\n0123456789abc"], 8),
            vec![Ok((1, "ok".into())), Err(2)]
        );
    }

    #[test]
    fn batches_stop_at_the_limits() {
        let mut buffer = LineBuffer::new(100);
        buffer.extend(b"a\nb\nc\nd\n");
        let mut batch = RawBatch::default();
        assert!(buffer.take_lines(&mut batch, 3, usize::MAX));
        assert_eq!(batch.len(), 3);
        let mut rest = RawBatch::default();
        assert!(!buffer.take_lines(&mut rest, 3, usize::MAX));
        assert_eq!(rest.len(), 1);
        let mut by_bytes = RawBatch::default();
        let mut buffer = LineBuffer::new(100);
        buffer.extend(b"aaaa\nbbbb\ncccc\n");
        assert!(buffer.take_lines(&mut by_bytes, 100, 8));
        assert_eq!(by_bytes.len(), 2);
    }
}

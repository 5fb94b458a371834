//! The live status line on a terminal: messages, messages per second
//! (over the last [`RATE_WINDOW`], so a stall or a burst shows at once,
//! not diluted by the run's average), duplicates and index fill, redrawn at most four times a second while the
//! filter runs, and cleared at the end.
//!
//! It appears only when stderr is a terminal, without `--quiet`, and only
//! once the run has lasted a second (a short run shows nothing). It reads
//! the counters the engine publishes once per batch
//! ([`dedup_stream::pipeline::report::Progress`]), so it costs the engine nothing.
//! Log lines written meanwhile ([`Stderr`]) clear the status line first,
//! and it is drawn again at the next tick.
//!
//! `DEDUP_STREAM_PROGRESS_AFTER_MS` changes the one-second delay (tests set
//! it to 0, to see the line without waiting).

use std::collections::VecDeque;
use std::io::{self, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use dedup_stream::pipeline::report::{Report, Snapshot};

/// How long a run lasts before the line appears.
const DELAY: Duration = Duration::from_secs(1);
/// Time between two redraws (at most four a second).
const TICK: Duration = Duration::from_millis(250);
/// The span the rate shown is measured over.
const RATE_WINDOW: Duration = Duration::from_secs(5);

/// Messages per second over the last [`RATE_WINDOW`], from the counts seen
/// at each redraw.
#[derive(Debug, Default)]
struct Rate {
    /// (time since the start, messages then), oldest first, spanning at
    /// most the window (and one sample before it, its start).
    samples: VecDeque<(Duration, u64)>,
}

impl Rate {
    /// Records `messages` at `at` and returns the rate since the window's
    /// start (since the run's start while it is shorter than the window).
    fn observe(&mut self, at: Duration, messages: u64) -> f64 {
        while self
            .samples
            .get(1)
            .is_some_and(|&(then, _)| at.saturating_sub(then) >= RATE_WINDOW)
        {
            self.samples.pop_front();
        }
        let (since, before) = match self.samples.front() {
            Some(&(then, count)) if at.saturating_sub(then) >= RATE_WINDOW / 2 => (then, count),
            _ => (Duration::ZERO, 0),
        };
        self.samples.push_back((at, messages));
        let secs = (at - since.min(at)).as_secs_f64().max(1e-9);
        messages.saturating_sub(before) as f64 / secs
    }
}

/// Erases the terminal's current line and returns to its start.
const CLEAR: &[u8] = b"\r\x1b[2K";

/// Whether the status line is on the screen now.
static SHOWN: AtomicBool = AtomicBool::new(false);

/// The drawing thread; dropping it stops the thread and clears the line.
pub struct StatusLine {
    /// Set to stop the thread; the condvar wakes it.
    stop: Arc<(Mutex<bool>, Condvar)>,
    /// The drawing thread.
    thread: Option<JoinHandle<()>>,
}

impl StatusLine {
    /// Starts drawing `report`'s counters on stderr, for an index of
    /// `capacity` messages.
    pub fn start(report: Arc<Report>, capacity: usize) -> StatusLine {
        let delay = std::env::var("DEDUP_STREAM_PROGRESS_AFTER_MS")
            .ok()
            .and_then(|ms| ms.parse().ok())
            .map_or(DELAY, Duration::from_millis);
        let stop = Arc::new((Mutex::new(false), Condvar::new()));
        let thread = {
            let stop = Arc::clone(&stop);
            std::thread::Builder::new()
                .name("dedup-status".into())
                .spawn(move || draw_until_stopped(&report, capacity, delay, &stop))
                .ok()
        };
        StatusLine { stop, thread }
    }
}

impl Drop for StatusLine {
    fn drop(&mut self) {
        let (stopped, wake) = &*self.stop;
        *stopped.lock().unwrap_or_else(PoisonError::into_inner) = true;
        wake.notify_all();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn draw_until_stopped(
    report: &Report,
    capacity: usize,
    delay: Duration,
    stop: &(Mutex<bool>, Condvar),
) {
    let started = Instant::now();
    let (stopped, wake) = stop;
    let mut wait = delay;
    let mut rate = Rate::default();
    loop {
        let guard = stopped.lock().unwrap_or_else(PoisonError::into_inner);
        let (guard, _) = wake
            .wait_timeout_while(guard, wait, |stopped| !*stopped)
            .unwrap_or_else(PoisonError::into_inner);
        if *guard {
            break;
        }
        drop(guard);
        let now = report.progress.snapshot();
        let per_second = rate.observe(started.elapsed(), now.messages);
        let line = status(&now, capacity, per_second);
        let mut err = io::stderr().lock();
        let _ = err
            .write_all(CLEAR)
            .and_then(|()| err.write_all(line.as_bytes()))
            .and_then(|()| err.flush());
        SHOWN.store(true, Ordering::Relaxed);
        wait = TICK;
    }
    if SHOWN.swap(false, Ordering::Relaxed) {
        let mut err = io::stderr().lock();
        let _ = err.write_all(CLEAR).and_then(|()| err.flush());
    }
}

/// The status line's text, at `per_second` messages a second.
fn status(now: &Snapshot, capacity: usize, per_second: f64) -> String {
    let percent = |part: u64, whole: u64| {
        if whole == 0 {
            0.0
        } else {
            100.0 * part as f64 / whole as f64
        }
    };
    format!(
        "{} messages, {:.0}/s, {} duplicates ({:.1}%), {} invalid, index {}/{} ({:.0}%)",
        now.messages,
        per_second,
        now.duplicates,
        percent(now.duplicates, now.messages),
        now.invalid,
        now.indexed,
        capacity,
        percent(now.indexed, capacity as u64),
    )
}

/// Stderr for log lines: clears the status line first when it is shown.
pub struct Stderr {
    /// Whether this writer has written yet (the line is cleared once, at
    /// the start of the event).
    started: bool,
}

impl Stderr {
    /// A writer for one log event.
    pub fn new() -> Stderr {
        Stderr { started: false }
    }
}

impl Write for Stderr {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let mut err = io::stderr().lock();
        if !self.started {
            self.started = true;
            if SHOWN.load(Ordering::Relaxed) {
                err.write_all(CLEAR)?;
            }
        }
        err.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        io::stderr().flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_shows_rate_shares_and_fill() {
        let now = Snapshot {
            messages: 2000,
            duplicates: 500,
            invalid: 3,
            indexed: 1500,
        };
        assert_eq!(
            status(&now, 3000, 1000.0),
            "2000 messages, 1000/s, 500 duplicates (25.0%), 3 invalid, index 1500/3000 (50%)"
        );
    }

    #[test]
    fn the_rate_is_the_last_seconds_not_the_runs_average() {
        let mut rate = Rate::default();
        let at = |ms| Duration::from_millis(ms);
        // 1,000 a second for ten seconds, drawn four times a second.
        let mut shown = 0.0;
        for tick in 1..=40u64 {
            shown = rate.observe(at(tick * 250), tick * 250);
        }
        assert!((shown - 1000.0).abs() < 1.0, "{shown}");
        // Then a stall: within the window the rate falls to 0, where the
        // run's average would still say 1,000 * 10 / 16 = 625.
        for tick in 41..=64u64 {
            shown = rate.observe(at(tick * 250), 10_000);
        }
        assert_eq!(shown, 0.0);
        // And a burst shows as one.
        for tick in 65..=88u64 {
            shown = rate.observe(at(tick * 250), 10_000 + (tick - 64) * 1250);
        }
        assert!((shown - 5000.0).abs() < 1.0, "{shown}");
        // At the first draw, the rate since the start.
        assert_eq!(Rate::default().observe(at(1000), 300), 300.0);
    }
}

//! The engine's log events (its `tracing` warnings: Redis cannot be
//! reached, a journal cut short…) as records of Python's `logging`, on the
//! logger `dedup_stream`. Without any logging set up, Python's last-resort
//! handler prints warnings to stderr, so a notebook shows them as the CLI
//! would; `logging.getLogger("dedup_stream")` filters or routes them.
//!
//! Events may come from any thread, some of which run while a Python
//! thread waits on them with the GIL held: taking the GIL there could
//! deadlock. So an event is only queued (a bounded queue: past
//! [`MAX_PENDING`] the oldest are counted and dropped), and the queue is
//! handed to `logging` by [`flush`] where the GIL is held anyway: each
//! tick of a call that waits (every 50 ms while Redis is waited for) and
//! at the end of every call that releases the GIL.

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::sync::{Mutex, PoisonError};

use pyo3::prelude::*;
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};

/// Most events held between two flushes.
const MAX_PENDING: usize = 1000;

/// Events not yet handed to `logging`, and how many were dropped.
static PENDING: Mutex<(VecDeque<(Level, String)>, u64)> = Mutex::new((VecDeque::new(), 0));

/// Queues the events of the engine at INFO and above.
struct Forward;

/// An event's message, then its fields as `key=value`.
#[derive(Default)]
struct Text {
    message: String,
    fields: String,
}

impl Visit for Text {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            let _ = write!(self.message, "{value:?}");
        } else {
            let _ = write!(self.fields, " {}={value:?}", field.name());
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.message.push_str(value);
        } else {
            let _ = write!(self.fields, " {}={value}", field.name());
        }
    }
}

impl<S: Subscriber> Layer<S> for Forward {
    fn on_event(&self, event: &Event<'_>, _: Context<'_, S>) {
        let level = *event.metadata().level();
        if level > Level::INFO {
            return;
        }
        let mut text = Text::default();
        event.record(&mut text);
        let mut pending = PENDING.lock().unwrap_or_else(PoisonError::into_inner);
        if pending.0.len() >= MAX_PENDING {
            pending.0.pop_front();
            pending.1 += 1;
        }
        pending
            .0
            .push_back((level, format!("{}{}", text.message, text.fields)));
    }
}

/// Routes the engine's events here for the life of the process (once; a
/// process that set a subscriber of its own keeps it).
pub fn install() {
    let _ = tracing::subscriber::set_global_default(tracing_subscriber::registry().with(Forward));
}

/// Hands the queued events to `logging.getLogger("dedup_stream")`.
pub fn flush(py: Python<'_>) {
    let (events, dropped) = {
        let mut pending = PENDING.lock().unwrap_or_else(PoisonError::into_inner);
        if pending.0.is_empty() && pending.1 == 0 {
            return;
        }
        (
            std::mem::take(&mut pending.0),
            std::mem::take(&mut pending.1),
        )
    };
    let Ok(logger) = py
        .import("logging")
        .and_then(|logging| logging.call_method1("getLogger", ("dedup_stream",)))
    else {
        return;
    };
    if dropped > 0 {
        let _ = logger.call_method1(
            "warning",
            (format!(
                "{dropped} earlier log messages were dropped (too many at once)"
            ),),
        );
    }
    for (level, text) in events {
        let method = match level {
            Level::ERROR => "error",
            Level::WARN => "warning",
            _ => "info",
        };
        let _ = logger.call_method1(method, (text,));
    }
}

//! What the NATS and Kafka workers share at the broker's door: the size
//! a broker takes (and the `--max-line-bytes` it implies), the dead letter
//! that stands in for an output too large to store, and the reports of an
//! outage or a stall. Kept apart from either worker so that a shared queue
//! runtime can take it whole.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::metrics::Metrics;

/// Bytes kept free under a broker's size limit for what tagging adds to a
/// message (`"dedup":{…}` names up to two ids) and for the headers or key
/// the worker sends with it (`Nats-Msg-Id`, a record key, a dead letter's
/// reason and source). Tweet ids are at most 20 digits, so the tag is
/// about 120 bytes; the rest is room for long string ids and stream names.
pub const TAG_ROOM: usize = 4096;

/// How often a continuing outage or stall is reported.
pub const REPORT_EVERY: Duration = Duration::from_secs(10);

/// The default `--max-line-bytes` for a broker that takes messages of at
/// most `limit` bytes: a message under it, once tagged, still fits.
pub fn default_max_line_bytes(limit: usize) -> usize {
    limit.saturating_sub(TAG_ROOM).max(1)
}

/// The reason given for an output (or dead letter) the broker refuses for
/// its size, in place of its bytes.
pub fn too_large(what: &str, size: usize, limit: Option<(usize, &str)>) -> String {
    match limit {
        Some((limit, name)) => format!(
            "the {what} is {size} bytes, over the broker's limit of {limit} bytes ({name}): \
             sent here without its bytes"
        ),
        None => format!(
            "the broker refused the {what} of {size} bytes for its size: sent here without \
             its bytes"
        ),
    }
}

/// Reports an outage (or a stall) at most every [`REPORT_EVERY`], in the
/// log and the metrics: `/healthz` answers 503 while one lasts.
#[derive(Debug)]
pub struct Outage<'a> {
    broker: &'static str,
    metrics: &'a Metrics,
    since: Option<Instant>,
    reported: Option<Instant>,
}

impl<'a> Outage<'a> {
    /// No outage yet; `broker` names it in the log ("NATS", "Kafka").
    pub fn new(broker: &'static str, metrics: &'a Metrics) -> Outage<'a> {
        Outage {
            broker,
            metrics,
            since: None,
            reported: None,
        }
    }

    /// `what` failed with `error`: the worker is waiting.
    pub fn failed(&mut self, what: &str, error: &dyn std::fmt::Display) {
        self.metrics.store_errors.fetch_add(1, Ordering::Relaxed);
        self.stalled(what, error);
    }

    /// `what` makes no progress (`why`): reported as a failure is, without
    /// counting an error.
    pub fn stalled(&mut self, what: &str, why: &dyn std::fmt::Display) {
        self.metrics.store_unreachable.store(1, Ordering::Relaxed);
        let since = *self.since.get_or_insert_with(Instant::now);
        if self.reported.is_none_or(|at| at.elapsed() >= REPORT_EVERY) {
            self.reported = Some(Instant::now());
            tracing::warn!(
                for_seconds = since.elapsed().as_secs(),
                "{} failed while {what}: {why}; retrying",
                self.broker
            );
        }
    }

    /// `what` succeeded: an outage, if there was one, is over.
    pub fn over(&mut self, what: &str) {
        if let Some(since) = self.since.take() {
            self.reported = None;
            self.metrics.store_unreachable.store(0, Ordering::Relaxed);
            tracing::info!(
                after_seconds = since.elapsed().as_secs(),
                "{} reachable again ({what})",
                self.broker
            );
        }
    }

    /// Whether an outage is going on.
    pub fn ongoing(&self) -> bool {
        self.since.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_line_limit_leaves_room_for_the_tag() {
        assert_eq!(default_max_line_bytes(1_048_576), 1_044_480);
        assert_eq!(default_max_line_bytes(1_000_000), 995_904);
        assert_eq!(default_max_line_bytes(100), 1);
    }

    #[test]
    fn an_outage_sets_and_clears_the_health_flag() {
        let metrics = Metrics::default();
        let mut outage = Outage::new("NATS", &metrics);
        outage.failed("fetching", &"refused");
        assert_eq!(metrics.store_unreachable.load(Ordering::Relaxed), 1);
        assert_eq!(metrics.store_errors.load(Ordering::Relaxed), 1);
        assert!(outage.ongoing());
        outage.over("fetching");
        assert_eq!(metrics.store_unreachable.load(Ordering::Relaxed), 0);
        assert!(!outage.ongoing());
    }
}

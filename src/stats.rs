//! Run counters and the end-of-run summary.

use std::fmt;
use std::time::Duration;

/// What a run did, for the summary on stderr.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Summary {
    /// Valid messages decided.
    pub messages: u64,
    /// Of those, new.
    pub new: u64,
    /// Of those, near-duplicates.
    pub duplicates: u64,
    /// Lines skipped as invalid.
    pub invalid: u64,
    /// Messages evicted from the index.
    pub evicted: u64,
    /// Wall-clock time of the run.
    pub elapsed: Duration,
}

impl Summary {
    /// Messages decided per second of wall-clock time.
    pub fn messages_per_second(&self) -> f64 {
        let secs = self.elapsed.as_secs_f64();
        if secs > 0.0 {
            self.messages as f64 / secs
        } else {
            0.0
        }
    }
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} messages: {} new, {} duplicates, {} invalid lines, {} evicted; {:.3} s, {:.0} messages/s",
            self.messages,
            self.new,
            self.duplicates,
            self.invalid,
            self.evicted,
            self.elapsed.as_secs_f64(),
            self.messages_per_second()
        )
    }
}

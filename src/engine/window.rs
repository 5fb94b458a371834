//! The time window (`--window`): how old a message may be and still be
//! matched.
//!
//! The rule, the same in the in-memory index and in the Redis one:
//! - **A message's time** is its `created_at` (Twitter v1.1 or v2 format,
//!   see [`crate::wire::timestamp`]) when the record has one, otherwise the time
//!   its line arrived (read once per batch). With `created_at` the output
//!   is deterministic, as ever; with arrival times it cannot be: the same
//!   input read faster or slower expires different messages.
//! - **The clock** is the newest message time seen so far (by checks;
//!   queries neither move it nor expire anything). It never goes back, so
//!   messages whose `created_at` is out of order are measured against the
//!   newest time, not their own: the window reaches back from the newest.
//! - **Expiry**: before a message is decided, every indexed message whose
//!   time is before *clock − window* is evicted (and counted as an
//!   eviction). A message exactly *window* older than the clock is still
//!   matched. So an expired message is never matched, and the index holds
//!   only what the window covers: on a slow stream it shrinks to that,
//!   whatever the capacity.
//! - **When indexed**, a message keeps its own time. A near-duplicate is
//!   indexed with its own time (it carries its chain on); the message it
//!   matched keeps the time it had. An exact copy is not indexed (see the
//!   engine's module doc), so it renews the time of the identical message
//!   that stands for it to its own, if later: an unbroken run of copies
//!   keeps its message matchable, as indexing each copy would.
//! - **A message already older than the window** when it comes (its
//!   `created_at` is before *clock − window*) is decided against what is
//!   indexed, but not indexed itself (it would expire at once).
//! - Without a window, times are neither kept nor compared (they are 0).
//!
//! A record whose `created_at` is missing or unreadable takes its arrival
//! time: in a replay of old data, such a record moves the clock to today
//! and expires everything before it. Feed one kind of time, not both.

/// The latest message time kept exactly (2^53 - 1 ms): later ones are cut
/// to it, so that times stay exact in the Redis index's Lua numbers.
pub const MAX_TIME: i64 = (1 << 53) - 1;

/// The window's clock: the newest time seen, and what it expires.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Clock {
    /// The window, in milliseconds; `None`: no window.
    window: Option<i64>,
    /// The newest message time seen; `None` before the first.
    newest: Option<i64>,
}

impl Clock {
    /// A clock for a window of `window` milliseconds (`None`: no window).
    pub fn new(window: Option<u64>) -> Clock {
        Clock {
            // Windows are below 2^53 (config::Window), times too.
            window: window.map(|w| w as i64),
            newest: None,
        }
    }

    /// Whether a window is in force.
    pub fn is_on(&self) -> bool {
        self.window.is_some()
    }

    /// The newest time seen.
    pub fn newest(&self) -> Option<i64> {
        self.newest
    }

    /// Sets the newest time seen (from a state file).
    pub fn restore(&mut self, newest: Option<i64>) {
        self.newest = newest.max(self.newest);
    }

    /// Moves the clock to `time` if it is newer, and returns the horizon:
    /// messages with a time before it are expired. `None` without a window.
    pub fn advance(&mut self, time: i64) -> Option<i64> {
        let window = self.window?;
        let newest = self.newest.map_or(time, |n| n.max(time));
        self.newest = Some(newest);
        Some(newest - window)
    }

    /// The horizon now (see [`Clock::advance`]); `None` without a window
    /// or before the first time.
    pub fn horizon(&self) -> Option<i64> {
        Some(self.newest? - self.window?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_clock_only_goes_forward() {
        let mut clock = Clock::new(Some(100));
        assert_eq!(clock.horizon(), None);
        assert_eq!(clock.advance(1_000), Some(900));
        assert_eq!(clock.advance(500), Some(900), "out of order: no change");
        assert_eq!(clock.advance(1_050), Some(950));
        assert_eq!(clock.horizon(), Some(950));
        assert_eq!(clock.newest(), Some(1_050));
        let mut off = Clock::new(None);
        assert_eq!(off.advance(1_000), None);
        assert!(!off.is_on());
    }
}

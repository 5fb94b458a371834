//! Run counters and the end-of-run summary, as a line for people (its
//! `Display`) and as JSON for programs ([`Summary::to_json`]).

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
    /// Of those, repeats (see [`crate::engine::Verdict::Repeat`]), counted
    /// as new or duplicates too, by the verdict they were first given.
    pub repeats: u64,
    /// Lines skipped as invalid.
    pub invalid: u64,
    /// Deletion notices (not counted among the messages): each passes
    /// through tagged, its id forgotten.
    pub deletions: u64,
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

impl Summary {
    /// The summary as one JSON object, for scripts and pipelines
    /// (`--stats FILE`): every count, the elapsed seconds, messages per
    /// second, `index_size`, the messages held in the index at the end, and
    /// for an index in memory `index_bytes`, the memory it held then (and
    /// `index_max_bytes`, its budget, when it has one), and where it
    /// measures them the seconds the decision took in order (processor
    /// time, `decide_serial_cpu_seconds`) and counting overlaps on every
    /// thread (wall-clock time, `decide_counting_seconds`; see
    /// [`crate::engine::overlaps`]).
    pub fn to_json(&self, index: &crate::engine::IndexStats) -> serde_json::Value {
        let mut json = serde_json::json!({
            "messages": self.messages,
            "new": self.new,
            "duplicates": self.duplicates,
            "invalid": self.invalid,
            "evicted": self.evicted,
            "index_size": index.len,
            "elapsed_seconds": self.elapsed.as_secs_f64(),
            "messages_per_second": self.messages_per_second(),
        });
        // Only when there were some: a stream without notices summarises
        // as it always did.
        if self.deletions > 0 {
            json["deletions"] = self.deletions.into();
        }
        if self.repeats > 0 {
            json["repeats"] = self.repeats.into();
        }
        if let Some(bytes) = index.bytes {
            json["index_bytes"] = bytes.into();
        }
        if let Some(max_bytes) = index.max_bytes {
            json["index_max_bytes"] = max_bytes.into();
        }
        if let Some(times) = index.times {
            json["decide_serial_cpu_seconds"] = times.serial_cpu.as_secs_f64().into();
            json["decide_counting_seconds"] = times.counting.as_secs_f64().into();
            json["decide_counting_cpu_seconds"] = times.counting_cpu.as_secs_f64().into();
        }
        json
    }
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {} new, {}, {}, {} evicted; {:.3} s, {:.0} messages/s",
            counted(self.messages, "message", "messages"),
            self.new,
            counted(self.duplicates, "duplicate", "duplicates"),
            counted(self.invalid, "invalid line", "invalid lines"),
            self.evicted,
            self.elapsed.as_secs_f64(),
            self.messages_per_second()
        )?;
        if self.deletions > 0 {
            write!(
                f,
                "; {}",
                counted(self.deletions, "deletion notice", "deletion notices")
            )?;
        }
        if self.repeats > 0 {
            write!(
                f,
                "; {} (sent again, given their first verdict)",
                counted(self.repeats, "repeat", "repeats")
            )?;
        }
        Ok(())
    }
}

/// `n` with the noun in the right number: "1 duplicate", "2 duplicates".
pub fn counted(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_says_one_in_the_singular() {
        let one = Summary {
            messages: 1,
            new: 0,
            duplicates: 1,
            invalid: 1,
            ..Summary::default()
        };
        let text = one.to_string();
        assert!(
            text.starts_with("1 message: 0 new, 1 duplicate, 1 invalid line, 0 evicted"),
            "{text}"
        );
        let two = Summary {
            messages: 2,
            duplicates: 2,
            ..Summary::default()
        };
        assert!(
            two.to_string()
                .starts_with("2 messages: 0 new, 2 duplicates, 0 invalid lines")
        );
    }
}

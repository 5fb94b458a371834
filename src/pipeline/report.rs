//! What a run tells as it goes: live counters for a progress line, and
//! invalid lines reported humanely.
//!
//! [`Report`] is shared between the engine's thread, which updates it, and
//! whoever watches the run. The counters are atomics written once per batch
//! (never per message), so watching costs the engine nothing. Invalid lines
//! are warned about by their location (`file:line`, see
//! [`LineMap`]), up to a limit; past it they are only counted, by reason, so
//! that a flood of identical warnings cannot hide the first one, and so that
//! a run in which no line was usable can say why ([`Report::no_usable_line`]).

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use crate::error::{InvalidLine, InvalidReason};
use crate::pipeline::stats::Summary;
use crate::wire::input::LineMap;

/// How many invalid lines are warned about one by one by default; the rest
/// are counted.
pub const DEFAULT_WARNING_LIMIT: u64 = 20;

/// Counters of a run in progress, updated per batch.
#[derive(Debug, Default)]
pub struct Progress {
    /// Valid messages decided so far.
    pub messages: AtomicU64,
    /// Of those, near-duplicates.
    pub duplicates: AtomicU64,
    /// Invalid lines so far.
    pub invalid: AtomicU64,
    /// Messages in the index now.
    pub indexed: AtomicU64,
}

/// A copy of the [`Progress`] counters at one moment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Snapshot {
    /// Valid messages decided.
    pub messages: u64,
    /// Of those, near-duplicates.
    pub duplicates: u64,
    /// Invalid lines.
    pub invalid: u64,
    /// Messages in the index.
    pub indexed: u64,
}

impl Progress {
    /// Publishes the run's counters so far (the engine's thread calls this
    /// once per batch).
    pub fn update(&self, summary: &Summary, indexed: usize) {
        self.messages.store(summary.messages, Ordering::Relaxed);
        self.duplicates.store(summary.duplicates, Ordering::Relaxed);
        self.invalid.store(summary.invalid, Ordering::Relaxed);
        self.indexed.store(indexed as u64, Ordering::Relaxed);
    }

    /// The counters now.
    pub fn snapshot(&self) -> Snapshot {
        Snapshot {
            messages: self.messages.load(Ordering::Relaxed),
            duplicates: self.duplicates.load(Ordering::Relaxed),
            invalid: self.invalid.load(Ordering::Relaxed),
            indexed: self.indexed.load(Ordering::Relaxed),
        }
    }
}

/// The live view of a run: progress counters and invalid lines.
#[derive(Debug)]
pub struct Report {
    /// The counters, for a progress line.
    pub progress: Progress,
    /// Where each line came from.
    lines: Arc<LineMap>,
    /// Invalid lines warned about one by one; `None`: all of them.
    limit: Option<u64>,
    /// Invalid lines seen, by reason.
    invalid: Mutex<InvalidCounts>,
    /// Whether message times matter (`--window`), so that an unreadable
    /// `created_at` is worth a warning.
    times: bool,
    /// Messages whose `created_at` could not be read: (seen, warned about).
    unreadable_times: Mutex<(u64, u64)>,
    /// Messages without a `created_at` (under `--window`): the first is
    /// warned about, the rest counted.
    missing_times: AtomicU64,
    /// Where every skipped line goes (`--rejects`), whatever the limit of
    /// warnings: nothing is dropped unseen.
    rejects: Mutex<Option<Rejects>>,
}

/// The `--rejects` writer, and the first error it met (writing stops
/// there, said once).
struct Rejects {
    out: Box<dyn Write + Send>,
    failed: bool,
}

impl std::fmt::Debug for Rejects {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rejects")
            .field("failed", &self.failed)
            .finish_non_exhaustive()
    }
}

#[derive(Debug, Default)]
struct InvalidCounts {
    /// Invalid lines seen.
    total: u64,
    /// Of those, warned about.
    shown: u64,
    /// Per kind of reason: how many, and the first such reason.
    by_kind: BTreeMap<&'static str, (u64, InvalidReason)>,
}

impl Default for Report {
    /// Stdin alone, every invalid line warned about.
    fn default() -> Self {
        Report::new(Arc::new(LineMap::stdin()), None)
    }
}

impl Report {
    /// A report naming lines by `lines`, warning about at most `limit`
    /// invalid lines one by one (`None`: every one).
    pub fn new(lines: Arc<LineMap>, limit: Option<u64>) -> Report {
        Report {
            progress: Progress::default(),
            lines,
            limit,
            invalid: Mutex::default(),
            times: false,
            unreadable_times: Mutex::default(),
            missing_times: AtomicU64::new(0),
            rejects: Mutex::default(),
        }
    }

    /// Writes every skipped line to `out` (see [`Report::rejected`]).
    pub fn with_rejects(self, out: Box<dyn Write + Send>) -> Report {
        *self.rejects.lock().unwrap_or_else(PoisonError::into_inner) =
            Some(Rejects { out, failed: false });
        self
    }

    /// Records a skipped line for `--rejects`: one JSON object per line,
    /// `{"at":"FILE:LINE","reason":"…","line":"…"}`, where `line` is the
    /// line as text (invalid UTF-8 replaced by U+FFFD) and is absent for a
    /// line over the length limit, which was never read whole.
    pub fn rejected(&self, invalid: &InvalidLine, line: Option<&[u8]>) {
        let mut rejects = self.rejects.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(rejects) = rejects.as_mut().filter(|r| !r.failed) else {
            return;
        };
        let mut record = serde_json::json!({
            "at": self.lines.locate(invalid.line).to_string(),
            "reason": invalid.reason.to_string(),
        });
        if let Some(line) = line {
            record["line"] = String::from_utf8_lossy(line).into();
        }
        if let Err(e) = writeln!(rejects.out, "{record}") {
            rejects.failed = true;
            tracing::error!("writing --rejects: {e}; no more rejected lines are written");
        }
    }

    /// Flushes the `--rejects` writer and gives it back; `Err` if any write
    /// failed.
    pub fn finish_rejects(&self) -> std::io::Result<()> {
        let mut rejects = self.rejects.lock().unwrap_or_else(PoisonError::into_inner);
        match rejects.take() {
            Some(mut r) if !r.failed => r.out.flush(),
            Some(_) => Err(std::io::Error::other("a write failed")),
            None => Ok(()),
        }
    }

    /// Warns about messages whose `created_at` cannot be read (under
    /// `--window`, where their time matters).
    pub fn with_times(mut self) -> Report {
        self.times = true;
        self
    }

    /// Notes a message whose `created_at` is a string in neither known
    /// format and that took its arrival time instead: warned about by
    /// `file:line` within the limit of invalid lines, and counted. In a
    /// replay of old data that arrival time moves the window's clock to
    /// now, which would otherwise happen silently.
    pub fn unreadable_time(&self, line: u64) {
        if !self.times {
            return;
        }
        let mut counts = self
            .unreadable_times
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        counts.0 += 1;
        if self.limit.is_none_or(|limit| counts.1 < limit) {
            counts.1 += 1;
            drop(counts);
            tracing::warn!(
                "{}: created_at is not a date in Twitter v1.1 or RFC 3339 form: the line's \
                 arrival time is used (with --window, it moves the clock to now)",
                self.lines.locate(line)
            );
        }
    }

    /// Notes a message without a `created_at` (none, or not a string) that
    /// took its arrival time: the first is warned about by `file:line`,
    /// the rest only counted ([`Report::missing_times`]), since a stream
    /// of items without times is a choice, not a slip. In a replay of old
    /// tweets, one such line moves the window's clock to now and expires
    /// everything before it.
    pub fn missing_time(&self, line: u64) {
        if !self.times {
            return;
        }
        if self.missing_times.fetch_add(1, Ordering::Relaxed) == 0 {
            tracing::warn!(
                "{}: no created_at: the line's arrival time is used (with --window, it moves \
                 the clock to now; further lines without one are counted at the end)",
                self.lines.locate(line)
            );
        }
    }

    /// Messages without a `created_at` (under `--window`).
    pub fn missing_times(&self) -> u64 {
        self.missing_times.load(Ordering::Relaxed)
    }

    /// Messages whose `created_at` could not be read (under `--window`).
    pub fn unreadable_times(&self) -> u64 {
        self.unreadable_times
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .0
    }

    /// Where each line came from.
    pub fn lines(&self) -> &LineMap {
        &self.lines
    }

    /// Notes an invalid line that was skipped, with a warning if the limit
    /// allows.
    pub fn skipped(&self, invalid: &InvalidLine) {
        let mut counts = self.invalid.lock().unwrap_or_else(PoisonError::into_inner);
        counts.total += 1;
        counts
            .by_kind
            .entry(kind(&invalid.reason))
            .or_insert_with(|| (0, invalid.reason.clone()))
            .0 += 1;
        if self.limit.is_none_or(|limit| counts.shown < limit) {
            counts.shown += 1;
            drop(counts);
            tracing::warn!(
                "{}: {}: skipped",
                self.lines.locate(invalid.line),
                invalid.reason
            );
        }
    }

    /// Invalid lines counted but not warned about (past the limit).
    pub fn hidden(&self) -> u64 {
        let counts = self.invalid.lock().unwrap_or_else(PoisonError::into_inner);
        counts.total - counts.shown
    }

    /// An invalid line located in its source: `file:line: reason`.
    pub fn describe(&self, invalid: &InvalidLine) -> String {
        format!("{}: {}", self.lines.locate(invalid.line), invalid.reason)
    }

    /// Why no line was usable, when that is so: the most common reason, put
    /// so that the user can fix it (for a missing field, the fields the
    /// first line has). `None` when some message was decided or no line was
    /// invalid.
    pub fn no_usable_line(&self, summary: &Summary) -> Option<String> {
        if summary.messages > 0 || summary.invalid == 0 {
            return None;
        }
        let counts = self.invalid.lock().unwrap_or_else(PoisonError::into_inner);
        let (n, reason) = counts.by_kind.values().max_by_key(|(n, _)| *n).cloned()?;
        let all = n == counts.total;
        drop(counts);
        let first = self.lines.first_line();
        let fields = || match first.as_deref().and_then(top_level_fields) {
            // A Twitter API v2 response: its tweets are the "data" array.
            Some(_) if first.as_deref().is_some_and(is_v2_page) => {
                "; line 1 is a Twitter API v2 response page, whose tweets are its \"data\" \
                 array: give them one per line (jq -c '.data[]' page.json | dedup-stream)"
                    .to_string()
            }
            Some(fields) => format!("; fields seen on line 1: {fields}"),
            None => String::new(),
        };
        let pretty = || {
            if first
                .as_deref()
                .is_some_and(|l| l.trim_ascii() == b"{" || l.trim_ascii() == b"[")
            {
                "; line 1 opens a JSON document spread over lines (a pretty-printed file, or \
                 an API response page): give one object per line (jq -c '.data[]' or \
                 jq -c '.[]')"
            } else {
                ""
            }
        };
        // "no line had X" when every line failed so, else "most lines had
        // no X".
        let had = |what: &str| {
            let article = if what.starts_with(['a', 'e', 'i', 'o', 'u']) {
                "an"
            } else {
                "a"
            };
            if all {
                format!("no line had {article} {what}")
            } else {
                format!("most lines had no {what}")
            }
        };
        let were = |what: &str, plural: &str| {
            if all {
                format!("no line was {what}")
            } else {
                format!("most lines were not {plural}")
            }
        };
        Some(match reason {
            InvalidReason::NoText(looked) => format!(
                "{}{}; name the text with --text-field PATH",
                had(&format!("text field at `{looked}`")),
                fields()
            ),
            InvalidReason::NoId(looked) => format!(
                "{}{}; name the id with --id-field PATH",
                had(&format!("id field at `{looked}`")),
                fields()
            ),
            InvalidReason::TextNotString(path) => {
                format!(
                    "{}{}",
                    had(&format!("string at the text field `{path}`")),
                    fields()
                )
            }
            InvalidReason::Utf8(_) => format!(
                "{}: is the input a binary or compressed file?",
                were("UTF-8 text", "UTF-8 text")
            ),
            InvalidReason::Json(first) => format!(
                "{} (the first: {first}): the input must hold one JSON object per line{}",
                were("valid JSON", "valid JSON"),
                pretty()
            ),
            InvalidReason::NotObject => format!(
                "{}: each line must be one {{...}} object",
                were("a JSON object", "JSON objects")
            ),
            InvalidReason::TooLong { max } => format!(
                "{} longer than --max-line-bytes {max}: raise it, or check that the input has line breaks",
                if all {
                    "every line was"
                } else {
                    "most lines were"
                }
            ),
            other => format!("{}: {other}", if all { "every line" } else { "most lines" }),
        })
    }
}

/// A name for each kind of reason, to count them by.
fn kind(reason: &InvalidReason) -> &'static str {
    match reason {
        InvalidReason::TooLong { .. } => "too long",
        InvalidReason::Utf8(_) => "utf-8",
        InvalidReason::Json(_) => "json",
        InvalidReason::NotObject => "not an object",
        InvalidReason::NoText(_) => "no text",
        InvalidReason::TextNotString(_) => "text not a string",
        InvalidReason::NoId(_) => "no id",
        InvalidReason::BadId(_) => "bad id",
        InvalidReason::BadOp(_) => "bad op",
        InvalidReason::LineTimeout { .. } => "line timeout",
        InvalidReason::Refused(_) => "refused",
        InvalidReason::NothingToCompare => "nothing to compare",
    }
}

/// The names of a JSON object's members, as a short list (`a, b, c, …`).
/// Whether a line is one page of a Twitter API v2 search or timeline
/// response: an object whose `data` is an array of objects.
fn is_v2_page(line: &[u8]) -> bool {
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(line) else {
        return false;
    };
    value
        .get("data")
        .and_then(serde_json::Value::as_array)
        .is_some_and(|tweets| tweets.first().is_some_and(serde_json::Value::is_object))
}

fn top_level_fields(line: &[u8]) -> Option<String> {
    const SHOWN: usize = 8;
    let value: serde_json::Map<String, serde_json::Value> = serde_json::from_slice(line).ok()?;
    let mut names: Vec<&str> = value.keys().map(String::as_str).take(SHOWN).collect();
    if value.len() > SHOWN {
        names.push("…");
    }
    Some(names.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn invalid(line: u64, reason: InvalidReason) -> InvalidLine {
        InvalidLine { line, reason }
    }

    #[test]
    fn past_the_limit_invalid_lines_are_counted_not_shown() {
        let report = Report::new(Arc::new(LineMap::stdin()), Some(2));
        for line in 1..=5 {
            report.skipped(&invalid(line, InvalidReason::NotObject));
        }
        assert_eq!(report.hidden(), 3);
        let unlimited = Report::default();
        unlimited.skipped(&invalid(1, InvalidReason::NotObject));
        assert_eq!(unlimited.hidden(), 0);
    }

    #[test]
    fn the_hint_names_the_most_common_reason() {
        let report = Report::default();
        report.skipped(&invalid(1, InvalidReason::Utf8(3)));
        report.skipped(&invalid(2, InvalidReason::NoText("nope".into())));
        report.skipped(&invalid(3, InvalidReason::NoText("nope".into())));
        let summary = Summary {
            invalid: 3,
            ..Summary::default()
        };
        let hint = report.no_usable_line(&summary).unwrap();
        assert!(
            hint.starts_with("most lines had no text field at `nope`"),
            "{hint}"
        );
        let fine = Summary {
            messages: 1,
            ..summary
        };
        assert_eq!(report.no_usable_line(&fine), None);
    }

    #[test]
    fn fields_are_listed_and_cut_short() {
        assert_eq!(
            top_level_fields(br#"{"id_str":"1","text":"x","user":{}}"#).as_deref(),
            Some("id_str, text, user")
        );
        let many = br#"{"a":1,"b":1,"c":1,"d":1,"e":1,"f":1,"g":1,"h":1,"i":1}"#;
        assert!(top_level_fields(many).unwrap().ends_with("h, …"));
        assert_eq!(top_level_fields(b"[1]"), None);
    }
}

//! Option values as people type them (`0.8`, `1000000`, `512M`, `30s`):
//! the parsers behind the command line and the Python package, so that
//! both accept the same values and refuse the others with the same words.

use std::num::NonZeroUsize;
use std::time::Duration;

/// The threshold: a number in (0, 1].
pub fn parse_threshold(s: &str) -> Result<f64, String> {
    let t: f64 = s
        .parse()
        .map_err(|_| "expected a number in (0, 1], such as 0.8".to_string())?;
    if t > 0.0 && t <= 1.0 {
        Ok(t)
    } else {
        Err("must be in (0, 1]: above 0, at most 1".into())
    }
}

/// The index capacity: 1 to 2^32 - 1 (the index's slots are 32-bit).
pub fn parse_capacity(s: &str) -> Result<NonZeroUsize, String> {
    let range = || format!("must be from 1 to {}", u32::MAX);
    let n: u64 = s.parse().map_err(|_| range())?;
    if n == 0 || n > u64::from(u32::MAX) {
        return Err(range());
    }
    usize::try_from(n)
        .ok()
        .and_then(NonZeroUsize::new)
        .ok_or_else(range)
}

/// The smallest byte budget `--max-index-bytes` takes: a couple of
/// thousand tweets.
pub const MIN_INDEX_BYTES: u64 = 1 << 20;

/// A size in bytes: a whole number with an optional unit, K, M or G
/// (powers of 1024; a trailing B or iB is allowed: 64MiB, 64MB, 64M), at
/// least [`MIN_INDEX_BYTES`].
pub fn parse_size(s: &str) -> Result<NonZeroUsize, String> {
    let bad = || {
        format!("expected a size like 512M or 2G (K, M, G: powers of 1024), at least 1M, got {s:?}")
    };
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (number, unit) = s.split_at(split);
    let n: u64 = number.parse().map_err(|_| bad())?;
    let unit = unit.to_ascii_uppercase();
    let unit = unit
        .strip_suffix("IB")
        .or_else(|| unit.strip_suffix('B'))
        .unwrap_or(&unit);
    let shift = match unit {
        "" => 0,
        "K" => 10,
        "M" => 20,
        "G" => 30,
        "T" => 40,
        _ => return Err(bad()),
    };
    let bytes = n.checked_mul(1 << shift).ok_or_else(bad)?;
    if bytes < MIN_INDEX_BYTES {
        return Err(bad());
    }
    usize::try_from(bytes)
        .ok()
        .and_then(NonZeroUsize::new)
        .ok_or_else(bad)
}

/// A count that must be at least 1.
pub fn at_least_one(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(format!("must be a whole number from 1 to {}", usize::MAX)),
    }
}

/// How long an outage of Redis is waited out: a duration as
/// [`parse_duration`] reads it, or `forever` (`None`).
pub fn parse_wait(s: &str) -> Result<Option<Duration>, String> {
    if s == "forever" {
        return Ok(None);
    }
    parse_duration(s)
        .map(Some)
        .map_err(|e| format!("{e}, or forever"))
}

/// A thread count: a whole number, `0` for one a CPU (the default), as
/// ripgrep's `-j 0`. `None` for that automatic choice.
pub fn parse_threads(s: &str) -> Result<Option<NonZeroUsize>, String> {
    s.parse::<usize>().map(NonZeroUsize::new).map_err(|_| {
        format!(
            "must be a whole number from 0 to {}; 0: one a CPU (the default)",
            usize::MAX
        )
    })
}

/// `--recent`'s reach in messages: a whole number, 0 or more.
pub fn parse_recent(s: &str) -> Result<u64, String> {
    s.parse::<u64>().map_err(|_| {
        format!(
            "must be a whole number from 0 to {}; 0: every match must reach the threshold",
            u64::MAX
        )
    })
}

/// A duration: a number with an optional unit (ms, s, m, h; seconds when
/// none).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (number, unit) = s.split_at(split);
    let bad = || format!("expected a duration like 30s, 500ms, 5m or 1h, got {s:?}");
    let n: u64 = number.parse().map_err(|_| bad())?;
    let seconds = match unit {
        "ms" => return Ok(Duration::from_millis(n)),
        "" | "s" => n,
        "m" => n.checked_mul(60).ok_or_else(bad)?,
        "h" => n.checked_mul(3600).ok_or_else(bad)?,
        _ => return Err(bad()),
    };
    Ok(Duration::from_secs(seconds))
}

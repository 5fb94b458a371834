//! Message times, for `--window`: a record's `created_at` read as
//! milliseconds since the Unix epoch, or the time a line arrived.
//!
//! Two formats are read, the two a tweet's `created_at` comes in: Twitter
//! v1.1's `"Wed Oct 10 20:19:24 +0000 2018"` and v2's RFC 3339
//! `"2018-10-10T20:19:24.000Z"` (any UTC offset, any fraction of a second,
//! kept to the millisecond). A value in neither format counts as absent,
//! and the line's arrival time is used instead (see
//! [`crate::engine::window`]). Times before the epoch are taken as the
//! epoch, and times are capped below 2^53 ms (the year 287,396), so that
//! they stay exact in the Redis index's Lua numbers.

use std::time::{SystemTime, UNIX_EPOCH};

pub use crate::engine::window::MAX_TIME;

/// Milliseconds since the Unix epoch now: the arrival time of a line
/// without a `created_at`.
pub fn now_millis() -> i64 {
    let ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    i64::try_from(ms).unwrap_or(MAX_TIME).min(MAX_TIME)
}

/// A `created_at` value (the text inside the JSON string) in either
/// format, as milliseconds since the epoch; `None` when it is in neither.
///
/// Consecutive messages of a stream mostly share their second (all but 2%
/// of `dev-200k`'s neighbours; any stream of more than a message a second
/// in v1.1's format), so each thread keeps the last text it read and what
/// it gave: the same text again costs a compare, not a parse (about 300
/// instructions).
pub fn parse_created_at(text: &str) -> Option<i64> {
    let bytes = text.as_bytes();
    if bytes.len() > LastParsed::ROOM {
        return parse_uncached(text);
    }
    let last = LAST_PARSED.get();
    if usize::from(last.len) == bytes.len() && last.text[..bytes.len()] == *bytes {
        return last.millis;
    }
    let millis = parse_uncached(text);
    let mut kept = [0; LastParsed::ROOM];
    kept[..bytes.len()].copy_from_slice(bytes);
    LAST_PARSED.set(LastParsed {
        text: kept,
        len: bytes.len() as u8,
        millis,
    });
    millis
}

/// [`parse_created_at`], without the thread's last answer.
fn parse_uncached(text: &str) -> Option<i64> {
    let ms = parse_v1(text.as_bytes()).or_else(|| parse_rfc3339(text.as_bytes()))?;
    Some(ms.clamp(0, MAX_TIME))
}

/// The last `created_at` text a thread parsed (when it fitted), and the
/// answer.
#[derive(Clone, Copy)]
struct LastParsed {
    text: [u8; LastParsed::ROOM],
    /// The text's length; more than [`LastParsed::ROOM`] before the first.
    len: u8,
    millis: Option<i64>,
}

impl LastParsed {
    /// The longest text kept: v1.1's is 30 bytes, RFC 3339's with
    /// milliseconds and an offset 29.
    const ROOM: usize = 40;
}

thread_local! {
    static LAST_PARSED: std::cell::Cell<LastParsed> = const {
        std::cell::Cell::new(LastParsed {
            text: [0; LastParsed::ROOM],
            len: u8::MAX,
            millis: None,
        })
    };
}

/// Days from 1970-01-01 to a proleptic Gregorian date (Howard Hinnant's
/// `days_from_civil`).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let month_index = (month + 9) % 12;
    let day_of_year = (153 * month_index + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

/// A run of ASCII digits as a number.
fn number(digits: &[u8]) -> Option<i64> {
    if digits.is_empty() || digits.len() > 9 {
        return None;
    }
    // One pass, each byte checked as it is added.
    let mut n = 0;
    for &d in digits {
        let d = d.wrapping_sub(b'0');
        if d >= 10 {
            return None;
        }
        n = n * 10 + i64::from(d);
    }
    Some(n)
}

/// Days in each month of a common year.
const MONTH_DAYS: [u8; 12] = [31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];

/// Two ASCII digits as a number: the fixed-width fields of both formats,
/// read without the loop [`number`] needs for a run of any length.
#[inline]
fn two_digits(tens: u8, units: u8) -> Option<i64> {
    let (tens, units) = (tens.wrapping_sub(b'0'), units.wrapping_sub(b'0'));
    (tens < 10 && units < 10).then(|| i64::from(tens * 10 + units))
}

/// A month's English abbreviation (`Jan` to `Dec`, as Twitter v1.1 writes
/// them) as its number.
#[inline]
fn month_number(name: [u8; 3]) -> Option<i64> {
    Some(match &name {
        b"Jan" => 1,
        b"Feb" => 2,
        b"Mar" => 3,
        b"Apr" => 4,
        b"May" => 5,
        b"Jun" => 6,
        b"Jul" => 7,
        b"Aug" => 8,
        b"Sep" => 9,
        b"Oct" => 10,
        b"Nov" => 11,
        b"Dec" => 12,
        _ => return None,
    })
}

/// Checks the ranges of a date and time and gives its milliseconds,
/// `offset_minutes` east of UTC.
fn millis(
    (year, month, day): (i64, i64, i64),
    (hour, minute, second, milli): (i64, i64, i64, i64),
    offset_minutes: i64,
) -> Option<i64> {
    if !(1..=12).contains(&month) {
        return None;
    }
    let leap_day = month == 2 && ((year % 4 == 0 && year % 100 != 0) || year % 400 == 0);
    let month_days = i64::from(MONTH_DAYS[(month - 1) as usize]) + i64::from(leap_day);
    if !(1..=month_days).contains(&day) || hour > 23 || minute > 59 || second > 60 {
        return None;
    }
    let seconds = days_from_civil(year, month, day) * 86_400 + hour * 3_600 + minute * 60 + second
        - offset_minutes * 60;
    Some(seconds * 1_000 + milli)
}

/// `HHMM` or `HH:MM` after a sign, as minutes.
fn offset(sign: u8, rest: &[u8]) -> Option<i64> {
    let (hours, minutes) = match rest {
        [h1, h2, b':', m1, m2] | [h1, h2, m1, m2] => (two_digits(*h1, *h2)?, two_digits(*m1, *m2)?),
        _ => return None,
    };
    if hours > 23 || minutes > 59 {
        return None;
    }
    let minutes = hours * 60 + minutes;
    match sign {
        b'+' => Some(minutes),
        b'-' => Some(-minutes),
        _ => None,
    }
}

/// `Wed Oct 10 20:19:24 +0000 2018`. The weekday is not checked: it says
/// nothing the date does not.
fn parse_v1(b: &[u8]) -> Option<i64> {
    // Up to six digits of year: far enough, and no overflow below.
    if !(30..=32).contains(&b.len()) {
        return None;
    }
    if b[3] != b' ' || b[7] != b' ' || b[10] != b' ' || b[19] != b' ' {
        return None;
    }
    if b[13] != b':' || b[16] != b':' || b[25] != b' ' {
        return None;
    }
    let month = month_number([b[4], b[5], b[6]])?;
    let day = two_digits(b[8], b[9])?;
    let time = (
        two_digits(b[11], b[12])?,
        two_digits(b[14], b[15])?,
        two_digits(b[17], b[18])?,
        0,
    );
    let offset = offset(b[20], &b[21..25])?;
    let year = number(&b[26..])?;
    millis((year, month, day), time, offset)
}

/// `2018-10-10T20:19:24.000Z`, `2018-10-10T22:19:24+02:00`, with or
/// without a fraction.
fn parse_rfc3339(b: &[u8]) -> Option<i64> {
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || b[13] != b':' || b[16] != b':' {
        return None;
    }
    if !matches!(b[10], b'T' | b't' | b' ') {
        return None;
    }
    let date = (
        number(&b[..4])?,
        two_digits(b[5], b[6])?,
        two_digits(b[8], b[9])?,
    );
    let (hour, minute, second) = (
        two_digits(b[11], b[12])?,
        two_digits(b[14], b[15])?,
        two_digits(b[17], b[18])?,
    );
    let mut rest = &b[19..];
    let mut milli = 0;
    if let [b'.', tail @ ..] = rest {
        let digits = tail.iter().take_while(|c| c.is_ascii_digit()).count();
        if digits == 0 {
            return None;
        }
        // Milliseconds: the first three digits, padded.
        let mut first = [b'0'; 3];
        for (slot, digit) in first.iter_mut().zip(&tail[..digits]) {
            *slot = *digit;
        }
        milli = number(&first)?;
        rest = &tail[digits..];
    }
    let offset = match rest {
        [b'Z' | b'z'] => 0,
        [sign, tail @ ..] => offset(*sign, tail)?,
        [] => return None,
    };
    millis(date, (hour, minute, second, milli), offset)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The parser as it was before the fixed-width fields were read two
    /// digits at a time and the month by word: the property test's
    /// reference.
    mod reference {
        use crate::engine::window::MAX_TIME;

        pub fn parse_created_at(text: &str) -> Option<i64> {
            let ms = parse_v1(text.as_bytes()).or_else(|| parse_rfc3339(text.as_bytes()))?;
            Some(ms.clamp(0, MAX_TIME))
        }

        /// Days from 1970-01-01 to a proleptic Gregorian date (Howard Hinnant's
        /// `days_from_civil`).
        fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
            let year = if month <= 2 { year - 1 } else { year };
            let era = year.div_euclid(400);
            let year_of_era = year - era * 400;
            let month_index = (month + 9) % 12;
            let day_of_year = (153 * month_index + 2) / 5 + day - 1;
            let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
            era * 146_097 + day_of_era - 719_468
        }

        /// A run of ASCII digits as a number.
        fn number(digits: &[u8]) -> Option<i64> {
            if digits.is_empty() || digits.len() > 9 || !digits.iter().all(u8::is_ascii_digit) {
                return None;
            }
            Some(digits.iter().fold(0, |n, d| n * 10 + i64::from(d - b'0')))
        }

        /// Checks the ranges of a date and time and gives its milliseconds,
        /// `offset_minutes` east of UTC.
        fn millis(
            (year, month, day): (i64, i64, i64),
            (hour, minute, second, milli): (i64, i64, i64, i64),
            offset_minutes: i64,
        ) -> Option<i64> {
            let leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
            let month_days = [
                31,
                if leap { 29 } else { 28 },
                31,
                30,
                31,
                30,
                31,
                31,
                30,
                31,
                30,
                31,
            ];
            if !(1..=12).contains(&month)
                || !(1..=month_days[(month - 1) as usize]).contains(&day)
                || hour > 23
                || minute > 59
                || second > 60
            {
                return None;
            }
            let seconds =
                days_from_civil(year, month, day) * 86_400 + hour * 3_600 + minute * 60 + second
                    - offset_minutes * 60;
            Some(seconds * 1_000 + milli)
        }

        /// `HHMM` or `HH:MM` after a sign, as minutes.
        fn offset(sign: u8, rest: &[u8]) -> Option<i64> {
            let (hours, minutes) = match rest {
                [h1, h2, b':', m1, m2] | [h1, h2, m1, m2] => {
                    (number(&[*h1, *h2])?, number(&[*m1, *m2])?)
                }
                _ => return None,
            };
            if hours > 23 || minutes > 59 {
                return None;
            }
            let minutes = hours * 60 + minutes;
            match sign {
                b'+' => Some(minutes),
                b'-' => Some(-minutes),
                _ => None,
            }
        }

        /// `Wed Oct 10 20:19:24 +0000 2018`. The weekday is not checked: it says
        /// nothing the date does not.
        fn parse_v1(b: &[u8]) -> Option<i64> {
            const MONTHS: [&[u8; 3]; 12] = [
                b"Jan", b"Feb", b"Mar", b"Apr", b"May", b"Jun", b"Jul", b"Aug", b"Sep", b"Oct",
                b"Nov", b"Dec",
            ];
            if b.len() < 30 || b[3] != b' ' || b[7] != b' ' || b[10] != b' ' || b[19] != b' ' {
                return None;
            }
            if b[13] != b':' || b[16] != b':' || b[25] != b' ' {
                return None;
            }
            let month = MONTHS.iter().position(|m| m[..] == b[4..7])? as i64 + 1;
            let day = number(&b[8..10])?;
            let time = (
                number(&b[11..13])?,
                number(&b[14..16])?,
                number(&b[17..19])?,
                0,
            );
            let offset = offset(b[20], &b[21..25])?;
            // Up to six digits: far enough, and no overflow below.
            if b.len() > 32 {
                return None;
            }
            let year = number(&b[26..])?;
            millis((year, month, day), time, offset)
        }

        /// `2018-10-10T20:19:24.000Z`, `2018-10-10T22:19:24+02:00`, with or
        /// without a fraction.
        fn parse_rfc3339(b: &[u8]) -> Option<i64> {
            if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || b[13] != b':' || b[16] != b':' {
                return None;
            }
            if !matches!(b[10], b'T' | b't' | b' ') {
                return None;
            }
            let date = (number(&b[..4])?, number(&b[5..7])?, number(&b[8..10])?);
            let (hour, minute, second) = (
                number(&b[11..13])?,
                number(&b[14..16])?,
                number(&b[17..19])?,
            );
            let mut rest = &b[19..];
            let mut milli = 0;
            if let [b'.', tail @ ..] = rest {
                let digits = tail.iter().take_while(|c| c.is_ascii_digit()).count();
                if digits == 0 {
                    return None;
                }
                // Milliseconds: the first three digits, padded.
                let mut first = [b'0'; 3];
                for (slot, digit) in first.iter_mut().zip(&tail[..digits]) {
                    *slot = *digit;
                }
                milli = number(&first)?;
                rest = &tail[digits..];
            }
            let offset = match rest {
                [b'Z' | b'z'] => 0,
                [sign, tail @ ..] => offset(*sign, tail)?,
                [] => return None,
            };
            millis(date, (hour, minute, second, milli), offset)
        }
    }

    /// Valid times in either format, then one byte replaced by one of the
    /// bytes a parser could take for another (digits' neighbours `/` and
    /// `:`, separators, signs), or a piece cut off or added; and any short
    /// string.
    fn timestamp_like() -> impl Strategy<Value = String> {
        const MONTHS: [&str; 12] = [
            "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
        ];
        let valid = (
            0usize..12,
            (1i64..32, 0i64..24, 0i64..60, 0i64..61),
            (-1439i64..1440, 1960i64..2100, any::<bool>()),
            prop::sample::select(vec!["", ".0", ".25", ".123456"]),
        )
            .prop_map(|(month, (day, hour, minute, second), (offset, year, v1), fraction)| {
                let sign = if offset < 0 { '-' } else { '+' };
                let (oh, om) = (offset.abs() / 60, offset.abs() % 60);
                if v1 {
                    format!(
                        "Wed {} {day:02} {hour:02}:{minute:02}:{second:02} {sign}{oh:02}{om:02} {year}",
                        MONTHS[month]
                    )
                } else {
                    format!(
                        "{year}-{:02}-{day:02}T{hour:02}:{minute:02}:{second:02}{fraction}{sign}{oh:02}:{om:02}",
                        month + 1
                    )
                }
            });
        let mutated = (
            valid,
            any::<prop::sample::Index>(),
            prop::sample::select(vec![
                b'/', b':', b'0', b'9', b' ', b'x', b'+', b'-', b'T', b'Z', b'.',
            ]),
            0u8..4,
        )
            .prop_map(|(text, at, byte, how)| {
                let mut bytes = text.into_bytes();
                let at = at.index(bytes.len());
                match how {
                    0 => bytes[at] = byte,
                    1 => bytes.truncate(at),
                    2 => bytes.insert(at, byte),
                    _ => {}
                }
                String::from_utf8(bytes).unwrap_or_default()
            });
        prop_oneof![4 => mutated, 1 => ".{0,40}"]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4096))]
        #[test]
        fn every_string_is_read_as_before(text in timestamp_like()) {
            prop_assert_eq!(parse_created_at(&text), reference::parse_created_at(&text), "{:?}", text);
        }

        /// A run of texts where neighbours are often the same, or differ
        /// in one byte only (the thread's last answer must not be given
        /// for a text of the same length): each is read as the reference
        /// reads it.
        #[test]
        fn repeated_and_neighbouring_texts_are_read_as_before(
            texts in proptest::collection::vec(timestamp_like(), 1..6),
            picks in proptest::collection::vec((any::<prop::sample::Index>(), 0usize..40, any::<bool>()), 1..40),
        ) {
            for (pick, at, change) in picks {
                let mut text = texts[pick.index(texts.len())].clone().into_bytes();
                if change && !text.is_empty() {
                    // One digit, or one byte of anything else, changed.
                    let at = at % text.len();
                    text[at] = match text[at] {
                        b'0'..=b'8' => text[at] + 1,
                        b'9' => b'0',
                        other => other ^ 1,
                    };
                }
                let text = String::from_utf8_lossy(&text).into_owned();
                prop_assert_eq!(parse_created_at(&text), reference::parse_created_at(&text), "{:?}", text);
            }
        }

        #[test]
        fn every_valid_v1_time_is_read_as_before(
            month in 0usize..12,
            day in 0i64..33,
            hour in 0i64..25,
            minute in 0i64..61,
            second in 0i64..62,
            offset in -1500i64..1500,
            year in 0i64..1_000_000,
        ) {
            const MONTHS: [&str; 12] = [
                "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
            ];
            let sign = if offset < 0 { '-' } else { '+' };
            let text = format!(
                "Sat {} {day:02} {hour:02}:{minute:02}:{second:02} {sign}{:04} {year:04}",
                MONTHS[month],
                offset.abs()
            );
            let parsed = parse_created_at(&text);
            prop_assert_eq!(parsed, reference::parse_created_at(&text), "{}", text);
        }
    }

    #[test]
    fn both_formats_give_the_same_instant() {
        let v1 = parse_created_at("Wed Oct 10 20:19:24 +0000 2018").unwrap();
        assert_eq!(v1, 1_539_202_764_000);
        assert_eq!(parse_created_at("2018-10-10T20:19:24.000Z"), Some(v1));
        assert_eq!(parse_created_at("2018-10-10T20:19:24Z"), Some(v1));
        assert_eq!(parse_created_at("2018-10-10T22:19:24+02:00"), Some(v1));
        assert_eq!(parse_created_at("Wed Oct 10 15:19:24 -0500 2018"), Some(v1));
        assert_eq!(parse_created_at("2018-10-10T20:19:24.25Z"), Some(v1 + 250));
        assert_eq!(
            parse_created_at("2018-10-10T20:19:24.123456Z"),
            Some(v1 + 123)
        );
        assert_eq!(parse_created_at("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(
            parse_created_at("2000-02-29T00:00:00Z"),
            Some(951_782_400_000)
        );
        assert_eq!(
            parse_created_at("Tue Feb 29 00:00:00 +0000 2000"),
            Some(951_782_400_000)
        );
        assert_eq!(
            parse_created_at("Thu Feb 29 12:00:00 +0000 2024"),
            parse_created_at("2024-02-29T12:00:00Z")
        );
    }

    #[test]
    fn anything_else_is_absent() {
        for bad in [
            "",
            "yesterday",
            "2018-10-10",
            "2018-13-10T20:19:24Z",
            "2019-02-29T00:00:00Z",
            "1900-02-29T00:00:00Z",
            "Mon Feb 29 00:00:00 +0000 2100",
            "Wed Apr 31 00:00:00 +0000 2018",
            "2018-10-10T25:19:24Z",
            "2018-10-10T20:19:24",
            "2018-10-10T20:19:24.Z",
            "Wed Foo 10 20:19:24 +0000 2018",
            "Wed Oct 10 20:19:24 +0000",
            "Wed Oct 10 20:19:24 0000 2018",
            "1539202764",
        ] {
            assert_eq!(parse_created_at(bad), None, "{bad}");
        }
    }

    #[test]
    fn times_are_kept_in_range() {
        assert_eq!(parse_created_at("1969-12-31T23:59:59Z"), Some(0));
        assert_eq!(
            parse_created_at("Wed Oct 10 20:19:24 +0000 999999"),
            Some(MAX_TIME)
        );
        assert!(now_millis() > 1_500_000_000_000);
    }
}

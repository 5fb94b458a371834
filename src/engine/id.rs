//! Message ids: the JSON text of a message's id, held compactly. The
//! engine keys its index by them; the wire format reads and writes them
//! ([`crate::wire::record`]), and so do the state files and the index in
//! Redis.

use std::fmt;

/// A message id, kept as the JSON text it had in the input. Tweet ids (a
/// string of digits or a plain integer) are stored in eight bytes; anything
/// else keeps its text.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum MessageId {
    /// A JSON string holding a canonical decimal `u64` (`"1234"`).
    DigitString(u64),
    /// A JSON number that is a canonical non-negative integer (`1234`).
    Integer(u64),
    /// Any other string or integer, as its raw JSON text (quotes and escapes
    /// included).
    Raw(RawId),
}

/// The JSON text of an id that is not a tweet's number, behind one thin
/// pointer: a [`MessageId`] then takes 16 bytes rather than 24, and an
/// index entry, which holds one, fits one cache line (the decision reads
/// a dozen candidates' entries a message). Such ids are the rare ones in
/// a tweet stream; each costs one more small allocation.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct RawId(Box<Box<str>>);

#[cfg(target_pointer_width = "64")]
const _: () = assert!(size_of::<MessageId>() == 16);

impl RawId {
    /// The id's JSON text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::ops::Deref for RawId {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

impl AsRef<str> for RawId {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl From<&str> for RawId {
    fn from(text: &str) -> RawId {
        RawId(Box::new(text.into()))
    }
}

impl From<String> for RawId {
    fn from(text: String) -> RawId {
        RawId(Box::new(text.into_boxed_str()))
    }
}

impl fmt::Debug for RawId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl MessageId {
    /// Reads an id from its raw JSON text. Strings and integers are ids;
    /// anything else is not, nor is text that is not one JSON string or
    /// integer (a lone `"`, a string cut short, `-`): ids also come from
    /// state files and from Redis, not only from lines already checked.
    pub fn from_json(raw: &str) -> Option<MessageId> {
        let bytes = raw.as_bytes();
        match bytes.first()? {
            b'"' => {
                let inner = raw.strip_prefix('"')?.strip_suffix('"')?;
                // A tweet id first, in one pass: digits alone are a valid
                // string body, so the full check is for other ids only.
                if let Some(n) = canonical_u64(inner) {
                    return Some(MessageId::DigitString(n));
                }
                if !is_json_string_body(inner) {
                    return None;
                }
                Some(MessageId::Raw(raw.into()))
            }
            b'-' | b'0'..=b'9' => {
                let digits = raw.strip_prefix('-').unwrap_or(raw);
                if digits.is_empty()
                    || !digits.bytes().all(|b| b.is_ascii_digit())
                    || (digits.len() > 1 && digits.starts_with('0'))
                {
                    // Fractions, exponents and anything else not an integer.
                    return None;
                }
                match canonical_u64(raw) {
                    Some(n) => Some(MessageId::Integer(n)),
                    None => Some(MessageId::Raw(raw.into())),
                }
            }
            _ => None,
        }
    }

    /// Appends the id as the JSON text it had in the input.
    pub fn write_json(&self, out: &mut Vec<u8>) {
        let mut digits = itoa::Buffer::new();
        match self {
            MessageId::DigitString(n) => {
                out.push(b'"');
                out.extend_from_slice(digits.format(*n).as_bytes());
                out.push(b'"');
            }
            MessageId::Integer(n) => out.extend_from_slice(digits.format(*n).as_bytes()),
            MessageId::Raw(raw) => out.extend_from_slice(raw.as_bytes()),
        }
    }

    /// The id as JSON text.
    pub fn to_json(&self) -> String {
        let mut out = Vec::new();
        self.write_json(&mut out);
        String::from_utf8(out).expect("ids are JSON text")
    }
}

impl fmt::Display for MessageId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_json())
    }
}

/// Whether `inner` is what a JSON string literal holds between its quotes:
/// no bare `"`, no control character, and only JSON's escapes (a `\u`
/// escape may be half a surrogate pair, as the decoder accepts).
fn is_json_string_body(inner: &str) -> bool {
    let mut bytes = inner.bytes();
    while let Some(b) = bytes.next() {
        match b {
            b'"' | 0..=0x1f => return false,
            b'\\' => match bytes.next() {
                Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => {}
                Some(b'u') => {
                    for _ in 0..4 {
                        if !bytes.next().is_some_and(|h| h.is_ascii_hexdigit()) {
                            return false;
                        }
                    }
                }
                _ => return false,
            },
            _ => {}
        }
    }
    true
}

/// Parses `s` as a decimal `u64` only if printing it back gives `s` again (no
/// sign, no leading zero), so the compact form always round-trips.
///
/// Every message's id goes through here, and a tweet's has 18 or 19
/// digits: they are read eight at a time in one 64-bit word. (The build
/// target has no AVX2, and atoi_simd's portable fallback cost a tweet's id
/// 167 instructions; a loop over the words with a check and an overflow
/// test each, 140.) The three words (the last eight digits, the eight
/// before, and what is left, padded with '0's) are checked at once, and
/// only the highest is tested for overflow: under 10^16 the two lower ones
/// cannot pass `u64::MAX`.
fn canonical_u64(s: &str) -> Option<u64> {
    let bytes = s.as_bytes();
    let len = bytes.len();
    if len == 0 || len > 20 || (len > 1 && bytes[0] == b'0') {
        return None;
    }
    if len < 8 {
        // Too short for a word; seven digits cannot overflow.
        let mut n = 0u64;
        for &b in bytes {
            let digit = b.wrapping_sub(b'0');
            if digit > 9 {
                return None;
            }
            n = n * 10 + u64::from(digit);
        }
        return Some(n);
    }
    let low = word_at(bytes, len - 8);
    let (high, middle) = match len {
        8 => (ZEROS, ZEROS),
        9..=15 => (ZEROS, leading_digits(word_at(bytes, 0), len - 8)),
        16 => (ZEROS, word_at(bytes, 0)),
        _ => (
            leading_digits(word_at(bytes, 0), len - 16),
            word_at(bytes, len - 16),
        ),
    };
    if !all_digits([low, middle, high]) {
        return None;
    }
    // Under 10^16: no overflow.
    let below = digits_value(middle) * 100_000_000 + digits_value(low);
    digits_value(high)
        .checked_mul(10_000_000_000_000_000)?
        .checked_add(below)
}

/// A word whose first `digits` bytes (1 to 7) are the last of eight
/// digits that start with '0's: `word`'s first `digits` bytes, moved up,
/// with '0's below them.
#[inline(always)]
fn leading_digits(word: u64, digits: usize) -> u64 {
    let shift = 8 * (8 - digits as u32);
    (word << shift) | (ZEROS >> (64 - shift))
}

/// Eight ASCII '0's, one a byte.
const ZEROS: u64 = 0x3030_3030_3030_3030;

/// The eight bytes from `at` (which the caller has checked are there) as a
/// word, the first byte lowest: the id's eight-digit reads.
#[inline(always)]
fn word_at(bytes: &[u8], at: usize) -> u64 {
    let mut word = [0; 8];
    word.copy_from_slice(&bytes[at..at + 8]);
    u64::from_le_bytes(word)
}

/// Whether every byte of the words is an ASCII digit. A digit is
/// 0x30..=0x39: its high nibble is 3, and stays 3 with 6 added (0x3a..=0x3f
/// carry into it; no byte carries into the next). Every high nibble is 3
/// when the words' OR has no bit of it outside 3 and their AND every bit
/// of 3; then with 6 added, one that became 4 shows in their OR.
#[inline(always)]
fn all_digits(words: [u64; 3]) -> bool {
    const HIGH: u64 = 0xf0f0_f0f0_f0f0_f0f0;
    const SIX: u64 = 0x0606_0606_0606_0606;
    let [a, b, c] = words;
    (a | b | c) & HIGH == ZEROS
        && a & b & c & HIGH == ZEROS
        && (a.wrapping_add(SIX) | b.wrapping_add(SIX) | c.wrapping_add(SIX)) & HIGH == ZEROS
}

/// The number eight ASCII digits spell (the first byte the most
/// significant), which [`all_digits`] has found digits.
#[inline(always)]
fn digits_value(word: u64) -> u64 {
    // Pairs, then fours, then the eight: each step multiplies and adds
    // neighbouring lanes at once (Lemire's unrolled eight-digit parse).
    let mut v = word - ZEROS;
    v = v * 10 + (v >> 8);
    ((v & 0x0000_00ff_0000_00ff).wrapping_mul(100 + (1_000_000 << 32))
        + ((v >> 16) & 0x0000_00ff_0000_00ff).wrapping_mul(1 + (10_000 << 32)))
        >> 32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_keep_their_json_text() {
        for raw in [
            "\"1234567890123456789\"",
            "18446744073709551615",
            "\"007\"",
            "-5",
            "\"a\\u00e9\"",
            "99999999999999999999999",
        ] {
            let id = MessageId::from_json(raw).unwrap();
            assert_eq!(id.to_json(), raw);
        }
        assert_eq!(
            MessageId::from_json("\"42\""),
            Some(MessageId::DigitString(42))
        );
        assert_eq!(MessageId::from_json("42"), Some(MessageId::Integer(42)));
        assert!(MessageId::from_json("1e3").is_none());
        assert!(MessageId::from_json("true").is_none());
    }

    /// Regression (fuzzing, issue 14): a lone `"`, or a string cut in the
    /// middle of a multi-byte character, panicked on a slice, and a string
    /// not closed by a quote (`"1234+`) was read as another id (`"1234"`);
    /// ids from state files and Redis are not checked JSON, so malformed
    /// text is no id.
    #[test]
    fn malformed_id_text_is_no_id_and_no_panic() {
        for raw in [
            "\"",
            "\"\u{e9}",
            "\"ab\u{e9}",
            "\"\u{1f600}",
            "\"abc",
            "\"1234+",
            "\"1\u{12}34\"",
            "\"a\"b\"",
            "\"\\\"",
            "\"\\x\"",
            "\"\\u12\"",
            "\"tab\there\"",
            "-",
            "--1",
            "-01",
            "00",
            "1a",
            "12 ",
            "1.5",
            "1E3",
        ] {
            assert_eq!(MessageId::from_json(raw), None, "{raw:?}");
        }
        for raw in [
            "\"\"",
            "\"\u{e9}\"",
            "\"\\ud83d\"",
            "\"a\\\"b\"",
            "0",
            "-0",
            "-12",
        ] {
            let id = MessageId::from_json(raw).unwrap_or_else(|| panic!("{raw:?}"));
            assert_eq!(id.to_json(), raw);
        }
    }

    /// What [`canonical_u64`] is held to: the standard library's parse,
    /// kept only when it prints back as the same text.
    fn reference(s: &str) -> Option<u64> {
        s.parse::<u64>().ok().filter(|n| n.to_string() == s)
    }

    /// Every length from 1 to 21 digits, across the word edges the parse
    /// reads at: all nines, a one then zeros, leading zeros, each byte in
    /// turn made a non-digit (the bytes either side of '0'..='9' too), and
    /// u64::MAX with its neighbours.
    #[test]
    fn ids_of_every_length_parse_as_the_standard_library_does() {
        let mut cases: Vec<String> = vec![
            u64::MAX.to_string(),
            (u64::MAX - 1).to_string(),
            "18446744073709551616".into(),
            "18446744073709551619".into(),
            "18446744073709551620".into(),
            "19999999999999999999".into(),
            "28446744073709551615".into(),
            "10000000000000000000".into(),
        ];
        for len in 1..=21 {
            let nines = "9".repeat(len);
            let one = format!("1{}", "0".repeat(len - 1));
            let mixed: String = (0..len)
                .map(|i| char::from(b'1' + (i * 7 % 9) as u8))
                .collect();
            cases.push(format!("0{}", &nines[1..]));
            cases.push(format!("0{}", &one[1..]));
            for digits in [nines, one, mixed] {
                for at in 0..len {
                    for bad in ['/', ':', 'a', ' ', '+', '-', '\u{e9}', '\u{0}', '\u{b9}'] {
                        let mut edited = digits.clone();
                        edited.replace_range(at..=at, bad.encode_utf8(&mut [0; 4]));
                        cases.push(edited);
                    }
                }
                cases.push(digits);
            }
        }
        for s in &cases {
            assert_eq!(canonical_u64(s), reference(s), "{s:?}");
        }
        // The cases are not all refused: every length up to 20 parses.
        assert_eq!(canonical_u64("99999999999999999999"), None);
        assert_eq!(
            canonical_u64("1234567890123456789"),
            Some(1_234_567_890_123_456_789)
        );
        assert_eq!(canonical_u64(&u64::MAX.to_string()), Some(u64::MAX));
    }

    proptest::proptest! {
        #[test]
        fn canonical_ids_are_those_that_print_back(s in "[+\\-0-9a :]{0,21}|[1-9][0-9]{15,30}|1844674407370955161[0-9]|[0-9]{1,21}|[0-9]{0,20}[^0-9][0-9]{0,20}") {
            proptest::prop_assert_eq!(canonical_u64(&s), reference(&s));
        }

        #[test]
        fn any_u64_parses_back_to_itself(n: u64) {
            proptest::prop_assert_eq!(canonical_u64(&n.to_string()), Some(n));
        }
    }
}

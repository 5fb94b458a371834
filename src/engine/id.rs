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
fn canonical_u64(s: &str) -> Option<u64> {
    if s.is_empty() || (s.len() > 1 && s.starts_with('0')) {
        return None;
    }
    // Every message's id goes through here: eight digits at a time, each
    // checked, and a number past u64 refused.
    atoi_simd::parse::<u64, false, false>(s.as_bytes()).ok()
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

    proptest::proptest! {
        #[test]
        fn canonical_ids_are_those_that_print_back(s in "[+\\-0-9a :]{0,21}|[1-9][0-9]{15,30}|1844674407370955161[0-9]") {
            let reference = s.parse::<u64>().ok().filter(|n| n.to_string() == s);
            proptest::prop_assert_eq!(canonical_u64(&s), reference);
        }
    }
}

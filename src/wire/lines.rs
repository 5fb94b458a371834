//! Bounded line reading: split a byte stream into lines without ever holding
//! more than the line limit of one line in memory.
//!
//! A line longer than the limit is skipped as it streams past (its bytes are
//! consumed and dropped) and reported by its number, so a 1 GB line costs no
//! more memory than a short one.

use std::io::{self, BufRead};

/// One line of input.
#[derive(Debug, PartialEq, Eq)]
pub enum Line {
    /// A line's content (terminator removed) was appended to the buffer.
    Content,
    /// The line was longer than the limit and was skipped.
    TooLong,
}

/// Reads lines from a [`BufRead`], counting them, with a length limit.
#[derive(Debug)]
pub struct LineReader<R> {
    reader: R,
    max_len: usize,
    line_number: u64,
}

impl<R: BufRead> LineReader<R> {
    /// Reads `reader` with lines of at most `max_len` bytes (terminator
    /// excluded).
    pub fn new(reader: R, max_len: usize) -> LineReader<R> {
        LineReader {
            reader,
            max_len,
            line_number: 0,
        }
    }

    /// Number of the line last returned (1-based).
    pub fn line_number(&self) -> u64 {
        self.line_number
    }

    /// Appends the next line's content (without `\n` or `\r\n`) to `buf`, or
    /// skips it if too long. `None` at the end of input.
    pub fn next_line(&mut self, buf: &mut Vec<u8>) -> io::Result<Option<Line>> {
        let start = buf.len();
        let mut too_long = false;
        let mut saw_any = false;
        loop {
            let available = match self.reader.fill_buf() {
                Ok(bytes) => bytes,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            if available.is_empty() {
                if !saw_any {
                    return Ok(None);
                }
                break;
            }
            saw_any = true;
            let (chunk, done) = match memchr::memchr(b'\n', available) {
                Some(i) => (&available[..i], Some(i + 1)),
                None => (available, None),
            };
            if !too_long {
                if buf.len() - start + chunk.len() > self.max_len + 1 {
                    // One byte of slack for a `\r` before the `\n`.
                    too_long = true;
                    buf.truncate(start);
                } else {
                    buf.extend_from_slice(chunk);
                }
            }
            let consumed = done.unwrap_or(available.len());
            self.reader.consume(consumed);
            if done.is_some() {
                break;
            }
        }
        self.line_number += 1;
        if too_long {
            return Ok(Some(Line::TooLong));
        }
        if buf[start..].ends_with(b"\r") {
            buf.pop();
        }
        if buf.len() - start > self.max_len {
            buf.truncate(start);
            return Ok(Some(Line::TooLong));
        }
        Ok(Some(Line::Content))
    }
}

impl<R: io::Read> LineReader<io::BufReader<R>> {
    /// Whether input is buffered already, so that the next line can be read
    /// without waiting on the source.
    pub fn has_buffered_input(&self) -> bool {
        !self.reader.buffer().is_empty()
    }
}

/// Whether a line holds only white space (such lines are skipped without a
/// verdict or a warning).
pub fn is_blank(line: &[u8]) -> bool {
    line.iter().all(u8::is_ascii_whitespace)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(input: &[u8], max: usize) -> Vec<Result<String, u64>> {
        let mut reader = LineReader::new(io::BufReader::with_capacity(4, input), max);
        let mut out = Vec::new();
        let mut buf = Vec::new();
        while let Some(line) = reader.next_line(&mut buf).unwrap() {
            out.push(match line {
                Line::Content => Ok(String::from_utf8(std::mem::take(&mut buf)).unwrap()),
                Line::TooLong => Err(reader.line_number()),
            });
        }
        out
    }

    #[test]
    fn splits_on_lf_and_crlf_and_keeps_a_last_line_without_terminator() {
        assert_eq!(
            lines(b"ab\r\ncd\n\nef", 10),
            vec![
                Ok("ab".into()),
                Ok("cd".into()),
                Ok("".into()),
                Ok("ef".into())
            ]
        );
        assert!(lines(b"", 10).is_empty());
    }

    #[test]
    fn long_lines_are_skipped_by_number() {
        assert_eq!(
            lines(b"short\nthis one is far too long\nok\n", 8),
            vec![Ok("short".into()), Err(2), Ok("ok".into())]
        );
        // Exactly at the limit, with or without \r.
        assert_eq!(
            lines(b"12345678\r\n12345678\n", 8),
            vec![Ok("12345678".into()), Ok("12345678".into())]
        );
        assert_eq!(lines(b"123456789\r\n", 8), vec![Err(1)]);
    }
}

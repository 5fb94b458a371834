//! Bounded line reading: split a byte stream into lines without ever holding
//! more than the line limit of one line in memory.
//!
//! A line longer than the limit is skipped as it streams past (its bytes are
//! consumed and dropped) and reported by its number, so a 1 GB line costs no
//! more memory than a short one.
//!
//! [`LineReader`] appends each line to a buffer of the caller's;
//! [`InPlaceLineReader`] reads the stream straight into the buffer the
//! lines are then taken in (a batch's), so that a line's bytes are not
//! copied on their way from the input to the batch.

use std::io::{self, BufRead, Read};
use std::ops::Range;

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

/// A line an [`InPlaceLineReader`] found.
#[derive(Debug, PartialEq, Eq)]
pub enum LineAt {
    /// Where the line's content (terminator removed) lies in
    /// [`InPlaceLineReader::buffer`].
    Content(Range<usize>),
    /// The line was longer than the limit and was skipped.
    TooLong,
}

/// Reads lines, counting them, with a length limit, as [`LineReader`]
/// does (the same lines, numbers and refusals), but into one buffer that
/// the lines are found in as ranges: the stream is read straight into it,
/// and [`InPlaceLineReader::take_buffer`] hands it over whole, with every
/// line found so far, moving only the unfinished last line into the next
/// buffer. A line copied from a reader's buffer into a batch's cost a
/// tweet about 75 instructions of `memcpy`, and the reader's per-line
/// bookkeeping about as much again.
///
/// The buffer's length is how much of it has ever been written (zeros
/// when it grows), which can be more than has been read into it: read
/// into that much again without writing it first. A buffer given back
/// keeps it, so that its room is not written over with zeros again.
#[derive(Debug)]
pub struct InPlaceLineReader<R> {
    reader: R,
    max_len: usize,
    /// Most bytes asked of the source at a time.
    read_size: usize,
    /// How many lines a buffer is to take, when the caller says (see
    /// [`InPlaceLineReader::taking`]).
    lines_wanted: usize,
    /// Lines found in the current buffer.
    lines_found: usize,
    line_number: u64,
    buf: Vec<u8>,
    /// Bytes read into `buf`.
    filled: usize,
    /// Where the line not yet found starts.
    start: usize,
    /// Where the search for its `\n` goes on from.
    scan: usize,
    /// That line is over the limit: its bytes are dropped as they come.
    skipping: bool,
    newlines: NewlineFinder,
    /// The source has ended.
    ended: bool,
}

impl<R: Read> InPlaceLineReader<R> {
    /// Reads `reader` `read_size` bytes at a time into `buf` (whose
    /// length is taken as written already, see [`InPlaceLineReader`]),
    /// with lines of at most `max_len` bytes (terminator excluded).
    pub fn new(reader: R, max_len: usize, read_size: usize, buf: Vec<u8>) -> Self {
        InPlaceLineReader {
            reader,
            max_len,
            read_size: read_size.max(1),
            lines_wanted: 0,
            lines_found: 0,
            line_number: 0,
            buf,
            filled: 0,
            start: 0,
            scan: 0,
            skipping: false,
            ended: false,
            newlines: NewlineFinder::new(),
        }
    }

    /// Tells that each buffer is to take `lines` lines: once some are
    /// found, reads are sized to what the rest should take, at the bytes a
    /// line so far (an eighth more), rather than the most at a time. What
    /// is read past a buffer's last line is moved into the next buffer,
    /// and reads of the most at a time moved half of one a buffer (about
    /// 60 instructions a tweet).
    pub fn taking(mut self, lines: usize) -> Self {
        self.lines_wanted = lines;
        self
    }

    /// Number of the line last returned (1-based).
    pub fn line_number(&self) -> u64 {
        self.line_number
    }

    /// The bytes read into the current buffer: every line found since it
    /// was taken lies in it.
    pub fn buffer(&self) -> &[u8] {
        &self.buf[..self.filled]
    }

    /// Where the lines found in the current buffer end: the line not yet
    /// found starts here.
    pub fn lines_end(&self) -> usize {
        self.start
    }

    /// Whether input is read already past the lines found, so that the
    /// next line can be found (or begun) without waiting on the source.
    pub fn has_buffered_input(&self) -> bool {
        self.start < self.filled
    }

    /// The next line, found in [`InPlaceLineReader::buffer`], or skipped
    /// if too long. `None` at the end of input.
    pub fn next_line(&mut self) -> io::Result<Option<LineAt>> {
        loop {
            if let Some(i) = self.newlines.find(&self.buf[self.scan..self.filled]) {
                let end = self.scan + i;
                let line = self.end_line(end);
                self.start = end + 1;
                self.scan = self.start;
                return Ok(Some(line));
            }
            self.scan = self.filled;
            // One byte of slack for a `\r` before the `\n`, as
            // [`LineReader`] has.
            if self.skipping || self.filled - self.start > self.max_len.saturating_add(1) {
                self.skipping = true;
                self.filled = self.start;
                self.scan = self.start;
            }
            if self.ended {
                if !self.skipping && self.start == self.filled {
                    return Ok(None);
                }
                let end = self.filled;
                let line = self.end_line(end);
                self.start = end;
                self.scan = end;
                return Ok(Some(line));
            }
            self.fill()?;
        }
    }

    /// Reads once more from the source, after what has been read.
    fn fill(&mut self) -> io::Result<()> {
        /// The fewest bytes a read sized to the lines still wanted asks.
        const FEWEST: usize = 4 << 10;
        let mut size = self.read_size;
        if self.lines_found > 0 && self.lines_wanted > self.lines_found {
            let rest = (self.lines_wanted - self.lines_found)
                .saturating_mul(self.start / self.lines_found + 1);
            size = size.min(rest.saturating_add(rest / 8).max(FEWEST));
        }
        let want = self.filled + size;
        if self.buf.len() < want {
            self.buf.resize(want, 0);
        }
        loop {
            match self.reader.read(&mut self.buf[self.filled..want]) {
                Ok(0) => self.ended = true,
                Ok(n) => self.filled += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
            return Ok(());
        }
    }

    /// Ends the line that runs from `start` to `end` (exclusive), its
    /// `\r` before the `\n` removed.
    fn end_line(&mut self, end: usize) -> LineAt {
        self.line_number += 1;
        self.lines_found += 1;
        let mut end = end;
        if end > self.start && self.buf[end - 1] == b'\r' {
            end -= 1;
        }
        if std::mem::take(&mut self.skipping) || end - self.start > self.max_len {
            return LineAt::TooLong;
        }
        LineAt::Content(self.start..end)
    }

    /// Hands over the current buffer, with every line found in it, and
    /// goes on in `next` (whose length is taken as written already),
    /// where the bytes read past those lines are moved.
    pub fn take_buffer(&mut self, mut next: Vec<u8>) -> Vec<u8> {
        let rest = self.start..self.filled;
        if next.len() < rest.len() {
            next.resize(rest.len(), 0);
        }
        next[..rest.len()].copy_from_slice(&self.buf[rest.clone()]);
        self.filled = rest.len();
        self.scan -= self.start;
        self.start = 0;
        self.lines_found = 0;
        std::mem::replace(&mut self.buf, next)
    }
}

/// Finds a line's end: with the AVX2 search set up once, where the
/// processor has it (`memchr::memchr` picks it and sets it up again at
/// each call, about 20 of the 110 instructions a tweet's line cost), and
/// with `memchr::memchr` elsewhere.
#[derive(Clone, Copy, Debug)]
struct NewlineFinder {
    #[cfg(target_arch = "x86_64")]
    avx2: Option<memchr::arch::x86_64::avx2::memchr::One>,
}

impl NewlineFinder {
    fn new() -> NewlineFinder {
        NewlineFinder {
            #[cfg(target_arch = "x86_64")]
            avx2: memchr::arch::x86_64::avx2::memchr::One::new(b'\n'),
        }
    }

    /// Where the first `\n` of `haystack` is.
    #[inline(always)]
    fn find(&self, haystack: &[u8]) -> Option<usize> {
        #[cfg(target_arch = "x86_64")]
        if let Some(avx2) = &self.avx2 {
            return avx2.find(haystack);
        }
        memchr::memchr(b'\n', haystack)
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

    /// Yields its bytes in reads of the given sizes, in turn (each at
    /// least one byte), as a pipe may.
    struct Trickle {
        data: Vec<u8>,
        at: usize,
        sizes: Vec<usize>,
        turn: usize,
    }

    impl Read for Trickle {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            let size = self.sizes[self.turn % self.sizes.len()].max(1);
            self.turn += 1;
            let n = size.min(buf.len()).min(self.data.len() - self.at);
            buf[..n].copy_from_slice(&self.data[self.at..self.at + n]);
            self.at += n;
            Ok(n)
        }
    }

    /// What [`InPlaceLineReader`] finds, by number: the line's bytes, or
    /// `None` when it was too long. The buffer is taken after every
    /// `take_every`-th line (a batch's end), each time into a buffer
    /// holding `stale` bytes already written.
    fn in_place(
        input: &[u8],
        max: usize,
        sizes: Vec<usize>,
        read_size: usize,
        take_every: usize,
        stale: usize,
    ) -> Vec<(u64, Option<Vec<u8>>)> {
        let trickle = Trickle {
            data: input.to_vec(),
            at: 0,
            sizes,
            turn: 0,
        };
        let mut reader =
            InPlaceLineReader::new(trickle, max, read_size, vec![b'x'; stale]).taking(take_every);
        let mut found = Vec::new();
        let mut pending = Vec::new();
        while let Some(line) = reader.next_line().unwrap() {
            pending.push((reader.line_number(), line));
            if pending.len() >= take_every {
                let buffer = reader.take_buffer(vec![b'y'; stale]);
                for (number, line) in pending.drain(..) {
                    found.push((
                        number,
                        match line {
                            LineAt::Content(range) => Some(buffer[range].to_vec()),
                            LineAt::TooLong => None,
                        },
                    ));
                }
            }
        }
        let buffer = reader.take_buffer(Vec::new());
        for (number, line) in pending {
            found.push((
                number,
                match line {
                    LineAt::Content(range) => Some(buffer[range].to_vec()),
                    LineAt::TooLong => None,
                },
            ));
        }
        found
    }

    /// The same, as [`LineReader`] reads it (the reference).
    fn by_line_reader(input: &[u8], max: usize, chunk: usize) -> Vec<(u64, Option<Vec<u8>>)> {
        let mut reader = LineReader::new(io::BufReader::with_capacity(chunk, input), max);
        let mut found = Vec::new();
        let mut buf = Vec::new();
        while let Some(line) = reader.next_line(&mut buf).unwrap() {
            found.push((
                reader.line_number(),
                match line {
                    Line::Content => Some(std::mem::take(&mut buf)),
                    Line::TooLong => None,
                },
            ));
        }
        found
    }

    /// Both ways of finding a line's end find the same one.
    #[test]
    fn newlines_are_found_with_and_without_the_simd_search() {
        let portable = NewlineFinder {
            #[cfg(target_arch = "x86_64")]
            avx2: None,
        };
        let finder = NewlineFinder::new();
        for len in 0..200usize {
            for at in [None, Some(0), Some(len / 2), Some(len.saturating_sub(1))] {
                let mut haystack = vec![b'a'; len];
                if let Some(at) = at.filter(|&at| at < len) {
                    haystack[at] = b'\n';
                    haystack.push(b'\n');
                }
                let expected = haystack.iter().position(|&b| b == b'\n');
                assert_eq!(finder.find(&haystack), expected, "{len} {at:?}");
                assert_eq!(portable.find(&haystack), expected, "{len} {at:?}");
            }
        }
    }

    #[test]
    fn lines_read_in_place_are_those_read_line_by_line() {
        let input = b"ab\r\ncd\n\n\r\nthis one is far too long\r\n12345678\r\n123456789\r\nlast\r";
        let expected = by_line_reader(input, 8, 3);
        assert_eq!(expected.len(), 8);
        for read_size in [1, 2, 5, 64] {
            for take_every in [1, 3, 100] {
                let found = in_place(input, 8, vec![read_size], read_size, take_every, 4);
                assert_eq!(
                    found, expected,
                    "reads of {read_size}, taken every {take_every}"
                );
            }
        }
        assert!(in_place(b"", 8, vec![1], 4, 1, 0).is_empty());
        assert_eq!(
            in_place(b"\n", 8, vec![1], 4, 1, 0),
            vec![(1, Some(Vec::new()))]
        );
    }

    proptest::proptest! {
        /// Whatever the lines (terminated or not, with `\r`s, blank, over
        /// the limit or just under it), the reads' sizes and where the
        /// buffer is taken, the lines read in place are those read line by
        /// line, with the same numbers.
        #[test]
        fn lines_read_in_place_are_always_those_read_line_by_line(
            input in proptest::collection::vec(
                proptest::prop_oneof![
                    4 => proptest::prelude::Just(b'a'),
                    2 => proptest::prelude::Just(b'\n'),
                    1 => proptest::prelude::Just(b'\r'),
                    1 => proptest::prelude::Just(b' '),
                ],
                0..120,
            ),
            max in 0usize..12,
            sizes in proptest::collection::vec(1usize..20, 1..5),
            read_size in 1usize..24,
            take_every in 1usize..6,
            stale in 0usize..40,
        ) {
            let expected = by_line_reader(&input, max, 7);
            let found = in_place(&input, max, sizes, read_size, take_every, stale);
            proptest::prop_assert_eq!(found, expected);
        }
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

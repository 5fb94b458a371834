//! The filter's input: files and stdin read in order as one stream of
//! lines, with every line traceable to its file and line number.
//!
//! [`Inputs`] is a [`Read`] that chains its [`Source`]s (a file whose name
//! ends in `.gz` decompressed as it is read): it skips a UTF-8
//! byte-order mark at the start of each one, ends a source whose last line
//! has no terminator with one (so a file's last line never merges with the
//! next file's first), and records in a shared [`LineMap`] at which line of
//! the stream each source starts. The pipeline numbers lines across the
//! whole stream; [`LineMap::locate`] turns such a number back into
//! `file:line` for a warning. It also keeps the stream's first line (up to
//! [`FIRST_LINE_MAX`] bytes), for the hint given when no line is usable.
//!
//! [`check_writable`] says, before any input is read, whether a file the run
//! will write at its end can be written, so that a typo in a path costs no
//! work.

use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

/// The UTF-8 byte-order mark, which some editors write at the start of a
/// file.
pub const BOM: &[u8] = b"\xEF\xBB\xBF";

/// The most bytes of the first line kept for [`LineMap::first_line`].
pub const FIRST_LINE_MAX: usize = 256 << 10;

/// Where lines come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// Standard input (`-` on the command line, or no file at all).
    Stdin,
    /// A file, by its path as given.
    File(PathBuf),
}

impl Source {
    /// Reads a command-line argument: `-` is stdin, anything else a path.
    pub fn from_arg(arg: &Path) -> Source {
        if arg == Path::new("-") {
            Source::Stdin
        } else {
            Source::File(arg.to_path_buf())
        }
    }
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Stdin => f.write_str("<stdin>"),
            Source::File(path) => write!(f, "{}", path.display()),
        }
    }
}

/// Which source each line of the stream came from.
#[derive(Debug)]
pub struct LineMap {
    /// The sources, in reading order.
    sources: Vec<Source>,
    /// What the reader found so far.
    state: Mutex<MapState>,
}

#[derive(Debug, Default)]
struct MapState {
    /// `(first stream line, source index)` for each source opened, in order.
    starts: Vec<(u64, usize)>,
    /// The stream's first line, as far as it was kept.
    first_line: Vec<u8>,
    /// Whether `first_line` is complete (its terminator was seen).
    first_line_done: bool,
}

/// A line of the stream, located in its source.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Location {
    /// The source, or `None` when the stream is stdin alone (then a line is
    /// named by its number only, as it always was).
    pub source: Option<Source>,
    /// 1-based line number within the source.
    pub line: u64,
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.source {
            None => write!(f, "line {}", self.line),
            Some(source) => write!(f, "{source}:{}", self.line),
        }
    }
}

impl LineMap {
    /// A map of `sources`, read in that order.
    pub fn new(sources: Vec<Source>) -> LineMap {
        LineMap {
            sources,
            state: Mutex::default(),
        }
    }

    /// A map for stdin alone.
    pub fn stdin() -> LineMap {
        LineMap::new(vec![Source::Stdin])
    }

    fn state(&self) -> std::sync::MutexGuard<'_, MapState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Where line `number` of the stream (1-based) came from. Lines are
    /// named `file:line`, except when the stream is stdin alone: then
    /// `line N`.
    pub fn locate(&self, number: u64) -> Location {
        if self.sources == [Source::Stdin] {
            return Location {
                source: None,
                line: number,
            };
        }
        let state = self.state();
        let found = state
            .starts
            .iter()
            .rev()
            .find(|(start, _)| *start <= number);
        match found {
            Some(&(start, index)) => Location {
                source: Some(self.sources[index].clone()),
                line: number - start + 1,
            },
            None => Location {
                source: None,
                line: number,
            },
        }
    }

    /// The stream's first line (without its terminator), if any was read
    /// and it was short enough to keep whole.
    pub fn first_line(&self) -> Option<Vec<u8>> {
        let state = self.state();
        (state.first_line_done
            && state.first_line.len() < FIRST_LINE_MAX
            && !state.first_line.is_empty())
        .then(|| state.first_line.clone())
    }
}

/// The sources read in order as one stream (see the [module
/// documentation](self)).
pub struct Inputs {
    /// Which line came from where; shared with whoever reports lines.
    map: Arc<LineMap>,
    /// Index of the next source to open.
    next: usize,
    /// The source being read.
    current: Option<Box<dyn Read + Send>>,
    /// Bytes read ahead from the current source (to look for a BOM), served
    /// before reading it further.
    pending: Vec<u8>,
    /// Whether the current source has ended already (while looking for a
    /// BOM): it is not read again, since a terminal's end of input (Ctrl-D)
    /// is not repeated.
    current_ended: bool,
    /// Newlines passed on so far, while a source is left to open: the
    /// stream line the next source starts at (counting is no use once the
    /// last source is read, and cost a tweet-sized line about 120
    /// instructions).
    newlines: u64,
    /// Whether the last byte passed on ended a line (or nothing was passed).
    at_line_start: bool,
    /// Whether the current source has passed on any byte.
    current_has_bytes: bool,
    /// Whether the first line is still being kept.
    keeping_first_line: bool,
}

impl fmt::Debug for Inputs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Inputs")
            .field("map", &self.map)
            .field("next", &self.next)
            .finish_non_exhaustive()
    }
}

impl Inputs {
    /// Reads `sources` in order; each file is opened when its turn comes.
    /// An empty list reads stdin.
    pub fn new(mut sources: Vec<Source>) -> Inputs {
        if sources.is_empty() {
            sources.push(Source::Stdin);
        }
        Inputs {
            map: Arc::new(LineMap::new(sources)),
            next: 0,
            current: None,
            pending: Vec::new(),
            current_ended: false,
            newlines: 0,
            at_line_start: true,
            current_has_bytes: false,
            keeping_first_line: true,
        }
    }

    /// The map of lines to sources, filled in as the stream is read.
    pub fn line_map(&self) -> Arc<LineMap> {
        Arc::clone(&self.map)
    }

    /// Opens the next source; `false` when there is none left.
    fn open_next(&mut self) -> io::Result<bool> {
        let Some(source) = self.map.sources.get(self.next).cloned() else {
            return Ok(false);
        };
        let index = self.next;
        self.next += 1;
        let mut reader: Box<dyn Read + Send> = match &source {
            Source::Stdin => {
                sniff_compression(Box::new(io::stdin())).map_err(|e| in_source(&source, e))?
            }
            Source::File(path) => {
                let file = File::open(path).map_err(|e| named(path, e))?;
                if is_gzip(path) {
                    // Several members one after another (`cat a.gz b.gz`)
                    // are one stream, as gzip -d reads them.
                    Box::new(flate2::read::MultiGzDecoder::new(io::BufReader::new(file)))
                } else if is_zstd(path) {
                    // Several frames, likewise (zstd's decoder reads them all).
                    Box::new(zstd::stream::read::Decoder::new(file).map_err(|e| named(path, e))?)
                } else {
                    sniff_compression(Box::new(file)).map_err(|e| named(path, e))?
                }
            }
        };
        // Read enough to see a byte-order mark.
        let mut head = Vec::with_capacity(BOM.len());
        let mut ended = false;
        while head.len() < BOM.len() {
            let mut byte = [0u8; 3];
            let want = BOM.len() - head.len();
            match reader.read(&mut byte[..want]) {
                Ok(0) => {
                    ended = true;
                    break;
                }
                Ok(n) => head.extend_from_slice(&byte[..n]),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(in_source(&source, e)),
            }
            if !BOM.starts_with(&head) {
                break;
            }
        }
        if head == BOM {
            head.clear();
        }
        self.pending = head;
        self.current_ended = ended;
        self.current = Some(reader);
        self.current_has_bytes = false;
        self.map.state().starts.push((self.newlines + 1, index));
        Ok(true)
    }

    /// Passes `buf[..n]` on: counts its lines and keeps the first line.
    fn passed(&mut self, buf: &[u8]) {
        if buf.is_empty() {
            return;
        }
        self.current_has_bytes = true;
        if self.next < self.map.sources.len() {
            self.newlines += memchr::memchr_iter(b'\n', buf).count() as u64;
        }
        self.at_line_start = buf.last() == Some(&b'\n');
        if self.keeping_first_line {
            let mut state = self.map.state();
            let end = memchr::memchr(b'\n', buf);
            let part = &buf[..end.unwrap_or(buf.len())];
            let room = FIRST_LINE_MAX.saturating_sub(state.first_line.len());
            state
                .first_line
                .extend_from_slice(&part[..part.len().min(room)]);
            if end.is_some() || state.first_line.len() >= FIRST_LINE_MAX {
                if state.first_line.ends_with(b"\r") {
                    state.first_line.pop();
                }
                state.first_line_done = true;
                self.keeping_first_line = false;
            }
        }
    }
}

impl Read for Inputs {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        loop {
            if self.current.is_none() && !self.open_next()? {
                return Ok(0);
            }
            if !self.pending.is_empty() {
                let n = self.pending.len().min(buf.len());
                buf[..n].copy_from_slice(&self.pending[..n]);
                self.pending.drain(..n);
                self.passed(&buf[..n]);
                return Ok(n);
            }
            let reader = self.current.as_mut().expect("a source is open");
            let n = match if self.current_ended {
                Ok(0)
            } else {
                reader.read(buf)
            } {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    let source = &self.map.sources[self.next - 1];
                    return Err(in_source(source, e));
                }
            };
            if n > 0 {
                self.passed(&buf[..n]);
                return Ok(n);
            }
            // This source is done; end its last line if it had no
            // terminator, so that it does not run into the next source's.
            self.current = None;
            if self.current_has_bytes && !self.at_line_start {
                buf[0] = b'\n';
                self.passed(&buf[..1]);
                return Ok(1);
            }
        }
    }
}

/// `reader` decompressed when its first bytes are gzip's or zstd's magic
/// number (stdin, or a file not named `.gz`/`.zst`: `cat day.jsonl.gz |
/// dedup-stream`), as it is otherwise; bzip2's is refused with what to do.
/// More than one byte is read only after a byte that starts a magic
/// number, which no JSON line starts with, so a terminal is never waited
/// on for more than a line gives.
fn sniff_compression(mut reader: Box<dyn Read + Send>) -> io::Result<Box<dyn Read + Send>> {
    const GZIP: &[u8] = &[0x1f, 0x8b];
    const ZSTD: &[u8] = &[0x28, 0xb5, 0x2f, 0xfd];
    let mut head = Vec::with_capacity(4);
    let mut ended = false;
    while head.len() < 4 {
        let mut byte = [0u8; 1];
        match reader.read(&mut byte) {
            Ok(0) => {
                ended = true;
                break;
            }
            Ok(_) => head.push(byte[0]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
        let could_be = |magic: &[u8]| magic.starts_with(&head) || head.starts_with(magic);
        if !(could_be(GZIP) || could_be(ZSTD) || could_be(b"BZh")) || head.starts_with(GZIP) {
            break;
        }
    }
    // A source that has ended is not read again: a terminal's Ctrl-D is
    // not repeated.
    let whole: Box<dyn Read + Send> = if ended {
        Box::new(io::Cursor::new(head.clone()))
    } else {
        Box::new(io::Cursor::new(head.clone()).chain(reader))
    };
    if head.starts_with(GZIP) {
        Ok(Box::new(flate2::read::MultiGzDecoder::new(
            io::BufReader::new(whole),
        )))
    } else if head == ZSTD {
        Ok(Box::new(zstd::stream::read::Decoder::new(whole)?))
    } else if head.starts_with(b"BZh") && head.get(3).is_some_and(|b| (b'1'..=b'9').contains(b)) {
        Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "bzip2-compressed input, which this build does not read: decompress it first \
             (bzcat FILE | dedup-stream)",
        ))
    } else {
        Ok(whole)
    }
}

/// Whether a file is read through gzip: its name ends in `.gz`, as tweet
/// archives come.
pub fn is_gzip(path: &Path) -> bool {
    path.extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("gz"))
}

/// Whether a file is read through zstd: its name ends in `.zst`.
pub fn is_zstd(path: &Path) -> bool {
    path.extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("zst"))
}

/// An I/O error with the path it happened on.
fn named(path: &Path, e: io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("{}: {e}", path.display()))
}

fn in_source(source: &Source, e: io::Error) -> io::Error {
    match source {
        Source::Stdin => e,
        Source::File(path) => named(path, e),
    }
}

/// Checks that every input file can be opened for reading, before the run
/// starts. Stdin (`-`) always can.
pub fn check_readable(sources: &[Source]) -> io::Result<()> {
    for source in sources {
        if let Source::File(path) = source {
            if path.is_dir() {
                return Err(named(
                    path,
                    io::Error::new(io::ErrorKind::InvalidInput, "is a directory"),
                ));
            }
            // A named pipe is not opened to try it: opening it waits for a
            // writer, and closing it again throws away what that writer
            // sent first. The run's own open reports a problem with it.
            if !is_fifo(path) {
                File::open(path).map_err(|e| named(path, e))?;
            }
        }
    }
    Ok(())
}

/// Whether `path` is a named pipe (FIFO).
fn is_fifo(path: &Path) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        fs::metadata(path).is_ok_and(|m| m.file_type().is_fifo())
    }
    #[cfg(not(unix))]
    {
        let _ = path;
        false
    }
}

/// Checks that `path` can be written (created or replaced) later, without
/// changing anything: its directory exists and takes a new file, and the
/// path is not a directory. A file that exists is left as it is.
pub fn check_writable(path: &Path) -> io::Result<()> {
    if path.as_os_str().is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "the path is empty",
        ));
    }
    if path.is_dir() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "is a directory",
        ));
    }
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    if !dir.is_dir() {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("the directory {} does not exist", dir.display()),
        ));
    }
    // Files are written next to their final name, then renamed: the
    // directory must take a new file. Try one, and remove it.
    let probe = dir.join(format!(".dedup-stream-probe-{}", std::process::id()));
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&probe)
        .map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("cannot create a file in {}: {e}", dir.display()),
            )
        })?;
    let _ = fs::remove_file(&probe);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_all(sources: Vec<Source>) -> (Vec<u8>, Arc<LineMap>) {
        let mut inputs = Inputs::new(sources);
        let map = inputs.line_map();
        let mut out = Vec::new();
        inputs.read_to_end(&mut out).unwrap();
        (out, map)
    }

    #[test]
    fn files_are_chained_without_their_boms_and_located_by_line() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a.jsonl");
        let b = dir.path().join("b.jsonl");
        let empty = dir.path().join("empty.jsonl");
        fs::write(&a, b"\xEF\xBB\xBFa1\na2").unwrap();
        fs::write(&empty, b"").unwrap();
        fs::write(&b, b"\xEF\xBB\xBFb1\nb2\nb3\n").unwrap();
        let sources = vec![
            Source::File(a.clone()),
            Source::File(empty),
            Source::File(b.clone()),
        ];
        let (out, map) = read_all(sources);
        assert_eq!(out, b"a1\na2\nb1\nb2\nb3\n");
        assert_eq!(map.locate(2).to_string(), format!("{}:2", a.display()));
        assert_eq!(map.locate(3).to_string(), format!("{}:1", b.display()));
        assert_eq!(map.locate(5).to_string(), format!("{}:3", b.display()));
        assert_eq!(map.first_line().as_deref(), Some(&b"a1"[..]));
    }

    #[test]
    fn gzip_files_are_read_decompressed() {
        use std::io::Write;
        let dir = tempfile::tempdir().unwrap();
        let gz = dir.path().join("a.jsonl.gz");
        let mut members = Vec::new();
        for part in [&b"\xEF\xBB\xBFa1\na2\n"[..], b"a3"] {
            let mut encoder =
                flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            encoder.write_all(part).unwrap();
            members.extend(encoder.finish().unwrap());
        }
        fs::write(&gz, members).unwrap();
        let plain = dir.path().join("b.jsonl");
        fs::write(&plain, b"b1\n").unwrap();
        let (out, map) = read_all(vec![Source::File(gz.clone()), Source::File(plain)]);
        assert_eq!(out, b"a1\na2\na3\nb1\n");
        assert_eq!(map.locate(3).to_string(), format!("{}:3", gz.display()));
        let corrupt = dir.path().join("c.gz");
        fs::write(&corrupt, b"not gzip at all").unwrap();
        let mut inputs = Inputs::new(vec![Source::File(corrupt)]);
        let error = inputs.read_to_end(&mut Vec::new()).unwrap_err();
        assert!(error.to_string().contains("c.gz"), "{error}");
    }

    #[test]
    fn a_partial_bom_is_kept_as_data() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a");
        fs::write(&a, b"\xEF\xBBx\n").unwrap();
        assert_eq!(read_all(vec![Source::File(a)]).0, b"\xEF\xBBx\n");
    }

    #[test]
    fn unwritable_paths_are_caught_and_nothing_is_left_behind() {
        let dir = tempfile::tempdir().unwrap();
        assert!(check_writable(&dir.path().join("no/such/dir/x.state")).is_err());
        assert!(check_writable(dir.path()).is_err());
        let fine = dir.path().join("x.state");
        check_writable(&fine).unwrap();
        assert!(!fine.exists());
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 0);
    }
}

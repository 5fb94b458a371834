//! The files a run writes (`--stats`, `--state`, `-o/--output`,
//! `--rejects`), and the
//! rule that keeps them from replacing what is not theirs.
//!
//! A path given to an output option is a slip away from a data file: in
//! ripgrep `--stats` takes no value, so `dedup-stream --stats tweets.jsonl`
//! is easy to type, and would replace the tweets with a stats object. So,
//! before any input is read, [`check`] refuses:
//!
//! - a path that is also an input file (the same file: same device and
//!   inode, whatever the spelling), or that another output option names;
//! - an existing regular file that is not of the option's own kind: a
//!   stats file must be a JSON object with the stats' counts, a state file
//!   must start with the state-file magic ([`crate::state::snapshot::MAGIC`]), a
//!   tagged output's first line must be a tagged line (a JSON object with
//!   a `"dedup"` member) unless `--force` says to replace it, a rejects
//!   file's first line must have a `"reason"`;
//! - for a state file, anything but a regular file (`/dev/null` would be
//!   replaced by the rename that makes saves atomic).
//!
//! Without `-o`, [`check_stdout`] refuses a standard output that is one of
//! the input files (`dedup-stream f >> f` would read its own output for
//! ever, `dedup-stream f > f` finds `f` already emptied by the shell), by
//! device and inode as GNU cat does; a pipe, a terminal or `/dev/null` is
//! never an input.
//!
//! An empty file is taken: there is nothing in it to lose (`mktemp` makes
//! them). Stats and tagged output to something other than a regular file
//! (`/dev/stdout`, a pipe) are written into it as it is.
//!
//! [`AtomicFile`] writes the tagged output: into a temporary file beside the
//! target, renamed over it once the run succeeded, so a failed run leaves
//! the old file whole.

use std::fs::{self, File};
use std::io::{self, BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};

use crate::wire::input::Source;

/// What an output file holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutputKind {
    /// The end-of-run summary as JSON (`--stats`).
    Stats,
    /// An index's state file (`--state`).
    State,
    /// Tagged JSON lines (`-o/--output`).
    Tagged,
    /// Skipped lines with where they were and why (`--rejects`).
    Rejects,
    /// `tune`'s table as CSV (`--csv`).
    TuneCsv,
    /// `tune`'s table as JSON (`--json`).
    TuneJson,
    /// `report`'s HTML page (`report -o`).
    Report,
}

impl OutputKind {
    /// The option that names it.
    pub fn option(self) -> &'static str {
        match self {
            OutputKind::Stats => "--stats",
            OutputKind::State => "--state",
            OutputKind::Tagged => "--output",
            OutputKind::Rejects => "--rejects",
            OutputKind::TuneCsv => "--csv",
            OutputKind::TuneJson => "--json",
            OutputKind::Report => "--output",
        }
    }
}

/// How a front end spells the options in [`OutputRefused`]'s messages:
/// the CLI's flags ([`Spelling::CLI`]), or another's arguments (the Python
/// package's `dst`, `state`, `force=True`), so that the same checks speak
/// the caller's language.
#[derive(Clone, Copy, Debug)]
pub struct Spelling {
    /// The name of each kind's option.
    pub option: fn(OutputKind) -> &'static str,
    /// How to ask for a tagged output to replace any file.
    pub force: &'static str,
    /// Whether there is a `--fresh-state` to mention.
    pub fresh_state: bool,
}

impl Spelling {
    /// The command line's: `--output`, `--force`, `--fresh-state`.
    pub const CLI: Spelling = Spelling {
        option: OutputKind::option,
        force: "--force",
        fresh_state: true,
    };
}

/// Why an output path is refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OutputRefused {
    /// The path is one of the input files.
    #[error("{option} {path}: is also an input file; it would be overwritten")]
    IsInput {
        /// The option.
        option: &'static str,
        /// The path as given.
        path: String,
    },
    /// Standard output is one of the input files (`dedup-stream f >> f`).
    #[error(
        "standard output is the input {path}: the run would read what it writes (`> {path}` \
         has already emptied it; `>> {path}` never ends); write to another file, or use -o FILE"
    )]
    StdoutIsInput {
        /// The input as given (`<stdin>` for standard input).
        path: String,
    },
    /// Two output options name one file.
    #[error("{option} {path}: is also the file of {other}")]
    SameAsOther {
        /// The option.
        option: &'static str,
        /// The path as given.
        path: String,
        /// The other option.
        other: &'static str,
    },
    /// An existing file is not of the option's kind.
    #[error("{option} {path}: the file exists and is not {kind}; refusing to replace it ({hint})")]
    NotOurs {
        /// The option.
        option: &'static str,
        /// The path as given.
        path: String,
        /// What the option's files are.
        kind: &'static str,
        /// What to do instead.
        hint: String,
    },
    /// The path cannot be written (no such directory, a directory, …).
    #[error("{option} {path}: cannot write there: {source}")]
    Unwritable {
        /// The option.
        option: &'static str,
        /// The path as given.
        path: String,
        /// Why.
        #[source]
        source: io::Error,
    },
}

/// The most bytes of an existing file read to tell its kind.
const SNIFF_MAX: u64 = 1 << 20;

/// Checks the output paths of a run before any input is read: see the
/// module documentation. `outputs` pairs each path with its kind; `force`
/// lets a tagged output replace a file that is not tagged output.
pub fn check(
    outputs: &[(OutputKind, &Path)],
    inputs: &[Source],
    force: bool,
) -> Result<(), OutputRefused> {
    check_spelt(outputs, inputs, force, Spelling::CLI)
}

/// [`check`], its messages naming the options as `spelling` does.
pub fn check_spelt(
    outputs: &[(OutputKind, &Path)],
    inputs: &[Source],
    force: bool,
    spelling: Spelling,
) -> Result<(), OutputRefused> {
    for (i, &(kind, path)) in outputs.iter().enumerate() {
        let option = (spelling.option)(kind);
        let shown = || path.display().to_string();
        crate::wire::input::check_writable(path).map_err(|source| OutputRefused::Unwritable {
            option,
            path: shown(),
            source,
        })?;
        for input in inputs {
            if let Source::File(input) = input
                && same_file(path, input)
            {
                return Err(OutputRefused::IsInput {
                    option,
                    path: shown(),
                });
            }
        }
        if let Some(&(other, _)) = outputs[..i]
            .iter()
            .find(|(_, other)| same_file(path, other) || *other == path)
        {
            return Err(OutputRefused::SameAsOther {
                option,
                path: shown(),
                other: (spelling.option)(other),
            });
        }
        let Ok(meta) = fs::metadata(path) else {
            continue; // Not there yet: nothing to lose.
        };
        let not_ours = |kind_name, hint: &str| OutputRefused::NotOurs {
            option,
            path: shown(),
            kind: kind_name,
            hint: hint.to_string(),
        };
        if !meta.is_file() {
            if kind == OutputKind::State {
                return Err(not_ours(
                    "a regular file",
                    "a state file is replaced by a rename; name a regular file",
                ));
            }
            continue; // Written into as it is: /dev/stdout, a pipe.
        }
        if meta.len() == 0 {
            continue;
        }
        let ours = match kind {
            OutputKind::Stats => is_stats(path),
            OutputKind::State => is_state(path),
            OutputKind::Tagged => force || is_tagged(path),
            OutputKind::Rejects => first_line_has(path, "reason"),
            OutputKind::TuneCsv => head(path).starts_with(crate::tune::CSV_HEADER.as_bytes()),
            OutputKind::TuneJson => serde_json::from_slice::<serde_json::Value>(&head(path))
                .is_ok_and(|v| v.get("points").is_some_and(|p| p.is_array())),
            OutputKind::Report => {
                memchr::memmem::find(&head(path), crate::report_html::GENERATOR.as_bytes())
                    .is_some()
            }
        };
        if !ours {
            return Err(match kind {
                OutputKind::Stats => not_ours(
                    "a stats file (a JSON object of counts)",
                    "name a new file, or remove it first",
                ),
                OutputKind::State if spelling.fresh_state => not_ours(
                    "a state file",
                    "name a new file, or remove it first; --fresh-state replaces only a state \
                     file that cannot be loaded",
                ),
                OutputKind::State => {
                    not_ours("a state file", "name a new file, or remove it first")
                }
                OutputKind::Tagged => not_ours(
                    "tagged output (its first line has no \"dedup\" member)",
                    &format!("name a new file, or pass {} to replace it", spelling.force),
                ),
                OutputKind::Rejects => not_ours(
                    "a rejects file (its first line has no \"reason\" member)",
                    "name a new file, or remove it first",
                ),
                OutputKind::TuneCsv => {
                    not_ours("a tune table (CSV)", "name a new file, or remove it first")
                }
                OutputKind::TuneJson => not_ours(
                    "a tune table (JSON with \"points\")",
                    "name a new file, or remove it first",
                ),
                OutputKind::Report => not_ours(
                    "a report written by dedup-stream report",
                    "name a new file, or remove it first",
                ),
            });
        }
    }
    Ok(())
}

/// Refuses a run whose standard output is a regular file that is also one
/// of `inputs` (standard input included: `dedup-stream < f >> f`), by
/// device and inode, as GNU cat does. Anything else on standard output (a
/// pipe, a terminal, `/dev/null`, another file) passes.
pub fn check_stdout(inputs: &[Source]) -> Result<(), OutputRefused> {
    let Some(stdout) = std_metadata(StdStream::Out).filter(fs::Metadata::is_file) else {
        return Ok(());
    };
    // No file at all reads standard input.
    let stdin_only = [Source::Stdin];
    let inputs = if inputs.is_empty() {
        &stdin_only[..]
    } else {
        inputs
    };
    for input in inputs {
        let meta = match input {
            Source::Stdin => std_metadata(StdStream::In),
            Source::File(path) => fs::metadata(path).ok(),
        };
        if meta.is_some_and(|meta| meta.is_file() && same_inode(&meta, &stdout)) {
            return Err(OutputRefused::StdoutIsInput {
                path: input.to_string(),
            });
        }
    }
    Ok(())
}

/// Which standard stream [`std_metadata`] looks at.
#[derive(Clone, Copy)]
enum StdStream {
    In,
    Out,
}

/// What a standard stream is open on (`fstat`), if it is open.
#[cfg(unix)]
fn std_metadata(stream: StdStream) -> Option<fs::Metadata> {
    use std::os::fd::AsFd;
    // A duplicate of the descriptor, so that the `File` closing it on drop
    // leaves the stream itself open.
    let fd = match stream {
        StdStream::In => io::stdin().as_fd().try_clone_to_owned(),
        StdStream::Out => io::stdout().as_fd().try_clone_to_owned(),
    };
    File::from(fd.ok()?).metadata().ok()
}

#[cfg(not(unix))]
fn std_metadata(_: StdStream) -> Option<fs::Metadata> {
    None
}

/// Whether two paths name one existing file.
fn same_file(a: &Path, b: &Path) -> bool {
    match (fs::metadata(a), fs::metadata(b)) {
        (Ok(a), Ok(b)) => same_inode(&a, &b),
        _ => false,
    }
}

#[cfg(unix)]
fn same_inode(a: &fs::Metadata, b: &fs::Metadata) -> bool {
    use std::os::unix::fs::MetadataExt;
    a.dev() == b.dev() && a.ino() == b.ino()
}

#[cfg(not(unix))]
fn same_inode(_: &fs::Metadata, _: &fs::Metadata) -> bool {
    false
}

/// The first `SNIFF_MAX` bytes of a file.
fn head(path: &Path) -> Vec<u8> {
    let mut bytes = Vec::new();
    if let Ok(file) = File::open(path) {
        let _ = file.take(SNIFF_MAX).read_to_end(&mut bytes);
    }
    bytes
}

/// A JSON object holding the counts `--stats` writes.
fn is_stats(path: &Path) -> bool {
    serde_json::from_slice::<serde_json::Value>(&head(path)).is_ok_and(|v| {
        ["messages", "new", "duplicates", "invalid"]
            .iter()
            .all(|key| v.get(key).is_some_and(serde_json::Value::is_u64))
    })
}

/// Starts with the state-file magic.
fn is_state(path: &Path) -> bool {
    let mut magic = [0u8; 8];
    File::open(path)
        .and_then(|mut f| f.read_exact(&mut magic))
        .is_ok_and(|()| magic == crate::state::snapshot::MAGIC)
}

/// Its first line is a JSON object with a `"dedup"` object member: a line
/// this tool wrote.
fn is_tagged(path: &Path) -> bool {
    first_line(path).is_some_and(|v| v.get("dedup").is_some_and(serde_json::Value::is_object))
}

/// Its first line is a JSON object with a `member` string.
fn first_line_has(path: &Path, member: &str) -> bool {
    first_line(path).is_some_and(|v| v.get(member).is_some_and(serde_json::Value::is_string))
}

/// The first line of a file, as JSON.
fn first_line(path: &Path) -> Option<serde_json::Value> {
    let Ok(file) = File::open(path) else {
        return None;
    };
    let mut line = Vec::new();
    if BufReader::new(file.take(SNIFF_MAX))
        .read_until(b'\n', &mut line)
        .is_err()
    {
        return None;
    }
    serde_json::from_slice(&line).ok()
}

/// Writes `bytes` to an output file: atomically (see
/// [`crate::state::snapshot::write_atomic`]) when it is a regular file or not
/// there yet, into it as it is otherwise (`/dev/stdout`).
pub fn write_file(path: &Path, bytes: &[u8]) -> io::Result<()> {
    match fs::metadata(path) {
        Ok(meta) if !meta.is_file() => fs::write(path, bytes),
        _ => crate::state::snapshot::write_atomic(path, bytes),
    }
}

/// A file written whole or not at all: a temporary file beside the target
/// (or the target itself when it is not a regular file, as `/dev/stdout`),
/// renamed over the target by [`AtomicFile::commit`]. Dropped without a
/// commit, it removes the temporary file and leaves the target as it was.
#[derive(Debug)]
pub struct AtomicFile {
    file: File,
    /// The temporary file, when there is one to rename.
    temp: Option<PathBuf>,
    target: PathBuf,
}

impl AtomicFile {
    /// Opens the temporary file for `target`.
    pub fn create(target: &Path) -> io::Result<AtomicFile> {
        if fs::metadata(target).is_ok_and(|m| !m.is_file()) {
            return Ok(AtomicFile {
                file: fs::OpenOptions::new().write(true).open(target)?,
                temp: None,
                target: target.to_path_buf(),
            });
        }
        let dir = match target.parent() {
            Some(dir) if !dir.as_os_str().is_empty() => dir,
            _ => Path::new("."),
        };
        let name = target
            .file_name()
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "the path names no file"))?;
        let temp = dir.join(format!(
            ".{}.tmp-{}-out",
            name.to_string_lossy(),
            std::process::id()
        ));
        let file = fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&temp)?;
        Ok(AtomicFile {
            file,
            temp: Some(temp),
            target: target.to_path_buf(),
        })
    }

    /// A second handle on the file, to write through (the pipeline's
    /// writer takes ownership of one).
    pub fn writer(&self) -> io::Result<File> {
        self.file.try_clone()
    }

    /// Syncs the file and renames it over the target.
    pub fn commit(mut self) -> io::Result<()> {
        self.file.flush()?;
        let Some(temp) = self.temp.take() else {
            return Ok(());
        };
        let result = self
            .file
            .sync_all()
            .and_then(|()| fs::rename(&temp, &self.target));
        if result.is_err() {
            let _ = fs::remove_file(&temp);
        }
        result
    }
}

impl Drop for AtomicFile {
    fn drop(&mut self) {
        if let Some(temp) = self.temp.take() {
            let _ = fs::remove_file(temp);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_files_of_their_own_kind_are_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let at = |name: &str, content: &[u8]| {
            let path = dir.path().join(name);
            fs::write(&path, content).unwrap();
            path
        };
        let data = at("tweets.jsonl", b"{\"id\":1,\"text\":\"hello\"}\n");
        let stats = at(
            "run.json",
            b"{\"messages\":1,\"new\":1,\"duplicates\":0,\"invalid\":0}\n",
        );
        let tagged = at("out.jsonl", b"{\"id\":1,\"dedup\":{\"status\":\"new\"}}\n");
        let mut state = crate::state::snapshot::MAGIC.to_vec();
        state.extend_from_slice(b"rest");
        let state = at("x.state", &state);
        let empty = at("empty", b"");
        let ok = |kind, path: &Path| check(&[(kind, path)], &[], false).is_ok();
        assert!(ok(OutputKind::Stats, &stats) && ok(OutputKind::Stats, &empty));
        assert!(!ok(OutputKind::Stats, &data) && !ok(OutputKind::Stats, &tagged));
        assert!(ok(OutputKind::State, &state) && !ok(OutputKind::State, &data));
        assert!(ok(OutputKind::Tagged, &tagged) && !ok(OutputKind::Tagged, &data));
        assert!(check(&[(OutputKind::Tagged, &data)], &[], true).is_ok());
        assert!(ok(OutputKind::Stats, &dir.path().join("new.json")));
        #[cfg(unix)]
        assert!(!ok(OutputKind::State, Path::new("/dev/null")));

        // An input, however spelt, and two options on one file.
        let spelt = dir.path().join(".").join("out.jsonl");
        let inputs = [Source::File(spelt)];
        assert!(matches!(
            check(&[(OutputKind::Tagged, &tagged)], &inputs, true),
            Err(OutputRefused::IsInput { .. })
        ));
        let fresh = dir.path().join("fresh.json");
        assert!(matches!(
            check(
                &[(OutputKind::Stats, &fresh), (OutputKind::State, &fresh)],
                &[],
                false
            ),
            Err(OutputRefused::SameAsOther { .. })
        ));
    }

    #[test]
    fn an_atomic_file_replaces_its_target_only_on_commit() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("out.jsonl");
        fs::write(&target, b"old\n").unwrap();
        let file = AtomicFile::create(&target).unwrap();
        file.writer().unwrap().write_all(b"new\n").unwrap();
        drop(file);
        assert_eq!(fs::read(&target).unwrap(), b"old\n");
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
        let file = AtomicFile::create(&target).unwrap();
        file.writer().unwrap().write_all(b"new\n").unwrap();
        file.commit().unwrap();
        assert_eq!(fs::read(&target).unwrap(), b"new\n");
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
    }
}

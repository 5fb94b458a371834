//! The sidecar's journal (`serve --state FILE`): an append-only log of the
//! messages indexed since the last snapshot, so that a `kill -9` (or a
//! power cut, with `--fsync always`) loses nothing that was answered.
//!
//! - **Where**: `FILE.journal`, beside the state file.
//! - **When**: the engine's owner appends a batch's checks (queries change
//!   nothing) before the batch's replies are handed to its connection;
//!   [`Fsync`] says when the bytes are forced to the disk. A process killed
//!   with `kill -9` loses nothing written, whatever the policy (the bytes
//!   are in the kernel); a power cut loses what was not synced.
//! - **Snapshots**: when the owner encodes a snapshot it appends a *marker*
//!   naming that snapshot ([`SnapshotId`]: its CRC-32 and length). Once the
//!   state file is written, the journal is replaced (a temporary renamed
//!   over it) by one whose header names the new snapshot and that holds
//!   only the records after the marker. A crash at any point leaves a state
//!   file and a journal that say together what was indexed: the journal's
//!   header names the state file on disk (replay it all), or one of its
//!   markers does (replay what follows the marker).
//! - **Start**: the state file is loaded, then the journal's messages are
//!   decided again, in order, with the times they had, through the same
//!   engine: the index is the one the process had. A torn last record (a
//!   write cut short) fails its CRC-32 and is dropped with a warning, never
//!   misread; so is anything after it.
//!
//! Layout (integers little-endian): a header of [`MAGIC`], the version
//! (u32), the settings' fingerprint (u64, as in state files), and the
//! snapshot it follows (u32 CRC-32, u64 length; zeros for none); then
//! records of a u32 payload length, the payload's u32 CRC-32, and the
//! payload: `0`, the message's time (i64 ms) and its line's bytes; `1`
//! and a [`SnapshotId`]; or (version 2) `2` and the id of a removal (a
//! deletion notice, `"dedup_op":"remove"`), encoded as in state files.
//! Version 1 journals, which hold no removals, are still read.

use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::{Duration, Instant};

use crate::engine::{Deduper, IndexStore, Preparer};
use crate::wire::batch::{self, Item, Op, PreparedBatch, RawBatch};
use crate::wire::record::{Decoder, MessageId};

/// The first bytes of a journal.
pub const MAGIC: [u8; 8] = *b"\x89DDJRNL\n";
/// The journal layout's version: 2 since removals are journaled (a build
/// that reads version 1 only would take their records for a torn end).
const VERSION: u32 = 2;
/// The oldest version still read.
const PREVIOUS_VERSION: u32 = 1;
/// Bytes of the header.
const HEADER: usize = 8 + 4 + 8 + 12;
/// Record payload kinds.
const MESSAGE: u8 = 0;
const MARKER: u8 = 1;
const REMOVE: u8 = 2;
/// Longest record payload read back: a line is at most `--max-line-bytes`
/// (its own limit is checked when it is read), so anything longer is a torn
/// or foreign length.
const MAX_PAYLOAD: usize = 1 << 30;
/// Messages decided again per batch when a journal is replayed.
const REPLAY_BATCH: usize = 512;
/// With [`Fsync::EverySec`], the most time written bytes stay unsynced.
pub const SYNC_EVERY: Duration = Duration::from_secs(1);

/// When the journal's bytes are forced to the disk (`--fsync`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Fsync {
    /// Before every batch's replies go out: a power cut loses nothing
    /// answered.
    Always,
    /// At most a second after they were written (Redis's `appendfsync
    /// everysec`): a power cut loses at most about a second.
    #[default]
    EverySec,
    /// When the system chooses: a power cut may lose more; `kill -9` still
    /// loses nothing.
    Never,
}

impl FromStr for Fsync {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "always" => Ok(Fsync::Always),
            "everysec" => Ok(Fsync::EverySec),
            "never" => Ok(Fsync::Never),
            _ => Err(format!("expected always, everysec or never, got {s:?}")),
        }
    }
}

impl fmt::Display for Fsync {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Fsync::Always => "always",
            Fsync::EverySec => "everysec",
            Fsync::Never => "never",
        })
    }
}

/// Which state file a journal follows: the file's CRC-32 and length.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SnapshotId {
    crc: u32,
    len: u64,
}

impl SnapshotId {
    /// No state file (an index that started empty).
    pub const NONE: SnapshotId = SnapshotId { crc: 0, len: 0 };

    /// The id of a state file's bytes.
    pub fn of(bytes: &[u8]) -> SnapshotId {
        SnapshotId {
            crc: crc32fast::hash(bytes),
            len: bytes.len() as u64,
        }
    }

    /// The id of the state file at `path`; [`SnapshotId::NONE`] when there
    /// is none.
    pub fn of_file(path: &Path) -> io::Result<SnapshotId> {
        match fs::read(path) {
            Ok(bytes) => Ok(SnapshotId::of(&bytes)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(SnapshotId::NONE),
            Err(e) => Err(e),
        }
    }

    fn encode(self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.crc.to_le_bytes());
        out.extend_from_slice(&self.len.to_le_bytes());
    }

    fn decode(bytes: &[u8]) -> Option<SnapshotId> {
        Some(SnapshotId {
            crc: u32::from_le_bytes(bytes.get(..4)?.try_into().ok()?),
            len: u64::from_le_bytes(bytes.get(4..12)?.try_into().ok()?),
        })
    }
}

/// Why a journal could not be opened.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum JournalError {
    /// Reading or writing it failed.
    #[error("journal {path}: {source}")]
    Io {
        /// The journal.
        path: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// The file is not a journal of this version.
    #[error("journal {path}: not a dedup-stream journal (or of another version)")]
    NotAJournal {
        /// The journal.
        path: PathBuf,
    },
    /// It was written with other settings than this process's.
    #[error("journal {path}: written with other settings than these")]
    Settings {
        /// The journal.
        path: PathBuf,
    },
}

/// What opening a journal found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Replayed {
    /// Messages decided again.
    pub messages: u64,
    /// Bytes of a torn or corrupt end, dropped.
    pub dropped_bytes: u64,
    /// The journal followed neither the state file nor a snapshot it names
    /// (the state file was replaced, or started afresh): it was set aside
    /// unread, renamed `FILE.journal.unrelated`.
    pub unrelated: bool,
}

/// The journal of a state file, open for appending (see the module
/// documentation).
#[derive(Debug)]
pub struct Journal {
    path: PathBuf,
    file: File,
    fsync: Fsync,
    fingerprint: u64,
    /// Bytes in the file.
    len: u64,
    /// The record buffer, reused.
    buf: Vec<u8>,
    /// Written bytes not yet synced (with [`Fsync::EverySec`]).
    dirty: bool,
    last_sync: Instant,
    /// The last snapshot marked, and where the records after its marker
    /// start.
    marked: Option<(SnapshotId, u64)>,
    /// Whether writing failed (said once; the journal then stops).
    failed: bool,
}

/// The journal beside a state file: `FILE.journal`.
pub fn path_for(state: &Path) -> PathBuf {
    let mut name = state.as_os_str().to_owned();
    name.push(".journal");
    PathBuf::from(name)
}

fn header(fingerprint: u64, base: SnapshotId) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER);
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.extend_from_slice(&fingerprint.to_le_bytes());
    base.encode(&mut out);
    out
}

fn push_record(out: &mut Vec<u8>, payload: impl FnOnce(&mut Vec<u8>)) {
    let start = out.len();
    out.extend_from_slice(&[0; 8]);
    payload(out);
    let body = &out[start + 8..];
    let len = body.len() as u32;
    let crc = crc32fast::hash(body);
    out[start..start + 4].copy_from_slice(&len.to_le_bytes());
    out[start + 4..start + 8].copy_from_slice(&crc.to_le_bytes());
}

/// A record read back.
enum Record<'a> {
    Message { time: i64, line: &'a [u8] },
    Marker(SnapshotId),
    Remove(MessageId),
}

/// The whole records of `bytes` (after the header), and where they end.
fn records(bytes: &[u8]) -> (Vec<Record<'_>>, usize) {
    let mut at = HEADER;
    let mut out = Vec::new();
    while let Some(head) = bytes.get(at..at + 8) {
        let len = u32::from_le_bytes(head[..4].try_into().expect("4 bytes")) as usize;
        let crc = u32::from_le_bytes(head[4..].try_into().expect("4 bytes"));
        if len == 0 || len > MAX_PAYLOAD {
            break;
        }
        let Some(body) = bytes.get(at + 8..at + 8 + len) else {
            break;
        };
        if crc32fast::hash(body) != crc {
            break;
        }
        let record = match body[0] {
            MESSAGE if body.len() >= 9 => Record::Message {
                time: i64::from_le_bytes(body[1..9].try_into().expect("8 bytes")),
                line: &body[9..],
            },
            MARKER => match SnapshotId::decode(&body[1..]) {
                Some(id) => Record::Marker(id),
                None => break,
            },
            REMOVE => {
                let mut r = crate::state::snapshot::Reader::new(&body[1..]);
                match r.u8().ok().and_then(|kind| r.id(kind).ok()) {
                    Some(id) if r.is_empty() => Record::Remove(id),
                    _ => break,
                }
            }
            _ => break,
        };
        out.push(record);
        at += 8 + len;
    }
    (out, at)
}

/// Opens the journal of the state file `state`, which was loaded into
/// `deduper` and is `base` ([`SnapshotId::of_file`]): decides again the
/// messages it holds after that snapshot, then starts it anew, holding
/// them, ready for appending. `fingerprint` is the settings' (see
/// [`crate::state::snapshot::fingerprint`]); `decoder` reads lines as the server
/// does.
pub fn open(
    state: &Path,
    base: SnapshotId,
    fingerprint: u64,
    fsync: Fsync,
    deduper: &mut Deduper,
    preparer: &Preparer,
    decoder: &Decoder,
) -> Result<(Journal, Replayed), JournalError> {
    let path = path_for(state);
    let io_error = |source| JournalError::Io {
        path: path.clone(),
        source,
    };
    let bytes = match fs::read(&path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(io_error(e)),
    };
    let mut replayed = Replayed::default();
    let mut kept = header(fingerprint, base);
    if !bytes.is_empty() {
        let version = bytes
            .get(8..12)
            .map(|v| u32::from_le_bytes(v.try_into().expect("4 bytes")));
        if bytes.len() < HEADER
            || bytes[..8] != MAGIC
            || !version.is_some_and(|v| (PREVIOUS_VERSION..=VERSION).contains(&v))
        {
            return Err(JournalError::NotAJournal { path });
        }
        if bytes[12..20] != fingerprint.to_le_bytes() {
            return Err(JournalError::Settings { path });
        }
        let follows = SnapshotId::decode(&bytes[20..32]).expect("12 bytes");
        let (records, end) = records(&bytes);
        replayed.dropped_bytes = (bytes.len() - end) as u64;
        // Where the records not in the state file begin.
        let from = if follows == base {
            Some(0)
        } else {
            records
                .iter()
                .rposition(|r| matches!(r, Record::Marker(id) if *id == base))
                .map(|at| at + 1)
        };
        match from {
            Some(from) => {
                // Messages are decided again in batches, a removal between
                // two of them where it came.
                let mut pending: Vec<(i64, &[u8])> = Vec::new();
                for record in &records[from..] {
                    match record {
                        Record::Message { time, line } => {
                            pending.push((*time, *line));
                            push_message(&mut kept, *time, line);
                            replayed.messages += 1;
                            if pending.len() == REPLAY_BATCH {
                                replay(&pending, deduper, preparer, decoder);
                                pending.clear();
                            }
                        }
                        Record::Remove(id) => {
                            replay(&pending, deduper, preparer, decoder);
                            pending.clear();
                            deduper.remove(id);
                            push_remove(&mut kept, id);
                            replayed.messages += 1;
                        }
                        Record::Marker(_) => {}
                    }
                }
                replay(&pending, deduper, preparer, decoder);
            }
            None => {
                // Kept for whoever wants it, out of the way.
                let mut aside = path.as_os_str().to_owned();
                aside.push(".unrelated");
                fs::rename(&path, &aside).map_err(io_error)?;
                replayed.unrelated = true;
            }
        }
    }
    // The journal starts anew: its header names the state file loaded, and
    // it holds what was replayed (a torn end and old markers left out).
    crate::state::snapshot::write_atomic(&path, &kept).map_err(io_error)?;
    let file = OpenOptions::new()
        .append(true)
        .open(&path)
        .map_err(io_error)?;
    Ok((
        Journal {
            path,
            file,
            fsync,
            fingerprint,
            len: kept.len() as u64,
            buf: Vec::new(),
            dirty: false,
            last_sync: Instant::now(),
            marked: None,
            failed: false,
        },
        replayed,
    ))
}

fn push_message(out: &mut Vec<u8>, time: i64, line: &[u8]) {
    push_record(out, |out| {
        out.push(MESSAGE);
        out.extend_from_slice(&time.to_le_bytes());
        out.extend_from_slice(line);
    });
}

fn push_remove(out: &mut Vec<u8>, id: &MessageId) {
    push_record(out, |out| {
        out.push(REMOVE);
        crate::state::snapshot::encode_id(id, out);
    });
}

/// Decides `messages` again, in order, at their recorded times.
fn replay(
    messages: &[(i64, &[u8])],
    deduper: &mut Deduper,
    preparer: &Preparer,
    decoder: &Decoder,
) {
    if messages.is_empty() {
        return;
    }
    let mut raw = RawBatch::default();
    for (number, (_, line)) in messages.iter().enumerate() {
        raw.push_line(number as u64 + 1, line);
    }
    let mut prepared = batch::prepare(preparer, decoder, raw, None);
    for (item, (time, _)) in prepared.items.iter_mut().zip(messages) {
        if let Item::Message(message) = item {
            message.time = *time;
        }
    }
    let mut verdicts = Vec::new();
    // Deciding in memory cannot fail.
    let _ = deduper.decide(&batch::asks(&prepared, usize::MAX), &mut verdicts);
}

impl Journal {
    /// Where it is.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// When it syncs.
    pub fn fsync(&self) -> Fsync {
        self.fsync
    }

    /// Appends the checks and removals of a decided batch, and syncs as the policy says:
    /// call it before the batch's replies go out. A failure is logged once
    /// and ends the journal (the server goes on answering; its state file is
    /// still saved at each interval).
    pub fn append(&mut self, batch: &PreparedBatch) {
        self.append_until(batch, usize::MAX);
    }

    /// [`Journal::append`] for the items before `end` only: those decided
    /// when an invalid line stops the filter (`--on-invalid fail`).
    pub fn append_until(&mut self, batch: &PreparedBatch, end: usize) {
        if self.failed {
            return;
        }
        self.buf.clear();
        for item in batch.items.iter().take(end) {
            match item {
                Item::Message(message) if message.op == Op::Check => push_message(
                    &mut self.buf,
                    message.time,
                    &batch.raw.bytes[message.line.clone()],
                ),
                Item::Message(message) if message.op == Op::Remove => {
                    push_remove(&mut self.buf, &message.id)
                }
                _ => {}
            }
        }
        if self.buf.is_empty() {
            return;
        }
        let buf = std::mem::take(&mut self.buf);
        let result = self.file.write_all(&buf).and_then(|()| {
            self.len += buf.len() as u64;
            match self.fsync {
                Fsync::Always => self.file.sync_data(),
                Fsync::EverySec => {
                    self.dirty = true;
                    self.sync_if_due()
                }
                Fsync::Never => Ok(()),
            }
        });
        self.buf = buf;
        self.check(result);
    }

    /// With [`Fsync::EverySec`]: syncs what was written if the last sync
    /// is a second old (the server calls it every second).
    pub fn sync_if_due(&mut self) -> io::Result<()> {
        if self.dirty && self.last_sync.elapsed() >= SYNC_EVERY {
            self.file.sync_data()?;
            self.dirty = false;
            self.last_sync = Instant::now();
        }
        Ok(())
    }

    /// [`Journal::sync_if_due`], a failure logged.
    pub fn tick(&mut self) {
        if !self.failed {
            let result = self.sync_if_due();
            self.check(result);
        }
    }

    /// Marks that a snapshot `id` was encoded here: what follows is not in
    /// it.
    pub fn mark(&mut self, id: SnapshotId) {
        if self.failed {
            return;
        }
        let mut record = Vec::with_capacity(21);
        push_record(&mut record, |out| {
            out.push(MARKER);
            id.encode(out);
        });
        let result = self.file.write_all(&record).and_then(|()| {
            self.len += record.len() as u64;
            // The marker must be on disk before the snapshot it names.
            self.file.sync_data()
        });
        self.marked = Some((id, self.len));
        self.check(result);
    }

    /// The snapshot `id` is saved: the journal is replaced by one that
    /// follows it and holds only what came after its marker.
    pub fn saved(&mut self, id: SnapshotId) {
        let Some((marked, from)) = self.marked else {
            return;
        };
        if marked != id || self.failed {
            return;
        }
        let result = (|| {
            let mut tail = Vec::new();
            let mut file = File::open(&self.path)?;
            io::Seek::seek(&mut file, io::SeekFrom::Start(from))?;
            file.read_to_end(&mut tail)?;
            let mut fresh = header(self.fingerprint, id);
            fresh.extend_from_slice(&tail);
            crate::state::snapshot::write_atomic(&self.path, &fresh)?;
            self.file = OpenOptions::new().append(true).open(&self.path)?;
            self.len = fresh.len() as u64;
            self.marked = None;
            Ok(())
        })();
        self.check(result);
    }

    fn check(&mut self, result: io::Result<()>) {
        if let Err(e) = result {
            self.failed = true;
            tracing::error!(
                path = %self.path.display(),
                error = %e,
                "writing the journal failed: it stops here; what is answered from now on is \
                 kept only at the next snapshot"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::config::EngineConfig;
    use crate::wire::record::FieldSpec;

    fn line(id: u32, text: &str) -> String {
        format!("{{\"id\":{id},\"text\":\"{text}\"}}")
    }

    fn batch_of(lines: &[String], preparer: &Preparer, decoder: &Decoder) -> PreparedBatch {
        let mut raw = RawBatch::default();
        for (i, l) in lines.iter().enumerate() {
            raw.push_line(i as u64 + 1, l.as_bytes());
        }
        batch::prepare(preparer, decoder, raw, None)
    }

    #[test]
    fn a_journal_replays_what_follows_its_snapshot_and_drops_a_torn_end() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("s.state");
        let config = EngineConfig::default();
        let preparer = Preparer::new(&config);
        let decoder = Decoder::new(FieldSpec::default());
        let fingerprint = crate::state::snapshot::fingerprint(&config);
        let story = "flooding closes the coastal highway north of the city tonight";
        let open_fresh = |deduper: &mut Deduper, base| {
            open(
                &state,
                base,
                fingerprint,
                Fsync::Always,
                deduper,
                &preparer,
                &decoder,
            )
            .unwrap()
        };

        let mut deduper = Deduper::new(config.clone()).unwrap();
        let (mut journal, replayed) = open_fresh(&mut deduper, SnapshotId::NONE);
        assert_eq!(replayed, Replayed::default());
        let first = batch_of(&[line(1, story)], &preparer, &decoder);
        deduper
            .decide(&batch::asks(&first, usize::MAX), &mut Vec::new())
            .unwrap();
        journal.append(&first);
        // A snapshot taken, written, then more.
        let snapshot = crate::state::snapshot::encode(&deduper);
        let id = SnapshotId::of(&snapshot);
        journal.mark(id);
        fs::write(&state, &snapshot).unwrap();
        journal.saved(id);
        let second = batch_of(
            &[line(2, "the bakery on fifth street reopens monday")],
            &preparer,
            &decoder,
        );
        journal.append(&second);
        drop(journal);
        // A torn record at the end.
        let path = path_for(&state);
        let mut bytes = fs::read(&path).unwrap();
        let whole = bytes.len();
        bytes.extend_from_slice(&[40, 0, 0, 0, 1, 2, 3, 4, 0, 9]);
        fs::write(&path, &bytes).unwrap();

        let mut restored = Deduper::new(config.clone()).unwrap();
        crate::state::snapshot::load(&state, &mut restored).unwrap();
        let (_, replayed) = open_fresh(&mut restored, SnapshotId::of_file(&state).unwrap());
        assert_eq!(replayed.messages, 1, "only what follows the snapshot");
        assert_eq!(replayed.dropped_bytes, (bytes.len() - whole) as u64);
        assert_eq!(restored.stats().len, 2);
        // The journal was started anew without the torn end.
        assert_eq!(fs::read(&path).unwrap().len(), whole);

        // Killed after a state file was written but before the journal was
        // cut down: the marker tells what the file holds, nothing twice.
        let (mut journal, _) = open_fresh(&mut restored, SnapshotId::of_file(&state).unwrap());
        let snapshot = crate::state::snapshot::encode(&restored);
        let id = SnapshotId::of(&snapshot);
        journal.mark(id);
        fs::write(&state, &snapshot).unwrap();
        let third = batch_of(
            &[line(3, "a third story about the weather at the coast")],
            &preparer,
            &decoder,
        );
        journal.append(&third);
        drop(journal);
        let mut again = Deduper::new(config.clone()).unwrap();
        crate::state::snapshot::load(&state, &mut again).unwrap();
        let (_, replayed) = open_fresh(&mut again, id);
        assert_eq!(replayed.messages, 1, "only what follows the marker");
        assert_eq!(again.stats().len, 3);

        // Against a state file it does not follow: set aside.
        let (_, replayed) = open_fresh(&mut Deduper::new(config).unwrap(), SnapshotId::NONE);
        assert!(replayed.unrelated);
        assert!(dir.path().join("s.state.journal.unrelated").exists());
    }

    #[test]
    fn removals_are_replayed_in_their_place_and_version_1_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("s.state");
        let config = EngineConfig::default();
        let preparer = Preparer::new(&config);
        let decoder = Decoder::new(FieldSpec::default());
        let fingerprint = crate::state::snapshot::fingerprint(&config);
        let story = "flooding closes the coastal highway north of the city tonight";
        let open_fresh = |deduper: &mut Deduper| {
            open(
                &state,
                SnapshotId::NONE,
                fingerprint,
                Fsync::Always,
                deduper,
                &preparer,
                &decoder,
            )
            .unwrap()
        };
        let mut deduper = Deduper::new(config.clone()).unwrap();
        let (mut journal, _) = open_fresh(&mut deduper);
        // 1 indexed, then deleted (a notice), then 2: a copy, indexed.
        let lines = [
            line(1, story),
            r#"{"delete":{"status":{"id":1,"id_str":"1","user_id":5}}}"#.to_string(),
            line(2, story),
        ];
        let batch = batch_of(&lines, &preparer, &decoder);
        let mut verdicts = Vec::new();
        deduper
            .decide(&batch::asks(&batch, usize::MAX), &mut verdicts)
            .unwrap();
        assert_eq!(verdicts[1], crate::engine::Verdict::Deleted { held: true });
        journal.append(&batch);
        drop(journal);
        let ids = |d: &Deduper| -> Vec<MessageId> {
            d.index().iter_lru_first().map(|e| e.id.clone()).collect()
        };
        let mut replayed_into = Deduper::new(config.clone()).unwrap();
        let (journal, replayed) = open_fresh(&mut replayed_into);
        assert_eq!(replayed.messages, 3);
        assert_eq!(ids(&replayed_into), [MessageId::Integer(2)]);
        drop(journal);
        // A version 1 journal (no removals) is still read.
        let path = path_for(&state);
        let mut bytes = fs::read(&path).unwrap();
        bytes[8..12].copy_from_slice(&1u32.to_le_bytes());
        let v1: Vec<u8> = {
            let (records, _) = records(&bytes);
            let mut out = bytes[..HEADER].to_vec();
            for record in records {
                if let Record::Message { time, line } = record {
                    push_message(&mut out, time, line);
                }
            }
            out
        };
        fs::write(&path, v1).unwrap();
        let mut from_v1 = Deduper::new(config).unwrap();
        let (_, replayed) = open_fresh(&mut from_v1);
        assert_eq!(replayed.messages, 2);
        assert_eq!(ids(&from_v1), [MessageId::Integer(1)], "2 was a copy of 1");
    }
}

//! State files: the index saved to disk and loaded back, so that a restart
//! (or tomorrow's batch) still finds duplicates of what came before.
//!
//! # Format (version 5)
//!
//! All integers are little-endian.
//!
//! ```text
//! magic        8 bytes   "\x89DDSTAT\n"
//! version      u32       5
//! fingerprint  u64       shingle compatibility fingerprint (below)
//! shingling    u8 + N    length, then the shingle settings as text
//!                        ("words:1-2", "spots:2+mod:4": see
//!                        [`EngineConfig::shingle_settings`])
//! newest       i64       the newest message time seen under --window
//!                        (engine::window), -1 when none
//! next seq     u64       the arrival sequence number of the next message
//! bands        u8        the LSH bands of the posting masks below
//! count        u64       number of entries
//! entries      count ×   least recently used first:
//!   seq          u64       arrival sequence number
//!   id kind      u8        0: digit string, 1: integer, 2: raw JSON text
//!   id           u64       (kinds 0 and 1) the number
//!                u32 + N   (kind 2) length, then the id's JSON text
//!   cluster kind u8        as the id's, or 3: the entry's own id (it was new)
//!   cluster      …         (kinds 0 to 2) as the id
//!   match kind   u8        (only after a cluster of kinds 0 to 2: the entry
//!                          was a near-duplicate) the kind of the id it was
//!                          tagged a duplicate of, or 4: not known (it came
//!                          from a file of version 4 or older)
//!   match        …         (kinds 0 to 2) that id, as the id
//!   similarity   u64       (kinds 0 to 2) the bits of the f64 it was tagged
//!                          with
//!   time         i64       the message's time, milliseconds since the Unix
//!                          epoch (engine::window), 0 when saved without one
//!   shingles     u32 + 4N  count, then the sorted shingle fingerprints
//!   anchors      u8 + 4N   count (0 to 3), plus 0x80 when the text was cut
//!                          (engine::Sketch::truncated), then the anchor keys
//!   posted       u32       which of its keys (bands, anchors, exact set)
//!                          held a posting of it (engine::index::Index::posted_mask)
//! checksum     u32       CRC-32 of every byte before it
//! ```
//!
//! The match and similarity answer a repeat of the entry (a message sent
//! again under its id with the same text, see
//! [`Verdict::Repeat`](crate::engine::Verdict::Repeat)) with the verdict it
//! was first given.
//!
//! A version 5 file resumes the run exactly: the next sequence number and
//! which messages each full bucket holds are those of the saved index, so
//! a run saved and loaded decides every later message as the run that was
//! never stopped (a property test checks it). Where the threshold changed
//! (other bands), the masks are ignored and the buckets refilled as the cap
//! allows.
//!
//! Version 4 files (the same without match kind, match and similarity:
//! a repeat of a near-duplicate read from one is decided again, against
//! every message but itself), version 3 files (also without next seq,
//! bands and posted) and
//! version 2 files (also without newest, cluster and time) are still read:
//! each entry is its own cluster, with no time (under `--window` such
//! entries count as old as can be, and expire with the first message that
//! has a time).
//!
//! Shingle sets and anchor keys (which come from the tokens, not the
//! shingles) are stored (a set of more than
//! [`MAX_SHINGLES`](crate::engine::shingle::MAX_SHINGLES), written before
//! sets were capped, is cut to its smallest on load); LSH band keys are recomputed on load, so a state
//! file stays usable when the threshold, the measure, the capacity or the
//! bucket cap change. What makes stored shingles meaningless is a change
//! in how texts become shingles: the shingling or sampling option, or a version of the
//! engine that normalises or tokenises differently. The fingerprint catches
//! both: it is a hash of the shingles the running engine computes for a
//! fixed set of probe texts, so any change to those stages changes it, with
//! nothing to remember to bump by hand.
//!
//! Entries are written least recently used first and restored in that order,
//! so the restored index evicts in the same order the saved one would have.
//! A smaller capacity keeps the most recently used entries.
//!
//! # Atomicity
//!
//! [`write_atomic`] writes a temporary file in the same directory, fsyncs it,
//! renames it over the target and fsyncs the directory: a crash or `kill -9`
//! at any moment leaves either the previous file or the new one, whole.
//!
//! The temporary file is `.NAME.tmp-PID-N` (NAME the state file's name, PID
//! the saving process, N a counter). A save that fails removes its own; one
//! killed mid-way cannot, so [`remove_stale_temporaries`] removes those of
//! the same state file whose process is gone: [`load`] calls it at start,
//! and every failed save calls it too (a full disk is often full of them).
//! A temporary of a live process is kept unless that process started after
//! the file was last written (its PID was reused); where processes cannot
//! be inspected (outside Linux) only a process's own are ever removed.
//!
//! # Refusal
//!
//! [`load`] checks the magic, the version, the checksum, the fingerprint and
//! every length before it restores a single entry: a corrupt or incompatible
//! file is refused with a [`SnapshotError`] and the engine is left empty. The
//! file itself is never modified by loading.

use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::engine::config::EngineConfig;
use crate::engine::index::Joined;
use crate::engine::{Deduper, Preparer, Restored, Scratch};
use crate::wire::record::MessageId;

/// The first bytes of every state file. The high first byte and the line
/// feed catch files mangled by text-mode transfers.
pub const MAGIC: [u8; 8] = *b"\x89DDSTAT\n";

/// The format version this build writes (and reads).
pub const FORMAT_VERSION: u32 = 5;

/// The oldest format version still read (see the module doc).
pub const PREVIOUS_VERSION: u32 = 2;

/// Texts whose shingles make up the compatibility fingerprint: cases,
/// punctuation, mentions, hashtags, links, emoji and CJK, so that a change to
/// any preparing stage shows.
const PROBES: [&str; 7] = [
    "Flooding closes the coastal highway north of the city tonight, police say",
    "RT @news: BREAKING — Flooding CLOSES the coastal highway… https://t.co/abc123 #storm",
    "Prayers for the quake victims tonight #cebu #bohol #Philippines…",
    "I'm at Powell's City of Books in Portland, OR http://4sq.com/xyz",
    "😂😂😂 can't even 🙏",
    "東京で大きな地震がありました。皆さん気をつけてください",
    "Ünïcödé  spacing\tand\nnewlines; don't stop-believing 100%",
];

/// Why a state file could not be loaded or saved.
#[derive(Debug)]
#[non_exhaustive]
pub enum ErrorKind {
    /// Reading or writing the file failed.
    Io(io::Error),
    /// The file does not start with [`MAGIC`].
    NotAStateFile,
    /// The file was written in another format version.
    Version {
        /// The version in the file.
        found: u32,
    },
    /// The file's shingles are not comparable with this engine's.
    Incompatible {
        /// The shingle settings recorded in the file.
        found: String,
        /// The shingle settings of the running engine.
        expected: String,
    },
    /// The checksum does not match: the file is corrupt.
    Checksum,
    /// The file ends before its structure does.
    Truncated,
    /// A length, an id or a shingle set is out of shape.
    Malformed(&'static str),
}

impl std::fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ErrorKind::Io(e) => write!(f, "{e}"),
            ErrorKind::NotAStateFile => f.write_str("not a dedup-stream state file"),
            ErrorKind::Version { found } => write!(
                f,
                "format version {found}, this build reads versions {PREVIOUS_VERSION} to \
                 {FORMAT_VERSION}"
            ),
            ErrorKind::Incompatible { found, expected } if found != expected => write!(
                f,
                "written with shingling {found}, this run uses {expected} (--shingle, \
                 --sample); run with the same settings, or start empty"
            ),
            ErrorKind::Incompatible { .. } => f.write_str(
                "written by a version of dedup-stream that prepares texts differently; \
                 its shingles cannot be compared with this one's, so start empty",
            ),
            ErrorKind::Checksum => f.write_str("checksum mismatch: the file is corrupt"),
            ErrorKind::Truncated => f.write_str("the file is truncated"),
            ErrorKind::Malformed(what) => write!(f, "the file is corrupt: {what}"),
        }
    }
}

/// A state file could not be loaded or saved: which file, and why.
#[derive(Debug, thiserror::Error)]
#[error("state file {}: {kind}", path.display())]
pub struct SnapshotError {
    /// The state file.
    pub path: PathBuf,
    /// What went wrong.
    pub kind: ErrorKind,
}

impl std::error::Error for ErrorKind {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ErrorKind::Io(e) => Some(e),
            _ => None,
        }
    }
}

/// What [`load`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Loaded {
    /// No file at that path yet: the engine starts empty.
    Missing,
    /// The file was read and this many entries restored.
    Restored(usize),
}

/// The compatibility fingerprint of an engine configuration: a hash of the
/// shingles its preparing stages give a fixed set of probe texts.
pub fn fingerprint(config: &EngineConfig) -> u64 {
    let preparer = Preparer::new(config);
    let mut scratch = Scratch::default();
    let mut hasher = xxhash_rust::xxh3::Xxh3::new();
    hasher.update(config.shingle_settings().as_bytes());
    for (i, probe) in PROBES.iter().enumerate() {
        let urls = if i == 3 {
            vec![(
                std::borrow::Cow::Borrowed("http://4sq.com/xyz"),
                std::borrow::Cow::Borrowed("https://foursquare.com/v/powells"),
            )]
        } else {
            Vec::new()
        };
        let sketch = preparer.sketch(probe, &urls, &mut scratch);
        let anchors = &sketch.band_keys[preparer.lsh_params().bands..];
        for part in [&sketch.shingles, anchors] {
            hasher.update(&(part.len() as u64).to_le_bytes());
            for value in part {
                hasher.update(&value.to_le_bytes());
            }
        }
    }
    hasher.digest()
}

/// Encodes the engine's index as a state file's bytes. Runs on the engine's
/// owner: it reads the index once, in least-recently-used-first order.
pub fn encode(deduper: &Deduper) -> Vec<u8> {
    encode_version(deduper, FORMAT_VERSION)
}

/// [`encode`] in `version` ([`FORMAT_VERSION`], or for tests of reading
/// old files [`VERSION_WITHOUT_MATCHES`]).
fn encode_version(deduper: &Deduper, version: u32) -> Vec<u8> {
    let index = deduper.index();
    let shingling = deduper.config().shingle_settings();
    let mut out = Vec::with_capacity(64 + index.len() * 128);
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&version.to_le_bytes());
    out.extend_from_slice(&fingerprint(deduper.config()).to_le_bytes());
    // The settings' text is a few bytes ("chars:32+mod:64" at most).
    out.push(shingling.len() as u8);
    out.extend_from_slice(shingling.as_bytes());
    out.extend_from_slice(&deduper.newest_time().unwrap_or(-1).to_le_bytes());
    out.extend_from_slice(&deduper.next_seq().to_le_bytes());
    out.push(deduper.preparer().lsh_params().bands as u8);
    out.extend_from_slice(&(index.len() as u64).to_le_bytes());
    for (slot, entry) in index.iter_lru_first_with_slots() {
        out.extend_from_slice(&entry.seq.to_le_bytes());
        encode_id(&entry.id, &mut out);
        match entry.joined() {
            None => out.push(OWN_CLUSTER),
            Some(joined) => {
                encode_id(&joined.cluster, &mut out);
                match &joined.matched {
                    _ if version == VERSION_WITHOUT_MATCHES => {}
                    Some((of, similarity)) => {
                        encode_id(of, &mut out);
                        out.extend_from_slice(&similarity.to_bits().to_le_bytes());
                    }
                    None => out.push(UNKNOWN_MATCH),
                }
            }
        }
        out.extend_from_slice(&entry.time.to_le_bytes());
        let shingles = entry.shingles();
        out.extend_from_slice(&(shingles.len() as u32).to_le_bytes());
        for shingle in shingles {
            out.extend_from_slice(&shingle.to_le_bytes());
        }
        let anchors = deduper.anchor_keys(entry);
        // At most three anchors (engine::MAX_ANCHORS); the high bit says
        // the text was cut.
        out.push(anchors.len() as u8 | if entry.truncated() { 0x80 } else { 0 });
        for anchor in anchors {
            out.extend_from_slice(&anchor.to_le_bytes());
        }
        out.extend_from_slice(&index.posted_mask(slot).to_le_bytes());
    }
    let checksum = crc32fast::hash(&out);
    out.extend_from_slice(&checksum.to_le_bytes());
    out
}

/// The cluster kind of an entry that is its own cluster.
const OWN_CLUSTER: u8 = 3;

/// The match kind of an entry whose match is not known.
const UNKNOWN_MATCH: u8 = 4;

/// The version before [`FORMAT_VERSION`], the last without matches.
const VERSION_WITHOUT_MATCHES: u32 = 4;

/// Appends an id: its kind, then its number or its JSON text.
pub(crate) fn encode_id(id: &MessageId, out: &mut Vec<u8>) {
    match id {
        MessageId::DigitString(n) => {
            out.push(0);
            out.extend_from_slice(&n.to_le_bytes());
        }
        MessageId::Integer(n) => {
            out.push(1);
            out.extend_from_slice(&n.to_le_bytes());
        }
        MessageId::Raw(raw) => {
            out.push(2);
            out.extend_from_slice(&(raw.len() as u32).to_le_bytes());
            out.extend_from_slice(raw.as_bytes());
        }
    }
}

/// A cursor over a state file's bytes that reports running out as
/// [`ErrorKind::Truncated`].
pub(crate) struct Reader<'a> {
    bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    /// A cursor at the start of `bytes`.
    pub(crate) fn new(bytes: &'a [u8]) -> Reader<'a> {
        Reader { bytes }
    }

    /// Whether every byte has been read.
    pub(crate) fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    pub(crate) fn take(&mut self, n: usize) -> Result<&'a [u8], ErrorKind> {
        if n > self.bytes.len() {
            return Err(ErrorKind::Truncated);
        }
        let (head, tail) = self.bytes.split_at(n);
        self.bytes = tail;
        Ok(head)
    }

    pub(crate) fn u8(&mut self) -> Result<u8, ErrorKind> {
        Ok(self.take(1)?[0])
    }

    pub(crate) fn u16(&mut self) -> Result<u16, ErrorKind> {
        let mut b = [0; 2];
        b.copy_from_slice(self.take(2)?);
        Ok(u16::from_le_bytes(b))
    }

    pub(crate) fn u32(&mut self) -> Result<u32, ErrorKind> {
        let mut b = [0; 4];
        b.copy_from_slice(self.take(4)?);
        Ok(u32::from_le_bytes(b))
    }

    pub(crate) fn u64(&mut self) -> Result<u64, ErrorKind> {
        let mut b = [0; 8];
        b.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(b))
    }

    /// An id of `kind` (see [`encode_id`]).
    pub(crate) fn id(&mut self, kind: u8) -> Result<MessageId, ErrorKind> {
        Ok(match kind {
            0 => MessageId::DigitString(self.u64()?),
            1 => MessageId::Integer(self.u64()?),
            2 => {
                let len = self.u32()? as usize;
                let raw = std::str::from_utf8(self.take(len)?)
                    .map_err(|_| ErrorKind::Malformed("an id is not UTF-8"))?;
                MessageId::from_json(raw).ok_or(ErrorKind::Malformed(
                    "an id is not a JSON string or integer",
                ))?
            }
            _ => return Err(ErrorKind::Malformed("unknown id kind")),
        })
    }
}

/// Decodes a state file's bytes into `deduper`. Everything is checked before
/// the first entry is restored, so on error the engine is unchanged. Returns
/// the number of entries restored.
pub fn decode_into(bytes: &[u8], deduper: &mut Deduper) -> Result<usize, ErrorKind> {
    if bytes.len() < MAGIC.len() || bytes[..MAGIC.len()] != MAGIC {
        return Err(ErrorKind::NotAStateFile);
    }
    let mut header = Reader {
        bytes: &bytes[MAGIC.len()..],
    };
    let version = header.u32()?;
    if !(PREVIOUS_VERSION..=FORMAT_VERSION).contains(&version) {
        return Err(ErrorKind::Version { found: version });
    }
    // The checksum covers the whole file: check it before trusting any
    // length in it.
    let Some(body_len) = bytes.len().checked_sub(4) else {
        return Err(ErrorKind::Truncated);
    };
    if body_len < MAGIC.len() + 4 {
        return Err(ErrorKind::Truncated);
    }
    let (body, stored) = bytes.split_at(body_len);
    let mut stored_bytes = [0; 4];
    stored_bytes.copy_from_slice(stored);
    if crc32fast::hash(body) != u32::from_le_bytes(stored_bytes) {
        return Err(ErrorKind::Checksum);
    }

    let mut r = Reader {
        bytes: &body[MAGIC.len() + 4..],
    };
    let file_fingerprint = r.u64()?;
    let shingling_len = usize::from(r.u8()?);
    let shingling = String::from_utf8_lossy(r.take(shingling_len)?).into_owned();
    let expected = deduper.config().shingle_settings();
    if file_fingerprint != fingerprint(deduper.config()) {
        return Err(ErrorKind::Incompatible {
            found: shingling,
            expected,
        });
    }
    if shingling != expected {
        return Err(ErrorKind::Malformed(
            "the shingling does not match the fingerprint",
        ));
    }

    let newest = if version == PREVIOUS_VERSION {
        None
    } else {
        Some(r.u64()? as i64).filter(|&t| t >= 0)
    };
    // Without the sequence number, the run goes on from the newest
    // indexed message's; without the masks, the cap fills the buckets.
    let (next_seq, masks) = if version >= VERSION_WITHOUT_MATCHES {
        let next_seq = arrival(r.u64()?)?;
        let bands = usize::from(r.u8()?);
        (next_seq, bands == deduper.preparer().lsh_params().bands)
    } else {
        (0, false)
    };
    let count = r.u64()?;
    // The smallest entry is 20 bytes (a two-byte raw id, no shingle): a
    // count beyond that is corrupt, and must not size an allocation.
    if count > (r.bytes.len() / 20) as u64 {
        return Err(ErrorKind::Malformed("more entries than the file can hold"));
    }
    let mut entries = Vec::with_capacity(count as usize);
    let mut shingles: Vec<u32> = Vec::with_capacity(r.bytes.len() / 4);
    let mut anchors: Vec<u32> = Vec::new();
    for _ in 0..count {
        let seq = arrival(r.u64()?)?;
        let kind = r.u8()?;
        let id = r.id(kind)?;
        let (joined, time) = if version == PREVIOUS_VERSION {
            (None, 0)
        } else {
            let joined = match r.u8()? {
                OWN_CLUSTER => None,
                kind => {
                    let cluster = r.id(kind)?;
                    let matched = if version > VERSION_WITHOUT_MATCHES {
                        match r.u8()? {
                            UNKNOWN_MATCH => None,
                            kind => {
                                let of = r.id(kind)?;
                                let similarity = f64::from_bits(r.u64()?);
                                if !(0.0..=1.0).contains(&similarity) {
                                    return Err(ErrorKind::Malformed(
                                        "a similarity outside [0, 1]",
                                    ));
                                }
                                Some((of, similarity))
                            }
                        }
                    } else {
                        None
                    };
                    Some(Joined { cluster, matched })
                }
            };
            (joined, r.u64()? as i64)
        };
        let n = r.u32()? as usize;
        let raw = r.take(n.checked_mul(4).ok_or(ErrorKind::Truncated)?)?;
        let start = shingles.len();
        let mut previous = None;
        for chunk in raw.chunks_exact(4) {
            let mut b = [0; 4];
            b.copy_from_slice(chunk);
            let shingle = u32::from_le_bytes(b);
            if previous.is_some_and(|p| p >= shingle) {
                return Err(ErrorKind::Malformed("a shingle set is not sorted"));
            }
            previous = Some(shingle);
            shingles.push(shingle);
        }
        // A file written before sets were capped may hold more: keep the
        // sample a text gets today, so copies of it still match.
        shingles.truncate(start + crate::engine::shingle::MAX_SHINGLES);
        let shingle_range = start..shingles.len();
        let anchor_byte = r.u8()?;
        let truncated = anchor_byte & 0x80 != 0;
        let anchor_count = usize::from(anchor_byte & 0x7f);
        if anchor_count > crate::engine::MAX_ANCHORS {
            return Err(ErrorKind::Malformed("more anchor keys than a message has"));
        }
        let anchor_start = anchors.len();
        for chunk in r.take(anchor_count * 4)?.chunks_exact(4) {
            let mut b = [0; 4];
            b.copy_from_slice(chunk);
            anchors.push(u32::from_le_bytes(b));
        }
        let posted = if version >= VERSION_WITHOUT_MATCHES {
            Some(r.u32()?).filter(|_| masks)
        } else {
            None
        };
        entries.push((
            id,
            seq,
            joined,
            time,
            truncated,
            shingle_range,
            anchor_start..anchors.len(),
            posted,
        ));
    }
    if !r.bytes.is_empty() {
        return Err(ErrorKind::Malformed("bytes after the last entry"));
    }
    let restored = entries.len();
    deduper.restore_newest_time(newest);
    // With every message's posted keys known, the postings it will hold are
    // known: its table grows once, not by doubling as they come.
    if entries.iter().all(|entry| entry.7.is_some()) {
        deduper.reserve_restored(
            entries
                .iter()
                .map(|entry| (entry.7.unwrap_or(0), entry.6.len())),
        );
    }
    for (id, seq, joined, time, truncated, shingle_range, anchor_range, posted) in entries {
        let restored = Restored {
            joined: joined.as_ref(),
            time,
            truncated,
            posted,
        };
        deduper.restore(
            id,
            seq,
            &shingles[shingle_range],
            &anchors[anchor_range],
            restored,
        );
    }
    deduper.restore_next_seq(next_seq);
    Ok(restored)
}

/// An arrival number read from a file: one a run can reach. A run counts
/// one a message, so a number of 2^63 or more (three hundred thousand
/// years at a million messages a second) is corruption, and one that is
/// accepted leaves the count room to go on.
fn arrival(seq: u64) -> Result<u64, ErrorKind> {
    if seq >= 1 << 63 {
        return Err(ErrorKind::Malformed("an arrival number out of range"));
    }
    Ok(seq)
}

/// What a state file's header says, read without an engine
/// ([`describe`], for `index info --state`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StateSummary {
    /// The format version.
    pub version: u32,
    /// The shingle settings it was written with (`words:1-2`,
    /// `chars:5+mod:4`).
    pub shingling: String,
    /// The newest message time seen, in milliseconds since the epoch.
    pub newest: Option<i64>,
    /// The messages it holds.
    pub entries: u64,
}

/// Reads a state file's header (after checking its magic, version and
/// checksum), without restoring any entry: what it was made with and how
/// much it holds.
pub fn describe(bytes: &[u8]) -> Result<StateSummary, ErrorKind> {
    if bytes.len() < MAGIC.len() || bytes[..MAGIC.len()] != MAGIC {
        return Err(ErrorKind::NotAStateFile);
    }
    let version = Reader::new(&bytes[MAGIC.len()..]).u32()?;
    if !(PREVIOUS_VERSION..=FORMAT_VERSION).contains(&version) {
        return Err(ErrorKind::Version { found: version });
    }
    let body_len = bytes
        .len()
        .checked_sub(4)
        .filter(|&n| n >= MAGIC.len() + 4)
        .ok_or(ErrorKind::Truncated)?;
    let (body, stored) = bytes.split_at(body_len);
    let mut stored_bytes = [0; 4];
    stored_bytes.copy_from_slice(stored);
    if crc32fast::hash(body) != u32::from_le_bytes(stored_bytes) {
        return Err(ErrorKind::Checksum);
    }
    // The header as decode_into reads it.
    let mut r = Reader::new(&body[MAGIC.len() + 4..]);
    let _fingerprint = r.u64()?;
    let shingling_len = usize::from(r.u8()?);
    let shingling = String::from_utf8_lossy(r.take(shingling_len)?).into_owned();
    let newest = if version == PREVIOUS_VERSION {
        None
    } else {
        Some(r.u64()? as i64).filter(|&t| t >= 0)
    };
    if version == FORMAT_VERSION {
        let _next_seq = r.u64()?;
        let _bands = r.u8()?;
    }
    let entries = r.u64()?;
    Ok(StateSummary {
        version,
        shingling,
        newest,
        entries,
    })
}

/// Loads a state file into `deduper` (normally a new, empty one). A missing
/// file is not an error: it is the first run. The file is only read.
///
/// Temporaries left beside it by saves that were killed are removed first
/// (see [`remove_stale_temporaries`]).
pub fn load(path: &Path, deduper: &mut Deduper) -> Result<Loaded, SnapshotError> {
    let error = |kind| SnapshotError {
        path: path.to_path_buf(),
        kind,
    };
    remove_stale_temporaries(path);
    let bytes = match fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Loaded::Missing),
        Err(e) => return Err(error(ErrorKind::Io(e))),
    };
    decode_into(&bytes, deduper)
        .map(Loaded::Restored)
        .map_err(error)
}

/// Saves the engine's index to `path`, atomically.
pub fn save(path: &Path, deduper: &Deduper) -> Result<(), SnapshotError> {
    write_atomic(path, &encode(deduper)).map_err(|e| SnapshotError {
        path: path.to_path_buf(),
        kind: ErrorKind::Io(e),
    })
}

/// An index store that can be written to a state file: the in-memory one.
/// A store that keeps its index elsewhere (Redis, with its own persistence)
/// has nothing to write.
pub trait Saveable {
    /// The state file's bytes, or `None` when the index is not kept here.
    fn encode_snapshot(&self) -> Option<Vec<u8>>;
}

impl Saveable for Deduper {
    fn encode_snapshot(&self) -> Option<Vec<u8>> {
        Some(encode(self))
    }
}

/// Distinguishes the temporary files of saves made by one process.
static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Replaces `path` with `bytes` so that, whatever happens, the file is either
/// the old one or the new one, whole: write a temporary file in the same
/// directory, fsync it, rename it over `path`, fsync the directory.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "the path names no file"))?;
    let temp = dir.join(format!(
        ".{}.tmp-{}-{}",
        name.to_string_lossy(),
        std::process::id(),
        TEMP_COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    let result = (|| {
        let mut file = File::create(&temp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        drop(file);
        fs::rename(&temp, path)?;
        sync_dir(dir)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&temp);
        remove_stale_temporaries(path);
    }
    result
}

/// The directory and file name of a state file's temporaries.
fn temp_prefix(path: &Path) -> Option<(PathBuf, String)> {
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    let name = path.file_name()?.to_str()?;
    Some((dir.to_path_buf(), format!(".{name}.tmp-")))
}

/// Reads a temporary's name after the prefix: `PID-N`, both decimal.
fn temp_pid(rest: &str) -> Option<u32> {
    let (pid, n) = rest.split_once('-')?;
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(pid) || !digits(n) {
        return None;
    }
    pid.parse().ok()
}

/// Removes the temporary files of `path` that saves killed mid-way left
/// behind: only names of our own pattern (`.NAME.tmp-PID-N`, for this
/// NAME), and only those whose process is gone (see the module
/// documentation). Returns the files removed; failures to list or remove
/// are logged, never fatal.
pub fn remove_stale_temporaries(path: &Path) -> Vec<PathBuf> {
    let mut removed = Vec::new();
    let Some((dir, prefix)) = temp_prefix(path) else {
        return removed;
    };
    let Ok(entries) = fs::read_dir(&dir) else {
        return removed;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(&prefix))
            .and_then(temp_pid)
        else {
            continue;
        };
        let Ok(meta) = entry.metadata() else { continue };
        if !meta.is_file() || !writer_is_gone(pid, &meta) {
            continue;
        }
        let temp = entry.path();
        match fs::remove_file(&temp) {
            Ok(()) => {
                tracing::info!(file = %temp.display(), bytes = meta.len(), "removed the temporary file of an interrupted save");
                removed.push(temp);
            }
            Err(e) => {
                tracing::warn!(file = %temp.display(), error = %e, "cannot remove the temporary file of an interrupted save");
            }
        }
    }
    removed
}

/// Whether the process that wrote a temporary file is gone: no process has
/// its PID, or the one that has it started after the file was written.
#[cfg(target_os = "linux")]
fn writer_is_gone(pid: u32, file: &fs::Metadata) -> bool {
    if pid == std::process::id() {
        // Another save of this process may be under way.
        return false;
    }
    let Ok(stat) = fs::read_to_string(format!("/proc/{pid}/stat")) else {
        // No such process (or no /proc to tell: keep it).
        return Path::new("/proc/self").exists();
    };
    match (process_start(&stat), file.modified()) {
        // A second of slack for the clock's granularity.
        (Some(started), Ok(written)) => started > written + std::time::Duration::from_secs(1),
        _ => false,
    }
}

/// Outside Linux, processes are not inspected: nothing of another process
/// is removed.
#[cfg(not(target_os = "linux"))]
fn writer_is_gone(_pid: u32, _file: &fs::Metadata) -> bool {
    false
}

/// When a process started, from its `/proc/PID/stat` line: field 22 is its
/// start in clock ticks after boot (USER_HZ, 100 a second on Linux), and
/// `/proc/stat`'s `btime` is the boot time.
#[cfg(target_os = "linux")]
fn process_start(stat: &str) -> Option<std::time::SystemTime> {
    // The command name (field 2) may hold spaces: count after its `)`.
    let after_name = &stat[stat.rfind(')')? + 1..];
    let ticks: u64 = after_name.split_whitespace().nth(19)?.parse().ok()?;
    let boot: u64 = fs::read_to_string("/proc/stat")
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("btime "))?
        .trim()
        .parse()
        .ok()?;
    let secs = boot.checked_add(ticks / 100)?;
    std::time::UNIX_EPOCH.checked_add(std::time::Duration::from_millis(
        secs.checked_mul(1000)?.checked_add((ticks % 100) * 10)?,
    ))
}

/// Makes a rename in `dir` durable.
#[cfg(unix)]
fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Directories cannot be opened for syncing here; the rename is as durable
/// as the platform makes it.
#[cfg(not(unix))]
fn sync_dir(_dir: &Path) -> io::Result<()> {
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::Verdict;
    use crate::engine::config::{Sampling, Shingling};
    use std::num::NonZeroUsize;

    fn deduper(shingling: Shingling) -> Deduper {
        Deduper::new(EngineConfig {
            capacity: NonZeroUsize::new(100).unwrap(),
            shingling,
            ..EngineConfig::default()
        })
        .unwrap()
    }

    const TEXTS: [&str; 4] = [
        "Flooding closes the coastal highway north of the city tonight",
        "The bakery on fifth street reopens on Monday with a new menu",
        "Keynote starts now at the conference, come see the new borrow checker",
        "東京で大きな地震がありました。皆さん気をつけてください",
    ];

    fn filled() -> Deduper {
        let mut d = deduper(Shingling::Words(2));
        d.check_text(MessageId::DigitString(1234567890123456789), TEXTS[0]);
        d.check_text(MessageId::Integer(7), TEXTS[1]);
        d.check_text(MessageId::Raw("\"item-\\u00e9\"".into()), TEXTS[2]);
        d.check_text(MessageId::Raw("-5".into()), TEXTS[3]);
        // Refresh the first: it becomes the most recently used.
        assert!(
            d.check_text(MessageId::Integer(99), TEXTS[0])
                .is_duplicate()
        );
        d
    }

    /// What an entry holds: the id, seq, cluster, time, shingles and keys.
    type Held = (MessageId, u64, MessageId, i64, Vec<u32>, Vec<u32>);

    /// Everything an entry holds, anchor and band keys included.
    fn entries(d: &Deduper) -> Vec<Held> {
        d.index()
            .iter_lru_first()
            .map(|e| {
                (
                    e.id.clone(),
                    e.seq,
                    e.cluster().clone(),
                    e.time,
                    e.shingles().to_vec(),
                    e.band_keys().to_vec(),
                )
            })
            .collect()
    }

    /// A state file of version 2 (no clusters, no times), as that version
    /// wrote it.
    fn encode_v2(d: &Deduper) -> Vec<u8> {
        let mut out = encode(d);
        out.truncate(MAGIC.len());
        out.extend_from_slice(&PREVIOUS_VERSION.to_le_bytes());
        out.extend_from_slice(&fingerprint(d.config()).to_le_bytes());
        let shingling = d.config().shingling.to_string();
        out.push(shingling.len() as u8);
        out.extend_from_slice(shingling.as_bytes());
        out.extend_from_slice(&(d.index().len() as u64).to_le_bytes());
        for entry in d.index().iter_lru_first() {
            out.extend_from_slice(&entry.seq.to_le_bytes());
            encode_id(&entry.id, &mut out);
            out.extend_from_slice(&(entry.shingles().len() as u32).to_le_bytes());
            for shingle in entry.shingles() {
                out.extend_from_slice(&shingle.to_le_bytes());
            }
            let anchors = d.anchor_keys(entry);
            out.push(anchors.len() as u8);
            for anchor in anchors {
                out.extend_from_slice(&anchor.to_le_bytes());
            }
        }
        let checksum = crc32fast::hash(&out);
        out.extend_from_slice(&checksum.to_le_bytes());
        out
    }

    /// A chain: 2 a near-duplicate of 1, 3 of 2; then 4, its own.
    fn chained() -> Deduper {
        let mut d = deduper(Shingling::Words(2));
        let text = "the river burst its banks overnight and the old mill road is closed";
        d.check_text(MessageId::Integer(1), text);
        for (n, more) in [(2, " today"), (3, " today again")] {
            let v = d.check_text(MessageId::Integer(n), &format!("{text}{more}"));
            assert!(v.is_duplicate(), "{v:?}");
        }
        d.check_text(MessageId::Raw("\"x\"".into()), TEXTS[1]);
        d
    }

    #[test]
    fn arrival_numbers_no_run_reaches_are_refused() {
        // Found by the fuzzer: an entry numbered u64::MAX overflowed the
        // count of the next arrival.
        let original = filled();
        let bytes = encode(&original);
        let shingling = original.config().shingle_settings();
        let next_seq_at = MAGIC.len() + 4 + 8 + 1 + shingling.len() + 8;
        let first_seq_at = next_seq_at + 8 + 1 + 8;
        let seqs = [next_seq_at, first_seq_at];
        for (at, value) in seqs.iter().flat_map(|&at| [(at, u64::MAX), (at, 1 << 63)]) {
            let mut corrupt = bytes.clone();
            corrupt[at..at + 8].copy_from_slice(&value.to_le_bytes());
            let body = corrupt.len() - 4;
            let checksum = crc32fast::hash(&corrupt[..body]);
            corrupt[body..].copy_from_slice(&checksum.to_le_bytes());
            let mut restored = deduper(Shingling::Words(2));
            match decode_into(&corrupt, &mut restored) {
                Err(ErrorKind::Malformed(what)) => assert!(what.contains("arrival"), "{what}"),
                other => panic!("{value} at byte {at}: {other:?}"),
            }
            assert!(restored.index().is_empty());
        }
        // The largest number a file may hold is read.
        let mut largest = bytes.clone();
        largest[first_seq_at..first_seq_at + 8].copy_from_slice(&((1u64 << 63) - 1).to_le_bytes());
        let body = largest.len() - 4;
        let checksum = crc32fast::hash(&largest[..body]);
        largest[body..].copy_from_slice(&checksum.to_le_bytes());
        let mut restored = deduper(Shingling::Words(2));
        decode_into(&largest, &mut restored).expect("read");
        assert_eq!(restored.next_seq(), 1 << 63);
    }

    #[test]
    fn clusters_survive_a_round_trip() {
        let original = chained();
        let clusters: Vec<MessageId> = original
            .index()
            .iter_lru_first()
            .map(|e| e.cluster().clone())
            .collect();
        assert_eq!(
            clusters,
            [1, 2, 3]
                .map(|_| MessageId::Integer(1))
                .into_iter()
                .chain([MessageId::Raw("\"x\"".into())])
                .collect::<Vec<_>>()
        );
        let bytes = encode(&original);
        let mut restored = deduper(Shingling::Words(2));
        assert_eq!(decode_into(&bytes, &mut restored).unwrap(), 4);
        assert_eq!(entries(&restored), entries(&original));
        let v = restored.check_text(
            MessageId::Integer(9),
            "the river burst its banks overnight and the old mill road is closed today again!",
        );
        assert!(
            matches!(&v, Verdict::Duplicate(m) if m.cluster == MessageId::Integer(1)),
            "{v:?}"
        );
    }

    #[test]
    fn first_verdicts_survive_a_round_trip_and_older_files_never_name_a_message_itself() {
        let original = chained();
        let text = "the river burst its banks overnight and the old mill road is closed";
        let resend = |d: &mut Deduper| {
            [(1, ""), (2, " today"), (3, " today again")]
                .map(|(n, more)| d.check_text(MessageId::Integer(n), &format!("{text}{more}")))
        };
        let mut restored = deduper(Shingling::Words(2));
        decode_into(&encode(&original), &mut restored).unwrap();
        let mut live = chained();
        let repeats = resend(&mut restored);
        assert_eq!(repeats, resend(&mut live), "as the run never stopped");
        assert!(repeats.iter().all(Verdict::is_repeat), "{repeats:?}");
        assert_eq!(repeats[0], Verdict::Repeat(None));
        assert!(matches!(&repeats[2], Verdict::Repeat(Some(m)) if m.of != MessageId::Integer(3)));
        // A version 4 file kept no matches: a near-duplicate's repeat is
        // decided again, against every message but itself.
        let mut old = deduper(Shingling::Words(2));
        let v4 = encode_version(&original, VERSION_WITHOUT_MATCHES);
        assert_eq!(decode_into(&v4, &mut old).unwrap(), 4);
        assert_eq!(entries(&old), entries(&original));
        let again = resend(&mut old);
        assert_eq!(
            again[0],
            Verdict::Repeat(None),
            "a new one is known to be new"
        );
        for (n, v) in again.iter().enumerate().skip(1) {
            match v {
                Verdict::Repeat(Some(m)) => assert_ne!(m.of, MessageId::Integer(n as u64 + 1)),
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(old.index().len(), 4, "nothing indexed again");
    }

    #[test]
    fn a_run_resumed_from_a_state_file_expires_what_the_whole_run_would() {
        let windowed = || {
            Deduper::new(EngineConfig {
                capacity: NonZeroUsize::new(100).unwrap(),
                window: crate::engine::config::Window::from_millis(1_000),
                ..EngineConfig::default()
            })
            .unwrap()
        };
        let stream: Vec<(&str, i64)> = vec![
            (TEXTS[0], 10_000),
            (TEXTS[1], 10_100),
            (TEXTS[0], 10_900),
            (TEXTS[2], 11_200),
            // Late: the clock stays at 11200, so 10100 is gone.
            (TEXTS[1], 10_000),
            (TEXTS[0], 11_800),
            (TEXTS[2], 12_300),
        ];
        let check = |d: &mut Deduper, n: usize, (text, time): (&str, i64)| {
            let sketch = d.preparer().sketch(text, &[], &mut Scratch::default());
            d.check_at(MessageId::Integer(n as u64), sketch.as_sketch(), time)
        };
        let mut whole = windowed();
        let all: Vec<Verdict> = (0..stream.len())
            .map(|n| check(&mut whole, n, stream[n]))
            .collect();
        for cut in 0..stream.len() {
            let mut first = windowed();
            let mut verdicts: Vec<Verdict> =
                (0..cut).map(|n| check(&mut first, n, stream[n])).collect();
            let mut second = windowed();
            decode_into(&encode(&first), &mut second).unwrap();
            assert_eq!(entries(&second), entries(&first), "cut at {cut}");
            assert_eq!(second.newest_time(), first.newest_time());
            verdicts.extend((cut..stream.len()).map(|n| check(&mut second, n, stream[n])));
            assert_eq!(verdicts, all, "cut at {cut}");
        }
        assert_eq!(all[4], Verdict::New, "the late copy finds 10100 expired");
        assert!(all[2].is_duplicate() && all[5].is_duplicate(), "{all:?}");
    }

    #[test]
    fn version_2_files_are_read_with_each_entry_its_own_cluster() {
        let original = chained();
        let mut restored = deduper(Shingling::Words(2));
        assert_eq!(
            decode_into(&encode_v2(&original), &mut restored).unwrap(),
            4
        );
        let own: Vec<Held> = entries(&original)
            .into_iter()
            .map(|(id, seq, _, time, shingles, keys)| (id.clone(), seq, id, time, shingles, keys))
            .collect();
        assert_eq!(entries(&restored), own);
    }

    #[test]
    fn round_trip_keeps_entries_in_lru_order() {
        let original = filled();
        let bytes = encode(&original);
        let mut restored = deduper(Shingling::Words(2));
        assert_eq!(decode_into(&bytes, &mut restored).unwrap(), 4);
        assert_eq!(entries(&restored), entries(&original));
        // Five messages were decided (the last an exact copy, not indexed).
        assert_eq!(restored.next_seq(), 5);
        // And the restored index finds duplicates of what was saved.
        for (i, text) in TEXTS.iter().enumerate() {
            let v = restored.check_text(MessageId::Integer(100 + i as u64), text);
            assert!(v.is_duplicate(), "{text}: {v:?}");
        }
        assert_eq!(
            restored.check_text(
                MessageId::Integer(200),
                "nothing like anything above at all"
            ),
            Verdict::New
        );
        // Saving the restored engine gives the same bytes as the original
        // (before it was queried), entry order included.
        let mut again = deduper(Shingling::Words(2));
        decode_into(&bytes, &mut again).unwrap();
        assert_eq!(encode(&again), bytes);
    }

    /// `n` texts of a few hundred words, every third a near copy of an
    /// earlier one.
    fn many_texts(n: usize) -> Vec<String> {
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let mut texts: Vec<String> = Vec::new();
        for i in 0..n {
            let text = if i % 3 == 2 {
                let earlier = &texts[next() as usize % texts.len()];
                format!("{earlier} also{}", next() % 50)
            } else {
                (0..14)
                    .map(|_| format!("w{}", next() % 400))
                    .collect::<Vec<_>>()
                    .join(" ")
            };
            texts.push(text);
        }
        texts
    }

    #[test]
    fn restoring_with_the_table_reserved_holds_and_answers_what_growing_does() {
        let config = || EngineConfig {
            capacity: NonZeroUsize::new(5_000).unwrap(),
            shingling: Shingling::Words(2),
            ..EngineConfig::default()
        };
        let texts = many_texts(3_000);
        let mut original = Deduper::new(config()).unwrap();
        for (n, text) in texts[..2_000].iter().enumerate() {
            original.check_text(MessageId::Integer(n as u64), text);
        }
        let bytes = encode(&original);
        // Restored through the file: the table reserved once.
        let mut reserved = Deduper::new(config()).unwrap();
        decode_into(&bytes, &mut reserved).unwrap();
        // Restored message by message, as before: the table grows.
        let mut grown = Deduper::new(config()).unwrap();
        let index = original.index();
        for (slot, entry) in index.iter_lru_first_with_slots() {
            grown.restore(
                entry.id.clone(),
                entry.seq,
                entry.shingles(),
                original.anchor_keys(entry),
                Restored {
                    joined: entry.joined(),
                    time: entry.time,
                    truncated: entry.truncated(),
                    posted: Some(index.posted_mask(slot)),
                },
            );
        }
        grown.restore_next_seq(original.next_seq());
        assert!(grown.index().postings_cells() >= 1 << 12, "it grew");
        // Reserving alone sizes the table as restoring everything grows it.
        let mut sized = Deduper::new(config()).unwrap();
        sized.reserve_restored(
            index
                .iter_lru_first_with_slots()
                .map(|(slot, entry)| (index.posted_mask(slot), original.anchor_keys(entry).len())),
        );
        assert_eq!(
            sized.index().postings_cells(),
            grown.index().postings_cells()
        );
        assert_eq!(
            reserved.index().postings_cells(),
            grown.index().postings_cells()
        );
        assert_eq!(reserved.index().postings(), grown.index().postings());
        assert_eq!(reserved.index().bytes(), grown.index().bytes());
        assert_eq!(encode(&reserved), encode(&grown));
        assert_eq!(encode(&reserved), bytes);
        // Every later message gets the same verdict from both.
        let mut duplicates = 0;
        for (n, text) in texts.iter().enumerate().skip(1_000) {
            let id = MessageId::Integer(10_000 + n as u64);
            let verdict = reserved.check_text(id.clone(), text);
            duplicates += usize::from(verdict.is_duplicate());
            assert_eq!(verdict, grown.check_text(id, text), "{text}");
        }
        assert!(duplicates > 500, "{duplicates} duplicates");
        assert_eq!(encode(&reserved), encode(&grown));
    }

    #[test]
    fn empty_index_round_trips() {
        let bytes = encode(&deduper(Shingling::Chars(4)));
        let mut d = deduper(Shingling::Chars(4));
        assert_eq!(decode_into(&bytes, &mut d).unwrap(), 0);
    }

    #[test]
    fn a_smaller_capacity_keeps_the_most_recent() {
        let bytes = encode(&filled());
        let mut small = Deduper::new(EngineConfig {
            capacity: NonZeroUsize::new(2).unwrap(),
            shingling: Shingling::Words(2),
            ..EngineConfig::default()
        })
        .unwrap();
        decode_into(&bytes, &mut small).unwrap();
        let ids: Vec<_> = small
            .index()
            .iter_lru_first()
            .map(|e| e.id.clone())
            .collect();
        assert_eq!(
            ids,
            vec![
                MessageId::Raw("-5".into()),
                MessageId::DigitString(1234567890123456789)
            ]
        );
    }

    #[test]
    fn a_byte_budget_keeps_the_most_recent_that_fit() {
        let mut big = Deduper::new(EngineConfig {
            shingling: Shingling::Words(2),
            ..EngineConfig::default()
        })
        .unwrap();
        for seq in 0..5_000u64 {
            let text = format!("message {seq} says w{} w{} w{}", seq * 3, seq * 5, seq * 7);
            big.check_text(MessageId::Integer(seq), &text);
        }
        let budget = 1 << 20;
        assert!(
            big.index().bytes() > budget,
            "the file holds more than the budget"
        );
        let bytes = encode(&big);
        let mut small = Deduper::new(EngineConfig {
            shingling: Shingling::Words(2),
            max_index_bytes: NonZeroUsize::new(budget),
            ..EngineConfig::default()
        })
        .unwrap();
        decode_into(&bytes, &mut small).unwrap();
        assert!(small.index().bytes() <= budget);
        let ids: Vec<_> = small
            .index()
            .iter_lru_first()
            .map(|e| e.id.clone())
            .collect();
        let kept = ids.len() as u64;
        assert!((100..5_000).contains(&kept), "{kept}");
        let newest: Vec<_> = (5_000 - kept..5_000).map(MessageId::Integer).collect();
        assert_eq!(ids, newest);
    }

    #[test]
    fn every_truncation_is_refused() {
        let bytes = encode(&filled());
        // One engine for every attempt: a refused file leaves it untouched.
        let mut d = deduper(Shingling::Words(2));
        for len in 0..bytes.len() {
            assert!(
                decode_into(&bytes[..len], &mut d).is_err(),
                "truncated to {len} bytes"
            );
            assert!(d.index().is_empty());
        }
    }

    #[test]
    fn every_bit_flip_is_refused() {
        let bytes = encode(&filled());
        let mut d = deduper(Shingling::Words(2));
        for i in 0..bytes.len() {
            for bit in 0..8 {
                let mut corrupt = bytes.clone();
                corrupt[i] ^= 1 << bit;
                assert!(
                    decode_into(&corrupt, &mut d).is_err(),
                    "bit {bit} of byte {i}"
                );
                assert!(d.index().is_empty());
            }
        }
    }

    #[test]
    fn appended_bytes_are_refused() {
        let mut bytes = encode(&filled());
        bytes.push(0);
        assert!(decode_into(&bytes, &mut deduper(Shingling::Words(2))).is_err());
    }

    #[test]
    fn another_version_is_refused_by_name() {
        let mut bytes = encode(&filled());
        bytes[8..12].copy_from_slice(&1u32.to_le_bytes());
        let err = decode_into(&bytes, &mut deduper(Shingling::Words(2))).unwrap_err();
        assert!(matches!(err, ErrorKind::Version { found: 1 }), "{err}");
        assert!(err.to_string().contains("version 1"));
    }

    #[test]
    fn other_shingling_is_refused_and_says_so() {
        let bytes = encode(&filled());
        let err = decode_into(&bytes, &mut deduper(Shingling::Words(3))).unwrap_err();
        assert!(matches!(err, ErrorKind::Incompatible { .. }));
        assert!(err.to_string().contains("words:2"), "{err}");
        assert!(err.to_string().contains("words:3"), "{err}");
    }

    #[test]
    fn other_sampling_is_refused_and_says_so() {
        let sampled = |sampling| {
            Deduper::new(EngineConfig {
                shingling: Shingling::Spots(2),
                sampling,
                ..EngineConfig::default()
            })
            .unwrap()
        };
        let mut d = sampled(Sampling::Mod(4));
        for (n, text) in TEXTS.iter().enumerate() {
            d.check_text(MessageId::Integer(n as u64), text);
        }
        let bytes = encode(&d);
        assert_eq!(
            decode_into(&bytes, &mut sampled(Sampling::Mod(4))).unwrap(),
            4
        );
        let err = decode_into(&bytes, &mut sampled(Sampling::Mod(2))).unwrap_err();
        assert!(matches!(err, ErrorKind::Incompatible { .. }));
        assert!(err.to_string().contains("spots:2+mod:4"), "{err}");
        assert!(err.to_string().contains("spots:2+mod:2"), "{err}");
        let err = decode_into(&bytes, &mut sampled(Sampling::All)).unwrap_err();
        assert!(err.to_string().contains("uses spots:2 "), "{err}");
    }

    #[test]
    fn threshold_and_measure_may_change() {
        let bytes = encode(&filled());
        let mut d = Deduper::new(EngineConfig {
            threshold: 0.8,
            measure: crate::engine::config::Measure::Containment,
            shingling: Shingling::Words(2),
            ..EngineConfig::default()
        })
        .unwrap();
        assert_eq!(decode_into(&bytes, &mut d).unwrap(), 4);
    }

    #[test]
    fn not_a_state_file() {
        let err = decode_into(b"{\"id\":1}\n", &mut deduper(Shingling::Words(2))).unwrap_err();
        assert!(matches!(err, ErrorKind::NotAStateFile));
    }

    /// A PID no process has: a child that has exited and been waited for.
    fn dead_pid() -> u32 {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        pid
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        names
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn kill_9_during_save_temporaries_are_removed_at_load() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.state");
        let dead = dead_pid();
        let me = std::process::id();
        // A live process started long after its "temporary" was written:
        // its PID was reused, the file is stale.
        let mut reused = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let old = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
        for name in [
            format!(".s.state.tmp-{dead}-0"),
            format!(".s.state.tmp-{dead}-17"),
            format!(".s.state.tmp-{me}-3"),
            format!(".s.state.tmp-{}-0", reused.id()),
            format!(".other.state.tmp-{dead}-0"),
            format!(".s.state.tmp-{dead}-x"),
            format!("s.state.tmp-{dead}-0"),
        ] {
            let file = File::create(dir.path().join(&name)).unwrap();
            file.set_modified(old).unwrap();
        }
        let mut d = deduper(Shingling::Words(2));
        assert_eq!(load(&path, &mut d).unwrap(), Loaded::Missing);
        let _ = reused.kill();
        let _ = reused.wait();
        let mut expected = vec![
            format!(".other.state.tmp-{dead}-0"),
            format!(".s.state.tmp-{dead}-x"),
            format!(".s.state.tmp-{me}-3"),
            format!("s.state.tmp-{dead}-0"),
        ];
        expected.sort();
        assert_eq!(names(dir.path()), expected);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_live_process_s_temporary_is_kept() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.state");
        // PID 1 started before any file here was written.
        let live = dir.path().join(".s.state.tmp-1-0");
        File::create(&live).unwrap();
        assert!(remove_stale_temporaries(&path).is_empty());
        assert!(live.exists());
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_failed_save_removes_stale_temporaries() {
        let dir = tempfile::tempdir().unwrap();
        // The target is a directory that is not empty: the rename fails.
        let path = dir.path().join("s.state");
        fs::create_dir(&path).unwrap();
        fs::write(path.join("keep"), b"x").unwrap();
        let stale = dir.path().join(format!(".s.state.tmp-{}-0", dead_pid()));
        fs::write(&stale, vec![0u8; 4096]).unwrap();
        assert!(save(&path, &filled()).is_err());
        assert_eq!(names(dir.path()), vec!["s.state".to_string()]);
    }

    #[test]
    fn save_and_load_through_a_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.bin");
        let mut d = deduper(Shingling::Words(2));
        assert_eq!(load(&path, &mut d).unwrap(), Loaded::Missing);
        let original = filled();
        save(&path, &original).unwrap();
        save(&path, &original).unwrap();
        assert_eq!(load(&path, &mut d).unwrap(), Loaded::Restored(4));
        // Only the state file is left: no temporary files behind.
        let names: Vec<_> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("state.bin")]);
        // A corrupt file is refused and left as it was.
        let mut bytes = fs::read(&path).unwrap();
        let last = bytes.len() - 10;
        bytes[last] ^= 0xff;
        fs::write(&path, &bytes).unwrap();
        let err = load(&path, &mut deduper(Shingling::Words(2))).unwrap_err();
        assert!(err.to_string().contains("state.bin"), "{err}");
        assert_eq!(fs::read(&path).unwrap(), bytes);
    }
}

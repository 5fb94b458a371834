//! A worker's replica of a shared index: the in-memory engine, applied to
//! the index's log in log order.
//!
//! Every worker holds one. Applying an entry decides its messages with the
//! same [`Deduper`] the filter uses, so every replica that has applied the
//! same entries holds the same index and gives the same verdicts: the
//! decision is written once, in Rust, and Redis only orders the entries.
//!
//! Besides the index, a replica keeps the **memo**: the verdict of every
//! message that came with a queue token (a stream entry's id), until a
//! worker says it was answered for good. A message logged again under the
//! same token (its worker died before it acknowledged the entry, and
//! another claimed it) gets its first verdict back and changes nothing, so
//! it is never found a duplicate of itself. The memo is part of the
//! replicated state: it changes only by applying entries, and snapshots
//! carry it.

use std::collections::{HashSet, VecDeque};

use crate::engine::{Ask, Deduper, IndexStore, Match, Op, Verdict};
use crate::state::snapshot::{self, Reader, encode_id};
use crate::wire::record::MessageId;

use super::log::Batch;

/// Most tokens the memo holds; past it the oldest go first. Tokens are
/// forgotten once their entries are acknowledged, so only entries in
/// flight, or left by workers that died and not yet claimed, are held.
pub const MEMO_CAP: usize = 1 << 18;

/// The first bytes of a replica snapshot.
const MAGIC: [u8; 8] = *b"\x89DDLOGS\n";
/// Its format version.
const VERSION: u32 = 1;

/// The verdicts of messages that came with a token, oldest first.
#[derive(Debug, Default)]
struct Memo {
    /// foldhash rather than SipHash, as `decided_at` in `apply_run`.
    verdicts: foldhash::HashMap<Box<[u8]>, (Verdict, u64)>,
    /// Tokens in the order they were remembered, with the generation they
    /// were remembered at (a forgotten one leaves a stale mark here).
    order: VecDeque<(Box<[u8]>, u64)>,
    generation: u64,
}

impl Memo {
    fn get(&self, token: &[u8]) -> Option<&Verdict> {
        self.verdicts.get(token).map(|(v, _)| v)
    }

    fn remember(&mut self, token: &[u8], verdict: Verdict) {
        self.generation += 1;
        let token: Box<[u8]> = token.into();
        self.order.push_back((token.clone(), self.generation));
        self.verdicts.insert(token, (verdict, self.generation));
        while self.verdicts.len() > MEMO_CAP {
            self.pop_oldest();
        }
        if self.order.len() > 2 * self.verdicts.len() + 1024 {
            let verdicts = &self.verdicts;
            self.order
                .retain(|(t, g)| verdicts.get(t).is_some_and(|(_, at)| at == g));
        }
    }

    fn pop_oldest(&mut self) {
        while let Some((token, generation)) = self.order.pop_front() {
            if self
                .verdicts
                .get(&token)
                .is_some_and(|(_, g)| *g == generation)
            {
                self.verdicts.remove(&token);
                return;
            }
        }
    }

    fn forget(&mut self, token: &[u8]) {
        self.verdicts.remove(token);
    }

    /// The live tokens, oldest first.
    fn live(&self) -> impl Iterator<Item = (&[u8], &Verdict)> {
        self.order.iter().filter_map(|(t, g)| {
            self.verdicts
                .get(t)
                .filter(|(_, at)| at == g)
                .map(|(v, _)| (&t[..], v))
        })
    }
}

/// Most messages of consecutive entries applied as one run (see
/// [`Replica::apply_entries`]): the filter's batch, so that entries of a
/// few messages still make a run the engine counts on every thread, while
/// full entries are applied one by one as before. Larger runs cost the
/// deciding thread more: the candidates a run itself indexes are verified
/// in order, and with runs of 2,048 the serial decision took 2,686
/// instructions a message on `dev-200k` against 2,184 for entries of 512
/// (`docs/performance.md`).
pub const RUN_MESSAGES: usize = 512;

/// What becomes of one message of a run being applied.
#[derive(Clone, Copy, Debug)]
enum Plan {
    /// Decided now: its verdict is the `n`-th of the run, and is
    /// remembered under its token if it has one.
    Decided(usize),
    /// Its token is in the memo as the run began.
    Remembered,
    /// Its token was decided earlier in the run, at this place.
    SameAs(usize),
    /// Another worker's query: nothing to change, nobody to answer.
    Skipped,
}

/// A worker's copy of the shared index, and where in the log it stands.
#[derive(Debug)]
pub struct Replica {
    deduper: Deduper,
    memo: Memo,
    /// The log position (entry number) of the last entry applied; 0 for
    /// none.
    pub applied: u64,
    /// That entry's stream id ("0-0" for none).
    pub applied_id: String,
    plan: Vec<Plan>,
    decided: Vec<Verdict>,
}

/// Why a replica snapshot could not be read.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    /// Not a replica snapshot, or corrupt.
    #[error("the index's snapshot in Redis is corrupt: {0}")]
    Corrupt(&'static str),
    /// Its state could not be loaded.
    #[error("the index's snapshot in Redis cannot be loaded: {0}")]
    State(snapshot::ErrorKind),
}

impl Replica {
    /// An empty replica, before the first entry.
    pub fn new(deduper: Deduper) -> Replica {
        Replica {
            deduper,
            memo: Memo::default(),
            applied: 0,
            applied_id: "0-0".into(),
            plan: Vec::new(),
            decided: Vec::new(),
        }
    }

    /// The engine (read-only).
    pub fn deduper(&self) -> &Deduper {
        &self.deduper
    }

    /// Tokens remembered.
    pub fn memo_len(&self) -> usize {
        self.memo.verdicts.len()
    }

    /// Applies the next entry of the log: forgets its tokens, then decides
    /// its messages in order. `own`: the entry is this worker's, and the
    /// verdicts of all its messages (queries too) are appended to
    /// `verdicts`; another's queries are not even decided.
    pub fn apply(&mut self, batch: &Batch, own: bool, verdicts: &mut Vec<Verdict>) {
        self.apply_entries(&[(batch, own)], verdicts);
    }

    /// Applies consecutive entries of the log, exactly as [`Replica::apply`]
    /// on each in turn would, but in runs of up to [`RUN_MESSAGES`]
    /// messages: the engine decides a run in one call, so a run large
    /// enough is counted on every thread first (see
    /// [`crate::engine::overlaps`]) whatever the size of its entries, and
    /// the deciding thread keeps only the part that depends on order.
    pub fn apply_entries(&mut self, entries: &[(&Batch, bool)], verdicts: &mut Vec<Verdict>) {
        self.apply_entries_with_data(entries, &mut [], verdicts);
    }

    /// [`Replica::apply_entries`], with the entries' data made as they were
    /// read (see [`Batch::take_entry_data`]): `entry_data[e]` is entry
    /// `e`'s, or missing. The index takes a message's instead of making it
    /// (see [`crate::engine::index::Index::offer`]); what it does not take
    /// is dropped. The outcome is the same with or without.
    pub fn apply_entries_with_data(
        &mut self,
        entries: &[(&Batch, bool)],
        entry_data: &mut [Vec<Option<Box<[u32]>>>],
        verdicts: &mut Vec<Verdict>,
    ) {
        let mut first = 0;
        while first < entries.len() {
            // The memo must not fill up within a run: the oldest tokens
            // would then go between two of its entries, and planning the
            // whole run against the memo as it began would be wrong.
            let room = MEMO_CAP.saturating_sub(self.memo_len());
            let (mut messages, mut end) = (entries[first].0.len(), first + 1);
            while let Some((next, _)) = entries.get(end) {
                if messages + next.len() > RUN_MESSAGES.min(room) {
                    break;
                }
                messages += next.len();
                end += 1;
            }
            let data = entry_data.get_mut(first..end).unwrap_or_default();
            self.apply_run(&entries[first..end], data, verdicts);
            first = end;
        }
    }

    /// Applies entries as one run: plans every message against the memo
    /// as the run began and the tokens the run decides or forgets before
    /// it, decides the run, then answers and updates the memo entry by
    /// entry, in log order. The caller has made sure the memo cannot
    /// overflow on the way, so the plan is what applying the entries one
    /// by one would find.
    fn apply_run(
        &mut self,
        entries: &[(&Batch, bool)],
        entry_data: &mut [Vec<Option<Box<[u32]>>>],
        verdicts: &mut Vec<Verdict>,
    ) {
        self.plan.clear();
        let total = entries.iter().map(|(batch, _)| batch.len()).sum();
        let mut run: Vec<Ask<'_>> = Vec::with_capacity(total);
        // Tokens decided earlier in the run (where), and forgotten since
        // the run began: the memo, not changed until the run is decided,
        // must not answer for those.
        // Sized for the run at once: grown from empty, it was rehashed
        // about a dozen times a run (some 600 instructions a message).
        // foldhash: the tokens are the fleet's own, and SipHash cost more.
        let mut decided_at: foldhash::HashMap<&[u8], usize> =
            foldhash::HashMap::with_capacity_and_hasher(total, Default::default());
        let mut forgotten: HashSet<&[u8]> = HashSet::new();
        for (e, &(batch, own)) in entries.iter().enumerate() {
            for token in batch.forget() {
                decided_at.remove(token);
                forgotten.insert(token);
            }
            let mut data = entry_data.get_mut(e).map(|data| data.iter_mut());
            for i in 0..batch.len() {
                let ask = batch.ask(i);
                let made = data
                    .as_mut()
                    .and_then(Iterator::next)
                    .and_then(Option::take);
                let plan = match (ask.op, ask.token) {
                    (Op::Query, _) if !own => Plan::Skipped,
                    (Op::Check | Op::Remove, Some(token)) => {
                        if let Some(&at) = decided_at.get(token) {
                            Plan::SameAs(at)
                        } else if !forgotten.contains(token) && self.memo.get(token).is_some() {
                            Plan::Remembered
                        } else {
                            decided_at.insert(token, run.len());
                            run.push(ask);
                            Plan::Decided(run.len() - 1)
                        }
                    }
                    _ => {
                        run.push(ask);
                        Plan::Decided(run.len() - 1)
                    }
                };
                if let (Plan::Decided(_), Op::Check, Some(made)) = (plan, ask.op, made) {
                    self.deduper
                        .offer_entry_data(ask.sketch.band_keys, ask.sketch.shingles, made);
                }
                self.plan.push(plan);
            }
        }
        self.decided.clear();
        // The in-memory engine never fails.
        let _ = self.deduper.decide(&run, &mut self.decided);
        // The offers name the entries' memory, which outlives this call
        // only as far as the caller keeps it.
        self.deduper.clear_offered();
        let mut plans = self.plan.iter();
        for &(batch, own) in entries {
            // Answers first: a remembered verdict is the memo's as the run
            // began, before this entry's forgets and the run's own.
            if own {
                for (i, plan) in plans.clone().take(batch.len()).enumerate() {
                    let verdict = match *plan {
                        Plan::Decided(at) | Plan::SameAs(at) => Some(&self.decided[at]),
                        Plan::Remembered => batch.ask(i).token.and_then(|t| self.memo.get(t)),
                        Plan::Skipped => None,
                    };
                    verdicts.push(verdict.cloned().unwrap_or(Verdict::New));
                }
            }
            for token in batch.forget() {
                self.memo.forget(token);
            }
            for (i, plan) in plans.by_ref().take(batch.len()).enumerate() {
                let ask = batch.ask(i);
                if let (Plan::Decided(at), Op::Check | Op::Remove, Some(token)) =
                    (*plan, ask.op, ask.token)
                {
                    self.memo.remember(token, self.decided[at].clone());
                }
            }
        }
    }

    /// The replica as bytes, for a snapshot in Redis: where in the log it
    /// stands, the memo, and the index as a state file (which resumes a run
    /// exactly, see [`crate::state::snapshot`]).
    pub fn encode(&self) -> Vec<u8> {
        let state = snapshot::encode(&self.deduper);
        let mut out = Vec::with_capacity(state.len() + 64 + self.memo_len() * 48);
        out.extend_from_slice(&MAGIC);
        out.extend_from_slice(&VERSION.to_le_bytes());
        out.extend_from_slice(&self.applied.to_le_bytes());
        out.extend_from_slice(&self.deduper.index().evictions().to_le_bytes());
        out.extend_from_slice(&(self.applied_id.len() as u16).to_le_bytes());
        out.extend_from_slice(self.applied_id.as_bytes());
        out.extend_from_slice(&(self.memo_len() as u32).to_le_bytes());
        for (token, verdict) in self.memo.live() {
            out.extend_from_slice(&(token.len() as u16).to_le_bytes());
            out.extend_from_slice(token);
            match verdict {
                Verdict::New => out.push(0),
                Verdict::Duplicate(m) => {
                    out.push(1);
                    encode_id(&m.of, &mut out);
                    out.extend_from_slice(&m.similarity.to_bits().to_le_bytes());
                    encode_id(&m.cluster, &mut out);
                }
                Verdict::Deleted { held } => out.push(2 + u8::from(*held)),
                Verdict::Repeat(None) => out.push(4),
                Verdict::Repeat(Some(m)) => {
                    out.push(5);
                    encode_id(&m.of, &mut out);
                    out.extend_from_slice(&m.similarity.to_bits().to_le_bytes());
                    encode_id(&m.cluster, &mut out);
                }
            }
        }
        out.extend_from_slice(&(state.len() as u64).to_le_bytes());
        out.extend_from_slice(&state);
        let checksum = crc32fast::hash(&out);
        out.extend_from_slice(&checksum.to_le_bytes());
        out
    }

    /// Reads a snapshot into `deduper` (a new, empty engine of the index's
    /// settings).
    pub fn decode(bytes: &[u8], mut deduper: Deduper) -> Result<Replica, SnapshotError> {
        let corrupt = |_| SnapshotError::Corrupt("it ends too soon");
        if bytes.len() < MAGIC.len() + 4 || bytes[..MAGIC.len()] != MAGIC {
            return Err(SnapshotError::Corrupt("not a replica snapshot"));
        }
        let (body, stored) = bytes.split_at(bytes.len() - 4);
        if crc32fast::hash(body).to_le_bytes() != stored {
            return Err(SnapshotError::Corrupt("checksum mismatch"));
        }
        let mut r = Reader::new(&body[MAGIC.len()..]);
        if r.u32().map_err(corrupt)? != VERSION {
            return Err(SnapshotError::Corrupt("unknown version"));
        }
        let applied = r.u64().map_err(corrupt)?;
        let evictions = r.u64().map_err(corrupt)?;
        let id_len = usize::from(r.u16().map_err(corrupt)?);
        let applied_id = std::str::from_utf8(r.take(id_len).map_err(corrupt)?)
            .map_err(|_| SnapshotError::Corrupt("a stream id is not text"))?
            .to_string();
        let tokens = r.u32().map_err(corrupt)? as usize;
        let mut memo = Memo::default();
        for _ in 0..tokens {
            let len = usize::from(r.u16().map_err(corrupt)?);
            let token = r.take(len).map_err(corrupt)?;
            let verdict = match r.u8().map_err(corrupt)? {
                0 => Verdict::New,
                kind @ (1 | 5) => {
                    let of = read_id(&mut r)?;
                    let similarity = f64::from_bits(r.u64().map_err(corrupt)?);
                    let cluster = read_id(&mut r)?;
                    let m = Match {
                        of,
                        similarity,
                        cluster,
                    };
                    if kind == 5 {
                        Verdict::Repeat(Some(m))
                    } else {
                        Verdict::Duplicate(m)
                    }
                }
                kind @ (2 | 3) => Verdict::Deleted { held: kind == 3 },
                4 => Verdict::Repeat(None),
                _ => return Err(SnapshotError::Corrupt("unknown verdict kind")),
            };
            memo.remember(token, verdict);
        }
        let state_len = r.u64().map_err(corrupt)? as usize;
        let state = r.take(state_len).map_err(corrupt)?;
        if !r.is_empty() {
            return Err(SnapshotError::Corrupt("bytes after the state"));
        }
        snapshot::decode_into(state, &mut deduper).map_err(SnapshotError::State)?;
        deduper.restore_evictions(evictions);
        Ok(Replica {
            deduper,
            memo,
            applied,
            applied_id,
            plan: Vec::new(),
            decided: Vec::new(),
        })
    }
}

fn read_id(r: &mut Reader<'_>) -> Result<MessageId, SnapshotError> {
    let kind = r
        .u8()
        .map_err(|_| SnapshotError::Corrupt("it ends too soon"))?;
    r.id(kind)
        .map_err(|_| SnapshotError::Corrupt("an id is out of shape"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::EngineConfig;
    use crate::engine::Scratch;
    use crate::redis_index::log;

    fn deduper() -> Deduper {
        Deduper::new(EngineConfig::default()).unwrap()
    }

    /// An entry of `texts`, each with its token if it has one.
    fn entry(d: &Deduper, texts: &[(u64, &str, Option<&str>)], forget: &[&str]) -> Batch {
        let sketches: Vec<_> = texts
            .iter()
            .map(|(_, text, _)| d.preparer().sketch(text, &[], &mut Scratch::default()))
            .collect();
        let ids: Vec<MessageId> = texts.iter().map(|(n, ..)| MessageId::Integer(*n)).collect();
        let asks: Vec<Ask<'_>> = texts
            .iter()
            .enumerate()
            .map(|(i, (_, _, token))| Ask {
                id: &ids[i],
                sketch: sketches[i].as_sketch(),
                op: Op::Check,
                token: token.map(str::as_bytes),
                time: 0,
            })
            .collect();
        let forget: Vec<Vec<u8>> = forget.iter().map(|t| format!("s:{t}").into()).collect();
        let mut bytes = Vec::new();
        log::encode(&asks, b"s:", &forget, &mut bytes);
        Batch::decode(&bytes).unwrap()
    }

    /// Random entries of checks, queries and removals of a few stories,
    /// with tokens that come again, within an entry and across entries,
    /// and forgets: the material of a memo's every case.
    fn random_entries(d: &Deduper, seed: u64, count: usize) -> Vec<(Batch, bool)> {
        let mut state = seed | 1;
        let mut next = move |below: u64| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state % below
        };
        let stories = [
            STORY,
            "a storm closed the coast road and the ferry will not sail today",
            "the council voted to keep the library open on sundays after all",
        ];
        let texts: Vec<String> = (0..12)
            .map(|i| {
                format!(
                    "{} {}",
                    stories[i % 3],
                    ["", "again", "now", "update"][i / 3]
                )
            })
            .collect();
        let mut entries = Vec::new();
        let mut scratch = Scratch::default();
        for _ in 0..count {
            let n = 1 + next(40) as usize;
            let picks: Vec<(u64, usize, u64, u64)> = (0..n)
                .map(|_| (1 + next(200), next(12) as usize, next(60), next(6)))
                .collect();
            let sketches: Vec<_> = picks
                .iter()
                .map(|&(_, text, ..)| d.preparer().sketch(&texts[text], &[], &mut scratch))
                .collect();
            let ids: Vec<MessageId> = picks.iter().map(|p| MessageId::Integer(p.0)).collect();
            let tokens: Vec<Vec<u8>> = picks.iter().map(|p| format!("{}-0", p.2).into()).collect();
            let asks: Vec<Ask<'_>> = picks
                .iter()
                .enumerate()
                .map(|(i, &(_, _, token, kind))| Ask {
                    id: &ids[i],
                    sketch: sketches[i].as_sketch(),
                    op: match kind {
                        0 => Op::Query,
                        1 => Op::Remove,
                        _ => Op::Check,
                    },
                    token: (token < 50).then_some(tokens[i].as_slice()),
                    time: 0,
                })
                .collect();
            let forget: Vec<Vec<u8>> = (0..next(6))
                .map(|_| format!("s:{}-0", next(60)).into())
                .collect();
            let mut bytes = Vec::new();
            log::encode(&asks, b"s:", &forget, &mut bytes);
            entries.push((Batch::decode(&bytes).unwrap(), next(3) == 0));
        }
        entries
    }

    #[test]
    fn entries_applied_as_runs_give_what_they_give_one_by_one() {
        let mut counted = 0;
        for seed in 1..40 {
            let d = deduper();
            let entries = random_entries(&d, seed, 40);
            let mut one_by_one = Replica::new(deduper());
            let mut expected = Vec::new();
            for (batch, own) in &entries {
                one_by_one.apply(batch, *own, &mut expected);
            }
            // On three threads a run of 128 messages or more is counted
            // ahead (see `overlaps`): the runs here reach it.
            let mut engine = deduper();
            engine.set_threads(std::num::NonZeroUsize::new(3).unwrap());
            let mut runs = Replica::new(engine);
            let mut verdicts = Vec::new();
            let refs: Vec<(&Batch, bool)> = entries.iter().map(|(b, own)| (b, *own)).collect();
            // In pieces of unequal sizes, as pages of the log come.
            for piece in refs.chunks(1 + seed as usize % 4 * 12) {
                runs.apply_entries(piece, &mut verdicts);
            }
            assert_eq!(verdicts, expected, "seed {seed}");
            assert_eq!(runs.encode(), one_by_one.encode(), "seed {seed}");
            counted += runs
                .deduper()
                .stats()
                .times
                .map_or(0, |t| t.counted_batches);
        }
        assert!(counted >= 10, "runs were counted ahead {counted} times");
    }

    /// With the entries' data made as they were read and offered to the
    /// index (as a replica reading the log ahead does), runs give the
    /// verdicts, and the index the entries, bytes and snapshot, of entries
    /// applied one by one without: the index takes the data of exactly the
    /// messages it indexes, and what it takes is what it would make.
    #[test]
    fn entries_applied_with_their_data_made_ahead_give_what_they_give_one_by_one() {
        let mut taken = 0;
        for seed in 1..40 {
            let d = deduper();
            let mut entries = random_entries(&d, seed, 40);
            let mut one_by_one = Replica::new(deduper());
            let mut expected = Vec::new();
            for (batch, own) in &entries {
                one_by_one.apply(batch, *own, &mut expected);
            }
            let mut data: Vec<Vec<Option<Box<[u32]>>>> = entries
                .iter_mut()
                .map(|(batch, _)| batch.take_entry_data())
                .collect();
            let made = data.iter().flatten().filter(|d| d.is_some()).count();
            let mut engine = deduper();
            engine.set_threads(std::num::NonZeroUsize::new(3).unwrap());
            let mut runs = Replica::new(engine);
            let mut verdicts = Vec::new();
            let refs: Vec<(&Batch, bool)> = entries.iter().map(|(b, own)| (b, *own)).collect();
            let mut at = 0;
            for piece in refs.chunks(1 + seed as usize % 4 * 12) {
                let end = at + piece.len();
                runs.apply_entries_with_data(piece, &mut data[at..end], &mut verdicts);
                at = end;
            }
            assert_eq!(verdicts, expected, "seed {seed}");
            assert_eq!(runs.encode(), one_by_one.encode(), "seed {seed}");
            assert_eq!(
                runs.deduper().index().bytes(),
                one_by_one.deduper().index().bytes()
            );
            taken += made - data.iter().flatten().filter(|d| d.is_some()).count();
        }
        assert!(taken >= 1_000, "the index took {taken} entries' data");
    }

    const STORY: &str = "the river burst its banks overnight and the old mill road is closed";

    #[test]
    fn a_token_logged_again_gets_its_first_verdict() {
        let mut r = Replica::new(deduper());
        let mut verdicts = Vec::new();
        let first = entry(r.deduper(), &[(1, STORY, Some("1-0"))], &[]);
        r.apply(&first, true, &mut verdicts);
        assert_eq!(verdicts, [Verdict::New]);
        // Redelivered (twice in one entry), then its copy with a new token.
        let again = entry(
            r.deduper(),
            &[
                (1, STORY, Some("1-0")),
                (1, STORY, Some("1-0")),
                (2, STORY, Some("2-0")),
            ],
            &[],
        );
        verdicts.clear();
        r.apply(&again, true, &mut verdicts);
        assert_eq!(verdicts[..2], [Verdict::New, Verdict::New]);
        assert!(verdicts[2].is_duplicate());
        // Forgotten: the token is free again (a new message under it).
        let forget = entry(r.deduper(), &[(3, STORY, Some("1-0"))], &["1-0"]);
        verdicts.clear();
        r.apply(&forget, true, &mut verdicts);
        assert!(verdicts[0].is_duplicate());
    }

    #[test]
    fn a_token_repeated_within_an_entry_is_decided_once() {
        let mut r = Replica::new(deduper());
        let mut verdicts = Vec::new();
        let e = entry(
            r.deduper(),
            &[(1, STORY, Some("1-0")), (1, STORY, Some("1-0"))],
            &[],
        );
        r.apply(&e, true, &mut verdicts);
        assert_eq!(verdicts, [Verdict::New, Verdict::New]);
        assert_eq!(r.deduper().counts().messages, 1);
    }

    #[test]
    fn a_snapshot_holds_the_index_the_memo_and_the_position() {
        let mut r = Replica::new(deduper());
        let mut verdicts = Vec::new();
        let retweet = format!("RT @x: {STORY}");
        let e = entry(
            r.deduper(),
            &[(1, STORY, Some("1-0")), (2, retweet.as_str(), None)],
            &[],
        );
        r.apply(&e, false, &mut verdicts);
        assert!(verdicts.is_empty(), "another's entry answers nobody");
        r.applied = 7;
        r.applied_id = "1700000000000-5".into();
        let bytes = r.encode();
        let mut back = Replica::decode(&bytes, deduper()).unwrap();
        assert_eq!(
            (back.applied, back.applied_id.as_str()),
            (7, "1700000000000-5")
        );
        assert_eq!(back.memo_len(), 1);
        assert_eq!(
            snapshot::encode(back.deduper()),
            snapshot::encode(r.deduper())
        );
        let e = entry(back.deduper(), &[(1, "anything else", Some("1-0"))], &[]);
        back.apply(&e, true, &mut verdicts);
        assert_eq!(verdicts, [Verdict::New], "remembered, not decided");
        for cut in [0, 8, 20, bytes.len() - 1] {
            assert!(Replica::decode(&bytes[..cut], deduper()).is_err());
        }
        let mut flipped = bytes.clone();
        flipped[30] ^= 1;
        assert!(Replica::decode(&flipped, deduper()).is_err());
    }

    #[test]
    fn a_removal_logged_again_gets_its_first_answer_and_snapshots_keep_it() {
        let mut r = Replica::new(deduper());
        let mut verdicts = Vec::new();
        let first = entry(r.deduper(), &[(1, STORY, Some("1-0"))], &[]);
        r.apply(&first, true, &mut verdicts);
        let id = MessageId::Integer(1);
        let removal = |token: &'static [u8]| {
            let asks = [Ask {
                id: &id,
                sketch: crate::engine::Sketch {
                    shingles: &[],
                    band_keys: &[],
                    set_fingerprint: 0,
                    truncated: false,
                },
                op: Op::Remove,
                token: Some(token),
                time: 0,
            }];
            let mut bytes = Vec::new();
            log::encode(&asks, b"s:", &[], &mut bytes);
            Batch::decode(&bytes).unwrap()
        };
        verdicts.clear();
        r.apply(&removal(b"2-0"), true, &mut verdicts);
        assert_eq!(verdicts, [Verdict::Deleted { held: true }]);
        assert!(r.deduper().index().is_empty());
        // The notice's entry claimed again after its worker died: the same
        // answer, not "held: false".
        verdicts.clear();
        r.apply(&removal(b"2-0"), true, &mut verdicts);
        assert_eq!(verdicts, [Verdict::Deleted { held: true }]);
        // A snapshot carries the remembered answer.
        let mut back = Replica::decode(&r.encode(), deduper()).unwrap();
        verdicts.clear();
        back.apply(&removal(b"2-0"), true, &mut verdicts);
        assert_eq!(verdicts, [Verdict::Deleted { held: true }]);
        verdicts.clear();
        back.apply(&removal(b"3-0"), true, &mut verdicts);
        assert_eq!(verdicts, [Verdict::Deleted { held: false }], "a new token");
    }
}

//! A message's candidates looked up a few messages before its decision,
//! and what the decisions in between changed of them.
//!
//! [`super::Deduper`] decides a batch in order, and a few messages ahead of
//! the one being decided it starts loading what that later message will
//! read (see [`super::PrefetchStage`]). To load its candidates' entries it
//! must find them, walking the postings of the message's keys; the
//! decision used to walk them all again. Here the walk ahead keeps what it
//! found ([`Walked`]), and the decision takes it, mended for what the
//! decisions in between did to the index:
//! - a message indexed since posted under its keys: the decision walks
//!   again only the keys such a message may have posted under (asked of
//!   [`RecentInserts`]), and takes from them only the slots filled since;
//! - a message evicted, expired or removed since left the postings: its
//!   slot is dropped, and if it was refilled, the newcomer is found as
//!   above.
//!
//! So the decision sees exactly the candidates a walk at its own time
//! finds (in another order, which changes no verdict: see
//! `Deduper::best_match`).

/// Inserts [`RecentInserts`] remembers the slots of: more inserts than
/// this between a walk and its decision, and the decision walks again.
pub const RECENT: usize = 8;

/// Cells of [`RecentInserts`]' table of keys: 8 KiB of stamps, within the
/// first-level cache. The few dozen keys the last inserts posted under
/// mark one cell in about fifty, so a key they did not post under is
/// walked again about that often.
const STAMP_CELLS: usize = 1 << 11;

/// A message's distinct candidates, found by walking its keys' postings a
/// few messages before its decision, and when.
#[derive(Debug, Default)]
pub struct Walked {
    /// The distinct slots posted under the message's band keys (the first
    /// `candidates` of them), then those under its exact-set key, walked
    /// only to be loaded.
    pub slots: Vec<u32>,
    /// How many of `slots` are candidates.
    pub candidates: usize,
    /// The position in its batch of the message walked for; `None` for
    /// a walk of an earlier batch (cleared as each batch starts), which no
    /// decision takes.
    pub position: Option<usize>,
    /// [`RecentInserts::fills`] at the walk.
    pub fills: u32,
    /// [`super::index::Index::emptied`] at the walk.
    pub freed: u64,
    /// The index's slots at the walk: a slot at or past it was added
    /// since.
    pub slots_at: u32,
}

/// The last few messages inserted into the index: the slots they filled,
/// and, for every key, a stamp that tells whether one of them may have
/// posted under it.
#[derive(Debug)]
pub struct RecentInserts {
    /// By a key's cell: the number of the last insert that posted under a
    /// key of that cell, plus one (0: none yet).
    stamps: Box<[u32; STAMP_CELLS]>,
    /// Inserts so far (wrapping).
    fills: u32,
    /// The slot each of the last [`RECENT`] inserts filled, by its number
    /// modulo [`RECENT`].
    slots: [u32; RECENT],
    /// The number plus one of the last insert that refilled an emptied
    /// slot rather than adding one.
    last_refill: u32,
}

impl Default for RecentInserts {
    fn default() -> Self {
        RecentInserts {
            stamps: Box::new([0; STAMP_CELLS]),
            fills: 0,
            slots: [0; RECENT],
            last_refill: 0,
        }
    }
}

/// The cell of a key in the table of stamps. Keys are hashes, but a
/// multiply spreads any bits that mark a key's kind.
#[inline]
fn stamp_cell(key: u32) -> usize {
    // Masked with the table's size (a no-op: the shift leaves fewer bits),
    // so that no index is bound-checked.
    (key.wrapping_mul(0x9e37_79b1) >> (32 - STAMP_CELLS.trailing_zeros())) as usize
        & (STAMP_CELLS - 1)
}

/// What was inserted since a walk (see [`RecentInserts::since`]).
#[derive(Clone, Copy, Debug)]
pub struct Since {
    /// [`RecentInserts::fills`] at the walk.
    from: u32,
    /// Inserts since, at most [`RECENT`].
    inserts: u32,
    /// Whether one of them refilled an emptied slot.
    refilled: bool,
    /// The index's slots at the walk: a slot at or past it was added
    /// since.
    slots_from: u32,
}

impl RecentInserts {
    /// Inserts so far (wrapping): a walk notes it, to ask
    /// [`RecentInserts::since`] at its decision.
    pub fn fills(&self) -> u32 {
        self.fills
    }

    /// Notes an insert that filled `slot` and posted under (at most)
    /// `keys`; `refill`: the slot was emptied before, not added.
    #[inline]
    pub fn note(&mut self, slot: u32, keys: &[u32], refill: bool) {
        let number = self.fills;
        self.fills = number.wrapping_add(1);
        for &key in keys {
            self.stamps[stamp_cell(key)] = self.fills;
        }
        self.slots[number as usize % RECENT] = slot;
        if refill {
            self.last_refill = self.fills;
        }
    }

    /// What was inserted since `fills` (a walk's [`RecentInserts::fills`]),
    /// the index holding `slots` slots at the walk; `None` when more than
    /// [`RECENT`] were, too many to tell their slots.
    pub fn since(&self, fills: u32, slots: u32) -> Option<Since> {
        let inserts = self.fills.wrapping_sub(fills);
        if inserts as usize > RECENT {
            return None;
        }
        Some(Since {
            from: fills,
            inserts,
            refilled: self.is_since(self.last_refill, fills, inserts),
            slots_from: slots,
        })
    }

    /// Whether the insert numbered `stamp - 1` came at or after insert
    /// `from`, `inserts` inserts ago.
    #[inline]
    fn is_since(&self, stamp: u32, from: u32, inserts: u32) -> bool {
        stamp.wrapping_sub(from).wrapping_sub(1) < inserts
    }

    /// Whether an insert since may have posted under `key` (never `false`
    /// for one that did; `true` for about one key in fifty that none did).
    #[inline]
    pub fn may_have_posted(&self, since: Since, key: u32) -> bool {
        self.is_since(self.stamps[stamp_cell(key)], since.from, since.inserts)
    }

    /// Whether an insert since filled `slot`.
    #[inline]
    pub fn filled(&self, since: Since, slot: u32) -> bool {
        slot >= since.slots_from
            || (since.refilled
                && (0..since.inserts)
                    .any(|n| self.slots[since.from.wrapping_add(n) as usize % RECENT] == slot))
    }
}

impl Since {
    /// Whether any insert came since.
    pub fn any(self) -> bool {
        self.inserts > 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_posted_since_a_walk_are_told_and_older_ones_are_not() {
        let mut recent = RecentInserts::default();
        recent.note(0, &[10, 11], false);
        let walk = recent.fills();
        let since = recent.since(walk, 1).unwrap();
        assert!(!since.any());
        assert!(!recent.may_have_posted(since, 10));
        recent.note(1, &[12, 13], false);
        let since = recent.since(walk, 1).unwrap();
        assert!(since.any());
        assert!(recent.may_have_posted(since, 12));
        assert!(recent.may_have_posted(since, 13));
        assert!(!recent.may_have_posted(since, 10));
        assert!(recent.filled(since, 1));
        assert!(!recent.filled(since, 0));
    }

    #[test]
    fn a_refilled_slot_is_told_from_the_older_ones() {
        let mut recent = RecentInserts::default();
        for slot in 0..5 {
            recent.note(slot, &[slot], false);
        }
        let walk = recent.fills();
        recent.note(2, &[99], true);
        recent.note(5, &[98], false);
        let since = recent.since(walk, 5).unwrap();
        assert!(recent.filled(since, 2));
        assert!(recent.filled(since, 5));
        assert!(!recent.filled(since, 3));
        assert!(!recent.may_have_posted(since, 2));
        assert!(recent.may_have_posted(since, 99));
    }

    #[test]
    fn too_many_inserts_since_are_not_told() {
        let mut recent = RecentInserts::default();
        let walk = recent.fills();
        for slot in 0..=RECENT as u32 {
            recent.note(slot, &[slot], false);
        }
        assert!(recent.since(walk, 0).is_none());
        assert!(recent.since(walk.wrapping_add(1), 1).is_some());
    }

    #[test]
    fn stamps_stay_right_across_the_counters_wrap() {
        let mut recent = RecentInserts {
            fills: u32::MAX - 2,
            ..RecentInserts::default()
        };
        recent.note(0, &[1], false);
        let walk = recent.fills();
        recent.note(1, &[2], false);
        recent.note(2, &[3], false);
        recent.note(3, &[4], false);
        let since = recent.since(walk, 1).unwrap();
        assert!(!recent.may_have_posted(since, 1));
        for key in 2..=4 {
            assert!(recent.may_have_posted(since, key));
        }
    }
}

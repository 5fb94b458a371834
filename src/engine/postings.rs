//! The index's postings: a multimap from 32-bit key to slot, in one flat
//! array.
//!
//! A posting is one 64-bit cell, `key << 32 | (slot + 1)`; zero is an empty
//! cell. A key's postings sit from its home cell on (linear probing), so a
//! lookup reads the cells from the home to the next empty one: at the load
//! this table keeps, usually within one cache line (a key shared by many
//! messages, up to `max_bucket`, runs longer). That is the point of
//! this type over a general hash table, which reads a control line and then
//! a bucket line per lookup: on an index of a million messages every lookup
//! is a cache miss, and a message costs a dozen lookups. And because a key's
//! cells are known before they are read, [`Postings::prefetch`] can ask for
//! them ahead of time, while the engine works on the messages before.
//!
//! Removal shifts later cells of the run back into the hole (Knuth's
//! algorithm R), so there are no tombstones and lookups never slow down on
//! an endless stream.

use super::hint::{huge_pages, prefetch};

/// Most of the cells in use before the table grows: low enough that probe
/// runs stay short.
const MAX_LOAD: f64 = 0.8;

/// Cells in a 64-byte cache line.
const CELLS_PER_LINE: usize = 64 / size_of::<u64>();

/// Load the table is sized for.
const TARGET_LOAD: f64 = 0.4;

/// The postings table.
#[derive(Clone)]
pub struct Postings {
    cells: Vec<u64>,
    len: usize,
    /// Postings held when the table must grow: [`MAX_LOAD`] of the cells.
    grow_at: usize,
}

impl std::fmt::Debug for Postings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Postings")
            .field("len", &self.len)
            .field("cells", &self.cells.len())
            .finish()
    }
}

fn max_len(cells: usize) -> usize {
    (cells as f64 * MAX_LOAD) as usize
}

fn cell(key: u32, slot: u32) -> u64 {
    u64::from(key) << 32 | (u64::from(slot) + 1)
}

fn key_of(cell: u64) -> u32 {
    (cell >> 32) as u32
}

fn slot_of(cell: u64) -> u32 {
    (cell as u32).wrapping_sub(1)
}

impl Postings {
    /// A table sized for `expected` postings. Untouched pages cost no
    /// memory, so sizing for a full index up front is cheap, and it never
    /// has to grow (and hold two copies) while it fills.
    pub fn with_capacity(expected: usize) -> Postings {
        let cells = vec![0; ((expected as f64 / TARGET_LOAD) as usize).max(16)];
        huge_pages(&cells);
        Postings {
            grow_at: max_len(cells.len()),
            cells,
            len: 0,
        }
    }

    /// Postings held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The home cell of a key. Keys are hashes already; a multiply spreads
    /// them and the high bits pick the cell (Lemire's range reduction, no
    /// division and any table size).
    fn home(&self, key: u32) -> usize {
        let spread = u64::from(key).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 32;
        ((spread * self.cells.len() as u64) >> 32) as usize
    }

    fn next(&self, at: usize) -> usize {
        if at + 1 == self.cells.len() {
            0
        } else {
            at + 1
        }
    }

    /// Asks the processor to start loading a key's home cell and the cache
    /// line after it, so that a lookup or a removal soon after finds them in
    /// cache. A key shared by many messages has a run of cells longer than
    /// a line, and removing one of them walks the whole run: with the home
    /// line alone, evictions still missed the cache there. Only a hint.
    pub fn prefetch(&self, key: u32) {
        let home = self.cells.as_ptr().wrapping_add(self.home(key));
        prefetch(home);
        prefetch(home.wrapping_add(CELLS_PER_LINE));
    }

    /// Calls `f` with every slot posted under `key`.
    pub fn for_each(&self, key: u32, mut f: impl FnMut(u32)) {
        let mut at = self.home(key);
        loop {
            let c = self.cells[at];
            if c == 0 {
                return;
            }
            if key_of(c) == key {
                f(slot_of(c));
            }
            at = self.next(at);
        }
    }

    /// Adds `(key, slot)` unless `key` has `max_bucket` postings already.
    /// Returns whether it was added.
    pub fn insert_capped(&mut self, key: u32, slot: u32, max_bucket: usize) -> bool {
        if self.len >= self.grow_at {
            self.grow();
        }
        let mut at = self.home(key);
        let mut same = 0;
        loop {
            let c = self.cells[at];
            if c == 0 {
                break;
            }
            if key_of(c) == key {
                same += 1;
                if same >= max_bucket {
                    return false;
                }
            }
            at = self.next(at);
        }
        self.cells[at] = cell(key, slot);
        self.len += 1;
        true
    }

    /// Removes the posting `(key, slot)` if it is there.
    pub fn remove(&mut self, key: u32, slot: u32) {
        let wanted = cell(key, slot);
        let mut hole = self.home(key);
        loop {
            let c = self.cells[hole];
            if c == 0 {
                return;
            }
            if c == wanted {
                break;
            }
            hole = self.next(hole);
        }
        // Shift back every later cell of the run that may move into the
        // hole without passing its own home.
        self.cells[hole] = 0;
        self.len -= 1;
        let mut at = self.next(hole);
        loop {
            let c = self.cells[at];
            if c == 0 {
                return;
            }
            let home = self.home(key_of(c));
            // Whether `home` lies cyclically in (hole, at]: then the cell
            // must stay.
            let stays = if hole <= at {
                hole < home && home <= at
            } else {
                hole < home || home <= at
            };
            if !stays {
                self.cells[hole] = c;
                self.cells[at] = 0;
                hole = at;
            }
            at = self.next(at);
        }
    }

    /// Doubles the table (only indexes too large to size up front grow).
    fn grow(&mut self) {
        let doubled = vec![0; self.cells.len() * 2];
        huge_pages(&doubled);
        let old = std::mem::replace(&mut self.cells, doubled);
        self.grow_at = max_len(self.cells.len());
        self.len = 0;
        for c in old.into_iter().filter(|&c| c != 0) {
            let mut at = self.home(key_of(c));
            while self.cells[at] != 0 {
                at = self.next(at);
            }
            self.cells[at] = c;
            self.len += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn slots(postings: &Postings, key: u32) -> Vec<u32> {
        let mut found = Vec::new();
        postings.for_each(key, |slot| found.push(slot));
        found.sort_unstable();
        found
    }

    #[test]
    fn inserts_finds_and_removes() {
        let mut p = Postings::with_capacity(4);
        assert!(p.insert_capped(7, 0, 8));
        assert!(p.insert_capped(7, 1, 8));
        assert!(p.insert_capped(9, 1, 8));
        assert_eq!(slots(&p, 7), [0, 1]);
        p.remove(7, 0);
        assert_eq!(slots(&p, 7), [1]);
        assert_eq!(slots(&p, 9), [1]);
        p.remove(7, 5); // absent: nothing happens
        assert_eq!(p.len(), 2);
    }

    #[test]
    fn buckets_are_capped() {
        let mut p = Postings::with_capacity(16);
        for slot in 0..5 {
            p.insert_capped(3, slot, 3);
        }
        assert_eq!(slots(&p, 3), [0, 1, 2]);
    }

    proptest::proptest! {
        /// Any sequence of inserts and removes leaves exactly what a plain
        /// map of sets would hold, whatever collides, wraps or grows.
        #[test]
        fn agrees_with_a_map(ops in proptest::collection::vec((0u32..12, 0u32..6, proptest::bool::ANY), 0..300)) {
            let mut p = Postings::with_capacity(2);
            let mut model: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
            for (key, slot, add) in ops {
                // Spread the few keys so that homes collide and wrap.
                let key = key.wrapping_mul(0x4000_0001);
                let held = model.entry(key).or_default();
                if add {
                    if !held.contains(&slot) && p.insert_capped(key, slot, usize::MAX) {
                        held.push(slot);
                    }
                } else {
                    p.remove(key, slot);
                    held.retain(|&s| s != slot);
                }
            }
            let mut total = 0;
            for (key, held) in &mut model {
                held.sort_unstable();
                total += held.len();
                proptest::prop_assert_eq!(&slots(&p, *key), held);
            }
            proptest::prop_assert_eq!(p.len(), total);
        }
    }
}

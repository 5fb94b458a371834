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
//!
//! The table grows with what it holds: it starts small and doubles whenever
//! a fifth of it is in use, up to its full size (the expected postings at
//! load 0.45), and doubles at load 0.8 past it. Sized for a full index up
//! front instead, its keys would land on every page of it from the first
//! messages on: a short run would pay for the kernel's zeroing of the
//! whole table, and hold it all. A key's home keeps its
//! order when the table grows (it is the key's spread scaled to the table),
//! so growing copies the old cells into the new table front to back and
//! hands each copied stretch of the old one back to the kernel: the two
//! together never hold many more pages than the new one alone, and a full
//! index holds no more than a table sized for it from the start.
//!
//! The kernel zeroes each page of a new table when it is first written, on
//! the thread that writes it: that was a fifth of the deciding thread's time
//! on a stream of 200,000 tweets. So while growing copies the old cells into
//! the front of a new table, a thread of its own faults its pages in from
//! the back (see [`populate_in_background`]).

use super::hint::{Populating, huge_pages, populate_in_background, prefetch, release_pages};

/// Most of the cells in use before a table at its full size grows (it holds
/// more postings than expected): low enough that probe runs stay short.
const MAX_LOAD: f64 = 0.8;

/// Cells in a 64-byte cache line.
const CELLS_PER_LINE: usize = 64 / size_of::<u64>();

/// Load a table at its full size is sized for. 0.4 until a message had 10
/// keys instead of 7 (6 bands, 3 anchors, the exact set; issue 12): at 0.45
/// a full index of a million short tweets counts 505 bytes a message
/// instead of 528, at the same speed (`docs/performance.md`).
const TARGET_LOAD: f64 = 0.45;

/// Load at which a table below its full size doubles. Lower than
/// [`TARGET_LOAD`]: every lookup reads to the end of its key's run, and
/// runs lengthen quickly with the load, so a growing index keeps them short
/// for a little memory (the table of a full index is the same size).
const GROW_LOAD: f64 = 0.2;

/// Cells of a new table.
const MIN_CELLS: usize = 16;

/// Fewest cells of a new table whose pages a thread of its own faults in:
/// 1 MiB. Smaller ones cost less to zero than a thread costs to start.
const MIN_POPULATE_CELLS: usize = (1 << 20) / size_of::<u64>();

/// Cells copied between two hand-backs of the old table's pages while
/// growing: 2 MiB, one huge page.
const RELEASE_STRIDE: usize = (2 << 20) / size_of::<u64>();

/// The postings table.
pub struct Postings {
    cells: Vec<u64>,
    len: usize,
    /// Postings held when the table must grow (see [`grow_at`]).
    grow_at: usize,
    /// Cells of a table sized for the expected postings at [`TARGET_LOAD`]:
    /// growth doubles up to here and no further while the table holds no
    /// more than expected.
    full_size: usize,
    /// The thread faulting in the pages of `cells` since the last growth,
    /// joined before they are freed.
    populating: Option<Populating>,
}

impl Clone for Postings {
    fn clone(&self) -> Self {
        Postings {
            cells: self.cells.clone(),
            len: self.len,
            grow_at: self.grow_at,
            full_size: self.full_size,
            populating: None,
        }
    }
}

impl Drop for Postings {
    fn drop(&mut self) {
        if let Some(populating) = self.populating.take() {
            populating.join();
        }
    }
}

impl std::fmt::Debug for Postings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Postings")
            .field("len", &self.len)
            .field("cells", &self.cells.len())
            .field("full_size", &self.full_size)
            .finish()
    }
}

/// Postings a table of `cells` holds before it grows: [`GROW_LOAD`] of
/// it below its full size, [`MAX_LOAD`] at or past it.
fn grow_at(cells: usize, full_size: usize) -> usize {
    let load = if cells < full_size {
        GROW_LOAD
    } else {
        MAX_LOAD
    };
    ((cells as f64 * load) as usize).max(1)
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
    /// An empty table that grows to a full size fit for `expected`
    /// postings, and past it if it must.
    pub fn with_capacity(expected: usize) -> Postings {
        Postings::with_full_size((expected as f64 / TARGET_LOAD) as usize)
    }

    /// An empty table that grows to `full_size` cells, and past it only
    /// when more than 0.8 of them are in use.
    pub fn with_full_size(full_size: usize) -> Postings {
        let full_size = full_size.max(MIN_CELLS);
        Postings {
            cells: vec![0; MIN_CELLS],
            len: 0,
            grow_at: grow_at(MIN_CELLS, full_size),
            full_size,
            populating: None,
        }
    }

    /// Cells in the table now (for memory accounting: 8 bytes each).
    pub fn cells(&self) -> usize {
        self.cells.len()
    }

    /// Cells of the table at its full size (see [`Postings::with_full_size`]).
    pub fn full_size(&self) -> usize {
        self.full_size
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

    /// How many postings `(key, slot)` there are (a key that occurs twice
    /// among a message's keys is posted twice).
    pub fn count(&self, key: u32, slot: u32) -> usize {
        let mut n = 0;
        self.for_each(key, |s| n += usize::from(s == slot));
        n
    }

    /// Calls `f` with the slots posted under `key` until it returns false.
    pub fn for_each_while(&self, key: u32, mut f: impl FnMut(u32) -> bool) {
        let mut at = self.home(key);
        loop {
            let c = self.cells[at];
            if c == 0 || (key_of(c) == key && !f(slot_of(c))) {
                return;
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

    /// Doubles the table, or grows it to its full size if that is nearer.
    fn grow(&mut self) {
        let size = if self.cells.len() < self.full_size {
            (self.cells.len() * 2).min(self.full_size)
        } else {
            self.cells.len() * 2
        };
        let grown = vec![0; size];
        huge_pages(&grown);
        // The old table's thread, if still at work, must be done before its
        // pages are handed back below.
        if let Some(populating) = self.populating.take() {
            populating.join();
        }
        if size >= MIN_POPULATE_CELLS {
            self.populating = populate_in_background(&grown);
        }
        let mut old = std::mem::replace(&mut self.cells, grown);
        self.grow_at = grow_at(size, self.full_size);
        self.len = 0;
        // Homes are in key-spread order in both tables, so the cells copied
        // in old order land front to back in the new one (but for the few
        // that wrapped around the old table's end), and the old table's
        // pages can go back to the kernel as soon as they are copied.
        let mut released = 0;
        for start in (0..old.len()).step_by(RELEASE_STRIDE) {
            let end = (start + RELEASE_STRIDE).min(old.len());
            for &c in &old[start..end] {
                if c != 0 {
                    let mut at = self.home(key_of(c));
                    while self.cells[at] != 0 {
                        at = self.next(at);
                    }
                    self.cells[at] = c;
                    self.len += 1;
                }
            }
            released += release_pages(&mut old[released..end]);
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

    #[test]
    fn grows_with_what_it_holds_and_finds_everything_after() {
        // Large enough that growing copies many strides and hands pages back.
        let mut p = Postings::with_capacity(2_000_000);
        assert_eq!(p.cells(), MIN_CELLS, "starts small");
        let key = |n: u32| n.wrapping_mul(0x9e37_79b1);
        for n in 0..600_000u32 {
            assert!(p.insert_capped(key(n % 300_000), n, 8));
        }
        assert!(p.cells() >= 600_000 * 5, "grew to keep the load at 0.2");
        assert!(p.cells() <= 5_000_000, "no larger than its full size");
        for n in (0..300_000u32).step_by(7) {
            assert_eq!(slots(&p, key(n)), [n, n + 300_000]);
        }
        for n in 0..300_000u32 {
            p.remove(key(n), n);
        }
        for n in (0..300_000u32).step_by(7) {
            assert_eq!(slots(&p, key(n)), [n + 300_000]);
        }
        assert_eq!(p.len(), 300_000);
    }

    #[test]
    fn grows_past_its_full_size_when_it_holds_more_than_expected() {
        let mut p = Postings::with_capacity(100);
        for n in 0..10_000u32 {
            p.insert_capped(n.wrapping_mul(0x9e37_79b1), n, 8);
        }
        assert_eq!(p.len(), 10_000);
        assert!(p.cells() as f64 * MAX_LOAD >= 10_000.0);
        for n in 0..10_000u32 {
            assert_eq!(slots(&p, n.wrapping_mul(0x9e37_79b1)), [n]);
        }
    }

    proptest::proptest! {
        /// Any sequence of inserts and removes leaves exactly what a plain
        /// map of sets would hold, whatever collides, wraps or grows.
        #[test]
        fn agrees_with_a_map(
            expected in proptest::sample::select(vec![0usize, 10, 30]),
            ops in proptest::collection::vec((0u32..12, 0u32..6, proptest::bool::ANY), 0..300),
        ) {
            // Full sizes of 16, 25 and 75 cells: the table grows by doubling,
            // to a full size that is no power of two, and past it.
            let mut p = Postings::with_capacity(expected);
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

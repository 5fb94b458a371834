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
//! whole table, and hold it all.
//!
//! It grows in place: its cells lie in address space reserved for twice its
//! full size ([`Cells`]), so growing adds cells after the old ones and
//! rehashes the postings where they lie (`rehash_in_place`). The kernel
//! zeroes only the added pages, never a copy of the old ones (on a virtual
//! machine, at about 1 GB/s, the copies were a third of what a stream of
//! 200,000 tweets had zeroed), and a full index holds no more than a table
//! sized for it from the start. The rehash fills the table from the back, so
//! a thread of its own faults the added pages in from the front (see
//! [`populate_in_background`]): the deciding thread zeroes about half of
//! them.

use super::cells::Cells;
use super::hint::{Populating, huge_pages, populate_in_background, prefetch};

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

/// Multiple of its full size a table reserves address space for, so that it
/// grows in place to its full size and once past it (see [`Cells`]).
const RESERVE_PAST_FULL_SIZE: usize = 2;

/// Fewest cells of a new table whose pages a thread of its own faults in:
/// 1 MiB. Smaller ones cost less to zero than a thread costs to start.
const MIN_POPULATE_CELLS: usize = (1 << 20) / size_of::<u64>();

/// The postings table.
pub struct Postings {
    cells: Cells,
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
    /// Cells of the table by its growth rule: `cells.len()`, or more while
    /// a growth waits (see [`Postings::defer_growth`]).
    size: usize,
    /// Whether growth waits for [`Postings::finish_growth`].
    deferring: bool,
}

impl Clone for Postings {
    fn clone(&self) -> Self {
        Postings {
            cells: self.cells.clone(),
            len: self.len,
            grow_at: self.grow_at,
            full_size: self.full_size,
            populating: None,
            size: self.size,
            deferring: self.deferring,
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
            cells: Cells::new(MIN_CELLS, full_size.saturating_mul(RESERVE_PAST_FULL_SIZE)),
            len: 0,
            grow_at: grow_at(MIN_CELLS, full_size),
            full_size,
            populating: None,
            size: MIN_CELLS,
            deferring: false,
        }
    }

    /// Cells in the table (for memory accounting: 8 bytes each): by its
    /// growth rule, so a growth that waits (see [`Postings::defer_growth`])
    /// is counted as made, and a byte budget evicts the same messages
    /// whether growth waits or not.
    pub fn cells(&self) -> usize {
        self.size
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

    /// The home cell of a key (see [`home`]).
    fn home(&self, key: u32) -> usize {
        home(key, self.cells.len())
    }

    /// Asks the processor to start loading a key's home cell and the cache
    /// line after it, so that a lookup or a removal soon after finds them in
    /// cache. A key shared by many messages has a run of cells longer than
    /// a line, and removing one of them walks the whole run: with the home
    /// line alone, evictions still missed the cache there. Only a hint.
    pub fn prefetch(&self, key: u32) {
        let home = self.cells.as_slice().as_ptr().wrapping_add(self.home(key));
        prefetch(home);
        prefetch(home.wrapping_add(CELLS_PER_LINE));
    }

    /// Calls `f` with every slot posted under `key`.
    #[inline]
    pub fn for_each(&self, key: u32, mut f: impl FnMut(u32)) {
        // The key's run, from its home cell to the first empty one, may wrap
        // round the table's end: walked as the two slices either side of
        // the home, with neither a bound check nor a wrap test a cell.
        let (before, from) = self.cells.as_slice().split_at(self.home(key));
        for part in [from, before] {
            for &c in part {
                if c == 0 {
                    return;
                }
                if key_of(c) == key {
                    f(slot_of(c));
                }
            }
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
        // As in [`Postings::for_each`]: the run as two slices.
        let (before, from) = self.cells.as_slice().split_at(self.home(key));
        for part in [from, before] {
            for &c in part {
                if c == 0 || (key_of(c) == key && !f(slot_of(c))) {
                    return;
                }
            }
        }
    }

    /// Adds `(key, slot)` unless `key` has `max_bucket` postings already.
    /// Returns whether it was added.
    ///
    /// Inlined, with growing kept out of line (it is rare).
    #[inline]
    pub fn insert_capped(&mut self, key: u32, slot: u32, max_bucket: usize) -> bool {
        if self.len >= self.grow_at {
            self.grow();
        }
        let added = put_capped(self.cells.as_mut_slice(), key, slot, max_bucket);
        self.len += usize::from(added);
        added
    }

    /// Adds `(key, slot)` for each key of `keys` and then for `last`, in
    /// that order, each unless its key has `max_bucket` postings already:
    /// what [`Postings::insert_capped`] does called for each in turn, the
    /// table growing at the same insert.
    ///
    /// A message posts ten keys at once. When the table cannot grow before
    /// the last of them (each adds at most one posting), the table's cells,
    /// size and count stay in registers across all of them, and no insert
    /// asks whether to grow; otherwise each is inserted as one.
    #[inline]
    pub fn insert_all_capped(&mut self, keys: &[u32], last: u32, slot: u32, max_bucket: usize) {
        let all = keys.len() + 1;
        if self.len.saturating_add(all) > self.grow_at {
            for &key in keys {
                self.insert_capped(key, slot, max_bucket);
            }
            self.insert_capped(last, slot, max_bucket);
            return;
        }
        let cells = self.cells.as_mut_slice();
        let mut added = 0;
        for &key in keys {
            added += usize::from(put_capped(cells, key, slot, max_bucket));
        }
        added += usize::from(put_capped(cells, last, slot, max_bucket));
        self.len += added;
    }

    /// Removes the posting `(key, slot)` if it is there.
    pub fn remove(&mut self, key: u32, slot: u32) {
        let wanted = cell(key, slot);
        let mut hole = self.home(key);
        let cells = self.cells.as_mut_slice();
        let size = cells.len();
        loop {
            let c = cells[hole];
            if c == 0 {
                return;
            }
            if c == wanted {
                break;
            }
            hole = next(hole, size);
        }
        // Shift back every later cell of the run that may move into the
        // hole without passing its own home.
        cells[hole] = 0;
        self.len -= 1;
        let mut at = next(hole, size);
        loop {
            let c = cells[at];
            if c == 0 {
                return;
            }
            let home = home(key_of(c), size);
            // Whether `home` lies cyclically in (hole, at]: then the cell
            // must stay.
            let stays = if hole <= at {
                hole < home && home <= at
            } else {
                hole < home || home <= at
            };
            if !stays {
                cells[hole] = c;
                cells[at] = 0;
                hole = at;
            }
            at = next(at, size);
        }
    }

    /// Grows the table at once to the size it would grow to by the time
    /// it held `total` postings, inserted one by one with nothing removed,
    /// so that inserting them rehashes nothing. A caller that knows how
    /// many it will insert (restoring a snapshot, whose postings are
    /// recorded) reserves no more cells than growing would have added, so
    /// the table ends the same size: only where the postings lie within
    /// their runs differs, which no lookup depends on.
    pub fn reserve(&mut self, total: usize) {
        let mut size = self.size;
        // Inserting with `len` held grows when `len >= grow_at`, so holding
        // `total` needs a size whose `grow_at` is at least `total`.
        while total > grow_at(size, self.full_size) {
            size = self.grown_size(size);
        }
        if size > self.size {
            self.size = size;
        }
        if self.size > self.cells.len() {
            self.grow_to(self.size, 1);
        }
        self.grow_at = self.next_grow_at();
    }

    /// The size a table of `size` cells grows to: double, or its full size
    /// if that is nearer.
    fn grown_size(&self, size: usize) -> usize {
        if size < self.full_size {
            (size * 2).min(self.full_size)
        } else {
            size * 2
        }
    }

    /// Doubles the table, or grows it to its full size if that is nearer
    /// (see [`Postings::grow_to`]); while growth waits, only notes the size
    /// the rule has the table grow to, and grows it then only if its cells
    /// fill past [`DEFERRED_MAX_LOAD`]. Out of line: it is rare, and kept
    /// out of [`Postings::insert_capped`], which is inlined.
    #[cold]
    #[inline(never)]
    fn grow(&mut self) {
        if self.len >= grow_at(self.size, self.full_size) {
            self.size = self.grown_size(self.size);
        }
        let overfull = self.len >= deferred_limit(self.cells.len());
        if self.size > self.cells.len() && (!self.deferring || overfull) {
            self.grow_to(self.size, 1);
        }
        self.grow_at = self.next_grow_at();
    }

    /// Postings held when [`Postings::grow`] must next be asked: when the
    /// rule grows the table, or, with a growth waiting, when its cells fill
    /// past [`DEFERRED_MAX_LOAD`] if that comes first.
    fn next_grow_at(&self) -> usize {
        let rule = grow_at(self.size, self.full_size);
        if self.size > self.cells.len() {
            rule.min(deferred_limit(self.cells.len()))
        } else {
            rule
        }
    }

    /// From now until [`Postings::finish_growth`], growing waits: inserts
    /// note the size the table's rule grows it to, and the cells grow to it
    /// (all growths at once) when `finish_growth` is called, with the
    /// postings rehashed on several threads. The size the table ends is the
    /// one it would have grown to meanwhile, so memory is the same; only
    /// where postings lie within their runs differs, which no lookup
    /// depends on. Meanwhile the cells hold more postings than the rule
    /// lets them (up to half their cells, past which they grow at
    /// once, on this thread): lookups walk longer runs, but find the same.
    ///
    /// A replica decides a batch of hundreds of messages at a time, adding
    /// a few thousand postings, while a table of millions of cells grows
    /// only at a fifth in use: deferred to the batch's end, the growth that
    /// falls within it leaves the deciding thread for the threads that
    /// counted the batch's overlaps.
    pub fn defer_growth(&mut self) {
        self.deferring = true;
        self.grow_at = self.next_grow_at();
    }

    /// Makes the growth that waited since [`Postings::defer_growth`], if
    /// any, rehashing on `threads` threads (the caller's among them), and
    /// grows at once from then on.
    pub fn finish_growth(&mut self, threads: usize) {
        self.deferring = false;
        if self.size > self.cells.len() {
            self.grow_to(self.size, threads);
        }
        self.grow_at = self.next_grow_at();
    }

    /// Grows the table to `size` cells in place (see [`Cells`]): only the
    /// added cells are new memory, and the postings are rehashed where they
    /// lie, on `threads` threads if the table is large enough to pay for
    /// them (see [`rehash_in_parts`]).
    fn grow_to(&mut self, size: usize, threads: usize) {
        let old_size = self.cells.len();
        // The last growth's thread must be done before the cells can move.
        if let Some(populating) = self.populating.take() {
            populating.join();
        }
        self.cells.grow(size, size.saturating_mul(2));
        // The whole table: a huge page across the old end was not whole
        // inside the old table.
        huge_pages(self.cells.as_slice());
        let added = &self.cells.as_slice()[old_size..];
        // The rehash below fills the table from the back, so a thread of its
        // own faults the added pages in from the front: the two meet halfway.
        if added.len() >= MIN_POPULATE_CELLS {
            self.populating = populate_in_background(added);
        }
        self.size = size;
        self.grow_at = self.next_grow_at();
        if threads > 1 && old_size >= MIN_PARALLEL_REHASH {
            rehash_in_parts(self.cells.as_mut_slice(), old_size, threads, self.len);
        } else {
            rehash_in_place(self.cells.as_mut_slice(), old_size);
        }
    }
}

/// Most of its cells a table whose growth waits (see
/// [`Postings::defer_growth`]) fills before it grows all the same: runs at
/// half the cells in use are still a few cells long, and a batch's
/// postings fill a large table by far less.
const DEFERRED_MAX_LOAD: f64 = 0.5;

/// Postings a table of `cells` holds, with a growth waiting, before it
/// grows at once (see [`DEFERRED_MAX_LOAD`]).
fn deferred_limit(cells: usize) -> usize {
    ((cells as f64 * DEFERRED_MAX_LOAD) as usize).max(1)
}

/// Fewest old cells a rehash splits among threads: 256 KiB of them. On
/// smaller tables starting the threads costs more than it saves.
const MIN_PARALLEL_REHASH: usize = (256 << 10) / size_of::<u64>();

/// Moves the postings in the first `old_size` cells of `cells`, placed for
/// a table of that size, to where the table's present size puts them, on
/// `parts` threads (the caller's among them), in three passes (`held`:
/// the postings there, to size the threads' buffers):
/// - each thread takes the postings out of a share of the old cells,
///   emptying them, and sorts them by the share of the grown table their
///   home lies in ([`take_part`]);
/// - each thread puts the postings whose home lies in its share of the
///   grown table, probing within that share only ([`place_part`]); a
///   posting whose run reaches the share's end is left over;
/// - the caller puts the few left over, probing from their homes across
///   the shares as an insert does.
///
/// Every posting then lies at the end of a run of cells in use from its
/// home, which is all a lookup or a removal asks of the table. Unlike
/// [`rehash_in_place`], where postings lie within their runs depends on
/// the number of threads; nothing reads that order.
fn rehash_in_parts(cells: &mut [u64], old_size: usize, parts: usize, held: usize) {
    let size = cells.len();
    let span = size.div_ceil(parts);
    let share = old_size.div_ceil(parts);
    let taken: Vec<Vec<Vec<u64>>> = std::thread::scope(|scope| {
        let mut shares = cells[..old_size].chunks_mut(share);
        let mine = shares.next();
        let others: Vec<_> = shares
            .map(|old| scope.spawn(move || take_part(old, size, span, parts, held)))
            .collect();
        let mut taken =
            vec![mine.map_or_else(Vec::new, |old| take_part(old, size, span, parts, held))];
        taken.extend(
            others
                .into_iter()
                .map(|thread| thread.join().expect("a rehash thread cannot panic")),
        );
        taken
    });
    let left: Vec<Vec<u64>> = std::thread::scope(|scope| {
        let mut shares = cells.chunks_mut(span).enumerate();
        let taken = &taken;
        let mine = shares.next();
        let others: Vec<_> = shares
            .map(|(part, grown)| {
                scope.spawn(move || place_part(grown, part * span, size, taken, part))
            })
            .collect();
        let mut left = vec![mine.map_or_else(Vec::new, |(part, grown)| {
            place_part(grown, part * span, size, taken, part)
        })];
        left.extend(
            others
                .into_iter()
                .map(|thread| thread.join().expect("a rehash thread cannot panic")),
        );
        left
    });
    for &moving in left.iter().flatten() {
        let mut at = home(key_of(moving), size);
        while cells[at] != 0 {
            at = next(at, size);
        }
        cells[at] = moving;
    }
}

/// Takes every posting out of `old` (a share of the old cells), emptying
/// them, sorted by the share of `span` cells of a table of `size` cells
/// that the posting's home lies in (`parts` shares; `held` postings in the
/// whole old table). Never inlined, so
/// that profiles tell the part that runs in parallel from the serial.
#[inline(never)]
fn take_part(
    old: &mut [u64],
    size: usize,
    span: usize,
    parts: usize,
    held: usize,
) -> Vec<Vec<u64>> {
    // The postings are spread about evenly over the shares: room for a
    // little more than even saves most regrowth.
    let expected = held / parts / parts;
    let mut by_part: Vec<Vec<u64>> = (0..parts)
        .map(|_| Vec::with_capacity(expected + expected / 4 + 16))
        .collect();
    for c in old.iter_mut().filter(|c| **c != 0) {
        let part = home(key_of(*c), size) / span;
        if let Some(to) = by_part.get_mut(part) {
            to.push(*c);
        }
        *c = 0;
    }
    by_part
}

/// Puts into `grown` (the share of a table of `size` cells from cell
/// `base` on, empty) the postings of every [`take_part`] sorted into share
/// `part`, probing from each one's home up to the share's end; returns
/// those whose run reached it. Never inlined, as [`take_part`].
#[inline(never)]
fn place_part(
    grown: &mut [u64],
    base: usize,
    size: usize,
    taken: &[Vec<Vec<u64>>],
    part: usize,
) -> Vec<u64> {
    let mut left = Vec::new();
    for from in taken {
        for &moving in from.get(part).into_iter().flatten() {
            let mut at = home(key_of(moving), size) - base;
            while at < grown.len() && grown[at] != 0 {
                at += 1;
            }
            match grown.get_mut(at) {
                Some(cell) => *cell = moving,
                None => left.push(moving),
            }
        }
    }
    left
}

/// Puts `(key, slot)` at the end of its key's run in `cells` unless the run
/// holds `max_bucket` postings of the key already (see
/// [`Postings::insert_capped`]). Returns whether it was put. The caller
/// counts it and grows the table: `cells` must have an empty cell.
#[inline(always)]
fn put_capped(cells: &mut [u64], key: u32, slot: u32, max_bucket: usize) -> bool {
    let size = cells.len();
    let mut at = home(key, size);
    // A home is always below the size (see [`home`]); were it not, the
    // run stops loudly rather than the posting being put at the start
    // of the table, away from its run.
    assert!(at < size, "a key's home cell lies within its table");
    let mut same = 0;
    // To the table's end, then from its start: a run that wraps is rare,
    // and asking at every cell whether to wrap cost two instructions of
    // the eleven a cell took.
    loop {
        while let Some(&c) = cells.get(at) {
            if c == 0 {
                cells[at] = cell(key, slot);
                return true;
            }
            if key_of(c) == key {
                same += 1;
                if same >= max_bucket {
                    return false;
                }
            }
            at += 1;
        }
        at = 0;
    }
}

/// The home cell of `key` in a table of `size` cells. Keys are hashes
/// already; a multiply spreads them and the high bits pick the cell
/// (Lemire's range reduction, no division and any table size). A larger
/// table never puts a key's home lower.
#[inline]
fn home(key: u32, size: usize) -> usize {
    let spread = u64::from(key).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 32;
    ((spread * size as u64) >> 32) as usize
}

/// The cell after `at` in a table of `size` cells, wrapping round its end.
#[inline]
fn next(at: usize, size: usize) -> usize {
    if at + 1 == size { 0 } else { at + 1 }
}

/// Moves the postings in the first `old_size` cells of `cells`, placed for a
/// table of that size, to where the table's present size puts them; the
/// other cells are empty.
///
/// Cells are taken last first and each posting is put where an insert into
/// the grown table would put it, but counting only the cells already put as
/// taken: a cell whose posting is still to be moved is free to take, and
/// that posting is then moved in turn. So a posting's run from its home
/// holds only postings already put, which never move again, and a cell left
/// empty when its posting moves lies inside no such run. Growing never
/// lowers a home, and doubling about doubles it, so most postings move into
/// cells already dealt with, at the back: the pass reads and writes the
/// table back to front, and few postings displace another.
fn rehash_in_place(cells: &mut [u64], old_size: usize) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the processor has AVX2, checked just above.
        unsafe { avx2::rehash_in_place(cells, old_size) };
        return;
    }
    rehash_in_place_with(cells, old_size, portable_in_use);
}

/// Cells a rehash looks at together: four cache lines'. A table grows at a
/// fifth of its cells in use, so a block of one line held under two
/// postings, and the loop round each block (its count, its address, its
/// bound checks) cost more than the block's mask.
const BLOCK: usize = 4 * CELLS_PER_LINE;

/// [`rehash_in_place`], finding the cells in use a block at a time with
/// `in_use` (bit `i` set when cell `i` of the block holds a posting).
///
/// A table grows at a fifth of its cells in use, so four in five cells a
/// rehash passes are empty: asked one by one, they cost more than moving
/// the postings did (the loop, the bounds check, the load and the test for
/// each). A block's mask is taken before any of its cells is dealt with,
/// and cells change under it, but only in ways the cell-by-cell pass skips
/// alike: a cell is emptied only as it is taken itself, and a cell filled
/// below the one being taken is marked put (`put_below`), which taking
/// tests. So the postings move in the same order to the same cells as
/// [`rehash_in_place_reference`] moves them.
///
/// Most postings move up, into an empty cell above the one they leave
/// (growing never lowers a home, and doubling about doubles it): those
/// [`move_up`] puts without the general walk of [`take`], and without
/// reading the marks. It never moves a posting already put: one put below
/// the cell being taken has its home at or below its cell (`move_up`
/// declines it at once), or wrapped round the table's end, its run from
/// its home to the end full, and still full (no cell above the one being
/// taken is emptied again), so `move_up` declines it too, and `take`
/// finds it marked.
#[inline(always)]
fn rehash_in_place_with(cells: &mut [u64], old_size: usize, in_use: impl Fn(&[u64; BLOCK]) -> u32) {
    assert!(
        old_size <= cells.len(),
        "the old cells lie within the grown table"
    );
    // Then every home lies below the size (see [`home`]), which
    // [`move_up`] relies on for its soundness.
    assert!(
        u64::try_from(cells.len()).is_ok_and(|size| size <= 1 << 32),
        "a table's size fits the home's multiply"
    );
    // Cells put below the cell being taken: above it, every cell is either
    // put or empty, so these are the only ones a probe must ask about.
    let mut put_below = vec![0u64; old_size.div_ceil(64)];
    let blocks = old_size / BLOCK;
    for from in (blocks * BLOCK..old_size).rev() {
        take(cells, from, &mut put_below);
    }
    for block in (0..blocks).rev() {
        let start = block * BLOCK;
        // SAFETY: `start + BLOCK <= blocks * BLOCK <= old_size <= cells.len()`
        // (asserted above), so the block lies within the cells, and a
        // `[u64; BLOCK]` has the alignment of a `u64`.
        let lanes = unsafe { &*cells.as_ptr().add(start).cast::<[u64; BLOCK]>() };
        let mut mask = in_use(lanes);
        // Last first, as the cell-by-cell pass takes them.
        while mask != 0 {
            let lane = 31 - mask.leading_zeros();
            mask &= !(1 << lane);
            let from = start + lane as usize;
            // SAFETY: `from < start + BLOCK <= cells.len()`, and
            // `cells.len() <= 2^32`, both asserted above.
            if !unsafe { move_up(cells, from) } {
                take(cells, from, &mut put_below);
            }
        }
    }
}

/// Whether cell `at` was put by the rehash (see [`rehash_in_place_with`]).
#[inline(always)]
fn is_put_below(put: &[u64], at: usize) -> bool {
    put[at / 64] >> (at % 64) & 1 != 0
}

/// Moves the posting in cell `from` (in use, not yet taken, below
/// `cells.len()`) to the first empty cell from its home on, if its home
/// lies above `from` and that cell before the table's end: where [`take`]
/// would put it, with nothing displaced and nothing marked. Returns
/// whether it moved; if not, nothing changed.
///
/// # Safety
///
/// `from < cells.len() <= 2^32`: then every home lies below the size
/// (see [`home`]), and no cell is read or written unchecked past it.
#[inline(always)]
unsafe fn move_up(cells: &mut [u64], from: usize) -> bool {
    let size = cells.len();
    debug_assert!(from < size && size as u64 <= 1 << 32);
    // SAFETY: the caller's `from` lies below `cells.len()`.
    let moving = unsafe { *cells.get_unchecked(from) };
    let mut at = home(key_of(moving), size);
    if at <= from {
        return false;
    }
    // Above `from` every cell is put or empty: the first empty one ends
    // the posting's run. A home lies below the size (see [`home`]; the
    // caller's size is at most 2^32), so only the cells after it need the
    // bound checked.
    debug_assert!(at < size);
    loop {
        // SAFETY: `at < size`: a home is below it, and the loop stops
        // before stepping onto it.
        let cell = unsafe { cells.get_unchecked_mut(at) };
        if *cell == 0 {
            *cell = moving;
            // SAFETY: as above.
            unsafe { *cells.get_unchecked_mut(from) = 0 };
            return true;
        }
        at += 1;
        if at == size {
            return false;
        }
    }
}

/// Takes the posting in cell `from`, if there is one still to move, and
/// moves it, and each posting it displaces in turn, where an insert into
/// the grown table would put it (see [`rehash_in_place`]).
#[inline(always)]
fn take(cells: &mut [u64], from: usize, put_below: &mut [u64]) {
    let size = cells.len();
    let mut moving = cells[from];
    if moving == 0 || is_put_below(put_below, from) {
        return;
    }
    cells[from] = 0;
    loop {
        let mut at = home(key_of(moving), size);
        // Most postings: a home above `from`, and a run that ends before
        // the table's end.
        if at > from {
            while at < size && cells[at] != 0 {
                at += 1;
            }
            if at < size {
                cells[at] = moving;
                break;
            }
            at = 0;
        }
        while cells[at] != 0 && (at > from || is_put_below(put_below, at)) {
            at = next(at, size);
        }
        // `from` itself is empty, so putting a posting there ends the
        // chain, and every later cell taken lies below it.
        if at < from {
            put_below[at / 64] |= 1 << (at % 64);
        }
        let displaced = std::mem::replace(&mut cells[at], moving);
        if displaced == 0 {
            break;
        }
        moving = displaced;
    }
}

/// The cells of `block` in use, one by one.
#[cfg_attr(target_arch = "x86_64", allow(dead_code))]
fn portable_in_use(block: &[u64; BLOCK]) -> u32 {
    block
        .iter()
        .enumerate()
        .fold(0, |mask, (i, &c)| mask | u32::from(c != 0) << i)
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::BLOCK;
    use std::arch::x86_64::*;

    /// [`super::rehash_in_place`] with a block's cells in use found by
    /// compares of four cells each.
    #[target_feature(enable = "avx2")]
    pub(super) fn rehash_in_place(cells: &mut [u64], old_size: usize) {
        super::rehash_in_place_with(cells, old_size, |block| in_use(block));
    }

    /// The cells of `block` in use (bit `i` for cell `i`).
    #[inline]
    #[target_feature(enable = "avx2")]
    pub(super) fn in_use(block: &[u64; BLOCK]) -> u32 {
        const _: () = assert!(BLOCK == 32, "eight loads of four cells");
        let lanes = block.as_ptr().cast::<__m256i>();
        let zero = _mm256_setzero_si256();
        // Eight cells: two compares, their dwords packed to one vector
        // (cells 0, 1, 4, 5 | 2, 3, 6, 7), put in order, one movemask.
        let empty = |at: usize| {
            // SAFETY: `block` is 32 cells, 256 bytes, and `at <= 6`: two
            // unaligned loads of 32 bytes from `lanes + at` read within it.
            let (low, high) = unsafe {
                (
                    _mm256_loadu_si256(lanes.add(at)),
                    _mm256_loadu_si256(lanes.add(at + 1)),
                )
            };
            let packed = _mm256_packs_epi32(
                _mm256_cmpeq_epi64(low, zero),
                _mm256_cmpeq_epi64(high, zero),
            );
            _mm256_movemask_ps(_mm256_castsi256_ps(
                _mm256_permute4x64_epi64::<0b11_01_10_00>(packed),
            )) as u32
        };
        !(empty(0) | empty(2) << 8 | empty(4) << 16 | empty(6) << 24)
    }
}

/// The cell-by-cell rehash, as it was before blocks, that
/// [`rehash_in_place_with`] must match cell for cell: kept whole, not
/// written through [`take`], so that a fault in the shared part cannot hide.
#[cfg(test)]
fn rehash_in_place_reference(cells: &mut [u64], old_size: usize) {
    let size = cells.len();
    let mut put_below = vec![0u64; old_size.div_ceil(64)];
    let is_put_below = |put: &[u64], at: usize| put[at / 64] >> (at % 64) & 1 != 0;
    for from in (0..old_size).rev() {
        let mut moving = cells[from];
        if moving == 0 || is_put_below(&put_below, from) {
            continue;
        }
        cells[from] = 0;
        loop {
            let mut at = home(key_of(moving), size);
            if at > from {
                while at < size && cells[at] != 0 {
                    at += 1;
                }
                if at < size {
                    cells[at] = moving;
                    break;
                }
                at = 0;
            }
            while cells[at] != 0 && (at > from || is_put_below(&put_below, at)) {
                at = next(at, size);
            }
            if at < from {
                put_below[at / 64] |= 1 << (at % 64);
            }
            let displaced = std::mem::replace(&mut cells[at], moving);
            if displaced == 0 {
                break;
            }
            moving = displaced;
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

    /// A run from the table's last cell wraps round to its first: lookups,
    /// inserts and removals read on from cell 0, and the bucket cap counts
    /// across the wrap.
    #[test]
    fn runs_wrap_round_the_tables_end() {
        let mut p = Postings::with_full_size(MIN_CELLS);
        let size = p.cells();
        let last: Vec<u32> = (0..u32::MAX)
            .filter(|&k| home(k, size) == size - 1)
            .take(3)
            .collect();
        // Key `last[0]` three times (capped at three), then two more keys
        // homed at the last cell: cells 15, 0, 1, 2, 3.
        for slot in 0..4 {
            p.insert_capped(last[0], slot, 3);
        }
        assert!(p.insert_capped(last[1], 10, 3));
        assert!(p.insert_capped(last[2], 11, 3));
        assert_eq!(p.cells(), size, "no growth: the runs must wrap");
        assert_eq!(slots(&p, last[0]), [0, 1, 2]);
        assert_eq!(slots(&p, last[1]), [10]);
        assert_eq!(slots(&p, last[2]), [11]);
        assert!(!p.insert_capped(last[0], 5, 3));
        let mut seen = Vec::new();
        p.for_each_while(last[2], |slot| {
            seen.push(slot);
            false
        });
        assert_eq!(seen, [11]);
        p.remove(last[0], 1);
        assert_eq!(slots(&p, last[0]), [0, 2]);
        assert_eq!(slots(&p, last[2]), [11]);
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

    /// A table of `old_size` cells with room to grow by `grown_by`, holding
    /// a posting for each of `keys` (at most all but one cell, so that runs
    /// can fill it and wrap; `clustered` sets their top bits, whose homes
    /// are near the end and wrap most), and those postings.
    fn old_table(
        old_size: usize,
        grown_by: usize,
        keys: &[u32],
        clustered: bool,
    ) -> (Vec<u64>, Vec<u64>) {
        let mut cells = vec![0u64; old_size + grown_by];
        let mut held = Vec::new();
        for (n, &key) in keys.iter().take(old_size - 1).enumerate() {
            let key = if clustered { key | 0xfff0_0000 } else { key };
            let mut at = home(key, old_size);
            while cells[at] != 0 {
                at = next(at, old_size);
            }
            cells[at] = cell(key, n as u32);
            held.push(cell(key, n as u32));
        }
        (cells, held)
    }

    /// `cells` (the old table in the first `old_size`) rehashed by the
    /// portable and the dispatched rehash (AVX2 where the processor has
    /// it), after checking that each puts every posting where the
    /// cell-by-cell reference does.
    fn rehashed_as_cell_by_cell(
        mut cells: Vec<u64>,
        old_size: usize,
    ) -> Result<Vec<u64>, proptest::test_runner::TestCaseError> {
        let mut expected = cells.clone();
        rehash_in_place_reference(&mut expected, old_size);
        let mut portable = cells.clone();
        rehash_in_place_with(&mut portable, old_size, portable_in_use);
        proptest::prop_assert_eq!(&portable, &expected);
        rehash_in_place(&mut cells, old_size);
        proptest::prop_assert_eq!(&cells, &expected);
        Ok(cells)
    }

    /// That `cells` hold `held` and nothing else, each once, at the end of
    /// an unbroken run of cells in use from its home.
    fn every_posting_ends_its_run(
        cells: &[u64],
        mut held: Vec<u64>,
    ) -> Result<(), proptest::test_runner::TestCaseError> {
        let size = cells.len();
        for &posting in &held {
            let mut at = home(key_of(posting), size);
            while cells[at] != posting {
                proptest::prop_assert_ne!(cells[at], 0, "a run broken before {:x}", posting);
                at = next(at, size);
            }
        }
        let mut all: Vec<u64> = cells.iter().copied().filter(|&c| c != 0).collect();
        all.sort_unstable();
        held.sort_unstable();
        proptest::prop_assert_eq!(all, held);
        Ok(())
    }

    proptest::proptest! {
        /// A table reserved for the postings it will hold ends the size
        /// growing one by one makes it, does not grow again while they come,
        /// and finds the same slots under every key.
        #[test]
        fn reserving_ends_the_size_growing_makes_it(
            expected in proptest::sample::select(vec![0usize, 10, 30, 1_000]),
            held in 0usize..3_000,
            keys in 1u32..500,
            already in 0usize..40,
        ) {
            let (mut grown, mut reserved) =
                (Postings::with_capacity(expected), Postings::with_capacity(expected));
            let key = |n: usize| (n as u32 % keys).wrapping_mul(0x9e37_79b1);
            // Some held before the reservation, as when a snapshot is
            // restored into a table that is not empty.
            for n in 0..already {
                grown.insert_capped(key(n), n as u32, usize::MAX);
                reserved.insert_capped(key(n), n as u32, usize::MAX);
            }
            reserved.reserve(already + held);
            let cells = reserved.cells();
            for n in already..already + held {
                grown.insert_capped(key(n), n as u32, usize::MAX);
                reserved.insert_capped(key(n), n as u32, usize::MAX);
                proptest::prop_assert_eq!(reserved.cells(), cells, "grew after reserving");
            }
            proptest::prop_assert_eq!(reserved.cells(), grown.cells());
            proptest::prop_assert_eq!(reserved.len(), grown.len());
            for k in 0..keys as usize {
                proptest::prop_assert_eq!(slots(&reserved, key(k)), slots(&grown, key(k)));
            }
        }

        /// Rehashing on several threads into a table of any larger size
        /// holds every posting once, at the end of a run of cells in use from
        /// its home, whatever wrapped round the end of either table, collided
        /// or ran past a thread's share of the grown table.
        #[test]
        fn rehashing_in_parts_keeps_every_posting_findable(
            old_size in 1usize..200,
            grown_by in 1usize..200,
            parts in 1usize..7,
            keys in proptest::collection::vec(proptest::num::u32::ANY, 0..150),
            clustered in proptest::bool::ANY,
        ) {
            let (mut cells, held) = old_table(old_size, grown_by, &keys, clustered);
            rehash_in_parts(&mut cells, old_size, parts, held.len());
            every_posting_ends_its_run(&cells, held)?;
        }

        /// A table whose growth waits ends, after `finish_growth`, the size
        /// growing at once makes it, and counts that size all along (memory
        /// accounting, and so a byte budget, see no difference); both hold
        /// the same slots under every key, through inserts, capped buckets
        /// and removals.
        #[test]
        fn deferred_growth_ends_the_size_growing_makes_it(
            expected in proptest::sample::select(vec![0usize, 10, 300, 5_000]),
            ops in proptest::collection::vec((0u32..400, proptest::bool::weighted(0.8)), 0..3_000),
            threads in 1usize..5,
            max_bucket in proptest::sample::select(vec![2usize, 8, usize::MAX]),
        ) {
            let (mut at_once, mut deferred) =
                (Postings::with_capacity(expected), Postings::with_capacity(expected));
            deferred.defer_growth();
            let key = |k: u32| k.wrapping_mul(0x9e37_79b1);
            let mut slot = 0u32;
            let mut inserted: Vec<(u32, u32)> = Vec::new();
            for &(k, insert) in &ops {
                if insert || inserted.is_empty() {
                    slot += 1;
                    let a = at_once.insert_capped(key(k), slot, max_bucket);
                    let d = deferred.insert_capped(key(k), slot, max_bucket);
                    proptest::prop_assert_eq!(a, d);
                    if a {
                        inserted.push((key(k), slot));
                    }
                } else {
                    let (k, s) = inserted.swap_remove(k as usize % inserted.len());
                    at_once.remove(k, s);
                    deferred.remove(k, s);
                }
                proptest::prop_assert_eq!(deferred.cells(), at_once.cells());
                // Never fuller than the rule lets a table of its cells be,
                // or than a growth waiting lets it be.
                let cells = deferred.cells.len();
                let most = deferred_limit(cells).max(grow_at(cells, deferred.full_size));
                proptest::prop_assert!(deferred.len() <= most + 1);
            }
            deferred.finish_growth(threads);
            proptest::prop_assert_eq!(deferred.cells.len(), at_once.cells.len());
            proptest::prop_assert_eq!(deferred.cells(), at_once.cells());
            proptest::prop_assert_eq!(deferred.len(), at_once.len());
            for k in 0..400 {
                proptest::prop_assert_eq!(slots(&deferred, key(k)), slots(&at_once, key(k)));
            }
        }

        /// Rehashing in place into a table of any larger size finds every
        /// posting at the end of a run from its home, whatever wrapped round
        /// the end of either table or collided.
        #[test]
        fn rehashing_in_place_keeps_every_posting_findable(
            old_size in 1usize..200,
            grown_by in 1usize..200,
            keys in proptest::collection::vec(proptest::num::u32::ANY, 0..150),
            clustered in proptest::bool::ANY,
        ) {
            let (mut cells, held) = old_table(old_size, grown_by, &keys, clustered);
            rehash_in_place(&mut cells, old_size);
            every_posting_ends_its_run(&cells, held)?;
        }

        /// Rehashing a block of cells at a time, through either way of
        /// finding a block's cells in use, puts every posting in the cell
        /// the cell-by-cell rehash puts it in: tables of any size (blocks
        /// and a remainder), full to one cell, keys clustered so that runs
        /// collide, displace and wrap round the end.
        #[test]
        fn rehashing_by_blocks_puts_each_posting_where_cell_by_cell_does(
            old_size in 1usize..300,
            grown_by in 1usize..300,
            keys in proptest::collection::vec(proptest::num::u32::ANY, 0..300),
            clustered in proptest::bool::ANY,
        ) {
            let (cells, _) = old_table(old_size, grown_by, &keys, clustered);
            rehashed_as_cell_by_cell(cells, old_size)?;
        }

        /// Doubling, as a growing table does, at the loads it grows at and
        /// past them: the rehash that moves most postings up without the
        /// general walk ([`move_up`]) puts every posting where the
        /// cell-by-cell rehash puts it, in tables of many blocks whose
        /// runs cross blocks, wrap round the end and displace postings not
        /// yet taken.
        #[test]
        fn doubling_puts_each_posting_where_cell_by_cell_does(
            blocks in 1usize..40,
            load in proptest::sample::select(vec![0.05f64, 0.2, 0.5, 0.8, 0.99]),
            seed in proptest::num::u32::ANY,
            clustered in proptest::bool::ANY,
        ) {
            let old_size = blocks * BLOCK;
            let held = (old_size as f64 * load) as usize;
            let keys: Vec<u32> = (0..held as u32)
                .map(|n| n.wrapping_add(seed).wrapping_mul(0x2545_f491) ^ seed.rotate_left(7))
                .collect();
            let (cells, postings) = old_table(old_size, old_size, &keys, clustered);
            let cells = rehashed_as_cell_by_cell(cells, old_size)?;
            every_posting_ends_its_run(&cells, postings)?;
        }

        /// Inserting a message's keys at once leaves the table cell for
        /// cell as inserting them one by one does, whether the batch
        /// grows the table or not, with growth waiting or not, full
        /// buckets and keys repeated within a message.
        #[test]
        fn inserting_keys_at_once_matches_one_by_one(
            expected in proptest::sample::select(vec![0usize, 10, 300]),
            messages in proptest::collection::vec(
                (proptest::collection::vec(0u32..60, 0..12), 0u32..60),
                0..200,
            ),
            max_bucket in proptest::sample::select(vec![1usize, 3, usize::MAX]),
            deferring in proptest::bool::ANY,
        ) {
            let (mut at_once, mut one_by_one) =
                (Postings::with_capacity(expected), Postings::with_capacity(expected));
            if deferring {
                at_once.defer_growth();
                one_by_one.defer_growth();
            }
            let key = |k: u32| k.wrapping_mul(0x9e37_79b1);
            for (slot, (keys, last)) in messages.iter().enumerate() {
                let keys: Vec<u32> = keys.iter().map(|&k| key(k)).collect();
                let slot = slot as u32;
                at_once.insert_all_capped(&keys, key(*last), slot, max_bucket);
                for &k in &keys {
                    one_by_one.insert_capped(k, slot, max_bucket);
                }
                one_by_one.insert_capped(key(*last), slot, max_bucket);
                proptest::prop_assert_eq!(at_once.len(), one_by_one.len());
                proptest::prop_assert_eq!(at_once.cells(), one_by_one.cells());
                proptest::prop_assert_eq!(at_once.cells.as_slice(), one_by_one.cells.as_slice());
            }
        }

        /// AVX2 finds the same cells of a block in use as asking them one
        /// by one (a cell in use may hold zero in either half).
        #[test]
        fn avx2_finds_the_cells_in_use_one_by_one_finds(
            lanes in proptest::collection::vec(
                proptest::sample::select(vec![0u64, 1, 1 << 32, u64::MAX, 0x1234_5678_0000_0001]),
                BLOCK,
            ),
        ) {
            let mut block = [0u64; BLOCK];
            block.copy_from_slice(&lanes);
            #[cfg(target_arch = "x86_64")]
            if std::arch::is_x86_feature_detected!("avx2") {
                // SAFETY: the processor has AVX2, checked just above.
                let found = unsafe { avx2::in_use(&block) };
                proptest::prop_assert_eq!(found, portable_in_use(&block));
            }
            let expected = lanes.iter().enumerate().filter(|(_, c)| **c != 0).fold(0u32, |m, (i, _)| m | 1 << i);
            proptest::prop_assert_eq!(portable_in_use(&block), expected);
        }

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

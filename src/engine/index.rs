//! Stage 4b, index: the messages remembered so far, bounded by an LRU.
//!
//! Three structures, kept consistent by this module alone:
//! - `recency`, an [`lru::LruCache`] of slots: which messages are indexed and
//!   in what order they were last used. It holds at most `capacity` slots;
//!   making room evicts the least recently used, and the evicted message's
//!   slot is given to the newcomer, so slots stay below `capacity` and fit
//!   32 bits.
//! - `entries`, a vector indexed by slot: the id, the arrival sequence
//!   number, the band keys and the shingle set of each indexed message. A
//!   candidate's entry is one array access away, not a hash lookup.
//! - `postings`, a multimap from 32-bit key to slot, holding for each message
//!   its LSH band keys (candidates) and the key of its whole shingle set (the
//!   fast path for exact duplicates: identical normalised texts share a set).
//!   One `(key, slot)` pair is 8 bytes in a flat table (see
//!   [`super::postings`]); a key holds at most `max_bucket` slots.
//!
//! Eviction removes the message from both, so nothing ever points at an
//! evicted message and memory stays flat on an endless stream.
//!
//! Under `--window` (see [`super::window`]) a fourth structure, `expiry`,
//! orders the messages by time, so that those older than the window leave
//! at once, wherever they are in the LRU order; their slots go on a free
//! list, reused before the index grows, so a freed slot's entry is never
//! reached: nothing points at it.
//!
//! Removal ([`Index::remove`], for deleted tweets: `docs/deletions.md`)
//! takes a message out as expiry does, onto the same free list, found by
//! its id in a fifth structure, `ids`: a postings table of its own (an id's
//! 32-bit hash and the slot), apart from the band keys' so that candidate
//! lookups read exactly what they read without it. It is built on the first
//! removal and kept from then on: an index that is never asked to forget
//! pays nothing for it, neither memory nor a cache miss per insert.
//!
//! Under a byte budget (`--max-index-bytes`, [`Index::with_max_bytes`]) the
//! index also counts the memory it holds (see [`Index::bytes`]) and evicts
//! the least recently used messages, onto the same free list, whenever an
//! insert takes it past the budget: long texts then take the room of
//! several short ones, where the capacity alone counts messages.

use std::collections::BTreeSet;
use std::hash::{BuildHasherDefault, Hasher};
use std::num::NonZeroUsize;

use lru::LruCache;

use super::AnchorClusters;
use super::hint::{huge_pages, prefetch};
use super::postings::Postings;
use super::shingle::mix64;
use crate::engine::id::MessageId;

/// One indexed message.
///
/// One cache line, and aligned to one: the decision reads the entries of a
/// dozen candidates a message, each a cache miss on a large index, and an
/// entry of 72 bytes (when ids took 24) spanned two lines every time.
#[derive(Clone, Debug)]
#[repr(align(64))]
pub struct Entry {
    /// Arrival order, to break similarity ties in favour of the earliest.
    pub seq: u64,
    /// The id reported when a later message duplicates this one.
    pub id: MessageId,
    /// The message's time (milliseconds since the Unix epoch; see
    /// [`super::window`]), 0 when no window is in force.
    pub time: i64,
    /// How it was first decided when it was not new (it was a
    /// near-duplicate): its cluster and its match, boxed, so that the many
    /// new messages pay 8 bytes.
    joined: Option<Box<Joined>>,
    /// The band keys, then the sorted shingle set, in one allocation of
    /// exactly their size. (Reusing the evicted entry's allocation saves a
    /// malloc and a free, but a slot then keeps the room of the longest
    /// message it ever held, and memory creeps up over a long stream.)
    data: Box<[u32]>,
    /// How many of `data` are band keys: never more than its length (the
    /// data is made of the band keys and then the shingles, or emptied
    /// with `bands` set to 0), which `shingles` and `band_keys` rely on.
    bands: u16,
    /// Whether its text was cut (see [`super::Sketch::truncated`]).
    truncated: bool,
    /// The posting key of the whole set (see [`exact_key`]), kept so that
    /// eviction need not hash the set again.
    exact: u32,
}

#[cfg(target_pointer_width = "64")]
const _: () = assert!(size_of::<Entry>() == 64);

/// How an indexed near-duplicate was first decided.
#[derive(Clone, Debug, PartialEq)]
pub struct Joined {
    /// The cluster it joined (see [`super::Match::cluster`]).
    pub cluster: MessageId,
    /// The message it was tagged a duplicate of, and the similarity: what
    /// a repeat of it is answered with (see [`super::Verdict::Repeat`]).
    /// `None` for one restored from a state file of version 4 or older,
    /// which did not keep them.
    pub matched: Option<(MessageId, f64)>,
}

impl Entry {
    /// The id of the first message of the chain this one belongs to (see
    /// [`super::Match::cluster`]).
    pub fn cluster(&self) -> &MessageId {
        self.joined
            .as_deref()
            .map_or(&self.id, |joined| &joined.cluster)
    }

    /// How it was first decided when it was not new; `None` when it was.
    pub fn joined(&self) -> Option<&Joined> {
        self.joined.as_deref()
    }

    /// The verdict it was first given, where the index knows it: new, or
    /// a duplicate of its match (see [`super::Verdict::Repeat`]).
    pub fn first_match(&self) -> Option<Option<super::Match>> {
        match self.joined.as_deref() {
            None => Some(None),
            Some(Joined {
                matched: Some((of, similarity)),
                cluster,
            }) => Some(Some(super::Match {
                of: of.clone(),
                similarity: *similarity,
                cluster: cluster.clone(),
            })),
            Some(Joined { matched: None, .. }) => None,
        }
    }

    /// The message's sorted shingle set.
    ///
    /// Read for every candidate a message verifies: without the bound
    /// check, which the invariant on `bands` makes idle.
    pub fn shingles(&self) -> &[u32] {
        debug_assert!(usize::from(self.bands) <= self.data.len());
        // SAFETY: `bands` is at most the data's length (see the field).
        unsafe { self.data.get_unchecked(usize::from(self.bands)..) }
    }

    /// Whether its text was cut (it ended in an ellipsis).
    pub fn truncated(&self) -> bool {
        self.truncated
    }

    /// The message's LSH band keys.
    pub fn band_keys(&self) -> &[u32] {
        debug_assert!(usize::from(self.bands) <= self.data.len());
        // SAFETY: `bands` is at most the data's length (see the field).
        unsafe { self.data.get_unchecked(..usize::from(self.bands)) }
    }

    /// Every key the message is posted under: its band keys, then its
    /// exact-set key.
    fn posting_keys(&self) -> impl Iterator<Item = u32> + '_ {
        self.band_keys()
            .iter()
            .copied()
            .chain(std::iter::once(self.exact))
    }
}

/// One link of the chain of memory reads that deciding on a message makes,
/// each stage reading what the one before it loaded: prefetched in this
/// order, a few messages apart, a message finds every link in cache when
/// its turn comes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PrefetchStage {
    /// The postings cells of the message's keys.
    Postings,
    /// The entries of the slots those postings name: its candidates.
    Entries,
    /// The candidates' band keys and shingle sets.
    Sets,
}

/// Fingerprint of a whole shingle set: the key of the exact-duplicate path.
///
/// XXH3 of the set's bytes, little-endian whatever the machine, so that
/// workers sharing a Redis log agree: about a hundred instructions for a
/// tweet's forty shingles, where a chain of [`mix64`], one a shingle, took
/// four hundred. Nothing keeps it across builds (a state file stores the
/// set and the fingerprint is made again on load; a Redis log names the
/// build that wrote it), so its values may change.
pub fn set_fingerprint(shingles: &[u32]) -> u64 {
    #[cfg(target_endian = "little")]
    // SAFETY: `u32` has no padding and any byte is a valid `u8`; the
    // slice covers exactly the set's memory, read-only, while borrowed.
    let bytes = unsafe {
        std::slice::from_raw_parts(shingles.as_ptr().cast::<u8>(), size_of_val(shingles))
    };
    #[cfg(not(target_endian = "little"))]
    let bytes: Vec<u8> = shingles.iter().flat_map(|s| s.to_le_bytes()).collect();
    #[cfg(not(target_endian = "little"))]
    let bytes = &bytes[..];
    xxhash_rust::xxh3::xxh3_64_with_seed(bytes, SET_SEED)
}

/// The seed of [`set_fingerprint`] (the bytes of "set fing").
const SET_SEED: u64 = 0x7365_7420_6669_6e67;

/// What the index needs to know of a message to store it.
#[derive(Clone, Copy, Debug)]
pub struct Insert<'a> {
    /// Arrival sequence number.
    pub seq: u64,
    /// Sorted, deduplicated shingle set.
    pub shingles: &'a [u32],
    /// One key per LSH band.
    pub band_keys: &'a [u32],
    /// [`set_fingerprint`] of `shingles`.
    pub set_fingerprint: u64,
    /// The message's time (see [`Entry::time`]).
    pub time: i64,
    /// How it was decided, `None` when it was new (see [`Joined`]).
    pub joined: Option<&'a Joined>,
    /// Whether its text was cut.
    pub truncated: bool,
}

/// The hash of a slot in the LRU's table: the slot itself in the low bits,
/// a mix of it in the high ones.
///
/// The `lru` crate finds a key's list node through a hash table, and with
/// a general-purpose hash every eviction costs two cache misses there, for
/// the victim's control bytes and bucket. Victims come in about the order
/// their slots were first filled, so a table that lays slots out in slot
/// order turns those misses into reads of the last eviction's neighbours.
/// The table (hashbrown) picks a key's bucket from the low bits of its hash,
/// and slots stay below the capacity, so they never collide; it takes a
/// one-byte tag to filter the bucket's group from the top seven bits, hence
/// the mix there.
#[derive(Clone, Copy, Debug, Default)]
pub struct SlotHasher(u64);

impl Hasher for SlotHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write_u32(&mut self, slot: u32) {
        let slot = u64::from(slot);
        self.0 = slot | (mix64(slot) & !0xffff_ffff);
    }

    fn write(&mut self, bytes: &[u8]) {
        // Only slots are hashed; this keeps any other key correct.
        for &b in bytes {
            self.0 = mix64(self.0 ^ u64::from(b));
        }
    }
}

/// How many candidates' entries (and then sets) [`Index::prefetch`] loads
/// for one message, at most. Most messages have a few candidates; a
/// template family's, up to the bucket cap under each band key, mostly the
/// same ones. 64 rather than 32 since the sets stage reads the slots the
/// entries stage noted instead of walking the postings again: on
/// `dev-200k`, about 15% less CPU on the engine's thread for 2% more
/// instructions there (`docs/performance.md`). The deciding thread's
/// entries stage, which keeps the candidates it walks for the decision
/// (see `engine::ahead`), counts the budget in distinct candidates.
pub const PREFETCH_BUDGET: usize = 64;

/// The LRU-bounded candidate index.
pub struct Index {
    recency: LruCache<u32, (), BuildHasherDefault<SlotHasher>>,
    entries: Vec<Entry>,
    postings: Postings,
    max_bucket: usize,
    evictions: u64,
    /// Under a window: (time, slot) of every indexed message.
    expiry: Option<BTreeSet<(i64, u32)>>,
    /// Slots emptied by expiry, removal or the byte budget, to fill first.
    free: FreeSlots,
    /// Bytes of the live entries' heap allocations and LRU bookkeeping
    /// (see [`held_bytes`]).
    held: usize,
    /// The byte budget (see [`Index::with_max_bytes`]).
    max_bytes: Option<usize>,
    /// Slots by [`id_key`], built by the first [`Index::remove`].
    ids: Option<Postings>,
    /// Messages removed so far.
    removals: u64,
    /// Entries' data made ahead, on another thread, for messages about to
    /// be inserted (see [`Index::offer`]), in the order they are offered.
    offered: Vec<Offered>,
    /// The first of `offered` not yet passed by an insert.
    next_offered: usize,
}

/// An indexed message's data made ahead (see [`Index::offer`]): its band
/// keys then its shingles, and where the slices it was made from lie, so
/// that an insert of exactly those slices takes it.
#[derive(Debug)]
struct Offered {
    /// Address and length of the band keys it was made from.
    keys: (usize, usize),
    /// Address and length of the shingles it was made from.
    shingles: (usize, usize),
    data: Option<Box<[u32]>>,
}

/// The data an entry holds of a message: its band keys, then its shingles
/// (made here on insert, or ahead of it, see [`Index::offer`]).
pub fn entry_data(band_keys: &[u32], shingles: &[u32]) -> Box<[u32]> {
    let mut data = Vec::with_capacity(band_keys.len() + shingles.len());
    data.extend_from_slice(band_keys);
    data.extend_from_slice(shingles);
    data.into_boxed_slice()
}

/// A slice's address and length, to tell it from any other live slice.
fn place_of(slice: &[u32]) -> (usize, usize) {
    (slice.as_ptr() as usize, slice.len())
}

impl std::fmt::Debug for Index {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Index")
            .field("len", &self.recency.len())
            .field("capacity", &self.recency.cap())
            .field("postings", &self.postings.len())
            .field("evictions", &self.evictions)
            .field("bytes", &self.bytes())
            .finish()
    }
}

/// Largest capacity whose entries and LRU table are allocated up front (see
/// [`Index::new`]); larger indexes grow them as they fill.
pub const PRESIZE_LIMIT: usize = 1 << 25;

/// The posting key of a whole shingle set: distinct from band keys but for
/// chance 32-bit collisions, which [`Index::exact`] verifies away.
pub fn exact_key(fingerprint: u64) -> u32 {
    (mix64(fingerprint ^ 0x6578_6163_745f_6b65) >> 32) as u32
}

impl Index {
    /// An empty index that holds at most `capacity` messages and `max_bucket`
    /// slots per key; each message is expected to bring about
    /// `keys_per_message` keys.
    ///
    /// Memory grows with what is indexed. The postings table starts small and
    /// grows (see [`super::postings`]): its keys are random, so a table sized
    /// for a full index would have every page touched, zeroed by the kernel
    /// and held, within the first few thousand messages. The entries and the
    /// LRU's table are filled in slot order (see [`SlotHasher`]), so up to
    /// [`PRESIZE_LIMIT`] messages they are allocated for a full index up
    /// front, which costs only the pages filled so far, and never doubles
    /// (holding old and new copies) while the index fills; the LRU's table
    /// costs one control byte per slot from the start.
    pub fn new(capacity: NonZeroUsize, max_bucket: usize, keys_per_message: usize) -> Index {
        let presize = capacity.get() <= PRESIZE_LIMIT;
        Index {
            recency: if presize {
                LruCache::with_hasher(capacity, BuildHasherDefault::default())
            } else {
                let mut sparse = LruCache::unbounded_with_hasher(BuildHasherDefault::default());
                sparse.resize(capacity);
                sparse
            },
            entries: if presize {
                let mut entries = Vec::with_capacity(capacity.get());
                huge_pages(entries.spare_capacity_mut());
                entries
            } else {
                Vec::new()
            },
            postings: Postings::with_capacity(capacity.get().saturating_mul(keys_per_message)),
            max_bucket,
            evictions: 0,
            expiry: None,
            free: FreeSlots::default(),
            held: 0,
            max_bytes: None,
            ids: None,
            removals: 0,
            offered: Vec::new(),
            next_offered: 0,
        }
    }

    /// The index, keeping messages in time order too, so that
    /// [`Index::expire`] finds the old ones without a scan.
    pub fn with_expiry(mut self) -> Index {
        self.expiry = Some(BTreeSet::new());
        self
    }

    /// Evicts every message whose time is before `horizon`; returns how
    /// many. Their slots are reused before the index grows. Without
    /// [`Index::with_expiry`], does nothing.
    pub fn expire(&mut self, horizon: i64) -> usize {
        let Some(expiry) = &mut self.expiry else {
            return 0;
        };
        let mut expired = 0;
        while let Some(&(time, slot)) = expiry.first()
            && time < horizon
        {
            expiry.pop_first();
            self.recency.pop(&slot);
            let entry = &mut self.entries[slot as usize];
            self.held -= held_bytes(entry);
            release(&mut self.postings, &mut self.ids, slot, entry);
            self.free.push(slot);
            expired += 1;
        }
        self.evictions += expired as u64;
        expired
    }

    /// Sets the time of the message in `slot` to `time` if that is later
    /// (an exact copy, not indexed itself, renews it).
    pub fn renew(&mut self, slot: u32, time: i64) {
        let entry = &mut self.entries[slot as usize];
        if let Some(expiry) = &mut self.expiry
            && time > entry.time
        {
            expiry.remove(&(entry.time, slot));
            expiry.insert((time, slot));
            entry.time = time;
        }
    }

    /// Evicts least recently used messages until the index holds at most
    /// its byte budget, keeping at least the newest. Their slots are reused
    /// before the index grows.
    fn fit_budget(&mut self) {
        let Some(budget) = self.max_bytes else {
            return;
        };
        while self.bytes() > budget && self.recency.len() > 1 {
            let Some((slot, ())) = self.recency.pop_lru() else {
                return;
            };
            let entry = &mut self.entries[slot as usize];
            if let Some(expiry) = &mut self.expiry {
                expiry.remove(&(entry.time, slot));
            }
            self.held -= held_bytes(entry);
            release(&mut self.postings, &mut self.ids, slot, entry);
            self.free.push(slot);
            self.evictions += 1;
        }
    }

    /// Bytes of memory the index holds, as this module counts them: every
    /// entry's place in the entries vector, the heap allocations of indexed
    /// messages (shingle sets and band keys, long ids, clusters; with the
    /// allocator's headers and rounding), the LRU's node and table bucket
    /// per message, and the postings tables (8 bytes a cell; the ids' once
    /// a removal built it). Not counted:
    /// a fixed part of a few bytes per slot of the capacity (the LRU
    /// table's control bytes) and, under a window, the time order (about 40
    /// bytes a message).
    pub fn bytes(&self) -> usize {
        self.held
            + self.entries.len() * size_of::<Entry>()
            + (self.postings.cells() + self.ids.as_ref().map_or(0, Postings::cells))
                * size_of::<u64>()
    }

    /// The byte budget, if any (see [`Index::with_max_bytes`]).
    pub fn max_bytes(&self) -> Option<usize> {
        self.max_bytes
    }

    /// The index, holding at most `max_bytes` of memory as [`Index::bytes`]
    /// counts it (see the module's documentation). Its postings table is
    /// sized to be at most a third of the budget at its full size, so that
    /// the messages have the rest.
    pub fn with_max_bytes(mut self, max_bytes: usize) -> Index {
        let full_size = self
            .postings
            .full_size()
            .min(max_bytes / 3 / size_of::<u64>());
        self.postings = Postings::with_full_size(full_size);
        self.max_bytes = Some(max_bytes);
        self
    }

    /// Messages indexed now.
    pub fn len(&self) -> usize {
        self.recency.len()
    }

    /// Whether the index is empty.
    pub fn is_empty(&self) -> bool {
        self.recency.is_empty()
    }

    /// The most messages the index holds.
    pub fn capacity(&self) -> usize {
        self.recency.cap().get()
    }

    /// Messages evicted so far.
    pub fn evictions(&self) -> u64 {
        self.evictions
    }

    /// Slots emptied so far, by eviction, expiry, the byte budget or
    /// removal: while it stays the same, every slot that held a message
    /// still holds it.
    pub fn emptied(&self) -> u64 {
        self.evictions + self.removals
    }

    /// Postings held now (for memory accounting).
    pub fn postings(&self) -> usize {
        self.postings.len()
    }

    /// Cells of the postings table now, 8 bytes each (for memory
    /// accounting: it grows with the postings held).
    pub fn postings_cells(&self) -> usize {
        self.postings.cells()
    }

    /// The slot holding exactly this shingle set (whose [`set_fingerprint`]
    /// is `fingerprint`), if any.
    pub fn exact(&self, fingerprint: u64, shingles: &[u32]) -> Option<u32> {
        let key = exact_key(fingerprint);
        let mut found = None;
        self.postings.for_each(key, |slot| {
            if found.is_none() && self.peek(slot).is_some_and(|e| e.shingles() == shingles) {
                found = Some(slot);
            }
        });
        found
    }

    /// Whether the messages indexed under an anchor key (at most the
    /// bucket cap) belong to at most [`super::MAX_ANCHOR_CLUSTERS`] clusters: the
    /// anchor is a copy's, not a template's. A set of messages, whatever the
    /// order the table keeps them in, so the Redis index answers alike.
    pub fn anchor_is_a_copys(&self, key: u32) -> bool {
        let mut clusters = AnchorClusters::new();
        let mut within = true;
        self.postings.for_each_while(key, |slot| {
            if let Some(entry) = self.peek(slot) {
                within = clusters.add(entry.cluster());
            }
            within
        });
        within
    }

    /// Appends to `out` every slot that shares a band key with `band_keys`
    /// (with repeats; callers deduplicate).
    pub fn candidates(&self, band_keys: &[u32], out: &mut Vec<u32>) {
        for &key in band_keys {
            self.postings.for_each(key, |slot| out.push(slot));
        }
    }

    /// Calls `f` with every slot posted under `key`.
    pub fn for_each_posted(&self, key: u32, f: impl FnMut(u32)) {
        self.postings.for_each(key, f);
    }

    /// Starts loading one stage of what deciding on a message will read
    /// (see [`PrefetchStage`]). A hint: it changes nothing but timing.
    ///
    /// The entries and sets stages load at most [`PREFETCH_BUDGET`] slots'
    /// data a message: a message of a template family finds the same
    /// family members under most of its band keys (up to the bucket cap
    /// each), and walking all of them twice more for hints cost more than
    /// the misses it saved.
    pub fn prefetch(&self, band_keys: &[u32], set_fingerprint: u64, stage: PrefetchStage) {
        match stage {
            PrefetchStage::Postings => {
                for &key in band_keys {
                    self.postings.prefetch(key);
                }
                self.postings.prefetch(exact_key(set_fingerprint));
            }
            PrefetchStage::Entries => {
                self.for_each_prefetched(band_keys, set_fingerprint, |_, entry| {
                    prefetch_entry(entry)
                });
            }
            PrefetchStage::Sets => {
                self.for_each_prefetched(band_keys, set_fingerprint, |_, entry| {
                    prefetch_set(entry)
                });
            }
        }
    }

    /// [`PrefetchStage::Entries`], noting in `slots` the slots whose
    /// entries it loads, so that [`Index::prefetch_sets`] loads their sets
    /// a little later without walking the postings again.
    pub fn prefetch_entries(&self, band_keys: &[u32], set_fingerprint: u64, slots: &mut Vec<u32>) {
        slots.clear();
        self.for_each_prefetched(band_keys, set_fingerprint, |slot, entry| {
            prefetch_entry(entry);
            slots.push(slot);
        });
    }

    /// Starts loading the entries in `slots` (a hint: a slot since given to
    /// another message, or out of range, costs nothing but the hint).
    pub fn prefetch_slots(&self, slots: impl IntoIterator<Item = u32>) {
        for slot in slots {
            if let Some(entry) = self.peek(slot) {
                prefetch_entry(entry);
            }
        }
    }

    /// [`PrefetchStage::Sets`] of the slots [`Index::prefetch_entries`]
    /// noted. A slot since given to another message is only a wasted
    /// hint.
    pub fn prefetch_sets(&self, slots: &[u32]) {
        for &slot in slots {
            if let Some(entry) = self.peek(slot) {
                prefetch_set(entry);
            }
        }
    }

    /// Calls `f` with the first [`PREFETCH_BUDGET`] slots posted under the
    /// keys (with repeats) and their entries.
    fn for_each_prefetched(
        &self,
        band_keys: &[u32],
        set_fingerprint: u64,
        mut f: impl FnMut(u32, &Entry),
    ) {
        let exact = exact_key(set_fingerprint);
        let mut budget = PREFETCH_BUDGET;
        for &key in band_keys.iter().chain(std::iter::once(&exact)) {
            self.postings.for_each_while(key, |slot| {
                if let Some(entry) = self.peek(slot) {
                    f(slot, entry);
                }
                budget -= 1;
                budget > 0
            });
            if budget == 0 {
                return;
            }
        }
    }

    /// Starts loading what the next evictions will read, one link further
    /// along the chain per message: the postings of the second least
    /// recently used message, the keys of the third, the entry of the
    /// fourth. Called once per message, so that an eviction finds
    /// everything it touches loaded. A hint: it changes nothing but timing.
    pub fn prefetch_evictions(&self) {
        if self.recency.len() < self.capacity() {
            return;
        }
        let mut lru_first = self
            .recency
            .iter()
            .rev()
            .map(|(&slot, ())| &self.entries[slot as usize]);
        // The next victim's links were loaded by the calls before this one.
        let _next = lru_first.next();
        if let Some(entry) = lru_first.next() {
            entry
                .posting_keys()
                .for_each(|key| self.postings.prefetch(key));
            if let Some(ids) = &self.ids {
                ids.prefetch(id_key(&entry.id));
            }
        }
        if let Some(entry) = lru_first.next() {
            prefetch(entry.data.as_ptr());
        }
        if let Some(entry) = lru_first.next() {
            prefetch_entry(entry);
        }
    }

    /// Whether `slot` holds an indexed message now (not one that expired
    /// or was evicted and is still on the free list).
    pub fn holds(&self, slot: u32) -> bool {
        (slot as usize) < self.entries.len() && !self.free.contains(slot)
    }

    /// Slots in use or freed so far: every slot is below it, and an insert
    /// that takes no freed or evicted message's slot takes this one.
    pub fn slots(&self) -> usize {
        self.entries.len()
    }

    /// The slot of the most recently inserted or touched message.
    pub fn newest_slot(&self) -> Option<u32> {
        self.recency.peek_mru().map(|(&slot, ())| slot)
    }

    /// The entry in `slot`, without touching its recency.
    pub fn peek(&self, slot: u32) -> Option<&Entry> {
        // Every slot below the length is live: slots are filled in order and
        // an evicted slot is refilled at once. (An expired or removed one
        // is on the free list, and nothing names it until it is refilled.)
        self.entries.get(slot as usize)
    }

    /// Marks the entry in `slot` as just used.
    pub fn touch(&mut self, slot: u32) {
        self.recency.promote(&slot);
    }

    /// Entries from least to most recently used.
    pub fn iter_lru_first(&self) -> impl Iterator<Item = &Entry> {
        self.recency
            .iter()
            .rev()
            .map(|(&slot, ())| &self.entries[slot as usize])
    }

    /// Sets the count of evictions so far (a replica restored from a
    /// snapshot goes on counting where the index it copies stood).
    pub fn restore_evictions(&mut self, evictions: u64) {
        self.evictions = evictions;
    }

    /// Makes room at once for `messages` more messages that will be
    /// inserted with exactly `postings` postings in all (restored from a
    /// snapshot, with their posted keys: see [`Index::insert_posted`]), so
    /// that the postings table grows once instead of doubling as they come
    /// (see [`Postings::reserve`]). It ends the size growing would have
    /// made it, so memory is the same. Nothing is reserved when inserting
    /// them could evict (the capacity or a byte budget reached): the table
    /// would then hold fewer postings than it was sized for.
    pub fn reserve_restored(&mut self, messages: usize, postings: usize) {
        let fits = self.len().saturating_add(messages) <= self.capacity();
        if fits && self.max_bytes.is_none() {
            self.postings
                .reserve(self.postings.len().saturating_add(postings));
        }
    }

    /// Entries from least to most recently used, with their slots.
    pub fn iter_lru_first_with_slots(&self) -> impl Iterator<Item = (u32, &Entry)> {
        self.recency
            .iter()
            .rev()
            .map(|(&slot, ())| (slot, &self.entries[slot as usize]))
    }

    /// From now until [`Index::finish_growth`], the postings table's growth
    /// waits (see [`Postings::defer_growth`]): for a batch decided after
    /// its overlaps were counted on several threads, whose growth those
    /// threads then share.
    pub fn defer_growth(&mut self) {
        self.postings.defer_growth();
    }

    /// Makes the growth that waited since [`Index::defer_growth`], on
    /// `threads` threads (see [`Postings::finish_growth`]).
    pub fn finish_growth(&mut self, threads: usize) {
        self.postings.finish_growth(threads);
    }

    /// Offers the data of a message about to be inserted, made ahead on
    /// another thread: `data` must be [`entry_data`] of the very
    /// slices the insert will be given. An insert of those slices (the same
    /// memory, so the same contents) takes it instead of allocating and
    /// copying on the deciding thread. Offers are taken in order: an insert
    /// passes over the ones before its own (messages not indexed after
    /// all). Those left are dropped by [`Index::clear_offered`].
    pub fn offer(&mut self, band_keys: &[u32], shingles: &[u32], data: Box<[u32]>) {
        self.offered.push(Offered {
            keys: place_of(band_keys),
            shingles: place_of(shingles),
            data: Some(data),
        });
    }

    /// Drops the offers no insert took (see [`Index::offer`]). Call it
    /// before the slices they were made from are freed: another slice at
    /// the same place must not take them.
    pub fn clear_offered(&mut self) {
        self.offered.clear();
        self.next_offered = 0;
    }

    /// The data offered for exactly these slices, if any (see
    /// [`Index::offer`]).
    fn take_offered(&mut self, band_keys: &[u32], shingles: &[u32]) -> Option<Box<[u32]>> {
        let (keys, shingles) = (place_of(band_keys), place_of(shingles));
        let found = self.offered[self.next_offered..]
            .iter()
            .position(|o| o.keys == keys && o.shingles == shingles)?;
        let at = self.next_offered + found;
        self.next_offered = at + 1;
        self.offered[at]
            .data
            .take()
            .filter(|data| data.len() == keys.1 + shingles.1)
    }

    /// Indexes a message, evicting the least recently used one if full.
    /// Returns the evicted message's id.
    ///
    /// At capacity the newcomer takes the evicted message's slot and its
    /// LRU node.
    pub fn insert(&mut self, id: MessageId, message: Insert<'_>) -> Option<MessageId> {
        self.insert_posting(id, message, None)
    }

    /// Which of the posting keys of the message in `slot` (its band keys,
    /// then its exact-set key, in order) hold a posting of it: bit `i` for
    /// key `i`. A key whose bucket was full when the message came has none,
    /// and which messages a full bucket holds depends on the order of
    /// everything inserted and evicted before: a state file keeps the
    /// answer, so that a restored index finds exactly the candidates the
    /// saved one would (see [`Index::insert_posted`]). Keys past the 32nd
    /// are never reported posted.
    pub fn posted_mask(&self, slot: u32) -> u32 {
        let Some(entry) = self.peek(slot) else {
            return 0;
        };
        let mut mask = 0u32;
        let keys: Vec<u32> = entry.posting_keys().collect();
        for (at, &key) in keys.iter().enumerate().take(32) {
            // A key that occurs twice is posted twice, the first occurrences
            // first (the bucket cannot free up in between).
            let before = keys[..at].iter().filter(|&&k| k == key).count();
            if self.postings.count(key, slot) > before {
                mask |= 1 << at;
            }
        }
        mask
    }

    /// [`Index::insert`] with the postings a state file recorded (see
    /// [`Index::posted_mask`]) instead of those the bucket cap allows now.
    pub fn insert_posted(
        &mut self,
        id: MessageId,
        message: Insert<'_>,
        posted: u32,
    ) -> Option<MessageId> {
        self.insert_posting(id, message, Some(posted))
    }

    /// Inserts, posting every key the bucket cap allows (`posted` `None`)
    /// or exactly the keys of the mask.
    fn insert_posting(
        &mut self,
        id: MessageId,
        message: Insert<'_>,
        posted: Option<u32>,
    ) -> Option<MessageId> {
        let exact = exact_key(message.set_fingerprint);
        let data = self
            .take_offered(message.band_keys, message.shingles)
            .unwrap_or_else(|| entry_data(message.band_keys, message.shingles));
        let fresh = Entry {
            seq: message.seq,
            id,
            time: message.time,
            joined: message.joined.map(|joined| Box::new(joined.clone())),
            data,
            bands: message.band_keys.len() as u16,
            truncated: message.truncated,
            exact,
        };
        let fresh_bytes = held_bytes(&fresh);
        // Over the budget, the least recently used message gives its slot
        // and LRU node to the newcomer, as at capacity: one in, one out,
        // without freeing and allocating them again ([`Index::fit_budget`]
        // evicts more if one was not enough).
        let over_budget = self
            .max_bytes
            .is_some_and(|max| self.bytes() + fresh_bytes > max);
        self.held += fresh_bytes;
        let victim = (self.recency.len() >= self.capacity() || over_budget)
            .then(|| self.recency.peek_lru().map(|(&slot, ())| slot))
            .flatten();
        let (slot, evicted) = if let Some(slot) = victim {
            self.recency.promote(&slot);
            let entry = &mut self.entries[slot as usize];
            forget(&mut self.postings, slot, entry);
            if let Some(ids) = &mut self.ids {
                ids.remove(id_key(&entry.id), slot);
            }
            if let Some(expiry) = &mut self.expiry {
                expiry.remove(&(entry.time, slot));
            }
            self.held -= held_bytes(entry);
            self.evictions += 1;
            (slot, Some(std::mem::replace(entry, fresh).id))
        } else if let Some(slot) = self.free.pop() {
            self.entries[slot as usize] = fresh;
            self.recency.push(slot, ());
            (slot, None)
        } else {
            self.entries.push(fresh);
            let slot = (self.entries.len() - 1) as u32;
            self.recency.push(slot, ());
            (slot, None)
        };
        match posted {
            // The band keys, then the exact-set key, as the mask counts them,
            // with the table's growth asked about once for all of them.
            None => {
                self.postings
                    .insert_all_capped(message.band_keys, exact, slot, self.max_bucket);
            }
            Some(mask) => {
                for (at, &key) in message
                    .band_keys
                    .iter()
                    .chain(std::iter::once(&exact))
                    .enumerate()
                {
                    if at < 32 && mask & (1 << at) != 0 {
                        self.postings.insert_capped(key, slot, usize::MAX);
                    }
                }
            }
        }
        if let Some(ids) = &mut self.ids {
            ids.insert_capped(id_key(&self.entries[slot as usize].id), slot, usize::MAX);
        }
        if let Some(expiry) = &mut self.expiry {
            expiry.insert((message.time, slot));
        }
        self.fit_budget();
        evicted
    }

    /// Removes every indexed message whose id is `id` (see [`same_id`]),
    /// with all its postings; returns how many. Their slots go on the free
    /// list; the others keep their places in the LRU order, and nothing
    /// counts as an eviction. An id indexed twice (a message sent again
    /// under its id with another text) names one tweet, deleted once: both
    /// go.
    ///
    /// The first call builds the table of ids (a pass over the index);
    /// every insert and eviction keeps it from then on.
    pub fn remove(&mut self, id: &MessageId) -> usize {
        let key = id_key(id);
        let ids = self.ids.get_or_insert_with(|| {
            let mut ids = Postings::with_capacity(self.recency.cap().get());
            for (&slot, ()) in self.recency.iter() {
                ids.insert_capped(id_key(&self.entries[slot as usize].id), slot, usize::MAX);
            }
            ids
        });
        let mut slots = Vec::new();
        ids.for_each(key, |slot| {
            if same_id(&self.entries[slot as usize].id, id) {
                slots.push(slot);
            }
        });
        // The order slots go on the free list decides where later messages
        // are put: the table's order is its own, slot order is everyone's.
        slots.sort_unstable();
        for &slot in &slots {
            self.recency.pop(&slot);
            let entry = &mut self.entries[slot as usize];
            if let Some(expiry) = &mut self.expiry {
                expiry.remove(&(entry.time, slot));
            }
            self.held -= held_bytes(entry);
            release(&mut self.postings, &mut self.ids, slot, entry);
            self.free.push(slot);
        }
        self.removals += slots.len() as u64;
        slots.len()
    }

    /// Messages removed so far (see [`Index::remove`]).
    pub fn removals(&self) -> u64 {
        self.removals
    }

    /// Whether the table of ids is kept (a removal was asked for).
    pub fn tracks_ids(&self) -> bool {
        self.ids.is_some()
    }
}

/// The slots emptied by expiry, removal or the byte budget: a stack, so
/// the last emptied is filled first, and one bit per slot saying whether
/// it is on it. That bit answers [`Index::holds`] for a slot the entries
/// vector reaches, where asking `recency` would take three dependent reads
/// (its control bytes, its bucket, the node), each a cache miss on a large
/// index.
#[derive(Debug, Default)]
struct FreeSlots {
    stack: Vec<u32>,
    on_stack: Vec<u64>,
}

impl FreeSlots {
    fn push(&mut self, slot: u32) {
        let (word, bit) = (slot as usize / 64, slot % 64);
        if self.on_stack.len() <= word {
            self.on_stack.resize(word + 1, 0);
        }
        self.on_stack[word] |= 1 << bit;
        self.stack.push(slot);
    }

    fn pop(&mut self) -> Option<u32> {
        let slot = self.stack.pop()?;
        self.on_stack[slot as usize / 64] &= !(1 << (slot % 64));
        Some(slot)
    }

    fn contains(&self, slot: u32) -> bool {
        self.on_stack
            .get(slot as usize / 64)
            .is_some_and(|word| word & (1 << (slot % 64)) != 0)
    }
}

/// The key of an id in the table of ids: a tweet's number whether it came
/// as a string of digits or a JSON number (a v1.1 notice names both, and
/// the tweet may have been indexed by either), any other id by its text.
pub fn id_key(id: &MessageId) -> u32 {
    let hash = match id {
        MessageId::DigitString(n) | MessageId::Integer(n) => mix64(*n ^ 0x6964_5f6b_6579_0001),
        MessageId::Raw(text) => text
            .bytes()
            .fold(text.len() as u64, |h, b| mix64(h ^ u64::from(b))),
    };
    (hash >> 32) as u32
}

/// Whether two ids name the same message for removal: the same number
/// (`"123"` and `123` alike), or the same JSON text.
pub fn same_id(a: &MessageId, b: &MessageId) -> bool {
    match (a, b) {
        (
            MessageId::DigitString(x) | MessageId::Integer(x),
            MessageId::DigitString(y) | MessageId::Integer(y),
        ) => x == y,
        (MessageId::Raw(x), MessageId::Raw(y)) => x == y,
        _ => false,
    }
}

/// Bytes glibc's allocator takes for a request of `n` bytes: an 8-byte
/// header, 16-byte granules, 32 bytes at least; nothing for no request.
fn allocated_bytes(n: usize) -> usize {
    if n == 0 {
        0
    } else {
        (n + 8).next_multiple_of(16).max(32)
    }
}

/// The LRU's bookkeeping per message: its list node (a 24-byte allocation)
/// and its share of the table (an 8-byte bucket and a control byte, at a
/// load between 7/16 and 7/8).
const LRU_BYTES_PER_MESSAGE: usize = 32 + 16;

/// Heap bytes an id holds.
fn id_bytes(id: &MessageId) -> usize {
    match id {
        MessageId::Raw(text) => {
            allocated_bytes(size_of::<Box<str>>()) + allocated_bytes(text.len())
        }
        MessageId::DigitString(_) | MessageId::Integer(_) => 0,
    }
}

/// What an indexed entry holds beyond its place in the entries vector: its
/// heap allocations and its LRU bookkeeping.
fn held_bytes(entry: &Entry) -> usize {
    allocated_bytes(entry.data.len() * size_of::<u32>())
        + id_bytes(&entry.id)
        + entry.joined.as_deref().map_or(0, |joined| {
            allocated_bytes(size_of::<Joined>())
                + id_bytes(&joined.cluster)
                + joined.matched.as_ref().map_or(0, |(of, _)| id_bytes(of))
        })
        + LRU_BYTES_PER_MESSAGE
}

/// Empties the entry of a message that leaves without a newcomer in its
/// slot (expired, over the byte budget, or removed): its postings go (its
/// id's too), and its allocations, so that the slot is reused whole.
fn release(postings: &mut Postings, ids: &mut Option<Postings>, slot: u32, entry: &mut Entry) {
    forget(postings, slot, entry);
    if let Some(ids) = ids {
        ids.remove(id_key(&entry.id), slot);
    }
    entry.data = Box::default();
    entry.bands = 0;
    entry.joined = None;
    entry.id = MessageId::Integer(0);
}

/// Prefetches an entry: one cache line (see [`Entry`]).
fn prefetch_entry(entry: &Entry) {
    prefetch(std::ptr::from_ref(entry));
}

/// Most cache lines of a candidate's keys and set [`prefetch_set`] asks
/// for: four hold the keys and the 55 or so shingles of a long tweet.
const SET_LINES: usize = 4;

/// Prefetches an entry's keys and shingle set, up to [`SET_LINES`] cache
/// lines: its shingles begin past its keys, in the second line as often as
/// not, and verifying a candidate reads them all.
///
/// Without a branch: the first byte, every 64th after it and the last (the
/// last of the first `SET_LINES * 64` bytes for a longer set), each offset
/// held to the last byte, cover every line the set spans up to the cap; a
/// line asked for twice costs one instruction. It runs for a dozen
/// candidates a message, and the loop with a test a line it replaced read
/// about 80 instructions a message more (all of `dev-200k`).
fn prefetch_set(entry: &Entry) {
    let start = entry.data.as_ptr().cast::<u8>();
    // An empty set (no keys, no shingles) prefetches its dangling pointer:
    // a hint, which never faults.
    let last = size_of_val(&*entry.data).clamp(1, SET_LINES * 64) - 1;
    prefetch(start);
    for line in 1..SET_LINES {
        prefetch(start.wrapping_add((line * 64).min(last)));
    }
    prefetch(start.wrapping_add(last));
}

/// Removes every posting of an evicted entry.
fn forget(postings: &mut Postings, slot: u32, entry: &Entry) {
    entry
        .posting_keys()
        .for_each(|key| postings.remove(key, slot));
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Workers on machines of either byte order share a Redis log of
    /// fingerprints: the value is XXH3 of the little-endian bytes.
    #[test]
    fn a_sets_fingerprint_is_xxh3_of_its_little_endian_bytes() {
        let set = [0x0102_0304, 0xa0b0_c0d0, 7];
        let bytes = [4, 3, 2, 1, 0xd0, 0xc0, 0xb0, 0xa0, 7, 0, 0, 0];
        assert_eq!(
            set_fingerprint(&set),
            xxhash_rust::xxh3::xxh3_64_with_seed(&bytes, SET_SEED)
        );
        assert_ne!(set_fingerprint(&set), set_fingerprint(&set[..2]));
        assert_ne!(set_fingerprint(&[]), set_fingerprint(&[0]));
    }

    fn insert(index: &mut Index, seq: u64, shingles: &[u32], keys: &[u32]) -> Option<MessageId> {
        index.insert(
            MessageId::Integer(seq),
            Insert {
                seq,
                shingles,
                band_keys: keys,
                set_fingerprint: set_fingerprint(shingles),
                time: 0,
                joined: None,
                truncated: false,
            },
        )
    }

    #[test]
    fn eviction_forgets_everything_of_the_evicted() {
        let mut index = Index::new(NonZeroUsize::new(2).unwrap(), 8, 3);
        assert!(insert(&mut index, 1, &[1, 2], &[10, 11]).is_none());
        assert!(insert(&mut index, 2, &[3, 4], &[12, 13]).is_none());
        let evicted = insert(&mut index, 3, &[5, 6], &[14, 15]).expect("full");
        assert_eq!(evicted, MessageId::Integer(1));
        assert_eq!(index.len(), 2);
        assert_eq!(index.postings(), 6, "two bands and the exact key, twice");
        let mut found = Vec::new();
        index.candidates(&[10, 11], &mut found);
        assert!(found.is_empty());
        assert!(index.exact(set_fingerprint(&[1, 2]), &[1, 2]).is_none());
        assert_eq!(index.exact(set_fingerprint(&[5, 6]), &[5, 6]), Some(0));
        assert_eq!(index.evictions(), 1);
    }

    #[test]
    fn touching_protects_from_eviction() {
        let mut index = Index::new(NonZeroUsize::new(2).unwrap(), 8, 3);
        insert(&mut index, 1, &[1], &[10]);
        insert(&mut index, 2, &[2], &[20]);
        let slot = index.exact(set_fingerprint(&[1]), &[1]).unwrap();
        index.touch(slot);
        let evicted = insert(&mut index, 3, &[3], &[30]).unwrap();
        assert_eq!(evicted, MessageId::Integer(2));
    }

    #[test]
    fn slot_hashes_keep_the_slot_in_the_low_bits_and_vary_the_tag() {
        let hash = |slot: u32| {
            let mut h = SlotHasher::default();
            h.write_u32(slot);
            h.finish()
        };
        let mut tags = std::collections::HashSet::new();
        for slot in [0, 1, 2, 3, 1000, 999_999, u32::MAX] {
            assert_eq!(hash(slot) as u32, slot);
            tags.insert(hash(slot) >> 57);
        }
        assert!(tags.len() > 4, "top bits vary: {tags:?}");
    }

    #[test]
    fn an_index_too_large_to_presize_still_bounds_itself() {
        let capacity = NonZeroUsize::new(PRESIZE_LIMIT + 1).unwrap();
        let mut index = Index::new(capacity, 8, 3);
        assert_eq!(index.capacity(), PRESIZE_LIMIT + 1);
        for seq in 0..100 {
            insert(&mut index, seq, &[seq as u32], &[seq as u32 + 1000]);
        }
        assert_eq!(index.len(), 100);
        assert_eq!(index.evictions(), 0);
    }

    #[test]
    fn prefetching_changes_nothing() {
        let mut index = Index::new(NonZeroUsize::new(4).unwrap(), 8, 3);
        for seq in 0..10 {
            insert(&mut index, seq, &[seq as u32, 7], &[seq as u32 % 3, 50]);
            let keys = [1, 2, 50, 99];
            let mut before = Vec::new();
            index.candidates(&keys, &mut before);
            for stage in [
                PrefetchStage::Postings,
                PrefetchStage::Entries,
                PrefetchStage::Sets,
            ] {
                index.prefetch(&keys, set_fingerprint(&[1, 7]), stage);
            }
            index.prefetch_evictions();
            let mut after = Vec::new();
            index.candidates(&keys, &mut after);
            assert_eq!(before, after);
            assert!(index.len() <= 4);
        }
        let lru: Vec<u64> = index.iter_lru_first().map(|e| e.seq).collect();
        assert_eq!(lru, [6, 7, 8, 9], "prefetching touches no recency");
    }

    #[test]
    fn lookups_and_evictions_stay_right_while_the_postings_grow() {
        let capacity = 3_000;
        let mut index = Index::new(NonZeroUsize::new(capacity).unwrap(), 8, 3);
        let set = |seq: u64| [seq as u32 * 2, seq as u32 * 2 + 1];
        let keys = |seq: u64| [seq as u32 ^ 0x5555_0000, 7_000_000 + (seq as u32) / 4];
        let mut cells = index.postings_cells();
        let mut grew = 0;
        for seq in 0..10_000u64 {
            let evicted = insert(&mut index, seq, &set(seq), &keys(seq));
            let expected_victim = seq.checked_sub(capacity as u64);
            assert_eq!(evicted, expected_victim.map(MessageId::Integer));
            if index.postings_cells() != cells {
                cells = index.postings_cells();
                grew += 1;
                // Right after a grow, every live message is found by its
                // exact key and each of its band keys; evicted ones are not.
                let oldest = seq.saturating_sub(capacity as u64 - 1);
                for live in oldest..=seq {
                    let slot = index.exact(set_fingerprint(&set(live)), &set(live));
                    let slot = slot.expect("a live message is found");
                    assert_eq!(index.peek(slot).unwrap().seq, live);
                    let mut found = Vec::new();
                    index.candidates(&keys(live)[..1], &mut found);
                    assert_eq!(found, [slot]);
                }
                for gone in seq.saturating_sub(capacity as u64 + 50)..oldest {
                    assert!(
                        index
                            .exact(set_fingerprint(&set(gone)), &set(gone))
                            .is_none()
                    );
                    let mut found = Vec::new();
                    index.candidates(&keys(gone)[..1], &mut found);
                    assert!(found.is_empty());
                }
            }
        }
        assert!(grew >= 5, "the postings grew {grew} times");
        assert_eq!(index.len(), capacity);
        assert_eq!(
            index.postings(),
            capacity * 3,
            "two band keys and the exact key each"
        );
        assert!(
            index.postings_cells() <= capacity * 3 * 5 / 2,
            "no larger than a table sized for a full index"
        );
    }

    #[test]
    fn expired_messages_leave_everything_and_their_slots_are_reused() {
        let mut index = Index::new(NonZeroUsize::new(3).unwrap(), 8, 3).with_expiry();
        let timed = |index: &mut Index, seq: u64, time: i64| {
            let shingles = [seq as u32];
            index.insert(
                MessageId::Integer(seq),
                Insert {
                    seq,
                    shingles: &shingles,
                    band_keys: &[100 + seq as u32],
                    set_fingerprint: set_fingerprint(&shingles),
                    time,
                    joined: None,
                    truncated: false,
                },
            )
        };
        timed(&mut index, 0, 50);
        timed(&mut index, 1, 10);
        timed(&mut index, 2, 30);
        let slot = index.exact(set_fingerprint(&[1]), &[1]).unwrap();
        index.renew(slot, 60);
        index.renew(slot, 20);
        assert_eq!(index.peek(slot).unwrap().time, 60, "only later times renew");
        assert_eq!(index.expire(40), 1, "2 (30) goes; 1 was renewed");
        assert_eq!(index.len(), 2);
        assert_eq!(index.evictions(), 1);
        assert!(index.exact(set_fingerprint(&[2]), &[2]).is_none());
        assert_eq!(
            (0..4).map(|slot| index.holds(slot)).collect::<Vec<_>>(),
            [true, true, false, false]
        );
        let mut found = Vec::new();
        index.candidates(&[102], &mut found);
        assert!(found.is_empty());
        // The freed slot is filled before anything is evicted.
        assert!(timed(&mut index, 3, 70).is_none());
        assert!(index.holds(2));
        assert_eq!(index.len(), 3);
        assert_eq!(index.exact(set_fingerprint(&[3]), &[3]), Some(2));
        // Full again: the least recently used goes, and its time with it.
        assert_eq!(timed(&mut index, 4, 80), Some(MessageId::Integer(0)));
        assert_eq!(index.expire(65), 1, "only 1 (60) is older; 0 left already");
        let left: Vec<(u64, i64)> = index.iter_lru_first().map(|e| (e.seq, e.time)).collect();
        assert_eq!(left, [(3, 70), (4, 80)]);
    }

    #[test]
    fn a_byte_budget_evicts_the_least_recently_used_until_it_fits() {
        let budget = 64 << 10;
        let mut index =
            Index::new(NonZeroUsize::new(100_000).unwrap(), 8, 3).with_max_bytes(budget);
        assert_eq!(index.max_bytes(), Some(budget));
        // Every tenth message is long: it takes the room of several.
        let set = |seq: u64| -> Vec<u32> {
            let len = if seq.is_multiple_of(10) { 400 } else { 20 };
            (0..len).map(|i| seq as u32 * 1000 + i).collect()
        };
        let mut fitted = 0;
        for seq in 0..2_000u64 {
            insert(
                &mut index,
                seq,
                &set(seq),
                &[seq as u32, 1 << 30 | seq as u32],
            );
            let bytes = index.bytes();
            assert!(bytes <= budget, "{bytes} > {budget} at {seq}");
            fitted = fitted.max(index.len());
        }
        assert!(index.evictions() > 1_000, "{}", index.evictions());
        assert!(fitted > 50, "64 KiB holds some messages: {fitted}");
        assert!(index.entries.len() <= fitted + 1, "slots are reused");
        // What is left is the most recent messages, in order; nothing of the
        // evicted is found.
        let left: Vec<u64> = index.iter_lru_first().map(|e| e.seq).collect();
        let oldest = 2_000 - left.len() as u64;
        assert_eq!(left, (oldest..2_000).collect::<Vec<_>>());
        for gone in oldest - 100..oldest {
            let gone_set = set(gone);
            assert!(index.exact(set_fingerprint(&gone_set), &gone_set).is_none());
            let mut found = Vec::new();
            index.candidates(&[gone as u32], &mut found);
            assert!(found.is_empty());
        }
        // A touched message survives, however old.
        let oldest_set = set(oldest);
        let slot = index.exact(set_fingerprint(&oldest_set), &oldest_set);
        index.touch(slot.unwrap());
        for seq in 2_000..2_100u64 {
            insert(&mut index, seq, &set(seq), &[seq as u32]);
        }
        assert_eq!(index.peek(slot.unwrap()).unwrap().seq, oldest);
    }

    #[test]
    fn bytes_count_what_is_held_and_return_when_it_goes() {
        let mut index = Index::new(NonZeroUsize::new(10).unwrap(), 8, 3).with_expiry();
        let empty = index.bytes();
        let shingles: Vec<u32> = (0..100).collect();
        let joined = Joined {
            cluster: MessageId::Raw("\"a-long-string-id-of-forty-bytes-or-so...\"".into()),
            matched: Some((MessageId::Integer(7), 0.9)),
        };
        index.insert(
            MessageId::Raw("\"another-string-id\"".into()),
            Insert {
                seq: 0,
                shingles: &shingles,
                band_keys: &[1, 2],
                set_fingerprint: set_fingerprint(&shingles),
                time: 5,
                joined: Some(&joined),
                truncated: false,
            },
        );
        let one = index.bytes() - empty;
        // The entry, its 102 keys and shingles, two ids, the LRU's share.
        let least = size_of::<Entry>() + 102 * 4 + 40 + 20 + LRU_BYTES_PER_MESSAGE;
        assert!(
            (least..least + 200).contains(&one),
            "{one} for at least {least}"
        );
        index.expire(10);
        assert_eq!(index.len(), 0);
        assert_eq!(
            index.bytes() - empty,
            size_of::<Entry>(),
            "only the emptied slot's place is left"
        );
    }

    #[test]
    fn removal_forgets_every_posting_and_leaves_the_eviction_order_alone() {
        let mut index = Index::new(NonZeroUsize::new(4).unwrap(), 8, 3);
        for seq in 1..=4 {
            insert(&mut index, seq, &[seq as u32], &[10 + seq as u32, 99]);
        }
        let postings = index.postings();
        assert_eq!(index.remove(&MessageId::DigitString(2)), 1, "\"2\" is 2");
        assert_eq!(index.len(), 3);
        assert_eq!(
            index.postings(),
            postings - 3,
            "two band keys, the exact key"
        );
        assert!(index.exact(set_fingerprint(&[2]), &[2]).is_none());
        let mut found = Vec::new();
        index.candidates(&[12], &mut found);
        assert!(found.is_empty());
        index.candidates(&[99], &mut found);
        found.sort_unstable();
        assert_eq!(found, [0, 2, 3], "the shared key keeps the others");
        assert_eq!((index.evictions(), index.removals()), (0, 1));
        assert_eq!(
            (0..4).map(|slot| index.holds(slot)).collect::<Vec<_>>(),
            [true, false, true, true]
        );
        // The freed slot takes the next message without an eviction; then
        // the least recently used go in their order, as if 2 never came.
        assert!(insert(&mut index, 5, &[5], &[15]).is_none());
        assert_eq!(index.exact(set_fingerprint(&[5]), &[5]), Some(1));
        assert!(index.holds(1));
        let evicted: Vec<_> = (6..=8)
            .map(|seq| insert(&mut index, seq, &[seq as u32], &[10 + seq as u32]))
            .collect();
        assert_eq!(
            evicted,
            [1, 3, 4].map(|n| Some(MessageId::Integer(n))),
            "eviction order unaffected"
        );
        let lru: Vec<u64> = index.iter_lru_first().map(|e| e.seq).collect();
        assert_eq!(lru, [5, 6, 7, 8]);
        assert_eq!(index.remove(&MessageId::Integer(2)), 0, "gone already");
    }

    #[test]
    fn removal_takes_every_message_of_the_id_and_follows_later_changes() {
        let mut index = Index::new(NonZeroUsize::new(3).unwrap(), 8, 3);
        let named = |index: &mut Index, id: MessageId, seq: u64| {
            let shingles = [seq as u32];
            index.insert(
                id,
                Insert {
                    seq,
                    shingles: &shingles,
                    band_keys: &[seq as u32 + 100],
                    set_fingerprint: set_fingerprint(&shingles),
                    time: 0,
                    joined: None,
                    truncated: false,
                },
            )
        };
        let raw = || MessageId::Raw("\"item-1\"".into());
        assert_eq!(index.remove(&raw()), 0, "an unknown id is harmless");
        assert!(index.tracks_ids());
        named(&mut index, MessageId::Integer(7), 1);
        named(&mut index, MessageId::DigitString(7), 2);
        named(&mut index, raw(), 3);
        // Full: 4 evicts the first 7, and the table of ids follows.
        named(&mut index, MessageId::Integer(4), 4);
        assert_eq!(index.remove(&MessageId::Integer(7)), 1, "one 7 is left");
        assert_eq!(index.remove(&MessageId::Raw("\"item-2\"".into())), 0);
        assert_eq!(index.remove(&raw()), 1);
        assert_eq!(index.len(), 1);
        // Slots freed by removals are reused, and their new ids found.
        named(&mut index, MessageId::Integer(9), 5);
        named(&mut index, MessageId::Integer(9), 6);
        assert_eq!(index.remove(&MessageId::DigitString(9)), 2, "both copies");
        let left: Vec<&MessageId> = index.iter_lru_first().map(|e| &e.id).collect();
        assert_eq!(left, [&MessageId::Integer(4)]);
        assert_eq!(index.evictions(), 1);
    }

    #[test]
    fn the_table_of_ids_is_counted_once_built_and_costs_nothing_before() {
        let mut index = Index::new(NonZeroUsize::new(1000).unwrap(), 8, 3);
        for seq in 0..500 {
            insert(&mut index, seq, &[seq as u32], &[seq as u32 + 5000]);
        }
        let before = index.bytes();
        assert!(!index.tracks_ids());
        index.remove(&MessageId::Integer(100_000));
        let after = index.bytes();
        assert!(after > before + 500 * 8, "{before} -> {after}");
        assert_eq!(index.remove(&MessageId::Integer(499)), 1);
    }

    #[test]
    fn ids_are_one_tweet_whether_string_or_number() {
        assert!(same_id(&MessageId::Integer(3), &MessageId::DigitString(3)));
        assert_eq!(
            id_key(&MessageId::Integer(3)),
            id_key(&MessageId::DigitString(3))
        );
        assert!(!same_id(&MessageId::Integer(3), &MessageId::Integer(4)));
        assert!(!same_id(
            &MessageId::Raw("\"03\"".into()),
            &MessageId::Integer(3)
        ));
    }

    #[test]
    fn buckets_are_capped() {
        let mut index = Index::new(NonZeroUsize::new(10).unwrap(), 3, 2);
        for seq in 0..6 {
            insert(&mut index, seq, &[seq as u32], &[7]);
        }
        let mut found = Vec::new();
        index.candidates(&[7], &mut found);
        assert_eq!(found.len(), 3);
    }
}

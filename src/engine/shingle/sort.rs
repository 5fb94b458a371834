//! Sorting and deduplicating a shingle set: a bitonic network in AVX2
//! registers for the sets of tweets (at most [`NETWORK_MAX`] fingerprints),
//! `sort_unstable` and `dedup` otherwise.
//!
//! A tweet's set is a few dozen fingerprints, and std's sort spent about
//! 1,200 instructions a message on it (partitions, then small sorts that
//! branch on every comparison). A bitonic network over the same values,
//! padded with `u32::MAX` to 8, 16, 32, 64 or 128 lanes, is a fixed sequence of
//! lane-wise minima and maxima with no branch on the data: each step pairs
//! every lane with the one `d` places away, either in another register
//! (two instructions a pair) or in the same one (a shuffle, a minimum, a
//! maximum and a blend). Registers that would hold padding alone (for
//! sets of 17–24, 33–40 and 41–48) are not held: the steps that would
//! touch them change nothing and are left out. Fingerprints are plain
//! integers, so any correct sort gives the same order, and the padding
//! sorts after every fingerprint (or equals one, which is then
//! indistinguishable): the first `n` lanes of the sorted registers are the
//! set, sorted.
//!
//! Repeats are dropped while the set is still in registers: each lane is
//! compared with the one before it (a lane permute and a blend a
//! register), and only a set that has a repeat is compacted, register by
//! register, through a table of lane permutations. `Vec::dedup` after the
//! store cost about 220 instructions a message, a branch on every element.

/// Most fingerprints the network sorts: sixteen registers of eight lanes.
/// A longer set (a long text) goes to `sort_unstable`.
pub const NETWORK_MAX: usize = 128;

/// Sorts `set` ascending and removes repeats (as `sort_unstable` then
/// `dedup` would).
#[cfg(test)]
pub fn sort_dedup(set: &mut Vec<u32>) {
    sort_dedup_from(set, 0);
}

/// Sorts the part of `set` from `from` on ascending and removes its
/// repeats (as `sort_unstable` then `dedup` would), leaving what comes
/// before it alone.
#[inline]
pub fn sort_dedup_from(set: &mut Vec<u32>, from: usize) {
    let part = &mut set[from..];
    #[cfg(target_arch = "x86_64")]
    if (2..=NETWORK_MAX).contains(&part.len()) && std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the processor has AVX2 (checked just above).
        let kept = unsafe { avx2::sort_dedup(part) };
        set.truncate(from + kept);
        return;
    }
    part.sort_unstable();
    let first = from + usize::from(!part.is_empty());
    let mut end = first;
    for at in first..set.len() {
        let f = set[at];
        if f != set[end - 1] {
            set[end] = f;
            end += 1;
        }
    }
    set.truncate(end);
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    /// Sorts a set of at most [`super::NETWORK_MAX`] fingerprints in the
    /// fewest registers that hold it, its distinct values first; returns
    /// how many there are.
    ///
    /// # Safety
    /// The processor must have AVX2.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn sort_dedup(set: &mut [u32]) -> usize {
        debug_assert!(set.len() <= super::NETWORK_MAX);
        match set.len() {
            0..=8 => sort_in::<1>(set),
            9..=16 => sort_in::<2>(set),
            17..=24 => sort_in::<3>(set),
            25..=32 => sort_in::<4>(set),
            33..=40 => sort_in::<5>(set),
            41..=48 => sort_in::<6>(set),
            49..=64 => sort_in::<8>(set),
            _ => sort_in::<16>(set),
        }
    }

    /// Loads `set` into `K` registers (the lanes past its end set to
    /// `u32::MAX`; `K` of 3, 5 or 6 stands for 4, 8 and 8 registers whose
    /// last ones, all `u32::MAX`, are not held: see [`sort_3`], [`sort_5`]
    /// and [`sort_6`]), sorts them as one sequence of `8 * K` lanes and stores
    /// the distinct values of its first `set.len()` lanes back, in order, at
    /// the start of `set`; returns how many.
    #[target_feature(enable = "avx2")]
    #[inline]
    fn sort_in<const K: usize>(set: &mut [u32]) -> usize {
        debug_assert!(set.len() <= 8 * K);
        let count = _mm256_set1_epi32(set.len() as i32);
        let mut place = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
        let mut masks = [_mm256_setzero_si256(); K];
        let mut v = [_mm256_setzero_si256(); K];
        for j in 0..K {
            // The lanes of register `j` that hold an element of the set.
            let mask = _mm256_cmpgt_epi32(count, place);
            place = _mm256_add_epi32(place, _mm256_set1_epi32(8));
            // SAFETY: only the lanes in `mask` are read, and they lie
            // within the set; a masked load touches no other memory, so
            // the pointer of a register past the set's end (wrapping_add,
            // never dereferenced there) is not read at all.
            let loaded =
                unsafe { _mm256_maskload_epi32(set.as_ptr().wrapping_add(8 * j).cast(), mask) };
            // The other lanes, loaded as zero, become `u32::MAX`.
            v[j] = _mm256_or_si256(loaded, _mm256_xor_si256(mask, _mm256_set1_epi32(-1)));
            masks[j] = mask;
        }
        match K {
            1 => v[0] = sort_1::<true>(v[0]),
            2 => (v[0], v[1]) = sort_2::<true>(v[0], v[1]),
            3 => {
                let sorted = sort_3([v[0], v[1], v[2]]);
                v[..3].copy_from_slice(&sorted);
            }
            4 => {
                let sorted = sort_4::<true>([v[0], v[1], v[2], v[3]]);
                v[..4].copy_from_slice(&sorted);
            }
            5 => {
                let sorted = sort_5([v[0], v[1], v[2], v[3], v[4]]);
                v[..5].copy_from_slice(&sorted);
            }
            6 => {
                let sorted = sort_6([v[0], v[1], v[2], v[3], v[4], v[5]]);
                v[..6].copy_from_slice(&sorted);
            }
            8 => {
                let sorted = sort_8::<true>([v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]]);
                v[..8].copy_from_slice(&sorted);
            }
            16 => {
                let sorted = sort_16::<true>(v[..16].try_into().expect("sixteen registers"));
                v[..16].copy_from_slice(&sorted);
            }
            _ => unreachable!("one to six, eight or sixteen registers"),
        }
        // Lane `i` of `repeats[j]` is set where element `8 * j + i` is in
        // the set and equals the one before it: each register rotated up
        // one lane, its lane 0 taken from the register before (the first
        // element has none).
        let up = _mm256_setr_epi32(7, 0, 1, 2, 3, 4, 5, 6);
        let mut before = _mm256_permutevar8x32_epi32(v[0], up);
        let mut repeats = [_mm256_setzero_si256(); K];
        let mut any = _mm256_setzero_si256();
        for j in 0..K {
            let rotated = _mm256_permutevar8x32_epi32(v[j], up);
            let previous = _mm256_blend_epi32::<0b0000_0001>(rotated, before);
            before = rotated;
            let mut repeat = _mm256_and_si256(_mm256_cmpeq_epi32(v[j], previous), masks[j]);
            if j == 0 {
                repeat = _mm256_and_si256(repeat, _mm256_setr_epi32(0, -1, -1, -1, -1, -1, -1, -1));
            }
            repeats[j] = repeat;
            any = _mm256_or_si256(any, repeat);
        }
        if _mm256_testz_si256(any, any) == 1 {
            for j in 0..K {
                // SAFETY: as for the load: only lanes within the set are
                // written (a masked store).
                unsafe {
                    _mm256_maskstore_epi32(
                        set.as_mut_ptr().wrapping_add(8 * j).cast(),
                        masks[j],
                        v[j],
                    )
                };
            }
            return set.len();
        }
        compact(set, &v, &masks, &repeats)
    }

    /// Writes the lanes of `v` that are in `masks` and not in `repeats`,
    /// in order, to the start of `set`; returns how many. Half of the
    /// sets of `dev` have a repeated word (a call, not inlined, cost 150
    /// instructions each).
    #[target_feature(enable = "avx2")]
    #[inline]
    fn compact<const K: usize>(
        set: &mut [u32],
        v: &[__m256i; K],
        masks: &[__m256i; K],
        repeats: &[__m256i; K],
    ) -> usize {
        let lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
        let mut kept = 0;
        for j in 0..K {
            let keep = _mm256_andnot_si256(repeats[j], masks[j]);
            let bits = _mm256_movemask_ps(_mm256_castsi256_ps(keep)) as usize;
            let count = PACK_COUNT[bits];
            let store = _mm256_cmpgt_epi32(_mm256_set1_epi32(count as i32), lanes);
            // SAFETY: `bits` has eight bits, so indexes `PACK`, whose rows
            // are eight u32s (an unaligned load). The store writes the
            // first `count` lanes only (a masked store), from `kept`: the
            // kept elements of the first `j + 1` registers are at most
            // `set.len()`, so they lie within `set`.
            unsafe {
                let order = _mm256_loadu_si256(PACK[bits].as_ptr().cast());
                let packed = _mm256_permutevar8x32_epi32(v[j], order);
                _mm256_maskstore_epi32(set.as_mut_ptr().add(kept).cast(), store, packed);
            }
            kept += usize::from(count);
        }
        kept
    }

    /// How many bits each eight-bit mask has (a popcount, which the AVX2
    /// target does not imply).
    static PACK_COUNT: [u8; 256] = {
        let mut table = [0u8; 256];
        let mut bits = 0;
        while bits < 256 {
            table[bits] = (bits as u32).count_ones() as u8;
            bits += 1;
        }
        table
    };

    /// For each eight-bit mask, the lanes whose bits are set, in order
    /// (the rest 0): the permutation that packs them to a register's front.
    static PACK: [[u32; 8]; 256] = {
        let mut table = [[0u32; 8]; 256];
        let mut bits = 0;
        while bits < 256 {
            let (mut lane, mut at) = (0, 0);
            while lane < 8 {
                if bits & (1 << lane) != 0 {
                    table[bits][at] = lane as u32;
                    at += 1;
                }
                lane += 1;
            }
            bits += 1;
        }
        table
    };

    // The bitonic network, register by register (lane `i` of register `j`
    // is element `8 * j + i`): a sequence is sorted by sorting its first
    // half ascending and its second half descending, which makes it
    // bitonic, then merging it. A merge puts the elements `d` apart in
    // order, for `d` from half the sequence down to 1: across registers
    // while `d` is 8 or more, within each register below.

    /// Sorts one register's eight lanes.
    #[target_feature(enable = "avx2")]
    #[inline]
    fn sort_1<const UP: bool>(x: __m256i) -> __m256i {
        // Blocks of 2 and 4 lanes, the direction changing from block to
        // block (lane `i` takes the larger where bit `i` is set).
        let x = exchange_1::<0x66>(x);
        let x = exchange_2::<0x3c>(x);
        let x = exchange_1::<0x5a>(x);
        merge_1::<UP>(x)
    }

    /// Merges one register's bitonic lanes (distances 4, 2, 1).
    #[target_feature(enable = "avx2")]
    #[inline]
    fn merge_1<const UP: bool>(x: __m256i) -> __m256i {
        if UP {
            exchange_1::<0xaa>(exchange_2::<0xcc>(exchange_4::<0xf0>(x)))
        } else {
            exchange_1::<0x55>(exchange_2::<0x33>(exchange_4::<0x0f>(x)))
        }
    }

    /// Puts registers `a` and `b` in order lane by lane (the smaller in
    /// `a` when `UP`).
    #[target_feature(enable = "avx2")]
    #[inline]
    fn exchange<const UP: bool>(a: __m256i, b: __m256i) -> (__m256i, __m256i) {
        let (least, most) = (_mm256_min_epu32(a, b), _mm256_max_epu32(a, b));
        if UP { (least, most) } else { (most, least) }
    }

    /// Merges two registers' bitonic lanes.
    #[target_feature(enable = "avx2")]
    #[inline]
    fn merge_2<const UP: bool>(a: __m256i, b: __m256i) -> (__m256i, __m256i) {
        let (a, b) = exchange::<UP>(a, b);
        (merge_1::<UP>(a), merge_1::<UP>(b))
    }

    /// Sorts two registers' lanes.
    #[target_feature(enable = "avx2")]
    #[inline]
    fn sort_2<const UP: bool>(a: __m256i, b: __m256i) -> (__m256i, __m256i) {
        merge_2::<UP>(sort_1::<true>(a), sort_1::<false>(b))
    }

    /// Merges four registers' bitonic lanes.
    #[target_feature(enable = "avx2")]
    #[inline]
    fn merge_4<const UP: bool>([a, b, c, d]: [__m256i; 4]) -> [__m256i; 4] {
        let (a, c) = exchange::<UP>(a, c);
        let (b, d) = exchange::<UP>(b, d);
        let (a, b) = merge_2::<UP>(a, b);
        let (c, d) = merge_2::<UP>(c, d);
        [a, b, c, d]
    }

    /// Sorts four registers' lanes.
    #[target_feature(enable = "avx2")]
    #[inline]
    fn sort_4<const UP: bool>([a, b, c, d]: [__m256i; 4]) -> [__m256i; 4] {
        let (a, b) = sort_2::<true>(a, b);
        let (c, d) = sort_2::<false>(c, d);
        merge_4::<UP>([a, b, c, d])
    }

    // A set that fills only part of the last power of two of registers
    // is sorted as if padded to it with registers of `u32::MAX`, which are
    // not held: ascending, the padding belongs at the end, so the second
    // half, sorted descending for the merge, has it in front. An exchange
    // of a register with one of the padding leaves both as they are, and
    // a merge of padding alone is padding; what is left of the network is
    // the steps below, which touch held registers only.

    /// Sorts three registers' lanes ascending, as [`sort_4`] sorts them
    /// and a fourth of `u32::MAX` (which would come last, and is not
    /// returned). The second half is then the padding, then the third
    /// register's lanes descending; merging the halves exchanges the first
    /// register with padding (nothing), the second with the third, and the
    /// second half's merge starts with an exchange that moves the padding
    /// behind the third register's lanes.
    #[target_feature(enable = "avx2")]
    #[inline]
    fn sort_3([a, b, c]: [__m256i; 3]) -> [__m256i; 3] {
        let (a, b) = sort_2::<true>(a, b);
        let d = sort_1::<false>(c);
        let (b, d) = exchange::<true>(b, d);
        let (a, b) = merge_2::<true>(a, b);
        [a, b, merge_1::<true>(d)]
    }

    /// Sorts five registers' lanes ascending, as [`sort_8`] sorts them and
    /// three registers of `u32::MAX` (see [`sort_3`]): the second half is
    /// three registers of padding, then the fifth's lanes descending.
    #[target_feature(enable = "avx2")]
    #[inline]
    fn sort_5([a, b, c, d, e]: [__m256i; 5]) -> [__m256i; 5] {
        let [a, b, c, d] = sort_4::<true>([a, b, c, d]);
        let h = sort_1::<false>(e);
        let (d, h) = exchange::<true>(d, h);
        let [a, b, c, d] = merge_4::<true>([a, b, c, d]);
        [a, b, c, d, merge_1::<true>(h)]
    }

    /// Sorts six registers' lanes ascending, as [`sort_8`] sorts them and
    /// two registers of `u32::MAX` (see [`sort_3`]): the second half is two
    /// registers of padding, then the fifth's and sixth's lanes descending.
    #[target_feature(enable = "avx2")]
    #[inline]
    fn sort_6([a, b, c, d, e, f]: [__m256i; 6]) -> [__m256i; 6] {
        let [a, b, c, d] = sort_4::<true>([a, b, c, d]);
        let (g, h) = sort_2::<false>(e, f);
        let (c, g) = exchange::<true>(c, g);
        let (d, h) = exchange::<true>(d, h);
        let [a, b, c, d] = merge_4::<true>([a, b, c, d]);
        let (g, h) = merge_2::<true>(g, h);
        [a, b, c, d, g, h]
    }

    /// Merges eight registers' bitonic lanes.
    #[target_feature(enable = "avx2")]
    #[inline]
    fn merge_8<const UP: bool>([a, b, c, d, e, f, g, h]: [__m256i; 8]) -> [__m256i; 8] {
        let (a, e) = exchange::<UP>(a, e);
        let (b, f) = exchange::<UP>(b, f);
        let (c, g) = exchange::<UP>(c, g);
        let (d, h) = exchange::<UP>(d, h);
        let [a, b, c, d] = merge_4::<UP>([a, b, c, d]);
        let [e, f, g, h] = merge_4::<UP>([e, f, g, h]);
        [a, b, c, d, e, f, g, h]
    }

    /// Sorts eight registers' lanes.
    #[target_feature(enable = "avx2")]
    #[inline]
    fn sort_8<const UP: bool>(v: [__m256i; 8]) -> [__m256i; 8] {
        let [a, b, c, d] = sort_4::<true>([v[0], v[1], v[2], v[3]]);
        let [e, f, g, h] = sort_4::<false>([v[4], v[5], v[6], v[7]]);
        merge_8::<UP>([a, b, c, d, e, f, g, h])
    }

    /// Sorts sixteen registers' lanes.
    #[target_feature(enable = "avx2")]
    #[inline]
    fn sort_16<const UP: bool>(v: [__m256i; 16]) -> [__m256i; 16] {
        let mut low = sort_8::<true>(v[..8].try_into().expect("eight registers"));
        let mut high = sort_8::<false>(v[8..].try_into().expect("eight registers"));
        for (a, b) in low.iter_mut().zip(&mut high) {
            (*a, *b) = exchange::<UP>(*a, *b);
        }
        let (low, high) = (merge_8::<UP>(low), merge_8::<UP>(high));
        let mut sorted = [low[0]; 16];
        sorted[..8].copy_from_slice(&low);
        sorted[8..].copy_from_slice(&high);
        sorted
    }

    /// Puts lanes `i` and `i ^ 1` in order: lane `i` takes the larger of
    /// the two where bit `i` of `MORE` is set, the smaller elsewhere.
    #[target_feature(enable = "avx2")]
    #[inline]
    fn exchange_1<const MORE: i32>(x: __m256i) -> __m256i {
        let other = _mm256_shuffle_epi32::<0b10_11_00_01>(x);
        _mm256_blend_epi32::<MORE>(_mm256_min_epu32(x, other), _mm256_max_epu32(x, other))
    }

    /// [`exchange_1`] for lanes `i` and `i ^ 2`.
    #[target_feature(enable = "avx2")]
    #[inline]
    fn exchange_2<const MORE: i32>(x: __m256i) -> __m256i {
        let other = _mm256_shuffle_epi32::<0b01_00_11_10>(x);
        _mm256_blend_epi32::<MORE>(_mm256_min_epu32(x, other), _mm256_max_epu32(x, other))
    }

    /// [`exchange_1`] for lanes `i` and `i ^ 4` (the register's halves).
    #[target_feature(enable = "avx2")]
    #[inline]
    fn exchange_4<const MORE: i32>(x: __m256i) -> __m256i {
        let other = _mm256_permute2x128_si256::<0x01>(x, x);
        _mm256_blend_epi32::<MORE>(_mm256_min_epu32(x, other), _mm256_max_epu32(x, other))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The oracle: std's sort, then `dedup`.
    fn reference(set: &[u32]) -> Vec<u32> {
        let mut want = set.to_vec();
        want.sort_unstable();
        want.dedup();
        want
    }

    /// Every length the network takes, and a few past it, against the
    /// oracle, on values drawn from a small range (many repeats), from the
    /// whole range, and at its ends.
    #[test]
    fn every_length_sorts_and_dedups_as_std_does() {
        let mut state = 0x5eed_u64;
        let mut next = move || {
            state = super::super::mix64(state.wrapping_add(0x9e37_79b9_7f4a_7c15));
            state
        };
        for len in 0..=NETWORK_MAX + 8 {
            for round in 0..60 {
                let set: Vec<u32> = (0..len)
                    .map(|_| match round % 5 {
                        0 => next() as u32,
                        1 => (next() % 5) as u32,
                        2 => u32::MAX - (next() % 3) as u32,
                        3 => (next() % 3) as u32,
                        // Mostly distinct, a few repeats (a tweet's words).
                        _ => (next() % (4 * len as u64 + 1)) as u32,
                    })
                    .collect();
                let mut got = set.clone();
                sort_dedup(&mut got);
                assert_eq!(got, reference(&set), "length {len}, round {round}: {set:?}");
                // After other values, which stay as they are.
                let before = [9, 3, 9, u32::MAX];
                let mut after = before.to_vec();
                after.extend_from_slice(&set);
                sort_dedup_from(&mut after, before.len());
                assert_eq!(after[..before.len()], before, "length {len}, round {round}");
                assert_eq!(after[before.len()..], got, "length {len}, round {round}");
            }
        }
        // Already sorted and reversed, distinct, and all one value.
        for len in 0..=NETWORK_MAX {
            let mut up: Vec<u32> = (0..len as u32).collect();
            let want = up.clone();
            sort_dedup(&mut up);
            assert_eq!(up, want);
            let mut down: Vec<u32> = (0..len as u32).rev().collect();
            sort_dedup(&mut down);
            assert_eq!(down, want);
            for value in [0, 7, u32::MAX] {
                let mut same = vec![value; len];
                sort_dedup(&mut same);
                assert_eq!(same, reference(&vec![value; len]), "{len} × {value}");
            }
        }
    }

    proptest! {
        #[test]
        fn the_network_sorts_and_dedups_as_std_does(
            set in proptest::collection::vec(any::<u32>(), 0..150),
            small in proptest::collection::vec(0u32..8, 0..150),
            some in proptest::collection::vec(0u32..64, 0..150),
        ) {
            for set in [set, small, some] {
                let mut got = set.clone();
                sort_dedup(&mut got);
                prop_assert_eq!(got, reference(&set));
            }
        }
    }
}

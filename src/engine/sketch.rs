//! Stage 4a, sketch: a MinHash signature of the shingle set, cut into LSH
//! bands ("Mining of Massive Datasets", ch. 3).
//!
//! For each of `bands × rows` hash functions the signature keeps the smallest
//! hash over the set; two sets agree at one position with probability equal
//! to their Jaccard similarity `J`. A band is `rows` consecutive positions,
//! hashed to one 32-bit key; two messages become candidates when they share
//! any band key, which happens with probability `1 - (1 - J^rows)^bands`.
//!
//! [`LshParams::for_threshold`] picks `rows` and `bands` so that a pair right
//! at the threshold is missed at most [`MAX_MISS`] of the time: with bands of
//! [`PREFERRED_ROWS`] rows where the threshold allows, otherwise with as few
//! bands as that allows: every band costs a random memory access on each
//! lookup, insert and eviction, and an index posting per message. The
//! signature itself is not kept: only the band keys are.

use super::shingle::mix64;

/// Most bands a signature is cut into: each band costs one index posting per
/// message.
pub const MAX_BANDS: usize = 16;

/// Largest chance of missing a pair whose similarity equals the LSH
/// threshold. Pairs above it are missed far less often (at `J = t + 0.1`,
/// typically under 0.1%), and identical sets never (they have their own
/// exact path).
pub const MAX_MISS: f64 = 0.02;

/// Fewest rows per band, but for very low thresholds: one-row bands make
/// every shared shingle minimum a candidate.
const MIN_ROWS: usize = 2;

/// Most rows per band.
const MAX_ROWS: usize = 8;

/// Rows per band wherever the threshold allows it within [`MAX_BANDS`].
///
/// The bands are cut from a text's whole shingle set (words and word pairs
/// under the default `words:1-2`), and two texts of one template (a
/// check-in, "I liked a video") share half of it or more. At the default
/// threshold, bands of two rows (4 bands) make such a pair (`J = 0.5`) a
/// candidate 68% of the time, bands of three (6 bands) 55%, while both
/// catch a one-word edit of a 10-word text (`J` about 0.73) 95% of the time:
/// two more postings a message buy fewer template candidates to verify. On
/// the 200,000-message synthetic stream, recall 0.9810 → 0.9839 with as many
/// candidates verified (`docs/evaluation.md`).
pub const PREFERRED_ROWS: usize = 3;

/// Seed of the hash-function coefficients. Fixed: signatures must be the same
/// on every run.
const COEFFICIENT_SEED: u64 = 0x6d69_6e68_6173_6831;

/// Banding of a MinHash signature.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LshParams {
    /// Number of bands (index postings per message).
    pub bands: usize,
    /// Signature positions per band.
    pub rows: usize,
}

impl LshParams {
    /// The banding that finds pairs of Jaccard similarity `jaccard` with
    /// probability at least `1 - MAX_MISS`: bands of [`PREFERRED_ROWS`] rows
    /// when that takes at most [`MAX_BANDS`] bands; otherwise the fewest
    /// bands (each band is a random memory access per lookup, insert and
    /// eviction) and, among those, the most rows (fewer chance candidates).
    /// Bands of one row are used only for thresholds so low that two rows
    /// need too many bands.
    pub fn for_threshold(jaccard: f64) -> LshParams {
        let t = jaccard.clamp(0.01, 1.0);
        let bands_for = |rows: usize| {
            let p = t.powi(rows as i32);
            if p >= 1.0 {
                1
            } else {
                ((MAX_MISS.ln() / (1.0 - p).ln()).ceil() as usize).max(1)
            }
        };
        let preferred = bands_for(PREFERRED_ROWS);
        if preferred <= MAX_BANDS {
            return LshParams {
                bands: preferred,
                rows: PREFERRED_ROWS,
            };
        }
        let mut best: Option<LshParams> = None;
        for rows in MIN_ROWS..=MAX_ROWS {
            let bands = bands_for(rows);
            if bands <= MAX_BANDS && best.is_none_or(|b| bands <= b.bands) {
                best = Some(LshParams { bands, rows });
            }
        }
        best.unwrap_or_else(|| LshParams {
            bands: bands_for(1).min(MAX_BANDS),
            rows: 1,
        })
    }

    /// Probability that a pair of Jaccard similarity `j` becomes a candidate.
    pub fn candidate_probability(&self, j: f64) -> f64 {
        1.0 - (1.0 - j.powi(self.rows as i32)).powi(self.bands as i32)
    }
}

/// Computes band keys from shingle sets. Immutable; share freely.
#[derive(Clone, Debug)]
pub struct Sketcher {
    params: LshParams,
    /// Multiply-add coefficients `(a, b)` of each hash function; `a` is odd.
    coefficients: Vec<(u64, u64)>,
    /// Whether [`avx2::min_hash_bands`] computes the keys.
    #[cfg(target_arch = "x86_64")]
    avx2_only: bool,
    /// The coefficients as [`avx2::min_hash_bands`] reads them.
    #[cfg(target_arch = "x86_64")]
    layout: avx2::Layout,
}

impl Sketcher {
    /// A sketcher for the given banding.
    pub fn new(params: LshParams) -> Sketcher {
        let mut state = COEFFICIENT_SEED;
        let mut next = || {
            state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
            mix64(state)
        };
        let coefficients: Vec<(u64, u64)> = (0..params.bands * params.rows)
            .map(|_| (next() | 1, next()))
            .collect();
        Sketcher {
            params,
            #[cfg(target_arch = "x86_64")]
            layout: avx2::Layout::new(params, &coefficients),
            coefficients,
            #[cfg(target_arch = "x86_64")]
            avx2_only: avx2_only(),
        }
    }

    /// The banding in use.
    pub fn params(&self) -> LshParams {
        self.params
    }

    /// Appends one key per band for `shingles` to `out`. `mixed` is a
    /// reusable buffer.
    ///
    /// Band by band, and within a band function by function, the minimum is
    /// taken over the set: each inner loop is a reduction over a contiguous
    /// array, which the compiler unrolls, and the signature itself is never
    /// stored.
    pub fn band_keys(&self, shingles: &[u32], mixed: &mut Vec<u64>, out: &mut Vec<u32>) {
        #[cfg(target_arch = "x86_64")]
        if self.avx2_only {
            // SAFETY: the processor has AVX2 (checked in `Sketcher::new`).
            unsafe {
                avx2::min_hash_bands(
                    &self.coefficients,
                    &self.layout,
                    self.params.rows,
                    shingles,
                    mixed,
                    out,
                )
            };
            return;
        }
        min_hash_bands(&self.coefficients, self.params.rows, shingles, mixed, out);
    }
}

/// Whether the processor has AVX2 but not the AVX-512 set that
/// [`min_hash_bands`] has a version for: then [`avx2::min_hash_bands`] is
/// used.
#[cfg(target_arch = "x86_64")]
fn avx2_only() -> bool {
    use std::arch::is_x86_feature_detected as has;
    has!("avx2") && !(has!("avx512f") && has!("avx512dq") && has!("avx512vl"))
}

/// MinHash with AVX2, which has no 64-bit multiply: compiled from the
/// portable loop, each `a * x` of 64 bits took three 32-bit multiplies,
/// shifts and adds on four shingles at a time. Only bits 32 to 63 of
/// `a * x + b` are kept, and they need less: with `a = ah·2³² + al` and
/// `x = xh·2³² + xl`, they are the high half of `al·xl + b` plus
/// `al·xh + ah·xl`, taken modulo 2³², which is one widening multiply, one
/// 64-bit add and one 32-bit multiply of both cross terms at once (`xl·ah`
/// in the even lanes, `xh·al` in the odd). The keys are the same bits.
#[cfg(target_arch = "x86_64")]
pub(super) mod avx2 {
    use super::{LshParams, band_seed, fold_bands, mix_into, with_minima};
    use std::arch::x86_64::*;

    /// The coefficients as [`min_hash_bands`] reads them.
    ///
    /// The functions are taken row by row: every band's first function,
    /// then every band's second, and so on, so that their minima come out
    /// in that order, and the same row of four bands is four adjacent
    /// minima, which [`fold_by_rows`] hashes into their keys together.
    #[derive(Clone, Debug)]
    pub(super) struct Layout {
        /// The functions four a group (see [`lanes`]), but for the last one
        /// or two when they are a group's only ones (see `duo`).
        lanes: Vec<Lanes>,
        /// The groups of `lanes` two by two (see [`pairs`]).
        pairs: Vec<PairLanes>,
        /// The last one or two functions, when the functions are not a
        /// multiple of four and the last group would hold only them, laid
        /// out to be taken on four shingles at once (see [`duo`]).
        duo: Option<PairLanes>,
        /// The seeds of the band keys' hash (see [`band_seed`]), four bands
        /// a group.
        seeds: Vec<[u64; 4]>,
        /// Bands, and rows a band.
        params: LshParams,
    }

    impl Layout {
        /// The layout of `coefficients` (band by band, as
        /// [`super::Sketcher`] holds them) for the banding `params`.
        pub(super) fn new(params: LshParams, coefficients: &[(u64, u64)]) -> Layout {
            let by_row: Vec<(u64, u64)> = (0..params.rows)
                .flat_map(|row| {
                    (0..params.bands).map(move |band| coefficients[band * params.rows + row])
                })
                .collect();
            let (grouped, duo) = split_duo(&by_row);
            let lanes = lanes(grouped);
            Layout {
                pairs: pairs(&lanes),
                lanes,
                duo,
                seeds: (0..params.bands.div_ceil(4))
                    .map(|group| std::array::from_fn(|i| band_seed(4 * group + i)))
                    .collect(),
                params,
            }
        }
    }

    /// Four hash functions side by side, one a 64-bit lane: the three
    /// vectors [`min_of_groups`] multiplies and adds by (`al`, `b`, and
    /// `a` with its halves swapped, so that `ah` meets `xl` and `al`
    /// meets `xh`).
    pub(super) type Lanes = [[u64; 4]; 3];

    /// The coefficients four functions a group, the last group padded with
    /// copies of the last function (whose minima are then not read).
    pub(super) fn lanes(coefficients: &[(u64, u64)]) -> Vec<Lanes> {
        coefficients
            .chunks(4)
            .map(|four| {
                let mut lanes = [[0; 4]; 3];
                for i in 0..4 {
                    let (a, b) = four[i.min(four.len() - 1)];
                    lanes[0][i] = a & 0xffff_ffff;
                    lanes[1][i] = b;
                    lanes[2][i] = a.rotate_left(32);
                }
                lanes
            })
            .collect()
    }

    /// Eight hash functions side by side, two groups of [`Lanes`] (`A`
    /// and `B`): `al` and `b` of each group, as in [`Lanes`], then the two
    /// vectors of 32-bit coefficients the cross terms of both groups take
    /// at once, one against `x` and one against `x` with its halves swapped
    /// (see [`pair_values`], and [`duo_values`], whose lanes are laid out
    /// otherwise).
    pub(super) type PairLanes = [[u64; 4]; 6];

    /// The groups of [`lanes`] two by two (a last odd group is left out),
    /// laid out as [`pair_values`] takes them: in each 128-bit half of
    /// its values, two functions of `A`, then the same two of `B`.
    pub(super) fn pairs(lanes: &[Lanes]) -> Vec<PairLanes> {
        lanes
            .chunks_exact(2)
            .map(|two| {
                pair(&two[0], &two[1], |lane| {
                    (lane % 4 >= 2, lane / 4 * 2 + lane % 2)
                })
            })
            .collect()
    }

    /// Groups `a` and `b` as one [`PairLanes`] whose 32-bit lane `k` of
    /// values is function `function_at(k).1` of `b` if `function_at(k).0`,
    /// of `a` otherwise. Against `x`, an even lane meets `xl` and an odd
    /// one `xh`, and against `x` swapped the other half; `xl` must meet
    /// `ah` and `xh` meet `al`.
    fn pair(a: &Lanes, b: &Lanes, function_at: impl Fn(usize) -> (bool, usize)) -> PairLanes {
        let coefficient = |lane: usize, against_swapped: bool| {
            let (in_b, i) = function_at(lane);
            let group = if in_b { b } else { a };
            // `group[2]` is `a` with its halves swapped: `ah` in the low
            // half.
            if lane.is_multiple_of(2) != against_swapped {
                group[2][i] as u32
            } else {
                group[0][i] as u32
            }
        };
        let packed = |against_swapped| {
            std::array::from_fn(|i| {
                u64::from(coefficient(2 * i, against_swapped))
                    | u64::from(coefficient(2 * i + 1, against_swapped)) << 32
            })
        };
        [a[0], a[1], b[0], b[1], packed(false), packed(true)]
    }

    /// The coefficients [`lanes`] groups, and the last one or two functions
    /// apart as a duo (see [`duo`]) when the count is not a multiple of
    /// four and they would be a group's only ones: a group takes one
    /// shingle at a time whatever it holds, a duo four.
    pub(super) fn split_duo(coefficients: &[(u64, u64)]) -> (&[(u64, u64)], Option<PairLanes>) {
        let (grouped, last) = coefficients.split_at(coefficients.len() / 4 * 4);
        match *last {
            [f] => (grouped, Some(duo(f, f))),
            [f, g] => (grouped, Some(duo(f, g))),
            _ => (coefficients, None),
        }
    }

    /// Two functions `f` and `g` laid out as a pair of groups (see
    /// [`PairLanes`]) whose group `A` is four copies of `f` and `B` four of
    /// `g`, for [`duo_values`]: taken on four different shingles at once
    /// (one a 64-bit lane), the even 32-bit lanes are `f`'s values and the
    /// odd ones `g`'s.
    pub(super) fn duo(f: (u64, u64), g: (u64, u64)) -> PairLanes {
        let [four_f, four_g] = lanes(&[f, f, f, f, g, g, g, g])[..] else {
            unreachable!("eight functions make two groups")
        };
        pair(&four_f, &four_g, |lane| (lane % 2 == 1, lane / 2))
    }

    /// Most groups of four functions [`min_of_groups`] is compiled for (a
    /// register each, and a few for the work); more go two functions a
    /// pass over the shingles instead ([`min_of_two`]).
    const MAX_GROUPS: usize = 8;

    /// [`super::min_hash_bands`], computed as the module says. `layout` is
    /// `coefficients` laid out (see [`Layout`]).
    ///
    /// # Safety
    /// The processor must have AVX2.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn min_hash_bands(
        coefficients: &[(u64, u64)],
        layout: &Layout,
        rows: usize,
        shingles: &[u32],
        mixed: &mut Vec<u64>,
        out: &mut Vec<u32>,
    ) {
        if shingles.is_empty() {
            with_minima(coefficients.len(), |minima| fold_bands(minima, rows, out));
            return;
        }
        let functions = coefficients.len();
        macro_rules! by_groups {
            ($($groups:literal => $pairs:literal $rest:literal,)*) => {
                match (layout.lanes.len(), &layout.duo) {
                    $(
                        ($groups, None) => keys_of_groups::<$pairs, $rest, 0>(
                            layout, &[], shingles, mixed, out,
                        ),
                        ($groups, Some(duo)) => keys_of_groups::<$pairs, $rest, 1>(
                            layout, &[*duo], shingles, mixed, out,
                        ),
                    )*
                    _ => {
                        with_minima(functions, |minima| {
                            min_of_pairs(coefficients, shingles, mixed, minima);
                            fold_bands(minima, rows, out);
                        });
                    }
                }
            };
        }
        by_groups!(
            0 => 0 0,
            1 => 0 1,
            2 => 1 0,
            3 => 1 1,
            4 => 2 0,
            5 => 2 1,
            6 => 3 0,
            7 => 3 1,
            8 => 4 0,
        );
    }

    /// Most minima [`keys_of_groups`] keeps, and room for a last read of
    /// four from the last one (see [`fold_by_rows`]).
    const MINIMA_ROOM: usize = 4 * MAX_GROUPS + 8;

    /// The band keys of `shingles` (not empty) for the functions of
    /// `layout`, which are `P` pairs of groups, `R` (0 or 1) single groups
    /// and `D` (0 or 1) duos (`duo`, the layout's): their minima by
    /// [`min_of_groups`], put in order, then folded.
    #[target_feature(enable = "avx2")]
    #[inline]
    fn keys_of_groups<const P: usize, const R: usize, const D: usize>(
        layout: &Layout,
        duo: &[PairLanes; D],
        shingles: &[u32],
        mixed: &mut Vec<u64>,
        out: &mut Vec<u32>,
    ) {
        let (paired, single, duo) = min_of_groups::<P, R, D>(
            layout
                .pairs
                .first_chunk()
                .expect("as many pairs as matched"),
            layout.lanes[2 * P..].first_chunk().expect("the odd group"),
            duo,
            shingles,
            mixed,
        );
        let mut minima = [0u32; MINIMA_ROOM];
        // A pair's minima: in each 128-bit half, two of group `A`'s, then
        // two of `B`'s.
        let apart = _mm256_setr_epi32(0, 1, 4, 5, 2, 3, 6, 7);
        for (pair, least) in paired.iter().enumerate() {
            let eight = _mm256_permutevar8x32_epi32(*least, apart);
            // SAFETY: the store is to `minima[8 * pair .. 8 * pair + 8]`,
            // within `4 * MAX_GROUPS` (unaligned).
            unsafe { _mm256_storeu_si256(minima.as_mut_ptr().add(8 * pair).cast(), eight) };
        }
        // A single group's: the odd lanes, gathered into the low half.
        let odd = _mm256_setr_epi32(1, 3, 5, 7, 1, 3, 5, 7);
        for least in &single {
            let four = _mm256_castsi256_si128(_mm256_permutevar8x32_epi32(*least, odd));
            // SAFETY: the store is to `minima[8 * P .. 8 * P + 4]`, within
            // `4 * MAX_GROUPS` (unaligned).
            unsafe { _mm_storeu_si128(minima.as_mut_ptr().add(8 * P).cast(), four) };
        }
        // A duo's: the least of each function's four lanes, the first
        // function's in the low half of the 64 bits kept, the second's in
        // the high half.
        for least in &duo {
            let least = _mm256_min_epu32(*least, _mm256_permute4x64_epi64::<0b01_00_11_10>(*least));
            let least = _mm256_min_epu32(least, _mm256_shuffle_epi32::<0b01_00_11_10>(least));
            let both = _mm_cvtsi128_si64(_mm256_castsi256_si128(least)) as u64;
            let at = 4 * (2 * P + R);
            minima[at] = both as u32;
            minima[at + 1] = (both >> 32) as u32;
        }
        fold_by_rows(&minima, layout, out);
    }

    /// Appends the band keys of `minima` (one a function of `layout`, in
    /// its order; what lies past them is read but not used): four bands
    /// at once, a 64-bit lane each, their rows' minima taken in turn as
    /// [`super::band_key`] takes them, and the four keys written at once
    /// (the vector's room made first). The scalar fold was a call and 18
    /// serial [`mix64`](super::mix64)s (about 300 instructions a message);
    /// four lanes of [`mix64_x4`] are about 20.
    #[target_feature(enable = "avx2")]
    #[inline]
    fn fold_by_rows(minima: &[u32; MINIMA_ROOM], layout: &Layout, out: &mut Vec<u32>) {
        let LshParams { bands, rows } = layout.params;
        // The last read is of four minima from `(rows - 1) * bands + 4 *
        // (groups - 1)`, at most `bands * rows + 3` in all.
        assert!(
            bands * rows + 3 <= MINIMA_ROOM,
            "a layout of at most MAX_GROUPS groups"
        );
        out.reserve(4 * layout.seeds.len());
        let high = _mm256_setr_epi32(1, 3, 5, 7, 1, 3, 5, 7);
        let into = out.spare_capacity_mut().as_mut_ptr();
        for (group, seeds) in layout.seeds.iter().enumerate() {
            // SAFETY: `seeds` is four u64s (an unaligned load).
            let mut h = unsafe { _mm256_loadu_si256(seeds.as_ptr().cast()) };
            for row in 0..rows {
                // SAFETY: the four u32s read lie within `minima` (asserted
                // above; an unaligned load).
                let least =
                    unsafe { _mm_loadu_si128(minima.as_ptr().add(row * bands + 4 * group).cast()) };
                h = mix64_x4(_mm256_xor_si256(h, _mm256_cvtepu32_epi64(least)));
            }
            let four = _mm256_castsi256_si128(_mm256_permutevar8x32_epi32(h, high));
            // SAFETY: the vector has room for four keys a group past its
            // length (reserved above; an unaligned store).
            unsafe { _mm_storeu_si128(into.add(4 * group).cast(), four) };
        }
        // SAFETY: the first `bands` cells past the length were written
        // (four a group, `bands.div_ceil(4)` groups).
        unsafe { out.set_len(out.len() + bands) };
    }

    /// The least `(a * x + b) >> 32` (as u32, wrapping arithmetic) over
    /// the mixed `shingles`, for each of the `8 * P` functions of `pairs`,
    /// the `4 * R` of `single` (`R` is 0 or 1) and the two of `duo` (`D`
    /// is 0 or 1): for a pair, in each 128-bit half of its register, two
    /// of group `A`'s, then two of `B`'s; for a single group, the odd
    /// lanes; for a duo, its first function's in the even lanes and its
    /// second's in the odd ones, each over a quarter of the shingles.
    ///
    /// A shingle is mixed once, its `x` broadcast to four lanes, and every
    /// function takes it in turn, eight or four at a time: the minima stay
    /// in registers until the end (no reduction across lanes), and the
    /// coefficients are read from memory by the multiplies themselves. A
    /// group alone puts its result in the odd lanes only (seven
    /// instructions); two groups share one register (ten for the two):
    /// the widening multiplies give each group's high halves, gathered by
    /// one shuffle of the two registers, and both groups' cross terms are
    /// two 32-bit multiplies, of `x` and of `x` with its halves swapped. A
    /// duo takes the four shingles just mixed as they are, in eleven
    /// instructions and a swap (see [`duo_values`]): three a shingle for
    /// its two functions, where a group of them took seven.
    #[target_feature(enable = "avx2")]
    #[inline]
    fn min_of_groups<const P: usize, const R: usize, const D: usize>(
        pairs: &[PairLanes; P],
        single: &[Lanes; R],
        duo: &[PairLanes; D],
        shingles: &[u32],
        mixed: &mut Vec<u64>,
    ) -> ([__m256i; P], [__m256i; R], [__m256i; D]) {
        debug_assert!(2 * P + R <= MAX_GROUPS && R <= 1 && D <= 1);
        // Every shingle mixed first, four at a time (a 64-bit multiply is
        // six instructions on four lanes; mixing one shingle alone took
        // fourteen). The last few are padded with copies of the first of
        // them, never read but by the duo, whose minima a copy does not
        // change. The buffer only ever grows: every cell read is written
        // first, so zeroing it for each message (a `memset` call) bought
        // nothing.
        let padded = shingles.len().next_multiple_of(4);
        if mixed.len() < padded {
            mixed.resize(padded, 0);
        }
        // The whole fours, then the last few padded, each a call of the
        // same inlined body: a chain of the two cost eleven instructions
        // a four in iterator steps.
        let (fours, rest) = shingles.as_chunks::<4>();
        let (into, _) = mixed[..padded].as_chunks_mut::<4>();
        let mut duo_least = [_mm256_set1_epi32(-1); D];
        for (four, into) in fours.iter().zip(&mut *into) {
            mix_four(four, into, duo, &mut duo_least);
        }
        if let (Some(&first), Some(into)) = (rest.first(), into.last_mut()) {
            // Element by element: `copy_from_slice` of the rest was a
            // `memcpy` call.
            let last: [u32; 4] = std::array::from_fn(|i| rest.get(i).copied().unwrap_or(first));
            mix_four(&last, into, duo, &mut duo_least);
        }
        let mut paired = [_mm256_set1_epi32(-1); P];
        let mut least = [_mm256_set1_epi32(-1); R];
        for &x in &mixed[..shingles.len()] {
            let x = _mm256_set1_epi64x(x as i64);
            let swapped = _mm256_shuffle_epi32::<0b10_11_00_01>(x);
            for (least, lanes) in paired.iter_mut().zip(pairs) {
                *least = _mm256_min_epu32(*least, pair_values(x, swapped, lanes));
            }
            for (least, [low, b, cross]) in least.iter_mut().zip(single) {
                // SAFETY: each is four u64s (unaligned loads).
                let (low, b, cross) = unsafe {
                    (
                        _mm256_loadu_si256(low.as_ptr().cast()),
                        _mm256_loadu_si256(b.as_ptr().cast()),
                        _mm256_loadu_si256(cross.as_ptr().cast()),
                    )
                };
                // Odd lanes: high half + xh·al + xl·ah; even lanes: unused.
                let high = _mm256_add_epi64(_mm256_mul_epu32(x, low), b);
                let terms = _mm256_mullo_epi32(x, cross);
                let value = _mm256_add_epi32(
                    _mm256_add_epi32(high, terms),
                    _mm256_slli_epi64::<32>(terms),
                );
                *least = _mm256_min_epu32(*least, value);
            }
        }
        (paired, least, duo_least)
    }

    /// Mixes four shingles into `into` (see [`mix64_x4`]) and lowers each
    /// duo's minima (see [`min_of_groups`]) by their values.
    #[target_feature(enable = "avx2")]
    #[inline]
    fn mix_four<const D: usize>(
        four: &[u32; 4],
        into: &mut [u64; 4],
        duo: &[PairLanes; D],
        least: &mut [__m256i; D],
    ) {
        // SAFETY: `four` is four u32s and `into` four u64s (an unaligned
        // load and store).
        let xs = unsafe {
            let four = _mm_loadu_si128(four.as_ptr().cast());
            let xs = mix64_x4(_mm256_or_si256(
                _mm256_cvtepu32_epi64(four),
                _mm256_set1_epi64x(1 << 32),
            ));
            _mm256_storeu_si256(into.as_mut_ptr().cast(), xs);
            xs
        };
        for (least, lanes) in least.iter_mut().zip(duo) {
            let swapped = _mm256_shuffle_epi32::<0b10_11_00_01>(xs);
            *least = _mm256_min_epu32(*least, duo_values(xs, swapped, lanes));
        }
    }

    /// The values `(a * x + b) >> 32` of a pair of groups laid out by
    /// [`pairs`] on `x`, one shingle in every 64-bit lane (`swapped`: `x`
    /// with the halves of each lane swapped): in each 128-bit half, two of
    /// group `A`'s, then the same two of `B`'s. Both groups' high halves
    /// are gathered by one shuffle of the two registers; lanes of `A` and
    /// `B` alternating, as [`duo_values`] has them, took a shift and a
    /// blend.
    #[target_feature(enable = "avx2")]
    #[inline]
    fn pair_values(x: __m256i, swapped: __m256i, lanes: &PairLanes) -> __m256i {
        let (high_a, high_b, terms) = products(x, swapped, lanes);
        let high = _mm256_castps_si256(_mm256_shuffle_ps::<0b11_01_11_01>(
            _mm256_castsi256_ps(high_a),
            _mm256_castsi256_ps(high_b),
        ));
        _mm256_add_epi32(high, terms)
    }

    /// The values `(a * x + b) >> 32` of a pair of groups laid out by
    /// [`duo`] on the 64-bit lanes of `x` (`swapped`: `x` with the halves
    /// of each lane swapped): group `A`'s in the even 32-bit lanes, `B`'s
    /// in the odd ones.
    #[target_feature(enable = "avx2")]
    #[inline]
    fn duo_values(x: __m256i, swapped: __m256i, lanes: &PairLanes) -> __m256i {
        let (high_a, high_b, terms) = products(x, swapped, lanes);
        let high = _mm256_blend_epi32::<0b1010_1010>(_mm256_srli_epi64::<32>(high_a), high_b);
        _mm256_add_epi32(high, terms)
    }

    /// The products that [`pair_values`] and [`duo_values`] gather: of
    /// groups `A` and `B`, `al·xl` plus `b` (its high halves in the odd
    /// 32-bit lanes), and the cross terms of the 32-bit lanes' functions.
    #[target_feature(enable = "avx2")]
    #[inline]
    fn products(x: __m256i, swapped: __m256i, lanes: &PairLanes) -> (__m256i, __m256i, __m256i) {
        let [low_a, b_a, low_b, b_b, cross, cross_swapped] = lanes;
        // SAFETY: each is four u64s (unaligned loads).
        let (low_a, b_a, low_b, b_b, cross, cross_swapped) = unsafe {
            (
                _mm256_loadu_si256(low_a.as_ptr().cast()),
                _mm256_loadu_si256(b_a.as_ptr().cast()),
                _mm256_loadu_si256(low_b.as_ptr().cast()),
                _mm256_loadu_si256(b_b.as_ptr().cast()),
                _mm256_loadu_si256(cross.as_ptr().cast()),
                _mm256_loadu_si256(cross_swapped.as_ptr().cast()),
            )
        };
        let high_a = _mm256_add_epi64(_mm256_mul_epu32(x, low_a), b_a);
        let high_b = _mm256_add_epi64(_mm256_mul_epu32(x, low_b), b_b);
        let terms = _mm256_add_epi32(
            _mm256_mullo_epi32(x, cross),
            _mm256_mullo_epi32(swapped, cross_swapped),
        );
        (high_a, high_b, terms)
    }

    /// [`mix64`](super::mix64) of each 64-bit lane.
    #[target_feature(enable = "avx2")]
    #[inline]
    pub(in crate::engine) fn mix64_x4(x: __m256i) -> __m256i {
        let x = _mm256_xor_si256(x, _mm256_srli_epi64::<30>(x));
        let x = times(x, 0xbf58_476d_1ce4_e5b9);
        let x = _mm256_xor_si256(x, _mm256_srli_epi64::<27>(x));
        let x = times(x, 0x94d0_49bb_1331_11eb);
        _mm256_xor_si256(x, _mm256_srli_epi64::<31>(x))
    }

    /// `x * c` (wrapping) in each 64-bit lane, from 32-bit multiplies: the
    /// low halves' full product, plus the cross terms `xh·cl + xl·ch`
    /// (modulo 2³², as the module says) in the high half.
    #[target_feature(enable = "avx2")]
    #[inline]
    fn times(x: __m256i, c: u64) -> __m256i {
        let low = _mm256_mul_epu32(x, _mm256_set1_epi64x(i64::from(c as u32)));
        // Per 32-bit lane: `ch` against `xl`, `cl` against `xh`.
        let terms = _mm256_mullo_epi32(x, _mm256_set1_epi64x(c.rotate_left(32) as i64));
        let cross = _mm256_add_epi32(terms, _mm256_slli_epi64::<32>(terms));
        let high = _mm256_and_si256(cross, _mm256_set1_epi64x(-1 << 32));
        _mm256_add_epi64(low, high)
    }

    /// [`min_of_groups`] for any number of functions: two functions a
    /// pass over the shingles, mixed once into `mixed`.
    #[target_feature(enable = "avx2")]
    fn min_of_pairs(
        coefficients: &[(u64, u64)],
        shingles: &[u32],
        mixed: &mut Vec<u64>,
        minima: &mut [u32],
    ) {
        mix_into(shingles, mixed);
        // Whole groups of four: a copy of a shingle changes no minimum.
        if let Some(&first) = mixed.first() {
            mixed.resize(mixed.len().next_multiple_of(4), first);
        }
        let mut pairs = coefficients.chunks_exact(2);
        for (pair, least) in (&mut pairs).zip(minima.chunks_exact_mut(2)) {
            (least[0], least[1]) = min_of_two(mixed, pair[0], pair[1]);
        }
        if let [(a, b)] = pairs.remainder() {
            minima[coefficients.len() - 1] = min_of_two(mixed, (*a, *b), (*a, *b)).0;
        }
    }

    /// The least `(a * x + b) >> 32` (as u32, wrapping arithmetic) over
    /// `mixed`, whose length is a non-zero multiple of four, for two
    /// functions `(a, b)` at once.
    #[target_feature(enable = "avx2")]
    fn min_of_two(mixed: &[u64], (a1, b1): (u64, u64), (a2, b2): (u64, u64)) -> (u32, u32) {
        let (low1, low2) = (
            _mm256_set1_epi64x(i64::from(a1 as u32)),
            _mm256_set1_epi64x(i64::from(a2 as u32)),
        );
        let (b1, b2) = (_mm256_set1_epi64x(b1 as i64), _mm256_set1_epi64x(b2 as i64));
        // Per 32-bit lane: `ah` against each `xl`, `al` against each `xh`.
        let cross1 = _mm256_set1_epi64x((u64::from(a1 as u32) << 32 | a1 >> 32) as i64);
        let cross2 = _mm256_set1_epi64x((u64::from(a2 as u32) << 32 | a2 >> 32) as i64);
        let (mut least1, mut least2) = (_mm256_set1_epi32(-1), _mm256_set1_epi32(-1));
        for group in mixed.chunks_exact(4) {
            // SAFETY: the group is four u64s (an unaligned load).
            let x = unsafe { _mm256_loadu_si256(group.as_ptr().cast()) };
            // Odd lanes: high half + xh·al + xl·ah; even lanes: unused.
            let high = _mm256_add_epi64(_mm256_mul_epu32(x, low1), b1);
            let terms = _mm256_mullo_epi32(x, cross1);
            let value = _mm256_add_epi32(
                _mm256_add_epi32(high, terms),
                _mm256_slli_epi64::<32>(terms),
            );
            least1 = _mm256_min_epu32(least1, value);
            let high = _mm256_add_epi64(_mm256_mul_epu32(x, low2), b2);
            let terms = _mm256_mullo_epi32(x, cross2);
            let value = _mm256_add_epi32(
                _mm256_add_epi32(high, terms),
                _mm256_slli_epi64::<32>(terms),
            );
            least2 = _mm256_min_epu32(least2, value);
        }
        // The second function's minima into the even lanes, beside the
        // first's in the odd ones, then the least of each over the four
        // 64-bit lanes.
        let both = _mm256_blend_epi32::<0b0101_0101>(least1, _mm256_srli_epi64::<32>(least2));
        let both = _mm256_min_epu32(both, _mm256_permute4x64_epi64::<0b01_00_11_10>(both));
        let both = _mm256_min_epu32(both, _mm256_shuffle_epi32::<0b01_00_11_10>(both));
        let lane = _mm_cvtsi128_si64(_mm256_castsi256_si128(both)) as u64;
        ((lane >> 32) as u32, lane as u32)
    }
}

/// The body of [`Sketcher::band_keys`], compiled once per instruction set
/// and chosen when first called: with AVX-512 each 64-bit multiply-add runs
/// on eight shingles at once, which the baseline x86-64 target cannot
/// express. Every version computes the same keys; only the speed differs.
///
/// `multiversion` picks the AVX-512 version only on processors with the
/// whole Ice Lake / Zen 4 set of AVX-512 extensions (it checks each at run
/// time), since older ones slow their clock down for it; they get
/// [`avx2::min_hash_bands`] instead.
#[multiversion::multiversion(targets("x86_64+avx512f+avx512dq+avx512vl"))]
fn min_hash_bands(
    coefficients: &[(u64, u64)],
    rows: usize,
    shingles: &[u32],
    mixed: &mut Vec<u64>,
    out: &mut Vec<u32>,
) {
    mix_into(shingles, mixed);
    with_minima(coefficients.len(), |minima| {
        for (least, &(a, b)) in minima.iter_mut().zip(coefficients) {
            *least = mixed
                .iter()
                .map(|&x| (a.wrapping_mul(x).wrapping_add(b) >> 32) as u32)
                .min()
                .unwrap_or(u32::MAX);
        }
        fold_bands(minima, rows, out);
    });
}

/// Runs `f` on a buffer of one minimum a hash function, each `u32::MAX`:
/// on the stack for any banding [`LshParams::for_threshold`] picks, on
/// the heap for a larger one built by hand.
#[inline(always)]
fn with_minima<R>(functions: usize, f: impl FnOnce(&mut [u32]) -> R) -> R {
    let mut stack = [u32::MAX; MAX_BANDS * MAX_ROWS];
    match stack.get_mut(..functions) {
        Some(minima) => f(minima),
        None => f(&mut vec![u32::MAX; functions]),
    }
}

/// Each shingle mixed to 64 bits, the `x` of every hash function.
#[inline(always)]
fn mix_into(shingles: &[u32], mixed: &mut Vec<u64>) {
    mixed.clear();
    mixed.extend(shingles.iter().map(|&s| mix64(u64::from(s) | 1 << 32)));
}

/// One key per band: the minima of the band's functions (`minima`, one
/// a function, band after band), hashed together.
///
/// The common row counts are compiled each with its own unrolled loop: a
/// band is then a chain of `rows` mixes with no bound check or iterator
/// step between them (through a closure and an iterator over the stored
/// lanes, the fold cost about 470 instructions a message for 18
/// functions).
#[inline(always)]
fn fold_bands(minima: &[u32], rows: usize, out: &mut Vec<u32>) {
    match rows {
        2 => fold_rows::<2>(minima, out),
        3 => fold_rows::<3>(minima, out),
        _ => out.extend(
            minima
                .chunks_exact(rows)
                .enumerate()
                .map(|(band, row)| band_key(band, row)),
        ),
    }
}

/// [`fold_bands`] for bands of `ROWS` rows.
#[inline(always)]
fn fold_rows<const ROWS: usize>(minima: &[u32], out: &mut Vec<u32>) {
    let (bands, _) = minima.as_chunks::<ROWS>();
    out.extend(
        bands
            .iter()
            .enumerate()
            .map(|(band, row)| band_key(band, row)),
    );
}

/// The seed of band `band`'s key (see [`band_key`]).
#[inline(always)]
fn band_seed(band: usize) -> u64 {
    (band as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ COEFFICIENT_SEED
}

/// The key of band `band`, whose functions' minima are `row`.
#[inline(always)]
fn band_key(band: usize, row: &[u32]) -> u32 {
    let mut h = band_seed(band);
    for &least in row {
        h = mix64(h ^ u64::from(least));
    }
    (h >> 32) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn banding_meets_the_miss_target() {
        for t in [0.3, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0] {
            let p = LshParams::for_threshold(t);
            assert!(
                p.bands <= MAX_BANDS && p.bands >= 1 && p.rows >= 1,
                "{t}: {p:?}"
            );
            assert!(
                p.candidate_probability(t) >= 1.0 - MAX_MISS - 1e-9,
                "{t}: {p:?}"
            );
        }
        // Higher thresholds need fewer bands.
        assert!(LshParams::for_threshold(0.9).bands < LshParams::for_threshold(0.5).bands);
        assert_eq!(
            LshParams::for_threshold(0.8),
            LshParams { bands: 6, rows: 3 }
        );
        // Too low for three rows within the band budget: the fewest bands.
        assert_eq!(LshParams::for_threshold(0.5).rows, 2);
    }

    /// Band keys by the textbook route: the whole signature, then bands.
    fn reference_band_keys(sketcher: &Sketcher, shingles: &[u32]) -> Vec<u32> {
        let signature: Vec<u32> = sketcher
            .coefficients
            .iter()
            .map(|&(a, b)| {
                shingles
                    .iter()
                    .map(|&s| {
                        let x = mix64(u64::from(s) | 1 << 32);
                        (a.wrapping_mul(x).wrapping_add(b) >> 32) as u32
                    })
                    .fold(u32::MAX, u32::min)
            })
            .collect();
        signature
            .chunks_exact(sketcher.params.rows)
            .enumerate()
            .map(|(band, rows)| {
                let seed = (band as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ COEFFICIENT_SEED;
                (rows.iter().fold(seed, |h, &v| mix64(h ^ u64::from(v))) >> 32) as u32
            })
            .collect()
    }

    proptest::proptest! {
        #[test]
        fn band_keys_are_the_signature_bands(
            shingles in proptest::collection::vec(proptest::num::u32::ANY, 0..40),
            threshold in 0.3f64..1.0,
        ) {
            let sketcher = Sketcher::new(LshParams::for_threshold(threshold));
            let (mut keys, mut mixed) = (Vec::new(), Vec::new());
            sketcher.band_keys(&shingles, &mut mixed, &mut keys);
            proptest::prop_assert_eq!(keys, reference_band_keys(&sketcher, &shingles));
        }
    }

    #[cfg(target_arch = "x86_64")]
    proptest::proptest! {
        /// The AVX2 version, which this machine may not pick, computes the
        /// same keys as the portable one: for every banding, so with one
        /// to eight groups of four functions, a last group padded, the
        /// last one or two functions taken as a duo (see
        /// [`avx2::split_duo`]), and
        /// more groups than [`avx2::min_of_groups`] takes (two functions
        /// a pass then).
        #[test]
        fn the_avx2_version_computes_the_same_keys(
            shingles in proptest::collection::vec(proptest::num::u32::ANY, 0..70),
            bands in 1..=MAX_BANDS,
            rows in 1..=MAX_ROWS,
        ) {
            if !std::arch::is_x86_feature_detected!("avx2") {
                return Ok(());
            }
            let sketcher = Sketcher::new(LshParams { bands, rows });
            // A buffer left longer by an earlier message, its values stale
            // (zeros): none may be read.
            let (mut keys, mut mixed) = (Vec::new(), vec![0; 80]);
            avx2_band_keys(&sketcher, &shingles, &mut mixed, &mut keys);
            proptest::prop_assert_eq!(keys, reference_band_keys(&sketcher, &shingles));
        }
    }

    /// The AVX2 path's band keys of `shingles`; the caller has checked
    /// that the processor has AVX2.
    #[cfg(target_arch = "x86_64")]
    fn avx2_band_keys(
        sketcher: &Sketcher,
        shingles: &[u32],
        mixed: &mut Vec<u64>,
        keys: &mut Vec<u32>,
    ) {
        // SAFETY: the callers check that the processor has AVX2.
        unsafe {
            avx2::min_hash_bands(
                &sketcher.coefficients,
                &sketcher.layout,
                sketcher.params.rows,
                shingles,
                mixed,
                keys,
            );
        }
    }

    /// A banding larger than any [`LshParams::for_threshold`] picks (more
    /// functions than the minima's stack buffer holds) still gets its keys,
    /// on the AVX2 path and the portable one.
    #[test]
    fn a_banding_built_by_hand_past_the_limits_gets_its_keys() {
        let sketcher = Sketcher::new(LshParams {
            bands: 200,
            rows: 1,
        });
        let shingles: Vec<u32> = (0..37).map(|i| i * 7919).collect();
        let want = reference_band_keys(&sketcher, &shingles);
        let (mut keys, mut mixed) = (Vec::new(), Vec::new());
        sketcher.band_keys(&shingles, &mut mixed, &mut keys);
        assert_eq!(keys, want);
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") {
            for shingles in [&shingles[..], &[]] {
                keys.clear();
                avx2_band_keys(&sketcher, shingles, &mut mixed, &mut keys);
                assert_eq!(keys, reference_band_keys(&sketcher, shingles));
            }
        }
    }

    #[test]
    fn identical_sets_share_every_band() {
        let sketcher = Sketcher::new(LshParams::for_threshold(0.5));
        let (mut a, mut b, mut sig) = (Vec::new(), Vec::new(), Vec::new());
        sketcher.band_keys(&[1, 5, 9], &mut sig, &mut a);
        sketcher.band_keys(&[1, 5, 9], &mut sig, &mut b);
        assert_eq!(a, b);
        assert_eq!(a.len(), sketcher.params().bands);
    }

    #[test]
    fn agreement_tracks_jaccard() {
        // Two sets with J = 0.5: about half the signature positions agree.
        let sketcher = Sketcher::new(LshParams {
            bands: 256,
            rows: 1,
        });
        let a: Vec<u32> = (0..100).collect();
        let b: Vec<u32> = (33..133).collect(); // 67 shared of 133: J ≈ 0.504
        let (mut ka, mut kb, mut sig) = (Vec::new(), Vec::new(), Vec::new());
        sketcher.band_keys(&a, &mut sig, &mut ka);
        sketcher.band_keys(&b, &mut sig, &mut kb);
        let agree = ka.iter().zip(&kb).filter(|(x, y)| x == y).count() as f64 / 256.0;
        assert!((agree - 0.504).abs() < 0.1, "{agree}");
    }
}

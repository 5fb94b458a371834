//! The first stage of the decoder's scan: a line classified 64 bytes at a
//! time into one bitmask a block, of the bytes a JSON string's scan stops
//! at (a quote, a backslash, a control character). With it, finding the
//! end of a string is a `trailing_zeros` per 64 bytes instead of a loop
//! over the string's words, and the classification is one pass over the
//! line: with AVX2 where the processor has it (detected at run time, as
//! `engine::bitmap` and the MinHash code do), else with SSE2 (the x86_64
//! baseline), or, elsewhere, eight bytes a step. The same pass copies the
//! line, followed by a block of zeros, for the scan to read without bound
//! checks.

use std::mem::MaybeUninit;

/// The bytes of a block that count. A line's last, partial block is read
/// as the line's last 64 bytes (its mask shifted down), or, in a line
/// shorter than that, padded with spaces, which are never stops.
pub(super) const BLOCK: usize = 64;

/// Whether a byte is a stop: where a string's scan must look at it (what
/// the tests hold the masks to).
#[cfg(test)]
fn is_stop(byte: u8) -> bool {
    byte == b'"' || byte == b'\\' || byte < 0x20
}

/// Fills `masks` with one word per 64-byte block of `bytes`: bit `i` of
/// word `b` set when byte `64 * b + i` is a stop ([`is_stop`]). Bytes past
/// the end are not stops. Fills `copy` with `bytes` followed by [`BLOCK`]
/// zero bytes. Returns whether every byte is ASCII: the pass reads every
/// byte anyway, and a line found ASCII here needs no UTF-8 check of its
/// own.
pub(super) fn classify(bytes: &[u8], masks: &mut Vec<u64>, copy: &mut Vec<u8>) -> bool {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the processor has AVX2, the one feature
        // `avx2::classify` enables: checked just above.
        return unsafe { avx2::classify(bytes, masks, copy) };
    }
    classify_with(bytes, masks, copy, copying(block_mask))
}

/// A block's place in the line's copy, which the `block_mask` of
/// [`classify_with`] writes the block into.
type Out = [MaybeUninit<u8>; BLOCK];

/// [`classify`], each block's stops and high bits computed by
/// `block_mask`, which also writes the block into its place in the copy (a
/// block's second word is non-zero when one of its bytes is not ASCII).
#[inline(always)]
fn classify_with(
    bytes: &[u8],
    masks: &mut Vec<u64>,
    copy: &mut Vec<u8>,
    block_mask: impl Fn(&[u8; BLOCK], &mut Out) -> (u64, u64),
) -> bool {
    masks.clear();
    copy.clear();
    let len = bytes.len();
    let blocks = len.div_ceil(BLOCK);
    // One more word than the blocks: the scan's sentinel, pushed after.
    masks.reserve(blocks + 1);
    copy.reserve(len + BLOCK);
    // Both written in place as the blocks are read, without a bound check
    // or a capacity check a block: a `memcpy` of the line after the pass
    // cost a tweet-sized line about 75 instructions, and a `push` a block
    // and the copy's reloaded block about 60.
    let spare = &mut copy.spare_capacity_mut()[..len + BLOCK];
    let mask_spare = &mut masks.spare_capacity_mut()[..blocks];
    let mut high = 0u64;
    let (whole, _) = bytes.as_chunks::<BLOCK>();
    let (outs, _) = spare.as_chunks_mut::<BLOCK>();
    for ((block, out), mask) in whole.iter().zip(outs).zip(mask_spare.iter_mut()) {
        let (stops, block_high) = block_mask(block, out);
        mask.write(stops);
        high |= block_high;
    }
    let rest = len % BLOCK;
    if rest != 0 {
        // The last, partial block: read as the line's last 64 bytes, the
        // stops shifted down past the bytes already counted (no copy into
        // a padded block: a copy and a fill cost a line more than the
        // block's mask), or, in a line shorter than a block, padded with
        // spaces, its copy's spaces then overwritten by the zeros.
        let (stops, block_high) = match bytes.last_chunk::<BLOCK>() {
            Some(window) => {
                let out = (&mut spare[len - BLOCK..len]).try_into().expect("64 bytes");
                let (stops, block_high) = block_mask(window, out);
                (stops >> (BLOCK - rest), block_high)
            }
            None => {
                let mut last = [b' '; BLOCK];
                last[..rest].copy_from_slice(bytes);
                let out = (&mut spare[..BLOCK]).try_into().expect("64 bytes");
                block_mask(&last, out)
            }
        };
        mask_spare[blocks - 1].write(stops);
        high |= block_high;
    }
    spare[len..].write_copy_of_slice(&[0; BLOCK]);
    // SAFETY: the first `len + BLOCK` bytes of the copy's spare capacity
    // were all written: every whole block, the last partial one (as the
    // line's last 64 bytes, or whole when the line is shorter), and the
    // zeros after them; and each of the first `blocks` words of the masks'
    // spare capacity, one a block.
    unsafe {
        copy.set_len(len + BLOCK);
        masks.set_len(blocks);
    }
    high == 0
}

/// A block's stops and high bits by `block_mask`, the block copied into
/// `out`: for the paths whose masks do not hold the block in registers.
#[inline(always)]
fn copying(
    block_mask: impl Fn(&[u8; BLOCK]) -> (u64, u64),
) -> impl Fn(&[u8; BLOCK], &mut Out) -> (u64, u64) {
    move |block, out| {
        out.write_copy_of_slice(block);
        block_mask(block)
    }
}

/// One block's stops, and a word non-zero when a byte of it is not ASCII.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn block_mask(block: &[u8; BLOCK]) -> (u64, u64) {
    // SAFETY: SSE2, the one feature `sse2::block_mask` enables, is part of
    // the x86_64 baseline: every processor this code is compiled for has
    // it (the crate's own `engine::bitmap` relies on the same).
    unsafe { sse2::block_mask(block) }
}

#[cfg(not(target_arch = "x86_64"))]
use portable::block_mask;

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    /// [`super::classify`] with AVX2: thirty-two bytes a step.
    #[target_feature(enable = "avx2")]
    pub(super) fn classify(bytes: &[u8], masks: &mut Vec<u64>, copy: &mut Vec<u8>) -> bool {
        // The closure inherits this function's AVX2, so `block_mask` is
        // inlined into it.
        super::classify_with(bytes, masks, copy, |block, out| block_mask(block, out))
    }

    /// One block's stops and high bits, as [`super::sse2::block_mask`]
    /// finds them, the block written into `out` from the registers it was
    /// read into.
    #[inline]
    #[target_feature(enable = "avx2")]
    pub(super) fn block_mask(block: &[u8; super::BLOCK], out: &mut super::Out) -> (u64, u64) {
        let (lo, hi) = block.split_at(32);
        // SAFETY: each half is 32 bytes, what an unaligned 256-bit load
        // reads.
        let (lo, hi) = unsafe {
            (
                _mm256_loadu_si256(lo.as_ptr().cast()),
                _mm256_loadu_si256(hi.as_ptr().cast()),
            )
        };
        let stops = |x: __m256i| {
            // A control character or a quote in one test: with bit 1
            // flipped, the bytes up to 0x1f stay up to 0x1f, `"` becomes
            // 0x20, and every other byte is above 0x20; `y <= 0x20`
            // unsigned when the unsigned minimum with 0x20 is y.
            let y = _mm256_xor_si256(x, _mm256_set1_epi8(0x02));
            let control_or_quote = _mm256_cmpeq_epi8(_mm256_min_epu8(y, _mm256_set1_epi8(0x20)), y);
            let backslash = _mm256_cmpeq_epi8(x, _mm256_set1_epi8(b'\\' as i8));
            _mm256_movemask_epi8(_mm256_or_si256(control_or_quote, backslash)) as u32
        };
        // Through `black_box`: seeing the two masks as one vector of 64
        // flags, LLVM rebuilt it byte by byte (thirty times the work).
        let stops = u64::from(std::hint::black_box(stops(lo))) | u64::from(stops(hi)) << 32;
        let out = out.as_mut_ptr().cast::<__m256i>();
        // SAFETY: `out` is 64 bytes, what two unaligned 256-bit stores, at
        // its start and 32 bytes in, write.
        unsafe {
            _mm256_storeu_si256(out, lo);
            _mm256_storeu_si256(out.add(1), hi);
        }
        // A byte's top bit set: not ASCII.
        let high = _mm256_movemask_epi8(_mm256_or_si256(lo, hi)) as u32;
        (stops, u64::from(high))
    }
}

#[cfg(target_arch = "x86_64")]
mod sse2 {
    use std::arch::x86_64::*;

    /// One block's stops and high bits, sixteen bytes a step. SSE2 is part
    /// of x86_64's baseline: it needs no detection, and is inlined where it
    /// is called.
    #[inline]
    #[target_feature(enable = "sse2")]
    pub(crate) fn block_mask(block: &[u8; super::BLOCK]) -> (u64, u64) {
        let quote = _mm_set1_epi8(b'"' as i8);
        let backslash = _mm_set1_epi8(b'\\' as i8);
        let below_space = _mm_set1_epi8(0x1f);
        let mut mask = 0u64;
        let mut high = 0u64;
        for (i, lane) in block.chunks_exact(16).enumerate() {
            let lo = u64::from_le_bytes(lane[..8].try_into().expect("8 bytes"));
            let hi = u64::from_le_bytes(lane[8..].try_into().expect("8 bytes"));
            let x = _mm_set_epi64x(hi as i64, lo as i64);
            // `x <= 0x1f` unsigned: the unsigned minimum with 0x1f is x.
            let control = _mm_cmpeq_epi8(_mm_min_epu8(x, below_space), x);
            let stop = _mm_or_si128(
                _mm_or_si128(_mm_cmpeq_epi8(x, quote), _mm_cmpeq_epi8(x, backslash)),
                control,
            );
            mask |= u64::from(_mm_movemask_epi8(stop) as u16) << (16 * i);
            high |= lo | hi;
        }
        (mask, high & 0x8080_8080_8080_8080)
    }
}

#[cfg_attr(target_arch = "x86_64", allow(dead_code))]
pub(super) mod portable {
    /// Eight copies of a byte.
    const fn splat(byte: u8) -> u64 {
        u64::from_ne_bytes([byte; 8])
    }

    /// One block's stops and high bits, eight bytes a step: a byte's top
    /// bit flags it, from sums that stay within their byte (seven low bits
    /// plus at most 0x7f), and a multiply gathers the eight top bits into
    /// one byte.
    #[inline(always)]
    pub(crate) fn block_mask(block: &[u8; super::BLOCK]) -> (u64, u64) {
        let low = splat(0x7f);
        // Top bit set when the byte is zero.
        let zero = |x: u64| !(((x & low).wrapping_add(low)) | x);
        let mut mask = 0u64;
        let mut high = 0u64;
        for (i, lane) in block.chunks_exact(8).enumerate() {
            let word = u64::from_le_bytes(lane.try_into().expect("8 bytes"));
            high |= word;
            let control = !(((word & low).wrapping_add(splat(0x80 - 0x20))) | word);
            let flagged =
                (zero(word ^ splat(b'"')) | zero(word ^ splat(b'\\')) | control) & splat(0x80);
            let bits = flagged.wrapping_mul(0x0002_0408_1020_4081) >> 56;
            mask |= bits << (8 * i);
        }
        (mask, high & splat(0x80))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn by_bytes(bytes: &[u8]) -> Vec<u64> {
        let mut masks = vec![0u64; bytes.len().div_ceil(BLOCK)];
        for (i, &b) in bytes.iter().enumerate() {
            if is_stop(b) {
                masks[i / BLOCK] |= 1 << (i % BLOCK);
            }
        }
        masks
    }

    /// Bytes drawn mostly from the ones near the tests' edges.
    fn bytes() -> impl Strategy<Value = Vec<u8>> {
        let byte = prop_oneof![
            Just(b'"'),
            Just(b'\\'),
            Just(0x1f),
            Just(0x20),
            Just(0x00),
            Just(0x7f),
            Just(0x80),
            Just(0xff),
            any::<u8>(),
        ];
        proptest::collection::vec(byte, 0..300)
    }

    /// The copy [`classify`] makes: the bytes, then a block of zeros.
    fn padded(bytes: &[u8]) -> Vec<u8> {
        [bytes, &[0; BLOCK]].concat()
    }

    proptest! {
        /// Every path flags the stops and only them, says whether the line
        /// is ASCII, and copies it, padded; into buffers that held a longer
        /// line before, as a thread's buffers do.
        #[test]
        fn every_stop_and_only_stops_are_flagged(bytes in bytes()) {
            let ascii = bytes.is_ascii();
            let stale = || (vec![u64::MAX; 9], vec![0xee; 700]);
            let (mut masks, mut copy) = stale();
            prop_assert_eq!(classify(&bytes, &mut masks, &mut copy), ascii);
            prop_assert_eq!(&masks, &by_bytes(&bytes));
            prop_assert_eq!(&copy, &padded(&bytes));
            let mut portable = Vec::new();
            let mut high = 0;
            for block in bytes.chunks(BLOCK) {
                let mut padded = [b' '; BLOCK];
                padded[..block.len()].copy_from_slice(block);
                let (stops, block_high) = portable::block_mask(&padded);
                portable.push(stops);
                high |= block_high;
            }
            prop_assert_eq!(&portable, &by_bytes(&bytes));
            prop_assert_eq!(high == 0, ascii);
            // The whole line through the portable masks: a last block
            // read as the line's last 64 bytes, or padded when shorter.
            let (mut whole, mut copy) = stale();
            prop_assert_eq!(classify_with(&bytes, &mut whole, &mut copy, copying(portable::block_mask)), ascii);
            prop_assert_eq!(&whole, &by_bytes(&bytes));
            prop_assert_eq!(&copy, &padded(&bytes));
            #[cfg(target_arch = "x86_64")]
            {
                let (mut sse2, mut copy) = stale();
                prop_assert_eq!(classify_with(&bytes, &mut sse2, &mut copy, copying(block_mask)), ascii);
                prop_assert_eq!(&sse2, &by_bytes(&bytes));
                prop_assert_eq!(&copy, &padded(&bytes));
                if std::arch::is_x86_feature_detected!("avx2") {
                    let (mut avx2, mut copy) = stale();
                    // SAFETY: the processor has AVX2, checked just above.
                    let avx2_ascii = unsafe { avx2::classify(&bytes, &mut avx2, &mut copy) };
                    prop_assert_eq!(avx2_ascii, ascii);
                    prop_assert_eq!(&avx2, &by_bytes(&bytes));
                    prop_assert_eq!(&copy, &padded(&bytes));
                }
            }
        }

        /// One non-ASCII byte anywhere in an otherwise ASCII line, at
        /// every length around the blocks' edges, is found by every path.
        #[test]
        fn one_high_byte_anywhere_is_found(len in 1usize..200, at in any::<prop::sample::Index>(), high in 0x80u8..=0xff) {
            let mut bytes = vec![b'a'; len];
            bytes[at.index(len)] = high;
            let (mut masks, mut copy) = (Vec::new(), Vec::new());
            prop_assert!(!classify(&bytes, &mut masks, &mut copy));
            prop_assert!(!classify_with(&bytes, &mut masks, &mut copy, copying(portable::block_mask)));
            #[cfg(target_arch = "x86_64")]
            prop_assert!(!classify_with(&bytes, &mut masks, &mut copy, copying(block_mask)));
            bytes[at.index(len)] = b'~';
            prop_assert!(classify(&bytes, &mut masks, &mut copy));
            prop_assert!(classify_with(&bytes, &mut masks, &mut copy, copying(portable::block_mask)));
        }
    }
}

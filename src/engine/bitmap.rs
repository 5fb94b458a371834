//! Byte bitmaps: a block of up to 64 bytes of text, and for a test on bytes
//! (equal to `b`, in a range), the 64-bit mask of the bytes that pass it.
//!
//! Scanning text byte by byte takes a branch per byte, and when the branch
//! depends on the text (where does this word end?) the processor guesses
//! wrong at every edge. A mask answers the question for 64 bytes at once
//! with a few vector instructions; its bits are then combined with shifts
//! and visited with `trailing_zeros`. The tokeniser finds word edges this
//! way (and the runs holding non-ASCII characters), the normaliser where a
//! URL may begin.
//!
//! On x86-64 the tests are SSE2 compares, which every x86-64 processor has;
//! elsewhere a plain loop computes the same masks.

/// Bytes in a block.
pub const BLOCK: usize = 64;

/// Up to [`BLOCK`] bytes of text, padded with zero bytes (which the tests
/// below never pass, but for `eq(0)`).
#[derive(Clone, Copy)]
pub struct Block {
    bytes: [u8; BLOCK],
}

impl Block {
    /// The block of `chunk`'s bytes (at most [`BLOCK`] of them).
    #[inline]
    pub fn new(chunk: &[u8]) -> Block {
        let len = chunk.len().min(BLOCK);
        let bytes = match <[u8; BLOCK]>::try_from(&chunk[..len]) {
            Ok(full) => full,
            Err(_) => {
                let mut bytes = [0u8; BLOCK];
                bytes[..len].copy_from_slice(&chunk[..len]);
                bytes
            }
        };
        Block { bytes }
    }

    /// Bit `i` set when byte `i` equals `b`.
    #[inline]
    pub fn eq(&self, b: u8) -> u64 {
        self.mask(Test::Eq(b))
    }

    /// Bit `i` set when byte `i` is the ASCII letter `lower` in either case.
    #[inline]
    pub fn eq_ignoring_case(&self, lower: u8) -> u64 {
        debug_assert!(lower.is_ascii_lowercase());
        self.mask(Test::EqFolded(lower))
    }

    /// Bit `i` set when byte `i` is an ASCII word byte, `[0-9A-Za-z_]`
    /// (ASCII `\w`).
    #[inline]
    pub fn word(&self) -> u64 {
        self.mask(Test::Word)
    }

    /// Bit `i` set when byte `i` is not ASCII (its high bit is set): a
    /// byte of a character the ASCII tests cannot judge.
    #[inline]
    pub fn non_ascii(&self) -> u64 {
        self.mask(Test::NonAscii)
    }

    #[inline]
    fn mask(&self, test: Test) -> u64 {
        let mut bits = 0;
        let (lanes, _) = self.bytes.as_chunks::<16>();
        for (i, lane) in lanes.iter().enumerate() {
            bits |= u64::from(lane_mask(lane, test)) << (16 * i);
        }
        bits
    }
}

/// The block of up to [`BLOCK`] bytes of a text from a place, read so
/// that no byte is copied but for a text shorter than a block: its masks
/// are [`Block::new`]'s of the text from that place.
///
/// Why: [`Block::new`] of a text's last, short block called `memset` and
/// `memcpy` (some 40 instructions). A block that would end past the text
/// is read here as the text's last [`BLOCK`] bytes instead, and its masks
/// shifted down past the bytes before the place (a byte's bit depends on
/// that byte alone; the bits past the text's end come out clear, as for
/// the zero bytes that pad a copied block, for the tests a zero byte does
/// not pass).
pub struct BlockAt {
    block: Block,
    /// How far the block was read before the place.
    back: u32,
}

impl BlockAt {
    /// The block of `text` at `at` (an empty one past the text's end).
    #[inline(always)]
    pub fn new(text: &[u8], at: usize) -> BlockAt {
        if let Some(whole) = text.get(at..).and_then(<[u8]>::first_chunk::<BLOCK>) {
            BlockAt {
                block: Block { bytes: *whole },
                back: 0,
            }
        } else if let Some(last) = text.last_chunk::<BLOCK>() {
            // The text's last block starts before `at` here (by fewer than
            // BLOCK bytes, or by all of it past the text's end).
            BlockAt {
                block: Block { bytes: *last },
                back: at.saturating_sub(text.len() - BLOCK).min(BLOCK) as u32,
            }
        } else {
            BlockAt {
                block: Block::new(text.get(at..).unwrap_or_default()),
                back: 0,
            }
        }
    }

    /// As [`Block::word`], from the place.
    #[inline(always)]
    pub fn word(&self) -> u64 {
        self.block.word().checked_shr(self.back).unwrap_or(0)
    }

    /// As [`Block::non_ascii`], from the place.
    #[inline(always)]
    pub fn non_ascii(&self) -> u64 {
        self.block.non_ascii().checked_shr(self.back).unwrap_or(0)
    }

    /// [`BlockAt::word`] with AVX2: two lanes of 32 bytes, not four of 16
    /// (about half the instructions; the tokeniser takes this mask of
    /// every block of an ASCII text).
    ///
    /// # Safety
    /// The processor must have AVX2.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    #[inline]
    pub unsafe fn word_avx2(&self) -> u64 {
        avx2::word(&self.block.bytes)
            .checked_shr(self.back)
            .unwrap_or(0)
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::BLOCK;
    use std::arch::x86_64::*;

    /// The mask of the ASCII word bytes of `bytes`, as `sse2::mask` with
    /// `Test::Word` gives it for each 16 of them.
    #[target_feature(enable = "avx2")]
    #[inline]
    pub(super) fn word(bytes: &[u8; BLOCK]) -> u64 {
        let half = |half: &[u8; 32]| {
            // SAFETY: 32 bytes are read from an array of 32.
            let b = unsafe { _mm256_loadu_si256(half.as_ptr().cast()) };
            let folded = _mm256_or_si256(b, _mm256_set1_epi8(0x20));
            // Unsigned `x - base < n` as a signed compare, as in
            // `sse2::mask`.
            let below = |x: __m256i, base: u8, n: u8| {
                let shifted = _mm256_add_epi8(x, _mm256_set1_epi8(0x80u8.wrapping_sub(base) as i8));
                _mm256_cmpgt_epi8(_mm256_set1_epi8((0x80u8 + n) as i8), shifted)
            };
            let letter = below(folded, b'a', 26);
            let digit = below(b, b'0', 10);
            let underscore = _mm256_cmpeq_epi8(b, _mm256_set1_epi8(b'_' as i8));
            let passed = _mm256_or_si256(_mm256_or_si256(letter, digit), underscore);
            u64::from(_mm256_movemask_epi8(passed) as u32)
        };
        let (halves, _) = bytes.as_chunks::<32>();
        halves
            .iter()
            .enumerate()
            .fold(0, |bits, (i, h)| bits | half(h) << (32 * i))
    }
}

/// Bit `i` set when byte `i` of `group` is an ASCII word byte (as
/// [`Block::word`], for 16 bytes read where they are).
#[inline(always)]
pub fn word_group(group: &[u8; 16]) -> u16 {
    lane_mask(group, Test::Word)
}

/// The mask of the bytes of `lane` that pass `test`.
#[inline(always)]
fn lane_mask(lane: &[u8; 16], test: Test) -> u16 {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: SSE2 is part of the x86-64 baseline: every processor this
    // code can run on has it.
    let bits = unsafe { sse2::mask(lane, test) };
    #[cfg(not(target_arch = "x86_64"))]
    let bits = portable::mask(lane, test);
    bits
}

/// A test on bytes.
#[derive(Clone, Copy)]
enum Test {
    Eq(u8),
    EqFolded(u8),
    Word,
    NonAscii,
}

#[cfg(target_arch = "x86_64")]
mod sse2 {
    use super::Test;
    use std::arch::x86_64::*;

    /// The mask of the bytes of `lane` that pass `test`.
    #[inline]
    #[target_feature(enable = "sse2")]
    pub(super) fn mask(lane: &[u8; 16], test: Test) -> u16 {
        let word = u128::from_le_bytes(*lane);
        let b = _mm_set_epi64x((word >> 64) as i64, word as i64);
        let eq = |x: __m128i, c: u8| _mm_cmpeq_epi8(x, _mm_set1_epi8(c as i8));
        let folded = _mm_or_si128(b, _mm_set1_epi8(0x20));
        let passed = match test {
            // The high bit of each byte is what `movemask` takes.
            Test::NonAscii => b,
            Test::Eq(c) => eq(b, c),
            Test::EqFolded(c) => eq(folded, c),
            Test::Word => {
                // Unsigned `x - base < n` as a signed compare: shift the
                // range to start at i8::MIN.
                let below = |x: __m128i, base: u8, n: u8| {
                    let shifted = _mm_add_epi8(x, _mm_set1_epi8(0x80u8.wrapping_sub(base) as i8));
                    _mm_cmplt_epi8(shifted, _mm_set1_epi8((0x80u8 + n) as i8))
                };
                let letter = below(folded, b'a', 26);
                let digit = below(b, b'0', 10);
                _mm_or_si128(_mm_or_si128(letter, digit), eq(b, b'_'))
            }
        };
        _mm_movemask_epi8(passed) as u16
    }
}

mod portable {
    use super::Test;

    /// The mask of the bytes of `lane` that pass `test`.
    #[cfg_attr(target_arch = "x86_64", allow(dead_code))]
    pub(super) fn mask(lane: &[u8; 16], test: Test) -> u16 {
        let mut bits = 0;
        for (i, &b) in lane.iter().enumerate() {
            let passed = match test {
                Test::Eq(c) => b == c,
                Test::EqFolded(c) => b | 0x20 == c,
                Test::Word => b.is_ascii_alphanumeric() || b == b'_',
                Test::NonAscii => !b.is_ascii(),
            };
            bits |= u16::from(passed) << i;
        }
        bits
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every byte value, in blocks that start at every offset mod 64.
    fn blocks() -> Vec<Vec<u8>> {
        let all: Vec<u8> = (0..=255).collect();
        let mut blocks: Vec<Vec<u8>> = all.chunks(BLOCK).map(<[u8]>::to_vec).collect();
        blocks.extend(all[3..50].chunks(BLOCK).map(<[u8]>::to_vec));
        blocks.push(Vec::new());
        blocks
    }

    fn check(name: &str, mask: impl Fn(&Block) -> u64, expected: impl Fn(u8) -> bool) {
        for chunk in blocks() {
            let block = Block::new(&chunk);
            let bits = mask(&block);
            for (i, &b) in chunk.iter().enumerate() {
                assert_eq!(bits >> i & 1 == 1, expected(b), "{name}: byte {b:#04x}");
            }
            if chunk.len() < BLOCK {
                assert_eq!(bits >> chunk.len(), 0, "{name}: no bits past the text");
            }
        }
    }

    #[test]
    fn masks_agree_with_the_byte_tests() {
        check("word", Block::word, |b| {
            b.is_ascii_alphanumeric() || b == b'_'
        });
        check("eq", |block| block.eq(b'.'), |b| b == b'.');
        check("non_ascii", Block::non_ascii, |b| !b.is_ascii());
        check(
            "eq_ignoring_case",
            |block| block.eq_ignoring_case(b'h'),
            |b| b == b'h' || b == b'H',
        );
        check(
            "eq_ignoring_case",
            |block| block.eq_ignoring_case(b'w'),
            |b| b.eq_ignore_ascii_case(&b'w'),
        );
    }

    /// A [`BlockAt`]'s masks against a copied [`Block`]'s, from `at` in
    /// `text`.
    fn check_in_place(text: &[u8], at: usize) -> Result<(), String> {
        let block = Block::new(text.get(at..).unwrap_or_default());
        let pairs = [
            ("word", BlockAt::new(text, at).word(), block.word()),
            (
                "non_ascii",
                BlockAt::new(text, at).non_ascii(),
                block.non_ascii(),
            ),
        ];
        for (name, in_place, copied) in pairs {
            if in_place != copied {
                return Err(format!(
                    "{name} at {at} of {} bytes: {in_place:#x} != {copied:#x}",
                    text.len()
                ));
            }
        }
        Ok(())
    }

    #[test]
    fn blocks_read_in_place_are_the_copied_blocks_at_every_length_and_place() {
        // Every byte value, in texts of every length to 200 and from
        // every place (whole lanes, part lanes, texts shorter than one).
        let all: Vec<u8> = (0..=255u8).rev().chain(0..=255).collect();
        for len in 0..=200 {
            for skip in [0, 1, 7, 128, 300] {
                let text = &all[skip..skip + len];
                for at in 0..=len + 1 {
                    check_in_place(text, at).unwrap();
                }
            }
        }
    }

    proptest::proptest! {
        #[test]
        fn blocks_read_in_place_are_the_copied_blocks(
            text in proptest::collection::vec(
                proptest::sample::select(vec![0u8, b' ', b'_', b'a', b'Z', b'0', b'9', b'@', b'`', b'{', b'/', b':', 0x7f, 0x80, 0xc3, 0xff]),
                0..300,
            ),
            at in 0usize..320,
        ) {
            proptest::prop_assert_eq!(check_in_place(&text, at), Ok(()));
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn the_avx2_word_mask_is_the_sse2_one() {
        if !std::arch::is_x86_feature_detected!("avx2") {
            return;
        }
        let all: Vec<u8> = (0..=255u8).rev().chain(0..=255).collect();
        for len in 0..=200 {
            for skip in [0, 1, 7, 128, 300] {
                let text = &all[skip..skip + len];
                for at in 0..=len + 1 {
                    let block = BlockAt::new(text, at);
                    // SAFETY: the processor has AVX2 (checked above).
                    assert_eq!(unsafe { block.word_avx2() }, block.word(), "{at} of {len}");
                }
            }
        }
    }

    #[test]
    fn a_groups_word_mask_is_the_blocks() {
        for chunk in blocks() {
            let block = Block::new(&chunk);
            for (i, group) in block.bytes.as_chunks::<16>().0.iter().enumerate() {
                assert_eq!(word_group(group), (block.word() >> (16 * i)) as u16);
            }
        }
    }

    #[test]
    fn portable_masks_are_the_sse2_masks() {
        for chunk in blocks() {
            let block = Block::new(&chunk);
            for (i, lane) in block.bytes.as_chunks::<16>().0.iter().enumerate() {
                for test in [
                    Test::Word,
                    Test::Eq(b'.'),
                    Test::EqFolded(b't'),
                    Test::NonAscii,
                ] {
                    let expected = portable::mask(lane, test);
                    let bits = match test {
                        Test::Word => block.word(),
                        Test::NonAscii => block.non_ascii(),
                        Test::Eq(c) => block.eq(c),
                        Test::EqFolded(c) => block.eq_ignoring_case(c),
                    };
                    assert_eq!((bits >> (16 * i)) as u16, expected);
                }
            }
        }
    }
}

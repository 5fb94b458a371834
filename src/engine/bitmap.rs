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
            #[cfg(target_arch = "x86_64")]
            // SAFETY: SSE2 is part of the x86-64 baseline: every processor
            // this code can run on has it.
            let lane_bits = unsafe { sse2::mask(lane, test) };
            #[cfg(not(target_arch = "x86_64"))]
            let lane_bits = portable::mask(lane, test);
            bits |= u64::from(lane_bits) << (16 * i);
        }
        bits
    }
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

#[cfg_attr(target_arch = "x86_64", allow(dead_code))]
mod portable {
    use super::Test;

    /// The mask of the bytes of `lane` that pass `test`.
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

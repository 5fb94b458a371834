//! The postings table's memory: 64-bit cells that grow in place, in address
//! space reserved for them up front.
//!
//! A table that grows by allocating a bigger one and copying into it has the
//! kernel zero every page of each new table as it is first written: on a
//! virtual machine about 1 GB/s, a sixth of a run over 200,000 tweets
//! (`docs/performance.md`), and the tables it grew from were half of it. So
//! the cells live in an anonymous mapping reserved for more of them than the
//! table holds, with no swap set aside for it (the kernel charges only for
//! pages as they are first touched), and growing only lengthens the slice
//! over it: the cells already there keep their pages, and only the added
//! ones are new memory. A table that outgrows its reservation moves into a
//! new one, with room to grow again.
//!
//! A reservation of a huge page or more starts on a huge-page boundary, so
//! that every huge page inside the table can be one (see
//! [`super::hint::huge_pages`]).

use memmap2::{MmapMut, MmapOptions};

use super::hint::HUGE_PAGE;

/// Zeroed 64-bit cells in a reservation they can grow into without moving.
pub struct Cells {
    /// The reservation, unmapped when the cells are dropped.
    map: MmapMut,
    /// The first cell, inside `map`: derived once, since the table is read
    /// dozens of times a message, and a checked cast of the mapping's bytes
    /// each time cost about 230 instructions a message.
    first: *mut u64,
    /// Cells in use.
    len: usize,
    /// Cells the reservation holds from `first`.
    capacity: usize,
}

// SAFETY: `Cells` owns its mapping as a `Vec` owns its buffer: `first` points
// into `map`, which only `Cells` reaches, and shared access hands out only
// shared slices.
unsafe impl Send for Cells {}
// SAFETY: as above; `&Cells` gives only `&[u64]`.
unsafe impl Sync for Cells {}

impl Cells {
    /// `len` zero cells, which can grow to `reserve` cells in place. When
    /// the system refuses the reservation, it is made for `len` cells only;
    /// when it refuses that too, the process stops as on any allocation
    /// failure.
    pub fn new(len: usize, reserve: usize) -> Cells {
        let reserve = reserve.max(len);
        let reserve_for = |cells: usize| {
            let bytes = cells.max(1).saturating_mul(size_of::<u64>());
            let slack = if bytes >= HUGE_PAGE { HUGE_PAGE } else { 0 };
            // A size past what can be mapped fails below, like any refusal.
            let mut map = MmapOptions::new()
                .len(bytes.saturating_add(slack))
                .no_reserve_swap()
                .map_anon()?;
            // A mapping starts on a page boundary, so its cells are aligned
            // from offset 0; a large one moves on to a huge-page boundary.
            let start = if slack == 0 {
                0
            } else {
                map.as_ptr().align_offset(HUGE_PAGE)
            };
            let capacity = (map.len() - start) / size_of::<u64>();
            let first = map[start..].as_mut_ptr().cast::<u64>();
            std::io::Result::Ok(Cells {
                map,
                first,
                len,
                capacity,
            })
        };
        reserve_for(reserve)
            .or_else(|_| reserve_for(len))
            .unwrap_or_else(|_| {
                std::alloc::handle_alloc_error(
                    std::alloc::Layout::array::<u64>(len)
                        .unwrap_or(std::alloc::Layout::new::<u64>()),
                )
            })
    }

    /// Cells in use.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Cells the reservation holds: growing up to here moves nothing.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// The cells in use.
    #[inline]
    pub fn as_slice(&self) -> &[u64] {
        // SAFETY: `first` is aligned for u64 (a page or huge-page boundary)
        // and the `len <= capacity` cells from it lie inside `map`, which
        // lives as long as `self`; an anonymous mapping reads as zero until
        // written, and any bytes are a valid u64. Nothing writes them while
        // `self` is borrowed.
        unsafe { std::slice::from_raw_parts(self.first, self.len) }
    }

    /// The cells in use, to write.
    #[inline]
    pub fn as_mut_slice(&mut self) -> &mut [u64] {
        // SAFETY: as in `as_slice`; `self` is borrowed mutably, so this is
        // the only slice over the cells.
        unsafe { std::slice::from_raw_parts_mut(self.first, self.len) }
    }

    /// Grows to `len` cells, the new ones zero: in place when the
    /// reservation holds them, otherwise by moving into a new reservation
    /// for `reserve` cells. Returns whether it moved.
    pub fn grow(&mut self, len: usize, reserve: usize) -> bool {
        debug_assert!(len >= self.len, "cells never shrink");
        if len <= self.capacity {
            self.len = len;
            return false;
        }
        let mut moved = Cells::new(len, reserve);
        moved.as_mut_slice()[..self.len].copy_from_slice(self.as_slice());
        *self = moved;
        true
    }
}

impl Clone for Cells {
    fn clone(&self) -> Self {
        let mut copy = Cells::new(self.len, self.capacity);
        copy.as_mut_slice().copy_from_slice(self.as_slice());
        copy
    }
}

impl std::fmt::Debug for Cells {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cells")
            .field("len", &self.len)
            .field("capacity", &self.capacity)
            .field("reserved_bytes", &self.map.len())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_in_place_within_its_reservation_and_moves_past_it() {
        let mut cells = Cells::new(16, 1 << 20);
        assert_eq!(cells.as_slice(), [0; 16]);
        cells.as_mut_slice()[3] = 7;
        let before = cells.as_slice().as_ptr();
        assert!(!cells.grow(1 << 19, 1 << 21));
        assert_eq!(cells.as_slice().as_ptr(), before, "in place");
        assert_eq!(cells.len(), 1 << 19);
        assert_eq!(cells.as_slice()[3], 7);
        assert!(cells.as_slice()[4..].iter().all(|&c| c == 0));
        cells.as_mut_slice()[(1 << 19) - 1] = 9;
        assert!(cells.grow(1 << 21, 1 << 22), "past its reservation");
        assert!(cells.capacity() >= 1 << 22);
        assert_eq!(cells.as_slice()[3], 7);
        assert_eq!(cells.as_slice()[(1 << 19) - 1], 9);
        assert_eq!(cells.as_slice().iter().filter(|&&c| c != 0).count(), 2);
    }

    #[test]
    fn a_reservation_refused_is_made_for_the_cells_in_use() {
        let mut cells = Cells::new(16, usize::MAX);
        assert!(cells.capacity() >= 16 && cells.capacity() < 1 << 20);
        cells.as_mut_slice()[15] = 1;
        assert!(cells.grow(1 << 20, usize::MAX));
        assert_eq!(cells.as_slice()[15], 1);
        assert_eq!(cells.len(), 1 << 20);
    }

    #[test]
    fn large_reservations_start_on_a_huge_page() {
        let cells = Cells::new(16, HUGE_PAGE);
        assert_eq!(cells.as_slice().as_ptr() as usize % HUGE_PAGE, 0);
        let clone = cells.clone();
        assert_eq!(clone.as_slice(), cells.as_slice());
        assert!(clone.capacity() >= cells.capacity());
    }
}

//! Hints to the hardware about the engine's big tables: software prefetch,
//! huge pages, and a new table's pages faulted in ahead of use. None
//! changes what the program computes, only how long its memory reads take
//! and how much memory it holds.
//!
//! On an index of a million messages nearly every lookup misses the cache,
//! and a message makes a dozen of them, most depending on the one before (a
//! posting names a slot, the slot's entry points at its shingle set). The
//! engine hides that latency by walking the same chain for the messages a
//! few places ahead, one link per message, so that each message finds the
//! links it needs loaded (see [`crate::engine::PREFETCH_STAGES`]).
//!
//! Each of those reads lands on a random page of tables hundreds of
//! megabytes large, so with ordinary 4 KiB pages each also misses the TLB
//! and waits for a page-table walk. Backed by 2 MiB pages, the same tables
//! fit the TLB's reach many times better.

/// Asks the processor to start loading the cache line holding `address`.
/// Only a hint: it never faults, whatever the address, and changes nothing
/// the program can observe but timing.
#[inline]
pub fn prefetch<T>(address: *const T) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        // SAFETY: a prefetch instruction reads nothing into the program and
        // never faults, even on an invalid address; it only warms a cache.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(address.cast()) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = address;
}

/// Bytes of a huge page (x86-64 and most arm64 kernels).
pub const HUGE_PAGE: usize = 2 << 20;

/// Asks the kernel to back `table` with huge pages where it can (Linux's
/// transparent huge pages, when set to `madvise` or `always`). Call it on a
/// large allocation before its pages are first touched. Only a hint:
/// elsewhere, or when the kernel declines, nothing changes.
pub fn huge_pages<T>(table: &[T]) {
    #[cfg(target_os = "linux")]
    {
        let start = table.as_ptr() as usize;
        let end = start + std::mem::size_of_val(table);
        // madvise wants a page-aligned start; only whole huge pages inside
        // the table can be huge anyway.
        let aligned = start.next_multiple_of(HUGE_PAGE);
        if end.saturating_sub(aligned) < HUGE_PAGE {
            return;
        }
        // SAFETY: the range lies inside `table`'s live allocation, and
        // MADV_HUGEPAGE only changes how the kernel backs it, never its
        // contents. An error (a kernel without huge pages) changes nothing.
        unsafe {
            libc::madvise(
                aligned as *mut libc::c_void,
                end - aligned,
                libc::MADV_HUGEPAGE,
            )
        };
    }
    #[cfg(not(target_os = "linux"))]
    let _ = table;
}

/// A thread faulting in a table's pages (see [`populate_in_background`]).
/// Join it before the table is freed.
#[derive(Debug)]
pub struct Populating(std::thread::JoinHandle<()>);

impl Populating {
    /// Waits until the thread is done.
    pub fn join(self) {
        // The thread only makes system calls: it cannot panic, and if it
        // did, the table would still be whole.
        let _ = self.0.join();
    }
}

/// Has a thread of its own fault in the pages of `table` (Linux's
/// `MADV_POPULATE_WRITE`), first page first, so that the kernel allocates
/// and zeroes them there rather than on the thread about to fill the table
/// back to front: the two meet halfway. Contents are never touched (the
/// kernel maps the pages without writing them), so the owner may write the
/// table meanwhile. `None` when there is nothing to do or no thread starts
/// (then the pages are faulted in when first written, as ever).
///
/// The caller must keep `table` allocated until the returned handle is
/// joined.
pub fn populate_in_background<T>(table: &[T]) -> Option<Populating> {
    #[cfg(target_os = "linux")]
    {
        const PAGE: usize = 4096;
        const STEP: usize = 2 << 20;
        let start = table.as_ptr() as usize;
        let end = start + std::mem::size_of_val(table);
        let (first, last) = (start.next_multiple_of(PAGE), end / PAGE * PAGE);
        if last <= first {
            return None;
        }
        let populate = move || {
            let mut from = first;
            while from < last {
                let to = (from + STEP).min(last);
                // SAFETY: the range lies inside the table, which the caller
                // keeps allocated until this thread is joined; the call maps
                // pages without reading or writing their contents. An error
                // (an older kernel) ends the work: pages fault in when used.
                let failed = unsafe {
                    libc::madvise(
                        from as *mut libc::c_void,
                        to - from,
                        libc::MADV_POPULATE_WRITE,
                    )
                } != 0;
                if failed {
                    return;
                }
                from = to;
            }
        };
        std::thread::Builder::new()
            .name("dedup-populate".into())
            .spawn(populate)
            .ok()
            .map(Populating)
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = table;
        None
    }
}

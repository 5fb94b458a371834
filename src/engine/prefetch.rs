//! Software prefetch: the one place the engine asks the processor to start
//! loading memory it will read soon.
//!
//! On an index of a million messages nearly every lookup misses the cache,
//! and a message makes a dozen of them, most depending on the one before (a
//! posting names a slot, the slot's entry points at its shingle set). The
//! engine hides that latency by walking the same chain for the messages a
//! few places ahead, one link per message, so that each message finds the
//! links it needs loaded (see [`crate::batch::prefetch_ahead`]).

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

//! A software prefetch hint, used by batched lookups to overlap cache misses.

/// Hints the CPU to bring the cache line holding `p` into cache. Never faults and
/// has no effect on program semantics.
#[inline(always)]
pub fn prefetch<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `_mm_prefetch` is a hint: it never dereferences in a way that can fault
    // or be observed, whatever the address, and SSE is baseline on x86_64.
    unsafe {
        core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(p as *const i8);
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

//! Call counters on the entry points of the balancers and migration protocols,
//! compiled only with the `probe` feature: tests use them to show that the
//! simulator and the runtime run this very code (not a copy of it). Without the
//! feature [`hit`] is an empty inline function.

/// An instrumented entry point.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Probe {
    /// [`crate::migrate::Mover::begin`].
    MoverBegin,
    /// [`crate::migrate::WorkerMoves::on_packet`].
    OnPacket,
    /// [`crate::migrate::WorkerMoves::on_shard`].
    OnShard,
    /// [`crate::migrate::WorkingOffload::route`].
    Route,
    /// [`crate::balancers::Rsspp`]'s `plan`.
    RssppPlan,
}

#[cfg(feature = "probe")]
static COUNTS: [std::sync::atomic::AtomicU64; 5] =
    [const { std::sync::atomic::AtomicU64::new(0) }; 5];

/// Counts a call.
#[inline]
pub fn hit(_p: Probe) {
    // Relaxed: a statistic read after the threads that count were joined (the
    // join orders the increments before the read).
    #[cfg(feature = "probe")]
    COUNTS[_p as usize].fetch_add(1, std::sync::atomic::Ordering::Relaxed);
}

/// Calls counted so far (always 0 without the `probe` feature).
pub fn count(_p: Probe) -> u64 {
    #[cfg(feature = "probe")]
    return COUNTS[_p as usize].load(std::sync::atomic::Ordering::Relaxed);
    #[cfg(not(feature = "probe"))]
    0
}

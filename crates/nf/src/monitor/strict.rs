//! The `strict` monitor's shared counters: one packet count per source, in
//! an array every core updates on every packet with an atomic add — the
//! per-packet shared updates (GranularNF §4, Fig. 8 left) that the delayed
//! merge avoids. A source is counted in a slot picked by a hash of its
//! address; two sources in one slot add up (2^16 slots: a count can only be
//! too high, never too low, so the threshold never misses).

use core::hash::{BuildHasher, Hash};
use core::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};

/// Slots (a power of two).
const SLOTS: usize = 1 << 16;

/// Per-source packet counts shared by every core.
pub struct StrictCounts {
    slots: Box<[AtomicU64]>,
    hasher: std::hash::RandomState,
}

impl std::fmt::Debug for StrictCounts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StrictCounts")
            .field("slots", &self.slots.len())
            .finish()
    }
}

impl Default for StrictCounts {
    fn default() -> Self {
        StrictCounts::new()
    }
}

impl StrictCounts {
    /// Counts at 0.
    pub fn new() -> StrictCounts {
        StrictCounts {
            slots: (0..SLOTS).map(|_| AtomicU64::new(0)).collect(),
            hasher: std::hash::RandomState::new(),
        }
    }

    fn slot(&self, src: &IpAddr) -> &AtomicU64 {
        let mut h = self.hasher.build_hasher();
        src.hash(&mut h);
        &self.slots[core::hash::Hasher::finish(&h) as usize & (SLOTS - 1)]
    }

    /// Counts a packet of `src`; returns its count with every core's packets.
    pub fn add(&self, src: &IpAddr) -> u64 {
        // Relaxed: a counter; the add is atomic, and nothing else is published
        // through it (no other access pairs with it)
        self.slot(src).fetch_add(1, Ordering::Relaxed) + 1
    }

    /// The count of `src` now.
    pub fn get(&self, src: &IpAddr) -> u64 {
        // Relaxed: a reading of the counter alone (pairs with nothing)
        self.slot(src).load(Ordering::Relaxed)
    }
}

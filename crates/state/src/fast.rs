//! The fast table (GranularNF §3, "data state management"): a small table of the
//! most frequently looked-up flows of a shard, in front of the flow table's index
//! (the slow table, which keeps every flow).
//!
//! Why: at a million flows the slow table's index and entry metadata are tens of
//! megabytes, so a lookup costs dependent cache misses even for the flows that
//! carry most of the packets. The fast table holds the hottest few thousand in one
//! compact array: a hit reads one 64-byte line and never touches the index or the
//! metadata.
//!
//! How it is kept — refreshed periodically from observed frequencies, as the paper
//! describes:
//! - Two-way set-associative; each way holds a flow key, the entry id, generation,
//!   which packet side is the original direction, and its hits this period.
//! - A lookup answered by the slow table counts one for its entry (a per-entry
//!   counter kept by the flow table); a fast hit counts in its way.
//! - Every `period` lookups (64 times the capacity) the refresh takes the flows
//!   counted most often in the period (fast and slow alike, at least twice),
//!   rebuilds the fast table from them, hottest first, and zeroes the counts.
//!   Between refreshes nothing is admitted or evicted, so the fast table costs
//!   nothing but its probe; a newly hot flow waits at most one period.
//! - The slow table invalidates a way whenever it unindexes the key (entry freed,
//!   alias dropped), so a fast hit never returns a stale entry.
//!
//! Pure data structure, owned by one [`FlowTable`](crate::FlowTable); no threads,
//! no clocks.

use crate::{Dir, FlowKey, Side};

const EMPTY: u32 = u32::MAX;

/// One way: exactly one cache line.
#[derive(Clone, Debug)]
#[repr(C, align(64))]
struct Way {
    key: FlowKey,
    hash: u32,
    id: u32,
    gen: u32,
    hits: u32,
    /// The packet side that is the entry's original direction along this key.
    orig: Side,
    /// The key is the entry's alias key.
    alias: bool,
    /// The entry is known to be assured (seen both directions).
    assured: bool,
}

impl Default for Way {
    fn default() -> Self {
        Way {
            key: FlowKey::default(),
            hash: 0,
            id: EMPTY,
            gen: 0,
            hits: 0,
            orig: Side::Lo,
            alias: false,
            assured: false,
        }
    }
}

/// A fast-table hit.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) struct FastHit {
    pub id: u32,
    pub gen: u32,
    pub dir: Dir,
    /// First reply-direction packet seen through the fast table: the caller marks
    /// the entry assured.
    pub newly_assured: bool,
}

/// A key of a live entry, to place in the fast table.
#[derive(Copy, Clone, Debug)]
pub(crate) struct Place {
    pub hash: u32,
    pub key: FlowKey,
    pub id: u32,
    pub gen: u32,
    pub orig: Side,
    pub alias: bool,
    pub assured: bool,
}

/// Fast-table counters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FastStats {
    /// Lookups answered by the fast table.
    pub hits: u64,
    /// Lookups that went on to the slow table.
    pub misses: u64,
    /// Refreshes (rebuilds from the period's counts).
    pub refreshes: u64,
    /// Keys placed by the last refresh.
    pub placed: u64,
}

/// See the module documentation.
pub(crate) struct FastTable {
    ways: Vec<[Way; 2]>,
    shift: u32,
    ops: u64,
    period: u64,
    stats: FastStats,
}

impl FastTable {
    /// A fast table of at least `entries` flows (rounded up to a power of two).
    pub fn new(entries: usize) -> FastTable {
        let sets = entries.div_ceil(2).next_power_of_two().max(1);
        FastTable {
            ways: vec![[Way::default(), Way::default()]; sets],
            shift: 64 - sets.trailing_zeros(),
            ops: 0,
            period: (sets as u64 * 2 * 64).max(64),
            stats: FastStats::default(),
        }
    }

    /// Flows the table holds at most.
    pub fn capacity(&self) -> usize {
        self.ways.len() * 2
    }

    pub fn stats(&self) -> &FastStats {
        &self.stats
    }

    #[inline]
    fn set(&self, hash: u32) -> usize {
        if self.shift == 64 {
            return 0;
        }
        // a different multiplier from the slow index's, so the two spread apart
        ((u64::from(hash).wrapping_mul(0xd6e8_feb8_6659_fd93)) >> self.shift) as usize
    }

    /// The set's address, for prefetching.
    #[inline]
    pub fn set_ptr(&self, hash: u32) -> *const u8 {
        self.ways[self.set(hash)].as_ptr().cast()
    }

    /// True once a period of lookups has passed: the owner refreshes.
    #[inline]
    pub fn refresh_due(&self) -> bool {
        self.ops >= self.period
    }

    /// Looks `key` up; counts the operation towards the next refresh.
    #[inline]
    pub fn get(&mut self, hash: u32, key: &FlowKey, side: Side) -> Option<FastHit> {
        self.ops += 1;
        let s = self.set(hash);
        for w in &mut self.ways[s] {
            if w.id != EMPTY && w.hash == hash && w.key == *key {
                w.hits = w.hits.saturating_add(1);
                let dir = if side == w.orig {
                    Dir::Original
                } else {
                    Dir::Reply
                };
                let newly_assured = dir == Dir::Reply && !w.assured;
                w.assured |= newly_assured;
                self.stats.hits += 1;
                return Some(FastHit {
                    id: w.id,
                    gen: w.gen,
                    dir,
                    newly_assured,
                });
            }
        }
        self.stats.misses += 1;
        None
    }

    /// Every occupied way's entry and hits this period.
    pub fn counts(&self) -> impl Iterator<Item = (u32, u32)> + '_ {
        self.ways
            .iter()
            .flatten()
            .filter(|w| w.id != EMPTY)
            .map(|w| (w.id, w.hits))
    }

    /// Empties the table and starts a new period.
    pub fn clear(&mut self) {
        for set in &mut self.ways {
            *set = [Way::default(), Way::default()];
        }
        self.ops = 0;
        self.stats.refreshes += 1;
        self.stats.placed = 0;
    }

    /// Places a key (hottest first: a full set keeps what it has).
    pub fn place(&mut self, p: Place) -> bool {
        let s = self.set(p.hash);
        let Some(w) = self.ways[s].iter_mut().find(|w| w.id == EMPTY) else {
            return false;
        };
        *w = Way {
            key: p.key,
            hash: p.hash,
            id: p.id,
            gen: p.gen,
            hits: 0,
            orig: p.orig,
            alias: p.alias,
            assured: p.assured,
        };
        self.stats.placed += 1;
        true
    }

    /// Forgets `id`'s way for the key with index hash `hash` (primary or alias).
    #[inline]
    pub fn invalidate(&mut self, hash: u32, id: u32, alias: bool) {
        let s = self.set(hash);
        for w in &mut self.ways[s] {
            if w.id == id && w.alias == alias {
                w.id = EMPTY;
                w.hits = 0;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::net::{IpAddr, Ipv4Addr};
    use wire::FiveTuple;

    fn place(i: u32, hash: u32) -> (Place, Side) {
        let (key, side) = FlowKey::of(&FiveTuple {
            src: IpAddr::V4(Ipv4Addr::from(0x0a00_0000 | i)),
            dst: IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1)),
            src_port: 1000,
            dst_port: 80,
            proto: 6,
        });
        (
            Place {
                hash,
                key,
                id: i,
                gen: 7,
                orig: side,
                alias: false,
                assured: false,
            },
            side,
        )
    }

    #[test]
    fn way_is_one_cache_line() {
        assert_eq!(core::mem::size_of::<Way>(), 64);
    }

    #[test]
    fn placed_flow_hits_with_direction_and_assures_once() {
        let mut f = FastTable::new(16);
        let (p, s) = place(3, 5);
        assert_eq!(f.get(5, &p.key, s), None);
        assert!(f.place(p));
        let h = f.get(5, &p.key, s).unwrap();
        assert_eq!(
            (h.id, h.gen, h.dir, h.newly_assured),
            (3, 7, Dir::Original, false)
        );
        let other = if s == Side::Lo { Side::Hi } else { Side::Lo };
        let h = f.get(5, &p.key, other).unwrap();
        assert_eq!((h.dir, h.newly_assured), (Dir::Reply, true));
        assert!(!f.get(5, &p.key, other).unwrap().newly_assured);
        assert_eq!(f.counts().collect::<Vec<_>>(), vec![(3, 3)]);
        f.invalidate(5, 3, false);
        assert_eq!(f.get(5, &p.key, s), None);
        assert_eq!((f.stats().hits, f.stats().misses), (3, 2));
    }

    #[test]
    fn a_full_set_keeps_the_first_placed() {
        // one set of two ways
        let mut f = FastTable::new(2);
        assert!(f.place(place(1, 1).0));
        assert!(f.place(place(2, 2).0));
        assert!(!f.place(place(3, 3).0));
        let (p, s) = place(3, 3);
        assert!(f.get(3, &p.key, s).is_none());
        f.clear();
        assert_eq!(f.counts().count(), 0);
        assert!(f.place(p));
        assert!(f.get(3, &p.key, s).is_some());
    }

    #[test]
    fn refresh_falls_due_after_a_period() {
        let mut f = FastTable::new(2);
        let (p, s) = place(1, 1);
        for _ in 0..127 {
            f.get(1, &p.key, s);
        }
        assert!(!f.refresh_due());
        f.get(1, &p.key, s);
        assert!(f.refresh_due());
        f.clear();
        assert!(!f.refresh_due());
    }
}

//! The merged accounting's per-core counts (`accounting = "merged"`), by
//! the URR's [`Slot`] index instead of a hash map.
//!
//! A core's cell at a reused index still holds the gone URR's counts until
//! that core counts for the new one: the cell carries the slot's number,
//! and a cell whose number is not the URR's starts again from zero.

use super::rules::Volume;
use super::slots::Slot;
use super::Usage;

/// One cell of a core's counts: whose they are and the volumes.
#[derive(Clone, Copy, Debug, Default)]
struct Cell {
    /// The slot's number (0: empty).
    number: u64,
    seid: u64,
    urr: u32,
    volume: Volume,
}

/// One core's merged-accounting counts, by slot index.
#[derive(Clone, Debug, Default)]
pub struct CoreUsage {
    cells: Vec<Cell>,
}

impl CoreUsage {
    /// Counts a packet of `bytes` for session `seid`'s URR `urr` in `slot`.
    #[inline]
    pub fn count(&mut self, slot: &Slot, seid: u64, urr: u32, uplink: bool, bytes: u64) {
        let i = slot.index as usize;
        if i >= self.cells.len() {
            self.cells.resize(i + 1, Cell::default());
        }
        let c = &mut self.cells[i];
        if c.number != slot.number {
            *c = Cell {
                number: slot.number,
                seid,
                urr,
                volume: Volume::default(),
            };
        }
        c.volume.count(uplink, bytes);
    }

    /// The volumes this core counted for the URR in `slot` (none when its
    /// cell holds another URR's, gone or newer).
    pub fn volume_at(&self, slot: &Slot) -> Volume {
        match self.cells.get(slot.index as usize) {
            Some(c) if c.number == slot.number => c.volume,
            _ => Volume::default(),
        }
    }

    /// The counts by (session, URR), for the sessions `live` says are.
    pub fn by_urr(&self, live: impl Fn(u64) -> bool) -> Usage {
        let mut u = Usage::default();
        for c in self.cells.iter().filter(|c| c.number != 0 && live(c.seid)) {
            u.entry((c.seid, c.urr)).or_default().add(&c.volume);
        }
        u
    }

    /// Adds another core's counts (a report's merged instance): a cell of
    /// a URR gone since gives way to its index's newer one.
    pub fn add(&mut self, o: &CoreUsage) {
        if o.cells.len() > self.cells.len() {
            self.cells.resize(o.cells.len(), Cell::default());
        }
        for (c, oc) in self.cells.iter_mut().zip(&o.cells) {
            if oc.number == 0 || oc.number < c.number {
                continue;
            }
            if oc.number > c.number {
                *c = *oc;
            } else {
                c.volume.add(&oc.volume);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reused_cell_starts_from_zero() {
        use std::mem::ManuallyDrop;
        // two URRs at one index, one after the other (not given back to the
        // pool: these indices are not the pool's)
        let a = ManuallyDrop::new(Slot {
            index: 5,
            number: u64::MAX - 1,
        });
        let b = ManuallyDrop::new(Slot {
            index: 5,
            number: u64::MAX,
        });
        let mut u = CoreUsage::default();
        u.count(&a, 7, 1, true, 100);
        u.count(&a, 7, 1, false, 40);
        let v = u.by_urr(|_| true)[&(7, 1)];
        assert_eq!(
            (v.ul_bytes, v.dl_bytes, v.ul_packets, v.dl_packets),
            (100, 40, 1, 1)
        );
        let mut old = CoreUsage::default();
        old.add(&u);
        u.count(&b, 9, 2, true, 5);
        let m = u.by_urr(|_| true);
        assert_eq!(m.get(&(7, 1)), None, "the gone URR's counts went");
        let v = m[&(9, 2)];
        assert_eq!((v.ul_bytes, v.ul_packets, v.dl_packets), (5, 1, 0));
        // a report's merge: the newer URR's counts win the index, its own add
        let mut sum = CoreUsage::default();
        sum.add(&u);
        sum.add(&old);
        sum.add(&u);
        assert_eq!(sum.by_urr(|_| true).len(), 1);
        assert_eq!(sum.by_urr(|_| true)[&(9, 2)].ul_bytes, 10);
        assert!(sum.by_urr(|s| s != 9).is_empty());
    }
}

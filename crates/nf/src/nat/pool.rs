//! The NAT's external ports as an MVT split per shard (NFLOW/MVT §V), arranged so
//! that a new mapping can pick a port whose **reply tuple lands in the forward
//! flow's RSS bucket**.
//!
//! The Toeplitz hash is linear over XOR. The reply of a translated IPv4 flow has the
//! input `[server, external, server port, external port]`; everything but the
//! external port is known when the mapping is made, so the bucket the reply needs
//! fixes the low bits of the external port's contribution. [`PortPlan`] groups every
//! port by those bits once; a shard's [`PortPool`] owns every S-th port of each
//! group, so shards never share a port and never need a lock.

use std::sync::Arc;

use steer::Toeplitz;

/// Byte offset of the destination port in an IPv4 RSS input.
pub const V4_DPORT_OFFSET: usize = 10;

/// Ports grouped by the low bits of their Toeplitz contribution (shared, read-only).
#[derive(Debug)]
pub struct PortPlan {
    mask: u32,
    by_value: Vec<Vec<u16>>,
    value_of: Vec<u16>,
    lo: u16,
}

impl PortPlan {
    /// Groups ports `lo..=hi` by `contribution(dport position) & mask`.
    pub fn new(t: &Toeplitz, mask: u32, lo: u16, hi: u16) -> PortPlan {
        let mut by_value = vec![Vec::new(); mask as usize + 1];
        let mut value_of = Vec::with_capacity(usize::from(hi - lo) + 1);
        for p in lo..=hi {
            let v = t.contribution(V4_DPORT_OFFSET, &p.to_be_bytes()) & mask;
            by_value[v as usize].push(p);
            value_of.push(v as u16);
        }
        PortPlan {
            mask,
            by_value,
            value_of,
            lo,
        }
    }

    /// The bucket bits.
    pub fn mask(&self) -> u32 {
        self.mask
    }

    /// The group of a port.
    pub fn value_of(&self, port: u16) -> u32 {
        u32::from(self.value_of[usize::from(port - self.lo)])
    }

    /// The ports whose contribution has low bits `v`.
    pub fn ports(&self, v: u32) -> &[u16] {
        &self.by_value[v as usize]
    }

    /// True for a port of the plan's range.
    pub fn covers(&self, port: u16) -> bool {
        port >= self.lo && usize::from(port - self.lo) < self.value_of.len()
    }
}

/// One (address, class, group) slot of a shard's pool.
#[derive(Debug)]
struct Slot {
    /// Index of the next never-used port among the group's ports.
    cursor: u32,
    /// Returned ports.
    free: Vec<u16>,
}

/// Transport class of a port space (TCP and UDP ports are separate resources).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum PortClass {
    /// TCP ports.
    Tcp = 0,
    /// UDP ports.
    Udp = 1,
}

/// One shard's share of the pool: every `shards`-th port of each group, per
/// external address and class, handed out lazily (a cursor) and recycled (a
/// stack). Only the (address, class, group) slots a flow has used take memory:
/// a /24 pool over 4 096 groups would otherwise cost tens of MB per shard.
#[derive(Debug)]
pub struct PortPool {
    plan: Arc<PortPlan>,
    shard: u32,
    shards: u32,
    groups: usize,
    /// (address, class, group) slot → its cursor into the group's ports and its
    /// returned ports.
    slots: rustc_hash::FxHashMap<u32, Slot>,
    icmp_cursor: Vec<u32>,
    icmp_free: Vec<Vec<u16>>,
    in_use: u64,
}

impl PortPool {
    /// Shard `shard` of `shards`, for `addrs` external addresses.
    pub fn new(plan: Arc<PortPlan>, shard: usize, shards: usize, addrs: usize) -> PortPool {
        let groups = plan.mask as usize + 1;
        PortPool {
            slots: rustc_hash::FxHashMap::default(),
            icmp_cursor: vec![shard as u32; addrs],
            icmp_free: vec![Vec::new(); addrs],
            plan,
            shard: shard as u32,
            shards: shards as u32,
            groups,
            in_use: 0,
        }
    }

    fn slot(&self, addr: usize, class: PortClass, v: u32) -> u32 {
        ((addr * 2 + class as usize) * self.groups + v as usize) as u32
    }

    /// A free port of group `v` for external address `addr`.
    pub fn alloc(&mut self, addr: usize, class: PortClass, v: u32) -> Option<u16> {
        let i = self.slot(addr, class, v);
        let shard = self.shard;
        let slot = self.slots.entry(i).or_insert_with(|| Slot {
            cursor: shard,
            free: Vec::new(),
        });
        let p = match slot.free.pop() {
            Some(p) => p,
            None => {
                let p = *self.plan.ports(v).get(slot.cursor as usize)?;
                slot.cursor += self.shards;
                p
            }
        };
        self.in_use += 1;
        Some(p)
    }

    /// Returns a port.
    pub fn free(&mut self, addr: usize, class: PortClass, port: u16) {
        let v = self.plan.value_of(port);
        let i = self.slot(addr, class, v);
        let slot = self.slots.entry(i).or_insert_with(|| Slot {
            cursor: self.shard,
            free: Vec::new(),
        });
        slot.free.push(port);
        self.in_use = self.in_use.saturating_sub(1);
    }

    /// Takes `port` of `addr` for a mapping made elsewhere (installed from
    /// another node that held this pool's address): it is handed out no more
    /// until freed. False, and nothing taken, when the port is not this
    /// shard's or is in use already.
    pub fn reserve(&mut self, addr: usize, class: PortClass, port: u16) -> bool {
        if !self.plan.covers(port) {
            return false;
        }
        let v = self.plan.value_of(port);
        let Some(at) = self.plan.ports(v).iter().position(|&p| p == port) else {
            return false;
        };
        let at = at as u32;
        if at % self.shards != self.shard {
            return false;
        }
        let i = self.slot(addr, class, v);
        let (shard, shards) = (self.shard, self.shards);
        let slot = self.slots.entry(i).or_insert_with(|| Slot {
            cursor: shard,
            free: Vec::new(),
        });
        if at >= slot.cursor {
            // the ports the cursor skips are free
            let ports = self.plan.ports(v);
            slot.free.extend(
                (slot.cursor..at)
                    .step_by(shards as usize)
                    .map(|k| ports[k as usize]),
            );
            slot.cursor = at + shards;
        } else if let Some(k) = slot.free.iter().position(|&p| p == port) {
            slot.free.swap_remove(k);
        } else {
            return false;
        }
        self.in_use += 1;
        true
    }

    /// [`reserve`](Self::reserve) for an ICMP echo id.
    pub fn reserve_icmp(&mut self, addr: usize, id: u16) -> bool {
        let id32 = u32::from(id);
        if id32 % self.shards != self.shard {
            return false;
        }
        let c = self.icmp_cursor[addr];
        if id32 >= c {
            self.icmp_free[addr].extend((c..id32).step_by(self.shards as usize).map(|k| k as u16));
            self.icmp_cursor[addr] = id32 + self.shards;
        } else if let Some(k) = self.icmp_free[addr].iter().position(|&p| p == id) {
            self.icmp_free[addr].swap_remove(k);
        } else {
            return false;
        }
        self.in_use += 1;
        true
    }

    /// A free ICMP echo id for `addr` (ids ≡ shard mod shards; they do not enter the
    /// hash, so any will do).
    pub fn alloc_icmp(&mut self, addr: usize) -> Option<u16> {
        let id = match self.icmp_free[addr].pop() {
            Some(id) => id,
            None => {
                let c = self.icmp_cursor[addr];
                if c > u32::from(u16::MAX) {
                    return None;
                }
                self.icmp_cursor[addr] += self.shards;
                c as u16
            }
        };
        self.in_use += 1;
        Some(id)
    }

    /// Returns an ICMP id.
    pub fn free_icmp(&mut self, addr: usize, id: u16) {
        self.icmp_free[addr].push(id);
        self.in_use = self.in_use.saturating_sub(1);
    }

    /// Ports and ids handed out and not yet returned.
    pub fn in_use(&self) -> u64 {
        self.in_use
    }

    /// The shard this pool belongs to.
    pub fn shard(&self) -> u32 {
        self.shard
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use steer::RssKey;

    #[test]
    fn groups_cover_every_port_once_and_shards_are_disjoint() {
        let t = Toeplitz::new(RssKey::SYMMETRIC);
        let plan = Arc::new(PortPlan::new(&t, 127, 1024, 65535));
        let total: usize = (0..128).map(|v| plan.ports(v).len()).sum();
        assert_eq!(total, 65535 - 1024 + 1);
        // the 7 low bits of a 16-bit field's contribution have full rank: even groups
        assert!(
            (0..128).all(|v| plan.ports(v).len() >= 500),
            "groups are balanced"
        );
        let mut seen = std::collections::HashSet::new();
        for s in 0..4 {
            let mut pool = PortPool::new(plan.clone(), s, 4, 1);
            while let Some(p) = pool.alloc(0, PortClass::Tcp, 5) {
                assert_eq!(plan.value_of(p), 5);
                assert!(seen.insert(p), "port {p} given to two shards");
            }
        }
        assert_eq!(seen.len(), plan.ports(5).len());
    }

    #[test]
    fn a_pool_takes_memory_only_for_the_slots_it_used() {
        // a /24 over 4 096 groups: 2 M (address, class, group) slots per shard
        let t = Toeplitz::new(RssKey::SYMMETRIC);
        let plan = Arc::new(PortPlan::new(&t, 4095, 1024, 65535));
        let mut pool = PortPool::new(plan.clone(), 3, 1024, 256);
        assert_eq!(pool.slots.len(), 0);
        let mut got = Vec::new();
        for v in [7u32, 7, 4000] {
            if let Some(p) = pool.alloc(200, PortClass::Tcp, v) {
                assert_eq!(plan.value_of(p), v);
                got.push((v, p));
            }
        }
        assert!(pool.slots.len() <= 2, "{} slots", pool.slots.len());
        for (_, p) in &got {
            pool.free(200, PortClass::Tcp, *p);
        }
        assert_eq!(pool.in_use(), 0);
        // a returned port is handed out again
        if let Some((v, p)) = got.first() {
            assert_eq!(pool.alloc(200, PortClass::Tcp, *v), Some(*p));
        }
    }

    #[test]
    fn a_reserved_port_is_not_handed_out_until_freed() {
        let t = Toeplitz::new(RssKey::SYMMETRIC);
        let plan = Arc::new(PortPlan::new(&t, 127, 1024, 65535));
        // what another node's shard 1 of 2 handed out: its first ten ports
        let mut theirs = PortPool::new(plan.clone(), 1, 2, 1);
        let taken: Vec<u16> = (0..10)
            .map(|_| theirs.alloc(0, PortClass::Tcp, 9).unwrap())
            .collect();
        // installed here, some out of order; one of them twice
        let mut ours = PortPool::new(plan.clone(), 1, 2, 1);
        for &p in [taken[6], taken[2], taken[9], taken[0]].iter() {
            assert!(ours.reserve(0, PortClass::Tcp, p));
        }
        assert!(!ours.reserve(0, PortClass::Tcp, taken[6]), "in use");
        // not this shard's, or outside the plan
        let other = plan.ports(9)[0];
        assert!(!ours.reserve(0, PortClass::Tcp, other));
        assert!(!ours.reserve(0, PortClass::Tcp, 80));
        assert_eq!(ours.in_use(), 4);
        let fresh: Vec<u16> = (0..20)
            .map(|_| ours.alloc(0, PortClass::Tcp, 9).unwrap())
            .collect();
        for p in [taken[6], taken[2], taken[9], taken[0]] {
            assert!(!fresh.contains(&p), "port {p} handed out while reserved");
        }
        // the skipped ones were handed out, each once
        let mut f = fresh.clone();
        f.sort_unstable();
        f.dedup();
        assert_eq!(f.len(), 20);
        assert!(fresh.contains(&taken[1]) && fresh.contains(&taken[8]));
        ours.free(0, PortClass::Tcp, taken[2]);
        assert!(ours.reserve(0, PortClass::Tcp, taken[2]), "free again");
        // ICMP ids the same way
        assert!(ours.reserve_icmp(0, 7));
        assert!(!ours.reserve_icmp(0, 7));
        assert!(!ours.reserve_icmp(0, 8), "shard 0's id");
        let ids: Vec<u16> = (0..4).map(|_| ours.alloc_icmp(0).unwrap()).collect();
        assert!(!ids.contains(&7), "{ids:?}");
    }
}

//! The NAT's external ports as an MVT split per shard (NFLOW/MVT §V), arranged so
//! that a new mapping can pick a port whose **reply tuple lands in the forward
//! flow's RSS bucket**.
//!
//! The Toeplitz hash is linear over XOR. The reply of a translated IPv4 flow has the
//! input `[server, external, server port, external port]`; everything but the
//! external port is known when the mapping is made, so the bucket the reply needs
//! fixes the low bits of the external port's contribution. [`PortPlan`] groups every
//! port by those bits once; a shard's [`PortPool`] owns every S-th port of each
//! group (shifted by address, so that groups smaller than S are shared out over
//! the addresses), so shards never share a port and never need a lock.

use std::collections::VecDeque;
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
    /// Where each shard's pool starts handing out ports ([`PortPool`]).
    salt: u64,
}

/// The salt of the port plans made from now on ([`set_port_salt`]).
static SALT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Where the port pools of the chains built from now on start handing out
/// ports: a process that runs a NAT for real draws a random salt first, so
/// that a restarted NAT does not hand out the ports (and tuples) it handed
/// out before, which servers may still hold in TIME_WAIT. 0 (the default)
/// keeps runs repeatable.
pub fn set_port_salt(salt: u64) {
    // a setting read when chains are built, publishing nothing else
    SALT.store(salt, std::sync::atomic::Ordering::Relaxed);
}

fn process_salt() -> u64 {
    // see `set_port_salt`
    SALT.load(std::sync::atomic::Ordering::Relaxed)
}

impl PortPlan {
    /// Groups ports `lo..=hi` by `contribution(dport position) & mask`; pools
    /// start where the salt set last says ([`set_port_salt`]).
    pub fn new(t: &Toeplitz, mask: u32, lo: u16, hi: u16) -> PortPlan {
        PortPlan::salted(t, mask, lo, hi, process_salt())
    }

    /// The plan of ports `lo..=hi` for a chain's steering (its hasher and
    /// bucket mask), shared by every shard's pool.
    pub fn bound(hasher: &steer::RssHasher, mask: u32, (lo, hi): (u16, u16)) -> Arc<PortPlan> {
        Arc::new(PortPlan::new(hasher.toeplitz(), mask, lo, hi))
    }

    /// [`new`](Self::new) with pools starting where `salt` says.
    pub fn salted(t: &Toeplitz, mask: u32, lo: u16, hi: u16, salt: u64) -> PortPlan {
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
            salt,
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

/// One shard's share of a sequence of values (a group's ports, or the
/// ICMP ids), by their places: places `shard`, `shard + shards`, … below
/// `len` are this shard's, `count` of them. They are handed out starting at
/// a random one (`offset`, from the run's salt: a restarted NAT does not hand
/// out the ports it handed out before, which a server may still hold in
/// TIME_WAIT) and going round, never-used ones first; a returned one goes to
/// the back of the queue, so a port is reused as late as possible.
#[derive(Debug)]
struct Lane {
    count: u32,
    offset: u32,
    /// Never-used places handed out so far (in `0..=count`).
    cursor: u32,
    /// Returned values, oldest first.
    free: VecDeque<u16>,
}

impl Lane {
    fn new(len: usize, shard: u32, shards: u32, salt: u64) -> Lane {
        let len = len as u32;
        let count = if len > shard {
            (len - shard).div_ceil(shards)
        } else {
            0
        };
        let offset = if count == 0 {
            0
        } else {
            (salt % u64::from(count)) as u32
        };
        Lane {
            count,
            offset,
            cursor: 0,
            free: VecDeque::new(),
        }
    }

    /// The place (in the whole sequence) of the `k`-th value handed out.
    fn place(&self, k: u32, shard: u32, shards: u32) -> usize {
        (shard + ((k + self.offset) % self.count) * shards) as usize
    }

    /// The next value: a never-used one, else the oldest returned one.
    fn take(&mut self, shard: u32, shards: u32, value: impl Fn(usize) -> u16) -> Option<u16> {
        if self.cursor < self.count {
            let v = value(self.place(self.cursor, shard, shards));
            self.cursor += 1;
            return Some(v);
        }
        self.free.pop_front()
    }

    /// Takes the value at `place` (this shard's: `place % shards == shard`)
    /// for a mapping made elsewhere; false if it is in use here.
    fn reserve(
        &mut self,
        place: usize,
        shard: u32,
        shards: u32,
        value: impl Fn(usize) -> u16,
    ) -> bool {
        let j = (place as u32 - shard) / shards;
        let k = (j + self.count - self.offset) % self.count;
        if k >= self.cursor {
            // the places the cursor skips are free
            for i in self.cursor..k {
                let v = value(self.place(i, shard, shards));
                self.free.push_back(v);
            }
            self.cursor = k + 1;
            return true;
        }
        let v = value(place);
        match self.free.iter().position(|&p| p == v) {
            Some(i) => {
                self.free.remove(i);
                true
            }
            None => false,
        }
    }
}

/// A value mixed with the run's salt: each lane's random start.
fn mix(salt: u64, lane: u64) -> u64 {
    let mut x = salt ^ lane.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    x ^= x >> 31;
    x = x.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x ^ (x >> 29)
}

/// Transport class of a port space (TCP and UDP ports are separate resources).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum PortClass {
    /// TCP ports.
    Tcp = 0,
    /// UDP ports.
    Udp = 1,
}

/// One shard's share of the pool: every `shards`-th port of each group (from
/// a place that shifts with the address, [`PortPool::residue`]), per
/// external address and class, handed out lazily from a random start and
/// recycled as late as possible ([`Lane`]). Only the (address, class, group)
/// lanes a flow has used take memory: a /24 pool over 4 096 groups would
/// otherwise cost tens of MB per shard.
#[derive(Debug)]
pub struct PortPool {
    plan: Arc<PortPlan>,
    shard: u32,
    shards: u32,
    groups: usize,
    /// The run's salt: where each lane starts.
    salt: u64,
    /// (address, class, group) lane → its ports handed out and returned.
    slots: rustc_hash::FxHashMap<u32, Lane>,
    /// Per address, its ICMP echo ids.
    icmp: Vec<Lane>,
    in_use: u64,
    /// The endpoint-independent mappings holding ports of this pool.
    pub endpoints: super::endpoints::Endpoints,
}

/// ICMP echo ids: every value of 16 bits.
const ICMP_IDS: usize = 1 << 16;

impl PortPool {
    /// Shard `shard` of `shards`, for `addrs` external addresses; the plan's
    /// salt places where each address's ports and ids start.
    pub fn new(plan: Arc<PortPlan>, shard: usize, shards: usize, addrs: usize) -> PortPool {
        let groups = plan.mask as usize + 1;
        let salt = plan.salt;
        let (sh, n) = (shard as u32, shards as u32);
        PortPool {
            slots: rustc_hash::FxHashMap::default(),
            icmp: (0..addrs)
                .map(|a| Lane::new(ICMP_IDS, sh, n, mix(salt, u64::MAX - a as u64)))
                .collect(),
            plan,
            shard: sh,
            shards: n,
            groups,
            salt,
            in_use: 0,
            endpoints: Default::default(),
        }
    }

    fn slot(&self, addr: usize, class: PortClass, v: u32) -> u32 {
        ((addr * 2 + class as usize) * self.groups + v as usize) as u32
    }

    /// Which places of a group of `len` ports this shard owns at address
    /// `addr`: those ≡ the returned residue (mod shards). Each address's
    /// group is cut into runs of `shards` places, and each address shifts
    /// the owners by `len`, so when a group has fewer ports than there are
    /// shards the addresses tile them: address 0's ports go to shards
    /// 0…len − 1, address 1's to len…2·len − 1, and so on, and every shard
    /// gets a port of every group once ports × addresses ≥ shards (without
    /// the shift the same last shards would own no port at any address).
    fn residue(&self, addr: usize, len: usize) -> u32 {
        let n = u64::from(self.shards);
        let shift = (addr as u64 * len as u64) % n;
        ((u64::from(self.shard) + n - shift) % n) as u32
    }

    /// The lane of (address, class, group `v`), made when first used, and
    /// this shard's residue in it.
    fn lane(&mut self, addr: usize, class: PortClass, v: u32) -> (u32, &mut Lane) {
        let i = self.slot(addr, class, v);
        let (shards, salt) = (self.shards, self.salt);
        let len = self.plan.ports(v).len();
        let r = self.residue(addr, len);
        let lane = self
            .slots
            .entry(i)
            .or_insert_with(|| Lane::new(len, r, shards, mix(salt, u64::from(i))));
        (r, lane)
    }

    /// Address `addr`'s ICMP ids (made for addresses added by a reload).
    fn icmp_lane(&mut self, addr: usize) -> &mut Lane {
        while self.icmp.len() <= addr {
            let a = self.icmp.len();
            let lane = Lane::new(
                ICMP_IDS,
                self.shard,
                self.shards,
                mix(self.salt, u64::MAX - a as u64),
            );
            self.icmp.push(lane);
        }
        &mut self.icmp[addr]
    }

    /// A free port of group `v` for external address `addr`.
    pub fn alloc(&mut self, addr: usize, class: PortClass, v: u32) -> Option<u16> {
        let shards = self.shards;
        let plan = self.plan.clone();
        let ports = plan.ports(v);
        let (r, lane) = self.lane(addr, class, v);
        let p = lane.take(r, shards, |k| ports[k])?;
        self.in_use += 1;
        Some(p)
    }

    /// Returns a port.
    pub fn free(&mut self, addr: usize, class: PortClass, port: u16) {
        let v = self.plan.value_of(port);
        self.lane(addr, class, v).1.free.push_back(port);
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
        let plan = self.plan.clone();
        let ports = plan.ports(v);
        let Some(at) = ports.iter().position(|&p| p == port) else {
            return false;
        };
        let shards = self.shards;
        if at as u32 % shards != self.residue(addr, ports.len()) {
            return false;
        }
        let (r, lane) = self.lane(addr, class, v);
        let ok = lane.reserve(at, r, shards, |k| ports[k]);
        self.in_use += u64::from(ok);
        ok
    }

    /// [`reserve`](Self::reserve) for an ICMP echo id.
    pub fn reserve_icmp(&mut self, addr: usize, id: u16) -> bool {
        let (shard, shards) = (self.shard, self.shards);
        if u32::from(id) % shards != shard {
            return false;
        }
        let ok = self
            .icmp_lane(addr)
            .reserve(usize::from(id), shard, shards, |k| k as u16);
        self.in_use += u64::from(ok);
        ok
    }

    /// A free ICMP echo id for `addr` (ids ≡ shard mod shards; they do not enter the
    /// hash, so any will do).
    pub fn alloc_icmp(&mut self, addr: usize) -> Option<u16> {
        let (shard, shards) = (self.shard, self.shards);
        let id = self.icmp_lane(addr).take(shard, shards, |k| k as u16)?;
        self.in_use += 1;
        Some(id)
    }

    /// Returns an ICMP id.
    pub fn free_icmp(&mut self, addr: usize, id: u16) {
        self.icmp_lane(addr).free.push_back(id);
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

    /// 256 shards over groups of ≈ 252 ports (a full port range over 256
    /// buckets): the last shards own no place of any group, so without the
    /// per-address shift they had no port at all; with it, over 256
    /// addresses every shard has ports of every group, and no port of an
    /// address goes to two shards.
    #[test]
    fn groups_smaller_than_the_shards_are_tiled_over_the_addresses() {
        let t = Toeplitz::new(RssKey::SYMMETRIC);
        let plan = Arc::new(PortPlan::new(&t, 255, 1024, 65535));
        assert!((0..256).all(|v| plan.ports(v).len() < 256));
        let (shards, addrs) = (256usize, 256usize);
        for v in [0u32, 77, 255] {
            let mut owner = std::collections::HashMap::new();
            for s in 0..shards {
                let mut pool = PortPool::new(plan.clone(), s, shards, addrs);
                let mut got = 0;
                for a in 0..addrs {
                    while let Some(p) = pool.alloc(a, PortClass::Tcp, v) {
                        assert_eq!(owner.insert((a, p), s), None, "{a}:{p} twice");
                        got += 1;
                    }
                }
                assert!(got >= 240, "shard {s} got {got} ports of group {v}");
            }
            assert_eq!(owner.len(), addrs * plan.ports(v).len());
        }
        // a mapping made elsewhere lands in the shard that owns its port
        let p = plan.ports(3)[10];
        let owners: Vec<usize> = (0..shards)
            .filter(|&s| {
                PortPool::new(plan.clone(), s, shards, addrs).reserve(5, PortClass::Tcp, p)
            })
            .collect();
        assert_eq!(owners.len(), 1, "{owners:?}");
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

    /// A pool starts where its plan's salt says: two salts, two starts (a
    /// restarted NAT hands out other ports); one salt, the same ports.
    #[test]
    fn the_salt_decides_where_a_pool_starts() {
        let t = Toeplitz::new(RssKey::SYMMETRIC);
        let first = |salt: u64| {
            let plan = Arc::new(PortPlan::salted(&t, 127, 1024, 65535, salt));
            let mut pool = PortPool::new(plan, 2, 4, 1);
            let ports: Vec<u16> = (0..4)
                .map(|_| pool.alloc(0, PortClass::Tcp, 9).unwrap())
                .collect();
            (ports, pool.alloc_icmp(0).unwrap())
        };
        assert_eq!(first(7), first(7));
        let starts: std::collections::HashSet<_> = (0..20u64)
            .map(|s| first(s.wrapping_mul(0x2545_f491_4f6c_dd1d)))
            .collect();
        assert!(
            starts.len() >= 18,
            "{} different starts of 20",
            starts.len()
        );
    }

    /// A returned port goes to the back of the queue: every never-used
    /// port comes first, then returned ones in the order they came back.
    #[test]
    fn a_returned_port_is_reused_as_late_as_possible() {
        let t = Toeplitz::new(RssKey::SYMMETRIC);
        let plan = Arc::new(PortPlan::salted(&t, 127, 1024, 65535, 99));
        let mut pool = PortPool::new(plan.clone(), 0, 4, 1);
        let a = pool.alloc(0, PortClass::Udp, 3).unwrap();
        let b = pool.alloc(0, PortClass::Udp, 3).unwrap();
        pool.free(0, PortClass::Udp, b);
        pool.free(0, PortClass::Udp, a);
        let share = plan.ports(3).iter().step_by(4).count();
        let next: Vec<u16> = std::iter::from_fn(|| pool.alloc(0, PortClass::Udp, 3)).collect();
        assert_eq!(next.len(), share);
        assert!(!next[..share - 2].contains(&a) && !next[..share - 2].contains(&b));
        assert_eq!(next[share - 2..], [b, a]);
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
        let fresh: Vec<u16> = std::iter::from_fn(|| ours.alloc(0, PortClass::Tcp, 9)).collect();
        for p in [taken[6], taken[2], taken[9], taken[0]] {
            assert!(!fresh.contains(&p), "port {p} handed out while reserved");
        }
        // every other port of the shard's share was handed out, each once
        // (the skipped ones among them)
        let mut f = fresh.clone();
        f.sort_unstable();
        f.dedup();
        assert_eq!(f.len(), fresh.len());
        let share = plan.ports(9).iter().skip(1).step_by(2).count();
        assert_eq!(fresh.len(), share - 4);
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

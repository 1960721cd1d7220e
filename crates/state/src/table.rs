//! The per-shard flow table: an open-addressing index over the RSS hash (linear
//! probing, backward-shift deletion; it grows with the keys: [`index`]), entries in a slab, one slot per
//! NF stored flat (`slots[entry * n + nf]`, each beside its deadline), on a lazy timer
//! wheel, and a capacity cap with an eviction policy.

use std::collections::VecDeque;

mod image;
mod index;
pub use image::Image;

use index::{Index, EMPTY, MOVED};

use crate::prefetch::prefetch;
use crate::{Dir, FlowKey, Side, TimerWheel};

/// What an NF keeps in its slot of a flow entry.
pub trait Slot: Default {
    /// True when the NF keeps no state for this flow.
    fn is_empty(&self) -> bool;
}

impl<T> Slot for Option<T> {
    fn is_empty(&self) -> bool {
        self.is_none()
    }
}

/// A reference to a flow entry, valid until the entry is freed. This is what a
/// packet carries in its metadata after the single lookup.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EntryId(pub u32);

/// What to do when the table is full.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Default)]
pub enum CapPolicy {
    /// Refuse new flows (counted); existing flows are never touched.
    #[default]
    Refuse,
    /// Evict the oldest flow that is not assured (has not seen both directions);
    /// when every flow is assured, refuse. A SYN flood only evicts SYN-only flows.
    EvictUnassured,
}

/// What the index is keyed by.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Default)]
pub enum IndexHash {
    /// The RSS hash the NIC model computed (no hashing in software). Right when the
    /// RSS hash has full entropy (an asymmetric key).
    Rss,
    /// A software hash of the flow key. Needed with a symmetric RSS key, whose hash
    /// carries only 16 bits of entropy (see `steer`'s tests): 1 M flows would share
    /// 65 536 values and probe sequences would grow long.
    #[default]
    Key,
}

/// Table parameters.
#[derive(Clone, Debug, PartialEq)]
pub struct TableConfig {
    /// Maximum number of flow entries.
    pub capacity: usize,
    /// Slots per entry (the chain length).
    pub slots: usize,
    /// 2 when some NF adds an alias key per entry (NAT), else 1; sizes the index.
    pub keys_per_entry: usize,
    /// Full-table policy.
    pub policy: CapPolicy,
    /// Timer resolution.
    pub tick_ns: u64,
    /// Timer wheel slots.
    pub wheel_slots: usize,
    /// What the index is keyed by.
    pub index: IndexHash,
    /// `EvictUnassured` evicts only unassured flows at least this old (by the
    /// time of [`note_time`](FlowTable::note_time)): a younger one may have its
    /// answer on the way, so the new flow is refused instead.
    pub evict_min_age_ns: u64,
    /// Allocate the index for `capacity` at once; otherwise it starts at a
    /// few buckets and doubles as keys arrive.
    pub preallocate: bool,
    /// Indexes of their own for this many NFs (a per-NF layout: each NF
    /// after the first finds the flow through its own index, as NFs that
    /// keep their own tables do; [`FlowTable::lookup_own`]). 0 = one index.
    pub own_indexes: usize,
}

impl Default for TableConfig {
    fn default() -> Self {
        TableConfig {
            capacity: 1 << 16,
            slots: 1,
            keys_per_entry: 1,
            policy: CapPolicy::Refuse,
            tick_ns: 10_000_000,
            wheel_slots: 4096,
            index: IndexHash::Key,
            evict_min_age_ns: 0,
            preallocate: false,
            own_indexes: 0,
        }
    }
}

/// Why an insert failed.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum InsertError {
    /// The table is at its capacity and the policy found nothing to evict.
    TableFull,
}

/// Result of a successful lookup.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Lookup {
    /// The entry.
    pub id: EntryId,
    /// The packet's direction relative to the entry.
    pub dir: Dir,
    /// The entry's generation: a freed and reused id has another one.
    pub gen: u32,
}

/// Counters of a table.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TableStats {
    /// Entries created.
    pub inserted: u64,
    /// Entries freed (all slots empty, expired or evicted).
    pub removed: u64,
    /// Slots released by their deadline.
    pub expired_slots: u64,
    /// Entries evicted to make room.
    pub evicted: u64,
    /// New flows refused because the table was full.
    pub refused: u64,
    /// Largest number of live entries seen.
    pub max_len: u64,
    /// Entries detached for an offloading core.
    pub detached: u64,
    /// Times the index doubled (it starts small and grows with the live
    /// flows, up to the size `capacity` needs).
    pub index_grown: u64,
    /// Lookups through the per-NF layout's own indexes.
    pub own_lookups: u64,
}

/// Index buckets of a new table (it doubles from there as keys arrive).
const FIRST_INDEX: usize = 64;
const ALIAS_BIT: u64 = 1 << 31;
const ID_MASK: u64 = ALIAS_BIT - 1;
const NO_TICK: u64 = u64::MAX;

/// A slot and its deadline (absolute ns, 0 = none), side by side.
#[derive(Clone, Debug, Default)]
struct Cell<S> {
    state: S,
    deadline: u64,
}

impl<S> Cell<S> {
    /// The slot and its deadline, for [`SlotMut::set_deadline`].
    #[inline(always)]
    fn as_slot(&mut self) -> SlotMut<'_, S> {
        SlotMut {
            state: &mut self.state,
            deadline: &mut self.deadline,
        }
    }
}

/// Entry metadata: exactly one cache line, so a lookup touches one line per entry.
#[derive(Clone, Debug)]
#[repr(align(64))]
struct Meta {
    key: FlowKey,
    hash: u32,
    gen: u32,
    wheel_tick: u64,
    orig: Side,
    alias_side: Side,
    assured: bool,
    live: bool,
    has_alias: bool,
    alias_owner: u16,
    /// Detached (its slots are with an offloading core): never freed, expired or
    /// evicted until attached again.
    pinned: bool,
}

/// The slots and deadlines of an entry taken out of its table
/// ([`FlowTable::detach`]) so that another core can work on them; the entry stays in
/// the table, pinned, until [`FlowTable::attach`] puts them back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Detached<S> {
    /// One slot per NF.
    pub slots: Vec<S>,
    /// Each slot's idle deadline (absolute ns, 0 = none).
    pub deadlines: Vec<u64>,
    /// Whether the flow had seen both directions when detached (kept up to date by
    /// whoever processes it meanwhile).
    pub assured: bool,
    /// The flow's exit order ([`FlowTable::exit_in_order`]), kept by whoever
    /// forwards its packets meanwhile ([`Detached::exit_in_order`]).
    pub exits: Exits,
}

/// A flow's exit order: per direction, the arrival stamp of the last packet
/// that left (0: none yet). The NIC model stamps packets with strictly
/// increasing times, so a packet whose stamp is below its direction's last
/// one left after a packet that arrived after it: it was reordered.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Exits {
    last: [u64; 2],
}

/// The unit of an entry's birth time ([`FlowTable::born`]): 2²⁶ ns (67 ms),
/// so that 32 bits hold 9 years of a table's time.
const BORN_UNIT_SHIFT: u32 = 26;

impl Exits {
    /// Notes that a packet of direction `dir` stamped `stamp` left; false if
    /// a packet that arrived after it left before it.
    #[inline]
    pub fn note(&mut self, dir: Dir, stamp: u64) -> bool {
        let last = &mut self.last[dir as usize];
        if stamp < *last {
            return false;
        }
        *last = stamp;
        true
    }
}

impl<S> Detached<S> {
    /// [`FlowTable::exit_in_order`] for a flow whose slots are detached.
    #[inline]
    pub fn exit_in_order(&mut self, dir: Dir, stamp: u64) -> bool {
        self.exits.note(dir, stamp)
    }
}

/// A slot of a flow entry and its deadline, borrowed with the slots of the
/// entry's next NFs ([`FlowTable::slots_at`]): for a chain that runs several
/// NFs on a packet in one pass.
pub struct SlotMut<'a, S> {
    /// The slot.
    pub state: &'a mut S,
    deadline: &'a mut u64,
}

/// A slot's deadline that moved earlier: the entry's timer is re-armed
/// ([`FlowTable::rearm`]) once the slots are given back.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Rearm(u64);

impl<S> SlotMut<'_, S> {
    /// Sets the slot's idle deadline (absolute ns) as
    /// [`FlowTable::set_deadline_at`] does: a deadline moving later is the
    /// store alone; an earlier one must then be given to
    /// [`FlowTable::rearm`].
    #[inline(always)]
    #[must_use = "a deadline that moved earlier re-arms the entry's timer"]
    pub fn set_deadline(&mut self, at_ns: u64) -> Option<Rearm> {
        // (a deadline of 0, none, is never earlier: 0 − 1 wraps to the largest)
        let later = self.deadline.wrapping_sub(1) < at_ns;
        *self.deadline = at_ns;
        (!later).then_some(Rearm(at_ns))
    }
}

/// A flow table over slots of type `S`. See the module documentation.
pub struct FlowTable<S> {
    cfg: TableConfig,
    meta: Vec<Meta>,
    /// Per entry, its alias key (tables of two keys per entry).
    aliases: Vec<FlowKey>,
    /// Per entry, its alias key's RSS hash, kept only where the index is
    /// keyed by it ([`IndexHash::Rss`]; a key-hashed index computes it).
    alias_rss: Vec<u32>,
    slots: Vec<Cell<S>>,
    /// Per entry, its exit order (apart from `meta`, which fills a cache
    /// line: only a packet's exit reads it).
    exits: Vec<Exits>,
    /// Per entry, when it was made, in units of 2^[`BORN_UNIT_SHIFT`] ns
    /// (beside `exits`, for operators only: 4 bytes a flow, not 8).
    born: Vec<u32>,
    index: Index,
    /// The per-NF layout's own indexes ([`TableConfig::own_indexes`]): the
    /// same keys as `index`, in memory of their own.
    own: Vec<Index>,
    free: Vec<u32>,
    len: usize,
    /// Unassured entries in insertion order: (id, generation, inserted at ns).
    unassured: VecDeque<(u32, u32, u64)>,
    /// The time the owner last gave ([`note_time`](Self::note_time)).
    now_ns: u64,
    wheel: TimerWheel<(u32, u32)>,
    due: Vec<(u64, (u32, u32))>,
    stats: TableStats,
}

/// Where a key's lookup in one table starts ([`FlowTable::probe`]): its
/// index hash and home bucket, for the stages of a pipelined lookup.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct Probe {
    ih: u32,
    home: usize,
}

/// An empty vector with room for `n` items, or none when the system refuses.
fn room<T>(n: usize) -> Vec<T> {
    let mut v = Vec::new();
    let _ = v.try_reserve_exact(n);
    v
}

#[inline]
fn pack(hash: u32, id: u32, alias: bool) -> u64 {
    (u64::from(hash) << 32) | u64::from(id) | if alias { ALIAS_BIT } else { 0 }
}

impl<S: Slot> FlowTable<S> {
    /// Bytes a table of `cfg` takes when full: its index (at its largest) and
    /// `capacity` entries (metadata, slots, alias key, timer-wheel item, free-list
    /// and eviction-queue places; the slab's room is reserved at once, its
    /// pages backed by memory as flows arrive). State an NF keeps
    /// on the heap behind its slot is not counted.
    pub fn bytes_at_capacity(cfg: &TableConfig) -> u64 {
        let keys = cfg.keys_per_entry.clamp(1, 2);
        let index = (cfg.capacity * keys * 2).next_power_of_two().max(16) as u64 * 8;
        let alias = if keys > 1 {
            std::mem::size_of::<FlowKey>() + if cfg.index == IndexHash::Rss { 4 } else { 0 }
        } else {
            0
        };
        let queue = match cfg.policy {
            CapPolicy::EvictUnassured => 4 * std::mem::size_of::<(u32, u32, u64)>(),
            CapPolicy::Refuse => 0,
        };
        let entry = std::mem::size_of::<Meta>()
            + std::mem::size_of::<Exits>()
            + std::mem::size_of::<u32>()
            + cfg.slots * std::mem::size_of::<Cell<S>>()
            + alias
            // up to 3 wheel items per entry before stale ones are dropped
            + 3 * std::mem::size_of::<(u64, (u32, u32))>()
            + std::mem::size_of::<u32>()
            + queue;
        let wheel = cfg.wheel_slots.max(1).next_power_of_two() as u64 * 24;
        index * (1 + cfg.own_indexes as u64) + cfg.capacity as u64 * entry as u64 + wheel
    }

    /// An empty table.
    pub fn new(cfg: TableConfig) -> FlowTable<S> {
        assert!(
            cfg.capacity > 0 && (cfg.capacity as u64) < ID_MASK,
            "capacity out of range"
        );
        let keys = cfg.keys_per_entry.clamp(1, 2);
        // load factor ≤ 1/2 with every key present; the index starts small
        // and doubles as keys arrive, unless preallocated
        let max_index = (cfg.capacity * keys * 2).next_power_of_two().max(16);
        let first = if cfg.preallocate {
            max_index
        } else {
            FIRST_INDEX
        };
        // the slab's room for `capacity` entries is reserved now: address
        // space only (the kernel backs a page when an entry first touches
        // it), and no packet waits while a grown slab is copied; room the
        // system refuses is grown into as flows arrive instead
        let alias_room = if keys > 1 { cfg.capacity } else { 0 };
        FlowTable {
            wheel: TimerWheel::new(cfg.wheel_slots, cfg.tick_ns, 0),
            meta: room(cfg.capacity),
            aliases: room(alias_room),
            alias_rss: room(if cfg.index == IndexHash::Rss {
                alias_room
            } else {
                0
            }),
            slots: room(cfg.capacity.saturating_mul(cfg.slots)),
            exits: room(cfg.capacity),
            born: room(cfg.capacity),
            index: Index::new(first, max_index),
            own: (0..cfg.own_indexes)
                .map(|_| Index::new(first, max_index))
                .collect(),
            free: Vec::new(),
            len: 0,
            unassured: VecDeque::new(),
            now_ns: 0,
            due: Vec::new(),
            stats: TableStats::default(),
            cfg,
        }
    }

    /// The configuration.
    pub fn config(&self) -> &TableConfig {
        &self.cfg
    }

    /// Live entries.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when no entry is live.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Counters.
    pub fn stats(&self) -> &TableStats {
        &self.stats
    }

    /// The index hash of a key whose RSS hash is `rss`.
    #[inline]
    fn ih(&self, key: &FlowKey, rss: u32) -> u32 {
        match self.cfg.index {
            IndexHash::Rss => rss,
            IndexHash::Key => key.index_mix(),
        }
    }

    #[inline]
    fn home(&self, hash: u32) -> usize {
        self.index.now.home(hash)
    }

    /// Finds the entry of `key` (sent from `side`); a reply-direction hit marks the
    /// flow assured.
    #[inline]
    pub fn lookup(&mut self, key: &FlowKey, side: Side, rss_hash: u32) -> Option<Lookup> {
        let hash = self.ih(key, rss_hash);
        self.lookup_from(self.home(hash), key, side, hash)
    }

    #[inline]
    fn lookup_from(
        &mut self,
        mut i: usize,
        key: &FlowKey,
        side: Side,
        hash: u32,
    ) -> Option<Lookup> {
        loop {
            let b = self.index.now.get(i)?;
            if b == EMPTY {
                return self.lookup_old(key, side, hash);
            }
            if (b >> 32) as u32 == hash {
                if let Some(l) = self.hit(b, key, side) {
                    return Some(l);
                }
            }
            i = self.index.now.next(i);
        }
    }

    /// The probe of the index's old buckets (a doubling under way: keys
    /// that have not moved yet) after a miss in the new ones.
    #[cold]
    #[inline(never)]
    fn lookup_old(&mut self, key: &FlowKey, side: Side, hash: u32) -> Option<Lookup> {
        let mut i = self.index.old()?.home(hash);
        loop {
            let b = self.index.old()?.get(i)?;
            if b == EMPTY {
                return None;
            }
            if b != MOVED && (b >> 32) as u32 == hash {
                if let Some(l) = self.hit(b, key, side) {
                    return Some(l);
                }
            }
            i = self.index.old()?.next(i);
        }
    }

    /// Prefetches the index bucket `key` starts probing at (first stage of a
    /// pipelined lookup over a burst).
    #[inline]
    pub fn prefetch_index(&self, key: &FlowKey, rss_hash: u32) {
        self.prefetch_index_at(self.probe(key, rss_hash));
    }

    /// Reads `key`'s first index bucket (prefetched earlier) and prefetches the
    /// entry it points to (second stage).
    #[inline]
    pub fn prefetch_entry(&self, key: &FlowKey, rss_hash: u32) {
        self.prefetch_entry_at(self.probe(key, rss_hash));
    }

    /// Where `key`'s lookup in this table starts: the hash the table indexes
    /// it by (the RSS hash, or the key's own hash: [`IndexHash`]) and its
    /// home bucket. Computed once per packet, it serves the pipelined stages
    /// [`prefetch_index_at`](Self::prefetch_index_at),
    /// [`prefetch_entry_at`](Self::prefetch_entry_at) and
    /// [`lookup_at`](Self::lookup_at) of this table.
    #[inline]
    pub fn probe(&self, key: &FlowKey, rss_hash: u32) -> Probe {
        let ih = self.ih(key, rss_hash);
        Probe {
            ih,
            home: self.home(ih),
        }
    }

    /// [`prefetch_index`](Self::prefetch_index) of a [`probe`](Self::probe).
    #[inline]
    pub fn prefetch_index_at(&self, p: Probe) {
        // (an address only: a prefetch reads nothing and never faults)
        prefetch(self.index.now.addr(p.home));
    }

    /// [`prefetch_entry`](Self::prefetch_entry) of a [`probe`](Self::probe).
    #[inline]
    pub fn prefetch_entry_at(&self, p: Probe) {
        self.prefetch_hit(p.home, p.ih);
    }

    /// [`lookup`](Self::lookup) of a [`probe`](Self::probe) of the same key
    /// in this table.
    #[inline(always)]
    pub fn lookup_at(&mut self, key: &FlowKey, side: Side, p: Probe) -> Option<Lookup> {
        let ih = p.ih;
        // (the home again: the index may have doubled since the probe, when
        // the burst inserted flows)
        let home = self.home(ih);
        // the index probe of `lookup_from`, for a key's own entry, inline: the
        // first bucket whose signature matches, then its key (the loop
        // touches no key, so the compiler keeps none of its words across it);
        // after a signature collision the probe goes on out of line
        let mut i = home;
        let b = loop {
            let b = self.index.now.get(i)?;
            if b == EMPTY {
                if self.index.moving() {
                    return self.lookup_old(key, side, ih);
                }
                return None;
            }
            if (b >> 32) as u32 == ih {
                break b;
            }
            i = self.index.now.next(i);
        };
        match self.hit(b, key, side) {
            Some(l) => Some(l),
            None => self.lookup_after(i, key, side, ih),
        }
    }

    /// The entry index bucket `b` (whose signature matched) holds, if it is
    /// `key`'s (its own key or its alias), as seen from `side`; a reply marks
    /// the flow assured.
    #[inline(always)]
    fn hit(&mut self, b: u64, key: &FlowKey, side: Side) -> Option<Lookup> {
        let id = (b & ID_MASK) as usize;
        if b & ALIAS_BIT != 0 {
            // along the alias key, replies come from `alias_side`
            let k = self.aliases.get(id)?;
            if k != key {
                return None;
            }
            let m = self.meta.get_mut(id)?;
            let dir = if side == m.alias_side {
                m.assured = true;
                Dir::Reply
            } else {
                Dir::Original
            };
            return Some(Lookup {
                id: EntryId(id as u32),
                dir,
                gen: m.gen,
            });
        }
        let m = self.meta.get_mut(id)?;
        if m.key != *key {
            return None;
        }
        let dir = if side == m.orig {
            Dir::Original
        } else {
            m.assured = true;
            Dir::Reply
        };
        Some(Lookup {
            id: EntryId(id as u32),
            dir,
            gen: m.gen,
        })
    }

    /// [`lookup_at`](Self::lookup_at)'s probe after a signature collision at
    /// index bucket `i`: the buckets after it.
    #[cold]
    #[inline(never)]
    fn lookup_after(&mut self, mut i: usize, key: &FlowKey, side: Side, ih: u32) -> Option<Lookup> {
        loop {
            i = self.index.now.next(i);
            let b = self.index.now.get(i)?;
            if b == EMPTY {
                return self.lookup_old(key, side, ih);
            }
            if (b >> 32) as u32 == ih {
                if let Some(l) = self.hit(b, key, side) {
                    return Some(l);
                }
            }
        }
    }

    /// Looks up a burst in passes so the cache misses of the burst overlap: first
    /// prefetch every request's home bucket, then probe each (its bucket is in
    /// flight or cached by then) and finish it. Same results as
    /// [`lookup`](Self::lookup), in order.
    pub fn lookup_batch(&mut self, reqs: &[(FlowKey, Side, u32)], out: &mut Vec<Option<Lookup>>) {
        out.clear();
        let mut homes = [(0usize, 0u32); 64];
        for chunk in reqs.chunks(homes.len()) {
            for (h, (k, _, rss)) in homes.iter_mut().zip(chunk) {
                let ih = self.ih(k, *rss);
                *h = (self.home(ih), ih);
                prefetch(self.index.now.addr(h.0));
            }
            for &(h, ih) in homes.iter().take(chunk.len()) {
                self.prefetch_hit(h, ih);
            }
            for ((h, ih), (k, s, _)) in homes.iter().zip(chunk) {
                out.push(self.lookup_from(*h, k, *s, *ih));
            }
        }
    }

    /// Prefetches the entry of the first bucket from `home` on whose
    /// signature is `ih` (the key's, almost always): its metadata, every
    /// cache line of its slots, and the alias key when the bucket is an
    /// alias's (what the probe and the NFs will touch). The buckets looked
    /// at are those of the home bucket's cache line, prefetched earlier, and
    /// the line after it at most: with the index up to half full, the home
    /// bucket holds another key's entry for a third of the keys or so, and
    /// prefetching that entry left the key's own a miss from memory. A
    /// wrong guess costs a prefetch, not a result.
    #[inline]
    fn prefetch_hit(&self, home: usize, ih: u32) {
        let mut i = home;
        let b = loop {
            let Some(b) = self.index.now.get(i) else {
                return;
            };
            if b == EMPTY {
                return;
            }
            if (b >> 32) as u32 == ih {
                break b;
            }
            i = self.index.now.next(i);
            if i.wrapping_sub(home) & self.index.now.mask() > 8 {
                return;
            }
        };
        {
            // (addresses only, computed without bounds checks: a prefetch
            // reads nothing and never faults, whatever the address)
            let id = (b & ID_MASK) as usize;
            prefetch(self.meta.as_ptr().wrapping_add(id));
            if b & ALIAS_BIT != 0 {
                prefetch(self.aliases.as_ptr().wrapping_add(id));
            }
            let slots = self.cfg.slots;
            // the first and the last line of the entry's row of slots (the
            // same one, or next to each other, for rows of up to 64 bytes:
            // chains of up to two NFs), then any between
            let start = self.slots.as_ptr().wrapping_add(id.wrapping_mul(slots)) as usize;
            // (a row of no slots would prefetch the byte before: a hint, harmless)
            let bytes = slots * core::mem::size_of::<Cell<S>>();
            prefetch(start as *const u8);
            prefetch(start.wrapping_add(bytes).wrapping_sub(1) as *const u8);
            if bytes > 64 {
                let last = start.wrapping_add(bytes - 1);
                let mut line = (start & !63).wrapping_add(64);
                while line < (last & !63) {
                    prefetch(line as *const u8);
                    line += 64;
                }
            }
        }
    }

    /// Creates an entry for a new flow whose first packet came from `side`. When
    /// the table is full the policy applies; an evicted entry's non-empty slots are
    /// handed to `release(entry, nf, state)` first.
    pub fn insert(
        &mut self,
        key: FlowKey,
        side: Side,
        hash: u32,
        mut release: impl FnMut(EntryId, usize, S),
    ) -> Result<EntryId, InsertError> {
        if self.len >= self.cfg.capacity {
            let victim = match self.cfg.policy {
                CapPolicy::Refuse => None,
                CapPolicy::EvictUnassured => self.pop_unassured(),
            };
            match victim {
                Some(v) => {
                    self.release_all(v, &mut release);
                    self.remove(v);
                    self.stats.evicted += 1;
                }
                None => {
                    self.stats.refused += 1;
                    return Err(InsertError::TableFull);
                }
            }
        }
        let n = self.cfg.slots;
        let id = match self.free.pop() {
            Some(id) => id,
            None => {
                let id = self.meta.len() as u32;
                self.grow_slab();
                self.meta.push(Meta {
                    key,
                    hash,
                    gen: 0,
                    wheel_tick: NO_TICK,
                    orig: side,
                    alias_side: side,
                    assured: false,
                    live: false,
                    has_alias: false,
                    alias_owner: 0,
                    pinned: false,
                });
                if self.cfg.keys_per_entry > 1 {
                    self.aliases.push(FlowKey::default());
                    if self.cfg.index == IndexHash::Rss {
                        self.alias_rss.push(0);
                    }
                }
                self.slots.extend((0..n).map(|_| Cell::default()));
                self.exits.push(Exits::default());
                self.born.push(0);
                id
            }
        };
        self.exits[id as usize] = Exits::default();
        self.born[id as usize] = u32::try_from(self.now_ns >> BORN_UNIT_SHIFT).unwrap_or(u32::MAX);
        let m = &mut self.meta[id as usize];
        m.key = key;
        m.hash = hash;
        m.wheel_tick = NO_TICK;
        m.orig = side;
        m.alias_side = side;
        m.assured = false;
        m.live = true;
        m.has_alias = false;
        m.pinned = false;
        let gen = m.gen;
        let ih = self.ih(&key, hash);
        self.index_insert(pack(ih, id, false), ih);
        self.push_unassured(id, gen);
        self.len += 1;
        self.stats.inserted += 1;
        self.stats.max_len = self.stats.max_len.max(self.len as u64);
        Ok(EntryId(id))
    }

    /// Makes room for one more entry in the slab (reserved at creation; a
    /// clone has only its entries' room): doubling, but never past the
    /// capacity, so a full table holds exactly what
    /// [`bytes_at_capacity`](Self::bytes_at_capacity) counts.
    fn grow_slab(&mut self) {
        let len = self.meta.len();
        if len < self.meta.capacity() {
            return;
        }
        let more = (len.max(32))
            .min(self.cfg.capacity.saturating_sub(len))
            .max(1);
        let n = self.cfg.slots;
        self.meta.reserve_exact(more);
        self.exits.reserve_exact(more);
        self.born.reserve_exact(more);
        self.slots.reserve_exact(more * n);
        if self.cfg.keys_per_entry > 1 {
            self.aliases.reserve_exact(more);
            if self.cfg.index == IndexHash::Rss {
                self.alias_rss.reserve_exact(more);
            }
        }
    }

    /// Queues an unassured entry for `EvictUnassured` (other policies keep no
    /// queue). Entries that were freed, assured or queued twice stay in the
    /// queue until it outgrows twice the capacity; then they are dropped at once,
    /// so the queue's memory is bounded by the table's, whatever the flow churn.
    fn push_unassured(&mut self, id: u32, gen: u32) {
        if self.cfg.policy != CapPolicy::EvictUnassured {
            return;
        }
        if self.unassured.len() >= 2 * self.cfg.capacity + 64 {
            let meta = &self.meta;
            let mut queued = vec![false; meta.len()];
            self.unassured.retain(|&(i, g, _)| {
                let m = &meta[i as usize];
                let keep = m.live && m.gen == g && !m.assured && !queued[i as usize];
                queued[i as usize] |= keep;
                keep
            });
        }
        self.unassured.push_back((id, gen, self.now_ns));
    }

    /// Length of the unassured queue (for tests of its bound).
    pub fn unassured_queued(&self) -> usize {
        self.unassured.len()
    }

    fn pop_unassured(&mut self) -> Option<EntryId> {
        while let Some(&(id, gen, at)) = self.unassured.front() {
            let m = &self.meta[id as usize];
            if m.live && m.gen == gen && !m.assured && !m.pinned {
                if self.now_ns.saturating_sub(at) < self.cfg.evict_min_age_ns {
                    // the oldest candidate is young: none is old enough
                    return None;
                }
                self.unassured.pop_front();
                return Some(EntryId(id));
            }
            self.unassured.pop_front();
        }
        None
    }

    /// Tells the table the time (ns): the age of unassured flows is measured
    /// against it. Times that go back are ignored.
    #[inline]
    pub fn note_time(&mut self, now_ns: u64) {
        self.now_ns = self.now_ns.max(now_ns);
    }

    /// Adds a second key for an entry, e.g. a NAT's translated tuple. `key` and
    /// `side` are those of the translated *original-direction* tuple (internal host
    /// rewritten to the external address → server); packets along it from the other
    /// side are the entry's `Reply` direction. Requires `keys_per_entry == 2`;
    /// replaces a previous alias. The alias belongs to slot `owner`: it goes away
    /// when that slot is cleared ([`clear_slot`](Self::clear_slot), expiry).
    pub fn add_alias(&mut self, id: EntryId, owner: usize, key: FlowKey, side: Side, hash: u32) {
        assert!(
            self.cfg.keys_per_entry > 1,
            "table built without alias keys"
        );
        let i = id.0 as usize;
        self.drop_alias(id);
        self.aliases[i] = key;
        if let Some(h) = self.alias_rss.get_mut(i) {
            *h = hash;
        }
        let ih = self.ih(&key, hash);
        let m = &mut self.meta[i];
        m.has_alias = true;
        m.alias_owner = owner as u16;
        // Packets along the alias key from the other side are replies.
        m.alias_side = match side {
            Side::Lo => Side::Hi,
            Side::Hi => Side::Lo,
        };
        self.index_insert(pack(ih, id.0, true), ih);
    }

    /// Entry `i`'s alias key and the RSS hash it was added with (0 where
    /// the index does not keep it: a key-hashed index does not need it).
    fn alias_of(&self, i: usize) -> (FlowKey, u32) {
        (self.aliases[i], self.alias_rss.get(i).copied().unwrap_or(0))
    }

    fn drop_alias(&mut self, id: EntryId) {
        let i = id.0 as usize;
        if self.meta[i].has_alias {
            let (k, h) = self.alias_of(i);
            let ih = self.ih(&k, h);
            self.index_remove(pack(ih, id.0, true));
            self.meta[i].has_alias = false;
        }
    }

    /// Takes the state out of a slot (and its deadline, and the alias key the slot
    /// owns). The entry stays until [`release_if_empty`](Self::release_if_empty).
    pub fn clear_slot(&mut self, id: EntryId, nf: usize) -> S {
        let i = id.0 as usize;
        let n = self.cfg.slots;
        self.slots[i * n + nf].deadline = 0;
        if self.meta[i].has_alias && usize::from(self.meta[i].alias_owner) == nf {
            self.drop_alias(id);
        }
        core::mem::take(&mut self.slots[i * n + nf].state)
    }

    fn index_insert(&mut self, packed: u64, _hash: u32) {
        let grown = self.index.grown;
        self.index.insert(packed);
        self.stats.index_grown += self.index.grown - grown;
        for o in &mut self.own {
            o.insert(packed);
        }
    }

    fn index_remove(&mut self, packed: u64) {
        let found = self.index.remove(packed);
        debug_assert!(found, "removing a key that is not indexed");
        for o in &mut self.own {
            let found = o.remove(packed);
            debug_assert!(found, "removing a key an own index does not hold");
        }
    }

    /// The per-NF layout: finds `key`'s entry through own index `n` (of
    /// [`TableConfig::own_indexes`]) — its own buckets, probed as the shared
    /// index is — with the same result as [`lookup`](Self::lookup). `None`
    /// when there is no such index.
    pub fn lookup_own(
        &mut self,
        n: usize,
        key: &FlowKey,
        side: Side,
        rss_hash: u32,
    ) -> Option<Lookup> {
        let hash = self.ih(key, rss_hash);
        let own = self.own.get(n)?;
        let mut i = own.now.home(hash);
        self.stats.own_lookups += 1;
        loop {
            let b = self.own[n].now.get(i)?;
            if b == EMPTY {
                break;
            }
            if (b >> 32) as u32 == hash {
                if let Some(l) = self.hit(b, key, side) {
                    return Some(l);
                }
            }
            i = self.own[n].now.next(i);
        }
        // a doubling under way: the keys not moved yet
        let mut i = self.own[n].old()?.home(hash);
        loop {
            let b = self.own[n].old()?.get(i)?;
            if b == EMPTY {
                return None;
            }
            if b != MOVED && (b >> 32) as u32 == hash {
                if let Some(l) = self.hit(b, key, side) {
                    return Some(l);
                }
            }
            i = self.own[n].old()?.next(i);
        }
    }

    /// Index buckets now (the index grows with the keys:
    /// [`TableStats::index_grown`]).
    pub fn index_buckets(&self) -> usize {
        self.index.now.len()
    }

    /// Frees an entry whatever its slots hold (they are reset without release).
    pub fn remove(&mut self, id: EntryId) {
        let i = id.0 as usize;
        if !self.meta[i].live {
            return;
        }
        let ih = self.ih(&self.meta[i].key, self.meta[i].hash);
        self.index_remove(pack(ih, id.0, false));
        self.drop_alias(id);
        let n = self.cfg.slots;
        for s in &mut self.slots[i * n..(i + 1) * n] {
            *s = Cell::default();
        }
        let m = &mut self.meta[i];
        m.live = false;
        m.has_alias = false;
        m.gen = m.gen.wrapping_add(1);
        self.free.push(id.0);
        self.len -= 1;
        self.stats.removed += 1;
    }

    /// Frees the entry if every slot is empty (and it is not detached); returns
    /// whether it did.
    pub fn release_if_empty(&mut self, id: EntryId) -> bool {
        let n = self.cfg.slots;
        let i = id.0 as usize;
        if self.meta[i].live
            && !self.meta[i].pinned
            && self.slots[i * n..(i + 1) * n]
                .iter()
                .all(|c| c.state.is_empty())
        {
            self.remove(id);
            true
        } else {
            false
        }
    }

    fn release_all(&mut self, id: EntryId, release: &mut impl FnMut(EntryId, usize, S)) {
        let n = self.cfg.slots;
        let base = id.0 as usize * n;
        for nf in 0..n {
            let s = core::mem::take(&mut self.slots[base + nf].state);
            if !s.is_empty() {
                release(id, nf, s);
            }
        }
    }

    /// Where the slot of NF `nf` in entry `id` is, for
    /// [`slot_at`](Self::slot_at) and [`set_deadline_at`](Self::set_deadline_at):
    /// computed once for the accesses of one packet.
    #[inline]
    pub fn cell(&self, id: EntryId, nf: usize) -> usize {
        id.0 as usize * self.cfg.slots + nf
    }

    /// The slot at `cell` (from [`cell`](Self::cell)).
    #[inline]
    pub fn slot_at(&mut self, cell: usize) -> &mut S {
        &mut self.slots[cell].state
    }

    /// [`set_deadline`](Self::set_deadline) of the slot at `cell` (from
    /// [`cell`](Self::cell)) of entry `id`.
    #[inline]
    pub fn set_deadline_at(&mut self, id: EntryId, cell: usize, at_ns: u64) {
        // The entry is armed at a tick that starts no later than any of its
        // slots' deadlines (every arming in `arm` and in `expire` keeps it
        // so): a deadline moving later needs nothing but the store.
        if let Some(r) = self.slots[cell].as_slot().set_deadline(at_ns) {
            self.rearm(id, r);
        }
    }

    /// The `N` slots from `cell` on (from [`cell`](Self::cell): the slots of
    /// consecutive NFs of one entry) with their deadlines, in one access;
    /// `None` past the entry's last slot.
    #[inline(always)]
    pub fn slots_at<const N: usize>(&mut self, cell: usize) -> Option<[SlotMut<'_, S>; N]> {
        debug_assert!(
            cell % self.cfg.slots.max(1) + N <= self.cfg.slots,
            "one entry's"
        );
        let cells = self.slots.get_mut(cell..)?.first_chunk_mut::<N>()?;
        Some(cells.each_mut().map(Cell::as_slot))
    }

    /// Re-arms entry `id`'s timer for a slot deadline that moved earlier
    /// ([`SlotMut::set_deadline`]).
    #[inline(always)]
    pub fn rearm(&mut self, id: EntryId, r: Rearm) {
        self.arm(id.0 as usize, r.0);
    }

    /// The slot of NF `nf` in entry `id`.
    #[inline]
    pub fn slot_mut(&mut self, id: EntryId, nf: usize) -> &mut S {
        &mut self.slots[id.0 as usize * self.cfg.slots + nf].state
    }

    /// The slot of NF `nf` in entry `id`, read-only.
    #[inline]
    pub fn slot(&self, id: EntryId, nf: usize) -> &S {
        &self.slots[id.0 as usize * self.cfg.slots + nf].state
    }

    /// True while the entry found by `l` is live and not reused since.
    pub fn is_current(&self, l: &Lookup) -> bool {
        self.meta
            .get(l.id.0 as usize)
            .is_some_and(|m| m.live && m.gen == l.gen)
    }

    /// The generation of an entry id (see [`Lookup::gen`]).
    pub fn generation(&self, id: EntryId) -> u32 {
        self.meta[id.0 as usize].gen
    }

    /// True while the entry is live.
    pub fn is_live(&self, id: EntryId) -> bool {
        self.meta.get(id.0 as usize).is_some_and(|m| m.live)
    }

    /// The entry's key.
    pub fn key(&self, id: EntryId) -> &FlowKey {
        &self.meta[id.0 as usize].key
    }

    /// The entry's RSS hash.
    pub fn hash(&self, id: EntryId) -> u32 {
        self.meta[id.0 as usize].hash
    }

    /// True once the flow has seen traffic in both directions.
    pub fn is_assured(&self, id: EntryId) -> bool {
        self.meta[id.0 as usize].assured
    }

    /// Sets the idle deadline of NF `nf`'s slot (absolute, ns). Cheap when the
    /// deadline moves later (nothing but a store); an earlier one re-arms the wheel.
    #[inline]
    pub fn set_deadline(&mut self, id: EntryId, nf: usize, at_ns: u64) {
        self.set_deadline_at(id, self.cell(id, nf), at_ns);
    }

    /// Arms entry `i`'s timer for `at_ns` unless it is armed at a tick that
    /// starts no later (the common case, decided inline: a deadline moving
    /// earlier within its tick).
    #[inline]
    fn arm(&mut self, i: usize, at_ns: u64) {
        let m = &self.meta[i];
        // (`at_ns` before the armed tick's start: its tick is earlier)
        if m.wheel_tick == NO_TICK || at_ns < self.wheel.tick_start(m.wheel_tick) {
            self.schedule(i, at_ns);
        }
    }

    /// [`arm`](Self::arm)'s scheduling, out of line.
    #[inline(never)]
    fn schedule(&mut self, i: usize, at_ns: u64) {
        let gen = self.meta[i].gen;
        let t = self.wheel.schedule((i as u32, gen), at_ns);
        self.meta[i].wheel_tick = t;
        self.compact_wheel();
    }

    /// Drops the wheel's stale items once they outnumber the live entries
    /// (plus some slack): an entry re-armed earlier, or freed, leaves its old
    /// item behind until that item's tick, which with long timeouts (a
    /// sequence check's 300 s beside a firewall's seconds) is far away — flows
    /// that come and go would pile them up. Amortised O(1) per schedule.
    fn compact_wheel(&mut self) {
        if self.wheel.len() <= 2 * self.len + 1024 {
            return;
        }
        let meta = &self.meta;
        self.wheel.retain(|tick, (id, gen)| {
            let m = &meta[id as usize];
            m.live && m.gen == gen && m.wheel_tick == tick
        });
    }

    /// Items in the timer wheel, stale ones included (for tests of its bound).
    pub fn wheel_items(&self) -> usize {
        self.wheel.len()
    }

    /// Expires every slot whose deadline is ≤ `now_ns`: its state is handed to
    /// `release(entry, nf, state)`, and an entry left with only empty slots is freed.
    pub fn expire(&mut self, now_ns: u64, mut release: impl FnMut(EntryId, usize, S)) {
        let mut due = core::mem::take(&mut self.due);
        self.wheel
            .advance(now_ns, |tick, item| due.push((tick, item)));
        let n = self.cfg.slots;
        for (tick, (id, gen)) in due.drain(..) {
            let i = id as usize;
            let m = &self.meta[i];
            if !m.live || m.gen != gen || m.wheel_tick != tick {
                continue; // freed, reused or re-armed since
            }
            self.meta[i].wheel_tick = NO_TICK;
            let mut next = u64::MAX;
            for nf in 0..n {
                let d = self.slots[i * n + nf].deadline;
                if d == 0 {
                    continue;
                }
                if d <= now_ns {
                    let s = self.clear_slot(EntryId(id), nf);
                    if !s.is_empty() {
                        self.stats.expired_slots += 1;
                        release(EntryId(id), nf, s);
                    }
                } else {
                    next = next.min(d);
                }
            }
            if !self.release_if_empty(EntryId(id)) && next != u64::MAX {
                let t = self.wheel.schedule((id, gen), next);
                self.meta[i].wheel_tick = t;
            }
        }
        self.due = due;
        self.compact_wheel();
    }

    /// Takes the slots and deadlines of a live entry out, for another core to work
    /// on (flow offload). The entry stays indexed — lookups still find it — but is
    /// pinned: it is not freed, expired or evicted until [`attach`](Self::attach).
    pub fn detach(&mut self, id: EntryId) -> Detached<S> {
        let i = id.0 as usize;
        debug_assert!(self.meta[i].live && !self.meta[i].pinned);
        let n = self.cfg.slots;
        let mut d = Detached {
            slots: Vec::with_capacity(n),
            deadlines: Vec::with_capacity(n),
            assured: self.meta[i].assured,
            exits: self.exits[i],
        };
        for c in &mut self.slots[i * n..(i + 1) * n] {
            d.slots.push(core::mem::take(&mut c.state));
            d.deadlines.push(core::mem::replace(&mut c.deadline, 0));
        }
        self.meta[i].pinned = true;
        self.stats.detached += 1;
        d
    }

    /// Puts detached slots back and unpins the entry: deadlines are re-armed, a slot
    /// that came back empty drops the alias key it owned, and an entry left with
    /// only empty slots is freed (returns false then).
    pub fn attach(&mut self, id: EntryId, d: Detached<S>) -> bool {
        let i = id.0 as usize;
        debug_assert!(self.meta[i].live && self.meta[i].pinned);
        let n = self.cfg.slots;
        self.meta[i].pinned = false;
        self.meta[i].assured |= d.assured;
        self.exits[i] = d.exits;
        for (nf, (state, deadline)) in d.slots.into_iter().zip(d.deadlines).enumerate() {
            if state.is_empty() {
                self.clear_slot(id, nf);
                continue;
            }
            self.slots[i * n + nf].state = state;
            if deadline != 0 {
                self.set_deadline(id, nf, deadline);
            }
        }
        if !self.meta[i].assured {
            let gen = self.meta[i].gen;
            self.push_unassured(id.0, gen);
        }
        !self.release_if_empty(id)
    }

    /// Notes that a packet of entry `id`, direction `dir`, arrival stamp
    /// `stamp`, left (was forwarded); false if it was reordered: a packet of
    /// the same direction that arrived after it left before it. The entry's
    /// order moves with its shard and, detached, with its slots; a new entry
    /// starts with none.
    #[inline]
    pub fn exit_in_order(&mut self, id: EntryId, dir: Dir, stamp: u64) -> bool {
        match self.exits.get_mut(id.0 as usize) {
            Some(e) => e.note(dir, stamp),
            None => true,
        }
    }

    /// The arrival stamp of the last packet of entry `id` that left (its
    /// exit order, either direction); 0 if none has yet.
    pub fn last_exit(&self, id: EntryId) -> u64 {
        self.exits
            .get(id.0 as usize)
            .map_or(0, |e| e.last[0].max(e.last[1]))
    }

    /// When entry `id` was made (the owner's time then, ns, to 67 ms: the
    /// start of the 2²⁶ ns unit it was made in).
    pub fn born(&self, id: EntryId) -> u64 {
        self.born
            .get(id.0 as usize)
            .map_or(0, |&b| u64::from(b) << BORN_UNIT_SHIFT)
    }

    /// True while the entry is detached.
    pub fn is_detached(&self, id: EntryId) -> bool {
        self.meta[id.0 as usize].pinned
    }

    /// Iterates the live entries from slot `from` on, in slot order (a walk
    /// over the table in steps: entries never change slots).
    pub fn entries_from(&self, from: u32) -> impl Iterator<Item = EntryId> + '_ {
        let from = (from as usize).min(self.meta.len());
        self.meta[from..]
            .iter()
            .enumerate()
            .filter(|(_, m)| m.live)
            .map(move |(i, _)| EntryId((from + i) as u32))
    }

    /// Iterates the live entries (for moves, reports and tests).
    pub fn entries(&self) -> impl Iterator<Item = EntryId> + '_ {
        self.meta
            .iter()
            .enumerate()
            .filter(|(_, m)| m.live)
            .map(|(i, _)| EntryId(i as u32))
    }
}

impl<S: Slot> core::fmt::Debug for FlowTable<S> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("FlowTable")
            .field("len", &self.len)
            .field("stats", &self.stats)
            .finish()
    }
}

//! A chain of NFs on one core: the single flow lookup, then every NF in order.

use core::any::Any;

use state::{FlowKey, FlowTable, Lookup, TableConfig};
use steer::{RssHasher, RssKey};

use crate::ctx::{At, Leased};
use crate::firewall::Firewall;
use crate::found::Member;
use crate::fused;
use crate::nat::Nat;
use crate::nflow::{steering_for, ChainError, NflowKey, SteerKey};
use crate::shard::Shard;
use crate::{
    Ctx, DropCause, FlowState, Found, Nf, Packet, ShardInfo, ShardLocal, StateKind, Verdict,
};

/// Per-core chain counters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ChainCounters {
    /// Packets given to the chain.
    pub packets: u64,
    /// Packets forwarded.
    pub forwarded: u64,
    /// Packets dropped, by [`DropCause`] index.
    pub drops: [u64; DropCause::ALL.len()],
    /// New flows dropped by an NF after earlier NFs had made state for them,
    /// which was released (never committed).
    pub undone: u64,
    /// Times a shard entered emergency mode.
    pub emergencies: u64,
}

impl ChainCounters {
    /// Adds another core's counters.
    pub fn add(&mut self, o: &ChainCounters) {
        self.packets += o.packets;
        self.forwarded += o.forwarded;
        self.undone += o.undone;
        self.emergencies += o.emergencies;
        for (a, b) in self.drops.iter_mut().zip(o.drops) {
            *a += b;
        }
    }

    /// Drops of one cause.
    pub fn dropped(&self, c: DropCause) -> u64 {
        self.drops[c as usize]
    }
}

/// A packet's flow entry as [`Chain::process_burst_routed`]'s router sees it.
pub struct Hit<'a> {
    /// The packet's shard.
    pub shard: &'a mut Shard,
    /// The entry the lookup found.
    pub entry: state::EntryId,
    nfs: HitNfs<'a>,
}

/// The chain's NFs as a [`Hit`] sees them.
enum HitNfs<'a> {
    /// Any chain's.
    All(&'a [Box<dyn Nf>]),
    /// A chain of one fused firewall → NAT pair, taken by type already.
    FirewallNat(&'a Firewall, &'a Nat),
}

impl Hit<'_> {
    /// True if every NF can process this flow's packets with the entry detached
    /// and no shard-local state ([`Nf::offloadable`]).
    pub fn offloadable(&self) -> bool {
        let slot = |i| self.shard.table.slot(self.entry, i).as_ref();
        match self.nfs {
            HitNfs::All(nfs) => nfs.iter().enumerate().all(|(i, n)| n.offloadable(slot(i))),
            HitNfs::FirewallNat(fw, nat) => fw.offloadable(slot(0)) && nat.offloadable(slot(1)),
        }
    }
}

/// What [`Chain::process_burst_routed`]'s router does with a packet's flow
/// entry, which decides how far the chain may run a burst's packets NF by NF.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Routing {
    /// It only looks at the entry's identity (e.g. samples it): a flow's
    /// packets may run NF by NF together.
    Observes,
    /// It reads or takes the entry's state (a snapshot for a replica, an
    /// offload decision): each packet is routed after its flow's earlier
    /// packets of the burst have run.
    ReadsState,
}

/// NFs on one core, with the steering their state needs.
pub struct Chain {
    pub(crate) nfs: Vec<Box<dyn Nf>>,
    steering: SteerKey,
    hasher: RssHasher,
    shards: usize,
    buckets: usize,
    table: TableConfig,
    per_flow: bool,
    /// Some NF keeps state in flow entries: packets are looked up and new
    /// flows get an entry.
    entries: bool,
    /// Some NF may delete its state on a packet ([`Nf::deletes_state`]).
    deletes: bool,
    /// Emergency mode's high- and low-water marks, in flows per shard;
    /// without emergency mode a high mark no table reaches.
    emergency: (usize, usize),
    counters: ChainCounters,
    /// How a run of found packets goes through the NFs.
    plan: Vec<Step>,
    /// The per-NF layout ([`Layout::PerNf`]): per NF, the own index of the
    /// flow table it finds its entry through (`None`: the chain's lookup);
    /// empty in the shared layout.
    own: Vec<Option<usize>>,
    /// Reused by `process_burst_routed`.
    scratch: Option<Box<Scratch>>,
}

/// How the NFs of a chain find a packet's flow state.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Layout {
    /// One lookup per packet; every NF's state is a slot of the entry it
    /// found (Dyssect's design, flowshift's default), and found packets run
    /// through the NFs in runs, a firewall → NAT pair fused.
    #[default]
    Shared,
    /// As NFs that each keep their own table (the papers' RSS++ and static
    /// RSS baselines): every NF after the first that keeps per-flow
    /// entries finds the packet's flow through an index of its own, and a
    /// packet goes through the NFs one NF at a time (no runs, no fused
    /// pair). The state stays in the shared entry's slots: this layout
    /// charges the lookups and the lost batching, not a second copy of the
    /// key or the state.
    PerNf,
}

/// One step of a run of found packets through the chain (see [`Found`]).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Step {
    /// NF `i` takes the run ([`Nf::process_found`]).
    One(usize),
    /// NFs `i` and `i + 1`, a pair the chain knows the types of, take each
    /// packet in turn ([`Found::each2`]): compiled together, the packet, its
    /// shard and its entry's slots are found once for both.
    Pair(usize, Pair),
}

/// The pairs of NFs a chain runs fused.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Pair {
    /// A firewall, then a NAT (the FW+NAT chain).
    FirewallNat,
}

impl Pair {
    /// The pair NFs `a` then `b` make, if the chain knows it.
    fn of(a: &dyn Nf, b: &dyn Nf) -> Option<Pair> {
        let (a, b): (&dyn Any, &dyn Any) = (a, b);
        (a.is::<Firewall>() && b.is::<Nat>()).then_some(Pair::FirewallNat)
    }
}

/// The steps of a chain of `nfs`: known pairs fused, the rest one by one.
fn plan(nfs: &[Box<dyn Nf>]) -> Vec<Step> {
    let mut steps = Vec::new();
    let mut i = 0;
    while i < nfs.len() {
        match nfs
            .get(i + 1)
            .and_then(|b| Pair::of(nfs[i].as_ref(), b.as_ref()))
        {
            Some(p) => {
                steps.push(Step::Pair(i, p));
                i += 2;
            }
            None => {
                steps.push(Step::One(i));
                i += 1;
            }
        }
    }
    steps
}

/// Packets a burst is processed in at once (a longer burst is taken in
/// pieces of this size).
pub const BURST: usize = 32;

/// What `process_burst_routed` keeps per packet of a piece of a burst.
struct Scratch {
    /// Each packet's flow key, side and where its lookup starts.
    looked: [Looked; BURST],
    /// The run of found packets being gathered, and its verdicts.
    run: [Member; BURST],
    verdicts: [Verdict; BURST],
}

/// A packet's flow key, the side that sent it and where its lookup starts:
/// one cache line, the first stage's output and the probe's input.
#[derive(Copy, Clone)]
#[repr(C, align(64))]
struct Looked {
    key: FlowKey,
    probe: state::Probe,
    side: state::Side,
}

impl Default for Scratch {
    fn default() -> Self {
        Scratch {
            looked: [Looked {
                key: FlowKey::default(),
                probe: state::Probe::default(),
                side: state::Side::Lo,
            }; BURST],
            run: [Member {
                pkt: 0,
                shard: 0,
                entry: state::EntryId(0),
                emergency: false,
            }; BURST],
            verdicts: [Verdict::Forward; BURST],
        }
    }
}

/// Where a burst's verdicts go, one per packet in order:
/// [`Chain::process_burst`]'s list (every packet runs here) or
/// [`Chain::process_burst_routed`]'s (`None` for a packet the router left to
/// the caller). A piece of a burst is put in as forwarded first; then only
/// the packets whose verdict differs are written.
trait Verdicts {
    fn clear(&mut self);
    /// `n` more packets, forwarded.
    fn forward(&mut self, n: usize);
    /// Packet `i`'s verdict, when not forwarded.
    fn set(&mut self, i: usize, v: Verdict);
    /// Packet `i` was left to the caller.
    fn left(&mut self, i: usize);
}

impl Verdicts for Vec<Option<Verdict>> {
    fn clear(&mut self) {
        Vec::clear(self);
    }
    #[inline(always)]
    fn forward(&mut self, n: usize) {
        self.resize(self.len() + n, Some(Verdict::Forward));
    }
    #[inline(always)]
    fn set(&mut self, i: usize, v: Verdict) {
        if let Some(o) = self.get_mut(i) {
            *o = Some(v);
        }
    }
    fn left(&mut self, i: usize) {
        if let Some(o) = self.get_mut(i) {
            *o = None;
        }
    }
}

impl Verdicts for Vec<Verdict> {
    fn clear(&mut self) {
        Vec::clear(self);
    }
    #[inline(always)]
    fn forward(&mut self, n: usize) {
        self.resize(self.len() + n, Verdict::Forward);
    }
    #[inline(always)]
    fn set(&mut self, i: usize, v: Verdict) {
        if let Some(o) = self.get_mut(i) {
            *o = v;
        }
    }
    fn left(&mut self, _: usize) {
        unreachable!("process_burst's router keeps every packet");
    }
}

/// Parameters of a chain other than its NFs.
#[derive(Clone, Debug)]
pub struct ChainOptions {
    /// RSS key; `None` = the symmetric key when steering must be symmetric, else the
    /// default key.
    pub key: Option<RssKey>,
    /// Indirection-table size (buckets).
    pub buckets: usize,
    /// Shards (a power of two ≤ buckets).
    pub shards: usize,
    /// Flow-table parameters per shard (`slots` and `keys_per_entry` are set by the chain).
    pub table: TableConfig,
    /// Emergency mode: a shard whose table holds at least `high` × capacity
    /// flows gives its NFs' unassured flows short timeouts until it is down to
    /// `low` × capacity (as conntrack and Suricata do). `None`: never.
    pub emergency: Option<(f64, f64)>,
    /// Steering by ternary rules (Roger's plans) instead of hash bits: rule `r`
    /// is bucket and shard `r`. `None`: RSS.
    pub rules: Option<std::sync::Arc<steer::roger::RuleSteering>>,
    /// How the NFs find a packet's flow state.
    pub layout: Layout,
}

impl Default for ChainOptions {
    fn default() -> Self {
        ChainOptions {
            key: None,
            buckets: 128,
            shards: 16,
            table: TableConfig::default(),
            emergency: None,
            rules: None,
            layout: Layout::Shared,
        }
    }
}

/// `hasher` hashing a NAT's endpoints as it asks (`steer::nat`), when one
/// does; refuses what that steering would split: a second such NAT, rule
/// steering, another NF choosing ports by the plain hash, and, with endpoint
/// hashing, a per-flow NF keyed by less than a 5-tuple.
fn with_nat_steering(
    hasher: RssHasher,
    nfs: &[Box<dyn Nf>],
    decl: &[(&str, NflowKey, StateKind, bool)],
    rules: bool,
) -> Result<RssHasher, ChainError> {
    let mut asked = nfs
        .iter()
        .filter_map(|n| Some((n.name(), n.nat_steering()?)));
    let Some((by, s)) = asked.next() else {
        return Ok(hasher);
    };
    let what = if s.endpoint() {
        "the NAT's endpoints"
    } else {
        "the 5-tuple with the NAT's port forwards"
    };
    let err = |nf: &str, key: &'static str, steering: &str| ChainError {
        nf: nf.to_string(),
        key,
        steering: steering.to_string(),
        required_by: format!("`{by}`'s endpoint-independent mapping or port forwards"),
    };
    if let Some((other, _)) = asked.next() {
        return Err(err(other, "its own endpoints", what));
    }
    if rules {
        return Err(err(
            by,
            "its endpoints",
            "ternary rules (steering.rules or steering.rule_key)",
        ));
    }
    for (name, key, kind, ports) in decl {
        if *name == by {
            continue;
        }
        if *ports {
            return Err(err(name, "ports it picks by the plain hash", what));
        }
        let five = matches!(
            key,
            NflowKey::None | NflowKey::FiveTuple | NflowKey::BiFiveTuple
        );
        if s.endpoint() && *kind == StateKind::PerFlow && !five {
            return Err(err(name, key.name(), what));
        }
    }
    Ok(hasher.with_nat(s))
}

impl Chain {
    /// Builds a chain, computing its steering key; refuses NFs whose state the
    /// steering would split, and a key that is not symmetric when it must be.
    pub fn new(mut nfs: Vec<Box<dyn Nf>>, opts: ChainOptions) -> Result<Chain, ChainError> {
        let decl: Vec<_> = nfs
            .iter()
            .map(|n| (n.name(), n.nflow(), n.state_kind(), n.needs_ports()))
            .collect();
        let steering = steering_for(&decl)?;
        let key = opts.key.unwrap_or(if steering.symmetric {
            RssKey::SYMMETRIC
        } else {
            RssKey::DEFAULT
        });
        let hasher = RssHasher::new(key, steering.fields);
        if steering.symmetric && !is_symmetric(&hasher) {
            return Err(ChainError {
                nf: "steering".into(),
                key: "bidirectional",
                steering: steering.to_string(),
                required_by: "the configured RSS key, which is not symmetric".into(),
            });
        }
        let hasher = match &opts.rules {
            None => hasher,
            Some(r) => {
                for (name, key, kind, _) in &decl {
                    if *kind == StateKind::PerFlow && !key.partitioned_by_rules(r.bits()) {
                        return Err(ChainError {
                            nf: name.to_string(),
                            key: key.name(),
                            steering: format!("ternary rules on {}", r.bits()),
                            required_by: if r.is_cells() {
                                "steering.rule_key".into()
                            } else {
                                "steering.rules".into()
                            },
                        });
                    }
                }
                hasher.with_rules(r.clone())
            }
        };
        let hasher = with_nat_steering(hasher, &nfs, &decl, opts.rules.is_some())?;
        let hasher = match nfs.iter().find_map(|n| n.gtp_steering()) {
            Some(n3) => hasher.with_gtp(n3),
            None => hasher,
        };
        let bucket_mask = (opts.buckets as u32).saturating_sub(1);
        for nf in &mut nfs {
            nf.bind(&hasher, bucket_mask);
        }
        let mut table = opts.table.clone();
        table.slots = nfs.len().max(1);
        table.keys_per_entry = if nfs.iter().any(|n| n.needs_alias()) {
            2
        } else {
            1
        };
        let per_flow = nfs.iter().any(|n| n.state_kind() == StateKind::PerFlow);
        let entries = nfs.iter().any(|n| n.keeps_entries());
        // the per-NF layout: an own index for each NF keeping entries after
        // the first one (which finds its entry through the chain's lookup)
        let mut own = Vec::new();
        if opts.layout == Layout::PerNf && entries {
            let mut next: Option<usize> = None;
            for n in &nfs {
                own.push(match (n.keeps_entries(), next) {
                    (false, _) => None,
                    (true, None) => {
                        next = Some(0);
                        None
                    }
                    (true, Some(k)) => {
                        next = Some(k + 1);
                        Some(k)
                    }
                });
            }
            table.own_indexes = next.unwrap_or(0);
        }
        let deletes = nfs.iter().any(|n| n.deletes_state());
        let cap = table.capacity as f64;
        // (the low mark below the high one, as the configuration checks: at
        // one number of flows the mode then stays what it is)
        let emergency = opts.emergency.map_or((usize::MAX, 0), |(h, l)| {
            let high = (h * cap).ceil() as usize;
            (
                high,
                ((l * cap).floor() as usize).min(high.saturating_sub(1)),
            )
        });
        let plan = if own.is_empty() {
            plan(&nfs)
        } else {
            (0..nfs.len()).map(Step::One).collect()
        };
        Ok(Chain {
            emergency,
            plan,
            own,
            nfs,
            steering,
            hasher,
            shards: opts.shards.max(1).next_power_of_two(),
            buckets: opts.buckets,
            table,
            per_flow,
            entries,
            deletes,
            counters: ChainCounters::default(),
            scratch: None,
        })
    }

    /// A fresh chain for another core: same configuration, own counters and
    /// mergeable state.
    pub fn instance(&self) -> Chain {
        Chain {
            nfs: self.nfs.iter().map(|n| n.instance()).collect(),
            steering: self.steering,
            hasher: self.hasher.clone(),
            shards: self.shards,
            buckets: self.buckets,
            table: self.table.clone(),
            per_flow: self.per_flow,
            entries: self.entries,
            deletes: self.deletes,
            emergency: self.emergency,
            counters: ChainCounters::default(),
            plan: self.plan.clone(),
            own: self.own.clone(),
            scratch: None,
        }
    }

    /// NFs that find their flow through an index of their own (the per-NF
    /// layout; 0 in the shared one).
    pub fn own_lookups(&self) -> usize {
        self.own.iter().flatten().count()
    }

    /// True if some NF keeps per-flow state (in flow entries or shard-local).
    pub fn has_per_flow_state(&self) -> bool {
        self.per_flow
    }

    /// True if packets are looked up in flow entries (some NF keeps state in
    /// its slot of one).
    pub fn keeps_entries(&self) -> bool {
        self.entries
    }

    /// The steering key the NIC model must use.
    pub fn steering(&self) -> SteerKey {
        self.steering
    }

    /// The NIC model's hash function for this chain.
    pub fn hasher(&self) -> &RssHasher {
        &self.hasher
    }

    /// The core each rule names, rule by rule (= shard by shard), when the chain
    /// steers by a fixed plan's rules; empty otherwise (live rules' cells start
    /// where [`steers_by_cells`](Self::steers_by_cells) says).
    pub fn rule_owners(&self) -> Vec<u16> {
        self.hasher
            .rules()
            .filter(|r| !r.is_cells())
            .map(|r| r.table().rules.iter().map(|x| x.core).collect())
            .unwrap_or_default()
    }

    /// Whether the chain steers by rules re-planned live (`steering.rule_key`):
    /// shard s is the key's value s, and the run starts the cells in contiguous
    /// blocks, one per core (as few rules as a split of the key space can be).
    pub fn steers_by_cells(&self) -> bool {
        self.hasher.rules().is_some_and(|r| r.is_cells())
    }

    /// Number of indirection-table buckets.
    pub fn buckets(&self) -> usize {
        self.buckets
    }

    /// Number of shards.
    pub fn shard_count(&self) -> usize {
        self.shards
    }

    /// The shard of a hash (shard j holds buckets j, j + S, j + 2S, …).
    #[inline]
    pub fn shard_of(&self, hash: u32) -> usize {
        (hash as usize) & (self.shards - 1)
    }

    /// Notes that `p`, which ran on `shards` (held here), leaves now: false if
    /// it was reordered, a packet of its flow and direction that arrived
    /// after it having left before it ([`state::FlowTable::exit_in_order`]).
    /// A packet without a flow entry, or whose shard is not held here, is not
    /// judged.
    #[inline]
    pub fn exit_in_order(&self, shards: &mut [Option<Shard>], p: &Packet) -> bool {
        match (p.entry, shards.get_mut(self.shard_of(p.hash))) {
            (Some(id), Some(Some(shard))) => shard.table.exit_in_order(id, p.dir, p.ts_ns),
            _ => true,
        }
    }

    /// The pairs of consecutive NFs (by index) that run fused: each packet
    /// of a run of found packets goes through both before the next packet
    /// does, in one loop compiled for their types ([`Found::each2`]). The
    /// outcome is the same as running them one after the other.
    pub fn fused(&self) -> Vec<(usize, usize)> {
        self.plan
            .iter()
            .filter_map(|s| match s {
                Step::Pair(i, _) => Some((*i, i + 1)),
                Step::One(_) => None,
            })
            .collect()
    }

    /// The NFs, in order.
    pub fn nfs(&self) -> &[Box<dyn Nf>] {
        &self.nfs
    }

    /// Counters of this core.
    pub fn counters(&self) -> &ChainCounters {
        &self.counters
    }

    /// Creates the shards (each with its flow table and NF shard-local state).
    pub fn new_shards(&self) -> Vec<Shard> {
        (0..self.shards)
            .map(|i| {
                let info = ShardInfo {
                    index: i,
                    count: self.shards,
                    bucket_mask: (self.buckets as u32).saturating_sub(1),
                };
                Shard {
                    info,
                    table: FlowTable::new(self.table.clone()),
                    locals: self.nfs.iter().map(|n| n.shard_local(&info)).collect(),
                    emergency: false,
                    emergency_at: usize::MAX,
                }
            })
            .collect()
    }

    /// Parses a frame into a packet with its RSS hash.
    pub fn packet(&self, data: Vec<u8>, ts_ns: u64) -> Result<Packet, (Vec<u8>, wire::Malformed)> {
        Packet::new(data, ts_ns, &self.hasher)
    }

    /// True if `pkt`'s flow has an entry in `shard` (the shard must be the
    /// packet's): the lookup the chain's own is.
    pub fn holds(&self, shard: &mut Shard, pkt: &Packet) -> bool {
        let (key, side) = FlowKey::of(&pkt.info.tuple);
        self.entries && shard.table.lookup(&key, side, pkt.hash).is_some()
    }

    /// Runs the chain on one packet of `shard` (the shard must be the packet's).
    pub fn process(&mut self, shard: &mut Shard, pkt: &mut Packet, now_ns: u64) -> Verdict {
        let found = if self.entries {
            let (key, side) = FlowKey::of(&pkt.info.tuple);
            shard.table.lookup(&key, side, pkt.hash)
        } else {
            None
        };
        self.run_keyed(shard, pkt, found, None, now_ns)
    }

    /// Runs the chain on a burst (as a worker polls it from its queue: packets of
    /// any of the core's shards, in arrival order). The burst's lookups are done
    /// first, shard by shard with prefetching, so their cache misses overlap; then
    /// every packet runs the NFs in order. `shards[s]` must hold shard `s` for
    /// every packet's shard (the core owns it).
    pub fn process_burst(
        &mut self,
        shards: &mut [Option<Shard>],
        pkts: &mut [Packet],
        now_ns: u64,
        out: &mut Vec<Verdict>,
    ) {
        self.burst(shards, pkts, now_ns, out, Routing::Observes, |_, _, _| true);
    }

    /// [`process_burst`](Self::process_burst) with a say in where each packet runs:
    /// after a packet's lookup found its entry, `route(index, packet, hit)` returns
    /// true to run the NFs here, false to leave the packet to the caller (e.g. for an
    /// offloading core; `out[index]` is then `None`). The packet's `entry` and `dir`
    /// are set before `route` sees it. New flows always run here: only the shard's
    /// owner inserts entries.
    pub fn process_burst_routed(
        &mut self,
        shards: &mut [Option<Shard>],
        pkts: &mut [Packet],
        now_ns: u64,
        out: &mut Vec<Option<Verdict>>,
        routing: Routing,
        route: impl FnMut(usize, &Packet, Hit<'_>) -> bool,
    ) {
        self.burst(shards, pkts, now_ns, out, routing, route);
    }

    /// Both of the above, into either kind of verdict list.
    fn burst<O: Verdicts>(
        &mut self,
        shards: &mut [Option<Shard>],
        pkts: &mut [Packet],
        now_ns: u64,
        out: &mut O,
        routing: Routing,
        mut route: impl FnMut(usize, &Packet, Hit<'_>) -> bool,
    ) {
        out.clear();
        if !self.entries {
            out.forward(pkts.len());
            for (i, p) in pkts.iter_mut().enumerate() {
                let shard = shards[self.shard_of(p.hash)]
                    .as_mut()
                    .expect("the core owns the packet's shard");
                out.set(i, self.run_keyed(shard, p, None, None, now_ns));
            }
            return;
        }
        let mut sc = self.scratch.take().unwrap_or_default();
        for (c, chunk) in pkts.chunks_mut(BURST).enumerate() {
            self.chunk(
                shards,
                chunk,
                c * BURST,
                now_ns,
                out,
                routing,
                &mut route,
                &mut sc,
            );
        }
        self.scratch = Some(sc);
    }

    /// [`process_burst_routed`](Self::process_burst_routed) on at most
    /// [`BURST`] packets, the first being the burst's `base`-th.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn chunk<O: Verdicts>(
        &mut self,
        shards: &mut [Option<Shard>],
        pkts: &mut [Packet],
        base: usize,
        now_ns: u64,
        out: &mut O,
        routing: Routing,
        route: &mut impl FnMut(usize, &Packet, Hit<'_>) -> bool,
        sc: &mut Scratch,
    ) {
        let n = pkts.len().min(BURST);
        let pkts = &mut pkts[..n];
        out.forward(n);
        if n == 0 {
            return;
        }
        self.look_up(shards, pkts, sc);
        if !self.own.is_empty() {
            self.one_by_one(shards, pkts, base, now_ns, out, route, sc);
        } else if let [Step::Pair(0, Pair::FirewallNat)] = self.plan[..] {
            // a chain that is one fused pair: there is no next NF to take a
            // run after it, so each found packet goes through the pair as
            // soon as it is found (a run of one packet, packet by packet as
            // runs are); a new flow runs the whole chain, then the next
            self.fused_chunk(shards, pkts, base, now_ns, out, route, sc);
        } else {
            self.gathered(shards, pkts, base, now_ns, out, routing, route, sc);
        }
    }

    /// Pipelined lookups: every index bucket of the burst in flight first,
    /// then every entry, then the probes (each packet's key and index hash
    /// computed once, for all three, into `sc.looked`).
    #[inline(always)]
    fn look_up(&self, shards: &[Option<Shard>], pkts: &[Packet], sc: &mut Scratch) {
        let n = pkts.len();
        // (each packet's table, found once for the two prefetching stages)
        let table_of = |p: &Packet| {
            &shards[self.shard_of(p.hash)]
                .as_ref()
                .expect("the core owns the packet's shard")
                .table
        };
        let Some(first) = pkts.first() else {
            return;
        };
        let mut tables = [table_of(first); BURST];
        for (i, p) in pkts.iter().enumerate() {
            let (k, side) = FlowKey::of(&p.info.tuple);
            let table = table_of(p);
            let probe = table.probe(&k, p.hash);
            table.prefetch_index_at(probe);
            // the headers an NF may rewrite, in flight too
            state::prefetch(p.data.as_ptr());
            sc.looked[i] = Looked {
                key: k,
                probe,
                side,
            };
            tables[i] = table;
        }
        for (table, l) in tables[..n].iter().zip(&sc.looked) {
            table.prefetch_entry_at(l.probe);
        }
    }

    /// A chunk in the per-NF layout: each packet through the NFs on its own,
    /// each NF finding its entry (see [`Layout::PerNf`]).
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn one_by_one<O: Verdicts>(
        &mut self,
        shards: &mut [Option<Shard>],
        pkts: &mut [Packet],
        base: usize,
        now_ns: u64,
        out: &mut O,
        route: &mut impl FnMut(usize, &Packet, Hit<'_>) -> bool,
        sc: &mut Scratch,
    ) {
        for (i, p) in pkts.iter_mut().enumerate() {
            let l = &sc.looked[i];
            let (k, side, probe) = (l.key, l.side, l.probe);
            let shard = shards[self.shard_of(p.hash)]
                .as_mut()
                .expect("the core owns the packet's shard");
            let found = shard.table.lookup_at(&k, side, probe);
            if let Some(l) = found {
                if !route_found(route, base + i, p, shard, l, HitNfs::All(&self.nfs)) {
                    out.left(base + i);
                    continue;
                }
            }
            let v = self.run_keyed(shard, p, found, Some((k, side)), now_ns);
            out.set(base + i, v);
        }
    }

    /// A chunk through the chain's one fused firewall → NAT pair: found
    /// packets packet by packet, a new flow through the whole chain.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn fused_chunk<O: Verdicts>(
        &mut self,
        shards: &mut [Option<Shard>],
        pkts: &mut [Packet],
        base: usize,
        now_ns: u64,
        out: &mut O,
        route: &mut impl FnMut(usize, &Packet, Hit<'_>) -> bool,
        sc: &mut Scratch,
    ) {
        let n = pkts.len();
        let mut i = 0;
        while i < n {
            i = self.fused_hits(shards, pkts, i, base, now_ns, out, route, sc);
            let Some(p) = pkts.get_mut(i) else {
                break;
            };
            let shard = shards[self.shard_of(p.hash)]
                .as_mut()
                .expect("the core owns the packet's shard");
            let v = self.run_keyed(
                shard,
                p,
                None,
                Some((sc.looked[i].key, sc.looked[i].side)),
                now_ns,
            );
            out.set(base + i, v);
            i += 1;
        }
    }

    /// A chunk through a chain of runs: packets whose entry was found
    /// gather in a run, which every NF then takes at once; a new flow, or a
    /// flow's second packet, first has the run processed (see `found`).
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn gathered<O: Verdicts>(
        &mut self,
        shards: &mut [Option<Shard>],
        pkts: &mut [Packet],
        base: usize,
        now_ns: u64,
        out: &mut O,
        routing: Routing,
        route: &mut impl FnMut(usize, &Packet, Hit<'_>) -> bool,
        sc: &mut Scratch,
    ) {
        // a flow's packets may run together unless the router reads their
        // state or an NF may delete it (then the next packet would not find
        // the entry, see `found`)
        let together = routing == Routing::Observes && !self.deletes;
        let n = pkts.len();
        let mut len = 0;
        let mut in_run = [0u64; 4];
        let mut i = 0;
        while i < n {
            let p = &mut pkts[i];
            let l = &sc.looked[i];
            let (k, side, probe) = (&l.key, l.side, l.probe);
            let s = self.shard_of(p.hash);
            let shard = shards[s]
                .as_mut()
                .expect("the core owns the packet's shard");
            let Some(l) = shard.table.lookup_at(k, side, probe) else {
                if len > 0 {
                    // the run may make this flow (a NAT's alias for a reply):
                    // after it, look again
                    self.flush(shards, pkts, sc, len, base, out, now_ns);
                    len = 0;
                    in_run = [0; 4];
                    continue;
                }
                let v = self.run_keyed(shard, p, None, Some((*k, side)), now_ns);
                out.set(base + i, v);
                i += 1;
                continue;
            };
            // (a 256-bit filter of the run's entries, kept when a flow's
            // packets may not share a run: a flow's second packet is looked
            // for in the run only when its bit is set)
            let mark = (!together).then(|| {
                let h = l.id.0 ^ (s as u32).wrapping_mul(0x9e37_79b9);
                ((h >> 6) as usize & 3, 1u64 << (h & 63))
            });
            if let Some((word, bit)) = mark {
                if in_run[word] & bit != 0
                    && sc.run[..len]
                        .iter()
                        .any(|m| m.entry == l.id && m.shard as usize == s)
                {
                    // the flow's packet before this one has not run yet
                    self.flush(shards, pkts, sc, len, base, out, now_ns);
                    len = 0;
                    in_run = [0; 4];
                    continue;
                }
            }
            if !route_found(route, base + i, p, shard, l, HitNfs::All(&self.nfs)) {
                out.left(base + i);
                i += 1;
                continue;
            }
            let Shard {
                table,
                emergency,
                emergency_at,
                ..
            } = shard;
            self.track_emergency(table.len(), emergency, emergency_at);
            sc.run[len] = Member {
                pkt: i as u32,
                shard: s as u32,
                entry: l.id,
                emergency: *emergency,
            };
            len += 1;
            if let Some((word, bit)) = mark {
                in_run[word] |= bit;
            }
            // (the run's flush writes the verdict of a drop)
            i += 1;
        }
        if len > 0 {
            self.flush(shards, pkts, sc, len, base, out, now_ns);
        }
    }

    /// The packets of a piece of a burst (see [`chunk`](Self::chunk)) from
    /// the `from`-th on whose lookup finds their entry, through the chain's
    /// one fused firewall → NAT pair, up to the first whose lookup does not:
    /// its index (the number of packets when none).
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn fused_hits<O: Verdicts>(
        &mut self,
        shards: &mut [Option<Shard>],
        pkts: &mut [Packet],
        from: usize,
        base: usize,
        now_ns: u64,
        out: &mut O,
        route: &mut impl FnMut(usize, &Packet, Hit<'_>) -> bool,
        sc: &Scratch,
    ) -> usize {
        let shard_mask = self.shards - 1;
        let Chain {
            nfs,
            counters,
            hasher,
            emergency: marks,
            ..
        } = self;
        let [a, b] = &mut nfs[..] else {
            unreachable!("a fused pair is the chain's two NFs")
        };
        let (fw, nat): (&mut dyn Any, &mut dyn Any) = (a.as_mut(), b.as_mut());
        let (Some(fw), Some(nat)) = (fw.downcast_mut::<Firewall>(), nat.downcast_mut::<Nat>())
        else {
            unreachable!("the plan was made from these NFs")
        };
        let n = pkts.len().min(BURST);
        let (mut ran, mut dropped, mut end) = (0, 0, n);
        for (i, p) in (from..n).zip(&mut pkts[from..n]) {
            let shard = shards[p.hash as usize & shard_mask]
                .as_mut()
                .expect("the core owns the packet's shard");
            let looked = &sc.looked[i];
            let Some(l) = shard
                .table
                .lookup_at(&looked.key, looked.side, looked.probe)
            else {
                end = i;
                break;
            };
            if !route_found(route, base + i, p, shard, l, HitNfs::FirewallNat(fw, nat)) {
                out.left(base + i);
                continue;
            }
            track_emergency(
                *marks,
                counters,
                shard.table.len(),
                &mut shard.emergency,
                &mut shard.emergency_at,
            );
            let at = crate::found::Entry {
                nf: 0,
                id: l.id,
                emergency: shard.emergency,
                now_ns,
                hasher,
            };
            let mut deleted = false;
            let v = fused::firewall_nat(fw, nat, shard, p, at, &mut deleted);
            if deleted {
                // (an entry whose NFs all deleted their state goes, as after
                // a packet-by-packet run)
                shard.table.release_if_empty(l.id);
            }
            ran += 1;
            if let Verdict::Drop(c) = v {
                counters.drops[c as usize] += 1;
                dropped += 1;
                out.set(base + i, v);
            }
        }
        counters.packets += ran;
        counters.forwarded += ran - dropped;
        end
    }

    /// Runs every NF on the run's `len` packets (in `sc`), NF by NF, and
    /// writes their verdicts into `out` (the packets' places there: `base` +
    /// their index in `pkts`).
    #[allow(clippy::too_many_arguments)]
    fn flush<O: Verdicts>(
        &mut self,
        shards: &mut [Option<Shard>],
        pkts: &mut [Packet],
        sc: &mut Scratch,
        len: usize,
        base: usize,
        out: &mut O,
        now_ns: u64,
    ) {
        let run = &sc.run[..len];
        let verdicts = &mut sc.verdicts[..len];
        verdicts.fill(Verdict::Forward);
        let mut deleted = false;
        for step in &self.plan {
            let (Step::One(i) | Step::Pair(i, _)) = *step;
            let mut found = Found {
                shards: &mut *shards,
                pkts: &mut *pkts,
                members: run,
                verdicts: &mut *verdicts,
                nf: i,
                now_ns,
                hasher: &self.hasher,
                deleted: false,
            };
            match *step {
                Step::One(i) => self.nfs[i].process_found(&mut found),
                Step::Pair(i, Pair::FirewallNat) => {
                    let [a, b] = &mut self.nfs[i..i + 2] else {
                        unreachable!("a pair is two NFs")
                    };
                    let (fw, nat): (&mut dyn Any, &mut dyn Any) = (a.as_mut(), b.as_mut());
                    if let (Some(fw), Some(nat)) =
                        (fw.downcast_mut::<Firewall>(), nat.downcast_mut::<Nat>())
                    {
                        fused::run(&mut found, fw, nat);
                    } else {
                        // (the plan was made from these NFs: not reached)
                        a.process_found(&mut found);
                        found.nf = i + 1;
                        b.process_found(&mut found);
                    }
                }
            }
            deleted |= found.deleted;
        }
        // (a run's packets are in `out` as forwarded already: only drops
        // change their verdict)
        let mut dropped = 0;
        for (m, v) in run.iter().zip(verdicts.iter()) {
            if let Verdict::Drop(c) = v {
                self.counters.drops[*c as usize] += 1;
                dropped += 1;
                out.set(base + m.pkt as usize, *v);
            }
            if deleted {
                // (an entry whose NFs all deleted their state goes, as after
                // a packet-by-packet run)
                if let Some(shard) = shards[m.shard as usize].as_mut() {
                    shard.table.release_if_empty(m.entry);
                }
            }
        }
        self.counters.packets += run.len() as u64;
        self.counters.forwarded += (run.len() - dropped) as u64;
    }

    /// Emergency mode's hysteresis ([`track_emergency`]) at `len` flows in
    /// a shard.
    #[inline]
    fn track_emergency(&mut self, len: usize, emergency: &mut bool, at: &mut usize) {
        track_emergency(self.emergency, &mut self.counters, len, emergency, at);
    }

    /// Runs the chain on a packet whose flow entry is detached from its shard and
    /// leased to this (offloading) core: the NFs see the leased slots and no
    /// shard-local state.
    pub fn process_leased(
        &mut self,
        info: ShardInfo,
        entry: state::EntryId,
        leased: &mut Leased,
        pkt: &mut Packet,
        now_ns: u64,
    ) -> Verdict {
        self.counters.packets += 1;
        if pkt.dir == state::Dir::Reply {
            leased.assured = true;
        }
        let mut none = ShardLocal::None;
        let mut verdict = Verdict::Forward;
        for (i, nf) in self.nfs.iter_mut().enumerate() {
            let mut cx = Ctx {
                at: At::Detached(&mut *leased),
                entry,
                nf: i,
                now_ns,
                local: &mut none,
                hasher: &self.hasher,
                shard: info,
                emergency: false,
                deleted: false,
            };
            verdict = nf.process(&mut cx, pkt);
            if verdict != Verdict::Forward {
                break;
            }
        }
        match verdict {
            Verdict::Forward => self.counters.forwarded += 1,
            Verdict::Drop(c) => self.counters.drops[c as usize] += 1,
        }
        verdict
    }

    /// NFs in the chain (slots per flow entry).
    pub fn nf_count(&self) -> usize {
        self.nfs.len()
    }

    /// Counts a packet the caller forwarded without running the NFs (a pool
    /// secondary sending a packet its primary ran).
    pub fn count_passed(&mut self) {
        self.counters.packets += 1;
        self.counters.forwarded += 1;
    }

    /// Counts a packet the caller had to drop for `cause` without running the NFs.
    pub fn count_drop(&mut self, cause: DropCause) {
        self.counters.packets += 1;
        self.counters.drops[cause as usize] += 1;
    }

    /// The [`ShardInfo`] of shard `index`.
    pub fn shard_info(&self, index: usize) -> ShardInfo {
        ShardInfo {
            index,
            count: self.shards,
            bucket_mask: (self.buckets as u32).saturating_sub(1),
        }
    }

    /// `key`: the packet's flow key when already computed.
    fn run_keyed(
        &mut self,
        shard: &mut Shard,
        pkt: &mut Packet,
        found: Option<Lookup>,
        key: Option<(FlowKey, state::Side)>,
        now_ns: u64,
    ) -> Verdict {
        self.counters.packets += 1;
        let verdict = self.run_nfs(shard, pkt, found, key, now_ns);
        match verdict {
            Verdict::Forward => self.counters.forwarded += 1,
            Verdict::Drop(c) => self.counters.drops[c as usize] += 1,
        }
        verdict
    }

    fn run_nfs(
        &mut self,
        shard: &mut Shard,
        pkt: &mut Packet,
        found: Option<Lookup>,
        key: Option<(FlowKey, state::Side)>,
        now_ns: u64,
    ) -> Verdict {
        let Shard {
            info,
            table,
            locals,
            emergency,
            emergency_at,
        } = shard;
        let key = match key {
            // (needed to insert a new flow, or for the per-NF layout's own
            // lookups: a found packet of the shared layout does without)
            None if self.entries && (found.is_none() || !self.own.is_empty()) => {
                Some(FlowKey::of(&pkt.info.tuple))
            }
            k => k,
        };
        let id = if self.entries {
            let l = match found {
                Some(l) => l,
                None => {
                    let (key, side) = key.expect("computed above");
                    let nfs = &mut self.nfs;
                    table.note_time(now_ns);
                    let ins = table.insert(key, side, pkt.hash, |_, nf, st| {
                        if let Some(st) = st {
                            nfs[nf].release(&mut locals[nf], st);
                        }
                    });
                    match ins {
                        Ok(id) => Lookup {
                            id,
                            dir: state::Dir::Original,
                            gen: table.generation(id),
                        },
                        Err(_) => return Verdict::Drop(DropCause::TableFull),
                    }
                }
            };
            pkt.entry = Some(l.id);
            pkt.dir = l.dir;
            l.id
        } else {
            state::EntryId(u32::MAX)
        };
        self.track_emergency(table.len(), emergency, emergency_at);
        let mut verdict = Verdict::Forward;
        let mut ran = 0;
        for (i, nf) in self.nfs.iter_mut().enumerate() {
            // the per-NF layout: this NF finds the entry through its own index
            let id = match (self.own.get(i).copied().flatten(), &key) {
                (Some(k), Some((fk, side))) => table
                    .lookup_own(k, fk, *side, pkt.hash)
                    .map_or(id, |l| l.id),
                _ => id,
            };
            let mut cx = Ctx {
                at: At::table(table, id, i),
                entry: id,
                nf: i,
                now_ns,
                local: &mut locals[i],
                hasher: &self.hasher,
                shard: *info,
                emergency: *emergency,
                deleted: false,
            };
            verdict = nf.process(&mut cx, pkt);
            if verdict != Verdict::Forward {
                ran = i;
                break;
            }
        }
        if self.entries {
            if found.is_none() && verdict != Verdict::Forward {
                // a new flow dropped later in the chain: the NFs before the one
                // that dropped it keep nothing (a firewall must not have opened
                // a connection the NAT could not translate); the dropping NF
                // keeps what it decided
                let mut undone = false;
                for (nf, (f, local)) in self
                    .nfs
                    .iter_mut()
                    .zip(locals.iter_mut())
                    .enumerate()
                    .take(ran)
                {
                    if let Some(st) = table.clear_slot(id, nf) {
                        f.release(local, st);
                        undone = true;
                    }
                }
                self.counters.undone += u64::from(undone);
            }
            table.release_if_empty(id);
        }
        verdict
    }

    /// Expires idle state of `shard` up to `now_ns`, handing it back to its NFs.
    pub fn expire(&mut self, shard: &mut Shard, now_ns: u64) {
        let Shard { table, locals, .. } = shard;
        let nfs = &mut self.nfs;
        table.expire(now_ns, |_, nf, st| {
            if let Some(st) = st {
                nfs[nf].release(&mut locals[nf], st);
            }
        });
    }

    /// A live reload: NFs `which` take the configuration of `new`'s NFs at
    /// the same places ([`Nf::reload`]), all or none (an error names the NF
    /// that cannot and nothing changes). `new` must have the same NFs in the
    /// same order.
    pub fn reload_nfs(&mut self, new: &Chain, which: &[usize]) -> Result<(), String> {
        if new.nfs.len() != self.nfs.len()
            || new
                .nfs
                .iter()
                .zip(&self.nfs)
                .any(|(a, b)| a.kind() != b.kind())
        {
            return Err("the chain's NFs cannot be added, removed or reordered live".into());
        }
        // every NF first on a copy, so a refusal changes nothing
        let mut trial: Vec<Box<dyn Nf>> = which.iter().map(|&i| self.nfs[i].instance()).collect();
        for (t, &i) in trial.iter_mut().zip(which) {
            t.reload(new.nfs[i].as_ref())
                .map_err(|e| format!("nf[{i}] ({}): {e}", self.nfs[i].name()))?;
        }
        for &i in which {
            self.nfs[i]
                .reload(new.nfs[i].as_ref())
                .expect("as on the copy");
        }
        Ok(())
    }

    /// Sends every NF's events (NAT mappings created and deleted) to `hub`,
    /// in this chain and the instances made from it from then on.
    pub fn log_events(&mut self, hub: &std::sync::Arc<crate::nat::EventHub>) {
        for nf in &mut self.nfs {
            nf.log_events(hub);
        }
    }

    /// True if an NF of the chain has events to log (a NAT).
    pub fn has_events(&self) -> bool {
        self.nfs.iter().any(|n| n.kind() == "nat")
    }

    /// Merges another core's chain (same configuration) into this one: NF
    /// mergeable state, NF counters and chain counters.
    pub fn merge_from(&mut self, other: &Chain) {
        for (a, b) in self.nfs.iter_mut().zip(&other.nfs) {
            a.merge_from(b.as_ref());
        }
        self.counters.add(&other.counters);
    }

    /// Delayed merge, live: each NF's share of its state on this core — a
    /// copy, or what changed since its last share (`None` for NFs that
    /// share nothing); empty when no NF shares.
    pub fn share(&mut self) -> Vec<Option<crate::Shared>> {
        let all: Vec<Option<crate::Shared>> = self.nfs.iter_mut().map(|n| n.share()).collect();
        if all.iter().all(Option::is_none) {
            return Vec::new();
        }
        all
    }

    /// Packets the chain's NFs held back and now let go
    /// ([`Nf::take_released`](crate::Nf::take_released)), appended to `out`
    /// in the order they are to leave.
    pub fn take_released(&mut self, out: &mut Vec<Packet>) {
        for nf in &mut self.nfs {
            nf.take_released(out);
        }
    }

    /// Gives every NF the worker's running load at `now_ns`
    /// ([`Nf::core_load`](crate::Nf::core_load)); a driver calls it every
    /// timer period.
    pub fn core_load(&mut self, now_ns: u64, load: crate::director::CoreLoad) {
        for nf in &mut self.nfs {
            nf.core_load(now_ns, load);
        }
    }

    /// True if an NF of the chain shares state across cores (a driver then
    /// merges every period: [`share`](Self::share), [`merge_shared`](Self::merge_shared)).
    pub fn shares_state(&self) -> bool {
        self.nfs.iter().any(|n| n.shares())
    }

    /// Gives each NF every core's snapshot of it (`cores[c]` is core c's
    /// [`share`](Self::share)).
    pub fn merge_shared(&mut self, cores: &[Vec<Option<crate::Shared>>]) {
        for (i, nf) in self.nfs.iter_mut().enumerate() {
            let all: Vec<crate::Shared> = cores
                .iter()
                .filter_map(|c| c.get(i).cloned().flatten())
                .collect();
            if !all.is_empty() {
                nf.merge_shared(&all);
            }
        }
    }

    /// The flow tables' timer resolution (ns): how often a driver should call
    /// [`expire`](Self::expire).
    pub fn timer_tick_ns(&self) -> u64 {
        self.table.tick_ns
    }

    /// Flows each shard's table holds at most (`table.capacity`).
    pub fn table_capacity(&self) -> usize {
        self.table.capacity
    }

    /// Bytes the flow tables of every shard take when full (`table.capacity`
    /// entries each): what a run of this chain may come to hold, whatever the
    /// core count (each shard lives on one core at a time).
    pub fn table_bytes_at_capacity(&self) -> u64 {
        if !self.entries {
            return 0;
        }
        self.shards as u64 * state::FlowTable::<Option<FlowState>>::bytes_at_capacity(&self.table)
    }

    /// One line per NF: its NFLOW key and where its state lives; then the steering.
    pub fn describe(&self) -> String {
        let mut s = String::new();
        for (i, n) in self.nfs.iter().enumerate() {
            let kind = match n.state_kind() {
                StateKind::Stateless => "stateless",
                StateKind::PerFlow => "per-flow state in the owning shard",
                StateKind::Mergeable => "mergeable per-core state, merged periodically",
            };
            let placed = n.placement().map(|p| format!("; {p}")).unwrap_or_default();
            s.push_str(&format!(
                "{i}: {:<10} NFLOW key {:<22} {kind}{placed}\n",
                n.name(),
                n.nflow().name()
            ));
        }
        for (a, b) in self.fused() {
            s.push_str(&format!(
                "{a}+{b}: {} and {} run fused (each packet through both in one loop)\n",
                self.nfs[a].name(),
                self.nfs[b].name()
            ));
        }
        match self.hasher.rules() {
            None => s.push_str(&format!(
                "steering: {} ({} buckets, {} shards)\n",
                self.steering, self.buckets, self.shards
            )),
            Some(r) if r.is_cells() => s.push_str(&format!(
                "steering: rules re-planned live on {}: {} cells, cell c = bucket and shard c \
                 ({} buckets, {} shards)\n",
                r.bits(),
                r.table().rules.len(),
                self.buckets,
                self.shards
            )),
            Some(r) => s.push_str(&format!(
                "steering: {} ternary rules on {}{}, rule r = bucket and shard r \
                 ({} buckets, {} shards)\n",
                r.table().rules.len(),
                r.bits(),
                if r.table().default_rule {
                    ", the rest by RSS"
                } else {
                    ""
                },
                self.buckets,
                self.shards
            )),
        }
        if let Some(n3) = self.hasher.gtp() {
            s.push_str(&format!(
                "         G-PDUs to {n3} hashed on the packet inside the tunnel\n"
            ));
        }
        s
    }
}

fn is_symmetric(h: &RssHasher) -> bool {
    let mut x = 0x1234_5678_9abc_def0u64;
    (0..64).all(|_| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let t = wire::FiveTuple {
            src: core::net::IpAddr::V4((x as u32).into()),
            dst: core::net::IpAddr::V4(((x >> 32) as u32).into()),
            src_port: (x >> 8) as u16,
            dst_port: (x >> 24) as u16,
            proto: wire::proto::TCP,
        };
        h.hash(&t) == h.hash(&t.reversed())
    })
}

/// A found packet (`l`: its entry) gets its entry and direction; then the
/// router says whether it runs here (its index in the burst: `at`).
#[inline(always)]
fn route_found(
    route: &mut impl FnMut(usize, &Packet, Hit<'_>) -> bool,
    at: usize,
    p: &mut Packet,
    shard: &mut Shard,
    l: Lookup,
    nfs: HitNfs<'_>,
) -> bool {
    p.entry = Some(l.id);
    p.dir = l.dir;
    route(
        at,
        p,
        Hit {
            shard,
            entry: l.id,
            nfs,
        },
    )
}

/// Emergency mode's hysteresis between the high- and the low-water mark
/// (`marks`), at `len` flows in the shard; entering it is counted. At the
/// number of flows `at` it was last brought up to date at, nothing changes
/// (the high mark is above the low one: after one step at a number of flows,
/// another step at the same number keeps the mode), so it is decided again
/// only when the number moved: one comparison for most packets.
#[inline(always)]
fn track_emergency(
    marks: (usize, usize),
    counters: &mut ChainCounters,
    len: usize,
    emergency: &mut bool,
    at: &mut usize,
) {
    if len == *at {
        return;
    }
    *at = len;
    let (high, low) = marks;
    if !*emergency {
        if len >= high {
            *emergency = true;
            counters.emergencies += 1;
        }
    } else if len <= low {
        *emergency = false;
    }
}

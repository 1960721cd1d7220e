//! The functional pass: the real chain runs once over the trace, in trace order,
//! on one set of shards, and records for every packet what the timing model needs —
//! its RSS hash, shard, flow entry, whether its lookup hit and whether its flow
//! could be offloaded, its class, its verdict and how many entries its shard holds.
//! Idle flows expire as in the runtime: every timer tick of trace time, each
//! shard's table is expired at that time. The simulator then replays only
//! time; verdicts do not depend on the core a packet runs on, because the runtime
//! keeps every flow's packets in order whatever the moves (its tests check the
//! output byte for byte against a static run).

use balance::migrate::slice_of;
use nf::{Chain, DropCause, Shard, Verdict};
use trace::Trace;
use wire::Malformed;

/// What the simulator knows about one trace packet.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PktInfo {
    /// RSS hash (the NIC model's).
    pub hash: u32,
    /// Flow entry index in its shard's table.
    pub entry: u32,
    /// The flow's offload slice (`slice_of`), for hits.
    pub slice: u16,
    /// Flags: [`HIT`], [`OFFLOADABLE`], [`PRIORITY`], [`MALFORMED`].
    pub flags: u8,
    /// 0: forwarded; 1 + index in `DropCause::ALL`: dropped by the chain; for a
    /// malformed packet, its `Malformed` cause.
    pub verdict: u8,
    /// Wire bytes (FCS included).
    pub bytes: u16,
    /// Live entries in the packet's shard's table once its burst ran (idle
    /// flows expired at the chain's timer tick): what a shard move carries then.
    pub live: u32,
}

/// The lookup found the flow's entry (not a new flow).
pub const HIT: u8 = 1;
/// Every NF could work on the flow with its entry detached.
pub const OFFLOADABLE: u8 = 2;
/// The packet is of the priority class.
pub const PRIORITY: u8 = 4;
/// The NIC model could not parse it.
pub const MALFORMED: u8 = 8;
/// The packet created its flow's entry: when the trace is replayed (loops after
/// the first) the entry exists and the packet is a hit, with the slice and the
/// [`OFFLOADABLE`] flag of the flow's next hit in the trace.
pub const REPLAY_HIT: u8 = 16;

/// A trace prepared for one chain (reusable across balancers and core counts).
pub struct Prepared {
    /// One record per trace packet.
    pub pkts: Vec<PktInfo>,
    /// The NF kinds of the chain, in order.
    pub kinds: Vec<&'static str>,
    /// NFs that find their flow through an own index (the per-NF layout).
    pub own_lookups: usize,
    /// Shards and indirection-table buckets of the chain.
    pub shards: usize,
    /// Indirection-table size.
    pub buckets: usize,
    /// True if the chain keeps state in flow entries (each packet has one).
    pub per_flow: bool,
    /// New flows whose earlier NFs' state was released because a later NF
    /// dropped their first packet (the functional pass's count).
    pub undone: u64,
    /// Flows the functional pass's tables evicted to make room.
    pub evicted: u64,
    /// Times a shard's table entered emergency mode in the functional pass.
    pub emergencies: u64,
    /// Under rule steering, the core each rule (= shard) starts on.
    pub rule_owners: Vec<u16>,
    /// Whether the chain steers by live rules' cells (they start in blocks).
    pub cells: bool,
}

impl Prepared {
    /// Runs `chain` (a fresh instance) over `trace`; `priority_dscp` marks the
    /// priority class.
    pub fn new(chain: &Chain, trace: &Trace, priority_dscp: u8) -> Prepared {
        let mut chain = chain.instance();
        let shards: Vec<Option<Shard>> = chain.new_shards().into_iter().map(Some).collect();
        let mut pass = Pass {
            pkts: Vec::with_capacity(trace.len()),
            batch: Vec::with_capacity(BURST),
            idx: Vec::with_capacity(BURST),
            out: Vec::with_capacity(BURST),
            meta: Vec::with_capacity(BURST),
            chain: &mut chain,
            shards,
        };
        let tick = pass.chain.timer_tick_ns().max(1);
        let mut next_expiry = trace.iter().next().map_or(0, |(ts, _)| ts) + tick;
        for (i, (ts, frame)) in trace.iter().enumerate() {
            let expiry = ts >= next_expiry;
            // a full burst runs; before an expiry, so do the packets before it
            if pass.batch.len() == BURST || expiry {
                pass.flush();
            }
            if expiry {
                for s in pass.shards.iter_mut().flatten() {
                    pass.chain.expire(s, ts);
                }
                next_expiry = ts + tick;
            }
            let bytes = (trace.orig_len(i) + trace::FCS_LEN).min(u32::from(u16::MAX)) as u16;
            pass.take(i, frame, ts, bytes, priority_dscp);
        }
        pass.flush();
        let Pass {
            mut pkts, shards, ..
        } = pass;
        replay_hits(&mut pkts, chain.buckets(), chain.shard_count());
        Prepared {
            pkts,
            kinds: chain.nfs().iter().map(|n| n.kind()).collect(),
            own_lookups: chain.own_lookups(),
            shards: chain.shard_count(),
            buckets: chain.buckets(),
            per_flow: chain.keeps_entries(),
            undone: chain.counters().undone,
            emergencies: chain.counters().emergencies,
            rule_owners: chain.rule_owners(),
            cells: chain.steers_by_cells(),
            evicted: shards
                .iter()
                .flatten()
                .map(|s| s.table.stats().evicted)
                .sum(),
        }
    }

    /// True if packet `idx` finds its flow's entry when emitted as the `n`-th
    /// packet (1-based, counting the trace's loops): a hit in the first loop, or
    /// the packet that created the entry in a later one.
    pub fn is_hit(&self, idx: u32, n: u64) -> bool {
        let f = self.pkts[idx as usize].flags;
        f & HIT != 0 || (f & REPLAY_HIT != 0 && n > self.pkts.len() as u64)
    }

    /// The drop cause of a chain verdict code.
    pub fn drop_cause(code: u8) -> Option<DropCause> {
        code.checked_sub(1).map(|c| DropCause::ALL[usize::from(c)])
    }

    /// The parse cause of a malformed packet's code.
    pub fn malformed_cause(code: u8) -> Malformed {
        Malformed::ALL[usize::from(code)]
    }
}
/// Packets in a functional pass's burst.
const BURST: usize = 32;

/// The functional pass over a trace: the chain run on bursts of it, each
/// packet's outcome in `pkts`.
struct Pass<'a> {
    chain: &'a mut Chain,
    shards: Vec<Option<Shard>>,
    pkts: Vec<PktInfo>,
    /// The burst, and each of its packets' index in the trace.
    batch: Vec<nf::Packet>,
    idx: Vec<usize>,
    out: Vec<Option<Verdict>>,
    /// Each of the burst's packets' slice and flags, as the chain found it.
    meta: Vec<(u16, u8)>,
}

impl Pass<'_> {
    /// Packet `i` of the trace (`frame` at `ts`, `bytes` on the wire) into
    /// the burst, or counted malformed.
    fn take(&mut self, i: usize, frame: &[u8], ts: u64, bytes: u16, priority_dscp: u8) {
        match self.chain.packet(frame.to_vec(), ts) {
            Ok(p) => {
                let flags = if p.info.dscp == priority_dscp {
                    PRIORITY
                } else {
                    0
                };
                self.pkts.push(PktInfo {
                    flags,
                    bytes,
                    ..PktInfo::default()
                });
                self.batch.push(p);
                self.idx.push(i);
            }
            Err((_, m)) => self.pkts.push(PktInfo {
                flags: MALFORMED,
                verdict: m as u8,
                bytes,
                ..PktInfo::default()
            }),
        }
    }

    /// Runs the burst; each packet's hash, entry, slice, flags, verdict and
    /// its shard's live flows into `pkts`.
    fn flush(&mut self) {
        if self.batch.is_empty() {
            return;
        }
        let now = self.batch.last().map(|p| p.ts_ns).unwrap_or(0);
        let meta = &mut self.meta;
        meta.clear();
        meta.resize(self.batch.len(), (0, 0));
        // (whether a flow is offloadable reads its state)
        let routing = nf::Routing::ReadsState;
        self.chain.process_burst_routed(
            &mut self.shards,
            &mut self.batch,
            now,
            &mut self.out,
            routing,
            |i, _, hit| {
                let slice = slice_of(hit.shard.table.key(hit.entry).mix()) as u16;
                let mut f = HIT;
                if hit.offloadable() {
                    f |= OFFLOADABLE;
                }
                meta[i] = (slice, f);
                true
            },
        );
        for ((p, v), (i, (slice, f))) in self
            .batch
            .iter()
            .zip(self.out.iter())
            .zip(self.idx.iter().zip(self.meta.iter()))
        {
            let r = &mut self.pkts[*i];
            r.hash = p.hash;
            r.entry = p.entry.map_or(0, |e| e.0);
            r.slice = *slice;
            r.flags |= f;
            if f & HIT == 0 && p.entry.is_some() {
                r.flags |= REPLAY_HIT;
            }
            r.verdict = match v.expect("every packet runs here") {
                Verdict::Forward => 0,
                Verdict::Drop(c) => {
                    1 + DropCause::ALL.iter().position(|x| *x == c).unwrap_or(0) as u8
                }
            };
            if let Some(s) = &self.shards[self.chain.shard_of(p.hash)] {
                r.live = s.table.len().min(u32::MAX as usize) as u32;
            }
        }
        self.batch.clear();
        self.idx.clear();
    }
}

/// Gives each entry-creating packet the slice and offloadability of its flow's
/// next hit (a backward pass; an entry expired and reused later in the trace
/// belongs to another flow, so each creation ends the search). A flow with no
/// later hit stays not offloadable.
fn replay_hits(pkts: &mut [PktInfo], buckets: usize, shards: usize) {
    let mask = buckets - 1;
    let mut next: std::collections::HashMap<(usize, u32), (u16, u8)> = Default::default();
    for p in pkts.iter_mut().rev() {
        let key = ((p.hash as usize & mask) % shards, p.entry);
        if p.flags & HIT != 0 {
            next.insert(key, (p.slice, p.flags & OFFLOADABLE));
        } else if p.flags & REPLAY_HIT != 0 {
            let (slice, off) = next.remove(&key).unwrap_or((0, 0));
            p.slice = slice;
            p.flags |= off;
        }
    }
}

//! The event loop: virtual time, the NIC model steering through the live
//! indirection table into bounded per-core queues, working and offloading cores
//! serving bursts with times from the cost model, and the controller running the
//! balancer every period. Shard moves and flow offloads are carried out by the
//! runtime's own state machines ([`Mover`], [`WorkerMoves`], [`WorkingOffload`]),
//! driven here by events instead of threads.
//!
//! Ordering of simultaneous events is by insertion (a sequence number), so a run is
//! a pure function of its inputs.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use balance::migrate::heavy::{self, Sampler, TopK};
use balance::migrate::offload::{EntryIdx, Ticket};
use balance::migrate::RATIO_ONE;
use balance::migrate::{Command, Mover, Recall, Received, Route, WorkerMoves, WorkingOffload};
use balance::{Balancer, CoreId, ShardId, Snapshot};
use hdrhistogram::Histogram;
use runtime::{BalancerKind, OffloadSelect, RunConfig};
use steer::IndirectionTable;
use trace::{Pace, Schedule, Trace};

use crate::cost::CostModel;
use crate::prep::{Prepared, HIT, MALFORMED, OFFLOADABLE, PRIORITY};

/// Offloaded flows idle this long are recalled (as in the runtime).
const IDLE_RECALL_NS: u64 = 50_000_000;
/// How often a working core checks for idle offloaded flows (as in the runtime).
const TIMER_NS: u64 = 10_000_000;

/// A packet in the model: its trace index and arrival stamp.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SimPkt {
    pub idx: u32,
    /// Emission number (orders a flow's packets across loops).
    pub n: u64,
    pub at: u64,
}

/// A job in an offload ring, ready once its sender finished the burst.
enum Job {
    Pkt {
        ready: u64,
        shard: ShardId,
        lease: bool,
        pkt: SimPkt,
    },
    Recall {
        ready: u64,
        ticket: Ticket,
        entries: Vec<(ShardId, EntryIdx)>,
    },
}

impl Job {
    fn ready(&self) -> u64 {
        match self {
            Job::Pkt { ready, .. } | Job::Recall { ready, .. } => *ready,
        }
    }
}

/// Messages between cores and the controller.
enum Msg {
    Release {
        shard: ShardId,
        to: CoreId,
    },
    Shard {
        shard: ShardId,
        entries: u64,
    },
    SetRatio {
        shard: ShardId,
        ratio: u32,
    },
    SetOffloader {
        to: Option<CoreId>,
    },
    Returned {
        ticket: Ticket,
        entries: Vec<(ShardId, EntryIdx)>,
    },
}

enum Ev {
    Feed,
    Core(u16),
    Offloader(u16),
    Tick,
    Rewrite {
        shard: ShardId,
        to: CoreId,
        version: u64,
    },
    ToCore(u16, Msg),
    Arrived {
        shard: ShardId,
        entries: u64,
        held: u64,
    },
}

struct Item {
    t: u64,
    seq: u64,
    ev: Ev,
}

impl PartialEq for Item {
    fn eq(&self, o: &Self) -> bool {
        (self.t, self.seq) == (o.t, o.seq)
    }
}
impl Eq for Item {}
impl PartialOrd for Item {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Item {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        (self.t, self.seq).cmp(&(o.t, o.seq))
    }
}

/// A working core.
struct Working {
    ring: VecDeque<SimPkt>,
    inbox: VecDeque<Msg>,
    /// The time of its pending wake-up event (later ones are stale).
    scheduled: Option<u64>,
    busy_until: u64,
    moves: WorkerMoves<SimPkt>,
    offload: WorkingOffload<SimPkt>,
    /// Shard objects present here (owned, or released but not yet handed over).
    present: Vec<bool>,
    deferred: Vec<(ShardId, CoreId)>,
    /// Offload jobs waiting for ring space (the core stalls until they are in).
    outbox: VecDeque<(CoreId, Job)>,
    next_timer: u64,
    next_window: u64,
    heavy: Vec<TopK>,
    last_heavy: Vec<Vec<(EntryIdx, f64)>>,
    published_heavy: Vec<Vec<f64>>,
    sampler: Sampler,
    recalled_all: bool,
    stats: CoreStats,
}

/// An offloading core.
struct Offloading {
    /// One ring per working core.
    rings: Vec<VecDeque<Job>>,
    scheduled: Option<u64>,
    busy_until: u64,
    rr: usize,
    leased: u64,
    stats: CoreStats,
}

#[derive(Clone, Debug, Default)]
pub(crate) struct CoreStats {
    pub busy_ns: u64,
    pub packets: u64,
    pub priority: u64,
    /// At the previous controller round.
    pub prev_busy: u64,
    pub prev_packets: u64,
    pub stalls: u64,
}

/// What the run counted, for the report.
pub(crate) struct Tally {
    pub offered: u64,
    pub bytes: u64,
    pub ring_full: u64,
    pub malformed: Vec<u64>,
    pub forwarded: u64,
    pub dropped: Vec<u64>,
    pub created: u64,
    pub reordered: u64,
    pub latency: [Histogram<u64>; 2],
    pub feed_ns: u64,
    pub end_ns: u64,
    pub rounds: u64,
    pub shard_moves: u64,
    pub offload_changes: u64,
    pub entries_moved: u64,
    pub packets_held: u64,
    pub move_ns: Vec<u64>,
    pub load_over_time: Vec<(u64, Vec<f64>)>,
    pub cores: Vec<CoreStats>,
    pub offload: balance::migrate::OffloadStats,
    pub held_left: u64,
    pub leased_left: u64,
    pub balancer: Vec<(&'static str, f64)>,
    pub events: u64,
}

pub(crate) struct Engine<'a> {
    prep: &'a Prepared,
    trace: &'a Trace,
    cfg: &'a RunConfig,
    model: &'a CostModel,
    chain_ns: f64,
    heap: BinaryHeap<Reverse<Item>>,
    seq: u64,
    now: u64,
    table: IndirectionTable,
    mask: usize,
    version: u64,
    // NIC model
    schedule: Schedule,
    total: u64,
    n: u64,
    feeder_clock: u64,
    feed_scheduled: bool,
    blocked_on: Option<usize>,
    burst_left: usize,
    burst_version: u64,
    feeding_done: bool,
    stopping: bool,
    // cores
    working: Vec<Working>,
    offloading: Vec<Offloading>,
    // controller
    balancer: Box<dyn Balancer>,
    mover: Mover,
    owner: Vec<CoreId>,
    ratio: Vec<u32>,
    offload_core: Vec<Option<CoreId>>,
    period: u64,
    move_started: Vec<Option<u64>>,
    bucket_packets: Vec<u64>,
    bucket_priority: Vec<u64>,
    prev_t: u64,
    // flow model
    win_id: u32,
    /// Per shard, per entry: the last window the flow was seen in (+1).
    seen_win: Vec<Vec<u32>>,
    win_cur: Vec<u32>,
    win_last: Vec<u32>,
    /// Per shard, per entry: emission number of the last packet processed.
    last_n: Vec<Vec<u64>>,
    entries: Vec<u64>,
    /// Time of the last event other than a controller round.
    last_activity: u64,
    t: Tally,
}

fn hist() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000_000, 3).expect("valid bounds")
}

impl<'a> Engine<'a> {
    pub fn new(
        prep: &'a Prepared,
        trace: &'a Trace,
        cfg: &'a RunConfig,
        model: &'a CostModel,
        chain_ns: f64,
    ) -> Result<Engine<'a>, String> {
        let w = cfg.workers;
        let o = cfg.offloaders;
        let shards = prep.shards;
        let table = IndirectionTable::new(prep.buckets, 1).map_err(|e| e.to_string())?;
        let owner: Vec<CoreId> = (0..shards).map(|s| (s % w) as CoreId).collect();
        for b in 0..table.len() {
            table.set(b, owner[b % shards]);
        }
        let ratio0 = if o > 0 {
            (cfg.offload_ratio * f64::from(RATIO_ONE)).round() as u32
        } else {
            0
        };
        let offload_core: Vec<Option<CoreId>> =
            (0..w).map(|i| (o > 0).then(|| (i % o) as CoreId)).collect();
        let period = cfg.period.as_nanos().max(1) as u64;
        let working = (0..w)
            .map(|i| {
                let mine: Vec<ShardId> = (0..shards)
                    .filter(|s| s % w == i)
                    .map(|s| s as ShardId)
                    .collect();
                let mut offload = WorkingOffload::new(shards, offload_core[i]);
                for s in &mine {
                    offload.set_ratio(*s, ratio0);
                }
                let mut present = vec![false; shards];
                for s in &mine {
                    present[usize::from(*s)] = true;
                }
                Working {
                    ring: VecDeque::with_capacity(cfg.ring_size),
                    inbox: VecDeque::new(),
                    scheduled: None,
                    busy_until: 0,
                    moves: WorkerMoves::new(mine),
                    offload,
                    present,
                    deferred: Vec::new(),
                    outbox: VecDeque::new(),
                    next_timer: TIMER_NS,
                    next_window: period,
                    heavy: vec![TopK::default(); shards],
                    last_heavy: vec![Vec::new(); shards],
                    published_heavy: vec![Vec::new(); shards],
                    sampler: Sampler::default(),
                    recalled_all: false,
                    stats: CoreStats::default(),
                }
            })
            .collect();
        let offloading = (0..o)
            .map(|_| Offloading {
                rings: (0..w).map(|_| VecDeque::new()).collect(),
                scheduled: None,
                busy_until: 0,
                rr: 0,
                leased: 0,
                stats: CoreStats::default(),
            })
            .collect();
        let loops = if cfg.duration.is_some() {
            u32::MAX
        } else {
            cfg.loops.max(1)
        };
        let schedule = Schedule {
            pace: cfg.pace,
            loops,
        };
        let buckets = table.len();
        Ok(Engine {
            prep,
            trace,
            cfg,
            model,
            chain_ns,
            heap: BinaryHeap::new(),
            seq: 0,
            now: 0,
            mask: buckets - 1,
            table,
            version: 0,
            total: schedule.packets(trace),
            schedule,
            n: 0,
            feeder_clock: 0,
            feed_scheduled: false,
            blocked_on: None,
            burst_left: 0,
            burst_version: 0,
            feeding_done: false,
            stopping: false,
            working,
            offloading,
            balancer: cfg.balancer.make(cfg.seed),
            mover: Mover::new(0),
            owner,
            ratio: vec![ratio0; shards],
            offload_core,
            period,
            move_started: vec![None; shards],
            bucket_packets: vec![0; buckets],
            bucket_priority: vec![0; buckets],
            prev_t: 0,
            win_id: 1,
            seen_win: vec![Vec::new(); shards],
            win_cur: vec![0; shards],
            win_last: vec![0; shards],
            last_n: vec![Vec::new(); shards],
            entries: vec![0; shards],
            last_activity: 0,
            t: Tally {
                offered: 0,
                bytes: 0,
                ring_full: 0,
                malformed: vec![0; wire::Malformed::ALL.len()],
                forwarded: 0,
                dropped: vec![0; nf::DropCause::ALL.len()],
                created: 0,
                reordered: 0,
                latency: [hist(), hist()],
                feed_ns: 0,
                end_ns: 0,
                rounds: 0,
                shard_moves: 0,
                offload_changes: 0,
                entries_moved: 0,
                packets_held: 0,
                move_ns: Vec::new(),
                load_over_time: Vec::new(),
                cores: Vec::new(),
                offload: Default::default(),
                held_left: 0,
                leased_left: 0,
                balancer: Vec::new(),
                events: 0,
            },
        })
    }

    fn at(&mut self, t: u64, ev: Ev) {
        self.seq += 1;
        self.heap.push(Reverse(Item {
            t,
            seq: self.seq,
            ev,
        }));
    }

    fn wake_core(&mut self, c: usize) {
        self.wake_core_at(c, self.now);
    }

    /// Wakes working core `c` at `t` (or when it is free), unless it wakes earlier.
    fn wake_core_at(&mut self, c: usize, t: u64) {
        let wk = &mut self.working[c];
        let t = t.max(self.now).max(wk.busy_until);
        if wk.scheduled.is_none_or(|s| s > t) {
            wk.scheduled = Some(t);
            self.at(t, Ev::Core(c as u16));
        }
    }

    fn wake_offloader(&mut self, k: usize, t: u64) {
        let of = &mut self.offloading[k];
        let t = t.max(self.now).max(of.busy_until);
        if of.scheduled.is_none_or(|s| s > t) {
            of.scheduled = Some(t);
            self.at(t, Ev::Offloader(k as u16));
        }
    }

    fn wake_feeder(&mut self, t: u64) {
        if !self.feed_scheduled && !self.feeding_done {
            self.feed_scheduled = true;
            self.at(t.max(self.now), Ev::Feed);
        }
    }

    /// Runs to the end and returns what it counted.
    pub fn run(mut self) -> Tally {
        self.wake_feeder(0);
        self.at(self.period, Ev::Tick);
        while let Some(Reverse(it)) = self.heap.pop() {
            self.now = it.t;
            self.t.events += 1;
            // a round after the last packet is not part of the run
            if !matches!(it.ev, Ev::Tick) {
                self.last_activity = self.last_activity.max(it.t);
            }
            match it.ev {
                Ev::Feed => {
                    self.feed_scheduled = false;
                    self.feed();
                }
                Ev::Core(c) => {
                    let wk = &mut self.working[usize::from(c)];
                    if wk.scheduled == Some(it.t) {
                        wk.scheduled = None;
                        self.core_step(usize::from(c));
                    }
                }
                Ev::Offloader(k) => {
                    let of = &mut self.offloading[usize::from(k)];
                    if of.scheduled == Some(it.t) {
                        of.scheduled = None;
                        self.offloader_step(usize::from(k));
                    }
                }
                Ev::Tick => self.tick(),
                Ev::Rewrite { shard, to, version } => self.rewrite(shard, to, version),
                Ev::ToCore(c, m) => {
                    self.working[usize::from(c)].inbox.push_back(m);
                    self.wake_core(usize::from(c));
                }
                Ev::Arrived {
                    shard,
                    entries,
                    held,
                } => {
                    assert!(
                        self.mover.on_arrived(shard),
                        "shard {shard} arrived but was not moving"
                    );
                    self.t.entries_moved += entries;
                    self.t.packets_held += held;
                    if let Some(t0) = self.move_started[usize::from(shard)].take() {
                        self.t.move_ns.push(self.now - t0);
                    }
                    self.maybe_stop();
                }
            }
        }
        self.finish()
    }

    fn finish(mut self) -> Tally {
        let mut end = self.last_activity;
        for wk in &self.working {
            end = end.max(wk.busy_until);
            self.t.held_left += wk.moves.held() + wk.offload.pending() as u64;
            let s = wk.offload.stats();
            let o = &mut self.t.offload;
            o.leases += s.leases;
            o.recalled += s.recalled;
            o.recalls += s.recalls;
            o.pended += s.pended;
        }
        for of in &self.offloading {
            end = end.max(of.busy_until);
            self.t.leased_left += of.leased;
        }
        self.t.end_ns = end.max(1);
        self.t.cores = self
            .working
            .iter()
            .map(|w| w.stats.clone())
            .chain(self.offloading.iter().map(|o| o.stats.clone()))
            .collect();
        self.t.balancer = self.balancer.counters();
        self.t
    }

    // ---- NIC model ------------------------------------------------------------

    fn feed(&mut self) {
        if let Some(q) = self.blocked_on {
            if self.working[q].ring.len() >= self.cfg.ring_size {
                return; // still full; the core wakes the feeder when it takes packets
            }
            self.blocked_on = None;
        }
        let timed = matches!(self.schedule.pace, Pace::Timed { .. });
        let nic = self.model.nic_ns;
        // one event emits what the NIC model emits in one burst's time; each
        // packet keeps its own arrival stamp and no core takes it before then
        let horizon = self.now + (nic * self.cfg.burst as f64).round() as u64;
        if self.burst_left == 0 {
            self.burst_left = self.cfg.burst;
            self.burst_version = self.version;
        }
        while self.burst_left > 0 {
            let Some((i, rel)) = self.schedule.release(self.trace, self.n) else {
                self.burst_left = 0;
                break;
            };
            if let Some(d) = self.cfg.duration {
                if self.feeder_clock >= d.as_nanos() as u64 {
                    self.burst_left = 0;
                    self.total = self.n;
                    break;
                }
            }
            // (after waiting on a full queue the NIC model's clock is now)
            let emit = self.feeder_clock.max(rel).max(self.now);
            if emit > horizon {
                // not yet: the burst goes on when the packet is due
                self.wake_feeder(emit);
                return;
            }
            let info = self.prep.pkts[i];
            if !timed && info.flags & MALFORMED == 0 {
                let q = usize::from(self.table.queue_of(info.hash));
                if self.working[q].ring.len() >= self.cfg.ring_size {
                    self.blocked_on = Some(q);
                    return;
                }
            }
            self.n += 1;
            self.feeder_clock = emit + nic.round() as u64;
            self.t.offered += 1;
            self.t.bytes += u64::from(info.bytes);
            if info.flags & MALFORMED != 0 {
                self.t.malformed[usize::from(info.verdict)] += 1;
            } else {
                let q = usize::from(self.table.queue_of(info.hash));
                if self.working[q].ring.len() >= self.cfg.ring_size {
                    self.t.ring_full += 1;
                } else {
                    self.working[q].ring.push_back(SimPkt {
                        idx: i as u32,
                        n: self.n,
                        at: emit,
                    });
                    self.wake_core_at(q, emit);
                }
            }
            self.burst_left -= 1;
        }
        // every packet steered by a table of version ≤ burst_version is queued
        self.t.feed_ns = self.feeder_clock;
        let seen = self.burst_version;
        for c in self.mover.on_feeder_seen(seen) {
            if let Command::Release { from, shard, to } = c {
                self.send(from, Msg::Release { shard, to }, self.now);
            }
        }
        if self.n >= self.total {
            if !self.feeding_done {
                self.feeding_done = true;
                self.maybe_stop();
            }
        } else {
            let t = self.feeder_clock;
            self.wake_feeder(t);
        }
    }

    fn maybe_stop(&mut self) {
        if self.feeding_done && self.mover.in_flight() == 0 && !self.stopping {
            self.stopping = true;
            for c in 0..self.working.len() {
                self.wake_core(c);
            }
        }
    }

    fn send(&mut self, to: CoreId, m: Msg, from_t: u64) {
        let t = from_t + self.model.message_ns.round() as u64;
        self.at(t, Ev::ToCore(to, m));
    }

    // ---- controller -----------------------------------------------------------

    fn tick(&mut self) {
        if self.feeding_done {
            return; // the runtime's controller stops its rounds then too
        }
        // the flow working-set window rolls with the period
        self.win_id += 1;
        self.win_last.clone_from(&self.win_cur);
        self.win_cur.iter_mut().for_each(|x| *x = 0);
        self.t.rounds += 1;
        let snap = self.snapshot();
        self.t
            .load_over_time
            .push((self.now, snap.core_load.clone()));
        let plan = self.balancer.plan(&snap);
        let next = plan.next_period_ns.map_or(self.period, |p| p.max(1));
        self.period = next;
        self.at(self.now + next, Ev::Tick);
        for (s, to) in plan.moves {
            let from = self.owner[usize::from(s)];
            if usize::from(to) >= self.working.len() {
                continue;
            }
            if let Ok(Command::Rewrite { shard, to, version }) = self.mover.begin(s, from, to) {
                let delay = self.cfg.nic_update_delay.as_nanos() as u64;
                if delay == 0 {
                    self.rewrite(shard, to, version);
                } else {
                    self.at(self.now + delay, Ev::Rewrite { shard, to, version });
                }
                self.owner[usize::from(shard)] = to;
                self.ratio[usize::from(shard)] = 0;
                self.move_started[usize::from(shard)] = Some(self.now);
                self.t.shard_moves += 1;
            }
        }
        for (s, r) in plan.ratios {
            let i = usize::from(s);
            if i >= self.ratio.len() || self.mover.is_moving(s) || self.ratio[i] == r {
                continue;
            }
            self.ratio[i] = r;
            let owner = self.owner[i];
            self.send(owner, Msg::SetRatio { shard: s, ratio: r }, self.now);
            self.t.offload_changes += 1;
        }
        for (w, o) in plan.offload_cores {
            let i = usize::from(w);
            let valid = o.is_none_or(|o| usize::from(o) < self.offloading.len());
            if i >= self.working.len() || !valid || self.offload_core[i] == o {
                continue;
            }
            self.offload_core[i] = o;
            self.send(w, Msg::SetOffloader { to: o }, self.now);
            self.t.offload_changes += 1;
        }
    }

    fn rewrite(&mut self, shard: ShardId, to: CoreId, version: u64) {
        let shards = self.prep.shards;
        for b in (usize::from(shard)..self.table.len()).step_by(shards) {
            self.table.set(b, to);
        }
        self.version = self.version.max(version);
    }

    fn snapshot(&mut self) -> Snapshot {
        let period_ns = (self.now - self.prev_t).max(1);
        self.prev_t = self.now;
        let mut core_load = Vec::new();
        let mut core_packets = Vec::new();
        let mut core_queue = Vec::new();
        let all = self
            .working
            .iter_mut()
            .map(|w| (&mut w.stats, w.ring.len() as u64))
            .chain(
                self.offloading
                    .iter_mut()
                    .map(|o| (&mut o.stats, o.rings.iter().map(|r| r.len() as u64).sum())),
            );
        for (st, q) in all {
            core_load.push(((st.busy_ns - st.prev_busy) as f64 / period_ns as f64).min(1.0));
            core_packets.push(st.packets - st.prev_packets);
            st.prev_busy = st.busy_ns;
            st.prev_packets = st.packets;
            core_queue.push(q);
        }
        let shards = self.prep.shards;
        Snapshot {
            now_ns: self.now,
            period_ns,
            shards,
            workers: self.working.len(),
            owner: self.owner.clone(),
            moving: (0..shards as ShardId)
                .filter(|s| self.mover.is_moving(*s))
                .collect(),
            bucket_packets: std::mem::replace(&mut self.bucket_packets, vec![0; self.mask + 1]),
            core_load,
            core_packets,
            offloaders: self.offloading.len(),
            ratio: self.ratio.clone(),
            offload_core: self.offload_core.clone(),
            bucket_priority: std::mem::replace(&mut self.bucket_priority, vec![0; self.mask + 1]),
            core_queue,
            shard_heavy: (0..shards)
                .map(|s| self.working[usize::from(self.owner[s])].published_heavy[s].clone())
                .collect(),
        }
    }

    // ---- working cores --------------------------------------------------------

    /// Cost of a packet on working core `c` now.
    fn packet_cost(&self, c: usize) -> f64 {
        let wk = &self.working[c];
        let mut flows = 0u64;
        let mut owned = 0u32;
        for s in wk.moves.owned() {
            let s = usize::from(s);
            flows += u64::from(self.win_cur[s].max(self.win_last[s]));
            owned += 1;
        }
        self.model
            .packet_ns(self.chain_ns, flows as f64, f64::from(owned.max(1)))
    }

    /// Accounts one packet run to completion at `done` on core `c` (its cost is
    /// added by the caller).
    fn sink(&mut self, pkt: SimPkt, done: u64, core: Option<usize>) {
        let info = self.prep.pkts[pkt.idx as usize];
        let shard = (info.hash as usize & self.mask) % self.prep.shards;
        let prio = info.flags & PRIORITY != 0;
        self.t.latency[usize::from(!prio)].saturating_record(done.saturating_sub(pkt.at).max(1));
        match Prepared::drop_cause(info.verdict) {
            None => self.t.forwarded += 1,
            Some(_) => self.t.dropped[usize::from(info.verdict - 1)] += 1,
        }
        if info.flags & HIT == 0 {
            self.t.created += 1;
            self.entries[shard] += 1;
        }
        if self.prep.per_flow {
            let e = info.entry as usize;
            let v = &mut self.last_n[shard];
            if v.len() <= e {
                v.resize(e + 1, 0);
            }
            if pkt.n < v[e] {
                self.t.reordered += 1;
            } else {
                v[e] = pkt.n;
            }
            let w = &mut self.seen_win[shard];
            if w.len() <= e {
                w.resize(e + 1, 0);
            }
            if w[e] != self.win_id {
                w[e] = self.win_id;
                self.win_cur[shard] += 1;
            }
        }
        let st = match core {
            Some(c) => &mut self.working[c].stats,
            None => return,
        };
        st.packets += 1;
        st.priority += u64::from(prio);
    }

    fn new_flow_cost(&self, idx: u32) -> f64 {
        if self.prep.pkts[idx as usize].flags & HIT == 0 {
            self.model.new_flow_ns
        } else {
            0.0
        }
    }

    /// Runs packets of owned shards here, in order; returns their cost.
    fn process_here(&mut self, c: usize, pkts: Vec<SimPkt>, start: u64) -> f64 {
        if pkts.is_empty() {
            return 0.0;
        }
        let per = self.packet_cost(c);
        let cost: f64 = pkts.iter().map(|p| per + self.new_flow_cost(p.idx)).sum();
        let done = start + cost.round() as u64;
        for p in pkts {
            self.sink(p, done, Some(c));
        }
        cost
    }

    fn push_recall(&mut self, c: usize, r: Recall, ready: u64) {
        self.working[c].outbox.push_back((
            r.to,
            Job::Recall {
                ready,
                ticket: r.ticket,
                entries: r.entries,
            },
        ));
    }

    /// Moves a core's outbox into the offload rings while there is room.
    fn flush_outbox(&mut self, c: usize) {
        let cap = self.cfg.ring_size;
        while let Some((to, _)) = self.working[c].outbox.front() {
            let k = usize::from(*to);
            if self.offloading[k].rings[c].len() >= cap {
                self.working[c].stats.stalls += 1;
                return;
            }
            let (_, job) = self.working[c].outbox.pop_front().expect("checked");
            let ready = job.ready();
            self.offloading[k].rings[c].push_back(job);
            self.wake_offloader(k, ready);
        }
    }

    fn hand_over_when_settled(&mut self, c: usize, shard: ShardId, to: CoreId, at: u64) {
        if self.working[c].offload.is_settled(shard) {
            self.working[c].present[usize::from(shard)] = false;
            let entries = self.entries[usize::from(shard)];
            self.send(to, Msg::Shard { shard, entries }, at);
        } else {
            self.working[c].deferred.push((shard, to));
        }
    }

    fn on_message(&mut self, c: usize, m: Msg, start: u64, cost: &mut f64) {
        match m {
            Msg::Release { shard, to } => {
                if let Some(r) = self.working[c].offload.recall_shard(shard) {
                    self.push_recall(c, r, start);
                }
                let queued = self.working[c].ring.len() as u64;
                if let Some((s, to)) = self.working[c].moves.on_release(shard, to, queued) {
                    self.hand_over_when_settled(c, s, to, start);
                }
            }
            Msg::Shard { shard, entries } => {
                self.working[c].present[usize::from(shard)] = true;
                let held: Vec<SimPkt> = self.working[c].moves.on_shard(shard).into();
                let n = held.len() as u64;
                // the new owner's caches warm up on the moved entries
                *cost += entries as f64 * self.model.warm_ns_per_entry;
                let at = start + cost.round() as u64;
                *cost += self.process_here(c, held, at);
                let done = start + cost.round() as u64 + self.model.message_ns.round() as u64;
                self.at(
                    done,
                    Ev::Arrived {
                        shard,
                        entries,
                        held: n,
                    },
                );
            }
            Msg::SetRatio { shard, ratio } => {
                let wk = &mut self.working[c];
                if wk.present[usize::from(shard)] && !wk.moves.is_releasing(shard) {
                    if let Some(r) = wk.offload.set_ratio(shard, ratio) {
                        self.push_recall(c, r, start);
                    }
                    if self.cfg.offload_select == OffloadSelect::Heaviest {
                        self.select_heaviest(c, shard, start);
                    }
                }
            }
            Msg::SetOffloader { to } => {
                if let Some(r) = self.working[c].offload.set_target(to) {
                    self.push_recall(c, r, start);
                }
            }
            Msg::Returned { ticket, entries } => {
                let ready: Vec<SimPkt> = self.working[c]
                    .offload
                    .on_returned(ticket, &entries)
                    .into_iter()
                    .map(|(_, p)| p)
                    .collect();
                *cost += entries.len() as f64 * self.model.warm_ns_per_entry;
                let at = start + cost.round() as u64;
                *cost += self.process_here(c, ready, at);
                let deferred = std::mem::take(&mut self.working[c].deferred);
                let at = start + cost.round() as u64;
                for (s, to) in deferred {
                    self.hand_over_when_settled(c, s, to, at);
                }
            }
        }
    }

    fn select_heaviest(&mut self, c: usize, shard: ShardId, at: u64) {
        let wk = &mut self.working[c];
        let r = f64::from(wk.offload.ratio(shard)) / f64::from(RATIO_ONE);
        let ids = heavy::eligible(&wk.last_heavy[usize::from(shard)], r);
        if let Some(rc) = wk.offload.set_eligible(shard, Some(ids)) {
            self.push_recall(c, rc, at);
        }
    }

    fn close_window(&mut self, c: usize, at: u64) {
        let heaviest = self.cfg.offload_select == OffloadSelect::Heaviest;
        for s in 0..self.prep.shards {
            let wk = &mut self.working[c];
            let h = wk.heavy[s].take();
            if !wk.present[s] {
                continue;
            }
            wk.published_heavy[s] = h.iter().map(|x| x.1).collect();
            wk.last_heavy[s] = h;
            if heaviest && !wk.moves.is_releasing(s as ShardId) {
                self.select_heaviest(c, s as ShardId, at);
            }
        }
    }

    fn core_step(&mut self, c: usize) {
        let start = self.now;
        // a stalled core first waits for room in the offload ring
        self.flush_outbox(c);
        if !self.working[c].outbox.is_empty() {
            return; // the offloading core wakes it
        }
        if start >= self.working[c].next_timer {
            self.working[c].next_timer = start + TIMER_NS;
            if let Some(r) = self.working[c].offload.recall_idle(start, IDLE_RECALL_NS) {
                self.push_recall(c, r, start);
            }
        }
        if start >= self.working[c].next_window {
            self.working[c].next_window = start + self.period;
            self.close_window(c, start);
        }
        let mut cost = 0.0;
        while let Some(m) = self.working[c].inbox.pop_front() {
            self.on_message(c, m, start, &mut cost);
        }
        // packets that have arrived by now (stamps are in FIFO order)
        let n = self.working[c]
            .ring
            .iter()
            .take(self.cfg.burst)
            .take_while(|p| p.at <= start)
            .count();
        if n > 0 && self.blocked_on == Some(c) {
            self.wake_feeder(start);
        }
        let offloading = !self.offloading.is_empty();
        let per = self.packet_cost(c);
        let mut batch: Vec<(SimPkt, ShardId)> = Vec::with_capacity(n);
        for _ in 0..n {
            let p = self.working[c].ring.pop_front().expect("n ≤ len");
            let info = self.prep.pkts[p.idx as usize];
            let b = info.hash as usize & self.mask;
            self.bucket_packets[b] += 1;
            if info.flags & PRIORITY != 0 {
                self.bucket_priority[b] += 1;
            }
            let s = (b % self.prep.shards) as ShardId;
            if let Received::Process(p) = self.working[c].moves.on_packet(s, p) {
                batch.push((p, s));
            }
        }
        let mut here: Vec<SimPkt> = Vec::with_capacity(batch.len());
        let mut burst_cost = 0.0;
        for (p, s) in batch {
            let info = self.prep.pkts[p.idx as usize];
            let wk = &mut self.working[c];
            let hit = info.flags & HIT != 0;
            if hit && wk.sampler.tick() {
                wk.heavy[usize::from(s)].add(info.entry);
            }
            let route = if offloading && hit {
                wk.offload.route(
                    s,
                    Some(info.entry),
                    u32::from(info.slice),
                    info.flags & PRIORITY != 0,
                    start,
                    || info.flags & OFFLOADABLE != 0,
                )
            } else {
                Route::Local
            };
            match route {
                Route::Local => {
                    burst_cost += per + self.new_flow_cost(p.idx);
                    here.push(p);
                }
                Route::Offload { to, lease } => {
                    // lookup and hand-off cost on this core; the rest runs there
                    burst_cost += self.model.overhead_ns;
                    wk.outbox.push_back((
                        to,
                        Job::Pkt {
                            ready: 0, // set below, at the end of the burst
                            shard: s,
                            lease,
                            pkt: p,
                        },
                    ));
                }
                Route::Pend(t) => wk.offload.pend(t, s, p),
            }
        }
        cost += burst_cost;
        let done = start + cost.round() as u64;
        for p in here {
            self.sink(p, done, Some(c));
        }
        for (_, job) in self.working[c].outbox.iter_mut() {
            let (Job::Pkt { ready, .. } | Job::Recall { ready, .. }) = job;
            *ready = (*ready).max(done);
        }
        for _ in 0..n {
            let outs = self.working[c].moves.on_dequeued();
            for (s, to) in outs {
                self.hand_over_when_settled(c, s, to, done);
            }
        }
        // the end of the run: idle, nothing queued, every flow home first
        if n == 0 && cost == 0.0 && self.stopping && self.working[c].inbox.is_empty() {
            let wk = &mut self.working[c];
            if wk.offload.away() > 0 && !wk.recalled_all {
                wk.recalled_all = true;
                if let Some(r) = wk.offload.recall_all() {
                    self.push_recall(c, r, start);
                }
            }
        }
        let wk = &mut self.working[c];
        let cost_ns = cost.round() as u64;
        wk.stats.busy_ns += cost_ns;
        wk.busy_until = start + cost_ns;
        self.flush_outbox(c);
        let wk = &self.working[c];
        let must_recall = self.stopping && !wk.recalled_all && wk.offload.away() > 0;
        if !wk.inbox.is_empty() || (!wk.outbox.is_empty() && cost_ns > 0) || must_recall {
            self.wake_core(c);
        } else if let Some(p) = wk.ring.front() {
            let t = p.at;
            self.wake_core_at(c, t);
        }
    }

    // ---- offloading cores -----------------------------------------------------

    fn offloader_step(&mut self, k: usize) {
        let start = self.now;
        let w = self.working.len();
        let per = self
            .model
            .packet_ns(self.chain_ns, self.offloading[k].leased as f64, 1.0)
            + self.model.offload_ns;
        let mut cost = 0.0;
        let mut next_ready: Option<u64> = None;
        for step in 0..w {
            let c = (self.offloading[k].rr + step) % w;
            for _ in 0..self.cfg.burst {
                let Some(job) = self.offloading[k].rings[c].front() else {
                    break;
                };
                let ready = job.ready();
                if ready > start {
                    next_ready = Some(next_ready.map_or(ready, |r: u64| r.min(ready)));
                    break;
                }
                let job = self.offloading[k].rings[c].pop_front().expect("checked");
                match job {
                    Job::Pkt {
                        lease, pkt, shard, ..
                    } => {
                        let _ = shard;
                        if lease {
                            self.offloading[k].leased += 1;
                            cost += self.model.warm_ns_per_entry;
                        }
                        cost += per + self.new_flow_cost(pkt.idx);
                        let done = start + cost.round() as u64;
                        self.sink(pkt, done, None);
                        let info = self.prep.pkts[pkt.idx as usize];
                        let st = &mut self.offloading[k].stats;
                        st.packets += 1;
                        st.priority += u64::from(info.flags & PRIORITY != 0);
                    }
                    Job::Recall {
                        ticket, entries, ..
                    } => {
                        let of = &mut self.offloading[k];
                        of.leased = of.leased.saturating_sub(entries.len() as u64);
                        let done = start + cost.round() as u64;
                        self.send(c as CoreId, Msg::Returned { ticket, entries }, done);
                    }
                }
                // room in the ring: a stalled working core goes on
                if !self.working[c].outbox.is_empty() {
                    self.wake_core(c);
                }
            }
        }
        let of = &mut self.offloading[k];
        of.rr = (of.rr + 1) % w.max(1);
        let cost_ns = cost.round() as u64;
        of.stats.busy_ns += cost_ns;
        of.busy_until = start + cost_ns;
        let more = of
            .rings
            .iter()
            .any(|r| r.front().is_some_and(|j| j.ready() <= of.busy_until));
        if more {
            self.wake_offloader(k, start + cost_ns);
        } else if let Some(t) = next_ready.or_else(|| {
            self.offloading[k]
                .rings
                .iter()
                .filter_map(|r| r.front().map(Job::ready))
                .min()
        }) {
            self.wake_offloader(k, t);
        }
    }
}

/// True if the balancer kind can be simulated.
pub(crate) fn supported(kind: &BalancerKind) -> Result<(), String> {
    match kind {
        BalancerKind::Sprayer => Err(
            "the simulator does not model the sprayer balancer (it steers packets, not flows): \
             use `flowshift run`"
                .into(),
        ),
        _ => Ok(()),
    }
}

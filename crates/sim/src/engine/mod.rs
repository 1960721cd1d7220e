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

use balance::migrate::heavy::{Sampler, TopK};
use balance::migrate::offload::{EntryIdx, Ticket};
use balance::migrate::RATIO_ONE;
use balance::migrate::{Mover, WorkerMoves, WorkingOffload};
use balance::{Balancer, CoreId, ShardId};
use hdrhistogram::Histogram;
use runtime::{BalancerKind, RunConfig};
use steer::IndirectionTable;
use trace::{Schedule, Trace};

use crate::cost::CostModel;

mod controller;
mod nic;
mod offloading;
mod working;
use crate::prep::Prepared;

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
    /// Per-packet cost and when it was computed (none: recompute).
    cost_cache: Option<(u64, f64)>,
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
    scratch_batch: Vec<(SimPkt, ShardId)>,
    scratch_here: Vec<SimPkt>,
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
                    cost_cache: None,
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
            scratch_batch: Vec::new(),
            scratch_here: Vec::new(),
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

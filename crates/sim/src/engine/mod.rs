//! The event loop: virtual time, the NIC model steering through the live
//! indirection table into bounded per-core queues, working and offloading cores
//! serving bursts with times from the cost model, and the controller running the
//! balancer every period. Shard moves and flow offloads are carried out by the
//! runtime's own state machines ([`WorkingCore`] on each working core,
//! [`PlanApplier`] on the controller), driven here by events instead of threads.
//!
//! Ordering of simultaneous events is by insertion (a sequence number), so a run is
//! a pure function of its inputs.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use balance::migrate::offload::{EntryIdx, Ticket};
use balance::migrate::{PlanApplier, WorkingCore, WorkingStart};
use balance::{Balancer, CoreId, ShardId};
use runspec::{BalancerKind, RunConfig, Tally, Topology};
use steer::IndirectionTable;
use trace::{Schedule, Trace};

use crate::cost::CostModel;

mod controller;
mod nic;
mod offloading;
mod working;
use crate::prep::Prepared;

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
    /// The end of a window of the fixed imbalance grid.
    Sample,
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
    /// The protocol machine.
    core: WorkingCore<SimPkt>,
    /// Offload jobs waiting for ring space (the core stalls until they are in).
    outbox: VecDeque<(CoreId, Job)>,
    /// Entries of shards that arrived, until their arrival is reported.
    arrived_entries: Option<u64>,
    /// Per-packet cost, when it was computed and for which shards (the
    /// machine's generation); none: recompute.
    cost_cache: Option<(u64, u64, f64)>,
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
    /// At the end of the previous imbalance window.
    pub window_busy: u64,
    pub window_packets: u64,
    pub stalls: u64,
}

/// What only the simulator counts.
#[derive(Clone, Debug, Default)]
pub(crate) struct SimCounts {
    /// Packets held or pending at the end (must be 0).
    pub held_left: u64,
    /// Flows leased at the end (must be 0).
    pub leased_left: u64,
    /// Events processed.
    pub events: u64,
    /// Flow entries created.
    pub created: u64,
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
    apply: PlanApplier,
    period: u64,
    /// Packets per bucket since the start.
    bucket_packets: Vec<u64>,
    /// Drops at each working core's full queue since the start.
    queue_drops: Vec<u64>,
    bucket_priority: Vec<u64>,
    snapshots: balance::snapshot::SnapshotBuilder,
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
    counts: SimCounts,
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
        let mut top = Topology::new(cfg, shards);
        top.place(&prep.rule_owners, w)?;
        if prep.cells {
            top.place_blocks(w);
        }
        for b in 0..table.len() {
            table.set(b, top.owner[b % shards]);
        }
        let period = cfg.period.as_nanos().max(1) as u64;
        let working = (0..w)
            .map(|i| Working {
                ring: VecDeque::with_capacity(cfg.ring_size),
                inbox: VecDeque::new(),
                scheduled: None,
                busy_until: 0,
                core: WorkingCore::new(WorkingStart {
                    core: i as CoreId,
                    shards,
                    owned: top.owned(i),
                    offloader: top.offload_core[i],
                    ratio: top.ratio,
                    heaviest: cfg.offload_select == runspec::OffloadSelect::Heaviest,
                    now_ns: 0,
                    window_ns: period,
                }),
                outbox: VecDeque::new(),
                arrived_entries: None,
                cost_cache: None,
                stats: CoreStats::default(),
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
        let schedule = Schedule {
            pace: cfg.pace,
            loops: cfg.replay_loops(),
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
            apply: PlanApplier::new(top.owner, top.ratio, top.offload_core, o),
            period,
            bucket_packets: vec![0; buckets],
            queue_drops: vec![0; cfg.workers],
            bucket_priority: vec![0; buckets],
            snapshots: balance::snapshot::SnapshotBuilder::new(0),
            win_id: 1,
            seen_win: vec![Vec::new(); shards],
            win_cur: vec![0; shards],
            win_last: vec![0; shards],
            last_n: vec![Vec::new(); shards],
            entries: vec![0; shards],
            last_activity: 0,
            scratch_batch: Vec::new(),
            scratch_here: Vec::new(),
            t: Tally::new("sim"),
            counts: SimCounts::default(),
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
    /// How long after its arrival stamp a packet is in its core's queue:
    /// the NIC model's work on it (`nic_ns`).
    fn handed(&self) -> u64 {
        self.model.nic_ns.round() as u64
    }

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
    pub fn run(mut self) -> (Tally, SimCounts) {
        self.wake_feeder(0);
        self.at(self.period, Ev::Tick);
        self.at(runspec::IMBALANCE_WINDOW_NS, Ev::Sample);
        while let Some(Reverse(it)) = self.heap.pop() {
            self.now = it.t;
            self.counts.events += 1;
            // a round or a window after the last packet is not part of the run
            if !matches!(it.ev, Ev::Tick | Ev::Sample) {
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
                Ev::Sample => self.sample(),
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
                        self.apply.on_arrived(shard, entries, held, self.now),
                        "shard {shard} arrived but was not moving"
                    );
                    self.maybe_stop();
                }
            }
        }
        self.finish()
    }

    fn finish(mut self) -> (Tally, SimCounts) {
        let mut end = self.last_activity;
        for wk in &self.working {
            end = end.max(wk.busy_until);
            self.counts.held_left += wk.core.held();
            self.t.add_offload(wk.core.offload_stats());
        }
        for of in &self.offloading {
            end = end.max(of.busy_until);
            self.counts.leased_left += of.leased;
        }
        self.t.elapsed_ns = end.max(1);
        let cores = self
            .working
            .iter()
            .map(|w| &w.stats)
            .chain(self.offloading.iter().map(|o| &o.stats));
        for (i, c) in cores.enumerate() {
            self.t.per_core.push(runspec::PerCore {
                core: i,
                role: if i < self.working.len() {
                    "working"
                } else {
                    "offloading"
                },
                load: (c.busy_ns as f64 / self.t.elapsed_ns as f64).min(1.0),
                packets: c.packets,
                priority_packets: c.priority,
            });
            self.t.offload_waits += c.stalls;
        }
        self.t.flows = [self.counts.created, 0, self.counts.created];
        self.t.flows_undone = self.prep.undone;
        self.t.flows_evicted = self.prep.evicted;
        self.t.emergencies = self.prep.emergencies;
        self.t.control = self.apply.stats().clone();
        self.t.balancer = self.balancer.counters();
        (self.t, self.counts)
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

//! A worker (working core): polls its ring in bursts, runs the chain on the shards
//! it owns, sends offloaded flows to its offloading core, and plays its part in
//! shard moves and offload changes.

use std::sync::Arc;
use std::time::Instant;

use balance::migrate::offload::{EntryIdx, Ticket};
use balance::migrate::{
    slice_of, OffloadStats, Recall, Received, Route, WorkerMoves, WorkingOffload, RATIO_ONE,
};
use balance::{CoreId, ShardId};
use crossbeam_channel::{Receiver, Sender};
use hdrhistogram::Histogram;
use nf::{Chain, Leased, Packet, Shard, Verdict};
use rtrb::{Consumer, Producer};
use state::EntryId;

use crate::offloader::ToOffload;
use crate::shared::Shared;
use crate::stats::WorkerStats;
use balance::migrate::heavy::{self, Sampler, TopK};

/// Every `TIMER_NS`, idle timeouts of the owned shards run.
const TIMER_NS: u64 = 10_000_000;
/// Offloaded flows idle this long are recalled, so the owner's timers see them.
const IDLE_RECALL_NS: u64 = 50_000_000;

/// Messages to a worker.
pub(crate) enum ToWorker {
    /// Release `shard` to `to` (shard-move step 4).
    Release { shard: ShardId, to: CoreId },
    /// A shard handed over by another worker (step 5).
    Shard { shard: ShardId, state: Box<Shard> },
    /// Set the offload ratio r_s of an owned shard.
    SetRatio { shard: ShardId, ratio: u32 },
    /// Offload to another offloading core (or stop offloading).
    SetOffloader { to: Option<CoreId> },
    /// The offloading core answered recall `ticket` with these flows' states.
    Returned {
        ticket: Ticket,
        states: Vec<(ShardId, EntryIdx, Box<Leased>)>,
    },
}

/// Messages to the controller.
pub(crate) enum ToController {
    /// `shard` arrived at its new owner; `entries` flow entries came with it and
    /// `held` packets had been held for it, now processed.
    Arrived {
        shard: ShardId,
        entries: u64,
        held: u64,
    },
}

/// What a worker hands back at the end.
pub(crate) struct WorkerResult {
    pub chain: Chain,
    pub shards: Vec<Shard>,
    pub held: u64,
    /// Latency of the priority class (index 0) and the regular class (index 1).
    pub latency: [Histogram<u64>; 2],
    pub busy_ns: u64,
    pub idle_ns: u64,
    pub output: Vec<(u64, Vec<u8>)>,
    pub offload: OffloadStats,
    /// Times the worker found an offload ring full and waited.
    pub offload_waits: u64,
    /// Exit records, when measured.
    pub exit: Vec<ExitRecord>,
}

/// Where a packet of a burst went.
enum Fate {
    Here,
    Away(CoreId, Option<Box<Leased>>),
    Pend(Ticket),
}

pub(crate) struct Worker {
    pub chain: Chain,
    pub shards: Vec<Option<Shard>>,
    pub ring: Consumer<Packet>,
    pub inbox: Receiver<ToWorker>,
    pub peers: Vec<Sender<ToWorker>>,
    pub controller: Sender<ToController>,
    pub shared: Arc<Shared>,
    pub burst: usize,
    pub keep_output: bool,
    pub stats: Arc<WorkerStats>,
    pub priority_dscp: u8,
    /// One ring to each offloading core (empty: no offloading).
    pub offload_rings: Vec<Producer<ToOffload>>,
    /// The offloading core to start with.
    pub offload_target: Option<CoreId>,
    /// r_s of the shards it starts with.
    pub offload_ratio: u32,
    /// Record every forwarded packet's exit (Sprayer runs).
    pub exit_order: bool,
    /// Heavy-flow window (the controller's period).
    pub window_ns: u64,
    /// Offload a shard's heaviest flows first (instead of hash slices).
    pub heaviest: bool,
}

/// A worker's loop state besides its fields.
struct Loop {
    moves: WorkerMoves<Packet>,
    offload: WorkingOffload<Packet>,
    /// Hand-overs waiting for the shard's offloaded flows to come back.
    deferred: Vec<(ShardId, CoreId)>,
    latency: [Histogram<u64>; 2],
    output: Vec<(u64, Vec<u8>)>,
    verdicts: Vec<Verdict>,
    offload_waits: u64,
    /// Exit records, when measured.
    exit: Option<Vec<ExitRecord>>,
    /// Heaviest flows per shard, this window and the last one.
    heavy: Vec<TopK>,
    last_heavy: Vec<Vec<(EntryIdx, f64)>>,
    sampler: Sampler,
}

impl Worker {
    pub fn run(mut self) -> WorkerResult {
        let owned: Vec<ShardId> = self
            .shards
            .iter()
            .enumerate()
            .filter(|(_, s)| s.is_some())
            .map(|(i, _)| i as ShardId)
            .collect();
        let hist =
            || Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).expect("valid bounds");
        let mut offload = WorkingOffload::new(self.shards.len(), self.offload_target);
        for s in &owned {
            offload.set_ratio(*s, self.offload_ratio);
        }
        let mut lp = Loop {
            moves: WorkerMoves::new(owned),
            offload,
            deferred: Vec::new(),
            latency: [hist(), hist()],
            output: Vec::new(),
            verdicts: Vec::with_capacity(self.burst),
            offload_waits: 0,
            exit: self.exit_order.then(Vec::new),
            heavy: vec![TopK::default(); self.shards.len()],
            last_heavy: vec![Vec::new(); self.shards.len()],
            sampler: Sampler::default(),
        };
        let mut next_window = self.shared.now_ns() + self.window_ns;
        let offloading = !self.offload_rings.is_empty();
        let prio = self.priority_dscp;
        let mut batch: Vec<Packet> = Vec::with_capacity(self.burst);
        let mut routed = Vec::with_capacity(self.burst);
        let mut fates: Vec<Fate> = Vec::with_capacity(self.burst);
        let (mut busy_ns, mut idle_ns) = (0u64, 0u64);
        let mut last = Instant::now();
        let mask = self.shared.table.len() - 1;
        let mut bucket_totals = vec![0u64; mask + 1];
        let mut priority_totals = vec![0u64; mask + 1];
        let mut packets = 0u64;
        let mut next_timer = self.shared.now_ns() + TIMER_NS;
        let mut recalled_all = false;
        loop {
            let now = self.shared.now_ns();
            if now >= next_timer {
                next_timer = now + TIMER_NS;
                for shard in self.shards.iter_mut().flatten() {
                    self.chain.expire(shard, now);
                }
                if let Some(r) = lp.offload.recall_idle(now, IDLE_RECALL_NS) {
                    self.push_recall(&mut lp, r);
                }
            }
            if now >= next_window {
                next_window = now + self.window_ns;
                self.close_window(&mut lp);
            }
            // control messages first: a hand-over's held packets go before new ones
            while let Ok(msg) = self.inbox.try_recv() {
                self.on_message(&mut lp, msg);
            }
            let queued = self.ring.slots();
            self.stats.publish_queue(queued as u64);
            let n = queued.min(self.burst);
            if n == 0 {
                if self.shared.aborted() {
                    break;
                }
                if self.shared.stopping() && self.ring.slots() == 0 && self.inbox.is_empty() {
                    // every offloaded flow comes home before the shards are returned
                    if lp.offload.away() == 0 && lp.deferred.is_empty() {
                        break;
                    }
                    if !recalled_all {
                        recalled_all = true;
                        if let Some(r) = lp.offload.recall_all() {
                            self.push_recall(&mut lp, r);
                        }
                    }
                }
                let now = Instant::now();
                idle_ns += now.duration_since(last).as_nanos() as u64;
                last = now;
                self.stats.publish(busy_ns, idle_ns, packets);
                std::thread::yield_now();
                // the yield is idle time too, not the next burst's
                let now = Instant::now();
                idle_ns += now.duration_since(last).as_nanos() as u64;
                last = now;
                continue;
            }
            batch.clear();
            for _ in 0..n {
                let p = self.ring.pop().expect("slots() said so");
                let b = p.hash as usize & mask;
                bucket_totals[b] += 1;
                self.stats.publish_bucket(b, bucket_totals[b]);
                if p.info.dscp == prio {
                    priority_totals[b] += 1;
                    self.stats.publish_priority(b, priority_totals[b]);
                }
                let s = self.chain.shard_of(p.hash) as ShardId;
                if let Received::Process(p) = lp.moves.on_packet(s, p) {
                    batch.push(p);
                }
            }
            let now = self.shared.now_ns();
            fates.clear();
            let offload = &mut lp.offload;
            let heavy = &mut lp.heavy;
            let sampler = &mut lp.sampler;
            self.chain.process_burst_routed(
                &mut self.shards,
                &mut batch,
                now,
                &mut routed,
                |i, p, hit| {
                    // misses before this packet ran here without asking
                    fates.resize_with(i, || Fate::Here);
                    let shard = hit.shard.info.index as ShardId;
                    if sampler.tick() {
                        heavy[usize::from(shard)].add(hit.entry.0);
                    }
                    if !offloading {
                        fates.push(Fate::Here);
                        return true;
                    }
                    let slice = slice_of(hit.shard.table.key(hit.entry).mix());
                    let route = offload.route(
                        shard,
                        Some(hit.entry.0),
                        slice,
                        p.info.dscp == prio,
                        now,
                        || hit.offloadable(),
                    );
                    let fate = match route {
                        Route::Local => Fate::Here,
                        Route::Offload { to, lease } => Fate::Away(
                            to,
                            lease.then(|| Box::new(hit.shard.table.detach(hit.entry))),
                        ),
                        Route::Pend(t) => Fate::Pend(t),
                    };
                    let here = matches!(fate, Fate::Here);
                    fates.push(fate);
                    here
                },
            );
            // latency ends when the chain is done with the burst
            let done = self.shared.now_ns();
            // misses never reach the router: they run here
            fates.resize_with(batch.len(), || Fate::Here);
            for ((p, v), fate) in batch.drain(..).zip(&routed).zip(fates.drain(..)) {
                match (fate, v) {
                    (_, Some(v)) => sink_one(
                        &p,
                        *v,
                        done,
                        &mut lp.latency,
                        prio,
                        self.keep_output,
                        &mut lp.output,
                        &mut lp.exit,
                    ),
                    (Fate::Away(to, lease), None) => {
                        let shard = self.chain.shard_of(p.hash) as ShardId;
                        let entry = p.entry.expect("a routed packet carries its entry").0;
                        let job = ToOffload::Job {
                            shard,
                            entry,
                            lease,
                            pkt: p,
                        };
                        self.push_offload(&mut lp, to, job);
                    }
                    (Fate::Pend(t), None) => {
                        let shard = self.chain.shard_of(p.hash) as ShardId;
                        lp.offload.pend(t, shard, p);
                    }
                    (Fate::Here, None) => unreachable!("a packet routed here ran here"),
                }
            }
            for _ in 0..n {
                for (s, to) in lp.moves.on_dequeued() {
                    self.hand_over_when_settled(&mut lp, s, to);
                }
            }
            let t = Instant::now();
            busy_ns += t.duration_since(last).as_nanos() as u64;
            last = t;
            packets += n as u64;
            self.stats.publish(busy_ns, idle_ns, packets);
        }
        WorkerResult {
            shards: self.shards.iter_mut().filter_map(Option::take).collect(),
            chain: self.chain,
            held: lp.moves.held() + lp.offload.pending() as u64,
            latency: lp.latency,
            busy_ns,
            idle_ns,
            output: lp.output,
            offload: lp.offload.stats().clone(),
            offload_waits: lp.offload_waits,
            exit: lp.exit.take().unwrap_or_default(),
        }
    }

    fn on_message(&mut self, lp: &mut Loop, msg: ToWorker) {
        match msg {
            ToWorker::Release { shard, to } => {
                // no new lease for the shard; its offloaded flows come back first
                if let Some(r) = lp.offload.recall_shard(shard) {
                    self.push_recall(lp, r);
                }
                let queued = self.ring.slots() as u64;
                if let Some((s, to)) = lp.moves.on_release(shard, to, queued) {
                    self.hand_over_when_settled(lp, s, to);
                }
            }
            ToWorker::Shard { shard, state } => {
                let entries = state.table.len() as u64;
                self.shards[usize::from(shard)] = Some(*state);
                let held: Vec<Packet> = lp.moves.on_shard(shard).into();
                let held_n = held.len() as u64;
                self.process_here(lp, held);
                // the controller may have stopped waiting only after this arrives
                let _ = self.controller.send(ToController::Arrived {
                    shard,
                    entries,
                    held: held_n,
                });
            }
            ToWorker::SetRatio { shard, ratio } => {
                // a shard that left (or is leaving) keeps r_s = 0 here
                if self.shards[usize::from(shard)].is_some() && !lp.moves.is_releasing(shard) {
                    if let Some(r) = lp.offload.set_ratio(shard, ratio) {
                        self.push_recall(lp, r);
                    }
                    if self.heaviest {
                        self.select_heaviest(lp, shard);
                    }
                }
            }
            ToWorker::SetOffloader { to } => {
                if let Some(r) = lp.offload.set_target(to) {
                    self.push_recall(lp, r);
                }
            }
            ToWorker::Returned { ticket, states } => {
                let mut entries = Vec::with_capacity(states.len());
                for (s, e, leased) in states {
                    let shard = self.shards[usize::from(s)]
                        .as_mut()
                        .expect("a shard stays until its offloaded flows are back");
                    shard.table.attach(EntryId(e), *leased);
                    entries.push((s, e));
                }
                let ready: Vec<Packet> = lp
                    .offload
                    .on_returned(ticket, &entries)
                    .into_iter()
                    .map(|(_, p)| p)
                    .collect();
                self.process_here(lp, ready);
                let deferred = std::mem::take(&mut lp.deferred);
                for (s, to) in deferred {
                    self.hand_over_when_settled(lp, s, to);
                }
            }
        }
    }

    /// Ends a heavy-flow window: publish each owned shard's heaviest flows and,
    /// with heaviest-first selection, re-pick the flows to offload.
    fn close_window(&mut self, lp: &mut Loop) {
        for s in 0..self.shards.len() {
            let h = lp.heavy[s].take();
            if self.shards[s].is_none() {
                continue;
            }
            let cum: Vec<f64> = h.iter().map(|x| x.1).collect();
            self.stats.publish_heavy(s, &cum);
            lp.last_heavy[s] = h;
            if self.heaviest && !lp.moves.is_releasing(s as ShardId) {
                self.select_heaviest(lp, s as ShardId);
            }
        }
    }

    /// Heaviest-first selection: offload the shard's heaviest flows while the share
    /// before each stays below r_s.
    fn select_heaviest(&mut self, lp: &mut Loop, shard: ShardId) {
        let r = f64::from(lp.offload.ratio(shard)) / f64::from(RATIO_ONE);
        let ids = heavy::eligible(&lp.last_heavy[usize::from(shard)], r);
        if let Some(rc) = lp.offload.set_eligible(shard, Some(ids)) {
            self.push_recall(lp, rc);
        }
    }

    /// Runs packets of owned shards here, in order (held or pending ones).
    fn process_here(&mut self, lp: &mut Loop, mut pkts: Vec<Packet>) {
        for chunk in pkts.chunks_mut(self.burst.max(1)) {
            let now = self.shared.now_ns();
            self.chain
                .process_burst(&mut self.shards, chunk, now, &mut lp.verdicts);
            let done = self.shared.now_ns();
            for (p, v) in chunk.iter().zip(&lp.verdicts) {
                sink_one(
                    p,
                    *v,
                    done,
                    &mut lp.latency,
                    self.priority_dscp,
                    self.keep_output,
                    &mut lp.output,
                    &mut lp.exit,
                );
            }
        }
    }

    fn push_recall(&mut self, lp: &mut Loop, r: Recall) {
        let job = ToOffload::Recall {
            ticket: r.ticket,
            entries: r.entries,
        };
        self.push_offload(lp, r.to, job);
    }

    /// Pushes to an offloading core's ring, waiting while it is full: the
    /// offloading core never blocks, so the wait ends.
    fn push_offload(&mut self, lp: &mut Loop, to: CoreId, mut job: ToOffload) {
        let ring = &mut self.offload_rings[usize::from(to)];
        loop {
            match ring.push(job) {
                Ok(()) => return,
                Err(rtrb::PushError::Full(j)) => {
                    if self.shared.aborted() {
                        return;
                    }
                    job = j;
                    lp.offload_waits += 1;
                    std::thread::yield_now();
                }
            }
        }
    }

    fn hand_over_when_settled(&mut self, lp: &mut Loop, shard: ShardId, to: CoreId) {
        if lp.offload.is_settled(shard) {
            self.hand_over(shard, to);
        } else {
            lp.deferred.push((shard, to));
        }
    }

    fn hand_over(&mut self, shard: ShardId, to: CoreId) {
        let state = self.shards[usize::from(shard)]
            .take()
            .expect("handing over a shard this worker holds");
        let _ = self.peers[usize::from(to)].send(ToWorker::Shard {
            shard,
            state: Box::new(state),
        });
    }
}

/// Counts a packet's outcome: latency per class, and the packet itself when kept.
#[allow(clippy::too_many_arguments)]
pub(crate) fn sink_one(
    p: &Packet,
    v: Verdict,
    now: u64,
    latency: &mut [Histogram<u64>; 2],
    prio: u8,
    keep: bool,
    output: &mut Vec<(u64, Vec<u8>)>,
    exit: &mut Option<Vec<ExitRecord>>,
) {
    let class = usize::from(p.info.dscp != prio);
    latency[class].saturating_record(now.saturating_sub(p.ts_ns).max(1));
    if v == Verdict::Forward {
        if keep {
            output.push((p.ts_ns, p.data.clone()));
        }
        if let Some(x) = exit {
            if let Some(seq) = wire::seqtag::decode(p.info.payload(&p.data)) {
                let flow = state::FlowKey::of(&p.info.tuple).0.mix();
                x.push(ExitRecord {
                    at_ns: now,
                    flow,
                    seq,
                });
            }
        }
    }
}

/// A forwarded packet as it left: when, its flow, its sequence tag (for counting
/// reordering at the exit when the chain cannot, e.g. under Sprayer).
#[derive(Clone, Copy, Debug)]
pub(crate) struct ExitRecord {
    pub at_ns: u64,
    pub flow: u32,
    pub seq: u32,
}

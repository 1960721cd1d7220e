//! A working core's thread: polls its ring in bursts, runs the chain on the shards
//! it owns, and carries out what its [`WorkingCore`] machine says — the shard-move
//! and offload rules live there, not here. This file is the driver: rings,
//! channels, shard objects, the chain and the clock.

use std::sync::Arc;
use std::time::Instant;

use balance::migrate::offload::Ticket;
use balance::migrate::{slice_of, Action, OffloadStats, Route, WorkingCore};
use balance::{CoreId, ShardId};
use crossbeam_channel::{Receiver, Sender};
use nf::{Chain, Leased, Packet, Shard, Verdict};
use rtrb::{Consumer, Producer};
use state::EntryId;

use crate::messages::{ToController, ToOffload, ToWorker};
use crate::shared::Shared;
use crate::sink::{ExitRecord, Sink};
use crate::stats::WorkerStats;

/// What a worker hands back at the end.
pub(crate) struct WorkerResult {
    pub chain: Chain,
    pub shards: Vec<Shard>,
    pub held: u64,
    pub sink: Sink,
    pub busy_ns: u64,
    pub idle_ns: u64,
    pub offload: OffloadStats,
    /// Times the worker found an offload ring full and waited.
    pub offload_waits: u64,
    /// With kernel steering: what its sockets delivered.
    pub rx: Option<crate::kernel::RxStats>,
    /// In a pool: replica messages sent, refused by the socket, installed;
    /// copies acknowledged, packets copied again for a poisoned flow, flows
    /// still poisoned at the end; bulk-sync copies sent, sent again,
    /// acknowledged, and installed here; bulk copies not installable;
    /// acknowledgements refused (forged, stale, replayed); connections
    /// spilled and packets steered to the spill node.
    pub replica: Option<[u64; 14]>,
    /// In a pool: the replication lag of this core's copies (ns).
    pub replica_lag: Option<hdrhistogram::Histogram<u64>>,
}

impl WorkerResult {
    /// Exit records, when measured.
    pub fn exit(&self) -> &[ExitRecord] {
        self.sink.exit.as_deref().unwrap_or_default()
    }
}

/// Where a packet of a burst went.
enum Fate {
    Here,
    Away(CoreId, Option<Box<Leased>>),
    Pend(Ticket),
}

pub(crate) struct Worker {
    /// Which working core.
    pub me: usize,
    pub chain: Chain,
    pub shards: Vec<Option<Shard>>,
    pub ring: Consumer<Packet>,
    pub inbox: Receiver<ToWorker>,
    pub peers: Vec<Sender<ToWorker>>,
    pub controller: Sender<ToController>,
    pub shared: Arc<Shared>,
    pub burst: usize,
    pub stats: Arc<WorkerStats>,
    pub sink: Sink,
    /// The protocol machine.
    pub core: WorkingCore<Packet>,
    /// One ring to each offloading core (empty: no offloading).
    pub offload_rings: Vec<Producer<ToOffload>>,
    /// Heavy-flow window (the controller's period).
    pub window_ns: u64,
    /// The entries of a shard that just arrived, until its arrival is reported.
    pub arrived_entries: Option<u64>,
    /// Where live metrics go (`--metrics`), and this core's index there.
    pub metrics: Option<(Arc<runspec::metrics::Metrics>, usize)>,
    /// Delayed merge of NF state shared across cores, if the chain has any.
    pub merging: Option<crate::merge::Merging>,
    /// With kernel steering: this core's sockets, read into its queue (then
    /// `ring` is unused).
    pub rx: Option<crate::kernel::KernelRx>,
    /// In a pool with replication: the link to this node's secondary.
    pub replica: Option<Replication>,
}

/// A working core's part in pool replication: packets that create or change
/// their flow's state go to the secondary with the flow's entry instead of
/// out; replica messages from this node's primaries are installed and sent
/// out.
pub(crate) struct Replication {
    pub tx: crate::replica::ReplicaTx,
    /// The controller's bulk-sync orders, this core's part.
    pub bulk: crate::bulk::BulkTx,
    /// Per packet of the burst: its entry's slots before it ran (a packet
    /// whose flow was found; a new flow has none).
    before: Vec<Option<nf::FlowState>>,
    found: Vec<bool>,
    /// The poison bits and the copies not yet acknowledged: flows named by
    /// (shard, entry).
    pub poison: pool::poison::Poison<crate::replica::FlowRef>,
    /// From a copy's sending to its acknowledgement, ns.
    pub lag: hdrhistogram::Histogram<u64>,
    /// Replica messages installed and sent out.
    pub installed: u64,
    /// Copies acknowledged.
    pub acked: u64,
    /// Packets copied only because their flow was poisoned.
    pub recopied: u64,
    /// Bulk-sync copies installed here, and refused.
    pub synced: u64,
    pub sync_bad: u64,
    /// Spill-over and split tenants, if any.
    pub spill: Option<crate::spill::SpillTx>,
}

impl Replication {
    pub fn new(
        tx: crate::replica::ReplicaTx,
        bulk: crate::bulk::BulkTx,
        spill: Option<crate::spill::SpillTx>,
    ) -> Replication {
        Replication {
            tx,
            bulk,
            spill,
            synced: 0,
            sync_bad: 0,
            before: Vec::new(),
            found: Vec::new(),
            poison: pool::poison::Poison::default(),
            lag: crate::replica::lag_histogram(),
            installed: 0,
            acked: 0,
            recopied: 0,
        }
    }

    /// Takes the secondary's acknowledgements in at `now`: their flows are
    /// safe.
    fn take_acks(&mut self, now: u64) {
        let (poison, acked, lag) = (&mut self.poison, &mut self.acked, &mut self.lag);
        self.tx.acks(|seq| {
            if let Some((_, l)) = poison.acked(seq, now) {
                *acked += 1;
                lag.saturating_record(l.max(1));
            }
        });
    }
}

/// Per-burst buffers, reused.
struct Scratch {
    batch: Vec<Packet>,
    routed: Vec<Option<Verdict>>,
    fates: Vec<Fate>,
    verdicts: Vec<Verdict>,
    bucket_totals: Vec<u64>,
    priority_totals: Vec<u64>,
}

/// Packets taken from the queue: each one's bucket counted, then run
/// (pushed onto the burst, moved once) or held by the shard-move machine.
#[inline(always)]
fn accept(
    pkts: impl Iterator<Item = Packet>,
    sc: &mut Scratch,
    core: &mut WorkingCore<Packet>,
    stats: &WorkerStats,
    sink: &Sink,
    chain: &Chain,
) {
    let mask = sc.bucket_totals.len() - 1;
    for p in pkts {
        count_bucket(&p, mask, sc, stats, sink);
        let s = chain.shard_of(p.hash) as ShardId;
        let batch = &mut sc.batch;
        core.take_packet(s, p, |p| batch.push(p));
    }
}

/// Counts a packet taken from the queue in its bucket's running totals
/// (all packets, and the priority class's), published for the controller.
#[inline(always)]
fn count_bucket(p: &Packet, mask: usize, sc: &mut Scratch, stats: &WorkerStats, sink: &Sink) {
    let b = p.hash as usize & mask;
    sc.bucket_totals[b] += 1;
    stats.publish_bucket(b, sc.bucket_totals[b]);
    if sink.is_priority(p) {
        sc.priority_totals[b] += 1;
        stats.publish_priority(b, sc.priority_totals[b]);
    }
}

/// Notes the exit of a burst's forwarded packets, which leave in burst
/// order, in their flows' exit order (and counts those reordered).
#[inline]
fn exits(
    chain: &Chain,
    shards: &mut [Option<Shard>],
    pkts: &[Packet],
    verdicts: &[Option<Verdict>],
    sink: &mut Sink,
) {
    for (p, v) in pkts.iter().zip(verdicts) {
        if *v == Some(Verdict::Forward) {
            sink.exit_order(chain.exit_in_order(shards, p));
        }
    }
}

/// Busy and idle time, packets.
struct Clock {
    busy_ns: u64,
    idle_ns: u64,
    packets: u64,
    last: Instant,
}

impl Clock {
    /// Time since the last call goes to busy or idle time.
    fn account(&mut self, busy: bool) {
        let now = Instant::now();
        let d = now.duration_since(self.last).as_nanos() as u64;
        if busy {
            self.busy_ns += d;
        } else {
            self.idle_ns += d;
        }
        self.last = now;
    }
}

impl Worker {
    pub fn run(mut self) -> WorkerResult {
        let buckets = self.shared.table.len();
        let mut sc = Scratch {
            batch: Vec::with_capacity(self.burst),
            routed: Vec::with_capacity(self.burst),
            fates: Vec::with_capacity(self.burst),
            verdicts: Vec::with_capacity(self.burst),
            bucket_totals: vec![0; buckets],
            priority_totals: vec![0; buckets],
        };
        let mut clock = Clock {
            busy_ns: 0,
            idle_ns: 0,
            packets: 0,
            last: Instant::now(),
        };
        let mut offload_waits = 0;
        let mut backoff = crate::backoff::Backoff::default();
        loop {
            // the last burst's forwarded frames leave together
            self.sink.flush();
            let now = self.shared.now_ns();
            self.on_time(now);
            offload_waits += self.do_actions(&mut sc);
            // control messages first: a hand-over's held packets go before new ones
            while let Ok(msg) = self.inbox.try_recv() {
                self.on_message(msg);
                offload_waits += self.do_actions(&mut sc);
            }
            if let Some(rx) = &mut self.rx {
                // the buffers of what ran, for what comes in
                self.sink.take_spare(&mut rx.spare, rx.limit);
                // once the run stops, what arrives stays in the sockets
                if !self.shared.stopping() {
                    rx.fill(&self.shared, false);
                }
            }
            if self.bulk_step(now) {
                backoff.reset();
            }
            let queued = self.queued();
            self.stats.publish_queue(queued as u64);
            let n = queued.min(self.burst);
            if n == 0 {
                if self.shared.aborted() {
                    break;
                }
                if self.shared.stopping() && self.queued() == 0 && self.inbox.is_empty() {
                    // every offloaded flow comes home before the shards are returned
                    if self.core.finished() {
                        break;
                    }
                    self.core.handle_stopping();
                    offload_waits += self.do_actions(&mut sc);
                }
                clock.account(false);
                self.stats
                    .publish(clock.busy_ns, clock.idle_ns, clock.packets);
                if backoff.nap_due() {
                    // a nap that a control message ends at once
                    if let Ok(msg) = self.inbox.recv_timeout(crate::backoff::NAP) {
                        self.on_message(msg);
                        offload_waits += self.do_actions(&mut sc);
                    }
                } else {
                    backoff.pause();
                }
                // the wait is idle time too, not the next burst's
                clock.account(false);
                continue;
            }
            backoff.reset();
            offload_waits += self.burst_of(n, &mut sc);
            self.core.handle_dequeued(n);
            offload_waits += self.do_actions(&mut sc);
            clock.account(true);
            clock.packets += n as u64;
            self.stats
                .publish(clock.busy_ns, clock.idle_ns, clock.packets);
        }
        self.sink.flush();
        self.finish(&clock, offload_waits)
    }

    /// What the time brings: expiry and counters at the timers' period,
    /// the heavy-flow window's publication, the delayed merge's tick, the
    /// packets NFs release.
    fn on_time(&mut self, now: u64) {
        let due = self.core.handle_time(now, self.window_ns);
        if due.timers {
            for shard in self.shards.iter_mut().flatten() {
                self.chain.expire(shard, now);
            }
            if let Some(rx) = &mut self.rx {
                rx.count_overflow();
            }
            if let Some((m, i)) = &self.metrics {
                m.publish_core(*i, || crate::sink::live(&self.chain, &self.sink));
            }
            // a director weighs the worker's load (the IDS's `auto` matching)
            self.chain.core_load(now, self.stats.own_load());
        }
        if due.window {
            self.publish_heavy();
        }
        if let Some(m) = &mut self.merging {
            m.tick(now, &mut self.chain);
        }
        // what an NF held back and lets go now (a UPF's buffered packets)
        // leaves with the next flush, before the next burst's packets
        let mut released = Vec::new();
        self.chain.take_released(&mut released);
        for p in released {
            self.sink.one(&p, Verdict::Forward, now);
            self.sink.give_back(p.data);
        }
    }

    /// The core's result once its loop ends: its shards and chain, what it
    /// holds, its counters.
    fn finish(mut self, clock: &Clock, offload_waits: u64) -> WorkerResult {
        if let Some((m, i)) = &self.metrics {
            m.publish_core_last(*i, crate::sink::live(&self.chain, &self.sink));
        }
        WorkerResult {
            shards: self.shards.iter_mut().filter_map(Option::take).collect(),
            chain: self.chain,
            held: self.core.held(),
            sink: self.sink,
            busy_ns: clock.busy_ns,
            idle_ns: clock.idle_ns,
            offload: self.core.offload_stats().clone(),
            offload_waits,
            rx: self.rx.take().map(|mut r| {
                r.count_unread();
                r.stats
            }),
            replica: self.replica.as_mut().map(|r| {
                r.take_acks(self.shared.now_ns());
                r.bulk.take_acks();
                [
                    r.tx.sent,
                    r.tx.failed,
                    r.installed,
                    r.acked,
                    r.recopied,
                    r.poison.poisoned() as u64,
                    r.bulk.sent,
                    r.bulk.resent,
                    r.bulk.acked,
                    r.synced,
                    r.sync_bad,
                    r.tx.refused() + r.bulk.refused(),
                    r.spill.as_ref().map_or(0, |s| s.spilled()),
                    r.spill.as_ref().map_or(0, |s| s.steered),
                ]
            }),
            // (after the last acknowledgements were taken in, above)
            replica_lag: self.replica.as_ref().map(|r| r.lag.clone()),
        }
    }

    /// Packets in this core's queue.
    fn queued(&self) -> usize {
        match &self.rx {
            Some(rx) => rx.queue.len(),
            None => self.ring.slots(),
        }
    }

    /// Takes `n` packets from this core's queue (they are there) into
    /// `sc.batch`, counting each one's bucket and telling the machine of it;
    /// the ring's read position moves once for all of them.
    fn intake(&mut self, n: usize, sc: &mut Scratch) {
        let Worker {
            ring,
            rx,
            core,
            stats,
            sink,
            chain,
            ..
        } = self;
        match rx {
            Some(rx) => {
                let pkts = (0..n).map(|_| rx.queue.pop_front().expect("queued() said so"));
                accept(pkts, sc, core, stats, sink, chain);
            }
            None => {
                // (the chunk's iterator commits what it gave when dropped)
                let pkts = ring.read_chunk(n).expect("queued() said so");
                accept(pkts.into_iter(), sc, core, stats, sink, chain);
            }
        }
    }

    /// Runs `n` packets of the ring where they are, in its slots, when every
    /// one of them runs here and nothing else is asked of them (no offloading
    /// core, no pool replica, no shard of theirs moving): none is moved onto
    /// a burst. The ring's read position moves once, after they ran. False,
    /// with nothing taken, when some packet must go the usual way (held).
    fn burst_in_place(&mut self, n: usize, sc: &mut Scratch) -> bool {
        let Worker {
            ring,
            core,
            stats,
            sink,
            chain,
            shards,
            shared,
            ..
        } = self;
        let mut chunk = ring.read_chunk(n).expect("queued() said so");
        let (a, b) = chunk.as_slices();
        let shard = |p: &Packet| chain.shard_of(p.hash) as ShardId;
        if !a.iter().chain(b).all(|p| core.runs_directly(shard(p))) {
            // (a chunk dropped without a commit leaves its packets queued)
            return false;
        }
        let mask = sc.bucket_totals.len() - 1;
        for p in a.iter().chain(b) {
            count_bucket(p, mask, sc, stats, sink);
            core.took_in_place(shard(p));
        }
        let now = shared.now_ns();
        let (a, b) = chunk.as_mut_slices();
        for part in [a, b] {
            if part.is_empty() {
                continue;
            }
            chain.process_burst_routed(
                shards,
                part,
                now,
                &mut sc.routed,
                nf::Routing::Observes,
                |_, _, hit| {
                    core.sample(hit.shard.info.index as ShardId, hit.entry.0);
                    true
                },
            );
            exits(chain, shards, part, &sc.routed, sink);
            // latency ends when the chain is done with the packets
            sink.ran_here(part, &sc.routed, shared.now_ns());
        }
        // (what is left in the slots, buffers taken, is dropped here)
        chunk.commit_all();
        true
    }

    /// Takes `n` packets from the ring and runs, offloads or pends them; returns
    /// the times an offload ring was full.
    fn burst_of(&mut self, n: usize, sc: &mut Scratch) -> u64 {
        if self.rx.is_none()
            && self.offload_rings.is_empty()
            && self.replica.is_none()
            && self.burst_in_place(n, sc)
        {
            return 0;
        }
        sc.batch.clear();
        self.intake(n, sc);
        let now = self.shared.now_ns();
        if self.replica.is_some() {
            self.install_replicas(&mut sc.batch, now);
            if let Some(r) = self.replica.as_mut() {
                r.take_acks(now);
            }
            self.spill_over(&mut sc.batch, now);
        }
        self.route_burst(sc, now);
        // latency ends when the chain is done with the burst
        let done = self.shared.now_ns();
        if self.offload_rings.is_empty() && self.replica.is_none() {
            // every packet ran here: their outcomes are counted together
            exits(
                &self.chain,
                &mut self.shards,
                &sc.batch,
                &sc.routed,
                &mut self.sink,
            );
            self.sink.ran_here(&mut sc.batch, &sc.routed, done);
            sc.batch.clear();
            return 0;
        }
        self.settle(sc, done)
    }

    /// Runs the chain on `sc.batch`, each found packet routed by the
    /// shard-move machine (here, to an offloading core, or pending) into
    /// `sc.fates`; a replica's snapshot of each found flow's state before.
    fn route_burst(&mut self, sc: &mut Scratch, now: u64) {
        sc.fates.clear();
        let offloading = !self.offload_rings.is_empty();
        let core = &mut self.core;
        let fates = &mut sc.fates;
        let sink = &self.sink;
        let nfs = self.chain.nf_count();
        let mut snapshot = self.replica.as_mut();
        if let Some(r) = snapshot.as_mut() {
            r.found.clear();
            r.found.resize(sc.batch.len(), false);
            r.before.clear();
            r.before.resize(sc.batch.len() * nfs, None);
        }
        // (a replica's snapshot and an offload decision read the flow's state)
        let routing = if offloading || snapshot.is_some() {
            nf::Routing::ReadsState
        } else {
            nf::Routing::Observes
        };
        self.chain.process_burst_routed(
            &mut self.shards,
            &mut sc.batch,
            now,
            &mut sc.routed,
            routing,
            |i, p, hit| {
                if let Some(r) = snapshot.as_mut() {
                    r.found[i] = true;
                    for nf in 0..nfs {
                        r.before[i * nfs + nf] = hit.shard.table.slot(hit.entry, nf).clone();
                    }
                }
                let shard = hit.shard.info.index as ShardId;
                core.sample(shard, hit.entry.0);
                if !offloading {
                    // (every packet runs here: the fates are filled after)
                    return true;
                }
                // misses before this packet ran here without asking
                fates.resize_with(i, || Fate::Here);
                let slice = slice_of(hit.shard.table.key(hit.entry).mix());
                let route = core.route(
                    shard,
                    Some(hit.entry.0),
                    slice,
                    sink.is_priority(p),
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
    }

    /// What became of each packet of a routed burst: counted and given back
    /// (replicated first when a pool node's), pushed to its offloading
    /// core, or pended; the times an offload ring was full.
    fn settle(&mut self, sc: &mut Scratch, done: u64) -> u64 {
        // misses never reach the router: they run here
        sc.fates.resize_with(sc.batch.len(), || Fate::Here);
        let mut waits = 0;
        for (i, ((p, v), fate)) in sc
            .batch
            .drain(..)
            .zip(&sc.routed)
            .zip(sc.fates.drain(..))
            .enumerate()
        {
            match (fate, v) {
                (_, Some(v)) => {
                    if *v == Verdict::Forward {
                        let ok = self.chain.exit_in_order(&mut self.shards, &p);
                        self.sink.exit_order(ok);
                    }
                    if *v == Verdict::Forward
                        && self.replica.is_some()
                        && self.replicate(&p, Some(i), done)
                    {
                        self.sink.one_away(&p, done);
                    } else {
                        self.sink.one(&p, *v, done);
                    }
                    self.sink.give_back(p.data);
                }
                (Fate::Away(to, lease), None) => {
                    // the flow's earlier packets leave before the offloading
                    // core can send its later ones
                    self.sink.flush();
                    let shard = self.chain.shard_of(p.hash) as ShardId;
                    let entry = p.entry.expect("a routed packet carries its entry").0;
                    let job = ToOffload::Job {
                        shard,
                        entry,
                        lease,
                        pkt: p,
                    };
                    waits += self.push_offload(to, job);
                }
                (Fate::Pend(t), None) => {
                    let shard = self.chain.shard_of(p.hash) as ShardId;
                    self.core.pend(t, shard, p);
                }
                (Fate::Here, None) => unreachable!("a packet routed here ran here"),
            }
        }
        waits
    }

    /// Tells the machine what a message says (after the driver's part of it).
    fn on_message(&mut self, msg: ToWorker) {
        match msg {
            ToWorker::Release { shard, to } => {
                // with kernel steering, every frame the old table steered here
                // is in the sockets: all of it joins the queue before counting
                if let Some(rx) = &mut self.rx {
                    rx.fill(&self.shared, true);
                }
                let queued = self.queued() as u64;
                self.core.handle_release(shard, to, queued);
            }
            ToWorker::Shard { shard, state } => {
                let entries = state.table.len() as u64;
                self.shards[usize::from(shard)] = Some(*state);
                self.core.handle_shard(shard);
                // its held packets run first (the next action), then the arrival
                // is reported with the entries that came with the shard
                self.arrived_entries = Some(entries);
            }
            ToWorker::SetRatio { shard, ratio } => self.core.handle_ratio(shard, ratio),
            ToWorker::Order(runspec::control::Order::Query(q)) => self.inspect(q),
            ToWorker::Order(runspec::control::Order::Reload(r)) => self.reload(r),
            ToWorker::SetOffloader { to } => self.core.handle_offloader(to),
            ToWorker::Returned { ticket, states } => {
                let mut entries = Vec::with_capacity(states.len());
                for (s, e, leased) in states {
                    let shard = self.shards[usize::from(s)]
                        .as_mut()
                        .expect("a shard stays until its offloaded flows are back");
                    shard.table.attach(EntryId(e), *leased);
                    entries.push((s, e));
                }
                self.core.handle_returned(ticket, &entries);
            }
        }
    }

    /// Carries out the machine's actions; returns the times an offload ring was
    /// full.
    fn do_actions(&mut self, sc: &mut Scratch) -> u64 {
        let mut waits = 0;
        while let Some(a) = self.core.poll_action() {
            match a {
                Action::PushRecall(r) => {
                    let job = ToOffload::Recall {
                        ticket: r.ticket,
                        entries: r.entries,
                    };
                    waits += self.push_offload(r.to, job);
                }
                Action::SendShard { shard, to } => {
                    // the shard's packets run here leave before its new owner's
                    self.sink.flush();
                    let state = self.shards[usize::from(shard)]
                        .take()
                        .expect("handing over a shard this worker holds");
                    let _ = self.peers[usize::from(to)].send(ToWorker::Shard {
                        shard,
                        state: Box::new(state),
                    });
                }
                Action::RunHere(pkts) => self.process_here(pkts, &mut sc.verdicts),
                Action::Arrived { shard, held } => {
                    let entries = self.arrived_entries.take().unwrap_or_default();
                    // the controller may have stopped waiting only after this arrives
                    let _ = self.controller.send(ToController::Arrived {
                        shard,
                        entries,
                        held,
                    });
                }
            }
        }
        waits
    }

    /// Publishes each held shard's heaviest-flow shares for the controller.
    fn publish_heavy(&self) {
        for s in 0..self.shards.len() {
            if self.core.holds(s as ShardId) {
                self.stats
                    .publish_heavy(s, self.core.heavy_shares(s as ShardId));
            }
        }
    }

    /// Runs packets of owned shards here, in order (held or pending ones).
    fn process_here(&mut self, mut pkts: Vec<Packet>, verdicts: &mut Vec<Verdict>) {
        #[cfg(test)]
        if crate::faults::REVERSE_HELD.load(std::sync::atomic::Ordering::Relaxed) {
            pkts.reverse();
        }
        if self.replica.is_some() {
            self.install_replicas(&mut pkts, self.shared.now_ns());
        }
        for chunk in pkts.chunks_mut(self.burst.max(1)) {
            let now = self.shared.now_ns();
            self.chain
                .process_burst(&mut self.shards, chunk, now, verdicts);
            let done = self.shared.now_ns();
            for (p, v) in chunk.iter().zip(verdicts.iter()) {
                if *v == Verdict::Forward {
                    let ok = self.chain.exit_in_order(&mut self.shards, p);
                    self.sink.exit_order(ok);
                }
                // (held packets: whether each changed its flow is not known
                // here, so each one with an entry goes by the secondary)
                if *v == Verdict::Forward && self.replicate(p, None, done) {
                    self.sink.one_away(p, done);
                } else {
                    self.sink.one(p, *v, done);
                }
            }
        }
        for p in pkts {
            self.sink.give_back(p.data);
        }
    }

    /// Takes the replica messages out of `pkts`: each one's entry is
    /// installed in its shard (this core owns it: the message was steered by
    /// its frame) and its frame sent out.
    fn install_replicas(&mut self, pkts: &mut Vec<Packet>, now: u64) {
        if !pkts.iter().any(|p| p.port & crate::carried::REPLICA != 0) {
            return;
        }
        let mut keep = Vec::with_capacity(pkts.len());
        for mut p in pkts.drain(..) {
            if p.port & crate::carried::REPLICA == 0 {
                keep.push(p);
                continue;
            }
            p.port &= !crate::carried::REPLICA;
            let entry = crate::carried::take_entry(&mut p.data);
            let s = self.chain.shard_of(p.hash);
            let shard = self.shards[s]
                .as_mut()
                .expect("a replica message is steered to its shard's owner");
            if p.port & crate::bulk::INSTALL != 0 {
                // a bulk-sync copy: installed, nothing sent out
                let ok = self.chain.install(shard, &entry, now).is_ok();
                if let Some(r) = self.replica.as_mut() {
                    r.synced += u64::from(ok);
                    r.sync_bad += u64::from(!ok);
                }
                self.sink.give_back(p.data);
                continue;
            }
            match self.chain.install(shard, &entry, now) {
                Ok(_) => {
                    self.chain.count_passed();
                    if let Some(r) = self.replica.as_mut() {
                        r.installed += 1;
                    }
                    self.sink.one(&p, Verdict::Forward, now);
                }
                Err(_) => {
                    self.chain.count_drop(nf::DropCause::ReplicaInvalid);
                    self.sink
                        .one(&p, Verdict::Drop(nf::DropCause::ReplicaInvalid), now);
                }
            }
            self.sink.give_back(p.data);
        }
        *pkts = keep;
    }

    /// Spill-over and split tenants (`crate::spill`): takes the burst's
    /// packets that go to another node out of it and steers them there; each
    /// counts as passed on (it leaves by that node, as a replicated one
    /// leaves by the secondary), or, the socket refusing it, as dropped
    /// (`spill_failed`).
    fn spill_over(&mut self, batch: &mut Vec<Packet>, now: u64) {
        let sp = self.replica.as_mut().and_then(|r| r.spill.as_mut());
        let Some(sp) = sp else {
            // (a node without steering of its own serves what it is sent)
            for p in batch.iter_mut() {
                p.port &= !crate::spill::STEERED;
            }
            return;
        };
        let (chain, shards, sink) = (&mut self.chain, &mut self.shards, &mut self.sink);
        batch.retain_mut(|p| {
            if p.port & crate::spill::STEERED != 0 {
                // sent here by another node: served here
                p.port &= !crate::spill::STEERED;
                return true;
            }
            let s = chain.shard_of(p.hash);
            let held = || match shards[s].as_mut() {
                Some(shard) => chain.holds(shard, p),
                // a shard moving away: its flows are not this core's to judge
                None => true,
            };
            let Some(to) = sp.away(p, now, held) else {
                return true;
            };
            if sp.steer(p, to) {
                chain.count_passed();
                sink.one_away(p, now);
            } else {
                chain.count_drop(nf::DropCause::SpillFailed);
            }
            false
        });
    }

    /// In a pool with replication: sends a forwarded packet that created or
    /// changed its flow's entry to the secondary with the entry, and returns
    /// true (it leaves from there). `i`: its index in the burst whose
    /// snapshot says what the entry held before; none: held packets, each
    /// sent by the secondary.
    fn replicate(&mut self, p: &Packet, i: Option<usize>, now: u64) -> bool {
        let Some(r) = self.replica.as_mut() else {
            return false;
        };
        let Some(id) = p.entry else {
            return false;
        };
        let s = self.chain.shard_of(p.hash);
        let Some(shard) = self.shards[s].as_ref() else {
            return false;
        };
        if !shard.table.is_live(id) {
            // the packet ended its flow here; the secondary's copy expires
            return false;
        }
        let n = self.chain.nf_count();
        let changed = match i {
            Some(i) if r.found[i] => {
                (0..n).any(|nf| shard.table.slot(id, nf) != &r.before[i * n + nf])
            }
            _ => true,
        };
        let key = (s, id.0);
        let gen = shard.table.generation(id);
        // (a secondary that is gone is found by the copy's sending, below:
        // the flow stays poisoned, so it is copied again once it is back)
        if r.poison.on_packet(key, gen, changed, true) == pool::poison::Route::Transmit {
            return false;
        }
        r.recopied += u64::from(!changed);
        let entry = self.chain.export(shard, id, now);
        if changed && r.bulk.refresh() {
            // a change while a bulk sync runs: copied there too
            r.bulk
                .send(&entry, shard.table.hash(id), (s, id.0, gen), now, false);
        }
        // the flow's packets before it leave before the secondary sends it
        self.sink.flush();
        // a secondary that is gone (its socket refuses) leaves the flow on
        // this node alone: the packet goes out here, counted `unprotected`,
        // rather than being lost
        match r.tx.send(p.port, &entry, &p.data) {
            Some(seq) => {
                // poisoned until the secondary acknowledges this copy
                r.poison.sent(key, gen, seq, now);
                true
            }
            None => false,
        }
    }

    /// This core's part of a bulk sync (`crate::bulk`): takes up a new
    /// order, sends again what was not acknowledged in time, and walks its
    /// shards a step further. True if it sent anything.
    fn bulk_step(&mut self, now: u64) -> bool {
        let Some(r) = self.replica.as_mut() else {
            return false;
        };
        let b = &mut r.bulk;
        if !b.refresh() {
            return false;
        }
        b.take_acks();
        let mut sent = false;
        for (s, e, gen) in b.overdue(now) {
            let id = EntryId(e);
            if let Some(shard) = self.shards[s].as_ref() {
                if shard.table.is_live(id) && shard.table.generation(id) == gen {
                    let entry = self.chain.export(shard, id, now);
                    b.send(&entry, shard.table.hash(id), (s, e, gen), now, true);
                    sent = true;
                }
            }
        }
        let mut budget = crate::bulk::STEP;
        while budget > 0 && b.room() {
            let (s, from) = match b.walk {
                Some(w) => w,
                None => match (0..self.shards.len())
                    .find(|&s| self.shards[s].is_some() && b.unwalked(s))
                {
                    Some(s) => (s, 0),
                    None => break,
                },
            };
            let Some(shard) = self.shards[s].as_ref() else {
                // moved away mid-walk: its new core walks it
                b.walk = None;
                continue;
            };
            let ids: Vec<EntryId> = shard.table.entries_from(from).take(budget).collect();
            let Some(last) = ids.last() else {
                b.finish(s);
                continue;
            };
            b.walk = Some((s, last.0 + 1));
            budget -= ids.len();
            for id in ids {
                let entry = self.chain.export(shard, id, now);
                let flow = (s, id.0, shard.table.generation(id));
                b.send(&entry, shard.table.hash(id), flow, now, false);
                sent = true;
            }
        }
        b.publish();
        sent
    }

    /// Pushes to an offloading core's ring, waiting while it is full (the
    /// offloading core never blocks, so the wait ends); returns the waits.
    fn push_offload(&mut self, to: CoreId, mut job: ToOffload) -> u64 {
        let ring = &mut self.offload_rings[usize::from(to)];
        let mut waits = 0;
        loop {
            match ring.push(job) {
                Ok(()) => return waits,
                Err(rtrb::PushError::Full(j)) => {
                    if self.shared.aborted() {
                        return waits;
                    }
                    job = j;
                    waits += 1;
                    std::thread::yield_now();
                }
            }
        }
    }
}

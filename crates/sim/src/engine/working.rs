//! A working core: bursts from its queue through its [`WorkingCore`] machine
//! (hold queues, queue cycling, hand-overs, leases, recall markers, pending
//! queue), with service times from the cost model. The protocol rules are the
//! machine's; this is the driver.
//!
//! [`WorkingCore`]: balance::migrate::WorkingCore

use balance::migrate::{Action, Recall, Received, Route};
use balance::ShardId;

use super::{Engine, Ev, Job, Msg, SimPkt};

/// How stale a core's per-packet cost may get.
const COST_REFRESH_NS: u64 = 100_000;
use crate::prep::{Prepared, MALFORMED, OFFLOADABLE, PRIORITY};

impl Engine<'_> {
    /// Cost of a packet on working core `c` now.
    /// The cost is refreshed when the core's shards change and otherwise at most
    /// every `COST_REFRESH_NS` (the working set moves slowly).
    pub(super) fn packet_cost(&mut self, c: usize) -> f64 {
        let wk = &self.working[c];
        let gen = wk.core.generation();
        if let Some((at, g, v)) = wk.cost_cache {
            if g == gen && self.now < at + COST_REFRESH_NS {
                return v;
            }
        }
        let mut flows = 0u64;
        let mut owned = 0u32;
        for s in wk.core.owned() {
            let s = usize::from(s);
            flows += u64::from(self.win_cur[s].max(self.win_last[s]));
            owned += 1;
        }
        let v = self
            .model
            .packet_ns(self.chain_ns, flows as f64, f64::from(owned.max(1)));
        self.working[c].cost_cache = Some((self.now, gen, v));
        v
    }

    /// Accounts one packet run to completion at `done` on core `c` (its cost is
    /// added by the caller).
    pub(super) fn sink(&mut self, pkt: SimPkt, done: u64, core: Option<usize>) {
        let info = self.prep.pkts[pkt.idx as usize];
        let shard = (info.hash as usize & self.mask) % self.prep.shards;
        let prio = info.flags & PRIORITY != 0;
        self.t.latency[usize::from(!prio)].saturating_record(done.saturating_sub(pkt.at).max(1));
        match Prepared::drop_cause(info.verdict) {
            None => self.t.forwarded += 1,
            Some(_) => self.t.dropped[usize::from(info.verdict - 1)] += 1,
        }
        // a packet that found no entry made one (chains with entries only)
        if self.prep.per_flow && !self.prep.is_hit(pkt.idx, pkt.n) {
            self.counts.created += 1;
        }
        // a move carries the entries the shard's table holds now (the
        // functional pass's count, idle flows expired), not every flow it saw
        if info.flags & MALFORMED == 0 {
            self.entries[shard] = u64::from(info.live);
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

    pub(super) fn new_flow_cost(&self, p: &SimPkt) -> f64 {
        if !self.prep.is_hit(p.idx, p.n) {
            self.model.new_flow_ns
        } else {
            0.0
        }
    }

    /// Runs packets of owned shards here, in order; returns their cost.
    pub(super) fn process_here(&mut self, c: usize, pkts: Vec<SimPkt>, start: u64) -> f64 {
        if pkts.is_empty() {
            return 0.0;
        }
        let per = self.packet_cost(c);
        let cost: f64 = pkts.iter().map(|p| per + self.new_flow_cost(p)).sum();
        let done = start + cost.round() as u64;
        for p in pkts {
            self.sink(p, done, Some(c));
        }
        cost
    }

    pub(super) fn push_recall(&mut self, c: usize, r: Recall, ready: u64) {
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
    pub(super) fn flush_outbox(&mut self, c: usize) {
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

    /// Tells the core's machine what a message says (after the driver's part of
    /// it: the warm-up of entries that arrive), then carries out its actions.
    pub(super) fn on_message(&mut self, c: usize, m: Msg, start: u64, cost: &mut f64) {
        let wk = &mut self.working[c];
        match m {
            Msg::Release { shard, to } => {
                let queued = wk.ring.len() as u64;
                wk.core.handle_release(shard, to, queued);
            }
            Msg::Shard { shard, entries } => {
                // the new owner's caches warm up on the moved entries
                *cost += entries as f64 * self.model.warm_ns_per_entry;
                wk.arrived_entries = Some(entries);
                wk.core.handle_shard(shard);
            }
            Msg::SetRatio { shard, ratio } => wk.core.handle_ratio(shard, ratio),
            Msg::SetOffloader { to } => wk.core.handle_offloader(to),
            Msg::Returned { ticket, entries } => {
                *cost += entries.len() as f64 * self.model.warm_ns_per_entry;
                wk.core.handle_returned(ticket, &entries);
            }
        }
        self.do_actions(c, start, cost);
    }

    /// Carries out core `c`'s actions; `start + cost` is when each happens.
    pub(super) fn do_actions(&mut self, c: usize, start: u64, cost: &mut f64) {
        while let Some(a) = self.working[c].core.poll_action() {
            let at = start + cost.round() as u64;
            match a {
                Action::PushRecall(r) => self.push_recall(c, r, start),
                Action::SendShard { shard, to } => {
                    let entries = self.entries[usize::from(shard)];
                    self.send(to, Msg::Shard { shard, entries }, at);
                }
                Action::RunHere(pkts) => *cost += self.process_here(c, pkts, at),
                Action::Arrived { shard, held } => {
                    let entries = self.working[c].arrived_entries.take().unwrap_or_default();
                    let done = at + self.model.message_ns.round() as u64;
                    self.at(
                        done,
                        Ev::Arrived {
                            shard,
                            entries,
                            held,
                        },
                    );
                }
            }
        }
    }

    pub(super) fn core_step(&mut self, c: usize) {
        let start = self.now;
        // a stalled core first waits for room in the offload ring
        self.flush_outbox(c);
        if !self.working[c].outbox.is_empty() {
            return; // the offloading core wakes it
        }
        let mut cost = 0.0;
        // idle timeouts are not modelled (`due.timers`); heavy-flow shares are
        // read from the machine by the controller
        self.working[c].core.handle_time(start, self.period);
        self.do_actions(c, start, &mut cost);
        while let Some(m) = self.working[c].inbox.pop_front() {
            self.on_message(c, m, start, &mut cost);
        }
        // packets queued by now (stamps are in FIFO order)
        let handed = self.handed();
        let n = self.working[c]
            .ring
            .iter()
            .take(self.cfg.burst)
            .take_while(|p| p.at + handed <= start)
            .count();
        if n > 0 && self.blocked_on == Some(c) {
            self.wake_feeder(start);
        }
        let batch = self.take_burst(c, n);
        let here = self.route_burst(c, &batch, start, &mut cost);
        let done = start + cost.round() as u64;
        for &p in &here {
            self.sink(p, done, Some(c));
        }
        self.scratch_batch = batch;
        self.scratch_here = here;
        for (_, job) in self.working[c].outbox.iter_mut() {
            let (Job::Pkt { ready, .. } | Job::Recall { ready, .. }) = job;
            *ready = (*ready).max(done);
        }
        self.working[c].core.handle_dequeued(n);
        self.do_actions(c, start, &mut cost);
        // the end of the run: idle, nothing queued, every flow home first
        if n == 0 && cost == 0.0 && self.stopping && self.working[c].inbox.is_empty() {
            self.working[c].core.handle_stopping();
            self.do_actions(c, start, &mut cost);
        }
        let wk = &mut self.working[c];
        let cost_ns = cost.round() as u64;
        wk.stats.busy_ns += cost_ns;
        wk.busy_until = start + cost_ns;
        self.flush_outbox(c);
        let wk = &self.working[c];
        let must_recall = self.stopping && wk.core.must_recall_all();
        if !wk.inbox.is_empty() || (!wk.outbox.is_empty() && cost_ns > 0) || must_recall {
            self.wake_core(c);
        } else if let Some(p) = wk.ring.front() {
            let t = p.at + handed;
            self.wake_core_at(c, t);
        }
    }

    /// Takes `n` packets from core `c`'s queue: counted per bucket, then run
    /// (returned with their shard) or held by the machine.
    fn take_burst(&mut self, c: usize, n: usize) -> Vec<(SimPkt, ShardId)> {
        let mut batch = std::mem::take(&mut self.scratch_batch);
        batch.clear();
        for _ in 0..n {
            let p = self.working[c].ring.pop_front().expect("n ≤ len");
            let info = self.prep.pkts[p.idx as usize];
            let b = info.hash as usize & self.mask;
            self.bucket_packets[b] += 1;
            if info.flags & PRIORITY != 0 {
                self.bucket_priority[b] += 1;
            }
            let s = (b % self.prep.shards) as ShardId;
            if let Received::Process(p) = self.working[c].core.on_packet(s, p) {
                batch.push((p, s));
            }
        }
        batch
    }

    /// Routes a burst: packets to run here are returned, offloaded ones go to
    /// the outbox, returning flows' packets pend; their cost is added to `cost`.
    fn route_burst(
        &mut self,
        c: usize,
        batch: &[(SimPkt, ShardId)],
        start: u64,
        cost: &mut f64,
    ) -> Vec<SimPkt> {
        let offloading = !self.offloading.is_empty();
        let per = self.packet_cost(c);
        let mut here = std::mem::take(&mut self.scratch_here);
        here.clear();
        let mut burst_cost = 0.0;
        for &(p, s) in batch {
            let info = self.prep.pkts[p.idx as usize];
            let wk = &mut self.working[c];
            let hit = self.prep.is_hit(p.idx, p.n);
            if hit {
                wk.core.sample(s, info.entry);
            }
            let route = if offloading && hit {
                wk.core.route(
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
                    burst_cost += per + self.new_flow_cost(&p);
                    here.push(p);
                }
                Route::Offload { to, lease } => {
                    // lookup and hand-off cost on this core; the rest runs there
                    burst_cost += self.model.overhead_ns;
                    wk.outbox.push_back((
                        to,
                        Job::Pkt {
                            ready: 0, // set at the end of the burst
                            shard: s,
                            lease,
                            pkt: p,
                        },
                    ));
                }
                Route::Pend(t) => wk.core.pend(t, s, p),
            }
        }
        *cost += burst_cost;
        here
    }
}

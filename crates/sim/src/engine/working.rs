//! A working core: bursts from its queue through `WorkerMoves` (hold queues,
//! queue cycling, hand-overs) and `WorkingOffload` (leases, recall markers,
//! pending queue), with service times from the cost model.

use balance::migrate::heavy;
use balance::migrate::{Recall, Received, Route, RATIO_ONE};
use balance::{CoreId, ShardId};
use runtime::OffloadSelect;

use super::{Engine, Ev, Job, Msg, SimPkt, IDLE_RECALL_NS, TIMER_NS};

/// How stale a core's per-packet cost may get.
const COST_REFRESH_NS: u64 = 100_000;
use crate::prep::{Prepared, OFFLOADABLE, PRIORITY};

impl Engine<'_> {
    /// Cost of a packet on working core `c` now.
    /// The cost is refreshed when the core's shards change and otherwise at most
    /// every `COST_REFRESH_NS` (the working set moves slowly).
    pub(super) fn packet_cost(&mut self, c: usize) -> f64 {
        let wk = &self.working[c];
        if let Some((at, v)) = wk.cost_cache {
            if self.now < at + COST_REFRESH_NS {
                return v;
            }
        }
        let mut flows = 0u64;
        let mut owned = 0u32;
        for s in wk.moves.owned() {
            let s = usize::from(s);
            flows += u64::from(self.win_cur[s].max(self.win_last[s]));
            owned += 1;
        }
        let v = self
            .model
            .packet_ns(self.chain_ns, flows as f64, f64::from(owned.max(1)));
        self.working[c].cost_cache = Some((self.now, v));
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
        if !self.prep.is_hit(pkt.idx, pkt.n) {
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

    pub(super) fn hand_over_when_settled(&mut self, c: usize, shard: ShardId, to: CoreId, at: u64) {
        // the shard is no longer among this core's
        self.working[c].cost_cache = None;
        if self.working[c].offload.is_settled(shard) {
            self.working[c].present[usize::from(shard)] = false;
            let entries = self.entries[usize::from(shard)];
            self.send(to, Msg::Shard { shard, entries }, at);
        } else {
            self.working[c].deferred.push((shard, to));
        }
    }

    pub(super) fn on_message(&mut self, c: usize, m: Msg, start: u64, cost: &mut f64) {
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
                self.working[c].cost_cache = None;
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

    pub(super) fn select_heaviest(&mut self, c: usize, shard: ShardId, at: u64) {
        let wk = &mut self.working[c];
        let r = f64::from(wk.offload.ratio(shard)) / f64::from(RATIO_ONE);
        let ids = heavy::eligible(&wk.last_heavy[usize::from(shard)], r);
        if let Some(rc) = wk.offload.set_eligible(shard, Some(ids)) {
            self.push_recall(c, rc, at);
        }
    }

    pub(super) fn close_window(&mut self, c: usize, at: u64) {
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

    pub(super) fn core_step(&mut self, c: usize) {
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
            if let Received::Process(p) = self.working[c].moves.on_packet(s, p) {
                batch.push((p, s));
            }
        }
        let mut here = std::mem::take(&mut self.scratch_here);
        here.clear();
        let mut burst_cost = 0.0;
        for &(p, s) in &batch {
            let info = self.prep.pkts[p.idx as usize];
            let wk = &mut self.working[c];
            let hit = self.prep.is_hit(p.idx, p.n);
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
                    burst_cost += per + self.new_flow_cost(&p);
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
        for &p in &here {
            self.sink(p, done, Some(c));
        }
        self.scratch_batch = batch;
        self.scratch_here = here;
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
}

//! The controller: every period a snapshot of the same type the runtime builds,
//! the balancer's plan, and the plan carried out through the shared
//! [`PlanApplier`](balance::migrate::PlanApplier).

use balance::migrate::Order;
use balance::{CoreId, ShardId, Snapshot};

use super::{Engine, Ev, Msg};

impl Engine<'_> {
    pub(super) fn tick(&mut self) {
        if self.feeding_done {
            return; // the runtime's controller stops its rounds then too
        }
        // the flow working-set window rolls with the period
        self.win_id += 1;
        self.win_last.clone_from(&self.win_cur);
        self.win_cur.iter_mut().for_each(|x| *x = 0);
        self.working.iter_mut().for_each(|w| w.cost_cache = None);
        self.t.rounds += 1;
        let snap = self.snapshot();
        self.t
            .load_over_time
            .push((self.now, snap.core_load.clone(), snap.core_packets.clone()));
        let plan = self.balancer.plan(&snap);
        let next = plan.next_period_ns.map_or(self.period, |p| p.max(1));
        self.period = next;
        self.at(self.now + next, Ev::Tick);
        for order in self.apply.apply(&plan, self.now) {
            self.order(order);
        }
    }

    /// Closes a window of the fixed imbalance grid: each working core's load
    /// and packets in it.
    pub(super) fn sample(&mut self) {
        if self.feeding_done {
            return;
        }
        let w = runspec::IMBALANCE_WINDOW_NS;
        let (mut load, mut packets) = (Vec::new(), Vec::new());
        for st in self.working.iter_mut().map(|c| &mut c.stats) {
            load.push(((st.busy_ns - st.window_busy) as f64 / w as f64).min(1.0));
            packets.push(st.packets - st.window_packets);
            st.window_busy = st.busy_ns;
            st.window_packets = st.packets;
        }
        self.t.windows.push((self.now, load, packets));
        self.at(self.now + w, Ev::Sample);
    }

    /// Carries out one order of the plan applier.
    pub(super) fn order(&mut self, order: Order) {
        let delay = self.cfg.nic_update_delay.as_nanos() as u64;
        match order {
            Order::Rewrite { shard, to, version } if delay == 0 => self.rewrite(shard, to, version),
            Order::Rewrite { shard, to, version } => {
                self.at(self.now + delay, Ev::Rewrite { shard, to, version })
            }
            Order::Release { from, shard, to } => {
                self.send(from, Msg::Release { shard, to }, self.now)
            }
            Order::SetRatio { core, shard, ratio } => {
                self.send(core, Msg::SetRatio { shard, ratio }, self.now)
            }
            Order::SetOffloader { core, to } => self.send(core, Msg::SetOffloader { to }, self.now),
        }
    }

    pub(super) fn rewrite(&mut self, shard: ShardId, to: CoreId, version: u64) {
        let shards = self.prep.shards;
        for b in (usize::from(shard)..self.table.len()).step_by(shards) {
            self.table.set(b, to);
        }
        self.version = self.version.max(version);
        if self.feeding_done {
            // a delayed rewrite after the last packet: nothing left to steer
            for order in self.apply.on_nic_seen(u64::MAX) {
                self.order(order);
            }
        }
    }

    pub(super) fn snapshot(&mut self) -> Snapshot {
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
        let owner = self.apply.owner();
        Snapshot {
            now_ns: self.now,
            period_ns,
            shards,
            workers: self.working.len(),
            owner: owner.to_vec(),
            moving: self.apply.moving(),
            bucket_packets: std::mem::replace(&mut self.bucket_packets, vec![0; self.mask + 1]),
            core_load,
            core_packets,
            offloaders: self.offloading.len(),
            ratio: self.apply.ratio().to_vec(),
            offload_core: self.apply.offload_core().to_vec(),
            bucket_priority: std::mem::replace(&mut self.bucket_priority, vec![0; self.mask + 1]),
            core_queue,
            core_drops: std::mem::replace(&mut self.queue_drops, vec![0; self.working.len()]),
            shard_heavy: (0..shards)
                .map(|s| {
                    self.working[usize::from(owner[s])]
                        .core
                        .heavy_shares(s as ShardId)
                        .to_vec()
                })
                .collect(),
        }
    }
}

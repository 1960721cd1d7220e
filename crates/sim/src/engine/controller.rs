//! The controller: every period a snapshot of the same type the runtime builds,
//! the balancer's plan, and the plan carried out through the shared
//! [`PlanApplier`](balance::migrate::PlanApplier).

use balance::migrate::Order;
use balance::snapshot::{CoreCounters, Counters};
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

    /// The period's snapshot, from the same builder the runtime uses: each
    /// core's busy time (idle = the rest of the elapsed time), packets and
    /// queue, the NIC's per-bucket counts and per-queue drops.
    pub(super) fn snapshot(&mut self) -> Snapshot {
        let now = self.now;
        let owner = self.apply.owner().to_vec();
        let core = |st: &super::CoreStats, queue: u64, heavy: Vec<Vec<f64>>| CoreCounters {
            busy_ns: st.busy_ns,
            idle_ns: now.saturating_sub(st.busy_ns),
            packets: st.packets,
            queue,
            heavy,
        };
        let mut cores: Vec<CoreCounters> = self
            .working
            .iter()
            .enumerate()
            .map(|(c, w)| {
                let heavy = (0..owner.len())
                    .map(|s| match usize::from(owner[s]) == c {
                        true => w.core.heavy_shares(s as ShardId).to_vec(),
                        false => Vec::new(),
                    })
                    .collect();
                core(&w.stats, w.ring.len() as u64, heavy)
            })
            .collect();
        cores.extend(self.offloading.iter().map(|o| {
            let queue = o.rings.iter().map(|r| r.len() as u64).sum();
            core(&o.stats, queue, Vec::new())
        }));
        let counters = Counters {
            cores,
            bucket_packets: self.bucket_packets.clone(),
            bucket_priority: self.bucket_priority.clone(),
            queue_drops: self.queue_drops.clone(),
        };
        self.snapshots
            .build(now, counters, &self.apply, self.working.len())
    }
}

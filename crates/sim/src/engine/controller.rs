//! The controller: every period a snapshot of the same type the runtime builds,
//! the balancer's plan, and the plan carried out through the shared `Mover`.

use balance::migrate::Command;
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

    pub(super) fn rewrite(&mut self, shard: ShardId, to: CoreId, version: u64) {
        let shards = self.prep.shards;
        for b in (usize::from(shard)..self.table.len()).step_by(shards) {
            self.table.set(b, to);
        }
        self.version = self.version.max(version);
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
}

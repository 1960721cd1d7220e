//! The controller thread: every period (ε) it reads the workers' counters into a
//! [`Snapshot`], asks the [`Balancer`] for a plan, and carries the plan's shard moves
//! out through the pure [`Mover`]; it stops the run once the feeder is done and no
//! move is under way.

use std::sync::Arc;
use std::time::{Duration, Instant};

use balance::migrate::{Command, Mover};
use balance::{Balancer, CoreId, ShardId, Snapshot};
use crossbeam_channel::{Receiver, Sender};

use crate::shared::Shared;
use crate::stats::{Totals, WorkerStats};
use crate::worker::{ToController, ToWorker};
use crate::Progress;

/// What the controller counted.
#[derive(Debug, Default)]
pub(crate) struct ControllerStats {
    pub rounds: u64,
    pub shard_moves: u64,
    /// Offload-ratio and offloading-core changes sent.
    pub offload_changes: u64,
    pub entries_moved: u64,
    pub packets_held: u64,
    pub plan_ns: Vec<u64>,
    pub move_ns: Vec<u64>,
    /// Per period: (time ns, load of each core).
    pub load_over_time: Vec<(u64, Vec<f64>)>,
    /// The balancer's own counters at the end.
    pub balancer: Vec<(&'static str, f64)>,
}

/// How long the controller sleeps between checks when no move is under way.
const IDLE_NAP: Duration = Duration::from_micros(100);

pub(crate) struct Controller {
    pub shared: Arc<Shared>,
    pub workers: Vec<Sender<ToWorker>>,
    /// Working cores' stats, then offloading cores'.
    pub stats: Vec<Arc<WorkerStats>>,
    pub offloaders: usize,
    /// r_s per shard, as last sent.
    pub ratio: Vec<u32>,
    /// Each working core's offloading core, as last sent.
    pub offload_core: Vec<Option<CoreId>>,
    pub inbox: Receiver<ToController>,
    pub owner: Vec<CoreId>,
    pub shards: usize,
    pub balancer: Box<dyn Balancer>,
    pub period: Duration,
    /// The NIC model's update delay: a rewrite takes effect this long after the
    /// move begins.
    pub nic_delay: Duration,
    pub progress: Option<Progress>,
}

impl Controller {
    pub fn run(mut self) -> ControllerStats {
        let mut st = ControllerStats::default();
        let mut mover = Mover::new(0);
        let mut started: Vec<Option<Instant>> = vec![None; self.shards];
        let mut next = Instant::now() + self.period;
        let mut prev: Vec<Totals> = self.stats.iter().map(|s| s.read()).collect();
        let mut prev_t = self.shared.now_ns();
        let buckets = self.shared.table.len();
        // rewrites waiting for the NIC's update delay, in version order
        let mut rewrites: std::collections::VecDeque<(Instant, ShardId, CoreId, u64)> =
            Default::default();
        loop {
            while rewrites.front().is_some_and(|r| r.0 <= Instant::now()) {
                let (_, shard, to, version) = rewrites.pop_front().expect("checked");
                self.rewrite(shard, to, version, buckets);
            }
            while let Ok(ToController::Arrived {
                shard,
                entries,
                held,
            }) = self.inbox.try_recv()
            {
                assert!(
                    mover.on_arrived(shard),
                    "shard {shard} arrived but was not moving"
                );
                st.entries_moved += entries;
                st.packets_held += held;
                if let Some(t) = started[usize::from(shard)].take() {
                    st.move_ns.push(t.elapsed().as_nanos() as u64);
                }
            }
            for c in mover.on_feeder_seen(self.shared.feeder_seen()) {
                if let Command::Release { from, shard, to } = c {
                    let _ = self.workers[usize::from(from)].send(ToWorker::Release { shard, to });
                }
            }
            let done = self.shared.feeder_done();
            if (done && mover.in_flight() == 0) || self.shared.aborted() {
                self.shared.stop();
                break;
            }
            if !done && Instant::now() >= next {
                // rounds on a fixed grid: a late round is caught up, not skipped
                next += self.period;
                st.rounds += 1;
                let now = self.shared.now_ns();
                let totals: Vec<Totals> = self.stats.iter().map(|s| s.read()).collect();
                let snap = self.snapshot(&mover, &totals, &prev, now, now - prev_t, buckets);
                prev = totals;
                prev_t = now;
                st.load_over_time.push((now, snap.core_load.clone()));
                if let Some(p) = &self.progress {
                    (p.0)(&snap);
                }
                let t = Instant::now();
                let plan = self.balancer.plan(&snap);
                st.plan_ns.push(t.elapsed().as_nanos() as u64);
                if let Some(p) = plan.next_period_ns {
                    // an adaptive period (RSS++): the next round is p from this one
                    self.period = Duration::from_nanos(p.max(1));
                    next = t + self.period;
                }
                for (s, to) in plan.moves {
                    let from = self.owner[usize::from(s)];
                    if let Ok(Command::Rewrite { shard, to, version }) = mover.begin(s, from, to) {
                        if self.nic_delay.is_zero() {
                            self.rewrite(shard, to, version, buckets);
                        } else {
                            rewrites.push_back((
                                Instant::now() + self.nic_delay,
                                shard,
                                to,
                                version,
                            ));
                        }
                        self.owner[usize::from(shard)] = to;
                        // the old owner recalls the shard's offloaded flows; r_s
                        // starts again from 0 at the new owner
                        self.ratio[usize::from(shard)] = 0;
                        started[usize::from(shard)] = Some(Instant::now());
                        st.shard_moves += 1;
                    }
                }
                for (s, r) in plan.ratios {
                    let i = usize::from(s);
                    if i >= self.shards || mover.is_moving(s) || self.ratio[i] == r {
                        continue;
                    }
                    self.ratio[i] = r;
                    let owner = usize::from(self.owner[i]);
                    let _ = self.workers[owner].send(ToWorker::SetRatio { shard: s, ratio: r });
                    st.offload_changes += 1;
                }
                for (w, o) in plan.offload_cores {
                    let i = usize::from(w);
                    let valid = o.is_none_or(|o| usize::from(o) < self.offloaders);
                    if i >= self.workers.len() || !valid || self.offload_core[i] == o {
                        continue;
                    }
                    self.offload_core[i] = o;
                    let _ = self.workers[i].send(ToWorker::SetOffloader { to: o });
                    st.offload_changes += 1;
                }
            }
            if mover.in_flight() == 0 && rewrites.is_empty() {
                // nothing to watch closely: leave the CPU to the feeder and the
                // workers (on a small machine they share cores with this thread)
                let until_round = next.saturating_duration_since(Instant::now());
                std::thread::sleep(until_round.min(IDLE_NAP));
            } else {
                std::thread::yield_now();
            }
        }
        st.balancer = self.balancer.counters();
        st
    }

    /// Rewrites every bucket of `shard` to `to`, then publishes `version` (Release).
    fn rewrite(&self, shard: ShardId, to: CoreId, version: u64, buckets: usize) {
        for b in (usize::from(shard)..buckets).step_by(self.shards) {
            self.shared.table.set(b, to);
        }
        self.shared.publish_version(version);
    }

    fn snapshot(
        &self,
        mover: &Mover,
        now: &[Totals],
        prev: &[Totals],
        now_ns: u64,
        period_ns: u64,
        buckets: usize,
    ) -> Snapshot {
        let mut bucket_packets = vec![0u64; buckets];
        let mut bucket_priority = vec![0u64; buckets];
        let mut core_queue = Vec::new();
        let mut core_load = Vec::new();
        let mut core_packets = Vec::new();
        for (n, p) in now.iter().zip(prev) {
            for (b, (x, y)) in n.buckets.iter().zip(&p.buckets).enumerate() {
                bucket_packets[b] += x.saturating_sub(*y);
            }
            for (b, (x, y)) in n.priority.iter().zip(&p.priority).enumerate() {
                bucket_priority[b] += x.saturating_sub(*y);
            }
            core_queue.push(n.queue);
            let busy = n.busy_ns.saturating_sub(p.busy_ns);
            let idle = n.idle_ns.saturating_sub(p.idle_ns);
            core_load.push(busy as f64 / (busy + idle).max(1) as f64);
            core_packets.push(n.packets.saturating_sub(p.packets));
        }
        Snapshot {
            now_ns,
            period_ns,
            shards: self.shards,
            workers: self.workers.len(),
            owner: self.owner.clone(),
            moving: (0..self.shards as ShardId)
                .filter(|s| mover.is_moving(*s))
                .collect(),
            bucket_packets,
            core_load,
            core_packets,
            offloaders: self.offloaders,
            ratio: self.ratio.clone(),
            offload_core: self.offload_core.clone(),
            bucket_priority,
            core_queue,
            shard_heavy: (0..self.shards)
                .map(|s| {
                    now.get(usize::from(self.owner[s]))
                        .and_then(|t| t.heavy.get(s).cloned())
                        .unwrap_or_default()
                })
                .collect(),
        }
    }
}

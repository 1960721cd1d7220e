//! The controller thread: every period (ε) it reads the cores' counters into a
//! [`Snapshot`], asks the [`Balancer`] for a plan and carries it out through the
//! pure [`PlanApplier`] (the rules of applying a plan live there); it stops the
//! run once the feeder is done and no move is under way.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use balance::migrate::{ApplyStats, Order, PlanApplier};
use balance::snapshot::{CoreCounters, Counters, SnapshotBuilder};
use balance::{Balancer, CoreId, ShardId};
use crossbeam_channel::{Receiver, Sender};

use crate::messages::{ToController, ToWorker};
use crate::shared::Shared;
use crate::stats::{Totals, WorkerStats};
use crate::Progress;

/// What the controller counted.
#[derive(Debug, Default)]
pub(crate) struct ControllerStats {
    pub rounds: u64,
    pub plan_ns: Vec<u64>,
    /// Per period: (time ns, load of each core).
    pub load_over_time: Vec<(u64, Vec<f64>, Vec<u64>)>,
    /// Per window of the fixed imbalance grid (`runspec::IMBALANCE_WINDOW_NS`):
    /// its end, each working core's load and packets.
    pub windows: Vec<(u64, Vec<f64>, Vec<u64>)>,
    /// The balancer's own counters at the end.
    pub balancer: Vec<(&'static str, f64)>,
    /// The plan applier's counters.
    pub apply: ApplyStats,
}

/// How long the controller sleeps between checks when no move is under way.
const IDLE_NAP: Duration = Duration::from_micros(100);

pub(crate) struct Controller {
    pub shared: Arc<Shared>,
    pub workers: Vec<Sender<ToWorker>>,
    /// Working cores' stats, then offloading cores'.
    pub stats: Vec<Arc<WorkerStats>>,
    pub inbox: Receiver<ToController>,
    pub apply: PlanApplier,
    pub balancer: Box<dyn Balancer>,
    pub period: Duration,
    /// The NIC model's update delay: a rewrite takes effect this long after the
    /// move begins.
    pub nic_delay: Duration,
    pub progress: Option<Progress>,
    pub metrics: Option<Arc<runspec::metrics::Metrics>>,
    /// Kernel steering: the indirection table in the kernel.
    pub kernel: Option<Arc<netio::steering::KernelRss>>,
}

/// The builder's cumulative counters from the cores' totals: per-bucket
/// packets summed over the cores unless the kernel's counters (`kernel`)
/// are given, and the NIC model's per-queue drops.
fn counters_of(
    totals: Vec<Totals>,
    shared: &Shared,
    workers: usize,
    kernel: Option<Vec<u64>>,
) -> Counters {
    let buckets = shared.table.len();
    let sum = |f: fn(&Totals) -> &Vec<u64>| {
        let mut v = vec![0u64; buckets];
        for t in &totals {
            for (x, y) in v.iter_mut().zip(f(t)) {
                *x += y;
            }
        }
        v
    };
    let bucket_packets = kernel.unwrap_or_else(|| sum(|t| &t.buckets));
    let bucket_priority = sum(|t| &t.priority);
    Counters {
        cores: totals
            .into_iter()
            .map(|t| CoreCounters {
                busy_ns: t.busy_ns,
                idle_ns: t.idle_ns,
                packets: t.packets,
                queue: t.queue,
                heavy: t.heavy,
            })
            .collect(),
        bucket_packets,
        bucket_priority,
        queue_drops: shared.queue_drops(workers),
    }
}

/// One window of the fixed imbalance grid: each core's load and packets
/// between `prev` and `now`.
fn window_sample(t_ns: u64, now: &[Totals], prev: &[Totals]) -> (u64, Vec<f64>, Vec<u64>) {
    let (load, packets) = now
        .iter()
        .zip(prev)
        .map(|(n, p)| {
            let busy = n.busy_ns.saturating_sub(p.busy_ns);
            let idle = n.idle_ns.saturating_sub(p.idle_ns);
            (
                busy as f64 / (busy + idle).max(1) as f64,
                n.packets.saturating_sub(p.packets),
            )
        })
        .unzip();
    (t_ns, load, packets)
}

/// A rewrite waiting for the NIC's update delay.
type Delayed = (Instant, ShardId, CoreId, u64);

impl Controller {
    pub fn run(mut self) -> ControllerStats {
        let mut st = ControllerStats::default();
        let mut next = Instant::now() + self.period;
        let mut snapshots = SnapshotBuilder::new(self.shared.now_ns());
        // the kernel program's per-bucket counters at the last round (kernel
        // steering: what the balancer balances is the arrivals it counted)
        let mut kernel_last = self.kernel_counts();
        let (first, kernel) = self.counters(&mut kernel_last);
        let mut wprev = first.clone();
        let w = self.workers.len();
        // the first period counts from here
        let start = counters_of(first, &self.shared, w, kernel);
        snapshots.build(self.shared.now_ns(), start, &self.apply, w);
        // rewrites waiting for the NIC's update delay, in version order
        let mut rewrites: VecDeque<Delayed> = VecDeque::new();
        let window = Duration::from_nanos(runspec::IMBALANCE_WINDOW_NS);
        let mut next_window = Instant::now() + window;
        loop {
            if !self.shared.feeder_done() && Instant::now() >= next_window {
                next_window += window;
                let now: Vec<Totals> = self.stats[..self.workers.len()]
                    .iter()
                    .map(|s| s.read())
                    .collect();
                st.windows
                    .push(window_sample(self.shared.now_ns(), &now, &wprev));
                wprev = now;
            }
            while rewrites.front().is_some_and(|r| r.0 <= Instant::now()) {
                let (_, shard, to, version) = rewrites.pop_front().expect("checked");
                self.rewrite(shard, to, version);
            }
            while let Ok(ToController::Arrived {
                shard,
                entries,
                held,
            }) = self.inbox.try_recv()
            {
                let now = self.shared.now_ns();
                assert!(
                    self.apply.on_arrived(shard, entries, held, now),
                    "shard {shard} arrived but was not moving"
                );
            }
            for order in self.apply.on_nic_seen(self.shared.feeder_seen()) {
                self.send(order, &mut rewrites);
            }
            let done = self.shared.feeder_done();
            if (done && self.apply.in_flight() == 0) || self.shared.aborted() {
                self.shared.stop();
                break;
            }
            if !done && Instant::now() >= next {
                // rounds on a fixed grid: a late round is caught up, not skipped
                next += self.period;
                st.rounds += 1;
                let now = self.shared.now_ns();
                let (totals, kernel) = self.counters(&mut kernel_last);
                let counters = counters_of(totals, &self.shared, self.workers.len(), kernel);
                let snap = snapshots.build(now, counters, &self.apply, self.workers.len());
                st.load_over_time
                    .push((now, snap.core_load.clone(), snap.core_packets.clone()));
                if let Some(m) = &self.metrics {
                    let roles = (0..snap.core_load.len()).map(|c| {
                        if c < snap.workers {
                            "working"
                        } else {
                            "offloading"
                        }
                    });
                    let a = self.apply.stats();
                    m.publish_round(
                        roles.zip(snap.core_load.iter().copied()).collect(),
                        vec![
                            ("shard_moves", a.shard_moves),
                            ("offload_changes", a.offload_changes),
                            ("entries_moved", a.entries_moved),
                            ("packets_held", a.packets_held),
                        ],
                        self.balancer.counters(),
                    );
                }
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
                for order in self.apply.apply(&plan, self.shared.now_ns()) {
                    self.send(order, &mut rewrites);
                }
            }
            if self.apply.in_flight() == 0 && rewrites.is_empty() {
                // nothing to watch closely: leave the CPU to the feeder and the
                // workers (on a small machine they share cores with this thread)
                let until_round = next.saturating_duration_since(Instant::now());
                std::thread::sleep(until_round.min(IDLE_NAP));
            } else {
                std::thread::yield_now();
            }
        }
        st.balancer = self.balancer.counters();
        st.apply = self.apply.stats().clone();
        st
    }

    /// Carries out one order.
    fn send(&self, order: Order, rewrites: &mut VecDeque<Delayed>) {
        let to_core = |c: CoreId, m: ToWorker| {
            let _ = self.workers[usize::from(c)].send(m);
        };
        match order {
            Order::Rewrite { shard, to, version } if self.nic_delay.is_zero() => {
                self.rewrite(shard, to, version)
            }
            Order::Rewrite { shard, to, version } => {
                rewrites.push_back((Instant::now() + self.nic_delay, shard, to, version))
            }
            Order::Release { from, shard, to } => to_core(from, ToWorker::Release { shard, to }),
            Order::SetRatio { core, shard, ratio } => {
                to_core(core, ToWorker::SetRatio { shard, ratio })
            }
            Order::SetOffloader { core, to } => to_core(core, ToWorker::SetOffloader { to }),
        }
    }

    /// Every core's totals, and with kernel steering the program's
    /// per-bucket counters (the last readable ones if the map cannot be read
    /// now: the period then counts no arrivals rather than garbage).
    fn counters(&self, kernel_last: &mut Option<Vec<u64>>) -> (Vec<Totals>, Option<Vec<u64>>) {
        let totals = self.stats.iter().map(|s| s.read()).collect();
        if let Some(k) = self.kernel_counts() {
            *kernel_last = Some(k);
        }
        (totals, kernel_last.clone())
    }

    /// Kernel steering: the program's per-bucket packet counters (`None` without
    /// kernel steering, or if the map cannot be read).
    fn kernel_counts(&self) -> Option<Vec<u64>> {
        self.kernel.as_ref().and_then(|k| k.all_packets().ok())
    }

    /// Rewrites every bucket of `shard` to `to`, then publishes `version` (Release).
    fn rewrite(&self, shard: ShardId, to: CoreId, version: u64) {
        let shards = self.apply.owner().len();
        for b in (usize::from(shard)..self.shared.table.len()).step_by(shards) {
            self.shared.table.set(b, to);
            if let Some(k) = &self.kernel {
                // a failed map update would strand the shard's packets: abort
                if let Err(e) = k.set(b as u32, u32::from(to)) {
                    eprintln!("flowshift: kernel steering table update failed: {e}");
                    self.shared.abort();
                }
            }
        }
        self.shared.publish_version(version);
    }
}

//! The one place a [`Snapshot`] is assembled: the runtime's controller and the
//! simulator both hand in their cumulative counters and the plan applier, and
//! get the period's snapshot back, so the balancers see the same quantities
//! from both drivers (loads, packets, queue drops, heavy-flow shares). Pure:
//! the time is an argument.

use crate::migrate::PlanApplier;
use crate::Snapshot;

/// One core's counters, cumulative since the run began (except `queue`, a
/// level, and `heavy`, the last window's).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CoreCounters {
    /// Time spent processing packets, ns.
    pub busy_ns: u64,
    /// Time spent waiting for packets, ns (a driver that only knows its busy
    /// time gives the rest of the elapsed time).
    pub idle_ns: u64,
    /// Packets processed.
    pub packets: u64,
    /// Packets waiting in the core's queue now.
    pub queue: u64,
    /// Per shard, the cumulative shares of its heaviest flows as this core
    /// last counted them (used for the shards it owns; may be empty).
    pub heavy: Vec<Vec<f64>>,
}

/// Everything the drivers count, cumulative since the run began.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Counters {
    /// Working cores, then offloading cores.
    pub cores: Vec<CoreCounters>,
    /// Packets per indirection-table bucket (arrivals or processed, whichever
    /// the driver's steering counts).
    pub bucket_packets: Vec<u64>,
    /// Priority-class packets per bucket (empty when not measured).
    pub bucket_priority: Vec<u64>,
    /// Packets each working core's queue dropped because it was full (empty
    /// when not measured).
    pub queue_drops: Vec<u64>,
}

/// Turns successive cumulative [`Counters`] into period [`Snapshot`]s.
#[derive(Clone, Debug, Default)]
pub struct SnapshotBuilder {
    prev: Counters,
    prev_ns: u64,
}

impl SnapshotBuilder {
    /// A builder whose first period starts at `start_ns` with every counter 0.
    pub fn new(start_ns: u64) -> SnapshotBuilder {
        SnapshotBuilder {
            prev: Counters::default(),
            prev_ns: start_ns,
        }
    }

    /// The snapshot of the period from the last call (or the start) to
    /// `now_ns`: differences of the counters, each core's load as its busy
    /// share of busy + idle time (0..=1), shard ownership, moves and offload
    /// state from `apply`.
    pub fn build(
        &mut self,
        now_ns: u64,
        now: Counters,
        apply: &PlanApplier,
        workers: usize,
    ) -> Snapshot {
        let period_ns = now_ns.saturating_sub(self.prev_ns).max(1);
        let prev = &self.prev;
        let diff = |a: &[u64], b: &[u64]| -> Vec<u64> {
            a.iter()
                .enumerate()
                .map(|(i, x)| x.saturating_sub(b.get(i).copied().unwrap_or(0)))
                .collect()
        };
        let zero = CoreCounters::default();
        let mut core_load = Vec::with_capacity(now.cores.len());
        let mut core_packets = Vec::with_capacity(now.cores.len());
        for (i, c) in now.cores.iter().enumerate() {
            let p = prev.cores.get(i).unwrap_or(&zero);
            let busy = c.busy_ns.saturating_sub(p.busy_ns);
            let idle = c.idle_ns.saturating_sub(p.idle_ns);
            core_load.push((busy as f64 / (busy + idle).max(1) as f64).clamp(0.0, 1.0));
            core_packets.push(c.packets.saturating_sub(p.packets));
        }
        let owner = apply.owner();
        let shard_heavy = (0..owner.len())
            .map(|s| {
                now.cores
                    .get(usize::from(owner[s]))
                    .and_then(|c| c.heavy.get(s).cloned())
                    .unwrap_or_default()
            })
            .collect();
        let snap = Snapshot {
            now_ns,
            period_ns,
            shards: owner.len(),
            workers,
            owner: owner.to_vec(),
            moving: apply.moving(),
            bucket_packets: diff(&now.bucket_packets, &prev.bucket_packets),
            core_load,
            core_packets,
            offloaders: apply.offloaders(),
            ratio: apply.ratio().to_vec(),
            offload_core: apply.offload_core().to_vec(),
            bucket_priority: diff(&now.bucket_priority, &prev.bucket_priority),
            core_queue: now.cores.iter().map(|c| c.queue).collect(),
            core_drops: diff(&now.queue_drops, &prev.queue_drops),
            shard_heavy,
        };
        self.prev = now;
        self.prev_ns = now_ns;
        snap
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::migrate::PlanApplier;

    fn core(busy: u64, idle: u64, packets: u64) -> CoreCounters {
        CoreCounters {
            busy_ns: busy,
            idle_ns: idle,
            packets,
            queue: packets / 10,
            heavy: vec![vec![0.5], vec![0.25]],
        }
    }

    #[test]
    fn a_period_is_the_difference_of_two_readings() {
        let apply = PlanApplier::new(vec![0, 1], 0, vec![None, None], 0);
        let mut b = SnapshotBuilder::new(100);
        let first = Counters {
            cores: vec![core(50, 50, 10), core(0, 100, 0)],
            bucket_packets: vec![4, 6],
            bucket_priority: vec![1, 0],
            queue_drops: vec![0, 3],
        };
        let s = b.build(200, first.clone(), &apply, 2);
        assert_eq!((s.now_ns, s.period_ns), (200, 100));
        assert_eq!(s.core_load, [0.5, 0.0]);
        assert_eq!(s.core_packets, [10, 0]);
        assert_eq!(s.bucket_packets, [4, 6]);
        assert_eq!(s.core_drops, [0, 3]);
        let second = Counters {
            cores: vec![core(150, 50, 30), core(25, 175, 5)],
            bucket_packets: vec![20, 6],
            bucket_priority: vec![1, 2],
            queue_drops: vec![7, 3],
        };
        let s = b.build(300, second, &apply, 2);
        assert_eq!(s.period_ns, 100);
        assert_eq!(s.core_load, [1.0, 0.25]);
        assert_eq!(s.core_packets, [20, 5]);
        assert_eq!(s.core_queue, [3, 0]);
        assert_eq!(s.bucket_packets, [16, 0]);
        assert_eq!(s.bucket_priority, [0, 2]);
        // queue drops over the period reach the balancers
        assert_eq!(s.core_drops, [7, 0]);
        // each shard's heavy shares come from its owner
        assert_eq!(s.shard_heavy, [vec![0.5], vec![0.25]]);
        assert_eq!((s.shards, s.workers, s.owner.clone()), (2, 2, vec![0, 1]));
    }
}

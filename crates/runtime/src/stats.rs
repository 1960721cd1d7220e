//! Per-worker counters the controller reads every period: packets per bucket
//! (RSS++ §4), busy and idle time (core load), packets processed.
//!
//! Each counter has one writer (its worker), which stores its running total; the
//! controller reads totals and takes differences between periods — the effect of
//! RSS++'s epoch reset without the controller ever writing to a worker's counters.
//! All accesses are `Relaxed`: these are statistics, nothing else is published
//! through them, and a reading one burst stale is fine.

use std::sync::atomic::Ordering::Relaxed;

use crossbeam_utils::CachePadded;

use crate::sync::AtomicU64;

/// The counters a core writes after every burst, on cache lines of their own so
/// that two cores' writes (and the controller's reads) never share a line.
struct Hot {
    queue: AtomicU64,
    busy_ns: AtomicU64,
    idle_ns: AtomicU64,
    packets: AtomicU64,
}

pub(crate) struct WorkerStats {
    hot: CachePadded<Hot>,
    buckets: Box<[AtomicU64]>,
    priority: Box<[AtomicU64]>,
    /// Per shard, the cumulative traffic shares of its heaviest flows in the last
    /// window (f64 bits, `heavy::K` per shard; 0 = none).
    heavy: Box<[AtomicU64]>,
}

/// A worker's running totals, as the controller read them.
#[derive(Clone, Debug, Default)]
pub(crate) struct Totals {
    pub buckets: Vec<u64>,
    pub priority: Vec<u64>,
    /// Queue occupancy at the last publication (a level, not a total).
    pub queue: u64,
    /// Per shard: cumulative shares of its heaviest flows (last window).
    pub heavy: Vec<Vec<f64>>,
    pub busy_ns: u64,
    pub idle_ns: u64,
    pub packets: u64,
}

impl WorkerStats {
    pub fn new(buckets: usize, shards: usize) -> WorkerStats {
        WorkerStats {
            heavy: (0..shards * balance::migrate::heavy::K)
                .map(|_| AtomicU64::new(0))
                .collect(),
            buckets: (0..buckets).map(|_| AtomicU64::new(0)).collect(),
            priority: (0..buckets).map(|_| AtomicU64::new(0)).collect(),
            hot: CachePadded::new(Hot {
                queue: AtomicU64::new(0),
                busy_ns: AtomicU64::new(0),
                idle_ns: AtomicU64::new(0),
                packets: AtomicU64::new(0),
            }),
        }
    }

    /// Worker: publish its running totals.
    pub fn publish_bucket(&self, bucket: usize, total: u64) {
        self.buckets[bucket].store(total, Relaxed);
    }

    /// Worker: publish a bucket's running total of priority-class packets.
    pub fn publish_priority(&self, bucket: usize, total: u64) {
        self.priority[bucket].store(total, Relaxed);
    }

    /// Worker: publish a shard's heaviest-flow shares (last window).
    pub fn publish_heavy(&self, shard: usize, cum: &[f64]) {
        let k = balance::migrate::heavy::K;
        for i in 0..k {
            let v = cum.get(i).copied().unwrap_or(0.0);
            self.heavy[shard * k + i].store(v.to_bits(), Relaxed);
        }
    }

    /// Worker: publish its queue's occupancy.
    pub fn publish_queue(&self, packets: u64) {
        self.hot.queue.store(packets, Relaxed);
    }

    /// Worker: publish time and packet totals.
    pub fn publish(&self, busy_ns: u64, idle_ns: u64, packets: u64) {
        self.hot.busy_ns.store(busy_ns, Relaxed);
        self.hot.idle_ns.store(idle_ns, Relaxed);
        self.hot.packets.store(packets, Relaxed);
    }

    /// Worker: its own time and packet totals, as last published.
    pub fn own_load(&self) -> nf::director::CoreLoad {
        nf::director::CoreLoad {
            busy_ns: self.hot.busy_ns.load(Relaxed),
            idle_ns: self.hot.idle_ns.load(Relaxed),
            packets: self.hot.packets.load(Relaxed),
        }
    }

    /// Controller: read every total.
    pub fn read(&self) -> Totals {
        Totals {
            buckets: self.buckets.iter().map(|b| b.load(Relaxed)).collect(),
            priority: self.priority.iter().map(|b| b.load(Relaxed)).collect(),
            queue: self.hot.queue.load(Relaxed),
            heavy: self
                .heavy
                .chunks(balance::migrate::heavy::K)
                .map(|c| {
                    c.iter()
                        .map(|x| f64::from_bits(x.load(Relaxed)))
                        .filter(|v| *v > 0.0)
                        .collect()
                })
                .collect(),
            busy_ns: self.hot.busy_ns.load(Relaxed),
            idle_ns: self.hot.idle_ns.load(Relaxed),
            packets: self.hot.packets.load(Relaxed),
        }
    }
}

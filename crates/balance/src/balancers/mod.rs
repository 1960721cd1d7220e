//! Balancers: a [`Snapshot`] of the last period in, a [`Plan`] out. Pure: no
//! threads, no clock (the time is in the snapshot), randomness only from a seed.

mod random;
mod roger;
mod rsspp;
mod scripted;

pub use random::RandomMoves;
pub use roger::{Roger, RogerConfig};
pub use rsspp::{RoundInfo, Rsspp, RssppConfig};
pub use scripted::{Scripted, ScriptedMove};

use crate::{CoreId, ShardId};

/// What the controller saw over the last period.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Snapshot {
    /// Time since the run started, ns.
    pub now_ns: u64,
    /// Length of the period the counts cover, ns.
    pub period_ns: u64,
    /// Number of shards; bucket `b` belongs to shard `b % shards`.
    pub shards: usize,
    /// Number of working cores.
    pub workers: usize,
    /// Owner of each shard (the core the table steers it to).
    pub owner: Vec<CoreId>,
    /// Shards that are moving now (their owner is the destination).
    pub moving: Vec<ShardId>,
    /// Packets per indirection-table bucket over the period.
    pub bucket_packets: Vec<u64>,
    /// Busy share of each core over the period (0..=1).
    pub core_load: Vec<f64>,
    /// Packets each core processed over the period.
    pub core_packets: Vec<u64>,
    /// Number of offloading cores (their loads follow the working cores' in
    /// `core_load` and `core_packets`).
    pub offloaders: usize,
    /// Offload ratio r_s of each shard, in units of `1 / RATIO_ONE`.
    pub ratio: Vec<u32>,
    /// The offloading core of each working core.
    pub offload_core: Vec<Option<CoreId>>,
    /// Priority-class packets per bucket over the period (a subset of
    /// `bucket_packets`; empty when not measured).
    pub bucket_priority: Vec<u64>,
    /// Packets waiting in each core's queue when the snapshot was taken.
    pub core_queue: Vec<u64>,
    /// Packets each working core's queue dropped, full, over the period (a
    /// NIC's per-queue drop counter; empty when not measured). A saturated
    /// core's own counts show what it ran, not what arrived for it.
    pub core_drops: Vec<u64>,
    /// Per shard, the cumulative shares of its traffic carried by its heaviest
    /// flows (heaviest first; at most a few; empty when unknown), so an offload
    /// ratio can be rounded to a flow boundary.
    pub shard_heavy: Vec<Vec<f64>>,
}

impl Snapshot {
    /// Packets per shard over the period.
    pub fn shard_packets(&self) -> Vec<u64> {
        fold(&self.bucket_packets, self.shards)
    }

    /// Priority-class packets per shard over the period.
    pub fn shard_priority(&self) -> Vec<u64> {
        fold(&self.bucket_priority, self.shards)
    }
}

fn fold(per_bucket: &[u64], shards: usize) -> Vec<u64> {
    let mut v = vec![0; shards];
    for (b, n) in per_bucket.iter().enumerate() {
        v[b % shards.max(1)] += n;
    }
    v
}

/// What a balancer wants done.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// Shard moves: (shard, new owner).
    pub moves: Vec<(ShardId, CoreId)>,
    /// Offload-ratio changes: (shard, r_s in units of `1 / RATIO_ONE`). Ignored for
    /// a shard that moves (a moving shard's ratio is 0 until it has arrived).
    pub ratios: Vec<(ShardId, u32)>,
    /// Offloading-core changes: (working core, its new offloading core or none).
    pub offload_cores: Vec<(CoreId, Option<CoreId>)>,
    /// The period until the next round, when the balancer adapts it (RSS++ §4).
    pub next_period_ns: Option<u64>,
}

/// A load balancer.
pub trait Balancer: Send {
    /// Its name in reports.
    fn name(&self) -> &'static str;
    /// The plan for this period.
    fn plan(&mut self, snap: &Snapshot) -> Plan;
    /// What it counted (for the run's report), e.g. solver timeouts.
    fn counters(&self) -> Vec<(&'static str, f64)> {
        Vec::new()
    }
}

/// RSS as initialised: never moves anything.
#[derive(Clone, Copy, Debug, Default)]
pub struct Static;

impl Balancer for Static {
    fn name(&self) -> &'static str {
        "static"
    }

    fn plan(&mut self, _: &Snapshot) -> Plan {
        Plan::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shard_packets_fold_buckets() {
        let s = Snapshot {
            shards: 2,
            bucket_packets: vec![1, 2, 3, 4],
            ..Default::default()
        };
        assert_eq!(s.shard_packets(), [4, 6]);
        assert_eq!(Static.plan(&s), Plan::default());
    }
}

//! Where a run starts: shard s on working core s mod W (as RSS's default
//! indirection table spreads buckets), working core w offloading to w mod N, every
//! shard's offload ratio the configured one (0 without offloading cores).

use balance::migrate::RATIO_ONE;
use balance::{CoreId, ShardId};

use crate::RunConfig;

/// The starting assignment of shards and offloading cores.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Topology {
    /// The owner of each shard.
    pub owner: Vec<CoreId>,
    /// Each working core's offloading core.
    pub offload_core: Vec<Option<CoreId>>,
    /// Every shard's starting r_s, in units of `1 / RATIO_ONE`.
    pub ratio: u32,
}

impl Topology {
    /// The topology of `cfg` (validated) with `shards` shards.
    pub fn new(cfg: &RunConfig, shards: usize) -> Topology {
        let (w, o) = (cfg.workers.max(1), cfg.offloaders);
        Topology {
            owner: (0..shards).map(|s| (s % w) as CoreId).collect(),
            offload_core: (0..w).map(|i| (o > 0).then(|| (i % o) as CoreId)).collect(),
            ratio: if o > 0 {
                (cfg.offload_ratio * f64::from(RATIO_ONE)).round() as u32
            } else {
                0
            },
        }
    }

    /// Starts shard `s` on core `owners[s]` for the first shards (under rule
    /// steering, rule `s` is shard `s` and names its core); the error says
    /// which rule names a core the run does not have.
    pub fn place(&mut self, owners: &[u16], workers: usize) -> Result<(), String> {
        for (s, &c) in owners.iter().enumerate() {
            if usize::from(c) >= workers {
                return Err(format!(
                    "steering.rules: rule {s} names core {c}, but the run has {workers} working \
                     cores (plan with --cores {workers})"
                ));
            }
            if let Some(o) = self.owner.get_mut(s) {
                *o = c;
            }
        }
        Ok(())
    }

    /// Starts the shards in contiguous blocks, shard s on core ⌊s·W / S⌋:
    /// under live rules a block of cells is one ternary rule when the cores
    /// are a power of two (a few more otherwise), within any rule budget the
    /// balancer is given.
    pub fn place_blocks(&mut self, workers: usize) {
        let n = self.owner.len();
        for (s, o) in self.owner.iter_mut().enumerate() {
            *o = (s * workers.max(1) / n.max(1)) as CoreId;
        }
    }

    /// The shards working core `core` owns at the start.
    pub fn owned(&self, core: usize) -> Vec<ShardId> {
        (0..self.owner.len())
            .filter(|s| usize::from(self.owner[*s]) == core)
            .map(|s| s as ShardId)
            .collect()
    }
}

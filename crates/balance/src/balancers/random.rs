//! A scripted balancer for testing the migration machinery: every period it moves a
//! random shard (not already moving) to a random other core.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::{Balancer, Plan, Snapshot};
use crate::{CoreId, ShardId};

/// Random shard moves, reproducible from a seed.
#[derive(Clone, Debug)]
pub struct RandomMoves {
    rng: ChaCha8Rng,
}

impl RandomMoves {
    /// A balancer seeded with `seed`.
    pub fn new(seed: u64) -> RandomMoves {
        RandomMoves {
            rng: ChaCha8Rng::seed_from_u64(seed),
        }
    }
}

impl Balancer for RandomMoves {
    fn name(&self) -> &'static str {
        "random"
    }

    fn plan(&mut self, snap: &Snapshot) -> Plan {
        if snap.workers < 2 {
            return Plan::default();
        }
        let movable: Vec<ShardId> = (0..snap.shards as ShardId)
            .filter(|s| !snap.moving.contains(s))
            .collect();
        if movable.is_empty() {
            return Plan::default();
        }
        let s = movable[self.rng.gen_range(0..movable.len())];
        let from = snap.owner[usize::from(s)];
        let mut to = self.rng.gen_range(0..snap.workers - 1) as CoreId;
        if to >= from {
            to += 1;
        }
        Plan {
            moves: vec![(s, to)],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn moves_a_movable_shard_elsewhere() {
        let snap = Snapshot {
            shards: 4,
            workers: 3,
            owner: vec![0, 1, 2, 0],
            moving: vec![0, 1, 2],
            ..Default::default()
        };
        let mut b = RandomMoves::new(1);
        for _ in 0..50 {
            let p = b.plan(&snap);
            assert_eq!(p.moves.len(), 1);
            let (s, to) = p.moves[0];
            assert_eq!(s, 3, "the only shard not moving");
            assert_ne!(to, 0, "to another core");
            assert!(to < 3);
        }
        let single = Snapshot { workers: 1, ..snap };
        assert!(b.plan(&single).moves.is_empty());
    }
}

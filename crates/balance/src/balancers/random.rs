//! A scripted balancer for testing the migration machinery: every period it moves a
//! random shard (not already moving) to a random other core and, when offloading
//! cores exist, sets a random shard's offload ratio to a random value and now and
//! then gives a random working core another offloading core (or none).

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::{Balancer, Plan, Snapshot};
use crate::migrate::RATIO_ONE;
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
        let mut plan = Plan::default();
        let movable: Vec<ShardId> = (0..snap.shards as ShardId)
            .filter(|s| !snap.moving.contains(s))
            .collect();
        if movable.is_empty() {
            return plan;
        }
        if snap.workers >= 2 {
            let s = movable[self.rng.gen_range(0..movable.len())];
            let from = snap.owner[usize::from(s)];
            let mut to = self.rng.gen_range(0..snap.workers - 1) as CoreId;
            if to >= from {
                to += 1;
            }
            plan.moves.push((s, to));
        }
        if snap.offloaders > 0 {
            let s = movable[self.rng.gen_range(0..movable.len())];
            if !plan.moves.iter().any(|(m, _)| *m == s) {
                plan.ratios.push((s, self.rng.gen_range(0..=RATIO_ONE)));
            }
            if self.rng.gen_ratio(1, 4) {
                let w = self.rng.gen_range(0..snap.workers) as CoreId;
                // none now and then: offloading stops and restarts
                let o = self.rng.gen_range(0..=snap.offloaders);
                let o = (o < snap.offloaders).then_some(o as CoreId);
                plan.offload_cores.push((w, o));
            }
        }
        plan
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
        assert_eq!(b.plan(&single), Plan::default());
    }

    #[test]
    fn changes_ratios_and_offloading_cores_when_there_are_some() {
        let snap = Snapshot {
            shards: 4,
            workers: 2,
            owner: vec![0, 1, 0, 1],
            moving: vec![0],
            offloaders: 2,
            ..Default::default()
        };
        let mut b = RandomMoves::new(7);
        let (mut ratios, mut cores, mut none) = (0, 0, 0);
        for _ in 0..200 {
            let p = b.plan(&snap);
            for (s, r) in &p.ratios {
                assert!(*s != 0 && *r <= RATIO_ONE, "{p:?}");
                assert!(!p.moves.iter().any(|(m, _)| m == s), "{p:?}");
                ratios += 1;
            }
            for (w, o) in &p.offload_cores {
                assert!(*w < 2);
                match o {
                    Some(o) => assert!(*o < 2),
                    None => none += 1,
                }
                cores += 1;
            }
        }
        assert!(
            ratios > 100 && cores > 20 && none > 0,
            "{ratios} {cores} {none}"
        );
    }
}

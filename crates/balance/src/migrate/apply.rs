//! The controller's side of a plan, as one pure state machine: which shard each
//! working core owns, each shard's offload ratio and each working core's
//! offloading core as last sent, the shard moves under way ([`Mover`]), and the
//! rules for carrying a balancer's [`Plan`] out:
//! - a move to a core that does not exist, of a shard that does not exist, or of a
//!   shard already moving is skipped; a moved shard's r_s starts again from 0 at
//!   its new owner (the old owner recalls its offloaded flows);
//! - a ratio for a moving shard, or equal to the one sent, is not sent;
//! - an offloading core that does not exist, or equal to the one sent, is not sent.
//!
//! The runtime's controller thread and the simulator's controller event drive it;
//! it answers with [`Order`]s and takes the time as an argument.

use crate::balancers::Plan;
pub use crate::migrate::actions::Order;
use crate::migrate::shard_move::{Command, Mover};
use crate::migrate::steps::{log, Step};
use crate::{CoreId, ShardId, Version};

/// What the controller counted.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ApplyStats {
    /// Shard moves begun.
    pub shard_moves: u64,
    /// Offload-ratio and offloading-core changes sent.
    pub offload_changes: u64,
    /// Flow entries that came with arrived shards.
    pub entries_moved: u64,
    /// Packets held for arrived shards.
    pub packets_held: u64,
    /// Duration of every completed move, ns.
    pub move_ns: Vec<u64>,
}

/// The controller's view of the cores and the plan applier.
#[derive(Clone, Debug)]
pub struct PlanApplier {
    mover: Mover,
    owner: Vec<CoreId>,
    ratio: Vec<u32>,
    offload_core: Vec<Option<CoreId>>,
    workers: usize,
    offloaders: usize,
    started: Vec<Option<u64>>,
    stats: ApplyStats,
    /// This applier's id in the step log.
    id: u64,
}

impl PlanApplier {
    /// `owner[s]` owns shard s, every shard's r_s is `ratio`, working core i
    /// offloads to `offload_core[i]`; `offloaders` offloading cores exist.
    pub fn new(
        owner: Vec<CoreId>,
        ratio: u32,
        offload_core: Vec<Option<CoreId>>,
        offloaders: usize,
    ) -> PlanApplier {
        let shards = owner.len();
        PlanApplier {
            mover: Mover::new(0),
            ratio: vec![ratio; shards],
            workers: offload_core.len(),
            owner,
            offload_core,
            offloaders,
            started: vec![None; shards],
            stats: ApplyStats::default(),
            id: log::new_controller(),
        }
    }

    /// The orders that carry `plan` out at `now_ns`.
    pub fn apply(&mut self, plan: &Plan, now_ns: u64) -> Vec<Order> {
        let mut out = Vec::new();
        for &(s, to) in &plan.moves {
            let i = usize::from(s);
            if i >= self.owner.len() || usize::from(to) >= self.workers {
                continue;
            }
            let from = self.owner[i];
            if let Ok(Command::Rewrite { shard, to, version }) = self.mover.begin(s, from, to) {
                out.push(Order::Rewrite { shard, to, version });
                self.owner[i] = to;
                // the old owner recalls the shard's offloaded flows; r_s starts
                // again from 0 at the new owner
                self.ratio[i] = 0;
                self.started[i] = Some(now_ns);
                self.stats.shard_moves += 1;
            }
        }
        for &(s, r) in &plan.ratios {
            let i = usize::from(s);
            if i >= self.ratio.len() || self.mover.is_moving(s) || self.ratio[i] == r {
                continue;
            }
            self.ratio[i] = r;
            out.push(Order::SetRatio {
                core: self.owner[i],
                shard: s,
                ratio: r,
            });
            self.stats.offload_changes += 1;
        }
        for &(w, o) in &plan.offload_cores {
            let i = usize::from(w);
            let valid = o.is_none_or(|o| usize::from(o) < self.offloaders);
            if i >= self.workers || !valid || self.offload_core[i] == o {
                continue;
            }
            self.offload_core[i] = o;
            out.push(Order::SetOffloader { core: w, to: o });
            self.stats.offload_changes += 1;
        }
        for o in &out {
            log::step(self.id, || Step::Order(o.clone()));
        }
        out
    }

    /// The NIC steers with table version `seen` or later: the releases now due.
    pub fn on_nic_seen(&mut self, seen: Version) -> Vec<Order> {
        let out: Vec<Order> = self
            .mover
            .on_feeder_seen(seen)
            .into_iter()
            .filter_map(|c| match c {
                Command::Release { from, shard, to } => Some(Order::Release { from, shard, to }),
                Command::Rewrite { .. } => None,
            })
            .collect();
        for o in &out {
            log::step(self.id, || Step::Order(o.clone()));
        }
        out
    }

    /// `shard` arrived at its new owner at `now_ns` with `entries` flow entries
    /// after `held` held packets. False for a shard that was not moving (a
    /// protocol violation the driver should report).
    pub fn on_arrived(&mut self, shard: ShardId, entries: u64, held: u64, now_ns: u64) -> bool {
        if !self.mover.on_arrived(shard) {
            return false;
        }
        self.stats.entries_moved += entries;
        self.stats.packets_held += held;
        if let Some(t) = self.started[usize::from(shard)].take() {
            self.stats.move_ns.push(now_ns.saturating_sub(t));
        }
        true
    }

    /// Moves under way.
    pub fn in_flight(&self) -> usize {
        self.mover.in_flight()
    }

    /// The shards moving now.
    pub fn moving(&self) -> Vec<ShardId> {
        (0..self.owner.len() as ShardId)
            .filter(|s| self.mover.is_moving(*s))
            .collect()
    }

    /// Each shard's owner (a moving shard's new one).
    pub fn owner(&self) -> &[CoreId] {
        &self.owner
    }

    /// Each shard's r_s as last sent.
    pub fn ratio(&self) -> &[u32] {
        &self.ratio
    }

    /// Each working core's offloading core as last sent.
    pub fn offload_core(&self) -> &[Option<CoreId>] {
        &self.offload_core
    }

    /// Offloading cores in the run.
    pub fn offloaders(&self) -> usize {
        self.offloaders
    }

    /// Counters.
    pub fn stats(&self) -> &ApplyStats {
        &self.stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plan_rules() {
        let mut a = PlanApplier::new(vec![0, 1, 0], 7, vec![Some(0), Some(0)], 1);
        let plan = Plan {
            moves: vec![(0, 1), (1, 5), (9, 0), (2, 0)],
            ratios: vec![(0, 3), (1, 7), (2, 9), (8, 1)],
            offload_cores: vec![(0, Some(0)), (1, None), (1, Some(3)), (4, None)],
            next_period_ns: None,
        };
        assert_eq!(
            a.apply(&plan, 10),
            vec![
                Order::Rewrite {
                    shard: 0,
                    to: 1,
                    version: 1
                },
                Order::SetRatio {
                    core: 0,
                    shard: 2,
                    ratio: 9
                },
                Order::SetOffloader { core: 1, to: None },
            ],
            "a move to core 5 / of shard 9 / to its own core is skipped; no ratio \
             for the moving shard or an unchanged one; no unknown offloading core"
        );
        assert_eq!(a.ratio(), &[0, 7, 9]);
        assert_eq!(a.moving(), vec![0]);
        assert_eq!(
            a.on_nic_seen(1),
            vec![Order::Release {
                from: 0,
                shard: 0,
                to: 1
            }]
        );
        assert!(a.on_arrived(0, 40, 3, 25));
        assert!(!a.on_arrived(0, 40, 3, 25));
        assert_eq!(a.stats().move_ns, vec![15]);
        assert_eq!((a.stats().entries_moved, a.stats().packets_held), (40, 3));
        assert_eq!(a.stats().offload_changes, 2);
    }
}

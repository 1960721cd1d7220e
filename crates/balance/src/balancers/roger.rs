//! Roger re-planned every period (NFLOW/MVT §IV-C: "for NICs that support
//! real-time update of the NIC rules, the above methods can be applied
//! periodically to adjust for dynamic traffic similar to RSS++").
//!
//! The chain steers by cells (`steering.rule_key`): every value of the rule
//! key is a shard, shard `s` the key `s`. Each period Roger plans at most
//! `budget` ternary rules over the key ([`steer::roger::plan`], the tree cut:
//! the rules tile the key space) from the cells' packets, decayed over the
//! periods and shrunk toward the mean by their persistence ρ (as RSS++'s
//! prediction does). A rule covers whole cells, so a new plan moves cells
//! between cores and never splits one: the plan is carried out as shard
//! moves, whose protocol keeps every flow's packets in order and its state
//! with it.
//!
//! The rules go to cores heaviest first, each to the core that holds most of
//! its traffic now unless that core would pass its share ([`assign`]), so
//! most cells stay where they are. A new plan is applied only when the cores
//! are out of balance (heaviest over mean above `threshold`, in packets) and
//! the plan removes at least `min_gain` of that excess, or when the cells'
//! cores spell more rules than the budget (a plan then always applies).
//! Nothing moves before ρ is measured. Pure: the snapshot in, moves out.

use steer::roger::{plan, Reduce, RogerParams};

use super::{Balancer, Plan, Snapshot};
use crate::CoreId;

/// Roger's live parameters (`[run.roger]`).
#[derive(Clone, Debug, PartialEq, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct RogerConfig {
    /// NIC rules a plan may use (≥ 2 and ≥ the working cores; 32).
    pub budget: usize,
    /// Heaviest core over the mean above which a period is re-planned (1.1).
    pub threshold: f64,
    /// Share of the imbalance above 1 a plan must remove to be applied (0.2).
    pub min_gain: f64,
    /// Weight of the past in the cells' traffic a plan is made on: each
    /// period's packets are added to `decay` × the sum so far (0: the last
    /// period alone; 0.5).
    pub decay: f64,
    /// Sift the key's bit order to the fewest cubes (else the key's own
    /// order, most significant first; on).
    pub sift: bool,
}

impl Default for RogerConfig {
    fn default() -> RogerConfig {
        RogerConfig {
            budget: 32,
            threshold: 1.1,
            min_gain: 0.2,
            decay: 0.5,
            sift: true,
        }
    }
}

impl RogerConfig {
    /// The parameters checked for `workers` working cores.
    pub fn check(&self, workers: usize) -> Result<(), String> {
        if self.budget < 2 || self.budget < workers {
            return Err(format!(
                "budget {}: at least 2 rules and one per working core ({workers})",
                self.budget
            ));
        }
        if self.threshold.is_nan() || self.threshold < 1.0 {
            return Err(format!(
                "threshold {}: heaviest core over the mean, at least 1",
                self.threshold
            ));
        }
        if !(0.0..1.0).contains(&self.min_gain) {
            return Err(format!("min_gain {}: a share in 0..1", self.min_gain));
        }
        if !(0.0..1.0).contains(&self.decay) {
            return Err(format!("decay {}: a share in 0..1", self.decay));
        }
        Ok(())
    }
}

/// Periods apart the persistence of the cells' traffic is measured over.
const LAG: usize = 2;

/// The live Roger balancer.
#[derive(Clone, Debug)]
pub struct Roger {
    cfg: RogerConfig,
    /// The cells' cores the last applied plan spelled, and its rules.
    last: Option<(Vec<CoreId>, usize)>,
    /// The cells' decayed packet counts.
    weight: Vec<f64>,
    /// The cells' packets of the last [`LAG`] periods, oldest first.
    history: std::collections::VecDeque<Vec<f64>>,
    /// The persistence the last round measured (1 before it is measured).
    rho: f64,
    replans: u64,
    moves: u64,
    rules: usize,
    max_rules: usize,
}

impl Roger {
    /// A balancer with `cfg` (checked by [`RogerConfig::check`]).
    pub fn new(cfg: RogerConfig) -> Roger {
        Roger {
            cfg,
            last: None,
            weight: Vec::new(),
            history: std::collections::VecDeque::new(),
            rho: 1.0,
            replans: 0,
            moves: 0,
            rules: 0,
            max_rules: 0,
        }
    }

    /// Rules the cells' cores `owner` take: the last plan's, when they are
    /// what it spelled, else the leaves of splitting the key space, most
    /// significant bit first, until each part is on one core.
    fn rules_of(&self, owner: &[CoreId]) -> usize {
        match &self.last {
            Some((o, n)) if o == owner => *n,
            _ => split_rules(owner),
        }
    }
}

/// Cubes of the most-significant-bit-first split of `owner` (a power of two
/// long) into parts on one core each.
fn split_rules(owner: &[CoreId]) -> usize {
    match owner {
        [] => 0,
        [first, rest @ ..] if rest.iter().all(|c| c == first) => 1,
        _ => {
            let (a, b) = owner.split_at(owner.len() / 2);
            split_rules(a) + split_rules(b)
        }
    }
}

/// Heaviest over mean of the cores' packets when shard `s` is on `owner[s]`.
fn imbalance(shard_packets: &[u64], owner: &[CoreId], workers: usize) -> f64 {
    let mut core = vec![0u64; workers.max(1)];
    for (s, &n) in shard_packets.iter().enumerate() {
        if let Some(c) = owner.get(s).and_then(|&c| core.get_mut(usize::from(c))) {
            *c += n;
        }
    }
    steer::roger::imbalance(&core)
}

/// Gives the plan's cubes to cores, heaviest first: each to the core that
/// holds most of its cells' traffic now (each cell counting one packet more,
/// so idle cells stay too) while that core stays within `slack` of the mean,
/// else to the least loaded core; a cube heavier than that stays where it
/// is. A cube never splits; most cells stay put.
fn assign(
    cubes: &[(steer::roger::Cube, u64)],
    owner: &[CoreId],
    weight: &[u64],
    workers: usize,
    slack: f64,
) -> Vec<CoreId> {
    let total: u64 = cubes.iter().map(|c| c.1).sum();
    let cap = total as f64 / workers as f64 * (1.0 + slack);
    let mut order: Vec<usize> = (0..cubes.len()).collect();
    order.sort_by_key(|&i| (std::cmp::Reverse(cubes[i].1), i));
    let mut load = vec![0u64; workers];
    let mut next = owner.to_vec();
    for i in order {
        let (cube, w) = cubes[i];
        let cells: Vec<usize> = (0..owner.len())
            .filter(|&s| cube.contains(s as u64))
            .collect();
        let mut held = vec![0u64; workers];
        for &s in &cells {
            held[usize::from(owner[s]).min(workers - 1)] += weight[s] + 1;
        }
        let home = (0..workers)
            .max_by_key(|&c| (held[c], std::cmp::Reverse(c)))
            .unwrap_or(0);
        let least = (0..workers).min_by_key(|&c| (load[c], c)).unwrap_or(0);
        // a cube heavier than a core's share stays: moving it lowers nothing
        let to = if (load[home] + w) as f64 <= cap || w as f64 > cap {
            home
        } else {
            least
        };
        load[to] += w;
        for s in cells {
            next[s] = to as CoreId;
        }
    }
    next
}

impl Balancer for Roger {
    fn name(&self) -> &'static str {
        "roger"
    }

    fn plan(&mut self, snap: &Snapshot) -> Plan {
        let (shards, workers) = (snap.shards, snap.workers);
        if !shards.is_power_of_two() || workers == 0 || !snap.moving.is_empty() {
            return Plan::default();
        }
        let owner = &snap.owner;
        let now_rules = self.rules_of(owner);
        self.rules = now_rules;
        self.max_rules = self.max_rules.max(now_rules);
        let now = snap.shard_packets();
        self.weight.resize(shards, 0.0);
        for (w, &n) in self.weight.iter_mut().zip(&now) {
            *w = *w * self.cfg.decay + n as f64;
        }
        // how much of a cell's deviation from the mean lasts LAG periods
        // (RSS++'s persistence ρ): plan on mean + ρ·(weight − mean)
        let rates: Vec<f64> = now.iter().map(|&n| n as f64).collect();
        self.history.retain(|h| h.len() == rates.len());
        let measured = self.history.len() == LAG;
        if let Some(prev) = self.history.front().filter(|_| measured) {
            self.rho = super::rsspp::persistence(prev, &rates);
        }
        self.history.push_back(rates);
        while self.history.len() > LAG {
            self.history.pop_front();
        }
        let mean = self.weight.iter().sum::<f64>() / shards as f64;
        let packets: Vec<u64> = self
            .weight
            .iter()
            .map(|&w| (mean + self.rho * (w - mean)).max(0.0).round() as u64)
            .collect();
        let before = imbalance(&packets, owner, workers);
        let over_budget = now_rules > self.cfg.budget;
        if !over_budget && (!measured || before <= self.cfg.threshold) {
            return Plan::default();
        }
        let bits = shards.trailing_zeros().max(1);
        let mut points: Vec<(u64, u64)> = packets
            .iter()
            .enumerate()
            .filter(|(_, &n)| n > 0)
            .map(|(s, &n)| (s as u64, n))
            .collect();
        if points.is_empty() {
            // nothing measured: spread the cells evenly
            points = (0..shards as u64).map(|s| (s, 1)).collect();
        }
        let params = RogerParams {
            bits,
            budget: self.cfg.budget,
            cores: workers as u16,
            sift_work: if self.cfg.sift { 1_000_000 } else { 0 },
            reduce: Reduce::Tree,
        };
        let Ok(p) = plan(&points, &params) else {
            return Plan::default();
        };
        let cubes: Vec<_> = p
            .table
            .rules
            .iter()
            .map(|r| r.cube)
            .zip(p.rule_weight.iter().copied())
            .collect();
        let slack = (self.cfg.threshold - 1.0) / 2.0;
        let next = assign(&cubes, owner, &packets, workers, slack);
        let after = imbalance(&packets, &next, workers);
        let gain = (before - after) / (before - 1.0).max(f64::EPSILON);
        if !over_budget && gain < self.cfg.min_gain {
            return Plan::default();
        }
        let moves: Vec<_> = (0..shards)
            .filter(|&s| next[s] != owner[s])
            .map(|s| (s as crate::ShardId, next[s]))
            .collect();
        let rules = p.table.nic_rules();
        self.last = Some((next, rules));
        self.replans += 1;
        self.moves += moves.len() as u64;
        Plan {
            moves,
            ..Plan::default()
        }
    }

    fn counters(&self) -> Vec<(&'static str, f64)> {
        vec![
            ("replans", self.replans as f64),
            ("cell_moves", self.moves as f64),
            ("nic_rules", self.rules as f64),
            ("max_nic_rules", self.max_rules as f64),
            ("persistence", self.rho),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snap(owner: Vec<CoreId>, shard_packets: &[u64], workers: usize) -> Snapshot {
        Snapshot {
            shards: owner.len(),
            workers,
            owner,
            bucket_packets: shard_packets.to_vec(),
            ..Snapshot::default()
        }
    }

    fn apply(owner: &mut [CoreId], p: &Plan) {
        for &(s, c) in &p.moves {
            owner[s as usize] = c;
        }
    }

    #[test]
    fn blocks_take_one_rule_per_core() {
        assert_eq!(split_rules(&[0, 0, 0, 0, 1, 1, 1, 1]), 2);
        assert_eq!(split_rules(&[0, 1, 0, 1]), 4);
        assert_eq!(split_rules(&[0, 0, 1, 2]), 3);
        assert_eq!(split_rules(&[3; 64]), 1);
    }

    #[test]
    fn a_hot_block_is_split_within_the_budget_and_then_left_alone() {
        // 16 cells on 2 cores in blocks; the traffic sits in cells 0..4
        let mut owner: Vec<CoreId> = (0..16).map(|s| (s / 8) as CoreId).collect();
        let mut load = vec![0u64; 16];
        for (s, l) in load.iter_mut().enumerate().take(4) {
            *l = 1000 + 10 * s as u64;
        }
        let mut r = Roger::new(RogerConfig {
            budget: 4,
            ..RogerConfig::default()
        });
        // nothing moves before the traffic's persistence is measured (two
        // periods apart), then the load that lasted is split
        for _ in 0..LAG {
            assert_eq!(r.plan(&snap(owner.clone(), &load, 2)), Plan::default());
        }
        let p = r.plan(&snap(owner.clone(), &load, 2));
        assert!(!p.moves.is_empty());
        assert_eq!(r.rho, 1.0);
        apply(&mut owner, &p);
        let before = imbalance(
            &load,
            &(0..16).map(|s| (s / 8) as CoreId).collect::<Vec<_>>(),
            2,
        );
        let after = imbalance(&load, &owner, 2);
        assert!(before > 1.9 && after < 1.05, "{before} → {after}");
        // the cores' cells are spelled by at most 4 rules
        let (_, rules) = r.last.clone().unwrap();
        assert!(rules <= 4, "{rules}");
        // most traffic stayed: only cells of one side moved
        assert!(p.moves.len() < 16, "{:?}", p.moves);
        // balanced now: the next period keeps the plan
        assert_eq!(r.plan(&snap(owner.clone(), &load, 2)), Plan::default());
        assert_eq!(r.counters()[0], ("replans", 1.0));
        assert_eq!(r.counters()[2], ("nic_rules", rules as f64));
    }

    #[test]
    fn cells_over_the_budget_are_replanned_even_when_balanced() {
        // alternating cores: 16 rules, budget 4
        let owner: Vec<CoreId> = (0..16).map(|s| (s % 2) as CoreId).collect();
        let load = vec![10u64; 16];
        let mut r = Roger::new(RogerConfig {
            budget: 4,
            ..RogerConfig::default()
        });
        let p = r.plan(&snap(owner.clone(), &load, 2));
        let mut next = owner.clone();
        apply(&mut next, &p);
        assert!(split_rules(&next) <= 4, "{next:?}");
        assert!(imbalance(&load, &next, 2) <= 1.0 + 1e-9);
    }

    #[test]
    fn load_that_does_not_last_is_not_chased() {
        // each period's traffic sits in other cells: ρ ≈ 0, every cell
        // looks like the mean one and nothing moves
        let owner: Vec<CoreId> = (0..16).map(|s| (s / 8) as CoreId).collect();
        let mut r = Roger::new(RogerConfig::default());
        for period in 0..12usize {
            let mut load = vec![10u64; 16];
            load[(period * 5) % 16] = 5000;
            load[(period * 3 + 1) % 16] = 3000;
            assert_eq!(
                r.plan(&snap(owner.clone(), &load, 2)),
                Plan::default(),
                "{period}"
            );
        }
        assert!(r.rho < 0.3, "{}", r.rho);
    }

    #[test]
    fn one_cell_heavier_than_a_core_share_stays_where_it_is() {
        // one TCP sender's cell carries 94 % of the packets, its receiver's
        // acknowledgements 6 %: no plan beats this, and none swaps them
        let owner: Vec<CoreId> = (0..16).map(|s| (s / 8) as CoreId).collect();
        let mut r = Roger::new(RogerConfig::default());
        for period in 0..12u64 {
            // rates that wobble (ρ < 1), and a few stray packets elsewhere
            let mut load: Vec<u64> = (0..16).map(|s| (period * 7 + s * 13) % 5).collect();
            load[9] = 2000 + 300 * (period % 3);
            load[2] = 120 + 40 * (period % 2);
            let p = r.plan(&snap(owner.clone(), &load, 2));
            assert!(
                p.moves.iter().all(|&(s, _)| s != 9 && s != 2),
                "{period}: {:?}",
                p.moves
            );
        }
    }

    #[test]
    fn a_cube_heavier_than_a_core_share_is_not_swapped_for_a_lighter_one() {
        // as planned on a TCP transfer: the sender's cell in cube 1xxx (on
        // core 1), its receiver's in 0xxx (core 0), idle cells weighted by
        // the prediction's mean
        let owner: Vec<CoreId> = (0..16).map(|s| (s / 8) as CoreId).collect();
        let mut weight = vec![117u64; 16];
        weight[9] = 10_056;
        weight[2] = 1_982;
        let cube = |v| steer::roger::Cube::new(v, 0b1000);
        let sum = |r: std::ops::Range<usize>| weight[r].iter().sum::<u64>();
        let cubes = [(cube(0b1000), sum(8..16)), (cube(0), sum(0..8))];
        let next = assign(&cubes, &owner, &weight, 2, 0.05);
        assert_eq!(next, owner);
    }

    #[test]
    fn moving_shards_or_a_small_gain_plan_nothing() {
        let owner: Vec<CoreId> = (0..8).map(|s| (s / 4) as CoreId).collect();
        let mut r = Roger::new(RogerConfig::default());
        let mut s = snap(owner.clone(), &[100, 0, 0, 0, 0, 0, 0, 0], 2);
        s.moving = vec![3];
        assert_eq!(r.plan(&s), Plan::default());
        // one hot cell: no plan can do better than it
        s.moving.clear();
        assert_eq!(r.plan(&s), Plan::default());
    }

    #[test]
    fn bad_parameters_are_named() {
        let c = |budget, threshold, min_gain| RogerConfig {
            budget,
            threshold,
            min_gain,
            ..RogerConfig::default()
        };
        assert!(c(1, 1.1, 0.2).check(1).unwrap_err().contains("budget 1"));
        assert!(c(4, 1.1, 0.2)
            .check(8)
            .unwrap_err()
            .contains("one per working core"));
        assert!(c(8, 0.5, 0.2).check(2).unwrap_err().contains("threshold"));
        assert!(c(8, 1.1, 1.0).check(2).unwrap_err().contains("min_gain"));
        assert!(RogerConfig::default().check(8).is_ok());
    }
}

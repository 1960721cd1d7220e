//! RSS++'s balancer (RSS++ §3.1–3.2, §4), on flowshift's unit of migration — the
//! shard (with one shard per bucket, as RSS++'s per-bucket tables, they coincide).
//!
//! One round:
//! 1. A shard's *fractional load* is its share of its core's packets times the
//!    core's load; the target is the mean load of the active cores.
//! 2. **Core scaling** (when enabled), as FastClick's `nicscheduler` decides it:
//!    remove the least-loaded core when N > 1 and the summed headroom
//!    Σ(target_load − load) exceeds 1 + (1 − target_load) + N·max(α, max load −
//!    target_load) — its shards go heaviest first onto the least-loaded
//!    remaining core each time (multi-way partitioning); add a core when the
//!    headroom is below −0.1 (it starts empty and this round's balancing fills
//!    it).
//! 3. Cores more than `threshold` below the mean are *underloaded*; more than
//!    `threshold` above and with more than one non-empty shard, *overloaded*. A
//!    core that received shards in the previous round sits this one out.
//! 4. **Solver** (at most `max_runs` runs): repeatedly take the biggest remaining
//!    shard of the most overloaded core and give it to the first underloaded core
//!    (largest deficit first) where it fits within deficit + allowance; an
//!    overloaded core stops giving within 1 % of the mean and keeps
//!    `keep_share` of its fair share of the shards (at least one non-empty
//!    shard); an underloaded core takes while its deficit exceeds 1 %.
//!    Score = Σ squared imbalance + `migration_cost` × moves. Run 1 (no allowance)
//!    is the lower bound; then allowances are set to the residual imbalances and
//!    grown ×1.5 while the score improves (the upper bound), then bisected toward
//!    the inflection point; the best run wins; stop as soon as the squared
//!    imbalance is ≤ `stop_score` (1 %).
//! 5. **Adaptive period**: total imbalance > 0.4 → the minimum period; > 0.2 →
//!    halve; no move → double; clamped to [min, max].
//!
//! **Planning on predicted loads** (`predict`, on by default; a flowshift
//! addition, off reproduces the published code): RSS++ moves a shard for the
//! load it carried in the last period, which pays only if the shard still
//! carries it while the move stands. Each round measures how much of a
//! shard's deviation from the mean persists — ρ, the correlation of the
//! shards' packet rates `persistence_lag` (2) periods apart, clamped to
//! [0, 1] — and plans on each shard's best linear prediction, mean +
//! ρ·(last − mean). On traffic whose shards keep their load (long flows, the
//! case RSS++ was built for) ρ ≈ 1 and the round is RSS++'s own; when
//! connections live shorter than a few periods, a heavy shard's load is gone
//! before the move has paid, ρ falls toward 0, every shard looks like the
//! mean one and the round no longer chases that noise. The lag is the
//! horizon of a move, not the next period: on the default trace shape the
//! shards' rates correlate 0.77 one 10 ms window apart but 0.3 two windows
//! apart and 0.05 three apart. Until `persistence_lag` periods are known, ρ
//! is unmeasured: the round plans on the last period, with the whole
//! reserve below.
//!
//! **An overloaded core keeps a reserve of shards** (a flowshift addition):
//! `keep_share` (0.875) × (1 − ρ) of its fair share (shards ÷ active
//! cores), the whole `keep_share` before ρ is measured; 0 is the published
//! rule, which keeps only its last non-empty shard. A core whose load is one
//! heavy shard would otherwise give all its other shards away and, when
//! that shard's flows end (soon, when ρ is low), sit idle until a later
//! round refills it; when loads persist, the heavy shard stays and no
//! reserve is kept.
//!
//! **Thresholds scale with the load** (`scale_thresholds`, a flowshift
//! addition): below `target_load`, the imbalance threshold (0.02) and the
//! solver's 1 % stop are multiplied by mean load ÷ target load. At 16 cores
//! each core of the default trace is ≈ 10 % busy and one shard ≈ 0.6 %: a
//! core that gave its shards away one to each of the others left none of
//! them 0.02 above the mean, so the absolute rule never refilled it.
//!
//! With `predict = false`, `keep_share = 0` and `scale_thresholds = false`
//! a round is the published one.

use super::{Balancer, Plan, Snapshot};
use crate::{CoreId, ShardId};

/// RSS++ parameters (published defaults).
#[derive(Clone, Debug, PartialEq, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct RssppConfig {
    /// Imbalance threshold around the mean load (0.02).
    pub threshold: f64,
    /// Target load for core scaling (0.8).
    pub target_load: f64,
    /// Core scaling on or off (off by default, as in the published code).
    pub autoscale: bool,
    /// α of the removal condition Σ headroom > 1 + (1 − target) + N·max(α,
    /// max load − target) (0.05).
    pub scale_alpha: f64,
    /// Solver runs per round (10).
    pub max_runs: usize,
    /// Squared imbalance at which the solver stops (0.01).
    pub stop_score: f64,
    /// Weight of one migration in the score (the α of the formal problem).
    pub migration_cost: f64,
    /// Adaptive period bounds, ns (the controller's period is the starting point).
    pub min_period_ns: u64,
    /// Upper bound of the adaptive period, ns.
    pub max_period_ns: u64,
    /// Plan on each shard's predicted load (mean + ρ·(last − mean), ρ the
    /// shards' period-to-period persistence) instead of its last load.
    pub predict: bool,
    /// Share of its fair share of the shards (shards ÷ active cores) an
    /// overloaded core keeps, scaled by 1 − ρ (0.875; 0 = only its last
    /// non-empty shard, as published).
    pub keep_share: f64,
    /// Periods between the two rate vectors whose correlation is ρ: the
    /// horizon over which a move must pay (2; 1: the next period only).
    pub persistence_lag: usize,
    /// Below `target_load`, the imbalance threshold and the solver's 1 %
    /// stop scale with mean load ÷ target load, so that a lightly loaded
    /// pool still sees a core that lost its shards (false: absolute, as
    /// published).
    pub scale_thresholds: bool,
}

impl Default for RssppConfig {
    fn default() -> Self {
        RssppConfig {
            threshold: 0.02,
            target_load: 0.8,
            autoscale: false,
            scale_alpha: 0.05,
            max_runs: 10,
            stop_score: 0.01,
            migration_cost: 1e-4,
            min_period_ns: 10_000_000,
            max_period_ns: 1_000_000_000,
            predict: true,
            keep_share: 0.875,
            persistence_lag: 2,
            scale_thresholds: true,
        }
    }
}

impl RssppConfig {
    /// The parameters checked: each error names the parameter and its range.
    pub fn check(&self) -> Result<(), String> {
        let share = |name: &str, v: f64, hi_open: bool| {
            let ok = if hi_open {
                (0.0..1.0).contains(&v)
            } else {
                (0.0..=1.0).contains(&v)
            };
            match ok {
                true => Ok(()),
                false => Err(format!("{name} {v}: a share of a core's load in 0..1")),
            }
        };
        share("threshold", self.threshold, true)?;
        share("keep_share", self.keep_share, false)?;
        if !(self.target_load > 0.0 && self.target_load <= 1.0) {
            return Err(format!(
                "target_load {}: a core's load in (0, 1]",
                self.target_load
            ));
        }
        for (name, v) in [
            ("scale_alpha", self.scale_alpha),
            ("stop_score", self.stop_score),
            ("migration_cost", self.migration_cost),
        ] {
            if !(v >= 0.0 && v.is_finite()) {
                return Err(format!("{name} {v}: a number ≥ 0"));
            }
        }
        if self.max_runs == 0 {
            return Err("max_runs 0: the solver runs at least once a round".into());
        }
        if !(1..=64).contains(&self.persistence_lag) {
            return Err(format!(
                "persistence_lag {}: periods between the rates compared, 1..=64",
                self.persistence_lag
            ));
        }
        if self.min_period_ns < 10_000 || self.min_period_ns > self.max_period_ns {
            return Err(format!(
                "min_period_ns {} and max_period_ns {}: at least 10 µs, the least first",
                self.min_period_ns, self.max_period_ns
            ));
        }
        Ok(())
    }
}

/// What one round decided, for tests and reports.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RoundInfo {
    /// Squared imbalance before and after the planned moves (over active cores).
    pub before: f64,
    /// After.
    pub after: f64,
    /// Solver runs.
    pub runs: usize,
    /// A core was added (its index) or removed.
    pub added: Option<CoreId>,
    /// A core removed.
    pub removed: Option<CoreId>,
    /// The persistence ρ the round measured (1 in the first round, with
    /// nothing to compare).
    pub persistence: f64,
}

/// The RSS++ balancer.
#[derive(Clone, Debug)]
pub struct Rsspp {
    cfg: RssppConfig,
    /// Cores in use (`None` until the first snapshot: the cores owning shards).
    active: Option<Vec<bool>>,
    /// Cores that received shards in the last round.
    received: Vec<CoreId>,
    period_ns: u64,
    last: RoundInfo,
    rounds: u64,
    runs: u64,
    /// The last `persistence_lag` periods' packet rates of each shard
    /// (packets per ms), oldest first.
    prev_rates: std::collections::VecDeque<Vec<f64>>,
    /// This round's ρ was measured (not the first round's assumed 1).
    measured: bool,
}

#[derive(Clone, Copy, Debug)]
struct ShardLoad {
    shard: ShardId,
    load: f64,
}

impl Rsspp {
    /// A balancer with these parameters.
    pub fn new(cfg: RssppConfig) -> Rsspp {
        Rsspp {
            cfg,
            active: None,
            received: Vec::new(),
            period_ns: 0,
            last: RoundInfo::default(),
            rounds: 0,
            runs: 0,
            prev_rates: std::collections::VecDeque::new(),
            measured: false,
        }
    }

    /// What the last round decided.
    pub fn last_round(&self) -> &RoundInfo {
        &self.last
    }

    /// The cores in use.
    pub fn active(&self) -> Vec<bool> {
        self.active.clone().unwrap_or_default()
    }

    fn round(&mut self, snap: &Snapshot) -> Plan {
        let w = snap.workers;
        let mut plan = Plan::default();
        self.last = RoundInfo::default();
        if w == 0 || snap.shards == 0 {
            return plan;
        }
        let active = self.active.get_or_insert_with(|| {
            let mut a = vec![false; w];
            for &o in &snap.owner {
                a[usize::from(o)] = true;
            }
            a
        });
        active.resize(w, false);
        // a core that owns shards is in use whatever we thought
        for &o in &snap.owner {
            active[usize::from(o)] = true;
        }
        let mut load: Vec<f64> = (0..w)
            .map(|c| {
                snap.core_load
                    .get(c)
                    .copied()
                    .unwrap_or(0.0)
                    .clamp(0.0, 1.0)
            })
            .collect();
        let mut shards_of = shard_loads(snap, &load);
        let mut cores: Vec<usize> = (0..w).filter(|&c| active[c]).collect();
        let rates = shard_rates(snap);
        self.last.persistence = 1.0;
        self.measured = false;
        self.prev_rates.retain(|p| p.len() == rates.len());
        // ρ over the lag, once that many periods are known
        let lag = self.cfg.persistence_lag.max(1);
        if let Some(prev) = self
            .prev_rates
            .front()
            .filter(|_| self.prev_rates.len() == lag)
        {
            let rho = persistence(prev, &rates);
            self.last.persistence = rho;
            self.measured = true;
            if self.cfg.predict {
                predict(&mut shards_of, &mut load, &cores, rho);
            }
        }
        self.prev_rates.push_back(rates);
        while self.prev_rates.len() > lag {
            self.prev_rates.pop_front();
        }
        self.last.before = sq_imbalance(&cores, &load);
        if self.cfg.autoscale {
            let mut scale = Scale {
                active,
                cores: &mut cores,
                load: &mut load,
                shards_of: &mut shards_of,
                last: &mut self.last,
            };
            if let Some(plan) = scale.step(&self.cfg) {
                self.received = plan.moves.iter().map(|m| m.1).collect();
                return plan;
            }
        }
        let n = cores.len();
        let mean = cores.iter().map(|&c| load[c]).sum::<f64>() / n.max(1) as f64;
        let scale = if self.cfg.scale_thresholds && self.cfg.target_load > 0.0 {
            (mean / self.cfg.target_load).clamp(0.0, 1.0)
        } else {
            1.0
        };
        let th = self.cfg.threshold * scale;
        let over: Vec<usize> = cores
            .iter()
            .copied()
            .filter(|&c| {
                load[c] - mean > th && shards_of[c].iter().filter(|s| s.load > 0.0).count() > 1
            })
            .collect();
        let under: Vec<usize> = cores
            .iter()
            .copied()
            .filter(|&c| mean - load[c] > th && !self.received.contains(&(c as CoreId)))
            .collect();
        if over.is_empty() || under.is_empty() {
            self.last.after = self.last.before;
            self.received.clear();
            return plan;
        }
        let rho = self.measured.then_some(self.last.persistence);
        let keep_share = reserve_share(self.cfg.keep_share, rho);
        let round = Solve {
            cores: &cores,
            load: &load,
            mean,
            shards_of: &shards_of,
            over: &over,
            under: &under,
            keep_share,
            eps: SOLVER_EPS * scale,
        };
        let solve = |allow: &[f64]| run(&round, allow);
        let (best, runs) = self.search(w, mean, solve);
        self.last.runs = runs;
        self.last.after = best.sq;
        plan.moves
            .extend(best.moves.iter().map(|&(s, c)| (s, c as CoreId)));
        self.received = plan.moves.iter().map(|m| m.1).collect();
        plan
    }

    /// The allowance search (§3.2): a run without allowances, then, while
    /// the score is above `stop_score`, allowances of each underloaded
    /// core's residual imbalance grown ×1.5 while the score improves, then
    /// bisected; the best run and the number of runs.
    fn search(&self, w: usize, mean: f64, solve: impl Fn(&[f64]) -> Run) -> (Run, usize) {
        let score = |r: &Run| r.sq + self.cfg.migration_cost * r.moves.len() as f64;
        let mut best = solve(&vec![0.0; w]);
        let mut runs = 1;
        if best.sq > self.cfg.stop_score && self.cfg.max_runs > 1 {
            // upper bound: allowances = the residual imbalance of each underloaded
            // core, grown ×1.5 while the score improves; then bisect
            let base: Vec<f64> = (0..w).map(|c| (mean - best.load[c]).abs()).collect();
            let (mut lo, mut hi) = (0.0f64, 1.0f64);
            let mut prev = score(&best);
            while runs < self.cfg.max_runs {
                let allow: Vec<f64> = base.iter().map(|b| b * hi).collect();
                let r = solve(&allow);
                runs += 1;
                let s = score(&r);
                let better = s < score(&best);
                if better {
                    best = r;
                }
                if s >= prev || best.sq <= self.cfg.stop_score {
                    break;
                }
                prev = s;
                lo = hi;
                hi *= 1.5;
            }
            while runs < self.cfg.max_runs && best.sq > self.cfg.stop_score {
                let mid = (lo + hi) / 2.0;
                let allow: Vec<f64> = base.iter().map(|b| b * mid).collect();
                let r = solve(&allow);
                runs += 1;
                if score(&r) < score(&best) {
                    best = r;
                    lo = mid;
                } else {
                    hi = mid;
                }
            }
        }
        (best, runs)
    }

    fn adapt_period(&mut self, snap: &Snapshot, plan: &Plan) -> u64 {
        if self.period_ns == 0 {
            self.period_ns = snap.period_ns.max(1);
        }
        let active = self.active.clone().unwrap_or_default();
        let cores: Vec<usize> = (0..snap.workers)
            .filter(|&c| active.get(c) == Some(&true))
            .collect();
        let load: Vec<f64> = (0..snap.workers)
            .map(|c| snap.core_load.get(c).copied().unwrap_or(0.0))
            .collect();
        let mean = cores.iter().map(|&c| load[c]).sum::<f64>() / cores.len().max(1) as f64;
        let total: f64 = cores.iter().map(|&c| (mean - load[c]).abs()).sum();
        let p = if total > 0.4 {
            self.cfg.min_period_ns
        } else if total > 0.2 {
            self.period_ns / 2
        } else if plan.moves.is_empty() {
            self.period_ns.saturating_mul(2)
        } else {
            self.period_ns
        };
        self.period_ns = p.clamp(self.cfg.min_period_ns, self.cfg.max_period_ns);
        self.period_ns
    }
}

impl Balancer for Rsspp {
    fn name(&self) -> &'static str {
        "rsspp"
    }

    fn plan(&mut self, snap: &Snapshot) -> Plan {
        crate::probe::hit(crate::probe::Probe::RssppPlan);
        let mut plan = self.round(snap);
        plan.next_period_ns = Some(self.adapt_period(snap, &plan));
        self.rounds += 1;
        self.runs += self.last.runs as u64;
        plan
    }

    fn counters(&self) -> Vec<(&'static str, f64)> {
        vec![
            ("rsspp_rounds", self.rounds as f64),
            ("rsspp_solver_runs", self.runs as f64),
            (
                "rsspp_active_cores",
                self.active().iter().filter(|a| **a).count() as f64,
            ),
            ("rsspp_period_ms", self.period_ns as f64 / 1e6),
        ]
    }
}

fn sq_imbalance(cores: &[usize], load: &[f64]) -> f64 {
    let mean = cores.iter().map(|&c| load[c]).sum::<f64>() / cores.len().max(1) as f64;
    cores.iter().map(|&c| (mean - load[c]).powi(2)).sum()
}

/// Each core's shards (not moving) and their fractional loads: a shard's
/// share of its core's packets times the core's load.
fn shard_loads(snap: &Snapshot, load: &[f64]) -> Vec<Vec<ShardLoad>> {
    let w = snap.workers;
    let packets = snap.shard_packets();
    let mut core_pkts = vec![0u64; w];
    for (s, &o) in snap.owner.iter().enumerate() {
        core_pkts[usize::from(o)] += packets[s];
    }
    let mut shards_of: Vec<Vec<ShardLoad>> = vec![Vec::new(); w];
    for (s, &o) in snap.owner.iter().enumerate() {
        let c = usize::from(o);
        let frac = if core_pkts[c] > 0 {
            packets[s] as f64 / core_pkts[c] as f64 * load[c]
        } else {
            0.0
        };
        if !snap.moving.contains(&(s as ShardId)) {
            shards_of[c].push(ShardLoad {
                shard: s as ShardId,
                load: frac,
            });
        }
    }
    shards_of
}

/// The share of its fair share of shards an overloaded core keeps: what
/// persists needs no reserve, so `keep_share` × (1 − ρ); before any ρ is
/// measured (`None`), the whole `keep_share`.
fn reserve_share(keep_share: f64, rho: Option<f64>) -> f64 {
    keep_share * (1.0 - rho.unwrap_or(0.0))
}

/// Each shard's packets per millisecond over the period.
fn shard_rates(snap: &Snapshot) -> Vec<f64> {
    let ms = snap.period_ns.max(1) as f64 / 1e6;
    snap.shard_packets()
        .iter()
        .map(|&p| p as f64 / ms)
        .collect()
}

/// ρ: the correlation of the shards' rates over two consecutive periods,
/// clamped to [0, 1] (0 when either period's rates do not vary).
pub(crate) fn persistence(prev: &[f64], cur: &[f64]) -> f64 {
    let n = prev.len().max(1) as f64;
    let (mp, mc) = (prev.iter().sum::<f64>() / n, cur.iter().sum::<f64>() / n);
    let (mut cov, mut vp, mut vc) = (0.0, 0.0, 0.0);
    for (p, c) in prev.iter().zip(cur) {
        cov += (p - mp) * (c - mc);
        vp += (p - mp).powi(2);
        vc += (c - mc).powi(2);
    }
    if vp <= 0.0 || vc <= 0.0 {
        return 0.0;
    }
    (cov / (vp * vc).sqrt()).clamp(0.0, 1.0)
}

/// Replaces each shard's load by its prediction, mean + ρ·(load − mean) (the
/// mean over the active cores' shards), and each active core's load by the
/// sum of its shards' predictions; a core's load not carried by its shards'
/// packets (none arrived) is kept.
fn predict(shards_of: &mut [Vec<ShardLoad>], load: &mut [f64], cores: &[usize], rho: f64) {
    let (sum, n) = cores
        .iter()
        .flat_map(|&c| &shards_of[c])
        .fold((0.0, 0usize), |(s, n), x| (s + x.load, n + 1));
    if n == 0 {
        return;
    }
    let mean = sum / n as f64;
    for &c in cores {
        if shards_of[c].iter().all(|s| s.load == 0.0) {
            continue;
        }
        let mut total = 0.0;
        for s in &mut shards_of[c] {
            s.load = mean + rho * (s.load - mean);
            total += s.load;
        }
        load[c] = total;
    }
}

/// Core scaling (§4) over one round's loads: a core removed when the
/// others have room for its load, one added when they are past the target.
struct Scale<'a> {
    active: &'a mut Vec<bool>,
    cores: &'a mut Vec<usize>,
    load: &'a mut Vec<f64>,
    shards_of: &'a mut Vec<Vec<ShardLoad>>,
    last: &'a mut RoundInfo,
}

impl Scale<'_> {
    /// Removes the least-loaded core (its shards heaviest first onto the
    /// least-loaded remaining core each time) and returns those moves, or
    /// adds a core (no moves: the round balances onto it).
    fn step(&mut self, cfg: &RssppConfig) -> Option<Plan> {
        let Scale {
            active,
            cores,
            load,
            shards_of,
            last,
        } = self;
        let n = cores.len();
        let w = active.len();
        let mut plan = Plan::default();
        let headroom: f64 = cores.iter().map(|&c| cfg.target_load - load[c]).sum();
        let max_load = cores.iter().map(|&c| load[c]).fold(0.0, f64::max);
        let keep = 1.0
            + (1.0 - cfg.target_load)
            + n as f64 * cfg.scale_alpha.max(max_load - cfg.target_load);
        if n > 1 && headroom > keep {
            // remove the least-loaded core: its shards heaviest first onto the
            // least-loaded remaining core each time
            let victim = *cores
                .iter()
                .min_by(|a, b| load[**a].total_cmp(&load[**b]))
                .expect("n > 2");
            active[victim] = false;
            cores.retain(|&c| c != victim);
            let mut give = std::mem::take(&mut shards_of[victim]);
            give.sort_by(|a, b| b.load.total_cmp(&a.load));
            for sl in give {
                let to = *cores
                    .iter()
                    .min_by(|a, b| load[**a].total_cmp(&load[**b]))
                    .expect("cores remain");
                load[to] += sl.load;
                plan.moves.push((sl.shard, to as CoreId));
            }
            last.removed = Some(victim as CoreId);
            last.after = sq_imbalance(cores, load);
            return Some(plan);
        }
        if headroom < -0.1 {
            if let Some(c) = (0..w).find(|&c| !active[c]) {
                active[c] = true;
                cores.push(c);
                load[c] = 0.0;
                last.added = Some(c as CoreId);
            }
        }
        None
    }
}

/// What every solver run of a round shares: the active cores, their loads
/// and mean, each core's shards, the overloaded and underloaded cores, and
/// the share of its fair share of shards an overloaded core keeps.
#[derive(Clone, Copy)]
struct Solve<'a> {
    cores: &'a [usize],
    load: &'a [f64],
    mean: f64,
    shards_of: &'a [Vec<ShardLoad>],
    over: &'a [usize],
    under: &'a [usize],
    keep_share: f64,
    /// Within this of the mean a core stops giving or taking.
    eps: f64,
}

/// Within this of the mean (1 % of a core) a core stops giving or taking.
const SOLVER_EPS: f64 = 0.01;

#[derive(Clone, Debug)]
struct Run {
    moves: Vec<(ShardId, usize)>,
    load: Vec<f64>,
    sq: f64,
}

/// One greedy run with per-core allowances (RSS++ §3.1). Underloaded cores only
/// gain load, so a shard that fits no underloaded core now never will in this run:
/// each overloaded core's shards are examined once, heaviest first —
/// O(shards × cores) per run.
fn run(round: &Solve, allow: &[f64]) -> Run {
    let Solve {
        cores,
        load,
        mean,
        shards_of,
        over,
        under,
        keep_share,
        eps,
    } = *round;
    // what an overloaded core keeps: at least one shard, and `keep_share` of
    // its fair share of the shards
    let total: usize = cores.iter().map(|&c| shards_of[c].len()).sum();
    let fair = total as f64 / cores.len().max(1) as f64;
    let keep = ((fair * keep_share).floor() as usize).max(1);
    let mut load = load.to_vec();
    let mut moves = Vec::new();
    // each overloaded core's non-empty shards, heaviest first (kept as its
    // children), a cursor, and how many it still holds
    let mut give: Vec<(usize, Vec<ShardLoad>, usize, usize)> = over
        .iter()
        .map(|&c| {
            let mut v: Vec<ShardLoad> = shards_of[c]
                .iter()
                .copied()
                .filter(|s| s.load > 0.0)
                .collect();
            v.sort_by(|a, b| b.load.total_cmp(&a.load));
            let n = v.len();
            (c, v, 0, n)
        })
        .collect();
    let mut targets: Vec<usize> = Vec::with_capacity(under.len());
    // loads change only on a move: the giver and the targets are recomputed then
    let mut changed = true;
    let mut gi = usize::MAX;
    loop {
        if changed {
            changed = false;
            // the most overloaded core that can still give (never below `keep`)
            gi = match give
                .iter()
                .enumerate()
                .filter(|(_, (c, v, k, left))| {
                    load[*c] - mean > eps && *left > keep && *k < v.len()
                })
                .max_by(|a, b| load[a.1 .0].total_cmp(&load[b.1 .0]))
            {
                Some((i, _)) => i,
                None => break,
            };
            targets.clear();
            targets.extend(under.iter().copied().filter(|&u| mean - load[u] > eps));
            // largest deficit first
            targets.sort_by(|a, b| load[*a].total_cmp(&load[*b]));
        }
        if targets.is_empty() {
            break;
        }
        let g = &mut give[gi];
        if g.2 >= g.1.len() {
            // this core has nothing that fits: the next most overloaded one
            changed = true;
            continue;
        }
        let from = g.0;
        let sl = g.1[g.2];
        g.2 += 1;
        if let Some(&to) = targets
            .iter()
            .find(|&&u| sl.load <= (mean - load[u]) + allow[u])
        {
            g.3 -= 1;
            load[from] -= sl.load;
            load[to] += sl.load;
            moves.push((sl.shard, to));
            changed = true;
        }
    }
    let sq = sq_imbalance(cores, &load);
    Run { moves, load, sq }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A snapshot with `shards` shards of the given loads, owned as given; core
    /// loads are the sums (one packet unit = 0.001 load).
    fn snap(workers: usize, shard_load: &[f64], owner: &[CoreId]) -> Snapshot {
        let mut core_load = vec![0.0; workers];
        for (s, &o) in owner.iter().enumerate() {
            core_load[usize::from(o)] += shard_load[s];
        }
        Snapshot {
            now_ns: 0,
            period_ns: 100_000_000,
            shards: shard_load.len(),
            workers,
            owner: owner.to_vec(),
            bucket_packets: shard_load.iter().map(|l| (l * 1e6) as u64).collect(),
            core_load,
            ..Default::default()
        }
    }

    fn apply(s: &Snapshot, plan: &Plan, shard_load: &[f64]) -> Vec<f64> {
        let mut owner = s.owner.clone();
        for &(sh, c) in &plan.moves {
            owner[usize::from(sh)] = c;
        }
        let mut load = vec![0.0; s.workers];
        for (sh, &o) in owner.iter().enumerate() {
            load[usize::from(o)] += shard_load[sh];
        }
        load
    }

    /// 4 cores, 32 shards round-robin: core 0's eight are heavy (0.1), the
    /// others light (0.02). The shard loads and owners.
    fn core_0_heavy() -> (Vec<f64>, Vec<CoreId>) {
        let mut sl = vec![0.02; 32];
        for s in (0..32).step_by(4) {
            sl[s] = 0.1;
        }
        (sl, (0..32).map(|s| (s % 4) as CoreId).collect())
    }

    fn sq(load: &[f64]) -> f64 {
        let m = load.iter().sum::<f64>() / load.len() as f64;
        load.iter().map(|l| (l - m).powi(2)).sum()
    }

    #[test]
    fn balances_to_one_percent_where_a_solution_exists() {
        // 4 cores, 32 shards: core 0 has the heavy ones
        let (sl, owner) = core_0_heavy();
        let s = snap(4, &sl, &owner);
        let before = sq(&s.core_load);
        // the published rule: an overloaded core keeps only its last shard
        let mut b = Rsspp::new(RssppConfig {
            keep_share: 0.0,
            ..RssppConfig::default()
        });
        let plan = b.plan(&s);
        let after = apply(&s, &plan, &sl);
        assert!(before > 0.1, "{before}");
        assert!(
            sq(&after) <= 0.01,
            "{} → {} with {:?}",
            before,
            sq(&after),
            plan.moves
        );
        assert!((b.last_round().after - sq(&after)).abs() < 1e-9);
        // every core keeps a shard
        for c in 0..4u16 {
            let mut owner = s.owner.clone();
            for &(sh, to) in &plan.moves {
                owner[usize::from(sh)] = to;
            }
            assert!(owner.contains(&c));
        }
    }

    #[test]
    fn an_overloaded_core_keeps_its_share_of_its_fair_share_of_shards() {
        // as above; with keep_share 0.5 core 0 keeps 4 of its 8 shards (half
        // of 32 / 4), with the default 0.875 it keeps 7
        let (sl, owner) = core_0_heavy();
        let s = snap(4, &sl, &owner);
        for (keep_share, given) in [(0.5, 4), (RssppConfig::default().keep_share, 1)] {
            let mut b = Rsspp::new(RssppConfig {
                keep_share,
                ..RssppConfig::default()
            });
            let plan = b.plan(&s);
            let from_0 = plan
                .moves
                .iter()
                .filter(|(sh, _)| owner[usize::from(*sh)] == 0);
            assert_eq!(from_0.count(), given, "{:?}", plan.moves);
            let after = apply(&s, &plan, &sl);
            assert!(sq(&after) < sq(&s.core_load), "{after:?}");
        }
    }

    #[test]
    fn loads_that_persist_are_planned_as_published() {
        let (sl, owner) = core_0_heavy();
        let s = snap(4, &sl, &owner);
        let lag = RssppConfig::default().persistence_lag;
        let plans = |predict: bool| {
            let mut b = Rsspp::new(RssppConfig {
                predict,
                ..RssppConfig::default()
            });
            // the same loads every period: the shards kept their load, and
            // once `lag` periods are known ρ = 1
            let plans: Vec<Plan> = (0..=lag).map(|_| b.plan(&s)).collect();
            (plans, b.last_round().persistence)
        };
        let (a, rho) = plans(true);
        let (b, _) = plans(false);
        assert_eq!(rho, 1.0);
        assert!(!a[0].moves.is_empty());
        let moves = |p: &[Plan]| p.iter().map(|p| p.moves.clone()).collect::<Vec<_>>();
        assert_eq!(moves(&a), moves(&b));
    }

    #[test]
    fn loads_that_do_not_persist_move_nothing() {
        // periods 1–3: half of each core's shards busy, balanced (no move)
        let owner: Vec<CoreId> = (0..32).map(|s| (s % 4) as CoreId).collect();
        let p1: Vec<f64> = (0..32)
            .map(|s| if s % 8 < 4 { 0.04 } else { 0.0 })
            .collect();
        // period 4: core 0's shards all busy, uncorrelated with period 1
        let p2: Vec<f64> = (0..32)
            .map(|s| if s % 4 == 0 { 0.06 } else { 0.01 })
            .collect();
        let run = |predict: bool| {
            let mut b = Rsspp::new(RssppConfig {
                predict,
                ..RssppConfig::default()
            });
            for _ in 0..RssppConfig::default().persistence_lag {
                assert!(b.plan(&snap(4, &p1, &owner)).moves.is_empty());
            }
            let plan = b.plan(&snap(4, &p2, &owner));
            (plan, b.last_round().persistence)
        };
        let (published, _) = run(false);
        assert!(!published.moves.is_empty(), "RSS++ chases the new load");
        let (predicted, rho) = run(true);
        assert_eq!(rho, 0.0);
        assert!(predicted.moves.is_empty(), "{:?}", predicted.moves);
    }

    #[test]
    fn parameters_out_of_range_are_named() {
        assert_eq!(RssppConfig::default().check(), Ok(()));
        let bad = |f: fn(&mut RssppConfig)| {
            let mut c = RssppConfig::default();
            f(&mut c);
            c.check().unwrap_err()
        };
        assert!(bad(|c| c.threshold = -1.0).starts_with("threshold -1"));
        assert!(bad(|c| c.threshold = f64::NAN).starts_with("threshold NaN"));
        assert!(bad(|c| c.keep_share = 1.5).starts_with("keep_share"));
        assert!(bad(|c| c.target_load = 0.0).starts_with("target_load"));
        assert!(bad(|c| c.migration_cost = f64::INFINITY).starts_with("migration_cost"));
        assert!(bad(|c| c.max_runs = 0).starts_with("max_runs"));
        assert!(bad(|c| c.persistence_lag = 0).starts_with("persistence_lag"));
        assert!(bad(|c| c.min_period_ns = c.max_period_ns + 1).starts_with("min_period_ns"));
    }

    #[test]
    fn persistence_is_measured_over_the_lag() {
        // the rates alternate between two uncorrelated patterns: one
        // period apart they anti-correlate, two apart they repeat exactly
        let owner: Vec<CoreId> = (0..32).map(|s| (s % 4) as CoreId).collect();
        let a: Vec<f64> = (0..32).map(|s| if s < 16 { 0.04 } else { 0.01 }).collect();
        let b: Vec<f64> = (0..32).map(|s| if s < 16 { 0.01 } else { 0.04 }).collect();
        let rho_at = |lag: usize| {
            let mut r = Rsspp::new(RssppConfig {
                persistence_lag: lag,
                ..RssppConfig::default()
            });
            let mut seen = Vec::new();
            for p in [&a, &b, &a, &b, &a] {
                r.plan(&snap(4, p, &owner));
                seen.push((r.measured, r.last_round().persistence));
            }
            seen
        };
        // lag 1: measured from the second period on, always 0 (clamped)
        assert_eq!(rho_at(1)[1..], [(true, 0.0); 4]);
        // lag 2: unmeasured (and assumed 1) for two periods, then 1
        assert_eq!(rho_at(2)[..2], [(false, 1.0); 2]);
        assert_eq!(rho_at(2)[2..], [(true, 1.0); 3]);
    }

    #[test]
    fn thresholds_scale_with_a_light_load() {
        // 16 cores about 10 % busy: core 0 kept 3 of its 16 shards, the 13
        // others went one to each core; a shard carries 0.006
        let mut owner: Vec<CoreId> = (0..256).map(|s| (s % 16) as CoreId).collect();
        for s in (16..256).step_by(16).skip(2) {
            owner[s] = (s / 16) as CoreId;
        }
        let sl = vec![0.006; 256];
        let s = snap(16, &sl, &owner);
        let plan = |scale_thresholds: bool| {
            let mut b = Rsspp::new(RssppConfig {
                scale_thresholds,
                ..RssppConfig::default()
            });
            b.plan(&s)
        };
        // absolute thresholds: no core is 0.02 above the mean
        assert!(plan(false).moves.is_empty());
        let refill = plan(true);
        assert!(!refill.moves.is_empty());
        assert!(
            refill.moves.iter().all(|&(_, to)| to == 0),
            "{:?}",
            refill.moves
        );
        let after = apply(&s, &refill, &sl);
        assert!(sq(&after) < sq(&s.core_load) / 2.0, "{after:?}");
    }

    #[test]
    fn the_reserve_shrinks_as_loads_persist() {
        assert_eq!(reserve_share(0.5, None), 0.5);
        assert_eq!(reserve_share(0.875, Some(0.2)), 0.875 * 0.8);
        assert_eq!(reserve_share(0.5, Some(0.0)), 0.5);
        assert_eq!(reserve_share(0.5, Some(0.5)), 0.25);
        assert_eq!(reserve_share(0.5, Some(1.0)), 0.0);
        assert_eq!(reserve_share(0.0, None), 0.0);
    }

    #[test]
    fn persistence_is_the_rates_correlation_clamped() {
        assert_eq!(persistence(&[1.0, 2.0, 3.0], &[2.0, 4.0, 6.0]), 1.0);
        assert_eq!(persistence(&[1.0, 2.0, 3.0], &[3.0, 2.0, 1.0]), 0.0);
        assert_eq!(persistence(&[1.0, 1.0], &[1.0, 3.0]), 0.0);
        let r = persistence(&[1.0, 2.0, 3.0, 4.0], &[1.0, 3.0, 2.0, 4.0]);
        assert!((r - 0.8).abs() < 1e-9, "{r}");
    }

    #[test]
    fn never_empties_an_overloaded_core() {
        // core 0: one huge shard and one tiny; core 1 idle
        let sl = [0.9, 0.01, 0.0, 0.0];
        let s = snap(2, &sl, &[0, 0, 1, 1]);
        let plan = Rsspp::new(RssppConfig::default()).plan(&s);
        let moved: Vec<ShardId> = plan.moves.iter().map(|m| m.0).collect();
        assert!(
            !moved.contains(&0),
            "the heavy shard is too big to move: {moved:?}"
        );
        // a core with a single non-empty shard is not overloaded at all
        let s = snap(2, &[0.9, 0.0, 0.1, 0.0], &[0, 0, 1, 1]);
        assert!(Rsspp::new(RssppConfig::default()).plan(&s).moves.is_empty());
    }

    #[test]
    fn balanced_loads_move_nothing_and_the_period_backs_off() {
        let sl = vec![0.1; 8];
        let owner: Vec<CoreId> = (0..8).map(|s| (s % 2) as CoreId).collect();
        let s = snap(2, &sl, &owner);
        let mut b = Rsspp::new(RssppConfig::default());
        let p1 = b.plan(&s);
        assert!(p1.moves.is_empty());
        assert_eq!(p1.next_period_ns, Some(200_000_000));
        let p2 = b.plan(&s);
        assert_eq!(p2.next_period_ns, Some(400_000_000));
        // a big imbalance: straight to the minimum period
        let mut sl = vec![0.01; 8];
        sl[0] = 0.5;
        sl[2] = 0.4;
        let s = snap(2, &sl, &owner);
        assert_eq!(b.plan(&s).next_period_ns, Some(10_000_000));
    }

    #[test]
    fn adds_a_core_above_the_target_load() {
        // 3 of 4 cores active at 0.9 each
        let sl: Vec<f64> = (0..12).map(|_| 0.3).collect();
        let owner: Vec<CoreId> = (0..12).map(|s| (s % 3) as CoreId).collect();
        let s = snap(4, &sl, &owner);
        let mut b = Rsspp::new(RssppConfig {
            autoscale: true,
            ..Default::default()
        });
        let plan = b.plan(&s);
        assert_eq!(b.last_round().added, Some(3));
        assert!(
            !plan.moves.is_empty() && plan.moves.iter().all(|m| m.1 == 3),
            "{plan:?}"
        );
        let after = apply(&s, &plan, &sl);
        assert!(after[3] > 0.5, "{after:?}");
    }

    #[test]
    fn removes_a_core_when_headroom_exceeds_what_fastclick_keeps() {
        // 4 cores at 0.2: headroom 4 × 0.6 = 2.4 > 1 + 0.2 + 4 × max(0.05, −0.6)
        let sl = vec![0.05; 16];
        let owner: Vec<CoreId> = (0..16).map(|s| (s % 4) as CoreId).collect();
        let mut s = snap(4, &sl, &owner);
        s.core_load[2] = 0.19; // the least loaded goes
        let mut b = Rsspp::new(RssppConfig {
            autoscale: true,
            ..Default::default()
        });
        let plan = b.plan(&s);
        assert_eq!(b.last_round().removed, Some(2));
        let moved: Vec<ShardId> = plan.moves.iter().map(|m| m.0).collect();
        assert_eq!(moved.len(), 4, "all of core 2's shards: {plan:?}");
        assert!(plan.moves.iter().all(|m| m.1 != 2));
        // spread over the three others, not piled on one
        let mut to: Vec<CoreId> = plan.moves.iter().map(|m| m.1).collect();
        to.sort_unstable();
        to.dedup();
        assert_eq!(to.len(), 3, "{plan:?}");
        assert!(!b.active()[2]);
        // 2 cores at 0.1: headroom 1.4 > 1 + 0.2 + 2 × 0.05 = 1.3, one goes
        let sl = vec![0.05; 4];
        let s = snap(2, &sl, &[0, 1, 0, 1]);
        let mut b = Rsspp::new(RssppConfig {
            autoscale: true,
            ..Default::default()
        });
        b.plan(&s);
        assert!(b.last_round().removed.is_some());
        // at 0.35 each (headroom 0.9) both stay; a last core always stays
        for (workers, sl, owner) in [
            (2, vec![0.175; 4], vec![0, 1, 0, 1]),
            (1, vec![0.05; 2], vec![0, 0]),
        ] {
            let s = snap(workers, &sl, &owner);
            let mut b = Rsspp::new(RssppConfig {
                autoscale: true,
                ..Default::default()
            });
            b.plan(&s);
            assert_eq!(b.last_round().removed, None, "{workers} cores");
        }
        // a busy core widens the margin: 3 cores at 0.1, 0.1, 0.95 keep all
        // (headroom 1.25 < 1 + 0.2 + 3 × 0.15 = 1.65)
        let sl = vec![0.05, 0.05, 0.05, 0.05, 0.475, 0.475];
        let s = snap(3, &sl, &[0, 1, 0, 1, 2, 2]);
        let mut b = Rsspp::new(RssppConfig {
            autoscale: true,
            ..Default::default()
        });
        b.plan(&s);
        assert_eq!(b.last_round().removed, None);
    }
}

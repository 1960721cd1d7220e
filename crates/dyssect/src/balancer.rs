//! Dyssect's controller (Algorithm 1) as a pure [`Balancer`]: every long period
//! (τ, 1 s) the long-timescale model picks how many working and offloading cores
//! are active; every round (ε) the short-timescale model, with those counts, picks
//! shard assignments, offloading cores and offload ratios. Each solve has a time
//! limit of at most ε/2; a solve the limit stops gives the best feasible plan
//! found so far (counted as `dyssect_incumbents`), or none. When no plan meets
//! the caps (Table III infeasible, or no plan of it found in time), the
//! controller falls back to the balance model (Table IV, which has no caps and always a solution): with more load
//! than the caps allow, spreading it evenly is the best it can do (counted as
//! `dyssect_fallbacks`). A round without a plan keeps the previous one, counted.
//! Use Case II's configuration is `objective = "balance"` with
//! `long_timescale = false` (every core active, no Table II).

use std::time::{Duration, Instant};

use balance::migrate::RATIO_ONE;
use balance::{Balancer, CoreId, Plan, ShardId, Snapshot};

use crate::kingman::utilisation_cap;
use crate::model::{solve, Instance, Objective, SolveError};

/// Parameters of the Dyssect controller.
#[derive(Clone, Debug, PartialEq, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct DyssectConfig {
    /// Long timescale τ, ns (1 s).
    pub long_period_ns: u64,
    /// Run the long-timescale model (Table II, fewest active cores). Off: every
    /// core stays active (Use Case II).
    pub long_timescale: bool,
    /// Upper bound on a solve's time, ns (the controller also caps it at ε/2).
    pub time_limit_ns: u64,
    /// Utilisation cap of any core (0.9).
    pub u_cap: f64,
    /// Mean-wait SLO of the priority class, ns.
    pub slo_priority_ns: f64,
    /// Mean-wait SLO of the regular class, ns.
    pub slo_regular_ns: f64,
    /// Squared coefficient of variation of inter-arrival times (Kingman's c_a²).
    pub ca2: f64,
    /// Squared coefficient of variation of service times (c_s²).
    pub cs2: f64,
    /// Largest offload ratio of any shard.
    pub r_max: f64,
    /// Share of an offloaded packet's cost left on its working core (δ).
    pub residual: f64,
    /// Cost of an offloaded packet on the offloading core relative to home (σ).
    pub offload_scale: f64,
    /// Working cores an active offloading core must serve (2).
    pub min_served: usize,
    /// Short-timescale objective: `migrations` (Table III, the paper's
    /// short-timescale model: fewest shard migrations and re-associations that
    /// meet every cap; ≈ 10 ms at 16 shards × 8 cores) or `balance` (Table IV in a
    /// linear form: lowest maximum utilisation + alpha × migrations; ≈ 10× slower,
    /// so give it a longer period).
    pub objective: ShortObjective,
    /// Weight of one migration in the balance objective.
    pub alpha: f64,
}

impl Default for DyssectConfig {
    fn default() -> Self {
        DyssectConfig {
            long_period_ns: 1_000_000_000,
            long_timescale: true,
            time_limit_ns: 50_000_000,
            u_cap: 0.9,
            slo_priority_ns: 500_000.0,
            slo_regular_ns: 5_000_000.0,
            ca2: 1.0,
            cs2: 1.0,
            r_max: 1.0,
            residual: 0.25,
            offload_scale: 1.0,
            min_served: 2,
            objective: ShortObjective::Migrations,
            alpha: 0.01,
        }
    }
}

/// The short-timescale model's objective (`[run.dyssect] objective`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ShortObjective {
    /// Table III: fewest shard migrations and re-associations that meet every
    /// cap.
    #[default]
    Migrations,
    /// Table IV in a linear form: lowest maximum utilisation + alpha ×
    /// migrations.
    Balance,
}

/// What the controller counted.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DyssectStats {
    /// Long-timescale solves.
    pub long_solves: u64,
    /// Short-timescale solves.
    pub short_solves: u64,
    /// Solves that found the model infeasible (SLOs cannot be met).
    pub infeasible: u64,
    /// Solves stopped by the time limit without a feasible plan.
    pub timeouts: u64,
    /// Solves stopped by the time limit whose best feasible plan was used.
    pub incumbents: u64,
    /// Rounds whose Table III model was infeasible (or found no plan in time)
    /// and that took the balance model's plan instead.
    pub fallbacks: u64,
    /// Rounds that kept the previous plan: no feasible plan in time, or an
    /// error.
    pub kept: u64,
    /// Other solver errors.
    pub errors: u64,
    /// Duration of each solve, ns.
    pub solve_ns: Vec<u64>,
    /// The last error, if any.
    pub last_error: Option<String>,
    /// Offload ratios rounded *down* to a flow boundary because rounding up
    /// would have taken their offloading core past its cap.
    pub rounded_down: u64,
}

/// The Dyssect balancer.
#[derive(Clone, Debug)]
pub struct Dyssect {
    cfg: DyssectConfig,
    last_long: Option<u64>,
    counts: Option<(usize, usize)>,
    stats: DyssectStats,
}

impl Dyssect {
    /// A controller with these parameters. Errors name the bad field.
    pub fn new(cfg: DyssectConfig) -> Result<Dyssect, String> {
        for (name, v) in [
            ("u_cap", cfg.u_cap),
            ("r_max", cfg.r_max),
            ("residual", cfg.residual),
        ] {
            if !(0.0..=1.0).contains(&v) {
                return Err(format!("dyssect.{name} = {v}: must be in [0, 1]"));
            }
        }
        if cfg.offload_scale.is_nan() || cfg.offload_scale <= 0.0 {
            return Err(format!(
                "dyssect.offload_scale = {}: must be > 0",
                cfg.offload_scale
            ));
        }
        Ok(Dyssect {
            cfg,
            last_long: None,
            counts: None,
            stats: DyssectStats::default(),
        })
    }

    /// What it counted.
    pub fn stats(&self) -> &DyssectStats {
        &self.stats
    }

    /// The model instance of a snapshot (`None` without traffic to measure).
    pub fn instance(&self, snap: &Snapshot) -> Option<(Instance, Vec<bool>)> {
        let nw = snap.workers;
        if nw == 0 || snap.shards == 0 || snap.period_ns == 0 {
            return None;
        }
        // mean service time per packet: busy time over packets, all cores
        let cores = snap.core_load.len().min(snap.core_packets.len());
        let busy: f64 = (0..cores)
            .map(|c| snap.core_load[c] * snap.period_ns as f64)
            .sum();
        let pkts: u64 = snap.core_packets.iter().take(cores).sum();
        if pkts == 0 {
            return None;
        }
        let tau = busy / pkts as f64;
        let packets = snap.shard_packets();
        let prio = snap.shard_priority();
        // a core whose queue dropped ran less than arrived for it: its shards'
        // demand is what it ran, scaled up by its queue's drops
        let demand = |s: usize| {
            let c = snap.owner.get(s).map_or(usize::MAX, |&c| usize::from(c));
            let ran = snap.core_packets.get(c).copied().unwrap_or(0);
            let lost = snap.core_drops.get(c).copied().unwrap_or(0);
            if ran == 0 {
                1.0
            } else {
                (ran + lost) as f64 / ran as f64
            }
        };
        let load: Vec<f64> = packets
            .iter()
            .enumerate()
            .map(|(s, &p)| p as f64 * demand(s) * tau / snap.period_ns as f64)
            .collect();
        let r_max: Vec<f64> = (0..snap.shards)
            .map(|s| {
                let p = prio.get(s).copied().unwrap_or(0);
                let regular = if packets[s] > 0 {
                    1.0 - p as f64 / packets[s] as f64
                } else {
                    1.0
                };
                regular.clamp(0.0, 1.0).min(self.cfg.r_max)
            })
            .collect();
        // offloading takes a shard's flows whole, heaviest first
        let r_min: Vec<f64> = (0..snap.shards)
            .map(|s| {
                snap.shard_heavy
                    .get(s)
                    .and_then(|h| h.first())
                    .copied()
                    .unwrap_or(0.0)
            })
            .collect();
        let has_priority = prio.iter().any(|&p| p > 0);
        let cap = |slo: f64| utilisation_cap(slo, tau, self.cfg.ca2, self.cfg.cs2);
        let mut u_work = self.cfg.u_cap.min(cap(self.cfg.slo_regular_ns));
        if has_priority {
            u_work = u_work.min(cap(self.cfg.slo_priority_ns));
        }
        let u_off = self.cfg.u_cap.min(cap(self.cfg.slo_regular_ns));
        let fixed: Vec<bool> = (0..snap.shards)
            .map(|s| snap.moving.contains(&(s as ShardId)))
            .collect();
        let inst = Instance {
            load,
            r_max,
            r_min,
            workers: nw,
            offloaders: snap.offloaders,
            owner: snap.owner.iter().map(|&o| usize::from(o)).collect(),
            offload_core: (0..nw)
                .map(|c| {
                    snap.offload_core
                        .get(c)
                        .copied()
                        .flatten()
                        .map(usize::from)
                        .filter(|&k| k < snap.offloaders)
                })
                .collect(),
            u_work: u_work.max(1e-6),
            u_off: u_off.max(1e-6),
            residual: self.cfg.residual,
            offload_scale: self.cfg.offload_scale,
            min_served: self.cfg.min_served,
            fixed: fixed.clone(),
        };
        Some((inst, fixed))
    }

    /// One short-timescale solve, timed; an infeasible model is counted here
    /// (the caller may fall back).
    fn short_solve(
        &mut self,
        inst: &Instance,
        obj: Objective,
        limit: Duration,
    ) -> Result<crate::model::Solution, SolveError> {
        self.stats.short_solves += 1;
        let t = Instant::now();
        let r = solve(inst, obj, limit);
        self.stats.solve_ns.push(t.elapsed().as_nanos() as u64);
        if let Err(SolveError::Infeasible) = &r {
            self.count(&SolveError::Infeasible);
        }
        r
    }

    fn count(&mut self, e: &SolveError) {
        match e {
            SolveError::Infeasible => self.stats.infeasible += 1,
            SolveError::TimeLimit => self.stats.timeouts += 1,
            _ => self.stats.errors += 1,
        }
        self.stats.last_error = Some(e.to_string());
    }
}

impl Balancer for Dyssect {
    fn name(&self) -> &'static str {
        "dyssect"
    }

    fn counters(&self) -> Vec<(&'static str, f64)> {
        let st = &self.stats;
        let mut t = st.solve_ns.clone();
        t.sort_unstable();
        let pct = |q: f64| {
            t.get(((t.len().max(1) - 1) as f64 * q) as usize)
                .map_or(0.0, |v| *v as f64 / 1e6)
        };
        vec![
            ("dyssect_long_solves", st.long_solves as f64),
            ("dyssect_short_solves", st.short_solves as f64),
            ("dyssect_infeasible", st.infeasible as f64),
            ("dyssect_timeouts", st.timeouts as f64),
            ("dyssect_incumbents", st.incumbents as f64),
            ("dyssect_fallbacks", st.fallbacks as f64),
            ("dyssect_kept", st.kept as f64),
            ("dyssect_errors", st.errors as f64),
            ("dyssect_rounded_down", st.rounded_down as f64),
            ("dyssect_solve_ms_p50", pct(0.5)),
            ("dyssect_solve_ms_max", pct(1.0)),
            // the δ its MILP planned with
            ("dyssect_residual", self.cfg.residual),
        ]
    }

    fn plan(&mut self, snap: &Snapshot) -> Plan {
        let mut plan = Plan::default();
        let Some((inst, fixed)) = self.instance(snap) else {
            return plan;
        };
        let limit = Duration::from_nanos(
            self.cfg
                .time_limit_ns
                .min(snap.period_ns / 2)
                .max(1_000_000),
        );
        let (working, offloading) = self.core_counts(&inst, snap, limit);
        let balance = Objective::Balance {
            working,
            offloading,
            alpha: self.cfg.alpha,
        };
        let obj = if self.cfg.objective == ShortObjective::Migrations {
            Objective::Migrations {
                working,
                offloading,
            }
        } else {
            balance
        };
        let mut used = obj;
        let mut r = self.short_solve(&inst, obj, limit);
        if obj != balance && matches!(r, Err(SolveError::Infeasible | SolveError::TimeLimit)) {
            // no plan meets the caps, or none was found in time: spread the
            // load as evenly as it goes (the two solves stay within ε)
            if let Err(e @ SolveError::TimeLimit) = &r {
                self.count(e);
            }
            self.stats.fallbacks += 1;
            used = balance;
            r = self.short_solve(&inst, balance, limit);
        }
        let sol = match r {
            Ok(s) => s,
            Err(e) => {
                // an infeasible model was counted as it happened
                if e != SolveError::Infeasible {
                    self.count(&e);
                }
                self.stats.kept += 1;
                return plan;
            }
        };
        if !sol.optimal {
            self.stats.incumbents += 1;
        }
        for (s, &c) in sol.owner.iter().enumerate() {
            if c != inst.owner[s] && !fixed[s] {
                plan.moves.push((s as ShardId, c as CoreId));
            }
        }
        plan.ratios = self.ratios(&sol, &inst, snap, used == balance);
        for (c, &k) in sol.offload_core.iter().enumerate() {
            if k != inst.offload_core[c] {
                plan.offload_cores
                    .push((c as CoreId, k.map(|k| k as CoreId)));
            }
        }
        plan
    }
}

impl Dyssect {
    /// The cores the short-timescale model may use: the long-timescale
    /// model's counts, solved again when its period is due (every core when
    /// it is off or finds none).
    fn core_counts(&mut self, inst: &Instance, snap: &Snapshot, limit: Duration) -> (usize, usize) {
        let (nw, nk) = (inst.workers, inst.offloaders);
        let every_core = (
            nw,
            if nk > 0 && nw >= self.cfg.min_served {
                nk
            } else {
                0
            },
        );
        if !self.cfg.long_timescale {
            self.counts = Some(every_core);
        }
        let long_due = self
            .last_long
            .is_none_or(|t| snap.now_ns.saturating_sub(t) >= self.cfg.long_period_ns);
        if self.cfg.long_timescale && (long_due || self.counts.is_none()) {
            self.last_long = Some(snap.now_ns);
            self.stats.long_solves += 1;
            let t = Instant::now();
            let r = solve(inst, Objective::Cores, limit);
            self.stats.solve_ns.push(t.elapsed().as_nanos() as u64);
            self.counts = Some(match r {
                Ok(s) => (
                    s.working.iter().filter(|x| **x).count(),
                    s.offloading.iter().filter(|x| **x).count(),
                ),
                Err(e) => {
                    self.count(&e);
                    // try with every core
                    every_core
                }
            });
        }
        self.counts.expect("set above")
    }

    /// The plan's offload ratios rounded to flow boundaries, for the shards
    /// that stay (`balanced`: the plan is the balance model's, which has no
    /// caps).
    fn ratios(
        &mut self,
        sol: &crate::Solution,
        inst: &Instance,
        snap: &Snapshot,
        balanced: bool,
    ) -> Vec<(ShardId, u32)> {
        let mut out = Vec::new();
        // the balance model has no caps: there, rounding up may take an
        // offloading core as far as the plan's busiest core, no further
        let busiest = sol
            .u_work
            .iter()
            .chain(&sol.u_off)
            .fold(0.0f64, |m, u| m.max(*u));
        let cap = if balanced {
            inst.u_off.max(busiest)
        } else {
            inst.u_off
        };
        let (ratios, down) = round_to_flows(
            &sol.ratio,
            &Offloading {
                owner: &sol.owner,
                offload_core: &sol.offload_core,
                load: &inst.load,
                scale: inst.offload_scale,
                u_off: &sol.u_off,
                cap,
                work: balanced.then_some((&sol.u_work[..], inst.residual)),
            },
            &snap.shard_heavy,
        );
        self.stats.rounded_down += down as u64;
        for (s, &r) in ratios.iter().enumerate() {
            let units = (r.min(1.0) * f64::from(RATIO_ONE)).round() as u32;
            let now = snap.ratio.get(s).copied().unwrap_or(0);
            if units != now && sol.owner[s] == inst.owner[s] {
                out.push((s as ShardId, units));
            }
        }
        out
    }
}

/// What an offloading core carries under a solution, for rounding its ratios.
struct Offloading<'a> {
    owner: &'a [usize],
    offload_core: &'a [Option<usize>],
    load: &'a [f64],
    scale: f64,
    /// Each offloading core's utilisation with the solution's exact ratios.
    u_off: &'a [f64],
    cap: f64,
    /// Each working core's utilisation with the solution's exact ratios, and
    /// the share of an offloaded packet's cost it keeps (δ): with these, a
    /// ratio may also go up past the cap when that lowers the busier of its
    /// two cores (the balance model's goal; `None` under Table III's caps).
    work: Option<(&'a [f64], f64)>,
}

/// Each shard's ratio rounded to a flow boundary where its heaviest flows'
/// cumulative shares are known (`heavy[s]`, increasing): up, as Dyssect's code
/// does, unless the extra share would take its offloading core past the cap —
/// then down to the largest boundary below (possibly none: 0). A ratio beyond
/// every known flow stays as it is (the runtime makes up the rest with slices
/// of the other flows). Every ratio is
/// first taken down, then the heaviest shards go up first while the cap
/// allows: an elephant that must leave its core whole is not refused because
/// lighter shards took the room. With `work` (the balance model), a ratio also
/// goes up past the cap when that lowers the busier of its working and its
/// offloading core. Returns the ratios and how many were rounded down.
fn round_to_flows(ratio: &[f64], o: &Offloading<'_>, heavy: &[Vec<f64>]) -> (Vec<f64>, usize) {
    let mut u = o.u_off.to_vec();
    let mut uw = o.work.map(|(w, _)| w.to_vec()).unwrap_or_default();
    let keep = 1.0 - o.work.map_or(0.0, |(_, d)| d);
    let mut out = ratio.to_vec();
    // (shard, offloading core, boundary below, boundary above)
    let mut open = Vec::new();
    for (s, &r) in ratio.iter().enumerate() {
        let Some(cum) = heavy.get(s).filter(|c| r > 0.0 && !c.is_empty()) else {
            continue;
        };
        // beyond the flows it knows, the runtime offloads slices of the others:
        // any ratio is exact there
        let Some(up) = cum.iter().copied().find(|c| *c >= r) else {
            continue;
        };
        let Some(k) = o.offload_core.get(o.owner[s]).copied().flatten() else {
            out[s] = up;
            continue;
        };
        let lower = cum.iter().copied().rfind(|c| *c <= r).unwrap_or(0.0);
        u[k] -= o.scale * o.load[s] * (r - lower);
        if let Some(w) = uw.get_mut(o.owner[s]) {
            *w += keep * o.load[s] * (r - lower);
        }
        out[s] = lower;
        open.push((s, k, lower, up));
    }
    open.sort_by(|a, b| o.load[b.0].total_cmp(&o.load[a.0]).then(a.0.cmp(&b.0)));
    let mut down = 0;
    for (s, k, lower, up) in open {
        let extra = o.scale * o.load[s] * (up - lower);
        let c = o.owner[s];
        let evens = uw.get(c).is_some_and(|&w| {
            let w_up = w - keep * o.load[s] * (up - lower);
            (u[k] + extra).max(w_up) < u[k].max(w) - 1e-9
        });
        if u[k] + extra <= o.cap + 1e-9 || evens {
            u[k] += extra;
            if let Some(w) = uw.get_mut(c) {
                *w -= keep * o.load[s] * (up - lower);
            }
            out[s] = up;
        } else if up > lower {
            down += 1;
        }
    }
    (out, down)
}

#[cfg(test)]
mod rounding_tests {
    use super::*;

    /// Two shards on working core 0, which offloads to core 0; the heaviest
    /// flows of each shard carry 30 %, 60 %, 100 % of it.
    #[test]
    fn ratios_round_up_to_a_flow_unless_the_offloading_core_would_pass_its_cap() {
        let heavy = vec![vec![0.3, 0.6, 1.0], vec![0.3, 0.6, 1.0]];
        let case = |u_off: f64, cap: f64| {
            let o = Offloading {
                owner: &[0, 0],
                offload_core: &[Some(0)],
                load: &[0.5, 0.5],
                scale: 1.0,
                u_off: &[u_off],
                cap,
                work: None,
            };
            round_to_flows(&[0.4, 0.4], &o, &heavy)
        };
        // room for both: each 0.4 goes up to 0.6 (+0.1 of a core each)
        assert_eq!(case(0.4, 0.9), (vec![0.6, 0.6], 0));
        // room for one: the second goes down to 0.3 (and frees 0.05)
        assert_eq!(case(0.75, 0.9), (vec![0.6, 0.3], 1));
        // no room: both go down
        assert_eq!(case(0.9, 0.9), (vec![0.3, 0.3], 2));
        // a ratio below the heaviest flow goes down to nothing
        let o = Offloading {
            owner: &[0],
            offload_core: &[Some(0)],
            load: &[0.5],
            scale: 1.0,
            u_off: &[0.9],
            cap: 0.9,
            work: None,
        };
        assert_eq!(round_to_flows(&[0.2], &o, &heavy[..1]), (vec![0.0], 1));
        // unknown heavy flows or no offloading core: as the solver said / up
        let none = Offloading {
            offload_core: &[None],
            ..o
        };
        assert_eq!(round_to_flows(&[0.2], &none, &[]), (vec![0.2], 0));
        assert_eq!(round_to_flows(&[0.2], &none, &heavy[..1]), (vec![0.3], 0));
    }
}

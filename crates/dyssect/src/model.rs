//! Dyssect's optimization models (Dyssect §II-C, Tables II–IV) as mixed-integer
//! linear programs, solved with HiGHS.
//!
//! Indices: shards s, working cores c, offloading cores k. Data: the load l_s of
//! each shard (in core-utilisation units), the largest offload ratio of each shard
//! r_s^max (its regular-class share: priority flows are never offloaded), the share
//! δ of an offloaded packet's cost left on its working core (lookup and ring push),
//! the cost σ of an offloaded packet on the offloading core relative to its cost at
//! home, and the utilisation caps of working and offloading cores (SLOs through
//! Kingman's bound, see [`crate::kingman`]).
//!
//! Variables: A_{s,c} (shard s on working core c), O_{c,k} (c offloads to k),
//! f_c, g_k (core active); the products with binaries are linearised exactly:
//! y_{s,c} = r_s·A_{s,c} is a variable with y ≤ r_s^max·A_{s,c} and
//! r_s = Σ_c y_{s,c}, semi-continuous where the shard's heaviest flow is known:
//! 0 or at least that flow's share r_s^min (flowshift's addition: offloading
//! moves whole flows, heaviest first, so a smaller ratio cannot be carried
//! out — an elephant's shard could otherwise be planned to offload a slice of
//! it); v_c = Σ_s l_s·y_{s,c} is what core c offloads; and
//! w_{c,k} = v_c·O_{c,k} with w ≤ M·O, w ≤ v, w ≥ v − M(1 − O).
//!
//! Constraints (all models): each shard on one working core (Eq. 3), only on
//! active ones (Eq. 4), an active working core has a shard (Eq. 6), at most one
//! offloading core per working core and none for an inactive one (Eq. 5), only
//! active offloading cores are used (Eq. 7), an active offloading core serves at
//! least `min_served` (2) working cores (Eq. 8), r_s ≤ r_s^max (Eq. 9), a working
//! core without an offloading core offloads nothing, and the utilisations
//! (Eqs. 10–11):
//!
//! u_c = Σ_s l_s·A_{s,c} − (1 − δ)·v_c ≤ U^w·f_c
//! u_k = σ·Σ_c w_{c,k} ≤ U^o·g_k
//!
//! The offloading-core constraint binds (σ is a real number: the public code's
//! integer scale factor truncated it to 0; a test checks that offloading is limited
//! by U^o here).
//!
//! Objectives: [`Objective::Cores`] (Table II: minimise Σf + Σg, ties broken toward
//! fewer migrations), [`Objective::Migrations`] (Table III: with the numbers of
//! active cores fixed, minimise shard migrations + offloading re-associations) and
//! [`Objective::Balance`] (Table IV in a linear form: with the numbers of active
//! cores fixed, minimise the **maximum utilisation** over active cores, plus α ×
//! migrations). Table IV keeps Eqs. 2–11 and 19–20 only, so the balance model
//! has no utilisation caps and always has a solution.
//!
//! A solve stopped by its time limit returns the best feasible solution found
//! so far ([`Solution::optimal`] false) and fails only if it has none.

// The model is written as the paper's formulas are: several arrays indexed by the
// same s, c, k.
#![allow(clippy::needless_range_loop)]

use std::time::Duration;

use highs::{HighsModelStatus, HighsSolutionStatus, RowProblem, Sense};

pub use crate::instance::{Instance, Objective, Solution, SolveError};

/// The model's columns (Table II's variables and the linearisations'), as
/// HiGHS numbers them.
struct Vars {
    /// f_c: working core c is active.
    f: Vec<highs::Col>,
    /// g_k: offloading core k is active.
    g: Vec<highs::Col>,
    /// A_{s,c}: shard s is on working core c.
    a: Vec<Vec<highs::Col>>,
    /// O_{c,k}: working core c offloads to offloading core k.
    o: Vec<Vec<highs::Col>>,
    /// y_{s,c}: the share of shard s offloaded from core c.
    y: Vec<Vec<highs::Col>>,
    /// v_c: the load core c offloads.
    v: Vec<highs::Col>,
    /// w_{c,k} = v_c·O_{c,k}.
    w: Vec<Vec<highs::Col>>,
    /// The largest utilisation (the balance objective's).
    umax: Option<highs::Col>,
    /// A bound on any core's offloaded load (the big-M of the products).
    big: f64,
}

impl Vars {
    /// The columns for `inst`, with `obj`'s weights.
    fn add(pb: &mut RowProblem, inst: &Instance, obj: Objective) -> Vars {
        let (ns, nw, nk) = (inst.load.len(), inst.workers, inst.offloaders);
        // objective weights
        let (w_f, w_g, w_mig, w_max) = match obj {
            // fewest cores; ties toward fewer migrations (each worth less than a core)
            Objective::Cores => (1.0, 1.0, 0.5 / ((ns + nw * nk) as f64 + 1.0), 0.0),
            Objective::Migrations { .. } => (0.0, 0.0, 1.0, 0.0),
            Objective::Balance { alpha, .. } => (0.0, 0.0, alpha, 1.0),
        };
        let f = (0..nw).map(|_| pb.add_integer_column(w_f, 0..=1)).collect();
        let g = (0..nk).map(|_| pb.add_integer_column(w_g, 0..=1)).collect();
        // A: a migration costs w_mig when the shard leaves its current core
        let a = (0..ns)
            .map(|s| {
                (0..nw)
                    .map(|c| {
                        let cost = if inst.owner[s] == c { -w_mig } else { 0.0 };
                        pb.add_integer_column(cost, 0..=1)
                    })
                    .collect()
            })
            .collect();
        // O: re-associations cost w_mig each way
        let o = (0..nw)
            .map(|c| {
                (0..nk)
                    .map(|k| {
                        let cost = if inst.offload_core[c] == Some(k) {
                            -w_mig
                        } else {
                            w_mig
                        };
                        pb.add_integer_column(cost, 0..=1)
                    })
                    .collect()
            })
            .collect();
        // y_{s,c}: the share of shard s offloaded from core c — r_s·A_{s,c},
        // exactly: y ≤ r^max·A and r_s = Σ_c y_{s,c} (one A_{s,c} is 1)
        let y = (0..ns)
            .map(|s| {
                (0..nw)
                    .map(|_| {
                        let (lo, hi) = (inst.r_min[s], inst.r_max[s]);
                        if lo <= 0.0 {
                            pb.add_column(0.0, 0.0..=hi)
                        } else if lo > hi {
                            // its heaviest flow alone is more than it may offload
                            pb.add_column(0.0, 0.0..=0.0)
                        } else {
                            // 0, or at least its heaviest flow
                            pb.add_semi_continuous_column(0.0, lo..=hi)
                        }
                    })
                    .collect()
            })
            .collect();
        // v_c: load core c offloads; w_{c,k} = v_c·O_{c,k} (exact: O is binary)
        let big: f64 = inst
            .load
            .iter()
            .zip(&inst.r_max)
            .map(|(l, r)| l * r)
            .sum::<f64>()
            .max(1e-9);
        let v = (0..nw).map(|_| pb.add_column(0.0, 0.0..=big)).collect();
        let w = (0..nw)
            .map(|_| (0..nk).map(|_| pb.add_column(0.0, 0.0..=big)).collect())
            .collect();
        let umax = (w_max > 0.0).then(|| pb.add_column(w_max, 0.0..));
        Vars {
            f,
            g,
            a,
            o,
            y,
            v,
            w,
            umax,
            big,
        }
    }

    /// Eqs. 3–4 and y ≤ r^max·A, per shard.
    fn shard_rows(&self, pb: &mut RowProblem, inst: &Instance) {
        let (a, y, f) = (&self.a, &self.y, &self.f);
        for s in 0..inst.load.len() {
            // Eq. 3
            let row: Vec<_> = (0..inst.workers).map(|c| (a[s][c], 1.0)).collect();
            pb.add_row(1.0..=1.0, &row);
            if inst.fixed[s] {
                pb.add_row(1.0..=1.0, [(a[s][inst.owner[s]], 1.0)]);
            }
            for c in 0..inst.workers {
                // Eq. 4
                pb.add_row(..=0.0, [(a[s][c], 1.0), (f[c], -1.0)]);
                // y ≤ r^max·A
                pb.add_row(..=0.0, [(y[s][c], 1.0), (a[s][c], -inst.r_max[s])]);
            }
        }
    }

    /// Eqs. 5, 6 and 10 and the products' linearisations, per working core
    /// (with the utilisation cap when `capped`).
    fn working_rows(&self, pb: &mut RowProblem, inst: &Instance, capped: bool) {
        let (ns, nk) = (inst.load.len(), inst.offloaders);
        let Vars {
            f,
            g,
            a,
            o,
            y,
            v,
            w,
            umax,
            big,
        } = self;
        let big = *big;
        for c in 0..inst.workers {
            // Eq. 6
            let mut row: Vec<_> = (0..ns).map(|s| (a[s][c], 1.0)).collect();
            row.push((f[c], -1.0));
            pb.add_row(0.0.., &row);
            // Eq. 5
            let mut row: Vec<_> = (0..nk).map(|k| (o[c][k], 1.0)).collect();
            row.push((f[c], -1.0));
            pb.add_row(..=0.0, &row);
            for k in 0..nk {
                pb.add_row(..=0.0, [(o[c][k], 1.0), (g[k], -1.0)]);
            }
            // v_c = Σ_s l_s·y_{s,c}, and nothing without an offloading core
            let mut row: Vec<_> = (0..ns).map(|s| (y[s][c], inst.load[s])).collect();
            row.push((v[c], -1.0));
            pb.add_row(0.0..=0.0, &row);
            let mut row = vec![(v[c], 1.0)];
            row.extend((0..nk).map(|k| (o[c][k], -big)));
            pb.add_row(..=0.0, &row);
            for k in 0..nk {
                // w = v·O
                pb.add_row(..=0.0, [(w[c][k], 1.0), (o[c][k], -big)]);
                pb.add_row(..=0.0, [(w[c][k], 1.0), (v[c], -1.0)]);
                pb.add_row(-big.., [(w[c][k], 1.0), (v[c], -1.0), (o[c][k], -big)]);
            }
            // Eq. 10: u_c = Σ_s l_s·A_{s,c} − (1 − δ)·v_c
            let mut row: Vec<_> = (0..ns).map(|s| (a[s][c], inst.load[s])).collect();
            row.push((v[c], -(1.0 - inst.residual)));
            if capped {
                let mut cap = row.clone();
                cap.push((f[c], -inst.u_work));
                pb.add_row(..=0.0, &cap);
            }
            if let Some(u) = *umax {
                row.push((u, -1.0));
                pb.add_row(..=0.0, &row);
            }
        }
    }

    /// Valid bounds that make the LP relaxation tight for heavy shards:
    /// shard s's working core carries at least l_s·(1 − (1 − δ)·r_s) and its
    /// offloading core σ·l_s·r_s (r_s = Σ_c y_{s,c}).
    fn heavy_shard_rows(&self, pb: &mut RowProblem, inst: &Instance) {
        let Some(u) = self.umax else { return };
        for s in 0..inst.load.len() {
            let l = inst.load[s];
            let mut row = vec![(u, 1.0)];
            row.extend((0..inst.workers).map(|c| (self.y[s][c], (1.0 - inst.residual) * l)));
            pb.add_row(l.., &row);
            if inst.offloaders > 0 {
                let mut row = vec![(u, 1.0)];
                row.extend((0..inst.workers).map(|c| (self.y[s][c], -inst.offload_scale * l)));
                pb.add_row(0.0.., &row);
            }
        }
    }

    /// Eqs. 8 and 11, per offloading core (with the utilisation cap when
    /// `capped`).
    fn offloading_rows(&self, pb: &mut RowProblem, inst: &Instance, capped: bool) {
        let nw = inst.workers;
        for k in 0..inst.offloaders {
            // Eq. 8
            let mut row: Vec<_> = (0..nw).map(|c| (self.o[c][k], 1.0)).collect();
            row.push((self.g[k], -(inst.min_served as f64)));
            pb.add_row(0.0.., &row);
            // Eq. 11: u_k = σ·Σ_c w_{c,k}
            let mut row: Vec<_> = (0..nw)
                .map(|c| (self.w[c][k], inst.offload_scale))
                .collect();
            if capped {
                let mut cap = row.clone();
                cap.push((self.g[k], -inst.u_off));
                pb.add_row(..=0.0, &cap);
            }
            if let Some(u) = self.umax {
                row.push((u, -1.0));
                pb.add_row(..=0.0, &row);
            }
        }
    }

    /// The number of active cores `obj` asks for (or at least one).
    fn core_rows(
        &self,
        pb: &mut RowProblem,
        inst: &Instance,
        obj: Objective,
    ) -> Result<(), SolveError> {
        let (nw, nk) = (inst.workers, inst.offloaders);
        let fsum: Vec<_> = self.f.iter().map(|&x| (x, 1.0)).collect();
        let gsum: Vec<_> = self.g.iter().map(|&x| (x, 1.0)).collect();
        match obj {
            Objective::Cores => {
                pb.add_row(1.0.., &fsum);
            }
            Objective::Migrations {
                working,
                offloading,
            }
            | Objective::Balance {
                working,
                offloading,
                ..
            } => {
                if working == 0 || working > nw || offloading > nk {
                    return Err(SolveError::Instance(format!(
                        "{working} working and {offloading} offloading cores asked, {nw} and {nk} available"
                    )));
                }
                pb.add_row(working as f64..=working as f64, &fsum);
                if nk > 0 {
                    pb.add_row(offloading as f64..=offloading as f64, &gsum);
                }
            }
        }
        Ok(())
    }

    /// The columns' values for the plan `st` (a start for the solver).
    fn start(&self, inst: &Instance, st: &crate::start::Start, cols: usize) -> Vec<f64> {
        let (ns, nw, nk) = (inst.load.len(), inst.workers, inst.offloaders);
        let mut x = vec![0.0; cols];
        let mut set = |c: highs::Col, v: f64| x[c.index()] = v;
        for c in 0..nw {
            set(self.f[c], f64::from(u8::from(st.working[c])));
        }
        for k in 0..nk {
            set(self.g[k], f64::from(u8::from(st.offloading[k])));
        }
        let mut vc = vec![0.0; nw];
        for s in 0..ns {
            let c = st.owner[s];
            set(self.a[s][c], 1.0);
            if st.offload_core[c].is_some() {
                set(self.y[s][c], st.ratio[s]);
                vc[c] += inst.load[s] * st.ratio[s];
            }
        }
        for c in 0..nw {
            set(self.v[c], vc[c]);
            if let Some(k) = st.offload_core[c] {
                set(self.o[c][k], 1.0);
                set(self.w[c][k], vc[c]);
            }
        }
        if let Some(u) = self.umax {
            let (uw, uo) = inst.utilisation(&st.owner, &st.offload_core, &st.ratio);
            set(u, uw.iter().chain(&uo).fold(0.0f64, |m, x| m.max(*x)));
        }
        x
    }

    /// The plan the columns' values `x` say.
    fn plan(&self, inst: &Instance, x: &[f64], objective: f64, optimal: bool) -> Solution {
        let (ns, nw, nk) = (inst.load.len(), inst.workers, inst.offloaders);
        let on = |c: highs::Col| x[c.index()] > 0.5;
        let owner: Vec<usize> = (0..ns)
            .map(|s| (0..nw).find(|&c| on(self.a[s][c])).unwrap_or(inst.owner[s]))
            .collect();
        let offload_core: Vec<Option<usize>> = (0..nw)
            .map(|c| (0..nk).find(|&k| on(self.o[c][k])))
            .collect();
        let ratio: Vec<f64> = (0..ns)
            .map(|s| {
                if offload_core[owner[s]].is_some() {
                    x[self.y[s][owner[s]].index()].clamp(0.0, inst.r_max[s])
                } else {
                    0.0
                }
            })
            .collect();
        let (u_work, u_off) = inst.utilisation(&owner, &offload_core, &ratio);
        Solution {
            working: (0..nw).map(|c| on(self.f[c])).collect(),
            offloading: (0..nk).map(|k| on(self.g[k])).collect(),
            migrations: inst.migrations(&owner, &offload_core),
            objective,
            optimal,
            owner,
            offload_core,
            ratio,
            u_work,
            u_off,
        }
    }
}

/// Solves `inst` for `obj` within `limit`.
pub fn solve(inst: &Instance, obj: Objective, limit: Duration) -> Result<Solution, SolveError> {
    inst.check()?;
    let mut pb = RowProblem::default();
    let vars = Vars::add(&mut pb, inst, obj);
    // Table IV keeps Eqs. 2–11 and 19–20 only: no utilisation caps (an inactive
    // core carries nothing anyway: Eqs. 4, 5 and 7 leave it no shard and no
    // working core to serve)
    let capped = !matches!(obj, Objective::Balance { .. });
    vars.shard_rows(&mut pb, inst);
    vars.working_rows(&mut pb, inst, capped);
    vars.heavy_shard_rows(&mut pb, inst);
    vars.offloading_rows(&mut pb, inst, capped);
    vars.core_rows(&mut pb, inst, obj)?;
    // the balance model starts from a greedy plan (a stopped solve keeps at
    // least that)
    let start = match obj {
        Objective::Balance {
            working,
            offloading,
            alpha,
        } => crate::start::balance_start(inst, working, offloading, alpha),
        _ => None,
    };
    let start_cols = start.map(|st| vars.start(inst, &st, pb.num_cols()));
    let mut model = pb.optimise(Sense::Minimise);
    if let Some(x) = &start_cols {
        // a start HiGHS finds infeasible is ignored by it
        let _ = model.try_set_solution(Some(x), None, None, None);
    }
    model.make_quiet();
    model.set_option("time_limit", limit.as_secs_f64().max(1e-3));
    model.set_option("threads", 1);
    // optimal within 3 % (or 0.005 absolute): the data are measurements
    model.set_option("mip_rel_gap", 3e-2);
    model.set_option("mip_abs_gap", 5e-3);
    let solved = model
        .try_solve()
        .map_err(|e| SolveError::Solver(format!("{e:?}")))?;
    match solved.status() {
        HighsModelStatus::Optimal => {}
        HighsModelStatus::Infeasible | HighsModelStatus::UnboundedOrInfeasible => {
            return Err(SolveError::Infeasible)
        }
        // the best plan found so far is kept if there is one
        HighsModelStatus::ReachedTimeLimit
            if solved.primal_solution_status() == HighsSolutionStatus::Feasible => {}
        HighsModelStatus::ReachedTimeLimit => return Err(SolveError::TimeLimit),
        other => return Err(SolveError::Solver(format!("{other:?}"))),
    }
    let optimal = solved.status() == HighsModelStatus::Optimal;
    let sol = solved.get_solution();
    Ok(vars.plan(inst, sol.columns(), solved.objective_value(), optimal))
}

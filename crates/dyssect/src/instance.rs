//! What the models are asked and what they answer: an [`Instance`] (shard
//! loads, the current placement, the caps), an [`Objective`], a
//! [`Solution`] or a [`SolveError`].

/// One instance of the model.
#[derive(Clone, Debug, PartialEq)]
pub struct Instance {
    /// Load of each shard, in units of one core's capacity.
    pub load: Vec<f64>,
    /// Largest offload ratio of each shard (1 − its priority share, capped).
    pub r_max: Vec<f64>,
    /// Smallest non-zero offload ratio of each shard: the share of its heaviest
    /// flow, since offloading takes flows whole, heaviest first (0: any).
    pub r_min: Vec<f64>,
    /// Working cores available.
    pub workers: usize,
    /// Offloading cores available.
    pub offloaders: usize,
    /// Current owner of each shard (for migration counts).
    pub owner: Vec<usize>,
    /// Current offloading core of each working core.
    pub offload_core: Vec<Option<usize>>,
    /// Utilisation cap of a working core.
    pub u_work: f64,
    /// Utilisation cap of an offloading core.
    pub u_off: f64,
    /// Share of an offloaded packet's cost left on the working core (δ).
    pub residual: f64,
    /// Cost of an offloaded packet on the offloading core, relative to home (σ).
    pub offload_scale: f64,
    /// Working cores an active offloading core must serve (Eq. 8).
    pub min_served: usize,
    /// Shards that must stay where they are (e.g. still moving).
    pub fixed: Vec<bool>,
}

/// Which model to solve.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Objective {
    /// Table II: fewest active cores.
    Cores,
    /// Table III: fewest migrations with `working` and `offloading` active cores.
    Migrations {
        /// Active working cores.
        working: usize,
        /// Active offloading cores.
        offloading: usize,
    },
    /// Table IV (linear form): lowest maximum utilisation + `alpha` × migrations,
    /// with these numbers of active cores.
    Balance {
        /// Active working cores.
        working: usize,
        /// Active offloading cores.
        offloading: usize,
        /// Weight of one migration.
        alpha: f64,
    },
}

/// A solution.
#[derive(Clone, Debug, PartialEq)]
pub struct Solution {
    /// Working core of each shard.
    pub owner: Vec<usize>,
    /// Offloading core of each working core.
    pub offload_core: Vec<Option<usize>>,
    /// Offload ratio of each shard.
    pub ratio: Vec<f64>,
    /// Active working cores.
    pub working: Vec<bool>,
    /// Active offloading cores.
    pub offloading: Vec<bool>,
    /// Utilisation of each working core.
    pub u_work: Vec<f64>,
    /// Utilisation of each offloading core.
    pub u_off: Vec<f64>,
    /// The objective's value.
    pub objective: f64,
    /// Shard migrations and re-associations against the instance's current state.
    pub migrations: usize,
    /// False when the time limit stopped the solver: this is the best feasible
    /// plan it had found (within the constraints, not proved optimal).
    pub optimal: bool,
}

/// Why no new plan came out.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum SolveError {
    /// The constraints (SLO caps, core counts) cannot all hold.
    #[error(
        "infeasible: no assignment meets the utilisation caps (SLOs) with the cores available"
    )]
    Infeasible,
    /// The time limit passed before any feasible solution.
    #[error("time limit reached before a feasible solution")]
    TimeLimit,
    /// Bad input.
    #[error("bad instance: {0}")]
    Instance(String),
    /// Anything else HiGHS reported.
    #[error("solver: {0}")]
    Solver(String),
}

impl Instance {
    pub(crate) fn check(&self) -> Result<(), SolveError> {
        let s = self.load.len();
        let bad = |m: String| Err(SolveError::Instance(m));
        if self.workers == 0 {
            return bad("no working core".into());
        }
        if self.r_max.len() != s
            || self.r_min.len() != s
            || self.owner.len() != s
            || self.fixed.len() != s
        {
            return bad("load, r_max, r_min, owner and fixed must have one entry per shard".into());
        }
        if self.owner.iter().any(|&c| c >= self.workers) {
            return bad("an owner is not a working core".into());
        }
        if self.offload_core.len() != self.workers {
            return bad("offload_core must have one entry per working core".into());
        }
        if self
            .load
            .iter()
            .chain(&self.r_max)
            .chain(&self.r_min)
            .any(|x| !x.is_finite() || *x < 0.0)
        {
            return bad("loads and ratios must be finite and ≥ 0".into());
        }
        if !(self.u_work > 0.0 && self.u_off > 0.0 && self.offload_scale > 0.0) {
            return bad("utilisation caps and the offload scale must be > 0".into());
        }
        if !(0.0..=1.0).contains(&self.residual) {
            return bad("residual must be in [0, 1]".into());
        }
        Ok(())
    }

    /// Utilisations of a given assignment (for checks and brute force).
    pub fn utilisation(
        &self,
        owner: &[usize],
        offload_core: &[Option<usize>],
        ratio: &[f64],
    ) -> (Vec<f64>, Vec<f64>) {
        let mut uw = vec![0.0; self.workers];
        let mut uo = vec![0.0; self.offloaders];
        for (s, &c) in owner.iter().enumerate() {
            let r = if offload_core[c].is_some() {
                ratio[s]
            } else {
                0.0
            };
            uw[c] += self.load[s] * (1.0 - (1.0 - self.residual) * r);
            if let Some(k) = offload_core[c] {
                uo[k] += self.offload_scale * self.load[s] * r;
            }
        }
        (uw, uo)
    }

    /// Migrations of `owner`/`offload_core` against the current state.
    pub fn migrations(&self, owner: &[usize], offload_core: &[Option<usize>]) -> usize {
        let moved = owner
            .iter()
            .zip(&self.owner)
            .filter(|(a, b)| a != b)
            .count();
        let reassoc: usize = offload_core
            .iter()
            .zip(&self.offload_core)
            .map(|(a, b)| match (a, b) {
                (x, y) if x == y => 0,
                (Some(_), Some(_)) => 2,
                _ => 1,
            })
            .sum();
        moved + reassoc
    }
}

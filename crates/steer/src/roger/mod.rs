//! Roger (NFLOW/MVT §IV-B/C, Alg. 1): steering by ternary NIC rules within a
//! rule budget instead of RSS's indirection table.
//!
//! The MVT's flows seen in the traffic are the on-set of a Boolean function over
//! the rule key's bits; every other key is a don't-care. Roger
//! 1. builds the function's BDD with complemented edges ([`Bdd`]) under a
//!    variable order sifted to the fewest paths ([`sift`]), and reads its 1-paths
//!    as a disjoint sum of products: one cube per path, weighted by its traffic;
//! 2. reduces the cover to the rule budget using the don't-cares, in one of two
//!    ways ([`Reduce`]):
//!    - [`Reduce::Closest`], the paper's: while there are too many cubes, the
//!      lightest is replaced by its supercube with the closest one (centroid
//!      distance), folding in every cube the supercube meets so that each rule
//!      is one component ([`merge_to`]). Keys outside the cover — flows not seen
//!      when planning — take the NIC's default, RSS, which costs a rule.
//!    - [`Reduce::Tree`], the default: the heaviest cube is split where its keys
//!      first differ in the sifted order, starting from the whole space, until
//!      the budget is met ([`tree_cut`]). Every cube is a supercube over the
//!      don't-cares that meets no other; the cubes tile the key space, so no
//!      default rule is needed.
//! 3. gives the cubes to cores with the least variance of the cores' weights
//!    ([`balance`]).
//!
//! Each cube becomes one rule; the result is a [`RuleTable`] whose rules are
//! disjoint. On skewed traffic the paper's merging snowballs: a grown supercube
//! is close to every cube (its centroid is the space's middle), takes them in
//! one by one, and at small budgets ends as one rule holding everything.
//!
//! Pure: no threads, clocks or I/O.

mod bdd;
mod bits;
mod cube;
mod header;
mod merge;
mod partition;
mod steering;
mod table;
mod tree;

pub use bdd::{sift, Bdd, Sifted};
pub use bits::{Field, KeyBits, KeyBitsError, Slice, MAX_BITS};
pub use cube::{low_bits, Cube};
pub use header::HeaderMatch;
pub use merge::{merge_to, Weighted};
pub use partition::{balance, enumerated_optimum, sum_squares, EXACT_LIMIT};
pub use steering::{RuleSteering, MAX_CELL_BITS};
pub use table::{Route, Rule, RuleTable};
pub use tree::tree_cut;

/// How the cover is brought down to the rule budget.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Default)]
pub enum Reduce {
    /// Split the heaviest cube along the sifted order (tiles the space).
    #[default]
    Tree,
    /// The paper's merging of the lightest cube with its closest (plus a
    /// default rule for keys outside the cover).
    Closest,
}

/// What Roger is asked for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RogerParams {
    /// Width of the rule key, in bits (≤ 64).
    pub bits: u32,
    /// NIC rules available, the default rule included (≥ 2).
    pub budget: usize,
    /// Cores (queues) to spread over (≥ 1).
    pub cores: u16,
    /// Key-levels sifting may build (0: keep the most significant bit first).
    pub sift_work: u64,
    /// How the cover meets the budget.
    pub reduce: Reduce,
}

impl RogerParams {
    /// Sifting work allowed by default: about a second here.
    pub const DEFAULT_SIFT_WORK: u64 = 20_000_000;
}

/// Parameters Roger cannot plan with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RogerError {
    /// The budget has no room for a ternary rule beside the default.
    #[error("rule budget {0}: at least 2 (one ternary rule and the default)")]
    Budget(usize),
    /// No cores.
    #[error("cores must be at least 1")]
    Cores,
    /// Key too wide, or a key beyond it.
    #[error("rule key of {bits} bits: {why}")]
    Bits {
        /// The width asked for.
        bits: u32,
        /// What is wrong.
        why: String,
    },
}

/// A plan and how it was reached.
#[derive(Clone, Debug, PartialEq)]
pub struct RogerPlan {
    /// The rules.
    pub table: RuleTable,
    /// Weight each rule carries (the cube's traffic), rule by rule.
    pub rule_weight: Vec<u64>,
    /// Weight each core receives from the rules.
    pub core_weight: Vec<u64>,
    /// The sifted variable order and path counts.
    pub sifted: Sifted,
    /// Cubes of the DSOP before merging (the sifted BDD's 1-paths).
    pub dsop_cubes: usize,
}

impl RogerPlan {
    /// Heaviest core over the mean (1.0 is perfect balance).
    pub fn imbalance(&self) -> f64 {
        imbalance(&self.core_weight)
    }
}

/// Heaviest over mean of `loads` (1.0 when all are equal or all are 0).
pub fn imbalance(loads: &[u64]) -> f64 {
    let total: u64 = loads.iter().sum();
    if total == 0 || loads.is_empty() {
        return 1.0;
    }
    let max = *loads.iter().max().expect("non-empty") as f64;
    max * loads.len() as f64 / total as f64
}

/// Runs Roger on the MVT's flows: `points` are `(key, weight)` pairs, keys below
/// `2^bits`; a key may repeat (its weights add).
pub fn plan(points: &[(u64, u64)], p: &RogerParams) -> Result<RogerPlan, RogerError> {
    if p.budget < 2 {
        return Err(RogerError::Budget(p.budget));
    }
    if p.cores == 0 {
        return Err(RogerError::Cores);
    }
    if p.bits == 0 || p.bits > MAX_BITS {
        return Err(RogerError::Bits {
            bits: p.bits,
            why: format!("must be 1..={MAX_BITS}"),
        });
    }
    if let Some(&(k, _)) = points.iter().find(|(k, _)| *k & !low_bits(p.bits) != 0) {
        return Err(RogerError::Bits {
            bits: p.bits,
            why: format!("key {k:#x} is wider"),
        });
    }
    let mut pts = points.to_vec();
    pts.sort_unstable_by_key(|p| p.0);
    pts.dedup_by(|b, a| {
        if a.0 == b.0 {
            a.1 += b.1;
            true
        } else {
            false
        }
    });
    let keys: Vec<u64> = pts.iter().map(|p| p.0).collect();
    let sifted = sift(&keys, p.bits, p.sift_work);
    let bdd = Bdd::build(&keys, p.bits, &sifted.order);
    let cubes: Vec<Weighted> = bdd
        .dsop(&pts)
        .into_iter()
        .map(|(cube, weight)| Weighted { cube, weight })
        .collect();
    let dsop_cubes = cubes.len();
    let (cover, default_rule) = match p.reduce {
        Reduce::Closest => (merge_to(cubes, p.budget - 1), true),
        Reduce::Tree => (tree_cut(&pts, &sifted.order, p.budget), false),
    };
    let weights: Vec<u64> = cover.iter().map(|c| c.weight).collect();
    let assign = balance(&weights, usize::from(p.cores));
    let mut core_weight = vec![0u64; usize::from(p.cores)];
    for (w, &c) in weights.iter().zip(&assign) {
        core_weight[c] += w;
    }
    let rules = cover
        .iter()
        .zip(&assign)
        .map(|(c, &core)| Rule {
            cube: c.cube,
            core: core as u16,
        })
        .collect();
    Ok(RogerPlan {
        table: RuleTable {
            bits: p.bits,
            cores: p.cores,
            rules,
            default_rule,
        },
        rule_weight: weights,
        core_weight,
        sifted,
        dsop_cubes,
    })
}

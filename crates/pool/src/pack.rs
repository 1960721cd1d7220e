//! Packing tenants' fNICs onto nodes (Sirius Appendix B.1): vector bin packing
//! over new connections, packets, flows and bandwidth, with the heuristics of
//! Panigrahy et al. that the paper compares, and splitting by symmetric hash.
//!
//! A tenant whose load is split into `k` parts sends each node the flows whose
//! symmetric hash falls in that part's `1/k` of the hash space, so both
//! directions of a connection meet the same node and each part asks for `1/k`
//! of every resource. The parts of one tenant go to different nodes (two on one
//! node would be one part). Every packing is checked against the lower bound
//! `⌈max over resources of Σ demand / capacity⌉` — the pool as one big node.

use serde::Serialize;

use crate::sizes::Demand;

/// Slack for floating-point sums of shares.
const EPS: f64 = 1e-9;

/// `acc += s`, resource by resource.
pub(crate) fn add_to(acc: &mut [f64; 4], s: &[f64; 4]) {
    for (a, x) in acc.iter_mut().zip(s) {
        *a += x;
    }
}

/// How a tenant is split.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Split {
    /// Never; a tenant larger than a node is an error.
    Never,
    /// Only tenants larger than a node, into as few parts as fit.
    Oversize,
    /// Every tenant into at least this many parts (Fig. 14c: 2).
    All(usize),
}

/// A packing heuristic.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize)]
pub enum Heuristic {
    /// First fit, parts by their largest share, largest first.
    FfdMax,
    /// First fit, parts by the sum of their shares, largest first.
    FfdSum,
    /// One node at a time, filled with the part that fits best along its free
    /// room (largest dot product of the part's shares and the room left).
    DotProduct,
    /// One node at a time, filled with the part that leaves the room closest to
    /// empty (smallest distance between the room left and the part).
    L2Norm,
}

impl Heuristic {
    /// All of them.
    pub const ALL: [Heuristic; 4] = [
        Heuristic::FfdMax,
        Heuristic::FfdSum,
        Heuristic::DotProduct,
        Heuristic::L2Norm,
    ];

    /// Its name in reports.
    pub const fn name(self) -> &'static str {
        match self {
            Heuristic::FfdMax => "ffd-max",
            Heuristic::FfdSum => "ffd-sum",
            Heuristic::DotProduct => "dot-product",
            Heuristic::L2Norm => "l2-norm",
        }
    }
}

/// One part of a tenant's load.
#[derive(Copy, Clone, Debug, PartialEq, Serialize)]
pub struct Part {
    /// Index of the tenant.
    pub tenant: usize,
    /// Which part (0-based) …
    pub part: u16,
    /// … of how many: the part gets the flows whose symmetric hash falls in
    /// `[part/of, (part+1)/of)` of the hash space.
    pub of: u16,
    /// What it asks for.
    pub demand: Demand,
}

/// Tenants on nodes.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Packing {
    /// The heuristic used.
    pub heuristic: Heuristic,
    /// The parts on each node.
    pub nodes: Vec<Vec<Part>>,
    /// The lower bound on the number of nodes.
    pub lower_bound: usize,
}

impl Packing {
    /// Each node's load as a share of its capacity, per resource.
    pub fn loads(&self, cap: &Demand) -> Vec<[f64; 4]> {
        self.nodes
            .iter()
            .map(|parts| {
                parts.iter().fold([0.0; 4], |mut acc, p| {
                    add_to(&mut acc, &p.demand.share_of(cap));
                    acc
                })
            })
            .collect()
    }

    /// Lower bound over nodes used (1.0: as good as one big node).
    pub fn efficiency(&self) -> f64 {
        if self.nodes.is_empty() {
            1.0
        } else {
            self.lower_bound as f64 / self.nodes.len() as f64
        }
    }
}

/// A tenant that cannot be placed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PackError {
    /// Negative or not finite.
    #[error("tenant {0}: every amount must be finite and ≥ 0")]
    Invalid(usize),
    /// Larger than a node and not to be split.
    #[error(
        "tenant {tenant} needs {share:.2} nodes' worth of {resource}: split it (more than one node)"
    )]
    TooLarge {
        /// Index of the tenant.
        tenant: usize,
        /// The resource it exceeds most.
        resource: &'static str,
        /// Its demand over a node's capacity.
        share: f64,
    },
    /// A node offers nothing.
    #[error("the node capacity must be positive in every resource a tenant asks for")]
    Capacity,
}

/// `⌈max over resources of Σ demand / capacity⌉` (0 for no tenant).
pub fn lower_bound(tenants: &[Demand], cap: &Demand) -> usize {
    let mut sum = [0.0f64; 4];
    for t in tenants {
        add_to(&mut sum, &t.share_of(cap));
    }
    let m = sum.iter().copied().fold(0.0, f64::max);
    (m - EPS).ceil().max(0.0) as usize
}

/// The parts every tenant is cut into under `split`.
fn parts(tenants: &[Demand], cap: &Demand, split: Split) -> Result<Vec<Part>, PackError> {
    let mut out = Vec::new();
    for (i, t) in tenants.iter().enumerate() {
        if !t.valid() {
            return Err(PackError::Invalid(i));
        }
        let share = t.share_of(cap);
        if share.iter().any(|s| s.is_infinite()) {
            return Err(PackError::Capacity);
        }
        let (worst, most) = share
            .iter()
            .copied()
            .enumerate()
            .fold((0, 0.0), |b, (d, s)| if s > b.1 { (d, s) } else { b });
        let need = ((most - EPS).ceil() as usize).max(1);
        let k = match split {
            Split::Never if need > 1 => {
                return Err(PackError::TooLarge {
                    tenant: i,
                    resource: crate::sizes::DIMS[worst],
                    share: most,
                })
            }
            Split::Never => 1,
            Split::Oversize => need,
            Split::All(k) => need.max(k.max(1)),
        };
        let demand = t.split(k);
        for p in 0..k {
            out.push(Part {
                tenant: i,
                part: p as u16,
                of: k as u16,
                demand,
            });
        }
    }
    Ok(out)
}

struct Node {
    load: [f64; 4],
    parts: Vec<Part>,
}

impl Node {
    fn fits(&self, p: &Part, s: &[f64; 4]) -> bool {
        self.load.iter().zip(s).all(|(l, x)| l + x <= 1.0 + EPS)
            && !self.parts.iter().any(|q| q.tenant == p.tenant)
    }

    fn add(&mut self, p: Part, s: &[f64; 4]) {
        add_to(&mut self.load, s);
        self.parts.push(p);
    }
}

/// Packs `tenants` onto nodes of capacity `cap`.
pub fn pack(
    tenants: &[Demand],
    cap: &Demand,
    h: Heuristic,
    split: Split,
) -> Result<Packing, PackError> {
    let mut items: Vec<(Part, [f64; 4])> = parts(tenants, cap, split)?
        .into_iter()
        .map(|p| {
            let s = p.demand.share_of(cap);
            (p, s)
        })
        .collect();
    let mut nodes: Vec<Node> = Vec::new();
    let key = |s: &[f64; 4], by_max: bool| {
        if by_max {
            s.iter().copied().fold(0.0, f64::max)
        } else {
            s.iter().sum()
        }
    };
    match h {
        Heuristic::FfdMax | Heuristic::FfdSum => {
            let by_max = h == Heuristic::FfdMax;
            items.sort_by(|a, b| key(&b.1, by_max).total_cmp(&key(&a.1, by_max)));
            for (p, s) in items {
                match nodes.iter_mut().find(|n| n.fits(&p, &s)) {
                    Some(n) => n.add(p, &s),
                    None => {
                        let mut n = Node {
                            load: [0.0; 4],
                            parts: Vec::new(),
                        };
                        n.add(p, &s);
                        nodes.push(n);
                    }
                }
            }
        }
        Heuristic::DotProduct | Heuristic::L2Norm => {
            // largest first breaks ties and seeds each new node
            items.sort_by(|a, b| key(&b.1, false).total_cmp(&key(&a.1, false)));
            let mut left = items;
            while !left.is_empty() {
                let mut n = Node {
                    load: [0.0; 4],
                    parts: Vec::new(),
                };
                loop {
                    let room: [f64; 4] = std::array::from_fn(|i| 1.0 - n.load[i]);
                    let score = |s: &[f64; 4]| match h {
                        Heuristic::DotProduct => {
                            s.iter().zip(&room).map(|(x, r)| x * r).sum::<f64>()
                        }
                        _ => -s
                            .iter()
                            .zip(&room)
                            .map(|(x, r)| (r - x).powi(2))
                            .sum::<f64>(),
                    };
                    let best = left
                        .iter()
                        .enumerate()
                        .filter(|(_, (p, s))| n.fits(p, s))
                        .max_by(|a, b| score(&a.1 .1).total_cmp(&score(&b.1 .1)))
                        .map(|(i, _)| i);
                    match best {
                        Some(i) => {
                            let (p, s) = left.remove(i);
                            n.add(p, &s);
                        }
                        None => break,
                    }
                }
                nodes.push(n);
            }
        }
    }
    Ok(Packing {
        heuristic: h,
        nodes: nodes.into_iter().map(|n| n.parts).collect(),
        lower_bound: lower_bound(tenants, cap),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sizes::FnicSize;

    fn cps(x: f64) -> Demand {
        Demand {
            cps: x,
            ..Demand::default()
        }
    }

    #[test]
    fn halves_pair_up_at_the_bound() {
        let cap = cps(1.0);
        let t = vec![cps(0.5); 6];
        for h in Heuristic::ALL {
            let p = pack(&t, &cap, h, Split::Oversize).unwrap();
            assert_eq!((p.nodes.len(), p.lower_bound), (3, 3), "{}", h.name());
        }
    }

    #[test]
    fn a_tenant_larger_than_a_node_is_split_over_distinct_nodes() {
        let cap = FnicSize::card();
        let big = Demand {
            cps: 7.5e6,
            ..FnicSize::FniXl.demand()
        };
        let p = pack(&[big], &cap, Heuristic::FfdSum, Split::Oversize).unwrap();
        assert_eq!(p.nodes.len(), 3);
        for n in &p.nodes {
            assert_eq!(n.len(), 1);
            assert_eq!((n[0].of, n[0].demand.cps), (3, 2.5e6));
        }
        let e = pack(&[big], &cap, Heuristic::FfdSum, Split::Never).unwrap_err();
        assert!(e.to_string().contains("2.50 nodes' worth of cps"), "{e}");
    }

    #[test]
    fn splitting_everything_in_two_fills_the_gaps() {
        // three tenants of 0.6: whole, three nodes; halved, two nodes (0.9 each)
        let cap = cps(1.0);
        let t = vec![cps(0.6); 3];
        let whole = pack(&t, &cap, Heuristic::FfdMax, Split::Oversize).unwrap();
        let halves = pack(&t, &cap, Heuristic::FfdMax, Split::All(2)).unwrap();
        assert_eq!((whole.nodes.len(), halves.nodes.len()), (3, 2));
        assert_eq!(halves.lower_bound, 2);
    }

    #[test]
    fn bad_tenants_are_named() {
        let cap = cps(1.0);
        assert_eq!(
            pack(&[cps(-1.0)], &cap, Heuristic::FfdMax, Split::Oversize).unwrap_err(),
            PackError::Invalid(0)
        );
        let e = pack(
            &[Demand {
                gbps: 1.0,
                ..Demand::default()
            }],
            &cap,
            Heuristic::FfdMax,
            Split::Oversize,
        )
        .unwrap_err();
        assert_eq!(e, PackError::Capacity);
    }
}

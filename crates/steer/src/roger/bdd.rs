//! A reduced ordered binary decision diagram with complemented edges (BDD-CE) of
//! the on-set of the MVT's Boolean function, its 1-paths as a disjoint sum of
//! products (DSOP), and variable-order sifting to minimise the number of paths
//! (NFLOW/MVT §IV-B.1 and Alg. 1 lines 1–3, after Fey and Drechsler).
//!
//! The function is given by its on-set: the distinct keys seen in the traffic.
//! Every other key is a don't-care. The diagram is built bottom-up from the keys
//! sorted in the variable order, so one build costs O(keys × bits).

use rustc_hash::FxHashMap;

use super::cube::Cube;

/// An edge: a node index and a complement bit (`index << 1 | complemented`).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct Edge(u32);

/// The constant-1 function (the regular edge to the one terminal).
pub const ONE: Edge = Edge(0);
/// The constant-0 function (the complemented edge to the one terminal).
pub const ZERO: Edge = Edge(1);

impl Edge {
    fn node(self) -> usize {
        (self.0 >> 1) as usize
    }

    fn complemented(self) -> bool {
        self.0 & 1 == 1
    }

    fn not(self) -> Edge {
        Edge(self.0 ^ 1)
    }

    fn with_parity(self, flip: bool) -> Edge {
        Edge(self.0 ^ u32::from(flip))
    }
}

#[derive(Copy, Clone, Debug)]
struct Node {
    level: u32,
    hi: Edge,
    lo: Edge,
}

/// The diagram of one function under one variable order.
pub struct Bdd {
    n: u32,
    /// `order[level]` is the key bit tested at that level (level 0 at the root).
    order: Vec<u32>,
    nodes: Vec<Node>,
    unique: FxHashMap<(u32, Edge, Edge), u32>,
    root: Edge,
}

impl Bdd {
    /// The diagram whose on-set is `keys` (each below `2^n`, any order, repeats
    /// allowed), testing key bits in `order` (a permutation of `0..n`).
    pub fn build(keys: &[u64], n: u32, order: &[u32]) -> Bdd {
        assert_eq!(order.len(), n as usize, "the order names every bit once");
        let mut ordered: Vec<u64> = keys.iter().map(|&k| permute(k, order)).collect();
        ordered.sort_unstable();
        ordered.dedup();
        let mut bdd = Bdd {
            n,
            order: order.to_vec(),
            nodes: vec![Node {
                level: n,
                hi: ONE,
                lo: ONE,
            }],
            unique: FxHashMap::default(),
            root: ZERO,
        };
        bdd.root = bdd.build_rec(&ordered, 0);
        bdd
    }

    fn build_rec(&mut self, keys: &[u64], level: u32) -> Edge {
        if keys.is_empty() {
            return ZERO;
        }
        if level == self.n {
            return ONE;
        }
        // keys share their bits above `level`, so they are sorted by this one
        let bit = self.n - 1 - level;
        let split = keys.partition_point(|k| k >> bit & 1 == 0);
        let lo = self.build_rec(&keys[..split], level + 1);
        let hi = self.build_rec(&keys[split..], level + 1);
        self.make(level, hi, lo)
    }

    /// The node `level ? hi : lo`, reduced and canonical: the then-edge is never
    /// complemented (a complemented one is pushed to the edge into the node).
    fn make(&mut self, level: u32, hi: Edge, lo: Edge) -> Edge {
        if hi == lo {
            return hi;
        }
        let flip = hi.complemented();
        let (hi, lo) = if flip { (hi.not(), lo.not()) } else { (hi, lo) };
        let next = self.nodes.len() as u32;
        let idx = *self.unique.entry((level, hi, lo)).or_insert(next);
        if idx == next {
            self.nodes.push(Node { level, hi, lo });
        }
        Edge(idx << 1).with_parity(flip)
    }

    /// The root edge.
    pub fn root(&self) -> Edge {
        self.root
    }

    /// Nodes, the terminal included.
    pub fn node_count(&self) -> usize {
        self.nodes.len()
    }

    /// The variable order.
    pub fn order(&self) -> &[u32] {
        &self.order
    }

    /// Whether the function is 1 at `key`.
    pub fn eval(&self, key: u64) -> bool {
        let mut e = self.root;
        let mut parity = false;
        loop {
            parity ^= e.complemented();
            let node = self.nodes[e.node()];
            if node.level == self.n {
                return !parity;
            }
            let bit = self.order[node.level as usize];
            e = if key >> bit & 1 == 1 {
                node.hi
            } else {
                node.lo
            };
        }
    }

    /// Number of 1-paths (the size of the DSOP cover the diagram gives),
    /// saturating.
    pub fn one_paths(&self) -> u64 {
        // nodes are created children first
        let mut counts: Vec<(u64, u64)> = Vec::with_capacity(self.nodes.len());
        counts.push((1, 0));
        let paths = |counts: &[(u64, u64)], e: Edge| {
            let (one, zero) = counts[e.node()];
            if e.complemented() {
                (zero, one)
            } else {
                (one, zero)
            }
        };
        for node in &self.nodes[1..] {
            let (h1, h0) = paths(&counts, node.hi);
            let (l1, l0) = paths(&counts, node.lo);
            counts.push((h1.saturating_add(l1), h0.saturating_add(l0)));
        }
        paths(&counts, self.root).0
    }

    /// The 1-paths as disjoint cubes, each with the total weight of the
    /// `(key, weight)` points it holds. `points` must be the on-set the
    /// diagram was built from (a path none of them reaches is taken as 0).
    pub fn dsop(&self, points: &[(u64, u64)]) -> Vec<(Cube, u64)> {
        let mut out = Vec::new();
        let pts: Vec<(u64, u64)> = points.to_vec();
        self.dsop_rec(self.root, false, Cube::ALL, pts, &mut out);
        out
    }

    fn dsop_rec(
        &self,
        e: Edge,
        parity: bool,
        cube: Cube,
        pts: Vec<(u64, u64)>,
        out: &mut Vec<(Cube, u64)>,
    ) {
        let parity = parity ^ e.complemented();
        let node = self.nodes[e.node()];
        if node.level == self.n {
            if !parity {
                out.push((cube, pts.iter().map(|p| p.1).sum()));
            }
            return;
        }
        if pts.is_empty() {
            // the on-set is the points: nothing below is 1
            return;
        }
        let b = self.order[node.level as usize];
        let (hi_pts, lo_pts): (Vec<_>, Vec<_>) = pts.into_iter().partition(|p| p.0 >> b & 1 == 1);
        let bit = 1u64 << b;
        let hi_cube = Cube::new(cube.value | bit, cube.mask | bit);
        let lo_cube = Cube::new(cube.value, cube.mask | bit);
        self.dsop_rec(node.hi, parity, hi_cube, hi_pts, out);
        self.dsop_rec(node.lo, parity, lo_cube, lo_pts, out);
    }
}

/// `key` with bit `order[l]` moved to position `n − 1 − l`, so that sorting the
/// results sorts by the order's levels.
pub(super) fn permute(key: u64, order: &[u32]) -> u64 {
    let n = order.len() as u32;
    order
        .iter()
        .enumerate()
        .fold(0, |acc, (l, &b)| acc | (key >> b & 1) << (n - 1 - l as u32))
}

/// What sifting found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sifted {
    /// The best order seen.
    pub order: Vec<u32>,
    /// 1-paths under the initial order (most significant bit first).
    pub paths_before: u64,
    /// 1-paths under the best order.
    pub paths_after: u64,
    /// Orders tried.
    pub builds: usize,
    /// Whether sifting stopped at `work_cap` before a full pass.
    pub capped: bool,
}

/// Rudell's sifting with the number of 1-paths as the cost: each bit in turn is
/// tried at every level, the others keeping their order, and left where the
/// diagram has the fewest paths. Starts from the most significant bit first;
/// stops after two passes without gain or once `work_cap` key-levels have been
/// built.
pub fn sift(keys: &[u64], n: u32, work_cap: u64) -> Sifted {
    let mut order: Vec<u32> = (0..n).rev().collect();
    let cost_of = |o: &[u32]| {
        let b = Bdd::build(keys, n, o);
        (b.one_paths(), b.node_count())
    };
    let mut best = cost_of(&order);
    let paths_before = best.0;
    let per_build = (keys.len() as u64).max(1) * u64::from(n.max(1));
    let mut work = per_build;
    let mut builds = 1;
    let mut capped = false;
    'passes: for _ in 0..2 {
        let mut gained = false;
        for var in (0..n).rev() {
            let from = order.iter().position(|&b| b == var).expect("in order");
            let mut rest = order.clone();
            rest.remove(from);
            let mut best_at = from;
            for at in 0..n as usize {
                if at == from {
                    continue;
                }
                if work + per_build > work_cap {
                    capped = true;
                    break 'passes;
                }
                let mut o = rest.clone();
                o.insert(at, var);
                let c = cost_of(&o);
                work += per_build;
                builds += 1;
                if c < best {
                    best = c;
                    best_at = at;
                }
            }
            if best_at != from {
                gained = true;
                order = rest;
                order.insert(best_at, var);
            }
        }
        if !gained {
            break;
        }
    }
    Sifted {
        order,
        paths_before,
        paths_after: best.0,
        builds,
        capped,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msb_first(n: u32) -> Vec<u32> {
        (0..n).rev().collect()
    }

    #[test]
    fn the_diagram_is_the_on_set() {
        let keys = [0b0001, 0b0110, 0b0111, 0b1110, 0b1111];
        let b = Bdd::build(&keys, 4, &msb_first(4));
        for k in 0..16 {
            assert_eq!(b.eval(k), keys.contains(&k), "key {k:04b}");
        }
        // 1 → 11-; 0 → 001 or 11-: three paths
        let pts: Vec<(u64, u64)> = keys.iter().map(|&k| (k, 1)).collect();
        let cubes: Vec<String> = b.dsop(&pts).iter().map(|c| c.0.ternary(4)).collect();
        assert_eq!(b.one_paths(), 3, "{cubes:?}");
    }

    #[test]
    fn complemented_edges_share_a_function_and_its_negation() {
        // f = x3 xor x2 xor x1 xor x0: a chain of 4 nodes with complemented edges
        // (8 paths), where a plain ROBDD needs 7 nodes
        let keys: Vec<u64> = (0..16u64).filter(|k| k.count_ones() % 2 == 1).collect();
        let b = Bdd::build(&keys, 4, &msb_first(4));
        assert_eq!(b.node_count(), 5);
        assert_eq!(b.one_paths(), 8);
        for k in 0..16 {
            assert_eq!(b.eval(k), k.count_ones() % 2 == 1);
        }
    }

    #[test]
    fn dsop_cubes_are_disjoint_and_cover_the_on_set_with_its_weights() {
        let pts = [(3u64, 5u64), (7, 1), (11, 2), (12, 9), (13, 4)];
        let keys: Vec<u64> = pts.iter().map(|p| p.0).collect();
        let b = Bdd::build(&keys, 4, &msb_first(4));
        let cubes = b.dsop(&pts);
        assert_eq!(cubes.len() as u64, b.one_paths());
        for k in 0..16u64 {
            let n = cubes.iter().filter(|c| c.0.contains(k)).count();
            assert_eq!(n, usize::from(keys.contains(&k)), "key {k}");
        }
        assert_eq!(cubes.iter().map(|c| c.1).sum::<u64>(), 21);
    }

    #[test]
    fn sifting_finds_an_order_with_fewer_paths() {
        // f = x7·x0 + x6·x1 + x5·x2: most significant bit first keeps each pair
        // apart, so paths multiply; sifting brings the pairs together
        let keys: Vec<u64> = (0..256u64)
            .filter(|&k| {
                let x = |i: u32| k >> i & 1 == 1;
                (x(7) && x(0)) || (x(6) && x(1)) || (x(5) && x(2))
            })
            .collect();
        let s = sift(&keys, 8, u64::MAX);
        assert!(s.paths_after < s.paths_before, "{s:?}");
        let b = Bdd::build(&keys, 8, &s.order);
        assert_eq!(b.one_paths(), s.paths_after);
        for k in 0..256 {
            assert_eq!(b.eval(k), keys.contains(&k));
        }
        let capped = sift(&keys, 8, 3 * keys.len() as u64 * 8);
        assert!(capped.capped);
        assert_eq!(capped.builds, 3);
    }
}

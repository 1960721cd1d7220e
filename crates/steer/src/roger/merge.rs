//! Cutting the cover down to the rule budget (NFLOW/MVT Alg. 1 lines 7–13): the
//! lightest cube is replaced by its supercube with the closest cube, until the
//! budget is met.
//!
//! A supercube can reach into other cubes. Those become one component
//! (Definition 5) that must go to one core, and a NIC matches it with one rule
//! only if it is one cube — so every cube the supercube meets is folded into it
//! too, until it meets no other. The cover stays a set of disjoint cubes, each
//! a component of its own, and weights stay exact sums.

use super::cube::Cube;

/// A cube of the cover and the traffic weight it holds.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Weighted {
    /// The cube.
    pub cube: Cube,
    /// Its weight (Definition 9: packets, bytes… of the keys in it).
    pub weight: u64,
}

/// Candidates, closest first, tried for a merge that folds in nothing else.
const CLEAN_TRIES: usize = 32;

/// Merges disjoint `cubes` until at most `max` remain (at least one). Ties go to
/// the earlier cube, so the result is deterministic.
pub fn merge_to(mut cubes: Vec<Weighted>, max: usize) -> Vec<Weighted> {
    let max = max.max(1);
    while cubes.len() > max {
        let (i, _) = cubes
            .iter()
            .enumerate()
            .min_by_key(|(i, c)| (c.weight, *i))
            .expect("more than one cube");
        let c1 = cubes[i].cube;
        let mut order: Vec<usize> = (0..cubes.len()).filter(|&j| j != i).collect();
        order.sort_by_key(|&j| (c1.distance4(&cubes[j].cube), cubes[j].weight, j));
        // the closest cube whose supercube with c1 meets no third cube, if any
        // of the closest few; else the closest
        let j = order
            .iter()
            .take(CLEAN_TRIES)
            .copied()
            .find(|&j| {
                let s = c1.supercube(&cubes[j].cube);
                cubes
                    .iter()
                    .enumerate()
                    .all(|(k, c)| k == i || k == j || !s.intersects(&c.cube))
            })
            .unwrap_or(order[0]);
        let mut merged = Weighted {
            cube: c1.supercube(&cubes[j].cube),
            weight: cubes[i].weight + cubes[j].weight,
        };
        let at = i.min(j);
        let mut taken = vec![false; cubes.len()];
        taken[i] = true;
        taken[j] = true;
        loop {
            let mut grew = false;
            for (k, c) in cubes.iter().enumerate() {
                if !taken[k] && merged.cube.intersects(&c.cube) {
                    taken[k] = true;
                    merged.cube = merged.cube.supercube(&c.cube);
                    merged.weight += c.weight;
                    grew = true;
                }
            }
            if !grew {
                break;
            }
        }
        let mut next = Vec::with_capacity(cubes.len() - 1);
        for (k, c) in cubes.into_iter().enumerate() {
            if k == at {
                next.push(merged);
            } else if !taken[k] {
                next.push(c);
            }
        }
        cubes = next;
    }
    cubes
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(t: &str, weight: u64) -> Weighted {
        let n = t.len() as u32;
        let (mut value, mut mask) = (0, 0);
        for (i, ch) in t.chars().enumerate() {
            let bit = 1u64 << (n - 1 - i as u32);
            match ch {
                '1' => {
                    value |= bit;
                    mask |= bit
                }
                '0' => mask |= bit,
                _ => {}
            }
        }
        Weighted {
            cube: Cube::new(value, mask),
            weight,
        }
    }

    #[test]
    fn the_lightest_cube_joins_its_closest() {
        let cubes = vec![w("0000", 5), w("0001", 1), w("1111", 7)];
        let out = merge_to(cubes, 2);
        assert_eq!(out.len(), 2);
        assert_eq!(out[0].cube.ternary(4), "000-");
        assert_eq!(out[0].weight, 6);
        assert_eq!(out[1], w("1111", 7));
    }

    #[test]
    fn a_supercube_folds_in_every_cube_it_meets() {
        // 0000 joins 001- (as close as -001 and 10-0, and lighter) into 00--,
        // which meets -001; that gives -0--, which meets 10-0 and 1011
        let cubes = vec![
            w("0000", 1),
            w("001-", 2),
            w("-001", 5),
            w("10-0", 6),
            w("1011", 7),
            w("11--", 20),
            w("01--", 20),
        ];
        let out = merge_to(cubes, 6);
        assert_eq!(out.len(), 3);
        assert_eq!(out[0].cube.ternary(4), "-0--");
        assert_eq!(out[0].weight, 21);
        for (a, x) in out.iter().enumerate() {
            for y in &out[a + 1..] {
                assert!(!x.cube.intersects(&y.cube));
            }
        }
    }

    /// The paper's loop as written — supercubes may overlap, components found
    /// at the end — on random keys with Zipf weights: every cube ends in one
    /// component, so all traffic would go to one core. Folding in the cubes a
    /// supercube meets (what `merge_to` does) cannot do better.
    #[test]
    fn the_papers_merging_snowballs_into_one_component() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut keys: Vec<u64> = (0..600).map(|_| next() & 0xffff).collect();
        keys.sort_unstable();
        keys.dedup();
        let mut cubes: Vec<Weighted> = keys
            .iter()
            .enumerate()
            .map(|(r, &k)| Weighted {
                cube: Cube::point(k, 16),
                weight: (10_000.0 / (r as f64 + 1.0).powf(1.1)) as u64 + 1,
            })
            .collect();
        while cubes.len() > 16 {
            let i = (0..cubes.len())
                .min_by_key(|&i| (cubes[i].weight, i))
                .unwrap();
            let j = (0..cubes.len())
                .filter(|&j| j != i)
                .min_by_key(|&j| (cubes[i].cube.distance4(&cubes[j].cube), cubes[j].weight, j))
                .unwrap();
            let s = Weighted {
                cube: cubes[i].cube.supercube(&cubes[j].cube),
                weight: cubes[i].weight + cubes[j].weight,
            };
            cubes = cubes
                .into_iter()
                .enumerate()
                .filter(|(k, _)| *k != i && *k != j)
                .map(|(_, c)| c)
                .chain([s])
                .collect();
        }
        // union-find over "connected" (Definition 3)
        let mut parent: Vec<usize> = (0..cubes.len()).collect();
        fn root(p: &mut [usize], mut a: usize) -> usize {
            while p[a] != a {
                a = p[a];
            }
            a
        }
        for a in 0..cubes.len() {
            for b in a + 1..cubes.len() {
                if cubes[a].cube.intersects(&cubes[b].cube) {
                    let (ra, rb) = (root(&mut parent, a), root(&mut parent, b));
                    parent[ra] = rb;
                }
            }
        }
        let r0 = root(&mut parent, 0);
        assert!((0..cubes.len()).all(|a| root(&mut parent, a) == r0));
        let folded = merge_to(
            keys.iter()
                .map(|&k| Weighted {
                    cube: Cube::point(k, 16),
                    weight: 1,
                })
                .collect(),
            16,
        );
        assert_eq!(folded.len(), 1, "folding ends with {} cubes", folded.len());
    }
}

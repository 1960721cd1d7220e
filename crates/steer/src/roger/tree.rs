//! Cutting the cover down to the rule budget along the decision tree of the
//! sifted variable order: the cut starts as the one cube holding every key and
//! the heaviest cube that holds two distinct keys is split where they first
//! differ, until the budget is met.
//!
//! Each split fixes one bit, the first one in the order at which the cube's
//! keys diverge; bits on which they all agree stay don't-cares (the don't-care
//! set the paper's supercubes use). The cubes of a cut are therefore disjoint
//! and tile the whole key space — a packet of a flow not seen when planning
//! matches exactly one of them too — and a supercube never reaches into another
//! cube, which the paper's closest-centroid merging cannot promise (see
//! [`merge_to`](super::merge_to)).

use std::collections::BinaryHeap;

use super::bdd::permute;
use super::cube::Cube;
use super::merge::Weighted;

/// Splits the space into at most `max` cubes (at least one) over `points`
/// (distinct keys with weights), testing bits in `order` (`order[level]` is a
/// key bit, level 0 first).
pub fn tree_cut(points: &[(u64, u64)], order: &[u32], max: usize) -> Vec<Weighted> {
    let n = order.len() as u32;
    let mut pts: Vec<(u64, u64)> = points
        .iter()
        .map(|&(k, w)| (permute(k, order), w))
        .collect();
    pts.sort_unstable_by_key(|p| p.0);
    let mut prefix = Vec::with_capacity(pts.len() + 1);
    prefix.push(0u64);
    for p in &pts {
        prefix.push(prefix.last().copied().unwrap_or(0) + p.1);
    }
    let weight = |lo: usize, hi: usize| prefix[hi] - prefix[lo];
    // (weight, tie-break, lo, hi, cube)
    let mut heap = BinaryHeap::new();
    let mut done: Vec<(usize, Weighted)> = Vec::new();
    let root = Node {
        lo: 0,
        hi: pts.len(),
        cube: Cube::ALL,
    };
    heap.push((weight(0, pts.len()), std::cmp::Reverse(0usize), root));
    let mut count = 1;
    let mut seq = 1usize;
    while let Some((w, order_tag, node)) = heap.pop() {
        let splittable = node.hi - node.lo >= 2 && pts[node.lo].0 != pts[node.hi - 1].0;
        if !splittable || count >= max.max(1) {
            done.push((
                order_tag.0,
                Weighted {
                    cube: node.cube,
                    weight: w,
                },
            ));
            continue;
        }
        let diff = pts[node.lo].0 ^ pts[node.hi - 1].0;
        let level = diff.leading_zeros() - (64 - n);
        let bit_in_ordered = n - 1 - level;
        let split =
            node.lo + pts[node.lo..node.hi].partition_point(|p| p.0 >> bit_in_ordered & 1 == 0);
        let key_bit = 1u64 << order[level as usize];
        let zero = Node {
            lo: node.lo,
            hi: split,
            cube: Cube::new(node.cube.value, node.cube.mask | key_bit),
        };
        let one = Node {
            lo: split,
            hi: node.hi,
            cube: Cube::new(node.cube.value | key_bit, node.cube.mask | key_bit),
        };
        for child in [zero, one] {
            heap.push((weight(child.lo, child.hi), std::cmp::Reverse(seq), child));
            seq += 1;
        }
        count += 1;
    }
    done.sort_by_key(|d| d.0);
    done.into_iter().map(|d| d.1).collect()
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Node {
    lo: usize,
    hi: usize,
    cube: Cube,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_heaviest_cube_splits_where_its_keys_differ() {
        // keys 0000 (8), 0011 (1), 1100 (1), 1111 (2) in msb-first order
        let pts = [(0b0000, 8), (0b0011, 1), (0b1100, 1), (0b1111, 2)];
        let order = [3, 2, 1, 0];
        let cut = tree_cut(&pts, &order, 3);
        let mut got: Vec<(String, u64)> =
            cut.iter().map(|c| (c.cube.ternary(4), c.weight)).collect();
        got.sort();
        // root splits on bit 3 (0--- 9, 1--- 3); 0--- splits where 0000 and
        // 0011 differ first, bit 1, leaving bit 2 a don't-care
        assert_eq!(
            got,
            vec![
                ("0-0-".to_string(), 8),
                ("0-1-".to_string(), 1),
                ("1---".to_string(), 3)
            ]
        );
        // the cut tiles the space
        for k in 0..16u64 {
            assert_eq!(cut.iter().filter(|c| c.cube.contains(k)).count(), 1);
        }
    }

    #[test]
    fn one_key_cannot_split() {
        let cut = tree_cut(&[(5, 3)], &[2, 1, 0], 8);
        assert_eq!(cut.len(), 1);
        assert_eq!(cut[0].cube, Cube::ALL);
        assert_eq!(cut[0].weight, 3);
    }
}

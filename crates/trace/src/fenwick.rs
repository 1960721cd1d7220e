//! A Fenwick (binary indexed) tree over slot weights: pick a slot with probability
//! proportional to its weight in O(log n). The generator uses it to interleave the
//! packets of the concurrently active flows.

pub(crate) struct Fenwick {
    tree: Vec<u64>,
    weights: Vec<u64>,
}

impl Fenwick {
    pub(crate) fn new(n: usize) -> Fenwick {
        Fenwick {
            tree: vec![0; n + 1],
            weights: vec![0; n],
        }
    }

    pub(crate) fn total(&self) -> u64 {
        let mut i = self.weights.len();
        let mut s = 0;
        while i > 0 {
            s += self.tree[i];
            i &= i - 1;
        }
        s
    }

    pub(crate) fn set(&mut self, slot: usize, w: u64) {
        let old = self.weights[slot];
        self.weights[slot] = w;
        let mut i = slot + 1;
        while i < self.tree.len() {
            self.tree[i] = self.tree[i].wrapping_add(w.wrapping_sub(old));
            i += i & i.wrapping_neg();
        }
    }

    /// The slot whose cumulative range contains `target` (< total).
    pub(crate) fn find(&self, mut target: u64) -> usize {
        let n = self.tree.len() - 1;
        let mut pos = 0;
        let mut step = n.next_power_of_two();
        while step > 0 {
            let next = pos + step;
            if next <= n && self.tree[next] <= target {
                pos = next;
                target -= self.tree[next];
            }
            step >>= 1;
        }
        pos
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_by_cumulative_weight() {
        let mut f = Fenwick::new(5);
        for (i, w) in [3, 0, 2, 5, 1].iter().enumerate() {
            f.set(i, *w);
        }
        assert_eq!(f.total(), 11);
        let picks: Vec<usize> = (0..11).map(|t| f.find(t)).collect();
        assert_eq!(picks, [0, 0, 0, 2, 2, 3, 3, 3, 3, 3, 4]);
        f.set(3, 0);
        assert_eq!(f.total(), 6);
        assert_eq!(f.find(5), 4);
    }
}

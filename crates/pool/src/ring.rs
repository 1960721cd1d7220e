//! The pool's pairing and routing, as its controller keeps them: nodes in a
//! ring, each the secondary of the node before it (Sirius's card pairs,
//! generalised to a ring so that every node is both), and the router's
//! buckets, each sending its flows to one node.
//!
//! On the real router (`netio::poolbed`) the buckets are a resilient nexthop
//! group's. [`Ring::fail`] is done there by re-pointing the failed node's
//! member nexthops at its secondary's links (`PoolBed::redirect`): every one
//! of its buckets, and no other, then reaches the secondary. The kernel does
//! not let a program pick buckets otherwise: adding a member takes buckets
//! from every member, where [`Ring::take_buckets`] takes them from the
//! joiner's primary only — a joiner on the real router needs every node's
//! checkpoint first.
//!
//! A node that fails gives its buckets to its secondary, which holds its
//! flows' state; the node before it gets a new secondary (and syncs to it).
//! A node that joins becomes the secondary of the node before it, and only
//! once that node's checkpoint is synced to it does it take buckets — half of
//! that node's, whose flows it now holds.

use crate::replica::NodeId;

/// What a node must be told after a change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pairing {
    /// The node.
    pub node: NodeId,
    /// Its secondary (none when it is alone).
    pub secondary: Option<NodeId>,
    /// The nodes it watches: its secondary and the node it is secondary of.
    pub watch: Vec<NodeId>,
    /// Failed nodes whose flows are now its own.
    pub adopt: Vec<NodeId>,
}

/// The ring and the buckets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ring {
    /// Live nodes, in ring order.
    nodes: Vec<NodeId>,
    /// Bucket → node.
    buckets: Vec<NodeId>,
    /// Every node that was ever in the ring, in ring order.
    all: Vec<NodeId>,
    /// Bucket → the node it was first given to (its home).
    home: Vec<NodeId>,
}

impl Ring {
    /// `nodes` (in ring order) sharing `buckets` buckets round-robin.
    pub fn new(nodes: &[NodeId], buckets: usize) -> Ring {
        assert!(!nodes.is_empty(), "a pool has a node");
        let buckets: Vec<NodeId> = (0..buckets).map(|b| nodes[b % nodes.len()]).collect();
        Ring {
            nodes: nodes.to_vec(),
            all: nodes.to_vec(),
            home: buckets.clone(),
            buckets,
        }
    }

    /// Live nodes, in ring order.
    pub fn nodes(&self) -> &[NodeId] {
        &self.nodes
    }

    /// Bucket → node.
    pub fn buckets(&self) -> &[NodeId] {
        &self.buckets
    }

    /// The node a flow's packets go to (its primary).
    pub fn route(&self, flow_hash: u64) -> NodeId {
        self.buckets[(flow_hash % self.buckets.len() as u64) as usize]
    }

    fn at(&self, n: NodeId) -> usize {
        self.nodes
            .iter()
            .position(|&x| x == n)
            .expect("a live node")
    }

    /// The secondary of `n`: the next live node (none when alone).
    pub fn secondary_of(&self, n: NodeId) -> Option<NodeId> {
        (self.nodes.len() > 1).then(|| self.nodes[(self.at(n) + 1) % self.nodes.len()])
    }

    /// The node `n` is the secondary of.
    pub fn primary_of(&self, n: NodeId) -> Option<NodeId> {
        let l = self.nodes.len();
        (l > 1).then(|| self.nodes[(self.at(n) + l - 1) % l])
    }

    /// The pairing of `n` as the ring stands.
    pub fn pairing(&self, n: NodeId, adopt: Vec<NodeId>) -> Pairing {
        let mut watch: Vec<NodeId> = self
            .secondary_of(n)
            .into_iter()
            .chain(self.primary_of(n))
            .collect();
        watch.sort_unstable();
        watch.dedup();
        Pairing {
            node: n,
            secondary: self.secondary_of(n),
            watch,
            adopt,
        }
    }

    /// `n` failed: its buckets go to its secondary; returns the pairings that
    /// changed. Unknown or last nodes change nothing.
    pub fn fail(&mut self, n: NodeId) -> Vec<Pairing> {
        if !self.nodes.contains(&n) || self.nodes.len() == 1 {
            return Vec::new();
        }
        let heir = self.secondary_of(n).expect("two nodes or more");
        let before = self.primary_of(n).expect("two nodes or more");
        for b in self.buckets.iter_mut().filter(|b| **b == n) {
            *b = heir;
        }
        self.nodes.retain(|&x| x != n);
        let mut out = vec![self.pairing(heir, vec![n])];
        if before != heir {
            out.push(self.pairing(before, Vec::new()));
        }
        out
    }

    /// `n` joins after `after`: it becomes `after`'s secondary and takes no
    /// bucket yet; returns the pairings that changed.
    pub fn join(&mut self, n: NodeId, after: NodeId) -> Vec<Pairing> {
        if self.nodes.contains(&n) {
            return Vec::new();
        }
        let i = self.at(after);
        self.nodes.insert(i + 1, n);
        if !self.all.contains(&n) {
            let j = self.all.iter().position(|&x| x == after).expect("a node");
            self.all.insert(j + 1, n);
        }
        let mut out = vec![self.pairing(after, Vec::new()), self.pairing(n, Vec::new())];
        if let Some(next) = self.secondary_of(n) {
            if next != after {
                out.push(self.pairing(next, Vec::new()));
            }
        }
        out
    }

    /// `n`, which failed, is back: it takes its old place in the ring (after
    /// the nearest live node before it), so that its secondary is the node
    /// that took its buckets (or took them over since), and no bucket yet.
    /// Returns the pairings that changed; none for a live or unknown node.
    pub fn rejoin(&mut self, n: NodeId) -> Vec<Pairing> {
        if self.nodes.contains(&n) {
            return Vec::new();
        }
        let Some(at) = self.all.iter().position(|&x| x == n) else {
            return Vec::new();
        };
        let l = self.all.len();
        let after = (1..l)
            .map(|k| self.all[(at + l - k) % l])
            .find(|x| self.nodes.contains(x))
            .expect("a live node");
        self.join(n, after)
    }

    /// `n` holds the state of its home buckets' flows (its secondary synced
    /// it): they go back to it. Returns the buckets moved.
    pub fn hand_back(&mut self, n: NodeId) -> Vec<usize> {
        if !self.nodes.contains(&n) {
            return Vec::new();
        }
        let moved: Vec<usize> = (0..self.buckets.len())
            .filter(|&b| self.home[b] == n && self.buckets[b] != n)
            .collect();
        for &b in &moved {
            self.buckets[b] = n;
        }
        moved
    }

    /// `n` holds its primary's checkpoint: it takes every other bucket of
    /// that node. Returns the buckets moved.
    pub fn take_buckets(&mut self, n: NodeId) -> Vec<usize> {
        let Some(from) = self.primary_of(n) else {
            return Vec::new();
        };
        let theirs: Vec<usize> = (0..self.buckets.len())
            .filter(|&b| self.buckets[b] == from)
            .collect();
        let moved: Vec<usize> = theirs.into_iter().skip(1).step_by(2).collect();
        for &b in &moved {
            self.buckets[b] = n;
        }
        moved
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_nodes_buckets_go_to_its_secondary() {
        let mut r = Ring::new(&[0, 1, 2], 6);
        assert_eq!(r.secondary_of(0), Some(1));
        assert_eq!(r.primary_of(0), Some(2));
        let p = r.fail(1);
        assert_eq!(r.buckets(), &[0, 2, 2, 0, 2, 2]);
        assert_eq!(p[0].node, 2);
        assert_eq!(p[0].adopt, vec![1]);
        assert_eq!(p[1].node, 0);
        assert_eq!(p[1].secondary, Some(2));
        assert!(r.fail(7).is_empty());
    }

    #[test]
    fn a_failed_node_comes_back_to_its_place_and_takes_its_buckets_back() {
        let mut r = Ring::new(&[0, 1, 2, 3], 8);
        r.fail(1);
        r.fail(2);
        assert_eq!(r.buckets(), &[0, 3, 3, 3, 0, 3, 3, 3]);
        // 2 comes back after 0 (1 is still down): 0 → 2 → 3, and 3 holds
        // its buckets
        let p = r.rejoin(2);
        assert_eq!(r.nodes(), &[0, 2, 3]);
        assert_eq!(r.secondary_of(2), Some(3));
        assert_eq!(p[0].node, 0);
        assert_eq!(p[0].secondary, Some(2));
        assert!(r.rejoin(2).is_empty() && r.rejoin(9).is_empty());
        assert!(r.buckets().iter().all(|&b| b != 2), "none before the sync");
        assert_eq!(r.hand_back(2), vec![2, 6]);
        assert_eq!(r.buckets(), &[0, 3, 2, 3, 0, 3, 2, 3]);
        // then 1, between 0 and 2
        r.rejoin(1);
        assert_eq!(r.nodes(), &[0, 1, 2, 3]);
        assert_eq!(r.hand_back(1), vec![1, 5]);
        assert_eq!(r.buckets(), &[0, 1, 2, 3, 0, 1, 2, 3]);
        assert!(r.hand_back(1).is_empty());
    }

    #[test]
    fn a_joining_node_takes_buckets_only_when_told() {
        let mut r = Ring::new(&[0, 2], 8);
        let p = r.join(1, 0);
        assert_eq!(r.nodes(), &[0, 1, 2]);
        assert!(r.buckets().iter().all(|&b| b != 1));
        assert_eq!(p[0].secondary, Some(1));
        assert_eq!(p[1].secondary, Some(2));
        let moved = r.take_buckets(1);
        assert_eq!(moved, vec![2, 6]);
        assert_eq!(r.buckets(), &[0, 2, 1, 2, 0, 2, 1, 2]);
    }
}

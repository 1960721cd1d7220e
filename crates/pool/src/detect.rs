//! The pool controller's failure detector: it sends every node a heartbeat
//! each period; a node whose last answer is more than `missed` periods old is
//! down (reported once). Pure: time is an argument.

use crate::replica::NodeId;

/// Heartbeat answers per node, and who is down.
#[derive(Clone, Debug)]
pub struct Detector {
    period_ns: u64,
    missed: u32,
    /// Each node's last answer, ns (none before the first).
    last: Vec<Option<u64>>,
    down: Vec<bool>,
}

impl Detector {
    /// `nodes` nodes, heartbeats every `period_ns`, down after `missed`
    /// periods without an answer.
    pub fn new(nodes: usize, period_ns: u64, missed: u32) -> Detector {
        Detector {
            period_ns: period_ns.max(1),
            missed: missed.max(1),
            last: vec![None; nodes],
            down: vec![false; nodes],
        }
    }

    /// `node` answered at `now`.
    pub fn alive(&mut self, node: NodeId, now: u64) {
        if let Some(l) = self.last.get_mut(usize::from(node)) {
            *l = Some(l.map_or(now, |t| t.max(now)));
        }
    }

    /// `node`, found down, is back (it answered at `now`): it is watched
    /// again.
    pub fn revive(&mut self, node: NodeId, now: u64) {
        let i = usize::from(node);
        if let (Some(l), Some(d)) = (self.last.get_mut(i), self.down.get_mut(i)) {
            *l = Some(now);
            *d = false;
        }
    }

    /// The controller was away (blocked in a router change, descheduled)
    /// for `away_ns`: heartbeats it did not send cannot be missed, so every
    /// live node's last answer moves that much later (a node found down
    /// stays as it was: only its own answers revive it).
    pub fn excuse(&mut self, away_ns: u64) {
        for (l, _) in self.last.iter_mut().zip(&self.down).filter(|(_, d)| !**d) {
            if let Some(l) = l {
                *l = l.saturating_add(away_ns);
            }
        }
    }

    /// True once every node has answered (the pool is up).
    pub fn all_up(&self) -> bool {
        self.last.iter().all(Option::is_some)
    }

    /// When `node` last answered.
    pub fn last(&self, node: NodeId) -> Option<u64> {
        self.last.get(usize::from(node)).copied().flatten()
    }

    /// True for a node found down.
    pub fn is_down(&self, node: NodeId) -> bool {
        self.down.get(usize::from(node)).copied().unwrap_or(false)
    }

    /// Nodes found down at `now` that were not before (a node that never
    /// answered is starting, not down).
    pub fn check(&mut self, now: u64) -> Vec<NodeId> {
        let limit = self.period_ns * u64::from(self.missed);
        let mut out = Vec::new();
        for (i, (l, d)) in self.last.iter().zip(self.down.iter_mut()).enumerate() {
            if let Some(t) = l {
                if !*d && now.saturating_sub(*t) > limit {
                    *d = true;
                    out.push(i as NodeId);
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_silent_for_the_missed_periods_is_down_once() {
        let mut d = Detector::new(3, 1_000, 3);
        assert!(!d.all_up());
        for n in 0..3 {
            d.alive(n, 0);
        }
        assert!(d.all_up());
        // node 1 stops answering after 1 µs
        for t in (1_000..=10_000).step_by(1_000) {
            d.alive(0, t);
            d.alive(2, t);
            if t == 1_000 {
                d.alive(1, t);
            }
            let down = d.check(t);
            if t <= 4_000 {
                assert!(down.is_empty(), "at {t}: {down:?}");
            } else if t == 5_000 {
                assert_eq!(down, vec![1]);
            } else {
                assert!(down.is_empty(), "reported once");
            }
        }
        assert!(d.is_down(1) && !d.is_down(0));
        assert_eq!(d.last(1), Some(1_000));
        // an answer from the past moves nothing back
        d.alive(0, 3);
        assert_eq!(d.last(0), Some(10_000));
        // node 1 comes back, and is found down again when it stops again
        d.revive(1, 20_000);
        assert!(!d.is_down(1));
        for n in [0, 2] {
            d.alive(n, 24_000);
        }
        assert!(d.check(23_000).is_empty());
        assert_eq!(d.check(24_001), vec![1]);
    }

    #[test]
    fn time_the_controller_was_away_is_not_missed_beats() {
        let mut d = Detector::new(2, 1_000, 3);
        d.alive(0, 0);
        d.alive(1, 0);
        // the controller sent nothing from 1 µs to 9 µs
        d.excuse(8_000);
        assert!(d.check(10_000).is_empty());
        d.alive(0, 10_000);
        assert_eq!(d.check(11_001), vec![1]);
        d.excuse(50_000);
        assert_eq!(d.last(1), Some(8_000), "a node found down is not excused");
    }

    #[test]
    fn a_node_that_never_answered_is_starting_not_down() {
        let mut d = Detector::new(2, 1_000, 3);
        d.alive(0, 0);
        assert!(d.check(1_000_000).contains(&0));
        assert!(!d.is_down(1));
    }
}

//! The pool controller's failure detector: it sends every node a heartbeat
//! each round; a node is down when its process is gone — its heartbeat port
//! refuses (the kernel's port unreachable) twice in a row without an answer
//! between, or its parent saw it exit — or when it has been silent for `missed` rounds *and* as many
//! periods of time. Rounds count only heartbeats the controller sent: a
//! controller that was away (descheduled, blocked on a router change) misses
//! no beats for its nodes. Pure: time is an argument, and it only moves
//! forward (an answer never lies ahead of the time it is checked at).

/// A node of the pool.
pub type NodeId = u16;

/// Refusals in a row that mean a node's process is gone.
pub const REFUSALS: u32 = 2;

/// Why a node was found down.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Down {
    /// Its heartbeat port refused: no process listens there any more.
    Gone,
    /// It did not answer for `rounds` rounds.
    Silent {
        /// Rounds since its last answer.
        rounds: u64,
    },
}

#[derive(Clone, Debug, Default)]
struct Watch {
    /// Its last answer, ns (none before the first).
    last: Option<u64>,
    /// The round of its last answer.
    round: u64,
    /// Refusals since its last answer.
    refused: u32,
    down: bool,
}

/// Heartbeat answers per node, and who is down.
#[derive(Clone, Debug)]
pub struct Detector {
    period_ns: u64,
    missed: u32,
    round: u64,
    /// The latest time given.
    now: u64,
    nodes: Vec<Watch>,
}

impl Detector {
    /// `nodes` nodes, heartbeats every `period_ns`, down after `missed`
    /// rounds (and periods) without an answer.
    pub fn new(nodes: usize, period_ns: u64, missed: u32) -> Detector {
        Detector {
            period_ns: period_ns.max(1),
            missed: missed.max(1),
            round: 0,
            now: 0,
            nodes: vec![Watch::default(); nodes],
        }
    }

    fn at(&mut self, now: u64) -> u64 {
        self.now = self.now.max(now);
        self.now
    }

    /// A round of heartbeats went out at `now`.
    pub fn beat(&mut self, now: u64) {
        self.at(now);
        self.round += 1;
    }

    /// `node` answered at `now`.
    pub fn alive(&mut self, node: NodeId, now: u64) {
        let (now, round) = (self.at(now), self.round);
        if let Some(w) = self.nodes.get_mut(usize::from(node)) {
            w.last = Some(now);
            w.round = round;
            w.refused = 0;
        }
    }

    /// `node`'s heartbeat port refused (port unreachable).
    pub fn refused(&mut self, node: NodeId) {
        if let Some(w) = self.nodes.get_mut(usize::from(node)) {
            w.refused = w.refused.saturating_add(1);
        }
    }

    /// `node`'s process is known to have ended (its parent saw it exit).
    pub fn exited(&mut self, node: NodeId) {
        if let Some(w) = self.nodes.get_mut(usize::from(node)) {
            w.refused = w.refused.max(REFUSALS);
        }
    }

    /// `node`, found down, is back (it answered at `now`): it is watched
    /// again.
    pub fn revive(&mut self, node: NodeId, now: u64) {
        let (now, round) = (self.at(now), self.round);
        if let Some(w) = self.nodes.get_mut(usize::from(node)) {
            *w = Watch {
                last: Some(now),
                round,
                refused: 0,
                down: false,
            };
        }
    }

    /// True once every node has answered (the pool is up).
    pub fn all_up(&self) -> bool {
        self.nodes.iter().all(|w| w.last.is_some())
    }

    /// When `node` last answered.
    pub fn last(&self, node: NodeId) -> Option<u64> {
        self.nodes.get(usize::from(node)).and_then(|w| w.last)
    }

    /// How long `node`, not down, has been silent at `now` (none before its
    /// first answer, or while down).
    pub fn silence(&self, node: NodeId, now: u64) -> Option<u64> {
        let w = self.nodes.get(usize::from(node))?;
        let last = w.last.filter(|_| !w.down)?;
        Some(now.max(self.now).saturating_sub(last))
    }

    /// True for a node found down.
    pub fn is_down(&self, node: NodeId) -> bool {
        self.nodes.get(usize::from(node)).is_some_and(|w| w.down)
    }

    /// Nodes found down at `now` that were not before, and why (a node that
    /// never answered is starting, not down).
    pub fn check(&mut self, now: u64) -> Vec<(NodeId, Down)> {
        let now = self.at(now);
        let limit = self.period_ns.saturating_mul(u64::from(self.missed));
        let (round, missed) = (self.round, u64::from(self.missed));
        let mut out = Vec::new();
        for (i, w) in self.nodes.iter_mut().enumerate() {
            let Some(last) = w.last else { continue };
            if w.down {
                continue;
            }
            let rounds = round - w.round;
            let why = if w.refused >= REFUSALS {
                Some(Down::Gone)
            } else if rounds >= missed && now - last >= limit {
                Some(Down::Silent { rounds })
            } else {
                None
            };
            if let Some(why) = why {
                w.down = true;
                out.push((i as NodeId, why));
            }
        }
        out
    }
}

/// When heartbeats are due: every `period_ns`, from the first call on.
#[derive(Clone, Debug)]
pub struct Beats {
    period_ns: u64,
    next: u64,
}

impl Beats {
    /// Beats every `period_ns`.
    pub fn new(period_ns: u64) -> Beats {
        Beats {
            period_ns: period_ns.max(1),
            next: 0,
        }
    }

    /// True if a beat is due at `now` (the next is then a period later).
    pub fn due(&mut self, now: u64) -> bool {
        if now < self.next {
            return false;
        }
        self.next = now + self.period_ns;
        true
    }
}

/// One peer of a pair watched over heartbeats — a node's secondary (it
/// answers this node's beats) or its primary (it beats this node): lost
/// after `missed` of this node's rounds *and* as many periods without word
/// from it (a node descheduled for a while loses no peer for it), back at
/// its first word after. Watched from its first word on. Both the real
/// nodes' replication ports and the simulated replicas keep these.
#[derive(Clone, Debug)]
pub struct PeerWatch {
    det: Detector,
    lost: u64,
}

impl PeerWatch {
    /// A peer lost after `missed` rounds (and periods of `period_ns`)
    /// without word.
    pub fn new(period_ns: u64, missed: u32) -> PeerWatch {
        PeerWatch {
            det: Detector::new(1, period_ns, missed),
            lost: 0,
        }
    }

    /// A round passed at `now` (this node sent its beats).
    pub fn round(&mut self, now: u64) {
        self.det.beat(now);
    }

    /// Word from the peer at `now`: true if it was lost and is back.
    pub fn heard(&mut self, now: u64) -> bool {
        if self.det.is_down(0) {
            self.det.revive(0, now);
            true
        } else {
            self.det.alive(0, now);
            false
        }
    }

    /// True if the peer is found lost at `now` and was not before.
    pub fn check(&mut self, now: u64) -> bool {
        let lost = !self.det.check(now).is_empty();
        self.lost += u64::from(lost);
        lost
    }

    /// True while the peer is lost.
    pub fn is_lost(&self) -> bool {
        self.det.is_down(0)
    }

    /// Times the peer was found lost.
    pub fn times_lost(&self) -> u64 {
        self.lost
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Rounds every µs from `from` to `to`; `answer(t)` says who answers.
    fn rounds(d: &mut Detector, from: u64, to: u64, answer: impl Fn(u64) -> Vec<NodeId>) {
        for t in (from..=to).step_by(1_000) {
            d.beat(t);
            for n in answer(t) {
                d.alive(n, t);
            }
        }
    }

    #[test]
    fn a_peer_is_lost_after_the_missed_rounds_and_back_at_its_first_word() {
        let mut b = Beats::new(1_000);
        let mut w = PeerWatch::new(1_000, 3);
        // not watched before its first word
        for t in (0..10_000).step_by(500) {
            if b.due(t) {
                w.round(t);
            }
            assert!(!w.check(t));
        }
        w.heard(10_000);
        let mut lost_at = None;
        for t in (10_000..20_000).step_by(500) {
            if b.due(t) {
                w.round(t);
            }
            if w.check(t) {
                assert!(lost_at.is_none(), "found lost once");
                lost_at = Some(t);
            }
        }
        // three rounds and three periods after its last word
        assert_eq!(lost_at, Some(13_000));
        assert!(w.is_lost());
        assert!(w.heard(20_000), "back");
        assert!(!w.heard(20_500));
        assert!(!w.is_lost());
        assert_eq!(w.times_lost(), 1);
        // a node away for long (no rounds) loses no peer for it
        assert!(!w.check(90_000));
    }

    #[test]
    fn a_node_silent_for_the_missed_rounds_is_down_once() {
        let mut d = Detector::new(3, 1_000, 3);
        assert!(!d.all_up());
        for n in 0..3 {
            d.alive(n, 0);
        }
        assert!(d.all_up());
        // node 1 stops answering after 1 µs
        for t in (1_000..=10_000).step_by(1_000) {
            d.beat(t);
            d.alive(0, t);
            d.alive(2, t);
            if t == 1_000 {
                d.alive(1, t);
            }
            let down = d.check(t);
            if t < 4_000 {
                assert!(down.is_empty(), "at {t}: {down:?}");
            } else if t == 4_000 {
                assert_eq!(down, vec![(1, Down::Silent { rounds: 3 })]);
            } else {
                assert!(down.is_empty(), "reported once");
            }
        }
        assert!(d.is_down(1) && !d.is_down(0));
        assert_eq!(d.last(1), Some(1_000));
        // an answer from the past is taken at the detector's time: never
        // behind, never ahead
        d.alive(0, 3);
        assert_eq!(d.last(0), Some(10_000));
        // node 1 comes back, and is found down again when it stops again
        d.revive(1, 20_000);
        assert!(!d.is_down(1));
        rounds(&mut d, 21_000, 22_000, |_| vec![0, 2]);
        assert!(d.check(22_000).is_empty());
        d.beat(23_000);
        assert_eq!(d.check(23_000), vec![(1, Down::Silent { rounds: 3 })]);
    }

    #[test]
    fn a_controller_that_sent_nothing_misses_no_beats() {
        let mut d = Detector::new(2, 1_000, 3);
        d.alive(0, 0);
        d.alive(1, 0);
        d.beat(1_000);
        // the controller sent nothing from 1 µs to 50 µs: one round, not 50
        d.beat(50_000);
        d.alive(0, 50_000);
        assert!(d.check(50_500).is_empty());
        d.beat(51_000);
        assert_eq!(d.check(51_000), vec![(1, Down::Silent { rounds: 3 })]);
        // and what it reports never lies ahead of when it found it
        assert!(d.last(1).unwrap() <= 51_000);
    }

    #[test]
    fn rounds_close_together_are_not_enough_time() {
        // three rounds in 300 ns: silent for 3 rounds but not 3 periods
        let mut d = Detector::new(1, 1_000, 3);
        d.alive(0, 0);
        for t in [100, 200, 300] {
            d.beat(t);
        }
        assert!(d.check(300).is_empty());
        d.beat(3_000);
        assert_eq!(d.check(3_000), vec![(0, Down::Silent { rounds: 4 })]);
    }

    #[test]
    fn a_port_that_refuses_twice_is_a_process_gone() {
        let mut d = Detector::new(2, 1_000, 100);
        d.alive(0, 0);
        d.alive(1, 0);
        d.beat(1_000);
        d.refused(1);
        assert!(d.check(1_000).is_empty(), "one refusal is not enough");
        // an answer between refusals starts the count again
        d.alive(1, 1_500);
        d.beat(2_000);
        d.refused(1);
        assert!(d.check(2_000).is_empty());
        d.beat(3_000);
        d.refused(1);
        assert_eq!(d.check(3_000), vec![(1, Down::Gone)]);
        // a node found down is reported once, whatever it says next
        d.refused(1);
        assert!(d.check(4_000).is_empty());
    }

    #[test]
    fn a_process_seen_to_exit_is_gone() {
        let mut d = Detector::new(2, 1_000, 100);
        d.alive(0, 0);
        d.alive(1, 0);
        d.exited(0);
        assert_eq!(d.check(10), vec![(0, Down::Gone)]);
    }

    #[test]
    fn a_node_that_never_answered_is_starting_not_down() {
        let mut d = Detector::new(2, 1_000, 3);
        d.alive(0, 0);
        rounds(&mut d, 1_000, 1_000_000, |_| vec![]);
        let down = d.check(1_000_000);
        assert_eq!(down.len(), 1);
        assert_eq!(down[0].0, 0);
        d.refused(1);
        d.refused(1);
        assert!(d.check(1_000_001).is_empty());
        assert!(!d.is_down(1));
    }
}

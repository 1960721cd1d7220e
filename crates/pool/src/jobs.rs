//! The pool controller's bulk syncs (Sirius §3.2), as a pure machine: which
//! node copies its table to which, and what follows. A node carries out one
//! bulk-sync order at a time, so a sync waits (*queued*) while its source
//! runs another; a running sync whose source says it is done either ends —
//! the source is told to stop copying — or, when something must happen
//! first (the synced node takes its buckets back, a spare joins the router's
//! groups), *holds*: the source keeps copying every change until the driver
//! releases it.
//!
//! Inputs are calls ([`Jobs::add`], [`Jobs::status`], [`Jobs::release`],
//! [`Jobs::down`], [`Jobs::refused`]); outputs are [`Order`]s to poll and
//! carry out. `flowshift pool run` carries them out as messages to real
//! nodes, `pool sim` as calls on simulated replicas: the same machine.

use std::collections::VecDeque;

use crate::replica::NodeId;

/// What follows a sync.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Then {
    /// Nothing: the source stops copying (its new secondary is whole).
    Stop,
    /// The synced node takes its buckets back; the source copies until then.
    HandBack(NodeId),
    /// Once every source has synced it, the node joins; each copies until
    /// then.
    Join(NodeId),
}

impl Then {
    /// The sync's purpose, as a report says it.
    pub fn purpose(self) -> &'static str {
        match self {
            Then::Stop => "new-secondary",
            Then::HandBack(_) => "hand-back",
            Then::Join(_) => "join",
        }
    }
}

/// Where a sync is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    /// Its source carries out another order first.
    Queued,
    /// Ordered.
    Running,
    /// Synced; its source still copies changes until released.
    Holding,
}

/// A sync.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Job {
    /// Its number (the n-th sync added).
    pub id: usize,
    /// The node that copies.
    pub from: NodeId,
    /// The node copied to.
    pub to: NodeId,
    /// What follows.
    pub then: Then,
    /// Where it is.
    pub state: State,
}

/// What the driver must do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Order {
    /// Tell `from` to copy its table to `to` (sync `id`); if it does not
    /// take the order, say [`Jobs::refused`].
    Start {
        /// The sync.
        id: usize,
        /// The source.
        from: NodeId,
        /// The node synced.
        to: NodeId,
    },
    /// Tell `from` to stop copying.
    Stop {
        /// The source.
        from: NodeId,
    },
}

/// The syncs under way.
#[derive(Clone, Debug, Default)]
pub struct Jobs {
    jobs: Vec<Job>,
    added: usize,
    orders: VecDeque<Order>,
}

impl Jobs {
    /// No syncs.
    pub fn new() -> Jobs {
        Jobs::default()
    }

    /// `from` is to copy its table to `to`, then `then`: ordered now, or
    /// once `from` is done with the syncs before it. Returns its number.
    pub fn add(&mut self, from: NodeId, to: NodeId, then: Then) -> usize {
        let id = self.added;
        self.added += 1;
        self.jobs.push(Job {
            id,
            from,
            to,
            then,
            state: State::Queued,
        });
        self.start_ready();
        id
    }

    /// Orders the queued syncs whose source is free.
    fn start_ready(&mut self) {
        for k in 0..self.jobs.len() {
            let j = self.jobs[k];
            let busy = self
                .jobs
                .iter()
                .any(|o| o.from == j.from && o.state != State::Queued);
            if j.state == State::Queued && !busy {
                self.jobs[k].state = State::Running;
                self.orders.push_back(Order::Start {
                    id: j.id,
                    from: j.from,
                    to: j.to,
                });
            }
        }
    }

    /// Sync `id`'s source did not take its order: the sync is dropped.
    pub fn refused(&mut self, id: usize) {
        self.jobs.retain(|j| j.id != id);
        self.start_ready();
    }

    /// `from` says how its sync to `to` goes: the running sync it is, if
    /// any, and whether it has just finished (it then ends, or holds).
    pub fn status(&mut self, from: NodeId, to: NodeId, done: bool) -> Option<(Job, bool)> {
        let k = self
            .jobs
            .iter()
            .position(|j| j.state == State::Running && j.from == from && j.to == to)?;
        let j = self.jobs[k];
        if !done {
            return Some((j, false));
        }
        match j.then {
            Then::Stop => {
                self.jobs.remove(k);
                self.orders.push_back(Order::Stop { from });
                self.start_ready();
            }
            Then::HandBack(_) | Then::Join(_) => self.jobs[k].state = State::Holding,
        }
        Some((j, true))
    }

    /// Ends the syncs that waited for `then`: their sources stop copying.
    pub fn release(&mut self, then: Then) {
        let mut stop = Vec::new();
        self.jobs.retain(|j| {
            let mine = j.then == then;
            if mine && j.state != State::Queued {
                stop.push(j.from);
            }
            !mine
        });
        self.orders
            .extend(stop.into_iter().map(|from| Order::Stop { from }));
        self.start_ready();
    }

    /// Node `d` is down: its syncs end with it, those to it stop, and a
    /// spare's join it was a source of no longer waits for it.
    pub fn down(&mut self, d: NodeId) {
        let mut stop = Vec::new();
        self.jobs.retain(|j| {
            let ends = j.from == d || j.to == d;
            if ends && j.from != d && j.state != State::Queued {
                stop.push(j.from);
            }
            !ends
        });
        self.orders
            .extend(stop.into_iter().map(|from| Order::Stop { from }));
        self.start_ready();
    }

    /// The syncs that wait for `then`: none (no sync), or whether all of
    /// them hold (done).
    pub fn synced(&self, then: Then) -> Option<bool> {
        let mut mine = self.jobs.iter().filter(|j| j.then == then).peekable();
        mine.peek()?;
        Some(mine.all(|j| j.state == State::Holding))
    }

    /// The sources of the running syncs (to ask how they go).
    pub fn running(&self) -> Vec<(NodeId, NodeId)> {
        self.jobs
            .iter()
            .filter(|j| j.state == State::Running)
            .map(|j| (j.from, j.to))
            .collect()
    }

    /// The syncs under way.
    pub fn jobs(&self) -> &[Job] {
        &self.jobs
    }

    /// The next order to carry out.
    pub fn poll_order(&mut self) -> Option<Order> {
        self.orders.pop_front()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn orders(j: &mut Jobs) -> Vec<Order> {
        std::iter::from_fn(|| j.poll_order()).collect()
    }

    #[test]
    fn a_source_runs_one_sync_at_a_time_and_a_finished_one_stops_it() {
        let mut j = Jobs::new();
        assert_eq!(j.add(0, 1, Then::Stop), 0);
        assert_eq!(j.add(0, 2, Then::Stop), 1);
        assert_eq!(j.add(3, 1, Then::Stop), 2);
        assert_eq!(
            orders(&mut j),
            vec![
                Order::Start {
                    id: 0,
                    from: 0,
                    to: 1
                },
                Order::Start {
                    id: 2,
                    from: 3,
                    to: 1
                }
            ]
        );
        // a status of a sync that is not running is not one
        assert_eq!(j.status(0, 2, true), None);
        let (job, done) = j.status(0, 1, false).unwrap();
        assert_eq!((job.id, done), (0, false));
        assert!(orders(&mut j).is_empty());
        let (job, done) = j.status(0, 1, true).unwrap();
        assert_eq!((job.id, done), (0, true));
        assert_eq!(
            orders(&mut j),
            vec![
                Order::Stop { from: 0 },
                Order::Start {
                    id: 1,
                    from: 0,
                    to: 2
                }
            ]
        );
        // a refused order drops its sync
        j.refused(1);
        assert_eq!(j.running(), vec![(3, 1)]);
    }

    #[test]
    fn a_hand_back_holds_its_source_copying_until_released() {
        let mut j = Jobs::new();
        j.add(2, 0, Then::HandBack(0));
        orders(&mut j);
        assert_eq!(j.synced(Then::HandBack(0)), Some(false));
        j.status(2, 0, true).unwrap();
        assert!(orders(&mut j).is_empty(), "still copying");
        assert_eq!(j.synced(Then::HandBack(0)), Some(true));
        // the source is busy while it holds
        j.add(2, 1, Then::Stop);
        assert!(orders(&mut j).is_empty());
        j.release(Then::HandBack(0));
        assert_eq!(
            orders(&mut j),
            vec![
                Order::Stop { from: 2 },
                Order::Start {
                    id: 1,
                    from: 2,
                    to: 1
                }
            ]
        );
        assert_eq!(j.synced(Then::HandBack(0)), None);
    }

    #[test]
    fn a_join_waits_for_every_source_and_a_node_down_ends_its_syncs() {
        let mut j = Jobs::new();
        for from in 0..3 {
            j.add(from, 5, Then::Join(5));
        }
        j.add(1, 2, Then::Stop);
        orders(&mut j);
        j.status(0, 5, true);
        j.status(2, 5, true);
        assert_eq!(j.synced(Then::Join(5)), Some(false));
        // node 1 goes down: its syncs end; the join waits for no one else
        j.down(1);
        assert!(orders(&mut j).is_empty());
        assert_eq!(j.synced(Then::Join(5)), Some(true));
        // the joiner goes down: its sources stop
        j.down(5);
        let mut o = orders(&mut j);
        o.sort_by_key(|o| format!("{o:?}"));
        assert_eq!(o, vec![Order::Stop { from: 0 }, Order::Stop { from: 2 }]);
        assert!(j.jobs().is_empty());
    }

    proptest! {
        /// Whatever happens, a source never runs two syncs at once, and
        /// every sync started is stopped exactly when it leaves running or
        /// holding (except a refused one).
        #[test]
        fn one_order_per_source_and_every_start_is_stopped(
            ops in proptest::collection::vec((0u8..5, 0u16..4, 0u16..4), 1..120)
        ) {
            let mut j = Jobs::new();
            let mut active: std::collections::HashMap<NodeId, usize> = Default::default();
            for (op, a, b) in ops {
                match op {
                    0 if a != b => {
                        j.add(a, b, if b % 2 == 0 { Then::Stop } else { Then::HandBack(b) });
                    }
                    1 => {
                        j.status(a, b, true);
                    }
                    2 => j.release(Then::HandBack(b)),
                    3 => j.down(a),
                    _ => {
                        if let Some(job) = j.jobs().iter().find(|x| x.state == State::Running && x.from == a) {
                            let id = job.id;
                            j.refused(id);
                            active.remove(&a);
                        }
                    }
                }
                while let Some(o) = j.poll_order() {
                    match o {
                        Order::Start { id, from, .. } => {
                            prop_assert!(active.insert(from, id).is_none(), "{from} runs two");
                        }
                        Order::Stop { from } => {
                            prop_assert!(active.remove(&from).is_some(), "{from} stopped idle");
                        }
                    }
                }
                // a source down is no longer tracked by the driver
                if op == 3 {
                    active.remove(&a);
                }
                for x in j.jobs().iter().filter(|x| x.state != State::Queued) {
                    prop_assert_eq!(active.get(&x.from), Some(&x.id));
                }
            }
        }
    }
}

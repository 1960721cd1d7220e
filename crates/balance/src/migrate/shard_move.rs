//! The shard move: hand a shard (its flow table and NF shard-local state) from one
//! working core to another while traffic flows, without reordering a flow's packets,
//! losing a packet, or letting two cores touch the shard at once.
//!
//! Protocol (one move of shard `s` from core A to core B):
//!
//! 1. **Controller** ([`Mover::begin`]): rewrite every indirection-table entry of `s`
//!    to B's queue and bump the table version to `v`. From now on the NIC model
//!    steers `s` to B.
//! 2. **B** holds every packet of a shard it does not own (or whose held queue is not
//!    yet drained) in a per-shard queue, in arrival order ([`WorkerMoves::on_packet`]).
//!    No flag needs to be set beforehand: a packet of `s` can reach B only after the
//!    rewrite, and B does not own `s` until step 5.
//! 3. **Controller** ([`Mover::on_feeder_seen`]): once the NIC model acknowledges
//!    version `v` — after which no packet steered by the old table can still be on its
//!    way — tell A to release `s` ([`Command::Release`]).
//! 4. **A** ([`WorkerMoves::on_release`]): note its queue's length at that moment
//!    (queue *cycling*): every packet of `s` steered to A is among those. A keeps
//!    processing normally; once it has taken that many packets from its queue
//!    ([`WorkerMoves::on_dequeued`]), it hands the shard to B (the shard object is sent
//!    to B: ownership moves with it).
//! 5. **B** ([`WorkerMoves::on_shard`]): owns `s`, processes the held packets of `s`
//!    first, in order, then continues; it reports the arrival to the controller
//!    ([`Mover::on_arrived`]).
//!
//! Why order holds: a flow's packets steered before the rewrite are in A's queue,
//! which A processes in FIFO order before handing over; those steered after are in
//! B's held queue, FIFO, processed only after the hand-over and before any later
//! packet of `s`. Why nothing is lost: every packet is either processed on arrival
//! or held, and held packets are processed when their shard arrives. Why one owner:
//! the shard is a value that is moved, not shared.
//!
//! A shard already moving cannot be moved again until it has arrived
//! ([`MoveError::InFlight`]).

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use crate::{CoreId, ShardId, Version};

/// What the controller asks the runtime to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
    /// Rewrite the indirection-table entries of `shard` to `to`'s queue, then publish
    /// table version `version`.
    Rewrite {
        /// The shard.
        shard: ShardId,
        /// The new owner.
        to: CoreId,
        /// The table version after the rewrite.
        version: Version,
    },
    /// Tell core `from` to release `shard` to `to` (step 3).
    Release {
        /// The current owner.
        from: CoreId,
        /// The shard.
        shard: ShardId,
        /// The new owner.
        to: CoreId,
    },
}

/// A move that cannot start.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MoveError {
    /// The shard is still moving.
    #[error("shard {0} is still moving")]
    InFlight(ShardId),
    /// Source and destination are the same core.
    #[error("shard {0}: source and destination are the same core")]
    SameCore(ShardId),
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Phase {
    /// Waiting for the NIC model to acknowledge the rewrite.
    AwaitFeeder(Version),
    /// A has been told to release; waiting for B to receive the shard.
    Releasing,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Move {
    from: CoreId,
    to: CoreId,
    phase: Phase,
}

/// The controller's side of shard moves.
#[derive(Clone, Debug, Default)]
pub struct Mover {
    version: Version,
    in_flight: BTreeMap<ShardId, Move>,
    completed: u64,
}

impl Mover {
    /// A mover whose table is at version `version`.
    pub fn new(version: Version) -> Mover {
        Mover {
            version,
            ..Mover::default()
        }
    }

    /// Starts moving `shard` from `from` to `to` (step 1).
    pub fn begin(
        &mut self,
        shard: ShardId,
        from: CoreId,
        to: CoreId,
    ) -> Result<Command, MoveError> {
        crate::probe::hit(crate::probe::Probe::MoverBegin);
        if from == to {
            return Err(MoveError::SameCore(shard));
        }
        if self.in_flight.contains_key(&shard) {
            return Err(MoveError::InFlight(shard));
        }
        self.version += 1;
        self.in_flight.insert(
            shard,
            Move {
                from,
                to,
                phase: Phase::AwaitFeeder(self.version),
            },
        );
        Ok(Command::Rewrite {
            shard,
            to,
            version: self.version,
        })
    }

    /// The NIC model has steered with table version `seen` or later (step 3).
    pub fn on_feeder_seen(&mut self, seen: Version) -> Vec<Command> {
        let mut out = Vec::new();
        for (s, m) in self.in_flight.iter_mut() {
            if let Phase::AwaitFeeder(v) = m.phase {
                if v <= seen {
                    m.phase = Phase::Releasing;
                    out.push(Command::Release {
                        from: m.from,
                        shard: *s,
                        to: m.to,
                    });
                }
            }
        }
        out
    }

    /// The new owner has received `shard` (step 5). Returns false for a shard that
    /// was not moving (a protocol violation the caller should report).
    pub fn on_arrived(&mut self, shard: ShardId) -> bool {
        match self.in_flight.get(&shard) {
            Some(m) if m.phase == Phase::Releasing => {
                self.in_flight.remove(&shard);
                self.completed += 1;
                true
            }
            _ => false,
        }
    }

    /// True while `shard` is moving.
    pub fn is_moving(&self, shard: ShardId) -> bool {
        self.in_flight.contains_key(&shard)
    }

    /// Moves under way.
    pub fn in_flight(&self) -> usize {
        self.in_flight.len()
    }

    /// Moves completed.
    pub fn completed(&self) -> u64 {
        self.completed
    }

    /// The current table version.
    pub fn version(&self) -> Version {
        self.version
    }
}

/// What a worker should do with a packet it took from its queue.
#[derive(Debug, PartialEq, Eq)]
pub enum Received<P> {
    /// Run the chain on it now.
    Process(P),
    /// It was held (its shard is not here yet, or earlier packets of it are held).
    Held,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Outgoing {
    shard: ShardId,
    to: CoreId,
    remaining: u64,
}

/// A worker's side of shard moves, generic over the packet type. The worker's
/// shard objects themselves live in the runtime; this tracks which it owns, what it
/// holds and what it must hand over when.
#[derive(Clone, Debug)]
pub struct WorkerMoves<P> {
    owned: BTreeSet<ShardId>,
    held: BTreeMap<ShardId, VecDeque<P>>,
    outgoing: Vec<Outgoing>,
    held_total: u64,
    /// By shard: owned and not held, so its packets are processed at once
    /// (the per-packet question, answered without a tree search).
    direct: Vec<bool>,
}

impl<P> WorkerMoves<P> {
    /// A worker that starts owning `shards`.
    pub fn new(shards: impl IntoIterator<Item = ShardId>) -> WorkerMoves<P> {
        let mut m = WorkerMoves {
            owned: shards.into_iter().collect(),
            held: BTreeMap::new(),
            outgoing: Vec::new(),
            held_total: 0,
            direct: Vec::new(),
        };
        for s in m.owned.clone() {
            m.set_direct(s);
        }
        m
    }

    /// Recomputes `direct` for `shard` from `owned` and `held`.
    fn set_direct(&mut self, shard: ShardId) {
        let i = usize::from(shard);
        if self.direct.len() <= i {
            self.direct.resize(i + 1, false);
        }
        self.direct[i] = self.owned.contains(&shard) && !self.held.contains_key(&shard);
    }

    /// True if a packet of `shard` taken now is processed at once (the
    /// shard is owned and none of its packets are held):
    /// [`take_packet`](Self::take_packet) would hand it to `process`.
    #[inline]
    pub fn runs_directly(&self, shard: ShardId) -> bool {
        self.direct
            .get(usize::from(shard))
            .copied()
            .unwrap_or(false)
    }

    /// True if this worker owns `shard` now.
    pub fn owns(&self, shard: ShardId) -> bool {
        self.owned.contains(&shard)
    }

    /// The shards owned.
    pub fn owned(&self) -> impl Iterator<Item = ShardId> + '_ {
        self.owned.iter().copied()
    }

    /// A packet of `shard` taken from the queue (step 2): process it, or hold it.
    pub fn on_packet(&mut self, shard: ShardId, p: P) -> Received<P> {
        let mut run = None;
        if self.take_packet(shard, p, |p| run = Some(p)) {
            Received::Process(run.expect("a processed packet was given"))
        } else {
            Received::Held
        }
    }

    /// [`on_packet`](Self::on_packet) with the packet handed to `process`
    /// when it is processed (e.g. pushed onto the burst, moved once); true
    /// then, false when it is held.
    #[inline]
    pub fn take_packet(&mut self, shard: ShardId, p: P, process: impl FnOnce(P)) -> bool {
        crate::probe::hit(crate::probe::Probe::OnPacket);
        if self.runs_directly(shard) {
            process(p);
            return true;
        }
        self.held.entry(shard).or_default().push_back(p);
        self.held_total += 1;
        self.set_direct(shard);
        false
    }

    /// The controller asks to release `shard` to `to` (step 4); `queue_len` is the
    /// number of packets in this worker's queue now. Returns the hand-over at once
    /// when the queue is empty.
    pub fn on_release(
        &mut self,
        shard: ShardId,
        to: CoreId,
        queue_len: u64,
    ) -> Option<(ShardId, CoreId)> {
        assert!(
            self.owned.contains(&shard),
            "releasing shard {shard} that this worker does not own"
        );
        if queue_len == 0 {
            self.owned.remove(&shard);
            self.set_direct(shard);
            return Some((shard, to));
        }
        self.outgoing.push(Outgoing {
            shard,
            to,
            remaining: queue_len,
        });
        None
    }

    /// One packet was taken from the queue *and processed or held*. Returns the
    /// shards to hand over now (their cycle is complete), in release order.
    pub fn on_dequeued(&mut self) -> Vec<(ShardId, CoreId)> {
        let mut done = Vec::new();
        for o in &mut self.outgoing {
            o.remaining -= 1;
        }
        self.outgoing.retain(|o| {
            if o.remaining == 0 {
                done.push((o.shard, o.to));
                false
            } else {
                true
            }
        });
        for (s, _) in &done {
            self.owned.remove(s);
            self.set_direct(*s);
        }
        done
    }

    /// `shard` arrived (step 5): this worker owns it; returns its held packets, in
    /// arrival order, to process before anything else of the shard.
    pub fn on_shard(&mut self, shard: ShardId) -> VecDeque<P> {
        crate::probe::hit(crate::probe::Probe::OnShard);
        self.owned.insert(shard);
        let q = self.held.remove(&shard).unwrap_or_default();
        self.held_total -= q.len() as u64;
        self.set_direct(shard);
        q
    }

    /// Packets held now.
    pub fn held(&self) -> u64 {
        self.held_total
    }

    /// True while `shard` is being released (its cycle is not complete).
    pub fn is_releasing(&self, shard: ShardId) -> bool {
        self.outgoing.iter().any(|o| o.shard == shard)
    }

    /// Releases not yet complete.
    pub fn releasing(&self) -> usize {
        self.outgoing.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controller_sequence() {
        let mut m = Mover::new(0);
        assert_eq!(
            m.begin(3, 0, 1),
            Ok(Command::Rewrite {
                shard: 3,
                to: 1,
                version: 1
            })
        );
        assert_eq!(m.begin(3, 1, 0), Err(MoveError::InFlight(3)));
        assert_eq!(m.begin(4, 2, 2), Err(MoveError::SameCore(4)));
        assert!(
            m.on_feeder_seen(0).is_empty(),
            "not before the feeder saw the rewrite"
        );
        assert_eq!(
            m.on_feeder_seen(1),
            vec![Command::Release {
                from: 0,
                shard: 3,
                to: 1
            }]
        );
        assert!(m.on_feeder_seen(5).is_empty(), "released once");
        assert!(m.on_arrived(3));
        assert!(!m.on_arrived(3));
        assert_eq!((m.in_flight(), m.completed()), (0, 1));
    }

    #[test]
    fn worker_cycle_then_hand_over() {
        let mut a: WorkerMoves<u32> = WorkerMoves::new([3, 4]);
        let mut b: WorkerMoves<u32> = WorkerMoves::new([]);
        // B already receives packets of 3 (the table was rewritten): held
        assert_eq!(b.on_packet(3, 100), Received::Held);
        assert_eq!(b.on_packet(3, 101), Received::Held);
        // A has 2 packets in its queue when told to release
        assert_eq!(a.on_release(3, 1, 2), None);
        assert_eq!(a.on_packet(3, 1), Received::Process(1));
        assert!(a.on_dequeued().is_empty());
        assert_eq!(a.on_packet(4, 2), Received::Process(2));
        assert_eq!(a.on_dequeued(), vec![(3, 1)]);
        assert!(!a.owns(3) && a.owns(4));
        assert_eq!(b.on_shard(3), VecDeque::from([100, 101]));
        assert_eq!(b.on_packet(3, 102), Received::Process(102));
        assert_eq!(b.held(), 0);
    }

    #[test]
    fn take_packet_hands_over_only_what_runs_in_order() {
        let mut b: WorkerMoves<u32> = WorkerMoves::new([4]);
        let mut run = Vec::new();
        // shard 3 is arriving: its packets are held, the closure never sees them
        assert!(!b.take_packet(3, 100, |p| run.push(p)));
        assert!(b.take_packet(4, 1, |p| run.push(p)));
        assert!(!b.take_packet(3, 101, |p| run.push(p)));
        assert!(b.take_packet(4, 2, |p| run.push(p)));
        assert_eq!(run, vec![1, 2]);
        assert_eq!(b.held(), 2);
        assert_eq!(b.on_shard(3), VecDeque::from([100, 101]));
        assert!(b.take_packet(3, 102, |p| run.push(p)));
        assert_eq!(run, vec![1, 2, 102]);
        assert_eq!(b.held(), 0);
    }
}

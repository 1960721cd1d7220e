//! Flow offload (Dyssect §II-B, Algorithms 2–3): a working core sends a share r_s of
//! shard s's flows to its offloading core, and takes them back, without reordering a
//! flow's packets and with one core at a time working on a flow's state. This is the
//! working core's side, as a pure state machine; the offloading core only processes
//! its queue in FIFO order and answers recalls.
//!
//! **Which flows.** A flow is offloaded when its *slice* — 16 stable bits of its flow
//! key's hash, `0..RATIO_ONE` — is below r_s (in units of `1 / RATIO_ONE`), so a
//! flow's choice does not change while r_s does not. Priority-class packets and new
//! flows (no entry yet: only the owner inserts) are processed by the working core; a
//! flow whose NFs need shard-local state for the packet (the chain says so) too.
//!
//! **Lease.** The working core looks the packet up in the shard's table first (as in
//! Dyssect, the packet then carries its entry). On the first offloaded packet of a
//! flow, the entry's NF slots are *detached* and travel with the packet through the
//! offload ring (an SPSC FIFO); the entry stays in the owner's table, pinned — still
//! found by lookups, never freed, expired or evicted. Later packets of the flow
//! follow through the same ring. The offloading core keeps the detached state and is
//! the only core that touches it.
//!
//! **Recall** (the queue swap and waits of Algorithm 3). When r_s drops (flows with
//! slices in [r_new, r_old) come back), when the offloading core changes, before a
//! shard is handed over to another working core, for flows that went idle, and when
//! the run ends, the working core pushes a *recall marker* with a ticket into the
//! ring behind every packet it has sent, and marks the recalled flows *returning*.
//! Packets of returning flows wait in the *pending queue* (Alg. 2 lines 11–13). The
//! offloading core reaches the marker only after processing every earlier packet,
//! and sends the states back; the working core re-attaches them and processes the
//! flows' pending packets before any later packet ([`WorkingOffload::on_returned`]).
//!
//! Why order holds, per flow F: before F is leased, its packets are processed by the
//! working core to completion (run-to-completion: the lease is taken after the
//! packets before it). While F is away, its packets enter the ring in arrival order
//! and the offloading core processes the ring in order. When F is recalled, its
//! packets already in the ring precede the marker; the ones after wait in the
//! pending queue, in arrival order, and run only after the marker was reached and
//! before F's later packets (F is home again only after its pending packets were
//! handed out). Why nothing is lost: every packet is processed here, pushed, or
//! pending, and a ticket's pending packets are released when it returns — which it
//! does, because the offloading core never blocks. Why one core per state: the state
//! is a value, in the owner's table or in the ring and the offloading core's map.
//!
//! Changing the offloading core recalls every flow through the old core's ring
//! first; flows are leased to the new core only after that recall returned (the
//! "wait until Q_old drained" of Algorithm 3).

use std::collections::VecDeque;

use crate::{CoreId, ShardId};

/// An entry's index in its shard's flow table.
pub type EntryIdx = u32;
/// A recall's ticket; tickets return in the order they were issued.
pub type Ticket = u64;
/// Offload ratio 1 (every eligible flow) in units of `1 / RATIO_ONE`.
pub const RATIO_ONE: u32 = 1 << 16;

/// The slice of a flow for offload decisions: the low 16 bits of a software hash
/// of its key (not the RSS hash, whose bits also pick the shard and, with the
/// symmetric key, repeat every 16 bits).
#[inline]
pub fn slice_of(key_hash: u32) -> u32 {
    key_hash & (RATIO_ONE - 1)
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Lease {
    #[default]
    Home,
    Away {
        slice: u32,
        last_ns: u64,
    },
    Returning {
        ticket: Ticket,
    },
}

#[derive(Clone, Debug, Default)]
struct ShardSide {
    ratio: u32,
    lease: Vec<Lease>,
    /// Entries away or returning.
    out: usize,
    /// Heaviest-flows selection: the flows that may be offloaded, and the
    /// slice below which the others may too (instead of slices below the ratio).
    eligible: Option<(Vec<EntryIdx>, u32)>,
}

/// What to do with a packet after its lookup.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    /// Process it here.
    Local,
    /// Push it to offloading core `to`; with `lease`, detach its entry and send the
    /// state along (the flow's first offloaded packet).
    Offload {
        /// The offloading core.
        to: CoreId,
        /// Detach the entry and send its state with this packet.
        lease: bool,
    },
    /// Keep it in the pending queue ([`WorkingOffload::pend`]): its flow is returning.
    Pend(Ticket),
}

/// A recall marker to push into the ring of offloading core `to`, behind every
/// packet sent so far.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Recall {
    /// Returns in issue order.
    pub ticket: Ticket,
    /// The offloading core holding the states.
    pub to: CoreId,
    /// The flows to send back.
    pub entries: Vec<(ShardId, EntryIdx)>,
}

/// Counters of the offload machinery on one working core.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OffloadStats {
    /// Flows leased to an offloading core.
    pub leases: u64,
    /// Flows recalled.
    pub recalled: u64,
    /// Recall markers issued.
    pub recalls: u64,
    /// Packets that waited in the pending queue.
    pub pended: u64,
    /// Offload-ratio changes applied.
    pub ratio_changes: u64,
    /// Offloading-core changes applied.
    pub core_changes: u64,
}

/// The working core's side of flow offload, for all the shards it may own.
#[derive(Clone, Debug)]
pub struct WorkingOffload<P> {
    shards: Vec<ShardSide>,
    target: Option<CoreId>,
    /// A change of offloading core waiting for its recall: (ticket, new core).
    changing: Option<(Ticket, Option<CoreId>)>,
    next_ticket: Ticket,
    returned: Ticket,
    pending: VecDeque<(Ticket, ShardId, P)>,
    stats: OffloadStats,
}

impl<P> WorkingOffload<P> {
    /// `shards` shards, all ratios 0, offloading to `target` (none: no offload).
    pub fn new(shards: usize, target: Option<CoreId>) -> WorkingOffload<P> {
        WorkingOffload {
            shards: vec![ShardSide::default(); shards],
            target,
            changing: None,
            next_ticket: 1,
            returned: 0,
            pending: VecDeque::new(),
            stats: OffloadStats::default(),
        }
    }

    /// The offloading core in use.
    pub fn target(&self) -> Option<CoreId> {
        self.target
    }

    /// r_s of `shard`.
    pub fn ratio(&self, shard: ShardId) -> u32 {
        self.shards[usize::from(shard)].ratio
    }

    /// Counters.
    pub fn stats(&self) -> &OffloadStats {
        &self.stats
    }

    /// Where the packet of `shard` whose lookup found `entry` (`None`: a new flow)
    /// goes. `slice` is the flow's [`slice_of`]; `priority` marks the priority class;
    /// `offloadable` asks the chain whether the flow's state can be worked on away
    /// from the shard (only asked for a lease). `now_ns` dates the flow's activity
    /// for [`recall_idle`](Self::recall_idle).
    pub fn route(
        &mut self,
        shard: ShardId,
        entry: Option<EntryIdx>,
        slice: u32,
        priority: bool,
        now_ns: u64,
        offloadable: impl FnOnce() -> bool,
    ) -> Route {
        crate::probe::hit(crate::probe::Probe::Route);
        let Some(e) = entry else {
            return Route::Local;
        };
        let side = &mut self.shards[usize::from(shard)];
        let e = e as usize;
        if side.lease.len() <= e {
            side.lease.resize(e + 1, Lease::Home);
        }
        match &mut side.lease[e] {
            Lease::Returning { ticket } => {
                self.stats.pended += 1;
                Route::Pend(*ticket)
            }
            Lease::Away { last_ns, .. } => {
                *last_ns = now_ns;
                Route::Offload {
                    to: self
                        .target
                        .expect("a flow is away only while there is a target"),
                    lease: false,
                }
            }
            Lease::Home => match self.target {
                Some(to)
                    if !priority
                        && self.changing.is_none()
                        && match &side.eligible {
                            Some((ids, rest)) => slice < *rest || ids.contains(&(e as EntryIdx)),
                            None => slice < side.ratio,
                        }
                        && offloadable() =>
                {
                    side.lease[e] = Lease::Away {
                        slice,
                        last_ns: now_ns,
                    };
                    side.out += 1;
                    self.stats.leases += 1;
                    Route::Offload { to, lease: true }
                }
                _ => Route::Local,
            },
        }
    }

    /// Keeps a packet that [`route`](Self::route) said to pend.
    pub fn pend(&mut self, ticket: Ticket, shard: ShardId, p: P) {
        self.pending.push_back((ticket, shard, p));
    }

    /// Sets r_s. Lowering it recalls the away flows whose slices are no longer below
    /// it; raising it needs nothing (flows are leased at their next packet).
    pub fn set_ratio(&mut self, shard: ShardId, ratio: u32) -> Option<Recall> {
        let ratio = ratio.min(RATIO_ONE);
        let side = &mut self.shards[usize::from(shard)];
        if side.ratio == ratio {
            return None;
        }
        let lower = ratio < side.ratio;
        side.ratio = ratio;
        self.stats.ratio_changes += 1;
        if lower {
            let heaviest = self.shards[usize::from(shard)].eligible.is_some();
            self.recall_where(|s, _, l| {
                s == shard && !heaviest && matches!(l, Lease::Away { slice, .. } if *slice >= ratio)
            })
        } else {
            None
        }
    }

    /// Heaviest-flows selection (Dyssect's code offloads a shard's heaviest flows
    /// whose cumulative share stays within r_s, rounded up to a flow boundary):
    /// from now on exactly the flows `ids` of `shard` may be offloaded, and the
    /// others whose slice is below `rest` (the share of r_s the heavy flows do
    /// not carry); `None`: back to slices below the ratio. Away flows no longer
    /// eligible are recalled.
    pub fn set_eligible(
        &mut self,
        shard: ShardId,
        ids: Option<(Vec<EntryIdx>, u32)>,
    ) -> Option<Recall> {
        let side = &mut self.shards[usize::from(shard)];
        side.eligible = ids;
        let keep = side.eligible.clone();
        let ratio = side.ratio;
        self.recall_where(|s, e, l| {
            s == shard
                && match (l, &keep) {
                    (Lease::Away { slice, .. }, Some((ids, rest))) => {
                        *slice >= *rest && !ids.contains(&e)
                    }
                    (Lease::Away { slice, .. }, None) => *slice >= ratio,
                    _ => false,
                }
        })
    }

    /// Before `shard` leaves this core: r_s = 0 and every away flow of it recalled.
    /// The shard may be handed over once [`is_settled`](Self::is_settled).
    pub fn recall_shard(&mut self, shard: ShardId) -> Option<Recall> {
        self.shards[usize::from(shard)].ratio = 0;
        self.shards[usize::from(shard)].eligible = None;
        self.recall_where(|s, _, l| s == shard && matches!(l, Lease::Away { .. }))
    }

    /// Recalls flows whose last packet was `idle_ns` or more before `now_ns`, so that
    /// the owner's timers can expire them.
    pub fn recall_idle(&mut self, now_ns: u64, idle_ns: u64) -> Option<Recall> {
        self.recall_where(
            |_, _, l| matches!(l, Lease::Away { last_ns, .. } if now_ns.saturating_sub(*last_ns) >= idle_ns),
        )
    }

    /// Recalls every away flow (end of run).
    pub fn recall_all(&mut self) -> Option<Recall> {
        self.recall_where(|_, _, l| matches!(l, Lease::Away { .. }))
    }

    /// Switches to offloading core `to` (`None`: stop offloading). With flows away,
    /// they are recalled through the current core first and the switch happens when
    /// that recall returns; meanwhile no flow is leased.
    pub fn set_target(&mut self, to: Option<CoreId>) -> Option<Recall> {
        if to == self.target && self.changing.is_none() {
            return None;
        }
        self.stats.core_changes += 1;
        match self.recall_all() {
            Some(r) => {
                self.changing = Some((r.ticket, to));
                Some(r)
            }
            None if self.outstanding() => {
                // earlier recalls still out: switch when the last one returns
                self.changing = Some((self.next_ticket - 1, to));
                None
            }
            None => {
                self.target = to;
                self.changing = None;
                None
            }
        }
    }

    fn recall_where(&mut self, pick: impl Fn(ShardId, EntryIdx, &Lease) -> bool) -> Option<Recall> {
        let to = self.target?;
        let ticket = self.next_ticket;
        let mut entries = Vec::new();
        for (s, side) in self.shards.iter_mut().enumerate() {
            if side.out == 0 {
                continue;
            }
            for (e, l) in side.lease.iter_mut().enumerate() {
                if pick(s as ShardId, e as EntryIdx, l) {
                    *l = Lease::Returning { ticket };
                    entries.push((s as ShardId, e as EntryIdx));
                }
            }
        }
        if entries.is_empty() {
            return None;
        }
        self.next_ticket += 1;
        self.stats.recalls += 1;
        self.stats.recalled += entries.len() as u64;
        Some(Recall {
            ticket,
            to,
            entries,
        })
    }

    /// The offloading core sent back the states of recall `ticket` (the caller has
    /// re-attached them to their entries). Returns the pending packets that may run
    /// now, in arrival order — process them before any other packet.
    pub fn on_returned(
        &mut self,
        ticket: Ticket,
        entries: &[(ShardId, EntryIdx)],
    ) -> Vec<(ShardId, P)> {
        debug_assert!(ticket > self.returned, "recalls return in order");
        self.returned = self.returned.max(ticket);
        for &(s, e) in entries {
            let side = &mut self.shards[usize::from(s)];
            debug_assert_eq!(side.lease[e as usize], Lease::Returning { ticket });
            side.lease[e as usize] = Lease::Home;
            side.out -= 1;
        }
        if let Some((t, to)) = self.changing {
            if t <= self.returned {
                self.target = to;
                self.changing = None;
            }
        }
        let mut ready = Vec::new();
        let mut rest = VecDeque::with_capacity(self.pending.len());
        for (t, s, p) in self.pending.drain(..) {
            if t <= self.returned {
                ready.push((s, p));
            } else {
                rest.push_back((t, s, p));
            }
        }
        self.pending = rest;
        ready
    }

    /// True when no flow of `shard` is away or returning (it may be handed over).
    pub fn is_settled(&self, shard: ShardId) -> bool {
        self.shards[usize::from(shard)].out == 0
    }

    /// Flows away or returning, over all shards.
    pub fn away(&self) -> usize {
        self.shards.iter().map(|s| s.out).sum()
    }

    /// True while a recall has not returned.
    pub fn outstanding(&self) -> bool {
        self.returned + 1 < self.next_ticket
    }

    /// Packets in the pending queue.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HALF: u32 = RATIO_ONE / 2;

    #[test]
    fn leases_below_the_ratio_only_and_never_priority_or_new_flows() {
        let mut w: WorkingOffload<u32> = WorkingOffload::new(2, Some(5));
        w.set_ratio(0, HALF);
        assert_eq!(w.route(0, None, 0, false, 0, || true), Route::Local);
        assert_eq!(w.route(0, Some(1), HALF, false, 0, || true), Route::Local);
        assert_eq!(w.route(0, Some(2), 0, true, 0, || true), Route::Local);
        assert_eq!(w.route(0, Some(3), 0, false, 0, || false), Route::Local);
        assert_eq!(
            w.route(1, Some(4), 0, false, 0, || true),
            Route::Local,
            "r_1 = 0"
        );
        assert_eq!(
            w.route(0, Some(4), HALF - 1, false, 0, || true),
            Route::Offload { to: 5, lease: true }
        );
        // later packets follow without a lease, whatever their class
        assert_eq!(
            w.route(0, Some(4), HALF - 1, true, 0, || unreachable!()),
            Route::Offload {
                to: 5,
                lease: false
            }
        );
        assert_eq!(w.away(), 1);
        assert!(!w.is_settled(0) && w.is_settled(1));
    }

    #[test]
    fn lowering_the_ratio_recalls_and_pends_until_returned() {
        let mut w: WorkingOffload<u32> = WorkingOffload::new(1, Some(1));
        w.set_ratio(0, RATIO_ONE);
        for e in 0..4 {
            let r = w.route(0, Some(e), e * 10_000, false, 0, || true);
            assert_eq!(r, Route::Offload { to: 1, lease: true });
        }
        // raising needs no recall; lowering recalls the slices ≥ 25 000
        assert_eq!(
            w.set_ratio(0, 25_000),
            Some(Recall {
                ticket: 1,
                to: 1,
                entries: vec![(0, 3)]
            })
        );
        assert_eq!(
            w.route(0, Some(3), 30_000, false, 0, || true),
            Route::Pend(1)
        );
        w.pend(1, 0, 33);
        assert_eq!(
            w.route(0, Some(2), 20_000, false, 0, || true),
            Route::Offload {
                to: 1,
                lease: false
            }
        );
        assert!(w.outstanding());
        assert_eq!(w.on_returned(1, &[(0, 3)]), vec![(0, 33)]);
        assert!(!w.outstanding());
        assert_eq!(w.route(0, Some(3), 30_000, false, 0, || true), Route::Local);
        assert_eq!(w.away(), 3);
        assert_eq!(w.stats().pended, 1);
    }

    #[test]
    fn changing_the_offloading_core_waits_for_the_recall() {
        let mut w: WorkingOffload<u32> = WorkingOffload::new(1, Some(1));
        w.set_ratio(0, RATIO_ONE);
        assert_eq!(
            w.route(0, Some(0), 0, false, 0, || true),
            Route::Offload { to: 1, lease: true }
        );
        let r = w.set_target(Some(2)).expect("a recall through core 1");
        assert_eq!((r.to, r.entries.clone()), (1, vec![(0, 0)]));
        // nothing is leased meanwhile, to either core
        assert_eq!(w.route(0, Some(1), 0, false, 0, || true), Route::Local);
        assert_eq!(w.target(), Some(1));
        assert!(w.on_returned(r.ticket, &r.entries).is_empty());
        assert_eq!(w.target(), Some(2));
        assert_eq!(
            w.route(0, Some(0), 0, false, 0, || true),
            Route::Offload { to: 2, lease: true }
        );
        // no flow away: immediate
        let mut v: WorkingOffload<u32> = WorkingOffload::new(1, None);
        assert_eq!(v.set_target(Some(3)), None);
        assert_eq!(v.target(), Some(3));
    }

    #[test]
    fn heaviest_selection_offloads_exactly_the_eligible_flows() {
        let mut w: WorkingOffload<u32> = WorkingOffload::new(1, Some(0));
        w.set_ratio(0, RATIO_ONE / 10);
        assert_eq!(w.set_eligible(0, Some((vec![7, 9], 0))), None);
        // slices no longer matter: flow 7 has a high slice but is eligible
        assert_eq!(
            w.route(0, Some(7), 60_000, false, 0, || true),
            Route::Offload { to: 0, lease: true }
        );
        assert_eq!(w.route(0, Some(3), 0, false, 0, || true), Route::Local);
        assert_eq!(
            w.route(0, Some(9), 0, false, 0, || true),
            Route::Offload { to: 0, lease: true }
        );
        // 9 drops out of the heavy set: recalled; 7 stays away
        let r = w.set_eligible(0, Some((vec![7], 0))).expect("a recall");
        assert_eq!(r.entries, vec![(0, 9)]);
        // a ratio change does not recall by slice in this mode
        assert_eq!(w.set_ratio(0, 0), None);
        assert_eq!(
            w.route(0, Some(7), 60_000, false, 0, || true),
            Route::Offload {
                to: 0,
                lease: false
            }
        );
        // back to slices: 7's slice is above the ratio, so it comes home
        let r = w.set_eligible(0, None).expect("a recall");
        assert_eq!(r.entries, vec![(0, 7)]);
    }

    #[test]
    fn shard_release_and_idle_recalls() {
        let mut w: WorkingOffload<u32> = WorkingOffload::new(2, Some(0));
        w.set_ratio(0, RATIO_ONE);
        w.set_ratio(1, RATIO_ONE);
        w.route(0, Some(0), 1, false, 100, || true);
        w.route(1, Some(0), 1, false, 100, || true);
        w.route(1, Some(1), 1, false, 900, || true);
        let idle = w.recall_idle(1_000, 500).unwrap();
        assert_eq!(idle.entries, vec![(0, 0), (1, 0)]);
        let shard = w.recall_shard(1).unwrap();
        assert_eq!(shard.entries, vec![(1, 1)]);
        assert_eq!(w.ratio(1), 0);
        assert!(!w.is_settled(1));
        w.on_returned(idle.ticket, &idle.entries);
        assert!(!w.is_settled(1));
        w.on_returned(shard.ticket, &shard.entries);
        assert!(w.is_settled(1) && w.away() == 0);
        assert_eq!(w.recall_all(), None);
    }
}

//! A working core's side of both migration protocols, as one pure state machine:
//! shard moves ([`WorkerMoves`]) and flow offloading ([`WorkingOffload`]) combined
//! with the rules that tie them together on one core.
//!
//! The rules that live here, and only here:
//! - a shard being released recalls its offloaded flows first (r_s = 0), and its
//!   hand-over waits until every one of them is home (*deferred hand-over*);
//! - ratio changes for a shard that is not here, or that is leaving, are ignored;
//! - heaviest-first selection re-picks a shard's offloaded flows when its ratio
//!   changes and at the end of every heavy-flow window;
//! - offloaded flows idle for [`IDLE_RECALL_NS`] are recalled every [`TIMER_NS`];
//! - at the end of the run every offloaded flow is recalled once, and the core may
//!   stop only when none is away and no hand-over is deferred.
//!
//! In the style of `quinn-proto`: the driver (a runtime thread, the simulator's
//! event loop, a loom model, a random-interleaving test) calls `handle_*` with
//! what happened and then drains [`WorkingCore::poll_action`] for what to do —
//! push a recall marker, send a shard, run packets here, report an arrival. The
//! driver owns the shard objects, the rings and the clock; time comes in as an
//! argument. The packet path (`on_packet`, `route`, `pend`, `sample`) returns its
//! answer directly.

use std::collections::VecDeque;

pub use super::actions::{Action, Due, WorkingStart};
use super::heavy::{self, Sampler, TopK};
use super::offload::{EntryIdx, OffloadStats, Route, Ticket, WorkingOffload, RATIO_ONE};
use super::shard_move::{Received, WorkerMoves};
use super::steps::{log, Did, Step};
use crate::{CoreId, ShardId};

/// Every `TIMER_NS` a working core runs its shards' idle timeouts and checks for
/// idle offloaded flows.
pub const TIMER_NS: u64 = 10_000_000;
/// Offloaded flows idle this long are recalled, so the owner's timers see them.
pub const IDLE_RECALL_NS: u64 = 50_000_000;

/// The working core's side of shard moves and flow offloading.
#[derive(Debug)]
pub struct WorkingCore<P> {
    moves: WorkerMoves<P>,
    offload: WorkingOffload<P>,
    /// Shard objects held here (owned, or released but not yet handed over).
    present: Vec<bool>,
    /// Hand-overs waiting for the shard's offloaded flows to come home.
    deferred: Vec<(ShardId, CoreId)>,
    heaviest: bool,
    heavy: Vec<TopK>,
    last_heavy: Vec<Vec<(EntryIdx, f64)>>,
    published: Vec<Vec<f64>>,
    sampler: Sampler,
    next_timer: u64,
    next_window: u64,
    recalled_all: bool,
    /// Bumped whenever the set of shards the core works on changes.
    generation: u64,
    actions: VecDeque<Action<P>>,
    /// This machine's id in the step log (see [`log`]).
    id: u64,
}

impl<P> WorkingCore<P> {
    /// A working core as `start` says.
    pub fn new(start: WorkingStart) -> WorkingCore<P> {
        let id = log::new_machine(&start);
        let mut offload = WorkingOffload::new(start.shards, start.offloader);
        let mut present = vec![false; start.shards];
        for &s in &start.owned {
            offload.set_ratio(s, start.ratio);
            present[usize::from(s)] = true;
        }
        WorkingCore {
            moves: WorkerMoves::new(start.owned),
            offload,
            present,
            deferred: Vec::new(),
            heaviest: start.heaviest,
            heavy: vec![TopK::default(); start.shards],
            last_heavy: vec![Vec::new(); start.shards],
            published: vec![Vec::new(); start.shards],
            sampler: Sampler::default(),
            next_timer: start.now_ns + TIMER_NS,
            next_window: start.now_ns + start.window_ns,
            recalled_all: false,
            generation: 0,
            actions: VecDeque::new(),
            id,
        }
    }

    // ---- the packet path -------------------------------------------------

    /// A packet of `shard` taken from the queue: run it, or it is held.
    #[inline]
    pub fn on_packet(&mut self, shard: ShardId, p: P) -> Received<P> {
        let r = self.moves.on_packet(shard, p);
        log::step(self.id, || Step::Packet {
            shard,
            process: matches!(r, Received::Process(_)),
        });
        r
    }

    /// [`on_packet`](Self::on_packet) with the packet handed to `process` when
    /// it is processed (moved once, e.g. onto the burst); true then, false
    /// when it is held.
    #[inline]
    pub fn take_packet(&mut self, shard: ShardId, p: P, process: impl FnOnce(P)) -> bool {
        let r = self.moves.take_packet(shard, p, process);
        log::step(self.id, || Step::Packet { shard, process: r });
        r
    }

    /// True if a packet of `shard` taken now runs at once: then the driver
    /// may run it where it is (in its queue's slot) and tell the machine with
    /// [`took_in_place`](Self::took_in_place) instead of handing it over with
    /// [`take_packet`](Self::take_packet). Asks nothing of the machine's
    /// state and changes none of it.
    #[inline]
    pub fn runs_directly(&self, shard: ShardId) -> bool {
        self.moves.runs_directly(shard)
    }

    /// A packet of `shard`, for which [`runs_directly`](Self::runs_directly)
    /// said true with nothing in between, was taken and runs where it is:
    /// the same step as [`take_packet`](Self::take_packet) handing it to
    /// `process`.
    #[inline]
    pub fn took_in_place(&mut self, shard: ShardId) {
        crate::probe::hit(crate::probe::Probe::OnPacket);
        debug_assert!(
            self.runs_directly(shard),
            "shard {shard} does not run directly"
        );
        log::step(self.id, || Step::Packet {
            shard,
            process: true,
        });
    }

    /// Counts a packet of flow `entry` of `shard` for the heavy-flow window
    /// (sampled).
    #[inline]
    pub fn sample(&mut self, shard: ShardId, entry: EntryIdx) {
        log::step(self.id, || Step::Sample { shard, entry });
        if self.sampler.tick() {
            self.heavy[usize::from(shard)].add(entry);
        }
    }

    /// Where a looked-up packet goes (see [`WorkingOffload::route`]).
    #[inline]
    pub fn route(
        &mut self,
        shard: ShardId,
        entry: Option<EntryIdx>,
        slice: u32,
        priority: bool,
        now_ns: u64,
        offloadable: impl FnOnce() -> bool,
    ) -> Route {
        let mut asked = None;
        let route = self
            .offload
            .route(shard, entry, slice, priority, now_ns, || {
                let ok = offloadable();
                asked = Some(ok);
                ok
            });
        log::step(self.id, || Step::Route {
            shard,
            entry,
            slice,
            priority,
            now_ns,
            offloadable: asked,
            route,
        });
        if matches!(route, Route::Offload { lease: true, .. }) {
            // a flow leased after the stopping recall (a held packet run late)
            // is recalled by the next one
            self.recalled_all = false;
        }
        route
    }

    /// Keeps a packet that [`route`](Self::route) said to pend.
    pub fn pend(&mut self, ticket: Ticket, shard: ShardId, p: P) {
        log::step(self.id, || Step::Pend { ticket, shard });
        self.offload.pend(ticket, shard, p);
    }

    /// `n` packets were taken from the queue and run, sent or held: completes
    /// the queue cycles of shards being released.
    pub fn handle_dequeued(&mut self, n: usize) {
        log::step(self.id, || Step::Dequeued(n));
        for _ in 0..n {
            for (s, to) in self.moves.on_dequeued() {
                self.hand_over_when_settled(s, to);
            }
        }
    }

    // ---- control ---------------------------------------------------------

    /// The controller asks to release `shard` to `to`; `queued` packets are in
    /// the core's queue now.
    pub fn handle_release(&mut self, shard: ShardId, to: CoreId, queued: u64) {
        log::step(self.id, || Step::Release { shard, to, queued });
        // no new lease for the shard; its offloaded flows come back first
        if let Some(r) = self.offload.recall_shard(shard) {
            self.actions.push_back(Action::PushRecall(r));
        }
        if let Some((s, to)) = self.moves.on_release(shard, to, queued) {
            self.hand_over_when_settled(s, to);
        }
    }

    /// `shard` was handed over to this core (the driver holds its object now).
    pub fn handle_shard(&mut self, shard: ShardId) {
        log::step(self.id, || Step::Shard(shard));
        self.present[usize::from(shard)] = true;
        self.generation += 1;
        let held: Vec<P> = self.moves.on_shard(shard).into();
        let n = held.len() as u64;
        if !held.is_empty() {
            self.actions.push_back(Action::RunHere(held));
        }
        self.actions.push_back(Action::Arrived { shard, held: n });
    }

    /// Sets r_s of `shard` (ignored unless the shard is here and staying).
    pub fn handle_ratio(&mut self, shard: ShardId, ratio: u32) {
        log::step(self.id, || Step::Ratio { shard, ratio });
        if !self.present[usize::from(shard)] || self.leaving(shard) {
            return;
        }
        if let Some(r) = self.offload.set_ratio(shard, ratio) {
            self.actions.push_back(Action::PushRecall(r));
        }
        if self.heaviest {
            self.select_heaviest(shard);
        }
    }

    /// Offload to offloading core `to` from now on (none: stop offloading).
    pub fn handle_offloader(&mut self, to: Option<CoreId>) {
        log::step(self.id, || Step::Offloader(to));
        if let Some(r) = self.offload.set_target(to) {
            self.actions.push_back(Action::PushRecall(r));
        }
    }

    /// The offloading core answered recall `ticket`; the driver has re-attached
    /// the states of `entries` to their flow entries.
    pub fn handle_returned(&mut self, ticket: Ticket, entries: &[(ShardId, EntryIdx)]) {
        log::step(self.id, || Step::Returned {
            ticket,
            entries: entries.to_vec(),
        });
        let ready: Vec<P> = self
            .offload
            .on_returned(ticket, entries)
            .into_iter()
            .map(|(_, p)| p)
            .collect();
        if !ready.is_empty() {
            self.actions.push_back(Action::RunHere(ready));
        }
        for (s, to) in std::mem::take(&mut self.deferred) {
            self.hand_over_when_settled(s, to);
        }
    }

    /// Time passed (`window_ns`: the next heavy-flow window's length). Says which
    /// periodic duties fell due; idle offloaded flows are recalled here.
    pub fn handle_time(&mut self, now_ns: u64, window_ns: u64) -> Due {
        let mut due = Due::default();
        if now_ns >= self.next_timer {
            self.next_timer = now_ns + TIMER_NS;
            due.timers = true;
            if let Some(r) = self.offload.recall_idle(now_ns, IDLE_RECALL_NS) {
                self.actions.push_back(Action::PushRecall(r));
            }
        }
        if now_ns >= self.next_window {
            self.next_window = now_ns + window_ns;
            due.window = true;
            self.close_window();
        }
        log::step(self.id, || Step::Time {
            now_ns,
            window_ns,
            due,
        });
        due
    }

    /// The run is ending and the core is idle: every offloaded flow is recalled
    /// (once, and again for flows leased after that).
    pub fn handle_stopping(&mut self) {
        log::step(self.id, || Step::Stopping);
        if self.offload.away() > 0 && !self.recalled_all {
            self.recalled_all = true;
            if let Some(r) = self.offload.recall_all() {
                self.actions.push_back(Action::PushRecall(r));
            }
        }
    }

    /// The next thing to do, in order.
    pub fn poll_action(&mut self) -> Option<Action<P>> {
        let a = self.actions.pop_front();
        if let Some(a) = &a {
            log::step(self.id, || Step::Did(Did::of(a)));
        }
        a
    }

    // ---- queries ---------------------------------------------------------

    /// True when the core may stop: no flow away, no hand-over deferred.
    pub fn finished(&self) -> bool {
        self.offload.away() == 0 && self.deferred.is_empty()
    }

    /// True while [`handle_stopping`](Self::handle_stopping) still has flows to
    /// recall.
    pub fn must_recall_all(&self) -> bool {
        !self.recalled_all && self.offload.away() > 0
    }

    /// The shards owned now.
    pub fn owned(&self) -> impl Iterator<Item = ShardId> + '_ {
        self.moves.owned()
    }

    /// True if the shard's object is here.
    pub fn holds(&self, shard: ShardId) -> bool {
        self.present[usize::from(shard)]
    }

    /// Changes whenever the shards the core works on change.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// The cumulative traffic shares of `shard`'s heaviest flows in the last
    /// closed window (while the shard was here).
    pub fn heavy_shares(&self, shard: ShardId) -> &[f64] {
        &self.published[usize::from(shard)]
    }

    /// Packets held for shards not yet here, or pending until a recall returns.
    pub fn held(&self) -> u64 {
        self.moves.held() + self.offload.pending() as u64
    }

    /// Flows away or returning.
    pub fn away(&self) -> usize {
        self.offload.away()
    }

    /// Offload counters.
    pub fn offload_stats(&self) -> &OffloadStats {
        self.offload.stats()
    }

    // ---- rules -----------------------------------------------------------

    /// True from the release of `shard` until it is handed over: while it
    /// drains its queue and while its hand-over waits for its offloaded flows
    /// to come home, no flow of it may be leased.
    fn leaving(&self, shard: ShardId) -> bool {
        self.moves.is_releasing(shard) || self.deferred.iter().any(|d| d.0 == shard)
    }

    fn hand_over_when_settled(&mut self, shard: ShardId, to: CoreId) {
        // the shard is no longer among this core's
        self.generation += 1;
        if self.offload.is_settled(shard) {
            self.present[usize::from(shard)] = false;
            self.actions.push_back(Action::SendShard { shard, to });
        } else {
            self.deferred.push((shard, to));
        }
    }

    /// Heaviest-first selection: offload the shard's heaviest flows while the
    /// share before each stays below r_s, and slices of the others for what
    /// r_s asks beyond them.
    fn select_heaviest(&mut self, shard: ShardId) {
        let r = f64::from(self.offload.ratio(shard)) / f64::from(RATIO_ONE);
        let pick = heavy::eligible(&self.last_heavy[usize::from(shard)], r, RATIO_ONE);
        if let Some(rc) = self.offload.set_eligible(shard, Some(pick)) {
            self.actions.push_back(Action::PushRecall(rc));
        }
    }

    /// Ends a heavy-flow window: publish each held shard's heaviest flows and,
    /// with heaviest-first selection, re-pick the flows to offload.
    fn close_window(&mut self) {
        for s in 0..self.present.len() {
            let h = self.heavy[s].take();
            if !self.present[s] {
                continue;
            }
            self.published[s] = h.iter().map(|x| x.1).collect();
            self.last_heavy[s] = h;
            if self.heaviest && !self.leaving(s as ShardId) {
                self.select_heaviest(s as ShardId);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn start(owned: Vec<ShardId>, offloader: Option<CoreId>, ratio: u32) -> WorkingStart {
        WorkingStart {
            core: 0,
            shards: 4,
            owned,
            offloader,
            ratio,
            heaviest: false,
            now_ns: 0,
            window_ns: 1_000,
        }
    }

    fn drain<P>(w: &mut WorkingCore<P>) -> Vec<Action<P>> {
        std::iter::from_fn(|| w.poll_action()).collect()
    }

    #[test]
    fn release_recalls_offloaded_flows_then_hands_over_when_they_are_home() {
        let mut w: WorkingCore<u32> = WorkingCore::new(start(vec![0, 1], Some(0), RATIO_ONE));
        assert_eq!(
            w.route(0, Some(5), 0, false, 0, || true),
            Route::Offload { to: 0, lease: true }
        );
        w.handle_release(0, 1, 0);
        let a = drain(&mut w);
        assert_eq!(a.len(), 1, "only the recall: the hand-over waits ({a:?})");
        let Action::PushRecall(r) = &a[0] else {
            panic!("{a:?}")
        };
        assert!(w.holds(0) && !w.finished());
        // a ratio for the leaving shard is ignored: no other flow of it leaves
        w.handle_ratio(0, RATIO_ONE);
        assert!(drain(&mut w).is_empty());
        assert_eq!(w.route(0, Some(6), 0, false, 0, || true), Route::Local);
        assert_eq!(
            w.route(0, Some(5), 0, false, 0, || true),
            Route::Pend(r.ticket)
        );
        w.pend(r.ticket, 0, 77);
        w.handle_returned(r.ticket, &r.entries);
        assert_eq!(
            drain(&mut w),
            vec![
                Action::RunHere(vec![77]),
                Action::SendShard { shard: 0, to: 1 }
            ]
        );
        assert!(!w.holds(0) && w.finished());
    }

    #[test]
    fn arrival_runs_held_packets_then_reports() {
        let mut w: WorkingCore<u32> = WorkingCore::new(start(vec![], None, 0));
        assert_eq!(w.on_packet(2, 1), Received::Held);
        assert_eq!(w.on_packet(2, 2), Received::Held);
        assert_eq!(w.held(), 2);
        w.handle_shard(2);
        assert_eq!(
            drain(&mut w),
            vec![
                Action::RunHere(vec![1, 2]),
                Action::Arrived { shard: 2, held: 2 }
            ]
        );
        assert_eq!(w.on_packet(2, 3), Received::Process(3));
    }

    #[test]
    fn timers_recall_idle_flows_and_stopping_recalls_the_rest_once() {
        let mut w: WorkingCore<u32> = WorkingCore::new(start(vec![0], Some(0), RATIO_ONE));
        w.route(0, Some(1), 0, false, 0, || true);
        w.route(0, Some(2), 0, false, IDLE_RECALL_NS, || true);
        assert_eq!(
            w.handle_time(TIMER_NS - 1, 1_000),
            Due {
                timers: false,
                window: true
            }
        );
        let due = w.handle_time(IDLE_RECALL_NS + 1, 1_000);
        assert!(due.timers && due.window);
        let a = drain(&mut w);
        assert!(matches!(&a[..], [Action::PushRecall(r)] if r.entries == vec![(0, 1)]));
        assert!(w.must_recall_all());
        w.handle_stopping();
        w.handle_stopping();
        let a = drain(&mut w);
        assert!(matches!(&a[..], [Action::PushRecall(r)] if r.entries == vec![(0, 2)]));
        assert!(!w.must_recall_all() && !w.finished());
        // a held packet run late leases another flow: it is recalled too
        assert_eq!(
            w.route(0, Some(3), 0, false, IDLE_RECALL_NS + 2, || true),
            Route::Offload { to: 0, lease: true }
        );
        assert!(w.must_recall_all());
        w.handle_stopping();
        let a = drain(&mut w);
        assert!(matches!(&a[..], [Action::PushRecall(r)] if r.entries == vec![(0, 3)]));
        assert!(!w.must_recall_all());
    }
}

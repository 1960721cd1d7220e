//! One pool node's side of Sirius's state replication (§3.2), as a pure
//! machine: inputs are `on_*` calls with the time, outputs are [`Event`]s to
//! poll. The node driver (packets, sockets, routes) is a thin layer over it.
//!
//! - **Ping-pong.** A packet that creates or changes a flow's state at its
//!   primary is not sent out there: the primary writes the record *poisoned*
//!   and sends the packet with the new state to its secondary ([`Msg::Ping`]);
//!   the secondary installs the state and sends the packet back
//!   ([`Msg::Pong`]); only then does the primary clear the poison bit and send
//!   the packet to its destination. A packet leaves only once both nodes hold
//!   the state it made, without buffering it anywhere: it is in flight.
//! - **Heartbeats.** Nodes paired as primary and secondary exchange heartbeats;
//!   a peer silent for `dead_after` periods is reported down
//!   ([`Event::PeerDown`]) so the pool moves its traffic to its secondary.
//! - **Bulk sync.** When a node gets a new secondary (a peer failed, a node
//!   joined) it takes a checkpoint — the epoch advances, and every record of an
//!   older epoch belongs to it — and copies the checkpoint to the new
//!   secondary in paced batches, oldest records (the long-lived flows) first,
//!   while ping-pong carries every newer change. [`Event::SyncDone`] says when
//!   the secondary holds everything.
//!
//! Each node is the primary of the flows the pool's router sends it and the
//! secondary of one other node's flows; a record remembers its flow's primary,
//! and a node that receives a flow's packets becomes its primary.

use std::collections::{BTreeMap, HashMap, VecDeque};

use crate::bulk::Window;
use crate::detect::{Beats, PeerWatch};

use crate::poison::{Poison, Route};

pub use crate::detect::NodeId;
/// A flow (its symmetric hash: both directions the same).
pub type FlowId = u64;
/// A packet in flight, as the driver names it.
pub type PacketId = u64;

/// Timing and pacing.
#[derive(Clone, Debug, PartialEq)]
pub struct ReplicaConfig {
    /// Heartbeat period, ns.
    pub heartbeat_ns: u64,
    /// Silent periods after which a peer is down.
    pub dead_after: u32,
    /// Records per bulk-sync batch; one batch in flight at a time.
    pub sync_batch: usize,
}

impl ReplicaConfig {
    /// A watch over a peer, heard from at `now`.
    fn watch(&self, now: u64) -> PeerWatch {
        let mut w = PeerWatch::new(self.heartbeat_ns, self.dead_after);
        w.heard(now);
        w
    }
}

impl Default for ReplicaConfig {
    fn default() -> Self {
        ReplicaConfig {
            heartbeat_ns: 1_000_000,
            dead_after: 3,
            sync_batch: 256,
        }
    }
}

/// A flow's state as a node holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// Bumped by every change at the primary.
    pub version: u64,
    /// The epoch it was last written in (older epochs form the checkpoint).
    pub epoch: u32,
    /// The NFs' state, opaque here.
    pub state: Vec<u8>,
    /// The flow's primary.
    pub primary: NodeId,
}

/// A message between nodes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Msg {
    /// Primary → secondary: a packet and the state it made.
    Ping {
        /// The flow.
        flow: FlowId,
        /// Its new version.
        version: u64,
        /// Its new state.
        state: Vec<u8>,
        /// The packet riding along.
        packet: PacketId,
        /// The copy's number (its pong names it).
        seq: u32,
    },
    /// Secondary → primary: the state is installed; the packet is back.
    Pong {
        /// The flow.
        flow: FlowId,
        /// The version installed.
        version: u64,
        /// The packet.
        packet: PacketId,
        /// The copy's number.
        seq: u32,
    },
    /// I am alive.
    Heartbeat,
    /// A batch of a checkpoint: (flow, version, state, primary).
    Sync {
        /// The checkpoint's epoch.
        epoch: u32,
        /// The batch's number.
        seq: u32,
        /// The records.
        records: Vec<(FlowId, u64, Vec<u8>, NodeId)>,
    },
    /// The batch is installed.
    SyncAck {
        /// The checkpoint's epoch.
        epoch: u32,
        /// The batch's number.
        seq: u32,
    },
}

/// What the driver must do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// Send `msg` to node `to`.
    Send {
        /// The node.
        to: NodeId,
        /// The message.
        msg: Msg,
    },
    /// Send the packet to its destination.
    Transmit(PacketId),
    /// The peer has been silent too long.
    PeerDown(NodeId),
    /// The new secondary holds the whole checkpoint of `epoch`.
    SyncDone {
        /// The secondary.
        to: NodeId,
        /// The checkpoint's epoch.
        epoch: u32,
    },
}

struct SyncJob {
    to: NodeId,
    epoch: u32,
    pending: VecDeque<FlowId>,
    /// The batch sent and not yet acknowledged: (flow, version) — one at a
    /// time, sent again when overdue.
    window: Window<Vec<(FlowId, u64)>>,
}

/// One node.
pub struct Replica {
    me: NodeId,
    cfg: ReplicaConfig,
    /// Where this node's changes are replicated (none: alone).
    secondary: Option<NodeId>,
    /// Nodes whose heartbeats are watched (the same watch as a real node's
    /// pair heartbeats).
    watched: BTreeMap<NodeId, PeerWatch>,
    beats: Beats,
    epoch: u32,
    records: HashMap<FlowId, Record>,
    /// The poison bits of the flows this node is the primary of (written
    /// here, not yet confirmed by the secondary).
    poison: Poison<FlowId>,
    /// The next copy's number.
    seq: u32,
    /// The latest time seen.
    now: u64,
    sync: Option<SyncJob>,
    events: VecDeque<Event>,
    /// Changes made while alone (no secondary): one copy only.
    pub unreplicated: u64,
}

impl Replica {
    /// Node `me` at `now`, replicating to `secondary`, watching `watch`.
    pub fn new(
        me: NodeId,
        secondary: Option<NodeId>,
        watch: &[NodeId],
        cfg: ReplicaConfig,
        now: u64,
    ) -> Replica {
        Replica {
            me,
            secondary,
            watched: watch.iter().map(|&n| (n, cfg.watch(now))).collect(),
            beats: Beats::new(cfg.heartbeat_ns),
            epoch: 0,
            records: HashMap::new(),
            poison: Poison::default(),
            seq: 0,
            now,
            sync: None,
            events: VecDeque::new(),
            cfg,
            unreplicated: 0,
        }
    }

    /// This node.
    pub fn id(&self) -> NodeId {
        self.me
    }

    /// The current secondary.
    pub fn secondary(&self) -> Option<NodeId> {
        self.secondary
    }

    /// The record of `flow`, if held.
    pub fn record(&self, flow: FlowId) -> Option<&Record> {
        self.records.get(&flow)
    }

    /// True if `flow`'s latest change is not yet confirmed by the secondary.
    pub fn is_poisoned(&self, flow: FlowId) -> bool {
        self.poison.is_poisoned(flow, 0)
    }

    /// Every record held.
    pub fn records(&self) -> impl Iterator<Item = (&FlowId, &Record)> {
        self.records.iter()
    }

    /// Whether a bulk sync is under way.
    pub fn syncing(&self) -> bool {
        self.sync.is_some()
    }

    /// The next thing to do.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// A packet of `flow` arrived here (so this node is its primary) and the
    /// NFs ran: `change` is the state it made, if it created or changed any.
    pub fn on_packet(&mut self, flow: FlowId, change: Option<Vec<u8>>, packet: PacketId) {
        let me = self.me;
        if let Some(r) = self.records.get_mut(&flow) {
            r.primary = me;
        }
        // a record still poisoned (its ping was lost with a failed secondary)
        // is replicated again by the next packet, say a retransmitted SYN
        let route = self
            .poison
            .on_packet(flow, 0, change.is_some(), self.secondary.is_some());
        let state = match (route, change, self.records.get(&flow)) {
            (Route::Transmit, _, _) | (_, None, None) => {
                self.events.push_back(Event::Transmit(packet));
                return;
            }
            (_, Some(s), _) => s,
            (_, None, Some(r)) => r.state.clone(),
        };
        let epoch = self.epoch;
        let r = self.records.entry(flow).or_insert(Record {
            version: 0,
            epoch,
            state: Vec::new(),
            primary: me,
        });
        r.version += 1;
        r.epoch = epoch;
        r.state = state.clone();
        match (route, self.secondary) {
            (Route::Copy, Some(to)) => {
                let seq = self.seq;
                self.seq = self.seq.wrapping_add(1);
                self.poison.sent(flow, 0, seq, self.now);
                self.events.push_back(Event::Send {
                    to,
                    msg: Msg::Ping {
                        flow,
                        version: r.version,
                        state,
                        packet,
                        seq,
                    },
                });
            }
            _ => {
                self.poison.clear(flow);
                self.unreplicated += 1;
                self.events.push_back(Event::Transmit(packet));
            }
        }
    }

    /// A message from node `from`.
    pub fn on_message(&mut self, from: NodeId, msg: Msg, now: u64) {
        self.now = self.now.max(now);
        if let Some(w) = self.watched.get_mut(&from) {
            w.heard(now);
        }
        match msg {
            Msg::Ping {
                flow,
                version,
                state,
                packet,
                seq,
            } => {
                self.install(flow, version, state, from);
                self.events.push_back(Event::Send {
                    to: from,
                    msg: Msg::Pong {
                        flow,
                        version,
                        packet,
                        seq,
                    },
                });
            }
            Msg::Pong { packet, seq, .. } => {
                // clears the flow's poison if this was its latest copy
                let _ = self.poison.acked(seq, now);
                self.events.push_back(Event::Transmit(packet));
            }
            Msg::Heartbeat => {}
            Msg::Sync {
                epoch,
                seq,
                records,
            } => {
                for (flow, version, state, primary) in records {
                    self.install(flow, version, state, primary);
                }
                self.events.push_back(Event::Send {
                    to: from,
                    msg: Msg::SyncAck { epoch, seq },
                });
            }
            Msg::SyncAck { epoch, seq } => {
                let acked = match &mut self.sync {
                    Some(j) if j.epoch == epoch && j.to == from => j.window.acked(seq),
                    _ => None,
                };
                // a record the secondary now holds at its current version is
                // whole, whatever became of the ping that poisoned it
                for (flow, version) in acked.unwrap_or_default() {
                    if self
                        .records
                        .get(&flow)
                        .is_some_and(|r| r.version == version)
                    {
                        self.poison.clear(flow);
                    }
                }
                self.pump_sync();
            }
        }
    }

    /// A state from elsewhere, kept if newer than ours.
    fn install(&mut self, flow: FlowId, version: u64, state: Vec<u8>, primary: NodeId) {
        let epoch = self.epoch;
        let r = self.records.entry(flow).or_insert(Record {
            version: 0,
            epoch,
            state: Vec::new(),
            primary,
        });
        if version > r.version {
            r.version = version;
            r.state = state;
            r.epoch = epoch;
            r.primary = primary;
            self.poison.clear(flow);
        }
    }

    /// Time passes: heartbeats, failure detection, sync pacing.
    pub fn on_tick(&mut self, now: u64) {
        self.now = self.now.max(now);
        if self.beats.due(now) {
            for (&n, w) in self.watched.iter_mut() {
                w.round(now);
                self.events.push_back(Event::Send {
                    to: n,
                    msg: Msg::Heartbeat,
                });
            }
        }
        let down: Vec<NodeId> = self
            .watched
            .iter_mut()
            .filter_map(|(&n, w)| w.check(now).then_some(n))
            .collect();
        for n in down {
            self.watched.remove(&n);
            if self.secondary == Some(n) {
                self.secondary = None;
            }
            if self.sync.as_ref().is_some_and(|j| j.to == n) {
                self.sync = None;
            }
            self.events.push_back(Event::PeerDown(n));
        }
        if let Some(j) = &mut self.sync {
            // a batch whose acknowledgement did not come: its flows again,
            // first, as they are now
            for batch in j.window.overdue(now, 1) {
                for (flow, _) in batch.into_iter().rev() {
                    j.pending.push_front(flow);
                }
            }
        }
        self.pump_sync();
    }

    /// The pool's new pairing for this node: replicate to `secondary`, watch
    /// `watch`; the flows of `adopt` (nodes that failed) are now this node's.
    /// True if the secondary then lacks a checkpoint of this node's flows (a
    /// new secondary, or flows adopted): the controller orders a bulk sync
    /// ([`start_sync`](Self::start_sync)).
    pub fn set_pairing(
        &mut self,
        secondary: Option<NodeId>,
        watch: &[NodeId],
        adopt: &[NodeId],
        now: u64,
    ) -> bool {
        let me = self.me;
        self.now = self.now.max(now);
        for (&flow, r) in self.records.iter_mut() {
            if adopt.contains(&r.primary) {
                r.primary = me;
                // its old secondary was this node: the state is whole here
                self.poison.clear(flow);
            }
        }
        self.watched.retain(|n, _| watch.contains(n));
        for &n in watch {
            let cfg = &self.cfg;
            self.watched.entry(n).or_insert_with(|| cfg.watch(now));
        }
        let changed = secondary != self.secondary || !adopt.is_empty();
        self.secondary = secondary;
        changed && secondary.is_some()
    }

    /// The controller's bulk-sync order: a checkpoint of every record this
    /// node is the primary of goes to `to` in paced batches (the epoch
    /// advances: every record written before belongs to it), while
    /// ping-pong carries every newer change; [`Event::SyncDone`] says when
    /// `to` holds it all.
    pub fn start_sync(&mut self, to: NodeId, now: u64) {
        let me = self.me;
        self.now = self.now.max(now);
        let epoch = self.epoch;
        self.epoch = self.epoch.wrapping_add(1);
        let mut flows: Vec<(u32, FlowId)> = self
            .records
            .iter()
            .filter(|(_, r)| r.primary == me)
            .map(|(&f, r)| (r.epoch, f))
            .collect();
        // oldest (long-lived) first
        flows.sort_unstable();
        self.sync = Some(SyncJob {
            to,
            epoch,
            pending: flows.into_iter().map(|(_, f)| f).collect(),
            window: Window::new(1, self.cfg.heartbeat_ns * u64::from(self.cfg.dead_after)),
        });
        self.pump_sync();
    }

    /// The controller's order to stop copying.
    pub fn stop_sync(&mut self) {
        self.sync = None;
    }

    fn pump_sync(&mut self) {
        let Some(j) = &mut self.sync else { return };
        if !j.window.room() {
            return;
        }
        if j.pending.is_empty() {
            if j.window.is_empty() {
                self.events.push_back(Event::SyncDone {
                    to: j.to,
                    epoch: j.epoch,
                });
                self.sync = None;
            }
            return;
        }
        let n = self.cfg.sync_batch.max(1).min(j.pending.len());
        let mut records = Vec::with_capacity(n);
        let mut sent = Vec::with_capacity(n);
        for f in j.pending.drain(..n) {
            if let Some(r) = self.records.get(&f) {
                records.push((f, r.version, r.state.clone(), r.primary));
                sent.push((f, r.version));
            }
        }
        let seq = self.seq;
        self.seq = self.seq.wrapping_add(1);
        j.window.sent(seq, sent, self.now);
        self.events.push_back(Event::Send {
            to: j.to,
            msg: Msg::Sync {
                epoch: j.epoch,
                seq,
                records,
            },
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drain(r: &mut Replica) -> Vec<Event> {
        std::iter::from_fn(|| r.poll_event()).collect()
    }

    fn cfg(batch: usize) -> ReplicaConfig {
        ReplicaConfig {
            heartbeat_ns: 100,
            dead_after: 3,
            sync_batch: batch,
        }
    }

    #[test]
    fn a_state_change_leaves_only_after_the_pong() {
        let mut p = Replica::new(0, Some(1), &[1], cfg(8), 0);
        let mut s = Replica::new(1, Some(0), &[0], cfg(8), 0);
        p.on_packet(7, Some(b"syn".to_vec()), 42);
        let ev = drain(&mut p);
        assert!(!ev.contains(&Event::Transmit(42)));
        assert!(p.is_poisoned(7));
        let Event::Send { to: 1, msg } = ev[0].clone() else {
            panic!("{ev:?}")
        };
        s.on_message(0, msg, 10);
        assert_eq!(s.record(7).unwrap().state, b"syn");
        assert_eq!(s.record(7).unwrap().primary, 0);
        let Some(Event::Send { to: 0, msg }) = s.poll_event() else {
            panic!("no pong")
        };
        p.on_message(1, msg, 20);
        assert_eq!(drain(&mut p), vec![Event::Transmit(42)]);
        assert!(!p.is_poisoned(7));
        // a packet that changes nothing leaves at once
        p.on_packet(7, None, 43);
        assert_eq!(drain(&mut p), vec![Event::Transmit(43)]);
    }

    #[test]
    fn a_lost_ping_is_replicated_again_or_sent_alone_once_the_peer_is_down() {
        let mut p = Replica::new(0, Some(1), &[1], cfg(8), 0);
        p.on_packet(7, Some(b"syn".to_vec()), 1);
        drain(&mut p); // the ping is lost
                       // the retransmitted SYN changes nothing, but the record is poisoned
        p.on_packet(7, None, 2);
        let ev = drain(&mut p);
        assert!(matches!(
            ev[0],
            Event::Send {
                to: 1,
                msg: Msg::Ping { version: 2, .. }
            }
        ));
        // the peer is silent for 3 rounds and periods
        for t in [50, 150, 250] {
            p.on_tick(t);
            assert!(!drain(&mut p).contains(&Event::PeerDown(1)));
        }
        p.on_tick(350);
        assert!(drain(&mut p).contains(&Event::PeerDown(1)));
        assert_eq!(p.secondary(), None);
        p.on_packet(7, None, 3);
        assert_eq!(drain(&mut p), vec![Event::Transmit(3)]);
        assert_eq!(p.unreplicated, 1);
        assert!(!p.is_poisoned(7));
    }

    #[test]
    fn a_new_secondary_gets_the_checkpoint_in_paced_batches() {
        let mut p = Replica::new(0, None, &[], cfg(16), 0);
        for f in 0..40 {
            p.on_packet(f, Some(vec![f as u8]), f);
        }
        drain(&mut p);
        let mut s = Replica::new(2, None, &[], cfg(16), 0);
        assert!(p.set_pairing(Some(2), &[2], &[], 100));
        p.start_sync(2, 100);
        let mut batches = 0;
        loop {
            let ev = drain(&mut p);
            let sends: Vec<Msg> = ev
                .iter()
                .filter_map(|e| match e {
                    Event::Send { to: 2, msg } => Some(msg.clone()),
                    _ => None,
                })
                .collect();
            if ev
                .iter()
                .any(|e| matches!(e, Event::SyncDone { to: 2, .. }))
            {
                break;
            }
            // one batch in flight at a time
            assert_eq!(sends.len(), 1, "{ev:?}");
            batches += 1;
            s.on_message(0, sends[0].clone(), 200);
            let Some(Event::Send { to: 0, msg: ack }) = s.poll_event() else {
                panic!("no ack")
            };
            p.on_message(2, ack, 300);
        }
        assert_eq!(batches, 3);
        for f in 0..40 {
            assert_eq!(s.record(f).unwrap().state, vec![f as u8]);
        }
        // a change after the checkpoint goes by ping-pong
        p.on_packet(3, Some(b"new".to_vec()), 99);
        assert!(matches!(
            drain(&mut p)[0],
            Event::Send {
                to: 2,
                msg: Msg::Ping { .. }
            }
        ));
    }

    #[test]
    fn a_batch_whose_acknowledgement_is_lost_is_sent_again_as_the_records_are_now() {
        let mut p = Replica::new(0, None, &[], cfg(8), 0);
        for f in 0..4 {
            p.on_packet(f, Some(vec![f as u8]), f);
        }
        drain(&mut p);
        assert!(p.set_pairing(Some(2), &[2], &[], 0));
        p.start_sync(2, 0);
        let first = drain(&mut p);
        let [Event::Send {
            to: 2,
            msg: Msg::Sync { seq: first, .. },
        }] = first[..]
        else {
            panic!("{first:?}")
        };
        // the batch (or its acknowledgement) is lost; a flow changes
        p.on_packet(1, Some(b"new".to_vec()), 9);
        drain(&mut p);
        // nothing more goes until the batch is overdue (3 periods of 100)
        for t in [100, 200, 300] {
            p.on_message(2, Msg::Heartbeat, t);
            p.on_tick(t);
            assert!(!drain(&mut p).iter().any(|e| matches!(
                e,
                Event::Send {
                    msg: Msg::Sync { .. },
                    ..
                }
            )));
        }
        p.on_message(2, Msg::Heartbeat, 301);
        p.on_tick(301);
        let again = drain(&mut p);
        let Some(Event::Send {
            msg: Msg::Sync { seq, records, .. },
            ..
        }) = again.iter().find(|e| {
            matches!(
                e,
                Event::Send {
                    msg: Msg::Sync { .. },
                    ..
                }
            )
        })
        else {
            panic!("not sent again: {again:?}")
        };
        assert_eq!(records.len(), 4);
        assert!(records.contains(&(1, 2, b"new".to_vec(), 0)), "{records:?}");
        // the late acknowledgement of the first batch ends nothing
        assert_ne!(first, *seq);
        p.on_message(
            2,
            Msg::SyncAck {
                epoch: 0,
                seq: first,
            },
            302,
        );
        assert!(p.syncing());
        p.on_message(
            2,
            Msg::SyncAck {
                epoch: 0,
                seq: *seq,
            },
            303,
        );
        assert!(drain(&mut p)
            .iter()
            .any(|e| matches!(e, Event::SyncDone { to: 2, .. })));
        assert!(!p.syncing());
    }
}

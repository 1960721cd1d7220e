//! The pool in a simulated network, deterministic: nodes running
//! [`Replica`](crate::replica::Replica), the controller's [`Ring`], a network
//! with a fixed one-way latency, and connections that send one packet at a
//! time and resend one that is lost (as TCP does), with "NFs" that make state
//! on a SYN and change it every fifth packet. Nodes can be killed (`kill -9`:
//! they and their messages vanish) and brought back.
//!
//! It checks, as it runs, that every packet that made state leaves only once
//! two live nodes hold that state, and counts what a pool's report shows:
//! packets per node, replication lag (a state change to its packet leaving),
//! failovers and recovery time (a killed node's connections' longest gap),
//! bulk syncs, and connections broken — a packet of an established connection
//! reaching a node without its state, which a firewall would drop.

use std::collections::{BTreeMap, HashMap, VecDeque};

use serde::Serialize;

use crate::jobs::{Jobs, Order, Then};
use crate::replica::{Event, FlowId, Msg, NodeId, PacketId, Replica, ReplicaConfig};
use crate::ring::{Pairing, Ring};

/// What is simulated.
#[derive(Clone, Debug, PartialEq)]
pub struct SimConfig {
    /// Nodes (ids 0…).
    pub nodes: u16,
    /// Connections.
    pub connections: usize,
    /// Packets each connection sends.
    pub packets: u64,
    /// Gap between a connection's packets, ns.
    pub gap_ns: u64,
    /// One-way latency between nodes, ns.
    pub latency_ns: u64,
    /// A connection resends a lost packet after this long, ns.
    pub retry_ns: u64,
    /// Router buckets.
    pub buckets: usize,
    /// Time step, ns.
    pub step_ns: u64,
    /// The nodes' timing and pacing.
    pub replica: ReplicaConfig,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            nodes: 3,
            connections: 300,
            packets: 400,
            gap_ns: 200_000,
            latency_ns: 20_000,
            retry_ns: 1_000_000,
            buckets: 64,
            step_ns: 10_000,
            replica: ReplicaConfig {
                heartbeat_ns: 500_000,
                dead_after: 3,
                sync_batch: 16,
            },
        }
    }
}

/// A node killed at a time, and brought back (after the node before it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Failure {
    /// The node.
    pub node: NodeId,
    /// When it is killed, ns.
    pub at_ns: u64,
    /// When it comes back, ns (never if `None`).
    pub back_ns: Option<u64>,
}

/// The pool's report.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct PoolReport {
    /// Packets that left each node (by node id).
    pub node_packets: BTreeMap<NodeId, u64>,
    /// Packets that left the pool.
    pub packets_out: u64,
    /// State changes replicated.
    pub replicated: u64,
    /// Replication lag (a change to its packet leaving), ns: p50, p99, max.
    pub lag_ns: [u64; 3],
    /// Changes that left with one copy only (their node had no secondary).
    pub unreplicated: u64,
    /// Nodes found dead and their buckets moved.
    pub failovers: u64,
    /// Longest gap, after a kill, before a killed node's connection sent
    /// again, ns.
    pub recovery_ns: u64,
    /// Bulk syncs finished.
    pub syncs: u64,
    /// Connections broken (a packet reached a node without its state).
    pub broken: u64,
    /// Connections that finished every packet.
    pub finished: usize,
    /// Virtual time simulated, ns.
    pub duration_ns: u64,
}

struct Conn {
    flow: FlowId,
    sent: u64,
    waiting: Option<(PacketId, u64)>,
    established: bool,
    last_tx: u64,
}

/// The simulated pool.
pub struct Sim {
    cfg: SimConfig,
    now: u64,
    nodes: BTreeMap<NodeId, Replica>,
    ring: Ring,
    net: VecDeque<(u64, NodeId, NodeId, Msg)>,
    conns: Vec<Conn>,
    /// packet → (connection, the version it made, when it was made)
    packets: HashMap<PacketId, (usize, Option<u64>, u64)>,
    next_packet: PacketId,
    /// The controller's bulk syncs (the same machine `pool run` drives).
    jobs: Jobs,
    lags: Vec<u64>,
    /// A killed node's connections, and when it was killed.
    affected: Option<(u64, Vec<usize>)>,
    resumed: HashMap<usize, u64>,
    report: PoolReport,
}

impl Sim {
    /// A pool of `cfg.nodes` nodes in a ring, `cfg.buckets` buckets round-robin.
    pub fn new(cfg: SimConfig) -> Sim {
        let ids: Vec<NodeId> = (0..cfg.nodes.max(1)).collect();
        let ring = Ring::new(&ids, cfg.buckets.max(1));
        let nodes = ids
            .iter()
            .map(|&i| {
                let p = ring.pairing(i, Vec::new());
                (
                    i,
                    Replica::new(i, p.secondary, &p.watch, cfg.replica.clone(), 0),
                )
            })
            .collect();
        let conns = (0..cfg.connections)
            .map(|i| Conn {
                flow: (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 7,
                sent: 0,
                waiting: None,
                established: false,
                last_tx: 0,
            })
            .collect();
        Sim {
            cfg,
            now: 0,
            nodes,
            ring,
            net: VecDeque::new(),
            conns,
            packets: HashMap::new(),
            next_packet: 0,
            jobs: Jobs::new(),
            lags: Vec::new(),
            affected: None,
            resumed: HashMap::new(),
            report: PoolReport::default(),
        }
    }

    /// The virtual time, ns.
    pub fn now(&self) -> u64 {
        self.now
    }

    /// The controller's ring.
    pub fn ring(&self) -> &Ring {
        &self.ring
    }

    /// The live nodes.
    pub fn nodes(&self) -> impl Iterator<Item = &Replica> {
        self.nodes.values()
    }

    /// Whether a node that came back still waits for its checkpoint.
    pub fn joining(&self) -> bool {
        self.jobs
            .jobs()
            .iter()
            .any(|j| matches!(j.then, Then::HandBack(_)))
    }

    /// Whether every connection has sent its first packet through.
    pub fn all_established(&self) -> bool {
        self.conns.iter().all(|c| c.established)
    }

    /// The flow of each connection.
    pub fn flows(&self) -> Vec<FlowId> {
        self.conns.iter().map(|c| c.flow).collect()
    }

    /// Tells the nodes their pairings; a node whose secondary lacks its
    /// checkpoint syncs it — for `then(node, secondary)`.
    fn apply(&mut self, pairings: Vec<Pairing>, then: impl Fn(NodeId, NodeId) -> Then) {
        for p in pairings {
            if let Some(r) = self.nodes.get_mut(&p.node) {
                if r.set_pairing(p.secondary, &p.watch, &p.adopt, self.now) {
                    let s = p.secondary.expect("a sync has a secondary");
                    self.jobs.add(p.node, s, then(p.node, s));
                }
            }
        }
        self.carry_out();
    }

    /// Carries out the syncs' orders on the nodes.
    fn carry_out(&mut self) {
        while let Some(o) = self.jobs.poll_order() {
            match o {
                Order::Start { id, from, to } => match self.nodes.get_mut(&from) {
                    Some(r) => r.start_sync(to, self.now),
                    None => self.jobs.refused(id),
                },
                Order::Stop { from } => {
                    if let Some(r) = self.nodes.get_mut(&from) {
                        r.stop_sync();
                    }
                }
            }
        }
    }

    fn send(&mut self, c: usize) {
        let conn = &self.conns[c];
        let (id, first) = match conn.waiting {
            Some((id, _)) => (id, false),
            None => {
                self.next_packet += 1;
                (self.next_packet, true)
            }
        };
        let seq = if first { conn.sent } else { conn.sent - 1 };
        let flow = conn.flow;
        let node = self.ring.route(flow);
        if first {
            self.conns[c].sent += 1;
        }
        self.conns[c].waiting = Some((id, self.now));
        let Some(r) = self.nodes.get_mut(&node) else {
            return; // lost: the node is dead and the router does not know yet
        };
        let held = r.record(flow).map(|x| x.version);
        let change = if seq == 0 {
            held.is_none().then(|| b"syn".to_vec())
        } else {
            if held.is_none() {
                self.report.broken += 1;
                return;
            }
            (seq % 5 == 0).then(|| format!("seq {seq}").into_bytes())
        };
        let made = change.as_ref().map(|_| held.unwrap_or(0) + 1);
        self.packets.insert(id, (c, made, self.now));
        r.on_packet(flow, change, id);
    }

    fn drain(&mut self) {
        let ids: Vec<NodeId> = self.nodes.keys().copied().collect();
        for i in ids {
            while let Some(e) = self.nodes.get_mut(&i).and_then(|r| r.poll_event()) {
                match e {
                    Event::Send { to, msg } => {
                        self.net
                            .push_back((self.now + self.cfg.latency_ns, i, to, msg))
                    }
                    Event::Transmit(p) => self.transmitted(i, p),
                    Event::PeerDown(n) => {
                        let p = self.ring.fail(n);
                        if !p.is_empty() {
                            self.report.failovers += 1;
                        }
                        // its syncs end with it, then the new pairs sync
                        self.jobs.down(n);
                        self.apply(p, |_, _| Then::Stop);
                    }
                    Event::SyncDone { to, .. } => {
                        self.report.syncs += 1;
                        let Some((job, true)) = self.jobs.status(i, to, true) else {
                            continue;
                        };
                        if let Then::HandBack(n) = job.then {
                            // the node back takes half its primary's buckets,
                            // whose flows it now holds
                            self.ring.take_buckets(n);
                            self.jobs.release(job.then);
                            // the moved flows are its own now: it syncs them
                            // to its own secondary
                            let p = self.ring.pairing(n, vec![job.from]);
                            self.apply(vec![p], |_, _| Then::Stop);
                        }
                        self.carry_out();
                    }
                }
            }
        }
    }

    fn transmitted(&mut self, node: NodeId, p: PacketId) {
        let Some((c, made, at)) = self.packets.remove(&p) else {
            return; // a duplicate
        };
        let flow = self.conns[c].flow;
        if let Some(v) = made {
            let holders = self
                .nodes
                .values()
                .filter(|r| r.record(flow).is_some_and(|x| x.version >= v))
                .count();
            if self.nodes[&node].secondary().is_some() {
                assert!(
                    holders >= 2,
                    "packet {p} left with its state on {holders} node(s)"
                );
                self.report.replicated += 1;
                self.lags.push(self.now - at);
            } else {
                self.report.unreplicated += 1;
            }
        }
        *self.report.node_packets.entry(node).or_default() += 1;
        self.report.packets_out += 1;
        let now = self.now;
        let conn = &mut self.conns[c];
        if conn.waiting.is_some_and(|(id, _)| id == p) {
            conn.waiting = None;
            conn.established = true;
            conn.last_tx = now;
            if let Some((k, _)) = &self.affected {
                if now > *k {
                    self.resumed.entry(c).or_insert(now);
                }
            }
        }
    }

    /// One time step.
    pub fn step(&mut self) {
        self.now += self.cfg.step_ns;
        let now = self.now;
        let mut later = VecDeque::new();
        while let Some((at, from, to, msg)) = self.net.pop_front() {
            if at > now {
                later.push_back((at, from, to, msg));
            } else if let Some(r) = self.nodes.get_mut(&to) {
                r.on_message(from, msg, now);
            }
        }
        self.net = later;
        for r in self.nodes.values_mut() {
            r.on_tick(now);
        }
        self.drain();
        let (gap, step) = (self.cfg.gap_ns.max(1), self.cfg.step_ns);
        for c in 0..self.conns.len() {
            let due = match self.conns[c].waiting {
                None => {
                    self.conns[c].sent < self.cfg.packets && now % gap == (c as u64 * step) % gap
                }
                Some((_, at)) => now - at >= self.cfg.retry_ns,
            };
            if due {
                self.send(c);
            }
        }
        self.drain();
    }

    /// Runs until `until_ns`.
    pub fn run_until(&mut self, until_ns: u64) {
        while self.now < until_ns {
            self.step();
        }
    }

    /// Kills node `n` now.
    pub fn kill(&mut self, n: NodeId) {
        let served = (0..self.conns.len())
            .filter(|&c| self.ring.route(self.conns[c].flow) == n)
            .collect();
        self.affected = Some((self.now, served));
        self.nodes.remove(&n);
        self.net.retain(|m| m.2 != n && m.1 != n);
    }

    /// Brings node `n` back now, after node `after` in the ring.
    pub fn revive(&mut self, n: NodeId, after: NodeId) {
        let p = self.ring.join(n, after);
        let Some(mine) = p.iter().find(|x| x.node == n).cloned() else {
            return; // already in the ring
        };
        self.nodes.insert(
            n,
            Replica::new(
                n,
                mine.secondary,
                &mine.watch,
                self.cfg.replica.clone(),
                self.now,
            ),
        );
        // its primary syncs it, and it takes buckets once synced
        self.apply(p.into_iter().filter(|x| x.node != n).collect(), |_, s| {
            if s == n {
                Then::HandBack(n)
            } else {
                Then::Stop
            }
        });
    }

    /// Runs `failure` (if any) within `duration_ns` and reports.
    pub fn run(mut self, failure: Option<Failure>, duration_ns: u64) -> PoolReport {
        if let Some(f) = failure {
            self.run_until(f.at_ns.min(duration_ns));
            if self.nodes.contains_key(&f.node) && self.now < duration_ns {
                let before = self.ring.primary_of(f.node);
                self.kill(f.node);
                if let Some(back) = f.back_ns {
                    self.run_until(back.min(duration_ns));
                    if let Some(b) = before.filter(|b| self.nodes.contains_key(b)) {
                        if self.now < duration_ns {
                            self.revive(f.node, b);
                        }
                    }
                }
            }
        }
        self.run_until(duration_ns);
        self.report()
    }

    /// The report so far.
    pub fn report(&self) -> PoolReport {
        let mut r = self.report.clone();
        let mut lags = self.lags.clone();
        lags.sort_unstable();
        let pick = |q: f64| -> u64 {
            if lags.is_empty() {
                0
            } else {
                lags[((lags.len() - 1) as f64 * q).round() as usize]
            }
        };
        r.lag_ns = [pick(0.5), pick(0.99), lags.last().copied().unwrap_or(0)];
        if let Some((k, served)) = &self.affected {
            r.recovery_ns = served
                .iter()
                .map(|c| self.resumed.get(c).map_or(self.now - k, |t| t - k))
                .max()
                .unwrap_or(0);
        }
        r.finished = self
            .conns
            .iter()
            .filter(|c| c.sent >= self.cfg.packets && c.waiting.is_none())
            .count();
        r.duration_ns = self.now;
        r
    }
}

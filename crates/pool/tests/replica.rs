//! The pool's replication in a simulated network: three nodes, hundreds of
//! connections sending one packet at a time (retrying a lost one, as TCP
//! does), a node killed mid-run, then brought back.
//!
//! - Every packet that made state leaves only once two live nodes hold that
//!   state (unless its node had no secondary).
//! - After the kill, every connection goes on: no packet of an established
//!   connection ever reaches a node without its state (0 broken), and the
//!   connections the dead node served resume within the failure-detection time.
//! - The node that comes back receives its predecessor's checkpoint while
//!   traffic flows, then takes buckets, and still nothing breaks.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};

use pool::replica::{Event, FlowId, Msg, NodeId, PacketId, Replica, ReplicaConfig};
use pool::ring::{Pairing, Ring};

const STEP: u64 = 10_000; // 10 µs
const LATENCY: u64 = 20_000; // one way between nodes
const RETRY: u64 = 1_000_000; // a connection resends a lost packet after 1 ms

struct Conn {
    flow: FlowId,
    /// Packets sent so far (the first is the SYN).
    sent: u64,
    /// The packet in flight and when it was sent.
    waiting: Option<(PacketId, u64)>,
    established: bool,
    /// Last time a packet of it left a node.
    last_tx: u64,
    /// First time a packet of it left a node after the kill.
    resumed: Option<u64>,
}

struct World {
    now: u64,
    nodes: BTreeMap<NodeId, Replica>,
    ring: Ring,
    net: VecDeque<(u64, NodeId, NodeId, Msg)>,
    conns: Vec<Conn>,
    /// packet → (connection, the version of its flow's state it made)
    packets: HashMap<PacketId, (usize, Option<u64>)>,
    next_packet: PacketId,
    broken: u64,
    unreplicated_tx: u64,
    joining: HashSet<NodeId>,
    cfg: ReplicaConfig,
    syncs_done: Vec<(NodeId, u64)>,
    killed_at: Option<u64>,
}

impl World {
    fn new(n: u16, conns: usize) -> World {
        let cfg = ReplicaConfig {
            heartbeat_ns: 500_000,
            dead_after: 3,
            sync_batch: 16,
        };
        let ids: Vec<NodeId> = (0..n).collect();
        let ring = Ring::new(&ids, 64);
        let mut nodes = BTreeMap::new();
        for &i in &ids {
            let p = ring.pairing(i, Vec::new());
            nodes.insert(i, Replica::new(i, p.secondary, &p.watch, cfg.clone(), 0));
        }
        World {
            now: 0,
            nodes,
            ring,
            net: VecDeque::new(),
            conns: (0..conns)
                .map(|i| Conn {
                    flow: (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 7,
                    sent: 0,
                    waiting: None,
                    established: false,
                    last_tx: 0,
                    resumed: None,
                })
                .collect(),
            packets: HashMap::new(),
            next_packet: 0,
            broken: 0,
            unreplicated_tx: 0,
            joining: HashSet::new(),
            cfg,
            syncs_done: Vec::new(),
            killed_at: None,
        }
    }

    fn apply(&mut self, pairings: Vec<Pairing>) {
        for p in pairings {
            if let Some(r) = self.nodes.get_mut(&p.node) {
                r.set_pairing(p.secondary, &p.watch, &p.adopt, self.now);
            }
        }
    }

    /// A connection's next packet (or its retry) reaches the node its flow
    /// routes to, which runs the "NFs": a SYN makes state, every fifth packet
    /// changes it, the others need it.
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
                // a packet of an established connection without its state:
                // the firewall would drop it, the connection is broken
                self.broken += 1;
                return;
            }
            (seq % 5 == 0).then(|| format!("seq {seq}").into_bytes())
        };
        let made = change.as_ref().map(|_| held.unwrap_or(0) + 1);
        self.packets.insert(id, (c, made));
        r.on_packet(flow, change, id);
    }

    fn drain(&mut self) {
        let ids: Vec<NodeId> = self.nodes.keys().copied().collect();
        for i in ids {
            while let Some(e) = self.nodes.get_mut(&i).and_then(|r| r.poll_event()) {
                match e {
                    Event::Send { to, msg } => self.net.push_back((self.now + LATENCY, i, to, msg)),
                    Event::Transmit(p) => self.transmitted(i, p),
                    Event::PeerDown(n) => {
                        let p = self.ring.fail(n);
                        self.apply(p);
                    }
                    Event::SyncDone { to, .. } => {
                        self.syncs_done.push((to, self.now));
                        if self.joining.remove(&to) {
                            let from = self.ring.primary_of(to).expect("a primary");
                            self.ring.take_buckets(to);
                            // the moved flows are the joiner's now: it syncs them on
                            let mut p = self.ring.pairing(to, vec![from]);
                            p.adopt = vec![from];
                            self.apply(vec![p]);
                        }
                    }
                }
            }
        }
    }

    fn transmitted(&mut self, node: NodeId, p: PacketId) {
        let Some((c, made)) = self.packets.remove(&p) else {
            return; // a duplicate (a retry's pong after the retry went through)
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
            } else {
                self.unreplicated_tx += 1;
            }
        }
        let conn = &mut self.conns[c];
        if conn.waiting.is_some_and(|(id, _)| id == p) {
            conn.waiting = None;
            conn.established = true;
            conn.last_tx = self.now;
            if self.killed_at.is_some_and(|k| self.now > k) && conn.resumed.is_none() {
                conn.resumed = Some(self.now);
            }
        }
    }

    fn step(&mut self) {
        self.now += STEP;
        // deliver
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
        // connections: a new packet when the last left, a retry when lost
        for c in 0..self.conns.len() {
            let due = match self.conns[c].waiting {
                None => self.conns[c].sent < 400 && now % 200_000 == (c as u64 * STEP) % 200_000,
                Some((_, at)) => now - at >= RETRY,
            };
            if due {
                self.send(c);
            }
        }
        self.drain();
    }

    fn kill(&mut self, n: NodeId) {
        self.killed_at = Some(self.now);
        self.nodes.remove(&n);
        self.net.retain(|m| m.2 != n && m.1 != n);
    }

    fn revive(&mut self, n: NodeId, after: NodeId) {
        let p = self.ring.join(n, after);
        let mine = p.iter().find(|x| x.node == n).expect("the joiner").clone();
        self.nodes.insert(
            n,
            Replica::new(n, mine.secondary, &mine.watch, self.cfg.clone(), self.now),
        );
        self.joining.insert(n);
        self.apply(p.into_iter().filter(|x| x.node != n).collect());
    }
}

#[test]
fn a_killed_node_breaks_no_connection_and_a_rejoining_one_neither() {
    let mut w = World::new(3, 300);
    // every connection opens and runs
    while w.now < 20_000_000 {
        w.step();
    }
    assert!(w.conns.iter().all(|c| c.established));
    assert_eq!(w.broken, 0);
    // kill -9 the node with the most buckets' flows
    let victim: NodeId = 1;
    let served: Vec<usize> = (0..w.conns.len())
        .filter(|&c| w.ring.route(w.conns[c].flow) == victim)
        .collect();
    assert!(served.len() > 50, "{}", served.len());
    let kill_at = w.now;
    w.kill(victim);
    while w.now < kill_at + 20_000_000 {
        w.step();
    }
    assert_eq!(w.broken, 0, "connections broken by the failure");
    assert!(!w.ring.nodes().contains(&victim));
    // the dead node's connections resumed within detection plus a retry
    let detect = w.cfg.heartbeat_ns * (u64::from(w.cfg.dead_after) + 1);
    let mut worst = 0;
    for &c in &served {
        let at = w.conns[c]
            .resumed
            .unwrap_or_else(|| panic!("connection {c} never resumed"));
        worst = worst.max(at - kill_at);
    }
    assert!(
        worst <= detect + 2 * RETRY,
        "a connection resumed after {worst} ns"
    );
    eprintln!(
        "recovery: the dead node's {} connections resumed within {:.2} ms (detection {:.2} ms)",
        served.len(),
        worst as f64 / 1e6,
        detect as f64 / 1e6
    );
    // everyone's state is on two live nodes again once the syncs are done
    let settled = w.syncs_done.iter().filter(|(_, at)| *at > kill_at).count();
    assert!(settled >= 1, "no bulk sync after the failure");
    for c in &w.conns {
        let holders = w
            .nodes
            .values()
            .filter(|r| r.record(c.flow).is_some())
            .count();
        assert_eq!(holders, 2, "flow {:#x} on {holders} node(s)", c.flow);
    }
    // the node comes back after node 0 (its old predecessor)
    let join_at = w.now;
    w.revive(victim, 0);
    while w.now < join_at + 20_000_000 {
        w.step();
    }
    assert!(w.joining.is_empty(), "the joiner never got its checkpoint");
    assert!(
        w.ring.buckets().contains(&victim),
        "the joiner took no bucket"
    );
    assert_eq!(w.broken, 0, "connections broken by the join");
    let moved = (0..w.conns.len())
        .filter(|&c| w.ring.route(w.conns[c].flow) == victim)
        .count();
    assert!(moved > 0);
    assert!(w.conns.iter().all(|c| c.last_tx > join_at || c.sent >= 400));
    assert_eq!(w.unreplicated_tx, 0);
}

/// Any node, killed at any point of the traffic (mid-handshakes included),
/// then brought back: nothing breaks.
#[test]
fn no_victim_and_no_moment_breaks_a_connection() {
    for victim in 0..3u16 {
        for kill_at in [1_230_000u64, 5_000_000, 12_340_000] {
            let mut w = World::new(3, 120);
            while w.now < kill_at {
                w.step();
            }
            w.kill(victim);
            while w.now < kill_at + 15_000_000 {
                w.step();
            }
            assert_eq!(w.broken, 0, "victim {victim} at {kill_at}");
            let before = (victim + 2) % 3;
            let join_at = w.now;
            w.revive(victim, before);
            while w.now < join_at + 15_000_000 {
                w.step();
            }
            assert_eq!(w.broken, 0, "victim {victim} at {kill_at}, after the join");
            assert!(w.joining.is_empty());
            assert!(w.conns.iter().all(|c| c.established));
        }
    }
}

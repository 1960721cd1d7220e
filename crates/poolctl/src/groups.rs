//! `flowshift pool run --routing groups`: a Sirius pool on this machine. It builds the pool
//! bed (`netio::poolbed`: client — router — N nodes — server, in network
//! namespaces), starts one `flowshift run` per node with the chain and
//! ping-pong replication to the next node (`[pool]`), and is the pool's
//! controller: a heartbeat to every node each period (`pool::detect`), and
//! for a node that misses them, failover as `pool::ring` says — its buckets
//! and NAT pool to its secondary (`PoolBed::redirect`), and its predecessor
//! told to replicate to that secondary from then on. Both then copy their
//! whole tables to their new secondaries (`runtime::bulk`: the heir's adopted
//! flows, the predecessor's flows), so that every flow has two copies again.
//!
//! A node that fails is restarted (`--restart-after`); once it answers, the
//! node holding its buckets copies its table to it by epoch-based bulk sync
//! while traffic flows, and only when that is acknowledged does the node take
//! its buckets and NAT pool back (`Ring::rejoin`, `Ring::hand_back`); its
//! predecessor then replicates and bulk-syncs to it. Runs until Ctrl-C or
//! `--duration`, then stops the nodes and prints the pool's report.

use std::io::Write;
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use netio::poolbed::PoolBed;
use pool::detect::{Detector, Down};
use pool::jobs::{Jobs, Order, Then};
use pool::protocol::Repr;
use pool::ring::Ring;
use serde::Serialize;

use crate::args::RunArgs;
use crate::nodes::{node_config, print_nodes, start_node, sync, write_pool_key, Nodes};

/// A failover, ms since the pool was up.
#[derive(Clone, Debug, Serialize)]
pub struct Failover {
    pub node: usize,
    /// Why: `gone` (its heartbeat port refused: no process) or `silent`.
    pub why: &'static str,
    /// Its last answer.
    pub last_seen_ms: f64,
    /// Found down.
    pub detected_ms: f64,
    /// Its buckets and NAT pool reach its secondary.
    pub redirected_ms: f64,
    /// Its predecessor replicates to its secondary.
    pub re_ringed_ms: f64,
    /// The node that took its flows.
    pub heir: usize,
}

/// A bulk sync, ms since the pool was up.
#[derive(Clone, Debug, Serialize)]
pub struct Sync {
    pub from: usize,
    pub to: usize,
    /// Why: `hand-back` (before `to` takes its buckets back), or
    /// `new-secondary`.
    pub purpose: &'static str,
    pub ordered_ms: f64,
    /// Every entry copied and acknowledged (none: never finished).
    pub done_ms: Option<f64>,
    /// Copies sent (entries, with the changes copied while it ran).
    pub copies: u64,
}

/// A failed node back in the pool, ms since the pool was up.
#[derive(Clone, Debug, Serialize)]
pub struct Rejoin {
    pub node: usize,
    /// The node that held its buckets, and synced it.
    pub from: usize,
    /// Its process restarted (none: it had not stopped).
    pub restarted_ms: Option<f64>,
    /// It answered again.
    pub answered_ms: f64,
    /// Its table was synced.
    pub synced_ms: f64,
    /// Its buckets and NAT pool were back at it.
    pub handed_back_ms: f64,
}

/// A spare node that joined, ms since the pool was up.
#[derive(Clone, Debug, Serialize)]
pub struct Join {
    pub node: usize,
    /// Every node ordered to sync its table to it.
    pub ordered_ms: f64,
    /// All of them done.
    pub synced_ms: f64,
    /// In the router's groups.
    pub joined_ms: f64,
    /// Buckets the kernel gave it (of each group).
    pub buckets: usize,
}

/// The pool's report.
#[derive(Debug, Serialize)]
pub struct PoolReport {
    pub nodes: usize,
    /// Each node's buckets of the router's groups when the pool came up (in
    /// proportion to `--weights`): its share of the flows as their primary.
    pub start_buckets: Vec<usize>,
    /// Each node's run report (`null` for a node that was killed and did
    /// not come back).
    pub node_reports: Vec<serde_json::Value>,
    pub failovers: Vec<Failover>,
    pub rejoins: Vec<Rejoin>,
    pub joins: Vec<Join>,
    pub syncs: Vec<Sync>,
    /// Each node's longest silence while it was up, ms: how many missed
    /// heartbeats (`--missed`) this machine needs to take no live node for
    /// dead.
    pub longest_silence_ms: Vec<f64>,
    /// Answers the controller refused (not sealed with the pool's key,
    /// stale or replayed).
    pub refused_answers: u64,
}

/// Rounds between two looks at a node's process flags (`/proc/PID/stat`).
const EXIT_CHECK: u64 = 5;

/// True if process `pid` is exiting (`PF_EXITING` in its flags: set as a
/// killed process starts to die, before its memory and sockets are gone).
fn exiting(pid: u32) -> bool {
    /// `PF_EXITING`.
    const PF_EXITING: u64 = 0x4;
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // after the command's name in parentheses: state, ppid, pgrp, session,
    // tty, tpgid, flags
    stat.rsplit_once(") ")
        .and_then(|(_, rest)| rest.split_whitespace().nth(6))
        .and_then(|f| f.parse::<u64>().ok())
        .is_some_and(|f| f & PF_EXITING != 0)
}

/// A node starting, or found down, is heartbeaten every this many rounds.
const SLOW_BEAT: u64 = 50;

/// What a node's replication port said to the controller.
enum Answer {
    Alive(usize),
    /// A bulk sync's status: node, done, copies sent, its target.
    Bulk(usize, bool, u64, Option<SocketAddr>),
}

fn answer(d: &[u8], from: SocketAddr, nodes: usize) -> Option<Answer> {
    let i = (0..nodes).find(|i| sync(*i) == from)?;
    match pool::protocol::parse(d).ok()? {
        Repr::Alive => Some(Answer::Alive(i)),
        Repr::BulkStatus { done, sent, to, .. } => Some(Answer::Bulk(i, done, sent, to)),
        _ => None,
    }
}

/// A failed node on its way back.
struct Back {
    restarted: Option<Duration>,
    answered: Option<Duration>,
    synced: Option<(usize, Duration)>,
}

/// The pool's controller: heartbeats, failovers, restarts, bulk syncs and
/// rejoins, over the bed's router and the nodes' replication ports.
struct Controller<'a> {
    a: &'a RunArgs,
    bed: &'a PoolBed,
    sock: UdpSocket,
    /// Per node, a socket connected to its heartbeat port: its answers, and
    /// the kernel's port unreachable once no process listens there.
    hb: Vec<UdpSocket>,
    /// Seals the controller's messages with the pool's key, opens the
    /// answers (`pool::auth`); answers that do not open are counted.
    seal: pool::auth::Seal,
    open: pool::auth::Open,
    refused: u64,
    nodes: Nodes,
    det: Detector,
    ring: Ring,
    /// Which node's links each node's buckets point at now.
    carrier: Vec<usize>,
    restart_after: Option<Duration>,
    /// Per node: found down at, its last answer, and its way back.
    down_at: Vec<Option<Duration>>,
    heard: Vec<Option<Duration>>,
    back: Vec<Option<Back>>,
    /// The bulk syncs (`pool::jobs`; a sync's number is its index in
    /// `syncs`).
    jobs: Jobs,
    /// The groups' members (a failed node stays one: its nexthops point at
    /// its heir).
    members: Vec<usize>,
    /// Nodes started idle, not in the groups or the ring yet.
    spare: Vec<bool>,
    /// The spare joining now, and when that began.
    joining: Option<(usize, Duration)>,
    failovers: Vec<Failover>,
    rejoins: Vec<Rejoin>,
    joins: Vec<Join>,
    syncs: Vec<Sync>,
    /// Each node's longest silence while up, ns.
    longest_silence: Vec<u64>,
    /// Heartbeat rounds so far.
    round: u64,
    t0: Instant,
    /// Standard error is a terminal: the status line is rewritten in place.
    tty: bool,
    /// In a log: the status last written, and when (s).
    shown: Option<(String, f64)>,
}

/// The wall clock, µs (what pool messages are stamped with).
fn now_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

impl Controller<'_> {
    fn now(&self) -> Duration {
        self.t0.elapsed()
    }

    fn say(&self, what: String) {
        if self.tty {
            // over the status line
            eprint!("\r{:100}\r", "");
        }
        println!("flowshift pool: {what}");
        let _ = std::io::stdout().flush();
    }

    /// Sends `what` to node `i` until it answers (or `tries` are spent).
    fn order(&mut self, i: usize, what: Repr, tries: u32) -> bool {
        let mut buf = [0u8; 256];
        let what = what.to_vec();
        for _ in 0..tries {
            let sealed = self.seal.sealed(now_us(), &what);
            let _ = self.sock.send_to(&sealed, sync(i));
            let until = Instant::now() + Duration::from_millis(5);
            while Instant::now() < until {
                match self.sock.recv_from(&mut buf) {
                    Ok((n, from)) => match self.answer(&buf[..n], from) {
                        Some(Answer::Alive(j)) if j == i => return true,
                        Some(a) => self.take(a),
                        None => {}
                    },
                    Err(_) => std::thread::sleep(Duration::from_micros(100)),
                }
            }
        }
        false
    }

    /// Datagram `d` from `from` opened and read, or `None` (a refusal
    /// counted, or not an answer).
    fn answer(&mut self, d: &[u8], from: SocketAddr) -> Option<Answer> {
        match self.open.open(now_us(), d) {
            Ok(body) => answer(body, from, self.total()),
            Err(_) => {
                self.refused += 1;
                None
            }
        }
    }

    /// Heartbeats every node, then takes answers in for one period.
    fn beat(&mut self, period: Duration) -> anyhow::Result<()> {
        self.det.beat(self.now().as_nanos() as u64);
        self.round += 1;
        for i in 0..self.total() {
            let watched = self.det.last(i as u16).is_some() && !self.det.is_down(i as u16);
            if watched {
                // a process seen to exit is gone, whatever the network says
                if let Some(c) = self.nodes.0[i].as_mut() {
                    // exiting (its memory being torn down can take hundreds
                    // of ms on a loaded machine, before its sockets close and
                    // refuse) or exited
                    let exiting = self.round.is_multiple_of(EXIT_CHECK) && exiting(c.id());
                    if exiting || c.try_wait()?.is_some() {
                        self.det.exited(i as u16);
                    }
                }
            } else if !self.round.is_multiple_of(SLOW_BEAT) {
                // a node starting or down is asked now and then: each of its
                // refusals spends a token of the kernel's ICMP rate limit,
                // which the refusals that find it gone later need
                continue;
            }
            let beat = self.seal.sealed(now_us(), &Repr::Heartbeat.to_vec());
            if let Err(e) = self.hb[i].send(&beat) {
                // (the refusal of an earlier heartbeat, reported now)
                self.refusal(i, &e);
            }
        }
        for (from, _) in self.jobs.running() {
            let from = usize::from(from);
            let q = self.seal.sealed(now_us(), &Repr::BulkQuery.to_vec());
            let _ = self.sock.send_to(&q, sync(from));
        }
        let until = Instant::now() + period;
        let mut buf = [0u8; 256];
        while Instant::now() < until {
            let mut got = false;
            while let Ok((n, from)) = self.sock.recv_from(&mut buf) {
                got = true;
                if let Some(a) = self.answer(&buf[..n], from) {
                    self.take(a);
                }
            }
            for i in 0..self.total() {
                match self.hb[i].recv(&mut buf) {
                    Ok(n) => {
                        got = true;
                        match self.open.open(now_us(), &buf[..n]) {
                            Ok(b) if pool::protocol::parse(b) == Ok(Repr::Alive) => {
                                self.take(Answer::Alive(i))
                            }
                            Ok(_) => {}
                            Err(_) => self.refused += 1,
                        }
                    }
                    Err(e) => self.refusal(i, &e),
                }
            }
            if !got {
                std::thread::sleep(Duration::from_micros(50));
            }
        }
        // what the answers made the syncs order (a finished one's stop, the
        // next one's start)
        self.carry_out();
        Ok(())
    }

    /// A heartbeat socket's error: port unreachable is a node whose process
    /// is gone.
    fn refusal(&mut self, i: usize, e: &std::io::Error) {
        if e.kind() == std::io::ErrorKind::ConnectionRefused {
            self.det.refused(i as u16);
        }
    }

    fn take(&mut self, a: Answer) {
        let now = self.now();
        match a {
            Answer::Alive(i) => {
                self.det.alive(i as u16, now.as_nanos() as u64);
                self.heard[i] = Some(now);
                if let Some(b) = self.back[i].as_mut() {
                    b.answered.get_or_insert(now);
                }
            }
            Answer::Bulk(i, done, copies, to) => {
                let Some(to) = (0..self.total()).find(|&n| to == Some(sync(n))) else {
                    return;
                };
                let Some((job, finished)) = self.jobs.status(i as u16, to as u16, done) else {
                    return;
                };
                self.syncs[job.id].copies = copies;
                if finished {
                    self.syncs[job.id].done_ms = Some(ms(now));
                    if let Then::HandBack(n) = job.then {
                        if let Some(b) = self.back[usize::from(n)].as_mut() {
                            b.synced = Some((i, now));
                        }
                    }
                }
            }
        }
    }

    fn total(&self) -> usize {
        self.a.nodes + self.a.spares
    }

    /// `from` is to copy its table to `to`, then `then`: ordered now, or
    /// once `from` is done with the syncs before it (`pool::jobs`).
    fn bulk(&mut self, from: usize, to: usize, then: Then) {
        self.syncs.push(Sync {
            from,
            to,
            purpose: then.purpose(),
            ordered_ms: ms(self.now()),
            done_ms: None,
            copies: 0,
        });
        let id = self.jobs.add(from as u16, to as u16, then);
        debug_assert_eq!(id + 1, self.syncs.len(), "a sync's number is its report's");
        self.carry_out();
    }

    /// Carries out the syncs' orders (an order waits for its answer and
    /// takes other answers in meanwhile, which may add orders: they are
    /// carried out here too).
    fn carry_out(&mut self) {
        while let Some(o) = self.jobs.poll_order() {
            match o {
                Order::Start { id, from, to } => {
                    let (from, to) = (usize::from(from), usize::from(to));
                    if !self.order(from, Repr::BulkStart { to: sync(to) }, 20) {
                        eprintln!(
                            "flowshift pool: node {from} did not take the order to sync node {to}"
                        );
                        self.jobs.refused(id);
                    }
                }
                Order::Stop { from } => {
                    self.order(usize::from(from), Repr::BulkStop, 20);
                }
            }
        }
    }

    /// Ends the held syncs that waited for `then`: their sources stop
    /// copying.
    fn release(&mut self, then: Then) {
        self.jobs.release(then);
        self.carry_out();
    }

    /// Tells each node in `pairings` its secondary; a node whose secondary
    /// is new (`fresh`) copies its table there.
    fn re_ring(&mut self, pairings: &[pool::ring::Pairing], skip: usize, fresh: usize) {
        for p in pairings.iter().filter(|p| usize::from(p.node) != skip) {
            if let Some(s) = p.secondary {
                let (n, s) = (usize::from(p.node), usize::from(s));
                if !self.order(n, Repr::NewSecondary { to: sync(s) }, 20) {
                    eprintln!("flowshift pool: node {n} did not take its new secondary");
                } else if s == fresh {
                    self.bulk(n, s, Then::Stop);
                }
            }
        }
    }

    fn fail(&mut self, dead: u16, why: Down) -> anyhow::Result<()> {
        // (before anything here takes in an answer)
        let detected = self.now();
        let last_seen_ms = self.det.last(dead).map_or(0.0, |t| t as f64 / 1e6);
        let d = usize::from(dead);
        self.down_at[d] = Some(detected);
        self.back[d] = None;
        // its syncs end with it; those to it stop
        self.jobs.down(dead);
        if self.joining.is_some_and(|(n, _)| n == d) {
            self.joining = None;
        }
        self.carry_out();
        if !self.ring.nodes().contains(&dead) {
            self.say(format!("spare node {d} down"));
            return Ok(());
        }
        let pairings = self.ring.fail(dead);
        let Some(heir) = pairings.iter().find(|p| p.adopt.contains(&dead)) else {
            eprintln!("flowshift pool: node {d} is down and no node is left to take over");
            return Ok(());
        };
        let heir = usize::from(heir.node);
        for n in 0..self.carrier.len() {
            if self.carrier[n] == d {
                self.bed
                    .redirect(n, heir)
                    .with_context(|| format!("redirecting node {n} to {heir}"))?;
                self.carrier[n] = heir;
            }
        }
        let redirected = self.now();
        self.re_ring(&pairings, heir, heir);
        let f = Failover {
            node: d,
            why: match why {
                Down::Gone => "gone",
                Down::Silent { .. } => "silent",
            },
            last_seen_ms,
            detected_ms: ms(detected),
            redirected_ms: ms(redirected),
            re_ringed_ms: ms(self.now()),
            heir,
        };
        let why = match why {
            Down::Gone => "its process is gone".to_string(),
            Down::Silent { rounds } => format!("silent for {rounds} heartbeats"),
        };
        self.say(format!(
            "node {d} down, {why} (last answer at {:.1} ms): found after {:.1} ms, \
             its buckets at node {heir} after {:.1} ms, re-ringed after {:.1} ms",
            f.last_seen_ms,
            f.detected_ms - f.last_seen_ms,
            f.redirected_ms - f.last_seen_ms,
            f.re_ringed_ms - f.last_seen_ms
        ));
        self.failovers.push(f);
        // the heir's adopted flows are on it alone: to its secondary
        if let Some(s) = self.ring.secondary_of(heir as u16) {
            self.bulk(heir, usize::from(s), Then::Stop);
        }
        Ok(())
    }

    /// Restarts failed nodes when due, starts the sync of those that
    /// answer again, and hands their buckets back once synced.
    fn rejoin(&mut self) -> anyhow::Result<()> {
        let now = self.now();
        for n in 0..self.total() {
            let Some(down) = self.down_at[n] else {
                continue;
            };
            let exited = match self.nodes.0[n].as_mut() {
                Some(c) => c.try_wait()?.is_some(),
                None => true,
            };
            if self.back[n].is_none() {
                let heard = self.heard[n].filter(|&t| t > down);
                let due = self.restart_after.is_some_and(|r| now >= down + r);
                if let (false, Some(t)) = (exited, heard) {
                    // found down while alive (busy), and answering again:
                    // synced and given its buckets back the same way
                    self.back[n] = Some(Back {
                        restarted: None,
                        answered: Some(t),
                        synced: None,
                    });
                } else if exited && due {
                    self.nodes.0[n] = Some(start_node(self.bed, &self.a.out, self.a.workers, n)?);
                    self.say(format!("node {n} restarted"));
                    self.back[n] = Some(Back {
                        restarted: Some(now),
                        answered: None,
                        synced: None,
                    });
                } else if !exited && due {
                    // neither gone nor answering: hung; restarted next round
                    if let Some(c) = self.nodes.0[n].as_mut() {
                        let _ = c.kill();
                        let _ = c.wait();
                    }
                    self.say(format!("node {n} hangs: killed"));
                }
                continue;
            }
            if exited {
                // the process ended on its way back (before it answered, or
                // killed after): down again, restarted when due
                self.back[n] = None;
                self.down_at[n] = Some(now);
                continue;
            }
            let b = self.back[n].as_ref().expect("on its way back");
            let restarted = b.restarted;
            if self.spare[n] {
                // a spare holds nothing: back as soon as it answers
                if b.answered.is_some() {
                    self.det.revive(n as u16, now.as_nanos() as u64);
                    self.down_at[n] = None;
                    self.back[n] = None;
                    self.say(format!("spare node {n} back"));
                }
                continue;
            }
            match (b.answered, b.synced) {
                (Some(_), None) if self.jobs.synced(Then::HandBack(n as u16)).is_none() => {
                    let from = self.carrier[n];
                    if from == n || self.down_at[from].is_some() {
                        // no live node holds the flows of its buckets: it
                        // takes them back with what its own table holds
                        self.say(format!(
                            "node {n} answers and no live node holds its buckets: \
                             it takes them back as they are"
                        ));
                        if let Some(b) = self.back[n].as_mut() {
                            b.synced = Some((n, now));
                        }
                        continue;
                    }
                    self.say(format!(
                        "node {n} answers: node {from} syncs its table to it"
                    ));
                    self.bulk(from, n, Then::HandBack(n as u16));
                }
                (Some(answered), Some((from, synced))) => {
                    self.bed
                        .redirect(n, n)
                        .with_context(|| format!("handing node {n}'s buckets back"))?;
                    self.carrier[n] = n;
                    let handed = self.now();
                    self.release(Then::HandBack(n as u16));
                    let pairings = self.ring.rejoin(n as u16);
                    self.ring.hand_back(n as u16);
                    self.det.revive(n as u16, handed.as_nanos() as u64);
                    self.down_at[n] = None;
                    self.back[n] = None;
                    // its predecessor replicates, and syncs, to it; it to its
                    // secondary (whatever its config said)
                    self.re_ring(&pairings, usize::MAX, n);
                    self.rejoins.push(Rejoin {
                        node: n,
                        from,
                        restarted_ms: restarted.map(ms),
                        answered_ms: ms(answered),
                        synced_ms: ms(synced),
                        handed_back_ms: ms(handed),
                    });
                    self.say(format!(
                        "node {n} rejoined: synced by node {from} {:.1} ms after it answered, \
                         its buckets back after {:.1} ms more",
                        ms(synced) - ms(answered),
                        ms(handed) - ms(synced)
                    ));
                }
                _ => {}
            }
        }
        Ok(())
    }
}

impl Controller<'_> {
    /// The next spare joins: every node in the ring syncs its table to it.
    fn start_join(&mut self) {
        if self.joining.is_some() {
            return;
        }
        let Some(n) = (0..self.total()).find(|&n| self.spare[n] && self.down_at[n].is_none())
        else {
            return;
        };
        self.joining = Some((n, self.now()));
        self.say(format!(
            "spare node {n} joins: every node syncs its table to it"
        ));
        for m in self.ring.nodes().to_vec() {
            self.bulk(usize::from(m), n, Then::Join(n as u16));
        }
    }

    /// Once every node has synced the joining spare, it joins the groups
    /// (the kernel gives it buckets from every member) and the ring.
    fn finish_join(&mut self) -> anyhow::Result<()> {
        let Some((n, ordered)) = self.joining else {
            return Ok(());
        };
        match self.jobs.synced(Then::Join(n as u16)) {
            // its sources failed, or did not take the order
            None => {
                self.joining = None;
                return Ok(());
            }
            Some(false) => return Ok(()),
            Some(true) => {}
        }
        let synced = self.now();
        self.members.push(n);
        self.bed
            .set_members(&self.members)
            .with_context(|| format!("adding node {n} to the groups"))?;
        let joined = self.now();
        self.release(Then::Join(n as u16));
        self.spare[n] = false;
        self.joining = None;
        let after = *self.ring.nodes().last().expect("a live node");
        let pairings = self.ring.join(n as u16, after);
        self.re_ring(&pairings, usize::MAX, n);
        let buckets = self
            .bed
            .bucket_nodes()
            .map(|(front, _)| front.iter().filter(|&&x| x == n).count())
            .unwrap_or(0);
        self.say(format!(
            "node {n} joined: synced by every node {:.1} ms after it was ordered, \
             {buckets} buckets after {:.1} ms more",
            ms(synced) - ms(ordered),
            ms(joined) - ms(synced)
        ));
        self.joins.push(Join {
            node: n,
            ordered_ms: ms(ordered),
            synced_ms: ms(synced),
            joined_ms: ms(joined),
            buckets,
        });
        Ok(())
    }
}

/// `pool run`'s flags, checked: the groups controller's durations and the
/// pool's size.
struct Checked {
    duration: Option<Duration>,
    join_after: Duration,
    restart_after: Option<Duration>,
    weights: Vec<u8>,
    total: usize,
}

fn check(a: &RunArgs) -> anyhow::Result<Checked> {
    if a.plan.is_some() {
        bail!("--plan places tenants by the routes nodes announce: it needs --routing bgp");
    }
    if a.spill_capacity.is_some() {
        bail!("--spill-capacity spills a node's tenants to another pair: it needs --routing bgp");
    }
    let join_after = humantime::parse_duration(&a.join_after)
        .with_context(|| format!("--join-after {}", a.join_after))?;
    let total = a.nodes + a.spares;
    if total > 16 {
        bail!("--nodes plus --spares: at most 16 nodes");
    }
    let weights = weights(a.weights.as_deref(), a.nodes)?;
    let restart_after = match a.restart_after.as_str() {
        "off" => None,
        d => Some(
            humantime::parse_duration(d)
                .with_context(|| format!("--restart-after {d} (a duration, or `off`)"))?,
        ),
    };
    Ok(Checked {
        duration: None,
        join_after,
        restart_after,
        weights,
        total,
    })
}

/// The controller's sockets on the sync network, in the router's namespace:
/// one for orders and answers, one connected to each node for heartbeats.
fn controller_sockets(bed: &PoolBed, total: usize) -> anyhow::Result<(UdpSocket, Vec<UdpSocket>)> {
    let router = bed.router();
    std::thread::scope(|s| {
        s.spawn(|| -> anyhow::Result<(UdpSocket, Vec<UdpSocket>)> {
            netio::netns::enter(&router)?;
            let bind = || -> std::io::Result<UdpSocket> {
                let sock = UdpSocket::bind(("10.77.0.254", 0))?;
                sock.set_nonblocking(true)?;
                Ok(sock)
            };
            let hb = (0..total)
                .map(|i| {
                    let h = bind()?;
                    h.connect(sync(i))?;
                    Ok(h)
                })
                .collect::<std::io::Result<Vec<_>>>()?;
            Ok((bind()?, hb))
        })
        .join()
        .expect("binding thread")
    })
}

/// `pool run --routing groups`: the pool with this controller.
pub fn run(a: &RunArgs, duration: Option<Duration>) -> anyhow::Result<()> {
    let ck = Checked {
        duration,
        ..check(a)?
    };
    let total = ck.total;
    std::fs::create_dir_all(&a.out).with_context(|| a.out.display().to_string())?;
    // every message between the nodes and the controller is sealed with it
    let (key_file, key) = write_pool_key(&a.out)?;
    let key_file = std::fs::canonicalize(&key_file)?;
    for i in 0..total {
        node_config(a.config.as_deref(), i, total, true, Some(&key_file))?
            .write(&a.out.join(format!("node{i}.toml")))?;
        for old in ["json", "log"] {
            let _ = std::fs::remove_file(a.out.join(format!("node{i}.{old}")));
        }
    }
    let stop = launch::run::stop_on_signals()?;
    let bed = PoolBed::up_weighted(&a.prefix, total, a.buckets, &ck.weights)
        .context("building the pool bed (needs root: network namespaces)")?;
    if a.spares > 0 {
        // the spares wait outside the groups
        bed.set_members(&(0..a.nodes).collect::<Vec<_>>())?;
    }
    let start_buckets: Vec<usize> = bed
        .bucket_nodes()
        .map(|(front, _)| {
            (0..a.nodes)
                .map(|n| front.iter().filter(|&&b| b == n).count())
                .collect()
        })
        .unwrap_or_default();
    println!(
        "flowshift pool: buckets per node at the start: {:?} (of {})",
        start_buckets, a.buckets
    );
    let mut nodes = Nodes(Vec::new());
    for i in 0..total {
        nodes.0.push(Some(start_node(&bed, &a.out, a.workers, i)?));
    }
    let (sock, hb) = controller_sockets(&bed, total)?;
    let period = Duration::from_micros(a.heartbeat_us);
    let mut c = Controller {
        a,
        bed: &bed,
        sock,
        hb,
        seal: pool::auth::Seal::new(key.clone(), rand::random()),
        open: pool::auth::Open::new(Some(&key), now_us()),
        refused: 0,
        nodes,
        det: Detector::new(total, period.as_nanos() as u64, a.missed),
        ring: Ring::new(&(0..a.nodes as u16).collect::<Vec<_>>(), a.buckets),
        carrier: (0..total).collect(),
        restart_after: ck.restart_after,
        down_at: vec![None; total],
        heard: vec![None; total],
        back: (0..total).map(|_| None).collect(),
        jobs: Jobs::new(),
        members: (0..a.nodes).collect(),
        spare: (0..total).map(|i| i >= a.nodes).collect(),
        joining: None,
        failovers: Vec::new(),
        rejoins: Vec::new(),
        joins: Vec::new(),
        syncs: Vec::new(),
        longest_silence: vec![0; total],
        round: 0,
        t0: Instant::now(),
        tty: std::io::IsTerminal::is_terminal(&std::io::stderr()),
        shown: None,
    };
    c.serve(&stop, period, &ck)?;
    let reports = c.stop_nodes();
    let report = PoolReport {
        nodes: total,
        start_buckets,
        node_reports: reports,
        failovers: c.failovers,
        rejoins: c.rejoins,
        joins: c.joins,
        syncs: c.syncs,
        longest_silence_ms: c
            .longest_silence
            .iter()
            .map(|&ns| ns as f64 / 1e6)
            .collect(),
        refused_answers: c.refused,
    };
    print_report(&report);
    if let Some(p) = &a.json {
        launch::output::json(p, &report)?;
    }
    drop(bed);
    Ok(())
}

impl Controller<'_> {
    /// Heartbeats, failovers, rejoins and joins until `stop` or the run's
    /// duration; a status line each second.
    fn serve(
        &mut self,
        stop: &runtime::Stop,
        period: Duration,
        ck: &Checked,
    ) -> anyhow::Result<()> {
        let a = self.a;
        let mut up_at: Option<Instant> = None;
        let mut next_status = Instant::now();
        let mut joins_ordered = 0u32;
        while !stop.0.load(Ordering::Relaxed) {
            if up_at.is_none() && self.now() > Duration::from_secs(30) {
                bail!(
                    "the nodes did not answer within 30 s (see {}/node*.log)",
                    a.out.display()
                );
            }
            if let (Some(u), Some(d)) = (up_at, ck.duration) {
                if u.elapsed() >= d {
                    break;
                }
            }
            self.beat(period)?;
            if up_at.is_none() && self.det.all_up() {
                up_at = Some(Instant::now());
                self.say_up(ck.total);
            }
            let now = self.now().as_nanos() as u64;
            for (i, l) in self.longest_silence.iter_mut().enumerate() {
                *l = (*l).max(self.det.silence(i as u16, now).unwrap_or(0));
            }
            for (dead, why) in self.det.check(now) {
                self.fail(dead, why)?;
            }
            self.rejoin()?;
            if let Some(u) = up_at {
                if self.spare.iter().any(|&s| s)
                    && u.elapsed() >= ck.join_after * (joins_ordered + 1)
                {
                    joins_ordered += 1;
                    self.start_join();
                }
            }
            self.finish_join()?;
            if up_at.is_some() && Instant::now() >= next_status {
                next_status = Instant::now() + Duration::from_secs(1);
                self.status(ck.total);
            }
        }
        if self.tty {
            eprintln!();
        }
        Ok(())
    }

    /// Says the pool is up and how to send traffic through it.
    fn say_up(&self, total: usize) {
        let bed = self.bed;
        self.say(format!(
            "{} nodes up ({} spare); traffic from the client namespace `{}` \
             (10.0.0.2) to the server `{}` (198.51.100.2); Ctrl-C to stop",
            total,
            self.a.spares,
            bed.client(),
            bed.server()
        ));
        self.say(format!(
            "no server is started: run one, e.g. `ip netns exec {} python3 -m http.server \
             8080 --bind 198.51.100.2`, and send from the client: `ip netns exec {} curl \
             http://198.51.100.2:8080/`",
            bed.server(),
            bed.client()
        ));
    }

    /// The status line: each node's state and the counts so far — on a
    /// terminal rewritten in place every second, in a log a line when it
    /// changes and every 10 s.
    fn status(&mut self, total: usize) {
        let live: Vec<String> = (0..total)
            .map(|i| {
                let s = match (&self.down_at[i], &self.back[i]) {
                    (None, _) if self.spare[i] => "spare",
                    (None, _) => "up",
                    (Some(_), None) => "down",
                    (Some(_), Some(_)) => "rejoining",
                };
                format!("n{i} {s}")
            })
            .collect();
        let state = format!(
            "{}  failovers {}  rejoins {}  syncs running {}",
            live.join("  "),
            self.failovers.len(),
            self.rejoins.len(),
            self.jobs.jobs().len()
        );
        let t = ms(self.now()) / 1e3;
        if self.tty {
            eprint!("\r{t:8.1} s  {state}   ");
        } else if self
            .shown
            .as_ref()
            .is_none_or(|(s, at)| *s != state || t - at >= 10.0)
        {
            eprintln!("{t:8.1} s  {state}");
            self.shown = Some((state, t));
        }
    }

    /// Stops every node (SIGINT: each ends with its report) and reads their
    /// reports (null for a node that wrote none).
    fn stop_nodes(&mut self) -> Vec<serde_json::Value> {
        let mut reports = Vec::new();
        for (i, (st, r)) in self.nodes.stop(&self.a.out).into_iter().enumerate() {
            if r.is_null() && self.down_at[i].is_none() {
                eprintln!("flowshift pool: node {i} ended ({st}) without a report (see its log)");
            }
            reports.push(r);
        }
        reports
    }
}

/// `--weights`: one weight (1..=255) per node, or 1 each.
fn weights(text: Option<&str>, nodes: usize) -> anyhow::Result<Vec<u8>> {
    let Some(t) = text else {
        return Ok(vec![1; nodes]);
    };
    let w: Vec<u8> = t
        .split(',')
        .map(|x| {
            x.trim()
                .parse::<u8>()
                .ok()
                .filter(|w| *w > 0)
                .ok_or_else(|| anyhow::anyhow!("--weights: `{x}` is not a weight from 1 to 255"))
        })
        .collect::<anyhow::Result<_>>()?;
    anyhow::ensure!(
        w.len() == nodes,
        "--weights: {} weights for {nodes} nodes",
        w.len()
    );
    Ok(w)
}

fn print_report(r: &PoolReport) {
    print_nodes(&r.node_reports);
    if r.refused_answers > 0 {
        println!(
            "answers refused by the controller (bad seal, stale, replayed): {}",
            r.refused_answers
        );
    }
    println!(
        "longest silence of a node while up, ms: {}",
        r.longest_silence_ms
            .iter()
            .map(|m| format!("{m:.1}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    for f in &r.failovers {
        println!(
            "failover: node {} ({}) → node {}: found {:.1} ms after its last answer, \
             traffic at node {} after {:.1} ms",
            f.node,
            f.why,
            f.heir,
            f.detected_ms - f.last_seen_ms,
            f.heir,
            f.redirected_ms - f.last_seen_ms
        );
    }
    for y in &r.syncs {
        match y.done_ms {
            Some(d) => println!(
                "sync ({}): node {} → node {}: {} copies in {:.1} ms",
                y.purpose,
                y.from,
                y.to,
                y.copies,
                d - y.ordered_ms
            ),
            None => println!(
                "sync ({}): node {} → node {}: {} copies, not finished",
                y.purpose, y.from, y.to, y.copies
            ),
        }
    }
    for j in &r.joins {
        println!(
            "join: node {} synced by every node in {:.1} ms, {} buckets {:.1} ms later",
            j.node,
            j.synced_ms - j.ordered_ms,
            j.buckets,
            j.joined_ms - j.synced_ms
        );
    }
    for j in &r.rejoins {
        println!(
            "rejoin: node {} synced by node {} {:.1} ms after it answered, \
             its buckets back {:.1} ms later",
            j.node,
            j.from,
            j.synced_ms - j.answered_ms,
            j.handed_back_ms - j.synced_ms
        );
    }
}

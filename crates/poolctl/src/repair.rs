//! The pool on BGP heals after a failure: what its controller provisions
//! (Sirius: new pairs and bulk-sync orders), never what a failover waits
//! for — the failover itself is the nodes' and the router's.
//!
//! When the router's session with node d goes down (the node is gone: a
//! node that loses its session withdraws for good), `pool::ring` says who
//! pairs with whom: d's secondary s holds d's flows (it took d's prefixes,
//! promoted), and d's predecessor p has lost its secondary. The controller
//! then tells p to replicate to s and s to watch p (`Repr::NewSecondary`,
//! `Repr::NewPrimary`; s stays promoted for good for what it took over),
//! has s's BIRD announce what p holds as backup and s's secondary announce
//! what s took over as backup (`backup<k>`, provisioned disabled in every
//! node's configuration: no configuration is read again), and orders the
//! bulk syncs that make every flow two-fold again (p → s, s → its
//! secondary; `pool::jobs`). Until then a further failure of p or s would
//! lose flows; after, the pool is a ring of pairs again, one node shorter.

use std::net::UdpSocket;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use netio::bird::Control;
use netio::poolbed::PoolBed;
use pool::jobs::{Jobs, Order, Then};
use pool::protocol::Repr;
use pool::ring::Ring;
use serde::Serialize;

use crate::layout::{adoptable, Layout};
use crate::nodes::sync;

/// A re-pairing, ms since the nodes were started.
#[derive(Clone, Debug, Serialize)]
pub struct RePair {
    /// The node gone.
    pub node: usize,
    /// Its secondary, which took its prefixes and flows.
    pub heir: usize,
    /// Its predecessor, which replicates to the heir from then on.
    pub predecessor: usize,
    pub at_ms: f64,
    /// Every order carried out (the syncs ordered, not yet done).
    pub ordered_ms: f64,
}

/// A bulk sync the re-pairing ordered.
#[derive(Clone, Debug, Serialize)]
pub struct Synced {
    pub from: usize,
    pub to: usize,
    pub ordered_ms: f64,
    /// Every entry copied and acknowledged (none: never finished).
    pub done_ms: Option<f64>,
    pub copies: u64,
}

/// The controller's re-pairing.
pub struct Repair {
    sock: UdpSocket,
    seal: pool::auth::Seal,
    open: pool::auth::Open,
    ring: Ring,
    jobs: Jobs,
    layout: Layout,
    out: PathBuf,
    /// Per node: the nodes whose prefixes it holds (its own, and those it
    /// took over).
    holds: Vec<Vec<usize>>,
    t0: Instant,
    next_query: Instant,
    pub repairs: Vec<RePair>,
    pub syncs: Vec<Synced>,
}

/// The wall clock, µs (what pool messages are stamped with).
fn now_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

impl Repair {
    /// The controller of `bed`'s pool, sealing with `key`; node `i`'s BIRD
    /// listens at `out/node<i>.bird.ctl`.
    pub fn new(
        bed: &PoolBed,
        key: &pool::auth::Key,
        layout: &Layout,
        out: PathBuf,
        t0: Instant,
    ) -> anyhow::Result<Repair> {
        let router = bed.router();
        // the controller speaks on the sync network, from the router's
        // namespace
        let sock = std::thread::scope(|s| {
            s.spawn(|| -> anyhow::Result<UdpSocket> {
                netio::netns::enter(&router)?;
                let sock = UdpSocket::bind((netio::poolbed::ROUTER_SYNC, 0))?;
                sock.set_nonblocking(true)?;
                Ok(sock)
            })
            .join()
            .expect("binding thread")
        })?;
        let n = layout.vips.len();
        Ok(Repair {
            sock,
            seal: pool::auth::Seal::new(key.clone(), rand::random()),
            open: pool::auth::Open::new(Some(key), now_us()),
            ring: Ring::new(&(0..n as u16).collect::<Vec<_>>(), n),
            jobs: Jobs::new(),
            layout: layout.clone(),
            out,
            holds: (0..n).map(|i| vec![i]).collect(),
            t0,
            next_query: Instant::now(),
            repairs: Vec::new(),
            syncs: Vec::new(),
        })
    }

    fn ms(&self) -> f64 {
        self.t0.elapsed().as_secs_f64() * 1e3
    }

    /// Node `d`'s session went down: the pool re-pairs without it.
    pub fn down(&mut self, d: usize) {
        let at_ms = self.ms();
        if !self.ring.nodes().contains(&(d as u16)) {
            return;
        }
        if self.ring.nodes().len() <= 2 {
            self.ring.fail(d as u16);
            println!("flowshift pool: node {d} gone; one node left, with nobody to pair with");
            return;
        }
        self.jobs.down(d as u16);
        let pairings = self.ring.fail(d as u16);
        let Some(heir) = pairings.iter().find(|p| p.adopt.contains(&(d as u16))) else {
            return;
        };
        let s = usize::from(heir.node);
        let p = usize::from(self.ring.primary_of(s as u16).expect("three nodes or more"));
        let s2 = usize::from(
            self.ring
                .secondary_of(s as u16)
                .expect("three nodes or more"),
        );
        let taken = std::mem::take(&mut self.holds[d]);
        self.holds[s].extend(taken);
        // p replicates to s; s watches p and backs up what p holds
        if !self.order(p, Repr::NewSecondary { to: sync(s) }) {
            eprintln!("flowshift pool: node {p} did not take its new secondary {s}");
        }
        if !self.order(s, Repr::NewPrimary { to: sync(p) }) {
            eprintln!("flowshift pool: node {s} did not take its new primary {p}");
        }
        for o in self.holds[p].clone() {
            self.back_up(s, o);
        }
        // s's secondary backs up what s took over
        for o in self.holds[s].clone() {
            self.back_up(s2, o);
        }
        self.bulk(p, s);
        self.bulk(s, s2);
        self.carry_out();
        let ordered_ms = self.ms();
        println!(
            "flowshift pool: node {d} gone: node {p} replicates to node {s}, which backs it up; \
             node {s2} backs up what node {s} took over; re-paired in {:.1} ms, syncing",
            ordered_ms - at_ms
        );
        self.repairs.push(RePair {
            node: d,
            heir: s,
            predecessor: p,
            at_ms,
            ordered_ms,
        });
    }

    /// `from` is to copy its table to `to` (ordered once `from` is free).
    fn bulk(&mut self, from: usize, to: usize) {
        self.syncs.push(Synced {
            from,
            to,
            ordered_ms: self.ms(),
            done_ms: None,
            copies: 0,
        });
        let id = self.jobs.add(from as u16, to as u16, Then::Stop);
        debug_assert_eq!(id + 1, self.syncs.len(), "a sync's number is its report's");
    }

    /// Has node `i`'s BIRD announce node `o`'s prefixes as backup, if they
    /// are among those it may adopt (its own and its first primary's it
    /// announces from the start).
    fn back_up(&mut self, i: usize, o: usize) {
        let Some(k) = adoptable(i, &self.layout)
            .iter()
            .position(|a| a.from == sync(o))
        else {
            return;
        };
        let ctl = self.out.join(format!("node{i}.bird.ctl"));
        let r = Control::connect(&ctl).and_then(|mut c| c.enable(&pool::bgp::backup_protocol(k)));
        if let Err(e) = r {
            eprintln!("flowshift pool: node {i}'s BIRD did not take node {o}'s prefixes: {e}");
        }
    }

    /// Sends `what` to node `i` until it answers (20 tries, 5 ms apart);
    /// answers to bulk-sync questions meanwhile are taken in.
    fn order(&mut self, i: usize, what: Repr) -> bool {
        let what = what.to_vec();
        for _ in 0..20 {
            let sealed = self.seal.sealed(now_us(), &what);
            let _ = self.sock.send_to(&sealed, sync(i));
            let until = Instant::now() + Duration::from_millis(5);
            while Instant::now() < until {
                if self.take() == Some(i) {
                    return true;
                }
                std::thread::sleep(Duration::from_micros(200));
            }
        }
        false
    }

    /// Takes the answers waiting in: the node that said it is alive, if one
    /// did (the last such), after feeding bulk-sync statuses to the jobs.
    fn take(&mut self) -> Option<usize> {
        let mut alive = None;
        let mut buf = [0u8; 256];
        while let Ok((n, from)) = self.sock.recv_from(&mut buf) {
            let Ok(body) = self.open.open(now_us(), &buf[..n]) else {
                continue;
            };
            let Some(i) = (0..self.holds.len()).find(|&i| sync(i) == from) else {
                continue;
            };
            match pool::protocol::parse(body) {
                Ok(Repr::Alive) => alive = Some(i),
                Ok(Repr::BulkStatus {
                    done,
                    sent,
                    to: Some(to),
                    ..
                }) => {
                    let Some(t) = (0..self.holds.len()).find(|&t| sync(t) == to) else {
                        continue;
                    };
                    if let Some((job, finished)) = self.jobs.status(i as u16, t as u16, done) {
                        self.syncs[job.id].copies = sent;
                        if finished {
                            let now = self.ms();
                            self.syncs[job.id].done_ms = Some(now);
                            println!(
                                "flowshift pool: node {i} synced node {t}: {sent} copies in {:.1} ms",
                                now - self.syncs[job.id].ordered_ms
                            );
                        }
                    }
                }
                _ => {}
            }
        }
        alive
    }

    /// Carries out the syncs' orders.
    fn carry_out(&mut self) {
        while let Some(o) = self.jobs.poll_order() {
            match o {
                Order::Start { id, from, to } => {
                    let to_addr = sync(usize::from(to));
                    if !self.order(usize::from(from), Repr::BulkStart { to: to_addr }) {
                        eprintln!(
                            "flowshift pool: node {from} did not take the order to sync node {to}"
                        );
                        self.jobs.refused(id);
                    }
                }
                Order::Stop { from } => {
                    self.order(usize::from(from), Repr::BulkStop);
                }
            }
        }
    }

    /// Asks the running syncs how they go (every 20 ms) and carries out
    /// what their answers order.
    pub fn tick(&mut self) {
        self.take();
        if Instant::now() >= self.next_query {
            self.next_query = Instant::now() + Duration::from_millis(20);
            for (from, _) in self.jobs.running() {
                let q = self.seal.sealed(now_us(), &Repr::BulkQuery.to_vec());
                let _ = self.sock.send_to(&q, sync(usize::from(from)));
            }
        }
        self.carry_out();
    }
}

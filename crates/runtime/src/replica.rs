//! A pool node's replication link (Sirius ping-pong, §3.2): a packet that
//! creates or changes its flow's state leaves not here but to the flow's
//! secondary, together with the flow's entry; the secondary's NIC-model thread
//! steers the message to the core that owns the flow's shard, like any frame,
//! and that core installs the entry and sends the packet out. So a packet
//! leaves only once both nodes hold the state it made.
//!
//! The same port answers a pool controller's heartbeats and its pair's.
//! Every datagram of the link — copies, acknowledgements, heartbeats, the
//! controller's orders — is sealed with the pool's key ([`crate::sealed`],
//! `pool::auth`); one that does not open is refused and counted, never
//! installed, sent or obeyed.
//!
//! On the wire every message is one of `pool::protocol`'s: a copy
//! ([`Repr::Copy`]: the port the frame came in by, the copy's number, the
//! entry (`nf::Chain::export`), the frame). The secondary acknowledges each
//! copy it has queued for its core ([`Repr::Ack`]) to the core that sent it;
//! until then the flow is *poisoned* at the primary (Sirius §3.2): each of its
//! packets is copied again, even one that changes nothing. Inside the secondary, the message travels as a packet of the frame
//! with the entry appended and [`REPLICA`](crate::carried::REPLICA) set in its port, so the rings, the
//! shard moves and the hand-overs carry it as they carry frames.

use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::Ordering;

use crate::sync::{AtomicBool, AtomicU64};
use std::sync::{Arc, Mutex};

use pool::protocol::{self, Repr};

/// Where this node's copies go: set at the start, changed by the controller
/// ([`Repr::NewSecondary`]); each core's link reconnects when it sees a new
/// one.
pub(crate) struct Secondary {
    addr: Mutex<SocketAddr>,
    /// Bumped by every change.
    gen: AtomicU64,
    /// Found silent by the pair heartbeats ([`PairWatch`]): copies are not
    /// sent, packets leave from this node.
    lost: AtomicBool,
}

impl Secondary {
    pub fn new(addr: SocketAddr) -> Arc<Secondary> {
        Arc::new(Secondary {
            addr: Mutex::new(addr),
            gen: AtomicU64::new(0),
            lost: AtomicBool::new(false),
        })
    }

    /// The pair heartbeats found it silent (`true`) or heard it again.
    pub fn set_lost(&self, lost: bool) {
        // `Relaxed`: a flag read on its own by each core's `ReplicaTx::send`;
        // nothing else is published through it
        self.lost.store(lost, Ordering::Relaxed);
    }

    /// Replicate to `addr` from now on.
    pub fn set(&self, addr: SocketAddr) {
        *self.addr.lock().unwrap_or_else(|p| p.into_inner()) = addr;
        // publishes the address written above: pairs with the Acquire in
        // `ReplicaTx::send`
        self.gen.fetch_add(1, Ordering::Release);
    }

    pub(crate) fn get(&self) -> (u64, SocketAddr) {
        // pairs with the Release in `set`
        let g = self.gen.load(Ordering::Acquire);
        (g, *self.addr.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

/// A core's end of the link to its node's secondary.
pub(crate) struct ReplicaTx {
    sock: UdpSocket,
    /// Seals the copies, opens the acknowledgements.
    sealed: crate::sealed::Sealed,
    to: Arc<Secondary>,
    /// The secondary's generation `sock` is connected to.
    gen: u64,
    buf: Vec<u8>,
    /// The next copy's number.
    seq: u32,
    /// Messages sent.
    pub sent: u64,
    /// Messages the socket refused (the secondary is gone): their packets
    /// go out from this node, their state on it alone.
    pub failed: u64,
}

impl ReplicaTx {
    /// A socket sending to the secondary `to` names.
    pub fn open(to: Arc<Secondary>, key: Option<&pool::auth::Key>) -> io::Result<ReplicaTx> {
        let (gen, addr) = to.get();
        Ok(ReplicaTx {
            sock: connected(addr)?,
            sealed: crate::sealed::Sealed::new(key),
            to,
            gen,
            buf: Vec::with_capacity(2048),
            seq: 0,
            sent: 0,
            failed: 0,
        })
    }

    /// Calls `f` with the number of every copy the secondary acknowledged
    /// since the last call.
    pub fn acks(&mut self, mut f: impl FnMut(u32)) {
        let mut b = [0u8; 128];
        while let Ok(n) = self.sock.recv(&mut b) {
            if let Some(Ok(Repr::Ack { seq })) = self.sealed.open(&b[..n]).map(protocol::parse) {
                f(seq);
            }
        }
    }

    /// Acknowledgements refused (forged, stale or replayed).
    pub fn refused(&self) -> u64 {
        self.sealed.refused_total()
    }

    /// Sends a packet that came in by `port` with its flow's `entry`: the
    /// copy's number, or none when the socket refused it.
    pub fn send(&mut self, port: u8, entry: &[u8], frame: &[u8]) -> Option<u32> {
        // (see `Secondary::set_lost`)
        if self.to.lost.load(Ordering::Relaxed) {
            self.failed += 1;
            return None;
        }
        // (a relaxed peek first: the secondary changes once per failure)
        if self.to.gen.load(Ordering::Relaxed) != self.gen {
            let (gen, addr) = self.to.get();
            match connected(addr) {
                Ok(s) => {
                    self.sock = s;
                    self.gen = gen;
                }
                Err(_) => {
                    self.failed += 1;
                    return None;
                }
            }
        }
        let seq = self.seq;
        self.seq = self.seq.wrapping_add(1);
        let copy = Repr::Copy {
            port,
            seq,
            entry,
            frame,
        };
        if copy.emit_vec(&mut self.buf).is_err() {
            // an entry too long for a message: the packet goes out alone
            self.failed += 1;
            return None;
        }
        // (non-blocking for the acknowledgements: a full send buffer waits)
        match self.sealed.send_waiting(&self.sock, &self.buf) {
            Ok(()) => {
                self.sent += 1;
                Some(seq)
            }
            Err(_) => {
                self.failed += 1;
                None
            }
        }
    }
}

/// A flow as a core names it: (shard, entry).
pub(crate) type FlowRef = (usize, u32);

/// A histogram of replication lags (ns, up to a minute).
pub(crate) fn lag_histogram() -> hdrhistogram::Histogram<u64> {
    hdrhistogram::Histogram::new_with_bounds(1, 60_000_000_000, 2).expect("valid bounds")
}

use netio::udp::connected;

/// The NIC model's end: copies from this node's primaries, heartbeats and
/// the controller's orders.
pub(crate) struct ReplicaRx {
    sock: UdpSocket,
    /// Opens what arrives, seals the answers.
    sealed: crate::sealed::Sealed,
    /// Where this node's own copies go (the controller may change it).
    pub secondary: Arc<Secondary>,
    /// The controller's bulk-sync order.
    pub bulk: Arc<crate::bulk::BulkOrder>,
    /// Pair heartbeats to the secondary, if on.
    pair: Option<PairWatch>,
    /// The primary's heartbeats, watched (with pair heartbeats on and a
    /// primary named).
    primary: Option<PrimaryWatch>,
    /// Pair heartbeats' period and missed beats (when on): a new primary is
    /// watched the same way; and the flag a lost first primary sets.
    pair_cfg: Option<(u64, u32, runspec::Flag)>,
    /// Primaries found lost before the current one was named.
    primary_lost_before: u64,
}

/// A node's watch over the primary it backs up: its pair heartbeats arrive
/// at this node's port; silent for the timeout, the primary is lost (the
/// flag, if any, is set: the node's speaker then announces itself promoted)
/// until it beats again.
struct PrimaryWatch {
    from: SocketAddr,
    watch: pool::detect::PeerWatch,
    lost: Option<runspec::Flag>,
}

/// A node's watch over its secondary (Sirius §3.2: each pair exchanges
/// heartbeats and fails over independently): a heartbeat every period from
/// the replication port to the secondary's, whose answer ([`Repr::Alive`])
/// comes back there; silent for the timeout (`pool::detect::PeerWatch`: as
/// many rounds sent and as much time), the secondary is lost —
/// [`Secondary::set_lost`] — until it answers again.
struct PairWatch {
    beats: pool::detect::Beats,
    watch: pool::detect::PeerWatch,
}

impl ReplicaRx {
    /// Listens at `at`; this node replicates to `secondary`.
    pub fn bind(
        at: SocketAddr,
        secondary: Arc<Secondary>,
        bulk: Arc<crate::bulk::BulkOrder>,
        key: Option<&pool::auth::Key>,
    ) -> io::Result<ReplicaRx> {
        // room for bursts of copies while the NIC-model thread is away
        let sock = netio::udp::listening(at, 16 << 20)?;
        Ok(ReplicaRx {
            sock,
            sealed: crate::sealed::Sealed::new(key),
            secondary,
            bulk,
            pair: None,
            primary: None,
            pair_cfg: None,
            primary_lost_before: 0,
        })
    }

    /// Turns pair heartbeats on: the secondary is lost after `timeout_ms`
    /// without an answer (0: off), and so is `primary`, if any, after as
    /// long without a heartbeat (`lost` says so).
    pub fn watch_pair(
        &mut self,
        timeout_ms: u32,
        primary: Option<SocketAddr>,
        lost: &runspec::Flag,
    ) {
        if timeout_ms == 0 {
            return;
        }
        let period = u64::from(runspec::PAIR_BEAT_MS) * 1_000_000;
        let missed = timeout_ms.div_ceil(runspec::PAIR_BEAT_MS).max(1);
        self.pair_cfg = Some((period, missed, lost.clone()));
        self.pair = Some(PairWatch {
            beats: pool::detect::Beats::new(period),
            watch: pool::detect::PeerWatch::new(period, missed),
        });
        self.primary = primary.map(|from| PrimaryWatch {
            from,
            watch: pool::detect::PeerWatch::new(period, missed),
            lost: Some(lost.clone()),
        });
    }

    /// Pair heartbeats at `now`: beats the secondary when one is due, and
    /// finds it lost when it has been silent too long.
    pub fn pair_tick(&mut self, now: u64) {
        let Some(p) = self.pair.as_mut() else {
            return;
        };
        let due = p.beats.due(now);
        if due {
            p.watch.round(now);
            let (_, to) = self.secondary.get();
            let _ = self
                .sealed
                .send_to(&self.sock, &Repr::Heartbeat.to_vec(), to);
        }
        if p.watch.check(now) {
            self.secondary.set_lost(true);
        }
        if let Some(w) = self.primary.as_mut() {
            // the primary's rounds pass with this node's own beats
            if due {
                w.watch.round(now);
            }
            if w.watch.check(now) {
                if let Some(l) = &w.lost {
                    l.set(true);
                }
            }
        }
    }

    /// Notes a heartbeat from `from` at `now`, if it is the primary's.
    fn primary_beat(&mut self, from: SocketAddr, now: u64) {
        let Some(w) = self.primary.as_mut().filter(|w| w.from == from) else {
            return;
        };
        if w.watch.heard(now) {
            if let Some(l) = &w.lost {
                l.set(false);
            }
        }
    }

    /// Times this node found its primary lost.
    pub fn primary_lost(&self) -> u64 {
        self.primary_lost_before + self.primary.as_ref().map_or(0, |w| w.watch.times_lost())
    }

    /// Takes `d` from `from` if it is the secondary's answer to a pair
    /// heartbeat at `now` (a lost secondary that answers is back).
    /// A heartbeat from the primary is noted and left for [`control`]
    /// (Self::control) to answer.
    pub fn pair_answer(&mut self, d: &Repr, from: SocketAddr, now: u64) -> bool {
        if *d == Repr::Heartbeat {
            self.primary_beat(from, now);
            return false;
        }
        let Some(p) = self.pair.as_mut() else {
            return false;
        };
        if *d != Repr::Alive || from != self.secondary.get().1 {
            return false;
        }
        if p.watch.heard(now) {
            self.secondary.set_lost(false);
        }
        true
    }

    /// Times the pair heartbeats found the secondary lost.
    pub fn pair_lost(&self) -> u64 {
        self.pair.as_ref().map_or(0, |p| p.watch.times_lost())
    }

    /// Copies the kernel dropped because the socket's buffer was full (the
    /// NIC model fell behind): their packets are lost.
    pub fn dropped(&self) -> u64 {
        netio::socket_drops(&self.sock).unwrap_or(0)
    }

    /// Handles a controller's datagram: a heartbeat (answered) or an order
    /// (carried out, then answered as a heartbeat); false for anything else.
    pub fn control(&mut self, d: &Repr, from: SocketAddr) -> bool {
        match *d {
            Repr::Heartbeat => self.alive(from),
            Repr::BulkQuery => {
                let status = self.bulk.status().to_vec();
                let _ = self.sealed.send_to(&self.sock, &status, from);
            }
            Repr::BulkStop => {
                self.bulk.stop();
                self.alive(from);
            }
            Repr::BulkStart { to } => {
                self.bulk.start(to);
                self.alive(from);
            }
            Repr::NewSecondary { to } => {
                self.secondary.set(to);
                self.alive(from);
            }
            Repr::NewPrimary { to } => {
                self.new_primary(to);
                self.alive(from);
            }
            _ => return false,
        }
        true
    }

    /// Watches `to` as the primary from now on (with pair heartbeats on), a
    /// primary the pool gave this node once its first was gone for good:
    /// the node is promoted for good for the prefixes it took over (another
    /// node backs them up from now on: demoted, it would tie with that
    /// backup), so the new primary's loss is counted but changes no flag.
    fn new_primary(&mut self, to: SocketAddr) {
        let Some((period, missed, lost)) = self.pair_cfg.clone() else {
            return;
        };
        lost.set(true);
        self.primary_lost_before += self.primary.as_ref().map_or(0, |w| w.watch.times_lost());
        // (its first beat starts the watch; until then it is not lost)
        self.primary = Some(PrimaryWatch {
            from: to,
            watch: pool::detect::PeerWatch::new(period, missed),
            lost: None,
        });
    }

    /// Answers a heartbeat from `to` (a lost answer is a missed beat).
    pub fn alive(&mut self, to: SocketAddr) {
        let _ = self.sealed.send_to(&self.sock, &Repr::Alive.to_vec(), to);
    }

    /// Acknowledges copy `seq` to the core that sent it (a lost one leaves
    /// the flow poisoned there: its next packet is copied again).
    pub fn ack(&mut self, to: SocketAddr, seq: u32) {
        let _ = self
            .sealed
            .send_to(&self.sock, &Repr::Ack { seq }.to_vec(), to);
    }

    /// The body of the next waiting datagram that opens, in `buf`, and its
    /// sender, if any; those that do not open are counted
    /// ([`refused`](Self::refused)) and skipped.
    pub fn recv<'a>(&mut self, buf: &'a mut [u8]) -> io::Result<Option<(&'a [u8], SocketAddr)>> {
        loop {
            match self.sock.recv_from(buf) {
                Ok((n, from)) => {
                    if let Some(r) = self.sealed.open_range(&buf[..n]) {
                        return Ok(Some((&buf[r], from)));
                    }
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                    ) =>
                {
                    return Ok(None)
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Datagrams refused at this port, by cause (`pool::auth::Refused::ALL`'s
    /// order).
    pub fn refused(&self) -> [u64; 4] {
        self.sealed.refused
    }
}

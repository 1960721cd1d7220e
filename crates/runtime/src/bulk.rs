//! Epoch-based bulk sync (Sirius §3.2) on a pool node: at a controller's
//! order ([`Repr::BulkStart`] and a node's address), every working core copies
//! every entry of the shards it holds to that node — a few per loop, with a
//! window of unacknowledged copies, so traffic keeps flowing — and from the
//! order on copies there every entry a packet creates or changes, until the
//! controller says stop ([`Repr::BulkStop`]). A node taking buckets back from the
//! one that held them, or a new secondary, thus gets the whole table while it
//! changes.
//!
//! Each order starts an *epoch*. A shard is walked once per epoch by the core
//! that holds it (entries never change slots, so a walk in steps sees every
//! entry that lived through it; one created since is a change, copied live).
//! The order is done ([`Repr::BulkQuery`], answered by [`Repr::BulkStatus`]) once every
//! core has taken it up, every shard is walked and every copy acknowledged.
//!
//! A copy is a [`Repr::Install`]: the entry and, instead of a frame, its RSS
//! hash: the receiving NIC model steers it by that hash to the core owning
//! the entry's shard (a packet with [`INSTALL`] in its port), which installs
//! it and sends nothing out. A copy
//! not acknowledged within [`RESEND_NS`] is sent again, as the entry is then
//! (at most a step's worth per loop).

use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::Ordering;

use crate::sync::AtomicU64;
use std::sync::{Arc, Mutex};

use pool::protocol::Repr;

/// Set in a replica packet's port: install the entry, send nothing out.
pub(crate) const INSTALL: u8 = 0x40;

/// A bulk-sync copy as a packet for the core that owns hash `hash`: no
/// frame, the entry appended, [`INSTALL`] and
/// [`REPLICA`](crate::carried::REPLICA) in its port.
pub(crate) fn install_only(hash: u32, entry: &[u8], now: u64) -> nf::Packet {
    static BLANK: std::sync::OnceLock<wire::PacketInfo> = std::sync::OnceLock::new();
    let info = *BLANK.get_or_init(|| {
        // the smallest frame that parses: its fields are never read
        let mut f = vec![0u8; 60];
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        f[14] = 0x45;
        f[16..18].copy_from_slice(&46u16.to_be_bytes());
        f[23] = 17;
        f[38..40].copy_from_slice(&26u16.to_be_bytes());
        wire::parse(&f).expect("a blank UDP frame parses")
    });
    let mut data = Vec::with_capacity(entry.len() + 2);
    crate::carried::append_entry(&mut data, entry);
    nf::Packet {
        data,
        info,
        hash,
        ts_ns: now,
        entry: None,
        dir: state::Dir::Original,
        port: INSTALL | crate::carried::REPLICA,
        hairpin: false,
    }
}

/// Unacknowledged copies a core may have out.
const WINDOW: usize = 256;
/// Entries a core walks per loop.
pub(crate) const STEP: usize = 32;
/// A copy unacknowledged this long is sent again. Long against the
/// replication lag of nodes that share busy CPUs (tens of ms at p99 on a
/// 2-CPU machine running four nodes): a shorter one resends copies that are
/// only late, and the resends make the receiver later still.
pub(crate) const RESEND_NS: u64 = 500_000_000;

/// The node's current order, shared by the NIC model (which takes orders)
/// and the working cores (which carry them out).
pub(crate) struct BulkOrder {
    target: Mutex<Option<SocketAddr>>,
    /// Bumped by every order.
    epoch: AtomicU64,
    /// Per shard: the epoch it was last walked in.
    walked: Vec<AtomicU64>,
    /// Per working core: the epoch it works in, its copies out, copies sent.
    seen: Vec<AtomicU64>,
    pending: Vec<AtomicU64>,
    sent: Vec<AtomicU64>,
}

impl BulkOrder {
    pub fn new(shards: usize, workers: usize) -> Arc<BulkOrder> {
        let zeros = |n| (0..n).map(|_| AtomicU64::new(0)).collect();
        Arc::new(BulkOrder {
            target: Mutex::new(None),
            epoch: AtomicU64::new(0),
            walked: zeros(shards),
            seen: zeros(workers),
            pending: zeros(workers),
            sent: zeros(workers),
        })
    }

    fn set(&self, to: Option<SocketAddr>) -> u64 {
        *self.target.lock().unwrap_or_else(|p| p.into_inner()) = to;
        // publishes the target written above: pairs with the Acquire in
        // `current`
        self.epoch.fetch_add(1, Ordering::Release) + 1
    }

    /// Copy everything to `to`; returns the new epoch.
    pub fn start(&self, to: SocketAddr) -> u64 {
        self.set(Some(to))
    }

    /// Stop copying.
    pub fn stop(&self) -> u64 {
        self.set(None)
    }

    fn current(&self) -> (u64, Option<SocketAddr>) {
        // pairs with the Release in `set`
        let e = self.epoch.load(Ordering::Acquire);
        (e, *self.target.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// The answer to [`Repr::BulkQuery`].
    pub fn status(&self) -> Repr<'static> {
        let (e, to) = self.current();
        // each core's epoch is stored after it reset for it, a shard's after
        // its walk's copies were counted in `pending`: these Acquires pair
        // with the Releases in `BulkTx::refresh` and `BulkTx::finish`
        let taken = self.seen.iter().all(|s| s.load(Ordering::Acquire) == e);
        let walked = self.walked.iter().all(|w| w.load(Ordering::Acquire) == e);
        let acked = self.pending.iter().all(|p| p.load(Ordering::Acquire) == 0);
        let sent: u64 = self.sent.iter().map(|s| s.load(Ordering::Relaxed)).sum();
        let done = to.is_some() && taken && walked && acked;
        Repr::BulkStatus {
            epoch: e,
            done,
            sent,
            to,
        }
    }

    /// Carries out a bulk-sync order from the controller: true if `d` was
    /// one.
    #[cfg(test)]
    pub fn control(&self, d: &Repr) -> bool {
        match *d {
            Repr::BulkStop => self.stop(),
            Repr::BulkStart { to } => self.start(to),
            _ => return false,
        };
        true
    }
}

/// What a copy copied: its flow (shard, entry, the entry's generation).
type Copied = (usize, u32, u32);

/// A working core's part of the order.
pub(crate) struct BulkTx {
    /// Seals the copies, opens the acknowledgements.
    sealed: crate::sealed::Sealed,
    order: Arc<BulkOrder>,
    me: usize,
    epoch: u64,
    sock: Option<UdpSocket>,
    seq: u32,
    /// The shard being walked and its next slot.
    pub walk: Option<(usize, u32)>,
    out: pool::bulk::Window<Copied>,
    buf: Vec<u8>,
    /// Copies sent, sent again, acknowledged; refused by the socket.
    pub sent: u64,
    pub resent: u64,
    pub acked: u64,
    pub failed: u64,
}

impl BulkTx {
    pub fn new(order: Arc<BulkOrder>, me: usize, key: Option<&pool::auth::Key>) -> BulkTx {
        BulkTx {
            sealed: crate::sealed::Sealed::new(key),
            order,
            me,
            epoch: 0,
            sock: None,
            seq: 0,
            walk: None,
            out: pool::bulk::Window::new(WINDOW, RESEND_NS),
            buf: Vec::with_capacity(512),
            sent: 0,
            resent: 0,
            acked: 0,
            failed: 0,
        }
    }

    /// Takes up a new order, if there is one; true while copying.
    pub fn refresh(&mut self) -> bool {
        // (a relaxed peek first: orders are rare)
        if self.order.epoch.load(Ordering::Relaxed) != self.epoch {
            let (e, to) = self.order.current();
            self.epoch = e;
            self.walk = None;
            self.out.clear();
            self.sock = to.and_then(|a| match netio::udp::connected(a) {
                Ok(s) => Some(s),
                Err(_) => {
                    self.failed += 1;
                    None
                }
            });
            self.order.pending[self.me].store(0, Ordering::Relaxed);
            self.order.sent[self.me].store(0, Ordering::Relaxed);
            // after the reset above: pairs with the Acquire in `status`
            self.order.seen[self.me].store(e, Ordering::Release);
        }
        self.sock.is_some()
    }

    /// True if the shard still needs walking in this epoch.
    pub fn unwalked(&self, shard: usize) -> bool {
        self.order.walked[shard].load(Ordering::Relaxed) != self.epoch
    }

    /// Shard `shard` is walked: every entry it had is copied.
    pub fn finish(&mut self, shard: usize) {
        self.publish();
        // after the walk's copies were counted: pairs with the Acquire in
        // `status`
        self.order.walked[shard].store(self.epoch, Ordering::Release);
        self.walk = None;
    }

    /// Room for another copy in the window.
    pub fn room(&self) -> bool {
        self.out.room()
    }

    /// Acknowledgements refused (forged, stale or replayed).
    pub fn refused(&self) -> u64 {
        self.sealed.refused_total()
    }

    /// Takes the acknowledgements in.
    pub fn take_acks(&mut self) {
        let Some(sock) = &self.sock else { return };
        let mut b = [0u8; 128];
        while let Ok(n) = sock.recv(&mut b) {
            if let Some(Ok(Repr::Ack { seq })) =
                self.sealed.open(&b[..n]).map(pool::protocol::parse)
            {
                if self.out.acked(seq).is_some() {
                    self.acked += 1;
                }
            }
        }
    }

    /// Copies out longer than [`RESEND_NS`] at `now` (a step's worth at
    /// most), forgotten: the caller sends each again if its entry still
    /// lives.
    pub fn overdue(&mut self, now: u64) -> Vec<Copied> {
        self.out.overdue(now, STEP)
    }

    /// Sends entry `entry` (hash `hash`) of flow `flow` (shard, entry,
    /// generation); `again`: a resend.
    pub fn send(
        &mut self,
        entry: &[u8],
        hash: u32,
        flow: (usize, u32, u32),
        now: u64,
        again: bool,
    ) {
        let Some(sock) = &self.sock else { return };
        let seq = self.seq;
        self.seq = self.seq.wrapping_add(1);
        if (Repr::Install { seq, hash, entry })
            .emit_vec(&mut self.buf)
            .is_err()
        {
            // an entry too long for a message: the order never says done
            self.failed += 1;
            return;
        }
        if self.sealed.send_waiting(sock, &self.buf).is_err() {
            // the node is gone: the controller's query never says done
            self.failed += 1;
            return;
        }
        self.out.sent(seq, flow, now);
        self.sent += 1;
        self.resent += u64::from(again);
        self.order.sent[self.me].fetch_add(1, Ordering::Relaxed);
    }

    /// Publishes the copies out, for the controller's question.
    pub fn publish(&self) {
        // pairs with the Acquire in `status`
        self.order.pending[self.me].store(self.out.len() as u64, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (epoch, done, sent, target) of the order's status.
    fn status(o: &BulkOrder) -> (u64, bool, u64, Option<SocketAddr>) {
        match o.status() {
            Repr::BulkStatus {
                epoch,
                done,
                sent,
                to,
            } => (epoch, done, sent, to),
            other => panic!("{other:?}"),
        }
    }

    fn start(port: u16) -> Repr<'static> {
        Repr::BulkStart {
            to: ([127, 0, 0, 1], port).into(),
        }
    }

    #[test]
    fn a_copy_travels_as_a_packet_of_its_hash_with_the_entry_after_it() {
        let mut p = install_only(0xdead_beef, b"the entry", 5);
        assert_eq!((p.hash, p.ts_ns), (0xdead_beef, 5));
        assert_eq!(p.port, INSTALL | crate::carried::REPLICA);
        assert_eq!(crate::carried::take_entry(&mut p.data), b"the entry");
        assert!(p.data.is_empty());
    }

    #[test]
    fn an_order_is_done_once_every_core_walked_and_was_acknowledged() {
        let o = BulkOrder::new(2, 2);
        assert_eq!(status(&o), (0, false, 0, None));
        assert!(o.control(&start(9)));
        assert!(!o.control(&Repr::Heartbeat));
        let mut t: Vec<BulkTx> = (0..2).map(|w| BulkTx::new(o.clone(), w, None)).collect();
        let to9 = Some(([127, 0, 0, 1], 9).into());
        assert_eq!(status(&o), (1, false, 0, to9));
        for b in &mut t {
            assert!(b.refresh());
        }
        t[0].send(b"e", 7, (0, 3, 1), 0, false);
        t[0].publish();
        t[0].finish(0);
        t[1].finish(1);
        // a copy is out
        assert_eq!(status(&o), (1, false, 1, to9));
        assert_eq!(t[0].overdue(RESEND_NS), vec![]);
        assert_eq!(t[0].overdue(RESEND_NS + 1), vec![(0, 3, 1)]);
        t[0].publish();
        assert_eq!(status(&o), (1, true, 1, to9));
        // a new order starts over: nothing is walked in it yet
        assert!(o.control(&start(10)));
        let (epoch, done, sent, _) = status(&o);
        assert_eq!((epoch, done, sent), (2, false, 1));
        assert!(t[1].refresh() && t[1].unwalked(1));
        assert!(o.control(&Repr::BulkStop));
        assert!(!t[0].refresh());
        // (each core counts its copies of the current order only)
        assert_eq!(status(&o), (3, false, 0, None));
    }
}

//! Steering in the kernel: with `--iface` and kernel steering, the eBPF program
//! of [`netio::steering::KernelRss`] spreads every interface's frames over one
//! packet socket per working core (a `PACKET_FANOUT_EBPF` group per interface,
//! sockets joined in core order); each working core reads its own sockets. Its
//! queue is what it read and has not yet run ([`KernelRx`]).
//!
//! The shard move is unchanged, with the kernel as the NIC: the controller
//! rewrites the BPF map (and publishes the version); a thread standing for the
//! NIC ([`kernel_nic`]) acknowledges a version once a kernel RCU grace period
//! has passed since it was published (`membarrier`, which waits for every
//! receive softirq under way) — by then every CPU that ran the program with the
//! old table has put its frame in the old owner's socket — and on `Release` the old
//! owner reads *everything* its sockets hold before noting its queue's length
//! (queue cycling), so each frame steered by the old table is among those it
//! runs before the hand-over.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use nf::Packet;
use steer::RssHasher;
use wire::Malformed;

use crate::shared::Shared;

/// Where the kernel refuses RCU grace periods on request: how long after a
/// table rewrite it is taken to steer by it.
pub(crate) const GRACE: Duration = Duration::from_millis(2);

/// Frames read from a socket by one system call.
const RX_BATCH: usize = 32;

/// What a core's sockets delivered.
#[derive(Debug, Default, Clone)]
pub(crate) struct RxStats {
    pub offered: u64,
    pub bytes: u64,
    pub malformed: [u64; Malformed::ALL.len()],
    pub rx_overflow: u64,
    /// Frames the program cannot hash as the NIC model does (not IPv4): they
    /// reach queue 0 whatever their shard, so they are dropped and counted.
    pub unsteered: u64,
    /// Frames still in the sockets when the run stopped (in `offered`).
    pub unread_at_stop: u64,
}

/// A working core's receive side with kernel steering.
pub(crate) struct KernelRx {
    /// (port, this core's socket in that interface's fanout group).
    pub socks: Vec<(u8, netio::PacketSocket)>,
    pub hasher: RssHasher,
    /// Read and not yet run, in arrival order.
    pub queue: VecDeque<Packet>,
    /// Reads stop when this many wait (the rest waits in the sockets).
    pub limit: usize,
    pub stats: RxStats,
    batch: netio::RxBatch,
    /// Packet buffers this core gave back, reused for the frames it reads
    /// (as the NIC model reuses the ones the cores give it).
    pub spare: Vec<Vec<u8>>,
}

impl KernelRx {
    pub fn new(socks: Vec<(u8, netio::PacketSocket)>, hasher: RssHasher, limit: usize) -> KernelRx {
        KernelRx {
            socks,
            hasher,
            queue: VecDeque::with_capacity(limit),
            limit,
            stats: RxStats::default(),
            batch: netio::RxBatch::new(RX_BATCH),
            spare: Vec::new(),
        }
    }

    /// Reads the sockets into the queue: up to the limit, or (`all`) everything
    /// they hold.
    pub fn fill(&mut self, shared: &Shared, all: bool) {
        let KernelRx {
            socks,
            hasher,
            queue,
            limit,
            stats,
            batch,
            spare,
        } = self;
        for (port, sock) in socks.iter() {
            while all || queue.len() < *limit {
                let got = sock.recv_each(batch, |frame, stamp| {
                    // stamped when the kernel received it: a flow's frames
                    // in the order they reached the interface, whichever
                    // core's socket they are read from, and when
                    let arrived = shared.kernel_time(stamp);
                    stats.offered += 1;
                    stats.bytes += frame.len() as u64 + u64::from(trace::FCS_LEN);
                    let mut data = spare.pop().unwrap_or_default();
                    data.clear();
                    data.extend_from_slice(frame);
                    match Packet::new(data, arrived, hasher) {
                        Ok(mut p) => {
                            if p.info.ip_version != wire::parse::IpVersion::V4 {
                                stats.unsteered += 1;
                                spare.push(p.data);
                                return;
                            }
                            p.port = *port;
                            queue.push_back(p);
                        }
                        Err((data, m)) => {
                            stats.malformed[m as usize] += 1;
                            spare.push(data);
                        }
                    }
                });
                match got {
                    Ok(0) => break,
                    Ok(_) => {}
                    Err(e) => {
                        // e.g. the interface went away: the run ends and says why
                        shared.fail_input(format!("interface {}: receiving: {e}", sock.iface()));
                        break;
                    }
                }
            }
        }
    }

    /// Counts what the sockets still hold when the run has stopped (read and
    /// discarded) and what they dropped.
    pub fn count_unread(&mut self) {
        let (n, bytes) =
            crate::feeder::count_unread(self.socks.iter().map(|(_, s)| s), &mut self.batch);
        self.stats.unread_at_stop += n;
        self.stats.offered += n;
        self.stats.bytes += bytes;
        self.count_overflow();
    }

    /// Counts the frames the sockets dropped.
    pub fn count_overflow(&mut self) {
        for (_, s) in &self.socks {
            if let Ok(n) = s.take_drops() {
                self.stats.rx_overflow += n;
                self.stats.offered += n;
            }
        }
    }
}

/// The NIC's part with kernel steering: acknowledges each published table
/// version once every CPU that might have steered with an older table has
/// queued its frame — after a kernel RCU grace period
/// ([`netio::steering::wait_for_steering`]), or [`GRACE`] where the kernel
/// refuses that — and ends the feed when `stop` is set or `duration_ns` has
/// passed. Returns how long the feed lasted, ns.
pub(crate) fn kernel_nic(
    shared: &Arc<Shared>,
    stop: Option<runspec::Stop>,
    duration_ns: Option<u64>,
) -> u64 {
    let t0 = shared.now_ns();
    let mut acked = None;
    loop {
        let now = shared.now_ns();
        let stopped = stop.as_ref().is_some_and(|s| s.is_set());
        if stopped
            || shared.aborted()
            || shared.input_failure().is_some()
            || duration_ns.is_some_and(|d| now - t0 >= d)
        {
            break;
        }
        let v = shared.version();
        if acked == Some(v) {
            std::thread::sleep(Duration::from_micros(100));
            continue;
        }
        if netio::steering::wait_for_steering().is_err() {
            std::thread::sleep(GRACE);
        }
        // every CPU that steered with a table older than v has queued its frame
        shared.ack_version(v);
        acked = Some(v);
    }
    shared.finish_feeding();
    shared.now_ns() - t0
}

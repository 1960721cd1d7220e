//! Where a core's processed packets end: latency per class, the forwarded packets
//! when an output is kept, and exit records when reordering is counted at the exit.

use hdrhistogram::Histogram;
use nf::{Packet, Verdict};

/// A forwarded packet as it left: when, its flow, its sequence tag (for counting
/// reordering at the exit when the chain cannot, e.g. under Sprayer).
#[derive(Clone, Copy, Debug)]
pub(crate) struct ExitRecord {
    pub at_ns: u64,
    pub flow: u32,
    pub seq: u32,
}

/// The interfaces forwarded packets leave by: a packet that arrived on port i
/// leaves by port i + 1 (mod the ports: one port sends back where it came from).
pub(crate) struct Tx(pub Vec<netio::PacketSocket>);

/// Largest buffer given back to the NIC model for reuse.
const RECYCLED_MAX: usize = 2048;

/// Frames sent out of an interface by one system call.
const TX_BATCH: usize = 32;

impl Tx {
    /// The port a packet that arrived on `port` leaves by.
    fn out(&self, port: u8) -> usize {
        (usize::from(port) + 1) % self.0.len()
    }

    /// Sends `frames` out of `port`, waiting while its queue is full, as a
    /// NIC's TX would; returns how many were refused (on an error).
    fn send(&self, port: usize, frames: &[Vec<u8>]) -> u64 {
        let mut refs: Vec<&[u8]> = frames.iter().map(Vec::as_slice).collect();
        while !refs.is_empty() {
            match self.0[port].send_many(&refs) {
                Ok(0) => std::thread::yield_now(),
                Ok(n) => {
                    refs.drain(..n);
                }
                Err(_) => return refs.len() as u64,
            }
        }
        0
    }
}

/// One core's sink.
pub(crate) struct Sink {
    /// Latency of the priority class (index 0) and the regular class (index 1).
    pub latency: [Histogram<u64>; 2],
    pub output: Vec<(u64, Vec<u8>)>,
    /// Exit records, when measured.
    pub exit: Option<Vec<ExitRecord>>,
    keep_output: bool,
    priority_dscp: u8,
    /// With interfaces: where forwarded packets leave.
    tx: Option<std::sync::Arc<Tx>>,
    /// Forwarded packets the interface refused.
    pub tx_failed: u64,
    /// Forwarded packets that left after a packet of their flow and
    /// direction that arrived after them ([`state::FlowTable::exit_in_order`]).
    pub reordered: u64,
    /// With interfaces: frames waiting to be sent, per port.
    pending: Vec<Vec<Vec<u8>>>,
    /// Where forwarded packets are streamed as they leave.
    pub tap: Option<runspec::OutputTap>,
    /// Where used packet buffers go back to the NIC model (its receive
    /// buffers); none: they are freed here.
    recycle: Option<rtrb::Producer<Vec<u8>>>,
    /// Used buffers of this burst, given back together at the next flush (one
    /// ring update per burst, so the ring's lines do not bounce per packet).
    spare: Vec<Vec<u8>>,
    /// Used buffers are kept for the core's own reading.
    keep: bool,
}

impl Sink {
    pub fn new(keep_output: bool, priority_dscp: u8, exit_order: bool) -> Sink {
        Sink {
            latency: [runspec::latency_histogram(), runspec::latency_histogram()],
            output: Vec::new(),
            exit: exit_order.then(Vec::new),
            keep_output,
            priority_dscp,
            tx: None,
            tx_failed: 0,
            reordered: 0,
            pending: Vec::new(),
            tap: None,
            recycle: None,
            spare: Vec::new(),
            keep: false,
        }
    }

    /// Gives used buffers back to the NIC model through `ring`.
    pub fn set_recycle(&mut self, ring: rtrb::Producer<Vec<u8>>) {
        self.recycle = Some(ring);
    }

    /// A used packet buffer back to the NIC model (at the next flush); freed
    /// when its ring is full, when there is none, or when it grew past an
    /// Ethernet frame (so the buffers in flight stay ≤ 2 KiB each, whatever a
    /// trace holds).
    #[inline]
    pub fn give_back(&mut self, data: Vec<u8>) {
        if (self.recycle.is_some() || self.keep) && data.capacity() <= RECYCLED_MAX {
            self.spare.push(data);
        }
    }

    /// Keeps used buffers for this core's own reading (kernel steering,
    /// [`take_spare`](Self::take_spare)) instead of freeing them.
    pub fn keep_spare(&mut self) {
        self.keep = true;
    }

    /// The used buffers kept since the last call (up to `max`).
    pub fn take_spare(&mut self, into: &mut Vec<Vec<u8>>, max: usize) {
        let room = max.saturating_sub(into.len());
        let n = self.spare.len().min(room);
        into.extend(self.spare.drain(..n));
        self.spare.clear();
    }

    /// Gives this burst's used buffers back in one ring update.
    fn return_spare(&mut self) {
        if self.keep {
            // (taken by the core's reading, `take_spare`)
            return;
        }
        let Some(r) = &mut self.recycle else { return };
        if self.spare.is_empty() {
            return;
        }
        let n = self.spare.len().min(r.slots());
        if let Ok(chunk) = r.write_chunk_uninit(n) {
            chunk.fill_from_iter(self.spare.drain(..n));
        }
        // what did not fit is freed
        self.spare.clear();
    }

    /// With interfaces: where forwarded packets leave.
    pub fn set_tx(&mut self, tx: std::sync::Arc<Tx>) {
        self.pending = vec![Vec::with_capacity(TX_BATCH); tx.0.len()];
        self.tx = Some(tx);
    }

    /// Sends the frames waiting to leave. A core calls this once per burst,
    /// when it stops, and before any flow's packets can run on another core
    /// (a shard handed over, a packet pushed to an offloading core, a recall
    /// answered), so that a flow's frames leave in order across cores.
    pub fn flush(&mut self) {
        self.return_spare();
        if let Some(tx) = &self.tx {
            for (port, q) in self.pending.iter_mut().enumerate() {
                if !q.is_empty() {
                    self.tx_failed += tx.send(port, q);
                    q.clear();
                }
            }
        }
    }

    /// True for a packet of the priority class.
    #[inline]
    pub fn is_priority(&self, p: &Packet) -> bool {
        p.info.dscp == self.priority_dscp
    }

    /// Counts a forwarded packet's place in its flow's exit order (`in_order`
    /// false: it was reordered).
    #[inline]
    pub fn exit_order(&mut self, in_order: bool) {
        self.reordered += u64::from(!in_order);
    }

    /// Counts a packet that left this node another way (to its pool
    /// secondary, which sends it out): its latency here.
    #[inline]
    pub fn one_away(&mut self, p: &Packet, now: u64) {
        let class = usize::from(!self.is_priority(p));
        self.latency[class].saturating_record(now.saturating_sub(p.ts_ns).max(1));
    }

    /// Counts the outcomes of a burst's packets that all ran here, at `now`
    /// (`verdicts[i]` is packet i's): as [`one`](Self::one) on each, with the
    /// questions about outputs asked once when nothing but latency is kept.
    pub fn burst(&mut self, pkts: &[Packet], verdicts: &[Option<Verdict>], now: u64) {
        let latency_only =
            self.tx.is_none() && !self.keep_output && self.tap.is_none() && self.exit.is_none();
        if latency_only {
            for p in pkts {
                self.one_away(p, now);
            }
            return;
        }
        for (p, v) in pkts.iter().zip(verdicts) {
            self.one(p, v.expect("a packet routed here ran here"), now);
        }
    }

    /// [`burst`](Self::burst), then each packet's buffer taken back for the
    /// NIC model (the packets are left without one).
    pub fn ran_here(&mut self, pkts: &mut [Packet], verdicts: &[Option<Verdict>], now: u64) {
        self.burst(pkts, verdicts, now);
        for p in pkts {
            self.give_back(std::mem::take(&mut p.data));
        }
    }

    /// Counts a packet's outcome at `now`: latency per class, and the packet
    /// itself when kept.
    pub fn one(&mut self, p: &Packet, v: Verdict, now: u64) {
        self.one_away(p, now);
        if v != Verdict::Forward {
            return;
        }
        if let Some(tx) = &self.tx {
            let out = if p.hairpin {
                usize::from(p.port) % tx.0.len()
            } else {
                tx.out(p.port)
            };
            self.pending[out].push(p.data.clone());
            if self.pending[out].len() >= TX_BATCH {
                self.tx_failed += tx.send(out, &self.pending[out]);
                self.pending[out].clear();
            }
        }
        if self.keep_output {
            self.output.push((p.ts_ns, p.data.clone()));
        }
        if let Some(t) = &self.tap {
            (t.0)(p.ts_ns, &p.data);
        }
        if let Some(x) = &mut self.exit {
            if let Some(seq) = wire::seqtag::decode(p.info.payload(&p.data)) {
                let flow = state::FlowKey::of(&p.info.tuple).0.mix();
                x.push(ExitRecord {
                    at_ns: now,
                    flow,
                    seq,
                });
            }
        }
    }
}

/// A core's live counters for `--metrics`.
pub(crate) fn live(chain: &nf::Chain, sink: &Sink) -> runspec::metrics::CoreCounters {
    let mut latency = sink.latency[0].clone();
    let _ = latency.add(&sink.latency[1]);
    runspec::metrics::CoreCounters {
        chain: chain.counters().clone(),
        nf: chain
            .nfs()
            .iter()
            .map(|n| runspec::metrics::NfCounters::of(n.as_ref()))
            .collect(),
        latency,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nf::DropCause;
    use steer::{HashFields, RssHasher, RssKey};
    use trace::{Generator, SizeDist, TraceSpec};

    /// Packets of both latency classes, each `i` µs old at 1 s.
    fn packets() -> Vec<Packet> {
        let spec = TraceSpec {
            flows: 20,
            packets: 200,
            priority_share: 0.5,
            sizes: SizeDist::Fixed(64),
            ..Default::default()
        };
        let hasher = RssHasher::new(RssKey::DEFAULT, HashFields::IpPorts);
        Generator::new(&spec)
            .unwrap()
            .enumerate()
            .map(|(i, p)| Packet::new(p.frame, 1_000_000_000 - i as u64 * 1_000, &hasher).unwrap())
            .collect()
    }

    #[test]
    fn a_burst_counts_as_its_packets_one_by_one() {
        let pkts = packets();
        let dscp = TraceSpec::default().priority_dscp;
        assert!(
            pkts.iter().any(|p| p.info.dscp == dscp) && pkts.iter().any(|p| p.info.dscp != dscp)
        );
        let verdicts: Vec<Option<Verdict>> = (0..pkts.len())
            .map(|i| {
                Some(if i % 5 == 0 {
                    Verdict::Drop(DropCause::Policy)
                } else {
                    Verdict::Forward
                })
            })
            .collect();
        for keep in [false, true] {
            let (mut one, mut burst) = (Sink::new(keep, dscp, false), Sink::new(keep, dscp, false));
            for (p, v) in pkts.iter().zip(&verdicts) {
                one.one(p, v.unwrap(), 1_000_000_000);
            }
            burst.burst(&pkts, &verdicts, 1_000_000_000);
            for class in 0..2 {
                assert!(!burst.latency[class].is_empty());
                assert_eq!(burst.latency[class], one.latency[class], "class {class}");
            }
            assert_eq!(burst.output, one.output);
            assert_eq!(
                burst.output.len(),
                if keep {
                    pkts.len() - pkts.len().div_ceil(5)
                } else {
                    0
                }
            );
        }
    }
}

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

impl Tx {
    fn send(&self, p: &Packet) -> bool {
        let out = (usize::from(p.port) + 1) % self.0.len();
        self.0[out].send(&p.data).is_ok()
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
    pub tx: Option<std::sync::Arc<Tx>>,
    /// Forwarded packets the interface refused.
    pub tx_failed: u64,
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
        }
    }

    /// True for a packet of the priority class.
    #[inline]
    pub fn is_priority(&self, p: &Packet) -> bool {
        p.info.dscp == self.priority_dscp
    }

    /// Counts a packet's outcome at `now`: latency per class, and the packet
    /// itself when kept.
    pub fn one(&mut self, p: &Packet, v: Verdict, now: u64) {
        let class = usize::from(!self.is_priority(p));
        self.latency[class].saturating_record(now.saturating_sub(p.ts_ns).max(1));
        if v != Verdict::Forward {
            return;
        }
        if let Some(tx) = &self.tx {
            if !tx.send(p) {
                self.tx_failed += 1;
            }
        }
        if self.keep_output {
            self.output.push((p.ts_ns, p.data.clone()));
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
            .map(|n| (n.name().to_string(), n.counters()))
            .collect(),
        latency,
    }
}

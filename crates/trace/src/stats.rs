//! `flowshift trace stats`: what a trace contains — packets, connections, duration,
//! rates, packet sizes, the flow-size distribution with a fitted Zipf exponent,
//! the top connections and their share, and unparsable packets by cause.

use std::collections::HashMap;
use std::fmt;

use serde::Serialize;
use wire::{BiFlowKey, L4Info, Malformed};

use crate::{Trace, FCS_LEN};

/// One of the largest connections.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct TopFlow {
    /// "a:port <-> b:port/proto".
    pub flow: String,
    /// Packets (both directions).
    pub packets: u64,
    /// Share of all packets.
    pub share: f64,
}

/// Packet counts by frame size (FCS included).
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct SizeBuckets {
    /// ≤ 74 B.
    pub small_le_74: u64,
    /// 75–1499 B.
    pub mid: u64,
    /// ≥ 1500 B.
    pub large_ge_1500: u64,
}

/// Summary of a trace.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct TraceStats {
    /// Packets in the trace.
    pub packets: u64,
    /// Wire bytes (FCS included).
    pub bytes: u64,
    /// First to last timestamp, seconds.
    pub duration_s: f64,
    /// Mean packet rate.
    pub mpps: f64,
    /// Mean bit rate of wire frames.
    pub gbps: f64,
    /// Connections (bidirectional keys) among parsed packets.
    pub flows: u64,
    /// TCP connections.
    pub tcp_flows: u64,
    /// UDP flows.
    pub udp_flows: u64,
    /// SYNs without ACK (connection attempts).
    pub tcp_handshakes: u64,
    /// Packets with a non-zero DSCP.
    pub priority_packets: u64,
    /// Packet sizes.
    pub sizes: SizeBuckets,
    /// Connections by size: `[upper bound in packets, count]` for 1, 10, 100, …
    pub flow_size_histogram: Vec<(u64, u64)>,
    /// Zipf exponent fitted on rank vs size (log-log least squares over the
    /// connections of at least 10 packets), if there are at least 3 of them.
    pub zipf_alpha: Option<f64>,
    /// Largest connections first.
    pub top_flows: Vec<TopFlow>,
    /// Share of packets in the top connections listed.
    pub top_share: f64,
    /// Unparsable packets by cause (only causes seen).
    pub malformed: Vec<(String, u64)>,
}

/// [`TraceStats`] gathered a chunk at a time (a capture read as it goes:
/// memory grows with the connections, not the packets).
#[derive(Default)]
pub struct StatsBuilder {
    per_flow: HashMap<BiFlowKey, u64>,
    malformed: [u64; Malformed::ALL.len()],
    packets: u64,
    bytes: u64,
    syn: u64,
    prio: u64,
    sizes: SizeBuckets,
    first_ts: Option<u64>,
    last_ts: u64,
}

impl StatsBuilder {
    /// Counts the packets of `chunk` (the capture's next ones).
    pub fn add(&mut self, chunk: &Trace) {
        for i in 0..chunk.len() {
            let wire_len = u64::from(chunk.orig_len(i) + FCS_LEN);
            self.bytes += wire_len;
            match wire_len {
                0..=74 => self.sizes.small_le_74 += 1,
                75..=1499 => self.sizes.mid += 1,
                _ => self.sizes.large_ge_1500 += 1,
            }
            match wire::parse(chunk.frame(i)) {
                Ok(info) => {
                    *self.per_flow.entry(info.tuple.canonical().0).or_default() += 1;
                    if let L4Info::Tcp { flags } = info.l4 {
                        self.syn += u64::from(flags.is_syn_only());
                    }
                    self.prio += u64::from(info.dscp != 0);
                }
                Err(m) => self.malformed[m as usize] += 1,
            }
            self.first_ts.get_or_insert(chunk.ts_ns(i));
            self.last_ts = chunk.ts_ns(i);
        }
        self.packets += chunk.len() as u64;
    }

    /// The statistics, listing the `top` largest connections.
    pub fn finish(self, top: usize) -> TraceStats {
        let packets = self.packets;
        let bytes = self.bytes;
        let duration_s = self
            .first_ts
            .map_or(0.0, |f| self.last_ts.saturating_sub(f) as f64 / 1e9);
        let rate = |x: f64| {
            if duration_s > 0.0 {
                x / duration_s
            } else {
                0.0
            }
        };
        let mut flows: Vec<(BiFlowKey, u64)> = self.per_flow.into_iter().collect();
        flows.sort_unstable_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        let count_proto = |p: u8| flows.iter().filter(|(k, _)| k.proto == p).count() as u64;
        let share = |n: u64| {
            if packets > 0 {
                n as f64 / packets as f64
            } else {
                0.0
            }
        };
        let top_flows: Vec<TopFlow> = flows
            .iter()
            .take(top)
            .map(|(k, n)| TopFlow {
                flow: flow_name(k),
                packets: *n,
                share: share(*n),
            })
            .collect();
        let top_share = share(top_flows.iter().map(|t| t.packets).sum());
        let sizes_desc: Vec<u64> = flows.iter().map(|f| f.1).collect();
        let malformed = self.malformed;
        TraceStats {
            packets,
            bytes,
            duration_s,
            mpps: rate(packets as f64) / 1e6,
            gbps: rate(bytes as f64 * 8.0) / 1e9,
            flows: flows.len() as u64,
            tcp_flows: count_proto(wire::proto::TCP),
            udp_flows: count_proto(wire::proto::UDP),
            tcp_handshakes: self.syn,
            priority_packets: self.prio,
            sizes: self.sizes,
            flow_size_histogram: histogram(&sizes_desc),
            zipf_alpha: fit_zipf(&sizes_desc, 10),
            top_flows,
            top_share,
            malformed: Malformed::ALL
                .iter()
                .filter(|m| malformed[**m as usize] > 0)
                .map(|m| (m.name().to_string(), malformed[*m as usize]))
                .collect(),
        }
    }
}

impl TraceStats {
    /// Computes the statistics of a trace in memory, listing the `top`
    /// largest connections.
    pub fn compute(trace: &Trace, top: usize) -> TraceStats {
        let mut b = StatsBuilder::default();
        b.add(trace);
        b.finish(top)
    }
}

fn flow_name(k: &BiFlowKey) -> String {
    let proto = match k.proto {
        wire::proto::TCP => "tcp".to_string(),
        wire::proto::UDP => "udp".to_string(),
        p => p.to_string(),
    };
    let ep = |(a, p): (std::net::IpAddr, u16)| match a {
        std::net::IpAddr::V4(a) => format!("{a}:{p}"),
        std::net::IpAddr::V6(a) => format!("[{a}]:{p}"),
    };
    format!("{} <-> {}/{proto}", ep(k.lo), ep(k.hi))
}

fn histogram(sizes: &[u64]) -> Vec<(u64, u64)> {
    let mut h: Vec<(u64, u64)> = Vec::new();
    for &s in sizes {
        let mut ub = 1;
        while ub < s {
            ub *= 10;
        }
        match h.iter_mut().find(|(b, _)| *b == ub) {
            Some(e) => e.1 += 1,
            None => h.push((ub, 1)),
        }
    }
    h.sort_unstable();
    h
}

/// Least-squares slope of log(size) on log(rank) over sizes ≥ `min_size`, negated.
pub fn fit_zipf(sizes_desc: &[u64], min_size: u64) -> Option<f64> {
    let pts: Vec<(f64, f64)> = sizes_desc
        .iter()
        .take_while(|s| **s >= min_size)
        .enumerate()
        .map(|(r, s)| (((r + 1) as f64).ln(), (*s as f64).ln()))
        .collect();
    if pts.len() < 3 {
        return None;
    }
    let n = pts.len() as f64;
    let (mx, my) = (
        pts.iter().map(|p| p.0).sum::<f64>() / n,
        pts.iter().map(|p| p.1).sum::<f64>() / n,
    );
    let cov: f64 = pts.iter().map(|(x, y)| (x - mx) * (y - my)).sum();
    let var: f64 = pts.iter().map(|(x, _)| (x - mx) * (x - mx)).sum();
    (var > 0.0).then(|| -cov / var)
}

impl fmt::Display for TraceStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "packets        {}", self.packets)?;
        writeln!(f, "bytes          {} (wire, FCS included)", self.bytes)?;
        writeln!(f, "duration       {:.6} s", self.duration_s)?;
        writeln!(
            f,
            "rate           {:.3} Mpps, {:.3} Gbps",
            self.mpps, self.gbps
        )?;
        writeln!(
            f,
            "flows          {} ({} TCP with {} handshakes, {} UDP)",
            self.flows, self.tcp_flows, self.tcp_handshakes, self.udp_flows
        )?;
        let pct = |n: u64| {
            if self.packets > 0 {
                100.0 * n as f64 / self.packets as f64
            } else {
                0.0
            }
        };
        writeln!(
            f,
            "priority       {} packets ({:.2} %)",
            self.priority_packets,
            pct(self.priority_packets)
        )?;
        writeln!(
            f,
            "sizes          ≤74 B {:.1} %, 75–1499 B {:.1} %, ≥1500 B {:.1} %",
            pct(self.sizes.small_le_74),
            pct(self.sizes.mid),
            pct(self.sizes.large_ge_1500)
        )?;
        match self.zipf_alpha {
            Some(a) => writeln!(f, "zipf alpha     {a:.3} (fitted, flows ≥ 10 packets)")?,
            None => writeln!(f, "zipf alpha     - (fewer than 3 flows of ≥ 10 packets)")?,
        }
        write!(f, "flow sizes    ")?;
        let mut lo = 1;
        for (ub, n) in &self.flow_size_histogram {
            write!(f, " [{lo}..{ub}]: {n}")?;
            lo = ub + 1;
        }
        writeln!(f)?;
        writeln!(
            f,
            "top {} flows   {:.2} % of packets",
            self.top_flows.len(),
            100.0 * self.top_share
        )?;
        for t in &self.top_flows {
            writeln!(
                f,
                "  {:>10} pkts {:>6.2} %  {}",
                t.packets,
                100.0 * t.share,
                t.flow
            )?;
        }
        if self.malformed.is_empty() {
            writeln!(f, "malformed      0")?;
        } else {
            let list: Vec<String> = self
                .malformed
                .iter()
                .map(|(c, n)| format!("{c} {n}"))
                .collect();
            writeln!(f, "malformed      {}", list.join(", "))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fit_recovers_exact_power_law() {
        let s: Vec<u64> = (1..=500)
            .map(|r| (1e6 * (r as f64).powf(-1.2)) as u64)
            .collect();
        let a = fit_zipf(&s, 10).unwrap();
        assert!((a - 1.2).abs() < 0.01, "{a}");
        assert_eq!(fit_zipf(&[100, 50], 10), None);
    }

    #[test]
    fn histogram_buckets() {
        assert_eq!(
            histogram(&[1, 5, 10, 11, 1000]),
            [(1, 1), (10, 2), (100, 1), (1000, 1)]
        );
    }

    #[test]
    fn counts_malformed_by_cause() {
        let mut t = Trace::new();
        t.push(0, &[0u8; 10], 10);
        t.push(1, &[0u8; 60], 60); // ethertype 0: unknown
        let s = TraceStats::compute(&t, 5);
        assert_eq!(
            s.malformed,
            [
                ("truncated".to_string(), 1),
                ("unknown_ethertype".to_string(), 1)
            ]
        );
        assert_eq!(s.flows, 0);
    }
}

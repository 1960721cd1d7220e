//! What a driver counted during a run, and the one function that turns it into a
//! [`RunReport`]: the runtime and the simulator fill the same [`Tally`].

use std::collections::BTreeMap;

use balance::migrate::{ApplyStats, OffloadStats};
use hdrhistogram::Histogram;
use nf::DropCause;
use wire::Malformed;

use crate::report::{
    cdf, period_imbalance_median, period_packet_imbalance_median, Latency, LoadSample, PerCore,
    RunReport,
};
use crate::RunConfig;

/// The latency histogram every driver records into (1 ns to 60 s, 3 digits).
pub fn latency_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000_000, 3).expect("valid bounds")
}

/// What a run counted.
#[derive(Clone, Debug)]
pub struct Tally {
    /// `run` or `sim`.
    pub mode: &'static str,
    /// Packets the NIC model offered.
    pub offered: u64,
    /// Their bytes.
    pub bytes: u64,
    /// How long the NIC model offered them, ns.
    pub feed_ns: u64,
    /// Dropped on a full queue.
    pub ring_full: u64,
    /// Forwarded by the chain but refused by the interface sending it.
    pub tx_failed: u64,
    /// Frames an interface dropped before the NIC model read them.
    pub rx_overflow: u64,
    /// Frames still waiting in an interface's socket when the run stopped.
    pub unread_at_stop: u64,
    /// Frames kernel steering cannot place by flow (not IPv4), dropped.
    pub unsteered: u64,
    /// Dropped as malformed, by [`Malformed`] cause (indexed by `as usize`).
    pub malformed: Vec<u64>,
    /// Packets forwarded by the chain.
    pub forwarded: u64,
    /// Dropped by the chain, by [`DropCause::ALL`] index.
    pub dropped: Vec<u64>,
    /// Forwarded packets that left after a packet of their flow and
    /// direction that arrived after them.
    pub reordered: u64,
    /// Packets reordered at the exit (runs whose chain cannot count it).
    pub reordered_at_exit: Option<u64>,
    /// Flow entries created, expired, largest live count per shard summed.
    pub flows: [u64; 3],
    /// New flows whose earlier NFs' state was released because a later NF
    /// dropped their first packet.
    pub flows_undone: u64,
    /// Flows evicted to make room for new ones (`[table] policy =
    /// "evict-unassured"`).
    pub flows_evicted: u64,
    /// Times a shard's table entered emergency mode.
    pub emergencies: u64,
    /// The run's length, ns.
    pub elapsed_ns: u64,
    /// Latency of the priority class (0) and the regular class (1).
    pub latency: [Histogram<u64>; 2],
    /// Offload counters summed over the working cores.
    pub offload: OffloadStats,
    /// Times a working core found an offload ring full.
    pub offload_waits: u64,
    /// The controller's plan applier's counters.
    pub control: ApplyStats,
    /// Controller rounds.
    pub rounds: u64,
    /// Time each plan took, ns (empty where not measured).
    pub plan_ns: Vec<u64>,
    /// The balancer's own counters.
    pub balancer: Vec<(&'static str, f64)>,
    /// Kernel steering: packets counted by the kernel program's per-bucket
    /// counters (the balancer's input in place of the cores' own counts).
    pub kernel_bucket_packets: Option<u64>,
    /// Per core (working, then offloading).
    pub per_core: Vec<PerCore>,
    /// Per controller period: its end, each core's load and packets.
    pub load_over_time: Vec<(u64, Vec<f64>, Vec<u64>)>,
    /// Per window of the fixed [`IMBALANCE_WINDOW_NS`](crate::IMBALANCE_WINDOW_NS) grid: its end, each
    /// core's load and packets. The period imbalance is measured on these
    /// when there are any: a balancer that adapts its period (RSS++) is then
    /// judged on the same windows as one that does not.
    pub windows: Vec<(u64, Vec<f64>, Vec<u64>)>,
    /// Each NF's own counters.
    pub nf: BTreeMap<String, BTreeMap<&'static str, u64>>,
    /// The director's changes of placement ([`RunReport::placements`]).
    pub placements: Vec<crate::report::Placed>,
    /// A pool node's replication counters ([`RunReport::pool`]).
    pub pool: Vec<(&'static str, u64)>,
}

impl Tally {
    /// An empty tally for `mode`.
    pub fn new(mode: &'static str) -> Tally {
        Tally {
            mode,
            offered: 0,
            bytes: 0,
            feed_ns: 0,
            ring_full: 0,
            tx_failed: 0,
            rx_overflow: 0,
            unsteered: 0,
            unread_at_stop: 0,
            malformed: vec![0; Malformed::ALL.len()],
            forwarded: 0,
            dropped: vec![0; DropCause::ALL.len()],
            reordered: 0,
            reordered_at_exit: None,
            flows: [0; 3],
            flows_undone: 0,
            flows_evicted: 0,
            emergencies: 0,
            elapsed_ns: 1,
            latency: [latency_histogram(), latency_histogram()],
            offload: OffloadStats::default(),
            offload_waits: 0,
            control: ApplyStats::default(),
            rounds: 0,
            plan_ns: Vec::new(),
            balancer: Vec::new(),
            kernel_bucket_packets: None,
            per_core: Vec::new(),
            load_over_time: Vec::new(),
            windows: Vec::new(),
            nf: BTreeMap::new(),
            placements: Vec::new(),
            pool: Vec::new(),
        }
    }

    /// Adds one working core's offload counters.
    pub fn add_offload(&mut self, s: &OffloadStats) {
        let o = &mut self.offload;
        o.leases += s.leases;
        o.recalled += s.recalled;
        o.recalls += s.recalls;
        o.pended += s.pended;
        o.ratio_changes += s.ratio_changes;
        o.core_changes += s.core_changes;
    }

    /// Drops by cause: the NIC model's and the interfaces' (those that
    /// happened), malformed packets, and every NF cause.
    fn drops(&self) -> BTreeMap<String, u64> {
        let mut drops = BTreeMap::new();
        drops.insert("ring_full".to_string(), self.ring_full);
        for (name, n) in [
            ("tx_failed", self.tx_failed),
            ("rx_overflow", self.rx_overflow),
            ("unread_at_stop", self.unread_at_stop),
            ("unsteered", self.unsteered),
        ] {
            if n > 0 {
                drops.insert(name.to_string(), n);
            }
        }
        drops.insert("malformed".to_string(), self.malformed.iter().sum());
        for (i, cause) in DropCause::ALL.iter().enumerate() {
            drops.insert(cause.name().to_string(), self.dropped[i]);
        }
        drops
    }

    /// The report of a run of `cfg`.
    pub fn report(&self, cfg: &RunConfig) -> RunReport {
        let drops = self.drops();
        let mut all = latency_histogram();
        for h in &self.latency {
            all.add(h).expect("same bounds");
        }
        let secs = self.elapsed_ns.max(1) as f64 / 1e9;
        let out_bytes = if self.offered > 0 {
            self.bytes as f64 * (self.forwarded - self.tx_failed.min(self.forwarded)) as f64
                / self.offered as f64
        } else {
            0.0
        };
        let c = &self.control;
        let samples = |v: &[(u64, Vec<f64>, Vec<u64>)]| -> Vec<LoadSample> {
            v.iter()
                .map(|(t, l, p)| LoadSample {
                    t_ns: *t,
                    load: l.clone(),
                    packets: p.clone(),
                })
                .collect()
        };
        let load_over_time = samples(&self.load_over_time);
        let windows = samples(&self.windows);
        let over = if windows.is_empty() {
            &load_over_time
        } else {
            &windows
        };
        let period_median = period_imbalance_median(over, cfg.workers);
        let packets_median = period_packet_imbalance_median(over, cfg.workers);
        RunReport {
            nf: self.nf.clone(),
            placements: self.placements.clone(),
            memory: BTreeMap::new(),
            pool: self.pool.iter().copied().collect(),
            schema: 1,
            mode: self.mode,
            balancer: cfg.balancer.name(),
            cores: BTreeMap::from([("working", cfg.workers), ("offloading", cfg.offloaders)]),
            packets_in: self.offered,
            packets_out: self.forwarded - self.tx_failed.min(self.forwarded),
            drops,
            malformed: Malformed::ALL
                .iter()
                .filter(|m| self.malformed[**m as usize] > 0)
                .map(|m| (m.name().to_string(), self.malformed[*m as usize]))
                .collect(),
            reordered: self.reordered + self.reordered_at_exit.unwrap_or(0),
            reordered_at_exit: self.reordered_at_exit,
            flows: BTreeMap::from([
                ("created", self.flows[0]),
                ("expired", self.flows[1]),
                ("active_max", self.flows[2]),
                ("undone", self.flows_undone),
                ("evicted", self.flows_evicted),
                ("emergencies", self.emergencies),
            ]),
            throughput: BTreeMap::from([
                (
                    "offered_mpps",
                    self.offered as f64 / (self.feed_ns.max(1) as f64 / 1e9) / 1e6,
                ),
                (
                    "mpps",
                    (self.forwarded - self.tx_failed.min(self.forwarded)) as f64 / secs / 1e6,
                ),
                ("seconds", secs),
                ("gbps", out_bytes * 8.0 / secs / 1e9),
            ]),
            latency_ns: BTreeMap::from([
                ("all", Latency::of(&all)),
                ("priority", Latency::of(&self.latency[0])),
                ("regular", Latency::of(&self.latency[1])),
            ]),
            latency_cdf: BTreeMap::from([
                ("all", cdf(&all)),
                ("priority", cdf(&self.latency[0])),
                ("regular", cdf(&self.latency[1])),
            ]),
            migrations: BTreeMap::from([
                ("shard_moves", c.shard_moves),
                ("offload_changes", c.offload_changes),
                ("flows_offloaded", self.offload.leases),
                ("flows_recalled", self.offload.recalled),
                ("packets_pended", self.offload.pended),
                ("offload_ring_waits", self.offload_waits),
                ("entries_moved", c.entries_moved),
                ("packets_held", c.packets_held),
            ]),
            controller: BTreeMap::from_iter(
                [
                    ("rounds", self.rounds as f64),
                    ("plan_us_p50", percentile_us(&self.plan_ns, 0.5)),
                    ("plan_us_max", percentile_us(&self.plan_ns, 1.0)),
                    ("move_us_p50", percentile_us(&c.move_ns, 0.5)),
                    ("move_us_max", percentile_us(&c.move_ns, 1.0)),
                ]
                .into_iter()
                .chain(self.balancer.iter().copied())
                .chain(
                    self.kernel_bucket_packets
                        .map(|n| ("kernel_bucket_packets", n as f64)),
                ),
            ),
            per_core: self.per_core.clone(),
            imbalance: self.imbalance(period_median, packets_median),
            load_over_time,
            windows,
        }
    }
}

impl Tally {
    /// Load imbalance over the working cores, as the papers report it (the
    /// offloading cores do other work: theirs is reported apart, when there are
    /// two or more).
    fn imbalance(&self, period_median: f64, packets_median: f64) -> BTreeMap<&'static str, f64> {
        let of = |role: &str| -> Vec<f64> {
            self.per_core
                .iter()
                .filter(|p| p.role == role)
                .map(|p| p.load)
                .collect()
        };
        let (max_over_min, squared) = spread(&of("working"));
        let mut m = BTreeMap::from([
            ("max_over_min", max_over_min),
            ("squared", squared),
            ("period_median", period_median),
            ("period_median_packets", packets_median),
        ]);
        let off = of("offloading");
        if off.len() >= 2 {
            let (a, b) = spread(&off);
            m.insert("offloading_max_over_min", a);
            m.insert("offloading_squared", b);
        }
        m
    }
}

/// max / min (0 when a load is 0) and the sum of squared deviations from the
/// mean.
fn spread(loads: &[f64]) -> (f64, f64) {
    if loads.is_empty() {
        return (0.0, 0.0);
    }
    let mean = loads.iter().sum::<f64>() / loads.len() as f64;
    let (max, min) = loads
        .iter()
        .fold((f64::MIN, f64::MAX), |a, l| (a.0.max(*l), a.1.min(*l)));
    let ratio = if min > 0.0 { max / min } else { 0.0 };
    (ratio, loads.iter().map(|l| (l - mean) * (l - mean)).sum())
}

/// The `q` quantile of `v` (ns), in µs; 0 when empty.
fn percentile_us(v: &[u64], q: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    let mut v = v.to_vec();
    v.sort_unstable();
    v[((v.len() - 1) as f64 * q) as usize] as f64 / 1e3
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accounting_and_imbalance() {
        let cfg = RunConfig {
            workers: 2,
            ..RunConfig::default()
        };
        let mut t = Tally::new("run");
        t.offered = 10;
        t.forwarded = 6;
        t.ring_full = 1;
        t.malformed[Malformed::Truncated as usize] = 1;
        t.dropped[0] = 2;
        t.elapsed_ns = 1_000_000_000;
        t.latency[1].record(500).unwrap();
        t.per_core = (0..2)
            .map(|i| PerCore {
                core: i,
                role: "working",
                load: 0.25 * (i + 1) as f64,
                packets: 3,
                priority_packets: 0,
            })
            .collect();
        t.control.move_ns = vec![3_000, 1_000, 2_000];
        // two periods: loads and packets per queue disagree (a core can be
        // busier per packet), each median is over its own measure; the third
        // period's idle queue is skipped
        t.load_over_time = vec![
            (1, vec![0.5, 0.25], vec![100, 300]),
            (2, vec![0.5, 0.5], vec![200, 300]),
            (3, vec![0.5, 0.0], vec![100, 0]),
        ];
        let r = t.report(&cfg);
        assert_eq!(r.imbalance["period_median"], 1.0);
        assert_eq!(r.imbalance["period_median_packets"], 2.0);
        assert_eq!(r.load_over_time[0].packets, [100, 300]);
        // the fixed windows, where measured, are what the medians are over
        t.windows = vec![(1, vec![0.5, 0.5], vec![100, 100])];
        let r = t.report(&cfg);
        assert_eq!(r.imbalance["period_median"], 0.0);
        assert_eq!(r.imbalance["period_median_packets"], 0.0);
        assert_eq!(r.load_over_time.len(), 3);
        t.windows.clear();
        t.load_over_time.clear();
        let r = t.report(&cfg);
        assert_eq!(r.packets_in, r.packets_out + r.dropped());
        assert_eq!(r.malformed["truncated"], 1);
        assert_eq!(r.imbalance["max_over_min"], 2.0);
        // an idle offloading core does not count in the working cores' imbalance
        t.per_core.push(PerCore {
            core: 2,
            role: "offloading",
            load: 0.01,
            packets: 0,
            priority_packets: 0,
        });
        let r = t.report(&cfg);
        assert_eq!(r.imbalance["max_over_min"], 2.0);
        assert!(!r.imbalance.contains_key("offloading_max_over_min"));
        t.per_core.push(PerCore {
            core: 3,
            role: "offloading",
            load: 0.04,
            packets: 0,
            priority_packets: 0,
        });
        let r = t.report(&cfg);
        assert_eq!(r.imbalance["offloading_max_over_min"], 4.0);
        assert_eq!(r.controller["move_us_p50"], 2.0);
        assert_eq!(r.latency_ns["all"].p50, 500);
        assert_eq!(r.throughput["mpps"], 6e-6);
    }
}

//! The results of a run (`--json FILE`), schema 1: see docs/DESIGN.md.

use std::collections::BTreeMap;

use serde::Serialize;

/// Drops by cause (every cause listed, zeros included, so sums are easy to check).
pub type Drops = BTreeMap<String, u64>;

/// Latency percentiles, ns.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct Latency {
    /// Mean.
    pub mean: u64,
    /// Median.
    pub p50: u64,
    /// 99th percentile.
    pub p99: u64,
    /// 99.5th percentile (Dyssect's priority-class metric).
    pub p995: u64,
    /// 99.9th percentile.
    pub p999: u64,
    /// Maximum.
    pub max: u64,
}

impl Latency {
    /// The percentiles of a histogram (zeros when it is empty).
    pub fn of(h: &hdrhistogram::Histogram<u64>) -> Latency {
        if h.is_empty() {
            return Latency::default();
        }
        let q = |v| h.value_at_quantile(v);
        Latency {
            mean: h.mean().round() as u64,
            p50: q(0.5),
            p99: q(0.99),
            p995: q(0.995),
            p999: q(0.999),
            max: h.max(),
        }
    }
}

/// The quantiles [`cdf`] samples: every percent, then the tail.
const CDF_QUANTILES: [f64; 6] = [0.995, 0.999, 0.9995, 0.9999, 0.99999, 1.0];

/// A histogram's distribution as (value, quantile) points (empty when it is).
pub fn cdf(h: &hdrhistogram::Histogram<u64>) -> Vec<(u64, f64)> {
    if h.is_empty() {
        return Vec::new();
    }
    (1..=99)
        .map(|p| f64::from(p) / 100.0)
        .chain(CDF_QUANTILES)
        .map(|q| (h.value_at_quantile(q), q))
        .collect()
}

/// The fixed grid the period imbalance is measured on (10 ms, RSS++'s
/// shortest period): the same windows whatever period the balancer chose.
pub const IMBALANCE_WINDOW_NS: u64 = 10_000_000;

/// Median over the periods of (max − min) / min of the working cores' loads
/// (RSS++ Fig. 12's imbalance; periods with an idle core skipped).
pub fn period_imbalance_median(load: &[LoadSample], working: usize) -> f64 {
    let mut v: Vec<f64> = load
        .iter()
        .filter_map(|s| {
            let w = &s.load[..working.min(s.load.len())];
            let max = w.iter().copied().fold(0.0, f64::max);
            let min = w.iter().copied().fold(f64::MAX, f64::min);
            (min > 0.0 && min < f64::MAX).then(|| (max - min) / min)
        })
        .collect();
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Median over the periods of (max − min) / min of the packets the
/// working cores' queues delivered: RSS++ Fig. 12's own measure ("the number of
/// packets of the most loaded queue relative to the least loaded queue");
/// periods with an empty queue skipped.
pub fn period_packet_imbalance_median(load: &[LoadSample], working: usize) -> f64 {
    let mut v: Vec<f64> = load
        .iter()
        .filter_map(|s| {
            let w = &s.packets[..working.min(s.packets.len())];
            let max = w.iter().copied().max()?;
            let min = w.iter().copied().min()?;
            (min > 0).then(|| (max - min) as f64 / min as f64)
        })
        .collect();
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// One core.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct PerCore {
    /// Core index.
    pub core: usize,
    /// `working` or `offloading`.
    pub role: &'static str,
    /// Busy share of the core's time.
    pub load: f64,
    /// Packets the core ran the chain on.
    pub packets: u64,
    /// Of which of the priority class.
    pub priority_packets: u64,
}

/// A component the director placed while the run went (GranularNF §4).
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Placed {
    /// The NF whose component it is.
    pub nf: String,
    /// When (seconds of the run).
    pub at_s: f64,
    /// Where to: `inline` or `core`.
    pub to: &'static str,
    /// Component cores from then on (0: inline).
    pub cores: usize,
    /// The measurements behind it, in words.
    pub reason: String,
}

/// Everything a run (or a simulated run: `mode = "sim"`) reports.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct RunReport {
    /// Schema version.
    pub schema: u32,
    /// `run`.
    pub mode: &'static str,
    /// Balancer name.
    pub balancer: &'static str,
    /// `{"working": N, "offloading": 0}`.
    pub cores: BTreeMap<&'static str, usize>,
    /// Packets offered by the NIC model.
    pub packets_in: u64,
    /// Packets forwarded by the chain.
    pub packets_out: u64,
    /// Drops by cause: `packets_in == packets_out + sum(drops)`.
    pub drops: Drops,
    /// The `malformed` drops by parse cause (only causes seen).
    pub malformed: Drops,
    /// Forwarded packets that left after a packet of their flow and direction
    /// that arrived after them (every packet with a flow entry, judged by the
    /// NIC model's arrival stamps; the simulator by arrival number), plus
    /// `reordered_at_exit` where that is measured instead.
    pub reordered: u64,
    /// Packets that left after a later packet of their flow had left, counted at
    /// the exit from departure times (Sprayer runs, whose chains cannot count it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reordered_at_exit: Option<u64>,
    /// Flow entries: created, expired (slots), largest live count per shard summed.
    pub flows: BTreeMap<&'static str, u64>,
    /// Offered and achieved rates.
    pub throughput: BTreeMap<&'static str, f64>,
    /// Latency from NIC-model arrival to chain done: `all`, `priority` (the
    /// priority DSCP), `regular`.
    pub latency_ns: BTreeMap<&'static str, Latency>,
    /// Latency distribution per class (`all`, `priority`, `regular`): (latency ns,
    /// share of packets at or below it), at fixed quantiles (for CDF plots).
    pub latency_cdf: BTreeMap<&'static str, Vec<(u64, f64)>>,
    /// Shard moves, offload changes, entries moved.
    pub migrations: BTreeMap<&'static str, u64>,
    /// Controller rounds, plan / move times, the balancer's counters and, with
    /// kernel steering, `kernel_bucket_packets` (what its input counted).
    pub controller: BTreeMap<&'static str, f64>,
    /// Per core.
    pub per_core: Vec<PerCore>,
    /// Load imbalance across cores.
    pub imbalance: BTreeMap<&'static str, f64>,
    /// Per controller period: the time and the busy share of each core.
    pub load_over_time: Vec<LoadSample>,
    /// Per window of the fixed 10 ms grid ([`IMBALANCE_WINDOW_NS`]): each
    /// working core's load and packets; `imbalance.period_median` and
    /// `period_median_packets` are over these when present.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub windows: Vec<LoadSample>,
    /// Each NF's own counters, by NF name (e.g. an IDS's `offloaded` and
    /// `offload_lost`: the cost of its component's placement). Runs only.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub nf: BTreeMap<String, BTreeMap<&'static str, u64>>,
    /// The director's changes of placement (`placement = "auto"`), in order,
    /// with their reasons. Runs only.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub placements: Vec<Placed>,
    /// Memory of the process, bytes (runs of the CLI): `rss_start` when the run
    /// began (trace loaded), `max_rss` the peak, `tables_at_capacity` what the
    /// flow tables of every shard take when full.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub memory: BTreeMap<&'static str, u64>,
    /// A pool node's replication (runs with `[pool]`): `replicated` packets
    /// sent to the secondary with their flow's entry (`acked` of them
    /// acknowledged, `recopied` only because their flow's last copy was not
    /// yet, `poisoned_at_end` flows still waiting), `unprotected` ones sent
    /// out here instead because the secondary's port refused them (it is
    /// gone: their state is on this node alone), `replicas_in` messages from
    /// this node's primaries, `installed` of them, `replicas_dropped` that the
    /// kernel dropped at the replication port because this node fell behind
    /// (lost packets, also in `drops.rx_overflow`), `replica_bad` datagrams
    /// that were not replica messages; `lag_p50_us`, `lag_p99_us`,
    /// `lag_max_us`: replication lag, from a copy's sending to the
    /// secondary's acknowledgement. Bulk sync (`runtime::bulk`):
    /// `bulk_sent` copies to the node an order named (`bulk_resent` again,
    /// `bulk_acked` acknowledged), `sync_in` copies received, `synced` of
    /// them installed, `sync_bad` not installable, `sync_refused` because
    /// their core's ring was full (sent again by their sender). Datagrams
    /// refused because they did not open with the pool's key
    /// (`pool::auth`): at the replication port `refused_bad_tag`,
    /// `refused_stale`, `refused_replayed`, `refused_malformed`; among the
    /// acknowledgements `acks_refused`.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub pool: BTreeMap<&'static str, u64>,
}

/// The busy share of each core over one controller period.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct LoadSample {
    /// End of the period, ns since the run started.
    pub t_ns: u64,
    /// Busy share of each core (working cores, then offloading cores).
    pub load: Vec<f64>,
    /// Packets each core ran the chain on in the period (its queue's packets).
    pub packets: Vec<u64>,
}

impl RunReport {
    /// Sum of all drops.
    pub fn dropped(&self) -> u64 {
        self.drops.values().sum()
    }
}

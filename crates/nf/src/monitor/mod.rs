//! Traffic monitor: per-source packet and byte counters with a threshold action,
//! heavy hitters with a count-min sketch, distinct destinations with HyperLogLog.
//!
//! NFLOW key: source IP — coarser than the 5-tuple the rest of a chain usually
//! needs, so its state comes in two kinds:
//! - `mergeable` (default): each core keeps its own counters, sketch and HLL and
//!   they are merged periodically (GranularNF §4, delayed synchronisation); the
//!   threshold is checked against this core's counts plus the other cores' counts
//!   as of the last merge. Any steering works.
//! - `exact`: per-source counters in the shard (an MVT keyed by source); only valid
//!   when steering is by source IP, which the chain builder checks.
//! - `strict`: every packet adds to per-source counters every core shares
//!   ([`strict::StrictCounts`], atomics), and the threshold is checked against
//!   the sum at once — the per-packet shared updates that GranularNF's delayed
//!   merge is measured against. Any steering works.

pub mod merged;
pub mod per_source;
pub mod strict;

use crate::NfMeta;
use core::net::IpAddr;
use std::collections::HashSet;

use rustc_hash::FxHashMap;
use serde::Deserialize;
use state::merge::{CountMin, Counters, Hll, Mergeable};

use crate::{Ctx, DropCause, FlowState, Nf, NflowKey, Packet, ShardLocal, StateKind, Verdict};

pub use self::per_source::PerSource;

/// Where the monitor keeps per-source counters.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum MonitorMode {
    /// Per core, merged periodically.
    #[default]
    Mergeable,
    /// Per shard, exact; needs steering by source IP.
    Exact,
    /// Shared by every core, each packet counted there at once (atomics).
    Strict,
}

/// What happens to a source over the threshold.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum ThresholdAction {
    /// Count an alert (once per source).
    #[default]
    Alert,
    /// Drop its packets (`monitor_threshold`).
    Drop,
}

/// Monitor parameters.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MonitorConfig {
    /// `mergeable` or `exact`.
    pub state: MonitorMode,
    /// Packets from one source above which the action applies (0 = never).
    pub threshold_packets: u64,
    /// `alert` or `drop`.
    pub action: ThresholdAction,
    /// Count-min columns.
    pub cms_width: usize,
    /// Count-min rows.
    pub cms_depth: usize,
    /// HyperLogLog register bits (4..=18).
    pub hll_bits: usize,
}

impl Default for MonitorConfig {
    fn default() -> Self {
        MonitorConfig {
            state: MonitorMode::Mergeable,
            threshold_packets: 0,
            action: ThresholdAction::Alert,
            cms_width: 2048,
            cms_depth: 4,
            hll_bits: 12,
        }
    }
}

/// `[[nf]] kind = "monitor"`.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct MonitorSection {
    /// Name in the chain.
    pub name: Option<String>,
    /// Parameters.
    #[serde(flatten)]
    pub cfg: MonitorConfig,
}

impl crate::fields::BuildNf for MonitorSection {
    fn build(
        &self,
        f: &crate::fields::Fields<'_>,
    ) -> Result<Box<dyn Nf>, crate::fields::ConfigError> {
        if !(4..=18).contains(&self.cfg.hll_bits) {
            return Err(f.err("hll_bits", "must be in 4..=18"));
        }
        if !(1..=1 << 24).contains(&self.cfg.cms_width) {
            return Err(f.err("cms_width", "must be in 1..=16777216"));
        }
        if !(1..=16).contains(&self.cfg.cms_depth) {
            return Err(f.err("cms_depth", "must be in 1..=16"));
        }
        if self.cfg.cms_width * self.cfg.cms_depth > 1 << 24 {
            return Err(f.err(
                "cms_width",
                "width × depth must be at most 16777216 counters",
            ));
        }
        let name = self.name.clone().unwrap_or_else(|| "monitor".into());
        Ok(Box::new(Monitor::new(name, self.cfg.clone())))
    }
}

/// What the monitor knows, as merged from every core.
#[derive(Clone, Debug)]
pub struct MonitorReport {
    /// Per-source counters (mergeable mode; empty in exact mode, see [`collect_exact`]).
    pub sources: PerSource,
    /// Heavy-hitter sketch.
    pub heavy: CountMin<IpAddr>,
    /// Distinct destinations.
    pub destinations: Hll<IpAddr>,
    /// Sources over the threshold (an alert each, however many cores saw
    /// it pass).
    pub alerts: u64,
    /// Packets dropped by the threshold action.
    pub dropped: u64,
}

/// The monitor NF.
#[derive(Clone)]
pub struct Monitor {
    meta: NfMeta,
    cfg: MonitorConfig,
    /// This core's counters, each with the share epoch it was last counted in.
    own: FxHashMap<IpAddr, (Counters, u64)>,
    /// Mergeable mode with a threshold: what this core shares each period.
    writer: merged::Writer,
    /// The other cores' packets per source as of the last merge.
    others: merged::Reader,
    heavy: CountMin<IpAddr>,
    destinations: Hll<IpAddr>,
    alerted: HashSet<IpAddr>,
    alerts: u64,
    dropped: u64,
    /// `strict` mode: the counters every instance (core) shares.
    strict: Option<std::sync::Arc<strict::StrictCounts>>,
}

impl Monitor {
    /// A monitor.
    pub fn new(name: impl Into<String>, cfg: MonitorConfig) -> Monitor {
        let state = match cfg.state {
            MonitorMode::Mergeable | MonitorMode::Strict => StateKind::Mergeable,
            MonitorMode::Exact => StateKind::PerFlow,
        };
        let strict = (cfg.state == MonitorMode::Strict)
            .then(|| std::sync::Arc::new(strict::StrictCounts::new()));
        Monitor {
            // exact counters live in shard-local state: no flow entry
            meta: NfMeta::new(name, "monitor", NflowKey::SrcIp, state).without_entries(),
            heavy: CountMin::new(cfg.cms_width, cfg.cms_depth),
            destinations: Hll::new(cfg.hll_bits),
            cfg,
            own: FxHashMap::default(),
            writer: merged::Writer::default(),
            others: merged::Reader::default(),
            alerted: HashSet::new(),
            alerts: 0,
            dropped: 0,
            strict,
        }
    }

    /// This core's view (merge several with [`Nf::merge_from`] for the global one).
    pub fn report(&self) -> MonitorReport {
        MonitorReport {
            sources: self.own.iter().map(|(k, v)| (*k, v.0)).collect(),
            heavy: self.heavy.clone(),
            destinations: self.destinations.clone(),
            alerts: self.alerts,
            dropped: self.dropped,
        }
    }

    /// Whether the cores share their counters: only a threshold reads the
    /// merged view (the report merges the cores' counters at the end).
    fn merges(&self) -> bool {
        self.cfg.state == MonitorMode::Mergeable && self.cfg.threshold_packets > 0
    }
}

/// Sums the exact per-source tables of a set of shards (NF at chain index `nf`).
pub fn collect_exact<'a>(
    shards: impl IntoIterator<Item = &'a crate::Shard>,
    nf: usize,
) -> PerSource {
    let mut all = PerSource::new();
    for s in shards {
        if let ShardLocal::MonitorExact(m) = &s.locals[nf] {
            all.merge(m);
        }
    }
    all
}

impl Nf for Monitor {
    fn meta(&self) -> &NfMeta {
        &self.meta
    }

    /// The exact mode counts in shard-local state on every packet.
    fn offloadable(&self, _: Option<&FlowState>) -> bool {
        self.cfg.state != MonitorMode::Exact
    }

    fn shard_local(&self, _: &crate::ShardInfo) -> ShardLocal {
        match self.cfg.state {
            MonitorMode::Exact => ShardLocal::MonitorExact(PerSource::new()),
            MonitorMode::Mergeable | MonitorMode::Strict => ShardLocal::None,
        }
    }

    fn process(&mut self, cx: &mut Ctx<'_>, pkt: &mut Packet) -> Verdict {
        let src = pkt.info.tuple.src;
        let bytes = pkt.data.len() as u64;
        self.heavy.add(&src, 1);
        self.destinations.add(&pkt.info.tuple.dst);
        let total = match (&mut *cx.local, self.cfg.state) {
            (ShardLocal::MonitorExact(m), MonitorMode::Exact) => {
                let c = m.entry(src).or_default();
                c.packets += 1;
                c.bytes += bytes;
                c.packets
            }
            _ => {
                let epoch = self.writer.epoch();
                let (c, mark) = self
                    .own
                    .entry(src)
                    .or_insert((Counters::default(), u64::MAX));
                c.packets += 1;
                c.bytes += bytes;
                let own = c.packets;
                if *mark != epoch {
                    *mark = epoch;
                    self.writer.changed();
                }
                match &self.strict {
                    Some(shared) => shared.add(&src),
                    None => own + self.others.others(&src),
                }
            }
        };
        let t = self.cfg.threshold_packets;
        if t > 0 && total > t {
            if self.alerted.insert(src) {
                self.alerts += 1;
            }
            if self.cfg.action == ThresholdAction::Drop {
                self.dropped += 1;
                return Verdict::Drop(DropCause::MonitorThreshold);
            }
        }
        Verdict::Forward
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        vec![
            ("sources", self.own.len() as u64),
            ("alerts", self.alerts),
            ("dropped", self.dropped),
            ("distinct_destinations", self.destinations.count() as u64),
        ]
    }

    /// Each core keeps its own sources, alerted sources and destinations'
    /// sketch; the report counts them once the cores' are merged.
    fn per_core_counters(&self) -> &'static [&'static str] {
        &["sources", "alerts", "distinct_destinations"]
    }

    fn instance(&self) -> Box<dyn Nf> {
        let mut m = Monitor::new(self.meta.name.clone(), self.cfg.clone());
        // every core's instance counts into the same shared counters
        m.strict.clone_from(&self.strict);
        Box::new(m)
    }

    fn shares(&self) -> bool {
        self.merges()
    }

    /// Mergeable mode with a threshold: the packet totals of the sources
    /// this core counted since its last share ([`merged`]). Without a
    /// threshold nothing reads the merged view, so nothing is shared.
    fn share(&mut self) -> Option<crate::Shared> {
        if !self.merges() {
            return None;
        }
        let own = self.own.iter().map(|(k, v)| (k, v.0.packets, v.1));
        let share = self.writer.share(own);
        Some(share as crate::Shared)
    }

    /// Mergeable mode: the other cores' shares become the view the
    /// threshold is checked against (their counts plus this core's own).
    fn merge_shared(&mut self, all: &[crate::Shared]) {
        if !self.merges() {
            return;
        }
        let shares = all.iter().filter_map(|s| s.downcast_ref::<merged::Share>());
        self.others.merge(self.writer.id(), shares);
    }

    fn merge_from(&mut self, other: &dyn Nf) {
        if let Some(o) = other.as_any().downcast_ref::<Monitor>() {
            for (src, (c, _)) in &o.own {
                self.own
                    .entry(*src)
                    .or_insert((Counters::default(), u64::MAX))
                    .0
                    .merge(c);
            }
            self.heavy.merge(&o.heavy);
            self.destinations.merge(&o.destinations);
            self.dropped += o.dropped;
            // a source two cores each saw pass the threshold is one alert
            self.alerted.extend(o.alerted.iter().copied());
            self.alerts = self.alerted.len() as u64;
        }
    }
}

//! The cost model: how long a core takes for one packet, from what the simulator
//! knows about the moment — the NFs of the chain, how many flows the core works on,
//! how many shards it owns, whether the packet starts a flow — plus the costs of
//! moving state (Dyssect Fig. 1's effects, measured instead of assumed).
//!
//! `flowshift calibrate` measures every term on the real runtime on the current
//! machine and writes a model file; [`CostModel::default`] is the model measured on
//! the development machine (`default-model.toml`).

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

/// A piecewise-linear curve over `log2(x)`: `(x, ns)` points with increasing `x`;
/// flat before the first point and after the last.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Curve(pub Vec<(f64, f64)>);

impl Curve {
    /// The curve's value at `x`.
    pub fn at(&self, x: f64) -> f64 {
        let p = &self.0;
        match p.len() {
            0 => 0.0,
            _ if x <= p[0].0 => p[0].1,
            n if x >= p[n - 1].0 => p[n - 1].1,
            _ => {
                let i = p.partition_point(|q| q.0 <= x);
                let (a, b) = (p[i - 1], p[i]);
                let (la, lb, lx) = (a.0.max(1.0).log2(), b.0.max(1.0).log2(), x.max(1.0).log2());
                let f = if lb > la { (lx - la) / (lb - la) } else { 0.0 };
                a.1 + f * (b.1 - a.1)
            }
        }
    }

    fn check(&self, name: &str) -> Result<(), CostError> {
        let ok = self
            .0
            .iter()
            .all(|(x, y)| x.is_finite() && y.is_finite() && *x >= 0.0)
            && self.0.windows(2).all(|w| w[0].0 < w[1].0);
        if ok {
            Ok(())
        } else {
            Err(CostError::Field(format!(
                "`{name}`: points must be finite with increasing x"
            )))
        }
    }
}

/// The cache sizes of the machine the model was measured on (for the reader: the
/// flow-state curve bends where the working set leaves each level).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Caches {
    /// L1 data cache, bytes.
    pub l1: u64,
    /// L2, bytes.
    pub l2: u64,
    /// Last-level cache, bytes.
    pub llc: u64,
}

/// Per-packet and per-event costs, ns.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CostModel {
    /// Where and how it was measured.
    pub machine: String,
    /// Cache sizes of that machine.
    pub caches: Caches,
    /// Bytes of flow state per flow entry (to express the flow curve in bytes).
    pub entry_bytes: u64,
    /// NIC model: time to parse, hash and steer one packet (the feeder's rate).
    pub nic_ns: f64,
    /// A working core's cost per packet with an empty chain (poll, counters).
    pub overhead_ns: f64,
    /// Each NF kind's cost per packet, on a small working set and one shard.
    pub nf_ns: BTreeMap<String, f64>,
    /// Extra cost of a packet that creates its flow (table insert, NF set-up).
    pub new_flow_ns: f64,
    /// The per-NF layout (`[table] layout = "per-nf"`): extra cost per packet
    /// for each NF that finds its flow through its own index (its lookup, and
    /// the runs and fused pair the layout gives up). 0 in models measured
    /// before the layout existed.
    #[serde(default)]
    pub per_nf_ns: f64,
    /// Extra cost per packet against the number of flows the core worked on in the
    /// last period (its working set; 0 at the smallest).
    pub flows: Curve,
    /// Extra cost per packet against the number of shards the core owns (0 at one).
    pub shards: Curve,
    /// Cache warm-up after a migration, per flow entry moved (charged to the core
    /// that receives a shard or a leased flow).
    pub warm_ns_per_entry: f64,
    /// Extra cost of a packet processed on an offloading core (ring hop, leased
    /// state away from its table).
    pub offload_ns: f64,
    /// Latency of a control message between cores (release, hand-over, recall).
    pub message_ns: f64,
    /// CPUs the simulated machine gives the runtime's threads (the NIC model and
    /// every core); 0: one each. With fewer CPUs than threads, every thread gets
    /// `cpus / threads` of a CPU (time sharing), so every cost grows by the
    /// inverse — how the runtime behaves on a small machine (`flowshift
    /// validate` sets this machine's count).
    #[serde(default)]
    pub cpus: usize,
}

/// A model file that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum CostError {
    /// Reading failed.
    #[error("{0}: {1}")]
    Io(String, std::io::Error),
    /// Bad TOML.
    #[error("{0}")]
    Toml(#[from] toml::de::Error),
    /// A bad value.
    #[error("cost model: {0}")]
    Field(String),
    /// The chain has an NF the model does not price.
    #[error(
        "the cost model has no cost for NF kind `{0}` (run `flowshift calibrate` with this chain)"
    )]
    UnknownNf(String),
}

const DEFAULT: &str = include_str!("../default-model.toml");

impl Default for CostModel {
    fn default() -> Self {
        CostModel::from_toml(DEFAULT).expect("the bundled model is valid")
    }
}

impl CostModel {
    /// Parses and checks a model.
    pub fn from_toml(text: &str) -> Result<CostModel, CostError> {
        let m: CostModel = toml::from_str(text)?;
        m.check()?;
        Ok(m)
    }

    /// Reads a model file.
    pub fn from_file(path: &Path) -> Result<CostModel, CostError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| CostError::Io(path.display().to_string(), e))?;
        CostModel::from_toml(&text)
    }

    /// The model as TOML.
    pub fn to_toml(&self) -> String {
        toml::to_string_pretty(self).expect("a model serializes")
    }

    fn check(&self) -> Result<(), CostError> {
        let scalars = [
            ("nic_ns", self.nic_ns),
            ("overhead_ns", self.overhead_ns),
            ("new_flow_ns", self.new_flow_ns),
            ("per_nf_ns", self.per_nf_ns),
            ("warm_ns_per_entry", self.warm_ns_per_entry),
            ("offload_ns", self.offload_ns),
            ("message_ns", self.message_ns),
        ];
        for (k, v) in scalars
            .into_iter()
            .chain(self.nf_ns.iter().map(|(k, v)| (k.as_str(), *v)))
        {
            if !(v.is_finite() && v >= 0.0) {
                return Err(CostError::Field(format!("`{k}` = {v}: must be ≥ 0")));
            }
        }
        if self.nic_ns <= 0.0 {
            return Err(CostError::Field("`nic_ns` must be > 0".into()));
        }
        self.flows.check("flows")?;
        self.shards.check("shards")
    }

    /// The model on a machine where `threads` spinning threads share `cpus`
    /// CPUs: every per-packet and per-entry cost stretched by the time sharing.
    pub fn time_shared(&self, threads: usize) -> CostModel {
        if self.cpus == 0 || threads <= self.cpus {
            return self.clone();
        }
        let f = threads as f64 / self.cpus as f64;
        let mut m = self.clone();
        for v in [
            &mut m.nic_ns,
            &mut m.overhead_ns,
            &mut m.new_flow_ns,
            &mut m.per_nf_ns,
            &mut m.warm_ns_per_entry,
            &mut m.offload_ns,
        ] {
            *v *= f;
        }
        m.nf_ns.values_mut().for_each(|v| *v *= f);
        m.flows.0.iter_mut().for_each(|p| p.1 *= f);
        m.shards.0.iter_mut().for_each(|p| p.1 *= f);
        m
    }

    /// The chain's cost per packet on a small working set and one shard: the
    /// overhead plus each NF's cost.
    pub fn chain_ns(&self, kinds: &[&str]) -> Result<f64, CostError> {
        let mut t = self.overhead_ns;
        for k in kinds {
            t += self
                .nf_ns
                .get(*k)
                .ok_or_else(|| CostError::UnknownNf(k.to_string()))?;
        }
        Ok(t)
    }

    /// Cost of one packet on a core that works on `flows` flows and owns `shards`
    /// shards, for a chain whose base cost is `chain_ns`.
    pub fn packet_ns(&self, chain_ns: f64, flows: f64, shards: f64) -> f64 {
        chain_ns + self.flows.at(flows) + self.shards.at(shards)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn curves_interpolate_on_log_x_and_clamp() {
        let c = Curve(vec![(1024.0, 0.0), (4096.0, 20.0), (65536.0, 100.0)]);
        assert_eq!(c.at(10.0), 0.0);
        assert_eq!(c.at(1024.0), 0.0);
        assert!((c.at(2048.0) - 10.0).abs() < 1e-9, "{}", c.at(2048.0));
        assert!((c.at(16384.0) - 60.0).abs() < 1e-9, "{}", c.at(16384.0));
        assert_eq!(c.at(1e9), 100.0);
        assert_eq!(Curve::default().at(5.0), 0.0);
    }

    #[test]
    fn the_bundled_model_loads_and_prices_the_default_chain() {
        let m = CostModel::default();
        let base = m.chain_ns(&["firewall", "nat", "seqcheck"]).unwrap();
        assert!(base > m.overhead_ns);
        // more flows and more shards never make a packet cheaper
        assert!(m.packet_ns(base, 1e6, 1.0) >= m.packet_ns(base, 1e3, 1.0));
        assert!(m.packet_ns(base, 1e3, 64.0) >= m.packet_ns(base, 1e3, 1.0));
        assert!(matches!(m.chain_ns(&["ids"]), Err(CostError::UnknownNf(k)) if k == "ids"));
    }

    #[test]
    fn bad_models_name_the_field() {
        let mut t = CostModel::default().to_toml();
        t = t.replace("nic_ns = ", "nic_ns = -");
        let e = CostModel::from_toml(&t).unwrap_err().to_string();
        assert!(e.contains("nic_ns"), "{e}");
        let e = CostModel::from_toml("machine = 1").unwrap_err().to_string();
        assert!(e.contains("machine"), "{e}");
    }
}

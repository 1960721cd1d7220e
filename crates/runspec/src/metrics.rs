//! Live metrics of a running run, in the Prometheus text format: the controller
//! publishes each round's per-core load and the migrations, every core its chain
//! counters and latency every few milliseconds (never blocking: a publication
//! that finds the registry busy is skipped), the NIC model what it offered and
//! dropped. [`Metrics::render`] writes the exposition text a scraper reads.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;

use hdrhistogram::Histogram;
use nf::{ChainCounters, DropCause};

/// One core's published counters.
#[derive(Clone, Debug)]
pub struct CoreCounters {
    /// Its chain's counters.
    pub chain: ChainCounters,
    /// Each NF's own counters, in chain order.
    pub nf: Vec<NfCounters>,
    /// Latency, all classes.
    pub latency: Histogram<u64>,
}

/// One core's instance of an NF, as [`nf::Nf`]'s counter methods describe it.
#[derive(Clone, Debug, Default)]
pub struct NfCounters {
    /// The NF's name.
    pub name: String,
    /// Its counters ([`nf::Nf::counters`]).
    pub counters: Vec<(&'static str, u64)>,
    /// The part of them every core's instance shares, to be taken once.
    pub shared: Vec<(&'static str, u64)>,
    /// The names that are this core's alone (distinct counts), not to be
    /// added up.
    pub per_core: &'static [&'static str],
}

impl NfCounters {
    /// What `nf` counts now.
    pub fn of(nf: &dyn nf::Nf) -> NfCounters {
        NfCounters {
            name: nf.name().to_string(),
            counters: nf.counters(),
            shared: nf.shared_counters(),
            per_core: nf.per_core_counters(),
        }
    }
}

#[derive(Debug, Default)]
struct State {
    load: Vec<(&'static str, f64)>,
    cores: BTreeMap<usize, CoreCounters>,
    migrations: Vec<(&'static str, u64)>,
    balancer: Vec<(&'static str, f64)>,
    nic: Vec<(&'static str, u64)>,
    rounds: u64,
}

/// The registry.
#[derive(Debug, Default)]
pub struct Metrics(Mutex<State>);

impl Metrics {
    /// Controller: each core's role and load over the last round, the migration
    /// counters, the balancer's own counters.
    pub fn publish_round(
        &self,
        load: Vec<(&'static str, f64)>,
        migrations: Vec<(&'static str, u64)>,
        balancer: Vec<(&'static str, f64)>,
    ) {
        if let Ok(mut s) = self.0.try_lock() {
            s.load = load;
            s.migrations = migrations;
            s.balancer = balancer;
            s.rounds += 1;
        }
    }

    /// A core: its counters (skipped when the registry is busy).
    pub fn publish_core(&self, core: usize, c: impl FnOnce() -> CoreCounters) {
        if let Ok(mut s) = self.0.try_lock() {
            s.cores.insert(core, c());
        }
    }

    /// A core's last counters, as it stops (waits for the registry, so that
    /// a scrape after the run agrees with its report).
    pub fn publish_core_last(&self, core: usize, c: CoreCounters) {
        let mut s = self.0.lock().unwrap_or_else(|e| e.into_inner());
        s.cores.insert(core, c);
    }

    /// The NIC model: what it offered and dropped so far.
    pub fn publish_nic(&self, nic: Vec<(&'static str, u64)>) {
        if let Ok(mut s) = self.0.try_lock() {
            s.nic = nic;
        }
    }

    /// The Prometheus text exposition of everything published.
    pub fn render(&self) -> String {
        let s = match self.0.lock() {
            Ok(s) => s,
            Err(e) => e.into_inner(),
        };
        let mut o = String::new();
        head(
            &mut o,
            "controller_rounds_total",
            "counter",
            "Controller rounds.",
        );
        let _ = writeln!(o, "flowshift_controller_rounds_total {}", s.rounds);
        head(
            &mut o,
            "core_load",
            "gauge",
            "Busy share of each core over the last controller period.",
        );
        for (i, (role, l)) in s.load.iter().enumerate() {
            let _ = writeln!(o, "flowshift_core_load{{core=\"{i}\",role=\"{role}\"}} {l}");
        }
        head(
            &mut o,
            "nic_total",
            "counter",
            "What the NIC model offered and dropped before the chain.",
        );
        for (k, v) in &s.nic {
            let _ = writeln!(o, "flowshift_nic_total{{what=\"{k}\"}} {v}");
        }
        let mut total = ChainCounters::default();
        let mut lat: Option<Histogram<u64>> = None;
        for c in s.cores.values() {
            total.add(&c.chain);
            match &mut lat {
                None => lat = Some(c.latency.clone()),
                Some(h) => {
                    let _ = h.add(&c.latency);
                }
            }
        }
        head(
            &mut o,
            "packets_total",
            "counter",
            "Packets the chain ran on, forwarded, dropped by cause.",
        );
        let _ = writeln!(
            o,
            "flowshift_packets_total{{what=\"chain\"}} {}",
            total.packets
        );
        let _ = writeln!(
            o,
            "flowshift_packets_total{{what=\"forwarded\"}} {}",
            total.forwarded
        );
        for c in DropCause::ALL {
            let _ = writeln!(
                o,
                "flowshift_packets_total{{what=\"dropped\",cause=\"{}\"}} {}",
                c.name(),
                total.dropped(c)
            );
        }
        render_nf(&mut o, &s.cores);
        head(
            &mut o,
            "migrations_total",
            "counter",
            "Shard moves and offload changes.",
        );
        for (k, v) in &s.migrations {
            let _ = writeln!(o, "flowshift_migrations_total{{what=\"{k}\"}} {v}");
        }
        head(
            &mut o,
            "balancer",
            "gauge",
            "The balancer's own counters, as the report's controller section has them.",
        );
        for (k, v) in &s.balancer {
            let _ = writeln!(o, "flowshift_balancer{{counter=\"{k}\"}} {v}");
        }
        head(
            &mut o,
            "latency_seconds",
            "histogram",
            "Latency from arrival to chain done.",
        );
        if let Some(h) = lat {
            latency(&mut o, &h);
        }
        o
    }
}

/// A metric's `# HELP` and `# TYPE` lines.
fn head(o: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(
        o,
        "# HELP flowshift_{name} {help}\n# TYPE flowshift_{name} {kind}"
    );
}

/// The NF counters: totals over the cores, and the per-core counts.
fn render_nf(o: &mut String, cores: &BTreeMap<usize, CoreCounters>) {
    let (nf, per_core) = nf_counters(cores);
    head(
        o,
        "nf_total",
        "counter",
        "Each NF's own counters, over the cores.",
    );
    for ((name, k), v) in &nf {
        let _ = writeln!(o, "flowshift_nf_total{{nf=\"{name}\",counter=\"{k}\"}} {v}");
    }
    head(
        o,
        "nf_core",
        "gauge",
        "NF counts that are each core's own (distinct sources), which do not add up over the cores.",
    );
    for ((name, k, core), v) in &per_core {
        let _ = writeln!(
            o,
            "flowshift_nf_core{{nf=\"{name}\",counter=\"{k}\",core=\"{core}\"}} {v}"
        );
    }
}

/// Counters by (NF, counter).
type NfSums = BTreeMap<(String, &'static str), u64>;
/// Counts by (NF, counter, core).
type NfPerCore = BTreeMap<(String, &'static str, usize), u64>;

/// The NF counters over the cores: each core's own part added up, the part
/// every core's instance shares taken once (the largest, the latest any core
/// published), and the per-core counts by core.
fn nf_counters(cores: &BTreeMap<usize, CoreCounters>) -> (NfSums, NfPerCore) {
    let mut sum = NfSums::new();
    let mut shared = NfSums::new();
    let mut per_core = NfPerCore::new();
    for (&core, c) in cores {
        for n in &c.nf {
            for &(k, v) in &n.counters {
                if n.per_core.contains(&k) {
                    per_core.insert((n.name.clone(), k, core), v);
                    continue;
                }
                let common = n.shared.iter().find(|(s, _)| *s == k).map_or(0, |s| s.1);
                *sum.entry((n.name.clone(), k)).or_default() += v.saturating_sub(common);
            }
            for &(k, v) in &n.shared {
                let e = shared.entry((n.name.clone(), k)).or_default();
                *e = (*e).max(v);
            }
        }
    }
    for (key, v) in shared {
        *sum.entry(key).or_default() += v;
    }
    (sum, per_core)
}

/// The latency histogram's buckets, sum and count.
fn latency(o: &mut String, h: &Histogram<u64>) {
    let mut below = 0u64;
    for le in [1e-6, 1e-5, 5e-5, 1e-4, 5e-4, 1e-3, 5e-3, 1e-2, 1e-1, 1.0] {
        below = h.count_between(0, (le * 1e9) as u64).max(below);
        let _ = writeln!(o, "flowshift_latency_seconds_bucket{{le=\"{le}\"}} {below}");
    }
    let _ = writeln!(
        o,
        "flowshift_latency_seconds_bucket{{le=\"+Inf\"}} {}",
        h.len()
    );
    let sum = h.mean() * h.len() as f64 / 1e9;
    let _ = writeln!(o, "flowshift_latency_seconds_sum {sum}");
    let _ = writeln!(o, "flowshift_latency_seconds_count {}", h.len());
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nat(mappings: u64) -> NfCounters {
        NfCounters {
            name: "nat".into(),
            counters: vec![("mappings", mappings)],
            ..Default::default()
        }
    }

    #[test]
    fn renders_what_was_published() {
        let m = Metrics::default();
        m.publish_round(
            vec![("working", 0.5), ("offloading", 0.25)],
            vec![("shard_moves", 3)],
            vec![("nic_rules", 6.0)],
        );
        let mut lat = crate::latency_histogram();
        lat.record(2_000).unwrap();
        lat.record(200_000).unwrap();
        let mut chain = ChainCounters {
            packets: 10,
            forwarded: 8,
            ..Default::default()
        };
        chain.drops[0] = 2;
        m.publish_core(0, || CoreCounters {
            chain: chain.clone(),
            nf: vec![
                nat(4),
                NfCounters {
                    name: "lb".into(),
                    counters: vec![("placed", 2), ("control_requests", 7)],
                    shared: vec![("control_requests", 7)],
                    per_core: &[],
                },
                NfCounters {
                    name: "monitor".into(),
                    counters: vec![("sources", 3), ("dropped", 1)],
                    shared: vec![],
                    per_core: &["sources"],
                },
            ],
            latency: lat.clone(),
        });
        m.publish_core(1, || CoreCounters {
            chain,
            nf: vec![
                nat(1),
                NfCounters {
                    name: "lb".into(),
                    // published a little earlier: the control plane's count then
                    counters: vec![("placed", 5), ("control_requests", 6)],
                    shared: vec![("control_requests", 6)],
                    per_core: &[],
                },
                NfCounters {
                    name: "monitor".into(),
                    counters: vec![("sources", 2), ("dropped", 4)],
                    shared: vec![],
                    per_core: &["sources"],
                },
            ],
            latency: lat,
        });
        let t = m.render();
        assert!(
            t.contains("flowshift_core_load{core=\"1\",role=\"offloading\"} 0.25"),
            "{t}"
        );
        assert!(
            t.contains("flowshift_packets_total{what=\"forwarded\"} 16"),
            "{t}"
        );
        assert!(
            t.contains("flowshift_nf_total{nf=\"nat\",counter=\"mappings\"} 5"),
            "{t}"
        );
        // each core's own part added up, the shared control plane's once
        assert!(
            t.contains("flowshift_nf_total{nf=\"lb\",counter=\"placed\"} 7"),
            "{t}"
        );
        assert!(
            t.contains("flowshift_nf_total{nf=\"lb\",counter=\"control_requests\"} 7\n"),
            "{t}"
        );
        // distinct counts per core, never summed into a total
        assert!(!t.contains("counter=\"sources\"} 5"), "{t}");
        assert!(!t.contains("flowshift_nf_total{nf=\"monitor\",counter=\"sources\""));
        assert!(
            t.contains("flowshift_nf_core{nf=\"monitor\",counter=\"sources\",core=\"0\"} 3"),
            "{t}"
        );
        assert!(
            t.contains("flowshift_nf_core{nf=\"monitor\",counter=\"sources\",core=\"1\"} 2"),
            "{t}"
        );
        assert!(
            t.contains("flowshift_nf_total{nf=\"monitor\",counter=\"dropped\"} 5"),
            "{t}"
        );
        assert!(
            t.contains("flowshift_migrations_total{what=\"shard_moves\"} 3"),
            "{t}"
        );
        assert!(
            t.contains("flowshift_balancer{counter=\"nic_rules\"} 6"),
            "{t}"
        );
        assert!(
            t.contains("flowshift_latency_seconds_bucket{le=\"0.00001\"} 2"),
            "{t}"
        );
        assert!(
            t.contains("flowshift_latency_seconds_bucket{le=\"+Inf\"} 4"),
            "{t}"
        );
        let dropped = format!(
            "flowshift_packets_total{{what=\"dropped\",cause=\"{}\"}} 4",
            DropCause::ALL[0].name()
        );
        assert!(t.contains(&dropped), "{t}");
    }
}

//! The simulated run's report, in the runtime's schema.

use std::collections::BTreeMap;

use hdrhistogram::Histogram;
use nf::DropCause;
use runtime::{cdf, period_imbalance_median, Latency, LoadSample, PerCore, RunConfig, RunReport};
use wire::Malformed;

use crate::engine::Tally;

pub(crate) fn build(t: &Tally, cfg: &RunConfig) -> RunReport {
    let mut r = build_report(t, cfg);
    let med = period_imbalance_median(&r.load_over_time, cfg.workers);
    r.imbalance.insert("period_median", med);
    r
}

fn build_report(t: &Tally, cfg: &RunConfig) -> RunReport {
    let w = cfg.workers;
    let o = cfg.offloaders;
    let secs = t.end_ns as f64 / 1e9;
    let mut drops = BTreeMap::new();
    drops.insert("ring_full".to_string(), t.ring_full);
    drops.insert("malformed".to_string(), t.malformed.iter().sum());
    for (i, cause) in DropCause::ALL.iter().enumerate() {
        drops.insert(cause.name().to_string(), t.dropped[i]);
    }
    let mut all = Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).expect("valid bounds");
    for h in &t.latency {
        all.add(h).expect("same bounds");
    }
    let per_core: Vec<PerCore> = t
        .cores
        .iter()
        .enumerate()
        .map(|(i, c)| PerCore {
            core: i,
            role: if i < w { "working" } else { "offloading" },
            load: (c.busy_ns as f64 / t.end_ns as f64).min(1.0),
            packets: c.packets,
            priority_packets: c.priority,
        })
        .collect();
    let loads: Vec<f64> = per_core.iter().map(|p| p.load).collect();
    let mean = loads.iter().sum::<f64>() / loads.len().max(1) as f64;
    let (lmax, lmin) = loads
        .iter()
        .fold((f64::MIN, f64::MAX), |a, l| (a.0.max(*l), a.1.min(*l)));
    let pct = |v: &[u64], q: f64| -> f64 {
        if v.is_empty() {
            return 0.0;
        }
        let mut v = v.to_vec();
        v.sort_unstable();
        v[((v.len() - 1) as f64 * q) as usize] as f64 / 1e3
    };
    let out_bytes = if t.offered > 0 {
        t.bytes as f64 * t.forwarded as f64 / t.offered as f64
    } else {
        0.0
    };
    RunReport {
        nf: BTreeMap::new(),
        schema: 1,
        mode: "sim",
        balancer: cfg.balancer.name(),
        cores: BTreeMap::from([("working", w), ("offloading", o)]),
        packets_in: t.offered,
        packets_out: t.forwarded,
        drops,
        malformed: Malformed::ALL
            .iter()
            .filter(|m| t.malformed[**m as usize] > 0)
            .map(|m| (m.name().to_string(), t.malformed[*m as usize]))
            .collect(),
        reordered: t.reordered,
        reordered_at_exit: None,
        flows: BTreeMap::from([
            ("created", t.created),
            ("expired", 0),
            ("active_max", t.created),
        ]),
        throughput: BTreeMap::from([
            (
                "offered_mpps",
                t.offered as f64 / (t.feed_ns.max(1) as f64 / 1e9) / 1e6,
            ),
            ("mpps", t.forwarded as f64 / secs / 1e6),
            ("gbps", out_bytes * 8.0 / secs / 1e9),
            ("seconds", secs),
        ]),
        latency_ns: BTreeMap::from([
            ("all", Latency::of(&all)),
            ("priority", Latency::of(&t.latency[0])),
            ("regular", Latency::of(&t.latency[1])),
        ]),
        latency_cdf: BTreeMap::from([
            ("all", cdf(&all)),
            ("priority", cdf(&t.latency[0])),
            ("regular", cdf(&t.latency[1])),
        ]),
        migrations: BTreeMap::from([
            ("shard_moves", t.shard_moves),
            ("offload_changes", t.offload_changes),
            ("flows_offloaded", t.offload.leases),
            ("flows_recalled", t.offload.recalled),
            ("packets_pended", t.offload.pended),
            (
                "offload_ring_waits",
                t.cores.iter().map(|c| c.stalls).sum::<u64>(),
            ),
            ("entries_moved", t.entries_moved),
            ("packets_held", t.packets_held),
        ]),
        controller: BTreeMap::from_iter(
            [
                ("rounds", t.rounds as f64),
                ("plan_us_p50", 0.0),
                ("plan_us_max", 0.0),
                ("move_us_p50", pct(&t.move_ns, 0.5)),
                ("move_us_max", pct(&t.move_ns, 1.0)),
            ]
            .into_iter()
            .chain(t.balancer.iter().copied()),
        ),
        per_core,
        imbalance: BTreeMap::from([
            ("max_over_min", if lmin > 0.0 { lmax / lmin } else { 0.0 }),
            (
                "squared",
                loads.iter().map(|l| (l - mean) * (l - mean)).sum(),
            ),
        ]),
        load_over_time: t
            .load_over_time
            .iter()
            .map(|(t, l)| LoadSample {
                t_ns: *t,
                load: l.clone(),
            })
            .collect(),
    }
}

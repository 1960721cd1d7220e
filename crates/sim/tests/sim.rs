//! The simulator end to end: conservation, determinism, protocols exercised, and
//! the same balancer code as the runtime.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use nf::ChainConfig;
use runtime::{BalancerKind, MakeBalancer, RunConfig};
use sim::{simulate, CostModel, Prepared};
use trace::{Generator, Trace, TraceSpec};

fn trace(flows: u32, packets: u64, alpha: f64) -> Trace {
    let spec = TraceSpec {
        flows,
        packets,
        alpha,
        active_flows: flows.min(2048),
        priority_share: 0.05,
        ..TraceSpec::default()
    };
    Trace::from_generated(Generator::new(&spec).unwrap())
}

fn chain() -> nf::Chain {
    ChainConfig::default_chain()
        .build(std::path::Path::new("."))
        .unwrap()
}

fn cfg(workers: usize, balancer: BalancerKind) -> RunConfig {
    RunConfig {
        workers,
        balancer,
        period: Duration::from_millis(1),
        pin: false,
        ..RunConfig::default()
    }
}

#[test]
fn conserves_packets_and_keeps_order_under_random_moves_and_offloads() {
    let t = trace(4000, 200_000, 1.1);
    let c = chain();
    let prep = Prepared::new(&c, &t, 46);
    let mut cfg = cfg(3, BalancerKind::Random);
    cfg.offloaders = 1;
    cfg.offload_ratio = 0.5;
    cfg.period = Duration::from_micros(200);
    let out = simulate(&prep, &t, &cfg, &CostModel::default()).unwrap();
    let r = &out.report;
    println!("{}", serde_json::to_string_pretty(r).unwrap());
    assert_eq!(r.mode, "sim");
    assert_eq!(r.packets_in, t.len() as u64);
    assert_eq!(r.packets_in, r.packets_out + r.dropped());
    assert_eq!(r.reordered, 0);
    assert_eq!(out.held, 0);
    assert_eq!(out.leftover_leases, 0);
    assert!(r.migrations["shard_moves"] > 20, "{:?}", r.migrations);
    assert!(r.migrations["flows_offloaded"] > 100, "{:?}", r.migrations);
    assert_eq!(
        r.migrations["flows_offloaded"],
        r.migrations["flows_recalled"]
    );
    let per: u64 = r.per_core.iter().map(|p| p.packets).sum();
    assert_eq!(
        per,
        r.packets_out + r.dropped() - r.drops["ring_full"] - r.drops["malformed"]
    );
    assert!(r.per_core[3].packets > 0, "the offloading core worked");
}

//! The simulator and the runtime run the same balancer and protocol code: with the
//! `probe` feature, `flowshift-balance` counts calls to its entry points, and both
//! drivers move those counters in step with what their reports say they did.
//! (One test per binary: the counters are process-wide.)

use std::time::Duration;

use balance::probe::{count, Probe};
use runspec::{BalancerKind, RunConfig};
use sim::{simulate, CostModel, Prepared};

mod common;

#[derive(Debug, Clone, Copy, PartialEq)]
struct Counts {
    begin: u64,
    on_packet: u64,
    on_shard: u64,
    route: u64,
    plan: u64,
}

fn counts() -> Counts {
    Counts {
        begin: count(Probe::MoverBegin),
        on_packet: count(Probe::OnPacket),
        on_shard: count(Probe::OnShard),
        route: count(Probe::Route),
        plan: count(Probe::RssppPlan),
    }
}

fn delta(a: Counts, b: Counts) -> Counts {
    Counts {
        begin: b.begin - a.begin,
        on_packet: b.on_packet - a.on_packet,
        on_shard: b.on_shard - a.on_shard,
        route: b.route - a.route,
        plan: b.plan - a.plan,
    }
}

#[test]
fn sim_and_runtime_drive_the_same_protocol_and_balancer_code() {
    let (t, chain) = common::workload(2000, 150_000, 1.3);
    let cfg = RunConfig {
        workers: 2,
        offloaders: 1,
        offload_ratio: 0.3,
        balancer: BalancerKind::Rsspp(Default::default()),
        period: Duration::from_micros(500),
        pin: false,
        ..RunConfig::default()
    };
    let before = counts();
    let prep = Prepared::new(&chain, &t, 46);
    let s = simulate(&prep, &t, &cfg, &CostModel::default())
        .unwrap()
        .report;
    let d_sim = delta(before, counts());
    let before = counts();
    let r = runtime::run(&chain, &t, &cfg).unwrap().report;
    let d_run = delta(before, counts());
    println!(
        "sim: {d_sim:?} moves {}\nrun: {d_run:?} moves {}",
        s.migrations["shard_moves"], r.migrations["shard_moves"]
    );
    for (d, rep) in [(d_sim, &s), (d_run, &r)] {
        assert_eq!(
            d.plan, rep.controller["rounds"] as u64,
            "one RSS++ plan per round"
        );
        assert!(d.begin >= rep.migrations["shard_moves"]);
        assert_eq!(
            d.on_shard, rep.migrations["shard_moves"],
            "one arrival per move"
        );
        let working: u64 = rep
            .per_core
            .iter()
            .filter(|p| p.role == "working")
            .map(|p| p.packets)
            .sum();
        let offloaded = rep
            .per_core
            .iter()
            .filter(|p| p.role == "offloading")
            .map(|p| p.packets)
            .sum::<u64>();
        assert!(
            d.on_packet >= working + offloaded,
            "every packet passes WorkerMoves::on_packet"
        );
        assert!(
            d.route > 0 && offloaded > 0,
            "flows offloaded through WorkingOffload::route"
        );
    }
    assert!(
        d_sim.plan >= 2 && s.migrations["shard_moves"] > 0,
        "{:?}",
        s.migrations
    );
}

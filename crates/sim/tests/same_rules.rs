//! The runtime and the simulator apply the same protocol rules: both drive one
//! working-core machine per core (`balance::migrate::WorkingCore`), and the step
//! log of a run of each (`probe` feature) goes through the same checks —
//! replaying each machine's inputs gives exactly the actions its driver carried
//! out, every shard sent arrives where it was sent, every recall returns, every
//! packet taken from a queue is counted for queue cycling. A rule applied by one
//! driver alone (a filtered input, an action dropped, delayed or invented) fails
//! here. (One test per binary: the log is process-wide.)

use std::time::Duration;

use balance::migrate::{check_drivers, steps::log, Exercised};
use runspec::{BalancerKind, RunConfig};
use sim::{simulate, CostModel, Prepared};

mod common;

fn exercised_all(what: &str, ex: &Exercised) {
    println!("{what}: {ex:?}");
    assert_eq!(ex.machines, 3, "{what}: one machine per working core");
    assert!(
        ex.hand_overs > 0 && ex.held > 0 && ex.recalls > 0 && ex.leases > 0 && ex.ratios > 0,
        "{what}: moves, holds, recalls, leases and ratio changes all happened: {ex:?}"
    );
}

#[test]
fn runtime_and_simulator_follow_the_same_rules() {
    let (t, chain) = common::workload(3_000, 60_000, 1.2);
    let cfg = RunConfig {
        workers: 3,
        offloaders: 1,
        offload_ratio: 0.5,
        balancer: BalancerKind::Random,
        period: Duration::from_micros(300),
        loops: 2,
        pin: false,
        ..RunConfig::default()
    };
    let prep = Prepared::new(&chain, &t, 46);
    log::start();
    let s = simulate(&prep, &t, &cfg, &CostModel::default()).unwrap();
    let sim_log = log::take();
    assert_eq!((s.held, s.leftover_leases, s.report.reordered), (0, 0, 0));
    let sim = check_drivers(&sim_log).unwrap_or_else(|e| panic!("simulator: {e}"));
    exercised_all("simulator", &sim);
    assert_eq!(
        sim.packets,
        s.report.packets_in - s.report.drops["ring_full"]
    );

    log::start();
    let r = runtime::run(&chain, &t, &cfg).unwrap();
    let run_log = log::take();
    assert_eq!((r.held, r.leftover_leases, r.report.reordered), (0, 0, 0));
    let run = check_drivers(&run_log).unwrap_or_else(|e| panic!("runtime: {e}"));
    exercised_all("runtime", &run);
    assert_eq!(
        run.packets,
        r.report.packets_in - r.report.drops["ring_full"]
    );
}

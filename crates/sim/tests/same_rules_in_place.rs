//! Without an offloading core a working core runs the packets of its queue
//! where they are (in the ring's slots) whenever none of them is held, and
//! tells its machine so without handing each one over: the step log of such a
//! run, with shards moving (so some bursts go the usual way, packets held),
//! passes the same checks as every driver's — each packet taken is reported,
//! only packets the machine said to run are run, every shard sent arrives.
//! (One test per binary: the log is process-wide.)

use std::time::Duration;

use balance::migrate::{check_drivers, steps::log};
use runspec::{BalancerKind, RunConfig};

mod common;

#[test]
fn a_core_running_packets_in_place_follows_the_rules() {
    let (t, chain) = common::workload(3_000, 60_000, 1.2);
    let cfg = RunConfig {
        workers: 3,
        balancer: BalancerKind::Random,
        period: Duration::from_micros(300),
        loops: 2,
        pin: false,
        ..RunConfig::default()
    };
    log::start();
    let r = runtime::run(&chain, &t, &cfg).unwrap();
    let run_log = log::take();
    assert_eq!((r.held, r.report.reordered), (0, 0));
    assert_eq!(
        r.report.packets_in,
        r.report.packets_out + r.report.dropped()
    );
    let ex = check_drivers(&run_log).unwrap_or_else(|e| panic!("runtime: {e}"));
    println!("{ex:?}");
    assert_eq!(ex.machines, 3);
    assert!(
        ex.hand_overs > 0 && ex.held > 0,
        "shards moved and packets were held meanwhile: {ex:?}"
    );
    assert_eq!(
        ex.packets,
        r.report.packets_in - r.report.drops["ring_full"]
    );
}

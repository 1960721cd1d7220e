//! The pool's replication in a simulated network (`pool::sim`): three nodes,
//! hundreds of connections sending one packet at a time (resending a lost one,
//! as TCP does), a node killed mid-run, then brought back.
//!
//! - Every packet that made state leaves only once two live nodes hold that
//!   state (the simulation asserts it at every such packet).
//! - After the kill, every connection goes on: no packet of an established
//!   connection ever reaches a node without its state (0 broken), and the
//!   connections the dead node served resume within the failure-detection time.
//! - The node that comes back receives its predecessor's checkpoint while
//!   traffic flows, then takes buckets, and still nothing breaks.

use pool::sim::{Failure, Sim, SimConfig};

#[test]
fn a_killed_node_breaks_no_connection_and_a_rejoining_one_neither() {
    let cfg = SimConfig::default();
    let detect = cfg.replica.heartbeat_ns * (u64::from(cfg.replica.dead_after) + 1);
    let retry = cfg.retry_ns;
    let mut w = Sim::new(cfg);
    w.run_until(20_000_000);
    assert!(w.all_established());
    assert_eq!(w.report().broken, 0);
    let victim = 1;
    let served = w
        .flows()
        .iter()
        .filter(|&&f| w.ring().route(f) == victim)
        .count();
    assert!(served > 50, "{served}");
    let kill_at = w.now();
    w.kill(victim);
    w.run_until(kill_at + 20_000_000);
    let r = w.report();
    assert_eq!(r.broken, 0, "connections broken by the failure");
    assert_eq!(r.failovers, 1);
    assert!(!w.ring().nodes().contains(&victim));
    // the dead node's connections resumed within detection plus a resend
    assert!(r.recovery_ns > 0);
    assert!(
        r.recovery_ns <= detect + 2 * retry,
        "recovery took {} ns",
        r.recovery_ns
    );
    eprintln!(
        "recovery: the dead node's {served} connections resumed within {:.2} ms (detection {:.2} ms)",
        r.recovery_ns as f64 / 1e6,
        detect as f64 / 1e6
    );
    // everyone's state is on both live nodes again once the syncs are done
    assert!(r.syncs >= 1, "no bulk sync after the failure");
    for f in w.flows() {
        let holders = w.nodes().filter(|n| n.record(f).is_some()).count();
        assert_eq!(holders, 2, "flow {f:#x} on {holders} node(s)");
    }
    // the node comes back after node 0 (its old predecessor)
    let join_at = w.now();
    w.revive(victim, 0);
    w.run_until(join_at + 20_000_000);
    let r = w.report();
    assert!(!w.joining(), "the joiner never got its checkpoint");
    assert!(
        w.ring().buckets().contains(&victim),
        "the joiner took no bucket"
    );
    assert_eq!(r.broken, 0, "connections broken by the join");
    assert!(r.node_packets.get(&victim).copied().unwrap_or(0) > 0);
    assert_eq!(r.unreplicated, 0);
    assert!(r.replicated > 0 && r.lag_ns[0] > 0);
}

/// Any node, killed at any point of the traffic, then brought back: nothing
/// breaks.
#[test]
fn no_victim_and_no_moment_breaks_a_connection() {
    for node in 0..3u16 {
        for at_ns in [1_230_000u64, 5_000_000, 12_340_000] {
            let cfg = SimConfig {
                connections: 120,
                ..SimConfig::default()
            };
            let r = Sim::new(cfg).run(
                Some(Failure {
                    node,
                    at_ns,
                    back_ns: Some(at_ns + 15_000_000),
                }),
                at_ns + 30_000_000,
            );
            assert_eq!(r.broken, 0, "victim {node} at {at_ns}");
            assert_eq!(r.failovers, 1, "victim {node} at {at_ns}");
            assert!(r.node_packets.get(&node).copied().unwrap_or(0) > 0);
        }
    }
}

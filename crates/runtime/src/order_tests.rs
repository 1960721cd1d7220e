//! The exit-order check sees reordering: with the hold queue broken on
//! purpose (held packets run in reverse), the runtime's `reordered` counts
//! reordered packets, each of which the sequence check inside the chain
//! counts too (it also counts a reply overtaken by its own flow's other
//! direction, which the per-direction exit order does not judge); with the
//! queue intact both are 0. Tests that set the fault run one at a time (a
//! lock).

use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Mutex;
use std::time::Duration;

use nf::ChainConfig;
use trace::{Generator, SizeDist, Trace, TraceSpec};

use crate::faults::REVERSE_HELD;
use crate::{run, BalancerKind, RunConfig, RunReport};

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn trace() -> Trace {
    let spec = TraceSpec {
        flows: 64,
        packets: 60_000,
        alpha: 1.1,
        sizes: SizeDist::Fixed(64),
        ..Default::default()
    };
    Trace::from_generated(Generator::new(&spec).unwrap())
}

/// FW → NAT → seqcheck on 2 cores, a shard moved every 200 µs.
fn moving(reverse_held: bool) -> RunReport {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let chain = ChainConfig::default_chain().build(Path::new(".")).unwrap();
    let cfg = RunConfig {
        workers: 2,
        balancer: BalancerKind::Random,
        period: Duration::from_micros(200),
        pin: false,
        ..Default::default()
    };
    REVERSE_HELD.store(reverse_held, Ordering::Relaxed);
    let out = run(&chain, &trace(), &cfg);
    REVERSE_HELD.store(false, Ordering::Relaxed);
    out.unwrap().report
}

fn seqcheck(r: &RunReport) -> u64 {
    r.nf["seqcheck"]["reordered"]
}

#[test]
fn a_broken_hold_queue_is_counted_as_the_sequence_check_counts_it() {
    // moves hold packets only now and then: a few runs make sure some were
    for _ in 0..20 {
        let r = moving(true);
        assert_eq!(r.packets_in, r.packets_out + r.dropped());
        assert!(
            r.reordered <= seqcheck(&r),
            "every packet the exit order finds late has a late sequence tag: {} vs {}",
            r.reordered,
            seqcheck(&r)
        );
        if r.reordered > 0 {
            assert!(r.migrations["packets_held"] > 1);
            return;
        }
    }
    panic!("no run held two packets of a flow");
}

#[test]
fn an_intact_hold_queue_reorders_nothing() {
    let r = moving(false);
    assert!(r.migrations["shard_moves"] > 0);
    assert_eq!((r.reordered, seqcheck(&r)), (0, 0));
}

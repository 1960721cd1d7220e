//! The simulator end to end: conservation, determinism, protocols exercised, and
//! the same balancer code as the runtime.

use std::time::Duration;

use nf::ChainConfig;
use runspec::{BalancerKind, RunConfig};
use sim::{simulate, Prepared};

mod common;
use common::model;
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
    let out = simulate(&prep, &t, &cfg, &model()).unwrap();
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

#[test]
fn same_inputs_same_report_bit_for_bit() {
    let t = trace(3000, 120_000, 1.2);
    let c = chain();
    let prep = Prepared::new(&c, &t, 46);
    let mut cfg = cfg(4, BalancerKind::Rsspp(Default::default()));
    cfg.offloaders = 1;
    cfg.offload_ratio = 0.3;
    cfg.period = Duration::from_micros(500);
    let m = model();
    let a = serde_json::to_string(&simulate(&prep, &t, &cfg, &m).unwrap().report).unwrap();
    // a second functional pass too: nothing depends on addresses or hash-map order
    let prep2 = Prepared::new(&c, &t, 46);
    let b = serde_json::to_string(&simulate(&prep2, &t, &cfg, &m).unwrap().report).unwrap();
    assert_eq!(a, b);
    // and the seed matters where it should: the random balancer
    let mut r1 = cfg.clone();
    r1.balancer = BalancerKind::Random;
    let mut r2 = r1.clone();
    r2.seed = 2;
    let x = simulate(&prep, &t, &r1, &m).unwrap().report;
    let y = simulate(&prep, &t, &r2, &m).unwrap().report;
    assert_ne!(
        serde_json::to_string(&x).unwrap(),
        serde_json::to_string(&y).unwrap()
    );
}

#[test]
fn timed_overload_drops_at_the_ring_and_more_cores_carry_it() {
    // 4 000 flows offered at 4 Mpps: one core (≈ 2–3 Mpps) drops, four do not
    let spec = TraceSpec {
        flows: 4000,
        packets: 100_000,
        rate: trace::Rate::Mpps(4.0),
        arrival: trace::Arrival::Constant,
        ..TraceSpec::default()
    };
    let t = Trace::from_generated(Generator::new(&spec).unwrap());
    let c = chain();
    let prep = Prepared::new(&c, &t, 46);
    let m = model();
    let mut one = cfg(1, BalancerKind::Static);
    one.pace = trace::Pace::Timed { speed: 1.0 };
    let mut four = one.clone();
    four.workers = 4;
    let a = simulate(&prep, &t, &one, &m).unwrap().report;
    let b = simulate(&prep, &t, &four, &m).unwrap().report;
    assert!(a.drops["ring_full"] > 10_000, "{:?}", a.drops);
    assert_eq!(b.drops["ring_full"], 0);
    assert!(
        (b.throughput["offered_mpps"] - 4.0).abs() < 0.1,
        "{:?}",
        b.throughput
    );
    assert!(
        b.latency_ns["all"].p99 < a.latency_ns["all"].p50,
        "queues build up on one core only"
    );
    for r in [&a, &b] {
        assert_eq!(r.packets_in, r.packets_out + r.dropped());
    }
}

#[test]
fn bad_input_gets_a_clear_error() {
    let t = trace(100, 2000, 1.0);
    let c = chain();
    let prep = Prepared::new(&c, &t, 46);
    let m = model();
    let e = simulate(&prep, &t, &cfg(0, BalancerKind::Static), &m).unwrap_err();
    assert!(e.to_string().contains("workers"), "{e}");
    let e = simulate(&prep, &t, &cfg(2, BalancerKind::Sprayer), &m).unwrap_err();
    assert!(e.to_string().contains("sprayer"), "{e}");
    let other = trace(100, 1000, 1.0);
    let e = simulate(&prep, &other, &cfg(2, BalancerKind::Static), &m).unwrap_err();
    assert!(e.to_string().contains("prepared"), "{e}");
    let mut model = m.clone();
    model.nf_ns.remove("nat");
    let e = simulate(&prep, &t, &cfg(2, BalancerKind::Static), &model).unwrap_err();
    assert!(e.to_string().contains("`nat`"), "{e}");
}

/// Random moves, ratio and offloading-core changes with both selections and small
/// rings (offload back-pressure), over many seeds: nothing is ever left held,
/// pending or offloaded, nothing reordered or lost.
#[test]
fn protocols_always_complete_under_random_plans() {
    let t = trace(3000, 60_000, 1.2);
    let c = chain();
    let prep = Prepared::new(&c, &t, 46);
    let m = model();
    for seed in 0..24u64 {
        let mut cfg = cfg(3, BalancerKind::Random);
        cfg.offloaders = 1 + (seed % 2) as usize;
        cfg.offload_ratio = 0.5;
        cfg.seed = seed;
        cfg.ring_size = if seed % 3 == 0 { 8 } else { 1024 };
        cfg.burst = [1, 4, 32][(seed % 3) as usize];
        cfg.period = Duration::from_micros(100 + 50 * (seed % 4));
        cfg.offload_select = if seed % 2 == 0 {
            runspec::OffloadSelect::Heaviest
        } else {
            runspec::OffloadSelect::Hash
        };
        let out = simulate(&prep, &t, &cfg, &m).unwrap();
        let r = &out.report;
        assert_eq!(
            (out.held, out.leftover_leases, r.reordered),
            (0, 0, 0),
            "seed {seed}: {:?}",
            r.migrations
        );
        assert_eq!(r.packets_in, r.packets_out + r.dropped(), "seed {seed}");
        assert_eq!(
            r.migrations["flows_offloaded"], r.migrations["flows_recalled"],
            "seed {seed}"
        );
    }
}

/// A replayed trace finds its flows' entries from the second loop on: the
/// packet that created an entry is then a hit like any other (it may be
/// offloaded with its flow, and no flow is created twice) — before this was
/// modelled, a heavy flow's first packet ran at home on every loop while the
/// rest of the flow sat in the offload ring, and came out ahead of them.
#[test]
fn replayed_trace_is_created_once_and_stays_in_order() {
    let t = trace(2000, 40_000, 1.1);
    let c = chain();
    let prep = Prepared::new(&c, &t, 46);
    let m = model();
    let run = |loops: u32| {
        let mut cfg = cfg(3, BalancerKind::Random);
        cfg.offloaders = 1;
        cfg.offload_ratio = 0.5;
        cfg.offload_select = runspec::OffloadSelect::Heaviest;
        cfg.period = Duration::from_micros(100);
        cfg.loops = loops;
        simulate(&prep, &t, &cfg, &m).unwrap().report
    };
    let one = run(1);
    let four = run(4);
    assert_eq!(four.packets_in, 4 * one.packets_in);
    assert_eq!(four.reordered, 0, "{:?}", four.migrations);
    assert!(
        four.migrations["flows_offloaded"] > 0,
        "{:?}",
        four.migrations
    );
    assert_eq!(four.flows["created"], one.flows["created"]);
    assert!(one.flows["created"] > 1000, "{:?}", one.flows);
}

/// A shard move carries the entries its table holds at that moment: with idle
/// timeouts shorter than the trace, flows that ended are expired in the
/// functional pass (as the runtime's timers do) and no longer charged, so the
/// same moves carry far fewer entries than with timeouts longer than the trace,
/// where every flow ever seen is still live.
#[test]
fn moves_carry_live_entries_only() {
    let spec = TraceSpec {
        flows: 20_000,
        packets: 200_000,
        active_flows: 200,
        rate: trace::Rate::Mpps(1.0),
        ..TraceSpec::default()
    };
    let t = Trace::from_generated(Generator::new(&spec).unwrap());
    let chain_with = |timeouts: &str| {
        let idle = if timeouts.is_empty() { "300s" } else { "20ms" };
        ChainConfig::from_toml(&format!(
            "[table]\ntimer_tick = \"1ms\"\n[[nf]]\nkind = \"firewall\"\n\
             rules = \"allow any 10.0.0.0/8 -> any\"\n[nf.timeouts]\n{timeouts}\n\
             [[nf]]\nkind = \"seqcheck\"\nidle = \"{idle}\"\n"
        ))
        .unwrap()
        .build(std::path::Path::new("."))
        .unwrap()
    };
    let short = "syn_sent = \"20ms\"\nsyn_recv = \"20ms\"\nestablished = \"20ms\"\nfin_wait = \"5ms\"\ntime_wait = \"5ms\"\nclose = \"5ms\"";
    let mut moved = Vec::new();
    for timeouts in [short, ""] {
        let c = chain_with(timeouts);
        let prep = Prepared::new(&c, &t, 46);
        let created = prep.pkts.iter().filter(|p| p.flags & 1 == 0).count() as u64;
        // the last packet of each shard: its table's size at the end
        let mut last = vec![0u64; c.shard_count()];
        for p in &prep.pkts {
            last[c.shard_of(p.hash)] = u64::from(p.live);
        }
        let live_end: u64 = last.iter().sum();
        let mut cfg = cfg(2, BalancerKind::Random);
        cfg.period = Duration::from_millis(1);
        let r = simulate(&prep, &t, &cfg, &model()).unwrap().report;
        assert!(r.migrations["shard_moves"] > 10, "{:?}", r.migrations);
        println!(
            "timeouts {timeouts:?}: {created} flows, {live_end} live at the end, {:?}",
            r.migrations
        );
        if timeouts.is_empty() {
            assert_eq!(live_end, created, "nothing expires within the trace");
        } else {
            assert!(live_end < created / 3, "{live_end} of {created} still live");
        }
        moved.push(r.migrations["entries_moved"] as f64 / r.migrations["shard_moves"] as f64);
    }
    assert!(
        moved[0] * 3.0 < moved[1],
        "entries per move: short timeouts {:.0}, long {:.0}",
        moved[0],
        moved[1]
    );
}

/// A move the controller begins while the NIC model steers its last packets:
/// the NIC then sees every newer table at once (nothing is left to steer), so
/// the move completes and the run ends with every offloaded flow home. Periods
/// are swept so that rounds land at every point of the last bursts.
#[test]
fn a_move_begun_at_the_end_of_the_trace_completes() {
    let t = trace(2000, 20_000, 1.1);
    let c = chain();
    let prep = Prepared::new(&c, &t, 46);
    let m = model();
    for i in 0..40u64 {
        let mut cfg = cfg(3, BalancerKind::Random);
        cfg.offloaders = 1;
        cfg.offload_ratio = 0.5;
        cfg.seed = i;
        cfg.pace = trace::Pace::Timed { speed: 1.0 };
        cfg.period = Duration::from_micros(97 + 13 * i);
        let out = simulate(&prep, &t, &cfg, &m).unwrap();
        assert_eq!(
            (out.held, out.leftover_leases),
            (0, 0),
            "period {:?}: {:?}",
            cfg.period,
            out.report.migrations
        );
    }
}

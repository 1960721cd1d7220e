//! The simulator at more cores than this machine has:
//! - static RSS at 16 cores puts on each core exactly the packets of its
//!   buckets, computed here from the trace alone, and the cores' loads follow
//!   their packet counts (the analytic bound the papers' RSS curves rest on);
//! - RSS++ against static RSS on a skewed trace whose elephants live long at
//!   moderate rates (`sized` lifetimes, as in real traces and the papers'): at 8
//!   cores RSS++'s per-period imbalance (RSS++ Fig. 12b's metric) and its
//!   whole-run balance are never worse than static RSS's, and far better.

use std::time::Duration;

use nf::ChainConfig;
use runspec::{BalancerKind, RunConfig};
use sim::{simulate, Prepared};

mod common;

/// The shared test model with a cheaper new flow (400 ns): a core's share of
/// new flows then moves its per-packet cost less, so loads follow packets.
fn model() -> sim::CostModel {
    let mut m = common::model();
    m.new_flow_ns = 400.0;
    m
}
use trace::{Generator, Lifetimes, Trace, TraceSpec};

fn chain(buckets: usize) -> nf::Chain {
    ChainConfig::from_toml(&format!(
        "[steering]\nbuckets = {buckets}\nshards = {buckets}\n[[nf]]\nkind = \"firewall\"\n\
         rules = \"allow any 10.0.0.0/8 -> any\"\n[[nf]]\nkind = \"seqcheck\"\n"
    ))
    .unwrap()
    .build(std::path::Path::new("."))
    .unwrap()
}

#[test]
fn static_rss_loads_are_the_sums_of_their_buckets() {
    let chain = chain(256);
    let spec = TraceSpec {
        flows: 20_000,
        packets: 200_000,
        active_flows: 4_000,
        alpha: 1.1,
        lifetimes: Lifetimes::Sized(0.7),
        rate: trace::Rate::Mpps(8.0),
        ..TraceSpec::default()
    };
    let t = Trace::from_generated(Generator::new(&spec).unwrap());
    let workers = 16;
    // from the trace alone: hash → bucket → shard (one per bucket) → core
    // (shard s starts on core s mod workers)
    let mut expected = vec![0u64; workers];
    for (_, f) in t.iter() {
        let p = wire::parse(f).unwrap();
        let b = chain.hasher().hash(&p.tuple) as usize & (chain.buckets() - 1);
        expected[chain.shard_of(b as u32) % workers] += 1;
    }
    let prep = Prepared::new(&chain, &t, 46);
    let cfg = RunConfig {
        workers,
        balancer: BalancerKind::Static,
        period: Duration::from_millis(1),
        pin: false,
        pace: trace::Pace::Timed { speed: 1.0 },
        ..RunConfig::default()
    };
    let r = simulate(&prep, &t, &cfg, &model()).unwrap().report;
    assert_eq!(r.dropped(), 0);
    let got: Vec<u64> = r.per_core.iter().map(|c| c.packets).collect();
    assert_eq!(got, expected);
    // each core's busy time is its packets times about one per-packet cost
    let ns: Vec<f64> = r
        .per_core
        .iter()
        .map(|c| c.load / c.packets as f64)
        .collect();
    let (lo, hi) = ns
        .iter()
        .fold((f64::MAX, 0f64), |(l, h), x| (l.min(*x), h.max(*x)));
    println!("packets per core {got:?}; load per packet {lo:e}..{hi:e}");
    assert!(hi / lo < 1.15, "{ns:?}");
    let pmax = *got.iter().max().unwrap() as f64 / *got.iter().min().unwrap() as f64;
    assert!(
        (r.imbalance["max_over_min"] / pmax - 1.0).abs() < 0.15,
        "load max/min {} vs packets {pmax}",
        r.imbalance["max_over_min"]
    );
}

/// Static RSS and RSS++ (at a fixed 1 ms period) on 8 simulated cores over
/// `t` at its own pace, queues of `ring_size`: both reports, checked for
/// conservation and order, RSS++ having moved shards.
fn static_and_rsspp(
    chain: &nf::Chain,
    t: &Trace,
    model: &sim::CostModel,
    ring_size: usize,
) -> (runspec::RunReport, runspec::RunReport) {
    let prep = Prepared::new(chain, t, 46);
    let run = |balancer| {
        let cfg = RunConfig {
            workers: 8,
            balancer,
            period: Duration::from_millis(1),
            pin: false,
            pace: trace::Pace::Timed { speed: 1.0 },
            ring_size,
            ..RunConfig::default()
        };
        simulate(&prep, t, &cfg, model).unwrap().report
    };
    let rsspp = BalancerKind::Rsspp(balance::balancers::RssppConfig {
        min_period_ns: 1_000_000,
        max_period_ns: 1_000_000,
        ..Default::default()
    });
    let (s, r) = (run(BalancerKind::Static), run(rsspp));
    println!(
        "static {:?} drops {}, rsspp {:?} drops {}, moves {}",
        s.imbalance,
        s.dropped(),
        r.imbalance,
        r.dropped(),
        r.migrations["shard_moves"]
    );
    for x in [&s, &r] {
        assert_eq!(x.packets_in, x.packets_out + x.dropped());
        assert_eq!(x.reordered, 0);
    }
    assert!(r.migrations["shard_moves"] > 0);
    (s, r)
}

#[test]
fn rsspp_is_never_worse_than_static_rss_per_period() {
    let chain = chain(128);
    let model = model();
    for (alpha, lifetimes) in [(1.0, Lifetimes::Sized(0.7)), (1.1, Lifetimes::Sized(1.0))] {
        let spec = TraceSpec {
            flows: 40_000,
            packets: 400_000,
            active_flows: 8_000,
            alpha,
            lifetimes,
            // ≈ 50 % of 8 cores at ≈ 400 ns per packet
            rate: trace::Rate::Mpps(10.0),
            ..TraceSpec::default()
        };
        let t = Trace::from_generated(Generator::new(&spec).unwrap());
        println!("α {alpha} {lifetimes}:");
        let (s, r) = static_and_rsspp(&chain, &t, &model, RunConfig::default().ring_size);
        let (si, ri) = (&s.imbalance, &r.imbalance);
        assert!(
            ri["period_median"] < 0.5 * si["period_median"],
            "α {alpha}: per-period imbalance rsspp {} vs static {}",
            ri["period_median"],
            si["period_median"]
        );
        assert!(ri["max_over_min"] <= si["max_over_min"]);
        assert!(r.dropped() <= s.dropped());
    }
}

/// Dyssect Use Case II's workload (a NAT and a payload-scanning IDS, 1 001 B
/// packets, Zipf α 1.1, every flow active, 8 cores at ≈ 90 %): RSS++ is never
/// worse than static RSS per period, and drops less.
#[test]
fn rsspp_is_never_worse_than_static_rss_on_the_use_case_workload() {
    let chain = ChainConfig::from_toml(
        "[steering]\nbuckets = 128\nshards = 128\n[[nf]]\nkind = \"nat\"\n\
         internal = \"10.0.0.0/8\"\nexternal = [\"203.0.113.0/24\"]\n[[nf]]\nkind = \"ids\"\n\
         rules = 'alert tcp any any -> any any (msg:\"x\"; content:\"cmd.exe\"; sid:1;)'\n",
    )
    .unwrap()
    .build(std::path::Path::new("."))
    .unwrap();
    let mut model = model();
    // the IDS walks every payload byte: most of a 1 001 B packet's cost
    model.nf_ns.insert("ids".into(), 1200.0);
    let spec = TraceSpec {
        flows: 20_000,
        packets: 200_000,
        active_flows: 20_000,
        alpha: 1.1,
        tcp_share: 1.0,
        sizes: trace::SizeDist::Fixed(1001),
        // ≈ 90 % of 8 cores at ≈ 1 500 ns per packet
        rate: trace::Rate::Mpps(4.8),
        ..TraceSpec::default()
    };
    let t = Trace::from_generated(Generator::new(&spec).unwrap());
    let (s, r) = static_and_rsspp(&chain, &t, &model, 4096);
    let (si, ri) = (&s.imbalance, &r.imbalance);
    assert!(
        ri["period_median"] <= si["period_median"],
        "per-period imbalance rsspp {} vs static {}",
        ri["period_median"],
        si["period_median"]
    );
    assert!(ri["max_over_min"] <= si["max_over_min"]);
    assert!(r.dropped() <= s.dropped());
}

//! Simulated packets per second of wall time (goal ≥ 5 M on one core): the timing
//! pass only (the functional pass is done once per trace and chain), static and
//! with RSS++ moving shards, 2 and 16 working cores, as fast as the cores take
//! packets.

use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use nf::ChainConfig;
use runspec::{BalancerKind, RunConfig};
use sim::{simulate, CostModel, Prepared};
use trace::{Generator, Trace, TraceSpec};

fn bench(c: &mut Criterion) {
    let spec = TraceSpec {
        flows: 20_000,
        packets: 1_000_000,
        alpha: 1.1,
        active_flows: 4096,
        ..TraceSpec::default()
    };
    let t = Trace::from_generated(Generator::new(&spec).unwrap());
    let mut cc = ChainConfig::default_chain();
    cc.steering.shards = Some(128);
    let chain = cc.build(std::path::Path::new(".")).unwrap();
    let prep = Prepared::new(&chain, &t, 46);
    // a 100 Mpps hardware NIC, as in docs/EXPERIMENTS.md (the bundled model's NIC
    // is this machine's NIC-model thread, the bottleneck at 2 cores)
    let model = CostModel {
        nic_ns: 10.0,
        ..CostModel::default()
    };
    let mut g = c.benchmark_group("simulate");
    g.sample_size(10);
    g.throughput(Throughput::Elements(t.len() as u64));
    for workers in [2usize, 16] {
        for (name, kind) in [
            ("static", BalancerKind::Static),
            ("rsspp", BalancerKind::Rsspp(Default::default())),
        ] {
            let cfg = RunConfig {
                workers,
                balancer: kind,
                period: Duration::from_millis(1),
                ..RunConfig::default()
            };
            g.bench_with_input(BenchmarkId::new(name, workers), &cfg, |b, cfg| {
                b.iter(|| simulate(&prep, &t, cfg, &model).unwrap().report.packets_out)
            });
        }
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);

//! Short-timescale solve time at 16 shards × 8 cores and 64 × 16, with offloading
//! cores, on Zipf-skewed shard loads: Table III (fewest migrations, the paper's
//! short-timescale model) and the linear Table IV (lowest maximum utilisation +
//! α × migrations).

use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use dyssect::{solve, Instance, Objective};

fn instance(shards: usize, workers: usize, offloaders: usize) -> Instance {
    // Zipf α = 1.1 over shards, the heaviest at 1.2 cores (it must offload)
    let load: Vec<f64> = (0..shards)
        .map(|i| 1.2 / ((i + 1) as f64).powf(1.1))
        .collect();
    Instance {
        load,
        r_max: vec![0.9; shards],
        r_min: vec![0.0; shards],
        workers,
        offloaders,
        owner: (0..shards).map(|s| s % workers).collect(),
        offload_core: (0..workers)
            .map(|c| (offloaders > 0).then_some(c % offloaders.max(1)))
            .collect(),
        u_work: 0.9,
        u_off: 0.9,
        residual: 0.25,
        offload_scale: 1.0,
        min_served: 2,
        fixed: vec![false; shards],
    }
}

fn short(c: &mut Criterion) {
    let mut g = c.benchmark_group("dyssect_short");
    g.sample_size(10);
    for (s, w, o) in [(16usize, 7usize, 1usize), (64, 14, 2)] {
        let inst = instance(s, w, o);
        for (name, obj) in [
            (
                "migrations",
                Objective::Migrations {
                    working: w,
                    offloading: o,
                },
            ),
            (
                "balance",
                Objective::Balance {
                    working: w,
                    offloading: o,
                    alpha: 0.01,
                },
            ),
        ] {
            g.bench_with_input(
                BenchmarkId::new(name, format!("{s}x{}", w + o)),
                &inst,
                |b, i| b.iter(|| solve(i, obj, Duration::from_secs(30)).unwrap()),
            );
        }
    }
    g.finish();
}

criterion_group!(benches, short);
criterion_main!(benches);

//! Plan time of the balancers on synthetic snapshots: RSS++ at 128 and 512 shards
//! (one per bucket, as RSS++'s per-bucket tables) × 4, 8 and 16 cores, on a skewed
//! load where every round has work to do.

use balance::balancers::{Rsspp, RssppConfig};
use balance::{Balancer, CoreId, Snapshot};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// A snapshot of `pk` packets per shard (relative), owners round-robin over
/// `cores`, core loads the sums scaled so the mean is 0.6.
fn snapshot(pk: &[f64], cores: usize) -> Snapshot {
    let shards = pk.len();
    let owner: Vec<CoreId> = (0..shards).map(|s| (s % cores) as CoreId).collect();
    let mut core = vec![0.0; cores];
    for (s, &o) in owner.iter().enumerate() {
        core[usize::from(o)] += pk[s];
    }
    let total: f64 = core.iter().sum();
    let scale = 0.6 * cores as f64 / total;
    Snapshot {
        period_ns: 100_000_000,
        shards,
        workers: cores,
        owner,
        bucket_packets: pk.iter().map(|p| (p * 1e6) as u64).collect(),
        core_load: core.iter().map(|c| (c * scale).min(1.0)).collect(),
        ..Default::default()
    }
}

/// Zipf-like bucket loads (α ≈ 1.1 over buckets), shuffled over the cores.
fn skewed(shards: usize, cores: usize, seed: u64) -> Snapshot {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut pk: Vec<f64> = (0..shards)
        .map(|i| 1.0 / ((i + 1) as f64).powf(1.1) * rng.gen_range(0.5..1.5))
        .collect();
    for i in (1..pk.len()).rev() {
        let j = rng.gen_range(0..=i);
        pk.swap(i, j);
    }
    snapshot(&pk, cores)
}

/// RSS's usual imbalance: bucket loads uniform ± 50 % (many mid-size flows per
/// bucket) — the common case where a round settles in one run.
fn mild(shards: usize, cores: usize, seed: u64) -> Snapshot {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let pk: Vec<f64> = (0..shards).map(|_| rng.gen_range(0.5..1.5)).collect();
    snapshot(&pk, cores)
}

fn rsspp(c: &mut Criterion) {
    let mut g = c.benchmark_group("rsspp_plan");
    for (kind, make) in [
        ("zipf", skewed as fn(usize, usize, u64) -> Snapshot),
        ("mild", mild),
    ] {
        for shards in [128usize, 512] {
            for cores in [4usize, 8, 16] {
                let snap = make(shards, cores, 7);
                g.bench_with_input(
                    BenchmarkId::new(kind, format!("{shards}x{cores}")),
                    &snap,
                    |b, s| {
                        b.iter(|| {
                            // a fresh balancer per round: no "sat out" cores, full work
                            let mut r = Rsspp::new(RssppConfig::default());
                            r.plan(s)
                        })
                    },
                );
            }
        }
    }
    g.finish();
}

criterion_group!(benches, rsspp);
criterion_main!(benches);

//! Prints what one RSS++ round does on the benchmark's skewed snapshots.
use balance::balancers::{Rsspp, RssppConfig};
use balance::{Balancer, CoreId, Snapshot};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

fn skewed(shards: usize, cores: usize, seed: u64) -> Snapshot {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut pk: Vec<f64> = (0..shards)
        .map(|i| 1.0 / ((i + 1) as f64).powf(1.1) * rng.gen_range(0.5..1.5))
        .collect();
    for i in (1..pk.len()).rev() {
        let j = rng.gen_range(0..=i);
        pk.swap(i, j);
    }
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

fn main() {
    for (s, c) in [(128, 4), (128, 16), (512, 16)] {
        let snap = skewed(s, c, 7);
        let mut r = Rsspp::new(RssppConfig::default());
        let p = r.plan(&snap);
        println!("{s}x{c}: {:?} moves {}", r.last_round(), p.moves.len());
    }
}

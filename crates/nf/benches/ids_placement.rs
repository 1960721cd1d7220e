//! The cost of each placement of the IDS's pattern matching (GranularNF's
//! offloading component), measured in one run: 4 000 TCP packets of 1 400 B
//! payload over 400 flows through a one-NF chain with 1 000 content rules and 20
//! content + pcre rules —
//! - `inline`: the worker scans every payload itself;
//! - `core, data path`: the worker's time only (blacklist and dropped checks, a
//!   payload copy, a ring push); the component scans on the other core meanwhile
//!   and is waited for outside the timing;
//! - `core, end to end`: until the component has scanned everything.
//!
//! `cargo bench -p flowshift-nf --bench ids_placement`

mod common;

use std::net::Ipv4Addr;
use std::path::Path;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use nf::{Chain, ChainConfig, Packet, Shard};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use wire::TcpFlags;

fn chain(placement: &str, rules: &str) -> (Chain, Vec<Shard>) {
    let toml = format!(
        "[[nf]]\nkind = \"ids\"\nplacement = \"{placement}\"\nring = 65536\nrules = '''\n{rules}'''\n"
    );
    let c = ChainConfig::from_toml(&toml)
        .unwrap()
        .build(Path::new("."))
        .unwrap();
    let s = c.new_shards();
    (c, s)
}

fn ids(c: &Chain) -> &nf::ids::Ids {
    c.nfs()[0].as_any().downcast_ref().unwrap()
}

fn run(c: &mut Chain, s: &mut [Shard], pkts: &[Packet]) {
    for p in pkts {
        let mut p = p.clone();
        let now = p.ts_ns;
        let i = c.shard_of(p.hash);
        std::hint::black_box(c.process(&mut s[i], &mut p, now));
    }
}

fn bench(c: &mut Criterion) {
    // `cargo test --all-targets` runs this once, unoptimized: small then
    let full = std::env::args().any(|a| a == "--bench");
    let (lits, res, n) = if full { (1000, 20, 4000) } else { (50, 2, 200) };
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    let text = common::ids_rules(lits, res, &mut rng);
    let (probe, _) = chain("inline", &text);
    let pkts: Vec<Packet> = (0..n)
        .map(|k| {
            let payload: Vec<u8> = (0..1400)
                .map(|_| {
                    let x = rng.gen_range(0..30u8);
                    if x < 26 {
                        b'a' + x
                    } else {
                        b' '
                    }
                })
                .collect();
            let f = common::tcp_frame(
                (Ipv4Addr::from(0x0a00_0000 | (k % 400)), 40_000),
                (Ipv4Addr::new(198, 18, 0, 1), 80),
                1 + 1400 * (k / 400),
                TcpFlags::ACK,
                &payload,
            );
            probe.packet(f, u64::from(k) * 1_000).unwrap()
        })
        .collect();
    let bytes = 1400 * u64::from(n);
    let mut g = c.benchmark_group("ids_placement");
    g.sample_size(10);
    g.throughput(Throughput::Bytes(bytes));
    let (mut ci, mut si) = chain("inline", &text);
    g.bench_function("inline", |b| b.iter(|| run(&mut ci, &mut si, &pkts)));
    let (mut cc, mut sc) = chain("core", &text);
    g.bench_function("core, data path", |b| {
        b.iter_custom(|iters| {
            let mut t = Duration::ZERO;
            for _ in 0..iters {
                let t0 = Instant::now();
                run(&mut cc, &mut sc, &pkts);
                t += t0.elapsed();
                assert!(ids(&cc).wait_idle(Duration::from_secs(60)));
            }
            t
        })
    });
    g.bench_function("core, end to end", |b| {
        b.iter(|| {
            run(&mut cc, &mut sc, &pkts);
            assert!(ids(&cc).wait_idle(Duration::from_secs(60)));
        })
    });
    g.finish();
    let k: std::collections::BTreeMap<_, _> = cc.nfs()[0].counters().into_iter().collect();
    eprintln!(
        "core placement: {} payloads offloaded, {} lost (ring full)",
        k["offloaded"], k["offload_lost"]
    );
}

criterion_group!(benches, bench);
criterion_main!(benches);

//! The IDS matcher's scan rate (bytes per second, one thread) on 1 000 literal
//! patterns, with and without 20 content + pcre rules beside them, over 1 MiB of random
//! text fed in 1 460-byte packets from saved per-flow states (streaming, as the
//! NF does), side by side with one unbroken 1 MiB buffer — the cost of stopping
//! and resuming at packet boundaries — in one run.
//!
//! `cargo bench -p flowshift-nf --bench ids`

mod common;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use nf::ids::{parse, Matcher, Progress};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

fn bench(c: &mut Criterion) {
    // `cargo test --all-targets` runs this once, unoptimized, without `--bench`:
    // a small rule set and text then (the full one takes minutes to compile there)
    let full = std::env::args().any(|a| a == "--bench");
    let (lits, res, bytes) = if full {
        (1000, 20, 1 << 20)
    } else {
        (50, 2, 1 << 14)
    };
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let text: Vec<u8> = (0..bytes)
        .map(|_| {
            let x = rng.gen_range(0..30u8);
            if x < 26 {
                b'a' + x
            } else {
                b' '
            }
        })
        .collect();
    let mut g = c.benchmark_group("ids_scan");
    g.throughput(Throughput::Bytes(text.len() as u64));
    g.sample_size(20);
    for (name, lits, res) in [
        (format!("{lits} literals"), lits, 0),
        (format!("{lits} literals + {res} regexes"), lits, res),
    ] {
        let m = Matcher::new(&parse(&common::ids_rules(lits, res, &mut rng)).unwrap()).unwrap();
        g.bench_function(format!("{name}, 1460 B packets"), |b| {
            b.iter(|| {
                let mut st = m.start();
                let mut pr = Progress::default();
                let mut hits = 0u64;
                for p in text.chunks(1460) {
                    m.feed(&mut st, &mut pr, p, |_| hits += 1);
                }
                hits
            })
        });
        g.bench_function(format!("{name}, one buffer"), |b| {
            b.iter(|| {
                let mut st = m.start();
                let mut pr = Progress::default();
                let mut hits = 0u64;
                m.feed(&mut st, &mut pr, &text, |_| hits += 1);
                hits
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);

//! ns per IPv4 5-tuple hash: table-driven vs the naive bit loop, in one run.
//!
//! `cargo bench -p flowshift-steer --bench toeplitz`

use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use steer::{toeplitz_naive, RssKey, Toeplitz};

fn tuples() -> Vec<[u8; 12]> {
    // deterministic pseudo-random tuples (xorshift), so every variant hashes the same input
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    (0..1024)
        .map(|_| {
            let mut t = [0u8; 12];
            for b in t.iter_mut() {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                *b = x as u8;
            }
            t
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let t = Toeplitz::new(RssKey::SYMMETRIC);
    let inputs = tuples();
    let mut g = c.benchmark_group("toeplitz_ipv4_5tuple");
    g.throughput(Throughput::Elements(inputs.len() as u64));
    g.bench_function("naive_bit_loop", |b| {
        b.iter(|| {
            inputs.iter().fold(0u32, |h, i| {
                h ^ toeplitz_naive(&RssKey::SYMMETRIC, black_box(i))
            })
        })
    });
    g.bench_function("table_slice", |b| {
        b.iter(|| inputs.iter().fold(0u32, |h, i| h ^ t.hash(black_box(i))))
    });
    g.bench_function("table_v4_unrolled", |b| {
        b.iter(|| {
            inputs.iter().fold(0u32, |h, i| {
                let i = black_box(i);
                h ^ t.hash_v4_ports(
                    [i[0], i[1], i[2], i[3]],
                    [i[4], i[5], i[6], i[7]],
                    u16::from_be_bytes([i[8], i[9]]),
                    u16::from_be_bytes([i[10], i[11]]),
                )
            })
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);

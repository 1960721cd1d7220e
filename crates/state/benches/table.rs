//! Flow-table lookups, hit and miss, at 10 K, 100 K and 1 M flows, one at a time
//! and in prefetching bursts of 32, in one run.
//!
//! `cargo bench -p flowshift-state --bench table`

use std::net::{IpAddr, Ipv4Addr};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use state::{FlowKey, FlowTable, Side, TableConfig};
use steer::{hash_input, HashFields, RssKey, Toeplitz};
use wire::FiveTuple;

fn tuple(i: u32, salt: u32) -> FiveTuple {
    FiveTuple {
        src: IpAddr::V4(Ipv4Addr::from(
            0x0a00_0000 | (i.wrapping_mul(2_654_435_761) >> 8),
        )),
        dst: IpAddr::V4(Ipv4Addr::from(0xc612_0000 | (i ^ salt) & 0xffff)),
        src_port: (i % 60_000) as u16 + 1024,
        dst_port: 443,
        proto: 6,
    }
}

fn reqs(n: u32, salt: u32, t: &Toeplitz) -> Vec<(FlowKey, Side, u32)> {
    (0..n)
        .map(|i| {
            let tu = tuple(i, salt);
            let (k, s) = FlowKey::of(&tu);
            (
                k,
                s,
                t.hash(hash_input(&tu, HashFields::IpPorts).as_bytes()),
            )
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let t = Toeplitz::new(RssKey::SYMMETRIC);
    let mut g = c.benchmark_group("flow_table_lookup");
    g.sample_size(20);
    for n in [10_000u32, 100_000, 1_000_000] {
        let cfg = TableConfig {
            capacity: n as usize,
            slots: 3,
            ..Default::default()
        };
        let mut table: FlowTable<Option<[u64; 4]>> = FlowTable::new(cfg);
        let hits = reqs(n, 0, &t);
        for (k, s, h) in &hits {
            table.insert(*k, *s, *h, |_, _, _| {}).unwrap();
        }
        let misses = reqs(n, 0x5a5a, &t);
        // look up in a scrambled order so consecutive lookups do not share cache lines
        let order: Vec<usize> = (0..n as usize).map(|i| (i * 7_919) % n as usize).collect();
        const BURST: usize = 32;
        // every flow once per iteration, in a scrambled order: at 1 M flows the
        // working set is far beyond the caches, as in a real run
        let per = n as usize;
        g.throughput(Throughput::Elements(per as u64));
        for (what, set) in [("hit", &hits), ("miss", &misses)] {
            let sample: Vec<_> = order.iter().take(per).map(|&i| set[i]).collect();
            g.bench_with_input(
                BenchmarkId::new(format!("{what}/single"), n),
                &sample,
                |b, s| {
                    b.iter(|| {
                        let mut found = 0;
                        for (k, side, h) in s {
                            found += table.lookup(k, *side, *h).is_some() as usize;
                        }
                        found
                    })
                },
            );
            let mut out = Vec::with_capacity(BURST);
            g.bench_with_input(
                BenchmarkId::new(format!("{what}/prefetch_burst32"), n),
                &sample,
                |b, s| {
                    b.iter(|| {
                        let mut found = 0;
                        for chunk in s.chunks(BURST) {
                            table.lookup_batch(chunk, &mut out);
                            found += out.iter().filter(|o| o.is_some()).count();
                        }
                        found
                    })
                },
            );
        }
    }
    g.finish();

    // the index keyed by the RSS hash (asymmetric default key: full entropy) vs by a
    // software hash of the key (what symmetric steering needs), 1 M flows
    let mut g = c.benchmark_group("flow_table_index_1M");
    g.sample_size(20);
    let n = 1_000_000u32;
    let per = n as usize;
    g.throughput(Throughput::Elements(per as u64));
    for (name, key, index) in [
        (
            "rss_hash_default_key",
            RssKey::DEFAULT,
            state::IndexHash::Rss,
        ),
        (
            "key_mix_symmetric_key",
            RssKey::SYMMETRIC,
            state::IndexHash::Key,
        ),
        (
            "rss_hash_symmetric_key",
            RssKey::SYMMETRIC,
            state::IndexHash::Rss,
        ),
    ] {
        let t = Toeplitz::new(key);
        let cfg = TableConfig {
            capacity: n as usize,
            slots: 3,
            index,
            ..Default::default()
        };
        let mut table: FlowTable<Option<[u64; 4]>> = FlowTable::new(cfg);
        let hits = reqs(n, 0, &t);
        for (k, s, h) in &hits {
            table.insert(*k, *s, *h, |_, _, _| {}).unwrap();
        }
        let sample: Vec<_> = (0..per).map(|i| hits[(i * 7_919) % n as usize]).collect();
        g.bench_function(format!("hit/single/{name}"), |b| {
            b.iter(|| {
                sample
                    .iter()
                    .filter(|(k, s, h)| table.lookup(k, *s, *h).is_some())
                    .count()
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);

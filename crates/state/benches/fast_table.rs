//! GranularNF's fast table in front of the flow table, on a skewed trace: Zipf
//! α = 1.1 over 1 M flows (the hottest 5 000 carry ≈ 78 % of packets), each
//! lookup followed by an update of the flow's slot as an NF would do. Without a
//! fast table and with 4 096 and 16 384 entries, one at a time and in prefetching
//! bursts of 32, in one run.
//!
//! `cargo bench -p flowshift-state --bench fast_table`

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use rand::{seq::SliceRandom, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Zipf};
use state::{FlowKey, FlowTable, Side, TableConfig};
use std::net::{IpAddr, Ipv4Addr};
use wire::FiveTuple;

fn tuple(i: u32) -> FiveTuple {
    FiveTuple {
        src: IpAddr::V4(Ipv4Addr::from(
            0x0a00_0000 | (i.wrapping_mul(2_654_435_761) >> 8),
        )),
        dst: IpAddr::V4(Ipv4Addr::from(0xc612_0000 | i & 0xffff)),
        src_port: (i % 60_000) as u16 + 1024,
        dst_port: 443,
        proto: 6,
    }
}

/// Looks every packet's flow up and updates its state, one at a time.
fn single(table: &mut FlowTable<Option<[u64; 4]>>, trace: &[(FlowKey, Side, u32)]) -> u64 {
    let mut sum = 0u64;
    for (k, s, h) in trace {
        let l = table.lookup(k, *s, *h).unwrap();
        let st = table.slot_mut(l.id, 1).as_mut().unwrap();
        st[0] += 1;
        sum += st[0];
    }
    sum
}

fn bench(c: &mut Criterion) {
    // `cargo test --all-targets` runs this once, unoptimized: small sizes then
    let full = std::env::args().any(|a| a == "--bench");
    let (flows, lookups) = if full {
        (1_000_000u32, 2_000_000usize)
    } else {
        (10_000, 20_000)
    };
    let mut rng = ChaCha8Rng::seed_from_u64(11);
    let keys: Vec<(FlowKey, Side, u32)> = (0..flows)
        .map(|i| {
            let (k, s) = FlowKey::of(&tuple(i));
            (k, s, i.wrapping_mul(0x9e37_79b9))
        })
        .collect();
    // rank → flow: the hot flows are scattered over the table, as in a real trace
    let mut perm: Vec<u32> = (0..flows).collect();
    perm.shuffle(&mut rng);
    let zipf = Zipf::new(u64::from(flows), 1.1).unwrap();
    let trace: Vec<(FlowKey, Side, u32)> = (0..lookups)
        .map(|_| keys[perm[zipf.sample(&mut rng) as usize - 1] as usize])
        .collect();

    let variants = [0usize, 4096, 16_384];
    let mut tables: Vec<(String, FlowTable<Option<[u64; 4]>>)> = variants
        .iter()
        .map(|&fast| {
            let mut table = FlowTable::new(TableConfig {
                capacity: flows as usize,
                slots: 3,
                fast_entries: fast,
                ..Default::default()
            });
            for (k, s, h) in &keys {
                let id = table.insert(*k, *s, *h, |_, _, _| {}).unwrap();
                *table.slot_mut(id, 1) = Some([0; 4]);
            }
            // warm the fast table up on the trace once
            for (k, s, h) in &trace {
                table.lookup(k, *s, *h);
            }
            let name = if fast == 0 {
                "no_fast_table".to_string()
            } else {
                format!("fast_table_{fast}")
            };
            (name, table)
        })
        .collect();

    // This machine's speed drifts by 2x over minutes, so the criterion groups below
    // (one variant after the other) are backed by an interleaved A/B/C comparison:
    // every round times each variant once over the whole trace; the median per
    // variant and the ratios to the first are printed.
    if full {
        let rounds = 9;
        let mut ns = vec![Vec::new(); tables.len()];
        for _ in 0..rounds {
            for (v, (_, table)) in tables.iter_mut().enumerate() {
                let t0 = std::time::Instant::now();
                std::hint::black_box(single(table, &trace));
                ns[v].push(t0.elapsed().as_nanos() as f64 / trace.len() as f64);
            }
        }
        let med = |v: &mut Vec<f64>| {
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        let base = med(&mut ns[0]);
        for (v, (name, _)) in tables.iter().enumerate() {
            let m = med(&mut ns[v]);
            eprintln!(
                "interleaved, single lookups: {name}: {m:.1} ns/lookup, {:.2} Mlookups/s, \
                 speed-up ×{:.2} over no_fast_table",
                1e3 / m,
                base / m
            );
        }
    }

    let mut g = c.benchmark_group("fast_table_zipf1.1");
    g.sample_size(10);
    g.throughput(Throughput::Elements(lookups as u64));
    for (name, table) in &mut tables {
        let name = name.clone();
        g.bench_function(BenchmarkId::new("single", &name), |b| {
            b.iter(|| single(table, &trace))
        });
        let mut out = Vec::with_capacity(32);
        g.bench_function(BenchmarkId::new("burst32", &name), |b| {
            b.iter(|| {
                let mut sum = 0u64;
                for chunk in trace.chunks(32) {
                    table.lookup_batch(chunk, &mut out);
                    for l in &out {
                        let st = table.slot_mut(l.unwrap().id, 1).as_mut().unwrap();
                        st[0] += 1;
                        sum += st[0];
                    }
                }
                sum
            })
        });
        if let Some(f) = table.fast_stats() {
            eprintln!(
                "{name}: fast-table hit ratio {:.1} % ({} refreshes, {} keys placed by the last)",
                100.0 * f.hits as f64 / (f.hits + f.misses).max(1) as f64,
                f.refreshes,
                f.placed
            );
        }
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);

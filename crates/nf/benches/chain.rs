//! ns per packet for each NF alone and for the FW+NAT chain, on a 100 K-flow trace
//! of 64 B packets, in memory, one thread, in one run (so ratios are comparable).
//!
//! `cargo bench -p flowshift-nf --bench chain`
//!
//! Each iteration processes the whole trace (fresh copies of the packets; the flow
//! state stays warm across iterations, as in a long run).

use std::path::Path;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use nf::{Chain, ChainConfig, Packet, Shard, Verdict};
use trace::{Generator, SizeDist, TraceSpec};

const FW: &str = "[[nf]]\nkind = \"firewall\"\nrules = \"allow any 10.0.0.0/8 -> any\"\n";
const NAT: &str =
    "[[nf]]\nkind = \"nat\"\ninternal = \"10.0.0.0/8\"\nexternal = [\"203.0.113.0/24\"]\n";
const MON: &str = "[[nf]]\nkind = \"monitor\"\n";
const SEQ: &str = "[[nf]]\nkind = \"seqcheck\"\n";

fn setup(nfs: &[&str], frames: &[(u64, Vec<u8>)]) -> (Chain, Vec<Shard>, Vec<Packet>) {
    // 100 K flows over 16 shards: ≈ 6 300 per shard; size the tables for that
    let toml = format!("[table]\ncapacity = 16384\n{}", nfs.concat());
    let c = ChainConfig::from_toml(&toml)
        .unwrap()
        .build(Path::new("."))
        .unwrap();
    let shards = c.new_shards();
    let pkts = frames
        .iter()
        .map(|(t, f)| c.packet(f.clone(), *t).unwrap())
        .collect();
    (c, shards, pkts)
}

fn bench(cr: &mut Criterion) {
    let spec = TraceSpec {
        flows: 100_000,
        packets: 1_000_000,
        active_flows: 100_000,
        sizes: SizeDist::Fixed(64),
        tcp_share: 0.9,
        ..Default::default()
    };
    let frames: Vec<(u64, Vec<u8>)> = Generator::new(&spec)
        .unwrap()
        .map(|p| (p.ts_ns, p.frame))
        .collect();
    let n = frames.len() as u64;
    let mut g = cr.benchmark_group("chain_100k_flows_64B");
    g.throughput(Throughput::Elements(n));
    g.sample_size(10);
    let variants: [(&str, Vec<&str>); 6] = [
        ("seqcheck", vec![SEQ]),
        ("monitor", vec![MON]),
        ("firewall", vec![FW]),
        ("nat", vec![NAT]),
        ("fw+nat", vec![FW, NAT]),
        ("fw+nat+seqcheck", vec![FW, NAT, SEQ]),
    ];
    for (name, nfs) in variants {
        let (mut c, mut shards, pkts) = setup(&nfs, &frames);
        g.bench_function(format!("{name}/single"), |b| {
            b.iter_batched(
                || pkts.clone(),
                |mut ps| {
                    let mut fwd = 0u64;
                    for p in ps.iter_mut() {
                        let s = c.shard_of(p.hash);
                        fwd += u64::from(c.process(&mut shards[s], p, p.ts_ns) == Verdict::Forward);
                    }
                    fwd
                },
                BatchSize::PerIteration,
            )
        });
        if name == "fw+nat" {
            // bursts of 32 in arrival order (as a worker polls its queue), with
            // the burst's lookups prefetched
            let (mut c, shards, pkts) = setup(&nfs, &frames);
            let mut shards: Vec<Option<Shard>> = shards.into_iter().map(Some).collect();
            let mut out = Vec::new();
            g.bench_function(format!("{name}/burst32"), |b| {
                b.iter_batched(
                    || pkts.clone(),
                    |mut ps| {
                        let mut fwd = 0usize;
                        for chunk in ps.chunks_mut(32) {
                            let now = chunk[0].ts_ns;
                            c.process_burst(&mut shards, chunk, now, &mut out);
                            fwd += out.iter().filter(|v| **v == Verdict::Forward).count();
                        }
                        fwd
                    },
                    BatchSize::PerIteration,
                )
            });
        }
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);

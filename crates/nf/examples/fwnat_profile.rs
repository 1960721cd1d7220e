//! Drives FW+NAT over a 100 K-flow, 64 B trace in bursts, three times: a first
//! pass (`create`) creates every flow, the second (`steady`), one trace span
//! later, is the established-flow path, and the third (`recreate`), after
//! every flow expired, creates them again in memory the first pass touched.
//! Profile with `valgrind --tool=callgrind --toggle-collect='*steady*'
//! target/release/examples/fwnat_profile` (or `'*create*'` for new flows).

use std::path::Path;

use nf::{ChainConfig, Shard};
use trace::{Generator, SizeDist, TraceSpec};

fn main() {
    let spec = TraceSpec {
        flows: 100_000,
        packets: 600_000,
        active_flows: 100_000,
        sizes: SizeDist::Fixed(64),
        ..Default::default()
    };
    let toml = "[table]\ncapacity = 16384\n[[nf]]\nkind = \"firewall\"\nrules = \"allow any 10.0.0.0/8 -> any\"\n\
                [[nf]]\nkind = \"nat\"\ninternal = \"10.0.0.0/8\"\nexternal = [\"203.0.113.0/24\"]\n";
    let mut c = ChainConfig::from_toml(toml)
        .unwrap()
        .build(Path::new("."))
        .unwrap();
    let mut shards: Vec<Option<Shard>> = c.new_shards().into_iter().map(Some).collect();
    let pkts: Vec<_> = Generator::new(&spec)
        .unwrap()
        .map(|p| c.packet(p.frame, p.ts_ns).unwrap())
        .collect();
    let mut first = pkts.clone();
    let t = std::time::Instant::now();
    create(&mut c, &mut shards, &mut first);
    eprintln!(
        "TIMING create {:.1}",
        t.elapsed().as_nanos() as f64 / 600000.0
    );
    // the same packets one span later, as a second lap of the trace
    let span = pkts.last().map_or(0, |p| p.ts_ns - pkts[0].ts_ns) + 1;
    let mut again = pkts;
    for p in &mut again {
        p.ts_ns += span;
    }
    let mut third = again.clone();
    let t = std::time::Instant::now();
    steady(&mut c, &mut shards, &mut again);
    eprintln!(
        "TIMING steady {:.1}",
        t.elapsed().as_nanos() as f64 / 600000.0
    );
    // every flow expired, then created again in the memory the first pass
    // touched: creation without first-touch page faults
    let later = again.last().map_or(0, |p| p.ts_ns) + 86_400_000_000_000 * 10;
    for s in shards.iter_mut().flatten() {
        c.expire(s, later);
    }
    for p in &mut third {
        p.ts_ns += later;
    }
    let t = std::time::Instant::now();
    recreate(&mut c, &mut shards, &mut third);
    eprintln!(
        "TIMING recreate {:.1}",
        t.elapsed().as_nanos() as f64 / 600000.0
    );
    println!("{:?}", c.counters());
}

#[inline(never)]
fn recreate(c: &mut nf::Chain, shards: &mut [Option<Shard>], pkts: &mut [nf::Packet]) {
    // (a burst argument of its own, so it is not folded into `create`)
    pass(c, shards, pkts, std::hint::black_box(64) / 2)
}

fn pass(c: &mut nf::Chain, shards: &mut [Option<Shard>], pkts: &mut [nf::Packet], burst: usize) {
    let mut out = Vec::new();
    for chunk in pkts.chunks_mut(burst) {
        let now = chunk[0].ts_ns;
        c.process_burst(shards, chunk, now, &mut out);
    }
}

#[inline(never)]
fn create(c: &mut nf::Chain, shards: &mut [Option<Shard>], pkts: &mut [nf::Packet]) {
    // (each pass its own burst argument, so the two are not folded into one)
    pass(c, shards, pkts, std::hint::black_box(32))
}

#[inline(never)]
fn steady(c: &mut nf::Chain, shards: &mut [Option<Shard>], pkts: &mut [nf::Packet]) {
    pass(c, shards, pkts, 32)
}

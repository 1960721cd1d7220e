//! Drives FW+NAT over a 100 K-flow, 64 B trace in bursts, twice: a first pass
//! creates every flow, the second (`steady`) is the established-flow path. Profile
//! with `valgrind --tool=callgrind --toggle-collect='*steady*'
//! target/release/examples/fwnat_profile` (or `'*process_burst*'` for both).

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
    pass(&mut c, &mut shards, &mut first);
    let mut again = pkts;
    steady(&mut c, &mut shards, &mut again);
    println!("{:?}", c.counters());
}

fn pass(c: &mut nf::Chain, shards: &mut [Option<Shard>], pkts: &mut [nf::Packet]) {
    let mut out = Vec::new();
    for chunk in pkts.chunks_mut(32) {
        let now = chunk[0].ts_ns;
        c.process_burst(shards, chunk, now, &mut out);
    }
}

#[inline(never)]
fn steady(c: &mut nf::Chain, shards: &mut [Option<Shard>], pkts: &mut [nf::Packet]) {
    pass(c, shards, pkts)
}
